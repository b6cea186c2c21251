"""The viewer's index: one small SQLite table per thing the pages list, built from the events.

``ledger view`` pages, filters and sorts trials server-side. The events of a study (its
``ledger.db``, or the PostgreSQL store its ``ledger.store`` names, read through a read-only
connection that never holds a transaction between requests, so ``ledger run`` is never
blocked) or of an archive (``ledger/events.jsonl``, read once, line by line) are projected into
a SQLite file in a temporary directory: one row per trial (keyed by its first
``trial.requested`` seq, the *handle* every URL uses), one per attempt, one per event (kind,
time, leaf hash, and for an archive the line's byte offset). The projection is incremental:
:meth:`ViewIndex.refresh` reads only the events appended since the last call, which is how a
live study shows new trials without a restart. Memory stays flat as the archive grows: nothing
but the current batch of events is held in Python.

Blinding is not decided here: the index keeps every column (arm, trial id) and
:mod:`analysis.view._app` decides which may be shown (``docs/viewer.md``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from analysis._errors import AnalysisError
from analysis._rows import split_trial, trial_variant
from ledger import Ledger, LedgerError, PostgresLocation, RemoteLocation, node_hash
from runner import (
    EVENTS_FILE,
    Recorded,
    StudyError,
    event_lines,
    layout,
    ledger_path,
    open_events,
    parse_line,
)
from runner.steps import reply_text

__all__ = ["FILTERS", "SORTS", "Filter", "ViewIndex"]

_SCHEMA = """
CREATE TABLE trials(
  h INTEGER PRIMARY KEY, trial TEXT UNIQUE, arm TEXT, model TEXT, stimulus TEXT, rep INTEGER,
  position INTEGER, attempts INTEGER DEFAULT 0, status TEXT, last_request_seq INTEGER,
  outcome_seq INTEGER, response_seq INTEGER, scored_seq INTEGER, arm_code TEXT, parse TEXT,
  n_items INTEGER, n_answered INTEGER, n_correct INTEGER, correct TEXT, cost REAL,
  output_tokens INTEGER, latency_ms INTEGER, requested_at TEXT, variant TEXT, judge TEXT,
  response_sha TEXT, preview TEXT, predicted TEXT, key TEXT
);
CREATE INDEX trials_predicted ON trials(predicted, h);
CREATE INDEX trials_response_sha ON trials(response_sha);
CREATE INDEX trials_arm ON trials(arm, h);
CREATE INDEX trials_variant ON trials(variant, h);
CREATE INDEX trials_code ON trials(arm_code, h);
CREATE INDEX trials_stimulus ON trials(stimulus, model, rep);
CREATE INDEX trials_model ON trials(model, h);
CREATE INDEX trials_status ON trials(status, h);
CREATE INDEX trials_parse ON trials(parse, h);
CREATE INDEX trials_correct ON trials(correct, h);
CREATE INDEX trials_judge ON trials(judge, h);
CREATE INDEX trials_response ON trials(response_seq);
CREATE TABLE attempts(
  request_seq INTEGER PRIMARY KEY, h INTEGER, attempt INTEGER, request_sha TEXT,
  outcome_kind TEXT, outcome_seq INTEGER, final INTEGER, response_sha TEXT, format TEXT,
  error_type TEXT, message TEXT, http_status INTEGER, stop_reason TEXT, reported_model TEXT,
  input_tokens INTEGER, output_tokens INTEGER, cost REAL, latency_ms INTEGER,
  requested_at TEXT, outcome_at TEXT
);
CREATE INDEX attempts_h ON attempts(h);
CREATE TABLE items(h INTEGER, row TEXT, position TEXT, truth TEXT, answer TEXT,
                   correct INTEGER);
CREATE INDEX items_h ON items(h);
CREATE TABLE steps(
  request_seq INTEGER PRIMARY KEY, call TEXT, step TEXT, model TEXT, item TEXT, trial TEXT,
  h INTEGER, attempt INTEGER, request_sha TEXT, outcome_kind TEXT, outcome_seq INTEGER,
  final INTEGER, response_sha TEXT, format TEXT, error_type TEXT, message TEXT
);
CREATE INDEX steps_h ON steps(h);
CREATE INDEX steps_item ON steps(item, trial);
CREATE INDEX steps_response_sha ON steps(response_sha);
CREATE TABLE reviews(seq INTEGER PRIMARY KEY, subject INTEGER, sample TEXT, kind TEXT,
                     value TEXT);
CREATE INDEX reviews_subject ON reviews(subject);
CREATE TABLE docs(id INTEGER PRIMARY KEY, sha TEXT UNIQUE);
CREATE VIRTUAL TABLE fts USING fts5(text, content='', tokenize='unicode61');
CREATE TABLE events(seq INTEGER PRIMARY KEY, kind TEXT, time TEXT, leaf BLOB,
                    offset INTEGER, length INTEGER);
CREATE TABLE singles(seq INTEGER PRIMARY KEY, kind TEXT, body TEXT, blobs TEXT);
"""

# Kinds whose whole body the overview reads (few per study): kept as JSON in `singles`.
_SINGLES = (
    "protocol.locked",
    "artifact.locked",
    "protocol.amended",
    "run.started",
    "run.stopped",
    "scoring.sealed",
    "blinding.revealed",
    "analysis.result",
    "analysis.posthoc",
    "export.created",
)
_BATCH = 5000
PREVIEW = 160
"""Characters of a response kept in the index as its preview (and of predicted / key)."""


@dataclass(frozen=True)
class Filter:
    """One filter of the trial table: a query parameter, the index column it selects on.

    ``blind`` filters may be offered before ``blinding.revealed``; the others (the arm) only
    after it. The choices are read from the index (``SELECT DISTINCT``), so a new column (a
    variant, a judge verdict) is one line in :data:`FILTERS` once the index has its column.
    """

    param: str
    column: str
    label: str
    blind: bool = True


FILTERS: tuple[Filter, ...] = (
    Filter("arm", "arm", "arm", blind=False),
    Filter("code", "arm_code", "arm code"),
    Filter("stimulus", "stimulus", "stimulus / item"),
    Filter("model", "model", "model"),
    # arms may run different variant sets (docs/variants.md), so a variant can point to an arm
    Filter("variant", "variant", "variant", blind=False),
    Filter("status", "status", "status"),
    Filter("parse", "parse", "parse status"),
    Filter("correct", "correct", "correct"),
    # docs/scoring.md §10: the judges' decision and whether they agreed, from trial.scored
    # (which names the arm code only, so it is blind)
    Filter("judge", "judge", "judge verdict"),
    # the scorer's reading of the reply and the item's key (docs/viewer.md): blind, as the
    # trial page shows both
    Filter("answer", "predicted", "predicted answer"),
    Filter("key", "key", "key"),
)
"""The trial table's filters, in the order the page shows them."""

SORTS: dict[str, tuple[str, bool]] = {
    # sort key -> (SQL expression, allowed before the reveal)
    "h": ("h", True),
    "stimulus": ("stimulus, model, rep, h", True),
    "model": ("model, h", True),
    "variant": ("variant, h", False),
    "status": ("status, h", True),
    "parse": ("parse, h", True),
    "accuracy": ("CAST(n_correct AS REAL) / NULLIF(n_items, 0), h", True),
    "code": ("arm_code, h", True),
    "rep": ("rep, h", True),
    "attempts": ("attempts, h", True),
    "correct": ("correct, h", True),
    "predicted": ("predicted, h", True),
    "key": ("key, h", True),
    "judge": ("judge, h", True),
    "cost": ("cost, h", True),
    "arm": ("arm, h", False),
    "position": ("position", False),
}
"""Sort keys of the trial table; those marked False name or order by the arm."""


def _judge_verdict(body: dict[str, Any]) -> str | None:
    """The judge filter's value of a ``trial.scored``: the decision and the votes' agreement.

    ``correct (unanimous)``, ``incorrect (split)``, ``undecided (split)``...; None for a trial
    not scored by judges.
    """
    judge = body.get("judge")
    if not isinstance(judge, dict) or not isinstance(judge.get("votes"), list):
        return None
    votes = [v.get("vote") for v in judge["votes"] if isinstance(v, dict)]
    agree = "unanimous" if votes and None not in votes and len(set(votes)) == 1 else "split"
    decision = judge.get("decision")
    return f"{decision if isinstance(decision, str) else 'undecided'} ({agree})"


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class ViewIndex:
    """The index of one study folder or archive; thread-safe (one lock around the connection).

    Open with :meth:`open`; call :meth:`refresh` to read new events (a study) and :meth:`close`
    to delete the temporary index.
    """

    def __init__(self, path: Path, kind: Literal["study", "archive"]) -> None:
        """Use :meth:`open`."""
        self.path = path
        self.kind = kind
        self.lock = threading.RLock()
        self._dir = tempfile.mkdtemp(prefix="ledger-view-")
        self.db = sqlite3.connect(
            os.path.join(self._dir, "index.db"), isolation_level=None, check_same_thread=False
        )
        self.db.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;" + _SCHEMA)
        self.db.row_factory = sqlite3.Row
        self.next_seq = 0
        self._offset = 0  # archive: bytes of events.jsonl read so far
        self.codes: dict[str, str] = {}  # arm -> code, from blinding.revealed
        self._log: Ledger | None = None
        self._archive: Recorded | None = None
        self._tree: _Tree | None = None
        self._default_model: str | None = None
        self._previews: dict[str, str] = {}  # response blob -> preview (indexed already)
        self.source: Path | PostgresLocation | RemoteLocation
        if kind == "study":
            where = ledger_path(path)  # ledger.db, or the PostgreSQL store ledger.store names
            self._log = Ledger.open(where, readonly=True)
            self.source = where
        else:
            self._archive = Recorded(path, "archive")
            self.source = path / EVENTS_FILE

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> ViewIndex:
        """Index the study folder or archive at ``path`` (reads every event once).

        Raises :class:`AnalysisError` naming ``path`` when it is neither, or when its events
        cannot be read (naming the file and line or seq).
        """
        root = Path(path)
        kind = layout(root)
        if kind not in ("study", "archive"):
            if not root.exists():
                problem = "does not exist"
            elif root.is_file():
                problem = "is a file, not a folder"
            else:
                problem = f"holds neither ledger.db, ledger.store nor {EVENTS_FILE}"
            raise AnalysisError(
                f"{root}: {problem}; ledger view shows a study folder (with ledger.db, or "
                "ledger.store naming its PostgreSQL store) or an "
                f"archive written by 'ledger export' (with {EVENTS_FILE})"
            )
        try:
            index = cls(root, kind)
        except (LedgerError, StudyError) as exc:
            raise AnalysisError(str(exc)) from exc
        try:
            index.refresh()
        except BaseException:
            index.close()
            raise
        if index.kind == "archive":  # an archive never grows: its tree is built once, now
            with index.lock:
                index._tree = _Tree(index.db, index.next_seq)
        if index.protocol() is None:
            index.close()
            raise AnalysisError(
                f"{index.source}: the study is not locked yet (no protocol.locked); "
                "run 'ledger lock' first, there is nothing to show"
            )
        return index

    def close(self) -> None:
        """Close the source and delete the temporary index."""
        with self.lock:
            self.db.close()
            if self._log is not None:
                self._log.close()
                self._log = None
            shutil.rmtree(self._dir, ignore_errors=True)

    # ------------------------------------------------------------------ reading events

    def _study_events(self) -> Iterator[tuple[dict[str, Any], bytes, int, int]]:
        assert self._log is not None
        # one statement per batch (autocommit): no read transaction outlives the batch
        while True:
            batch = list(self._log.events(start=self.next_seq, end=self.next_seq + _BATCH))
            for event in batch:
                envelope = {
                    "seq": event.seq,
                    "time": event.time,
                    "kind": event.kind,
                    "body": event.body,
                    "blobs": event.blobs,
                }
                yield envelope, event.leaf_hash, -1, -1
            if len(batch) < _BATCH:
                return

    def _archive_events(self) -> Iterator[tuple[dict[str, Any], bytes, int, int]]:
        file = self.path / EVENTS_FILE
        prefix, suffix = b'{"envelope":', b',"signature":'
        try:
            handle = open_events(file)
        except StudyError as exc:
            raise AnalysisError(str(exc)) from None
        with handle:
            handle.seek(self._offset)
            offset = self._offset
            try:
                for number, raw in event_lines(handle, file, self.next_seq + 1):
                    line = raw.rstrip(b"\n")
                    envelope = parse_line(line, number, file)
                    seq, kind = envelope.get("seq"), envelope.get("kind")
                    if type(seq) is not int or not isinstance(kind, str):
                        raise AnalysisError(
                            f"{file}: line {number} is not an event (seq or kind of the wrong type)"
                        )
                    if not isinstance(envelope.get("body"), dict):
                        raise AnalysisError(
                            f"{file}: line {number} is not an event (body is not an object)"
                        )
                    start = line.find(prefix)
                    end = line.rfind(suffix)
                    canonical = line[start + len(prefix) : end] if start == 0 and end > 0 else line
                    leaf = hashlib.sha256(b"\x00" + canonical).digest()
                    yield envelope, leaf, offset, len(raw)
                    offset += len(raw)
            except AnalysisError:
                raise
            except StudyError as exc:
                raise AnalysisError(str(exc)) from None
            self._offset = offset

    def refresh(self) -> int:
        """Read the events appended since the last call; return how many were read."""
        with self.lock:
            events = self._study_events() if self._log is not None else self._archive_events()
            count = 0
            cur = self.db.cursor()
            cur.execute("BEGIN")
            try:
                for envelope, leaf, offset, length in events:
                    seq = envelope["seq"]
                    if seq != self.next_seq:
                        raise AnalysisError(
                            f"{self.source}: event seq {seq} where seq {self.next_seq} was "
                            "expected (the log is not contiguous)"
                        )
                    self._apply(cur, envelope)
                    cur.execute(
                        "INSERT INTO events VALUES (?,?,?,?,?,?)",
                        (seq, envelope["kind"], envelope.get("time"), leaf, offset, length),
                    )
                    self.next_seq = seq + 1
                    count += 1
                    if count % _BATCH == 0:
                        cur.execute("COMMIT")
                        cur.execute("BEGIN")
                cur.execute("COMMIT")
            except LedgerError as exc:
                cur.execute("COMMIT")  # what was indexed stays, consistent with next_seq
                raise AnalysisError(str(exc)) from exc
            except BaseException:
                cur.execute("COMMIT")
                raise
            return count

    def _apply(self, cur: sqlite3.Cursor, envelope: dict[str, Any]) -> None:
        kind, seq = envelope["kind"], envelope["seq"]
        body: dict[str, Any] = envelope["body"]
        blobs = envelope.get("blobs") or {}
        if kind in _SINGLES:
            cur.execute(
                "INSERT INTO singles VALUES (?,?,?,?)",
                (seq, kind, json.dumps(body), json.dumps(blobs)),
            )
        if kind == "trial.requested":
            self._requested(cur, seq, envelope, body, blobs)
        elif kind in ("trial.responded", "trial.failed"):
            self._outcome(cur, seq, envelope, body, blobs)
        elif kind in ("step.requested", "step.responded", "step.failed"):
            self._step(cur, seq, kind, body, blobs)
        elif kind == "review.recorded":
            cur.execute(
                "INSERT INTO reviews VALUES (?,?,?,?,?)",
                (
                    seq,
                    _int(body.get("subject")),
                    str(body.get("sample")),
                    str(body.get("kind")),
                    json.dumps(body.get("value"))
                    if not isinstance(body.get("value"), str)
                    else body["value"],
                ),
            )
        if kind == "trial.scored":
            self._items(cur, body, blobs)
            n_items, n_correct = _int(body.get("n_items")), _int(body.get("n_correct"))
            correct = None
            if n_items and n_correct is not None:
                correct = "correct" if n_correct == n_items else "incorrect"
            cur.execute(
                "UPDATE trials SET scored_seq=?, arm_code=COALESCE(arm_code, ?), parse=?, "
                "n_items=?, n_answered=?, n_correct=?, correct=?, judge=? WHERE response_seq=?",
                (
                    seq,
                    body.get("arm_code"),
                    body.get("status"),
                    n_items,
                    _int(body.get("n_answered")),
                    n_correct,
                    correct,
                    _judge_verdict(body),
                    body.get("response_seq"),
                ),
            )
        elif kind == "blinding.revealed" and isinstance(body.get("arm_codes"), dict):
            self.codes = {str(k): str(v) for k, v in body["arm_codes"].items()}
            cur.executemany(
                "UPDATE trials SET arm_code=? WHERE arm=?",
                [(code, arm) for arm, code in self.codes.items()],
            )

    def _requested(
        self,
        cur: sqlite3.Cursor,
        seq: int,
        env: dict[str, Any],
        body: dict[str, Any],
        blobs: dict[str, str],
    ) -> None:
        trial = str(body.get("trial", ""))
        row = cur.execute("SELECT h FROM trials WHERE trial=?", (trial,)).fetchone()
        if row is None:
            h = seq
            try:
                arm, model, stimulus, rep = split_trial(trial)
            except ValueError:
                arm, model = str(body.get("arm")), None
                stimulus, rep = str(body.get("stimulus")), "0"
            cur.execute(
                "INSERT INTO trials(h, trial, arm, model, stimulus, rep, position, status, "
                "arm_code, requested_at, variant) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    h,
                    trial,
                    arm,
                    model or self._model(),
                    stimulus,
                    int(rep) if rep.isdigit() else None,
                    _int(body.get("position")),
                    "requested",
                    self.codes.get(arm),
                    env.get("time"),
                    trial_variant(trial),
                ),
            )
        else:
            h = row[0]
        cur.execute(
            "UPDATE trials SET attempts = attempts + 1, last_request_seq=?, "
            "status = CASE WHEN status IN ('responded', 'given_up') THEN status "
            "ELSE 'requested' END WHERE h=?",
            (seq, h),
        )
        cur.execute(
            "INSERT INTO attempts(request_seq, h, attempt, request_sha, outcome_kind, final, "
            "requested_at) VALUES (?,?,?,?,?,?,?)",
            (seq, h, _int(body.get("attempt")), blobs.get("request"), "none", 0, env.get("time")),
        )

    def _outcome(
        self,
        cur: sqlite3.Cursor,
        seq: int,
        env: dict[str, Any],
        body: dict[str, Any],
        blobs: dict[str, str],
    ) -> None:
        row = cur.execute(
            "SELECT h FROM attempts WHERE request_seq=?", (body.get("request_seq"),)
        ).fetchone()
        if row is None:
            return  # an outcome of no request: the verifier names it; nothing to show here
        h = row[0]
        responded = env["kind"] == "trial.responded"
        final = responded or bool(body.get("final"))
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        out_tokens = _int(usage.get("output_tokens", usage.get("completion_tokens")))
        cost, latency = _num(body.get("cost_usd")), _int(body.get("latency_ms"))
        cur.execute(
            "UPDATE attempts SET outcome_kind=?, outcome_seq=?, final=?, response_sha=?, "
            "format=?, error_type=?, message=?, http_status=?, stop_reason=?, "
            "reported_model=?, input_tokens=?, output_tokens=?, cost=?, latency_ms=?, "
            "outcome_at=? WHERE request_seq=?",
            (
                "responded" if responded else "failed",
                seq,
                int(final),
                blobs.get("response"),
                body.get("format"),
                body.get("error_type"),
                body.get("message"),
                _int(body.get("http_status")),
                body.get("stop_reason"),
                body.get("model"),
                _int(usage.get("input_tokens", usage.get("prompt_tokens"))),
                out_tokens,
                cost,
                latency,
                env.get("time"),
                body.get("request_seq"),
            ),
        )
        if responded:
            sha = blobs.get("response")
            preview = self._text(sha, str(body.get("format") or "anthropic-messages"))
            cur.execute(
                "UPDATE trials SET status='responded', outcome_seq=?, response_seq=?, "
                "cost=COALESCE(cost, 0) + COALESCE(?, 0), output_tokens=?, latency_ms=?, "
                "response_sha=?, preview=? WHERE h=?",
                (seq, seq, cost, out_tokens, latency, sha, preview, h),
            )
        else:
            cur.execute(
                "UPDATE trials SET status = CASE WHEN status='responded' THEN status "
                "WHEN ? THEN 'given_up' ELSE 'retrying' END, "
                "outcome_seq = CASE WHEN ? THEN ? ELSE outcome_seq END, "
                "cost=COALESCE(cost, 0) + COALESCE(?, 0) WHERE h=?",
                (final, final, seq, cost, h),
            )

    def _text(self, sha: str | None, wire_format: str) -> str | None:
        """Index the text of response blob ``sha`` for search (once per blob); its preview.

        Search reads responses, step replies and judge replies alike: each distinct blob is
        one row of the FTS5 table (``docs`` maps its rowid to the blob), so a reply shared by
        many trials is indexed once. A blob that cannot be read has no text (its page says why).
        """
        if not sha:
            return None
        known = self._previews.get(sha)
        if known is not None:
            return known
        try:
            text = reply_text(self.blob(sha), wire_format)
        except AnalysisError:
            text = ""
        cur = self.db.execute("INSERT OR IGNORE INTO docs(sha) VALUES (?)", (sha,))
        if cur.rowcount:
            self.db.execute("INSERT INTO fts(rowid, text) VALUES (?, ?)", (cur.lastrowid, text))
        preview = " ".join(text.split())[:PREVIEW]
        if len(self._previews) > _BATCH * 4:
            self._previews.clear()
        self._previews[sha] = preview
        return preview

    def _items(self, cur: sqlite3.Cursor, body: dict[str, Any], blobs: dict[str, str]) -> None:
        """The per-item scores of a ``trial.scored`` (its ``scores`` blob): predicted and key."""
        row = cur.execute(
            "SELECT h FROM trials WHERE response_seq=?", (body.get("response_seq"),)
        ).fetchone()
        if row is None or "scores" not in blobs:
            return
        h = row[0]
        try:
            loaded = json.loads(self.blob(blobs["scores"]))
        except (AnalysisError, ValueError, RecursionError):
            return
        items = [i for i in loaded if isinstance(i, dict)] if isinstance(loaded, list) else []
        cur.execute("DELETE FROM items WHERE h=?", (h,))
        cur.executemany(
            "INSERT INTO items VALUES (?,?,?,?,?,?)",
            [
                (
                    h,
                    _str(i.get("row")),
                    _str(i.get("position")),
                    _str(i.get("truth")),
                    _str(i.get("answer")),
                    None if i.get("correct") is None else int(bool(i["correct"])),
                )
                for i in items
            ],
        )
        predicted = " ".join("–" if i.get("answer") is None else str(i["answer"]) for i in items)
        key = " ".join("–" if i.get("truth") is None else str(i["truth"]) for i in items)
        cur.execute(
            "UPDATE trials SET predicted=?, key=? WHERE h=?",
            (predicted[:PREVIEW] or None, key[:PREVIEW] or None, h),
        )

    def _step(
        self,
        cur: sqlite3.Cursor,
        seq: int,
        kind: str,
        body: dict[str, Any],
        blobs: dict[str, str],
    ) -> None:
        """A step call's event (``docs/trials.md`` §5): item steps by item, trial steps by trial."""
        if kind == "step.requested":
            trial = body.get("trial")
            h = None
            if isinstance(trial, str):
                found = cur.execute("SELECT h FROM trials WHERE trial=?", (trial,)).fetchone()
                h = found[0] if found else None
            cur.execute(
                "INSERT INTO steps(request_seq, call, step, model, item, trial, h, attempt, "
                "request_sha, outcome_kind, final) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    seq,
                    _str(body.get("call")),
                    _str(body.get("step")),
                    _str(body.get("model")),
                    _str(body.get("item")),
                    trial if isinstance(trial, str) else None,
                    h,
                    _int(body.get("attempt")),
                    blobs.get("request"),
                    "none",
                    0,
                ),
            )
            return
        responded = kind == "step.responded"
        sha = blobs.get("response") if responded else None
        fmt = str(body.get("format") or "anthropic-messages")
        if sha:
            self._text(sha, fmt)
        cur.execute(
            "UPDATE steps SET outcome_kind=?, outcome_seq=?, final=?, response_sha=?, format=?, "
            "error_type=?, message=? WHERE request_seq=?",
            (
                "responded" if responded else "failed",
                seq,
                int(responded or bool(body.get("final"))),
                sha,
                fmt if responded else None,
                body.get("error_type"),
                body.get("message"),
                body.get("request_seq"),
            ),
        )

    def _model(self) -> str | None:
        """The model of a study without ``[models]`` (``protocol.locked`` ``model.id``)."""
        if self._default_model is None:
            protocol = self.protocol()
            model = protocol.get("model") if protocol else None
            found = str(model.get("id")) if isinstance(model, dict) and "id" in model else ""
            self._default_model = found
        return self._default_model or None

    # ------------------------------------------------------------------ queries

    def query(self, sql: str, args: tuple[Any, ...] | list[Any] = ()) -> list[sqlite3.Row]:
        """Rows of one read of the index (under the index's lock)."""
        with self.lock:
            return self.db.execute(sql, args).fetchall()

    def singles(self, kind: str) -> list[tuple[int, dict[str, Any], dict[str, str]]]:
        """(seq, body, blobs) of every event of a kind the index keeps whole (:data:`_SINGLES`)."""
        rows = self.query("SELECT seq, body, blobs FROM singles WHERE kind=? ORDER BY seq", (kind,))
        return [(r[0], json.loads(r[1]), json.loads(r[2])) for r in rows]

    def search(self, query: str) -> tuple[str, list[Any]]:
        """An SQL condition on ``trials`` for full-text ``query``, and its arguments.

        A trial matches when its response, or a reply of one of its trial steps (a judge's),
        matches ``query`` in SQLite FTS5 syntax (words, ``"a phrase"``, ``OR``, ``NOT``,
        ``prefix*``). A query FTS5 cannot parse raises :class:`AnalysisError` saying so.
        """
        try:
            self.query("SELECT rowid FROM fts WHERE fts MATCH ? LIMIT 1", (query,))
        except sqlite3.OperationalError as exc:
            raise AnalysisError(
                f"search {query!r} is not a query the full-text index understands ({exc}); "
                'put a phrase in double quotes ("I cannot") or leave out * ( ) : ^ and -'
            ) from None
        docs = "SELECT sha FROM docs WHERE id IN (SELECT rowid FROM fts WHERE fts MATCH ?)"
        return (
            f"(response_sha IN ({docs}) OR h IN (SELECT h FROM steps WHERE h IS NOT NULL "
            f"AND response_sha IN ({docs})))"
        ), [query, query]

    def protocol(self) -> dict[str, Any] | None:
        """The ``protocol.locked`` body (with ``seq``), or None before the lock."""
        found = self.singles("protocol.locked")
        if not found:
            return None
        seq, body, blobs = found[0]
        return {**body, "seq": seq, "_blobs": blobs}

    @property
    def revealed(self) -> bool:
        """True once ``blinding.revealed`` is indexed (the arms may be shown)."""
        return bool(self.query("SELECT 1 FROM singles WHERE kind='blinding.revealed' LIMIT 1"))

    def blob(self, digest: str) -> bytes:
        """A blob's bytes; :class:`AnalysisError` if missing or altered (naming it)."""
        with self.lock:
            try:
                if self._log is not None:
                    return self._log.blob(digest)
                assert self._archive is not None
                return self._archive.blob(digest)
            except (LedgerError, StudyError) as exc:
                raise AnalysisError(str(exc)) from exc

    def event_text(self, seq: int) -> dict[str, Any] | None:
        """The envelope of event ``seq`` (as stored), or None if there is none."""
        with self.lock:
            if self._log is not None:
                try:
                    stored: dict[str, Any] = json.loads(self._log.get(seq).envelope)
                except LedgerError:
                    return None
                return stored
            row = self.db.execute(
                "SELECT offset, length FROM events WHERE seq=?", (seq,)
            ).fetchone()
        if row is None:
            return None
        with open_events(self.path / EVENTS_FILE) as handle:
            handle.seek(row[0])
            line = handle.read(row[1])
        return parse_line(line, seq + 1, self.path / EVENTS_FILE)

    def leaf(self, seq: int) -> bytes | None:
        """Event ``seq``'s leaf hash, or None if there is no such event."""
        rows = self.query("SELECT leaf FROM events WHERE seq=?", (seq,))
        return bytes(rows[0][0]) if rows else None

    def inclusion(self, seq: int) -> tuple[list[bytes], bytes, int]:
        """(RFC 9162 path, root, tree size) proving event ``seq`` is in the log as indexed.

        A study asks its ledger (which keeps the tree); an archive's tree is computed from the
        leaf hashes once, then every proof costs O(log n).
        """
        with self.lock:
            if self._log is not None:
                proof = self._log.inclusion_proof(seq, self.next_seq)
                return list(proof.path), proof.root, proof.size
            if self._tree is None or self._tree.size != self.next_seq:
                self._tree = _Tree(self.db, self.next_seq)
            return self._tree.path(seq), self._tree.root(), self._tree.size


class _Tree:
    """RFC 9162 Merkle tree over the index's leaf hashes, kept in the index (flat memory).

    Every perfect, aligned subtree's hash is stored once, level by level (``tree`` table: level,
    index, hash), when the first proof is asked for; a proof then reads O(log n) of them, and an
    imperfect right edge is folded from the perfect subtrees it is made of.
    """

    def __init__(self, db: sqlite3.Connection, size: int) -> None:
        self.db = db
        self.size = size
        db.execute("DROP TABLE IF EXISTS tree")
        db.execute(
            "CREATE TABLE tree(level INTEGER, idx INTEGER, hash BLOB, "
            "PRIMARY KEY(level, idx)) WITHOUT ROWID"
        )
        db.execute("BEGIN")
        db.execute("INSERT INTO tree SELECT 0, seq, leaf FROM events WHERE seq < ?", (size,))
        level, count = 0, size
        while count > 1:
            rows = db.execute(
                "SELECT hash FROM tree WHERE level=? ORDER BY idx", (level,)
            )  # one level at a time: the cursor streams it
            pending: list[tuple[int, int, bytes]] = []
            left: bytes | None = None
            index = 0
            for (h,) in rows:
                if left is None:
                    left = bytes(h)
                    continue
                pending.append((level + 1, index, node_hash(left, bytes(h))))
                index += 1
                left = None
                if len(pending) >= _BATCH:
                    db.executemany("INSERT INTO tree VALUES (?,?,?)", pending)
                    pending = []
            db.executemany("INSERT INTO tree VALUES (?,?,?)", pending)
            level, count = level + 1, count // 2
        db.execute("COMMIT")

    def node(self, level: int, index: int) -> bytes:
        row = self.db.execute(
            "SELECT hash FROM tree WHERE level=? AND idx=?", (level, index)
        ).fetchone()
        return bytes(row[0])

    def mth(self, start: int, end: int) -> bytes:
        n = end - start
        if n & (n - 1) == 0:  # a perfect subtree (start is aligned to it in every call made)
            level = n.bit_length() - 1
            return self.node(level, start >> level)
        k = 1 << ((n - 1).bit_length() - 1)
        return node_hash(self.mth(start, start + k), self.mth(start + k, end))

    def root(self) -> bytes:
        return self.mth(0, self.size) if self.size else hashlib.sha256(b"").digest()

    def path(self, index: int) -> list[bytes]:
        out: list[bytes] = []
        start, end = 0, self.size
        while end - start > 1:
            k = 1 << ((end - start - 1).bit_length() - 1)
            if index - start < k:
                out.append(self.mth(start + k, end))
                end = start + k
            else:
                out.append(self.mth(start, start + k))
                start += k
        out.reverse()
        return out
