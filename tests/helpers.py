"""Deterministic keys and clocks shared by tests, scripts and benchmarks."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from ledger import SigningKey


def fixed_key(name: str) -> SigningKey:
    """A deterministic key: seed = SHA-256("prompt-ledger test key <name>")."""
    return SigningKey(name, hashlib.sha256(f"prompt-ledger test key {name}".encode()).digest())


def fixed_clock(start: datetime | None = None) -> Callable[[], datetime]:
    """A clock that starts at 2026-01-01 and advances one millisecond per call."""
    moment = [start or datetime(2026, 1, 1, tzinfo=UTC)]

    def clock() -> datetime:
        now = moment[0]
        moment[0] = now + timedelta(milliseconds=1)
        return now

    return clock
