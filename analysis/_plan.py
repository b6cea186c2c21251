"""``ledger plan STUDY``: design diagnostics by simulation, before the lock.

For each replicate setting and each scenario of ``[plan]`` (``runner._planspec``), ``studies``
trial datasets are drawn (``docs/planning.md`` §2, a documented draw order from
``numpy.random.default_rng([seed, setting, scenario, study])``) and the study's own registered
analysis is run on each: the locked mixed model (:func:`analysis._analyze.fit_model`), every
hypothesis's test and decision rule (:func:`analysis._analyze.hypothesis_results`) and, when the
plan has ``lmm`` hypotheses, ``sensitivity.lmm`` (:func:`analysis._analyze.sensitivity_lmm`).
From the per-study verdicts and intervals come the power or type-I error of every hypothesis,
the share "not computed", the verdicts' distribution and the coverage of each interval of
its truth. Nothing is sent to a model. The record, ``plan/plan.json``, is locked with the
study (role ``plan``) and the verifier re-runs it from its seed (``verify/_plan.py``).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy import stats as sps

from analysis import _analyze as an
from analysis import statistics
from analysis._errors import AnalysisError
from analysis._rows import split_trial, trial_variant
from analysis._stats import closed_form_fits
from ledger import PostgresLocation, RemoteLocation
from runner import (
    PLAN_FILE,
    PLAN_VERSION,
    PlanSpec,
    Scenario,
    lock_warnings,
    plan_inputs,
    plan_stimuli,
)

__all__ = [
    "PLAN_TESTS",
    "PlanError",
    "PlanRun",
    "lock_warnings",
    "plan_study",
    "population_truth",
    "simulate_trials",
]

PLAN_TESTS: Final = tuple(k for k, s in statistics.REGISTRY.items() if s.plannable)
"""The registered tests ``ledger plan`` can simulate (trial-level outcomes): the kinds of
:data:`analysis.statistics.REGISTRY` marked ``plannable``. A mixed-model kind's interval
estimates the population contrast (stimuli a random sample); the others estimate the
contrast over the study's own stimuli (``docs/planning.md`` §4)."""
SENSITIVITY_INTERVALS: Final = ("probe_by_arm", "probe_by_arm_arm_residual", "cluster_bootstrap")
"""The ``sensitivity.lmm`` intervals whose coverage the plan reports (population truth)."""
_STAMP: Final = "2026-01-01T00:00:00Z"
POOL_MIN_SECONDS: Final = 5.0
"""A plan estimated to take less than this in one process runs in it, whatever ``jobs``:
starting the workers (a fork, or a spawn that imports the packages again) would cost more
than they save. The record does not depend on it."""


class PlanError(AnalysisError):
    """A plan that cannot be run: the message names the field or file at fault."""


@dataclass(frozen=True)
class PlanRun:
    """What :func:`plan_study` did: the record, where it went, and what it cost."""

    record: dict[str, Any]
    path: Path | None
    seconds: float
    estimate_seconds: float
    locked_match: bool | None = None
    """On a locked study: whether this run equals the locked plan (nothing is written)."""


# --------------------------------------------------------------------------- the design


@dataclass(frozen=True)
class _Design:
    """The simulated trials of one replicate setting, sorted (``docs/planning.md`` §2)."""

    trials: list[str]
    arm: list[str]
    model: list[str]
    stimulus: list[str]
    variant: list[str]
    rep: list[int]
    cells: dict[str, list[tuple[str, str]]]
    """Each arm's (model, variant) cells, sorted (:func:`_cells`), found once per design."""
    levels: dict[str, list[str]]
    """``arm``, ``model``, ``stimulus``, ``variant``: the column's distinct values, sorted."""
    codes: dict[str, npt.NDArray[np.intp]]
    """Each trial's position in its column's :attr:`levels`: what every simulated study of
    the design shares (``docs/planning.md`` §3), found once per design."""


def _design(trial_ids: Sequence[str]) -> _Design:
    keyed = []
    for t in trial_ids:
        arm, model, stim, rep = split_trial(t)
        keyed.append(((arm, model or "", stim, trial_variant(t) or "", int(rep)), t))
    keyed.sort()
    cells: dict[str, set[tuple[str, str]]] = {}
    for k, _ in keyed:
        cells.setdefault(k[0], set()).add((k[1], k[3]))
    columns: dict[str, list[str]] = {
        name: [str(k[i]) for k, _ in keyed]
        for i, name in enumerate(("arm", "model", "stimulus", "variant"))
    }
    levels = {name: sorted(set(col)) for name, col in columns.items()}
    codes = {}
    for name, col in columns.items():
        index = {level: i for i, level in enumerate(levels[name])}
        codes[name] = np.asarray([index[x] for x in col], dtype=np.intp)
    return _Design(
        [t for _, t in keyed],
        columns["arm"],
        columns["model"],
        columns["stimulus"],
        columns["variant"],
        [k[4] for k, _ in keyed],
        {arm: sorted(c) for arm, c in cells.items()},
        levels,
        codes,
    )


def _clip_mean(m: float, s: float) -> float:
    """``E[clip(X, 0, 1)]`` for ``X ~ N(m, s²)`` (``m`` itself clipped when ``s = 0``)."""
    if s <= 0:
        return min(1.0, max(0.0, m))
    a, b = (0 - m) / s, (1 - m) / s
    cdf, pdf = sps.norm.cdf, sps.norm.pdf
    return float(m * (cdf(b) - cdf(a)) + s * (pdf(a) - pdf(b)) + (1 - cdf(b)))


def _cells(d: _Design, arm: str) -> list[tuple[str, str]]:
    """The (model, variant) cells an arm runs, sorted."""
    return d.cells.get(arm, [])


def population_truth(sc: Scenario, d: _Design, a: str, b: str) -> float:
    """The population contrast ``a − b``: each arm's mean over its (model, variant) cells.

    ``normal``: ``rate + shifts`` (the stimulus effects have mean 0). ``binomial``: the mean of
    ``clip(rate + shifts + u + w, 0, 1)`` over the stimulus effects, in closed form.
    """

    def mean(arm: str) -> float:
        out = []
        for m, v in _cells(d, arm):
            centre = sc.rates[arm] + sc.model_shift.get(m, 0.0) + sc.variant_shift.get(v, 0.0)
            if sc.distribution == "normal":
                out.append(centre)
            else:
                out.append(_clip_mean(centre, math.hypot(sc.stimulus_sd, sc.stimulus_arm_sd)))
        return float(np.mean(out))

    return mean(a) - mean(b)


def _conditional_truth(
    sc: Scenario,
    d: _Design,
    u: dict[str, float],
    w: dict[tuple[str, str], float],
    a: str,
    b: str,
    stimuli: Sequence[str],
) -> float:
    """The contrast over these stimuli given the drawn effects (each stimulus weighted alike)."""

    def value(arm: str, s: str) -> float:
        out = []
        for m, v in _cells(d, arm):
            centre = (
                sc.rates[arm]
                + sc.model_shift.get(m, 0.0)
                + sc.variant_shift.get(v, 0.0)
                + u[s]
                + w[(s, arm)]
            )
            out.append(centre if sc.distribution == "normal" else min(1.0, max(0.0, centre)))
        return float(np.mean(out))

    return float(np.mean([value(a, s) - value(b, s) for s in stimuli]))


Effects = tuple[pd.DataFrame, dict[str, float], dict[tuple[str, str], float]]


def simulate_trials(
    sc: Scenario, d: _Design, stimuli: dict[str, dict[str, Any]], rng: np.random.Generator
) -> Effects:
    """One simulated study's trial table, and the drawn stimulus and stimulus × arm effects.

    Draw order (``docs/planning.md`` §2): ``standard_normal(S)`` for the S analysed stimuli
    (sorted ids), ``standard_normal((S, A))`` for stimulus × arm (arms sorted), ``random(N)``
    for parse failures, then ``standard_normal(N)`` (normal) or ``binomial(n_items, p)``
    (binomial), all over the N trials in sorted order.
    """
    analysed = sorted(s for s, info in stimuli.items() if not info["control"])
    arms = sorted(sc.rates)
    zu = rng.standard_normal(len(analysed))
    zw = rng.standard_normal((len(analysed), len(arms)))
    u = {s: sc.stimulus_sd * float(zu[i]) for i, s in enumerate(analysed)}
    w = {
        (s, a): sc.stimulus_arm_sd * float(zw[i, j])
        for i, s in enumerate(analysed)
        for j, a in enumerate(arms)
    }
    n = len(d.trials)
    parse = rng.random(n)
    # per level, then taken by each trial's codes (the design's, found once): each trial's
    # mean is the same sum, in the same order, of the same doubles as summed per trial
    arm_of, stimulus_of = d.codes["arm"], d.codes["stimulus"]
    arm_levels, stimulus_levels = d.levels["arm"], d.levels["stimulus"]
    centre = (
        np.array([float(sc.rates[a]) for a in arm_levels])[arm_of]
        + np.array([float(sc.model_shift.get(m, 0.0)) for m in d.levels["model"]])[d.codes["model"]]
        + np.array([float(sc.variant_shift.get(v, 0.0)) for v in d.levels["variant"]])[
            d.codes["variant"]
        ]
        + np.array([float(u.get(s, 0.0)) for s in stimulus_levels])[stimulus_of]
        + np.array(
            [[float(w.get((s, a), 0.0)) for a in arm_levels] for s in stimulus_levels]
        ).reshape(len(stimulus_levels), len(arm_levels))[stimulus_of, arm_of]
    )
    items = np.array([int(stimuli[s]["items"]) for s in stimulus_levels], dtype=np.int64)[
        stimulus_of
    ]
    if sc.distribution == "normal":
        sd = np.array([float(sc.residual_sd[a]) for a in arm_levels])[arm_of]
        acc = centre + sd * rng.standard_normal(n)
        correct = np.rint(acc * items).astype(np.int64)
    else:
        correct = rng.binomial(items, np.clip(centre, 0.0, 1.0)).astype(np.int64)
        acc = correct / items
    failed = parse < np.array([float(sc.parse_failure[a]) for a in arm_levels])[arm_of]
    control = np.array([bool(stimuli[s]["control"]) for s in stimulus_levels], dtype=bool)[
        stimulus_of
    ]
    acc = np.where(failed, 0.0, acc)
    frame = pd.DataFrame(
        {
            "trial": d.trials,
            "arm": d.arm,
            "model": d.model,
            "stimulus": d.stimulus,
            "variant": d.variant,
            "rep": d.rep,
            "response_seq": np.arange(n),
            "status": np.where(failed, "unparseable", "ok"),
            "n_items": items,
            "n_answered": np.where(failed, 0, items),
            "n_correct": np.where(failed, 0, correct),
            "accuracy": acc,
            "control": control,
            "excluded": failed,
        }
    )
    return frame, u, w


# --------------------------------------------------------------------------- one study


def _interval(h: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """The registered interval of a hypothesis result: (lower, upper), None bounds as ∓inf."""

    def bound(v: Any, default: float) -> float:
        return float(v) if isinstance(v, int | float) and math.isfinite(v) else default

    out: dict[str, Any] = {}
    if "lower" not in values:  # a t-test's interval (an equivalence has none)
        if "ci_lower" in values:
            out["registered"] = (
                bound(values.get("ci_lower"), -math.inf),
                bound(values.get("ci_upper"), math.inf),
            )
        return out
    out["registered"] = (
        bound(values.get("lower"), -math.inf),
        bound(values.get("upper"), math.inf),
    )
    two = values.get("ci_two_sided")
    if isinstance(two, list) and len(two) == 2:
        out["two_sided"] = (bound(two[0], -math.inf), bound(two[1], math.inf))
    return out


def _run_one(
    plan: dict[str, Any],
    spec: PlanSpec,
    sc: Scenario,
    d: _Design,
    stimuli: dict[str, dict[str, Any]],
    rng: np.random.Generator,
    analysed_ids: list[str],
) -> dict[str, Any]:
    """Simulate one study and run the registered analysis on it: per-hypothesis numbers."""
    with closed_form_fits(), an.remembered_fits():
        return _analyse_one(plan, spec, sc, d, stimuli, rng, analysed_ids)


def _simulated_dataset(plan: dict[str, Any], frame: pd.DataFrame) -> an.Dataset:
    """The analysis dataset of one simulated study's trials (no items: trial outcomes only)."""
    if not (plan.get("analysis") or {}).get("exclude_unparseable", True):
        frame["excluded"] = False  # load_dataset: an unparseable trial then counts as 0
    items = pd.DataFrame(columns=[*an.VARIANT_ITEM_COLUMNS, *an.CLOZE_ITEM_COLUMNS])
    models = tuple(plan.get("model_order") or ())
    return an.Dataset(
        frame, items, tuple(sorted(plan["arms"])), (), "", {}, models, bool(plan.get("variants"))
    )


def _analyse_one(
    plan: dict[str, Any],
    spec: PlanSpec,
    sc: Scenario,
    d: _Design,
    stimuli: dict[str, dict[str, Any]],
    rng: np.random.Generator,
    analysed_ids: list[str],
) -> dict[str, Any]:
    frame, u, w = simulate_trials(sc, d, stimuli, rng)
    ds = _simulated_dataset(plan, frame)
    _, fit = an.fit_model(ds, plan)
    tested = an.hypothesis_results(ds, plan, fit)
    out: dict[str, Any] = {"hypotheses": {}, "sensitivity": {}}
    for h, r in zip(plan["hypotheses"], tested, strict=True):
        a, b = h["contrast"]
        subset = list(h.get("stimuli") or analysed_ids)
        truth = _conditional_truth(sc, d, u, w, a, b, [s for s in subset if s in u])
        out["hypotheses"][h["id"]] = _hypothesis_row(h, r, truth)
    if spec.sensitivity and any(statistics.is_mixed_model(h) for h in plan["hypotheses"]):
        sens = an.sensitivity_lmm(ds, plan, fit, tested, plan_fits=True)
        for c in ((sens.values or {}).get("contrasts") or []) if sens is not None else []:
            out["sensitivity"][str(c.get("hypothesis"))] = _sensitivity_row(c)
    return out


def _sensitivity_row(c: dict[str, Any]) -> dict[str, Any]:
    """One hypothesis's sensitivity intervals (open bounds as ∓inf) and whether all support."""
    row: dict[str, Any] = {}
    for name in SENSITIVITY_INTERVALS:
        got = c.get(name)
        if isinstance(got, dict):
            lo, hi = got.get("lower"), got.get("upper")
            row[name] = [
                float(lo) if lo is not None else -math.inf,
                float(hi) if hi is not None and math.isfinite(hi) else math.inf,
            ]
    row["supports"] = c.get("supports")
    return row


def _hypothesis_row(h: dict[str, Any], r: Any, truth: float) -> dict[str, Any]:
    """One simulated study's verdict, estimate, conditional truth and registered intervals."""
    values = r.values or {}
    row: dict[str, Any] = {
        "verdict": r.verdict or "not computed",
        "estimate": values.get("estimate") if r.status == "ok" else None,
        "conditional_truth": truth,
    }
    if r.status == "ok":
        for name, (lo, hi) in _interval(h, values).items():
            row[name] = [lo, hi]
    return row


# --------------------------------------------------------------------------- aggregates


def _share(flags: Sequence[bool]) -> dict[str, Any]:
    n = len(flags)
    p = sum(flags) / n if n else math.nan
    return {"share": p, "n": n, "mc_se": math.sqrt(p * (1 - p) / n) if n else math.nan}


def _covers(bounds: Sequence[Any], truth: float) -> bool:
    lo, hi = bounds
    return bool(lo <= truth <= hi)


def _role(h: dict[str, Any], truth: float) -> str:
    """What the share supported measures: power, type-I error, or only a share supported."""
    sides = h.get("sides") or "two-sided"
    min_pp = h.get("min_difference_pp")
    if not statistics.statistic(h["test"]).claims_difference:
        return "share supported"
    if abs(truth) < 1e-12:
        return "type-I error"
    if (truth > 0 or sides == "two-sided") and (min_pp is None or truth * 100 >= min_pp):
        return "power"
    return "share supported"


def _coverage(per: list[dict[str, Any]], truth: float, population: bool) -> dict[str, Any]:
    """The share of registered (and two-sided) intervals covering their truth."""
    coverage = {}
    for name in ("registered", "two_sided"):
        pairs = [
            (p[name], truth if population else p["conditional_truth"]) for p in per if name in p
        ]
        if pairs:
            coverage[name] = _share([_covers(bounds, t) for bounds, t in pairs])
    return coverage


def _sensitivity_coverage(sens_rows: list[Any], truth: float) -> dict[str, Any]:
    """Each sensitivity interval's coverage of the population truth, and how often all support."""
    return {
        "sensitivity": {
            name: _share(
                [_covers(s[name], truth) for s in sens_rows if s is not None and name in s]
            )
            for name in SENSITIVITY_INTERVALS
            if any(s is not None and name in s for s in sens_rows)
        },
        "sensitivity_supports": _share([bool(s and s.get("supports")) for s in sens_rows]),
    }


def summarise(
    plan: dict[str, Any], spec: PlanSpec, sc: Scenario, d: _Design, rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """Per hypothesis: verdict counts, power or type-I error, coverage of each interval.

    ``docs/planning.md`` §4: the truth of an ``lmm`` interval (and of every sensitivity
    interval) is the population contrast, of the other tests' the contrast over the study's
    own (subset of) stimuli in that simulated study.
    """
    hyps = []
    for h in plan["hypotheses"]:
        hid = h["id"]
        a, b = h["contrast"]
        truth = population_truth(sc, d, a, b)
        per = [r["hypotheses"][hid] for r in rows]
        verdicts: dict[str, int] = {}
        for p in per:
            verdicts[p["verdict"]] = verdicts.get(p["verdict"], 0) + 1
        population = statistics.is_mixed_model(h)
        estimates = [p["estimate"] for p in per if isinstance(p.get("estimate"), float)]
        entry = {
            "hypothesis": hid,
            "test": h["test"],
            "sides": h.get("sides") or "two-sided",
            "primary": hid in spec.primary,
            "truth": truth,
            "estimand": "population" if population else "study stimuli",
            "role": _role(h, truth),
            "supported": _share([p["verdict"] == "supported" for p in per]),
            "not_computed": _share([p["verdict"] == "not computed" for p in per]),
            "verdicts": dict(sorted(verdicts.items())),
            "coverage": _coverage(per, truth, population),
            "mean_estimate": float(np.mean(estimates)) if estimates else None,
        }
        sens_rows = [r["sensitivity"].get(hid) for r in rows]
        if any(s is not None for s in sens_rows):
            entry |= _sensitivity_coverage(sens_rows, truth)
        hyps.append(entry)
    return {"hypotheses": hyps}


def _columns(plan: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Every simulated study's numbers, by hypothesis, as columns (what the verifier re-runs)."""
    out: dict[str, Any] = {}
    for h in plan["hypotheses"]:
        hid = h["id"]
        per = [r["hypotheses"][hid] for r in rows]
        col: dict[str, Any] = {
            "verdict": [p["verdict"] for p in per],
            "estimate": [p.get("estimate") for p in per],
            "conditional_truth": [p["conditional_truth"] for p in per],
        }
        for name in ("registered", "two_sided"):
            if any(name in p for p in per):
                col[name] = [_json_bounds(p.get(name)) for p in per]
        sens = [r["sensitivity"].get(hid) for r in rows]
        if any(s is not None for s in sens):
            col["sensitivity"] = _sensitivity_columns(sens)
        out[hid] = col
    return out


def _sensitivity_columns(sens: list[Any]) -> dict[str, Any]:
    """Each sensitivity interval's bounds per simulated study, and whether all supported."""
    return {
        name: [_json_bounds(s.get(name)) if s else None for s in sens]
        for name in SENSITIVITY_INTERVALS
    } | {"supports": [s.get("supports") if s else None for s in sens]}


def _json_bounds(bounds: Any) -> list[float | None] | None:
    if bounds is None:
        return None
    return [b if math.isfinite(b) else None for b in bounds]


# --------------------------------------------------------------------------- the run


def _check_plan(study: Any, protocol: dict[str, Any]) -> None:
    problems = []
    if (protocol.get("analysis") or {}).get("random_intercept") == "source":
        problems.append(
            "study.toml: analysis.random_intercept: ledger plan draws an effect per "
            "stimulus and does not simulate a random intercept by source yet"
        )
    for i, h in enumerate(protocol["hypotheses"]):
        if h["test"] not in PLAN_TESTS:
            problems.append(
                f"study.toml: hypotheses[{i}].test: {h['id']} uses {h['test']!r}, "
                f"which ledger plan cannot simulate yet (it simulates "
                f"{', '.join(PLAN_TESTS)})"
            )
        elif h.get("outcome") not in (None, "glyph_accuracy", "trial_accuracy"):
            problems.append(
                f"study.toml: hypotheses[{i}].outcome: {h['id']} tests "
                f"{h['outcome']!r}; ledger plan simulates trial accuracy only"
            )
    if study.factorial is not None or study.steps:
        problems.append(
            "study.toml: ledger plan simulates arm contrasts of trial accuracy; "
            "factorial studies and studies with steps are not simulated yet"
        )
    if problems:
        raise PlanError("\n".join(problems))


def _settings(spec: PlanSpec, study: Any) -> list[int]:
    return list(spec.replicates) or [int(study.replicates)]


def _trial_ids(study: Any, reps: int) -> list[str]:
    return list(
        study.trial_ids()
        if reps == study.replicates
        else replace(study, replicates=reps).trial_ids()
    )


def estimate_cost(
    study: Any, spec: PlanSpec, protocol: dict[str, Any], stimuli: dict[str, dict[str, Any]]
) -> float:
    """Seconds the whole plan should take: two studies of each setting timed and scaled."""
    total = 0.0
    for reps in _settings(spec, study):
        d = _design(_trial_ids(study, reps))
        analysed = sorted(s for s, i in stimuli.items() if not i["control"])
        sc = spec.scenarios[0]
        rng = np.random.default_rng([int(spec.seed), 999_999])  # not a plan stream
        start = time.perf_counter()
        for _ in range(2):
            _run_one(protocol, spec, sc, d, stimuli, rng, analysed)
        per = (time.perf_counter() - start) / 2
        total += per * spec.studies * len(spec.scenarios)
    return total


_WORK: list[tuple[Any, ...]] = []
"""A worker's plan inputs, set once per worker by :func:`_set_work` (not sent per study)."""


def _set_work(*work: Any) -> None:
    """A worker's initializer: keep the inputs every study of the pool shares."""
    _WORK[:] = [work]


def _one_study(index: tuple[int, int, int]) -> dict[str, Any]:
    """One study by its indices (a process pool's unit: the seed makes it independent)."""
    protocol, spec, settings = _WORK[0]
    si, ci, k = index
    sc = spec.scenarios[ci]
    d, stimuli, analysed = settings[si]
    rng = np.random.default_rng([int(spec.seed), si, ci, k])
    return _run_one(protocol, spec, sc, d, stimuli, rng, analysed)


def available_cores() -> int:
    """The cores this process may run on (``os.sched_getaffinity``; else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no sched_getaffinity (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def _pool(jobs: int, work: tuple[Any, ...]) -> Any:
    """``jobs`` worker processes holding ``work``: forked where the platform can fork.

    A forked worker inherits the parent's imports and ``work`` (nothing is pickled to start
    it). A process running other threads (a test runner's, a server's) spawns its workers
    instead, as does a platform without ``fork``: forking copies only the calling thread,
    and a lock another thread held would stay locked in the child; a spawned worker imports
    the packages again (seconds) and receives ``work`` pickled, once.
    """
    import multiprocessing
    import threading
    from concurrent.futures import ProcessPoolExecutor

    can_fork = "fork" in multiprocessing.get_all_start_methods()
    method = "fork" if can_fork and threading.active_count() == 1 else "spawn"
    return ProcessPoolExecutor(
        jobs,
        mp_context=multiprocessing.get_context(method),
        initializer=_set_work,
        initargs=work,
    )


def run_plan(
    study: Any,
    spec: PlanSpec,
    protocol: dict[str, Any],
    stimuli: dict[str, dict[str, Any]],
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
) -> dict[str, Any]:
    """Every setting × scenario × study; the ``results`` member of ``plan/plan.json``.

    ``jobs > 1`` runs the studies in that many worker processes (:func:`_pool`); each study
    draws from its own generator (``docs/planning.md`` §2) and the rows are collected in study
    order, so the record is the same for any ``jobs``.
    """
    analysed = sorted(s for s, i in stimuli.items() if not i["control"])
    designs = [_design(_trial_ids(study, reps)) for reps in _settings(spec, study)]
    work = (protocol, spec, [(d, stimuli, analysed) for d in designs])
    results = []
    pool = _pool(jobs, work) if jobs > 1 else None
    if pool is None:
        _set_work(*work)
    try:
        for si, reps in enumerate(_settings(spec, study)):
            d = designs[si]
            for ci, sc in enumerate(spec.scenarios):
                start = time.perf_counter()
                indices = [(si, ci, k) for k in range(spec.studies)]
                rows = (
                    list(
                        pool.map(_one_study, indices, chunksize=max(1, len(indices) // (4 * jobs)))
                    )
                    if pool is not None
                    else [_one_study(i) for i in indices]
                )
                seconds = time.perf_counter() - start
                summary = summarise(protocol, spec, sc, d, rows)
                results.append(
                    {
                        "replicates": reps,
                        "scenario": sc.name,
                        "trials": len(d.trials),
                        **summary,
                        "studies": _columns(protocol, rows),
                    }
                )
                if progress is not None:
                    progress(
                        f"{sc.name} at {reps} replicates: {spec.studies} studies in {seconds:.1f} s"
                    )
    finally:
        _WORK.clear()
        if pool is not None:
            pool.shutdown()
    return {"results": results}


def plan_study(
    root: str | Path,
    *,
    studies: int | None = None,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
) -> PlanRun:
    """Run ``[plan]`` of the study at ``root`` and write ``plan/plan.json`` (before the lock).

    ``studies`` overrides ``[plan] studies`` (the record says so). The cost is estimated first
    (two studies per setting timed); above ``[plan] max_seconds`` the plan refuses to start
    unless ``force``; ``jobs`` worker processes divide the estimate and the run (the record does
    not depend on it; a plan estimated under :data:`POOL_MIN_SECONDS` runs in this process).
    On a locked study nothing is written: the locked spec must be unchanged and the run is
    compared with the locked plan (:attr:`PlanRun.locked_match`).
    """
    from runner import ledger_path, protocol_body
    from runner.spec import SpecError, load_study

    root = Path(root)
    try:
        study = load_study(root)
    except SpecError as exc:
        raise PlanError(f"cannot plan: {exc}") from exc
    if study.plan is None:
        raise PlanError(
            f"{root / 'study.toml'}: plan: no [plan] table (docs/planning.md gives "
            "its keys and an example)"
        )
    spec = study.plan
    if studies is not None:
        if not 10 <= studies <= 100_000:
            raise PlanError(f"--studies: must be from 10 to 100,000, got {studies}")
        spec = replace(spec, studies=studies)
    locked = _locked_state(root, ledger_path(root))
    protocol = protocol_body(study, b"\0" * 32, study.trial_ids())
    _check_plan(study, protocol)
    stimuli = plan_stimuli(study)
    inputs = plan_inputs(protocol, spec.record(), stimuli)
    if not 1 <= jobs <= 256:
        raise PlanError(f"--jobs: must be from 1 to 256, got {jobs}")
    serial = estimate_cost(study, spec, protocol, stimuli)
    if serial < POOL_MIN_SECONDS:
        jobs = 1  # starting workers would cost more than they save
    estimate = serial / jobs
    if estimate > spec.max_seconds and not force:
        raise PlanError(
            f"plan: this plan would take about {estimate:.0f} s ({spec.studies} studies x "
            f"{len(spec.scenarios)} scenario(s) x {len(_settings(spec, study))} replicate "
            f"setting(s)), more than plan.max_seconds = {spec.max_seconds:g}; lower "
            "plan.studies, set sensitivity = false, or pass --force"
        )
    if progress is not None:
        total = spec.studies * len(spec.scenarios) * len(_settings(spec, study))
        progress(
            f"estimated {estimate:.0f} s for {total} simulated studies (two timed per "
            f"replicate setting); starting"
        )
    start = time.perf_counter()
    body = run_plan(study, spec, protocol, stimuli, progress, jobs)
    seconds = time.perf_counter() - start
    record = {
        "version": PLAN_VERSION,
        "study": study.id,
        "inputs_sha256": inputs,
        "settings": spec.record(),
        "stimuli": stimuli,
        "software": {"numpy": np.__version__},
        **body,
    }
    if locked is not None:
        old = json.loads(locked)
        same = _same_numbers(old.get("results"), record["results"])
        return PlanRun(record, None, seconds, estimate, same)
    path = root / PLAN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(record), encoding="utf-8")
    return PlanRun(record, path, seconds, estimate)


def dumps(record: dict[str, Any]) -> str:
    """``plan/plan.json``'s text: sorted keys, two-space indent, no NaN (``null``)."""
    return json.dumps(_finite(record), indent=1, sort_keys=True, allow_nan=False) + "\n"


def _finite(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, np.floating):
        return _finite(float(value))
    if isinstance(value, np.integer | np.bool_):
        return value.item()
    return value


def _same_numbers(a: Any, b: Any, rel: float = 1e-4) -> bool:
    """Every member equal, numbers to ``rel`` (the ``plan`` check's tolerance, planning.md §6)."""
    a, b = _finite(a), _finite(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_numbers(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_numbers(x, y, rel) for x, y in zip(a, b, strict=True))
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300) or a == b
    return bool(a == b)


def _locked_state(root: Path, path: Path | PostgresLocation | RemoteLocation) -> str | None:
    """The locked plan's text when the study is locked (spec unchanged), else None.

    Raises :class:`PlanError` when the spec changed since the lock or no plan was locked.
    """
    if not path.exists():
        return None
    from ledger import Ledger
    from runner import changed_files, locked_manifest, protocol_event

    with Ledger.open(path, readonly=True) as log:
        if protocol_event(log) is None:
            return None
        changed = [c for c in changed_files(root, log) if c[0] in ("study.toml", PLAN_FILE)]
        if changed:
            raise PlanError(
                f"{root}: {changed[0][0]} changed since the lock (the locked "
                "analysis and plan are what a plan of this study must use); a "
                "locked study's plan cannot be run on another design"
            )
        manifest = locked_manifest(log)
        if PLAN_FILE not in manifest:
            raise PlanError(
                f"{root}: locked without {PLAN_FILE}: the plan must be recorded before the lock"
            )
        data = log.blob(_artifact_blob(log, PLAN_FILE, manifest[PLAN_FILE]))
        return data.decode("utf-8")


def _artifact_blob(log: Any, rel: str, digest: str) -> str:
    for event in log.events("artifact.locked"):
        if event.body["path"] == rel and event.body["sha256"] == digest:
            return str(event.blobs["content"])
    raise PlanError(f"{rel}: no artifact.locked event holds it")
