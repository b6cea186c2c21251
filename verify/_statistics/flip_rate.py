"""``flip-rate``: how often an arm's answer changes between two variants (mcq-statistics.md §11)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from verify import _mcq as vm
from verify import _mcqhyp as mh
from verify._statistics._base import (
    Case,
    Decision,
    McqRows,
    Statistic,
    always,
    level_text,
    mcq_case_values,
    mcq_interval_cells,
    mcq_setting,
)
from verify._statistics._cells import pct


def mcq_values(rows: McqRows, models: Sequence[str]) -> dict[str, Any]:
    """The flip rate between the two variants, with its one-sided interval."""
    pooled, _, _, h = rows
    letters, model, iterations, seed = mcq_setting(rows)
    v1, v2 = h["variants"]
    flip = vm.flip_rate_between(
        pooled,
        (h["arm"], v1, model),
        (h["arm"], v2, model),
        h.get("basis", "answer"),
        iterations,
        seed,
        mh.level(h, one_sided=True),
        letters,
    )
    return flip | {"estimate": flip["rate"]}


def values(case: Case) -> dict[str, Any]:
    """§11 on the dataset's trial tables."""
    return mcq_case_values(case, mcq_values)


def decide(h: dict[str, Any], v: dict[str, Any]) -> Decision:
    """The interval's lower bound above ``min_pp``, or its upper bound below ``max_pp``."""
    lower, upper, est = v["lower"], v["upper"], v["estimate"]
    level = level_text(v["conf"])
    if h.get("min_pp") is not None:
        ok = lower is not None and lower * 100 > float(h["min_pp"])
        rule = f"{level} interval lower bound > {float(h['min_pp']):g} pp"
    else:
        ok = upper is not None and upper * 100 < float(h["max_pp"])
        rule = f"{level} interval upper bound < {float(h['max_pp']):g} pp"
    verdict = "supported" if ok else "not supported"
    return verdict, {"rule": rule, "estimate": est, "lower": lower, "upper": upper}


def estimate_text(v: dict[str, Any]) -> str:
    """The flip rate and its interval."""
    return (
        f"flip rate {pct(v.get('rate'))} ({pct(v.get('conf'), 0)} CI "
        f"{pct(v.get('lower'))} to {pct(v.get('upper'))})"
    )


def mcq_cells(v: dict[str, Any]) -> tuple[Any, str, str]:
    """Pairs, flips and the interval."""
    return mcq_interval_cells(v, v.get("n_pairs"), f"{v.get('flips')} flips ({v.get('basis')})")


STATISTIC = Statistic(
    name="flip-rate",
    order=7,
    values=values,
    decide=decide,
    estimate_text=estimate_text,
    mcq=always,
    mcq_values=mcq_values,
    mcq_listed=always,
    mcq_cells=mcq_cells,
)
