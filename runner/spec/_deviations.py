"""``[[deviations]]``: declared deviations from the source protocol."""

from __future__ import annotations

from typing import Any

from runner.spec._collector import Collector
from runner.spec._state import Loading


def parse_deviations(st: Loading) -> None:
    """``[[deviations]]``, locked with the study."""
    st.deviations = _deviations(st.c, st.data)


def _deviations(c: Collector, data: dict[str, Any]) -> tuple[dict[str, str], ...]:
    """``[[deviations]]``: each {id, source, choice, reason}, all non-empty strings, ids unique."""
    raw = data.get("deviations")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        c.add("deviations", "must be an array of tables: [[deviations]]")
        return ()
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    for i, d in enumerate(raw):
        where = f"deviations[{i}]"
        if not isinstance(d, dict):
            c.add(where, "must be a table")
            continue
        entry: dict[str, str] = {}
        for key in ("id", "source", "choice", "reason"):
            value = d.get(key)
            if not isinstance(value, str) or not value.strip():
                c.add(f"{where}.{key}", f"must be a non-empty string, got {value!r}")
                continue
            entry[key] = value
        if entry.get("id") in seen:
            c.add(f"{where}.id", f"duplicate deviation id {entry['id']!r}")
        seen.add(entry.get("id", ""))
        if len(entry) == 4:
            out.append(entry)
    return tuple(out)
