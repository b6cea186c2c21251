"""Many ``ledger run`` workers on one PostgreSQL study (``docs/trials.md`` §8).

On a PostgreSQL ledger every ``ledger run`` is a *worker*: it registers in the store's
``workers`` table in the same transaction as its ``run.started``, keeps a heartbeat, and (in
``shared`` mode) takes pending trials through leases (:mod:`ledger._workers`). A worker whose
heartbeat stopped for longer than its lease is *dead*; the next worker that notices reaps it
(:func:`reap_dead`): in one transaction, each of its requests still without an outcome gets a
``trial.failed`` of type ``interrupted`` and its session a ``run.stopped`` naming it, appended
by the reaper, and its row and leases are deleted. Requests of live workers are never touched.

A study whose calls depend on one another (model steps, answer-dependent arms), one run with
the Message Batches backend, or a witnessed study runs ``alone``: registered and reaped like
any worker, but no other worker may run beside it (see :func:`worker_mode` for why).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from ledger import (
    EventSpec,
    Ledger,
    SigningKey,
    WorkerLink,
    WorkerRecord,
    dead_workers,
    new_worker_id,
    open_requests,
    remove_worker,
    session_open,
)
from runner.spec import Study

#: A worker's lease, in seconds: how long after its last heartbeat it counts as dead.
DEFAULT_LEASE_SECONDS = 30.0


def worker_mode(study: Study, *, batch: bool, witnessed: bool) -> tuple[str, str | None]:
    """``("shared", None)``, or ``("alone", why)`` for a study no two workers may share.

    - model steps and answer-dependent arms: a call waits for earlier answers, phase by phase
      (``docs/trials.md`` §5), which one session drives;
    - the Message Batches backend: a session submits every pending trial in one batch;
    - witnesses: a witness cosigns only trees that grow, one after another (``docs/witness.md``
      §8); concurrent sessions would ask for their session and interval checkpoints out of
      order, and one would be refused.
    """
    if study.steps or any(a.after is not None for a in study.arms.values()):
        return (
            "alone",
            "the study has model steps or answer-dependent arms, whose calls wait "
            "for earlier answers (docs/trials.md §5)",
        )
    if batch:
        return "alone", "a Message Batches session submits every pending trial in one batch"
    if witnessed:
        return (
            "alone",
            "a witnessed study's checkpoints are cosigned one after another, in "
            "order of size (docs/witness.md §8)",
        )
    return "shared", None


class SharedRun:
    """The running process as a worker of a PostgreSQL study: its id, mode, lease and heartbeat."""

    def __init__(
        self,
        log: Ledger,
        *,
        mode: str,
        why: str | None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        """Connect a :class:`ledger._workers.WorkerLink` for a new worker id."""
        from ledger import PostgresLocation

        assert isinstance(log.path, PostgresLocation)
        self.id = new_worker_id()
        self.mode = mode
        self.why = why
        self.lease_seconds = lease_seconds
        self.link = WorkerLink(log.path, self.id, lease_seconds)
        self.lost: str | None = None  # why this worker lost its session, once it has
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def poll_seconds(self) -> float:
        """How long to wait before looking again for a trial other workers hold."""
        return max(0.05, min(1.0, self.lease_seconds / 4))

    def start_heartbeat(self, on_lost: Callable[[str], None]) -> None:
        """Beat every quarter lease in a thread; ``on_lost(reason)`` once the row is gone."""
        period = max(0.05, self.lease_seconds / 4)

        def beat() -> None:
            while not self._stop.wait(period):
                try:
                    alive = self.link.heartbeat()
                except Exception:  # the server is away: try again next beat
                    continue
                if not alive:
                    self.lost = (
                        f"lost: worker {self.id} was reaped by another worker (its heartbeat "
                        f"stopped for more than its {self.lease_seconds:g} s lease)"
                    )
                    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                        on_lost(self.lost)
                    return

        self._thread = threading.Thread(target=beat, name="ledger-heartbeat", daemon=True)
        self._thread.start()

    def stop_heartbeat(self) -> None:
        """Stop the heartbeat thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def close(self) -> None:
        """Stop beating and close the worker's connection."""
        self.stop_heartbeat()
        self.link.close()


def _lost_body(
    worker: WorkerRecord, by: str, interrupted: int, finals: int | None, trials: int | None
) -> dict[str, Any]:
    return {
        "session": worker.session,
        "reason": (
            f"lost: worker {worker.id} (pid {worker.pid} on {worker.host}) stopped: no "
            f"heartbeat since {worker.heartbeat.isoformat()} (lease {worker.lease_seconds:g} "
            f"s); closed by worker {by}"
        ),
        "responded": None,
        "failed": None,
        "given_up": None,
        "interrupted": interrupted,
        "retries": None,
        "cost_usd": None,
        "final": finals,
        "pending": None if finals is None or trials is None else trials - finals,
        "worker": worker.id,
    }


def reap_locked(
    log: Ledger, key: SigningKey, dead: list[WorkerRecord], *, by: str, trials: int | None
) -> list[int]:
    """Inside a write transaction: close each dead worker's requests and session.

    Returns the seqs of the ``run.stopped`` events appended (their checkpoints are due).
    """
    stops: list[int] = []
    live = {w.id for w in dead_workers(log)}
    for worker in dead:
        if worker.id not in live:
            continue  # reaped meanwhile by someone else
        specs: list[EventSpec] = []
        opened = open_requests(log, worker.session)
        for seq, trial, attempt in opened:
            specs.append(
                EventSpec(
                    "trial.failed",
                    {
                        "trial": trial,
                        "attempt": attempt,
                        "request_seq": seq,
                        "error_type": "interrupted",
                        "http_status": None,
                        "message": (
                            f"worker {worker.id} stopped after this request was recorded and "
                            "before "
                            "its outcome was; the request may or may not have reached the API"
                        ),
                        "retryable": True,
                        "final": False,
                    },
                )
            )
        if session_open(log, worker.session):
            finals = None
            if trials is not None:
                row = log._conn.execute(
                    "SELECT COUNT(*) FROM pj_trials WHERE final_seq IS NOT NULL"
                ).fetchone()
                finals = int(row[0])
            body = _lost_body(worker, by, len(opened), finals, trials)
            specs.append(EventSpec("run.stopped", body))
        stored = log.append_many(specs, key=key)
        stops += [e.seq for e in stored if e.kind == "run.stopped"]
        remove_worker(log, worker.id)
    return stops


def reap_dead(log: Ledger, key: SigningKey, *, by: str, trials: int | None = None) -> list[int]:
    """Reap every dead worker in one transaction, then sign each closed session's checkpoint.

    Returns the seqs of the ``run.stopped`` events appended.
    """
    dead = dead_workers(log)
    if not dead:
        return []
    with log.transaction():
        stops = reap_locked(log, key, dead, by=by, trials=trials)
    for seq in stops:
        with contextlib.suppress(Exception):  # the next session signs what is missing
            log.sign_checkpoint(key, size=seq + 1)
    return stops
