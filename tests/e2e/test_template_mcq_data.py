"""The data and prompts of the medmcqa-prompt-sensitivity template (seed 002), checked as the
study language reads them.

Every item file is read by the strict reader (``runner._items.load_items``) and by ``ledger items
check``; every prompt file is used in a study that ``runner._lock.validate_for_lock`` (what
``ledger lock`` checks: slots, few-shot draws, overlaps) and ``ledger arms`` accept; and the
properties the template promises in its README are checked on the data: a balanced answer key,
few-shot pools disjoint from the test items with enough examples for every seed draw rule,
option texts that survive reordering, abstracts with one section label per paragraph exactly as
the PubMedQA importer writes them, and the seed's prompt wording, rendered.
"""

from __future__ import annotations

import glob
import json
import re
import shutil
import tomllib
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from locations import REPO

from ledger import SigningKey
from ledger.cli import main
from runner._importers import import_dataset
from runner._items import ItemSet, load_items
from runner._lock import validate_for_lock
from runner._render import Renderer, draw_examples
from runner.spec import load_study

TEMPLATE = REPO / "runner" / "templates" / "medmcqa_prompt_sensitivity"
DATA = TEMPLATE / "data"
PROMPTS = TEMPLATE / "prompts"
ITEM_FILES = ("items.jsonl", "examples.jsonl", "abstracts.jsonl")
LABELS = ("A", "B", "C", "D")
SECTIONS = ["BACKGROUND", "METHODS", "RESULTS", "CONCLUSIONS"]

# An option letter standing alone (the upper-case part of the multiple-choice parser's
# LETTER_TOKEN, docs/scoring.md 5.1): such a letter in a question, an option or a worked
# rationale could be echoed by a model and read as its answer.
LONE_LETTER = re.compile(r"(?<![\w'-])[ABCD](?![\w'-])")
# Options whose meaning depends on where they stand: they break under reordering.
ORDER_BOUND = re.compile(
    r"\b(all|none|both|neither) of the (above|following|options)\b|\b[A-D] and [A-D]\b"
    r"|\boption [A-D]\b|\babove\b|\bbelow\b",
    re.IGNORECASE,
)
# Abbreviations whose full stop a sentence splitter would take for a sentence end.
ABBREVIATIONS = re.compile(r"\b(vs|e\.g|i\.e|et al|approx|fig|ca|cf|no)\.\s", re.IGNORECASE)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")

COMMON = """
[design]
replicates = 1
seed = 42
bootstrap_seed = 123
bootstrap_iterations = 1000

[analysis]
exclude_unparseable = false
"""

MODELS = """
[models.medgemma_4b]
provider = "openai-compatible"
id = "google/medgemma-4b-it"
max_tokens = 256
temperature = 0.0
top_p = 1.0

[models.medgemma_27b]
provider = "openai-compatible"
id = "google/medgemma-27b-text-it"
max_tokens = 256
temperature = 0.0
top_p = 1.0
"""

# A check of the data files with the seed's ten prompting conditions and its CoT
# self-consistency sampling (the template's own studies, with variants, cloze and voting, are
# runner/templates/medmcqa_prompt_sensitivity/studies/*.toml, tested by test_template_mcq.py).
MCQ_STUDY = (
    """
[study]
id = "medmcqa-data-check"
title = "Seed 002 prompting conditions on the template's questions"
"""
    + MODELS
    + """
[components]
system = "prompts/system.txt"
direct_intro = "prompts/direct_intro.txt"
direct_ask = "prompts/direct_ask.txt"
cot_intro = "prompts/cot_intro.txt"
cot_ask = "prompts/cot_ask.txt"

[prompt]
item = "prompts/item.txt"

[fewshot.curated]
examples = "data/examples.jsonl"
rule = "fixed"
ids = ["e05", "e12", "e19"]
style = "inline"
answer = "prompts/answer_direct.txt"

[fewshot.curated_cot]
examples = "data/examples.jsonl"
rule = "fixed"
ids = ["e05", "e12", "e19"]
style = "inline"
answer = "prompts/answer_cot.txt"

[fewshot.curated_rotated]
examples = "data/examples.jsonl"
rule = "fixed"
ids = ["e19", "e05", "e12"]
style = "inline"
answer = "prompts/answer_direct.txt"

[fewshot.curated_reversed]
examples = "data/examples.jsonl"
rule = "fixed"
ids = ["e05", "e12", "e19"]
order = "reverse"
style = "inline"
answer = "prompts/answer_direct.txt"

[fewshot.random]
examples = "data/examples.jsonl"
rule = "random"
count = 3
seed = 42
style = "inline"
answer = "prompts/answer_direct.txt"

[fewshot.balanced]
examples = "data/examples.jsonl"
rule = "label-balanced"
count = 4
seed = 42
style = "inline"
answer = "prompts/answer_direct.txt"

[fewshot.subject]
examples = "data/examples.jsonl"
rule = "same-metadata"
field = "subject"
count = 3
seed = 42
style = "inline"
answer = "prompts/answer_direct.txt"

[arms.zs_direct]
role = "full"
components = ["direct_intro", "item", "direct_ask"]
system = ["system"]

[arms.zs_cot]
role = "matched-control"
components = ["cot_intro", "item", "cot_ask"]
system = ["system"]
differs_from = { arm = "zs_direct", by = ["direct_intro", "direct_ask"] }

[arms.fs_direct]
role = "factorial"
components = ["direct_intro", "examples", "item", "direct_ask"]
system = ["system"]
fewshot = "curated"

[arms.fs_cot]
role = "factorial"
components = ["cot_intro", "examples", "item", "cot_ask"]
system = ["system"]
fewshot = "curated_cot"

[arms.answer_only]
role = "dismantling"
components = ["item"]
system = ["system"]
differs_from = { arm = "zs_direct", by = ["direct_intro", "direct_ask"] }

[arms.fs_random]
role = "factorial"
components = ["direct_intro", "examples", "item", "direct_ask"]
system = ["system"]
fewshot = "random"

[arms.fs_balanced]
role = "factorial"
components = ["direct_intro", "examples", "item", "direct_ask"]
system = ["system"]
fewshot = "balanced"

[arms.fs_subject]
role = "factorial"
components = ["direct_intro", "examples", "item", "direct_ask"]
system = ["system"]
fewshot = "subject"

[arms.fs_order_rotated]
role = "factorial"
components = ["direct_intro", "examples", "item", "direct_ask"]
system = ["system"]
fewshot = "curated_rotated"

[arms.fs_order_reversed]
role = "factorial"
components = ["direct_intro", "examples", "item", "direct_ask"]
system = ["system"]
fewshot = "curated_reversed"

[arms.sc_cot]
role = "factorial"
components = ["cot_intro", "item", "cot_ask"]
system = ["system"]
sampling = { temperature = 0.7, top_p = 0.95, top_k = 50, max_tokens = 256 }
replicates = 5

[stimuli]
items = "data/items.jsonl"

[response]
parser = "multiple-choice"
mode = "first-token"

[[hypotheses]]
id = "H1"
description = "Zero-shot chain of thought differs from zero-shot direct answers (McNemar)."
contrast = ["zs_cot", "zs_direct"]
test = "mcnemar"
alpha = 0.05
correction = "bonferroni"
family = "ablation"

[[hypotheses]]
id = "H2"
description = "Curated few-shot direct answers differ from zero-shot direct answers (McNemar)."
contrast = ["fs_direct", "zs_direct"]
test = "mcnemar"
alpha = 0.05
correction = "bonferroni"
family = "ablation"
"""
    + COMMON
)

# The seed's answer-only prompt has its own item layout: a study of its own until an arm can
# name its item template.
ANSWER_ONLY_STUDY = (
    """
[study]
id = "medmcqa-answer-only-check"
title = "Seed 002 answer-only condition"
"""
    + MODELS
    + """
[components]
system = "prompts/system.txt"

[prompt]
item = "prompts/item_answer_only.txt"

[arms.answer_only]
role = "vehicle"
components = ["item"]
system = ["system"]

[arms.bare]
role = "vehicle"
components = ["item"]

[stimuli]
items = "data/items.jsonl"

[response]
parser = "multiple-choice"
mode = "first-token"

[[hypotheses]]
id = "H1"
description = "A system prompt changes answer-only accuracy."
contrast = ["answer_only", "bare"]
test = "mcnemar"
alpha = 0.05
"""
    + COMMON
)


def abstract_study(item_template: str, intro: str) -> str:
    """The evidence arm over the abstracts, with ``item_template`` and the intro component."""
    return (
        """
[study]
id = "pubmedqa-evidence-check"
title = "Seed 002 evidence conditioning"
"""
        + MODELS
        + f"""
[components]
system = "prompts/system.txt"
intro = "prompts/{intro}"
ask = "prompts/evidence_ask.txt"

[prompt]
item = "prompts/{item_template}"

[arms.evidence]
role = "full"
components = ["intro", "item", "ask"]
system = ["system"]

[arms.bare]
role = "vehicle"
components = ["item", "ask"]
system = ["system"]

[stimuli]
items = "data/abstracts.jsonl"

[response]
parser = "yes-no-maybe"
mode = "first-token"

[[hypotheses]]
id = "H1"
description = "The instruction changes accuracy."
contrast = ["evidence", "bare"]
test = "mcnemar"
alpha = 0.05
"""
        + COMMON
    )


STUDIES = {
    "mcq": MCQ_STUDY,
    "answer_only": ANSWER_ONLY_STUDY,
    "evidence": abstract_study("item_abstract.txt", "evidence_intro.txt"),
    "question_only": abstract_study("item_question_only.txt", "question_only_intro.txt"),
}


@pytest.fixture(scope="module")
def studies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each study above in a folder holding a copy of the template's data and prompts."""
    out = {}
    for name, spec in STUDIES.items():
        root = tmp_path_factory.mktemp(name)
        shutil.copytree(DATA, root / "data")
        shutil.copytree(PROMPTS, root / "prompts")
        (root / "study.toml").write_text(spec, encoding="utf-8")
        out[name] = root
    return out


@pytest.fixture(scope="module")
def renderers(studies: dict[str, Path]) -> dict[str, Renderer]:
    return {name: Renderer(load_study(root)) for name, root in studies.items()}


@pytest.fixture(scope="module")
def items() -> ItemSet:
    return load_items(DATA / "items.jsonl")


@pytest.fixture(scope="module")
def examples() -> ItemSet:
    return load_items(DATA / "examples.jsonl")


@pytest.fixture(scope="module")
def abstracts() -> ItemSet:
    return load_items(DATA / "abstracts.jsonl")


def ledger(*args: str | Path) -> Result:
    """The ``ledger`` command line, in process."""
    return CliRunner().invoke(main, [str(a) for a in args])


# ---------------------------------------------------------------- the item files as files


@pytest.mark.parametrize("name", ITEM_FILES)
def test_ledger_items_check_accepts_each_item_file(name: str) -> None:
    path = DATA / name
    result = ledger("items", "check", path, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    strict = load_items(path)
    assert report["count"] == len(strict)
    assert report["sha256"] == strict.sha256


def test_the_template_folder_is_packaged() -> None:
    """Every file of the template is matched by the runner's package-data globs (pyproject)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["runner"]
    runner_dir = REPO / "runner"
    packaged = {
        Path(p)
        for pattern in patterns
        for p in glob.glob(pattern, root_dir=runner_dir)
        if (runner_dir / p).is_file()
    }
    files = {
        p.relative_to(runner_dir)
        for p in TEMPLATE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert files, "the template folder is empty"
    assert files <= packaged, sorted(map(str, files - packaged))


# ---------------------------------------------------------------- the test questions


def test_ids_are_unique_and_numbered(items: ItemSet, examples: ItemSet, abstracts: ItemSet) -> None:
    assert [i.id for i in items] == [f"m{n:02d}" for n in range(1, len(items) + 1)]
    assert [e.id for e in examples] == [f"e{n:02d}" for n in range(1, len(examples) + 1)]
    assert [a.id for a in abstracts] == [f"a{n:02d}" for n in range(1, len(abstracts) + 1)]
    every = [i.id for s in (items, examples, abstracts) for i in s]
    assert len(every) == len(set(every))


def test_every_question_has_four_distinct_options_and_a_lettered_key(items: ItemSet) -> None:
    for item in items:
        assert len(item.options) == 4, item.id
        assert len({o.strip().casefold() for o in item.options}) == 4, item.id
        assert item.answer in LABELS, item.id


def test_the_answer_key_is_balanced_over_the_four_positions(
    items: ItemSet, examples: ItemSet
) -> None:
    for pool in (items, examples):
        counts = Counter(i.answer for i in pool)
        assert set(counts) == set(LABELS)
        assert len(set(counts.values())) == 1, counts
        assert sum(counts.values()) == len(pool)


def test_subjects_are_balanced_and_every_subject_has_examples(
    items: ItemSet, examples: ItemSet
) -> None:
    subjects = Counter(i.metadata["subject"] for i in items)
    assert len(subjects) == 8
    assert len(set(subjects.values())) == 1, subjects
    example_subjects = Counter(e.metadata["subject"] for e in examples)
    assert set(example_subjects) == set(subjects)
    # the subject-matched condition shows three examples of the item's subject
    assert min(example_subjects.values()) >= 3, example_subjects
    for subject in subjects:
        keys = [i.answer for i in items if i.metadata["subject"] == subject]
        assert len(set(keys)) >= 3, f"{subject}: answers {keys} bunch on one letter"


def test_no_text_holds_a_lone_option_letter(items: ItemSet, examples: ItemSet) -> None:
    for item in [*items, *examples]:
        texts = [item.data["question"], *item.options, item.data.get("rationale", "")]
        for text in texts:
            assert not LONE_LETTER.search(text), f"{item.id}: {text!r}"


def test_no_option_depends_on_its_position(items: ItemSet, examples: ItemSet) -> None:
    for item in [*items, *examples]:
        for option in item.options:
            assert not ORDER_BOUND.search(option), f"{item.id}: {option!r}"


# ---------------------------------------------------------------- few-shot pools


def test_examples_are_disjoint_from_the_test_items(items: ItemSet, examples: ItemSet) -> None:
    def norm(text: str) -> str:
        return " ".join(text.casefold().split())

    questions = {norm(i.data["question"]) for i in items}
    option_sets = {frozenset(map(norm, i.options)) for i in items}
    for example in examples:
        assert example.id not in items.by_id
        assert norm(example.data["question"]) not in questions, example.id
        assert frozenset(map(norm, example.options)) not in option_sets, example.id


def test_no_example_states_a_test_items_key(items: ItemSet, examples: ItemSet) -> None:
    """The correct option of a test question appears in no example's question, options or
    reasoning (the seed's concern: examples leaking information into the test item)."""
    for example in examples:
        shown = " ".join(
            [example.data["question"], *example.options, example.data["rationale"]]
        ).casefold()
        for item in items:
            key = item.options[LABELS.index(item.answer)].casefold()
            assert not re.search(rf"\b{re.escape(key)}\b", shown), (example.id, item.id, key)


def test_every_example_has_a_rationale_for_the_chain_of_thought_turns(examples: ItemSet) -> None:
    for example in examples:
        rationale = example.data.get("rationale", "")
        assert len(SENTENCE_END.split(rationale.strip())) >= 2, example.id


def test_each_draw_rule_draws_what_the_seed_condition_needs(
    renderers: dict[str, Renderer], items: ItemSet, examples: ItemSet
) -> None:
    study = renderers["mcq"].study
    fewshot = study.fewshot
    curated = [examples.by_id[i] for i in fewshot["curated"].ids]
    # the seed's appendix: few-shot examples come from different subjects
    assert len({e.metadata["subject"] for e in curated}) == len(curated) == 3
    assert len({e.answer for e in curated}) == 3
    random_draws = set()
    for item in items:
        balanced = draw_examples(fewshot["balanced"], examples, item)
        assert sorted(e.answer for e in balanced) == list(LABELS), item.id
        subject = draw_examples(fewshot["subject"], examples, item)
        assert {e.metadata["subject"] for e in subject} == {item.metadata["subject"]}, item.id
        assert len(subject) == 3
        drawn = draw_examples(fewshot["random"], examples, item)
        assert len(drawn) == 3
        random_draws.add(tuple(e.id for e in drawn))
        assert [e.id for e in draw_examples(fewshot["curated_reversed"], examples, item)] == [
            e.id for e in reversed(curated)
        ]
    assert len(random_draws) > len(items) // 2, "the random draw hardly varies across items"


# ---------------------------------------------------------------- abstracts


def test_abstracts_have_one_section_label_per_paragraph(abstracts: ItemSet) -> None:
    for item in abstracts:
        paragraphs = item.data["context"].split("\n\n")
        assert item.metadata["context_labels"] == SECTIONS, item.id
        assert len(paragraphs) == len(item.metadata["context_labels"]), item.id
        for paragraph in paragraphs:
            assert paragraph == paragraph.strip() and "\n" not in paragraph, item.id
            assert len(SENTENCE_END.split(paragraph)) >= 3, f"{item.id}: {paragraph[:40]!r}"
        assert not ABBREVIATIONS.search(item.data["context"]), item.id


def test_abstract_answers_cover_yes_no_maybe_evenly(abstracts: ItemSet) -> None:
    counts = Counter(a.answer for a in abstracts)
    assert set(counts) == {"yes", "no", "maybe"}
    assert max(counts.values()) - min(counts.values()) <= 1, counts


def test_abstracts_are_what_the_pubmedqa_importer_writes(
    abstracts: ItemSet, tmp_path: Path
) -> None:
    """Written as PubMedQA records and imported, the abstracts come back member for member."""
    source = {
        f"9{n:07d}": {
            "QUESTION": a.data["question"],
            "CONTEXTS": a.data["context"].split("\n\n"),
            "LABELS": a.metadata["context_labels"],
            "final_decision": a.answer,
        }
        for n, a in enumerate(abstracts, start=1)
    }
    src = tmp_path / "ori_pqal.json"
    src.write_text(json.dumps(source, indent=1), encoding="utf-8")
    import_dataset("pubmedqa", src, tmp_path / "imported.jsonl")
    imported = load_items(tmp_path / "imported.jsonl")
    for ours, theirs in zip(abstracts, imported, strict=True):
        assert {**ours.data, "id": theirs.id} == dict(theirs.data), ours.id


# ---------------------------------------------------------------- prompts and studies


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_each_study_passes_the_lock_checks(studies: dict[str, Path], name: str) -> None:
    study = load_study(studies[name])
    assert validate_for_lock(study) == []


def test_ledger_arms_shows_every_seed_condition(studies: dict[str, Path]) -> None:
    result = ledger("arms", studies["mcq"], "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["problems"] == []
    assert {c["arm"]: c["holds"] for c in shown["claims"]} == {"zs_cot": True, "answer_only": True}
    arms = {a["id"]: a for a in shown["arms"]}
    assert len(arms) == 11
    fewshot = {a.get("fewshot") for a in arms.values()} - {None}
    assert len(fewshot) == 7


def test_every_prompt_file_is_used_by_a_checked_study(studies: dict[str, Path]) -> None:
    used: set[str] = set()
    for root in studies.values():
        spec = tomllib.loads((root / "study.toml").read_text(encoding="utf-8"))
        used.update(spec["components"].values())
        used.add(spec["prompt"]["item"])
        used.update(fs["answer"] for fs in spec.get("fewshot", {}).values())
    files = {f"prompts/{p.name}" for p in PROMPTS.iterdir()}
    assert files == used


def test_every_arm_renders_every_item(renderers: dict[str, Renderer]) -> None:
    for renderer in renderers.values():
        study = renderer.study
        assert renderer.items is not None
        for arm in study.arms:
            for item in renderer.items:
                for model in study.models or {}:
                    body = renderer.body(arm, model, item.id)
                    text = body["messages"][-1]["content"][-1]["text"]
                    assert item.data["question"] in text
                    assert "{" not in text.replace(item.data["question"], "")


def seed_mcq(item_text: str, intro: str, ask: str) -> str:
    return f"{intro}\n\n{item_text}\n\n{ask}\n"


def options_block(item: object) -> str:
    return "\n".join(f"{label}. {text}" for label, text in zip(LABELS, item.options, strict=True))  # type: ignore[attr-defined]


def test_the_core_prompts_have_the_seeds_wording(
    renderers: dict[str, Renderer], items: ItemSet
) -> None:
    """Appendix A of the seed, one option per line (its two-per-line layout is typesetting)."""
    mcq, bare = renderers["mcq"], renderers["answer_only"]
    for item in items:
        q = item.data["question"]
        block = f"Question: {q}\n\n{options_block(item)}"
        direct = mcq.body("zs_direct", "medgemma_4b", item.id)
        expected = seed_mcq(
            block,
            "Answer the following medical question by selecting the correct option.",
            "Answer with just the letter (A, B, C, or D):",
        )
        assert direct["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": expected}]}
        ]
        assert direct["system"] == "You are a helpful medical assistant."
        assert direct["temperature"] == 0
        cot = mcq.body("zs_cot", "medgemma_4b", item.id)
        assert cot["messages"][-1]["content"][0]["text"] == seed_mcq(
            block,
            "Answer the following medical question.\nThink step by step.",
            "Let's think step by step, then provide the answer as a single letter (A, B, C, or D):",
        )
        sampled = mcq.body("sc_cot", "medgemma_27b", item.id)
        assert sampled["messages"] == cot["messages"]
        assert (sampled["temperature"], sampled["top_p"], sampled["top_k"]) == (0.7, 0.95, 50)
        answer_only = bare.body("answer_only", "medgemma_4b", item.id)
        assert answer_only["messages"][-1]["content"][0]["text"] == f"{q}\n{options_block(item)}\n"


def test_few_shot_examples_are_prepended_with_their_answers(
    renderers: dict[str, Renderer], items: ItemSet, examples: ItemSet
) -> None:
    mcq = renderers["mcq"]
    item = items.by_id["m01"]
    curated = [examples.by_id[i] for i in ("e05", "e12", "e19")]
    text = mcq.body("fs_direct", "medgemma_4b", item.id)["messages"][-1]["content"][0]["text"]
    shots = "\n\n".join(
        f"Question: {e.data['question']}\n\n{options_block(e)}\nAnswer: {e.answer}" for e in curated
    )
    assert text == (
        "Answer the following medical question by selecting the correct option.\n\n"
        f"{shots}\n\nQuestion: {item.data['question']}\n\n{options_block(item)}\n\n"
        "Answer with just the letter (A, B, C, or D):\n"
    )
    cot = mcq.body("fs_cot", "medgemma_4b", item.id)["messages"][-1]["content"][0]["text"]
    for e in curated:
        assert f"{options_block(e)}\n{e.data['rationale']}\nAnswer: {e.answer}\n" in cot
    # the test item's key never appears as an answer line
    assert cot.count("Answer: ") == len(curated)


def test_the_evidence_prompts_have_the_seeds_wording(
    renderers: dict[str, Renderer], abstracts: ItemSet
) -> None:
    for item in abstracts:
        q, context = item.data["question"], item.data["context"]
        full = renderers["evidence"].body("evidence", "medgemma_4b", item.id)
        assert full["messages"][-1]["content"][0]["text"] == (
            "Based on the following context, answer the research question.\n\n"
            f"Context: {context}\nQuestion: {q}\n\n"
            "Answer with one word: yes, no, or maybe.\n"
        )
        alone = renderers["question_only"].body("evidence", "medgemma_4b", item.id)
        text = alone["messages"][-1]["content"][0]["text"]
        assert text == (
            "Answer the following research question.\n\n"
            f"Question: {q}\n\nAnswer with one word: yes, no, or maybe.\n"
        )


# ---------------------------------------------------------------- end to end (slow)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mcq", "evidence"])
def test_the_draft_studies_run_end_to_end_and_verify(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Locked, run on the simulated backend, scored, analysed, exported and verified: the
    verifier re-renders every request (inline few-shot examples included) from these files."""
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    key = tmp_path / "owner.key"
    SigningKey.generate("mcq-data.example/owner").save(key)
    root = tmp_path / name
    shutil.copytree(DATA, root / "data")
    shutil.copytree(PROMPTS, root / "prompts")
    (root / "study.toml").write_text(STUDIES[name], encoding="utf-8")
    archive = tmp_path / "archive"
    for command in (
        ["lock", root, "--key", key],
        ["run", root, "--backend", "simulated", "--key", key],
        ["score", root, "--key", key],
        ["unblind", root, "--key", key],
        ["analyze", root, "--key", key],
        ["export", root, archive, "--key", key],
        ["verify", archive],
    ):
        result = ledger(*command)
        assert result.exit_code == 0, (command[0], result.output)
