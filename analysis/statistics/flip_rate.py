"""``flip-rate``: how often an arm's answer changes between two variants (mcq-statistics §11)."""

from __future__ import annotations

from typing import Any

from analysis.mcq import _kinds as mcq_tests
from analysis.mcq import _stats as mcq
from analysis.statistics._base import Data, Statistic
from analysis.statistics._format import interval_cell, pct


def always(h: dict[str, Any]) -> bool:
    """Every flip-rate hypothesis is one of seed 002's statistics."""
    return True


def seed002_values(t: mcq_tests.Tables, h: dict[str, Any]) -> dict[str, Any]:
    """The flip rate of the arm between its two variants, with its item-bootstrap interval."""
    v1, v2 = h["variants"]
    flip = mcq.flip_rate_between(
        t.pooled,
        (h["arm"], v1, t.model),
        (h["arm"], v2, t.model),
        h.get("basis", "answer"),
        t.iterations,
        t.seed,
        mcq_tests.interval_level(h, one_bound=True),
        t.letters,
    )
    return {**flip.as_dict(), "estimate": flip.rate}


def compute(data: Data, h: dict[str, Any]) -> dict[str, Any]:
    """:func:`seed002_values` on the dataset's tables."""
    return seed002_values(mcq_tests.dataset_tables(data.ds, data.plan), h)


def decide(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """One bound against the declared rate: lower > ``min_pp``, or upper < ``max_pp``."""
    lower, upper = v["lower"], v["upper"]
    level = f"{round(100 * v['conf'], 6):g}%"
    if h.get("min_pp") is not None:
        bound = float(h["min_pp"])
        ok = lower is not None and lower * 100 > bound
        rule = f"{level} interval lower bound > {bound:g} pp"
    else:
        bound = float(h["max_pp"])
        ok = upper is not None and upper * 100 < bound
        rule = f"{level} interval upper bound < {bound:g} pp"
    verdict = "supported" if ok else "not supported"
    return verdict, {"rule": rule, "estimate": v["estimate"], "lower": lower, "upper": upper}


def estimate_text(v: dict[str, Any]) -> str:
    """The rate and its interval, as percentages."""
    return (
        f"flip rate {pct(v.get('rate'))} ({pct(v.get('conf'), 0)} CI "
        f"{pct(v.get('lower'))} to {pct(v.get('upper'))})"
    )


def seed002_cells(v: dict[str, Any]) -> tuple[str, str, str]:
    """(n, statistic, interval) of the seed-002 row: the pairs, the flips, the interval."""
    return str(v.get("n_pairs")), f"{v.get('flips')} flips ({v.get('basis')})", interval_cell(v)


def demo_row(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, str]:
    """(what, figures) the template demo prints: the share of pairs that flip."""
    what = f"{h['arm']}: {' vs '.join(h['variants'])}"
    return what, f"{pct(v.get('estimate'))} of pairs ({h.get('basis', 'answer')})"


STATISTIC = Statistic(
    key="flip-rate",
    order=7,
    compute=compute,
    schema=("rate", "estimate", "lower", "upper", "conf", "n_pairs", "flips", "basis"),
    decide=decide,
    accuracy_difference=False,
    estimate_text=estimate_text,
    seed002=always,
    seed002_values=seed002_values,
    seed002_cells=seed002_cells,
    demo_row=demo_row,
)
