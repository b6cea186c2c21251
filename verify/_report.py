"""The verification report: checks with PASS, FAIL or WARN, as data."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ARCHIVE_CHECK_NAMES", "CHECK_NAMES", "PARTIAL_EXIT", "Check", "Report", "Status"]

PARTIAL_EXIT = 3
"""Exit status of a verification that failed nothing but could not re-derive withheld data."""

CHECK_NAMES: tuple[str, ...] = (
    "file",
    "envelopes",
    "sequence",
    "chain",
    "leaf-hashes",
    "keys",
    "signatures",
    "blobs",
    "tree",
    "checkpoints",
    "published-checkpoints",
    "trust",
    "time-order",
)
"""Stable check names in report order (``published-checkpoints`` only when some were given)."""

ARCHIVE_CHECK_NAMES: tuple[str, ...] = (
    "layout",
    "manifest",
    "export-coverage",
    "protocol",
    "schedule",
    "requests",
    "preflight",
    "outcomes",
    "provenance",
    "blinding",
    "derived",
    "report",
    "flow",
    "checklists",
    "registration",
    "rescore",
    "reanalysis",
    "plan",
)
"""Checks an archive adds after those of :data:`CHECK_NAMES` (``docs/archive-format.md`` §4);
``plan`` only when a ``plan/plan.json`` was locked (``docs/planning.md`` §7)."""


class Status(enum.Enum):
    """Outcome of one check."""

    PASS = "PASS"
    FAIL = "FAIL"
    WARN = "WARN"
    LIMITED = "LIMITED"
    """Not re-derived: the check needs data a public archive withholds (``docs/privacy.md``)."""


@dataclass(frozen=True)
class Check:
    """One check's outcome.

    ``reason`` is a complete sentence naming the place at fault; ``seq`` is the first event at fault
    (if the problem is tied to an event) and ``where`` another place (a file path, a blob hash, a
    checkpoint label, a tree node, a table row).
    """

    name: str
    status: Status
    reason: str
    seq: int | None = None
    where: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able dict of this check."""
        return {
            "name": self.name,
            "status": self.status.value,
            "reason": self.reason,
            "seq": self.seq,
            "where": self.where,
        }


@dataclass
class Report:
    """The result of :func:`verify.verify_ledger_file`.

    ``size`` is the number of events read; ``root`` the hex Merkle root over them (``None`` when the
    file could not be read); ``origin`` the log's origin from its genesis event, if readable.
    A report is truthy exactly when no check FAILed (WARNs do not make it false).
    """

    path: str
    checks: list[Check] = field(default_factory=list)
    size: int = 0
    root: str | None = None
    origin: str | None = None
    timings: dict[str, float] = field(default_factory=dict, compare=False)
    """Seconds spent per phase (``ledger``, ``signatures``, ``hashing``, check names...)."""

    @property
    def ok(self) -> bool:
        """True when no check FAILed."""
        return all(c.status is not Status.FAIL for c in self.checks)

    def __bool__(self) -> bool:
        return self.ok

    @property
    def limited(self) -> list[Check]:
        """The checks that could not re-derive withheld data (a public archive), in order."""
        return [c for c in self.checks if c.status is Status.LIMITED]

    @property
    def status(self) -> str:
        """``verified``, ``partial`` (nothing failed, some checks LIMITED) or ``failed``."""
        if not self.ok:
            return "failed"
        return "partial" if self.limited else "verified"

    @property
    def failures(self) -> list[Check]:
        """The FAILed checks, in report order."""
        return [c for c in self.checks if c.status is Status.FAIL]

    @property
    def warnings(self) -> list[Check]:
        """The WARNed checks, in report order."""
        return [c for c in self.checks if c.status is Status.WARN]

    @property
    def first_failure(self) -> Check | None:
        """The first FAILed check in report order, or ``None``."""
        failures = self.failures
        return failures[0] if failures else None

    def get(self, name: str) -> Check | None:
        """Return the check called ``name``, or ``None`` if it was not run."""
        for check in self.checks:
            if check.name == name:
                return check
        return None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able dict: path, ok, size, root, origin and the list of checks."""
        return {
            "path": self.path,
            "ok": self.ok,
            "status": self.status,
            "limits": [f"{c.name}: {c.reason}" for c in self.limited],
            "size": self.size,
            "root": self.root,
            "origin": self.origin,
            "checks": [c.to_dict() for c in self.checks],
        }
