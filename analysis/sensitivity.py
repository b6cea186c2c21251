"""Sensitivity analyses beside the registered mixed model (``docs/statistics.md``, "Sensitivity").

Labelled ``sensitivity`` everywhere; they never change a registered verdict, they only say
whether they would support it. For every registered ``lmm`` hypothesis contrast:

* the registered random-intercept model with **Satterthwaite** degrees of freedom (t, not z);
* a **probe-by-arm** random effect: ``y = Xβ + u_probe + w_(probe, arm) + e``;
* probe-by-arm with a **residual variance per arm**;
* a **cluster bootstrap over probes** of the mean per-probe difference.

The REML fits here are the writer's own (dense per-probe ``V_j``, Cholesky); the verifier
has an independent one (``verify/_reml.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import optimize
from scipy import stats as sps

__all__ = [
    "BOUNDARY_FRACTION",
    "MAX_GROUP_ROWS",
    "RemlFit",
    "cluster_bootstrap",
    "design_matrix",
    "fit_at",
    "fit_reml",
    "group_differences",
    "not_fittable",
    "satterthwaite_contrast",
]

Floats = npt.NDArray[np.float64]

BOUNDARY_FRACTION = 1e-6
"""A variance at or below this fraction of the outcome variance counts as zero."""
MAX_GROUP_ROWS = 300
"""The dense per-probe fit forms ``n_j × n_j`` matrices: larger probes are not fitted."""


@dataclass
class RemlFit:
    """A REML fit of ``V_j = Σ_k θ_k·K_jk + diag(φ_class)`` per group ``j``.

    ``names`` label the parameters (terms first, then residual classes); ``beta`` and ``cov``
    are the GLS estimates and ``(XᵀV⁻¹X)⁻¹`` at ``params``; ``info_cov`` is the inverse of the
    observed REML information in the parameters away from zero (``free``), for Satterthwaite.
    """

    names: list[str]
    params: Floats
    loglik: float
    beta: Floats
    cov: Floats
    free: list[int]
    info_cov: Floats
    model: _Dense


class _Dense:
    """The per-group blocks, stacked by block size.

    ``X_j``, ``y_j``, each term's ``K_jk`` (1 where two rows share the term's cluster) and
    each residual class's row mask.
    """

    def __init__(self, y: Floats, exog: Floats, groups: Sequence[str],
                 terms: Sequence[Sequence[str]], classes: Sequence[str]) -> None:  # fmt: skip
        self.n, self.p = exog.shape
        self.class_labels = sorted(set(classes))
        self.k = len(terms)
        garr = np.asarray(groups)
        carr = np.asarray(classes)
        tarr = [np.asarray(t) for t in terms]
        by_size: dict[int, list[npt.NDArray[np.intp]]] = {}
        for g in sorted(set(groups)):
            rows = np.flatnonzero(garr == g)
            by_size.setdefault(rows.size, []).append(rows)
        self.stacks = []
        for _, members in sorted(by_size.items()):
            idx = np.stack(members)  # (B, m)
            ks = np.stack([np.equal(t[idx][:, :, None], t[idx][:, None, :]) for t in tarr])
            masks = np.stack([(carr[idx] == c) for c in self.class_labels]).astype(np.float64)
            self.stacks.append((exog[idx], y[idx], ks.astype(np.float64), masks))
        self.var = float(np.var(y, ddof=1))

    def parts(self, theta: Floats) -> tuple[float, Floats, Floats, float, list[Any]] | None:
        re, phi = theta[: self.k], theta[self.k :]
        if np.any(re < 0) or np.any(phi <= 0) or not np.all(np.isfinite(theta)):
            return None
        logdet = 0.0
        a = np.zeros((self.p, self.p))
        b = np.zeros(self.p)
        c = 0.0
        solved = []
        for x, y, ks, masks in self.stacks:
            diag = np.einsum("r,rbm->bm", phi, masks)
            v = np.einsum("k,kbmn->bmn", re, ks)
            m = v.shape[1]
            v[:, np.arange(m), np.arange(m)] += diag
            try:
                chol = np.linalg.cholesky(v)
            except np.linalg.LinAlgError:
                return None
            logdet += 2.0 * float(np.sum(np.log(np.diagonal(chol, axis1=1, axis2=2))))
            both = np.linalg.solve(v, np.concatenate([x, y[:, :, None]], axis=2))
            vx, vy = both[:, :, :-1], both[:, :, -1]
            a += np.einsum("bmp,bmq->pq", x, vx)
            b += np.einsum("bmp,bm->p", x, vy)
            c += float(np.sum(y * vy))
            solved.append((vx, ks, masks))
        return logdet, a, b, c, solved

    def loglik(self, theta: Floats) -> float:
        got = self.parts(theta)
        if got is None:
            return -math.inf
        logdet, a, b, c, _ = got
        sign, logdet_a = np.linalg.slogdet(a)
        if sign <= 0:
            return -math.inf
        beta = np.linalg.solve(a, b)
        return float(-0.5 * (logdet + float(logdet_a) + c - float(b @ beta)
                             + (self.n - self.p) * math.log(2 * math.pi)))  # fmt: skip

    def cov_gradient(self, theta: Floats, free: list[int]) -> list[Floats]:
        """``∂(XᵀV⁻¹X)⁻¹/∂θ_i = C·(XᵀV⁻¹·∂V/∂θ_i·V⁻¹X)·C`` for each free parameter."""
        got = self.parts(theta)
        assert got is not None
        _, a, _, _, solved = got
        cmat = np.linalg.inv(a)
        out = []
        for i in free:
            m = np.zeros((self.p, self.p))
            for vx, ks, masks in solved:
                if i < self.k:
                    m += np.einsum("bmp,bmn,bnq->pq", vx, ks[i], vx)
                else:
                    m += np.einsum("bmp,bm,bmq->pq", vx, masks[i - self.k], vx)
            out.append(cmat @ m @ cmat)
        return out


def design_matrix(arms: Sequence[str], others: Sequence[str], models: Sequence[str],
                  model_reference: str | None) -> Floats:  # fmt: skip
    """The registered model's treatment-coded design: intercept, ``arm[T.<o>]`` per other arm.

    With several models (``model_reference`` set) then ``model[T.<m>]`` for every other model
    level sorted as strings, as the pooled ``model.lmm`` codes them (``docs/analysis.md`` §4).
    """
    arm = np.asarray([str(a) for a in arms])
    columns = [np.ones(arm.size)] + [(arm == o).astype(np.float64) for o in others]
    if model_reference is not None:
        mv = np.asarray([str(m) for m in models])
        columns += [(mv == level).astype(np.float64)
                    for level in sorted(set(mv.tolist())) if level != model_reference]
    return np.column_stack(columns)


def group_differences(groups: Sequence[str], models: Sequence[str], arms: Sequence[str],
                      y: Floats, a: str, b: str) -> list[float]:  # fmt: skip
    """Per group (sorted), ``d_j``: the mean over models of (mean of a − mean of b).

    Only the (group, model) cells where both arms have trials count; a group with none is left
    out. With one model this is the per-probe difference of arm means.
    """
    values: dict[tuple[str, str, str], list[float]] = {}
    for g, m, arm, v in zip(groups, models, arms, y, strict=True):
        if arm in (a, b):
            values.setdefault((str(g), str(m), str(arm)), []).append(float(v))
    per_group: dict[str, list[float]] = {}
    for g, m in sorted({(g, m) for g, m, _ in values}):
        xa, xb = values.get((g, m, a)), values.get((g, m, b))
        if xa and xb:
            per_group.setdefault(g, []).append(float(np.mean(xa)) - float(np.mean(xb)))
    return [float(np.mean(d)) for _, d in sorted(per_group.items())]


def not_fittable(arms: Sequence[str], groups: Sequence[str], per_arm: bool) -> str | None:
    """Why a probe-by-arm model cannot be fitted on these trials, or ``None``.

    It needs at least 3 probes, every probe with trials in at least two arms, some probe ×
    arm cell with two trials or more; with a residual variance per arm, every arm needs a
    within-cell variance above zero (checked by the caller, which has the outcome).
    """
    probes = sorted(set(groups))
    if len(probes) < 3:
        return (f"the probe-by-arm model needs at least 3 probes; the trials have "
                f"{len(probes)}")  # fmt: skip
    arms_of: dict[str, set[str]] = {}
    cells: dict[tuple[str, str], int] = {}
    for a, g in zip(arms, groups, strict=True):
        arms_of.setdefault(g, set()).add(a)
        cells[(g, a)] = cells.get((g, a), 0) + 1
    for g in probes:
        if len(arms_of[g]) < 2:
            only = next(iter(arms_of[g]))
            return (f"probe {g!r} has trials in one arm only ({only}): its probe and "
                    "probe-by-arm effects cannot be separated")  # fmt: skip
    if max(cells.values()) < 2:
        return ("no probe × arm cell has two trials: the probe-by-arm and residual variances "
                "cannot be separated")
    del per_arm
    return None


def fit_reml(y: Floats, exog: Floats, groups: Sequence[str], terms: Sequence[Sequence[str]],
             classes: Sequence[str], names: list[str]) -> RemlFit:  # fmt: skip
    """Maximise the REML likelihood from three starts, then Newton steps in log θ."""
    model = _Dense(y, exog, groups, terms, classes)
    k, r = model.k, len(model.class_labels)
    v = model.var if model.var > 0 else 1.0
    best_theta: Floats | None = None
    best = -math.inf
    for share in (0.1, 0.5, 0.9):
        start = np.concatenate([np.full(k, share * v / max(k, 1)), np.full(r, (1 - share) * v)])

        def neg(s: Floats) -> float:
            ll = model.loglik(s * s)
            return -ll if math.isfinite(ll) else 1e300

        res = optimize.minimize(neg, np.sqrt(start), method="L-BFGS-B",
                                options={"maxiter": 500, "ftol": 1e-10, "gtol": 1e-7})
        theta = _newton(model, np.asarray(res.x) ** 2)
        ll = model.loglik(theta)
        if ll > best:
            best, best_theta = ll, theta
    if best_theta is None or not math.isfinite(best):
        raise ValueError("the REML likelihood has no finite maximum")
    got = model.parts(best_theta)
    assert got is not None
    a = got[1]
    cov = np.linalg.inv(a)
    cov = (cov + cov.T) / 2
    beta = cov @ got[2]
    free = _free(model, best_theta)
    info_cov = _info_cov(model, best_theta, free)
    return RemlFit(names, best_theta, best, beta, cov, free, info_cov, model)


def fit_at(y: Floats, exog: Floats, groups: Sequence[str], terms: Sequence[Sequence[str]],
           classes: Sequence[str], names: list[str], params: Sequence[float]) -> RemlFit:
    """The fit evaluated at given variance parameters (the registered model's)."""
    model = _Dense(y, exog, groups, terms, classes)
    theta = np.asarray([float(v) for v in params], dtype=np.float64)
    got = model.parts(theta)
    if got is None:
        raise ValueError("the REML likelihood is undefined at these variances")
    cov = np.linalg.inv(got[1])
    cov = (cov + cov.T) / 2
    free = _free(model, theta)
    return RemlFit(names, theta, model.loglik(theta), cov @ got[2], cov, free,
                   _info_cov(model, theta, free), model)  # fmt: skip


def _free(model: _Dense, theta: Floats) -> list[int]:
    floor = BOUNDARY_FRACTION * (model.var if model.var > 0 else 1.0)
    return [i for i in range(theta.size) if theta[i] > floor]


def _log_hessian(model: _Dense, theta: Floats, free: list[int]) -> tuple[Floats, Floats]:
    h = 1e-4
    base = np.log(theta[free])

    def f(u: Floats) -> float:
        t = theta.copy()
        t[free] = np.exp(u)
        return model.loglik(t)

    m = len(free)
    f0 = f(base)
    grad, hess, e = np.zeros(m), np.zeros((m, m)), np.eye(m) * h
    for i in range(m):
        fp, fm = f(base + e[i]), f(base - e[i])
        grad[i] = (fp - fm) / (2 * h)
        hess[i, i] = (fp - 2 * f0 + fm) / (h * h)
        for j in range(i):
            hess[i, j] = hess[j, i] = (f(base + e[i] + e[j]) - f(base + e[i] - e[j])
                                       - f(base - e[i] + e[j]) + f(base - e[i] - e[j])) / (
                4 * h * h)  # fmt: skip
    return grad, hess


def _newton(model: _Dense, theta: Floats) -> Floats:
    for _ in range(30):
        free = _free(model, theta)
        if not free:
            return theta
        g, hmat = _log_hessian(model, theta, free)
        try:
            if np.any(np.linalg.eigvalsh(-hmat) <= 0):
                return theta
            step = np.linalg.solve(-hmat, g)
        except np.linalg.LinAlgError:
            return theta
        f0 = model.loglik(theta)
        for scale in (1.0, 0.5, 0.25, 0.1):
            cand = theta.copy()
            cand[free] = theta[free] * np.exp(scale * step)
            if model.loglik(cand) >= f0:
                theta = cand
                break
        else:
            return theta
        if float(g @ step) < 1e-14:
            return theta
    return theta


def _info_cov(model: _Dense, theta: Floats, free: list[int]) -> Floats:
    """Inverse expected REML information ``½·tr(P·∂V/∂θ_i·P·∂V/∂θ_k)`` over the free params.

    ``P = V⁻¹ − U·C·Uᵀ`` (``U = V⁻¹X``), expanded per block so no ``n × n`` matrix is formed.
    """
    if not free:
        return np.zeros((0, 0))
    got = model.parts(theta)
    assert got is not None
    cmat = np.linalg.inv(got[1])
    m = len(free)
    t1 = np.zeros((m, m))
    a = np.zeros((m, m, model.p, model.p))
    b = np.zeros((m, model.p, model.p))
    re, phi = theta[: model.k], theta[model.k :]
    for x, _, ks, masks in model.stacks:
        v = np.einsum("k,kbmn->bmn", re, ks)
        size = v.shape[1]
        v[:, np.arange(size), np.arange(size)] += np.einsum("r,rbm->bm", phi, masks)
        vi = np.linalg.inv(v)
        u = vi @ x
        dv = [ks[i] if i < model.k else masks[i - model.k][:, :, None] * np.eye(size)
              for i in free]  # fmt: skip
        vd = [vi @ d for d in dv]
        du = [d @ u for d in dv]
        for i in range(m):
            b[i] += np.einsum("bmp,bmq->pq", u, du[i])
            for k in range(m):
                t1[i, k] += float(np.einsum("bmn,bnm->", vd[i], vd[k]))
                a[i, k] += np.einsum("bmp,bmn,bnq->pq", du[k], vi, du[i])
    info = np.zeros((m, m))
    for i in range(m):
        for k in range(m):
            info[i, k] = 0.5 * (t1[i, k] - 2 * float(np.trace(cmat @ a[i, k]))
                                + float(np.trace(cmat @ b[i] @ cmat @ b[k])))  # fmt: skip
    try:
        return np.asarray(np.linalg.inv(info))
    except np.linalg.LinAlgError:
        return np.full((m, m), math.nan)


def satterthwaite_contrast(fit: RemlFit, weights: Floats, sides: str,
                           conf: float = 0.95) -> dict[str, Any]:  # fmt: skip
    """``L·β̂`` with ``SE² = LᵀCL`` and Satterthwaite ``df = 2(LᵀCL)² / (gᵀWg)``.

    ``g_i = Lᵀ(∂C/∂θ_i)L`` over the free variance parameters, ``W`` the inverse expected
    REML information in θ; t-distribution p and interval (one-sided: lower bound only).
    """
    est = float(weights @ fit.beta)
    var = float(weights @ fit.cov @ weights)
    se = math.sqrt(var) if var > 0 else math.nan
    grads = fit.model.cov_gradient(fit.params, fit.free)
    g = np.array([float(weights @ d @ weights) for d in grads])
    denom = float(g @ fit.info_cov @ g) if g.size else 0.0
    df = 2 * var * var / denom if denom > 0 else math.inf
    t = est / se if se > 0 else math.nan
    if sides == "one-sided":
        p = float(sps.t.sf(t, df))
        lower, upper = est - float(sps.t.ppf(conf, df)) * se, math.inf
    else:
        p = float(2 * sps.t.sf(abs(t), df))
        q = float(sps.t.ppf(0.5 + conf / 2, df))
        lower, upper = est - q * se, est + q * se
    return {"estimate": est, "se": se, "df": df, "t": t, "p": p, "lower": lower,
            "upper": upper, "conf": conf}  # fmt: skip


def cluster_bootstrap(diffs: Floats, iterations: int, seed: int, sides: str,
                      conf: float = 0.95) -> dict[str, Any]:  # fmt: skip
    """Percentile bootstrap of the mean per-probe difference, probes resampled with replacement.

    Indices are drawn as one ``(iterations, G)`` C-order block from ``PCG64(seed)``, in chunks
    of ``max(1, 2**18 // G)`` rows; one-sided: the lower bound is the ``1 − conf`` quantile.
    """
    n = diffs.size
    rng = np.random.Generator(np.random.PCG64(seed))
    reps = np.empty(iterations)
    rows = max(1, (1 << 18) // n)
    for start in range(0, iterations, rows):
        stop = min(iterations, start + rows)
        reps[start:stop] = diffs[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    if sides == "one-sided":
        lower = float(np.quantile(reps, round(1 - conf, 12)))
        upper = math.inf
    else:
        lo, hi = np.quantile(reps, [round((1 - conf) / 2, 12), round((1 + conf) / 2, 12)])
        lower, upper = float(lo), float(hi)
    return {"estimate": float(np.mean(diffs)), "lower": lower, "upper": upper, "conf": conf,
            "n_clusters": n, "iterations": iterations, "seed": seed}  # fmt: skip
