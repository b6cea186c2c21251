"""Every field of the study language at once, end to end, runner and verifier agreeing.

One study uses a CSV item file with metadata, per-option slots and an option format, a system
prompt, few-shot examples inline (label-balanced, in id order) and as turns (one per subject,
reversed, with rationales), a zero-prompt arm, per-arm sampling (stop, top_k, temperature),
per-arm replicates, an arm on one model only and an arm on a seeded subset of items, on two
models of two providers. It is locked, run on the simulated backend, scored, analysed,
exported and verified: the verifier re-renders every request from the locked files alone, so
a PASS means the two implementations of ``docs/prompts.md`` agree on every byte.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ledger import SigningKey
from ledger.cli import main
from runner._request import RequestBuilder, Trial
from runner.spec import load_study

SUBJECTS = ("anatomy", "pharmacology", "physiology")

SPEC = """\
[study]
id = "language-tour"
title = "Every field of the study language"

[models.claude]
provider = "anthropic"
id = "claude-sonnet-4-6"
max_tokens = 64
temperature = 0.0
top_k = 5

[models.local]
provider = "openai-compatible"
id = "local-model"
max_tokens = 48
temperature = 0.2
stop = ["\\n\\n"]

[components]
system = "prompts/system.txt"
task = "prompts/task.txt"
cot = "prompts/cot.txt"
note = "prompts/note.txt"

[prompt]
item = "prompts/item.txt"
option_format = "({label}) {text}"
option_separator = "\\n"

[fewshot.balanced]
examples = "data/examples.jsonl"
rule = "label-balanced"
count = 4
seed = 3
order = "id"
style = "inline"
answer = "prompts/answer.txt"

[fewshot.subjects]
examples = "data/examples.jsonl"
rule = "distinct-metadata"
field = "subject"
count = 3
seed = 4
order = "reverse"
answer = "prompts/rationale.txt"

[arms.inline]
role = "full"
components = ["note", "examples", "item", "task"]
system = ["system"]
fewshot = "balanced"

[arms.turns]
role = "factorial"
components = ["item", "task"]
fewshot = "subjects"
sampling = { temperature = 0.0, stop = ["Question:"] }

[arms.cot]
role = "factorial"
components = ["item", "cot"]
sampling = { temperature = 0.7, top_p = 0.95, max_tokens = 128 }
replicates = 3
models = ["claude"]

[arms.zero]
role = "vehicle"
components = []
items = { n = 4, seed = 9 }

[stimuli]
items = "data/items.csv"

[design]
replicates = 2
seed = 99
bootstrap_seed = 100
bootstrap_iterations = 200

[response]
parser = "multiple-choice"
mode = "first-token"

[[hypotheses]]
id = "H1"
contrast = ["inline", "turns"]
test = "mcnemar"
alpha = 0.05

[analysis]
exclude_unparseable = false
"""


def write_study(root: Path) -> Path:
    (root / "prompts").mkdir(parents=True)
    (root / "data").mkdir()
    rows = ["id,question,option_A,option_B,option_C,answer,metadata.subject"]
    for i in range(8):
        a, b = 3 + i, 4 + 2 * i
        opts = [str(a + b), str(a + b + 1), str(a + b + 2)]
        rows.append(f"q{i},What is {a} plus {b}?,{opts[0]},{opts[1]},{opts[2]},A,{SUBJECTS[i % 3]}")
    (root / "data/items.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    examples = []
    for i in range(9):
        examples.append(
            {
                "id": f"ex{i}",
                "question": f"Example {i}: what is {i} plus {i}?",
                "options": [str(2 * i + 1), str(2 * i), str(2 * i + 2)],
                "answer": "ABC"[i % 3],
                "rationale": f"{i} and {i} make {2 * i}.",
                "metadata": {"subject": SUBJECTS[i % 3]},
            }
        )
    (root / "data/examples.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in examples), encoding="utf-8"
    )
    texts = {
        "item.txt": "Q: {question}\n{options}\nSubject: {metadata.subject}\n",
        "answer.txt": "Answer: {answer}\n",
        "rationale.txt": "{rationale} Answer: {answer} ({answer_text})\n",
        "system.txt": "You answer arithmetic questions about doses.\n",
        "task.txt": "Reply with the letter only.\n",
        # a leading blank line is part of the text: only trailing newlines are stripped, by
        # the runner and the verifier alike (docs/prompts.md §3)
        "cot.txt": "\nThink step by step, then write 'Answer: X'.\n",
        "note.txt": "Worked examples first:\n",
    }
    for name, text in texts.items():
        (root / "prompts" / name).write_text(text, encoding="utf-8")
    (root / "study.toml").write_text(SPEC, encoding="utf-8")
    return root


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Result]:
    base = tmp_path_factory.mktemp("tour")
    key = base / "owner.key"
    SigningKey.generate("tour.example/owner").save(key)
    root = write_study(base / "study")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
        for command in (
            ["lock", root, "--key", key],
            ["run", root, "--backend", "simulated", "--key", key],
            ["score", root, "--key", key],
            ["unblind", root, "--key", key],
            ["analyze", root, "--key", key],
            ["export", root, base / "archive", "--key", key],
        ):
            result = run(*command)
            assert result.exit_code == 0, (command[0], result.output)
        verified = run("verify", base / "archive")
    return root, base / "archive", verified


def test_every_field_runs_and_the_verifier_re_renders_every_request(
    tour: tuple[Path, Path, Result],
) -> None:
    _, _, verified = tour
    assert verified.exit_code == 0, verified.output
    assert "FAIL" not in verified.output


def test_the_schedule_is_the_declared_incomplete_crossing(tour: tuple[Path, Path, Result]) -> None:
    _, archive, _ = tour
    items = [f"q{i}" for i in range(8)]
    rank = sorted(items, key=lambda i: hashlib.sha256(f"9|{i}".encode()).hexdigest())
    zero_items = set(rank[:4])
    expected = (
        2 * 8 * 2  # inline: 2 models x 8 items x 2 replicates
        + 2 * 8 * 2  # turns
        + 1 * 8 * 3  # cot: claude only, 3 replicates
        + 2 * 4 * 2  # zero: 4 items of the seeded subset
    )
    lines = (archive / "trials/schedule.csv").read_text(encoding="utf-8").splitlines()[1:]
    assert len(lines) == expected
    trials = [line.rsplit(",", 1)[1] for line in lines]
    assert {t.split("|")[2] for t in trials if t.startswith("zero|")} == zero_items
    assert {t.split("|")[1] for t in trials if t.startswith("cot|")} == {"claude"}


def test_requests_carry_the_declared_blocks_and_parameters(tour: tuple[Path, Path, Result]) -> None:
    root, _, _ = tour
    builder = RequestBuilder(load_study(root, strict=False))
    inline = builder.body(Trial.from_id("inline|local|q1|1", 1))
    text = inline["messages"][-1]["content"][-1]["text"]
    assert inline["system"] == "You answer arithmetic questions about doses."
    assert len(inline["messages"]) == 1
    assert text.startswith("Worked examples first:\n\nQ: Example ")
    assert text.count("Answer: ") == 4 and "(A) " in text
    assert text.endswith(
        "Q: What is 4 plus 6?\n(A) 10\n(B) 11\n(C) 12\nSubject: pharmacology"
        "\n\nReply with the letter only.\n"
    )
    assert inline["stop_sequences"] == ["\n\n"] and inline["temperature"] == 0.2
    shown = [line.split(":")[0] for line in text.split("\n") if line.startswith("Q: Example")]
    assert shown == sorted(shown)  # order = "id"
    turns = builder.body(Trial.from_id("turns|claude|q2|1", 1))
    assistants = [m["content"][0]["text"] for m in turns["messages"] if m["role"] == "assistant"]
    assert len(assistants) == 3 and all("Answer: " in a and "(" in a for a in assistants)
    subjects = [m["content"][0]["text"].rsplit("Subject: ", 1)[1] for m in turns["messages"][:-1:2]]
    assert sorted(subjects) == sorted(SUBJECTS)
    assert turns["stop_sequences"] == ["Question:"] and turns["top_k"] == 5
    cot = builder.body(Trial.from_id("cot|claude|q0|3", 1))
    assert (cot["temperature"], cot["top_p"], cot["max_tokens"]) == (0.7, 0.95, 128)
    assert cot["messages"][-1]["content"][-1]["text"].endswith(
        "\n\n\nThink step by step, then write 'Answer: X'.\n"
    )
    zero = builder.body(Trial.from_id("zero|local|q0|1", 1))
    assert zero["messages"][0]["content"] == [
        {"type": "text", "text": "Q: What is 3 plus 4?\n(A) 7\n(B) 8\n(C) 9\nSubject: anatomy\n"}
    ]
