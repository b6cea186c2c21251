"""``ledger run`` with the openai-compatible backend against a fake chat-completions server."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections import Counter, deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers import make_study, study_key

from ledger import Ledger, canonical_json
from runner._backends import FORMAT_OPENAI, OpenAICompatibleBackend
from runner._execute import RunOptions, run_study
from runner.spec import load_study
from verify import verify_ledger_file

# The preflight (runner/_preflight.py; tests/runner/test_preflight.py) would meet the faults these
# tests inject for the trials: library runs here go without it. The CLI always preflights.
FAST = {"backoff_base": 0.01, "backoff_max": 0.05, "jitter_seed": 1, "preflight": False}
ANSWER = '{"chart_type": "tumbling-e", "rows": []}'
FINGERPRINT = "b1234-fake"
#: Fault kinds: the status and body sent instead of a chat completion.
FAULTS: dict[str, tuple[int, bytes]] = {
    "503": (503, b'{"error": {"message": "overloaded, try again", "type": "server_error"}}'),
    "400": (400, b'{"error": {"message": "bad image_url", "type": "invalid_request_error"}}'),
    "not-json": (200, b'{"id": "chatcmpl-1", "choices": [tru'),
    "no-choices": (200, b'{"id": "chatcmpl-1", "object": "chat.completion", "choices": []}'),
    "null": (
        200,
        b'{"id": "chatcmpl-1", "object": "chat.completion", "model": "m", "choices": [{"index": '
        b'0, "message": {"role": "assistant", "content": null}, "finish_reason": "length"}]}',
    ),
}


class FakeChatServer:
    """``POST /v1/chat/completions`` on 127.0.0.1; records the canonical bytes of every body.

    Like llama-cpp-python's server, it answers any model name and echoes the requested one.
    ``listed``: the ids ``GET /v1/models`` lists (None: the server has no such route, 404).
    Every completion carries ``system_fingerprint`` :data:`FINGERPRINT`.
    """

    def __init__(self, listed: list[str] | None = None) -> None:
        self.listed = listed
        self.received: list[bytes] = []  # canonical JSON of each parsed request body
        self.answered: list[bytes] = []  # raw bodies of the 200 chat completions sent
        self.faults: deque[str] = deque()
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as httpx expects

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path != "/v1/models" or fake.listed is None:
                    self._send(404, b'{"error": {"message": "not found"}}')
                    return
                data = [{"id": m, "object": "model", "owned_by": "me"} for m in fake.listed]
                self._send(200, json.dumps({"object": "list", "data": data}).encode())

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                data = self.rfile.read(length)
                if self.path != "/v1/chat/completions":
                    self._send(404, b'{"error": {"message": "not found"}}')
                    return
                body = json.loads(data)
                with fake.lock:
                    fake.received.append(canonical_json(body))
                    fault = fake.faults.popleft() if fake.faults else None
                if fault is not None:
                    self._send(*FAULTS[fault])
                    return
                raw = json.dumps(fake.completion(body)).encode()
                with fake.lock:
                    fake.answered.append(raw)
                self._send(200, raw)

            def _send(self, status: int, raw: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @staticmethod
    def completion(body: dict[str, Any]) -> dict[str, Any]:
        text = "".join(
            part.get("text", "")
            for part in body["messages"][0]["content"]
            if part["type"] == "text"
        )
        prompt_tokens = len(text) // 4 + 1600
        completion_tokens = len(ANSWER) // 4 + 1
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": body["model"],
            "system_fingerprint": FINGERPRINT,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": ANSWER},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def inject(self, kind: str, count: int = 1) -> None:
        with self.lock:
            self.faults.extend([kind] * count)


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    fake = FakeChatServer()
    fake.thread.start()
    try:
        yield fake
    finally:
        fake.httpd.shutdown()
        fake.httpd.server_close()


@pytest.fixture
def study(tmp_path: Path, ledger_home: Path, study_template: Path) -> Path:
    return make_study(
        tmp_path / "study", replicates=1, template=study_template, provider="openai-compatible"
    )


def backend(server: FakeChatServer) -> OpenAICompatibleBackend:
    return OpenAICompatibleBackend(base_url=server.url + "/v1")


def events(study: Path, kind: str) -> list[Any]:
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        return list(log.events(kind))


def blob(study: Path, digest: str) -> bytes:
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        return log.blob(digest)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_study_completes_and_records_exactly_what_the_server_received(
    study: Path, server: FakeChatServer
) -> None:
    result = run_study(study, study_key(), backend(server), RunOptions(concurrency=4, **FAST))
    assert result.reason == "complete" and result.final == 35 and result.pending == 0
    assert result.fatal is None and result.counters.retries == 0
    spec = load_study(study)
    requested = events(study, "trial.requested")
    assert len(requested) == 35
    assert all(e.body["backend"] == "openai-compatible" for e in requested)
    # the recorded request blobs are, byte for byte, the bodies the server parsed (canonically)
    recorded = [blob(study, e.blobs["request"]) for e in requested]
    assert Counter(sha256(r) for r in recorded) == Counter(sha256(r) for r in server.received)
    for event, raw in zip(requested, recorded, strict=True):
        assert sha256(raw) == event.body["request_sha256"]
        body = json.loads(raw)
        assert set(body) == {"model", "messages", "max_tokens", "temperature"}
        assert body["model"] == spec.model["id"]
        [message] = body["messages"]
        assert message["role"] == "user"
        image, text = message["content"]
        assert image["type"] == "image_url" and text["type"] == "text"
        prefix = "data:image/png;base64,"
        assert image["image_url"]["url"].startswith(prefix)
        decoded = base64.b64decode(image["image_url"]["url"][len(prefix) :], validate=True)
        assert decoded == spec.stimuli[event.body["stimulus"]].read_bytes()
        assert text["text"] == spec.arm_text(event.body["arm"])
    responded = events(study, "trial.responded")
    assert len(responded) == 35
    for event in responded:
        assert event.body["format"] == FORMAT_OPENAI == "openai-chat"
        assert event.body["http_status"] == 200
        assert event.body["request_id"] == "chatcmpl-1"
        assert event.body["stop_reason"] == "stop"
        assert event.body["model"] == spec.model["id"]
        assert event.body["usage"]["completion_tokens"] > 0
        assert event.body["cost_usd"] is None  # local servers are not priced
    responses = sorted(blob(study, e.blobs["response"]) for e in responded)
    assert responses == sorted(server.answered)
    assert verify_ledger_file(study / "ledger.db").ok


def test_503_is_recorded_and_retried(study: Path, server: FakeChatServer) -> None:
    server.inject("503", count=2)
    result = run_study(
        study, study_key(), backend(server), RunOptions(concurrency=1, max_trials=2, **FAST)
    )
    failed = events(study, "trial.failed")
    assert [f.body["http_status"] for f in failed] == [503, 503]
    assert all(f.body["retryable"] and not f.body["final"] for f in failed)
    assert {f.body["error_type"] for f in failed} == {"http_503"}
    assert result.counters.retries == 2 and result.counters.responded == 2
    assert result.fatal is None
    requested = events(study, "trial.requested")
    assert [e.body["attempt"] for e in requested] == [1, 2, 3, 1]
    assert Counter(sha256(blob(study, e.blobs["request"])) for e in requested) == Counter(
        sha256(r) for r in server.received
    )


def test_400_stops_the_run(study: Path, server: FakeChatServer) -> None:
    server.inject("400")
    result = run_study(study, study_key(), backend(server), RunOptions(concurrency=1, **FAST))
    assert result.fatal is not None and "HTTP 400" in result.fatal
    assert "bad image_url" in result.fatal
    assert result.counters.responded == 0 and result.pending == 35
    [failed] = events(study, "trial.failed")
    assert failed.body["error_type"] == "http_400" and failed.body["http_status"] == 400
    assert not failed.body["retryable"] and not failed.body["final"]
    assert events(study, "run.stopped")[-1].body["reason"].startswith("error: HTTP 400")
    assert len(server.received) == 1  # nothing else was sent


def test_404_from_a_wrong_base_url_is_a_configuration_error(
    study: Path, server: FakeChatServer
) -> None:
    wrong = OpenAICompatibleBackend(base_url=server.url)  # the API root lacks its /v1
    result = run_study(study, study_key(), wrong, RunOptions(concurrency=2, **FAST))
    assert result.fatal is not None
    assert f"HTTP 404 from {server.url}/chat/completions" in result.fatal
    assert result.counters.given_up == 0 and result.pending == 35
    failed = events(study, "trial.failed")
    assert failed and {f.body["error_type"] for f in failed} == {"configuration"}
    assert not any(f.body["final"] for f in failed)
    done = run_study(study, study_key(), backend(server), RunOptions(max_attempts=1, **FAST))
    assert done.reason == "complete" and done.final == 35 and done.counters.given_up == 0


def test_given_prices_cost_chat_completions_from_their_usage(
    study: Path, server: FakeChatServer
) -> None:
    options = RunOptions(max_trials=3, budget_usd=1.0, price_in=0.5, price_out=1.5, **FAST)
    result = run_study(study, study_key(), backend(server), options)
    assert result.priced and result.counters.responded == 3
    for event in events(study, "trial.responded"):
        usage = event.body["usage"]
        expected = (usage["prompt_tokens"] * 0.5 + usage["completion_tokens"] * 1.5) / 1e6
        assert event.body["cost_usd"] == pytest.approx(expected) and expected > 0
    [started] = events(study, "run.started")
    assert started.body["price_usd_per_mtok"]["input"] == 0.5


@pytest.mark.parametrize("kind", ["not-json", "no-choices"])
def test_malformed_response_is_kept_and_retried(
    study: Path, server: FakeChatServer, kind: str
) -> None:
    server.inject(kind)
    result = run_study(
        study, study_key(), backend(server), RunOptions(concurrency=1, max_trials=1, **FAST)
    )
    [failed] = events(study, "trial.failed")
    assert failed.body["error_type"] == "malformed_response"
    assert failed.body["retryable"] and not failed.body["final"]
    assert failed.body["http_status"] == 200
    assert blob(study, failed.blobs["response"]) == FAULTS[kind][1]  # the bad body is kept
    assert result.counters.retries == 1 and result.counters.responded == 1
    [responded] = events(study, "trial.responded")
    assert responded.body["attempt"] == 2 and responded.body["format"] == "openai-chat"


def test_content_null_is_a_response_scored_unparseable(study: Path, server: FakeChatServer) -> None:
    from analysis._parse import parse_response

    server.inject("null")
    result = run_study(
        study, study_key(), backend(server), RunOptions(concurrency=1, max_trials=1, **FAST)
    )
    assert result.fatal is None and result.counters.responded == 1 and result.final == 1
    assert events(study, "trial.failed") == []  # neither retried nor given up
    [responded] = events(study, "trial.responded")
    raw = blob(study, responded.blobs["response"])
    assert raw == FAULTS["null"][1]
    assert parse_response(raw, responded.body["format"], "tumbling-e-json").status == "unparseable"
    assert verify_ledger_file(study / "ledger.db").ok
