"""``normalized``: the normalized form of the whole response is the answer (scoring.md §5.3).

A truth answer that normalizes to nothing (only punctuation, markup and whitespace) can never
be matched: refused at lock.
"""

from __future__ import annotations

from typing import Final

from runner.parsers._base import ANSWER_WHITESPACE, ParserSpec

_PUNCTUATION: Final = frozenset(
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\u2010\u2011\u2012\u2013\u2014\u2019"
)


def answer_problem(answer: str) -> str | None:
    """Why ``answer`` can never be matched once normalized (it normalizes to nothing), or None."""
    if all(ch in _PUNCTUATION or ch in ANSWER_WHITESPACE or ch in "*`" for ch in answer):
        return "is only punctuation and whitespace, so it normalizes to nothing"
    return None


SPEC = ParserSpec("normalized", 6, whole_text=True, answer_problem=answer_problem)
