"""The ``factorial`` hypothesis test: a GEE of a per-trial outcome on the crossed factors.

``docs/analysis.md`` ("Factorial designs") is normative; the verifier re-derives every number
with its own solver (``verify/_factorial.py``). The design matrix has an intercept, every
factor of ``[factorial]`` as treatment dummies against its reference (first) level, every
interaction a ``factorial`` hypothesis of the study registers (products of its factors'
dummies), and the model as a factor (against the first model of the model order) when the
trials come from several models. The GEE has the item as cluster and an exchangeable working
correlation; the family comes from the outcome (:data:`OUTCOMES`): Binomial (logit) for a 0/1
outcome, Gaussian (identity) for a numeric one. The named term's coefficients are tested
jointly by a Wald chi-square on the robust (sandwich) covariance.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np
import pandas as pd

from analysis import _stats as stats
from analysis._deferred import DeferredModule
from runner import FACTORIAL_OUTCOMES, design_columns

__all__ = ["OUTCOMES", "factorial_values", "interactions", "plan_cells"]

sps = DeferredModule("scipy.stats")  # imported on first use (analysis._deferred)

OUTCOMES: Final = FACTORIAL_OUTCOMES
"""``outcome`` -> (the analysis dataset's trial column, the GEE family): the runner's table
(:data:`runner._factors.FACTORIAL_OUTCOMES`, which the spec validates against). Adding an
outcome (a numeric per-trial column, e.g. a metric of an open-ended answer) is one entry
there, and one in the verifier's own ``verify._factorial.OUTCOMES``."""


def plan_cells(plan: Mapping[str, Any]) -> tuple[list[str], dict[str, dict[str, str]]]:
    """The crossed factors (``[factorial]`` order) and each cell arm's ``{factor: level}``."""
    fx = plan.get("factorial")
    if not isinstance(fx, dict):
        return [], {}
    arms = plan.get("arms") or {}
    cells = {
        name: dict(info["factors"])
        for name, info in arms.items()
        if isinstance(info, dict) and isinstance(info.get("factors"), dict)
    }
    return [str(f) for f in fx.get("factors") or []], cells


def interactions(plan: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """Every interaction the study's factorial hypotheses register, factors in design order."""
    order, _ = plan_cells(plan)
    out: list[tuple[str, ...]] = []
    for h in plan.get("hypotheses") or []:
        effect = h.get("effect") or []
        if len(effect) > 1:  # only a factorial hypothesis names an effect (docs/study-spec.md)
            key = tuple(sorted(effect, key=order.index))
            if key not in out:
                out.append(key)
    return out


def _fit(
    y: np.ndarray[Any, Any], x: np.ndarray[Any, Any], groups: np.ndarray[Any, Any], family: str
) -> tuple[Any, Any, tuple[str, ...]]:
    from statsmodels.genmod.cov_struct import Exchangeable
    from statsmodels.genmod.families import Binomial, Gaussian
    from statsmodels.genmod.generalized_estimating_equations import GEE

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fam = Binomial() if family == "binomial" else Gaussian()
        model = GEE(y, x, groups=groups, family=fam, cov_struct=Exchangeable())
        fit = model.fit()
    return model, fit, tuple(f"{w.category.__name__}: {w.message}" for w in seen)


def factorial_values(
    trials: pd.DataFrame,
    plan: Mapping[str, Any],
    h: Mapping[str, Any],
    models: Sequence[str] = (),
) -> dict[str, Any]:
    """The ``factorial`` test of hypothesis ``h`` on the analysable trials (analysis.md).

    ``trials`` are the dataset's analysable trials; only the cell arms' enter. ``models`` is
    the model order (the model is a factor when the trials come from two or more).
    """
    outcome = str(h.get("outcome") or "trial_accuracy")
    if outcome not in OUTCOMES:
        raise stats.StatsError(f"outcome {outcome!r} has no factorial model")
    column, family = OUTCOMES[outcome]
    order, cells = plan_cells(plan)
    factors = plan.get("factors") or {}
    levels = [(f, [str(lv["name"]) for lv in factors[f]["levels"]]) for f in order]
    inters = interactions(plan)
    cols = design_columns(levels, inters)
    frame = trials[trials["arm"].isin(list(cells))]
    frame = frame[frame[column].notna()]
    if frame.empty:
        raise stats.StatsError("no analysable trial of a factorial cell")
    y = frame[column].to_numpy(dtype=np.float64)
    arm_cells = [cells[str(a)] for a in frame["arm"]]
    names = ["Intercept"]
    xs = [np.ones(len(frame))]
    for name, at in cols:
        names.append(name)
        xs.append(
            np.array([1.0 if all(c[f] == v for f, v in at.items()) else 0.0 for c in arm_cells])
        )
    present = [m for m in models if m in set(frame["model"].astype(str))]
    if len(present) >= 2:
        for m in present[1:]:
            names.append(f"model[T.{m}]")
            xs.append((frame["model"].astype(str) == m).to_numpy(dtype=np.float64))
    x = np.column_stack(xs)
    if np.linalg.matrix_rank(x) < x.shape[1]:
        raise stats.StatsError(
            "factorial design: the columns are linearly dependent on these "
            "trials (a cell or a model without trials)"
        )
    if family == "binomial":
        if y.min() == y.max():
            raise stats.NotApplicableError(
                f"{outcome}: every trial has the same outcome; the GEE cannot be fitted"
            )
        groups_to_check = [(f,) for f in order] + inters
        for group in groups_to_check:
            seen: dict[tuple[str, ...], set[float]] = {}
            for c, v in zip(arm_cells, y, strict=True):
                seen.setdefault(tuple(c[f] for f in group), set()).add(float(v))
            for key in sorted(seen):
                if len(seen[key]) == 1:
                    where = ", ".join(f"{f} = {v}" for f, v in zip(group, key, strict=True))
                    raise stats.NotApplicableError(
                        f"GEE: every trial of {where} has one "
                        "outcome (separation): a log odds ratio is "
                        "infinite"
                    )
        if len(present) >= 2:  # a model at the ceiling or the floor separates too
            by_model = frame["model"].astype(str).to_numpy()
            for m in present:
                if len(set(y[by_model == m].tolist())) == 1:
                    raise stats.NotApplicableError(
                        f"GEE: every trial of model {m} has one "
                        "outcome (separation): a log odds ratio is "
                        "infinite"
                    )
    stimuli = frame["stimulus"].astype(str).to_numpy()
    groups = pd.factorize(stimuli, sort=True)[0]
    model, fit, caught = _fit(y, x, groups, family)
    params = np.asarray(fit.params, dtype=np.float64)
    cov = np.asarray(fit.cov_params(), dtype=np.float64)
    naive = np.diag(np.asarray(fit.cov_naive, dtype=np.float64))  # B⁻¹·φ
    robust = np.diag(cov)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(robust) & np.isfinite(naive) & (naive > 0) & (robust > 1e-8 * naive)
    if not ok.all():  # docs/mcq-statistics.md §8's rule: a degenerate term
        k = int(np.flatnonzero(~ok)[0])
        raise stats.NotApplicableError(
            f"GEE: the robust variance of {names[k]} is {robust[k]:.3g}, not above 1e-08 x its "
            f"model-based variance {naive[k]:.3g} (a degenerate fit: e.g. models or cells whose "
            "trials answer alike in every item)"
        )
    se = np.sqrt(robust)
    effect = tuple(sorted(h.get("effect") or [], key=order.index))
    idx = [j + 1 for j, (_, at) in enumerate(cols) if tuple(at) == effect]
    if not idx:
        raise stats.StatsError(f"effect {list(effect)}: no term of the model")
    b = params[idx]
    v = cov[np.ix_(idx, idx)]
    chi2 = float(b @ np.linalg.solve(v, b))
    p = float(sps.chi2.sf(chi2, len(idx)))
    crit = float(sps.norm.ppf(0.975))
    terms = []
    for j in range(len(names)):
        terms.append(
            {
                "name": names[j],
                "estimate": float(params[j]),
                "se": float(se[j]),
                "z": float(params[j] / se[j]),
                "p": float(2.0 * sps.norm.sf(abs(params[j] / se[j]))),
                "lower": float(params[j] - crit * se[j]),
                "upper": float(params[j] + crit * se[j]),
            }
        )
    one = len(idx) == 1
    return {
        "effect": list(effect),
        "outcome": outcome,
        "gee_family": family,
        "tested": [names[j] for j in idx],
        "chi2": chi2,
        "df": len(idx),
        "p": p,
        "p_raw": p,
        "estimate": float(b[0]) if one else None,
        "odds_ratio": math.exp(float(b[0])) if one and family == "binomial" else None,
        "terms": terms,
        "references": {f: lv[0] for f, lv in levels},
        "interactions": [list(i) for i in inters],
        "n_obs": len(y),
        "n_clusters": int(groups.max() + 1),
        "dependence": float(np.asarray(model.cov_struct.dep_params).ravel()[0]),
        "converged": bool(getattr(fit, "converged", True)),
        "warnings": list(caught),
    }
