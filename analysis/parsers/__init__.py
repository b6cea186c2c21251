"""The response parsers: one module per kind (analysis side).

Each module (``multiple_choice.py`` for ``multiple-choice``, ...) defines a module-level
``PARSER``, a :class:`ResponseParser` owning how that parser reads a response (its function,
which lives in the module) and its closed set of answers. They are found here by
:mod:`pkgutil` (every module whose name does not start with ``_``) into :data:`REGISTRY`,
ordered by each ``PARSER.order``: the vocabulary of ``tests/vectors/vocabulary.json``
"parsers". :class:`ParserConfig` and :func:`parse_response` dispatch through the registry.
Adding a parser is one module here and one in :mod:`runner.parsers` (``docs/contributing.md``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from analysis.parsers._base import ResponseParser
from analysis.parsers._core import MODES, Parsed, ParseError, _unparseable, response_text

__all__ = ["PARSERS", "REGISTRY", "ParserConfig", "ResponseParser", "lookup", "parse_response"]


def _discover() -> dict[str, ResponseParser]:
    """Every kind module's ``PARSER``, by name, in ``order`` (each name and order once)."""
    found: list[ResponseParser] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        parser = getattr(module, "PARSER", None)
        if not isinstance(parser, ResponseParser):
            raise TypeError(f"{module.__name__} defines no PARSER (a ResponseParser)")
        found.append(parser)
    found.sort(key=lambda p: p.order)
    for kind in ("name", "order"):
        values = [getattr(p, kind) for p in found]
        if len(set(values)) != len(values):
            raise ValueError(f"two parser kinds share a {kind}: {values}")
    return {p.name: p for p in found}


REGISTRY: Final[Mapping[str, ResponseParser]] = MappingProxyType(_discover())
"""Every parser kind by its name, in the order of ``runner.spec.PARSERS``."""

PARSERS: Final[dict[str, Callable[[str], Parsed]]] = {
    name: parser.default for name, parser in REGISTRY.items()
}
"""Parsers by the names of ``runner.spec.PARSERS``, with their defaults (letters ABCD,
mode exactly-one); :class:`ParserConfig` applies a study's own."""


def lookup(parser: str) -> ResponseParser | None:
    """The kind called ``parser``, or None when there is none (``ddx``, ``judge:...``)."""
    return REGISTRY.get(parser)


def _entry(parser: str) -> ResponseParser:
    """The kind called ``parser``; :class:`KeyError` for an unknown parser."""
    entry = REGISTRY.get(parser)
    if entry is None:
        raise KeyError(f"unknown parser {parser!r}")
    return entry


@dataclass(frozen=True)
class ParserConfig:
    """A study's parser with its settings: ``[response] parser``, ``letters`` and ``mode``."""

    parser: str
    letters: str = "ABCD"
    mode: str = "exactly-one"

    @classmethod
    def from_plan(cls, response: dict[str, Any]) -> ParserConfig:
        """From the ``response`` member of ``protocol.locked`` (absent members: defaults)."""
        return cls(
            str(response.get("parser", "tumbling-e-json")),
            str(response.get("letters") or "ABCD"),
            str(response.get("mode") or "exactly-one"),
        )

    def check(self) -> None:
        """Raise :class:`KeyError` for an unknown parser, :class:`ValueError` for bad settings."""
        entry = _entry(self.parser)
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}: {self.mode!r}")
        if self.mode != "exactly-one" and not entry.modes:
            raise ValueError(f"parser {self.parser!r} has only the mode exactly-one")

    def parse(self, text: str) -> Parsed:
        """Parse one response text with this parser and its settings.

        A parser with modes checks its own settings; the others are checked here first.
        """
        entry = _entry(self.parser)
        if not entry.modes:
            self.check()
        return entry.parse(text, self.letters, self.mode)

    def reader(self) -> Callable[[bytes, str], Parsed]:
        """:func:`parse_response` with these settings, checked once: ``read(raw, format)``.

        For scoring many responses with one study's parser: the same result as
        ``parse_response(raw, format, self)`` for every body, without looking the parser up
        and checking the settings again for each. Raises as :meth:`check` does.
        """
        self.check()
        entry = _entry(self.parser)
        letters, mode = self.letters, self.mode
        read_body = entry.read_body
        if read_body is not None:
            return lambda raw, format: read_body(raw, format, letters)
        parse = entry.parse

        def read(raw: bytes, format: str) -> Parsed:
            try:
                text = response_text(raw, format)
            except ParseError as exc:
                return _unparseable(str(exc))
            return parse(text, letters, mode)

        return read


def parse_response(raw: bytes, format: str, parser: str | ParserConfig) -> Parsed:
    """Take the text from a stored body with :func:`response_text` and parse it.

    A body from which no text can be taken gives status ``"unparseable"`` with the
    :class:`ParseError` message as its problem. ``parser`` is a :class:`ParserConfig`, or a
    key of :data:`PARSERS` (its defaults); an unknown name raises :class:`KeyError` (that is a
    study error, not a response error). A parser that reads the body itself (``cloze``) is
    given it.
    """
    config = parser if isinstance(parser, ParserConfig) else ParserConfig(parser)
    config.check()
    entry = _entry(config.parser)
    if entry.read_body is not None:
        return entry.read_body(raw, format, config.letters)
    try:
        text = response_text(raw, format)
    except ParseError as exc:
        return _unparseable(str(exc))
    return config.parse(text)
