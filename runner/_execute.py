"""``ledger run``: replay the locked schedule against a backend, crash-safe and resumable.

The rules (``docs/trials.md``):

- Before a request is sent, ``trial.requested`` (the exact body as a blob) is appended and
  committed; after it, ``trial.responded`` (raw body as a blob) or ``trial.failed``. Nothing is
  sent for a trial that has a final outcome, so a restart never answers a trial twice.
- A request recorded with no outcome (the runner was killed) is closed at the next start with a
  ``trial.failed`` of type ``interrupted`` and attempted again with the next attempt number.
- 429, 529, 5xx, timeouts, dropped connections and malformed bodies are retried with
  exponential back-off and jitter, honouring ``retry-after``; 429/529 halve the concurrency,
  which then climbs back one step per window of successes. A retry waits for a slot under the
  current limit, so a lowered limit also holds back trials that were already in flight.
  After ``max_attempts`` failed attempts a trial is given up (``final: true``). Any other
  status (400, 401, 403, ...) stops the run with the server's message; the trial stays pending.
  A 404 (a wrong ``--base-url`` path, or a model the server does not have) is a configuration
  error: it stops the run, naming the URL, and does not count against ``max_attempts``.
- ``--budget-usd`` caps the study's spend, across sessions: what earlier sessions spent (the
  ``cost_usd`` of the recorded responses) counts against it. Before each request the most it
  could cost (its input tokens and ``max_tokens`` of output) is reserved; a request that could
  push the total over the budget is not sent and the run stops. A session without a price (a
  backend other than ``anthropic``, or a model missing from ``runner/_pricing.py``) refuses a
  budget unless it is given prices (``price_in`` / ``price_out``), recorded in ``run.started``.
- Ctrl-C (SIGINT): no new request starts, requests in flight finish; a second Ctrl-C, or
  SIGTERM, cancels them and records them as interrupted (:mod:`runner._control`). Then
  ``run.stopped`` and a signed checkpoint. A signal before the session started stops the run
  before anything is recorded.
- One runner per study on SQLite: an exclusive ``flock`` on ``STUDY/.ledger-run.lock`` (one
  file, one writer: SQLite serialises writers itself, but two sessions would each send every
  pending trial). On PostgreSQL any number of ``ledger run`` workers share a study through
  leases in the database instead (:mod:`runner._workers`, ``docs/trials.md`` §8).
- Before the session, the server is asked which models it serves (:mod:`runner._identity`,
  recorded as ``server_identity``), and one recorded ``run.preflight`` per request shape
  (trials' and step calls') shows that the backend accepts a request naming each locked model
  and takes the study's requests (:mod:`runner._preflight`); a refused preflight stops the run
  before any trial or step call is sent. ``ledger run --check`` does only that.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path
from typing import Any, Protocol

from ledger import Event, Ledger, PostgresLocation, SigningKey
from runner._backends import Backend, BackendError, provider_refusal
from runner._budget import request_input_tokens
from runner._calls import CallDriver
from runner._control import RunControl
from runner._identity import ASK_TIMEOUT_SECONDS, ServerIdentity, unanswered
from runner._leases import ROTATE
from runner._limit import AdaptiveLimit
from runner._lock import StudyError, check_integrity, ledger_path, sign_missing_checkpoints
from runner._options import Counters, ProgressHook, RunOptions, RunResult, given_prices
from runner._preflight import Planned, Preflight, plan_preflights, run_preflights
from runner._pricing import Price
from runner._recording import GroupWriter
from runner._request import RequestBuilder, Trial
from runner._session import Session
from runner._state import StudyState, load_state, locked_order
from runner._workers import SharedRun, reap_dead, worker_mode
from runner.spec import Study
from runner.steps._core import StepCall
from runner.steps._plan import step_study_plan

__all__ = [
    "LOCK_FILE",
    "ROTATE",
    "AdaptiveLimit",
    "Counters",
    "GroupWriter",
    "ProgressHook",
    "RunOptions",
    "RunResult",
    "Runner",
    "SessionDriver",
    "check_provider",
    "check_study",
    "given_prices",
    "request_input_tokens",
    "run_lock",
    "run_study",
    "session_models",
    "session_witnesses",
]

LOCK_FILE = ".ledger-run.lock"
#: The error recorded for every request a stopped session left without an outcome.
INTERRUPTED = (
    "the runner stopped after this request was recorded and before its outcome was; the "
    "request may or may not have reached the API"
)


@contextlib.contextmanager
def run_lock(root: Path) -> Iterator[None]:
    """Hold the study's run lock, or refuse naming the process that holds it.

    A SQLite study runs one ``ledger run`` at a time: SQLite would serialise two writers, but
    each session sends every pending trial it sees, so two would answer trials twice, and the
    file lives on one machine anyway. A PostgreSQL study has no such lock: its workers share
    the pending trials through leases in the database (``docs/trials.md`` §8).
    """
    path = Path(root) / LOCK_FILE
    handle = path.open("a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise StudyError(
                f"{root}: another 'ledger run' is already running on this study "
                f"(pid {holder}, lock {path}); wait for it to stop, or stop it with Ctrl-C "
                "(a study whose ledger is on PostgreSQL runs any number of workers at once)"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
    finally:
        handle.close()


class SessionDriver(Protocol):
    """What sends a session's requests.

    Call by call (:class:`runner._calls.CallDriver`) or in Message Batches
    (:class:`runner._batch.BatchRunner`). Both compose the session's context
    (:class:`runner._session.Session`); the runner opens and closes the session around them.
    """

    batch: bool

    async def drive(self) -> list[BaseException]:
        """Send the session's pending requests; the unexpected errors of its workers."""
        ...

    def on_signal(self, name: str, *, first: bool, interrupt: bool) -> str | None:
        """Ctrl-C or SIGTERM in the session; the line to show (:mod:`runner._control`)."""
        ...


class Runner:
    """One session of ``ledger run`` over an open ledger: opened, driven, closed.

    The runner owns the session's life (preflight, ``run.started``, the closing of requests
    left open, ``run.stopped`` and its checkpoint); its parts are collaborators it composes:
    the context and its budget, recorder, witnesses and retry policy
    (:class:`runner._session.Session`), and the driver that sends the requests (``driver``:
    call by call unless a backend supplies its own, :class:`runner._batch.BatchRunner`).
    """

    def __init__(
        self,
        study: Study,
        log: Ledger,
        key: SigningKey,
        backend: Backend,
        options: RunOptions,
        progress: ProgressHook | None = None,
        control: RunControl | None = None,
        *,
        driver: Callable[[Session], SessionDriver] = CallDriver,
        batch: bool = False,
    ) -> None:
        """Prepare a session; :meth:`run` does the work.

        ``control`` handles Ctrl-C and SIGTERM (:mod:`runner._control`); without one, the
        session makes its own, active while the session runs (in the main thread only).
        ``batch``: the driver sends Message Batches (priced at their discount).
        """
        selected = session_models(study, backend, options.models)
        self.s = Session(
            study,
            log,
            key,
            backend,
            options,
            selected=selected,
            witnesses=session_witnesses(log),
            batch=batch,
            progress=progress,
            control=control,
        )
        self.driver = driver(self.s)
        self.batch = batch
        # what the server said about the session's models (runner/_identity.py); None: not asked
        self.identity: ServerIdentity | None = None
        self._asked = False

    # ------------------------------------------------------------------ the preflight's host

    @property
    def study(self) -> Study:
        """The locked study."""
        return self.s.study

    @property
    def log(self) -> Ledger:
        """The study's ledger."""
        return self.s.log

    @property
    def key(self) -> SigningKey:
        """The key the session signs with."""
        return self.s.key

    @property
    def backend(self) -> Backend:
        """The backend the session sends to."""
        return self.s.backend

    @property
    def options(self) -> RunOptions:
        """The session's options."""
        return self.s.options

    @property
    def builder(self) -> RequestBuilder:
        """The study's request builder."""
        return self.s.builder

    @property
    def control(self) -> RunControl | None:
        """The session's signal handling (:mod:`runner._control`)."""
        return self.s.control

    @property
    def price(self) -> Price | None:
        """The price the session is costed with (None: unpriced)."""
        return self.s.budget.price

    @property
    def witnesses(self) -> Any:
        """The witness policy the study locked, or None."""
        return self.s.witness.policy

    @property
    def shared(self) -> SharedRun | None:
        """On PostgreSQL: this process as one of the study's workers."""
        return self.s.shared

    @shared.setter
    def shared(self, value: SharedRun | None) -> None:
        self.s.shared = value

    def worst_cost(
        self, trial: Trial | StepCall, wire: dict[str, Any], *, batch: bool | None = None
    ) -> float:
        """The most the request ``wire`` of ``trial`` can cost (a priced session only)."""
        return self.s.budget.worst_cost(trial, wire, batch=batch)

    def backoff(self, failures: int, error: BackendError) -> float:
        """Seconds to wait after the ``failures``-th failure (``retry-after``, else jitter)."""
        return self.s.retry.backoff(failures, error)

    def pending(self, state: StudyState) -> list[Trial]:
        """The pending trials this session may run (those of its models), in schedule order."""
        return self.s.pending(state)

    # ------------------------------------------------------------------ before the session

    def _refuse_sealed(self) -> None:
        sealed = next(iter(self.log.events("scoring.sealed")), None)
        if sealed is not None:
            raise StudyError(
                f"{self.study.root}: scoring was sealed at seq {sealed.seq}; data collection "
                "is closed and no trial may be run after it"
            )

    async def preflight(self, *, check: bool = False) -> list[Preflight]:
        """Send and record the preflight requests (:mod:`runner._preflight`) of this session.

        One per request shape among the requests the session would send: its trials (the
        pending ones, at most ``max_trials``; with ``check`` and nothing pending, the whole
        schedule) and, in a study with steps, its step calls (every step model's, judges
        included), before any of them is sent. None when nothing is pending (except for
        ``check``). Raises :class:`runner._errors.PreflightError` when the backend refuses one.
        """
        self._refuse_sealed()
        state = load_state(self.study, self.log)
        await self.ask_server()
        trials = self.pending(state)
        if self.options.max_trials is not None:
            trials = trials[: self.options.max_trials]
        if not trials and check:
            trials = [t for t in state.order if t.model in self.s.selected]
        trials = [t for t in trials if not self.s.is_data(t)]  # a data trial sends no request
        if self.s.steps is None:
            planned = [Planned(t, b, s) for t, b, s in plan_preflights(trials, self.builder.body)]
        else:
            planned = step_study_plan(self.s, trials, state, check=check)
        return await run_preflights(self, planned, check=check, spent=state.cost_usd)

    async def ask_server(self) -> ServerIdentity | None:
        """Ask the server which models it serves, once per session (:mod:`runner._identity`).

        Not for a simulated backend (None: nothing is recorded). A backend without a way to
        ask is recorded as such. Nothing here is recorded or paid for; a signal while waiting
        stops the run before anything is recorded.
        """
        if self._asked:
            return self.identity
        if self.control is not None:
            self.control.check()  # a signal already: ask nothing
        self._asked = True
        if self.backend.simulated:
            return None
        ids = list(
            dict.fromkeys(m.id for m in self.study.model_specs() if m.name in self.s.selected)
        )
        ask = getattr(self.backend, "server_identity", None)
        if ask is None:
            self.identity = unanswered(
                ids, [], f"the {self.backend.name} backend has no way to ask its server"
            )
            return self.identity
        self.identity = await self._answer(asyncio.ensure_future(ask(ids)), ids)
        return self.identity

    async def _answer(self, call: asyncio.Future[ServerIdentity], ids: list[str]) -> ServerIdentity:
        """Wait for the server's answer: at most a while, and never past a signal."""
        control = self.control
        started = time.monotonic()
        while True:
            done, _ = await asyncio.wait([call], timeout=0.05)
            if done:
                break
            stopping = control is not None and control.stopping
            if stopping or time.monotonic() - started > ASK_TIMEOUT_SECONDS + 5:
                call.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await call
                if stopping:
                    assert control is not None
                    control.check()  # raises: nothing was recorded or sent
                return unanswered(
                    ids, [], f"no answer within {ASK_TIMEOUT_SECONDS + 5:.0f} seconds"
                )
        try:
            return call.result()
        except Exception as exc:  # a backend's own failure to ask is recorded, never fatal
            return unanswered(ids, [], f"asking failed: {type(exc).__name__}: {exc}")

    def server_warnings(self) -> list[str]:
        """What the server said about the locked models, as warnings (:mod:`runner._identity`)."""
        if self.identity is None:
            return []
        from runner._preflight import backend_url

        url = backend_url(self.backend)
        where = f"the {self.backend.name} backend" + (f" at {url}" if url else "")
        return self.identity.warnings(where)

    async def check(self) -> list[Preflight]:
        """``ledger run --check``: the preflight alone, with this session's signal handling."""
        own = self.control is None
        control = self.s.control = self.control or RunControl()
        if own:
            control.install()
        try:
            control.check()
            return await self.preflight(check=True)
        finally:
            if own:
                control.restore()

    def _others(self) -> None:
        """Refuse to run beside another worker when either runs alone (docs/trials.md §8)."""
        from ledger import list_workers

        assert self.shared is not None
        for worker in list_workers(self.log):
            if worker.id == self.shared.id:
                continue
            if self.shared.mode == "alone" or worker.mode == "alone":
                alone = (
                    self.shared.why if self.shared.mode == "alone" else ("it runs the study alone")
                )
                raise StudyError(
                    f"{self.study.root}: worker {worker.describe()} is running this study, and "
                    f"no two workers may share it: {alone}; wait for it to stop (a worker "
                    f"that died counts as stopped {worker.lease_seconds:g} s after its last "
                    "heartbeat); nothing was recorded"
                )

    # ------------------------------------------------------------------ opening

    def _open_session(self) -> StudyState:
        if self.shared is None:
            return self._start_session()
        from ledger import list_workers, register_worker

        shared = self.shared
        reap_dead(self.log, self.key, by=shared.id, trials=len(locked_order(self.study, self.log)))
        with self.log.transaction():
            self._others()
            live = sorted(w.session for w in list_workers(self.log))
            state = self._start_session(concurrent=live)
            register_worker(self.log, shared.id, self.s.seq, shared.mode, shared.lease_seconds)
        return state

    def _start_session(self, concurrent: list[int] | None = None) -> StudyState:
        """Append ``run.started`` and close the requests left open by stopped sessions.

        ``concurrent`` (PostgreSQL): the run sessions of the live workers, recorded in
        ``run.started`` when there are any; their open requests are theirs, not dangling.
        """
        self._refuse_sealed()
        sign_missing_checkpoints(self.log, self.key)  # a session killed before its checkpoint
        state = load_state(self.study, self.log)
        if self.control is not None:
            self.control.open_session()  # a signal before this point: nothing is recorded
        pending = self.pending(state)
        self.s.budget.spent_before = state.cost_usd
        started = self.log.append(
            "run.started", self._started_body(state, pending, concurrent), key=self.key
        )
        self.s.recorder.session = started.seq
        self._close_dangling_trials(state, concurrent)
        self._close_dangling_calls()
        self.s.final = len(state.order) - len(pending)
        return state

    def _started_body(
        self, state: StudyState, pending: list[Trial], concurrent: list[int] | None
    ) -> dict[str, Any]:
        """The body of ``run.started``."""
        options, backend = self.options, self.backend
        return {
            "backend": backend.name,
            "model": self.s.model,
            **({"models": list(self.s.selected)} if self.study.models is not None else {}),
            "simulated": backend.simulated,
            "package_version": version("prompt-ledger"),
            "trials": len(state.order),
            "final_before": len(state.order) - len(pending),
            "pending": len(pending),
            "concurrency": options.concurrency,
            "max_attempts": options.max_attempts,
            "budget_usd": options.budget_usd,
            # a real backend: what its server said about the models (runner/_identity.py)
            **({"server_identity": self.identity.as_dict()} if self.identity is not None else {}),
            # priced sessions only (a simulated run's events stay as they were)
            **self.s.budget.started_record(state.cost_usd),
            # other workers' sessions still open beside this one (docs/trials.md §8)
            **({"concurrent": concurrent} if concurrent else {}),
        }

    def _close_dangling_trials(self, state: StudyState, concurrent: list[int] | None) -> None:
        """Close every trial request left without an outcome as ``interrupted``."""
        for trial, seq in state.dangling():
            if concurrent and state.trials[trial.id].open_session in concurrent:
                continue  # a live worker's request: its own to finish
            self.s.recorder.append_failure(
                trial,
                state.trials[trial.id].attempts,
                seq,
                BackendError("interrupted", INTERRUPTED, retryable=True),
                final=False,
            )
            state.trials[trial.id].open_request = None
            self.s.counters.interrupted += 1

    def _close_dangling_calls(self) -> None:
        """Close every step call request left without an outcome as ``interrupted``."""
        steps = self.s.steps
        if steps is None:
            return
        steps.load(self.log)
        for call_id, seq in steps.dangling():
            record = steps.calls[call_id]
            self.s.recorder.append_failure(
                self.s.call_of(call_id),
                record.attempts,
                seq,
                BackendError("interrupted", INTERRUPTED, retryable=True),
                final=False,
            )
            record.open_request = None
            self.s.counters.interrupted += 1

    # ------------------------------------------------------------------ the session

    def request_stop(self, reason: str) -> None:
        """Start no new request; the first reason given is the one recorded."""
        self.s.request_stop(reason)

    def on_signal(self, name: str, *, first: bool, interrupt: bool) -> str | None:
        """Ctrl-C or SIGTERM in the session: the driver's answer (:mod:`runner._control`)."""
        return self.driver.on_signal(name, first=first, interrupt=interrupt)

    async def _witness_start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Cosign every promised checkpoint up to this session's start, before any trial.

        The session-start checkpoint is the tree right after ``run.started``
        (``docs/witness.md`` section 8); earlier promised ones still short of the quorum (a
        lock or a stop whose witnesses were unreachable) are asked for first.
        """
        why = await self.s.witness.start(loop, self.s.seq + 1)
        if why is not None:
            self.s.request_stop(why)

    async def run(self) -> RunResult:
        """Open the session, let the driver run it, and close it with ``run.stopped``.

        Ctrl-C and SIGTERM are handled throughout (:mod:`runner._control`): before the session
        they stop it from starting (:class:`runner._control.RunInterruptedError`, nothing
        recorded); in it, the session still ends with ``run.stopped`` and a checkpoint.
        """
        own = self.control is None
        control = self.s.control = self.control or RunControl()
        if own:
            control.install()
        loop = asyncio.get_running_loop()
        try:
            control.check()
            if self.shared is not None:
                self._others()  # before the preflight: a worker running alone is not joined
            preflights = await self.preflight() if self.options.preflight else []
            await self.ask_server()  # asked once: by the preflight, else here
            control.check()
            self.s.state = self._open_session()
            if self.shared is not None:

                def lost(why: str) -> None:
                    loop.call_soon_threadsafe(self.s.request_stop, why)

                self.shared.start_heartbeat(lost)
            control.attach(loop, self)
            try:
                await self._witness_start(loop)
                errors = await self.driver.drive()
            finally:
                control.detach()
            result = self._close()  # a signal now is ignored: the session closes whole
            result = replace(
                result, preflights=tuple(preflights), server_warnings=tuple(self.server_warnings())
            )
        finally:
            if self.shared is not None:
                self.shared.stop_heartbeat()
            if own:
                control.restore()
        return self._raise_errors(result, errors)

    def _raise_errors(self, result: RunResult, errors: list[BaseException]) -> RunResult:
        """``result``, unless the witnesses refused or a worker failed unexpectedly."""
        witness_error = self.s.witness.error
        if witness_error is not None:
            raise type(witness_error)(
                f"{witness_error}; the run stopped (run.stopped at seq "
                f"{result.stopped_seq}: {result.reason})"
            ) from witness_error
        if errors:
            raise StudyError(
                f"the run stopped on an unexpected error ({type(errors[0]).__name__}: "
                f"{errors[0]}); recorded run.stopped at seq {result.stopped_seq}"
            ) from errors[0]
        return result

    # ------------------------------------------------------------------ closing

    def steps_pending(self) -> int:
        """Step calls due and not final (after the session: what a next session would run)."""
        s = self.s
        if s.steps is None or s.state is None:
            return 0
        work = s.steps
        pending = sum(
            len(work.pending_item_calls(layer, s.selected)) for layer in work.render.layers("item")
        )
        order = [t.id for t in s.state.order]
        return pending + sum(
            len(work.pending_trial_calls(layer, order, s.selected))
            for layer in work.render.layers("trial")
        )

    def _reason(self, pending: int, steps_pending: int) -> str:
        """Why the session stopped, as ``run.stopped`` records it."""
        s = self.s
        lost = s.shared.lost if s.shared is not None else None
        if lost is not None:
            return lost
        if pending == 0 and steps_pending == 0:
            return "complete"  # even if a stop came after the last trial was sent
        if s.stop_reason is not None:
            return s.stop_reason
        if self.options.max_trials is not None:
            return f"max-trials: {self.options.max_trials} trials run"
        if steps_pending:
            return f"steps: {steps_pending} step call(s) due and not final"
        return "complete"

    def _close(self) -> RunResult:
        s = self.s
        assert s.state is not None
        pending = sum(not t.final for t in s.state.trials.values())
        if s.shared is not None:  # other workers' outcomes count too
            s.final = s.shared.link.finals()
            pending = len(s.state.order) - s.final
        steps_pending = self.steps_pending()
        reason = self._reason(pending, steps_pending)
        result = RunResult(
            s.seq,
            s.seq,
            reason,
            s.counters,
            s.final,
            pending,
            "",
            s.fatal,
            priced=self.price is not None,
            signal=s.signalled,
        )
        if s.shared is not None:
            stopped_seq = self._close_worker(reason, pending, steps_pending)
            if stopped_seq is None:  # reaped: the reaper closed this session
                return replace(result, checkpoint=self.log.sign_checkpoint(self.key))
            stopped = self.log.get(stopped_seq)
        else:
            stopped = self._append_stopped(reason, pending, steps_pending)
        note = self.log.sign_checkpoint(self.key)
        witnessed = s.witness.stop(stopped.seq + 1)
        return replace(
            result,
            stopped_seq=stopped.seq,
            checkpoint=witnessed if witnessed is not None else note,
            witness_wait=s.witness.wait,
            unwitnessed=tuple(s.witness.notes),
        )

    def _close_worker(self, reason: str, pending: int, steps_pending: int) -> int | None:
        """Append this worker's ``run.stopped`` and leave the store's workers, in one transaction.

        None when another worker reaped this one first (its session is closed already).
        """
        from ledger import remove_worker, session_open

        assert self.shared is not None
        with self.log.transaction():
            if not session_open(self.log, self.s.seq):
                remove_worker(self.log, self.shared.id)
                return None
            stopped = self._append_stopped(reason, pending, steps_pending)
            remove_worker(self.log, self.shared.id)
        return stopped.seq

    def _append_stopped(self, reason: str, pending: int, steps_pending: int) -> Event:
        """Append the session's ``run.stopped``."""
        s = self.s
        c = s.counters
        return self.log.append(
            "run.stopped",
            {
                "session": s.seq,
                "reason": reason,
                "responded": c.responded,
                "failed": c.failed,
                "given_up": c.given_up,
                "interrupted": c.interrupted,
                "retries": c.retries,
                "cost_usd": round(c.cost_usd, 8) if self.price is not None else None,
                "final": s.final,
                "pending": pending,
                **(
                    {"step_calls": s.step_calls, "steps_pending": steps_pending}
                    if s.steps is not None
                    else {}
                ),
            },
            key=self.key,
        )


def session_witnesses(log: Ledger) -> Any:
    """The witness policy the study locked (``protocol.locked`` ``witnessing``), or None."""
    from runner._lock import protocol_event
    from runner._witnessing import policy_of

    event = protocol_event(log)
    return None if event is None else policy_of(event.body)


def session_models(
    study: Study, backend: Backend, names: Sequence[str] | None
) -> tuple[str | None, ...]:
    """The models a session runs: ``names`` (``--model``), else every model ``backend`` serves.

    A ``[model]`` study has one model, named None. In a ``[models]`` study a simulated backend
    serves every model; a real one the models whose provider it serves
    (:func:`runner._backends.provider_refusal`). Raises :class:`StudyError` for an unknown name,
    a named model the backend does not serve, or no model at all.
    """
    if study.models is None:
        if names:
            raise StudyError(
                f"--model applies to a study with [models.<NAME>] tables; {study.spec_path} has "
                "one [model]"
            )
        return (None,)
    chosen = _named_models(study, names)
    if backend.simulated:
        return tuple(chosen)
    return _served_models(study, backend, names, chosen)


def _named_models(study: Study, names: Sequence[str] | None) -> list[str]:
    """The models ``--model`` names (all of a ``[models]`` study's without it), in study order."""
    assert study.models is not None
    if not names:
        return list(study.models)
    unknown = [n for n in names if n not in study.models]
    if unknown:
        raise StudyError(
            f"--model {', '.join(unknown)}: not a model of {study.spec_path} (models: "
            f"{', '.join(study.models)})"
        )
    return [n for n in study.models if n in names]


def _served_models(
    study: Study, backend: Backend, names: Sequence[str] | None, chosen: list[str]
) -> tuple[str | None, ...]:
    """Of ``chosen``, the models whose provider the real ``backend`` serves."""
    assert study.models is not None
    served = [n for n in chosen if provider_refusal(study.models[n].provider, backend.name) is None]
    if names and len(served) < len(chosen):
        bad = next(n for n in chosen if n not in served)
        refusal = provider_refusal(study.models[bad].provider, backend.name) or ""
        where = f"([models.{bad}] provider)"
        raise StudyError(f"--model {bad}: {refusal.replace('([model] provider)', where)}")
    if not served:
        providers = ", ".join(f"{n}: {m.provider}" for n, m in study.models.items())
        raise StudyError(
            f"the {backend.name} backend serves none of the study's models ({providers}); "
            "choose a backend that serves one, or simulated / replay (labelled simulated); "
            "nothing was recorded"
        )
    return tuple(served)


def check_provider(study: Study, backend: Backend, names: Sequence[str] | None = None) -> None:
    """Refuse a backend that does not serve the locked provider (before any event).

    A simulated backend (the offline simulation, a replay, a test double) answers for any
    provider: its sessions carry ``simulated: true`` and every report labels them. In a
    ``[models]`` study the session's models must be served (:func:`session_models`).
    """
    if study.models is not None:
        session_models(study, backend, names)
        return
    if names:
        session_models(study, backend, names)
    if backend.simulated:
        return
    refusal = provider_refusal(str(study.model.get("provider", "")), backend.name)
    if refusal is not None:
        raise StudyError(refusal)


def _with_runner(
    root: str | Path,
    key: SigningKey,
    backend: Backend,
    options: RunOptions,
    progress: ProgressHook | None,
    control: RunControl | None,
    work: Callable[[Runner], Any],
) -> Any:
    """Check the locked files, take the run lock, open the ledger and run ``work(runner)``."""
    root = Path(root)
    if ledger_path(root).is_file():  # a damaged or truncated ledger is never extended
        with Ledger.open(ledger_path(root), readonly=True) as existing:
            existing.check_integrity()
    study = check_integrity(root)
    if control is not None:
        control.check()
    where = ledger_path(root)
    # SQLite: one runner per study (the run lock); PostgreSQL: workers share it through leases
    single = contextlib.nullcontext() if isinstance(where, PostgresLocation) else run_lock(root)
    with single, Ledger.open(where) as log:
        if control is not None:
            control.check()
        # A backend that drives a session its own way (the Message Batches API) supplies its
        # runner; every other backend is driven call by call.
        make_runner = getattr(backend, "make_runner", None)
        staged = study.steps or any(a.after is not None for a in study.arms.values())
        if make_runner is not None and staged:
            asyncio.run(backend.aclose())
            raise StudyError(
                f"the {backend.name} backend submits every pending trial in one batch, but "
                f"{study.spec_path} has model steps or answer-dependent arms, whose calls wait "
                "for earlier answers (docs/trials.md §5); run it with a call-by-call backend "
                "(anthropic); nothing was recorded"
            )
        try:
            runner: Runner = (
                make_runner(study, log, key, options, progress, control)
                if make_runner is not None
                else Runner(study, log, key, backend, options, progress, control)
            )
            check_provider(study, backend, options.models)
        except StudyError:
            asyncio.run(backend.aclose())
            raise
        mode, why = worker_mode(study, batch=runner.batch, witnessed=runner.witnesses is not None)
        if log.engine == "postgresql":
            runner.shared = SharedRun(log, mode=mode, why=why, lease_seconds=options.lease_seconds)
        current = [runner]

        async def main() -> Any:
            try:
                result = await work(current[0])
                # PostgreSQL: a session that ended to let a new one take trials that come
                # before its own in the locked order is followed at once by that new session,
                # on the same backend (docs/trials.md §8); it was preflighted already
                while (
                    isinstance(result, RunResult)
                    and result.reason.startswith(f"{ROTATE}:")
                    and current[0].shared is not None
                ):
                    current[0].shared.close()
                    again = replace(options, preflight=False)
                    nxt = Runner(study, log, key, backend, again, progress, control)
                    nxt.shared = SharedRun(
                        log, mode=mode, why=why, lease_seconds=options.lease_seconds
                    )
                    current[0] = nxt
                    result = await work(nxt)
                return result
            finally:
                await backend.aclose()

        try:
            return asyncio.run(main())
        finally:
            if current[0].shared is not None:
                current[0].shared.close()


def run_study(
    root: str | Path,
    key: SigningKey,
    backend: Backend,
    options: RunOptions,
    progress: ProgressHook | None = None,
    control: RunControl | None = None,
) -> RunResult:
    """Check the locked files, take the run lock, preflight, and run one session.

    ``control`` (:class:`runner._control.RunControl`) handles Ctrl-C and SIGTERM; the CLI
    installs one before it does anything else, so a signal at any moment is handled. A signal
    before the session started raises :class:`runner._control.RunInterruptedError` and records
    nothing but an interrupted preflight. A preflight the backend refuses
    (``options.preflight``, :mod:`runner._preflight`) raises
    :class:`runner._errors.PreflightError` before any trial is sent. On PostgreSQL a session
    that ended to let a new one take trials that come before its own in the locked order
    (``rotate``, ``docs/trials.md`` §8) is followed at once by that new session.
    """
    result: RunResult = _with_runner(
        root, key, backend, options, progress, control, lambda runner: runner.run()
    )
    return result


def check_study(
    root: str | Path,
    key: SigningKey,
    backend: Backend,
    options: RunOptions | None = None,
    control: RunControl | None = None,
) -> list[Preflight]:
    """``ledger run --check``: send and record the preflight requests, and nothing else.

    One ``run.preflight`` per request shape among the pending trials (the whole schedule when
    none is pending); returns the preflights, or raises :class:`runner._errors.PreflightError`
    naming the model, backend, URL and error. No session is opened and no trial is sent.
    """
    preflights: list[Preflight] = _with_runner(
        root,
        key,
        backend,
        options or RunOptions(),
        None,
        control,
        lambda runner: runner.check(),
    )
    return preflights
