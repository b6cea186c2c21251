"""Tamper matrix: each change to a ledger file is caught, naming the first bad seq and why."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import fixed_clock, fixed_key
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import EventSpec, Ledger, SigningKey, leaf_hash
from ledger._envelope import build_envelope
from verify import Report, Status, VerificationError, require_valid, verify_ledger_file

TARGET = 9  # a trial event in the middle of the log


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pristine") / "ledger.db"
    owner = fixed_key("example.org/owner")
    runner = fixed_key("example.org/runner")
    with Ledger.create(path, origin="example.org/tamper", key=owner, clock=fixed_clock()) as log:
        log.add_key(runner.vkey, "runner", key=owner)
        log.append("protocol.locked", {"seed": "42"}, key=owner, blobs={"spec": b"[study]\n"})
        log.append_many(
            [
                EventSpec(
                    "trial.requested" if i % 2 == 0 else "trial.responded",
                    {"trial": f"A|chart-{i // 2}|0", "n": i},
                    {"raw": f"payload {i}".encode()},
                )
                for i in range(16)
            ],
            key=runner,
        )
        log.sign_checkpoint(owner)
        log.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


def _copy(pristine: Path, tmp_path: Path) -> Path:
    target = tmp_path / "ledger.db"
    shutil.copyfile(pristine, target)
    return target


def _sql(path: Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    conn = sqlite3.connect(path)
    with conn:
        for sql, args in statements:
            conn.execute(sql, args)
    conn.close()


def _row(path: Path, seq: int) -> tuple[bytes, bytes, bytes]:
    conn = sqlite3.connect(path)
    row = conn.execute(
        "SELECT envelope, signature, leaf_hash FROM events WHERE seq = ?", (seq,)
    ).fetchone()
    conn.close()
    return bytes(row[0]), bytes(row[1]), bytes(row[2])


def _set_envelope(path: Path, seq: int, envelope: bytes) -> None:
    _sql(path, ("UPDATE events SET envelope = ? WHERE seq = ?", (envelope, seq)))


def edit_body(path: Path) -> None:
    env, _, _ = _row(path, TARGET)
    n = TARGET - 3  # seq 3 onwards are the batch's events n = 0, 1, ...
    changed = env.replace(f'"n":{n}'.encode(), f'"n":{n + 1}'.encode())
    assert changed != env
    _set_envelope(path, TARGET, changed)


def edit_time(path: Path) -> None:
    env, _, _ = _row(path, TARGET)
    changed = env.replace(b'"time":"2026-', b'"time":"2025-')
    assert changed != env
    _set_envelope(path, TARGET, changed)


def swap_events(path: Path) -> None:
    a, b = _row(path, TARGET), _row(path, TARGET + 2)
    update = "UPDATE events SET envelope = ?, signature = ?, leaf_hash = ? WHERE seq = ?"
    _sql(path, (update, (*b, TARGET)), (update, (*a, TARGET + 2)))


def delete_middle(path: Path) -> None:
    _sql(path, ("DELETE FROM events WHERE seq = ?", (TARGET,)))


def truncate_tail(path: Path) -> None:
    _sql(path, ("DELETE FROM events WHERE seq >= ?", (TARGET,)))


def insert_event(path: Path) -> None:
    attacker = SigningKey.generate("example.org/runner")
    _, _, prev_leaf = _row(path, TARGET - 1)
    env = build_envelope(
        seq=TARGET,
        time="2026-01-01T00:00:00.500000Z",
        kind="trial.responded",
        actor=fixed_key("example.org/runner").actor,
        prev=prev_leaf.hex(),
        body={"trial": "B|forged|0"},
        blobs={},
    )
    conn = sqlite3.connect(path)
    with conn:
        rows = conn.execute("SELECT seq FROM events WHERE seq >= ? ORDER BY seq DESC", (TARGET,))
        for (seq,) in rows.fetchall():
            conn.execute("UPDATE events SET seq = seq + 1 WHERE seq = ?", (seq,))
        conn.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                TARGET,
                env.kind,
                env.actor,
                env.time,
                env.data,
                attacker.sign(env.data),
                leaf_hash(env.data),
            ),
        )
    conn.close()


def replace_signature(path: Path) -> None:
    _sql(path, ("UPDATE events SET signature = ? WHERE seq = ?", (bytes(64), TARGET)))


def replace_blob(path: Path) -> None:
    original = f"payload {TARGET - 3}".encode()
    _sql(path, ("UPDATE blobs SET data = ? WHERE data = ?", (b"payload X", original)))


def edit_leaf_hash(path: Path) -> None:
    _sql(path, ("UPDATE events SET leaf_hash = ? WHERE seq = ?", (bytes(32), TARGET)))


def resign_unregistered(path: Path) -> None:
    env, _, _ = _row(path, TARGET)
    runner = fixed_key("example.org/runner")
    evil = SigningKey.generate("example.org/evil")
    new = env.replace(runner.actor.encode(), evil.actor.encode())
    _sql(
        path,
        (
            "UPDATE events SET envelope = ?, signature = ?, leaf_hash = ?, actor = ? WHERE seq = ?",
            (new, evil.sign(new), leaf_hash(new), evil.actor, TARGET),
        ),
    )


TAMPERS: list[tuple[str, Callable[[Path], None], str, str]] = [
    ("edit a body", edit_body, "signatures", "signature does not verify"),
    ("edit a time", edit_time, "signatures", "signature does not verify"),
    ("swap two events", swap_events, "envelopes", "seq"),
    ("delete a middle event", delete_middle, "sequence", "missing"),
    ("truncate the tail", truncate_tail, "checkpoints", "exceeds"),
    ("insert an event", insert_event, "signatures", "signature does not verify"),
    ("replace a signature", replace_signature, "signatures", "signature does not verify"),
    ("replace a blob's bytes", replace_blob, "blobs", "hash"),
    ("edit a stored leaf hash", edit_leaf_hash, "leaf-hashes", "leaf_hash differs"),
    ("re-sign with an unregistered key", resign_unregistered, "signatures", "not a registered key"),
]


def _failures(report: Report) -> list[tuple[str, int | None, str, str | None]]:
    return [(c.name, c.seq, c.reason, c.where) for c in report.checks if c.status is Status.FAIL]


@pytest.mark.parametrize(
    ("tamper", "check", "reason"),
    [(t[1], t[2], t[3]) for t in TAMPERS],
    ids=[t[0] for t in TAMPERS],
)
def test_tamper_is_detected(
    pristine: Path, tmp_path: Path, tamper: Callable[[Path], None], check: str, reason: str
) -> None:
    assert verify_ledger_file(pristine).ok
    path = _copy(pristine, tmp_path)
    tamper(path)
    report = verify_ledger_file(path)
    failures = _failures(report)
    assert not report.ok
    named = [f for f in failures if f[0] == check]
    assert named, f"{check} did not fail: {failures}"
    _, seq, text, where = named[0]
    assert seq == TARGET or (where is not None and str(TARGET) in where), failures
    assert reason.lower() in text.lower(), text
    first_seq = min(f[1] for f in failures if f[1] is not None)
    assert first_seq == TARGET, failures
    with pytest.raises(VerificationError):
        require_valid(path)


def test_rollback_behind_published_checkpoint(pristine: Path, tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    shutil.copyfile(pristine, old)
    path = _copy(pristine, tmp_path)
    owner = fixed_key("example.org/owner")
    with Ledger.open(path) as log:
        log.append_many([("custom.note", {"i": i}) for i in range(5)], key=owner)
        published = tmp_path / "published.checkpoint"
        published.write_text(log.sign_checkpoint(owner))
    assert verify_ledger_file(path, checkpoints=[published]).ok
    shutil.copyfile(old, path)  # roll the file back to before the published checkpoint
    report = verify_ledger_file(path, checkpoints=[published])
    failures = _failures(report)
    assert [f[0] for f in failures] == ["published-checkpoints"], failures
    assert "rolled back" in failures[0][2]


def test_resigned_ledger_needs_trusted_key(pristine: Path, tmp_path: Path) -> None:
    owner = fixed_key("example.org/owner")
    forger = SigningKey.generate("example.org/owner")
    forged = tmp_path / "forged.db"
    with (
        Ledger.open(pristine, readonly=True) as log,
        Ledger.create(forged, origin=log.origin, key=forger) as fake,
    ):
        fake.append("protocol.locked", {"seed": "43"}, key=forger)
    plain = verify_ledger_file(forged)
    assert plain.ok
    assert any(c.name == "trust" and c.status is Status.WARN for c in plain.checks)
    trusted = verify_ledger_file(forged, trusted_keys=[owner.vkey])
    assert [f[0] for f in _failures(trusted)] == ["trust"]
    assert verify_ledger_file(pristine, trusted_keys=[owner.vkey]).ok


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seq=st.integers(min_value=0, max_value=18),
    column=st.sampled_from(["envelope", "signature"]),
    offset=st.integers(min_value=0, max_value=10_000),
    flip=st.integers(min_value=1, max_value=255),
)
def test_any_single_byte_change_fails(
    pristine: Path, tmp_path: Path, seq: int, column: str, offset: int, flip: int
) -> None:
    path = tmp_path / f"b-{seq}-{column}-{offset}-{flip}.db"
    shutil.copyfile(pristine, path)
    env, sig, _ = _row(path, seq)
    data = bytearray(env if column == "envelope" else sig)
    data[offset % len(data)] ^= flip
    _sql(path, (f"UPDATE events SET {column} = ? WHERE seq = ?", (bytes(data), seq)))
    report = verify_ledger_file(path)
    assert not report.ok
    assert min(f[1] for f in _failures(report) if f[1] is not None) == seq
    path.unlink()
