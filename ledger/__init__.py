"""PROMPT Ledger core: a signed, hash-chained, Merkle-checkpointed event store.

The format is specified in ``docs/ledger-format.md``. Typical use::

    from ledger import Ledger, SigningKey

    owner = SigningKey.generate("example.org/owner")
    with Ledger.create("study.db", origin="example.org/study-1", key=owner) as log:
        log.append("protocol.locked", {"schedule_sha256": "..."}, key=owner)
        note = log.sign_checkpoint(owner)       # C2SP signed note to publish
"""

from ledger._canonical import MAX_SAFE_INTEGER, canonical_json
from ledger._clock import FixedClock
from ledger._envelope import Envelope, parse_envelope
from ledger._errors import (
    AuthorizationError,
    CanonicalError,
    FormatError,
    KeyFileError,
    LedgerError,
    NotALedgerError,
    NoteError,
    OutputError,
    ProofError,
    SchemaVersionError,
    StoreError,
)
from ledger._files import describe_os_error, describe_utf8_error, write_files
from ledger._keys import SigningKey, VerifierKey, load_verifier, user_home
from ledger._merkle import (
    EMPTY_ROOT,
    leaf_hash,
    node_hash,
    root_from_leaf_hashes,
    root_from_leaves,
    verify_consistency,
    verify_inclusion,
)
from ledger._note import Checkpoint, Note, open_checkpoint, open_note, parse_checkpoint, sign_note
from ledger._roles import KNOWN_KINDS, ROLES, role_may_append
from ledger._store import (
    ConsistencyProof,
    Event,
    EventSpec,
    InclusionProof,
    KeyRecord,
    Ledger,
    StoredCheckpoint,
)

__all__ = [
    "EMPTY_ROOT",
    "KNOWN_KINDS",
    "MAX_SAFE_INTEGER",
    "ROLES",
    "AuthorizationError",
    "CanonicalError",
    "Checkpoint",
    "ConsistencyProof",
    "Envelope",
    "Event",
    "EventSpec",
    "FixedClock",
    "FormatError",
    "InclusionProof",
    "KeyFileError",
    "KeyRecord",
    "Ledger",
    "LedgerError",
    "NotALedgerError",
    "Note",
    "NoteError",
    "OutputError",
    "ProofError",
    "SchemaVersionError",
    "SigningKey",
    "StoreError",
    "StoredCheckpoint",
    "VerifierKey",
    "canonical_json",
    "describe_os_error",
    "describe_utf8_error",
    "leaf_hash",
    "load_verifier",
    "node_hash",
    "open_checkpoint",
    "open_note",
    "parse_checkpoint",
    "parse_envelope",
    "role_may_append",
    "root_from_leaf_hashes",
    "root_from_leaves",
    "sign_note",
    "user_home",
    "verify_consistency",
    "verify_inclusion",
    "write_files",
]
