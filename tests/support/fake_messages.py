"""A fake Anthropic Messages API server for tests and benchmarks (real HTTP on 127.0.0.1).

The server speaks enough of the Messages API for the real ``anthropic`` SDK
(``anthropic.Anthropic(api_key="test", base_url=server.base_url)`` or ``AsyncAnthropic``) to
run against it unchanged. It never touches the internet.

Routes (route names in brackets are used by :meth:`FakeMessagesServer.inject` and ``stats``):

- ``POST /v1/messages`` [``messages``]: checks the key (``x-api-key``, or ``Authorization:
  Bearer`` as SDK 2.x sends it; 401 ``authentication_error``),
  validates ``model``, ``max_tokens`` and ``messages`` minimally (400 ``invalid_request_error``)
  and answers a Message object whose text comes from the *responder*.
- ``POST /v1/messages/count_tokens`` [``count_tokens``]: ``{"input_tokens": N}``.
- ``POST /v1/messages/batches`` [``batches.create``]: body ``{"requests": [{"custom_id",
  "params"}]}``; answers a MessageBatch in ``in_progress``.
- ``GET /v1/messages/batches/{id}`` [``batches.retrieve``]: the batch; it turns ``ended`` (with
  ``results_url`` set) on the ``batch_ready_after_polls``-th retrieve, or once
  ``batch_ready_after_seconds`` have passed since creation, whichever comes first.
- ``GET /v1/messages/batches/{id}/results`` [``batches.results``]: JSONL, one line per request,
  ``{"custom_id", "result": {"type": "succeeded", "message": {...}}}`` (or ``errored`` /
  ``expired`` / ``canceled`` for custom ids chosen with
  :meth:`FakeMessagesServer.set_batch_result`).
- ``POST /v1/messages/batches/{id}/cancel`` [``batches.cancel``]: the batch ends at once; requests
  not yet given a result are ``canceled``.
- ``GET /v1/models/{id}`` [``models.retrieve``]: the Models API's ``ModelInfo``
  (``{"type": "model", "id", "display_name", "created_at"}``) for a model it lists, else 404
  ``not_found_error``; ``GET /v1/models`` [``models.list``]: the page of every listed model
  (only when ``listed_models`` names them).
- anything else [``other``]: 404 ``not_found_error``.

Models: with ``models`` (a set of ids), a ``messages`` or ``count_tokens`` request for any other
model gets 404 ``not_found_error`` (``model: <id>``), as the API answers an unknown model; with
``reported_model``, every Message answered names that model instead of the requested one (a
server that serves another model than the one asked for). Both default to None: any model is
served and reported as requested. ``listed_models`` are the ids the Models API knows (default:
``models``; when both are None it knows any id it is asked about): a server that answers
every name but lists one other model is ``FakeMessagesServer(listed_models={"other"})``.

Every answer carries a ``request-id`` header (``req_...``); error bodies have the API's shape
``{"type": "error", "error": {"type": ..., "message": ...}, "request_id": ...}``. Unknown batch
ids give 404 ``not_found_error``.

Responder: ``responder(body) -> str | dict`` gets the parsed request body (for a batch, one
request's ``params``). A ``str`` is the assistant text; a ``dict`` is a whole Message object sent
as is. If it raises, the request gets 500 ``api_error`` (a batch request gets an ``errored``
result). The default responder returns ``{"chart_type": "tumbling-e", "rows": [],
"request_sha256": "<first 16 hex digits of the body's SHA-256>"}``: deterministic per request.

Token estimate (deterministic, also used by count_tokens)::

    input_tokens  = total_chars // 4 + 1600 * images + 1600 * documents   (at least 1)
    output_tokens = len(text) // 4 + 1

where ``total_chars`` counts the characters of ``system`` and of every text block / string
content in ``messages``.

Faults, thread-safe, checked after authentication and validation:

- ``server.inject(kind, count=1, route="messages", retry_after=None, seconds=None)`` makes the
  next ``count`` requests to ``route`` (``"*"`` = any route) fail with ``kind``;
- ``fault_rate`` / ``fault_kinds`` / ``seed`` add faults at a seeded random rate to the routes in
  ``fault_routes`` (draws happen in arrival order, so they are reproducible for sequential
  clients only).

Kinds: ``"429"`` (``rate_limit_error`` with a ``retry-after`` header, in seconds), ``"529"``
(``overloaded_error``), ``"500"`` (``api_error``), ``"400"`` (``invalid_request_error``),
``"401"`` (``authentication_error``), ``"403"`` (``permission_error``), ``"slow"`` (wait
``seconds`` then answer normally), ``"drop"`` (close the socket without any response),
``"malformed"`` (200, ``application/json``, a body that is not JSON).

What anthropic 2.12 raises for them (``max_retries=0``): ``RateLimitError`` (``retry-after`` in
``exc.response.headers``), ``OverloadedError`` (an ``InternalServerError``, status 529),
``InternalServerError``, ``BadRequestError``, ``AuthenticationError``,
``PermissionDeniedError``, ``APITimeoutError`` (slow, with a shorter client timeout),
``APIConnectionError`` (drop) and, for malformed, a bare
``json.JSONDecodeError`` (a ``ValueError``, *not* an ``anthropic.APIError``).

``latency_ms`` delays every answer (errors included) in the handler thread; the server is a
``ThreadingHTTPServer`` with daemon threads and a deep listen queue, so slow answers overlap.

Bookkeeping: ``server.stats`` (``{(route, status): count}``, status 0 for a dropped connection),
``server.answered`` (:class:`Answered` ``(sha256, marker)`` per 200 answer of ``/v1/messages``
and per succeeded batch result; ``marker`` is the request's first text block),
``server.max_in_flight`` (peak concurrent requests), and, with ``log_path``, one JSON line per
200 answer of ``/v1/messages``::

    {"time": <unix seconds>, "sha256": <hex SHA-256 of the RFC 8785 canonical request body>,
     "text": <the request's first text block, or null>, "status": 200, "route": "messages"}

appended with ``O_APPEND`` before the response is written, so a test that restarts client
processes can count how many times each request was answered (the server counts an answer
even if the client died before reading it, as the real API would bill it).

Batches live in the server object; with ``state_path`` they are also saved to a JSON file
(atomically, on every change) and loaded at start, so a client (or the server) can restart and
resume polling a batch by id. A batch's results are computed (the responder called once per
request) when it ends, under the server's lock; a batch answers each request once however often
its results are fetched.

Usage::

    with FakeMessagesServer(latency_ms=0) as server:
        server.inject("429", count=2, retry_after=1)
        client = anthropic.Anthropic(api_key="test", base_url=server.base_url)

CLI (for benchmarks and crash tests run as a separate process)::

    python tests/support/fake_messages.py --port 0 --latency-ms 200 [--fault-rate 0.1 --seed 1]
        [--fault-kinds 429,529,500] [--log FILE] [--state FILE] [--api-key KEY ...]
        [--batch-ready-after-polls N] [--retry-after S] [--slow-seconds S]
        [--responder module:function] [--model ID ...] [--reported-model ID] [--listed-model ID ...]

prints ``PORT <n>`` as its first stdout line and serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import json
import os
import random
import re
import signal
import socket
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

Responder = Callable[[dict[str, Any]], "str | dict[str, Any]"]
"""Turns a request body into the assistant text, or into a whole Message object."""

FAULT_KINDS = ("429", "529", "500", "400", "401", "403", "slow", "drop", "malformed")
"""Every fault kind :meth:`FakeMessagesServer.inject` accepts."""

ROUTES = (
    "messages",
    "count_tokens",
    "batches.create",
    "batches.retrieve",
    "batches.results",
    "batches.cancel",
    "other",
)
"""Route names used by faults and ``stats``."""

IMAGE_TOKENS = 1600
"""Tokens counted per image (and per document) block."""

_STATUS_ERRORS: dict[str, tuple[int, str, str]] = {
    "429": (429, "rate_limit_error", "Fake rate limit: slow down."),
    "529": (529, "overloaded_error", "Overloaded"),
    "500": (500, "api_error", "Internal server error"),
    "400": (400, "invalid_request_error", "Injected invalid request."),
    "401": (401, "authentication_error", "invalid x-api-key"),
    "403": (
        403,
        "permission_error",
        "Your API key does not have permission to use the specified resource.",
    ),
}
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_BATCH_PATH = re.compile(r"^/v1/messages/batches/([^/]+)(/results|/cancel)?$")
_REASONS = {529: "Overloaded"}


class Answered(NamedTuple):
    """One request the server answered with a message."""

    sha256: str
    """Hex SHA-256 of the RFC 8785 canonical request body (a batch request's ``params``)."""
    marker: str | None
    """The request's first text block (for trials: the composed arm text), or None."""


class _Fault(NamedTuple):
    kind: str
    retry_after: float
    seconds: float


def canonical_sha256(body: Any) -> str:
    """Return the hex SHA-256 of the RFC 8785 canonical JSON of ``body``.

    Falls back to sorted-key compact JSON if the ``rfc8785`` package is missing (identical for
    bodies without non-integral floats or non-ASCII subtleties).
    """
    try:
        import rfc8785

        data = bytes(rfc8785.dumps(body))
    except ImportError:  # pragma: no cover - rfc8785 is a project dependency
        data = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
            "utf-8"
        )
    return hashlib.sha256(data).hexdigest()


def first_text(body: dict[str, Any]) -> str | None:
    """Return the first text of the first message that has one (string content or text block)."""
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "text":
                    text = block.get("text")
                    return text if isinstance(text, str) else None
    return None


def estimate_input_tokens(body: dict[str, Any]) -> int:
    """Deterministic input token estimate: chars // 4 + 1600 per image or document, at least 1."""
    chars = 0
    media = 0

    def visit(content: Any) -> None:
        nonlocal chars, media
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for block in content:
                if not isinstance(block, dict):
                    continue
                kind = block.get("type")
                if kind == "text" and isinstance(block.get("text"), str):
                    chars += len(block["text"])
                elif kind in ("image", "document"):
                    media += 1
                elif kind == "tool_result":
                    visit(block.get("content"))

    visit(body.get("system"))
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            visit(message.get("content"))
    return max(1, chars // 4 + IMAGE_TOKENS * media)


def default_responder(body: dict[str, Any]) -> str:
    """Deterministic answer text derived from the SHA-256 of the canonical request body."""
    digest = canonical_sha256(body)
    return json.dumps({"chart_type": "tumbling-e", "rows": [], "request_sha256": digest[:16]})


def validate_message_params(body: Any) -> str | None:
    """Return why ``body`` is not a minimally valid Messages request, or None if it is."""
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return "model: Field required"
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        return "max_tokens: Field required (a positive integer)"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: Field required (a non-empty list)"
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: must be 'user' or 'assistant'"
        content = message.get("content")
        if not isinstance(content, str | list) or not content:
            return f"messages.{i}.content: Field required"
    if body.get("stream"):
        return "stream: streaming is not supported by the fake server"
    return None


def load_responder(spec: str) -> Responder:
    """Import a responder given as ``module:function`` (the function may be a dotted path)."""
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise ValueError(f"responder must look like module:function, not {spec!r}")
    obj: Any = importlib.import_module(module_name)
    for attr in attr_path.split("."):
        obj = getattr(obj, attr)
    if not callable(obj):
        raise TypeError(f"{spec} is not callable")
    return obj  # type: ignore[no-any-return]


def _now_rfc3339(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat().replace("+00:00", "Z")


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def _error_body(error_type: str, message: str, request_id: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": request_id,
    }


class FakeMessagesServer:
    """A threaded fake of the Messages, count_tokens and Message Batches APIs.

    Args:
        latency_ms: delay before every answer, in milliseconds.
        responder: ``body -> str | dict`` (see the module docstring); None for
            :func:`default_responder`.
        api_keys: accepted ``x-api-key`` values; None accepts any key.
        fault_rate: probability that a request to one of ``fault_routes`` gets a random fault.
        fault_kinds: kinds drawn (uniformly) for random faults.
        seed: seed of the random fault generator.
        log_path: JSONL file appended per 200 answer of ``/v1/messages``.
        batch_ready_after_polls: the batch ends on this retrieve (0: already ended at creation).
        batch_ready_after_seconds: or this long after creation, if not None.
        state_path: JSON file where batches are saved and loaded from.
        retry_after: default ``retry-after`` seconds for 429 faults.
        slow_seconds: default wait of ``slow`` faults.
        fault_routes: routes subject to random faults.
        models: the model ids served (others: 404 ``not_found_error``); None serves any.
        reported_model: the ``model`` every answered Message reports; None: the requested one.
        listed_models: the ids the Models API lists (default ``models``; None and None: any).
        host: interface to bind (keep 127.0.0.1).
        port: port to bind; 0 picks a free one.
    """

    def __init__(
        self,
        latency_ms: float = 0,
        responder: Responder | None = None,
        api_keys: Iterable[str] | None = ("test",),
        fault_rate: float = 0.0,
        fault_kinds: Iterable[str] = ("429", "529", "500"),
        seed: int = 0,
        log_path: str | os.PathLike[str] | None = None,
        batch_ready_after_polls: int = 2,
        *,
        batch_ready_after_seconds: float | None = None,
        state_path: str | os.PathLike[str] | None = None,
        retry_after: float = 1.0,
        slow_seconds: float = 5.0,
        fault_routes: Iterable[str] = ("messages",),
        models: Iterable[str] | None = None,
        reported_model: str | None = None,
        listed_models: Iterable[str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        kinds = tuple(fault_kinds)
        for kind in kinds:
            _check_kind(kind)
        if not 0.0 <= fault_rate <= 1.0:
            raise ValueError("fault_rate must be within [0, 1]")
        self.latency_ms = latency_ms
        self.responder: Responder = responder or default_responder
        self.api_keys: frozenset[str] | None = None if api_keys is None else frozenset(api_keys)
        self.fault_rate = fault_rate
        self.fault_kinds = kinds
        self.fault_routes = frozenset(fault_routes)
        self.log_path = None if log_path is None else Path(log_path)
        self.batch_ready_after_polls = batch_ready_after_polls
        self.batch_ready_after_seconds = batch_ready_after_seconds
        self.state_path = None if state_path is None else Path(state_path)
        self.retry_after = retry_after
        self.slow_seconds = slow_seconds
        self.models: frozenset[str] | None = None if models is None else frozenset(models)
        self.reported_model = reported_model
        self.listed_models: frozenset[str] | None = (
            frozenset(listed_models) if listed_models is not None else self.models
        )
        self._host = host
        self._requested_port = port
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._log_lock = threading.Lock()
        self._stopping = threading.Event()
        self._faults: list[tuple[str, _Fault]] = []  # (route or "*", fault), FIFO
        self._stats: Counter[tuple[str, int]] = Counter()
        self._answered: list[Answered] = []
        self._batches: dict[str, dict[str, Any]] = {}
        self._batch_results: dict[str, tuple[str, str]] = {}  # custom_id -> (kind, error type)
        self._connections: set[socket.socket] = set()
        self._in_flight = 0
        self.max_in_flight = 0
        # called with the route as each request arrives, before any latency or fault: a test
        # can hold requests there (a barrier) to make a concurrency pattern certain, not timed
        self.on_arrival: Callable[[str], None] | None = None
        """Peak number of requests handled at the same time (shows the server is concurrent)."""
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        if self.state_path is not None and self.state_path.exists():
            self._batches = json.loads(self.state_path.read_text("utf-8"))["batches"]

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeMessagesServer:
        """Bind and serve in a background thread; returns self."""
        if self._httpd is not None:
            raise RuntimeError("server already started")
        self._stopping.clear()
        httpd = _HTTPServer((self._host, self._requested_port), _Handler)
        httpd.fake = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name=f"fake-messages:{self.port}",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, cut open connections and release the port (idempotent)."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        httpd.server_close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> FakeMessagesServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port (only while started)."""
        if self._httpd is None:
            raise RuntimeError("server not started")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``, for ``anthropic.Anthropic(base_url=...)``."""
        return f"http://{self._host}:{self.port}"

    # -- faults and bookkeeping ----------------------------------------------------------------

    def inject(
        self,
        kind: str,
        count: int = 1,
        *,
        route: str = "messages",
        retry_after: float | None = None,
        seconds: float | None = None,
    ) -> None:
        """Make the next ``count`` requests to ``route`` (``"*"``: any route) fail with ``kind``.

        ``retry_after`` (429) defaults to the server's ``retry_after``; ``seconds`` (slow) to its
        ``slow_seconds``. Injected faults are consumed first in, first out, before random ones.
        """
        _check_kind(kind)
        if route != "*" and route not in ROUTES:
            raise ValueError(f"unknown route {route!r}; one of {ROUTES} or '*'")
        fault = _Fault(
            kind,
            self.retry_after if retry_after is None else retry_after,
            self.slow_seconds if seconds is None else seconds,
        )
        with self._lock:
            self._faults.extend([(route, fault)] * count)

    def clear_faults(self) -> None:
        """Forget injected faults not yet consumed (random faults stay on)."""
        with self._lock:
            self._faults.clear()

    def set_batch_result(
        self, custom_id: str, kind: str = "errored", error_type: str = "api_error"
    ) -> None:
        """Give ``custom_id`` an ``errored`` / ``expired`` / ``canceled`` result in later batches.

        Applies to batches that end after this call; ``kind="succeeded"`` restores the default.
        """
        if kind not in ("succeeded", "errored", "expired", "canceled"):
            raise ValueError(f"unknown batch result kind {kind!r}")
        with self._lock:
            if kind == "succeeded":
                self._batch_results.pop(custom_id, None)
            else:
                self._batch_results[custom_id] = (kind, error_type)

    @property
    def stats(self) -> dict[tuple[str, int], int]:
        """A snapshot of request counts per ``(route, status)``; status 0 = dropped."""
        with self._lock:
            return dict(self._stats)

    def count(self, route: str | None = None, status: int | None = None) -> int:
        """Number of requests matching ``route`` and ``status`` (None matches any)."""
        with self._lock:
            return sum(
                n
                for (r, s), n in self._stats.items()
                if (route is None or r == route) and (status is None or s == status)
            )

    @property
    def answered(self) -> list[Answered]:
        """A snapshot of the requests answered with a message, in answer order."""
        with self._lock:
            return list(self._answered)

    def batch(self, batch_id: str) -> dict[str, Any] | None:
        """The stored batch record (a copy), or None."""
        with self._lock:
            record = self._batches.get(batch_id)
            return None if record is None else json.loads(json.dumps(record))

    # -- internals used by the handler -------------------------------------------------------

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)

    def _record(self, route: str, status: int) -> None:
        with self._lock:
            self._stats[(route, status)] += 1

    def _take_fault(self, route: str) -> _Fault | None:
        with self._lock:
            for i, (target, fault) in enumerate(self._faults):
                if target in ("*", route):
                    del self._faults[i]
                    return fault
            if (
                self.fault_rate > 0
                and route in self.fault_routes
                and self.fault_kinds
                and self._rng.random() < self.fault_rate
            ):
                kind = self._rng.choice(self.fault_kinds)
                return _Fault(kind, self.retry_after, self.slow_seconds)
        return None

    def _message(self, body: dict[str, Any]) -> dict[str, Any]:
        """Run the responder on ``body``; return a full Message object."""
        answer = self.responder(body)
        if isinstance(answer, dict):
            return answer
        if not isinstance(answer, str):
            raise TypeError(f"responder returned {type(answer).__name__}, not str or dict")
        return {
            "id": _new_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": self.reported_model or body.get("model"),
            "content": [{"type": "text", "text": answer}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": estimate_input_tokens(body),
                "output_tokens": len(answer) // 4 + 1,
            },
        }

    def _note_answer(self, body: dict[str, Any], route: str) -> None:
        sha = canonical_sha256(body)
        marker = first_text(body)
        with self._lock:
            self._answered.append(Answered(sha, marker))
        if self.log_path is not None and route == "messages":
            line = (
                json.dumps(
                    {
                        "time": time.time(),
                        "sha256": sha,
                        "text": marker,
                        "status": 200,
                        "route": route,
                    },
                    ensure_ascii=False,
                ).encode("utf-8")
                + b"\n"
            )
            with self._log_lock:
                fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, line)
                finally:
                    os.close(fd)

    def _save_state(self) -> None:
        """Write the batches to ``state_path`` atomically (caller holds the lock)."""
        if self.state_path is None:
            return
        tmp = self.state_path.with_name(self.state_path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"batches": self._batches}), "utf-8")
        os.replace(tmp, self.state_path)

    def _create_batch(self, requests: list[dict[str, Any]]) -> dict[str, Any]:
        now = time.time()
        record: dict[str, Any] = {
            "id": _new_id("msgbatch"),
            "created": now,
            "polls": 0,
            "ended": None,
            "cancel_initiated": None,
            "requests": requests,
            "results": None,
        }
        with self._lock:
            self._batches[record["id"]] = record
            self._maybe_end(record, now)
            self._save_state()
        return record

    def _poll_batch(self, batch_id: str, *, count_poll: bool) -> dict[str, Any] | None:
        now = time.time()
        with self._lock:
            record = self._batches.get(batch_id)
            if record is None:
                return None
            if count_poll and record["ended"] is None:
                record["polls"] += 1
            self._maybe_end(record, now)
            self._save_state()
            return record

    def _cancel_batch(self, batch_id: str) -> dict[str, Any] | None:
        now = time.time()
        with self._lock:
            record = self._batches.get(batch_id)
            if record is None:
                return None
            if record["ended"] is None:
                record["cancel_initiated"] = now
                self._end(record, now, cancel=True)
            self._save_state()
            return record

    def _maybe_end(self, record: dict[str, Any], now: float) -> None:
        """End the batch if it is due (caller holds the lock)."""
        if record["ended"] is not None:
            return
        due = record["polls"] >= self.batch_ready_after_polls
        if self.batch_ready_after_seconds is not None:
            due = due or now - record["created"] >= self.batch_ready_after_seconds
        if due:
            self._end(record, now, cancel=False)

    def _end(self, record: dict[str, Any], now: float, *, cancel: bool) -> None:
        """Compute every result and mark the batch ended (caller holds the lock)."""
        results = []
        for request in record["requests"]:
            custom_id, params = request["custom_id"], request["params"]
            kind, error_type = self._batch_results.get(custom_id, ("succeeded", ""))
            if cancel:
                kind = "canceled"
            result: dict[str, Any]
            if kind == "succeeded":
                try:
                    message = self._message(params)
                except Exception as exc:
                    kind, error_type = "errored", "api_error"
                    message = {"responder_error": f"{type(exc).__name__}: {exc}"}
                else:
                    self._answered.append(Answered(canonical_sha256(params), first_text(params)))
                    result = {"type": "succeeded", "message": message}
            if kind == "errored":
                error = _error_body(
                    error_type, f"Injected {error_type} for {custom_id}", _new_id("req")
                )
                result = {"type": "errored", "error": error}
            elif kind in ("expired", "canceled"):
                result = {"type": kind}
            results.append({"custom_id": custom_id, "result": result})
        record["results"] = results
        record["ended"] = now

    def _batch_object(self, record: dict[str, Any], base: str) -> dict[str, Any]:
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        if record["results"] is None:
            counts["processing"] = len(record["requests"])
            status = "canceling" if record["cancel_initiated"] else "in_progress"
        else:
            for line in record["results"]:
                counts[line["result"]["type"]] += 1
            status = "ended"
        created = record["created"]
        ended = record["ended"]
        return {
            "id": record["id"],
            "type": "message_batch",
            "processing_status": status,
            "request_counts": counts,
            "created_at": _now_rfc3339(created),
            "expires_at": _now_rfc3339(created + timedelta(hours=24).total_seconds()),
            "ended_at": None if ended is None else _now_rfc3339(ended),
            "cancel_initiated_at": (
                None
                if record["cancel_initiated"] is None
                else _now_rfc3339(record["cancel_initiated"])
            ),
            "archived_at": None,
            "results_url": (
                None if ended is None else f"{base}/v1/messages/batches/{record['id']}/results"
            ),
        }


def _check_kind(kind: str) -> None:
    if kind not in FAULT_KINDS:
        raise ValueError(f"unknown fault kind {kind!r}; one of {FAULT_KINDS}")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    allow_reuse_address = True
    fake: FakeMessagesServer

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.fake._lock:
            self.fake._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.fake._lock:
            self.fake._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):  # the client went away: not the server's problem
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: avoid 40 ms ACK stalls
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests and benchmarks read stats instead

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # -- plumbing ----------------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        fake = self.server.fake
        with fake._lock:
            fake._in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake._in_flight)
        try:
            self._handle(method)
        finally:
            with fake._lock:
                fake._in_flight -= 1

    def _handle(self, method: str) -> None:
        fake = self.server.fake
        self._request_id = _new_id("req")
        raw = self._read_body()
        path = self.path.split("?", 1)[0]
        route, batch_id = _route(method, path)
        if raw is None:  # bad Content-Length: cannot keep the connection in sync
            self.close_connection = True
            self._error(route, 400, "invalid_request_error", "bad Content-Length")
            return
        if fake.on_arrival is not None:
            fake.on_arrival(route)
        fake._sleep(fake.latency_ms / 1000)
        if route == "other":
            self._error(route, 404, "not_found_error", f"Not found: {method} {path}")
            return
        if fake.api_keys is not None and _api_key(self.headers) not in fake.api_keys:
            self._error(route, 401, "authentication_error", "invalid x-api-key")
            return
        body: Any = None
        if method == "POST" and route != "batches.cancel":
            try:
                body = json.loads(raw or b"null")
            except ValueError:
                self._error(route, 400, "invalid_request_error", "request body is not JSON")
                return
        problem = _validate(route, body)
        if problem is not None:
            self._error(route, 400, "invalid_request_error", problem)
            return
        if (
            route in ("messages", "count_tokens")
            and fake.models is not None
            and body.get("model") not in fake.models
        ):
            self._error(route, 404, "not_found_error", f"model: {body.get('model')}")
            return
        fault = fake._take_fault(route)
        if fault is not None:
            if fault.kind == "slow":
                fake._sleep(fault.seconds)
            elif self._fault(route, fault):
                return
        try:
            self._answer(route, body, batch_id)
        except Exception as exc:
            self._error(route, 500, "api_error", f"fake server: {type(exc).__name__}: {exc}")

    def _read_body(self) -> bytes | None:
        length = self.headers.get("content-length")
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            return None
        try:
            n = int(length) if length else 0
        except ValueError:
            return None
        return self.rfile.read(n) if n > 0 else b""

    def _fault(self, route: str, fault: _Fault) -> bool:
        """Answer with ``fault``; False if the request should be answered normally after all."""
        if fault.kind in _STATUS_ERRORS:
            status, error_type, message = _STATUS_ERRORS[fault.kind]
            headers = {}
            if fault.kind == "429":
                ra = fault.retry_after
                headers["retry-after"] = str(int(ra)) if float(ra).is_integer() else str(ra)
            self._error(route, status, error_type, message, headers)
            return True
        if fault.kind == "drop":
            self.server.fake._record(route, 0)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return True
        if fault.kind == "malformed":
            self._send(route, 200, b'{"id": "msg_truncated", "type": "mess', "application/json")
            return True
        return False

    def _answer(self, route: str, body: Any, batch_id: str | None) -> None:
        fake = self.server.fake
        if route in ("models.retrieve", "models.list"):
            self._models(route, batch_id)
            return
        if route == "messages":
            message = fake._message(body)
            fake._note_answer(body, "messages")
            self._json(route, 200, message)
        elif route == "count_tokens":
            self._json(route, 200, {"input_tokens": estimate_input_tokens(body)})
        elif route == "batches.create":
            requests = [
                {"custom_id": r["custom_id"], "params": r["params"]} for r in body["requests"]
            ]
            created = fake._create_batch(requests)
            self._json(route, 200, fake._batch_object(created, self._base()))
        else:
            assert batch_id is not None
            if route == "batches.cancel":
                record = fake._cancel_batch(batch_id)
            else:
                record = fake._poll_batch(batch_id, count_poll=route == "batches.retrieve")
            if record is None:
                self._error(route, 404, "not_found_error", f"batch {batch_id} not found")
            elif route != "batches.results":
                self._json(route, 200, fake._batch_object(record, self._base()))
            elif record["results"] is None:
                self._error(
                    route,
                    400,
                    "invalid_request_error",
                    f"batch {batch_id} is still processing; results are not available yet",
                )
            else:
                data = b"".join(
                    json.dumps(line, ensure_ascii=False).encode("utf-8") + b"\n"
                    for line in record["results"]
                )
                self._send(route, 200, data, "application/binary")

    def _models(self, route: str, model_id: str | None) -> None:
        """The Models API: one ``ModelInfo``, or the page of every listed model."""
        listed = self.server.fake.listed_models

        def info(name: str) -> dict[str, Any]:
            return {
                "type": "model",
                "id": name,
                "display_name": name,
                "created_at": "2026-01-01T00:00:00Z",
            }

        if route == "models.list":
            names = sorted(listed or ())
            self._json(
                route,
                200,
                {
                    "data": [info(n) for n in names],
                    "has_more": False,
                    "first_id": names[0] if names else None,
                    "last_id": names[-1] if names else None,
                },
            )
        elif model_id is not None and (listed is None or model_id in listed):
            self._json(route, 200, info(model_id))
        else:
            self._error(route, 404, "not_found_error", f"model: {model_id}")

    def _base(self) -> str:
        host = self.headers.get("host") or "{}:{}".format(*self.server.server_address[:2])
        return f"http://{host}"

    def _error(
        self,
        route: str,
        status: int,
        error_type: str,
        message: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._json(route, status, _error_body(error_type, message, self._request_id), headers)

    def _json(
        self, route: str, status: int, obj: Any, headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(obj, ensure_ascii=False).encode("utf-8")
        self._send(route, status, data, "application/json", headers)

    def _send(
        self,
        route: str,
        status: int,
        data: bytes,
        content_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.server.fake._record(route, status)
        try:
            self.send_response(status, _REASONS.get(status))
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            self.send_header("request-id", self._request_id)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if self.close_connection:
                self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            self.close_connection = True


def _api_key(headers: Any) -> str | None:
    """The key of ``x-api-key``, or of ``Authorization: Bearer`` (what SDK 2.x sends)."""
    key = headers.get("x-api-key")
    if key:
        return str(key)
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _route(method: str, path: str) -> tuple[str, str | None]:
    if path == "/v1/messages" and method == "POST":
        return "messages", None
    if path == "/v1/messages/count_tokens" and method == "POST":
        return "count_tokens", None
    if path == "/v1/messages/batches" and method == "POST":
        return "batches.create", None
    if path == "/v1/models" and method == "GET":
        return "models.list", None
    if path.startswith("/v1/models/") and method == "GET" and "/" not in path[len("/v1/models/") :]:
        return "models.retrieve", path[len("/v1/models/") :]
    match = _BATCH_PATH.match(path)
    if match is not None:
        batch_id, suffix = match.group(1), match.group(2)
        if suffix is None and method == "GET":
            return "batches.retrieve", batch_id
        if suffix == "/results" and method == "GET":
            return "batches.results", batch_id
        if suffix == "/cancel" and method == "POST":
            return "batches.cancel", batch_id
    return "other", None


def _validate(route: str, body: Any) -> str | None:
    if route == "messages":
        return validate_message_params(body)
    if route == "count_tokens":
        if not isinstance(body, dict):
            return "request body must be a JSON object"
        if not isinstance(body.get("model"), str):
            return "model: Field required"
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            return "messages: Field required (a non-empty list)"
        return None
    if route == "batches.create":
        if not isinstance(body, dict):
            return "request body must be a JSON object"
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            return "requests: Field required (a non-empty list)"
        seen: set[str] = set()
        for i, request in enumerate(requests):
            if not isinstance(request, dict):
                return f"requests.{i}: must be an object"
            custom_id = request.get("custom_id")
            if not isinstance(custom_id, str) or not _CUSTOM_ID.match(custom_id):
                return f"requests.{i}.custom_id: must match ^[a-zA-Z0-9_-]{{1,64}}$"
            if custom_id in seen:
                return f"requests.{i}.custom_id: duplicate custom_id {custom_id!r}"
            seen.add(custom_id)
            problem = validate_message_params(request.get("params"))
            if problem is not None:
                return f"requests.{i}.params.{problem}"
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the server as a process: print ``PORT <n>`` and serve until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--fault-kinds", default="429,529,500", help="comma-separated kinds")
    parser.add_argument("--fault-routes", default="messages", help="comma-separated routes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log", dest="log_path", default=None)
    parser.add_argument("--state", dest="state_path", default=None)
    parser.add_argument(
        "--api-key",
        dest="api_keys",
        action="append",
        default=None,
        help="accepted key (repeatable; default 'test'); '*' accepts any key",
    )
    parser.add_argument("--batch-ready-after-polls", type=int, default=2)
    parser.add_argument("--batch-ready-after-seconds", type=float, default=None)
    parser.add_argument("--retry-after", type=float, default=1.0)
    parser.add_argument("--slow-seconds", type=float, default=5.0)
    parser.add_argument("--responder", default=None, help="module:function")
    parser.add_argument(
        "--model",
        dest="models",
        action="append",
        default=None,
        help="a model id served (repeatable; default: any); others get 404",
    )
    parser.add_argument("--reported-model", default=None, help="the model every answer names")
    parser.add_argument(
        "--listed-model",
        dest="listed_models",
        action="append",
        default=None,
        help="a model id the Models API lists (repeatable; default: the --model ids, else any)",
    )
    args = parser.parse_args(argv)

    keys: list[str] | None = args.api_keys or ["test"]
    if keys is not None and "*" in keys:
        keys = None
    server = FakeMessagesServer(
        latency_ms=args.latency_ms,
        responder=load_responder(args.responder) if args.responder else None,
        api_keys=keys,
        fault_rate=args.fault_rate,
        fault_kinds=[k for k in args.fault_kinds.split(",") if k],
        seed=args.seed,
        log_path=args.log_path,
        batch_ready_after_polls=args.batch_ready_after_polls,
        batch_ready_after_seconds=args.batch_ready_after_seconds,
        state_path=args.state_path,
        retry_after=args.retry_after,
        slow_seconds=args.slow_seconds,
        fault_routes=[r for r in args.fault_routes.split(",") if r],
        models=args.models,
        reported_model=args.reported_model,
        listed_models=args.listed_models,
        host=args.host,
        port=args.port,
    )
    done = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with server:
        print(f"PORT {server.port}", flush=True)
        while not done.wait(0.2):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
