"""A small study with human inputs (issue 17), written from ``docs/trials.md`` §6 and
``docs/scoring.md`` §11.

Eight open-ended items, each with a physician's reply (the field ``physician``) and supplied
reference diagnosis sets (``metadata.reference_*``); a target model under one arm, the
physicians as a data arm (``response_from``), two judges with majority aggregation; a
reference-set review sample and a judge-label review sample. Simulated backend throughout.
"""

from __future__ import annotations

import json
from pathlib import Path

WORDS = ["fever", "cough", "rash", "anaemia", "asthma", "gout", "angina", "eczema"]
ITEMS = [
    {
        "id": f"q{i:02d}",
        "question": "Which condition does the patient have?",
        "context": f"The patient has the condition {word}. The patient is tired since day {i}.",
        "answer": word,
        "physician": f"Most likely {word if i % 3 else 'a viral illness'}; see your doctor.",
        "metadata": {
            "reference_plausible": [word, "viral illness", "stress"],
            "reference_highly_likely": [word],
            "reference_safety_critical": ["sepsis"] if i % 2 else [],
        },
    }
    for i, word in enumerate(WORDS, start=1)
]

PROMPTS = {
    "item.txt": "Question: {question}\nCase: {context}\n",
    "task.txt": "Answer in one sentence.\n",
    "judge.txt": "Is the candidate answer correct? Answer correct or incorrect.\n"
    "Reference: {reference}\nCandidate: {response}\n",
}

ARMS = """
[arms.model]
role = "vehicle"
components = ["item", "task"]
models = ["target", "target2"]

[arms.physicians]
role = "matched-control"
response_from = "physician"
"""

REVIEWS = """
[reviews.refsets]
reference = "supplied"
n = 5
seed = 11

[reviews.audit]
step = "judge"
n = 3
seed = 9
"""


def spec_text(arms: str = ARMS, reviews: str = REVIEWS) -> str:
    """The study.toml text with ``arms`` and ``reviews`` as those tables."""
    return f"""[study]
id = "human-inputs"
title = "Physicians as a data arm, judged like a model; clinicians review the references"

[models.target]
provider = "anthropic"
id = "claude-sonnet-4-6"
max_tokens = 64
temperature = 0.0

[models.target2]
provider = "anthropic"
id = "claude-opus-4-5"
max_tokens = 64
temperature = 0.0

[models.judge_a]
provider = "anthropic"
id = "claude-haiku-4-5"
max_tokens = 16
temperature = 0.0

[models.judge_b]
provider = "anthropic"
id = "claude-opus-4-1"
max_tokens = 16
temperature = 0.0

[components]
task = "prompts/task.txt"

[prompt]
item = "prompts/item.txt"
{arms}
[steps.judge]
on = "trial"
models = ["judge_a", "judge_b"]
template = "prompts/judge.txt"
parser = "label"
labels = ["correct", "incorrect"]
aggregate = "majority"
on_unparseable = {{ retry = 1, then = "exclude" }}
{reviews}
[stimuli]
items = "data/items.jsonl"

[design]
replicates = 1
seed = 6
bootstrap_seed = 6
bootstrap_iterations = 200

[response]
parser = "judge:judge"

[analysis]
exclude_unparseable = true

[[hypotheses]]
id = "H1"
contrast = ["model", "physicians"]
test = "mcnemar"
alpha = 0.05
"""


def write_study(root: Path, items: list[dict[str, object]] | None = None, **spec: str) -> Path:
    """Write the study into ``root`` (``items`` replaces the item list; ``spec``: arms, reviews)."""
    (root / "data").mkdir(parents=True)
    (root / "prompts").mkdir()
    (root / "data" / "items.jsonl").write_text(
        "".join(json.dumps(item) + "\n" for item in (ITEMS if items is None else items)),
        encoding="utf-8",
    )
    for name, text in PROMPTS.items():
        (root / "prompts" / name).write_text(text, encoding="utf-8")
    (root / "study.toml").write_text(spec_text(**spec), encoding="utf-8")
    return root
