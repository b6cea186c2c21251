"""Sealed blobs (docs/ledger-format.md §6.1): vectors, both implementations, the store, policies."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from locations import REPO

from ledger import (
    FormatError,
    Ledger,
    LedgerError,
    SealPolicy,
    SigningKey,
    is_sealed,
    open_blob,
    seal,
)
from ledger import commitment as writer_commitment
from verify import _sealed as reader

ROOT = REPO
VECTORS = ROOT / "tests" / "vectors" / "sealed-blob.json"
sys.path.insert(0, str(ROOT / "scripts"))

import make_sealed_vectors  # noqa: E402


def test_vectors_regenerate_byte_for_byte() -> None:
    assert make_sealed_vectors.vectors() == VECTORS.read_bytes()


@pytest.mark.parametrize("vector", json.loads(VECTORS.read_text())["vectors"])
def test_writer_and_verifier_agree_with_each_vector(vector: dict[str, str]) -> None:
    content, salt = bytes.fromhex(vector["content_hex"]), bytes.fromhex(vector["salt_hex"])
    stored = bytes.fromhex(vector["stored_hex"])
    assert seal(content, salt) == stored and is_sealed(stored) and open_blob(stored) == content
    assert writer_commitment(content, salt) == vector["address"]
    assert reader.content_of(stored) == content and reader.salt_of(stored) == salt
    assert reader.address_for(content, stored) == vector["address"]
    assert hashlib.sha256(stored).hexdigest() == vector["address"] != vector["plain_sha256"]
    assert reader.address_for(content, None) == vector["plain_sha256"]


def test_the_docs_show_the_one_letter_vector() -> None:
    vector = json.loads(VECTORS.read_text())["vectors"][1]
    text = (ROOT / "docs" / "ledger-format.md").read_text(encoding="utf-8")
    for value in (vector["salt_hex"], vector["address"], vector["plain_sha256"]):
        assert value in text


@given(st.binary(max_size=200))
def test_seal_round_trip(content: bytes) -> None:
    stored = seal(content)
    assert open_blob(stored) == content and reader.content_of(stored) == content
    assert reader.address_for(content, stored) == hashlib.sha256(stored).hexdigest()


def test_a_wrong_salt_length_is_refused() -> None:
    with pytest.raises(FormatError, match="salt is 32 bytes, not 16"):
        seal(b"x", bytes(16))


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_the_store_seals_what_the_locked_policy_names(
    tmp_path: Path, engine: str, request: pytest.FixtureRequest
) -> None:
    """After a protocol.locked with a policy, named blobs are sealed, and so is their mirror.

    Step events: on PostgreSQL the store checks trial events against the trial rules
    (ledger/_guard.py), which these bare bodies are not meant to satisfy.
    """
    key = SigningKey.generate("example.org/owner")
    where: Any = tmp_path / "l.db"
    if engine == "postgresql":
        where = request.getfixturevalue("pg_server").url(schema="sealed_store")
    with Ledger.create(where, origin="example.org/l", key=key) as log:
        assert log.engine == engine
        before = log.append("step.requested", {}, key=key, blobs={"request": b"{}"})
        assert before.blobs["request"] == hashlib.sha256(b"{}").hexdigest()  # no policy yet
        log.append(
            "protocol.locked", {"privacy": {"withhold": ["step.requested:request"]}}, key=key
        )
        body = {"request_sha256": hashlib.sha256(b"{}").hexdigest(), "other": 1}
        event = log.append("step.requested", body, key=key, blobs={"request": b"{}"})
        stored = log.stored_blob(event.blobs["request"])
        assert is_sealed(stored) and log.blob(event.blobs["request"]) == b"{}"
        both = [event.blobs["request"], before.blobs["request"].upper()]
        assert log.read_blobs(both) == {d.lower(): b"{}" for d in both}  # contents, unsealed
        assert event.body["request_sha256"] == event.blobs["request"] != body["request_sha256"]
        kept = log.append("step.responded", {}, key=key, blobs={"response": b"x"})
        assert kept.blobs["response"] == hashlib.sha256(b"x").hexdigest()  # not named: plain


def test_policy_parsing() -> None:
    policy = SealPolicy.from_protocol(
        {"privacy": {"withhold": ["artifact.locked:items", "trial.scored:scores"]}}
    )
    assert policy.roles == frozenset({"items"}) and policy.names("trial.scored", {}) == {"scores"}
    assert policy.names("artifact.locked", {"role": "items"}) == frozenset()  # not sealed
    assert not SealPolicy.from_protocol({}) and policy.seal_now("x.y", "z", b"a") == b"a"


def test_blob_pieces_read_what_the_whole_reads_sealed_or_not(tmp_path: Path) -> None:
    """``stored_blob_chunks`` / ``blob_chunks`` (export's copies, issue 41) piece by piece.

    A blob larger than a piece is read with SQLite's incremental blob I/O: every piece but the
    last is whole, and the pieces join to the stored bytes; the content's pieces leave a sealed
    blob's header out, as :meth:`Ledger.blob` does.
    """
    key = SigningKey.generate("example.org/owner")
    big = bytes(range(256)) * 77 + b"tail"  # 19,716 bytes: pieces of 4,096
    with Ledger.create(tmp_path / "l.db", origin="example.org/l", key=key) as log:
        event = log.append(
            "step.requested",
            {},
            key=key,
            blobs={"request": big, "sealed": seal(big), "small": b"{}"},
        )
        for name in ("request", "sealed", "small"):
            digest = event.blobs[name]
            stored = list(log.stored_blob_chunks(digest, 4096))
            assert b"".join(stored) == log.stored_blob(digest), name
            assert all(len(p) == 4096 for p in stored[:-1]) and 0 < len(stored[-1]) <= 4096
            assert b"".join(log.blob_chunks(digest.upper(), 4096)) == log.blob(digest), name
        assert len(list(log.stored_blob_chunks(event.blobs["request"], 4096))) == 5
        assert b"".join(log.blob_chunks(event.blobs["sealed"], 4096)) == big
        with pytest.raises(LedgerError, match="no blob 00"):
            list(log.blob_chunks("00" * 32))
        with pytest.raises(ValueError, match="at least 4096 bytes, not 100"):
            list(log.stored_blob_chunks(event.blobs["small"], 100))
