"""The runner killed with SIGKILL, interrupted with Ctrl-C, and the Message Batches flow."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fake_messages import FakeMessagesServer
from forked_cli import ForkedCli
from helpers import make_study, soak, spread, study_key

from ledger import Ledger
from runner._batch import AnthropicBatchBackend
from runner._execute import RunOptions, run_study
from verify import verify_ledger_file


def start_run(study: Path, server: FakeMessagesServer, *extra: str) -> ForkedCli:
    """``ledger run STUDY --base-url ...`` as a process of its own, forked from one that
    imported the runner once (``forked_cli.ForkedCli``); ``communicate()`` returns its
    standard output and error (each written to a file beside the study)."""
    env = dict(os.environ, ANTHROPIC_API_KEY="test")
    argv = ["run", str(study), "--base-url", server.base_url, *extra]
    return ForkedCli(argv, env, study.parent / "run.out", errors=study.parent / "run.err")


def all_events(study: Path) -> list[Any]:
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        return list(log.events())


def count_kind(study: Path, kind: str) -> int:
    if not (study / "ledger.db").exists():
        return 0
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        return sum(1 for _ in log.events(kind))


def check_outcomes(study: Path, trials: int) -> dict[str, int]:
    """Every request has exactly one outcome; every trial exactly one final outcome."""
    events = all_events(study)
    requests = {e.seq: e.body["trial"] for e in events if e.kind == "trial.requested"}
    outcomes = Counter(
        e.body["request_seq"] for e in events if e.kind in ("trial.responded", "trial.failed")
    )
    assert set(outcomes) == set(requests), "a recorded request has no recorded outcome"
    assert max(outcomes.values()) == 1, "a request has two outcomes"
    final = Counter(
        e.body["trial"]
        for e in events
        if e.kind == "trial.responded" or (e.kind == "trial.failed" and e.body["final"])
    )
    assert len(final) == trials and set(final.values()) == {1}
    responded = Counter(e.body["trial"] for e in events if e.kind == "trial.responded")
    assert max(responded.values()) == 1, "a trial was answered twice"
    final_seq: dict[str, int] = {}
    for event in events:
        is_final = event.kind == "trial.failed" and event.body["final"]
        if event.kind == "trial.responded" or is_final:
            final_seq[event.body["trial"]] = event.seq
    for event in events:  # nothing sent after a trial's final outcome
        if event.kind == "trial.requested":
            assert event.seq < final_seq[event.body["trial"]], event.seq
    report = verify_ledger_file(study / "ledger.db")
    assert report.ok, report
    return Counter(e.kind for e in events)


@pytest.mark.slow
def test_chaos_sigkill_runner_many_times(
    tmp_path: Path, ledger_home: Path, study_template: Path
) -> None:
    """SIGKILL ``ledger run`` 10 times (22 with ``PROMPT_LEDGER_FULL_SOAK=1``: ``helpers.soak``)
    at moments spread over 0.05-0.6 s after its session started (``helpers.spread``), with
    latency and injected faults; then every request has one outcome, every trial one final
    outcome, and the ledger verifies. Each session is a process forked from one that imported
    the runner once (``forked_cli.ForkedCli``)."""
    study = make_study(tmp_path / "study", replicates=9, template=study_template)  # 315 trials
    rng = random.Random(20261122)
    target = soak(10, 22)
    kills = 0
    with FakeMessagesServer(
        latency_ms=150,
        fault_rate=0.08,
        fault_kinds=("429", "529", "500", "drop", "malformed"),
        retry_after=0.2,
        seed=7,
        log_path=tmp_path / "answers.jsonl",
    ) as server:
        argv = ["run", str(study), "--base-url", server.base_url]
        argv += ["--concurrency", "4", "--max-attempts", "30"]
        env = dict(os.environ, ANTHROPIC_API_KEY="test")
        log = tmp_path / "runs.log"
        for moment in spread(rng, target, 0.05, 0.6):
            sessions = count_kind(study, "run.started")
            proc = ForkedCli(argv, env, log)
            deadline = time.monotonic() + 60
            while count_kind(study, "run.started") == sessions and time.monotonic() < deadline:
                time.sleep(0.02)  # kill while it runs, not while Python starts
            time.sleep(moment)
            if proc.poll() is not None:
                _out, err = proc.communicate()
                assert proc.returncode == 0, err.decode()
                break  # finished before we could kill it
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
            kills += 1
        proc = ForkedCli(argv, env, log)
        _out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
    assert kills >= target - 2
    kinds = check_outcomes(study, trials=315)
    assert kinds["run.started"] == kills + 1 and kinds["run.stopped"] == 1
    interrupted = sum(
        1
        for e in all_events(study)
        if e.kind == "trial.failed" and e.body["error_type"] == "interrupted"
    )
    assert 0 < interrupted <= kills * 4
    assert kinds["trial.failed"] > interrupted  # injected faults were recorded too


def test_ctrl_c_finishes_in_flight_calls_and_records_the_stop(
    tmp_path: Path, ledger_home: Path, study_template: Path
) -> None:
    study = make_study(tmp_path / "study", replicates=1, template=study_template)
    with FakeMessagesServer(latency_ms=400) as server:
        proc = start_run(study, server, "--concurrency", "4")
        deadline = time.monotonic() + 30
        while count_kind(study, "trial.responded") < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err.decode()  # stopped before the end: not a success
    assert b"stopped: interrupted: SIGINT" in out
    assert b"stopping: no new requests; waiting for " in err
    assert err.decode().strip().splitlines()[-1].startswith("Error: interrupted by SIGINT: ")
    events = all_events(study)
    stopped = [e for e in events if e.kind == "run.stopped"]
    assert len(stopped) == 1 and stopped[0].body["reason"] == "interrupted: SIGINT"
    requests = {e.seq for e in events if e.kind == "trial.requested"}
    outcomes = {e.body["request_seq"] for e in events if e.kind == "trial.responded"}
    assert requests == outcomes  # the calls in flight were finished, not abandoned
    assert 4 <= len(outcomes) < 35


def test_batch_backend_completes_and_resumes_after_a_crash(
    tmp_path: Path, ledger_home: Path, study_template: Path
) -> None:
    study = make_study(tmp_path / "study", replicates=1, template=study_template)
    with FakeMessagesServer(batch_ready_after_polls=10**9) as server:
        server.set_batch_result("t000003", "errored")
        proc = start_run(study, server, "--backend", "anthropic-batch", "--poll-interval", "0.05")
        deadline = time.monotonic() + 60
        while count_kind(study, "batch.submitted") == 0 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        time.sleep(0.2)  # it is polling now
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        assert count_kind(study, "trial.responded") == 0
        assert count_kind(study, "trial.requested") == 35
        server.batch_ready_after_polls = 1
        backend = AnthropicBatchBackend(api_key="test", base_url=server.base_url)
        result = run_study(
            study, study_key(), backend, RunOptions(poll_interval=0.01, backoff_base=0.01)
        )
        assert result.reason == "complete", result
        # the first batch, then t000003 (which always errors) alone until it is given up
        assert server.count("batches.create") == 5
    kinds = check_outcomes(study, trials=35)
    assert kinds["batch.submitted"] == 5 and kinds["trial.responded"] == 34
    events = all_events(study)
    failed = [e for e in events if e.kind == "trial.failed"]
    assert [f.body["final"] for f in failed] == [False] * 4 + [True]
    assert {f.body["trial"] for f in failed} == {
        e.body["trial"] for e in events if e.kind == "trial.requested" and e.body["position"] == 3
    }
    assert all(e.body.get("batch") for e in events if e.kind == "trial.requested")
    responded = [e for e in events if e.kind == "trial.responded"]
    assert len({e.body["trial"] for e in responded}) == 34
    assert {e.body["format"] for e in responded} == {"anthropic-batch-result"}
    assert all(e.body["cost_usd"] > 0 for e in responded)
