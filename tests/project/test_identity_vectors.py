"""The model-identity notice, pinned by data for both sides (issue 31; DESIGN.md §16).

``runner._identity.session_notice`` (the writer's report and README) and
``verify._archive.preflight.identity_notice`` (what the verifier requires them to carry) are
two implementations of ``docs/trials.md`` §2; each is run over ``identity-notices.json`` here,
so a change one side makes and the other does not follow fails a named case.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from locations import TESTS_DIR

CASES: list[dict[str, Any]] = json.loads(
    (TESTS_DIR / "vectors" / "identity-notices.json").read_text("utf-8")
)["cases"]


class _Runs:
    """What the verifier's notice reads of an archive: the run.started events by seq."""

    def __init__(self, runs: list[dict[str, Any]]) -> None:
        self.bodies = {int(r["seq"]): {k: v for k, v in r.items() if k != "seq"} for r in runs}

    def of_kind(self, kind: str) -> list[int]:
        return sorted(self.bodies) if kind == "run.started" else []

    def body(self, seq: int) -> dict[str, Any]:
        return self.bodies[seq]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_writer_writes_the_notice(case: dict[str, Any]) -> None:
    from runner._identity import session_notice

    assert session_notice(case["runs"]) == case["notice"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_verifier_requires_the_notice(case: dict[str, Any]) -> None:
    from verify._archive.preflight import identity_notice

    assert identity_notice(_Runs(case["runs"])) == case["notice"]  # type: ignore[arg-type]
