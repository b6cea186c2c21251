"""The recorded plan against the study: its stimuli and the check ``ledger lock`` runs.

Apart from :mod:`runner._planspec` (which :mod:`runner.spec` imports to read ``[plan]``)
because these read the study's truth tables (:mod:`runner._truth`, which imports the spec).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner._planspec import PLAN_FILE, PLAN_VERSION, lock_warnings, plan_inputs

__all__ = ["PlanCheck", "check_recorded_plan", "plan_stimuli"]


def plan_stimuli(study: Any) -> dict[str, dict[str, Any]]:
    """Each stimulus's scored item count and whether it is a specificity control.

    ``tumbling-e-json``: a chart's glyph count, or 1 and ``control`` for the control chart
    (``not-a-tumbling-e-chart``); every other parser: 1 item per stimulus or item.
    """
    from runner._stimuli import NOT_A_TUMBLING_E_CHART
    from runner._truth import study_truth

    out = {}
    for sid, truth in study_truth(study).items():
        if isinstance(truth, str):
            control = study.parser == "tumbling-e-json" and truth == NOT_A_TUMBLING_E_CHART
            out[str(sid)] = {"items": 1, "control": control}
        else:
            out[str(sid)] = {"items": len(truth), "control": False}
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class PlanCheck:
    """What the lock makes of ``plan/plan.json``: problems stop it, warnings do not."""

    problems: tuple[str, ...]
    warnings: tuple[str, ...]


def check_recorded_plan(study: Any, protocol: Mapping[str, Any], text: str | None) -> PlanCheck:
    """Check ``plan/plan.json`` (``text``, None when absent) against the study about to lock.

    A missing plan is a warning (the lock records no sample-size justification); a plan of
    another design or plan (``inputs_sha256``), of an unknown version, or without a ``[plan]``
    table is a problem; the plan's own warnings (:func:`lock_warnings`) are warnings.
    """
    import json

    spec = study.plan
    if text is None:
        if spec is None:
            return PlanCheck((), ())
        return PlanCheck(
            (),
            (
                f"study.toml declares [plan] but {PLAN_FILE} does not exist: the "
                "lock records no sample-size justification (run `ledger plan` "
                "first)",
            ),
        )
    if spec is None:
        return PlanCheck(
            (
                f"{PLAN_FILE}: study.toml has no [plan] table, so this plan cannot be "
                "checked against it (remove the file or restore the table)",
            ),
            (),
        )
    try:
        record = json.loads(text)
    except ValueError as exc:
        return PlanCheck((f"{PLAN_FILE}: not JSON ({exc})",), ())
    if not isinstance(record, dict) or record.get("version") != PLAN_VERSION:
        got = record.get("version") if isinstance(record, dict) else None
        return PlanCheck(
            (f"{PLAN_FILE}: version {got!r}, this tool writes and reads version {PLAN_VERSION}",),
            (),
        )
    want = plan_inputs(protocol, spec.record(), plan_stimuli(study))
    if record.get("inputs_sha256") != want:
        return PlanCheck(
            (
                f"{PLAN_FILE}: inputs_sha256 {record.get('inputs_sha256')} was "
                f"computed for another design or [plan] (this study's is {want}): "
                "run `ledger plan` again before locking",
            ),
            (),
        )
    warnings = list(lock_warnings(record))
    ran = int(record["settings"]["studies"])
    if ran < spec.studies:
        warnings.append(
            f"plan: {PLAN_FILE} simulated {ran} studies per scenario, fewer than "
            f"the {spec.studies} [plan] studies declares"
        )
    return PlanCheck((), tuple(warnings))
