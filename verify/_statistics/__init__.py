"""The verifier's statistic registry: one module per kind of registered test.

Each module ``verify/_statistics/<kind>.py`` (the ``test`` with underscores) defines a
module-level ``STATISTIC`` (:class:`verify._statistics._base.Statistic`): the independent
recompute of a hypothesis of that kind, its decision rule, the tolerance it is compared at and
its report cells. The modules are discovered here into :data:`REGISTRY`, ordered by each
kind's ``order`` (the order of ``tests/vectors/vocabulary.json`` "tests"); the science checks
(:mod:`verify._recompute`) and the report check (:mod:`verify._archive.report`) ask the
registry and never name a test. Written from ``docs/statistics.md``, ``docs/analysis.md`` and
``docs/mcq-statistics.md``; imports nothing from ``ledger``, ``runner`` or ``analysis``.

Adding a kind: a module here with its ``STATISTIC`` (and its docs and conformance vectors).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence
from typing import Any

from verify._mcq import McqStatError
from verify._recompute.results import REL_TOL
from verify._statistics._base import (
    Case,
    Statistic,
    signed_effect,
    variants_of_arm,
    z_posthoc_cells,
)
from verify._statistics._cells import contrast_text

__all__ = [
    "POSTHOC_TESTS",
    "REGISTRY",
    "TESTS",
    "Case",
    "Statistic",
    "arm_text",
    "component_effect",
    "estimate_text",
    "get",
    "is_mcq",
    "mcq_values_from_rows",
    "posthoc_cells",
    "registers_mcq",
    "rel_tol",
]


def _discover() -> dict[str, Statistic]:
    found: list[Statistic] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        statistic = getattr(module, "STATISTIC", None)
        if not isinstance(statistic, Statistic):
            raise TypeError(f"verify/_statistics/{info.name}.py defines no STATISTIC")
        if statistic.name.replace("-", "_") != info.name:
            raise TypeError(f"verify/_statistics/{info.name}.py registers {statistic.name!r}")
        found.append(statistic)
    return {s.name: s for s in sorted(found, key=lambda s: s.order)}


REGISTRY: dict[str, Statistic] = _discover()
"""Every statistic kind by its ``test`` name, in the vocabulary's order."""
TESTS: tuple[str, ...] = tuple(REGISTRY)
POSTHOC_TESTS: tuple[str, ...] = tuple(
    s.name for s in REGISTRY.values() if s.posthoc is not None or s.posthoc_fits_model
)
"""analysis.md §6: the kinds of post-hoc analysis (the body's ``test``)."""


def get(test: Any) -> Statistic | None:
    """The kind a hypothesis's ``test`` names, or None for an unknown one."""
    return REGISTRY.get(test) if isinstance(test, str) else None


def is_mcq(h: dict[str, Any]) -> bool:
    """mcq-statistics.md §11: whether ``h`` is one of seed 002's registered statistics."""
    kind = get(h["test"])
    return kind is not None and kind.mcq(h)


def registers_mcq(plan: dict[str, Any]) -> bool:
    """Whether ``descriptive.mcq`` is part of the plan's results."""
    return any(is_mcq(h) for h in plan.get("hypotheses") or [])


def mcq_values_from_rows(
    pooled: list[dict[str, Any]],
    by_model: list[dict[str, Any]],
    plan: dict[str, Any],
    h: dict[str, Any],
    models: Sequence[str] = (),
) -> dict[str, Any]:
    """§11: a hypothesis's ``values`` on given checked rows (pooled: one model label)."""
    kind = get(h["test"])
    if kind is None or kind.mcq_values is None:
        raise McqStatError(f"unknown test {h['test']!r}")
    return kind.mcq_values((pooled, by_model, plan, h), models)


def component_effect(h: dict[str, Any], result: dict[str, Any]) -> str | None:
    """analysis.md "Component classes": what a computed result says of the components."""
    kind = get(h.get("test"))
    return (kind.component_effect if kind is not None else signed_effect)(h, result)


def arm_text(h: dict[str, Any]) -> str:
    """The report's "arms / variants" text of a hypothesis naming one arm."""
    kind = get(h.get("test"))
    return (kind.arm_text if kind is not None else variants_of_arm)(h)


def posthoc_cells(
    test: Any, values: dict[str, Any], contrast: dict[str, Any]
) -> tuple[str, str, str]:
    """The report's post-hoc row cells (test, ICC, caution) of a result of kind ``test``."""
    kind = get(test)
    return (kind.posthoc_cells if kind is not None else z_posthoc_cells)(values, contrast)


def estimate_text(test: Any, values: dict[str, Any]) -> str:
    """The hypothesis table's estimate cell of a computed result of kind ``test``."""
    kind = get(test)
    return (kind.estimate_text if kind is not None else contrast_text)(values)


def rel_tol(test: Any) -> float:
    """The relative tolerance the results of kind ``test`` are compared at."""
    kind = get(test)
    return kind.rel_tol if kind is not None else REL_TOL
