"""``ledger run`` against the fake Messages server through the real anthropic SDK."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fake_messages import FakeMessagesServer
from helpers import make_study, study_key

from ledger import Ledger
from ledger.cli import main
from runner.backends import AnthropicBackend
from runner.execute import RunOptions, run_lock, run_study
from runner.lock import StudyError
from runner.spec import load_study
from runner.state import load_state
from verify import verify_ledger_file

FAST = {"backoff_base": 0.01, "backoff_max": 0.05, "jitter_seed": 1}


@pytest.fixture
def study(tmp_path: Path, ledger_home: Path, study_template: Path) -> Path:
    return make_study(tmp_path / "study", replicates=1, template=study_template)


@pytest.fixture
def server() -> Any:
    with FakeMessagesServer(latency_ms=0) as fake:
        yield fake


def backend(server: FakeMessagesServer, **kw: Any) -> AnthropicBackend:
    return AnthropicBackend(api_key="test", base_url=server.base_url, **kw)


def events(study: Path, kind: str | None = None) -> list[Any]:
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        return list(log.events(kind))


def blob(study: Path, digest: str) -> bytes:
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        return log.blob(digest)


def test_complete_run_records_exact_locked_requests(
    study: Path, server: FakeMessagesServer
) -> None:
    result = run_study(study, study_key(), backend(server), RunOptions(concurrency=4, **FAST))
    assert result.reason == "complete" and result.pending == 0 and result.final == 35
    spec = load_study(study)
    requested = events(study, "trial.requested")
    responded = events(study, "trial.responded")
    assert len(requested) == len(responded) == 35
    schedule_positions = [e.body["position"] for e in requested]
    assert sorted(schedule_positions) == list(range(1, 36))
    for event in requested:
        raw = blob(study, event.blobs["request"])
        assert hashlib.sha256(raw).hexdigest() == event.body["request_sha256"]
        body = json.loads(raw)
        assert set(body) == {"model", "max_tokens", "temperature", "messages"}  # no system prompt
        assert len(body["messages"]) == 1  # no history
        image, text = body["messages"][0]["content"]
        locked_image = spec.stimuli[event.body["stimulus"]].read_bytes()
        assert hashlib.sha256(base64.b64decode(image["source"]["data"])).digest() == (
            hashlib.sha256(locked_image).digest()
        )
        assert hashlib.sha256(text["text"].encode()).hexdigest() == spec.arm_sha256(
            event.body["arm"]
        )
    # the server saw exactly the recorded bodies
    assert sorted(a.sha256 for a in server.answered) == sorted(
        e.body["request_sha256"] for e in requested
    )
    for event in responded:
        raw = blob(study, event.blobs["response"])
        assert json.loads(raw)["type"] == "message"
        assert event.body["request_id"].startswith("req_")
        assert event.body["usage"]["input_tokens"] > 0
        assert event.body["cost_usd"] > 0
    assert verify_ledger_file(study / "ledger.db").ok
    kinds = [e.kind for e in events(study)]
    assert kinds.count("run.started") == kinds.count("run.stopped") == 1
    # a second session has nothing to do and sends nothing
    before = len(server.answered)
    again = run_study(study, study_key(), backend(server), RunOptions(**FAST))
    assert again.counters.responded == 0 and len(server.answered) == before


@pytest.mark.parametrize("kind", ["429", "529", "500", "drop", "malformed"])
def test_retryable_faults_are_recorded_then_retried(
    study: Path, server: FakeMessagesServer, kind: str
) -> None:
    server.inject(kind, count=3, retry_after=0 if kind == "429" else None)
    result = run_study(
        study, study_key(), backend(server), RunOptions(concurrency=1, max_trials=2, **FAST)
    )
    failed = events(study, "trial.failed")
    assert len(failed) == 3
    assert all(f.body["retryable"] and not f.body["final"] for f in failed)
    if kind in ("429", "529", "500"):
        assert {f.body["http_status"] for f in failed} == {int(kind)}
    if kind == "malformed":
        assert {f.body["error_type"] for f in failed} == {"malformed_response"}
        assert all("response" in f.blobs for f in failed)  # the bad body is kept
    assert result.counters.retries == 3 and result.counters.responded == 2
    assert [e.body["attempt"] for e in events(study, "trial.requested")] == [1, 2, 3, 4, 1]
    if kind in ("429", "529"):
        assert result.counters.concurrency == 1


def test_retry_after_is_honoured(study: Path, server: FakeMessagesServer) -> None:
    server.inject("429", count=1, retry_after=1)
    run_study(study, study_key(), backend(server), RunOptions(concurrency=1, max_trials=1, **FAST))
    failed, responded = events(study, "trial.failed")[0], events(study, "trial.responded")[0]
    from datetime import datetime

    gap = datetime.fromisoformat(responded.time) - datetime.fromisoformat(failed.time)
    assert gap.total_seconds() >= 1.0


def test_timeout_is_retried(study: Path, server: FakeMessagesServer) -> None:
    server.inject("slow", count=1, seconds=2)
    result = run_study(
        study, study_key(), backend(server, timeout=0.3), RunOptions(max_trials=1, **FAST)
    )
    assert [f.body["error_type"] for f in events(study, "trial.failed")] == ["timeout"]
    assert result.counters.responded == 1


def test_trial_is_given_up_after_max_attempts(study: Path, server: FakeMessagesServer) -> None:
    server.inject("500", count=3)
    result = run_study(
        study,
        study_key(),
        backend(server),
        RunOptions(concurrency=1, max_trials=1, max_attempts=3, **FAST),
    )
    failed = events(study, "trial.failed")
    assert [f.body["final"] for f in failed] == [False, False, True]
    assert result.counters.given_up == 1 and result.final == 1
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        state = load_state(load_study(study), log)
    assert len(state.pending()) == 34  # the given-up trial is final and is not run again


@pytest.mark.parametrize(
    ("status", "kind"), [(401, "authentication_error"), (403, "permission_error")]
)
def test_401_and_403_stop_the_run_with_a_clear_message(
    status: int, kind: str, study: Path, server: FakeMessagesServer
) -> None:
    server.inject(str(status), count=100)
    result = CliRunner().invoke(
        main,
        ["run", str(study), "--base-url", server.base_url, "--concurrency", "1"],
        env={"ANTHROPIC_API_KEY": "test"},
    )
    assert result.exit_code == 1
    assert f"{status} {kind}" in result.output and "nothing was lost" in result.output
    assert server.count("messages", status) == 1  # stopped at once, no retry
    failed = events(study, "trial.failed")
    assert len(failed) == 1 and not failed[0].body["final"] and not failed[0].body["retryable"]
    assert failed[0].body["http_status"] == status
    stopped = events(study, "run.stopped")[-1]
    assert stopped.body["reason"].startswith(f"error: HTTP {status}")
    assert stopped.body["pending"] == 35 and events(study, "trial.responded") == []
    # once the key or permission is right the same study resumes and finishes
    server.clear_faults()
    again = run_study(study, study_key(), backend(server), RunOptions(concurrency=4, **FAST))
    assert again.reason == "complete" and again.final == 35


def test_400_stops_the_run(study: Path, server: FakeMessagesServer) -> None:
    server.inject("400", count=1)
    result = run_study(study, study_key(), backend(server), RunOptions(concurrency=1, **FAST))
    assert result.fatal and "invalid_request_error" in result.fatal
    assert result.counters.responded == 0 and result.pending == 35


def test_budget_stops_before_it_is_exceeded(study: Path, server: FakeMessagesServer) -> None:
    budget = 0.05
    result = run_study(
        study, study_key(), backend(server), RunOptions(concurrency=4, budget_usd=budget, **FAST)
    )
    assert result.reason.startswith("budget:")
    spent = sum(e.body["cost_usd"] for e in events(study, "trial.responded"))
    assert 0 < spent <= budget
    assert result.counters.responded < 35
    assert events(study, "run.stopped")[-1].body["cost_usd"] == pytest.approx(spent)


def test_budget_refused_for_a_model_without_price(study: Path, server: FakeMessagesServer) -> None:
    spec = study / "study.toml"
    assert "claude-sonnet-4-6" in spec.read_text()
    from runner.pricing import PRICES

    saved = PRICES.pop("claude-sonnet-4-6")
    try:
        with pytest.raises(StudyError, match="no price is known"):
            run_study(study, study_key(), backend(server), RunOptions(budget_usd=1.0))
    finally:
        PRICES["claude-sonnet-4-6"] = saved


def test_second_runner_is_refused(study: Path, server: FakeMessagesServer) -> None:
    with run_lock(study), pytest.raises(StudyError, match="already running"):
        run_study(study, study_key(), backend(server), RunOptions())


def test_dangling_request_is_closed_and_reattempted(
    study: Path, server: FakeMessagesServer
) -> None:
    run_study(study, study_key(), backend(server), RunOptions(max_trials=1, **FAST))
    with Ledger.open(study / "ledger.db") as log:  # as if killed after recording the request
        first = next(log.events("trial.requested"))
        seq = log.append(
            "trial.requested", dict(first.body, trial="A|mixed-1|1", attempt=1, position=99),
            key=study_key(), blobs={"request": first.blobs["request"]},
        ).seq
    run_study(study, study_key(), backend(server), RunOptions(**FAST))
    failed = [e for e in events(study, "trial.failed") if e.body["request_seq"] == seq]
    assert len(failed) == 1 and failed[0].body["error_type"] == "interrupted"
    retried = [e for e in events(study, "trial.requested") if e.body["trial"] == "A|mixed-1|1"]
    assert [e.body["attempt"] for e in retried] == [1, 2]
    responded = [e for e in events(study, "trial.responded") if e.body["trial"] == "A|mixed-1|1"]
    assert len(responded) == 1


def test_changed_locked_file_is_refused(study: Path, server: FakeMessagesServer) -> None:
    prompt = study / "prompts" / "decoding_rule.txt"
    prompt.write_text(prompt.read_text() + "extra\n")
    with pytest.raises(StudyError, match=r"prompts/decoding_rule\.txt"):
        run_study(study, study_key(), backend(server), RunOptions())
    assert events(study, "run.started") == []


def test_status_and_estimate_commands(study: Path, server: FakeMessagesServer) -> None:
    run_study(study, study_key(), backend(server), RunOptions(max_trials=5, **FAST))
    status = CliRunner().invoke(main, ["status", str(study), "--json"])
    assert status.exit_code == 0, status.output
    data = json.loads(status.output)
    assert sum(a["responded"] for a in data["arms"]) == 5
    assert sum(a["pending"] for a in data["arms"]) == 30
    est = CliRunner().invoke(
        main, ["estimate", str(study), "--base-url", server.base_url],
        env={"ANTHROPIC_API_KEY": "test"},
    )
    assert est.exit_code == 0, est.output
    assert "30 of 35 trials pending" in est.output
    assert "anthropic count_tokens" in est.output
    assert server.count("count_tokens") == 30  # once per pending (arm, stimulus) pair


def test_simulated_backend_runs_offline_and_is_labelled(study: Path) -> None:
    from runner.backends import SimulatedBackend

    result = run_study(study, study_key(), SimulatedBackend(), RunOptions(concurrency=8))
    assert result.reason == "complete" and result.final == 35
    started = events(study, "run.started")[0]
    assert started.body["backend"] == "simulated" and started.body["simulated"] is True
    for kind in ("trial.requested", "trial.responded"):
        assert all(e.body["simulated"] is True for e in events(study, kind))
    responded = events(study, "trial.responded")
    assert all(e.body["cost_usd"] is None for e in responded)
    assert all(e.body["model"].startswith("simulated/") for e in responded)
    texts = sorted(blob(study, e.blobs["response"]) for e in responded)
    assert len(set(texts)) > 1


def test_replay_backend_reissues_recorded_responses(
    study: Path, tmp_path: Path, study_template: Path
) -> None:
    from runner.backends import ReplayBackend, SimulatedBackend

    run_study(study, study_key(), SimulatedBackend(), RunOptions(concurrency=4))
    copy = make_study(tmp_path / "copy", replicates=1, template=study_template)
    result = run_study(copy, study_key(), ReplayBackend(study / "ledger.db"), RunOptions())
    assert result.final == 35
    original = sorted(blob(study, e.blobs["response"]) for e in events(study, "trial.responded"))
    replayed = sorted(blob(copy, e.blobs["response"]) for e in events(copy, "trial.responded"))
    assert original == replayed


def test_overload_lowers_concurrency_then_it_climbs_back(
    study: Path, ledger_home: Path
) -> None:
    # starts at 8 (1 could not show a drop); the first 8 requests are answered 529, then the
    # API is healthy. The limit is read from the progress counters after every outcome, and the
    # server samples how many requests it holds whenever it answers one.
    limits: list[int] = []
    held: list[int] = []

    def progress(counters: Any, final: int, total: int) -> None:
        limits.append(counters.concurrency)

    arrivals = itertools.count()
    first_eight = threading.Barrier(8, timeout=30)

    def hold_first_eight(route: str) -> None:  # all 8 in flight at once, by construction
        if route == "messages" and next(arrivals) < 8:
            first_eight.wait()

    with FakeMessagesServer(latency_ms=100) as fake:

        def responder(body: dict[str, Any]) -> str:
            held.append(fake._in_flight)
            return "{}"

        fake.responder = responder
        fake.on_arrival = hold_first_eight
        fake.inject("529", count=8)
        result = run_study(
            study, study_key(), backend(fake), RunOptions(concurrency=8, **FAST), progress
        )
        peak = fake.max_in_flight
    assert result.reason == "complete" and result.counters.responded == 35
    assert len(events(study, "trial.failed")) == 8
    assert limits[0] == 8 and peak == 8  # really ran 8 at once before the overload
    low = min(limits)
    assert low < 8, limits  # the 529s lowered the limit ...
    after_low = limits[limits.index(low):]
    assert max(after_low) > low, limits  # ... and successes raised it again
    assert limits[-1] >= 4, limits
    # in flight at the server followed the limit, retries included: the first answers after
    # the overload came one at a time (the 8 failed trials did not all resend at once), and
    # later ones in parallel again
    assert held[0] == 1 and max(held[:3]) <= 2, held
    assert max(held[len(held) // 2 :]) >= 3, held


def test_estimate_against_an_unreachable_api_names_the_url(study: Path) -> None:
    url = "http://127.0.0.1:9"  # discard port: nothing listens, the connection is refused
    est = CliRunner().invoke(
        main, ["estimate", str(study), "--base-url", url], env={"ANTHROPIC_API_KEY": "test"}
    )
    assert est.exit_code == 1
    assert f"cannot reach the Messages API at {url}" in est.output
    assert "--base-url" in est.output and "ANTHROPIC_BASE_URL" in est.output


def test_budget_covers_the_whole_study_across_sessions(
    study: Path, server: FakeMessagesServer
) -> None:
    first = run_study(
        study, study_key(), backend(server), RunOptions(concurrency=2, max_trials=15, **FAST)
    )
    assert first.counters.responded == 15
    earlier = sum(e.body["cost_usd"] for e in events(study, "trial.responded"))
    budget = earlier + 0.045  # room for one request at its worst ($0.0376), not the whole study
    # a later session with the same --budget-usd may spend only what is left of it
    second = run_study(
        study, study_key(), backend(server), RunOptions(concurrency=1, budget_usd=budget, **FAST)
    )
    spent = sum(e.body["cost_usd"] for e in events(study, "trial.responded"))
    assert earlier < spent <= budget  # the study's total, not each session's, stays within it
    assert second.reason.startswith("budget:")
    assert f"${earlier:.4f} spent by earlier sessions" in second.reason, second.reason
    assert second.counters.cost_usd == pytest.approx(spent - earlier)
    started = events(study, "run.started")[-1]
    assert started.body["cost_usd_before"] == pytest.approx(earlier)
    # with the budget already used up, a session sends nothing
    before = len(server.answered)
    third = run_study(
        study, study_key(), backend(server), RunOptions(budget_usd=spent, **FAST)
    )
    assert third.reason.startswith("budget:") and len(server.answered) == before


def test_run_help_says_the_budget_is_for_the_study() -> None:
    text = CliRunner().invoke(main, ["run", "--help"]).output
    assert "whole study" in text and "across sessions" in text
