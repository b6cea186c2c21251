"""``tumbling-e-json``: a tumbling-E answer object out of a response (``docs/scoring.md`` §2).

The answers are orientations, one per glyph, so its closed answer set is UP RIGHT DOWN LEFT.
"""

from __future__ import annotations

import json
from itertools import chain
from typing import Any, Final

from analysis.parsers._base import ResponseParser
from analysis.parsers._core import (
    _SPACE,
    CHART_OTHER,
    CHART_TUMBLING_E,
    ORIENTATIONS,
    AnswerRow,
    Parsed,
    _ascii_lower,
    _ascii_upper,
    _json_type,
    _refusal,
    _same_json,
    _scan_json,
    _unparseable,
)

__all__ = ["PARSER", "parse_tumbling_e"]

_CANONICAL: Final = frozenset(ORIENTATIONS)
"""Items that normalise to themselves (stripped and upper-cased, each is already itself)."""

_BLANK: Final = _SPACE + "*`"
"""What ``_markup_free(text).strip(_SPACE)`` leaves nothing of: it drops ``*`` and backquotes
and maps other characters only to non-blank ones, so a text is empty after it exactly when
every character is white space, ``*`` or a backquote."""


def parse_tumbling_e(text: str) -> Parsed:
    """Parse a tumbling-E answer object (``output_schema.txt``) out of ``text``.

    Extraction, normalisation and status rules are those of ``docs/scoring.md`` section 2:
    the one answer object among the top-level JSON values of the text is read; orientations
    are matched case-insensitively after stripping whitespace and anything else becomes an
    unreadable item (``None``) with a problem; ``chart_type`` ``"other"`` is a refusal; a
    text without an answer object is ``"refused"`` if a refusal pattern matches and
    ``"unparseable"`` otherwise.
    """
    if not text.strip(_BLANK):  # nothing left once markup and white space are dropped
        return _unparseable("empty response")
    scan = _scan_json(text)
    candidates = [
        (offset, value)
        for offset, value in scan.values
        if isinstance(value, dict) and ("chart_type" in value or "rows" in value)
    ]
    if not candidates:
        phrase = _refusal(text)
        if phrase is not None:
            return Parsed("refused", (), None, (f"refusal without an answer object: {phrase!r}",))
        problems = ['no JSON object with a "chart_type" or "rows" member']
        arrays = [
            offset
            for offset, value in scan.values
            if isinstance(value, list) and any(isinstance(item, dict) for item in value)
        ]
        if arrays:
            problems.append(f"a JSON array at character {arrays[0]} is not an answer object")
        if scan.first_error is not None:
            problems.append(scan.first_error)
        return _unparseable(*problems)
    distinct: list[dict[str, Any]] = []
    for _, value in candidates:
        if not any(_same_json(value, seen) for seen in distinct):
            distinct.append(value)
    if len(distinct) > 1:
        offsets = ", ".join(str(offset) for offset, _ in candidates)
        return _unparseable(
            f"{len(distinct)} different answer objects (at characters {offsets}); "
            "cannot tell which is the answer"
        )
    return _read_answer_object(distinct[0])


def _read_answer_object(obj: dict[str, Any]) -> Parsed:
    problems: list[str] = []
    chart_type: str | None = None
    raw_type = obj.get("chart_type")
    if "chart_type" not in obj:
        problems.append('"chart_type" is missing')
    elif not isinstance(raw_type, str):
        problems.append(f'"chart_type" is a JSON {_json_type(raw_type)}, not a string')
    else:
        chart_type = _ascii_lower(raw_type.strip(_SPACE))
        if chart_type == CHART_OTHER:
            rows = obj.get("rows")
            note: tuple[str, ...] = ()
            if rows not in ([], None):
                note = ('chart_type "other" with a non-empty "rows"; the rows are ignored',)
            return Parsed("refused", (), CHART_OTHER, note)
        if chart_type != CHART_TUMBLING_E:
            problems.append(
                f'"chart_type" {raw_type!r} is neither "{CHART_TUMBLING_E}" nor "{CHART_OTHER}"'
            )
    rows_value = obj.get("rows")
    answers: list[AnswerRow] = []
    if "rows" not in obj:
        problems.append('"rows" is missing')
    elif not isinstance(rows_value, list):
        problems.append(f'"rows" is a JSON {_json_type(rows_value)}, not an array')
    else:
        answers = _read_rows(rows_value, problems)
    return Parsed("partial" if problems else "ok", tuple(answers), chart_type, tuple(problems))


def _read_rows(entries: list[Any], problems: list[str]) -> list[AnswerRow]:
    """The answer rows of ``rows`` (``docs/scoring.md`` 4.5), with what is wrong in ``problems``."""
    usual = _usual_rows(entries)
    if usual is not None:
        return usual
    return _rows_one_by_one(entries, problems)


def _rows_one_by_one(entries: list[Any], problems: list[str]) -> list[AnswerRow]:
    """:func:`_read_rows` checking each entry and item in turn (any ``rows``, usual or not)."""
    read: dict[int, list[AnswerRow]] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            problems.append(f"rows[{index}] is a JSON {_json_type(entry)}, not an object")
            continue
        number = entry.get("row")
        if "row" not in entry:
            problems.append(f'rows[{index}] has no "row" number')
            continue
        if type(number) is not int or number < 1:
            problems.append(f'rows[{index}]: "row" {json.dumps(number)} is not a positive integer')
            continue
        orientations = entry.get("orientations")
        if not isinstance(orientations, list):
            what = (
                "missing"
                if "orientations" not in entry
                else (f"a JSON {_json_type(orientations)}, not an array")
            )
            problems.append(f'row {number}: "orientations" is {what}')
            continue
        try:  # every item already an orientation in capitals: read as it is (the usual case)
            canonical = _CANONICAL.issuperset(orientations)
        except TypeError:  # an array or object among the items
            canonical = False
        if canonical:
            read.setdefault(number, []).append(AnswerRow(number, tuple(orientations)))
            continue
        values: list[str | None] = []
        for position, item in enumerate(orientations, start=1):
            word = _ascii_upper(item.strip(_SPACE)) if isinstance(item, str) else None
            if word in ORIENTATIONS:
                values.append(word)
            else:
                values.append(None)
                problems.append(
                    f"row {number}, position {position}: {json.dumps(item)} is not one of "
                    f"{', '.join(ORIENTATIONS)}"
                )
        read.setdefault(number, []).append(AnswerRow(number, tuple(values)))
    answers: list[AnswerRow] = []
    for number in sorted(read):
        if len(read[number]) > 1:
            problems.append(
                f"row {number} is given {len(read[number])} times; none of its answers are used"
            )
            continue
        answers.append(read[number][0])
    return answers


def _usual_rows(entries: list[Any]) -> list[AnswerRow] | None:
    """The rows of the usual answer, read without a Python step per check; else None.

    Usual: every entry an object with a ``row`` and an ``orientations`` member, the row numbers
    positive integers (not booleans), each once, every orientations an array of orientations
    already in capitals. :func:`_rows_one_by_one` reads such rows with no problem, each as it
    is, in row order: the same rows are returned here. Anything else (None) takes the
    checks one by one, which say what is wrong.
    """
    if not entries:
        return None
    try:
        numbers = [entry["row"] for entry in entries]
        lists = [entry["orientations"] for entry in entries]
    except (TypeError, KeyError):  # an entry that is not an object, or without the member
        return None
    if (
        set(map(type, numbers)) != _INT
        or min(numbers) < 1
        or len(set(numbers)) != len(numbers)
        or set(map(type, lists)) != _LIST
    ):
        return None
    try:
        if not _CANONICAL.issuperset(chain.from_iterable(lists)):
            return None
    except TypeError:  # an array or object among the items
        return None
    rows = list(map(AnswerRow, numbers, map(tuple, lists)))
    if numbers != sorted(numbers):
        rows.sort(key=_row_number)
    return rows


_INT: Final = {int}
_LIST: Final = {list}


def _row_number(row: AnswerRow) -> int:
    return row.row


def _configured(text: str, letters: str, mode: str) -> Parsed:
    return parse_tumbling_e(text)


def _orientations(letters: str) -> tuple[str, ...]:
    return ORIENTATIONS


PARSER = ResponseParser("tumbling-e-json", 1, _configured, parse_tumbling_e, answers=_orientations)
