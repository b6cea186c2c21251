"""A small study with recorded model steps (issue 17), written from ``docs/prompts.md`` §8-9.

A screening item step, a rewriting item step read by the item template, a target model under
two arms, an answer-dependent second-stage arm and two judges with majority aggregation, all on
the simulated backend. Tests change one file or one table of it to exercise each refusal.
"""

from __future__ import annotations

import json
from pathlib import Path

ITEMS = [
    {
        "id": f"q{i:02d}",
        "question": "Which condition does the patient have?",
        "context": f"The patient has the condition {word}. The patient is tired since day {i}.",
        "answer": word,
    }
    for i, word in enumerate(
        ["fever", "cough", "rash", "anaemia", "asthma", "gout", "angina", "eczema"], start=1
    )
]

PROMPTS = {
    "item.txt": "Question: {question}\nCase: {steps.rewrite}\n",
    "task.txt": "Answer in one sentence.\n",
    "system.txt": "You are a careful clinician.\n",
    "screen.txt": "Should this question stay in a clinical benchmark? Answer include or "
    "exclude.\nQuestion: {question}\n",
    "rewrite.txt": "Rewrite the case in the first person, keeping every fact.\nText: {context}\n",
    "judge.txt": "Is the candidate answer correct? Answer correct or incorrect.\n"
    "Reference: {reference}\nCandidate: {response}\n",
    "judge-system.txt": "You grade answers against a reference.\n",
    "doubt.txt": "Earlier you answered: {prior.response}\nAnother clinician disagrees. Answer "
    "again in one sentence.\n",
}

STEPS = """
[steps.screen]
on = "item"
models = ["judge_a"]
template = "prompts/screen.txt"
parser = "label"
labels = ["include", "exclude"]
keep = ["include"]

[steps.rewrite]
on = "item"
models = ["judge_a"]
template = "prompts/rewrite.txt"
parser = "text"
on_unparseable = { retry = 2, then = "exclude" }

[steps.judge]
on = "trial"
models = ["judge_a", "judge_b"]
template = "prompts/judge.txt"
system = ["judge_system"]
parser = "label"
labels = ["correct", "incorrect"]
aggregate = "majority"
on_unparseable = { retry = 1, then = "exclude" }

[reviews.audit]
step = "judge"
n = 2
seed = 9
"""


def spec_text(steps: str = STEPS, parser: str = "judge:judge") -> str:
    """The study.toml text, with ``steps`` as its step tables."""
    return f"""[study]
id = "steps-demo"
title = "Steps: screening, rewriting, a target and two judges"

[models.target]
provider = "anthropic"
id = "claude-sonnet-4-6"
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
system = "prompts/system.txt"
judge_system = "prompts/judge-system.txt"
doubt = "prompts/doubt.txt"

[prompt]
item = "prompts/item.txt"

[arms.plain]
role = "vehicle"
components = ["item", "task"]
models = ["target"]

[arms.sys]
role = "dismantling"
components = ["item", "task"]
system = ["system"]
models = ["target"]

[arms.doubt]
role = "factorial"
components = ["item", "doubt"]
models = ["target"]
after = {{ arm = "plain" }}
{steps}
[stimuli]
items = "data/items.jsonl"

[design]
replicates = 1
seed = 6
bootstrap_seed = 6
bootstrap_iterations = 200

[response]
parser = "{parser}"

[analysis]
exclude_unparseable = true

[[hypotheses]]
id = "H1"
contrast = ["sys", "plain"]
test = "paired-t"
alpha = 0.05
"""


def write_study(root: Path, steps: str = STEPS, **prompts: str) -> Path:
    """Write the study into ``root`` (prompt files overridden by ``prompts``: name -> text)."""
    (root / "data").mkdir(parents=True)
    (root / "prompts").mkdir()
    (root / "data" / "items.jsonl").write_text(
        "".join(json.dumps(item) + "\n" for item in ITEMS), encoding="utf-8"
    )
    for name, text in {
        **PROMPTS,
        **{k.replace("_", "-") + ".txt": v for k, v in prompts.items()},
    }.items():
        (root / "prompts" / name).write_text(text, encoding="utf-8")
    (root / "study.toml").write_text(spec_text(steps), encoding="utf-8")
    return root
