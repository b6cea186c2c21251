"""``[reviews.<NAME>]``: declared review samples of three kinds (``docs/study-spec.md``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeGuard

from runner._human_review import REFERENCE_FIELDS, supplied_sets
from runner._schema import CONTRAST_REVIEW_KEYS, KeyPath
from runner.spec._arms import arm_runs
from runner.spec._collector import Collector
from runner.spec._fields import ID_RE, int_seed
from runner.spec._response import LETTER_PARSERS
from runner.spec._state import Loading
from runner.spec._types import ModelSpec, Review
from runner.steps._core import StepSpec


def _review_kind(c: Collector, name: str, table: dict[str, Any]) -> str | None:
    """The kind of ``[reviews.<name>]`` from its keys, or ``None`` (reported) when unclear.

    ``step`` makes a judge-label sample; ``failed``, ``succeeded`` or ``model`` a contrast
    sample. Each key of the other kind in a table is refused at its line.
    """
    where, path = f"reviews.{name}", ("reviews", name)
    if "reference" in table:
        for key in (k for k in (*CONTRAST_REVIEW_KEYS, "step", "codes") if k in table):
            c.add(
                f"{where}.{key}",
                "a key of another kind of sample, but this table names a "
                "reference, so it is a reference-set sample (keys: reference, n, seed, "
                "description); a review sample is one kind",
                (*path, key),
            )
        return "reference-set"
    if "step" in table:
        if "codes" in table:
            c.add(
                f"{where}.codes",
                "codes are declared for a contrast sample (failed, "
                "succeeded); a judge-label sample's values are the step's labels",
                (*path, "codes"),
            )
        for key in (k for k in CONTRAST_REVIEW_KEYS if k in table):
            c.add(
                f"{where}.{key}",
                "a contrast sample's key (with failed and succeeded), but "
                "this table names a step, so it is a judge-label sample (keys: step, n, "
                "seed, description); a review sample is one kind",
                (*path, key),
            )
        return "judge-label"
    if any(k in table for k in CONTRAST_REVIEW_KEYS):
        return "contrast"
    c.add(
        where,
        'say which sample it is: step = "<judge step>" (judge decisions, '
        'docs/scoring.md §11), reference = "supplied" or "<item step>" (reference '
        "sets) or failed = { arm = ... } and succeeded = { arm = ... } (items where one "
        "condition failed and another succeeded)",
        path,
    )
    return None


def _reference_review(
    c: Collector, name: str, table: dict[str, Any], steps: dict[str, StepSpec], items: Any
) -> str | None:
    """The reference of a reference-set sample (``docs/scoring.md`` §11.1), checked.

    ``"supplied"``: every item carries the three ``metadata`` arrays ``reference_*`` (the
    first item without them is named). Otherwise an item step with the ``json`` parser whose
    decision for an item holds the three sets (``docs/prompts.md`` §8).
    """
    where, path = f"reviews.{name}.reference", ("reviews", name, "reference")
    ref = table.get("reference")
    if items is None:
        c.add(
            where,
            "reference sets belong to items: the study needs an item file ([stimuli] items)",
            path,
        )
        return None
    if ref == "supplied":
        for item in items:
            if supplied_sets(item.metadata) is None:
                c.add(
                    where,
                    f"item {item.id!r} (line {item.line}) lacks its reference sets: "
                    f"metadata arrays of strings {', '.join(REFERENCE_FIELDS.values())}",
                    path,
                )
                return None
        return "supplied"
    spec = steps.get(ref) if isinstance(ref, str) else None
    if spec is None or spec.on != "item" or spec.parser != "json":
        known = ", ".join(n for n, s in steps.items() if s.on == "item" and s.parser == "json")
        c.add(
            where,
            f'must be "supplied" (the items\' metadata arrays '
            f"{', '.join(REFERENCE_FIELDS.values())}) or an item step with the json parser "
            f"that decides the sets, got {ref!r} (such steps: {known or 'none declared'})",
            path,
        )
        return None
    return str(ref)


def _codes(c: Collector, name: str, table: dict[str, Any]) -> tuple[str, ...] | None:
    """A contrast sample's declared codes: distinct names (letters, digits, '.', '_', '-')."""
    codes = table.get("codes")
    if codes is None:
        return None
    if (
        not isinstance(codes, list)
        or not codes
        or not all(isinstance(x, str) and ID_RE.match(x) for x in codes)
        or len(set(codes)) != len(codes)
    ):
        c.add(
            f"reviews.{name}.codes",
            "must be a non-empty list of distinct code names (letters, digits, '.', '_' or '-')",
            ("reviews", name, "codes"),
        )
        return None
    return tuple(codes)


def _judge_review(
    c: Collector, name: str, table: dict[str, Any], steps: dict[str, StepSpec]
) -> str | None:
    """The judge step of a judge-label review sample (``docs/scoring.md`` §11), checked."""
    where, path = f"reviews.{name}", ("reviews", name)
    step = table.get("step")
    spec = steps.get(step) if isinstance(step, str) else None
    if spec is None or spec.on != "trial" or spec.parser != "label":
        known = ", ".join(n for n, s in steps.items() if s.on == "trial" and s.parser == "label")
        c.add(
            f"{where}.step",
            f"must name a trial step with the label parser, got {step!r} "
            f"(such steps: {known or 'none declared'})",
            (*path, "step"),
        )
        return None
    return str(step)


def _contrast_fit(st: Loading, where: str, path: KeyPath) -> None:
    """A contrast sample pairs trials of an item study scored on option letters."""
    if not st.item_study:
        st.c.add(where, "a contrast review sample needs an item file ([stimuli] items)", path)
    elif st.parser not in LETTER_PARSERS:
        st.c.add(
            where,
            f"a review sample pairs trials scored right or wrong on option letters: "
            f"it needs parser 'multiple-choice' or 'cloze', not {st.parser!r}",
            path,
        )


def _review_model(
    c: Collector,
    table: dict[str, Any],
    where: str,
    path: KeyPath,
    models: dict[str, ModelSpec] | None,
) -> str | None:
    """The model whose trials a contrast sample draws: named when the study has several."""
    model = table.get("model")
    spot = (*path, "model")
    if model is not None:
        if models is None:
            c.add(f"{where}.model", "the study has one [model]; name no model", spot)
            return None
        if not isinstance(model, str) or model not in models:
            c.add(f"{where}.model", f"unknown model {model!r} (models: {', '.join(models)})", spot)
            return None
        return model
    if models is not None and len(models) > 1:
        c.add(
            f"{where}.model",
            f"missing: the study has {len(models)} models; a review "
            "sample names the one whose trials it draws",
            spot,
        )
        return None
    return next(iter(models)) if models is not None else None


def _condition(
    st: Loading, where: str, spot: KeyPath, cond: Any, model: str | None
) -> tuple[str, str] | None:
    """One side's ``{ arm, variant }``: an arm that runs the variant (and the model)."""
    c, arms = st.c, st.arms
    if not isinstance(cond, dict):
        c.add(where, f"must be a table {{ arm = ..., variant = ... }}, got {cond!r}", spot)
        return None
    arm_id = cond.get("arm")
    variant = cond.get("variant", "original")
    if not isinstance(arm_id, str) or arm_id not in arms:
        c.add(f"{where}.arm", f"unknown arm {arm_id!r} (arms: {', '.join(arms)})", (*spot, "arm"))
        return None
    arm = arms[arm_id]
    if not isinstance(variant, str) or not arm_runs(st.variants, arm, variant):
        known = ", ".join([v.name for v in st.variants] if st.variants else ["original"])
        c.add(
            f"{where}.variant",
            f"arm {arm_id!r} does not run variant "
            f"{variant!r} (variants: {known}; the arm's variants: "
            f"{', '.join(arm.variants) if arm.variants else 'all'})",
            (*spot, "variant" if "variant" in cond else "arm"),
        )
        return None
    if model is not None and arm.models is not None and model not in arm.models:
        c.add(f"{where}.arm", f"arm {arm_id!r} does not run model {model!r}", (*spot, "arm"))
        return None
    return (arm_id, variant)


def _contrast_review(
    st: Loading, name: str, table: dict[str, Any]
) -> tuple[dict[str, tuple[str, str]], str | None]:
    """The conditions and model of a contrast review sample, checked against the design.

    Returns the ``failed``/``succeeded`` conditions that check out and the model whose
    trials are drawn (``docs/mcq-statistics.md`` §9).
    """
    where, path = f"reviews.{name}", ("reviews", name)
    _contrast_fit(st, where, path)
    model = _review_model(st.c, table, where, path, st.models)
    sides: dict[str, tuple[str, str]] = {}
    for side in ("failed", "succeeded"):
        spot = (*path, side)
        if side not in table:
            st.c.add(f"{where}.{side}", 'missing (e.g. { arm = "A", variant = "original" })', spot)
            continue
        cond = _condition(st, f"{where}.{side}", spot, table[side], model)
        if cond is not None:
            sides[side] = cond
    if len(sides) == 2 and sides["failed"] == sides["succeeded"]:
        st.c.add(
            f"{where}.succeeded", "names the same arm and variant as failed", (*path, "succeeded")
        )
    return sides, model


def _judge_fields(st: Loading, name: str, table: dict[str, Any]) -> dict[str, Any] | None:
    step = _judge_review(st.c, name, table, st.steps)
    return None if step is None else {"step": step}


def _contrast_fields(st: Loading, name: str, table: dict[str, Any]) -> dict[str, Any] | None:
    sides, model = _contrast_review(st, name, table)
    codes = _codes(st.c, name, table)
    if len(sides) != 2:
        return None
    return {
        "failed": sides["failed"],
        "succeeded": sides["succeeded"],
        "model": model,
        "codes": codes,
    }


def _reference_fields(st: Loading, name: str, table: dict[str, Any]) -> dict[str, Any] | None:
    reference = _reference_review(st.c, name, table, st.steps, st.items)
    return None if reference is None else {"reference": reference}


FIELDS_BY_KIND: Final[
    dict[str, Callable[[Loading, str, dict[str, Any]], dict[str, Any] | None]]
] = {
    "judge-label": _judge_fields,
    "contrast": _contrast_fields,
    "reference-set": _reference_fields,
}
"""Each kind of :data:`REVIEW_KINDS`: the :class:`Review` fields of its own (None if bad)."""


def _positive(n: Any) -> TypeGuard[int]:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1


def _review(st: Loading, name: str, table: dict[str, Any]) -> Review | None:
    """One ``[reviews.<name>]`` table, checked (None when it has a problem)."""
    c = st.c
    where = f"reviews.{name}"
    path: KeyPath = ("reviews", name)
    if not ID_RE.match(name):
        c.add(where, "review names are letters, digits, '.', '_' or '-' (at most 64)", path)
    kind = _review_kind(c, name, table)
    n = table.get("n")
    if not _positive(n):
        what = "decisions per stratum" if kind == "judge-label" else "the cases to draw"
        c.add(f"{where}.n", f"must be an integer >= 1 ({what}), got {n!r}", (*path, "n"))
    seed = int_seed(c, table, "seed", where)
    description = table.get("description", "")
    if not isinstance(description, str):
        c.add(
            f"{where}.description", f"must be a string, got {description!r}", (*path, "description")
        )
        description = ""
    fields = FIELDS_BY_KIND[kind](st, name, table) if kind is not None else None
    if fields is None or not _positive(n) or not seed:
        return None
    return Review(name, str(kind), n, seed, description, **fields)


def parse_reviews(st: Loading) -> None:
    """``[reviews.<NAME>]`` of any kind (:data:`REVIEW_KINDS`), each checked against the design."""
    raw = st.data.get("reviews")
    if raw is None:
        return
    if not isinstance(raw, dict) or not raw or not all(isinstance(v, dict) for v in raw.values()):
        st.c.add("reviews", "declare each review sample as a [reviews.<NAME>] table")
        return
    reviews = (_review(st, name, table) for name, table in raw.items())
    st.reviews = tuple(r for r in reviews if r is not None)
