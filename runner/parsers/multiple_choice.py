"""``multiple-choice``: one option letter (``docs/scoring.md`` §5), letters and mode chosen."""

from __future__ import annotations

from runner.parsers._base import ParserSpec

SPEC = ParserSpec("multiple-choice", 2, letters=True, modes=True)
