"""Seed 001's bootstrap over (question, run) observations as a registered test.

``test = "qr-bootstrap"`` (``docs/statistics.md``, "(question, run) bootstrap as a registered
test"; ``docs/study-spec.md`` ``[[hypotheses]]``): every (item, model, variant, rep)
observation is exchangeable; each bootstrap iteration draws N indices with replacement from
the N observations and the replicate is the mean of the statistic's per-observation column.
:func:`resample_means` is the draw (documented bit for bit), :func:`observations` builds the
per-observation columns of one arm or of a pair of arms, :func:`qr_values` computes one
hypothesis's recorded values, :func:`decide` applies its rule, and :func:`descriptive_values`
is ``descriptive.qr_bootstrap`` (default accuracy, success rate and perturbed accuracy with
their intervals, per model and pooled). Pure functions, no I/O; ``verify/_qrboot.py``
re-derives them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from analysis import _stats as st
from analysis._rows import split_trial, trial_variant
from runner import ARM_STATISTICS, BINARY_STATISTICS, QR_OUTCOMES, QR_TEST

__all__ = [
    "CI_METHOD",
    "Observations",
    "decide",
    "descriptive_values",
    "is_qr_hypothesis",
    "level",
    "observations",
    "qr_values",
    "registers_qr",
    "resample_means",
]

CI_METHOD = "question-run-bootstrap-percentile"
DESCRIPTIVE_CONF = 0.95
"""The level of ``descriptive.qr_bootstrap``'s intervals (the seed's 95%)."""
Key = tuple[str, str, str, int]
"""An observation: (item, model, variant, rep); model and variant ``""`` when the study has
none."""


def is_qr_hypothesis(h: dict[str, Any]) -> bool:
    """Whether hypothesis ``h`` (as locked) is a qr-bootstrap test."""
    return h.get("test") == QR_TEST


def registers_qr(plan: dict[str, Any]) -> bool:
    """Whether the plan registers a qr-bootstrap hypothesis (then the descriptive table is made)."""
    return any(is_qr_hypothesis(h) for h in plan.get("hypotheses") or [])


def level(h: dict[str, Any]) -> float:
    """The interval level: ``1 - 2 alpha`` for a one-bound rule, else ``1 - alpha``.

    One-bound rules are a rate's (``min_pp`` or ``max_pp``) and a one-sided difference's: the
    one bound used is then a level-alpha test.
    """
    alpha = float(h.get("alpha") or 0.05)
    one = h.get("statistic") != "difference" or (h.get("sides") or "two-sided") == "one-sided"
    return 1.0 - 2.0 * alpha if one else 1.0 - alpha


def resample_means(
    columns: Sequence[npt.NDArray[np.float64]], iterations: int, seed: int | str
) -> list[npt.NDArray[np.float64]]:
    """The bootstrap replicates of each column's mean, all from the same draws.

    ``rng = numpy.random.default_rng(seed)`` (``Generator(PCG64(seed))``); iteration ``i``
    draws ``I_i = rng.integers(0, N, size=N)`` (iterations in order; drawn here in C-order row
    blocks of ``max(1, 2**18 // N)`` rows, which consumes the stream exactly as the
    per-iteration calls do) and its replicate of column ``c`` is ``c[I_i].mean()`` (numpy's
    pairwise sum along the row, divided by N). Every column has length N >= 1.
    """
    n = int(columns[0].size)
    if n < 1 or any(c.size != n for c in columns):
        raise st.StatsError("qr-bootstrap: the columns must have the same length >= 1")
    n_iter = int(iterations)
    rng = np.random.default_rng(int(seed))
    out = [np.empty(n_iter, dtype=np.float64) for _ in columns]
    rows = max(1, st.CHUNK_ELEMENTS // n)
    drawn = np.empty((min(rows, n_iter), n), dtype=np.float64)  # reused: no allocation per block
    indices = np.empty(drawn.shape, dtype=np.int64)  # likewise (st.draw_indices: the same stream)
    for start in range(0, n_iter, rows):
        m = min(rows, n_iter - start)
        idx = indices[:m]
        st.draw_indices(rng, n, idx)
        for column, reps in zip(columns, out, strict=True):
            np.take(column, idx, out=drawn[:m], mode="clip")  # indices are in range
            reps[start : start + m] = drawn[:m].mean(axis=1)
    return out


def _interval(replicates: npt.NDArray[np.float64], conf: float) -> tuple[float, float]:
    lo, hi = np.quantile(
        replicates, [round((1 - conf) / 2, 12), round((1 + conf) / 2, 12)], method="linear"
    )
    return float(lo), float(hi)


@dataclass
class Observations:
    """The per-observation values of one arm, or of a pair of arms, in key order.

    ``keys`` sorted as (item, model, variant, rep); ``a`` the first arm's values (the only one
    for one arm), ``b`` the second's; ``excluded`` the keys left out, each ``{item, model,
    variant, rep, kind, trials}``; ``undefined`` and ``given_up`` count them by reason.
    """

    keys: list[Key]
    a: npt.NDArray[np.float64]
    b: npt.NDArray[np.float64] | None
    excluded: list[dict[str, Any]] = field(default_factory=list)
    undefined: int = 0
    given_up: int = 0


def _column(outcome: str) -> str:
    spec = QR_OUTCOMES.get(outcome)
    return spec.column if spec is not None else outcome


def _scored(ds: Any, arm: str, outcome: str) -> dict[Key, tuple[str, float]]:
    """The arm's scored trials by key: (trial id, value or NaN when undefined)."""
    t = ds.trials
    t = t[(t["arm"] == arm) & ~t["control"].astype(bool)]  # a control is no observation
    column = _column(outcome)
    if column not in t.columns:
        raise st.StatsError(f"the analysis dataset has no column {column!r} (outcome {outcome!r})")
    values = t[column].to_numpy(dtype=np.float64, na_value=np.nan)
    usable = ~t["excluded"].to_numpy(dtype=bool)
    out: dict[Key, tuple[str, float]] = {}
    for trial, item, model, variant, rep, value, ok in zip(
        t["trial"].tolist(),
        t["stimulus"].tolist(),
        t["model"].tolist(),
        t["variant"].tolist(),
        t["rep"].tolist(),
        values.tolist(),
        usable.tolist(),
        strict=True,
    ):
        key = (str(item), str(model or ""), str(variant or ""), int(rep))
        out[key] = (str(trial), float(value) if ok and math.isfinite(value) else math.nan)
    return out


def _given_up(ds: Any, arm: str) -> dict[Key, str]:
    """The arm's given-up trials by key (``docs/trials.md``: a final ``trial.failed``)."""
    out: dict[Key, str] = {}
    for trial in ds.given_up:
        t_arm, model, item, rep = split_trial(str(trial))
        if t_arm == arm:
            out[(item, model or "", trial_variant(str(trial)) or "", int(rep))] = str(trial)
    return out


def _never_sent(ds: Any, arm: str) -> dict[Key, str]:
    """The arm's recorded exclusions by key (``trial.excluded``: never sent, never scored)."""
    out: dict[Key, str] = {}
    for trial in getattr(ds, "excluded_trials", ()):
        t_arm, model, item, rep = split_trial(str(trial))
        if t_arm == arm:
            out[(item, model or "", trial_variant(str(trial)) or "", int(rep))] = str(trial)
    return out


def _exclusion(key: Key, kind: str, trials: list[str]) -> dict[str, Any]:
    return {
        "item": key[0],
        "model": key[1],
        "variant": key[2],
        "rep": key[3],
        "kind": kind,
        "trials": sorted(trials),
    }


def _key_text(key: Key) -> str:
    text = f"item {key[0]!r}"
    if key[1]:
        text += f" model {key[1]!r}"
    if key[2]:
        text += f" variant {key[2]!r}"
    return f"{text} rep {key[3]}"


def observations(ds: Any, outcome: str, a: str, b: str | None = None) -> Observations:
    """The observations of arm ``a`` alone, or of ``a`` and ``b`` paired by key.

    One arm: every scored trial of ``a`` but the specificity controls (tumbling-E); a trial
    that is ``excluded`` or whose outcome cell is empty is excluded (``undefined``). Two arms:
    a key scored in both is a pair, excluded (``undefined``) when either value is undefined; a
    key scored in one arm whose partner was given up is excluded (``given_up``); a key scored
    in one arm with no partner at all fails, naming the first such key (the arms do not pair).
    """
    left = _scored(ds, a, outcome)
    if b is None:
        keys, excluded = [], []
        for key in sorted(left):
            trial, value = left[key]
            if math.isnan(value):
                excluded.append(_exclusion(key, "undefined", [trial]))
            else:
                keys.append(key)
        items = {k[0] for k in left}
        gave_up = sum(1 for k in _given_up(ds, a) if k[0] in items)
        values = np.array([left[k][1] for k in keys], dtype=np.float64)
        return Observations(keys, values, None, excluded, len(excluded), gave_up)
    right = _scored(ds, b, outcome)
    lost_a, lost_b = _given_up(ds, a), _given_up(ds, b)
    skip_a, skip_b = _never_sent(ds, a), _never_sent(ds, b)
    unpaired = sorted(
        k
        for k in set(left) ^ set(right)
        if k not in lost_a and k not in lost_b and k not in skip_a and k not in skip_b
    )
    if unpaired:
        first = unpaired[0]
        has, lacks = (a, b) if first in left else (b, a)
        raise st.StatsError(
            f"qr-bootstrap pairs by (item, model, variant, rep): arm {has!r} has "
            f"{_key_text(first)} and arm {lacks!r} does not ({len(unpaired)} unpaired "
            f"observation{'s' if len(unpaired) != 1 else ''}; the arms must run the same items "
            "and replicates)"
        )
    keys, excluded = [], []
    undefined = gave_up = 0
    for key in sorted(set(left) | set(right)):
        if key not in left or key not in right:
            trials = [left[key][0]] if key in left else [right[key][0]]
            lost, skipped = (lost_b, skip_b) if key in left else (lost_a, skip_a)
            if key in lost:
                excluded.append(_exclusion(key, "given-up", [*trials, lost[key]]))
                gave_up += 1
            else:  # the partner is a recorded exclusion (trial.excluded): counted as one
                excluded.append(_exclusion(key, "excluded", [*trials, skipped[key]]))
                undefined += 1
        elif math.isnan(left[key][1]) or math.isnan(right[key][1]):
            excluded.append(_exclusion(key, "undefined", [left[key][0], right[key][0]]))
            undefined += 1
        else:
            keys.append(key)
    xa = np.array([left[k][1] for k in keys], dtype=np.float64)
    xb = np.array([right[k][1] for k in keys], dtype=np.float64)
    return Observations(keys, xa, xb, excluded, undefined, gave_up)


def statistic_column(obs: Observations, statistic: str) -> npt.NDArray[np.float64]:
    """The per-observation column whose mean is ``statistic`` (``a`` perturbed, ``b`` default).

    ``accuracy``, ``mean``: ``a``; ``success-rate``: 1.0 where ``a != b`` else 0.0;
    ``perturbed-accuracy``: ``a``; ``difference``: ``a - b`` (elementwise, then averaged).
    """
    if statistic in ("accuracy", "mean", "perturbed-accuracy"):
        return obs.a
    assert obs.b is not None
    if statistic == "success-rate":
        changed: npt.NDArray[np.float64] = (obs.a != obs.b).astype(np.float64)
        return changed
    if statistic == "difference":
        diff: npt.NDArray[np.float64] = obs.a - obs.b
        return diff
    raise st.StatsError(f"unknown qr-bootstrap statistic {statistic!r}")


def _check_binary(obs: Observations, outcome: str) -> None:
    for values in (obs.a, obs.b):
        if values is not None and not np.isin(values, (0.0, 1.0)).all():
            raise st.StatsError(f"outcome {outcome!r} has values other than 0 and 1")


def qr_values(ds: Any, plan: dict[str, Any], h: dict[str, Any]) -> dict[str, Any]:
    """The recorded ``values`` of one qr-bootstrap hypothesis on ``ds``.

    Raises :class:`analysis._stats.StatsError` when the data cannot give the statistic (no
    observation, arms that do not pair, a non-0/1 outcome for a correctness statistic).
    """
    statistic = str(h["statistic"])
    outcome = str(h.get("outcome") or "trial_accuracy")
    if statistic in ARM_STATISTICS:
        obs = observations(ds, outcome, str(h["arm"]))
    else:
        a, b = h["contrast"]
        obs = observations(ds, outcome, str(a), str(b))
    if statistic in BINARY_STATISTICS:
        _check_binary(obs, outcome)
    if not obs.keys:
        raise st.StatsError(
            f"qr-bootstrap {statistic}: no observation with a defined "
            f"{outcome!r} ({len(obs.excluded)} excluded)"
        )
    design = plan["design"]
    iterations, seed = int(design["bootstrap_iterations"]), int(design["bootstrap_seed"])
    column = statistic_column(obs, statistic)
    conf = level(h)
    lower, upper = _interval(resample_means([column], iterations, seed)[0], conf)
    out: dict[str, Any] = {"statistic": statistic, "outcome": outcome}
    out.update(
        {"arm": h["arm"]} if statistic in ARM_STATISTICS else {"contrast": list(h["contrast"])}
    )
    out.update(
        {
            "n": len(obs.keys),
            "n_items": len({k[0] for k in obs.keys}),
            "estimate": float(column.mean()),
            "lower": lower,
            "upper": upper,
            "conf": conf,
            "iterations": iterations,
            "seed": seed,
            "ci_method": CI_METHOD,
        }
    )
    if obs.b is not None:
        out["mean_a"] = float(obs.a.mean())
        out["mean_b"] = float(obs.b.mean())
    out.update({"undefined": obs.undefined, "given_up": obs.given_up, "excluded": obs.excluded})
    return out


def decide(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The decision rule: (verdict, decided_by).

    A rate (``accuracy``, ``mean``, ``success-rate``, ``perturbed-accuracy``): with ``min_pp``
    supported when ``lower * 100 > min_pp``, with ``max_pp`` when ``upper * 100 < max_pp``.
    ``difference``: one-sided, ``lower > 0``; two-sided, the interval excludes 0; with
    ``min_difference_pp`` also ``estimate * 100 >= min_difference_pp``.
    """
    lower, upper, est = v["lower"], v["upper"], v["estimate"]
    where = f"{round(100 * v['conf'], 6):g}%"
    if h.get("statistic") != "difference":
        if h.get("min_pp") is not None:
            ok = lower is not None and lower * 100 > float(h["min_pp"])
            rule = f"{where} interval lower bound > {float(h['min_pp']):g} pp"
        else:
            ok = upper is not None and upper * 100 < float(h["max_pp"])
            rule = f"{where} interval upper bound < {float(h['max_pp']):g} pp"
    else:
        if (h.get("sides") or "two-sided") == "one-sided":
            ok = lower is not None and lower > 0
            rule = f"{where} interval lower bound > 0"
        else:
            ok = (lower is not None and lower > 0) or (upper is not None and upper < 0)
            rule = f"{where} interval excludes 0"
        if h.get("min_difference_pp") is not None:
            ok = ok and est * 100 >= float(h["min_difference_pp"])
            rule += f" and estimate >= {float(h['min_difference_pp']):g} pp"
    verdict = "supported" if ok else "not supported"
    return verdict, {"rule": rule, "estimate": est, "lower": lower, "upper": upper}


def _summary(
    replicates: npt.NDArray[np.float64], column: npt.NDArray[np.float64]
) -> dict[str, Any]:
    lower, upper = _interval(replicates, DESCRIPTIVE_CONF)
    return {
        "estimate": float(column.mean()),
        "lower": lower,
        "upper": upper,
        "half_width": (upper - lower) / 2,
    }


def _row(
    ds: Any, outcome: str, a: str, b: str | None, iterations: int, seed: int
) -> dict[str, Any]:
    obs = observations(ds, outcome, a, b)
    if not obs.keys:
        raise st.StatsError(f"no observation with a defined {outcome!r}")
    binary = QR_OUTCOMES[outcome].binary if outcome in QR_OUTCOMES else False
    if b is None:
        names = ["mean"]
        columns = [obs.a]
    else:
        assert obs.b is not None
        names = ["default", "perturbed", "difference"]
        columns = [obs.b, obs.a, obs.a - obs.b]
        if binary:
            _check_binary(obs, outcome)
            names.append("success_rate")
            columns.append((obs.a != obs.b).astype(np.float64))
    reps = resample_means(columns, iterations, seed)
    out: dict[str, Any] = {"n": len(obs.keys), "undefined": obs.undefined, "given_up": obs.given_up}
    for name, column, rep in zip(names, columns, reps, strict=True):
        out[name] = _summary(rep, column)
    return out


def descriptive_values(ds: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """``descriptive.qr_bootstrap``: each qr-bootstrap contrast's and arm's table rows.

    One entry per distinct (``contrast``, ``outcome``) of the contrast hypotheses, then per
    distinct (``arm``, ``outcome``) of the one-arm ones, in plan order; each has one row pooled
    (``model`` null) and, with several models, one per model in model order. A contrast row has
    ``default`` (the second arm's mean), ``perturbed`` (the first's), ``difference`` and, for a
    0/1 outcome, ``success_rate``, each ``{estimate, lower, upper, half_width}`` at 95% from
    :func:`resample_means` with the locked iterations and seed (one draw shared by the row's
    columns, as the seed's triple); an arm row has ``mean``. A row that cannot be computed
    holds ``error``.
    """
    design = plan["design"]
    iterations, seed = int(design["bootstrap_iterations"]), int(design["bootstrap_seed"])
    wanted: list[tuple[str, str | None, str]] = []
    for h in plan.get("hypotheses") or []:
        if not is_qr_hypothesis(h):
            continue
        outcome = str(h.get("outcome") or "trial_accuracy")
        if h.get("statistic") in ARM_STATISTICS:
            entry: tuple[str, str | None, str] = (str(h["arm"]), None, outcome)
        else:
            entry = (str(h["contrast"][0]), str(h["contrast"][1]), outcome)
        if entry not in wanted:
            wanted.append(entry)
    wanted.sort(key=lambda e: e[1] is None)  # contrasts first, each group in plan order
    models: list[str | None] = [None, *ds.models] if ds.several_models else [None]
    entries = []
    for a, b, outcome in wanted:
        rows = []
        for model in models:
            sub = ds if model is None else ds.for_model(model)
            try:
                row = _row(sub, outcome, a, b, iterations, seed)
            except st.StatsError as exc:
                row = {"error": str(exc)}
            rows.append({"model": model, **row})
        head: dict[str, Any] = {"arm": a} if b is None else {"contrast": [a, b]}
        entries.append({**head, "outcome": outcome, "rows": rows})
    return {
        "conf": DESCRIPTIVE_CONF,
        "iterations": iterations,
        "seed": seed,
        "ci_method": CI_METHOD,
        "entries": entries,
    }


# ------------------------------------------------------------------------------ the report

PM_NOTE = (
    'estimate ± half the width of the 95% percentile interval (the seed\'s "±"; the '
    "interval, not always symmetric, in brackets)"
)
"""What the report's "±" is (``docs/archive-format.md`` §7)."""


def _share(outcome: str) -> bool:
    spec = QR_OUTCOMES.get(outcome)
    return spec.share if spec is not None else False


def _numbers(*values: Any) -> list[float] | None:
    """The values as floats, or None when one is not a number."""
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in values):
        return None
    return [float(x) for x in values]


def pm_text(cell: Any, share: bool) -> str:
    """``62.5 ± 4.1 [58.3, 66.7]`` (percent of a share) or ``3.2 ± 0.41 [2.8, 3.6]``."""
    got = (
        _numbers(*(cell.get(k) for k in ("estimate", "half_width", "lower", "upper")))
        if (isinstance(cell, dict))
        else None
    )
    if got is None:
        return "–"
    e, hw, lo, hi = got
    if share:
        return f"{e * 100:.1f} ± {hw * 100:.1f} [{lo * 100:.1f}, {hi * 100:.1f}]"
    return f"{e:.3g} ± {hw:.3g} [{lo:.3g}, {hi:.3g}]"


def report_tables(result: dict[str, Any] | None) -> list[tuple[str, list[str], list[list[str]]]]:
    """The report's tables of ``descriptive.qr_bootstrap``: (caption, header, rows).

    One table per contrast entry (model, pairs, default, success rate, perturbed, difference,
    excluded), then one for the arm entries (arm, outcome, model, n, mean, excluded). Shares are
    shown in percent; cells as :func:`pm_text`.
    """
    if result is None or result.get("status") != "ok":
        return []
    v = result.get("values") or {}
    out: list[tuple[str, list[str], list[list[str]]]] = []
    arm_rows: list[list[str]] = []
    for entry in v.get("entries") or []:
        outcome = str(entry.get("outcome"))
        if "contrast" not in entry:
            arm_rows += [_arm_row(entry, row) for row in entry.get("rows") or []]
            continue
        arms = " vs ".join(str(a) for a in entry["contrast"])
        out.append(
            (
                f"{result.get('title')}: {arms} ({outcome}); {PM_NOTE}",
                [
                    "model",
                    "pairs",
                    "default",
                    "success rate",
                    "perturbed",
                    "difference (perturbed − default)",
                    "excluded",
                ],
                [_contrast_row(outcome, row) for row in entry.get("rows") or []],
            )
        )
    if arm_rows:
        out.append(
            (
                f"Mean outcome of one arm, bootstrap over (question, run) observations; {PM_NOTE}",
                ["arm", "outcome", "model", "n", "mean", "excluded"],
                arm_rows,
            )
        )
    return out


def _excluded_text(row: dict[str, Any]) -> str:
    return f"{row.get('undefined', 0)} undefined, {row.get('given_up', 0)} given up"


def _row_model(row: dict[str, Any]) -> str:
    return str(row.get("model")) if row.get("model") is not None else "all (pooled)"


def _arm_row(entry: dict[str, Any], row: dict[str, Any]) -> list[str]:
    """One row of the arm table: arm, outcome, model, n, mean, excluded (or why not)."""
    outcome = str(entry.get("outcome"))
    failed = f"not computed: {row['error']}" if "error" in row else None
    return [
        str(entry.get("arm")),
        outcome,
        _row_model(row),
        failed or str(row.get("n")),
        "–" if failed else pm_text(row.get("mean"), _share(outcome)),
        "–" if failed else _excluded_text(row),
    ]


def _contrast_row(outcome: str, row: dict[str, Any]) -> list[str]:
    """One row of a contrast's table: model, pairs, the four statistics, excluded."""
    if "error" in row:
        return [_row_model(row), f"not computed: {row['error']}", "–", "–", "–", "–", "–"]
    share = _share(outcome)
    return [
        _row_model(row),
        str(row.get("n")),
        pm_text(row.get("default"), share),
        pm_text(row.get("success_rate"), True),
        pm_text(row.get("perturbed"), share),
        pm_text(row.get("difference"), share),
        _excluded_text(row),
    ]


def estimate_text(values: dict[str, Any]) -> str:
    """A qr-bootstrap hypothesis's estimate and interval in the report's hypothesis table."""
    share = _share(str(values.get("outcome")))
    got = _numbers(*(values.get(k) for k in ("estimate", "lower", "upper", "conf")))
    if got is None:
        return "–"
    e, lo, hi, conf = got
    if share and values.get("statistic") == "difference":
        text = f"{e * 100:+.1f} pp ({{c}} CI {lo * 100:+.1f} to {hi * 100:+.1f} pp)"
    elif share:
        text = f"{e * 100:.1f}% ({{c}} CI {lo * 100:.1f}% to {hi * 100:.1f}%)"
    else:
        text = f"{e:.4g} ({{c}} CI {lo:.4g} to {hi:.4g})"
    return f"{values.get('statistic')} " + text.format(c=f"{round(100 * conf, 6):g}%")
