"""The registry's entry, :class:`ParserSpec`: what ``[response] parser = "..."`` allows.

A parser kind is the ``parser`` of a study's ``[response]`` table (``docs/scoring.md``). Each
module of :mod:`runner.parsers` describes one kind in a module-level ``SPEC``: whether it reads
one answer per stimulus, whether it takes ``[response] letters`` and ``mode``, whether it
compares the whole response text with the truth, and the truth-table column it reads by
default. :mod:`runner.spec` validates ``[response]`` and ``[stimuli] answer_column`` by asking
the registry; it never names a parser. How a parser reads a response is the analysis side's
(:mod:`analysis.parsers`); the verifier re-reads it on its own (``verify/_parsers/``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = ["ANSWER_WHITESPACE", "ParserSpec"]

ANSWER_WHITESPACE: Final = " \t\n\r\x0b\x0c"
"""Whitespace as ``docs/scoring.md`` section 3 defines it (what strip removes)."""


@dataclass(frozen=True)
class ParserSpec:
    """One parser kind, as the spec validates it.

    ``order`` places the kind in :data:`runner.parsers.PARSERS` (the vocabulary's "parsers"
    order, which messages list). ``single_answer``: scored against one answer per stimulus
    (``[stimuli] answer_column``); ``letters``: its answers are option letters (it takes
    ``[response] letters``); ``modes``: a closed vocabulary that takes ``[response] mode =
    "first-token"``; ``whole_text``: compares the whole response text with the truth;
    ``answer_column``: the truth-table column read by default; ``answer_problem(answer)``: why
    a truth answer can never be matched by this parser (None: it can), checked at lock.
    """

    name: str
    order: int
    single_answer: bool = True
    letters: bool = False
    modes: bool = False
    whole_text: bool = False
    answer_column: str = "answer"
    answer_problem: Callable[[str], str | None] | None = None
