"""``cloze``: the option letter with the highest first-token log-probability (scoring.md §5.5).

It reads the response body's log-probabilities, not its text; it takes ``letters``.
"""

from __future__ import annotations

from runner.parsers._base import ParserSpec

SPEC = ParserSpec("cloze", 7, letters=True)
