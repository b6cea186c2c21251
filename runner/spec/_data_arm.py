"""Data arms (``response_from``, ``docs/trials.md`` §6): responses taken from the items."""

from __future__ import annotations

from typing import Any, Final

from runner.spec._collector import Collector
from runner.spec._fields import int_seed
from runner.spec._state import Loading
from runner.spec._types import Arm


def check_data_arms(st: Loading) -> None:
    """Each data arm's field is text in every item it takes (an item study without variants)."""
    _data_arm_items(st.c, st.arms, st.items, st.variants)


DATA_ARM_REFUSED: Final = (
    "components",
    "differs_from",
    "system",
    "fewshot",
    "sampling",
    "models",
    "replicates",
    "variants",
    "after",
)
"""Arm keys a data arm (``response_from``) refuses: each shapes a request, and it sends none."""


def data_arm(c: Collector, spec: dict[str, Any], where: str, arm_id: str, role: str) -> Arm:
    """A data arm (``response_from = "<item field>"``, ``docs/trials.md`` §6), checked.

    Its responses are an item field as written; so every key that shapes a request or a
    model's sampling is refused, naming it. ``items`` (a seeded subset) is kept.
    """
    field_name = spec.get("response_from")
    if not isinstance(field_name, str) or not field_name:
        c.add(
            f"{where}.response_from",
            f"must name an item field, got {field_name!r}",
            ("arms", arm_id, "response_from"),
        )
        field_name = ""
    for key in DATA_ARM_REFUSED:
        if key in spec:
            c.add(
                f"{where}.{key}",
                f"a data arm (response_from = {field_name!r}) sends no "
                f"request, so it has no {key}: its responses are the items' {field_name!r} "
                "as written",
                ("arms", arm_id, key),
            )
    subset = None
    table = spec.get("items")
    if table is not None:
        n, seed = (table.get("n"), table.get("seed")) if isinstance(table, dict) else (None, "")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1 or not isinstance(table, dict):
            c.add(f"{where}.items", "must be a table { n = 100, seed = 7 }")
        else:
            seed = int_seed(c, table, "seed", f"{where}.items")
            subset = (n, seed) if seed else None
    return Arm(
        arm_id, role, (), None, subset=subset, replicates=1, response_from=field_name or None
    )


def _data_arm_items(c: Collector, arms: dict[str, Arm], items: Any, variants: list[Any]) -> None:
    """Each data arm's field is a non-empty text of every item it takes (naming item and field)."""
    for arm in arms.values():
        name = arm.response_from
        if name is None:
            continue
        where = f"arms.{arm.id}.response_from"
        if items is None:
            c.add(
                where,
                "a data arm takes its responses from an item file ([stimuli] items)",
                ("arms", arm.id, "response_from"),
            )
            continue
        if variants:
            c.add(
                where,
                "a data arm cannot run item variants: its responses answer the items as written",
                ("arms", arm.id, "response_from"),
            )
        for item in items:
            value = item.data.get(name)
            if not isinstance(value, str) or not value:
                what = (
                    "lacks it"
                    if value is None
                    else (
                        "has it empty" if value == "" else f"has a {type(value).__name__}, not text"
                    )
                )
                c.add(
                    where,
                    f"item {item.id!r} (line {item.line}) {what}: every item of a data "
                    f"arm supplies its response as a non-empty text field {name!r}",
                    ("arms", arm.id, "response_from"),
                )
                break
