"""The fake Messages API server, driven by the real anthropic SDK (sync and async)."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from fake_messages import (
    IMAGE_TOKENS,
    Answered,
    FakeMessagesServer,
    canonical_sha256,
    default_responder,
    estimate_input_tokens,
    load_responder,
)
from locations import SUPPORT_DIR

if TYPE_CHECKING:  # the SDK (about 1.5 s of CPU) is imported by the tests that use it
    import anthropic

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 32).decode("ascii")
ARM_TEXT = "Read every row of the chart.\n\nAnswer as JSON.\n"


def trial_request(text: str = ARM_TEXT) -> dict[str, Any]:
    """A request body shaped as docs/trials.md §1 says."""
    return {
        "max_tokens": 2048,
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                    {"type": "text", "text": text},
                ],
            }
        ],
        "model": "claude-sonnet-4-6",
        "temperature": 1.0,
    }


def create(client: anthropic.Anthropic, body: dict[str, Any], **kwargs: Any) -> Any:
    """messages.create with the whole body (SDK 2.12 takes `temperature` only via extra_body)."""
    params = dict(body)
    extra = {k: params.pop(k) for k in ("temperature", "top_p", "top_k") if k in params}
    return client.messages.create(**params, extra_body=extra, **kwargs)


@pytest.fixture
def server() -> Iterator[FakeMessagesServer]:
    with FakeMessagesServer() as srv:
        yield srv


@pytest.fixture
def client(server: FakeMessagesServer) -> Iterator[anthropic.Anthropic]:
    import anthropic

    with anthropic.Anthropic(api_key="test", base_url=server.base_url, max_retries=0) as c:
        yield c


def test_message_round_trip_with_image(
    server: FakeMessagesServer, client: anthropic.Anthropic
) -> None:
    body = trial_request()
    message = create(client, body)
    text = message.content[0].text
    assert message.type == "message" and message.role == "assistant"
    assert message.model == "claude-sonnet-4-6"
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.id.startswith("msg_")
    assert message._request_id is not None and message._request_id.startswith("req_")
    assert text == default_responder(body)
    assert json.loads(text)["request_sha256"] == canonical_sha256(body)[:16]
    assert message.usage.input_tokens == len(ARM_TEXT) // 4 + IMAGE_TOKENS
    assert message.usage.output_tokens == len(text) // 4 + 1
    # the SDK sends the body unchanged, so the server's hash is the runner's request_sha256
    assert server.answered == [Answered(canonical_sha256(body), ARM_TEXT)]
    assert server.stats == {("messages", 200): 1}
    # deterministic: the same request gets the same text
    assert create(client, body).content[0].text == text
    assert create(client, trial_request("other\n")).content[0].text != text


def test_async_round_trip_served_in_parallel() -> None:
    import anthropic

    async def main(base_url: str) -> list[str]:
        async with anthropic.AsyncAnthropic(
            api_key="test", base_url=base_url, max_retries=0
        ) as aclient:
            calls = [
                aclient.messages.create(
                    model="claude-sonnet-4-6",
                    max_tokens=16,
                    messages=[{"role": "user", "content": f"question {i}"}],
                )
                for i in range(24)
            ]
            return [m.content[0].text for m in await asyncio.gather(*calls)]

    with FakeMessagesServer(latency_ms=150) as server:
        texts = asyncio.run(main(server.base_url))
        assert len(set(texts)) == 24
        assert server.count("messages", 200) == 24
        assert server.max_in_flight > 1
        assert sorted(a.marker or "" for a in server.answered) == sorted(
            f"question {i}" for i in range(24)
        )


def test_count_tokens(client: anthropic.Anthropic) -> None:
    body = trial_request()
    result = client.messages.count_tokens(model=body["model"], messages=body["messages"])
    assert result.input_tokens == estimate_input_tokens(body) == len(ARM_TEXT) // 4 + 1600
    result = client.messages.count_tokens(
        model="m", system="x" * 40, messages=[{"role": "user", "content": "y" * 8}]
    )
    assert result.input_tokens == 12


def test_responder_string_dict_and_failure() -> None:
    import anthropic

    full = {
        "id": "msg_custom",
        "type": "message",
        "role": "assistant",
        "model": "sim",
        "content": [{"type": "text", "text": "from a dict"}],
        "stop_reason": "max_tokens",
        "stop_sequence": None,
        "usage": {"input_tokens": 7, "output_tokens": 9},
    }

    def responder(body: dict[str, Any]) -> str | dict[str, Any]:
        text = body["messages"][0]["content"]
        if text == "dict":
            return full
        if text == "boom":
            raise RuntimeError("responder failed")
        return text.upper()

    with (
        FakeMessagesServer(responder=responder) as server,
        anthropic.Anthropic(api_key="test", base_url=server.base_url, max_retries=0) as c,
    ):

        def ask(text: str) -> Any:
            return c.messages.create(
                model="m", max_tokens=5, messages=[{"role": "user", "content": text}]
            )

        assert ask("shout").content[0].text == "SHOUT"
        message = ask("dict")
        assert message.id == "msg_custom" and message.usage.output_tokens == 9
        with pytest.raises(anthropic.InternalServerError, match="responder failed"):
            ask("boom")


def test_load_responder() -> None:
    dumps = load_responder("json:dumps")
    assert dumps({"a": 1}) == '{"a": 1}'
    with pytest.raises(ValueError, match="module:function"):
        load_responder("json")


STATUS_FAULTS = [
    ("429", "RateLimitError", 429, "rate_limit_error"),
    ("529", "OverloadedError", 529, "overloaded_error"),
    ("500", "InternalServerError", 500, "api_error"),
    ("400", "BadRequestError", 400, "invalid_request_error"),
    ("401", "AuthenticationError", 401, "authentication_error"),
    ("403", "PermissionDeniedError", 403, "permission_error"),
]


@pytest.mark.parametrize(("kind", "exc_type", "status", "error_type"), STATUS_FAULTS)
def test_status_faults_raise_the_sdk_exceptions(
    server: FakeMessagesServer,
    client: anthropic.Anthropic,
    kind: str,
    exc_type: str,
    status: int,
    error_type: str,
) -> None:
    import anthropic

    server.inject(kind, count=1, retry_after=3)
    with pytest.raises(getattr(anthropic, exc_type)) as info:
        create(client, trial_request())
    exc = info.value
    assert isinstance(exc, anthropic.APIStatusError)
    assert exc.status_code == status
    assert exc.type == error_type
    assert exc.request_id is not None and exc.request_id.startswith("req_")
    assert exc.body == {
        "type": "error",
        "error": {"type": error_type, "message": exc.api_message},
        "request_id": exc.request_id,
    }
    if kind == "429":
        assert exc.response.headers["retry-after"] == "3"
    else:
        assert "retry-after" not in exc.response.headers
    assert server.answered == []
    # one fault only: the next request succeeds on the same keep-alive connection
    create(client, trial_request())
    assert server.stats == {("messages", status): 1, ("messages", 200): 1}


def test_overloaded_is_an_internal_server_error(
    server: FakeMessagesServer, client: anthropic.Anthropic
) -> None:
    import anthropic

    server.inject("529")
    with pytest.raises(anthropic.InternalServerError) as info:
        create(client, trial_request())
    assert info.value.status_code == 529


def test_drop_raises_connection_error(
    server: FakeMessagesServer, client: anthropic.Anthropic
) -> None:
    import anthropic

    server.inject("drop")
    with pytest.raises(anthropic.APIConnectionError) as info:
        create(client, trial_request())
    assert not isinstance(info.value, anthropic.APITimeoutError)
    assert server.stats == {("messages", 0): 1}
    assert server.answered == []
    create(client, trial_request())


def test_slow_raises_timeout(server: FakeMessagesServer, client: anthropic.Anthropic) -> None:
    import anthropic

    server.inject("slow", seconds=2.0)
    with pytest.raises(anthropic.APITimeoutError):
        create(client, trial_request(), timeout=0.2)
    # the slow answer is still under way; a new connection is answered meanwhile
    assert create(client, trial_request()).content[0].text


def test_malformed_body_raises_json_decode_error(
    server: FakeMessagesServer, client: anthropic.Anthropic
) -> None:
    server.inject("malformed")
    with pytest.raises(json.JSONDecodeError):
        create(client, trial_request())
    assert server.stats == {("messages", 200): 1}
    assert server.answered == []


def test_real_auth_and_validation_errors(server: FakeMessagesServer) -> None:
    import anthropic

    with (
        anthropic.Anthropic(api_key="wrong", base_url=server.base_url, max_retries=0) as c,
        pytest.raises(anthropic.AuthenticationError),
    ):
        create(c, trial_request())
    with anthropic.Anthropic(api_key="test", base_url=server.base_url, max_retries=0) as c:
        bad = trial_request()
        bad["max_tokens"] = 0
        with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
            create(c, bad)
        with pytest.raises(anthropic.NotFoundError):
            c.get("/v1/nowhere", cast_to=object)
    assert server.answered == []


def test_injected_faults_target_a_route(
    server: FakeMessagesServer, client: anthropic.Anthropic
) -> None:
    import anthropic

    server.inject("500", route="count_tokens")
    create(client, trial_request())
    with pytest.raises(anthropic.InternalServerError):
        client.messages.count_tokens(model="m", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="unknown fault kind"):
        server.inject("418")


def test_retries_honour_retry_after(
    server: FakeMessagesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anthropic

    slept: list[float] = []
    real_sleep = time.sleep

    def recording_sleep(seconds: float) -> None:
        slept.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", recording_sleep)
    server.inject("429", count=2, retry_after=0.05)
    with anthropic.Anthropic(api_key="test", base_url=server.base_url, max_retries=2) as c:
        message = create(c, trial_request())
    assert message.content[0].text
    assert slept.count(0.05) == 2  # the SDK waited exactly what retry-after said
    assert server.stats == {("messages", 429): 2, ("messages", 200): 1}
    assert len(server.answered) == 1


def test_random_faults_are_seeded() -> None:
    import anthropic

    def statuses(seed: int) -> list[int]:
        with (
            FakeMessagesServer(fault_rate=0.5, fault_kinds=("529", "500"), seed=seed) as srv,
            anthropic.Anthropic(api_key="test", base_url=srv.base_url, max_retries=0) as c,
        ):
            out = []
            for _ in range(12):
                try:
                    c.messages.count_tokens(model="m", messages=[{"role": "user", "content": "x"}])
                    create(c, trial_request())
                    out.append(200)
                except anthropic.APIStatusError as exc:
                    out.append(exc.status_code)
            assert srv.count("count_tokens") == 12  # not in fault_routes
            return out

    first = statuses(7)
    assert first == statuses(7)
    assert set(first) <= {200, 500, 529} and len(set(first)) > 1


def batch_requests(n: int) -> list[dict[str, Any]]:
    return [
        {"custom_id": f"t{i:06d}", "params": trial_request(f"arm text {i}\n")} for i in range(n)
    ]


def test_batch_round_trip(server: FakeMessagesServer, client: anthropic.Anthropic) -> None:
    server.set_batch_result("t000001", "errored", "overloaded_error")
    requests = batch_requests(3)
    batch = client.messages.batches.create(requests=requests)  # type: ignore[arg-type]
    assert batch.id.startswith("msgbatch_")
    assert batch.type == "message_batch"
    assert batch.processing_status == "in_progress"
    assert batch.results_url is None and batch.ended_at is None
    assert batch.request_counts.processing == 3
    assert (batch.expires_at - batch.created_at).total_seconds() == 24 * 3600

    polled = [client.messages.batches.retrieve(batch.id) for _ in range(2)]
    assert [b.processing_status for b in polled] == ["in_progress", "ended"]
    ended = polled[-1]
    assert ended.results_url == f"{server.base_url}/v1/messages/batches/{batch.id}/results"
    assert ended.request_counts.succeeded == 2 and ended.request_counts.errored == 1
    assert ended.request_counts.processing == 0 and ended.ended_at is not None

    results = {r.custom_id: r.result for r in client.messages.batches.results(batch.id)}
    assert set(results) == {"t000000", "t000001", "t000002"}
    ok = results["t000000"]
    assert ok.type == "succeeded"
    assert ok.message.content[0].text == default_responder(requests[0]["params"])
    failed = results["t000001"]
    assert failed.type == "errored"
    assert failed.error.error.type == "overloaded_error"
    assert Counter(a.marker for a in server.answered) == {"arm text 0\n": 1, "arm text 2\n": 1}


def test_batch_errors(server: FakeMessagesServer, client: anthropic.Anthropic) -> None:
    import anthropic

    with pytest.raises(anthropic.NotFoundError) as info:
        client.messages.batches.retrieve("msgbatch_nope")
    assert info.value.type == "not_found_error"
    batch = client.messages.batches.create(requests=batch_requests(1))  # type: ignore[arg-type]
    with pytest.raises(anthropic.AnthropicError, match="No `results_url`"):
        client.messages.batches.results(batch.id)  # the SDK checks before fetching
    with pytest.raises(anthropic.BadRequestError, match="still processing"):
        client.get(f"/v1/messages/batches/{batch.id}/results", cast_to=object)
    with pytest.raises(anthropic.BadRequestError, match="custom_id"):
        client.messages.batches.create(
            requests=[{"custom_id": "bad id!", "params": trial_request()}]  # type: ignore[list-item]
        )
    canceled = client.messages.batches.cancel(batch.id)
    assert canceled.processing_status == "ended"
    assert canceled.request_counts.canceled == 1
    assert [r.result.type for r in client.messages.batches.results(batch.id)] == ["canceled"]


def test_batch_resumed_by_id_from_another_client_and_server(tmp_path: Path) -> None:
    import anthropic

    state = tmp_path / "batches.json"
    with FakeMessagesServer(state_path=state, batch_ready_after_polls=1) as first:
        with anthropic.Anthropic(api_key="test", base_url=first.base_url, max_retries=0) as c:
            batch_id = c.messages.batches.create(requests=batch_requests(2)).id  # type: ignore[arg-type]
        # the first client "crashed"; a second one resumes by id on the same server
        with anthropic.Anthropic(api_key="test", base_url=first.base_url, max_retries=0) as c:
            assert c.messages.batches.retrieve(batch_id).processing_status == "ended"
            assert len(list(c.messages.batches.results(batch_id))) == 2
    # and a restarted server (new port) still knows the batch and its results
    with (
        FakeMessagesServer(state_path=state) as second,
        anthropic.Anthropic(api_key="test", base_url=second.base_url, max_retries=0) as c,
    ):
        again = c.messages.batches.retrieve(batch_id)
        assert again.results_url is not None and again.results_url.startswith(second.base_url)
        assert sorted(r.custom_id for r in c.messages.batches.results(batch_id)) == [
            "t000000",
            "t000001",
        ]


def test_batch_ready_after_seconds(client: anthropic.Anthropic) -> None:
    import anthropic

    with (
        FakeMessagesServer(batch_ready_after_polls=10**6, batch_ready_after_seconds=0) as server,
        anthropic.Anthropic(api_key="test", base_url=server.base_url, max_retries=0) as c,
    ):
        batch = c.messages.batches.create(requests=batch_requests(1))  # type: ignore[arg-type]
        assert batch.processing_status == "ended"


def test_log_counts_answers(tmp_path: Path) -> None:
    import anthropic

    log = tmp_path / "answers.jsonl"
    with (
        FakeMessagesServer(log_path=log) as server,
        anthropic.Anthropic(api_key="test", base_url=server.base_url, max_retries=0) as c,
    ):
        create(c, trial_request("a\n"))
        create(c, trial_request("a\n"))
        create(c, trial_request("b\n"))
        server.inject("500")
        with pytest.raises(anthropic.InternalServerError):
            create(c, trial_request("c\n"))
        c.messages.count_tokens(model="m", messages=[{"role": "user", "content": "x"}])
    lines = [json.loads(line) for line in log.read_text("utf-8").splitlines()]
    assert Counter(line["text"] for line in lines) == {"a\n": 2, "b\n": 1}
    assert Counter(line["sha256"] for line in lines) == {
        canonical_sha256(trial_request("a\n")): 2,
        canonical_sha256(trial_request("b\n")): 1,
    }
    assert {line["status"] for line in lines} == {200}
    assert all(isinstance(line["time"], float) for line in lines)


def test_cli_subprocess(tmp_path: Path) -> None:
    import anthropic

    log = tmp_path / "cli.jsonl"
    script = SUPPORT_DIR / "fake_messages.py"
    command = [sys.executable, str(script), "--port", "0", "--latency-ms", "10"]
    command += ["--log", str(log), "--responder", "json:dumps"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline().split()
            assert first[0] == "PORT"
            port = int(first[1])
            base_url = f"http://127.0.0.1:{port}"
            with anthropic.Anthropic(api_key="test", base_url=base_url, max_retries=0) as c:
                message = create(c, trial_request())
            echoed = json.loads(message.content[0].text)  # json:dumps echoes the body
            assert echoed == trial_request()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert len(log.read_text("utf-8").splitlines()) == 1
