"""The verifier's own REML check (``verify/_reml.py``): numpy and scipy only, no statsmodels.

Its log-likelihood is checked against the dense textbook formula and against statsmodels; the
check accepts the writer's recorded point on honest archives and refuses a recorded fixed
effect moved by 1e-4 relative (re-signed), a variance component moved off the maximum
(re-signed), a tiny p-value re-reported as 0 (re-signed), and recorded variance components it
cannot read (removed or garbled, re-signed: a FAIL naming the member, never its own fit in
their place).
"""

from __future__ import annotations

import ast
import json
import math
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from locations import REPO

from tests.verify.test_archive_tamper import SLOW, read_events, resign
from verify import Status, verify_archive
from verify._blas import one_blas_thread
from verify._recompute.compare import _first_difference
from verify._recompute.model import _recorded_point
from verify._recompute.sensitivity import _recorded_variances
from verify._reml import RemlModel, check_point, remembered_maxima

ROOT = REPO
SHIPPED = ROOT / "archive" / "prompt-tumbling-e"


def _data(seed: int, probes: int = 6, reps: int = 5) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    arms = ["A", "B", "C"]
    mean = {"A": 0.9, "B": 0.5, "C": 0.7}
    rows = []
    for p in range(probes):
        u = rng.normal(0, 0.15)
        for a in arms:
            cell = rng.normal(0, 0.1)
            for _ in range(reps):
                sd = 0.02 if a == "A" else 0.12
                rows.append((a, f"p{p}", mean[a] + u + cell + rng.normal(0, sd)))
    arm = [r[0] for r in rows]
    x = np.column_stack([np.ones(len(rows))] + [[a == b for a in arm] for b in arms[1:]])
    return {
        "y": np.array([r[2] for r in rows]),
        "x": x.astype(float),
        "arm": arm,
        "g": [r[1] for r in rows],
        "cell": [f"{r[1]}|{r[0]}" for r in rows],
    }


def _dense(
    d: dict[str, Any], theta: list[float], terms: list[list[str]], resid: list[str] | None
) -> tuple[float, np.ndarray, np.ndarray]:
    """The textbook REML log-likelihood with the n x n matrix V."""
    y, x, g = d["y"], d["x"], np.array(d["g"])
    n, p = x.shape
    classes = sorted(set(resid)) if resid else [""]
    rc = [classes.index(r) for r in resid] if resid else [0] * n
    v = np.diag([theta[len(terms) + c] for c in rc])
    for k, t in enumerate(terms):
        ta = np.array(t)
        v += theta[k] * (np.equal.outer(ta, ta) & np.equal.outer(g, g))
    vi = np.linalg.inv(v)
    a = x.T @ vi @ x
    beta = np.linalg.solve(a, x.T @ vi @ y)
    r = y - x @ beta
    ll = -0.5 * (
        np.linalg.slogdet(v)[1]
        + np.linalg.slogdet(a)[1]
        + r @ vi @ r
        + (n - p) * math.log(2 * math.pi)
    )
    return float(ll), beta, np.linalg.inv(a)


@pytest.mark.parametrize("structure", ["intercept", "probe_by_arm", "per_arm_residual"])
def test_loglik_beta_and_cov_match_the_dense_formula(structure: str) -> None:
    d = _data(1)
    terms = [d["g"]] if structure == "intercept" else [d["g"], d["cell"]]
    resid = d["arm"] if structure == "per_arm_residual" else None
    n_resid = 3 if resid else 1
    theta = [0.02, 0.01][: len(terms)] + [0.005, 0.01, 0.02][:n_resid]
    model = RemlModel(d["y"], d["x"], d["g"], terms, resid)
    pt = model.point(theta)
    ll, beta, cov = _dense(d, theta, terms, resid)
    assert pt.loglik == pytest.approx(ll, rel=1e-12)
    assert pt.beta == pytest.approx(beta, rel=1e-10)
    assert pt.cov == pytest.approx(cov, rel=1e-10)
    # a zero variance component is allowed (the boundary), a zero residual is not
    zero = list(theta)
    zero[0] = 0.0
    assert model.point(zero).loglik == pytest.approx(_dense(d, zero, terms, resid)[0], rel=1e-12)
    zero[-1] = 0.0
    assert model.point(zero).loglik == -math.inf


def _same(a: Any, b: Any) -> bool:
    return bool(np.array_equal(a, b, equal_nan=True))


@pytest.mark.parametrize("structure", ["intercept", "probe_by_arm", "per_arm_residual"])
def test_a_batch_row_is_the_point_of_that_row_bit_for_bit(structure: str) -> None:
    """``points``/``logliks`` of a batch: each row exactly as ``point`` of that row alone.

    The batch mixes rows inside the parameter space, on the boundary, outside it (a negative
    variance, a zero, NaN or infinite residual), one whose residual's reciprocal overflows and
    one whose factorisation fails (a group variance of 1e12 beside 1e-3): those are ``-inf``,
    and the failure costs no other row its value.
    """
    d = _data(4)
    terms = [d["g"]] if structure == "intercept" else [d["g"], d["cell"]]
    resid = d["arm"] if structure == "per_arm_residual" else None
    model = RemlModel(d["y"], d["x"], d["g"], terms, resid)
    rng = np.random.default_rng(5)
    thetas = model.total_var * 10 ** rng.uniform(-6, 0.5, size=(40, model.n_params))
    thetas[::7, 0] = 0.0
    thetas[1, 0] = -1e-3
    thetas[2, -1] = 0.0
    thetas[3, -1] = math.nan
    thetas[4, -1] = math.inf
    thetas[5, -1] = 1e-320
    thetas[8] = [0.02, 0.01][: len(terms)] + [0.005, 0.01, 0.02][: model.r]
    thetas[6] = [1e12] + [1e-3] * (model.n_params - 1)
    with np.errstate(over="ignore", invalid="ignore"), pytest.raises(np.linalg.LinAlgError):
        model._kernel(thetas[6:7])  # X'V^-1X is not positive definite in floating point
    with np.errstate(over="ignore", invalid="ignore"):
        batch = model.points(thetas)
        logliks = model.logliks(thetas)
        alone_rows = [model.point(theta) for theta in thetas]
    assert _same(logliks, [pt.loglik for pt in batch])
    for i, (theta, alone) in enumerate(zip(thetas, alone_rows, strict=True)):
        assert _same(batch[i].params, theta)
        assert _same(batch[i].loglik, alone.loglik), i
        assert _same(batch[i].beta, alone.beta), i
        assert _same(batch[i].cov, alone.cov), i
        assert _same(batch[i].magnitude, alone.magnitude), i
    assert all(batch[i].loglik == -math.inf for i in (1, 2, 3, 4, 5, 6))
    assert all(
        math.isfinite(pt.loglik) for i, pt in enumerate(batch) if i not in (1, 2, 3, 4, 5, 6)
    )
    assert batch[8].loglik == pytest.approx(_dense(d, list(thetas[8]), terms, resid)[0], rel=1e-12)


def test_the_climb_takes_scipys_own_finite_difference_steps() -> None:
    """``_climb`` (batched forward differences) ends where scipy's L-BFGS-B, left to difference
    ``−l_R`` itself one point at a time, ends: the same point, bit for bit."""
    from scipy import optimize

    d = _data(6)
    model = RemlModel(d["y"], d["x"], d["g"], [d["g"], d["cell"]], d["arm"])

    def negative(s: np.ndarray) -> float:
        ll = model.loglik(s * s)
        return -ll if math.isfinite(ll) else 1e300

    for start in model.starts():
        scipys = optimize.minimize(
            negative,
            np.sqrt(start),
            method="L-BFGS-B",
            options={"maxiter": 2000, "ftol": 1e-9, "gtol": 1e-6},
        )
        ours = model._climb(np.square, np.sqrt(start), 1e-9, 1e-6)
        assert _same(ours, scipys.x)


def test_own_optimum_matches_statsmodels_and_its_point_passes_the_check() -> None:
    from statsmodels.regression.mixed_linear_model import MixedLM

    d = _data(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = MixedLM(d["y"], d["x"], groups=d["g"]).fit(reml=True)
    model = RemlModel(d["y"], d["x"], d["g"], [d["g"]])
    best = model.maximise()
    assert best.loglik >= float(ref.llf) - 1e-7
    assert best.loglik == pytest.approx(float(ref.llf), abs=1e-6)
    assert best.params == pytest.approx([float(np.asarray(ref.cov_re)[0, 0]), ref.scale], rel=1e-3)
    recorded = [float(np.asarray(ref.cov_re)[0, 0]), float(ref.scale)]
    pt, problem = check_point(model, recorded)
    assert problem is None
    assert pt.beta == pytest.approx(np.asarray(ref.fe_params), rel=1e-9)
    assert pt.loglik == pytest.approx(float(ref.llf), abs=1e-9)
    # moved off the maximum: not stationary
    _, problem = check_point(model, [recorded[0] * 1.05, recorded[1]])
    assert problem is not None and "not a stationary point" in problem
    # a stationary point that is not the maximum: the saddle/minimum is refused too
    _, problem = check_point(model, [recorded[0], recorded[1] * 40])
    assert problem is not None


def _climbs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the maxima :meth:`RemlModel.maximise` climbs to (its last step, _to_boundary)."""
    calls: list[int] = []
    real = RemlModel._to_boundary

    def counted(self: RemlModel, pt: Any) -> Any:
        calls.append(self.n)
        return real(self, pt)

    monkeypatch.setattr(RemlModel, "_to_boundary", counted)
    return calls


def test_a_maximum_is_climbed_once_per_model_input_inside_remembered_maxima(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d = _data(4)
    alone = RemlModel(d["y"], d["x"], d["g"], [d["g"]]).maximise()
    calls = _climbs(monkeypatch)
    with remembered_maxima():
        first = RemlModel(d["y"], d["x"], d["g"], [d["g"]]).maximise()
        first.params[:] = -1.0  # a caller changing what it was handed changes no other's
        again = RemlModel(list(d["y"]), d["x"].copy(), list(d["g"]), [list(d["g"])]).maximise()
        assert len(calls) == 1
        for point in (first, again):
            assert point.loglik == alone.loglik and _same(point.beta, alone.beta)
            assert _same(point.cov, alone.cov)
        assert _same(again.params, alone.params)
        # one outcome changed by one ulp, rows in another order, another term: climbed again
        y = d["y"].copy()
        y[3] = np.nextafter(y[3], 2.0)
        RemlModel(y, d["x"], d["g"], [d["g"]]).maximise()
        order = np.arange(len(d["g"]))[::-1]
        g = [d["g"][i] for i in order]
        RemlModel(d["y"][order], d["x"][order], g, [g]).maximise()
        RemlModel(d["y"], d["x"], d["g"], [d["g"], d["cell"]]).maximise()
        assert len(calls) == 4
    RemlModel(d["y"], d["x"], d["g"], [d["g"]]).maximise()  # outside the block: nothing kept
    assert len(calls) == 5


def test_one_blas_thread_limits_every_loaded_blas_and_restores_it() -> None:
    from threadpoolctl import threadpool_info

    before = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    assert before  # numpy's BLAS at least is loaded
    with one_blas_thread():
        assert [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"] == [
            1
        ] * len(before)
    assert [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"] == before


def test_probe_by_arm_model_matches_statsmodels_variance_components() -> None:
    import pandas as pd
    import statsmodels.formula.api as smf

    d = _data(3)
    df = pd.DataFrame({"y": d["y"], "arm": d["arm"], "g": d["g"]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        formula = smf.mixedlm(
            "y ~ arm", df, groups="g", re_formula="1", vc_formula={"cell": "0 + C(arm)"}
        )
        ref = formula.fit(reml=True)
    model = RemlModel(d["y"], d["x"], d["g"], [d["g"], d["cell"]])
    theta = [float(np.asarray(ref.cov_re)[0, 0]), float(ref.vcomp[0]), float(ref.scale)]
    assert model.loglik(theta) == pytest.approx(float(ref.llf), abs=1e-8)
    assert model.maximise().loglik >= float(ref.llf) - 1e-7


def test_the_verifier_reml_path_does_not_use_statsmodels() -> None:
    paths = [ROOT / "verify" / n for n in ("_reml.py", "_restats.py", "_science.py")]
    paths += sorted((ROOT / "verify" / "_recompute").glob("*.py"))
    paths += [ROOT / "verify" / "_statistics" / "lmm.py"]
    for path in paths:
        name = path.name
        tree = ast.parse(path.read_text("utf-8"))
        imported = [
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
        ] + [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in imported if m.startswith("statsmodels")], name


def test_p_values_compare_on_a_relative_scale() -> None:
    assert _first_difference({"p": 0.0}, {"p": 3.4e-87}, "values", 1e-6) is not None
    assert _first_difference({"p": 3.4e-87}, {"p": 3.4e-87 * (1 + 1e-9)}, "values", 1e-6) is None
    assert _first_difference({"p": 3.4e-87}, {"p": 3.5e-87}, "values", 1e-6) is not None
    listed = {"bonferroni": {"pvalues": [1e-40, 0.2]}}
    assert (
        _first_difference({"bonferroni": {"pvalues": [0.0, 0.2]}}, listed, "values", 1e-6)
        is not None
    )
    # a proportion near zero keeps the absolute slack
    assert _first_difference({"share": 0.0}, {"share": 1e-12}, "values", 1e-6) is None


# ------------------------------------------------------------------------------ archives


@pytest.fixture
def copy_(simulated_archive: Path, tmp_path: Path) -> Path:
    target = tmp_path / "archive"
    shutil.copytree(simulated_archive, target)
    return target


def _reanalysis(root: Path) -> Any:
    report = verify_archive(root)
    check = report.get("reanalysis")
    assert check is not None
    return report, check


def test_honest_archives_pass_the_own_reml_check(simulated_report: Any) -> None:
    """The simulated archive (its session report: one whole verification, shared) and the
    shipped archive."""
    for check in (simulated_report.get("reanalysis"), _reanalysis(SHIPPED)[1]):
        assert check is not None and check.status is Status.PASS, check


def _edit_result(root: Path, result_id: str, edit: Any) -> int:
    events = read_events(root)
    event = next(
        e for e in events if e["kind"] == "analysis.result" and e["body"]["id"] == result_id
    )
    edit(event["body"]["values"])
    resign(root, events)
    results = [
        e["body"] | {"seq": e["seq"]} for e in read_events(root) if e["kind"] == "analysis.result"
    ]
    path = root / "analysis" / "results.json"
    path.write_text(json.dumps(results, sort_keys=True, indent=2) + "\n", "utf-8")
    return int(event["seq"])


def test_fixed_effect_moved_1e4_relative_and_resigned_fails_reanalysis(copy_: Path) -> None:
    def move(values: dict[str, Any]) -> None:
        effect = values["fixed_effects"][1]
        effect["estimate"] *= 1 + 1e-4
        effect["estimate"] = -effect["estimate"] if effect["estimate"] == 0 else effect["estimate"]

    _edit_result(copy_, "model.lmm", move)
    report, check = _reanalysis(copy_)
    assert report.get("signatures").status is Status.PASS
    assert check.status is Status.FAIL
    assert "model.lmm values.fixed_effects[1].estimate" in check.reason, check.reason


def test_variance_component_moved_and_resigned_fails_the_reml_check(copy_: Path) -> None:
    def move(values: dict[str, Any]) -> None:
        values["group_variance"] *= 1.02

    _edit_result(copy_, "model.lmm", move)
    report, check = _reanalysis(copy_)
    assert report.get("signatures").status is Status.PASS
    assert check.status is Status.FAIL
    assert "REML" in check.reason and "model.lmm" in check.reason, check.reason


def test_tiny_p_value_reported_as_zero_and_resigned_fails(copy_: Path) -> None:
    events = read_events(copy_)
    smallest = min(
        (
            e
            for e in events
            if e["kind"] == "analysis.result"
            and isinstance((e["body"].get("values") or {}).get("p_raw"), float)
        ),
        key=lambda e: e["body"]["values"]["p_raw"],
    )
    assert 0 < smallest["body"]["values"]["p_raw"] < 1e-3

    def zero(values: dict[str, Any]) -> None:
        values["p_raw"] = 0.0

    _edit_result(copy_, smallest["body"]["id"], zero)
    _, check = _reanalysis(copy_)
    assert check.status is Status.FAIL
    assert "p_raw" in check.reason, check.reason


# ------------------------------------------- recorded variance components it cannot read


@pytest.mark.parametrize(
    ("recorded", "named"),
    [
        ({"group_variance": 0.02}, ["values.residual_variance missing"]),
        (
            {"group_variance": "0.02", "residual_variance": None},
            ['values.group_variance recorded "0.02"', "values.residual_variance recorded null"],
        ),
        ({"group_variance": True, "residual_variance": 0.1}, ["values.group_variance recorded"]),
        ({"fixed_effects": [], "warnings": []}, ["group_variance missing", "residual_variance"]),
    ],
    ids=["missing", "string-and-null", "bool", "both-missing"],
)
def test_an_unreadable_recorded_point_is_a_problem_never_an_own_fit(
    recorded: dict[str, Any], named: list[str]
) -> None:
    at, _, problem = _recorded_point(recorded)
    assert at is None and problem is not None
    for place in named:
        assert place in problem, problem


@pytest.mark.parametrize(
    "recorded", [None, {}, {"reason": "the outcome is fitted exactly"}], ids=str
)
def test_nothing_recorded_to_check_is_no_problem(recorded: Any) -> None:
    # a failed model records {}, a not applicable one its reason: the status is compared
    assert _recorded_point(recorded) == (None, [], None)


def test_a_readable_recorded_point_is_checked() -> None:
    # RFC 8785 writes 0.0 as 0: an integer is a number
    at, texts, problem = _recorded_point(
        {"group_variance": 0, "residual_variance": 0.05, "warnings": ["w", 3]}
    )
    assert (at, texts, problem) == ((0.0, 0.05), ["w"], None)


def test_an_unreadable_sensitivity_point_is_a_problem() -> None:
    names = ["group", "group_by_arm", "residual"]
    fitted = {"fitted": True, "variances": {"group": 0.01, "group_by_arm": "x", "residual": 0.1}}
    at, problem = _recorded_variances({"probe_by_arm": fitted}, "probe_by_arm", names, "values.m")
    assert at is None and problem is not None
    assert 'values.m.probe_by_arm.variances.group_by_arm recorded "x"' in problem, problem
    at, problem = _recorded_variances(
        {"probe_by_arm": {"fitted": True}}, "probe_by_arm", names, "values.m"
    )
    assert at is None and problem is not None
    assert "values.m.probe_by_arm.variances missing" in problem, problem
    # not fitted, or not recorded at all: compared as such, nothing to check
    for rec in ({"probe_by_arm": {"fitted": False, "reason": "r"}}, {}, None):
        assert _recorded_variances(rec, "probe_by_arm", names, "values.m") == (None, None)
    fitted["variances"]["group_by_arm"] = 0
    assert _recorded_variances({"probe_by_arm": fitted}, "probe_by_arm", names, "values.m") == (
        [0.01, 0.0, 0.1],
        None,
    )


def _drop(*path: str) -> Any:
    def edit(values: dict[str, Any]) -> None:
        for key in path[:-1]:
            values = values[key]
        del values[path[-1]]

    return edit


def _set(value: Any, *path: str) -> Any:
    def edit(values: dict[str, Any]) -> None:
        for key in path[:-1]:
            values = values[key]
        values[path[-1]] = value

    return edit


UNREADABLE = [
    pytest.param(
        "model.lmm", _drop("group_variance"), "values.group_variance missing", id="lmm-removed"
    ),
    pytest.param(
        "model.lmm",
        _set("0.08", "residual_variance"),
        'values.residual_variance recorded "0.08"',
        id="lmm-string",
        marks=SLOW,
    ),
    pytest.param(
        "sensitivity.lmm",
        _drop("models", "probe_by_arm", "variances"),
        "values.models.probe_by_arm.variances missing",
        id="sensitivity-removed",
        marks=SLOW,
    ),
    pytest.param(
        "sensitivity.lmm",
        _set(None, "models", "probe_by_arm_arm_residual", "variances", "group"),
        "values.models.probe_by_arm_arm_residual.variances.group recorded null",
        id="sensitivity-null",
        marks=SLOW,
    ),
]


@pytest.mark.parametrize(("result_id", "edit", "named"), UNREADABLE)
def test_unreadable_recorded_variances_resigned_fail_naming_the_place(
    copy_: Path, result_id: str, edit: Any, named: str
) -> None:
    seq = _edit_result(copy_, result_id, edit)
    report, check = _reanalysis(copy_)
    assert report.get("signatures").status is Status.PASS
    assert check.status is Status.FAIL
    assert check.reason.startswith(f"{result_id} values: the recorded variance components")
    assert named in check.reason, check.reason
    assert "does not fit its own" in check.reason, check.reason
    assert (check.where, check.seq) == (result_id, seq)
