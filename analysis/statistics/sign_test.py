"""``sign-test``: the exact sign test of a − b over the stimuli (``docs/analysis.md`` §3).

Per shared stimulus the difference of the two arms' mean accuracies; a stimulus where they tie
(within 1e-9) says nothing and is dropped. Under the null each remaining difference is positive with
probability 1/2, so the number of positive ones is Binomial(n, 1/2): the two-sided p is the
exact binomial test's, the one-sided p the upper tail ``P(X >= positive)``. The estimate is
the median of the differences (the statistic the sign test is about), in pp in the report.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from analysis import _stats as stats
from analysis._deferred import DeferredModule
from analysis.statistics._base import Data, Statistic, contrast_of, decide_by_p, sides_of
from analysis.statistics._format import fmt

sps = DeferredModule("scipy.stats")  # imported on first use (analysis._deferred)

TIE = 1e-9
"""A per-stimulus difference within this of 0 is a tie (``docs/analysis.md`` §3)."""


def compute(data: Data, h: dict[str, Any]) -> dict[str, Any]:
    """The signs of the per-stimulus differences, their exact binomial p and the median."""
    a, b = contrast_of(h)
    means = data.stimulus_means(a, b)
    diff = means[a].to_numpy(dtype=float) - means[b].to_numpy(dtype=float)
    if diff.size == 0:
        raise stats.StatsError(f"sign-test: arms {a!r} and {b!r} share no stimulus")
    positive, negative = int((diff > TIE).sum()), int((diff < -TIE).sum())
    n = positive + negative
    if n == 0:
        p_two = p_one = 1.0
    else:
        p_two = float(sps.binomtest(positive, n, 0.5, alternative="two-sided").pvalue)
        p_one = float(sps.binomtest(positive, n, 0.5, alternative="greater").pvalue)
    return {
        "estimate": float(np.median(diff)),
        "n_stimuli": int(diff.size),
        "n_positive": positive,
        "n_negative": negative,
        "n_ties": int(diff.size) - n,
        "p": p_two,
        "p_one_sided": p_one,
        "p_raw": p_one if sides_of(h) == "one-sided" else p_two,
    }


def decide(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The p rule: p < alpha (one-sided: the median difference above 0 too)."""
    return decide_by_p(h, v, directional=True)


def estimate_text(v: dict[str, Any]) -> str:
    """The signs: positive and negative stimuli, ties dropped."""
    return (
        f"signs +{fmt(v.get('n_positive'))} / -{fmt(v.get('n_negative'))}"
        f" (ties {fmt(v.get('n_ties'))})"
    )


STATISTIC = Statistic(
    key="sign-test",
    order=14,
    compute=compute,
    schema=("estimate", "p_raw", "p", "n_positive", "n_negative", "n_ties", "n_stimuli"),
    decide=decide,
    in_pp=True,
    estimate_text=estimate_text,
)
