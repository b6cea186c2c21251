"""Response parsers: raw model text to per-item answers, strictly and without guessing.

The face the rest of ``analysis/`` (and the tests) import. ``docs/scoring.md`` is the normative
description; the parsers are the registry :mod:`analysis.parsers`, one module per parser kind
(``analysis/parsers/multiple_choice.py``, ...), with what they share in
``analysis/parsers/_core.py`` (the result types :class:`Parsed` and :class:`AnswerRow`, the text
of a stored body, JSON extraction, refusals, the single-answer tiers). :class:`ParserConfig`
holds a study's parser, letters and mode (``protocol.locked`` ``response``) and dispatches
through the registry; :data:`PARSERS` maps each name to its parser with the defaults.

Parsers never raise on any ``str``: anything they cannot read becomes a problem.
"""

from __future__ import annotations

from analysis.parsers import PARSERS, ParserConfig, parse_response
from analysis.parsers._core import (
    CHART_OTHER,
    CHART_TUMBLING_E,
    FORMATS,
    JOIN_PATTERN,
    KEY_PATTERN,
    LETTER_ALONE,
    LETTER_OPTION_LINE,
    LETTER_REVERSE_SUFFIX,
    LETTER_TOKEN,
    MAX_DEPTH,
    MAX_INT_DIGITS,
    MODES,
    ORIENTATION_CAPITALS,
    ORIENTATION_KEY_PATTERN,
    ORIENTATIONS,
    REFUSAL_PATTERNS,
    STATUSES,
    WORD_ALONE,
    WORD_TOKEN,
    YES_NO_MAYBE,
    YES_NO_OPENING,
    AnswerRow,
    Parsed,
    ParseError,
    Status,
    normalize_text,
    response_text,
)
from analysis.parsers.cloze import parse_cloze
from analysis.parsers.exact import parse_exact
from analysis.parsers.multiple_choice import parse_multiple_choice
from analysis.parsers.normalized import parse_normalized
from analysis.parsers.orientation_word import parse_orientation_word
from analysis.parsers.tumbling_e_json import parse_tumbling_e
from analysis.parsers.yes_no_maybe import parse_yes_no_maybe

__all__ = [
    "CHART_OTHER",
    "CHART_TUMBLING_E",
    "FORMATS",
    "JOIN_PATTERN",
    "KEY_PATTERN",
    "LETTER_ALONE",
    "LETTER_OPTION_LINE",
    "LETTER_REVERSE_SUFFIX",
    "LETTER_TOKEN",
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "MODES",
    "ORIENTATIONS",
    "ORIENTATION_CAPITALS",
    "ORIENTATION_KEY_PATTERN",
    "PARSERS",
    "REFUSAL_PATTERNS",
    "STATUSES",
    "WORD_ALONE",
    "WORD_TOKEN",
    "YES_NO_MAYBE",
    "YES_NO_OPENING",
    "AnswerRow",
    "ParseError",
    "Parsed",
    "ParserConfig",
    "Status",
    "normalize_text",
    "parse_cloze",
    "parse_exact",
    "parse_multiple_choice",
    "parse_normalized",
    "parse_orientation_word",
    "parse_response",
    "parse_tumbling_e",
    "parse_yes_no_maybe",
    "response_text",
]
