"""The ledger's error tree.

::

    LedgerError                  base: every error the library raises on purpose
    ├── FormatError              an envelope, body or value that breaks docs/ledger-format.md
    │   └── CanonicalError       not representable in RFC 8785 (big integers, NaN, lone surrogates)
    ├── KeyFileError             a private key file or vkey that is missing, unreadable or malformed
    ├── AuthorizationError       a key that is unknown, revoked, or lacks the role for a kind
    ├── NotALedgerError          a file that is not a PROMPT ledger
    ├── SchemaVersionError       a ledger written by a newer version of this tool
    ├── StoreError               SQLite failures (locked, corrupt, read-only, I/O), with the path
    │   └── ConflictError        a pre-signed envelope that does not continue the head (409)
    ├── OutputError              an output file that cannot be written (permissions, disk full)
    ├── ProofError               a proof request out of range, or a proof that does not verify
    └── NoteError                a malformed signed note or checkpoint, or one that does not verify

Every message names the file, field or seq at fault. The CLI catches ``LedgerError`` once and
prints the message; the library itself never prints.
"""

from __future__ import annotations


class LedgerError(Exception):
    """Base class of every error raised by the ledger library."""


class FormatError(LedgerError):
    """An envelope, body or field value that breaks the v1 format."""


class CanonicalError(FormatError):
    """A value that RFC 8785 canonical JSON cannot represent."""


class KeyFileError(LedgerError):
    """A key file or vkey that is missing, unreadable or malformed."""


class AuthorizationError(LedgerError):
    """An append signed by an unknown or revoked key, or one whose role may not append the kind."""


class NotALedgerError(LedgerError):
    """A file that is not a PROMPT ledger."""


class SchemaVersionError(LedgerError):
    """A ledger whose schema version is newer than this library understands."""


class StoreError(LedgerError):
    """A failure of the underlying SQLite store."""


class ConflictError(StoreError):
    """A pre-signed envelope that does not continue the log's head (``docs/service.md``).

    Another writer appended first: the envelope's ``seq`` or ``prev`` is not the head's. Nothing
    was appended; ``size`` and ``last`` (hex leaf hash, empty for an empty log) are the head the
    writer must re-sign against.
    """

    def __init__(
        self,
        message: str,
        *,
        size: int,
        last: str,
        head: dict[str, object] | None = None,
        turn: str | None = None,
        turn_url: str | None = None,
    ) -> None:
        """Name the head the envelope should have continued (``head``: as the service sent it).

        ``turn`` is the token of the turn the service holds for this writer at that head
        (``docs/service.md`` §7), to send with the re-signed batch to ``turn_url``.
        """
        super().__init__(message)
        self.size = size
        self.last = last
        self.head = head
        self.turn = turn
        self.turn_url = turn_url


class RefusedError(LedgerError):
    """An append the PostgreSQL store refuses because it would break a trial rule.

    Checked inside the sequenced transaction (``ledger/_guard.py``, ``docs/storage.md``): a
    second final outcome for a trial, a request after a trial's final outcome or naming a
    closed run session, a second outcome for one request, an attempt number out of turn. Nothing
    of the batch was appended; ``spec`` is the refused :class:`ledger.EventSpec` and ``rule``
    one of ``final``, ``answered``, ``closed``, ``attempt``, ``unknown``. ``ledger serve``
    applies the same rules on either engine (``docs/service.md`` §7); its answer names the
    ``seq`` the refused envelope would have had, from which the remote ledger finds the spec.
    """

    def __init__(self, message: str, *, spec: object, rule: str, seq: int | None = None) -> None:
        """Name the refused event spec, the rule it breaks and, when known, its seq."""
        super().__init__(message)
        self.spec = spec
        self.rule = rule
        self.seq = seq if seq is not None else getattr(spec, "seq", None)


class OutputError(LedgerError):
    """A file the user asked for that cannot be written; nothing of it was left behind.

    The message names the file and says what to do (a writable location, free space, a file
    name rather than a directory).
    """


class ProofError(LedgerError):
    """A Merkle proof that was requested out of range or does not verify."""


class NoteError(LedgerError):
    """A malformed signed note or checkpoint, or one that does not verify."""
