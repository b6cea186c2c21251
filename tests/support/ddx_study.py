"""A small differential-diagnosis study (issue 18, ``docs/scoring.md`` §12), all simulated.

Six open-ended cases; two target models under two arms (with and without a system prompt); a
semantic extractor item step (demographics, subjective symptoms, objective results) read by a
reference item step voted by three simulated models (``aggregate = { k = 2 }``, element-wise);
a list extractor, a matcher voted by three models, a grounding judge that sees the request and
an uncertainty judge, all trial steps. ``reference = "items"`` swaps the reference step for the
sets supplied in the item file. Tests change one file or one table to exercise each refusal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CASES = [
    (
        "a throbbing headache for two days",
        "migraine, tension headache, sinusitis",
        "migraine, tension headache, sinusitis, meningitis",
    ),
    (
        "a cough with fever and chest pain",
        "pneumonia, bronchitis, pleurisy",
        "pneumonia, bronchitis, pulmonary embolism, pneumothorax",
    ),
    (
        "right lower abdominal pain since this morning",
        "appendicitis, gastroenteritis, colitis",
        "appendicitis, gastroenteritis, ovarian torsion, kidney stone",
    ),
    (
        "a painful swollen big toe at night",
        "gout, cellulitis",
        "gout, pseudogout, cellulitis, septic arthritis with sepsis",
    ),
    (
        "tiredness and pale skin for weeks",
        "anaemia, hypothyroidism, depression",
        "iron deficiency anaemia, hypothyroidism, depression, colon cancer",
    ),
    (
        "an itchy red rash on both elbows",
        "eczema, psoriasis, an allergy",
        "eczema, psoriasis, contact dermatitis, scabies",
    ),
]
"""(complaint, the differential a clinician would write, the reference candidates)."""


def items() -> list[dict[str, Any]]:
    """The item file's records: the complaint, a differential sentence, the candidates."""
    out = []
    for i, (complaint, differential, candidates) in enumerate(CASES, start=1):
        names = [c.strip() for c in candidates.split(",")]
        out.append(
            {
                "id": f"c{i:02d}",
                "question": "Which diagnoses fit this presentation?",
                "context": f"I have {complaint}. Diagnoses that fit: {differential}. Findings are "
                f"consistent with: {candidates}.",
                "answer": names[0],
                "metadata": {
                    "reference_plausible": names,
                    "reference_highly_likely": names[:2],
                    "reference_safety_critical": names[-1:],
                },
            }
        )
    return out


PROMPTS = {
    "item.txt": "Question: {question}\nCase: {context}\n",
    "task.txt": "Give your differential diagnosis.\n",
    "system.txt": "You are a careful clinician.\n",
    "extract.txt": "Split the case into demographics, subjective symptoms and objective results "
    "(JSON).\nExtract from: {context}\n",
    "reference.txt": "Build the reference diagnosis sets for this case as JSON with plausible, "
    "highly_likely and safety_critical arrays.\nCase for reference sets: "
    "{steps.extract.demographics} {steps.extract.subjective} {steps.extract.objective}\n",
    "list.txt": 'List every diagnosis the answer names as JSON {{"diagnoses": [...]}}.\n'
    "Diagnoses in: {response}\n",
    "match.txt": "Match the listed diagnoses to the reference sets (clinical synonyms count).\n"
    "Listed: {steps.dxlist.diagnoses}\nPlausible set: {steps.reference.plausible}\n"
    "Highly likely set: {steps.reference.highly_likely}\n"
    "Safety-critical set: {steps.reference.safety_critical}\n",
    "ground.txt": "Which listed diagnoses does the input support?\n"
    "Diagnoses to ground: {steps.dxlist.diagnoses}\nInput: {request}\n",
    "doubt.txt": "Does the answer state diagnostic uncertainty? Answer uncertain or certain.\n"
    "Uncertainty of: {response}\n",
}

SUPPLIED_MATCH = (
    "Match the listed diagnoses to the reference sets (clinical synonyms count).\n"
    "Listed: {steps.dxlist.diagnoses}\nPlausible set: {metadata.reference_plausible}\n"
    "Highly likely set: {metadata.reference_highly_likely}\n"
    "Safety-critical set: {metadata.reference_safety_critical}\n"
)

CASE_SCHEMA = {
    "type": "object",
    "properties": {m: {"type": "string"} for m in ("demographics", "subjective", "objective")},
    "required": ["demographics", "subjective", "objective"],
}
"""The semantic extractor's schema: strings, so not set-valued (a whole-value vote)."""

SCHEMAS = {
    "list.json": ["diagnoses"],
    "sets.json": ["plausible", "highly_likely", "safety_critical"],
    "ground.json": ["grounded", "indirect"],
}

REFERENCE_STEP = """
[steps.extract]
on = "item"
models = ["judge_a"]
template = "prompts/extract.txt"
parser = "json"
schema = "schemas/case.json"
on_unparseable = { retry = 2, then = "exclude" }

[steps.reference]
on = "item"
models = ["judge_a", "judge_b", "judge_c"]
template = "prompts/reference.txt"
parser = "json"
schema = "schemas/sets.json"
aggregate = { k = 2 }
"""

STEPS = """
[steps.dxlist]
on = "trial"
models = ["judge_a"]
template = "prompts/list.txt"
parser = "json"
schema = "schemas/list.json"
on_unparseable = { retry = 1, then = "exclude" }

[steps.match]
on = "trial"
models = ["judge_a", "judge_b", "judge_c"]
template = "prompts/match.txt"
parser = "json"
schema = "schemas/sets.json"
aggregate = "majority"

[steps.ground]
on = "trial"
models = ["judge_b"]
template = "prompts/ground.txt"
parser = "json"
schema = "schemas/ground.json"
sees = "request"

[steps.doubt]
on = "trial"
models = ["judge_c"]
template = "prompts/doubt.txt"
parser = "label"
labels = ["uncertain", "certain"]
"""

DDX = """list = "dxlist"
match = "match"
reference = "{reference}"
grounding = "ground"
uncertainty = "doubt"
"""

HYPOTHESES = """
[[hypotheses]]
id = "H1"
contrast = ["sys", "plain"]
outcome = "plausibility"
test = "paired-t"
alpha = 0.05

[[hypotheses]]
id = "H2"
contrast = ["sys", "plain"]
outcome = "breadth"
test = "paired-t"
alpha = 0.05
"""


def spec_text(
    steps: str = REFERENCE_STEP + STEPS,
    ddx: str = DDX,
    reference: str = "reference",
    hypotheses: str = HYPOTHESES,
    parser: str = "ddx",
) -> str:
    """The study.toml text."""
    models = "".join(
        f"""
[models.{name}]
provider = "anthropic"
id = "{model}"
max_tokens = {tokens}
temperature = 0.0
"""
        for name, model, tokens in (
            ("target", "claude-sonnet-4-6", 96),
            ("target_b", "claude-3-5-haiku", 96),
            ("judge_a", "claude-haiku-4-5", 128),
            ("judge_b", "claude-opus-4-1", 128),
            ("judge_c", "claude-sonnet-4-5", 128),
        )
    )
    return f"""[study]
id = "ddx-demo"
title = "Differential-diagnosis lists scored against reference sets"
{models}
[components]
task = "prompts/task.txt"
system = "prompts/system.txt"

[prompt]
item = "prompts/item.txt"

[arms.plain]
role = "vehicle"
components = ["item", "task"]
models = ["target", "target_b"]

[arms.sys]
role = "dismantling"
components = ["item", "task"]
system = ["system"]
models = ["target", "target_b"]
{steps}
[stimuli]
items = "data/items.jsonl"

[design]
replicates = 1
seed = 8
bootstrap_seed = 8
bootstrap_iterations = 200

[response]
parser = "{parser}"

[response.ddx]
{ddx.format(reference=reference)}
[analysis]
exclude_unparseable = true
{hypotheses}"""


def write_study(
    root: Path,
    spec: str | None = None,
    records: list[dict[str, Any]] | None = None,
    **prompts: str,
) -> Path:
    """Write the study into ``root``; ``prompts`` overrides prompt files (name without .txt)."""
    for sub in ("data", "prompts", "schemas"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "data" / "items.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in (records if records is not None else items())),
        encoding="utf-8",
    )
    for name, text in {**PROMPTS, **{f"{k}.txt": v for k, v in prompts.items()}}.items():
        (root / "prompts" / name).write_text(text, encoding="utf-8")
    for name, members in SCHEMAS.items():
        schema = {
            "type": "object",
            "properties": {m: {"type": "array", "items": {"type": "string"}} for m in members},
            "required": members,
            "additionalProperties": False,
        }
        (root / "schemas" / name).write_text(json.dumps(schema, indent=1), encoding="utf-8")
    (root / "schemas" / "case.json").write_text(json.dumps(CASE_SCHEMA), encoding="utf-8")
    (root / "study.toml").write_text(spec or spec_text(), encoding="utf-8")
    return root
