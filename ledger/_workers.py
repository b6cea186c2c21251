"""Workers and trial leases on a PostgreSQL ledger: what concurrent ``ledger run`` share.

``docs/storage.md`` ("Many workers"). A worker is one ``ledger run`` process: a row in
``workers`` (its id, run session, host, pid, mode and lease length) whose ``expires`` its
heartbeat pushes forward; a lease is a row in ``leases`` giving one pending trial to one worker
until ``expires``. Every time comes from the database server's clock (``now()``), so a worker
whose own clock is wrong neither keeps a lease too long nor takes one too early.

A worker claims trials with one atomic upsert: a trial with no final outcome (``pj_trials``,
``ledger/_guard.py``) and no unexpired lease of another worker; when two workers race for one
trial, the second's ``ON CONFLICT ... DO UPDATE ... WHERE`` sees the first's committed lease and
takes nothing. A worker whose heartbeat stopped (killed, or cut off for longer than its lease)
is *dead*: its leases are free to claim, and the next worker that looks reaps it (closes its
open requests as interrupted and its session with ``run.stopped``, ``runner/_workers.py``).
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ledger._errors import StoreError
from ledger._postgres import PgConnection, PostgresLocation

if TYPE_CHECKING:
    from ledger._store import Ledger

#: How a worker shares its study: ``shared`` (any number at once) or ``alone`` (a study whose
#: calls depend on one another, or that is witnessed: no other worker while it runs).
MODES = ("shared", "alone")


@dataclass(frozen=True)
class WorkerRecord:
    """One registered worker as the database sees it."""

    id: str
    session: int
    host: str
    pid: int
    mode: str
    lease_seconds: float
    started: datetime
    heartbeat: datetime
    expires: datetime
    live: bool
    leases: int

    def describe(self) -> str:
        """``id (pid P on HOST, session S)`` for messages."""
        return f"{self.id} (pid {self.pid} on {self.host}, run session {self.session})"


def new_worker_id() -> str:
    """A fresh worker id: ``HOST:PID:RANDOM`` (printable, no spaces)."""
    host = "".join(c if c.isalnum() or c in "-._" else "-" for c in socket.gethostname())
    return f"{host or 'host'}:{os.getpid()}:{secrets.token_hex(3)}"


def _pg(log: Ledger) -> PgConnection:
    conn = log._conn
    if not isinstance(conn, PgConnection):
        raise StoreError(f"{log.path}: workers and leases exist on a PostgreSQL ledger only")
    return conn


_COLUMNS = (
    "w.id, w.session, w.host, w.pid, w.mode, w.lease_seconds, w.started, w.heartbeat, "
    "w.expires, w.expires >= now(), (SELECT COUNT(*) FROM leases l WHERE l.worker = w.id)"
)


def list_workers(log: Ledger) -> list[WorkerRecord]:
    """Every registered worker (live or not yet reaped), oldest first."""
    rows = _pg(log).execute(f"SELECT {_COLUMNS} FROM workers w ORDER BY w.started, w.id").fetchall()
    return [WorkerRecord(*r) for r in rows]


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def dead_workers(log: Ledger) -> list[WorkerRecord]:
    """Workers whose lease ran out, and those of this host whose process no longer exists."""
    here = socket.gethostname()
    return [
        w
        for w in list_workers(log)
        if not w.live or (w.host == here and w.pid != os.getpid() and _pid_gone(w.pid))
    ]


def register_worker(
    log: Ledger, worker_id: str, session: int, mode: str, lease_seconds: float
) -> None:
    """Insert this worker's row (inside the transaction that appends its ``run.started``)."""
    if mode not in MODES:
        raise StoreError(f"worker mode {mode!r} is not one of {', '.join(MODES)}")
    _pg(log).execute(
        "INSERT INTO workers (id, session, host, pid, mode, lease_seconds, expires) "
        "VALUES (?, ?, ?, ?, ?, ?, now() + make_interval(secs => ?))",
        (worker_id, session, socket.gethostname(), os.getpid(), mode, lease_seconds, lease_seconds),
    )


def remove_worker(log: Ledger, worker_id: str) -> bool:
    """Delete a worker's row and its leases; False when it was already gone (reaped)."""
    conn = _pg(log)
    conn.execute("DELETE FROM leases WHERE worker = ?", (worker_id,))
    row = conn.execute("DELETE FROM workers WHERE id = ? RETURNING id", (worker_id,)).fetchone()
    return row is not None


def open_requests(log: Ledger, session: int) -> list[tuple[int, str, int]]:
    """(seq, trial, attempt) of the requests of run session ``session`` with no outcome."""
    rows = (
        _pg(log)
        .execute(
            "SELECT seq, trial, attempt FROM pj_requests WHERE session = ? AND outcome_seq IS NULL "
            "ORDER BY seq",
            (session,),
        )
        .fetchall()
    )
    return [(int(s), str(t), int(a)) for s, t, a in rows]


def session_open(log: Ledger, session: int) -> bool:
    """True when run session ``session`` is open in the store's projection."""
    row = (
        _pg(log)
        .execute("SELECT 1 FROM pj_sessions WHERE seq = ? AND stopped_seq IS NULL", (session,))
        .fetchone()
    )
    return row is not None


@dataclass(frozen=True)
class Claimed:
    """A trial leased to this worker, with its attempts and counted failures so far."""

    trial: str
    attempts: int
    failures: int


class WorkerLink:
    """A worker's own connection for heartbeats, claims and budget reservations.

    Separate from the ledger's connection (which the runner's writer thread uses), and safe to
    call from several threads: one call at a time.
    """

    def __init__(self, where: PostgresLocation, worker_id: str, lease_seconds: float) -> None:
        """Connect to the store ``where`` as worker ``worker_id``."""
        self.where = where
        self.worker_id = worker_id
        self.lease_seconds = float(lease_seconds)
        self._lock = threading.Lock()
        self._db = PgConnection(where, readonly=False)

    def _run(self, sql: str, args: Sequence[Any] = ()) -> Any:
        with self._lock:
            return self._db.execute(sql, args)

    def heartbeat(self) -> bool:
        """Push this worker's expiry and its leases' forward; False when its row is gone."""
        with self._lock:
            db = self._db
            db.execute("BEGIN")
            try:
                row = db.execute(
                    "UPDATE workers SET heartbeat = now(), expires = now() + make_interval("
                    "secs => ?) WHERE id = ? RETURNING id",
                    (self.lease_seconds, self.worker_id),
                ).fetchone()
                db.execute(
                    "UPDATE leases SET expires = now() + make_interval(secs => ?) WHERE worker = ?",
                    (self.lease_seconds, self.worker_id),
                )
                db.execute("COMMIT")
            except BaseException:
                with suppress(Exception):
                    db.execute("ROLLBACK")
                raise
        return row is not None

    def claim(self, candidates: Sequence[str], n: int) -> tuple[list[Claimed], set[str], bool]:
        """Lease up to ``n`` of ``candidates`` (in their order); also the ones already final.

        A candidate is claimed when it has no final outcome and no unexpired lease of another
        worker (a lease of this worker's is renewed). Returns the claimed trials with their
        attempts and failures as the store's projection counts them, the candidates that have a
        final outcome by now, and whether another worker took every free trial this one chose
        first (the race was lost: ask again, so that no free trial is skipped).
        """
        if not candidates or n <= 0:
            return [], set(), False
        ids = list(candidates)
        row = self._run(
            "WITH cand AS (SELECT c.t, c.o FROM unnest(?::text[]) WITH ORDINALITY AS c(t, o)), "
            "free AS (SELECT cand.t, cand.o FROM cand "
            "  LEFT JOIN pj_trials p ON p.trial = cand.t "
            "  LEFT JOIN leases l ON l.trial = cand.t "
            "  WHERE p.final_seq IS NULL "
            "    AND (l.trial IS NULL OR l.expires < now() OR l.worker = ?) "
            "  ORDER BY cand.o LIMIT ?), "
            "ins AS (INSERT INTO leases (trial, worker, expires) "
            "  SELECT t, ?, now() + make_interval(secs => ?) FROM free ORDER BY o "
            "  ON CONFLICT (trial) DO UPDATE SET worker = EXCLUDED.worker, "
            "    expires = EXCLUDED.expires "
            "  WHERE leases.expires < now() OR leases.worker = EXCLUDED.worker "
            "  RETURNING trial) "
            "SELECT (SELECT COUNT(*) FROM free), ARRAY(SELECT trial FROM ins)",
            (ids, self.worker_id, n, self.worker_id, self.lease_seconds),
        ).fetchone()
        chosen, rows = int(row[0]), [(t,) for t in row[1]]
        got = {str(r[0]) for r in rows}
        info = {
            str(t): (int(a), int(f), fs)
            for t, a, f, fs in self._run(
                "SELECT trial, attempts, failures, final_seq FROM pj_trials WHERE trial = ANY(?)",
                (ids,),
            ).fetchall()
        }
        finals = {t for t, (_, _, fs) in info.items() if fs is not None}
        claimed = [
            Claimed(t, info.get(t, (0, 0, None))[0], info.get(t, (0, 0, None))[1])
            for t in ids
            if t in got and t not in finals
        ]
        stale = sorted(got & finals)  # finalised between the two statements: give them back
        if stale:
            self._run(
                "DELETE FROM leases WHERE trial = ANY(?) AND worker = ?", (stale, self.worker_id)
            )
        return claimed, finals, chosen > 0 and not got

    def release(self, trials: Sequence[str] | None = None) -> None:
        """Give back this worker's leases (all, or those of ``trials``)."""
        if trials is None:
            self._run("DELETE FROM leases WHERE worker = ?", (self.worker_id,))
        elif trials:
            self._run(
                "DELETE FROM leases WHERE trial = ANY(?) AND worker = ?",
                (list(trials), self.worker_id),
            )

    def finals(self) -> int:
        """How many trials of the study have their final outcome."""
        row = self._run("SELECT COUNT(*) FROM pj_trials WHERE final_seq IS NOT NULL").fetchone()
        return int(row[0])

    def any_dead(self) -> bool:
        """True when some other registered worker's lease ran out (it wants reaping)."""
        row = self._run(
            "SELECT 1 FROM workers WHERE expires < now() AND id <> ? LIMIT 1", (self.worker_id,)
        ).fetchone()
        return row is not None

    def reserve(self, mine: float, worst: float, budget: float) -> tuple[bool, float, float]:
        """Reserve ``worst`` USD against the study-wide ``budget``; (granted, spent, others).

        ``mine`` is what this worker has reserved and spent but not yet recorded. The total
        is the recorded cost (``pj_meta.spent_usd``, every worker's) plus every live worker's
        reservation; the ``pj_meta`` row is locked while it is compared, so two workers never
        reserve the same dollar.
        """
        with self._lock:
            db = self._db
            db.execute("BEGIN")
            try:
                row = db.execute("SELECT spent_usd FROM pj_meta WHERE id = 1 FOR UPDATE")
                spent = float(row.fetchone()[0])
                row = db.execute(
                    "SELECT COALESCE(SUM(reserved_usd), 0) FROM workers "
                    "WHERE id <> ? AND expires >= now()",
                    (self.worker_id,),
                )
                others = float(row.fetchone()[0])
                granted = spent + others + mine + worst <= budget
                db.execute(
                    "UPDATE workers SET reserved_usd = ? WHERE id = ?",
                    (mine + worst if granted else mine, self.worker_id),
                )
                db.execute("COMMIT")
            except BaseException:
                with suppress(Exception):
                    db.execute("ROLLBACK")
                raise
        return granted, spent, others

    def close(self) -> None:
        """Close the connection."""
        self._db.close()
