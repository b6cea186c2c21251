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
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis._identical import CopyWatch, identical_values
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


cells = st.lists(
    st.tuples(
        st.sampled_from(["A", "B"]),
        st.sampled_from(["s1", "s2"]),
        st.integers(1, 3),
        st.one_of(st.none(), st.sampled_from(["x", "y"])),  # None: no readable text
    ),
    max_size=16,
)


@settings(max_examples=60, deadline=None)
@given(cells, st.sampled_from([(), ("m1",)]), st.booleans())
def test_the_watch_stops_only_where_the_rule_gives_none(
    drawn: list[tuple[str, str, int, str | None]], models: tuple[str, ...], shuffled: bool
) -> None:
    """Issue 41: CopyWatch rules copies out only where identical_values is None.

    Responses are fed in seq order (their order in the table, or reversed); whenever the watch
    stops, the rule on every digest gives None; a table with a key twice never stops.
    """
    model = models[0] if models else ""
    rows = [
        {"arm": a, "model": model, "stimulus": s, "variant": "", "rep": r, "response_seq": i}
        for i, (a, s, r, _t) in enumerate(drawn)
    ]
    frame = pd.DataFrame(
        rows, columns=["arm", "model", "stimulus", "variant", "rep", "response_seq"]
    )
    digests = {
        i: None if t is None else hashlib.sha256(t.encode()).hexdigest()
        for i, (*_k, t) in enumerate(drawn)
    }
    watch = CopyWatch(frame, models)
    seqs = sorted(digests, reverse=shuffled)
    stopped_at = next((n for n, seq in enumerate(seqs) if watch.add(seq, digests[seq])), None)
    keys = [(a, s, r) for a, s, r, _t in drawn]
    if len(set(keys)) != len(keys):
        assert not watch.active and stopped_at is None
    if stopped_at is not None:
        assert watch.ruled_out
        assert identical_values(frame, digests, models) is None


def test_the_watch_stops_early_and_never_with_model_pairs() -> None:
    """Two texts in one cell of each arm end the reading; two models keep every response."""
    texts = {("A", "m1", "s1", r): f"t{r}" for r in (1, 2, 3)}
    texts |= {("B", "m1", "s1", r): f"u{r}" for r in (1, 2, 3)}
    frame, _rows = _trials(texts)
    digests = {i: hashlib.sha256(t.encode()).hexdigest() for i, t in enumerate(texts.values())}
    watch = CopyWatch(frame, ("m1",))
    read = [seq for seq in sorted(digests) if not watch.add(seq, digests[seq])]
    assert watch.ruled_out and read == [0, 1, 2, 3]  # A's two texts at seq 1, B's at seq 4
    assert identical_values(frame, digests, ("m1",)) is None
    two = CopyWatch(frame, ("m1", "m2"))
    assert not two.active
    assert not any(two.add(seq, d) for seq, d in digests.items())
