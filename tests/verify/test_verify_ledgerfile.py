"""verify_ledger_file on small ledgers built by hand from docs/ledger-format.md (no ledger/)."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from helpers import science_skipped
from locations import REPO, TESTS_DIR

import verify._ledgerfile
from verify import (
    CHECK_NAMES,
    Report,
    Status,
    VerificationError,
    compute_key_id,
    require_valid,
    verify_archive,
    verify_ledger_file,
)

VECTORS = TESTS_DIR / "vectors" / "ledger-v1.json"
ORIGIN = "example.org/ledger"
SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE events (
  seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, actor TEXT NOT NULL, time TEXT NOT NULL,
  envelope BLOB NOT NULL, signature BLOB NOT NULL, leaf_hash BLOB NOT NULL);
CREATE TABLE blobs (sha256 TEXT PRIMARY KEY, size INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE checkpoints (
  id INTEGER PRIMARY KEY, size INTEGER NOT NULL, root BLOB NOT NULL,
  note TEXT NOT NULL, created TEXT NOT NULL);
CREATE TABLE keys (
  actor TEXT PRIMARY KEY, name TEXT NOT NULL, vkey TEXT NOT NULL, role TEXT NOT NULL,
  added_seq INTEGER NOT NULL, revoked_seq INTEGER);
CREATE TABLE tree (
  level INTEGER NOT NULL, idx INTEGER NOT NULL, hash BLOB NOT NULL,
  PRIMARY KEY (level, idx)) WITHOUT ROWID;
"""


# ------------------------------------------------------------------------------- a tiny writer


@dataclass(frozen=True)
class Key:
    name: str
    priv: Ed25519PrivateKey

    @property
    def pub(self) -> bytes:
        return self.priv.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    @property
    def key_id(self) -> int:
        return compute_key_id(self.name, b"\x01" + self.pub)

    @property
    def actor(self) -> str:
        return f"{self.name}+{self.key_id:08x}"

    @property
    def vkey(self) -> str:
        raw = b"\x01" + self.pub
        return f"{self.actor}+{base64.b64encode(raw).decode()}"

    def sign_note(self, text: str) -> str:
        sig = self.key_id.to_bytes(4, "big") + self.priv.sign(text.encode())
        return f"\u2014 {self.name} {base64.b64encode(sig).decode()}\n"


def make_key(name: str) -> Key:
    seed = hashlib.sha256(f"verify test key {name}".encode()).digest()
    return Key(name, Ed25519PrivateKey.from_private_bytes(seed))


OWNER = make_key("example.org/owner")
RUNNER = make_key("example.org/runner")
EVIL = make_key("evil")


@dataclass
class Ev:
    kind: str
    body: dict[str, Any]
    key: Key = OWNER
    blobs: dict[str, bytes] = field(default_factory=dict)
    time: str | None = None


def leaf(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def mth(hashes: list[bytes]) -> bytes:
    if not hashes:
        return hashlib.sha256(b"").digest()
    if len(hashes) == 1:
        return hashes[0]
    k = 1 << ((len(hashes) - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + mth(hashes[:k]) + mth(hashes[k:])).digest()


def checkpoint_note(size: int, root: bytes, *signers: Key, origin: str = ORIGIN) -> str:
    text = f"{origin}\n{size}\n{base64.b64encode(root).decode()}\n"
    return text + "\n" + "".join(k.sign_note(text) for k in signers)


@dataclass
class Built:
    path: Path
    envelopes: list[bytes]
    leaves: list[bytes]

    def root(self, size: int | None = None) -> bytes:
        return mth(self.leaves[: len(self.leaves) if size is None else size])

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, isolation_level=None)

    def execute(self, sql: str, *args: Any) -> None:
        with self.db() as con:
            con.execute(sql, args)
        con.close()


def standard_events() -> list[Ev]:
    return [
        Ev("ledger.genesis", {"origin": ORIGIN, "vkey": OWNER.vkey}),
        Ev("key.added", {"vkey": RUNNER.vkey, "role": "runner"}),
        Ev("protocol.locked", {"seed": "18446744073709551615"}, blobs={"spec": b"the spec\n"}),
        Ev("trial.requested", {"trial": "A|s1|0", "n": 1}, key=RUNNER),
        Ev("trial.responded", {"trial": "A|s1|0", "latency_ms": 812.5}, key=RUNNER),
    ]


def build(
    path: Path,
    events: list[Ev] | None = None,
    *,
    checkpoint_sizes: tuple[int, ...] = (3,),
    mutate: Callable[[int, dict[str, Any]], None] | None = None,
) -> Built:
    """Write a ledger following docs/ledger-format.md §1-§7; ``mutate`` may edit envelopes."""
    events = standard_events() if events is None else events
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("PRAGMA application_id = 1347176241")
    con.execute("PRAGMA user_version = 1")
    con.executescript(SCHEMA)
    con.execute("BEGIN")
    con.executemany(
        "INSERT INTO meta VALUES (?, ?)",
        [("format", "prompt-ledger"), ("schema_version", "1"), ("origin", ORIGIN)],
    )
    prev = "0" * 64
    envelopes: list[bytes] = []
    leaves: list[bytes] = []
    keys: dict[str, list[Any]] = {}
    for seq, ev in enumerate(events):
        blob_refs = {}
        for name, data in ev.blobs.items():
            digest = hashlib.sha256(data).hexdigest()
            blob_refs[name] = digest
            con.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?, ?)", (digest, len(data), data))
        env: dict[str, Any] = {
            "v": 1,
            "seq": seq,
            "time": ev.time or f"2026-01-01T00:00:{seq:02d}.000000Z",
            "kind": ev.kind,
            "actor": ev.key.actor,
            "prev": prev,
            "body": ev.body,
            "blobs": blob_refs,
        }
        if mutate is not None:
            mutate(seq, env)
        data = rfc8785.dumps(env)
        lh = leaf(data)
        con.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
            (seq, env["kind"], env["actor"], env["time"], data, ev.key.priv.sign(data), lh),
        )
        if ev.kind in ("ledger.genesis", "key.added"):
            vkey = ev.body["vkey"]
            actor = "+".join(vkey.split("+", 2)[:2])
            role = ev.body.get("role", "owner")
            keys[actor] = [actor, actor.split("+")[0], vkey, role, seq, None]
        elif ev.kind == "key.revoked":
            keys[ev.body["actor"]][5] = seq
        envelopes.append(data)
        leaves.append(lh)
        prev = lh.hex()
    con.executemany("INSERT INTO keys VALUES (?, ?, ?, ?, ?, ?)", list(keys.values()))
    n = len(leaves)
    level = 1
    while (1 << level) <= n:
        width = 1 << level
        for idx in range(n // width):
            h = mth(leaves[idx * width : (idx + 1) * width])
            con.execute("INSERT INTO tree VALUES (?, ?, ?)", (level, idx, h))
        level += 1
    for size in checkpoint_sizes:
        root = mth(leaves[:size])
        con.execute(
            "INSERT INTO checkpoints (size, root, note, created) VALUES (?, ?, ?, ?)",
            (size, root, checkpoint_note(size, root, OWNER), "2026-01-01T00:01:00.000000Z"),
        )
    con.execute("COMMIT")
    con.close()
    return Built(path, envelopes, leaves)


def statuses(report: Report) -> dict[str, str]:
    return {c.name: c.status.value for c in report.checks}


@pytest.fixture
def built(tmp_path: Path) -> Built:
    return build(tmp_path / "ledger.db")


# ------------------------------------------------------------------------------- valid ledgers


def test_valid_ledger_passes_every_check(built: Built) -> None:
    report = verify_ledger_file(built.path)
    assert report.ok and bool(report)
    assert report.size == 5
    assert report.root == built.root().hex()
    assert report.origin == ORIGIN
    assert [c.name for c in report.checks] == [
        n for n in CHECK_NAMES if n != "published-checkpoints"
    ]
    assert statuses(report) == {
        name: ("WARN" if name == "trust" else "PASS") for name in statuses(report)
    }
    trust = report.get("trust")
    assert trust is not None
    assert trust.reason == "keys are self-asserted: signatures prove integrity, not authorship"
    assert report.first_failure is None and report.failures == []
    assert json.loads(json.dumps(report.to_dict()))["ok"] is True


def test_trusted_genesis_key_and_published_checkpoint(built: Built, tmp_path: Path) -> None:
    cp = tmp_path / "cp.txt"
    cp.write_text(checkpoint_note(2, built.root(2), OWNER), encoding="utf-8")
    report = verify_ledger_file(built.path, trusted_keys=[OWNER.vkey + "\n"], checkpoints=[cp])
    assert report.ok, report.failures
    assert statuses(report)["trust"] == "PASS"
    assert statuses(report)["published-checkpoints"] == "PASS"
    assert [c.name for c in report.checks] == list(CHECK_NAMES)


def test_vector_ledger_from_the_spec(tmp_path: Path) -> None:
    """Load tests/vectors/ledger-v1.json into the §7 schema and verify it."""
    vec = json.loads(VECTORS.read_text(encoding="utf-8"))
    path = tmp_path / "vector.db"
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("PRAGMA application_id = 1347176241")
    con.execute("PRAGMA user_version = 1")
    con.executescript(SCHEMA)
    con.executemany(
        "INSERT INTO meta VALUES (?, ?)",
        [("format", "prompt-ledger"), ("schema_version", "1"), ("origin", vec["origin"])],
    )
    leaves = []
    keys: dict[str, list[Any]] = {}
    for item in vec["events"]:
        data = item["envelope"].encode()
        env = json.loads(data)
        lh = leaf(data)
        assert lh.hex() == item["leaf_hash"]
        leaves.append(lh)
        con.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                env["seq"],
                env["kind"],
                env["actor"],
                env["time"],
                data,
                base64.b64decode(item["signature"]),
                lh,
            ),
        )
        body = env["body"]
        if env["kind"] in ("ledger.genesis", "key.added"):
            actor = "+".join(body["vkey"].split("+", 2)[:2])
            keys[actor] = [
                actor,
                actor.split("+")[0],
                body["vkey"],
                body.get("role", "owner"),
                env["seq"],
                None,
            ]
        elif env["kind"] == "key.revoked":
            keys[body["actor"]][5] = env["seq"]
    con.executemany("INSERT INTO keys VALUES (?, ?, ?, ?, ?, ?)", list(keys.values()))
    for digest, b64 in vec["blobs"].items():
        data = base64.b64decode(b64)
        con.execute("INSERT INTO blobs VALUES (?, ?, ?)", (digest, len(data), data))
    n = len(leaves)
    for level in range(1, n.bit_length()):
        for idx in range(n >> level):
            node = mth(leaves[idx << level : (idx + 1) << level])
            con.execute("INSERT INTO tree VALUES (?, ?, ?)", (level, idx, node))
    for note in vec["checkpoints"]:
        size = int(note.split("\n")[1])
        root = base64.b64decode(note.split("\n")[2])
        con.execute(
            "INSERT INTO checkpoints (size, root, note, created) VALUES (?, ?, ?, ?)",
            (size, root, note, "2026-01-01T00:00:01.000000Z"),
        )
    con.close()
    assert [mth(leaves[:i]).hex() for i in range(1, n + 1)] == vec["roots_by_size"]
    owner_vkey = vec["keys"]["example.org/owner"]["vkey"]
    report = verify_ledger_file(path, trusted_keys=[owner_vkey])
    assert report.ok, report.failures
    assert report.root == vec["roots_by_size"][-1]
    assert statuses(report)["trust"] == "PASS"
    cp = tmp_path / "registration.txt"
    cp.write_text(vec["checkpoints"][0], encoding="utf-8")
    assert verify_ledger_file(path, checkpoints=[cp]).ok


def test_require_valid_returns_the_report(built: Built) -> None:
    assert require_valid(built.path).ok


# ------------------------------------------------------------------------------- bad files


def test_missing_file(tmp_path: Path) -> None:
    report = verify_ledger_file(tmp_path / "nope.db")
    assert not report.ok
    assert [c.name for c in report.checks] == ["file"]
    assert report.checks[0].status is Status.FAIL
    assert "no such file" in report.checks[0].reason
    with pytest.raises(VerificationError, match="file check failed: no such file"):
        require_valid(tmp_path / "nope.db")


def test_not_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database, just text " * 100)
    report = verify_ledger_file(path)
    assert statuses(report) == {"file": "FAIL"}
    assert "is not a SQLite database" in report.checks[0].reason


def test_other_sqlite_file_is_not_a_ledger(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    report = verify_ledger_file(path)
    assert statuses(report) == {"file": "FAIL"}
    assert "is not a PROMPT ledger: application_id is 0" in report.checks[0].reason


def test_newer_schema_is_refused(built: Built) -> None:
    built.execute("PRAGMA user_version = 2")
    report = verify_ledger_file(built.path)
    assert statuses(report) == {"file": "FAIL"}
    assert "schema version 2, newer than this verifier knows (1)" in report.checks[0].reason


def test_missing_table_is_refused(built: Built) -> None:
    built.execute("DROP TABLE tree")
    report = verify_ledger_file(built.path)
    assert statuses(report) == {"file": "FAIL"}
    assert "has no table tree" in report.checks[0].reason


def test_empty_log(tmp_path: Path) -> None:
    b = build(tmp_path / "empty.db", [], checkpoint_sizes=())
    report = verify_ledger_file(b.path)
    assert report.size == 0
    failed = report.get("sequence")
    assert failed is not None and failed.status is Status.FAIL
    assert failed.reason == "the log has no events (no ledger.genesis)"


def test_single_vkey_and_path_are_accepted(built: Built, tmp_path: Path) -> None:
    cp = tmp_path / "cp.txt"
    cp.write_text(checkpoint_note(5, built.root(), OWNER), encoding="utf-8")
    report = verify_ledger_file(built.path, trusted_keys=OWNER.vkey, checkpoints=cp)  # type: ignore[arg-type]
    assert report.ok and statuses(report)["published-checkpoints"] == "PASS"


def test_directory_is_refused(tmp_path: Path) -> None:
    report = verify_ledger_file(tmp_path)
    assert "is a directory" in report.checks[0].reason


def test_verifier_never_writes(built: Built) -> None:
    before = built.path.read_bytes()
    verify_ledger_file(built.path, jobs=1)
    assert built.path.read_bytes() == before


# ------------------------------------------------------------------------------- tampering


def _resign(built: Built, seq: int, key: Key, envelope: bytes) -> None:
    built.execute(
        "UPDATE events SET envelope = ?, signature = ?, leaf_hash = ? WHERE seq = ?",
        envelope,
        key.priv.sign(envelope),
        leaf(envelope),
        seq,
    )


def t_edit_body(b: Built) -> None:
    env = json.loads(b.envelopes[3])
    env["body"]["n"] = 2
    b.execute("UPDATE events SET envelope = ? WHERE seq = 3", rfc8785.dumps(env))


def t_leaf_hash(b: Built) -> None:
    b.execute("UPDATE events SET leaf_hash = ? WHERE seq = 2", b"\x00" * 32)


def t_signature(b: Built) -> None:
    b.execute("UPDATE events SET signature = ? WHERE seq = 4", OWNER.priv.sign(b"x"))


def t_short_signature(b: Built) -> None:
    b.execute("UPDATE events SET signature = ? WHERE seq = 4", b"\x00" * 10)


def t_delete_event(b: Built) -> None:
    b.execute("DELETE FROM events WHERE seq = 2")


def t_truncate(b: Built) -> None:
    b.execute("DELETE FROM events WHERE seq = 4")


def t_kind_column(b: Built) -> None:
    b.execute("UPDATE events SET kind = 'trial.failed' WHERE seq = 3")


def t_non_canonical(b: Built) -> None:
    data = b.envelopes[3].replace(b'"n":1', b'"n": 1')
    _resign(b, 3, RUNNER, data)


def t_resigned_edit(b: Built) -> None:
    env = json.loads(b.envelopes[3])
    env["body"]["n"] = 2
    _resign(b, 3, RUNNER, rfc8785.dumps(env))


def t_tree_node(b: Built) -> None:
    b.execute("UPDATE tree SET hash = ? WHERE level = 1 AND idx = 1", b"\x11" * 32)


def t_tree_missing(b: Built) -> None:
    b.execute("DELETE FROM tree WHERE level = 2 AND idx = 0")


def t_tree_extra(b: Built) -> None:
    b.execute("INSERT INTO tree VALUES (1, 2, ?)", b"\x22" * 32)


def t_keys_row(b: Built) -> None:
    b.execute("UPDATE keys SET role = 'owner' WHERE name = 'example.org/runner'")


def t_keys_extra(b: Built) -> None:
    b.execute("INSERT INTO keys VALUES ('x+00000000', 'x', 'x', 'owner', 9, NULL)")


def t_blob_data(b: Built) -> None:
    b.execute("UPDATE blobs SET data = ?", b"the spec, edited\n")


def t_blob_missing(b: Built) -> None:
    b.execute("DELETE FROM blobs")


def t_checkpoint_root(b: Built) -> None:
    note = checkpoint_note(3, b.root(2), OWNER)
    b.execute("UPDATE checkpoints SET note = ?, root = ?", note, b.root(2))


def t_checkpoint_size(b: Built) -> None:
    note = checkpoint_note(120, b.root(5), OWNER)
    b.execute("UPDATE checkpoints SET note = ?, size = 120", note)


def t_checkpoint_signature(b: Built) -> None:
    note = checkpoint_note(3, b.root(3), OWNER).replace(
        "\u2014 example.org/owner ", "\u2014 example.org/owner A"
    )
    b.execute("UPDATE checkpoints SET note = ?", note)


def t_checkpoint_runner_too_early(b: Built) -> None:
    # the runner key is registered at seq 1, so it is valid for events >= 2, i.e. size >= 3;
    # size 2 would need a key valid for event 1
    note = checkpoint_note(2, b.root(2), RUNNER)
    b.execute("UPDATE checkpoints SET note = ?, size = 2, root = ?", note, b.root(2))


def t_meta_origin(b: Built) -> None:
    b.execute("UPDATE meta SET value = 'other' WHERE key = 'origin'")


def t_application_id(b: Built) -> None:
    b.execute("PRAGMA application_id = 7")


TAMPERS = [
    ("edit a body", t_edit_body, "leaf-hashes", 3, "seq 3: stored leaf_hash differs"),
    ("stored leaf hash", t_leaf_hash, "leaf-hashes", 2, "seq 2: stored leaf_hash differs"),
    (
        "replace a signature",
        t_signature,
        "signatures",
        4,
        "seq 4: signature does not verify under key example.org/runner+",
    ),
    ("short signature", t_short_signature, "signatures", 4, "seq 4: signature is not a 64-byte"),
    (
        "delete an event",
        t_delete_event,
        "sequence",
        2,
        "seq 2 is missing (the row after seq 1 has seq 3)",
    ),
    ("kind column", t_kind_column, "envelopes", 3, "seq 3: row kind 'trial.failed' differs"),
    ("non-canonical", t_non_canonical, "envelopes", 3, "seq 3: envelope bytes are not in RFC 8785"),
    (
        "re-signed edit",
        t_resigned_edit,
        "chain",
        4,
        "seq 4: prev does not match leaf hash of seq 3",
    ),
    ("tree node", t_tree_node, "tree", None, "tree node (level 1, index 1) over seqs 2..3 differs"),
    ("tree missing", t_tree_missing, "tree", None, "tree lacks node (level 2, index 0)"),
    (
        "tree extra",
        t_tree_extra,
        "tree",
        None,
        "tree has node (level 1, index 2), which is not a complete subtree",
    ),
    ("keys row", t_keys_row, "keys", 1, "keys table row for example.org/runner+"),
    ("keys extra", t_keys_extra, "keys", None, "keys table has a row for 'x+00000000'"),
    ("blob data", t_blob_data, "blobs", 2, "does not hash to its address"),
    ("blob missing", t_blob_missing, "blobs", 2, "seq 2: blob 'spec' ("),
    (
        "checkpoint root",
        t_checkpoint_root,
        "checkpoints",
        None,
        "checkpoint 1 (size 3): root differs from the recomputed root at size 3",
    ),
    (
        "checkpoint size",
        t_checkpoint_size,
        "checkpoints",
        5,
        "checkpoint 1 (size 120): size exceeds log size 5",
    ),
    (
        "checkpoint signature",
        t_checkpoint_signature,
        "checkpoints",
        None,
        "checkpoint 1 (size 3): malformed note",
    ),
    (
        "checkpoint signer",
        t_checkpoint_runner_too_early,
        "checkpoints",
        None,
        "not signed by a trusted key or by a ledger key valid at size 2",
    ),
    ("meta origin", t_meta_origin, "file", None, "meta origin 'other' differs"),
]


@pytest.mark.parametrize(
    ("tamper", "check", "seq", "message"),
    [pytest.param(*t[1:], id=t[0]) for t in TAMPERS],
)
def test_tamper_is_caught(
    built: Built,
    tamper: Callable[[Built], None],
    check: str,
    seq: int | None,
    message: str,
) -> None:
    tamper(built)
    report = verify_ledger_file(built.path)
    assert not report.ok
    failed = report.get(check)
    assert failed is not None and failed.status is Status.FAIL, statuses(report)
    assert message in failed.reason
    assert failed.seq == seq
    with pytest.raises(VerificationError, match=r"check failed: "):
        require_valid(built.path)


def test_truncation_is_caught_by_the_stored_checkpoint(tmp_path: Path) -> None:
    b = build(tmp_path / "l.db", checkpoint_sizes=(5,))
    t_truncate(b)
    report = verify_ledger_file(b.path)
    failure = report.get("checkpoints")
    assert failure is not None and failure.status is Status.FAIL
    assert failure.reason.startswith("checkpoint 1 (size 5): size exceeds log size 4")
    assert failure.seq == 4


def test_application_id_change_stops_everything(built: Built) -> None:
    t_application_id(built)
    report = verify_ledger_file(built.path)
    assert statuses(report) == {"file": "FAIL"}
    assert "not a PROMPT ledger: application_id is 7" in report.checks[0].reason


def test_unreferenced_blob_warns(built: Built) -> None:
    data = b"stray"
    built.execute(
        "INSERT INTO blobs VALUES (?, ?, ?)", hashlib.sha256(data).hexdigest(), len(data), data
    )
    report = verify_ledger_file(built.path)
    assert report.ok
    blobs = report.get("blobs")
    assert blobs is not None and blobs.status is Status.WARN
    assert "1 stored blob(s) are referenced by no event" in blobs.reason


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (None, None),
        ("UPDATE blobs SET data = ?", "does not hash to its address"),
        ("UPDATE blobs SET size = 10", ": size column is 10, the data has 9 bytes"),
        ("UPDATE blobs SET data = CAST(data AS TEXT)", ": data is not a BLOB"),
    ],
    ids=["intact", "data", "size", "text"],
)
def test_a_blob_longer_than_a_piece_is_hashed_in_pieces(
    built: Built, monkeypatch: pytest.MonkeyPatch, tamper: str | None, message: str | None
) -> None:
    """A stored blob longer than ``BLOB_PIECE`` (an ``items.csv`` of 10^5 trials is 290 MB) is
    hashed piece by piece, never read whole, and judged exactly as one read whole."""
    read: list[int] = []

    class Counted(verify._ledgerfile._HashedBlob):
        __slots__ = ()

        def __init__(self, con: sqlite3.Connection, rowid: int) -> None:
            read.append(rowid)
            super().__init__(con, rowid)

    monkeypatch.setattr(verify._ledgerfile, "BLOB_PIECE", 4)  # the 9-byte spec: 3 pieces
    monkeypatch.setattr(verify._ledgerfile, "_HashedBlob", Counted)
    if tamper is not None:
        built.execute(tamper, *((b"the spec, edited\n",) if "?" in tamper else ()))
    blobs = verify_ledger_file(built.path).get("blobs")
    assert blobs is not None
    assert read == ([] if tamper and "TEXT" in tamper else [1])
    if message is None:
        assert blobs.status is Status.PASS
    else:
        assert blobs.status is Status.FAIL and message in blobs.reason and blobs.seq == 2


# ------------------------------------------------------------------------------- keys and roles


@pytest.mark.parametrize(
    ("events", "check", "message"),
    [
        pytest.param(
            [*standard_events()[:2], Ev("trial.requested", {"t": 1}, key=EVIL)],
            "signatures",
            f"seq 2: actor {EVIL.actor} is not a registered key",
            id="unregistered actor",
        ),
        pytest.param(
            [*standard_events()[:2], Ev("protocol.locked", {"x": 1}, key=RUNNER)],
            "signatures",
            f"seq 2: key {RUNNER.actor} has role runner, which may not append 'protocol.locked'",
            id="role may not append",
        ),
        pytest.param(
            [*standard_events()[:2], Ev("ext.custom_kind", {}, key=RUNNER)],
            "signatures",
            "may not append 'ext.custom_kind'",
            id="extension kinds are owner-only",
        ),
        pytest.param(
            [
                *standard_events()[:2],
                Ev("key.revoked", {"actor": RUNNER.actor, "reason": "done"}),
                Ev("trial.requested", {"t": 1}, key=RUNNER),
            ],
            "signatures",
            f"seq 3: key {RUNNER.actor} was revoked at seq 2",
            id="revoked key signs",
        ),
        pytest.param(
            [
                standard_events()[0],
                Ev("key.added", {"vkey": RUNNER.vkey, "role": "runner"}, key=RUNNER),
            ],
            "signatures",
            "seq 1: key example.org/runner+",
            id="key signs its own registration",
        ),
        pytest.param(
            [*standard_events()[:2], Ev("key.added", {"vkey": RUNNER.vkey, "role": "scorer"})],
            "keys",
            f"seq 2: key {RUNNER.actor} was already registered at seq 1",
            id="registered twice",
        ),
        pytest.param(
            [standard_events()[0], Ev("key.revoked", {"actor": OWNER.actor, "reason": "oops"})],
            "keys",
            "the last unrevoked owner key",
            id="last owner revoked",
        ),
        pytest.param(
            [standard_events()[0], Ev("key.added", {"vkey": RUNNER.vkey, "role": "boss"})],
            "keys",
            "seq 1: key.added role 'boss' is not one of",
            id="unknown role",
        ),
        pytest.param(
            [standard_events()[0], Ev("ledger.genesis", {"origin": ORIGIN, "vkey": OWNER.vkey})],
            "keys",
            "seq 1: ledger.genesis is only allowed at seq 0",
            id="second genesis",
        ),
        pytest.param(
            [Ev("protocol.locked", {}), *standard_events()[1:2]],
            "sequence",
            "seq 0: the first event is 'protocol.locked', not ledger.genesis",
            id="no genesis",
        ),
        pytest.param(
            [Ev("ledger.genesis", {"origin": ORIGIN, "vkey": OWNER.vkey}, key=EVIL)],
            "keys",
            f"genesis actor '{EVIL.actor}' is not the actor id {OWNER.actor}",
            id="genesis actor mismatch",
        ),
        pytest.param(
            [Ev("ledger.genesis", {"origin": "has space", "vkey": OWNER.vkey})],
            "keys",
            "genesis origin 'has space' is not 1-256 characters",
            id="bad origin",
        ),
    ],
)
def test_key_and_role_rules(tmp_path: Path, events: list[Ev], check: str, message: str) -> None:
    b = build(tmp_path / "l.db", events, checkpoint_sizes=())
    report = verify_ledger_file(b.path)
    failed = report.get(check)
    assert failed is not None and failed.status is Status.FAIL, statuses(report)
    assert message in failed.reason


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("v", 2, "seq 1: v is 2; this verifier knows only format version 1"),
        ("v", True, "seq 1: v is True"),
        ("seq", 7, "seq 1: envelope seq 7 differs from its row's seq 1"),
        ("time", "2026-02-30T00:00:00.000000Z", "is not a valid calendar date"),
        ("time", "2026-01-01T00:00:00Z", "is not of the form YYYY-MM-DDTHH:MM:SS.ffffffZ"),
        ("kind", "Trial.Requested", "kind 'Trial.Requested' is not 3-64 characters"),
        ("blobs", {"bad name": "0" * 64}, "blob name 'bad name' does not match"),
        ("extra", 1, "seq 1: envelope has unknown member 'extra'"),
    ],
)
def test_envelope_rules(tmp_path: Path, field: str, value: Any, message: str) -> None:
    def mutate(seq: int, env: dict[str, Any]) -> None:
        if seq == 1:
            env[field] = value

    b = build(tmp_path / "l.db", standard_events()[:3], checkpoint_sizes=(), mutate=mutate)
    report = verify_ledger_file(b.path)
    failed = report.get("envelopes")
    assert failed is not None and failed.status is Status.FAIL
    assert failed.reason.startswith(message) or message in failed.reason
    assert failed.seq == 1


def test_big_integer_in_body_fails_canonical_check(tmp_path: Path) -> None:
    events = [*standard_events()[:1], Ev("protocol.locked", {"seed": 1})]
    b = build(tmp_path / "l.db", events, checkpoint_sizes=())
    data = b.envelopes[1].replace(b'"seed":1', b'"seed":18446744073709551615')
    _resign(b, 1, OWNER, data)
    failed = verify_ledger_file(b.path).get("envelopes")
    assert failed is not None and failed.status is Status.FAIL
    assert "seq 1: envelope bytes are not in RFC 8785 canonical form" in failed.reason


def test_time_stepping_back_warns(tmp_path: Path) -> None:
    events = standard_events()
    events[3].time = "2025-12-31T23:59:59.000000Z"
    b = build(tmp_path / "l.db", events)
    report = verify_ledger_file(b.path)
    assert report.ok
    check = report.get("time-order")
    assert check is not None and check.status is Status.WARN and check.seq == 3
    assert "seq 3: time 2025-12-31T23:59:59.000000Z is earlier than seq 2's" in check.reason


# ------------------------------------------------------------------------ published checkpoints


def test_published_checkpoint_rolled_back(built: Built, tmp_path: Path) -> None:
    longer = build(tmp_path / "longer.db", [*standard_events(), Ev("run.stopped", {}, key=RUNNER)])
    cp = tmp_path / "cp.txt"
    cp.write_text(checkpoint_note(6, longer.root(), OWNER), encoding="utf-8")
    report = verify_ledger_file(built.path, checkpoints=[cp])
    failed = report.get("published-checkpoints")
    assert failed is not None and failed.status is Status.FAIL
    assert failed.reason == (
        f"published checkpoint {cp}: log rolled back: checkpoint has size 6 but the log has "
        "5 events"
    )
    assert failed.where == str(cp)
    assert failed.seq == 5


def test_published_checkpoint_of_a_rewritten_log(built: Built, tmp_path: Path) -> None:
    cp = tmp_path / "cp.txt"
    cp.write_text(checkpoint_note(4, built.root(4), OWNER), encoding="utf-8")
    assert verify_ledger_file(built.path, checkpoints=[cp]).ok
    t_resigned_edit(built)  # rewrite seq 3 and everything above it...
    report = verify_ledger_file(built.path, checkpoints=[cp])
    failed = report.get("published-checkpoints")
    assert failed is not None and failed.status is Status.FAIL
    assert "consistency proof from size 4 to size 5 does not verify" in failed.reason


def test_published_checkpoint_needs_a_known_signer(built: Built, tmp_path: Path) -> None:
    cp = tmp_path / "cp.txt"
    cp.write_text(checkpoint_note(3, built.root(3), EVIL), encoding="utf-8")
    report = verify_ledger_file(built.path, checkpoints=[cp])
    failed = report.get("published-checkpoints")
    assert failed is not None and failed.status is Status.FAIL
    assert "note has no verifiable signatures" in failed.reason
    # trusting the key makes it acceptable
    assert verify_ledger_file(built.path, checkpoints=[cp], trusted_keys=[EVIL.vkey]).get(
        "published-checkpoints"
    ) == verify_ledger_file(built.path, checkpoints=[cp], trusted_keys=[EVIL.vkey]).get(
        "published-checkpoints"
    )
    trusted = verify_ledger_file(built.path, checkpoints=[cp], trusted_keys=[EVIL.vkey])
    assert statuses(trusted)["published-checkpoints"] == "PASS"
    assert statuses(trusted)["trust"] == "FAIL"  # the genesis key is not the trusted one


def test_published_checkpoint_wrong_origin_and_missing_file(built: Built, tmp_path: Path) -> None:
    cp = tmp_path / "cp.txt"
    cp.write_text(checkpoint_note(3, built.root(3), OWNER, origin="other"), encoding="utf-8")
    report = verify_ledger_file(built.path, checkpoints=[cp, tmp_path / "absent.txt"])
    failed = report.get("published-checkpoints")
    assert failed is not None and failed.status is Status.FAIL
    assert "origin 'other' is not the log's origin 'example.org/ledger'" in failed.reason
    assert "(and 1 more)" in failed.reason


def test_untrusted_genesis(built: Built) -> None:
    report = verify_ledger_file(built.path, trusted_keys=[EVIL.vkey])
    failed = report.get("trust")
    assert failed is not None and failed.status is Status.FAIL and failed.seq == 0
    assert f"seq 0: the genesis key {OWNER.actor} is not among the trusted keys" in failed.reason
    with pytest.raises(VerificationError, match="trust check failed: seq 0: the genesis key"):
        require_valid(built.path, trusted_keys=[EVIL.vkey])


def test_invalid_trusted_key_fails_trust(built: Built) -> None:
    report = verify_ledger_file(built.path, trusted_keys=["not a vkey"])
    failed = report.get("trust")
    assert failed is not None and failed.status is Status.FAIL
    assert "trusted key 1 is not a valid vkey" in failed.reason


# ------------------------------------------------------------------------------- jobs


@pytest.mark.parametrize("tamper", [None, t_signature, t_resigned_edit, t_edit_body])
def test_jobs_give_identical_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tamper: Callable[[Built], None] | None
) -> None:
    events = standard_events()
    events += [Ev("trial.failed", {"i": i}, key=RUNNER) for i in range(300)]
    b = build(tmp_path / "big.db", events, checkpoint_sizes=(3, 100, 305))
    if tamper is not None:
        tamper(b)
    # a second bad signature far away, to check the merge across chunks
    b.execute("UPDATE events SET signature = ? WHERE seq = 250", RUNNER.priv.sign(b"y"))
    monkeypatch.setattr(verify._ledgerfile, "_MIN_PARALLEL_EVENTS", 0)
    one = verify_ledger_file(b.path, jobs=1)
    three = verify_ledger_file(b.path, jobs=3)
    assert one.to_dict() == three.to_dict()
    sig = one.get("signatures")
    assert sig is not None and sig.status is Status.FAIL


def test_jobs_check_every_chunk_of_an_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An archive's signatures go to the workers in chunks of buffered lines: a bad signature
    in a chunk after the first fails with ``jobs > 1`` as it does inline (a regression: the
    stream kept appending to a buffer the first hand-over had replaced)."""
    root = REPO / "archive" / "prompt-tumbling-e"
    copy = tmp_path / "archive"
    shutil.copytree(root, copy)
    events = copy / "ledger" / "events.jsonl"
    lines = events.read_bytes().split(b"\n")
    seq = 400  # beyond the first chunk of 256 lines
    assert len(lines) > seq + 1
    line = json.loads(lines[seq])
    line["signature"] = base64.b64encode(RUNNER.priv.sign(b"y")).decode("ascii")
    lines[seq] = json.dumps(line, separators=(",", ":")).encode("utf-8")
    events.write_bytes(b"\n".join(lines))
    monkeypatch.setattr(verify._ledgerfile, "_MIN_PARALLEL_EVENTS", 0)
    with science_skipped():  # jobs reach the signatures alone; the reports are compared whole
        one = verify_archive(copy, jobs=1)
        two = verify_archive(copy, jobs=2)
    assert one.to_dict() == two.to_dict()
    sig = two.get("signatures")
    assert sig is not None and sig.status is Status.FAIL
    assert sig.reason.startswith(f"seq {seq}: signature does not verify")
