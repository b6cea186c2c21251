"""``[reviews.<NAME>]``: declared review samples of three kinds (``docs/study-spec.md``)."""

from __future__ import annotations

from typing import Any

from runner._schema import CONTRAST_REVIEW_KEYS, KeyPath
from runner.human_review import REFERENCE_FIELDS, supplied_sets
from runner.spec._arms import arm_runs
from runner.spec._collector import Collector
from runner.spec._fields import ID_RE, int_seed
from runner.spec._response import LETTER_PARSERS
from runner.spec._state import Loading
from runner.spec._types import Arm, ModelSpec, Review
from runner.steps import StepSpec
from runner.variants import VariantSpec


def parse_reviews(st: Loading) -> None:
    """``[reviews.<NAME>]``: review samples checked against the design and the steps."""
    st.reviews = _reviews(
        st.c,
        st.data,
        st.arms,
        st.variants,
        st.models,
        st.parser,
        st.item_study,
        st.steps,
        st.items,
    )


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


def _contrast_review(
    c: Collector,
    name: str,
    table: dict[str, Any],
    arms: dict[str, Arm],
    variants: list[VariantSpec],
    models: dict[str, ModelSpec] | None,
    parser: str,
    item_study: bool,
) -> tuple[dict[str, tuple[str, str]], str | None]:
    """The conditions and model of a contrast review sample, checked against the design.

    Returns the ``failed``/``succeeded`` conditions that check out and the model whose
    trials are drawn (``docs/mcq-statistics.md`` §9).
    """
    where, path = f"reviews.{name}", ("reviews", name)
    if not item_study:
        c.add(where, "a contrast review sample needs an item file ([stimuli] items)", path)
    elif parser not in LETTER_PARSERS:
        c.add(
            where,
            f"a review sample pairs trials scored right or wrong on option letters: "
            f"it needs parser 'multiple-choice' or 'cloze', not {parser!r}",
            path,
        )
    model = table.get("model")
    if model is not None:
        if models is None:
            c.add(f"{where}.model", "the study has one [model]; name no model", (*path, "model"))
            model = None
        elif not isinstance(model, str) or model not in models:
            c.add(
                f"{where}.model",
                f"unknown model {model!r} (models: {', '.join(models)})",
                (*path, "model"),
            )
            model = None
    elif models is not None and len(models) > 1:
        c.add(
            f"{where}.model",
            f"missing: the study has {len(models)} models; a review "
            "sample names the one whose trials it draws",
            (*path, "model"),
        )
    elif models is not None:
        model = next(iter(models))
    sides: dict[str, tuple[str, str]] = {}
    for side in ("failed", "succeeded"):
        spot = (*path, side)
        cond = table.get(side)
        if cond is None:
            c.add(f"{where}.{side}", 'missing (e.g. { arm = "A", variant = "original" })', spot)
            continue
        if not isinstance(cond, dict):
            c.add(
                f"{where}.{side}",
                f"must be a table {{ arm = ..., variant = ... }}, got {cond!r}",
                spot,
            )
            continue
        arm_id = cond.get("arm")
        variant = cond.get("variant", "original")
        if not isinstance(arm_id, str) or arm_id not in arms:
            c.add(
                f"{where}.{side}.arm",
                f"unknown arm {arm_id!r} (arms: {', '.join(arms)})",
                (*spot, "arm"),
            )
            continue
        arm = arms[arm_id]
        if not isinstance(variant, str) or not arm_runs(variants, arm, variant):
            known = ", ".join([v.name for v in variants] if variants else ["original"])
            c.add(
                f"{where}.{side}.variant",
                f"arm {arm_id!r} does not run variant "
                f"{variant!r} (variants: {known}; the arm's variants: "
                f"{', '.join(arm.variants) if arm.variants else 'all'})",
                (*spot, "variant" if "variant" in cond else "arm"),
            )
            continue
        if isinstance(model, str) and arm.models is not None and model not in arm.models:
            c.add(
                f"{where}.{side}.arm",
                f"arm {arm_id!r} does not run model {model!r}",
                (*spot, "arm"),
            )
            continue
        sides[side] = (arm_id, variant)
    if len(sides) == 2 and sides["failed"] == sides["succeeded"]:
        c.add(
            f"{where}.succeeded", "names the same arm and variant as failed", (*path, "succeeded")
        )
    return sides, model if isinstance(model, str) else None


def _reviews(
    c: Collector,
    data: dict[str, Any],
    arms: dict[str, Arm],
    variants: list[VariantSpec],
    models: dict[str, ModelSpec] | None,
    parser: str,
    item_study: bool,
    steps: dict[str, StepSpec],
    items: Any = None,
) -> tuple[Review, ...]:
    """The ``[reviews.<NAME>]`` tables of either kind (:data:`REVIEW_KINDS`), each checked."""
    raw = data.get("reviews")
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not raw or not all(isinstance(v, dict) for v in raw.values()):
        c.add("reviews", "declare each review sample as a [reviews.<NAME>] table")
        return ()
    out: list[Review] = []
    for name, table in raw.items():
        where = f"reviews.{name}"
        path: KeyPath = ("reviews", name)
        if not ID_RE.match(name):
            c.add(where, "review names are letters, digits, '.', '_' or '-' (at most 64)", path)
        kind = _review_kind(c, name, table)
        n = table.get("n")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            what = "decisions per stratum" if kind == "judge-label" else "the cases to draw"
            c.add(f"{where}.n", f"must be an integer >= 1 ({what}), got {n!r}", (*path, "n"))
        seed = int_seed(c, table, "seed", where)
        description = table.get("description", "")
        if not isinstance(description, str):
            c.add(
                f"{where}.description",
                f"must be a string, got {description!r}",
                (*path, "description"),
            )
            description = ""
        ok = isinstance(n, int) and not isinstance(n, bool) and n >= 1 and bool(seed)
        if kind == "judge-label":
            step = _judge_review(c, name, table, steps)
            if ok and step is not None:
                out.append(Review(name, kind, int(n), seed, description, step=step))
        elif kind == "contrast":
            sides, model = _contrast_review(
                c, name, table, arms, variants, models, parser, item_study
            )
            codes = _codes(c, name, table)
            if ok and len(sides) == 2:
                out.append(
                    Review(
                        name,
                        kind,
                        int(n),
                        seed,
                        description,
                        failed=sides["failed"],
                        succeeded=sides["succeeded"],
                        model=model,
                        codes=codes,
                    )
                )
        elif kind == "reference-set":
            reference = _reference_review(c, name, table, steps, items)
            if ok and reference is not None:
                out.append(Review(name, kind, int(n), seed, description, reference=reference))
    return tuple(out)
