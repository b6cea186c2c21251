"""The scale path of the scorer: a chart prepared once (ChartTruth) gives the same record.

``ledger score`` scores a tumbling-E study through :func:`analysis._score.score_record` with
each stimulus's glyphs prepared once (:func:`analysis._score.prepare_chart`), building no
:class:`~analysis._score.Item`; these tests hold that path to the reference one
(:func:`analysis._score.score_tumbling_e` and RFC 8785 over the items), byte for byte.
"""

from __future__ import annotations

import hashlib

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis._parse import AnswerRow, Parsed, ParserConfig, parse_tumbling_e
from analysis._score import ScoreRecord, prepare_chart, score_parsed, score_record, score_tumbling_e
from runner._stimuli import NOT_A_TUMBLING_E_CHART, ORIENTATIONS, SNELLEN_ROWS, Glyph, probe_set

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
def full_charts(draw: st.DrawFn) -> list[Glyph]:
    """A chart of whole rows (positions 1..n, n up to the row's Snellen length)."""
    rows = draw(st.lists(st.integers(1, len(SNELLEN_ROWS)), min_size=1, max_size=6, unique=True))
    return [
        Glyph(r, p, draw(st.sampled_from(ORIENTATIONS)))
        for r in rows
        for p in range(1, draw(st.integers(1, SNELLEN_ROWS[r - 1])) + 1)
    ]


@st.composite
def fitting_parses(draw: st.DrawFn, glyphs: list[Glyph]) -> Parsed:
    """A parse answering the chart's rows with their lengths, in any row order, perhaps with
    one row repeated, shortened or added."""
    lengths: dict[int, int] = {}
    for g in glyphs:
        lengths[g.row] = max(lengths.get(g.row, 0), g.position)
    rows = [(r, draw(st.lists(ANSWERS, min_size=n, max_size=n))) for r, n in lengths.items()]
    rows = draw(st.permutations(rows))
    change = draw(st.sampled_from(["none", "none", "repeat", "short", "extra"]))
    if change == "repeat":
        rows.append(rows[0])
    elif change == "short":
        rows[0] = (rows[0][0], rows[0][1][:-1])
    elif change == "extra":
        rows.append((12, ["UP"]))
    status = draw(st.sampled_from(["ok", "ok", "partial", "refused"]))
    answers = tuple(AnswerRow(n, tuple(values)) for n, values in rows)
    return Parsed(status, answers, "tumbling-e")  # type: ignore[arg-type]


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
    """The record as docs/scoring.md §6 defines it, written out here item by item.

    Each glyph in reading order is an item answered from the parse's grid (ok or partial
    parses only); a row whose answer positions differ from its glyph positions is a problem
    and makes an ``ok`` parse ``partial``. The bytes are RFC 8785 over the items' dicts.
    """
    ordered = sorted(glyphs, key=lambda g: (g.row, g.position))
    usable = parsed.status in ("ok", "partial")
    grid = parsed.grid() if usable else {}
    items = []
    for g in ordered:
        answer = grid.get((g.row, g.position))
        items.append(
            {
                "row": g.row,
                "position": g.position,
                "truth": g.orientation,
                "answer": answer,
                "answered": answer is not None,
                "correct": answer == g.orientation,
            }
        )
    problems = list(parsed.problems)
    status = parsed.status
    if usable:
        want: dict[int, set[int]] = {}
        for g in ordered:
            want.setdefault(g.row, set()).add(g.position)
        got = {row.row: set(range(1, len(row.values) + 1)) for row in parsed.answers}
        for n in sorted(want.keys() | got.keys()):
            w, a = want.get(n, set()), got.get(n, set())
            if w == a:
                continue
            if not w:
                problems.append(f"row {n}: {len(a)} answers, the chart has no such row")
            elif not a:
                problems.append(f"row {n}: no answers, the chart has {len(w)} glyphs")
            else:
                problems.append(f"row {n}: {len(a)} answers, the chart has {len(w)} glyphs")
        if status == "ok" and len(problems) > len(parsed.problems):
            status = "partial"
    data = rfc8785.dumps(items)
    score = score_tumbling_e(parsed, glyphs)  # the items path agrees with the definition
    assert score.items_bytes() == data
    assert (score.status, score.problems) == (status, tuple(problems))
    return ScoreRecord(
        status,
        len(items),
        sum(i["answered"] for i in items),
        sum(i["correct"] for i in items),
        data,
        tuple(problems),
    )


@settings(max_examples=60, deadline=None)
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


@settings(max_examples=60, deadline=None)
@given(data=st.data(), glyphs=full_charts())
def test_whole_row_charts_records_match_the_items(data: st.DataObject, glyphs: list[Glyph]) -> None:
    """Charts of whole rows take the row-order path when a parse fits them; same bytes."""
    chart = prepare_chart(glyphs)
    for _ in range(4):
        parsed = data.draw(fitting_parses(glyphs))
        assert score_record(parsed, "tumbling-e-json", chart) == reference(parsed, glyphs)


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
