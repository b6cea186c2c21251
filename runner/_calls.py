"""The call-by-call session driver: every request sent on its own, by ``--concurrency`` workers.

``docs/trials.md`` §1-§8: each attempt records its request, sends it, and records its outcome
(a response is written behind: committed before anything sent after it). Retries follow
:class:`runner._retry.RetryPolicy`; spend follows :class:`runner._budget.SessionBudget`. A
study with steps runs in phases (:meth:`CallDriver._phases`); on PostgreSQL the trials come from
leases in the store (:class:`runner._leases.LeaseQueue`).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import deque
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime
from typing import Any

from ledger import Event, EventSpec, RefusedError
from runner._backends import BackendError, Reply
from runner._leases import LeaseQueue
from runner._limit import AdaptiveLimit
from runner._recording import superseded_failure
from runner._render import prior_trial
from runner._request import Trial
from runner._retry import Verdict
from runner._session import Session
from runner._state import NOT_COUNTED, TrialState
from runner.steps._core import StepCall
from runner.steps._state import CallState, prior_values, reply_text


class CallDriver:
    """Runs a session's pending trials and step calls call by call."""

    batch = False

    def __init__(self, session: Session) -> None:
        """Drive ``session``."""
        self.s = session
        self.calls: dict[asyncio.Future[Reply], Trial | StepCall] = {}  # sends under way
        self.in_flight: set[str] = set()  # trials between their request and its outcome

    # ------------------------------------------------------------------ signals

    def on_signal(self, name: str, *, first: bool, interrupt: bool) -> str | None:
        """Ctrl-C or SIGTERM in the session (called in the event loop by :mod:`runner._control`).

        The first starts no new attempt (a request already being recorded is still sent and
        awaited); ``interrupt`` (a second Ctrl-C, or SIGTERM) cancels the calls in flight,
        which :meth:`_attempt` records as interrupted, as it does a request recorded but not
        yet sent. Returns the line to show.
        """
        s = self.s
        if s.signalled is None:
            s.signalled = name
        s.request_stop(f"interrupted: {name}")
        n = len(self.in_flight)
        calls = f"{n} call{'' if n == 1 else 's'} in flight"
        if interrupt:
            s.interrupted_by = name
            for call in self.calls:
                call.cancel()
            if not n:
                return f"{name}: stopping; no call in flight"
            them = "it" if n == 1 else "them"
            return f"{name}: interrupting {calls}; recording {them} as interrupted"
        if first:
            if not n:
                return "stopping: no new requests; no call in flight"
            return (
                f"stopping: no new requests; waiting for {calls}; press Ctrl-C again to "
                f"interrupt {'it' if n == 1 else 'them'}"
            )
        return None

    # ------------------------------------------------------------------ the session

    async def drive(self) -> list[BaseException]:
        """Run the pending trials call by call; return the unexpected errors of the workers."""
        s = self.s
        assert s.state is not None
        pending = s.pending(s.state)
        if s.options.max_trials is not None:
            pending = pending[: s.options.max_trials]
        queue = deque(pending)
        limit = AdaptiveLimit(s.options.concurrency)
        loop = asyncio.get_running_loop()
        s.tick()
        results: list[Any] = []
        interval = s.witness.interval
        on_interval = s.witness.interval_job(loop, s.request_stop) if interval else None
        s.recorder.open(loop, interval, on_interval)
        try:
            if s.steps is not None:
                results = await self._phases(queue, limit)
            elif s.shared is not None and s.shared.mode == "shared":
                results = await LeaseQueue(s, queue).run(self._run_trial, limit)
            else:
                results = await self._drain(queue, limit)
        finally:
            await s.recorder.close(loop)
        errors = [
            r
            for r in results
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)
        ]
        if s.recorder.write_error is not None and not errors:
            errors.append(s.recorder.write_error)
        return errors

    async def _drain(self, queue: deque[Any], limit: AdaptiveLimit) -> list[Any]:
        """Run every call of ``queue`` with the session's workers; their results.

        A data arm's trials in it are recorded first, in queue (schedule) order, many per
        transaction (``docs/trials.md`` §6): they send nothing.
        """
        s = self.s
        data = [t for t in queue if isinstance(t, Trial) and s.is_data(t)]
        if data:
            rest = [t for t in queue if not (isinstance(t, Trial) and s.is_data(t))]
            queue.clear()
            queue.extend(rest)
            try:
                await self._supply(data)
            except Exception as exc:  # a broken ledger: stop as a worker would
                s.request_stop(f"crash: {type(exc).__name__}: {exc}")
                return [exc]
        workers = min(s.options.concurrency, len(queue)) or 0
        tasks = [asyncio.create_task(self._worker(queue, limit)) for _ in range(workers)]
        return list(await asyncio.gather(*tasks, return_exceptions=True))

    async def _worker(self, queue: deque[Any], limit: AdaptiveLimit) -> None:
        s = self.s
        while queue and s.stop_reason is None:
            await limit.acquire()
            try:
                if not queue or s.stop_reason is not None:
                    return
                trial = queue.popleft()
                try:
                    await self._run_trial(trial, limit)
                except Exception as exc:  # a bug or a broken ledger: stop everyone else too
                    s.request_stop(f"crash: {type(exc).__name__}: {exc}")
                    raise
            finally:
                await limit.release()

    # ------------------------------------------------------------------ steps (phases)

    async def _phases(self, trials: deque[Trial], limit: AdaptiveLimit) -> list[Any]:
        """A study with steps runs in phases (``docs/trials.md`` §5).

        The item steps, layer by layer (a layer reads only earlier layers' decisions); then the
        trials, those whose item the item steps keep out recorded as ``trial.excluded``; then
        the trial steps on every answered trial, layer by layer. Each phase starts from the
        ledger as committed, so a restart resumes exactly where the calls stopped.
        """
        s = self.s
        results: list[Any] = []
        if not await self._item_phase(limit, results):
            return results
        if self._references_pending():
            return results  # scoring.md §12: reference sets are final before any trial is sent
        waiting: list[Trial] = list(trials)
        while True:  # rounds: a second stage waits for its first stage (prompts.md §9)
            ready, later = await self._ready(waiting)
            sent = len(ready)  # the workers empty the queue
            results += await self._drain(ready, limit)
            if not await self._trial_step_phase(limit, results):
                return results
            if not sent or s.stop_reason is not None:
                break  # nothing more can become ready in this session
            waiting = later
        return results

    async def _reload(self) -> None:
        """Load the steps' state from the ledger as committed (in the writer thread)."""
        s = self.s
        work = s.steps
        writer = s.recorder.writer
        assert work is not None and writer is not None
        await writer.call(lambda: work.load(s.log))

    async def _item_phase(self, limit: AdaptiveLimit, results: list[Any]) -> bool:
        """Run the item steps layer by layer; False when the session stopped meanwhile."""
        s = self.s
        work = s.steps
        assert work is not None
        more, tried = True, set[str]()
        while more:  # a rejected sample makes an earlier layer's next sample due (§8.6)
            more = False
            for layer in work.render.layers("item"):
                await self._reload()
                if s.stop_reason is not None:
                    return False
                due = deque(work.pending_item_calls(layer, s.selected))
                fresh = {c.id for c in due} - tried  # a call tried this session waits
                more = more or (bool(fresh) and bool(work.verified))
                tried |= fresh
                results += await self._drain(due, limit)
        await self._reload()
        return s.stop_reason is None

    def _references_pending(self) -> bool:
        """Whether the ddx reference step still has calls to make (``scoring.md`` §12)."""
        s = self.s
        assert s.steps is not None
        ddx = s.study.ddx
        reference = ddx.reference_step if ddx is not None else None
        return reference is not None and bool(
            s.steps.pending_item_calls([reference], list(s.study.steps[reference].models))
        )

    async def _ready(self, waiting: list[Trial]) -> tuple[deque[Trial], list[Trial]]:
        """Of ``waiting``: the trials ready to send, and those whose first stage is not final.

        A trial whose item steps are not final yet is left for another session; one whose
        item steps or first stage exclude it is recorded as ``trial.excluded``.
        """
        s = self.s
        work = s.steps
        assert work is not None
        ready: deque[Trial] = deque()
        later: list[Trial] = []
        for trial in waiting:
            if not work.item_steps_final(trial.stimulus):
                continue  # an item step still pending (another session's models): not yet
            values = work.item_inputs(trial.stimulus)
            if values is None:
                await self._exclude(trial, work.missing_step(trial.stimulus))
                continue
            prior = self._prior(trial)
            if prior is None:
                later.append(trial)
                continue
            if isinstance(prior, str):
                await self._exclude(trial, "", prior)
                continue
            s.builder.renderer.prior_values[trial.id] = prior
            s.builder.renderer.step_values[trial.stimulus] = values
            ready.append(trial)
        return ready, later

    async def _trial_step_phase(self, limit: AdaptiveLimit, results: list[Any]) -> bool:
        """Run the trial steps layer by layer; False when the session stopped meanwhile."""
        s = self.s
        work = s.steps
        assert work is not None and s.state is not None
        order = [t.id for t in s.state.order]
        for layer in work.render.layers("trial"):
            await self._reload()
            if s.stop_reason is not None:
                return False
            results += await self._drain(
                deque(work.pending_trial_calls(layer, order, s.selected)), limit
            )
        await self._reload()
        return True

    def _prior(self, trial: Trial) -> dict[str, str] | str | None:
        """The ``{prior.*}`` values of ``trial`` (prompts.md §9).

        A string says why it is excluded; None: its first stage is not final yet.
        """
        s = self.s
        spec = s.study.arms[trial.arm]
        if spec.after is None:
            return {}
        assert s.steps is not None and s.state is not None
        return prior_values(s.study, s.steps, s.state, trial, spec.after)

    async def _exclude(self, trial: Trial, step: str, why: str | None = None) -> None:
        """Record ``trial`` as excluded (``trial.excluded``).

        An item step it reads has no decision that keeps it, or (``why``) its first stage gave
        no answer to build on (prompts.md §9).
        """
        s = self.s
        assert s.steps is not None and s.state is not None
        if why is not None:
            after = s.study.arms[trial.arm].after or {}
            body = {
                "trial": trial.id,
                "item": trial.stimulus,
                "step": after.get("answer", ""),
                "prior": prior_trial(trial.id, after.get("arm", "")),
                "reason": why,
            }
        else:
            spec = s.study.steps[step]
            decision = s.steps.decision(step, trial.stimulus)
            kept = list(spec.keep) if spec.keep is not None else spec.keep_rule
            reason = (
                f"screened out by step {step!r} (decision {decision!r}, kept: {kept})"
                if spec.screens and decision is not None
                else s.steps.rejection(step, trial.stimulus)
                or f"step {step!r} reached no decision for item {trial.stimulus!r}"
            )
            body = {"trial": trial.id, "item": trial.stimulus, "step": step, "reason": reason}
        seq = await s.recorder.write(EventSpec("trial.excluded", body))
        s.state.trials[trial.id].excluded = seq
        s.final += 1
        s.tick()

    # ------------------------------------------------------------------ data trials

    async def _supply(self, trials: Sequence[Trial]) -> None:
        """Record data trials (``docs/trials.md`` §6), in the order given, chunk by chunk.

        Each trial's two events are appended in one transaction from the writer thread (the
        response's ``request_seq`` is the seq its request receives), so a crash leaves both or
        neither: a data trial is never dangling, and a restart takes only those not recorded.
        """
        s = self.s
        writer = s.recorder.writer
        assert writer is not None and s.state is not None
        for start in range(0, len(trials), s.DATA_CHUNK):
            if s.stop_reason is not None:
                return
            chunk = list(trials[start : start + s.DATA_CHUNK])
            attempts = [s.state.trials[t.id].attempts + 1 for t in chunk]
            pending = writer.call(functools.partial(s.record_data, chunk, attempts))
            try:
                seqs = await asyncio.shield(pending)
            except asyncio.CancelledError:  # committed regardless: count it, then go
                await asyncio.wait([pending])
                if not pending.cancelled() and pending.exception() is None:
                    for trial, attempt, seq in zip(chunk, attempts, pending.result(), strict=True):
                        s.supplied(s.state.trials[trial.id], attempt, seq)
                raise
            for trial, attempt, seq in zip(chunk, attempts, seqs, strict=True):
                s.supplied(s.state.trials[trial.id], attempt, seq)
            s.tick()

    # ------------------------------------------------------------------ one trial

    async def _run_trial(self, trial: Trial | StepCall, limit: AdaptiveLimit) -> None:
        s = self.s
        assert s.state is not None
        record: TrialState | CallState
        if isinstance(trial, StepCall):
            assert s.steps is not None
            record = s.steps.state(trial)
            wire = s.backend.wire_body(s.steps.body(trial))
        else:
            record = s.state.trials[trial.id]
            if s.is_data(trial):
                await self._supply([trial])
                return
            wire = s.backend.wire_body(s.builder.body(trial))
        until = s.options.until
        while s.stop_reason is None:
            if until is not None and datetime.now(UTC) >= until:
                s.request_stop(f"until: reached {until.isoformat()}")
                return
            reserved = s.reserve(trial, wire)
            if reserved is None:
                return
            self.in_flight.add(trial.id)
            try:
                delay = await self._attempt(trial, record, wire, reserved, limit)
            finally:
                self.in_flight.discard(trial.id)
            if delay is None:
                return
            await s.pause(delay)
            await limit.requeue()  # a lowered limit applies to retries in flight too

    async def _attempt(
        self,
        trial: Trial | StepCall,
        record: TrialState | CallState,
        wire: dict[str, Any],
        reserved: float,
        limit: AdaptiveLimit,
    ) -> float | None:
        """One attempt: record the request, send it, record the outcome.

        Returns the back-off to wait before the next attempt, or None when the trial is done
        with in this session (answered, given up, stopped, interrupted).
        """
        s = self.s
        attempt = record.attempts + 1
        record.attempts = attempt
        request = s.recorder.request(trial, attempt, wire)
        try:
            seq = await s.recorder.write(request)
        except asyncio.CancelledError:
            s.counters.reserved_usd -= reserved
            raise  # nothing was sent; the next session closes the request as interrupted
        except RefusedError as refused:  # another worker's outcome came first (PostgreSQL)
            s.counters.reserved_usd -= reserved
            record.attempts = attempt - 1
            self._refused(trial, refused)
            return None
        if s.interrupted_by is not None:
            # a second Ctrl-C (or SIGTERM) came while the request was being recorded
            s.counters.reserved_usd -= reserved
            s.counters.cancelled += 1
            await self._write_interrupted(
                trial,
                attempt,
                seq,
                f"not sent: interrupted by {s.interrupted_by} after this request was "
                "recorded and before it was sent",
            )
            return None
        started = time.monotonic()
        try:
            reply = await self._call(trial, wire, request, f"{s.study.seed}|{trial.id}|{attempt}")
        except BackendError as error:
            s.counters.reserved_usd -= reserved
            return await self._failed(trial, record, attempt, seq, error, limit)
        except asyncio.CancelledError:
            s.counters.reserved_usd -= reserved
            if await self._cancelled(trial, attempt, seq):
                raise
            return None
        s.retry.responded()
        s.counters.reserved_usd -= reserved
        return await self._answered(
            trial, record, attempt, seq, reply, time.monotonic() - started, limit
        )

    async def _call(
        self, trial: Trial | StepCall, wire: dict[str, Any], request: EventSpec, seed: str
    ) -> Reply:
        """Send the request, cancellable by a signal (:meth:`on_signal`) while in flight."""
        call = asyncio.ensure_future(self._send(wire, request, seed))
        self.calls[call] = trial
        try:
            return await call
        finally:
            self.calls.pop(call, None)

    async def _cancelled(self, trial: Trial | StepCall, attempt: int, seq: int) -> bool:
        """Record a call cancelled in flight as interrupted.

        True when the worker itself is being cancelled (the caller re-raises), False when the
        call alone was (a second Ctrl-C, or SIGTERM).
        """
        s = self.s
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            # this worker itself is being cancelled: record, then let it go
            await self._write_interrupted(trial, attempt, seq, "cancelled while in flight")
            return True
        # the call alone was cancelled: a second Ctrl-C, or SIGTERM
        s.counters.cancelled += 1
        await self._write_interrupted(
            trial,
            attempt,
            seq,
            f"interrupted by {s.interrupted_by or 'a signal'} while in flight; the "
            "request may or may not have reached the API",
        )
        return False

    async def _answered(
        self,
        trial: Trial | StepCall,
        record: TrialState | CallState,
        attempt: int,
        seq: int,
        reply: Reply,
        latency: float,
        limit: AdaptiveLimit,
    ) -> float | None:
        """Record a response; as :meth:`_attempt` returns."""
        s = self.s
        spec, cost = s.recorder.response(
            trial, attempt, seq, reply, latency, s.budget.price_of(trial)
        )
        # with steps (a step call is one), later stages read this response: wait for its seq
        staged = s.steps is not None
        if staged:
            seq = await s.recorder.write(spec)
        else:
            assert isinstance(record, TrialState)
            s.budget.unrecorded_usd += cost or 0.0
            self._write_behind(spec, record, cost or 0.0)  # durable before anything sent after it
        s.budget.observed(trial, reply.usage)
        s.counters.responded += 1
        s.counters.cost_usd += cost or 0.0
        if isinstance(trial, StepCall):
            assert isinstance(record, CallState) and s.steps is not None
            s.step_calls += 1
            await limit.succeeded()
            s.counters.concurrency = limit.limit
            s.tick()
            return self._step_answered(trial, record, seq, reply_text(reply.raw, reply.format))
        assert isinstance(record, TrialState)
        if staged:  # else _written_behind sets it once committed
            record.responded = seq
        s.final += 1
        await limit.succeeded()
        s.counters.concurrency = limit.limit
        s.tick()
        return None

    def _send(self, wire: dict[str, Any], request: EventSpec, seed: str) -> Awaitable[Reply]:
        """Send ``wire``: as the very bytes ``request`` recorded, where the backend takes them.

        A backend with ``send_encoded`` (the ``anthropic`` one) posts the request blob as it is,
        so it is not serialised a second time and the bytes sent are the bytes hashed.
        """
        backend = self.s.backend
        send_encoded = getattr(backend, "send_encoded", None)
        data = request.blobs.get("request") if request.blobs else None
        if send_encoded is not None and isinstance(data, bytes):
            sent: Awaitable[Reply] = send_encoded(wire, data, seed=seed)
            return sent
        return backend.send(wire, seed=seed)

    async def _write_interrupted(
        self, trial: Trial | StepCall, attempt: int, request_seq: int, message: str
    ) -> None:
        """Record the attempt ``request_seq`` as interrupted (its outcome is unknown)."""
        s = self.s
        error = BackendError("interrupted", message, retryable=True)
        assert s.recorder.writer is not None
        spec = s.recorder.failure(trial, attempt, request_seq, error, final=False)
        done = s.recorder.writer.submit(spec)
        await asyncio.wait([done])
        s.counters.interrupted += 1
        s.tick()

    async def _failed(
        self,
        trial: Trial | StepCall,
        record: TrialState | CallState,
        attempt: int,
        seq: int,
        error: BackendError,
        limit: AdaptiveLimit,
    ) -> float | None:
        """Record a failed attempt; the back-off before the next one, or None if none is due."""
        s = self.s
        error = s.retry.same_error(error)
        if error.error_type not in NOT_COUNTED:
            record.failures += 1
        s.counters.failed += 1
        verdict = s.retry.verdict(error, record.failures)
        if verdict in (Verdict.STOP, Verdict.UNREACHABLE):
            await self._write_outcome(s.recorder.failure(trial, attempt, seq, error, final=False))
            if verdict is Verdict.STOP:
                s.fatal = error.message
                s.request_stop(f"error: {error.message}")
            else:
                s.fatal = s.retry.unreachable(error)
                s.request_stop(f"error: unreachable: {error.message}")
            s.tick()
            return None
        final = verdict is Verdict.GIVE_UP
        written = await self._write_outcome(
            s.recorder.failure(trial, attempt, seq, error, final=final)
        )
        if final:
            if written is not None:  # else another worker's final outcome came first
                record.given_up = seq
                s.counters.given_up += 1
                if not isinstance(trial, StepCall):
                    s.final += 1
                s.tick()
            return None
        if error.overloaded:
            limit.overloaded()
            s.counters.concurrency = limit.limit
        s.counters.retries += 1
        s.tick()
        return s.retry.backoff(record.failures, error)

    def _step_answered(
        self, call: StepCall, record: CallState, seq: int, text: str
    ) -> float | None:
        """After a step response: None when the call is final, else 0 (send it again).

        A response that does not parse earns the call ``on_unparseable.retry`` more attempts;
        after them its vote is missing, and with ``then = "stop"`` the run stops
        (``docs/trials.md`` §5).
        """
        s = self.s
        assert s.steps is not None
        if not s.steps.observe(call.step, record, seq, text):
            return 0.0
        spec = s.study.steps[call.step]
        work = s.steps
        for host, ver in work.verified.items():  # prompts.md §8.6: no sample accepted
            if spec.on != "item" or ver.then != "stop":
                continue
            rejected = work.rejection(host, call.stimulus)
            if rejected is not None:
                s.fatal = (
                    f"{rejected} (last call {call.id}, seq {seq}); [steps.{host}] "
                    'verified_by then = "stop"'
                )
                s.request_stop(f"error: {s.fatal}")
                return None
        if record.exhausted is not None and spec.then == "stop":
            s.fatal = (
                f"step {call.step}: call {call.id} gave {record.unparseable} unparseable "
                f"response(s) (last at seq {seq}); [steps.{call.step}] on_unparseable then = "
                '"stop"'
            )
            s.request_stop(f"error: {s.fatal}")
        return None

    # ------------------------------------------------------------------ outcomes and refusals

    def _write_behind(self, spec: EventSpec, record: TrialState, cost: float = 0.0) -> None:
        """Submit a ``trial.responded`` to the group writer without waiting for its commit.

        The worker goes on to its next trial at once; the writer commits in the order events
        are submitted, so the response is durable before any request submitted after it is
        sent (the next request's commit carries it, or follows it). ``record.responded`` is set
        when it is committed; a failed commit stops the run like a crash, and the session waits
        for every response before it closes.
        """
        self.s.recorder.submit_behind(
            spec, functools.partial(self._written_behind, record, spec, cost)
        )

    def _written_behind(
        self, record: TrialState, spec: EventSpec, cost: float, future: asyncio.Future[Event]
    ) -> None:
        s = self.s
        s.budget.unrecorded_usd -= cost
        error = None if future.cancelled() else future.exception()
        if error is None and not future.cancelled():
            record.responded = future.result().seq
            return
        if isinstance(error, RefusedError):
            s.counters.responded -= 1
            s.final -= 1
            self._superseded(spec, error)
            return
        if error is not None and s.recorder.crashed(error):
            s.request_stop(f"crash: {type(error).__name__}: {error}")

    async def _write_outcome(self, spec: EventSpec) -> int | None:
        """Commit an outcome; None when the store refused it (:meth:`_superseded` followed)."""
        try:
            return await self.s.recorder.write(spec)
        except RefusedError as refused:
            self._superseded(spec, refused)
            return None

    def _superseded(self, spec: EventSpec, refused: RefusedError) -> None:
        """An outcome the store refused (PostgreSQL, ``docs/trials.md`` §8).

        ``final``: another worker recorded the trial's final outcome first (this worker's lease
        had run out); the request still needs its one outcome, so a non-final ``trial.failed``
        of type ``superseded`` is recorded for it. ``answered``: a worker that reaped this one
        has already closed the request (as interrupted); this worker lost its session and stops.
        """
        failure = superseded_failure(spec, refused)
        if failure is None:
            self.s.lost(refused)
            return
        self.s.recorder.submit_behind(failure, self._superseded_written)
        self.s.counters.failed += 1

    def _superseded_written(self, future: asyncio.Future[Event]) -> None:
        s = self.s
        error = None if future.cancelled() else future.exception()
        if isinstance(error, RefusedError):
            s.lost(error)
        elif error is not None and s.recorder.crashed(error):
            s.request_stop(f"crash: {type(error).__name__}: {error}")

    def _refused(self, trial: Trial | StepCall, refused: RefusedError) -> None:
        """A request the store refused: the trial is final elsewhere, or this worker is lost."""
        s = self.s
        if refused.rule == "final":
            return  # another worker finished it; this worker goes on with the next
        if refused.rule == "attempt" and s.shared is not None:
            s.shared.link.release([trial.id])  # claimed again with the store's count
            s.retake.append(trial.id)
            return
        s.lost(refused)
