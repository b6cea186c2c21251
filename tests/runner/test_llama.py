"""``ledger run`` against a real OpenAI-compatible server: llama-cpp-python's, with SmolLM2-135M.

Marked ``llama``: left out of the default run (pyproject's addopts) and run by ``pytest -m
llama`` (.ci/run installs the ``llama`` extra first). Each test skips, saying why, when
llama-cpp-python's server or the model is not installed (``tests/support/llama_server.py``). One
server serves the whole session (it starts in a few seconds; building it is what takes minutes).
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from llama_server import MODEL_ALIAS, LlamaServer, missing

from ledger import Ledger, SigningKey
from ledger.cli import main

pytestmark = pytest.mark.llama


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """llama-cpp-python's server on a free port for the session, killed at its end."""
    reason = missing()
    if reason is not None:
        pytest.skip(reason)
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with LlamaServer(log) as server:
        yield server


def ledger(*args: str | Path, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def events(study: Path, kind: str | None = None) -> list[Any]:
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        return list(log.events(kind))


def status(study: Path) -> dict[str, Any]:
    result = ledger("status", study, "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_server_serves_the_model(llama: LlamaServer) -> None:
    assert llama.models() == [MODEL_ALIAS]


def test_tumbling_e_stops_at_the_preflight_with_no_trial_given_up(
    llama: LlamaServer, tmp_path: Path, ledger_home: Path
) -> None:
    """The template study sends images; SmolLM2's server cannot take them (HTTP 500)."""
    study = tmp_path / "tumbling-e"
    made = ledger("new", study, "--template", "prompt-tumbling-e")
    assert made.exit_code == 0, made.output
    key = ledger_home / "keys" / "tumbling-e-owner.key"
    spec = study / "study.toml"
    text = spec.read_text("utf-8")
    text = text.replace('provider = "anthropic"', 'provider = "openai-compatible"')
    text = text.replace('id = "claude-sonnet-4-6"', f'id = "{MODEL_ALIAS}"')
    spec.write_text(text, "utf-8")
    locked = ledger("lock", study, "--key", key)
    assert locked.exit_code == 0, locked.output
    before = status(study)
    assert before["model_mismatches"]["count"] == 0 and before["last_preflight"] is None
    # the locked provider is served by the openai-compatible backend only
    refused = ledger(
        "run",
        study,
        "--backend",
        "anthropic",
        "--key",
        key,
        env={"ANTHROPIC_API_KEY": "never-used"},
    )
    assert refused.exit_code == 1 and "provider 'openai-compatible'" in refused.output
    run = ledger(
        "run",
        study,
        "--backend",
        "openai-compatible",
        "--base-url",
        llama.base_url,
        "--key",
        key,
    )
    print(f"\nledger run against llama_cpp.server:\n{run.output}")
    assert run.exit_code == 1, run.output
    message = run.output
    for part in (
        "preflight failed",
        f"model '{MODEL_ALIAS}'",
        "openai-compatible backend",
        f"{llama.base_url}/chat/completions",
        "HTTP 500",
        "images",
        "No trial was sent or given up",
    ):
        assert part in message, (part, message)
    assert "Traceback" not in message
    # the ledger: failed preflights, no session, no trial requested or given up
    preflights = events(study, "run.preflight")
    assert preflights and all(not p.body["ok"] for p in preflights)
    assert {p.body["http_status"] for p in preflights} == {500}
    assert preflights[0].body["shape"]["images"] is True
    assert events(study, "run.started") == [] and events(study, "trial.requested") == []
    assert not any(e.body.get("final") for e in events(study, "trial.failed"))
    after = status(study)
    trials = sum(a["trials"] for a in after["arms"])
    assert sum(a["pending"] for a in after["arms"]) == trials > 0
    assert sum(a["given_up"] + a["responded"] for a in after["arms"]) == 0
    assert after["last_preflight"]["seq"] == preflights[-1].seq
    verified = ledger("verify", study / "ledger.db")
    assert verified.exit_code == 0, verified.output


ITEMS = [
    {"id": "q1", "question": "What is 2 + 2?", "options": ["3", "4", "5", "22"], "answer": "B"},
    {
        "id": "q2",
        "question": "Which is a colour?",
        "options": ["red", "dog", "run", "seven"],
        "answer": "A",
    },
    {
        "id": "q3",
        "question": "Which animal barks?",
        "options": ["cat", "cow", "dog", "fish"],
        "answer": "C",
    },
    {
        "id": "q4",
        "question": "Which number is largest?",
        "options": ["1", "10", "100", "1000"],
        "answer": "D",
    },
]

STUDY = """\
[study]
id = "llama-text-mc"
title = "SmolLM2 on four multiple-choice questions through a real OpenAI-compatible server"

[model]
provider = "openai-compatible"
id = "{model}"
max_tokens = 4
temperature = 0.0

[components]
careful = "prompts/careful.txt"
plain = "prompts/plain.txt"

[arms.careful]
role = "full"
components = ["careful"]

[arms.plain]
role = "matched-control"
components = ["plain"]
differs_from = {{ arm = "careful", by = ["careful"] }}

[stimuli]
items = "items.jsonl"

[prompt]
item = "prompts/item.txt"

[design]
replicates = 1
seed = 20261123
bootstrap_seed = 20261124
bootstrap_iterations = 100

[response]
parser = "multiple-choice"
mode = "first-token"

[[hypotheses]]
id = "H1"
description = "Reading the question carefully changes the share answered correctly."
contrast = ["careful", "plain"]
test = "mcnemar"
alpha = 0.05

[analysis]
exclude_unparseable = false
"""


def write_text_study(root: Path) -> None:
    """The text multiple-choice study of ``docs/prompts.md``: an item file and item template."""
    (root / "prompts").mkdir(parents=True)
    (root / "study.toml").write_text(STUDY.format(model=MODEL_ALIAS), "utf-8")
    (root / "items.jsonl").write_text("".join(json.dumps(item) + "\n" for item in ITEMS), "utf-8")
    (root / "prompts" / "item.txt").write_text(
        textwrap.dedent("""\
            Question: {question}
            {options}
            Answer with the letter of the correct option only.
            """),
        "utf-8",
    )
    (root / "prompts" / "careful.txt").write_text("Read the question carefully.\n", "utf-8")
    (root / "prompts" / "plain.txt").write_text("Here is a question.\n", "utf-8")


def test_text_multiple_choice_study_runs_end_to_end(
    llama: LlamaServer, tmp_path: Path, ledger_home: Path
) -> None:
    study = tmp_path / "text-mc"
    write_text_study(study)
    key_path = tmp_path / "owner.key"
    SigningKey.generate("example.org/llama-text-mc/owner").save(key_path)
    for step in (
        ("lock", study),
        ("run", study, "--backend", "openai-compatible", "--base-url", llama.base_url),
        ("score", study),
        ("unblind", study),
        ("analyze", study),
    ):
        result = ledger(*step, "--key", key_path)
        assert result.exit_code == 0, (step, result.output)
    [preflight] = events(study, "run.preflight")
    assert preflight.body["ok"] and preflight.body["shape"]["images"] is False
    assert preflight.body["model_match"] is True
    responded = events(study, "trial.responded")
    assert len(responded) == 2 * len(ITEMS)
    assert all(e.body["format"] == "openai-chat" for e in responded)
    after = status(study)
    assert sum(a["pending"] for a in after["arms"]) == 0
    assert after["model_mismatches"]["count"] == 0
    archive = tmp_path / "archive"
    exported = ledger("export", study, archive, "--key", key_path)
    assert exported.exit_code == 0, exported.output
    verified = ledger("verify", archive)
    assert verified.exit_code == 0, verified.output


def test_the_docs_text_study_runs_its_small_model_on_the_server(
    llama: LlamaServer, tmp_path: Path, ledger_home: Path
) -> None:
    """``docs/study-spec.md``'s text multiple-choice study: a system prompt, three worked
    examples as prior turns, a chain-of-thought arm and two models. Model ``small`` (SmolLM2,
    id ``smollm2-135m``) runs on the real server; ``large`` on the simulated backend (labelled
    so), and the archive verifies: every request, sent as the chat-completions object with
    string contents, is re-rendered by the verifier byte for byte."""
    from tests.e2e.test_text_studies import MC, write_example

    study = write_example(tmp_path / "docs-mc", MC)
    key_path = tmp_path / "owner.key"
    SigningKey.generate("example.org/docs-mc/owner").save(key_path)
    for step in (
        ("lock", study),
        (
            "run",
            study,
            "--backend",
            "openai-compatible",
            "--base-url",
            llama.base_url,
            "--model",
            "small",
        ),
        ("run", study, "--backend", "simulated", "--model", "large"),
        ("score", study),
        ("unblind", study),
        ("analyze", study),
    ):
        result = ledger(*step, "--key", key_path)
        print(f"\nledger {step[0]}: {result.output[-600:]}")
        assert result.exit_code == 0, (step, result.output)
    real = [e for e in events(study, "trial.requested") if e.body["backend"] == "openai-compatible"]
    assert len(real) == 3 * 6 * 2 and all(e.body["model"] == "small" for e in real)
    shapes = {
        (p.body["shape"]["system"], p.body["shape"]["prior_turns"])
        for p in events(study, "run.preflight")
        if p.body["backend"] == "openai-compatible"
    }
    assert (True, True) in shapes  # the direct arm's system prompt and worked examples
    after = status(study)
    assert sum(a["pending"] for a in after["arms"]) == 0
    archive = tmp_path / "archive"
    assert ledger("export", study, archive, "--key", key_path).exit_code == 0
    verified = ledger("verify", archive)
    assert verified.exit_code == 0, verified.output


def test_a_cloze_condition_with_option_orders_reads_the_servers_log_probabilities(
    llama: LlamaServer, tmp_path: Path, ledger_home: Path
) -> None:
    """Seed 002's cloze scoring on the real server: the text study with ``[response] parser =
    "cloze"``, ``logprobs = 20`` and two option orders (``docs/variants.md``). llama.cpp's
    server returns the first token's top-20 log-probabilities; each letter's is recorded with
    the score, a letter outside the top 20 is a counted exclusion, and the verifier re-derives
    every cloze score and every varied request."""
    study = tmp_path / "cloze"
    write_text_study(study)
    spec = study / "study.toml"
    text = spec.read_text("utf-8")
    text = text.replace("temperature = 0.0\n", "temperature = 0.0\nlogprobs = 20\n", 1)
    text = text.replace('parser = "multiple-choice"\nmode = "first-token"', 'parser = "cloze"')
    text = text.replace(
        "[stimuli]",
        '[variants.original]\nkind = "identity"\n\n'
        '[variants.rot1]\nkind = "rotate"\nk = 1\n\n[stimuli]',
    )
    spec.write_text(text, "utf-8")
    (study / "prompts" / "item.txt").write_text(
        "Question: {question}\n{options}\nAnswer with the letter only.\nAnswer:", "utf-8"
    )
    key_path = tmp_path / "owner.key"
    SigningKey.generate("example.org/llama-cloze/owner").save(key_path)
    outputs = {}
    for step in (
        ("lock", study),
        ("run", study, "--backend", "openai-compatible", "--base-url", llama.base_url),
        ("score", study),
        ("unblind", study),
        ("analyze", study),
    ):
        result = ledger(*step, "--key", key_path)
        assert result.exit_code == 0, (step, result.output)
        outputs[step[0]] = result.output
    print(f"\nledger score (cloze on llama.cpp): {outputs['score']}")
    requested = events(study, "trial.requested")
    assert len(requested) == 2 * len(ITEMS) * 2
    assert {e.body["variant"] for e in requested} == {"original", "rot1"}
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        for e in log.events("trial.responded"):
            body = json.loads(log.blob(e.blobs["response"]))
            first = body["choices"][0]["logprobs"]["content"][0]
            assert len(first["top_logprobs"]) == 20
        scored = list(log.events("trial.scored"))
        for e in scored:
            items = json.loads(log.blob(e.blobs["scores"]))
            assert set(items[0]["logprobs"]) == set("ABCD")
            if e.body["status"] == "ok":
                values = items[0]["logprobs"]
                assert items[0]["answer"] == max("ABCD", key=lambda k: (values[k], -ord(k)))
            else:
                assert "no log-probability for option letter" in e.body["problems"][0]
    assert len(scored) == 2 * len(ITEMS) * 2
    archive = tmp_path / "archive"
    assert ledger("export", study, archive, "--key", key_path).exit_code == 0
    verified = ledger("verify", archive)
    assert verified.exit_code == 0, verified.output
