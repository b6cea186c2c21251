"""``gee``: a GEE logistic model's arm contrast on one variant (``docs/mcq-statistics.md`` §11)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from runner.statistics import _keys
from runner.statistics._base import Add, StatisticSpec, always

GEE_FALLBACKS: Final = ("none", "drop-factor")
"""A gee hypothesis's ``fallback`` (``docs/mcq-statistics.md`` §11): ``none`` (a fit the data
cannot make is not applicable, with the reason) or ``drop-factor`` (refit without the model or
variant factor at fault)."""


def _read(add: Add, h: Mapping[str, Any], where: str, arms: Mapping[str, Any]) -> dict[str, Any]:
    out = _keys.variant(add, h, where)
    if "fallback" not in h:
        return out
    fallback = h["fallback"]
    if fallback not in GEE_FALLBACKS:
        add(
            f"{where}.fallback",
            f"must be one of {', '.join(map(repr, GEE_FALLBACKS))}, got {fallback!r}",
        )
        return out
    return out | {"fallback": fallback}


SPEC = StatisticSpec(
    "gee",
    11,
    takes=("contrast", "variant", "sides", "correction", "fallback"),
    own_keys=True,
    letters=True,
    read=_read,
    checks_variants=always,
)
