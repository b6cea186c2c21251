"""Independent statistics, written from ``docs/statistics.md`` (numpy and scipy only).

Each function returns the JSON-ready dict the page describes (NaN and infinities as ``None``)
and raises :class:`StatError` where the page says the statistic cannot be computed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# scipy is imported inside the functions that use it: the checks before the science ones load
# none of it (tests/verify/test_verify_imports.py).
import numpy as np
from numpy.typing import NDArray

from verify._reml import RemlModel, check_point

__all__ = [
    "NotApplicable",
    "StatError",
    "bonferroni",
    "bootstrap_clustered",
    "bootstrap_diff",
    "canonical_share",
    "chi_square_gof",
    "confusion_matrix",
    "contrast",
    "equivalence",
    "flip_rate",
    "holm",
    "independent_t",
    "mcnemar",
    "mixed_model",
    "paired_t",
    "position_bias_tvd",
    "wald",
    "wilson",
]

Floats = NDArray[np.float64]
CHUNK_ELEMENTS = 1 << 18


class StatError(ValueError):
    """The statistic cannot be computed on this input."""


class NotApplicable(StatError):
    """The test does not apply to these data, for a reason the docs name (analysis.md §3).

    Recorded as status and verdict ``"not applicable"`` with the reason in the values.
    """


def num(x: float) -> float | None:
    """A JSON number: NaN and infinities become ``None``."""
    f = float(x)
    return f if math.isfinite(f) else None


def _arr(x: Any, name: str) -> Floats:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        raise StatError(f"{name}: not one-dimensional")
    if not np.all(np.isfinite(a)):
        raise StatError(f"{name}: not finite")
    return a


def wilson(successes: int, n: int, conf: float = 0.95) -> dict[str, Any]:
    """Wilson score interval without continuity correction."""
    from scipy import stats as sps

    if n <= 0 or successes < 0 or successes > n or not 0 < conf < 1:
        raise StatError(f"wilson: bad input {successes}/{n}")
    p = successes / n
    z = float(sps.norm.ppf(0.5 + conf / 2))
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    lower = 0.0 if successes == 0 else min(1.0, max(0.0, centre - half))
    upper = 1.0 if successes == n else min(1.0, max(0.0, centre + half))
    return {
        "successes": successes,
        "n": n,
        "conf": conf,
        "estimate": p,
        "lower": lower,
        "upper": upper,
    }


def _t_result(
    method: str,
    x: Floats,
    y: Floats,
    t: float,
    se: float,
    df: float,
    effect: float,
    effect_name: str,
) -> dict[str, Any]:
    """The TTestResult layout: ``difference = mean_x - mean_y``, CI ``difference +- q se``."""
    from scipy import stats as sps

    diff = float(np.mean(x)) - float(np.mean(y))
    q = float(sps.t.ppf(0.975, df))
    return {
        "method": method,
        "n_x": int(x.size),
        "n_y": int(y.size),
        "mean_x": float(np.mean(x)),
        "mean_y": float(np.mean(y)),
        "difference": diff,
        "se": num(se),
        "t": num(t),
        "df": num(df),
        "p": num(2 * sps.t.sf(abs(t), df)),
        "p_one_sided": num(sps.t.sf(t, df)),
        "ci_lower": num(diff - q * se),
        "ci_upper": num(diff + q * se),
        "effect_size": num(effect),
        "effect_size_name": effect_name,
    }


def paired_t(x: Any, y: Any) -> dict[str, Any]:
    """Paired t-test: ``t = mean(d) / (sd(d) / sqrt(n))``, ``df = n - 1``, effect size d_z."""
    xa, ya = _arr(x, "x"), _arr(y, "y")
    if xa.size != ya.size or xa.size < 2:
        raise StatError("paired_t: needs two equal samples of n >= 2")
    d = xa - ya
    sd = float(np.std(d, ddof=1))
    if sd == 0:
        raise StatError("x - y: zero variance")
    n = d.size
    mean_d = float(np.mean(d))
    se = sd / math.sqrt(n)
    return _t_result("paired", xa, ya, mean_d / se, se, n - 1, mean_d / sd, "d_z")


def independent_t(x: Any, y: Any, *, welch: bool = True) -> dict[str, Any]:
    """Welch (default) or Student t-test, Cohen's d with the pooled SD."""
    xa, ya = _arr(x, "x"), _arr(y, "y")
    nx, ny = xa.size, ya.size
    if nx < 2 or ny < 2:
        raise StatError("independent_t: each sample needs n >= 2")
    vx, vy = float(np.var(xa, ddof=1)), float(np.var(ya, ddof=1))
    if vx == 0 and vy == 0:
        raise StatError("independent_t: both variances are zero")
    sp = math.sqrt(((nx - 1) * vx + (ny - 1) * vy) / (nx + ny - 2))
    diff = float(np.mean(xa)) - float(np.mean(ya))
    if welch:
        a, b = vx / nx, vy / ny
        se = math.sqrt(a + b)
        df = (a + b) ** 2 / (a * a / (nx - 1) + b * b / (ny - 1))
    else:
        se = sp * math.sqrt(1 / nx + 1 / ny)
        df = nx + ny - 2
    method = "welch" if welch else "student"
    return _t_result(method, xa, ya, diff / se, se, df, diff / sp, "cohen_d")


def _seed(seed: Any) -> int:
    try:
        value = int(seed)
    except (TypeError, ValueError):
        raise StatError(f"seed: not an integer: {seed!r}") from None
    if isinstance(seed, float) or value < 0:
        raise StatError(f"seed: {seed!r}")
    return value


def _row_means(
    rng: np.random.Generator, source: Floats, iterations: int, n: int, k: int | None = None
) -> Floats:
    """Row means of ``source[rng.integers(0, k or n, size=(iterations, n))]``, drawn in blocks."""
    high = n if k is None else k
    rows = max(1, CHUNK_ELEMENTS // max(1, n))
    out = np.empty(iterations, dtype=np.float64)
    for start in range(0, iterations, rows):
        stop = min(iterations, start + rows)
        idx = rng.integers(0, high, size=(stop - start, n))
        out[start:stop] = source[idx].mean(axis=1)
    return out


def _quantiles(replicates: Floats, conf: float) -> tuple[float, float]:
    lo, hi = np.quantile(replicates, [round((1 - conf) / 2, 12), round((1 + conf) / 2, 12)])
    return float(lo), float(hi)


def bootstrap_diff(
    x: Any, y: Any, iterations: int = 5000, seed: Any = 0, conf: float = 0.95
) -> dict[str, Any]:
    """Unpaired percentile bootstrap of mean(x) - mean(y), in the documented draw order."""
    xa, ya = _arr(x, "x"), _arr(y, "y")
    if xa.size == 0 or ya.size == 0 or iterations < 1:
        raise StatError("bootstrap_diff: empty arm or no iterations")
    s = _seed(seed)
    rng = np.random.Generator(np.random.PCG64(s))
    mx = _row_means(rng, xa, iterations, xa.size)
    my = _row_means(rng, ya, iterations, ya.size)
    lower, upper = _quantiles(mx - my, conf)
    return {
        "method": "unpaired-percentile",
        "estimate": float(np.mean(xa)) - float(np.mean(ya)),
        "lower": lower,
        "upper": upper,
        "conf": conf,
        "iterations": iterations,
        "seed": s,
        "n_x": int(xa.size),
        "n_y": int(ya.size),
        "n_clusters": 0,
    }


def bootstrap_clustered(
    values: Any,
    questions: Sequence[Any],
    runs: Sequence[Any],
    iterations: int = 1000,
    seed: Any = 0,
    conf: float = 0.95,
    *,
    unit: str = "observation",
) -> dict[str, Any]:
    """(question, run) bootstrap: observations (default) or question clusters."""
    v = _arr(values, "values")
    n = v.size
    if n == 0 or len(questions) != n or len(runs) != n or iterations < 1:
        raise StatError("bootstrap_clustered: bad input")
    pairs = {(str(q), str(r)) for q, r in zip(questions, runs, strict=True)}
    if len(pairs) != n:
        raise StatError("bootstrap_clustered: a (question, run) pair occurs twice")
    qs = sorted({str(q) for q in questions})
    s = _seed(seed)
    rng = np.random.Generator(np.random.PCG64(s))
    if unit == "observation":
        reps = _row_means(rng, v, iterations, n)
        method = "observation-percentile"
    elif unit == "question":
        index = {q: i for i, q in enumerate(qs)}
        sums = np.zeros(len(qs))
        counts = np.zeros(len(qs))
        for value, q in zip(v, questions, strict=True):
            sums[index[str(q)]] += value
            counts[index[str(q)]] += 1
        reps = np.empty(iterations)
        rows = max(1, CHUNK_ELEMENTS // len(qs))
        for start in range(0, iterations, rows):
            stop = min(iterations, start + rows)
            idx = rng.integers(0, len(qs), size=(stop - start, len(qs)))
            reps[start:stop] = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
        method = "question-percentile"
    else:
        raise StatError(f"unit: {unit!r}")
    lower, upper = _quantiles(reps, conf)
    return {
        "method": method,
        "estimate": float(np.mean(v)),
        "lower": lower,
        "upper": upper,
        "conf": conf,
        "iterations": iterations,
        "seed": s,
        "n_x": n,
        "n_y": 0,
        "n_clusters": len(qs),
    }


@dataclass(frozen=True)
class GroupSums:
    """The sufficient statistics of a random-intercept model (statistics.md, issue 41).

    Per group ``j`` (groups in sorted label order): ``n[j]`` its rows, ``s[j] = Σ x_i`` (a
    ``p``-vector) and ``t[j] = Σ y_i``; over all rows ``xx = XᵀX``, ``xy = Xᵀy``, ``yy = yᵀy``.
    Read once, in row order, with ``numpy.bincount``; every likelihood evaluation then costs
    ``O(G·p²)``, whatever the number of rows.
    """

    n: Floats
    s: Floats
    t: Floats
    xx: Floats
    xy: Floats
    yy: float

    @classmethod
    def of(cls, y: Floats, exog: Floats, grp: NDArray[Any]) -> GroupSums:
        """The sums of outcome ``y``, design ``exog`` (rows x p) and group labels ``grp``."""
        _, code = np.unique(grp, return_inverse=True)
        code = code.reshape(-1)
        g = int(code.max()) + 1 if code.size else 0
        s = np.column_stack(
            [np.bincount(code, weights=exog[:, k], minlength=g) for k in range(exog.shape[1])]
        ).astype(np.float64)
        return cls(
            np.bincount(code, minlength=g).astype(np.float64),
            s,
            np.bincount(code, weights=y, minlength=g).astype(np.float64),
            exog.T @ exog,
            exog.T @ y,
            float(y @ y),
        )

    def loglik(self, g: float, e: float) -> float:
        """``l_R(σ²_g = g, σ²_e = e)`` up to its constant (statistics.md, the formulas there).

        With ``c_j = g/(e + n_j·g)``: ``XᵀV⁻¹X = (XᵀX − Σ c_j·s_j·s_jᵀ)/e``, ``XᵀV⁻¹y = (Xᵀy −
        Σ c_j·t_j·s_j)/e``, ``yᵀV⁻¹y = (yᵀy − Σ c_j·t_j²)/e`` and ``log|V| = Σ_j [(n_j − 1)·log e
        + log(e + n_j·g)]``; ``g = 0`` is ordinary least squares.
        """
        c = g / (e + self.n * g)
        xvx = (self.xx - (self.s * c[:, None]).T @ self.s) / e
        xvy = (self.xy - self.s.T @ (c * self.t)) / e
        yvy = (self.yy - float(c @ (self.t * self.t))) / e
        logdet = float(np.sum((self.n - 1.0) * math.log(e) + np.log(e + self.n * g)))
        b = np.linalg.solve(xvx, xvy)
        quad = yvy - float(xvy @ b)
        return -0.5 * (logdet + float(np.linalg.slogdet(xvx)[1]) + quad)


def _reml_by_groups(y: Floats, exog: Floats, grp: NDArray[Any]) -> Any:
    """``l_R(σ²_g, σ²_e)`` up to a constant, from the sufficient statistics (:class:`GroupSums`).

    The outcome is centred first (REML is invariant to adding ``X·b``, the model has an
    intercept) to limit cancellation.
    """
    return GroupSums.of(y - float(np.mean(y)), exog, grp).loglik


def _zero_group_variance_fits_as_well(
    y: Floats, exog: Floats, grp: NDArray[Any], group_var: float, resid_var: float
) -> bool:
    """The boundary test: l_R(0, RSS/(n − p)) >= l_R(σ̂²_g, σ̂²_e) (relative slack 1e-9)."""
    if group_var <= 0 or resid_var <= 0:
        return True
    loglik = _reml_by_groups(y, exog, grp)
    try:
        with np.errstate(all="ignore"):
            fitted = np.linalg.lstsq(exog, y, rcond=None)[0]
            resid = y - exog @ fitted
            ols_var = float(resid @ resid) / (y.size - exog.shape[1])
            zero, fit = loglik(0.0, ols_var), loglik(group_var, resid_var)
    except (np.linalg.LinAlgError, ValueError, ZeroDivisionError):
        return False
    if not (math.isfinite(zero) and math.isfinite(fit)):
        return False
    return bool(zero >= fit - 1e-9 * max(1.0, abs(fit)))


EXACT_FIT_FRACTION = 1e-10
"""statistics.md "Not applicable": a within-group residual sum of squares at most this
fraction of the total sum of squares is no residual variation."""


def _no_residual_variation(y: Floats, exog: Floats, grp: NDArray[Any]) -> bool:
    """Whether ``y`` lies in the span of the fixed effects and the group indicators (statistics.md).

    Each group's rows are centred on the group's means (outcome and every design column),
    which removes the group indicators; the least-squares residual of the centred outcome on
    the centred design is then the residual on ``[X, Z]``. No residual variation (at most
    :data:`EXACT_FIT_FRACTION` of ``Σ(y − ȳ)²``) leaves ``σ²_e`` without an estimate.
    """
    sums = GroupSums.of(np.asarray(y, dtype=np.float64), np.asarray(exog, dtype=np.float64), grp)
    _, code = np.unique(grp, return_inverse=True)
    code = code.reshape(-1)
    yw = y - (sums.t / sums.n)[code]  # each row less its group's means (one pass for the sums)
    xw = exog - (sums.s / sums.n[:, None])[code]
    coef = np.linalg.lstsq(xw, yw, rcond=None)[0]
    left = yw - xw @ coef
    dev = y - y.mean()
    return bool(float(left @ left) <= EXACT_FIT_FRACTION * float(dev @ dev))


def _factor_columns(
    arm: NDArray[Any],
    others: list[str],
    factor: tuple[str, Sequence[str], str],
    interaction: bool,
) -> tuple[list[str], list[Floats]]:
    """A fixed factor's treatment-coded columns, and the arm x factor cells with rows."""
    fname, fvalues, fref = factor
    fv = np.asarray([str(v) for v in fvalues])
    flevels = sorted(set(fv.tolist()))
    if fref not in flevels:
        raise StatError(f"mixed_model: {fname} reference {fref!r} has no rows")
    fothers = [lv for lv in flevels if lv != fref]
    names = [f"{fname}[T.{lv}]" for lv in fothers]
    columns = [(fv == lv).astype(np.float64) for lv in fothers]
    if not interaction:
        return names, columns
    for a in others:
        for lv in fothers:
            cell = ((arm == a) & (fv == lv)).astype(np.float64)
            if cell.sum() > 0:
                names.append(f"arm[T.{a}]:{fname}[T.{lv}]")
                columns.append(cell)
    return names, columns


def _design(
    ya: Floats,
    arm: NDArray[Any],
    reference: str,
    factor: tuple[str, Sequence[str], str] | None,
    interaction: bool,
) -> tuple[Floats, list[str], list[str]]:
    """The treatment-coded design matrix, its column names, and the non-reference arms."""
    levels = sorted(set(arm.tolist()))
    if reference not in levels or len(levels) < 2:
        raise StatError("mixed_model: reference or arms")
    others = [lv for lv in levels if lv != reference]
    names = ["Intercept"] + [f"arm[T.{lv}]" for lv in others]
    columns = [np.ones(ya.size)] + [(arm == lv).astype(np.float64) for lv in others]
    if factor is not None:
        factor_names, factor_columns = _factor_columns(arm, others, factor, interaction)
        names += factor_names
        columns += factor_columns
    exog = np.column_stack(columns)
    if ya.size <= exog.shape[1] + 1:
        raise StatError("mixed_model: too few rows")
    if factor is not None:
        singular_values = np.linalg.svd(exog, compute_uv=False)
        if singular_values[-1] <= singular_values[0] * max(exog.shape) * np.finfo(float).eps:
            raise StatError("mixed_model: the fixed effects are linearly dependent")
    return exog, names, others


def reml_variance_cis(
    model: RemlModel, group_var: float, resid_var: float
) -> tuple[float, float, float, float]:
    """95% Wald CIs on the log scale for (σ²_g, σ²_e) from the verifier's own REML Hessian.

    The observed information is minus the central-difference Hessian of ``l_R`` in
    ``(log σ²_g, log σ²_e)``; NaN when a variance is not positive or the information is not
    positive definite.
    """
    from scipy import stats as sps

    bad = (math.nan, math.nan, math.nan, math.nan)
    if not (group_var > 0 and resid_var > 0):
        return bad
    _, hess = model.log_gradient_hessian(np.array([group_var, resid_var]), [0, 1])
    info = -hess
    if not np.all(np.isfinite(info)) or np.any(np.linalg.eigvalsh(info) <= 0):
        return bad
    cov = np.linalg.inv(info)
    z = float(sps.norm.ppf(0.975))
    sg, se = math.sqrt(cov[0, 0]), math.sqrt(cov[1, 1])

    def exp(x: float) -> float:  # statistics.md: a bound beyond a double is +inf (withheld)
        return math.exp(x) if x < 709.0 else math.inf

    return (
        group_var * exp(-z * sg),
        group_var * exp(z * sg),
        resid_var * exp(-z * se),
        resid_var * exp(z * se),
    )


VARIANCE_CI_MAX_RATIO = 1e8
"""statistics.md "Variance-component CIs": an interval whose upper bound is more than this
many times its lower bound is withheld (both bounds null, ``variance_ci_note`` says so)."""


def _withhold_wide_intervals(
    cis: tuple[float, float, float, float],
) -> tuple[tuple[float, float, float, float], list[str]]:
    """Null the bounds of each component whose interval is not informative (statistics.md).

    Kept: both bounds finite, ``0 < lower`` and ``upper ≤ VARIANCE_CI_MAX_RATIO·lower``; an
    interval already null on both ends stays null without a note.
    """
    bounds = [float(c) for c in cis]
    withheld = []
    for name, i in (("group", 0), ("residual", 2)):
        lo, hi = bounds[i], bounds[i + 1]
        if math.isnan(lo) and math.isnan(hi):
            continue
        ok = math.isfinite(lo) and math.isfinite(hi) and lo > 0 and hi / lo <= VARIANCE_CI_MAX_RATIO
        if not ok:
            bounds[i] = bounds[i + 1] = math.nan
            withheld.append(name)
    return (bounds[0], bounds[1], bounds[2], bounds[3]), withheld


def _fit_point(model: RemlModel, at: tuple[float, float] | None) -> tuple[Any, str | None]:
    """The recorded point if it is a REML maximum, else the own optimum (and why)."""
    if at is None:
        return model.maximise(), None
    point, problem = check_point(model, at)
    if problem is not None:
        point = model.maximise()
    return point, problem


def _boundary_or_infinite(
    group_var: float, resid_var: float, total_var: float, cov: Any, se: Any
) -> bool:
    """A variance component at the boundary, or a covariance or SE that is not finite."""
    return bool(
        group_var <= 1e-6 * total_var
        or resid_var <= 1e-6 * total_var
        or not np.all(np.isfinite(cov))
        or not np.all(np.isfinite(se))
    )


def _warned_singular(recorded_warnings: Sequence[str]) -> bool:
    """A writer's optimiser warning naming a singular or not positive definite Hessian."""
    return any("singular" in m.lower() or "not positive definite" in m for m in recorded_warnings)


def _effects(names: list[str], fe: Any, se: Any) -> list[dict[str, Any]]:
    """Each fixed effect: estimate, SE, Wald z and p, 95% interval."""
    from scipy import stats as sps

    z975 = float(sps.norm.ppf(0.975))
    effects = []
    for name, b, s in zip(names, fe, se, strict=True):
        z = b / s if s > 0 else math.nan
        effects.append(
            {
                "name": name,
                "estimate": num(b),
                "se": num(s),
                "z": num(z),
                "p": num(2 * sps.norm.sf(abs(z))),
                "ci_lower": num(b - z975 * s),
                "ci_upper": num(b + z975 * s),
            }
        )
    return effects


def mixed_model(
    y: Any,
    arms: Sequence[str],
    groups: Sequence[str],
    reference: str,
    *,
    factor: tuple[str, Sequence[str], str] | None = None,
    interaction: bool = False,
    at: tuple[float, float] | None = None,
    recorded_warnings: Sequence[str] = (),
) -> dict[str, Any]:
    """REML random-intercept model by :mod:`verify._reml` (no statsmodels), treatment coding.

    ``factor`` is ``(name, level of each row, reference level)`` of one more categorical fixed
    effect (the model of a study with several models): a dummy ``name[T.<level>]`` per other
    level (sorted), after the arms'; ``interaction`` then adds ``arm[T.<a>]:name[T.<level>]``
    for every arm and level pair observed together.

    ``at`` is the recorded ``(σ²_g, σ²_e)``: when it is a REML maximum (see
    :func:`verify._reml.check_point`) every other number is evaluated there, in closed form;
    when it is not, the fit is the verifier's own optimum and ``_reml_problem`` says why.
    Without ``at`` the fit is the verifier's own optimum. ``recorded_warnings`` are the
    writer's optimiser warnings: one naming a singular or not positive definite Hessian marks
    the fit singular, as ``docs/statistics.md`` says.
    """
    ya = _arr(y, "outcome")
    arm = np.asarray([str(a) for a in arms])
    grp = np.asarray([str(g) for g in groups])
    n_groups = len(set(grp.tolist()))
    if n_groups < 2:
        raise StatError("mixed_model: fewer than two groups")
    total_var = float(np.var(ya, ddof=1)) if ya.size > 1 else 0.0
    exog, names, others = _design(ya, arm, reference, factor, interaction)
    # statistics.md: what cannot be computed fails first; then what does not apply
    if total_var == 0:
        raise NotApplicable("mixed_model: zero outcome variance (a constant outcome)")
    if _no_residual_variation(ya, exog, grp):
        raise NotApplicable(
            "mixed_model: the fixed effects and the group intercepts fit the "
            "outcome exactly; the REML likelihood has no maximum"
        )
    try:
        model = RemlModel(ya, exog, grp.tolist(), [grp.tolist()])
    except ValueError as exc:
        raise StatError(f"mixed_model: {exc}") from None
    point, problem = _fit_point(model, at)
    if not math.isfinite(point.loglik):
        raise StatError("mixed_model: the REML likelihood has no finite maximum")
    group_var, resid_var = (float(v) for v in point.params)
    fe, cov = point.beta, point.cov
    with np.errstate(invalid="ignore"):
        se = np.sqrt(np.diag(cov))
    singular = (
        _boundary_or_infinite(group_var, resid_var, total_var, cov, se)
        or _warned_singular(recorded_warnings)
        or _zero_group_variance_fits_as_well(ya, exog, grp, group_var, resid_var)
    )
    effects = _effects(names, fe, se)
    total = group_var + resid_var
    cis: tuple[float, ...] = (math.nan,) * 4
    withheld: list[str] = []
    if not singular:
        with np.errstate(all="ignore"):
            cis = reml_variance_cis(model, group_var, resid_var)
        cis, withheld = _withhold_wide_intervals(cis)
    return {
        "arms": [reference, *others],
        "n_obs": int(ya.size),
        "n_groups": n_groups,
        "fixed_effects": effects,
        "fe_cov": [[num(c) for c in row] for row in cov],
        "group_variance": num(group_var),
        "residual_variance": num(resid_var),
        "icc": num(group_var / total) if total > 0 else None,
        "log_likelihood": num(point.loglik),
        "converged": problem is None,
        "singular": bool(singular),
        "warnings": list(recorded_warnings),
        "group_variance_ci_lower": num(cis[0]),
        "group_variance_ci_upper": num(cis[1]),
        "residual_variance_ci_lower": num(cis[2]),
        "residual_variance_ci_upper": num(cis[3]),
        "variance_ci_method": "wald-log-observed-reml",
        **({"variance_ci_note": f"withheld: {', '.join(withheld)}"} if withheld else {}),
        **(
            {
                "factors": [factor[0]],
                "factor_references": [factor[2]],
                "interaction": bool(interaction),
            }
            if factor is not None
            else {}
        ),
        "_names": names,
        "_fe": fe,
        "_cov": cov,
        "_reml_problem": problem,
    }


def contrast(
    fit: dict[str, Any], a: str, b: str, sides: str = "two-sided", conf: float = 0.95
) -> dict[str, Any]:
    """Wald contrast a - b of a :func:`mixed_model` fit."""
    from scipy import stats as sps

    arms: list[str] = fit["arms"]
    if a not in arms or b not in arms:
        raise StatError(f"contrast: unknown arm {a!r} or {b!r}")
    fe: Floats = fit["_fe"]
    cov: Floats = fit["_cov"]
    vec = np.zeros(fe.size)
    for arm, sign in ((a, 1.0), (b, -1.0)):
        i = arms.index(arm)
        if i > 0:
            vec[i] += sign
    est = float(vec @ fe)
    se = float(math.sqrt(float(vec @ cov @ vec)))
    z = est / se if se > 0 else math.nan
    if sides == "one-sided":
        p = float(sps.norm.sf(z))
        lower, upper = est - float(sps.norm.ppf(conf)) * se, math.inf
    elif sides == "two-sided":
        p = float(2 * sps.norm.sf(abs(z)))
        q = float(sps.norm.ppf(0.5 + conf / 2))
        lower, upper = est - q * se, est + q * se
    else:
        raise StatError(f"sides: {sides!r}")
    return {
        "a": a,
        "b": b,
        "sides": sides,
        "estimate": num(est),
        "se": num(se),
        "z": num(z),
        "p": num(p),
        "lower": num(lower),
        "upper": num(upper),
        "conf": conf,
    }


def wald(fit: dict[str, Any], terms: Sequence[str]) -> dict[str, Any]:
    """Joint Wald test that the named coefficients of a :func:`mixed_model` fit are zero."""
    from scipy import stats as sps

    names: list[str] = fit["_names"]
    if not terms or any(t not in names for t in terms):
        raise StatError("wald: no terms, or a term not in the fit")
    idx = [names.index(t) for t in terms]
    beta = np.asarray(fit["_fe"], dtype=np.float64)[idx]
    cov = np.asarray(fit["_cov"], dtype=np.float64)[np.ix_(idx, idx)]
    if not np.all(np.isfinite(cov)) or np.any(np.linalg.eigvalsh(cov) <= 0):
        raise StatError("wald: covariance not positive definite")
    chi2 = float(beta @ np.linalg.solve(cov, beta))
    p = num(sps.chi2.sf(chi2, len(idx)))
    return {"terms": list(terms), "chi2": chi2, "df": len(idx), "p": p}


def chi_square_gof(
    counts: Sequence[int], expected: Sequence[float] | None = None
) -> dict[str, Any]:
    """Chi-square goodness of fit with Cramér's V."""
    from scipy import stats as sps

    obs = np.asarray(counts, dtype=np.float64)
    k = obs.size
    n = float(obs.sum())
    if k < 2 or np.any(obs < 0) or n <= 0:
        raise StatError("counts: need k >= 2 non-negative counts with total > 0")
    if expected is None:
        exp = np.full(k, n / k)
    else:
        e = np.asarray(expected, dtype=np.float64)
        if e.size != k or np.any(e <= 0):
            raise StatError("expected: bad")
        exp = e / e.sum() * n
    chi2 = float(np.sum((obs - exp) ** 2 / exp))
    return {
        "chi2": chi2,
        "df": k - 1,
        "p": num(sps.chi2.sf(chi2, k - 1)),
        "n": int(n),
        "k": k,
        "cramers_v": math.sqrt(chi2 / (n * (k - 1))),
        "observed": [int(c) for c in counts],
        "expected": [float(v) for v in exp],
    }


def confusion_matrix(
    truth: Sequence[str], pred: Sequence[str], labels: Sequence[str]
) -> dict[str, Any]:
    """Truth x prediction counts; predictions outside ``labels`` go to ``other``."""
    index = {str(lb): i for i, lb in enumerate(labels)}
    counts = [[0] * len(labels) for _ in labels]
    other = [0] * len(labels)
    for t, p in zip(truth, pred, strict=True):
        if str(t) not in index:
            raise StatError(f"truth: label {t!r} not in labels")
        j = index.get(str(p))
        if j is None:
            other[index[str(t)]] += 1
        else:
            counts[index[str(t)]][j] += 1
    n = len(truth)
    correct = sum(counts[i][i] for i in range(len(labels)))
    return {
        "labels": [str(lb) for lb in labels],
        "counts": counts,
        "other": other,
        "n": n,
        "correct": correct,
        "accuracy": correct / n if n else None,
    }


def _proportion(name: str, count: int, n: int) -> dict[str, Any]:
    if n == 0:
        return {"name": name, "count": count, "n": 0, "share": None, "lower": None, "upper": None}
    w = wilson(count, n)
    return {
        "name": name,
        "count": count,
        "n": n,
        "share": count / n,
        "lower": w["lower"],
        "upper": w["upper"],
    }


def canonical_share(
    truth: Sequence[str], pred: Sequence[str], canonical: str = "RIGHT"
) -> dict[str, Any]:
    """Share of errors whose prediction is ``canonical``."""
    errors = [(str(t), str(p)) for t, p in zip(truth, pred, strict=True) if str(t) != str(p)]
    count = sum(1 for _, p in errors if p == canonical)
    return _proportion(f"canonical_share:{canonical}", count, len(errors))


def flip_rate(a: Sequence[str], b: Sequence[str]) -> dict[str, Any]:
    """Share of paired answers that differ."""
    if len(a) != len(b) or not a:
        raise StatError("flip_rate: needs equal non-empty inputs")
    count = sum(1 for x, y in zip(a, b, strict=True) if str(x) != str(y))
    return _proportion("flip_rate", count, len(a))


def position_bias_tvd(
    pred: Sequence[str], truth: Sequence[str], labels: Sequence[str]
) -> dict[str, Any]:
    """Total variation distance between the prediction and truth distributions."""
    n = len(pred)
    if n == 0 or len(truth) != n:
        raise StatError("position_bias_tvd: empty or unequal inputs")
    labs = [str(lb) for lb in labels]
    if any(str(t) not in labs for t in truth):
        raise StatError("truth: label outside labels")
    p_pred = [sum(1 for p in pred if str(p) == lb) / n for lb in labs]
    p_truth = [sum(1 for t in truth if str(t) == lb) / n for lb in labs]
    p_other = sum(1 for p in pred if str(p) not in labs) / n
    diffs = [abs(p - t) for p, t in zip(p_pred, p_truth, strict=True)]
    return {
        "labels": labs,
        "p_pred": p_pred,
        "p_truth": p_truth,
        "p_other": p_other,
        "n": n,
        "tvd": 0.5 * (sum(diffs) + p_other),
        "mad": sum(diffs) / len(labs),
    }


def mcnemar(b: int, c: int) -> dict[str, Any]:
    """McNemar chi-square, Edwards-corrected chi-square and exact binomial."""
    from scipy import stats as sps

    n = b + c
    if n == 0:
        chi2 = chi2_cc = p_chi2 = p_chi2_cc = math.nan
        p_exact = 1.0
    else:
        chi2 = (b - c) ** 2 / n
        chi2_cc = max(0, abs(b - c) - 1) ** 2 / n
        p_chi2 = float(sps.chi2.sf(chi2, 1))
        p_chi2_cc = float(sps.chi2.sf(chi2_cc, 1))
        p_exact = min(1.0, 2 * float(sps.binom.cdf(min(b, c), n, 0.5)))
    primary = "exact" if n < 25 else "chi2_cc"
    return {
        "b": b,
        "c": c,
        "n_discordant": n,
        "chi2": num(chi2),
        "p_chi2": num(p_chi2),
        "chi2_cc": num(chi2_cc),
        "p_chi2_cc": num(p_chi2_cc),
        "p_exact": p_exact,
        "primary": primary,
        "p": p_exact if primary == "exact" else num(p_chi2_cc),
    }


def mcnemar_paired(x: Sequence[bool], y: Sequence[bool]) -> dict[str, Any]:
    """McNemar on paired correctness: b = x right & y wrong, c = x wrong & y right."""
    if len(x) != len(y):
        raise StatError("mcnemar_paired: unequal lengths")
    b = sum(1 for p, q in zip(x, y, strict=True) if p and not q)
    c = sum(1 for p, q in zip(x, y, strict=True) if q and not p)
    return mcnemar(b, c)


def _correction(
    method: str, ps: Sequence[float], adjusted: list[float], alpha: float
) -> dict[str, Any]:
    return {
        "method": method,
        "pvalues": [float(p) for p in ps],
        "adjusted": adjusted,
        "alpha": alpha,
        "reject": [a <= alpha for a in adjusted],
    }


def bonferroni(ps: Sequence[float], alpha: float = 0.05) -> dict[str, Any]:
    """Bonferroni: min(1, m p)."""
    m = len(ps)
    return _correction("bonferroni", ps, [min(1.0, m * float(p)) for p in ps], alpha)


def holm(ps: Sequence[float], alpha: float = 0.05) -> dict[str, Any]:
    """Holm step-down, monotone, mapped back to input order."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    adjusted = [0.0] * m
    running = 0.0
    for j, i in enumerate(order, start=1):
        running = max(running, min(1.0, (m - j + 1) * float(ps[i])))
        adjusted[i] = running
    return _correction("holm", ps, adjusted, alpha)


def equivalence(diffs: dict[str, float], margin: float) -> dict[str, Any]:
    """Every |difference| below the margin (strict)."""
    if not diffs or margin <= 0 or not all(math.isfinite(d) for d in diffs.values()):
        raise StatError("per_group_diffs: empty or non-finite, or margin <= 0")
    best = max(abs(d) for d in diffs.values())
    group = next(g for g, d in diffs.items() if abs(d) == best)
    return {
        "max_abs_diff": best,
        "group": group,
        "margin": margin,
        "holds": best < margin,
        "n_groups": len(diffs),
    }


def satterthwaite(
    model: RemlModel, params: Any, weights: Any, sides: str, conf: float = 0.95
) -> dict[str, Any]:
    """``L·β̂``, ``SE² = LᵀCL`` and Satterthwaite ``df = 2(LᵀCL)² / (gᵀWg)`` (statistics.md).

    ``g_i = Lᵀ(C·B_i·C)L`` over the variances above the boundary and ``W`` the inverse of the
    expected REML information there (:meth:`verify._reml.RemlModel.information`, analytic),
    named so in ``df_method``. t-distribution p and interval; one-sided: lower bound only.
    """
    from scipy import stats as sps

    theta = np.asarray(params, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    pt = model.point(theta)
    est = float(w @ pt.beta)
    var = float(w @ pt.cov @ w)
    se = math.sqrt(var) if var > 0 else math.nan
    free = model._free(theta)
    df = math.inf
    if free:
        info, dcov = model.information(theta)
        g = np.array([float(w @ dcov[i] @ w) for i in free])
        try:
            denom = float(g @ np.linalg.solve(info[np.ix_(free, free)], g))
        except np.linalg.LinAlgError:
            denom = math.nan
        df = 2 * var * var / denom if denom > 0 else math.inf
    t = est / se if se > 0 else math.nan
    if sides == "one-sided":
        p = float(sps.t.sf(t, df))
        lower, upper = est - float(sps.t.ppf(conf, df)) * se, math.inf
    else:
        p = float(2 * sps.t.sf(abs(t), df))
        q = float(sps.t.ppf(0.5 + conf / 2, df))
        lower, upper = est - q * se, est + q * se
    return {
        "estimate": num(est),
        "se": num(se),
        "df": num(df),
        "df_method": "satterthwaite-expected-information",
        "t": num(t),
        "p": num(p),
        "lower": num(lower),
        "upper": num(upper),
        "conf": conf,
    }


def probe_bootstrap(
    diffs: Sequence[float], iterations: int, seed: Any, sides: str, conf: float = 0.95
) -> dict[str, Any]:
    """Percentile bootstrap of the mean per-probe difference, probes resampled (statistics.md)."""
    d = _arr(diffs, "per-probe differences")
    if d.size == 0 or iterations < 1:
        raise StatError("probe_bootstrap: no probe has both arms")
    s = _seed(seed)
    rng = np.random.Generator(np.random.PCG64(s))
    reps = _row_means(rng, d, iterations, d.size)
    if sides == "one-sided":
        lower, upper = float(np.quantile(reps, round(1 - conf, 12))), math.inf
    else:
        lower, upper = _quantiles(reps, conf)
    return {
        "estimate": float(np.mean(d)),
        "lower": num(lower),
        "upper": num(upper),
        "conf": conf,
        "n_clusters": int(d.size),
        "iterations": iterations,
        "seed": s,
    }


def cluster_proportion(
    correct: Sequence[int], n: Sequence[int], conf: float = 0.95
) -> dict[str, Any]:
    """statistics.md: ratio estimator with a cluster-robust SE and a t(G-1) interval."""
    from scipy import stats as sps

    pairs = [(float(c), float(m)) for c, m in zip(correct, n, strict=True) if m > 0]
    total = math.fsum(m for _, m in pairs)
    if total <= 0:
        raise StatError("cluster_proportion: no items")
    p = math.fsum(c for c, _ in pairs) / total
    g = len(pairs)
    out: dict[str, Any] = {
        "method": "cluster-robust-ratio-t",
        "estimate": p,
        "n_clusters": g,
        "n": int(total),
        "conf": conf,
    }
    if g < 2:
        return out | {"se": None, "df": None, "lower": None, "upper": None, "note": None}
    se = math.sqrt(g / (g - 1) * math.fsum((c - p * m) ** 2 for c, m in pairs)) / total
    q = float(sps.t.ppf(0.5 + conf / 2, g - 1))
    return out | {
        "se": se,
        "df": g - 1,
        "lower": max(0.0, p - q * se),
        "upper": min(1.0, p + q * se),
    }


def error_null_excluding_truth(truth: Sequence[str], labels: Sequence[str]) -> list[float]:
    """statistics.md: expected error shares, each error spread over the labels but its truth."""
    labs = list(labels)
    k = len(labs)
    if k < 2 or not truth:
        raise StatError("error_null_excluding_truth: bad input")
    weights = [0.0] * k
    for t in truth:
        for i, lb in enumerate(labs):
            weights[i] += (0.0 if lb == t else 1.0 / (k - 1)) if t in labs else 1.0 / k
    return [w / len(truth) for w in weights]


def newcombe_diff(x1: int, n1: int, x2: int, n2: int, conf: float = 0.95) -> dict[str, Any]:
    """statistics.md: Newcombe's hybrid score interval for p1 - p2 from two Wilson intervals."""
    w1, w2 = wilson(x1, n1, conf), wilson(x2, n2, conf)
    p1, p2 = x1 / n1, x2 / n2
    d = p1 - p2
    return {
        "method": "newcombe-hybrid-score",
        "estimate": d,
        "lower": d - math.sqrt((p1 - w1["lower"]) ** 2 + (w2["upper"] - p2) ** 2),
        "upper": d + math.sqrt((w1["upper"] - p1) ** 2 + (p2 - w2["lower"]) ** 2),
        "conf": conf,
        "x1": x1,
        "n1": n1,
        "x2": x2,
        "n2": n2,
    }
