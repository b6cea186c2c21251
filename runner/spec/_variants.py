"""``[variants.<NAME>]``: item variants (``docs/variants.md`` section 1)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from runner.spec._collector import Collector
from runner.spec._fields import ID_RE, inside, string
from runner.spec._state import Loading
from runner.variants import FIELD_KINDS, KIND_KEYS, KINDS, VariantSpec


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


def _variants(
    c: Collector, root: Path, data: dict[str, Any], item_study: bool
) -> list[VariantSpec]:
    """The ``[variants.<NAME>]`` tables (``docs/variants.md`` section 1), in declaration order."""
    from runner.variants import VariantError, read_stopwords

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
        where = f"variants.{name}"
        if not ID_RE.match(name):
            c.add(where, "variant names are letters, digits, '.', '_' or '-' (at most 64)")
        kind = string(c, table, "kind", where)
        if not kind:
            continue
        if kind not in KINDS:
            c.add(f"{where}.kind", f"unknown kind {kind!r}; use one of {', '.join(KINDS)}")
            continue
        allowed = KIND_KEYS[kind]
        params: dict[str, Any] = {}
        for key in table:
            if key != "kind" and key not in allowed:
                took = ", ".join(allowed) or "no other key"
                c.add(
                    f"{where}.{key}",
                    f"does not apply to kind {kind!r} (it takes {took})",
                    ("variants", name, key),
                )
        stop: frozenset[str] | None = None
        for key in allowed:
            path = ("variants", name, key)
            value = table.get(key)
            if value is None and key in ("labels_from", "query"):
                continue
            if value is None:
                c.add(f"{where}.{key}", f"missing (kind {kind!r} needs it)", path)
                continue
            ok = True
            if key in ("k", "count"):
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
                what = "an integer >= 1"
            elif key == "seed":
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
                what = "a non-negative integer"
                value = str(value) if ok else value
            elif key == "fraction":
                ok = (
                    isinstance(value, int | float)
                    and not isinstance(value, bool)
                    and (0 < value < 1)
                )
                what = "a number between 0 and 1 (exclusive)"
            elif key == "order":
                ok = isinstance(value, str) and bool(re.fullmatch(r"[A-Z]{2,26}", value))
                what = 'a string of option labels, e.g. "DCBA"'
            elif key == "labels":
                ok = (
                    isinstance(value, list)
                    and bool(value)
                    and all(isinstance(x, str) and x for x in value)
                )
                what = "a non-empty list of section labels"
            elif key == "field" or key == "query":
                ok = (
                    isinstance(value, str)
                    and bool(re.fullmatch(r"[a-z][a-z0-9_]*", value))
                    and (
                        value not in ("id", "answer", "options", "images", "metadata", "rationale")
                    )
                )
                what = "the name of a text field of the items"
            elif key == "labels_from":
                ok = isinstance(value, str) and bool(value)
                what = "the name of a metadata field"
            else:  # stopwords
                ok = isinstance(value, str) and bool(value)
                what = "the path of a stop-word file"
                if ok:
                    file = inside(c, root, value, f"{where}.stopwords")
                    if file.is_file():
                        try:
                            stop = read_stopwords(file.read_bytes(), value)
                        except VariantError as exc:
                            c.add(f"{where}.stopwords", str(exc), path)
                        value = file.resolve().relative_to(root.resolve()).as_posix()
            if not ok:
                c.add(f"{where}.{key}", f"must be {what}, got {value!r}", path)
                continue
            params[key] = value
        if kind in FIELD_KINDS and kind == "keep-sections":
            params.setdefault("labels_from", "context_labels")
        if kind == "keep-salient":
            params.setdefault("query", "question")
        out.append(VariantSpec(name, kind, params, stop))
    return out
