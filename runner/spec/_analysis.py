"""``[analysis]``: the primary model and its options (``docs/analysis.md``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from runner.spec._collector import Collector
from runner.spec._fields import name_list, section_table
from runner.spec._state import Loading

RANDOM_INTERCEPTS: Final = ("stimulus", "source")


def parse_analysis(st: Loading) -> None:
    """``[analysis]``: ``model``, ``random_intercept``, ``model_arms``, ``covariates``, ..."""
    st.analysis = _analysis(st.c, st.data, st.arms)


def _analysis(c: Collector, data: dict[str, Any], arms: Iterable[str] = ()) -> dict[str, Any]:
    analysis = section_table(c, data, "analysis")
    analysis_out = {
        "model": analysis.get("model", "lmm"),
        "random_intercept": analysis.get("random_intercept", "stimulus"),
        "exclude_unparseable": analysis.get("exclude_unparseable", True),
    }
    if analysis_out["model"] != "lmm":
        c.add(
            "analysis.model",
            f"must be 'lmm' (the only primary model of v1), got {analysis_out['model']!r}",
        )
    group = analysis_out["random_intercept"]
    if group not in RANDOM_INTERCEPTS:
        extra = (
            " (a model without a random intercept is not available in v1)"
            if (group == "none")
            else ""
        )
        c.add("analysis.random_intercept", f"must be 'stimulus' or 'source', got {group!r}{extra}")
    if not isinstance(analysis_out["exclude_unparseable"], bool):
        c.add(
            "analysis.exclude_unparseable",
            f"must be true or false, got {analysis_out['exclude_unparseable']!r}",
        )
    model_arms = name_list(c, analysis, "model_arms", "analysis")
    if model_arms is not None:
        if len(model_arms) < 2:
            c.add("analysis.model_arms", "the model needs at least two arms")
        unknown = [a for a in model_arms if a not in arms]
        if unknown:
            c.add("analysis.model_arms", f"unknown arm {unknown[0]!r}")
        analysis_out["model_arms"] = list(model_arms)
    if "covariates" in analysis:  # docs/analysis.md §11 (checked against the step below)
        from runner.steps._core import covariates_table

        covariates = covariates_table(analysis["covariates"], c.add)
        if covariates is not None:
            analysis_out["covariates"] = covariates
    return analysis_out
