"""A study on "patient data" for the privacy tests: every item and response carries a canary.

The yes/no/maybe study of ``docs/study-spec.md`` with a ``[privacy]`` policy; each item's
context and question hold a unique canary string, and the fake Messages server (real HTTP on
127.0.0.1) answers every request with a response that quotes a per-item response canary before
a one-word answer. ``CANARIES`` lists every canary; no byte sequence of any may reach a public
archive (``tests/analysis/test_privacy.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result
from fake_messages import FakeMessagesServer

from ledger.cli import main

ITEMS = {
    "p1": ("yes", "Does daily walking lower blood pressure?"),
    "p2": ("no", "Does vitamin C prevent the common cold?"),
    "p3": ("maybe", "Does music therapy reduce pain after surgery?"),
    "p4": ("yes", "Does smoking cessation improve lung function?"),
}
ITEM_CANARY = {i: f"PTNOTE{n}QX7ZK" for n, i in enumerate(ITEMS, 1)}
"""Canaries in each item's context (a patient's note) and question."""
RESPONSE_CANARY = {i: f"MDREPLY{n}VV3JW" for n, i in enumerate(ITEMS, 1)}
"""Canaries each response quotes."""
CANARIES = (*ITEM_CANARY.values(), *RESPONSE_CANARY.values())

WITHHOLD = [
    "artifact.locked:items",
    "trial.requested:request",
    "trial.responded:response",
    "trial.failed:response",
    "run.preflight:request",
    "run.preflight:response",
    "trial.scored:scores",
    "analysis.result:items_csv",
]

SPEC = """\
[study]
id = "private-ynm"
title = "Yes, no or maybe over patient notes"

[model]
id = "claude-sonnet-4-6"
max_tokens = 16
temperature = 0.0

[components]
evidence = "prompts/evidence.txt"
plain = "prompts/plain.txt"

[prompt]
item = "prompts/question.txt"

[arms.evidence]
role = "full"
components = ["item", "evidence"]

[arms.plain]
role = "matched-control"
components = ["item", "plain"]
differs_from = { arm = "evidence", by = ["evidence"] }

[stimuli]
items = "data/questions.jsonl"

[design]
replicates = 2
seed = 7
bootstrap_seed = 8
bootstrap_iterations = 1000

[response]
parser = "yes-no-maybe"

[[hypotheses]]
id = "H1"
description = "Relying on the note changes accuracy."
contrast = ["evidence", "plain"]
test = "mcnemar"
alpha = 0.05

[analysis]
exclude_unparseable = false

[privacy]
withhold = WITHHOLD
"""


def write_study(root: Path, withhold: list[str] | None = WITHHOLD) -> Path:
    """The study in ``root`` (without ``[privacy]`` when ``withhold`` is None)."""
    root.mkdir(parents=True)
    spec = SPEC
    if withhold is None:
        spec = spec[: spec.index("[privacy]")]
    else:
        spec = spec.replace("WITHHOLD", json.dumps(withhold))
    (root / "study.toml").write_text(spec, encoding="utf-8")
    (root / "prompts").mkdir()
    (root / "prompts/question.txt").write_text("Note: {context}\nQuestion: {question}\n")
    (root / "prompts/evidence.txt").write_text(
        "Base your answer only on the note. Answer yes, no or maybe.\n"
    )
    (root / "prompts/plain.txt").write_text("Answer yes, no or maybe.\n")
    (root / "data").mkdir()
    lines = []
    for item, (answer, question) in ITEMS.items():
        canary = ITEM_CANARY[item]
        lines.append(
            json.dumps(
                {
                    "id": item,
                    "question": f"{question} (patient {canary})",
                    "context": f"Discharge note of patient {canary}: "
                    "stable, follow up in two weeks.",
                    "answer": answer,
                }
            )
        )
    (root / "data/questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def responder(body: dict[str, Any]) -> str:
    """A response quoting the item's response canary, then a one-word answer."""
    text = json.dumps(body)
    item = next(i for i, c in ITEM_CANARY.items() if c in text)
    answer = ITEMS[item][0] if "only on the note" in text else "no"
    return f"Noted for {RESPONSE_CANARY[item]}.\nAnswer: {answer}"


def cli(*args: str | Path, env: dict[str, str] | None = None) -> Result:
    """``ledger ARGS`` in process."""
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


@contextmanager
def served() -> Iterator[FakeMessagesServer]:
    """The fake Messages server answering with :func:`responder`."""
    with FakeMessagesServer(responder=responder) as server:
        yield server


def run_study(root: Path, key: Path) -> None:
    """lock, run (against the fake server), score, unblind, analyze; each must succeed."""
    with served() as server:
        steps: list[list[str | Path]] = [
            ["lock", root, "--key", key],
            ["run", root, "--base-url", server.base_url, "--key", key, "--concurrency", "1"],
            ["score", root, "--key", key],
            ["unblind", root, "--key", key],
            ["analyze", root, "--key", key],
        ]
        for command in steps:
            result = cli(*command, env={"ANTHROPIC_API_KEY": "test"})
            assert result.exit_code == 0, (command[0], result.output)


def canaries_in(data: bytes) -> list[str]:
    """Every canary whose bytes occur in ``data``, in any letter case.

    The canaries are ASCII letters and digits, so JSON or HTML escaping leaves them as they are.
    """
    return [c for c in CANARIES if c.encode() in data or c.lower().encode() in data.lower()]
