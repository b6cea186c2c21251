"""``self-consistency``: one arm's majority over N samples per item against single answers.

``docs/mcq-statistics.md``: the arm must run at least ``samples`` replicates, at a sampling
temperature above 0 on every model it runs (a majority over greedy samples measures nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.statistics import _keys
from runner.statistics._base import Add, Design, Registered, StatisticSpec, always


def _read(add: Add, h: Mapping[str, Any], where: str, arms: Mapping[str, Any]) -> dict[str, Any]:
    out = _keys.arm(add, h, where, arms, "self-consistency", required=True)
    out |= _keys.variant(add, h, where)
    out |= _keys.incomplete(add, h, where)
    samples = h.get("samples")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 2:
        add(
            f"{where}.samples",
            f"must be an integer >= 2 (the samples a majority is taken over), got {samples!r}",
        )
        return out
    return out | {"samples": samples}


def _model_params(design: Design, arm: Any) -> list[tuple[str | None, Mapping[str, Any]]]:
    """(model name, its parameters) of each model the arm runs (name None for ``[model]``)."""
    if design.models is None:
        return [(None, design.model)]
    return [
        (name, dict(m.params))
        for name, m in design.models.items()
        if arm.models is None or name in arm.models
    ]


def _against_design(add: Add, where: str, h: Registered, design: Design) -> None:
    if h.arm is None or h.arm not in design.arms or h.samples is None:
        return
    arm = design.arms[h.arm]
    reps = arm.replicates or design.replicates
    if reps < h.samples:
        add(
            f"{where}.samples",
            f"arm {arm.id!r} runs {reps} replicates, fewer than the {h.samples} samples",
        )
    for label, params in _model_params(design, arm):
        temp = arm.sampling.get("temperature", params.get("temperature", 1.0))
        if isinstance(temp, int | float) and temp <= 0:
            on = f" on model {label!r}" if label else ""
            add(
                f"{where}.test",
                f"self-consistency {h.id!r}: arm {arm.id!r} samples "
                f"at temperature {temp}{on}; a majority over greedy samples measures "
                "nothing (set the arm's sampling temperature > 0)",
            )


SPEC = StatisticSpec(
    "self-consistency",
    10,
    subject="arm",
    takes=("arm", "variant", "samples", "incomplete", "sides", "min_difference_pp"),
    own_keys=True,
    letters=True,
    read=_read,
    checks_variants=always,
    variant_needed=True,
    against_design=_against_design,
)
