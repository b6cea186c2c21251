"""What the response parsers share: raw model text to per-item answers, without guessing.

``docs/scoring.md`` is the normative description. Each parser is one module of
:mod:`analysis.parsers` (its ``PARSER`` entry and its function); this module holds what they
share: the result types, the text of a stored body, JSON extraction, refusals and the tiers of
the single-answer parsers. :mod:`analysis._parse` is the face the rest of ``analysis/`` imports.
A parser reads
one response *text* (see :func:`response_text` for how the text is taken from a stored
response body) and returns a :class:`Parsed`:

- ``status`` is ``"ok"``, ``"partial"``, ``"unparseable"`` or ``"refused"``;
- ``answers`` is a tuple of :class:`AnswerRow` (row number and the values read on that row,
  ``None`` for an item that is present but unreadable), sorted by row number;
- ``chart_type`` is the normalised ``chart_type`` of a tumbling-E answer object, else ``None``;
- ``problems`` says, in words, everything that kept the status from being ``"ok"``.

The parsers know the *form* of an answer, never the truth: whether a grid has the right number
of rows and glyphs is decided by the scorer (:mod:`analysis._score`), which may downgrade a
trial from ``"ok"`` to ``"partial"``. Single-answer parsers (multiple choice, yes/no/maybe,
orientation word, exact and normalized text) return one row ``1`` holding one value when they
find an answer, and no rows otherwise; their status is ``"ok"`` or ``"unparseable"``. The
vocabulary parsers take a *mode*: ``"exactly-one"`` (the tiers of ``docs/scoring.md`` 5.2;
conflicting answers are unparseable) or ``"first-token"`` (the leftmost answer token wins).
:class:`~analysis.parsers.ParserConfig` holds a study's parser, letters and mode
(``protocol.locked`` ``response``).

Parsers never raise on any ``str``: anything they cannot read becomes a problem.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final, Literal

__all__ = [
    "CHART_OTHER",
    "CHART_TUMBLING_E",
    "FORMATS",
    "JOIN_PATTERN",
    "KEY_PATTERN",
    "LETTER_ALONE",
    "LETTER_OPTION_LINE",
    "LETTER_REVERSE_SUFFIX",
    "LETTER_TOKEN",
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "MODES",
    "ORIENTATIONS",
    "ORIENTATION_CAPITALS",
    "ORIENTATION_KEY_PATTERN",
    "REFUSAL_PATTERNS",
    "STATUSES",
    "WORD_ALONE",
    "WORD_TOKEN",
    "YES_NO_MAYBE",
    "YES_NO_OPENING",
    "AnswerRow",
    "ParseError",
    "Parsed",
    "Status",
    "normalize_text",
    "response_text",
]

Status = Literal["ok", "partial", "unparseable", "refused"]
"""Parse (and trial) status."""

STATUSES: Final[tuple[Status, ...]] = ("ok", "partial", "unparseable", "refused")

ORIENTATIONS: Final = ("UP", "RIGHT", "DOWN", "LEFT")
"""The orientation vocabulary (same as :data:`runner._stimuli.ORIENTATIONS`)."""

YES_NO_MAYBE: Final = ("yes", "no", "maybe")
"""The yes/no/maybe vocabulary; answers are reported in lower case (PubMedQA labels)."""

CHART_TUMBLING_E: Final = "tumbling-e"
CHART_OTHER: Final = "other"

MODES: Final = ("exactly-one", "first-token")
"""Modes of the vocabulary parsers (``docs/scoring.md`` section 5.2)."""

FORMATS: Final = ("anthropic-messages", "openai-chat", "text")
"""Response body formats of ``docs/trials.md`` section 2."""


class ParseError(ValueError):
    """A stored response body from which no text can be taken; the message says why."""


@dataclass(frozen=True)
class AnswerRow:
    """The answers read on one row: ``values[i]`` is position ``i + 1``; ``None`` = unreadable."""

    row: int
    values: tuple[str | None, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``{"row": int, "values": [str | null, ...]}``."""
        return {"row": self.row, "values": list(self.values)}


@dataclass(frozen=True)
class Parsed:
    """The result of parsing one response text (see the module docstring)."""

    status: Status
    answers: tuple[AnswerRow, ...] = ()
    chart_type: str | None = None
    problems: tuple[str, ...] = ()
    logprobs: tuple[tuple[str, float | None], ...] | None = None
    """``cloze`` only: each letter's log-probability (None when absent), in letter order."""
    margin: float | None = None
    """``cloze`` only: the chosen letter's log-probability minus the next highest."""

    @property
    def answer(self) -> str | None:
        """The single answer of a single-answer parser (row 1, position 1), else ``None``."""
        for row in self.answers:
            if row.row == 1 and row.values:
                return row.values[0]
        return None

    def grid(self) -> dict[tuple[int, int], str | None]:
        """Answers keyed by ``(row, position)``, positions counted from 1."""
        return {
            (row.row, position): value
            for row in self.answers
            for position, value in enumerate(row.values, start=1)
        }

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``{"status", "chart_type", "answers": [...], "problems": [...]}``."""
        return {
            "status": self.status,
            "chart_type": self.chart_type,
            "answers": [row.as_dict() for row in self.answers],
            "problems": list(self.problems),
        }


def _unparseable(*problems: str) -> Parsed:
    return Parsed("unparseable", (), None, tuple(problems))


def _single(value: str) -> Parsed:
    return Parsed("ok", (AnswerRow(1, (value,)),), None, ())


# --------------------------------------------------------------------------- response bodies


def response_text(raw: bytes, format: str) -> str:
    """The text the scorer reads from a stored response body (``docs/trials.md`` section 2).

    ``"anthropic-messages"``: the concatenation, in order, of the ``text`` of every
    ``content`` block whose ``type`` is ``"text"`` (other blocks are skipped; no blocks gives
    ``""``). ``"openai-chat"``: ``choices[0].message.content``, which must be a string.
    ``"text"`` (a data trial's response, ``docs/trials.md`` §6): the body itself, UTF-8.
    Raises :class:`ParseError` when ``raw`` is not UTF-8 JSON of that shape or the format is
    unknown.
    """
    if format not in FORMATS:
        raise ParseError(f"unknown response format {format!r}; expected one of {FORMATS}")
    if format == "text":
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError(
                f"response text is not UTF-8 ({exc.reason} at byte {exc.start})"
            ) from None
    try:
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ParseError(f"response body is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise ParseError("response body is not JSON: nested too deeply") from None
    except ValueError as exc:
        raise ParseError(f"response body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ParseError(f"response body is a JSON {_json_type(body)}, not an object")
    if format == "anthropic-messages":
        content = body.get("content")
        if not isinstance(content, list):
            kind = body.get("type")
            detail = f' (body type "{kind}")' if isinstance(kind, str) else ""
            raise ParseError(f"response body has no content list{detail}")
        parts: list[str] = []
        for index, block in enumerate(content):
            if not isinstance(block, dict):
                raise ParseError(f"content[{index}] is a JSON {_json_type(block)}, not an object")
            if block.get("type") == "text":
                text = block.get("text")
                if not isinstance(text, str):
                    raise ParseError(f"content[{index}] is a text block without a string text")
                parts.append(text)
        return "".join(parts)
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ParseError("response body has no choices list")
    first = choices[0]
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        raise ParseError("choices[0] has no message object")
    text = message.get("content")
    if text is None:  # content: null (a reply with no text, e.g. only reasoning)
        return ""
    if not isinstance(text, str):
        raise ParseError(f"choices[0].message.content is a JSON {_json_type(text)}, not a string")
    return text


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


# --------------------------------------------------------------------------- JSON extraction


class _Rejected(ValueError):
    """A JSON value this module does not accept (duplicate key, NaN or Infinity)."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) == len(pairs):  # no key twice: the usual case, without a Python loop
        return result
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _Rejected(f"duplicate key {key!r}")
        seen.add(key)
    raise AssertionError("unreachable: fewer members than pairs means a key repeats")


def _constant(name: str) -> Any:
    raise _Rejected(f"{name} is not JSON")


MAX_DEPTH: Final = 64
"""JSON values nested deeper than this (the answer object has depth 4) do not parse."""

MAX_INT_DIGITS: Final = 4300
"""Integer literals with more digits do not parse (Python's default conversion limit)."""


def _int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise _Rejected(f"integer literal of more than {MAX_INT_DIGITS} digits")
    return int(literal)


_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_pairs, parse_constant=_constant, parse_int=_int
)
_SHORT_DECODER: Final = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_constant)
""":data:`_DECODER` for a text of at most :data:`MAX_INT_DIGITS` characters: no integer literal
in it can be refused, so its integers are read in C (``int``), to the same values."""


@dataclass(frozen=True)
class _Scan:
    values: tuple[tuple[int, Any], ...]  # (offset, value) of every top-level JSON value
    first_error: str | None


def _scan_json(text: str) -> _Scan:
    """Every top-level JSON object or array in ``text``, left to right (docs/scoring.md 2.1)."""
    values: list[tuple[int, Any]] = []
    first_error: str | None = None
    index = 0
    length = len(text)
    decode = (_SHORT_DECODER if length <= MAX_INT_DIGITS else _DECODER).raw_decode
    # An array can only parse if a "]" follows its "[": past the last one, a "[" is skipped
    # without calling the decoder (same outcome, without retrying a deep nest at every "[").
    last_close = text.rfind("]")
    find = text.find
    while index < length:
        # the next "{", or "[" before the last "]": where the decoder is tried (the characters
        # in between are skipped without a Python step each)
        brace = find("{", index)
        bracket = find("[", index, last_close) if index < last_close else -1
        if bracket >= 0 and (brace < 0 or bracket < brace):
            index = bracket
        elif brace >= 0:
            index = brace
        else:
            break
        char = text[index]
        try:
            value, end = decode(text, index)
        except (ValueError, RecursionError) as exc:
            if first_error is None and char == "{":
                reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                if isinstance(exc, RecursionError):
                    reason = "nested too deeply"
                first_error = f"JSON object at character {index} does not parse: {reason}"
            index += 1
            continue
        # the depth cannot exceed the number of "{" and "[" in the value's text (those inside
        # strings only add to the count), so only a value with more of them is walked
        if (
            text.count("{", index, end) + text.count("[", index, end) > MAX_DEPTH
            and _depth(value) > MAX_DEPTH
        ):
            if first_error is None and char == "{":
                first_error = (
                    f"JSON object at character {index} is nested deeper than {MAX_DEPTH} levels"
                )
            index += 1
            continue
        values.append((index, value))
        index = end
    return _Scan(tuple(values), first_error)


def _depth(value: Any) -> int:
    """Nesting depth: 0 for a scalar, 1 + the deepest member for an array or object."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, level + 1)
            stack.extend((member, level + 1) for member in item)
    return deepest


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality: same types (a boolean is not a number), members and elements."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, list | dict) or isinstance(b, list | dict):
        return _same_container(a, b)
    numbers = isinstance(a, int | float) and isinstance(b, int | float)
    return (numbers or (isinstance(a, str) and isinstance(b, str))) and a == b


def _same_container(a: Any, b: Any) -> bool:
    """:func:`_same_json` of two arrays (element by element) or two objects (member by member)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    return False


# --------------------------------------------------------------------------- refusals

REFUSAL_PATTERNS: Final[tuple[str, ...]] = (
    # "this is not a tumbling E chart", "isn't a tumbling-E chart"
    r"(?:\bnot|n't)\s+(?:an?\s+|the\s+)?tumbling[\s-]*e\b",
    # "there are no tumbling E optotypes"
    r"\bno\s+tumbling[\s-]*e\b",
    # "cannot be read as a tumbling-E chart"
    r"\b(?:cannot|can't|can\s+not)\s+be\s+(?:read|interpreted|treated|scored|analy[sz]ed)"
    r"\s+as\s+(?:an?\s+)?tumbling[\s-]*e\b",
    # "letters rather than E optotypes", "letters, not rotated Es"
    r"\bletters?\b[^.!?\n]{0,40}?\b(?:rather\s+than|instead\s+of|not)\s+(?:\w+\s+){0,2}?"
    r"e(?:'?s)?\s*(?:optotypes?|glyphs?|symbols?|characters?|shapes?|figures?)?\b",
    # "I cannot determine orientations because the chart shows letters"
    r"(?:\bcannot|\bcan't|\bcan\s+not|\bunable\s+to)\b[^.!?\n]{0,60}?\borientations?\b"
    r"[^.!?\n]{0,120}?\bletters?\b",
    # "the chart shows letters, so I cannot determine orientations"
    r"\bletters?\b[^.!?\n]{0,120}?(?:\bcannot|\bcan't|\bcan\s+not|\bunable\s+to)\b"
    r"[^.!?\n]{0,60}?\borientations?\b",
)
"""Refusal regexes (Python ``re`` with IGNORECASE and ASCII), tried on the markup-free text."""

_REFUSALS: Final = tuple(re.compile(p, re.IGNORECASE | re.ASCII) for p in REFUSAL_PATTERNS)
_DASHES: Final = str.maketrans(
    {"\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2019": "'"}
)


def _markup_free(text: str) -> str:
    """Drop ``*`` and backquotes, map Unicode dashes to ``-``, U+2019 to ``'``, CR LF to LF."""
    text = text.translate(_DASHES).replace("*", "").replace("`", "")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _refusal(text: str) -> str | None:
    normalised = _markup_free(text)
    for pattern in _REFUSALS:
        match = pattern.search(normalised)
        if match:
            return match.group(0)
    return None


# --------------------------------------------------------------------------- single answers
# Regex templates, quoted verbatim in docs/scoring.md section 3. ``{U}``/``{L}`` are the option
# letters in upper/lower case, ``{W}`` the vocabulary words joined by ``|``. All are compiled
# with re.ASCII | re.MULTILINE.

KEY_PATTERN: Final = (
    r"(?i:\b(?:(?:final|correct|best|right)\s+)?answer"
    r"(?:\s+(?:is|would\s+be|will\s+be|should\s+be))?"
    r"|\b(?:correct|best|right)\s+(?:option|choice)(?:\s+is)?)"
    r"(?:\s*[:=]\s*|\s+-\s+|\s+)(?i:(?:option|choice|letter)\s+)?"
)
"""Start of an answer statement (multiple choice and yes/no/maybe)."""

ORIENTATION_KEY_PATTERN: Final = (
    r"(?i:\b(?:(?:final\s+)?answer|orientation|direction)(?:\s+is)?)"
    r"(?:\s*[:=]\s*|\s+-\s+|\s+)"
)
"""Start of an answer statement (orientation word)."""

JOIN_PATTERN: Final = r"\s*(?:,|/|&|(?i:\bor\b)|(?i:\band\b))\s*"
"""Separator between answers listed in one statement (``B or C``)."""

LETTER_TOKEN: Final = (
    r"[(\[]\s*([{U}{L}])\s*[)\]]"
    r"|(?<![\w'-])([{U}])(?![\w'-])"
    r"|(?<![\w'-])([{L}])(?=[.)]?[ \t]*(?:$|\n))"
)
"""One option letter: bracketed (any case), a free-standing capital, or a lower-case letter
that ends its line (optionally followed by ``.`` or ``)``)."""

LETTER_ALONE: Final = r"[(\[]?\s*([{U}{L}])\s*[)\]]?\s*[.:]?"
"""A whole text, or a whole line, that is only a letter."""

LETTER_REVERSE_SUFFIX: Final = (
    r"(?i:\s+is\s+(?:the\s+)?(?:correct|right|best)\s+(?:answer|option|choice))"
)
"""Follows a letter list in a reverse statement (``C is the correct answer``)."""

LETTER_OPTION_LINE: Final = r"^[ \t]*(?:[(\[]([{U}])[)\]]|([{U}])[.:)])[ \t]+\S"
"""A line that starts with a capital option label followed by text (``C. Hypertension``)."""

WORD_TOKEN: Final = r"(?i:(?<![\w'-])({W})(?![\w'-]))"
"""One vocabulary word, any case, not part of a longer word."""

WORD_ALONE: Final = r"(?i:({W}))\s*[.!]?"
"""A whole text, or a whole line, that is only a vocabulary word."""

YES_NO_OPENING: Final = r"""\A[\s"'>#-]*(?i:(yes|no|maybe))(?=[.,;:!])"""
"""A text that opens with yes/no/maybe followed by punctuation (``No, because ...``)."""

ORIENTATION_CAPITALS: Final = r"(?<![A-Za-z])(UP|RIGHT|DOWN|LEFT)(?![A-Za-z])"
"""An orientation word written in capitals anywhere in the text."""

_FLAGS: Final = re.ASCII | re.MULTILINE
_SPACE: Final = " \t\n\r\x0b\x0c"  # what re.ASCII calls \s; str.strip(_SPACE) is used throughout


@dataclass(frozen=True)
class _Vocabulary:
    """Compiled regexes of one single-answer parser (docs/scoring.md section 3)."""

    token: re.Pattern[str]
    canonical: Callable[[str], str]
    alone: re.Pattern[str]
    statements: tuple[re.Pattern[str], ...]  # each has a group named "list"
    tier3: tuple[re.Pattern[str], ...]

    def value(self, match: re.Match[str]) -> str:
        """The canonical answer of a match: its first non-empty group."""
        return self.canonical(next(g for g in match.groups() if g))

    def tokens(self, span: str) -> list[str]:
        """The canonical answers of every token in ``span``."""
        return [self.value(match) for match in self.token.finditer(span)]


def _ascii_upper(value: str) -> str:
    return value.translate(_UPPER)


def _ascii_lower(value: str) -> str:
    return value.translate(_LOWER)


_UPPER: Final = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _listed(token: str) -> str:
    return rf"(?P<list>(?:{token})(?:{JOIN_PATTERN}(?:{token}))*)"


def _choose(found: list[str], what: str) -> Parsed | None:
    distinct = sorted(set(found))
    if not distinct:
        return None
    if len(distinct) > 1:
        return _unparseable(f"conflicting {what}: {', '.join(distinct)}")
    return _single(distinct[0])


def _parse_single(
    text: str, vocab: _Vocabulary, what: str, one: str, mode: str = "exactly-one"
) -> Parsed:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}: {mode!r}")
    clean = _markup_free(text)
    if not clean.strip(_SPACE):
        return _unparseable("empty response")
    if mode == "first-token":
        first = vocab.token.search(clean)
        return _unparseable(f"no {one} found") if first is None else _single(vocab.value(first))
    alone = vocab.alone.fullmatch(clean.strip(_SPACE))
    if alone:
        return _single(vocab.value(alone))
    tier2: list[str] = []
    for pattern in vocab.statements:
        for match in pattern.finditer(clean):
            tier2.extend(vocab.tokens(match.group("list")))
    chosen = _choose(tier2, f"{what} stated")
    if chosen is not None:
        return chosen
    tier3: list[str] = []
    for line in clean.split("\n"):
        only = vocab.alone.fullmatch(line.strip(_SPACE))
        if only:
            tier3.append(vocab.value(only))
    for pattern in vocab.tier3:
        tier3.extend(vocab.value(found) for found in pattern.finditer(clean))
    chosen = _choose(tier3, what)
    if chosen is not None:
        return chosen
    return _unparseable(f"no {one} found")


def _fill(template: str, **values: str) -> str:
    for name, value in values.items():
        template = template.replace("{" + name + "}", value)
    return template


@lru_cache(maxsize=64)
def _choice_vocabulary(options: str) -> _Vocabulary:
    letters = {"U": options, "L": _ascii_lower(options)}
    token = _fill(LETTER_TOKEN, **letters)
    return _Vocabulary(
        token=re.compile(token, _FLAGS),
        canonical=_ascii_upper,
        alone=re.compile(_fill(LETTER_ALONE, **letters), _FLAGS),
        statements=(
            re.compile(KEY_PATTERN + _listed(token), _FLAGS),
            re.compile(_listed(token) + LETTER_REVERSE_SUFFIX, _FLAGS),
        ),
        tier3=(re.compile(_fill(LETTER_OPTION_LINE, **letters), _FLAGS),),
    )


def _word_vocabulary(
    words: tuple[str, ...], canonical: Callable[[str], str], key: str, tier3: str
) -> _Vocabulary:
    alternatives = "|".join(words)
    token = _fill(WORD_TOKEN, W=alternatives)
    return _Vocabulary(
        token=re.compile(token, _FLAGS),
        canonical=canonical,
        alone=re.compile(_fill(WORD_ALONE, W=alternatives), _FLAGS),
        statements=(re.compile(key + _listed(token), _FLAGS),),
        tier3=(re.compile(tier3, _FLAGS),),
    )


_OPTIONS_RE: Final = re.compile(r"[A-Z]{2,26}", re.ASCII)
_YES_NO: Final = _word_vocabulary(YES_NO_MAYBE, _ascii_lower, KEY_PATTERN, YES_NO_OPENING)
_ORIENTATION: Final = _word_vocabulary(
    ORIENTATIONS, _ascii_upper, ORIENTATION_KEY_PATTERN, ORIENTATION_CAPITALS
)


_PUNCTUATION_RUN: Final = re.compile(r"[\s!-/:-@\[-`{-~]+", re.ASCII)
"""A run of whitespace and ASCII punctuation (``docs/scoring.md`` section 5.3)."""


def normalize_text(text: str) -> str:
    """The normalized form of ``docs/scoring.md`` section 5.3.

    The markup-free text (section 3), ASCII letters lower-cased, every run of whitespace and
    ASCII punctuation (``!"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~``) replaced by one space, then
    stripped. Other characters (digits, non-ASCII letters) are kept as they are.
    """
    return _PUNCTUATION_RUN.sub(" ", _ascii_lower(_markup_free(text))).strip(" ")
