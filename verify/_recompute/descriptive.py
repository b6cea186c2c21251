"""``descriptive.*`` results (analysis.md §3) and the covariate strata (§11).

Part of the science checks (:mod:`verify._science`); imports nothing from ``ledger``,
``runner`` or ``analysis``.
"""

from __future__ import annotations

import math
from typing import Any

from verify import _ddx
from verify import _restats as st
from verify._recompute.dataset import ItemTable, _Dataset, _trial_model
from verify._recompute.results import _guard, _Result


def _covariates_result(ds: _Dataset, plan: dict[str, Any]) -> _Result:
    """analysis.md §11: per label, value (true, false) and arm, trials and outcome means."""
    table = plan["analysis"]["covariates"]
    outcomes = list(_ddx.METRICS) if ds.ddx else ["accuracy"]

    def compute() -> dict[str, Any]:
        rows = [t for t in ds.trials if not t["control"] and not t["excluded"]]
        arms = sorted({str(t["arm"]) for t in rows})

        def cell(part: list[dict[str, Any]]) -> dict[str, Any]:
            out: dict[str, Any] = {"trials": len(part)}
            for name in outcomes:
                got = [
                    float(t[name])
                    for t in part
                    if t[name] is not None and not math.isnan(float(t[name]))
                ]
                out[name] = {"mean": math.fsum(got) / len(got) if got else None, "n": len(got)}
            return out

        strata: dict[str, Any] = {}
        for group, key in (("perturbable", "perturbable"), ("indicator", "indicators")):
            for name in table[key]:
                column = f"covariate.{name}"
                strata[name] = {
                    "group": group,
                    "levels": {
                        level: {
                            a: cell([t for t in rows if t[column] is value and t["arm"] == a])
                            for a in arms
                        }
                        for level, value in (("true", True), ("false", False))
                    },
                    "undecided": sum(t[column] is None for t in rows),
                }
        return {
            "step": table["step"],
            "perturbable": list(table["perturbable"]),
            "indicators": list(table["indicators"]),
            "outcomes": outcomes,
            "strata": strata,
        }

    return _guard(_Result("descriptive.covariates"), compute)


def _statuses(trials: list[dict[str, Any]]) -> dict[str, int]:
    """Trials per scoring status, in status order."""
    counts: dict[str, int] = {}
    for t in trials:
        counts[t["status"]] = counts.get(t["status"], 0) + 1
    return dict(sorted(counts.items()))


def _parse_rate(statuses: dict[str, int], n: int) -> float | None:
    """The share of trials parsed (``ok`` or ``partial``), None without trials."""
    return (statuses.get("ok", 0) + statuses.get("partial", 0)) / n if n else None


def _clustered(items: ItemTable) -> dict[str, Any]:
    """The glyph accuracy clustered by stimulus."""
    by: dict[str, list[int]] = {}
    for stimulus, correct in zip(items.column("stimulus"), items.correct, strict=True):
        cell = by.setdefault(str(stimulus), [0, 0])
        cell[0] += 1 if correct else 0
        cell[1] += 1
    ordered = [by[k] for k in sorted(by)]
    return st.cluster_proportion([c for c, _ in ordered], [m for _, m in ordered]) | {
        "cluster": "stimulus"
    }


def _arm_entry(trials: list[dict[str, Any]], items: ItemTable, given_up: int) -> dict[str, Any]:
    """analysis.md §3 ``descriptive.arms``: one arm's (or arm x model cell's) counts."""
    tumbling = [t for t in trials if not t["control"]]
    statuses = _statuses(tumbling)
    correct = sum(1 for c in items.correct if c)
    entry: dict[str, Any] = {
        "trials_scored": len(tumbling),
        "status": statuses,
        "excluded": sum(1 for t in tumbling if t["excluded"]),
        "parse_rate": _parse_rate(statuses, len(tumbling)),
        "given_up": given_up,
        "glyphs": len(items),
        "correct": correct,
        "accuracy": st.wilson(correct, len(items)) if items else None,
    }
    if not items:
        entry["note"] = None  # text not compared
    else:
        entry["accuracy_clustered"] = _clustered(items)
    return entry


def _descriptive(ds: _Dataset) -> list[_Result]:
    items = ds.analysable_items()

    def arms() -> dict[str, Any]:
        values: dict[str, Any] = {}
        for arm in ds.arms:
            values[arm] = _arm_entry(
                [t for t in ds.trials if t["arm"] == arm],
                items.where("arm", arm),
                sum(1 for g in ds.given_up if g.split("|")[0] == arm),
            )
        return values

    def arm_models() -> dict[str, Any]:
        values: dict[str, Any] = {}
        for arm in ds.arms:
            for model in ds.models:
                trials = [t for t in ds.trials if t["arm"] == arm and t["model"] == model]
                given_up = sum(
                    1 for g in ds.given_up if g.split("|")[0] == arm and _trial_model(g) == model
                )
                if not trials and not given_up:
                    continue
                mine = items.trials_where(lambda c, a=arm, m=model: c[1] == a and c[2] == m)
                values[f"{arm}|{model}"] = {"arm": arm, "model": model} | _arm_entry(
                    trials, mine, given_up
                )
        return values

    def cells() -> dict[str, Any]:
        correct: dict[tuple[str, str], list[bool]] = {}
        for arm, stim, ok in zip(
            items.column("arm"), items.column("stimulus"), items.correct, strict=True
        ):
            correct.setdefault((str(arm), str(stim)), []).append(bool(ok))
        trials: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for t in ds.trials:
            if not t["control"]:
                trials.setdefault((str(t["arm"]), str(t["stimulus"])), []).append(t)
        out: dict[str, Any] = {}
        for (arm, stim), ts in sorted(trials.items()):
            c = correct.get((arm, stim), [])
            cell: dict[str, Any] = {"arm": arm, "stimulus": stim}
            if c:
                cell.update(st.wilson(sum(c), len(c)))
            else:
                cell.update(successes=0, n=0, conf=0.95, estimate=None, lower=None, upper=None)
                cell["note"] = None  # text not compared
            counts: dict[str, int] = {}
            for t in ts:
                counts[t["status"]] = counts.get(t["status"], 0) + 1
            cell["trials_scored"] = len(ts)
            cell["status"] = dict(sorted(counts.items()))
            cell["excluded"] = sum(1 for t in ts if t["excluded"])
            cell["parse_rate"] = (counts.get("ok", 0) + counts.get("partial", 0)) / len(ts)
            out[f"{arm}|{stim}"] = cell
        return out

    def control() -> dict[str, Any]:
        values: dict[str, Any] = {}
        for arm in ds.arms:
            a = [t for t in ds.trials if t["control"] and t["arm"] == arm]
            values[arm] = st.wilson(sum(t["n_correct"] for t in a), len(a)) if a else None
        return values

    return [
        _guard(_Result("descriptive.arms"), arms),
        *([_guard(_Result("descriptive.arm_model"), arm_models)] if ds.several_models else []),
        _guard(_Result("descriptive.arm_stimulus"), cells),
        _guard(_Result("descriptive.control"), control),
    ]
