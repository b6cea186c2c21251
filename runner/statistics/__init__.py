"""The statistic kinds a ``[[hypotheses]]`` table may name: one module per kind (spec side).

Each module (``paired_t.py`` for ``paired-t``, ...) defines a module-level ``SPEC``, a
:class:`StatisticSpec` owning how a hypothesis of that kind is validated at lock. They are
found here by :mod:`pkgutil` (every module whose name does not start with ``_``) into
:data:`REGISTRY`, ordered by each ``SPEC.order``; :data:`TESTS` is its keys, the vocabulary of
``tests/vectors/vocabulary.json`` "tests". :mod:`runner.spec` asks the registry; adding a kind
is one module here (``docs/contributing.md``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from runner.statistics._base import KIND_ONLY_KEYS, StatisticSpec

__all__ = [
    "KIND_ONLY_KEYS",
    "MCQ_TESTS",
    "REGISTRY",
    "TESTS",
    "StatisticSpec",
    "lookup",
    "taking",
]


def _discover() -> dict[str, StatisticSpec]:
    """Every kind module's ``SPEC``, by name, in ``order`` (each name and order once)."""
    found: list[StatisticSpec] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        spec = getattr(module, "SPEC", None)
        if not isinstance(spec, StatisticSpec):
            raise TypeError(f"{module.__name__} defines no SPEC (a StatisticSpec)")
        found.append(spec)
    found.sort(key=lambda s: s.order)
    for kind in ("name", "order"):
        values = [getattr(s, kind) for s in found]
        if len(set(values)) != len(values):
            raise ValueError(f"two statistic kinds share a {kind}: {values}")
    return {s.name: s for s in found}


REGISTRY: Final[Mapping[str, StatisticSpec]] = MappingProxyType(_discover())
"""Every statistic kind by its ``test`` name, in :data:`TESTS` order."""
TESTS: Final = tuple(REGISTRY)
"""The ``test`` names a hypothesis may use, in registry order."""
MCQ_TESTS: Final = tuple(name for name, spec in REGISTRY.items() if spec.letters)
"""Seed 002's statistics (``docs/mcq-statistics.md`` §11): each reads option letters, so it
needs an item file and a letter parser (``multiple-choice`` or ``cloze``)."""


def lookup(test: str) -> StatisticSpec | None:
    """The kind called ``test``, or None when there is none."""
    return REGISTRY.get(test)


def taking(key: str) -> list[str]:
    """The kinds that take ``key``: those with ``own_keys`` first, each group in order."""
    ranked = sorted(REGISTRY.values(), key=lambda s: (not s.own_keys, s.order))
    return [s.name for s in ranked if key in s.takes]
