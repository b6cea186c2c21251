"""The collector of problems: each as ``file:line: field: what``, all reported at once."""

from __future__ import annotations

from runner._schema import KeyPath, LineFinder, path_of


class Collector:
    """The problems found in one spec file, in the order they were found.

    The line of a field is found by :mod:`runner._schema` (``tomllib`` reports none).
    """

    def __init__(self, file: str, lines: LineFinder | None = None) -> None:
        self.file = file
        self.lines = lines
        self.problems: list[str] = []

    def where(self, path: KeyPath) -> str:
        """``file:line`` of the key at ``path``, or ``file`` when it has no line."""
        line = self.lines.line(path) if self.lines is not None else None
        return f"{self.file}:{line}" if line else self.file

    def add(self, field_name: str, message: str, path: KeyPath | None = None) -> None:
        """Record a problem of ``field_name`` (its line from ``path``, else from the name)."""
        where = self.where(path if path is not None else path_of(field_name))
        self.problems.append(f"{where}: {field_name}: {message}")
