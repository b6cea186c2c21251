"""Synthetic scored multiple-choice trials tables (the long format of docs/mcq-statistics.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

LETTERS = ("A", "B", "C", "D")


def permutation(variant: str, key: int, k: int = 4) -> list[int]:
    """``perm[j]`` = original option shown at position ``j`` under ``variant``."""
    if variant == "original":
        return list(range(k))
    if variant.startswith("rotate-"):
        step = int(variant.split("-")[1])
        return [(j + step) % k for j in range(k)]
    if variant == "reverse":
        return list(range(k))[::-1]
    if variant == "swap":  # exchange the first two distractors, the key stays in place
        distractors = [j for j in range(k) if j != key]
        perm = list(range(k))
        perm[distractors[0]], perm[distractors[1]] = distractors[1], distractors[0]
        return perm
    if variant.startswith("shuffle-"):
        seed = int(variant.split("-")[1])
        rng = np.random.default_rng(seed + 7919 * key)
        return [int(v) for v in rng.permutation(k)]
    raise ValueError(variant)


def synthetic_trials(
    items: int = 60,
    arms: Sequence[str] = ("direct", "cot"),
    models: Sequence[str] = ("m1",),
    variants: Sequence[str] = ("original", "rotate-1", "rotate-2", "swap"),
    reps: int = 1,
    seed: int = 0,
    logprobs: bool = True,
    unparsed: float = 0.03,
) -> pd.DataFrame:
    """A table in which the model knows some items and otherwise prefers position A."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    know = rng.uniform(0.2, 0.9, size=items)
    arm_shift = {arm: 0.15 * i for i, arm in enumerate(arms)}
    prior = np.array([0.55, 0.2, 0.15, 0.1])
    for i in range(items):
        item = f"q{i:03d}"
        key_original = int(rng.integers(0, 4))
        for arm in arms:
            for model in models:
                for variant in variants:
                    perm = permutation(variant, key_original)
                    shown_key = perm.index(key_original)
                    for rep in range(1, reps + 1):
                        trial = f"{arm}|{model}|{variant}|{item}|{rep}"
                        if rng.uniform() < unparsed:
                            letter = None
                        elif rng.uniform() < know[i] - arm_shift[arm]:
                            letter = LETTERS[shown_key]
                        else:
                            letter = LETTERS[int(rng.choice(4, p=prior))]
                        answer = None if letter is None else LETTERS[perm[LETTERS.index(letter)]]
                        row: dict[str, Any] = {
                            "trial": trial,
                            "item": item,
                            "arm": arm,
                            "model": model,
                            "variant": variant,
                            "rep": rep,
                            "key": LETTERS[shown_key],
                            "key_original": LETTERS[key_original],
                            "letter": letter,
                            "answer": answer,
                            "correct": answer == LETTERS[key_original],
                            "parse": "ok" if letter is not None else "unparseable",
                            "response": f"response of {trial}: {letter}",
                        }
                        if logprobs:
                            lp = rng.normal(-4.0, 1.5, size=4)
                            if letter is not None:
                                lp[LETTERS.index(letter)] = lp.max() + rng.exponential(1.0)
                            for j, name in enumerate(LETTERS):
                                row[f"logprob_{name}"] = float(lp[j])
                        rows.append(row)
    return pd.DataFrame(rows)


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The table as plain dict rows (NaN and pandas nulls as None), for verify/_mcq.py."""
    out = []
    for row in frame.to_dict("records"):
        clean = {}
        for key, value in row.items():
            if value is None or (isinstance(value, float) and math.isnan(value)):
                clean[key] = None
            elif isinstance(value, np.bool_ | bool):
                clean[key] = bool(value)
            elif isinstance(value, np.integer):
                clean[key] = int(value)
            elif isinstance(value, np.floating):
                clean[key] = float(value)
            else:
                clean[key] = value
        out.append(clean)
    return out
