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
from runner.backends import (
    AnthropicBackend,
    BackendError,
    Reply,
    error_from_status,
    not_found,
)
from runner.control import RunControl
from runner.execute import ProgressHook, Runner, RunOptions
from runner.pricing import cost_at
from runner.request import Trial
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
        """The session driver for batches (:func:`runner.execute.run_study` calls this)."""
        return BatchRunner(study, log, key, self, options, progress, control)

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


class BatchRunner(Runner):
    """A session that submits, polls and collects Message Batches instead of single calls."""

    backend: AnthropicBatchBackend
    batch = True
    chunk: int = 10_000
    _task: asyncio.Future[None] | None = None

    async def _collect(self, batch_id: str, by_custom: dict[str, tuple[Trial, int, int]]) -> None:
        """Poll ``batch_id`` until it ends; record every result not yet recorded."""
        assert self.state is not None
        while True:
            status, _counts, url = await self.backend.status(batch_id)
            if self.progress is not None:
                self.progress(self.counters, self.final, len(self.state.order))
            if status == "ended" and url:
                break
            if self.stop_reason is not None:
                return
            await self._pause(self.options.poll_interval)
        seen: set[str] = set()
        async for line in self.backend.results(url):
            try:
                item = json.loads(line)
                custom_id = item["custom_id"]
                result = item["result"]
                kind = result["type"]
            except (ValueError, KeyError, TypeError):
                continue
            entry = by_custom.get(custom_id)
            if entry is None or custom_id in seen:
                continue
            seen.add(custom_id)
            trial, attempt, seq = entry
            record = self.state.trials[trial.id]
            if record.open_request != seq:
                continue  # recorded by an earlier session
            record.open_request = None
            if kind == "succeeded":
                message = result["message"]
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
                self.counters.responded += 1
                self.counters.cost_usd += cost or 0.0
                self.final += 1
            else:
                error = result.get("error", {}) if kind == "errored" else {}
                inner = error.get("error", error) if isinstance(error, dict) else {}
                message_text = inner.get("message", kind) if isinstance(inner, dict) else kind
                err_type = inner.get("type", kind) if isinstance(inner, dict) else kind
                retryable = kind in ("expired", "canceled") or err_type != "invalid_request_error"
                record.failures += 1
                self.counters.failed += 1
                final = (not retryable) or record.failures >= self.options.max_attempts
                self._append_failure(
                    trial,
                    attempt,
                    seq,
                    BackendError(
                        f"batch_{kind}:{err_type}", str(message_text), retryable=retryable, raw=line
                    ),
                    final=final,
                )
                if final:
                    record.given_up = seq
                    self.counters.given_up += 1
                    self.final += 1
            if self.progress is not None:
                self.progress(self.counters, self.final, len(self.state.order))

    def _append_batch_response(
        self, trial: Trial, attempt: int, request_seq: int, reply: Reply
    ) -> float | None:
        cost = cost_at(self.price, reply.usage, batch=True) if self.price is not None else None
        self.log.append(
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
            key=self.key,
            blobs={"response": reply.raw},
        )
        return cost

    def _open_batches(self) -> dict[str, dict[str, tuple[Trial, int, int]]]:
        assert self.state is not None
        by_id = {t.id: t for t in self.state.order}
        out: dict[str, dict[str, tuple[Trial, int, int]]] = {}
        for trial_id, record in self.state.trials.items():
            if record.open_batch and record.open_request is not None:
                trial = by_id[trial_id]
                out.setdefault(record.open_batch, {})[trial.custom_id] = (
                    trial,
                    record.attempts,
                    record.open_request,
                )
        return out

    async def _session(self) -> list[BaseException]:
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
        if self.signalled is None:
            self.signalled = name
        self.request_stop(f"interrupted: {name}")
        waiting = (
            "the batch in progress keeps running on the API and the next 'ledger run' "
            "collects its results"
        )
        if interrupt:
            self.interrupted_by = name
            if self._task is not None:
                self._task.cancel()
            return f"{name}: no longer waiting; {waiting}"
        if first:
            return f"stopping: no new batches; {waiting}; press Ctrl-C again to stop waiting"
        return None

    async def _run_batches(self) -> None:
        assert self.state is not None
        for batch_id, entries in self._open_batches().items():
            await self._collect(batch_id, entries)
        data = [t for t in self.pending(self.state) if self._is_data(t)]
        for start in range(0, len(data), self.DATA_CHUNK):  # docs/trials.md §6: never batched
            chunk = data[start : start + self.DATA_CHUNK]
            attempts = [self.state.trials[t.id].attempts + 1 for t in chunk]
            for trial, attempt, seq in zip(
                chunk, attempts, self._record_data(chunk, attempts), strict=True
            ):
                self._supplied(self.state.trials[trial.id], attempt, seq)
        while self.stop_reason is None:
            pending = [
                t for t in self.pending(self.state) if self.state.trials[t.id].open_request is None
            ]
            if self.options.max_trials is not None:
                done_here = self.counters.responded + self.counters.given_up
                pending = pending[: max(self.options.max_trials - done_here, 0)]
            if not pending:
                break
            chunk = []
            for trial in pending[: self.chunk]:
                if self._reserve(trial, self.builder.body(trial)) is None:
                    break  # the budget forbids more; the stop reason is recorded
                chunk.append(trial)
            if not chunk:
                break
            requests = []
            seqs = []
            by_custom: dict[str, tuple[Trial, int, int]] = {}
            for trial in chunk:
                record = self.state.trials[trial.id]
                record.attempts += 1
                wire = self.builder.body(trial)
                seq = self._append_request(trial, record.attempts, wire)
                record.open_request = seq
                seqs.append(seq)
                by_custom[trial.custom_id] = (trial, record.attempts, seq)
                requests.append({"custom_id": trial.custom_id, "params": wire})
            try:
                batch_id = await self.backend.submit(requests)
            except asyncio.CancelledError:
                # interrupted while submitting: the batch may or may not exist on the API; its
                # requests are closed here, and submitted again by the next session
                error = BackendError(
                    "interrupted",
                    f"interrupted by {self.interrupted_by or 'a signal'} while the batch was "
                    "being submitted; it may or may not have been created",
                    retryable=True,
                )
                for trial in chunk:
                    _, attempt, seq = by_custom[trial.custom_id]
                    self._append_failure(trial, attempt, seq, error, final=False)
                    self.state.trials[trial.id].open_request = None
                    self.counters.interrupted += 1
                raise
            except BackendError as error:
                for trial in chunk:
                    _, attempt, seq = by_custom[trial.custom_id]
                    self._append_failure(trial, attempt, seq, error, final=False)
                    self.state.trials[trial.id].open_request = None
                self.fatal = error.message
                self.request_stop(f"error: batch submission failed: {error.message}")
                break
            self.log.append(
                "batch.submitted",
                {"batch_id": batch_id, "requests": seqs, "trials": [t.id for t in chunk]},
                key=self.key,
            )
            await self._collect(batch_id, by_custom)
            self.counters.reserved_usd = 0.0  # the batch ended: what it cost is now counted
            if self.options.until is not None and datetime.now(UTC) >= self.options.until:
                self.request_stop(f"until: reached {self.options.until.isoformat()}")
