"""A small study for seed 001's recorded steps (issue 18), from ``docs/prompts.md`` §1.4, §8.

Built on ``tests/support/steps_study.py``: a json screening step with a confidence rule, a declared
item range (the file's first 6 of 8 items), a rewriting step checked by a semantic verifier
(``verified_by``), an annotation step whose seven boolean labels are covariates
(``[analysis] covariates``), two judges. :class:`Scripted` is the simulated backend with the
screening, annotation and verifier replies scripted per item and sample, so each action is
exercised on known items.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from steps_study import write_study

from runner._backends import SimulatedBackend, reply_from_messages_json

SCHEMA = {
    "type": "object",
    "properties": {"diagnostic": {"type": "boolean"}, "confidence": {"type": "number"}},
    "required": ["diagnostic", "confidence"],
    "additionalProperties": False,
}

PERTURBABLE = [
    "diagnostic_guess",
    "irrelevant_details",
    "unstructured",
    "emotional_tone",
    "first_person",
]
INDICATORS = ["lack_objective_data", "lack_symptom_history"]
LABELS_SCHEMA = {
    "type": "object",
    "properties": {n: {"type": "boolean"} for n in PERTURBABLE + INDICATORS},
    "required": PERTURBABLE + INDICATORS,
    "additionalProperties": False,
}

PROMPTS = {
    "screen": "Does the question ask for a diagnosis? Reply in JSON with diagnostic and "
    "confidence.\nQuestion: {context}\n",
    "annotate": "Label the seven user-level factors of the query (JSON booleans).\n"
    "Query: {context}\n",
    "semcheck": "Does the rewrite keep every clinical fact of the original? Answer retained or "
    "lost.\nOriginal: {context}\nFirst person: {steps.annotate.first_person}\n"
    "Rewrite: {steps.rewrite}\n",
}


def steps(then: str = "exclude", retry: int = 1) -> str:
    """The step tables: screen (json, confidence rule), rewrite verified by semcheck, judge."""
    return f"""
[steps.screen]
on = "item"
models = ["judge_a"]
template = "prompts/screen.txt"
parser = "json"
schema = "prompts/screen.json"
keep = {{ equals = {{ diagnostic = true }}, at_least = {{ confidence = 0.8 }} }}

[steps.rewrite]
on = "item"
models = ["judge_a"]
template = "prompts/rewrite.txt"
parser = "text"
on_unparseable = {{ retry = 2, then = "exclude" }}
verified_by = {{ step = "semcheck", accept = ["retained"], retry = {retry}, then = "{then}" }}

[steps.semcheck]
on = "item"
models = ["judge_a"]
template = "prompts/semcheck.txt"
parser = "label"
labels = ["retained", "lost"]

[steps.annotate]
on = "item"
models = ["judge_a"]
template = "prompts/annotate.txt"
parser = "json"
schema = "prompts/labels.json"

[steps.judge]
on = "trial"
models = ["judge_a", "judge_b"]
template = "prompts/judge.txt"
system = ["judge_system"]
parser = "label"
labels = ["correct", "incorrect"]
aggregate = "majority"
on_unparseable = {{ retry = 1, then = "exclude" }}
"""


def write(
    root: Path, step_tables: str | None = None, first: int | None = 6, covariates: bool = True
) -> Path:
    """Write the study into ``root``; ``first``: ``[stimuli] range = { first = N }``."""
    write_study(root, step_tables if step_tables is not None else steps(), **PROMPTS)
    (root / "prompts" / "screen.json").write_text(json.dumps(SCHEMA), encoding="utf-8")
    (root / "prompts" / "labels.json").write_text(json.dumps(LABELS_SCHEMA), encoding="utf-8")
    spec = root / "study.toml"
    text = spec.read_text(encoding="utf-8")
    if covariates:
        text = text.replace(
            "[analysis]\n",
            '[analysis]\ncovariates = { step = "annotate", '
            f"perturbable = {json.dumps(PERTURBABLE)}, "
            f"indicators = {json.dumps(INDICATORS)} }}\n",
        )
    if first is not None:
        text = text.replace(
            'items = "data/items.jsonl"\n',
            f'items = "data/items.jsonl"\nrange = {{ first = {first} }}\n',
        )
    spec.write_text(text, encoding="utf-8")
    return root


SCREEN = {  # item -> the screening reply: q02 is not diagnostic, q03 not confident enough
    "q02": {"diagnostic": False, "confidence": 0.95},
    "q03": {"diagnostic": True, "confidence": 0.6},
}
LOST_ONCE = {"q04"}  # the verifier rejects the first sample, accepts the second
LOST_ALWAYS = {"q05"}  # the verifier rejects every sample
UNLABELLED = {"q06"}  # the annotation does not parse: no labels, and no verdict on the rewrite


def _seed_parts(seed: str) -> tuple[str, str, int] | None:
    """(step, item, sample) of a step call's seed ``{seed}|step:NAME|MODEL|ITEM|K|{attempt}``."""
    if "|step:" not in seed:
        return None
    parts = seed.split("|step:", 1)[1].split("|")
    if len(parts) != 5:
        return None
    return parts[0], parts[2], int(parts[3])


class Scripted(SimulatedBackend):
    """The simulation, with the screening and verifier replies scripted (module docstring)."""

    async def send(self, body: dict[str, Any], *, seed: str):  # type: ignore[no-untyped-def]
        reply = await super().send(body, seed=seed)
        found = _seed_parts(seed)
        if found is None or found[0] not in ("screen", "semcheck", "annotate"):
            return reply
        step, item, k = found
        if step == "annotate":  # q06: no labels (the verifier, which reads them, cannot judge)
            text = "no labels" if item in UNLABELLED else json.dumps(item_labels(item))
        elif step == "screen":
            text = json.dumps(SCREEN.get(item, {"diagnostic": True, "confidence": 0.9}))
        else:
            lost = item in LOST_ALWAYS or (item in LOST_ONCE and k == 1)
            text = "lost" if lost else "retained"
        data = json.loads(reply.raw)
        data["content"] = [{"type": "text", "text": text}]
        return reply_from_messages_json(json.dumps(data).encode(), 200, None)


def item_labels(item: str) -> dict[str, bool]:
    """The scripted factor labels of an item: a pattern of its number's bits."""
    n = int(item[1:])
    return {name: bool((n >> i) & 1) for i, name in enumerate(PERTURBABLE + INDICATORS)}
