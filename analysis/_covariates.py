"""Factor labels as covariates usable as strata (``docs/analysis.md`` §11; seed 001).

``[analysis] covariates = { step, perturbable, indicators }`` names an item step with the
``json`` parser whose boolean members are labels of each item (seed 001's seven binary factor
labels per query). Each label becomes a column ``covariate.NAME`` of the trial table (the
step's decision for the trial's item: ``True``, ``False``, or empty when the step has no
decision or the member is missing), and ``descriptive.covariates`` gives each label's strata:
per value and arm, the analysable trials and the mean of each outcome. Indicator labels (only
annotated, never edited) are kept apart from perturbable ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ledger import Ledger
from runner import DDX_METRICS, Renderer
from runner.spec import Study
from runner.steps import StepWork

__all__ = [
    "covariate_columns",
    "covariate_names",
    "covariates_title",
    "covariates_values",
    "item_labels",
]


def covariate_names(plan: Mapping[str, Any]) -> list[str]:
    """The declared labels, perturbable first, then indicators; [] without covariates."""
    table = (plan.get("analysis") or {}).get("covariates")
    if not isinstance(table, dict):
        return []
    return [*table.get("perturbable", []), *table.get("indicators", [])]


def item_labels(
    study: Study, log: Ledger, step: str, names: list[str]
) -> dict[str, dict[str, Any]]:
    """Each item's labels: ``{item: {name: True | False | None}}`` from the step's decisions."""
    work = StepWork(study, Renderer(study))
    work.load(log)
    out: dict[str, dict[str, Any]] = {}
    for item in work.items:
        decision = work.decision(step, item)
        row = decision if isinstance(decision, dict) else {}
        out[item] = {n: row[n] if isinstance(row.get(n), bool) else None for n in names}
    return out


def covariate_columns(
    trials: pd.DataFrame, plan: Mapping[str, Any], study: Study, log: Ledger
) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """The trial table with a ``covariate.NAME`` column per declared label, and the labels.

    ``trials`` itself (and no labels) when the study declares none. The caller
    (:func:`analysis._analyze.analyze_study`) keeps both on its dataset; this module does not
    import it, so the two stay free of an import cycle.
    """
    names = covariate_names(plan)
    if not names:
        return trials, ()
    step = plan["analysis"]["covariates"]["step"]
    labels = item_labels(study, log, step, names)
    out = trials.copy()
    for name in names:
        out[f"covariate.{name}"] = pd.Series(
            [labels.get(str(s), {}).get(name) for s in out["stimulus"]],
            index=out.index,
            dtype=object,
        )
    return out, tuple(names)


def _label(value: Any) -> bool | None:
    """A ``covariate.NAME`` cell as a label: True, False or None (no value)."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    return None


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def covariates_title(plan: Mapping[str, Any]) -> str:
    """The title of ``descriptive.covariates``."""
    step = plan["analysis"]["covariates"]["step"]
    return f"Outcomes by the factor labels of step {step!r} (strata; indicators apart)"


def covariates_values(trials: pd.DataFrame, ddx: bool, plan: Mapping[str, Any]) -> dict[str, Any]:
    """``descriptive.covariates``' values: per label, value and arm, trials and outcome means.

    Over the analysable trials (not control, not excluded); an outcome's mean is over the
    trials where it is defined (``docs/analysis.md`` §11). ``ddx``: the outcomes are the
    differential-diagnosis metrics, else trial accuracy.
    """
    table = plan["analysis"]["covariates"]
    outcomes = list(DDX_METRICS) if ddx else ["accuracy"]
    values: dict[str, Any] = {}

    def compute() -> None:
        t = trials
        rows = t[(~t["control"].astype(bool)) & (~t["excluded"].astype(bool))]
        arms = sorted({str(a) for a in rows["arm"]})

        def cell(part: pd.DataFrame) -> dict[str, Any]:
            out: dict[str, Any] = {"trials": len(part)}
            for name in outcomes:
                got = [float(v) for v in part[name] if v is not None and not math.isnan(float(v))]
                out[name] = {"mean": _mean(got), "n": len(got)}
            return out

        strata: dict[str, Any] = {}
        for group, key in (("perturbable", "perturbable"), ("indicator", "indicators")):
            for name in table[key]:
                column = [_label(v) for v in rows[f"covariate.{name}"]]
                levels = {}
                for level, value in (("true", True), ("false", False)):
                    part = rows[[v is value for v in column]]
                    levels[level] = {a: cell(part[part["arm"] == a]) for a in arms}
                undecided = sum(v is None for v in column)
                strata[name] = {"group": group, "levels": levels, "undecided": undecided}
        values.update(
            {
                "step": table["step"],
                "perturbable": list(table["perturbable"]),
                "indicators": list(table["indicators"]),
                "outcomes": outcomes,
                "strata": strata,
            }
        )

    compute()
    return values
