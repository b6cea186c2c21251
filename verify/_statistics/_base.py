"""What one statistic kind of the verifier's registry owns (see :mod:`verify._statistics`).

A kind (the ``test`` of a registered hypothesis, ``tests/vectors/vocabulary.json`` "tests")
owns its independent recompute (:attr:`Statistic.values`), its decision rule
(:attr:`Statistic.decide`), the tolerance its numbers are compared at, and the report cells of
its results (:attr:`Statistic.estimate_text`, :attr:`Statistic.mcq_cells`). The shared rules
(the p-value rule, the interval rules) are here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from verify import _mcqhyp as mh
from verify._recompute.dataset import _Dataset
from verify._recompute.results import REL_TOL
from verify._statistics._cells import contrast_text, fmt, interval_text, obj, p_value

Decision = tuple[str, dict[str, Any]]
"""(verdict, decided_by) of a computed result."""
McqRows = tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], dict[str, Any]]
"""mcq-statistics.md §11: (pooled rows, rows by model, plan, hypothesis)."""


@dataclass(frozen=True)
class Case:
    """One registered hypothesis as the verifier recomputes it (analysis.md §3)."""

    ds: _Dataset
    """Its dataset: a stimulus subset's, a ddx metric as the outcome."""
    plan: dict[str, Any]
    h: dict[str, Any]
    fit: dict[str, Any] | None
    """The registered mixed model (``model.lmm``), if it could be fitted."""
    a: Any
    """The contrast's first arm (or the one arm)."""
    b: Any
    """The contrast's second arm (``""`` for one arm)."""
    sides: str
    """``one-sided`` or ``two-sided``."""
    recorded_subset: Any = None
    """The recorded ``subset_model`` of a hypothesis on a stimulus subset."""


def _not_mcq(h: dict[str, Any]) -> bool:
    return False


def signed_effect(h: dict[str, Any], result: dict[str, Any]) -> str | None:
    """analysis.md "Component classes": a supported contrast's sign, else "not shown"."""
    est = obj(result.get("values")).get("estimate")
    if result.get("verdict") == "supported" and isinstance(est, int | float):
        return "benefit" if est > 0 else "harm" if est < 0 else "not shown"
    return "not shown"


def no_component_effect(h: dict[str, Any], result: dict[str, Any]) -> str | None:
    """Not a contrast of two arms' components: no evidence about a component."""
    return None


def variants_of_arm(h: dict[str, Any]) -> str:
    """The report's "arms / variants" text of a one-arm test: the arm and its variants."""
    return f"arm {h['arm']}: " + " vs ".join(map(str, h.get("variants") or []))


def z_posthoc_cells(values: dict[str, Any], contrast: dict[str, Any]) -> tuple[str, str, str]:
    """A post-hoc row's (test, ICC, caution) cells of a z-test."""
    return f"z {fmt(contrast.get('z'))}, p {p_value(contrast.get('p'))}", "–", "–"


def t_posthoc_cells(values: dict[str, Any], contrast: dict[str, Any]) -> tuple[str, str, str]:
    """A post-hoc row's (test, ICC, caution) cells of a t-test."""
    t = f"t {fmt(contrast.get('t'))} (df {fmt(contrast.get('df'))}), p {p_value(contrast.get('p'))}"
    return t, "–", "–"


@dataclass(frozen=True)
class Statistic:
    """One statistic kind of the verifier's registry (``SPEC`` of the writer's twin)."""

    name: str
    """The ``test`` of a ``[[hypotheses]]`` table."""
    order: int
    """Its place in the vocabulary's ``tests`` list."""
    values: Callable[[Case], dict[str, Any]]
    """The recomputed ``values`` of ``hypothesis.<id>`` (before the common members)."""
    decide: Callable[[dict[str, Any], dict[str, Any]], Decision]
    """The decision rule of a computed result: (verdict, decided_by)."""
    estimate_text: Callable[[dict[str, Any]], str] = contrast_text
    """The hypothesis table's estimate cell (archive-format.md §7)."""
    rel_tol: float = REL_TOL
    """The relative tolerance its numbers are compared at."""
    mixed_model: bool = False
    """A test of the registered mixed model (``sensitivity.lmm`` rows, ``lmm`` results)."""
    mcq: Callable[[dict[str, Any]], bool] = _not_mcq
    """Whether a hypothesis of this kind is one of mcq-statistics.md §11's."""
    mcq_values: Callable[[McqRows, Sequence[str]], dict[str, Any]] | None = None
    """§11: the values from the checked trial tables (``models`` in model order)."""
    mcq_listed: Callable[[dict[str, Any]], bool] = _not_mcq
    """Whether the report lists a hypothesis in the seed-002 table."""
    mcq_cells: Callable[[dict[str, Any]], tuple[Any, str, str]] | None = None
    """The seed-002 table's (n, statistic, interval or p) cells of its values."""
    posthoc: Callable[[_Dataset, dict[str, Any], str, str], dict[str, Any]] | None = None
    """analysis.md §6: a post-hoc analysis's values of a − b (a contrast kind)."""
    posthoc_fits_model: bool = False
    """analysis.md §6: the post-hoc analysis fits its own mixed model (``lmm``)."""
    posthoc_cells: Callable[[dict[str, Any], dict[str, Any]], tuple[str, str, str]] = (
        z_posthoc_cells
    )
    """The report's post-hoc row cells (test, ICC, caution) of (values, contrast summary)."""
    arm_text: Callable[[dict[str, Any]], str] = variants_of_arm
    """The report's "arms / variants" text of a hypothesis naming one arm."""
    component_effect: Callable[[dict[str, Any], dict[str, Any]], str | None] = signed_effect
    """analysis.md "Component classes": what a computed result says of the components that
    a − b adds (benefit, harm, no effect, not shown), None when it says nothing."""


def p_rule(h: dict[str, Any], v: dict[str, Any], directional: bool) -> Decision:
    """analysis.md §3: p (adjusted if corrected) < alpha, and the minimum difference.

    ``directional``: a one-sided test also needs the estimate in the predicted direction.
    """
    alpha = v["alpha"]
    min_pp = v.get("min_difference_pp")
    p = v.get("p_adjusted", v.get("p_raw"))
    estimate = v.get("estimate")
    ok = p is not None and p < alpha
    rule = f"p{' (adjusted)' if 'p_adjusted' in v else ''} < {alpha}"
    if directional and h.get("sides") == "one-sided":
        ok = ok and estimate is not None and estimate > 0
        rule += " and the estimate in the predicted direction"
    if min_pp is not None and estimate is not None:
        ok = ok and estimate * 100 >= min_pp
        rule += f" and estimate >= {min_pp} pp"
    return ("supported" if ok else "not supported"), {"rule": rule, "p": p, "estimate": estimate}


def directional_p_rule(h: dict[str, Any], v: dict[str, Any]) -> Decision:
    """:func:`p_rule` of a test with a direction (a one-sided test's estimate > 0)."""
    return p_rule(h, v, True)


def plain_p_rule(h: dict[str, Any], v: dict[str, Any]) -> Decision:
    """:func:`p_rule` of a test without a direction."""
    return p_rule(h, v, False)


def excludes_zero(h: dict[str, Any], lower: Any, upper: Any) -> bool:
    """An interval excludes 0 (one-sided: its lower bound is above 0)."""
    if (h.get("sides") or "two-sided") == "one-sided":
        return lower is not None and lower > 0
    return (lower is not None and lower > 0) or (upper is not None and upper < 0)


def level_text(conf: float) -> str:
    """An interval's level as the rules write it (``90%``)."""
    return f"{round(100 * conf, 6):g}%"


def interval_rule(h: dict[str, Any], v: dict[str, Any]) -> Decision:
    """mcq-statistics.md §11: the interval excludes 0, and the minimum difference."""
    lower, upper, est = v["lower"], v["upper"], v["estimate"]
    level = level_text(v["conf"])
    ok = excludes_zero(h, lower, upper)
    if (h.get("sides") or "two-sided") == "one-sided":
        rule = f"{level} interval lower bound > 0"
    else:
        rule = f"{level} interval excludes 0"
    if h.get("min_difference_pp") is not None:
        ok = ok and est * 100 >= float(h["min_difference_pp"])
        rule += f" and estimate >= {h['min_difference_pp']} pp"
    verdict = "supported" if ok else "not supported"
    return verdict, {"rule": rule, "estimate": est, "lower": lower, "upper": upper}


def mcq_interval_cells(v: dict[str, Any], n: Any, statistic: str) -> tuple[Any, str, str]:
    """The seed-002 table's cells of an interval kind."""
    return n, statistic, interval_text(v)


def always(h: dict[str, Any]) -> bool:
    """Every hypothesis of the kind."""
    return True


def posthoc_contrast(a: str, b: str, **fields: Any) -> dict[str, Any]:
    """analysis.md §6: a post-hoc result's ``contrast`` summary of a − b."""
    return {"a": a, "b": b, "sides": "two-sided", **fields}


def t_contrast(a: str, b: str, res: dict[str, Any]) -> dict[str, Any]:
    """The ``contrast`` summary of a post-hoc t-test."""
    return posthoc_contrast(
        a,
        b,
        estimate=res["difference"],
        lower=res["ci_lower"],
        upper=res["ci_upper"],
        p=res["p"],
        t=res["t"],
        df=res["df"],
        conf=0.95,
    )


def mcq_setting(rows: McqRows) -> tuple[tuple[str, ...], str, int, int]:
    """mcq-statistics.md §11, every kind: (letters, the pooled table's model, iterations, seed).

    Read for every kind in this order, so a table or plan that cannot give them fails alike.
    """
    pooled, _, plan, _ = rows
    letters = mh._letters(plan)
    model = mh.pooled_model(pooled)
    iterations, seed = mh.bootstrap_design(plan)
    return letters, model, iterations, seed


def mcq_case_values(
    case: Case, mcq_values: Callable[[McqRows, Sequence[str]], dict[str, Any]]
) -> dict[str, Any]:
    """§11 values of a hypothesis on its dataset's trial tables."""
    pooled, by_model = mh._tables(case.ds, case.plan)
    return mcq_values((pooled, by_model, case.plan, case.h), list(case.ds.models))
