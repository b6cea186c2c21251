"""The long-format trials table of seed 002's multiple-choice statistics, from a study's dataset.

:func:`mcq_trials` turns the unblinded :class:`analysis.analyze.Dataset` of a single-answer item
study (``docs/analysis.md`` §2: the trial and item tables, with variants and cloze columns) into
one row per scored trial with the columns ``docs/mcq-statistics.md`` names: ``trial``, ``item``,
``arm``, ``model``, ``variant``, ``rep``, ``key`` (the key as presented), ``key_original``,
``letter`` (the predicted letter as presented), ``answer`` (mapped back to the original order,
``docs/variants.md`` §2), ``correct``, ``parse`` and, for the ``cloze`` parser,
``logprob_<L>`` for each letter. A study without variants gets ``variant = "original"``. No I/O.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from analysis.analyze import Dataset

__all__ = ["MCQ_COLUMNS", "ORIGINAL", "mcq_trials"]

ORIGINAL = "original"
"""The variant name of an item as written (``docs/mcq-statistics.md``)."""
MCQ_COLUMNS = (
    "trial", "item", "arm", "model", "variant", "rep", "key", "key_original", "letter",
    "answer", "correct", "parse",
)  # fmt: skip
"""The required columns, in order (``logprob_<L>`` columns follow for cloze)."""


def _null(value: Any) -> Any:
    return None if value is None or (isinstance(value, float) and value != value) else value


def mcq_trials(ds: Dataset, letters: tuple[str, ...] = ("A", "B", "C", "D")) -> pd.DataFrame:
    """One row per scored single-answer trial, in ``response_seq`` order (module docstring).

    Raises :class:`ValueError` when a trial has other than one scored item (a tumbling-E
    chart is not a multiple-choice trial).
    """
    items = ds.items
    counts = items.groupby("trial", sort=False).size()
    several = counts[counts != 1]
    if len(several):
        raise ValueError(
            f"trial {several.index[0]!r} has {int(several.iloc[0])} scored items; the MCQ table "
            "takes single-answer trials"
        )
    by_trial = {row["trial"]: row for row in items.to_dict("records")}
    rows: list[dict[str, Any]] = []
    for trial in ds.trials.to_dict("records"):
        item = by_trial[trial["trial"]]
        letter = _null(item["answer"]) if trial["status"] == "ok" else None
        answer = _null(item.get("answer_original", item["answer"])) if letter is not None else None
        row: dict[str, Any] = {
            "trial": trial["trial"],
            "item": trial["stimulus"],
            "arm": trial["arm"],
            "model": trial["model"] or "",
            "variant": trial.get("variant") or ORIGINAL,
            "rep": int(trial["rep"]),
            "key": item["truth"],
            "key_original": _null(item.get("truth_original")) or item["truth"],
            "letter": letter,
            "answer": answer,
            "correct": bool(item["correct"]),
            "parse": trial["status"],
        }
        logprobs = _null(item.get("logprobs"))
        if ds.cloze:
            found = json.loads(logprobs) if isinstance(logprobs, str) else {}
            for label in letters:
                value = found.get(label)
                row[f"logprob_{label}"] = float(value) if value is not None else float("nan")
        rows.append(row)
    columns = list(MCQ_COLUMNS) + ([f"logprob_{label}" for label in letters] if ds.cloze else [])
    return pd.DataFrame(rows, columns=columns)
