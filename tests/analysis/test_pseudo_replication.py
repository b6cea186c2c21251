"""Pseudo-replication flagged (issue 31): at lock, and in the results when responses are copies.

A deterministic model answers each replicate alike, and two model names served by one model
answer alike: the trial-level tests would count the copies as independent evidence. ``ledger
lock`` warns of designs that invite this; the analysis records ``descriptive.identical_responses``
when it happened, and the verifier re-derives it from the responses by the docs' rule.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analysis._identical import identical_values
from runner.spec import load_study
from verify import _copies


def _spec(root: Path, old: str, new: str) -> None:
    path = root / "study.toml"
    text = path.read_text("utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), "utf-8")


def test_replicates_at_temperature_zero_are_warned_of_at_lock(
    study_template: Path, tmp_path: Path
) -> None:
    root = tmp_path / "study"
    shutil.copytree(study_template, root)
    assert load_study(root).replication_warnings() == []  # temperature 1.0: replicates vary
    _spec(root, "temperature = 1.0", "temperature = 0.0")
    warnings = load_study(root).replication_warnings()
    assert len(warnings) == len(load_study(root).arms)  # one per arm (one model)
    assert warnings[0].startswith("arm 'A' runs 30 replicates at temperature 0")
    assert "pseudo-replication" in warnings[0]
    _spec(root, "replicates = 30", "replicates = 1")
    assert load_study(root).replication_warnings() == []


def _trials(texts: dict[tuple[str, str, str, int], str]) -> tuple[pd.DataFrame, list[dict]]:
    rows = [
        {
            "trial": f"{a}|{m}|{s}|{r}",
            "arm": a,
            "model": m,
            "stimulus": s,
            "variant": "",
            "rep": r,
            "response_seq": i,
        }
        for i, (a, m, s, r) in enumerate(texts)
    ]
    return pd.DataFrame(rows), rows


def _both(
    texts: dict[tuple[str, str, str, int], str], models: tuple[str, ...]
) -> tuple[dict | None, dict | None]:
    frame, rows = _trials(texts)
    by_seq = list(texts.values())
    digests = {i: hashlib.sha256(t.encode()).hexdigest() for i, t in enumerate(by_seq)}
    mine = identical_values(frame, digests, models)
    body = [
        (f'{{"content": [{{"type": "text", "text": "{t}"}}]}}'.encode(), "anthropic-messages")
        for t in by_seq
    ]
    theirs = _copies.copies(rows, lambda seq: body[seq], models)
    return mine, theirs


@pytest.mark.parametrize(
    ("texts", "replicates", "pairs"),
    [
        # every replicate of each cell alike on model m1 only; m2's replicates differ
        (
            {
                ("A", "m1", "s1", 1): "B",
                ("A", "m1", "s1", 2): "B",
                ("A", "m1", "s2", 1): "C",
                ("A", "m1", "s2", 2): "C",
                ("A", "m2", "s1", 1): "B",
                ("A", "m2", "s1", 2): "D",
            },
            [{"arm": "A", "model": "m1", "cells": 2}],
            [],
        ),
        # one cell differs: not a deterministic model, no note
        (
            {
                ("A", "m1", "s1", 1): "B",
                ("A", "m1", "s1", 2): "C",
                ("A", "m1", "s2", 1): "C",
                ("A", "m1", "s2", 2): "C",
            },
            [],
            [],
        ),
        # two models alike on every shared trial (one replicate each)
        (
            {
                ("A", "m1", "s1", 1): "B",
                ("A", "m2", "s1", 1): "B",
                ("A", "m1", "s2", 1): "x y",
                ("A", "m2", "s2", 1): "x y",
                ("A", "m3", "s1", 1): "B",
                ("A", "m3", "s2", 1): "D",
            },
            [],
            [{"a": "m1", "b": "m2", "trials": 2}],
        ),
    ],
)
def test_copies_are_found_by_the_same_rule_on_both_sides(
    texts: dict[tuple[str, str, str, int], str], replicates: list[dict], pairs: list[dict]
) -> None:
    mine, theirs = _both(texts, ("m1", "m2", "m3"))
    if not replicates and not pairs:
        assert mine is None and theirs is None
        return
    assert mine is not None and theirs is not None
    assert mine["replicates"] == theirs["replicates"] == replicates
    assert mine["models"] == theirs["models"] == pairs
    assert ("twice" in mine["note"]) == bool(pairs)
    assert ("copies, not independent" in mine["note"]) == bool(replicates)
