"""Audit of issue 4: behaviours the first runner tests did not pin down."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from fake_messages import FakeMessagesServer
from helpers import make_study, study_key

from ledger import Ledger
from runner._backends import AnthropicBackend, ReplayBackend, SimulatedBackend
from runner._batch import AnthropicBatchBackend
from runner._execute import RunOptions, run_study
from tests.runner.test_runner_crash import count_kind, start_run

# The preflight (runner/_preflight.py; tests/runner/test_preflight.py) would meet the faults these
# tests inject for the trials: library runs here go without it. The CLI always preflights.
FAST = {"backoff_base": 0.01, "backoff_max": 0.05, "jitter_seed": 1, "preflight": False}


@pytest.fixture
def study(tmp_path: Path, ledger_home: Path, study_template: Path) -> Path:
    return make_study(tmp_path / "study", replicates=1, template=study_template)


def events(study: Path, kind: str | None = None) -> list[Any]:
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        return list(log.events(kind))


def test_overload_halves_concurrency_and_it_climbs_back(study: Path) -> None:
    trace: list[int] = []
    with FakeMessagesServer(latency_ms=20) as server:
        server.inject("529", count=3)
        result = run_study(
            study,
            study_key(),
            AnthropicBackend(api_key="test", base_url=server.base_url),
            RunOptions(concurrency=8, **FAST),
            lambda c, f, t: trace.append(c.concurrency),
        )
    assert result.reason == "complete"
    assert min(trace) <= 2 and trace[-1] == 8  # lowered while overloaded, raised again after


def test_unreachable_api_stops_the_run_and_gives_nothing_up(study: Path) -> None:
    backend = AnthropicBackend(api_key="test", base_url="http://127.0.0.1:9")
    result = run_study(study, study_key(), backend, RunOptions(max_attempts=2, **FAST))
    assert result.fatal and "did not answer" in result.fatal
    assert result.counters.given_up == 0 and result.pending == 35
    assert not any(e.body["final"] for e in events(study, "trial.failed"))


def test_one_failing_trial_is_still_given_up(study: Path) -> None:
    with FakeMessagesServer(latency_ms=0) as server:
        server.inject("drop", count=1)
        server.inject("500", count=1)  # an HTTP answer between the two resets the streak
        server.inject("drop", count=1)
        result = run_study(
            study,
            study_key(),
            AnthropicBackend(api_key="test", base_url=server.base_url),
            RunOptions(concurrency=1, max_trials=1, max_attempts=3, **FAST),
        )
    assert result.counters.given_up == 1 and result.fatal is None


def test_batch_budget_is_never_exceeded(study: Path) -> None:
    with FakeMessagesServer(batch_ready_after_polls=1) as server:
        backend = AnthropicBatchBackend(api_key="test", base_url=server.base_url)
        result = run_study(
            study,
            study_key(),
            backend,
            RunOptions(budget_usd=0.02, poll_interval=0.01, preflight=False),
        )
    spent = sum(e.body["cost_usd"] for e in events(study, "trial.responded"))
    assert result.reason.startswith("budget:")
    assert 0 < spent <= 0.02 and result.counters.responded < 35


def test_batch_ctrl_c_records_run_stopped(study: Path) -> None:
    with FakeMessagesServer(batch_ready_after_polls=10**9) as server:
        proc = start_run(study, server, "--backend", "anthropic-batch", "--poll-interval", "0.05")
        deadline = time.monotonic() + 60
        while count_kind(study, "batch.submitted") == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err.decode()  # stopped with trials pending
    assert b"stopping: no new batches; the batch in progress keeps running" in err
    stopped = events(study, "run.stopped")
    assert len(stopped) == 1 and stopped[0].body["reason"] == "interrupted: SIGINT"


def test_replay_from_an_exported_archive_is_labelled_simulated(
    study: Path, tmp_path: Path, study_template: Path
) -> None:
    run_study(study, study_key(), SimulatedBackend(), RunOptions(concurrency=4))
    root = tmp_path / "archive"  # the archive layout: ledger/events.jsonl and blobs/<sha256>
    (root / "ledger").mkdir(parents=True)
    (root / "blobs").mkdir()
    with (
        Ledger.open(study / "ledger.db", readonly=True) as log,
        (root / "ledger" / "events.jsonl").open("w") as out,
    ):
        for e in log.events():
            out.write(json.dumps(e.to_json()) + "\n")  # envelope, signature (and leaf hash)
            for digest in e.blobs.values():
                (root / "blobs" / digest).write_bytes(log.blob(digest))
    copy = make_study(tmp_path / "copy", replicates=1, template=study_template)
    replay = ReplayBackend(root)
    assert replay.simulated
    result = run_study(copy, study_key(), replay, RunOptions())
    assert result.final == 35
    assert all(e.body["simulated"] for e in events(copy, "trial.responded"))
    assert events(copy, "run.started")[0].body["simulated"] is True
