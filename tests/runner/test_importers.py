"""``ledger items import``: each public dataset's own file format, through the real command, into
an item file that ``load_items`` reads back; and the refusals (a missing field, malformed JSON,
an existing DEST, ...), each naming the file, the line and the field, with nothing written.

The datasets' files are small invented records in each dataset's published format, under
tests/fixtures/datasets/ (no network, no real dataset content).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from locations import TESTS_DIR

from ledger.cli import main
from runner._importers import FORMATS, DatasetError, convert, import_dataset, item_id_for
from runner._items import ITEM_ID_RE, ItemSet, load_items

DATA = TESTS_DIR / "fixtures" / "datasets"


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], prog_name="ledger")


def imported(fmt: str, src: Path, dest: Path, *extra: str) -> ItemSet:
    """Import through the CLI; the file written loads with load_items (which it returns)."""
    result = run("items", "import", "--format", fmt, src, dest, *extra)
    assert result.exit_code == 0, result.output
    assert f"into {dest}" in result.output
    items = load_items(dest)
    assert f"items digest: {items.sha256}" in result.output
    return items


def refused(result: Result, *fragments: str | Path) -> str:
    """Exit 1, no traceback, one ``Error:`` message holding every fragment; return it."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output, result.output
    assert result.output.startswith("Error: "), result.output
    for fragment in fragments:
        assert str(fragment) in result.output, f"{fragment!r} not in {result.output!r}"
    return result.output


def lines(path: Path, *rows: object) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# ---------------------------------------------------------------------- each dataset


def test_medmcqa_github_release_counts_cop_from_one(tmp_path: Path) -> None:
    items = imported("medmcqa", DATA / "medmcqa" / "dev.json", tmp_path / "mm.jsonl")
    first, second, third = items
    assert first.id == "7f3b2c1e-5a4d-4e8f-9b0a-1c2d3e4f5a61"  # the dataset's own id
    assert first.options == (
        "Radial nerve",
        "Axillary nerve",
        "Musculocutaneous nerve",
        "Suprascapular nerve",
    )
    assert [i.answer for i in items] == ["B", "D", "A"]  # cop 2, 4, 1
    assert first.data["rationale"].startswith("The deltoid is supplied by the axillary nerve")
    assert "rationale" not in second.data and "rationale" not in third.data  # null, ""
    assert first.metadata == {"subject": "Anatomy", "topic": "Upper limb", "choice_type": "single"}
    assert second.metadata == {"subject": "Pharmacology", "choice_type": "single"}  # topic null
    assert third.metadata["choice_type"] == "multi"


def test_medmcqa_hugging_face_file_counts_cop_from_zero_same_items(tmp_path: Path) -> None:
    github = imported("medmcqa", DATA / "medmcqa" / "dev.json", tmp_path / "a.jsonl")
    hf = imported("medmcqa", DATA / "medmcqa" / "validation.jsonl", tmp_path / "b.jsonl")
    assert [i.answer for i in hf] == ["B", "D", "A"]  # cop 1, 3, 0
    assert hf.sha256 == github.sha256
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_medmcqa_cop_numbering_that_cannot_be_told(tmp_path: Path) -> None:
    src = DATA / "medmcqa" / "dev.json"
    records = [json.loads(line) for line in src.read_text().splitlines()]
    only_middle = lines(tmp_path / "dev.json", *({**r, "cop": 2} for r in records))
    dest = tmp_path / "mm.jsonl"
    refused(
        run("items", "import", "--format", "medmcqa", only_middle, dest),
        only_middle,
        "cannot tell whether 'cop' counts from 0",
        "--cop-base",
    )
    assert not dest.exists()
    as_zero = imported("medmcqa", only_middle, dest, "--cop-base", "0")
    assert {i.answer for i in as_zero} == {"C"}
    as_one = imported("medmcqa", only_middle, tmp_path / "one.jsonl", "--cop-base", "1")
    assert {i.answer for i in as_one} == {"B"}

    both = lines(tmp_path / "both.json", {**records[0], "cop": 0}, {**records[1], "cop": 4})
    refused(
        run("items", "import", "--format", "medmcqa", both, tmp_path / "x.jsonl"),
        "0 in some records and 4 in others",
    )
    out_of_range = lines(tmp_path / "bad.json", {**records[0], "cop": 4})
    refused(
        run(
            "items",
            "import",
            "--format",
            "medmcqa",
            out_of_range,
            tmp_path / "y.jsonl",
            "--cop-base",
            "0",
        ),
        f"{out_of_range}:1:",
        "'cop' 4 is not an option number",
    )


def test_medmcqa_test_split_without_answers_is_refused(tmp_path: Path) -> None:
    record = json.loads((DATA / "medmcqa" / "validation.jsonl").read_text().splitlines()[0])
    src = lines(tmp_path / "test.jsonl", {**record, "cop": -1, "exp": None})
    refused(
        run("items", "import", "--format", "medmcqa", src, tmp_path / "t.jsonl"),
        f"{src}:1:",
        "'cop' is -1",
        "no answer key",
    )


def test_medqa_five_and_four_options(tmp_path: Path) -> None:
    five = imported("medqa", DATA / "medqa" / "US" / "test.jsonl", tmp_path / "q.jsonl")
    assert [i.id for i in five] == ["medqa-1", "medqa-2"]  # numbered: MedQA has no ids
    assert [len(i.options) for i in five] == [5, 5]
    assert [i.answer for i in five] == ["B", "C"]
    assert five.items[0].options[1] == "Iron deficiency"
    assert [i.metadata for i in five] == [{"meta_info": "step1"}, {"meta_info": "step2&3"}]

    src = DATA / "medqa" / "US" / "4_options" / "phrases_no_exclude_test.jsonl"
    four = imported("medqa", src, tmp_path / "q4.jsonl", "--id-prefix", "medqa-4opt")
    (item,) = four
    assert item.id == "medqa-4opt-1" and item.labels == "ABCD" and item.answer == "B"
    assert "metamap_phrases" not in item.data and "metamap_phrases" not in item.metadata


def test_medqa_answer_text_must_be_the_chosen_option(tmp_path: Path) -> None:
    record = json.loads((DATA / "medqa" / "US" / "test.jsonl").read_text().splitlines()[0])
    src = lines(tmp_path / "test.jsonl", record, {**record, "answer_idx": "C"})
    refused(
        run("items", "import", "--format", "medqa", src, tmp_path / "q.jsonl"),
        f"{src}:2:",
        "'answer' \"Iron deficiency\" is not the text of option C",
    )
    gap = {**record, "options": {"A": "x", "B": "y", "D": "z"}}
    src = lines(tmp_path / "gap.jsonl", gap)
    refused(
        run("items", "import", "--format", "medqa", src, tmp_path / "g.jsonl"),
        f"{src}:1:",
        "'options' must be keyed A, B, ... without gaps",
    )


def test_pubmedqa_keyed_by_pmid(tmp_path: Path) -> None:
    items = imported("pubmedqa", DATA / "pubmedqa" / "ori_pqal.json", tmp_path / "p.jsonl")
    assert [i.id for i in items] == ["90000001", "90000002", "90000003"]
    assert [i.answer for i in items] == ["yes", "no", "maybe"]
    first = items.items[0]
    assert first.options == ()
    assert first.data["question"].startswith("Does early mobilisation")
    paragraphs = first.data["context"].split("\n\n")
    assert len(paragraphs) == 3 and paragraphs[2].startswith("Median stay was 9 days")
    assert first.metadata["context_labels"] == ["BACKGROUND", "METHODS", "RESULTS"]
    assert first.metadata["meshes"][0] == "Aged" and first.metadata["year"] == "2012"
    assert first.metadata["reasoning_required_pred"] == "yes"
    assert first.data["rationale"].startswith("Mobilisation within 24 hours")
    assert items.items[2].metadata["meshes"] == []


def test_pubmedqa_problems_name_the_line_in_the_indented_file(tmp_path: Path) -> None:
    data = json.loads((DATA / "pubmedqa" / "ori_pqal.json").read_text())
    data["90000002"]["LABELS"] = ["BACKGROUND"]
    del data["90000003"]["final_decision"]
    src = tmp_path / "ori_pqal.json"
    src.write_text(json.dumps(data, indent=4), encoding="utf-8")
    text = src.read_text().splitlines()
    second = next(n for n, ln in enumerate(text, 1) if ln.startswith('    "90000002"'))
    third = next(n for n, ln in enumerate(text, 1) if ln.startswith('    "90000003"'))
    output = refused(run("items", "import", "--format", "pubmedqa", src, tmp_path / "p.jsonl"))
    assert f"{src}:{second}: record 2 (PMID 90000002): 'LABELS' has 1 labels for 3" in output
    assert f"{src}:{third}: record 3 (PMID 90000003): no 'final_decision'" in output


def test_pubmedqa_duplicate_pmid_and_bad_decision(tmp_path: Path) -> None:
    src = tmp_path / "ori_pqal.json"
    record = {"QUESTION": "Q?", "CONTEXTS": ["c"], "LABELS": ["L"], "final_decision": "Yes"}
    body = json.dumps(record)
    src.write_text(f'{{\n"1": {body},\n"1": {body}\n}}\n', encoding="utf-8")
    output = refused(run("items", "import", "--format", "pubmedqa", src, tmp_path / "p.jsonl"))
    assert f"{src}:3: PMID 1 appears twice (first on line 2)" in output
    assert "'final_decision' 'Yes' is not yes, no or maybe" in output


def test_medxpertqa_embedded_choices_split_off(tmp_path: Path) -> None:
    items = imported(
        "medxpertqa", DATA / "medxpertqa" / "Text" / "test.jsonl", tmp_path / "x.jsonl"
    )
    first, second = items
    assert first.id == "Text-0" and first.answer == "A" and len(first.options) == 10
    assert "Answer Choices" not in first.data["question"]
    assert first.data["question"].endswith("What is the most likely diagnosis?")
    assert first.data["question_with_choices"] == (
        first.data["question"]
        + "\nAnswer Choices: "
        + " ".join(
            f"({label}) {text}" for label, text in zip("ABCDEFGHIJ", first.options, strict=True)
        )
    )
    assert first.metadata == {
        "medical_task": "Diagnosis",
        "body_system": "Nervous",
        "question_type": "Reasoning",
    }
    # a stem of two lines keeps its inner newline
    assert "\nWhich added drug" in second.data["question"] and second.answer == "D"


def test_medxpertqa_question_without_choices_kept_and_mismatch_refused(tmp_path: Path) -> None:
    record = json.loads((DATA / "medxpertqa" / "Text" / "test.jsonl").read_text().splitlines()[0])
    stem = record["question"].split("\nAnswer Choices:")[0]
    plain = lines(tmp_path / "plain.jsonl", {**record, "question": stem})
    (item,) = imported("medxpertqa", plain, tmp_path / "p.jsonl")
    assert item.data["question"] == stem and "question_with_choices" not in item.data

    other = {**record, "options": {**record["options"], "C": "Tetanus"}}
    src = lines(tmp_path / "other.jsonl", other)
    refused(
        run("items", "import", "--format", "medxpertqa", src, tmp_path / "o.jsonl"),
        f"{src}:1:",
        "'Answer Choices:' list does not give option C as '(C) \"Tetanus\"'",
    )


def test_medxpertqa_multimodal_subset_refused(tmp_path: Path) -> None:
    record = json.loads((DATA / "medxpertqa" / "Text" / "test.jsonl").read_text().splitlines()[0])
    src = lines(tmp_path / "mm.jsonl", {**record, "id": "MM-1", "images": ["MM-1-a.jpeg"]})
    refused(
        run("items", "import", "--format", "medxpertqa", src, tmp_path / "m.jsonl"),
        f"{src}:1:",
        "MM (multimodal) subset",
    )


def test_healthcaremagic_array_and_json_lines(tmp_path: Path) -> None:
    original = imported(
        "healthcaremagic",
        DATA / "healthcaremagic" / "HealthCareMagic-100k.json",
        tmp_path / "h.jsonl",
    )
    exported = imported(
        "healthcaremagic", DATA / "healthcaremagic" / "train.jsonl", tmp_path / "h2.jsonl"
    )
    assert original.sha256 == exported.sha256
    assert [i.id for i in original] == ["hcm-1", "hcm-2", "hcm-3"]
    first = original.items[0]
    assert first.data["question"].startswith("Hi doctor, I have had a dry cough")
    assert first.answer.startswith("Hi, thanks for writing in.")  # the doctor's reply
    assert first.data["instruction"].startswith("If you are a doctor")
    assert first.options == ()
    check = run("items", "check", tmp_path / "h.jsonl")
    assert "answers: 3 different (free text)" in check.output


def test_healthcaremagic_array_problems_name_record_and_line(tmp_path: Path) -> None:
    data = json.loads((DATA / "healthcaremagic" / "HealthCareMagic-100k.json").read_text())
    data[1]["output"] = ""
    del data[2]["input"]
    src = tmp_path / "HealthCareMagic-100k.json"
    src.write_text(json.dumps(data, indent=4), encoding="utf-8")
    starts = [n for n, ln in enumerate(src.read_text().splitlines(), 1) if ln == "    {"]
    output = refused(
        run("items", "import", "--format", "healthcaremagic", src, tmp_path / "h.jsonl")
    )
    assert f"{src}:{starts[1]}: record 2: 'output' is empty" in output
    assert f"{src}:{starts[2]}: record 3: no 'input'" in output


# ---------------------------------------------------------------------- every importer


def test_every_format_is_deterministic_and_replaced_only_with_force(tmp_path: Path) -> None:
    sources = {
        "medmcqa": DATA / "medmcqa" / "dev.json",
        "medqa": DATA / "medqa" / "US" / "test.jsonl",
        "pubmedqa": DATA / "pubmedqa" / "ori_pqal.json",
        "medxpertqa": DATA / "medxpertqa" / "Text" / "test.jsonl",
        "healthcaremagic": DATA / "healthcaremagic" / "HealthCareMagic-100k.json",
    }
    assert set(sources) == set(FORMATS)
    for fmt, src in sources.items():
        dest = tmp_path / f"{fmt}.jsonl"
        items = imported(fmt, src, dest)
        first = dest.read_bytes()
        assert all(ITEM_ID_RE.match(i.id) for i in items)
        assert [json.loads(line) for line in first.splitlines()] == [dict(i.data) for i in items]
        assert first == b"".join(i.canonical() + b"\n" for i in items)  # canonical lines
        refused(
            run("items", "import", "--format", fmt, src, dest), dest, "already exists", "--force"
        )
        assert dest.read_bytes() == first
        imported(fmt, src, dest, "--force")
        assert dest.read_bytes() == first  # the same input, the same bytes
        assert convert(fmt, src) == [dict(i.data) for i in items]
    assert leftovers(tmp_path) == []


def test_limit_keeps_the_first_items_but_checks_the_whole_file(tmp_path: Path) -> None:
    src = DATA / "healthcaremagic" / "train.jsonl"
    items = imported("healthcaremagic", src, tmp_path / "h.jsonl", "--limit", "2")
    assert [i.id for i in items] == ["hcm-1", "hcm-2"]
    broken = tmp_path / "broken.jsonl"
    broken.write_text(src.read_text() + '{"input": "q"}\n', encoding="utf-8")
    refused(
        run(
            "items",
            "import",
            "--format",
            "healthcaremagic",
            broken,
            tmp_path / "b.jsonl",
            "--limit",
            "1",
        ),
        f"{broken}:4:",
        "no 'output'",
    )
    result = run("items", "import", "--format", "medqa", src, tmp_path / "z.jsonl", "--limit", "0")
    assert result.exit_code == 2 and "--limit" in result.output


def test_missing_field_names_line_and_field(tmp_path: Path) -> None:
    record = json.loads((DATA / "medmcqa" / "dev.json").read_text().splitlines()[0])
    del record["opc"]
    src = lines(
        tmp_path / "dev.json",
        json.loads((DATA / "medmcqa" / "dev.json").read_text().splitlines()[1]),
        record,
    )
    dest = tmp_path / "mm.jsonl"
    refused(run("items", "import", "--format", "medmcqa", src, dest), f"{src}:2: no 'opc'")
    assert not dest.exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("question", 12, "'question' must be a string, got 12"),
        ("question", "   ", "'question' is empty"),
        ("opa", None, "'opa' is null"),
        ("cop", "2", "'cop' must be an integer, got \"2\""),
        ("cop", True, "'cop' must be an integer, got true"),
        ("exp", ["x"], "'exp' must be a string"),
        ("subject_name", 3, "'subject_name' must be a string"),
    ],
)
def test_mistyped_field_names_line_and_field(
    tmp_path: Path, field: str, value: object, expected: str
) -> None:
    records = [json.loads(ln) for ln in (DATA / "medmcqa" / "dev.json").read_text().splitlines()]
    records[2][field] = value
    src = lines(tmp_path / "dev.json", *records)
    refused(
        run("items", "import", "--format", "medmcqa", src, tmp_path / "mm.jsonl"),
        f"{src}:3: {expected}",
    )


def test_malformed_json_names_the_line(tmp_path: Path) -> None:
    good = (DATA / "medqa" / "US" / "test.jsonl").read_text().splitlines()
    src = tmp_path / "test.jsonl"
    src.write_text(f'{good[0]}\n{good[1][:-1]}\n[1, 2]\n\n{good[0]}, "x": 1}}\n', encoding="utf-8")
    output = refused(run("items", "import", "--format", "medqa", src, tmp_path / "q.jsonl"))
    assert f"{src}:2: not valid JSON: Expecting ',' delimiter" in output
    assert f"{src}:3: not a JSON object, got [1, 2]" in output
    assert f"{src}:4: blank line" in output
    assert f"{src}:5: not valid JSON: Extra data" in output

    array = tmp_path / "HealthCareMagic-100k.json"
    array.write_text(
        '[\n  {"input": "a", "output": "b"},\n  {"input": "c" "output": "d"}\n]\n', encoding="utf-8"
    )
    refused(
        run("items", "import", "--format", "healthcaremagic", array, tmp_path / "h.jsonl"),
        f"{array}:3: not valid JSON: Expecting ',' delimiter (column 17)",
    )
    truncated = tmp_path / "ori_pqal.json"
    truncated.write_text('{\n  "1": {"QUESTION": "q"},\n', encoding="utf-8")
    refused(
        run("items", "import", "--format", "pubmedqa", truncated, tmp_path / "p.jsonl"),
        f"{truncated}:3: expected a member name, found the end of the file",
    )
    not_object = tmp_path / "list.json"
    not_object.write_text("[]\n", encoding="utf-8")
    refused(
        run("items", "import", "--format", "pubmedqa", not_object, tmp_path / "p.jsonl"),
        f"{not_object}:1: expected a JSON object, found '['",
    )


@pytest.mark.parametrize("depth", [65, 100_000])  # past the limit; past Python's own parser
def test_nesting_past_the_limit_names_the_line_never_a_recursion_error(
    tmp_path: Path, depth: int
) -> None:
    """Issue 32: deeply nested JSON in an item file, a JSON-lines source and a JSON array
    source is a problem naming the file and line, never an internal RecursionError."""
    deep = "[" * depth + "]" * depth
    items = tmp_path / "items.jsonl"
    record = f'{{"id": "q1", "question": "x", "answer": "A", "metadata": {{"m": {deep}}}}}'
    items.write_text(record + "\n", encoding="utf-8")
    result = run("items", "check", items)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert f"{items}:1: not a JSON object: arrays and objects nested" in result.output
    good = (DATA / "medqa" / "US" / "test.jsonl").read_text().splitlines()
    src = tmp_path / "test.jsonl"
    src.write_text(f'{good[0]}\n{{"question": {deep}}}\n', encoding="utf-8")
    refused(
        run("items", "import", "--format", "medqa", src, tmp_path / "q.jsonl"),
        f"{src}:2: not an item record: arrays and objects nested",
    )
    array = tmp_path / "HealthCareMagic-100k.json"
    array.write_text(
        f'[\n  {{"input": "a", "output": "b"}},\n  {{"input": {deep}}}\n]\n', encoding="utf-8"
    )
    refused(
        run("items", "import", "--format", "healthcaremagic", array, tmp_path / "h.jsonl"),
        f"{array}:3: record 2: arrays and objects nested more than 64 levels deep",
    )


def test_a_source_past_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """Issue 32: a source is parsed whole (about ten times its size in memory): over 512 MiB
    it is refused at once, naming it (a sparse file: nothing is written to disk)."""
    from runner._importers import MAX_SOURCE_BYTES

    src = tmp_path / "test.jsonl"
    with src.open("wb") as handle:
        handle.truncate(MAX_SOURCE_BYTES + 1)
    too_big = f"{src}: {MAX_SOURCE_BYTES + 1:,} bytes, more than the {MAX_SOURCE_BYTES:,}"
    refused(run("items", "import", "--format", "medqa", src, tmp_path / "q.jsonl"), too_big)
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)  # a named pipe is never opened (it would block the import forever)
    refused(
        run("items", "import", "--format", "medqa", fifo, tmp_path / "p.jsonl"),
        f"{fifo}: not a regular file",
    )


def test_non_utf8_and_bom_sources(tmp_path: Path) -> None:
    good = (DATA / "medqa" / "US" / "test.jsonl").read_bytes()
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(good + b'{"question": "caf\xe9"}\n')
    refused(
        run("items", "import", "--format", "medqa", latin, tmp_path / "q.jsonl"),
        f"{latin}:3: not UTF-8",
        "byte 0xe9",
    )
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + good)
    refused(
        run("items", "import", "--format", "medqa", bom, tmp_path / "q.jsonl"),
        f"{bom}:1: starts with a UTF-8 byte-order mark",
    )


def test_crlf_source_is_read(tmp_path: Path) -> None:
    src = tmp_path / "test.jsonl"
    src.write_bytes((DATA / "medqa" / "US" / "test.jsonl").read_bytes().replace(b"\n", b"\r\n"))
    crlf = imported("medqa", src, tmp_path / "a.jsonl")
    plain = imported("medqa", DATA / "medqa" / "US" / "test.jsonl", tmp_path / "b.jsonl")
    assert crlf.sha256 == plain.sha256


def test_dest_exists_is_refused_and_left_alone(tmp_path: Path) -> None:
    dest = tmp_path / "items.jsonl"
    dest.write_text("not mine to replace\n", encoding="utf-8")
    src = DATA / "pubmedqa" / "ori_pqal.json"
    refused(
        run("items", "import", "--format", "pubmedqa", src, dest),
        f"{dest}: already exists; pass --force to replace it",
    )
    assert dest.read_text() == "not mine to replace\n"
    imported("pubmedqa", src, dest, "--force")
    assert leftovers(tmp_path) == []


def test_failed_import_with_force_leaves_dest_as_it_was(tmp_path: Path) -> None:
    dest = tmp_path / "items.jsonl"
    dest.write_text("old\n", encoding="utf-8")
    src = lines(tmp_path / "test.jsonl", {"question": "q"})
    refused(run("items", "import", "--format", "medqa", src, dest, "--force"), f"{src}:1:")
    assert dest.read_text() == "old\n" and leftovers(tmp_path) == []


def test_dest_must_be_a_new_jsonl_file_in_an_existing_folder(tmp_path: Path) -> None:
    src = tmp_path / "ori_pqal.json"
    shutil.copy(DATA / "pubmedqa" / "ori_pqal.json", src)
    refused(
        run("items", "import", "--format", "pubmedqa", src, tmp_path / "items.csv"),
        "give a name ending in .jsonl",
    )
    refused(
        run("items", "import", "--format", "pubmedqa", src, tmp_path / "no" / "i.jsonl"),
        f"{tmp_path / 'no'} does not exist",
    )
    same = tmp_path / "same.jsonl"
    shutil.copy(DATA / "medqa" / "US" / "test.jsonl", same)
    refused(
        run("items", "import", "--format", "medqa", same, same, "--force"),
        "is the source file itself",
    )
    assert same.read_bytes() == (DATA / "medqa" / "US" / "test.jsonl").read_bytes()


def test_missing_source_and_unknown_format(tmp_path: Path) -> None:
    missing = tmp_path / "dev.json"
    refused(
        run("items", "import", "--format", "medmcqa", missing, tmp_path / "m.jsonl"),
        f"cannot read {missing}: no such file or directory",
    )
    result = run("items", "import", "--format", "mmlu", missing, tmp_path / "m.jsonl")
    assert result.exit_code == 2 and "mmlu" in result.output
    with pytest.raises(DatasetError, match="unknown dataset format 'mmlu'"):
        convert("mmlu", DATA / "medmcqa" / "dev.json")


def test_duplicate_ids_after_mapping(tmp_path: Path) -> None:
    records = [json.loads(ln) for ln in (DATA / "medmcqa" / "dev.json").read_text().splitlines()]
    records[0]["id"] = "case 1"
    records[2]["id"] = "case/1"  # both become case-1
    src = lines(tmp_path / "dev.json", *records)
    refused(
        run("items", "import", "--format", "medmcqa", src, tmp_path / "m.jsonl"),
        f"{src}:3: item id 'case-1' again (first: {src}:1)",
    )


def test_ids_made_valid_keep_the_source_id(tmp_path: Path) -> None:
    assert item_id_for("Text-12") == "Text-12"
    assert item_id_for("12", "medqa-test") == "medqa-test-12"
    assert item_id_for("case 1/b") == "case-1-b"
    assert item_id_for("__x") == "x"
    assert item_id_for("***") == ""
    long = item_id_for("x" * 80)
    assert len(long) == 64 and ITEM_ID_RE.match(long) and long != item_id_for("x" * 81)

    records = [json.loads(ln) for ln in (DATA / "medmcqa" / "dev.json").read_text().splitlines()]
    records[0]["id"] = "case 1"
    src = lines(tmp_path / "dev.json", *records)
    items = imported("medmcqa", src, tmp_path / "m.jsonl", "--id-prefix", "mm")
    assert items.items[0].id == "mm-case-1"
    assert items.items[0].metadata["source_id"] == "case 1"
    assert items.items[1].metadata["source_id"] == records[1]["id"]
    refused(
        run(
            "items", "import", "--format", "medmcqa", src, tmp_path / "n.jsonl", "--id-prefix", "-x"
        ),
        "id prefix '-x'",
    )


def test_problem_list_is_capped_in_the_message(tmp_path: Path) -> None:
    src = lines(tmp_path / "train.jsonl", *({"input": f"q{n}"} for n in range(80)))
    with pytest.raises(DatasetError) as caught:
        import_dataset("healthcaremagic", src, tmp_path / "h.jsonl")
    assert len(caught.value.problems) == 80
    message = str(caught.value).splitlines()
    assert len(message) == 51 and message[-1] == "... and 30 more problem(s)"


def test_json_output(tmp_path: Path) -> None:
    dest = tmp_path / "p.jsonl"
    result = run(
        "items",
        "import",
        "--format",
        "pubmedqa",
        DATA / "pubmedqa" / "ori_pqal.json",
        dest,
        "--json",
    )
    assert result.exit_code == 0, result.output
    facts = json.loads(result.stdout)
    assert facts == {
        "format": "pubmedqa",
        "source": str(DATA / "pubmedqa" / "ori_pqal.json"),
        "dest": str(dest),
        "records": 3,
        "count": 3,
        "sha256": load_items(dest).sha256,
    }


def test_written_file_has_the_permissions_of_a_new_file(tmp_path: Path) -> None:
    dest = tmp_path / "p.jsonl"
    imported("pubmedqa", DATA / "pubmedqa" / "ori_pqal.json", dest)
    plain = tmp_path / "plain.txt"
    plain.write_text("x", encoding="utf-8")
    assert stat.S_IMODE(dest.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)
