"""Response parsers and the blinded item-level scorer (docs/scoring.md)."""

from __future__ import annotations

import hashlib
import itertools
import json
from functools import cache
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st
from locations import REPO

from analysis import _parse as parse_module
from analysis._parse import (
    PARSERS,
    AnswerRow,
    Parsed,
    ParseError,
    parse_multiple_choice,
    parse_orientation_word,
    parse_response,
    parse_tumbling_e,
    parse_yes_no_maybe,
    response_text,
)
from analysis._score import (
    ANSWER_NOT_A_CHART,
    ANSWER_ORIENTATIONS,
    TrialScore,
    score_choice,
    score_parsed,
    score_text,
    score_tumbling_e,
)
from runner import spec
from runner._stimuli import (
    KIND_SNELLEN,
    NOT_A_TUMBLING_E_CHART,
    ORIENTATIONS,
    SNELLEN_ROWS,
    Chart,
    Glyph,
    probe_set,
    read_truth_csv,
    write_truth_csv,
)

SEED = 20260421


@cache
def charts() -> dict[str, Chart]:
    return {chart.id: chart for chart in probe_set(SEED)}


def grid_of(chart: Chart) -> list[list[str]]:
    return [
        [g.orientation for g in glyphs]
        for _, glyphs in itertools.groupby(chart.glyphs, key=lambda g: g.row)
    ]


def answer_json(grid: list[list[str]], chart_type: str = "tumbling-e", **dumps: Any) -> str:
    rows = [{"row": i, "orientations": values} for i, values in enumerate(grid, start=1)]
    return json.dumps({"chart_type": chart_type, "rows": rows}, **dumps)


def rows_of(parsed: Parsed) -> dict[int, tuple[str | None, ...]]:
    return {row.row: row.values for row in parsed.answers}


SMALL = (
    '{"chart_type": "tumbling-e", "rows": [{"row": 1, "orientations": ["UP"]}, '
    '{"row": 2, "orientations": ["RIGHT", "DOWN"]}]}'
)
SMALL_ROWS = {1: ("UP",), 2: ("RIGHT", "DOWN")}

# --------------------------------------------------------------------------- tumbling-E table

TUMBLING_CASES: list[tuple[str, str, str, dict[int, tuple[str | None, ...]], list[str]]] = [
    # (case id, text, status, rows, substrings expected in the problems, in order)
    ("clean", SMALL, "ok", SMALL_ROWS, []),
    ("fenced", f"```json\n{SMALL}\n```", "ok", SMALL_ROWS, []),
    ("fenced-no-language", f"```\n{SMALL}\n```\n", "ok", SMALL_ROWS, []),
    (
        "prose-before-and-after",
        f"Here is my reading of the chart:\n\n{SMALL}\n\nRow 11 was hard to see.",
        "ok",
        SMALL_ROWS,
        [],
    ),
    ("surrounding-whitespace", f"\n\n   {SMALL}   \n", "ok", SMALL_ROWS, []),
    (
        "lower-case-and-padding",
        '{"chart_type": "Tumbling-E", "rows": [{"row": 1, "orientations": ["up"]}, '
        '{"row": 2, "orientations": [" Right ", "dOWN"]}]}',
        "ok",
        SMALL_ROWS,
        [],
    ),
    (
        "rows-out-of-order",
        '{"chart_type": "tumbling-e", "rows": [{"row": 2, "orientations": ["RIGHT", "DOWN"]}, '
        '{"row": 1, "orientations": ["UP"]}]}',
        "ok",
        SMALL_ROWS,
        [],
    ),
    (
        "wrong-orientation-word",
        '{"chart_type": "tumbling-e", "rows": [{"row": 1, "orientations": ["UP"]}, '
        '{"row": 2, "orientations": ["RIGHT", "NORTH"]}]}',
        "partial",
        {1: ("UP",), 2: ("RIGHT", None)},
        ['row 2, position 2: "NORTH" is not one of UP, RIGHT, DOWN, LEFT'],
    ),
    (
        "single-letter-synonym-is-not-read",
        '{"chart_type": "tumbling-e", "rows": [{"row": 1, "orientations": ["U"]}]}',
        "partial",
        {1: (None,)},
        ['row 1, position 1: "U" is not one of'],
    ),
    (
        "non-string-orientation",
        '{"chart_type": "tumbling-e", "rows": [{"row": 1, "orientations": [null, 3]}]}',
        "partial",
        {1: (None, None)},
        ["row 1, position 1: null is not one of", "row 1, position 2: 3 is not one of"],
    ),
    (
        "missing-rows-is-ok-for-the-parser",
        '{"chart_type": "tumbling-e", "rows": [{"row": 1, "orientations": ["UP"]}]}',
        "ok",
        {1: ("UP",)},
        [],
    ),
    (
        "extra-rows-are-kept",
        '{"chart_type": "tumbling-e", "rows": [{"row": 1, "orientations": ["UP"]}, '
        '{"row": 12, "orientations": ["LEFT"]}]}',
        "ok",
        {1: ("UP",), 12: ("LEFT",)},
        [],
    ),
    (
        "duplicate-row-numbers",
        '{"chart_type": "tumbling-e", "rows": [{"row": 1, "orientations": ["UP"]}, '
        '{"row": 2, "orientations": ["LEFT"]}, {"row": 2, "orientations": ["RIGHT"]}]}',
        "partial",
        {1: ("UP",)},
        ["row 2 is given 2 times; none of its answers are used"],
    ),
    (
        "non-integer-row-numbers",
        '{"chart_type": "tumbling-e", "rows": [{"row": "1", "orientations": ["UP"]}, '
        '{"row": 2.0, "orientations": ["UP"]}, {"row": 0, "orientations": ["UP"]}, '
        '{"row": true, "orientations": ["UP"]}, {"orientations": ["UP"]}, '
        '{"row": 3, "orientations": ["DOWN"]}]}',
        "partial",
        {3: ("DOWN",)},
        [
            'rows[0]: "row" "1" is not a positive integer',
            'rows[1]: "row" 2.0 is not a positive integer',
            'rows[2]: "row" 0 is not a positive integer',
            'rows[3]: "row" true is not a positive integer',
            'rows[4] has no "row" number',
        ],
    ),
    (
        "orientations-not-a-list",
        '{"chart_type": "tumbling-e", "rows": [{"row": 1, "orientations": "UP"}, {"row": 2}, 7]}',
        "partial",
        {},
        [
            'row 1: "orientations" is a JSON string, not an array',
            'row 2: "orientations" is missing',
            "rows[2] is a JSON number, not an object",
        ],
    ),
    (
        "chart-type-missing",
        '{"rows": [{"row": 1, "orientations": ["UP"]}]}',
        "partial",
        {1: ("UP",)},
        ['"chart_type" is missing'],
    ),
    (
        "chart-type-unknown",
        '{"chart_type": "snellen", "rows": []}',
        "partial",
        {},
        ['"chart_type" \'snellen\' is neither "tumbling-e" nor "other"'],
    ),
    (
        "rows-not-an-array",
        '{"chart_type": "tumbling-e", "rows": {"1": ["UP"]}}',
        "partial",
        {},
        ['"rows" is a JSON object, not an array'],
    ),
    (
        "rows-missing",
        '{"chart_type": "tumbling-e"}',
        "partial",
        {},
        ['"rows" is missing'],
    ),
    (
        "truncated-json",
        '```json\n{"chart_type": "tumbling-e", "rows": [{"row": 1, "orientations": ["UP"]}, '
        '{"row": 2, "orientations": ["RIGHT", "DO',
        "unparseable",
        {},
        ['no JSON object with a "chart_type" or "rows" member', "does not parse"],
    ),
    ("other-chart", '{"chart_type": "other", "rows": []}', "refused", {}, []),
    (
        "other-chart-upper-case",
        '```json\n{"chart_type": "OTHER", "rows": []}\n```',
        "refused",
        {},
        [],
    ),
    (
        "other-chart-with-rows",
        '{"chart_type": "other", "rows": [{"row": 1, "orientations": ["UP"]}]}',
        "refused",
        {},
        ['chart_type "other" with a non-empty "rows"'],
    ),
    (
        "refusal-prose",
        "This is not a tumbling E chart. It is a standard Snellen chart made of letters.",
        "refused",
        {},
        ["refusal without an answer object: 'not a tumbling E'"],
    ),
    (
        "refusal-prose-cannot-determine",
        "I cannot determine orientations for this image because it contains letters such as "
        "D, K and Z rather than E optotypes.",
        "refused",
        {},
        ["refusal without an answer object"],
    ),
    (
        "refusal-prose-markdown-and-curly-apostrophe",
        "The image **isn\u2019t** a tumbling\u2011E chart.",
        "refused",
        {},
        ["refusal without an answer object"],
    ),
    (
        "refusal-letters-rather-than-es",
        "The chart shows Sloan letters rather than rotated E optotypes.",
        "refused",
        {},
        ["refusal without an answer object"],
    ),
    (
        "other-prose-is-unparseable",
        "The chart has 11 rows; the Es in the first row face up.",
        "unparseable",
        {},
        ['no JSON object with a "chart_type" or "rows" member'],
    ),
    ("empty-string", "", "unparseable", {}, ["empty response"]),
    ("whitespace-only", " \n\t", "unparseable", {}, ["empty response"]),
    (
        "json-array-instead-of-object",
        '[{"row": 1, "orientations": ["UP"]}, {"row": 2, "orientations": ["RIGHT", "DOWN"]}]',
        "unparseable",
        {},
        ['no JSON object with a "chart_type" or "rows" member', "JSON array at character 0"],
    ),
    (
        "answer-object-inside-an-array",
        f"[{SMALL}]",
        "unparseable",
        {},
        ['no JSON object with a "chart_type" or "rows" member', "JSON array at character 0"],
    ),
    (
        "answer-object-nested-in-another-object",
        f'{{"answer": {SMALL}}}',
        "unparseable",
        {},
        ['no JSON object with a "chart_type" or "rows" member'],
    ),
    (
        "braces-in-prose-and-inside-strings",
        "I read it as {rows, orientations} and answer {as requested}:\n"
        '{"chart_type": "tumbling-e", "note": "braces {like} [these] in a string", '
        '"rows": [{"row": 1, "orientations": ["UP"]}, {"row": 2, "orientations": ["RIGHT", '
        '"DOWN"]}]}\nThat is all {end}.',
        "ok",
        SMALL_ROWS,
        [],
    ),
    (
        "non-answer-json-before-the-answer",
        f'Settings used: {{"rows_expected": 11}} and [1, 2]. Answer:\n{SMALL}',
        "ok",
        SMALL_ROWS,
        [],
    ),
    ("same-object-twice", f"{SMALL}\n\nAgain, for clarity:\n{SMALL}", "ok", SMALL_ROWS, []),
    (
        "two-different-objects",
        f"{SMALL}\nCorrection:\n{SMALL.replace('DOWN', 'LEFT')}",
        "unparseable",
        {},
        ["2 different answer objects"],
    ),
    (
        "duplicate-key-is-not-json-we-accept",
        '{"chart_type": "tumbling-e", "rows": [], "rows": [{"row": 1, "orientations": ["UP"]}]}',
        "unparseable",
        {},
        [
            'no JSON object with a "chart_type" or "rows" member',
            "a JSON array at character 49 is not an answer object",
            "JSON object at character 0 does not parse: duplicate key 'rows'",
        ],
    ),
    (
        "refusal-words-next-to-an-answer-object-do-not-matter",
        f"This is not a tumbling E chart, but here is my best reading:\n{SMALL}",
        "ok",
        SMALL_ROWS,
        [],
    ),
]


@pytest.mark.parametrize(
    ("text", "status", "rows", "problems"),
    [case[1:] for case in TUMBLING_CASES],
    ids=[case[0] for case in TUMBLING_CASES],
)
def test_tumbling_e_table(
    text: str, status: str, rows: dict[int, tuple[str | None, ...]], problems: list[str]
) -> None:
    parsed = parse_tumbling_e(text)
    assert parsed.status == status, parsed
    assert rows_of(parsed) == rows
    assert [row.row for row in parsed.answers] == sorted(rows)
    assert len(parsed.problems) == len(problems), parsed.problems
    for got, want in zip(parsed.problems, problems, strict=True):
        assert want in got
    if status in ("ok", "partial"):
        assert (status == "ok") == (not parsed.problems)
    json.dumps(parsed.as_dict())  # JSON-ready


def test_chart_type_is_normalised_and_reported() -> None:
    assert parse_tumbling_e(SMALL.replace("tumbling-e", " TUMBLING-E ")).chart_type == "tumbling-e"
    assert parse_tumbling_e('{"chart_type": "other", "rows": []}').chart_type == "other"
    assert parse_tumbling_e("this is not a tumbling E chart").chart_type is None


def test_as_dict_layout() -> None:
    parsed = parse_tumbling_e(SMALL.replace('"DOWN"', '"SIDEWAYS"'))
    assert parsed.as_dict() == {
        "status": "partial",
        "chart_type": "tumbling-e",
        "answers": [{"row": 1, "values": ["UP"]}, {"row": 2, "values": ["RIGHT", None]}],
        "problems": ['row 2, position 2: "SIDEWAYS" is not one of UP, RIGHT, DOWN, LEFT'],
    }
    assert parsed.grid() == {(1, 1): "UP", (2, 1): "RIGHT", (2, 2): None}


def test_full_chart_round_trip() -> None:
    chart = charts()["mixed-1"]
    parsed = parse_tumbling_e(answer_json(grid_of(chart), indent=2))
    assert parsed.status == "ok"
    assert [len(row.values) for row in parsed.answers] == list(SNELLEN_ROWS)
    assert parsed.grid() == {(g.row, g.position): g.orientation for g in chart.glyphs}


def test_deeply_nested_json_does_not_crash() -> None:
    parsed = parse_tumbling_e("[" * 100_000 + "{" * 1000)
    assert parsed.status == "unparseable"


def test_nesting_limit() -> None:
    deep = "[" * 61 + "1" + "]" * 61  # the answer object has depth 3 + 61 = 64: accepted
    text = SMALL.replace('"UP"]', f'"UP"], "x": {deep}', 1)
    assert parse_tumbling_e(text).status == "ok"
    too_deep = SMALL.replace('"UP"]', f'"UP"], "x": [{deep}]', 1)
    parsed = parse_tumbling_e(too_deep)
    assert parsed.status == "unparseable"
    assert "nested deeper than 64 levels" in parsed.problems[-1]


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    # more "[" and "{" than the limit, all inside a string: depth 3, accepted
    text = SMALL.replace('"UP"]', '"UP"], "note": "' + "[{" * 40 + '"', 1)
    assert parse_tumbling_e(text).status == "ok"


def test_first_repeated_key_is_named() -> None:
    text = '{"a": 1, "b": 2, "b": 3, "a": 4, "rows": []}'
    assert parse_tumbling_e(text).problems[-1] == (
        "JSON object at character 0 does not parse: duplicate key 'b'"
    )


def test_items_already_canonical_read_as_the_normalised_ones() -> None:
    canonical = parse_tumbling_e(
        '{"chart_type": "tumbling-e", "rows": [{"row": 1, "orientations": ["UP", "LEFT"]}]}'
    )
    loose = parse_tumbling_e(
        '{"chart_type": "tumbling-e", "rows": [{"row": 1, "orientations": [" up", "Left\\n"]}]}'
    )
    assert canonical == loose
    assert canonical.answers[0].values == ("UP", "LEFT")
    mixed = parse_tumbling_e(
        '{"chart_type": "tumbling-e", "rows": [{"row": 1, "orientations": ["UP", ["LEFT"], 7]}]}'
    )
    assert mixed.status == "partial"
    assert mixed.answers[0].values == ("UP", None, None)
    assert len(mixed.problems) == 2


def test_integer_digit_limit() -> None:
    base = '{"chart_type": "tumbling-e", "rows": [], "n": -%s}'
    assert parse_tumbling_e(base % ("9" * 4300)).status == "ok"
    parsed = parse_tumbling_e(base % ("9" * 4301))
    assert parsed.status == "unparseable"
    assert "more than 4300 digits" in parsed.problems[-1]


_ROW_NUMBERS = st.one_of(
    st.integers(min_value=-2, max_value=12), st.booleans(), st.none(), st.just(1.0), st.text()
)
_ROW_ITEMS = st.one_of(
    st.sampled_from(["UP", "RIGHT", "DOWN", "LEFT", " up", "Left\n", "SIDEWAYS", ""]),
    st.integers(),
    st.none(),
    st.lists(st.just("UP"), max_size=2),
    st.dictionaries(st.just("x"), st.just("UP"), max_size=1),
)
_ROW_ENTRIES = st.one_of(
    st.fixed_dictionaries(
        {"row": _ROW_NUMBERS, "orientations": st.lists(_ROW_ITEMS, max_size=4)},
    ),
    st.fixed_dictionaries({"row": _ROW_NUMBERS}, optional={"orientations": _ROW_ITEMS}),
    st.fixed_dictionaries({"orientations": st.lists(st.sampled_from(["UP", "LEFT"]), max_size=3)}),
    st.sampled_from([None, 3, "row", []]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_ROW_ENTRIES, max_size=6))
def test_usual_rows_read_as_one_by_one(entries: list[Any]) -> None:
    """The usual rows, read at once, are exactly what the checks one by one read (no problem)."""
    from analysis.parsers.tumbling_e_json import _read_rows, _rows_one_by_one, _usual_rows

    slow_problems: list[str] = []
    slow = _rows_one_by_one(entries, slow_problems)
    usual = _usual_rows(entries)
    if usual is not None:
        assert usual == slow
        assert slow_problems == []
    problems: list[str] = []
    assert _read_rows(entries, problems) == slow
    assert problems == slow_problems


def test_usual_rows_in_any_order() -> None:
    """Rows given out of order, each once, come back in row order without a problem."""
    from analysis.parsers.tumbling_e_json import _usual_rows

    entries = [
        {"row": 2, "orientations": ["RIGHT", "DOWN"]},
        {"row": 1, "orientations": ["UP"]},
    ]
    usual = _usual_rows(entries)
    assert usual is not None
    assert [(r.row, r.values) for r in usual] == [(1, ("UP",)), (2, ("RIGHT", "DOWN"))]
    assert _usual_rows([{"row": True, "orientations": ["UP"]}]) is None  # true is not a number
    assert _usual_rows([*entries, {"row": 1, "orientations": ["UP"]}]) is None  # row 1 twice


def _scan_reference(text: str) -> tuple[tuple[tuple[int, Any], ...], str | None]:
    """docs/scoring.md 4.2 step by step, one character at a time (the scan's reference)."""
    from analysis.parsers._core import _DECODER, MAX_DEPTH, _depth

    values: list[tuple[int, Any]] = []
    first_error = None
    i = 0
    while i < len(text):
        char = text[i]
        if char not in "{[":
            i += 1
            continue
        try:
            value, end = _DECODER.raw_decode(text, i)
        except (ValueError, RecursionError) as exc:
            if first_error is None and char == "{":
                reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                if isinstance(exc, RecursionError):
                    reason = "nested too deeply"
                first_error = f"JSON object at character {i} does not parse: {reason}"
            i += 1
            continue
        if _depth(value) > MAX_DEPTH:
            if first_error is None and char == "{":
                first_error = f"JSON object at character {i} is nested deeper than 64 levels"
            i += 1
            continue
        values.append((i, value))
        i = end
    return tuple(values), first_error


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                ["{", "}", "[", "]", '"', ":", ",", " ", "x", "1", "[1]", '{"a": 1}', '"]"']
            ),
            st.sampled_from(['{"rows": []}', '{"a": 1, "a": 2}', "[[[", "NaN", '{"b": [}']),
        ),
        max_size=30,
    ).map("".join)
)
def test_scan_finds_what_the_documented_scan_finds(text: str) -> None:
    """The scan that jumps to the next "{" or "[" finds the values and error of 4.2's steps."""
    from analysis.parsers._core import _scan_json

    scan = _scan_json(text)
    values, first_error = _scan_reference(text)
    assert [offset for offset, _ in scan.values] == [offset for offset, _ in values]
    assert json.dumps([v for _, v in scan.values]) == json.dumps([v for _, v in values])
    assert scan.first_error == first_error


def test_empty_after_markup_is_empty() -> None:
    """Markup and white space alone is an empty response; a dash or quote is not."""
    assert parse_tumbling_e(" ** `` \r\n\t").problems == ("empty response",)
    for text in ("\u2014", "\u2019", "-"):
        assert parse_tumbling_e(f"`{text}`").problems != ("empty response",)


def test_equal_answer_objects_are_compared_as_json() -> None:
    reordered = '{"rows": [{"orientations": ["UP"], "row": 1.0}], "chart_type": "tumbling-e"}'
    first = '{"chart_type": "tumbling-e", "rows": [{"row": 1, "orientations": ["UP"]}]}'
    assert parse_tumbling_e(f"{first}\n{reordered}").status == "ok"  # 1 == 1.0: one object
    as_bool = first.replace('"row": 1', '"row": true')
    assert parse_tumbling_e(f"{first}\n{as_bool}").status == "unparseable"  # true != 1


DOC = REPO / "docs" / "scoring.md"


def test_refusal_patterns_are_the_documented_list() -> None:
    doc = DOC.read_text(encoding="utf-8")
    listed = [line for line in doc.splitlines() if line.startswith("R") and line[1:2].isdigit()]
    assert listed == [
        f"R{i} {pattern}" for i, pattern in enumerate(parse_module.REFUSAL_PATTERNS, start=1)
    ]


@pytest.mark.parametrize(
    ("label", "name"),
    [
        ("KEY", "KEY_PATTERN"),
        ("ORIENTATION_KEY", "ORIENTATION_KEY_PATTERN"),
        ("JOIN", "JOIN_PATTERN"),
        *(
            (n, n)
            for n in (
                "LETTER_TOKEN",
                "LETTER_ALONE",
                "LETTER_REVERSE_SUFFIX",
                "LETTER_OPTION_LINE",
                "WORD_TOKEN",
                "WORD_ALONE",
                "YES_NO_OPENING",
                "ORIENTATION_CAPITALS",
            )
        ),
    ],
)
def test_single_answer_patterns_are_documented(label: str, name: str) -> None:
    assert f"\n{label} {getattr(parse_module, name)}\n" in DOC.read_text(encoding="utf-8")


def test_documented_examples() -> None:
    doc = DOC.read_text(encoding="utf-8")
    examples = [
        score_tumbling_e(
            parse_tumbling_e(
                '{"chart_type": "tumbling-e", "rows": [{"row": 1, "orientations": ["up"]}]}'
            ),
            [Glyph(1, 1, "UP")],
        ),
        score_text(
            '{"chart_type": "other", "rows": []}', "tumbling-e-json", NOT_A_TUMBLING_E_CHART
        ),
        score_text("Answer: (c)", "multiple-choice", "B"),
    ]
    for score in examples:
        assert f"`{score.items_bytes().decode()}`" in doc
        assert f"`{score.sha256}`" in doc


# --------------------------------------------------------------------------- single answers

CHOICE_CASES: list[tuple[str, str, str | None, str | None]] = [
    # (text, options, answer or None when unparseable, substring of the problem)
    ("B", "ABCD", "B", None),
    ("Answer: B", "ABCD", "B", None),
    ("(c)", "ABCD", "C", None),
    ("**B**", "ABCD", "B", None),
    ("The answer is B.", "ABCD", "B", None),
    ("b.", "ABCD", "B", None),
    ("[D]", "ABCD", "D", None),
    ("Let me think.\n\nFinal answer: (A) Myocardial infarction", "ABCD", "A", None),
    ("The correct answer is **C**.", "ABCD", "C", None),
    ("Answer: b", "ABCD", "B", None),
    ("Answer: b\r\n\r\nThat is my choice.", "ABCD", "B", None),
    ("I think C is the correct answer.", "ABCD", "C", None),
    ("Correct option: D", "ABCD", "D", None),
    ("The answer is B. Option A is wrong because it ignores the fever.", "ABCD", "B", None),
    ("Answer: `E`", "ABCDE", "E", None),
    ("Reasoning about the case.\n\n**C. Hypertension**", "ABCD", "C", None),
    ("Reasoning.\n\nC", "ABCD", "C", None),
    # strict: two different letters asserted
    ("Answer: B or C", "ABCD", None, "conflicting answer letters stated: B, C"),
    ("The answer is B. On reflection, the answer is C.", "ABCD", None, "B, C"),
    ("Answer: A, D", "ABCD", None, "A, D"),
    ("A. Flu\nB. Cold\nC. Measles\nD. Mumps", "ABCD", None, "conflicting answer letters: A, B"),
    # not an answer
    ("The answer is a pulmonary embolism.", "ABCD", None, "no answer letter found"),
    ("Answer: E", "ABCD", None, "no answer letter found"),
    ("I am not able to answer medical questions.", "ABCD", None, "no answer letter found"),
    ("", "ABCD", None, "empty response"),
    # the same letter twice is not a conflict
    ("Answer: B\n\nSo the answer is (B).", "ABCD", "B", None),
]


@pytest.mark.parametrize(("text", "options", "answer", "problem"), CHOICE_CASES)
def test_multiple_choice(text: str, options: str, answer: str | None, problem: str | None) -> None:
    parsed = parse_multiple_choice(text, options)
    assert parsed.answer == answer
    assert parsed.chart_type is None
    if answer is None:
        assert parsed.status == "unparseable"
        assert parsed.answers == ()
        assert problem is not None and problem in parsed.problems[0]
    else:
        assert parsed == Parsed("ok", (AnswerRow(1, (answer,)),), None, ())


def test_multiple_choice_options_are_checked() -> None:
    with pytest.raises(ValueError, match="distinct upper-case"):
        parse_multiple_choice("A", "abcd")
    with pytest.raises(ValueError, match="distinct upper-case"):
        parse_multiple_choice("A", "AAB")


YES_NO_CASES: list[tuple[str, str | None, str | None]] = [
    ("yes", "yes", None),
    ("Yes.", "yes", None),
    ("**No**", "no", None),
    ("MAYBE", "maybe", None),
    ("Answer: no", "no", None),
    ("The final answer is: **Yes**", "yes", None),
    ("No, the trial did not show a benefit.", "no", None),
    ("Based on the abstract, the evidence is mixed.\n\nMaybe", "maybe", None),
    ("Answer: yes or no, depending on the dose.", None, "conflicting"),
    ("The answer is yes. Final answer: maybe.", None, "maybe, yes"),
    ("No evidence was presented either way.", None, "no yes/no/maybe answer found"),
    ("The answer is not clear.", None, "no yes/no/maybe answer found"),
    ("", None, "empty response"),
]


@pytest.mark.parametrize(("text", "answer", "problem"), YES_NO_CASES)
def test_yes_no_maybe(text: str, answer: str | None, problem: str | None) -> None:
    parsed = parse_yes_no_maybe(text)
    assert parsed.answer == answer
    if answer is None:
        assert parsed.status == "unparseable"
        assert problem is not None and problem in parsed.problems[0]
    else:
        assert parsed.status == "ok" and parsed.problems == ()


ORIENTATION_CASES: list[tuple[str, str | None, str | None]] = [
    ("LEFT", "LEFT", None),
    ("left.", "LEFT", None),
    ("Orientation: up", "UP", None),
    ("The answer is Down.", "DOWN", None),
    ("The top of the breast image points RIGHT.", "RIGHT", None),
    ("I would say the image is rotated so that the top faces\n\nleft", "LEFT", None),
    ("UP or DOWN", None, "conflicting orientation words"),
    ("Answer: left or right", None, "LEFT, RIGHT"),
    ("It is rotated, I cannot tell which way.", None, "no orientation word found"),
    ("", None, "empty response"),
]


@pytest.mark.parametrize(("text", "answer", "problem"), ORIENTATION_CASES)
def test_orientation_word(text: str, answer: str | None, problem: str | None) -> None:
    parsed = parse_orientation_word(text)
    assert parsed.answer == answer
    if answer is None:
        assert parsed.status == "unparseable"
        assert problem is not None and problem in parsed.problems[0]
    else:
        assert parsed.status == "ok"


def test_parsers_cover_the_spec() -> None:
    assert tuple(PARSERS) == spec.PARSERS
    assert PARSERS["multiple-choice"]("Answer: C").answer == "C"


# --------------------------------------------------------------------------- response bodies


def messages_body(*blocks: dict[str, Any]) -> bytes:
    return json.dumps({"id": "msg_1", "type": "message", "content": list(blocks)}).encode()


def test_response_text_messages() -> None:
    raw = messages_body(
        {"type": "thinking", "thinking": "hmm"},
        {"type": "text", "text": "Answer: "},
        {"type": "text", "text": "B"},
    )
    assert response_text(raw, "anthropic-messages") == "Answer: B"
    assert response_text(messages_body(), "anthropic-messages") == ""
    assert parse_response(raw, "anthropic-messages", "multiple-choice").answer == "B"


def test_response_text_openai() -> None:
    raw = json.dumps({"choices": [{"message": {"role": "assistant", "content": "no"}}]}).encode()
    assert response_text(raw, "openai-chat") == "no"
    assert parse_response(raw, "openai-chat", "yes-no-maybe").answer == "no"


@pytest.mark.parametrize(
    ("raw", "format", "message"),
    [
        (b'{"content": [', "anthropic-messages", "response body is not JSON"),
        (b"\xff\xfe", "anthropic-messages", "not UTF-8"),
        (b"[]", "anthropic-messages", "is a JSON array, not an object"),
        (
            b'{"type": "error", "error": {"type": "overloaded_error"}}',
            "anthropic-messages",
            'no content list (body type "error")',
        ),
        (b'{"content": ["x"]}', "anthropic-messages", "content[0] is a JSON string"),
        (b'{"content": [{"type": "text"}]}', "anthropic-messages", "without a string text"),
        (b'{"choices": []}', "openai-chat", "no choices list"),
        (b'{"choices": [{"message": {"content": 7}}]}', "openai-chat", "JSON number"),
        (b'{"choices": [7]}', "openai-chat", "no message object"),
        (b"{}", "gemini", "unknown response format"),
    ],
)
def test_malformed_bodies(raw: bytes, format: str, message: str) -> None:
    with pytest.raises(ParseError) as info:
        response_text(raw, format)
    assert message in str(info.value)
    parsed = parse_response(raw, format, "tumbling-e-json")
    assert parsed.status == "unparseable"
    assert parsed.problems == (str(info.value),)


# --------------------------------------------------------------------------- properties

_fence_open = st.sampled_from(["", "```json\n", "```\n", "```JSON\n", "Answer:\n```json\n"])
_fence_close = st.sampled_from(["", "\n```", "\n```\n"])
_prose = st.text(
    alphabet=st.characters(blacklist_characters="{}[]", blacklist_categories=("Cs",)),
    max_size=40,
)


def _random_case(draw: st.DrawFn, word: str) -> str:
    style = draw(st.sampled_from(["upper", "lower", "title", "mixed"]))
    if style == "upper":
        return word.upper()
    if style == "lower":
        return word.lower()
    if style == "title":
        return word.title()
    flips = draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    return "".join(c.lower() if f else c.upper() for c, f in zip(word, flips, strict=True))


@st.composite
def dressed_answers(draw: st.DrawFn) -> tuple[str, dict[int, tuple[str, ...]]]:
    numbers = draw(st.lists(st.integers(1, 15), unique=True, max_size=12))
    grid = {n: tuple(draw(st.lists(st.sampled_from(ORIENTATIONS), max_size=10))) for n in numbers}
    order = draw(st.permutations(numbers))
    rows = [{"row": n, "orientations": [_random_case(draw, w) for w in grid[n]]} for n in order]
    obj = {"chart_type": _random_case(draw, "tumbling-e"), "rows": rows}
    indent = draw(st.sampled_from([None, 1, 2, 4]))
    body = json.dumps(obj, indent=indent, ensure_ascii=draw(st.booleans()))
    text = draw(_prose) + draw(_fence_open) + body + draw(_fence_close) + draw(_prose)
    return text, grid


@settings(max_examples=300, deadline=None)
@given(dressed_answers())
def test_any_grid_round_trips(case: tuple[str, dict[int, tuple[str, ...]]]) -> None:
    text, grid = case
    parsed = parse_tumbling_e(text)
    assert parsed.status == "ok", (text, parsed)
    assert rows_of(parsed) == grid
    assert parsed.chart_type == "tumbling-e"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parsers_never_raise(text: str) -> None:
    for parser in PARSERS.values():
        parsed = parser(text)
        assert parsed.status in ("ok", "partial", "unparseable", "refused")
        json.dumps(parsed.as_dict())


_json_ish = st.text(alphabet='{}[]":,0123456789 rowchartypesUPDOWNLEFTRIGH-ter', max_size=80)


@settings(max_examples=300, deadline=None)
@given(_json_ish)
def test_tumbling_parser_never_raises_on_json_like_text(text: str) -> None:
    parsed = parse_tumbling_e(text)
    assert parsed.status in ("ok", "partial", "unparseable", "refused")


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(["anthropic-messages", "openai-chat"]))
def test_parse_response_never_raises(raw: bytes, format: str) -> None:
    for name in PARSERS:
        assert parse_response(raw, format, name).status in (
            "ok",
            "partial",
            "unparseable",
            "refused",
        )


# --------------------------------------------------------------------------- scoring


def test_perfect_answer_scores_every_glyph() -> None:
    chart = charts()["mixed-2"]
    score = score_text(answer_json(grid_of(chart)), "tumbling-e-json", list(chart.glyphs))
    assert (score.status, score.n_items, score.n_answered, score.n_correct) == ("ok", 61, 61, 61)
    assert [(i.row, i.position) for i in score.items] == [(g.row, g.position) for g in chart.glyphs]
    assert all(i.answered and i.correct and i.answer == i.truth for i in score.items)


@pytest.mark.parametrize("chart_id", [f"uniform-{o.lower()}" for o in ORIENTATIONS])
def test_canonical_right_collapse(chart_id: str) -> None:
    chart = charts()[chart_id]
    score = score_text(
        answer_json([["RIGHT"] * n for n in SNELLEN_ROWS]), "tumbling-e-json", list(chart.glyphs)
    )
    assert score.status == "ok"
    assert score.n_answered == 61
    assert score.n_correct == (61 if chart_id == "uniform-right" else 0)


def test_missing_row_and_short_row_downgrade_to_partial() -> None:
    chart = charts()["mixed-1"]
    grid = grid_of(chart)
    grid[10] = grid[10][:-1]  # row 11 lacks its last glyph
    del grid[4]  # row 5 missing; rows renumber, so give explicit numbers instead
    rows = [
        {"row": n, "orientations": values}
        for n, values in zip([1, 2, 3, 4, 6, 7, 8, 9, 10, 11], grid, strict=True)
    ]
    text = json.dumps({"chart_type": "tumbling-e", "rows": rows})
    parsed = parse_tumbling_e(text)
    assert parsed.status == "ok"  # the parser cannot know
    score = score_tumbling_e(parsed, list(chart.glyphs))
    assert score.status == "partial"
    assert (score.n_items, score.n_answered, score.n_correct) == (61, 61 - 5 - 1, 61 - 5 - 1)
    assert score.problems == (
        "row 5: no answers, the chart has 5 glyphs",
        "row 11: 8 answers, the chart has 9 glyphs",
    )
    missing = [i for i in score.items if not i.answered]
    assert [(i.row, i.position) for i in missing] == [(5, p) for p in range(1, 6)] + [(11, 9)]
    assert all(i.answer is None and not i.correct for i in missing)


def test_extra_answers_downgrade_to_partial_but_score_the_rest() -> None:
    chart = charts()["uniform-up"]
    grid = [*grid_of(chart), ["UP", "UP"]]
    grid[0] = [*grid[0], "UP"]
    score = score_text(answer_json(grid), "tumbling-e-json", list(chart.glyphs))
    assert score.status == "partial"
    assert (score.n_items, score.n_answered, score.n_correct) == (61, 61, 61)
    assert score.problems == (
        "row 1: 2 answers, the chart has 1 glyphs",
        "row 12: 2 answers, the chart has no such row",
    )


def test_unreadable_items_are_unanswered() -> None:
    chart = charts()["uniform-left"]
    grid = grid_of(chart)
    grid[2][1] = "WEST"
    score = score_text(answer_json(grid), "tumbling-e-json", list(chart.glyphs))
    assert score.status == "partial"
    assert (score.n_answered, score.n_correct) == (60, 60)
    item = next(i for i in score.items if (i.row, i.position) == (3, 2))
    assert item.as_dict() == {
        "row": 3,
        "position": 2,
        "truth": "LEFT",
        "answer": None,
        "answered": False,
        "correct": False,
    }
    assert score.problems == ('row 3, position 2: "WEST" is not one of UP, RIGHT, DOWN, LEFT',)


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ('{"chart_type": "other", "rows": []}', "refused"),
        ("This is not a tumbling E chart.", "refused"),
        ('{"chart_type": "tumbling-e", "rows": [', "unparseable"),
    ],
)
def test_refused_or_unparseable_on_a_tumbling_chart(text: str, status: str) -> None:
    chart = charts()["mixed-1"]
    score = score_text(text, "tumbling-e-json", list(chart.glyphs))
    assert score.status == status
    assert (score.n_items, score.n_answered, score.n_correct) == (61, 0, 0)


@pytest.mark.parametrize(
    ("text", "status", "answer", "correct"),
    [
        ('{"chart_type": "other", "rows": []}', "refused", ANSWER_NOT_A_CHART, True),
        (
            "This is not a tumbling E chart; the symbols are letters.",
            "refused",
            ANSWER_NOT_A_CHART,
            True,
        ),
        (answer_json([["RIGHT"] * n for n in SNELLEN_ROWS]), "ok", ANSWER_ORIENTATIONS, False),
        ('{"chart_type": "snellen", "rows": []}', "partial", ANSWER_ORIENTATIONS, False),
        ("I see letters.", "unparseable", None, False),
    ],
)
def test_snellen_control(text: str, status: str, answer: str | None, correct: bool) -> None:
    snellen = charts()["snellen-letters"]
    assert snellen.kind == KIND_SNELLEN and snellen.expected == NOT_A_TUMBLING_E_CHART
    score = score_text(text, "tumbling-e-json", snellen.expected)
    assert score.status == status
    assert score.n_items == 1
    assert score.items[0].as_dict() == {
        "row": None,
        "position": None,
        "truth": NOT_A_TUMBLING_E_CHART,
        "answer": answer,
        "answered": answer is not None,
        "correct": correct,
    }
    assert score.n_correct == int(correct)


def test_scoring_with_truth_read_from_csv(tmp_path: spec.Path) -> None:
    path = tmp_path / "truth.csv"
    write_truth_csv(path, list(charts().values()))
    truth = read_truth_csv(path)
    assert set(truth) == set(charts())
    for chart_id, chart in charts().items():
        if chart.kind == KIND_SNELLEN:
            text = '{"chart_type": "other", "rows": []}'
        else:
            text = answer_json(grid_of(chart))
        from_csv = score_text(text, "tumbling-e-json", truth[chart_id])
        from_chart = score_text(
            text,
            "tumbling-e-json",
            chart.expected if chart.kind == KIND_SNELLEN else list(chart.glyphs),
        )
        assert from_csv == from_chart
        assert from_csv.n_correct == from_csv.n_items


def test_items_bytes_are_canonical_and_stable() -> None:
    chart = charts()["mixed-1"]
    grid = grid_of(chart)
    grid[0][0] = "DOWN" if grid[0][0] != "DOWN" else "UP"
    text = answer_json(grid)
    score = score_text(text, "tumbling-e-json", list(chart.glyphs))
    data = score.items_bytes()
    assert data == rfc8785.dumps([item.as_dict() for item in score.items])
    assert data.startswith(b'[{"answer":"')
    assert b" " not in data
    assert json.loads(data)[0] == {
        "answer": grid[0][0],
        "answered": True,
        "correct": False,
        "position": 1,
        "row": 1,
        "truth": chart.glyphs[0].orientation,
    }
    assert score.sha256 == hashlib.sha256(data).hexdigest()
    # Pure function of (text, truth): the same inputs, in any order or repetition, agree.
    again = score_text(text, "tumbling-e-json", list(reversed(chart.glyphs)))
    assert again == score and again.items_bytes() == data
    assert score.as_dict()["items_sha256"] == score.sha256


def test_items_bytes_pinned() -> None:
    glyphs = [Glyph(1, 1, "UP")]
    score = score_tumbling_e(
        parse_tumbling_e(
            '{"chart_type": "tumbling-e", "rows": [{"row": 1, "orientations": ["up"]}]}'
        ),
        glyphs,
    )
    assert score.items_bytes() == (
        b'[{"answer":"UP","answered":true,"correct":true,"position":1,"row":1,"truth":"UP"}]'
    )
    control = score_tumbling_e(Parsed("refused"), NOT_A_TUMBLING_E_CHART)
    assert control.items_bytes() == (
        b'[{"answer":"not-a-tumbling-e-chart","answered":true,"correct":true,'
        b'"position":null,"row":null,"truth":"not-a-tumbling-e-chart"}]'
    )


@pytest.mark.parametrize(
    ("parser", "text", "truth", "status", "answer", "correct"),
    [
        ("multiple-choice", "Answer: B", "B", "ok", "B", True),
        ("multiple-choice", "Answer: (c)", "B", "ok", "C", False),
        ("multiple-choice", "Answer: B or C", "B", "unparseable", None, False),
        ("yes-no-maybe", "Yes.", "yes", "ok", "yes", True),
        ("yes-no-maybe", "No, it does not.", "Yes", "ok", "no", False),
        ("yes-no-maybe", "maybe", " Maybe ", "ok", "maybe", True),
        ("orientation-word", "the top points LEFT", "LEFT", "ok", "LEFT", True),
        ("orientation-word", "no idea", "UP", "unparseable", None, False),
    ],
)
def test_score_choice(
    parser: str, text: str, truth: str, status: str, answer: str | None, correct: bool
) -> None:
    score = score_text(text, parser, truth)
    assert isinstance(score, TrialScore)
    assert score.status == status
    assert score.items[0].as_dict() == {
        "row": None,
        "position": None,
        "truth": truth,
        "answer": answer,
        "answered": answer is not None,
        "correct": correct,
    }
    assert score == score_choice(PARSERS[parser](text), truth)


def test_bad_truth_is_a_caller_error() -> None:
    parsed = parse_tumbling_e(SMALL)
    with pytest.raises(ValueError, match="truth must be glyphs"):
        score_tumbling_e(parsed, "orientations")
    with pytest.raises(ValueError, match="twice"):
        score_tumbling_e(parsed, [Glyph(1, 1, "UP"), Glyph(1, 1, "UP")])
    with pytest.raises(ValueError, match="no glyphs"):
        score_tumbling_e(parsed, [])
    with pytest.raises(ValueError, match="single truth answer"):
        score_parsed(parse_multiple_choice("B"), "multiple-choice", [Glyph(1, 1, "UP")])
    with pytest.raises(KeyError):
        score_text("B", "free-text", "B")


@pytest.mark.parametrize(
    ("raw", "format"),
    [
        (b'{"choices": [{"message": {"role": "assistant", "content": null}}]}', "openai-chat"),
        (b'{"content": [{"type": "thinking", "thinking": "hm"}]}', "anthropic-messages"),
    ],
)
def test_a_reply_with_no_text_is_unparseable_not_malformed(raw: bytes, format: str) -> None:
    assert response_text(raw, format) == ""
    assert parse_response(raw, format, "tumbling-e-json").status == "unparseable"
