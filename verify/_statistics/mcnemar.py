"""``mcnemar``: paired correctness of two arms, or of two conditions (analysis.md §3).

Between two arms' paired items (analysis.md §3); naming ``arm`` (two variants of one arm) or
``variant`` (two arms at one variant), one of seed 002's statistics (mcq-statistics.md §11).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from verify import _mcq as vm
from verify import _restats as st
from verify._recompute.pairs import _paired_items
from verify._statistics._base import (
    Case,
    McqRows,
    Statistic,
    directional_p_rule,
    mcq_case_values,
    mcq_setting,
)
from verify._statistics._cells import fmt, p_value


def is_mcq(h: dict[str, Any]) -> bool:
    """§11: a McNemar test naming ``arm`` or ``variant``."""
    return "arm" in h or "variant" in h


def mcq_listed(h: dict[str, Any]) -> bool:
    """The report lists it with seed 002's statistics when it names an arm or a variant."""
    return bool(h.get("arm") or h.get("variant"))


def mcq_values(rows: McqRows, models: Sequence[str]) -> dict[str, Any]:
    """§11: the paired McNemar test of the two conditions."""
    pooled, _, _, h = rows
    letters, model, _, _ = mcq_setting(rows)
    if "arm" in h:
        v1, v2 = h["variants"]
        ca, cb = (h["arm"], v1, model), (h["arm"], v2, model)
    else:
        a, b = h["contrast"]
        ca, cb = (a, h["variant"], model), (b, h["variant"], model)
    mc = vm.paired_mcnemar(pooled, ca, cb, letters)
    return mc | {"p_raw": mc["test"]["p"], "estimate": mc["difference"]}


def values(case: Case) -> dict[str, Any]:
    """The McNemar test of a's and b's paired items (§11's when it names a condition)."""
    if is_mcq(case.h):
        return mcq_case_values(case, mcq_values)
    x, y = _paired_items(case.ds, case.a, case.b)
    if not x:
        raise st.StatError("no paired items")
    mc = st.mcnemar_paired([bool(c) for c in x.correct], [bool(c) for c in y.correct])
    return {**mc, "p_raw": mc["p"], "estimate": (mc["b"] - mc["c"]) / len(x)}


def estimate_text(v: dict[str, Any]) -> str:
    """The discordant counts; with variants "b" names a condition."""
    counts = [v[f"{n}_count"] if f"{n}_count" in v else v.get(n) for n in ("b", "c")]
    return f"discordant b={fmt(counts[0])}, c={fmt(counts[1])}"


def mcq_cells(v: dict[str, Any]) -> tuple[Any, str, str]:
    """Pairs, the discordant counts and the p-value."""
    return (
        v.get("n_pairs"),
        f"b={v.get('b_count')}, c={v.get('c_count')}",
        (f"p {p_value(v.get('p_raw'))}"),
    )


STATISTIC = Statistic(
    name="mcnemar",
    order=4,
    values=values,
    decide=directional_p_rule,
    estimate_text=estimate_text,
    mcq=is_mcq,
    mcq_values=mcq_values,
    mcq_listed=mcq_listed,
    mcq_cells=mcq_cells,
)
