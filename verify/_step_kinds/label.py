"""``label`` (§8): the one locked label among the response's lowercased words."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from verify._step_kinds._base import StepKind

_WORD = re.compile(r"[a-z0-9_-]+")


def _parse(text: str, labels: tuple[str, ...], schema: Mapping[str, Any] | None) -> Any:
    found = {w for w in _WORD.findall(text.lower()) if w in labels}
    return next(iter(found)) if len(found) == 1 else None


KIND = StepKind("label", 2, _parse)
