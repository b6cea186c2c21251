"""Recorded model steps: ``[steps.NAME]`` (``docs/adr/0005-recorded-model-steps.md``).

A *step* is a model call around the call under test: an *item step* (``on = "item"``, once per
item and model, before any trial that reads it: screening, rewriting, extraction) or a *trial
step* (``on = "trial"``, once per trial and model, after the trial's response: judges). Its
request is rendered from a locked template whose slots name its inputs (``docs/prompts.md``
§8); the slots make a graph that :func:`step_problems` checks at lock (every input produced by
an earlier step, no cycle, no trial step read before its trial, no blind step that could see
the arm). The runner sends step calls through the same engine as trials (``docs/trials.md``
§5); :func:`parse_output` and :func:`aggregate` turn the recorded responses into the values
later requests and scores read.

This module holds what the spec, the lock, the runner and the scorer share; it imports only
``ledger`` and the spec helpers below it.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from runner._schema import STEP_KEYS as STEP_KEYS
from runner.step_kinds import REGISTRY as STEP_KIND_REGISTRY
from runner.step_kinds import STEP_KINDS, StepParts
from runner.step_kinds.json import schema_problem as schema_problem
from runner.step_kinds.json import set_fields as set_fields

__all__ = [
    "AGGREGATES",
    "LEAK_SLOTS",
    "STEP_KEYS",
    "STEP_PARSERS",
    "UNDECIDED",
    "StepCall",
    "StepSpec",
    "Verification",
    "aggregate",
    "aggregate_record",
    "aggregate_sets",
    "call_order",
    "covariate_problems",
    "covariates_table",
    "item_step_calls",
    "kept_by_rule",
    "normalise_element",
    "parse_output",
    "review_sample",
    "set_fields",
    "step_graph",
    "step_layers",
    "step_slots",
    "synonym_groups",
    "trial_step_calls",
    "votes_text",
]

UNPARSEABLE_KEYS: Final = ("retry", "then")
STEP_PARSERS: Final = STEP_KINDS
"""The step parsers (step kinds) of :mod:`runner.step_kinds`, in registry order."""
AGGREGATES: Final = ("majority", "unanimous")
SEES: Final = ("blind", "request")
STEP_NAME: Final = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
LEAK_SLOTS: Final = frozenset({"arm", "trial", "target_model", "request"})
"""Slots that carry the condition of a trial; a blind step may not use them (nor ``factor.*``)."""
UNDECIDED: Final = None
"""The aggregate of votes that reach no decision by the rule (a tie under majority, ...)."""


@dataclass(frozen=True)
class StepSpec:
    """One ``[steps.<NAME>]`` table, validated.

    ``models`` are ``[models.<NAME>]`` names (``(None,)`` in a study with one ``[model]``);
    ``aggregate`` is ``"majority"``, ``"unanimous"`` or an integer k (k of n agree); ``retry``
    is how many more calls an unparseable response earns, ``then`` what happens after them
    (``"exclude"``: the step's decision is missing and what reads it is a recorded exclusion;
    ``"stop"``: the run stops). ``keep`` (item steps with the ``label`` parser) lists the labels
    that keep an item in the study: a screening step. ``sets`` names the members of a
    *set-valued* step (a ``json`` step whose schema's properties are all arrays of strings),
    whose votes are aggregated element by element (:func:`aggregate_sets`); empty otherwise.
    """

    name: str
    on: str
    models: tuple[str | None, ...]
    template: Path
    system: tuple[str, ...]
    parser: str
    labels: tuple[str, ...]
    schema: Path | None
    retry: int
    then: str
    aggregate: str | int
    sees: str
    keep: tuple[str, ...] | None
    sets: tuple[str, ...] = ()
    verified_by: Verification | None = None
    """``verified_by``: a semantic verifier (another item step) that accepts or rejects each
    sample of this item step (``docs/prompts.md`` §8.6)."""
    keep_rule: dict[str, dict[str, Any]] | None = None
    """A ``json`` screening step's rule (``{"equals": {field: value}, "at_least": {field: x}}``,
    ``docs/prompts.md`` §8.3): an item is kept when every member holds."""
    match_by: str | None = None
    """``match_by``: the synonym-matcher step whose groups merge a set-valued step's elements
    before the vote (``docs/prompts.md`` §8.3)."""

    @property
    def screens(self) -> bool:
        """Whether the step is a screening step (``keep``, of either form)."""
        return self.keep is not None or self.keep_rule is not None

    def keeps(self, decision: Any) -> bool:
        """Whether a screening step's ``decision`` keeps the item (no decision keeps none)."""
        if self.keep is not None:
            return decision is not None and decision in self.keep
        if self.keep_rule is not None:
            return kept_by_rule(self.keep_rule, decision)
        return True

    def record(self, rel: Any) -> dict[str, Any]:
        """The step as ``protocol.locked`` ``steps`` records it (``rel``: path -> study path)."""
        out: dict[str, Any] = {
            "on": self.on,
            "models": [m if m is not None else "" for m in self.models],
            "template": rel(self.template),
            "system": list(self.system),
            "parser": self.parser,
            "on_unparseable": {"retry": self.retry, "then": self.then},
            "aggregate": aggregate_record(self.aggregate),
            "sees": self.sees,
        }
        if self.labels:
            out["labels"] = list(self.labels)
        if self.schema is not None:
            out["schema"] = rel(self.schema)
        if self.keep is not None:
            out["keep"] = list(self.keep)
        if self.keep_rule is not None:
            out["keep"] = {k: dict(v) for k, v in self.keep_rule.items()}
        if self.verified_by is not None:
            out["verified_by"] = self.verified_by.record()
        if self.match_by is not None:
            out["match_by"] = self.match_by
        return out


@dataclass(frozen=True)
class Verification:
    """``verified_by = { step, accept, retry, then }`` of an item step (prompts.md §8.6).

    Sample k of the verified step is judged by sample k of ``step`` (an item step with the
    label parser reading ``{steps.<verified>}``); a decision in ``accept`` accepts it. Up to
    ``retry`` rejected samples earn another; after them ``then`` says what happens:
    ``"exclude"`` (no decision: what reads the step is a recorded exclusion) or ``"stop"``.
    """

    step: str
    accept: tuple[str, ...]
    retry: int
    then: str

    @property
    def samples(self) -> int:
        """The most samples the verified step may take per item (``retry + 1``)."""
        return self.retry + 1

    def record(self) -> dict[str, Any]:
        """As ``protocol.locked`` ``steps.NAME.verified_by`` records it."""
        return {
            "step": self.step,
            "accept": list(self.accept),
            "retry": self.retry,
            "then": self.then,
        }


VERIFIED_BY_KEYS: Final = ("step", "accept", "retry", "then")
"""The keys of ``verified_by`` (``docs/prompts.md`` §8.6)."""


def _verified_by(value: Any, where: str, add: Any, on: str) -> Verification | None:
    """Validate a ``verified_by`` table (the verifier step itself is checked once all are read)."""
    shape = (
        'verified_by = { step = "NAME", accept = ["label", ...], retry = N, '
        'then = "exclude" | "stop" }'
    )
    if on != "item":
        add(where, "applies to item steps (a verifier judges each sample of an item step)")
        return None
    if not isinstance(value, dict):
        add(where, f"must be a table: {shape}")
        return None
    ok = _verifier_named(value, where, add, shape)
    step = value.get("step")
    accept = value.get("accept")
    retry = value.get("retry", 0)
    if isinstance(retry, bool) or not isinstance(retry, int) or not 0 <= retry <= 10:
        add(f"{where}.retry", f"must be an integer from 0 to 10, got {retry!r}")
        ok = False
    then = value.get("then", "exclude")
    if then not in ("exclude", "stop"):
        add(f"{where}.then", f'must be "exclude" or "stop", got {then!r}')
        ok = False
    if not ok:
        return None
    return Verification(str(step), tuple(accept or ()), int(retry), str(then))


def _verifier_named(value: dict[str, Any], where: str, add: Any, shape: str) -> bool:
    """``verified_by``'s keys, its ``step`` and its ``accept`` labels; False if one is wrong."""
    ok = True
    for key in value:
        if key not in VERIFIED_BY_KEYS:
            add(where, f"unknown key {key!r} (keys: {', '.join(VERIFIED_BY_KEYS)})")
            ok = False
    step = value.get("step")
    if not isinstance(step, str) or not step:
        add(f"{where}.step", f"must name the verifier step: {shape}")
        ok = False
    accept = value.get("accept")
    if not isinstance(accept, list) or not accept or not all(isinstance(a, str) for a in accept):
        add(
            f"{where}.accept",
            "must be a non-empty list of the verifier's labels that accept a sample",
        )
        ok = False
    return ok


def _check_verifiers(steps: Mapping[str, StepSpec], add: Any) -> None:
    """Each ``verified_by`` names an item step with the label parser, not itself verified."""
    hosts: dict[str, str] = {}
    for name, spec in steps.items():
        ver = spec.verified_by
        if ver is None:
            continue
        where = f"steps.{name}.verified_by"
        other = steps.get(ver.step)
        if other is None or ver.step == name:
            add(f"{where}.step", f"{ver.step!r} is not another step ([steps.<NAME>])")
            continue
        if other.on != "item" or other.parser != "label":
            add(
                f"{where}.step",
                f"the verifier {ver.step!r} must be an item step with the "
                "label parser (its labels say whether a sample is accepted)",
            )
            continue
        bad = [a for a in ver.accept if a not in other.labels]
        if bad:
            add(
                f"{where}.accept",
                f"{bad[0]!r} is not a label of step {ver.step!r} ({list(other.labels)})",
            )
        if other.verified_by is not None:
            add(
                f"{where}.step",
                f"the verifier {ver.step!r} is itself verified; a verifier's "
                "samples follow its step's",
            )
        if other.screens:
            add(
                f"{where}.step",
                f"the verifier {ver.step!r} is a screening step (keep); a "
                "verifier judges samples, not items",
            )
        if ver.step in hosts:
            add(f"{where}.step", f"step {ver.step!r} already verifies {hosts[ver.step]!r}")
        hosts[ver.step] = name


def kept_by_rule(rule: Mapping[str, Mapping[str, Any]], decision: Any) -> bool:
    """Whether a ``json`` decision satisfies a screening rule (``docs/prompts.md`` §8.3).

    Every ``equals`` member must be present and equal (same JSON type: ``true`` is not ``1``);
    every ``at_least`` member present, a number (not a boolean), and ``>=`` its threshold.
    """
    if not isinstance(decision, dict):
        return False
    for name, want in (rule.get("equals") or {}).items():
        got = decision.get(name, _MISSING)
        same_kind = type(got) is type(want) or (_number(got) and _number(want))
        if got is _MISSING or not same_kind or got != want:
            return False
    for name, low in (rule.get("at_least") or {}).items():
        got = decision.get(name)
        if not _number(got) or got < low:
            return False
    return True


_MISSING: Final = object()


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def aggregate_record(rule: str | int) -> Any:
    """The aggregation rule as recorded: ``"majority"``, ``"unanimous"`` or ``{"k": N}``."""
    return {"k": rule} if isinstance(rule, int) else rule


# ------------------------------------------------------------------ spec


def parse_steps(
    raw: Any,
    root: Path,
    add: Any,
    models: Sequence[str] | None,
    components: Mapping[str, Path],
    inside: Any,
) -> dict[str, StepSpec]:
    """Validate the ``steps`` section of a parsed ``study.toml``.

    ``add(field, message)`` records a problem; ``models`` are the ``[models]`` names (None for
    a ``[model]`` study); ``inside(rel, where)`` resolves a study path, recording a problem if
    it is outside the study or missing.
    """
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        add("steps", "declare each step as a [steps.<NAME>] table")
        return {}
    out = {
        name: _parse_step(name, table, root, add, models, components, inside)
        for name, table in raw.items()
    }
    _check_verifiers(out, add)
    _check_matchers(out, add)
    return out


def _parse_step(
    name: str,
    table: dict[str, Any],
    root: Path,
    add: Any,
    models: Sequence[str] | None,
    components: Mapping[str, Path],
    inside: Any,
) -> StepSpec:
    """Validate one ``[steps.<NAME>]`` table (problems in the order of its keys' checks)."""
    where = f"steps.{name}"
    if not STEP_NAME.match(name):
        add(
            where,
            "step names are a lowercase letter, then lowercase letters, digits or "
            "'_' (at most 32): they are slot names ({steps.NAME})",
        )
    on = table.get("on")
    if on not in ("item", "trial"):
        add(f"{where}.on", f'must be "item" or "trial", got {on!r}')
        on = "item"
    step_models = _step_models(table, where, add, models)
    template = _step_template(table, where, add, root, inside)
    system = _step_system(table, where, add, components)
    parser = table.get("parser", "text")
    if parser not in STEP_KIND_REGISTRY:
        add(
            f"{where}.parser",
            f"unknown step parser {parser!r}; use one of {', '.join(STEP_PARSERS)}",
        )
        parser = "text"
    parts = _kind_parts(table, where, add, parser, inside)
    labels, schema, sets = parts.labels, parts.schema, parts.sets
    retry, then = _unparseable(table, where, add)
    rule = _aggregate(table, where, add, len(step_models))
    sees = _sees(table, where, add, on)
    verified = (
        _verified_by(table["verified_by"], f"{where}.verified_by", add, on)
        if "verified_by" in table
        else None
    )
    keep, keep_rule = _keep(table, where, add, (on, parser), labels, schema)
    match_by = table.get("match_by")
    if match_by is not None and not (isinstance(match_by, str) and match_by):
        add(f"{where}.match_by", f"must be the name of a matcher step, got {match_by!r}")
        match_by = None
    return StepSpec(
        name,
        on,
        step_models,
        template,
        system,
        parser,
        labels,
        schema,
        retry,
        then,
        rule,
        sees,
        keep,
        sets,
        verified,
        keep_rule,
        match_by,
    )


def _step_template(table: dict[str, Any], where: str, add: Any, root: Path, inside: Any) -> Path:
    """A step's ``template`` (the study folder itself when it is missing: reported)."""
    template_rel = table.get("template")
    if not isinstance(template_rel, str) or not template_rel:
        add(f"{where}.template", f"must be a template file path, got {template_rel!r}")
        return root / "."
    path: Path = inside(template_rel, f"{where}.template")
    return path


def _step_system(
    table: dict[str, Any], where: str, add: Any, components: Mapping[str, Path]
) -> tuple[str, ...]:
    """A step's ``system`` components, each a component of the study."""
    system = table.get("system", [])
    if not isinstance(system, list) or not all(isinstance(s, str) for s in system):
        add(f"{where}.system", "must be a list of component names")
        system = []
    for comp in system:
        if comp not in components:
            add(f"{where}.system", f"unknown component {comp!r}")
    return tuple(system)


def _kind_parts(table: dict[str, Any], where: str, add: Any, parser: str, inside: Any) -> StepParts:
    """The step kind's own key read by its entry; every other kind's key refused, in order."""
    parts = StepParts()
    for kind in STEP_KIND_REGISTRY.values():
        if kind.name == parser and kind.read is not None:
            parts = kind.read(table, where, add, inside)
        elif kind.key is not None and kind.name != parser and kind.key in table:
            add(f"{where}.{kind.key}", f"applies to the {kind.name} parser only, not {parser!r}")
    return parts


def _sees(table: dict[str, Any], where: str, add: Any, on: str) -> str:
    """What a step sees: ``blind``, or (trial steps) the ``request``."""
    sees = table.get("sees", "blind")
    if sees not in SEES:
        add(f"{where}.sees", f'must be "blind" or "request", got {sees!r}')
        sees = "blind"
    if sees == "request" and on == "item":
        add(
            f"{where}.sees",
            "an item step runs before any request exists; only a trial step may see the request",
        )
    return str(sees)


def _keep(
    table: dict[str, Any],
    where: str,
    add: Any,
    kind: tuple[str, str],
    labels: tuple[str, ...],
    schema: Path | None,
) -> tuple[tuple[str, ...] | None, Any]:
    """A screening step's ``keep``: (labels kept, None), or (None, a json rule)."""
    if "keep" not in table:
        return None, None
    on, parser = kind
    value = table["keep"]
    if on != "item" or parser not in ("label", "json"):
        add(f"{where}.keep", "applies to item steps with the label or json parser (screening)")
        return None, None
    if parser == "json":
        return None, _keep_rule(value, f"{where}.keep", add, schema)
    if not isinstance(value, list) or not value or not all(v in labels for v in value):
        add(f"{where}.keep", f"must be a non-empty list of the step's labels {list(labels)}")
        return None, None
    return tuple(value), None


def _check_matchers(steps: Mapping[str, StepSpec], add: Any) -> None:
    """``docs/prompts.md`` §8.3: each ``match_by`` names a synonym matcher of the right kind."""
    used: dict[str, str] = {}
    for name, spec in steps.items():
        if spec.match_by is None:
            continue
        where = f"steps.{name}.match_by"
        problem = _matched_problem(spec) or _matcher_problem(spec, steps.get(spec.match_by))
        if problem is None and spec.match_by in used:
            problem = f"{spec.match_by!r} already matches step {used[spec.match_by]!r}"
        if problem is not None:
            add(where, problem)
        else:
            used[spec.match_by] = name


def _matched_problem(spec: StepSpec) -> str | None:
    """Why ``spec`` may not be synonym-matched, or None."""
    if not spec.sets:
        return (
            "applies to set-valued steps only (the json parser, a schema whose "
            "properties are all arrays of strings)"
        )
    if spec.on != "item":
        return "applies to item steps only (a trial step's synonym matcher is not built)"
    if spec.verified_by is not None or spec.screens:
        return "a verified or screening step may not also be synonym-matched"
    return None


def _matcher_problem(spec: StepSpec, matcher: StepSpec | None) -> str | None:
    """Why ``matcher`` (the step ``spec.match_by`` names) cannot match ``spec``, or None."""
    if matcher is None:
        return f"no step named {spec.match_by!r}"
    if matcher.name == spec.name or matcher.match_by is not None:
        return (
            f"{spec.match_by!r} is itself synonym-matched or is this step: "
            "a matcher may not be matched (a cycle)"
        )
    if matcher.on != spec.on:
        return f"the matcher {spec.match_by!r} must run on {spec.on!r} like this step"
    if matcher.parser != "json" or matcher.sets != ("groups",):
        return (
            f"the matcher {spec.match_by!r} must have the json parser and a schema "
            'whose only property is "groups", an array of strings'
        )
    if len(matcher.models) != 1:
        return (
            f"the matcher {spec.match_by!r} must have one model (several matchers' "
            "groups are not aggregated)"
        )
    if matcher.verified_by is not None or matcher.screens:
        return f"the matcher {spec.match_by!r} may not be verified or screen items"
    return None


def synonym_groups(decision: Any) -> list[list[str]]:
    """The groups of a matcher decision: each ``groups`` string split at ``|``, normalised.

    Empty members are dropped; a group is kept when it has a member (``docs/prompts.md`` §8.3).
    """
    out = []
    for text in (decision or {}).get("groups") or []:
        members = [m for m in (normalise_element(p) for p in text.split("|")) if m]
        if members:
            out.append(members)
    return out


def votes_text(votes: Sequence[Any], fields: Sequence[str]) -> str:
    """The ``{votes.NAME}`` slot: the sorted, normalised union of the parsed votes' elements.

    Every member's elements of every parsed vote, normalised (:func:`normalise_element`),
    empty ones dropped, de-duplicated, sorted by code point, one per line.
    """
    union = {
        normalise_element(e)
        for v in votes
        if isinstance(v, dict)
        for f in fields
        for e in (v.get(f) or [])
    }
    return "\n".join(sorted(u for u in union if u))


KEEP_RULE_KEYS: Final = ("equals", "at_least")
"""The keys of a ``json`` screening step's ``keep`` table (``docs/prompts.md`` §8.3)."""


def _keep_rule(
    value: Any, where: str, add: Any, schema: Path | None
) -> dict[str, dict[str, Any]] | None:
    """Validate ``keep = { equals = {...}, at_least = {...} }`` against the step's schema."""
    shape = (
        "keep = { equals = { FIELD = value, ... }, at_least = { FIELD = number, ... } } "
        "(one or both)"
    )
    if not isinstance(value, dict) or not value:
        add(where, f"a json screening step's keep is a table: {shape}")
        return None
    props = _schema_properties(schema)
    ok = True
    for key in value:
        if key not in KEEP_RULE_KEYS:
            add(where, f"unknown key {key!r} (keys: {', '.join(KEEP_RULE_KEYS)})")
            ok = False
    out: dict[str, dict[str, Any]] = {}
    for key in KEEP_RULE_KEYS:
        if key not in value:
            continue
        table = value[key]
        if not isinstance(table, dict) or not table:
            add(f"{where}.{key}", f"must be a non-empty table of schema fields: {shape}")
            ok = False
            continue
        for name, want in table.items():
            problem = _keep_field_problem(key, name, want, props)
            if problem is not None:
                add(f"{where}.{key}.{name}", problem)
                ok = False
        out[key] = dict(table)
    return out if ok and out else None


def _schema_properties(schema: Path | None) -> dict[str, Any]:
    """The properties of a step's schema when it is one we can check, else none."""
    if schema is None or not schema.is_file() or schema_problem(schema.read_bytes()) is not None:
        return {}
    props: dict[str, Any] = json.loads(schema.read_bytes())["properties"]
    return props


def _keep_field_problem(key: str, name: str, want: Any, props: Mapping[str, Any]) -> str | None:
    """Why ``{key} = { name = want }`` does not fit the schema's field ``name``, or None."""
    prop = props.get(name)
    kind = prop.get("type") if isinstance(prop, dict) else None
    if props and kind is None:
        return f"the step's schema declares no field {name!r}"
    if key == "at_least" and (not _number(want) or kind not in (None, "number", "integer")):
        return (
            "at_least compares a number or integer field "
            f"with a number, got {want!r} for a {kind} field"
        )
    if key == "equals" and not _fits(kind, want):
        return (
            f"{want!r} is not a value of the field's type "
            f"({kind}): equals compares a string, number, integer or boolean field"
        )
    return None


def _fits(kind: str | None, value: Any) -> bool:
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return _number(value)
    return kind is None and isinstance(value, str | bool | int | float)


def _step_models(
    table: dict[str, Any], where: str, add: Any, models: Sequence[str] | None
) -> tuple[str | None, ...]:
    value = table.get("models")
    if models is None:
        if value is not None:
            add(
                f"{where}.models",
                "applies to a study with [models.<NAME>] tables; this one has "
                "a single [model], which every step uses",
            )
        return (None,)
    if not isinstance(value, list) or not value or not all(isinstance(m, str) for m in value):
        add(f"{where}.models", "must be a non-empty list of [models.<NAME>] names")
        return (models[0],) if models else (None,)
    for m in value:
        if m not in models:
            add(f"{where}.models", f"unknown model {m!r} (models: {', '.join(models)})")
    if len(set(value)) != len(value):
        add(f"{where}.models", "a model is listed twice")
    return tuple(value)


def _unparseable(table: dict[str, Any], where: str, add: Any) -> tuple[int, str]:
    value = table.get("on_unparseable", {"retry": 0, "then": "exclude"})
    if not isinstance(value, dict):
        add(f"{where}.on_unparseable", 'must be a table { retry = N, then = "exclude" | "stop" }')
        return 0, "exclude"
    for key in value:
        if key not in UNPARSEABLE_KEYS:
            add(f"{where}.on_unparseable", f"unknown key {key!r} (keys: retry, then)")
    retry = value.get("retry", 0)
    if isinstance(retry, bool) or not isinstance(retry, int) or not 0 <= retry <= 10:
        add(f"{where}.on_unparseable.retry", f"must be an integer from 0 to 10, got {retry!r}")
        retry = 0
    then = value.get("then", "exclude")
    if then not in ("exclude", "stop"):
        add(f"{where}.on_unparseable.then", f'must be "exclude" or "stop", got {then!r}')
        then = "exclude"
    return retry, then


def _aggregate(table: dict[str, Any], where: str, add: Any, n: int) -> str | int:
    value = table.get("aggregate", "majority")
    if isinstance(value, dict):
        k = value.get("k")
        if set(value) != {"k"} or isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
            add(
                f"{where}.aggregate",
                f"{{ k = N }} needs 1 <= N <= {n} (the step's models), got {value!r}",
            )
            return "majority"
        return k
    if value not in AGGREGATES:
        add(f"{where}.aggregate", f"must be majority, unanimous or {{ k = N }}, got {value!r}")
        return "majority"
    return str(value)


# ------------------------------------------------------------------ json schema


# ------------------------------------------------------------------ parsing and votes


def parse_output(spec: StepSpec, text: str, schema: dict[str, Any] | None = None) -> Any:
    """The parsed value of a step response's text, or None when it does not parse.

    ``text``: the response text, stripped of leading and trailing whitespace, non-empty;
    ``label``: the one label among the lowercased words of the text (none or two different
    ones: unparseable); ``json``: the text (or the first ```` ```json ```` fenced block in it)
    as a JSON object that satisfies the locked schema (``docs/prompts.md`` §8).
    """
    kind = STEP_KIND_REGISTRY[spec.parser]
    return kind.parse(text, spec.labels, schema)


def value_key(value: Any) -> str:
    """A vote's identity for counting: its canonical JSON."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def aggregate(
    rule: str | int,
    votes: Sequence[Any],
    sets: Sequence[str] = (),
    groups: Sequence[Sequence[str]] | None = None,
) -> Any:
    """The decision of ``votes`` (parsed values, None for a missing one) under ``rule``.

    ``majority``: the value more than half of the votes give; ``unanimous``: the value every
    vote gives; k: the value at least k votes give (the first such in vote order when several
    reach k). A missing vote counts as a vote for nothing. :data:`UNDECIDED` otherwise.
    ``sets`` (a set-valued step's members): element by element, :func:`aggregate_sets`,
    after merging the synonym ``groups`` of a matcher when given.
    """
    if sets:
        return aggregate_sets(rule, votes, sets, groups)
    n = len(votes)
    counts: dict[str, tuple[int, Any]] = {}
    for vote in votes:
        if vote is None:
            continue
        key = value_key(vote)
        count, _ = counts.get(key, (0, vote))
        counts[key] = (count + 1, vote)
    if rule == "majority":
        need = n // 2 + 1
    elif rule == "unanimous":
        need = n
    else:
        need = int(rule)
    for count, value in counts.values():
        if count >= need:
            return value
    return UNDECIDED


def normalise_element(text: str) -> str:
    """An element of a set as it is compared (``docs/prompts.md`` §8.3).

    NFC, case-folded, NFC again, every run of whitespace (``str.split``) one space, trimmed.
    """
    folded = unicodedata.normalize("NFC", unicodedata.normalize("NFC", text).casefold())
    return " ".join(folded.split())


def _surface(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).split())


def aggregate_sets(
    rule: str | int,
    votes: Sequence[Any],
    fields: Sequence[str],
    groups: Sequence[Sequence[str]] | None = None,
) -> Any:
    """The element-wise decision of a set-valued step (``docs/prompts.md`` §8.3).

    ``votes``: parsed objects (None for a missing vote). N is the rule's number (majority:
    ``n // 2 + 1``; unanimous: n; k). Fewer than N parsed votes: :data:`UNDECIDED`. Else, for
    each member, the elements (compared by :func:`normalise_element`, each counted once per
    vote, empty ones dropped) that at least N votes contain, in order of first appearance (vote
    order, then array order), each written as it first appeared (NFC, whitespace collapsed).
    ``groups`` (normalised members, :func:`synonym_groups`): an element of a group is counted
    as the group (its key: the group's first member in the matcher's order that a vote
    contains); an element in two groups belongs to the first; members no vote contains are
    ignored; so a group enters once, written as its first-appearing element.
    """
    n = len(votes)
    need = n // 2 + 1 if rule == "majority" else n if rule == "unanimous" else int(rule)
    parsed = [v for v in votes if isinstance(v, dict)]
    if len(parsed) < need:
        return UNDECIDED
    canon = _group_keys(parsed, fields, groups) if groups else {}
    return {name: _agreed(parsed, name, canon, need) for name in fields}


def _group_keys(
    parsed: Sequence[dict[str, Any]], fields: Sequence[str], groups: Sequence[Sequence[str]]
) -> dict[str, str]:
    """Each normalised element some vote contains -> the key of its synonym group."""
    canon: dict[str, str] = {}
    present = {normalise_element(e) for v in parsed for f in fields for e in v.get(f) or []}
    for group in groups:
        members = [m for m in group if m in present and m not in canon]
        for m in members:
            canon[m] = members[0]
    return canon


def _agreed(
    parsed: Sequence[dict[str, Any]], name: str, canon: Mapping[str, str], need: int
) -> list[str]:
    """The elements of member ``name`` that at least ``need`` votes contain (see above)."""
    counts: dict[str, int] = {}
    first: dict[str, str] = {}
    for vote in parsed:
        seen: set[str] = set()
        for element in vote.get(name) or []:
            key = normalise_element(element)
            key = canon.get(key, key)
            if not key or key in seen:
                continue
            seen.add(key)
            first.setdefault(key, _surface(element))
            counts[key] = counts.get(key, 0) + 1
    return [first[k] for k in first if counts[k] >= need]


def output_text(value: Any, field: str | None = None) -> str | None:
    """The text a slot ``{steps.NAME}`` (or ``{steps.NAME.FIELD}``) is filled with, or None.

    A string is itself; any other JSON value its canonical JSON (RFC 8785, as
    :func:`value_key` writes it for the subset a schema allows).
    """
    if field is not None:
        if not isinstance(value, dict) or field not in value:
            return None
        value = value[field]
    if isinstance(value, str):
        return value
    return value_key(value)


# ------------------------------------------------------------------ slots and graph


@dataclass(frozen=True)
class SlotUse:
    """Where a template reads a step's output: the reader, the step, the field (json only)."""

    reader: str
    step: str
    field: str | None


def step_slots(names: Iterable[str]) -> list[tuple[str, str | None]]:
    """(step, field) of every ``steps.NAME`` / ``steps.NAME.FIELD`` slot among ``names``."""
    out = []
    for name in names:
        parts = name.split(".")
        if parts[0] == "steps" and len(parts) in (2, 3):
            out.append((parts[1], parts[2] if len(parts) == 3 else None))
    return out


def step_graph(edges: Mapping[str, set[str]]) -> list[str] | None:
    """A cycle among ``edges`` (reader -> steps it reads) as a list of names, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if state.get(nxt) is None and nxt in edges:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if state.get(node) is None:
            found = visit(node)
            if found:
                return found
    return None


def step_layers(steps: Mapping[str, StepSpec], reads: Mapping[str, set[str]]) -> list[list[str]]:
    """The steps in layers: each reads only steps of earlier layers (names sorted in a layer)."""
    done: set[str] = set()
    layers: list[list[str]] = []
    left = set(steps)
    while left:
        layer = sorted(s for s in left if reads.get(s, set()) <= done)
        if not layer:  # a cycle: refused at lock
            layer = sorted(left)
        layers.append(layer)
        done |= set(layer)
        left -= set(layer)
    return layers


# ------------------------------------------------------------------ calls


@dataclass(frozen=True)
class StepCall:
    """One step call: ``step:{name}|{model}|{item}|1`` or ``step:{name}|{model}|{trial id}``.

    ``arm`` is ``"step:{name}"`` so the engine's per-request bookkeeping (token estimates) keys
    a step apart from every arm. ``trial`` is the trial a trial step reads (None for item
    steps); ``stimulus`` the item.
    """

    id: str
    step: str
    model: str | None
    stimulus: str
    trial: str | None
    position: int
    variant: str | None = None
    rep: int = 1

    @property
    def arm(self) -> str:
        """``step:{name}``: never an arm id (those cannot contain ':')."""
        return f"step:{self.step}"

    @property
    def custom_id(self) -> str:
        """A batch ``custom_id`` (``s`` and the position): steps are never batched today."""
        return f"s{self.position:06d}"


def item_call_id(step: str, model: str | None, item: str, k: int = 1) -> str:
    """The call id of an item step's call: sample ``k`` (from 1; ``docs/trials.md`` §5)."""
    return f"step:{step}|{model or ''}|{item}|{k}"


def trial_call_id(step: str, model: str | None, trial: str) -> str:
    """The call id of a trial step's call on ``trial``."""
    return f"step:{step}|{model or ''}|{trial}"


def call_order(seed: str, ids: Iterable[str]) -> list[str]:
    """Call ids by ascending ``SHA-256("{seed}|{call id}")`` (the schedule's rule)."""
    return sorted(ids, key=lambda c: hashlib.sha256(f"{seed}|{c}".encode()).hexdigest())


def item_step_calls(spec: StepSpec, items: Sequence[str], seed: str) -> list[StepCall]:
    """Every call of an item step, in call order."""
    by_id = {item_call_id(spec.name, m, i): (m, i) for i in items for m in spec.models}
    return [
        StepCall(cid, spec.name, by_id[cid][0], by_id[cid][1], None, 0)
        for cid in call_order(seed, by_id)
    ]


def trial_step_calls(spec: StepSpec, trial: str, stimulus: str) -> list[StepCall]:
    """The calls of a trial step on one trial, one per model in the step's model order."""
    return [
        StepCall(trial_call_id(spec.name, m, trial), spec.name, m, stimulus, trial, 0)
        for m in spec.models
    ]


def review_sample(judged: Sequence[tuple[int, bool]], n: int, seed: str) -> list[int]:
    """``docs/scoring.md`` §11: the subjects (``response_seq``) of a review sample.

    ``judged``: (response seq, whether every judge voted the same) of each judged trial. In each
    stratum, unanimous then split, the ``n`` with the smallest ``SHA-256("{seed}|{seq}")``;
    the sample is their seqs in ascending order.
    """
    out: list[int] = []
    for unanimous in (True, False):
        stratum = [seq for seq, same in judged if same is unanimous]
        key = {s: hashlib.sha256(f"{seed}|{s}".encode()).hexdigest() for s in stratum}
        out += sorted(stratum, key=lambda s: key[s])[:n]
    return sorted(out)


# ------------------------------------------------------------------ covariates


COVARIATE_KEYS: Final = ("step", "perturbable", "indicators")
"""The keys of ``[analysis] covariates`` (``docs/analysis.md`` §11)."""


def covariates_table(value: Any, add: Any) -> dict[str, Any] | None:
    """Validate ``[analysis] covariates = { step, perturbable, indicators }`` (its shape).

    The step and the names are checked against the steps by :func:`covariate_problems`.
    """
    where = "analysis.covariates"
    if not isinstance(value, dict):
        add(where, 'must be a table { step = "NAME", perturbable = [...], indicators = [...] }')
        return None
    ok = True
    for key in value:
        if key not in COVARIATE_KEYS:
            add(where, f"unknown key {key!r} (keys: {', '.join(COVARIATE_KEYS)})")
            ok = False
    step = value.get("step")
    if not isinstance(step, str) or not step:
        add(f"{where}.step", "must name the item step whose json decision holds the labels")
        ok = False
    lists: dict[str, list[str]] = {}
    for key in ("perturbable", "indicators"):
        names = _field_names(value.get(key, []))
        if names is None:
            add(f"{where}.{key}", "must be a list of distinct field names of the step's schema")
            ok = False
            names = []
        lists[key] = names
    both = set(lists["perturbable"]) & set(lists["indicators"])
    if both:
        add(
            f"{where}.indicators",
            f"{sorted(both)[0]!r} is listed as perturbable too: an "
            "indicator is only annotated, never edited, and is kept apart",
        )
        ok = False
    if ok and not lists["perturbable"] and not lists["indicators"]:
        add(where, "lists no covariate (perturbable or indicators)")
        ok = False
    return {"step": step, **lists} if ok else None


def _field_names(names: Any) -> list[str] | None:
    """``names`` as a list of distinct strings, or None when it is not one."""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    return list(names) if len(set(names)) == len(names) else None


def covariate_problems(table: Mapping[str, Any], steps: Mapping[str, StepSpec], add: Any) -> None:
    """The covariates' step is a plain json item step whose schema declares each as boolean."""
    where = "analysis.covariates"
    spec = steps.get(table["step"])
    if spec is None or spec.on != "item" or spec.parser != "json":
        add(
            f"{where}.step",
            f"{table['step']!r} is not an item step with the json parser "
            '([steps.<NAME>] on = "item", parser = "json")',
        )
        return
    if spec.verified_by is not None or spec.sets:
        add(
            f"{where}.step",
            f"step {spec.name!r} is verified or set-valued; covariates are "
            "read from a plain item step's decision",
        )
        return
    if spec.schema is None or not spec.schema.is_file():
        return
    props = json.loads(spec.schema.read_bytes()).get("properties") or {}
    for key in ("perturbable", "indicators"):
        for name in table[key]:
            prop = props.get(name)
            if not isinstance(prop, dict) or prop.get("type") != "boolean":
                add(
                    f"{where}.{key}",
                    f"{name!r} is not a boolean field of the schema of step {spec.name!r}",
                )
