"""The verifier's parser entry, :class:`Parser`: how one parser re-reads and re-scores.

Written from ``docs/scoring.md`` (sections 4 to 6), never from the writer's modules: each
module of ``verify/_parsers/`` defines a module-level ``PARSER`` naming the re-implementation
it reads a response text with (``verify._rescore`` holds the shared pieces), whether it takes a
mode (section 5.2), whether it reads the stored body itself (``cloze``, section 5.5), how its
answer is compared with the truth (section 6) and what its items carry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from verify._rescore import Parsed, lower, strip

__all__ = ["Parser", "same_word"]


def same_word(value: str, truth: str) -> bool:
    """Section 6: an answer equal to the stripped truth, ASCII case-insensitively."""
    return lower(value) == lower(strip(truth))


@dataclass(frozen=True)
class Parser:
    """One parser kind as the verifier re-derives it.

    ``order``: its place in the vocabulary's "parsers". ``parse(text, letters, mode)`` and
    ``default(text)`` (letters ABCD, mode exactly-one) read one response text; ``vocabulary``:
    it takes ``mode = "first-token"``; ``read_body(raw, fmt, letters)``: it reads the stored
    body, not its text; ``correct(value, truth)``: section 6's comparison; ``grid``: scored
    glyph by glyph against a tumbling-E truth table; ``logprobs``: its item carries the letters'
    log-probabilities and the margin (section 6.4).
    """

    name: str
    order: int
    parse: Callable[[str, str, str], Parsed]
    default: Callable[[str], Parsed]
    correct: Callable[[str, str], bool] = same_word
    vocabulary: bool = False
    read_body: Callable[[bytes, str, str], Parsed] | None = None
    grid: bool = False
    logprobs: bool = False
