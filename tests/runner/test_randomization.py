"""The randomization and blinding of docs/randomization.md, pinned by its worked example."""

from __future__ import annotations

import re

from locations import REPO

from runner._schedule import (
    arm_code,
    commitment,
    order_key,
    schedule,
    schedule_bytes,
    schedule_sha256,
    trial_ids,
)

DOC = (REPO / "docs" / "randomization.md").read_text()


def test_worked_example_matches_the_code() -> None:
    rows = re.findall(r"^\| (\d+) \| `([^`]+)` \| `([0-9a-f]{64})` \|$", DOC, re.M)
    assert len(rows) == 8
    documented = [tid.replace("\\|", "|") for _, tid, _ in rows]
    order = schedule("7", trial_ids(["A", "B"], ["s1", "s2"], 2))
    assert order == documented
    for (_, _, key), tid in zip(rows, documented, strict=True):
        assert order_key("7", tid) == key
    digest = re.search(r"schedule_sha256: `([0-9a-f]{64})`", DOC)
    assert digest is not None and schedule_sha256(order) == digest.group(1)
    secret = b"example secret"
    assert f"commitment\n`{commitment(secret)}`" in DOC
    assert f"code(A) = `{arm_code(secret, 'A')}`" in DOC
    assert f"code(B) = `{arm_code(secret, 'B')}`" in DOC


def test_schedule_is_a_permutation_and_deterministic() -> None:
    ids = trial_ids(["A", "B", "C", "D", "E"], [f"p{i}" for i in range(7)], 30)
    assert len(ids) == 1050 and len(set(ids)) == 1050
    first = schedule("20260421", ids)
    assert first == schedule("20260421", list(reversed(ids)))
    assert sorted(first) == sorted(ids)
    assert first != schedule("20260422", ids)
    assert schedule_bytes(first).count(b"\n") == 1050
