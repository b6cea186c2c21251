"""``cloze``: the option letter with the highest first-token log-probability (scoring.md §5.5).

It reads the stored body's log-probabilities, not its text: its entry has a ``read_body``.
"""

from __future__ import annotations

import json
from typing import Any, Final

from analysis.parsers._base import ResponseParser
from analysis.parsers._core import AnswerRow, Parsed, _unparseable

__all__ = ["CLOZE_SPACE", "PARSER", "parse_cloze"]

CLOZE_SPACE: Final = " \t\n\x0b\x0c\r"
"""Whitespace stripped from a token before it is compared with a letter (scoring.md §5.5)."""


def _cloze_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def parse_cloze(raw: bytes, format: str, letters: str = "ABCD") -> Parsed:
    """``docs/scoring.md`` §5.5: the option letter with the highest first-token log-probability.

    Reads ``choices[0].logprobs.content[0]`` of an ``openai-chat`` body: its ``token`` and
    ``logprob`` and each entry of its ``top_logprobs``. A letter's log-probability is the
    highest ``logprob`` of an entry whose token, stripped of ASCII whitespace, is the letter.
    Every letter must have one (else ``"unparseable"``, naming the letters without); the
    answer is the highest (ties: the earlier letter), the margin its lead over the next.
    """
    if format != "openai-chat":
        return _unparseable(f"cloze reads log-probabilities, and a {format} body has none")
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return _unparseable(f"response body is not JSON: {exc}")
    try:
        first = body["choices"][0]["logprobs"]["content"][0]
        entries = [first, *first.get("top_logprobs", [])]
    except (KeyError, IndexError, TypeError, AttributeError):
        return _unparseable("response has no choices[0].logprobs.content[0] (no log-probabilities)")
    found: dict[str, float] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
            continue
        token = entry["token"].strip(CLOZE_SPACE)
        value = _cloze_number(entry.get("logprob"))
        if token in letters and len(token) == 1 and value is not None:
            found[token] = max(value, found.get(token, value))
    logprobs = tuple((letter, found.get(letter)) for letter in letters)
    missing = [letter for letter in letters if letter not in found]
    if missing:
        return Parsed(
            "unparseable",
            (),
            None,
            (
                f"no log-probability for option letter(s) {', '.join(missing)} among the first "
                "token's top_logprobs",
            ),
            logprobs,
            None,
        )
    ranked = sorted(letters, key=lambda letter: (-found[letter], letters.index(letter)))
    margin = found[ranked[0]] - found[ranked[1]] if len(ranked) > 1 else None
    return Parsed("ok", (AnswerRow(1, (ranked[0],)),), None, (), logprobs, margin)


def _text(text: str) -> Parsed:
    return _unparseable("cloze reads the response body's log-probabilities")


def _configured(text: str, letters: str, mode: str) -> Parsed:
    return _text(text)


def _letters(letters: str) -> tuple[str, ...]:
    return tuple(letters or "ABCD")


PARSER = ResponseParser("cloze", 7, _configured, _text, read_body=parse_cloze, answers=_letters)
