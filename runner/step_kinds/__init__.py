"""The step kinds a ``[steps.<NAME>]`` table may name: one module per kind (writer side).

Each module (``text.py``, ``label.py``, ``json.py``) defines a module-level ``KIND``, a
:class:`StepKind` owning its step-table key and how it parses a step response. They are found
here by :mod:`pkgutil` (every module whose name does not start with ``_``) into
:data:`REGISTRY`, ordered by each ``KIND.order``; :data:`STEP_KINDS` is its keys, the vocabulary
of ``tests/vectors/vocabulary.json`` "step_kinds". Adding a step kind is one module here and one
in ``verify/_step_kinds/`` (``docs/contributing.md``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from runner.step_kinds._base import StepKind, StepParts

__all__ = ["REGISTRY", "STEP_KINDS", "StepKind", "StepParts", "owner"]


def _discover() -> dict[str, StepKind]:
    """Every kind module's ``KIND``, by name, in ``order`` (each name and order once)."""
    found: list[StepKind] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        kind = getattr(module, "KIND", None)
        if not isinstance(kind, StepKind):
            raise TypeError(f"{module.__name__} defines no KIND (a StepKind)")
        found.append(kind)
    found.sort(key=lambda k: k.order)
    for attribute in ("name", "order"):
        values = [getattr(k, attribute) for k in found]
        if len(set(values)) != len(values):
            raise ValueError(f"two step kinds share a {attribute}: {values}")
    return {k.name: k for k in found}


REGISTRY: Final[Mapping[str, StepKind]] = MappingProxyType(_discover())
"""Every step kind by its ``parser`` name, in :data:`STEP_KINDS` order."""
STEP_KINDS: Final = tuple(REGISTRY)
"""The step parsers a step may name, in registry order."""


def owner(key: str) -> StepKind | None:
    """The kind that takes the step-table ``key`` (``labels``, ``schema``), or None."""
    return next((k for k in REGISTRY.values() if k.key == key), None)
