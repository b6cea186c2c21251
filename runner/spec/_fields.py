"""Reading typed fields of a table, each problem sent to the collector."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final

from ledger import describe_os_error, describe_utf8_error
from runner.spec._collector import Collector
from runner.statistics import _base as statistics

ID_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""An id or name of the spec: letters, digits, '.', '_' or '-', at most 64."""
MAX_REPLICATES: Final = 100_000  # with the schedule's own cap, runner._schedule.MAX_TRIALS


def section_table(c: Collector, data: dict[str, Any], name: str) -> dict[str, Any]:
    """The required table ``[name]`` ({} after a problem when missing or not a table)."""
    value = data.get(name)
    if value is None:
        c.add(name, "missing section")
        return {}
    if not isinstance(value, dict):
        c.add(name, "must be a table")
        return {}
    return value


def string(
    c: Collector, table: dict[str, Any], key: str, where: str, default: str | None = None
) -> str:
    """``table[key]`` as a non-empty string (``default`` when absent), else "" after a problem."""
    return statistics.text(c.add, table, key, where, default)


def name_list(c: Collector, h: dict[str, Any], key: str, where: str) -> tuple[str, ...] | None:
    """A non-empty list of distinct non-empty strings, or None when absent (errors collected)."""
    return statistics.name_list(c.add, h, key, where)


def int_seed(c: Collector, table: dict[str, Any], key: str, where: str) -> str:
    """A seed: a non-negative integer (or its digits), as text; "" after a problem."""
    value = table.get(key)
    if value is None:
        c.add(f"{where}.{key}", "missing")
        return ""
    if isinstance(value, bool) or not isinstance(value, int | str):
        c.add(f"{where}.{key}", f"must be an integer, got {value!r}")
        return ""
    text = str(value)
    if not re.fullmatch(r"0|[1-9][0-9]*", text):
        c.add(f"{where}.{key}", f"must be a non-negative integer, got {value!r}")
        return ""
    return text


def inside(c: Collector, root: Path, rel: str, where: str, *, directory: bool = False) -> Path:
    """``root / rel`` resolved: inside the study folder, an existing file (or directory)."""
    path = (root / rel).resolve()
    try:
        path.relative_to(root.resolve())
    except ValueError:
        c.add(where, f"{rel!r} is outside the study folder")
        return path
    if directory:
        if path.is_file():
            c.add(where, f"{rel!r} is a file, where a directory is expected")
        elif not path.is_dir():
            c.add(where, f"directory {rel!r} does not exist")
    elif path.is_dir():
        c.add(where, f"{rel!r} is a directory, where a file is expected")
    elif not path.is_file():
        c.add(where, f"file {rel!r} does not exist")
    return path


def read_text(c: Collector, path: Path, where: str) -> str | None:
    """The UTF-8 text of ``path``, or None after recording why it cannot be read."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        c.add(where, f"cannot read {describe_os_error(exc, path)}")
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        c.add(where, f"{path}: {describe_utf8_error(data, exc)}")
        return None
