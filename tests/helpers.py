"""Deterministic keys and clocks shared by tests."""

from __future__ import annotations

import hashlib

from ledger import FixedClock, SigningKey


def fixed_key(name: str) -> SigningKey:
    """A deterministic key: seed = SHA-256("prompt-ledger test key <name>")."""
    return SigningKey(name, hashlib.sha256(f"prompt-ledger test key {name}".encode()).digest())


def fixed_clock() -> FixedClock:
    """A clock that starts at 2026-01-01T00:00:00Z and advances one millisecond per reading."""
    return FixedClock()
