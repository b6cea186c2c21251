"""The registry's entry, :class:`ResponseParser`: how one parser reads a response.

A parser kind is the ``parser`` of a study's ``[response]`` table (``docs/scoring.md``); what
the spec allows with it is :mod:`runner.parsers`'. Each module of :mod:`analysis.parsers`
defines a module-level ``PARSER``: its function, how a study's letters and mode reach it,
whether it reads the stored body itself (``cloze``), and its closed set of answers (the
labels the report's by-truth tables use). :class:`~analysis.parsers.ParserConfig`,
:func:`~analysis.parsers.parse_response` and the analysis ask the registry; they never name a
parser.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from analysis.parsers._core import Parsed

__all__ = ["ResponseParser"]


@dataclass(frozen=True)
class ResponseParser:
    """One parser kind, as the analysis reads responses with it.

    ``order`` places it in :data:`analysis.parsers.REGISTRY` (the vocabulary's "parsers"
    order). ``parse(text, letters, mode)`` reads one response text with a study's settings;
    ``default(text)`` with the defaults (letters ABCD, mode exactly-one); ``modes``: it takes
    ``mode = "first-token"``; ``read_body(raw, format, letters)``: it reads the stored body, not
    its text; ``answers(letters)``: its closed set of answers (None: free text).
    """

    name: str
    order: int
    parse: Callable[[str, str, str], Parsed]
    default: Callable[[str], Parsed]
    modes: bool = False
    read_body: Callable[[bytes, str, str], Parsed] | None = None
    answers: Callable[[str], tuple[str, ...]] | None = None
