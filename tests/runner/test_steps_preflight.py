"""The preflight of a study with model steps (issue 31, ``docs/trials.md`` §3, §5): every request
shape the run will send, trials' and step calls' (screeners, rewriters, judges, each with its
own model), is preflighted before the first step call. A wrong model id, the target's or a
judge's, stops the run at the preflight with zero step calls (and zero trials) recorded; a
request whose inputs do not exist yet is sent with those slots empty and says so; the verifier
checks step-call preflights as it checks trials'.

The study is ``tests/support/steps_study.py`` (target ``claude-sonnet-4-6``, judges
``claude-haiku-4-5`` and ``claude-opus-4-1``; the item template reads the rewriting step), run
against the fake Messages server on 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fake_messages import FakeMessagesServer
from helpers import fixed_key
from steps_study import write_study

from ledger import Ledger
from ledger.cli import main
from runner._backends import AnthropicBackend
from runner._errors import PreflightError
from runner._execute import RunOptions, check_study, run_study
from runner._lock import lock_study
from verify import verify_ledger_file

KEY = fixed_key("steps.example/owner")
TARGET, JUDGE_A, JUDGE_B = "claude-sonnet-4-6", "claude-haiku-4-5", "claude-opus-4-1"


@pytest.fixture
def study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    root = write_study(tmp_path / "study")
    lock_study(root, KEY)
    yield root


def kinds(root: Path) -> list[str]:
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        return [e.kind for e in log.events()]


def preflights(root: Path) -> list[Any]:
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        return list(log.events("run.preflight"))


def refused(root: Path, served: set[str]) -> tuple[PreflightError, FakeMessagesServer]:
    """Run against a server that serves only ``served``; the preflight must refuse."""
    with FakeMessagesServer(latency_ms=0, models=served) as server:
        backend = AnthropicBackend(api_key="test", base_url=server.base_url)
        with pytest.raises(PreflightError) as caught:
            run_study(root, KEY, backend, RunOptions(concurrency=2, backoff_base=0.01))
    return caught.value, server


@pytest.mark.parametrize(
    ("served", "wrong", "built_as"),
    [
        ({JUDGE_A, JUDGE_B}, TARGET, "built as trial "),
        ({TARGET, JUDGE_A}, JUDGE_B, "built as step call step:judge|judge_b|"),
    ],
    ids=["target", "judge"],
)
def test_a_wrong_model_id_stops_the_step_study_before_any_step_call(
    study: Path, served: set[str], wrong: str, built_as: str
) -> None:
    error, server = refused(study, served)
    message = str(error)
    for part in (
        "preflight failed",
        f"model {wrong!r}",
        "HTTP 404",
        built_as,
        "No trial was sent or given up, nor any step call",
        "[model] id",
    ):
        assert part in message, (part, message)
    recorded = kinds(study)
    assert "step.requested" not in recorded and "trial.requested" not in recorded
    assert "run.started" not in recorded
    assert server.count("messages", 404) == 1  # the one refused preflight; nothing else 404'd
    failed = preflights(study)[-1]
    assert not failed.body["ok"] and failed.body["model"] == wrong
    assert failed.body["error_type"] == "configuration"
    # ledger status shows the preflight and that no step call was made
    status = CliRunner().invoke(main, ["status", str(study)]).output
    assert "last preflight" in status and "FAILED: HTTP 404" in status
    data = json.loads(CliRunner().invoke(main, ["status", str(study), "--json"]).stdout)
    assert data["events"]["run.preflight"] == len(preflights(study))
    for step in data["steps"]:  # every step call is still to make: none was sent
        assert step["parsed"] == step["given_up"] == step["awaiting"] == step["cost_usd"] == 0
        assert step["pending"] == step["calls"]
    assert verify_ledger_file(study / "ledger.db").ok


def test_the_check_preflights_every_model_and_says_which_slots_were_empty(study: Path) -> None:
    with FakeMessagesServer(latency_ms=0) as server:
        backend = AnthropicBackend(api_key="test", base_url=server.base_url)
        checked = check_study(study, KEY, backend)
        assert server.count("messages", 200) == len(checked)
    assert {p.model for p in checked} == {TARGET, JUDGE_A, JUDGE_B}
    events = preflights(study)
    assert [e.seq for e in events] == [p.seq for p in checked]
    trials = [e.body for e in events if "as_trial" in e.body]
    calls = [e.body for e in events if "as_call" in e.body]
    assert trials and all(b["model"] == TARGET for b in trials)
    # the item template reads the rewriting step, not decided before the run: sent empty
    assert all(b["empty_slots"] == ["steps.rewrite"] for b in trials)
    by_step = {(b["step"], b["model"]) for b in calls}
    assert {("screen", JUDGE_A), ("judge", JUDGE_B)} <= by_step
    judge = next(b for b in calls if b["step"] == "judge")
    assert (
        judge["as_call"].startswith("step:judge|judge_") and "response" in judge["empty_slots"]
    )  # a judge reads a response that does not exist yet
    screen = next(b for b in calls if b["step"] == "screen")
    assert "empty_slots" not in screen  # built exactly as the call will be sent
    assert "position" not in screen and "as_trial" not in screen
    assert kinds(study).count("step.requested") == 0
    assert verify_ledger_file(study / "ledger.db").ok
