"""``independent-t``: Welch's t-test on the trial accuracies of a and b (analysis.md §3)."""

from __future__ import annotations

from typing import Any

from analysis import _stats as stats
from analysis.statistics._base import Data, Posthoc, Statistic, contrast_of, decide_by_p, sides_of
from analysis.statistics.paired_t import t_detail, t_echo, t_summary


def compute(data: Data, h: dict[str, Any]) -> dict[str, Any]:
    """Welch's t-test, its p (one-sided when declared) and the difference."""
    a, b = contrast_of(h)
    res = stats.independent_t(*data.pair_values(a, b))
    return {
        **res.as_dict(),
        "p_raw": res.p_one_sided if sides_of(h) == "one-sided" else res.p,
        "estimate": res.difference,
    }


def decide(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The p rule: p < alpha (one-sided: the estimate in the predicted direction too)."""
    return decide_by_p(h, v, directional=True)


def posthoc_compute(data: Data, a: str, b: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Post hoc: Welch's t-test on the trial accuracies, two-sided."""
    res = stats.independent_t(*data.pair_values(a, b))
    return {**res.as_dict(), "estimate": res.difference}, t_summary(res)


STATISTIC = Statistic(
    key="independent-t",
    order=2,
    compute=compute,
    schema=("estimate", "p_raw", "t", "df", "ci_lower", "ci_upper"),
    decide=decide,
    in_pp=True,
    posthoc=Posthoc(
        title="Welch t-test on trial accuracies",
        detail=t_detail,
        echo=t_echo,
        compute=posthoc_compute,
    ),
    plannable=True,
)
