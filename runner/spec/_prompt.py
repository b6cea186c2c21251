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


def _fewshot(c: Collector, root: Path, data: dict[str, Any]) -> dict[str, FewShotSpec]:
    raw = data.get("fewshot")
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        c.add("fewshot", "declare each example set as a [fewshot.<NAME>] table")
        return {}
    out: dict[str, FewShotSpec] = {}
    for name, table in raw.items():
        where = f"fewshot.{name}"
        if not ID_RE.match(name):
            c.add(where, "example set names are letters, digits, '.', '_' or '-'")
        examples = inside(c, root, string(c, table, "examples", where) or ".", f"{where}.examples")
        rule = string(c, table, "rule", where)
        if rule and rule not in FEWSHOT_RULES:
            c.add(f"{where}.rule", f"unknown rule {rule!r}; use one of {', '.join(FEWSHOT_RULES)}")
        ids_raw = table.get("ids")
        ids: tuple[str, ...] = ()
        if ids_raw is not None:
            if rule != "fixed":
                c.add(f"{where}.ids", f"applies to the fixed rule only, not {rule!r}")
            elif (
                not isinstance(ids_raw, list)
                or not ids_raw
                or not all(isinstance(x, str) for x in ids_raw)
            ):
                c.add(f"{where}.ids", "must be a non-empty list of example ids")
            else:
                ids = tuple(ids_raw)
                if len(set(ids)) != len(ids):
                    c.add(f"{where}.ids", "an example is listed twice")
        elif rule == "fixed":
            c.add(f"{where}.ids", "the fixed rule needs the example ids, in order")
        count = table.get("count", len(ids) if rule == "fixed" else None)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            c.add(f"{where}.count", f"must be an integer >= 1, got {count!r}")
            count = 1
        elif rule == "fixed" and ids and count != len(ids):
            c.add(f"{where}.count", f"is {count}, but ids lists {len(ids)} examples")
        seed: str | None = None
        if rule in ("random", "label-balanced", "same-metadata", "distinct-metadata"):
            seed = int_seed(c, table, "seed", where)
        elif "seed" in table:
            c.add(f"{where}.seed", f"applies to the random rules only, not {rule!r}")
        field_name: str | None = None
        if rule in ("same-metadata", "distinct-metadata"):
            field_name = string(c, table, "field", where)
        elif "field" in table:
            c.add(f"{where}.field", "applies to the same-metadata and distinct-metadata rules only")
        order = string(c, table, "order", where, "drawn")
        if order and order not in FEWSHOT_ORDERS:
            c.add(f"{where}.order", f"must be one of {', '.join(FEWSHOT_ORDERS)}, got {order!r}")
        style = string(c, table, "style", where, "turns")
        if style and style not in FEWSHOT_STYLES:
            c.add(f"{where}.style", f"must be one of {', '.join(FEWSHOT_STYLES)}, got {style!r}")
        answer: Path | None = None
        if "answer" in table:
            rel = string(c, table, "answer", where)
            if rel:
                answer = inside(c, root, rel, f"{where}.answer")
                if answer.is_file():
                    read_text(c, answer, f"{where}.answer")
        out[name] = FewShotSpec(
            name,
            examples,
            rule,
            int(count),
            ids,
            seed or None,
            field_name or None,
            order or "drawn",
            style or "turns",
            answer,
        )
    return out
