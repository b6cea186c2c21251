"""The scale path of the scorer: a chart prepared once (ChartTruth) gives the same record.

``ledger score`` scores a tumbling-E study through :func:`analysis.score.score_record` with
each stimulus's glyphs prepared once (:func:`analysis.score.prepare_chart`), building no
:class:`~analysis.score.Item`; these tests hold that path to the reference one
(:func:`analysis.score.score_tumbling_e` and RFC 8785 over the items), byte for byte.
"""

from __future__ import annotations

import hashlib

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.parse import AnswerRow, Parsed, ParserConfig, parse_tumbling_e
from analysis.score import (
    ScoreRecord,
    prepare_chart,
    score_parsed,
    score_record,
    score_tumbling_e,
)
from runner.stimuli import NOT_A_TUMBLING_E_CHART, ORIENTATIONS, SNELLEN_ROWS, Glyph, probe_set

ALL_GLYPHS = [
    (row, position) for row, n in enumerate(SNELLEN_ROWS, start=1) for position in range(1, n + 1)
]

# answers a parse may hold: the orientations, unreadable (None) and strings RFC 8785 escapes
ANSWERS = st.one_of(
    st.sampled_from([*ORIENTATIONS, None]),
    st.text(max_size=6),
    st.sampled_from(['"', "\\", "\x00\x1f", "é", "\U0001f600", "\x7f"]),
)


@st.composite
def charts(draw: st.DrawFn) -> list[Glyph]:
    """A chart: a non-empty set of glyph positions (not always 1..n on a row), any order."""
    keys = draw(st.lists(st.sampled_from(ALL_GLYPHS), min_size=1, max_size=20, unique=True))
    return [Glyph(r, p, draw(st.sampled_from(ORIENTATIONS))) for r, p in keys]


@st.composite
def parses(draw: st.DrawFn) -> Parsed:
    """A parse of any status; rows may repeat, be missing, be short or too long."""
    status = draw(st.sampled_from(["ok", "partial", "refused", "unparseable"]))
    rows = draw(
        st.lists(
            st.tuples(st.integers(1, 12), st.lists(ANSWERS, max_size=10)),
            max_size=12,
        )
    )
    answers = tuple(AnswerRow(n, tuple(values)) for n, values in rows)
    problems = tuple(draw(st.lists(st.text(max_size=8), max_size=2)))
    return Parsed(status, answers, "tumbling-e", problems)  # type: ignore[arg-type]


def reference(parsed: Parsed, glyphs: list[Glyph]) -> ScoreRecord:
    """The record as the items-based path gives it, the bytes re-encoded from the items."""
    score = score_tumbling_e(parsed, glyphs)
    data = rfc8785.dumps([item.as_dict() for item in score.items])
    assert score.items_bytes() == data
    return ScoreRecord(
        score.status, score.n_items, score.n_answered, score.n_correct, data, score.problems
    )


@settings(max_examples=150, deadline=None)
@given(glyphs=charts(), parsed_list=st.lists(parses(), min_size=1, max_size=8))
def test_prepared_chart_records_match_the_items(
    glyphs: list[Glyph], parsed_list: list[Parsed]
) -> None:
    chart = prepare_chart(glyphs)  # reused across parses, as ledger score reuses it
    for parsed in parsed_list:
        want = reference(parsed, glyphs)
        got = score_record(parsed, "tumbling-e-json", chart)
        assert got == want
        assert got.sha256 == hashlib.sha256(want.items_bytes).hexdigest()
        assert score_tumbling_e(parsed, chart) == score_tumbling_e(parsed, glyphs)


def test_many_distinct_answers_on_one_glyph_stay_exact() -> None:
    """More distinct answers than a glyph keeps bytes for: each still encoded exactly."""
    glyphs = [Glyph(1, 1, "UP")]
    chart = prepare_chart(glyphs)
    for i in range(60):
        parsed = Parsed("ok", (AnswerRow(1, (f"answer-{i}",)),), "tumbling-e")
        assert score_record(parsed, "tumbling-e-json", chart) == reference(parsed, glyphs)
    assert all(len(fragments) <= 16 for fragments in chart._fragments)


def test_probe_charts_full_and_damaged() -> None:
    """The template's charts: a perfect answer, a short row, an extra row, all through both."""
    for probe in probe_set(20260421):
        glyphs = list(probe.glyphs)
        if not glyphs:
            continue
        chart = prepare_chart(glyphs)
        rows: dict[int, list[str]] = {}
        for g in glyphs:
            rows.setdefault(g.row, []).append(g.orientation)
        perfect = Parsed("ok", tuple(AnswerRow(r, tuple(v)) for r, v in rows.items()))
        short = Parsed("ok", tuple(AnswerRow(r, tuple(v[:-1])) for r, v in rows.items()))
        extra = Parsed("ok", (*perfect.answers, AnswerRow(12, ("UP",))))
        for parsed in (perfect, short, extra):
            assert score_record(parsed, "tumbling-e-json", chart) == reference(parsed, glyphs)
        assert score_record(perfect, "tumbling-e-json", chart).n_correct == len(glyphs)
        assert score_record(extra, "tumbling-e-json", chart).status == "partial"


def test_other_truths_take_the_items_path() -> None:
    """The Snellen control and single-answer parsers: the record of :func:`score_parsed`."""
    refused = parse_tumbling_e("This is not a tumbling E chart.")
    control = score_record(refused, "tumbling-e-json", NOT_A_TUMBLING_E_CHART)
    assert control == score_parsed(refused, "tumbling-e-json", NOT_A_TUMBLING_E_CHART).record()
    assert control.n_correct == 1
    choice = ParserConfig("multiple-choice").parse("Answer: B")
    assert score_record(choice, "multiple-choice", "b") == (
        score_parsed(choice, "multiple-choice", "b").record()
    )


@pytest.mark.parametrize(
    ("glyphs", "message"),
    [
        ([], "truth has no glyphs"),
        ([Glyph(1, 1, "UP"), Glyph(1, 1, "DOWN")], "row 1, position 1 twice"),
        (["UP"], "truth must hold Glyph objects"),
    ],
)
def test_prepare_chart_refuses_bad_truth(glyphs: list[Glyph], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        prepare_chart(glyphs)
    with pytest.raises(ValueError, match=message):
        score_tumbling_e(Parsed("ok"), glyphs)
