"""The simulated answers to step calls (``docs/simulated.md`` §3), version ``prompt-sim-steps-1``.

The simulated backend answers a request whose seed names a step call (``"{seed}|step:...|
{attempt}"``, ``docs/trials.md`` §5) here, from the request body and that seed alone; like the
rest of the simulation it never reads an item file, a truth table or a score. Its answers depend
on the lines of the final user text:

- **judge**: a line starting ``Reference:`` and a line starting ``Candidate:``. The verdict is
  ``correct`` when every word (lower-cased letters and digits) of the reference line occurs in
  the candidate text (from the ``Candidate:`` line to the end, or to the next ``Reference:``
  line), else ``incorrect``; with probability 0.15 the judge errs (the other verdict), and with
  probability 0.05 it answers ``It depends on the context.`` (no verdict: unparseable).
- **rewriter**: a line starting ``Text:``. The rest of the text from there, with ``The patient``
  / ``the patient`` written ``I``, `` his `` / `` her `` written `` my ``, and ``is`` / ``has``
  after ``I`` written ``am`` / ``have``; with probability 0.05 the reply is empty.
- **screening**: the words ``include or exclude``. ``include`` with probability 0.85, else
  ``exclude``.
- anything else: the first line of the text.

Every draw is ``SHA-256("prompt-sim-steps|{seed}|" + canonical request)`` read as uniforms, so
the model (its id is in the request) and the attempt (in the seed) change the draws, and the
same request and seed always give the same reply. Replies have the Messages API shape, with
``model`` ``simulated/<id>``.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from ledger import canonical_json
from runner.simulated_text import message_reply

__all__ = ["VERSION", "is_step_seed", "respond"]

VERSION = "prompt-sim-steps-1"
_WORDS = re.compile(r"[a-z0-9]+")


def is_step_seed(seed: str) -> bool:
    """Whether ``seed`` is a step call's (the runner's ``"{seed}|{call id}|{attempt}"``)."""
    return "|step:" in seed


def _draws(request: dict[str, Any], seed: str) -> list[float]:
    digest = hashlib.sha256(
        b"prompt-sim-steps|" + seed.encode("utf-8") + b"|" + canonical_json(request)
    ).digest()
    return [int.from_bytes(digest[i : i + 4], "big") / 2**32 for i in range(0, 16, 4)]


def _user_text(request: dict[str, Any]) -> str:
    messages = request.get("messages") or []
    if not messages:
        return ""
    content = messages[-1].get("content")
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if b.get("type") == "text")


def answer(text: str, draws: list[float]) -> str:
    """The reply text for a step request's user ``text`` (module docstring)."""
    lines = text.split("\n")
    ref = next((i for i, line in enumerate(lines) if line.startswith("Reference:")), None)
    cand = next((i for i, line in enumerate(lines) if line.startswith("Candidate:")), None)
    if ref is not None and cand is not None:
        if draws[1] < 0.05:
            return "It depends on the context."
        reference = set(_WORDS.findall(lines[ref][len("Reference:") :].lower()))
        end = ref if ref > cand else len(lines)
        candidate_text = "\n".join(lines[cand:end])[len("Candidate:") :]
        candidate = set(_WORDS.findall(candidate_text.lower()))
        correct = bool(reference) and reference <= candidate
        if draws[0] < 0.15:
            correct = not correct
        return "correct" if correct else "incorrect"
    start = next((i for i, line in enumerate(lines) if line.startswith("Text:")), None)
    if start is not None:
        if draws[0] < 0.05:
            return ""
        body = "\n".join(lines[start:])[len("Text:") :].strip()
        body = re.sub(r"\b[Tt]he patient\b", "I", body)
        body = re.sub(r"\bI is\b", "I am", body)
        body = re.sub(r"\bI has\b", "I have", body)
        body = re.sub(r" (his|her) ", " my ", body)
        return body
    if "include or exclude" in text.lower():
        return "include" if draws[0] < 0.85 else "exclude"
    return lines[0] if lines else ""


def respond(request: dict[str, Any], seed: str) -> dict[str, Any]:
    """A Messages-API-shaped reply to a step request; deterministic in (request, seed)."""
    text = answer(_user_text(request), _draws(request, seed))
    canonical = canonical_json(request)
    return message_reply(request, seed, text, len(canonical) // 4, canonical=canonical)
