"""``analysis.posthoc`` events (analysis.md §6): declared after the analysis, recomputed.

Part of the science checks (:mod:`verify._science`); imports nothing from ``ledger``,
``runner`` or ``analysis``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from verify import _restats as st
from verify import _statistics as registry
from verify._recompute.archive import _Archive, _Event, _sources
from verify._recompute.compare import _first_difference, _fmt
from verify._recompute.dataset import _Dataset
from verify._recompute.model import _model
from verify._recompute.results import REL_TOL, _guard, _Result

POSTHOC_KIND = "analysis.posthoc"


POSTHOC_TESTS = registry.POSTHOC_TESTS
"""analysis.md §6: the kinds of post-hoc analysis (the body's ``test``)."""


def _posthoc_values(
    ds: _Dataset, plan: dict[str, Any], a: str, b: str, test: str
) -> dict[str, Any]:
    """analysis.md §6: a post-hoc t-test or bootstrap of a − b, with its ``contrast`` summary."""
    kind = registry.get(test)
    if kind is None or kind.posthoc is None:
        raise st.StatError(f"no post-hoc analysis of test {test!r} on a contrast")
    return kind.posthoc(ds, plan, a, b)


POSTHOC_KEYS = frozenset(
    {
        "id",
        "title",
        "label",
        "hypothesis",
        "test",
        "status",
        "values",
        "verdict",
        "decided_by",
        "error",
        "declared",
        "inputs",
    }
)


def _labelling_problem(body: Any, event: _Event, inputs: dict[str, Any], last: int) -> str | None:
    """The members, the post-hoc label, the place after the analysis and the inputs."""
    if not isinstance(body, dict) or set(body) != POSTHOC_KEYS:
        return "has not the members of a post-hoc result"
    declared = body.get("declared")
    if not isinstance(declared, dict):
        return "has no declaration"
    if (
        body.get("label") != "post hoc"
        or body.get("hypothesis") is not None
        or body.get("verdict") is not None
        or body.get("decided_by") is not None
    ):
        return "is not labelled post hoc with no hypothesis and no verdict"
    if event.seq < last or declared.get("after_seq") != last:
        return (
            f"must follow the registered analysis (last analysis.result at seq "
            f"{last}); declared after_seq {_fmt(declared.get('after_seq'))}"
        )
    if body.get("inputs") != inputs:
        return str(_first_difference(body.get("inputs"), inputs, "inputs", 0.0))
    return None


def _declaration_valid(declared: dict[str, Any], ds: _Dataset, fits_model: bool) -> bool:
    """A contrast of two, a model of the study, and the random intercept and arms of an lmm."""
    contrast, arms = declared.get("contrast"), declared.get("arms")
    group, model = declared.get("random_intercept"), declared.get("model")
    if not isinstance(contrast, list) or len(contrast) != 2:
        return False
    if not (model is None or model in ds.models):
        return False
    if fits_model:
        return group in ("stimulus", "source") and (arms is None or isinstance(arms, list))
    return group is None and arms is None


def _id_problem(archive: _Archive, body: dict[str, Any]) -> str | None:
    name = str(body.get("id")).removeprefix("posthoc.")
    if body.get("id") != f"posthoc.{name}" or not name:
        return "has an id that is not posthoc.<name>"
    if [e.body.get("id") for e in archive.of(POSTHOC_KIND)].count(body.get("id")) != 1:
        return "repeats the id of another post-hoc analysis"
    return None


def _compared(declared: dict[str, Any], plan: dict[str, Any], fits_model: bool) -> list[str]:
    """The arms a post-hoc analysis compares: its contrast's, or its model's."""
    if not fits_model:
        return [str(x) for x in declared["contrast"]]
    arms = declared.get("arms")
    return [str(x) for x in arms] if isinstance(arms, list) else sorted(plan.get("arms") or {})


def _at_variant(
    ds: _Dataset, declared: dict[str, Any], compared: list[str]
) -> tuple[_Dataset, str | None]:
    """analysis.md §6: the dataset at the declared variant, or why the arms cannot be compared."""
    variant = declared.get("variant")  # absent (older events) means null
    ran = {arm: {str(t["variant"]) for t in ds.trials if t["arm"] == arm} for arm in compared}
    if variant is not None:
        if (
            not isinstance(variant, str)
            or not ds.variants
            or not all(variant in v for v in ran.values())
        ):
            return ds, f"declares variant {_fmt(variant)}, which not every arm compared ran"
        return ds.for_variant(variant), None
    if len({frozenset(v) for v in ran.values() if v}) > 1:
        return ds, (
            "compares arms that ran different variants ("
            + "; ".join(f"{arm}: {', '.join(sorted(v))}" for arm, v in ran.items() if v)
            + ") without choosing one"
        )
    return ds, None


def _model_values(
    archive: _Archive, body: dict[str, Any], ds: _Dataset, plan: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """analysis.md §6, ``lmm``: its own mixed model (checked by the own REML) and contrast."""
    declared = body["declared"]
    group, arms, contrast = declared["random_intercept"], declared.get("arms"), declared["contrast"]
    sub = replace(ds, sources=_sources(archive)) if group == "source" else ds
    sub_plan = {
        **plan,
        "analysis": {**(plan.get("analysis") or {}), "random_intercept": group, "model_arms": arms},
    }
    recorded = body.get("values") if isinstance(body.get("values"), dict) else None
    fitted, fit = _model(sub, sub_plan, recorded=recorded)
    status, values = fitted.status, dict(fitted.values)
    if fit is not None:
        try:
            values["contrast"] = st.contrast(fit, str(contrast[0]), str(contrast[1]), "two-sided")
        except st.StatError:
            status = "failed"
    return status, values


def _contrast_values(
    body: dict[str, Any], ds: _Dataset, plan: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """analysis.md §6, a t-test or the bootstrap of the declared a − b."""
    contrast, test = body["declared"]["contrast"], str(body.get("test"))
    a, b = str(contrast[0]), str(contrast[1])
    recomputed = _guard(_Result("posthoc"), lambda: _posthoc_values(ds, plan, a, b, test))
    return recomputed.status, recomputed.values


def _posthoc_problem(
    archive: _Archive,
    event: _Event,
    ds: _Dataset,
    plan: dict[str, Any],
    inputs: dict[str, Any],
    last_result: int,
) -> str | None:
    """analysis.md §6: what is wrong with one analysis.posthoc event, or None."""
    body = archive.at(event).body
    labelling = _labelling_problem(body, event, inputs, last_result)
    if labelling is not None:
        return labelling
    declared, test = body["declared"], body.get("test")
    kind = registry.get(test)
    if kind is None or test not in POSTHOC_TESTS:
        return f"has test {_fmt(test)}, not one of {', '.join(POSTHOC_TESTS)}"
    if not _declaration_valid(declared, ds, kind.posthoc_fits_model):
        return "declares no valid contrast, random intercept, arms or model for its test"
    named = _id_problem(archive, body)
    if named is not None:
        return named
    if declared.get("model") is not None:
        ds = ds.for_model(str(declared["model"]))
    compared = _compared(declared, plan, kind.posthoc_fits_model)
    ds, variant_problem = _at_variant(ds, declared, compared)
    if variant_problem is not None:
        return variant_problem
    if kind.posthoc_fits_model:
        status, values = _model_values(archive, body, ds, plan)
    else:
        status, values = _contrast_values(body, ds, plan)
    if isinstance(values.get("_reml_problem"), str):
        return f"values: {values['_reml_problem']} (the verifier's own REML check, numpy only)"
    if body.get("status") != status:
        return f"status: recorded {_fmt(body.get('status'))}, recomputed {_fmt(status)}"
    if status != "ok":
        return None
    return _first_difference(body.get("values"), values, "values", REL_TOL)
