"""``[prompt]`` (the item template) and ``[fewshot.<NAME>]`` (``docs/prompts.md`` §4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from runner.spec._collector import Collector
from runner.spec._fields import ID_RE, inside, int_seed, read_text, string
from runner.spec._state import Loading
from runner.spec._types import FewShotSpec, PromptSpec

FEWSHOT_RULES: Final = ("fixed", "random", "label-balanced", "same-metadata", "distinct-metadata")
FEWSHOT_ORDERS: Final = ("drawn", "id", "reverse")
FEWSHOT_STYLES: Final = ("turns", "inline")


def parse_prompt(st: Loading) -> None:
    """``[prompt]`` and the ``[fewshot.<NAME>]`` example sets."""
    st.prompt = _prompt(st.c, st.root, st.data)
    st.fewshot = _fewshot(st.c, st.root, st.data)


def _prompt(c: Collector, root: Path, data: dict[str, Any]) -> PromptSpec:
    table = data.get("prompt")
    if table is None:
        return PromptSpec()
    if not isinstance(table, dict):
        c.add("prompt", "must be a table")
        return PromptSpec()
    item: Path | None = None
    if "item" in table:
        rel = string(c, table, "item", "prompt")
        if rel:
            item = inside(c, root, rel, "prompt.item")
            if item.is_file():
                read_text(c, item, "prompt.item")
    fmt = table.get("option_format", "{label}. {text}")
    sep = table.get("option_separator", "\n")
    if not isinstance(fmt, str):
        c.add("prompt.option_format", f"must be a string, got {fmt!r}")
        fmt = "{label}. {text}"
    if not isinstance(sep, str):
        c.add("prompt.option_separator", f"must be a string, got {sep!r}")
        sep = "\n"
    return PromptSpec(item, fmt, sep)


SEEDED_RULES: Final = ("random", "label-balanced", "same-metadata", "distinct-metadata")
METADATA_RULES: Final = ("same-metadata", "distinct-metadata")


def _fewshot(c: Collector, root: Path, data: dict[str, Any]) -> dict[str, FewShotSpec]:
    raw = data.get("fewshot")
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        c.add("fewshot", "declare each example set as a [fewshot.<NAME>] table")
        return {}
    return {name: _example_set(c, root, name, table) for name, table in raw.items()}


def _example_set(c: Collector, root: Path, name: str, table: dict[str, Any]) -> FewShotSpec:
    """One ``[fewshot.<name>]`` table: its examples file, rule and the keys the rule takes."""
    where = f"fewshot.{name}"
    if not ID_RE.match(name):
        c.add(where, "example set names are letters, digits, '.', '_' or '-'")
    examples = inside(c, root, string(c, table, "examples", where) or ".", f"{where}.examples")
    rule = string(c, table, "rule", where)
    if rule and rule not in FEWSHOT_RULES:
        c.add(f"{where}.rule", f"unknown rule {rule!r}; use one of {', '.join(FEWSHOT_RULES)}")
    ids = _ids(c, table, where, rule)
    count = _count(c, table, where, rule, ids)
    seed: str | None = None
    if rule in SEEDED_RULES:
        seed = int_seed(c, table, "seed", where)
    elif "seed" in table:
        c.add(f"{where}.seed", f"applies to the random rules only, not {rule!r}")
    field_name: str | None = None
    if rule in METADATA_RULES:
        field_name = string(c, table, "field", where)
    elif "field" in table:
        c.add(f"{where}.field", "applies to the same-metadata and distinct-metadata rules only")
    order = _one_of(c, table, where, "order", FEWSHOT_ORDERS)
    style = _one_of(c, table, where, "style", FEWSHOT_STYLES)
    answer = _answer_template(c, root, table, where)
    return FewShotSpec(
        name, examples, rule, count, ids, seed or None, field_name or None, order, style, answer
    )


def _ids(c: Collector, table: dict[str, Any], where: str, rule: str) -> tuple[str, ...]:
    """``ids``: the fixed rule's examples, in order (refused for any other rule)."""
    ids_raw = table.get("ids")
    if ids_raw is None:
        if rule == "fixed":
            c.add(f"{where}.ids", "the fixed rule needs the example ids, in order")
        return ()
    if rule != "fixed":
        c.add(f"{where}.ids", f"applies to the fixed rule only, not {rule!r}")
        return ()
    if not isinstance(ids_raw, list) or not ids_raw or not all(isinstance(x, str) for x in ids_raw):
        c.add(f"{where}.ids", "must be a non-empty list of example ids")
        return ()
    if len(set(ids_raw)) != len(ids_raw):
        c.add(f"{where}.ids", "an example is listed twice")
    return tuple(ids_raw)


def _count(c: Collector, table: dict[str, Any], where: str, rule: str, ids: tuple[str, ...]) -> int:
    """``count``: the examples drawn (default: as many as the fixed rule's ids)."""
    count = table.get("count", len(ids) if rule == "fixed" else None)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        c.add(f"{where}.count", f"must be an integer >= 1, got {count!r}")
        return 1
    if rule == "fixed" and ids and count != len(ids):
        c.add(f"{where}.count", f"is {count}, but ids lists {len(ids)} examples")
    return count


def _one_of(
    c: Collector, table: dict[str, Any], where: str, key: str, values: tuple[str, ...]
) -> str:
    """``order`` or ``style``: one of ``values`` (the first is the default)."""
    value = string(c, table, key, where, values[0])
    if value and value not in values:
        c.add(f"{where}.{key}", f"must be one of {', '.join(values)}, got {value!r}")
    return value or values[0]


def _answer_template(c: Collector, root: Path, table: dict[str, Any], where: str) -> Path | None:
    """``answer``: a readable template of the examples' answers, or None."""
    if "answer" not in table:
        return None
    rel = string(c, table, "answer", where)
    if not rel:
        return None
    answer = inside(c, root, rel, f"{where}.answer")
    if answer.is_file():
        read_text(c, answer, f"{where}.answer")
    return answer
