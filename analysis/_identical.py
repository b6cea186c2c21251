"""Byte-identical responses: replicates or models that gave copies (``docs/analysis.md`` §3).

A deterministic model (temperature 0) answers every replicate of a prompt alike, and a server
that answers any model name with the one model it loaded gives two "models" the same answers.
The tests whose unit is the trial then count copies as independent observations. This module
finds both from the recorded responses and records ``descriptive.identical_responses`` with a
note saying how the registered tests treat the copies; the report, the viewer and the verifier
(a WARN) show it. Nothing here changes a verdict.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from analysis._parse import ParseError, response_text
from analysis._scoring import unwrap_batch

if TYPE_CHECKING:  # the viewer imports this module for the banner: pandas only for a type
    import pandas as pd

__all__ = [
    "IDENTICAL_ID",
    "IDENTICAL_NOTE",
    "identical_banner",
    "identical_values",
    "response_digests",
]

IDENTICAL_ID = "descriptive.identical_responses"
"""The result id (recorded only when some copies are found)."""
IDENTICAL_NOTE = {
    "replicates": (
        "every replicate of each stimulus gave the same response text: the replicates are "
        "copies, not independent observations. Tests whose unit is the trial (paired-t by "
        "(stimulus, rep), independent-t, bootstrap, McNemar and GEE over replicates, the "
        "(question, run) bootstrap) count each copy as new evidence, so their intervals are too "
        "narrow and their p-values too small; per-stimulus means (paired-t by stimulus, "
        "equivalence) and the mixed model's random intercept per stimulus treat them as one."
    ),
    "models": (
        "two models gave the same response text to every request they share: they are one "
        "model's answers twice (e.g. a server that answers any model name with the model it "
        "loaded). The pooled results over models (hypothesis.<id> without @) count each answer "
        "twice; read each model's own result (hypothesis.<id>@<model>)."
    ),
}
"""The sentence recorded for each kind of copy (``values.note``)."""


def response_digests(
    log: Any, response_seqs: list[int], stop: Callable[[int, str | None], bool] | None = None
) -> dict[int, str | None]:
    """SHA-256 (hex) of the UTF-8 response text of each ``trial.responded`` seq.

    The text is the one the scorer reads (:func:`analysis._parse.response_text`, a batch line
    unwrapped first); ``None`` when the body has no readable text. ``stop`` is called with each
    seq and digest, in seq order; when it answers True no more responses are read (the dict
    then holds those read so far: :class:`CopyWatch`).
    """
    wanted = set(response_seqs)
    out: dict[int, str | None] = {}
    for event in log.events("trial.responded"):
        if event.seq not in wanted:
            continue
        raw = log.blob(event.blobs["response"])
        try:
            text = response_text(*unwrap_batch(raw, str(event.body.get("format", ""))))
        except ParseError:
            out[event.seq] = None
        else:
            out[event.seq] = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if stop is not None and stop(event.seq, out[event.seq]):
            break
    return out


class CopyWatch:
    """Tells, digest by digest, when :func:`identical_values` can only give None (issue 41).

    Without model pairs (a study of at most one model), copies are found only where every
    replicate of an (arm, model) is alike; one (stimulus, variant) cell of it with two
    different texts rules that (arm, model) out for good. Once every (arm, model) of the trial
    table is ruled out, no response read later can change the answer: ``ledger analyze`` then
    stops reading responses (a model whose replicates vary is ruled out within a few of its
    trials; a deterministic one is read to the end, as before). ``active`` is False, and
    :meth:`add` never answers True, with two or more models, an empty table, or a key or
    response seq that occurs twice (the rule's dict would then keep the last).
    """

    def __init__(self, trials: pd.DataFrame, models: tuple[str, ...]) -> None:
        import numpy as np

        keys = ["arm", "model", "stimulus", "variant", "rep"]
        seqs = trials["response_seq"].to_numpy(dtype=np.int64)
        texts = trials.loc[:, keys].astype(str)  # the rule's keys are the str of each column
        self.active = (
            len(models) < 2
            and len(trials) > 0
            and not bool(texts.duplicated().any())
            and len(np.unique(seqs)) == len(seqs)
        )
        self.ruled_out = False
        """True once every (arm, model) has a cell of two texts: the rule gives None."""
        order = np.argsort(seqs, kind="stable")
        self._seqs, self._rows = seqs[order], order
        group = texts.groupby(["arm", "model"], sort=False).ngroup().to_numpy()
        self._group = group
        self._cell = texts.groupby(keys[:4], sort=False).ngroup().to_numpy()
        self._open = np.ones(int(group.max()) + 1 if len(group) else 0, dtype=bool)
        self._left = len(self._open)
        self._first: dict[int, str] = {}

    def add(self, seq: int, digest: str | None) -> bool:
        """Note one response's digest; True when every (arm, model) is ruled out."""
        if not self.active or digest is None:
            return False
        at = int(self._seqs.searchsorted(seq))
        if at >= len(self._seqs) or int(self._seqs[at]) != seq:
            return False  # not a scored trial's response: the rule never reads it
        row = int(self._rows[at])
        group, cell = int(self._group[row]), int(self._cell[row])
        if self._open[group] and self._first.setdefault(cell, digest) != digest:
            self._open[group] = False
            self._left -= 1
            self.ruled_out = self._left == 0
        return self.ruled_out


def identical_values(
    trials: pd.DataFrame, digests: Mapping[int, str | None], models: tuple[str, ...]
) -> dict[str, Any] | None:
    """The values of ``descriptive.identical_responses``, or None when there is no copy.

    ``replicates``: each (arm, model) where every (stimulus, variant) cell with two or more
    readable replicates has one response text, and there is at least one such cell: ``{arm,
    model, cells}``. ``models``: each pair of models (model order) whose texts agree on every
    (arm, stimulus, variant, rep) both have a readable response for, with at least one:
    ``{a, b, trials}``. ``note``: the sentences of :data:`IDENTICAL_NOTE` for the kinds found.
    """
    text: dict[tuple[str, str, str, str, int], str] = {}
    for row in trials.itertuples(index=False):
        digest = digests.get(int(row.response_seq))
        if digest is not None:
            key = (str(row.arm), str(row.model), str(row.stimulus), str(row.variant), int(row.rep))
            text[key] = digest
    cells: dict[tuple[str, str], dict[tuple[str, str], set[str]]] = {}
    counts: dict[tuple[str, str, str, str], int] = {}
    for (arm, model, stimulus, variant, _rep), digest in text.items():
        cells.setdefault((arm, model), {}).setdefault((stimulus, variant), set()).add(digest)
        counts[(arm, model, stimulus, variant)] = counts.get((arm, model, stimulus, variant), 0) + 1
    replicates = []
    for (arm, model), by_cell in sorted(cells.items()):
        multi = [c for c in by_cell if counts[(arm, model, *c)] >= 2]
        if multi and all(len(by_cell[c]) == 1 for c in multi):
            replicates.append({"arm": arm, "model": model, "cells": len(multi)})
    pairs = []
    for i, a in enumerate(models):
        for b in models[i + 1 :]:
            shared = [(k, text[k]) for k in text if k[1] == a and (k[0], b, *k[2:]) in text]
            if shared and all(d == text[(k[0], b, *k[2:])] for k, d in shared):
                pairs.append({"a": a, "b": b, "trials": len(shared)})
    if not replicates and not pairs:
        return None
    note = " ".join(
        IDENTICAL_NOTE[kind]
        for kind, found in (("replicates", replicates), ("models", pairs))
        if found
    )
    return {"replicates": replicates, "models": pairs, "note": note}


def identical_banner(result: dict[str, Any] | None) -> str | None:
    """The sentence the report and the viewer show for the recorded result, or None.

    ``docs/analysis.md`` §3: ``Byte-identical responses (descriptive.identical_responses):``
    then the copies found (``arm A, model m: every replicate alike in N stimulus cell(s)``;
    ``models a and b: alike on all N shared trial(s)``, joined by ``; ``), a full stop and the
    recorded note.
    """
    if result is None or result.get("status") != "ok":
        return None
    v = result.get("values") or {}
    parts = [
        f"arm {r.get('arm')}{', model ' + str(r['model']) if r.get('model') else ''}: "
        f"every replicate alike in {r.get('cells')} stimulus cell(s)"
        for r in v.get("replicates") or []
    ]
    parts += [
        f"models {p.get('a')} and {p.get('b')}: alike on all {p.get('trials')} shared trial(s)"
        for p in v.get("models") or []
    ]
    return (
        f"Byte-identical responses ({IDENTICAL_ID}): {'; '.join(parts)}. {v.get('note') or ''}"
    ).rstrip()
