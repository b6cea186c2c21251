"""``qr-bootstrap``: the (question, run) bootstrap as a registered test (statistics.md)."""

from __future__ import annotations

from typing import Any

from verify import _qrboot
from verify._statistics._base import Case, Statistic, signed_effect


def values(case: Case) -> dict[str, Any]:
    """Paired observations keyed (item, model, variant, rep) and the seed's bootstrap."""
    return _qrboot.values_of(case.ds, case.plan, case.h)


def arm_text(h: dict[str, Any]) -> str:
    """One arm, no variants."""
    return f"arm {h['arm']}"


def component_effect(h: dict[str, Any], result: dict[str, Any]) -> str | None:
    """Only the ``difference`` statistic contrasts two arms."""
    return signed_effect(h, result) if h.get("statistic") == "difference" else None


STATISTIC = Statistic(
    name="qr-bootstrap",
    order=12,
    values=values,
    decide=_qrboot.decide,
    estimate_text=_qrboot.estimate_text,
    component_effect=component_effect,
    arm_text=arm_text,
)
