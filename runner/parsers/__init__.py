"""The response parsers a study may name: one module per kind (spec side).

Each module (``multiple_choice.py`` for ``multiple-choice``, ...) defines a module-level
``SPEC``, a :class:`ParserSpec` owning what ``[response]`` allows with that parser. They are
found here by :mod:`pkgutil` (every module whose name does not start with ``_``) into
:data:`REGISTRY`, ordered by each ``SPEC.order``; :data:`PARSERS` is its keys, the vocabulary of
``tests/vectors/vocabulary.json`` "parsers". The groups :mod:`runner.spec` once listed by name
(:data:`VOCABULARY_PARSERS`, :data:`TEXT_PARSERS`, :data:`LETTER_PARSERS`,
:data:`SINGLE_ANSWER_PARSERS`) are derived from the entries. Adding a parser is one module here
and one in :mod:`analysis.parsers` (``docs/contributing.md``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from runner.parsers._base import ParserSpec

__all__ = [
    "LETTER_PARSERS",
    "PARSERS",
    "REGISTRY",
    "SINGLE_ANSWER_PARSERS",
    "TEXT_PARSERS",
    "VOCABULARY_PARSERS",
    "ParserSpec",
    "lookup",
]


def _discover() -> dict[str, ParserSpec]:
    """Every kind module's ``SPEC``, by name, in ``order`` (each name and order once)."""
    found: list[ParserSpec] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        spec = getattr(module, "SPEC", None)
        if not isinstance(spec, ParserSpec):
            raise TypeError(f"{module.__name__} defines no SPEC (a ParserSpec)")
        found.append(spec)
    found.sort(key=lambda s: s.order)
    for kind in ("name", "order"):
        values = [getattr(s, kind) for s in found]
        if len(set(values)) != len(values):
            raise ValueError(f"two parser kinds share a {kind}: {values}")
    return {s.name: s for s in found}


REGISTRY: Final[Mapping[str, ParserSpec]] = MappingProxyType(_discover())
"""Every parser kind by its name, in :data:`PARSERS` order."""
PARSERS: Final = tuple(REGISTRY)
"""Every parser a study may name (``docs/scoring.md``), in registry order."""
VOCABULARY_PARSERS: Final = tuple(n for n, s in REGISTRY.items() if s.modes)
"""Single-answer parsers with a closed set of labels (they take ``[response] mode``)."""
TEXT_PARSERS: Final = tuple(n for n, s in REGISTRY.items() if s.whole_text)
"""Single-answer parsers that compare the whole response text with the truth."""
LETTER_PARSERS: Final = tuple(n for n, s in REGISTRY.items() if s.letters)
"""Parsers whose answers are option letters (they take ``[response] letters``)."""
SINGLE_ANSWER_PARSERS: Final = tuple(n for n, s in REGISTRY.items() if s.single_answer)
"""Parsers scored against one answer per stimulus (``[stimuli] answer_column``)."""


def lookup(parser: str) -> ParserSpec | None:
    """The kind called ``parser``, or None when there is none (``ddx``, ``judge:...``)."""
    return REGISTRY.get(parser)
