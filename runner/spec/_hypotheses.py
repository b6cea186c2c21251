"""``[[hypotheses]]``: each hypothesis read and checked by asking the statistic registry.

What every hypothesis has (``id``, ``test``, ``contrast`` or ``arm``, ``outcome``, ``sides``,
``alpha``, ...) is read here; what a kind takes, refuses and checks against the rest of the
study is its :class:`runner.statistics.StatisticSpec`'s (``docs/study-spec.md``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from runner import statistics
from runner.spec._arms import arm_runs
from runner.spec._collector import Collector
from runner.spec._fields import name_list, string
from runner.spec._response import LETTER_PARSERS, TEXT_PARSERS
from runner.spec._state import Loading
from runner.spec._types import Arm, Hypothesis
from runner.statistics import KIND_ONLY_KEYS, TESTS, StatisticSpec, lookup, taking
from runner.statistics._base import COMMON_KEYS, standard_outcome

CORRECTIONS: Final = ("none", "bonferroni", "holm")
SIDES: Final = ("one-sided", "two-sided")
PAIRINGS: Final = (("stimulus",), ("stimulus", "rep"))
"""paired-t pairing keys: per-stimulus means (the default), or trials by (stimulus, rep)."""
NUMBERS: Final = ("alpha", "min_difference_pp", "margin_pp")


def parse_hypotheses(st: Loading) -> None:
    """Read ``[[hypotheses]]``, then run the kinds' checks against ``[factorial]``."""
    st.hypotheses = _hypotheses(st.c, st.data, st.arms, st.parser, st.stimuli)
    for spec in statistics.REGISTRY.values():
        if spec.against_factors is not None:
            spec.against_factors(st.c.add, st.hypotheses, st)


def check_main_model(st: Loading) -> None:
    """A main-model contrast (``lmm``) names two of ``analysis.model_arms`` (when named)."""
    model_arms = st.analysis.get("model_arms")
    if model_arms is None:
        return
    for i, h in enumerate(st.hypotheses):
        spec = lookup(h.test)
        if spec is None or not spec.main_model or h.stimuli is not None:
            continue
        if not set(h.contrast) <= set(model_arms):
            st.c.add(
                f"hypotheses[{i}].contrast",
                f"an {h.test} contrast on the main model needs "
                f"both arms in analysis.model_arms {model_arms}",
            )


def check_design(st: Loading) -> None:
    """Each hypothesis against the variants, models and replicates (the kinds' own checks)."""
    for i, h in enumerate(st.hypotheses):
        spec = lookup(h.test)
        if spec is None:
            continue
        where = f"hypotheses[{i}]"
        if spec.letters and not st.item_study:
            st.c.add(f"{where}.test", f"a {h.test} test needs an item file ([stimuli] items)")
            continue
        if spec.checks_variants(h):
            _check_variants(st, where, h, spec)
        if spec.against_design is not None:
            spec.against_design(st.c.add, where, h, st)


def check_steps(st: Loading) -> None:
    """The kinds' checks once ``[steps]`` is read (outcomes a step produces, pairing)."""
    for spec in statistics.REGISTRY.values():
        if spec.against_steps is not None:
            spec.against_steps(st.c.add, st.hypotheses, st)


def _tested_arms(arms: dict[str, Arm], h: Hypothesis) -> list[Arm]:
    """The arm a hypothesis of one arm tests, else the arms of its contrast (those declared)."""
    if h.arm is not None and h.arm in arms:
        return [arms[h.arm]]
    return [arms[a] for a in h.contrast if a in arms]


def _check_variants(st: Loading, where: str, h: Hypothesis, spec: StatisticSpec) -> None:
    """Each variant the hypothesis names is one the arms it tests run.

    A study without variants has the one variant ``original`` (the items as written).
    """
    names = list(h.variants or ())
    if h.variant is not None:
        names.append(h.variant)
    elif st.variants and spec.variant_needed:
        st.c.add(
            f"{where}.variant",
            f"missing: a {h.test} test in a study with variants names the variant it tests",
        )
    key = "variants" if h.variants else "variant"
    known = ", ".join([v.name for v in st.variants] if st.variants else ["original"])
    for arm in _tested_arms(st.arms, h):
        chosen = ", ".join(arm.variants) if arm.variants else "all"
        for name in names:
            if not arm_runs(st.variants, arm, name):
                st.c.add(
                    f"{where}.{key}",
                    f"arm {arm.id!r} does not run variant {name!r} "
                    f"(variants: {known}; the arm's variants: {chosen})",
                )


def _hypotheses(
    c: Collector,
    data: dict[str, Any],
    arms: dict[str, Arm],
    parser: str,
    stimuli: Iterable[str] = (),
) -> list[Hypothesis]:
    raw = data.get("hypotheses", [])
    if not isinstance(raw, list) or not raw:
        c.add("hypotheses", "declare at least one [[hypotheses]] table")
        return []
    out: list[Hypothesis] = []
    seen: set[str] = set()
    known = set(stimuli)
    for i, h in enumerate(raw):
        where = f"hypotheses[{i}]"
        if not isinstance(h, dict):
            c.add(where, "must be a table")
            continue
        out.append(_hypothesis(c, h, where, seen, arms, parser, known))
    return out


def _hypothesis(
    c: Collector,
    h: dict[str, Any],
    where: str,
    seen: set[str],
    arms: dict[str, Arm],
    parser: str,
    stimuli: set[str],
) -> Hypothesis:
    """One ``[[hypotheses]]`` table, its problems collected (its kind's by the registry)."""
    hid = _hypothesis_id(c, h, where, seen)
    test = string(c, h, "test", where)
    spec = lookup(test)
    pair = _contrast(c, h, where, test, spec, arms)
    outcome = (standard_outcome if spec is None else spec.outcome)(c.add, h, where, parser)
    if test and spec is None:
        c.add(f"{where}.test", f"unknown test {test!r}; use one of {', '.join(TESTS)}")
    if spec is not None and spec.labels and parser in TEXT_PARSERS:
        c.add(
            f"{where}.test",
            f"{test} tests the spread of wrong answers over a parser's labels; parser "
            f"{parser!r} has no closed set of labels",
        )
    sides = _choice(c, h, where, "sides", "two-sided", SIDES)
    correction = _choice(c, h, where, "correction", "none", CORRECTIONS)
    numbers = _numbers(c, h, where, test, spec)
    family = h.get("family")
    if family is not None and not isinstance(family, str):
        c.add(f"{where}.family", "must be a string")
        family = None
    description = h.get("description", "")
    if not isinstance(description, str):
        c.add(f"{where}.description", f"must be a string, got {description!r}")
        description = ""
    subset = _stimuli(c, h, where, stimuli)
    pairing = _pairing(c, h, where, test)
    kind = _kind_keys(c, h, where, test, spec, arms, parser)
    return Hypothesis(
        hid,
        pair,
        outcome,
        test,
        sides,
        numbers["alpha"],
        numbers["min_difference_pp"],
        numbers["margin_pp"],
        correction,
        family,
        str(description),
        subset,
        pairing,
        **kind,
    )


def _hypothesis_id(c: Collector, h: dict[str, Any], where: str, seen: set[str]) -> str:
    hid = string(c, h, "id", where)
    if "@" in hid:
        c.add(
            f"{where}.id",
            f"{hid!r}: '@' is reserved for the per-model results (H1@<model>)",
        )
    if hid in seen:
        c.add(f"{where}.id", f"duplicate hypothesis id {hid!r}")
    seen.add(hid)
    return hid


def _contrast(
    c: Collector,
    h: dict[str, Any],
    where: str,
    test: str,
    spec: StatisticSpec | None,
    arms: dict[str, Arm],
) -> tuple[str, str]:
    """The two arms of ``contrast``, or ("", "") for a kind that names one arm (or none)."""
    contrast = h.get("contrast")
    if spec is not None and spec.one_arm(h):
        if contrast is not None:
            c.add(f"{where}.contrast", spec.no_contrast.format(test=test))
        return ("", "")
    if (
        not isinstance(contrast, list)
        or len(contrast) != 2
        or not all(isinstance(a, str) for a in contrast)
    ):
        c.add(f"{where}.contrast", 'must be a list of two arm ids, e.g. ["A", "B"]')
        return ("", "")
    for arm in contrast:
        if arm not in arms:
            c.add(f"{where}.contrast", f"unknown arm {arm!r}")
    return (contrast[0], contrast[1])


def _choice(
    c: Collector, h: dict[str, Any], where: str, key: str, default: str, values: tuple[str, ...]
) -> str:
    """``h[key]`` (``default`` when absent): one of ``values``."""
    value = string(c, h, key, where, default)
    if value and value not in values:
        c.add(f"{where}.{key}", f"must be one of {', '.join(values)}")
    return value


def _numbers(
    c: Collector, h: dict[str, Any], where: str, test: str, spec: StatisticSpec | None
) -> dict[str, float | None]:
    """``alpha``, ``min_difference_pp`` and ``margin_pp``, and the kind's need of them."""
    numbers: dict[str, float | None] = {}
    for key in NUMBERS:
        value = h.get(key)
        bad = isinstance(value, bool) or not isinstance(value, int | float)
        if value is not None and bad:
            c.add(f"{where}.{key}", f"must be a number, got {value!r}")
            value = None
        numbers[key] = None if value is None else float(value)
    alpha = numbers["alpha"]
    if alpha is not None and not 0 < alpha < 1:
        c.add(f"{where}.alpha", f"must be between 0 and 1, got {alpha}")
    if spec is not None and spec.margin and numbers["margin_pp"] is None:
        c.add(f"{where}.margin_pp", f"an {test} rule needs a margin in percentage points")
    if test and (spec is None or spec.alpha) and alpha is None:
        c.add(f"{where}.alpha", f"a {test} rule needs alpha")
    return numbers


def _stimuli(
    c: Collector, h: dict[str, Any], where: str, stimuli: set[str]
) -> tuple[str, ...] | None:
    """``stimuli``: the probes whose trials enter the test, each a stimulus of the study."""
    subset = name_list(c, h, "stimuli", where)
    if subset is not None and stimuli:
        for name in subset:
            if name not in stimuli:
                c.add(f"{where}.stimuli", f"unknown stimulus {name!r}")
    return subset


def _pairing(c: Collector, h: dict[str, Any], where: str, test: str) -> tuple[str, ...] | None:
    """``pairing``: one of :data:`PAIRINGS`, for a kind that takes it."""
    pairing = name_list(c, h, "pairing", where)
    if pairing is None:
        return None
    if test not in taking("pairing"):
        names = ", ".join(repr(name) for name in taking("pairing"))
        c.add(f"{where}.pairing", f"applies to test {names} only, not {test!r}")
    elif pairing not in PAIRINGS:
        c.add(
            f"{where}.pairing",
            'must be ["stimulus"] (per-stimulus means) or '
            f'["stimulus", "rep"] (trials), got {list(pairing)!r}',
        )
    return pairing


def _kind_keys(
    c: Collector,
    h: dict[str, Any],
    where: str,
    test: str,
    spec: StatisticSpec | None,
    arms: dict[str, Arm],
    parser: str,
) -> dict[str, Any]:
    """The kind's own keys (``spec.read``), after refusing each key the kind does not take.

    What needs the variants, models and replicates is checked by :func:`check_design`.
    """
    if spec is not None:
        _kind_fit(c, h, where, spec, parser)
    takes = spec.takes if spec is not None else ()
    for key in KIND_ONLY_KEYS:
        if key in h and key not in takes:
            only = ", ".join(taking(key))
            c.add(f"{where}.{key}", f"does not apply to test {test!r} (only to {only})")
    out = spec.read(c.add, h, where, arms) if spec is not None else {}
    if "effect" in h and "effect" not in takes:
        only = ", ".join(taking("effect"))
        c.add(f"{where}.effect", f"does not apply to test {test!r} (only to {only})")
    return out


def _kind_fit(
    c: Collector, h: dict[str, Any], where: str, spec: StatisticSpec, parser: str
) -> None:
    """A letter kind's parser; the common keys a kind with ``own_keys`` does not take."""
    if spec.letters and parser not in LETTER_PARSERS:
        c.add(
            f"{where}.test",
            f"a {spec.name} test reads option letters: it needs parser "
            f"'multiple-choice' or 'cloze', not {parser!r}",
        )
    if not spec.own_keys:
        return
    for key in COMMON_KEYS:
        if key in h and key not in spec.takes and not (key == "correction" and h[key] == "none"):
            c.add(
                f"{where}.{key}",
                f"does not apply to test {spec.name!r} (it takes {', '.join(spec.takes)})",
            )
