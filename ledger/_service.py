"""The append API of ``ledger serve``: writers submit envelopes they signed (docs/service.md §7).

The service holds no state of its own: each request opens (or reuses) a connection to the
study's ledger in the store and everything is decided inside the store's write transaction,
so any number of service processes may share one PostgreSQL. Routes, under
``/<study>/api/v1/``:

* ``GET head``: origin, size, last leaf hash, Merkle frontier, last event's and checkpoint's
  times (hashes only: public);
* ``POST append``: ``{"entries": [{"envelope", "signature"}], "blobs": {sha256: base64},
  "checkpoints": [{"note", "created"}]}``, all in one transaction; 200 with the seqs and
  ``replayed`` (an identical batch already stored), 409 with the new head when the log moved
  (with ``Ledger-Turn: ask``, a 409 that comes with a turn: the write lock held for the
  writer's re-signed batch, sent back with ``Ledger-Turn: <token>``; docs/service.md §7);
* ``POST create``: a new study's genesis (only with ``--allow-create``);
* ``POST cosign``: witness cosignature lines for a stored checkpoint;
* ``GET keys``, ``GET checkpoints``, ``GET root?size=``, ``GET proof/inclusion?index=&size=``,
  ``GET proof/consistency?old=&new=``: public (keys, notes and hashes);
* ``GET events?start=&limit=`` and ``GET blob/<sha256>``: signed reads only (header
  ``Ledger-Signature: <actor> <unix time> <base64 Ed25519 signature>`` by a key the study
  registered and has not revoked), because envelopes name trials by arm while the study is
  blind (§8).

Bad input is answered 4xx with ``{"error": reason}`` and nothing is appended: 400 malformed,
403 refused key or signature, 404 unknown study, 408 body too slow, 409 head moved, 413 body
too large, 415 not JSON, 422 a trial rule (either engine), 503 the store unreachable.
The body's ``type`` names the library error (``FormatError``, ``ProofError``, ...).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import queue
import re
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ledger._envelope import ZERO_HASH
from ledger._errors import (
    AuthorizationError,
    ConflictError,
    FormatError,
    LedgerError,
    NoteError,
    ProofError,
    RefusedError,
    StoreError,
)
from ledger._http import READ_HEADER, TURN_ASK, TURN_HEADER, TURN_WAIT, read_message
from ledger._keys import VerifierKey
from ledger._postgres import PostgresLocation, is_url, schema_for
from ledger._store import Ledger, PreparedBatch

__all__ = ["MAX_REQUEST_BYTES", "AppendRoute", "AppendService", "StoreRoot", "api_routes"]

MAX_REQUEST_BYTES = 32 * 1024 * 1024
"""Default bound on one request's body (envelopes, blobs and checkpoints together)."""
BODY_SECONDS = 30.0
"""A request body that takes longer than this to arrive is answered 408."""
MAX_ENTRIES = 10_000
READ_SKEW_SECONDS = 300
CONTENDED_SECONDS = 5.0
"""After a 409 for a study, its batches are checked for their position first for this long."""
TURN_SECONDS = 2.0
WORKER_THREADS = 40
"""The service's worker threads (anyio's default pool size, which Starlette's routes use)."""
"""How long a turn holds the study's write lock for the writer it was given to (§7)."""
STUDY_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")


class BadRequest(LedgerError):
    """A request the API refuses before it reaches the store: status and reason."""

    def __init__(self, status: int, message: str) -> None:
        """Carry the HTTP status the reason is answered with."""
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class StoreRoot:
    """Where the service's studies live: a PostgreSQL database (a schema per study) or a folder.

    A study named ``my-study`` is the schema ``my_study`` (:func:`ledger.schema_for`) of the
    database, or the SQLite file ``<folder>/my-study.db``.
    """

    text: str

    @classmethod
    def parse(cls, text: str) -> StoreRoot:
        """Check ``text``: a PostgreSQL URL (its ``?schema=`` is ignored) or an existing folder."""
        if is_url(text):
            PostgresLocation.parse(text, default_schema="public")
        elif not Path(text).is_dir():
            raise StoreError(
                f"--store {text!r} is neither a PostgreSQL URL nor a folder (a folder holds one "
                "SQLite ledger per study, <study>.db)"
            )
        return cls(text)

    def location(self, study: str) -> Path | PostgresLocation:
        """Where ``study``'s ledger lives in this store."""
        if is_url(self.text):
            base = PostgresLocation.parse(self.text, default_schema="public")
            return PostgresLocation(base.conninfo, schema_for(study))
        return Path(self.text) / f"{study}.db"


class AppendService:
    """The studies of one store, each with a small pool of open ledgers (one per thread)."""

    def __init__(
        self,
        store: StoreRoot,
        *,
        allow_create: bool = False,
        connections: int = 4,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        turn_seconds: float = TURN_SECONDS,
    ) -> None:
        """Serve the studies of ``store``; ``connections`` bounds the open ledgers per study.

        ``turn_seconds`` is how long a writer that lost a race may take to re-sign while its
        turn holds the study's write lock (0: no turns, a loser gets a plain 409).
        """
        self.store = store
        self.allow_create = allow_create
        self.connections = connections
        self.max_request_bytes = max_request_bytes
        self._pools: dict[str, queue.LifoQueue[Ledger]] = {}
        self._slots: dict[str, threading.Semaphore] = {}
        self._lock = threading.Lock()
        self._conflicts: dict[str, float] = {}
        """When this process last answered 409 for each study (``time.monotonic``)."""
        self.turn_seconds = turn_seconds
        self._turns: dict[str, _Turn] = {}
        """The turns this process holds, by token."""
        self._threads: ThreadPoolExecutor | None = None

    async def in_thread(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run ``func(*args)`` in one of the service's worker threads and await its answer.

        The store's work blocks (a database round trip, the write lock), so it leaves the event
        loop; a plain executor (as many threads as anyio's default pool: 40) costs less per
        request than anyio's ``to_thread`` (its capacity limiter and cancel scope).
        """
        if self._threads is None:
            with self._lock:
                if self._threads is None:
                    self._threads = ThreadPoolExecutor(WORKER_THREADS, "ledger-serve")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, lambda: func(*args))

    def contended(self, study: str) -> bool:
        """True when this process answered a 409 for ``study`` in the last few seconds."""
        when = self._conflicts.get(study)
        return when is not None and time.monotonic() - when < CONTENDED_SECONDS

    def conflict(self, study: str) -> None:
        """Note a 409 answered for ``study``: its next batches are checked before signatures."""
        self._conflicts[study] = time.monotonic()

    def offer_turn(
        self, study: str, attempt: tuple[PreparedBatch, list[Any]] | None = None
    ) -> Future[Response]:
        """Queue a writer that lost a race for its turn; the 409 that gives it comes later.

        A thread of its own waits for the study's write lock (in arrival order on PostgreSQL,
        whose row-lock waiters queue; on SQLite whoever the busy handler lets in first), then
        answers the 409 with the head and a token and keeps the lock for ``turn_seconds``
        while the writer re-signs: its batch, sent back with the token
        (:meth:`hand_over`), is appended in that transaction. ``attempt`` (a batch prepared
        outside the lock, with its checkpoints) is tried first under the lock: a batch that
        still continues the head is answered 200 without a turn. Returns the future answer.
        """
        first: Future[Response] = Future()
        token = secrets.token_urlsafe(18)
        thread = threading.Thread(
            target=_turn_session, args=(self, study, token, first, attempt), daemon=True
        )
        thread.start()
        return first

    def hand_over(self, study: str, token: str, data: Any) -> Future[Response] | None:
        """Give a re-signed batch to the turn ``token`` holds; None when there is no such turn.

        The future is answered once the batch is committed (or refused, nothing appended).
        """
        reply: Future[Response] = Future()
        with self._lock:
            turn = self._turns.get(token)
            if turn is None or turn.study != study:
                return None
            del self._turns[token]
            turn.inbox.put_nowait((data, reply))
        return reply

    def _wait_turn(self, turn: _Turn) -> tuple[Any, Future[Response]] | None:
        """The batch handed to ``turn``, or None when none came within ``turn_seconds``."""
        try:
            return turn.inbox.get(timeout=self.turn_seconds)
        except queue.Empty:
            with self._lock:
                if self._turns.pop(turn.token, None) is not None:
                    return None  # expired: a late batch takes the ordinary way
            return turn.inbox.get_nowait()  # handed over while the wait ended

    def close(self) -> None:
        """Close every pooled ledger (and stop the worker threads)."""
        if self._threads is not None:
            self._threads.shutdown(wait=False)
        with self._lock:
            for pool in self._pools.values():
                while True:
                    try:
                        pool.get_nowait().close()
                    except queue.Empty:
                        break

    @contextmanager
    def ledger(self, study: str) -> Iterator[Ledger]:
        """A ledger of ``study`` for this request (404 when the store holds none)."""
        if not STUDY_RE.match(study):
            raise BadRequest(404, f"no study {study!r} (names: lower-case letters, digits, -, _)")
        with self._lock:
            pool = self._pools.setdefault(study, queue.LifoQueue())
            slots = self._slots.setdefault(study, threading.Semaphore(self.connections))
        with slots:
            try:
                log = pool.get_nowait()
            except queue.Empty:
                log = self._open(study)
            broken = False
            try:
                yield log
            except StoreError:
                broken = True
                raise
            finally:
                if broken:
                    with suppress(Exception):
                        log.close()
                else:
                    pool.put(log)

    def _open(self, study: str) -> Ledger:
        where = self.store.location(study)
        if isinstance(where, Path) and not where.is_file():
            raise BadRequest(404, f"no study {study!r} in this service's store")
        try:
            log = Ledger.open(where)
        except StoreError as exc:
            if "no ledger there" in str(exc):
                raise BadRequest(404, f"no study {study!r} in this service's store") from None
            raise
        # The service's clients are many writers, whatever the engine: the trial rules hold
        # for every append it receives (on PostgreSQL they always do; docs/service.md §7).
        log.trial_guard = True
        return log

    def create(self, study: str, origin: str, envelope: bytes, signature: bytes) -> int:
        """Create ``study`` with a genesis its owner signed; the store must not hold it yet."""
        from ledger._store import _drop

        if not self.allow_create:
            raise BadRequest(
                403, "this service does not create studies (start it with --allow-create)"
            )
        if not STUDY_RE.match(study):
            raise BadRequest(400, f"{study!r} is not a study name (lower-case letters, digits)")
        where = self.store.location(study)
        if Ledger.exists(where):
            raise BadRequest(409, f"study {study!r} exists already")
        log = Ledger._create_empty(where, origin)
        try:
            log.append_signed([(envelope, signature)])
        except BaseException:
            log.close()
            _drop(where)
            raise
        log.close()
        return 1


@dataclass
class _Turn:
    """A turn this process holds: the study's write lock, kept for the writer with ``token``."""

    study: str
    token: str
    inbox: queue.Queue[tuple[Any, Future[Response]]]


class _TurnRefused(Exception):
    """The batch handed to a turn was refused: roll the turn's transaction back, then answer."""

    def __init__(self, error: LedgerError) -> None:
        super().__init__(str(error))
        self.error = error


def _turn_session(
    service: AppendService,
    study: str,
    token: str,
    first: Future[Response],
    attempt: tuple[PreparedBatch, list[Any]] | None,
) -> None:
    """One turn (:meth:`AppendService.offer_turn`): lock, try, 409 with the head, append, commit.

    ``attempt`` is the writer's batch when it may still continue the head: it is tried first
    under the lock (answered 200 when it does), so a writer waits in the queue once.
    """
    waiting = first  # the request a failure is answered to
    try:
        with service.ledger(study) as log, log.transaction():  # waits for the write lock
            result = None
            if attempt is not None:
                try:
                    result = _commit(log, *attempt)
                except ConflictError:
                    service.conflict(study)
                except StoreError:
                    raise  # the store itself failed: this connection is dropped, 503
                except LedgerError as exc:
                    raise _TurnRefused(exc) from exc
            if result is None:
                taken = _take_turn(service, log, study, token, first)
                if taken is None:
                    return  # the writer did not come back: the lock goes to the next in line
                waiting, data = taken
                try:
                    result = _append(log, data, contended=False)
                except StoreError as exc:
                    if not isinstance(exc, ConflictError):
                        raise
                    raise _TurnRefused(exc) from exc
                except LedgerError as exc:
                    raise _TurnRefused(exc) from exc
        waiting.set_result(JSONResponse(result))  # only once committed
    except _TurnRefused as refused:
        waiting.set_result(_answer_error(refused.error, None))
    except LedgerError as exc:  # the store: no lock, no commit
        _settle(first, waiting, _answer_error(exc, None))
    except BaseException as exc:  # pragma: no cover - a bug: answer it rather than hang
        _settle(first, waiting, JSONResponse({"error": f"internal error: {exc}"}, 500))
        raise


def _take_turn(
    service: AppendService, log: Ledger, study: str, token: str, first: Future[Response]
) -> tuple[Future[Response], Any] | None:
    """Under the lock: answer ``first`` 409 with the head and the turn, wait for the batch."""
    service.conflict(study)  # a turn was asked for: the study's next batches queue (§7)
    head = head_json(log)
    turn = _Turn(study, token, queue.Queue(maxsize=1))
    with service._lock:
        service._turns[token] = turn
    first.set_result(
        JSONResponse(
            {
                "error": (
                    f"another writer appended first; your turn: re-sign against this head "
                    f"(size {head['size']}) and send the batch with {TURN_HEADER}: <turn> "
                    f"within {service.turn_seconds:g} s"
                ),
                "type": "ConflictError",
                "head": head,
                "turn": token,
                "turn_seconds": service.turn_seconds,
            },
            409,
        )
    )
    item = service._wait_turn(turn)
    if item is None:
        return None
    data, reply = item
    return reply, data


def _settle(first: Future[Response], reply: Future[Response] | None, answer: Response) -> None:
    """Answer whichever request of a turn is still waiting."""
    for future in (first, reply):
        if future is not None and not future.done():
            future.set_result(answer)


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise BadRequest(400, f"{what} must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(400, f"{what} is not valid base64") from None


def _int(params: Any, name: str, default: int | None = None) -> int | None:
    value = params.get(name)
    if value is None:
        return default
    if not re.fullmatch(r"\d{1,18}", value):
        raise BadRequest(400, f"query parameter {name}={value!r} is not a non-negative integer")
    return int(value)


def head_json(log: Ledger) -> dict[str, Any]:
    """The head as the API answers it (``GET head``, and a 409's ``head``).

    Three queries whatever the log's size (a turn answers it while it holds the study's write
    lock): the last event, the frontier's subtree hashes together, and the last event's time
    (the ``time`` column, written with the envelope from its own ``time`` member) with the
    latest checkpoint's ``created``.
    """
    with log._errors():
        head = log._load_head_at_once()
        log._head_cache = head  # the append a turn takes next reads the frontier from it
        row = log._conn.execute(
            "SELECT (SELECT time FROM events WHERE seq = ?), "
            "(SELECT MAX(created) FROM checkpoints)",
            (head.size - 1,),
        ).fetchone()
    return {
        "api": 1,
        "origin": log.origin,
        "size": head.size,
        "last": head.last.hex(),
        "frontier": [[lvl, h.hex()] for lvl, h in head.frontier],
        "time": row[0] if head.size else None,
        "checkpoint_time": row[1],
    }


def _parse_append(data: Any) -> tuple[list[tuple[bytes, bytes]], dict[str, bytes], list[Any]]:
    if not isinstance(data, dict) or set(data) - {"entries", "blobs", "checkpoints"}:
        raise BadRequest(400, "body must be an object with entries, blobs and checkpoints")
    raw_entries = data.get("entries", [])
    raw_blobs = data.get("blobs", {})
    raw_cps = data.get("checkpoints", [])
    if not isinstance(raw_entries, list) or len(raw_entries) > MAX_ENTRIES:
        raise BadRequest(400, f"entries must be a list of at most {MAX_ENTRIES}")
    if not isinstance(raw_blobs, dict) or not isinstance(raw_cps, list) or len(raw_cps) > 100:
        raise BadRequest(400, "blobs must be an object, checkpoints a list of at most 100")
    entries = []
    for i, entry in enumerate(raw_entries):
        if not isinstance(entry, dict) or set(entry) != {"envelope", "signature"}:
            raise BadRequest(400, f"entry {i} must be {{envelope, signature}}")
        entries.append(
            (
                _b64(entry["envelope"], f"entry {i} envelope"),
                _b64(entry["signature"], f"entry {i} signature"),
            )
        )
        if len(entries[-1][1]) != 64:
            raise BadRequest(400, f"entry {i} signature is not 64 bytes (Ed25519)")
    blobs = {}
    for digest, value in raw_blobs.items():
        if not HEX64.match(digest):
            raise BadRequest(400, f"blob name {digest[:80]!r} is not a lower-case hex SHA-256")
        blobs[digest] = _b64(value, f"blob {digest}")
    for i, cp in enumerate(raw_cps):
        ok = isinstance(cp, dict) and set(cp) == {"note", "created"}
        if not ok or not isinstance(cp["note"], str) or not isinstance(cp["created"], str | None):
            raise BadRequest(400, f"checkpoint {i} must be {{note: string, created: string}}")
    if not entries and not raw_cps:
        raise BadRequest(400, "nothing to append: no entries and no checkpoints")
    return entries, blobs, raw_cps


def _check_position(log: Ledger, entries: list[tuple[bytes, bytes]]) -> None:
    """Answer a batch that cannot continue the log 409 before its signatures are checked.

    Used while a study is contended (this process answered it a 409 lately): a writer that
    lost a race sends a batch signed against an old head; checking its signatures first
    (about three times the cost of making them) only to find the head moved would spend
    most of a contended service's time on batches that cannot be appended. A batch that
    continues the head this connection last wrote costs no query; otherwise one for the last
    event, and one more for a batch that starts inside the log (a retried request is
    answered with its seqs by :meth:`Ledger.append_signed`). The transaction checks the
    position again; a malformed first envelope is left to it.
    """
    from ledger._envelope import parse_envelope

    if not entries:
        return
    try:
        env = parse_envelope(entries[0][0])
    except FormatError:
        return  # answered 400 by append_signed, with the entry's number
    known = log._head_cache
    if known is not None and known.size and (env.seq, env.prev) == (known.size, known.last.hex()):
        return  # continues what this connection wrote last: the transaction will tell
    with log._errors():
        row = log._conn.execute(
            "SELECT seq, leaf_hash FROM events ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        size, last = (0, b"") if row is None else (int(row[0]) + 1, bytes(row[1]))
        if env.seq < size:
            stored = log._conn.execute(
                "SELECT envelope FROM events WHERE seq = ?", (env.seq,)
            ).fetchone()
            if stored is not None and bytes(stored[0]) == env.data:
                return  # a retried request: append_signed answers it with its seqs
        elif env.seq == size and env.prev == (last.hex() if size else ZERO_HASH):
            return
    raise ConflictError(
        f"{log.path}: seq {env.seq} does not continue the log (size {size}, last leaf "
        f"{last.hex() or 'none'}): another writer appended first; re-sign against the new head",
        size=size,
        last=last.hex(),
    )


def _commit(log: Ledger, batch: PreparedBatch, cps: list[Any]) -> dict[str, Any]:
    """Append a prepared batch and store its checkpoints (inside a turn's transaction)."""
    events, replayed = log.append_prepared(batch)
    ids = [log.store_checkpoint(cp["note"], cp["created"]) for cp in cps]
    return {
        "seqs": [e.seq for e in events],
        "replayed": replayed,
        "checkpoints": [{"id": i, "replayed": r} for i, r in ids],
    }


def _append(log: Ledger, data: Any, contended: bool) -> dict[str, Any]:
    entries, blobs, cps = _parse_append(data)
    if contended:
        _check_position(log, entries)
    if not cps or log._in_transaction:  # the store's own transaction, or a turn's
        events, replayed = log.append_signed(entries, blobs)
        ids: list[tuple[int, bool]] = []
    else:
        with log.transaction():
            events, replayed = log.append_signed(entries, blobs)
            ids = [log.store_checkpoint(cp["note"], cp["created"]) for cp in cps]
    return {
        "seqs": [e.seq for e in events],
        "replayed": replayed,
        "checkpoints": [{"id": i, "replayed": r} for i, r in ids],
    }


def _cosign(log: Ledger, data: Any) -> dict[str, Any]:
    ok = isinstance(data, dict) and set(data) == {"id", "lines"}
    if not ok or type(data["id"]) is not int or not isinstance(data["lines"], list):
        raise BadRequest(400, "body must be {id: integer, lines: [string]}")
    if len(data["lines"]) > 64 or not all(isinstance(x, str) for x in data["lines"]):
        raise BadRequest(400, "lines must be at most 64 strings")
    return {"note": log.add_cosignatures(data["id"], data["lines"])}


def _check_reader(log: Ledger, request: Request) -> None:
    """A signed read: the header's key must be registered here and unrevoked, its time recent."""
    header = request.headers.get(READ_HEADER)
    if not header:
        raise BadRequest(
            403,
            f"reading envelopes and blobs needs a {READ_HEADER} header signed by a key of "
            "this study (envelopes name trials by arm: docs/service.md §8)",
        )
    parts = header.split(" ")
    if len(parts) != 3 or not parts[1].isdigit():
        raise BadRequest(400, f"{READ_HEADER} must be '<actor> <unix time> <base64 signature>'")
    actor, when, sig = parts[0], int(parts[1]), _b64(parts[2], READ_HEADER)
    if abs(time.time() - when) > READ_SKEW_SECONDS:
        raise BadRequest(403, f"{READ_HEADER} time is more than {READ_SKEW_SECONDS} s off")
    registered = log.keys()
    record = next((k for k in registered if k.actor == actor), None)
    if record is None or record.revoked_seq is not None:
        raise BadRequest(403, f"key {actor} is not a registered, unrevoked key of this study")
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    if not VerifierKey.parse(record.vkey).verify(read_message(request.method, target, when), sig):
        raise BadRequest(403, f"{READ_HEADER}: the signature does not verify with {actor}'s key")


def _events(log: Ledger, request: Request) -> dict[str, Any]:
    _check_reader(log, request)
    start = _int(request.query_params, "start", 0) or 0
    limit = min(_int(request.query_params, "limit", 1000) or 1000, 5000)
    out = [
        {
            "envelope": base64.b64encode(e.envelope).decode(),
            "signature": base64.b64encode(e.signature).decode(),
        }
        for e in log.events(start=start, end=start + limit)
    ]
    return {"events": out, "size": log.size}


def _blob(log: Ledger, request: Request, digest: str) -> bytes:
    _check_reader(log, request)
    if not HEX64.match(digest):
        raise BadRequest(400, f"{digest[:80]!r} is not a lower-case hex SHA-256")
    try:
        return log.stored_blob(digest)  # the bytes the address hashes (a sealed blob whole)
    except StoreError:
        raise
    except LedgerError:
        raise BadRequest(404, f"no blob {digest}") from None


def _proof(log: Ledger, request: Request, which: str) -> dict[str, Any]:
    q = request.query_params
    if which == "inclusion":
        index = _int(q, "index")
        if index is None:
            raise BadRequest(400, "query parameter index is required")
        if index >= log.size:
            raise ProofError(f"index {index} is outside the log (size {log.size})")
        return log.inclusion_proof(index, _int(q, "size")).to_json()
    old = _int(q, "old")
    if old is None:
        raise BadRequest(400, "query parameter old is required")
    return log.consistency_proof(old, _int(q, "new")).to_json()


_STATUS: list[tuple[type[BaseException], int]] = [
    (BadRequest, 0),
    (ConflictError, 409),
    (RefusedError, 422),
    (AuthorizationError, 403),
    (ProofError, 400),
    (FormatError, 400),
    (NoteError, 400),
    (StoreError, 503),
]


def _answer_error(exc: LedgerError, log_head: Callable[[], dict[str, Any]] | None) -> Response:
    status = 500
    for kind, code in _STATUS:
        if isinstance(exc, kind):
            status = exc.status if isinstance(exc, BadRequest) else code
            break
    body: dict[str, Any] = {"error": str(exc), "type": type(exc).__name__}
    if isinstance(exc, RefusedError):
        body["rule"] = exc.rule
        if isinstance(exc.seq, int):
            body["seq"] = exc.seq  # the refused envelope's: the client knows which event it was
    if isinstance(exc, ConflictError):
        body["head"] = {"size": exc.size, "last": exc.last}
        if log_head is not None:
            with suppress(LedgerError):
                body["head"] = log_head()
    if status == 500:
        body["error"] = f"internal error: {exc}"
    return JSONResponse(body, status)


async def _read_body(request: Request, limit: int) -> Any:
    """The JSON body: bounded in size (413) and time (408); 415 when it is not JSON."""
    return await _read_json(
        request.headers.get("content-type", ""),
        request.headers.get("content-length"),
        request.stream(),
        limit,
    )


async def _read_json(
    content_type: str, declared: str | None, chunks: AsyncIterator[bytes], limit: int
) -> Any:
    """A request's JSON body from its headers and its chunks (either route, same answers)."""
    kind = content_type.split(";")[0].strip()
    if kind != "application/json":
        raise BadRequest(415, "the body must be application/json")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise BadRequest(413, f"the body is over the {limit}-byte limit of this service")

    async def collect() -> bytes:
        parts, size = [], 0
        async for chunk in chunks:
            size += len(chunk)
            if size > limit:
                raise BadRequest(413, f"the body is over the {limit}-byte limit of this service")
            parts.append(chunk)
        return b"".join(parts)

    try:
        async with asyncio.timeout(BODY_SECONDS):
            raw = await collect()
    except TimeoutError:
        raise BadRequest(408, f"the body did not arrive within {BODY_SECONDS:g} s") from None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(400, f"the body is not JSON ({exc})") from None


class _Disconnected(Exception):
    """The client went away before its request's body had arrived: nothing to answer."""


async def _received(receive: Receive) -> AsyncIterator[bytes]:
    """The body chunks of a raw ASGI request (what Starlette's ``Request.stream`` yields)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def _append_call(
    service: AppendService,
    study: str,
    header: Callable[[str], str | None],
    chunks: AsyncIterator[bytes],
    request: Request | None,
) -> Response:
    """``POST append``: the body, a turn's hand-over, or the dispatch in a worker thread."""
    try:
        data = await _read_json(
            header("content-type") or "",
            header("content-length"),
            chunks,
            service.max_request_bytes,
        )
        turn = header(_TURN_KEY) or ""
        if turn == TURN_WAIT:
            return await _wait_turn(service, study, data)
        if turn and turn != TURN_ASK:
            pending = service.hand_over(study, turn, data)
            if pending is not None:
                return await asyncio.wrap_future(pending)
        answer: Response | Future[Response] = await service.in_thread(
            _dispatch, service, study, "append", "POST", request, data, bool(turn)
        )
        if isinstance(answer, Future):
            return await asyncio.wrap_future(answer)
        return answer
    except LedgerError as exc:
        return _answer_error(exc, None)


async def _wait_turn(service: AppendService, study: str, data: Any) -> Response:
    """``Ledger-Turn: wait``: a writer that found the study contended asks for its turn first.

    It sends no batch (the body is ``{}``): a batch signed before its turn would only lose
    the race again, so it waits in the queue for the write lock and signs on the head its
    turn's 409 carries. Without turns (``--turn-seconds 0``) the answer is that 409 at once,
    with the head and no turn.
    """
    if data != {}:
        raise BadRequest(
            400,
            f"an append with {TURN_HEADER}: {TURN_WAIT} asks for a turn before signing: its "
            "body is {} (send the batch signed on the head the turn gives, with its token)",
        )
    if service.turn_seconds > 0:  # the turn marks the study contended once its ledger opened
        return await asyncio.wrap_future(service.offer_turn(study))
    answer: Response = await service.in_thread(_head_conflict, service, study)
    return answer


def _head_conflict(service: AppendService, study: str) -> Response:
    """A 409 with the head and no turn: sign on it and append (a service without turns)."""
    with service.ledger(study) as log:
        head = head_json(log)
    return JSONResponse(
        {
            "error": "this service gives no turns (--turn-seconds 0): sign on this head",
            "type": "ConflictError",
            "head": head,
        },
        409,
    )


_TURN_KEY = TURN_HEADER.lower()
_APPEND_PATH = re.compile(r"^/([^/]+)/api/v1/append$")


class AppendRoute:
    """``POST /<study>/api/v1/append`` answered before Starlette's stack; all else to ``app``.

    The append is the service's hot path: one request per batch a writer sends. Starlette's
    middleware, router (the API's route and the tiles' catch-all), ``Request`` and a worker
    thread from anyio's pool cost about a third of a one-event append's CPU in the service
    (docs/service.md §10); this route reads the same headers and body with the same limits
    and answers, and hands the batch to the same dispatch on the service's own thread pool.
    Requests under a ``root_path`` and every other route take Starlette's way.
    """

    def __init__(self, app: ASGIApp, service: AppendService) -> None:
        """Answer ``service``'s appends, and pass everything else to ``app``."""
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry point."""
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            match = _APPEND_PATH.match(scope["path"])
            if match is not None:
                headers: dict[str, str] = {}
                for name, value in scope["headers"]:
                    headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
                try:
                    response = await _append_call(
                        self.service, match.group(1), headers.get, _received(receive), None
                    )
                except _Disconnected:
                    return
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def api_routes(service: AppendService) -> list[Route]:
    """The append API's routes (mounted before the tiles' catch-all route)."""

    async def handle(request: Request) -> Response:
        study = str(request.path_params["study"])
        op = str(request.path_params["op"])
        method = request.method
        if op == "append" and method == "POST":
            return await _append_call(
                service, study, request.headers.get, request.stream(), request
            )
        try:
            data = None
            if method == "POST":
                data = await _read_body(request, service.max_request_bytes)
            if op == "create" and method == "POST":
                return await run_in_threadpool(_create, service, study, data)
            answer: Response = await service.in_thread(
                _dispatch, service, study, op, method, request, data
            )
            return answer
        except LedgerError as exc:
            return _answer_error(exc, None)

    return [Route("/{study}/api/v1/{op:path}", handle, methods=["GET", "HEAD", "POST"])]


def _create(service: AppendService, study: str, data: Any) -> Response:
    if not service.allow_create:
        raise BadRequest(403, "this service does not create studies (start it with --allow-create)")
    ok = isinstance(data, dict) and set(data) == {"origin", "entry"}
    if not ok or not isinstance(data["origin"], str) or not isinstance(data["entry"], dict):
        raise BadRequest(400, "body must be {origin: string, entry: {envelope, signature}}")
    entry = data["entry"]
    if set(entry) != {"envelope", "signature"}:
        raise BadRequest(400, "entry must be {envelope, signature}")
    from ledger._store import check_origin

    check_origin(data["origin"])
    service.create(
        study,
        data["origin"],
        _b64(entry["envelope"], "envelope"),
        _b64(entry["signature"], "signature"),
    )
    return JSONResponse({"study": study, "size": 1}, 201)


def _dispatch(
    service: AppendService,
    study: str,
    op: str,
    method: str,
    request: Request | None,
    data: Any,
    wants_turn: bool = False,
) -> Response | Future[Response]:
    """Answer one request; a writer that lost a race and asked for turns gets a future 409."""
    turns = wants_turn and service.turn_seconds > 0 and op == "append" and method == "POST"
    with service.ledger(study) as log:  # a StoreError (a lost server) closes this connection
        try:
            if turns and service.contended(study):
                queued = _queue(service, study, log, data)
                if queued is not None:
                    return queued
            return _route(log, op, method, request, data, service.contended(study))
        except ConflictError as exc:
            service.conflict(study)
            if turns:
                return service.offer_turn(study)
            return _answer_error(exc, lambda: head_json(log))
        except StoreError:
            raise
        except LedgerError as exc:
            return _answer_error(exc, None)


def _queue(service: AppendService, study: str, log: Ledger, data: Any) -> Future[Response] | None:
    """A contended study's append that asks for turns: wait for the write lock once.

    A batch that no longer continues the head (checked without the lock, before its
    signatures: §7) waits for a turn; one that may still continue it is prepared here (parsed,
    signatures checked, outside the lock) and tried under the lock first.
    """
    entries, blobs, cps = _parse_append(data)
    try:
        _check_position(log, entries)
    except ConflictError:
        service.conflict(study)
        return service.offer_turn(study)
    if not entries:
        return None  # checkpoints alone cannot lose a race
    return service.offer_turn(study, (log.prepare_signed(entries, blobs), cps))


def _route(
    log: Ledger, op: str, method: str, request: Request | None, data: Any, contended: bool = False
) -> Response:
    if method == "POST":
        if op == "append":
            return JSONResponse(_append(log, data, contended))
        if op == "cosign":
            return JSONResponse(_cosign(log, data))
        raise BadRequest(405 if op in _GETS else 404, f"no POST {op} in the append API")
    assert request is not None  # a GET comes through Starlette's route
    if op == "head":
        return JSONResponse(head_json(log))
    if op == "keys":
        registered = log.keys()
        rows = [
            {
                "actor": k.actor,
                "name": k.name,
                "vkey": k.vkey,
                "role": k.role,
                "added_seq": k.added_seq,
                "revoked_seq": k.revoked_seq,
            }
            for k in registered
        ]
        return JSONResponse({"keys": rows})
    if op == "checkpoints":
        return JSONResponse(
            {
                "checkpoints": [
                    {
                        "id": c.id,
                        "size": c.size,
                        "root": c.root.hex(),
                        "note": c.note,
                        "created": c.created,
                    }
                    for c in log.checkpoints()
                ]
            }
        )
    if op == "root":
        size = _int(request.query_params, "size")
        return JSONResponse({"size": size, "root": log.root(size).hex()})
    if op.startswith("proof/") and op[6:] in ("inclusion", "consistency"):
        return JSONResponse(_proof(log, request, op[6:]))
    if op == "events":
        return JSONResponse(_events(log, request))
    if op.startswith("blob/"):
        return Response(_blob(log, request, op[5:]), 200, media_type="application/octet-stream")
    if op in ("append", "cosign", "create"):
        raise BadRequest(405, f"{op} takes POST")
    raise BadRequest(404, f"no {op!r} in the append API (docs/service.md §7)")


_GETS = frozenset({"head", "keys", "checkpoints", "root", "events"})
