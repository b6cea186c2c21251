"""verify._items and verify._prompts: hand-worked cases of docs/prompts.md, rule by rule.

Every expected value is built directly in the test (a literal, a string written out, or
hashlib over the strings the doc names), never by calling the code under test.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest

from verify._items import ItemError, read_items, resolve_image
from verify._prompts import (
    FewShot,
    LockedStudy,
    PromptError,
    Slot,
    draw,
    execution_order,
    item_values,
    openai_request,
    option_format_template,
    parameter_problems,
    parse_template,
    parse_trial_id,
    read_template,
    subset,
    trial_id,
)


def sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24  # magic bytes are all the renderer looks at
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 12


# ------------------------------------------------------------------------------ §2 templates


def test_template_escapes_and_slots() -> None:
    t = parse_template("Q{{1}}: {question}\n}}{id}{metadata.subject}", "t.txt")
    assert t.parts == (
        "Q{1}: ",
        Slot("question", 1, 9),
        "\n}",
        Slot("id", 2, 3),
        Slot("metadata.subject", 2, 7),
    )
    out = t.render({"question": "Why?", "id": "q1", "metadata.subject": "bio"}, "item 'q1'")
    assert out == "Q{1}: Why?\n}q1bio"


def test_template_values_are_substituted_verbatim() -> None:
    # a value holding braces or a slot's spelling is not read again
    t = parse_template("{a}{b}", "t.txt")
    assert t.render({"a": "{b}", "b": "}}"}, "x") == "{b}}}"


@pytest.mark.parametrize(
    ("text", "line", "column", "brace"),
    [
        ("a { b", 1, 3, "{"),
        ("ok\nx } y", 2, 3, "}"),
        ("line one\n  {a.b.c.d}", 2, 3, "{"),  # at most two dots (prompts.md §2)
        ("{1abc}", 1, 1, "{"),
        ("{ name}", 1, 1, "{"),
        ("{name", 1, 1, "{"),
        ("{name}}", 1, 7, "}"),
        ("{{{", 1, 3, "{"),
        ("é{", 1, 2, "{"),  # columns count characters, not bytes
    ],
)
def test_template_errors_name_file_line_and_column(
    text: str, line: int, column: int, brace: str
) -> None:
    with pytest.raises(PromptError) as err:
        parse_template(text, "prompts/item.txt")
    assert str(err.value).startswith(f"prompts/item.txt:{line}:{column}: '{brace}'")


def test_template_file_must_be_utf8() -> None:
    with pytest.raises(PromptError, match=r"^prompts/x.txt:2:1: not UTF-8"):
        read_template(b"ok\n\xff", "prompts/x.txt")


def test_dotted_slot_other_than_metadata_cannot_be_filled() -> None:
    t = parse_template("{context.x}", "t.txt")
    with pytest.raises(PromptError, match=r"t.txt:1:1: slot \{context.x\} cannot be filled"):
        t.render(item_values({"id": "q", "context": "c"}, _fmt(), "\n"), "item 'q'")


def _fmt(text: str = "{label}. {text}") -> Any:
    return option_format_template(text)


def test_options_default_format_and_separator() -> None:
    fields = {"id": "q", "answer": "B", "options": ["red", "green", "blue"]}
    values = item_values(fields, _fmt(), "\n")
    assert values["options"] == "A. red\nB. green\nC. blue"
    assert values["option_A"] == "red" and values["option_C"] == "blue"
    assert "option_D" not in values
    assert "answer" not in values and "answer_text" not in values  # item template: no key


def test_options_custom_format_and_separator() -> None:
    fields = {"id": "q", "answer": "A", "options": ["x{y}", "z"]}
    values = item_values(fields, _fmt("({label}) {text};"), " | ")
    assert values["options"] == "(A) x{y}; | (B) z;"


def test_option_format_takes_only_label_and_text() -> None:
    with pytest.raises(PromptError, match=r"option_format:1:8: slot \{id\}"):
        option_format_template("{label}{id}")


def test_answer_slots_only_in_answer_templates() -> None:
    fields = {"id": "q", "answer": "B", "options": ["x", "y"], "rationale": "because"}
    values = item_values(fields, _fmt(), "\n", answer=True)
    assert (values["answer"], values["answer_text"], values["rationale"]) == ("B", "y", "because")
    plain = item_values({"id": "q", "answer": "yes"}, _fmt(), "\n", answer=True)
    assert plain["answer"] == "yes" and "answer_text" not in plain


def test_metadata_slots_are_strings_and_string_arrays_only() -> None:
    fields = {"id": "q", "answer": "a", "metadata": {"s": "bio", "n": 3, "tags": ["a"]}}
    values = item_values(fields, _fmt(), "\n")
    assert values["metadata.s"] == "bio"
    # an array of strings fills its slot as canonical JSON (prompts.md §8.1); a number fills none
    assert "metadata.n" not in values and values["metadata.tags"] == '["a"]'


# ------------------------------------------------------------------------------ §1 item files


def test_jsonl_canonical_form_hash_and_digest() -> None:
    line1 = '{"question":"Why?","id":"q1","answer":"B","options":["x","y"],"metadata":{"n":1.0}}'
    line2 = '{"id":"q2","answer":"yes","context":"é"}'
    f = read_items((line1 + "\n" + line2).encode(), "items/q.jsonl")  # last line without \n
    canon1 = '{"answer":"B","id":"q1","metadata":{"n":1},"options":["x","y"],"question":"Why?"}'
    canon2 = '{"answer":"yes","context":"é","id":"q2"}'
    assert [i.canonical.decode() for i in f.items] == [canon1, canon2]
    assert f.items[0].sha256 == sha(canon1)
    assert f.digest == sha(canon1 + "\n" + canon2 + "\n")
    assert f.record() == {
        "path": "items/q.jsonl",
        "format": "jsonl",
        "count": 2,
        "sha256": sha(canon1 + "\n" + canon2 + "\n"),
    }
    assert [i.line for i in f.items] == [1, 2]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xef\xbb\xbf" + b'{"id":"a","answer":"x"}\n', r"line 1: starts with a byte-order mark"),
        (b'{"id":"a","answer":"x"}\r\n', r"line 1: ends in \\r\\n"),
        (b'{"id":"a","answer":"x"}\n\n{"id":"b","answer":"x"}\n', r"line 2: a blank line"),
        (b'{"id":"a","answer":"x"}\n["b"]\n', r"line 2: not a JSON object"),
        (b'{"id":"a","answer":"x","answer":"y"}\n', r"line 1: duplicate key 'answer'"),
        (b'{"id":"a","answer":"x","metadata":{"k":1,"k":2}}\n', r"line 1: duplicate key 'k'"),
        (b'{"id":"a","answer":NaN}\n', r"line 1: not a JSON object"),
        (
            b'{"id":"a","answer":"x"}\n{"id":"a","answer":"y"}\n',
            r"line 2: id 'a' is also the id "
            r"of line 1",
        ),
        (b'{"id":"-a","answer":"x"}\n', r"line 1: id: '-a' is not an id"),
        (b'{"id":"' + b"a" * 65 + b'","answer":"x"}\n', r"line 1: id: 'a+' is not an id"),
        (b'{"id":"a"}\n', r"line 1: answer: the required member is missing"),
        (b'{"id":"a","answer":""}\n', r"line 1: answer: must be a non-empty string"),
        (
            b'{"id":"a","answer":"C","options":["x","y"]}\n',
            r"line 1: answer: 'C' is not one of "
            r"the option labels A, B",
        ),
        (b'{"id":"a","answer":"A","options":["x"]}\n', r"line 1: options: must be an array of 2"),
        (b'{"id":"a","answer":"A","options":["x",""]}\n', r"line 1: options: must be an array"),
        (b'{"id":"a","answer":"x","images":"a.png"}\n', r"line 1: images: must be an array"),
        (
            b'{"id":"a","answer":"x","metadata":{"k":{"x":1}}}\n',
            r"line 1: metadata: k: a "
            r"metadata value",
        ),
        (b'{"id":"a","answer":"x","metadata":{"k":[1]}}\n', r"line 1: metadata: k: a metadata"),
        (b'{"id":"a","answer":"x","question":3}\n', r"line 1: question: must be a string"),
        (b'{"id":"a","answer":"x","Context":"c"}\n', r"line 1: Context: not a text field name"),
        (b'{"id":"a","answer":"x","answer_text":"c"}\n', r"line 1: answer_text: a reserved"),
        (b'{"id":"a","answer":"x","option_a":"c"}\n', r"line 1: option_a: a reserved"),
        (b'{"id":"a","answer":"x","context":["c"]}\n', r"line 1: context: a text field must be"),
        (
            b'{"id":"a","answer":"x","images":["../../x.png"]}\n',
            r"line 1: images: '../../x.png' "
            r"is not inside the study folder",
        ),
        (b"", r"the file holds no items"),
        (b'{"id":"a","answer":"x"}\n\xff\n', r"line 2: not UTF-8"),
    ],
)
def test_jsonl_rules(data: bytes, message: str) -> None:
    with pytest.raises(ItemError, match=r"^items/q.jsonl:? " + message):
        read_items(data, "items/q.jsonl")


def test_option_like_names_are_reserved_only_with_one_letter() -> None:
    # "option_ followed by a letter" is read as the slot spelling option_X: option_ab is a text
    # field like any other
    f = read_items(b'{"id":"a","answer":"x","option_ab":"t"}\n', "q.jsonl")
    assert f.items[0].data["option_ab"] == "t"


def test_jsonl_metadata_values_of_every_allowed_type() -> None:
    line = '{"id":"a","answer":"x","metadata":{"s":"t","n":2,"f":0.5,"b":true,"l":["u"]}}\n'
    f = read_items(line.encode(), "q.jsonl")
    assert f.items[0].canonical == (
        b'{"answer":"x","id":"a","metadata":{"b":true,"f":0.5,"l":["u"],"n":2,"s":"t"}}'
    )


def test_item_file_name_decides_the_format() -> None:
    with pytest.raises(ItemError, match=r"must end in .jsonl or .csv"):
        read_items(b'{"id":"a","answer":"x"}\n', "items/q.json")


def test_images_are_relative_to_the_item_file_folder() -> None:
    assert resolve_image("items/q.jsonl", "img/a.png") == "items/img/a.png"
    assert resolve_image("items/q.jsonl", "../shared/a.png") == "shared/a.png"
    assert resolve_image("q.jsonl", "a.png") == "a.png"
    for bad in ("/etc/x.png", "../a.png", ""):
        with pytest.raises(ItemError):
            resolve_image("q.jsonl", bad)
    line = '{"id":"a","answer":"x","images":["img/1.png","img/2.jpg"]}\n'
    f = read_items(line.encode(), "items/q.jsonl")
    assert f.image_paths() == ["items/img/1.png", "items/img/2.jpg"]


def test_csv_canonical_form_matches_the_jsonl_one() -> None:
    csv_text = (
        "id,question,option_A,option_B,option_C,answer,image,metadata.subject,context\n"
        'q1,"Which, one?",red,green,,B,img/q1.png,bio,\n'
        "q2,Is it?,,,,yes,,,some context\n"
    )
    f = read_items(csv_text.encode(), "items/q.csv")
    canon1 = (
        '{"answer":"B","id":"q1","images":["img/q1.png"],"metadata":{"subject":"bio"},'
        '"options":["red","green"],"question":"Which, one?"}'
    )
    canon2 = '{"answer":"yes","context":"some context","id":"q2","question":"Is it?"}'
    assert [i.canonical.decode() for i in f.items] == [canon1, canon2]
    assert f.record() == {
        "path": "items/q.csv",
        "format": "csv",
        "count": 2,
        "sha256": sha(canon1 + "\n" + canon2 + "\n"),
    }
    # the same items as JSONL hash the same
    jsonl = json.dumps(json.loads(canon1)) + "\n" + json.dumps(json.loads(canon2)) + "\n"
    assert read_items(jsonl.encode(), "items/q.jsonl").digest == f.digest


def test_csv_row_numbers_are_line_numbers() -> None:
    csv_text = 'id,answer,question\na,x,"two\nlines"\nb,,q\n'
    with pytest.raises(ItemError, match=r"^items/q.csv line 4: answer: the required column"):
        read_items(csv_text.encode(), "items/q.csv")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("id,answer,option_A,option_B,option_C\na,A,x,,z\n", r"line 2: the options have a gap"),
        (
            "id,answer,option_A,option_C\na,A,x,z\n",
            r"line 1: the option columns option_A, "
            r"option_C are not contiguous",
        ),
        ("id,answer,option_B,option_C\na,B,x,z\n", r"line 1: the option columns"),
        ("id,answer,option_A,option_B\na,A,x,\n", r"line 2: options: must be an array of 2"),
        ("id,answer,option_A,option_B\na,C,x,y\n", r"line 2: answer: 'C' is not one of"),
        ("id,answer\na,x,extra\n", r"line 2: 2 cells, the header has 2|line 2: 3 cells"),
        ("id,answer\na,x\n\nb,y\n", r"line 3: 0 cells, the header has 2"),
        ("id,answer,id\na,x,a\n", r"line 1: column 'id' appears twice"),
        ("answer,question\nx,q\n", r"line 1: the required column 'id' is missing"),
        ("id,answer,Notes\na,x,n\n", r"line 1: column 'Notes': not a text field name"),
        ("id,answer,options\na,x,n\n", r"line 1: column 'options': not a CSV column"),
        ("id,answer,answer_text\na,x,n\n", r"line 1: column 'answer_text': a reserved name"),
        ("id,answer\n,x\n", r"line 2: id: the required column is missing"),
        ("id,answer\na,x\na,y\n", r"line 3: id 'a' is also the id of line 2"),
        ('id,answer\na,"x"y\n', r"line 2: not RFC 4180 CSV"),
    ],
)
def test_csv_rules(text: str, message: str) -> None:
    with pytest.raises(ItemError, match=r"^items/q.csv " + message):
        read_items(text.encode(), "items/q.csv")


def test_csv_bom_is_refused() -> None:
    with pytest.raises(ItemError, match=r"line 1: starts with a byte-order mark"):
        read_items(b"\xef\xbb\xbfid,answer\na,x\n", "q.csv")


# ------------------------------------------------------------------------------ §4 few-shot


def _examples(rows: list[dict[str, Any]], path: str = "fewshot/ex.jsonl") -> Any:
    return read_items("".join(json.dumps(r) + "\n" for r in rows).encode(), path)


def _by_hash(seed: str, item: str, ids: list[str]) -> list[str]:
    """The doc's random order, written out: ascending SHA-256 of "{seed}|{item}|{id}" in hex."""
    keyed = [(hashlib.sha256(f"{seed}|{item}|{i}".encode()).hexdigest(), i) for i in ids]
    return [i for _, i in sorted(keyed)]


def test_random_rule_takes_the_first_of_the_random_order() -> None:
    ids = [f"e{n}" for n in range(8)]
    ex = _examples([{"id": i, "answer": "x"} for i in ids])
    fs = FewShot("s", ex, "random", 3, seed="11")
    for item in ("q1", "q2"):
        assert [e.id for e in draw(fs, item)] == _by_hash("11", item, ids)[:3]
    # the order differs from item to item
    assert _by_hash("11", "q1", ids) != _by_hash("11", "q2", ids)


def test_label_balanced_cycles_over_sorted_labels() -> None:
    answers = {"a1": "A", "a2": "A", "a3": "A", "b1": "B", "c1": "C", "c2": "C"}
    ex = _examples([{"id": i, "answer": a} for i, a in answers.items()])
    order = _by_hash("5", "q9", list(answers))
    of = {label: [i for i in order if answers[i] == label] for label in "ABC"}
    fs = FewShot("s", ex, "label-balanced", 6, seed=5 and "5")
    # A B C, then A (B has none left: skipped) C, then A
    want = [of["A"][0], of["B"][0], of["C"][0], of["A"][1], of["C"][1], of["A"][2]]
    assert [e.id for e in draw(fs, "q9")] == want
    fs4 = FewShot("s", ex, "label-balanced", 4, seed="5")
    assert [e.id for e in draw(fs4, "q9")] == want[:4]
    with pytest.raises(PromptError, match=r"draw for item 'q9' finds 6 of 7 examples"):
        draw(FewShot("s", ex, "label-balanced", 7, seed="5"), "q9")


def test_label_balanced_labels_in_code_point_order() -> None:
    # "B" < "a" in code points: the cycle starts with B
    ex = _examples([{"id": "x", "answer": "a"}, {"id": "y", "answer": "B"}])
    assert [e.id for e in draw(FewShot("s", ex, "label-balanced", 2, seed="0"), "q")] == ["y", "x"]


def test_same_metadata_takes_matching_strings_only() -> None:
    rows = [
        {"id": "m1", "answer": "x", "metadata": {"subject": "bio"}},
        {"id": "m2", "answer": "x", "metadata": {"subject": "chem"}},
        {"id": "m3", "answer": "x", "metadata": {"subject": "bio"}},
        {"id": "m4", "answer": "x", "metadata": {"subject": ["bio"]}},
        {"id": "m5", "answer": "x"},
        {"id": "m6", "answer": "x", "metadata": {"subject": "bio"}},
    ]
    fs = FewShot("s", _examples(rows), "same-metadata", 2, seed="3", field="subject")
    want = [i for i in _by_hash("3", "t", [r["id"] for r in rows]) if i in ("m1", "m3", "m6")]
    assert [e.id for e in draw(fs, "t", {"subject": "bio"})] == want[:2]
    with pytest.raises(PromptError, match=r"same-metadata draw for item 't' finds 0 of 2"):
        draw(fs, "t", {"subject": ["bio"]})  # the test item's value must be a string too


def test_distinct_metadata_walks_the_random_order() -> None:
    subjects = {"d1": "bio", "d2": "bio", "d3": "chem", "d4": "phys", "d5": "chem", "d6": None}
    rows = [
        {"id": i, "answer": "x"} | ({"metadata": {"s": s}} if s else {})
        for i, s in subjects.items()
    ]
    fs = FewShot("s", _examples(rows), "distinct-metadata", 3, seed="8", field="s")
    taken: list[str] = []
    seen: set[str] = set()
    for i in _by_hash("8", "t", list(subjects)):
        s = subjects[i]
        if s is not None and s not in seen and len(taken) < 3:
            taken.append(i)
            seen.add(s)
    assert [e.id for e in draw(fs, "t")] == taken
    assert {subjects[i] for i in taken} == {"bio", "chem", "phys"}


def test_fixed_rule_and_the_three_orders() -> None:
    ex = _examples([{"id": i, "answer": "x"} for i in ("b", "C", "a", "d")])
    fixed = FewShot("s", ex, "fixed", 3, ids=("d", "a", "C"))
    assert [e.id for e in draw(fixed, "q1")] == ["d", "a", "C"]
    assert [e.id for e in draw(fixed, "q2")] == ["d", "a", "C"]  # the same for every item
    by_id = FewShot("s", ex, "fixed", 3, ids=("d", "a", "C"), order="id")
    assert [e.id for e in draw(by_id, "q1")] == ["C", "a", "d"]  # code points: "C" < "a"
    rev = FewShot("s", ex, "random", 3, seed="2", order="reverse")
    assert [e.id for e in draw(rev, "q1")] == _by_hash("2", "q1", ["b", "C", "a", "d"])[:3][::-1]


# ------------------------------------------------------------------------------ the study


ITEM_TEMPLATE = "Question: {question}\n{options}\n\n"
ITEMS = [
    {
        "id": "q1",
        "question": "Colour of sky?",
        "options": ["red", "blue"],
        "answer": "B",
        "metadata": {"subject": "sci"},
    },
    {
        "id": "q2",
        "question": "Two plus two?",
        "options": ["4", "5"],
        "answer": "A",
        "metadata": {"subject": "math"},
        "images": ["img/q2.png"],
    },
    {
        "id": "q3",
        "question": "Capital of France?",
        "options": ["Paris", "Rome"],
        "answer": "A",
        "metadata": {"subject": "geo"},
    },
]
EXAMPLES = [
    {
        "id": "e1",
        "question": "One plus one?",
        "options": ["2", "3"],
        "answer": "A",
        "rationale": "1+1=2",
    },
    {
        "id": "e2",
        "question": "Grass?",
        "options": ["green", "pink"],
        "answer": "A",
        "rationale": "chlorophyll",
    },
]


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _files() -> dict[str, bytes]:
    return {
        "items/q.jsonl": _jsonl(ITEMS),
        "items/img/q2.png": PNG,
        "fewshot/ex.jsonl": _jsonl(EXAMPLES),
        "prompts/item.txt": ITEM_TEMPLATE.encode(),
        "prompts/answer.txt": b"Answer: {answer} ({answer_text}) because {rationale}\n",
        "prompts/task.txt": b"Answer with one letter.\n\n",
        "prompts/persona.txt": b"You are careful.\n",
        "prompts/style.txt": b"Be brief.",
    }


COMPONENTS = {
    "task": "prompts/task.txt",
    "persona": "prompts/persona.txt",
    "style": "prompts/style.txt",
}


def _record(path: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return read_items(_jsonl(rows), path).record()


def _protocol(**changes: Any) -> dict[str, Any]:
    protocol: dict[str, Any] = {
        "arms": {"A": {"components": ["task"], "role": "full"}},
        "design": {"seed": "7", "replicates": 2},
        "model": {"provider": "anthropic", "id": "m-1", "max_tokens": 16, "temperature": 0},
        "items": _record("items/q.jsonl", ITEMS),
        "prompt": {"item": "prompts/item.txt"},
    }
    protocol.update(changes)
    return protocol


def _study(protocol: dict[str, Any], files: dict[str, bytes] | None = None) -> LockedStudy:
    return LockedStudy(protocol, (files or _files()).get, COMPONENTS)


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


Q1_BLOCK = "Question: Colour of sky?\nA. red\nB. blue"


def test_plain_item_request() -> None:
    study = _study(_protocol())
    assert study.own_text("A") == "Answer with one letter.\n"
    assert study.arm_text("A", "q1") == "Answer with one letter.\n\n" + Q1_BLOCK + "\n"
    assert study.request("A", None, "q1") == {
        "max_tokens": 16,
        "messages": [
            {"role": "user", "content": [_text("Answer with one letter.\n\n" + Q1_BLOCK + "\n")]}
        ],
        "model": "m-1",
        "temperature": 0,
    }
    assert study.request_bytes("A", None, "q1") == (
        b'{"max_tokens":16,"messages":[{"content":[{"text":"Answer with one letter.\\n\\n'
        b'Question: Colour of sky?\\nA. red\\nB. blue\\n","type":"text"}],"role":"user"}],'
        b'"model":"m-1","temperature":0}'
    )
    assert study.lock_problems() == [] and study.record_problems() == []


def test_item_images_come_first() -> None:
    req = _study(_protocol()).request("A", None, "q2")
    image = {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(PNG).decode(),
        },
    }
    assert req["messages"][0]["content"][0] == image
    assert req["messages"][0]["content"][1]["type"] == "text"


def test_item_placement_in_the_arm_components() -> None:
    arms = {
        "A": {"components": ["persona", "item", "task"]},
        "B": {"components": ["item"]},
        "C": {"components": []},
    }
    study = _study(_protocol(arms=arms))
    assert study.arm_text("A", "q1") == (
        "You are careful.\n\n" + Q1_BLOCK + "\n\nAnswer with one letter.\n"
    )
    assert study.arm_text("B", "q1") == Q1_BLOCK + "\n"
    assert study.arm_text("C", "q1") == Q1_BLOCK + "\n"  # item block last (alone)
    assert study.own_text("A") == "You are careful.\n\nAnswer with one letter.\n"
    assert study.own_text("B") == ""


def test_no_text_block_when_the_arm_text_is_empty() -> None:
    files = _files() | {"prompts/item.txt": b"\n\n"}
    study = _study(_protocol(arms={"A": {"components": []}}), files)
    assert study.arm_text("A", "q2") is None
    assert [b["type"] for b in study.request("A", None, "q2")["messages"][0]["content"]] == [
        "image"
    ]
    with pytest.raises(PromptError, match=r"item 'q1': the user message would be empty"):
        study.request("A", None, "q1")


def test_system_prompt() -> None:
    arms = {"A": {"components": ["task"], "system": ["persona", "style"]}}
    req = _study(_protocol(arms=arms)).request("A", None, "q1")
    assert req["system"] == "You are careful.\n\nBe brief."
    assert "system" not in _study(_protocol()).request("A", None, "q1")


def _fewshot(**changes: Any) -> dict[str, Any]:
    table = {
        "examples": _record("fewshot/ex.jsonl", EXAMPLES),
        "rule": "fixed",
        "ids": ["e2", "e1"],
        "answer": "prompts/answer.txt",
    }
    table.update(changes)
    return table


E1_USER = "Question: One plus one?\nA. 2\nB. 3"
E2_USER = "Question: Grass?\nA. green\nB. pink"
E1_ANSWER = "Answer: A (2) because 1+1=2"
E2_ANSWER = "Answer: A (green) because chlorophyll"


def test_fewshot_turns() -> None:
    protocol = _protocol(
        arms={"A": {"components": ["task"], "fewshot": "ex"}}, fewshot={"ex": _fewshot()}
    )
    req = _study(protocol).request("A", None, "q1")
    assert req["messages"] == [
        {"role": "user", "content": [_text(E2_USER)]},
        {"role": "assistant", "content": [_text(E2_ANSWER)]},
        {"role": "user", "content": [_text(E1_USER)]},
        {"role": "assistant", "content": [_text(E1_ANSWER)]},
        {"role": "user", "content": [_text("Answer with one letter.\n\n" + Q1_BLOCK + "\n")]},
    ]


def test_fewshot_inline_block_before_the_item_block() -> None:
    protocol = _protocol(
        arms={
            "A": {"components": ["task"], "fewshot": "ex"},
            "B": {"components": ["examples", "task"], "fewshot": "ex"},
        },
        fewshot={"ex": _fewshot(style="inline")},
    )
    study = _study(protocol)
    examples = E2_USER + "\n" + E2_ANSWER + "\n\n" + E1_USER + "\n" + E1_ANSWER
    req = study.request("A", None, "q1")
    assert req["messages"] == [
        {
            "role": "user",
            "content": [_text("Answer with one letter.\n\n" + examples + "\n\n" + Q1_BLOCK + "\n")],
        }
    ]
    assert study.arm_text("B", "q1") == (
        examples + "\n\nAnswer with one letter.\n\n" + Q1_BLOCK + "\n"
    )
    assert study.own_text("B") == "Answer with one letter.\n"


def test_fewshot_default_answer_template() -> None:
    table = _fewshot()
    del table["answer"]
    protocol = _protocol(arms={"A": {"components": [], "fewshot": "ex"}}, fewshot={"ex": table})
    assert _study(protocol).examples("A", "q1") == [(E2_USER, "A"), (E1_USER, "A")]


def test_fewshot_leaks_and_short_draws_are_lock_problems() -> None:
    leaky = [
        *EXAMPLES,
        {
            "id": "e3",
            "question": "  Two plus two? ",
            "answer": "B",
            "options": ["1", "4"],
            "rationale": "r",
        },
    ]
    files = _files() | {"fewshot/ex.jsonl": _jsonl(leaky)}
    protocol = _protocol(
        arms={"A": {"components": [], "fewshot": "ex"}},
        fewshot={
            "ex": _fewshot(
                rule="random",
                seed=1,
                count=5,
                ids=None,
                examples=_record("fewshot/ex.jsonl", leaky),
            )
        },
    )
    problems = _study(protocol, files).lock_problems()
    assert any("draw for item 'q1' finds 3 of 5" in p for p in problems)
    assert any("example 'e3' asks the question of test item 'q2'" in p for p in problems)
    files["fewshot/ex.jsonl"] = _jsonl([*EXAMPLES, {"id": "q3", "answer": "A"}])
    protocol["fewshot"]["ex"]["examples"] = _record(
        "fewshot/ex.jsonl", [*EXAMPLES, {"id": "q3", "answer": "A"}]
    )
    problems = _study(protocol, files).lock_problems()
    assert "fewshot/ex.jsonl line 3: example 'q3' has the id of a test item" in problems[-1]
    assert "prompts/item.txt:1:11: slot {question} cannot be filled for item 'q3'" in problems


def test_item_template_refuses_answer_slots() -> None:
    files = _files() | {"prompts/item.txt": b"{question}\nkey: {answer_text}"}
    with pytest.raises(PromptError, match=r"prompts/item.txt:2:6: slot \{answer_text\} is refused"):
        _study(_protocol(), files)


def test_unfillable_slot_names_template_slot_and_first_item() -> None:
    files = _files() | {"prompts/item.txt": b"{question} {option_C}"}
    problems = _study(_protocol(), files).lock_problems()
    assert problems == ["prompts/item.txt:1:12: slot {option_C} cannot be filled for item 'q1'"]


def test_record_problems_name_the_file() -> None:
    protocol = _protocol()
    protocol["items"] = dict(protocol["items"], sha256="0" * 64)
    (problem,) = _study(protocol).record_problems()
    assert problem.startswith("protocol.locked items (items/q.jsonl): sha256 '000")


# ------------------------------------------------------------------------------ §5 and §6


def test_sampling_overrides_per_arm() -> None:
    arms = {
        "A": {"components": ["task"]},
        "B": {
            "components": ["task"],
            "sampling": {"temperature": 0.7, "top_p": 0.9, "stop": ["\n\n"], "top_k": 40},
        },
    }
    study = _study(_protocol(arms=arms))
    req = study.request("B", None, "q1")
    assert {k: v for k, v in req.items() if k != "messages"} == {
        "max_tokens": 16,
        "model": "m-1",
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 40,
        "stop_sequences": ["\n\n"],
    }
    assert study.request("A", None, "q1")["temperature"] == 0
    assert b'"stop_sequences":["\\n\\n"],"temperature":0.7,"top_k":40,"top_p":0.9}' in (
        study.request_bytes("B", None, "q1")
    )


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"provider": "anthropic", "temperature": 1.5}, "temperature: 1.5 is outside 0 to 1"),
        ({"provider": "openai", "temperature": 1.5}, None),
        ({"provider": "openai", "temperature": 2.5}, "temperature: 2.5 is outside 0 to 2"),
        ({"provider": "openai", "top_k": 5}, "top_k: 5 is refused by the openai backend"),
        ({"provider": "openai-compatible", "top_k": 5}, None),
        ({"provider": "anthropic", "top_k": 0}, "top_k: 0 is not an integer >= 1"),
        ({"provider": "anthropic", "top_p": 1.2}, "top_p: 1.2 is not a number from 0 to 1"),
        ({"provider": "anthropic", "stop": ["a"] * 9}, "must hold 1 to 8 strings"),
        ({"provider": "anthropic", "stop": ["a"] * 8}, None),
        ({"provider": "openai", "stop": ["a"] * 5}, "must hold 0 to 4 strings"),
        ({"provider": "anthropic", "stop": ["a", ""]}, "is not a list of non-empty strings"),
        ({"provider": "anthropic", "max_tokens": 0}, "max_tokens: 0 is not an integer >= 1"),
        ({"provider": "anthropic", "temperature": True}, "temperature: True is not a number"),
    ],
)
def test_parameter_ranges(params: dict[str, Any], problem: str | None) -> None:
    full = {"id": "m", "max_tokens": 8, "temperature": 0} | params
    found = parameter_problems("[models.x]", full)
    assert found == ([] if problem is None else [f"[models.x] {problem}"]) or (
        problem is not None and len(found) == 1 and problem in found[0]
    )


def test_openai_wire_conversion() -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/jpeg", "data": "QUJD"},
    }
    request = {
        "max_tokens": 10,
        "model": "m",
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 3,
        "stop_sequences": ["END"],
        "system": "sys",
        "messages": [
            {"role": "user", "content": [_text("ex 1")]},
            {"role": "assistant", "content": [_text("A"), _text("B")]},
            {"role": "user", "content": [image, _text("question")]},
        ],
    }
    assert openai_request(request) == {
        "model": "m",
        "max_tokens": 10,
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 3,
        "stop": ["END"],
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "ex 1"},
            {"role": "assistant", "content": "AB"},
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}},
                    {"type": "text", "text": "question"},
                ],
            },
        ],
    }


def test_openai_wire_from_the_study() -> None:
    study = _study(_protocol())
    assert study.request("A", None, "q1", "openai-compatible") == {
        "max_tokens": 16,
        "model": "m-1",
        "temperature": 0,
        "messages": [{"role": "user", "content": "Answer with one letter.\n\n" + Q1_BLOCK + "\n"}],
    }


def test_legacy_image_study_renders_as_trials_md() -> None:
    protocol = {
        "arms": {"A": {"components": ["persona", "task"]}},
        "design": {"seed": "7", "replicates": 1},
        "model": {
            "provider": "anthropic",
            "id": "claude-x",
            "max_tokens": 2048,
            "temperature": 1.0,
        },
        "stimuli": ["s1"],
    }
    files = _files() | {"stimuli/s1.jpg": JPEG}
    study = LockedStudy(protocol, files.get, COMPONENTS, {"s1": "stimuli/s1.jpg"})
    text = "You are careful.\n\nAnswer with one letter.\n"
    want = {
        "max_tokens": 2048,
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/jpeg",
                            "data": base64.b64encode(JPEG).decode(),
                        },
                    },
                    {"type": "text", "text": text},
                ],
            }
        ],
        "model": "claude-x",
        "temperature": 1.0,
    }
    assert study.request("A", None, "s1") == want
    assert study.own_text("A") == text
    assert (
        study.request_bytes("A", None, "s1")
        == json.dumps(want | {"temperature": 1}, sort_keys=True, separators=(",", ":")).encode()
    )


def test_image_folder_with_an_id_template() -> None:
    protocol = {
        "arms": {"A": {"components": ["task"]}},
        "design": {"seed": "7", "replicates": 1},
        "model": {"provider": "anthropic", "id": "m", "max_tokens": 5, "temperature": 0},
        "stimuli": ["s1"],
        "prompt": {"item": "prompts/id.txt"},
    }
    files = _files() | {"stimuli/s1.png": PNG, "prompts/id.txt": b"Chart {id}.\n"}
    study = LockedStudy(protocol, files.get, COMPONENTS, {"s1": "stimuli/s1.png"})
    assert study.arm_text("A", "s1") == "Answer with one letter.\n\nChart s1.\n"
    files["prompts/id.txt"] = b"{question}"
    assert LockedStudy(
        protocol, files.get, COMPONENTS, {"s1": "stimuli/s1.png"}
    ).lock_problems() == ["prompts/id.txt:1:1: slot {question} cannot be filled for item 's1'"]


# ------------------------------------------------------------------------------ §7 schedule


def test_trial_ids_three_and_four_parts() -> None:
    assert trial_id("A", None, "q1", 2) == "A|q1|2"
    assert trial_id("A", "big", "q1", 2) == "A|big|q1|2"
    assert parse_trial_id("A|q1|2", False) == ("A", None, "q1", "2")
    assert parse_trial_id("A|big|q1|2", True) == ("A", "big", "q1", "2")
    with pytest.raises(PromptError):
        parse_trial_id("A|q1|2", True)


def test_schedule_of_a_single_model_study() -> None:
    study = _study(_protocol())
    ids = [f"A|{q}|{r}" for q in ("q1", "q2", "q3") for r in (1, 2)]
    want = sorted(ids, key=lambda t: hashlib.sha256(f"7|{t}".encode()).hexdigest())
    assert study.trial_ids() == want
    assert study.trial_count() == 6
    assert execution_order(ids, "7") == want


def test_schedule_with_models_replicates_and_subsets() -> None:
    models = {
        "big": {"provider": "anthropic", "id": "m-big", "max_tokens": 16, "temperature": 0},
        "small": {"provider": "openai", "id": "m-small", "max_tokens": 8, "temperature": 0.5},
    }
    arms = {
        "A": {"components": ["task"]},
        "B": {
            "components": ["task"],
            "models": ["small"],
            "replicates": 3,
            "items": {"n": 2, "seed": 9},
        },
    }
    protocol = _protocol(arms=arms, models=models)
    del protocol["model"]
    study = _study(protocol)
    keyed = sorted(("q1", "q2", "q3"), key=lambda i: hashlib.sha256(f"9|{i}".encode()).hexdigest())
    b_items = keyed[:2]
    ids = [f"A|{m}|{q}|1" for m in ("big", "small") for q in ("q1", "q2", "q3")]
    ids += [f"A|{m}|{q}|2" for m in ("big", "small") for q in ("q1", "q2", "q3")]
    ids += [f"B|small|{q}|{r}" for q in b_items for r in (1, 2, 3)]
    want = sorted(ids, key=lambda t: hashlib.sha256(f"7|{t}".encode()).hexdigest())
    assert study.trial_ids() == want
    assert study.trial_count() == 18
    assert study.request("B", "small", "q1")["model"] == "m-small"
    assert study.request("A", "big", "q1")["max_tokens"] == 16
    assert sorted(subset(["q1", "q2", "q3"], 2, "9")) == sorted(b_items)


def test_arm_models_must_be_locked_models() -> None:
    arms = {"A": {"components": ["task"], "models": ["huge"]}}
    with pytest.raises(PromptError, match=r"arms.A.models: the study has one \[model\]"):
        _study(_protocol(arms=arms))


def test_draw_work_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    import verify._prompts as prompts

    table = _fewshot(rule="random", seed=1, count=1, ids=None)
    protocol = _protocol(arms={"A": {"components": [], "fewshot": "ex"}}, fewshot={"ex": table})
    study = _study(protocol)
    assert study.draw_hashes == 2 * 3  # 2 examples x 3 test items
    monkeypatch.setattr(prompts, "MAX_DRAW_HASHES", 5)
    with pytest.raises(PromptError, match=r"the few-shot draws need 6 order hashes"):
        study.request("A", None, "q1")
    assert any("need 6 order hashes" in p for p in study.lock_problems())
