"""The ``rescore`` check: every response re-extracted, re-parsed and re-scored (scoring.md).

Part of the science checks (:mod:`verify._science`); imports nothing from ``ledger``,
``runner`` or ``analysis``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import rfc8785

from verify import _ddx
from verify._parsers import score_body
from verify._prompts import PromptError
from verify._recompute.archive import (
    TUMBLING_E,
    _address,
    _Archive,
    _Event,
    _item_file,
    _locked_bytes,
    _plan,
    _Problem,
    _truth,
    _variant_truth,
)
from verify._report import Check, Status
from verify._rescore import (
    Scored,
    Truth,
    item_bytes,
)
from verify._variants import VariantError


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


class _Mismatch(Exception):
    """A trial.scored that does not re-score: what differs."""


@dataclass
class _Rescoring:
    """What re-scoring reads once: the locked response settings, truth and derived records."""

    archive: _Archive
    parser: str
    letters: str
    mode: str
    truth: dict[str, Truth]
    varied: Callable[[str, str], tuple[str, str | None]] | None
    responded: dict[int, _Event]
    judged: dict[str, dict[str, Any] | None] | None
    ddx: dict[str, dict[str, Any] | None] | None

    @classmethod
    def of(cls, archive: _Archive, plan: dict[str, Any]) -> _Rescoring:
        locked = plan.get("response") or {}
        parser = str(locked.get("parser", TUMBLING_E))
        letters = str(locked.get("letters") or "ABCD")
        mode = str(locked.get("mode") or "exactly-one")
        truth = _truth(archive, locked)
        varied = _variant_truth(archive) if plan.get("variants") is not None else None
        responded = {e.seq: e for e in archive.of("trial.responded")}
        judged = _judged(archive, plan, parser)
        ddx = _ddx_scored(archive, plan) if parser == "ddx" else None
        return cls(archive, parser, letters, mode, truth, varied, responded, judged, ddx)

    def response(self, b: dict[str, Any]) -> _Event:
        rseq = b.get("response_seq")
        if not isinstance(rseq, int) or rseq not in self.responded:
            raise _Mismatch(f"response_seq {rseq!r} is not a trial.responded")
        return self.responded[rseq]

    def answer(self, b: dict[str, Any], request: _Event | None) -> Truth:
        """The truth the trial is scored against (a variant's, re-derived)."""
        stimulus = request.body.get("stimulus") if request is not None else None
        if b.get("stimulus") != stimulus:
            raise _Mismatch(f"stimulus {b.get('stimulus')!r}, request {stimulus!r}")
        if b.get("parser") != self.parser:
            raise _Mismatch(f"parser {b.get('parser')!r}, locked {self.parser!r}")
        if stimulus not in self.truth:
            raise _Mismatch(f"stimulus {stimulus!r} is not in the truth table")
        answer: Truth = self.truth[stimulus]
        variant = request.body.get("variant") if request is not None else None
        if b.get("variant") != variant:
            raise _Mismatch(f"variant {b.get('variant')!r}, request {variant!r}")
        if variant is None:
            return answer
        if self.varied is None:
            raise _Mismatch(f"variant {variant!r}, but no variant is locked")
        try:
            answer, order = self.varied(str(stimulus), str(variant))
        except VariantError as exc:
            raise _Mismatch(f"its variant cannot be re-derived: {exc}") from None
        if b.get("order") != order:
            raise _Mismatch(f"order {b.get('order')!r}, re-derived {order!r}")
        return answer

    def ddx_score(self, b: dict[str, Any], trial: Any) -> Scored:
        """scoring.md §12: the recorded steps' decisions score the trial."""
        assert self.ddx is not None
        want = self.ddx.get(str(trial))
        if want is None:
            raise _Mismatch(
                f"the ddx step calls of trial {trial} are not all final, yet it was scored"
            )
        if b.get("ddx") != want["ddx"]:
            raise _Mismatch(f"trial {trial}: " + _ddx.differing(b.get("ddx"), want["ddx"]))
        return Scored(want["status"], 0, 0, 0, want["blob"], want["scores_sha256"])

    def judged_score(self, b: dict[str, Any], trial: Any, answer: Truth) -> Scored:
        """scoring.md §10: the judges' votes score the trial."""
        assert self.judged is not None
        record = self.judged.get(str(trial))
        if record is None:
            raise _Mismatch(
                f"the judge calls of trial {trial} are not all final, yet it was scored"
            )
        if b.get("judge") != record:
            raise _Mismatch(
                f"the judge votes or decision differ from those "
                f"re-derived from the judge responses: recorded "
                f"{b.get('judge')!r}, re-derived {record!r}"
            )
        return _judged_score(record["decision"], str(answer))

    def score(self, b: dict[str, Any], response: _Event, request: _Event | None) -> Scored:
        answer = self.answer(b, request)
        trial = request.body.get("trial") if request is not None else None
        if self.ddx is not None:
            return self.ddx_score(b, trial)
        if self.judged is not None:
            return self.judged_score(b, trial, answer)
        raw = self.archive.event_blob(response, "response")
        fmt = str(response.body.get("format"))
        try:
            return score_body(raw, fmt, self.parser, answer, self.letters, self.mode)
        except (KeyError, ValueError) as exc:
            raise _Mismatch(f"cannot be re-scored: {exc}") from None

    def check(self, event: _Event, b: dict[str, Any], s: Scored) -> None:
        """The recorded counts, scores address and blob against the re-scored ones."""
        diffs = [
            f"{name}: recorded {b.get(name)!r}, recomputed {value!r}"
            for name, value in (
                ("status", s.status),
                ("n_items", s.n_items),
                ("n_answered", s.n_answered),
                ("n_correct", s.n_correct),
                ("scores_sha256", _address(self.archive, event, "scores", s.items, s.sha256)),
            )
            if b.get(name) != value or type(b.get(name)) is bool
        ]
        if not diffs and self.archive.event_blob(event, "scores") != s.items:
            diffs.append("the scores blob differs from the recomputed item bytes")
        if diffs:
            raise _Mismatch("; ".join(diffs))


def _seal_problem(archive: _Archive, scored: list[_Event], parser: str) -> Check | None:
    """scoring.md: the seal's digest over every score, its count and parser."""
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
    return None


def _rescore(archive: _Archive) -> Check:
    plan = _plan(archive)
    run = _Rescoring.of(archive, plan)
    scored = archive.of("trial.scored")
    count: dict[int, int] = {}
    mismatches: list[tuple[int, str]] = []
    for event in scored:
        b = archive.at(event).body
        try:
            response = run.response(b)
            count[response.seq] = count.get(response.seq, 0) + 1
            request = archive.by_seq.get(response.body.get("request_seq", -1))
            run.check(event, b, run.score(b, response, request))
        except _Mismatch as exc:
            mismatches.append((event.seq, str(exc)))
    if mismatches:
        seq, what = mismatches[0]
        more = f" ({len(mismatches) - 1} more trial.scored differ)" if len(mismatches) > 1 else ""
        return Check(
            "rescore", Status.FAIL, f"trial.scored seq {seq} does not re-score: {what}{more}.", seq
        )
    for rseq in run.responded:
        if count.get(rseq, 0) != 1:
            return Check(
                "rescore",
                Status.FAIL,
                f"trial.responded seq {rseq} has {count.get(rseq, 0)} trial.scored events, "
                "not exactly one.",
                rseq,
            )
    sealed = _seal_problem(archive, scored, run.parser)
    if sealed is not None:
        return sealed
    return Check(
        "rescore",
        Status.PASS,
        f"All {len(scored)} responses re-score to their trial.scored events and the seal.",
    )
