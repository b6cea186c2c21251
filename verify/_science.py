"""Science checks of an exported archive: re-scoring every response and re-running the analysis.

Written from ``docs/scoring.md``, ``docs/statistics.md``, ``docs/analysis.md``, ``docs/trials.md``
and ``docs/archive-format.md``; it imports nothing from ``ledger``, ``runner`` or ``analysis``.

* ``rescore``: every response is re-extracted, re-parsed with the locked parser and re-scored
  against the archived truth table; each ``trial.scored`` must match (status, counts, item hash,
  item blob), every ``trial.responded`` must have exactly one ``trial.scored``, and the seal's
  digest must be the digest over all scores.
* ``reanalysis``: the dataset is rebuilt (``trials.csv`` / ``items.csv`` bytes and ``inputs``),
  every result of ``docs/analysis.md`` §3 is recomputed with :mod:`verify._restats` and compared
  number by number (relative tolerance :data:`REL_TOL`, absolute :data:`ABS_TOL`, p-values
  relative only; mixed models are evaluated at the recorded variance components once
  :mod:`verify._reml` has shown them to be a REML maximum), with every status, verdict and
  ``decided_by``; and
  ``analysis/results.json`` must equal the events' bodies plus their seq.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import rfc8785
from scipy import stats as sps

from verify import _copies, _ddx, _factorial, _human, _mcqhyp, _qrboot, _review, _sealed
from verify import _restats as st
from verify._envelope import is_hex64
from verify._items import ItemError, ItemFile, read_items
from verify._ledgerfile import MAX_FAULTY_KEPT
from verify._privacy import Withheld
from verify._prompts import PromptError
from verify._reader.events import EventReader
from verify._reader.files import MAX_PARSED_BYTES, ArchiveFileError, ArchiveFiles
from verify._reader.names import EVENTS, line_where
from verify._reml import RemlModel, check_point
from verify._report import Check, Status
from verify._rescore import (
    CONTROL_TRUTH,
    Scored,
    Truth,
    TruthError,
    item_bytes,
    read_sources,
    read_truth,
    score_body,
)
from verify._steps import review_sample
from verify._variants import VariantError, Variants, back_to_original

__all__ = [
    "ABS_TOL",
    "LMM_REL_TOL",
    "MAX_BOOTSTRAP_ITERATIONS",
    "MAX_BOOTSTRAP_WORK",
    "REL_TOL",
    "science_checks",
]

REL_TOL = 1e-6
"""Relative tolerance for recomputed numbers (``docs/analysis.md``)."""
ABS_TOL = 1e-9
"""Absolute tolerance near zero."""
LMM_REL_TOL = 1e-4
"""Mixed-model outputs are compared at :data:`REL_TOL` (own REML check), except the profile
likelihood bounds of variance components (``*_ci_lower``/``*_ci_upper``), iterative roots on
both sides, compared at this tolerance."""
GEE_REL_TOL = 1e-4
"""A ``gee`` hypothesis's numbers (statsmodels's iterative fit and the verifier's own solver,
each stopping at its own tolerance) are compared at this relative tolerance."""
MAX_BOOTSTRAP_ITERATIONS = 1_000_000
"""The most bootstrap iterations a plan may ask the verifier to recompute (time bound)."""
MAX_BOOTSTRAP_WORK = 20_000_000_000
"""The most bootstrap iterations x scored trials the verifier recomputes (time bound)."""

ORIENTATIONS = ("UP", "RIGHT", "DOWN", "LEFT")
TUMBLING_E = "tumbling-e-json"
TRIAL_COLUMNS = (
    "trial",
    "arm",
    "stimulus",
    "rep",
    "response_seq",
    "status",
    "n_items",
    "n_answered",
    "n_correct",
    "accuracy",
    "control",
    "excluded",
)
ITEM_COLUMNS = ("trial", "arm", "stimulus", "rep", "row", "position", "truth", "answer", "correct")
MODEL_TRIAL_COLUMNS = (*TRIAL_COLUMNS[:2], "model", *TRIAL_COLUMNS[2:])
"""``trials.csv`` of a study with ``[models]``: the model after the arm (analysis.md §2)."""
MODEL_ITEM_COLUMNS = (*ITEM_COLUMNS[:2], "model", *ITEM_COLUMNS[2:])
VARIANT_TRIAL_COLUMNS = (*MODEL_TRIAL_COLUMNS[:4], "variant", *MODEL_TRIAL_COLUMNS[4:])
"""``trials.csv`` of a study with variants: the variant after the stimulus (variants.md §5)."""
VARIANT_ITEM_COLUMNS = (
    *MODEL_ITEM_COLUMNS[:4],
    "variant",
    "order",
    *MODEL_ITEM_COLUMNS[4:],
    "truth_original",
    "answer_original",
)


class _Problem(Exception):
    """A check cannot proceed: ``(reason, seq, where)``."""

    def __init__(self, reason: str, seq: int | None = None, where: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.seq = seq
        self.where = where


# ------------------------------------------------------------------------------ archive


@dataclass
class _Event:
    seq: int
    kind: str
    body: dict[str, Any]
    blobs: dict[str, str]
    actor: str = ""


@dataclass
class _Archive:
    files: ArchiveFiles
    events: list[_Event]
    by_seq: dict[int, _Event] = field(default_factory=dict)
    current: _Event | None = None  # the event being read (named if a check stops on it)

    def of(self, kind: str) -> list[_Event]:
        return [e for e in self.events if e.kind == kind]

    def first(self, kind: str) -> _Event | None:
        return next((e for e in self.events if e.kind == kind), None)

    def at(self, event: _Event) -> _Event:
        """Note ``event`` as the one being read; return it."""
        self.current = event
        return event

    def blob(self, digest: str, seq: int | None = None, limit: int = MAX_PARSED_BYTES) -> bytes:
        """The bytes of ``blobs/<digest>`` (64 lowercase hex only), read by the archive reader."""
        if not is_hex64(digest):
            raise _Problem(
                f"seq {seq}: blob address {digest[:80]!r} is not 64 lowercase hex",
                seq,
                line_where(seq) if seq is not None else None,
            )
        return _sealed.content_of(self.stored(digest, seq, limit))

    def stored(self, digest: str, seq: int | None = None, limit: int = MAX_PARSED_BYTES) -> bytes:
        """The stored bytes of ``blobs/<digest>`` (a sealed blob whole, salt included)."""
        rel = f"blobs/{digest}"
        try:
            return self.files.read(rel, limit)
        except ArchiveFileError as exc:
            raise _Problem(
                f"seq {seq}: blob {exc}" if seq is not None else str(exc), seq, rel
            ) from None

    def event_blob(self, event: _Event, name: str, limit: int = MAX_PARSED_BYTES) -> bytes:
        digest = event.blobs.get(name)
        if not isinstance(digest, str):
            raise _Problem(f"seq {event.seq} ({event.kind}) has no {name} blob", event.seq)
        return self.blob(digest, event.seq, limit)

    def file(self, rel: str) -> bytes:
        try:
            return self.files.read(rel)
        except ArchiveFileError as exc:
            raise _Problem(str(exc), None, rel) from None


def _events(envelopes: Sequence[dict[str, Any] | None], unkept: int | None = None) -> list[_Event]:
    """The events of the shared strict parse; the first line it refused stops both checks.

    ``unkept`` is the first line the ledger checks found faulty beyond the ones whose
    envelopes are kept (``verify._ledgerfile.MAX_FAULTY_KEPT``); it stops them too.
    """
    events: list[_Event] = []
    for index, env in enumerate(envelopes):
        if env is None:
            where = line_where(index)
            if index == unkept:
                raise _Problem(
                    f"{where} is one of more than {MAX_FAULTY_KEPT:,} lines that are not the "
                    "next event of the log (the envelopes, sequence, chain and signatures "
                    "checks name the first): nothing is re-scored or re-analysed",
                    index,
                    where,
                )
            raise _Problem(
                f"{where} is not a valid event envelope (the envelopes check says why): "
                "nothing is re-scored or re-analysed",
                index,
                where,
            )
        events.append(
            _Event(
                int(env["seq"]),
                str(env["kind"]),
                env["body"],
                env["blobs"],
                str(env.get("actor", "")),
            )
        )
    return events


def _load(
    root: Path,
    envelopes: Sequence[dict[str, Any] | None] | None = None,
    files: ArchiveFiles | None = None,
    unkept: int | None = None,
) -> _Archive:
    if files is None:
        files = ArchiveFiles(root)
        files.walk()
    if envelopes is None:
        if files.problems and not files.complete:
            raise _Problem(files.problems[0][1], where=files.problems[0][0])
        try:
            envelopes = [line.shared for line in EventReader(files)]
        except ArchiveFileError as exc:
            raise _Problem(f"{exc}: nothing is re-scored or re-analysed", where=EVENTS) from None
    archive = _Archive(files, _events(envelopes, unkept))
    archive.by_seq = {e.seq: e for e in archive.events}
    return archive


def _protocol(archive: _Archive) -> _Event | None:
    """The ``protocol.locked`` in force: the last one.

    A study locked in phases has several, each holding the whole plan (``docs/study-spec.md``,
    "Phases").
    """
    locked = archive.of("protocol.locked")
    return locked[-1] if locked else None


def _plan(archive: _Archive) -> dict[str, Any]:
    event = _protocol(archive)
    if event is None:
        raise _Problem("the ledger has no protocol.locked event")
    return event.body


def _files_in_force(archive: _Archive) -> dict[str, tuple[str, str | None, _Event]]:
    """Locked path -> (blob address, role, event) of each locked file in force.

    The last ``artifact.locked`` of each path (a later phase re-locks a grown file), or the
    last ``protocol.amended`` change after it.
    """
    out: dict[str, tuple[str, str | None, _Event]] = {}
    for event in archive.events:
        if event.kind == "artifact.locked":
            path, role = event.body.get("path"), event.body.get("role")
            if isinstance(path, str):
                out[path] = (
                    str(event.blobs.get("content")),
                    role if isinstance(role, str) else None,
                    event,
                )
        elif event.kind == "protocol.amended":
            changes = event.body.get("changes")
            for change in changes if isinstance(changes, list) else []:
                path = change.get("path") if isinstance(change, dict) else None
                if path in out and isinstance(change.get("blob"), str):
                    out[path] = (str(event.blobs.get(change["blob"])), out[path][1], event)
    return out


def _truth_tables(archive: _Archive) -> list[tuple[str, bytes, int]]:
    """The truth tables in force: (path, bytes, seq) from the signed ``artifact.locked`` events.

    Each is read from its blob (its address from the signed event, as locked or as last
    amended by ``protocol.amended``), never from a path written in an unsigned file.
    """
    digests = {
        path: (digest, event)
        for path, (digest, role, event) in _files_in_force(archive).items()
        if role == "truth"
    }
    if not digests:
        raise _Problem("no artifact.locked event locks a truth table (role truth)")
    tables = []
    for path, (digest, event) in sorted(digests.items()):
        archive.at(event)
        tables.append((f"{path} (blob {digest})", archive.blob(digest, event.seq), event.seq))
    return tables


def _item_file(archive: _Archive) -> ItemFile:
    """The locked item file in force (``docs/prompts.md`` §1), read from its signed blob.

    Its path is ``protocol.locked`` ``items.path``; its bytes are the blob of the
    last ``artifact.locked`` event of that path, or of the last ``protocol.amended`` change to it.
    """
    record = _plan(archive).get("items")
    path = record.get("path") if isinstance(record, dict) else None
    if not isinstance(path, str):
        raise _Problem("protocol.locked response.truth is 'items' but items has no path")
    entry = _files_in_force(archive).get(path)
    found = (entry[0], entry[2]) if entry is not None else None
    if found is None:
        raise _Problem(f"no artifact.locked event locks the item file {path}")
    digest, event = found
    archive.at(event)
    try:
        return read_items(archive.blob(digest, event.seq), path).ranged(record)
    except ItemError as exc:
        raise _Problem(f"item file {path} (blob {digest}): {exc}", event.seq) from None


def _locked_bytes(archive: _Archive, path: str) -> bytes | None:
    """The locked bytes of a study-relative path in force (as locked, or as last amended)."""
    found: tuple[str, _Event] | None = None
    for event in archive.of("artifact.locked"):
        if event.body.get("path") == path and found is None:
            found = (str(event.blobs.get("content")), event)
    for event in archive.of("protocol.amended"):
        changes = event.body.get("changes")
        for change in changes if isinstance(changes, list) else []:
            if isinstance(change, dict) and change.get("path") == path and found is not None:
                found = (str(event.blobs.get(str(change.get("blob")))), event)
    if found is None:
        return None
    digest, event = found
    archive.at(event)
    return archive.blob(digest, event.seq)


def _variant_truth(archive: _Archive) -> Callable[[str, str], tuple[str, str | None]]:
    """``(item, variant) -> (answer, order)`` re-derived by ``docs/variants.md`` (§2, §5)."""
    plan = _plan(archive)
    items = {item.id: item.data for item in _item_file(archive).items}
    counts = [len(data.get("options") or []) for data in items.values()]
    try:
        variants = Variants(plan, lambda path: _locked_bytes(archive, path), counts)
    except VariantError as exc:
        raise _Problem(str(exc)) from None
    cache: dict[tuple[str, str], tuple[str, str | None]] = {}

    def truth(item: str, variant: str) -> tuple[str, str | None]:
        if (item, variant) not in cache:
            if item not in items:
                raise VariantError(f"item {item!r} is not in the locked item file")
            varied = variants.apply(variant, items[item])
            cache[(item, variant)] = (
                str(varied["answer"]),
                variants.order_for(variant, items[item]),
            )
        return cache[(item, variant)]

    return truth


def _truth(archive: _Archive, response: dict[str, Any]) -> dict[str, Truth]:
    """The truth of every stimulus, read as the locked parser scores it (scoring.md §8).

    With ``response.truth = "items"`` (``docs/prompts.md`` §1): each item's answer as written.
    """
    if response.get("truth") == "items":
        return {item.id: item.answer for item in _item_file(archive).items}
    parser = str(response.get("parser", TUMBLING_E))
    column = response.get("answer_column")
    truth: dict[str, Truth] = {}
    for name, data, seq in _truth_tables(archive):
        try:
            truth.update(read_truth(data, parser, column))
        except TruthError as exc:
            raise _Problem(f"truth table {name}: {exc}", seq) from None
    return truth


def _sources(archive: _Archive) -> dict[str, str]:
    """Each stimulus's source image, from the truth table's ``source`` column.

    For an item file, each item's string ``metadata.source``.
    """
    if (_plan(archive).get("response") or {}).get("truth") == "items":
        return {
            item.id: str(item.metadata["source"])
            for item in _item_file(archive).items
            if isinstance(item.metadata.get("source"), str)
        }
    sources: dict[str, str] = {}
    for name, data, seq in _truth_tables(archive):
        try:
            sources.update(read_sources(data))
        except TruthError as exc:
            raise _Problem(f"truth table {name}: {exc}", seq) from None
    return sources


# ------------------------------------------------------------------------------ rescore


def _scores_digest(pairs: list[tuple[int, str]]) -> str:
    return hashlib.sha256(rfc8785.dumps([[s, h] for s, h in sorted(pairs)])).hexdigest()


def _judged(
    archive: _Archive, plan: dict[str, Any], parser: str
) -> dict[str, dict[str, Any] | None] | None:
    """Each trial's re-derived judge record for a ``judge:<step>`` parser, else None."""
    if not parser.startswith("judge:"):
        return None
    from verify._steps import judge_records

    kinds = ("trial.requested", "step.requested", "step.responded", "step.failed")
    events = [
        (
            e.seq,
            e.kind,
            e.body,
            (lambda name, e=e: archive.event_blob(e, name) if name in e.blobs else None),
        )
        for e in archive.events
        if e.kind in kinds
    ]
    return judge_records(plan, parser.split(":", 1)[1], events)


def _ddx_scored(archive: _Archive, plan: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    """scoring.md §12: each trial's re-derived ddx score, from the step responses alone."""
    kinds = ("trial.requested", "step.requested", "step.responded", "step.failed")
    events = [
        (
            e.seq,
            e.kind,
            e.body,
            (lambda name, e=e: archive.event_blob(e, name) if name in e.blobs else None),
        )
        for e in archive.events
        if e.kind in kinds
    ]
    metadata = {item.id: dict(item.metadata) for item in _item_file(archive).items}
    try:
        return _ddx.ddx_records(plan, events, lambda p: _locked_bytes(archive, p), metadata)
    except PromptError as exc:
        raise _Problem(f"the ddx scores cannot be re-derived: {exc}") from None


def _judged_score(decision: Any, truth: str) -> Scored:
    """scoring.md §10: one item, the decision as its answer, correct when it is "correct"."""
    item = {
        "answer": decision,
        "answered": decision is not None,
        "correct": decision == "correct",
        "position": None,
        "row": None,
        "truth": truth,
    }
    data = item_bytes([item])
    return Scored(
        "ok" if decision is not None else "unparseable",
        1,
        int(decision is not None),
        int(decision == "correct"),
        data,
        hashlib.sha256(data).hexdigest(),
    )


def _rescore(archive: _Archive) -> Check:
    plan = _plan(archive)
    locked = plan.get("response") or {}
    parser = str(locked.get("parser", TUMBLING_E))
    letters = str(locked.get("letters") or "ABCD")
    mode = str(locked.get("mode") or "exactly-one")
    truth = _truth(archive, locked)
    varied = _variant_truth(archive) if plan.get("variants") is not None else None
    responded = {e.seq: e for e in archive.of("trial.responded")}
    scored = archive.of("trial.scored")
    count: dict[int, int] = {}
    mismatches: list[tuple[int, str]] = []
    judged = _judged(archive, plan, parser)
    ddx = _ddx_scored(archive, plan) if parser == "ddx" else None
    for event in scored:
        b = archive.at(event).body
        rseq = b.get("response_seq")
        if not isinstance(rseq, int) or rseq not in responded:
            mismatches.append((event.seq, f"response_seq {rseq!r} is not a trial.responded"))
            continue
        count[rseq] = count.get(rseq, 0) + 1
        response = responded[rseq]
        request = archive.by_seq.get(response.body.get("request_seq", -1))
        stimulus = request.body.get("stimulus") if request is not None else None
        if b.get("stimulus") != stimulus:
            mismatches.append((event.seq, f"stimulus {b.get('stimulus')!r}, request {stimulus!r}"))
            continue
        if b.get("parser") != parser:
            mismatches.append((event.seq, f"parser {b.get('parser')!r}, locked {parser!r}"))
            continue
        if stimulus not in truth:
            mismatches.append((event.seq, f"stimulus {stimulus!r} is not in the truth table"))
            continue
        answer: Truth = truth[stimulus]
        variant = request.body.get("variant") if request is not None else None
        if b.get("variant") != variant:
            mismatches.append((event.seq, f"variant {b.get('variant')!r}, request {variant!r}"))
            continue
        if variant is not None:
            if varied is None:
                mismatches.append((event.seq, f"variant {variant!r}, but no variant is locked"))
                continue
            try:
                answer, order = varied(str(stimulus), str(variant))
            except VariantError as exc:
                mismatches.append((event.seq, f"its variant cannot be re-derived: {exc}"))
                continue
            if b.get("order") != order:
                mismatches.append((event.seq, f"order {b.get('order')!r}, re-derived {order!r}"))
                continue
        if ddx is not None:  # scoring.md §12: the recorded steps' decisions score the trial
            trial = request.body.get("trial") if request is not None else None
            want = ddx.get(str(trial))
            if want is None:
                mismatches.append(
                    (
                        event.seq,
                        f"the ddx step calls of trial {trial} are not all final, yet it was scored",
                    )
                )
                continue
            if b.get("ddx") != want["ddx"]:
                mismatches.append(
                    (event.seq, f"trial {trial}: " + _ddx.differing(b.get("ddx"), want["ddx"]))
                )
                continue
            s = Scored(want["status"], 0, 0, 0, want["blob"], want["scores_sha256"])
        elif judged is not None:  # scoring.md §10: the judges' votes score the trial
            trial = request.body.get("trial") if request is not None else None
            record = judged.get(str(trial))
            if record is None:
                mismatches.append(
                    (
                        event.seq,
                        f"the judge calls of trial {trial} are not all final, yet it was scored",
                    )
                )
                continue
            if b.get("judge") != record:
                mismatches.append(
                    (
                        event.seq,
                        f"the judge votes or decision differ from those "
                        f"re-derived from the judge responses: recorded "
                        f"{b.get('judge')!r}, re-derived {record!r}",
                    )
                )
                continue
            s = _judged_score(record["decision"], str(answer))
        else:
            raw = archive.event_blob(response, "response")
            try:
                s = score_body(raw, str(response.body.get("format")), parser, answer, letters, mode)
            except (KeyError, ValueError) as exc:
                mismatches.append((event.seq, f"cannot be re-scored: {exc}"))
                continue
        diffs = [
            f"{name}: recorded {b.get(name)!r}, recomputed {value!r}"
            for name, value in (
                ("status", s.status),
                ("n_items", s.n_items),
                ("n_answered", s.n_answered),
                ("n_correct", s.n_correct),
                ("scores_sha256", _address(archive, event, "scores", s.items, s.sha256)),
            )
            if b.get(name) != value or type(b.get(name)) is bool
        ]
        if not diffs and archive.event_blob(event, "scores") != s.items:
            diffs.append("the scores blob differs from the recomputed item bytes")
        if diffs:
            mismatches.append((event.seq, "; ".join(diffs)))
    if mismatches:
        seq, what = mismatches[0]
        more = f" ({len(mismatches) - 1} more trial.scored differ)" if len(mismatches) > 1 else ""
        return Check(
            "rescore", Status.FAIL, f"trial.scored seq {seq} does not re-score: {what}{more}.", seq
        )
    for rseq in responded:
        if count.get(rseq, 0) != 1:
            return Check(
                "rescore",
                Status.FAIL,
                f"trial.responded seq {rseq} has {count.get(rseq, 0)} trial.scored events, "
                "not exactly one.",
                rseq,
            )
    seal = archive.first("scoring.sealed")
    if seal is None:
        return Check("rescore", Status.FAIL, "the ledger has no scoring.sealed event.")
    digest = _scores_digest([(e.body["response_seq"], e.body["scores_sha256"]) for e in scored])
    if seal.body.get("scores_sha256") != digest:
        return Check(
            "rescore",
            Status.FAIL,
            f"scoring.sealed seq {seal.seq} scores_sha256 {seal.body.get('scores_sha256')} is "
            f"not the digest over every trial.scored ({digest}).",
            seal.seq,
        )
    if seal.body.get("scored") != len(scored) or seal.body.get("parser") != parser:
        return Check(
            "rescore",
            Status.FAIL,
            f"scoring.sealed seq {seal.seq} records scored={seal.body.get('scored')!r}, "
            f"parser={seal.body.get('parser')!r}; the ledger has {len(scored)} trial.scored "
            f"and the locked parser is {parser!r}.",
            seal.seq,
        )
    return Check(
        "rescore",
        Status.PASS,
        f"All {len(scored)} responses re-score to their trial.scored events and the seal.",
    )


# ------------------------------------------------------------------------------ dataset


@dataclass
class _Dataset:
    trials: list[dict[str, Any]]
    items: list[dict[str, Any]]
    arms: list[str]
    given_up: list[str]
    scores_sha256: str
    sources: dict[str, str] = field(default_factory=dict)
    models: list[str] = field(default_factory=list)  # model_order of a [models] study
    variants: bool = False  # the study declares variants (docs/variants.md)
    cloze: bool = False  # the parser is cloze: items.csv ends in logprobs, margin
    ddx: bool = False  # the parser is ddx: trials.csv ends in the metrics (scoring.md §12)
    covariates: list[str] = field(default_factory=list)  # analysis.md §11: covariate.NAME
    factors: list[str] = field(default_factory=list)  # analysis.md §2: factor.<NAME> columns
    excluded_trials: list[str] = field(default_factory=list)  # trial.excluded: never sent

    @property
    def several_models(self) -> bool:
        return len(self.models) >= 2

    def for_model(self, model: str) -> _Dataset:
        """Only the rows of one model, as the dataset of a one-model study."""
        return replace(
            self,
            # with a data arm's rows (model ""), compared within each model (trials.md §6)
            trials=[t | {"model": model} for t in self.trials if t["model"] in (model, "")],
            items=[i | {"model": model} for i in self.items if i["model"] in (model, "")],
            given_up=[g for g in self.given_up if _trial_model(g) == model],
            excluded_trials=[g for g in self.excluded_trials if _trial_model(g) == model],
            models=[],
        )  # a one-model study's dataset; every other member (variants, cloze, ...) kept

    def for_variant(self, variant: str) -> _Dataset:
        """Only the rows of one variant (a post-hoc ``variant``, analysis.md §6)."""

        def of(trial: str) -> str | None:
            parts = trial.split("|")
            return parts[3] if len(parts) == 5 else None

        return replace(
            self,
            trials=[t for t in self.trials if str(t["variant"]) == variant],
            items=[i for i in self.items if str(i["variant"]) == variant],
            given_up=[g for g in self.given_up if of(g) == variant],
            excluded_trials=[g for g in self.excluded_trials if of(g) == variant],
        )

    def for_stimuli(self, stimuli: list[str]) -> _Dataset:
        """Only the rows of these stimuli (a hypothesis's ``stimuli``, study-spec.md)."""
        keep = {str(s) for s in stimuli}
        return replace(
            self,
            trials=[t for t in self.trials if str(t["stimulus"]) in keep],
            items=[i for i in self.items if str(i["stimulus"]) in keep],
        )  # every other member (given_up, sources, models, variants, cloze) kept

    def analysable(self) -> list[dict[str, Any]]:
        return [t for t in self.trials if not t["control"] and not t["excluded"]]

    def analysable_items(self) -> list[dict[str, Any]]:
        ids = {t["trial"] for t in self.analysable()}
        return [i for i in self.items if i["trial"] in ids and i["truth"] != CONTROL_TRUTH]


def _trial_model(trial: str) -> str:
    """The model part of a trial id ``arm|model|item|rep`` (``""`` for ``arm|stimulus|rep``).

    A five-part id (with a variant, ``docs/variants.md`` §4) has it second too (maybe empty).
    """
    parts = trial.split("|")
    return parts[1] if len(parts) in (4, 5) else ""


def _plan_models(plan: dict[str, Any]) -> list[str]:
    """The model order of a ``[models]`` study (prompts.md §7), else an empty list."""
    declared = plan.get("models")
    if not isinstance(declared, dict):
        return []
    order = plan.get("model_order")
    names = [str(m) for m in order] if isinstance(order, list) else sorted(declared)
    return trial_models(plan, names)


def trial_models(plan: dict[str, Any], names: list[str]) -> list[str]:
    """``names`` less the models only steps use (docs/prompts.md §8), in their order.

    A model only steps use: every arm lists its models and none lists it. A study without
    steps keeps every name.
    """
    arms = plan.get("arms")
    if not plan.get("steps") or not isinstance(arms, dict):
        return names
    used: set[str] = set()
    for arm in arms.values():
        if isinstance(arm, dict) and "response_from" in arm:
            continue  # a data arm runs no model (docs/trials.md §6)
        listed = arm.get("models") if isinstance(arm, dict) else None
        if not isinstance(listed, list):
            return names
        used.update(str(m) for m in listed)
    return [n for n in names if n in used]


def _csv_bytes(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        cells: list[Any] = []
        for c in columns:
            v = row[c]
            if v is None or (isinstance(v, float) and math.isnan(v)):
                cells.append("")
            elif isinstance(v, float):
                cells.append(f"{v:.10g}")
            else:
                cells.append(v)
        writer.writerow(cells)
    return out.getvalue().encode("utf-8")


def _dataset(archive: _Archive, plan: dict[str, Any]) -> _Dataset:
    revealed = archive.first("blinding.revealed")
    sealed = archive.first("scoring.sealed")
    if revealed is None or sealed is None:
        raise _Problem("the dataset needs scoring.sealed and blinding.revealed events")
    arm_codes: dict[str, str] = revealed.body.get("arm_codes") or {}
    secret_hex = revealed.body.get("secret_hex")
    if isinstance(secret_hex, str):
        try:
            secret = bytes.fromhex(secret_hex)
        except ValueError:
            secret = b""
        for arm, code in arm_codes.items():
            expected = hmac.new(secret, arm.encode("utf-8"), hashlib.sha256).hexdigest()[:12]
            if code != expected:
                raise _Problem(
                    f"blinding.revealed seq {revealed.seq}: code of arm {arm} is not "
                    "HMAC-SHA256(secret, arm)",
                    revealed.seq,
                )
    code_arm = {code: arm for arm, code in arm_codes.items()}
    exclude = bool((plan.get("analysis") or {}).get("exclude_unparseable", True))
    tumbling = (plan.get("response") or {}).get("parser", TUMBLING_E) == TUMBLING_E
    ddx = (plan.get("response") or {}).get("parser") == "ddx"
    trials: list[tuple[int, dict[str, Any], list[dict[str, Any]]]] = []
    for event in archive.of("trial.scored"):
        b = archive.at(event).body
        response = archive.by_seq.get(b.get("response_seq", -1))
        request = archive.by_seq.get(response.body.get("request_seq", -1)) if response else None
        if response is None or request is None or request.kind != "trial.requested":
            raise _Problem(f"trial.scored seq {event.seq}: its request cannot be found", event.seq)
        rq = request.body
        trial_arm = code_arm.get(b.get("arm_code", ""))
        if trial_arm is None or trial_arm != rq.get("arm"):
            raise _Problem(
                f"trial.scored seq {event.seq}: arm code {b.get('arm_code')} is not the code of "
                f"arm {rq.get('arm')} of trial {rq.get('trial')}",
                event.seq,
            )
        try:
            items = [] if ddx else json.loads(archive.event_blob(event, "scores"))
        except (ValueError, RecursionError):
            raise _Problem(
                f"trial.scored seq {event.seq}: scores blob is not JSON", event.seq
            ) from None
        metrics = (b.get("ddx") or {}).get("metrics") if ddx else None
        n_items = int(b["n_items"])
        common = {
            "trial": rq["trial"],
            "arm": trial_arm,
            "model": _trial_model(str(rq["trial"])),
            "stimulus": rq["stimulus"],
            "variant": str(rq.get("variant", "")),
            "rep": int(rq["rep"]),
        }
        order = str(b.get("order", ""))
        row = {
            **common,
            "response_seq": b["response_seq"],
            "status": b["status"],
            "n_items": n_items,
            "n_answered": int(b["n_answered"]),
            "n_correct": int(b["n_correct"]),
            "accuracy": int(b["n_correct"]) / n_items if n_items else math.nan,
            "control": tumbling and len(items) == 1 and items[0].get("truth") == CONTROL_TRUTH,
            "excluded": exclude and b["status"] == "unparseable",
        }
        for name in _ddx.METRICS:  # scoring.md §12: None (undefined) is an empty cell
            value = (metrics or {}).get(name) if isinstance(metrics, dict) else None
            row[name] = math.nan if value is None else float(value)
        item_rows = [
            {
                **common,
                "row": i.get("row"),
                "position": i.get("position"),
                "truth": i.get("truth"),
                "answer": i.get("answer"),
                "correct": i.get("correct"),
                "order": order,
                "truth_original": _original(order, i.get("truth")),
                "answer_original": _original(order, i.get("answer")),
                "logprobs": (
                    bytes(rfc8785.dumps(i["logprobs"])).decode("utf-8") if "logprobs" in i else None
                ),
                "margin": i.get("margin"),
            }
            for i in items
        ]
        trials.append((int(b["response_seq"]), row, item_rows))
    trials.sort(key=lambda t: t[0])
    covariates = _covariate_names(plan)
    if covariates:  # analysis.md §11: each trial's item labels, from the step's responses
        labels = _item_labels(archive, plan)
        for _, row, _ in trials:
            decision = labels.get(str(row["stimulus"]))
            for name in covariates:
                value = decision.get(name) if isinstance(decision, dict) else None
                row[f"covariate.{name}"] = value if isinstance(value, bool) else None
    factorial = plan.get("factorial")
    factor_names = (
        [str(f) for f in factorial.get("factors") or []] if isinstance(factorial, dict) else []
    )
    arm_table = plan.get("arms") if isinstance(plan.get("arms"), dict) else {}
    for _, row, _ in trials:  # analysis.md §2: a factorial study's factor.<NAME> columns
        info = arm_table.get(row["arm"]) if isinstance(arm_table, dict) else None
        cell = info.get("factors") if isinstance(info, dict) else None
        for f in factor_names:
            row[f"factor.{f}"] = str(cell.get(f, "")) if isinstance(cell, dict) else ""
    given_up = [str(e.body.get("trial")) for e in archive.of("trial.failed") if e.body.get("final")]
    by_source = (plan.get("analysis") or {}).get("random_intercept") == "source"
    return _Dataset(
        [t[1] for t in trials],
        [i for t in trials for i in t[2]],
        sorted(arm_codes),
        given_up,
        str(sealed.body.get("scores_sha256")),
        _sources(archive) if by_source else {},
        _plan_models(plan),
        variants=plan.get("variants") is not None,
        cloze=(plan.get("response") or {}).get("parser") == "cloze",
        ddx=ddx,
        covariates=covariates,
        factors=factor_names,
        excluded_trials=sorted({str(e.body.get("trial")) for e in archive.of("trial.excluded")}),
    )


def _covariate_names(plan: dict[str, Any]) -> list[str]:
    """analysis.md §11: the declared labels, perturbable then indicators (else [])."""
    table = (plan.get("analysis") or {}).get("covariates")
    if not isinstance(table, dict):
        return []
    return [str(n) for key in ("perturbable", "indicators") for n in table.get(key) or []]


def _item_labels(archive: _Archive, plan: dict[str, Any]) -> dict[str, Any]:
    """analysis.md §11: the covariate step's decision per item, re-derived from its responses."""
    from verify._steps import item_decisions

    step = str(plan["analysis"]["covariates"].get("step"))
    rec = (plan.get("steps") or {}).get(step) or {}
    schema_path = rec.get("schema")
    raw = _locked_bytes(archive, schema_path) if isinstance(schema_path, str) else None
    if raw is None:
        raise _Problem(f"protocol.locked analysis.covariates: step {step!r} has no locked schema")
    kinds = ("step.requested", "step.responded", "step.failed")
    events = [
        (
            e.seq,
            e.kind,
            e.body,
            (lambda name, e=e: archive.event_blob(e, name) if name in e.blobs else None),
        )
        for e in archive.events
        if e.kind in kinds
    ]
    return item_decisions(plan, step, json.loads(raw), events)


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


def _original(order: str, label: Any) -> Any:
    """variants.md §2/§5: a label of a permuted trial mapped back (unchanged without order)."""
    if order and type(label) is str and len(label) == 1 and "A" <= label < chr(65 + len(order)):
        return back_to_original(order, label)
    return label


# ------------------------------------------------------------------------------ results


@dataclass
class _Result:
    id: str
    hypothesis: str | None = None
    status: str = "ok"
    values: dict[str, Any] = field(default_factory=dict)
    verdict: str | None = None
    decided_by: dict[str, Any] | None = None
    lmm: bool = False


NOT_APPLICABLE = "not applicable"
"""analysis.md §3: the status and verdict of a test that does not apply, its reason in values."""


def _guard(result: _Result, compute: Callable[[], dict[str, Any]]) -> _Result:
    try:
        result.values = compute()
    except st.NotApplicable as exc:
        result.status = NOT_APPLICABLE
        result.values = {"reason": str(exc)}
        result.verdict = NOT_APPLICABLE if result.hypothesis else None
    except (st.StatError, ValueError, KeyError, ZeroDivisionError):
        result.status = "failed"
        result.values = {}
        result.verdict = "not computed" if result.hypothesis else None
    return result


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def _arm_entry(
    trials: list[dict[str, Any]], items: list[dict[str, Any]], given_up: int
) -> dict[str, Any]:
    """analysis.md §3 ``descriptive.arms``: one arm's (or arm x model cell's) counts."""
    tumbling = [t for t in trials if not t["control"]]
    statuses: dict[str, int] = {}
    for t in tumbling:
        statuses[t["status"]] = statuses.get(t["status"], 0) + 1
    correct = sum(1 for i in items if i["correct"])
    entry: dict[str, Any] = {
        "trials_scored": len(tumbling),
        "status": dict(sorted(statuses.items())),
        "excluded": sum(1 for t in tumbling if t["excluded"]),
        "parse_rate": (statuses.get("ok", 0) + statuses.get("partial", 0)) / len(tumbling)
        if tumbling
        else None,
        "given_up": given_up,
        "glyphs": len(items),
        "correct": correct,
        "accuracy": st.wilson(correct, len(items)) if items else None,
    }
    if not items:
        entry["note"] = None  # text not compared
    else:
        by: dict[str, list[int]] = {}
        for i in items:
            cell = by.setdefault(str(i["stimulus"]), [0, 0])
            cell[0] += 1 if i["correct"] else 0
            cell[1] += 1
        ordered = [by[k] for k in sorted(by)]
        entry["accuracy_clustered"] = st.cluster_proportion(
            [c for c, _ in ordered], [m for _, m in ordered]
        ) | {"cluster": "stimulus"}
    return entry


def _descriptive(ds: _Dataset) -> list[_Result]:
    items = ds.analysable_items()

    def arms() -> dict[str, Any]:
        values: dict[str, Any] = {}
        for arm in ds.arms:
            values[arm] = _arm_entry(
                [t for t in ds.trials if t["arm"] == arm],
                [i for i in items if i["arm"] == arm],
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
                mine = [i for i in items if i["arm"] == arm and i["model"] == model]
                values[f"{arm}|{model}"] = {"arm": arm, "model": model} | _arm_entry(
                    trials, mine, given_up
                )
        return values

    def cells() -> dict[str, Any]:
        correct: dict[tuple[str, str], list[bool]] = {}
        for i in items:
            correct.setdefault((str(i["arm"]), str(i["stimulus"])), []).append(bool(i["correct"]))
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


def _reference(plan: dict[str, Any]) -> str:
    arms: dict[str, Any] = plan["arms"]
    full = [a for a in sorted(arms) if (arms[a] or {}).get("role") == "full"]
    return full[0] if full else min(arms)


def _recorded_point(
    recorded: dict[str, Any] | None,
) -> tuple[tuple[float, float] | None, list[str]]:
    """The recorded ``(σ²_g, σ²_e)`` and optimiser warnings of a mixed-model result, if usable."""
    if not isinstance(recorded, dict):
        return None, []
    g, e = recorded.get("group_variance"), recorded.get("residual_variance")
    warned = recorded.get("warnings")
    texts = [w for w in warned if isinstance(w, str)] if isinstance(warned, list) else []
    ok = all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in (g, e)
    )
    return ((float(g), float(e)) if ok else None), texts  # type: ignore[arg-type]


def _model(
    ds: _Dataset,
    plan: dict[str, Any],
    interaction: bool = False,
    recorded: dict[str, Any] | None = None,
) -> tuple[_Result, dict[str, Any] | None]:
    """``model.lmm`` (analysis.md §3-4): arm, and the model as a factor with several models.

    ``interaction`` gives ``exploratory.arm_by_model`` instead: the arm x model cells too, with
    the joint Wald test of those cells. ``recorded`` is the recorded result's ``values``: its
    variance components are checked to be a REML maximum and everything else is evaluated
    there (statistics.md, "the verifier's check of a mixed model").
    """
    at, recorded_warnings = _recorded_point(recorded)
    group = str((plan.get("analysis") or {}).get("random_intercept", "stimulus"))
    reference = _reference(plan)
    holder: list[dict[str, Any]] = []

    model_arms = (plan.get("analysis") or {}).get("model_arms")

    def compute() -> dict[str, Any]:
        t = ds.analysable()
        if isinstance(model_arms, list):
            t = [r for r in t if str(r["arm"]) in set(model_arms)]
        if group == "source":
            if any(r["stimulus"] not in ds.sources for r in t):
                raise st.StatError("a stimulus has no source")
            groups = [ds.sources[r["stimulus"]] for r in t]
        elif group in ("stimulus", "arm", "trial", "rep"):
            groups = [r[group] for r in t]
        else:
            raise st.StatError(f"no column {group!r} in the trial table")
        present = {str(r["arm"]) for r in t}
        ref = reference if reference in present or not present else min(present)
        factor = None
        if ds.several_models:
            seen = {r["model"] for r in t}
            first = next((m for m in ds.models if m in seen), ds.models[0])
            factor = ("model", [r["model"] for r in t], first)
        fit = st.mixed_model(
            [r["accuracy"] for r in t],
            [r["arm"] for r in t],
            groups,
            ref,
            factor=factor,
            interaction=interaction,
            at=at,
            recorded_warnings=recorded_warnings,
        )
        fit.update(
            _y=[r["accuracy"] for r in t],
            _arm=[str(r["arm"]) for r in t],
            _groups=[str(g) for g in groups],
            _group_col=group,
            _models=[str(r["model"]) for r in t],
        )
        holder.append(fit)
        values = {k: v for k, v in fit.items() if not k.startswith("_")}
        values["_reml_problem"] = fit["_reml_problem"]
        values.update(outcome="accuracy", arm_col="arm", group_col=group, reference=ref)
        if interaction:
            cells = [n for n in fit["_names"] if ":" in n]
            values["interaction_test"] = st.wald(fit, cells)
        if fit["singular"] or not fit["converged"]:
            values["caution"] = None  # text not compared
        return values

    name = "exploratory.arm_by_model" if interaction else "model.lmm"
    result = _guard(_Result(name, lmm=True), compute)
    return result, (holder[0] if holder else None)


def _stimulus_pairs(ds: _Dataset, a: str, b: str) -> dict[str, tuple[float, float]]:
    """Per stimulus (sorted): (mean of a, mean of b) over the models.

    Each is the mean over the models of the (model, stimulus) cell means, on the cells where
    both arms have analysable trials (one model: the per-stimulus means).
    """
    acc: dict[tuple[str, str, str], list[float]] = {}
    for t in ds.analysable():
        key = (str(t["model"]), str(t["stimulus"]), str(t["arm"]))
        acc.setdefault(key, []).append(t["accuracy"])
    arms = {arm for _, _, arm in acc}
    if a not in arms or b not in arms:
        raise st.StatError(f"arms {a!r} and {b!r} need scored trials on common stimuli")
    cells: dict[str, list[tuple[float, float]]] = {}
    for model, stim in sorted({(m, s) for m, s, _ in acc}):
        if (model, stim, a) in acc and (model, stim, b) in acc:
            cells.setdefault(stim, []).append(
                (_mean(acc[(model, stim, a)]), _mean(acc[(model, stim, b)]))
            )
    if not cells:
        raise st.StatError(f"arms {a!r} and {b!r} share no stimulus")
    return {
        s: (_mean([x for x, _ in c]), _mean([y for _, y in c])) for s, c in sorted(cells.items())
    }


def _per_group_diff(ds: _Dataset, a: str, b: str) -> dict[str, float]:
    return {s: x - y for s, (x, y) in _stimulus_pairs(ds, a, b).items()}


def _pair_accuracies(ds: _Dataset, a: str, b: str) -> tuple[list[float], list[float]]:
    """Trial accuracies of a and b on the models both have analysable trials on (any, if none)."""
    t = ds.analysable()
    shared = {r["model"] for r in t if r["arm"] == a} & {r["model"] for r in t if r["arm"] == b}
    keep = [r for r in t if not shared or r["model"] in shared]
    return [r["accuracy"] for r in keep if r["arm"] == a], [
        r["accuracy"] for r in keep if r["arm"] == b
    ]


def _equivalence(ds: _Dataset, a: str, b: str, margin: float) -> dict[str, Any]:
    diffs = _per_group_diff(ds, a, b)
    values = st.equivalence(diffs, margin)
    best = values["max_abs_diff"]
    values["_group_ok"] = [g for g, d in diffs.items() if _close(abs(d), best, REL_TOL)]
    return values


def _paired_t_means(ds: _Dataset, a: str, b: str) -> dict[str, Any] | None:
    pairs = _stimulus_pairs(ds, a, b)
    if len(pairs) < 2:
        return None
    return st.paired_t([x for x, _ in pairs.values()], [y for _, y in pairs.values()])


def _paired_items(ds: _Dataset, a: str, b: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    items = ds.analysable_items()

    def key(i: dict[str, Any]) -> tuple[Any, ...]:
        return (i["model"], i["stimulus"], i["variant"], i["rep"], i["row"], i["position"])

    right: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for i in items:
        if i["arm"] == b:
            right.setdefault(key(i), []).append(i)
    return [(i, j) for i in items if i["arm"] == a for j in right.get(key(i), [])]


def _answer(value: Any) -> str:
    return "(none)" if value is None else str(value)


def _wrong_counts(items: list[dict[str, Any]], labels: tuple[str, ...]) -> list[int]:
    wrong = [i for i in items if not i["correct"] and i["answer"] in labels]
    return [sum(1 for i in wrong if i["answer"] == o) for o in labels]


def _labels(plan: dict[str, Any]) -> tuple[str, ...] | None:
    """analysis.md §3: the answers the locked parser can give; None for free text."""
    response = plan.get("response") or {}
    parser = response.get("parser", TUMBLING_E)
    if parser in (TUMBLING_E, "orientation-word"):
        return ORIENTATIONS
    if parser == "yes-no-maybe":
        return ("yes", "no", "maybe")
    if parser in ("multiple-choice", "cloze"):
        return tuple(str(response.get("letters") or "ABCD"))
    return None


SUBSET_MODEL_KEYS = (
    "n_obs",
    "n_groups",
    "group_variance",
    "residual_variance",
    "log_likelihood",
    "converged",
    "singular",
    "warnings",
)
"""What an lmm hypothesis on a stimulus subset records of its own fit (analysis.md §3)."""


def _id_parts(trial: str) -> tuple[str, str, int]:
    """(arm, stimulus, rep) of a trial id (randomization.md, variants.md §4).

    The id is ``arm|stimulus|rep``, ``arm|model|stimulus|rep`` or ``arm|model|item|variant|rep``.
    """
    parts = trial.split("|")
    stimulus = parts[1] if len(parts) == 3 else parts[2]
    return parts[0], stimulus, int(parts[-1])


def _pairs_by_trial(
    ds: _Dataset, a: str, b: str
) -> tuple[list[float], list[float], list[dict[str, Any]]]:
    """analysis.md §3, paired-t with pairing (stimulus, rep): complete pairs, the rest listed.

    A key with a trial in both arms pairs when both trials have a value; a key whose trial in
    either arm is unparseable-and-excluded, given up or a recorded exclusion is a dropped pair;
    a key one arm never had fails the test.
    """
    controls = {str(t["stimulus"]) for t in ds.trials if t["control"]}
    stimuli = {str(t["stimulus"]) for t in ds.trials}
    seen: dict[str, dict[tuple[str, int], tuple[str, str, float]]] = {a: {}, b: {}}

    def put(arm: str, key: tuple[str, int], entry: tuple[str, str, float]) -> None:
        if key in seen[arm]:
            raise st.StatError(f"pairing: arm {arm} has a key twice")
        seen[arm][key] = entry

    for t in ds.trials:
        if t["arm"] in seen and not t["control"]:
            put(
                t["arm"],
                (str(t["stimulus"]), int(t["rep"])),
                ("unparseable" if t["excluded"] else "ok", str(t["trial"]), float(t["accuracy"])),
            )
    for kind, ids in (("given-up", ds.given_up), ("excluded", ds.excluded_trials)):
        for g in ids:
            arm, stimulus, rep = _id_parts(g)
            if arm in seen and stimulus in stimuli and stimulus not in controls:
                put(arm, (stimulus, rep), (kind, g, math.nan))
    if set(seen[a]) != set(seen[b]):
        raise st.StatError(
            "pairing (stimulus, rep) does not pair: a key was never scheduled in one arm"
        )
    xs: list[float] = []
    ys: list[float] = []
    dropped: list[dict[str, Any]] = []
    for key in sorted(seen[a]):
        ea, eb = seen[a][key], seen[b][key]
        if ea[0] == "ok" and eb[0] == "ok":
            xs.append(ea[2])
            ys.append(eb[2])
            continue
        dropped.append(
            {
                "stimulus": key[0],
                "rep": key[1],
                "excluded": [
                    {"arm": arm, "kind": e[0], "trial": e[1]}
                    for arm, e in ((a, ea), (b, eb))
                    if e[0] != "ok"
                ],
            }
        )
    return xs, ys, dropped


def _hypotheses(
    ds: _Dataset,
    plan: dict[str, Any],
    fit: dict[str, Any] | None,
    recorded: dict[str, Any] | None = None,
    suffix: str = "",
) -> list[_Result]:
    design = plan["design"]
    labels = _labels(plan)
    out: list[_Result] = []
    full_ds = ds
    for h in plan["hypotheses"]:
        a, b = h.get("contrast") or (h.get("arm", ""), "")
        test = h["test"]
        sides = h.get("sides") or "two-sided"
        r = _Result(f"hypothesis.{h['id']}", hypothesis=h["id"], lmm=test == "lmm")
        subset = h.get("stimuli")
        hds = full_ds.for_stimuli(subset) if isinstance(subset, list) else full_ds
        if h.get("outcome") in _ddx.METRICS:  # analysis.md §9: the metric is the outcome
            hds = _metric_ds(hds, str(h["outcome"]))
        got = (recorded or {}).get(f"hypothesis.{h['id']}{suffix}")
        rec_subset = got.get("subset_model") if isinstance(got, dict) else None

        def compute(
            h: dict[str, Any] = h,
            a: str = a,
            b: str = b,
            test: str = test,
            sides: str = sides,
            ds: _Dataset = hds,
            rec_subset: Any = rec_subset,
        ) -> dict[str, Any]:
            one = sides == "one-sided"
            if _mcqhyp.is_mcq_hypothesis(h):  # docs/mcq-statistics.md §11
                return _mcqhyp.values_of(ds, plan, h)
            if _qrboot.is_qr(h):  # statistics.md: (question, run) bootstrap as a test
                return _qrboot.values_of(ds, plan, h)
            if test == "factorial":  # analysis.md "Factorial designs"
                return _factorial.factorial_values(ds.analysable(), plan, h, ds.models)
            if test == "lmm":
                model = fit
                sub: dict[str, Any] | None = None
                if isinstance(h.get("stimuli"), list):
                    sub_plan = {
                        **plan,
                        "analysis": {
                            k: v
                            for k, v in (plan.get("analysis") or {}).items()
                            if k != "model_arms"
                        },
                    }
                    result, model = _model(ds, sub_plan, recorded=rec_subset)
                    if model is None:
                        raise st.StatError("the subset's mixed model could not be fitted")
                    sub = {k: result.values.get(k) for k in SUBSET_MODEL_KEYS}
                    sub["stimuli"] = list(h["stimuli"])
                if model is None:
                    raise st.StatError("the mixed model could not be fitted")
                c = st.contrast(model, a, b, sides)
                out = {**c, "singular_fit": model["singular"], "p_raw": c["p"]}
                if sides == "one-sided":
                    both = st.contrast(model, a, b, "two-sided")
                    out["ci_two_sided"] = [both["lower"], both["upper"]]
                if sub is not None:
                    out["subset_model"] = sub
                    if model["_reml_problem"] is not None:
                        out["_reml_problem"] = f"subset model: {model['_reml_problem']}"
                if model["singular"] or not model["converged"]:
                    out["caution"] = None  # text not compared
                return out
            if test == "equivalence":
                return _equivalence(ds, a, b, h["margin_pp"] / 100)
            if test == "paired-t":
                dropped: list[dict[str, Any]] | None = None
                if h.get("pairing") == ["stimulus", "rep"]:
                    xs, ys, dropped = _pairs_by_trial(ds, a, b)
                else:
                    means = _stimulus_pairs(ds, a, b)
                    xs, ys = [x for x, _ in means.values()], [y for _, y in means.values()]
                res = st.paired_t(xs, ys)
                p = res["p_one_sided"] if one else res["p"]
                out = {**res, "p_raw": p, "estimate": res["difference"]}
                if h.get("pairing"):
                    out["pairing"] = list(h["pairing"])
                if dropped is not None:
                    out["n_dropped"] = len(dropped)
                    out["dropped_pairs"] = dropped
                return out
            if test == "independent-t":
                res = st.independent_t(*_pair_accuracies(ds, a, b))
                p = res["p_one_sided"] if one else res["p"]
                return {**res, "p_raw": p, "estimate": res["difference"]}
            if test == "bootstrap":
                return st.bootstrap_diff(
                    *_pair_accuracies(ds, a, b),
                    int(design["bootstrap_iterations"]),
                    design["bootstrap_seed"],
                )
            if test == "mcnemar":
                pairs = _paired_items(ds, a, b)
                if not pairs:
                    raise st.StatError("no paired items")
                mc = st.mcnemar_paired(
                    [bool(x["correct"]) for x, _ in pairs], [bool(y["correct"]) for _, y in pairs]
                )
                return {**mc, "p_raw": mc["p"], "estimate": (mc["b"] - mc["c"]) / len(pairs)}
            if test == "chi-square":
                if labels is None:
                    raise st.StatError("chi-square needs a parser with labels")
                mine = [i for i in ds.analysable_items() if i["arm"] == a]
                counts = _wrong_counts(mine, labels)
                chi = st.chi_square_gof(counts)
                return {**chi, "labels": list(labels), "p_raw": chi["p"]}
            raise st.StatError(f"unknown test {test!r}")

        _guard(r, compute)
        r.values = (
            r.values
            | {
                "alpha": h.get("alpha") or 0.05,
                "sides": sides,
                "min_difference_pp": h.get("min_difference_pp"),
                "correction": h.get("correction", "none"),
                "family": h.get("family"),
            }
            | ({"phase": h["phase"]} if h.get("phase") is not None else {})
            | ({"outcome": h["outcome"]} if h.get("outcome") in _ddx.METRICS else {})
        )
        out.append(r)
    families: dict[tuple[str, str], list[_Result]] = {}
    for h, r in zip(plan["hypotheses"], out, strict=True):
        correction = h.get("correction", "none")
        if correction in ("bonferroni", "holm"):
            families.setdefault((h.get("family") or h["id"], correction), []).append(r)
    for (_, method), members in families.items():
        has_p = [m.status == "ok" and m.values.get("p_raw") is not None for m in members]
        ps = [float(m.values["p_raw"]) if ok else 1.0 for m, ok in zip(members, has_p, strict=True)]
        adjust = st.bonferroni if method == "bonferroni" else st.holm
        for m, ok, p_adj in zip(members, has_p, adjust(ps)["adjusted"], strict=True):
            if ok:
                m.values["p_adjusted"] = p_adj
                m.values["family_size"] = len(members)
    for h, r in zip(plan["hypotheses"], out, strict=True):
        if r.status == "ok" and h["test"] in _mcqhyp.INTERVAL_TESTS:
            r.verdict, r.decided_by = _mcqhyp.decide_interval(h, r.values)
        elif r.status == "ok" and _qrboot.is_qr(h):
            r.verdict, r.decided_by = _qrboot.decide(h, r.values)
        elif r.status == "ok":
            _decide(h, r)
    return out


def _decide(h: dict[str, Any], r: _Result) -> None:
    v = r.values
    test = h["test"]
    alpha = v["alpha"]
    min_pp = v.get("min_difference_pp")
    if test == "equivalence":
        r.verdict = "supported" if v["holds"] else "not supported"
        r.decided_by = {
            "rule": "max per-group |difference| < margin",
            "max_abs_diff": v["max_abs_diff"],
            "group": v["group"],
            "margin": v["margin"],
            "_group_ok": v.get("_group_ok", []),
        }
        return
    if test == "bootstrap":
        lower, upper, est = v["lower"], v["upper"], v["estimate"]
        if h.get("sides") == "one-sided":
            ok = lower is not None and lower > 0
            rule = "95% bootstrap CI lower bound > 0"
        else:
            ok = (lower is not None and lower > 0) or (upper is not None and upper < 0)
            rule = "95% bootstrap CI excludes 0"
        if min_pp is not None:
            ok = ok and est * 100 >= min_pp
            rule += f" and estimate >= {min_pp} pp"
        r.verdict = "supported" if ok else "not supported"
        r.decided_by = {"rule": rule, "estimate": est, "lower": lower, "upper": upper}
        return
    p = v.get("p_adjusted", v.get("p_raw"))
    estimate = v.get("estimate")
    ok = p is not None and p < alpha
    rule = f"p{' (adjusted)' if 'p_adjusted' in v else ''} < {alpha}"
    if test in ("lmm", "paired-t", "independent-t", "mcnemar", "gee") and (
        h.get("sides") == "one-sided"
    ):
        ok = ok and estimate is not None and estimate > 0
        rule += " and the estimate in the predicted direction"
    if min_pp is not None and estimate is not None:
        ok = ok and estimate * 100 >= min_pp
        rule += f" and estimate >= {min_pp} pp"
    r.verdict = "supported" if ok else "not supported"
    r.decided_by = {"rule": rule, "p": p, "estimate": estimate}


def _exploratory(
    ds: _Dataset, plan: dict[str, Any], recorded: dict[str, Any] | None = None
) -> list[_Result]:
    out: list[_Result] = []
    items = ds.analysable_items()
    labels = _labels(plan)
    parser = (plan.get("response") or {}).get("parser", TUMBLING_E)
    tumbling = parser == TUMBLING_E
    oriented = parser in (TUMBLING_E, "orientation-word")
    for arm in ds.arms if labels is not None else []:
        it = [i for i in items if i["arm"] == arm]

        def errors(
            it: list[dict[str, Any]] = it, labels: tuple[str, ...] = labels or ()
        ) -> dict[str, Any]:
            if not it:
                raise st.StatError("no parseable responses in this arm")
            answers = [_answer(i["answer"]) for i in it]
            truth = [str(i["truth"]) for i in it]
            values: dict[str, Any] = {"confusion": st.confusion_matrix(truth, answers, labels)}
            wrong = [i for i in it if not i["correct"] and i["answer"] in labels]
            if wrong:
                if tumbling:
                    values["canonical_right_share"] = st.canonical_share(
                        [str(i["truth"]) for i in wrong], [str(i["answer"]) for i in wrong]
                    )
                counts = _wrong_counts(it, labels)
                name = "error_directions" if oriented else "error_answers"
                values[name] = dict(zip(labels, counts, strict=True))
                try:
                    values["error_chi_square"] = st.chi_square_gof(counts)
                except st.StatError:
                    values["error_chi_square"] = {"error": None}
                try:
                    shares = st.error_null_excluding_truth([str(i["truth"]) for i in wrong], labels)
                    kept = [k for k, sh in enumerate(shares) if sh > 0]
                    values["error_chi_square_excluding_truth"] = st.chi_square_gof(
                        [counts[k] for k in kept], [shares[k] for k in kept]
                    ) | {"labels": [labels[k] for k in kept]}
                except st.StatError:
                    values["error_chi_square_excluding_truth"] = {"error": None}
            if tumbling:
                rows: dict[int, list[bool]] = {}
                for i in it:
                    rows.setdefault(int(i["row"]), []).append(bool(i["correct"]))
                values["accuracy_by_row"] = {
                    str(row): {"correct": sum(c), "n": len(c), "accuracy": sum(c) / len(c)}
                    for row, c in sorted(rows.items())
                }
            values["position_bias"] = st.position_bias_tvd(answers, truth, labels)
            return values

        out.append(_guard(_Result(f"exploratory.errors.{arm}"), errors))
    design = plan["design"]
    for a, b in sorted(
        {(h["contrast"][0], h["contrast"][1]) for h in plan["hypotheses"] if h.get("contrast")}
    ):

        def pair(a: str = a, b: str = b) -> dict[str, Any]:
            values: dict[str, Any] = {}
            paired = _paired_items(ds, a, b)
            if paired:
                values["mcnemar"] = st.mcnemar_paired(
                    [bool(x["correct"]) for x, _ in paired], [bool(y["correct"]) for _, y in paired]
                )
                values["flip_rate"] = st.flip_rate(
                    [_answer(x["answer"]) for x, _ in paired],
                    [_answer(y["answer"]) for _, y in paired],
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

        out.append(_guard(_Result(f"exploratory.pair.{a}-{b}"), pair))
    if parser == "orientation-word" and labels is not None:
        out.append(_by_truth(ds, plan, labels))
    if tumbling and _nested_pairs(plan):
        out.append(_by_stimulus(ds, plan))
    for arm in ds.arms:
        ran = {t["model"] for t in ds.trials if t["arm"] == arm}
        for model in [None] + [m for m in ds.models if m in ran and ds.several_models]:

            def question_run(arm: str = arm, model: str | None = model) -> dict[str, Any]:
                t = [r for r in ds.analysable() if r["arm"] == arm]
                if model is not None:
                    t = [r for r in t if r["model"] == model]
                pooled = model is None and ds.several_models  # a run: (model, replicate)
                return st.bootstrap_clustered(
                    [r["accuracy"] for r in t],
                    [r["stimulus"] for r in t],
                    [
                        (f"{r['variant']}|" if ds.variants else "")
                        + (f"{r['model']}|{r['rep']}" if pooled else str(r["rep"]))
                        if ds.variants or pooled
                        else r["rep"]
                        for r in t
                    ],
                    int(design["bootstrap_iterations"]),
                    design["bootstrap_seed"],
                )

            name = arm if model is None else f"{arm}@{model}"
            out.append(_guard(_Result(f"exploratory.question_run.{name}"), question_run))
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
        for i in ds.analysable_items():
            if str(i["truth"]) in labels:
                k, n = counts[i["arm"]].get(str(i["truth"]), (0, 0))
                counts[i["arm"]][str(i["truth"])] = (k + bool(i["correct"]), n + 1)
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


SENSITIVITY_MODELS = ("registered", "probe_by_arm", "probe_by_arm_arm_residual")
"""statistics.md "Sensitivity": the models of ``sensitivity.lmm``, in order."""
SENSITIVITY_NAMES = {
    "registered": "registered random-intercept (Satterthwaite df, expected information)",
    "probe_by_arm": "probe-by-arm",
    "probe_by_arm_arm_residual": "probe-by-arm with a residual variance per arm",
}


def _without_df_method_where_unrecorded(contrasts: list[dict[str, Any]], recorded: Any) -> None:
    """An archive written before ``df_method`` was recorded: the member is not recomputed.

    ``docs/archive-format.md`` §5: every sensitivity df this tool ever wrote is Satterthwaite's
    with the expected information, so a model's row without ``df_method`` means just that.
    """
    by_id = {_obj_of(x).get("hypothesis"): _obj_of(x) for x in recorded or []}
    for row in contrasts:
        old = by_id.get(row.get("hypothesis"), {})
        for name in SENSITIVITY_MODELS:
            rec, new = old.get(name), row.get(name)
            if isinstance(rec, dict) and isinstance(new, dict) and "df_method" not in rec:
                new.pop("df_method", None)


def _unfittable(arms: list[str], groups: list[str], y: list[float], per_arm: bool) -> str | None:
    """statistics.md "Sensitivity": why a probe-by-arm model cannot be fitted, or None."""
    probes = sorted(set(groups))
    if len(probes) < 3:
        return f"fewer than 3 probes ({len(probes)})"
    cells: dict[tuple[str, str], list[float]] = {}
    for a, g, v in zip(arms, groups, y, strict=True):
        cells.setdefault((g, a), []).append(v)
    for g in probes:
        if len({a for (gg, a) in cells if gg == g}) < 2:
            return f"probe {g!r} has one arm"
    if max(len(c) for c in cells.values()) < 2:
        return "no cell with two trials"
    if per_arm:
        for arm in sorted(set(arms)):
            spread = [max(c) - min(c) for (_, a), c in cells.items() if a == arm]
            if max(spread) <= 0:
                return f"arm {arm} has zero residual variance"
    return None


def _unexplained(y: Any, exog: Any, cells: list[str], arm: list[str]) -> dict[str, float]:
    """statistics.md "Sensitivity": per arm, the squares left by ``X`` and the cell indicators.

    The cell means are removed from ``y`` and every column of ``X`` (Frisch–Waugh), then the
    centred ``y`` is regressed on the centred ``X``.
    """
    rows_of: dict[str, list[int]] = {}
    for i, c in enumerate(cells):
        rows_of.setdefault(c, []).append(i)
    data = np.column_stack([exog, y])
    for rows in rows_of.values():
        data[rows] -= data[rows].mean(axis=0)
    beta = np.linalg.lstsq(data[:, :-1], data[:, -1], rcond=None)[0]
    left = (data[:, -1] - data[:, :-1] @ beta) ** 2
    return {a: float(sum(left[i] for i, x in enumerate(arm) if x == a)) for a in sorted(set(arm))}


def _support(h: dict[str, Any], registered: dict[str, Any], p: Any, est: Any) -> bool | None:
    if not isinstance(p, float) or not isinstance(est, float) or not math.isfinite(p):
        return None
    raw, adjusted = registered.get("p_raw"), registered.get("p_adjusted")
    factor = adjusted / raw if isinstance(adjusted, float) and raw else 1.0
    ok = min(1.0, p * factor) < float(h.get("alpha") or 0.05)
    if (h.get("sides") or "two-sided") == "one-sided":
        ok = ok and est > 0
    if h.get("min_difference_pp") is not None:
        ok = ok and est * 100 >= float(h["min_difference_pp"])
    return bool(ok)


def _sensitivity(
    ds: _Dataset,
    plan: dict[str, Any],
    fit: dict[str, Any] | None,
    tested: list[_Result],
    recorded: dict[str, Any] | None,
    model: str | None = None,
) -> _Result | None:
    """``sensitivity.lmm`` (statistics.md "Sensitivity"), every fit checked by the own REML.

    With several models ``fit`` is the pooled model (the model a fixed factor in every
    sensitivity model); ``model`` gives ``sensitivity.lmm@<model>`` on that model's dataset and
    fit, its rows the ``<id>@<model>`` hypotheses.
    """
    lmm = [h for h in plan["hypotheses"] if h["test"] == "lmm" and not h.get("stimuli")]
    subsets = [h for h in plan["hypotheses"] if h["test"] == "lmm" and h.get("stimuli")]
    if not (lmm or subsets):
        return None
    suffix = f"@{model}" if model is not None else ""
    r = _Result(f"sensitivity.lmm{suffix}")
    design = plan["design"]
    by_id = {x.hypothesis: x for x in tested}
    rec_models = (recorded or {}).get("models") if isinstance(recorded, dict) else None

    def block(
        fit: dict[str, Any], hyps: list[dict[str, Any]], rec_models: Any
    ) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
        y = np.asarray(fit["_y"], dtype=np.float64)
        arm, groups = list(fit["_arm"]), list(fit["_groups"])
        others = list(fit["arms"][1:])
        factor = (
            ("model", list(fit["_models"]), fit["factor_references"][0])
            if fit.get("factors")
            else None
        )
        exog, _, _ = st._design(y, np.asarray(arm), fit["arms"][0], factor, False)
        cells = [f"{g}|{a}" for g, a in zip(groups, arm, strict=True)]
        params: dict[str, Any] = {}
        reml: dict[str, RemlModel] = {}
        problems: list[str] = []
        reg = RemlModel(y, exog, groups, [groups])
        params["registered"] = np.array([fit["group_variance"], fit["residual_variance"]])
        reg_ll = reg.loglik(params["registered"])
        reml["registered"] = reg
        models: dict[str, Any] = {
            "registered": {
                "fitted": True,
                "log_likelihood": reg_ll,
                "variances": {"group": fit["group_variance"], "residual": fit["residual_variance"]},
            }
        }
        left = (
            _unexplained(y, exog, cells, arm)
            if _unfittable(arm, groups, list(y), False) is None
            else {}
        )
        tiny = 1e-12 * max(float(np.sum((y - y.mean()) ** 2)), 1e-300)
        for name in SENSITIVITY_MODELS[1:]:
            per_arm = name == "probe_by_arm_arm_residual"
            reason = _unfittable(arm, groups, list(y), per_arm)
            if reason is None and not per_arm and sum(left.values()) <= tiny:
                reason = "no residual variation within the probe x arm cells"
            if reason is None and per_arm:
                reason = next(
                    (
                        f"arm {a} has zero residual variance"
                        for a in sorted(left)
                        if left[a] <= tiny
                    ),
                    None,
                )
            if reason is not None:
                models[name] = {"fitted": False, "reason": reason}
                continue
            classes = arm if per_arm else None
            names = ["group", "group_by_arm"] + (
                [f"residual[{c}]" for c in sorted(set(arm))] if per_arm else ["residual"]
            )
            model = RemlModel(y, exog, groups, [groups, cells], classes)
            got = (rec_models or {}).get(name) if isinstance(rec_models, dict) else None
            variances = got.get("variances") if isinstance(got, dict) else None
            at = [variances.get(n) for n in names] if isinstance(variances, dict) else None
            if at is not None and all(isinstance(v, float) and math.isfinite(v) for v in at):
                point, problem = check_point(model, [float(v) for v in at if v is not None])
                if problem is not None:
                    problems.append(f"sensitivity model {name}: {problem}")
                    point = model.maximise()
            else:
                point = model.maximise()
            reml[name] = model
            params[name] = point.params
            entry: dict[str, Any] = {
                "fitted": True,
                "log_likelihood": point.loglik,
                "variances": dict(zip(names, (float(v) for v in point.params), strict=True)),
            }
            if name == "probe_by_arm":
                chi2 = max(0.0, 2.0 * (point.loglik - reg_ll))
                entry["lrt_chi2"] = chi2
                entry["lrt_p"] = 0.5 * float(sps.chi2.sf(chi2, 1)) if chi2 > 0 else 1.0
            models[name] = entry
        contrasts = []
        for h in hyps:
            a, b = h["contrast"]
            sides = h.get("sides") or "two-sided"
            hyp = by_id.get(h["id"] + suffix)
            registered = hyp.values if hyp is not None else {}
            weights = np.zeros(exog.shape[1])
            for level, sign in ((a, 1.0), (b, -1.0)):
                if level in others:
                    weights[1 + others.index(level)] += sign
            row: dict[str, Any] = {
                "hypothesis": h["id"] + suffix,
                "a": a,
                "b": b,
                "sides": sides,
                "as_registered": {
                    k: registered.get(k)
                    for k in ("estimate", "lower", "upper", "p_raw", "p_adjusted")
                },
                "registered_verdict": hyp.verdict if hyp is not None else None,
            }
            for name in SENSITIVITY_MODELS:
                if name in reml:
                    c = st.satterthwaite(reml[name], params[name], weights, sides)
                    c["supports"] = _support(h, registered, c["p"], c["estimate"])
                    row[name] = c
                else:
                    row[name] = None
            # per probe: the mean over models of the (model, probe) cells' a − b (statistics.md)
            per_cell: dict[tuple[str, str, str], list[float]] = {}
            for v, aa, gg, mm in zip(y, arm, groups, fit["_models"], strict=True):
                per_cell.setdefault((gg, mm, aa), []).append(float(v))
            diffs = []
            for g in sorted(set(groups)):
                ds_g = [
                    float(np.mean(per_cell[(g, m, a)])) - float(np.mean(per_cell[(g, m, b)]))
                    for m in sorted({mm for gg, mm, _ in per_cell if gg == g})
                    if (g, m, a) in per_cell and (g, m, b) in per_cell
                ]
                if ds_g:
                    diffs.append(float(np.mean(ds_g)))
            boot = st.probe_bootstrap(
                diffs, int(design["bootstrap_iterations"]), design["bootstrap_seed"], sides
            )
            lower, upper = boot["lower"], boot["upper"]
            excludes = lower > 0 or (upper is not None and upper < 0)
            boot["supports"] = bool(lower > 0 if sides == "one-sided" else excludes)
            row["cluster_bootstrap"] = boot
            primary = next((m for m in SENSITIVITY_MODELS[:0:-1] if row[m] is not None), None)
            row["primary"] = primary
            row["supports"] = row[primary]["supports"] if primary else None
            if row["registered_verdict"] == "supported" and row["supports"] is False:
                row["flag"] = None  # text not compared
            contrasts.append(row)
        return models, contrasts, problems

    def compute() -> dict[str, Any]:
        if fit is None:
            raise st.StatError("the registered mixed model could not be fitted")
        models, contrasts, problems = block(fit, lmm, rec_models)
        rec_rows = (recorded or {}).get("contrasts") if isinstance(recorded, dict) else None
        for h in subsets:  # statistics.md "Sensitivity": the subset's own models
            sub_plan = {
                **plan,
                "analysis": {
                    k: v for k, v in (plan.get("analysis") or {}).items() if k != "model_arms"
                },
            }
            rec_hyp = by_id.get(h["id"])
            rec_subset = rec_hyp.values.get("subset_model") if rec_hyp is not None else None
            _, sub_fit = _model(
                ds.for_stimuli(list(h["stimuli"])),
                sub_plan,
                recorded=rec_subset if isinstance(rec_subset, dict) else None,
            )
            if sub_fit is None:
                contrasts.append(
                    {"hypothesis": h["id"] + suffix, "stimuli": list(h["stimuli"]), "error": None}
                )
                continue
            rec_row = next(
                (
                    _obj_of(x)
                    for x in rec_rows or []
                    if _obj_of(x).get("hypothesis") == h["id"] + suffix
                ),
                {},
            )
            sub_models, rows, sub_problems = block(sub_fit, [h], rec_row.get("subset_models"))
            rows[0]["stimuli"] = list(h["stimuli"])
            rows[0]["subset_models"] = sub_models
            contrasts.append(rows[0])
            problems += [f"{h['id']}: {x}" for x in sub_problems]
        _without_df_method_where_unrecorded(contrasts, rec_rows)
        out: dict[str, Any] = {
            "group_col": fit["_group_col"],
            "reference": fit["arms"][0],
            "n_groups": fit["n_groups"],
            "models": models,
            "contrasts": contrasts,
        }
        if fit.get("factors"):  # the pooled fit of several models
            out["factors"] = list(fit["factors"])
            out["factor_references"] = list(fit["factor_references"])
        if model is not None:
            out["model"] = model
        if problems:
            out["_reml_problem"] = "; ".join(problems)
        return out

    return _guard(r, compute)


def _sensitivity_per_model(
    ds: _Dataset, plan: dict[str, Any], tested: list[_Result], recorded: dict[str, Any]
) -> list[_Result]:
    """``sensitivity.lmm@<model>`` per model in model order (statistics.md "Sensitivity")."""
    if not ds.several_models:
        return []
    out = []
    for name in ds.models:
        sub = ds.for_model(name)
        _, sub_fit = _model(sub, plan, recorded=recorded.get(f"model.lmm@{name}"))
        r = _sensitivity(
            sub, plan, sub_fit, tested, recorded.get(f"sensitivity.lmm@{name}"), model=name
        )
        if r is not None:
            out.append(r)
    return out


def _judge_agreement(archive: _Archive, plan: dict[str, Any], step: str) -> _Result:
    """analysis.md §8: Cohen's kappa (two judges) or Fleiss' kappa (more), by their formulas.

    Over the trials every judge gave a parsed vote, the categories being the step's labels.
    Cohen: (p_o - p_e) / (1 - p_e) with p_e the sum over labels of the product of the two
    judges' label shares. Fleiss: (P - P_e) / (1 - P_e), P the mean over trials of
    (sum_j n_ij^2 - n) / (n (n - 1)), P_e the sum over labels of the squared overall share.
    """
    spec = (plan.get("steps") or {}).get(step) or {}
    labels = [str(x) for x in spec.get("labels") or []]
    judged = [
        e.body["judge"] for e in archive.of("trial.scored") if isinstance(e.body.get("judge"), dict)
    ]

    def compute() -> dict[str, Any]:
        if not judged:
            raise ValueError("no judged trial")
        raters = [v["model"] for v in judged[0]["votes"]]
        if len(raters) < 2:  # analysis.md §8: agreement does not apply to one judge
            raise st.NotApplicable("one judge")
        rows = [
            [v["vote"] for v in j["votes"]]
            for j in judged
            if all(v["vote"] in labels for v in j["votes"])
        ]
        if not rows:
            raise ValueError("no complete trial")
        n, m = len(rows), len(raters)
        agree = math.fsum(len(set(r)) == 1 for r in rows) / n
        if len({vote for r in rows for vote in r}) == 1:  # analysis.md §8: p_e = 1, kappa 0/0
            return {
                "judges": raters,
                "labels": labels,
                "method": "cohen" if m == 2 else "fleiss",
                "n_trials": n,
                "incomplete": len(judged) - n,
                "all_agree": agree,
                "kappa": None,
                "kappa_undefined": "every vote is the same label, so chance agreement is 1 and "
                "kappa is 0/0 (docs/analysis.md section 8)",
            }
        if m == 2:
            p_o = math.fsum(a == b for a, b in rows) / n
            p_e = math.fsum(
                (sum(r[0] == c for r in rows) / n) * (sum(r[1] == c for r in rows) / n)
                for c in labels
            )
            kappa = (p_o - p_e) / (1 - p_e)
            method = "cohen"
        else:
            counts = [[r.count(c) for c in labels] for r in rows]
            big_p = (
                math.fsum((math.fsum(x * x for x in row) - m) / (m * (m - 1)) for row in counts) / n
            )
            shares = [math.fsum(row[j] for row in counts) / (n * m) for j in range(len(labels))]
            p_e = math.fsum(s * s for s in shares)
            kappa = (big_p - p_e) / (1 - p_e)
            method = "fleiss"
        return {
            "judges": raters,
            "labels": labels,
            "method": method,
            "n_trials": n,
            "incomplete": len(judged) - n,
            "all_agree": math.fsum(len(set(r)) == 1 for r in rows) / n,
            "kappa": kappa,
        }

    return _guard(_Result("exploratory.judge_agreement"), compute)


def _obj_of(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _multiplicity(tested: list[_Result]) -> _Result:
    def compute() -> dict[str, Any]:
        rows = [
            (r.hypothesis, r.values["p_raw"])
            for r in tested
            if r.status == "ok" and r.values.get("p_raw") is not None
        ]
        if not rows and all(r.status == "ok" for r in tested):
            # docs/analysis.md: interval tests only, nothing to correct
            return {
                "hypotheses": [],
                "note": "no registered test gives a p-value (interval "
                "tests only): nothing to correct",
            }
        if not rows:
            raise st.StatError("no hypothesis produced a p-value")
        ps = [float(p) for _, p in rows]
        return {
            "hypotheses": [h for h, _ in rows],
            "bonferroni": st.bonferroni(ps),
            "holm": st.holm(ps),
        }

    return _guard(_Result("exploratory.multiplicity", lmm=any(r.lmm for r in tested)), compute)


def _phases(archive: _Archive) -> tuple[dict[str, int], dict[str, int]] | None:
    """(trial id -> phase index, phase name -> index) of a study locked in phases, else None.

    A phase's trials are those its ``schedule`` blob adds after the previous phase's
    (``docs/study-spec.md``, "Phases"); the ``schedule`` and ``phases`` checks verify the
    blobs themselves.
    """
    locked = archive.of("protocol.locked")
    if len(locked) < 2:
        return None
    trials: dict[str, int] = {}
    names: dict[str, int] = {}
    for index, event in enumerate(locked):
        archive.at(event)
        phase = event.body.get("phase")
        if isinstance(phase, dict) and isinstance(phase.get("name"), str):
            names[phase["name"]] = index
        text = archive.event_blob(event, "schedule").decode("utf-8", "replace")
        for trial in text.splitlines():
            trials.setdefault(trial, index)
    return trials, names


def _restrict(ds: _Dataset, keep: set[str]) -> _Dataset:
    return replace(
        ds,
        trials=[t for t in ds.trials if t["trial"] in keep],
        items=[i for i in ds.items if i["trial"] in keep],
        given_up=[g for g in ds.given_up if g in keep],
        excluded_trials=[g for g in ds.excluded_trials if g in keep],
    )  # every other member (models, variants, cloze, ...) as the whole study's


def _metric_ds(ds: _Dataset, outcome: str) -> _Dataset:
    """analysis.md §9: ``ds`` with a ddx metric as each trial's accuracy; undefined: excluded."""
    rows = [
        {**t, "accuracy": t[outcome], "excluded": bool(t["excluded"]) or math.isnan(t[outcome])}
        for t in ds.trials
    ]
    return replace(ds, trials=rows)


def _tested(
    ds: _Dataset,
    plan: dict[str, Any],
    fit: dict[str, Any] | None,
    out: list[_Result],
    recorded: dict[str, Any],
) -> list[_Result]:
    """The hypotheses' results (pooled, then each model's); each model's fit goes to ``out``."""
    tested = _hypotheses(ds, plan, fit, recorded)
    if ds.several_models:
        # analysis.md §4: each model's own fit and verdicts, named <id>@<model>
        per_model: list[list[_Result]] = []
        for name in ds.models:
            sub = ds.for_model(name)
            sub_model, sub_fit = _model(sub, plan, recorded=recorded.get(f"model.lmm@{name}"))
            sub_model.id += f"@{name}"
            out.append(sub_model)
            results = _hypotheses(sub, plan, sub_fit, recorded, f"@{name}")
            for r in results:
                r.id += f"@{name}"
                r.hypothesis = f"{r.hypothesis}@{name}"
                r.values["model"] = name
            per_model.append(results)
        tested = [
            r
            for i, pooled in enumerate(tested)
            for r in [pooled] + [results[i] for results in per_model]
        ]
    return tested


def _recompute(
    ds: _Dataset,
    plan: dict[str, Any],
    phases: tuple[dict[str, int], dict[str, int]] | None = None,
    recorded: dict[str, Any] | None = None,
) -> list[_Result]:
    """Every result of analysis.md §3; ``recorded`` maps result ids to their recorded values."""
    recorded = recorded or {}
    if not ds.trials:
        return [_Result("descriptive.arms", status="failed")] + [
            _Result(
                f"hypothesis.{h['id']}", hypothesis=h["id"], status="failed", verdict="not computed"
            )
            for h in plan["hypotheses"]
        ]
    if ds.ddx:  # analysis.md §9: the metrics per arm (and model), the hypotheses, multiplicity
        ddx_out = [
            _guard(
                _Result("descriptive.ddx"),
                lambda: _ddx.ddx_descriptive(ds.trials, ds.several_models),
            )
        ]
        ddx_tested = _hypotheses(ds, plan, None, recorded)
        if ds.several_models:
            per = []
            for name in ds.models:
                results = _hypotheses(ds.for_model(name), plan, None, recorded, f"@{name}")
                for r in results:
                    r.id += f"@{name}"
                    r.hypothesis = f"{r.hypothesis}@{name}"
                    r.values["model"] = name
                per.append(results)
            ddx_tested = [
                r for i, pooled in enumerate(ddx_tested) for r in [pooled] + [res[i] for res in per]
            ]
        return [*ddx_out, *ddx_tested, _multiplicity(ddx_tested)]
    out = _descriptive(ds)
    if _mcqhyp.registers_mcq(plan):  # docs/mcq-statistics.md §11
        out.append(_guard(_Result("descriptive.mcq"), lambda: _mcqhyp.descriptive_values(ds, plan)))
    if _qrboot.registers_qr(plan):
        out.append(
            _guard(
                _Result("descriptive.qr_bootstrap"), lambda: _qrboot.descriptive_values(ds, plan)
            )
        )
    model, fit = _model(ds, plan, recorded=recorded.get("model.lmm"))
    out.append(model)
    last_plan = plan
    if phases is None:
        tested = _tested(ds, plan, fit, out, recorded)
    else:
        # docs/analysis.md "Phases": a hypothesis of phase k is tested, with its own mixed
        # model, on the trials of phases up to k; the last phase's on all of them
        trial_phase, index = phases
        level_of = {h["id"]: index.get(h.get("phase"), 0) for h in plan["hypotheses"]}
        last = max(trial_phase.values())
        tested = []
        for level in sorted(set(level_of.values())):
            part = {
                **plan,
                "hypotheses": [h for h in plan["hypotheses"] if level_of[h["id"]] == level],
            }
            last_plan = {**plan, "hypotheses": []}
            if level >= last:
                tested += _tested(ds, part, fit, out, recorded)
                last_plan = part
                continue
            sub = _restrict(ds, {t for t, p in trial_phase.items() if p <= level})
            _, sub_fit = _model(sub, plan)
            tested += _tested(sub, part, sub_fit, [], recorded)
        order = {h["id"]: i for i, h in enumerate(plan["hypotheses"])}
        tested.sort(key=lambda r: order[str(r.hypothesis).split("@", 1)[0]])
    out.extend(tested)
    out.extend(_exploratory(ds, plan, recorded))
    out.append(_multiplicity(tested))
    # the whole data's hypotheses only (docs/analysis.md "Phases")
    sens = _sensitivity(ds, last_plan, fit, tested, recorded.get("sensitivity.lmm"))
    if sens is not None:
        out.append(sens)
    out.extend(_sensitivity_per_model(ds, last_plan, tested, recorded))
    out.extend(_reviews(ds, plan))
    return out


def _review_plan(plan: dict[str, Any]) -> dict[str, Any]:
    """The contrast samples of ``protocol.locked`` ``reviews`` (docs/study-spec.md), by name.

    ``{}`` when none is declared. A ``judge-label`` sample has no analysis result (the
    ``steps`` check verifies its ``review.recorded`` labels); any other kind is a problem.
    """
    reviews = plan.get("reviews") or {}
    if not isinstance(reviews, dict) or not all(isinstance(r, dict) for r in reviews.values()):
        raise _Problem("protocol.locked reviews is not an object of review declarations")
    for name, review in reviews.items():
        if review.get("kind") not in ("judge-label", "contrast", "reference-set"):
            raise _Problem(
                f"protocol.locked reviews.{name}: kind {review.get('kind')!r} is "
                "not 'judge-label', 'contrast' or 'reference-set'"
            )
    return {name: r for name, r in reviews.items() if r["kind"] == "contrast"}


def _reviews(ds: _Dataset, plan: dict[str, Any]) -> list[_Result]:
    """``review.<NAME>`` of each declared review sample, in name order (mcq-statistics.md §9)."""
    out = []
    for name, review in sorted(_review_plan(plan).items()):

        def compute(review: dict[str, Any] = review) -> dict[str, Any]:
            return _review.values_of(ds, plan, review)

        out.append(_guard(_Result(f"review.{name}"), compute))
    return out


def _human_tables(archive: _Archive, plan: dict[str, Any], done: list[_Result]) -> list[_Result]:
    """analysis.md §10: the tables of the recorded reviews, in sample name order.

    ``review.<NAME>`` of a reference-set sample (its items drawn from the locked item file) and of
    a judge-label sample (reviewers against the recorded judge decisions, whose votes the
    rescore check re-derived), ``review.<NAME>.codes`` of a contrast sample with codes (its
    cases those of the re-derived ``review.<NAME>`` in ``done``).
    """
    reviews: dict[str, list[tuple[int, str, Any, Any]]] = {}
    analysed = min((e.seq for e in archive.of("analysis.result")), default=None)
    for e in archive.of("review.recorded"):
        if analysed is not None and e.seq > analysed:
            continue  # recorded after the analysis: in no result (scoring.md §11)
        reviews.setdefault(str(e.body.get("sample")), []).append(
            (e.seq, e.actor, e.body.get("subject"), e.body.get("value"))
        )
    drawn = {r.id: r for r in done}
    out = []
    for name, review in sorted((plan.get("reviews") or {}).items()):
        mine = reviews.get(name, [])
        if review.get("kind") == "reference-set":

            def refsets(review: dict[str, Any] = review, mine: list[Any] = mine) -> dict[str, Any]:
                items = [item.id for item in _item_file(archive).items]
                sample = _human.item_sample(items, int(review["n"]), str(review["seed"]))
                return {
                    "reference": review["reference"],
                    "n": review["n"],
                    "seed": review["seed"],
                    **_human.reference_table(sample, mine),
                }

            out.append(_guard(_Result(f"review.{name}"), refsets))
        elif review.get("kind") == "judge-label":

            def labels(review: dict[str, Any] = review, mine: list[Any] = mine) -> dict[str, Any]:
                scored = {
                    e.body["response_seq"]: e.body["judge"]
                    for e in archive.of("trial.scored")
                    if isinstance(e.body.get("judge"), dict)
                    and e.body["judge"].get("step") == review["step"]
                }
                judged = []
                for seq, judge in scored.items():
                    votes = [x.get("vote") for x in judge["votes"]]
                    judged.append((seq, None not in votes and len(set(votes)) == 1))
                chosen = review_sample(judged, int(review["n"]), str(review["seed"]))
                step = (plan.get("steps") or {}).get(review["step"]) or {}
                return {
                    "step": review["step"],
                    "sample": chosen,
                    **_human.label_table(
                        {s: scored[s]["decision"] for s in chosen},
                        list(step.get("labels") or []),
                        mine,
                        dict(judged),
                    ),
                }

            out.append(_guard(_Result(f"review.{name}"), labels))
        elif review.get("kind") == "contrast" and review.get("codes"):

            def codes(
                name: str = name, review: dict[str, Any] = review, mine: list[Any] = mine
            ) -> dict[str, Any]:
                sample = drawn.get(f"review.{name}")
                if sample is None or sample.status != "ok":
                    raise ValueError("not drawn")
                seqs = [c["failed_response_seq"] for c in sample.values["cases"]]
                return _human.code_table(seqs, list(review["codes"]), mine)

            out.append(_guard(_Result(f"review.{name}.codes"), codes))
    return out


def _review_files(archive: _Archive, plan: dict[str, Any], results: list[_Event]) -> Check | None:
    """Each ``analysis/review/<NAME>.csv`` rebuilt (docs/archive-format.md), else a FAIL.

    From its verified ``review.<NAME>`` result, the locked item file and the response blobs;
    the FAIL names the first file that differs and its first differing line.
    """
    bodies = {str(e.body.get("id")): e.body for e in results}
    items: dict[str, dict[str, Any]] | None = None
    for name in sorted(_review_plan(plan)):
        rel = f"analysis/review/{name}.csv"
        body = bodies.get(f"review.{name}") or {}
        present = rel in archive.files.files
        if body.get("status") != "ok":
            if present:
                return Check(
                    "reanalysis",
                    Status.FAIL,
                    f"{rel} is in the archive but review.{name} was not computed.",
                    None,
                    rel,
                )
            continue
        if not present:
            return Check(
                "reanalysis",
                Status.FAIL,
                f"{rel} is missing (review.{name} was computed).",
                None,
                rel,
            )
        if items is None:
            items = {i.id: i.data for i in _item_file(archive).items}

        def response(seq: int, rel: str = rel) -> str:
            event = archive.by_seq.get(seq)
            if event is None or event.kind != "trial.responded":
                raise _Problem(f"{rel}: seq {seq} is not a trial.responded event", seq)
            fmt = str(event.body.get("format", "anthropic-messages"))
            return _review.shown_response(archive.event_blob(event, "response"), fmt)

        expected = _review.csv_bytes(body["values"], items, response)
        got = archive.file(rel)
        if got != expected:
            old = got.decode("utf-8", "replace").splitlines()
            new = expected.decode("utf-8", "replace").splitlines()
            line = next(
                (i for i, (a, b) in enumerate(zip(old, new, strict=False), 1) if a != b),
                min(len(old), len(new)) + 1,
            )
            return Check(
                "reanalysis",
                Status.FAIL,
                f"{rel} differs from the review sample "
                f"rebuilt from review.{name}, the item file and the responses (first at "
                f"line {line}).",
                None,
                rel,
            )
    return None


# ------------------------------------------------------------------------------ comparison

_TEXT_KEYS = frozenset(
    {"warnings", "note", "caution", "error", "reason", "flag", "variance_ci_note"}
)
"""Members whose text is informative only: their presence is compared, not their wording."""


def _close(a: float, b: float, rel: float) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=ABS_TOL)


P_KEYS = frozenset({"p", "p_raw", "p_adjusted", "p_one_sided", "p_exact", "p_chi2", "p_chi2_cc"})
"""Members that are p-values: compared relatively, with no absolute slack (statistics.md)."""
P_LISTS = frozenset({"pvalues", "adjusted"})
"""Members that are lists of p-values."""


def _is_p(path: str) -> bool:
    """Whether ``path`` (``values.a.b[3]``) names a p-value."""
    last = path.rsplit(".", 1)[-1]
    if last.endswith("]"):
        return last.split("[", 1)[0] in P_LISTS
    return last in P_KEYS


def _p_close(a: float, b: float, rel: float) -> bool:
    """Two p-values agree to ``rel`` relative (``|log a - log b| <~ rel``); 0 only equals 0.

    A p-value of 3.4e-87 recorded as 0 differs: an absolute tolerance would hide it.
    """
    if a == b:
        return True
    if a <= 0 or b <= 0 or not (math.isfinite(a) and math.isfinite(b)):
        return False
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)


def _fmt(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, dict | list) else "a " + type(value).__name__


def _first_difference(recorded: Any, new: Any, path: str, rel: float) -> str | None:
    """The first path where ``recorded`` and ``new`` differ, with both values, or ``None``."""
    if isinstance(new, dict):
        if not isinstance(recorded, dict):
            return f"{path}: recorded {_fmt(recorded)}, recomputed an object"
        keys = [k for k in new if not k.startswith("_")]
        for k in sorted(set(recorded) - set(keys)):
            return f"{path}.{k}: recorded {_fmt(recorded[k])}, not recomputed (unexpected member)"
        for k in sorted(keys):
            if k not in recorded:
                return f"{path}.{k}: missing, recomputed {_fmt(new[k])}"
            if k in _TEXT_KEYS:
                continue
            if k == "group" and isinstance(new.get("_group_ok"), list):
                if recorded[k] not in new["_group_ok"]:
                    return f"{path}.{k}: recorded {_fmt(recorded[k])}, recomputed {_fmt(new[k])}"
                continue
            # a variance component's profile-likelihood bound is a root found iteratively by
            # each side (docs/statistics.md): compared at the root finder's precision
            tol = max(rel, LMM_REL_TOL) if k.endswith(("_ci_lower", "_ci_upper")) else rel
            found = _first_difference(recorded[k], new[k], f"{path}.{k}", tol)
            if found:
                return found
        return None
    if isinstance(new, list | tuple):
        if not isinstance(recorded, list) or len(recorded) != len(new):
            return f"{path}: recorded {_fmt(recorded)}, recomputed a list of {len(new)}"
        for i, (x, y) in enumerate(zip(recorded, new, strict=True)):
            found = _first_difference(x, y, f"{path}[{i}]", rel)
            if found:
                return found
        return None
    if isinstance(new, bool) or isinstance(recorded, bool) or new is None or recorded is None:
        same = type(new) is type(recorded) and new == recorded
    elif isinstance(new, int | float) and isinstance(recorded, int | float):
        if _is_p(path):
            same = _p_close(float(recorded), float(new), rel)
        else:
            same = _close(float(recorded), float(new), rel)
    else:
        same = type(new) is type(recorded) and new == recorded
    if same:
        return None
    return f"{path}: recorded {_fmt(recorded)}, recomputed {_fmt(_plain(new))}"


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# ------------------------------------------------------------------------------ reanalysis


def _reanalysis(archive: _Archive) -> tuple[Check, list[str]]:
    """The check and the list of result ids that could only be WARNed."""
    plan = _plan(archive)
    protocol = _protocol(archive)
    results = archive.of("analysis.result")
    if not results:
        raise _Problem("the ledger has no analysis.result event")
    design = plan.get("design")
    iterations = design.get("bootstrap_iterations") if isinstance(design, dict) else None
    scored = len(archive.of("trial.scored"))
    if isinstance(iterations, int) and (
        iterations > MAX_BOOTSTRAP_ITERATIONS or iterations * scored > MAX_BOOTSTRAP_WORK
    ):
        seq = protocol.seq if protocol else None
        raise _Problem(
            f"protocol.locked (seq {seq}) asks for {iterations:,} bootstrap iterations over "
            f"{scored:,} scored trials, more than this verifier recomputes "
            f"({MAX_BOOTSTRAP_ITERATIONS:,} iterations, {MAX_BOOTSTRAP_WORK:,} iterations x "
            "trials)",
            seq,
        )
    ds = _dataset(archive, plan)
    trial_extra = (
        *(f"factor.{f}" for f in ds.factors),
        *(_ddx.METRICS if ds.ddx else ()),
        *(f"covariate.{n}" for n in ds.covariates),
    )
    if ds.variants:  # analysis.md §2: factor.<NAME>, a ddx study's metrics, covariate.<NAME>
        trials_csv = _csv_bytes(ds.trials, (*VARIANT_TRIAL_COLUMNS, *trial_extra))
        item_columns: tuple[str, ...] = VARIANT_ITEM_COLUMNS
    else:
        trials_csv = _csv_bytes(
            ds.trials, (*(MODEL_TRIAL_COLUMNS if ds.models else TRIAL_COLUMNS), *trial_extra)
        )
        item_columns = MODEL_ITEM_COLUMNS if ds.models else ITEM_COLUMNS
    if ds.cloze:  # analysis.md §2: each letter's log-probability and the margin
        item_columns = (*item_columns, "logprobs", "margin")
    items_csv = _csv_bytes(ds.items, item_columns)
    first = archive.at(results[0])
    addresses: dict[str, str] = {}
    for name, data in (("trials_csv", trials_csv), ("items_csv", items_csv)):
        digest = addresses[name] = _address(archive, first, name, data, _sha(data))
        ref = first.blobs.get(name)
        if ref != digest or _file_sha(archive, f"blobs/{ref}") != digest:
            return Check(
                "reanalysis",
                Status.FAIL,
                f"analysis.result seq {first.seq}: the {name} blob differs from the dataset "
                "rebuilt from the trial.scored events.",
                first.seq,
                f"blobs/{ref}",
            ), []
        where = f"analysis/{name.replace('_', '.')}"
        if where in archive.files.files and _file_sha(archive, where) != _sha(data):
            return Check(
                "reanalysis", Status.FAIL, f"{where} differs from the rebuilt dataset.", None, where
            ), []
    inputs = {
        "scores_sha256": ds.scores_sha256,
        "trials_csv_sha256": addresses["trials_csv"],
        "items_csv_sha256": addresses["items_csv"],
        "protocol_seq": protocol.seq if protocol else None,
    }
    for event in results:
        archive.at(event)
        if event.body.get("inputs") != inputs:
            diff = _first_difference(event.body.get("inputs"), inputs, "inputs", 0.0)
            return Check(
                "reanalysis",
                Status.FAIL,
                f"{event.body.get('id')} (seq {event.seq}) {diff}.",
                event.seq,
            ), []
    recorded_values = {
        str(e.body.get("id")): e.body.get("values") for e in results if isinstance(e.body, dict)
    }
    recomputed = _recompute(ds, plan, _phases(archive), recorded_values)
    parser = str((plan.get("response") or {}).get("parser", ""))
    if parser.startswith("judge:"):  # analysis.md §8
        recomputed.append(_judge_agreement(archive, plan, parser.split(":", 1)[1]))
    recomputed += _human_tables(archive, plan, recomputed)  # analysis.md §10
    if ds.covariates:  # analysis.md §11
        recomputed.append(_covariates_result(ds, plan))
    responded = {e.seq: e for e in archive.of("trial.responded")}
    copies_withheld: str | None = None  # a public archive's withheld response (privacy.md §6)
    try:
        found_copies = _copies.copies(
            ds.trials,
            lambda seq: (
                archive.event_blob(responded[seq], "response"),
                str(responded[seq].body.get("format", "")),
            ),
            ds.models,
        )
    except Withheld as withheld:  # every other result is still recomputed from the scores
        copies_withheld, found_copies = withheld.rel, None
        signed = [e for e in results if e.body.get("id") == "descriptive.identical_responses"]
        if signed:  # taken as signed: its responses cannot be compared here
            recomputed.append(
                _Result(
                    "descriptive.identical_responses",
                    values=dict(signed[0].body.get("values") or {}),
                )
            )
    if found_copies is not None:  # analysis.md §3: identical responses (pseudo-replication)
        recomputed.append(_Result("descriptive.identical_responses", values=found_copies))
    recorded_ids = [e.body.get("id") for e in results]
    new_ids = [r.id for r in recomputed]
    if recorded_ids != new_ids:
        return Check(
            "reanalysis",
            Status.FAIL,
            f"the analysis.result ids are {recorded_ids}; the plan gives {new_ids}.",
            results[0].seq,
        ), []
    test_of = {
        str(h.get("id")): h.get("test") for h in plan.get("hypotheses") or [] if isinstance(h, dict)
    }
    for event, r in zip(results, recomputed, strict=True):
        body = archive.at(event).body
        rel = REL_TOL
        if r.hypothesis and test_of.get(r.hypothesis.split("@", 1)[0]) in ("gee", "factorial"):
            rel = GEE_REL_TOL  # statsmodels stops at its own tolerance (mcq-statistics.md §11)
        problem: str | None = None
        reml_problem = r.values.get("_reml_problem")
        if isinstance(reml_problem, str):
            problem = f"values: {reml_problem} (the verifier's own REML check, numpy only)"
        elif body.get("status") != r.status:
            problem = f"status: recorded {_fmt(body.get('status'))}, recomputed {_fmt(r.status)}"
        elif body.get("hypothesis") != r.hypothesis:
            problem = f"hypothesis: recorded {_fmt(body.get('hypothesis'))}"
        elif body.get("verdict") != r.verdict:
            problem = f"verdict: recorded {_fmt(body.get('verdict'))}, recomputed {_fmt(r.verdict)}"
        else:
            problem = _first_difference(body.get("values"), r.values, "values", rel)
            if problem is None:
                if r.decided_by is None or body.get("decided_by") is None:
                    if r.decided_by != body.get("decided_by"):
                        problem = f"decided_by: recorded {_fmt(body.get('decided_by'))}"
                else:
                    problem = _first_difference(
                        body.get("decided_by"), r.decided_by, "decided_by", rel
                    )
        if problem:
            return Check("reanalysis", Status.FAIL, f"{r.id} {problem}.", event.seq, r.id), []
    archive.current = None
    try:
        listed = json.loads(archive.file("analysis/results.json"))
    except _Problem as exc:
        return Check("reanalysis", Status.FAIL, f"{exc.reason}.", None, "analysis/results.json"), []
    except (ValueError, RecursionError) as exc:
        return Check(
            "reanalysis",
            Status.FAIL,
            f"cannot read analysis/results.json: {exc}.",
            None,
            "analysis/results.json",
        ), []
    expected = [e.body | {"seq": e.seq} for e in results]
    if listed != expected:
        return Check(
            "reanalysis",
            Status.FAIL,
            "analysis/results.json is not the analysis.result bodies with their seq.",
            None,
            "analysis/results.json",
        ), []
    review_problem = _review_files(archive, plan, results)
    if review_problem is not None:
        archive.current = None
        return review_problem, []
    posthoc = archive.of(POSTHOC_KIND)
    for event in posthoc:
        failed = _posthoc_problem(archive, event, ds, plan, inputs, results[-1].seq)
        if failed is not None:
            archive.current = None
            return Check(
                "reanalysis",
                Status.FAIL,
                f"{event.body.get('id')} (seq {event.seq}, post hoc) {failed}.",
                event.seq,
                str(event.body.get("id")),
            ), []
    archive.current = None
    extra = (
        (
            f", and {len(posthoc)} post-hoc analysis(es) declared after them (labelled post "
            "hoc, no verdict)"
        )
        if posthoc
        else ""
    )
    passed = (
        f"The dataset and all {len(results)} analysis results{extra} were recomputed and match "
        f"(relative tolerance {REL_TOL:g}, p-values relative only, absolute {ABS_TOL:g}; every "
        "recorded mixed model is a maximum of the verifier's own REML likelihood)."
    )
    if copies_withheld is not None:
        return Check(
            "reanalysis",
            Status.LIMITED,
            f"{passed[:-1]}, except the identical "
            "responses (descriptive.identical_responses: taken as signed, or absent as "
            f"signed): not re-derived, it needs {copies_withheld}, which the public "
            "archive withholds.",
            None,
            copies_withheld,
        ), []
    if found_copies is not None:  # analysis.md §3: numbers right, but copies counted as new
        said = _copies.summary(found_copies)
        return Check(
            "reanalysis",
            Status.WARN,
            f"{passed[:-1]}; but {said}.",
            None,
            "descriptive.identical_responses",
        ), []
    return Check("reanalysis", Status.PASS, passed), []


POSTHOC_KIND = "analysis.posthoc"
POSTHOC_TESTS = ("lmm", "paired-t", "independent-t", "bootstrap")
"""analysis.md §6: the kinds of post-hoc analysis (the body's ``test``)."""


def _posthoc_values(
    ds: _Dataset, plan: dict[str, Any], a: str, b: str, test: str
) -> dict[str, Any]:
    """analysis.md §6: a post-hoc t-test or bootstrap of a − b, with its ``contrast`` summary."""
    design = plan["design"]
    summary: dict[str, Any] = {"a": a, "b": b, "sides": "two-sided"}
    if test == "bootstrap":
        values = st.bootstrap_diff(
            *_pair_accuracies(ds, a, b),
            int(design["bootstrap_iterations"]),
            design["bootstrap_seed"],
        )
        summary.update(
            estimate=values["estimate"],
            lower=values["lower"],
            upper=values["upper"],
            p=None,
            conf=values["conf"],
        )
        return {**values, "contrast": summary}
    dropped: list[dict[str, Any]] = []
    if test == "paired-t":
        xs, ys, dropped = _pairs_by_trial(ds, a, b)
        res = st.paired_t(xs, ys)
    else:
        res = st.independent_t(*_pair_accuracies(ds, a, b))
    values = {**res, "estimate": res["difference"]}
    if test == "paired-t":
        values |= {
            "pairing": ["stimulus", "rep"],
            "n_dropped": len(dropped),
            "dropped_pairs": dropped,
        }
    summary.update(
        estimate=res["difference"],
        lower=res["ci_lower"],
        upper=res["ci_upper"],
        p=res["p"],
        t=res["t"],
        df=res["df"],
        conf=0.95,
    )
    return {**values, "contrast": summary}


POSTHOC_KEYS = frozenset(
    {
        "id",
        "title",
        "label",
        "hypothesis",
        "test",
        "status",
        "values",
        "verdict",
        "decided_by",
        "error",
        "declared",
        "inputs",
    }
)


def _posthoc_problem(
    archive: _Archive,
    event: _Event,
    ds: _Dataset,
    plan: dict[str, Any],
    inputs: dict[str, Any],
    last_result: int,
) -> str | None:
    """analysis.md §6: what is wrong with one analysis.posthoc event, or None."""
    body = archive.at(event).body
    if not isinstance(body, dict) or set(body) != POSTHOC_KEYS:
        return "has not the members of a post-hoc result"
    declared = body.get("declared")
    if not isinstance(declared, dict):
        return "has no declaration"
    if (
        body.get("label") != "post hoc"
        or body.get("hypothesis") is not None
        or body.get("verdict") is not None
        or body.get("decided_by") is not None
    ):
        return "is not labelled post hoc with no hypothesis and no verdict"
    if event.seq < last_result or declared.get("after_seq") != last_result:
        return (
            f"must follow the registered analysis (last analysis.result at seq "
            f"{last_result}); declared after_seq {_fmt(declared.get('after_seq'))}"
        )
    if body.get("inputs") != inputs:
        return str(_first_difference(body.get("inputs"), inputs, "inputs", 0.0))
    contrast, arms = declared.get("contrast"), declared.get("arms")
    group, test, model = declared.get("random_intercept"), body.get("test"), declared.get("model")
    if test not in POSTHOC_TESTS:
        return f"has test {_fmt(test)}, not one of {', '.join(POSTHOC_TESTS)}"
    if (
        not isinstance(contrast, list)
        or len(contrast) != 2
        or not (model is None or model in ds.models)
        or (
            test == "lmm"
            and (
                group not in ("stimulus", "source") or not (arms is None or isinstance(arms, list))
            )
        )
        or (test != "lmm" and (group is not None or arms is not None))
    ):
        return "declares no valid contrast, random intercept, arms or model for its test"
    name = str(body.get("id")).removeprefix("posthoc.")
    if body.get("id") != f"posthoc.{name}" or not name:
        return "has an id that is not posthoc.<name>"
    if [e.body.get("id") for e in archive.of(POSTHOC_KIND)].count(body.get("id")) != 1:
        return "repeats the id of another post-hoc analysis"
    if model is not None:
        ds = ds.for_model(str(model))
    variant = declared.get("variant")  # analysis.md §6: absent (older events) means null
    compared = (
        [str(x) for x in contrast]
        if test != "lmm"
        else ([str(x) for x in arms] if isinstance(arms, list) else sorted(plan.get("arms") or {}))
    )
    ran = {arm: {str(t["variant"]) for t in ds.trials if t["arm"] == arm} for arm in compared}
    if variant is not None:
        if (
            not isinstance(variant, str)
            or not ds.variants
            or not all(variant in v for v in ran.values())
        ):
            return f"declares variant {_fmt(variant)}, which not every arm compared ran"
        ds = ds.for_variant(variant)
    elif len({frozenset(v) for v in ran.values() if v}) > 1:
        return (
            "compares arms that ran different variants ("
            + "; ".join(f"{arm}: {', '.join(sorted(v))}" for arm, v in ran.items() if v)
            + ") without choosing one"
        )
    if test != "lmm":
        a, b = str(contrast[0]), str(contrast[1])
        recomputed = _guard(_Result("posthoc"), lambda: _posthoc_values(ds, plan, a, b, test))
        if body.get("status") != recomputed.status:
            return (
                f"status: recorded {_fmt(body.get('status'))}, recomputed {_fmt(recomputed.status)}"
            )
        if recomputed.status != "ok":
            return None
        return _first_difference(body.get("values"), recomputed.values, "values", REL_TOL)
    sub = replace(ds, sources=_sources(archive)) if group == "source" else ds
    sub_plan = {
        **plan,
        "analysis": {**(plan.get("analysis") or {}), "random_intercept": group, "model_arms": arms},
    }
    recorded = body.get("values") if isinstance(body.get("values"), dict) else None
    fitted, fit = _model(sub, sub_plan, recorded=recorded)
    status, values = fitted.status, dict(fitted.values)
    if fit is not None:
        try:
            values["contrast"] = st.contrast(fit, str(contrast[0]), str(contrast[1]), "two-sided")
        except st.StatError:
            status = "failed"
    if isinstance(values.get("_reml_problem"), str):
        return f"values: {values['_reml_problem']} (the verifier's own REML check, numpy only)"
    if body.get("status") != status:
        return f"status: recorded {_fmt(body.get('status'))}, recomputed {_fmt(status)}"
    if status != "ok":
        return None
    return _first_difference(body.get("values"), values, "values", REL_TOL)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _address(archive: _Archive, event: _Event, name: str, content: bytes, plain: str) -> str:
    """The address re-derived ``content`` has as ``event``'s blob ``name`` (``plain``: unsealed).

    A sealed blob (``docs/ledger-format.md`` §6.1) is addressed with the salt stored with it; a
    blob that cannot be read keeps the plain hash (the comparison then fails, naming it).
    """
    ref = event.blobs.get(name)
    if not isinstance(ref, str) or not is_hex64(ref):
        return plain
    try:
        stored = archive.stored(ref, event.seq)
    except _Problem:
        return plain
    return _sealed.address_for(content, stored)


def _file_sha(archive: _Archive, rel: str) -> str | None:
    """SHA-256 of the archive file ``rel`` (the walk's, else read in blocks), or ``None``."""
    files = archive.files
    if rel in files.hashes:
        return files.hashes[rel]
    try:
        with files.open(rel) as fh:
            h = hashlib.sha256()
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except (ArchiveFileError, OSError):
        return None
    return h.hexdigest()


def _run(name: str, archive: _Archive | None, error: _Problem | None, fn: Any) -> Check:
    if error is not None or archive is None:
        assert error is not None
        return Check(name, Status.FAIL, error.reason, error.seq, error.where)
    archive.current = None
    try:
        result = fn(archive)
    except _Problem as exc:
        return Check(name, Status.FAIL, exc.reason.rstrip(".") + ".", exc.seq, exc.where)
    except Withheld as withheld:  # a public archive (docs/privacy.md): each check on its own
        return Check(
            name,
            Status.LIMITED,
            f"not re-derived: it needs {withheld.rel}, which the public archive withholds",
            where=withheld.rel,
        )
    except Exception as exc:  # malformed input must end as a FAIL naming its place
        text = f"{type(exc).__name__}: {exc}"
        text = text if len(text) <= 200 else text[:197] + "..."
        event = archive.current
        if event is None:
            return Check(name, Status.FAIL, f"{name} stopped by an unexpected error: {text}.")
        where = line_where(event.seq)
        return Check(
            name,
            Status.FAIL,
            f"{name} stopped by an unexpected error while reading {where} (seq {event.seq}, "
            f"{event.kind}): {text}.",
            event.seq,
            where,
        )
    check: Check = result[0] if isinstance(result, tuple) else result
    return check


def science_checks(
    archive: str | Path,
    *,
    envelopes: Sequence[dict[str, Any] | None] | None = None,
    files: ArchiveFiles | None = None,
    unkept: int | None = None,
    plan: Any = None,
) -> list[Check]:
    """Run the ``rescore`` and ``reanalysis`` checks on an exported archive directory.

    ``plan`` (:func:`verify._plan.plan_check`, handed in by the caller: that module builds on
    this one) runs the ``plan`` check when the archive locked ``plan/plan.json``.

    ``envelopes`` (one per line of ``ledger/events.jsonl``, ``None`` for a line the strict
    parse refused or whose envelope the ledger checks did not keep: ``unkept`` is the first
    of those) and ``files`` (the archive's walk and reader) are those the other checks used,
    shared, never copied; without them the archive is walked and its events parsed here, the
    same way.
    """
    loaded: _Archive | None = None
    error: _Problem | None = None
    try:
        loaded = _load(Path(archive), envelopes, files, unkept)
    except _Problem as exc:
        error = exc
    checks = [
        _run("rescore", loaded, error, _rescore),
        _run("reanalysis", loaded, error, _reanalysis),
    ]
    if (
        plan is not None
        and loaded is not None
        and any(e.body.get("path") == "plan/plan.json" for e in loaded.of("artifact.locked"))
    ):  # docs/planning.md §7
        checks.append(_run("plan", loaded, None, plan))
    return checks
