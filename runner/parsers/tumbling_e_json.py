"""``tumbling-e-json``: a tumbling-E answer object, one orientation per glyph (scoring.md §2).

The default parser. Its truth table has the fixed columns ``stimulus,row,position,orientation``,
so it reads no ``answer_column``, ``letters`` or ``mode``.
"""

from __future__ import annotations

from runner.parsers._base import ParserSpec

SPEC = ParserSpec("tumbling-e-json", 1, single_answer=False)
