"""``position-bias``: the difference of two arms' position bias at one variant (§11)."""

from __future__ import annotations

from typing import Any

from analysis.mcq import _kinds as mcq_tests
from analysis.mcq import _stats as mcq
from analysis.mcq._rows import ORIGINAL
from analysis.statistics._base import Data, Statistic, decide_by_interval
from analysis.statistics._format import fmt, interval_cell
from analysis.statistics.flip_rate import always


def seed002_values(t: mcq_tests.Tables, h: dict[str, Any]) -> dict[str, Any]:
    """Each arm's bias and the paired item bootstrap of their difference."""
    a, b = h["contrast"]
    variant = h.get("variant") or ORIGINAL
    ca, cb = (a, variant, t.model), (b, variant, t.model)
    pa = mcq.position_metrics(t.pooled, ca, letters=t.letters)
    pb = mcq.position_metrics(t.pooled, cb, letters=t.letters)
    paired = mcq_tests.position_bias_bootstrap(
        t.pooled.select(mcq.Condition(*ca)),
        t.pooled.select(mcq.Condition(*cb)),
        t.letters,
        t.iterations,
        t.seed,
        mcq_tests.interval_level(h),
    )
    return {
        "a": pa.as_dict(),
        "b": pb.as_dict(),
        "bias_a": pa.bias,
        "bias_b": pb.bias,
        "estimate": pa.bias - pb.bias,
        **paired,
    }


def compute(data: Data, h: dict[str, Any]) -> dict[str, Any]:
    """:func:`seed002_values` on the dataset's tables."""
    return seed002_values(mcq_tests.dataset_tables(data.ds, data.plan), h)


def decide(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The interval excludes 0 (one-sided: its lower bound > 0), and the minimum difference."""
    level = f"{round(100 * v['conf'], 6):g}%"
    return decide_by_interval(h, v, f"{level} interval", h.get("min_difference_pp"))


def seed002_cells(v: dict[str, Any]) -> tuple[str, str, str]:
    """(n, statistic, interval) of the seed-002 row: both arms' trials and biases."""
    n = f"{(v.get('a') or {}).get('n')}/{(v.get('b') or {}).get('n')}"
    return n, f"bias {fmt(v.get('bias_a'))} vs {fmt(v.get('bias_b'))}", interval_cell(v)


def demo_row(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, str]:
    """(what, figures) the template demo prints: each arm's bias."""
    a, b = h["contrast"]
    return " vs ".join(h["contrast"]), f"{a} {_bias(v.get('bias_a'))}, {b} {_bias(v.get('bias_b'))}"


def _bias(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, int | float) else "–"


STATISTIC = Statistic(
    key="position-bias",
    order=8,
    compute=compute,
    schema=("a", "b", "bias_a", "bias_b", "estimate", "lower", "upper", "conf"),
    decide=decide,
    in_pp=True,
    accuracy_difference=False,
    seed002=always,
    seed002_values=seed002_values,
    seed002_cells=seed002_cells,
    demo_row=demo_row,
)
