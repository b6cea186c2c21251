"""The ``anthropic-batch`` backend: the Message Batches API, at half price, resumable.

One session: (1) resume every batch the ledger says is still open (``batch.submitted`` with
requests that have no outcome yet); (2) for the pending trials, append ``trial.requested`` for
each (``"batch": true``), submit them as one batch with ``custom_id`` = ``t`` + the 6-digit
schedule position, and append ``batch.submitted`` with the batch id; (3) poll until the batch
ends, then read its results and append ``trial.responded`` (the raw JSONL line of each result as
the ``response`` blob, ``format: "anthropic-batch-result"``) or ``trial.failed`` (errored,
expired or cancelled results, retried in the next batch). Results are recorded as they are read,
so a crash part way through loses nothing: the next session re-reads the batch and records only
what is missing. Requests recorded but never submitted (a crash between the two appends) are
closed as ``interrupted`` and submitted again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from ledger import Ledger, SigningKey
from runner._backends import AnthropicBackend, BackendError, Reply, error_from_status, not_found
from runner._control import RunControl
from runner._execute import ProgressHook, Runner, RunOptions
from runner._pricing import cost_at
from runner._request import Trial
from runner._session import Session
from runner._state import TrialState
from runner.spec import Study

FORMAT_BATCH = "anthropic-batch-result"


class AnthropicBatchBackend(AnthropicBackend):
    """The SDK's Message Batches routes; ``send`` is not used by the batch flow."""

    name = "anthropic-batch"

    def make_runner(
        self,
        study: Study,
        log: Ledger,
        key: SigningKey,
        options: RunOptions,
        progress: ProgressHook | None,
        control: RunControl | None = None,
    ) -> Runner:
        """A runner whose session is driven in batches.

        :func:`runner._execute.run_study` calls this.
        """
        return Runner(
            study, log, key, self, options, progress, control, driver=BatchRunner, batch=True
        )

    async def submit(self, requests: list[dict[str, Any]]) -> str:
        """Create a batch of ``{"custom_id", "params"}`` requests; return its id."""
        sdk = self.sdk
        try:
            batch = await self.client.messages.batches.create(requests=requests)  # type: ignore[arg-type]
        except sdk.NotFoundError as exc:
            raise not_found(str(exc.response.request.url), error_from_status(exc).message) from None
        except sdk.APIStatusError as exc:
            raise error_from_status(exc) from None
        except sdk.APIConnectionError as exc:
            raise BackendError("connection_error", self.unreachable(exc), retryable=True) from None
        return str(batch.id)

    async def status(self, batch_id: str) -> tuple[str, dict[str, int], str | None]:
        """(processing_status, request_counts, results_url) of a batch."""
        sdk = self.sdk
        try:
            batch = await self.client.messages.batches.retrieve(batch_id)
        except sdk.APIStatusError as exc:
            raise error_from_status(exc) from None
        except sdk.APIConnectionError as exc:
            raise BackendError("connection_error", self.unreachable(exc), retryable=True) from None
        counts = batch.request_counts.model_dump() if batch.request_counts else {}
        return str(batch.processing_status), counts, batch.results_url

    async def results(self, results_url: str) -> AsyncIterator[bytes]:
        """The raw JSONL lines of an ended batch's results."""
        try:
            response = await self.client.get(
                results_url,
                cast_to=self.response_type,
                options={"headers": {"Accept": "application/binary"}},
            )
        except self.sdk.APIStatusError as exc:
            raise error_from_status(exc) from None
        for line in response.content.splitlines():
            if line.strip():
                yield line


class BatchRunner:
    """Drives a session in Message Batches: submit, poll and collect instead of single calls.

    A driver of :class:`runner._execute.Runner` (which opens and closes the session): it
    composes the session's context (:class:`runner._session.Session`: its budget, recorder
    and counters) rather than extending the call-by-call runner.
    """

    batch = True
    chunk: int = 10_000

    def __init__(self, session: Session) -> None:
        """Drive ``session``, whose backend is :class:`AnthropicBatchBackend`."""
        assert isinstance(session.backend, AnthropicBatchBackend)
        self.s = session
        self.backend: AnthropicBatchBackend = session.backend
        self._task: asyncio.Future[None] | None = None

    async def drive(self) -> list[BaseException]:
        """Resume open batches, then submit and collect the pending trials chunk by chunk.

        A second Ctrl-C, or SIGTERM, stops waiting (:meth:`on_signal`): a submitted batch keeps
        running on the API and the next session collects its results.
        """
        self._task = asyncio.ensure_future(self._run_batches())
        try:
            await self._task
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
        return []

    def on_signal(self, name: str, *, first: bool, interrupt: bool) -> str | None:
        """Ctrl-C: submit no new batch; a second one (or SIGTERM): stop waiting for results."""
        s = self.s
        if s.signalled is None:
            s.signalled = name
        s.request_stop(f"interrupted: {name}")
        waiting = (
            "the batch in progress keeps running on the API and the next 'ledger run' "
            "collects its results"
        )
        if interrupt:
            s.interrupted_by = name
            if self._task is not None:
                self._task.cancel()
            return f"{name}: no longer waiting; {waiting}"
        if first:
            return f"stopping: no new batches; {waiting}; press Ctrl-C again to stop waiting"
        return None

    # ------------------------------------------------------------------ collecting

    async def _collect(self, batch_id: str, by_custom: dict[str, tuple[Trial, int, int]]) -> None:
        """Poll ``batch_id`` until it ends; record every result not yet recorded."""
        url = await self._ended(batch_id)
        if url is None:
            return
        seen: set[str] = set()
        async for line in self.backend.results(url):
            parsed = _result(line)
            if parsed is None:
                continue
            custom_id, result, kind = parsed
            entry = by_custom.get(custom_id)
            if entry is None or custom_id in seen:
                continue
            seen.add(custom_id)
            if self._record_result(entry, line, result, kind):
                self.s.tick()

    async def _ended(self, batch_id: str) -> str | None:
        """Poll until the batch ends: its results URL, or None if the session stopped first."""
        s = self.s
        while True:
            status, _counts, url = await self.backend.status(batch_id)
            s.tick()
            if status == "ended" and url:
                return url
            if s.stop_reason is not None:
                return None
            await s.pause(s.options.poll_interval)

    def _record_result(
        self, entry: tuple[Trial, int, int], line: bytes, result: dict[str, Any], kind: str
    ) -> bool:
        """Record one result of the batch; False when an earlier session recorded it."""
        assert self.s.state is not None
        trial, attempt, seq = entry
        record = self.s.state.trials[trial.id]
        if record.open_request != seq:
            return False  # recorded by an earlier session
        record.open_request = None
        if kind == "succeeded":
            self._succeeded(trial, record, attempt, seq, line, result["message"])
        else:
            self._errored(trial, record, attempt, seq, line, result, kind)
        return True

    def _succeeded(
        self,
        trial: Trial,
        record: TrialState,
        attempt: int,
        seq: int,
        line: bytes,
        message: Any,
    ) -> None:
        s = self.s
        usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
        reply = Reply(
            raw=line,
            http_status=200,
            request_id=message.get("id"),
            model=message.get("model"),
            stop_reason=message.get("stop_reason"),
            usage=usage,
            format=FORMAT_BATCH,
        )
        cost = self._append_batch_response(trial, attempt, seq, reply)
        record.responded = seq
        s.counters.responded += 1
        s.counters.cost_usd += cost or 0.0
        s.final += 1

    def _errored(
        self,
        trial: Trial,
        record: TrialState,
        attempt: int,
        seq: int,
        line: bytes,
        result: dict[str, Any],
        kind: str,
    ) -> None:
        s = self.s
        error = _batch_error(result, kind, line)
        record.failures += 1
        s.counters.failed += 1
        final = (not error.retryable) or record.failures >= s.options.max_attempts
        s.recorder.append_failure(trial, attempt, seq, error, final=final)
        if final:
            record.given_up = seq
            s.counters.given_up += 1
            s.final += 1

    def _append_batch_response(
        self, trial: Trial, attempt: int, request_seq: int, reply: Reply
    ) -> float | None:
        price = self.s.budget.price
        cost = cost_at(price, reply.usage, batch=True) if price is not None else None
        self.s.log.append(
            "trial.responded",
            {
                "trial": trial.id,
                "attempt": attempt,
                "request_seq": request_seq,
                "request_id": reply.request_id,
                "http_status": 200,
                "latency_ms": None,
                "stop_reason": reply.stop_reason,
                "usage": reply.usage,
                "cost_usd": cost,
                "model": reply.model,
                "format": FORMAT_BATCH,
                "simulated": False,
            },
            key=self.s.key,
            blobs={"response": reply.raw},
        )
        return cost

    # ------------------------------------------------------------------ submitting

    def _open_batches(self) -> dict[str, dict[str, tuple[Trial, int, int]]]:
        assert self.s.state is not None
        state = self.s.state
        by_id = {t.id: t for t in state.order}
        out: dict[str, dict[str, tuple[Trial, int, int]]] = {}
        for trial_id, record in state.trials.items():
            if record.open_batch and record.open_request is not None:
                trial = by_id[trial_id]
                out.setdefault(record.open_batch, {})[trial.custom_id] = (
                    trial,
                    record.attempts,
                    record.open_request,
                )
        return out

    def _supply_data(self) -> None:
        """Record the data trials (``docs/trials.md`` §6: never batched), chunk by chunk."""
        s = self.s
        assert s.state is not None
        data = [t for t in s.pending(s.state) if s.is_data(t)]
        for start in range(0, len(data), s.DATA_CHUNK):
            chunk = data[start : start + s.DATA_CHUNK]
            attempts = [s.state.trials[t.id].attempts + 1 for t in chunk]
            for trial, attempt, seq in zip(
                chunk, attempts, s.record_data(chunk, attempts), strict=True
            ):
                s.supplied(s.state.trials[trial.id], attempt, seq)

    def _next_chunk(self) -> list[Trial]:
        """The pending trials of the next batch, within ``--max-trials`` and the budget."""
        s = self.s
        assert s.state is not None
        state = s.state
        pending = [t for t in s.pending(state) if state.trials[t.id].open_request is None]
        if s.options.max_trials is not None:
            done_here = s.counters.responded + s.counters.given_up
            pending = pending[: max(s.options.max_trials - done_here, 0)]
        chunk: list[Trial] = []
        for trial in pending[: self.chunk]:
            if s.reserve(trial, s.builder.body(trial)) is None:
                break  # the budget forbids more; the stop reason is recorded
            chunk.append(trial)
        return chunk

    def _request(
        self, chunk: list[Trial]
    ) -> tuple[dict[str, tuple[Trial, int, int]], list[dict[str, Any]]]:
        """Append ``trial.requested`` for each trial of ``chunk``.

        Returns the requests by custom id, and the batch's requests as submitted.
        """
        s = self.s
        assert s.state is not None
        by_custom: dict[str, tuple[Trial, int, int]] = {}
        requests: list[dict[str, Any]] = []
        for trial in chunk:
            record = s.state.trials[trial.id]
            record.attempts += 1
            wire = s.builder.body(trial)
            seq = s.recorder.append_request(trial, record.attempts, wire)
            record.open_request = seq
            by_custom[trial.custom_id] = (trial, record.attempts, seq)
            requests.append({"custom_id": trial.custom_id, "params": wire})
        return by_custom, requests

    def _close_requests(
        self, by_custom: dict[str, tuple[Trial, int, int]], error: BackendError, *, count: bool
    ) -> None:
        """Record every request of a batch that was not submitted as failed with ``error``."""
        s = self.s
        assert s.state is not None
        for trial, attempt, seq in by_custom.values():
            s.recorder.append_failure(trial, attempt, seq, error, final=False)
            s.state.trials[trial.id].open_request = None
            if count:
                s.counters.interrupted += 1

    async def _submit(
        self, by_custom: dict[str, tuple[Trial, int, int]], requests: list[dict[str, Any]]
    ) -> str | None:
        """Submit the batch; its id, or None (the run stops) when the API refused it."""
        s = self.s
        try:
            return await self.backend.submit(requests)
        except asyncio.CancelledError:
            # interrupted while submitting: the batch may or may not exist on the API; its
            # requests are closed here, and submitted again by the next session
            error = BackendError(
                "interrupted",
                f"interrupted by {s.interrupted_by or 'a signal'} while the batch was "
                "being submitted; it may or may not have been created",
                retryable=True,
            )
            self._close_requests(by_custom, error, count=True)
            raise
        except BackendError as error:
            self._close_requests(by_custom, error, count=False)
            s.fatal = error.message
            s.request_stop(f"error: batch submission failed: {error.message}")
            return None

    async def _run_batches(self) -> None:
        s = self.s
        for batch_id, entries in self._open_batches().items():
            await self._collect(batch_id, entries)
        self._supply_data()
        while s.stop_reason is None:
            chunk = self._next_chunk()
            if not chunk:
                break
            by_custom, requests = self._request(chunk)
            submitted = await self._submit(by_custom, requests)
            if submitted is None:
                break
            s.log.append(
                "batch.submitted",
                {
                    "batch_id": submitted,
                    "requests": [seq for _, _, seq in by_custom.values()],
                    "trials": [t.id for t in chunk],
                },
                key=s.key,
            )
            await self._collect(submitted, by_custom)
            s.counters.reserved_usd = 0.0  # the batch ended: what it cost is now counted
            until = s.options.until
            if until is not None and datetime.now(UTC) >= until:
                s.request_stop(f"until: reached {until.isoformat()}")


def _result(line: bytes) -> tuple[str, dict[str, Any], str] | None:
    """(custom_id, result, type) of one line of a batch's results; None if it is not one."""
    try:
        item = json.loads(line)
        custom_id = item["custom_id"]
        result = item["result"]
        kind = result["type"]
    except (ValueError, KeyError, TypeError):
        return None
    return custom_id, result, kind


def _batch_error(result: dict[str, Any], kind: str, line: bytes) -> BackendError:
    """The failure of an errored, expired or cancelled result (retried unless invalid)."""
    error = result.get("error", {}) if kind == "errored" else {}
    inner = error.get("error", error) if isinstance(error, dict) else {}
    message_text = inner.get("message", kind) if isinstance(inner, dict) else kind
    err_type = inner.get("type", kind) if isinstance(inner, dict) else kind
    retryable = kind in ("expired", "canceled") or err_type != "invalid_request_error"
    return BackendError(
        f"batch_{kind}:{err_type}", str(message_text), retryable=retryable, raw=line
    )
