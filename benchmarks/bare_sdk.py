"""The bare-SDK side of ``bench_runner.py --e2e``: the bodies sent with ``AsyncAnthropic`` alone.

    python benchmarks/bare_sdk.py BASE_URL BODIES.jsonl CONCURRENCY

Reads one Messages request body per line of ``BODIES.jsonl`` (the bodies ``ledger run`` sends,
in schedule order) and sends each once with ``anthropic.AsyncAnthropic(max_retries=0)
.messages.create(...)``, at most ``CONCURRENCY`` at once (an ``asyncio.Semaphore``): what a
person would write without this project, with none of its code imported. Prints ``answered N``
and exits 0 when every call was answered with a Message. ``bench_runner.py`` times the process
from start to exit, imports included, as it times ``ledger run``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import anthropic

NAMED = ("model", "max_tokens", "messages", "system", "stop_sequences")


async def send_all(base_url: str, bodies: list[dict[str, Any]], concurrency: int) -> int:
    """Send every body once; return how many were answered with a Message."""
    client = anthropic.AsyncAnthropic(api_key="test", base_url=base_url, max_retries=0)
    gate = asyncio.Semaphore(concurrency)

    async def call(body: dict[str, Any]) -> int:
        # anthropic 2.x no longer names ``temperature``: it travels in extra_body, so the JSON
        # sent holds the same members as the runner's
        named = {k: body[k] for k in NAMED if k in body}
        extra = {k: v for k, v in body.items() if k not in named}
        async with gate:
            message = await client.messages.create(**named, extra_body=extra or None)
        return 1 if message.type == "message" else 0

    try:
        return sum(await asyncio.gather(*(call(body) for body in bodies)))
    finally:
        await client.close()


def main(argv: list[str]) -> int:
    """Parse the three arguments, send, print the count."""
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    base_url, path, concurrency = argv[0], argv[1], int(argv[2])
    with open(path, encoding="utf-8") as handle:
        bodies = [json.loads(line) for line in handle if line.strip()]
    answered = asyncio.run(send_all(base_url, bodies, concurrency))
    print(f"answered {answered}")
    return 0 if answered == len(bodies) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
