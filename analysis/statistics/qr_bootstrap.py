"""``qr-bootstrap``: seed 001's bootstrap over (question, run) observations.

The computation, decision and estimate text are :mod:`analysis._qr_boot`'s
(``docs/statistics.md``, "(question, run) bootstrap as a registered test").
"""

from __future__ import annotations

from typing import Any

from analysis import _qr_boot as qr_boot
from analysis.statistics._base import Data, Statistic, difference_effect


def compute(data: Data, h: dict[str, Any]) -> dict[str, Any]:
    """The statistic of one arm or of a pair of arms, with its (question, run) interval."""
    return qr_boot.qr_values(data.ds, data.plan, h)


def component_effect(h: dict[str, Any], result: dict[str, Any]) -> str | None:
    """Only a difference between arms is evidence for a prompt-component unit."""
    return difference_effect(h, result) if h.get("statistic") == "difference" else None


STATISTIC = Statistic(
    key="qr-bootstrap",
    order=12,
    compute=compute,
    schema=("statistic", "outcome", "n", "estimate", "lower", "upper", "conf"),
    decide=qr_boot.decide,
    estimate_text=qr_boot.estimate_text,
    component_effect=component_effect,
    arm_compares_variants=False,
)
