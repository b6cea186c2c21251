"""Sensitivity analyses beside the registered mixed model (``docs/statistics.md``, "Sensitivity").

Labelled ``sensitivity`` everywhere; they never change a registered verdict, they only say
whether they would support it. For every registered ``lmm`` hypothesis contrast:

* the registered random-intercept model with **Satterthwaite** degrees of freedom (t, not z),
  from the expected REML information (``df_method``);
* a **probe-by-arm** random effect: ``y = Xβ + u_probe + w_(probe, arm) + e``;
* probe-by-arm with a **residual variance per arm**;
* a **cluster bootstrap over probes** of the mean per-probe difference.

The REML fits here are the writer's own (per-probe sufficient statistics and Woodbury, O(n)
per probe: no ``n_j × n_j`` matrix); the verifier has an independent one (``verify/_reml.py``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from scipy import optimize, special
from threadpoolctl import ThreadpoolController

__all__ = [
    "BOUNDARY_FRACTION",
    "DECREMENT_TOL",
    "DF_METHOD",
    "RemlConvergenceError",
    "RemlFit",
    "cell_residuals",
    "check_maximum",
    "cluster_bootstrap",
    "design_matrix",
    "fit_at",
    "fit_reml",
    "group_differences",
    "log_derivatives",
    "log_score_hessian",
    "moment_starts",
    "not_fittable",
    "one_blas_thread",
    "polish",
    "satterthwaite_contrast",
    "scan_starts",
]

Floats = npt.NDArray[np.float64]

BOUNDARY_FRACTION = 1e-6
"""A variance at or below this fraction of the outcome variance counts as zero."""

DF_METHOD = "satterthwaite-expected-information"
"""What the sensitivity contrasts' ``df`` are: Satterthwaite's formula with the *expected* REML
information (not lmerTest's observed information; ``docs/statistics.md`` says why)."""


@dataclass
class RemlFit:
    """A REML fit of ``V_j = Σ_k θ_k·K_jk + diag(φ_class)`` per group ``j``.

    ``names`` label the parameters (terms first, then residual classes); ``beta`` and ``cov``
    are the GLS estimates and ``(XᵀV⁻¹X)⁻¹`` at ``params``; ``info_cov`` is the inverse of the
    expected REML information in the parameters away from zero (``free``), for Satterthwaite.
    """

    names: list[str]
    params: Floats
    loglik: float
    beta: Floats
    cov: Floats
    free: list[int]
    info_cov: Floats
    model: _Blocks


_Parts = tuple[float, Floats, Floats, float, Any]
"""``log|V|``, ``XᵀV⁻¹X``, ``XᵀV⁻¹y``, ``yᵀV⁻¹y`` and the blocks the derivatives use."""
_MEMO_BYTES = 1 << 26
"""About how many bytes a :class:`_Blocks` may keep in remembered evaluations (64 MiB)."""


def _remember(memo: dict[Any, Any], key: Any, value: Any, size: int) -> None:
    """Keep ``value`` under ``key``, forgetting the oldest entry when ``memo`` holds ``size``."""
    if len(memo) >= size:
        del memo[next(iter(memo))]
    memo[key] = value


@dataclass(frozen=True)
class _AtomBlocks:
    """The groups' atoms (:meth:`_Blocks._atoms`), padded to ``s`` atoms a group.

    ``d``: ``∂V/∂θ_i`` on the atoms' normalised indicators ``(m, G, s, s)``; ``x``, ``y``: ``X``
    and ``y`` on them (``√m_a·x̄_a``, ``√m_a·ȳ_a``); ``pad``: the padding's identity; per
    residual class the within-atom count ``n_r − atoms_r`` and sums of squares and products
    ``Σ (x − x̄_a)(x − x̄_a)ᵀ``, ``Σ (x − x̄_a)(y − ȳ_a)``, ``Σ (y − ȳ_a)²``.
    """

    d: Floats
    x: Floats
    y: Floats
    pad: Floats
    within_n: Floats
    within_xx: Floats
    within_xy: Floats
    within_yy: Floats


def _factorize(values: Sequence[Any]) -> tuple[list[str], npt.NDArray[np.intp]]:
    """The distinct values (as ``str``, sorted by code point) and each value's position there.

    What ``np.unique(..., return_inverse=True)`` gives for an array of the strings, with a
    dictionary instead of a sort of the strings (a few times faster at these sizes).
    """
    index: dict[str, int] = {}
    seen = np.fromiter(
        (index.setdefault(str(v), len(index)) for v in values), dtype=np.intp, count=len(values)
    )
    labels = sorted(index)
    remap = np.empty(len(labels), dtype=np.intp)
    remap[[index[x] for x in labels]] = np.arange(len(labels))
    return labels, remap[seen]


def _first_seen_rank(gcode: npt.NDArray[np.intp], labels: Sequence[Any]) -> npt.NDArray[np.intp]:
    """Per row, the rank of its label among its group's labels in order of first appearance.

    Row ``i`` of group ``gcode[i]`` gets ``j`` when its label (as ``str``) is the ``j``-th
    distinct one that group shows, reading the rows in order (0-based): a random term's column
    within the group (:class:`_Blocks`).
    """
    names, lcode = _factorize(labels)
    key = gcode.astype(np.int64) * max(1, len(names)) + lcode
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # the distinct (group, label) by first row
    group = gcode[first[order]]
    by_group = np.argsort(group, kind="stable")  # within a group: still by first row
    starts = np.searchsorted(group[by_group], group[by_group], side="left")
    rank = np.empty(order.size, dtype=np.intp)
    rank[order[by_group]] = np.arange(order.size) - starts
    return np.asarray(rank[inverse.reshape(-1)], dtype=np.intp)


def _sum_groups(stack: Floats, axis: int = 1) -> Floats:
    """``stack`` summed over its groups' axis (``ledger plan``'s derivatives, per-group blocks)."""
    return np.asarray(np.sum(stack, axis=axis), dtype=np.float64)


class _Blocks:
    """Per-group sufficient statistics of ``V_j = R_j + Z_j·G·Z_jᵀ`` (no ``n_j × n_j`` matrix).

    ``Z_j`` holds one 0/1 column per cluster of every random term inside group ``j`` (the
    group itself, each group × arm cell, ...), padded with zero columns to the largest group's
    ``q``; ``G = diag(θ_term(column))``; ``R_j = diag(φ_class(row))``. Each residual class
    ``r`` keeps ``Z_jᵀD_rZ_j``, ``Z_jᵀD_rX_j``, ``Z_jᵀD_ry_j`` per group and ``XᵀD_rX``,
    ``XᵀD_ry``, ``yᵀD_ry`` overall (``D_r`` the rows of class ``r``), built once in O(n).
    Every evaluation then works on ``q × q`` and ``q × p`` blocks with Woodbury:
    ``V_j⁻¹ = W − W·Z·K·Zᵀ·W``, ``K = Λ(I + ΛZᵀWZΛ)⁻¹Λ``, ``Λ = G^½``, ``W = R⁻¹``, and
    ``log|V_j| = log|R_j| + log|I + ΛZᵀWZΛ|`` (a zero variance is allowed).
    """

    def __init__(
        self,
        y: Floats,
        exog: Floats,
        groups: Sequence[str],
        terms: Sequence[Sequence[str]],
        classes: Sequence[str],
    ) -> None:
        self.n, self.p = exog.shape
        self.var = float(np.var(y, ddof=1))
        # REML is invariant to y -> y - X·b: work on the least-squares residuals, so the
        # Woodbury differences (yᵀWy − ...) do not cancel; β̂ is shifted back by ``offset``
        self.offset = np.linalg.lstsq(exog, y, rcond=None)[0]
        y = y - exog @ self.offset
        self.class_labels, ccode = _factorize(classes)
        self.k = len(terms)
        glabels, gcode = _factorize(groups)
        n_groups = len(glabels)
        col = np.zeros((self.k, self.n), dtype=np.intp)
        width = np.zeros(n_groups, dtype=np.intp)
        spans: list[tuple[Any, Any]] = []  # each term's columns per group: [start, stop)
        for k, labels in enumerate(terms):
            start = width.copy()
            col[k] = start[gcode] + _first_seen_rank(gcode, labels)
            width = start + np.bincount(
                np.unique(col[k] * n_groups + gcode) % n_groups, minlength=n_groups
            ).astype(np.intp)
            spans.append((start, width.copy()))
        q = int(width.max()) if n_groups else 0
        self.q = q
        self.term_of_col = np.full((n_groups, q), -1, dtype=np.intp)
        at = np.arange(q)
        for k, (lo, hi) in enumerate(spans):
            self.term_of_col[(at >= lo[:, None]) & (at < hi[:, None])] = k
        self.masks = (
            np.stack([(self.term_of_col == k).astype(np.float64) for k in range(self.k)])
            if self.k
            else np.zeros((0, n_groups, q))
        )
        r = len(self.class_labels)
        self.zz = np.zeros((r, n_groups, q, q))
        self.zx = np.zeros((r, n_groups, q, self.p))
        self.zy = np.zeros((r, n_groups, q))
        self.xx = np.zeros((r, self.p, self.p))
        self.xy = np.zeros((r, self.p))
        self.yy = np.zeros(r)
        self.nr = np.zeros(r)
        # every (class, group, column) cell's sums in one np.bincount each, which adds its
        # weights in row order: each cell takes its rows of one term, so the same sums in the
        # same order as one bincount per class and term (and np.add.at before): the same bits
        if self.k:
            at = (ccode * n_groups + gcode)[None, :] * q + col  # (term, row): the cell
            pair = (at[:, None, :] * q + col[None, :, :]).reshape(-1)  # every term pair
            self.zz = (
                np.bincount(pair, minlength=r * n_groups * q * q)
                .reshape(r, n_groups, q, q)
                .astype(np.float64)
            )
            flat = at.reshape(-1)
            zx = np.bincount(
                (flat[None, :] * self.p + np.arange(self.p)[:, None]).reshape(-1),
                weights=np.tile(exog.T, (1, self.k)).reshape(-1),
                minlength=r * n_groups * q * self.p,
            )
            self.zx = np.asarray(zx, dtype=np.float64).reshape(r, n_groups, q, self.p)
            zy = np.bincount(flat, weights=np.tile(y, self.k), minlength=r * n_groups * q)
            self.zy = np.asarray(zy, dtype=np.float64).reshape(r, n_groups, q)
        for c in range(r):
            rows = np.flatnonzero(ccode == c)
            xr, yr = exog[rows], y[rows]
            self.xx[c] = xr.T @ xr
            self.xy[c] = xr.T @ yr
            self.yy[c] = float(yr @ yr)
            self.nr[c] = float(rows.size)
        self._eye = np.eye(q)
        self._rows = (exog, y, gcode, col, ccode)  # for the atoms (:meth:`_atoms`), on demand
        self._atom_memo: _AtomBlocks | None = None
        self._df_memo: dict[tuple[bytes, tuple[int, ...]], tuple[Floats, Floats, list[Floats]]] = {}
        # an evaluation keeps a few (groups, q, q) and (groups, q, p) blocks: between 16 and 64
        # points, within _MEMO_BYTES (the fit's repeats are a Hessian's 2m + 1 points apart)
        entry = 8 * 4 * max(1, n_groups * q * (q + self.p))
        self._memo_size = max(16, min(64, _MEMO_BYTES // entry))
        self._phi_memo: dict[bytes, tuple[Any, ...]] = {}
        self._parts_memo: dict[bytes, _Parts | None] = {}
        self._loglik_memo: dict[bytes, float] = {}
        self._score_memo: dict[bytes, Floats] = {}
        self._info_memo: dict[tuple[bytes, tuple[int, ...]], Floats] = {}
        self._derivatives_memo: dict[bytes, tuple[Floats, Floats, Floats]] = {}

    def _by_phi(self, phi: Floats) -> tuple[Any, ...]:
        """What :meth:`parts` needs of the residual variances alone, computed once per ``phi``.

        ``W``, ``ZᵀWZ``, ``ZᵀWX``, ``ZᵀWy``, ``XᵀWX``, ``XᵀWy``, ``yᵀWy`` and ``Σ n_r·log φ_r``:
        the same operations on the same values as every evaluation did before (a scan over the
        random-effect variances, or a difference step in one of them, keeps ``phi``), so a
        repeated ``phi`` gives the same bits.
        """
        key = phi.tobytes()
        got = self._phi_memo.get(key)
        if got is None:
            w = 1.0 / phi
            got = (
                w,
                np.einsum("r,rgab->gab", w, self.zz),
                np.einsum("r,rgap->gap", w, self.zx),
                np.einsum("r,rga->ga", w, self.zy),
                np.einsum("r,rpq->pq", w, self.xx),
                np.einsum("r,rp->p", w, self.xy),
                float(w @ self.yy),
                float(self.nr @ np.log(phi)),
            )
            _remember(self._phi_memo, key, got, self._memo_size)
        return got

    def parts(self, theta: Floats) -> _Parts | None:
        """``log|V|``, ``XᵀV⁻¹X``, ``XᵀV⁻¹y``, ``yᵀV⁻¹y`` and the blocks the derivatives use.

        Remembered per ``theta`` (its bytes): the fit asks for the same point several times
        (a line search's start, the convergence check after the polish, the covariance). The
        arrays returned are shared: callers must not change them.
        """
        key = theta.tobytes()
        if key in self._parts_memo:
            return self._parts_memo[key]
        got = self._parts(theta)
        _remember(self._parts_memo, key, got, self._memo_size)
        return got

    def _parts(self, theta: Floats) -> _Parts | None:
        re, phi = theta[: self.k], theta[self.k :]
        if np.any(re < 0) or np.any(phi <= 0) or not np.all(np.isfinite(theta)):
            return None
        w, s, zwx, zwy, wxx, wxy, wyy, logphi = self._by_phi(phi)
        lam = np.einsum("k,kga->ga", np.sqrt(re), self.masks)
        eye = self._eye
        inner = eye + lam[:, :, None] * s * lam[:, None, :]
        sign, logdet_inner = np.linalg.slogdet(inner)
        if np.any(sign <= 0):
            return None
        kmat = lam[:, :, None] * np.linalg.solve(inner, eye * lam[:, None, :])
        kzx = kmat @ zwx
        a = wxx - np.einsum("gap,gaq->pq", zwx, kzx)
        b = wxy - np.einsum("gap,ga->p", kzx, zwy)
        c = wyy - float(np.einsum("ga,gab,gb->", zwy, kmat, zwy))
        logdet = logphi + float(np.sum(logdet_inner))
        return logdet, a, b, c, (w, s, zwx, kmat, kzx)

    def loglik(self, theta: Floats) -> float:
        """The REML log-likelihood ``l_R(θ)`` (``−inf`` where it is undefined), remembered."""
        key = theta.tobytes()
        got = self._loglik_memo.get(key)
        if got is None:
            got = self._loglik(theta)
            _remember(self._loglik_memo, key, got, self._memo_size)
        return got

    def _loglik(self, theta: Floats) -> float:
        """``l_R`` on the atoms (:meth:`_atoms`), keeping its digits at any sample size.

        Per group ``V = LLᵀ`` on the atoms' indicators, ``S_X = L⁻¹X``, ``S_y = L⁻¹y``; the
        contrasts within the atoms add ``(n_r − atoms_r)·log φ_r`` and their sums of squares
        over ``φ_r``. No ``ZᵀWZ``-sized
        difference is taken, so ``l_R`` keeps the digits the Newton steps compare (the
        Woodbury form's rounding, ~1e-8 with thousands of trials a cell and an arm's residual
        variance near 0, hid gains of 1e-9 from the line search).
        """
        if not np.all(np.isfinite(theta)):
            return -math.inf
        if np.any(theta[: self.k] < 0) or np.any(theta[self.k :] <= 0):
            return -math.inf
        at = self._atom_blocks()
        phi = theta[self.k :]
        try:
            chol = np.linalg.cholesky(np.einsum("i,igab->gab", theta, at.d) + at.pad)
        except np.linalg.LinAlgError:
            return -math.inf
        sx = np.linalg.solve(chol, at.x)
        sy = np.linalg.solve(chol, at.y[:, :, None])[:, :, 0]
        a = np.einsum("gap,gaq->pq", sx, sx) + np.einsum("r,rpq->pq", 1 / phi, at.within_xx)
        b = np.einsum("gap,ga->p", sx, sy) + np.einsum("r,rp->p", 1 / phi, at.within_xy)
        c = float(np.sum(sy * sy) + at.within_yy @ (1 / phi))
        logdet = 2.0 * float(np.sum(np.log(np.diagonal(chol, axis1=1, axis2=2))))
        logdet += float(at.within_n @ np.log(phi))
        sign, logdet_a = np.linalg.slogdet(a)
        if sign <= 0:
            return -math.inf
        beta = np.linalg.solve(a, b)
        return float(
            -0.5
            * (
                logdet
                + float(logdet_a)
                + c
                - float(b @ beta)
                + (self.n - self.p) * math.log(2 * math.pi)
            )
        )

    def _derived(self, theta: Floats) -> tuple[Floats, Any]:
        """``C = (XᵀV⁻¹X)⁻¹``; per group ``A = K·ZᵀWX``, ``ZᵀV⁻¹X``, ``ZᵀV⁻¹Z``, ``I − K·S``."""
        got = self.parts(theta)
        assert got is not None
        _, a, _, _, (w, s, zwx, kmat, kzx) = got
        cmat = np.asarray(np.linalg.inv(a), dtype=np.float64)
        bz = zwx - s @ kzx  # ZᵀV⁻¹X
        qmat = s - s @ kmat @ s  # ZᵀV⁻¹Z
        tmat = np.eye(self.q) - kmat @ s  # V⁻¹Z = W·Z·T
        return cmat, (w, kmat, kzx, bz, qmat, tmat)

    def _b(self, i: int, w: Floats, kzx: Floats, bz: Floats) -> Floats:
        """``B_i = XᵀV⁻¹(∂V/∂θ_i)V⁻¹X`` summed over the groups."""
        if i < self.k:
            mb = self.masks[i][:, :, None] * bz
            return np.asarray(np.einsum("gap,gaq->pq", mb, mb))
        r = i - self.k
        return np.asarray(w[r] ** 2 * self._ydy(r, kzx))

    def _ydy(self, r: int, amat: Floats) -> Floats:
        """``YᵀD_rY`` summed over the groups, ``Y = X − Z·A`` (so ``V⁻¹X = W·Y``)."""
        zxa = np.einsum("gap,gaq->pq", self.zx[r], amat)
        return np.asarray(
            self.xx[r] - zxa - zxa.T + np.einsum("gap,gab,gbq->pq", amat, self.zz[r], amat)
        )

    def gls(self, theta: Floats) -> tuple[Floats, Floats]:
        """``C = (XᵀV⁻¹X)⁻¹`` and ``β̂`` at ``theta``, with no Woodbury cancellation.

        Per group ``I + ΛZᵀWZΛ = LLᵀ`` (Cholesky) and ``S_X = L⁻¹ΛZᵀWX``, ``S_y = L⁻¹ΛZᵀWy``:
        ``XᵀV⁻¹X = XᵀWX − Σ S_XᵀS_X``, ``XᵀV⁻¹y = XᵀWy − Σ S_XᵀS_y``. The subtracted Gram matrix
        loses only what the difference itself must (``ε·‖XᵀWX‖``), where ``XᵀWX − ZᵀWX·K·ZᵀWX``
        (:meth:`parts`, the likelihood's) also multiplies the rounding of ``K`` by the condition
        of ``I + ΛZᵀWZΛ``: with a residual class near 0 (an arm at ceiling) and thousands of
        trials a cell, that cost ``C`` 4e-6 of its value (``docs/statistics.md``, "Accuracy").
        """
        re, phi = theta[: self.k], theta[self.k :]
        _, s, zwx, zwy, wxx, wxy, _, _ = self._by_phi(phi)
        lam = np.einsum("k,kga->ga", np.sqrt(re), self.masks)
        chol = np.linalg.cholesky(self._eye + lam[:, :, None] * s * lam[:, None, :])
        sx = np.linalg.solve(chol, lam[:, :, None] * zwx)
        sy = np.linalg.solve(chol, (lam * zwy)[:, :, None])[:, :, 0]
        cov = np.linalg.inv(wxx - np.einsum("gap,gaq->pq", sx, sx))
        cov = (cov + cov.T) / 2
        return cov, cov @ (wxy - np.einsum("gap,ga->p", sx, sy)) + self.offset

    def _atoms(self) -> _AtomBlocks:
        """Each group's *atoms* (rows sharing the group, every term's cluster and the class).

        ``V`` acts on an atom's normalised indicator ``1_a/√m_a`` as a small dense matrix and
        on the contrasts within an atom as ``φ_class·I``. Padded to the largest group's number
        of atoms (a padded atom: 1 on ``V``'s diagonal, nothing else): :class:`_AtomBlocks`.
        """
        exog, y, gcode, col, ccode = self._rows
        keys = np.column_stack([gcode, col.T, ccode])
        uniq, inverse, size = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
        inverse = inverse.reshape(-1)
        sums = np.stack(
            [np.bincount(inverse, weights=exog[:, j], minlength=len(uniq)) for j in range(self.p)],
            axis=1,
        )
        means = sums / size[:, None]
        dev = exog - means[inverse]
        ymeans = np.bincount(inverse, weights=y, minlength=len(uniq)) / size
        ydev = y - ymeans[inverse]
        r = len(self.class_labels)
        aclass = uniq[:, -1]
        within_n = (np.bincount(ccode, minlength=r) - np.bincount(aclass, minlength=r)).astype(
            np.float64
        )
        within_xx = np.stack([dev[ccode == c].T @ dev[ccode == c] for c in range(r)])
        within_xy = np.stack([dev[ccode == c].T @ ydev[ccode == c] for c in range(r)])
        within_yy = np.array([float(ydev[ccode == c] @ ydev[ccode == c]) for c in range(r)])
        agroup = uniq[:, 0]
        n_groups = self.masks.shape[1]
        per_group = np.bincount(agroup, minlength=n_groups)
        width = int(per_group.max())
        pos = np.arange(len(uniq)) - (np.cumsum(per_group) - per_group)[agroup]
        root = np.zeros((n_groups, width))
        root[agroup, pos] = np.sqrt(size)
        pad = np.zeros((n_groups, width, width))
        real = np.zeros((n_groups, width), dtype=bool)
        real[agroup, pos] = True
        pad[:, np.arange(width), np.arange(width)] = ~real
        xt = np.zeros((n_groups, width, self.p))
        xt[agroup, pos] = root[agroup, pos][:, None] * means
        yt = np.zeros((n_groups, width))
        yt[agroup, pos] = root[agroup, pos] * ymeans
        outer = root[:, :, None] * root[:, None, :]
        blocks = []
        for k in range(self.k):
            cluster = np.full((n_groups, width), -1)
            cluster[agroup, pos] = uniq[:, 1 + k]
            same = (cluster[:, :, None] == cluster[:, None, :]) & real[:, :, None]
            blocks.append(np.where(same, outer, 0.0))
        for c in range(r):
            inclass = np.zeros((n_groups, width))
            inclass[agroup, pos] = aclass == c
            blocks.append(inclass[:, :, None] * np.eye(width)[None])
        return _AtomBlocks(np.stack(blocks), xt, yt, pad, within_n, within_xx, within_xy, within_yy)

    def satterthwaite_parts(
        self, theta: Floats, free: list[int]
    ) -> tuple[Floats, Floats, list[Floats]]:
        """``C``, the inverse expected information over ``free`` and ``∂C/∂θ_i = C·B_i·C``.

        From the atoms (:meth:`_atoms`): per group ``V`` on the atoms' indicators is inverted
        directly and ``U = V⁻¹X``; ``tr(V⁻¹V_iV⁻¹V_k)``, ``UᵀV_kV⁻¹V_iU`` and ``B_i = UᵀV_iU``
        summed over the groups, plus the contrasts within the atoms (``V = φ_r·I``: ``n_r/φ_r²``,
        ``XᵀD_rX/φ_r³`` and ``XᵀD_rX/φ_r²`` for a residual class, nothing for a random term).
        No ``ZᵀWZ``-sized difference is taken, so the df keep their digits at any sample size
        (:meth:`information` is the fit's, whose rounding grows with ``ZᵀWZ``). ``C`` is
        :meth:`gls`'s. Remembered per ``theta`` and ``free``.
        """
        key = (theta.tobytes(), tuple(free))
        got = self._df_memo.get(key)
        if got is not None:
            return got
        cmat = self.gls(theta)[0]
        at = self._atom_blocks()
        blocks, xt, pad, within_n, within_xx = at.d, at.x, at.pad, at.within_n, at.within_xx
        vinv = np.linalg.inv(np.einsum("i,igab->gab", theta, blocks) + pad)
        u = vinv @ xt
        d = blocks[free]
        du = d @ u[None]
        vd = vinv[None] @ d
        t1 = np.einsum("igab,kgba->ik", vd, vd)
        mid = np.einsum("kgap,gab,igbq->ikpq", du, vinv, du)
        b = np.einsum("gap,igaq->ipq", u, du)
        for ii, i in enumerate(free):
            if i >= self.k:
                phi = theta[i]
                t1[ii, ii] += within_n[i - self.k] / phi**2
                mid[ii, ii] += within_xx[i - self.k] / phi**3
                b[ii] += within_xx[i - self.k] / phi**2
        m = len(free)
        info = np.zeros((m, m))
        cb = [cmat @ b[ii] for ii in range(m)]
        for ii in range(m):
            for kk in range(ii + 1):
                info[ii, kk] = info[kk, ii] = 0.5 * (
                    t1[ii, kk]
                    - 2 * float(np.trace(cmat @ mid[ii, kk]))
                    + float(np.sum(cb[ii] * cb[kk].T))
                )
        try:
            info_cov = np.asarray(np.linalg.inv(info)) if m else np.zeros((0, 0))
        except np.linalg.LinAlgError:
            info_cov = np.full((m, m), math.nan)
        got = (cmat, info_cov, [c @ cmat for c in cb])
        _remember(self._df_memo, key, got, self._memo_size)
        return got

    def cov_gradient(self, theta: Floats, free: list[int]) -> list[Floats]:
        """``∂(XᵀV⁻¹X)⁻¹/∂θ_i = C·(XᵀV⁻¹·∂V/∂θ_i·V⁻¹X)·C`` for each free parameter."""
        return self.satterthwaite_parts(theta, free)[2]

    def score(self, theta: Floats) -> Floats:
        """The exact REML score ``∂l_R/∂θ_i = −½·tr(P·V_i) + ½·eᵀV⁻¹V_iV⁻¹e`` for every parameter.

        ``e = y − Xβ̂`` and ``tr(P·V_i) = tr(V⁻¹V_i) − tr(C·B_i)``, computed on the groups'
        atoms (:meth:`_score`). Analytic, so its rounding does not grow as a finite difference
        of ``l_R`` does with ``n``. Remembered per ``theta`` (the convergence check repeats the
        polish's last points).
        """
        key = theta.tobytes()
        got = self._score_memo.get(key)
        if got is None:
            got = self._score(theta)
            _remember(self._score_memo, key, got, self._memo_size)
        return got.copy()

    def _atom_blocks(self) -> _AtomBlocks:
        """:meth:`_atoms`, built once."""
        if self._atom_memo is None:
            self._atom_memo = self._atoms()
        return self._atom_memo

    def _score(self, theta: Floats) -> Floats:
        """The score on the atoms (:meth:`_atoms`), ``β̂`` and ``C`` from :meth:`gls`.

        ``tr(V⁻¹V_i)``, ``B_i`` and ``eᵀV⁻¹V_iV⁻¹e`` per group on the atoms' indicators (``V``
        inverted directly), plus, for a residual class ``r``, the contrasts within its atoms:
        ``(n_r − atoms_r)/φ_r``, ``XᵀD_rX/φ_r²`` and ``Σ e²/φ_r²`` from the within-atom sums of
        squares. No ``ZᵀWZ``-sized difference is taken, so the score keeps its digits where a
        cell holds thousands of trials and an arm's residual variance is near 0 (the Woodbury
        form's rounding there, ~2·10⁻⁴ in ``log θ``, kept the fit from passing its own check).
        """
        bad = np.any(theta[: self.k] < 0) or np.any(theta[self.k :] <= 0)
        if bad or not np.all(np.isfinite(theta)):
            raise ValueError("the REML likelihood is undefined at these variances")
        cmat, beta = self.gls(theta)
        beta = beta - self.offset
        at = self._atom_blocks()
        vinv = np.linalg.inv(np.einsum("i,igab->gab", theta, at.d) + at.pad)
        u = vinv @ at.x
        ve = np.einsum("gab,gb->ga", vinv, at.y - at.x @ beta)
        trace = np.einsum("gab,igba->i", vinv, at.d)
        b = np.einsum("gap,igab,gbq->ipq", u, at.d, u)
        quad = np.einsum("ga,igab,gb->i", ve, at.d, ve)
        for r in range(len(self.class_labels)):
            i, phi = self.k + r, theta[self.k + r]
            trace[i] += at.within_n[r] / phi
            b[i] += at.within_xx[r] / phi**2
            ss = at.within_yy[r] - 2 * beta @ at.within_xy[r] + beta @ at.within_xx[r] @ beta
            quad[i] += ss / phi**2
        return np.asarray(-0.5 * (trace - np.einsum("pq,iqp->i", cmat, b)) + 0.5 * quad)

    def information(self, theta: Floats, free: list[int]) -> Floats:
        """Expected REML information ``½·tr(P·∂V/∂θ_i·P·∂V/∂θ_k)`` over the free parameters.

        ``P = V⁻¹ − U·C·Uᵀ`` (``U = V⁻¹X``): ``tr(V⁻¹V_iV⁻¹V_k) − 2·tr(C·UᵀV_kV⁻¹V_iU) +
        tr(C·B_i·C·B_k)``, each from the per-group blocks (``docs/statistics.md``).
        Remembered per ``theta`` and ``free``.
        """
        key = (theta.tobytes(), tuple(free))
        got = self._info_memo.get(key)
        if got is None:
            got = self._information(theta, free)
            _remember(self._info_memo, key, got, self._memo_size)
        return got.copy()

    def _information(self, theta: Floats, free: list[int]) -> Floats:
        cmat, (w, kmat, amat, bz, qmat, tmat) = self._derived(theta)
        m = len(free)
        info = np.zeros((m, m))
        bs = [self._b(i, w, amat, bz) for i in free]
        # ZᵀD_rY per class (g, q, p): Z_kᵀV⁻¹D_rU = w_r²·T[:, k]ᵀ·ZᵀD_rY
        zdy = [self.zx[r] - self.zz[r] @ amat for r in range(len(self.class_labels))]
        for ii, i in enumerate(free):
            for kk, k in enumerate(free):
                if kk > ii:
                    break
                if i < self.k and k < self.k:
                    mi, mk = self.masks[i], self.masks[k]
                    t1 = float(np.einsum("ga,gab,gb->", mk, qmat * qmat, mi))
                    mid = np.einsum(
                        "gap,gab,gbq->pq", mk[:, :, None] * bz, qmat, mi[:, :, None] * bz
                    )
                elif i < self.k or k < self.k:  # one residual class r, one term t
                    r, t = (k - self.k, i) if i < self.k else (i - self.k, k)
                    mt = self.masks[t]
                    tst = np.einsum("gba,gbc,gca->ga", tmat, self.zz[r], tmat)
                    t1 = float(w[r] ** 2 * np.sum(mt * tst))
                    # UᵀD_rV⁻¹Z_tZ_tᵀU = w_r²·(ZᵀD_rY)ᵀ·T·diag(m_t)·(ZᵀV⁻¹X)
                    mid = w[r] ** 2 * np.einsum(
                        "gap,gab,gbq->pq", zdy[r], tmat, mt[:, :, None] * bz
                    )
                    if k < self.k:  # V_k the term: the transpose
                        mid = mid.T
                else:
                    r, s_ = i - self.k, k - self.k
                    zr, zs = self.zz[r], self.zz[s_]
                    t1 = float(
                        w[r] ** 2 * w[s_] ** 2 * np.einsum("gab,gbc,gcd,gda->", kmat, zr, kmat, zs)
                    )
                    mid = (
                        -(w[r] ** 2)
                        * w[s_] ** 2
                        * np.einsum("gap,gab,gbq->pq", zdy[s_], kmat, zdy[r])
                    )
                    if r == s_:
                        t1 += float(
                            self.nr[r] * w[r] ** 2
                            - 2 * w[r] ** 3 * np.einsum("gab,gba->", kmat, zr)
                        )
                        mid = mid + w[r] ** 3 * self._ydy(r, amat)
                val = 0.5 * (
                    t1
                    - 2 * float(np.trace(cmat @ mid))
                    + float(np.trace(cmat @ bs[ii] @ cmat @ bs[kk]))
                )
                info[ii, kk] = info[kk, ii] = val
        return info

    def logliks_on_grid(self, random: Floats, phi: Floats) -> Floats:
        """``l_R`` at each row of ``random`` (random-effect variances) with residual ``phi``.

        ``ledger plan``'s scan (:func:`_plan_scan`): the operations of :meth:`parts` and
        :meth:`loglik` with the points as a leading axis (one numpy call per step for all of
        them, so not bit for bit :meth:`loglik`'s); ``−inf`` where ``l_R`` is undefined.
        """
        _, s, zwx, zwy, wxx, wxy, wyy, logphi = self._by_phi(phi)
        lam = np.einsum("nk,kga->nga", np.sqrt(random), self.masks)
        inner = self._eye + lam[..., :, None] * s * lam[..., None, :]
        sign, logdet_inner = np.linalg.slogdet(inner)
        kmat = lam[..., :, None] * np.linalg.solve(inner, self._eye * lam[..., None, :])
        kzx = kmat @ zwx
        a = wxx - np.einsum("gap,ngaq->npq", zwx, kzx)
        b = wxy - np.einsum("ngap,ga->np", kzx, zwy)
        c = wyy - np.einsum("ga,ngab,gb->n", zwy, kmat, zwy)
        sign_a, logdet_a = np.linalg.slogdet(a)
        beta = np.linalg.solve(a, b[..., None])[..., 0]
        out = -0.5 * (
            logphi
            + np.sum(logdet_inner, axis=1)
            + logdet_a
            + c
            - np.sum(b * beta, axis=1)
            + (self.n - self.p) * math.log(2 * math.pi)
        )
        ok = np.all(sign > 0, axis=1) & (sign_a > 0) & np.isfinite(out)
        return np.where(ok, out, -math.inf)

    def derivatives(self, theta: Floats) -> tuple[Floats, Floats, Floats]:
        """Score, expected information and observed Hessian of ``l_R`` in ``θ``, every parameter.

        ``ledger plan``'s fits only (``docs/planning.md`` §3); ``ledger analyze`` keeps
        :meth:`score`, :meth:`information` and :func:`log_score_hessian`. One pass, in closed
        form: with ``V`` linear in ``θ`` (``V_i = ∂V/∂θ_i``, ``P = V⁻¹ − V⁻¹XCXᵀV⁻¹``,
        ``e* = Py``), ``∂l_R/∂θ_i = −½·tr(P·V_i) + ½·e*ᵀV_ie*``, the expected information
        ``I_ij = ½·tr(P·V_i·P·V_j)`` and the observed Hessian
        ``∂²l_R/∂θ_i∂θ_j = I_ij − (V_ie*)ᵀP(V_je*)``. Every piece is a block of
        ``ŨᵀV_iŨ`` or ``ŨᵀV_iV⁻¹V_jŨ`` with ``Ũ = V⁻¹[X | e]``, ``e = y − Xβ̂`` (the design
        with the residual as one more column), from the per-group blocks as in
        :meth:`information`. Remembered per ``theta``; the arrays returned are copies.
        """
        key = theta.tobytes()
        got = self._derivatives_memo.get(key)
        if got is None:
            got = self._derivatives(theta)
            _remember(self._derivatives_memo, key, got, self._memo_size)
        return got[0].copy(), got[1].copy(), got[2].copy()

    def _derivatives(self, theta: Floats) -> tuple[Floats, Floats, Floats]:
        got = self.parts(theta)
        if got is None:
            raise ValueError("the REML likelihood is undefined at these variances")
        _, a, b, _, (w, s, _, kmat, _) = got
        p, k = self.p, self.k
        cmat = np.asarray(np.linalg.inv(a), dtype=np.float64)
        beta = cmat @ b
        # the design with the residual e = y − Xβ̂ as column p: its per-class blocks
        zxt = np.concatenate([self.zx, (self.zy - self.zx @ beta)[..., None]], axis=-1)
        xde = self.xy - self.xx @ beta
        ede = self.yy - 2 * (self.xy @ beta) + np.einsum("p,rpq,q->r", beta, self.xx, beta)
        r = self.yy.size
        xxt = np.zeros((r, p + 1, p + 1))
        xxt[:, :p, :p], xxt[:, :p, p], xxt[:, p, :p], xxt[:, p, p] = self.xx, xde, xde, ede
        w2 = w * w
        zwxt = np.einsum("r,rgap->gap", w, zxt)  # ZᵀWX̃
        at = kmat @ zwxt  # Ã = K·ZᵀWX̃ (V⁻¹X̃ = W·(X̃ − Z·Ã))
        bzt = zwxt - s @ at  # ZᵀV⁻¹X̃
        qmat = s - s @ kmat @ s  # ZᵀV⁻¹Z
        tmat = self._eye - kmat @ s  # V⁻¹Z = W·Z·T
        zdy = zxt - self.zz @ at  # ZᵀD_rỸ, Ỹ = X̃ − Z·Ã
        # the contractions over groups as stacked q × q and q × (p + 1) products summed over
        # the groups (np.einsum's several-operand loops took most of the time at these sizes)
        at_t = at.transpose(0, 2, 1)
        zxa = _sum_groups(zxt.transpose(0, 1, 3, 2) @ at)
        ydy = xxt - zxa - zxa.transpose(0, 2, 1) + _sum_groups(at_t @ self.zz @ at)
        mb = self.masks[..., None] * bzt  # (k, g, q, p + 1): M_k·ZᵀŨ
        # H_i = ŨᵀV_iŨ
        hmat = np.concatenate(
            [np.einsum("kgap,kgaq->kpq", mb, mb), w2[:, None, None] * ydy], axis=0
        )
        # G_ij = ŨᵀV_iV⁻¹V_jŨ
        m = k + r
        gmat = np.zeros((m, m, p + 1, p + 1))
        mb_t = mb.transpose(0, 1, 3, 2)
        gmat[:k, :k] = _sum_groups(mb_t[:, None] @ (qmat @ mb)[None], axis=2)
        tmb = tmat @ mb
        zdy_t = zdy.transpose(0, 1, 3, 2)
        g_rt = w2[:, None, None, None] * _sum_groups(zdy_t[:, None] @ tmb[None], axis=2)
        gmat[k:, :k] = g_rt
        gmat[:k, k:] = g_rt.transpose(1, 0, 3, 2)
        kzdy = kmat @ zdy
        g_rs = -np.outer(w2, w2)[:, :, None, None] * _sum_groups(
            zdy_t[:, None] @ kzdy[None], axis=2
        )
        g_rs[np.arange(r), np.arange(r)] += (w2 * w)[:, None, None] * ydy
        gmat[k:, k:] = g_rs
        # tr(V⁻¹V_iV⁻¹V_j) and tr(V⁻¹V_i)
        tau = np.zeros((m, m))
        tau[:k, :k] = np.einsum("kga,gab,lgb->kl", self.masks, qmat * qmat, self.masks)
        tmat_t = tmat.transpose(0, 2, 1)
        tst = np.sum((tmat_t @ self.zz) * tmat_t, axis=-1)  # diag(TᵀZᵀD_rZT) per group
        t_rt = w2[:, None] * np.einsum("tga,rga->rt", self.masks, tst)
        tau[k:, :k], tau[:k, k:] = t_rt, t_rt.T
        kz = kmat @ self.zz
        tr_kz = np.einsum("rgaa->r", kz)
        tau[k:, k:] = np.outer(w2, w2) * np.einsum("rgac,sgca->rs", kz, kz)
        tau[k:, k:] += np.diag(self.nr * w2 - 2 * w2 * w * tr_kz)
        trace_v = np.concatenate(
            [np.einsum("kga,gaa->k", self.masks, qmat), w * self.nr - w2 * tr_kz]
        )
        bmat, u, quad = hmat[:, :p, :p], hmat[:, :p, p], hmat[:, p, p]
        cb = cmat @ bmat
        score = -0.5 * (trace_v - np.einsum("ipp->i", cb)) + 0.5 * quad
        info = 0.5 * (
            tau
            - 2 * np.einsum("pq,ijqp->ij", cmat, gmat[:, :, :p, :p])
            + np.einsum("ipq,jqp->ij", cb, cb)
        )
        info = (info + info.T) / 2
        hess = info - (gmat[:, :, p, p] - u @ cmat @ u.T)
        return score, info, (hess + hess.T) / 2


def design_matrix(
    arms: Sequence[str], others: Sequence[str], models: Sequence[str], model_reference: str | None
) -> Floats:
    """The registered model's treatment-coded design: intercept, ``arm[T.<o>]`` per other arm.

    With several models (``model_reference`` set) then ``model[T.<m>]`` for every other model
    level sorted as strings, as the pooled ``model.lmm`` codes them (``docs/analysis.md`` §4).
    """
    arm = np.asarray([str(a) for a in arms])
    columns = [np.ones(arm.size)] + [(arm == o).astype(np.float64) for o in others]
    if model_reference is not None:
        mv = np.asarray([str(m) for m in models])
        columns += [
            (mv == level).astype(np.float64)
            for level in sorted(set(mv.tolist()))
            if level != model_reference
        ]
    return np.column_stack(columns)


def group_differences(
    groups: Sequence[str], models: Sequence[str], arms: Sequence[str], y: Floats, a: str, b: str
) -> list[float]:
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


def cell_residuals(
    y: Floats, exog: Floats, cells: Sequence[str], classes: Sequence[str]
) -> dict[str, float]:
    """Per residual class, the sum of squares left after the fixed effects and the cells.

    Least squares of ``y`` on ``X`` and one indicator per probe × arm cell, by
    Frisch–Waugh (O(n)): centre ``y`` and ``X`` within each cell, regress. A class whose sum
    is zero has no variation for its residual variance (the REML likelihood then grows
    without bound as that variance goes to 0).
    """
    codes = np.unique(np.asarray([str(c) for c in cells]), return_inverse=True)[1].reshape(-1)
    size = np.bincount(codes).astype(np.float64)
    both = np.column_stack([exog, y])
    sums = np.zeros((size.size, both.shape[1]))
    np.add.at(sums, codes, both)
    within = both - (sums / size[:, None])[codes]
    coef = np.linalg.lstsq(within[:, :-1], within[:, -1], rcond=None)[0]
    resid = within[:, -1] - within[:, :-1] @ coef
    carr = np.asarray([str(c) for c in classes])
    return {c: float(np.sum(resid[carr == c] ** 2)) for c in sorted(set(carr.tolist()))}


def moment_starts(
    y: Floats,
    exog: Floats,
    groups: Sequence[str],
    cells: Sequence[str],
    classes: Sequence[str],
    left: dict[str, float] | None = None,
) -> Floats:
    """Method-of-moments variances of a probe-by-arm model: ``ledger plan``'s REML starts.

    ``[group, group_by_arm, residual per class]`` (``docs/planning.md`` §3), from the
    least-squares residuals ``e`` of ``y`` on ``exog``: a class's residual variance ``φ_r`` is
    its sum of squares within the cells (``left``, else :func:`cell_residuals`) over ``n_r``
    less its cells; with ``ē_c`` the cells' mean residuals and ``ē_g`` their mean per group,
    ``group_by_arm`` is the sum of squares of ``ē_c − ē_g`` over ``cells − groups − (p − 1)``
    degrees of freedom less the mean ``φ/n_c`` of the cells, and ``group`` the variance of the
    ``ē_g`` over groups less a ``1/(cells per group)`` share of both. A variance below
    ``10⁻⁴·var(y)`` is raised to it (the start is only where the Newton steps begin; the fit
    keeps the maximum they reach only when it passes the check).
    """
    v = float(np.var(y, ddof=1)) if y.size > 1 else 1.0
    v = v if v > 0 else 1.0
    floor = 1e-4 * v
    resid = y - exog @ np.linalg.lstsq(exog, y, rcond=None)[0]
    cell_labels, cinv = np.unique(np.asarray([str(c) for c in cells]), return_inverse=True)
    cinv = cinv.reshape(-1)
    garr = np.asarray([str(g) for g in groups])
    karr = np.asarray([str(c) for c in classes])
    labels = sorted(set(karr.tolist()))
    left = left if left is not None else cell_residuals(y, exog, cells, classes)
    size = np.bincount(cinv).astype(np.float64)
    first = np.zeros(cell_labels.size, dtype=np.intp)
    first[cinv[::-1]] = np.arange(y.size)[::-1]  # each cell's first row
    cell_class = karr[first]
    phi = []
    for c in labels:
        rows = int(np.sum(karr == c))
        df = rows - int(np.sum(cell_class == c))
        phi.append(max(left[c] / df if df > 0 else v, floor))
    phi_of = dict(zip(labels, phi, strict=True))
    noise = float(np.mean([phi_of[c] / n for c, n in zip(cell_class, size, strict=True)]))
    mean_e = np.bincount(cinv, weights=resid) / size
    g_labels, g_of_cell = np.unique(garr[first], return_inverse=True)
    g_of_cell = g_of_cell.reshape(-1)
    per_group = np.bincount(g_of_cell).astype(np.float64)
    group_mean = np.bincount(g_of_cell, weights=mean_e) / per_group
    within_df = float(np.sum(per_group - 1)) - (exog.shape[1] - 1)
    within = float(np.sum((mean_e - group_mean[g_of_cell]) ** 2)) / max(within_df, 1.0)
    cell_var = max(within - noise, floor)
    between = float(np.var(group_mean, ddof=1)) if g_labels.size > 1 else 0.0
    group_var = max(between - (cell_var + noise) / float(np.mean(per_group)), floor)
    return np.asarray([group_var, cell_var, *phi], dtype=np.float64)


def not_fittable(arms: Sequence[str], groups: Sequence[str], per_arm: bool) -> str | None:
    """Why a probe-by-arm model cannot be fitted on these trials, or ``None``.

    It needs at least 3 probes, every probe with trials in at least two arms, some probe ×
    arm cell with two trials or more; with a residual variance per arm, every arm needs a
    within-cell variance above zero (checked by the caller, which has the outcome).
    """
    probes = sorted(set(groups))
    if len(probes) < 3:
        return f"the probe-by-arm model needs at least 3 probes; the trials have {len(probes)}"
    arms_of: dict[str, set[str]] = {}
    cells: dict[tuple[str, str], int] = {}
    for a, g in zip(arms, groups, strict=True):
        arms_of.setdefault(g, set()).add(a)
        cells[(g, a)] = cells.get((g, a), 0) + 1
    for g in probes:
        if len(arms_of[g]) < 2:
            only = next(iter(arms_of[g]))
            return (
                f"probe {g!r} has trials in one arm only ({only}): its probe and "
                "probe-by-arm effects cannot be separated"
            )
    if max(cells.values()) < 2:
        return (
            "no probe × arm cell has two trials: the probe-by-arm and residual variances "
            "cannot be separated"
        )
    del per_arm
    return None


def fit_reml(
    y: Floats,
    exog: Floats,
    groups: Sequence[str],
    terms: Sequence[Sequence[str]],
    classes: Sequence[str],
    names: list[str],
    *,
    label: str = "the REML model",
    warm: Sequence[float] | Floats | None = None,
    exact: bool = False,
) -> RemlFit:
    """Maximise the REML likelihood: three starts, L-BFGS-B, then Newton steps to the maximum.

    Each start's L-BFGS-B answer is polished by :func:`polish` (Newton steps in log θ on the
    exact score) and the most likely is kept. The likelihood can have several maxima, so the
    starts of :func:`scan_starts` are climbed the same way and the boundary is tried
    (:func:`_boundary_candidate`); either replaces the three starts' best only when it is more
    likely by more than :data:`DECREMENT_TOL`. :func:`check_maximum` then refuses the answer
    (:class:`RemlConvergenceError`, naming ``label`` and the Newton decrement) unless it is the
    REML maximum to :data:`DECREMENT_TOL`.

    ``warm`` (``ledger plan`` only, ``docs/planning.md`` §3): Newton steps from these
    variances first (each at least ``10⁻⁴·var(y)``); when they reach a point that passes
    :func:`check_maximum`, it is the answer and the three starts are skipped. The analysis
    never passes it. ``exact`` (``ledger plan`` only): every Newton step and the convergence
    check use the observed Hessian in closed form (:meth:`_Blocks.derivatives`) instead of the
    central difference of the score (the same maximum, reached by other steps: the last
    digits differ).

    The fit runs with one BLAS thread (:func:`one_blas_thread`): its matrices are a few
    rows wide, and a second thread only spins (L-BFGS-B's tripled its CPU time). The
    archive is built with one thread (``scripts/make_archive.py``), so nothing recorded
    changes.
    """
    with one_blas_thread():
        return _fit_reml(y, exog, groups, terms, classes, names, label, warm, exact)


_CONTROLLER: list[ThreadpoolController] = []


def one_blas_thread() -> AbstractContextManager[Any]:
    """A context in which every loaded BLAS (numpy's, scipy's) runs on one thread."""
    if not _CONTROLLER:
        _CONTROLLER.append(ThreadpoolController())
    return cast(AbstractContextManager[Any], _CONTROLLER[0].limit(limits=1, user_api="blas"))


def _fit_reml(
    y: Floats,
    exog: Floats,
    groups: Sequence[str],
    terms: Sequence[Sequence[str]],
    classes: Sequence[str],
    names: list[str],
    label: str,
    warm: Sequence[float] | Floats | None,
    exact: bool = False,
) -> RemlFit:
    model = _Blocks(y, exog, groups, terms, classes)
    k, r = model.k, len(model.class_labels)
    v = model.var if model.var > 0 else 1.0
    best_theta: Floats | None = None
    best = -math.inf
    theta0: Floats | None = None
    if warm is not None:
        theta0 = polish(
            model, np.maximum(np.asarray(warm, dtype=np.float64), 1e-4 * v), exact=exact
        )
        if exact:
            theta0 = _snap_to_boundary(model, theta0)
        try:
            check_maximum(model, theta0, names, label, exact=exact)
        except RemlConvergenceError:
            pass
        else:
            best, best_theta = model.loglik(theta0), theta0
        if exact and best_theta is not None:
            # another maximum elsewhere on the scan's grid replaces it only when more likely
            for start in _plan_scan(model, best_theta):
                cand = _snap_to_boundary(model, polish(model, start, exact=True))
                ll = model.loglik(cand)
                if not (math.isfinite(ll) and ll > best + DECREMENT_TOL):
                    continue
                try:
                    check_maximum(model, cand, names, label, exact=True)
                except RemlConvergenceError:
                    continue
                best, best_theta = ll, cand
                theta0 = cand
    searched = best_theta is None
    for share in (0.1, 0.5, 0.9) if searched else ():
        start = np.concatenate([np.full(k, share * v / max(k, 1)), np.full(r, (1 - share) * v)])
        theta = _climb(model, start, exact)
        ll = model.loglik(theta)
        if ll > best:
            best, best_theta = ll, theta
    if searched:
        # the likelihood can have several maxima (docs/statistics.md, "several maxima"): the
        # scan's starts and the boundary replace the shares' best only by a real gain
        for start in scan_starts(model):
            theta = _climb(model, start, exact)
            ll = model.loglik(theta)
            if math.isfinite(ll) and ll > best + DECREMENT_TOL:
                best, best_theta = ll, theta
        if best_theta is not None:
            better = _boundary_candidate(model, best_theta, best, exact)
            if better is not None:
                best_theta, best = better
    if best_theta is None or not math.isfinite(best):
        raise ValueError("the REML likelihood has no finite maximum")
    if warm is None or best_theta is not theta0:  # a kept warm start was checked above
        check_maximum(model, best_theta, names, label, exact=exact)
    cov, beta = model.gls(best_theta)
    free = _free(model, best_theta)
    info_cov = model.satterthwaite_parts(best_theta, free)[1]
    return RemlFit(names, best_theta, best, beta, cov, free, info_cov, model)


SCAN_EXPONENTS = tuple(0.5 * j for j in range(13))
"""The scan's grid (:func:`scan_starts`): each random-effect variance at ``var(y)·10^(−e)``."""
SCAN_STARTS = 3
"""At most this many of the scan's local maxima are climbed, the most likely first."""


def _climb(model: _Blocks, start: Floats, exact: bool = False) -> Floats:
    """L-BFGS-B in ``s`` (``θ = s²``) from ``start``, then :func:`polish`."""

    def neg(s: Floats) -> float:
        ll = model.loglik(s * s)
        return -ll if math.isfinite(ll) else 1e300

    res = optimize.minimize(
        neg,
        np.sqrt(start),
        method="L-BFGS-B",
        options={"maxiter": 500, "ftol": 1e-10, "gtol": 1e-7},
    )
    return polish(model, np.asarray(res.x) ** 2, exact=exact)


def _residuals_alone(model: _Blocks) -> Floats:
    """The residual variances maximising ``l_R`` with every random-effect variance at 0.

    L-BFGS-B in ``s`` (``φ = s²``) from ``var(y)`` for every class; the model is then a
    weighted least squares, whose likelihood is well behaved.
    """
    v = model.var if model.var > 0 else 1.0
    zeros = np.zeros(model.k)

    def neg(s: Floats) -> float:
        ll = model.loglik(np.concatenate([zeros, s * s]))
        return -ll if math.isfinite(ll) else 1e300

    res = optimize.minimize(
        neg,
        np.full(len(model.class_labels), math.sqrt(v)),
        method="L-BFGS-B",
        options={"maxiter": 500, "ftol": 1e-12, "gtol": 1e-9},
    )
    return np.asarray(res.x, dtype=np.float64) ** 2


def scan_starts(model: _Blocks) -> list[Floats]:
    """Starts in every basin of the random-effect variances (``docs/statistics.md``).

    With residual classes of very different sizes (an arm at ceiling beside two that are not)
    a random-effect variance can match the small class's scale or the large ones', and the
    three shares of ``var(y)`` all start in the second basin. So the residual variances are
    set to their maximum with the random effects at 0 (:func:`_residuals_alone`), ``l_R`` is
    evaluated on the grid ``θ_k = var(y)·10^(−e)``, ``e`` in :data:`SCAN_EXPONENTS`, for every
    combination of the terms, and every grid point at least as likely as each of its
    neighbours (the points one step away in any terms, diagonals included) is a start, at most
    :data:`SCAN_STARTS` of them, the most likely first (ties: grid order). No random term: none.
    """
    if model.k == 0:
        return []
    v = model.var if model.var > 0 else 1.0
    phi = _residuals_alone(model)
    levels = v * 10.0 ** -np.asarray(SCAN_EXPONENTS)
    shape = (levels.size,) * model.k
    values = np.full(shape, -math.inf)
    for idx in np.ndindex(*shape):
        values[idx] = model.loglik(np.concatenate([levels[list(idx)], phi]))
    peaks: list[tuple[float, tuple[int, ...]]] = []
    for idx in np.ndindex(*shape):
        here = float(values[idx])
        if not math.isfinite(here):
            continue
        around = tuple(slice(max(0, i - 1), min(levels.size, i + 2)) for i in idx)
        if here >= float(np.max(values[around])):
            peaks.append((here, idx))
    peaks.sort(key=lambda x: -x[0])  # stable: ties stay in grid order
    return [np.concatenate([levels[list(idx)], phi]) for _, idx in peaks[:SCAN_STARTS]]


def _boundary_candidate(
    model: _Blocks, theta: Floats, best: float, exact: bool = False
) -> tuple[Floats, float] | None:
    """A more likely point with random-effect variances at exactly 0, or ``None``.

    :func:`polish` approaches a maximum on the boundary without reaching it, and an interior
    local maximum can sit beside a more likely one on the boundary. As the verifier's own
    optimum does (``docs/statistics.md``), each random-effect variance still above the
    boundary, and then all of them at once, is set to exactly 0 and the point polished again;
    the most likely of these is returned when it beats ``best`` by more than
    :data:`DECREMENT_TOL` (a smaller gain is the same maximum, reached twice).
    """
    above = [i for i in _free(model, theta) if i < model.k]
    subsets = [[i] for i in above] + ([above] if len(above) > 1 else [])
    found: tuple[Floats, float] | None = None
    for subset in subsets:
        start = theta.copy()
        start[subset] = 0.0
        cand = polish(model, start, exact=exact)
        ll = model.loglik(cand)
        if math.isfinite(ll) and ll > (best if found is None else found[1]) + DECREMENT_TOL:
            found = (cand, ll)
    return found


PLAN_SCAN_EXPONENTS = tuple(float(j) for j in range(7))
"""``ledger plan``'s scan grid (:func:`_plan_scan`): each random-effect variance at
``var(y)·10^(−e)``, a decade apart (the analysis's :data:`SCAN_EXPONENTS` are half a decade)."""


def _plan_scan(model: _Blocks, theta: Floats) -> list[Floats]:
    """``ledger plan``'s look for another maximum than ``theta``'s (``docs/planning.md`` §3).

    A grid like :func:`scan_starts`'s (each random-effect variance at ``var(y)·10^(−e)``,
    ``e`` in :data:`PLAN_SCAN_EXPONENTS`) with the residual variances at ``theta``'s, in one
    batch (:meth:`_Blocks.logliks_on_grid`); its local maxima (at least as likely as every
    neighbour, diagonals included), at most :data:`SCAN_STARTS`, the most likely first, less
    those within one grid step of ``theta`` in every variance (``theta``'s own basin), are the
    starts returned: each ``[grid variances, theta's residual variances]``.
    """
    if model.k == 0:
        return []
    v = model.var if model.var > 0 else 1.0
    levels = v * 10.0 ** -np.asarray(PLAN_SCAN_EXPONENTS)
    shape = (levels.size,) * model.k
    index = np.indices(shape).reshape(model.k, -1).T
    values = model.logliks_on_grid(levels[index], theta[model.k :]).reshape(shape)
    with np.errstate(divide="ignore"):
        here = -np.log10(np.maximum(theta[: model.k], 0.0) / v) / PLAN_SCAN_EXPONENTS[1]
    home = np.clip(np.rint(here), 0, levels.size - 1)
    padded = np.pad(values, 1, constant_values=-math.inf)
    around = np.full(shape, -math.inf)
    for shift in np.ndindex(*(3,) * model.k):  # the neighbourhood's maximum, diagonals too
        around = np.maximum(around, padded[tuple(slice(d, d + levels.size) for d in shift)])
    peak = np.isfinite(values) & (values >= around)
    peak &= ~np.all(np.abs(np.indices(shape) - home.reshape((-1,) + (1,) * model.k)) <= 1, axis=0)
    flat = np.flatnonzero(peak.reshape(-1))
    order = flat[np.argsort(-values.reshape(-1)[flat], kind="stable")]  # ties: grid order
    return [np.concatenate([levels[index[i]], theta[model.k :]]) for i in order[:SCAN_STARTS]]


def _snap_to_boundary(model: _Blocks, theta: Floats) -> Floats:
    """``theta`` with its random-effect variances on the boundary set to exactly 0, if kept.

    ``ledger plan``'s fits (``docs/planning.md`` §3): Newton steps in ``log θ`` approach a
    maximum on the boundary without reaching it and stop once a variance is at or below
    :data:`BOUNDARY_FRACTION` of ``var(y)`` (5e-8, say). Every such variance still above 0 is
    set to 0 at once and the others polished again; the point replaces ``theta`` when its
    ``l_R`` is not lower by more than :data:`DECREMENT_TOL`, so the maximum is recorded where
    ``ledger analyze`` and the verifier put it (``docs/statistics.md``, "Several maxima").
    """
    free = _free(model, theta)
    low = [i for i in range(model.k) if i not in free and theta[i] > 0]
    if not low:
        return theta
    start = theta.copy()
    start[low] = 0.0
    cand = polish(model, start, exact=True)
    before, after = model.loglik(theta), model.loglik(cand)
    return cand if math.isfinite(after) and after >= before - DECREMENT_TOL else theta


def fit_at(
    y: Floats,
    exog: Floats,
    groups: Sequence[str],
    terms: Sequence[Sequence[str]],
    classes: Sequence[str],
    names: list[str],
    params: Sequence[float],
) -> RemlFit:
    """The fit evaluated at given variance parameters (the registered model's)."""
    model = _Blocks(y, exog, groups, terms, classes)
    theta = np.asarray([float(v) for v in params], dtype=np.float64)
    if model.parts(theta) is None:
        raise ValueError("the REML likelihood is undefined at these variances")
    cov, beta = model.gls(theta)
    free = _free(model, theta)
    info_cov = model.satterthwaite_parts(theta, free)[1]
    return RemlFit(names, theta, model.loglik(theta), beta, cov, free, info_cov, model)


DECREMENT_TOL = 1e-9
"""Largest Newton decrement ``½·gᵀ(−H)⁻¹g`` (log-likelihood units) the writer records.

A point whose decrement is ``δ`` lies ``sqrt(2δ)`` standard errors (in the metric of the
observed information) from the maximum, at any sample size: 1e-9 is 4.5e-5 standard errors,
a thousand times inside the verifier's 1e-6 (``docs/statistics.md``).
"""
POLISH_TOL = 1e-13
""":func:`polish` stops when the Newton decrement is below this (or no step gains)."""


class RemlConvergenceError(ValueError):
    """A REML fit that is not at its maximum: the message names the model and by how much."""


def _free(model: _Blocks, theta: Floats) -> list[int]:
    floor = BOUNDARY_FRACTION * (model.var if model.var > 0 else 1.0)
    return [i for i in range(theta.size) if theta[i] > floor]


def log_score_hessian(model: _Blocks, theta: Floats, free: list[int]) -> tuple[Floats, Floats]:
    """Score and observed Hessian of ``l_R`` in ``log θ`` of the ``free`` parameters.

    The score is analytic (:meth:`_Blocks.score`, times ``θ``); the Hessian is the central
    difference of that score at steps ``±1e-5`` in ``log θ`` (truncation error ~1e-10 relative),
    symmetrised.
    """

    def log_score(t: Floats) -> Floats:
        return np.asarray(model.score(t)[free] * t[free])

    grad = log_score(theta)
    h = 1e-5
    hess = np.zeros((len(free), len(free)))
    for j, i in enumerate(free):
        up, down = theta.copy(), theta.copy()
        up[i] *= math.exp(h)
        down[i] *= math.exp(-h)
        hess[:, j] = (log_score(up) - log_score(down)) / (2 * h)
    return grad, (hess + hess.T) / 2


def log_derivatives(model: _Blocks, theta: Floats, free: list[int]) -> tuple[Floats, Floats]:
    """Score and observed Hessian of ``l_R`` in ``log θ`` of the ``free`` parameters.

    In closed form (:meth:`_Blocks.derivatives`): ``θ_iθ_j·∂²l_R/∂θ_i∂θ_j + δ_ij·θ_i·∂l_R/∂θ_i``.
    ``ledger plan``'s fits (``exact=True``); the analysis keeps :func:`log_score_hessian`.
    """
    score, _, hess = model.derivatives(theta)
    t = theta[free]
    grad = score[free] * t
    out = hess[np.ix_(free, free)] * np.outer(t, t) + np.diag(grad)
    return grad, (out + out.T) / 2


def _grad_hess(
    model: _Blocks, theta: Floats, free: list[int], exact: bool
) -> tuple[Floats, Floats]:
    """:func:`log_derivatives` when ``exact``, else :func:`log_score_hessian`."""
    if exact:
        return log_derivatives(model, theta, free)
    return log_score_hessian(model, theta, free)


def _score_info(
    model: _Blocks, theta: Floats, free: list[int], exact: bool
) -> tuple[Floats, Floats]:
    """The score in ``θ`` (every parameter) and the expected information over ``free``."""
    if exact:
        score, info, _ = model.derivatives(theta)
        return score, info[np.ix_(free, free)]
    return model.score(theta), model.information(theta, free)


def _decrement(grad: Floats, hess: Floats) -> tuple[float, Floats | None]:
    """``(½·gᵀ(−H)⁻¹g, (−H)⁻¹g)``; ``(inf, None)`` when ``−H`` is not positive definite."""
    try:
        chol = np.linalg.cholesky(-hess)
    except np.linalg.LinAlgError:
        return math.inf, None
    step = np.linalg.solve(chol.T, np.linalg.solve(chol, grad))
    return 0.5 * float(grad @ step), step


def _boundary_gain(
    model: _Blocks, theta: Floats, free: list[int], exact: bool = False
) -> tuple[int, float] | None:
    """The parameter on the boundary whose first-order gain ``½·g²/I`` off it is largest.

    ``g`` the score in ``θ`` (positive: the likelihood grows off the boundary), ``I`` the
    expected information's diagonal there; ``None`` when no boundary parameter has ``g > 0``.
    """
    bound = [i for i in range(theta.size) if i not in free]
    if not bound:
        return None
    score, info = _score_info(model, theta, list(range(theta.size)), exact)
    gains = [
        (i, 0.5 * score[i] ** 2 / info[i, i]) for i in bound if score[i] > 0 and info[i, i] > 0
    ]
    return max(gains, key=lambda x: x[1]) if gains else None


def polish(model: _Blocks, theta: Floats, *, exact: bool = False) -> Floats:
    """Newton steps in ``log θ`` on the exact score to the REML maximum near ``theta``.

    A parameter on the boundary (``≤ BOUNDARY_FRACTION × var(y)``) whose score in ``θ`` is
    positive is moved off it by a scoring step (``θ_k = g_k/I_kk``); the others stay. Where the
    observed information is not positive definite the step is Fisher scoring's (the expected
    information, always positive definite). Steps are halved until ``l_R`` grows and capped at
    a factor ``e²`` per parameter; the loop ends when the Newton decrement is below
    :data:`POLISH_TOL`, when no step gains, or after 100 steps. ``exact`` (``ledger plan``):
    the observed Hessian in closed form (:func:`log_derivatives`) instead of the central
    difference of the score.
    """
    theta = np.asarray(theta, dtype=np.float64).copy()
    floor = BOUNDARY_FRACTION * (model.var if model.var > 0 else 1.0)
    for _ in range(100):
        free = _free(model, theta)
        off = _boundary_gain(model, theta, free, exact)
        if off is not None and off[1] > POLISH_TOL:
            i = off[0]
            score_i, info = _score_info(model, theta, [i], exact)
            theta[i] = max(float(score_i[i] / info[0, 0]), 10 * floor)
            continue
        if not free:
            return theta
        grad, hess = _grad_hess(model, theta, free, exact)
        decrement, newton = _decrement(grad, hess)
        if newton is not None:
            step = newton
        else:
            fisher = _score_info(model, theta, free, exact)[1] * np.outer(theta[free], theta[free])
            try:
                step = np.asarray(np.linalg.solve(fisher, grad), dtype=np.float64)
            except np.linalg.LinAlgError:
                return theta
            decrement = 0.5 * float(grad @ step)
        if not (decrement > POLISH_TOL and np.all(np.isfinite(step))):
            return theta
        step = step * min(1.0, 2.0 / float(np.max(np.abs(step))))
        f0 = model.loglik(theta)
        for scale in 0.5 ** np.arange(12):
            cand = theta.copy()
            cand[free] = theta[free] * np.exp(scale * step)
            if model.loglik(cand) > f0:
                theta = cand
                break
        else:
            return theta
    return theta


def check_maximum(
    model: _Blocks, theta: Floats, names: Sequence[str], label: str, *, exact: bool = False
) -> None:
    """Raise :class:`RemlConvergenceError` unless ``theta`` is the REML maximum.

    The parameters above the boundary must have a negative definite observed Hessian (in
    ``log θ``) and a Newton decrement ``½·gᵀ(−H)⁻¹g ≤`` :data:`DECREMENT_TOL`; a parameter on
    the boundary must not gain more than that by leaving it (``½·g²/I``, ``g > 0`` its score in
    ``θ``). The message names ``label``, the decrement and the parameters. ``exact``: the
    Hessian, score and information of :meth:`_Blocks.derivatives` (``ledger plan``).
    """
    free = _free(model, theta)
    values = ", ".join(f"{n} {float(v):.6g}" for n, v in zip(names, theta, strict=True))
    if free:
        grad, hess = _grad_hess(model, theta, free, exact)
        decrement, _ = _decrement(grad, hess)
        if not math.isfinite(decrement):
            raise RemlConvergenceError(
                f"{label}: the variances ({values}) are not a REML maximum (the observed "
                "information there is not positive definite); not recorded"
            )
        if decrement > DECREMENT_TOL:
            raise RemlConvergenceError(
                f"{label}: the variances ({values}) are short of the REML maximum by a Newton "
                f"decrement of {decrement:.3g} (> {DECREMENT_TOL:g}; score in log variance "
                + ", ".join(f"{float(g):.3g}" for g in grad)
                + "); not recorded"
            )
    off = _boundary_gain(model, theta, free, exact)
    if off is not None and off[1] > DECREMENT_TOL:
        raise RemlConvergenceError(
            f"{label}: the variances ({values}) are not a REML maximum: {names[off[0]]} on the "
            f"boundary would gain {off[1]:.3g} in l_R by leaving it (> {DECREMENT_TOL:g}); "
            "not recorded"
        )


def satterthwaite_contrast(
    fit: RemlFit, weights: Floats, sides: str, conf: float = 0.95
) -> dict[str, Any]:
    """``L·β̂`` with ``SE² = LᵀCL`` and Satterthwaite ``df = 2(LᵀCL)² / (gᵀWg)``.

    ``g_i = Lᵀ(∂C/∂θ_i)L`` over the free variance parameters, ``W`` the inverse *expected*
    REML information in θ (recorded as ``df_method`` :data:`DF_METHOD`; lmerTest uses the
    observed information); t-distribution p and interval (one-sided: lower bound only).
    """
    est = float(weights @ fit.beta)
    var = float(weights @ fit.cov @ weights)
    se = math.sqrt(var) if var > 0 else math.nan
    grads = fit.model.cov_gradient(fit.params, fit.free)
    g = np.array([float(weights @ d @ weights) for d in grads])
    denom = float(g @ fit.info_cov @ g) if g.size else 0.0
    df = 2 * var * var / denom if denom > 0 else math.inf
    t = est / se if se > 0 else math.nan
    # scipy.stats.t's sf and ppf are special.stdtr(df, −t) and special.stdtrit(df, q) behind
    # argument checks that cost more than the fit's arithmetic; called directly (the same
    # function on the same doubles: the same bits, nan where the checks give nan)
    if sides == "one-sided":
        p = float(special.stdtr(df, -t))
        lower, upper = est - float(special.stdtrit(df, conf)) * se, math.inf
    else:
        p = float(2 * special.stdtr(df, -abs(t)))
        q = float(special.stdtrit(df, 0.5 + conf / 2))
        lower, upper = est - q * se, est + q * se
    return {
        "estimate": est,
        "se": se,
        "df": df,
        "df_method": DF_METHOD,
        "t": t,
        "p": p,
        "lower": lower,
        "upper": upper,
        "conf": conf,
    }


_BOOTSTRAP_MEMO: dict[tuple[int, int, int], npt.NDArray[np.int64]] = {}
_BOOTSTRAP_MEMO_ENTRIES = 1 << 21
"""At most this many indices are remembered by :func:`_bootstrap_indices` (16 MiB)."""


def _bootstrap_indices(
    seed: int, iterations: int, n: int, rows: int
) -> Iterator[tuple[int, npt.NDArray[np.int64]]]:
    """The cluster bootstrap's index blocks: ``(first row, block)`` in draw order.

    Each block is ``PCG64(seed).integers(0, n, size=(rows, n))`` in turn (the last shorter).
    They depend on ``(seed, iterations, n)`` alone, which every simulated study of a plan
    shares, so they are drawn once and remembered (up to :data:`_BOOTSTRAP_MEMO_ENTRIES`
    indices in all); the same indices, so the same replicates, bit for bit.
    """
    key = (seed, iterations, n)
    got = _BOOTSTRAP_MEMO.get(key)
    if got is None:
        rng = np.random.Generator(np.random.PCG64(seed))
        got = (
            np.concatenate(
                [
                    rng.integers(0, n, size=(min(iterations, start + rows) - start, n))
                    for start in range(0, iterations, rows)
                ]
            )
            if iterations > 0
            else np.zeros((0, n), dtype=np.int64)
        )
        if got.size <= _BOOTSTRAP_MEMO_ENTRIES:
            while (
                sum(v.size for v in _BOOTSTRAP_MEMO.values()) + got.size > _BOOTSTRAP_MEMO_ENTRIES
            ):
                del _BOOTSTRAP_MEMO[next(iter(_BOOTSTRAP_MEMO))]
            _BOOTSTRAP_MEMO[key] = got
    for start in range(0, iterations, rows):
        yield start, got[start : start + rows]


def cluster_bootstrap(
    diffs: Floats, iterations: int, seed: int, sides: str, conf: float = 0.95
) -> dict[str, Any]:
    """Percentile bootstrap of the mean per-probe difference, probes resampled with replacement.

    Indices are drawn as one ``(iterations, G)`` C-order block from ``PCG64(seed)``, in chunks
    of ``max(1, 2**18 // G)`` rows; one-sided: the lower bound is the ``1 − conf`` quantile.
    """
    n = diffs.size
    reps = np.empty(iterations)
    rows = max(1, (1 << 18) // n)
    for start, block in _bootstrap_indices(seed, iterations, n, rows):
        reps[start : start + block.shape[0]] = diffs[block].mean(axis=1)
    if sides == "one-sided":
        lower = float(np.quantile(reps, round(1 - conf, 12)))
        upper = math.inf
    else:
        lo, hi = np.quantile(reps, [round((1 - conf) / 2, 12), round((1 + conf) / 2, 12)])
        lower, upper = float(lo), float(hi)
    return {
        "estimate": float(np.mean(diffs)),
        "lower": lower,
        "upper": upper,
        "conf": conf,
        "n_clusters": n,
        "iterations": iterations,
        "seed": seed,
    }
