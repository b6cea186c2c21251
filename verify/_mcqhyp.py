"""Seed 002's registered hypotheses, re-derived from ``docs/mcq-statistics.md`` §11.

The verifier's own second implementation of what ``analysis/mcq/_kinds.py`` records: the trials
table built from the rebuilt dataset (§11 "The table"), pooled over several models by
renumbering replicates, the helpers the kinds' ``values`` share (each kind's own module in
:mod:`verify._statistics` computes them, through :mod:`verify._mcq`) and ``descriptive.mcq``.
Imports nothing from ``ledger``, ``runner`` or ``analysis``; numpy and scipy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from verify import _mcq as vm
from verify._restats import CHUNK_ELEMENTS

__all__ = [
    "CI_METHOD",
    "ORIGINAL",
    "bias_bootstrap",
    "bootstrap_design",
    "descriptive_values",
    "gains",
    "incomplete_rule",
    "level",
    "pooled_model",
    "temperature",
]

ORIGINAL = "original"
CI_METHOD = "item-cluster-bootstrap-percentile"


def _letters(plan: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str((plan.get("response") or {}).get("letters") or "ABCD"))


def level(h: dict[str, Any], one_sided: bool = False) -> float:
    """§11: the interval's level, 1 − 2 alpha when one-sided (``one_sided``: always)."""
    alpha = float(h.get("alpha") or 0.05)
    one = one_sided or (h.get("sides") or "two-sided") == "one-sided"
    return 1.0 - 2.0 * alpha if one else 1.0 - alpha


def _rows(ds: Any) -> list[dict[str, Any]]:
    """§11 "The table": one row per scored trial, in the dataset's order."""
    item_of: dict[str, dict[str, Any]] = {}
    for i in ds.items:
        if i["trial"] in item_of:
            raise vm.McqStatError(f"trial {i['trial']!r} has more than one scored item")
        item_of[i["trial"]] = i
    out = []
    for t in ds.trials:
        i = item_of.get(t["trial"])
        if i is None:
            raise vm.McqStatError(f"trial {t['trial']!r} has no scored item")
        ok = t["status"] == "ok" and i["answer"] is not None
        answer = i.get("answer_original", i["answer"])
        key_original = i.get("truth_original")
        out.append(
            {
                "trial": t["trial"],
                "item": t["stimulus"],
                "arm": t["arm"],
                "model": t["model"] or "",
                "variant": t["variant"] or ORIGINAL,
                "rep": int(t["rep"]),
                "key": i["truth"],
                "key_original": key_original if key_original is not None else i["truth"],
                "letter": i["answer"] if ok else None,
                "answer": answer if ok and answer is not None else None,
                "correct": bool(i["correct"]),
                "parse": t["status"],
            }
        )
    return out


def _tables(ds: Any, plan: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pooled rows, rows by model): pooled, ``model = ""`` and ``rep + R * j``."""
    cache = ds.__dict__.get("_mcq_rows")
    if cache is None:
        letters = _letters(plan)
        by_model = vm.check_trials(_rows(ds), letters)
        pooled = by_model
        if ds.several_models:
            index = {m: j for j, m in enumerate(ds.models)}
            top = max(r["rep"] for r in by_model)
            pooled = vm.check_trials(
                [r | {"rep": r["rep"] + top * index[r["model"]], "model": ""} for r in by_model],
                letters,
            )
        cache = (pooled, by_model)
        ds.__dict__["_mcq_rows"] = cache
    return cache[0], cache[1]


def pooled_model(rows: list[dict[str, Any]]) -> str:
    """The one model label of a checked table."""
    models = {r["model"] for r in rows}
    if len(models) != 1:
        raise vm.McqStatError(f"the table holds models {sorted(models)}")
    return str(models.pop())


def bias_bootstrap(
    a: list[dict[str, Any]],
    b: list[dict[str, Any]],
    letters: Sequence[str],
    iterations: int,
    seed: int,
    conf: float,
) -> dict[str, Any]:
    """§11 position-bias: the paired item bootstrap of bias(a) − bias(b)."""
    names = [str(v) for v in letters]
    items = sorted({str(r["item"]) for r in a} | {str(r["item"]) for r in b})
    where = {x: i for i, x in enumerate(items)}
    q, k = len(items), len(names)

    def counts(rows: list[dict[str, Any]]) -> tuple[Any, Any]:
        pred = np.zeros((q, k))
        truth = np.zeros((q, k))
        for r in rows:
            truth[where[str(r["item"])], names.index(r["key"])] += 1
            if r["letter"] is not None:
                pred[where[str(r["item"])], names.index(r["letter"])] += 1
        return pred, truth

    parts = [counts(a), counts(b)]
    rng = np.random.Generator(np.random.PCG64(int(seed)))
    reps = np.empty(int(iterations))
    step = max(1, CHUNK_ELEMENTS // q)
    for start in range(0, int(iterations), step):
        stop = min(int(iterations), start + step)
        draw = rng.integers(0, q, size=(stop - start, q))
        bias = []
        for pred, truth in parts:
            p, t = pred[draw].sum(axis=1), truth[draw].sum(axis=1)
            n_p, n_t = p.sum(axis=1), t.sum(axis=1)
            value = np.full(stop - start, np.nan)
            ok = (n_p > 0) & (n_t > 0)
            value[ok] = 0.5 * np.abs(p[ok] / n_p[ok, None] - t[ok] / n_t[ok, None]).sum(axis=1)
            bias.append(value)
        reps[start:stop] = bias[0] - bias[1]
    finite = reps[np.isfinite(reps)]
    if not finite.size:
        raise vm.McqStatError("position-bias bootstrap: no usable replicate")
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


def temperature(plan: dict[str, Any], arm: str, model: str) -> float:
    """The sampling temperature of an arm's model (self-consistency, §11)."""
    spec = (plan.get("arms") or {}).get(arm) or {}
    if "temperature" in (spec.get("sampling") or {}):
        return float(spec["sampling"]["temperature"])
    models = plan.get("models")
    if isinstance(models, dict):
        names = [model] if model in models else list(spec.get("models") or models)
        return min(float(models[m].get("temperature", 1.0)) for m in names)
    return float((plan.get("model") or {}).get("temperature", 1.0))


def gains(answers: list[dict[str, Any]], correct: dict[str, bool]) -> list[float]:
    """Per unit: the combined answer's correctness less the mean of its trials'."""
    return [
        float(x["correct"]) - sum(1.0 for t in x["trials"] if correct[t]) / len(x["trials"])
        for x in answers
    ]


def bootstrap_design(plan: dict[str, Any]) -> tuple[int, int]:
    """The design's bootstrap (iterations, seed)."""
    design = plan["design"]
    return int(design["bootstrap_iterations"]), int(design["bootstrap_seed"])


def incomplete_rule(h: dict[str, Any]) -> str:
    """§11: what an incomplete group does (``error`` when the hypothesis says ``fail``)."""
    return "error" if h.get("incomplete") == "fail" else "exclude"


def descriptive_values(ds: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """§11 ``descriptive.mcq``: Wilson per cell and the t interval over shuffle seeds."""
    _, by_model = _tables(ds, plan)
    cells = vm.accuracy_by_cell(by_model, letters=_letters(plan))
    shuffles = {
        name: str(spec.get("seed"))
        for name, spec in (plan.get("variants") or {}).items()
        if isinstance(spec, dict) and spec.get("kind") == "shuffle"
    }
    by_cell = {(c["arm"], c["variant"], c["model"]): c for c in cells}
    seeds = []
    for arm in sorted({c[0] for c in by_cell}):
        for model in sorted({c[2] for c in by_cell if c[0] == arm}):
            summary = _over_seeds(by_cell, shuffles, arm, model)
            if summary is not None:
                seeds.append(summary)
    return {"cells": cells, "seeds": seeds}


def _over_seeds(
    by_cell: dict[tuple[str, str, str], dict[str, Any]],
    shuffles: dict[str, str],
    arm: str,
    model: str,
) -> dict[str, Any] | None:
    """One (arm, model)'s accuracy over its shuffle seeds, if it ran two with finite accuracy."""
    ran = sorted(v for v in shuffles if (arm, v, model) in by_cell)
    values = {shuffles[v]: by_cell[(arm, v, model)]["accuracy"] for v in ran}
    if len(values) < 2 or not all(
        isinstance(x, float) and math.isfinite(x) for x in values.values()
    ):
        return None
    return {
        "arm": arm,
        "model": model,
        "statistic": "accuracy",
        "variants": ran,
        "summary": vm.mean_over_seeds(values),
    }
