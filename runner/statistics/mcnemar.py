"""``mcnemar``: McNemar's test of paired right/wrong outcomes (``docs/mcq-statistics.md``).

Between two arms (``contrast``, optionally on one ``variant``), or between two variants of one
arm (``arm`` and ``variants``, both named).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.statistics import _keys
from runner.statistics._base import Add, Registered, StatisticSpec


def _read(add: Add, h: Mapping[str, Any], where: str, arms: Mapping[str, Any]) -> dict[str, Any]:
    out = _keys.arm(add, h, where, arms, "mcnemar", required=False)
    out |= _keys.variant_pair(add, h, where, "mcnemar", required=False)
    if ("arm" in h) != ("variants" in h):
        add(
            f"{where}.{'variants' if 'arm' in h else 'arm'}",
            "mcnemar between two variants of one arm names both 'arm' and 'variants'",
        )
    if "arm" in h and "variant" in h:
        add(f"{where}.variant", "mcnemar between two variants takes 'variants', not 'variant'")
    return out | _keys.variant(add, h, where)


def _names_variants(h: Registered) -> bool:
    """Between variants of one arm, or on one variant: the arms must run them."""
    return h.arm is not None or h.variant is not None


SPEC = StatisticSpec(
    "mcnemar",
    4,
    subject="arm-or-contrast",
    takes=("arm", "variants", "variant"),
    read=_read,
    checks_variants=_names_variants,
)
