"""Post-hoc analyses: declared after unblinding, recorded as ``analysis.posthoc`` events.

A post-hoc analysis is one the protocol did not register: the PROMPT paper's Experiment 2, for
example, fitted "a post-hoc LMM sensitivity analysis with stimulus as random intercept" after it
saw the data. ``ledger posthoc STUDY NAME --contrast A B`` declares one (its model, contrast and
reason) once the registered analysis has been recorded, computes it on the same dataset, and
appends one ``analysis.posthoc`` event holding the declaration and the result. It is labelled
``post hoc`` in the event, the report and the archive, has no hypothesis and no verdict, and
never changes an ``analysis.result``: the registered verdicts were recorded before it and stay
as they are. The verifier recomputes every ``analysis.posthoc`` event from the dataset
(``docs/analysis.md`` §6).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from analysis import _stats as stats
from analysis._analyze import Result, StatisticData, _guard, fit_model, load_dataset, models
from analysis._factorial import plan_cells
from analysis.statistics import MIXED_MODEL, POSTHOC_TESTS, statistic
from ledger import EventSpec, Ledger, SigningKey
from runner import StudyError, check_integrity, ledger_path, protocol_event, stimulus_sources
from runner.spec import ID_RE

__all__ = ["POSTHOC_KIND", "POSTHOC_LABEL", "POSTHOC_TESTS", "declare_posthoc", "posthoc_result"]

POSTHOC_KIND = "analysis.posthoc"
"""The event kind of a post-hoc analysis (``docs/ledger-format.md``)."""
POSTHOC_LABEL = "post hoc"
"""The label every post-hoc result carries (never ``pre-registered``)."""
RANDOM_INTERCEPTS = ("stimulus", "source")


def posthoc_result(
    ds: Any, plan: dict[str, Any], declared: dict[str, Any], name: str, test: str = MIXED_MODEL.key
) -> Result:
    """The result of one declared post-hoc analysis (``docs/analysis.md`` §6).

    ``declared`` = ``{"contrast": [a, b], "random_intercept", "arms", "model", "reason"}``
    (``model``: one model's trials only; null or absent: every model's). ``lmm``: accuracy ~
    arm + (1 | random_intercept), REML, on the analysable trials of ``arms`` (all arms when
    null), and the two-sided Wald contrast a − b with its 95% CI; ``values`` = the fit's
    members plus ``contrast`` (and ``caution`` for a singular or unconverged fit). The other
    tests compute what the registered test of that name computes (two-sided), and ``values``
    = its members plus the same ``contrast`` summary ``{a, b, sides, estimate, lower, upper,
    p, conf}`` (``t`` and ``df`` for a t-test; ``p`` null for the bootstrap).
    """
    a, b = (str(x) for x in declared["contrast"])
    if declared.get("model") is not None:
        ds = ds.for_model(str(declared["model"]))
    at = ""
    if declared.get("variant") is not None:
        ds = ds.for_variant(str(declared["variant"]))
        at = f" (variant {declared['variant']})"
    if not statistic(test).mixed_model:
        result = _posthoc_test(ds, plan, a, b, name, test)
        result.title += at
        return result
    sub_plan = {
        **plan,
        "analysis": {
            **(plan.get("analysis") or {}),
            "random_intercept": declared["random_intercept"],
            "model_arms": declared.get("arms"),
        },
    }
    fitted, fit = fit_model(ds, sub_plan)
    result = Result(
        f"posthoc.{name}",
        f"Post hoc (declared after unblinding): {a} - {b}, "
        + fitted.title.removeprefix("Linear mixed model: ")
        + at,
        POSTHOC_LABEL,
        test,
    )

    def compute() -> None:
        if fit is None:
            reason = (fitted.values or {}).get("reason")  # a model that is not applicable
            raise stats.StatsError(
                fitted.error
                or (
                    f"the model could not be fitted: {reason}"
                    if reason
                    else "the model could not be fitted"
                )
            )
        result.values = {
            **(fitted.values or {}),
            "contrast": stats.contrast(fit, a, b, "two-sided").as_dict(),
        }

    return _guard(result, compute)


def _posthoc_test(ds: Any, plan: dict[str, Any], a: str, b: str, name: str, test: str) -> Result:
    """A post-hoc t-test or bootstrap of a − b on the analysable trials (two-sided).

    The kind's :attr:`analysis.statistics.Posthoc.compute` gives the values and the contrast
    summary.
    """
    posthoc = statistic(test).posthoc
    assert posthoc is not None and posthoc.compute is not None
    compute_kind = posthoc.compute
    result = Result(
        f"posthoc.{name}",
        f"Post hoc (declared after unblinding): {a} - {b}, {posthoc.title}",
        POSTHOC_LABEL,
        test,
    )

    def compute() -> None:
        values, summary = compute_kind(StatisticData(ds, plan), a, b)
        result.values = {**values, "contrast": {"a": a, "b": b, "sides": "two-sided"} | summary}

    return _guard(result, compute)


def _check_variant(ds: Any, runs: dict[str, list[str]], variant: str) -> None:
    """Refuse a ``--variant`` in a study without variants, or that an arm compared did not run."""
    if not ds.variants:
        raise StudyError(f"--variant {variant!r}: the study declares no variants")
    missing = [arm for arm in runs if variant not in runs[arm]]
    if missing:
        raise StudyError(
            f"--variant {variant!r}: arm {missing[0]} has no scored trial of "
            f"that variant (it ran {', '.join(runs[missing[0]]) or 'none'})"
        )


def _check_variants(ds: Any, arms: list[str], variant: str | None) -> None:
    """Refuse comparing arms that ran different variants (``docs/analysis.md`` §6).

    An arm over three option orders against one over one would compare the orders too.
    """
    runs = {
        arm: sorted({str(v) for v in ds.trials.loc[ds.trials["arm"] == arm, "variant"]})
        for arm in arms
    }
    if variant is not None:
        _check_variant(ds, runs, variant)
        return
    with_trials = {arm: v for arm, v in runs.items() if v}
    if len({tuple(v) for v in with_trials.values()}) > 1:
        shown = "; ".join(f"{arm}: {', '.join(v)}" for arm, v in with_trials.items())
        shared = sorted(set.intersection(*(set(v) for v in with_trials.values())))
        raise StudyError(
            f"the arms compared ran different variants ({shown}): the comparison would mix "
            "the variants' effect into the arms'; choose one variant they all ran with "
            f"--variant ({', '.join(shared) or 'they share none'})"
        )


def _check_options(
    name: str, reason: str, test: str, random_intercept: str | None, arms: list[str] | None
) -> str | None:
    """Refuse a bad name, reason, test or mixed-model option; the random intercept to use."""
    if not ID_RE.match(name):
        raise StudyError(f"post-hoc name {name!r}: use letters, digits, '.', '_' or '-'")
    if not reason.strip():
        raise StudyError("--reason: say why this analysis is added after unblinding")
    if test not in POSTHOC_TESTS:
        raise StudyError(f"--test {test!r}: use one of {', '.join(POSTHOC_TESTS)}")
    mixed_model = statistic(test).mixed_model
    if not mixed_model and (random_intercept is not None or arms is not None):
        raise StudyError(
            f"--test {test}: --random-intercept and --arms belong to the mixed "
            "model (--test lmm) only"
        )
    if mixed_model and random_intercept is None:
        random_intercept = "stimulus"
    if random_intercept is not None and random_intercept not in RANDOM_INTERCEPTS:
        raise StudyError(f"--random-intercept {random_intercept!r}: use stimulus or source")
    return random_intercept


def _recorded_analysis(root: Path, log: Ledger, name: str) -> list[Any]:
    """The registered analysis's results; refused before it, or for a name already used."""
    results = list(log.events("analysis.result"))
    if not results:
        raise StudyError(
            f"{root}: the registered analysis is not recorded yet; a post-hoc "
            "analysis comes after 'ledger analyze'"
        )
    for event in log.events(POSTHOC_KIND):
        if event.body.get("id") == f"posthoc.{name}":
            raise StudyError(
                f"{root}: post-hoc analysis {name!r} already recorded at seq "
                f"{event.seq}; choose another name"
            )
    return results


def _check_arms(
    plan: dict[str, Any], contrast: tuple[str, str], arms: list[str] | None, model: str | None
) -> None:
    """Refuse an unknown arm or model, an arm against itself, or arms without the contrast."""
    known = sorted(plan["arms"])
    for arm in [*contrast, *(arms or [])]:
        if arm not in known:
            raise StudyError(f"unknown arm {arm!r}; the study's arms are {', '.join(known)}")
    if contrast[0] == contrast[1]:
        raise StudyError(f"--contrast: {contrast[0]} against itself")
    if arms is not None and not {*contrast} <= set(arms):
        raise StudyError(f"--arms {','.join(arms)} must include both arms of the contrast")
    declared_models = list(models(plan))
    if model is not None and model not in declared_models:
        raise StudyError(
            f"--model {model!r}: the study's models are "
            f"{', '.join(declared_models) or 'none ([model] declares one)'}"
        )


def declare_posthoc(
    root: str | Path,
    key: SigningKey,
    name: str,
    contrast: tuple[str, str],
    *,
    reason: str,
    random_intercept: str | None = None,
    arms: list[str] | None = None,
    test: str = MIXED_MODEL.key,
    model: str | None = None,
    variant: str | None = None,
) -> dict[str, Any]:
    """Declare, compute and record one post-hoc analysis; return the event body.

    Refuses (naming what is wrong, appending nothing) before the registered analysis is
    recorded, for a name already used, an unknown arm or model, a test other than
    :data:`POSTHOC_TESTS`, a random intercept other than ``stimulus`` or ``source`` (``source``
    needs a truth table with a ``source`` column) or arms given to a test that is not ``lmm``,
    or an empty reason; and for a comparison of unequal designs: arms compared (the contrast,
    or every arm the mixed model fits) that ran different variants, unless ``variant`` names
    one they all ran (then only its trials are used); a ``variant`` in a study without
    variants, or that an arm compared did not run.
    """
    root = Path(root)
    random_intercept = _check_options(name, reason, test, random_intercept, arms)
    mixed_model = statistic(test).mixed_model
    study = check_integrity(root)
    with Ledger.open(ledger_path(root)) as log:
        results = _recorded_analysis(root, log, name)
        protocol = protocol_event(log)
        assert protocol is not None
        plan = protocol.body
        known = sorted(plan["arms"])
        _check_arms(plan, contrast, arms, model)
        settings = plan.get("analysis", {})
        sources = stimulus_sources(study) if random_intercept == "source" else {}
        ds = load_dataset(
            log,
            exclude_unparseable=bool(settings.get("exclude_unparseable", True)),
            parser=str((plan.get("response") or {}).get("parser", "tumbling-e-json")),
            sources=sources,
            models=models(plan),
            variants=bool(plan.get("variants")),
            factorial=plan_cells(plan),
        )
        compared = (sorted(arms) if arms is not None else known) if mixed_model else [*contrast]
        _check_variants(ds if model is None else ds.for_model(model), compared, variant)
        declared = {
            "contrast": list(contrast),
            "random_intercept": random_intercept,
            "arms": sorted(arms) if arms is not None else None,
            "model": model,
            "variant": variant,
            "reason": " ".join(reason.split()),
            "after_seq": results[-1].seq,
        }
        result = posthoc_result(ds, plan, declared, name, test)
        inputs = {
            "scores_sha256": ds.scores_sha256,
            "trials_csv_sha256": hashlib.sha256(ds.trials_csv()).hexdigest(),
            "items_csv_sha256": hashlib.sha256(ds.items_csv()).hexdigest(),
            "protocol_seq": protocol.seq,
        }
        body = {**result.as_dict(), "declared": declared, "inputs": inputs}
        log.append_many([EventSpec(POSTHOC_KIND, body)], key=key)
        log.sign_checkpoint(key)
    return body
