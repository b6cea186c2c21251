"""``independent-t``: Welch's t-test of a's and b's trial accuracies (analysis.md §3)."""

from __future__ import annotations

from typing import Any

from verify import _restats as st
from verify._recompute.dataset import _Dataset
from verify._recompute.pairs import _pair_accuracies
from verify._statistics._base import (
    Case,
    Statistic,
    directional_p_rule,
    t_contrast,
    t_posthoc_cells,
)


def values(case: Case) -> dict[str, Any]:
    """Welch's t of a − b on the models both arms ran."""
    res = st.independent_t(*_pair_accuracies(case.ds, case.a, case.b))
    p = res["p_one_sided"] if case.sides == "one-sided" else res["p"]
    return {**res, "p_raw": p, "estimate": res["difference"]}


def posthoc(ds: _Dataset, plan: dict[str, Any], a: str, b: str) -> dict[str, Any]:
    """analysis.md §6: Welch's t of a − b."""
    res = st.independent_t(*_pair_accuracies(ds, a, b))
    return {**res, "estimate": res["difference"], "contrast": t_contrast(a, b, res)}


STATISTIC = Statistic(
    name="independent-t",
    order=2,
    values=values,
    decide=directional_p_rule,
    posthoc=posthoc,
    posthoc_cells=t_posthoc_cells,
)
