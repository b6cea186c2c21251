"""analysis.md §3, "Identical responses": replicates and models that answered with copies.

Re-derived from the archive's responses by the rule of the docs (not by the writer's code):
the text of each scored trial's response (the text the scorer reads), compared byte for byte
within each (arm, model, stimulus, variant) over replicates, and between two models over the
(arm, stimulus, variant, rep) keys both answered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from verify._rescore import BodyError, batch_message, response_text

__all__ = ["copies", "summary"]


def _text(raw: bytes, fmt: str) -> bytes | None:
    """The scorer's text of one response body as UTF-8 bytes, or None when it has none."""
    if fmt == "anthropic-batch-result":
        raw, fmt = batch_message(raw), "anthropic-messages"
    try:
        return response_text(raw, fmt).encode("utf-8")
    except BodyError:
        return None


def _same_models(
    texts: dict[tuple[str, str, str, str, int], bytes], models: Sequence[str]
) -> list[dict[str, Any]]:
    """Each pair of models whose responses are identical on every trial both answered."""
    pairs = []
    for i, a in enumerate(models):
        for b in models[i + 1 :]:
            both = [
                (text, texts.get((arm, b, s, v, r)))
                for (arm, m, s, v, r), text in texts.items()
                if m == a
            ]
            common = [(x, y) for x, y in both if y is not None]
            if common and all(x == y for x, y in common):
                pairs.append({"a": a, "b": b, "trials": len(common)})
    return pairs


def copies(
    trials: Sequence[dict[str, Any]],
    body_of: Callable[[int], tuple[bytes, str]],
    models: Sequence[str],
) -> dict[str, Any] | None:
    """The values of ``descriptive.identical_responses`` (``note`` as None), or None.

    ``body_of(response_seq)`` gives a trial's stored response body and its format.
    """
    texts: dict[tuple[str, str, str, str, int], bytes] = {}
    for t in trials:
        raw, fmt = body_of(int(t["response_seq"]))
        text = _text(raw, fmt)
        if text is not None:
            texts[
                (
                    str(t["arm"]),
                    str(t["model"]),
                    str(t["stimulus"]),
                    str(t["variant"]),
                    int(t["rep"]),
                )
            ] = text
    by_cell: dict[tuple[str, str, str, str], list[bytes]] = {}
    for (arm, model, stimulus, variant, _), text in texts.items():
        by_cell.setdefault((arm, model, stimulus, variant), []).append(text)
    verdict: dict[tuple[str, str], list[bool]] = {}
    for (arm, model, _, _), found in sorted(by_cell.items()):
        if len(found) >= 2:
            verdict.setdefault((arm, model), []).append(len(set(found)) == 1)
    replicates = [
        {"arm": arm, "model": model, "cells": len(same)}
        for (arm, model), same in sorted(verdict.items())
        if all(same)
    ]
    pairs = _same_models(texts, models)
    if not replicates and not pairs:
        return None
    return {"replicates": replicates, "models": pairs, "note": None}


def summary(values: dict[str, Any]) -> str:
    """One sentence for the verifier's WARN: what was copied, and how the tests count it."""
    parts = [
        f"arm {r['arm']}{' model ' + r['model'] if r['model'] else ''}: every replicate "
        f"alike in {r['cells']} cell(s)"
        for r in values.get("replicates") or []
    ]
    parts += [
        f"models {p['a']} and {p['b']} alike on all {p['trials']} shared trial(s)"
        for p in values.get("models") or []
    ]
    return (
        "byte-identical responses (" + "; ".join(parts) + "): trial-level tests count the "
        "copies as independent observations (pseudo-replication), and pooled results count "
        "identical models twice; see descriptive.identical_responses"
    )
