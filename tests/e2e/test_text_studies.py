"""Text studies written from ``docs/study-spec.md`` alone, end to end (issue 15).

The text multiple-choice study (item file, item template, system prompt, three few-shot turns,
a chain-of-thought arm, two models) and the yes/no/maybe study are read from the page,
locked, run on the simulated backend, scored, unblinded, analysed, exported and verified. Bad
input in the study language (a slot no item fills, a few-shot example that is a test item, a
sampling parameter the provider does not take, a backend that serves none of the models, an
unknown key in a new table) is refused naming the file, line or field, with nothing appended.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from locations import REPO

from ledger import Ledger, SigningKey
from ledger.cli import main
from runner._request import RequestBuilder, Trial
from runner.spec import load_study

DOCS = REPO / "docs"
MC = "## Example: a text multiple-choice study, from scratch"
YNM = "## Example: a yes/no/maybe study over abstracts"


def example_files(heading: str) -> dict[str, str]:
    """Every file of one example of ``docs/study-spec.md``: path -> text, as the page has it."""
    text = (DOCS / "study-spec.md").read_text(encoding="utf-8")
    section = text[text.index(heading) + len(heading) :]
    section = section[: section.index("\n## ")]
    files = dict(re.findall(r"`([\w./-]+)`:\n\n```\w*\n(.*?)```", section, re.S))
    assert "study.toml" in files, sorted(files)
    return files


def write_example(root: Path, heading: str) -> Path:
    root.mkdir(parents=True)
    for rel, body in example_files(heading).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
    return root


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def ledger_size(root: Path) -> int:
    path = root / "ledger.db"
    if not path.exists():
        return 0
    with Ledger.open(path, readonly=True) as log:
        return log.size


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(path))
        yield path


@pytest.fixture(scope="module")
def key_file(home: Path) -> Path:
    path = home / "owner.key"
    SigningKey.generate("text-studies.example/owner").save(path)
    return path


def full_run(root: Path, key: Path) -> tuple[Path, Result]:
    """lock, run (simulated), score, unblind, analyze, export; then verify the archive."""
    for command in (
        ["lock", root, "--key", key],
        ["run", root, "--backend", "simulated", "--key", key],
        ["score", root, "--key", key],
        ["unblind", root, "--key", key],
        ["analyze", root, "--key", key],
        ["export", root, root.parent / f"{root.name}-archive", "--key", key],
    ):
        result = run(*command)
        assert result.exit_code == 0, (command[0], result.output)
    archive = root.parent / f"{root.name}-archive"
    return archive, run("verify", archive)


@pytest.fixture(scope="module")
def mc_study(tmp_path_factory: pytest.TempPathFactory, key_file: Path) -> tuple[Path, Path, Result]:
    root = write_example(tmp_path_factory.mktemp("mc") / "study", MC)
    archive, verified = full_run(root, key_file)
    return root, archive, verified


def test_the_text_multiple_choice_study_from_the_docs_runs_and_verifies(
    mc_study: tuple[Path, Path, Result],
) -> None:
    _, archive, verified = mc_study
    assert verified.exit_code == 0, verified.output
    assert "FAIL" not in verified.output
    schedule = (archive / "trials" / "schedule.csv").read_text(encoding="utf-8").splitlines()
    assert schedule[0] == "position,arm_code,model,stimulus,rep,trial"
    assert len(schedule) - 1 == 3 * 2 * 6 * 2
    models = {line.split(",")[2] for line in schedule[1:]}
    assert models == {"large", "small"}


def test_the_direct_arm_sends_a_system_prompt_and_three_worked_examples(
    mc_study: tuple[Path, Path, Result],
) -> None:
    root, _, _ = mc_study
    study = load_study(root, strict=False)
    body = RequestBuilder(study).body(Trial.from_id("direct|large|q1|1", 1))
    lines = (root / "data/examples.jsonl").read_text().splitlines()
    examples = [json.loads(line) for line in lines]
    lines = (root / "data/items.jsonl").read_text().splitlines()
    items = {json.loads(x)["id"]: json.loads(x) for x in lines}
    assert body["system"] == (root / "prompts/system.txt").read_text().rstrip("\n")
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * 3 + ["user"]
    pairs = zip(messages[0:6:2], messages[1:6:2], strict=True)
    for example, (user, assistant) in zip(examples, pairs, strict=True):
        options = "\n".join(f"{'ABCD'[i]}. {t}" for i, t in enumerate(example["options"]))
        assert user["content"] == [
            {"type": "text", "text": f"Question: {example['question']}\n{options}"}
        ]
        assert assistant["content"] == [{"type": "text", "text": f"Answer: {example['answer']}"}]
    q1 = items["q1"]
    options = "\n".join(f"{'ABCD'[i]}. {t}" for i, t in enumerate(q1["options"]))
    direct = (root / "prompts/direct.txt").read_text().rstrip("\n")
    assert messages[-1]["content"] == [
        {"type": "text", "text": f"Question: {q1['question']}\n{options}\n\n{direct}\n"}
    ]
    assert body["model"] == "claude-sonnet-4-6" and body["temperature"] == 0.0
    small = RequestBuilder(study).body(Trial.from_id("cot|small|q2|1", 2))
    assert small["model"] == "smollm2-135m" and len(small["messages"]) == 1
    assert "Answer: C" not in json.dumps(small)  # q2's key, and no worked examples


def test_the_yes_no_maybe_study_from_the_docs_runs_and_verifies(
    tmp_path_factory: pytest.TempPathFactory, key_file: Path
) -> None:
    root = write_example(tmp_path_factory.mktemp("ynm") / "study", YNM)
    _, verified = full_run(root, key_file)
    assert verified.exit_code == 0, verified.output


# ------------------------------------------------------------------ bad input


@pytest.fixture
def fresh_mc(tmp_path: Path, key_file: Path) -> Path:
    return write_example(tmp_path / "study", MC)


def edit(root: Path, rel: str, old: str, new: str) -> None:
    path = root / rel
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def refused(root: Path, key: Path, *needles: str) -> str:
    result = run("lock", root, "--key", key)
    assert result.exit_code != 0, result.output
    for needle in needles:
        assert needle in result.output, result.output
    assert ledger_size(root) <= 1  # at most the genesis of a ledger created for the lock
    return result.output


def test_a_template_slot_no_item_fills_is_refused(fresh_mc: Path, key_file: Path) -> None:
    edit(fresh_mc, "prompts/item.txt", "{options}", "{options}\n{context}")
    refused(fresh_mc, key_file, "prompts/item.txt:3:1: slot {context}: item 'q1' has no such field")


def test_the_answer_in_the_item_template_is_refused(fresh_mc: Path, key_file: Path) -> None:
    edit(fresh_mc, "prompts/item.txt", "{options}", "{options} {answer}")
    refused(
        fresh_mc, key_file, "prompts/item.txt:2:11: slot {answer} would show the test item's key"
    )


def test_a_stray_brace_in_a_template_names_line_and_column(fresh_mc: Path, key_file: Path) -> None:
    edit(fresh_mc, "prompts/item.txt", "Question:", "Question {:")
    refused(fresh_mc, key_file, "prompts/item.txt:1:10: '{' starts no slot")


def test_few_shot_examples_overlapping_test_items_are_refused(
    fresh_mc: Path, key_file: Path
) -> None:
    edit(
        fresh_mc,
        "data/examples.jsonl",
        "Which organ exchanges oxygen with the air?",
        "Which vitamin deficiency causes scurvy?",
    )
    refused(
        fresh_mc,
        key_file,
        "examples.jsonl:2: example 'ex2' has the same question as test item 'q2'",
    )
    edit(fresh_mc, "data/examples.jsonl", '"id": "ex1"', '"id": "q1"')
    edit(fresh_mc, "study.toml", 'ids = ["ex1", "ex2", "ex3"]', 'ids = ["q1", "ex2", "ex3"]')
    refused(fresh_mc, key_file, "example 'q1' is also a test item")


def test_a_sampling_parameter_the_provider_does_not_take_is_refused(
    fresh_mc: Path, key_file: Path
) -> None:
    edit(fresh_mc, "study.toml", 'provider = "openai-compatible"', 'provider = "openai"')
    edit(
        fresh_mc,
        "study.toml",
        'components = ["item"]\n\n[stimuli]',
        'components = ["item"]\nsampling = { top_k = 50 }\n\n[stimuli]',
    )
    out = refused(fresh_mc, key_file, "arms.bare.sampling.top_k: provider 'openai' takes no top_k")
    assert "study.toml:" in out
    edit(fresh_mc, "study.toml", "sampling = { top_k = 50 }", "sampling = { temperature = 1.5 }")
    refused(
        fresh_mc,
        key_file,
        "arms.bare.sampling.temperature: must be a number between 0 and 1 "
        "for provider 'anthropic', got 1.5",
    )


def test_unknown_keys_in_the_new_tables_are_refused(fresh_mc: Path, key_file: Path) -> None:
    edit(fresh_mc, "study.toml", 'rule = "fixed"', 'rule = "fixed"\ncuont = 3')
    edit(
        fresh_mc,
        "study.toml",
        'item = "prompts/item.txt"',
        'item = "prompts/item.txt"\noptions = "x"',
    )
    edit(fresh_mc, "study.toml", 'id = "smollm2-135m"', 'id = "smollm2-135m"\ntop_q = 1')
    out = refused(
        fresh_mc,
        key_file,
        "[fewshot.worked] cuont: unknown key (did you mean 'count'?)",
        "[models.small] top_q: unknown key (did you mean 'top_p'?)",
        "[prompt] options: unknown key",
    )
    assert re.search(r"study\.toml:\d+: \[fewshot\.worked\] cuont", out), out


def test_a_backend_serving_none_of_the_models_is_refused_before_anything_is_recorded(
    fresh_mc: Path, key_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    edit(fresh_mc, "study.toml", 'provider = "openai-compatible"', 'provider = "openai"')
    assert run("lock", fresh_mc, "--key", key_file).exit_code == 0
    before = ledger_size(fresh_mc)
    result = run(
        "run",
        fresh_mc,
        "--backend",
        "anthropic",
        "--model",
        "small",
        "--key",
        key_file,
        "--base-url",
        "http://127.0.0.1:9/",
    )
    assert result.exit_code == 1
    want = "--model small: the study is locked for provider 'openai' ([models.small] provider)"
    assert want in result.output
    result = run(
        "run",
        fresh_mc,
        "--backend",
        "openai-compatible",
        "--model",
        "nope",
        "--key",
        key_file,
        "--base-url",
        "http://127.0.0.1:9/v1",
    )
    assert result.exit_code == 1 and "--model nope: not a model of" in result.output
    assert ledger_size(fresh_mc) == before


def test_a_changed_item_file_after_lock_stops_every_command(fresh_mc: Path, key_file: Path) -> None:
    assert run("lock", fresh_mc, "--key", key_file).exit_code == 0
    before = ledger_size(fresh_mc)
    edit(fresh_mc, "data/items.jsonl", '"answer": "C"', '"answer": "B"')
    result = run("run", fresh_mc, "--backend", "simulated", "--key", key_file)
    assert result.exit_code == 1 and "data/items.jsonl: locked" in result.output, result.output
    assert ledger_size(fresh_mc) == before
    shutil.rmtree(fresh_mc)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('"id": "q2"', '"id": "q1"', "data/items.jsonl:2: duplicate id 'q1' (first on line 1)"),
        (
            ', "answer": "A", "metadata": {"subject": "nutrition"}',
            ', "metadata": {}',
            "data/items.jsonl:2: item 'q2' has no answer",
        ),
        (
            '"answer": "D"',
            '"answer": "E"',
            "data/items.jsonl:5: item 'q5': answer 'E' is not among its options' labels",
        ),
        ('{"id": "q3"', '\n{"id": "q3"', "data/items.jsonl:3: blank line"),
        ("Which blood cells", "Which bl\udcffood cells", "data/items.jsonl:4: not UTF-8"),
    ],
    ids=["duplicate id", "missing answer", "answer not an option", "blank line", "not UTF-8"],
)
def test_a_bad_item_file_is_refused_at_lock_naming_file_and_line(
    fresh_mc: Path, key_file: Path, old: str, new: str, message: str
) -> None:
    path = fresh_mc / "data/items.jsonl"
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_bytes(text.replace(old, new, 1).encode("utf-8", "surrogateescape"))
    out = refused(fresh_mc, key_file, message)
    assert "stimuli.items" in out
    assert not (fresh_mc / "ledger.db").exists()


def test_a_hypothesis_id_with_the_per_model_separator_is_refused(
    fresh_mc: Path, key_file: Path
) -> None:
    edit(fresh_mc, "study.toml", 'id = "H1"', 'id = "H1@large"')
    refused(fresh_mc, key_file, "hypotheses[0].id: 'H1@large': '@' is reserved")


def test_the_same_text_study_exports_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fixed key, fixed clock, a declared blinding secret, one worker: identical archives."""
    monkeypatch.setenv("PROMPT_LEDGER_FIXED_CLOCK", "2026-11-23T08:00:00Z")
    monkeypatch.setenv("MC_SECRET", "a secret for the determinism test")
    key = tmp_path / "owner.key"
    SigningKey.generate("determinism.example/owner").save(key)
    archives = []
    for name in ("first", "second"):
        monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / f"home-{name}"))
        root = write_example(tmp_path / name / "study", MC)
        edit(
            root,
            "study.toml",
            "bootstrap_iterations = 1000",
            'bootstrap_iterations = 1000\nblinding_secret = "env:MC_SECRET"',
        )
        for command in (
            ["lock", root],
            ["run", root, "--backend", "simulated", "--concurrency", "1"],
            ["score", root],
            ["unblind", root],
            ["analyze", root],
            ["export", root, tmp_path / name / "archive"],
        ):
            result = run(*command, "--key", key)
            assert result.exit_code == 0, (command[0], result.output)
        archives.append(tmp_path / name / "archive")

    def files(archive: Path) -> dict[str, bytes]:
        return {
            p.relative_to(archive).as_posix(): p.read_bytes()
            for p in sorted(archive.rglob("*"))
            if p.is_file()
        }

    first, second = (files(a) for a in archives)
    assert sorted(first) == sorted(second)
    differ = [name for name in first if first[name] != second[name]]
    assert differ == []
