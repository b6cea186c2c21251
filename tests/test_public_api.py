"""Pin the public names, so a change to the API is a deliberate, reviewed change."""

from __future__ import annotations

import ledger
import verify


def test_ledger_public_names() -> None:
    assert sorted(ledger.__all__) == sorted(
        [
            "EMPTY_ROOT", "KNOWN_KINDS", "MAX_SAFE_INTEGER", "ROLES", "AuthorizationError",
            "CanonicalError", "Checkpoint", "ConsistencyProof", "Envelope", "Event", "EventSpec",
            "FixedClock", "FormatError", "InclusionProof", "KeyFileError", "KeyRecord", "Ledger",
            "LedgerError", "NotALedgerError", "Note", "NoteError", "OutputError", "ProofError",
            "SchemaVersionError", "SigningKey", "StoreError", "StoredCheckpoint", "VerifierKey",
            "canonical_json", "describe_os_error", "describe_utf8_error", "leaf_hash",
            "load_verifier", "node_hash", "open_checkpoint",
            "open_note", "parse_checkpoint", "parse_envelope", "role_may_append",
            "root_from_leaf_hashes", "root_from_leaves", "sign_note", "user_home",
            "verify_consistency",
            "verify_inclusion", "write_files",
        ]
    )
    for name in ledger.__all__:
        assert hasattr(ledger, name), name


def test_verify_public_names() -> None:
    for name in ("Check", "Report", "Status", "VerificationError", "require_valid",
                 "verify_ledger_file", "CHECK_NAMES"):
        assert name in verify.__all__
    for name in verify.__all__:
        assert hasattr(verify, name), name
    assert list(verify.CHECK_NAMES) == [
        "file", "envelopes", "sequence", "chain", "leaf-hashes", "keys", "signatures", "blobs",
        "tree", "checkpoints", "published-checkpoints", "trust", "time-order",
    ]


def test_every_error_is_a_ledger_error() -> None:
    for name in ledger.__all__:
        obj = getattr(ledger, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, ledger.LedgerError), name
