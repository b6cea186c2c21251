"""``factorial``: a Wald test of one term of the ``[factorial]`` design's model.

``effect`` names the factor of a main effect or the factors of an interaction; the term must
be crossed by ``[factorial]`` and estimable over its cells (``docs/analysis.md``, "Factorial
designs"), and the outcome one of :data:`runner._factors.FACTORIAL_OUTCOMES`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from runner._factors import FACTORIAL_OUTCOMES, Factor, design_columns
from runner.statistics._base import Add, Design, Registered, StatisticSpec, name_list, text

NAME: Final = "factorial"
Columns = list[tuple[str, dict[str, str]]]


def _outcome(add: Add, h: dict[str, Any], where: str, parser: str) -> str:
    """A factorial hypothesis's outcome: a name of :data:`runner._factors.FACTORIAL_OUTCOMES`."""
    if parser == "tumbling-e-json":
        add(
            f"{where}.test",
            "a factorial test models a per-trial outcome of a single-answer "
            "parser (trial_accuracy), not a tumbling-E chart's glyph accuracy",
        )
    outcome = text(add, h, "outcome", where, "trial_accuracy")
    if outcome and outcome not in FACTORIAL_OUTCOMES:
        add(
            f"{where}.outcome",
            f"unknown outcome {outcome!r} for a factorial test; use "
            f"{' or '.join(FACTORIAL_OUTCOMES)}",
        )
    return outcome


def _read(add: Add, h: Mapping[str, Any], where: str, arms: Mapping[str, Any]) -> dict[str, Any]:
    """``effect`` (and the keys a factorial test refuses)."""
    for key in ("min_difference_pp", "margin_pp", "stimuli", "pairing"):
        if key in h:
            add(
                f"{where}.{key}",
                "does not apply to test 'factorial' (it takes effect, "
                "outcome, alpha, sides, correction, family)",
            )
    if h.get("sides", "two-sided") != "two-sided":
        add(f"{where}.sides", 'a factorial test is a two-sided Wald test: sides = "two-sided"')
    effect = name_list(add, h, "effect", where)
    if effect is not None:
        return {"effect": effect}
    if "effect" not in h:
        add(
            f"{where}.effect",
            "missing (a factorial test names the factor of a main "
            'effect, or the factors of an interaction: effect = ["belief", "tone"])',
        )
    return {}


def _unavailable(design: Design) -> str | None:
    """Why the study's design allows no factorial test, or None."""
    if design.factorial is None:
        return "a factorial test needs a [factorial] design"
    if design.declares_variants:
        return (
            "a factorial test of a study with [variants] is not "
            "available (the variants are not factors of the model)"
        )
    return None


def _interactions(
    add: Add, tests: list[tuple[int, Registered]], order: list[str]
) -> list[tuple[str, ...]] | None:
    """The interactions the hypotheses register, or None after naming a factor not crossed."""
    inters: list[tuple[str, ...]] = []
    for i, h in tests:
        effect = h.effect or ()
        outside = [f for f in effect if f not in order]
        if outside:
            add(
                f"hypotheses[{i}].effect",
                f"factor {outside[0]!r} is not crossed by "
                f"[factorial] (its factors: {', '.join(order)})",
            )
            return None
        key = tuple(sorted(effect, key=order.index))
        if len(effect) > 1 and key not in inters:
            inters.append(key)
    return inters


def _against_factors(add: Add, hypotheses: Sequence[Any], design: Design) -> None:
    """Each effect: factors crossed by ``[factorial]``, and a term estimable apart.

    The model has every crossed factor's main effects and every interaction a hypothesis
    registers; over the design's cells its columns must be linearly independent, else a term
    is aliased (a fraction) and its test is refused.
    """
    tests = [(i, h) for i, h in enumerate(hypotheses) if h.test == NAME]
    if not tests:
        return
    why = _unavailable(design)
    if why is not None:
        for i, _ in tests:
            add(f"hypotheses[{i}].test", why)
        return
    order = list(design.factorial.factors)
    inters = _interactions(add, tests, order)
    if inters is not None:
        _aliased(add, tests, order, inters, design)


def _aliased(
    add: Add,
    tests: list[tuple[int, Registered]],
    order: list[str],
    inters: list[tuple[str, ...]],
    design: Design,
) -> None:
    """Refuse each hypothesis whose term the cells cannot estimate apart from the others."""
    import numpy as np  # here: a study without a factorial test never loads numpy

    factors: Mapping[str, Factor] = design.factors
    levels = [(f, [lv.name for lv in factors[f].levels]) for f in order]
    cols: Columns = design_columns(levels, inters)
    cells: list[dict[str, str]] = list(design.factorial.cells)

    def column(at: dict[str, str]) -> list[float]:
        return [1.0 if all(cell[f] == v for f, v in at.items()) else 0.0 for cell in cells]

    x = np.array([[1.0] * len(cells)] + [column(at) for _, at in cols]).T
    full = int(np.linalg.matrix_rank(x))
    if full == x.shape[1]:
        return
    for i, h in tests:
        effect = tuple(sorted(h.effect or (), key=order.index))
        mine = [j + 1 for j, (_, at) in enumerate(cols) if tuple(at) == effect]
        rest = [j for j in range(x.shape[1]) if j not in mine]
        if int(np.linalg.matrix_rank(x[:, rest])) + len(mine) == full:
            continue
        partner = _alias_of(effect, cols, cells, factors)
        what = (
            "interaction " + " × ".join(effect) if len(effect) > 1 else f"main effect {effect[0]}"
        )
        add(
            f"hypotheses[{i}].effect",
            f"the {what} is aliased{partner} in this design: the "
            "cells do not cross those factors, so its term cannot be estimated apart from "
            "the model's other terms",
        )


def _alias_of(
    effect: tuple[str, ...],
    cols: Columns,
    cells: list[dict[str, str]],
    factors: Mapping[str, Factor],
) -> str:
    """`` with <term>`` when another model term has the same ±1 contrast over the cells."""

    def code(names: Iterable[str]) -> list[int]:
        out = []
        for cell in cells:
            sign = 1
            for f in names:
                sign *= -1 if cell[f] == factors[f].reference else 1
            out.append(sign)
        return out

    mine = code(effect)
    seen: list[tuple[str, ...]] = []
    for _, at in cols:
        names = tuple(at)
        if names == effect or names in seen:
            continue
        seen.append(names)
        other = code(names)
        if other == mine or other == [-v for v in mine]:
            return " with " + (" × ".join(names) if len(names) > 1 else names[0])
    return ""


SPEC = StatisticSpec(
    NAME,
    13,
    subject="effect",
    no_contrast="a factorial test names effect = [...], not a contrast",
    outcome=_outcome,
    takes=("effect",),
    read=_read,
    against_factors=_against_factors,
)
