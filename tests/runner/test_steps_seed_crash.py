"""Seed 001's verified rewrites under crashes (slow set): SIGKILL the runner 6 times while the
item steps, samples of a rewrite and its semantic verifier (``docs/prompts.md`` §8.6), run.

The study (``tests/support/stepsx_study.py``'s step tables, without the screening and annotation
steps; 32 items; ``verified_by`` with ``retry = 2``) runs with ``ledger run`` in a subprocess
against the fake Messages server (real SDK, real HTTP) with latency and injected faults. The
verifier rejects about half of the rewrites, so chains of one to three samples interleave across
sessions. Afterwards: every step request has one outcome, no call is requested again after its
final outcome, no sample beyond the allowed three, and the exported archive verifies (its
steps check re-derives which samples were due).
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
from helpers import fixed_key, sigkill_sessions
from stepsx_study import write

from ledger import Ledger
from ledger.cli import main
from runner._lock import lock_study
from runner.simulated._steps import answer
from verify import verify_archive

CLI = [sys.executable, "-c", "from ledger.cli import main; main()"]
KEY = fixed_key("steps.example/owner")

STEPS = """
[steps.rewrite]
on = "item"
models = ["judge_a"]
template = "prompts/rewrite.txt"
parser = "text"
on_unparseable = { retry = 2, then = "exclude" }
verified_by = { step = "semcheck", accept = ["retained"], retry = 2, then = "exclude" }

[steps.semcheck]
on = "item"
models = ["judge_a"]
template = "prompts/semcheck.txt"
parser = "label"
labels = ["retained", "lost"]

[steps.judge]
on = "trial"
models = ["judge_a", "judge_b"]
template = "prompts/judge.txt"
system = ["judge_system"]
parser = "label"
labels = ["correct", "incorrect"]
aggregate = "majority"
on_unparseable = { retry = 1, then = "exclude" }
"""

SEMCHECK = (
    "Does the rewrite keep every clinical fact of the original? Answer retained or "
    "lost.\nOriginal: {context}\nRewrite: {steps.rewrite}\n"
)


def responder(body: dict[str, Any]) -> str:
    """The simulation's step answers; the verifier rejects about half; trials echo the case."""
    content = body["messages"][-1]["content"]
    text = (
        content
        if isinstance(content, str)
        else "".join(b.get("text", "") for b in content if b.get("type") == "text")
    )
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).digest()
    draws = [int.from_bytes(digest[i : i + 4], "big") / 2**32 for i in range(0, 16, 4)]
    if "retained or lost" in text:
        return "lost" if draws[0] < 0.5 else "retained"
    if "Reference:" in text or "Text:" in text:
        return answer(text, draws)
    case = next((line for line in text.split("\n") if line.startswith("Case: ")), "Case: ?")
    return case[len("Case: ") :]


def item_requests(study: Path) -> int:
    if not (study / "ledger.db").exists():
        return 0
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        return sum(1 for e in log.events("step.requested") if e.body["step"] != "judge")


def events(study: Path) -> list[Any]:
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        return list(log.events())


@pytest.mark.slow
def test_six_sigkills_during_verified_samples(tmp_path: Path) -> None:
    home = tmp_path / "home"
    study = write(tmp_path / "study", STEPS, first=None, covariates=False)
    (study / "prompts" / "semcheck.txt").write_text(SEMCHECK, encoding="utf-8")
    rows = [
        {
            "id": f"q{i:02d}",
            "question": "Which condition does the patient have?",
            "context": f"The patient has the condition fever. Day {i}.",
            "answer": "fever",
        }
        for i in range(1, 33)
    ]
    (study / "data" / "items.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
    )
    os.environ["PROMPT_LEDGER_HOME"] = str(home)
    try:
        lock_study(study, KEY)
    finally:
        del os.environ["PROMPT_LEDGER_HOME"]
    key = tmp_path / "owner.key"
    KEY.save(key)
    env = dict(os.environ, ANTHROPIC_API_KEY="test", PROMPT_LEDGER_HOME=str(home))
    rng = random.Random(23)
    with FakeMessagesServer(
        latency_ms=80,
        responder=responder,
        fault_rate=0.05,
        fault_kinds=("429", "500", "drop"),
        retry_after=0.1,
        seed=5,
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
        # each session is killed once it has sent its first item-step call
        kills = sigkill_sessions(
            args, env, 6, lambda: item_requests(study), rng, delay=0.6, log=tmp_path / "runs.log"
        )
    assert kills >= 4, "the item-step phase ended before four kills"
    evs = events(study)
    requests = {e.seq: e.body for e in evs if e.kind == "step.requested"}
    outcomes = Counter(
        e.body["request_seq"] for e in evs if e.kind in ("step.responded", "step.failed")
    )
    assert set(outcomes) == set(requests), "a step request has no outcome"
    assert max(outcomes.values()) == 1, "a step request has two outcomes"
    assert max(Counter((b["call"], b["attempt"]) for b in requests.values()).values()) == 1
    samples = Counter(
        b["call"].rsplit("|", 1)[1]
        for b in requests.values()
        if b["step"] in ("rewrite", "semcheck")
    )
    assert set(samples) <= {"1", "2", "3"} and samples["2"] > 0, samples
    # the steps after the run in this process (click's CliRunner): only the runner is killed
    for step in (("score", study), ("unblind", study), ("analyze", study)):
        done = CliRunner().invoke(main, [*map(str, step), "--key", str(key)], env=env)
        assert done.exit_code == 0, (step, done.output)
    step = ("export", study, tmp_path / "archive")
    done = CliRunner().invoke(main, [*map(str, step), "--key", str(key)], env=env)
    assert done.exit_code == 0, done.output
    report = verify_archive(tmp_path / "archive")
    assert report.ok, [c for c in report.checks if c.status.name == "FAIL"]
