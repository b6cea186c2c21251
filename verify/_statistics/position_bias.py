"""``position-bias``: bias(a) − bias(b) of the answer letters (mcq-statistics.md §11)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from verify import _mcq as vm
from verify import _mcqhyp as mh
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
from verify._statistics._cells import fmt, obj


def mcq_values(rows: McqRows, models: Sequence[str]) -> dict[str, Any]:
    """Both arms' position metrics and the paired item bootstrap of the difference."""
    pooled, _, _, h = rows
    letters, model, iterations, seed = mcq_setting(rows)
    a, b = h["contrast"]
    variant = h.get("variant") or mh.ORIGINAL
    pa = vm.position_metrics(pooled, (a, variant, model), letters=letters)
    pb = vm.position_metrics(pooled, (b, variant, model), letters=letters)
    rows_a = [r for r in pooled if (r["arm"], r["variant"]) == (a, variant)]
    rows_b = [r for r in pooled if (r["arm"], r["variant"]) == (b, variant)]
    return {
        "a": pa,
        "b": pb,
        "bias_a": pa["bias"],
        "bias_b": pb["bias"],
        "estimate": pa["bias"] - pb["bias"],
        **mh.bias_bootstrap(rows_a, rows_b, letters, iterations, seed, mh.level(h)),
    }


def values(case: Case) -> dict[str, Any]:
    """§11 on the dataset's trial tables."""
    return mcq_case_values(case, mcq_values)


def mcq_cells(v: dict[str, Any]) -> tuple[Any, str, str]:
    """Both arms' n, their biases and the interval."""
    n = f"{obj(v.get('a')).get('n')}/{obj(v.get('b')).get('n')}"
    return mcq_interval_cells(v, n, f"bias {fmt(v.get('bias_a'))} vs {fmt(v.get('bias_b'))}")


STATISTIC = Statistic(
    name="position-bias",
    order=8,
    values=values,
    decide=interval_rule,
    mcq=always,
    mcq_values=mcq_values,
    mcq_listed=always,
    mcq_cells=mcq_cells,
)
