"""Readers of the kind-only keys the item-file statistics share (``docs/study-spec.md``).

Each returns the :class:`runner.spec.Hypothesis` fields it sets and sends every problem to
``add``; a kind's ``read`` calls them in the order its messages come.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from runner.statistics._base import Add, name_list

__all__ = [
    "INCOMPLETE",
    "arm",
    "incomplete",
    "pp_bounds",
    "variant",
    "variant_names",
    "variant_pair",
]

INCOMPLETE: Final = ("exclude", "fail")
"""What voting and self-consistency do with an incomplete group (a trial given up)."""


def arm(
    add: Add,
    h: Mapping[str, Any],
    where: str,
    arms: Mapping[str, Any],
    test: str,
    *,
    required: bool,
) -> dict[str, Any]:
    """``arm``: an arm of the study; ``required`` for a test of one arm."""
    if "arm" in h:
        value = h["arm"]
        if not isinstance(value, str) or value not in arms:
            add(f"{where}.arm", f"unknown arm {value!r}")
            return {}
        return {"arm": value}
    if required:
        add(f"{where}.arm", f"missing (a {test} test names the arm it tests)")
    return {}


def variant_names(
    add: Add, h: Mapping[str, Any], where: str, test: str, *, required: bool
) -> tuple[str, ...] | None:
    """``variants`` as a list of names (None when absent or bad, after a problem if needed)."""
    if "variants" not in h and not required:
        return None
    names = name_list(add, h, "variants", where)
    if names is None and "variants" not in h:
        add(f"{where}.variants", f"missing (a {test} test names the variants it compares)")
    return names


def variant_pair(
    add: Add, h: Mapping[str, Any], where: str, test: str, *, required: bool
) -> dict[str, Any]:
    """``variants``: exactly the two variants a flip-rate or mcnemar test compares."""
    names = variant_names(add, h, where, test, required=required)
    if names is None:
        return {}
    if len(names) != 2:
        add(
            f"{where}.variants",
            f"a {test} test compares exactly two variants, got {list(names)!r}",
        )
        return {}
    return {"variants": names}


def variant(add: Add, h: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``variant``: the name of the variant tested (checked against the design later)."""
    if "variant" not in h:
        return {}
    value = h["variant"]
    if not isinstance(value, str) or not value:
        add(f"{where}.variant", f"must be a variant name, got {value!r}")
        return {}
    return {"variant": value}


def incomplete(add: Add, h: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``incomplete`` (default ``exclude``): what an incomplete group does (:data:`INCOMPLETE`)."""
    value = h.get("incomplete", "exclude")
    if value not in INCOMPLETE:
        add(
            f"{where}.incomplete",
            f"must be 'exclude' (a counted exclusion) or 'fail', got {value!r}",
        )
        return {}
    return {"incomplete": value}


def pp_bounds(add: Add, h: Mapping[str, Any], where: str) -> dict[str, float]:
    """``min_pp`` / ``max_pp`` as given: numbers of percentage points from 0 to 100."""
    bounds = {}
    for key in ("min_pp", "max_pp"):
        value = h.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 100:
            add(
                f"{where}.{key}",
                f"must be a number of percentage points from 0 to 100, got {value!r}",
            )
            continue
        bounds[key] = float(value)
    return bounds
