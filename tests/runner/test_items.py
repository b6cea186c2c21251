"""Item files (docs/prompts.md section 1) read by ``ledger items check``: the summary of a good
file, and one named test per kind of bad input, each through the real command. Every refusal
exits non-zero and names the file and the line at fault.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ledger import canonical_json
from ledger.cli import main
from runner._errors import SpecError
from runner._items import ITEM_ID_RE, load_items


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], prog_name="ledger")


def jsonl(path: Path, *rows: object) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def refused(result: Result, path: Path, line: int, *fragments: str) -> str:
    """A failed check: exit 1, no traceback, ``path:line:`` and every fragment on one line."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output, result.output
    where = f"{path}:{line}:"
    lines = [ln for ln in result.output.splitlines() if ln.startswith(where)]
    assert lines, f"{where} not in {result.output!r}"
    assert any(all(f in ln for f in fragments) for ln in lines), (fragments, result.output)
    assert result.output.rstrip().splitlines()[-1].startswith(f"Error: {path}: ")
    return lines[0]


Q1 = {"id": "q1", "question": "2 + 2?", "options": ["3", "4"], "answer": "B"}
Q2 = {"id": "q2", "question": "Is water wet?", "answer": "yes", "context": "It is."}


def test_check_summarises_a_good_file(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "items.jsonl", Q1, {**Q2, "metadata": {"subject": "physics"}})
    result = run("items", "check", path)
    assert result.exit_code == 0, result.output
    loaded = load_items(path)
    assert f"{path}: 2 items (jsonl)" in result.output
    assert f"items digest: {loaded.sha256}" in result.output
    assert "members: id 2, question 2, options 1, answer 2, context 1, metadata 1" in result.output
    assert "options: 2 options: 1" in result.output
    assert "answers: B 1, yes 1" in result.output

    facts = json.loads(run("items", "check", path, "--json").stdout)
    assert facts["count"] == 2 and facts["sha256"] == loaded.sha256
    assert facts["members"] == {
        "id": 2,
        "question": 2,
        "options": 1,
        "answer": 2,
        "context": 1,
        "metadata": 1,
    }
    assert facts["options"] == {"2": 1} and facts["metadata"] == {"subject": 1}
    assert facts["answers"] == {"B": 1, "yes": 1}


def test_items_digest_is_of_canonical_forms(tmp_path: Path) -> None:
    # the same items written with other spacing and member order: the same digest
    a = jsonl(tmp_path / "a.jsonl", Q1, Q2)
    b = tmp_path / "b.jsonl"
    b.write_text(
        '{"answer": "B", "options": ["3", "4"], "question": "2 + 2?", "id": "q1"}\n'
        '{ "context":"It is.","id":"q2","answer":"yes","question":"Is water wet?" }',
        encoding="utf-8",
    )
    expected = b"".join(canonical_json(q) + b"\n" for q in (Q1, Q2))
    assert load_items(a).sha256 == load_items(b).sha256 == hashlib.sha256(expected).hexdigest()


def test_check_csv_file(tmp_path: Path) -> None:
    path = tmp_path / "items.csv"
    path.write_text(
        "id,question,option_A,option_B,option_C,answer,metadata.subject\r\n"
        'q1,"Which is largest?\nPick one.",cat,dog,horse,C,zoology\r\n'
        "q2,2 + 2?,3,4,,B,\r\n",
        encoding="utf-8",
    )
    result = run("items", "check", path)
    assert result.exit_code == 0, result.output
    items = load_items(path)
    assert [i.options for i in items] == [("cat", "dog", "horse"), ("3", "4")]
    assert items.by_id["q1"].metadata == {"subject": "zoology"}
    assert "metadata" not in items.by_id["q2"].data


# ---------------------------------------------------------------------- bad input, by name


def test_check_duplicate_ids_names_both_lines(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "items.jsonl", Q1, Q2, {**Q2, "question": "Again?"})
    line = refused(run("items", "check", path), path, 3, "duplicate id 'q2'")
    assert "first on line 2" in line


def test_check_missing_answer(tmp_path: Path) -> None:
    q = {k: v for k, v in Q2.items() if k != "answer"}
    path = jsonl(tmp_path / "items.jsonl", Q1, q)
    refused(run("items", "check", path), path, 2, "'q2' has no answer")


def test_check_blank_answer(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "items.jsonl", {**Q2, "answer": "  "})
    refused(run("items", "check", path), path, 1, "'q2' has no answer")


def test_check_answer_not_among_the_options(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "items.jsonl", {**Q1, "answer": "C"})
    refused(run("items", "check", path), path, 1, "answer 'C' is not among", "(A, B)")


def test_check_non_utf8_line(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_bytes(json.dumps(Q1).encode() + b"\n" + b'{"id": "q2", "answer": "caf\xe9"}\n')
    refused(run("items", "check", path), path, 2, "not UTF-8", "byte 0xe9", "line 2")


def test_check_blank_line(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps(Q1) + "\n\n" + json.dumps(Q2) + "\n", encoding="utf-8")
    refused(run("items", "check", path), path, 2, "blank line")


def test_check_crlf_line_ends(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_bytes((json.dumps(Q1) + "\r\n" + json.dumps(Q2) + "\r\n").encode())
    result = run("items", "check", path)
    refused(result, path, 1, "\\r\\n")
    refused(result, path, 2, "\\r\\n")


def test_check_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(Q1).encode() + b"\n")
    refused(run("items", "check", path), path, 1, "byte-order mark")


@pytest.mark.parametrize(
    ("member", "value", "expected"),
    [
        ("question", 42, "member 'question' must be a string"),
        ("options", "A. 3  B. 4", "member 'options' must be an array of 2 to 26 non-empty"),
        ("options", ["4"], "member 'options' must be an array of 2 to 26 non-empty"),
        ("options", ["3", " "], "member 'options' must be an array of 2 to 26 non-empty"),
        ("metadata", {"subject": {"nested": 1}}, "member 'metadata' must be an object of"),
        ("metadata", ["subject"], "member 'metadata' must be an object of"),
        ("answer", 2, "member 'answer' must be a string"),
        ("id", 7, "member 'id' must be a string"),
        ("images", "chart.png", "member 'images' must be a non-empty array"),
    ],
)
def test_check_wrong_member_type(tmp_path: Path, member: str, value: object, expected: str) -> None:
    path = jsonl(tmp_path / "items.jsonl", Q2, {**Q1, member: value})
    refused(run("items", "check", path), path, 2, expected)


@pytest.mark.parametrize("name", ["Context", "answer_text", "option_B", "context\n", "2nd"])
def test_check_member_name_not_a_field(tmp_path: Path, name: str) -> None:
    path = jsonl(tmp_path / "items.jsonl", {**Q1, name: "text"})
    refused(run("items", "check", path), path, 1, f"member {name!r}: not a field name")


def test_check_csv_option_gap(tmp_path: Path) -> None:
    path = tmp_path / "items.csv"
    path.write_text(
        "id,question,option_A,option_B,option_C,answer\nq1,2 + 2?,3,4,5,B\nq2,3 + 3?,6,,7,A\n",
        encoding="utf-8",
    )
    refused(run("items", "check", path), path, 3, "option_C follows an empty option cell")


def test_check_csv_rows_numbered_by_their_first_line(tmp_path: Path) -> None:
    # a quoted cell over three lines: the next row starts on line 5, not 3
    path = tmp_path / "items.csv"
    path.write_text('id,question,answer\nq1,"one\ntwo\nthree",x\nq2,hello,\n', encoding="utf-8")
    refused(run("items", "check", path), path, 5, "'q2' has no answer")


def test_check_csv_unterminated_quote_is_refused(tmp_path: Path) -> None:
    """Issue 32: a quote opened and never closed used to swallow the rest of the file into
    one cell; strict CSV refuses it, naming the line of the row where the quote opens."""
    path = tmp_path / "items.csv"
    path.write_text('id,question,answer\nq1,"2 + 2?,B\nq2,3 + 3?,C\n', encoding="utf-8")
    refused(run("items", "check", path), path, 2, "a quoted cell opened in the row", "never closed")


def test_check_csv_column_out_of_order(tmp_path: Path) -> None:
    path = tmp_path / "items.csv"
    path.write_text("id,option_B,option_A,answer\nq1,x,y,A\n", encoding="utf-8")
    refused(run("items", "check", path), path, 1, "option_A, option_B, ... in order")


@pytest.mark.parametrize("bad", ["q1\n", "-q1", "q 1", "q" * 65, ""])
def test_check_id_that_is_not_an_id(tmp_path: Path, bad: str) -> None:
    assert not ITEM_ID_RE.match(bad)
    path = jsonl(tmp_path / "items.jsonl", {**Q1, "id": bad})
    refused(run("items", "check", path), path, 1, "use letters, digits")


def test_check_not_a_json_object(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps(Q1) + '\n["q2", "yes"]\n{"id": "q3",\n', encoding="utf-8")
    result = run("items", "check", path)
    refused(result, path, 2, "not a JSON object")
    refused(result, path, 3, "not a JSON object")


def test_check_duplicate_member(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text('{"id": "q1", "answer": "a", "answer": "b"}\n', encoding="utf-8")
    refused(run("items", "check", path), path, 1, "duplicate member 'answer'")


def test_check_reports_every_problem_at_once(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "items.jsonl", {**Q1, "answer": "Z"}, Q2, {**Q2, "id": "q 3"})
    result = run("items", "check", path)
    refused(result, path, 1, "answer 'Z'")
    refused(result, path, 3, "id 'q 3'")
    assert f"Error: {path}: 2 problems" in result.output
    with pytest.raises(SpecError) as caught:
        load_items(path)
    assert len(caught.value.problems) == 2


def test_check_refuses_other_suffixes_and_missing_files(tmp_path: Path) -> None:
    other = jsonl(tmp_path / "items.json", Q1)
    result = run("items", "check", other)
    assert result.exit_code == 1 and ".jsonl or .csv" in result.output
    missing = tmp_path / "nope.jsonl"
    result = run("items", "check", missing)
    assert result.exit_code == 1 and str(missing) in result.output
    assert "no such file" in result.output and "Traceback" not in result.output


def test_check_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_bytes(b"")
    result = run("items", "check", path)
    assert result.exit_code == 1 and f"{path}: no items" in result.output
