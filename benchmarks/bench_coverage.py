"""Coverage of the registered and the sensitivity 95% intervals for the population A - B difference.

    python benchmarks/bench_coverage.py [--trials PATH] [--studies 1000] [--probes 6]
                                        [--replicates 4 30] [--seed 20260501] [--quick]

The variance components are the demo's: the tool's own sensitivity model (probe intercept,
probe x arm cell, a residual variance per arm; ``analysis._sensitivity.fit_reml``) fitted to the
trials of ``--trials`` (default ``benchmarks/data/demo30_trials.csv``: the
``archive/analysis/trials.csv`` of ``ledger demo DIR``, the template's 30 replicates; the shipped
4-replicate archive's ``analysis/trials.csv`` works too) on the registered model's arms A, B
and C. Each simulated study draws, for ``--probes`` new probes,
``y = mu_arm + u_probe + w_(probe, arm) + e`` with ``e ~ N(0, sigma_arm^2)`` and
``--replicates`` trials per arm and probe; the truth is ``mu_A - mu_B`` (the population of
probes).

Per study, two intervals for A - B:

* **registered**: the random-intercept model, REML, Wald z interval (``model.lmm``);
* **sensitivity**: probe x arm with a residual variance per arm, REML, Satterthwaite t
  interval (``sensitivity.lmm``'s primary model).

The design is balanced, so both are computed from sufficient statistics, vectorised over the
studies: the REML likelihood splits into the within-cell part (per arm, ``G(R - 1)`` df) and the
cell-mean part (``(G - 1)·log|V| + tr(V⁻¹S)``, ``V = σ²_u·J + diag(σ²_w + σ²_a/R)``), the GLS
estimate of A - B is the difference of the arm means and its variance ``(V_AA + V_BB −
2V_AB)/G``. The first studies are also fitted with the tool itself (``analysis._stats`` and
``analysis._sensitivity``) and the largest difference is printed: the closed forms are the
tool's intervals. Coverage is printed with its Monte Carlo standard error. Timings are printed,
never asserted; the target is sensitivity coverage within 93-97 % in both settings.
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy import stats as sps

from analysis import _sensitivity as sens
from analysis import _stats as ast

ROOT = Path(__file__).resolve().parents[1]
DEMO_TRIALS = ROOT / "benchmarks" / "data" / "demo30_trials.csv"
"""``analysis/trials.csv`` of ``ledger demo`` (the template's 30 replicates, 1,050 trials)."""
ARMS = ("A", "B", "C")
Floats = npt.NDArray[np.float64]


def components(path: Path) -> dict[str, Any]:
    """The demo's arm means and variance components (the tool's per-arm-residual model)."""
    with path.open(encoding="utf-8") as fh:
        rows = [
            r
            for r in csv.DictReader(fh)
            if r["control"] == "False" and r["excluded"] == "False" and r["arm"] in ARMS
        ]
    y = np.array([float(r["accuracy"]) for r in rows])
    arm = [r["arm"] for r in rows]
    g = [r["stimulus"] for r in rows]
    x = np.column_stack([np.ones(y.size)] + [[a == b for a in arm] for b in ARMS[1:]])
    cells = [f"{s}|{a}" for s, a in zip(g, arm, strict=True)]
    names = ["group", "group_by_arm"] + [f"residual[{a}]" for a in ARMS]
    fit = sens.fit_reml(y, x.astype(float), g, [g, cells], arm, names)
    means = {a: float(np.mean(y[np.array(arm) == a])) for a in ARMS}
    return {
        "means": means,
        "params": dict(zip(names, (float(v) for v in fit.params), strict=True)),
        "n": y.size,
    }


def simulate(
    rng: np.random.Generator, comp: dict[str, Any], studies: int, probes: int, reps: int
) -> Floats:
    """``(studies, probes, arms, reps)`` outcomes."""
    p = comp["params"]
    mu = np.array([comp["means"][a] for a in ARMS])
    sd = np.sqrt(np.array([p[f"residual[{a}]"] for a in ARMS]))
    u = rng.normal(0, math.sqrt(p["group"]), (studies, probes, 1, 1))
    w = rng.normal(0, math.sqrt(p["group_by_arm"]), (studies, probes, len(ARMS), 1))
    e = rng.normal(0, 1, (studies, probes, len(ARMS), reps)) * sd[None, None, :, None]
    return np.asarray(mu[None, None, :, None] + u + w + e)


def registered(y: Floats) -> tuple[Floats, Floats]:
    """Random-intercept REML (balanced: the ANOVA strata, pooled at the boundary), z interval."""
    _s, g, a, r = y.shape
    cell = y.mean(axis=3)
    probe = cell.mean(axis=2)
    arm = cell.mean(axis=1)
    grand = cell.mean(axis=(1, 2))
    ssw = ((y - cell[..., None]) ** 2).sum(axis=(1, 2, 3))
    inter = cell - probe[:, :, None] - arm[:, None, :] + grand[:, None, None]
    ssi = r * (inter**2).sum(axis=(1, 2))
    ssp = a * r * ((probe - grand[:, None]) ** 2).sum(axis=1)
    df_e = g * a * (r - 1) + (g - 1) * (a - 1)
    sigma_e = (ssw + ssi) / df_e
    ms_p = ssp / (g - 1)
    boundary = ms_p <= sigma_e  # σ²_u at 0: the probe stratum pools into the residual
    sigma_e = np.where(boundary, (ssw + ssi + ssp) / (df_e + g - 1), sigma_e)
    est = arm[:, 0] - arm[:, 1]
    se = np.sqrt(2 * sigma_e / (g * r))
    z = float(sps.norm.ppf(0.975))
    return est - z * se, est + z * se


def _v(theta: Floats, r: int) -> Floats:
    """``V = σ²_u·J + diag(σ²_w + σ²_a/R)`` for every study: ``(S, a, a)``."""
    a = theta.shape[1] - 2
    return np.asarray(
        theta[:, 0, None, None] * np.ones((a, a))
        + np.eye(a) * (theta[:, 1, None, None] + theta[:, 2:, None] / r)
    )


def _loglik(theta: Floats, scatter: Floats, ssw: Floats, g: int, r: int) -> Floats:
    """REML log-likelihood (up to a constant) of every study from its sufficient statistics."""
    v = _v(theta, r)
    sign, logdet = np.linalg.slogdet(v)
    quad = np.einsum("sii->s", np.linalg.solve(v, scatter))
    res = theta[:, 2:]
    within = np.sum(g * (r - 1) * np.log(res) + ssw / res, axis=1)
    out = -0.5 * ((g - 1) * logdet + quad + within)
    return np.asarray(np.where(sign > 0, out, -np.inf))


def _derivatives(a: int, r: int) -> Floats:
    """``∂V/∂θ_k``: J, I, then e_k·e_kᵀ/R per arm: ``(2 + a, a, a)``."""
    return np.stack([np.ones((a, a)), np.eye(a)] + [np.diag(np.eye(a)[k]) / r for k in range(a)])


def _score_info(
    theta: Floats, scatter: Floats, ssw: Floats, g: int, r: int
) -> tuple[Floats, Floats]:
    """Gradient and expected information of every study (the within part added)."""
    a = theta.shape[1] - 2
    vi = np.linalg.inv(_v(theta, r))
    ds = _derivatives(a, r)
    vd = np.einsum("sab,kbc->skac", vi, ds)  # V⁻¹D_k
    tr = np.einsum("skaa->sk", vd)
    vsv = np.einsum("sab,sbc,scd->sad", vi, scatter, vi)
    grad = -0.5 * ((g - 1) * tr - np.einsum("sab,kba->sk", vsv, ds))
    info = 0.5 * (g - 1) * np.einsum("skab,slba->skl", vd, vd)
    res = theta[:, 2:]
    grad[:, 2:] += -0.5 * (g * (r - 1) / res - ssw / res**2)
    idx = np.arange(2, 2 + a)
    info[:, idx, idx] += g * (r - 1) / (2 * res**2)
    return grad, info


def _fit(scatter: Floats, ssw: Floats, g: int, r: int, floor: float) -> Floats:
    """Fisher scoring on every study at once, steps halved per study until l_R does not fall;
    a variance that would go below ``floor`` is held there (the boundary)."""
    s, a, _ = scatter.shape
    res0 = ssw / (g * (r - 1))
    cov = scatter / (g - 1)
    theta = np.column_stack(
        [
            np.maximum(cov.mean(axis=(1, 2)), floor * 10),
            np.maximum(np.einsum("sii->s", cov) / a / 2, floor * 10),
            np.maximum(res0, floor * 10),
        ]
    )
    ll = _loglik(theta, scatter, ssw, g, r)
    for _ in range(200):
        grad, info = _score_info(theta, scatter, ssw, g, r)
        held = (theta <= floor * 1.000001) & (grad < 0)  # at the boundary, pushing out: fixed
        grad = np.where(held, 0.0, grad)
        eye = np.eye(theta.shape[1])[None]
        info = np.where(held[:, :, None] | held[:, None, :], eye, info)
        step = np.linalg.solve(info, grad[:, :, None])[:, :, 0]
        scale = np.ones(s)
        accepted = np.zeros(s, dtype=bool)
        new = theta
        for _ in range(30):
            cand = np.maximum(theta + scale[:, None] * step, floor)
            cand_ll = _loglik(cand, scatter, ssw, g, r)
            ok = (cand_ll >= ll - 1e-12) & ~accepted
            new = np.where(ok[:, None], cand, new)
            accepted |= ok
            if accepted.all():
                break
            scale = np.where(accepted, scale, scale / 2)
        moved = np.abs(new - theta).max(axis=1) / np.maximum(theta.max(axis=1), 1e-30)
        theta = new
        ll = _loglik(theta, scatter, ssw, g, r)
        if float(moved.max()) < 1e-10:
            break
    return theta


def sensitivity(y: Floats) -> tuple[Floats, Floats, Floats]:
    """Probe x arm with a residual variance per arm, REML, Satterthwaite t: (lower, upper, df)."""
    _s, g, a, r = y.shape
    cell = y.mean(axis=3)
    arm = cell.mean(axis=1)
    dev = cell - arm[:, None, :]
    scatter = np.einsum("sja,sjb->sab", dev, dev)
    ssw = ((y - cell[..., None]) ** 2).sum(axis=(1, 3))  # per arm
    floor = 1e-6 * float(np.var(y))
    theta = _fit(scatter, ssw, g, r, floor * 1e-3)
    weights = np.zeros(a)
    weights[0], weights[1] = 1.0, -1.0
    var = np.einsum("a,sab,b->s", weights, _v(theta, r), weights) / g
    grad = np.array([0.0, 2.0 / g] + [weights[k] ** 2 / (g * r) for k in range(a)])
    _, info = _score_info(theta, scatter, ssw, g, r)
    free = theta > floor  # the tool's boundary rule: these enter Satterthwaite
    gm = np.where(free, grad[None, :], 0.0)
    info = np.where(free[:, :, None] & free[:, None, :], info, np.eye(2 + a)[None])
    denom = np.einsum("sk,sk->s", gm, np.linalg.solve(info, gm[:, :, None])[:, :, 0])
    df = np.where(denom > 0, 2 * var * var / np.where(denom > 0, denom, 1.0), np.inf)
    est = arm[:, 0] - arm[:, 1]
    q = sps.t.ppf(0.975, df)
    se = np.sqrt(var)
    return est - q * se, est + q * se, df


def tool_check(y: Floats) -> tuple[float, float]:
    """Largest |difference| between the closed forms and the tool on these studies' bounds."""
    reg_l, _ = registered(y)
    sen_l, _, _ = sensitivity(y)
    worst_reg = worst_sen = 0.0
    s, g, a, r = y.shape
    for i in range(s):
        probe, armv, _rep = np.meshgrid(np.arange(g), np.arange(a), np.arange(r), indexing="ij")
        df = pd.DataFrame(
            {
                "acc": y[i].ravel(),
                "probe": [f"p{j}" for j in probe.ravel()],
                "arm": [ARMS[k] for k in armv.ravel()],
            }
        )
        fit = ast.mixed_model(df, "acc", "arm", "probe", "A")
        c = ast.contrast(fit, "A", "B")
        worst_reg = max(worst_reg, abs(c.lower - reg_l[i]))
        x = np.column_stack(
            [np.ones(len(df))] + [(df["arm"] == b).to_numpy(float) for b in ARMS[1:]]
        )
        groups = df["probe"].tolist()
        cells = [f"{p}|{q}" for p, q in zip(groups, df["arm"], strict=True)]
        het = sens.fit_reml(
            df["acc"].to_numpy(),
            x,
            groups,
            [groups, cells],
            df["arm"].tolist(),
            ["g", "w", "rA", "rB", "rC"],
        )
        tool = sens.satterthwaite_contrast(het, np.array([0.0, -1.0, 0.0]), "two-sided")
        worst_sen = max(worst_sen, abs(tool["lower"] - sen_l[i]))
    return worst_reg, worst_sen


def main() -> None:
    """Print the components, then coverage and Monte Carlo error per replicate setting."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=Path, default=DEMO_TRIALS)
    ap.add_argument("--studies", type=int, default=1000)
    ap.add_argument("--probes", type=int, default=6)
    ap.add_argument("--replicates", type=int, nargs="+", default=[4, 30])
    ap.add_argument("--seed", type=int, default=20260501)
    ap.add_argument("--check", type=int, default=3, help="studies also fitted with the tool")
    ap.add_argument("--quick", action="store_true", help="100 studies, 2 checked")
    args = ap.parse_args()
    if args.quick:
        args.studies, args.check = 100, 2
    comp = components(args.trials)
    truth = comp["means"]["A"] - comp["means"]["B"]
    print(f"components from {args.trials} ({comp['n']} trials, arms {', '.join(ARMS)}):")
    print(
        "  arm means "
        + ", ".join(f"{a} {m:.4f}" for a, m in comp["means"].items())
        + f"; true A - B {truth:+.4f}"
    )
    print("  variances " + ", ".join(f"{k} {v:.3g}" for k, v in comp["params"].items()))
    rng = np.random.default_rng(args.seed)
    for reps in args.replicates:
        start = time.perf_counter()
        y = simulate(rng, comp, args.studies, args.probes, reps)
        rl, ru = registered(y)
        sl, su, dfs = sensitivity(y)
        seconds = time.perf_counter() - start
        n = args.studies
        for name, lo, hi in (
            ("registered (RI, z)", rl, ru),
            ("sensitivity (probe x arm, per-arm residual, Satterthwaite t)", sl, su),
        ):
            cover = float(np.mean((lo <= truth) & (truth <= hi)))
            mc = math.sqrt(cover * (1 - cover) / n)
            print(
                f"{args.probes} probes x {reps:>2} replicates, {n} studies: {name}: coverage "
                f"{cover * 100:.1f}% (Monte Carlo SE {mc * 100:.1f} pp); median width "
                f"{float(np.median(hi - lo)) * 100:.1f} pp"
            )
        print(
            f"  median Satterthwaite df {float(np.median(dfs)):.1f}; {seconds:.1f} s for "
            f"{n} studies"
        )
        if args.check:
            reg, sen = tool_check(y[: args.check])
            print(
                f"  closed forms vs the tool on {args.check} studies: max |lower bound "
                f"difference| registered {reg:.2e}, sensitivity {sen:.2e}"
            )


if __name__ == "__main__":
    main()
