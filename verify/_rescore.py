"""Independent re-parsing and re-scoring of responses, written from ``docs/scoring.md``.

Nothing here comes from ``analysis/``: the response text (section 2), the tumbling-E parser
(section 4), the single-answer parsers with their modes (section 5), the scorer (section 6),
the item bytes (section 7) and the truth tables (section 8) are re-implemented from the page.
Only the status, the answers and the item bytes are normative; problems are counted (to tell
``ok`` from ``partial``), their wording is not kept. Which parser reads a response, and how its
answer is compared with the truth, is each parser's entry of the verifier's own registry
(``verify/_parsers/``), which dispatches :func:`~verify._parsers.parse_text`,
:func:`~verify._parsers.parse_body` and :func:`~verify._parsers.score` over the pieces here.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import rfc8785

__all__ = [
    "CONTROL_TRUTH",
    "Glyph",
    "Parsed",
    "Scored",
    "Truth",
    "TruthError",
    "batch_message",
    "item_bytes",
    "normalized",
    "read_sources",
    "read_truth",
    "response_text",
]

CONTROL_TRUTH = "not-a-tumbling-e-chart"
ORIENTATIONS = ("UP", "RIGHT", "DOWN", "LEFT")
WHITESPACE = " \t\n\r\v\f"
MAX_DEPTH = 64
MAX_INT_DIGITS = 4300

_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_MARKUP = str.maketrans(
    {
        "*": None,
        "`": None,
        "\u2010": "-",
        "\u2011": "-",
        "\u2012": "-",
        "\u2013": "-",
        "\u2014": "-",
        "\u2019": "'",
    }
)


def upper(text: str) -> str:
    """ASCII-only upper case (``docs/scoring.md`` section 3)."""
    return text.translate(_UPPER)


def lower(text: str) -> str:
    """ASCII-only lower case (section 3)."""
    return text.translate(_LOWER)


def strip(text: str) -> str:
    """Remove the six whitespace characters of section 3 at both ends."""
    return text.strip(WHITESPACE)


def markup_free(text: str) -> str:
    """The markup-free text of section 3."""
    return text.translate(_MARKUP).replace("\r\n", "\n").replace("\r", "\n")


def is_empty(text: str) -> bool:
    """Section 3: the markup-free text, stripped, is empty."""
    return strip(markup_free(text)) == ""


# ------------------------------------------------------------------------------ section 2


class BodyError(ValueError):
    """The response body has no readable text (status ``unparseable``)."""


def response_text(raw: bytes, fmt: str) -> str:
    """The text of a response body in ``fmt`` (section 2); :class:`BodyError` if none."""
    if fmt not in ("anthropic-messages", "openai-chat", "text"):
        raise BodyError(f"unknown format {fmt!r}")
    if fmt == "text":  # docs/trials.md §6: a data trial's response is its text
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BodyError(f"not UTF-8: {exc.reason}") from None
    if raw.startswith(b"\xef\xbb\xbf"):
        raise BodyError("byte-order mark")
    try:
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise BodyError(f"not UTF-8: {exc.reason}") from None
    except (ValueError, RecursionError) as exc:
        raise BodyError(f"not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BodyError("not an object")
    if fmt == "anthropic-messages":
        return _messages_text(body)
    return _chat_text(body)


def _messages_text(body: dict[str, Any]) -> str:
    """The text blocks of a Messages response, joined; :class:`BodyError` if malformed."""
    content = body.get("content")
    if not isinstance(content, list):
        raise BodyError("no content array")
    parts: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            raise BodyError("content element not an object")
        if block.get("type") == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise BodyError("text block without a string text")
            parts.append(text)
    return "".join(parts)


def _chat_text(body: dict[str, Any]) -> str:
    """The first choice's content of a chat completion; :class:`BodyError` if malformed."""
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise BodyError("no choices")
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise BodyError("no message")
    content = message.get("content")
    if content is None:  # docs/trials.md §2: content null is a reply with no text
        return ""
    if not isinstance(content, str):
        raise BodyError("content not a string")
    return content


def batch_message(line: bytes) -> bytes:
    """``docs/analysis.md`` §1: the canonical JSON of a batch line's ``result.message``."""
    try:
        message = json.loads(line)["result"]["message"]
    except (ValueError, KeyError, TypeError, IndexError, RecursionError):
        return b"null"
    try:
        return bytes(rfc8785.dumps(message))
    except (rfc8785.CanonicalizationError, ValueError, RecursionError):
        return b"null"


# ------------------------------------------------------------------------------ parse result


@dataclass(frozen=True)
class Parsed:
    """A parse result: status, chart_type, answers ``{row: [value or None, ...]}``, problems."""

    status: str
    chart_type: str | None = None
    answers: tuple[tuple[int, tuple[str | None, ...]], ...] = ()
    problems: int = 0
    cloze: dict[str, Any] | None = None  # §5.5: {"logprobs": {letter: float|None}, "margin"}


UNPARSEABLE = Parsed("unparseable", problems=1)


# ------------------------------------------------------------------------------ section 4


class _Reject(ValueError):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Reject("duplicate member")
        out[key] = value
    return out


def _constant(name: str) -> Any:
    raise _Reject(name)


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Reject("integer too long")
    return int(text)


_DECODER = json.JSONDecoder(
    object_pairs_hook=_pairs, parse_constant=_constant, parse_int=_int, strict=True
)


def _depth(value: Any, level: int = 0) -> int:
    """Depth of ``value`` (scalar 0); stops descending once it exceeds :data:`MAX_DEPTH`."""
    if level > MAX_DEPTH:
        return level
    if isinstance(value, dict):
        return 1 + max((_depth(v, level + 1) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v, level + 1) for v in value), default=0)
    return 0


def top_level_values(text: str) -> list[Any]:
    """Section 4.2: every top-level JSON value of ``text``."""
    out: list[Any] = []
    i, n = 0, len(text)
    find_brace, find_bracket = text.find, text.find
    last_close = text.rfind("]")  # a "[" after the last "]" cannot start a value: not tried
    while i < n:
        a, b = find_brace("{", i), find_bracket("[", i)
        if b > last_close:
            b = -1
        if a < 0 and b < 0:
            break
        i = b if a < 0 else a if b < 0 else min(a, b)
        try:
            value, end = _DECODER.raw_decode(text, i)
        except (ValueError, RecursionError):
            i += 1
            continue
        if _depth(value) > MAX_DEPTH:
            i += 1
            continue
        out.append(value)
        i = end
    return out


def json_equal(x: Any, y: Any) -> bool:
    """Equality as JSON (section 4.3): booleans and null never equal a number."""
    if isinstance(x, bool) or isinstance(y, bool) or x is None or y is None:
        return type(x) is type(y) and x == y
    if isinstance(x, int | float) and isinstance(y, int | float):
        return x == y
    if isinstance(x, str) and isinstance(y, str):
        return x == y
    return _containers_equal(x, y)


def _containers_equal(x: Any, y: Any) -> bool:
    """:func:`json_equal` of two arrays or two objects, element by element; else False."""
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(json_equal(a, b) for a, b in zip(x, y, strict=True))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(json_equal(x[k], y[k]) for k in x)
    return False


_REFUSALS = tuple(
    re.compile(p, re.IGNORECASE | re.ASCII)
    for p in (
        r"(?:\bnot|n't)\s+(?:an?\s+|the\s+)?tumbling[\s-]*e\b",
        r"\bno\s+tumbling[\s-]*e\b",
        r"\b(?:cannot|can't|can\s+not)\s+be\s+(?:read|interpreted|treated|scored|analy[sz]ed)"
        r"\s+as\s+(?:an?\s+)?tumbling[\s-]*e\b",
        r"\bletters?\b[^.!?\n]{0,40}?\b(?:rather\s+than|instead\s+of|not)\s+(?:\w+\s+){0,2}?"
        r"e(?:'?s)?\s*(?:optotypes?|glyphs?|symbols?|characters?|shapes?|figures?)?\b",
        r"(?:\bcannot|\bcan't|\bcan\s+not|\bunable\s+to)\b[^.!?\n]{0,60}?\borientations?\b"
        r"[^.!?\n]{0,120}?\bletters?\b",
        r"\bletters?\b[^.!?\n]{0,120}?(?:\bcannot|\bcan't|\bcan\s+not|\bunable\s+to)\b"
        r"[^.!?\n]{0,60}?\borientations?\b",
    )
)
REFUSAL_PATTERNS = tuple(p.pattern for p in _REFUSALS)


def refuses(text: str) -> bool:
    """Section 4.4: the refusal detector on the markup-free text."""
    m = markup_free(text)
    return any(p.search(m) for p in _REFUSALS)


def parse_tumbling_e(text: str) -> Parsed:
    """Section 4: the ``tumbling-e-json`` parser."""
    if is_empty(text):
        return UNPARSEABLE
    answers = [
        v
        for v in top_level_values(text)
        if isinstance(v, dict) and ("chart_type" in v or "rows" in v)
    ]
    if not answers:
        return Parsed("refused") if refuses(text) else UNPARSEABLE
    first = answers[0]
    if any(not json_equal(first, other) for other in answers[1:]):
        return UNPARSEABLE
    problems = 0
    chart_type: str | None = None
    if "chart_type" not in first or not isinstance(first["chart_type"], str):
        problems += 1
    else:
        chart_type = lower(strip(first["chart_type"]))
        if chart_type == "other":
            return Parsed("refused", chart_type)
        if chart_type != "tumbling-e":
            problems += 1
    rows = first.get("rows")
    accepted: list[tuple[int, tuple[str | None, ...]]] = []
    if not isinstance(rows, list):
        problems += 1
    else:
        for element in rows:
            if not isinstance(element, dict):
                problems += 1
                continue
            row = element.get("row")
            if not isinstance(row, int) or isinstance(row, bool) or row < 1:
                problems += 1
                continue
            orientations = element.get("orientations")
            if not isinstance(orientations, list):
                problems += 1
                continue
            values: list[str | None] = []
            for value in orientations:
                word = upper(strip(value)) if isinstance(value, str) else None
                if word in ORIENTATIONS:
                    values.append(word)
                else:
                    values.append(None)
                    problems += 1
            accepted.append((row, tuple(values)))
    counts: dict[int, int] = {}
    for row, _ in accepted:
        counts[row] = counts.get(row, 0) + 1
    duplicated = {row for row, c in counts.items() if c > 1}
    problems += len(duplicated)
    kept = sorted((r for r in accepted if r[0] not in duplicated), key=lambda r: r[0])
    return Parsed("partial" if problems else "ok", chart_type, tuple(kept), problems)


# ------------------------------------------------------------------------------ section 5

_KEY = (
    r"(?i:\b(?:(?:final|correct|best|right)\s+)?answer(?:\s+(?:is|would\s+be|will\s+be|"
    r"should\s+be))?|\b(?:correct|best|right)\s+(?:option|choice)(?:\s+is)?)"
    r"(?:\s*[:=]\s*|\s+-\s+|\s+)(?i:(?:option|choice|letter)\s+)?"
)
_ORIENTATION_KEY = (
    r"(?i:\b(?:(?:final\s+)?answer|orientation|direction)(?:\s+is)?)(?:\s*[:=]\s*|\s+-\s+|\s+)"
)
_JOIN = r"\s*(?:,|/|&|(?i:\bor\b)|(?i:\band\b))\s*"
_LETTER_TOKEN = (
    r"[(\[]\s*([{U}{L}])\s*[)\]]|(?<![\w'-])([{U}])(?![\w'-])"
    r"|(?<![\w'-])([{L}])(?=[.)]?[ \t]*(?:$|\n))"
)
_LETTER_ALONE = r"[(\[]?\s*([{U}{L}])\s*[)\]]?\s*[.:]?"
_LETTER_REVERSE_SUFFIX = (
    r"(?i:\s+is\s+(?:the\s+)?(?:correct|right|best)\s+(?:answer|option|choice))"
)
_LETTER_OPTION_LINE = r"^[ \t]*(?:[(\[]([{U}])[)\]]|([{U}])[.:)])[ \t]+\S"
_WORD_TOKEN = r"(?i:(?<![\w'-])({W})(?![\w'-]))"
_WORD_ALONE = r"(?i:({W}))\s*[.!]?"
_YES_NO_OPENING = r"""\A[\s"'>#-]*(?i:(yes|no|maybe))(?=[.,;:!])"""
_ORIENTATION_CAPITALS = r"(?<![A-Za-z])(UP|RIGHT|DOWN|LEFT)(?![A-Za-z])"

SINGLE_PATTERNS: dict[str, str] = {
    "KEY": _KEY,
    "ORIENTATION_KEY": _ORIENTATION_KEY,
    "JOIN": _JOIN,
    "LETTER_TOKEN": _LETTER_TOKEN,
    "LETTER_ALONE": _LETTER_ALONE,
    "LETTER_REVERSE_SUFFIX": _LETTER_REVERSE_SUFFIX,
    "LETTER_OPTION_LINE": _LETTER_OPTION_LINE,
    "WORD_TOKEN": _WORD_TOKEN,
    "WORD_ALONE": _WORD_ALONE,
    "YES_NO_OPENING": _YES_NO_OPENING,
    "ORIENTATION_CAPITALS": _ORIENTATION_CAPITALS,
}
"""The patterns of section 5.1, unfilled (the tests compare them with the page)."""


def _fill(pattern: str, options: str, words: str) -> str:
    return (
        pattern.replace("{U}", upper(options)).replace("{L}", lower(options)).replace("{W}", words)
    )


def _list(token: str) -> str:
    return f"(?P<list>(?:{token})(?:{_JOIN}(?:{token}))*)"


@dataclass(frozen=True)
class _Single:
    token: re.Pattern[str]
    alone: re.Pattern[str]
    statements: tuple[re.Pattern[str], ...]
    extra: re.Pattern[str]
    case: Callable[[str], str]


def _single(
    token: str,
    alone: str,
    statements: tuple[str, ...],
    extra: str,
    case: Callable[[str], str],
) -> _Single:
    flags = re.ASCII | re.MULTILINE
    return _Single(
        re.compile(token, flags),
        re.compile(alone, flags),
        tuple(re.compile(s, flags) for s in statements),
        re.compile(extra, flags),
        case,
    )


def _value(match: re.Match[str]) -> str | None:
    return next((g for g in match.groups() if g), None)


def _run_single(spec: _Single, text: str, mode: str = "exactly-one") -> Parsed:
    if is_empty(text):
        return UNPARSEABLE
    m = markup_free(text)
    if mode == "first-token":
        first = spec.token.search(m)
        value = _value(first) if first is not None else None
        return Parsed("ok", None, ((1, (spec.case(value),)),)) if value else UNPARSEABLE
    if mode != "exactly-one":
        raise ValueError(f"unknown mode {mode!r}")
    tiers: list[list[str]] = []
    alone = spec.alone.fullmatch(strip(m))
    if alone is not None and _value(alone):
        tiers.append([spec.case(_value(alone) or "")])
    else:
        found: list[str] = []
        for statement in spec.statements:
            for match in statement.finditer(m):
                for token in spec.token.finditer(match.group("list")):
                    value = _value(token)
                    if value:
                        found.append(spec.case(value))
        if not found:
            for line in m.split("\n"):
                line_match = spec.alone.fullmatch(strip(line))
                if line_match is not None and _value(line_match):
                    found.append(spec.case(_value(line_match) or ""))
            for match in spec.extra.finditer(m):
                value = _value(match)
                if value:
                    found.append(spec.case(value))
        tiers.append(found)
    values = tiers[0]
    if not values or any(v != values[0] for v in values):
        return UNPARSEABLE
    return Parsed("ok", None, ((1, (values[0],)),))


def _multiple_choice(options: str = "ABCD") -> _Single:
    token = _fill(_LETTER_TOKEN, options, "")
    return _single(
        token,
        _fill(_LETTER_ALONE, options, ""),
        (_KEY + _list(token), _list(token) + _LETTER_REVERSE_SUFFIX),
        _fill(_LETTER_OPTION_LINE, options, ""),
        upper,
    )


def _words(words: str, key: str, extra: str, case: Callable[[str], str]) -> _Single:
    token = _fill(_WORD_TOKEN, "", words)
    return _single(token, _fill(_WORD_ALONE, "", words), (key + _list(token),), extra, case)


_MC: dict[str, _Single] = {"ABCD": _multiple_choice()}
_YNM = _words("yes|no|maybe", _KEY, _YES_NO_OPENING, lower)
_OW = _words("UP|RIGHT|DOWN|LEFT", _ORIENTATION_KEY, _ORIENTATION_CAPITALS, upper)
_PUNCTUATION_RUN = re.compile(r"[ \t\n\r\v\f!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]+")


def normalized(text: str) -> str:
    """Section 5.3: markup-free, ASCII lower case, whitespace and punctuation runs to a space."""
    return _PUNCTUATION_RUN.sub(" ", lower(markup_free(text))).strip(" ")


def _exact(text: str) -> Parsed:
    answer = strip(text)
    return Parsed("ok", None, ((1, (answer,)),)) if answer else UNPARSEABLE


def _normalized(text: str) -> Parsed:
    answer = normalized(text)
    return Parsed("ok", None, ((1, (answer,)),)) if answer else UNPARSEABLE


def _letters(letters: str) -> _Single:
    if letters not in _MC:
        if not re.fullmatch(r"[A-Z]{2,26}", letters) or len(set(letters)) != len(letters):
            raise ValueError(f"letters must be 2-26 distinct capital letters: {letters!r}")
        _MC[letters] = _multiple_choice(letters)
    return _MC[letters]


def _finite(value: Any) -> float | None:
    if type(value) not in (int, float):
        return None
    value = float(value)
    return None if math.isnan(value) or math.isinf(value) else value


def parse_cloze(raw: bytes, fmt: str, letters: str) -> Parsed:
    """Section 5.5: the letter with the highest log-probability at the first position."""
    if fmt != "openai-chat":
        return UNPARSEABLE
    try:
        body = json.loads(raw)
        position = body["choices"][0]["logprobs"]["content"][0]
        candidates = [position, *list(position.get("top_logprobs") or [])]
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError):
        return UNPARSEABLE
    best: dict[str, float] = {}
    for candidate in candidates:
        if type(candidate) is not dict or type(candidate.get("token")) is not str:
            continue
        token = candidate["token"]
        while token and token[0] in " \t\n\x0b\x0c\r":
            token = token[1:]
        while token and token[-1] in " \t\n\x0b\x0c\r":
            token = token[:-1]
        value = _finite(candidate.get("logprob"))
        if value is None or len(token) != 1 or token not in letters:
            continue
        if token not in best or value > best[token]:
            best[token] = value
    logprobs = {letter: best.get(letter) for letter in letters}
    if len(best) < len(letters):
        return Parsed("unparseable", problems=1, cloze={"logprobs": logprobs, "margin": None})
    top = letters[0]
    for letter in letters[1:]:
        if best[letter] > best[top]:
            top = letter
    runner_up = max(best[letter] for letter in letters if letter != top)
    return Parsed(
        "ok",
        answers=((1, (top,)),),
        cloze={"logprobs": logprobs, "margin": best[top] - runner_up},
    )


# ------------------------------------------------------------------------------ section 6


@dataclass(frozen=True)
class Glyph:
    """One glyph of a tumbling-E chart."""

    row: int
    position: int
    orientation: str


Truth = tuple[Glyph, ...] | str


@dataclass(frozen=True)
class Scored:
    """A trial's score: status, counts, item bytes and their SHA-256."""

    status: str
    n_items: int
    n_answered: int
    n_correct: int
    items: bytes
    sha256: str


def item_bytes(items: list[dict[str, Any]]) -> bytes:
    """Section 7: RFC 8785 of the item array (fast, exact path for these small objects)."""
    try:
        text = json.dumps(items, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return text.encode("utf-8")
    except (UnicodeEncodeError, ValueError):
        return bytes(rfc8785.dumps(items))


def _item(
    row: int | None, position: int | None, truth: str, answer: str | None, correct: bool
) -> dict[str, Any]:
    return {
        "answer": answer,
        "answered": answer is not None,
        "correct": correct,
        "position": position,
        "row": row,
        "truth": truth,
    }


# ------------------------------------------------------------------------------ truth table


class TruthError(ValueError):
    """The truth table cannot be read."""


def _rows(data: bytes) -> tuple[list[str], list[tuple[int, list[str]]]]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TruthError(f"truth table is not UTF-8 ({exc.reason})") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if not header or "stimulus" not in header:
            raise TruthError("truth table has no stimulus column")
        rows: list[tuple[int, list[str]]] = []
        for fields in reader:
            if not fields:
                continue
            if len(fields) != len(header):
                raise TruthError(f"truth table line {reader.line_num}: {len(fields)} fields")
            rows.append((reader.line_num, fields))
    except csv.Error as exc:
        raise TruthError(f"truth table is not CSV: {exc}") from None
    return header, rows


def default_answer_column(parser: str) -> str:
    """Section 8: ``orientation`` for ``orientation-word``, else ``answer``."""
    return "orientation" if parser == "orientation-word" else "answer"


def read_truth(
    data: bytes, parser: str = "tumbling-e-json", answer_column: str | None = None
) -> dict[str, Truth]:
    """Read a truth CSV into ``{stimulus: truth}`` the way ``parser`` scores it (section 8).

    ``tumbling-e-json``: a glyph table ``stimulus,row,position,orientation`` (a row with empty
    row and position is the Snellen control's one string). Any other parser: an answer table,
    one row per stimulus, the answer in ``answer_column`` (default by parser).
    """
    header, rows = _rows(data)
    col = {name: i for i, name in enumerate(header)}
    out: dict[str, Truth] = {}
    if parser != "tumbling-e-json":
        column = answer_column or default_answer_column(parser)
        if column not in col:
            raise TruthError(f"truth table has no {column!r} column")
        for line, fields in rows:
            stimulus = fields[col["stimulus"]]
            if stimulus in out:
                raise TruthError(f"truth table line {line}: stimulus {stimulus!r} listed twice")
            out[stimulus] = fields[col[column]]
        return out
    if not {"row", "position", "orientation"} <= set(col):
        raise TruthError("truth table has no row, position and orientation columns")
    glyphs: dict[str, list[Glyph]] = {}
    strings: dict[str, str] = {}
    for line, fields in rows:
        stimulus = fields[col["stimulus"]]
        if fields[col["row"]] != "" and fields[col["position"]] != "":
            try:
                g = Glyph(
                    int(fields[col["row"]]),
                    int(fields[col["position"]]),
                    fields[col["orientation"]],
                )
            except ValueError:
                raise TruthError(f"truth table line {line}: bad row or position") from None
            glyphs.setdefault(stimulus, []).append(g)
        else:
            strings[stimulus] = fields[col["orientation"]]
    out = {s: tuple(g) for s, g in glyphs.items()}
    for s, value in strings.items():
        if s in out:
            raise TruthError(f"truth table: stimulus {s!r} has glyphs and a single answer")
        out[s] = value
    return out


def read_sources(data: bytes) -> dict[str, str]:
    """Each stimulus's ``source`` column of an answer table (``random_intercept = "source"``)."""
    header, rows = _rows(data)
    if "source" not in header:
        raise TruthError("truth table has no source column")
    at_stimulus, at_source = header.index("stimulus"), header.index("source")
    return {fields[at_stimulus]: fields[at_source] for _, fields in rows}
