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
from runner._backends import AnthropicBackend
from runner._execute import RunOptions, run_lock, run_study
from runner._lock import StudyError
from runner._state import load_state
from runner.spec import load_study
from verify import verify_ledger_file

# The preflight (runner/_preflight.py; tests/runner/test_preflight.py) would meet the faults these
# tests inject for the trials: library runs here go without it. The CLI always preflights.
FAST = {"backoff_base": 0.01, "backoff_max": 0.05, "jitter_seed": 1, "preflight": False}


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
    # the same 500 or malformed body three times at a session's start is a configuration error
    count = 2 if kind in ("500", "malformed") else 3
    server.inject(kind, count=count, retry_after=0 if kind == "429" else None)
    result = run_study(
        study, study_key(), backend(server), RunOptions(concurrency=1, max_trials=2, **FAST)
    )
    failed = events(study, "trial.failed")
    assert len(failed) == count
    assert all(f.body["retryable"] and not f.body["final"] for f in failed)
    if kind in ("429", "529", "500"):
        assert {f.body["http_status"] for f in failed} == {int(kind)}
    if kind == "malformed":
        assert {f.body["error_type"] for f in failed} == {"malformed_response"}
        assert all("response" in f.blobs for f in failed)  # the bad body is kept
    assert result.counters.retries == count and result.counters.responded == 2
    attempts = [e.body["attempt"] for e in events(study, "trial.requested")]
    assert attempts == [*range(1, count + 2), 1]
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
    server.inject("529", count=3)  # overload: never a configuration error
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
    assert f"{status} {kind}" in result.output and "preflight failed" in result.output
    assert "No trial was sent or given up" in result.output
    assert server.count("messages", status) == 1  # stopped at once, no retry
    [preflight] = events(study, "run.preflight")  # the CLI's preflight met it first
    assert not preflight.body["ok"] and not preflight.body["retryable"]
    assert preflight.body["http_status"] == status
    assert events(study, "run.started") == [] and events(study, "trial.requested") == []
    # the same error on a trial (a library run without the preflight) stops the run too
    result_trial = run_study(study, study_key(), backend(server), RunOptions(concurrency=1, **FAST))
    assert result_trial.fatal is not None and f"{status} {kind}" in result_trial.fatal
    assert server.count("messages", status) == 2
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


def test_404_from_a_wrong_base_url_stops_the_run_without_using_attempts(
    study: Path, server: FakeMessagesServer
) -> None:
    wrong = f"{server.base_url}/wrong"
    result = CliRunner().invoke(
        main,
        ["run", str(study), "--base-url", wrong, "--concurrency", "1", "--max-attempts", "2"],
        env={"ANTHROPIC_API_KEY": "test"},
    )
    assert result.exit_code == 1
    assert f"HTTP 404 from {wrong}/v1/messages" in result.output
    assert "check --base-url" in result.output and "No trial was sent" in result.output
    assert "Traceback" not in result.output
    assert events(study, "trial.requested") == []  # the CLI's preflight stopped it
    # a second try with the same wrong URL, without the preflight: the trial's own 404 stops
    # the run at once, and nothing is given up
    again = run_study(
        study,
        study_key(),
        AnthropicBackend(api_key="test", base_url=wrong),
        RunOptions(concurrency=1, max_attempts=2, **FAST),
    )
    assert again.fatal is not None and f"{wrong}/v1/messages" in again.fatal
    assert again.counters.given_up == 0 and again.pending == 35
    failed = events(study, "trial.failed")
    assert len(failed) == 1
    for f in failed:
        assert f.body["error_type"] == "configuration" and f.body["http_status"] == 404
        assert not f.body["final"] and not f.body["retryable"]
    assert [e.body["reason"][:16] for e in events(study, "run.stopped")] == ["error: HTTP 404 "]
    # two Messages posts and, before each, the question which models it serves (GET
    # /wrong/v1/models/ID): all four to the wrong route
    assert server.count("other", 404) == 4 and server.count("messages") == 0
    # the right URL: every trial completes. The first trial (a 404 already) now meets one
    # 500: were the 404 counted, --max-attempts 2 would give it up instead of retrying it.
    server.inject("500", count=1)
    right = run_study(
        study, study_key(), backend(server), RunOptions(concurrency=1, max_attempts=2, **FAST)
    )
    assert right.reason == "complete" and right.final == 35 and right.counters.given_up == 0
    first = failed[0].body["trial"]
    attempts = [
        e.body["attempt"] for e in events(study, "trial.requested") if e.body["trial"] == first
    ]
    assert attempts == [1, 2, 3]  # 404, 500, answered
    responded = [e.body["trial"] for e in events(study, "trial.responded")]
    assert len(responded) == len(set(responded)) == 35
    assert verify_ledger_file(study / "ledger.db").ok


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
    from runner._pricing import PRICES

    saved = PRICES.pop("claude-sonnet-4-6")
    try:
        with pytest.raises(StudyError, match="no price is known"):
            run_study(study, study_key(), backend(server), RunOptions(budget_usd=1.0))
    finally:
        PRICES["claude-sonnet-4-6"] = saved


@pytest.mark.parametrize("name", ["openai-compatible", "simulated", "replay", "anthropic"])
def test_budget_without_a_price_is_refused_before_anything_is_recorded(
    name: str, study: Path, server: FakeMessagesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner._pricing import PRICES

    monkeypatch.delitem(PRICES, "claude-sonnet-4-6")  # anthropic: a model the table lacks
    where = {
        "openai-compatible": ["--base-url", f"{server.base_url}/v1"],
        "anthropic": ["--base-url", server.base_url],
        "replay": ["--replay-from", str(study)],
        "simulated": [],
    }[name]
    args = ["run", str(study), "--backend", name, *where, "--budget-usd", "1"]
    before = events(study)
    result = CliRunner().invoke(main, args, env={"ANTHROPIC_API_KEY": "test"})
    assert result.exit_code == 1, result.output
    assert "--budget-usd: no price is known" in result.output
    assert "give the run its prices with --price-in and --price-out" in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert events(study) == before and server.count() == 0  # nothing recorded, nothing sent
    half = CliRunner().invoke(main, [*args, "--price-in", "3"], env={"ANTHROPIC_API_KEY": "t"})
    assert half.exit_code == 1
    assert "--price-in and --price-out go together" in half.output
    assert events(study) == before


def test_given_prices_cost_the_run_enforce_the_budget_and_are_recorded(study: Path) -> None:
    budget = 0.1  # the simulation has no price table: $2 in and $10 out per million tokens
    result = CliRunner().invoke(
        main,
        [
            "run",
            str(study),
            "--backend",
            "simulated",
            "--concurrency",
            "1",
            "--json",
            "--budget-usd",
            str(budget),
            "--price-in",
            "2",
            "--price-out",
            "10",
        ],
    )
    assert result.exit_code == 0, result.output
    [started] = events(study, "run.started")
    [preflight] = events(study, "run.preflight")  # priced too, and counted against the budget
    assert preflight.body["cost_usd"] > 0
    assert started.body["budget_usd"] == budget
    assert started.body["cost_usd_before"] == preflight.body["cost_usd"]
    assert started.body["price_usd_per_mtok"] == {
        "source": "--price-in/--price-out",
        "input": 2.0,
        "output": 10.0,
        "cache_write_5m": 2.5,
        "cache_write_1h": 4.0,
        "cache_read": pytest.approx(0.2),
        "batch_discount": 0.5,
    }
    responded = events(study, "trial.responded")
    assert 0 < len(responded) < 35
    for event in responded:  # each cost is recomputable from the recorded usage and price
        usage = event.body["usage"]
        expected = (usage["input_tokens"] * 2 + usage["output_tokens"] * 10) / 1e6
        assert event.body["cost_usd"] == pytest.approx(expected)
    spent = sum(e.body["cost_usd"] for e in responded)
    assert spent + preflight.body["cost_usd"] <= budget
    [stopped] = events(study, "run.stopped")
    assert stopped.body["reason"].startswith("budget:")
    assert stopped.body["cost_usd"] == pytest.approx(spent)
    summary = json.loads(result.stdout)
    assert summary["cost_usd"] == pytest.approx(spent)
    # the estimate takes the same prices
    est = CliRunner().invoke(
        main,
        [
            "estimate",
            str(study),
            "--backend",
            "simulated",
            "--price-in",
            "2",
            "--price-out",
            "10",
            "--json",
        ],
    )
    assert est.exit_code == 0, est.output
    data = json.loads(est.stdout)
    assert data["price_source"] == "--price-in/--price-out"
    assert data["cost_max_usd"] == pytest.approx(
        (data["input_tokens"] * 2 + data["output_tokens_max"] * 10) / 1e6
    )
    text = CliRunner().invoke(
        main,
        ["estimate", str(study), "--backend", "simulated", "--price-in", "2", "--price-out", "10"],
    )
    assert "prices: $2 in, $10 out per million tokens, from --price-in/--price-out" in text.output


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
            "trial.requested",
            dict(first.body, trial="A|mixed-1|1", attempt=1, position=99),
            key=study_key(),
            blobs={"request": first.blobs["request"]},
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
        main,
        ["estimate", str(study), "--base-url", server.base_url],
        env={"ANTHROPIC_API_KEY": "test"},
    )
    assert est.exit_code == 0, est.output
    assert "30 of 35 trials pending" in est.output
    assert "anthropic count_tokens" in est.output
    assert server.count("count_tokens") == 30  # once per pending (arm, stimulus) pair


def test_simulated_backend_runs_offline_and_is_labelled(study: Path) -> None:
    from runner._backends import SimulatedBackend

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
    from runner._backends import ReplayBackend, SimulatedBackend

    run_study(study, study_key(), SimulatedBackend(), RunOptions(concurrency=4))
    copy = make_study(tmp_path / "copy", replicates=1, template=study_template)
    result = run_study(copy, study_key(), ReplayBackend(study / "ledger.db"), RunOptions())
    assert result.final == 35
    original = sorted(blob(study, e.blobs["response"]) for e in events(study, "trial.responded"))
    replayed = sorted(blob(copy, e.blobs["response"]) for e in events(copy, "trial.responded"))
    assert original == replayed


def test_overload_lowers_concurrency_then_it_climbs_back(study: Path, ledger_home: Path) -> None:
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
    after_low = limits[limits.index(low) :]
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
    third = run_study(study, study_key(), backend(server), RunOptions(budget_usd=spent, **FAST))
    assert third.reason.startswith("budget:") and len(server.answered) == before


def test_run_help_says_the_budget_is_for_the_study() -> None:
    text = CliRunner().invoke(main, ["run", "--help"]).output
    assert "whole study" in text and "across sessions" in text


def test_the_same_500_on_the_first_attempts_stops_the_run_as_a_configuration_error(
    study: Path, server: FakeMessagesServer
) -> None:
    server.inject("500", count=1000)  # a server that cannot serve this study at all
    result = run_study(
        study, study_key(), backend(server), RunOptions(concurrency=4, max_attempts=5, **FAST)
    )
    assert result.fatal is not None
    assert result.fatal.startswith("configuration error: the first 3 attempts of this session")
    assert "HTTP 500 api_error: Internal server error" in result.fatal
    assert "no trial was given up" in result.fatal
    assert result.counters.given_up == 0 and result.pending == 35
    failed = events(study, "trial.failed")
    assert not any(f.body["final"] for f in failed)
    assert [f.body["error_type"] for f in failed].count("configuration") == 1
    assert events(study, "run.stopped")[-1].body["reason"].startswith("error: configuration")
    # a healthy server: every trial completes exactly once, none given up; the failed attempts
    # of the stopped session did not count against --max-attempts 1
    server.clear_faults()
    done = run_study(study, study_key(), backend(server), RunOptions(max_attempts=1, **FAST))
    assert done.reason == "complete" and done.final == 35 and done.counters.given_up == 0
    responded = [e.body["trial"] for e in events(study, "trial.responded")]
    assert len(responded) == len(set(responded)) == 35
    assert verify_ledger_file(study / "ledger.db").ok


def test_a_different_error_or_a_response_first_keeps_retrying(
    study: Path, server: FakeMessagesServer
) -> None:
    server.inject("500", count=2)
    server.inject("529", count=1)
    server.inject("500", count=1)
    result = run_study(
        study, study_key(), backend(server), RunOptions(concurrency=1, max_trials=2, **FAST)
    )
    assert result.fatal is None and result.counters.responded == 2
    assert {f.body["error_type"] for f in events(study, "trial.failed")} == {
        "api_error",
        "overloaded_error",
    }


def test_a_backend_that_does_not_serve_the_locked_provider_is_refused(study: Path) -> None:
    before = events(study)
    result = CliRunner().invoke(
        main,
        [
            "run",
            str(study),
            "--backend",
            "openai-compatible",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
    )
    assert result.exit_code == 1
    assert (
        "the study is locked for provider 'anthropic' ([model] provider), which the "
        "openai-compatible backend does not serve; use --backend anthropic or anthropic-batch"
    ) in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert events(study) == before  # nothing appended
