"""The error tree of the verifier.

::

    VerificationError                 base of every error raised by ``verify``
    ├── KeyFormatError                a vkey (verifier key) that is not valid C2SP syntax
    ├── NoteError                     a signed note that cannot be accepted
    │   ├── MalformedNoteError        the note breaks the signed-note syntax
    │   ├── InvalidSignatureError     a signature line of a known key does not verify
    │   ├── AmbiguousKeyError         two different known keys share a key name and key id
    │   └── UnverifiedNoteError       no signature of a known key is present
    ├── CheckpointFormatError         the note text is not a C2SP tlog-checkpoint
    └── ProofError                    a Merkle proof was requested for impossible sizes or indexes

``require_valid`` raises the base class itself, carrying the first failed :class:`Check` and the
whole :class:`Report`.  Third-party exceptions (``sqlite3``, ``cryptography``, ``binascii``) never
escape the package: they are wrapped in these types or become FAIL checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verify._report import Check, Report

__all__ = [
    "AmbiguousKeyError",
    "CheckpointFormatError",
    "InvalidSignatureError",
    "KeyFormatError",
    "MalformedNoteError",
    "NoteError",
    "ProofError",
    "UnverifiedNoteError",
    "VerificationError",
]


class VerificationError(Exception):
    """Base error of the verifier.

    When raised by :func:`verify.require_valid`, ``check`` is the first failed check and ``report``
    the full report; the message names the check, the seq or place at fault, and the reason.
    """

    def __init__(
        self, message: str, *, check: Check | None = None, report: Report | None = None
    ) -> None:
        super().__init__(message)
        self.check = check
        self.report = report

    @classmethod
    def from_check(cls, check: Check, report: Report | None = None) -> VerificationError:
        """Build the error for a failed check: ``"<ledger>: <check>: <reason>"``."""
        prefix = f"{report.path}: " if report is not None else ""
        return cls(f"{prefix}{check.name} check failed: {check.reason}", check=check, report=report)


class KeyFormatError(VerificationError):
    """A vkey string is not ``<name>+<8 hex key id>+<base64(0x01 || 32-byte Ed25519 key)>``."""


class NoteError(VerificationError):
    """A signed note cannot be accepted."""


class MalformedNoteError(NoteError):
    """The note breaks the C2SP signed-note syntax (message starts with ``malformed note``)."""


class InvalidSignatureError(NoteError):
    """A signature line matches a known key by name and key id but does not verify."""


class AmbiguousKeyError(NoteError):
    """Two different known keys have the same key name and key id."""


class UnverifiedNoteError(NoteError):
    """The note carries no verifying signature from any known key."""


class CheckpointFormatError(VerificationError):
    """The note text is not a C2SP ``tlog-checkpoint`` body (origin, size, root)."""


class ProofError(VerificationError):
    """A Merkle proof was requested for an index or sizes the tree does not have."""
