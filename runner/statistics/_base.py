"""The registry's entry, :class:`StatisticSpec`, and what the statistic kinds share.

A statistic kind is the ``test = "..."`` of a ``[[hypotheses]]`` table (``docs/study-spec.md``).
Each module of :mod:`runner.statistics` describes one kind in a module-level ``SPEC``: the keys
it takes and refuses, whether it names one arm or a contrast, its outcome rule, whether it needs
``alpha`` or ``margin_pp``, and the checks it makes once the rest of the study is read.
:mod:`runner.spec` validates every hypothesis by asking the registry; it never names a test.

Problems go to an ``add(field, message)`` callback (the spec's collector), so this package
imports nothing of :mod:`runner.spec`. The hooks see the hypotheses and the design through the
protocols :class:`Registered` and :class:`Design`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from runner._ddx import DDX_METRICS

__all__ = [
    "COMMON_KEYS",
    "KIND_ONLY_KEYS",
    "OUTCOMES",
    "Add",
    "Design",
    "Registered",
    "StatisticSpec",
    "always",
    "declared_outcome",
    "default_outcome",
    "name_list",
    "no_keys",
    "standard_outcome",
    "text",
]

Add = Callable[[str, str], None]
"""``add(field, message)``: records one problem (``field`` as ``hypotheses[0].arm``)."""

KIND_ONLY_KEYS: Final = (
    "arm",
    "variants",
    "variant",
    "basis",
    "samples",
    "incomplete",
    "min_pp",
    "max_pp",
    "fallback",
)
"""Hypothesis keys only some kinds take (each kind lists those it takes in ``takes``); on any
other kind each is refused, naming the kinds that take it."""
COMMON_KEYS: Final = (
    "sides",
    "min_difference_pp",
    "margin_pp",
    "stimuli",
    "pairing",
    "correction",
    "contrast",
)
"""Keys of the contrast tests that a kind with ``own_keys`` refuses unless it takes them
(``correction = "none"`` is always accepted: there is nothing to adjust)."""
OUTCOMES: Final = ("glyph_accuracy", "trial_accuracy")
"""The outcomes of the standard outcome rule (:func:`standard_outcome`)."""


def default_outcome(parser: str) -> str:
    """The default hypothesis outcome: ``glyph_accuracy`` (tumbling-E), else ``trial_accuracy``."""
    return "glyph_accuracy" if parser == "tumbling-e-json" else "trial_accuracy"


def text(
    add: Add, table: Mapping[str, Any], key: str, where: str, default: str | None = None
) -> str:
    """``table[key]`` as a non-empty string (``default`` when absent), else "" after a problem."""
    value = table.get(key, default)
    if value is None:
        add(f"{where}.{key}", "missing")
        return ""
    if not isinstance(value, str) or not value:
        add(f"{where}.{key}", f"must be a non-empty string, got {value!r}")
        return ""
    return value


def name_list(add: Add, h: Mapping[str, Any], key: str, where: str) -> tuple[str, ...] | None:
    """A non-empty list of distinct non-empty strings, or None when absent (problems sent)."""
    value = h.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        add(f"{where}.{key}", f"must be a non-empty list of names, got {value!r}")
        return None
    if len(set(value)) != len(value):
        add(f"{where}.{key}", f"names a value twice: {value!r}")
        return None
    return tuple(value)


def standard_outcome(add: Add, h: Mapping[str, Any], where: str, parser: str) -> str:
    """The outcome of most kinds: the parser's own (:func:`default_outcome`) or a ddx metric.

    A ddx metric, and any outcome of a ``ddx`` study, is checked by :mod:`runner._ddx`.
    """
    outcome = text(add, h, "outcome", where, default_outcome(parser))
    if not outcome or outcome in DDX_METRICS or parser == "ddx":
        return outcome
    if outcome not in OUTCOMES:
        extra = (
            " (parse rates are reported per arm by descriptive.arms, not tested)"
            if outcome == "parse_rate"
            else ""
        )
        use = " or ".join(OUTCOMES)
        add(f"{where}.outcome", f"unknown outcome {outcome!r}; use {use}{extra}")
    elif outcome != default_outcome(parser):
        add(
            f"{where}.outcome",
            f"{outcome!r} does not fit parser {parser!r}: glyph_accuracy is the share of a "
            "tumbling-E chart's glyphs read correctly (tumbling-e-json), trial_accuracy is 1 "
            f"when a single-answer trial is correct; use {default_outcome(parser)!r}",
        )
    return outcome


def declared_outcome(add: Add, h: Mapping[str, Any], where: str, parser: str) -> str:
    """The outcome as declared (default :func:`default_outcome`), checked by a later hook."""
    return text(add, h, "outcome", where, default_outcome(parser))


def no_keys(add: Add, h: Mapping[str, Any], where: str, arms: Mapping[str, Any]) -> dict[str, Any]:
    """The reader of a kind that takes none of :data:`KIND_ONLY_KEYS`: sets no field."""
    return {}


class Registered(Protocol):
    """What the hooks read of a :class:`runner.spec.Hypothesis`."""

    @property
    def id(self) -> str: ...
    @property
    def test(self) -> str: ...
    @property
    def contrast(self) -> tuple[str, str]: ...
    @property
    def arm(self) -> str | None: ...
    @property
    def variant(self) -> str | None: ...
    @property
    def samples(self) -> int | None: ...
    @property
    def effect(self) -> tuple[str, ...] | None: ...


class Design(Protocol):
    """What the hooks read of the study being loaded (set by the time each hook runs).

    ``against_factors`` runs once ``[factors]`` and ``[factorial]`` are read,
    ``against_design`` once the arms, models, replicates and variants are, ``against_steps``
    once ``[steps]`` is.
    """

    @property
    def arms(self) -> Mapping[str, Any]: ...
    @property
    def models(self) -> Mapping[str, Any] | None: ...
    @property
    def model(self) -> Mapping[str, Any]: ...
    @property
    def replicates(self) -> int: ...
    @property
    def parser(self) -> str: ...
    @property
    def steps(self) -> Mapping[str, Any]: ...
    @property
    def factors(self) -> Mapping[str, Any]: ...
    @property
    def factorial(self) -> Any: ...
    @property
    def declares_variants(self) -> bool: ...


Reader = Callable[[Add, dict[str, Any], str, Mapping[str, Any]], dict[str, Any]]
"""``read(add, table, where, arms)``: the :class:`runner.spec.Hypothesis` fields a kind sets."""
OutcomeRule = Callable[[Add, dict[str, Any], str, str], str]
"""``outcome(add, table, where, parser)``: the hypothesis's outcome, checked."""
EachHook = Callable[[Add, str, Any, Design], None]
"""``hook(add, where, hypothesis, design)``: checks one hypothesis of the kind."""
AllHook = Callable[[Add, Sequence[Any], Design], None]
"""``hook(add, hypotheses, design)``: checks the kind's hypotheses among all (in order)."""


def _never(h: Registered) -> bool:
    return False


def always(h: Registered) -> bool:
    """``checks_variants`` of a kind whose every hypothesis is checked against the variants."""
    return True


@dataclass(frozen=True)
class StatisticSpec:
    """One statistic kind's hypothesis-table validation (``docs/study-spec.md``).

    ``subject``: ``contrast`` (two arms), ``arm`` (one arm), ``arm-or-contrast`` (one arm when
    the table names ``arm``) or ``effect`` (factors of ``[factorial]``); a kind that names no
    contrast refuses one with ``no_contrast``. ``takes``: the kind-only keys (and ``pairing``,
    ``effect``, ...) it takes, in the order its messages list them; with ``own_keys`` it refuses
    every one of :data:`COMMON_KEYS` it does not take. ``letters``: it reads option letters,
    so it needs a letter parser and an item file; ``labels``: it needs a parser with a closed
    set of labels. ``alpha`` / ``margin``: the rule needs ``alpha`` / ``margin_pp``.
    ``main_model``: its contrast is one of the primary model's (``analysis.model_arms``).
    ``checks_variants(h)``: whether the arms tested must run the variants ``h`` names;
    ``variant_needed``: in a study with variants, ``variant`` is required.
    """

    name: str
    order: int
    """The kind's place in :data:`runner.statistics.TESTS` (and every listing of them)."""
    subject: str = "contrast"
    no_contrast: str = "a {test} test of one arm names 'arm', not a contrast"
    outcome: OutcomeRule = standard_outcome
    takes: tuple[str, ...] = ()
    own_keys: bool = False
    letters: bool = False
    labels: bool = False
    alpha: bool = True
    margin: bool = False
    main_model: bool = False
    read: Reader = no_keys
    checks_variants: Callable[[Registered], bool] = _never
    variant_needed: bool = False
    against_factors: AllHook | None = None
    against_design: EachHook | None = None
    against_steps: AllHook | None = None

    def one_arm(self, table: Mapping[str, Any]) -> bool:
        """Whether ``table`` names no contrast (one arm, or a factorial effect)."""
        if self.subject == "arm-or-contrast":
            return "arm" in table
        return self.subject != "contrast"
