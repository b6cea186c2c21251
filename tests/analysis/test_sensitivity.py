"""Sensitivity analyses beside the registered mixed model (``analysis/_sensitivity.py``).

Satterthwaite degrees of freedom against the closed forms of balanced designs, the REML fits
against statsmodels and the verifier's independent REML, the cluster bootstrap against its
documented draw order, and the bad inputs of issue 19: a probe-by-arm model that cannot be
fitted, arms at ceiling, all arms at ceiling.
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from locations import REPO

from analysis import _sensitivity as sens
from analysis._analyze import Dataset, Result, fit_model, hypothesis_results, sensitivity_lmm
from verify import _restats as vst
from verify._recompute.compare import _first_difference
from verify._recompute.dataset import _Dataset
from verify._recompute.hypotheses import _hypotheses
from verify._recompute.model import _model
from verify._recompute.recompute import _recompute
from verify._recompute.sensitivity import _sensitivity
from verify._reml import RemlModel
from verify._reml import check_point as vst_check

ROOT = REPO


def _balanced(
    seed: int, probes: int = 6, arms: str = "ABC", reps: int = 4, sd_cell: float = 0.2
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    g, arm, y = [], [], []
    for j in range(probes):
        u = rng.normal(0, 0.3)
        for k, a in enumerate(arms):
            w = rng.normal(0, sd_cell)
            for _ in range(reps):
                g.append(f"p{j}")
                arm.append(a)
                y.append(0.1 * k + u + w + rng.normal(0, 0.1))
    x = np.column_stack([np.ones(len(y))] + [[v == b for v in arm] for b in arms[1:]])
    return {
        "y": np.array(y),
        "x": x.astype(float),
        "g": g,
        "arm": arm,
        "cell": [f"{p}|{a}" for p, a in zip(g, arm, strict=True)],
    }


def test_satterthwaite_df_match_closed_forms_of_balanced_designs() -> None:
    d = _balanced(0)
    n, probes, arms = d["y"].size, 6, 3
    one = [""] * n
    arm_b = np.array([0.0, 1.0, 0.0])
    # split-plot: probe x arm random effect, arm contrast on (G - 1)(a - 1) df
    split = sens.fit_reml(
        d["y"], d["x"], d["g"], [d["g"], d["cell"]], one, ["group", "group_by_arm", "residual"]
    )
    got = sens.satterthwaite_contrast(split, arm_b, "two-sided")
    assert got["df"] == pytest.approx((probes - 1) * (arms - 1), rel=1e-4)
    # random intercept only: the arm contrast rests on the within-probe residual, N - G - a + 1
    ri = sens.fit_reml(d["y"], d["x"], d["g"], [d["g"]], one, ["group", "residual"])
    assert sens.satterthwaite_contrast(ri, arm_b, "two-sided")["df"] == pytest.approx(
        n - probes - arms + 1, rel=1e-4
    )
    # balanced one-way random effects: the grand mean on G - 1 df
    ones = np.ones((n, 1))
    oneway = sens.fit_reml(d["y"], ones, d["g"], [d["g"]], one, ["group", "residual"])
    c = sens.satterthwaite_contrast(oneway, np.array([1.0]), "two-sided")
    assert c["df"] == pytest.approx(probes - 1, rel=1e-4)
    # and the one-way t interval is then exactly the t interval of the probe means
    means = pd.Series(d["y"]).groupby(d["g"]).mean()
    half = float(np.std(means, ddof=1) / math.sqrt(probes))
    assert c["se"] == pytest.approx(half, rel=1e-6)
    # the verifier's own Satterthwaite (numerical derivatives of another REML code) agrees
    model = RemlModel(d["y"], d["x"], d["g"], [d["g"], d["cell"]])
    mine = vst.satterthwaite(model, split.params, arm_b, "two-sided")
    assert mine["df"] == pytest.approx(got["df"], rel=1e-4)
    assert mine["p"] == pytest.approx(got["p"], rel=1e-4)


def test_probe_by_arm_fit_matches_statsmodels_and_the_verifier() -> None:
    import statsmodels.formula.api as smf

    d = _balanced(1)
    df = pd.DataFrame({"y": d["y"], "arm": d["arm"], "g": d["g"]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = smf.mixedlm(
            "y ~ arm", df, groups="g", re_formula="1", vc_formula={"cell": "0 + C(arm)"}
        ).fit(reml=True)
    fit = sens.fit_reml(
        d["y"],
        d["x"],
        d["g"],
        [d["g"], d["cell"]],
        [""] * len(d["g"]),
        ["group", "group_by_arm", "residual"],
    )
    assert fit.loglik >= float(ref.llf) - 1e-7
    assert fit.params == pytest.approx(
        [float(np.asarray(ref.cov_re)[0, 0]), float(ref.vcomp[0]), float(ref.scale)], rel=1e-3
    )
    assert fit.beta == pytest.approx(np.asarray(ref.fe_params), rel=1e-5)
    verifier = RemlModel(d["y"], d["x"], d["g"], [d["g"], d["cell"]], d["arm"])
    het = sens.fit_reml(
        d["y"],
        d["x"],
        d["g"],
        [d["g"], d["cell"]],
        d["arm"],
        ["group", "group_by_arm", "rA", "rB", "rC"],
    )
    assert verifier.loglik(het.params) == pytest.approx(het.loglik, abs=1e-9)
    assert het.loglik >= verifier.maximise().loglik - 1e-6


def test_cluster_bootstrap_follows_the_documented_draw_order() -> None:
    diffs = np.array([0.1, 0.3, -0.2, 0.05, 0.4])
    got = sens.cluster_bootstrap(diffs, 500, 7, "two-sided")
    rng = np.random.Generator(np.random.PCG64(7))
    reps = np.array([diffs[rng.integers(0, 5, size=5)].mean() for _ in range(500)])
    assert (got["lower"], got["upper"]) == tuple(np.quantile(reps, [0.025, 0.975]))
    one = sens.cluster_bootstrap(diffs, 500, 7, "one-sided")
    assert one["lower"] == np.quantile(reps, 0.05) and one["upper"] == math.inf
    mirror = vst.probe_bootstrap(list(diffs), 500, 7, "two-sided")
    assert (mirror["lower"], mirror["upper"]) == (got["lower"], got["upper"])


def test_bootstrap_index_blocks_are_drawn_once_in_the_documented_chunks() -> None:
    """The remembered index blocks are the chunked draws ``PCG64(seed)`` gives, block by block
    (``2**18 // G`` rows each): 100,000 probes make chunks of 2 rows, so 5 iterations are three
    calls; a second contrast of as many probes reuses them, with its own differences."""
    rng = np.random.default_rng(3)
    first, second = rng.normal(size=100_000), rng.normal(size=100_000)
    sens._BOOTSTRAP_MEMO.clear()
    got = sens.cluster_bootstrap(first, 5, 11, "two-sided")
    assert (11, 5, 100_000) in sens._BOOTSTRAP_MEMO
    again = sens.cluster_bootstrap(second, 5, 11, "one-sided")
    draws = np.random.Generator(np.random.PCG64(11))
    index = np.concatenate([draws.integers(0, 100_000, size=(m, 100_000)) for m in (2, 2, 1)])
    for diffs, result, sides in ((first, got, "two-sided"), (second, again, "one-sided")):
        reps = diffs[index].mean(axis=1)
        if sides == "two-sided":
            want = tuple(np.quantile(reps, [0.025, 0.975]))
        else:
            want = (np.quantile(reps, 0.05), math.inf)
        assert (result["lower"], result["upper"]) == want


def test_block_labels_are_coded_as_sorted_strings_and_columns_by_first_appearance() -> None:
    """:class:`_Blocks`' label coding: ``_factorize`` is ``np.unique`` of the labels as strings;
    ``_first_seen_rank`` numbers each group's labels in the order the rows show them."""
    rng = np.random.default_rng(5)
    for _ in range(50):
        n = int(rng.integers(1, 200))
        labels: list[Any] = [
            f"s{int(v)}" if v % 3 else int(v) for v in rng.integers(0, 12, size=n).tolist()
        ]
        names, codes = sens._factorize(labels)
        want_names, want_codes = np.unique([str(v) for v in labels], return_inverse=True)
        assert names == want_names.tolist() and codes.tolist() == want_codes.tolist()
        gcode = rng.integers(0, 4, size=n).astype(np.intp)
        seen: dict[tuple[int, str], int] = {}
        width: dict[int, int] = {}
        want = []
        for g, lab in zip(gcode.tolist(), labels, strict=True):
            if (g, str(lab)) not in seen:
                seen[(g, str(lab))] = width.get(g, 0)
                width[g] = width.get(g, 0) + 1
            want.append(seen[(g, str(lab))])
        assert sens._first_seen_rank(gcode, labels).tolist() == want


def test_satterthwaite_tails_are_scipy_t_bit_for_bit() -> None:
    """``satterthwaite_contrast`` calls ``scipy.special.stdtr``/``stdtrit`` directly: its p and
    bounds are those of ``scipy.stats.t``'s ``sf`` and ``ppf``, the same bits."""
    from scipy import stats as sps

    d = _balanced(4, probes=5)
    fit = sens.fit_reml(
        d["y"],
        d["x"],
        d["g"],
        [d["g"], d["cell"]],
        [""] * d["y"].size,
        ["group", "group_by_arm", "residual"],
    )
    weights = np.array([0.0, 1.0, 0.0])
    for sides in ("one-sided", "two-sided"):
        c = sens.satterthwaite_contrast(fit, weights, sides)
        t, df, se = c["t"], c["df"], c["se"]
        if sides == "one-sided":
            assert c["p"] == float(sps.t.sf(t, df))
            assert c["lower"] == c["estimate"] - float(sps.t.ppf(0.95, df)) * se
        else:
            assert c["p"] == float(2 * sps.t.sf(abs(t), df))
            q = float(sps.t.ppf(0.975, df))
            assert (c["lower"], c["upper"]) == (c["estimate"] - q * se, c["estimate"] + q * se)


# ------------------------------------------------------------------------------ the result

PLAN: dict[str, Any] = {
    "arms": {"A": {"role": "full"}, "B": {"role": "matched-control"}, "C": {"role": "vehicle"}},
    "design": {"bootstrap_iterations": 200, "bootstrap_seed": 5},
    "analysis": {"random_intercept": "stimulus"},
    "hypotheses": [
        {
            "id": "H1",
            "description": "A beats B",
            "contrast": ["A", "B"],
            "test": "lmm",
            "sides": "one-sided",
            "alpha": 0.05,
        },
        {
            "id": "H2",
            "description": "B vs C",
            "contrast": ["B", "C"],
            "test": "lmm",
            "sides": "two-sided",
            "alpha": 0.05,
        },
    ],
}


def _dataset(rows: list[tuple[str, str, int, float]]) -> Dataset:
    trials = pd.DataFrame(
        [
            {
                "trial": f"{a}|{s}|{r}",
                "arm": a,
                "model": "",
                "stimulus": s,
                "rep": r,
                "accuracy": acc,
                "control": False,
                "excluded": False,
                "status": "ok",
            }
            for a, s, r, acc in rows
        ]
    )
    items = pd.DataFrame(
        columns=[
            "trial",
            "arm",
            "model",
            "stimulus",
            "rep",
            "row",
            "position",
            "truth",
            "answer",
            "correct",
        ]
    )
    return Dataset(trials, items, ("A", "B", "C"), (), "0" * 64)


def _rows(seed: int, probes: int = 5, reps: int = 3, ceiling: str = "") -> list[Any]:
    rng = np.random.default_rng(seed)
    out = []
    for j in range(probes):
        u = rng.normal(0, 0.1)
        for a, m in (("A", 0.9), ("B", 0.5), ("C", 0.6)):
            w = rng.normal(0, 0.1)
            for r in range(reps):
                acc = 1.0 if a in ceiling else float(np.clip(m + u + w + rng.normal(0, 0.1), 0, 1))
                out.append((a, f"s{j}", r + 1, acc))
    return out


def _run(ds: Dataset) -> tuple[Result, list[Result], Result | None]:
    model, fit = fit_model(ds, PLAN)
    tested = hypothesis_results(ds, PLAN, fit)
    return model, tested, sensitivity_lmm(ds, PLAN, fit, tested)


def test_sensitivity_result_sits_beside_the_registered_verdicts() -> None:
    _, tested, result = _run(_dataset(_rows(3)))
    assert result is not None and result.status == "ok" and result.label == "sensitivity"
    v = result.values or {}
    assert [c["hypothesis"] for c in v["contrasts"]] == ["H1", "H2"]
    for c, h in zip(v["contrasts"], tested, strict=True):
        assert c["registered_verdict"] == h.verdict  # copied, never changed
        assert c["as_registered"]["estimate"] == (h.values or {})["estimate"]
        for name in ("registered", "probe_by_arm", "probe_by_arm_arm_residual"):
            assert c[name]["estimate"] == pytest.approx(c["as_registered"]["estimate"], abs=0.05)
            assert c[name]["df"] > 0
        assert c["cluster_bootstrap"]["n_clusters"] == 5
        if c["registered_verdict"] == "supported" and c["supports"] is False:
            assert "not under" in c["flag"]
    assert v["models"]["probe_by_arm"]["fitted"] is True
    assert v["models"]["probe_by_arm"]["lrt_p"] <= 1.0


@pytest.mark.parametrize(
    ("rows", "reason"),
    [
        (lambda: [r for r in _rows(4) if r[1] in ("s0", "s1")], "at least 3 probes"),
        (
            lambda: [r for r in _rows(4) if not (r[1] == "s2" and r[0] != "A")],
            "probe 's2' has trials in one arm only (A)",
        ),
        (lambda: [r for r in _rows(4) if r[2] == 1], "no probe × arm cell has two trials"),
    ],
)
def test_probe_by_arm_model_that_cannot_be_fitted_says_why(rows: Any, reason: str) -> None:
    model, tested, result = _run(_dataset(rows()))
    assert result is not None and result.status == "ok"
    v = result.values or {}
    for name in ("probe_by_arm", "probe_by_arm_arm_residual"):
        assert v["models"][name]["fitted"] is False
        assert reason in v["models"][name]["reason"]
    for c, h in zip(v["contrasts"], tested, strict=True):
        assert c["probe_by_arm"] is None and c["primary"] is None and c["supports"] is None
        assert c["registered_verdict"] == h.verdict
    # the registered results are those of a run without any sensitivity analysis
    again_model, again = fit_model(_dataset(rows()), PLAN)
    assert again_model.values == model.values and again is not None


def test_an_arm_at_ceiling_leaves_the_per_arm_residual_model_unfitted() -> None:
    _, tested, result = _run(_dataset(_rows(5, ceiling="A")))
    assert result is not None and result.status == "ok"
    v = result.values or {}
    het = v["models"]["probe_by_arm_arm_residual"]
    assert het["fitted"] is False and "arm A has zero residual variance" in het["reason"]
    assert v["models"]["probe_by_arm"]["fitted"] is True
    assert all(c["primary"] == "probe_by_arm" for c in v["contrasts"])
    assert all(t.status == "ok" for t in tested)


def test_all_arms_at_ceiling_fail_cleanly_with_the_registered_model() -> None:
    model, tested, result = _run(_dataset(_rows(6, ceiling="ABC")))
    assert model.status == "not applicable" and "zero variance" in (model.values or {})["reason"]
    assert all(t.verdict == "not computed" for t in tested)
    assert result is not None and result.status == "failed"
    assert "registered mixed model could not be fitted" in str(result.error)


# ------------------------------------------------------------------------------ clustered intervals


def test_cluster_proportion_matches_statsmodels_cluster_robust_mean() -> None:
    import statsmodels.api as sm
    from scipy import stats as sps

    from analysis import _stats as ast

    rng = np.random.default_rng(4)
    groups, ys = [], []
    for j in range(6):
        p = rng.uniform(0.3, 0.95)
        for _ in range(int(rng.integers(40, 80))):
            groups.append(j)
            ys.append(float(rng.uniform() < p))
    y = np.array(ys)
    g = np.array(groups)
    ref = sm.OLS(y, np.ones_like(y)).fit(cov_type="cluster", cov_kwds={"groups": g})
    correct = [int(y[g == j].sum()) for j in range(6)]
    n = [int((g == j).sum()) for j in range(6)]
    got = ast.cluster_proportion(correct, n)
    assert got["estimate"] == pytest.approx(float(ref.params[0]), rel=1e-12)
    assert got["se"] == pytest.approx(float(ref.bse[0]), rel=1e-10)
    q = sps.t.ppf(0.975, 5)
    assert got["lower"] == pytest.approx(got["estimate"] - q * got["se"], rel=1e-12)
    assert got["df"] == 5
    # wider than the Wilson interval that treats items as independent
    wilson = ast.wilson(sum(correct), sum(n))
    assert got["upper"] - got["lower"] > wilson.upper - wilson.lower
    mirror = vst.cluster_proportion(correct, n)
    assert mirror["se"] == pytest.approx(got["se"], rel=1e-12)
    one = ast.cluster_proportion([3], [10])
    assert one["lower"] is None and "fewer than two clusters" in one["note"]


def test_error_null_excludes_the_true_direction() -> None:
    from analysis import _stats as ast

    labels = ("UP", "RIGHT", "DOWN", "LEFT")
    # every error of an UP glyph is RIGHT, DOWN or LEFT, each with 1/3 under the null
    assert ast.error_null_excluding_truth(["UP"], labels) == pytest.approx([0, 1 / 3, 1 / 3, 1 / 3])
    shares = ast.error_null_excluding_truth(["UP", "UP", "RIGHT", "LEFT"], labels)
    assert shares == pytest.approx([2 / 12, 3 / 12, 4 / 12, 3 / 12])
    assert sum(shares) == pytest.approx(1.0)
    counts = [0, 30, 5, 5]
    chi = ast.chi_square_gof(counts, shares)
    from scipy import stats as sps

    expected = np.array(shares) * 40
    mask = expected > 0
    ref = sps.chisquare(np.array(counts)[mask], expected[mask])
    assert chi.chi2 == pytest.approx(float(ref.statistic), rel=1e-12)
    assert vst.error_null_excluding_truth(["UP", "UP", "RIGHT", "LEFT"], labels) == pytest.approx(
        shares
    )


def test_newcombe_hybrid_score_interval_matches_statsmodels() -> None:
    from statsmodels.stats.proportion import confint_proportions_2indep

    from analysis import _stats as ast

    for x1, n1, x2, n2 in ((47, 64, 38, 64), (0, 10, 3, 10), (16, 16, 10, 16), (5, 40, 9, 31)):
        got = ast.newcombe_diff(x1, n1, x2, n2)
        lo, hi = confint_proportions_2indep(x1, n1, x2, n2, method="newcomb", compare="diff")
        assert (got["lower"], got["upper"]) == pytest.approx((lo, hi), rel=1e-10, abs=1e-12)
        assert got["estimate"] == pytest.approx(x1 / n1 - x2 / n2)
        mirror = vst.newcombe_diff(x1, n1, x2, n2)
        assert (mirror["lower"], mirror["upper"]) == pytest.approx((lo, hi), rel=1e-10, abs=1e-12)


def test_one_sided_lmm_hypotheses_carry_the_two_sided_interval() -> None:
    _, tested, _ = _run(_dataset(_rows(3)))
    h1 = tested[0].values or {}
    assert h1["sides"] == "one-sided" and h1["upper"] is None  # +inf, cleaned
    lo, hi = h1["ci_two_sided"]
    assert lo < h1["estimate"] < hi
    assert hi - h1["estimate"] == pytest.approx(h1["estimate"] - lo)
    assert (hi - lo) / 2 == pytest.approx(1.959963984540054 * h1["se"], rel=1e-9)
    assert lo < h1["lower"]  # the one-sided bound is the tighter one
    assert "ci_two_sided" not in (tested[1].values or {})  # H2 is two-sided already


def _dense_reference(
    y: Any, x: Any, groups: list[str], terms: list[list[str]], classes: list[str], theta: Any
) -> dict[str, Any]:
    """The REML pieces from dense per-group ``V_j`` (the textbook formulas, for comparison)."""
    labels = sorted(set(classes))
    n, p = x.shape
    garr, carr = np.asarray(groups), np.asarray(classes)
    blocks = []
    for g in sorted(set(groups)):
        rows = np.flatnonzero(garr == g)
        dv = [
            np.equal.outer(np.asarray(t)[rows], np.asarray(t)[rows]).astype(float) for t in terms
        ] + [np.diag((carr[rows] == c).astype(float)) for c in labels]
        blocks.append((rows, dv))
    m = len(theta)
    a, b, cc, logdet = np.zeros((p, p)), np.zeros(p), 0.0, 0.0
    for rows, dv in blocks:
        v = sum(t * d for t, d in zip(theta, dv, strict=True))
        vi = np.linalg.inv(v)
        logdet += float(np.linalg.slogdet(v)[1])
        a += x[rows].T @ vi @ x[rows]
        b += x[rows].T @ vi @ y[rows]
        cc += float(y[rows] @ vi @ y[rows])
    cmat = np.linalg.inv(a)
    beta = cmat @ b
    ll = -0.5 * (
        logdet
        + float(np.linalg.slogdet(a)[1])
        + cc
        - float(b @ beta)
        + (n - p) * math.log(2 * math.pi)
    )
    t1, am, bm = np.zeros((m, m)), np.zeros((m, m, p, p)), np.zeros((m, p, p))
    # the score and observed Hessian from P = V⁻¹ − V⁻¹XCXᵀV⁻¹ of the whole (block) V
    big_v = np.zeros((n, n))
    big_d = [np.zeros((n, n)) for _ in range(m)]
    for rows, dv in blocks:
        v = sum(t * d for t, d in zip(theta, dv, strict=True))
        vi = np.linalg.inv(v)
        u = vi @ x[rows]
        big_v[np.ix_(rows, rows)] = v
        for i in range(m):
            big_d[i][np.ix_(rows, rows)] = dv[i]
            bm[i] += u.T @ dv[i] @ u
            for j in range(m):
                t1[i, j] += float(np.trace(vi @ dv[i] @ vi @ dv[j]))
                am[i, j] += u.T @ dv[j] @ vi @ dv[i] @ u
    vinv = np.linalg.inv(big_v)
    pmat = vinv - vinv @ x @ cmat @ x.T @ vinv
    py = pmat @ y
    score = np.array([-0.5 * np.trace(pmat @ d) + 0.5 * py @ d @ py for d in big_d])
    hess = np.array(
        [
            [0.5 * np.trace(pmat @ di @ pmat @ dj) - py @ di @ pmat @ dj @ py for dj in big_d]
            for di in big_d
        ]
    )
    info = np.array(
        [
            [
                0.5
                * (t1[i, j] - 2 * np.trace(cmat @ am[i, j]) + np.trace(cmat @ bm[i] @ cmat @ bm[j]))
                for j in range(m)
            ]
            for i in range(m)
        ]
    )
    return {
        "loglik": ll,
        "beta": beta,
        "cov": cmat,
        "info": info,
        "dcov": [cmat @ bm[i] @ cmat for i in range(m)],
        "score": score,
        "hess": hess,
    }


def test_blockwise_reml_equals_the_dense_computation() -> None:
    """Writer (Woodbury on per-group sums) and verifier (atoms) against dense ``V_j``, 1e-9;
    the plan's closed-form score, information and observed Hessian against the textbook
    ``−½tr(PV_i) + ½yᵀPV_iPy`` and ``½tr(PV_iPV_j) − yᵀPV_iPV_jPy``."""
    rng = np.random.default_rng(11)
    d = _balanced(2, probes=5, reps=3)
    keep = rng.uniform(size=d["y"].size) > 0.2  # unbalanced: some cells lose trials
    y, x = d["y"][keep], d["x"][keep]
    g = [v for v, k in zip(d["g"], keep, strict=True) if k]
    arm = [v for v, k in zip(d["arm"], keep, strict=True) if k]
    cell = [f"{a}|{b}" for a, b in zip(g, arm, strict=True)]
    theta = np.array([0.08, 0.03, 0.012, 0.02, 0.009])
    ref = _dense_reference(y, x, g, [g, cell], arm, theta)
    blocks = sens._Blocks(y, x, g, [g, cell], arm)
    assert blocks.loglik(theta) == pytest.approx(ref["loglik"], rel=1e-9, abs=1e-9)
    free = list(range(theta.size))
    assert blocks.information(theta, free) == pytest.approx(ref["info"], rel=1e-9, abs=1e-9)
    for mine, want in zip(blocks.cov_gradient(theta, free), ref["dcov"], strict=True):
        assert mine == pytest.approx(want, rel=1e-9, abs=1e-12)
    score, info, hess = blocks.derivatives(theta)  # ledger plan's closed forms
    assert score == pytest.approx(ref["score"], rel=1e-9, abs=1e-9)
    assert info == pytest.approx(ref["info"], rel=1e-9, abs=1e-9)
    assert hess == pytest.approx(ref["hess"], rel=1e-9, abs=1e-9)
    assert not np.allclose(hess, -info, rtol=1e-3)  # observed, not expected, information
    verifier = RemlModel(y, x, g, [g, cell], arm)
    pt = verifier.point(theta)
    assert pt.loglik == pytest.approx(ref["loglik"], rel=1e-9, abs=1e-9)
    assert pt.beta == pytest.approx(ref["beta"], rel=1e-9)
    info, dcov = verifier.information(theta)
    assert info == pytest.approx(ref["info"], rel=1e-9, abs=1e-9)
    for mine, want in zip(dcov, ref["dcov"], strict=True):
        assert mine == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_probes_of_thousands_of_trials_are_fitted() -> None:
    """Six probes of 600 trials each (3,600 rows; the dense fit refused probes over 300):
    fitted by the writer, re-derived by the verifier's own REML, Satterthwaite df close to the
    balanced split-plot's (G - 1)(a - 1)."""
    d = _balanced(9, probes=6, reps=200, sd_cell=0.15)
    assert d["y"].size == 3600
    het = sens.fit_reml(
        d["y"],
        d["x"],
        d["g"],
        [d["g"], d["cell"]],
        d["arm"],
        ["group", "group_by_arm", "rA", "rB", "rC"],
    )
    arm_b = np.array([0.0, 1.0, 0.0])
    c = sens.satterthwaite_contrast(het, arm_b, "two-sided")
    assert c["df"] == pytest.approx(10, rel=0.05)
    model = RemlModel(d["y"], d["x"], d["g"], [d["g"], d["cell"]], d["arm"])
    point, problem = vst_check(model, het.params)
    assert problem is None and point.loglik == pytest.approx(het.loglik, rel=1e-9)
    mine = vst.satterthwaite(model, het.params, arm_b, "two-sided")
    assert mine["df"] == pytest.approx(c["df"], rel=1e-6)
    assert mine["p"] == pytest.approx(c["p"], rel=1e-6)
    # and through the analysis: every sensitivity model of probes with 600 trials is fitted
    _, _, result = _run(_dataset(_rows(13, probes=4, reps=200)))
    v = (result.values if result is not None else None) or {}
    assert all(
        v["models"][m]["fitted"]
        for m in ("registered", "probe_by_arm", "probe_by_arm_arm_residual")
    )
    assert all(c["probe_by_arm_arm_residual"]["df"] > 0 for c in v["contrasts"])


def test_a_stimulus_subset_hypothesis_gets_its_own_sensitivity_models() -> None:
    """An lmm hypothesis with ``stimuli`` (the paper's pooled dismantling model) is tested on
    its subset model, so its sensitivity row is fitted on that subset, in the writer and the
    verifier alike; the registered verdict is copied, never changed."""
    plan = {
        **PLAN,
        "hypotheses": [
            *PLAN["hypotheses"],
            {
                "id": "H3",
                "description": "pooled over s0-s3",
                "contrast": ["A", "B"],
                "test": "lmm",
                "sides": "one-sided",
                "alpha": 0.05,
                "stimuli": ["s0", "s1", "s2", "s3"],
            },
        ],
    }
    ds = _dataset(_rows(6, probes=6))
    _, fit = fit_model(ds, plan)
    tested = hypothesis_results(ds, plan, fit)
    result = sensitivity_lmm(ds, plan, fit, tested)
    assert result is not None and result.status == "ok"
    rows = (result.values or {})["contrasts"]
    assert [c["hypothesis"] for c in rows] == ["H1", "H2", "H3"]
    sub = rows[2]
    assert sub["stimuli"] == ["s0", "s1", "s2", "s3"]
    assert (
        sub["cluster_bootstrap"]["n_clusters"] == 4
        and rows[0]["cluster_bootstrap"]["n_clusters"] == 6
    )
    subset_model = (tested[2].values or {})["subset_model"]
    assert sub["subset_models"]["registered"]["variances"] == {
        "group": subset_model["group_variance"],
        "residual": subset_model["residual_variance"],
    }
    assert sub["registered_verdict"] == tested[2].verdict
    assert sub["as_registered"]["estimate"] == (tested[2].values or {})["estimate"]
    assert sub["probe_by_arm"]["df"] > 0
    twin = _Dataset(ds.trials.to_dict("records"), [], ["A", "B", "C"], [], "0" * 64)
    _, vfit = _model(twin, plan, recorded=None)
    vtested = _hypotheses(
        twin, plan, vfit, {f"hypothesis.{r.hypothesis}": r.values for r in tested}
    )
    recorded = result.as_dict()["values"]  # as the event holds it (JSON: inf as null)
    again = _sensitivity(twin, plan, vfit, vtested, recorded)
    assert again is not None and again.status == "ok"
    assert again.values.get("_reml_problem") is None
    assert _first_difference(recorded, again.values, "values", 1e-6) is None


# ------------------------------------------------------------------------------ several models


def _models_dataset(rows: list[tuple[str, str, str, int, float]]) -> Dataset:
    trials = pd.DataFrame(
        [
            {
                "trial": f"{a}|{m}|{s}|{r}",
                "arm": a,
                "model": m,
                "stimulus": s,
                "rep": r,
                "accuracy": acc,
                "control": False,
                "excluded": False,
                "status": "ok",
            }
            for a, m, s, r, acc in rows
        ]
    )
    items = pd.DataFrame(
        columns=[
            "trial",
            "arm",
            "model",
            "stimulus",
            "rep",
            "row",
            "position",
            "truth",
            "answer",
            "correct",
        ]
    )
    return Dataset(trials, items, ("A", "B", "C"), (), "0" * 64, models=("big", "small"))


def _model_rows(seed: int, small_probes: int = 5) -> list[Any]:
    """Two models on five probes; ``small`` runs only its first ``small_probes`` probes."""
    rng = np.random.default_rng(seed)
    out = []
    for model, shift in (("big", 0.0), ("small", -0.15)):
        for j in range(5 if model == "big" else small_probes):
            u = rng.normal(0, 0.1)
            for a, m in (("A", 0.85), ("B", 0.5), ("C", 0.6)):
                w = rng.normal(0, 0.08)
                for r in range(3):
                    acc = float(np.clip(m + shift + u + w + rng.normal(0, 0.1), 0, 1))
                    out.append((a, model, f"s{j}", r + 1, acc))
    return out


def _several(rows: list[Any], only: str | None = None) -> tuple[list[Result], list[Any]]:
    """The writer's results, and the verifier's sensitivity results (``only`` that model's)."""
    from analysis._analyze import run_analyses

    ds = _models_dataset(rows)
    results = run_analyses(ds, PLAN)
    twin = _Dataset(
        ds.trials.to_dict("records"), [], ["A", "B", "C"], [], "0" * 64, models=["big", "small"]
    )
    recorded = {r.id: r.as_dict()["values"] for r in results}
    if only is None:
        return results, _recompute(twin, PLAN, None, recorded)
    sub = twin.for_model(only)
    _, fit = _model(sub, PLAN, recorded=recorded[f"model.lmm@{only}"])
    tested = _hypotheses(sub, PLAN, fit, recorded, f"@{only}")
    for r in tested:
        r.hypothesis = f"{r.hypothesis}@{only}"
    return results, [
        _sensitivity(sub, PLAN, fit, tested, recorded[f"sensitivity.lmm@{only}"], model=only)
    ]


def test_several_models_get_pooled_and_per_model_sensitivity_rederived_by_the_verifier() -> None:
    results, again = _several(_model_rows(7))
    ids = [r.id for r in results]
    assert ids[-3:] == ["sensitivity.lmm", "sensitivity.lmm@big", "sensitivity.lmm@small"]
    by_id = {r.id: r for r in results}
    pooled = by_id["sensitivity.lmm"].values or {}
    assert by_id["sensitivity.lmm"].label == "sensitivity"
    assert pooled["factors"] == ["model"] and pooled["factor_references"] == ["big"]
    assert [c["hypothesis"] for c in pooled["contrasts"]] == ["H1", "H2"]
    model_lmm = by_id["model.lmm"].values or {}
    assert pooled["models"]["registered"]["variances"] == {
        "group": model_lmm["group_variance"],
        "residual": model_lmm["residual_variance"],
    }
    for c in pooled["contrasts"]:
        h = by_id[f"hypothesis.{c['hypothesis']}"]
        assert c["registered_verdict"] == h.verdict
        # the registered model re-evaluated at its own variances: the same point estimate
        assert c["registered"]["estimate"] == pytest.approx((h.values or {})["estimate"], rel=1e-9)
        # the probe bootstrap pools the models' per-probe differences with equal weight
        assert c["cluster_bootstrap"]["n_clusters"] == 5
    for model in ("big", "small"):
        v = by_id[f"sensitivity.lmm@{model}"].values or {}
        assert v["model"] == model and "factors" not in v
        assert [c["hypothesis"] for c in v["contrasts"]] == [f"H1@{model}", f"H2@{model}"]
        for c in v["contrasts"]:
            h = by_id[f"hypothesis.{c['hypothesis']}"]
            assert c["registered_verdict"] == h.verdict
            assert c["registered"]["estimate"] == pytest.approx(
                (h.values or {})["estimate"], rel=1e-9
            )
    mine = {r.id: r for r in again}
    for rid in ("sensitivity.lmm", "sensitivity.lmm@big", "sensitivity.lmm@small"):
        assert mine[rid].status == "ok" and mine[rid].values.get("_reml_problem") is None
        recorded = by_id[rid].as_dict()["values"]
        assert _first_difference(recorded, mine[rid].values, "values", 1e-6) is None
    # a moved per-model variance is caught by the verifier's own REML check
    moved = by_id["sensitivity.lmm@small"].as_dict()["values"]
    moved["models"]["probe_by_arm"]["variances"]["group_by_arm"] *= 1.01
    twin = _Dataset(
        _models_dataset(_model_rows(7)).trials.to_dict("records"),
        [],
        ["A", "B", "C"],
        [],
        "0" * 64,
        models=["big", "small"],
    )
    tested = [r for r in again if r.hypothesis is not None]
    check = _sensitivity(
        twin.for_model("small"),
        PLAN,
        _model(twin.for_model("small"), PLAN)[1],
        tested,
        moved,
        model="small",
    )
    assert check is not None and "probe_by_arm" in str(check.values.get("_reml_problem"))


def test_one_models_unfittable_probe_by_arm_model_leaves_the_others_untouched() -> None:
    """Model ``small`` ran two probes only: its probe-by-arm models say why they are not
    fitted; the pooled and ``big``'s sensitivity models and every registered result stand."""
    rows = _model_rows(8, small_probes=2)
    results, again = _several(rows, only="small")
    by_id = {r.id: r for r in results}
    small = by_id["sensitivity.lmm@small"].values or {}
    for name in ("probe_by_arm", "probe_by_arm_arm_residual"):
        assert small["models"][name] == {
            "fitted": False,
            "reason": "the probe-by-arm model needs at least 3 probes; the trials have 2",
        }
        assert (by_id["sensitivity.lmm@big"].values or {})["models"][name]["fitted"] is True
        assert (by_id["sensitivity.lmm"].values or {})["models"][name]["fitted"] is True
    assert all(
        c["probe_by_arm"] is None
        and c["primary"] is None
        and c["supports"] is None
        and c["registered"] is not None
        for c in small["contrasts"]
    )
    # the registered results are those of a run without any sensitivity analysis
    ds = _models_dataset(rows)
    bare = [r for r in results if r.label != "sensitivity"]
    model, pooled_fit = fit_model(ds, PLAN)
    assert model.values == by_id["model.lmm"].values
    for r in hypothesis_results(ds, PLAN, pooled_fit):
        assert (r.values, r.verdict) == (by_id[r.id].values, by_id[r.id].verdict)
    assert len(bare) == len(results) - 3
    mine = {r.id: r for r in again}
    assert (
        _first_difference(
            by_id["sensitivity.lmm@small"].as_dict()["values"],
            mine["sensitivity.lmm@small"].values,
            "values",
            1e-6,
        )
        is None
    )


def test_cells_without_residual_variation_leave_the_probe_by_arm_models_unfitted() -> None:
    """Every replicate of a probe × arm cell scores the same (a simulated model that answers
    alike each time): the REML likelihood grows without bound as the residual variance goes
    to 0, so neither probe-by-arm model is fitted; writer and verifier say so alike."""
    rng = np.random.default_rng(12)
    rows = []
    for j in range(5):
        for a, m in (("A", 0.8), ("B", 0.5), ("C", 0.6)):
            acc = float(np.clip(m + rng.normal(0, 0.15), 0, 1))
            rows += [(a, f"s{j}", r, acc) for r in (1, 2, 3)]
    ds = _dataset(rows)
    _, tested, result = _run(ds)
    v = (result.values if result is not None else None) or {}
    assert (
        "cannot be separated from the probe-by-arm variance"
        in v["models"]["probe_by_arm"]["reason"]
    )
    assert v["models"]["probe_by_arm_arm_residual"]["fitted"] is False
    assert v["models"]["registered"]["fitted"] is True
    assert all(t.status == "ok" for t in tested)
    twin = _Dataset(ds.trials.to_dict("records"), [], ["A", "B", "C"], [], "0" * 64)
    _, vfit = _model(twin, PLAN, recorded=None)
    vtested = _hypotheses(
        twin, PLAN, vfit, {f"hypothesis.{r.hypothesis}": r.values for r in tested}
    )
    recorded = result.as_dict()["values"] if result is not None else {}
    again = _sensitivity(twin, PLAN, vfit, vtested, recorded)
    assert again is not None
    assert _first_difference(recorded, again.values, "values", 1e-6) is None


def test_a_likelihood_with_two_maxima_is_fitted_at_the_higher_on_both_sides() -> None:
    """The per-arm residual model of a 350-trial tumbling-E study (arms A, B, C; ``bench_scale``).

    Arm A is at ceiling (residual variance 2e-4 beside 0.1 and 0.16), so ``l_R`` has a maximum
    with the random effects at B and C's scale and a more likely one at A's; the three shares
    of ``var(y)`` all start in the first. The writer (``fit_reml``, and ``ledger plan``'s fit
    from its moment starts) and the verifier (``maximise``) must each reach the higher one,
    agree there on the df, and the verifier must read the writer's variance of exactly 0 back
    from RFC 8785 JSON (an integer there).
    """
    from verify._canonical import canonical_json
    from verify._recompute.sensitivity import _recorded_variances

    t = pd.read_csv(ROOT / "tests" / "vectors" / "reml-two-maxima.csv")
    y = (t["n_correct"] / t["n_items"]).to_numpy(dtype=np.float64)
    arm = t["arm"].astype(str).tolist()
    groups = t["stimulus"].astype(str).tolist()
    cells = [f"{g}|{a}" for g, a in zip(groups, arm, strict=True)]
    exog = sens.design_matrix(arm, ["B", "C"], arm, None)
    names = ["group", "group_by_arm", "residual[A]", "residual[B]", "residual[C]"]
    fit = sens.fit_reml(y, exog, groups, [groups, cells], arm, names)
    model = sens._Blocks(y, exog, groups, [groups, cells], arm)
    v = model.var
    first = sens._climb(model, np.array([0.05 * v, 0.05 * v, 0.9 * v, 0.9 * v, 0.9 * v]))
    assert model.loglik(first) < fit.loglik - 0.5  # the shares' maximum is the lower one

    # ledger plan's fit (docs/planning.md §3): its Newton steps from the moment starts reach
    # the lower maximum, and its own scan finds the higher one
    warm = sens.moment_starts(y, exog, groups, cells, arm)
    assert model.loglik(sens.polish(model, warm, exact=True)) < fit.loglik - 0.5
    planned = sens.fit_reml(y, exog, groups, [groups, cells], arm, names, warm=warm, exact=True)
    assert planned.loglik == pytest.approx(fit.loglik, abs=1e-9)
    assert planned.params[0] == 0.0
    assert planned.params[1:] == pytest.approx(fit.params[1:], rel=1e-5)

    mine = RemlModel(y, exog, groups, [groups, cells], arm)
    own = mine.maximise()
    assert abs(own.loglik - fit.loglik) <= 1e-6
    assert own.loglik == pytest.approx(mine.loglik(fit.params), abs=1e-6)
    assert own.params[0] == 0.0 and fit.params[0] <= sens.BOUNDARY_FRACTION * v

    for weights in (np.array([0.0, -1.0, 0.0]), np.array([0.0, 1.0, -1.0])):
        ours = sens.satterthwaite_contrast(fit, weights, "two-sided")
        theirs = vst.satterthwaite(mine, fit.params, weights, "two-sided")
        assert theirs["df"] == pytest.approx(ours["df"], rel=1e-9)
        assert theirs["se"] == pytest.approx(ours["se"], rel=1e-9)

    recorded = {
        "m": {"fitted": True, "variances": dict(zip(names, own.params.tolist(), strict=True))}
    }
    read = _recorded_variances(json.loads(canonical_json(recorded)), "m", names, "values.models")
    assert read == (own.params.tolist(), None)


def _arm_near_ceiling(
    seed: int, sd_a: float, reps: int
) -> tuple[Any, Any, list[str], list[str], list[str]]:
    """Six probes x arms A, B, C, ``reps`` trials a cell; arm A's residual SD ``sd_a`` (near
    ceiling) beside 0.25 and 0.28: ``(y, X, probes, cells, arms)``."""
    rng = np.random.default_rng(seed)
    sd = {"A": sd_a, "B": 0.25, "C": 0.28}
    g, arm, y = [], [], []
    for j in range(6):
        u = rng.normal(0, 0.15)
        for k, a in enumerate("ABC"):
            w = rng.normal(0, 0.17)
            y += list(0.3 * k + u + w + rng.normal(0, sd[a], reps))
            g += [f"p{j}"] * reps
            arm += [a] * reps
    cell = [f"{p}|{a}" for p, a in zip(g, arm, strict=True)]
    x = np.column_stack([np.ones(len(y))] + [[v == b for v in arm] for b in "BC"]).astype(float)
    return np.array(y), x, g, cell, arm


def test_df_keep_their_digits_with_an_arm_near_ceiling_and_hundreds_of_trials_a_cell() -> None:
    """An arm whose residual variance is near 0 (at ceiling) beside cells of 500 trials: the
    Woodbury difference ``XᵀWX − ZᵀWX·K·ZᵀWX`` loses digits with the condition of
    ``I + ΛZᵀWZΛ``, and the writer once recorded se and df 2-7e-7 off here, 1-3e-6 with 3,000
    a cell (an honest 99,995-trial archive failed verification at 1e-6). ``gls`` and
    ``satterthwaite_parts`` keep them: writer and verifier (its own atoms and Cholesky) agree
    to 1e-9 (se, df) and 1e-8 (estimate, and p, which amplifies the estimate's rounding)."""
    yv, x, g, cell, arm = _arm_near_ceiling(41, 0.01, 500)
    het = sens.fit_reml(yv, x, g, [g, cell], arm, ["group", "group_by_arm", "rA", "rB", "rC"])
    assert het.params[2] < 1e-2 * het.params[3]  # the ceiling arm's residual variance
    model = RemlModel(yv, x, g, [g, cell], arm)
    for weights in (np.array([0.0, 1.0, 0.0]), np.array([0.0, 1.0, -1.0])):
        mine = vst.satterthwaite(model, het.params, weights, "two-sided")
        got = sens.satterthwaite_contrast(het, weights, "two-sided")
        for key, rel in (("se", 1e-9), ("df", 1e-9), ("estimate", 1e-8), ("p", 1e-8)):
            assert got[key] == pytest.approx(mine[key], rel=rel), key
    assert het.cov == pytest.approx(model.point(het.params).cov, rel=1e-9)


def test_an_arm_near_ceiling_with_hundreds_of_trials_a_cell_is_fitted() -> None:
    """One arm's residual standard deviation 0.005 beside 0.25-0.28, 300 trials a cell: with
    the Woodbury form, ``l_R``'s rounding hid the last Newton steps' gains and the fit failed
    its own check ("the REML fit failed", recorded as not fitted). On the atoms it is fitted,
    and the verifier's own REML check accepts the point as the maximum."""
    yv, x, g, cell, arm = _arm_near_ceiling(43, 0.005, 300)
    names = ["group", "group_by_arm", "rA", "rB", "rC"]
    het = sens.fit_reml(yv, x, g, [g, cell], arm, names)
    point, problem = vst_check(RemlModel(yv, x, g, [g, cell], arm), het.params)
    assert problem is None
    assert point.loglik == pytest.approx(het.loglik, rel=1e-9)
