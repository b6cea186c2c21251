"""``factorial``: a factorial term's joint Wald test (analysis.md "Factorial designs")."""

from __future__ import annotations

from typing import Any

from verify import _factorial
from verify._recompute.results import GEE_REL_TOL
from verify._statistics._base import Case, Statistic, plain_p_rule
from verify._statistics._cells import fmt


def values(case: Case) -> dict[str, Any]:
    """The GEE of the cell arms and the Wald test of the hypothesis's term."""
    return _factorial.factorial_values(case.ds.analysable(), case.plan, case.h, case.ds.models)


def estimate_text(v: dict[str, Any]) -> str:
    """The term, its Wald statistic, and a one-coefficient term's estimate."""
    tested = v.get("tested") or []
    text = (
        f"{' × '.join(map(str, v.get('effect') or []))}: Wald chi2 {fmt(v.get('chi2'))}, "
        f"df {fmt(v.get('df'))} ({', '.join(map(str, tested))})"
    )
    if v.get("estimate") is not None:
        text += f"; coefficient {fmt(v.get('estimate'))}"
    if v.get("odds_ratio") is not None:
        text += f" (OR {fmt(v.get('odds_ratio'))})"
    return text


STATISTIC = Statistic(
    name="factorial",
    order=13,
    values=values,
    decide=plain_p_rule,
    estimate_text=estimate_text,
    rel_tol=GEE_REL_TOL,
)
