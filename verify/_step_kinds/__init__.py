"""The verifier's own step-kind registry: one module per step parser (``docs/prompts.md`` §8).

Each module (``text.py``, ``label.py``, ``json.py``) defines a module-level ``KIND``
(:class:`~verify._step_kinds._base.StepKind`), found here by :mod:`pkgutil` into
:data:`REGISTRY` in each ``KIND.order``: the vocabulary of ``tests/vectors/vocabulary.json``
"step_kinds", which the writer's registry is held to as well. ``verify/_steps.py`` asks it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from verify._step_kinds._base import StepKind

__all__ = ["REGISTRY", "StepKind"]


def _discover() -> dict[str, StepKind]:
    """Every kind module's ``KIND``, by name, in ``order`` (each name and order once)."""
    found: list[StepKind] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        kind = getattr(module, "KIND", None)
        if not isinstance(kind, StepKind):
            raise TypeError(f"{module.__name__} defines no KIND")
        found.append(kind)
    found.sort(key=lambda k: k.order)
    for attribute in ("name", "order"):
        values = [getattr(k, attribute) for k in found]
        if len(set(values)) != len(values):
            raise ValueError(f"two step kinds share a {attribute}: {values}")
    return {k.name: k for k in found}


REGISTRY: Final[Mapping[str, StepKind]] = MappingProxyType(_discover())
"""Every step kind by its ``parser`` name, in the vocabulary's order."""
