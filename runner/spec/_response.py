"""``[response]``: format, parser, letters and mode (``docs/scoring.md``).

What each parser allows is its entry's in :mod:`runner.parsers`; the parser groups below are
re-exported from there for the modules that import them from here.
"""

from __future__ import annotations

import re
from typing import Any, Final

from runner.parsers import (
    LETTER_PARSERS,
    PARSERS,
    SINGLE_ANSWER_PARSERS,
    TEXT_PARSERS,
    VOCABULARY_PARSERS,
    lookup,
)
from runner.spec._collector import Collector
from runner.spec._fields import section_table, string
from runner.spec._state import Loading

__all__ = [
    "DEFAULT_LETTERS",
    "JUDGE_PREFIX",
    "LETTER_PARSERS",
    "MODES",
    "PARSERS",
    "SINGLE_ANSWER_PARSERS",
    "TEXT_PARSERS",
    "VOCABULARY_PARSERS",
    "answer_column",
    "check_judge",
    "default_answer_column",
    "parse_response",
]

JUDGE_PREFIX: Final = "judge:"
"""``[response] parser = "judge:<step>"``: a trial step scores each trial (scoring.md §10)."""
MODES: Final = ("exactly-one", "first-token")
"""Parser modes of ``docs/scoring.md`` section 5.2."""
DEFAULT_LETTERS: Final = "ABCD"


def default_answer_column(parser: str) -> str:
    """The truth-table column a single-answer parser reads by default (its registry entry's).

    ``orientation`` for ``orientation-word`` (the rotation builder's table), else ``answer``.
    """
    spec = lookup(parser)
    return spec.answer_column if spec is not None else "answer"


def parse_response(st: Loading) -> None:
    """``[response]``: ``parser`` (default tumbling-e-json), ``format``, ``letters``, ``mode``."""
    c = st.c
    response = section_table(c, st.data, "response")
    parser = string(c, response, "parser", "response", "tumbling-e-json")
    if parser and parser not in PARSERS and parser != "ddx" and not parser.startswith(JUDGE_PREFIX):
        c.add("response.parser", f"unknown parser {parser!r}; use one of {', '.join(PARSERS)}")
    st.response_format = string(c, response, "format", "response", parser or "tumbling-e-json")
    st.letters = _letters(c, response, parser)
    st.mode = _mode(c, response, parser)
    st.parser = parser


def _letters(c: Collector, response: dict[str, Any], parser: str) -> str | None:
    """The option letters of a letter parser (default ABCD); refused for any other parser."""
    if "letters" in response and parser not in LETTER_PARSERS:
        c.add(
            "response.letters",
            f"applies to the {' and '.join(LETTER_PARSERS)} parsers only, not {parser!r}",
        )
        return None
    if parser not in LETTER_PARSERS:
        return None
    letters = string(c, response, "letters", "response", DEFAULT_LETTERS)
    if letters and (not re.fullmatch(r"[A-Z]{2,26}", letters) or len(set(letters)) != len(letters)):
        c.add("response.letters", f"must be 2 to 26 distinct capital letters A-Z, got {letters!r}")
    return letters


def _mode(c: Collector, response: dict[str, Any], parser: str) -> str:
    """``mode`` (default exactly-one); first-token for a parser with a closed vocabulary."""
    mode = string(c, response, "mode", "response", "exactly-one")
    if mode and mode not in MODES:
        c.add("response.mode", f"unknown mode {mode!r}; use {' or '.join(MODES)}")
    elif mode == "first-token" and parser not in VOCABULARY_PARSERS:
        c.add(
            "response.mode",
            f"first-token applies to the {', '.join(VOCABULARY_PARSERS)} parsers, not {parser!r}",
        )
    return mode or "exactly-one"


def check_judge(st: Loading) -> None:
    """``parser = "judge:<step>"``: a trial step judging each trial (``docs/scoring.md`` §10).

    It uses the label parser with a label ``correct``, in an item study.
    """
    if not st.parser.startswith(JUDGE_PREFIX):
        return
    judge = st.steps.get(st.parser[len(JUDGE_PREFIX) :])
    if judge is None or judge.on != "trial":
        st.c.add(
            "response.parser",
            f'{st.parser!r} names no trial step ([steps.<NAME>] with on = "trial")',
        )
    elif judge.parser != "label" or "correct" not in judge.labels:
        st.c.add(
            "response.parser",
            f"judge step {judge.name!r} must use the label parser with "
            'a label "correct" (a trial is correct when the judges\' decision is it)',
        )
    if st.items is None:
        st.c.add("response.parser", "a judge scores item studies ([stimuli] items) only")


def answer_column(c: Collector, data: dict[str, Any], parser: str) -> str | None:
    table = data.get("stimuli")
    table = table if isinstance(table, dict) else {}
    if parser not in SINGLE_ANSWER_PARSERS:
        if "answer_column" in table:
            c.add(
                "stimuli.answer_column",
                f"applies to single-answer parsers only; the {parser} truth table has the fixed "
                "columns stimulus,row,position,orientation",
            )
        return None
    column = string(c, table, "answer_column", "stimuli", default_answer_column(parser))
    if column == "stimulus":
        c.add("stimuli.answer_column", "the answer cannot be the 'stimulus' column itself")
    return column or None
