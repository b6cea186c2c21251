"""The ``qr-bootstrap`` test and ``descriptive.qr_bootstrap``, re-derived from the docs.

The verifier's own implementation of ``docs/statistics.md`` "(question, run) bootstrap as a
registered test": observations keyed (item, model, variant, rep), paired across a contrast's
two arms, exclusions by reason, the seed's bootstrap (``default_rng(seed)``, one
``integers(0, N, size=N)`` draw per iteration) and the decision rules. Imports nothing from
``ledger``, ``runner`` or ``analysis``; numpy only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["decide", "descriptive_values", "is_qr", "registers_qr", "values_of"]

TEST = "qr-bootstrap"
CI_METHOD = "question-run-bootstrap-percentile"
ONE_ARM = ("accuracy", "mean")
CORRECTNESS = ("accuracy", "success-rate", "perturbed-accuracy")
COLUMNS = {"trial_accuracy": "accuracy", "glyph_accuracy": "accuracy"}
"""Outcome -> trial column; any other outcome is read from the trial column of its name."""
BINARY = ("trial_accuracy", "uncertainty")
"""Outcomes whose values are 0 or 1 (a contrast's descriptive row adds the success rate)."""
BLOCK_ROWS = 4096
"""Iterations drawn per numpy call (any block size consumes the stream as per-iteration draws)."""


class QrError(ValueError):
    """The data cannot give the statistic."""


def is_qr(h: dict[str, Any]) -> bool:
    """A qr-bootstrap hypothesis."""
    return h.get("test") == TEST


def registers_qr(plan: dict[str, Any]) -> bool:
    """Whether ``descriptive.qr_bootstrap`` is among the results."""
    return any(is_qr(h) for h in plan.get("hypotheses") or [])


def _level(h: dict[str, Any]) -> float:
    alpha = float(h.get("alpha") or 0.05)
    if h.get("statistic") == "difference" and (h.get("sides") or "two-sided") != "one-sided":
        return 1.0 - alpha
    return 1.0 - 2.0 * alpha


def _replicates(columns: list[np.ndarray], iterations: int, seed: int) -> list[np.ndarray]:
    n = len(columns[0])
    rng = np.random.default_rng(seed)
    out = [np.zeros(iterations) for _ in columns]
    done = 0
    while done < iterations:
        rows = min(BLOCK_ROWS, iterations - done)
        draws = rng.integers(0, n, size=(rows, n))
        for col, reps in zip(columns, out, strict=True):
            reps[done : done + rows] = np.take(col, draws).mean(axis=1)
        done += rows
    return out


def _bounds(reps: np.ndarray, conf: float) -> tuple[float, float]:
    q = np.quantile(reps, [round((1 - conf) / 2, 12), round((1 + conf) / 2, 12)], method="linear")
    return float(q[0]), float(q[1])


def _key(item: Any, model: Any, variant: Any, rep: Any) -> tuple[str, str, str, int]:
    return (str(item), str(model or ""), str(variant or ""), int(rep))


def _arm_trials(
    ds: Any, arm: str, outcome: str
) -> dict[tuple[str, str, str, int], tuple[str, float | None]]:
    column = COLUMNS.get(outcome, outcome)
    out: dict[tuple[str, str, str, int], tuple[str, float | None]] = {}
    for t in ds.trials:
        if t["arm"] != arm or t["control"]:  # a specificity control is no observation
            continue
        if column not in t:
            raise QrError(f"the dataset has no column {column!r} (outcome {outcome!r})")
        raw = t[column]
        value: float | None = None
        if not t["excluded"] and raw is not None and raw != "":
            x = float(raw)
            value = x if math.isfinite(x) else None
        out[_key(t["stimulus"], t["model"], t["variant"], t["rep"])] = (str(t["trial"]), value)
    return out


def _lost(ds: Any, arm: str, which: str = "given_up") -> dict[tuple[str, str, str, int], str]:
    """The arm's given-up trials (or, ``which = "excluded_trials"``, its recorded exclusions)."""
    out = {}
    for trial in getattr(ds, which):
        parts = str(trial).split("|")
        if parts[0] != arm:
            continue
        if len(parts) == 5:
            key = _key(parts[2], parts[1], parts[3], parts[4])
        elif len(parts) == 4:
            key = _key(parts[2], parts[1], "", parts[3])
        else:
            key = _key(parts[1], "", "", parts[2])
        out[key] = str(trial)
    return out


def _excluded(key: tuple[str, str, str, int], kind: str, trials: list[str]) -> dict[str, Any]:
    return {
        "item": key[0],
        "model": key[1],
        "variant": key[2],
        "rep": key[3],
        "kind": kind,
        "trials": sorted(trials),
    }


def _one_arm(ds: Any, first: dict[Any, Any], a: str) -> dict[str, Any]:
    """The observations of a one-arm statistic: its defined values, the rest excluded."""
    keys = sorted(k for k, (_, v) in first.items() if v is not None)
    excluded = [_excluded(k, "undefined", [t]) for k, (t, v) in sorted(first.items()) if v is None]
    items = {k[0] for k in first}
    return {
        "keys": keys,
        "a": np.array([first[k][1] for k in keys], dtype=float),
        "b": None,
        "excluded": excluded,
        "undefined": len(excluded),
        "given_up": len([k for k in _lost(ds, a) if k[0] in items]),
    }


def _key_text(k: tuple[Any, ...]) -> str:
    return (
        f"item {k[0]!r}"
        + (f" model {k[1]!r}" if k[1] else "")
        + (f" variant {k[2]!r}" if k[2] else "")
        + f" rep {k[3]}"
    )


def _check_paired(
    first: dict[Any, Any], second: dict[Any, Any], a: str, b: str, lost: list[dict[Any, Any]]
) -> None:
    """Every key one arm has and the other lacks was lost there (given up or never sent)."""
    only = [
        k
        for k in sorted(set(first) | set(second))
        if (k in first) != (k in second) and not any(k in x for x in lost)
    ]
    if only:
        k = only[0]
        has, lacks = (a, b) if k in first else (b, a)
        raise QrError(
            f"arm {has!r} has {_key_text(k)} and arm {lacks!r} does not ({len(only)} unpaired)"
        )


def _observations(ds: Any, outcome: str, a: str, b: str | None) -> dict[str, Any]:
    """{keys, a, b, excluded, undefined, given_up} as docs/statistics.md defines them."""
    first = _arm_trials(ds, a, outcome)
    if b is None:
        return _one_arm(ds, first, a)
    second = _arm_trials(ds, b, outcome)
    lost_a, lost_b = _lost(ds, a), _lost(ds, b)
    skip_a, skip_b = _lost(ds, a, "excluded_trials"), _lost(ds, b, "excluded_trials")
    _check_paired(first, second, a, b, [lost_a, lost_b, skip_a, skip_b])
    keys, excluded = [], []
    undefined = lost = 0
    for k in sorted(set(first) | set(second)):
        if k in first and k in second:
            if first[k][1] is None or second[k][1] is None:
                excluded.append(_excluded(k, "undefined", [first[k][0], second[k][0]]))
                undefined += 1
            else:
                keys.append(k)
            continue
        mine, gone, skipped = (
            (first[k][0], lost_b, skip_b) if k in first else (second[k][0], lost_a, skip_a)
        )
        if k in gone:
            excluded.append(_excluded(k, "given-up", [mine, gone[k]]))
            lost += 1
        else:  # statistics.md: the partner was never sent (trial.excluded)
            excluded.append(_excluded(k, "excluded", [mine, skipped[k]]))
            undefined += 1
    return {
        "keys": keys,
        "a": np.array([first[k][1] for k in keys], dtype=float),
        "b": np.array([second[k][1] for k in keys], dtype=float),
        "excluded": excluded,
        "undefined": undefined,
        "given_up": lost,
    }


def _binary(obs: dict[str, Any], outcome: str) -> None:
    for x in (obs["a"], obs["b"]):
        if x is not None and any(v not in (0.0, 1.0) for v in x.tolist()):
            raise QrError(f"outcome {outcome!r} is not 0/1")


def values_of(ds: Any, plan: dict[str, Any], h: dict[str, Any]) -> dict[str, Any]:
    """A qr-bootstrap hypothesis's recorded ``values`` (before the common members)."""
    statistic = str(h.get("statistic"))
    outcome = str(h.get("outcome") or "trial_accuracy")
    one = statistic in ONE_ARM
    obs = _observations(
        ds,
        outcome,
        str(h["arm"]) if one else str(h["contrast"][0]),
        None if one else str(h["contrast"][1]),
    )
    if statistic in CORRECTNESS:
        _binary(obs, outcome)
    if not obs["keys"]:
        raise QrError("no observation")
    x, y = obs["a"], obs["b"]
    column = {
        "accuracy": x,
        "mean": x,
        "perturbed-accuracy": x,
        "success-rate": None if y is None else (x != y).astype(float),
        "difference": None if y is None else x - y,
    }[statistic]
    if column is None:
        raise QrError(f"statistic {statistic!r} needs a contrast")
    design = plan["design"]
    iterations, seed = int(design["bootstrap_iterations"]), int(design["bootstrap_seed"])
    conf = _level(h)
    lower, upper = _bounds(_replicates([column], iterations, seed)[0], conf)
    out: dict[str, Any] = {"statistic": statistic, "outcome": outcome}
    if one:
        out["arm"] = h["arm"]
    else:
        out["contrast"] = list(h["contrast"])
    out.update(
        {
            "n": len(obs["keys"]),
            "n_items": len({k[0] for k in obs["keys"]}),
            "estimate": float(np.mean(column)),
            "lower": lower,
            "upper": upper,
            "conf": conf,
            "iterations": iterations,
            "seed": seed,
            "ci_method": CI_METHOD,
        }
    )
    if y is not None:
        out.update({"mean_a": float(np.mean(x)), "mean_b": float(np.mean(y))})
    out.update(
        {"undefined": obs["undefined"], "given_up": obs["given_up"], "excluded": obs["excluded"]}
    )
    return out


def decide(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(verdict, decided_by) of a computed qr-bootstrap result."""
    lower, upper, est = v["lower"], v["upper"], v["estimate"]
    pct = f"{round(100 * v['conf'], 6):g}%"
    if h.get("statistic") == "difference":
        if (h.get("sides") or "two-sided") == "one-sided":
            ok, rule = lower is not None and lower > 0, f"{pct} interval lower bound > 0"
        else:
            ok = (lower is not None and lower > 0) or (upper is not None and upper < 0)
            rule = f"{pct} interval excludes 0"
        if h.get("min_difference_pp") is not None:
            ok = ok and est * 100 >= float(h["min_difference_pp"])
            rule += f" and estimate >= {float(h['min_difference_pp']):g} pp"
    elif h.get("min_pp") is not None:
        ok = lower is not None and lower * 100 > float(h["min_pp"])
        rule = f"{pct} interval lower bound > {float(h['min_pp']):g} pp"
    else:
        ok = upper is not None and upper * 100 < float(h["max_pp"])
        rule = f"{pct} interval upper bound < {float(h['max_pp']):g} pp"
    return ("supported" if ok else "not supported"), {
        "rule": rule,
        "estimate": est,
        "lower": lower,
        "upper": upper,
    }


def _row(
    ds: Any, outcome: str, a: str, b: str | None, iterations: int, seed: int
) -> dict[str, Any]:
    obs = _observations(ds, outcome, a, b)
    if not obs["keys"]:
        raise QrError("no observation")
    x, y = obs["a"], obs["b"]
    if y is None:
        named = [("mean", x)]
    else:
        named = [("default", y), ("perturbed", x), ("difference", x - y)]
        if outcome in BINARY:
            _binary(obs, outcome)
            named.append(("success_rate", (x != y).astype(float)))
    reps = _replicates([c for _, c in named], iterations, seed)
    row: dict[str, Any] = {
        "n": len(obs["keys"]),
        "undefined": obs["undefined"],
        "given_up": obs["given_up"],
    }
    for (name, column), r in zip(named, reps, strict=True):
        lo, hi = _bounds(r, 0.95)
        row[name] = {
            "estimate": float(np.mean(column)),
            "lower": lo,
            "upper": hi,
            "half_width": (hi - lo) / 2,
        }
    return row


def descriptive_values(ds: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """``descriptive.qr_bootstrap``: contrast entries, then arm entries, plan order each."""
    design = plan["design"]
    iterations, seed = int(design["bootstrap_iterations"]), int(design["bootstrap_seed"])
    contrasts: list[tuple[str, str | None, str]] = []
    arms: list[tuple[str, str | None, str]] = []
    for h in plan.get("hypotheses") or []:
        if not is_qr(h):
            continue
        outcome = str(h.get("outcome") or "trial_accuracy")
        if h.get("statistic") in ONE_ARM:
            entry: tuple[str, str | None, str] = (str(h["arm"]), None, outcome)
            if entry not in arms:
                arms.append(entry)
        else:
            entry = (str(h["contrast"][0]), str(h["contrast"][1]), outcome)
            if entry not in contrasts:
                contrasts.append(entry)
    entries = []
    for a, b, outcome in contrasts + arms:
        rows = []
        for model in [None, *ds.models] if ds.several_models else [None]:
            part = ds if model is None else ds.for_model(model)
            try:
                row = _row(part, outcome, a, b, iterations, seed)
            except QrError as exc:
                row = {"error": str(exc)}
            rows.append({"model": model, **row})
        entry_head: dict[str, Any] = {"arm": a} if b is None else {"contrast": [a, b]}
        entries.append({**entry_head, "outcome": outcome, "rows": rows})
    return {
        "conf": 0.95,
        "iterations": iterations,
        "seed": seed,
        "ci_method": CI_METHOD,
        "entries": entries,
    }


# ------------------------------------------------------------------------------ report (§7)

SHARES = (
    "trial_accuracy",
    "glyph_accuracy",
    "plausibility",
    "h_coverage",
    "s_coverage",
    "grounding_rate",
    "indirect_rate",
    "uncertainty",
)
"""Outcomes that are shares in [0, 1] (``breadth``, a count, is not): the report shows them in
percent (statistics.md; scoring.md §12 for the differential-diagnosis metrics)."""
PM = (
    'estimate ± half the width of the 95% percentile interval (the seed\'s "±"; the '
    "interval, not always symmetric, in brackets)"
)


def _floats(*xs: Any) -> list[float] | None:
    ok = all(isinstance(x, int | float) and not isinstance(x, bool) for x in xs)
    return [float(x) for x in xs] if ok else None


def _pm(cell: Any, share: bool) -> str:
    got = (
        _floats(*[cell.get(k) for k in ("estimate", "half_width", "lower", "upper")])
        if (isinstance(cell, dict))
        else None
    )
    if got is None:
        return "–"
    scale = 100.0 if share else 1.0
    e, hw, lo, hi = (x * scale for x in got)
    if share:
        return f"{e:.1f} ± {hw:.1f} [{lo:.1f}, {hi:.1f}]"
    return f"{e:.3g} ± {hw:.3g} [{lo:.3g}, {hi:.3g}]"


def estimate_text(v: dict[str, Any]) -> str:
    """The hypothesis table's estimate cell of a qr-bootstrap result."""
    got = _floats(v.get("estimate"), v.get("lower"), v.get("upper"), v.get("conf"))
    if got is None:
        return "–"
    e, lo, hi, conf = got
    level = f"{round(100 * conf, 6):g}%"
    if v.get("outcome") not in SHARES:
        body = f"{e:.4g} ({level} CI {lo:.4g} to {hi:.4g})"
    elif v.get("statistic") == "difference":
        body = f"{e * 100:+.1f} pp ({level} CI {lo * 100:+.1f} to {hi * 100:+.1f} pp)"
    else:
        body = f"{e * 100:.1f}% ({level} CI {lo * 100:.1f}% to {hi * 100:.1f}%)"
    return f"{v.get('statistic')} {body}"


def _contrast_row(row: dict[str, Any], share: bool) -> list[str]:
    """One model's row of a contrast's table."""
    model = "all (pooled)" if row.get("model") is None else str(row.get("model"))
    if "error" in row:
        return [model, f"not computed: {row['error']}", "–", "–", "–", "–", "–"]
    return [
        model,
        str(row.get("n")),
        _pm(row.get("default"), share),
        _pm(row.get("success_rate"), True),
        _pm(row.get("perturbed"), share),
        _pm(row.get("difference"), share),
        f"{row.get('undefined', 0)} undefined, {row.get('given_up', 0)} given up",
    ]


def _arm_row(entry: dict[str, Any], row: dict[str, Any], outcome: str, share: bool) -> list[str]:
    """One model's row of the one-arm table."""
    model = "all (pooled)" if row.get("model") is None else str(row.get("model"))
    note = f"not computed: {row['error']}" if "error" in row else None
    gone = f"{row.get('undefined', 0)} undefined, {row.get('given_up', 0)} given up"
    return [
        str(entry.get("arm")),
        outcome,
        model,
        note or str(row.get("n")),
        "–" if note else _pm(row.get("mean"), share),
        "–" if note else gone,
    ]


CONTRAST_HEADER = [
    "model",
    "pairs",
    "default",
    "success rate",
    "perturbed",
    "difference (perturbed − default)",
    "excluded",
]


def report_tables(result: dict[str, Any] | None) -> list[tuple[str, list[str], list[list[str]]]]:
    """``descriptive.qr_bootstrap`` as the report tables it: a table per contrast, one of arms."""
    if not isinstance(result, dict) or result.get("status") != "ok":
        return []
    values = result.get("values") if isinstance(result.get("values"), dict) else {}
    tables: list[tuple[str, list[str], list[list[str]]]] = []
    arm_rows: list[list[str]] = []
    for entry in (values or {}).get("entries") or []:
        outcome = str(entry.get("outcome"))
        share = outcome in SHARES
        rows = entry.get("rows") or []
        if "contrast" not in entry:
            arm_rows += [_arm_row(entry, row, outcome, share) for row in rows]
            continue
        pair = " vs ".join(map(str, entry["contrast"]))
        tables.append(
            (
                f"{result.get('title')}: {pair} ({outcome}); {PM}",
                list(CONTRAST_HEADER),
                [_contrast_row(row, share) for row in rows],
            )
        )
    if arm_rows:
        tables.append(
            (
                "Mean outcome of one arm, bootstrap over (question, run) observations; " + PM,
                ["arm", "outcome", "model", "n", "mean", "excluded"],
                arm_rows,
            )
        )
    return tables
