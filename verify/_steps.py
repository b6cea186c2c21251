"""Recorded model steps, re-derived from the docs alone.

``docs/prompts.md`` §8, ``docs/trials.md`` §5, ``docs/scoring.md`` §10.

The verifier cannot call a model. It proves that everything follows from what the models
answered: every step request is the one re-rendered from the locked template and the inputs
that existed when it was sent; every step response is re-parsed; each call's outcome, each
step's decision (the aggregate of its votes), each ``trial.excluded``, each trial request that
reads a step and each judge-scored ``trial.scored`` is re-derived; and no call was made before
its inputs existed. Independent of ``ledger``, ``runner`` and ``analysis``.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from verify._canonical import canonical_json
from verify._prompts import (
    LockedStudy,
    PromptError,
    Template,
    item_values,
    messages_request,
    read_template,
    wire_form,
    wire_request,
)
from verify._step_kinds import REGISTRY as STEP_KINDS

__all__ = ["Replay", "StepPlan", "item_decisions", "plans_of", "step_lock_problems"]

LEAK = frozenset({"arm", "trial", "target_model", "request"})
TRIAL_SLOTS = ("response", "reference", "reference_text")
ANSWER = ("answer", "answer_text", "rationale")

Blob = Callable[[str], bytes | None]
"""An event's blob getter: the bytes of its blob by name, or None."""


@dataclass(frozen=True)
class StepPlan:
    """One locked step (``protocol.locked`` ``steps.NAME``)."""

    name: str
    on: str
    models: tuple[str | None, ...]
    template: Template
    system: str | None
    parser: str
    labels: tuple[str, ...]
    schema: dict[str, Any] | None
    retry: int
    then: str
    aggregate: str | int
    sees: str
    keep: tuple[str, ...] | None
    keep_rule: Mapping[str, Mapping[str, Any]] | None = None  # §8.3: a json screening rule
    verified_by: Mapping[str, Any] | None = None  # §8.6: {step, accept, retry, then}
    match_by: str | None = None  # §8.3: the synonym matcher of a set-valued item step

    @property
    def screens(self) -> bool:
        """§8.3: a screening step (``keep`` as labels or as a json rule)."""
        return self.keep is not None or self.keep_rule is not None

    def keeps(self, decision: Any) -> bool:
        """§8.3: whether a screening step's decision keeps the item."""
        if self.keep is not None:
            return decision in self.keep
        if self.keep_rule is None:
            return True
        if not isinstance(decision, dict):
            return False
        for name, want in (self.keep_rule.get("equals") or {}).items():
            if name not in decision or not _json_equal(decision[name], want):
                return False
        for name, low in (self.keep_rule.get("at_least") or {}).items():
            got = decision.get(name)
            if type(got) not in (int, float) or got < low:
                return False
        return True

    @property
    def sets(self) -> tuple[str, ...]:
        """§8.3: the members of a set-valued json step (every property an array), else ()."""
        props = (self.schema or {}).get("properties") or {}
        if (
            STEP_KINDS[self.parser].schema
            and props
            and all(isinstance(p, dict) and p.get("type") == "array" for p in props.values())
        ):
            return tuple(props)
        return ()

    def reads(self) -> set[str]:
        """The steps its template reads."""
        return {
            s.name.split(".")[1]
            for s in self.template.slots
            if s.name.startswith("steps.") and len(s.name.split(".")) in (2, 3)
        }


def _json_equal(got: Any, want: Any) -> bool:
    """§8.3 ``equals``: the same JSON value (a boolean equals only a boolean, a string a string)."""
    if isinstance(got, bool) or isinstance(want, bool):
        return isinstance(got, bool) and isinstance(want, bool) and got == want
    return isinstance(got, str) == isinstance(want, str) and got == want


def plans_of(
    protocol: Mapping[str, Any], study: LockedStudy, read: Callable[[str], bytes | None]
) -> dict[str, StepPlan]:
    """Every locked step; :class:`PromptError` naming the first member that cannot be read."""
    steps = protocol.get("steps")
    if steps is None:
        return {}
    if type(steps) is not dict:
        raise PromptError("protocol.locked steps is not an object")
    out = {name: _plan_of(name, rec, study, read) for name, rec in steps.items()}
    _check_verifiers(out)
    _check_matchers(out)
    return out


def _plan_of(
    name: str, rec: Any, study: LockedStudy, read: Callable[[str], bytes | None]
) -> StepPlan:
    """One locked step's plan; :class:`PromptError` naming the first member that is wrong."""
    where = f"protocol.locked steps.{name}"
    if type(rec) is not dict:
        raise PromptError(f"{where} is not an object")
    on = rec.get("on")
    if on not in ("item", "trial"):
        raise PromptError(f"{where}.on: {on!r}")
    names = _plan_models(where, rec, study)
    path = rec.get("template")
    data = read(path) if type(path) is str else None
    if data is None or type(path) is not str:
        raise PromptError(f"{where}.template: {path!r} is not a locked file")
    template = read_template(data, path)
    system_names = rec.get("system") or []
    system = "\n\n".join(study.component(n) for n in system_names) if system_names else None
    parser = rec.get("parser")
    kind = STEP_KINDS.get(parser) if type(parser) is str else None
    if kind is None:
        raise PromptError(f"{where}.parser: {parser!r}")
    parser = kind.name
    schema = _plan_schema(where, rec, read) if kind.schema else None
    unparseable = rec.get("on_unparseable") or {}
    rule = _plan_aggregate(where, rec)
    keep, rule_keep = _plan_keep(where, rec, parser)
    verified = _plan_verified_by(where, rec, on)
    return StepPlan(
        name,
        on,
        names,
        template,
        system,
        parser,
        tuple(rec.get("labels") or ()),
        schema,
        int(unparseable.get("retry", 0)),
        str(unparseable.get("then", "exclude")),
        rule,
        str(rec.get("sees", "blind")),
        tuple(keep) if keep is not None else None,
        rule_keep,
        verified,
        rec.get("match_by"),
    )


def _plan_models(where: str, rec: dict[str, Any], study: LockedStudy) -> tuple[str | None, ...]:
    """A step's models: a non-empty list of locked model names (``""`` for the only model)."""
    models = rec.get("models")
    if type(models) is not list or not models:
        raise PromptError(f"{where}.models is not a list of model names")
    names = tuple(m or None for m in models)
    for m in names:
        if m not in study.models:
            raise PromptError(f"{where}.models: {m!r} is not a locked model")
    return names


def _plan_schema(where: str, rec: dict[str, Any], read: Callable[[str], bytes | None]) -> Any:
    """A json step's schema, read from its locked file."""
    schema_path = rec.get("schema")
    raw = read(schema_path) if type(schema_path) is str else None
    if raw is None:
        raise PromptError(f"{where}.schema: {schema_path!r} is not a locked file")
    return json.loads(raw)


def _plan_aggregate(where: str, rec: dict[str, Any]) -> Any:
    """A step's aggregation rule: majority, unanimous or at least k votes (``{k = N}``)."""
    rule = rec.get("aggregate")
    if isinstance(rule, dict):
        rule = rule.get("k")
    if rule not in ("majority", "unanimous") and not (type(rule) is int and rule >= 1):
        raise PromptError(f"{where}.aggregate: {rec.get('aggregate')!r}")
    return rule


def _plan_keep(where: str, rec: dict[str, Any], parser: str) -> tuple[Any, Any]:
    """A screening step's ``keep``: (labels, None) or, for a json step, (None, the rule)."""
    keep = rec.get("keep")
    if not isinstance(keep, dict):
        return keep, None
    if (
        not STEP_KINDS[parser].schema
        or not set(keep) <= {"equals", "at_least"}
        or not all(isinstance(v, dict) for v in keep.values())
    ):
        raise PromptError(f"{where}.keep: {keep!r} is not a json screening rule")
    return None, keep


def _plan_verified_by(where: str, rec: dict[str, Any], on: str) -> Any:
    """§8.6: an item step's ``verified_by`` table ``{step, accept, retry, then}``, or None."""
    verified = rec.get("verified_by")
    if verified is not None and (
        type(verified) is not dict
        or set(verified) != {"step", "accept", "retry", "then"}
        or type(verified["retry"]) is not int
        or verified["retry"] < 0
        or type(verified["accept"]) is not list
        or on != "item"
    ):
        raise PromptError(
            f"{where}.verified_by: {verified!r} is not "
            "{step, accept, retry, then} of an item step"
        )
    return verified


def _check_verifiers(out: Mapping[str, StepPlan]) -> None:
    """§8.6: the verifier is a label item step reading the sample, whose labels hold accept."""
    for name, plan in out.items():
        ver = plan.verified_by
        if ver is None:
            continue
        other = out.get(ver["step"])
        if (
            other is None
            or other.on != "item"
            or other.parser != "label"
            or (name not in other.reads())
            or not set(ver["accept"]) <= set(other.labels)
        ):
            raise PromptError(
                f"protocol.locked steps.{name}.verified_by: {ver['step']!r} is "
                "not a label item step reading {steps." + name + "} whose labels "
                "hold accept"
            )


def _matcher_fits(plan: StepPlan, m: StepPlan, matchers: set[str]) -> bool:
    """§8.3: whether ``m`` may match ``plan`` (both plain item steps, ``m`` one-model, new).

    ``m`` is a one-model json item step with only "groups", matching no other step, neither
    screening nor verified, and so is ``plan``.
    """
    return not (
        m.on != "item"
        or m.sets != ("groups",)
        or len(m.models) != 1
        or m.match_by is not None
        or m.verified_by is not None
        or m.screens
        or plan.verified_by is not None
        or plan.screens
        or m.name in matchers
    )


def _check_matchers(out: Mapping[str, StepPlan]) -> None:
    """§8.3: each synonym matcher of the right kind, no cycle, one set-valued step each."""
    matchers: set[str] = set()
    for name, plan in out.items():
        if plan.match_by is None:
            continue
        m = out.get(str(plan.match_by))
        if (
            not plan.sets
            or plan.on != "item"
            or m is None
            or m.name == name
            or not _matcher_fits(plan, m, matchers)
        ):
            raise PromptError(
                f"protocol.locked steps.{name}.match_by: {plan.match_by!r} is "
                'not a one-model json item step with only "groups" matching '
                "this set-valued item step alone"
            )
        matchers.add(m.name)


def matched_step(plans: Mapping[str, StepPlan], matcher: str) -> str | None:
    """§8.3: the set-valued step whose votes ``matcher`` groups, or None."""
    return next((n for n, p in plans.items() if p.match_by == matcher), None)


def votes_slot(votes: Sequence[Any], fields: Sequence[str]) -> str:
    """§8.3 ``{votes.NAME}``: the parsed votes' elements, normalised, de-duplicated, sorted."""
    found = {norm(x) for v in votes if isinstance(v, dict) for f in fields for x in v.get(f) or []}
    return "\n".join(sorted(found - {""}))


def groups_of(decision: Any) -> list[list[str]]:
    """§8.3: a matcher decision's groups, each string split at ``|``, members normalised."""
    out = []
    for text in (decision or {}).get("groups") or []:
        members = [m for m in (norm(x) for x in str(text).split("|")) if m]
        if members:
            out.append(members)
    return out


def step_lock_problems(plans: Mapping[str, StepPlan], study: LockedStudy) -> list[str]:
    """The lock rules of ``docs/prompts.md`` §8 on the locked steps (what a lock refuses)."""
    out: list[str] = []
    for name, plan in plans.items():
        for slot in plan.template.slots:
            problem = _slot_problem(plans, name, plan, slot.name)
            if problem:
                where = f"{plan.template.name}:{slot.line}:{slot.column}: slot {{{slot.name}}}"
                out.append(f"{where}: {problem}")
    for template in study.item_templates():  # [prompt] item and each factor level's
        for slot in template.slots:
            if slot.name.startswith("steps."):
                problem = _read_problem(plans, "item", slot.name)
                if problem:
                    out.append(f"{template.name}: slot {{{slot.name}}}: {problem}")
    for name, plan in plans.items():
        if plan.match_by in plans and f"votes.{name}" not in {
            x.name for x in plans[str(plan.match_by)].template.slots
        }:
            out.append(f"steps.{name}.match_by: the matcher reads no {{votes.{name}}}")
    if _cyclic(plans):
        out.append("protocol.locked steps: the steps read each other in a cycle")
    return out


def _slot_problem(
    plans: Mapping[str, StepPlan], name: str, plan: StepPlan, slot: str
) -> str | None:
    """Why step ``name``'s template may not read ``slot``, or None if it may."""
    if slot in LEAK or slot.startswith("factor."):
        if not (slot == "request" and plan.sees == "request"):
            return f"a blind step ({name}) may not see the condition"
        return None
    if slot.startswith("steps."):
        return _read_problem(plans, plan.on, slot)
    if slot.startswith("votes."):
        if matched_step(plans, name) != slot[len("votes.") :]:
            return "only a set-valued step's matcher reads its votes"
        return None
    if slot in TRIAL_SLOTS and plan.on == "item":
        return f"an item step ({name}) may not read it"
    if slot in ANSWER:
        return "not a step slot"
    return None


def _read_problem(plans: Mapping[str, StepPlan], on: str, slot: str) -> str | None:
    """Why a template of an ``on`` step or prompt may not read ``{steps.*}`` slot ``slot``."""
    parts = slot.split(".")
    if len(parts) not in (2, 3) or parts[1] not in plans:
        return f"no step named {parts[1] if len(parts) > 1 else slot!r} produces it"
    target = plans[parts[1]]
    if target.on == "trial" and on == "item":
        return f"{parts[1]!r} is a trial step, read before its trial"
    if len(parts) == 3 and (
        target.schema is None or parts[2] not in target.schema.get("properties", {})
    ):
        return f"step {parts[1]!r} has no field {parts[2]!r}"
    return None


def _cyclic(plans: Mapping[str, StepPlan]) -> bool:
    """Whether the steps read each other in a cycle (a depth-first walk of what each reads)."""
    state: dict[str, int] = {}

    def cyclic(node: str) -> bool:
        state[node] = 1
        for nxt in plans[node].reads():
            if nxt in plans and (state.get(nxt) == 1 or (state.get(nxt) is None and cyclic(nxt))):
                return True
        state[node] = 2
        return False

    return any(state.get(n) is None and cyclic(n) for n in sorted(plans))


# ------------------------------------------------------------------ parsing and votes


def parse(plan: StepPlan, text: str) -> Any:
    """§8: the parsed value of a step response's text, or None (unparseable); the step kind's."""
    return STEP_KINDS[plan.parser].parse(text, plan.labels, plan.schema)


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def norm(text: str) -> str:
    """§8.3: a set element as compared: NFC, casefold, NFC, whitespace runs one space, trimmed."""
    text = unicodedata.normalize("NFC", unicodedata.normalize("NFC", text).casefold())
    return " ".join(text.split())


def decide_sets(
    need: int,
    votes: list[Any],
    fields: Sequence[str],
    groups: Sequence[Sequence[str]] | None = None,
) -> Any:
    """§8.3: the element-wise decision of a set-valued step; None below ``need`` parsed votes.

    ``groups``: a matcher's synonym groups; each element of a group counts as the group's
    first member that a vote contains (an element in two groups: the first group).
    """
    parsed = [v for v in votes if isinstance(v, dict)]
    if len(parsed) < need:
        return None
    same = _synonyms(parsed, fields, groups)

    def norm(x: str) -> str:
        key = _norm(x)
        return same.get(key, key)

    return {name: _set_decision(need, parsed, name, norm) for name in fields}


def _synonyms(
    parsed: list[dict[str, Any]], fields: Sequence[str], groups: Sequence[Sequence[str]] | None
) -> dict[str, str]:
    """Each element of a synonym group some vote contains -> the group's first such member."""
    seen_any = {_norm(x) for v in parsed for f in fields for x in v.get(f) or []}
    same: dict[str, str] = {}
    for group in groups or ():
        live = [g for g in group if g in seen_any and g not in same]
        same.update((g, live[0]) for g in live)
    return same


def _set_decision(
    need: int, parsed: list[dict[str, Any]], name: str, norm: Callable[[str], str]
) -> list[str]:
    """§8.3: the members of field ``name`` at least ``need`` votes hold, as first written."""
    tally: dict[str, list[Any]] = {}  # normalised -> [count, first surface]
    for vote in parsed:
        for key in {norm(x) for x in vote.get(name) or []} - {""}:
            tally.setdefault(key, [0, None])[0] += 1
    firsts: list[tuple[str, str]] = []
    for vote in parsed:
        for x in vote.get(name) or []:
            key = norm(x)
            if key and key not in {k for k, _ in firsts}:
                firsts.append((key, " ".join(unicodedata.normalize("NFC", x).split())))
    return [surface for key, surface in firsts if tally[key][0] >= need]


_norm = norm


def decide(
    rule: str | int,
    votes: list[Any],
    sets: Sequence[str] = (),
    groups: Sequence[Sequence[str]] | None = None,
) -> Any:
    """§8: the value at least the rule's number of votes give (majority: more than half)."""
    need = (
        len(votes) // 2 + 1
        if rule == "majority"
        else (len(votes) if rule == "unanimous" else int(rule))
    )
    if sets:
        return decide_sets(need, votes, sets, groups)
    counts: dict[str, list[Any]] = {}
    for vote in votes:
        if vote is not None:
            counts.setdefault(_key(vote), []).append(vote)
    for same in counts.values():
        if len(same) >= need:
            return same[0]
    return None


def text_of(raw: bytes, fmt: str) -> str:
    """The text of a stored response (``docs/trials.md`` §2); ``""`` when it has none."""
    if fmt == "text":  # §6: a data trial's response is its text
        return raw.decode("utf-8", errors="replace")
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return ""
    if fmt == "anthropic-batch-result" and isinstance(body, dict):
        body = (body.get("result") or {}).get("message") or {}
    if not isinstance(body, dict):
        return ""
    if fmt == "openai-chat":
        return _openai_text(body)
    return _content_text(body.get("content"))


def _openai_text(body: dict[str, Any]) -> str:
    """The text of an OpenAI chat completion's first choice; ``""`` when it has none."""
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


def _content_text(content: Any) -> str:
    """The text blocks of a Messages response's ``content`` list, joined; ``""`` for none."""
    if not isinstance(content, list):
        return ""
    return "".join(
        b["text"]
        for b in content
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    )


def slot_text(value: Any, field_name: str | None) -> str | None:
    """§8: a decision as slot text (a string as is, other JSON as canonical JSON)."""
    if field_name is not None:
        if not isinstance(value, dict) or field_name not in value:
            return None
        value = value[field_name]
    return value if isinstance(value, str) else _key(value)


def step_slot(name: str) -> tuple[str, str | None] | None:
    """A ``{steps.NAME}`` or ``{steps.NAME.FIELD}`` slot's ``(NAME, FIELD)``; None for others."""
    parts = name.split(".")
    if parts[0] != "steps" or len(parts) not in (2, 3):
        return None
    return parts[1], (parts[2] if len(parts) == 3 else None)


def decision_text(decision: Any, field_name: str | None) -> str | None:
    """A decision's slot text; None when there is no decision, or it lacks the field read."""
    return None if decision is None else slot_text(decision, field_name)


# ------------------------------------------------------------------ the replay


@dataclass
class Call:
    """One step call as the events record it."""

    id: str
    step: str
    model: str | None
    item: str
    trial: str | None
    attempts: int = 0
    responses: int = 0
    value: Any = None
    final_seq: int | None = None
    status: str = "pending"  # parsed | unparseable | given-up
    last_request: int | None = None
    k: int = 1  # §8.6: the sample of an item step's call


@dataclass
class Replay:
    """Walk the events in order and re-derive every step call, decision and exclusion."""

    study: LockedStudy
    plans: dict[str, StepPlan]
    events: list[tuple[int, str, dict[str, Any], Callable[[str], bytes | None]]]
    problems: list[tuple[int | None, str]] = field(default_factory=list)
    calls: dict[str, Call] = field(default_factory=dict)
    decisions: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)
    responses: dict[str, tuple[int, str]] = field(default_factory=dict)  # trial -> (seq, text)
    request_texts: dict[str, str] = field(default_factory=dict)
    stimulus: dict[str, str] = field(default_factory=dict)
    excluded: dict[str, int] = field(default_factory=dict)
    samples: dict[tuple[str, str, int], tuple[int, Any]] = field(default_factory=dict)  # §8.6
    rejected: dict[tuple[str, str], int] = field(default_factory=dict)  # §8.6: no sample kept
    matched_votes: dict[tuple[str, str], list[Any]] = field(default_factory=dict)  # §8.3
    given_up: set[str] = field(default_factory=set)
    prior_values: dict[str, dict[str, str]] = field(default_factory=dict)  # §9, per trial
    rendered: int = 0
    reference_step: str | None = None  # scoring.md §12: a ddx study's reference item step
    first_trial: int | None = None  # seq of the first trial.requested
    trial_requests: dict[int, str] = field(default_factory=dict)  # seq -> trial
    request_call: dict[int, str] = field(default_factory=dict)  # step.requested seq -> call id
    needs_steps: bool = False  # some trial reads a step's decision

    def fail(self, seq: int | None, message: str) -> None:
        """Record a problem at ``seq``."""
        self.problems.append((seq, message))

    def unit_calls(self, step: str, unit: str) -> list[str]:
        """The call ids of ``step`` on an item (item step) or trial (trial step)."""
        return unit_call_ids(self.plans[step], unit)

    def host_of(self, step: str) -> str | None:
        """§8.6: the verified step of a chain ``step`` belongs to (itself or its verifier)."""
        if step in self.plans and self.plans[step].verified_by is not None:
            return step
        for name, plan in self.plans.items():
            if plan.verified_by is not None and plan.verified_by["step"] == step:
                return name
        return None

    def _settle(self, step: str, unit: str, seq: int, k: int = 1) -> None:
        plan = self.plans[step]
        ids = self.unit_calls(step, unit)
        if k > 1:
            ids = [c[: -len("|1")] + f"|{k}" for c in ids]
        calls = [self.calls.get(c) for c in ids]
        if any(c is None or c.final_seq is None for c in calls):
            return
        votes = [c.value if c is not None and c.status == "parsed" else None for c in calls]
        if plan.match_by is not None:  # §8.3: decided once its matcher has
            self.matched_votes[(step, unit)] = votes
            return
        decision = decide(plan.aggregate, votes, plan.sets)
        self._decide_matched(step, unit, seq, decision)
        host = self.host_of(step) if plan.on == "item" else None
        if host is None:
            self.decisions[(step, unit)] = (seq, decision)
            return
        self.samples[(step, unit, k)] = (seq, decision)
        self._resolve(host, unit, seq)

    def _decide_matched(self, step: str, unit: str, seq: int, decision: Any) -> None:
        """§8.3: a matcher's decision decides the set-valued step whose votes it groups."""
        target = matched_step(self.plans, step)
        if target is None or (target, unit) not in self.matched_votes:
            return
        tp = self.plans[target]
        self.decisions[(target, unit)] = (
            seq,
            None
            if decision is None
            else decide(
                tp.aggregate, self.matched_votes[(target, unit)], tp.sets, groups_of(decision)
            ),
        )

    def _resolve(self, host: str, item: str, seq: int) -> None:
        """§8.6: the verified step's and its verifier's decisions once the chain settles."""
        ver = self.plans[host].verified_by
        assert ver is not None
        for k in range(1, ver["retry"] + 2):
            d = self.samples.get((host, item, k))
            if d is None:
                return
            if d[1] is None:
                continue
            v = self.samples.get((ver["step"], item, k))
            if v is None:
                return
            if v[1] in ver["accept"]:
                self.decisions[(host, item)] = (seq, d[1])
                self.decisions[(ver["step"], item)] = (seq, v[1])
                return
        self.decisions[(host, item)] = (seq, None)
        self.decisions[(ver["step"], item)] = (seq, None)
        self.rejected[(host, item)] = seq

    def _chain_blocked(self, host: str, item: str) -> bool:
        """§8.6: whether the verifier can judge no sample of ``host`` on ``item``.

        (Another step it reads has no decision.) The chain then ends with no decision and no
        further sample.
        """
        ver = self.plans[host].verified_by
        assert ver is not None
        verifier = self.plans[ver["step"]]
        for k in range(1, ver["retry"] + 2):
            d = self.samples.get((host, item, k))
            if d is None:
                return False
            if d[1] is None:
                continue
            verdict = self.samples.get((verifier.name, item, k))
            if verdict is not None:
                if verdict[1] in ver["accept"]:
                    return False
                continue
            if any(
                f"step:{verifier.name}|{m or ''}|{item}|{k}" in self.calls for m in verifier.models
            ):
                return False
            for read in verifier.reads() - {host}:
                if read in self.plans and self.plans[read].on == "item":
                    found = self.decided(read, item)
                    if found is not None and found[1] is None:
                        return True
            return False
        return False

    def sample_due(self, call: Call) -> str | None:
        """§8.6: why sample ``call.k`` of a chain step was not due when requested, or None."""
        host = self.host_of(call.step)
        if host is None or (call.k == 1 and call.step == host):
            return None
        ver = self.plans[host].verified_by
        assert ver is not None
        item, k, verifier = call.item, call.k, ver["step"]
        if call.step == verifier:
            own = self.samples.get((host, item, k))
            if own is not None and own[1] is None:
                return f"sample {k} of step {host!r} reached no decision: nothing to verify"
            return None
        if k > ver["retry"] + 1:
            return f"verified_by allows {ver['retry'] + 1} sample(s) of step {host!r}"
        prev = self.samples.get((host, item, k - 1))
        if prev is None:
            return f"sample {k - 1} of step {host!r} had not decided yet"
        if prev[1] is not None:
            verdict = self.samples.get((verifier, item, k - 1))
            if verdict is None:
                return f"the verifier {verifier!r} had not judged sample {k - 1} yet"
            if verdict[1] in ver["accept"]:
                return (
                    f"the verifier {verifier!r} accepted sample {k - 1} (seq {verdict[0]}): "
                    "no further sample was due"
                )
        return None

    def needed(self) -> set[str]:
        """Item steps a trial's request reads (transitively), and every screening step."""
        out: set[str] = set()
        todo = [
            s.name.split(".")[1]
            for t in self.study.item_templates()
            for s in t.slots
            if s.name.startswith("steps.")
        ]
        if self.reference_step is not None:  # scoring.md §12: a trial needs its references
            todo.append(self.reference_step)
        while todo:
            name = todo.pop()
            if name in out or name not in self.plans:
                continue
            out.add(name)
            todo += list(self.plans[name].reads())
        return out | {n for n, p in self.plans.items() if p.screens}

    def decided(self, name: str, item: str) -> tuple[int | None, Any] | None:
        """§8.3: item step ``name``'s decision for ``item`` so far: (seq, value), or None.

        An item step none of whose calls was made, every input of which has decided, one with
        no decision (or without the field read), has no decision: ``(None, None)``.
        """
        got = self.decisions.get((name, item))
        if got is not None:
            return got
        host = self.host_of(name)
        if host is not None and self._chain_blocked(host, item):
            return (None, None)
        plan = self.plans[name]
        if plan.on != "item" or any(c in self.calls for c in self.unit_calls(name, item)):
            return None
        blocked = False
        for slot in plan.template.slots:
            ref = step_slot(slot.name)
            if ref is None or ref[0] not in self.plans:
                continue
            found = self.decided(ref[0], item)
            if found is None:
                return None
            if decision_text(found[1], ref[1]) is None:
                blocked = True
        return (None, None) if blocked else None

    def item_values(self, item: str) -> dict[str, str] | None:
        """The ``{steps.*}`` values of an item's trials, or None (the item is excluded).

        None when a needed step has no decision that keeps it; KeyError while one is still to
        decide.
        """
        decided: dict[str, Any] = {}
        for name in self.needed():
            found = self.decided(name, item)
            if found is None:
                raise KeyError(name)
            decided[name] = found[1]
        for name, plan in self.plans.items():
            if plan.screens and (decided[name] is None or not plan.keeps(decided[name])):
                return None
        if self.reference_step is not None and decided[self.reference_step] is None:
            return None  # scoring.md §12: no reference sets, the item's trials are excluded
        out: dict[str, str] = {}
        for slot in [s for t in self.study.item_templates() for s in t.slots]:
            ref = step_slot(slot.name)
            if ref is None:
                continue
            text = decision_text(decided[ref[0]], ref[1])
            if text is None:
                return None
            out[slot.name] = text
        return out

    def values(self, call: Call) -> dict[str, str] | str:
        """The slot values of ``call`` from what existed before it, or why they did not."""
        plan = self.plans[call.step]
        fields = self.study.fields(call.item)
        values = item_values(fields, self.study.option_format, self.study.option_separator)
        if plan.on == "trial":
            missing = self._trial_values(call, fields, values)
            if missing is not None:
                return missing
        matched = matched_step(self.plans, call.step)
        if matched is not None:  # §8.3: a matcher reads the final votes it groups
            got = self.matched_votes.get((matched, call.item))
            if got is None:
                return f"the votes of step {matched!r} on {call.item!r} were not all final yet"
            values[f"votes.{matched}"] = votes_slot(got, self.plans[matched].sets)
        missing = self._step_values(call, plan, values)
        return values if missing is None else missing

    def _trial_values(
        self, call: Call, fields: Mapping[str, Any], values: dict[str, str]
    ) -> str | None:
        """Add a trial step's reference, response and request slots; or say what is missing."""
        answer = fields.get("answer")
        values["reference"] = str(answer)
        options = fields.get("options")
        if isinstance(options, list) and isinstance(answer, str) and len(answer) == 1:
            index = ord(answer) - ord("A")
            if 0 <= index < len(options):
                values["reference_text"] = str(options[index])
        answered = self.responses.get(call.trial or "")
        if answered is None:
            return f"its trial {call.trial} had no response yet"
        values["response"] = answered[1]
        if call.trial in self.request_texts:
            values["request"] = self.request_texts[call.trial]
        return None

    def _step_values(self, call: Call, plan: StepPlan, values: dict[str, str]) -> str | None:
        """Add ``call``'s ``{steps.*}`` slots from earlier decisions, or say what is missing."""
        for slot in plan.template.slots:
            ref = step_slot(slot.name)
            if ref is None:
                continue
            target = self.plans[ref[0]]
            unit = call.item if target.on == "item" else (call.trial or "")
            decided = self.decisions.get((ref[0], unit))
            if target.verified_by is not None and target.verified_by["step"] == call.step:
                decided = self.samples.get((ref[0], unit, call.k))  # §8.6: its own sample
            if decided is None:
                return f"step {ref[0]!r} had not decided for {unit!r} yet"
            text = decision_text(decided[1], ref[1])
            if text is None:
                return f"step {ref[0]!r} reached no decision for {unit!r}"
            values[slot.name] = text
        return None

    def request_bytes(self, call: Call, values: Mapping[str, str], wire: str) -> bytes:
        """§8: the canonical JSON of the call's request."""
        plan = self.plans[call.step]
        text = plan.template.render(values, f"call {call.id}").rstrip("\n")
        request = messages_request(
            self.study.models[call.model],
            [{"role": "user", "content": [{"type": "text", "text": text}]}],
            plan.system,
        )
        return canonical_json(wire_request(request, wire))

    def run(self) -> None:
        """Replay every event (``self.events``: (seq, kind, body, blob getter) in order)."""
        self.needs_steps = bool(self.needed())
        handlers: dict[str, Callable[[int, str, dict[str, Any], Blob], None]] = {
            "trial.requested": self._on_trial_requested,
            "trial.responded": self._on_trial_responded,
            "trial.failed": self._on_trial_failed,
            "trial.excluded": self._on_trial_excluded,
            "step.requested": self._on_step_requested,
            "step.responded": self._on_step_outcome,
            "step.failed": self._on_step_outcome,
        }
        for seq, kind, body, blob in self.events:
            handler = handlers.get(kind)
            if handler is not None:
                handler(seq, kind, body, blob)

    def _on_trial_requested(self, seq: int, kind: str, body: dict[str, Any], blob: Blob) -> None:
        """A trial may be requested once the steps it reads decided, and kept its item."""
        trial = str(body.get("trial"))
        self.trial_requests[seq] = trial
        if self.first_trial is None:
            self.first_trial = seq
        item = str(body.get("stimulus"))
        self.stimulus[trial] = item
        after = self._after(trial)
        if after is not None and trial not in self.prior_values:
            prior = self.prior(trial, after)
            if isinstance(prior, str):
                self.fail(seq, f"trial {trial} (a second stage) was requested, but {prior}")
            else:
                self.prior_values[trial] = prior
        try:
            values = self.item_values(item) if self.needs_steps else {}
        except KeyError as missing:
            self.fail(
                seq,
                f"trial {trial} was requested before step {missing} decided for item {item!r}",
            )
            return
        if values is None:
            self.fail(seq, f"trial {trial} was requested, but the steps exclude item {item!r}")

    def _on_trial_responded(self, seq: int, kind: str, body: dict[str, Any], blob: Blob) -> None:
        """A trial's response text, and its request's text for steps that see it."""
        trial = self.trial_requests.get(body.get("request_seq"), "")  # type: ignore[arg-type]
        raw = blob("response") or b""
        self.responses[trial] = (seq, text_of(raw, str(body.get("format"))))
        if not any(p.sees == "request" for p in self.plans.values()):
            return
        req = blob("__request__")
        if req is None:
            return
        # a data arm's request blob is its source record, no messages:
        # its {request} is empty (trials.md §6; runner.steps._state)
        messages = json.loads(req).get("messages") or [{"content": ""}]
        message = messages[-1].get("content") or ""
        self.request_texts[trial] = (
            message
            if isinstance(message, str)
            else "".join(b.get("text", "") for b in message if b.get("type") == "text")
        )

    def _on_trial_failed(self, seq: int, kind: str, body: dict[str, Any], blob: Blob) -> None:
        """A trial given up for good."""
        if body.get("final") is True:
            self.given_up.add(self.trial_requests.get(body.get("request_seq"), ""))  # type: ignore[arg-type]

    def _on_trial_excluded(self, seq: int, kind: str, body: dict[str, Any], blob: Blob) -> None:
        """A trial excluded by its first stage (§9) or by the steps it reads."""
        if "prior" in body:
            self._excluded_by_prior(seq, body)
            return
        trial, item = str(body.get("trial")), str(body.get("item"))
        self.excluded[trial] = seq
        try:
            values = self.item_values(item)
        except KeyError as missing:
            self.fail(
                seq,
                f"trial {trial} was excluded before step {missing} decided for item {item!r}",
            )
            return
        if values is not None:
            self.fail(
                seq,
                f"trial {trial} was excluded, but every step it reads decided for item {item!r}",
            )

    def _excluded_by_prior(self, seq: int, body: dict[str, Any]) -> None:
        """§9: a second-stage trial excluded because its first stage gave nothing to read."""
        trial = str(body.get("trial"))
        self.excluded[trial] = seq
        after = self._after(trial)
        found = self.prior(trial, after) if after is not None else "it has no first stage"
        if not isinstance(found, str):
            self.fail(seq, f"trial {trial} was excluded, but its first stage gave what it reads")
        elif found.startswith("waiting"):
            self.fail(seq, f"trial {trial} was excluded before {found[8:]}")

    def _on_step_requested(self, seq: int, kind: str, body: dict[str, Any], blob: Blob) -> None:
        """A step call; a reference step's only before the first trial (scoring.md §12)."""
        if body.get("step") == self.reference_step and self.first_trial is not None:
            self.fail(
                seq,
                f"call {body.get('call')} of the reference step "
                f"{self.reference_step!r} was requested after the first trial "
                f"(seq {self.first_trial}): reference sets are final before any "
                "trial is sent (scoring.md §12)",
            )
        self._requested(seq, body, blob, self.request_call)

    def _on_step_outcome(self, seq: int, kind: str, body: dict[str, Any], blob: Blob) -> None:
        """A step call's response or failure; a final outcome settles its unit."""
        call_id = self.request_call.get(body.get("request_seq"))  # type: ignore[arg-type]
        call = self.calls.get(call_id or "")
        if call is None:
            self.fail(seq, f"{kind} request_seq {body.get('request_seq')!r} is no step.requested")
            return
        if call.final_seq is not None:
            self.fail(
                seq, f"call {call.id} has an outcome after its final one (seq {call.final_seq})"
            )
            return
        plan = self.plans[call.step]
        if kind == "step.responded":
            call.responses += 1
            value = parse(plan, text_of(blob("response") or b"", str(body.get("format"))))
            if value is not None:
                call.value, call.status, call.final_seq = value, "parsed", seq
            elif call.responses >= plan.retry + 1:
                call.status, call.final_seq = "unparseable", seq
        elif body.get("final") is True:
            call.status, call.final_seq = "given-up", seq
        if call.final_seq is not None:
            unit = call.item if plan.on == "item" else (call.trial or "")
            self._settle(call.step, unit, seq, call.k)

    def _after(self, trial: str) -> Mapping[str, str] | None:
        arm = self.study.arms.get(trial.split("|", 1)[0])
        return arm.after if arm is not None else None

    def prior(self, trial: str, after: Mapping[str, str]) -> dict[str, str] | str:
        """§9: the ``{prior.*}`` values of a second-stage trial, from what is recorded so far.

        A string says why there are none (``"waiting ..."`` while the first stage is not final).
        """
        prior = f"{after['arm']}|{trial.split('|', 1)[1]}"
        if prior in self.given_up or prior in self.excluded:
            return f"its first-stage trial {prior} has no response"
        if prior not in self.responses:
            return f"waiting for its first-stage trial {prior}"
        values = {"prior.response": self.responses[prior][1]}
        step = after.get("answer")
        if step is None:
            return values
        decided = self.decisions.get((step, prior))
        if decided is None:
            return f"waiting for step {step!r} to decide on {prior}"
        if decided[1] is None:
            return f"step {step!r} reached no decision on {prior}"
        values["prior.answer"] = str(slot_text(decided[1], None))
        if after.get("rule") == "next-option":
            options = self.study.fields(self.stimulus.get(trial, "")).get("options") or []
            labels = [chr(ord("A") + i) for i in range(len(options))]
            label = values["prior.answer"].strip().upper()
            if label not in labels:
                return f"step {step!r} decided {values['prior.answer']!r}: not an option label"
            i = labels.index(label)
            j = (i + 1) % len(labels)
            values.update(
                {
                    "prior.answer": label,
                    "prior.answer_text": str(options[i]),
                    "prior.other": labels[j],
                    "prior.other_text": str(options[j]),
                }
            )
        return values

    def _requested(
        self,
        seq: int,
        body: dict[str, Any],
        blob: Callable[[str], bytes | None],
        request_call: dict[int, str],
    ) -> None:
        call_id = str(body.get("call"))
        call = self._call_of(seq, call_id, body)
        if call is None:
            return
        request_call[seq] = call_id
        if call.attempts == 0:
            why = self.sample_due(call)
            if why is not None:
                self.fail(seq, f"call {call_id} was requested, but {why}")
        call.attempts += 1
        call.last_request = seq
        if body.get("attempt") != call.attempts:
            self.fail(
                seq, f"call {call_id}: attempt {body.get('attempt')!r}, expected {call.attempts}"
            )
        if call.final_seq is not None:
            self.fail(
                seq,
                f"call {call_id} was requested again after its final outcome "
                f"(seq {call.final_seq}): a call made twice",
            )
        self._check_request(seq, call, body, blob)

    def _call_of(self, seq: int, call_id: str, body: dict[str, Any]) -> Call | None:
        """The call a step.requested names, if its id and fields are one of a locked step."""
        head, _, rest = call_id.partition("|")
        step = head[len("step:") :] if head.startswith("step:") else ""
        plan = self.plans.get(step)
        if plan is None or body.get("step") != step:
            self.fail(seq, f"step.requested call {call_id!r} names no locked step")
            return None
        model, _, unit = rest.partition("|")
        trial: str | None = None
        if plan.on == "item":
            found = self._item_unit(step, unit)
            if found is None:
                self.fail(seq, f"call {call_id!r} is not a call of item step {step!r}")
                return None
            item, sample = found
        else:
            trial, item, sample = unit, self.stimulus.get(unit, ""), 1
        if (
            (model or None) not in plan.models
            or body.get("item") != item
            or (body.get("trial") != trial)
        ):
            self.fail(
                seq, f"call {call_id!r}: the event's model, item or trial differ from its call id"
            )
            return None
        return self.calls.setdefault(
            call_id, Call(call_id, step, model or None, item, trial, k=sample)
        )

    def _item_unit(self, step: str, unit: str) -> tuple[str, int] | None:
        """An item step call's ``ITEM|K`` as (item, sample k), if it names a locked item.

        §8.6: samples k > 1 only of a verified step and its verifier.
        """
        item, _, k = unit.rpartition("|")
        sample = int(k) if k.isdigit() and k == str(int(k)) else 0
        if sample < 1 or (sample > 1 and self.host_of(step) is None):
            return None
        return (item, sample) if item in self.study.item_ids else None

    def _check_request(
        self, seq: int, call: Call, body: dict[str, Any], blob: Callable[[str], bytes | None]
    ) -> None:
        """§8: the recorded request is the one re-rendered from the locked template and inputs."""
        call_id = call.id
        values = self.values(call)
        if isinstance(values, str):
            self.fail(seq, f"call {call_id} was requested before its inputs existed: {values}")
            return
        wire = wire_form(body.get("backend"))
        try:
            want = self.request_bytes(call, values, wire)
        except PromptError as exc:
            self.fail(seq, f"call {call_id}: the request cannot be re-rendered: {exc}")
            return
        self.rendered += 1
        got = blob("request")
        digest = hashlib.sha256(want).hexdigest()
        if got != want or body.get("request_sha256") != digest:
            self.fail(
                seq,
                f"call {call_id}: the step request is not the one re-rendered from "
                f"the locked template {self.plans[call.step].template.name} and its recorded "
                "inputs",
            )

    def judge_record(self, step: str, trial: str) -> dict[str, Any] | None:
        """scoring.md §10: the ``judge`` member of a judged trial (None: a call not final)."""
        return judge_record(self.plans[step], self.calls, trial)


def _locked_step(protocol: Mapping[str, Any], step: str) -> tuple[dict[str, Any], str | int]:
    """``protocol.locked`` ``steps.<step>`` and its aggregation rule.

    The rule is ``majority``, ``unanimous`` or k; a step that is not locked, or another rule,
    is refused.
    """
    rec = (protocol.get("steps") or {}).get(step)
    if not isinstance(rec, dict):
        raise PromptError(f"protocol.locked has no step {step!r}")
    raw_rule = rec.get("aggregate")
    rule = raw_rule.get("k") if isinstance(raw_rule, dict) else raw_rule
    if rule not in ("majority", "unanimous") and type(rule) is not int:
        raise PromptError(f"protocol.locked steps.{step}.aggregate: {raw_rule!r}")
    return rec, rule


def _settle(
    calls: dict[str, Call],
    request_call: dict[int, str],
    plan: StepPlan,
    seq: int,
    kind: str,
    body: dict[str, Any],
    blob: Callable[..., bytes | None],
) -> None:
    """A ``step.responded`` or ``step.failed`` event applied to its call (prompts.md §8.3).

    A response re-parsed by the locked parser makes the call final as parsed, or as
    unparseable once its retries are used up; a final failure gives it up.
    """
    found = calls.get(request_call.get(body.get("request_seq"), ""))  # type: ignore[arg-type]
    if found is None or found.final_seq is not None:
        return
    if kind == "step.responded":
        found.responses += 1
        value = parse(plan, text_of(blob("response") or b"", str(body.get("format"))))
        if value is not None:
            found.value, found.status, found.final_seq = value, "parsed", seq
        elif found.responses >= plan.retry + 1:
            found.status, found.final_seq = "unparseable", seq
    elif body.get("final") is True:
        found.status, found.final_seq = "given-up", seq


def judge_records(
    protocol: Mapping[str, Any],
    step: str,
    events: Sequence[tuple[int, str, dict[str, Any], Callable[..., bytes | None]]],
) -> dict[str, dict[str, Any] | None]:
    """scoring.md §10: the ``judge`` member of every trial the judge step ``step`` judged.

    Re-derived from the step's recorded responses alone (re-parsed by the locked parser and
    ``on_unparseable`` rule, aggregated by the locked rule); None for a trial whose judge
    calls are not all final. Every trial that has a ``trial.requested`` is listed.
    """
    rec, rule = _locked_step(protocol, step)
    plan = StepPlan(
        step,
        "trial",
        tuple(m or None for m in rec.get("models") or []),
        Template(step, ()),
        None,
        str(rec.get("parser")),
        tuple(rec.get("labels") or ()),
        None,
        int((rec.get("on_unparseable") or {}).get("retry", 0)),
        "exclude",
        rule,
        "blind",
        None,
    )
    calls: dict[str, Call] = {}
    request_call: dict[int, str] = {}
    trials: list[str] = []
    for seq, kind, body, blob in events:
        if kind == "trial.requested":
            trials.append(str(body.get("trial")))
        elif kind == "step.requested" and body.get("step") == step:
            call_id = str(body.get("call"))
            call = calls.setdefault(call_id, Call(call_id, step, None, "", body.get("trial")))
            call.attempts += 1
            call.last_request = seq
            request_call[seq] = call_id
        elif kind in ("step.responded", "step.failed"):
            _settle(calls, request_call, plan, seq, kind, body, blob)
    return {trial: judge_record(plan, calls, trial) for trial in dict.fromkeys(trials)}


def unit_call_ids(plan: StepPlan, unit: str) -> list[str]:
    """The call ids of ``plan`` on an item (item step) or a trial (trial step)."""
    if plan.on == "item":
        return [f"step:{plan.name}|{m or ''}|{unit}|1" for m in plan.models]
    return [f"step:{plan.name}|{m or ''}|{unit}" for m in plan.models]


def judge_record(plan: StepPlan, calls: Mapping[str, Call], trial: str) -> dict[str, Any] | None:
    """scoring.md §10: the ``judge`` member of a judged trial (None: a call not final)."""
    votes: list[dict[str, Any]] = []
    values: list[Any] = []
    for call_id in unit_call_ids(plan, trial):
        call = calls.get(call_id)
        model = call_id.split("|")[1]
        if call is None:
            values.append(None)
            votes.append(
                {
                    "model": model,
                    "vote": None,
                    "status": "no-input",
                    "request_seq": None,
                    "response_seq": None,
                    "responses": 0,
                }
            )
            continue
        if call.final_seq is None:
            return None
        value = call.value if call.status == "parsed" else None
        values.append(value)
        votes.append(
            {
                "model": model,
                "vote": value,
                "status": call.status,
                "request_seq": call.last_request,
                "response_seq": call.final_seq,
                "responses": call.responses,
            }
        )
    rule = plan.aggregate
    return {
        "step": plan.name,
        "aggregate": {"k": rule} if isinstance(rule, int) else rule,
        "decision": decide(rule, values, plan.sets),
        "votes": votes,
    }


def review_sample(judged: Sequence[tuple[int, bool]], n: int, seed: str) -> list[int]:
    """scoring.md §11: the subjects of a review sample, in ascending order.

    Per stratum (unanimous, then split) the ``n`` response seqs with the smallest SHA-256 of
    ``"{seed}|{seq}"``.
    """
    chosen: list[int] = []
    for same in (True, False):
        stratum = sorted(
            (hashlib.sha256(f"{seed}|{s}".encode()).hexdigest(), s) for s, u in judged if u is same
        )
        chosen.extend(s for _, s in stratum[:n])
    return sorted(chosen)


def _item_plan(
    protocol: Mapping[str, Any], step: str, schema: Mapping[str, Any] | None
) -> StepPlan:
    """The plan of plain item step ``step`` as far as its decisions need it (no template)."""
    rec, rule = _locked_step(protocol, step)
    models = tuple(m or None for m in rec.get("models") or [])
    return StepPlan(
        step,
        "item",
        models,
        Template(step, ()),
        None,
        str(rec.get("parser")),
        tuple(rec.get("labels") or ()),
        dict(schema) if schema is not None else None,
        int((rec.get("on_unparseable") or {}).get("retry", 0)),
        "exclude",
        rule,
        "blind",
        None,
    )


def item_decisions(
    protocol: Mapping[str, Any],
    step: str,
    schema: Mapping[str, Any] | None,
    events: Sequence[tuple[int, str, dict[str, Any], Callable[..., bytes | None]]],
) -> dict[str, Any]:
    """§8.3: the decision of plain item step ``step`` on each item whose calls are all final.

    From the step's recorded responses alone: each call ``step:{step}|{model}|{item}|1``
    re-parsed by the locked parser (``schema`` for ``json``) and ``on_unparseable`` rule, the
    votes aggregated by the locked rule (None: no decision).
    """
    plan = _item_plan(protocol, step, schema)
    calls: dict[str, Call] = {}
    request_call: dict[int, str] = {}
    for seq, kind, body, blob in events:
        if kind == "step.requested" and body.get("step") == step:
            call_id = str(body.get("call"))
            calls.setdefault(call_id, Call(call_id, step, None, str(body.get("item")), None))
            request_call[seq] = call_id
        elif kind in ("step.responded", "step.failed"):
            _settle(calls, request_call, plan, seq, kind, body, blob)
    out: dict[str, Any] = {}
    for item in sorted({c.item for c in calls.values()}):
        votes = _final_votes(plan, calls, item)
        if votes is not None:
            out[item] = decide(plan.aggregate, votes, plan.sets)
    return out


def _final_votes(plan: StepPlan, calls: Mapping[str, Call], item: str) -> list[Any] | None:
    """The votes of ``item``'s calls (None for one not parsed), or None while one is not final."""
    votes = []
    for call_id in unit_call_ids(plan, item):
        made = calls.get(call_id)
        if made is None or made.final_seq is None:
            return None
        votes.append(made.value if made.status == "parsed" else None)
    return votes
