"""The contract of an analysis-side statistic (``docs/contributing.md``, "Adding a statistic").

Each module of :mod:`analysis.statistics` defines one module-level ``STATISTIC``, a
:class:`Statistic` naming its kind (the ``test`` of a ``[[hypotheses]]`` table) and owning
what the writer does with it: its computation from the analysis dataset and the locked
hypothesis (:attr:`Statistic.compute`), the keys every computed result holds
(:attr:`Statistic.schema`), the decision rule (:attr:`Statistic.decide`) and the report's cells
(:attr:`Statistic.estimate_text` and the others). :mod:`analysis._analyze`, :mod:`analysis._report`
and :mod:`analysis._posthoc` ask the registry rather than name a test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pandas as pd

__all__ = [
    "Data",
    "Posthoc",
    "Statistic",
    "contrast_of",
    "decide_by_interval",
    "decide_by_p",
    "difference_effect",
    "never",
    "no_span",
    "sides_of",
]

Values = dict[str, Any]
Decision = tuple[str, dict[str, Any]]


class Data(Protocol):
    """The analysis dataset as a statistic reads it (:class:`analysis._analyze.StatisticData`).

    ``ds`` is the :class:`analysis._analyze.Dataset` of the hypothesis (its stimulus subset, its
    ddx metric as the outcome), ``plan`` the locked protocol, ``fit`` the study's mixed model
    (``model.lmm``) or ``None``, ``vocabulary`` the parser's closed set of labels or ``None``.
    """

    @property
    def ds(self) -> Any: ...
    @property
    def plan(self) -> dict[str, Any]: ...
    @property
    def fit(self) -> Any: ...
    @property
    def vocabulary(self) -> tuple[str, ...] | None: ...

    def analysable(self) -> pd.DataFrame:
        """The analysable trials (not controls, not excluded)."""
        ...

    def items(self) -> pd.DataFrame:
        """The analysable items."""
        ...

    def pair_values(
        self, a: str, b: str
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Trial accuracies of arms ``a`` and ``b`` on the models both ran."""
        ...

    def stimulus_means(self, a: str, b: str) -> pd.DataFrame:
        """Per stimulus, the mean accuracy of ``a`` and of ``b`` on shared stimuli."""
        ...

    def per_group_diff(self, a: str, b: str) -> dict[str, float]:
        """Per stimulus, the difference of the mean accuracies ``a - b``."""
        ...

    def trial_pairs(self, a: str, b: str) -> tuple[Any, Any, list[dict[str, Any]]]:
        """Trial accuracies paired by (stimulus, rep), and the pairs dropped."""
        ...

    def paired_items(self, a: str, b: str) -> pd.DataFrame:
        """The items of ``a`` and ``b`` paired by (model, stimulus, variant, rep, row, position)."""
        ...

    def refit(self, plan: dict[str, Any]) -> tuple[Any, Any]:
        """The locked mixed model fitted on this data under ``plan``: (result, fit or None)."""
        ...


@dataclass(frozen=True)
class Posthoc:
    """How a kind is computed as a post-hoc analysis (``ledger posthoc --test``, §6).

    A kind whose :attr:`Statistic.mixed_model` is set is the locked mixed model refitted as
    declared (the random intercept and arms options belong to it); otherwise
    ``compute(data, a, b)`` gives (values, the contrast summary ``{estimate, lower, upper, p,
    conf, ...}``) two-sided.
    ``detail`` is the report's test cell of a post-hoc row, ``echo`` the line
    ``ledger posthoc`` prints, both from the recorded ``values``.
    """

    title: str
    detail: Callable[[Values], str]
    echo: Callable[[Values], str]
    compute: Callable[[Data, str, str], tuple[Values, Values]] | None = None


def never(h: dict[str, Any]) -> bool:
    """A kind never tabled with seed 002's statistics."""
    return False


def no_span(values: Values) -> list[float]:
    """No forest-plot extent beyond the estimate and its interval."""
    return []


def difference_effect(h: dict[str, Any], result: dict[str, Any]) -> str | None:
    """A difference's evidence for its prompt-component unit (``docs/analysis.md``).

    ``benefit``/``harm`` for a supported estimate above/below 0, else ``not shown``.
    """
    estimate = (result.get("values") or {}).get("estimate")
    if result.get("verdict") == "supported" and isinstance(estimate, int | float):
        return "benefit" if estimate > 0 else "harm" if estimate < 0 else "not shown"
    return "not shown"


@dataclass(frozen=True)
class Statistic:
    """One statistic kind, as the writer's analysis computes, decides and reports it.

    ``order`` places the kind in :data:`analysis.statistics.TESTS` (the vocabulary's order).
    ``in_pp``: the estimate is a difference of shares, written in pp by the report and
    :func:`analysis._result_text.describe_decision`. ``accuracy_difference``: the forest plot
    draws it (else it is tabled elsewhere). ``estimate_text``: the report's estimate cell
    (``None``: the difference and its interval). ``seed002``: whether a hypothesis of this kind
    is one of seed 002's statistics (computed on the long-format table, tabled in that section);
    ``seed002_values`` then computes it from :class:`analysis.mcq._kinds.Tables` and
    ``seed002_cells`` gives the row's (n, statistic, interval) cells. ``component_effect``:
    what a result says of its prompt-component unit (``None``: nothing). ``forest_span`` and
    ``forest_marks``: extra extent and drawing of the forest plot (``None``: the interval).
    ``posthoc``: how ``ledger posthoc`` computes the kind (``None``: it is not offered there).
    ``arm_compares_variants``: a hypothesis of one arm compares its ``variants`` (else it is
    about the arm alone). ``mixed_model``: the kind is a contrast of the registered mixed
    model (its estimand the population of stimuli; its sensitivity analyses are
    ``sensitivity.lmm``'s). ``plannable``: ``ledger plan`` can simulate the kind (trial-level
    outcomes, ``docs/planning.md``). ``claims_difference``: a supported verdict claims a
    difference (its share supported is a power or a type-I error; not so an equivalence's).
    ``demo_row``: (what, figures) of a recorded result, as the template demo prints it after
    verification (``None``: the demo does not print the kind).
    """

    key: str
    order: int
    compute: Callable[[Data, dict[str, Any]], Values]
    schema: tuple[str, ...]
    decide: Callable[[dict[str, Any], Values], Decision]
    in_pp: bool = False
    accuracy_difference: bool = True
    estimate_text: Callable[[Values], str] | None = None
    seed002: Callable[[dict[str, Any]], bool] = never
    seed002_values: Callable[[Any, dict[str, Any]], Values] | None = None
    seed002_cells: Callable[[Values], tuple[str, str, str]] | None = None
    component_effect: Callable[[dict[str, Any], dict[str, Any]], str | None] = difference_effect
    forest_span: Callable[[Values], list[float]] = no_span
    forest_marks: Callable[[Any, float, Values, str], None] | None = None
    posthoc: Posthoc | None = None
    arm_compares_variants: bool = True
    mixed_model: bool = False
    plannable: bool = False
    claims_difference: bool = True
    demo_row: Callable[[dict[str, Any], Values], tuple[str, str]] | None = None


def contrast_of(h: dict[str, Any]) -> tuple[str, str]:
    """(a, b) of a hypothesis: its contrast, or (its arm, ``""``)."""
    a, b = h.get("contrast") or (h.get("arm", ""), "")
    return str(a), str(b)


def sides_of(h: dict[str, Any]) -> str:
    """The hypothesis's ``sides``, ``two-sided`` when not given."""
    return str(h.get("sides") or "two-sided")


def decide_by_p(h: dict[str, Any], v: Values, *, directional: bool) -> Decision:
    """The p rule of ``docs/analysis.md`` §3: (adjusted) p < alpha, and the minimum difference.

    ``directional``: a one-sided hypothesis also needs the estimate in the predicted direction.
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


def decide_by_interval(h: dict[str, Any], v: Values, what: str, min_pp: Any) -> Decision:
    """An interval rule: lower bound > 0 (one-sided) or the interval excludes 0.

    ``what`` names the interval in the rule (``95% bootstrap CI``); ``min_pp``, when not
    ``None``, also needs the estimate at least that many pp.
    """
    lower, upper, est = v["lower"], v["upper"], v["estimate"]
    if (h.get("sides") or "two-sided") == "one-sided":
        ok = lower is not None and lower > 0
        rule = f"{what} lower bound > 0"
    else:
        ok = (lower is not None and lower > 0) or (upper is not None and upper < 0)
        rule = f"{what} excludes 0"
    if min_pp is not None:
        ok = ok and est * 100 >= float(min_pp)
        rule += f" and estimate >= {min_pp} pp"
    verdict = "supported" if ok else "not supported"
    return verdict, {"rule": rule, "estimate": est, "lower": lower, "upper": upper}
