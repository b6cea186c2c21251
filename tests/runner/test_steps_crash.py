"""Issue 17 crash test (slow set): SIGKILL the runner 8 times during a judge phase (20 times
with ``PROMPT_LEDGER_FULL_SOAK=1``; ``helpers.soak``).

The steps study (``tests/support/steps_study.py``, 4 replicates: 64 trials, 128 judge calls) runs
with ``ledger run`` in a subprocess against the fake Messages server (real SDK, real HTTP), with
latency and injected faults. Each session is killed at a random moment once it has sent a
judge call (the moments spread over the half second after it: ``helpers.spread``). Afterwards:
every step request has exactly one outcome, no call was made again after its final outcome
(nothing judged twice), every answered trial is judged, the ledger verifies, and scoring
seals.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fake_messages import FakeMessagesServer
from helpers import fixed_key, sigkill_sessions, soak
from steps_study import spec_text, write_study

from ledger import Ledger
from ledger.cli import main
from runner._lock import lock_study
from runner.simulated._steps import answer
from verify import verify_ledger_file

CLI = [sys.executable, "-c", "from ledger.cli import main; main()"]
KEY = fixed_key("steps.example/owner")


def responder(body: dict[str, Any]) -> str:
    """Step prompts as the simulation answers them; a trial answers with its case line."""
    content = body["messages"][-1]["content"]
    text = (
        content
        if isinstance(content, str)
        else "".join(b.get("text", "") for b in content if b.get("type") == "text")
    )
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).digest()
    draws = [int.from_bytes(digest[i : i + 4], "big") / 2**32 for i in range(0, 16, 4)]
    if "Reference:" in text or "Text:" in text or "include or exclude" in text:
        return answer(text, draws)
    case = next((line for line in text.split("\n") if line.startswith("Case: ")), "Case: ?")
    return case[len("Case: ") :]


def events(study: Path) -> list[Any]:
    if not (study / "ledger.db").exists():
        return []
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        return list(log.events())


def judge_requests(study: Path) -> int:
    if not (study / "ledger.db").exists():
        return 0
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        return sum(1 for e in log.events("step.requested") if e.body["step"] == "judge")


@pytest.mark.slow
def test_sigkills_during_the_judge_phase(tmp_path: Path) -> None:
    home = tmp_path / "home"
    study = write_study(tmp_path / "study")
    spec = spec_text().replace("replicates = 1", "replicates = 4")
    (study / "study.toml").write_text(spec, encoding="utf-8")
    os.environ["PROMPT_LEDGER_HOME"] = str(home)
    try:
        lock_study(study, KEY)
    finally:
        del os.environ["PROMPT_LEDGER_HOME"]
    key = tmp_path / "owner.key"
    KEY.save(key)
    env = dict(os.environ, ANTHROPIC_API_KEY="test", PROMPT_LEDGER_HOME=str(home))
    rng = random.Random(17)
    target = soak(8, 20)
    with FakeMessagesServer(
        latency_ms=120,
        responder=responder,
        fault_rate=0.05,
        fault_kinds=("429", "500", "drop"),
        retry_after=0.1,
        seed=3,
    ) as server:
        args = [
            *CLI,
            "run",
            str(study),
            "--base-url",
            server.base_url,
            "--key",
            str(key),
            "--concurrency",
            "2",
            "--max-attempts",
            "30",
        ]
        # each session is killed once its judge phase has begun
        kills = sigkill_sessions(
            args, env, target, lambda: judge_requests(study), rng, log=tmp_path / "runs.log"
        )
    assert kills == target
    evs = events(study)
    requests = {e.seq: e.body for e in evs if e.kind == "step.requested"}
    outcomes = Counter(
        e.body["request_seq"] for e in evs if e.kind in ("step.responded", "step.failed")
    )
    assert set(outcomes) == set(requests), "a step request has no outcome"
    assert max(outcomes.values()) == 1, "a step request has two outcomes"
    attempts = Counter((b["call"], b["attempt"]) for b in requests.values())
    assert max(attempts.values()) == 1
    # nothing judged twice: after a call's parsed response, no request of it
    parsed_at: dict[str, int] = {}
    labels = {"correct", "incorrect", "include", "exclude"}
    for e in evs:
        if e.kind == "step.responded":
            call = requests[e.body["request_seq"]]["call"]
            assert call not in parsed_at, f"{call} answered after its final response"
            with Ledger.open(study / "ledger.db", readonly=True) as log:
                text = json.loads(log.blob(e.blobs["response"]))["content"][0]["text"]
            words = set(text.lower().replace(".", " ").split())
            step = call.split("|")[0]
            if (step == "step:rewrite" and text.strip()) or (
                step != "step:rewrite" and len(words & labels) == 1
            ):
                parsed_at[call] = e.seq
        elif e.kind == "step.requested":
            assert e.body["call"] not in parsed_at, f"{e.body['call']} requested again"
    interrupted = [
        e for e in evs if e.kind == "step.failed" and e.body["error_type"] == "interrupted"
    ]
    assert interrupted, "some judge calls were cut by a kill and closed as interrupted"
    kinds = Counter(e.kind for e in evs)
    assert kinds["run.started"] == kills + 1 and kinds["run.stopped"] == 1
    answered = {e.body["request_seq"] for e in evs if e.kind == "trial.responded"}
    trials = {e.seq: e.body["trial"] for e in evs if e.kind == "trial.requested"}
    judged = {b["trial"] for b in requests.values() if b["step"] == "judge"}
    assert judged == {trials[s] for s in answered}
    report = verify_ledger_file(study / "ledger.db")
    assert report.ok, report
    # scoring in this process (click's CliRunner): only the runner is killed
    done = CliRunner().invoke(main, ["score", str(study), "--key", str(key)], env=env)
    assert done.exit_code == 0, done.output
    assert "scoring.sealed" in done.output
