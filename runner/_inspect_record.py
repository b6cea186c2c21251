"""Recording an Inspect AI eval in a PROMPT ledger (``docs/inspect.md``).

This module knows nothing of Inspect's classes: the hooks (:mod:`runner._inspect_hooks`) turn
Inspect's objects into plain JSON-able dicts and hand them here, so the recording itself is
plain Python over :class:`ledger.Ledger`. One folder holds one ledger, its keys and the signed
checkpoints written for publication; evals append to it one after another::

    recorder = InspectRecorder.open("ledger-dir")
    recorder.lock(eval_id, lock_body, {"spec": spec, "plan": plan})   # registration checkpoint
    seq = recorder.requested(eval_id, sample, request)                # before the call is sent
    recorder.outcome(eval_id, sample, event)                          # after: response or error
    recorder.scored(eval_id, sample, sample_body)                     # each sample's scores
    recorder.finished(eval_id, results)                               # metrics, final checkpoint

Event kinds (``docs/inspect.md`` section 4): ``inspect.locked`` (owner), ``inspect.requested``,
``inspect.responded``, ``inspect.failed`` (runner), ``inspect.scored`` and ``inspect.finished``
(owner).
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger import MAX_SAFE_INTEGER, Ledger, SigningKey, canonical_json

__all__ = [
    "ENV_FOLDER",
    "ENV_ORIGIN",
    "InspectRecorder",
    "dataset_sha256",
    "request_key",
    "safe_json",
    "sample_sha256",
]

#: The environment variable that enables the extension: the ledger folder.
ENV_FOLDER = "PROMPT_LEDGER_INSPECT"
#: Optional: the checkpoint origin of a new ledger (default ``prompt-ledger/inspect/<random>``).
ENV_ORIGIN = "PROMPT_LEDGER_INSPECT_ORIGIN"

LEDGER_FILE = "ledger.db"
OWNER_KEY = "keys/owner.key"
RUNNER_KEY = "keys/runner.key"


def safe_json(value: Any) -> Any:
    """``value`` with what a ledger envelope cannot hold written as strings.

    Integers beyond 2^53 - 1 (seeds) become decimal strings, NaN and the infinities become
    ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; tuples become lists; other objects their ``str``.
    """
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, dict):
        return {str(k): safe_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [safe_json(v) for v in value]
    return str(value)


def _blob(value: Any) -> bytes:
    """The bytes of a JSON blob: RFC 8785 canonical JSON of :func:`safe_json` of ``value``."""
    return canonical_json(safe_json(value))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _strip_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value]
    return value


def sample_sha256(sample: dict[str, Any]) -> str:
    """The locked hash of one dataset sample (``docs/inspect.md`` section 3).

    SHA-256 of the canonical JSON of ``{"id", "input", "target", "choices"}``, where ``input``
    is the string, or the list of chat messages each without its ``id`` member, and members
    whose value is null are left out at every depth.
    """
    value = sample.get("input")
    if isinstance(value, list):
        value = [{k: v for k, v in m.items() if k != "id"} for m in value]
    form = {
        "id": sample.get("id"),
        "input": value,
        "target": sample.get("target"),
        "choices": sample.get("choices"),
    }
    return _sha256(canonical_json(safe_json(_strip_nulls(form))))


def dataset_sha256(sample_hashes: dict[str, str]) -> str:
    """SHA-256 of the canonical JSON object mapping each sample id (as a string) to its hash."""
    return _sha256(canonical_json(sample_hashes))


def request_key(request: dict[str, Any]) -> str:
    """What pairs a request with its outcome: SHA-256 of model, input, tools, choice, config."""
    form = {k: request.get(k) for k in ("model", "input", "tools", "tool_choice", "config")}
    return _sha256(_blob(_strip_nulls(form)))


@dataclass
class _Eval:
    """What the recorder keeps about one eval while it runs."""

    lock_seq: int
    pending: dict[tuple[str, str], deque[int]] = field(default_factory=dict)
    seen: dict[str, set[str]] = field(default_factory=dict)  # sample -> model events recorded
    calls: int = 0


class InspectRecorder:
    """Appends an Inspect eval's registration, model calls, scores and metrics to a ledger."""

    def __init__(self, folder: Path, log: Ledger, owner: SigningKey, runner: SigningKey) -> None:
        self.folder = folder
        self.log = log
        self.owner = owner
        self.runner = runner
        self.evals: dict[str, _Eval] = {}

    @classmethod
    def open(cls, folder: str | os.PathLike[str]) -> InspectRecorder:
        """Open the ledger in ``folder``, creating the folder, its keys and ledger if absent.

        A new ledger registers a fresh owner key (genesis) and a fresh runner key
        (``key.added``), saved as ``keys/owner.key`` and ``keys/runner.key`` (mode 0600) with
        their ``.vkey`` files beside them.
        """
        root = Path(folder)
        root.mkdir(parents=True, exist_ok=True)
        db = root / LEDGER_FILE
        if db.exists():
            owner = SigningKey.load(root / OWNER_KEY)
            runner = SigningKey.load(root / RUNNER_KEY)
            return cls(root, Ledger.open(db), owner, runner)
        origin = os.environ.get(ENV_ORIGIN) or f"prompt-ledger/inspect/{secrets.token_hex(6)}"
        owner = SigningKey.generate(f"{origin}/owner")
        runner = SigningKey.generate(f"{origin}/runner")
        owner.save(root / OWNER_KEY, vkey=True)
        runner.save(root / RUNNER_KEY, vkey=True)
        log = Ledger.create(db, origin=origin, key=owner)
        log.add_key(runner.vkey, "runner", key=owner)
        return cls(root, log, owner, runner)

    def close(self) -> None:
        """Close the ledger."""
        self.log.close()

    def _checkpoint(self, eval_id: str, label: str) -> Path:
        note = self.log.sign_checkpoint(self.owner)
        target = self.folder / "checkpoints" / f"{eval_id}-{label}.txt"
        target.parent.mkdir(exist_ok=True)
        target.write_text(note, encoding="utf-8")
        return target

    # ------------------------------------------------------------------ the eval

    def lock(self, eval_id: str, body: dict[str, Any], blobs: dict[str, Any]) -> Path:
        """Append ``inspect.locked`` and sign the registration checkpoint; return its file."""
        event = self.log.append(
            "inspect.locked",
            safe_json({**body, "eval_id": eval_id}),
            key=self.owner,
            blobs={name: _blob(value) for name, value in blobs.items()},
        )
        self.evals[eval_id] = _Eval(event.seq)
        return self._checkpoint(eval_id, "registration")

    def _eval(self, eval_id: str) -> _Eval:
        state = self.evals.get(eval_id)
        if state is None:
            raise KeyError(f"eval {eval_id} was not locked in {self.folder}")
        return state

    def requested(
        self, eval_id: str, sample: str | None, info: dict[str, Any], request: dict[str, Any]
    ) -> int:
        """Append ``inspect.requested`` (before the call is sent); return its seq.

        ``sample`` is the sample's uuid (Inspect's ``EvalSample.uuid``), ``info`` its dataset
        ``id`` and ``epoch``.
        """
        state = self._eval(eval_id)
        sample_key = sample or ""
        key = request_key(request)
        data = _blob(request)
        event = self.log.append(
            "inspect.requested",
            safe_json(
                {
                    "eval_id": eval_id,
                    "sample": sample,
                    "sample_id": info.get("id"),
                    "epoch": info.get("epoch"),
                    "model": request.get("model"),
                    "request_key": key,
                }
            ),
            key=self.runner,
            blobs={"request": data},
        )
        state.pending.setdefault((sample_key, key), deque()).append(event.seq)
        state.calls += 1
        return event.seq

    def outcome(self, eval_id: str, sample: str | None, event: dict[str, Any]) -> int | None:
        """Append ``inspect.responded`` or ``inspect.failed`` for a completed model event.

        ``event`` is the model event's JSON (``model``, ``input``, ``tools``, ``tool_choice``,
        ``config``, ``output``, ``error``, ``call``, ``cache``, ``uuid``); it is paired with the
        oldest request of the same sample and :func:`request_key` still waiting for an outcome.
        Inspect may report one completed model event more than once: only its first report is
        recorded (None is returned for the others).
        """
        state = self._eval(eval_id)
        seen = state.seen.setdefault(sample or "", set())
        uuid = event.get("uuid")
        if uuid is not None:
            if uuid in seen:
                return None
            seen.add(uuid)
        queue = state.pending.get((sample or "", request_key(event)))
        request = queue.popleft() if queue else None
        body: dict[str, Any] = {
            "eval_id": eval_id,
            "sample": sample,
            "request": request,
            "event": event.get("uuid"),
            "cache": event.get("cache"),
        }
        blobs: dict[str, bytes] = {}
        if event.get("call") is not None:
            blobs["call"] = _blob(event["call"])
        if event.get("error") is None:
            blobs["output"] = _blob(_strip_nulls(event.get("output")))
            kind = "inspect.responded"
        else:
            body["error"] = str(event["error"])[:4000]
            kind = "inspect.failed"
        return self.log.append(kind, safe_json(body), key=self.runner, blobs=blobs).seq

    def scored(self, eval_id: str, sample: str, result: dict[str, Any]) -> int:
        """Append ``inspect.scored`` for a finished sample; close requests left without outcome.

        A request whose model event Inspect never completed (a cancelled call) gets an
        ``inspect.failed`` saying so, so that every request has exactly one outcome.
        """
        state = self._eval(eval_id)
        for (owner, _), queue in list(state.pending.items()):
            if owner != sample:
                continue
            while queue:
                seq = queue.popleft()
                self.log.append(
                    "inspect.failed",
                    {
                        "eval_id": eval_id,
                        "sample": sample,
                        "request": seq,
                        "event": None,
                        "cache": None,
                        "error": "Inspect reported no outcome for this call "
                        "before the sample ended (cancelled or interrupted)",
                    },
                    key=self.runner,
                )
        state.pending = {k: v for k, v in state.pending.items() if v}
        state.seen.pop(sample, None)
        body = {**result, "eval_id": eval_id, "sample": sample}
        return self.log.append("inspect.scored", safe_json(body), key=self.owner).seq

    def finished(self, eval_id: str, body: dict[str, Any], results: Any) -> Path:
        """Append ``inspect.finished`` (status, metrics) and sign the final checkpoint."""
        state = self._eval(eval_id)
        self.log.append(
            "inspect.finished",
            safe_json({**body, "eval_id": eval_id, "calls": state.calls}),
            key=self.owner,
            blobs={"results": _blob(results)},
        )
        del self.evals[eval_id]
        return self._checkpoint(eval_id, "final")
