"""What the Inspect extension's tests and benchmark share: an MCQ-answering fake server, a runner.

:class:`McqChatServer` is the project's fake chat-completions server
(``tests/runner/test_openai_backend.py``'s :class:`FakeChatServer`: real HTTP on 127.0.0.1,
injectable 503s) answering Inspect's multiple-choice prompts with ``ANSWER: X``, the letter chosen
by the SHA-256 of the prompt (so some answers are right and some wrong, the same every run).
:func:`inspect_eval` runs ``inspect eval`` on ``tests/inspect_tasks/ledger_mcq.py`` against it,
with or without the extension.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from locations import TESTS_DIR

from tests.runner.test_openai_backend import FakeChatServer

TASK = TESTS_DIR / "inspect_tasks" / "ledger_mcq.py"
MODEL = "openai-api/fake/mcq-model"


def _prompt_text(body: dict[str, Any]) -> str:
    parts = []
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
    return "\n".join(parts)


class McqChatServer(FakeChatServer):
    """The fake chat server answering ``ANSWER: <letter>`` among the prompt's options."""

    @staticmethod
    def completion(body: dict[str, Any]) -> dict[str, Any]:
        text = _prompt_text(body)
        letters = re.findall(r"^([A-Z])\) ", text, flags=re.MULTILINE) or ["A"]
        pick = letters[hashlib.sha256(text.encode()).digest()[0] % len(letters)]
        answer = f"ANSWER: {pick}"
        return {
            "id": "chatcmpl-" + hashlib.sha256(text.encode()).hexdigest()[:12],
            "object": "chat.completion",
            "created": 1_790_000_000,
            "model": body["model"],
            "system_fingerprint": "fp-mcq",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": len(text) // 4,
                "completion_tokens": 4,
                "total_tokens": len(text) // 4 + 4,
            },
        }


def inspect_command() -> list[str]:
    """``inspect`` beside this interpreter (the venv's)."""
    return [str(Path(sys.executable).with_name("inspect"))]


def inspect_eval(
    server_url: str,
    log_dir: Path,
    ledger_dir: Path | None,
    *extra: str,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run ``inspect eval`` on the MCQ task against ``server_url``; the extension on when
    ``ledger_dir`` is given. Inspect's own retries only (``-M max_retries=0``: the OpenAI SDK
    retries nothing out of Inspect's sight)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROMPT_LEDGER_INSPECT")}
    env.update(
        {
            "FAKE_API_KEY": "test-key",
            "FAKE_BASE_URL": server_url + "/v1",
            "INSPECT_LOG_DIR": str(log_dir),
            "INSPECT_DISPLAY": "none",
            "INSPECT_EVAL_LOG_FILE_PATTERN": "{task}_{id}",
        }
    )
    if ledger_dir is not None:
        env["PROMPT_LEDGER_INSPECT"] = str(ledger_dir)
    args = [
        *inspect_command(),
        "eval",
        TASK.name,
        "--model",
        MODEL,
        "-M",
        "max_retries=0",
        "--log-dir",
        str(log_dir),
        "--display",
        "none",
        *extra,
    ]
    # Inspect takes a task file's path relative to the working directory only
    return subprocess.run(
        args, env=env, capture_output=True, text=True, timeout=timeout, cwd=TASK.parent, check=False
    )
