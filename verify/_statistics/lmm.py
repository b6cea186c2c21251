"""``lmm``: a contrast of the registered mixed model (analysis.md §3-4, statistics.md).

On a stimulus subset the hypothesis fits its own model (``subset_model``), checked like
``model.lmm`` to be a REML maximum of the verifier's own likelihood.
"""

from __future__ import annotations

from typing import Any

from verify import _restats as st
from verify._recompute.model import SUBSET_MODEL_KEYS, _model
from verify._statistics._base import Case, Statistic, directional_p_rule, z_posthoc_cells
from verify._statistics._cells import fmt


def _subset_fit(case: Case) -> tuple[dict[str, Any], dict[str, Any]]:
    """The hypothesis's own model on its stimuli and what it records of it."""
    plan = case.plan
    sub_plan = {
        **plan,
        "analysis": {k: v for k, v in (plan.get("analysis") or {}).items() if k != "model_arms"},
    }
    result, model = _model(
        case.ds, sub_plan, recorded=case.recorded_subset, path="values.subset_model"
    )
    if model is None:
        raise st.StatError("the subset's mixed model could not be fitted")
    sub = {k: result.values.get(k) for k in SUBSET_MODEL_KEYS}
    sub["stimuli"] = list(case.h["stimuli"])
    return model, sub


def values(case: Case) -> dict[str, Any]:
    """The contrast a − b of the registered model (or the subset's own)."""
    model = case.fit
    sub: dict[str, Any] | None = None
    if isinstance(case.h.get("stimuli"), list):
        model, sub = _subset_fit(case)
    if model is None:
        raise st.StatError("the mixed model could not be fitted")
    c = st.contrast(model, case.a, case.b, case.sides)
    out = {**c, "singular_fit": model["singular"], "p_raw": c["p"]}
    if case.sides == "one-sided":
        both = st.contrast(model, case.a, case.b, "two-sided")
        out["ci_two_sided"] = [both["lower"], both["upper"]]
    if sub is not None:
        out["subset_model"] = sub
        if model["_reml_problem"] is not None:
            out["_reml_problem"] = f"subset model: {model['_reml_problem']}"
    if model["singular"] or not model["converged"]:
        out["caution"] = None  # text not compared
    return out


def posthoc_cells(values: dict[str, Any], contrast: dict[str, Any]) -> tuple[str, str, str]:
    """The contrast's z-test, the model's ICC and whether its fit is singular."""
    test, _, _ = z_posthoc_cells(values, contrast)
    return test, fmt(values.get("icc")), "singular fit" if values.get("singular") else "–"


STATISTIC = Statistic(
    name="lmm",
    order=0,
    values=values,
    decide=directional_p_rule,
    mixed_model=True,
    posthoc_fits_model=True,
    posthoc_cells=posthoc_cells,
)
