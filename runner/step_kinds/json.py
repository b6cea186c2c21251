"""``json``: a JSON object that satisfies the step's locked schema (``docs/prompts.md`` §8).

It takes ``schema``: a locked JSON Schema file of the subset both the runner and the verifier
implement (:func:`schema_problem`). A schema whose properties are all arrays of strings makes a
*set-valued* step (:func:`set_fields`), whose votes are aggregated element by element.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from runner.step_kinds._base import Add, Inside, StepKind, StepParts

__all__ = ["KIND", "schema_problem", "set_fields"]


def parse(text: str, labels: tuple[str, ...], schema: Mapping[str, Any] | None) -> Any:
    """The value of a step response's text, or None when it does not parse.

    The text (or its first ```` ```json ```` fenced block) as a JSON object that satisfies the
    locked schema.
    """
    body = text.strip()
    fence = re.search(r"```(?:json)?\n(.*?)```", body, re.S)
    if fence:
        body = fence.group(1).strip()
    try:
        value = json.loads(body)
    except ValueError:
        return None
    if schema is None or not _matches(schema, value):
        return None
    return value


def read(table: dict[str, Any], where: str, add: Add, inside: Inside) -> StepParts:
    """The json parser's locked schema, and the set-valued fields it declares."""
    rel = table.get("schema")
    if not isinstance(rel, str) or not rel:
        add(
            f"{where}.schema",
            'the json parser needs a locked JSON Schema file (schema = "schemas/NAME.json")',
        )
        return StepParts()
    schema = inside(rel, f"{where}.schema")
    if not schema.is_file():
        return StepParts(schema=schema)
    problem = schema_problem(schema.read_bytes())
    if problem:
        add(f"{where}.schema", f"{rel}: {problem}")
        return StepParts(schema=schema)
    return StepParts(schema=schema, sets=set_fields(json.loads(schema.read_bytes())))


_SCHEMA_TYPES: Final = ("object", "string", "number", "integer", "boolean", "array")


def schema_problem(data: bytes) -> str | None:
    """Why ``data`` is not a step schema we can check, or None.

    A step schema is the subset of JSON Schema the runner and the verifier both implement: an
    ``object`` with ``properties`` (each ``{"type": T}`` with T one of ``string``, ``number``,
    ``integer``, ``boolean``, ``array`` of strings via ``{"type": "array", "items": {"type":
    "string"}}``), ``required`` and ``additionalProperties: false`` (``docs/prompts.md`` §8).
    """
    try:
        schema = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return f"not a JSON file: {exc}"
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return 'a step schema is a JSON object with "type": "object"'
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        return 'a step schema needs "properties"'
    for key in schema:
        if key not in (
            "type",
            "properties",
            "required",
            "additionalProperties",
            "$schema",
            "title",
            "description",
        ):
            return f"unsupported schema keyword {key!r}"
    for name, prop in props.items():
        problem = _property_problem(name, prop)
        if problem is not None:
            return problem
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(r in props for r in required):
        return '"required" must list properties the schema declares'
    if schema.get("additionalProperties", True) not in (True, False):
        return '"additionalProperties" must be true or false'
    return None


def _property_problem(name: str, prop: Any) -> str | None:
    """Why a step schema's property ``name`` is not one we can check, or None."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        return f"property {name!r}: names are letters, digits and '_' (they are slot names)"
    if not isinstance(prop, dict) or prop.get("type") not in _SCHEMA_TYPES[1:]:
        return f'property {name!r}: needs a "type" of {", ".join(_SCHEMA_TYPES[1:])}'
    if prop["type"] == "array" and prop.get("items") != {"type": "string"}:
        return f'property {name!r}: an array must have "items": {{"type": "string"}}'
    return None


def set_fields(schema: Mapping[str, Any]) -> tuple[str, ...]:
    """The members of a set-valued step schema (every property an array of strings), else ().

    ``docs/prompts.md`` §8.3: such a step's votes are aggregated element by element.
    """
    props = schema.get("properties") or {}
    if props and all(p.get("type") == "array" for p in props.values()):
        return tuple(props)
    return ()


def _matches(schema: Mapping[str, Any], value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    props: dict[str, Any] = schema["properties"]
    if any(r not in value for r in schema.get("required", [])):
        return False
    if schema.get("additionalProperties", True) is False and any(k not in props for k in value):
        return False
    for key, item in value.items():
        prop = props.get(key)
        if prop is None:
            continue
        kind = prop["type"]
        ok = {
            "string": isinstance(item, str),
            "number": isinstance(item, int | float) and not isinstance(item, bool),
            "integer": isinstance(item, int) and not isinstance(item, bool),
            "boolean": isinstance(item, bool),
            "array": isinstance(item, list) and all(isinstance(x, str) for x in item),
        }[kind]
        if not ok:
            return False
    return True


KIND = StepKind("json", 3, parse, "schema", read)
