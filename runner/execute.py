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
  backend other than ``anthropic``, or a model missing from ``runner/pricing.py``) refuses a
  budget unless it is given prices (``price_in`` / ``price_out``), recorded in ``run.started``.
- Ctrl-C (SIGINT): no new request starts, requests in flight finish; a second Ctrl-C, or
  SIGTERM, cancels them and records them as interrupted (:mod:`runner.control`). Then
  ``run.stopped`` and a signed checkpoint. A signal before the session started stops the run
  before anything is recorded.
- One runner per study on SQLite: an exclusive ``flock`` on ``STUDY/.ledger-run.lock`` (one
  file, one writer: SQLite serialises writers itself, but two sessions would each send every
  pending trial). On PostgreSQL any number of ``ledger run`` workers share a study through
  leases in the database instead (:mod:`runner.workers`, ``docs/trials.md`` §8).
- Before the session, the server is asked which models it serves (:mod:`runner.identity`,
  recorded as ``server_identity``), and one recorded ``run.preflight`` per request shape
  (trials' and step calls') shows that the backend accepts a request naming each locked model
  and takes the study's requests (:mod:`runner.preflight`); a refused preflight stops the run
  before any trial or step call is sent. ``ledger run --check`` does only that.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from ledger import Event, EventSpec, Ledger, PostgresLocation, RefusedError, SigningKey
from runner.backends import CONFIGURATION, Backend, BackendError, Reply, provider_refusal
from runner.control import RunControl
from runner.data_arm import data_trial_events
from runner.identity import ASK_TIMEOUT_SECONDS, ServerIdentity, unanswered
from runner.lock import StudyError, check_integrity, ledger_path, sign_missing_checkpoints
from runner.preflight import (
    Planned,
    Preflight,
    plan_preflights,
    request_shape,
    run_preflights,
)
from runner.pricing import (
    PRICES_AS_OF,
    Price,
    backend_price,
    cost_at,
    given_price,
    max_cost_usd,
    price_record,
)
from runner.render import prior_trial
from runner.request import RequestBuilder, Trial, request_blob, trial_requested
from runner.spec import Study
from runner.state import NOT_COUNTED, StudyState, TrialState, load_state, locked_order
from runner.step_state import CallState, StepWork, prior_values, reply_text
from runner.steps import StepCall
from runner.witnessing import is_final_outcome
from runner.workers import DEFAULT_LEASE_SECONDS, SharedRun, reap_dead, worker_mode

LOCK_FILE = ".ledger-run.lock"
#: The reason a worker's session ends to let a new session take trials that come before its
#: own in the locked order (``docs/trials.md`` §8); :func:`run_study` then starts that session.
ROTATE = "rotate"
#: A session whose first attempts all fail with the same error (at most this many, and never
#: more than --max-attempts) stops as a configuration error (``docs/trials.md`` §3).
SAME_ERROR_ATTEMPTS = 3
#: Statuses that say "try again later" by definition; they never make a configuration error.
TRANSIENT_STATUS = frozenset({429, 503, 529})


@dataclass(frozen=True)
class RunOptions:
    """How a session runs; every field has a CLI option of the same name.

    ``price_in`` and ``price_out`` (USD per million input and output tokens, given together)
    price the session instead of the price table, and make ``budget_usd`` possible on a backend
    or model that has no listed price. ``preflight`` (the CLI has no option for it: every
    ``ledger run`` preflights) sends the recorded preflight requests before the session
    (:mod:`runner.preflight`); a library caller or a test may turn it off. ``lease_seconds``
    (PostgreSQL only) is how long after this worker's last heartbeat others count it as dead
    and take over its trials (``docs/trials.md`` §8).
    """

    concurrency: int = 8
    max_trials: int | None = None
    until: datetime | None = None
    budget_usd: float | None = None
    max_attempts: int = 5
    backoff_base: float = 1.0
    backoff_max: float = 60.0
    jitter_seed: int | None = None
    poll_interval: float = 10.0
    price_in: float | None = None
    price_out: float | None = None
    models: tuple[str, ...] | None = None
    preflight: bool = True
    lease_seconds: float = DEFAULT_LEASE_SECONDS

    def __post_init__(self) -> None:
        """Refuse one price without the other, and a lease that is not positive."""
        given_prices(self.price_in, self.price_out)
        if not self.lease_seconds > 0:
            raise StudyError(f"--lease-seconds must be positive, not {self.lease_seconds}")


def given_prices(price_in: float | None, price_out: float | None) -> Price | None:
    """The price given with ``--price-in`` and ``--price-out``, or None; both or neither."""
    if price_in is None and price_out is None:
        return None
    if price_in is None or price_out is None:
        raise StudyError(
            "--price-in and --price-out go together: give both (USD per million input and "
            "output tokens) or neither"
        )
    if price_in < 0 or price_out < 0:
        raise StudyError("--price-in and --price-out must not be negative")
    return given_price(price_in, price_out)


@dataclass
class Counters:
    """What a session did; shown live and recorded in ``run.stopped``."""

    responded: int = 0
    failed: int = 0
    given_up: int = 0
    interrupted: int = 0
    cancelled: int = 0  # of the interrupted: calls in flight cancelled by a signal this session
    retries: int = 0
    cost_usd: float = 0.0
    reserved_usd: float = 0.0
    concurrency: int = 0


@dataclass(frozen=True)
class RunResult:
    """The outcome of one session."""

    started_seq: int
    stopped_seq: int
    reason: str
    counters: Counters
    final: int
    pending: int
    checkpoint: str
    fatal: str | None = None
    priced: bool = False
    signal: str | None = None  # the first Ctrl-C (SIGINT) or SIGTERM of the session, if any
    preflights: tuple[Preflight, ...] = ()  # the preflights sent before the session
    witness_wait: float = 0.0  # seconds the session waited on its witnesses
    unwitnessed: tuple[str, ...] = ()  # checkpoints that went on unwitnessed ('continue')
    server_warnings: tuple[str, ...] = ()  # locked models the server did not list, or unasked


ProgressHook = Callable[[Counters, int, int], None]
"""Called after every outcome with (counters, trials final, trials in total)."""


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


class AdaptiveLimit:
    """A concurrency limit that halves on overload and climbs back one step per window."""

    def __init__(self, maximum: int) -> None:
        """Start at ``maximum``."""
        self.maximum = maximum
        self.limit = maximum
        self.active = 0
        self._streak = 0
        self._cond = asyncio.Condition()

    async def acquire(self) -> None:
        """Wait for a free slot under the current limit."""
        async with self._cond:
            await self._cond.wait_for(lambda: self.active < self.limit)
            self.active += 1

    async def release(self) -> None:
        """Free a slot."""
        async with self._cond:
            self.active -= 1
            self._cond.notify_all()

    async def requeue(self) -> None:
        """Before a retry: wait for a slot under the current (perhaps lowered) limit.

        If more are in flight than the limit allows, this slot is given back first, so a retry
        obeys the limit like a new trial. Cancelled while waiting, the slot is taken back
        anyway, so the caller's :meth:`release` stays balanced.
        """
        async with self._cond:
            if self.active <= self.limit:
                return
            self.active -= 1
            self._cond.notify_all()
            try:
                await self._cond.wait_for(lambda: self.active < self.limit)
            finally:
                self.active += 1

    def overloaded(self) -> None:
        """The API said 429 or 529: halve the limit."""
        self.limit = max(1, self.limit // 2)
        self._streak = 0

    async def succeeded(self) -> None:
        """One success; after ``limit`` successes in a row, allow one more in flight."""
        if self.limit >= self.maximum:
            return
        self._streak += 1
        if self._streak >= self.limit:
            self._streak = 0
            self.limit += 1
            async with self._cond:
                self._cond.notify_all()


class GroupWriter:
    """Commit events from a thread, many per transaction, off the event loop.

    Each worker submits an event and awaits its future; the thread takes every event waiting,
    appends them with one :meth:`ledger.Ledger.append_many` (one fsync), and resolves the
    futures with the stored events, all of a batch in one hand-off to the event loop. A
    ``trial.requested`` is therefore durable before its request is sent, while 32 workers share
    one disk flush instead of queueing for 32. Events are committed in the order submitted, so
    an event submitted and not awaited (a response, :meth:`Runner._write_behind`) is durable
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
        every N-th final trial outcome it commits (:func:`runner.witnessing.is_final_outcome`),
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


def request_input_tokens(body: dict[str, Any], sizes: Sequence[tuple[int, int]]) -> int:
    """A generous input-token estimate: text at 3 characters per token, images by their pixels.

    Counts the system prompt and the text of every message (few-shot turns too); ``sizes``
    are the (width, height) of the request's images. Images cost about ``width * height /
    750`` tokens after the API scales them to at most 1568 px on the long side (Anthropic's
    vision guide); text rarely needs more than one token per 3 characters. Used only until a
    real ``usage`` is known for the same arm, model and stimulus.
    """
    chars = len(body.get("system", "") or "")
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            chars += len(content)
            continue
        chars += sum(len(b.get("text", "")) for b in content if b.get("type") == "text")
    tokens = chars // 3 + 16
    for width, height in sizes:
        scale = min(1.0, 1568 / max(width, height, 1))
        tokens += int((width * scale) * (height * scale) / 750) + 1
    return tokens


class Runner:
    """One session of ``ledger run`` over an open ledger."""

    batch = False

    def __init__(
        self,
        study: Study,
        log: Ledger,
        key: SigningKey,
        backend: Backend,
        options: RunOptions,
        progress: ProgressHook | None = None,
        control: RunControl | None = None,
    ) -> None:
        """Prepare a session; :meth:`run` does the work.

        ``control`` handles Ctrl-C and SIGTERM (:mod:`runner.control`); without one, the
        session makes its own, active while the session runs (in the main thread only).
        """
        self.study = study
        self.log = log
        self.key = key
        self.backend = backend
        self.options = options
        self.progress = progress
        self.builder = RequestBuilder(study)
        self.selected = session_models(study, backend, options.models)
        chosen = [m for m in study.model_specs() if m.name in self.selected]
        self.model = ", ".join(dict.fromkeys(m.id for m in chosen))
        self.max_tokens = max(int(m.params.get("max_tokens", 4096)) for m in chosen)
        self.counters = Counters(concurrency=options.concurrency)
        self.stop_reason: str | None = None
        self.fatal: str | None = None
        self.rng = random.Random(options.jitter_seed)
        self.input_tokens: dict[tuple[str, str | None, str], int] = {}
        self.session = 0
        self.state: StudyState | None = None
        self.final = 0
        self.spent_before = 0.0  # cost recorded by earlier sessions; counts against the budget
        self.writer: GroupWriter | None = None
        self.behind: set[asyncio.Future[Event]] = set()  # responses submitted, not yet committed
        self.write_error: BaseException | None = None  # the first of them that failed
        self.transport_streak = 0  # attempts in a row, across trials, with no HTTP response
        # a session of several listed models with steps prices each call at its model's price
        self.prices_by_id: dict[str, Price] = {}
        self.price, self.price_source = self._session_price()
        self.control = control
        self.signalled: str | None = None  # the first signal received in the session
        self.interrupted_by: str | None = None  # the signal that cancelled the calls in flight
        self.calls: dict[asyncio.Future[Reply], Trial | StepCall] = {}  # sends under way
        self.in_flight: set[str] = set()  # trials between their request and its outcome
        self._stopped = asyncio.Event()  # set with the first stop reason: wakes sleepers
        self.answered = False  # a response came in this session
        # the session's first failures, while they are all alike (None: no longer compared)
        self.same_errors: list[tuple[str, int | None, str]] | None = []
        self.configuration_stop = False  # the session stopped on a configuration error
        # the study's witnesses, as locked (docs/witness.md section 8)
        self.witnesses = session_witnesses(log)
        self.witness_error: StudyError | None = None  # a refusal, or witnesses unreachable
        self.witness_notes: list[str] = []  # checkpoints left unwitnessed ('continue')
        self.witness_wait = 0.0  # seconds spent waiting on witnesses this session
        # recorded model steps (docs/trials.md §5): None for a study without [steps]
        staged = any(a.after is not None for a in study.arms.values())  # prompts.md §9
        self.steps = StepWork(study, self.builder.renderer) if study.steps or staged else None
        self.step_calls = 0  # step responses this session
        self._items: dict[str, Any] | None = None  # item id -> data, for data arms (trials.md §6)
        # what the server said about the session's models (runner/identity.py); None: not asked
        self.identity: ServerIdentity | None = None
        self._asked = False
        # on PostgreSQL: this process as one of the study's workers (docs/trials.md §8)
        self.shared: SharedRun | None = None
        self.unrecorded_usd = 0.0  # costs of responses submitted and not yet committed
        self.retake: list[str] = []  # trials given back to be claimed again (PostgreSQL)

    # ------------------------------------------------------------------ events

    def _session_price(self) -> tuple[Price | None, str | None]:
        """The price this session is costed with, and where it comes from.

        A budget without a price is refused here, before anything is recorded.
        """
        given = given_prices(self.options.price_in, self.options.price_out)
        ids = {m.id for m in self.study.model_specs() if m.name in self.selected}
        if len(ids) > 1 and given is None and self.backend.priced and self.study.steps:
            each = {i: backend_price(self.backend, i) for i in sorted(ids)}
            if all(p is not None for p in each.values()):  # docs/trials.md §5
                self.prices_by_id = {i: p for i, p in each.items() if p is not None}
                return (
                    self.prices_by_id[sorted(ids)[0]],
                    f"runner/pricing.py (prices as of {PRICES_AS_OF}), per model",
                )
        if len(ids) > 1 and (given is not None or self.backend.priced):
            raise StudyError(
                f"this session would run {len(ids)} models ({', '.join(sorted(ids))}), each "
                "with its own price; run one model per priced session (--model NAME)"
            )
        if given is not None:
            return given, "--price-in/--price-out"
        listed = backend_price(self.backend, self.model)
        if listed is not None:
            return listed, f"runner/pricing.py (prices as of {PRICES_AS_OF})"
        if self.options.budget_usd is not None:
            what = (
                f"for model {self.model!r} (runner/pricing.py lists the known models)"
                if self.backend.priced
                else f"for the {self.backend.name} backend"
            )
            raise StudyError(
                f"--budget-usd: no price is known {what}, so the budget cannot be enforced; "
                "give the run its prices with --price-in and --price-out (USD per million "
                "input and output tokens), or run without --budget-usd"
            )
        return None, None

    def _priced(self) -> bool:
        return self.price is not None

    def pending(self, state: StudyState) -> list[Trial]:
        """The pending trials this session may run (those of its models), in schedule order.

        A data arm's trials (``docs/trials.md`` §6) need no model: every session takes them.
        """
        if self.study.models is None:
            return state.pending()
        return [t for t in state.pending() if t.model in self.selected or self._is_data(t)]

    def _is_data(self, trial: Trial) -> bool:
        """Whether ``trial`` is of a data arm (``response_from``): no request is sent."""
        return self.study.arms[trial.arm].response_from is not None

    DATA_CHUNK = 256
    """Data trials recorded per transaction (``docs/trials.md`` §6)."""

    def _record_data(self, trials: Sequence[Trial], attempts: Sequence[int]) -> list[int]:
        """Append data trials' event pairs in one transaction; the responses' seqs.

        Called in the writer thread (or, in a batch session, directly): nothing else appends
        between reading the ledger's size and the append, so each response's ``request_seq``
        is the seq its request receives.
        """
        if self.writer is not None and self.writer.failed is not None:
            raise self.writer.failed  # nothing is committed after a failed commit
        if self._items is None:
            self._items = {i.id: i.data for i in self.study.load_items()}
        base = self.log.size
        specs: list[EventSpec] = []
        for k, (trial, attempt) in enumerate(zip(trials, attempts, strict=True)):
            request, response = data_trial_events(
                self.study, trial, attempt, self.session, self._items[trial.stimulus]
            )
            specs += [
                request,
                replace(response, body={**response.body, "request_seq": base + 2 * k}),
            ]
        stored = self.log.append_many(specs, key=self.key)
        return [stored[2 * k + 1].seq for k in range(len(trials))]

    def _supplied(self, record: TrialState, attempt: int, seq: int) -> None:
        record.attempts = attempt
        record.responded = seq
        self.counters.responded += 1
        self.final += 1

    async def _supply(self, trials: Sequence[Trial]) -> None:
        """Record data trials (``docs/trials.md`` §6), in the order given, chunk by chunk.

        Each trial's two events are appended in one transaction from the writer thread (the
        response's ``request_seq`` is the seq its request receives), so a crash leaves both or
        neither: a data trial is never dangling, and a restart takes only those not recorded.
        """
        assert self.writer is not None and self.state is not None
        for start in range(0, len(trials), self.DATA_CHUNK):
            if self.stop_reason is not None:
                return
            chunk = list(trials[start : start + self.DATA_CHUNK])
            attempts = [self.state.trials[t.id].attempts + 1 for t in chunk]
            pending = self.writer.call(functools.partial(self._record_data, chunk, attempts))
            try:
                seqs = await asyncio.shield(pending)
            except asyncio.CancelledError:  # committed regardless: count it, then go
                await asyncio.wait([pending])
                if not pending.cancelled() and pending.exception() is None:
                    for trial, attempt, seq in zip(chunk, attempts, pending.result(), strict=True):
                        self._supplied(self.state.trials[trial.id], attempt, seq)
                raise
            for trial, attempt, seq in zip(chunk, attempts, seqs, strict=True):
                self._supplied(self.state.trials[trial.id], attempt, seq)
            self._tick()

    def _refuse_sealed(self) -> None:
        sealed = next(iter(self.log.events("scoring.sealed")), None)
        if sealed is not None:
            raise StudyError(
                f"{self.study.root}: scoring was sealed at seq {sealed.seq}; data collection "
                "is closed and no trial may be run after it"
            )

    async def preflight(self, *, check: bool = False) -> list[Preflight]:
        """Send and record the preflight requests (:mod:`runner.preflight`) of this session.

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
            trials = [t for t in state.order if t.model in self.selected]
        trials = [t for t in trials if not self._is_data(t)]  # a data trial sends no request
        if self.steps is None:
            planned = [Planned(t, b, s) for t, b, s in plan_preflights(trials, self.builder.body)]
        else:
            planned = self._step_study_plan(trials, state, check=check)
        return await run_preflights(self, planned, check=check, spent=state.cost_usd)

    async def ask_server(self) -> ServerIdentity | None:
        """Ask the server which models it serves, once per session (:mod:`runner.identity`).

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
        ids = list(dict.fromkeys(m.id for m in self.study.model_specs() if m.name in self.selected))
        ask = getattr(self.backend, "server_identity", None)
        if ask is None:
            self.identity = unanswered(
                ids, [], f"the {self.backend.name} backend has no way to ask its server"
            )
            return self.identity
        call = asyncio.ensure_future(ask(ids))
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
                self.identity = unanswered(
                    ids, [], f"no answer within {ASK_TIMEOUT_SECONDS + 5:.0f} seconds"
                )
                return self.identity
        try:
            self.identity = call.result()
        except Exception as exc:  # a backend's own failure to ask is recorded, never fatal
            self.identity = unanswered(ids, [], f"asking failed: {type(exc).__name__}: {exc}")
        return self.identity

    def _step_study_plan(
        self, trials: list[Trial], state: StudyState, *, check: bool
    ) -> list[Planned]:
        """The preflight candidates of a study with steps: its trials, then its step calls.

        A trial whose request cannot be rendered yet (its item template reads a step's output,
        or it is a second stage) is built with those slots empty; so is a step call whose
        inputs do not exist yet. Every step of the session's models that still has calls to
        make contributes its first call per model (``docs/trials.md`` §3, §5).
        """
        assert self.steps is not None
        work = self.steps
        work.load(self.log)
        renderer = self.builder.renderer
        planned: list[Planned] = []
        built: set[tuple[str, str | None, str, str | None]] = set()
        for trial in trials:
            key = (trial.arm, trial.model, trial.stimulus, trial.variant)
            if key in built:
                continue
            built.add(key)
            values = (
                work.item_inputs(trial.stimulus) if work.item_steps_final(trial.stimulus) else None
            )
            after = self.study.arms[trial.arm].after
            prior = {} if after is None else prior_values(self.study, work, state, trial, after)
            if values is not None and isinstance(prior, dict):
                renderer.step_values[trial.stimulus] = values
                renderer.prior_values[trial.id] = prior
                body = self.builder.body(trial)
                planned.append(Planned(trial, body, request_shape(body)))
                continue
            planned.append(self._stand_in(trial))
        planned += self._step_candidates(trials, check=check)
        return planned

    def _stand_in(self, trial: Trial) -> Planned:
        """A trial's request with its undecided slots (``steps.*``, ``prior.*``) empty."""
        renderer = self.builder.renderer
        steps = sorted(
            {
                s.name
                for t in renderer.item_templates()
                for s in t.slots()
                if s.name.startswith("steps.")
            }
        )
        prior = sorted(
            {
                s.name
                for name in self.study.arms[trial.arm].components
                for s in (
                    renderer.component_templates[name].slots()
                    if name in renderer.component_templates
                    else ()
                )
                if s.name.startswith("prior.")
            }
        )
        saved = renderer.step_values.get(trial.stimulus), renderer.prior_values.get(trial.id)
        renderer.step_values[trial.stimulus] = {s: "" for s in steps}
        renderer.prior_values[trial.id] = {s: "" for s in prior}
        try:
            body = self.builder.body(trial)
        finally:  # the stand-in values never reach a real request
            for table, key, value in (
                (renderer.step_values, trial.stimulus, saved[0]),
                (renderer.prior_values, trial.id, saved[1]),
            ):
                if value is None:
                    table.pop(key, None)
                else:
                    table[key] = value
        empty = tuple(steps) + tuple(prior)
        return Planned(trial, body, request_shape(body), empty)

    def _step_candidates(self, trials: list[Trial], *, check: bool) -> list[Planned]:
        """For each step and model of the session with calls still to make, its first call.

        Item steps: the first call in call order that is not final (with ``check``, the first
        call). Trial steps: the call on the first trial of ``trials`` (else the first answered
        trial whose call is not final). Inputs that do not exist yet are sent empty.
        """
        from runner.steps import trial_step_calls

        assert self.steps is not None
        work = self.steps
        out: list[Planned] = []
        for name, spec in self.study.steps.items():
            for model in spec.models:
                if model not in self.selected:
                    continue
                call: StepCall | None = None
                if spec.on == "item":
                    for candidate in work.item_calls[name]:
                        record = work.calls.get(candidate.id)
                        if candidate.model == model and (
                            check or record is None or not record.final
                        ):
                            call = candidate
                            break
                else:
                    units = [(t.id, t.stimulus) for t in trials] + [
                        (t, work.trial_stimulus.get(t, "")) for t in work.responses
                    ]
                    for trial_id, stimulus in units:
                        candidate = next(
                            c
                            for c in trial_step_calls(spec, trial_id, stimulus)
                            if c.model == model
                        )
                        record = work.calls.get(candidate.id)
                        if check or record is None or not record.final:
                            call = candidate
                            break
                if call is not None:
                    out.append(self._step_request(call))
        return out

    def _step_request(self, call: StepCall) -> Planned:
        """A step call's request: as it will be sent, or with its undecided inputs empty."""
        assert self.steps is not None
        work = self.steps
        values = None
        if call.trial is None or call.trial in work.responses:
            values = work.inputs(call)
        empty: tuple[str, ...] = ()
        if values is None:
            values = work.render.rough_values(call)
            given = work.render.rough_values(call)
            items = self.builder.renderer.items
            known = (
                set(self.builder.renderer.values(items.by_id[call.stimulus]))
                if (items is not None and call.stimulus in items.by_id)
                else set()
            )
            empty = tuple(sorted(k for k in given if k not in known))
        body = work.render.body(call, values)
        return Planned(call, body, request_shape(body), empty)

    def server_warnings(self) -> list[str]:
        """What the server said about the locked models, as warnings (:mod:`runner.identity`)."""
        if self.identity is None:
            return []
        from runner.preflight import backend_url

        url = backend_url(self.backend)
        where = f"the {self.backend.name} backend" + (f" at {url}" if url else "")
        return self.identity.warnings(where)

    async def check(self) -> list[Preflight]:
        """``ledger run --check``: the preflight alone, with this session's signal handling."""
        own = self.control is None
        control = self.control = self.control or RunControl()
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
        from ledger._workers import list_workers

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

    def _open_session(self) -> StudyState:
        if self.shared is None:
            return self._start_session()
        from ledger._workers import list_workers, register_worker

        shared = self.shared
        reap_dead(self.log, self.key, by=shared.id, trials=len(locked_order(self.study, self.log)))
        with self.log.transaction():
            self._others()
            live = sorted(w.session for w in list_workers(self.log))
            state = self._start_session(concurrent=live)
            register_worker(self.log, shared.id, self.session, shared.mode, shared.lease_seconds)
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
        self.spent_before = state.cost_usd
        started = self.log.append(
            "run.started",
            {
                "backend": self.backend.name,
                "model": self.model,
                **({"models": list(self.selected)} if self.study.models is not None else {}),
                "simulated": self.backend.simulated,
                "package_version": version("prompt-ledger"),
                "trials": len(state.order),
                "final_before": len(state.order) - len(pending),
                "pending": len(pending),
                "concurrency": self.options.concurrency,
                "max_attempts": self.options.max_attempts,
                "budget_usd": self.options.budget_usd,
                # a real backend: what its server said about the models (runner/identity.py)
                **(
                    {"server_identity": self.identity.as_dict()}
                    if self.identity is not None
                    else {}
                ),
                # priced sessions only (a simulated run's events stay as they were)
                **(
                    {
                        "cost_usd_before": round(state.cost_usd, 8),
                        "price_usd_per_mtok": price_record(self.price, self.price_source or ""),
                        **(
                            {
                                "prices_by_model_usd_per_mtok": {
                                    i: price_record(p, self.price_source or "")
                                    for i, p in self.prices_by_id.items()
                                }
                            }
                            if self.prices_by_id
                            else {}
                        ),
                    }
                    if self.price is not None
                    else {}
                ),
                # other workers' sessions still open beside this one (docs/trials.md §8)
                **({"concurrent": concurrent} if concurrent else {}),
            },
            key=self.key,
        )
        self.session = started.seq
        for trial, seq in state.dangling():
            if concurrent and state.trials[trial.id].open_session in concurrent:
                continue  # a live worker's request: its own to finish
            self._append_failure(
                trial,
                state.trials[trial.id].attempts,
                seq,
                BackendError(
                    "interrupted",
                    "the runner stopped after this request was recorded and before its outcome "
                    "was; the request may or may not have reached the API",
                    retryable=True,
                ),
                final=False,
            )
            state.trials[trial.id].open_request = None
            self.counters.interrupted += 1
        if self.steps is not None:
            self.steps.load(self.log)
            for call_id, seq in self.steps.dangling():
                record = self.steps.calls[call_id]
                call = self._call_of(call_id)
                self._append_failure(
                    call,
                    record.attempts,
                    seq,
                    BackendError(
                        "interrupted",
                        "the runner stopped after this request was recorded and before its "
                        "outcome was; the request may or may not have reached the API",
                        retryable=True,
                    ),
                    final=False,
                )
                record.open_request = None
                self.counters.interrupted += 1
        self.final = len(state.order) - len(pending)
        return state

    def _call_of(self, call_id: str) -> StepCall:
        """The :class:`StepCall` of a recorded call id."""
        assert self.steps is not None
        known = self.steps.info.get(call_id)
        if known is not None:
            return known
        step, model, rest = call_id[len("step:") :].split("|", 2)
        spec = self.study.steps[step]
        if spec.on == "item":
            item, k = rest.rsplit("|", 1)
            call = StepCall(call_id, step, model or None, item, None, 0, rep=int(k))
        else:
            stimulus = self.steps.trial_stimulus.get(rest, "")
            call = StepCall(call_id, step, model or None, stimulus, rest, 0)
        self.steps.info[call_id] = call
        return call

    def _request_spec(
        self, trial: Trial | StepCall, attempt: int, wire: dict[str, Any]
    ) -> EventSpec:
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

    def _response_spec(
        self,
        trial: Trial | StepCall,
        attempt: int,
        request_seq: int,
        reply: Reply,
        latency: float,
    ) -> tuple[EventSpec, float | None]:
        price = self._price_of(trial)
        cost = cost_at(price, reply.usage) if price is not None else None
        step = isinstance(trial, StepCall)
        spec = EventSpec(
            "step.responded" if step else "trial.responded",
            {
                **(_call_members(trial) if isinstance(trial, StepCall) else {"trial": trial.id}),
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

    def _failure_spec(
        self,
        trial: Trial | StepCall,
        attempt: int,
        request_seq: int,
        error: BackendError,
        *,
        final: bool,
    ) -> EventSpec:
        step = isinstance(trial, StepCall)
        return EventSpec(
            "step.failed" if step else "trial.failed",
            {
                **(_call_members(trial) if isinstance(trial, StepCall) else {"trial": trial.id}),
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

    def _append_request(self, trial: Trial, attempt: int, wire: dict[str, Any]) -> int:
        """Append ``trial.requested`` now (outside the event loop's writer); return its seq."""
        return self.log.append_many([self._request_spec(trial, attempt, wire)], key=self.key)[0].seq

    def _append_failure(
        self,
        trial: Trial | StepCall,
        attempt: int,
        request_seq: int,
        error: BackendError,
        *,
        final: bool,
    ) -> None:
        """Append ``trial.failed`` now (outside the event loop's writer)."""
        spec = self._failure_spec(trial, attempt, request_seq, error, final=final)
        self.log.append_many([spec], key=self.key)

    def _write_behind(self, spec: EventSpec, record: TrialState, cost: float = 0.0) -> None:
        """Submit a ``trial.responded`` to the group writer without waiting for its commit.

        The worker goes on to its next trial at once; the writer commits in the order events
        are submitted, so the response is durable before any request submitted after it is
        sent (the next request's commit carries it, or follows it). ``record.responded`` is set
        when it is committed; a failed commit stops the run like a crash, and the session waits
        for every response before it closes.
        """
        assert self.writer is not None
        future = self.writer.submit(spec)
        self.behind.add(future)
        future.add_done_callback(functools.partial(self._written_behind, record, spec, cost))

    def _written_behind(
        self, record: TrialState, spec: EventSpec, cost: float, future: asyncio.Future[Event]
    ) -> None:
        self.behind.discard(future)
        self.unrecorded_usd -= cost
        error = None if future.cancelled() else future.exception()
        if error is None and not future.cancelled():
            record.responded = future.result().seq
            return
        if isinstance(error, RefusedError):
            self.counters.responded -= 1
            self.final -= 1
            self._superseded(spec, error)
            return
        if error is not None and self.write_error is None:
            self.write_error = error
            self.request_stop(f"crash: {type(error).__name__}: {error}")

    async def _write(self, spec: EventSpec) -> int:
        """Commit ``spec`` through the group writer; return its seq once it is durable."""
        assert self.writer is not None
        pending = self.writer.submit(spec)
        try:
            return (await asyncio.shield(pending)).seq
        except asyncio.CancelledError:
            # the event is being committed regardless: wait for it so the record stays whole
            await asyncio.wait([pending])
            raise

    async def _write_outcome(self, spec: EventSpec) -> int | None:
        """Commit an outcome; None when the store refused it (:meth:`_superseded` followed)."""
        try:
            return await self._write(spec)
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
        if refused.rule == "final" and spec.kind in ("trial.responded", "trial.failed"):
            body = spec.body
            failure = EventSpec(
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
            assert self.writer is not None
            future = self.writer.submit(failure)
            self.behind.add(future)
            future.add_done_callback(self._superseded_written)
            self.counters.failed += 1
            return
        self._lost(refused)

    def _superseded_written(self, future: asyncio.Future[Event]) -> None:
        self.behind.discard(future)
        error = None if future.cancelled() else future.exception()
        if isinstance(error, RefusedError):
            self._lost(error)
        elif error is not None and self.write_error is None:
            self.write_error = error
            self.request_stop(f"crash: {type(error).__name__}: {error}")

    def _refused(self, trial: Trial | StepCall, refused: RefusedError) -> None:
        """A request the store refused: the trial is final elsewhere, or this worker is lost."""
        if refused.rule == "final":
            return  # another worker finished it; this worker goes on with the next
        if refused.rule == "attempt" and self.shared is not None:
            self.shared.link.release([trial.id])  # claimed again with the store's count
            self.retake.append(trial.id)
            return
        self._lost(refused)

    def _lost(self, refused: RefusedError) -> None:
        reason = (self.shared.lost if self.shared is not None and self.shared.lost else None) or (
            f"lost: the store refused this worker's event ({refused}); another worker closed "
            "this worker's session"
        )
        if self.shared is not None and self.shared.lost is None:
            self.shared.lost = reason
        self.request_stop(reason)

    # ------------------------------------------------------------------ control

    def request_stop(self, reason: str) -> None:
        """Start no new request; the first reason given is the one recorded."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._stopped.set()

    def on_signal(self, name: str, *, first: bool, interrupt: bool) -> str | None:
        """Ctrl-C or SIGTERM in the session (called in the event loop by :mod:`runner.control`).

        The first starts no new attempt (a request already being recorded is still sent and
        awaited); ``interrupt`` (a second Ctrl-C, or SIGTERM) cancels the calls in flight,
        which :meth:`_attempt` records as interrupted, as it does a request recorded but not
        yet sent. Returns the line to show.
        """
        if self.signalled is None:
            self.signalled = name
        self.request_stop(f"interrupted: {name}")
        n = len(self.in_flight)
        calls = f"{n} call{'' if n == 1 else 's'} in flight"
        if interrupt:
            self.interrupted_by = name
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

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if the run is stopped meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopped.wait(), seconds)

    def _cosigner(self) -> Any:
        from runner.witnessing import Cosigner

        assert self.witnesses is not None
        return Cosigner(
            self.log, self.key, self.witnesses, should_stop=lambda: self.stop_reason is not None
        )

    def _witness(self, job: Callable[[Any], Any]) -> Any:
        """Run ``job(cosigner)`` in any thread; keep a refusal in ``witness_error``.

        The caller, in the event loop, turns ``witness_error`` into a stop.
        """
        from runner.witnessing import WitnessOutcome

        with self._cosigner() as cosigner:
            try:
                result = job(cosigner)
            except StudyError as exc:
                if self.witness_error is None:
                    self.witness_error = exc
                return None
            finally:
                self.witness_wait += cosigner.waited
        outcomes = result if isinstance(result, list) else [result]
        for outcome in outcomes:
            if isinstance(outcome, WitnessOutcome) and not outcome.witnessed:
                self.witness_notes.append(
                    f"checkpoint of size {outcome.size} continues unwitnessed ("
                    f"{len(outcome.cosigned_by)} of {outcome.quorum} cosignatures; "
                    + "; ".join(f"{k}: {v}" for k, v in outcome.missing.items())
                    + ")"
                )
        return result

    async def _witness_start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Cosign every promised checkpoint up to this session's start, before any trial.

        The session-start checkpoint is the tree right after ``run.started``
        (``docs/witness.md`` section 8); earlier promised ones still short of the quorum (a
        lock or a stop whose witnesses were unreachable) are asked for first.
        """
        if self.witnesses is None:
            return
        size = self.session + 1
        await loop.run_in_executor(None, self._witness, lambda c: c.witness_promised(upto=size))
        if self.witness_error is not None:
            self.request_stop(f"witness: {self.witness_error}")

    def _tick(self) -> None:
        if self.progress is not None:
            assert self.state is not None
            self.progress(self.counters, self.final, len(self.state.order))

    def _reserve(self, trial: Trial | StepCall, wire: dict[str, Any]) -> float | None:
        """Reserve the most this request can cost; None (and stop) if the budget forbids it."""
        if self.options.budget_usd is None or self.price is None:
            return 0.0
        worst = self.worst_cost(trial, wire)
        c = self.counters
        if self.shared is not None:
            return self._reserve_shared(worst)
        if self.spent_before + c.cost_usd + c.reserved_usd + worst > self.options.budget_usd:
            self.request_stop(
                f"budget: the next request could cost up to ${worst:.4f}, which with "
                f"${self.spent_before:.4f} spent by earlier sessions, ${c.cost_usd:.4f} by this "
                f"one and ${c.reserved_usd:.4f} in flight would exceed --budget-usd "
                f"{self.options.budget_usd} (the budget covers the whole study)"
            )
            return None
        self.counters.reserved_usd += worst
        return worst

    def _reserve_shared(self, worst: float) -> float | None:
        """Reserve against the study-wide budget in the store (every worker's spend counts)."""
        assert self.shared is not None and self.options.budget_usd is not None
        c = self.counters
        mine = c.reserved_usd + self.unrecorded_usd
        granted, spent, others = self.shared.link.reserve(mine, worst, self.options.budget_usd)
        if not granted:
            self.request_stop(
                f"budget: the next request could cost up to ${worst:.4f}, which with "
                f"${spent:.4f} recorded by every session of the study, ${others:.4f} reserved "
                f"by the other live workers and ${mine:.4f} in flight here would exceed "
                f"--budget-usd {self.options.budget_usd} (the budget covers the whole study)"
            )
            return None
        c.reserved_usd += worst
        return worst

    def worst_cost(
        self, trial: Trial | StepCall, wire: dict[str, Any], *, batch: bool | None = None
    ) -> float:
        """The most the request ``wire`` of ``trial`` can cost (a priced session only).

        ``batch`` (default: this runner's) prices it at the Message Batches discount.
        """
        price = self._price_of(trial)
        assert price is not None
        tokens = self.input_tokens.get((trial.arm, trial.model, trial.stimulus))
        if tokens is None:
            sizes = (
                []
                if isinstance(trial, StepCall)
                else self.builder.renderer.image_sizes(trial.stimulus)
            )
            tokens = request_input_tokens(wire, sizes)
        discounted = self.batch if batch is None else batch
        max_tokens = wire.get("max_tokens", wire.get("max_completion_tokens", self.max_tokens))
        return max_cost_usd(price, tokens, int(max_tokens), batch=discounted)

    def _price_of(self, call: Trial | StepCall) -> Price | None:
        """The price of ``call``: its model's in a per-model priced session, else the session's."""
        if not self.prices_by_id:
            return self.price
        return self.prices_by_id.get(self.builder.renderer.models[call.model].id, self.price)

    def backoff(self, failures: int, error: BackendError) -> float:
        """Seconds to wait after the ``failures``-th failure (``retry-after``, else jitter)."""
        return self._backoff(failures, error)

    def _backoff(self, failures: int, error: BackendError) -> float:
        if error.retry_after is not None:
            # the server's word wins over our own ceiling (but not beyond ten minutes)
            return min(error.retry_after, 600.0) + self.rng.uniform(0, 0.1)
        ceiling = min(self.options.backoff_max, self.options.backoff_base * 2 ** (failures - 1))
        return self.rng.uniform(ceiling / 2, ceiling)  # "equal jitter"

    async def _run_trial(self, trial: Trial | StepCall, limit: AdaptiveLimit) -> None:
        assert self.state is not None
        record: TrialState | CallState
        if isinstance(trial, StepCall):
            assert self.steps is not None
            record = self.steps.state(trial)
            wire = self.backend.wire_body(self.steps.body(trial))
        else:
            record = self.state.trials[trial.id]
            if self._is_data(trial):
                await self._supply([trial])
                return
            wire = self.backend.wire_body(self.builder.body(trial))
        while self.stop_reason is None:
            if self.options.until is not None and datetime.now(UTC) >= self.options.until:
                self.request_stop(f"until: reached {self.options.until.isoformat()}")
                return
            reserved = self._reserve(trial, wire)
            if reserved is None:
                return
            self.in_flight.add(trial.id)
            try:
                delay = await self._attempt(trial, record, wire, reserved, limit)
            finally:
                self.in_flight.discard(trial.id)
            if delay is None:
                return
            await self._pause(delay)
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
        attempt = record.attempts + 1
        record.attempts = attempt
        request = self._request_spec(trial, attempt, wire)
        try:
            seq = await self._write(request)
        except asyncio.CancelledError:
            self.counters.reserved_usd -= reserved
            raise  # nothing was sent; the next session closes the request as interrupted
        except RefusedError as refused:  # another worker's outcome came first (PostgreSQL)
            self.counters.reserved_usd -= reserved
            record.attempts = attempt - 1
            self._refused(trial, refused)
            return None
        if self.interrupted_by is not None:
            # a second Ctrl-C (or SIGTERM) came while the request was being recorded
            self.counters.reserved_usd -= reserved
            self.counters.cancelled += 1
            await self._write_interrupted(
                trial,
                attempt,
                seq,
                f"not sent: interrupted by {self.interrupted_by} after this request was "
                "recorded and before it was sent",
            )
            return None
        started = time.monotonic()
        seed = f"{self.study.seed}|{trial.id}|{attempt}"
        call = asyncio.ensure_future(self._send(wire, request, seed))
        self.calls[call] = trial
        try:
            try:
                reply = await call
            finally:
                self.calls.pop(call, None)
        except BackendError as error:
            self.counters.reserved_usd -= reserved
            return await self._failed(trial, record, attempt, seq, error, limit)
        except asyncio.CancelledError:
            self.counters.reserved_usd -= reserved
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # this worker itself is being cancelled: record, then let it go
                await self._write_interrupted(trial, attempt, seq, "cancelled while in flight")
                raise
            # the call alone was cancelled: a second Ctrl-C, or SIGTERM
            self.counters.cancelled += 1
            await self._write_interrupted(
                trial,
                attempt,
                seq,
                f"interrupted by {self.interrupted_by or 'a signal'} while in flight; the "
                "request may or may not have reached the API",
            )
            return None
        latency = time.monotonic() - started
        self.transport_streak = 0
        self.answered = True
        self.counters.reserved_usd -= reserved
        spec, cost = self._response_spec(trial, attempt, seq, reply, latency)
        # with steps (a step call is one), later stages read this response: wait for its seq
        staged = self.steps is not None
        if staged:
            seq = await self._write(spec)
        else:
            assert isinstance(record, TrialState)
            self.unrecorded_usd += cost or 0.0
            self._write_behind(spec, record, cost or 0.0)  # durable before anything sent after it
        if isinstance(reply.usage.get("input_tokens"), int):
            used = int(reply.usage["input_tokens"])
            self.input_tokens[(trial.arm, trial.model, trial.stimulus)] = used
        self.counters.responded += 1
        self.counters.cost_usd += cost or 0.0
        if isinstance(trial, StepCall):
            assert isinstance(record, CallState) and self.steps is not None
            self.step_calls += 1
            await limit.succeeded()
            self.counters.concurrency = limit.limit
            self._tick()
            return self._step_answered(trial, record, seq, reply_text(reply.raw, reply.format))
        assert isinstance(record, TrialState)
        if staged:  # else _written_behind sets it once committed
            record.responded = seq
        self.final += 1
        await limit.succeeded()
        self.counters.concurrency = limit.limit
        self._tick()
        return None

    def _send(self, wire: dict[str, Any], request: EventSpec, seed: str) -> Awaitable[Reply]:
        """Send ``wire``: as the very bytes ``request`` recorded, where the backend takes them.

        A backend with ``send_encoded`` (the ``anthropic`` one) posts the request blob as it is,
        so it is not serialised a second time and the bytes sent are the bytes hashed.
        """
        send_encoded = getattr(self.backend, "send_encoded", None)
        data = request.blobs.get("request") if request.blobs else None
        if send_encoded is not None and isinstance(data, bytes):
            sent: Awaitable[Reply] = send_encoded(wire, data, seed=seed)
            return sent
        return self.backend.send(wire, seed=seed)

    async def _write_interrupted(
        self, trial: Trial | StepCall, attempt: int, request_seq: int, message: str
    ) -> None:
        """Record the attempt ``request_seq`` as interrupted (its outcome is unknown)."""
        error = BackendError("interrupted", message, retryable=True)
        assert self.writer is not None
        spec = self._failure_spec(trial, attempt, request_seq, error, final=False)
        done = self.writer.submit(spec)
        await asyncio.wait([done])
        self.counters.interrupted += 1
        self._tick()

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
        error = self._same_error(error)
        if error.error_type not in NOT_COUNTED:
            record.failures += 1
        self.counters.failed += 1
        if not error.retryable:
            await self._write_outcome(self._failure_spec(trial, attempt, seq, error, final=False))
            self.fatal = error.message
            self.request_stop(f"error: {error.message}")
            self._tick()
            return None
        # after a configuration stop, no failure in flight counts (``docs/trials.md`` §3)
        final = record.failures >= self.options.max_attempts and not self.configuration_stop
        if error.http_status is None:
            self.transport_streak += 1
        else:
            self.transport_streak = 0
        if final and self.transport_streak >= self.options.max_attempts:
            # nothing has answered for a while: the API is unreachable (wrong base URL,
            # network down), which is not this trial's fault. Stop instead of giving
            # trials up, so nothing is lost.
            await self._write_outcome(self._failure_spec(trial, attempt, seq, error, final=False))
            self.fatal = (
                f"the API did not answer {self.transport_streak} attempts in a row "
                f"(last: {error.message}); check --base-url and the network"
            )
            self.request_stop(f"error: unreachable: {error.message}")
            self._tick()
            return None
        written = await self._write_outcome(
            self._failure_spec(trial, attempt, seq, error, final=final)
        )
        if final and written is None:
            return None  # another worker's final outcome came first: nothing more to do here
        if final:
            record.given_up = seq
            self.counters.given_up += 1
            if not isinstance(trial, StepCall):
                self.final += 1
            self._tick()
            return None
        if error.overloaded:
            limit.overloaded()
            self.counters.concurrency = limit.limit
        self.counters.retries += 1
        self._tick()
        return self._backoff(record.failures, error)

    def _same_error(self, error: BackendError) -> BackendError:
        """The error to record: ``configuration`` once the session's first attempts fail alike.

        Before the session's first response, every failure with an HTTP status (other than
        429, 503 and 529, which mean "later") is compared with the ones before it; when the
        first ``min(3, --max-attempts)`` failed attempts of the session carry the same error
        (type, status and message), the last one is recorded as ``configuration`` and the run
        stops, before any trial can have used up its attempts. Any other outcome first (a
        response, a different error, a transport error) ends the comparison for the session.
        """
        if self.answered or self.same_errors is None or not error.retryable:
            return error
        if error.http_status is None or error.http_status in TRANSIENT_STATUS:
            self.same_errors = None
            return error
        key = (error.error_type, error.http_status, error.message)
        if self.same_errors and self.same_errors[0] != key:
            self.same_errors = None
            return error
        self.same_errors.append(key)
        needed = min(SAME_ERROR_ATTEMPTS, self.options.max_attempts)
        if len(self.same_errors) < needed:
            return error
        self.same_errors = None
        self.configuration_stop = True
        return BackendError(
            CONFIGURATION,
            f"configuration error: the first {needed} attempts of this session all failed "
            f"with the same error ({error.message}); the backend cannot serve this study as "
            "configured (a model that cannot take images, a wrong model or URL?); no trial "
            "was given up",
            http_status=error.http_status,
            retryable=False,
            raw=error.raw,
        )

    def _step_answered(
        self, call: StepCall, record: CallState, seq: int, text: str
    ) -> float | None:
        """After a step response: None when the call is final, else 0 (send it again).

        A response that does not parse earns the call ``on_unparseable.retry`` more attempts;
        after them its vote is missing, and with ``then = "stop"`` the run stops
        (``docs/trials.md`` §5).
        """
        assert self.steps is not None
        if not self.steps.observe(call.step, record, seq, text):
            return 0.0
        spec = self.study.steps[call.step]
        work = self.steps
        for host, ver in work.verified.items():  # prompts.md §8.6: no sample accepted
            if spec.on != "item" or ver.then != "stop":
                continue
            rejected = work.rejection(host, call.stimulus)
            if rejected is not None:
                self.fatal = (
                    f"{rejected} (last call {call.id}, seq {seq}); [steps.{host}] "
                    'verified_by then = "stop"'
                )
                self.request_stop(f"error: {self.fatal}")
                return None
        if record.exhausted is not None and spec.then == "stop":
            self.fatal = (
                f"step {call.step}: call {call.id} gave {record.unparseable} unparseable "
                f"response(s) (last at seq {seq}); [steps.{call.step}] on_unparseable then = "
                '"stop"'
            )
            self.request_stop(f"error: {self.fatal}")
        return None

    async def _worker(self, queue: deque[Any], limit: AdaptiveLimit) -> None:
        while queue and self.stop_reason is None:
            await limit.acquire()
            try:
                if not queue or self.stop_reason is not None:
                    return
                trial = queue.popleft()
                try:
                    await self._run_trial(trial, limit)
                except Exception as exc:  # a bug or a broken ledger: stop everyone else too
                    self.request_stop(f"crash: {type(exc).__name__}: {exc}")
                    raise
            finally:
                await limit.release()

    async def run(self) -> RunResult:
        """Open the session, run it (:meth:`_session`), and close it with ``run.stopped``.

        Ctrl-C and SIGTERM are handled throughout (:mod:`runner.control`): before the session
        they stop it from starting (:class:`runner.control.RunInterruptedError`, nothing
        recorded); in it, the session still ends with ``run.stopped`` and a checkpoint.
        """
        own = self.control is None
        control = self.control = self.control or RunControl()
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
            self.state = self._open_session()
            if self.shared is not None:

                def lost(why: str) -> None:
                    loop.call_soon_threadsafe(self.request_stop, why)

                self.shared.start_heartbeat(lost)
            control.attach(loop, self)
            try:
                await self._witness_start(loop)
                errors = await self._session()
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
        if self.witness_error is not None:
            raise type(self.witness_error)(
                f"{self.witness_error}; the run stopped (run.stopped at seq "
                f"{result.stopped_seq}: {result.reason})"
            ) from self.witness_error
        if errors:
            raise StudyError(
                f"the run stopped on an unexpected error ({type(errors[0]).__name__}: "
                f"{errors[0]}); recorded run.stopped at seq {result.stopped_seq}"
            ) from errors[0]
        return result

    async def _session(self) -> list[BaseException]:
        """Run the pending trials call by call; return the unexpected errors of the workers."""
        assert self.state is not None
        pending = self.pending(self.state)
        if self.options.max_trials is not None:
            pending = pending[: self.options.max_trials]
        queue = deque(pending)
        limit = AdaptiveLimit(self.options.concurrency)
        loop = asyncio.get_running_loop()
        self._tick()
        results: list[Any] = []
        interval = self.witnesses.interval_trials if self.witnesses is not None else 0

        def cosign_interval(size: int) -> None:  # in the writer thread: nothing else records
            if self.witness_error is not None:
                return
            self._witness(lambda c: c.witness(size, "interval"))
            if self.witness_error is not None:
                loop.call_soon_threadsafe(self.request_stop, f"witness: {self.witness_error}")

        self.writer = GroupWriter(
            self.log,
            self.key,
            loop,
            interval=interval,
            on_interval=cosign_interval if interval else None,
        )
        try:
            if self.steps is not None:
                results = await self._phases(queue, limit)
            elif self.shared is not None and self.shared.mode == "shared":
                results = await self._drain_shared(queue, limit)
            else:
                results = await self._drain(queue, limit)
        finally:
            while self.behind:  # with the writer open: a refused outcome's follow-up is written
                await asyncio.wait(list(self.behind))
            await loop.run_in_executor(None, self.writer.close)
            self.writer = None
            if self.behind:  # committed (or failed) by now: let their callbacks run
                await asyncio.wait(list(self.behind))
        errors = [
            r
            for r in results
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)
        ]
        if self.write_error is not None and not errors:
            errors.append(self.write_error)
        return errors

    async def _drain(self, queue: deque[Any], limit: AdaptiveLimit) -> list[Any]:
        """Run every call of ``queue`` with the session's workers; their results.

        A data arm's trials in it are recorded first, in queue (schedule) order, many per
        transaction (``docs/trials.md`` §6): they send nothing.
        """
        data = [t for t in queue if isinstance(t, Trial) and self._is_data(t)]
        if data:
            rest = [t for t in queue if not (isinstance(t, Trial) and self._is_data(t))]
            queue.clear()
            queue.extend(rest)
            try:
                await self._supply(data)
            except Exception as exc:  # a broken ledger: stop as a worker would
                self.request_stop(f"crash: {type(exc).__name__}: {exc}")
                return [exc]
        workers = min(self.options.concurrency, len(queue)) or 0
        tasks = [asyncio.create_task(self._worker(queue, limit)) for _ in range(workers)]
        return list(await asyncio.gather(*tasks, return_exceptions=True))

    async def _drain_shared(self, candidates: deque[Trial], limit: AdaptiveLimit) -> list[Any]:
        """Run pending trials as one of several workers (PostgreSQL, ``docs/trials.md`` §8).

        ``candidates`` are the trials pending at the session's start, in schedule order; each
        worker coroutine takes its next trial from a queue the session refills with leases
        claimed in the store (:meth:`ledger._workers.WorkerLink.claim`), at most
        ``--concurrency`` at a time. A trial leased by another worker is looked at again until
        it is final (or its worker died and its lease ran out); the session ends when every
        candidate is final, run here or elsewhere.
        """
        assert self.shared is not None
        by_id = {t.id: t for t in candidates}
        waiting: deque[str] = deque(t.id for t in candidates)
        queue: deque[Trial] = deque()
        lock = asyncio.Lock()
        budget = [self.options.max_trials]
        # the highest schedule position first requested in this session: a never-requested
        # trial before it (another worker's, given back or left by a dead worker) is left to
        # a new session, so first requests ascend within each session (docs/trials.md §8)
        high = [0]
        deferred: set[str] = set()

        async def refill() -> bool:
            """Claim more trials into ``queue``; False when none is left to wait for."""
            assert self.shared is not None and self.writer is not None
            link = self.shared.link
            while self.stop_reason is None:
                waiting.extend(self.retake)
                self.retake.clear()
                if not waiting or budget[0] == 0:
                    return False
                if link.any_dead():  # in the writer thread: it owns the ledger connection
                    total = len(self.state.order) if self.state is not None else None
                    reap = functools.partial(
                        reap_dead, self.log, self.key, by=self.shared.id, trials=total
                    )
                    await self.writer.call(reap)
                want = self.options.concurrency
                if budget[0] is not None:
                    want = min(want, budget[0])
                ids = [t for t in waiting if t not in deferred]
                for start in range(0, len(ids), 1024):
                    raced = True
                    while raced:  # lost a race for the lowest free trials: ask again
                        claimed, finals, raced = link.claim(ids[start : start + 1024], want)
                    late = [
                        c.trial
                        for c in claimed
                        if c.attempts == 0 and by_id[c.trial].position < high[0]
                    ]
                    if late:
                        link.release(late)
                        deferred.update(late)
                        claimed = [c for c in claimed if c.trial not in deferred]
                    if not claimed and not finals:
                        continue
                    taken = finals | {c.trial for c in claimed}
                    kept = [t for t in waiting if t not in taken]
                    waiting.clear()
                    waiting.extend(kept)
                    deferred.difference_update(finals)
                    assert self.state is not None
                    for c in claimed:
                        record = self.state.trials[c.trial]
                        record.attempts, record.failures = c.attempts, c.failures
                        record.open_request = None
                        queue.append(by_id[c.trial])
                        if c.attempts == 0:
                            high[0] = max(high[0], by_id[c.trial].position)
                    if claimed:
                        if budget[0] is not None:
                            budget[0] -= len(claimed)
                        self.final = link.finals()
                        self._tick()
                        return True
                if deferred:
                    self.request_stop(
                        f"{ROTATE}: {len(deferred)} trial(s) left by other workers come before "
                        "this session's last in the locked order; a new session takes them"
                    )
                    return False
                await self._pause(self.shared.poll_seconds)  # the rest are other workers'
            return False

        async def work() -> None:
            while self.stop_reason is None:
                await limit.acquire()
                try:
                    if not queue:
                        async with lock:
                            if not queue and not await refill():
                                return
                    if not queue or self.stop_reason is not None:
                        continue
                    trial = queue.popleft()
                    try:
                        await self._run_trial(trial, limit)
                    except Exception as exc:  # a bug or a broken ledger: stop everyone else
                        self.request_stop(f"crash: {type(exc).__name__}: {exc}")
                        raise
                finally:
                    await limit.release()

        tasks = [asyncio.create_task(work()) for _ in range(self.options.concurrency)]
        return list(await asyncio.gather(*tasks, return_exceptions=True))

    async def _phases(self, trials: deque[Trial], limit: AdaptiveLimit) -> list[Any]:
        """A study with steps runs in phases (``docs/trials.md`` §5).

        The item steps, layer by layer (a layer reads only earlier layers' decisions); then the
        trials, those whose item the item steps keep out recorded as ``trial.excluded``; then
        the trial steps on every answered trial, layer by layer. Each phase starts from the
        ledger as committed, so a restart resumes exactly where the calls stopped.
        """
        assert self.steps is not None and self.writer is not None and self.state is not None
        work = self.steps
        results: list[Any] = []

        async def reload() -> None:
            assert self.writer is not None
            await self.writer.call(lambda: work.load(self.log))

        more, tried = True, set[str]()
        while more:  # a rejected sample makes an earlier layer's next sample due (§8.6)
            more = False
            for layer in work.render.layers("item"):
                await reload()
                if self.stop_reason is not None:
                    return results
                due = deque(work.pending_item_calls(layer, self.selected))
                fresh = {c.id for c in due} - tried  # a call tried this session waits
                more = more or (bool(fresh) and bool(work.verified))
                tried |= fresh
                results += await self._drain(due, limit)
        await reload()
        if self.stop_reason is not None:
            return results
        ddx = self.study.ddx
        reference = ddx.reference_step if ddx is not None else None
        if reference is not None and work.pending_item_calls(
            [reference], list(self.study.steps[reference].models)
        ):
            return results  # scoring.md §12: reference sets are final before any trial is sent
        order = [t.id for t in self.state.order]
        waiting: list[Trial] = list(trials)
        while True:  # rounds: a second stage waits for its first stage (prompts.md §9)
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
                self.builder.renderer.prior_values[trial.id] = prior
                self.builder.renderer.step_values[trial.stimulus] = values
                ready.append(trial)
            sent = len(ready)  # the workers empty the queue
            results += await self._drain(ready, limit)
            for layer in work.render.layers("trial"):
                await reload()
                if self.stop_reason is not None:
                    return results
                results += await self._drain(
                    deque(work.pending_trial_calls(layer, order, self.selected)), limit
                )
            await reload()
            if not sent or self.stop_reason is not None:
                break  # nothing more can become ready in this session
            waiting = later
        return results

    def _prior(self, trial: Trial) -> dict[str, str] | str | None:
        """The ``{prior.*}`` values of ``trial`` (prompts.md §9).

        A string says why it is excluded; None: its first stage is not final yet.
        """
        spec = self.study.arms[trial.arm]
        if spec.after is None:
            return {}
        assert self.steps is not None and self.state is not None
        return prior_values(self.study, self.steps, self.state, trial, spec.after)

    async def _exclude(self, trial: Trial, step: str, why: str | None = None) -> None:
        """Record ``trial`` as excluded (``trial.excluded``).

        An item step it reads has no decision that keeps it, or (``why``) its first stage gave
        no answer to build on (prompts.md §9).
        """
        assert self.steps is not None and self.state is not None
        if why is not None:
            after = self.study.arms[trial.arm].after or {}
            body = {
                "trial": trial.id,
                "item": trial.stimulus,
                "step": after.get("answer", ""),
                "prior": prior_trial(trial.id, after.get("arm", "")),
                "reason": why,
            }
        else:
            spec = self.study.steps[step]
            decision = self.steps.decision(step, trial.stimulus)
            kept = list(spec.keep) if spec.keep is not None else spec.keep_rule
            reason = (
                f"screened out by step {step!r} (decision {decision!r}, kept: {kept})"
                if spec.screens and decision is not None
                else self.steps.rejection(step, trial.stimulus)
                or f"step {step!r} reached no decision for item {trial.stimulus!r}"
            )
            body = {"trial": trial.id, "item": trial.stimulus, "step": step, "reason": reason}
        seq = await self._write(EventSpec("trial.excluded", body))
        self.state.trials[trial.id].excluded = seq
        self.final += 1
        self._tick()

    def steps_pending(self) -> int:
        """Step calls due and not final (after the session: what a next session would run)."""
        if self.steps is None or self.state is None:
            return 0
        work = self.steps
        pending = sum(
            len(work.pending_item_calls(layer, self.selected))
            for layer in work.render.layers("item")
        )
        order = [t.id for t in self.state.order]
        return pending + sum(
            len(work.pending_trial_calls(layer, order, self.selected))
            for layer in work.render.layers("trial")
        )

    def _close(self) -> RunResult:
        assert self.state is not None
        pending = sum(not s.final for s in self.state.trials.values())
        if self.shared is not None:  # other workers' outcomes count too
            self.final = self.shared.link.finals()
            pending = len(self.state.order) - self.final
        steps_pending = self.steps_pending()
        lost = self.shared.lost if self.shared is not None else None
        if lost is not None:
            reason = lost
        elif pending == 0 and steps_pending == 0:
            reason = "complete"  # even if a stop came after the last trial was sent
        elif self.stop_reason is not None:
            reason = self.stop_reason
        elif self.options.max_trials is not None:
            reason = f"max-trials: {self.options.max_trials} trials run"
        elif steps_pending:
            reason = f"steps: {steps_pending} step call(s) due and not final"
        else:
            reason = "complete"
        c = self.counters
        if self.shared is not None:
            stopped_seq = self._close_worker(reason, pending, steps_pending)
            if stopped_seq is None:  # reaped: the reaper closed this session
                note = self.log.sign_checkpoint(self.key)
                return RunResult(
                    self.session,
                    self.session,
                    reason,
                    c,
                    self.final,
                    pending,
                    note,
                    self.fatal,
                    priced=self.price is not None,
                    signal=self.signalled,
                )
            stopped = self.log.get(stopped_seq)
        else:
            stopped = self._append_stopped(reason, pending, steps_pending)
        note = self.log.sign_checkpoint(self.key)
        if self.witnesses is not None and self.witness_error is None:
            outcome = self._witness(lambda cs: cs.witness(stopped.seq + 1, "session stop"))
            note = outcome.note if outcome is not None else note
        return RunResult(
            self.session,
            stopped.seq,
            reason,
            c,
            self.final,
            pending,
            note,
            self.fatal,
            priced=self.price is not None,
            signal=self.signalled,
            witness_wait=self.witness_wait,
            unwitnessed=tuple(self.witness_notes),
        )

    def _close_worker(self, reason: str, pending: int, steps_pending: int) -> int | None:
        """Append this worker's ``run.stopped`` and leave the store's workers, in one transaction.

        None when another worker reaped this one first (its session is closed already).
        """
        from ledger._workers import remove_worker, session_open

        assert self.shared is not None
        with self.log.transaction():
            if not session_open(self.log, self.session):
                remove_worker(self.log, self.shared.id)
                return None
            stopped = self._append_stopped(reason, pending, steps_pending)
            remove_worker(self.log, self.shared.id)
        return stopped.seq

    def _append_stopped(self, reason: str, pending: int, steps_pending: int) -> Event:
        """Append the session's ``run.stopped``."""
        c = self.counters
        return self.log.append(
            "run.stopped",
            {
                "session": self.session,
                "reason": reason,
                "responded": c.responded,
                "failed": c.failed,
                "given_up": c.given_up,
                "interrupted": c.interrupted,
                "retries": c.retries,
                "cost_usd": round(c.cost_usd, 8) if self._priced() else None,
                "final": self.final,
                "pending": pending,
                **(
                    {"step_calls": self.step_calls, "steps_pending": steps_pending}
                    if self.steps is not None
                    else {}
                ),
            },
            key=self.key,
        )


def _call_members(call: StepCall) -> dict[str, Any]:
    """The members a step event's body names its call by (``docs/trials.md`` §5)."""
    return {"call": call.id, "step": call.step}


def session_witnesses(log: Ledger) -> Any:
    """The witness policy the study locked (``protocol.locked`` ``witnessing``), or None."""
    from runner.lock import protocol_event
    from runner.witnessing import policy_of

    event = protocol_event(log)
    return None if event is None else policy_of(event.body)


def session_models(
    study: Study, backend: Backend, names: Sequence[str] | None
) -> tuple[str | None, ...]:
    """The models a session runs: ``names`` (``--model``), else every model ``backend`` serves.

    A ``[model]`` study has one model, named None. In a ``[models]`` study a simulated backend
    serves every model; a real one the models whose provider it serves
    (:func:`runner.backends.provider_refusal`). Raises :class:`StudyError` for an unknown name,
    a named model the backend does not serve, or no model at all.
    """
    if study.models is None:
        if names:
            raise StudyError(
                f"--model applies to a study with [models.<NAME>] tables; {study.spec_path} has "
                "one [model]"
            )
        return (None,)
    if names:
        unknown = [n for n in names if n not in study.models]
        if unknown:
            raise StudyError(
                f"--model {', '.join(unknown)}: not a model of {study.spec_path} (models: "
                f"{', '.join(study.models)})"
            )
        chosen = [n for n in study.models if n in names]
    else:
        chosen = list(study.models)
    if backend.simulated:
        return tuple(chosen)
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

    ``control`` (:class:`runner.control.RunControl`) handles Ctrl-C and SIGTERM; the CLI
    installs one before it does anything else, so a signal at any moment is handled. A signal
    before the session started raises :class:`runner.control.RunInterruptedError` and records
    nothing but an interrupted preflight. A preflight the backend refuses
    (``options.preflight``, :mod:`runner.preflight`) raises
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
