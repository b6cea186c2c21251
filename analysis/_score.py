"""Scoring: a parsed response against the truth of its stimulus, item by item.

``docs/scoring.md`` is the normative description; this module implements it.

**Blinding.** Scoring is a pure function of (response text, stimulus truth): the caller
parses the text with the study's parser (:mod:`analysis._parse`), looks the truth up by the
trial's stimulus id, and calls :func:`score_tumbling_e` or :func:`score_choice` (or
:func:`score_text`, which does both). Nothing here takes, or can depend on, the arm, the
replicate, the schedule position or any other response: the same text and truth always give
the same :class:`TrialScore`, byte for byte (:meth:`TrialScore.items_bytes`).

**Items.** A tumbling-E chart is scored per glyph: one item for each of its 61 glyphs, in
reading order, whether or not the response answered it (unanswered and unreadable items are
incorrect and have ``answered: false``). The Snellen letter control
(truth ``"not-a-tumbling-e-chart"``) and single-answer tasks have one item. Each item is
``{"row", "position", "truth", "answer", "answered", "correct"}`` (:class:`Item`).

**Status.** The trial status is the parse status, except that a tumbling-E response parsed
``"ok"`` becomes ``"partial"`` when its answer positions differ from the chart's glyph
positions (a glyph without an answer, or an answer where the chart has no glyph). The parser
judges the form of a response; only the scorer knows how many glyphs there are.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Final, NamedTuple, TypeAlias, cast

import rfc8785

from analysis._parse import PARSERS, AnswerRow, Parsed, ParserConfig, Status, normalize_text
from ledger import CanonicalError, canonical_json
from runner import EXPECTED_ORIENTATIONS, NOT_A_TUMBLING_E_CHART, Glyph

__all__ = [
    "ANSWER_NOT_A_CHART",
    "ANSWER_ORIENTATIONS",
    "ChartTruth",
    "Item",
    "ScoreRecord",
    "TrialScore",
    "canonical_items",
    "prepare_chart",
    "score_choice",
    "score_judged",
    "score_parsed",
    "score_record",
    "score_text",
    "score_tumbling_e",
]

ANSWER_NOT_A_CHART: Final = NOT_A_TUMBLING_E_CHART
"""Answer recorded for the Snellen control when the response rejected the chart."""

ANSWER_ORIENTATIONS: Final = EXPECTED_ORIENTATIONS
"""Answer recorded for the Snellen control when the response read the chart as tumbling E."""

Truth: TypeAlias = "Sequence[Glyph] | ChartTruth | str"

_SPACE: Final = " \t\n\r\x0b\x0c"
_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _ascii_lower(text: str) -> str:
    return text.translate(_LOWER)


@dataclass(frozen=True)
class Item:
    """One scored item; ``row`` and ``position`` are ``None`` for single-item trials."""

    row: int | None
    position: int | None
    truth: str
    answer: str | None
    answered: bool
    correct: bool
    logprobs: tuple[tuple[str, float | None], ...] | None = None
    margin: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form with the keys ``row, position, truth, answer, answered, correct``.

        A ``cloze`` item adds ``logprobs`` (letter -> log-probability or null) and ``margin``.
        """
        out: dict[str, Any] = {
            "row": self.row,
            "position": self.position,
            "truth": self.truth,
            "answer": self.answer,
            "answered": self.answered,
            "correct": self.correct,
        }
        if self.logprobs is not None:
            out["logprobs"] = dict(self.logprobs)
            out["margin"] = self.margin
        return out


def _canonical_bytes(value: Any) -> bytes:
    """RFC 8785 bytes of ``value``: the ledger's encoder (in C for what items hold).

    :func:`ledger.canonical_json` writes the same bytes as ``rfc8785.dumps`` (checked against it
    in ``tests/ledger/test_canonical.py``); what it refuses goes to the reference, which raises
    its own error, as before.
    """
    try:
        return canonical_json(value)
    except CanonicalError:
        return bytes(rfc8785.dumps(value))


def canonical_items(items: Sequence[Item]) -> bytes:
    """RFC 8785 canonical JSON (UTF-8) of the array of the items' :meth:`Item.as_dict`."""
    return _canonical_bytes([item.as_dict() for item in items])


class ScoreRecord(NamedTuple):
    """A score as ``trial.scored`` records it: status, counts, the items' bytes, the problems.

    ``items_bytes`` is :func:`canonical_items` of the trial's items, the same bytes
    :meth:`TrialScore.items_bytes` gives; a record holds no :class:`Item` objects, so scoring
    a large study (:func:`score_record` with a :class:`ChartTruth`) builds none.
    """

    status: Status
    n_items: int
    n_answered: int
    n_correct: int
    items_bytes: bytes
    problems: tuple[str, ...]

    @property
    def sha256(self) -> str:
        """Lower-case hex SHA-256 of ``items_bytes``."""
        return hashlib.sha256(self.items_bytes).hexdigest()


@dataclass(frozen=True)
class TrialScore:
    """The score of one trial: status, counts, the items and the problems found on the way."""

    status: Status
    n_items: int
    n_answered: int
    n_correct: int
    items: tuple[Item, ...]
    problems: tuple[str, ...] = ()

    @cached_property
    def _canonical(self) -> bytes:
        return canonical_items(self.items)

    def items_bytes(self) -> bytes:
        """The canonical JSON of the items (:func:`canonical_items`): deterministic bytes.

        Computed once per score (the items are immutable).
        """
        return self._canonical

    @property
    def sha256(self) -> str:
        """Lower-case hex SHA-256 of :meth:`items_bytes`."""
        return hashlib.sha256(self.items_bytes()).hexdigest()

    def record(self) -> ScoreRecord:
        """What a ``trial.scored`` event records of this score (:class:`ScoreRecord`)."""
        return ScoreRecord(
            self.status,
            self.n_items,
            self.n_answered,
            self.n_correct,
            self.items_bytes(),
            self.problems,
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form: status, counts, ``items_sha256``, problems and items."""
        return {
            "status": self.status,
            "n_items": self.n_items,
            "n_answered": self.n_answered,
            "n_correct": self.n_correct,
            "items_sha256": self.sha256,
            "problems": list(self.problems),
            "items": [item.as_dict() for item in self.items],
        }


def _trial(status: Status, items: list[Item], problems: Sequence[str]) -> TrialScore:
    return TrialScore(
        status=status,
        n_items=len(items),
        n_answered=sum(item.answered for item in items),
        n_correct=sum(item.correct for item in items),
        items=tuple(items),
        problems=tuple(problems),
    )


def _check_glyphs(truth: Sequence[Glyph]) -> list[Glyph]:
    glyphs = list(truth)
    if not glyphs:
        raise ValueError("truth has no glyphs")
    seen: set[tuple[int, int]] = set()
    for glyph in glyphs:
        if not isinstance(glyph, Glyph):
            raise ValueError(f"truth must hold Glyph objects, got {glyph!r}")
        key = (glyph.row, glyph.position)
        if key in seen:
            raise ValueError(f"truth lists row {glyph.row}, position {glyph.position} twice")
        seen.add(key)
    return sorted(glyphs, key=lambda g: (g.row, g.position))


def score_tumbling_e(parsed: Parsed, truth: Truth) -> TrialScore:
    """Score a tumbling-E parse against a chart's glyphs or the Snellen control.

    ``truth`` is the chart's list of :class:`~runner._stimuli.Glyph` (as from
    :func:`runner._stimuli.read_truth_csv` or ``Chart.glyphs``; or those glyphs prepared once
    by :func:`prepare_chart`), or the string
    ``"not-a-tumbling-e-chart"`` for the Snellen control. Raises :class:`ValueError` for any
    other string, an empty list or a glyph listed twice (errors in the truth, not the
    response).
    """
    if isinstance(truth, str):
        if truth != NOT_A_TUMBLING_E_CHART:
            raise ValueError(
                f"truth must be glyphs or {NOT_A_TUMBLING_E_CHART!r}, got the string {truth!r}"
            )
        return _score_control(parsed)
    chart = truth if isinstance(truth, ChartTruth) else prepare_chart(truth)
    answers, status, problems = chart.read(parsed)
    items = [
        Item(
            row=g.row,
            position=g.position,
            truth=g.orientation,
            answer=answer,
            answered=answer is not None,
            correct=answer == g.orientation,
        )
        for g, answer in zip(chart.glyphs, answers, strict=True)
    ]
    return _trial(status, items, problems)


def _row_number(row: AnswerRow) -> int:
    return row.row


def _item_bytes(glyph: Glyph, answer: str | None) -> bytes:
    """RFC 8785 bytes of the item of ``glyph`` answered ``answer`` (as :func:`canonical_items`)."""
    item = Item(
        row=glyph.row,
        position=glyph.position,
        truth=glyph.orientation,
        answer=answer,
        answered=answer is not None,
        correct=answer == glyph.orientation,
    )
    return _canonical_bytes(item.as_dict())


_FRAGMENTS_PER_GLYPH: Final = 16
"""Answers whose item bytes a :class:`ChartTruth` keeps per glyph (the orientations and None)."""


class ChartTruth:
    """A chart's truth prepared once for scoring many responses (:func:`prepare_chart`).

    Holds the glyphs in reading order, the positions of each row, and per glyph the canonical
    bytes of its item for the answers seen so far (at most :data:`_FRAGMENTS_PER_GLYPH` each,
    so memory stays bounded whatever the responses say). :func:`score_tumbling_e` and
    :func:`score_record` accept it in place of the list of glyphs; the result is the same.
    """

    def __init__(self, glyphs: Sequence[Glyph]) -> None:
        """Check ``glyphs`` (as :func:`score_tumbling_e` does) and prepare them."""
        self.glyphs: tuple[Glyph, ...] = tuple(_check_glyphs(glyphs))
        self._keys = tuple((g.row, g.position) for g in self.glyphs)
        positions: dict[int, set[int]] = {}
        for g in self.glyphs:
            positions.setdefault(g.row, set()).add(g.position)
        # rows whose glyphs are exactly positions 1..n: a parse giving n answers on each of
        # them, and on no other row, has no mismatch (the usual case, checked in one compare)
        self._full: dict[int, int] | None = {row: len(p) for row, p in positions.items()}
        if any(p != set(range(1, len(p) + 1)) for p in positions.values()):
            self._full = None
        self._orientations = tuple(g.orientation for g in self.glyphs)
        self._fragments: tuple[dict[str | None, bytes], ...] = tuple({} for _ in self.glyphs)

    def read(self, parsed: Parsed) -> tuple[list[str | None], Status, list[str]]:
        """Each glyph's answer in reading order, the trial status and its problems.

        An answer is None when unanswered or unreadable; the status and problems are the
        parse's, with a row mismatch (:func:`_count_mismatches`) making ``"ok"`` partial.
        """
        problems = list(parsed.problems)
        status = parsed.status
        if status not in ("ok", "partial"):
            return [None] * len(self.glyphs), status, problems
        rows = parsed.answers
        given = {row.row: len(row.values) for row in rows}
        if self._full is not None and given == self._full and len(given) == len(rows):
            # every row of the chart answered in full, once, and no other row: the answers in
            # reading order are the rows' values in row order, and nothing mismatches
            ordered = sorted(rows, key=_row_number)
            return [value for row in ordered for value in row.values], status, problems
        grid = parsed.grid()
        answers = [grid.get(key) for key in self._keys]
        mismatches = _count_mismatches(self.glyphs, parsed)
        problems.extend(mismatches)
        if mismatches and status == "ok":
            status = "partial"
        return answers, status, problems

    def record(self, parsed: Parsed) -> ScoreRecord:
        """The :class:`ScoreRecord` of ``parsed`` against this chart, built without items."""
        answers, status, problems = self.read(parsed)
        parts: list[bytes | None] = list(map(dict.get, self._fragments, answers))
        if None in parts:  # an answer not seen yet on a glyph: encode its item
            for index, part in enumerate(parts):
                if part is None:
                    answer, fragments = answers[index], self._fragments[index]
                    parts[index] = part = _item_bytes(self.glyphs[index], answer)
                    if len(fragments) < _FRAGMENTS_PER_GLYPH:
                        fragments[answer] = part
        answered = len(answers) - answers.count(None)
        correct = sum(map(operator.eq, answers, self._orientations))
        data = b"[" + b",".join(cast("list[bytes]", parts)) + b"]"
        return ScoreRecord(status, len(parts), answered, correct, data, tuple(problems))


def prepare_chart(truth: Sequence[Glyph]) -> ChartTruth:
    """A chart's glyphs prepared for scoring many responses (:class:`ChartTruth`).

    Raises :class:`ValueError` for an empty list or a glyph listed twice, as
    :func:`score_tumbling_e` does.
    """
    return ChartTruth(truth)


def _count_mismatches(glyphs: Sequence[Glyph], parsed: Parsed) -> list[str]:
    """One problem per row whose answer positions differ from its glyph positions."""
    expected: dict[int, set[int]] = {}
    for g in glyphs:
        expected.setdefault(g.row, set()).add(g.position)
    given = {row.row: set(range(1, len(row.values) + 1)) for row in parsed.answers}
    problems: list[str] = []
    for number in sorted(expected.keys() | given.keys()):
        want, got = expected.get(number, set()), given.get(number, set())
        if want == got:
            continue
        if not want:
            problems.append(f"row {number}: {len(got)} answers, the chart has no such row")
        elif not got:
            problems.append(f"row {number}: no answers, the chart has {len(want)} glyphs")
        else:
            problems.append(f"row {number}: {len(got)} answers, the chart has {len(want)} glyphs")
    return problems


def _score_control(parsed: Parsed) -> TrialScore:
    answer: str | None
    if parsed.status == "refused":
        answer = ANSWER_NOT_A_CHART
    elif parsed.status in ("ok", "partial"):
        answer = ANSWER_ORIENTATIONS
    else:
        answer = None
    item = Item(
        row=None,
        position=None,
        truth=NOT_A_TUMBLING_E_CHART,
        answer=answer,
        answered=answer is not None,
        correct=answer == ANSWER_NOT_A_CHART,
    )
    return _trial(parsed.status, [item], parsed.problems)


def score_choice(parsed: Parsed, truth_answer: str, parser: str = "multiple-choice") -> TrialScore:
    """Score a single-answer parse (``docs/scoring.md`` section 6.4).

    One item; the answer is the parsed answer when the status is ``"ok"``. For the vocabulary
    parsers (multiple choice, yes/no/maybe, orientation word) it is correct when it equals
    ``truth_answer`` stripped, ignoring ASCII case (``"B"``/``"b"``, ``"yes"``/``"Yes"``); for
    ``exact`` when it equals ``truth_answer`` code point by code point; for ``normalized`` when
    it equals :func:`~analysis._parse.normalize_text` of ``truth_answer``. The item's ``truth``
    is ``truth_answer`` as given.
    """
    answer = parsed.answer if parsed.status == "ok" else None
    if answer is None:
        correct = False
    elif parser == "exact":
        correct = answer == truth_answer
    elif parser == "normalized":
        correct = answer == normalize_text(truth_answer)
    else:
        correct = _ascii_lower(answer) == _ascii_lower(truth_answer.strip(_SPACE))
    item = Item(
        row=None,
        position=None,
        truth=truth_answer,
        answer=answer,
        answered=answer is not None,
        correct=correct,
        logprobs=parsed.logprobs,
        margin=parsed.margin,
    )
    return _trial(parsed.status, [item], parsed.problems)


def score_parsed(parsed: Parsed, parser: str, truth: Truth) -> TrialScore:
    """Score ``parsed`` with the scorer for ``parser`` (a key of :data:`~analysis._parse.PARSERS`).

    ``"tumbling-e-json"`` uses :func:`score_tumbling_e`; the others use :func:`score_choice`
    and need a string truth.
    """
    if parser not in PARSERS:
        raise KeyError(f"unknown parser {parser!r}")
    if parser == "tumbling-e-json":
        return score_tumbling_e(parsed, truth)
    if not isinstance(truth, str):
        raise ValueError(f"parser {parser!r} needs a single truth answer (a string)")
    return score_choice(parsed, truth, parser)


def score_record(parsed: Parsed, parser: str, truth: Truth) -> ScoreRecord:
    """:func:`score_parsed`'s score as a :class:`ScoreRecord` (what ``trial.scored`` records).

    With a :class:`ChartTruth` (``"tumbling-e-json"``) no :class:`Item` is built: the items'
    bytes come from the chart's per-glyph item bytes, the same bytes
    :meth:`TrialScore.items_bytes` gives.
    """
    if parser == "tumbling-e-json" and isinstance(truth, ChartTruth):
        return truth.record(parsed)
    return score_parsed(parsed, parser, truth).record()


def score_judged(decision: str | None, truth: str, problems: Sequence[str] = ()) -> TrialScore:
    """Score a trial by its judges' decision (``docs/scoring.md`` §10).

    One item whose ``answer`` is the decision (the aggregate of the judges' labels, None when
    the votes reached none) and which is correct when the decision is ``"correct"``. Status
    ``"ok"`` with a decision, else ``"unparseable"``: a trial the judges could not decide is
    never counted as right or wrong.
    """
    item = Item(
        row=None,
        position=None,
        truth=truth,
        answer=decision,
        answered=decision is not None,
        correct=decision == "correct",
    )
    return _trial("ok" if decision is not None else "unparseable", [item], problems)


def score_text(text: str, parser: str | ParserConfig, truth: Truth) -> TrialScore:
    """Parse ``text`` with ``parser`` (a name of :data:`PARSERS` or a config) and score it."""
    config = parser if isinstance(parser, ParserConfig) else ParserConfig(parser)
    config.check()
    return score_parsed(config.parse(text), config.parser, truth)
