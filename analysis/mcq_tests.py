"""Seed 002's statistics as registered hypotheses (``docs/mcq-statistics.md`` §11).

:func:`mcq_values` computes one hypothesis of a seed-002 kind (``flip-rate``, ``position-bias``,
``voting``, ``self-consistency``, ``gee``, and ``mcnemar`` between two variants or at one
variant) on a :class:`analysis.analyze.Dataset`; :func:`decide_interval` applies the decision
rule of the interval kinds; :func:`mcq_descriptive` is the ``descriptive.mcq`` result (accuracy
with Wilson intervals per cell, means over shuffle seeds). Everything reads the long-format
table of :mod:`analysis.mcq_rows`, validated once per dataset by :func:`analysis.mcq.check_trials`
and kept on the dataset. Pure functions, no I/O; ``verify/_mcqhyp.py`` re-derives them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats as sps

from analysis import mcq
from analysis import stats as st
from analysis.mcq_rows import ORIGINAL, mcq_trials

__all__ = [
    "INTERVAL_TESTS",
    "MCQ_TESTS",
    "decide_interval",
    "hypothesis_values",
    "interval_level",
    "is_mcq_hypothesis",
    "mcq_descriptive_values",
    "mcq_values",
    "position_bias_bootstrap",
    "registers_mcq",
]

MCQ_TESTS = ("flip-rate", "position-bias", "voting", "self-consistency", "gee")
"""The seed-002 hypothesis kinds (``runner.spec.MCQ_TESTS``)."""
INTERVAL_TESTS = ("flip-rate", "position-bias", "voting", "self-consistency")
"""Kinds decided by an item-bootstrap interval (no p-value)."""
CI_METHOD = "item-cluster-bootstrap-percentile"


def is_mcq_hypothesis(h: dict[str, Any]) -> bool:
    """Whether hypothesis ``h`` (as locked) is computed here rather than by the older tests."""
    return h["test"] in MCQ_TESTS or (h["test"] == "mcnemar" and ("arm" in h or "variant" in h))


def registers_mcq(plan: dict[str, Any]) -> bool:
    """Whether the plan registers a seed-002 hypothesis (then ``descriptive.mcq`` is made)."""
    return any(is_mcq_hypothesis(h) for h in plan.get("hypotheses") or [])


def interval_level(h: dict[str, Any]) -> float:
    """The interval level of an interval kind: ``1 - alpha``, or ``1 - 2 alpha`` for one bound.

    ``flip-rate`` rules use one bound (``min_pp`` the lower, ``max_pp`` the upper), as do
    ``sides = "one-sided"`` rules: the bound of a ``1 - 2 alpha`` interval is a level-alpha
    one-sided test.
    """
    alpha = float(h.get("alpha") or 0.05)
    one = h["test"] == "flip-rate" or (h.get("sides") or "two-sided") == "one-sided"
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


def _correct_of(
    table: mcq.Trials, arm: str, model: str, variants: Sequence[str]
) -> dict[str, bool]:
    rows = table.rows_in(arm, model, list(variants))
    return dict(zip(rows["trial"].tolist(), rows["correct"].tolist(), strict=True))


def _temperature(plan: dict[str, Any], arm: str, model: str) -> float:
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


def mcq_values(ds: Any, plan: dict[str, Any], h: dict[str, Any]) -> dict[str, Any]:
    """The recorded ``values`` of one seed-002 hypothesis on ``ds`` (§11 of the page).

    Interval kinds give ``estimate``, ``lower``, ``upper``, ``conf``; ``mcnemar`` and ``gee``
    give ``p_raw`` and ``estimate``. Raises :class:`analysis.mcq.McqError` (a ``StatsError``)
    when the data cannot give the statistic, naming what is missing.
    """
    pooled, by_model = _tables(ds, plan)
    return hypothesis_values(pooled, by_model, plan, h, tuple(ds.models))


def hypothesis_values(
    pooled: mcq.Trials,
    by_model: mcq.Trials,
    plan: dict[str, Any],
    h: dict[str, Any],
    models: Sequence[str] = (),
) -> dict[str, Any]:
    """:func:`mcq_values` on given tables: ``pooled`` (one model label) and ``by_model``.

    ``models`` is the model order (for the GEE's reference model and the order of the
    self-consistency results); ``plan`` needs ``design`` (bootstrap iterations and seed),
    ``response.letters`` and, for self-consistency, the arms' and models' temperatures.
    """
    letters = _letters(plan)
    model = _model_label(pooled)
    iterations, seed = _design(plan)
    test = h["test"]
    if test == "flip-rate":
        v1, v2 = h["variants"]
        flip = mcq.flip_rate_between(
            pooled,
            (h["arm"], v1, model),
            (h["arm"], v2, model),
            h.get("basis", "answer"),
            iterations,
            seed,
            interval_level(h),
            letters,
        )
        return {**flip.as_dict(), "estimate": flip.rate}
    if test == "position-bias":
        a, b = h["contrast"]
        variant = h.get("variant") or ORIGINAL
        ca, cb = (a, variant, model), (b, variant, model)
        pa = mcq.position_metrics(pooled, ca, letters=letters)
        pb = mcq.position_metrics(pooled, cb, letters=letters)
        paired = position_bias_bootstrap(
            pooled.select(mcq.Condition(*ca)),
            pooled.select(mcq.Condition(*cb)),
            letters,
            iterations,
            seed,
            interval_level(h),
        )
        return {
            "a": pa.as_dict(),
            "b": pb.as_dict(),
            "bias_a": pa.bias,
            "bias_b": pb.bias,
            "estimate": pa.bias - pb.bias,
            **paired,
        }
    if test == "voting":
        orders = list(h["variants"])
        incomplete = "error" if h.get("incomplete") == "fail" else "exclude"
        vote = mcq.permutation_vote(
            pooled,
            h["arm"],
            model,
            orders,
            incomplete,  # type: ignore[arg-type]
            letters=letters,
        )
        if not vote.answers:
            raise mcq.McqError(f"voting over {orders}: no complete group of orders")
        correct = _correct_of(pooled, h["arm"], model, orders)
        gains = [
            float(x.correct) - sum(correct[t] for t in x.trials) / len(x.trials)
            for x in vote.answers
        ]
        boot = st.bootstrap_clustered(
            gains,
            [x.item for x in vote.answers],
            [x.rep for x in vote.answers],
            iterations,
            seed,
            interval_level(h),
            unit="question",
        )
        return {
            "vote": vote.as_dict(),
            "n_groups": len(gains),
            "n_items": boot.n_clusters,
            "excluded": len(vote.exclusions),
            "accuracy_vote": vote.accuracy,
            "accuracy_orders": vote.accuracy - boot.estimate,
            "estimate": boot.estimate,
            "lower": boot.lower,
            "upper": boot.upper,
            "conf": boot.conf,
            "iterations": boot.iterations,
            "seed": boot.seed,
            "ci_method": CI_METHOD,
        }
    if test == "self-consistency":
        variant = h.get("variant") or ORIGINAL
        incomplete = "error" if h.get("incomplete") == "fail" else "exclude"
        ran = sorted(
            {c.model for c in by_model.cells() if c.arm == h["arm"]},
            key=lambda m: (list(models).index(m) if m in models else -1, m),
        )
        results: list[dict[str, Any]] = []
        diffs: list[float] = []
        items: list[str] = []
        runs: list[int] = []
        for j, m in enumerate(ran):
            sc = mcq.self_consistency(
                by_model,
                (h["arm"], variant, m),
                int(h["samples"]),
                _temperature(plan, h["arm"], m),
                incomplete,  # type: ignore[arg-type]
                letters=letters,
            )
            results.append(sc.as_dict())
            correct = _correct_of(by_model, h["arm"], m, [variant])
            for x in sc.answers:
                diffs.append(float(x.correct) - sum(correct[t] for t in x.trials) / len(x.trials))
                items.append(x.item)
                runs.append(j)
        if not diffs:
            raise mcq.McqError(
                f"self-consistency: arm {h['arm']!r} has no trials of variant {variant!r}"
            )
        boot = st.bootstrap_clustered(
            diffs, items, runs, iterations, seed, interval_level(h), unit="question"
        )
        majority = sum(r["correct"] for r in results) / len(diffs)
        return {
            "results": results,
            "n_units": len(diffs),
            "n_items": boot.n_clusters,
            "excluded": sum(len(r["exclusions"]) for r in results),
            "accuracy_majority": majority,
            "accuracy_single": majority - boot.estimate,
            "estimate": boot.estimate,
            "lower": boot.lower,
            "upper": boot.upper,
            "conf": boot.conf,
            "iterations": boot.iterations,
            "seed": boot.seed,
            "ci_method": CI_METHOD,
        }
    if test == "mcnemar":
        if "arm" in h:
            v1, v2 = h["variants"]
            ca, cb = (h["arm"], v1, model), (h["arm"], v2, model)
        else:
            a, b = h["contrast"]
            ca, cb = (a, h["variant"], model), (b, h["variant"], model)
        mc = mcq.paired_mcnemar(pooled, ca, cb, letters)
        if mc.n_pairs == 0:
            raise mcq.McqError(f"mcnemar: {'/'.join(ca)} and {'/'.join(cb)} share no (item, rep)")
        return {**mc.as_dict(), "p_raw": mc.test.p, "estimate": mc.difference}
    if test == "gee":
        a, b = h["contrast"]
        frame = by_model.frame
        keep = frame["arm"].isin([a, b])
        if h.get("variant"):
            keep &= frame["variant"] == h["variant"]
        else:  # the variants both arms ran (arms and variants crossed)
            shared = set(frame.loc[frame["arm"] == a, "variant"]) & set(
                frame.loc[frame["arm"] == b, "variant"]
            )
            keep &= frame["variant"].isin(shared)
        sub = frame.loc[keep.to_numpy()]
        factors: dict[str, str] = {}
        present_models = set(sub["model"])
        if len(present_models) > 1:
            factors["model"] = next((m for m in models if m in present_models), min(present_models))
        present_variants = set(sub["variant"])
        if len(present_variants) > 1:
            order = list(plan.get("variant_order") or [])
            factors["variant"] = next(
                (v for v in order if v in present_variants), min(present_variants)
            )
        fit, used = _gee_with_fallback(sub, b, factors, letters, h.get("fallback"))
        term = next(t for t in fit.terms if t.name == f"arm[T.{a}]")
        one = (h.get("sides") or "two-sided") == "one-sided"
        p = float(sps.norm.sf(term.z)) if one else term.p
        return {
            "fit": fit.as_dict(),
            "term": term.name,
            "estimate": term.estimate,
            "odds_ratio": term.odds_ratio,
            "lower": term.lower,
            "upper": term.upper,
            "p_raw": p,
            **used,
        }
    raise mcq.McqError(f"unknown seed-002 test {test!r}")


GEE_FALLBACKS = ("none", "drop-factor")
"""A ``gee`` hypothesis's declared ``fallback`` (``docs/mcq-statistics.md`` §11)."""


def _gee_with_fallback(
    sub: Any, reference: str, factors: dict[str, str], letters: Sequence[str], fallback: Any
) -> tuple[mcq.GeeFit, dict[str, Any]]:
    """The GEE of §11, refitted without a factor at fault when the plan declares a fallback.

    ``fallback = "drop-factor"``: (fit, ``{"fallback": {...}}`` when it was used, else ``{}``).
    A fit that cannot be made (:class:`analysis.mcq.GeeNotFittable`, §8's rule) whose column
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


def decide_interval(h: dict[str, Any], values: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(verdict, decided_by) of an interval kind (``docs/mcq-statistics.md`` §11)."""
    lower, upper, est = values["lower"], values["upper"], values["estimate"]
    level = f"{round(100 * values['conf'], 6):g}%"
    if h["test"] == "flip-rate":
        if h.get("min_pp") is not None:
            bound = float(h["min_pp"])
            ok = lower is not None and lower * 100 > bound
            rule = f"{level} interval lower bound > {bound:g} pp"
        else:
            bound = float(h["max_pp"])
            ok = upper is not None and upper * 100 < bound
            rule = f"{level} interval upper bound < {bound:g} pp"
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
    return ("supported" if ok else "not supported"), {
        "rule": rule,
        "estimate": est,
        "lower": lower,
        "upper": upper,
    }


def mcq_descriptive_values(ds: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """``descriptive.mcq``: accuracy per (arm, variant, model) and means over shuffle seeds.

    ``cells``: :func:`analysis.mcq.accuracy_by_cell` (Wilson 95%) on the table by model.
    ``seeds``: for each (arm, model) running two or more ``shuffle`` variants, the accuracy of
    each (keyed by its seed) and :func:`analysis.mcq.mean_over_seeds` (t interval), in arm then
    model order.
    """
    _, by_model = _tables(ds, plan)
    cells = [c.as_dict() for c in mcq.accuracy_by_cell(by_model, letters=_letters(plan))]
    shuffles = {
        name: str(spec.get("seed"))
        for name, spec in (plan.get("variants") or {}).items()
        if isinstance(spec, dict) and spec.get("kind") == "shuffle"
    }
    seeds = []
    by_cell = {(c["arm"], c["variant"], c["model"]): c for c in cells}
    for arm in sorted({c[0] for c in by_cell}):
        for model in sorted({c[2] for c in by_cell if c[0] == arm}):
            values = {
                shuffles[v]: by_cell[(arm, v, model)]["accuracy"]
                for v in shuffles
                if (arm, v, model) in by_cell
            }
            if len(values) >= 2 and all(
                isinstance(x, float) and math.isfinite(x) for x in values.values()
            ):
                summary = mcq.mean_over_seeds(values)
                seeds.append(
                    {
                        "arm": arm,
                        "model": model,
                        "statistic": "accuracy",
                        "variants": sorted(v for v in shuffles if (arm, v, model) in by_cell),
                        "summary": summary.as_dict(),
                    }
                )
    return {"cells": cells, "seeds": seeds}
