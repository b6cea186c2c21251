"""Differential-diagnosis scoring, the spec side (``docs/scoring.md`` §12).

A study of open-ended differential-diagnosis lists (``[response] parser = "ddx"``) names, in
``[response.ddx]``, the recorded
model steps (``docs/prompts.md`` §8) its scores are computed from:

- ``list``: a trial step (json, set-valued) whose decision ``{"diagnoses": [...]}`` is the list
  the response gives;
- ``match``: a trial step (json, set-valued) whose decision ``{"plausible", "highly_likely",
  "safety_critical"}`` holds the listed diagnoses in the plausible set and the reference
  entries the list covers;
- ``reference``: ``"items"`` (each item's ``metadata`` arrays ``reference_plausible``,
  ``reference_highly_likely``, ``reference_safety_critical``, locked with the item file) or an
  item step (json, set-valued, the same three members) that builds them before any trial;
- ``grounding`` (optional): a trial step (json, set-valued) ``{"grounded", "indirect"}``;
- ``uncertainty`` (optional): a trial step with the label parser and labels ``uncertain`` and
  ``certain``.

This module checks that table at lock (strict keys, each step of the right kind and shape,
every item with its supplied reference sets) and the hypotheses that name a ddx metric as
their outcome. The scores themselves are computed in ``analysis._ddx``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from runner.steps._core import StepSpec

__all__ = [
    "DDX_KEYS",
    "DDX_METRICS",
    "METRIC_OUTCOME_TESTS",
    "PARSER",
    "REFERENCE_FIELDS",
    "REFERENCE_SETS",
    "DdxSpec",
    "hypothesis_problems",
    "parse_ddx",
    "supplied_reference",
]

PARSER: Final = "ddx"
DDX_KEYS: Final = ("list", "match", "reference", "grounding", "uncertainty")
"""The keys of ``[response.ddx]``."""
REFERENCE_SETS: Final = ("plausible", "highly_likely", "safety_critical")
"""The members of a reference set and of a match decision."""
REFERENCE_FIELDS: Final = tuple(f"reference_{name}" for name in REFERENCE_SETS)
"""The item ``metadata`` arrays of supplied reference sets."""
DDX_METRICS: Final = (
    "plausibility",
    "h_coverage",
    "s_coverage",
    "breadth",
    "grounding_rate",
    "indirect_rate",
    "uncertainty",
)
"""The per-trial metrics (analysis dataset columns, ``docs/analysis.md`` §2)."""
METRIC_OUTCOME_TESTS: Final = ("paired-t", "qr-bootstrap", "factorial")
"""Tests that may take a ddx metric as their outcome (the metric replaces trial accuracy)."""
_NEEDS: Final = {
    "grounding_rate": "grounding",
    "indirect_rate": "grounding",
    "uncertainty": "uncertainty",
}


@dataclass(frozen=True)
class DdxSpec:
    """The validated ``[response.ddx]`` table; ``reference`` is ``"items"`` or an item step.

    ``list_step`` is the table's ``list`` (the list step's name).
    """

    list_step: str
    match: str
    reference: str
    grounding: str | None = None
    uncertainty: str | None = None

    def record(self) -> dict[str, str]:
        """The table as ``protocol.locked`` ``response.ddx`` records it."""
        out = {"list": self.list_step, "match": self.match, "reference": self.reference}
        if self.grounding is not None:
            out["grounding"] = self.grounding
        if self.uncertainty is not None:
            out["uncertainty"] = self.uncertainty
        return out

    @property
    def reference_step(self) -> str | None:
        """The reference item step's name, or None for supplied reference sets."""
        return None if self.reference == "items" else self.reference

    def trial_steps(self) -> list[str]:
        """The trial steps a ddx score reads, in the order list, match, grounding, uncertainty."""
        return [s for s in (self.list_step, self.match, self.grounding, self.uncertainty) if s]


def _set_step(
    add: Callable[[str, str], None],
    key: str,
    steps: Mapping[str, StepSpec],
    name: Any,
    on: str,
    members: Sequence[str],
) -> str | None:
    where = f"response.ddx.{key}"
    spec = steps.get(name) if isinstance(name, str) else None
    if spec is None:
        add(where, f"must name a [steps.<NAME>] table, got {name!r}")
        return None
    if spec.on != on:
        add(where, f'step {name!r} must be an {on} step (on = "{on}"), not on = "{spec.on}"')
    missing = [m for m in members if m not in spec.sets]
    if spec.parser != "json" or not spec.sets or missing:
        add(
            where,
            f"step {name!r} must use the json parser with a schema whose properties are "
            f"all arrays of strings, among them {', '.join(members)}"
            + (f" (missing: {', '.join(missing)})" if spec.sets and missing else ""),
        )
    return str(name)


def parse_ddx(
    add: Callable[[str, str], None],
    response: Mapping[str, Any],
    parser: str,
    steps: Mapping[str, StepSpec],
    items: Iterable[Any] | None,
) -> DdxSpec | None:
    """Validate ``[response.ddx]`` against the steps and items; problems go to ``add``.

    None when the parser is not ``ddx`` (a ``ddx`` table is then refused) or the table is
    unusable. ``items``: the loaded item file (None when the study has none).
    """
    table = response.get("ddx")
    if parser != PARSER:
        if table is not None:
            add("response.ddx", f'applies to parser = "ddx" only, not {parser!r}')
        return None
    if not isinstance(table, dict):
        add(
            "response.ddx",
            'parser = "ddx" needs a [response.ddx] table naming its steps '
            "(list, match, reference; optional grounding, uncertainty)",
        )
        return None
    if items is None:
        add("response.parser", "ddx scores item studies ([stimuli] items) only")
    for key in ("list", "match", "reference"):
        if key not in table:
            add(f"response.ddx.{key}", "is required")
    if any(key not in table for key in ("list", "match", "reference")):
        return None
    listed = _set_step(add, "list", steps, table["list"], "trial", ("diagnoses",))
    match = _set_step(add, "match", steps, table["match"], "trial", REFERENCE_SETS)
    reference = table["reference"]
    if reference != "items":
        reference = _set_step(add, "reference", steps, reference, "item", REFERENCE_SETS)
    elif items is not None:
        for item in items:
            problem = supplied_reference(item.metadata)
            if isinstance(problem, str):
                add("response.ddx.reference", f"item {item.id!r}: {problem}")
    grounding = uncertainty = None
    if "grounding" in table:
        grounding = _set_step(
            add, "grounding", steps, table["grounding"], "trial", ("grounded", "indirect")
        )
    if "uncertainty" in table:
        name = table["uncertainty"]
        spec = steps.get(name) if isinstance(name, str) else None
        if (
            spec is None
            or spec.on != "trial"
            or spec.parser != "label"
            or not ({"uncertain", "certain"} <= set(spec.labels))
        ):
            add(
                "response.ddx.uncertainty",
                f"must name a trial step with the label parser and "
                f'the labels "uncertain" and "certain", got {name!r}',
            )
        else:
            uncertainty = str(name)
    named = [n for n in (listed, match, reference, grounding, uncertainty) if n and n != "items"]
    if len(set(named)) != len(named):
        add("response.ddx", f"each role needs its own step; named: {named}")
    if None in (listed, match, reference):
        return None
    assert listed is not None and match is not None and reference is not None
    return DdxSpec(listed, match, reference, grounding, uncertainty)


def supplied_reference(metadata: Mapping[str, Any]) -> dict[str, list[str]] | str:
    """An item's supplied reference sets (``metadata.reference_*`` arrays), or why not."""
    out: dict[str, list[str]] = {}
    for name, key in zip(REFERENCE_SETS, REFERENCE_FIELDS, strict=True):
        value = metadata.get(key)
        if value is None:
            return (
                f'has no reference set: metadata.{key} is missing (reference = "items" '
                "needs the three arrays " + ", ".join(REFERENCE_FIELDS) + ")"
            )
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return f"metadata.{key} must be an array of strings, got {value!r}"
        out[name] = list(value)
    return out


def hypothesis_problems(
    hypotheses: Sequence[Mapping[str, Any]], parser: str, ddx: DdxSpec | None
) -> list[tuple[str, str]]:
    """(field, message) for each hypothesis whose outcome the response type cannot carry.

    A ddx metric is an outcome of a ddx study only, of a test in :data:`METRIC_OUTCOME_TESTS`,
    and ``grounding_rate`` / ``indirect_rate`` / ``uncertainty`` need their step; a ddx study
    has no trial accuracy (its hypotheses name a metric).
    """
    out = []
    for i, h in enumerate(hypotheses):
        where = f"hypotheses[{i}] ({h.get('id')})"
        outcome = h.get("outcome")
        if outcome in DDX_METRICS:
            if parser != PARSER:
                out.append(
                    (
                        f"{where}.outcome",
                        f"{outcome!r} is a differential-diagnosis "
                        f"metric; parser {parser!r} gives no differential list (it needs "
                        '[response] parser = "ddx")',
                    )
                )
            elif ddx is not None and outcome in _NEEDS and getattr(ddx, _NEEDS[outcome]) is None:
                out.append(
                    (
                        f"{where}.outcome",
                        f'{outcome!r} needs [response.ddx] {_NEEDS[outcome]} = "<step>"',
                    )
                )
            elif h.get("test") not in METRIC_OUTCOME_TESTS:
                out.append(
                    (
                        f"{where}.test",
                        f"test {h.get('test')!r} cannot take the metric "
                        f"{outcome!r}; use one of {', '.join(METRIC_OUTCOME_TESTS)}",
                    )
                )
        elif parser == PARSER:
            out.append(
                (
                    f"{where}.outcome",
                    f"a ddx study has no trial accuracy: name one of {', '.join(DDX_METRICS)}",
                )
            )
    return out
