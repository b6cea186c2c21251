"""What seed 002's statistics compute on (``docs/mcq-statistics.md`` §11).

Each seed-002 kind (``flip-rate``, ``position-bias``, ``voting``, ``self-consistency``,
``gee``, and ``mcnemar`` between two variants or at one variant) is a module of
:mod:`analysis.statistics`; this module gives them :class:`Tables` (the long-format table of
:mod:`analysis.mcq._rows`, validated once per dataset by :func:`analysis.mcq._stats.check_trials`
and kept on the dataset, with the plan's letters and bootstrap), the shared pieces they use
(:func:`interval_level`, :func:`position_bias_bootstrap`, :func:`gee_with_fallback`), and
:func:`mcq_descriptive_values`, the ``descriptive.mcq`` result (accuracy with Wilson
intervals per cell, means over shuffle seeds). Pure functions, no I/O; ``verify/_mcqhyp.py``
re-derives them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from analysis import _stats as st
from analysis.mcq import _stats as mcq
from analysis.mcq._rows import mcq_trials

__all__ = [
    "CI_METHOD",
    "GEE_FALLBACKS",
    "Tables",
    "correct_of",
    "dataset_tables",
    "gee_with_fallback",
    "interval_level",
    "mcq_descriptive_values",
    "position_bias_bootstrap",
    "tables",
    "temperature",
]

CI_METHOD = "item-cluster-bootstrap-percentile"


def interval_level(h: dict[str, Any], *, one_bound: bool = False) -> float:
    """The interval level of an interval kind: ``1 - alpha``, or ``1 - 2 alpha`` for one bound.

    ``one_bound`` kinds' rules use one bound (``flip-rate``: ``min_pp`` the lower, ``max_pp``
    the upper), as do ``sides = "one-sided"`` rules: the bound of a ``1 - 2 alpha`` interval
    is a level-alpha one-sided test.
    """
    alpha = float(h.get("alpha") or 0.05)
    one = one_bound or (h.get("sides") or "two-sided") == "one-sided"
    return 1.0 - 2.0 * alpha if one else 1.0 - alpha


def _letters(plan: dict[str, Any]) -> tuple[str, ...]:
    response = plan.get("response") or {}
    return tuple(str(response.get("letters") or "ABCD"))


def _tables(ds: Any, plan: dict[str, Any]) -> tuple[mcq.Trials, mcq.Trials]:
    """(the pooled table, the table by model) of ``ds``, built once and kept on it.

    Pooled over several models, ``model`` is ``""`` and a trial's rep is ``rep + R * j`` (``R``
    the study's largest rep, ``j`` the model's index in the model order), so a (model, rep)
    pair is one replicate and trials pair within a model. With one model both are the same.
    """
    cache = ds.__dict__.get("_mcq_tables")
    if cache is None:
        letters = _letters(plan)
        frame = mcq_trials(ds, letters)
        by_model = mcq.check_trials(frame, letters)
        pooled = by_model
        if ds.several_models:
            index = {m: j for j, m in enumerate(ds.models)}
            top = int(frame["rep"].max())
            frame = frame.assign(
                rep=frame["rep"] + top * frame["model"].map(index).astype(int), model=""
            )
            pooled = mcq.check_trials(frame, letters)
        cache = (pooled, by_model)
        object.__setattr__(ds, "_mcq_tables", cache)
    return (cache[0], cache[1])


def _model_label(table: mcq.Trials) -> str:
    models = sorted({c.model for c in table.cells()})
    if len(models) != 1:
        raise mcq.McqError(f"the table holds models {models}; one was expected")
    return models[0]


def _design(plan: dict[str, Any]) -> tuple[int, int]:
    design = plan["design"]
    return int(design["bootstrap_iterations"]), int(design["bootstrap_seed"])


def position_bias_bootstrap(
    a: Any, b: Any, letters: Sequence[str], iterations: int, seed: int, conf: float
) -> dict[str, Any]:
    """Paired item bootstrap of ``bias(a) - bias(b)`` (``docs/mcq-statistics.md`` §11).

    ``a`` and ``b`` are the rows (DataFrames) of the two conditions. The ``Q`` items of either,
    sorted as strings, are drawn as in §3 (``Generator(PCG64(seed))``, ``integers(0, Q,
    size=(m, Q))`` in row blocks of ``2**18 // Q`` rows); a replicate sums each condition's
    per-item key counts and parsed prediction counts over the drawn items and takes
    ``½·Σ|p_pred − p_truth|`` of each; a replicate in which a condition has no trial or no
    parsed prediction is dropped (``dropped``). Percentile interval as §3.
    """
    names = [str(v) for v in letters]
    items = sorted({str(x) for x in a["item"]} | {str(x) for x in b["item"]})
    position = {x: i for i, x in enumerate(items)}
    q, k = len(items), len(names)
    code = {v: i for i, v in enumerate(names)}

    def counts(rows: Any) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        pred = np.zeros((q, k))
        truth = np.zeros((q, k))
        idx = np.array([position[str(x)] for x in rows["item"]], dtype=np.intp)
        keys = np.array([code[str(x)] for x in rows["key"]], dtype=np.intp)
        np.add.at(truth, (idx, keys), 1.0)
        letter = rows["letter"].to_numpy(dtype=object)
        parsed = rows["letter"].notna().to_numpy(dtype=bool)
        if parsed.any():
            got = np.array([code[str(v)] for v in letter[parsed]], dtype=np.intp)
            np.add.at(pred, (idx[parsed], got), 1.0)
        return pred, truth

    pred_a, truth_a = counts(a)
    pred_b, truth_b = counts(b)
    rng = np.random.Generator(np.random.PCG64(int(seed)))
    reps = np.empty(int(iterations))
    rows = max(1, st.CHUNK_ELEMENTS // q)
    for start in range(0, int(iterations), rows):
        m = min(rows, int(iterations) - start)
        draw = rng.integers(0, q, size=(m, q))
        # how often each item is drawn in each replicate; the counts are integers, so the
        # product sums them exactly, as summing the drawn items' rows would
        times = (
            np.bincount((np.arange(m)[:, None] * q + draw).ravel(), minlength=m * q)
            .reshape(m, q)
            .astype(np.float64)
        )
        values = []
        for pred, truth in ((pred_a, truth_a), (pred_b, truth_b)):
            p = times @ pred
            t = times @ truth
            n_p = p.sum(axis=1, keepdims=True)
            n_t = t.sum(axis=1, keepdims=True)
            with np.errstate(invalid="ignore", divide="ignore"):
                bias = 0.5 * np.abs(p / n_p - t / n_t).sum(axis=1)
            bias[(n_p[:, 0] == 0) | (n_t[:, 0] == 0)] = np.nan
            values.append(bias)
        reps[start : start + m] = values[0] - values[1]
    finite = reps[np.isfinite(reps)]
    if not finite.size:
        raise mcq.McqError(
            "position-bias bootstrap: no replicate has parsed predictions in both conditions"
        )
    lo, hi = np.quantile(finite, [round((1 - conf) / 2, 12), round((1 + conf) / 2, 12)])
    return {
        "lower": float(lo),
        "upper": float(hi),
        "conf": conf,
        "iterations": int(iterations),
        "seed": int(seed),
        "n_items": q,
        "dropped": int(reps.size - finite.size),
        "ci_method": "paired-item-bootstrap-percentile",
    }


def correct_of(table: mcq.Trials, arm: str, model: str, variants: Sequence[str]) -> dict[str, bool]:
    """Each trial of (arm, model) over ``variants`` -> whether it answered correctly."""
    rows = table.rows_in(arm, model, list(variants))
    return dict(zip(rows["trial"].tolist(), rows["correct"].tolist(), strict=True))


def temperature(plan: dict[str, Any], arm: str, model: str) -> float:
    """The arm's sampling temperature: its ``sampling`` one, else the lowest of its models'."""
    spec = (plan.get("arms") or {}).get(arm) or {}
    sampling = spec.get("sampling") or {}
    if "temperature" in sampling:
        return float(sampling["temperature"])
    models = plan.get("models")
    if isinstance(models, dict):
        names = [model] if model in models else list(spec.get("models") or models)
        return min(float(models[m].get("temperature", 1.0)) for m in names)
    return float((plan.get("model") or {}).get("temperature", 1.0))


@dataclass(frozen=True)
class Tables:
    """What a seed-002 statistic computes on: the long-format tables and the plan's settings.

    ``pooled`` has one model label (``model``), ``by_model`` keeps each model's; ``models`` is
    the model order (the GEE's reference model, the order of self-consistency's results);
    ``letters`` the response's letters; ``iterations`` and ``seed`` the design's bootstrap.
    """

    pooled: mcq.Trials
    by_model: mcq.Trials
    plan: dict[str, Any]
    models: tuple[str, ...]
    letters: tuple[str, ...]
    model: str
    iterations: int
    seed: int


def tables(
    pooled: mcq.Trials, by_model: mcq.Trials, plan: dict[str, Any], models: Sequence[str] = ()
) -> Tables:
    """:class:`Tables` of given tables: ``pooled`` (one model label) and ``by_model``.

    ``plan`` needs ``design`` (bootstrap iterations and seed), ``response.letters`` and, for
    self-consistency, the arms' and models' temperatures.
    """
    iterations, seed = _design(plan)
    return Tables(
        pooled,
        by_model,
        plan,
        tuple(models),
        _letters(plan),
        _model_label(pooled),
        iterations,
        seed,
    )


def dataset_tables(ds: Any, plan: dict[str, Any]) -> Tables:
    """:class:`Tables` of a :class:`analysis._analyze.Dataset` (validated once, kept on it).

    Raises :class:`analysis.mcq._stats.McqError` (a ``StatsError``) when the data cannot give the
    tables, naming what is missing.
    """
    pooled, by_model = _tables(ds, plan)
    return tables(pooled, by_model, plan, tuple(ds.models))


GEE_FALLBACKS = ("none", "drop-factor")
"""A ``gee`` hypothesis's declared ``fallback`` (``docs/mcq-statistics.md`` §11)."""


def gee_with_fallback(
    sub: Any, reference: str, factors: dict[str, str], letters: Sequence[str], fallback: Any
) -> tuple[mcq.GeeFit, dict[str, Any]]:
    """The GEE of §11, refitted without a factor at fault when the plan declares a fallback.

    ``fallback = "drop-factor"``: (fit, ``{"fallback": {...}}`` when it was used, else ``{}``).
    A fit that cannot be made (:class:`analysis.mcq._stats.GeeNotFittable`, §8's rule) whose column
    at fault is not a factor, or with no fallback declared, is raised: the hypothesis is then
    not applicable, with the reason.
    """
    dropped: list[str] = []
    reasons: list[str] = []
    while True:
        try:
            fit = mcq.gee_arm_effects(sub, reference, factors, letters=letters)
        except mcq.GeeNotFittable as exc:
            if fallback != "drop-factor" or exc.column not in factors:
                if dropped:
                    raise mcq.GeeNotFittable(
                        f"{exc} (after the declared fallback dropped {', '.join(dropped)})",
                        exc.column,
                    ) from exc
                raise
            del factors[exc.column]
            dropped.append(exc.column)
            reasons.append(str(exc))
            continue
        break
    if not dropped:
        return fit, {}
    return fit, {
        "fallback": {"rule": "drop-factor", "dropped": dropped, "reason": "; ".join(reasons)}
    }


def mcq_descriptive_values(ds: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """``descriptive.mcq``: accuracy per (arm, variant, model) and means over shuffle seeds.

    ``cells``: :func:`analysis.mcq._stats.accuracy_by_cell` (Wilson 95%) on the table by model.
    ``seeds``: for each (arm, model) running two or more ``shuffle`` variants, the accuracy of
    each (keyed by its seed) and :func:`analysis.mcq._stats.mean_over_seeds` (t interval), in arm
    then model order.
    """
    _, by_model = _tables(ds, plan)
    cells = [c.as_dict() for c in mcq.accuracy_by_cell(by_model, letters=_letters(plan))]
    shuffles = {
        name: str(spec.get("seed"))
        for name, spec in (plan.get("variants") or {}).items()
        if isinstance(spec, dict) and spec.get("kind") == "shuffle"
    }
    by_cell = {(c["arm"], c["variant"], c["model"]): c for c in cells}
    seeds = []
    for arm in sorted({c[0] for c in by_cell}):
        for model in sorted({c[2] for c in by_cell if c[0] == arm}):
            summary = _seed_summary(by_cell, shuffles, arm, model)
            if summary is not None:
                seeds.append(summary)
    return {"cells": cells, "seeds": seeds}


def _seed_summary(
    by_cell: dict[tuple[str, str, str], dict[str, Any]],
    shuffles: dict[str, str],
    arm: str,
    model: str,
) -> dict[str, Any] | None:
    """The mean over an (arm, model)'s shuffle seeds, when it ran two or more with accuracies."""
    ran = [v for v in shuffles if (arm, v, model) in by_cell]
    values = {shuffles[v]: by_cell[(arm, v, model)]["accuracy"] for v in ran}
    finite = all(isinstance(x, float) and math.isfinite(x) for x in values.values())
    if len(values) < 2 or not finite:
        return None
    return {
        "arm": arm,
        "model": model,
        "statistic": "accuracy",
        "variants": sorted(ran),
        "summary": mcq.mean_over_seeds(values).as_dict(),
    }
