"""The preflight (``runner/_preflight.py``, ``docs/trials.md`` §3): before any trial, one recorded
request per request shape shows the backend accepts a request naming the locked model and takes
the study's requests; a refused preflight costs no trial. Bad input: a server without the
locked model (404 at the preflight), a server that answers 500, a budget too small for the
preflight, Ctrl-C with the preflight in flight."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fake_messages import FakeMessagesServer
from helpers import make_study, study_key

import runner._control
from ledger import Ledger
from ledger.cli import main
from runner._backends import AnthropicBackend, SimulatedBackend
from runner._control import RunInterruptedError
from runner._errors import PreflightError
from runner._execute import RunOptions, check_study, run_study
from runner._preflight import plan_preflights, request_shape
from runner._request import Trial
from verify import verify_ledger_file

FAST = {"backoff_base": 0.01, "backoff_max": 0.05, "jitter_seed": 1}
MODEL = "claude-sonnet-4-6"  # the template's [model] id


@pytest.fixture
def study(tmp_path: Path, ledger_home: Path, study_template: Path) -> Path:
    return make_study(tmp_path / "study", replicates=1, template=study_template)


def events(study: Path, kind: str | None = None) -> list[Any]:
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        return list(log.events(kind))


def blob(study: Path, digest: str) -> bytes:
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        return log.blob(digest)


def cli_run(study: Path, server: FakeMessagesServer, *extra: str) -> Any:
    return CliRunner().invoke(
        main,
        ["run", str(study), "--base-url", server.base_url, *extra],
        env={"ANTHROPIC_API_KEY": "test"},
    )


def status_json(study: Path) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["status", str(study), "--json"])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def assert_nothing_given_up(study: Path, pending: int = 35) -> None:
    """No trial was requested or given up; ``ledger status`` shows every trial pending."""
    assert events(study, "trial.requested") == []
    assert not any(e.body["final"] for e in events(study, "trial.failed"))
    arms = status_json(study)["arms"]
    assert sum(a["pending"] for a in arms) == pending
    assert sum(a["given_up"] + a["responded"] for a in arms) == 0


# ---------------------------------------------------------------------------- --check


def test_check_on_the_fake_messages_server_writes_one_preflight_and_no_trial(
    study: Path,
) -> None:
    before = len(events(study))
    with FakeMessagesServer(latency_ms=0) as server:
        result = cli_run(study, server, "--check")
        assert result.exit_code == 0, result.output
        assert server.count("messages", 200) == 1
        answered = server.answered[0].sha256
        base = server.base_url
    new = events(study)[before:]
    assert [e.kind for e in new] == ["run.preflight"]  # exactly one event: no session, no trial
    [preflight] = new
    body = preflight.body
    assert body["ok"] is True and body["check"] is True and body["simulated"] is False
    assert body["model"] == MODEL and body["reported_model"] == MODEL
    assert body["model_match"] is True and body["http_status"] == 200
    assert body["backend"] == "anthropic" and body["url"].endswith("/v1/messages")
    assert body["shape"] == {
        "images": True,
        "system": False,
        "prior_turns": False,
        "parameters": ["max_tokens", "temperature"],
    }
    assert body["position"] == 1 and body["attempt"] == 1
    assert body["request_sha256"] == answered == preflight.blobs["request"]
    assert json.loads(blob(study, preflight.blobs["response"]))["type"] == "message"
    assert (
        "preflight: a request naming model 'claude-sonnet-4-6' was accepted, built like trial"
    ) in result.stdout
    assert "the response reports model 'claude-sonnet-4-6'" in result.stdout
    # what the server said about itself: the Models API knows the locked id (no warning)
    identity = body["server_identity"]
    [asked] = identity["asked"]
    assert asked["url"] == f"{base}/v1/models/{MODEL}" and asked["http_status"] == 200
    assert asked["headers"]["request-id"].startswith("req_") and asked["error"] is None
    assert identity["models"] == [MODEL] and identity["listed"] == {MODEL: True}
    assert body["headers"]["request-id"] == body["request_id"]
    assert body["system_fingerprint"] is None  # the Messages API has none
    assert "not among the models" not in result.output and "could not be asked" not in (
        result.output
    )
    assert "check passed: 1 preflight request accepted; no trial was sent" in result.stdout
    # ledger status shows it; the preflight is no trial: every trial is still pending
    status = status_json(study)
    assert status["last_preflight"]["seq"] == preflight.seq
    assert sum(a["pending"] for a in status["arms"]) == 35 and status["sessions"] == 0
    text = CliRunner().invoke(main, ["status", str(study)]).output
    assert f"last preflight: seq {preflight.seq}" in text and "accepted (HTTP 200)" in text
    assert verify_ledger_file(study / "ledger.db").ok


def test_the_preflight_is_the_first_trials_request_byte_for_byte(study: Path) -> None:
    with FakeMessagesServer(latency_ms=0) as server:
        result = run_study(
            study,
            study_key(),
            AnthropicBackend(api_key="test", base_url=server.base_url),
            RunOptions(concurrency=4, **FAST),
        )
    assert result.reason == "complete" and result.final == 35
    [preflight] = events(study, "run.preflight")
    assert [p.seq for p in result.preflights] == [preflight.seq]
    first = next(e for e in events(study, "trial.requested") if e.body["position"] == 1)
    assert first.body["trial"] == preflight.body["as_trial"]
    assert first.body["request_sha256"] == preflight.body["request_sha256"]
    assert preflight.seq < events(study, "run.started")[0].seq  # before the session
    # not a trial: not counted, not in the schedule's outcomes
    [stopped] = events(study, "run.stopped")
    assert stopped.body["final"] == 35 and stopped.body["responded"] == 35
    assert verify_ledger_file(study / "ledger.db").ok


def test_the_simulated_backend_records_its_preflight_labelled_simulated(study: Path) -> None:
    [done] = check_study(study, study_key(), SimulatedBackend())
    [preflight] = events(study, "run.preflight")
    assert done.seq == preflight.seq and done.simulated
    assert preflight.body["simulated"] is True and preflight.body["latency_ms"] is None
    assert preflight.body["model_match"] is None  # the simulation is not compared
    assert preflight.body["url"] is None


def test_check_with_nothing_pending_still_checks_the_first_scheduled_trial(study: Path) -> None:
    run_study(study, study_key(), SimulatedBackend(), RunOptions(concurrency=8))
    assert len(events(study, "run.preflight")) == 1
    again = run_study(study, study_key(), SimulatedBackend(), RunOptions())
    assert again.preflights == ()  # nothing to send: no preflight
    [checked] = check_study(study, study_key(), SimulatedBackend())
    assert checked.trial == events(study, "run.preflight")[0].body["as_trial"]


# ---------------------------------------------------------------------------- bad input


def test_a_server_without_the_locked_model_stops_at_the_preflight_and_gives_nothing_up(
    study: Path,
) -> None:
    with FakeMessagesServer(latency_ms=0, models={"claude-haiku-4-5"}) as server:
        result = cli_run(study, server)
        assert server.count("messages", 404) == 1  # a 404 is not retried
        url = f"{server.base_url}/v1/messages"
    assert result.exit_code == 1
    message = result.output
    for part in (
        "preflight failed",
        f"model '{MODEL}'",
        "the anthropic backend",
        url,
        "HTTP 404",
        f"model: {MODEL}",
        "No trial was sent or given up",
        "[model] id",
    ):
        assert part in message, (part, message)
    assert "Traceback" not in message
    [preflight] = events(study, "run.preflight")
    body = preflight.body
    assert not body["ok"] and body["error_type"] == "configuration"
    assert body["http_status"] == 404 and body["retryable"] is False
    assert events(study, "run.started") == []
    assert_nothing_given_up(study)
    status = CliRunner().invoke(main, ["status", str(study)]).output
    assert "last preflight" in status and "FAILED: HTTP 404" in status


def test_a_preflight_500_stops_the_run_without_giving_anything_up(study: Path) -> None:
    with FakeMessagesServer(latency_ms=0) as server:
        server.inject("500", count=100)
        backend = AnthropicBackend(api_key="test", base_url=server.base_url)
        with pytest.raises(PreflightError) as caught:
            run_study(study, study_key(), backend, RunOptions(max_attempts=5, **FAST))
        # the same 500 three times (min(3, --max-attempts)) is the server's answer to the study
        assert server.count("messages", 500) == 3
        cli = cli_run(study, server, "--max-attempts", "1")  # K = 1: the first 500 decides
        assert server.count("messages", 500) == 4
    message = str(caught.value)
    assert "preflight failed (3 attempts)" in message and "HTTP 500 api_error" in message
    assert f"model '{MODEL}'" in message and "images" in message
    preflights = events(study, "run.preflight")
    assert len(preflights) == 4 and caught.value.seqs == [p.seq for p in preflights[:3]]
    assert {p.body["http_status"] for p in preflights} == {500}
    assert cli.exit_code == 1 and "preflight failed: " in cli.output
    assert events(study, "run.started") == [] and events(study, "trial.failed") == []
    assert_nothing_given_up(study)
    assert verify_ledger_file(study / "ledger.db").ok


def test_a_preflight_recovers_from_one_overload(study: Path) -> None:
    with FakeMessagesServer(latency_ms=0) as server:
        server.inject("529", count=1)
        backend = AnthropicBackend(api_key="test", base_url=server.base_url)
        [done] = check_study(study, study_key(), backend, RunOptions(**FAST))
    assert done.attempts == 2
    assert [p.body["ok"] for p in events(study, "run.preflight")] == [False, True]


def test_a_budget_too_small_for_the_preflight_sends_nothing(study: Path) -> None:
    before = len(events(study))
    result = CliRunner().invoke(
        main,
        [
            "run",
            str(study),
            "--backend",
            "simulated",
            "--budget-usd",
            "0.0001",
            "--price-in",
            "2",
            "--price-out",
            "10",
        ],
    )
    assert result.exit_code == 1
    assert "budget: the preflight request could cost up to" in result.output
    assert "nothing was sent" in result.output
    assert len(events(study)) == before


def test_ctrl_c_with_the_preflight_in_flight_records_it_interrupted(study: Path) -> None:
    control = runner._control.RunControl()
    released = threading.Event()
    with FakeMessagesServer(latency_ms=0) as server:

        def on_arrival(route: str) -> None:
            if route != "messages":
                return  # the model list, asked before the preflight: let it through
            control.press("SIGINT")  # what the handler calls, while the call is in flight
            released.wait(10)

        server.on_arrival = on_arrival
        backend = AnthropicBackend(api_key="test", base_url=server.base_url)
        try:
            with pytest.raises(RunInterruptedError) as caught:
                run_study(study, study_key(), backend, RunOptions(**FAST), control=control)
        finally:
            released.set()
    assert caught.value.exit_code == 130
    assert "during the preflight" in str(caught.value)
    assert "no trial was sent" in str(caught.value)
    [preflight] = events(study, "run.preflight")
    assert preflight.body["error_type"] == "interrupted" and not preflight.body["ok"]
    assert events(study, "run.started") == [] and events(study, "trial.requested") == []
    assert verify_ledger_file(study / "ledger.db").ok


# ---------------------------------------------------------------------------- shapes


def _body(
    *,
    image: bool = True,
    system: str | None = None,
    turns: int = 1,
    model: str = MODEL,
    **params: Any,
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": "question"}]
    if image:
        content.insert(
            0,
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}},
        )
    prior = [
        {"role": "user", "content": [{"type": "text", "text": "example"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A"}]},
    ] * (turns - 1)
    body = {
        "model": model,
        "max_tokens": 16,
        "temperature": 0,
        **params,
        "messages": [*prior, {"role": "user", "content": content}],
    }
    if system is not None:
        body["system"] = system
    return body


def test_one_preflight_per_request_shape_and_model() -> None:
    bodies = {
        "a": _body(),
        "b": _body(),  # same shape as a
        "c": _body(image=False),
        "d": _body(system="be brief"),
        "e": _body(turns=2),
        "f": _body(top_p=0.9),
        "g": _body(model="claude-haiku-4-5"),
        "h": _body(system="another system prompt, same shape as d"),
    }
    trials = [Trial(f"{name}|s|1", name, "s", 1, i) for i, name in enumerate(bodies, 1)]
    planned = plan_preflights(trials, lambda t: bodies[t.arm])
    assert [t.arm for t, _, _ in planned] == ["a", "c", "d", "e", "f", "g"]
    shape = request_shape(bodies["f"])
    assert shape.parameters == ("max_tokens", "temperature", "top_p")
    assert shape.describe() == (
        "images, no system prompt, no prior turns; parameters max_tokens, temperature, top_p"
    )
    assert request_shape(bodies["e"]).prior_turns and request_shape(bodies["d"]).system
