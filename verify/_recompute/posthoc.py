"""``analysis.posthoc`` events (analysis.md §6): declared after the analysis, recomputed.

Part of the science checks (:mod:`verify._science`); imports nothing from ``ledger``,
``runner`` or ``analysis``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from verify import _restats as st
from verify._recompute.archive import _Archive, _Event, _sources
from verify._recompute.compare import _first_difference, _fmt
from verify._recompute.dataset import _Dataset
from verify._recompute.model import _model
from verify._recompute.pairs import _pair_accuracies, _pairs_by_trial
from verify._recompute.results import REL_TOL, _guard, _Result

POSTHOC_KIND = "analysis.posthoc"


POSTHOC_TESTS = ("lmm", "paired-t", "independent-t", "bootstrap")
"""analysis.md §6: the kinds of post-hoc analysis (the body's ``test``)."""


def _posthoc_values(
    ds: _Dataset, plan: dict[str, Any], a: str, b: str, test: str
) -> dict[str, Any]:
    """analysis.md §6: a post-hoc t-test or bootstrap of a − b, with its ``contrast`` summary."""
    design = plan["design"]
    summary: dict[str, Any] = {"a": a, "b": b, "sides": "two-sided"}
    if test == "bootstrap":
        values = st.bootstrap_diff(
            *_pair_accuracies(ds, a, b),
            int(design["bootstrap_iterations"]),
            design["bootstrap_seed"],
        )
        summary.update(
            estimate=values["estimate"],
            lower=values["lower"],
            upper=values["upper"],
            p=None,
            conf=values["conf"],
        )
        return {**values, "contrast": summary}
    dropped: list[dict[str, Any]] = []
    if test == "paired-t":
        xs, ys, dropped = _pairs_by_trial(ds, a, b)
        res = st.paired_t(xs, ys)
    else:
        res = st.independent_t(*_pair_accuracies(ds, a, b))
    values = {**res, "estimate": res["difference"]}
    if test == "paired-t":
        values |= {
            "pairing": ["stimulus", "rep"],
            "n_dropped": len(dropped),
            "dropped_pairs": dropped,
        }
    summary.update(
        estimate=res["difference"],
        lower=res["ci_lower"],
        upper=res["ci_upper"],
        p=res["p"],
        t=res["t"],
        df=res["df"],
        conf=0.95,
    )
    return {**values, "contrast": summary}


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
    if event.seq < last_result or declared.get("after_seq") != last_result:
        return (
            f"must follow the registered analysis (last analysis.result at seq "
            f"{last_result}); declared after_seq {_fmt(declared.get('after_seq'))}"
        )
    if body.get("inputs") != inputs:
        return str(_first_difference(body.get("inputs"), inputs, "inputs", 0.0))
    contrast, arms = declared.get("contrast"), declared.get("arms")
    group, test, model = declared.get("random_intercept"), body.get("test"), declared.get("model")
    if test not in POSTHOC_TESTS:
        return f"has test {_fmt(test)}, not one of {', '.join(POSTHOC_TESTS)}"
    if (
        not isinstance(contrast, list)
        or len(contrast) != 2
        or not (model is None or model in ds.models)
        or (
            test == "lmm"
            and (
                group not in ("stimulus", "source") or not (arms is None or isinstance(arms, list))
            )
        )
        or (test != "lmm" and (group is not None or arms is not None))
    ):
        return "declares no valid contrast, random intercept, arms or model for its test"
    name = str(body.get("id")).removeprefix("posthoc.")
    if body.get("id") != f"posthoc.{name}" or not name:
        return "has an id that is not posthoc.<name>"
    if [e.body.get("id") for e in archive.of(POSTHOC_KIND)].count(body.get("id")) != 1:
        return "repeats the id of another post-hoc analysis"
    if model is not None:
        ds = ds.for_model(str(model))
    variant = declared.get("variant")  # analysis.md §6: absent (older events) means null
    compared = (
        [str(x) for x in contrast]
        if test != "lmm"
        else ([str(x) for x in arms] if isinstance(arms, list) else sorted(plan.get("arms") or {}))
    )
    ran = {arm: {str(t["variant"]) for t in ds.trials if t["arm"] == arm} for arm in compared}
    if variant is not None:
        if (
            not isinstance(variant, str)
            or not ds.variants
            or not all(variant in v for v in ran.values())
        ):
            return f"declares variant {_fmt(variant)}, which not every arm compared ran"
        ds = ds.for_variant(variant)
    elif len({frozenset(v) for v in ran.values() if v}) > 1:
        return (
            "compares arms that ran different variants ("
            + "; ".join(f"{arm}: {', '.join(sorted(v))}" for arm, v in ran.items() if v)
            + ") without choosing one"
        )
    if test != "lmm":
        a, b = str(contrast[0]), str(contrast[1])
        recomputed = _guard(_Result("posthoc"), lambda: _posthoc_values(ds, plan, a, b, test))
        if body.get("status") != recomputed.status:
            return (
                f"status: recorded {_fmt(body.get('status'))}, recomputed {_fmt(recomputed.status)}"
            )
        if recomputed.status != "ok":
            return None
        return _first_difference(body.get("values"), recomputed.values, "values", REL_TOL)
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
    if isinstance(values.get("_reml_problem"), str):
        return f"values: {values['_reml_problem']} (the verifier's own REML check, numpy only)"
    if body.get("status") != status:
        return f"status: recorded {_fmt(body.get('status'))}, recomputed {_fmt(status)}"
    if status != "ok":
        return None
    return _first_difference(body.get("values"), values, "values", REL_TOL)
