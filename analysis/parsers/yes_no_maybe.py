"""``yes-no-maybe``: one of yes, no, maybe (PubMedQA labels; ``docs/scoring.md`` §5)."""

from __future__ import annotations

from analysis.parsers._base import ResponseParser
from analysis.parsers._core import _YES_NO, YES_NO_MAYBE, Parsed, _parse_single

__all__ = ["PARSER", "parse_yes_no_maybe"]


def parse_yes_no_maybe(text: str, *, mode: str = "exactly-one") -> Parsed:
    """Read one of yes/no/maybe (reported in lower case) from ``text`` (PubMedQA style).

    Tiers as for :func:`parse_multiple_choice`: the whole text is the word (``"Yes."``);
    answer statements (``"Answer: no"``, ``"The final answer is maybe"``); lines that are only
    the word, or a text that opens with the word followed by punctuation (``"No, because"``).
    Two different words in the winning tier give ``"unparseable"``. With
    ``mode="first-token"`` the leftmost of the three words is the answer.
    """
    return _parse_single(text, _YES_NO, "yes/no/maybe answers", "yes/no/maybe answer", mode)


def _configured(text: str, letters: str, mode: str) -> Parsed:
    return parse_yes_no_maybe(text, mode=mode)


def _words(letters: str) -> tuple[str, ...]:
    return YES_NO_MAYBE


PARSER = ResponseParser(
    "yes-no-maybe", 3, _configured, parse_yes_no_maybe, modes=True, answers=_words
)
