"""The trial rules a PostgreSQL store enforces inside its sequenced transaction.

Many ``ledger run`` workers append to one PostgreSQL ledger (``docs/storage.md``, "Many
workers"). Each write transaction holds the ``coord`` row first, so the appends are
sequenced; this module keeps, in the same transaction, a projection of the trial events
(tables ``pj_meta``, ``pj_trials``, ``pj_requests``, ``pj_sessions``) and refuses an append
that would break one of these rules (:class:`ledger._errors.RefusedError`, nothing of the
batch is appended):

- ``final``: a second final outcome for a trial (``trial.responded``, a ``trial.failed`` with
  ``final`` true, ``trial.excluded``), or a ``trial.requested`` after the trial's final outcome;
- ``answered``: a second outcome (``trial.responded`` / ``trial.failed``) for one request;
- ``unknown``: an outcome whose ``request_seq`` is no ``trial.requested``, or whose trial and
  attempt are not its request's;
- ``closed``: a ``trial.requested`` or ``run.stopped`` naming a run session that is not open
  (stopped, or ended by a later ``run.started`` that did not list it as ``concurrent``);
- ``attempt``: a ``trial.requested`` whose ``attempt`` is not the trial's next.

The projection is built from the events themselves: before each append, events the
projection has not seen (a ledger copied in, or written by an older version) are projected
first, without refusals (history is what it is). It also sums the recorded ``cost_usd`` (for
the study-wide budget).

A SQLite ledger written locally has one writer per study (``ledger run``'s run lock) and
needs none of this. A SQLite ledger behind ``ledger serve`` has as many writers as there are
clients (two ``ledger run`` in two folders, or on two machines, pointing at one study URL;
their run locks are in different folders), so the service turns the same rules on for the
appends it receives (``Ledger.trial_guard``, ``docs/service.md`` §7): the ``pj_*`` tables are
created in the SQLite file at its first guarded append (:data:`SQLITE_DDL`), caught up from
the events of every writer, the local ones included, and kept in the same write transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ledger._canonical import loads_json
from ledger._errors import RefusedError

SQLITE_DDL = (
    "CREATE TABLE IF NOT EXISTS pj_meta (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "projected INTEGER NOT NULL, spent_usd REAL NOT NULL)",
    "INSERT OR IGNORE INTO pj_meta (id, projected, spent_usd) VALUES (1, 0, 0)",
    "CREATE TABLE IF NOT EXISTS pj_trials (trial TEXT PRIMARY KEY, attempts INTEGER NOT NULL, "
    "failures INTEGER NOT NULL, final_seq INTEGER)",
    "CREATE TABLE IF NOT EXISTS pj_requests (seq INTEGER PRIMARY KEY, trial TEXT NOT NULL, "
    "attempt INTEGER NOT NULL, session INTEGER, outcome_seq INTEGER)",
    "CREATE TABLE IF NOT EXISTS pj_sessions (seq INTEGER PRIMARY KEY, stopped_seq INTEGER)",
)
"""The projection's tables in a SQLite ledger behind ``ledger serve`` (the PostgreSQL schema
has them from the start): created inside the first guarded write transaction."""

#: ``trial.failed`` error types that do not count as a failed attempt (``docs/trials.md`` §3).
NOT_COUNTED = frozenset({"interrupted", "configuration", "superseded"})
OUTCOMES = ("trial.responded", "trial.failed")
COSTED = ("trial.responded", "step.responded", "run.preflight")
PROJECTED = frozenset(
    {"run.started", "run.stopped", "trial.requested", "trial.excluded", *OUTCOMES, *COSTED}
)
"""The kinds :meth:`_Projection.apply` reads: a batch of other kinds is neither checked nor
projected (the next batch that holds one catches up on these kinds only)."""


@dataclass
class _Trial:
    attempts: int = 0
    failures: int = 0
    final_seq: int | None = None
    dirty: bool = False


@dataclass
class _Request:
    trial: str
    attempt: int
    session: int | None
    outcome_seq: int | None = None
    new: bool = False
    dirty: bool = False


class _Projection:
    """The rows one batch touches, read once, changed in memory, written back once."""

    def __init__(self, conn: Any, where: object, pg: bool = True) -> None:
        self.conn = conn
        self.where = where
        self.pg = pg
        self.trials: dict[str, _Trial] = {}
        self.requests: dict[int, _Request] = {}
        row = conn.execute("SELECT projected, spent_usd FROM pj_meta WHERE id = 1").fetchone()
        self.projected, self.spent = int(row[0]), float(row[1])
        self.open = {
            int(r[0])
            for r in conn.execute(
                "SELECT seq FROM pj_sessions WHERE stopped_seq IS NULL"
            ).fetchall()
        }
        self.closed: dict[int, int | None] = {}  # session -> stopped seq (None: new, open)
        self.spent_changed = False

    def load(self, events: Sequence[tuple[int, str, dict[str, Any]]]) -> None:
        trials: set[str] = set()
        seqs: set[int] = set()
        for _seq, kind, body in events:
            if kind in ("trial.requested", "trial.excluded") or kind in OUTCOMES:
                trials.add(str(body.get("trial")))
            if kind in OUTCOMES and isinstance(body.get("request_seq"), int):
                seqs.add(body["request_seq"])
        trials -= set(self.trials)
        seqs -= set(self.requests)
        if trials:
            cond, args = _any(self.pg, "trial", sorted(trials))
            for t, a, f, fs in self.conn.execute(
                f"SELECT trial, attempts, failures, final_seq FROM pj_trials WHERE {cond}", args
            ).fetchall():
                self.trials[t] = _Trial(a, f, fs)
        if seqs:
            cond, args = _any(self.pg, "seq", sorted(seqs))
            for s, t, a, sess, out in self.conn.execute(
                f"SELECT seq, trial, attempt, session, outcome_seq FROM pj_requests WHERE {cond}",
                args,
            ).fetchall():
                self.requests[int(s)] = _Request(t, a, sess, out)

    def trial(self, tid: str) -> _Trial:
        found = self.trials.get(tid)
        if found is None:
            found = self.trials[tid] = _Trial(dirty=True)
        return found

    def apply(self, seq: int, kind: str, body: dict[str, Any], refuse: Any) -> None:
        """Project one event; ``refuse(rule, message)`` raises for a new event, else ignores."""
        if kind in COSTED and isinstance(body.get("cost_usd"), int | float):
            self.spent += float(body["cost_usd"])
            self.spent_changed = True
        if kind == "run.started":
            listed = body.get("concurrent")
            keep = {s for s in listed if isinstance(s, int)} if isinstance(listed, list) else set()
            for ended in sorted(self.open - keep):
                self.closed[ended] = seq
            self.open = (self.open & keep) | {seq}
            self.closed[seq] = None
        elif kind == "run.stopped":
            session = body.get("session")
            if session not in self.open:
                refuse("closed", f"run.stopped names run session {session!r}, which is not open")
                return
            self.open.discard(session)
            self.closed[session] = seq
        elif kind == "trial.requested":
            self._requested(seq, body, refuse)
        elif kind in OUTCOMES:
            self._outcome(seq, kind, body, refuse)
        elif kind == "trial.excluded":
            record = self.trial(str(body.get("trial")))
            if record.final_seq is not None:
                refuse(
                    "final",
                    f"trial {body.get('trial')} already has its final outcome "
                    f"(seq {record.final_seq})",
                )
                return
            record.final_seq, record.dirty = seq, True

    def _requested(self, seq: int, body: dict[str, Any], refuse: Any) -> None:
        tid = str(body.get("trial"))
        record = self.trial(tid)
        session = body.get("session")
        if isinstance(session, int) and session not in self.open:
            refuse(
                "closed",
                f"trial.requested for {tid} names run session {session}, which is "
                "not open (stopped, or ended by a later run.started)",
            )
            return
        if record.final_seq is not None:
            refuse(
                "final",
                f"trial {tid} already has its final outcome (seq {record.final_seq}); "
                "no request may follow it",
            )
            return
        attempt = body.get("attempt")
        if not isinstance(attempt, int) or attempt != record.attempts + 1:
            refuse(
                "attempt",
                f"trial.requested for {tid} has attempt {attempt!r}; the trial's "
                f"next attempt is {record.attempts + 1}",
            )
            return
        record.attempts, record.dirty = attempt, True
        self.requests[seq] = _Request(
            tid, attempt, session if isinstance(session, int) else None, new=True
        )

    def _outcome(self, seq: int, kind: str, body: dict[str, Any], refuse: Any) -> None:
        rseq = body.get("request_seq")
        request = self.requests.get(rseq) if isinstance(rseq, int) else None
        if request is None:
            refuse("unknown", f"{kind} names request_seq {rseq!r}, which is no trial.requested")
            return
        if body.get("trial") != request.trial or body.get("attempt") != request.attempt:
            refuse(
                "unknown",
                f"{kind} names trial {body.get('trial')!r} attempt "
                f"{body.get('attempt')!r}, but its request (seq {rseq}) is attempt "
                f"{request.attempt} of trial {request.trial}",
            )
            return
        if request.outcome_seq is not None:
            refuse(
                "answered",
                f"{kind}: the request at seq {rseq} already has its outcome (seq "
                f"{request.outcome_seq})",
            )
            return
        record = self.trial(request.trial)
        final = kind == "trial.responded" or body.get("final") is True
        if final and record.final_seq is not None:
            refuse(
                "final",
                f"{kind}: trial {request.trial} already has its final outcome (seq "
                f"{record.final_seq})",
            )
            return
        request.outcome_seq, request.dirty = seq, True
        if final:
            record.final_seq, record.dirty = seq, True
        if kind == "trial.failed" and body.get("error_type") not in NOT_COUNTED:
            record.failures, record.dirty = record.failures + 1, True

    def write(self, size: int) -> None:
        conn = self.conn
        rows = [(t, r.attempts, r.failures, r.final_seq) for t, r in self.trials.items() if r.dirty]
        conn.executemany(
            "INSERT INTO pj_trials (trial, attempts, failures, final_seq) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (trial) DO UPDATE SET attempts = EXCLUDED.attempts, "
            "failures = EXCLUDED.failures, final_seq = EXCLUDED.final_seq",
            rows,
        )
        if self.pg:  # a final outcome ends its trial's lease (SQLite has no leases)
            finals = [(t,) for t, r in self.trials.items() if r.dirty and r.final_seq is not None]
            conn.executemany("DELETE FROM leases WHERE trial = ?", finals)
        conn.executemany(
            "INSERT INTO pj_requests (seq, trial, attempt, session, outcome_seq) "
            "VALUES (?, ?, ?, ?, ?)",
            [
                (s, r.trial, r.attempt, r.session, r.outcome_seq)
                for s, r in self.requests.items()
                if r.new
            ],
        )
        conn.executemany(
            "UPDATE pj_requests SET outcome_seq = ? WHERE seq = ?",
            [(r.outcome_seq, s) for s, r in self.requests.items() if r.dirty and not r.new],
        )
        conn.executemany(
            "INSERT INTO pj_sessions (seq, stopped_seq) VALUES (?, ?) "
            "ON CONFLICT (seq) DO UPDATE SET stopped_seq = EXCLUDED.stopped_seq",
            sorted(self.closed.items()),
        )
        conn.execute(
            "UPDATE pj_meta SET projected = ?, spent_usd = ? WHERE id = 1", (size, self.spent)
        )


def _any(pg: bool, column: str, values: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
    """``column = ANY(?)`` on PostgreSQL (one array parameter), ``column IN (?, ...)`` on SQLite."""
    if pg:
        return f"{column} = ANY(?)", (list(values),)
    return f"{column} IN ({', '.join('?' * len(values))})", tuple(values)


def _sqlite_tables(conn: Any) -> None:
    """Create the projection's tables in a SQLite ledger that has none yet (same transaction)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'pj_meta'").fetchone() is None:
        for statement in SQLITE_DDL:
            conn.execute(statement)


def _history(_rule: str, _message: str) -> None:
    """Events already in the ledger are projected as they are: nothing is refused."""


def guard_appends(
    conn: Any,
    where: object,
    events: Sequence[tuple[int, str, dict[str, Any]]],
    specs: Sequence[object],
    engine: str = "postgresql",
) -> None:
    """Check ``events`` (seq, kind, body) against the projection and project them.

    Called by :meth:`ledger.Ledger._insert` on a PostgreSQL store (every append) and on a
    SQLite ledger behind ``ledger serve`` (``engine`` ``"sqlite"``: the appends it receives),
    inside the write transaction, before the events are inserted; ``specs[i]`` is the spec of
    ``events[i]``.
    Raises :class:`RefusedError` naming the store, the seq and the rule; the caller's
    transaction is then rolled back whole.
    """
    if not events or not any(kind in PROJECTED for _, kind, _ in events):
        return  # nothing the projection keeps: it skips these when it next catches up
    start = events[0][0]
    pg = engine == "postgresql"
    if not pg:
        _sqlite_tables(conn)
    proj = _Projection(conn, where, pg)
    if proj.projected < start:  # events the projection has not seen: project them first
        cond, kinds = _any(pg, "kind", sorted(PROJECTED))
        rows = conn.execute(
            f"SELECT seq, envelope FROM events WHERE seq >= ? AND seq < ? AND {cond} ORDER BY seq",
            (proj.projected, start, *kinds),
        ).fetchall()
        history = []
        for seq, envelope in rows:
            obj = loads_json(bytes(envelope))
            history.append((int(seq), str(obj["kind"]), obj["body"]))
        for i in range(0, len(history), 1000):
            chunk = history[i : i + 1000]
            proj.load(chunk)
            for seq, kind, body in chunk:
                proj.apply(seq, kind, body, _history)
    proj.load(events)
    for (seq, kind, body), spec in zip(events, specs, strict=True):

        def refuse(rule: str, message: str, _seq: int = seq, _spec: object = spec) -> None:
            raise RefusedError(
                f"{where}: seq {_seq}: refused: {message}", spec=_spec, rule=rule, seq=_seq
            )

        proj.apply(seq, kind, body, refuse)
    proj.write(events[-1][0] + 1)
