"""Differential conformance soak (issue 31): 52 generated studies, in the slow set.

Two chunks of 26 seeds (from seed 1000, none of them the default slice's; the soak of issue
31 ran eight, 208 studies, all passing, and CI ran four, 104, until the slow set had to fit CI's
20 minutes: ``PROMPT_LEDGER_CONFORMANCE_CHUNKS=8`` runs issue 31's again, and any number more),
each its own unit
of work so pytest-xdist spreads them over the workers (``conftest.SPREAD_MODULES``). A chunk
runs every study of its seeds through the whole contract of ``tests/support/conformance.py`` (the
honest archive VERIFIED, every tamper FAILED by the check that owns it, naming the place), keeps
going after a failure, prints its counts (``-rP`` shows them) and fails listing every design that
broke the contract, each with its seed so ``conformance.generate(seed)`` reproduces it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from conformance import Tally, check_design, generate, owner_key

CHUNKS = int(os.environ.get("PROMPT_LEDGER_CONFORMANCE_CHUNKS", "2"))
PER_CHUNK = 26
FIRST = 1000


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    yield tmp_path / "home"


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_conformance_soak(chunk: int, tmp_path: Path) -> None:
    tally = Tally()
    broken: list[str] = []
    start = FIRST + chunk * PER_CHUNK
    for seed in range(start, start + PER_CHUNK):
        design = generate(seed)
        try:
            check_design(design, tmp_path / str(seed), owner_key(seed), tally)
        except Exception as exc:  # every design is tried; each failure is listed below
            broken.append(f"{design.describe()}: {type(exc).__name__}: {exc}")
    print(tally.line())
    print(f"conformance chunk {chunk}: {len(broken)} of {PER_CHUNK} designs broke the contract")
    assert not broken, "\n\n".join(broken)
