"""``chi-square``: goodness of fit of an arm's wrong answers to uniform (analysis.md §3)."""

from __future__ import annotations

from typing import Any

from analysis import _stats as stats
from analysis.statistics._base import Data, Statistic, contrast_of, decide_by_p
from analysis.statistics._format import fmt


def compute(data: Data, h: dict[str, Any]) -> dict[str, Any]:
    """Pearson's chi-square over the parser's labels among the arm's wrong answers."""
    vocabulary = data.vocabulary
    if vocabulary is None:
        raise stats.StatsError("chi-square needs a parser with a closed set of labels")
    a, _ = contrast_of(h)
    it = data.items()
    wrong = it[(it["arm"] == a) & (~it["correct"]) & it["answer"].isin(vocabulary)]
    counts = [int((wrong["answer"] == o).sum()) for o in vocabulary]
    chi = stats.chi_square_gof(counts)
    return {**chi.as_dict(), "labels": list(vocabulary), "p_raw": chi.p}


def decide(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The p rule: p < alpha (no direction: the statistic is not a difference)."""
    return decide_by_p(h, v, directional=False)


def estimate_text(v: dict[str, Any]) -> str:
    """The statistic and its degrees of freedom."""
    return f"chi2 {fmt(v.get('chi2'))}, df {fmt(v.get('df'))}"


def component_effect(h: dict[str, Any], result: dict[str, Any]) -> str | None:
    """An error phenotype says nothing of a prompt component's effect on accuracy."""
    return None


STATISTIC = Statistic(
    key="chi-square",
    order=5,
    compute=compute,
    schema=("chi2", "df", "p_raw", "labels"),
    decide=decide,
    estimate_text=estimate_text,
    component_effect=component_effect,
)
