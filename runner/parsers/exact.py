"""``exact``: the whole response, stripped of whitespace, is the answer (scoring.md §5.3).

A truth answer with whitespace at either end can never equal a stripped response: refused at
lock.
"""

from __future__ import annotations

from runner.parsers._base import ANSWER_WHITESPACE, ParserSpec


def answer_problem(answer: str) -> str | None:
    """Why ``answer`` can never be matched exactly (whitespace at an end), or None."""
    if answer != answer.strip(ANSWER_WHITESPACE):
        return "has whitespace at its start or end, which an exact match can never equal"
    return None


SPEC = ParserSpec("exact", 5, whole_text=True, answer_problem=answer_problem)
