"""``paired-t``: a − b paired per stimulus, or per (stimulus, rep) (analysis.md §3)."""

from __future__ import annotations

from typing import Any

from verify import _restats as st
from verify._recompute.dataset import _Dataset
from verify._recompute.pairs import _pairs_by_trial, _stimulus_pairs
from verify._statistics._base import (
    Case,
    Statistic,
    directional_p_rule,
    t_contrast,
    t_posthoc_cells,
)


def values(case: Case) -> dict[str, Any]:
    """The paired t-test of the hypothesis's pairing, the dropped pairs listed."""
    h, ds, a, b = case.h, case.ds, case.a, case.b
    dropped: list[dict[str, Any]] | None = None
    if h.get("pairing") == ["stimulus", "rep"]:
        xs, ys, dropped = _pairs_by_trial(ds, a, b)
    else:
        means = _stimulus_pairs(ds, a, b)
        xs, ys = [x for x, _ in means.values()], [y for _, y in means.values()]
    res = st.paired_t(xs, ys)
    p = res["p_one_sided"] if case.sides == "one-sided" else res["p"]
    out = {**res, "p_raw": p, "estimate": res["difference"]}
    if h.get("pairing"):
        out["pairing"] = list(h["pairing"])
    if dropped is not None:
        out["n_dropped"] = len(dropped)
        out["dropped_pairs"] = dropped
    return out


def posthoc(ds: _Dataset, plan: dict[str, Any], a: str, b: str) -> dict[str, Any]:
    """analysis.md §6: the paired t-test with pairing (stimulus, rep)."""
    xs, ys, dropped = _pairs_by_trial(ds, a, b)
    res = st.paired_t(xs, ys)
    return {
        **res,
        "estimate": res["difference"],
        "pairing": ["stimulus", "rep"],
        "n_dropped": len(dropped),
        "dropped_pairs": dropped,
        "contrast": t_contrast(a, b, res),
    }


STATISTIC = Statistic(
    name="paired-t",
    order=1,
    values=values,
    decide=directional_p_rule,
    posthoc=posthoc,
    posthoc_cells=t_posthoc_cells,
)
