"""PROMPT Ledger core: a signed, hash-chained, Merkle-checkpointed event store.

The format is specified in ``docs/ledger-format.md``. Typical use::

    from ledger import Ledger, SigningKey

    owner = SigningKey.generate("example.org/owner")
    with Ledger.create("study.db", origin="example.org/study-1", key=owner) as log:
        log.append("protocol.locked", {"schedule_sha256": "..."}, key=owner)
        note = log.sign_checkpoint(owner)       # C2SP signed note to publish
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger._lazy import lazy_exports

if TYPE_CHECKING:
    from ledger._canonical import MAX_SAFE_INTEGER, canonical_json
    from ledger._clock import FixedClock
    from ledger._copy import CopyResult, copy_ledger, study_ledger
    from ledger._envelope import Envelope, parse_envelope
    from ledger._errors import (
        AuthorizationError,
        CanonicalError,
        ConflictError,
        FormatError,
        KeyFileError,
        LedgerError,
        NotALedgerError,
        NoteError,
        OutputError,
        ProofError,
        RefusedError,
        SchemaVersionError,
        StoreError,
    )
    from ledger._files import (
        can_sync_file_system,
        describe_os_error,
        describe_utf8_error,
        fsync_directory,
        open_regular_file,
        read_regular_file,
        sync_file_system,
        write_files,
    )
    from ledger._http import RemoteLocation, is_http_url
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
    from ledger._note import (
        Checkpoint,
        Note,
        open_checkpoint,
        open_note,
        parse_checkpoint,
        sign_note,
    )
    from ledger._postgres import PostgresLocation, is_url, schema_for
    from ledger._receipt import cosigned_by, make_receipt
    from ledger._remote import RemoteLedger
    from ledger._roles import KNOWN_KINDS, ROLES, role_may_append
    from ledger._sealed import (
        SALT_BYTES,
        SealPolicy,
        commitment,
        is_sealed,
        open_blob,
        seal,
        split_sealed,
    )
    from ledger._store import (
        ConsistencyProof,
        Event,
        EventSpec,
        InclusionProof,
        KeyRecord,
        Ledger,
        StoredCheckpoint,
        check_origin,
    )
    from ledger._tiles import TileError, publish
    from ledger._workers import (
        WorkerLink,
        WorkerRecord,
        dead_workers,
        list_workers,
        new_worker_id,
        open_requests,
        register_worker,
        remove_worker,
        session_open,
    )

__all__ = [
    "EMPTY_ROOT",
    "KNOWN_KINDS",
    "MAX_SAFE_INTEGER",
    "ROLES",
    "SALT_BYTES",
    "AuthorizationError",
    "CanonicalError",
    "Checkpoint",
    "ConflictError",
    "ConsistencyProof",
    "CopyResult",
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
    "PostgresLocation",
    "ProofError",
    "RefusedError",
    "RemoteLedger",
    "RemoteLocation",
    "SchemaVersionError",
    "SealPolicy",
    "SigningKey",
    "StoreError",
    "StoredCheckpoint",
    "TileError",
    "VerifierKey",
    "WorkerLink",
    "WorkerRecord",
    "can_sync_file_system",
    "canonical_json",
    "check_origin",
    "commitment",
    "copy_ledger",
    "cosigned_by",
    "dead_workers",
    "describe_os_error",
    "describe_utf8_error",
    "fsync_directory",
    "is_http_url",
    "is_sealed",
    "is_url",
    "leaf_hash",
    "list_workers",
    "load_verifier",
    "make_receipt",
    "new_worker_id",
    "node_hash",
    "open_blob",
    "open_checkpoint",
    "open_note",
    "open_regular_file",
    "open_requests",
    "parse_checkpoint",
    "parse_envelope",
    "publish",
    "read_regular_file",
    "register_worker",
    "remove_worker",
    "role_may_append",
    "root_from_leaf_hashes",
    "root_from_leaves",
    "schema_for",
    "seal",
    "session_open",
    "sign_note",
    "split_sealed",
    "study_ledger",
    "sync_file_system",
    "user_home",
    "verify_consistency",
    "verify_inclusion",
    "write_files",
]

# Names are imported on first use (PEP 562), so `import ledger` (and the `ledger` command's
# start-up) costs only what is used: the store pulls in SQLite, the keys pull in cryptography.
_LAZY: dict[str, str] = {
    "EMPTY_ROOT": "ledger._merkle",
    "KNOWN_KINDS": "ledger._roles",
    "MAX_SAFE_INTEGER": "ledger._canonical",
    "ROLES": "ledger._roles",
    "AuthorizationError": "ledger._errors",
    "CanonicalError": "ledger._errors",
    "Checkpoint": "ledger._note",
    "ConflictError": "ledger._errors",
    "ConsistencyProof": "ledger._store",
    "CopyResult": "ledger._copy",
    "Envelope": "ledger._envelope",
    "Event": "ledger._store",
    "EventSpec": "ledger._store",
    "FixedClock": "ledger._clock",
    "FormatError": "ledger._errors",
    "InclusionProof": "ledger._store",
    "KeyFileError": "ledger._errors",
    "KeyRecord": "ledger._store",
    "Ledger": "ledger._store",
    "LedgerError": "ledger._errors",
    "NotALedgerError": "ledger._errors",
    "Note": "ledger._note",
    "NoteError": "ledger._errors",
    "OutputError": "ledger._errors",
    "PostgresLocation": "ledger._postgres",
    "ProofError": "ledger._errors",
    "SchemaVersionError": "ledger._errors",
    "SealPolicy": "ledger._sealed",
    "commitment": "ledger._sealed",
    "is_sealed": "ledger._sealed",
    "open_blob": "ledger._sealed",
    "seal": "ledger._sealed",
    "split_sealed": "ledger._sealed",
    "SigningKey": "ledger._keys",
    "StoreError": "ledger._errors",
    "RefusedError": "ledger._errors",
    "RemoteLocation": "ledger._http",
    "StoredCheckpoint": "ledger._store",
    "VerifierKey": "ledger._keys",
    "canonical_json": "ledger._canonical",
    "copy_ledger": "ledger._copy",
    "describe_os_error": "ledger._files",
    "describe_utf8_error": "ledger._files",
    "leaf_hash": "ledger._merkle",
    "load_verifier": "ledger._keys",
    "node_hash": "ledger._merkle",
    "is_url": "ledger._postgres",
    "open_checkpoint": "ledger._note",
    "open_note": "ledger._note",
    "open_regular_file": "ledger._files",
    "parse_checkpoint": "ledger._note",
    "parse_envelope": "ledger._envelope",
    "read_regular_file": "ledger._files",
    "role_may_append": "ledger._roles",
    "root_from_leaf_hashes": "ledger._merkle",
    "root_from_leaves": "ledger._merkle",
    "schema_for": "ledger._postgres",
    "sign_note": "ledger._note",
    "study_ledger": "ledger._copy",
    "user_home": "ledger._keys",
    "verify_consistency": "ledger._merkle",
    "verify_inclusion": "ledger._merkle",
    "write_files": "ledger._files",
    # what other packages use (make_faces.py)
    "can_sync_file_system": "ledger._files",
    "fsync_directory": "ledger._files",
    "sync_file_system": "ledger._files",
    "is_http_url": "ledger._http",
    "cosigned_by": "ledger._receipt",
    "make_receipt": "ledger._receipt",
    "RemoteLedger": "ledger._remote",
    "SALT_BYTES": "ledger._sealed",
    "check_origin": "ledger._store",
    "TileError": "ledger._tiles",
    "publish": "ledger._tiles",
    "WorkerLink": "ledger._workers",
    "WorkerRecord": "ledger._workers",
    "dead_workers": "ledger._workers",
    "list_workers": "ledger._workers",
    "new_worker_id": "ledger._workers",
    "open_requests": "ledger._workers",
    "register_worker": "ledger._workers",
    "remove_worker": "ledger._workers",
    "session_open": "ledger._workers",
}


if not TYPE_CHECKING:  # type checkers read the imports above instead
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
