"""``lmm``: the contrast a − b of the locked linear mixed model (``docs/analysis.md`` §3-4)."""

from __future__ import annotations

from typing import Any

from analysis import _stats as stats
from analysis.statistics._base import (
    Data,
    Posthoc,
    Statistic,
    contrast_of,
    decide_by_p,
    sides_of,
)
from analysis.statistics._format import fmt, p

MODEL_CAUTION = (
    "the mixed model is singular or did not converge; contrasts are reported but flagged "
    "(not for confirmatory inference)"
)
"""Recorded on ``model.lmm`` and on every ``lmm`` hypothesis when the fit is singular or did
not converge; the report shows it beside each verdict that depends on the model."""

SUBSET_MODEL_KEYS = (
    "n_obs",
    "n_groups",
    "group_variance",
    "residual_variance",
    "log_likelihood",
    "converged",
    "singular",
    "warnings",
)
"""What an lmm hypothesis on a stimulus subset records of its own model fit."""


def _subset_model(data: Data, h: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The mixed model refitted on the hypothesis's stimuli (every arm), and what it records."""
    plan = data.plan
    sub_plan = {
        **plan,
        "analysis": {k: v for k, v in (plan.get("analysis") or {}).items() if k != "model_arms"},
    }
    sub_result, model = data.refit(sub_plan)
    if model is None:
        raise stats.StatsError(
            f"the mixed model on stimuli {h['stimuli']} could not be fitted: {sub_result.error}"
        )
    subset = {k: (sub_result.values or {}).get(k) for k in SUBSET_MODEL_KEYS}
    subset["stimuli"] = list(h["stimuli"])
    return model, subset


def compute(data: Data, h: dict[str, Any]) -> dict[str, Any]:
    """The Wald contrast of the study's model (or of the stimulus subset's own fit)."""
    a, b = contrast_of(h)
    sides = sides_of(h)
    model = data.fit
    subset: dict[str, Any] | None = None
    if h.get("stimuli"):
        model, subset = _subset_model(data, h)
    if model is None:
        raise stats.StatsError("the mixed model could not be fitted (model.lmm)")
    c = stats.contrast(model, a, b, sides)  # type: ignore[arg-type]
    values: dict[str, Any] = {**c.as_dict(), "singular_fit": model.singular}
    if sides == "one-sided":  # as the paper reports H1: +48.5 pp, 95% CI +43.2 to +53.7
        both = stats.contrast(model, a, b, "two-sided")
        values["ci_two_sided"] = [both.lower, both.upper]
    if subset is not None:
        values["subset_model"] = subset
    if model.singular or not model.converged:
        values["caution"] = MODEL_CAUTION
    values["p_raw"] = c.p
    return values


def decide(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The p rule: p < alpha (one-sided: the estimate in the predicted direction too)."""
    return decide_by_p(h, v, directional=True)


def posthoc_detail(v: dict[str, Any]) -> str:
    """The report's test cell of a post-hoc mixed model: z and p."""
    c = v.get("contrast") or {}
    return f"z {fmt(c.get('z'))}, p {p(c.get('p'))}"


def posthoc_echo(v: dict[str, Any]) -> str:
    """What ``ledger posthoc`` prints of a recorded post-hoc mixed model."""
    c = v["contrast"]
    return f"z = {c['z']:.2f}, two-sided p = {c['p']:.3g}; ICC {v['icc']:.3f}"


STATISTIC = Statistic(
    key="lmm",
    order=0,
    compute=compute,
    schema=("estimate", "lower", "upper", "p_raw", "singular_fit"),
    decide=decide,
    in_pp=True,
    posthoc=Posthoc(title="linear mixed model", detail=posthoc_detail, echo=posthoc_echo),
    mixed_model=True,
    plannable=True,
)
