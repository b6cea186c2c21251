"""``normalized``: the normalized form of the whole response is the answer (scoring.md §5.3)."""

from __future__ import annotations

from runner.parsers._base import ParserSpec

SPEC = ParserSpec("normalized", 6, whole_text=True)
