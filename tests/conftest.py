"""Shared fixtures: keys, a fixed clock, and small ledgers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import fixed_clock, fixed_key

from ledger import Ledger, SigningKey


@pytest.fixture
def owner() -> SigningKey:
    return fixed_key("example.org/owner")


@pytest.fixture
def runner() -> SigningKey:
    return fixed_key("example.org/runner")


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def log(ledger_path: Path, owner: SigningKey, runner: SigningKey) -> Iterator[Ledger]:
    with Ledger.create(
        ledger_path, origin="example.org/test", key=owner, clock=fixed_clock()
    ) as ledger:
        ledger.add_key(runner.vkey, "runner", key=owner)
        yield ledger
