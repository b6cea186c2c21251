"""Seed 002's registered hypotheses, re-derived from ``docs/mcq-statistics.md`` §11.

The verifier's own second implementation of what ``analysis/mcq_tests.py`` records: the trials
table built from the rebuilt dataset (§11 "The table"), pooled over several models by
renumbering replicates, each hypothesis kind's ``values`` (through :mod:`verify._mcq`), the
decision rule of the interval kinds and ``descriptive.mcq``. Imports nothing from ``ledger``,
``runner`` or ``analysis``; numpy and scipy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats as sps

from verify import _mcq as vm
from verify._restats import CHUNK_ELEMENTS, bootstrap_clustered

__all__ = [
    "INTERVAL_TESTS",
    "MCQ_TESTS",
    "decide_interval",
    "descriptive_values",
    "is_mcq_hypothesis",
    "registers_mcq",
    "values_from_rows",
    "values_of",
]

MCQ_TESTS = ("flip-rate", "position-bias", "voting", "self-consistency", "gee")
INTERVAL_TESTS = ("flip-rate", "position-bias", "voting", "self-consistency")
ORIGINAL = "original"
CI_METHOD = "item-cluster-bootstrap-percentile"


def is_mcq_hypothesis(h: dict[str, Any]) -> bool:
    """§11: the kinds above, and ``mcnemar`` naming ``arm`` or ``variant``."""
    return h["test"] in MCQ_TESTS or (h["test"] == "mcnemar" and ("arm" in h or "variant" in h))


def registers_mcq(plan: dict[str, Any]) -> bool:
    """Whether ``descriptive.mcq`` is part of the plan's results."""
    return any(is_mcq_hypothesis(h) for h in plan.get("hypotheses") or [])


def _letters(plan: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str((plan.get("response") or {}).get("letters") or "ABCD"))


def _level(h: dict[str, Any]) -> float:
    alpha = float(h.get("alpha") or 0.05)
    one = h["test"] == "flip-rate" or (h.get("sides") or "two-sided") == "one-sided"
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


def _model(rows: list[dict[str, Any]]) -> str:
    models = {r["model"] for r in rows}
    if len(models) != 1:
        raise vm.McqStatError(f"the table holds models {sorted(models)}")
    return str(models.pop())


def _bias_bootstrap(
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


def _temperature(plan: dict[str, Any], arm: str, model: str) -> float:
    spec = (plan.get("arms") or {}).get(arm) or {}
    if "temperature" in (spec.get("sampling") or {}):
        return float(spec["sampling"]["temperature"])
    models = plan.get("models")
    if isinstance(models, dict):
        names = [model] if model in models else list(spec.get("models") or models)
        return min(float(models[m].get("temperature", 1.0)) for m in names)
    return float((plan.get("model") or {}).get("temperature", 1.0))


def _gain(answers: list[dict[str, Any]], correct: dict[str, bool]) -> list[float]:
    return [
        float(x["correct"]) - sum(1.0 for t in x["trials"] if correct[t]) / len(x["trials"])
        for x in answers
    ]


def values_of(ds: Any, plan: dict[str, Any], h: dict[str, Any]) -> dict[str, Any]:
    """§11: the ``values`` one seed-002 hypothesis records, recomputed."""
    pooled, by_model = _tables(ds, plan)
    return values_from_rows(pooled, by_model, plan, h, list(ds.models))


def values_from_rows(
    pooled: list[dict[str, Any]],
    by_model: list[dict[str, Any]],
    plan: dict[str, Any],
    h: dict[str, Any],
    models: Sequence[str] = (),
) -> dict[str, Any]:
    """:func:`values_of` on given checked rows (pooled: one model label)."""
    letters = _letters(plan)
    model = _model(pooled)
    design = plan["design"]
    iterations, seed = int(design["bootstrap_iterations"]), int(design["bootstrap_seed"])
    test = h["test"]
    if test == "flip-rate":
        v1, v2 = h["variants"]
        flip = vm.flip_rate_between(
            pooled,
            (h["arm"], v1, model),
            (h["arm"], v2, model),
            h.get("basis", "answer"),
            iterations,
            seed,
            _level(h),
            letters,
        )
        return flip | {"estimate": flip["rate"]}
    if test == "position-bias":
        a, b = h["contrast"]
        variant = h.get("variant") or ORIGINAL
        pa = vm.position_metrics(pooled, (a, variant, model), letters=letters)
        pb = vm.position_metrics(pooled, (b, variant, model), letters=letters)
        rows_a = [r for r in pooled if (r["arm"], r["variant"]) == (a, variant)]
        rows_b = [r for r in pooled if (r["arm"], r["variant"]) == (b, variant)]
        return {
            "a": pa,
            "b": pb,
            "bias_a": pa["bias"],
            "bias_b": pb["bias"],
            "estimate": pa["bias"] - pb["bias"],
            **_bias_bootstrap(rows_a, rows_b, letters, iterations, seed, _level(h)),
        }
    if test == "voting":
        orders = list(h["variants"])
        incomplete = "error" if h.get("incomplete") == "fail" else "exclude"
        vote = vm.permutation_vote(pooled, h["arm"], model, orders, incomplete, letters=letters)
        if not vote["answers"]:
            raise vm.McqStatError("voting: no complete group")
        correct = {r["trial"]: r["correct"] for r in pooled if r["arm"] == h["arm"]}
        gains = _gain(vote["answers"], correct)
        boot = bootstrap_clustered(
            gains,
            [x["item"] for x in vote["answers"]],
            [x["rep"] for x in vote["answers"]],
            iterations,
            seed,
            _level(h),
            unit="question",
        )
        return {
            "vote": vote,
            "n_groups": len(gains),
            "n_items": boot["n_clusters"],
            "excluded": len(vote["exclusions"]),
            "accuracy_vote": vote["accuracy"],
            "accuracy_orders": vote["accuracy"] - boot["estimate"],
            "estimate": boot["estimate"],
            "lower": boot["lower"],
            "upper": boot["upper"],
            "conf": boot["conf"],
            "iterations": boot["iterations"],
            "seed": boot["seed"],
            "ci_method": CI_METHOD,
        }
    if test == "self-consistency":
        variant = h.get("variant") or ORIGINAL
        incomplete = "error" if h.get("incomplete") == "fail" else "exclude"
        present = {r["model"] for r in by_model if r["arm"] == h["arm"]}
        order = list(models)
        ran = sorted(present, key=lambda m: (order.index(m) if m in order else -1, m))
        results, gains, items, runs = [], [], [], []
        for j, m in enumerate(ran):
            sc = vm.self_consistency(
                by_model,
                (h["arm"], variant, m),
                int(h["samples"]),
                _temperature(plan, h["arm"], m),
                incomplete,
                letters=letters,
            )
            results.append(sc)
            correct = {
                r["trial"]: r["correct"]
                for r in by_model
                if (r["arm"], r["model"]) == (h["arm"], m)
            }
            for x, g in zip(sc["answers"], _gain(sc["answers"], correct), strict=True):
                gains.append(g)
                items.append(x["item"])
                runs.append(j)
        if not gains:
            raise vm.McqStatError("self-consistency: no trials")
        boot = bootstrap_clustered(gains, items, runs, iterations, seed, _level(h), unit="question")
        majority = sum(r["correct"] for r in results) / len(gains)
        return {
            "results": results,
            "n_units": len(gains),
            "n_items": boot["n_clusters"],
            "excluded": sum(len(r["exclusions"]) for r in results),
            "accuracy_majority": majority,
            "accuracy_single": majority - boot["estimate"],
            "estimate": boot["estimate"],
            "lower": boot["lower"],
            "upper": boot["upper"],
            "conf": boot["conf"],
            "iterations": boot["iterations"],
            "seed": boot["seed"],
            "ci_method": CI_METHOD,
        }
    if test == "mcnemar":
        if "arm" in h:
            v1, v2 = h["variants"]
            ca, cb = (h["arm"], v1, model), (h["arm"], v2, model)
        else:
            a, b = h["contrast"]
            ca, cb = (a, h["variant"], model), (b, h["variant"], model)
        mc = vm.paired_mcnemar(pooled, ca, cb, letters)
        return mc | {"p_raw": mc["test"]["p"], "estimate": mc["difference"]}
    if test == "gee":
        a, b = h["contrast"]
        rows = [r for r in by_model if r["arm"] in (a, b)]
        if h.get("variant"):
            rows = [r for r in rows if r["variant"] == h["variant"]]
        else:
            shared = {r["variant"] for r in rows if r["arm"] == a} & {
                r["variant"] for r in rows if r["arm"] == b
            }
            rows = [r for r in rows if r["variant"] in shared]
        factors: dict[str, str] = {}
        models_present = {r["model"] for r in rows}
        if len(models_present) > 1:
            factors["model"] = next((m for m in models if m in models_present), min(models_present))
        variants_present = {r["variant"] for r in rows}
        if len(variants_present) > 1:
            order = [str(v) for v in plan.get("variant_order") or []]
            factors["variant"] = next(
                (v for v in order if v in variants_present), min(variants_present)
            )
        dropped: list[str] = []
        while True:  # §11: a declared fallback "drop-factor" refits without the factor at fault
            try:
                fit = vm.gee_arm_effects(rows, b, factors, letters=letters)
                break
            except vm.GeeNotFittable as exc:
                if h.get("fallback") != "drop-factor" or exc.column not in factors:
                    raise
                factors.pop(exc.column)
                dropped.append(exc.column)
        term = next(t for t in fit["terms"] if t["name"] == f"arm[T.{a}]")
        one = (h.get("sides") or "two-sided") == "one-sided"
        out = {
            "fit": fit,
            "term": term["name"],
            "estimate": term["estimate"],
            "odds_ratio": term["odds_ratio"],
            "lower": term["lower"],
            "upper": term["upper"],
            "p_raw": float(sps.norm.sf(term["z"])) if one else term["p"],
        }
        if dropped:
            out["fallback"] = {"rule": "drop-factor", "dropped": dropped, "reason": None}
        return out
    raise vm.McqStatError(f"unknown test {test!r}")


def decide_interval(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """§11's decision rule of an interval kind: (verdict, decided_by)."""
    lower, upper, est = v["lower"], v["upper"], v["estimate"]
    level = f"{round(100 * v['conf'], 6):g}%"
    if h["test"] == "flip-rate":
        if h.get("min_pp") is not None:
            ok = lower is not None and lower * 100 > float(h["min_pp"])
            rule = f"{level} interval lower bound > {float(h['min_pp']):g} pp"
        else:
            ok = upper is not None and upper * 100 < float(h["max_pp"])
            rule = f"{level} interval upper bound < {float(h['max_pp']):g} pp"
    else:
        if (h.get("sides") or "two-sided") == "one-sided":
            ok = lower is not None and lower > 0
            rule = f"{level} interval lower bound > 0"
        else:
            ok = (lower is not None and lower > 0) or (upper is not None and upper < 0)
            rule = f"{level} interval excludes 0"
        if h.get("min_difference_pp") is not None:
            ok = ok and est * 100 >= float(h["min_difference_pp"])
            rule += f" and estimate >= {h['min_difference_pp']} pp"
    verdict = "supported" if ok else "not supported"
    return verdict, {"rule": rule, "estimate": est, "lower": lower, "upper": upper}


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
            ran = sorted(v for v in shuffles if (arm, v, model) in by_cell)
            values = {shuffles[v]: by_cell[(arm, v, model)]["accuracy"] for v in ran}
            if len(values) >= 2 and all(
                isinstance(x, float) and math.isfinite(x) for x in values.values()
            ):
                seeds.append(
                    {
                        "arm": arm,
                        "model": model,
                        "statistic": "accuracy",
                        "variants": ran,
                        "summary": vm.mean_over_seeds(values),
                    }
                )
    return {"cells": cells, "seeds": seeds}
