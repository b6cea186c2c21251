"""``sign-test``: the exact sign test of a − b over the shared stimuli (analysis.md §3).

Re-derived from the docs: per stimulus the difference of the two arms' mean accuracies (the
per-stimulus pairing of paired-t), ties (|d| <= 1e-9) dropped, the positive ones counted
against Binomial(n, 1/2) with exact integer arithmetic, the median of the differences.
"""

from __future__ import annotations

from fractions import Fraction
from math import comb
from statistics import median
from typing import Any

from verify._recompute.pairs import _stimulus_pairs
from verify._statistics._base import Case, Statistic, directional_p_rule
from verify._statistics._cells import fmt

TIE = 1e-9
"""A difference this close to 0 is a tie (the two sides sum the means in different orders)."""


def _upper_tail(k: int, n: int) -> Fraction:
    """P(X >= k) for X ~ Binomial(n, 1/2), exactly."""
    return Fraction(sum(comb(n, i) for i in range(k, n + 1)), 2**n)


def exact_p(positive: int, negative: int) -> tuple[float, float]:
    """(two-sided p, one-sided p of "more positive") of the sign test.

    The two-sided p sums the probabilities no larger than that of the observed count; for the
    symmetric Binomial(n, 1/2) that is twice the smaller tail, at most 1.
    """
    n = positive + negative
    if n == 0:
        return 1.0, 1.0
    smaller = min(positive, negative)
    two = min(Fraction(1), 2 * (1 - _upper_tail(smaller + 1, n)))
    return float(two), float(_upper_tail(positive, n))


def values(case: Case) -> dict[str, Any]:
    """The signs of the per-stimulus differences, their exact p and the median difference."""
    pairs = _stimulus_pairs(case.ds, case.a, case.b)
    diffs = [x - y for x, y in pairs.values()]
    positive = sum(1 for d in diffs if d > TIE)
    negative = sum(1 for d in diffs if d < -TIE)
    two, one = exact_p(positive, negative)
    return {
        "estimate": float(median(diffs)),
        "n_stimuli": len(diffs),
        "n_positive": positive,
        "n_negative": negative,
        "n_ties": len(diffs) - positive - negative,
        "p": two,
        "p_one_sided": one,
        "p_raw": one if case.sides == "one-sided" else two,
    }


def estimate_text(v: dict[str, Any]) -> str:
    """The report's estimate cell: the signs and the ties."""
    return (
        f"signs +{fmt(v.get('n_positive'))} / -{fmt(v.get('n_negative'))}"
        f" (ties {fmt(v.get('n_ties'))})"
    )


STATISTIC = Statistic(
    name="sign-test",
    order=14,
    values=values,
    decide=directional_p_rule,
    estimate_text=estimate_text,
)
