"""The ``qr-bootstrap`` hypothesis test at lock: its keys and the outcomes it may read.

Seed 001's nonparametric bootstrap over (question, run) observations (``docs/statistics.md``,
"(question, run) bootstrap as a registered test"; ``docs/study-spec.md`` ``[[hypotheses]]``).
:func:`qr_keys` reads the keys of one ``test = "qr-bootstrap"`` hypothesis (``arm`` or
``contrast``, ``statistic``, ``min_pp`` / ``max_pp``, ``sides``, ``min_difference_pp``) and
refuses every key the test does not take; :func:`check_outcomes` refuses, once the study's
parser and steps are known, an outcome the study cannot produce, naming the hypothesis.

:data:`QR_OUTCOMES` is the one table of per-trial outcomes the test may read. A new per-trial
column of the analysis dataset (``docs/analysis.md`` §2) becomes testable by adding one row:
its column, whether its values are 0/1 (``binary``) and shares in [0, 1] (``share``), and the
function that says why a study cannot produce it (``None`` when it can).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "ARM_STATISTICS",
    "CONTRAST_STATISTICS",
    "QR_KEYS",
    "QR_OUTCOMES",
    "QR_TEST",
    "RATE_STATISTICS",
    "STATISTICS",
    "Outcome",
    "check_outcomes",
    "check_pairing",
    "qr_keys",
]

QR_TEST: Final = "qr-bootstrap"
ARM_STATISTICS: Final = ("accuracy", "mean")
"""Statistics of one arm (``arm = "..."``): the mean outcome over its observations."""
CONTRAST_STATISTICS: Final = ("success-rate", "perturbed-accuracy", "difference")
"""Statistics of ``contrast = [perturbed, default]``, over (item, model, variant, rep) pairs."""
STATISTICS: Final = (*ARM_STATISTICS, *CONTRAST_STATISTICS)
RATE_STATISTICS: Final = ("accuracy", "mean", "success-rate", "perturbed-accuracy")
"""Decided against a declared bound (exactly one of ``min_pp`` / ``max_pp``)."""
BINARY_STATISTICS: Final = ("accuracy", "success-rate", "perturbed-accuracy")
"""Defined on a 0/1 outcome only (correctness): the seed's three metrics."""
QR_KEYS: Final = ("arm", "contrast", "statistic", "min_pp", "max_pp", "sides", "min_difference_pp")
"""The keys a qr-bootstrap hypothesis takes besides ``id``, ``description``, ``test``,
``outcome``, ``alpha``, ``family`` and ``stimuli``."""
NOT_TAKEN: Final = (
    "margin_pp",
    "pairing",
    "correction",
    "variants",
    "variant",
    "basis",
    "samples",
    "incomplete",
)
"""Hypothesis keys of other tests, refused on a qr-bootstrap hypothesis (``correction``: the
test gives an interval, no p-value, so there is nothing to adjust)."""


@dataclass(frozen=True)
class Outcome:
    """A per-trial outcome a qr-bootstrap hypothesis may read (one row of :data:`QR_OUTCOMES`).

    ``column`` is the analysis dataset's trial column (``docs/analysis.md`` §2); a value is
    defined on an analysable trial whose cell is a finite number. ``binary``: every value is 0
    or 1 (needed by ``accuracy``, ``success-rate``, ``perturbed-accuracy``); ``share``: a share
    in [0, 1], so bounds are declared in percentage points (else only ``difference`` with
    ``sides`` may test it). ``cannot(parser, steps)`` gives why a study with that parser and
    those ``[steps]`` cannot produce the outcome, or None when it can.
    """

    name: str
    column: str
    binary: bool
    share: bool
    cannot: Callable[[str, Mapping[str, Any]], str | None]
    meaning: str


def _single_answer(parser: str, steps: Mapping[str, Any]) -> str | None:
    if parser == "tumbling-e-json":
        return (
            "parser 'tumbling-e-json' scores a chart's glyphs, not one answer per trial: use "
            "'glyph_accuracy'"
        )
    return None


def _glyphs(parser: str, steps: Mapping[str, Any]) -> str | None:
    if parser != "tumbling-e-json":
        return (
            f"parser {parser!r} gives one answer per trial, not a chart's glyphs: use "
            "'trial_accuracy'"
        )
    return None


def _ddx(parser: str, steps: Mapping[str, Any]) -> str | None:
    if parser != "ddx":
        return (
            f"parser {parser!r} gives no differential-diagnosis list (the ddx metrics need "
            '[response] parser = "ddx", docs/scoring.md §12)'
        )
    return None


QR_OUTCOMES: Final[dict[str, Outcome]] = {
    "trial_accuracy": Outcome(
        "trial_accuracy",
        "accuracy",
        True,
        True,
        _single_answer,
        "1 when a single-answer trial is correct, else 0",
    ),
    "glyph_accuracy": Outcome(
        "glyph_accuracy",
        "accuracy",
        False,
        True,
        _glyphs,
        "the share of a tumbling-E chart's glyphs read correctly",
    ),
    # seed 001's differential-diagnosis metrics (docs/scoring.md §12, docs/analysis.md §9)
    "plausibility": Outcome(
        "plausibility",
        "plausibility",
        False,
        True,
        _ddx,
        "the share of a differential's diagnoses in the plausible set",
    ),
    "h_coverage": Outcome(
        "h_coverage",
        "h_coverage",
        False,
        True,
        _ddx,
        "the share of the highly likely set a differential covers",
    ),
    "s_coverage": Outcome(
        "s_coverage",
        "s_coverage",
        False,
        True,
        _ddx,
        "the share of the safety-critical set a differential covers",
    ),
    "breadth": Outcome(
        "breadth", "breadth", False, False, _ddx, "the number of diagnoses in a differential"
    ),
    "grounding_rate": Outcome(
        "grounding_rate",
        "grounding_rate",
        False,
        True,
        _ddx,
        "the share of a differential's diagnoses the input supports",
    ),
    "indirect_rate": Outcome(
        "indirect_rate",
        "indirect_rate",
        False,
        True,
        _ddx,
        "the share of a differential's diagnoses resting on claims the input lacks",
    ),
    "uncertainty": Outcome(
        "uncertainty",
        "uncertainty",
        True,
        True,
        _ddx,
        "1 when a response states diagnostic uncertainty, else 0",
    ),
}
"""Every outcome a qr-bootstrap hypothesis may name. Add a row to make a new per-trial column
testable (the verifier reads any other outcome from the trial column of that name)."""

Add = Callable[[str, str], None]


def _bound(add: Add, h: dict[str, Any], key: str, where: str) -> float | None:
    value = h.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 100:
        add(f"{where}.{key}", f"must be a number of percentage points from 0 to 100, got {value!r}")
        return None
    return float(value)


def qr_keys(add: Add, h: dict[str, Any], where: str, arms: Mapping[str, Any]) -> dict[str, Any]:
    """The qr-bootstrap keys of hypothesis ``h`` (``hypotheses[i]``), problems sent to ``add``.

    Returns the :class:`runner.spec.Hypothesis` fields it sets: ``arm`` (a one-arm statistic),
    ``statistic``, ``min_pp`` / ``max_pp``. ``contrast``, ``sides`` and ``min_difference_pp``
    are read by the caller as for every test; here they are checked against the statistic.
    """
    out: dict[str, Any] = {}
    hid = h.get("id")
    for key in NOT_TAKEN:
        if key in h and not (key == "correction" and h.get(key) == "none"):
            add(
                f"{where}.{key}",
                f"does not apply to test {QR_TEST!r} (hypothesis {hid!r}; it "
                f"takes {', '.join(QR_KEYS)})",
            )
    statistic = h.get("statistic")
    if statistic is None:
        add(
            f"{where}.statistic",
            f"missing: a {QR_TEST} hypothesis ({hid!r}) names its "
            f"statistic, one of {', '.join(STATISTICS)}",
        )
    elif statistic not in STATISTICS:
        add(
            f"{where}.statistic",
            f"unknown statistic {statistic!r} (hypothesis {hid!r}); use "
            f"one of {', '.join(STATISTICS)}",
        )
        statistic = None
    else:
        out["statistic"] = statistic
    if statistic in ARM_STATISTICS:
        if "contrast" in h:
            add(
                f"{where}.contrast",
                f"statistic {statistic!r} is of one arm: name it with 'arm', not a contrast",
            )
        arm = h.get("arm")
        if arm is None:
            add(f"{where}.arm", f"missing: statistic {statistic!r} names the arm it is of")
        elif not isinstance(arm, str) or arm not in arms:
            add(f"{where}.arm", f"unknown arm {arm!r}")
        else:
            out["arm"] = arm
    elif statistic in CONTRAST_STATISTICS and "arm" in h:
        add(
            f"{where}.arm",
            f"statistic {statistic!r} pairs two arms: name them with "
            "contrast = [perturbed, default], not 'arm'",
        )
    if statistic in RATE_STATISTICS:
        for key in ("sides", "min_difference_pp"):
            if key in h:
                add(
                    f"{where}.{key}",
                    f"does not apply to statistic {statistic!r}: a rate is "
                    "decided by one bound, min_pp (its interval's lower bound must exceed it) "
                    "or max_pp (its upper bound must stay below it)",
                )
        bounds = {key: _bound(add, h, key, where) for key in ("min_pp", "max_pp")}
        if ("min_pp" in h) == ("max_pp" in h):
            add(
                f"{where}.min_pp",
                f"statistic {statistic!r} is decided by exactly one of "
                "min_pp (the interval's lower bound must exceed it) and max_pp (its upper "
                "bound must stay below it)",
            )
        out.update({k: v for k, v in bounds.items() if v is not None})
    elif statistic == "difference":
        for key in ("min_pp", "max_pp"):
            if key in h:
                add(
                    f"{where}.{key}",
                    "does not apply to statistic 'difference' (decided by "
                    "its interval excluding 0, with sides and min_difference_pp)",
                )
    return out


def check_outcomes(add: Add, hypotheses: list[Any], parser: str, steps: Mapping[str, Any]) -> None:
    """Refuse an outcome a qr-bootstrap hypothesis names that the study cannot produce.

    ``hypotheses`` are :class:`runner.spec.Hypothesis` records in declaration order; the
    message names the hypothesis, the outcome and why (the parser, or the steps it needs).
    """
    for i, h in enumerate(hypotheses):
        if h.test != QR_TEST or not h.outcome:
            continue
        where = f"hypotheses[{i}].outcome"
        spec = QR_OUTCOMES.get(h.outcome)
        if spec is None:
            add(
                where,
                f"hypothesis {h.id!r}: unknown outcome {h.outcome!r} for test "
                f"{QR_TEST!r}; use one of {', '.join(QR_OUTCOMES)}",
            )
            continue
        why = spec.cannot(parser, steps)
        if why is not None:
            add(
                where,
                f"hypothesis {h.id!r}: this study cannot produce outcome {h.outcome!r}: {why}",
            )
            continue
        if h.statistic in BINARY_STATISTICS and not spec.binary:
            add(
                where,
                f"hypothesis {h.id!r}: statistic {h.statistic!r} needs a 0/1 outcome "
                f"(correctness); {h.outcome!r} is {spec.meaning}: use 'mean' or 'difference'",
            )
        if not spec.share and (
            h.min_pp is not None or h.max_pp is not None or h.min_difference_pp is not None
        ):
            add(
                where,
                f"hypothesis {h.id!r}: {h.outcome!r} is not a share, so bounds in "
                "percentage points do not apply: test the paired 'difference' with sides",
            )


def check_pairing(
    add: Add, hypotheses: list[Any], arms: Mapping[str, Any], replicates: int
) -> None:
    """Refuse a qr-bootstrap contrast whose two arms cannot pair by design.

    The pairs are (item, model, variant, rep) keys both arms run, so the arms must run the
    same replicates, the same item subset, the same models and the same variants
    (:class:`runner.spec.Arm` ``replicates``, ``subset``, ``models``, ``variants``); the
    message names the hypothesis and the first setting that differs. What only the data can
    tell (a trial given up) is an exclusion at analysis time.
    """
    for i, h in enumerate(hypotheses):
        if h.test != QR_TEST or h.arm is not None or not all(a in arms for a in h.contrast):
            continue
        first, second = (arms[a] for a in h.contrast)
        settings = (
            ("replicates", first.replicates or replicates, second.replicates or replicates),
            ("subset", first.subset, second.subset),
            ("models", first.models, second.models),
            ("variants", first.variants, second.variants),
        )
        for name, x, y in settings:
            if x != y:
                add(
                    f"hypotheses[{i}].contrast",
                    f"hypothesis {h.id!r}: arms {first.id!r} and "
                    f"{second.id!r} cannot pair by (item, model, variant, rep): {name} "
                    f"{x!r} vs {y!r}",
                )
                break
