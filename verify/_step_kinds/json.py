"""``json`` (§8): the text (or its first fenced block) as an object the locked schema allows."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from verify._step_kinds._base import StepKind


def _matches(schema: Mapping[str, Any], value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    props = schema.get("properties") or {}
    if any(r not in value for r in schema.get("required", [])):
        return False
    if schema.get("additionalProperties", True) is False and any(k not in props for k in value):
        return False
    kinds: dict[str, Callable[[Any], bool]] = {
        "string": lambda v: isinstance(v, str),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    }
    return all(kinds[props[k]["type"]](v) for k, v in value.items() if k in props)


def _parse(text: str, labels: tuple[str, ...], schema: Mapping[str, Any] | None) -> Any:
    body = text.strip()
    fence = re.search(r"```(?:json)?\n(.*?)```", body, re.S)
    if fence:
        body = fence.group(1).strip()
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if schema is not None and _matches(schema, value) else None


KIND = StepKind("json", 3, _parse, schema=True)
