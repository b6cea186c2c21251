"""The verifier's own REML, in numpy and scipy only (``docs/statistics.md`` §"Mixed model").

A linear mixed model whose covariance is block-diagonal by a grouping factor (the probe):

``V = R + Z·G·Zᵀ``, ``R = diag(φ_r(i))`` (one residual variance, or one per residual class such
as the arm), ``G = diag(θ_k(c))`` (one variance per random-effect term ``k``: the group
intercept, the group-by-arm cell, ...), ``Z`` the 0/1 indicators of each term's clusters, every
cluster nested in one group. With ``L = G^½`` and per group ``M_j = I + L·Z_jᵀR_j⁻¹Z_j·L``:

* ``V_j⁻¹ = R_j⁻¹ − R_j⁻¹Z_j·L·M_j⁻¹·L·Z_jᵀR_j⁻¹`` (Woodbury; a zero variance is allowed),
* ``log|V_j| = log|R_j| + log|M_j|``,
* ``l_R = −½[log|V| + log|XᵀV⁻¹X| + yᵀV⁻¹y − bᵀβ̂ + (n − p)·log 2π]`` with ``b = XᵀV⁻¹y``,
  ``β̂ = (XᵀV⁻¹X)⁻¹b``; the covariance of ``β̂`` is ``(XᵀV⁻¹X)⁻¹``, the inverse of the negative
  Hessian of the log-likelihood in ``β``.

Everything that depends on the variances is computed from per-group sums, so no ``n × n``
matrix is formed. It imports nothing from ``ledger``, ``runner`` or ``analysis``, and no
statsmodels: the verifier's check of a recorded mixed model must not share the writer's
optimiser.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

# scipy is imported inside the functions that use it: the checks before the science ones load
# none of it (tests/verify/test_verify_imports.py).
import numpy as np
from numpy.typing import NDArray

__all__ = [
    "RemlModel",
    "RemlPoint",
    "check_point",
    "noise",
    "remembered_maxima",
    "stationary_limit",
]

Floats = NDArray[np.float64]

STATIONARY_TOL = 1e-6
"""Largest Newton decrement ``½·gᵀ(−H)⁻¹g`` (log-likelihood units) of a stationary point.

Relative to the information, so the same at every sample size: a point whose decrement is
``δ`` lies ``sqrt(2δ)`` standard errors (in the metric of the observed information) from the
maximum; 1e-6 is 0.0014 standard errors (``docs/statistics.md``)."""
OPTIMUM_TOL = 1e-6
"""How far (log-likelihood units) a recorded point may fall short of the verifier's optimum."""
NOISE_FACTOR = 16.0
"""The rounding error of one evaluation of ``l_R`` is taken as ``NOISE_FACTOR·ε·S``.

``ε = 2⁻⁵²``, ``S`` :attr:`RemlPoint.magnitude`. Measured on 10,010- and 20,020-trial studies
and on 2,500 groups, the evaluation's rounding stays within ``4.4·ε·S``."""
GRADIENT_STEP = 2e-3
"""The larger of the two central-difference steps (:meth:`RemlModel.log_gradient_hessian`)."""
CLIMB_STEP = 1e-8
"""The forward-difference step of the L-BFGS-B climbs (:meth:`RemlModel._climb`).

scipy's default ``eps`` for L-BFGS-B, which the climbs used when scipy differenced for them."""
BOUNDARY_FRACTION = 1e-6
"""A variance at or below this fraction of the outcome variance is on the boundary (zero)."""


def _codes(values: Sequence[Any]) -> tuple[NDArray[np.intp], list[str]]:
    labels = sorted({str(v) for v in values})
    index = {v: i for i, v in enumerate(labels)}
    return np.asarray([index[str(v)] for v in values], dtype=np.intp), labels


@dataclass
class RemlPoint:
    """A REML log-likelihood and the fixed effects at one point of the variance parameters."""

    params: Floats
    loglik: float
    beta: Floats
    cov: Floats
    magnitude: float = 0.0
    """``S``: the sum of the absolute values of the terms ``l_R`` adds (``docs/statistics.md``),
    the scale of its rounding error."""


_MAXIMA: ContextVar[dict[bytes, RemlPoint] | None] = ContextVar("_MAXIMA", default=None)


@contextmanager
def remembered_maxima() -> Iterator[None]:
    """Within the block, each REML maximum is found once per model input data.

    :meth:`RemlModel.maximise` of a model built from the same inputs (the outcome, the design,
    every row's group, cluster and residual class, bit for bit, in the same row order) climbs
    once; later calls get a copy of that point.

    One verification checks the same subset's random-intercept model both as a hypothesis and
    as the registered model of its sensitivity analysis; the maximum is a function of the
    model's inputs alone, so the second check gets the same numbers without a second climb.
    The memory is the block's own (a context variable): nothing outlives it.
    """
    token = _MAXIMA.set({})
    try:
        yield
    finally:
        _MAXIMA.reset(token)


def _copy(point: RemlPoint) -> RemlPoint:
    """``point`` with arrays of its own (a caller may change what it was handed)."""
    return replace(point, params=point.params.copy(), beta=point.beta.copy(), cov=point.cov.copy())


def _columns(
    terms: Sequence[Sequence[Any]], gcode: Any, n_groups: int, n: int
) -> tuple[list[list[tuple[int, str]]], Any]:
    """The columns of Z per group (every (term, cluster) in it) and each row's column per term."""
    cols: list[list[tuple[int, str]]] = [[] for _ in range(n_groups)]
    col_of_row = np.zeros((len(terms), n), dtype=np.intp)
    for k, labels in enumerate(terms):
        seen: dict[tuple[int, str], int] = {}
        for i, lab in enumerate(labels):
            key = (int(gcode[i]), f"{k}\x00{lab}")
            if key not in seen:
                seen[key] = len(cols[key[0]])
                cols[key[0]].append((k, str(lab)))
            col_of_row[k, i] = seen[key]
    return cols, col_of_row


class RemlModel:
    """``y = Xβ + Zu + e`` with block-diagonal ``V`` (see the module docstring).

    ``groups`` gives the blocks; ``terms`` the cluster label of every row for each random
    effect (each cluster inside one group; the group itself is the random intercept);
    ``resid_classes`` the residual class of every row (``None``: one residual variance). The
    parameters are ``(θ_1..θ_K, φ_1..φ_R)``: term variances, then residual variances (classes
    in sorted order).
    """

    def __init__(
        self,
        y: Any,
        exog: Any,
        groups: Sequence[Any],
        terms: Sequence[Sequence[Any]],
        resid_classes: Sequence[Any] | None = None,
    ) -> None:
        yv = np.asarray(y, dtype=np.float64)
        x = np.asarray(exog, dtype=np.float64)
        n, p = x.shape
        self.n, self.p = n, p
        if n == 0 or not np.all(x[:, 0] == 1.0):
            raise ValueError("the first column of the design must be the intercept")
        self.mean = float(np.mean(yv))
        self.yc = yv - self.mean  # REML is invariant to y + Xb: centred against cancellation
        self.total_var = float(np.var(yv, ddof=1)) if n > 1 else 0.0
        gcode, glabels = _codes(groups)
        self.n_groups = len(glabels)
        rcode, rlabels = _codes(resid_classes if resid_classes is not None else [""] * n)
        self.resid_labels = rlabels
        self.k = len(terms)
        self.r = len(rlabels)
        cols, col_of_row = _columns(terms, gcode, self.n_groups, n)
        key = hashlib.sha256(np.asarray([n, p, self.k, self.n_groups, self.r]).tobytes())
        for part in (yv, x, gcode, col_of_row, rcode):
            key.update(np.ascontiguousarray(part).tobytes())
        self._input_key = key.digest()  # what the model is built from: remembered_maxima()
        q = max((len(c) for c in cols), default=0)
        self.q = q
        self.term_of_col = np.full((self.n_groups, q), -1, dtype=np.intp)
        for j, group_cols in enumerate(cols):
            for m, (k, _) in enumerate(group_cols):
                self.term_of_col[j, m] = k
        z = np.zeros((n, q))
        for k in range(self.k):
            z[np.arange(n), col_of_row[k]] = 1.0
        g, r = self.n_groups, self.r
        self.zz = np.zeros((r, g, q, q))
        self.zx = np.zeros((r, g, q, p))
        self.zy = np.zeros((r, g, q))
        self.xx = np.zeros((r, p, p))
        self.xy = np.zeros((r, p))
        self.yy = np.zeros(r)
        self.nr = np.zeros(r)
        for c in range(r):
            rows = rcode == c
            xr, yr, zr, gr = x[rows], self.yc[rows], z[rows], gcode[rows]
            np.add.at(self.zz[c], gr, zr[:, :, None] * zr[:, None, :])
            np.add.at(self.zx[c], gr, zr[:, :, None] * xr[:, None, :])
            np.add.at(self.zy[c], gr, zr * yr[:, None])
            self.xx[c] = xr.T @ xr
            self.xy[c] = xr.T @ yr
            self.yy[c] = float(yr @ yr)
            self.nr[c] = float(rows.sum())
        self.n_params = self.k + self.r
        self._sums = np.concatenate(
            [a.reshape(r, -1) for a in (self.zz, self.zx, self.zy, self.xx, self.xy)], axis=1
        )
        self._atoms(x, gcode, col_of_row, rcode)

    def _atoms(self, x: Any, gcode: Any, col_of_row: Any, rcode: Any) -> None:
        """Per group, its *atoms*, and the within-atom sums of squares of X per class.

        The rows that share every cluster and the residual class are exchangeable in V, so V_j
        acts on the atom indicators (normalised, 1_a/√m_a) as a small dense matrix and on the
        contrasts within an atom as φ_class·I (information()).
        """
        p, q = self.p, self.q
        self._groups = []
        self.within_n = np.zeros(self.r)
        self.within_xx = np.zeros((self.r, p, p))
        for j in range(self.n_groups):
            rows = np.flatnonzero(gcode == j)
            keys = np.column_stack([col_of_row[:, rows].T, rcode[rows]])
            atoms, inverse = np.unique(keys, axis=0, return_inverse=True)
            inverse = inverse.reshape(-1)
            size = np.bincount(inverse, minlength=len(atoms)).astype(np.float64)
            sums = np.zeros((len(atoms), p))
            np.add.at(sums, inverse, x[rows])
            zt = np.zeros((len(atoms), q))
            for k in range(self.k):
                zt[np.arange(len(atoms)), atoms[:, k]] = np.sqrt(size)
            cls = atoms[:, self.k].astype(np.intp)
            self._groups.append((zt, sums / np.sqrt(size)[:, None], cls))
            for a in range(len(atoms)):
                xa = x[rows[inverse == a]]
                dev = xa - sums[a] / size[a]
                self.within_n[cls[a]] += size[a] - 1
                self.within_xx[cls[a]] += dev.T @ dev

    def _derivative_blocks(self, j: int) -> list[Floats]:
        """``∂V_j/∂θ_i`` on group ``j``'s normalised atom indicators, for every parameter."""
        zt, _, cls = self._groups[j]
        out = []
        for k in range(self.k):
            zk = zt * (self.term_of_col[j] == k)[None, :]
            out.append(zk @ zk.T)
        out += [np.diag((cls == c).astype(np.float64)) for c in range(self.r)]
        return out

    def information(self, params: Any) -> tuple[Floats, list[Floats]]:
        """The expected REML information ``½·tr(P·V_i·P·V_k)`` and ``∂C/∂θ_i = C·B_i·C``.

        With ``P = V⁻¹ − U·C·Uᵀ``, ``U = V⁻¹X``, ``C = (XᵀV⁻¹X)⁻¹`` and ``B_i = UᵀV_iU``:
        ``tr(PV_iPV_k) = Σ_j tr(V_j⁻¹V_ijV_j⁻¹V_kj) − 2·tr(C·UᵀV_kV⁻¹V_iU) + tr(C·B_i·C·B_k)``.
        Each group splits into the span of its atoms' indicators (a dense matrix of the atoms,
        a handful per group) and the contrasts within the atoms, where ``V = φ·I``, a random
        term's derivative is 0 and a residual class's is ``I`` on that class's rows: so no
        ``n_j × n_j`` matrix is formed and the cost is O(n) overall.
        """
        theta = np.asarray(params, dtype=np.float64)
        pt = self.point(theta)
        c = pt.cov
        m = self.n_params
        t1 = np.zeros((m, m))
        a = np.zeros((m, m, self.p, self.p))
        b = np.zeros((m, self.p, self.p))
        for j, (_, xb, _) in enumerate(self._groups):
            dv = self._derivative_blocks(j)
            v = sum(t * d for t, d in zip(theta, dv, strict=True))
            vi = np.linalg.inv(v)
            u = vi @ xb
            vd = [vi @ d for d in dv]
            du = [d @ u for d in dv]
            for i in range(m):
                b[i] += u.T @ du[i]
                for k in range(m):
                    t1[i, k] += float(np.sum(vd[i] * vd[k].T))
                    a[i, k] += du[k].T @ vi @ du[i]
        for r in range(self.r):  # the contrasts within the atoms of residual class r
            i = self.k + r
            phi = theta[i]
            t1[i, i] += self.within_n[r] / phi**2
            a[i, i] += self.within_xx[r] / phi**3
            b[i] += self.within_xx[r] / phi**2
        info = np.zeros((m, m))
        for i in range(m):
            for k in range(m):
                tr = (
                    t1[i, k]
                    - 2 * float(np.trace(c @ a[i, k]))
                    + float(np.trace(c @ b[i] @ c @ b[k]))
                )
                info[i, k] = 0.5 * tr
        return info, [c @ b[i] @ c for i in range(m)]

    # -------------------------------------------------------------------------- likelihood

    def point(self, params: Any) -> RemlPoint:
        """``l_R``, ``β̂`` and ``(XᵀV⁻¹X)⁻¹`` at ``params``; ``loglik = -inf`` where undefined."""
        theta = np.asarray(params, dtype=np.float64)
        if theta.size != self.n_params:
            return RemlPoint(
                theta, -math.inf, np.full(self.p, math.nan), np.full((self.p, self.p), math.nan)
            )
        return self.points(theta.reshape(1, -1))[0]

    def points(self, thetas: Any) -> list[RemlPoint]:
        """:meth:`point` at every row of ``thetas`` (``B × n_params``), in one evaluation."""
        theta = np.asarray(thetas, dtype=np.float64).reshape(-1, self.n_params)
        ll, beta, cov, magnitude = self._evaluate(theta)
        return [
            RemlPoint(theta[i].copy(), float(ll[i]), beta[i], cov[i], float(magnitude[i]))
            for i in range(theta.shape[0])
        ]

    def logliks(self, thetas: Any) -> Floats:
        """``l_R`` at every row of ``thetas`` (``B × n_params``; ``-inf`` where undefined)."""
        theta = np.asarray(thetas, dtype=np.float64).reshape(-1, self.n_params)
        return self._evaluate(theta)[0]

    def loglik(self, params: Any) -> float:
        """``l_R`` at ``params`` (``-inf`` outside the parameter space)."""
        return self.point(params).loglik

    def _evaluate(self, theta: Floats) -> tuple[Floats, Floats, Floats, Floats]:
        """``l_R``, ``β̂``, ``(XᵀV⁻¹X)⁻¹`` and the magnitude ``S`` at every row of ``theta``.

        Every row is computed by the same elementwise and per-matrix operations whatever the
        batch, so a row's numbers do not depend on the rows beside it (a test checks this bit
        for bit). Rows outside the parameter space, or whose factorisations fail, get
        ``l_R = -inf``: should a factorisation fail, the batch is redone row by row so that only
        the failing rows are lost.
        """
        inside = (
            np.isfinite(theta).all(axis=1)
            & (theta[:, : self.k] >= 0).all(axis=1)
            & (theta[:, self.k :] > 0).all(axis=1)
        )
        if inside.all():
            try:
                ll, beta, cov, magnitude = self._kernel(theta)
                ll[~np.isfinite(ll)] = -math.inf
                return ll, beta, cov, magnitude
            except np.linalg.LinAlgError:
                pass
        nb, p = theta.shape[0], self.p
        ll = np.full(nb, -math.inf)
        beta = np.full((nb, p), math.nan)
        cov = np.full((nb, p, p), math.nan)
        magnitude = np.zeros(nb)
        rows = np.flatnonzero(inside)
        try:
            parts = [(rows, self._kernel(theta[rows]))] if 1 < rows.size < nb else []
        except np.linalg.LinAlgError:
            parts = []
        if not parts:
            for i in rows:
                try:
                    parts.append((np.array([i]), self._kernel(theta[i : i + 1])))
                except np.linalg.LinAlgError:
                    continue
        for where, (l_r, b, c, s) in parts:
            ll[where], beta[where], cov[where], magnitude[where] = l_r, b, c, s
        ll[~np.isfinite(ll)] = -math.inf
        return ll, beta, cov, magnitude

    def _kernel(self, theta: Floats) -> tuple[Floats, Floats, Floats, Floats]:
        """:meth:`_evaluate` on rows inside the parameter space (raises ``LinAlgError``)."""
        re, phi = theta[:, : self.k], theta[:, self.k :]
        w = 1.0 / phi
        nb, g, q, p = theta.shape[0], self.n_groups, self.q, self.p
        sums = np.einsum("sr,rf->sf", w, self._sums)  # the weighted sums, as one array
        ends = np.cumsum([g * q * q, g * q * p, g * q, p * p])
        ztz = sums[:, : ends[0]].reshape(nb, g, q, q)
        ztx = sums[:, ends[0] : ends[1]].reshape(nb, g, q, p)
        zty = sums[:, ends[1] : ends[2]].reshape(nb, g, q)
        xtx = sums[:, ends[2] : ends[3]].reshape(nb, p, p)
        xty = sums[:, ends[3] :]
        yty = _dots(w, self.yy)
        root = np.sqrt(re[:, np.maximum(self.term_of_col, 0)])
        lam = np.where(self.term_of_col >= 0, root, 0.0)
        m = np.eye(self.q) + lam[:, :, :, None] * ztz * lam[:, :, None, :]
        chol = np.linalg.cholesky(m)
        log_phi = np.log(phi)
        logdet_v = _dots(log_phi, self.nr) + 2.0 * np.sum(
            np.log(np.diagonal(chol, axis1=2, axis2=3)), axis=(1, 2)
        )
        ux = lam[:, :, :, None] * ztx
        uy = lam * zty
        sx = np.linalg.solve(chol, ux)  # C⁻¹·L·ZᵀR⁻¹X per group
        sy = np.linalg.solve(chol, uy[:, :, :, None])[:, :, :, 0]
        a = xtx - np.einsum("sgap,sgaq->spq", sx, sx)
        b = xty - np.einsum("sgap,sga->sp", sx, sy)
        c = yty - np.sum(sy * sy, axis=(1, 2))
        ca = np.linalg.cholesky(a)
        cov = np.linalg.inv(a)
        cov = (cov + np.swapaxes(cov, 1, 2)) / 2
        beta = (cov @ b[:, :, None])[:, :, 0]
        logdet_a = 2.0 * np.sum(np.log(np.diagonal(ca, axis1=1, axis2=2)), axis=1)
        fitted = (b[:, None, :] @ beta[:, :, None])[:, 0, 0]
        quad = c - fitted
        beta[:, 0] += self.mean
        const = (self.n - self.p) * math.log(2 * math.pi)
        ll = -0.5 * (logdet_v + logdet_a + quad + const)
        magnitude = 0.5 * (
            _dots(np.abs(log_phi), self.nr)
            + np.abs(logdet_v)
            + np.abs(logdet_a)
            + yty
            + np.abs(fitted)
            + const
        )
        return ll, beta, cov, magnitude

    # -------------------------------------------------------------------------- derivatives

    def log_gradient_hessian(self, params: Any, free: Sequence[int]) -> tuple[Floats, Floats]:
        """Gradient and Hessian of ``l_R`` in ``log`` of the ``free`` params.

        Central differences with steps ``h = GRADIENT_STEP`` and ``h/2``, combined by Richardson
        extrapolation (error ``O(h⁴)``), so they agree with an analytic Hessian to ~1e-9. The
        whole stencil (``1 + 2·(2m + 2m(m−1))`` points for ``m`` free params) is one
        :meth:`logliks` call.
        """
        theta = np.asarray(params, dtype=np.float64)
        idx = list(free)
        base = np.log(theta[idx])
        m = len(idx)
        steps = (GRADIENT_STEP, GRADIENT_STEP / 2)
        stencil = [base]
        for h in steps:
            e = np.eye(m) * h
            for i in range(m):
                stencil += [base + e[i], base - e[i]]
                for j in range(i):
                    stencil += [
                        base + e[i] + e[j],
                        base + e[i] - e[j],
                        base - e[i] + e[j],
                        base - e[i] - e[j],
                    ]
        at = np.repeat(theta[None, :], len(stencil), axis=0)
        at[:, idx] = np.exp(np.array(stencil))
        values = iter(self.logliks(at).tolist())
        f0 = next(values)

        def combine(h: float) -> tuple[Floats, Floats]:
            grad = np.zeros(m)
            hess = np.zeros((m, m))
            for i in range(m):
                fp, fm = next(values), next(values)
                grad[i] = (fp - fm) / (2 * h)
                hess[i, i] = (fp - 2 * f0 + fm) / h**2
                for j in range(i):
                    pp, pm, mp, mm = (next(values) for _ in range(4))
                    hess[i, j] = hess[j, i] = (pp - pm - mp + mm) / (4 * h * h)
            return grad, hess

        g1, h1 = combine(steps[0])
        g2, h2 = combine(steps[1])
        return (4 * g2 - g1) / 3, (4 * h2 - h1) / 3

    # -------------------------------------------------------------------------- optimisation

    def starts(self) -> list[Floats]:
        """Starting points: the outcome variance split between the terms and the residual."""
        v = self.total_var if self.total_var > 0 else 1.0
        out = []
        for share in (0.1, 0.5, 0.9):
            re = np.full(self.k, share * v / max(1, self.k))
            out.append(np.concatenate([re, np.full(self.r, (1 - share) * v)]))
        return out

    def scan(self) -> list[Floats]:
        """More starts: the local maxima of a grid over the random-effect variances.

        The likelihood can have a maximum for each scale the random effects can take (residual
        classes of very different sizes: docs/statistics.md, "several maxima"), and the shares
        of :meth:`starts` all lie near the largest. The residual variances are fixed at their
        REML values with no random effect (:meth:`_residuals_alone`); every term's variance
        takes the values ``var(y)·10^(−e)``, ``e = 0, 0.5, ..., 6``, in every combination (one
        :meth:`logliks` call); a grid point whose ``l_R`` is not below any point one step away
        (in one or several terms) is a start, the three most likely of them (the earlier grid
        point first on a tie).
        """
        if self.k == 0:
            return []
        v = self.total_var if self.total_var > 0 else 1.0
        resid = self._residuals_alone()
        values = [v / 10.0 ** (e / 2) for e in range(13)]
        combos = [tuple(int(i) for i in c) for c in np.ndindex(*([len(values)] * self.k))]
        thetas = np.array([[values[i] for i in combo] + list(resid) for combo in combos])
        grid = dict(zip(combos, self.logliks(thetas).tolist(), strict=True))
        found = []
        for combo, ll in grid.items():
            if not math.isfinite(ll):
                continue
            steps = (
                tuple(c + d - 1 for c, d in zip(combo, step, strict=True))
                for step in np.ndindex(*([3] * self.k))
            )
            if all(ll >= grid[key] for key in steps if key in grid):
                found.append((ll, combo))
        found.sort(key=lambda x: -x[0])
        return [
            np.array([values[i] for i in combo] + list(resid), dtype=np.float64)
            for _, combo in found[:3]
        ]

    def _climb(
        self, to_theta: Callable[[Floats], Floats], x0: Floats, ftol: float, gtol: float
    ) -> Floats:
        """L-BFGS-B on ``−l_R(to_theta(x))`` from ``x0`` (``1e300`` where ``l_R`` is undefined).

        The gradient is the one scipy's L-BFGS-B computes when given none: forward
        differences with the absolute step ``eps`` = :data:`CLIMB_STEP` (``sqrt(ε)·max(1, |x|)``
        where that step vanishes in ``x + h``), divided by ``(x + h) − x``. Here the value and
        the ``n`` shifted points are one :meth:`logliks` call, so the climb takes exactly the
        steps of scipy's own differences at a fraction of the cost; ``maxfun`` is scaled by
        ``n + 1`` as scipy counts those evaluations.
        """
        from scipy import optimize

        n = x0.size
        cols = np.arange(n)

        def value_and_gradient(x: Floats) -> tuple[float, Floats]:
            h = np.full(n, CLIMB_STEP)
            sign = (x >= 0).astype(np.float64) * 2 - 1
            rel = math.sqrt(float(np.finfo(np.float64).eps)) * sign * np.maximum(1.0, np.abs(x))
            h = np.where((x + h) - x == 0, rel, h)
            xs = np.repeat(x[None, :], n + 1, axis=0)
            xs[cols + 1, cols] = x + h
            ll = self.logliks(to_theta(xs))
            f = np.where(np.isfinite(ll), -ll, 1e300)
            return float(f[0]), (f[1:] - f[0]) / ((x + h) - x)

        res = optimize.minimize(
            value_and_gradient,
            x0,
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": 2000, "maxfun": 15000 // (n + 1), "ftol": ftol, "gtol": gtol},
        )
        return np.asarray(res.x, dtype=np.float64)

    def _residuals_alone(self) -> Floats:
        """The residual variances of the REML maximum with every random-effect variance 0."""
        v = self.total_var if self.total_var > 0 else 1.0
        zeros = np.zeros((1, self.k))

        def theta(s: Floats) -> Floats:
            return np.hstack([np.repeat(zeros, s.shape[0], axis=0), s * s])

        return self._climb(theta, np.full(self.r, math.sqrt(v)), 1e-12, 1e-9) ** 2

    def maximise(self) -> RemlPoint:
        """The verifier's own REML maximum.

        L-BFGS-B in ``s`` (``θ = s²``) from every start (:meth:`starts`, then :meth:`scan`),
        then Newton steps in ``log θ`` on the components away from zero; the most likely, then
        the boundary (:meth:`_to_boundary`). L-BFGS-B only has to reach the maximum's basin
        (``ftol`` 1e-9): the Newton steps, whose convergence is quadratic, give the precision
        (on the demo archive the optimum's ``l_R`` agrees to 1e-11 with ``ftol`` 1e-15, at 0.7
        of the likelihood evaluations). Inside :func:`remembered_maxima` a model built from the
        same inputs is maximised once.
        """
        memory = _MAXIMA.get()
        if memory is not None and self._input_key in memory:
            return _copy(memory[self._input_key])
        best: RemlPoint | None = None
        for start in self.starts() + self.scan():
            s = self._climb(np.square, np.sqrt(start), 1e-9, 1e-6)
            cand = self._polish(self.point(s**2))
            if best is None or cand.loglik > best.loglik:
                best = cand
        assert best is not None
        found = self._to_boundary(best)
        if memory is not None:
            memory[self._input_key] = _copy(found)
        return found

    def _to_boundary(self, pt: RemlPoint) -> RemlPoint:
        """``pt``, or the boundary point it stops short of, whichever is more likely.

        L-BFGS-B in ``s`` and Newton steps in ``log θ`` approach a maximum on the boundary
        ``θ_k = 0`` without reaching it. So each random-effect component still above 0, and
        then all of them at once, is set to exactly 0 and the other components polished
        again; the most likely of these points replaces ``pt`` when its ``l_R`` is at least
        ``pt``'s less the rounding of the two evaluations (``docs/statistics.md``, "the
        verifier's own maximum"): a boundary maximum is then evaluated at 0, where the writer
        records it, and an interior one (which zeroing makes clearly less likely) is kept.
        """
        if not math.isfinite(pt.loglik):
            return pt
        positive = [i for i in range(self.k) if pt.params[i] > 0]
        subsets = [[i] for i in positive] + ([positive] if len(positive) > 1 else [])
        best = None
        for subset in subsets:
            theta = pt.params.copy()
            theta[subset] = 0.0
            cand = self._polish(self.point(theta))
            if best is None or cand.loglik > best.loglik:
                best = cand
        if best is not None and best.loglik >= pt.loglik - noise(pt) - noise(best):
            return best
        return pt

    def _free(self, theta: Floats) -> list[int]:
        floor = BOUNDARY_FRACTION * (self.total_var if self.total_var > 0 else 1.0)
        return [i for i in range(self.n_params) if theta[i] > floor]

    def _polish(self, pt: RemlPoint) -> RemlPoint:
        """Newton steps in ``log θ`` on the components away from zero, to the maximum.

        Each step is the first of the full Newton step, ½, ¼ and ⅛ of it whose ``l_R`` is not
        below the current point's (the four are one :meth:`points` call); the polish stops when
        none is, when ``l_R`` no longer grows, or once ``gᵀ(−H)⁻¹g`` is below 1e-14.
        """
        scales = np.array([1.0, 0.5, 0.25, 0.125])
        for _ in range(20):
            free = self._free(pt.params)
            if not free or not math.isfinite(pt.loglik):
                return pt
            g, h = self.log_gradient_hessian(pt.params, free)
            try:
                step = np.linalg.solve(-h, g)
            except np.linalg.LinAlgError:
                return pt
            if not np.all(np.isfinite(step)) or np.any(np.linalg.eigvalsh(-h) <= 0):
                return pt
            trial = np.repeat(pt.params[None, :], scales.size, axis=0)
            trial[:, free] = trial[:, free] * np.exp(np.outer(scales, step))
            improved = False
            for cand in self.points(trial):
                if cand.loglik >= pt.loglik:
                    improved = cand.loglik > pt.loglik
                    pt = cand
                    break
            if not improved or float(g @ step) < 1e-14:
                return pt
        return pt


def check_point(model: RemlModel, params: Sequence[float]) -> tuple[RemlPoint, str | None]:
    """Is ``params`` (recorded) a REML maximum? Returns the point and ``None``, or a reason.

    The recorded point must be inside the parameter space, a stationary point in the
    components away from zero (a negative definite Hessian there and a Newton decrement at
    most :func:`stationary_limit`: :data:`STATIONARY_TOL` widened by the rounding of ``l_R``),
    and at least as likely as the verifier's own optimum from its own starts, less
    :data:`OPTIMUM_TOL` and the rounding ``η`` of both likelihoods (:func:`noise`).
    """
    theta = np.asarray([float(v) for v in params], dtype=np.float64)
    pt = model.point(theta)
    if not math.isfinite(pt.loglik):
        return pt, f"the REML log-likelihood is undefined at the recorded variances {_fmt(theta)}"
    free = model._free(theta)
    if free:
        g, h = model.log_gradient_hessian(theta, free)
        neg = -h
        try:
            eigen = np.linalg.eigvalsh(neg)
            definite = bool(np.all(eigen > 0))
            decrement = 0.5 * float(g @ np.linalg.solve(neg, g)) if definite else math.inf
        except np.linalg.LinAlgError:
            definite, decrement = False, math.inf
        if not definite:
            return pt, (
                f"the recorded variances {_fmt(theta)} are not a maximum of the REML "
                "log-likelihood (its Hessian there is not negative definite)"
            )
        limit = stationary_limit(noise(pt), len(free), float(eigen.min()))
        if decrement > limit:
            return pt, (
                f"the recorded variances {_fmt(theta)} are not a stationary point of the REML "
                f"log-likelihood (gradient in log variance {_fmt(g)}, Newton decrement "
                f"{decrement:.3g} > {limit:.3g}: {STATIONARY_TOL:g} plus the rounding allowance)"
            )
    best = model.maximise()
    slack = OPTIMUM_TOL + noise(pt) + noise(best)
    if pt.loglik < best.loglik - slack:
        return pt, (
            f"the recorded variances {_fmt(theta)} give l_R = {pt.loglik:.10g}; the verifier's "
            f"own REML optimum {_fmt(best.params)} gives {best.loglik:.10g} (more than "
            f"{slack:.3g} higher)"
        )
    return pt, None


def noise(point: RemlPoint) -> float:
    """``η = NOISE_FACTOR·ε·S``: the rounding error of ``l_R`` at ``point`` (log-lik units)."""
    return NOISE_FACTOR * float(np.finfo(np.float64).eps) * point.magnitude


def stationary_limit(eta: float, m: int, smallest: float) -> float:
    """The largest Newton decrement accepted: ``(sqrt(STATIONARY_TOL) + sqrt(a))²``.

    ``a = ½·m·(3η/h)²/λ_min`` bounds the decrement a gradient error alone would give: each of
    the ``m`` Richardson-combined central differences (steps ``h`` and ``h/2``,
    ``h = GRADIENT_STEP``) is off by at most ``3η/h`` when each evaluation is off by ``η``, and
    ``λ_min`` is the smallest eigenvalue of ``−H``. The decrement's square root is a norm, so
    the true one and the error's add at most (``docs/statistics.md``).
    """
    allowance = 0.5 * m * (3.0 * eta / GRADIENT_STEP) ** 2 / smallest
    return (math.sqrt(STATIONARY_TOL) + math.sqrt(allowance)) ** 2


def _dots(rows: Floats, vector: Floats) -> Floats:
    """``row · vector`` for every row, as the 1-D dot product ``row @ vector`` rounds it."""
    return (rows[:, None, :] @ vector[:, None])[:, 0, 0]


def _fmt(values: Floats) -> str:
    return "(" + ", ".join(f"{float(v):.6g}" for v in values) + ")"
