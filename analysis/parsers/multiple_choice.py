"""``multiple-choice``: one option letter (``docs/scoring.md`` §5), letters and mode chosen."""

from __future__ import annotations

from analysis.parsers._base import ResponseParser
from analysis.parsers._core import _OPTIONS_RE, Parsed, _choice_vocabulary, _parse_single

__all__ = ["PARSER", "parse_multiple_choice"]


def parse_multiple_choice(text: str, options: str = "ABCD", *, mode: str = "exactly-one") -> Parsed:
    """Read one option letter (reported in upper case) from ``text``.

    ``options`` are the allowed letters, 2 to 26 distinct upper-case ASCII letters
    (``"ABCD"``, ``"ABCDE"``); anything else raises :class:`ValueError`. Tiers, the first that
    finds something wins (``docs/scoring.md`` section 5): the whole text is one letter
    (``"B"``, ``"(c)"``, ``"**B**"``, ``"B."``); answer statements (``"Answer: B"``,
    ``"The answer is (C)."``, ``"B is the correct answer"``); lines that are one letter or
    start an option line (``"C. Hypertension"``). Two different letters in the winning tier
    (``"Answer: B or C"``) give ``"unparseable"``. With ``mode="first-token"`` the leftmost
    letter token is the answer, whatever follows.
    """
    if not _OPTIONS_RE.fullmatch(options) or len(set(options)) != len(options):
        raise ValueError(f"options must be 2-26 distinct upper-case letters: {options!r}")
    return _parse_single(text, _choice_vocabulary(options), "answer letters", "answer letter", mode)


def _configured(text: str, letters: str, mode: str) -> Parsed:
    return parse_multiple_choice(text, letters, mode=mode)


def _letters(letters: str) -> tuple[str, ...]:
    return tuple(letters or "ABCD")


PARSER = ResponseParser(
    "multiple-choice", 2, _configured, parse_multiple_choice, modes=True, answers=_letters
)
