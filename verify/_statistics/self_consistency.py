"""``self-consistency``: the majority of samples against a single one (mcq-statistics.md §11)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from verify import _mcq as vm
from verify import _mcqhyp as mh
from verify._restats import bootstrap_clustered
from verify._statistics._base import (
    Case,
    McqRows,
    Statistic,
    always,
    interval_rule,
    mcq_case_values,
    mcq_interval_cells,
    mcq_setting,
)
from verify._statistics._cells import pct


def _ran(by_model: list[dict[str, Any]], arm: str, models: Sequence[str]) -> list[str]:
    """The models the arm ran, in model order (unlisted ones first)."""
    present = {r["model"] for r in by_model if r["arm"] == arm}
    order = list(models)
    return sorted(present, key=lambda m: (order.index(m) if m in order else -1, m))


def mcq_values(rows: McqRows, models: Sequence[str]) -> dict[str, Any]:
    """Per model the majority answers; the question-clustered bootstrap of their gain."""
    _, by_model, plan, h = rows
    letters, _, iterations, seed = mcq_setting(rows)
    variant = h.get("variant") or mh.ORIGINAL
    results, gains, items, runs = [], [], [], []
    for j, m in enumerate(_ran(by_model, h["arm"], models)):
        sc = vm.self_consistency(
            by_model,
            (h["arm"], variant, m),
            int(h["samples"]),
            mh.temperature(plan, h["arm"], m),
            mh.incomplete_rule(h),
            letters=letters,
        )
        results.append(sc)
        correct = {
            r["trial"]: r["correct"] for r in by_model if (r["arm"], r["model"]) == (h["arm"], m)
        }
        for x, g in zip(sc["answers"], mh.gains(sc["answers"], correct), strict=True):
            gains.append(g)
            items.append(x["item"])
            runs.append(j)
    if not gains:
        raise vm.McqStatError("self-consistency: no trials")
    boot = bootstrap_clustered(gains, items, runs, iterations, seed, mh.level(h), unit="question")
    majority = sum(r["correct"] for r in results) / len(gains)
    return {
        "results": results,
        "n_units": len(gains),
        "n_items": boot["n_clusters"],
        "excluded": sum(len(r["exclusions"]) for r in results),
        "accuracy_majority": majority,
        "accuracy_single": majority - boot["estimate"],
        "estimate": boot["estimate"],
        "lower": boot["lower"],
        "upper": boot["upper"],
        "conf": boot["conf"],
        "iterations": boot["iterations"],
        "seed": boot["seed"],
        "ci_method": mh.CI_METHOD,
    }


def values(case: Case) -> dict[str, Any]:
    """§11 on the dataset's trial tables."""
    return mcq_case_values(case, mcq_values)


def mcq_cells(v: dict[str, Any]) -> tuple[Any, str, str]:
    """Units, the majority's and a single sample's accuracy, and the interval."""
    stat = f"majority {pct(v.get('accuracy_majority'))} vs single {pct(v.get('accuracy_single'))}"
    return mcq_interval_cells(v, v.get("n_units"), stat)


STATISTIC = Statistic(
    name="self-consistency",
    order=10,
    values=values,
    decide=interval_rule,
    mcq=always,
    mcq_values=mcq_values,
    mcq_listed=always,
    mcq_cells=mcq_cells,
)
