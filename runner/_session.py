"""What one session of ``ledger run`` shares between its parts (``docs/trials.md``).

:class:`Session` is the context every part of a session works in: the study, the ledger and
the backend; the trials' state and the session's counters; the stop (the first reason given
wins, and wakes every sleeper); and the collaborators that each own one concern: the money
(:class:`runner._budget.SessionBudget`), the events (:class:`runner._recording.EventRecorder`),
the witnesses (:class:`runner._session_witness.SessionWitness`) and the retries
(:class:`runner._retry.RetryPolicy`). The runner (:class:`runner._execute.Runner`) opens and
closes a session around a driver that sends its requests: call by call
(:class:`runner._calls.CallDriver`) or in Message Batches (:class:`runner._batch.BatchRunner`);
both drivers compose this context instead of extending the runner.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ledger import EventSpec, Ledger, RefusedError, SigningKey
from runner._backends import Backend
from runner._budget import SessionBudget
from runner._control import RunControl
from runner._data_arm import data_trial_events
from runner._options import Counters, ProgressHook, RunOptions
from runner._recording import EventRecorder
from runner._request import RequestBuilder, Trial
from runner._retry import RetryPolicy
from runner._session_witness import SessionWitness
from runner._state import StudyState, TrialState
from runner._workers import SharedRun
from runner.spec import Study
from runner.steps._core import StepCall
from runner.steps._state import StepWork


class Session:
    """One session's shared context and collaborators (see the module's docstring)."""

    DATA_CHUNK = 256
    """Data trials recorded per transaction (``docs/trials.md`` §6)."""

    def __init__(
        self,
        study: Study,
        log: Ledger,
        key: SigningKey,
        backend: Backend,
        options: RunOptions,
        *,
        selected: tuple[str | None, ...],
        witnesses: Any,
        batch: bool,
        progress: ProgressHook | None = None,
        control: RunControl | None = None,
    ) -> None:
        """Prepare the context of a session of the models ``selected`` under ``witnesses``.

        A budget without a price is refused here (:class:`runner._budget.SessionBudget`),
        before anything is recorded.
        """
        self.study = study
        self.log = log
        self.key = key
        self.backend = backend
        self.options = options
        self.progress = progress
        self.control = control
        self.builder = RequestBuilder(study)
        self.selected = selected
        chosen = [m for m in study.model_specs() if m.name in selected]
        self.model = ", ".join(dict.fromkeys(m.id for m in chosen))
        max_tokens = max(int(m.params.get("max_tokens", 4096)) for m in chosen)
        self.counters = Counters(concurrency=options.concurrency)
        self.stop_reason: str | None = None
        self.fatal: str | None = None
        self.signalled: str | None = None  # the first signal received in the session
        self.interrupted_by: str | None = None  # the signal that cancelled the calls in flight
        self._stopped = asyncio.Event()  # set with the first stop reason: wakes sleepers
        self.state: StudyState | None = None
        self.final = 0
        # recorded model steps (docs/trials.md §5): None for a study without [steps]
        staged = any(a.after is not None for a in study.arms.values())  # prompts.md §9
        self.steps = StepWork(study, self.builder.renderer) if study.steps or staged else None
        self.step_calls = 0  # step responses this session
        self._items: dict[str, Any] | None = None  # item id -> data, for data arms (trials.md §6)
        # on PostgreSQL: this process as one of the study's workers (docs/trials.md §8)
        self.shared: SharedRun | None = None
        self.retake: list[str] = []  # trials given back to be claimed again (PostgreSQL)
        self.budget = SessionBudget(
            study,
            backend,
            options,
            self.builder,
            model=self.model,
            ids=[m.id for m in chosen],
            max_tokens=max_tokens,
            batch=batch,
        )
        self.recorder = EventRecorder(log, key, backend, batch=batch)
        self.witness = SessionWitness(
            log, key, witnesses, should_stop=lambda: self.stop_reason is not None
        )
        self.retry = RetryPolicy(options)

    @property
    def seq(self) -> int:
        """The seq of this session's ``run.started`` (0 before it is appended)."""
        return self.recorder.session

    # ------------------------------------------------------------------ control

    def request_stop(self, reason: str) -> None:
        """Start no new request; the first reason given is the one recorded."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._stopped.set()

    async def pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if the run is stopped meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopped.wait(), seconds)

    def tick(self) -> None:
        """Tell the progress hook (if any) where the session stands."""
        if self.progress is not None:
            assert self.state is not None
            self.progress(self.counters, self.final, len(self.state.order))

    def reserve(self, trial: Trial | StepCall, wire: dict[str, Any]) -> float | None:
        """Reserve the most this request can cost; None (and stop) if the budget forbids it."""
        reserved, why = self.budget.reserve(trial, wire, self.counters, self.shared)
        if why is not None:
            self.request_stop(why)
        return reserved

    def lost(self, refused: RefusedError) -> None:
        """The store refused this worker's event: another worker closed its session."""
        reason = (self.shared.lost if self.shared is not None and self.shared.lost else None) or (
            f"lost: the store refused this worker's event ({refused}); another worker closed "
            "this worker's session"
        )
        if self.shared is not None and self.shared.lost is None:
            self.shared.lost = reason
        self.request_stop(reason)

    # ------------------------------------------------------------------ trials

    def pending(self, state: StudyState) -> list[Trial]:
        """The pending trials this session may run (those of its models), in schedule order.

        A data arm's trials (``docs/trials.md`` §6) need no model: every session takes them.
        """
        if self.study.models is None:
            return state.pending()
        return [t for t in state.pending() if t.model in self.selected or self.is_data(t)]

    def is_data(self, trial: Trial) -> bool:
        """Whether ``trial`` is of a data arm (``response_from``): no request is sent."""
        return self.study.arms[trial.arm].response_from is not None

    def record_data(self, trials: Sequence[Trial], attempts: Sequence[int]) -> list[int]:
        """Append data trials' event pairs in one transaction; the responses' seqs.

        Called in the writer thread (or, in a batch session, directly): nothing else appends
        between reading the ledger's size and the append, so each response's ``request_seq``
        is the seq its request receives.
        """
        writer = self.recorder.writer
        if writer is not None and writer.failed is not None:
            raise writer.failed  # nothing is committed after a failed commit
        if self._items is None:
            self._items = {i.id: i.data for i in self.study.load_items()}
        base = self.log.size
        specs: list[EventSpec] = []
        for k, (trial, attempt) in enumerate(zip(trials, attempts, strict=True)):
            request, response = data_trial_events(
                self.study, trial, attempt, self.seq, self._items[trial.stimulus]
            )
            specs += [
                request,
                replace(response, body={**response.body, "request_seq": base + 2 * k}),
            ]
        stored = self.log.append_many(specs, key=self.key)
        return [stored[2 * k + 1].seq for k in range(len(trials))]

    def supplied(self, record: TrialState, attempt: int, seq: int) -> None:
        """Count a data trial recorded at ``seq`` (its response)."""
        record.attempts = attempt
        record.responded = seq
        self.counters.responded += 1
        self.final += 1

    def call_of(self, call_id: str) -> StepCall:
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
