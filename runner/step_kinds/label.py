"""``label``: the one declared label among the lowercased words of the response.

It takes ``labels``: 2 or more distinct lowercase words (``docs/prompts.md`` §8).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from runner.step_kinds._base import Add, Inside, StepKind, StepParts

_WORD: Final = re.compile(r"[a-z0-9_-]+")


def parse(text: str, labels: tuple[str, ...], schema: Mapping[str, Any] | None) -> Any:
    """The one label among the text's words; none or two different ones: None (unparseable)."""
    found = {w for w in _WORD.findall(text.lower()) if w in labels}
    return next(iter(found)) if len(found) == 1 else None


def read(table: dict[str, Any], where: str, add: Add, inside: Inside) -> StepParts:
    """``labels``: 2 or more distinct lowercase words (``("yes", "no")`` after a problem)."""
    value = table.get("labels")
    if (
        not isinstance(value, list)
        or len(value) < 2
        or not all(isinstance(v, str) and re.fullmatch(r"[a-z][a-z0-9_-]*", v) for v in value)
        or len(set(value)) != len(value)
    ):
        add(
            f"{where}.labels",
            "the label parser needs 2 or more distinct lowercase words "
            f'(labels = ["correct", "incorrect"]), got {value!r}',
        )
        return StepParts(labels=("yes", "no"))
    return StepParts(labels=tuple(value))


KIND = StepKind("label", 2, parse, "labels", read)
