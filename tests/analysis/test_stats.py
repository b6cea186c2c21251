"""analysis._stats against known answers: textbook values, scipy/statsmodels, simulation truth."""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from multitest_ref import multipletests
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.proportion import proportion_confint

from analysis import _stats as stats
from analysis._stats import StatsError


def _json(result: object) -> str:
    as_dict = result.as_dict()  # type: ignore[attr-defined]
    return json.dumps(as_dict, allow_nan=False)


# ---------------------------------------------------------------------------------------------
# Wilson


# Newcombe RG. Two-sided confidence intervals for the single proportion: comparison of seven
# methods. Stat Med 1998;17:857-872, Table II, method 3 (Wilson score, no continuity correction).
NEWCOMBE_1998 = [
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0000, 0.1611),
    (1, 29, 0.0061, 0.1718),
    (29, 29, 0.8830, 1.0000),
]


@pytest.mark.parametrize(("x", "n", "lower", "upper"), NEWCOMBE_1998)
def test_wilson_matches_newcombe_1998(x: int, n: int, lower: float, upper: float) -> None:
    result = stats.wilson(x, n)
    assert round(result.lower, 4) == lower
    assert round(result.upper, 4) == upper
    assert result.estimate == x / n


@pytest.mark.parametrize(("x", "n"), [(0, 1), (1, 1), (3, 7), (50, 100), (999, 1000), (7, 61)])
@pytest.mark.parametrize("conf", [0.9, 0.95, 0.99])
def test_wilson_matches_statsmodels(x: int, n: int, conf: float) -> None:
    lo, hi = proportion_confint(x, n, alpha=1 - conf, method="wilson")
    result = stats.wilson(x, n, conf)
    assert result.lower == pytest.approx(lo, abs=1e-12)
    assert result.upper == pytest.approx(hi, abs=1e-12)


def test_wilson_rejects_empty_and_impossible_counts() -> None:
    with pytest.raises(StatsError, match="n"):
        stats.wilson(0, 0)
    with pytest.raises(StatsError, match="successes"):
        stats.wilson(5, 4)
    with pytest.raises(StatsError, match="conf"):
        stats.wilson(1, 4, conf=1.0)


# ---------------------------------------------------------------------------------------------
# t-tests


def test_paired_t_matches_scipy_and_dz() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(0.7, 0.2, 40)
    y = x - rng.normal(0.1, 0.15, 40)
    result = stats.paired_t(x, y)
    ref = sps.ttest_rel(x, y)
    assert result.t == pytest.approx(ref.statistic, rel=1e-12)
    assert result.p == pytest.approx(ref.pvalue, rel=1e-10)
    assert result.p_one_sided == pytest.approx(
        sps.ttest_rel(x, y, alternative="greater").pvalue, rel=1e-10
    )
    assert result.df == 39
    d = x - y
    assert result.effect_size == pytest.approx(d.mean() / d.std(ddof=1), rel=1e-12)
    # d_z = t / sqrt(n)
    assert result.effect_size == pytest.approx(ref.statistic / math.sqrt(40), rel=1e-12)
    ci = ref.confidence_interval()
    assert (result.ci_lower, result.ci_upper) == pytest.approx((ci.low, ci.high), rel=1e-10)


@pytest.mark.parametrize("welch", [True, False])
def test_independent_t_matches_scipy(welch: bool) -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(0.9, 0.1, 30)
    y = rng.normal(0.6, 0.3, 45)
    result = stats.independent_t(x, y, welch=welch)
    ref = sps.ttest_ind(x, y, equal_var=not welch)
    assert result.method == ("welch" if welch else "student")
    assert result.t == pytest.approx(ref.statistic, rel=1e-12)
    assert result.p == pytest.approx(ref.pvalue, rel=1e-9)
    assert result.df == pytest.approx(ref.df, rel=1e-12)
    ci = ref.confidence_interval()
    assert (result.ci_lower, result.ci_upper) == pytest.approx((ci.low, ci.high), rel=1e-10)


def test_cohens_d_uses_pooled_sd_on_a_hand_example() -> None:
    # x: mean 5, SS 10; y: mean 3, SS 8; pooled variance (10 + 8) / 8 = 2.25, SD 1.5; d = 2/1.5.
    x = [3.0, 4.0, 5.0, 6.0, 7.0]
    y = [1.0, 3.0, 3.0, 3.0, 5.0]
    for welch in (True, False):
        result = stats.independent_t(x, y, welch=welch)
        assert result.effect_size == pytest.approx(4 / 3, rel=1e-12)
    assert result.effect_size_name == "cohen_d"


def test_t_tests_reject_degenerate_inputs() -> None:
    with pytest.raises(StatsError, match="x - y"):
        stats.paired_t([1.0, 2.0, 3.0], [0.0, 1.0, 2.0])
    with pytest.raises(StatsError, match="x"):
        stats.paired_t([1.0], [1.0])
    with pytest.raises(StatsError, match="equal lengths"):
        stats.paired_t([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(StatsError, match="zero variance"):
        stats.independent_t([1.0, 1.0], [2.0, 2.0, 2.0])
    with pytest.raises(StatsError, match="y"):
        stats.independent_t([1.0, 2.0], [])
    with pytest.raises(StatsError, match="NaN"):
        stats.independent_t([1.0, math.nan], [1.0, 2.0])


# ---------------------------------------------------------------------------------------------
# bootstrap


def _naive_bootstrap(x: np.ndarray, y: np.ndarray, iterations: int, seed: int) -> np.ndarray:
    """The documented draw order, one iteration at a time: all x rows, then all y rows."""
    rng = np.random.Generator(np.random.PCG64(seed))
    means_x = np.empty(iterations)
    means_y = np.empty(iterations)
    for i in range(iterations):
        means_x[i] = x[rng.integers(0, x.size, size=x.size)].mean()
    for i in range(iterations):
        means_y[i] = y[rng.integers(0, y.size, size=y.size)].mean()
    return means_x - means_y


@pytest.mark.parametrize("chunk", [7, 1 << 21])
def test_bootstrap_diff_matches_naive_loop_bit_for_bit(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stats, "CHUNK_ELEMENTS", chunk)
    rng = np.random.default_rng(5)
    x = rng.integers(0, 62, 37) / 61
    y = rng.integers(0, 62, 23) / 61
    naive = _naive_bootstrap(x, y, 300, 20260425)
    vectorized = stats.bootstrap_replicates_diff(x, y, 300, "20260425")
    assert np.array_equal(naive, vectorized)
    result = stats.bootstrap_diff(x, y, 300, "20260425")
    lo, hi = np.quantile(naive, [0.025, 0.975])
    assert (result.lower, result.upper) == (float(lo), float(hi))
    assert result.estimate == x.mean() - y.mean()
    assert result.seed == 20260425


def test_bootstrap_diff_is_reproducible_from_its_seed() -> None:
    rng = np.random.default_rng(6)
    x = rng.random(200)
    y = rng.random(150)
    first = stats.bootstrap_diff(x, y, 1000, 20260425)
    again = stats.bootstrap_diff(x, y, 1000, "20260425")
    other = stats.bootstrap_diff(x, y, 1000, 20260426)
    assert first == again
    assert (first.lower, first.upper) != (other.lower, other.upper)
    assert first.lower < first.estimate < first.upper
    _json(first)


def test_bootstrap_diff_ci_is_close_to_the_normal_theory_interval() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(1.0, 1.0, 2000)
    y = rng.normal(0.0, 1.0, 2000)
    result = stats.bootstrap_diff(x, y, 4000, 1)
    se = math.sqrt(x.var(ddof=1) / x.size + y.var(ddof=1) / y.size)
    diff = x.mean() - y.mean()
    assert result.lower == pytest.approx(diff - 1.96 * se, abs=0.1 * se)
    assert result.upper == pytest.approx(diff + 1.96 * se, abs=0.1 * se)


def test_bootstrap_rejects_bad_inputs() -> None:
    with pytest.raises(StatsError, match="x"):
        stats.bootstrap_diff([], [1.0], 10, 1)
    with pytest.raises(StatsError, match="seed"):
        stats.bootstrap_diff([1.0], [1.0], 10, "not-a-seed")
    with pytest.raises(StatsError, match="iterations"):
        stats.bootstrap_diff([1.0], [1.0], 0, 1)


@pytest.mark.parametrize("chunk", [5, 1 << 21])
def test_bootstrap_clustered_observation_unit_follows_paper_001(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stats, "CHUNK_ELEMENTS", chunk)
    questions = [f"q{i}" for i in range(12) for _ in range(5)]
    runs = [r for _ in range(12) for r in range(5)]
    values = np.random.default_rng(8).integers(0, 2, 60).astype(float)
    result = stats.bootstrap_clustered(values, questions, runs, 500, 42)
    rng = np.random.Generator(np.random.PCG64(42))
    naive = np.array([values[rng.integers(0, 60, size=60)].mean() for _ in range(500)])
    lo, hi = np.quantile(naive, [0.025, 0.975])
    assert (result.lower, result.upper) == (float(lo), float(hi))
    assert (result.n_x, result.n_clusters, result.estimate) == (60, 12, values.mean())


def test_bootstrap_clustered_question_unit_resamples_whole_questions() -> None:
    questions = ["b", "a", "a", "c", "b", "c", "c"]
    runs = [0, 0, 1, 0, 1, 1, 2]
    values = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0])
    result = stats.bootstrap_clustered(values, questions, runs, 200, 3, unit="question")
    keys = ["a", "b", "c"]
    sums = {"a": 1.0, "b": 1.0, "c": 2.0}
    counts = {"a": 2, "b": 2, "c": 3}
    rng = np.random.Generator(np.random.PCG64(3))
    naive = []
    for _ in range(200):
        picked = [keys[i] for i in rng.integers(0, 3, size=3)]
        naive.append(sum(sums[k] for k in picked) / sum(counts[k] for k in picked))
    lo, hi = np.quantile(naive, [0.025, 0.975])
    assert result.lower == pytest.approx(lo, abs=1e-15)
    assert result.upper == pytest.approx(hi, abs=1e-15)
    with pytest.raises(StatsError, match="pair occurs more than once"):
        stats.bootstrap_clustered([1.0, 0.0], ["a", "a"], [0, 0], 10, 1)


# ---------------------------------------------------------------------------------------------
# linear mixed model


def _simulate(
    rng: np.random.Generator,
    groups: int,
    reps: int,
    effects: dict[str, float],
    sd_group: float,
    sd_resid: float,
) -> pd.DataFrame:
    rows = []
    for g in range(groups):
        u = rng.normal(0.0, sd_group)
        for arm, mean in effects.items():
            for _ in range(reps):
                rows.append(
                    {"probe": f"p{g}", "arm": arm, "acc": mean + u + rng.normal(0.0, sd_resid)}
                )
    return pd.DataFrame(rows)


@pytest.fixture(params=["statsmodels", "closed-form"])
def lmm_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A mixed-model test on both fitting paths: statsmodels' optimiser then the polish (small
    designs), and the closed-form REML maximum of designs with ``CLOSED_FORM_MIN_GROUPS``
    groups or more (here forced on the test's small data)."""
    if request.param == "closed-form":
        monkeypatch.setattr(stats, "CLOSED_FORM_MIN_GROUPS", 2)
    return str(request.param)


def test_mixed_model_recovers_known_parameters(lmm_path: str) -> None:
    truth = {"A": 0.95, "B": 0.55, "C": 0.75}
    df = _simulate(np.random.default_rng(11), 60, 4, truth, 0.15, 0.10)
    fit = stats.mixed_model(df, "acc", "arm", "probe", reference="B")
    assert fit.converged and not fit.singular and fit.warnings == ()
    assert fit.arms == ("B", "A", "C")
    names = [effect.name for effect in fit.fixed_effects]
    assert names == ["Intercept", "arm[T.A]", "arm[T.C]"]
    expected = {"Intercept": 0.55, "arm[T.A]": 0.40, "arm[T.C]": 0.20}
    for effect in fit.fixed_effects:
        assert effect.ci_lower < expected[effect.name] < effect.ci_upper, effect
    assert fit.group_variance == pytest.approx(0.15**2, rel=0.35)
    assert fit.residual_variance == pytest.approx(0.10**2, rel=0.15)
    # both variance components recovered: estimate and truth inside the 95% CI
    assert fit.variance_ci_method == "wald-log-observed-reml"
    assert fit.group_variance_ci_lower < 0.15**2 < fit.group_variance_ci_upper
    assert fit.group_variance_ci_lower < fit.group_variance < fit.group_variance_ci_upper
    assert fit.residual_variance_ci_lower < 0.10**2 < fit.residual_variance_ci_upper
    assert fit.residual_variance_ci_lower < fit.residual_variance < fit.residual_variance_ci_upper
    assert fit.icc == pytest.approx(0.0225 / 0.0325, abs=0.1)
    # the same model through statsmodels' formula interface
    ref = smf.mixedlm("acc ~ C(arm, Treatment('B'))", df, groups=df["probe"]).fit(reml=True)
    assert [e.estimate for e in fit.fixed_effects] == pytest.approx(list(ref.fe_params), rel=1e-6)
    assert fit.residual_variance == pytest.approx(ref.scale, rel=1e-5)
    a_b = stats.contrast(fit, "A", "B")
    assert a_b.estimate == pytest.approx(fit.fixed_effects[1].estimate)
    assert a_b.se == pytest.approx(fit.fixed_effects[1].se)
    c_a = stats.contrast(fit, "C", "A")
    assert c_a.estimate == pytest.approx(
        fit.fixed_effects[2].estimate - fit.fixed_effects[1].estimate
    )
    cov = np.array(fit.fe_cov)
    assert c_a.se == pytest.approx(math.sqrt(cov[1, 1] + cov[2, 2] - 2 * cov[1, 2]))
    assert c_a.lower < -0.2 < c_a.upper
    _json(fit)


def test_contrast_one_sided_conventions() -> None:
    df = _simulate(np.random.default_rng(12), 20, 3, {"A": 0.6, "B": 0.5}, 0.1, 0.1)
    fit = stats.mixed_model(df, "acc", "arm", "probe", reference="B")
    two = stats.contrast(fit, "A", "B")
    one = stats.contrast(fit, "A", "B", sides="one-sided")
    assert one.p == pytest.approx(sps.norm.sf(two.z))
    assert two.p == pytest.approx(2 * sps.norm.sf(abs(two.z)))
    assert one.lower == pytest.approx(one.estimate - sps.norm.ppf(0.95) * one.se)
    assert one.upper == math.inf
    assert json.loads(_json(one))["upper"] is None
    reverse = stats.contrast(fit, "B", "A", sides="one-sided")
    assert reverse.p == pytest.approx(1 - one.p)
    with pytest.raises(StatsError, match="Z"):
        stats.contrast(fit, "A", "Z")


def _coverage_bounds(studies: int, level: float, tail: float = 0.005) -> tuple[float, float]:
    """Central binomial acceptance region for the observed coverage (two-sided 0.5% error).

    Computed from the number of studies: Binomial(studies, level) quantiles at tail/2 and
    1 − tail/2 (for 200 studies at 95%: 0.90 to 0.985).
    """
    lo = sps.binom.ppf(tail / 2, studies, level) / studies
    hi = sps.binom.isf(tail / 2, studies, level) / studies
    return float(lo), float(hi)


def _reml_loglik(phi: np.ndarray, y: np.ndarray, x: np.ndarray, z: np.ndarray) -> float:
    """Dense textbook REML log-likelihood (up to a constant) at (log σ²_g, log σ²_e)."""
    g, e = np.exp(phi)
    v = e * np.eye(y.size) + g * z @ z.T
    vi = np.linalg.inv(v)
    xvx = x.T @ vi @ x
    r = y - x @ np.linalg.solve(xvx, x.T @ vi @ y)
    return float(-0.5 * (np.linalg.slogdet(v)[1] + np.linalg.slogdet(xvx)[1] + r @ vi @ r))


def test_variance_cis_match_a_dense_numerical_reml_hessian(lmm_path: str) -> None:
    df = _simulate(np.random.default_rng(5), 8, 3, {"A": 0.8, "B": 0.5, "C": 0.6}, 0.2, 0.15)
    fit = stats.mixed_model(df, "acc", "arm", "probe", reference="B")
    y = df["acc"].to_numpy()
    arm = df["arm"].to_numpy()
    x = np.column_stack([np.ones(y.size), arm == "A", arm == "C"]).astype(float)
    probe = df["probe"].to_numpy()
    z = (probe[:, None] == np.unique(probe)[None, :]).astype(float)
    phi = np.log([fit.group_variance, fit.residual_variance])
    h = 1e-3
    hess = np.zeros((2, 2))
    for i in range(2):
        for k in range(2):
            di, dk = np.eye(2)[i] * h, np.eye(2)[k] * h
            hess[i, k] = (
                _reml_loglik(phi + di + dk, y, x, z)
                - _reml_loglik(phi + di - dk, y, x, z)
                - _reml_loglik(phi - di + dk, y, x, z)
                + _reml_loglik(phi - di - dk, y, x, z)
            ) / (4 * h * h)
    se = np.sqrt(np.diag(np.linalg.inv(-hess)))
    zq = sps.norm.ppf(0.975)
    assert fit.group_variance_ci_lower == pytest.approx(math.exp(phi[0] - zq * se[0]), rel=1e-5)
    assert fit.group_variance_ci_upper == pytest.approx(math.exp(phi[0] + zq * se[0]), rel=1e-5)
    assert fit.residual_variance_ci_lower == pytest.approx(math.exp(phi[1] - zq * se[1]), rel=1e-5)
    assert fit.residual_variance_ci_upper == pytest.approx(math.exp(phi[1] + zq * se[1]), rel=1e-5)


@pytest.mark.slow
def test_mixed_model_ci_coverage_for_every_fixed_effect_and_variance_component() -> None:
    """95% CIs cover the truth in ~95% of 200 simulated studies (30 groups each).

    Thirty groups keep the asymptotic (Wald, log-Wald) intervals honest; with a dozen the
    group-variance interval is known to under-cover (docs/statistics.md).
    """
    studies = 200
    lo, hi = _coverage_bounds(studies, 0.95)
    truth = {
        "Intercept": 0.5,
        "arm[T.A]": 0.3,
        "arm[T.C]": 0.1,
        "group_variance": 0.2**2,
        "residual_variance": 0.15**2,
        "A-C": 0.2,
    }
    covered = dict.fromkeys(truth, 0)
    rng = np.random.default_rng(20260421)
    for _ in range(studies):
        df = _simulate(rng, 30, 3, {"A": 0.8, "B": 0.5, "C": 0.6}, 0.2, 0.15)
        fit = stats.mixed_model(df, "acc", "arm", "probe", reference="B")
        assert not fit.singular
        for effect in fit.fixed_effects:
            covered[effect.name] += effect.ci_lower <= truth[effect.name] <= effect.ci_upper
        covered["group_variance"] += (
            fit.group_variance_ci_lower <= truth["group_variance"] <= fit.group_variance_ci_upper
        )
        covered["residual_variance"] += (
            fit.residual_variance_ci_lower
            <= truth["residual_variance"]
            <= fit.residual_variance_ci_upper
        )
        a_c = stats.contrast(fit, "A", "C")
        covered["A-C"] += a_c.lower <= truth["A-C"] <= a_c.upper
    rates = {name: n / studies for name, n in covered.items()}
    assert all(lo <= rate <= hi for rate in rates.values()), (rates, lo, hi)


def test_mixed_model_degenerate_inputs() -> None:
    df = _simulate(np.random.default_rng(13), 10, 3, {"A": 0.6, "B": 0.5}, 0.1, 0.1)
    one_group = df[df["probe"] == "p0"]
    with pytest.raises(StatsError, match="at least two groups"):
        stats.mixed_model(one_group, "acc", "arm", "probe", reference="B")
    constant = df.assign(acc=0.5)
    with pytest.raises(StatsError, match="zero variance"):
        stats.mixed_model(constant, "acc", "arm", "probe", reference="B")
    with pytest.raises(StatsError, match="reference"):
        stats.mixed_model(df, "acc", "arm", "probe", reference="Q")
    with pytest.raises(StatsError, match="two arms"):
        stats.mixed_model(df[df["arm"] == "B"], "acc", "arm", "probe", reference="B")
    with pytest.raises(StatsError, match="no column"):
        stats.mixed_model(df, "missing", "arm", "probe", reference="B")


def test_mixed_model_flags_zero_group_variance_without_leaking_warnings(lmm_path: str) -> None:
    df = _simulate(np.random.default_rng(0), 30, 4, {"A": 0.7, "B": 0.5, "C": 0.4}, 0.0, 0.2)
    fit = stats.mixed_model(df, "acc", "arm", "probe", reference="B")
    assert fit.singular
    assert fit.group_variance <= 0.2**2 * 0.05
    # statsmodels' boundary rule (σ²_g < 0.01) on both paths, recorded and not leaked (the
    # statsmodels path records its optimiser's retries too)
    assert "ConvergenceWarning: " + stats.BOUNDARY_WARNING in fit.warnings
    if lmm_path == "closed-form":
        assert fit.warnings == ("ConvergenceWarning: " + stats.BOUNDARY_WARNING,)
    assert math.isnan(fit.group_variance_ci_lower) and math.isnan(fit.residual_variance_ci_upper)
    assert json.loads(_json(fit))["group_variance_ci_upper"] is None
    assert math.isfinite(stats.contrast(fit, "A", "B").se)
    _json(fit)


def test_mixed_model_flags_zero_residual_variance() -> None:
    rng = np.random.default_rng(14)
    offsets = {f"p{g}": rng.normal() for g in range(10)}
    df = pd.DataFrame(
        [
            {"probe": p, "arm": arm, "acc": u + (0.2 if arm == "A" else 0.0)}
            for p, u in offsets.items()
            for arm in ("A", "B")
            for _ in range(3)
        ]
    )
    try:
        fit = stats.mixed_model(df, "acc", "arm", "probe", reference="B")
    except StatsError:
        return
    assert fit.singular


def test_a_large_design_gets_the_reml_maximum_without_statsmodels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CLOSED_FORM_MIN_GROUPS groups: statsmodels is not called; the verifier accepts the point
    and statsmodels' own fit is no more likely and agrees."""
    from verify._reml import RemlModel, check_point

    groups = stats.CLOSED_FORM_MIN_GROUPS
    rng = np.random.default_rng(31)
    u = rng.normal(0.0, 0.1, groups)
    df = pd.DataFrame(
        {"item": np.repeat([f"q{g}" for g in range(groups)], 2), "arm": np.tile(["A", "B"], groups)}
    )
    df["acc"] = (
        rng.uniform(size=len(df)) < 0.6 + 0.1 * (df["arm"] == "B") + np.repeat(u, 2)
    ).astype(float)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("statsmodels' MixedLM was called")

    with monkeypatch.context() as patch:
        patch.setattr(stats.mixed_linear_model, "MixedLM", refuse)
        fit = stats.mixed_model(df, "acc", "arm", "item", "A")
    assert fit.converged and not fit.singular
    point, reason = check_point(
        RemlModel(
            df["acc"],
            np.column_stack([np.ones(len(df)), (df["arm"] == "B").to_numpy(float)]),
            df["item"].tolist(),
            [df["item"].tolist()],
        ),
        [fit.group_variance, fit.residual_variance],
    )
    assert reason is None and point.loglik == pytest.approx(fit.log_likelihood, abs=1e-6)
    # statsmodels' own formula fit: no more likely, and the same model within the tolerances
    # of the small-design comparisons above
    ref = _quiet_fit(smf.mixedlm("acc ~ arm", df, groups=df["item"]))
    assert fit.log_likelihood >= float(ref.llf) - 1e-9 * abs(float(ref.llf))
    assert fit.group_variance == pytest.approx(float(ref.cov_re.iloc[0, 0]), rel=1e-3)
    assert fit.residual_variance == pytest.approx(ref.scale, rel=1e-5)
    assert [e.estimate for e in fit.fixed_effects] == pytest.approx(list(ref.fe_params), rel=1e-5)
    assert [e.se for e in fit.fixed_effects] == pytest.approx(list(ref.bse_fe), rel=1e-4)


def test_a_design_of_many_rows_over_few_groups_is_fitted_from_its_sums(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CLOSED_FORM_MIN_ROWS rows over 7 groups (here the threshold lowered to the test's 3,500
    rows): statsmodels is not called; the verifier accepts the point, and statsmodels' own fit
    is no more likely and agrees (docs/statistics.md, "Designs of many rows")."""
    from verify._reml import RemlModel, check_point

    rng = np.random.default_rng(41)
    n_rows = 3500
    assert n_rows < stats.CLOSED_FORM_MIN_ROWS  # a 3,500-row design takes statsmodels' path
    u = rng.normal(0.0, 0.2, 7)
    probe = rng.integers(0, 7, n_rows)
    arm = np.array(["A", "B", "C"])[rng.integers(0, 3, n_rows)]
    effect = (arm == "B") * 0.3 + (arm == "C") * 0.1
    df = pd.DataFrame(
        {
            "probe": [f"p{g}" for g in probe],
            "arm": arm,
            "acc": effect + u[probe] + rng.normal(0.0, 0.4, n_rows),
        }
    )

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("statsmodels' MixedLM was called")

    with monkeypatch.context() as patch:
        patch.setattr(stats, "CLOSED_FORM_MIN_ROWS", n_rows)
        patch.setattr(stats.mixed_linear_model, "MixedLM", refuse)
        fit = stats.mixed_model(df, "acc", "arm", "probe", "A")
    assert fit.converged and not fit.singular and fit.n_groups == 7
    exog = np.column_stack(
        [np.ones(n_rows), (arm == "B").astype(float), (arm == "C").astype(float)]
    )
    point, reason = check_point(
        RemlModel(df["acc"], exog, df["probe"].tolist(), [df["probe"].tolist()]),
        [fit.group_variance, fit.residual_variance],
    )
    assert reason is None and point.loglik == pytest.approx(fit.log_likelihood, abs=1e-6)
    small = stats.mixed_model(df, "acc", "arm", "probe", "A")  # statsmodels' path, polished
    assert fit.log_likelihood == pytest.approx(small.log_likelihood, rel=1e-9)
    assert fit.group_variance == pytest.approx(small.group_variance, rel=1e-6)
    assert fit.residual_variance == pytest.approx(small.residual_variance, rel=1e-6)
    for mine, theirs in zip(fit.fixed_effects, small.fixed_effects, strict=True):
        assert mine.estimate == pytest.approx(theirs.estimate, rel=1e-6)
        assert mine.se == pytest.approx(theirs.se, rel=1e-6)
    assert fit.group_variance_ci_lower == pytest.approx(small.group_variance_ci_lower, rel=1e-6)
    assert fit.group_variance_ci_upper == pytest.approx(small.group_variance_ci_upper, rel=1e-6)


def _quiet_fit(model: Any) -> Any:
    """``model.fit(reml=True)`` without statsmodels' boundary warnings (σ²_g < 0.01 here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(reml=True)


def _two_models(rng: np.random.Generator, *, drop: tuple[str, str] | None = None) -> pd.DataFrame:
    """Trials of three arms on two models and 30 items (an interaction on model m2, arm C).

    ``drop`` removes one (arm, model) cell: an arm not run on that model.
    """
    arm_effect = {"A": 0.0, "B": 0.15, "C": 0.05}
    model_effect = {"m1": 0.0, "m2": -0.1}
    rows = []
    for item in range(30):
        u = rng.normal(0.0, 0.12)
        for model, shift in model_effect.items():
            for arm, effect in arm_effect.items():
                if drop == (arm, model):
                    continue
                extra = 0.1 if (arm, model) == ("C", "m2") else 0.0
                for rep in range(2):
                    rows.append(
                        {
                            "item": f"q{item:02d}",
                            "model": model,
                            "arm": arm,
                            "rep": rep,
                            "acc": 0.5 + effect + shift + extra + u + rng.normal(0.0, 0.1),
                        }
                    )
    return pd.DataFrame(rows)


def test_mixed_model_with_a_model_factor_matches_the_statsmodels_formula_fit(lmm_path: str) -> None:
    df = _two_models(np.random.default_rng(21))
    fit = stats.mixed_model(df, "acc", "arm", "item", "A", factors={"model": "m1"})
    ref = _quiet_fit(
        smf.mixedlm(
            "acc ~ C(arm, Treatment('A')) + C(model, Treatment('m1'))", df, groups=df["item"]
        )
    )
    assert [e.name for e in fit.fixed_effects] == [
        "Intercept",
        "arm[T.B]",
        "arm[T.C]",
        "model[T.m2]",
    ]
    assert [e.estimate for e in fit.fixed_effects] == pytest.approx(list(ref.fe_params), rel=1e-5)
    assert [e.se for e in fit.fixed_effects] == pytest.approx(list(ref.bse_fe), rel=1e-4)
    # the writer polishes statsmodels' point to the REML maximum: never less likely, and close
    assert fit.log_likelihood >= float(ref.llf) - 1e-9
    assert fit.group_variance == pytest.approx(float(ref.cov_re.iloc[0, 0]), rel=1e-3)
    assert fit.residual_variance == pytest.approx(ref.scale, rel=1e-5)
    # the contrast is L·β with zero weight on the model coefficient
    cov = ref.cov_params().to_numpy()[:4, :4]
    c_b = stats.contrast(fit, "C", "B")
    weights = np.array([0.0, -1.0, 1.0, 0.0])
    assert c_b.estimate == pytest.approx(float(weights @ ref.fe_params.to_numpy()), rel=1e-5)
    assert c_b.se == pytest.approx(math.sqrt(float(weights @ cov @ weights)), rel=1e-4)
    values = json.loads(_json(fit))
    assert values["factors"] == ["model"] and values["factor_references"] == ["m1"]
    assert values["interaction"] is False
    # an arm-only fit keeps its member list: no factor members at all
    plain = json.loads(_json(stats.mixed_model(df, "acc", "arm", "item", "A")))
    assert not {"factors", "factor_references", "interaction"} & set(plain)


def test_arm_by_model_interaction_and_its_wald_test_match_a_direct_computation(
    lmm_path: str,
) -> None:
    df = _two_models(np.random.default_rng(22))
    fit = stats.mixed_model(
        df, "acc", "arm", "item", "A", factors={"model": "m1"}, interaction=True
    )
    ref = _quiet_fit(
        smf.mixedlm(
            "acc ~ C(arm, Treatment('A')) * C(model, Treatment('m1'))", df, groups=df["item"]
        )
    )
    assert [e.name for e in fit.fixed_effects][-2:] == [
        "arm[T.B]:model[T.m2]",
        "arm[T.C]:model[T.m2]",
    ]
    assert [e.estimate for e in fit.fixed_effects] == pytest.approx(list(ref.fe_params), rel=1e-5)
    terms = ["arm[T.B]:model[T.m2]", "arm[T.C]:model[T.m2]"]
    wald = stats.wald_test(fit, terms)
    beta = ref.fe_params.to_numpy()[4:6]
    cov = ref.cov_params().to_numpy()[4:6, 4:6]
    chi2 = float(beta @ np.linalg.inv(cov) @ beta)
    assert wald.df == 2 and wald.chi2 == pytest.approx(chi2, rel=1e-4)
    assert wald.p == pytest.approx(sps.chi2.sf(chi2, 2), rel=1e-3)
    assert wald.p < 0.05  # the simulated interaction (C on m2) is found
    with pytest.raises(StatsError, match="not a coefficient"):
        stats.wald_test(fit, ["arm[T.Z]"])
    with pytest.raises(StatsError, match="no coefficient"):
        stats.wald_test(fit, [])


def test_an_arm_missing_on_a_model_drops_its_cell_or_refuses_a_confounded_design(
    lmm_path: str,
) -> None:
    df = _two_models(np.random.default_rng(23), drop=("C", "m2"))
    fit = stats.mixed_model(
        df, "acc", "arm", "item", "A", factors={"model": "m1"}, interaction=True
    )
    names = [e.name for e in fit.fixed_effects]
    assert "arm[T.C]:model[T.m2]" not in names and "arm[T.B]:model[T.m2]" in names
    # the same design, built by hand without the empty cell, through MixedLM itself
    from statsmodels.regression.mixed_linear_model import MixedLM

    exog = np.column_stack(
        [
            np.ones(len(df)),
            df["arm"] == "B",
            df["arm"] == "C",
            df["model"] == "m2",
            (df["arm"] == "B") & (df["model"] == "m2"),
        ]
    )
    ref = _quiet_fit(MixedLM(df["acc"].to_numpy(), exog.astype(float), groups=df["item"]))
    assert [e.estimate for e in fit.fixed_effects] == pytest.approx(list(ref.fe_params), rel=1e-5)
    # arm C only on m1 and arm B only on m2: arm and model are confounded
    confounded = df[~((df["arm"] == "B") & (df["model"] == "m1"))]
    confounded = confounded[~((confounded["arm"] == "A") & (confounded["model"] == "m2"))]
    with pytest.raises(StatsError, match="linearly dependent"):
        stats.mixed_model(confounded, "acc", "arm", "item", "A", factors={"model": "m1"})
    with pytest.raises(StatsError, match="not in"):
        stats.mixed_model(df, "acc", "arm", "item", "A", factors={"model": "m9"})


# ---------------------------------------------------------------------------------------------
# categorical


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ([30, 10, 40, 20], None),
        ([63, 12, 15, 10], None),
        ([5, 9, 13], [1, 1, 2]),
        ([12, 8], [0.3, 0.7]),
    ],
)
def test_chi_square_gof_matches_scipy(counts: list[int], expected: list[float] | None) -> None:
    result = stats.chi_square_gof(counts, expected)
    n = sum(counts)
    f_exp = None if expected is None else np.array(expected) * n / sum(expected)
    ref = sps.chisquare(counts, f_exp)
    assert result.chi2 == pytest.approx(ref.statistic, rel=1e-12)
    assert result.p == pytest.approx(ref.pvalue, rel=1e-10)
    assert result.df == len(counts) - 1
    assert result.cramers_v == pytest.approx(
        math.sqrt(ref.statistic / (n * (len(counts) - 1))), rel=1e-12
    )


def test_chi_square_gof_known_value_and_errors() -> None:
    # all mass in one of 4 categories: chi2 = 3n, V = 1
    result = stats.chi_square_gof([0, 0, 20, 0])
    assert result.chi2 == pytest.approx(60.0)
    assert result.cramers_v == pytest.approx(1.0)
    with pytest.raises(StatsError, match="counts"):
        stats.chi_square_gof([0, 0, 0])
    with pytest.raises(StatsError, match="counts"):
        stats.chi_square_gof([5])
    with pytest.raises(StatsError, match="expected"):
        stats.chi_square_gof([5, 5], [1, 0])


def test_confusion_matrix_and_canonical_share() -> None:
    labels = ["UP", "RIGHT", "DOWN", "LEFT"]
    truth = ["UP", "UP", "DOWN", "DOWN", "LEFT", "RIGHT", "LEFT"]
    pred = ["UP", "RIGHT", "UP", "RIGHT", "RIGHT", "RIGHT", "??"]
    cm = stats.confusion_matrix(truth, pred, labels)
    assert cm.counts == ((1, 1, 0, 0), (0, 1, 0, 0), (1, 1, 0, 0), (0, 1, 0, 0))
    assert cm.other == (0, 0, 0, 1)
    assert (cm.n, cm.correct) == (7, 2)
    share = stats.canonical_share(truth, pred)
    # errors: UP->RIGHT, DOWN->UP, DOWN->RIGHT, LEFT->RIGHT, LEFT->?? ; 3 of 5 predict RIGHT
    assert (share.count, share.n, share.share) == (3, 5, 0.6)
    assert (share.lower, share.upper) == (stats.wilson(3, 5).lower, stats.wilson(3, 5).upper)
    none = stats.canonical_share(["UP"], ["UP"])
    assert none.n == 0 and math.isnan(none.share)
    assert json.loads(_json(none))["share"] is None
    with pytest.raises(StatsError, match="truth"):
        stats.confusion_matrix(["SIDEWAYS"], ["UP"], labels)


def test_position_bias_and_flip_rate_hand_examples() -> None:
    truth = ["A", "B", "C", "D"] * 5
    pred = ["A"] * 14 + ["B", "C", "D", "B", "C", "X"]
    result = stats.position_bias_tvd(pred, truth, ["A", "B", "C", "D"])
    assert result.p_truth == (0.25, 0.25, 0.25, 0.25)
    assert result.p_pred == pytest.approx((0.7, 0.1, 0.1, 0.05))
    assert result.p_other == pytest.approx(0.05)
    # 0.5 * (0.45 + 0.15 + 0.15 + 0.20 + 0.05)
    assert result.tvd == pytest.approx(0.5)
    # paper 002: (1/4) * sum over labels
    assert result.mad == pytest.approx(0.95 / 4)
    flips = stats.flip_rate(["A", "B", "C", "D"], ["A", "C", "C", "A"])
    assert (flips.count, flips.n, flips.share) == (2, 4, 0.5)
    with pytest.raises(StatsError, match="equal lengths"):
        stats.flip_rate(["A"], ["A", "B"])


@pytest.mark.parametrize(("b", "c"), [(0, 5), (3, 9), (12, 12), (10, 14), (40, 25), (7, 60)])
def test_mcnemar_matches_statsmodels_and_binomtest(b: int, c: int) -> None:
    table = [[50, b], [c, 30]]
    result = stats.mcnemar(b, c)
    plain = sm_mcnemar(table, exact=False, correction=False)
    assert result.chi2 == pytest.approx(plain.statistic)
    assert result.p_chi2 == pytest.approx(plain.pvalue, rel=1e-10)
    if b != c:  # statsmodels computes (|b-c|-1)^2 even when b == c; we floor at 0
        corrected = sm_mcnemar(table, exact=False, correction=True)
        assert result.chi2_cc == pytest.approx(corrected.statistic)
        assert result.p_chi2_cc == pytest.approx(corrected.pvalue, rel=1e-10)
    else:
        assert result.chi2_cc == 0.0 and result.p_chi2_cc == 1.0
    exact = sm_mcnemar(table, exact=True)
    assert result.p_exact == pytest.approx(exact.pvalue, rel=1e-10)
    assert result.p_exact == pytest.approx(sps.binomtest(b, b + c, 0.5).pvalue, rel=1e-10)
    assert result.primary == ("exact" if b + c < 25 else "chi2_cc")
    assert result.p == (result.p_exact if b + c < 25 else result.p_chi2_cc)


def test_mcnemar_paired_counts_and_no_discordance() -> None:
    x = [True, True, False, False, True, True]
    y = [True, False, True, False, False, True]
    result = stats.mcnemar_paired(x, y)
    assert (result.b, result.c) == (2, 1)
    empty = stats.mcnemar(0, 0)
    assert empty.p == 1.0 and empty.primary == "exact"
    assert json.loads(_json(empty))["chi2"] is None
    with pytest.raises(StatsError, match="x_correct"):
        stats.mcnemar_paired([1, 2], [0, 1])


# ---------------------------------------------------------------------------------------------
# multiplicity and decision rules


@pytest.mark.parametrize(
    "pvalues",
    [
        [0.01, 0.04, 0.03, 0.005],
        [0.2, 0.2, 0.01, 0.5, 0.049],
        [0.6, 0.9],
        [1e-30],
    ],
)
def test_bonferroni_and_holm_match_multipletests(pvalues: list[float]) -> None:
    for name, fn in (("bonferroni", stats.bonferroni), ("holm", stats.holm)):
        reject, adjusted, _, _ = multipletests(pvalues, alpha=0.05, method=name)
        result = fn(pvalues)
        assert result.adjusted == pytest.approx(tuple(adjusted), rel=1e-12)
        assert result.reject == tuple(bool(r) for r in reject)
        assert max(result.adjusted) <= 1.0


def test_holm_is_monotone_in_the_sorted_order() -> None:
    result = stats.holm([0.01, 0.011, 0.012, 0.5])
    ordered = sorted(zip(result.pvalues, result.adjusted, strict=True))
    adjusted = [a for _, a in ordered]
    assert adjusted == sorted(adjusted)
    assert adjusted[:3] == pytest.approx([0.04, 0.04, 0.04])


def test_equivalence_rule() -> None:
    diffs = {"UP": 0.01, "LEFT": -0.023, "DOWN": 0.02}
    result = stats.equivalence(diffs, 0.10)
    assert (result.max_abs_diff, result.group, result.holds) == (0.023, "LEFT", True)
    assert not stats.equivalence({"UP": 0.10}, 0.10).holds  # strict: < margin
    assert stats.equivalence(pd.Series({"a": -0.2, "b": 0.05}), 0.1).group == "a"
    with pytest.raises(StatsError, match="per_group_diffs"):
        stats.equivalence({}, 0.1)
    with pytest.raises(StatsError, match="per_group_diffs"):
        stats.equivalence({"a": math.nan}, 0.1)


@pytest.mark.parametrize(("piece", "chunk"), [(1, 7), (5, 64), (8192, 1 << 18), (3, 12)])
def test_indices_drawn_in_pieces_are_one_call_s_stream(
    piece: int, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41: draw_indices and the chunked, pipelined resampled means are the one-call draw.

    The pieces and chunks (several chunks: the two-thread pipeline) leave the generator where
    one ``integers`` call over the whole block leaves it, and the means are its rows' means.
    """
    monkeypatch.setattr(stats, "DRAW_PIECE", piece)
    monkeypatch.setattr(stats, "CHUNK_ELEMENTS", chunk)
    for n, iterations in ((1, 9), (13, 40), (29, 17)):
        values = np.random.default_rng(n).random(n)
        one = np.random.Generator(np.random.PCG64(99))
        expected = values[one.integers(0, n, size=(iterations, n))].mean(axis=1)
        pieces = np.random.Generator(np.random.PCG64(99))
        got = stats._resampled_means(pieces, values, iterations)
        assert np.array_equal(got, expected)
        assert pieces.bit_generator.state == one.bit_generator.state
        out = np.empty((3, n), dtype=np.int64)
        stats.draw_indices(pieces, n, out)
        assert np.array_equal(out, one.integers(0, n, size=(3, n)))
        assert pieces.bit_generator.state == one.bit_generator.state
