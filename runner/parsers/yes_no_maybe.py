"""``yes-no-maybe``: one of yes, no, maybe (PubMedQA labels; ``docs/scoring.md`` §5)."""

from __future__ import annotations

from runner.parsers._base import ParserSpec

SPEC = ParserSpec("yes-no-maybe", 3, modes=True)
