"""The sign test (``docs/analysis.md`` §3), on both sides: exact p against SciPy, one study.

The whole-study agreement of writer and verifier on ``sign-test`` hypotheses is the
conformance suite's (``tests/support/conformance.py`` draws it in three families); this file pins
the verifier's exact binomial arithmetic against SciPy's and the writer's values on a small
dataset whose signs are known by construction.
"""

from __future__ import annotations

import itertools
import statistics

import pandas as pd
import pytest
from scipy import stats as sps

from analysis.statistics import sign_test as writer
from verify._statistics import sign_test as verifier


@pytest.mark.parametrize(
    ("positive", "negative"), list(itertools.product(range(0, 13, 3), range(9)))
)
def test_the_verifiers_exact_p_is_scipys(positive: int, negative: int) -> None:
    n = positive + negative
    two, one = verifier.exact_p(positive, negative)
    if n == 0:
        assert (two, one) == (1.0, 1.0)
        return
    assert two == pytest.approx(sps.binomtest(positive, n, 0.5).pvalue, rel=1e-12)
    assert one == pytest.approx(
        sps.binomtest(positive, n, 0.5, alternative="greater").pvalue, rel=1e-12
    )


class _Data:
    """The one member the writer's sign test reads: per-stimulus means of the two arms."""

    def __init__(self, a: list[float], b: list[float]) -> None:
        self.frame = pd.DataFrame({"A": a, "B": b}, index=[f"s{i}" for i in range(len(a))])

    def stimulus_means(self, a: str, b: str) -> pd.DataFrame:
        return self.frame[[a, b]]


def test_the_writer_counts_signs_drops_ties_and_takes_the_median() -> None:
    # differences: +0.5, +0.25, 0 (a tie, also within 1e-9), -0.25, +1, +1e-12 (a tie)
    a = [1.0, 0.75, 0.5, 0.25, 1.0, 0.5 + 1e-12]
    b = [0.5, 0.5, 0.5, 0.5, 0.0, 0.5]
    h = {"contrast": ["A", "B"], "sides": "one-sided"}
    v = writer.compute(_Data(a, b), h)  # type: ignore[arg-type]
    assert (v["n_positive"], v["n_negative"], v["n_ties"], v["n_stimuli"]) == (3, 1, 2, 6)
    assert v["p_raw"] == v["p_one_sided"] == pytest.approx(verifier.exact_p(3, 1)[1], rel=1e-12)
    assert v["estimate"] == pytest.approx(
        statistics.median(x - y for x, y in zip(a, b, strict=True))
    )
    two_sided = writer.compute(_Data(a, b), {"contrast": ["A", "B"]})  # type: ignore[arg-type]
    assert two_sided["p_raw"] == two_sided["p"] == pytest.approx(verifier.exact_p(3, 1)[0])
    assert writer.estimate_text(v) == verifier.estimate_text(v) == "signs +3 / -1 (ties 2)"
