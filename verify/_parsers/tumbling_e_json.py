"""``tumbling-e-json`` (``docs/scoring.md`` section 4): an answer object, scored glyph by glyph."""

from __future__ import annotations

from verify._parsers._base import Parser
from verify._rescore import Parsed, parse_tumbling_e


def _parse(text: str, letters: str, mode: str) -> Parsed:
    return parse_tumbling_e(text)


PARSER = Parser("tumbling-e-json", 1, _parse, parse_tumbling_e, grid=True)
