"""How a session records: the request and outcome events, committed in order, crash-safe.

``docs/trials.md`` §1: ``trial.requested`` (``step.requested``) is committed before its request
is sent; ``trial.responded`` or ``trial.failed`` after. :class:`GroupWriter` commits events
from a thread, many per transaction; :class:`EventRecorder` builds the session's events and
commits them through it (or directly, outside the event loop), and keeps the responses
submitted and not yet committed (write-behind) and the first commit that failed.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
from collections.abc import Callable
from typing import Any

from ledger import Event, EventSpec, Ledger, RefusedError, SigningKey
from runner._backends import Backend, BackendError, Reply
from runner._pricing import Price, cost_at
from runner._request import Trial, request_blob, trial_requested
from runner._witnessing import is_final_outcome
from runner.steps._core import StepCall


class GroupWriter:
    """Commit events from a thread, many per transaction, off the event loop.

    Each worker submits an event and awaits its future; the thread takes every event waiting,
    appends them with one :meth:`ledger.Ledger.append_many` (one fsync), and resolves the
    futures with the stored events, all of a batch in one hand-off to the event loop. A
    ``trial.requested`` is therefore durable before its request is sent, while 32 workers share
    one disk flush instead of queueing for 32. Events are committed in the order submitted, so
    an event submitted and not awaited (a response, :meth:`EventRecorder.submit_behind`) is durable
    before any request submitted after it is sent. Once an append has failed, nothing more is
    committed (every later event gets the same error), so no later event can be durable where
    an earlier one is not.
    """

    MAX_BATCH = 256

    def __init__(
        self,
        log: Ledger,
        key: SigningKey,
        loop: asyncio.AbstractEventLoop,
        *,
        interval: int = 0,
        on_interval: Callable[[int], None] | None = None,
    ) -> None:
        """Start the writer thread for ``log``; nothing else may write to it until closed.

        With ``interval`` N > 0, ``on_interval(size)`` runs in the writer thread right after
        every N-th final trial outcome it commits (:func:`runner._witnessing.is_final_outcome`),
        with the tree at that outcome (``size`` = its seq + 1) and before anything after it
        is committed: the interval checkpoints of ``docs/witness.md`` section 8.
        """
        self.log = log
        self.key = key
        self.loop = loop
        self.interval = interval if on_interval is not None else 0
        self.on_interval = on_interval
        self.finals = 0  # final trial outcomes committed by this writer (this session)
        self.queue: queue.SimpleQueue[tuple[EventSpec, asyncio.Future[Event]] | None] = (
            queue.SimpleQueue()
        )
        self.commits = 0
        self.events = 0
        self.failed: BaseException | None = None  # the first append error: nothing more is written
        self.thread = threading.Thread(target=self._run, name="ledger-writer", daemon=True)
        self.thread.start()

    def submit(self, spec: EventSpec) -> asyncio.Future[Event]:
        """Queue ``spec``; the future resolves to the stored event (or its append error)."""
        future: asyncio.Future[Event] = self.loop.create_future()
        self.queue.put((spec, future))
        return future

    def call(self, job: Callable[[], Any]) -> asyncio.Future[Any]:
        """Run ``job()`` in the writer thread after what is queued; the future gets its result.

        Events submitted after it wait until it returns (a witness request pauses recording,
        and so sending: ``docs/witness.md`` section 8).
        """
        future: asyncio.Future[Any] = self.loop.create_future()
        self.queue.put((job, future))  # type: ignore[arg-type]
        return future

    def close(self) -> None:
        """Commit what is queued, then stop the thread."""
        self.queue.put(None)
        self.thread.join()

    def _run(self) -> None:
        stop = False
        while not stop:
            item = self.queue.get()
            if item is None:
                break
            if not isinstance(item[0], EventSpec):
                self._call(item)
                continue
            batch = [item]
            job = None
            while len(batch) < self.MAX_BATCH:
                try:
                    nxt = self.queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                if not isinstance(nxt[0], EventSpec):
                    job = nxt
                    break
                batch.append(nxt)
            try:
                if self.failed is not None:
                    raise self.failed
                stored = self._append_refusing(batch)
            except BaseException as exc:  # handed to every waiting worker
                self.failed = self.failed or exc
                self.loop.call_soon_threadsafe(_resolve_all, [f for _, f in batch], None, exc)
            else:
                self.commits += 1
                self.events += len(stored)
                futures = [future for _, future in batch]
                self.loop.call_soon_threadsafe(_resolve_all, futures, stored, None)
            if job is not None:
                self._call(job)

    def _append_refusing(self, batch: list[tuple[EventSpec, asyncio.Future[Event]]]) -> list[Event]:
        """Append ``batch``; an event the store refuses is left out and its future gets why.

        A PostgreSQL store refuses an event that breaks a trial rule (:class:`RefusedError`,
        ``ledger/_guard.py``): nothing of the batch was appended, so the batch is appended
        again without it, and only its worker hears of it. ``batch`` keeps the events stored.
        """
        while True:
            try:
                return self._append([spec for spec, _ in batch])
            except RefusedError as exc:
                at = next((i for i, (spec, _) in enumerate(batch) if spec is exc.spec), None)
                if at is None or self.interval:  # interval cuts commit part of a batch first
                    raise
                _, future = batch.pop(at)
                self.loop.call_soon_threadsafe(_resolve, future, None, exc)
                if not batch:
                    return []

    def _append(self, specs: list[EventSpec]) -> list[Event]:
        """Append ``specs`` in order; cut after each N-th final outcome to call ``on_interval``."""
        if not self.interval or self.on_interval is None:
            return self.log.append_many(specs, key=self.key)
        stored: list[Event] = []
        start = 0
        for i, spec in enumerate(specs):
            if not is_final_outcome(spec.kind, spec.body):
                continue
            self.finals += 1
            if self.finals % self.interval == 0:
                stored += self.log.append_many(specs[start : i + 1], key=self.key)
                start = i + 1
                self.on_interval(self.log.size)
        if start < len(specs):
            stored += self.log.append_many(specs[start:], key=self.key)
        return stored

    def _call(self, item: tuple[Any, asyncio.Future[Any]]) -> None:
        job, future = item
        try:
            result = job()
        except BaseException as exc:
            self.loop.call_soon_threadsafe(_resolve, future, None, exc)
        else:
            self.loop.call_soon_threadsafe(_resolve, future, result, None)


def _resolve(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def _resolve_all(
    futures: list[asyncio.Future[Event]], events: list[Event] | None, error: BaseException | None
) -> None:
    """Resolve a committed batch's futures with their events (or all with ``error``)."""
    if events is None:
        for future in futures:
            _resolve(future, None, error)
        return
    for future, event in zip(futures, events, strict=True):
        if not future.done():
            future.set_result(event)


def call_members(call: StepCall) -> dict[str, Any]:
    """The members a step event's body names its call by (``docs/trials.md`` §5)."""
    return {"call": call.id, "step": call.step}


def _subject(trial: Trial | StepCall) -> dict[str, Any]:
    return call_members(trial) if isinstance(trial, StepCall) else {"trial": trial.id}


def superseded_failure(spec: EventSpec, refused: RefusedError) -> EventSpec | None:
    """The ``trial.failed`` (``superseded``) that closes an outcome the store refused as final.

    PostgreSQL, ``docs/trials.md`` §8: another worker recorded the trial's final outcome first
    (this worker's lease had run out); the request still needs its one outcome. None when the
    refusal is of another kind (this worker lost its session).
    """
    if refused.rule != "final" or spec.kind not in ("trial.responded", "trial.failed"):
        return None
    body = spec.body
    return EventSpec(
        "trial.failed",
        {
            "trial": body["trial"],
            "attempt": body["attempt"],
            "request_seq": body["request_seq"],
            "error_type": "superseded",
            "http_status": body.get("http_status"),
            "message": (
                "not final: another worker recorded this trial's final outcome first (this "
                f"worker's lease had run out); {refused}"
            )[:2000],
            "retryable": False,
            "final": False,
        },
    )


class EventRecorder:
    """A session's trial and step events: built here, committed in the order submitted."""

    def __init__(self, log: Ledger, key: SigningKey, backend: Backend, *, batch: bool) -> None:
        """Record into ``log``; ``session`` is set once ``run.started`` is appended."""
        self.log = log
        self.key = key
        self.backend = backend
        self.batch = batch
        self.session = 0
        self.writer: GroupWriter | None = None
        self.behind: set[asyncio.Future[Event]] = set()  # submitted, not yet committed
        self.write_error: BaseException | None = None  # the first of them that failed

    # ------------------------------------------------------------------ events

    def request(self, trial: Trial | StepCall, attempt: int, wire: dict[str, Any]) -> EventSpec:
        """``trial.requested`` (``step.requested`` for a step call) with the body as a blob."""
        blob, digest = request_blob(wire)
        if isinstance(trial, StepCall):
            return EventSpec(
                "step.requested",
                {
                    "call": trial.id,
                    "step": trial.step,
                    "model": trial.model or "",
                    "item": trial.stimulus,
                    **({"trial": trial.trial} if trial.trial is not None else {}),
                    "attempt": attempt,
                    "request_sha256": digest,
                    "session": self.session,
                    "backend": self.backend.name,
                    "simulated": self.backend.simulated,
                },
                {"request": blob},
            )
        return trial_requested(
            trial,
            attempt,
            blob,
            digest,
            session=self.session,
            backend=self.backend.name,
            simulated=self.backend.simulated,
            batch=self.batch,
        )

    def response(
        self,
        trial: Trial | StepCall,
        attempt: int,
        request_seq: int,
        reply: Reply,
        latency: float,
        price: Price | None,
    ) -> tuple[EventSpec, float | None]:
        """``trial.responded`` (``step.responded``) with the raw body, and its cost."""
        cost = cost_at(price, reply.usage) if price is not None else None
        step = isinstance(trial, StepCall)
        spec = EventSpec(
            "step.responded" if step else "trial.responded",
            {
                **_subject(trial),
                "attempt": attempt,
                "request_seq": request_seq,
                "request_id": reply.request_id,
                "http_status": reply.http_status,
                # a simulation has no network latency worth recording (and must replay exactly)
                "latency_ms": None if self.backend.simulated else round(latency * 1000, 3),
                "stop_reason": reply.stop_reason,
                "usage": reply.usage,
                "cost_usd": cost,
                "model": reply.model,
                "format": reply.format,
                "simulated": self.backend.simulated,
            },
            {"response": reply.raw},
        )
        return spec, cost

    def failure(
        self,
        trial: Trial | StepCall,
        attempt: int,
        request_seq: int,
        error: BackendError,
        *,
        final: bool,
    ) -> EventSpec:
        """``trial.failed`` (``step.failed``), with the error body as a blob when there is one."""
        step = isinstance(trial, StepCall)
        return EventSpec(
            "step.failed" if step else "trial.failed",
            {
                **_subject(trial),
                "attempt": attempt,
                "request_seq": request_seq,
                "error_type": error.error_type,
                "http_status": error.http_status,
                "message": error.message[:2000],
                "retryable": error.retryable,
                "final": final,
            },
            {"response": error.raw} if error.raw is not None else None,
        )

    # ------------------------------------------------------------------ direct appends

    def append_request(self, trial: Trial, attempt: int, wire: dict[str, Any]) -> int:
        """Append ``trial.requested`` now (outside the event loop's writer); return its seq."""
        return self.log.append_many([self.request(trial, attempt, wire)], key=self.key)[0].seq

    def append_failure(
        self,
        trial: Trial | StepCall,
        attempt: int,
        request_seq: int,
        error: BackendError,
        *,
        final: bool,
    ) -> None:
        """Append ``trial.failed`` now (outside the event loop's writer)."""
        spec = self.failure(trial, attempt, request_seq, error, final=final)
        self.log.append_many([spec], key=self.key)

    # ------------------------------------------------------------------ the group writer

    def open(
        self,
        loop: asyncio.AbstractEventLoop,
        interval: int,
        on_interval: Callable[[int], None] | None,
    ) -> GroupWriter:
        """Start the session's group writer (interval checkpoints: :class:`GroupWriter`)."""
        self.writer = GroupWriter(
            self.log, self.key, loop, interval=interval, on_interval=on_interval
        )
        return self.writer

    async def close(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait for every response written behind, then stop the writer."""
        while self.behind:  # with the writer open: a refused outcome's follow-up is written
            await asyncio.wait(list(self.behind))
        assert self.writer is not None
        await loop.run_in_executor(None, self.writer.close)
        self.writer = None
        if self.behind:  # committed (or failed) by now: let their callbacks run
            await asyncio.wait(list(self.behind))

    async def write(self, spec: EventSpec) -> int:
        """Commit ``spec`` through the group writer; return its seq once it is durable."""
        assert self.writer is not None
        pending = self.writer.submit(spec)
        try:
            return (await asyncio.shield(pending)).seq
        except asyncio.CancelledError:
            # the event is being committed regardless: wait for it so the record stays whole
            await asyncio.wait([pending])
            raise

    def submit_behind(self, spec: EventSpec, done: Callable[[asyncio.Future[Event]], None]) -> None:
        """Submit ``spec`` without waiting for its commit; ``done(future)`` runs once it is.

        The writer commits in the order events are submitted, so the event is durable before
        any request submitted after it is sent. The session waits for every such event before
        it closes (:meth:`close`).
        """
        assert self.writer is not None
        future = self.writer.submit(spec)
        self.behind.add(future)
        future.add_done_callback(functools.partial(self._written, done))

    def _written(
        self, done: Callable[[asyncio.Future[Event]], None], future: asyncio.Future[Event]
    ) -> None:
        self.behind.discard(future)
        done(future)

    def crashed(self, error: BaseException) -> bool:
        """Keep ``error`` as the session's failed commit; True when it is the first."""
        if self.write_error is not None:
            return False
        self.write_error = error
        return True
