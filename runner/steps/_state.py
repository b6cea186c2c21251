"""Where a study's step calls stand: a projection of ``step.*`` events (``docs/trials.md`` §5).

Like trials, step calls are event-sourced: :meth:`StepWork.load` rebuilds every call's
attempts, responses and decision from the ledger, so a restarted run sends only the calls that
have no final outcome. A call is *final* once it has a response that parses, or
``on_unparseable.retry + 1`` responses that do not (its vote is then missing), or a
``step.failed`` with ``final: true``. A step's *decision* for an item (item steps) or a trial
(trial steps) is the aggregate of its models' votes once every one of those calls is final.

A call is *due* only when everything it reads exists: an item step when the steps it reads have
decided for the item, a trial step when its trial has a response and the steps it reads have
decided. A call whose input has no decision is never made; what reads it is then a recorded
exclusion (``trial.excluded``) for trials, and simply absent for steps.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ledger import Ledger
from runner._render import Renderer
from runner.spec import Study
from runner.steps._core import (
    StepCall,
    StepSpec,
    aggregate,
    item_call_id,
    item_step_calls,
    parse_output,
    synonym_groups,
    trial_step_calls,
    votes_text,
)
from runner.steps._render import StepRenderer

__all__ = ["CallState", "StepWork", "reply_text", "request_user_text"]

_PENDING = object()


def reply_text(raw: bytes, fmt: str) -> str:
    """The text of a recorded response body (``docs/trials.md`` §2); ``""`` if it has none.

    ``"text"`` (a data trial's response, §6): the body is the text, UTF-8.
    """
    if fmt == "text":
        return raw.decode("utf-8", errors="replace")
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return ""
    if fmt == "anthropic-batch-result" and isinstance(body, dict):
        body = (body.get("result") or {}).get("message") or {}
    if not isinstance(body, dict):
        return ""
    if fmt == "openai-chat":
        return _chat_text(body)
    return _message_text(body)


def _chat_text(body: dict[str, Any]) -> str:
    """The text of an OpenAI-compatible chat completion (its first choice)."""
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


def _message_text(body: dict[str, Any]) -> str:
    """The text of an Anthropic message: its text blocks, joined."""
    content = body.get("content")
    if not isinstance(content, list):
        return ""
    return "".join(
        b.get("text", "")
        for b in content
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    )


def request_user_text(body: dict[str, Any]) -> str:
    """The text of a request's last user message (its text blocks, in order)."""
    messages = body.get("messages") or []
    if not messages:
        return ""
    content = messages[-1].get("content")
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if b.get("type") == "text")


@dataclass
class CallState:
    """The recorded history of one step call (the fields the engine shares with trials)."""

    attempts: int = 0
    failures: int = 0
    responded: int | None = None  # seq of the response that parsed
    given_up: int | None = None  # seq of the final step.failed
    exhausted: int | None = None  # seq of the last unparseable response, retries used up
    unparseable: int = 0
    open_request: int | None = None
    value: Any = None
    cost_usd: float = 0.0
    last_request: int | None = None  # seq of its latest step.requested

    @property
    def final(self) -> bool:
        """True once the call has a parsed response, used up its retries, or was given up."""
        return (
            self.responded is not None or self.given_up is not None or (self.exhausted is not None)
        )


class StepWork:
    """Every step call of a study and its state, rebuilt from the ledger by :meth:`load`."""

    def __init__(self, study: Study, renderer: Renderer) -> None:
        """Read the step templates; list every item step call (trial step calls come later)."""
        self.study = study
        self.render = StepRenderer(study, renderer)
        self.items = study.stimulus_ids()
        self.item_calls: dict[str, list[StepCall]] = {
            name: item_step_calls(spec, self.items, study.seed)
            for name, spec in study.steps.items()
            if spec.on == "item"
        }
        self._by_item: dict[str, dict[str, list[StepCall]]] = {}  # step -> item -> its calls
        for name, listed in self.item_calls.items():
            models = study.steps[name].models
            index: dict[str, list[StepCall]] = {}
            for call in listed:
                index.setdefault(call.stimulus, []).append(call)
            for calls in index.values():
                calls.sort(key=lambda c: models.index(c.model))
            self._by_item[name] = index
        # prompts.md §8.6: verified item steps and their verifiers (verifier -> verified step)
        self.verified = {n: s.verified_by for n, s in study.steps.items() if s.verified_by}
        self.verifier_of = {v.step: n for n, v in self.verified.items()}
        self.calls: dict[str, CallState] = {}
        self.info: dict[str, StepCall] = {}
        self.request_call: dict[int, str] = {}
        self.responses: dict[str, tuple[int, str]] = {}  # trial -> (response seq, text)
        self.requests: dict[str, str] = {}  # trial -> user text of its answered request
        self.excluded: dict[str, int] = {}  # trial -> seq of its trial.excluded
        self.trial_stimulus: dict[str, str] = {}
        self.log_size = 0

    # ------------------------------------------------------------------ projection

    def state(self, call: StepCall) -> CallState:
        """The state of ``call`` (a new, empty one the first time)."""
        self.info.setdefault(call.id, call)
        return self.calls.setdefault(call.id, CallState())

    def load(self, log: Ledger) -> None:
        """Rebuild every call's state, the trials' responses and the exclusions from ``log``."""
        self.calls.clear()
        self.request_call.clear()
        self.responses.clear()
        self.requests.clear()
        self.excluded.clear()
        trial_requests: dict[int, str] = {}
        sees_request = any(s.sees == "request" for s in self.study.steps.values())
        for event in log.events():
            kind, body = event.kind, event.body
            if kind == "trial.requested":
                trial_requests[event.seq] = body["trial"]
                self.trial_stimulus[body["trial"]] = body["stimulus"]
            elif kind == "trial.responded":
                trial = trial_requests[body["request_seq"]]
                text = reply_text(log.blob(event.blobs["response"]), body.get("format", ""))
                self.responses[trial] = (event.seq, text)
                if sees_request:
                    request_seq = body["request_seq"]
                    request = json.loads(log.blob(log.get(request_seq).blobs["request"]))
                    self.requests[trial] = request_user_text(request)
            elif kind == "trial.excluded":
                self.excluded[body["trial"]] = event.seq
            elif kind == "step.requested":
                record = self.calls.setdefault(body["call"], CallState())
                record.attempts = max(record.attempts, int(body["attempt"]))
                record.open_request = event.seq
                record.last_request = event.seq
                self.request_call[event.seq] = body["call"]
            elif kind == "step.responded":
                call_id = self.request_call[body["request_seq"]]
                record = self.calls[call_id]
                if record.open_request == body["request_seq"]:
                    record.open_request = None
                cost = body.get("cost_usd")
                if isinstance(cost, int | float):
                    record.cost_usd += cost
                text = reply_text(log.blob(event.blobs["response"]), body.get("format", ""))
                self.observe(body["step"], record, event.seq, text)
            elif kind == "step.failed":
                record = self.calls[self.request_call[body["request_seq"]]]
                if record.open_request == body["request_seq"]:
                    record.open_request = None
                if body.get("error_type") not in ("interrupted", "configuration"):
                    record.failures += 1
                if body.get("final"):
                    record.given_up = event.seq
        self.log_size = log.size

    def observe(self, step: str, record: CallState, seq: int, text: str) -> bool:
        """Record a response of ``step``; True when the call is final after it."""
        spec = self.study.steps[step]
        value = parse_output(spec, text, self.render.schemas.get(step))
        if value is not None:
            record.responded = seq
            record.value = value
            return True
        record.unparseable += 1
        if record.unparseable >= spec.retry + 1:
            record.exhausted = seq
            return True
        return False

    def parsed(self, step: str, text: str) -> Any:
        """The parsed value of a response text of ``step`` (None: unparseable)."""
        return parse_output(self.study.steps[step], text, self.render.schemas.get(step))

    # ------------------------------------------------------------------ decisions

    def unit_calls(self, step: str, unit: str) -> list[StepCall]:
        """The calls of ``step`` on ``unit`` (an item id, or a trial id for a trial step)."""
        spec = self.study.steps[step]
        if spec.on == "item":  # in the step's model order (the votes' order, prompts.md §8.3)
            return self._by_item.get(step, {}).get(unit, [])
        return trial_step_calls(spec, unit, self.trial_stimulus.get(unit, ""))

    def votes(self, step: str, unit: str) -> list[tuple[StepCall, CallState]] | None:
        """Each call of ``step`` on ``unit`` with its state; None until every one is final."""
        out = []
        for call in self.unit_calls(step, unit):
            record = self.calls.get(call.id)
            if record is None or not record.final:
                return None
            out.append((call, record))
        return out

    def sample_calls(self, step: str, item: str, k: int) -> list[StepCall]:
        """The calls of sample ``k`` of item step ``step`` on ``item``, in model order."""
        if k == 1:
            return self.unit_calls(step, item)
        spec = self.study.steps[step]
        return [
            StepCall(item_call_id(step, m, item, k), step, m, item, None, 0, rep=k)
            for m in spec.models
        ]

    def sample_decision(self, step: str, item: str, k: int) -> Any:
        """The aggregate of sample ``k`` of ``step`` on ``item`` (None: undecided), or pending."""
        out = []
        for call in self.sample_calls(step, item, k):
            record = self.calls.get(call.id)
            if record is None or not record.final:
                if step in self.verifier_of:
                    return None if record is None and self._verifier_blocked(call) else _PENDING
                return None if k == 1 and self.blocked(step, item) else _PENDING
            out.append(record.value if record.responded else None)
        spec = self.study.steps[step]
        return aggregate(spec.aggregate, out, spec.sets)

    def _verifier_blocked(self, call: StepCall) -> bool:
        """Whether a verifier call can never be made: another step it reads decided nothing.

        (Its own sample is read apart, by :meth:`chain`.)
        """
        host = self.verifier_of[call.step]
        for read in self.render.reads.get(call.step, ()):
            if read == host or self.study.steps[read].on != "item":
                continue
            d = self.decision(read, call.stimulus)
            if d is _PENDING:
                return False
            if d is None:
                return True
        return False

    def chain(self, step: str, item: str) -> tuple[str, int, Any, Any]:
        """Where the samples of verified step ``step`` stand on ``item`` (prompts.md §8.6).

        ``("step", k, ...)``: sample k of the step is due or waiting; ``("verifier", k, d,
        ...)``: its verifier's sample k is; ``("accepted", k, d, v)``: the verifier accepted
        sample k (decision d, verdict v); ``("rejected", n, None, None)``: every allowed
        sample was rejected (a sample with no decision counts as rejected); ``("unjudged",
        k, None, None)``: the verifier can judge no sample (another step it reads has no
        decision), so none is accepted and no further sample is taken.
        """
        ver = self.verified[step]
        for k in range(1, ver.samples + 1):
            d = self.sample_decision(step, item, k)
            if d is _PENDING:
                return ("step", k, None, None)
            if d is None:
                if k == 1 and not any(c.id in self.calls for c in self.sample_calls(step, item, 1)):
                    return ("rejected", 1, None, None)  # blocked (§8.3): no sample can be taken
                continue
            checks = self.sample_calls(ver.step, item, k)
            if not any(c.id in self.calls for c in checks) and self._verifier_blocked(checks[0]):
                return ("unjudged", k, None, None)  # it can judge no sample: none is accepted
            v = self.sample_decision(ver.step, item, k)
            if v is _PENDING:
                return ("verifier", k, d, None)
            if v in ver.accept:
                return ("accepted", k, d, v)
        return ("rejected", ver.samples, None, None)

    def rejection(self, step: str, item: str) -> str | None:
        """Why verified step ``step`` has no decision for ``item`` (every sample rejected)."""
        if step not in self.verified:
            return None
        state, n, _, _ = self.chain(step, item)
        if state == "unjudged":
            return (
                f"step {step!r}: its verifier {self.verified[step].step!r} can judge no "
                f"sample for item {item!r} (a step it reads has no decision)"
            )
        if state != "rejected":
            return None
        return (
            f"step {step!r}: its verifier {self.verified[step].step!r} accepted none of "
            f"its {n} sample(s) for item {item!r}"
        )

    def _matched(self, step: str, unit: str, values: list[Any]) -> Any:
        """A synonym-matched step's decision from its votes (prompts.md §8.3), or pending.

        Its matcher's decision supplies the groups; a matcher with no decision leaves the step
        with no decision (never a fall back to string-normalised voting).
        """
        spec = self.study.steps[step]
        groups = self.decision(str(spec.match_by), unit)
        if groups is _PENDING or groups is None:
            return groups
        return aggregate(spec.aggregate, values, spec.sets, synonym_groups(groups))

    def matcher_votes(self, matcher: str, unit: str) -> str | None:
        """The ``{votes.NAME}`` text of ``matcher`` on ``unit``; None until every vote is final."""
        step = self.render.matches[matcher]
        votes = self.votes(step, unit)
        if votes is None:
            return None
        values = [r.value if r.responded else None for _, r in votes]
        return votes_text(values, self.study.steps[step].sets)

    def decision(self, step: str, unit: str) -> Any:
        """The aggregate of ``step`` on ``unit`` (None: undecided), or ``_PENDING``.

        A verified step's decision is its accepted sample's, its verifier's the verdict on that
        sample; none when every sample was rejected (prompts.md §8.6).
        """
        host = step if step in self.verified else self.verifier_of.get(step)
        if host is not None:
            state, _, d, v = self.chain(host, unit)
            if state in ("step", "verifier"):
                return _PENDING
            return (d if host == step else v) if state == "accepted" else None
        votes = self.votes(step, unit)
        if votes is None:
            return None if self.blocked(step, unit) else _PENDING
        spec = self.study.steps[step]
        if spec.match_by is not None:
            return self._matched(step, unit, [r.value if r.responded else None for _, r in votes])
        return aggregate(
            spec.aggregate, [r.value if r.responded else None for _, r in votes], spec.sets
        )

    def settled(self, step: str, unit: str) -> bool:
        """Whether ``step`` has its decision (or its lack of one) on ``unit``: nothing to call."""
        return self.decision(step, unit) is not _PENDING

    def blocked(self, step: str, unit: str) -> bool:
        """Whether item step ``step`` can never decide for item ``unit`` (prompts.md §8.3).

        True when none of its calls there was made, every step it reads has decided, and one
        of them reached no decision (or lacks the field it reads): its calls are never made,
        so it has no decision either, and what reads it is excluded rather than left waiting.
        """
        if self.study.steps[step].on != "item":
            return False
        calls = self.unit_calls(step, unit)
        if any(c.id in self.calls for c in calls):
            return False
        if step in self.render.matches:  # a matcher of a step that can never be called
            return self.blocked(self.render.matches[step], unit)
        for read in self.render.reads.get(step, ()):
            if self.decision(read, unit) is _PENDING:
                return False
        return any(self.inputs(c) is None for c in calls)

    def decisions(self, steps: Iterable[str], units: Iterable[str]) -> dict[tuple[str, str], Any]:
        """Every decided (step, unit) among ``steps`` x ``units`` (undecided ones as None)."""
        out: dict[tuple[str, str], Any] = {}
        for step in steps:
            for unit in units:
                d = self.decision(step, unit)
                if d is not _PENDING:
                    out[(step, unit)] = d
        return out

    def outputs_for(self, call: StepCall) -> dict[tuple[str, str], Any]:
        """The decisions ``call``'s template reads."""
        out: dict[tuple[str, str], Any] = {}
        for step in self.render.reads.get(call.step, ()):
            unit = call.stimulus if self.study.steps[step].on == "item" else (call.trial or "")
            if self.verifier_of.get(call.step) == step:  # a verifier reads its own sample
                d = self.sample_decision(step, unit, call.rep)
            else:
                d = self.decision(step, unit)
            if d is not _PENDING:
                out[(step, unit)] = d
        return out

    # ------------------------------------------------------------------ what to run

    def inputs(self, call: StepCall) -> dict[str, str] | None:
        """The slot values of ``call``, or None when an input has no decision (not due)."""
        response = request = None
        if call.trial is not None:
            answered = self.responses.get(call.trial)
            if answered is None:
                return None
            response = answered[1]
            request = self.requests.get(call.trial)
        votes = None
        if call.step in self.render.matches:
            votes = self.matcher_votes(call.step, call.stimulus)
            if votes is None:
                return None
        return self.render.values(
            call, self.outputs_for(call), response=response, request=request, votes=votes
        )

    def body(self, call: StepCall) -> dict[str, Any]:
        """The request object of a due call (``docs/prompts.md`` §8)."""
        values = self.inputs(call)
        if values is None:
            raise ValueError(f"{call.id}: an input has no decision; the call is not due")
        return self.render.body(call, values)

    def pending_item_calls(
        self, layer: Sequence[str], models: Sequence[str | None]
    ) -> list[StepCall]:
        """The due, not final calls of the item steps of ``layer`` (call order, step by step)."""
        out = []
        for step in layer:
            host = step if step in self.verified else self.verifier_of.get(step)
            for call in self.item_calls[step]:
                if call.model not in models:
                    continue
                if host is not None:  # prompts.md §8.6: the sample the chain is at
                    state, k, _, _ = self.chain(host, call.stimulus)
                    if state != ("step" if step == host else "verifier"):
                        continue
                    if k > 1:
                        call = self.sample_calls(step, call.stimulus, k)[
                            self.study.steps[step].models.index(call.model)
                        ]
                record = self.calls.get(call.id)
                if (record is None or not record.final) and self.inputs(call) is not None:
                    self.info.setdefault(call.id, call)
                    out.append(call)
        return out

    def pending_trial_calls(
        self, layer: Sequence[str], trials: Sequence[str], models: Sequence[str | None]
    ) -> list[StepCall]:
        """The due, not final calls of the trial steps of ``layer``, trials in schedule order."""
        out = []
        for trial in trials:
            if trial not in self.responses:
                continue
            for step in layer:
                spec = self.study.steps[step]
                for call in trial_step_calls(spec, trial, self.trial_stimulus.get(trial, "")):
                    if call.model not in models:
                        continue
                    record = self.calls.get(call.id)
                    if (record is None or not record.final) and self.inputs(call) is not None:
                        self.info.setdefault(call.id, call)
                        out.append(call)
        return out

    def dangling(self) -> list[tuple[str, int]]:
        """(call id, request seq) of step requests with no outcome."""
        return [(c, r.open_request) for c, r in self.calls.items() if r.open_request is not None]

    def item_inputs(self, item: str) -> dict[str, str] | None:
        """The ``{steps.*}`` values of ``item``'s trials; None: the item's trials are excluded."""
        steps = self.render.needed_item_steps()
        return self.render.template_values(item, self.decisions(steps, [item]))

    def missing_step(self, item: str) -> str:
        """The first step whose decision keeps ``item`` out (for the exclusion's record)."""
        for name in sorted(self.render.needed_item_steps()):
            d = self.decision(name, item)
            spec = self.study.steps[name]
            if d is _PENDING or d is None or (spec.screens and not spec.keeps(d)):
                return name
        return ""

    def item_steps_final(self, item: str) -> bool:
        """Whether every item step the trials read has decided for ``item``."""
        return all(self.decision(n, item) is not _PENDING for n in self.render.needed_item_steps())


def step_status(study: Study, log: Ledger) -> list[dict[str, Any]]:
    """Per step: its calls due, parsed, unparseable, given up and pending (``ledger status``).

    ``calls`` counts the calls that are due (their inputs exist) or were made; ``responses``
    every recorded response (retries included); ``decided`` the units (items or trials) with
    a decision and ``undecided`` those whose votes reached none.
    """
    work = StepWork(study, Renderer(study))
    work.load(log)
    order = list(work.responses)
    return [_step_row(work, name, spec, order) for name, spec in study.steps.items()]


def _step_row(work: StepWork, name: str, spec: StepSpec, order: list[str]) -> dict[str, Any]:
    """One step's row of :func:`step_status`."""
    prefix = f"step:{name}|"
    made = {c: r for c, r in work.calls.items() if c.startswith(prefix)}
    pending = (
        work.pending_item_calls([name], spec.models)
        if spec.on == "item"
        else work.pending_trial_calls([name], order, spec.models)
    )
    units = work.items if spec.on == "item" else order
    decided = work.decisions([name], units)
    return {
        "step": name,
        "on": spec.on,
        "models": [m or "" for m in spec.models],
        "calls": len(set(made) | {c.id for c in pending}),
        **_call_counts(list(made.values())),
        "pending": len([c for c in pending if c.id not in made or not made[c.id].final]),
        "decided": sum(v is not None for v in decided.values()),
        "undecided": sum(v is None for v in decided.values()),
        "cost_usd": round(sum(r.cost_usd for r in made.values()), 8),
    }


def _call_counts(made: list[CallState]) -> dict[str, int]:
    """How a step's calls made so far stand (the middle columns of :func:`step_status`)."""
    return {
        "parsed": sum(r.responded is not None for r in made),
        "unparseable_responses": sum(r.unparseable for r in made),
        "retries_used_up": sum(r.exhausted is not None for r in made),
        "given_up": sum(r.given_up is not None for r in made),
        "awaiting": sum(r.open_request is not None for r in made),
    }


def prior_values(
    study: Study, work: StepWork, state: Any, trial: Any, after: dict[str, str]
) -> dict[str, str] | str | None:
    """The ``{prior.*}`` values of an answer-dependent trial (``docs/prompts.md`` §9).

    None while its first-stage trial (the same id under ``after["arm"]``) is not final or its
    answer step has not decided; a string saying why when the trial must be excluded (the first
    stage was given up or excluded, its answer step reached no decision, or, for
    ``next-option``, the decision is not one of the item's option labels).
    """
    from runner._render import prior_trial
    from runner.steps._core import output_text

    prior = prior_trial(trial.id, after["arm"])
    record = state.trials.get(prior)
    if record is None:
        return f"first-stage trial {prior} is not in the schedule"
    if not record.final:
        return None
    answered = work.responses.get(prior)
    if record.responded is None or answered is None:
        return f"first-stage trial {prior} has no response (given up or excluded)"
    values = {"prior.response": answered[1]}
    step = after.get("answer")
    if step is None:
        return values
    decision = work.decision(step, prior)
    if decision is _PENDING:
        return None
    if decision is None:
        return f"step {step!r} reached no decision on first-stage trial {prior}"
    values["prior.answer"] = str(output_text(decision))
    if after.get("rule") == "next-option":
        item = (
            work.render.renderer.items.by_id[trial.stimulus]
            if (work.render.renderer.items is not None)
            else None
        )
        label = values["prior.answer"].strip().upper()
        if item is None or label not in item.labels:
            return (
                f"step {step!r} decided {values['prior.answer']!r} on {prior}, which is not "
                "an option label of the item"
            )
        i = item.labels.index(label)
        other = (i + 1) % len(item.labels)
        values.update(
            {
                "prior.answer": label,
                "prior.answer_text": item.options[i],
                "prior.other": item.labels[other],
                "prior.other_text": item.options[other],
            }
        )
    return values
