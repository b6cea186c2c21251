"""The Inspect AI side of ``bench_runner.py --e2e``: the study's requests as an Inspect task.

    inspect eval benchmarks/inspect_bodies_task.py -T bodies=BODIES.jsonl \\
        --model anthropic/MODEL --model-base-url URL --max-connections C ...

One sample per line of ``BODIES.jsonl`` (the Messages request bodies ``ledger run`` sends, in
schedule order): the same user message (its image and text blocks, in order, the system prompt
if any), answered once by ``generate()`` with the body's own ``max_tokens`` and ``temperature``
(every body of a study shares them). No scorer: only the calls are compared. Needs
``inspect-ai`` (the ``bench`` extra), which the project itself never imports.
"""

from __future__ import annotations

import json
from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import (
    ChatMessage,
    ChatMessageSystem,
    ChatMessageUser,
    Content,
    ContentImage,
    ContentText,
    GenerateConfig,
)
from inspect_ai.solver import generate


def _messages(body: dict[str, Any]) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    if body.get("system"):
        out.append(ChatMessageSystem(content=body["system"]))
    for message in body["messages"]:
        if message["role"] != "user":
            raise ValueError("only user turns are supported by this benchmark task")
        content: list[Content] = []
        for block in message["content"]:
            if block["type"] == "image":
                src = block["source"]
                content.append(ContentImage(image=f"data:{src['media_type']};base64,{src['data']}"))
            else:
                content.append(ContentText(text=block["text"]))
        out.append(ChatMessageUser(content=content))
    return out


@task
def ledger_bodies(bodies: str) -> Task:
    """The requests of ``bodies`` (JSONL), each sent once, unscored."""
    with open(bodies, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    samples = [Sample(id=i + 1, input=_messages(body)) for i, body in enumerate(rows)]
    first = rows[0]
    config = GenerateConfig(
        max_tokens=first["max_tokens"],
        temperature=first.get("temperature"),
        max_retries=0,
    )
    return Task(dataset=MemoryDataset(samples), solver=generate(), config=config)
