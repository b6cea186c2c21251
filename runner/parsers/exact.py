"""``exact``: the whole response, stripped of whitespace, is the answer (scoring.md §5.3)."""

from __future__ import annotations

from runner.parsers._base import ParserSpec

SPEC = ParserSpec("exact", 5, whole_text=True)
