"""``orientation-word``: one of UP, RIGHT, DOWN, LEFT (``docs/scoring.md`` §5).

Its truth is the rotation builder's table, so ``answer_column`` defaults to ``orientation``.
"""

from __future__ import annotations

from runner.parsers._base import ParserSpec

SPEC = ParserSpec("orientation-word", 4, modes=True, answer_column="orientation")
