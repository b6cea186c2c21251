"""The writer's statistic registry: one module per statistic kind (``docs/contributing.md``).

Every module of this package whose name does not start with ``_`` defines a module-level
``STATISTIC`` (:class:`~analysis.statistics._base.Statistic`); they are found with
:mod:`pkgutil` and kept in :data:`REGISTRY`, ordered by their ``order`` (the order of
``runner.spec.TESTS`` and of ``tests/vectors/vocabulary.json`` "tests"). Adding a statistic
is one module here (and its spec side in ``runner``, its verifier side in ``verify``).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from analysis import _stats as stats
from analysis.mcq import _kinds as mcq_tests
from analysis.mcq import _stats as mcq
from analysis.statistics._base import Data, Posthoc, Statistic

__all__ = [
    "MIXED_MODEL",
    "POSTHOC_TESTS",
    "REGISTRY",
    "TESTS",
    "Data",
    "Posthoc",
    "Statistic",
    "decide",
    "is_mixed_model",
    "is_seed002",
    "kind_of",
    "registers_seed002",
    "seed002_values",
    "statistic",
]


def _discover() -> dict[str, Statistic]:
    """Each public module's ``STATISTIC``, by kind, in ``order``.

    A module without one, or two modules of one kind or one order, is a programming error
    named here.
    """
    found: list[Statistic] = []
    for module in pkgutil.iter_modules(__path__):
        if module.name.startswith("_"):
            continue
        loaded = importlib.import_module(f"{__name__}.{module.name}")
        entry = getattr(loaded, "STATISTIC", None)
        if not isinstance(entry, Statistic):
            raise TypeError(f"{loaded.__name__} defines no STATISTIC (a Statistic)")
        found.append(entry)
    found.sort(key=lambda s: s.order)
    keys = [s.key for s in found]
    orders = [s.order for s in found]
    if len(set(keys)) != len(keys) or len(set(orders)) != len(orders):
        raise TypeError(f"analysis.statistics: kinds or orders repeat ({keys}, {orders})")
    return {s.key: s for s in found}


REGISTRY: dict[str, Statistic] = _discover()
"""Every statistic kind, in the vocabulary's order."""
TESTS: tuple[str, ...] = tuple(REGISTRY)
"""The registered kinds (``test`` of a ``[[hypotheses]]`` table), in order."""
MIXED_MODEL: Statistic = next(s for s in REGISTRY.values() if s.mixed_model)
"""The kind that is a contrast of the registered mixed model (``lmm``)."""
POSTHOC_TESTS: tuple[str, ...] = tuple(k for k, s in REGISTRY.items() if s.posthoc is not None)
"""The post-hoc analysis kinds (``ledger posthoc --test``), in order."""


def statistic(test: Any) -> Statistic:
    """The registered kind ``test``; an unknown one raises :class:`analysis._stats.StatsError`."""
    found = REGISTRY.get(str(test)) if isinstance(test, str) else None
    if found is None:
        raise stats.StatsError(f"unknown test {test!r}")
    return found


def kind_of(h: dict[str, Any]) -> Statistic | None:
    """The registered kind of hypothesis (or result) ``h``, or ``None`` for an unknown one."""
    return REGISTRY.get(str(h.get("test")))


def is_mixed_model(h: dict[str, Any]) -> bool:
    """Whether ``h`` is a contrast of the registered mixed model (``lmm``)."""
    found = kind_of(h)
    return found is not None and found.mixed_model


def is_seed002(h: dict[str, Any]) -> bool:
    """Whether hypothesis ``h`` (as locked) is one of seed 002's statistics (§11)."""
    found = kind_of(h)
    return found is not None and found.seed002(h)


def registers_seed002(plan: dict[str, Any]) -> bool:
    """Whether the plan registers a seed-002 hypothesis (then ``descriptive.mcq`` is made)."""
    return any(is_seed002(h) for h in plan.get("hypotheses") or [])


def seed002_values(
    pooled: mcq.Trials,
    by_model: mcq.Trials,
    plan: dict[str, Any],
    h: dict[str, Any],
    models: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The recorded ``values`` of one seed-002 hypothesis on given tables (§11 of the page).

    ``pooled`` has one model label, ``by_model`` each model's; ``models`` is the model order.
    Interval kinds give ``estimate``, ``lower``, ``upper``, ``conf``; ``mcnemar`` and ``gee``
    give ``p_raw`` and ``estimate``. Raises :class:`analysis.mcq._stats.McqError` (a ``StatsError``)
    when the data cannot give the statistic, naming what is missing.
    """
    found = REGISTRY.get(str(h["test"]))
    if found is None or found.seed002_values is None:
        raise mcq.McqError(f"unknown seed-002 test {h['test']!r}")
    return found.seed002_values(mcq_tests.tables(pooled, by_model, plan, models), h)


def decide(h: dict[str, Any], values: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(verdict, decided_by) of a computed hypothesis, by its kind's rule."""
    return statistic(h["test"]).decide(h, values)
