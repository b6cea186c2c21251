"""``exploratory.*`` results (analysis.md §3, §8).

Part of the science checks (:mod:`verify._science`); imports nothing from ``ledger``,
``runner`` or ``analysis``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

from verify import _restats as st
from verify._recompute.archive import TUMBLING_E
from verify._recompute.dataset import ItemTable, _Dataset, _labels
from verify._recompute.model import _model
from verify._recompute.pairs import (
    _answer,
    _pair_accuracies,
    _paired_items,
    _paired_t_means,
    _wrong_counts,
)
from verify._recompute.results import _guard, _Result


def _error_spread(
    it: ItemTable, labels: tuple[str, ...], tumbling: bool, oriented: bool
) -> dict[str, Any]:
    """The wrong answers: per label, their chi-square tests, the canonical-right share."""
    wrong = [
        (str(t), str(a))
        for t, a, ok in zip(it.truth, it.answer, it.correct, strict=True)
        if not ok and a in labels
    ]
    if not wrong:
        return {}
    values: dict[str, Any] = {}
    if tumbling:
        values["canonical_right_share"] = st.canonical_share(
            [t for t, _ in wrong], [a for _, a in wrong]
        )
    counts = _wrong_counts(it, labels)
    name = "error_directions" if oriented else "error_answers"
    values[name] = dict(zip(labels, counts, strict=True))
    values["error_chi_square"] = _or_error(lambda: st.chi_square_gof(counts))
    values["error_chi_square_excluding_truth"] = _or_error(
        lambda: _excluding_truth(counts, wrong, labels)
    )
    return values


def _or_error(compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A member that may not be computable: ``{"error": ...}`` instead (text not compared)."""
    try:
        return compute()
    except st.StatError:
        return {"error": None}


def _excluding_truth(
    counts: list[int], wrong: list[tuple[str, str]], labels: tuple[str, ...]
) -> dict[str, Any]:
    """The wrong answers' chi-square against the null that never gives the truth."""
    shares = st.error_null_excluding_truth([t for t, _ in wrong], labels)
    kept = [k for k, sh in enumerate(shares) if sh > 0]
    return st.chi_square_gof([counts[k] for k in kept], [shares[k] for k in kept]) | {
        "labels": [labels[k] for k in kept]
    }


def _by_row(it: ItemTable) -> dict[str, Any]:
    """A tumbling-E chart's accuracy per row."""
    rows: dict[int, list[bool]] = {}
    for row, ok in zip(it.row, it.correct, strict=True):
        rows.setdefault(int(row), []).append(bool(ok))
    return {
        str(row): {"correct": sum(c), "n": len(c), "accuracy": sum(c) / len(c)}
        for row, c in sorted(rows.items())
    }


def _errors(
    it: ItemTable, labels: tuple[str, ...], tumbling: bool, oriented: bool
) -> dict[str, Any]:
    """``exploratory.errors.<arm>``: confusion, the wrong answers' spread, position bias."""
    if not it:
        raise st.StatError("no parseable responses in this arm")
    answers = [_answer(a) for a in it.answer]
    truth = [str(t) for t in it.truth]
    values: dict[str, Any] = {"confusion": st.confusion_matrix(truth, answers, labels)}
    values.update(_error_spread(it, labels, tumbling, oriented))
    if tumbling:
        values["accuracy_by_row"] = _by_row(it)
    values["position_bias"] = st.position_bias_tvd(answers, truth, labels)
    return values


def _pair(ds: _Dataset, design: dict[str, Any], tumbling: bool, a: str, b: str) -> dict[str, Any]:
    """``exploratory.pair.<a>-<b>``: every test of the pair, registered or not."""
    values: dict[str, Any] = {}
    left, right = _paired_items(ds, a, b)
    if left:
        values["mcnemar"] = st.mcnemar_paired(
            [bool(c) for c in left.correct], [bool(c) for c in right.correct]
        )
        values["flip_rate"] = st.flip_rate(
            [_answer(v) for v in left.answer], [_answer(v) for v in right.answer]
        )
    x, y = _pair_accuracies(ds, a, b)
    values["independent_t"] = st.independent_t(x, y)
    paired_t = _paired_t_means(ds, a, b)
    if paired_t is not None:
        values["paired_t"] = paired_t
    values["bootstrap_diff"] = st.bootstrap_diff(
        x, y, int(design["bootstrap_iterations"]), design["bootstrap_seed"]
    )
    binary = all(v in (0.0, 1.0) for v in [*x, *y])
    if not tumbling and x and y and binary:  # one answer per trial (statistics.md)
        values["newcombe"] = st.newcombe_diff(
            round(math.fsum(x)), len(x), round(math.fsum(y)), len(y)
        )
    return values


def _pairs(
    ds: _Dataset, plan: dict[str, Any], design: dict[str, Any], tumbling: bool
) -> list[_Result]:
    """``exploratory.pair.<a>-<b>`` of every hypothesis contrast, in (a, b) order."""
    contrasts = {
        (h["contrast"][0], h["contrast"][1]) for h in plan["hypotheses"] if h.get("contrast")
    }
    return [
        _guard(_Result(f"exploratory.pair.{a}-{b}"), partial(_pair, ds, design, tumbling, a, b))
        for a, b in sorted(contrasts)
    ]


def _run_of(ds: _Dataset, r: dict[str, Any], pooled: bool) -> Any:
    """A trial's run: its replicate, with its model when pooled, its variant with variants."""
    if not (ds.variants or pooled):
        return r["rep"]
    run = f"{r['model']}|{r['rep']}" if pooled else str(r["rep"])
    return (f"{r['variant']}|" if ds.variants else "") + run


def _question_run(
    ds: _Dataset, design: dict[str, Any], arm: str, model: str | None
) -> dict[str, Any]:
    """``exploratory.question_run.<arm>[@<model>]``: the (question, run) bootstrap."""
    t = [r for r in ds.analysable() if r["arm"] == arm]
    if model is not None:
        t = [r for r in t if r["model"] == model]
    pooled = model is None and ds.several_models  # a run: (model, replicate)
    return st.bootstrap_clustered(
        [r["accuracy"] for r in t],
        [r["stimulus"] for r in t],
        [_run_of(ds, r, pooled) for r in t],
        int(design["bootstrap_iterations"]),
        design["bootstrap_seed"],
    )


def _question_runs(ds: _Dataset, design: dict[str, Any]) -> list[_Result]:
    out = []
    for arm in ds.arms:
        ran = {t["model"] for t in ds.trials if t["arm"] == arm}
        for model in [None] + [m for m in ds.models if m in ran and ds.several_models]:
            name = arm if model is None else f"{arm}@{model}"
            out.append(
                _guard(
                    _Result(f"exploratory.question_run.{name}"),
                    partial(_question_run, ds, design, arm, model),
                )
            )
    return out


def _exploratory(
    ds: _Dataset, plan: dict[str, Any], recorded: dict[str, Any] | None = None
) -> list[_Result]:
    """Every ``exploratory.*`` result of analysis.md §3, in its order."""
    out: list[_Result] = []
    items = ds.analysable_items()
    labels = _labels(plan)
    parser = (plan.get("response") or {}).get("parser", TUMBLING_E)
    tumbling = parser == TUMBLING_E
    oriented = parser in (TUMBLING_E, "orientation-word")
    for arm in ds.arms if labels is not None else []:
        it = items.where("arm", arm)
        errors = partial(_errors, it, labels or (), tumbling, oriented)
        out.append(_guard(_Result(f"exploratory.errors.{arm}"), errors))
    design = plan["design"]
    out.extend(_pairs(ds, plan, design, tumbling))
    if parser == "orientation-word" and labels is not None:
        out.append(_by_truth(ds, plan, labels))
    if tumbling and _nested_pairs(plan):
        out.append(_by_stimulus(ds, plan))
    out.extend(_question_runs(ds, design))
    if ds.several_models:
        out.append(_model(ds, plan, True, (recorded or {}).get("exploratory.arm_by_model"))[0])
    return out


def _nested_pairs(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """analysis.md §3 exploratory.by_stimulus: (a, b) with b's components inside a's."""
    arms: dict[str, Any] = plan["arms"] if isinstance(plan.get("arms"), dict) else {}
    comps = {a: set((arms[a] or {}).get("components") or []) for a in sorted(arms)}
    return [(a, b) for a in comps for b in comps if a != b and comps[b] < comps[a]]


def _by_stimulus(ds: _Dataset, plan: dict[str, Any]) -> _Result:
    """analysis.md §3 exploratory.by_stimulus: Welch t per dismantling pair and stimulus."""

    def compute() -> dict[str, Any]:
        trials = ds.analysable()
        stimuli = sorted({str(t["stimulus"]) for t in trials})
        contrasts: dict[str, Any] = {}
        for a, b in _nested_pairs(plan):
            row: dict[str, Any] = {}
            for stimulus in stimuli:
                x = [
                    t["accuracy"]
                    for t in trials
                    if str(t["stimulus"]) == stimulus and t["arm"] == a
                ]
                y = [
                    t["accuracy"]
                    for t in trials
                    if str(t["stimulus"]) == stimulus and t["arm"] == b
                ]
                try:
                    row[stimulus] = st.independent_t(x, y)
                except st.StatError:
                    row[stimulus] = {"error": None}
            contrasts[f"{a}-{b}"] = row
        return {"stimuli": stimuli, "contrasts": contrasts, "note": None}

    return _guard(_Result("exploratory.by_stimulus"), compute)


def _truth_pairs(plan: dict[str, Any], arms: list[str]) -> list[tuple[str, str]]:
    """analysis.md §3 exploratory.by_truth: the arm pairs.

    (full arm, every other arm), then each hypothesis contrast not yet listed in either order.
    """
    full = sorted(a for a, spec in plan.get("arms", {}).items() if spec.get("role") == "full")
    pairs = [(full[0], arm) for arm in arms if arm != full[0]] if full else []
    for h in plan["hypotheses"]:
        a, b = str(h["contrast"][0]), str(h["contrast"][1])
        if (a, b) not in pairs and (b, a) not in pairs:
            pairs.append((a, b))
    return pairs


def _by_truth(ds: _Dataset, plan: dict[str, Any], labels: tuple[str, ...]) -> _Result:
    """analysis.md §3 exploratory.by_truth: Wilson per (arm, truth), Newcombe per contrast."""

    def compute() -> dict[str, Any]:
        counts: dict[str, dict[str, tuple[int, int]]] = {arm: {} for arm in ds.arms}
        items = ds.analysable_items()
        for arm, truth, ok in zip(items.column("arm"), items.truth, items.correct, strict=True):
            if str(truth) in labels:
                k, n = counts[arm].get(str(truth), (0, 0))
                counts[arm][str(truth)] = (k + bool(ok), n + 1)
        cells = {
            arm: {
                label: {
                    "correct": k,
                    "n": n,
                    "wilson": st.wilson(k, n) if n else None,
                }
                for label in labels
                for k, n in [counts[arm].get(label, (0, 0))]
            }
            for arm in ds.arms
        }
        contrasts: dict[str, Any] = {}
        for a, b in _truth_pairs(plan, list(ds.arms)):
            if a not in counts or b not in counts:
                continue
            contrasts[f"{a}-{b}"] = {}
            for label in labels:
                (ka, na), (kb, nb) = counts[a].get(label, (0, 0)), counts[b].get(label, (0, 0))
                try:
                    value: dict[str, Any] = st.newcombe_diff(ka, na, kb, nb)
                except (st.StatError, ZeroDivisionError):
                    value = {"error": None}
                contrasts[f"{a}-{b}"][label] = value
        return {"labels": list(labels), "cells": cells, "contrasts": contrasts, "note": None}

    return _guard(_Result("exploratory.by_truth"), compute)
