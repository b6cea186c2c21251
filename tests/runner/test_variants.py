"""Per-item variants (docs/variants.md): the transformations, a study end to end, bad input.

The runner (``runner/_variants.py``) and the verifier (``verify/_variants.py``) are two
implementations of one page; every kind is applied by both to the same items and must agree.
One module-scoped study with variants on a one-``[model]`` study (trial ids ``arm||item|v|rep``)
is locked, run on the simulated backend, scored, unblinded, analysed, exported and verified;
tampers then change an item, a variant definition or the stop-word list and must fail naming
the trial. Each bad input of issue 16 is refused at lock naming the item and the variant,
with nothing appended.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import cli_export, fixed_key, science_skipped

from ledger import Ledger
from ledger.cli import main
from runner import _variants as rv
from runner._items import Item
from runner._request import RequestBuilder, Trial
from runner.simulated._text import SimulatedTextModel
from runner.spec import load_study
from tests.verify.test_archive_tamper import failed, passed, read_events
from tests.verify.test_verify_text_study import forge, relocked_report
from verify import verify_archive
from verify._variants import VariantError, Variants

CONTEXT = (
    "Scurvy was common among sailors on long voyages. Fresh food was scarce at sea!\n\n"
    "Sailors given citrus fruit did not develop scurvy. Those given cider did (p < 0.01).\n\n"
    "Vitamin C prevents scurvy."
)
LABELS = ["BACKGROUND", "RESULTS", "CONCLUSIONS"]


def item(i: int, answer: str = "B", n: int = 4) -> dict[str, Any]:
    return {
        "id": f"q{i}",
        "question": f"Does vitamin C prevent scurvy in sailors, case {i}?",
        "options": [f"option {i}-{k}" for k in range(n)],
        "answer": answer,
        "context": CONTEXT,
        "metadata": {"context_labels": LABELS},
    }


STOPWORDS = "# a few stop words\nthe\nin\ndoes\ncase\n"

DECLARED: dict[str, dict[str, Any]] = {
    "original": {"kind": "identity"},
    "rot1": {"kind": "rotate", "k": 1},
    "rot3": {"kind": "rotate", "k": 3},
    "rev": {"kind": "reverse"},
    "swap": {"kind": "swap-distractors"},
    "s42": {"kind": "shuffle", "seed": "42"},
    "dcba": {"kind": "order", "order": "DCBA"},
    "first": {"kind": "keep-first", "field": "context", "fraction": 0.5},
    "last": {"kind": "keep-last", "field": "context", "fraction": 0.25},
    "middle": {"kind": "keep-middle", "field": "context", "fraction": 0.3},
    "prefix": {"kind": "keep-sentences-prefix", "field": "context", "fraction": 0.5},
    "first2": {"kind": "keep-first-sentences", "field": "context", "count": 2},
    "last2": {"kind": "keep-last-sentences", "field": "context", "count": 2},
    "results": {
        "kind": "keep-sections",
        "field": "context",
        "labels": ["RESULTS"],
        "labels_from": "context_labels",
    },
    "salient": {
        "kind": "keep-salient",
        "field": "context",
        "count": 2,
        "query": "question",
        "stopwords": "stop.txt",
    },
    "noctx": {"kind": "drop-field", "field": "context"},
    "all": {"kind": "all-orders"},
}


def runner_variants(option_count: int = 4) -> list[rv.Variant]:
    stop = rv.read_stopwords(STOPWORDS.encode(), "stop.txt")
    specs = [
        rv.VariantSpec(
            name,
            t["kind"],
            {k: v for k, v in t.items() if k != "kind"},
            stop if t["kind"] == "keep-salient" else None,
        )
        for name, t in DECLARED.items()
    ]
    return rv.expand(specs, [option_count])


def verifier_variants(order: list[str], option_count: int = 4) -> Variants:
    protocol = {"variants": DECLARED, "variant_order": order}
    return Variants(
        protocol, lambda p: STOPWORDS.encode() if p == "stop.txt" else None, [option_count]
    )


# ------------------------------------------------------------------------------ the page


def test_the_shuffle_vector_of_the_docs() -> None:
    """docs/variants.md §2.5: seed 42, item q1, four options -> "ADBC", by hashlib alone."""
    a = [0, 1, 2, 3]
    for i in (3, 2, 1):
        j = int(hashlib.sha256(f"42|q1|{i}".encode()).hexdigest(), 16) % (i + 1)
        a[i], a[j] = a[j], a[i]
    expected = "".join("ABCD"[p] for p in a)
    assert rv.shuffle_order("42", "q1", 4) == expected
    assert expected == "ADBC"  # the worked example printed in docs/variants.md


def test_runner_and_verifier_agree_on_every_kind_and_item() -> None:
    variants = runner_variants()
    names = [v.name for v in variants]
    assert names[-24:] == [f"all-{i}" for i in range(1, 25)]
    checker = verifier_variants(names)
    for i in range(1, 13):
        for answer in "ABCD":
            data = item(i, answer)
            original = Item(data["id"], data, i)
            for variant in variants:
                mine = rv.apply(variant, original)
                theirs = checker.apply(variant.name, data)
                assert dict(mine.data) == theirs, (variant.name, data["id"], answer)
                order = rv.variant_order(variant, original)
                assert order == checker.order_for(variant.name, data)
                if order is not None:  # the remapped key is the original key's option
                    assert (
                        mine.options[mine.labels.index(mine.answer)]
                        == data["options"]["ABCD".index(answer)]
                    )
                    assert rv.back_map(order, mine.answer) == answer


def test_permutations_follow_the_page() -> None:
    data = item(1, "B")
    original = Item("q1", data, 1)
    by_name = {v.name: v for v in runner_variants()}
    assert rv.order_of(by_name["rot1"], original) == "DABC"  # each option one place later
    assert rv.apply(by_name["rot1"], original).answer == "C"
    assert rv.order_of(by_name["rev"], original) == "DCBA"
    assert rv.order_of(by_name["swap"], original) == "CBAD"  # distractors A, C swap; B stays
    assert rv.order_of(by_name["all-1"], original) == "ABCD"
    assert rv.order_of(by_name["all-24"], original) == "DCBA"


def test_text_transformations_keep_what_their_names_say() -> None:
    data = item(1)
    original = Item("q1", data, 1)
    by_name = {v.name: v for v in runner_variants()}
    words = CONTEXT.split()
    count = len(words)  # 31
    half = int(count * 0.5 + 0.5)
    first = rv.apply(by_name["first"], original).data["context"]
    assert first.split() == words[:half] and first.startswith("Scurvy was common")
    assert "\n\n" in first  # verbatim slice: the paragraph break survives
    last = rv.apply(by_name["last"], original).data["context"]
    assert last.split() == words[count - max(1, int(count * 0.25 + 0.5)) :]
    sentences = [
        "Scurvy was common among sailors on long voyages.",
        "Fresh food was scarce at sea!",
        "Sailors given citrus fruit did not develop scurvy.",
        "Those given cider did (p < 0.01).",
        "Vitamin C prevents scurvy.",
    ]
    assert [CONTEXT[s:e] for s, e, _ in rv.sentences(CONTEXT)] == sentences
    assert rv.apply(by_name["first2"], original).data["context"] == (
        "Scurvy was common among sailors on long voyages. Fresh food was scarce at sea!"
    )
    assert rv.apply(by_name["last2"], original).data["context"] == (
        "Those given cider did (p < 0.01).\n\nVitamin C prevents scurvy."
    )
    assert rv.apply(by_name["results"], original).data["context"] == (
        "Sailors given citrus fruit did not develop scurvy. Those given cider did (p < 0.01)."
    )
    # query words: vitamin, c, prevent, scurvy, sailors, 1 -> sentence 5 (vitamin, c, scurvy)
    # and sentence 1 (scurvy, sailors) and 3 (sailors, scurvy) tie on 2: the earlier wins
    assert rv.apply(by_name["salient"], original).data["context"] == (
        "Scurvy was common among sailors on long voyages. Vitamin C prevents scurvy."
    )
    prefix = rv.apply(by_name["prefix"], original).data["context"]
    assert prefix == (
        "Scurvy was common among sailors on long voyages. Fresh food was scarce at sea!"
    )
    assert "context" not in rv.apply(by_name["noctx"], original).data


# ------------------------------------------------------------------------------ a study

SPEC = """\
[study]
id = "variant-pilot"
title = "Option orders and evidence truncation"

[model]
provider = "anthropic"
id = "claude-sonnet-4-6"
max_tokens = 16
temperature = 0.0

[components]
task = "prompts/task.txt"

[prompt]
item = "prompts/item.txt"

[variants.original]
kind = "identity"

[variants.rot1]
kind = "rotate"
k = 1

[variants.swap]
kind = "swap-distractors"

[variants.s42]
kind = "shuffle"
seed = 42

[variants.first-half]
kind = "keep-first"
field = "context"
fraction = 0.5

[variants.results]
kind = "keep-sections"
field = "context"
labels = ["RESULTS"]

[variants.salient]
kind = "keep-salient"
field = "context"
count = 2
stopwords = "stop.txt"

[arms.A]
role = "full"
components = ["task"]

[arms.B]
role = "vehicle"
components = []
variants = ["original", "rot1"]

[stimuli]
items = "items.jsonl"

[design]
replicates = 1
seed = 5
bootstrap_seed = 6
bootstrap_iterations = 200

[response]
parser = "multiple-choice"
mode = "first-token"

[[hypotheses]]
id = "H1"
description = "The task text helps."
contrast = ["A", "B"]
test = "mcnemar"
alpha = 0.05

[analysis]
exclude_unparseable = false
"""
ITEMS = [item(i, "ABCD"[i % 4]) for i in range(1, 5)]


def write_study(root: Path, spec: str = SPEC, items: list[dict[str, Any]] | None = None) -> Path:
    files = {
        "study.toml": spec,
        "prompts/task.txt": "Answer with the letter of the right option.\n",
        "prompts/item.txt": "Context: {context}\nQuestion: {question}\n{options}\n",
        "items.jsonl": "".join(json.dumps(r) + "\n" for r in (items or ITEMS)),
        "stop.txt": STOPWORDS,
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    base = tmp_path_factory.mktemp("variants")
    mp = pytest.MonkeyPatch()
    mp.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
    try:
        key = base / "owner.key"
        fixed_key("variant-pilot/owner").save(key)
        root = write_study(base / "study")
        out = base / "archive"
        cli_export(root, key, out)
        yield root, out
    finally:
        mp.undo()


@pytest.fixture
def copy_(built: tuple[Path, Path], tmp_path: Path) -> Path:
    target = tmp_path / "archive"
    shutil.copytree(built[1], target)
    return target


def rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text("utf-8"))))


def test_the_variant_study_verifies(built: tuple[Path, Path]) -> None:
    _, archive = built
    report = verify_archive(archive)
    assert report.ok, [c for c in report.checks if c.status.name == "FAIL"]
    for name in ("schedule", "requests", "rescore", "reanalysis"):
        passed(report, name)
    protocol = next(e for e in read_events(archive) if e["kind"] == "protocol.locked")["body"]
    assert protocol["variant_order"] == [
        "original",
        "rot1",
        "swap",
        "s42",
        "first-half",
        "results",
        "salient",
    ]
    assert protocol["variants"]["s42"] == {"kind": "shuffle", "seed": "42"}
    assert protocol["arms"]["B"]["variants"] == ["original", "rot1"]
    assert any(r.endswith("stop.txt") for r in protocol["manifest"])


def test_the_schedule_crosses_arms_items_and_variants(built: tuple[Path, Path]) -> None:
    _, archive = built
    schedule = rows(archive / "trials" / "schedule.csv")
    assert list(schedule[0]) == [
        "position",
        "arm_code",
        "model",
        "stimulus",
        "variant",
        "rep",
        "trial",
    ]
    assert len(schedule) == 4 * 7 + 4 * 2
    ids = {r["trial"] for r in schedule}
    assert "A||q1|s42|1" in ids and "B||q3|rot1|1" in ids and "B||q3|swap|1" not in ids
    assert all(r["model"] == "" for r in schedule)


def test_requests_show_the_varied_item(built: tuple[Path, Path]) -> None:
    root, _ = built
    study = load_study(root, strict=False)
    builder = RequestBuilder(study)
    text = builder.body(Trial.from_id("A||q2|rot1|1", 1))["messages"][-1]["content"][-1]["text"]
    options = ITEMS[1]["options"]
    assert f"A. {options[3]}\nB. {options[0]}\nC. {options[1]}\nD. {options[2]}" in text
    text = builder.body(Trial.from_id("A||q2|results|1", 1))["messages"][-1]["content"][-1]["text"]
    assert "Context: Sailors given citrus fruit" in text and "Scurvy was common" not in text


def test_scored_rows_carry_the_variant_and_the_answer_mapped_back(
    built: tuple[Path, Path],
) -> None:
    _, archive = built
    items = rows(archive / "analysis" / "items.csv")
    assert list(items[0]) == [
        "trial",
        "arm",
        "model",
        "stimulus",
        "variant",
        "order",
        "rep",
        "row",
        "position",
        "truth",
        "answer",
        "correct",
        "truth_original",
        "answer_original",
    ]
    keys = {i["id"]: i["answer"] for i in ITEMS}
    for row in items:
        assert row["truth_original"] == keys[row["stimulus"]]
        if row["variant"] == "rot1":
            assert row["order"] == "DABC"
            assert row["truth"] == "ABCD"[("ABCD".index(keys[row["stimulus"]]) + 1) % 4]
        if row["order"] and row["answer"] in "ABCD" and row["answer"]:
            assert row["answer_original"] == row["order"]["ABCD".index(row["answer"])]
        if row["variant"] in ("first-half", "results", "salient"):
            assert row["order"] == "" and row["truth"] == row["truth_original"]
    trials = rows(archive / "analysis" / "trials.csv")
    assert {t["variant"] for t in trials} == {
        "original",
        "rot1",
        "swap",
        "s42",
        "first-half",
        "results",
        "salient",
    }


# ------------------------------------------------------------------------------ tampers


def test_an_item_changed_after_lock_fails_naming_the_trial(copy_: Path) -> None:
    with science_skipped():
        report = relocked_report(
            copy_, "items.jsonl", lambda b: b.replace(b"option 2-3", b"option 2-X")
        )
    passed(report, "signatures")
    assert "items.jsonl" in failed(report, "protocol")
    reason = failed(report, "requests")
    assert "A||q2|" in reason and "option 2-3" in reason


def test_a_variant_definition_changed_after_lock_fails_naming_the_trial(copy_: Path) -> None:
    """A forger changes rotate k from 1 to 2 in protocol.locked and re-signs everything."""
    events = read_events(copy_)
    protocol = next(e for e in events if e["kind"] == "protocol.locked")
    protocol["body"]["variants"]["rot1"]["k"] = 2
    forge(copy_, events)
    report = verify_archive(copy_)
    passed(report, "signatures")
    reason = failed(report, "requests")
    assert "|rot1|1" in reason
    assert "does not re-score" in failed(report, "rescore")


def test_a_malformed_variant_definition_is_a_failure_not_a_crash(copy_: Path) -> None:
    events = read_events(copy_)
    protocol = next(e for e in events if e["kind"] == "protocol.locked")
    protocol["body"]["variants"]["first-half"]["fraction"] = "half"
    forge(copy_, events)
    report = verify_archive(copy_)
    reason = failed(report, "requests")
    assert "variants.first-half.fraction: 'half'" in reason


def test_a_changed_stopword_list_fails_naming_the_trial(copy_: Path) -> None:
    with science_skipped():
        report = relocked_report(copy_, "stop.txt", lambda b: b + b"vitamin\nc\n")
    passed(report, "signatures")  # a careful forger: the manifest names the new hash
    assert "|salient|1" in failed(report, "requests")


def test_a_variant_removed_from_the_order_fails_the_schedule(copy_: Path) -> None:
    events = read_events(copy_)
    protocol = next(e for e in events if e["kind"] == "protocol.locked")
    protocol["body"]["variant_order"].remove("swap")
    forge(copy_, events)
    with science_skipped():
        report = verify_archive(copy_)
    assert "variant_order" in failed(report, "schedule") or "schedule" in failed(report, "schedule")


# ------------------------------------------------------------------------------ bad input


def lock_fails(tmp_path: Path, spec: str, items: list[dict[str, Any]] | None = None) -> str:
    root = write_study(tmp_path / "study", spec, items)
    key = tmp_path / "owner.key"
    fixed_key("variant-pilot/owner").save(key)
    mp = pytest.MonkeyPatch()
    mp.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    try:
        result = CliRunner().invoke(main, ["lock", str(root), "--key", str(key)])
    finally:
        mp.undo()
    assert result.exit_code != 0, result.output
    db = root / "ledger.db"
    if db.exists():  # nothing appended: no protocol, no artifact
        with Ledger.open(db, readonly=True) as log:
            assert not list(log.events("protocol.locked"))
            assert not list(log.events("artifact.locked"))
    return result.output


def with_variant(table: str) -> str:
    return SPEC.replace("[arms.A]", table + "\n[arms.A]")


def test_rotate_5_on_four_options_is_refused_naming_item_and_variant(tmp_path: Path) -> None:
    out = lock_fails(tmp_path, with_variant('[variants.rot5]\nkind = "rotate"\nk = 5\n'))
    assert (
        "items.jsonl:1: item 'q1', variant 'rot5' (rotate): cannot rotate 4 options by k = 5"
    ) in out


def test_truncating_a_missing_field_is_refused_naming_item_and_variant(tmp_path: Path) -> None:
    spec = with_variant('[variants.hist]\nkind = "keep-first"\nfield = "history"\nfraction = 0.5\n')
    out = lock_fails(tmp_path, spec)
    assert "item 'q1', variant 'hist' (keep-first): the item has no text field 'history'" in out


def test_an_order_that_loses_the_key_is_refused(tmp_path: Path) -> None:
    out = lock_fails(tmp_path, with_variant('[variants.bad]\nkind = "order"\norder = "ACCD"\n'))
    assert "variant 'bad' (order): order 'ACCD' is not a permutation" in out
    assert "the key B would be lost" in out  # q1's key is B


def test_a_permutation_that_does_not_remap_the_key_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should the permutation code ever leave the key where it was, lock refuses it."""
    real = rv.permute

    def broken(item: Item, order: str) -> Item:
        varied = real(item, order)
        return Item(item.id, {**varied.data, "answer": item.answer}, item.line)

    monkeypatch.setattr(rv, "permute", broken)
    out = lock_fails(tmp_path, SPEC)
    assert "variant 'rot1': the permutation 'DABC' does not remap the key" in out


def test_sections_without_one_label_per_paragraph_are_refused(tmp_path: Path) -> None:
    items = [dict(ITEMS[0], metadata={"context_labels": ["BACKGROUND"]}), *ITEMS[1:]]
    out = lock_fails(tmp_path, SPEC, items)
    assert "item 'q1', variant 'results' (keep-sections)" in out
    assert "3 paragraph(s) but metadata 'context_labels' has 1 labels" in out


def test_all_orders_over_items_of_different_sizes_is_refused(tmp_path: Path) -> None:
    items = [*ITEMS[:3], item(4, "A", n=3)]
    out = lock_fails(tmp_path, with_variant('[variants.every]\nkind = "all-orders"\n'), items)
    assert "variant 'every' (all-orders): the items have 3, 4 options" in out


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            '[variants.x]\nkind = "rotate"\nk = 1\nseed = 3\n',
            "variants.x.seed: does not apply to kind 'rotate' (it takes k)",
        ),
        (
            '[variants.x]\nkind = "rotate"\nkk = 1\n',
            "[variants.x] kk: unknown key (did you mean 'k'?)",
        ),
        ('[variants.x]\nkind = "spin"\n', "variants.x.kind: unknown kind 'spin'"),
        (
            '[variants.x]\nkind = "keep-first"\nfield = "context"\nfraction = 1.5\n',
            "variants.x.fraction: must be a number between 0 and 1",
        ),
        ('[variants.x]\nkind = "rotate"\n', "variants.x.k: missing (kind 'rotate' needs it)"),
    ],
)
def test_bad_variant_tables_are_refused_naming_the_line(
    tmp_path: Path, table: str, message: str
) -> None:
    out = lock_fails(tmp_path, with_variant(table))
    assert message in out
    assert "study.toml:" in out


def test_an_arm_naming_an_unknown_variant_is_refused(tmp_path: Path) -> None:
    out = lock_fails(
        tmp_path, SPEC.replace('variants = ["original", "rot1"]', 'variants = ["original", "rot2"]')
    )
    assert "arms.B.variants: unknown variant 'rot2'" in out


def test_the_verifier_refuses_an_order_that_is_not_the_expansion() -> None:
    names = [v.name for v in runner_variants()]
    names[-2], names[-1] = names[-1], names[-2]
    with pytest.raises(VariantError, match="is not the expansion"):
        verifier_variants(names)


# ------------------------------------------------------------------------------ the simulation


def mc_request(question: str, options: list[str], shots: int, model: str = "m-1") -> dict[str, Any]:
    """A Messages request as docs/prompts.md renders one: ``shots`` worked examples as turns."""
    messages: list[dict[str, Any]] = []
    for k in range(shots):
        example = f"Question: Example {k}?\nA. one\nB. two\nC. three\nD. four\n"
        messages.append({"role": "user", "content": [{"type": "text", "text": example}]})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": "Answer: B"}]})
    lines = "\n".join(f"{'ABCD'[i]}. {text}" for i, text in enumerate(options))
    text = f"Question: {question}\n{lines}\n"
    messages.append({"role": "user", "content": [{"type": "text", "text": text}]})
    return {"model": model, "max_tokens": 16, "temperature": 0, "messages": messages}


def test_the_simulated_model_favours_a_more_with_examples_and_flips_on_reordering() -> None:
    """Seed 002's phenomena, from the prompt and options alone (docs/simulated.md)."""
    from analysis._parse import parse_response

    model = SimulatedTextModel()
    words = ["heart", "lung", "liver", "kidney", "spleen", "brain", "skin", "bone"]

    def answer(request: dict[str, Any]) -> str | None:
        raw = json.dumps(model.respond(request, "s")).encode()
        return parse_response(raw, "anthropic-messages", "multiple-choice").answer

    expected: dict[int, float] = {}
    observed: dict[int, float] = {}
    flips = by_content = total = 0
    for shots in (0, 3):
        picks, mass = [], 0.0
        for i in range(300):
            options = [f"{words[(i + k) % 8]} {i}-{k}" for k in range(4)]
            question = f"Which organ matters in case {i}?"
            request = mc_request(question, options, shots)
            mass += dict(model.letter_distribution(request))["A"]
            first = answer(request)
            picks.append(first)
            if shots == 0:  # rotate-1 (docs/variants.md §2.2): order DABC
                rotated = [options[3], options[0], options[1], options[2]]
                second = answer(mc_request(question, rotated, shots))
                if first and second:
                    total += 1
                    flips += first != second
                    by_content += options["ABCD".index(first)] != rotated["ABCD".index(second)]
        expected[shots] = mass / 300
        observed[shots] = picks.count("A") / len(picks)
    # a prior towards A that examples strengthen: the model's own probability of A, and what
    # it answered, both above the quarter of a position-blind reader
    assert expected[3] > expected[0] > 0.25, expected
    assert observed[3] > 0.25 and observed[0] > 0.25, observed
    assert flips / total > 0.2 and by_content < flips  # letters flip more often than contents


def test_the_letter_distribution_gives_log_probabilities_from_the_prompt_alone() -> None:
    model = SimulatedTextModel()
    options = ["Liver", "Lung", "Heart pumps blood", "Skin"]
    request = mc_request("Which organ pumps blood?", options, 0)
    dist = dict(model.letter_distribution(request))
    assert math.isclose(sum(dist.values()), 1.0)
    assert max(dist, key=lambda k: dist[k]) == model.reader_answer(request) == "C"
    data = model.respond_openai({**request, "logprobs": True, "top_logprobs": 4}, "s")
    top = data["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    assert top[0]["token"] == "C"
    assert {t["token"]: t["logprob"] for t in top} == {k: math.log(v) for k, v in dist.items()}


def test_the_notebook_frames_carry_the_variant(built: tuple[Path, Path]) -> None:
    from analysis import load

    _, archive = built
    frames = load(archive)
    assert set(frames.trials["variant"]) == {
        "original",
        "rot1",
        "swap",
        "s42",
        "first-half",
        "results",
        "salient",
    }
    rot = frames.items[frames.items["variant"] == "rot1"]
    assert set(rot["order"]) == {"DABC"}
    answered = rot[rot["answer"].notna()]
    assert all(
        o == "DABC"["ABCD".index(a)]
        for a, o in zip(answered["answer"], answered["answer_original"], strict=True)
    )


def test_dropping_a_field_the_template_places_is_refused_naming_the_slot(tmp_path: Path) -> None:
    table = '[variants.noctx]\nkind = "drop-field"\nfield = "context"\n'
    out = lock_fails(tmp_path, with_variant(table))
    assert "prompts/item.txt:1:10: slot {context}: variant 'noctx' (drop-field) removes" in out


def test_an_arm_naming_an_order_beyond_the_expansion_is_refused(tmp_path: Path) -> None:
    spec = with_variant('[variants.every]\nkind = "all-orders"\n').replace(
        'variants = ["original", "rot1"]', 'variants = ["original", "every-99"]'
    )
    out = lock_fails(tmp_path, spec)
    assert "arms.B.variants: 'every-99' is not a variant of the study" in out


def test_the_mcq_trials_table_has_what_the_statistics_need(built: tuple[Path, Path]) -> None:
    """The MCQ statistics' trials table from the dataset: keys remapped, answers mapped back."""
    from analysis._analyze import load_dataset
    from analysis.mcq._rows import MCQ_COLUMNS, mcq_trials

    root, _ = built
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        ds = load_dataset(log, parser="multiple-choice", variants=True)
    table = mcq_trials(ds)
    assert list(table.columns) == list(MCQ_COLUMNS)
    assert len(table) == 4 * 7 + 4 * 2 and table["trial"].is_unique
    keys = {i["id"]: i["answer"] for i in ITEMS}
    for row in table.to_dict("records"):
        assert row["key_original"] == keys[row["item"]]
        assert (row["letter"] is None) == (row["answer"] is None) == (row["parse"] != "ok")
        if row["letter"] is not None:
            assert row["correct"] == (row["letter"] == row["key"])
            assert row["correct"] == (row["answer"] == row["key_original"])
        else:
            assert row["correct"] is False
    rot = table[table["variant"] == "rot1"]
    assert all(
        k == "ABCD"[("ABCD".index(o) + 1) % 4]
        for k, o in zip(rot["key"], rot["key_original"], strict=True)
    )


def test_the_viewer_filters_an_unblinded_variant_study_by_variant(
    built: tuple[Path, Path],
) -> None:
    from starlette.testclient import TestClient

    from analysis.view._app import make_app
    from analysis.view._viewer import open_viewer

    _, archive = built
    viewer = open_viewer(archive, verify=False)
    try:
        c = TestClient(make_app(viewer), base_url="http://127.0.0.1")
        schedule = rows(archive / "trials" / "schedule.csv")
        declared = sorted({r["variant"] for r in schedule})
        assert viewer.choices()["variant"] == declared
        for name in declared:
            got = c.get(f"/trials?variant={name}&format=json&per_page=500").json()
            assert got["total"] == sum(r["variant"] == name for r in schedule)
            assert {r["variant"] for r in got["rows"]} == {name}
        assert 'id="filter-variant"' in c.get("/trials").text
    finally:
        viewer.index.close()
