"""``chi-square``: one arm's wrong answers over the labels, against uniform (analysis.md §3)."""

from __future__ import annotations

from typing import Any

from verify import _restats as st
from verify._recompute.dataset import _labels
from verify._recompute.pairs import _wrong_counts
from verify._statistics._base import Case, Statistic, no_component_effect, plain_p_rule
from verify._statistics._cells import fmt


def values(case: Case) -> dict[str, Any]:
    """The chi-square test of the arm's wrong answers per label against a uniform spread."""
    labels = _labels(case.plan)
    if labels is None:
        raise st.StatError("chi-square needs a parser with labels")
    mine = case.ds.analysable_items().where("arm", case.a)
    chi = st.chi_square_gof(_wrong_counts(mine, labels))
    return {**chi, "labels": list(labels), "p_raw": chi["p"]}


def estimate_text(v: dict[str, Any]) -> str:
    """The statistic and its degrees of freedom."""
    return f"chi2 {fmt(v.get('chi2'))}, df {fmt(v.get('df'))}"


STATISTIC = Statistic(
    name="chi-square",
    order=5,
    values=values,
    decide=plain_p_rule,
    estimate_text=estimate_text,
    component_effect=no_component_effect,
)
