"""The Inspect AI extension: hooks that record an eval in a PROMPT ledger (``docs/inspect.md``).

Registered through the ``inspect_ai`` entry point of ``pyproject.toml``, so Inspect loads it at
start-up when ``prompt-ledger[inspect]`` is installed; it is enabled only while the environment
variable ``PROMPT_LEDGER_INSPECT`` names a ledger folder::

    PROMPT_LEDGER_INSPECT=ledger-dir inspect eval task.py --model openai/gpt-4o-mini

What each hook records (bodies in ``docs/inspect.md`` section 4):

- ``on_task_start`` (before the first sample): ``inspect.locked`` — task name, version and
  arguments, the dataset's hash and each sample's, solver plan, scorers and metrics, model,
  base URL, model arguments and generation config, epochs, seed — and the signed registration
  checkpoint, written to ``checkpoints/<eval id>-registration.txt`` for publication;
- ``on_before_model_generate`` (awaited by Inspect before every attempt, retries included):
  ``inspect.requested``, the request as Inspect is about to send it;
- ``on_sample_event`` with a completed model event: ``inspect.responded`` (the output, and the
  raw provider call when Inspect has it) or ``inspect.failed`` (the error);
- ``on_sample_end``: ``inspect.scored`` (the sample's scores);
- ``on_task_end``: ``inspect.finished`` (status and metrics) and the final checkpoint.

Hooks only read what Inspect hands them (never mutate it), so the eval runs and scores as it
would without them. Inspect catches a hook's exception and logs a warning; the ledger then
lacks that event and ``ledger verify`` fails, which is the honest outcome.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, cast

from inspect_ai.event import ModelEvent
from inspect_ai.hooks import (
    BeforeModelGenerate,
    Hooks,
    RunEnd,
    RunStart,
    SampleEnd,
    SampleEvent,
    TaskEnd,
    TaskStart,
    hooks,
)

from runner._inspect_record import ENV_FOLDER, InspectRecorder, dataset_sha256, sample_sha256

__all__ = ["LedgerHooks"]


def _dump(value: Any) -> Any:
    """The JSON form of a pydantic model (or a list of them), nulls left out."""
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_none=True)
    return value


def _dataset(spec: Any) -> dict[str, Any]:
    """The locked description of the dataset: Inspect's, plus the hash of every sample.

    Inspect does not hand the dataset to hooks, so the task is created again from its registry
    entry with the same arguments, and the samples the eval will run (``spec.dataset.sample_ids``)
    are hashed (:func:`runner._inspect_record.sample_sha256`). If that fails, the reason is
    recorded instead of the hashes.
    """
    described: dict[str, Any] = _dump(spec.dataset)
    try:
        from inspect_ai._util.registry import registry_lookup

        create = registry_lookup("task", spec.task_registry_name)
        if create is None:
            raise LookupError(f"task {spec.task_registry_name!r} is not registered")
        task = cast(Callable[..., Any], create)(**spec.task_args)
        wanted = spec.dataset.sample_ids
        keep = {str(i) for i in wanted} if wanted is not None else None
        hashes: dict[str, str] = {}
        for sample in task.dataset:
            if keep is not None and str(sample.id) not in keep:
                continue
            form = {
                "id": sample.id,
                "input": _dump(sample.input),
                "target": sample.target,
                "choices": sample.choices,
            }
            hashes[str(sample.id)] = sample_sha256(form)
        described["sample_sha256"] = hashes
        described["sha256"] = dataset_sha256(hashes)
    except Exception as exc:  # recorded, not raised: the eval must run as without the hooks
        described["sha256"] = None
        described["hash_error"] = f"{type(exc).__name__}: {exc}"
    return described


def _lock_body(spec: Any, plan: Any) -> dict[str, Any]:
    """The body of ``inspect.locked``: what defines the eval (full spec and plan are blobs)."""
    config = _dump(spec.config)
    generate = _dump(spec.model_generate_config)
    return {
        "task": spec.task,
        "task_version": spec.task_version,
        "task_id": spec.task_id,
        "task_file": spec.task_file,
        "task_registry_name": spec.task_registry_name,
        "task_args": _dump(spec.task_args),
        "run_id": spec.run_id,
        "dataset": _dataset(spec),
        "solver": [_dump(step) for step in plan.steps],
        "scorers": _dump(spec.scorers or []),
        "metrics": _dump(spec.metrics) if getattr(spec, "metrics", None) else None,
        "model": spec.model,
        "model_base_url": spec.model_base_url,
        "model_args": _dump(spec.model_args),
        "generate_config": generate,
        "epochs": config.get("epochs", 1),
        "seed": generate.get("seed"),
        "sample_shuffle": config.get("sample_shuffle"),
        "inspect_version": spec.packages.get("inspect_ai") if spec.packages else None,
    }


@hooks(name="prompt_ledger", description="PROMPT Ledger: a signed, verifiable record of the eval")
class LedgerHooks(Hooks):
    """Records every eval of the run in the ledger folder named by ``PROMPT_LEDGER_INSPECT``."""

    def __init__(self) -> None:
        self.recorder: InspectRecorder | None = None

    def enabled(self) -> bool:
        """Enabled while ``PROMPT_LEDGER_INSPECT`` names a folder."""
        return bool(os.environ.get(ENV_FOLDER))

    def _open(self) -> InspectRecorder:
        if self.recorder is None:
            self.recorder = InspectRecorder.open(os.environ[ENV_FOLDER])
        return self.recorder

    async def on_run_start(self, data: RunStart) -> None:
        """Open (or create) the ledger."""
        self._open()

    async def on_run_end(self, data: RunEnd) -> None:
        """Close the ledger."""
        if self.recorder is not None:
            self.recorder.close()
            self.recorder = None

    async def on_task_start(self, data: TaskStart) -> None:
        """Lock the eval before its first sample and sign the registration checkpoint."""
        spec = data.spec
        self._open().lock(
            data.eval_id,
            _lock_body(spec, data.plan),
            {"spec": _dump(spec), "plan": _dump(data.plan)},
        )

    async def on_before_model_generate(self, data: BeforeModelGenerate) -> None:
        """Record the request before Inspect sends it (every attempt)."""
        if data.eval_id is None:
            return  # a model call outside any eval (none of ours)
        # ``data.sample_id`` is the id of this attempt's active sample, not the sample uuid
        # that sample events, ``on_sample_end`` and the log carry: ask the active sample
        from inspect_ai.log._samples import sample_active

        active = sample_active()
        sample = getattr(active, "sample_uuid", None) or data.sample_id
        info = {
            "id": getattr(getattr(active, "sample", None), "id", None),
            "epoch": getattr(active, "epoch", None),
        }
        request = {
            "model": data.model_name,
            "input": _dump(data.input),
            "tools": _dump(data.tools),
            "tool_choice": _dump(data.tool_choice),
            "config": _dump(data.config),
            "cache": data.cache,
        }
        self._open().requested(data.eval_id, sample, info, request)

    async def on_sample_event(self, data: SampleEvent) -> None:
        """Record a completed model call's response or error."""
        event = data.event
        if not isinstance(event, ModelEvent) or event.pending:
            return
        record = {
            "uuid": event.uuid,
            "model": event.model,
            "input": _dump(event.input),
            "tools": _dump(event.tools),
            "tool_choice": _dump(event.tool_choice),
            "config": _dump(event.config),
            "output": _dump(event.output),
            "error": event.error,
            "cache": event.cache,
            "call": _dump(event.call),
        }
        self._open().outcome(data.eval_id, data.sample_id, record)

    async def on_sample_end(self, data: SampleEnd) -> None:
        """Record the sample's scores."""
        sample = data.sample
        scores = {
            name: {k: v for k, v in _dump(score).items() if k in ("value", "answer")}
            for name, score in (sample.scores or {}).items()
        }
        body = {
            "sample_id": sample.id,
            "epoch": sample.epoch,
            "scores": scores,
            "error": sample.error.message if sample.error is not None else None,
        }
        self._open().scored(data.eval_id, data.sample_id, body)

    async def on_task_end(self, data: TaskEnd) -> None:
        """Record the eval's status and metrics and sign the final checkpoint."""
        log = data.log
        results = log.results
        metrics = [
            {
                "name": score.name,
                "scorer": score.scorer,
                "metrics": {name: metric.value for name, metric in score.metrics.items()},
            }
            for score in (results.scores if results is not None else [])
        ]
        body = {
            "status": log.status,
            "error": log.error.message if log.error is not None else None,
            "total_samples": results.total_samples if results is not None else 0,
            "completed_samples": results.completed_samples if results is not None else 0,
            "scores": metrics,
        }
        self._open().finished(data.eval_id, body, _dump(results) if results else None)
