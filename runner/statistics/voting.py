"""``voting``: one arm's majority answer over option orders against its single answers.

``docs/mcq-statistics.md``: ``variants`` names at least two orders voted over.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.statistics import _keys
from runner.statistics._base import Add, StatisticSpec, always


def _read(add: Add, h: Mapping[str, Any], where: str, arms: Mapping[str, Any]) -> dict[str, Any]:
    out = _keys.arm(add, h, where, arms, "voting", required=True)
    names = _keys.variant_names(add, h, where, "voting", required=True)
    if names is not None and len(names) < 2:
        add(f"{where}.variants", f"voting needs at least two orders, got {list(names)!r}")
    elif names is not None:
        out["variants"] = names
    return out | _keys.incomplete(add, h, where)


SPEC = StatisticSpec(
    "voting",
    9,
    subject="arm",
    takes=("arm", "variants", "incomplete", "sides", "min_difference_pp"),
    own_keys=True,
    letters=True,
    read=_read,
    checks_variants=always,
)
