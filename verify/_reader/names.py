"""Names and small helpers every archive check shares (``docs/archive-format.md``)."""

from __future__ import annotations

import csv
import hashlib
import io

__all__ = ["EVENTS", "MANIFEST", "TRIAL_KINDS", "line_where", "read_csv", "sha_hex"]

EVENTS = "ledger/events.jsonl"
MANIFEST = "MANIFEST.sha256"
TRIAL_KINDS = frozenset(
    {"trial.requested", "trial.responded", "trial.failed", "trial.scored", "batch.submitted"}
)


def line_where(seq: int) -> str:
    """The place of event ``seq`` in the archive: ``ledger/events.jsonl line <seq + 1>``."""
    return f"{EVENTS} line {seq + 1}"


def sha_hex(data: bytes) -> str:
    """Lowercase hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def read_csv(data: bytes) -> list[list[str]]:
    """The rows of a UTF-8 CSV file (raises ``UnicodeDecodeError`` or ``csv.Error``)."""
    return list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
