"""Render and check step requests (``docs/prompts.md`` §8; ``docs/adr/0005``).

:class:`StepRenderer` reads each step's template and schema once, lists what stops a lock
(:meth:`StepRenderer.problems`: an input no earlier step produces, a cycle, a trial step read
by an item step, a blind step with a slot that carries the condition), and renders the request
of a step call from its inputs (:meth:`StepRenderer.body`). The verifier re-implements this
from the docs and compares every recorded step request byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from runner._render import ANSWER_SLOTS, Renderer, Template, _read_template, request_parameters
from runner.spec import Study
from runner.steps._core import (
    LEAK_SLOTS,
    StepCall,
    StepSpec,
    output_text,
    step_graph,
    step_layers,
    step_slots,
)

__all__ = ["TRIAL_SLOTS", "StepRenderer"]

TRIAL_SLOTS = ("response", "reference", "reference_text")
"""Slots only a trial step fills: the target's response text and the item's key."""


class StepRenderer:
    """Every step request of a study, rendered from its locked files."""

    def __init__(self, study: Study, renderer: Renderer) -> None:
        """Read each step's template and schema (:class:`runner.spec.SpecError` if unusable)."""
        self.study = study
        self.renderer = renderer
        self.templates: dict[str, Template] = {
            name: _read_template(spec.template, study.rel(spec.template))
            for name, spec in study.steps.items()
        }
        self.schemas: dict[str, dict[str, Any]] = {
            name: json.loads(spec.schema.read_bytes())
            for name, spec in study.steps.items()
            if spec.schema is not None
        }
        self.reads: dict[str, set[str]] = {
            name: {s for s, _ in step_slots(p.name for p in tpl.slots())}
            for name, tpl in self.templates.items()
        }
        self.item_reads: set[str] = {
            s for t in renderer.item_templates() for s, _ in step_slots(p.name for p in t.slots())
        }  # the item template and every factor level's (docs/study-spec.md "Factors")
        # prompts.md §8.3: matcher -> the set-valued step whose votes it reads ({votes.NAME})
        self.matches: dict[str, str] = {
            s.match_by: n for n, s in study.steps.items() if s.match_by is not None
        }

    # ------------------------------------------------------------------ graph

    def layers(self, on: str) -> list[list[str]]:
        """The steps run ``on`` ``"item"`` or ``"trial"``, in the layers they run in."""
        steps = {n: s for n, s in self.study.steps.items() if s.on == on}
        reads = {n: self._order_reads(n) & set(steps) for n in steps}
        return step_layers(steps, reads)

    def _order_reads(self, name: str) -> set[str]:
        """What ``name`` waits for (prompts.md §8.3).

        The steps it reads, the set-valued step a matcher reads the votes of, and the matcher
        of each synonym-matched step it reads.
        """
        out = set(self.reads.get(name, ()))
        if name in self.matches:
            out.add(self.matches[name])
        for read in list(out):
            match = self.study.steps[read].match_by if read in self.study.steps else None
            if match is not None and match != name:
                out.add(match)
        return out

    def needed_item_steps(self) -> set[str]:
        """The item steps a trial's request reads (through the item template), transitively.

        The reference step of a ddx study (``docs/scoring.md`` §12) is needed too: a trial waits
        for its item's reference sets, and an item without them is a recorded exclusion.
        """
        out: set[str] = set()
        reference = self.study.ddx.reference_step if self.study.ddx is not None else None
        todo = [s for s in [*self.item_reads, reference] if s in self.study.steps]
        while todo:
            name = todo.pop()
            if name in out:
                continue
            out.add(name)
            todo += [s for s in self._order_reads(name) if s in self.study.steps]
        return out | {n for n, s in self.study.steps.items() if s.screens}

    def graph(self) -> dict[str, Any]:
        """The step graph as ``ledger arms`` and ``ledger schedule`` show it."""
        return {
            "steps": {
                name: {
                    "on": spec.on,
                    "models": [m or "" for m in spec.models],
                    "reads": sorted(self.reads[name]),
                    "sees": spec.sees,
                    "parser": spec.parser,
                }
                | ({"verified_by": spec.verified_by.record()} if spec.verified_by else {})
                for name, spec in self.study.steps.items()
            },
            "trial_reads": sorted(self.item_reads),
            "order": [*self.layers("item"), ["(trials)"], *self.layers("trial")],
        } | ({"ddx": self.study.ddx.record()} if self.study.ddx is not None else {})

    # ------------------------------------------------------------------ lock checks

    def problems(self) -> list[str]:
        """Everything about the steps that stops a lock, each naming template, line and slot."""
        out: list[str] = []
        steps = self.study.steps
        for name, spec in steps.items():
            tpl = self.templates[name]
            for slot in tpl.slots():
                problem = self._slot_problem(spec, slot.name)
                if problem:
                    out.append(
                        f"{tpl.name}:{slot.line}:{slot.column}: slot {{{slot.name}}}: "
                        f"{problem} ([steps.{name}])"
                    )
            items = [
                p
                for p in tpl.slots()
                if not p.name.startswith(("steps.", "votes."))
                and p.name not in TRIAL_SLOTS
                and p.name not in LEAK_SLOTS
                and not p.name.startswith("factor.")
                and p.name not in ANSWER_SLOTS
            ]
            if items and self.renderer.items is not None:
                out += self.renderer._unfilled(
                    Template(tpl.name, tuple(items)), list(self.renderer.items), answers=False
                )
            elif items and self.renderer.items is None:
                out.append(
                    f"{tpl.name}: [steps.{name}] reads item fields, which need an item "
                    "file ([stimuli] items)"
                )
        for item_tpl in self.renderer.item_templates():
            for slot in item_tpl.slots():
                if not slot.name.startswith("steps."):
                    continue
                problem = self._read_problem("item", slot.name, "the item template")
                if problem:
                    out.append(
                        f"{item_tpl.name}:{slot.line}:{slot.column}: slot "
                        f"{{{slot.name}}}: {problem}"
                    )
        for name, spec in steps.items():  # prompts.md §8.6: a verifier reads what it judges
            ver = spec.verified_by
            if ver is not None and ver.step in steps and name not in self.reads.get(ver.step, ()):
                out.append(
                    f"{self.templates[ver.step].name}: [steps.{name}] verified_by "
                    f"{ver.step!r}, whose template reads no {{steps.{name}}}: a verifier "
                    "must read the sample it judges"
                )
        for name, spec in steps.items():  # prompts.md §8.3: a matcher reads the votes it groups
            if spec.match_by in steps and spec.match_by is not None:
                tpl = self.templates[spec.match_by]
                if f"votes.{name}" not in {p.name for p in tpl.slots()}:
                    out.append(
                        f"{tpl.name}: [steps.{name}] match_by {spec.match_by!r}, whose "
                        f"template reads no {{votes.{name}}}: a synonym matcher must "
                        "read the votes it groups"
                    )
        cycle = step_graph({n: self._order_reads(n) & set(steps) for n in steps})
        if cycle:
            out.append(
                f"{self.study.spec_path}: steps: the steps read each other in a cycle: "
                f"{' -> '.join(cycle)}; a step may read only steps that run before it"
            )
        return out + self._ddx_problems()

    def _ddx_problems(self) -> list[str]:
        """``docs/scoring.md`` §12: each ddx step reads what its role needs."""
        ddx = self.study.ddx
        if ddx is None:
            return []
        reference = (
            [f"metadata.reference_{n}" for n in ("plausible", "highly_likely", "safety_critical")]
            if ddx.reference_step is None
            else [f"steps.{ddx.reference_step}"]
        )
        needs = [
            ("list", ddx.list_step, [["response"]]),
            ("match", ddx.match, [[f"steps.{ddx.list_step}"], reference]),
            ("grounding", ddx.grounding, [[f"steps.{ddx.list_step}"]]),
            ("uncertainty", ddx.uncertainty, [["response"]]),
        ]
        out = []
        for role, step, groups in needs:
            if step is None or step not in self.templates:
                continue
            names = {p.name for p in self.templates[step].slots()}
            for group in groups:
                if not any(n == g or n.startswith(g + ".") for n in names for g in group):
                    out.append(
                        f"{self.study.spec_path}: response.ddx.{role}: step {step!r} "
                        f"({self.templates[step].name}) reads none of "
                        + ", ".join("{" + g + "}" for g in group)
                        + f": the {role} step must read it"
                    )
        return out

    def _slot_problem(self, spec: StepSpec, slot: str) -> str | None:
        if slot in LEAK_SLOTS or slot.startswith("factor."):
            if slot == "request" and spec.sees == "request":
                return None
            if spec.sees == "blind":
                return (
                    "a blind step may not see the arm, a factor level, the model under test, "
                    "the trial or the request (it would leak the condition); remove the slot, "
                    'or declare sees = "request" for a grounding step that must see the input '
                    "as sent (it is then never called blind)"
                )
            return "a step that sees the request reads it as {request}; this slot is not one"
        if slot.startswith("steps."):
            return self._read_problem(spec.on, slot, f"step {spec.name!r}")
        if slot.startswith("votes."):
            if self.matches.get(spec.name) != slot[len("votes.") :]:
                return (
                    "only the synonym matcher a set-valued step names (match_by) reads "
                    "that step's votes, as {votes.NAME}"
                )
            return None
        if slot in TRIAL_SLOTS:
            if spec.on == "item":
                what = "the target's response" if slot == "response" else "the item's key"
                return f"an item step runs before any trial, and may not read {what}"
            return None
        if slot in ANSWER_SLOTS:
            return (
                "a step reads the item's key as {reference} (trial steps only) and the target's "
                "response as {response}"
            )
        return None

    def _read_problem(self, on: str, slot: str, reader: str) -> str | None:
        parts = slot.split(".")
        if len(parts) not in (2, 3):
            return "write {steps.NAME} or {steps.NAME.FIELD}"
        name = parts[1]
        target = self.study.steps.get(name)
        if target is None:
            known = ", ".join(self.study.steps) or "none"
            return f"no step named {name!r} produces it (steps: {known})"
        if target.on == "trial" and on == "item":
            return (
                f"{name!r} is a trial step (it runs after the trial's response), so "
                f"{reader}, which runs before the trial, cannot read it"
            )
        if len(parts) == 3:
            if target.parser != "json":
                return f"step {name!r} has the {target.parser} parser; only a json step has fields"
            props = self.schemas.get(name, {}).get("properties", {})
            if parts[2] not in props:
                return f"the schema of step {name!r} has no property {parts[2]!r}"
        return None

    # ------------------------------------------------------------------ requests

    def values(
        self,
        call: StepCall,
        outputs: Mapping[tuple[str, str], Any],
        *,
        response: str | None = None,
        request: str | None = None,
        votes: str | None = None,
    ) -> dict[str, str] | None:
        """The slot values of ``call``; None when a step it reads has no decision.

        ``outputs`` maps (step, item id or trial id) to the step's decision there;
        ``response``: the trial's response text (trial steps); ``request``: the user text of
        the trial's request (``sees = "request"`` steps); ``votes``: a synonym matcher's
        ``{votes.NAME}`` text (§8.3).
        """
        spec = self.study.steps[call.step]
        values: dict[str, str] = {}
        if self.renderer.items is not None:
            item = self.renderer.items.by_id[call.stimulus]
            values.update(self.renderer.values(item))
            if spec.on == "trial":
                values["reference"] = item.answer
                if item.options and item.answer in item.labels:
                    values["reference_text"] = item.options[item.labels.index(item.answer)]
        else:
            values["id"] = call.stimulus
        if spec.on == "trial":
            values["response"] = response if response is not None else ""
            if request is not None:
                values["request"] = request
        if call.step in self.matches:
            if votes is None:
                return None
            values[f"votes.{self.matches[call.step]}"] = votes
        for slot in self.templates[call.step].slots():
            parts = slot.name.split(".")
            if parts[0] != "steps" or len(parts) not in (2, 3):
                continue
            text = self._step_output(call, parts, outputs)
            if text is None:
                return None
            values[slot.name] = text
        return values

    def _step_output(
        self, call: StepCall, parts: list[str], outputs: Mapping[tuple[str, str], Any]
    ) -> str | None:
        """The text of a ``{steps.NAME}`` (``{steps.NAME.FIELD}``) slot of ``call``, or None."""
        target = self.study.steps[parts[1]]
        unit = call.stimulus if target.on == "item" else (call.trial or "")
        decision = outputs.get((parts[1], unit))
        if decision is None:
            return None
        return output_text(decision, parts[2] if len(parts) == 3 else None)

    def rough_values(self, call: StepCall) -> dict[str, str]:
        """Every slot of ``call``'s template filled: the item's fields, the rest empty.

        For ``ledger estimate``, before a call's inputs exist.
        """
        values = {s.name: "" for s in self.templates[call.step].slots()}
        if self.renderer.items is not None:
            values.update(self.renderer.values(self.renderer.items.by_id[call.stimulus]))
        return values

    def template_values(
        self, item: str, outputs: Mapping[tuple[str, str], Any]
    ) -> dict[str, str] | None:
        """The ``{steps.*}`` values the item template reads for ``item``; None if one is missing.

        A screening step (``keep``) whose decision for the item does not keep it (not a kept
        label, or a json decision the rule refuses), or that has no decision, also gives None:
        the item's trials are then recorded exclusions.
        """
        for name, spec in self.study.steps.items():
            if spec.screens and not spec.keeps(outputs.get((name, item))):
                return None
        reference = self.study.ddx.reference_step if self.study.ddx is not None else None
        if reference is not None and outputs.get((reference, item)) is None:
            return None  # no reference sets for the item: its trials are excluded
        out: dict[str, str] = {}
        slots = [s for t in self.renderer.item_templates() for s in t.slots()]
        for slot in slots:
            parts = slot.name.split(".")
            if parts[0] != "steps" or len(parts) not in (2, 3):
                continue
            decision = outputs.get((parts[1], item))
            text = (
                None
                if decision is None
                else output_text(decision, parts[2] if len(parts) == 3 else None)
            )
            if text is None:
                return None
            out[slot.name] = text
        return out

    def body(self, call: StepCall, values: Mapping[str, str]) -> dict[str, Any]:
        """The Messages API request object of a step call (``docs/prompts.md`` §8)."""
        spec = self.study.steps[call.step]
        text = self.templates[call.step].render(values).rstrip("\n")
        model = self.renderer.models[call.model]
        body: dict[str, Any] = {
            "model": model.id,
            **request_parameters(model, {}),
            "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
        }
        if spec.system:
            body["system"] = "\n\n".join(self.renderer.texts[n].rstrip("\n") for n in spec.system)
        return body
