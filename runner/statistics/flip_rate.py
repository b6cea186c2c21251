"""``flip-rate``: how often one arm's answer flips between two variants (mcq-statistics.md §3).

Decided by an item-cluster bootstrap interval against exactly one of ``min_pp`` / ``max_pp``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from runner.statistics import _keys
from runner.statistics._base import Add, StatisticSpec, always

BASES: Final = ("answer", "letter")
"""Flip-rate bases (``docs/mcq-statistics.md`` §3)."""


def _read(add: Add, h: Mapping[str, Any], where: str, arms: Mapping[str, Any]) -> dict[str, Any]:
    out = _keys.arm(add, h, where, arms, "flip-rate", required=True)
    out |= _keys.variant_pair(add, h, where, "flip-rate", required=True)
    basis = h.get("basis", "answer")
    if basis not in BASES:
        add(f"{where}.basis", f"must be {' or '.join(map(repr, BASES))}, got {basis!r}")
    else:
        out["basis"] = basis
    bounds = _keys.pp_bounds(add, h, where)
    if ("min_pp" in h) == ("max_pp" in h):
        add(
            f"{where}.min_pp",
            "a flip-rate rule names exactly one of min_pp (the rate's "
            "lower bound must exceed it) and max_pp (its upper bound must stay below it)",
        )
    return out | bounds


SPEC = StatisticSpec(
    "flip-rate",
    7,
    subject="arm",
    takes=("arm", "variants", "basis", "min_pp", "max_pp"),
    own_keys=True,
    letters=True,
    read=_read,
    checks_variants=always,
)
