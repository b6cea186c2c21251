"""``bootstrap``: the seeded percentile bootstrap of a − b (statistics.md, analysis.md §3)."""

from __future__ import annotations

from typing import Any

from verify import _restats as st
from verify._recompute.dataset import _Dataset
from verify._recompute.pairs import _pair_accuracies
from verify._statistics._base import Case, Decision, Statistic, excludes_zero, posthoc_contrast
from verify._statistics._cells import cell, fmt


def _diff(ds: _Dataset, plan: dict[str, Any], a: str, b: str) -> dict[str, Any]:
    design = plan["design"]
    return st.bootstrap_diff(
        *_pair_accuracies(ds, a, b),
        int(design["bootstrap_iterations"]),
        design["bootstrap_seed"],
    )


def values(case: Case) -> dict[str, Any]:
    """The bootstrap of a − b with the design's iterations and seed."""
    return _diff(case.ds, case.plan, case.a, case.b)


def decide(h: dict[str, Any], v: dict[str, Any]) -> Decision:
    """The 95% bootstrap interval excludes 0 (one-sided: above it), and the minimum."""
    lower, upper, est = v["lower"], v["upper"], v["estimate"]
    min_pp = v.get("min_difference_pp")
    ok = excludes_zero(h, lower, upper)
    if h.get("sides") == "one-sided":
        rule = "95% bootstrap CI lower bound > 0"
    else:
        rule = "95% bootstrap CI excludes 0"
    if min_pp is not None:
        ok = ok and est * 100 >= min_pp
        rule += f" and estimate >= {min_pp} pp"
    verdict = "supported" if ok else "not supported"
    return verdict, {"rule": rule, "estimate": est, "lower": lower, "upper": upper}


def posthoc(ds: _Dataset, plan: dict[str, Any], a: str, b: str) -> dict[str, Any]:
    """analysis.md §6: the bootstrap of a − b."""
    values = _diff(ds, plan, a, b)
    summary = posthoc_contrast(
        a,
        b,
        estimate=values["estimate"],
        lower=values["lower"],
        upper=values["upper"],
        p=None,
        conf=values["conf"],
    )
    return {**values, "contrast": summary}


def posthoc_cells(values: dict[str, Any], contrast: dict[str, Any]) -> tuple[str, str, str]:
    """The draws and the seed."""
    test = (
        f"percentile bootstrap, {fmt(values.get('iterations'))} draws (seed "
        f"{cell(values.get('seed'))})"
    )
    return test, "–", "–"


STATISTIC = Statistic(
    name="bootstrap",
    order=3,
    values=values,
    decide=decide,
    posthoc=posthoc,
    posthoc_cells=posthoc_cells,
)
