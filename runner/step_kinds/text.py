"""``text``: the response text, stripped of leading and trailing whitespace, non-empty."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.step_kinds._base import StepKind


def parse(text: str, labels: tuple[str, ...], schema: Mapping[str, Any] | None) -> Any:
    """The stripped text, or None when nothing is left."""
    stripped = text.strip()
    return stripped or None


KIND = StepKind("text", 1, parse)
