"""The SQLite store: appends, keys and roles, blobs, proofs, checkpoints, bad files."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest
from helpers import fixed_clock, fixed_key

from ledger import (
    AuthorizationError,
    CanonicalError,
    EventSpec,
    FormatError,
    Ledger,
    LedgerError,
    NotALedgerError,
    NoteError,
    ProofError,
    SchemaVersionError,
    SigningKey,
    StoreError,
    leaf_hash,
    open_checkpoint,
    root_from_leaf_hashes,
)
from ledger._merkle import consistency_proof, inclusion_proof, list_range_hash


def test_genesis_and_keys(log: Ledger, owner: SigningKey, runner: SigningKey) -> None:
    genesis = log.get(0)
    assert genesis.kind == "ledger.genesis"
    assert genesis.body == {"origin": "example.org/test", "vkey": owner.vkey}
    assert genesis.prev == "0" * 64
    assert [(k.actor, k.role, k.added_seq) for k in log.keys()] == [  # noqa: SIM118
        (owner.actor, "owner", 0),
        (runner.actor, "runner", 1),
    ]


def test_chain_links_and_leaf_hashes(log: Ledger, runner: SigningKey) -> None:
    log.append_many([("trial.requested", {"i": i}) for i in range(5)], key=runner)
    events = list(log.events())
    for before, after in pairwise(events):
        assert after.prev == before.leaf_hash.hex()
    for event in events:
        assert event.leaf_hash == leaf_hash(event.envelope)
        assert runner.verifier.verify(event.envelope, event.signature) or event.seq < 2


def test_events_filter_by_kind_and_range(log: Ledger, runner: SigningKey) -> None:
    log.append_many([("trial.requested", {}), ("trial.responded", {})] * 3, key=runner)
    assert [e.seq for e in log.events("trial.responded")] == [3, 5, 7]
    assert [e.seq for e in log.events(start=3, end=5)] == [3, 4]


def test_blobs_are_content_addressed_and_stored_once(log: Ledger, runner: SigningKey) -> None:
    a = log.append("trial.requested", {}, key=runner, blobs={"request": b"same"})
    b = log.append("trial.requested", {}, key=runner, blobs={"request": b"same"})
    assert a.blobs == b.blobs
    digest = a.blobs["request"]
    assert log.blob(digest) == b"same"
    count = log.db.execute("SELECT COUNT(*) FROM blobs").fetchone()[0]
    assert count == 1
    c = log.append("trial.responded", {}, key=runner, blobs={"again": digest})
    assert c.blobs == {"again": digest}
    with pytest.raises(FormatError, match="not stored"):
        log.append("trial.responded", {}, key=runner, blobs={"x": "ab" * 32})


def test_role_permissions(log: Ledger, owner: SigningKey, runner: SigningKey) -> None:
    with pytest.raises(AuthorizationError, match=r"role 'runner', which may not append 'protocol"):
        log.append("protocol.locked", {}, key=runner)
    with pytest.raises(AuthorizationError, match=r"may not append 'key\.added'"):
        log.add_key(SigningKey.generate("x").vkey, "owner", key=runner)
    log.append("protocol.locked", {}, key=owner)
    log.append("custom.note", {}, key=owner)
    with pytest.raises(AuthorizationError, match=r"may not append 'custom\.note'"):
        log.append("custom.note", {}, key=runner)


def test_unknown_key_is_refused(log: Ledger) -> None:
    stranger = SigningKey.generate("stranger")
    with pytest.raises(AuthorizationError, match="not registered"):
        log.append("trial.requested", {}, key=stranger)
    impostor = SigningKey.generate("example.org/runner")  # same name, different key
    with pytest.raises(AuthorizationError, match="not registered"):
        log.append("trial.requested", {}, key=impostor)
    assert log.size == 2


def test_revoked_key_is_refused(log: Ledger, owner: SigningKey, runner: SigningKey) -> None:
    log.append("trial.requested", {}, key=runner)
    event = log.revoke_key(runner.actor, key=owner, reason="laptop lost")
    with pytest.raises(AuthorizationError, match=f"revoked at seq {event.seq}"):
        log.append("trial.requested", {}, key=runner)
    with pytest.raises(AuthorizationError, match="already revoked"):
        log.revoke_key(runner.actor, key=owner)
    with pytest.raises(AuthorizationError, match="already registered"):
        log.add_key(runner.vkey, "runner", key=owner)


def test_last_owner_cannot_be_revoked(log: Ledger, owner: SigningKey) -> None:
    with pytest.raises(AuthorizationError, match="last active owner"):
        log.revoke_key(owner.actor, key=owner)
    second = fixed_key("example.org/owner2")
    log.add_key(second.vkey, "owner", key=owner)
    log.revoke_key(owner.actor, key=owner, reason="rotation")  # a key may sign its own revocation
    with pytest.raises(AuthorizationError, match="revoked"):
        log.append("custom.note", {}, key=owner)
    log.append("custom.note", {}, key=second)


@pytest.mark.parametrize(
    ("kind", "body", "message"),
    [
        ("key.added", {"vkey": "nonsense", "role": "runner"}, "malformed vkey"),
        ("key.added", {"vkey": "x", "role": "boss"}, "role 'boss'"),
        ("key.added", {"vkey": "x"}, "exactly"),
        ("key.revoked", {"actor": "nobody+00000000", "reason": ""}, "not registered"),
        ("ledger.genesis", {}, "only be the first event"),
        ("Bad.Kind", {}, "kind 'Bad.Kind' is invalid"),
        ("trial.scored", {"seed": 2**64}, "write it as a decimal string"),
    ],
)
def test_bad_appends_change_nothing(
    log: Ledger, owner: SigningKey, kind: str, body: dict[str, object], message: str
) -> None:
    before = (log.size, log.root())
    with pytest.raises(LedgerError, match=message):
        log.append(kind, body, key=owner)
    assert (log.size, log.root()) == before


def test_append_many_is_all_or_nothing(log: Ledger, runner: SigningKey) -> None:
    specs = [EventSpec("trial.requested", {"i": i}) for i in range(10)]
    specs.append(EventSpec("trial.requested", {"bad": 2**60}))
    with pytest.raises(CanonicalError):
        log.append_many(specs, key=runner)
    assert log.size == 2
    assert len(log.append_many(specs[:10], key=runner)) == 10
    assert log.size == 12


def test_envelope_size_limit(log: Ledger, owner: SigningKey) -> None:
    with pytest.raises(FormatError, match="move large content into a blob"):
        log.append("custom.note", {"text": "x" * 1_100_000}, key=owner)


def test_store_proofs_match_in_memory_tree(log: Ledger, runner: SigningKey) -> None:
    log.append_many([("trial.requested", {"i": i}) for i in range(38)], key=runner)
    hashes = [e.leaf_hash for e in log.events()]
    reference = list_range_hash(hashes)
    for size in range(1, log.size + 1):
        assert log.root(size) == root_from_leaf_hashes(hashes[:size])
        for index in range(size):
            proof = log.inclusion_proof(index, size)
            assert list(proof.path) == inclusion_proof(index, size, reference)
            assert proof.verify()
        for old in range(1, size + 1):
            cproof = log.consistency_proof(old, size)
            assert list(cproof.path) == consistency_proof(old, size, reference)
            assert cproof.verify()


def test_tree_rows_are_incremental(log: Ledger, runner: SigningKey) -> None:
    log.append_many([("trial.requested", {})] * 62, key=runner)  # 64 leaves
    rows = log.db.execute("SELECT COUNT(*) FROM tree").fetchone()[0]
    assert rows == 32 + 16 + 8 + 4 + 2 + 1  # every interior node of a perfect 64-leaf tree
    assert log.db.execute("SELECT COUNT(*) FROM tree WHERE level = 6").fetchone()[0] == 1


def test_proof_requests_out_of_range(log: Ledger) -> None:
    with pytest.raises(ProofError, match="outside the log"):
        log.inclusion_proof(0, 99)
    with pytest.raises(ProofError, match="outside a tree of size 2"):
        log.inclusion_proof(5)
    with pytest.raises(ProofError, match="0 < old <= new"):
        log.consistency_proof(0)


def test_checkpoint_is_stored_and_verifies(log: Ledger, owner: SigningKey) -> None:
    note = log.sign_checkpoint(owner)
    cp, _ = open_checkpoint(note, [owner.verifier])
    assert (cp.origin, cp.size, cp.root) == ("example.org/test", 2, log.root())
    stored = log.checkpoints()
    assert [(c.size, c.root, c.note) for c in stored] == [(2, log.root(), note)]


def test_checkpoint_by_unregistered_or_revoked_key(
    log: Ledger, owner: SigningKey, runner: SigningKey
) -> None:
    with pytest.raises(AuthorizationError, match="not registered"):
        log.sign_checkpoint(SigningKey.generate("x"))
    log.revoke_key(runner.actor, key=owner)
    log.append("custom.note", {}, key=owner)
    with pytest.raises(AuthorizationError, match="not valid at tree size"):
        log.sign_checkpoint(runner)


def test_published_checkpoint_consistency_and_rollback(
    ledger_path: Path, log: Ledger, owner: SigningKey, runner: SigningKey, tmp_path: Path
) -> None:
    log.append_many([("trial.requested", {})] * 3, key=runner)
    old_copy = tmp_path / "old.db"
    log.db.execute("PRAGMA wal_checkpoint(FULL)")
    old_copy.write_bytes(ledger_path.read_bytes())
    log.append_many([("trial.requested", {})] * 3, key=runner)
    published = log.sign_checkpoint(owner)
    log.append("trial.requested", {}, key=runner)
    assert log.check_published(published).verify()
    expected = "rolled back: checkpoint has size 8 but the log has 5"
    with Ledger.open(old_copy) as old, pytest.raises(ProofError, match=expected):
        old.check_published(published)
    foreign = Ledger.create(tmp_path / "f.db", origin="example.org/other", key=owner)
    with pytest.raises(NoteError, match="origin"):
        foreign.check_published(published)
    foreign.close()


def test_create_refuses_existing_file(log: Ledger, ledger_path: Path, owner: SigningKey) -> None:
    with pytest.raises(StoreError, match="already exists"):
        Ledger.create(ledger_path, origin="x.org/y", key=owner)


@pytest.mark.parametrize("origin", ["", "has space", "a+b"])
def test_bad_origin(tmp_path: Path, owner: SigningKey, origin: str) -> None:
    with pytest.raises(FormatError, match="origin"):
        Ledger.create(tmp_path / "x.db", origin=origin, key=owner)
    assert not (tmp_path / "x.db").exists()


def test_open_missing_file(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no such ledger file"):
        Ledger.open(tmp_path / "missing.db")


def test_open_text_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello, this is not a database\n" * 100)
    with pytest.raises(NotALedgerError, match="is not a PROMPT ledger"):
        Ledger.open(path)


def test_open_other_sqlite_database(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    with pytest.raises(NotALedgerError, match="application id 0x0"):
        Ledger.open(path)


def test_open_newer_schema(log: Ledger, ledger_path: Path) -> None:
    log.db.execute("PRAGMA user_version = 2")
    with pytest.raises(SchemaVersionError, match="schema version 2, newer than 1"):
        Ledger.open(ledger_path)


def test_corrupted_database_is_a_store_error(
    log: Ledger, ledger_path: Path, runner: SigningKey
) -> None:
    log.append_many([("trial.requested", {"pad": "x" * 500})] * 200, key=runner)
    log.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    log.close()
    data = bytearray(ledger_path.read_bytes())
    for offset in range(4096 * 3, len(data), 4096):
        data[offset : offset + 64] = b"\xff" * 64
    ledger_path.write_bytes(bytes(data))
    with pytest.raises(LedgerError, match=str(ledger_path.name)), Ledger.open(ledger_path) as b:
        list(b.events())


def test_a_zeroed_page_is_found_before_anything_is_appended(
    log: Ledger, ledger_path: Path, runner: SigningKey
) -> None:
    """Issue 32: one page of the event table zeroed (a torn write, a bad sector) is found by
    ``check_integrity`` (``ledger run`` calls it before its session), not appended past."""
    log.append_many([("trial.requested", {"pad": "x" * 500})] * 200, key=runner)
    log.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = log.size
    log.close()
    data = bytearray(ledger_path.read_bytes())
    page = len(data) // 4096 // 2  # a page in the middle of the file
    data[page * 4096 : (page + 1) * 4096] = bytes(4096)
    ledger_path.write_bytes(bytes(data))
    damaged = Ledger.open(ledger_path)
    with damaged, pytest.raises(StoreError, match=r"the file is damaged \(SQLite quick_check: "):
        damaged.check_integrity()
    with Ledger.open(ledger_path, readonly=True) as after:
        assert after.size <= size


def test_a_ledger_that_lost_its_last_events_is_refused_saying_so(
    log: Ledger, ledger_path: Path, owner: SigningKey, runner: SigningKey
) -> None:
    log.append_many([("trial.requested", {"n": i}) for i in range(10)], key=runner)
    log.sign_checkpoint(owner)
    size = log.size
    log.check_integrity()  # a whole ledger passes
    log.close()
    with sqlite3.connect(ledger_path) as conn:  # the last three events lost, as in an old copy
        conn.execute("DELETE FROM events WHERE seq >= ?", (size - 3,))
    with Ledger.open(ledger_path) as short, pytest.raises(StoreError) as info:
        short.check_integrity()
    assert f"a stored checkpoint has tree size {size}, but the log has {size - 3} events" in str(
        info.value
    )
    assert "the last 3 event(s) are missing" in str(info.value)


def test_fixed_key_and_clock_give_identical_bytes(tmp_path: Path) -> None:
    def build(path: Path) -> bytes:
        key = fixed_key("example.org/owner")
        with Ledger.create(path, origin="example.org/d", key=key, clock=fixed_clock()) as led:
            led.append_many([("custom.note", {"i": i}) for i in range(5)], key=key)
            return b"".join(e.envelope + e.signature for e in led.events())

    assert build(tmp_path / "a.db") == build(tmp_path / "b.db")


def test_self_revocation_inside_a_batch_stops_the_rest(log: Ledger, owner: SigningKey) -> None:
    second = fixed_key("example.org/owner2")
    log.add_key(second.vkey, "owner", key=owner)
    specs = [
        EventSpec("custom.note", {}),
        EventSpec("key.revoked", {"actor": owner.actor, "reason": "rotation"}),
        EventSpec("custom.note", {}),
    ]
    with pytest.raises(AuthorizationError, match="revoked"):
        log.append_many(specs, key=owner)
    assert log.size == 3
    log.append_many(specs[:2], key=owner)
    assert log.size == 5


def test_times_are_utc_with_microseconds(tmp_path: Path, owner: SigningKey) -> None:
    from datetime import datetime, timedelta, timezone

    local = datetime(2026, 3, 1, 1, 30, 0, 7, tzinfo=timezone(timedelta(hours=2)))
    with Ledger.create(tmp_path / "t.db", origin="x.org/t", key=owner, clock=lambda: local) as led:
        assert led.get(0).time == "2026-02-28T23:30:00.000007Z"


# ---------------------------------------------------------------------- Ledger.transaction


def test_transaction_commits_at_the_end_of_the_block(
    log: Ledger, ledger_path: Path, owner: SigningKey, runner: SigningKey
) -> None:
    with log.transaction():
        event = log.append("trial.requested", {"n": 1}, key=runner)
        log.sign_checkpoint(owner)
        assert log.size == 3 and log.get(2) == event  # this connection sees its own writes
        with Ledger.open(ledger_path, readonly=True) as other:
            assert other.size == 2 and other.checkpoints() == []  # nobody else does yet
    with Ledger.open(ledger_path, readonly=True) as other:
        assert other.size == 3 and [c.size for c in other.checkpoints()] == [3]


def test_transaction_rolls_everything_back_on_an_exception(
    log: Ledger, owner: SigningKey, runner: SigningKey
) -> None:
    root = log.root()
    with pytest.raises(OSError, match="disk full"), log.transaction():
        log.append("trial.requested", {"n": 1}, key=runner, blobs={"request": b"body"})
        log.sign_checkpoint(owner)
        raise OSError("disk full")
    assert log.size == 2 and log.root() == root and log.checkpoints() == []
    assert not log.has_blob("230d8358dc8e8890b4c58deeb62912ee2f20357ae92a5cc861b98e68fe31acb5")
    later = log.append("trial.requested", {"n": 2}, key=runner)  # the head is not stale
    assert later.seq == 2 and later.prev == log.get(1).leaf_hash.hex()


def test_a_failed_append_inside_a_transaction_undoes_only_itself(
    log: Ledger, owner: SigningKey, runner: SigningKey
) -> None:
    with log.transaction():
        log.append("trial.requested", {"n": 1}, key=runner)
        with pytest.raises(AuthorizationError, match="may not append"):
            log.append_many([("trial.requested", {"n": 2}), ("key.added", {})], key=runner)
        log.append("trial.requested", {"n": 3}, key=runner)
    assert [e.body.get("n") for e in log.events("trial.requested")] == [1, 3]
    assert [e.seq for e in log.events()] == [0, 1, 2, 3]


def test_transactions_do_not_nest_and_need_a_writable_ledger(
    log: Ledger, ledger_path: Path
) -> None:
    with log.transaction(), pytest.raises(StoreError, match="already open"), log.transaction():
        pass
    reader = Ledger.open(ledger_path, readonly=True)
    with reader, pytest.raises(StoreError, match="opened read-only"), reader.transaction():
        pass


def test_ledger_run_refuses_a_ledger_that_lost_its_last_events(
    tmp_path: Path, study_template: Path, ledger_home: Path
) -> None:
    """Issue 32: ``ledger run`` checks the file before its session; nothing is appended."""
    from click.testing import CliRunner
    from helpers import make_study

    from ledger.cli import main

    root = make_study(tmp_path / "study", replicates=1, template=study_template)
    db = root / "ledger.db"
    with Ledger.open(db, readonly=True) as before:
        size = before.size
    with sqlite3.connect(db) as conn:  # the lock's last events lost: an old or truncated copy
        conn.execute("DELETE FROM events WHERE seq >= ?", (size - 2,))
    result = CliRunner().invoke(main, ["run", str(root), "--backend", "simulated"])
    assert result.exit_code != 0, result.output
    assert "the last 2 event(s) are missing" in result.output and "ledger.db" in result.output
    with Ledger.open(db, readonly=True) as after:
        assert after.size == size - 2


def test_a_second_signing_of_one_size_keeps_one_checkpoint(tmp_path: Path) -> None:
    """Two writers closing sessions at once sign the same size: one row, every signature."""
    owner = fixed_key("example.org/owner")
    other = fixed_key("example.org/other-owner")
    with Ledger.create(tmp_path / "l.db", origin="example.org/l", key=owner) as log:
        log.add_key(other.verifier, "owner", key=owner)
        log.append("artifact.locked", {"n": 1}, key=owner)
        first = log.sign_checkpoint(owner)
        assert log.sign_checkpoint(owner) == first  # the same note, not a second row
        both = log.sign_checkpoint(other)
        assert both.startswith(first) and both.count("\u2014 ") == 2
        assert [(c.size, c.note) for c in log.checkpoints()] == [(3, both)]


def test_large_blobs_are_written_in_chunks_with_the_same_bytes(
    log: Ledger, runner: SigningKey
) -> None:
    from ledger._store import STREAMED_BLOB_BYTES

    sizes = (STREAMED_BLOB_BYTES, 2 * STREAMED_BLOB_BYTES + 12_345, STREAMED_BLOB_BYTES - 1)
    blobs = {
        f"b{i}": bytes(range(i + 1, i + 252)) * (n // 251) + b"x" * (n % 251)
        for i, n in enumerate(sizes)
    }
    specs = [
        EventSpec("trial.requested", {"i": 0}, {"small": b"before"}),
        EventSpec("trial.requested", {"i": 1}, blobs),
        EventSpec("trial.requested", {"i": 2}, {"small": b"after", "again": blobs["b1"]}),
    ]
    events = log.append_many(specs, key=runner)
    for name, data in blobs.items():
        assert len(data) == sizes[int(name[1:])]
        assert log.blob(events[1].blobs[name]) == data
    assert log.blob(events[0].blobs["small"]) == b"before"
    assert events[2].blobs["again"] == events[1].blobs["b1"]
    count = log.db.execute("SELECT COUNT(*) FROM blobs").fetchone()[0]
    assert count == 5  # before, b0, b1, b2, after: b1 once
    big = bytes(reversed(blobs["b1"]))
    with pytest.raises(CanonicalError):  # all or nothing: the large blob is rolled back too
        log.append_many(
            [
                EventSpec("trial.requested", {}, {"big": big}),
                EventSpec("trial.requested", {"bad": 2**60}),
            ],
            key=runner,
        )
    assert log.db.execute("SELECT COUNT(*) FROM blobs").fetchone()[0] == 5


_BIG_BLOB_CHILD = """
import resource, sys
from pathlib import Path
from helpers import fixed_key
from ledger import Ledger
key = fixed_key("owner")
data = bytes(range(256)) * (64 * 4096)  # 64 MiB
with Ledger.create(Path(sys.argv[1]), origin="example.org/big", key=key) as log:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    log.append("artifact.locked", {"path": "big"}, key=key, blobs={"big": data})
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(grown // 1024)
"""


def test_a_large_blob_is_appended_without_copies_of_it(tmp_path: Path) -> None:
    helpers = Path(__file__).resolve().parents[1] / "support"
    out = subprocess.run(
        [sys.executable, "-c", _BIG_BLOB_CHILD, str(tmp_path / "big.db")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(helpers)},
    )
    assert int(out.stdout.strip()) < 32  # MiB beyond the 64 MiB blob; bound, SQLite made two copies
