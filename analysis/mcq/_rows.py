"""The long-format trials table of seed 002's multiple-choice statistics, from a study's dataset.

:func:`mcq_trials` turns the unblinded :class:`analysis._analyze.Dataset` of a single-answer item
study (``docs/analysis.md`` §2: the trial and item tables, with variants and cloze columns) into
one row per scored trial with the columns ``docs/mcq-statistics.md`` names: ``trial``, ``item``,
``arm``, ``model``, ``variant``, ``rep``, ``key`` (the key as presented), ``key_original``,
``letter`` (the predicted letter as presented), ``answer`` (mapped back to the original order,
``docs/variants.md`` §2), ``correct``, ``parse`` and, for the ``cloze`` parser,
``logprob_<L>`` for each letter. A study without variants gets ``variant = "original"``. No I/O.
"""

from __future__ import annotations

import json
from typing import Protocol

import pandas as pd


class Dataset(Protocol):
    """What :func:`mcq_trials` reads of an :class:`analysis._analyze.Dataset`.

    Not imported: ``analysis._analyze`` computes the seed-002 tests through this module.
    """

    @property
    def trials(self) -> pd.DataFrame:
        """One row per scored trial."""

    @property
    def items(self) -> pd.DataFrame:
        """One row per scored item."""

    @property
    def cloze(self) -> bool:
        """Whether the parser is ``cloze``."""


__all__ = ["MCQ_COLUMNS", "ORIGINAL", "mcq_trials"]

ORIGINAL = "original"
"""The variant name of an item as written (``docs/mcq-statistics.md``)."""
MCQ_COLUMNS = (
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
"""The required columns, in order (``logprob_<L>`` columns follow for cloze)."""


def _merged(ds: Dataset) -> pd.DataFrame:
    """Each trial's row joined to its one scored item; a trial with several or none is refused."""
    items = ds.items
    counts = items.groupby("trial", sort=False).size()
    several = counts[counts != 1]
    if len(several):
        raise ValueError(
            f"trial {several.index[0]!r} has {int(several.iloc[0])} scored items; the MCQ table "
            "takes single-answer trials"
        )
    wanted = ["trial", "truth", "answer", "correct", "truth_original", "answer_original"]
    if ds.cloze:
        wanted.append("logprobs")
    part = items.loc[:, [c for c in wanted if c in items.columns]]
    part = part.assign(  # coded label columns (category) back to str: compared with each other
        **{
            str(c): part[c].astype(part[c].cat.categories.dtype)
            for c in part.columns
            if isinstance(part[c].dtype, pd.CategoricalDtype)
        }
    )
    columns = ["trial", "stimulus", "arm", "model", "variant", "rep", "status"]
    merged = ds.trials.loc[:, columns].merge(
        part, on="trial", how="left", validate="one_to_one", sort=False
    )
    if merged["truth"].isna().any():
        bad = merged.loc[merged["truth"].isna(), "trial"].iloc[0]
        raise ValueError(f"trial {bad!r} has no scored item")
    return merged


def _add_logprobs(out: pd.DataFrame, merged: pd.DataFrame, letters: tuple[str, ...]) -> None:
    """A cloze trial's ``logprob_<letter>`` columns (NaN where the response gave none)."""
    raw = merged["logprobs"] if "logprobs" in merged else pd.Series([None] * len(merged))
    found = [json.loads(v) if isinstance(v, str) else {} for v in raw.tolist()]
    for label in letters:
        out[f"logprob_{label}"] = [
            float(f[label]) if f.get(label) is not None else float("nan") for f in found
        ]


def mcq_trials(ds: Dataset, letters: tuple[str, ...] = ("A", "B", "C", "D")) -> pd.DataFrame:
    """One row per scored single-answer trial, in ``response_seq`` order (module docstring).

    Raises :class:`ValueError` when a trial has other than one scored item (a tumbling-E
    chart is not a multiple-choice trial). Column-wise (no per-row Python): a study of
    100,000 trials is one merge.
    """
    merged = _merged(ds)
    ok = (merged["status"] == "ok").to_numpy() & merged["answer"].notna().to_numpy()
    answer_col = "answer_original" if "answer_original" in merged else "answer"
    letter = merged["answer"].where(ok, None).astype(object)
    answer = merged[answer_col].where(ok & merged[answer_col].notna().to_numpy(), None)
    key_original = merged["truth"]
    if "truth_original" in merged:
        key_original = merged["truth_original"].where(
            merged["truth_original"].notna(), merged["truth"]
        )
    variant = merged["variant"].fillna("").astype(str)
    model = merged["model"].fillna("").astype(str)
    out = pd.DataFrame(
        {
            "trial": merged["trial"].to_numpy(),
            "item": merged["stimulus"].to_numpy(),
            "arm": merged["arm"].to_numpy(),
            "model": model.to_numpy(),
            "variant": variant.where(variant != "", ORIGINAL).to_numpy(),
            "rep": merged["rep"].astype(int).to_numpy(),
            "key": merged["truth"].to_numpy(),
            "key_original": key_original.to_numpy(),
            "letter": letter.to_numpy(dtype=object),
            "answer": answer.astype(object).to_numpy(dtype=object),
            "correct": merged["correct"].astype(bool).to_numpy(),
            "parse": merged["status"].to_numpy(),
        }
    )
    if ds.cloze:
        _add_logprobs(out, merged, letters)
    columns = list(MCQ_COLUMNS) + ([f"logprob_{label}" for label in letters] if ds.cloze else [])
    return out.loc[:, columns]
