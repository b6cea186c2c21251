"""``orientation-word``: one of UP, RIGHT, DOWN, LEFT (``docs/scoring.md`` §5)."""

from __future__ import annotations

from analysis.parsers._base import ResponseParser
from analysis.parsers._core import _ORIENTATION, ORIENTATIONS, Parsed, _parse_single

__all__ = ["PARSER", "parse_orientation_word"]


def parse_orientation_word(text: str, *, mode: str = "exactly-one") -> Parsed:
    """Read one orientation word (UP, RIGHT, DOWN or LEFT, reported in upper case).

    Tiers: the whole text is the word (``"left"``); statements (``"Answer: LEFT"``,
    ``"Orientation: up"``, ``"direction is right"``); lines that are only the word, and words
    written in capitals anywhere (``"the top points LEFT"``). Two different words in the
    winning tier give ``"unparseable"``. With ``mode="first-token"`` the leftmost of the four
    words (any case) is the answer.
    """
    return _parse_single(text, _ORIENTATION, "orientation words", "orientation word", mode)


def _configured(text: str, letters: str, mode: str) -> Parsed:
    return parse_orientation_word(text, mode=mode)


def _orientations(letters: str) -> tuple[str, ...]:
    return ORIENTATIONS


PARSER = ResponseParser(
    "orientation-word", 4, _configured, parse_orientation_word, modes=True, answers=_orientations
)
