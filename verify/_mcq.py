"""Seed 002's multiple-choice statistics, re-derived from ``docs/mcq-statistics.md``.

An independent second implementation for the verifier: plain dict rows in (one per scored trial,
the columns the page lists), the JSON-ready dict each result's ``as_dict()`` has on that page
out. Only the standard library, numpy and scipy (and the verifier's own :mod:`verify._restats`);
the logistic GEE is solved here directly (Gauss-Newton on the estimating equations with the
exchangeable moment estimator), not through statsmodels.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

# scipy is imported inside the functions that use it: the checks before the science ones load
# none of it (tests/verify/test_verify_imports.py).
import numpy as np

from verify._restats import (
    NotApplicable,
    StatError,
    bonferroni,
    bootstrap_clustered,
    holm,
    mcnemar,
    num,
    wilson,
)

__all__ = [
    "GeeNotFittable",
    "McqStatError",
    "accuracy_by_cell",
    "check_trials",
    "ckld",
    "cloze",
    "flip_rate_between",
    "gee_arm_effects",
    "mcnemar_family",
    "mean_over_seeds",
    "ordering_consistency",
    "paired_mcnemar",
    "permutation_vote",
    "position_bias_from_shares",
    "position_metrics",
    "review_sample",
    "rstd",
    "self_consistency",
]

LETTERS = ("A", "B", "C", "D")
COLUMNS = (
    "trial",
    "item",
    "arm",
    "model",
    "variant",
    "rep",
    "key",
    "key_original",
    "letter",
    "answer",
    "correct",
    "parse",
)
Row = dict[str, Any]
Cond = tuple[str, str, str]


class McqStatError(StatError):
    """A trials table or request the page says cannot be computed on."""


class GeeNotFittable(McqStatError, NotApplicable):
    """§8: a GEE the data cannot fit; ``column`` is the design column at fault or None."""

    def __init__(self, message: str, column: str | None) -> None:
        super().__init__(message)
        self.column = column


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _where(row: Row) -> str:
    return f"trial {row['trial']!r} (item {row['item']!r}, variant {row['variant']!r})"


def check_trials(rows: Sequence[Mapping[str, Any]], letters: Sequence[str] = LETTERS) -> list[Row]:
    """The page's table rules; normalized copies of the rows."""
    names = [str(v) for v in letters]
    if len(names) < 2 or len(set(names)) != len(names):
        raise McqStatError("letters: need at least two distinct labels")
    if not rows:
        raise McqStatError("trials table: no rows")
    out: list[Row] = []
    seen_trial: set[str] = set()
    seen_cell: set[tuple[str, str, str, str, int]] = set()
    key_of: dict[str, str] = {}
    for i, raw in enumerate(rows):
        for column in COLUMNS:
            if column not in raw:
                raise McqStatError(f"trials table: missing column {column!r}")
        row = dict(raw)
        for column in ("trial", "item", "arm", "model", "variant", "parse"):
            if _missing(row[column]):
                raise McqStatError(f"trials table: column {column!r} is empty in row {i}")
            row[column] = str(row[column])
        rep = row["rep"]
        if isinstance(rep, bool) or _missing(rep) or float(rep) != int(float(rep)):
            raise McqStatError(f"trials table: column 'rep' is not an integer in row {i}")
        row["rep"] = int(float(rep))
        if row["trial"] in seen_trial:
            raise McqStatError(f"trials table: column 'trial' repeats {_where(row)}")
        seen_trial.add(row["trial"])
        cell = (row["item"], row["arm"], row["model"], row["variant"], row["rep"])
        if cell in seen_cell:
            raise McqStatError(
                f"trials table: (item, arm, model, variant, rep) repeats in {_where(row)}"
            )
        seen_cell.add(cell)
        for column in ("key", "key_original"):
            if row[column] not in names:
                raise McqStatError(
                    f"trials table: column {column!r} is not one of {names} in {_where(row)}"
                )
        if key_of.setdefault(row["item"], row["key_original"]) != row["key_original"]:
            raise McqStatError(
                f"trials table: column 'key_original' differs between rows of item {row['item']!r}"
            )
        for column in ("letter", "answer"):
            if _missing(row[column]):
                row[column] = None
            elif row[column] not in names:
                raise McqStatError(
                    f"trials table: column {column!r} is neither null nor one "
                    f"of {names} in {_where(row)}"
                )
        if (row["letter"] is None) != (row["answer"] is None):
            raise McqStatError(
                f"trials table: columns 'letter' and 'answer' must be null "
                f"together, not in {_where(row)}"
            )
        if (row["parse"] == "ok") != (row["letter"] is not None):
            raise McqStatError(
                f"trials table: column 'parse' is 'ok' exactly when 'letter' "
                f"is read, not in {_where(row)}"
            )
        if row["correct"] not in (True, False, 0, 1) or _missing(row["correct"]):
            raise McqStatError("trials table: column 'correct' must be boolean in every row")
        row["correct"] = bool(row["correct"])
        if row["correct"] != (row["letter"] is not None and row["letter"] == row["key"]):
            raise McqStatError(
                f"trials table: column 'correct' differs from letter == key in {_where(row)}"
            )
        if row["correct"] != (row["answer"] is not None and row["answer"] == row["key_original"]):
            raise McqStatError(
                f"trials table: column 'correct' differs from answer == "
                f"key_original in {_where(row)}"
            )
        out.append(row)
    return out


def _cond(c: Any) -> Cond:
    if isinstance(c, Mapping):
        return (str(c["arm"]), str(c["variant"]), str(c["model"]))
    arm, variant, model = c
    return (str(arm), str(variant), str(model))


def _cdict(c: Cond) -> dict[str, str]:
    return {"arm": c[0], "variant": c[1], "model": c[2]}


def _select(rows: Sequence[Row], c: Cond) -> list[Row]:
    part = [r for r in rows if (r["arm"], r["variant"], r["model"]) == c]
    if not part:
        raise McqStatError(f"condition {'/'.join(c)}: no trials in the table")
    return part


def accuracy_by_cell(
    rows: Sequence[Mapping[str, Any]], conf: float = 0.95, letters: Sequence[str] = LETTERS
) -> list[dict[str, Any]]:
    """Accuracy and Wilson interval per (arm, variant, model), sorted."""
    table = check_trials(rows, letters)
    cells: dict[Cond, list[Row]] = defaultdict(list)
    for r in table:
        cells[(r["arm"], r["variant"], r["model"])].append(r)
    out = []
    for c in sorted(cells):
        group = cells[c]
        k = sum(1 for r in group if r["correct"])
        w = wilson(k, len(group), conf)
        out.append(
            {
                "arm": c[0],
                "variant": c[1],
                "model": c[2],
                "n": len(group),
                "correct": k,
                "unparsed": sum(1 for r in group if r["letter"] is None),
                "accuracy": w["estimate"],
                "lower": w["lower"],
                "upper": w["upper"],
                "conf": conf,
            }
        )
    return out


def _pairs(table: Sequence[Row], a: Cond, b: Cond) -> tuple[list[tuple[Row, Row]], int, int]:
    if a == b:
        raise McqStatError(f"conditions: a and b are the same cell {'/'.join(a)}")
    left = {(r["item"], r["rep"]): r for r in _select(table, a)}
    right = {(r["item"], r["rep"]): r for r in _select(table, b)}
    common = sorted(set(left) & set(right))
    if not common:
        raise McqStatError("conditions: no (item, rep) in common")
    return (
        [(left[k], right[k]) for k in common],
        len(left) - len(common),
        len(right) - len(common),
    )


def paired_mcnemar(
    rows: Sequence[Mapping[str, Any]], a: Any, b: Any, letters: Sequence[str] = LETTERS
) -> dict[str, Any]:
    """McNemar of a against b paired by (item, rep)."""
    table = check_trials(rows, letters)
    ca, cb = _cond(a), _cond(b)
    pairs, ua, ub = _pairs(table, ca, cb)
    tally = Counter((x["correct"], y["correct"]) for x, y in pairs)
    n = len(pairs)
    acc_a = sum(1 for x, _ in pairs if x["correct"]) / n
    acc_b = sum(1 for _, y in pairs if y["correct"]) / n
    return {
        "a": _cdict(ca),
        "b": _cdict(cb),
        "n_pairs": n,
        "both_correct": tally[(True, True)],
        "b_count": tally[(True, False)],
        "c_count": tally[(False, True)],
        "both_wrong": tally[(False, False)],
        "unpaired_a": ua,
        "unpaired_b": ub,
        "accuracy_a": acc_a,
        "accuracy_b": acc_b,
        "difference": acc_a - acc_b,
        "test": mcnemar(tally[(True, False)], tally[(False, True)]),
    }


def mcnemar_family(
    rows: Sequence[Mapping[str, Any]],
    comparisons: Sequence[tuple[Any, Any]],
    method: str = "holm",
    alpha: float = 0.05,
    letters: Sequence[str] = LETTERS,
) -> dict[str, Any]:
    """The declared family, adjusted by Holm or Bonferroni."""
    if not comparisons or method not in ("holm", "bonferroni"):
        raise McqStatError("comparisons: empty family or unknown method")
    results = [paired_mcnemar(rows, a, b, letters) for a, b in comparisons]
    ps = [r["test"]["p"] for r in results]
    adj = holm(ps, alpha) if method == "holm" else bonferroni(ps, alpha)
    return {
        "method": method,
        "alpha": alpha,
        "comparisons": results,
        "p": ps,
        "adjusted": adj["adjusted"],
        "reject": adj["reject"],
    }


def flip_rate_between(
    rows: Sequence[Mapping[str, Any]],
    a: Any,
    b: Any,
    basis: str = "answer",
    iterations: int = 2000,
    seed: int = 0,
    conf: float = 0.95,
    letters: Sequence[str] = LETTERS,
) -> dict[str, Any]:
    """Flip rate on the declared basis; item-cluster percentile bootstrap."""
    if basis not in ("answer", "letter"):
        raise McqStatError(f"basis: {basis!r}")
    table = check_trials(rows, letters)
    ca, cb = _cond(a), _cond(b)
    pairs, ua, ub = _pairs(table, ca, cb)
    flips = [1.0 if x[basis] != y[basis] else 0.0 for x, y in pairs]
    unparsed = sum(1 for x, y in pairs if x[basis] is None or y[basis] is None)
    boot = bootstrap_clustered(
        flips,
        [x["item"] for x, _ in pairs],
        [x["rep"] for x, _ in pairs],
        iterations,
        seed,
        conf,
        unit="question",
    )
    return {
        "a": _cdict(ca),
        "b": _cdict(cb),
        "basis": basis,
        "n_pairs": len(flips),
        "n_items": boot["n_clusters"],
        "flips": int(sum(flips)),
        "rate": sum(flips) / len(flips),
        "lower": boot["lower"],
        "upper": boot["upper"],
        "conf": conf,
        "ci_method": "item-cluster-bootstrap-percentile",
        "iterations": iterations,
        "seed": boot["seed"],
        "unparsed_pairs": unparsed,
        "unpaired_a": ua,
        "unpaired_b": ub,
    }


def position_bias_from_shares(p_pred: Sequence[float], p_truth: Sequence[float]) -> float:
    """Half the summed absolute differences (total variation distance)."""
    if len(p_pred) != len(p_truth) or len(p_pred) < 2:
        raise McqStatError("p_pred, p_truth: unequal or too short")
    return 0.5 * sum(abs(float(x) - float(y)) for x, y in zip(p_pred, p_truth, strict=True))


def ckld(counts: Sequence[float], reference: Sequence[float] | None = None) -> float:
    """Pearson chi-square of prediction counts against the reference distribution."""
    n = float(sum(counts))
    if len(counts) < 2 or n <= 0 or any(c < 0 for c in counts):
        raise McqStatError("counts: need >= 2 non-negative counts with a positive total")
    if reference is None:
        q = [1.0 / len(counts)] * len(counts)
    else:
        if len(reference) != len(counts) or any(not w > 0 for w in reference):
            raise McqStatError("reference: one positive weight per position")
        total = float(sum(reference))
        q = [float(w) / total for w in reference]
    return sum((float(o) - n * w) ** 2 / (n * w) for o, w in zip(counts, q, strict=True))


def rstd(accuracies: Sequence[float]) -> float:
    """Population SD over mean of the per-position accuracies."""
    if len(accuracies) < 2:
        raise McqStatError("accuracies: need >= 2")
    m = sum(accuracies) / len(accuracies)
    if m <= 0:
        return math.nan
    return math.sqrt(sum((a - m) ** 2 for a in accuracies) / len(accuracies)) / m


def position_metrics(
    rows: Sequence[Mapping[str, Any]],
    condition: Any,
    reference: str = "uniform",
    letters: Sequence[str] = LETTERS,
) -> dict[str, Any]:
    """Position bias, per-position accuracy, CKLD and RStd of one condition."""
    from scipy import stats as sps

    if reference not in ("uniform", "truth"):
        raise McqStatError(f"reference: {reference!r}")
    table = check_trials(rows, letters)
    c = _cond(condition)
    part = _select(table, c)
    names = [str(v) for v in letters]
    n = len(part)
    pred = [sum(1 for r in part if r["letter"] == v) for v in names]
    truth = [sum(1 for r in part if r["key"] == v) for v in names]
    parsed = sum(pred)
    if parsed == 0:
        raise McqStatError(f"condition {'/'.join(c)}: no parsed prediction")
    if reference == "truth" and 0 in truth:
        raise McqStatError(f"condition {'/'.join(c)}: reference 'truth' has an empty position")
    p_pred = [v / parsed for v in pred]
    p_truth = [v / n for v in truth]
    total = sum(abs(x - y) for x, y in zip(p_pred, p_truth, strict=True))
    value = ckld(pred, None if reference == "uniform" else truth)
    per: list[dict[str, Any]] = []
    for v, count in zip(names, truth, strict=True):
        if count == 0:
            per.append(
                {"letter": v, "n": 0, "correct": 0, "accuracy": None, "lower": None, "upper": None}
            )
            continue
        k = sum(1 for r in part if r["key"] == v and r["correct"])
        w = wilson(k, count)
        per.append(
            {
                "letter": v,
                "n": count,
                "correct": k,
                "accuracy": w["estimate"],
                "lower": w["lower"],
                "upper": w["upper"],
            }
        )
    used = [p for p in per if p["n"] > 0]
    spread = rstd([p["accuracy"] for p in used]) if len(used) >= 2 else math.nan
    return {
        "condition": _cdict(c),
        "letters": names,
        "n": n,
        "n_parsed": parsed,
        "pred_counts": pred,
        "truth_counts": truth,
        "p_pred": p_pred,
        "p_truth": p_truth,
        "bias": total / 2,
        "bias_quarter": total / 4,
        "ckld": value,
        "ckld_reference": reference,
        "ckld_df": len(names) - 1,
        "ckld_p": float(sps.chi2.sf(value, len(names) - 1)),
        "per_position": per,
        "rstd": num(spread),
        "rstd_positions": [p["letter"] for p in used],
    }


def _vote(answers: Sequence[str | None]) -> tuple[str | None, int, bool]:
    """Majority of the parsed answers in declared order; ties to the earliest vote."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None, 0, False
    top = max(counts.values())
    tied = [a for a, c in counts.items() if c == top]
    first = min(tied, key=answers.index)
    return first, top, len(tied) > 1


def _sd(values: Sequence[float]) -> float:
    if len(values) < 2:
        return math.nan
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def _order_groups(
    table: Sequence[Row], arm: str, model: str, orders: Sequence[str], what: str
) -> dict[tuple[str, int], dict[str, Row]]:
    """The arm and model's trials in ``orders``, by (item, rep) and then by variant.

    Each order must have at least one trial.
    """
    groups: dict[tuple[str, int], dict[str, Row]] = defaultdict(dict)
    for r in table:
        if r["arm"] == arm and r["model"] == model and r["variant"] in orders:
            groups[(r["item"], r["rep"])][r["variant"]] = r
    if not groups:
        raise McqStatError(f"{what}: no trials for arm {arm!r}, model {model!r}")
    present = {v for g in groups.values() for v in g}
    for v in orders:
        if v not in present:
            raise McqStatError(
                f"{what}: variant {v!r} has no trial for arm {arm!r}, model {model!r}"
            )
    return groups


def _incomplete(
    key: tuple[str, int], arm: str, model: str, missing: list[str], have: dict[str, Row]
) -> dict[str, Any]:
    """The exclusion record of an (item, rep) group that lacks some orders."""
    return {
        "item": key[0],
        "rep": key[1],
        "arm": arm,
        "model": model,
        "reason": f"incomplete orders: missing {', '.join(missing)}",
        "trials": sorted(r["trial"] for r in have.values()),
    }


def _groups(
    table: Sequence[Row], arm: str, model: str, orders: Sequence[str], incomplete: str, what: str
) -> tuple[dict[tuple[str, int], dict[str, Row]], list[dict[str, Any]]]:
    if incomplete not in ("exclude", "error"):
        raise McqStatError(f"incomplete: {incomplete!r}")
    if len(orders) < 2 or len(set(orders)) != len(orders):
        raise McqStatError(f"{what}: orders must be >= 2 distinct variants")
    groups = _order_groups(table, arm, model, orders, what)
    exclusions = []
    complete = {}
    for key in sorted(groups):
        have = groups[key]
        missing = [v for v in orders if v not in have]
        if not missing:
            complete[key] = have
            continue
        if incomplete == "error":
            raise McqStatError(
                f"{what}: item {key[0]!r} rep {key[1]} has no trial for variant {missing[0]!r}"
            )
        exclusions.append(_incomplete(key, arm, model, missing, have))
    if not complete:
        raise McqStatError(f"{what}: no (item, rep) group has every order")
    return complete, exclusions


def _consistency(
    complete: Mapping[tuple[str, int], Mapping[str, Row]],
    arm: str,
    model: str,
    orders: Sequence[str],
    basis: str,
    exclusions: list[dict[str, Any]],
) -> dict[str, Any]:
    k = len(orders)
    tops = [_vote([g[v][basis] for v in orders])[1] for g in complete.values()]
    n = len(tops)
    agreement = [t / k for t in tops]
    per_order: list[dict[str, Any]] = []
    for v in orders:
        c = sum(1 for g in complete.values() if g[v]["correct"])
        per_order.append({"variant": v, "n": n, "correct": c, "accuracy": c / n})
    accs = [p["accuracy"] for p in per_order]
    return {
        "arm": arm,
        "model": model,
        "orders": list(orders),
        "basis": basis,
        "n_groups": n,
        "levels": [[m, tops.count(m), tops.count(m) / n] for m in range(k, -1, -1)],
        "agreement_mean": sum(agreement) / n,
        "agreement_sd": num(_sd(agreement)),
        "per_order": per_order,
        "order_mean": sum(accs) / k,
        "order_sd": _sd(accs),
        "exclusions": exclusions,
    }


def ordering_consistency(
    rows: Sequence[Mapping[str, Any]],
    arm: str,
    model: str,
    orders: Sequence[str],
    basis: str = "answer",
    incomplete: str = "exclude",
    letters: Sequence[str] = LETTERS,
) -> dict[str, Any]:
    """Consistency levels and agreement across orders."""
    if basis not in ("answer", "letter"):
        raise McqStatError(f"basis: {basis!r}")
    table = check_trials(rows, letters)
    order_list = [str(v) for v in orders]
    complete, excl = _groups(table, arm, model, order_list, incomplete, "consistency")
    return _consistency(complete, arm, model, order_list, basis, excl)


def _answer(item: str, rep: int, votes: Sequence[Row]) -> dict[str, Any]:
    winner, top, tie = _vote([r["answer"] for r in votes])
    key = votes[0]["key_original"]
    return {
        "item": item,
        "rep": rep,
        "answer": winner,
        "key_original": key,
        "correct": winner == key,
        "votes": top,
        "k": len(votes),
        "agreement": top / len(votes),
        "tie": tie,
        "trials": [r["trial"] for r in votes],
    }


def permutation_vote(
    rows: Sequence[Mapping[str, Any]],
    arm: str,
    model: str,
    orders: Sequence[str],
    incomplete: str = "exclude",
    abstain_below: float | None = None,
    conf: float = 0.95,
    letters: Sequence[str] = LETTERS,
) -> dict[str, Any]:
    """Majority over inverse-mapped answers across orders, first-order tie rule."""
    table = check_trials(rows, letters)
    order_list = [str(v) for v in orders]
    complete, excl = _groups(table, arm, model, order_list, incomplete, "permutation vote")
    answers = [
        _answer(item, rep, [g[v] for v in order_list])
        for (item, rep), g in sorted(complete.items())
    ]
    n = len(answers)
    k = sum(1 for a in answers if a["correct"])
    w = wilson(k, n, conf)
    abstention = None
    if abstain_below is not None:
        if not 0 <= abstain_below <= 1:
            raise McqStatError("abstain_below: outside [0, 1]")
        kept = [a for a in answers if a["agreement"] >= abstain_below]
        abstention = {
            "threshold": float(abstain_below),
            "n": n,
            "answered": len(kept),
            "abstained": n - len(kept),
            "coverage": len(kept) / n,
            "accuracy_answered": (
                sum(1 for a in kept if a["correct"]) / len(kept) if kept else None
            ),
        }
    return {
        "arm": arm,
        "model": model,
        "orders": order_list,
        "tie_rule": "first-order",
        "n_groups": n,
        "correct": k,
        "accuracy": w["estimate"],
        "lower": w["lower"],
        "upper": w["upper"],
        "ties": sum(1 for a in answers if a["tie"]),
        "consistency": _consistency(complete, arm, model, order_list, "answer", excl),
        "abstention": abstention,
        "answers": answers,
        "exclusions": excl,
    }


def _check_sampling(c: Any, n_samples: Any, temperature: Any, incomplete: str) -> None:
    """Self-consistency's arguments: n_samples >= 2, a positive temperature, a known rule."""
    if isinstance(n_samples, bool) or int(n_samples) != n_samples or n_samples < 2:
        raise McqStatError("self-consistency: n_samples must be an integer >= 2")
    if not math.isfinite(float(temperature)) or float(temperature) <= 0:
        raise McqStatError(
            f"self-consistency {'/'.join(c)}: temperature {temperature} is a configuration error"
        )
    if incomplete not in ("exclude", "error"):
        raise McqStatError(f"incomplete: {incomplete!r}")


def self_consistency(
    rows: Sequence[Mapping[str, Any]],
    condition: Any,
    n_samples: int,
    temperature: float,
    incomplete: str = "exclude",
    conf: float = 0.95,
    letters: Sequence[str] = LETTERS,
) -> dict[str, Any]:
    """Majority over the first n_samples reps per item; temperature 0 refused."""
    c = _cond(condition)
    _check_sampling(c, n_samples, temperature, incomplete)
    table = check_trials(rows, letters)
    by_item: dict[str, list[Row]] = defaultdict(list)
    for r in _select(table, c):
        by_item[r["item"]].append(r)
    answers, exclusions, samples = [], [], []
    for item in sorted(by_item):
        reps = sorted(by_item[item], key=lambda r: r["rep"])
        if len(reps) < n_samples:
            if incomplete == "error":
                raise McqStatError(
                    f"self-consistency: item {item!r} has {len(reps)} of {n_samples} samples"
                )
            exclusions.append(
                {
                    "item": item,
                    "rep": 0,
                    "arm": c[0],
                    "model": c[2],
                    "reason": f"incomplete samples: {len(reps)} of {n_samples}",
                    "trials": sorted(r["trial"] for r in reps),
                }
            )
            continue
        used = reps[:n_samples]
        samples += [r["correct"] for r in used]
        answers.append(_answer(item, 0, used))
    if not answers:
        raise McqStatError("self-consistency: no item has enough samples")
    k = sum(1 for a in answers if a["correct"])
    w = wilson(k, len(answers), conf)
    return {
        "condition": _cdict(c),
        "n_samples": int(n_samples),
        "temperature": float(temperature),
        "n_items": len(answers),
        "correct": k,
        "accuracy": w["estimate"],
        "lower": w["lower"],
        "upper": w["upper"],
        "mean_sample_accuracy": sum(samples) / len(samples),
        "ties": sum(1 for a in answers if a["tie"]),
        "answers": answers,
        "exclusions": exclusions,
    }


def cloze(
    rows: Sequence[Mapping[str, Any]],
    condition: Any,
    missing: str = "error",
    conf: float = 0.95,
    letters: Sequence[str] = LETTERS,
) -> dict[str, Any]:
    """Cloze choice, accuracy, mean margin and position bias from logprob_<letter>."""
    if missing not in ("exclude", "error"):
        raise McqStatError(f"missing: {missing!r}")
    table = check_trials(rows, letters)
    c = _cond(condition)
    names = [str(v) for v in letters]
    used, margins, chosen, exclusions = [], [], [], []
    for r in _select(table, c):
        lps = []
        for v in names:
            value = r.get(f"logprob_{v}")
            number = (
                float(value)
                if isinstance(value, int | float) and not isinstance(value, bool)
                else math.nan
            )
            if not math.isfinite(number):
                reason = f"no log-probability for option letter {v!r}"
                if missing == "error":
                    raise McqStatError(
                        f"cloze: item {r['item']!r} variant {r['variant']!r}: {reason}"
                    )
                exclusions.append(
                    {
                        "item": r["item"],
                        "rep": r["rep"],
                        "arm": c[0],
                        "model": c[2],
                        "reason": reason,
                        "trials": [r["trial"]],
                    }
                )
                break
            lps.append(number)
        else:
            best = max(range(len(names)), key=lambda j: (lps[j], -j))
            ordered = sorted(lps)
            if r["letter"] is not None and r["letter"] != names[best]:
                raise McqStatError(
                    f"cloze: trial {r['trial']!r} records letter "
                    f"{r['letter']!r} but chooses {names[best]!r}"
                )
            used.append(r)
            chosen.append(best)
            margins.append(ordered[-1] - ordered[-2])
    if not used:
        raise McqStatError("cloze: no trial with every log-probability")
    n = len(used)
    hits = sum(1 for r, j in zip(used, chosen, strict=True) if names[j] == r["key"])
    w = wilson(hits, n, conf)
    counts = [chosen.count(j) for j in range(len(names))]
    p_truth = [sum(1 for r in used if r["key"] == v) / n for v in names]
    return {
        "condition": _cdict(c),
        "n": n,
        "correct": hits,
        "accuracy": w["estimate"],
        "lower": w["lower"],
        "upper": w["upper"],
        "margin_mean": sum(margins) / n,
        "margin_sd": num(_sd(margins)),
        "pred_counts": counts,
        "bias": position_bias_from_shares([x / n for x in counts], p_truth),
        "exclusions": exclusions,
    }


def _dummies(
    table: Sequence[Row],
    column: str,
    levels: Sequence[str],
    reference: str,
    names: list[str],
    cols: list[list[float]],
) -> None:
    """Append a treatment-coded 0/1 column (and its name) per level other than ``reference``."""
    for v in levels:
        if v != reference:
            names.append(f"{column}[T.{v}]")
            cols.append([1.0 if r[column] == v else 0.0 for r in table])


def _design(
    table: Sequence[Row], reference: str, factors: Mapping[str, str]
) -> tuple[list[str], np.ndarray[Any, np.dtype[np.float64]], list[str]]:
    names = ["Intercept"]
    cols = [[1.0] * len(table)]
    arms = sorted({r["arm"] for r in table})
    if reference not in arms or len(arms) < 2:
        raise McqStatError(f"arm: reference {reference!r} not among {arms} or one arm")
    _dummies(table, "arm", arms, reference, names, cols)
    for column, ref in factors.items():
        if column not in ("model", "variant"):
            raise McqStatError(f"factors: {column!r}")
        levels = sorted({r[column] for r in table})
        if ref not in levels:
            raise McqStatError(f"{column}: reference {ref!r} not among {levels}")
        _dummies(table, column, levels, ref, names, cols)
    x = np.array(cols, dtype=np.float64).T
    if np.linalg.matrix_rank(x) < x.shape[1]:
        raise McqStatError("GEE design: columns are linearly dependent")
    return names, x, [reference] + [a for a in arms if a != reference]


DEGENERATE_RATIO = 1e-8
"""mcq-statistics.md §8: the robust over model-based variance at or below which a term is
degenerate."""


def gee_arm_effects(
    rows: Sequence[Mapping[str, Any]],
    reference: str,
    factors: Mapping[str, str] | None = None,
    conf: float = 0.95,
    letters: Sequence[str] = LETTERS,
    tol: float = 1e-10,
    max_iter: int = 200,
) -> dict[str, Any]:
    """Logistic GEE, exchangeable within item, robust SEs; solved here from the page.

    Fixed point of: β solves ``Σ_i D_iᵀ V_i⁻¹ (y_i − µ_i) = 0`` with ``V_i = A_i^½ R(α) A_i^½``,
    ``A = diag(µ(1−µ))``, ``R(α) = (1−α)I + αJ``; α is the moment estimator of the page.
    """
    from scipy import stats as sps

    table = check_trials(rows, letters)
    extra = dict(factors or {})
    names, x, arms = _design(table, str(reference), extra)
    y = np.array([1.0 if r["correct"] else 0.0 for r in table])
    if y.min() == y.max():
        raise GeeNotFittable("correct: every trial has the same outcome", None)
    for column in ("arm", *extra):  # the page: a level whose trials all agree is separation
        seen: dict[str, set[bool]] = {}
        for r in table:
            seen.setdefault(str(r[column]), set()).add(bool(r["correct"]))
        for level in sorted(seen):
            if len(seen[level]) == 1:
                raise GeeNotFittable(
                    f"GEE: every trial of {column} {level!r} has one outcome (separation)", column
                )
    items = sorted({r["item"] for r in table})
    index = {item: i for i, item in enumerate(items)}
    members: list[list[int]] = [[] for _ in items]
    for j, r in enumerate(table):
        members[index[r["item"]]].append(j)
    clusters = [np.array(m, dtype=np.int64) for m in members]
    n, p = x.shape
    pairs = sum(len(m) * (len(m) - 1) // 2 for m in members)
    if n - p <= 0 or pairs - p <= 0:  # mcq-statistics.md §8 rule 0: the moments divide by these
        raise GeeNotFittable(
            f"GEE: {n} trials, {pairs} within-item pairs, {p} coefficients: "
            "the working correlation is undefined",
            None,
        )
    beta = np.zeros(p)
    alpha = 0.0

    def solve_parts(
        beta: np.ndarray[Any, np.dtype[np.float64]], alpha: float
    ) -> tuple[Any, Any, Any]:
        bmat = np.zeros((p, p))
        score = np.zeros(p)
        meat = np.zeros((p, p))
        for idx in clusters:
            xi = x[idx]
            mu = 1.0 / (1.0 + np.exp(-(xi @ beta)))
            v = mu * (1.0 - mu)
            d = xi * v[:, None]
            sd = np.sqrt(v)
            m = len(idx)
            r = (1.0 - alpha) * np.eye(m) + alpha * np.ones((m, m))
            vmat = sd[:, None] * r * sd[None, :]
            vinv_d = np.linalg.solve(vmat, d)
            vinv_res = np.linalg.solve(vmat, y[idx] - mu)
            bmat += d.T @ vinv_d
            u = d.T @ vinv_res
            score += u
            meat += np.outer(u, u)
        return bmat, score, meat

    def update_alpha(beta: np.ndarray[Any, np.dtype[np.float64]]) -> float:
        ssr_total, cross, pairs = 0.0, 0.0, 0.0
        for idx in clusters:
            mu = 1.0 / (1.0 + np.exp(-(x[idx] @ beta)))
            res = (y[idx] - mu) / np.sqrt(mu * (1.0 - mu))
            ssr = float(res @ res)
            ssr_total += ssr
            cross += (float(res.sum()) ** 2 - ssr) / 2.0
            pairs += len(idx) * (len(idx) - 1) / 2.0
        scale = ssr_total / (n - p)
        return float((cross / scale) / (pairs - p))

    converged = False
    try:
        for _ in range(max_iter):
            for _ in range(100):
                bmat, score, _ = solve_parts(beta, alpha)
                step = np.linalg.solve(bmat, score)
                beta = beta + step
                if float(np.max(np.abs(step))) < tol:
                    break
            new_alpha = update_alpha(beta)
            if abs(new_alpha - alpha) < tol:
                alpha = new_alpha
                converged = True
                break
            alpha = new_alpha
        bmat, _, meat = solve_parts(beta, alpha)
        binv = np.linalg.inv(bmat)
    except np.linalg.LinAlgError:  # mcq-statistics.md §8 rule 3: a singular fit is degenerate
        raise GeeNotFittable(
            "GEE: the working covariance or the information matrix is singular (a degenerate fit)",
            None,
        ) from None
    cov = binv @ meat @ binv
    for k, name in enumerate(names):  # §8: degenerate when robust <= 1e-8 x model-based
        robust, model_based = float(cov[k, k]), float(binv[k, k])
        if not (
            math.isfinite(robust)
            and math.isfinite(model_based)
            and model_based > 0
            and robust > DEGENERATE_RATIO * model_based
        ):
            raise GeeNotFittable(
                f"GEE: {name} is degenerate (robust variance {robust:.3g}, "
                f"model-based {model_based:.3g})",
                name.split("[", 1)[0] if "[" in name else None,
            )
    se = np.sqrt(np.diag(cov))
    crit = float(sps.norm.ppf(0.5 + conf / 2.0))
    terms = []
    for i, name in enumerate(names):
        z = beta[i] / se[i]
        terms.append(
            {
                "name": name,
                "estimate": float(beta[i]),
                "se": float(se[i]),
                "z": float(z),
                "p": float(2 * sps.norm.sf(abs(z))),
                "lower": float(beta[i] - crit * se[i]),
                "upper": float(beta[i] + crit * se[i]),
                "odds_ratio": math.exp(float(beta[i])),
            }
        )
    return {
        "reference": str(reference),
        "arms": arms,
        "factors": list(extra),
        "factor_references": [str(v) for v in extra.values()],
        "n_obs": n,
        "n_clusters": len(items),
        "terms": terms,
        "dependence": alpha,
        "converged": converged,
        "warnings": [],
    }


def mean_over_seeds(values: Mapping[str, float], conf: float = 0.95) -> dict[str, Any]:
    """Mean and t interval over the seeds (sd with ddof 1)."""
    from scipy import stats as sps

    pairs = sorted((str(k), float(v)) for k, v in values.items())
    if len(pairs) < 2 or not all(math.isfinite(v) for _, v in pairs) or not 0 < conf < 1:
        raise McqStatError("values: need >= 2 finite per-seed values")
    vals = [v for _, v in pairs]
    k = len(vals)
    mean = sum(vals) / k
    sd = _sd(vals)
    half = float(sps.t.ppf(0.5 + conf / 2, k - 1)) * sd / math.sqrt(k)
    return {
        "seeds": [s for s, _ in pairs],
        "values": vals,
        "k": k,
        "mean": mean,
        "sd": sd,
        "lower": mean - half,
        "upper": mean + half,
        "conf": conf,
        "method": "t",
    }


def review_sample(
    rows: Sequence[Mapping[str, Any]],
    failed: Any,
    succeeded: Any,
    size: int,
    seed: int,
    letters: Sequence[str] = LETTERS,
) -> dict[str, Any]:
    """SHA-256-ordered sample of (item, rep) where failed was wrong and succeeded right."""
    if isinstance(size, bool) or size < 1 or isinstance(seed, bool) or seed < 0:
        raise McqStatError("size, seed: a positive size and a non-negative seed")
    table = check_trials(rows, letters)
    cf, cs = _cond(failed), _cond(succeeded)
    pairs, _, _ = _pairs(table, cf, cs)
    cases = []
    for x, y in pairs:
        if x["correct"] or not y["correct"]:
            continue
        key = hashlib.sha256(f"{seed}|{x['item']}|{x['rep']}".encode()).hexdigest()

        def text(v: Any) -> str | None:
            return None if _missing(v) else str(v)

        cases.append(
            {
                "item": x["item"],
                "rep": x["rep"],
                "key_original": x["key_original"],
                "failed_trial": x["trial"],
                "succeeded_trial": y["trial"],
                "failed_answer": x["answer"],
                "succeeded_answer": y["answer"],
                "failed_response": text(x.get("response")),
                "succeeded_response": text(y.get("response")),
                "order_key": key,
            }
        )
    cases.sort(key=lambda c: c["order_key"])
    chosen = cases[:size]
    return {
        "failed": _cdict(cf),
        "succeeded": _cdict(cs),
        "seed": seed,
        "n_candidates": len(cases),
        "size": len(chosen),
        "cases": chosen,
    }
