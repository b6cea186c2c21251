"""``text`` (§8): the response text, stripped, non-empty."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verify._step_kinds._base import StepKind


def _parse(text: str, labels: tuple[str, ...], schema: Mapping[str, Any] | None) -> Any:
    return text.strip() or None


KIND = StepKind("text", 1, _parse)
