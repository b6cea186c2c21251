"""``factorial``: a term's joint Wald test in a factorial design (``docs/analysis.md``).

The computation is :func:`analysis._factorial.factorial_values` ("Factorial designs").
"""

from __future__ import annotations

from typing import Any

from analysis._factorial import factorial_values
from analysis.statistics._base import Data, Statistic, decide_by_p
from analysis.statistics._format import fmt


def compute(data: Data, h: dict[str, Any]) -> dict[str, Any]:
    """The GEE of the crossed factors on the analysable trials and the term's Wald test."""
    return factorial_values(data.analysable(), data.plan, h, data.ds.models)


def decide(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The p rule: p < alpha (no direction: a joint test)."""
    return decide_by_p(h, v, directional=False)


def estimate_text(v: dict[str, Any]) -> str:
    """The effect, its Wald chi-square and df, and a one-df term's coefficient."""
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
    key="factorial",
    order=13,
    compute=compute,
    schema=("effect", "tested", "chi2", "df", "p_raw"),
    decide=decide,
    estimate_text=estimate_text,
)
