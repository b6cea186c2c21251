""":func:`load`: a study folder or an exported archive as pandas DataFrames.

Like ``inspect_ai.analysis.samples_df`` for Inspect logs: one call, one row per thing, plain
column names. Every value is read from the signed events (through :mod:`runner._recorded`, so a
study's ``ledger.db`` and its archive's ``ledger/events.jsonl`` give the same frames), and the
attempt and score rows are the very rows the archive's ``trials/attempts.csv`` and
``scores/scores.csv`` are written from (:mod:`analysis._rows`). ``docs/library.md`` lists every
column.

Blinding. Until ``blinding.revealed`` is recorded, the frames keep the blind the scorer keeps:
the columns that name a trial's arm or point at its prompt (``trial``, ``arm`` and, in
``attempts``, ``request_sha256``) are empty (``None``), and a trial is known by its place in
the locked schedule (``position``), its stimulus and replicate, and its arm code once it is
scored (codes come from ``trial.scored``; the loader never reads the blinding secret). Pass
``break_blind=True`` to fill them anyway: an explicit, unrecorded look at the arms, for example
for safety monitoring. An exported archive is always unblinded (``ledger export`` needs the
analysis, which needs the reveal). The ledger itself is not hidden: ``ledger show`` and
``ledger.Ledger`` read every event; the blind is a discipline of the tools, as in scoring.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from analysis._errors import AnalysisError
from analysis._parse import ParseError, response_text
from analysis._rows import (
    ATTEMPT_COLUMNS,
    SCORE_COLUMNS,
    Attempt,
    attempts,
    schedule_ids,
    score_row,
    split_trial,
    trial_variant,
)
from analysis._scoring import unwrap_batch
from ledger import LedgerError
from runner import EVENTS_FILE, Recorded, RecordedEvent, layout, open_recorded

TRIAL_COLUMNS = (
    "position",
    "trial",
    "arm",
    "arm_code",
    "model",
    "stimulus",
    "rep",
    "outcome",
    "attempts",
    "outcome_seq",
    "response_seq",
    "variant",
)
ATTEMPTS_COLUMNS = (
    "request_seq",
    "position",
    "trial",
    "arm",
    "arm_code",
    "stimulus",
    "rep",
    "attempt",
    "session",
    "backend",
    "simulated",
    "requested_at",
    "request_sha256",
    "outcome",
    "outcome_seq",
    "outcome_at",
    "final",
    "response_seq",
    "response_sha256",
    "response_text",
    "http_status",
    "stop_reason",
    "model",
    "format",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "latency_ms",
    "error_type",
    "error",
)
SCORES_COLUMNS = (
    "scored_seq",
    "response_seq",
    "trial",
    "arm",
    "arm_code",
    "stimulus",
    "rep",
    "parser",
    "status",
    "n_items",
    "n_answered",
    "n_correct",
    "accuracy",
    "scores_sha256",
    "problems",
    "variant",
)
ITEMS_COLUMNS = (
    "scored_seq",
    "response_seq",
    "trial",
    "arm",
    "arm_code",
    "stimulus",
    "rep",
    "row",
    "position",
    "truth",
    "answer",
    "answered",
    "correct",
    "variant",
    "order",
    "answer_original",
    "logprobs",
    "margin",
)
EVENTS_COLUMNS = ("seq", "time", "kind", "actor", "blobs")

# Body fields the frames read, checked before anything is derived, so a damaged record gives
# one message naming its seq and field rather than a KeyError.
_REQUIRED: dict[str, tuple[str, ...]] = {
    "trial.requested": ("trial", "arm", "stimulus", "rep", "position", "attempt", "request_sha256"),
    "trial.responded": ("request_seq",),
    "trial.failed": ("request_seq",),
    "trial.scored": (
        "response_seq",
        "arm_code",
        "stimulus",
        "status",
        "n_items",
        "n_answered",
        "n_correct",
        "scores_sha256",
    ),
    "blinding.revealed": ("arm_codes",),
}
_REQUIRED_BLOBS = {"protocol.locked": "schedule", "trial.scored": "scores"}
_BLINDED = ("trial", "arm")
_ArmCode = Callable[[str, str], str | None]  # (trial id, arm) -> its arm code, if known
_INTS = (
    "outcome_seq",
    "response_seq",
    "session",
    "http_status",
    "input_tokens",
    "output_tokens",
    "latency_ms",
    "row",
    "position",
)


@dataclass(frozen=True, eq=False, repr=False)
class StudyFrames:
    """A study's records as pandas DataFrames (columns: ``docs/library.md``).

    ``trials``: one row per scheduled trial, in schedule order. ``attempts``: one row per
    ``trial.requested``, with its outcome and the response text. ``scores``: one row per
    ``trial.scored``. ``items``: one row per scored item (glyph). ``events``: the timeline,
    one row per event (seq, time, kind, actor, number of blobs). ``blinded`` says whether the
    arm columns were left empty (see :func:`load`).
    """

    path: Path
    source: Literal["study", "archive"]
    study: str
    blinded: bool
    trials: pd.DataFrame
    attempts: pd.DataFrame
    scores: pd.DataFrame
    items: pd.DataFrame
    events: pd.DataFrame

    def __repr__(self) -> str:
        """One line: where from, whether blinded, and the size of each frame."""
        sizes = ", ".join(
            f"{name}={len(getattr(self, name))} rows"
            for name in ("trials", "attempts", "scores", "items", "events")
        )
        return (
            f"StudyFrames({self.source} {str(self.path)!r}, study={self.study!r}, "
            f"blinded={self.blinded}, {sizes})"
        )


def load(path: str | os.PathLike[str], *, break_blind: bool = False) -> StudyFrames:
    """Read the study folder or exported archive at ``path`` into :class:`StudyFrames`.

    Before ``blinding.revealed`` the arm columns stay empty unless ``break_blind`` is True
    (module docstring). Reads only; nothing is appended, and nothing is verified: run
    :func:`verify.require_valid` on an archive first when its origin matters. Raises
    :class:`AnalysisError`, naming the path, for a path that is neither a study folder (with
    ``ledger.db``) nor an archive (with ``ledger/events.jsonl``), a study not locked yet, and an
    event or blob that cannot be read (naming its seq and field).
    """
    root = Path(path)
    kind = layout(root)
    if kind not in ("study", "archive"):
        if not root.exists():
            problem = "does not exist"
        elif root.is_file():
            problem = "is a file"
        else:
            problem = f"holds neither ledger.db nor {EVENTS_FILE}"
        raise AnalysisError(
            f"{root}: {problem}; analysis.load reads a study folder (with ledger.db) or an "
            f"archive written by 'ledger export' (with {EVENTS_FILE})"
        )
    try:
        with open_recorded(root) as recorded:
            events = list(recorded.events())
            return _Builder(root, kind, recorded, events, break_blind).build()
    except AnalysisError:
        raise
    except LedgerError as exc:  # the reader's message names the file, line or seq already
        raise AnalysisError(str(exc)) from exc


def _frame(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> pd.DataFrame:
    df = pd.DataFrame(list(rows), columns=list(columns))
    for name in columns:
        if name in _INTS:
            df[name] = df[name].astype("Int64")
        elif name == "cost_usd":
            df[name] = df[name].astype("float64")
        elif name in ("requested_at", "outcome_at", "time"):
            df[name] = pd.to_datetime(df[name], utc=True, format="ISO8601")
    return df


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Builder:
    def __init__(
        self,
        root: Path,
        kind: Literal["study", "archive"],
        recorded: Recorded,
        events: list[RecordedEvent],
        break_blind: bool,
    ) -> None:
        self.root = root
        self.kind = kind
        self.recorded = recorded
        self.events = events
        self.where = root / EVENTS_FILE if kind == "archive" else recorded.source
        self.break_blind = break_blind

    def fail(self, event: RecordedEvent, problem: str) -> AnalysisError:
        return AnalysisError(f"{self.where}: seq {event.seq} ({event.kind}): {problem}")

    def check(self) -> None:
        for event in self.events:
            for name in _REQUIRED.get(event.kind, ()):
                if name not in event.body:
                    raise self.fail(event, f"no {name!r} in its body")
            blob = _REQUIRED_BLOBS.get(event.kind)
            if blob is not None and blob not in event.blobs:
                raise self.fail(event, f"no {blob!r} blob")

    def first(self, kind: str) -> RecordedEvent | None:
        return next((e for e in self.events if e.kind == kind), None)

    def build(self) -> StudyFrames:
        self.check()
        protocol = self.first("protocol.locked")
        if protocol is None:
            raise AnalysisError(
                f"{self.where}: the study is not locked yet (no protocol.locked); nothing to load"
            )
        revealed = self.first("blinding.revealed")
        blinded = revealed is None and not self.break_blind
        codes: dict[str, str] = dict(revealed.body["arm_codes"]) if revealed else {}
        order = schedule_ids(self.recorded.blob(protocol.blobs["schedule"]))
        for number, trial in enumerate(order, 1):
            parts = trial.split("|")
            if len(parts) not in (3, 4, 5) or not parts[-1].isdigit():
                raise self.fail(
                    protocol,
                    f"schedule line {number} is not a trial id arm|stimulus|rep, "
                    "arm|model|stimulus|rep or arm|model|stimulus|variant|rep",
                )
        tried = attempts(self.events)
        by_response = {
            a.outcome.seq: a
            for a in tried
            if a.outcome is not None and a.outcome.kind == "trial.responded"
        }
        scored = [e for e in self.events if e.kind == "trial.scored"]
        scored_attempt: dict[int, Attempt] = {}
        scored_codes: dict[str, str] = {}  # trial id -> the arm code its trial.scored carries
        for event in scored:
            attempt = by_response.get(event.body["response_seq"])
            if attempt is None:
                raise self.fail(
                    event, f"response_seq {event.body['response_seq']} is not a trial.responded"
                )
            scored_attempt[event.seq] = attempt
            scored_codes[attempt.request.body["trial"]] = event.body["arm_code"]

        def arm_code(trial: str, arm: str) -> str | None:
            return codes.get(arm) or scored_codes.get(trial)

        def blind(row: dict[str, Any]) -> dict[str, Any]:
            if blinded:
                for name in _BLINDED:
                    row[name] = None
                if "request_sha256" in row:
                    row["request_sha256"] = None
            return row

        trials = [blind(row) for row in self.trial_rows(order, tried, arm_code)]
        attempt_rows = [blind(self.attempt_row(a, arm_code)) for a in tried]
        score_rows: list[dict[str, Any]] = []
        item_rows: list[dict[str, Any]] = []
        for event in scored:
            request = scored_attempt[event.seq].request.body
            ident = {
                "trial": request["trial"],
                "arm": request["arm"],
                "rep": _int(request["rep"]),
            }
            score_rows.append(blind(self.score_row(event, ident)))
            item_rows.extend(blind(row) for row in self.item_rows(event, ident))
        timeline = [
            {"seq": e.seq, "time": e.time, "kind": e.kind, "actor": e.actor, "blobs": len(e.blobs)}
            for e in self.events
        ]
        return StudyFrames(
            path=self.root,
            source=self.kind,
            study=str(protocol.body.get("study", "")),
            blinded=blinded,
            trials=_frame(trials, TRIAL_COLUMNS),
            attempts=_frame(attempt_rows, ATTEMPTS_COLUMNS),
            scores=_frame(score_rows, SCORES_COLUMNS),
            items=_frame(item_rows, ITEMS_COLUMNS),
            events=_frame(timeline, EVENTS_COLUMNS),
        )

    @staticmethod
    def trial_rows(
        order: list[str], tried: list[Attempt], arm_code: _ArmCode
    ) -> list[dict[str, Any]]:
        per_trial: dict[str, list[Attempt]] = {}
        for attempt in tried:
            per_trial.setdefault(attempt.request.body["trial"], []).append(attempt)
        rows = []
        for position, trial in enumerate(order, 1):
            arm, model, stimulus, rep = split_trial(trial)
            mine = per_trial.get(trial, [])
            finals = {a.outcome_kind: a.outcome for a in mine if a.final}
            responded, given_up = finals.get("responded"), finals.get("failed")
            final = responded or given_up
            rows.append(
                {
                    "position": position,
                    "trial": trial,
                    "arm": arm,
                    "arm_code": arm_code(trial, arm),
                    "model": model,
                    "stimulus": stimulus,
                    "rep": int(rep),
                    "outcome": "responded" if responded else "given_up" if given_up else "pending",
                    "attempts": len(mine),
                    "outcome_seq": final.seq if final else None,
                    "response_seq": responded.seq if responded else None,
                    "variant": trial_variant(trial),
                }
            )
        return rows

    def attempt_row(self, attempt: Attempt, arm_code: _ArmCode) -> dict[str, Any]:
        row: dict[str, Any] = dict(zip(ATTEMPT_COLUMNS, attempt.row(), strict=True))
        request, out = attempt.request.body, attempt.outcome
        body = out.body if out is not None else {}
        responded = out is not None and out.kind == "trial.responded"
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        cost = body.get("cost_usd")
        row.update(
            {
                "arm": request["arm"],
                "arm_code": arm_code(request["trial"], request["arm"]),
                "stimulus": request["stimulus"],
                "rep": _int(request["rep"]),
                "session": _int(request.get("session")),
                "backend": request.get("backend"),
                "simulated": request.get("simulated"),
                "requested_at": attempt.request.time,
                "outcome_at": out.time if out is not None else None,
                "response_seq": out.seq if responded and out is not None else None,
                "response_text": self.text(out) if responded and out is not None else None,
                "http_status": _int(body.get("http_status")),
                "stop_reason": body.get("stop_reason"),
                "model": body.get("model"),
                "format": body.get("format") if responded else None,
                "input_tokens": _int(usage.get("input_tokens", usage.get("prompt_tokens"))),
                "output_tokens": _int(usage.get("output_tokens", usage.get("completion_tokens"))),
                "cost_usd": cost if isinstance(cost, int | float) else None,
                "latency_ms": _int(body.get("latency_ms")),
                "error": body.get("message") if out is not None and not responded else None,
            }
        )
        return row

    def text(self, out: RecordedEvent) -> str | None:
        """The response's text as the scorer reads it; None if the body has none to read."""
        if "response" not in out.blobs:
            raise self.fail(out, "no 'response' blob")
        raw = self.recorded.blob(out.blobs["response"])
        wire_format = str(out.body.get("format", "anthropic-messages"))
        try:
            return response_text(*unwrap_batch(raw, wire_format))
        except ParseError:
            return None

    @staticmethod
    def score_row(event: RecordedEvent, ident: dict[str, Any]) -> dict[str, Any]:
        row: dict[str, Any] = dict(zip(SCORE_COLUMNS, score_row(event), strict=True))
        n_items, n_correct = row["n_items"], row["n_correct"]
        row.update(ident)
        row["parser"] = event.body.get("parser")
        row["accuracy"] = n_correct / n_items if n_items else math.nan
        row["problems"] = list(event.body.get("problems", []))
        row["variant"] = event.body.get("variant")
        return row

    def item_rows(self, event: RecordedEvent, ident: dict[str, Any]) -> list[dict[str, Any]]:
        data = self.recorded.blob(event.blobs["scores"])
        try:
            items = json.loads(data)
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise ValueError("not a list of objects")
        except ValueError as exc:
            raise self.fail(event, f"blob 'scores' is not a JSON list of items ({exc})") from None
        rows = []
        order = event.body.get("order")
        for item in items:
            missing = [k for k in ("truth", "answer", "answered", "correct") if k not in item]
            if missing:
                raise self.fail(event, f"an item in blob 'scores' has no {missing[0]!r}")
            rows.append(
                {
                    "scored_seq": event.seq,
                    "response_seq": event.body["response_seq"],
                    **ident,
                    "arm_code": event.body["arm_code"],
                    "stimulus": event.body["stimulus"],
                    "row": item.get("row"),
                    "position": item.get("position"),
                    "truth": item["truth"],
                    "answer": item["answer"],
                    "answered": item["answered"],
                    "correct": item["correct"],
                    "variant": event.body.get("variant"),
                    "order": order,
                    "answer_original": _original(order, item["answer"]),
                    "logprobs": item.get("logprobs"),
                    "margin": item.get("margin"),
                }
            )
        return rows


def _original(order: Any, label: Any) -> Any:
    """A permuted trial's answer mapped back to the original options (``docs/variants.md``)."""
    if not isinstance(order, str) or not isinstance(label, str) or len(label) != 1:
        return label
    index = ord(label) - ord("A")
    return order[index] if 0 <= index < len(order) else label
