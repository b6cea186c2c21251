"""``[variants.<NAME>]``: item variants (``docs/variants.md`` section 1)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from runner._schema import KeyPath
from runner._variants import FIELD_KINDS, KIND_KEYS, KINDS, VariantSpec
from runner.spec._collector import Collector
from runner.spec._fields import ID_RE, inside, string
from runner.spec._state import Loading


def parse_variants(st: Loading) -> None:
    """``[variants.<NAME>]``, then each arm's ``variants`` names one of them."""
    st.variants = _variants(st.c, st.root, st.data, st.items is not None)
    declared = {v.name for v in st.variants}
    for arm in st.arms.values():
        for name in arm.variants or ():
            if name not in declared and not any(
                name.startswith(f"{v.name}-") and v.kind == "all-orders" for v in st.variants
            ):
                known = ", ".join(sorted(declared)) or "none declared"
                st.c.add(f"arms.{arm.id}.variants", f"unknown variant {name!r} (variants: {known})")


RESERVED_FIELDS: Final = ("id", "answer", "options", "images", "metadata", "rationale")
"""Item keys that are not text fields a variant may transform."""
OPTIONAL: Final = ("labels_from", "query")
"""Keys a kind takes that have a default (set after the table is read)."""


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _seed(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _fraction(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1


def _order(value: Any) -> bool:
    return isinstance(value, str) and bool(re.fullmatch(r"[A-Z]{2,26}", value))


def _labels(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(x, str) and x for x in value)


def _text_field(value: Any) -> bool:
    return (
        isinstance(value, str)
        and bool(re.fullmatch(r"[a-z][a-z0-9_]*", value))
        and value not in RESERVED_FIELDS
    )


def _name(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


RULES: Final[dict[str, tuple[Callable[[Any], bool], str]]] = {
    "k": (_positive, "an integer >= 1"),
    "count": (_positive, "an integer >= 1"),
    "seed": (_seed, "a non-negative integer"),
    "fraction": (_fraction, "a number between 0 and 1 (exclusive)"),
    "order": (_order, 'a string of option labels, e.g. "DCBA"'),
    "labels": (_labels, "a non-empty list of section labels"),
    "field": (_text_field, "the name of a text field of the items"),
    "query": (_text_field, "the name of a text field of the items"),
    "labels_from": (_name, "the name of a metadata field"),
    "stopwords": (_name, "the path of a stop-word file"),
}
"""Each variant parameter: what a good value is, and how the message names it."""


def _variants(
    c: Collector, root: Path, data: dict[str, Any], item_study: bool
) -> list[VariantSpec]:
    """The ``[variants.<NAME>]`` tables (``docs/variants.md`` section 1), in declaration order."""
    raw = data.get("variants")
    if raw is None:
        return []
    if not isinstance(raw, dict) or not raw or not all(isinstance(v, dict) for v in raw.values()):
        c.add("variants", "declare each variant as a [variants.<NAME>] table")
        return []
    if not item_study:
        c.add("variants", "variants transform items: they need an item file ([stimuli] items)")
    out: list[VariantSpec] = []
    for name, table in raw.items():
        spec = _variant(c, root, name, table)
        if spec is not None:
            out.append(spec)
    return out


def _variant(c: Collector, root: Path, name: str, table: dict[str, Any]) -> VariantSpec | None:
    """One ``[variants.<name>]`` table: a known kind and the keys it takes (None if no kind)."""
    where = f"variants.{name}"
    if not ID_RE.match(name):
        c.add(where, "variant names are letters, digits, '.', '_' or '-' (at most 64)")
    kind = string(c, table, "kind", where)
    if not kind:
        return None
    if kind not in KINDS:
        c.add(f"{where}.kind", f"unknown kind {kind!r}; use one of {', '.join(KINDS)}")
        return None
    allowed = KIND_KEYS[kind]
    for key in table:
        if key != "kind" and key not in allowed:
            took = ", ".join(allowed) or "no other key"
            c.add(
                f"{where}.{key}",
                f"does not apply to kind {kind!r} (it takes {took})",
                ("variants", name, key),
            )
    params, stop = _params(c, root, name, kind, table)
    if kind in FIELD_KINDS and kind == "keep-sections":
        params.setdefault("labels_from", "context_labels")
    if kind == "keep-salient":
        params.setdefault("query", "question")
    return VariantSpec(name, kind, params, stop)


def _params(
    c: Collector, root: Path, name: str, kind: str, table: dict[str, Any]
) -> tuple[dict[str, Any], frozenset[str] | None]:
    """The kind's parameters that check out, and the stop words of a ``stopwords`` file."""
    where = f"variants.{name}"
    params: dict[str, Any] = {}
    stop: frozenset[str] | None = None
    for key in KIND_KEYS[kind]:
        path = ("variants", name, key)
        value = table.get(key)
        if value is None and key in OPTIONAL:
            continue
        if value is None:
            c.add(f"{where}.{key}", f"missing (kind {kind!r} needs it)", path)
            continue
        good, what = RULES[key]
        if not good(value):
            c.add(f"{where}.{key}", f"must be {what}, got {value!r}", path)
            continue
        if key == "stopwords":
            value, stop = _stopwords(c, root, where, value, path)
        params[key] = str(value) if key == "seed" else value
    return params, stop


def _stopwords(
    c: Collector, root: Path, where: str, value: str, path: KeyPath
) -> tuple[str, frozenset[str] | None]:
    """A stop-word file in the study folder: its study path and its words (None if bad)."""
    from runner._variants import VariantError, read_stopwords

    file = inside(c, root, value, f"{where}.stopwords")
    if not file.is_file():
        return value, None
    stop = None
    try:
        stop = read_stopwords(file.read_bytes(), value)
    except VariantError as exc:
        c.add(f"{where}.stopwords", str(exc), path)
    return file.resolve().relative_to(root.resolve()).as_posix(), stop
