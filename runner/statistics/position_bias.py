"""``position-bias``: whether two arms favour option positions alike (mcq-statistics.md §4)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.statistics import _keys
from runner.statistics._base import Add, StatisticSpec, always


def _read(add: Add, h: Mapping[str, Any], where: str, arms: Mapping[str, Any]) -> dict[str, Any]:
    return _keys.variant(add, h, where)


SPEC = StatisticSpec(
    "position-bias",
    8,
    takes=("contrast", "variant", "sides", "min_difference_pp"),
    own_keys=True,
    letters=True,
    read=_read,
    checks_variants=always,
    variant_needed=True,
)
