"""An Inspect AI eval recorded in a ledger, checked from ``docs/inspect.md`` alone.

Two checks, both written from the page (nothing here imports ``ledger``, ``runner`` or
``analysis``, nor Inspect itself):

- ``inspect-eval`` (:func:`inspect_checks`, run by :func:`verify.verify_ledger_file` whenever a
  ledger holds ``inspect.*`` events): each eval was locked before its first request, with its
  registration checkpoint at that size; every ``inspect.requested`` has exactly one later
  outcome (``inspect.responded`` or ``inspect.failed``) naming it, of the same eval and sample;
  every outcome names a request; each request's ``request_key`` is the hash of its request blob;
  a finished eval counts its requests right, has no event after ``inspect.finished`` and a
  checkpoint covering it.
- ``inspect-log`` (:func:`cross_check_log`, ``ledger verify LEDGER --inspect-log FILE``): every
  model call in Inspect's own log (``.eval`` or ``.json``) has the ledger outcome recorded for
  its event id, with the same output (or error), and the ledger has no outcome the log lacks;
  every sample the log ran is one the ledger locked, hashing as locked; each sample's score
  values and the eval's metrics equal the ledger's.

An ``.eval`` log is a zip whose members are Zstandard-compressed (method 93), which Python's
``zipfile`` reads only from 3.14 on; before that the members are read here and decompressed with
the ``zstandard`` package (installed with ``prompt-ledger[inspect]``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import struct
import zipfile
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verify._canonical import canonical_json
from verify._report import Check, Status

__all__ = ["INSPECT_KINDS", "cross_check_log", "inspect_checks"]

INSPECT_KINDS = frozenset(
    {
        "inspect.locked",
        "inspect.requested",
        "inspect.responded",
        "inspect.failed",
        "inspect.scored",
        "inspect.finished",
    }
)
_OUTCOMES = ("inspect.responded", "inspect.failed")
_ZSTD = 93
_MAX_MEMBER = 1 << 30


# ---------------------------------------------------------------------------- normal forms


def _safe(value: Any) -> Any:
    """The writer's JSON forms (docs/inspect.md §3): big integers and non-finite floats as text."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value if abs(value) <= 2**53 - 1 else str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, dict):
        return {str(k): _safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_safe(v) for v in value]
    return str(value)


def _no_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _no_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_nulls(v) for v in value]
    return value


def _sha(value: Any) -> str:
    return hashlib.sha256(canonical_json(_safe(_no_nulls(value)))).hexdigest()


def _sample_hash(sample: dict[str, Any]) -> str:
    value = sample.get("input")
    if isinstance(value, list):
        value = [
            {k: v for k, v in m.items() if k != "id"} if isinstance(m, dict) else m for m in value
        ]
    return _sha(
        {
            "id": sample.get("id"),
            "input": value,
            "target": sample.get("target"),
            "choices": sample.get("choices"),
        }
    )


def _request_key(request: dict[str, Any]) -> str:
    return _sha({k: request.get(k) for k in ("model", "input", "tools", "tool_choice", "config")})


# ---------------------------------------------------------------------------- the ledger


@dataclass
class _Event:
    seq: int
    kind: str
    body: dict[str, Any]
    blobs: dict[str, str]


@dataclass
class _Ledger:
    path: str
    events: list[_Event]
    checkpoint_sizes: list[int]
    conn: sqlite3.Connection

    def blob(self, digest: str) -> bytes | None:
        row = self.conn.execute("SELECT data FROM blobs WHERE sha256 = ?", (digest,)).fetchone()
        return bytes(row[0]) if row is not None else None

    def blob_json(self, event: _Event, name: str) -> Any:
        digest = event.blobs.get(name)
        data = self.blob(digest) if digest else None
        if data is None or hashlib.sha256(data).hexdigest() != digest:
            return None
        return json.loads(data)


def _read_ledger(path: str) -> _Ledger | None:
    """The ledger's ``inspect.*`` events, or None when it holds none (or is not readable)."""
    try:
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
        rows = conn.execute(
            "SELECT seq, envelope FROM events WHERE kind LIKE 'inspect.%' ORDER BY seq"
        ).fetchall()
        sizes = [int(r[0]) for r in conn.execute("SELECT size FROM checkpoints")]
    except sqlite3.Error:
        return None
    if not rows:
        conn.close()
        return None
    events = []
    for seq, envelope in rows:
        try:
            data = json.loads(bytes(envelope))
        except ValueError:
            continue  # the envelopes check reports it
        if isinstance(data, dict) and isinstance(data.get("body"), dict):
            kind = str(data.get("kind"))
            if kind in INSPECT_KINDS:
                events.append(_Event(int(seq), kind, data["body"], data.get("blobs") or {}))
    return _Ledger(path, events, sizes, conn)


@dataclass
class _EvalState:
    lock: _Event | None = None
    requests: dict[int, _Event] = field(default_factory=dict)
    outcomes: list[_Event] = field(default_factory=list)
    scored: list[_Event] = field(default_factory=list)
    finished: _Event | None = None
    others: list[_Event] = field(default_factory=list)


def _by_eval(log: _Ledger) -> dict[str, _EvalState]:
    evals: dict[str, _EvalState] = defaultdict(_EvalState)
    for event in log.events:
        state = evals[str(event.body.get("eval_id"))]
        if event.kind == "inspect.locked":
            if state.lock is None:
                state.lock = event
            else:
                state.others.append(event)
        elif event.kind == "inspect.requested":
            state.requests[event.seq] = event
        elif event.kind in _OUTCOMES:
            state.outcomes.append(event)
        elif event.kind == "inspect.scored":
            state.scored.append(event)
        elif event.kind == "inspect.finished" and state.finished is None:
            state.finished = event
        else:
            state.others.append(event)
    return evals


class _Fault(Exception):
    def __init__(self, reason: str, seq: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.seq = seq


def _check_eval(log: _Ledger, eval_id: str, state: _EvalState) -> None:
    lock = state.lock
    if lock is None:
        first = min(e.seq for e in [*state.requests.values(), *state.outcomes, *state.others])
        raise _Fault(f"eval {eval_id} has events but no inspect.locked", first)
    if state.others:
        extra = state.others[0]
        raise _Fault(f"eval {eval_id}: a second {extra.kind} (seq {extra.seq})", extra.seq)
    if lock.seq + 1 not in log.checkpoint_sizes:
        raise _Fault(
            f"eval {eval_id}: no registration checkpoint of size {lock.seq + 1} (signed right "
            "after inspect.locked)",
            lock.seq,
        )
    events = [*state.requests.values(), *state.outcomes, *state.scored]
    for event in events:
        if event.seq < lock.seq:
            raise _Fault(f"eval {eval_id}: {event.kind} before the eval was locked", event.seq)
    for request in state.requests.values():
        blob = log.blob_json(request, "request")
        if not isinstance(blob, dict):
            raise _Fault("inspect.requested has no readable request blob", request.seq)
        if _request_key(blob) != request.body.get("request_key"):
            raise _Fault(
                "inspect.requested: request_key is not the hash of its request blob",
                request.seq,
            )
    answered: dict[int, int] = {}
    for outcome in state.outcomes:
        ref = outcome.body.get("request")
        asked = state.requests.get(ref) if isinstance(ref, int) else None
        if asked is None or not isinstance(ref, int):
            raise _Fault(
                f"{outcome.kind} names no inspect.requested of eval {eval_id} (request "
                f"{ref!r}): a response without a recorded request",
                outcome.seq,
            )
        if ref in answered:
            raise _Fault(
                f"inspect.requested seq {ref} has two outcomes (seqs {answered[ref]} and "
                f"{outcome.seq})",
                outcome.seq,
            )
        if outcome.seq < asked.seq or outcome.body.get("sample") != asked.body.get("sample"):
            raise _Fault(
                f"{outcome.kind} is not a later outcome of the same sample as request {ref}",
                outcome.seq,
            )
        if outcome.kind == "inspect.responded" and log.blob_json(outcome, "output") is None:
            raise _Fault("inspect.responded has no readable output blob", outcome.seq)
        answered[ref] = outcome.seq
    missing = sorted(set(state.requests) - set(answered))
    finished = state.finished
    if finished is None:
        return
    if missing:
        raise _Fault(f"inspect.requested seq {missing[0]} has no outcome", missing[0])
    if finished.body.get("calls") != len(state.requests):
        raise _Fault(
            f"inspect.finished counts {finished.body.get('calls')!r} calls; the ledger holds "
            f"{len(state.requests)} requests of eval {eval_id}",
            finished.seq,
        )
    late = [e.seq for e in events if e.seq > finished.seq]
    if late:
        raise _Fault(f"eval {eval_id}: an event after inspect.finished", late[0])
    if not any(size > finished.seq for size in log.checkpoint_sizes):
        raise _Fault(f"eval {eval_id}: no checkpoint covers inspect.finished", finished.seq)


def inspect_checks(path: str | os.PathLike[str]) -> list[Check]:
    """The ``inspect-eval`` check of a SQLite ledger; [] when it holds no ``inspect.*`` event."""
    log = _read_ledger(os.fspath(path))
    if log is None:
        return []
    try:
        evals = _by_eval(log)
        unfinished = []
        for eval_id, state in evals.items():
            try:
                _check_eval(log, eval_id, state)
            except _Fault as fault:
                return [Check("inspect-eval", Status.FAIL, fault.reason, fault.seq)]
            if state.finished is None:
                unfinished.append(eval_id)
        calls = sum(len(s.requests) for s in evals.values())
        if unfinished:
            return [
                Check(
                    "inspect-eval",
                    Status.WARN,
                    f"eval(s) {', '.join(unfinished)} have no inspect.finished (still running, "
                    "or stopped); their requests may still lack outcomes",
                )
            ]
        return [
            Check(
                "inspect-eval",
                Status.PASS,
                f"{len(evals)} eval(s) locked before their first request with a registration "
                f"checkpoint; {calls} request(s), each with exactly one outcome; finished and "
                "checkpointed",
            )
        ]
    finally:
        log.conn.close()


# ---------------------------------------------------------------------------- Inspect's log


def _member(path: str, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    if info.file_size > _MAX_MEMBER:
        raise _Fault(f"{path}: member {info.filename} is larger than 1 GiB")
    if info.compress_type != _ZSTD:
        return zf.read(info)
    try:
        return zf.read(info)  # Python 3.14+ reads Zstandard members itself
    except NotImplementedError:
        pass
    try:
        import zstandard
    except ImportError:
        raise _Fault(
            f"{path}: its members are Zstandard-compressed and this Python cannot read them: "
            "install zstandard (pip install -c constraints.txt -e '.[inspect]')"
        ) from None
    with open(path, "rb") as handle:
        handle.seek(info.header_offset)
        header = handle.read(30)
        if len(header) != 30 or header[:4] != b"PK\x03\x04":
            raise _Fault(f"{path}: member {info.filename} has no local header")
        name_len, extra_len = struct.unpack("<HH", header[26:30])
        handle.seek(info.header_offset + 30 + name_len + extra_len)
        raw = handle.read(info.compress_size)
    data = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
    if len(data) != info.file_size or zlib.crc32(data) != info.CRC:
        raise _Fault(f"{path}: member {info.filename} does not decompress to its CRC and size")
    return bytes(data)


def _read_eval_log(path: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, samples) of an Inspect log: a ``.eval`` zip or a ``.json`` log."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            infos = {i.filename: i for i in zf.infolist()}
            if "header.json" not in infos:
                raise _Fault(f"{path}: no header.json (the eval did not finish writing its log)")
            header = json.loads(_member(path, zf, infos["header.json"]))
            samples = [
                json.loads(_member(path, zf, info))
                for name, info in sorted(infos.items())
                if name.startswith("samples/") and name.endswith(".json")
            ]
        return header, samples
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    return data, list(data.get("samples") or [])


def _cross_check(log: _Ledger, path: str) -> str:
    header, samples = _read_eval_log(path)
    eval_id = str((header.get("eval") or {}).get("eval_id"))
    state = _by_eval(log).get(eval_id)
    if state is None or state.lock is None:
        raise _Fault(f"{path}: eval {eval_id} is not in the ledger {log.path}")
    outcomes = {str(o.body.get("event")): o for o in state.outcomes if o.body.get("event")}
    locked = (state.lock.body.get("dataset") or {}).get("sample_sha256")
    scored = {str(s.body.get("sample")): s for s in state.scored}
    seen: set[str] = set()
    calls = 0
    for sample in samples:
        where = f"{path}: sample {sample.get('id')!r} epoch {sample.get('epoch')!r}"
        if isinstance(locked, dict):
            expected = locked.get(str(sample.get("id")))
            if expected is None:
                raise _Fault(f"{where} is not a sample the eval locked", state.lock.seq)
            if _sample_hash(sample) != expected:
                raise _Fault(f"{where} does not hash to its locked sample_sha256", state.lock.seq)
        for event in sample.get("events") or []:
            if not isinstance(event, dict) or event.get("event") != "model" or event.get("pending"):
                continue
            calls += 1
            uuid = str(event.get("uuid"))
            outcome = outcomes.get(uuid)
            if outcome is None:
                raise _Fault(f"{where}: model event {uuid} has no outcome in the ledger")
            seen.add(uuid)
            if event.get("error") is not None:
                if (
                    outcome.kind != "inspect.failed"
                    or outcome.body.get("error") != str(event["error"])[:4000]
                ):
                    raise _Fault(
                        f"{where}: model event {uuid} failed ({str(event['error'])[:80]!r}); "
                        f"the ledger's {outcome.kind} says otherwise",
                        outcome.seq,
                    )
                continue
            recorded = log.blob_json(outcome, "output") if outcome.kind == _OUTCOMES[0] else None
            if recorded is None or _safe(_no_nulls(event.get("output"))) != recorded:
                raise _Fault(
                    f"{where}: the output of model event {uuid} differs from the response the "
                    f"ledger recorded ({outcome.kind} seq {outcome.seq})",
                    outcome.seq,
                )
        ledger_scores = scored.get(str(sample.get("uuid")))
        log_scores = {
            name: _safe((score or {}).get("value"))
            for name, score in (sample.get("scores") or {}).items()
        }
        if ledger_scores is None:
            raise _Fault(
                f"{where}: no inspect.scored in the ledger for sample {sample.get('uuid')}"
            )
        mine = {
            k: (v or {}).get("value") for k, v in (ledger_scores.body.get("scores") or {}).items()
        }
        if mine != log_scores:
            raise _Fault(
                f"{where}: scores {log_scores} differ from the ledger's {mine}", ledger_scores.seq
            )
    extra = sorted(set(outcomes) - seen)
    if extra and samples:
        first = outcomes[extra[0]]
        raise _Fault(
            f"{path}: the ledger records {len(extra)} model call(s) the log does not hold "
            f"(first: event {extra[0]})",
            first.seq,
        )
    finished = state.finished
    results = header.get("results") or {}
    if finished is not None and results:
        mine_metrics = {
            (s.get("name"), s.get("scorer")): s.get("metrics")
            for s in finished.body.get("scores") or []
        }
        theirs = {
            (s.get("name"), s.get("scorer")): {
                k: _safe((m or {}).get("value")) for k, m in (s.get("metrics") or {}).items()
            }
            for s in results.get("scores") or []
        }
        if mine_metrics != theirs:
            raise _Fault(
                f"{path}: metrics {theirs} differ from the ledger's inspect.finished", finished.seq
            )
    return (
        f"{path}: eval {eval_id}: {len(samples)} sample(s) as locked; all {calls} model call(s) "
        "equal the ledger's recorded outcomes, and the ledger records no other; scores and "
        "metrics equal"
    )


def cross_check_log(ledger: str | os.PathLike[str], log_path: str | os.PathLike[str]) -> Check:
    """The ``inspect-log`` check: Inspect's own log of an eval against the ledger's record."""
    path = os.fspath(log_path)
    log = _read_ledger(os.fspath(ledger))
    if log is None:
        return Check(
            "inspect-log", Status.FAIL, f"{os.fspath(ledger)} holds no recorded Inspect eval"
        )
    try:
        return Check("inspect-log", Status.PASS, _cross_check(log, path))
    except _Fault as fault:
        return Check("inspect-log", Status.FAIL, fault.reason, fault.seq, path)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        return Check("inspect-log", Status.FAIL, f"{path}: unreadable ({exc})", where=path)
    finally:
        log.conn.close()
