"""The ledger on PostgreSQL: the same log as on SQLite, shared by processes, moved between
engines, and every bad store refused with one line (``docs/storage.md``).

Every test runs against the real server of the ``pg_server`` fixture
(``tests/support/pg_server.py``), each in its own schema.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import fixed_clock, fixed_key
from locations import REPO
from pg_server import PW_USER, PW_USER_PASSWORD

from ledger import EventSpec, Ledger, LedgerError, SchemaVersionError, StoreError, copy_ledger
from ledger.cli import main
from verify import verify_ledger_file

ROOT = REPO
_names = itertools.count()


def schema() -> str:
    """A fresh schema name for one test."""
    return f"t_{next(_names)}_{id(_names) % 10_000}"


def fill(log: Ledger, key: Any, batches: int = 6) -> None:
    """Append batches with blobs, a second key and a checkpoint: every table gets rows."""
    other = fixed_key("example.org/runner")
    log.add_key(other.verifier, "runner", key=key)
    for b in range(batches):
        log.append_many(
            [
                EventSpec("artifact.locked", {"b": b, "i": i}, {"data": f"blob {b}.{i}".encode()})
                for i in range(7)
            ],
            key=key,
        )
        if b % 2:
            log.sign_checkpoint(key)


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_read_blobs_reads_in_few_queries_what_blob_reads(
    pg_server: Any, tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``read_blobs``: each blob as ``blob`` gives it, over several queries, a missing one named."""
    import ledger._store

    monkeypatch.setattr(ledger._store, "BLOBS_PER_QUERY", 3)  # 8 distinct digests: 3 queries
    key = fixed_key("example.org/owner")
    where: Any = tmp_path / "a.db" if engine == "sqlite" else pg_server.url(schema=schema())
    with Ledger.create(where, origin="example.org/s", key=key, clock=fixed_clock()) as log:
        events = log.append_many(
            [
                EventSpec("artifact.locked", {"i": i}, {"data": f"blob {i % 8}".encode()})
                for i in range(10)
            ],
            key=key,
        )
        digests = [e.blobs["data"] for e in events]
        found = log.read_blobs([d.upper() for d in digests])
        assert found == {d: log.blob(d) for d in digests}
        assert len(found) == 8 and found[digests[9]] == b"blob 1"
        assert log.read_blobs([]) == {}
        missing = "0" * 64
        with pytest.raises(LedgerError, match=f"no blob {missing}"):
            log.read_blobs([*digests, missing])


def test_the_same_events_make_the_same_log_on_both_engines(pg_server: Any, tmp_path: Path) -> None:
    key = fixed_key("example.org/owner")
    url = pg_server.url(schema=schema())
    logs = [
        Ledger.create(tmp_path / "a.db", origin="example.org/s", key=key, clock=fixed_clock()),
        Ledger.create(url, origin="example.org/s", key=key, clock=fixed_clock()),
    ]
    for log in logs:
        fill(log, key)
    lite, pg = logs
    assert pg.engine == "postgresql" and lite.engine == "sqlite"
    assert pg.size == lite.size == 44
    assert [e.envelope for e in pg.events()] == [e.envelope for e in lite.events()]
    assert [e.signature for e in pg.events()] == [e.signature for e in lite.events()]
    assert pg.root() == lite.root()
    for size in (1, 2, 17, 44):
        assert pg.root(size) == lite.root(size)
        assert pg.inclusion_proof(size - 1).to_json() == lite.inclusion_proof(size - 1).to_json()
        assert pg.consistency_proof(size).to_json() == lite.consistency_proof(size).to_json()
    assert [(c.size, c.root, c.note) for c in pg.checkpoints()] == [
        (c.size, c.root, c.note) for c in lite.checkpoints()
    ]
    assert [e.seq for e in pg.events("key.added")] == [1]
    for log in logs:
        log.close()
    reopened = Ledger.open(url, readonly=True)
    assert reopened.size == 44 and reopened.origin == "example.org/s"
    with pytest.raises(StoreError, match="read-only"):
        reopened.append("artifact.locked", {}, key=key)
    reopened.close()


APPENDER = textwrap.dedent("""
    import sys
    from ledger import EventSpec, Ledger, SigningKey
    key = SigningKey.load(sys.argv[2])
    with Ledger.open(sys.argv[1]) as log:
        for b in range(int(sys.argv[4])):
            log.append_many([EventSpec("artifact.locked", {"writer": sys.argv[3], "b": b, "i": i})
                             for i in range(5)], key=key)
""")


def test_processes_appending_at_once_keep_one_gapless_chain(pg_server: Any, tmp_path: Path) -> None:
    """Four processes append 40 batches each at the same time: one chain, no gap, all kept."""
    key = fixed_key("example.org/owner")
    key.save(tmp_path / "owner.key")
    url = pg_server.url(schema=schema())
    Ledger.create(url, origin="example.org/s", key=key).close()
    args = [sys.executable, "-c", APPENDER, url, str(tmp_path / "owner.key")]
    procs = [
        subprocess.Popen([*args, f"w{n}", "40"], stderr=subprocess.PIPE, text=True)
        for n in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    with Ledger.open(url, readonly=True) as log:
        events = list(log.events())
        assert [e.seq for e in events] == list(range(1 + 4 * 40 * 5))
        assert all(e.prev == p.leaf_hash.hex() for p, e in itertools.pairwise(events))
        for n in range(4):
            mine = [(e.body["b"], e.body["i"]) for e in events if e.body.get("writer") == f"w{n}"]
            assert mine == [(b, i) for b in range(40) for i in range(5)]  # in order, all there
        copy = tmp_path / "copy.db"
        copy_ledger(url, copy)
        report = verify_ledger_file(copy)
        assert report.ok, report


def test_store_copy_moves_a_ledger_both_ways_and_the_roots_agree(
    pg_server: Any, tmp_path: Path
) -> None:
    key = fixed_key("example.org/owner")
    src = tmp_path / "src.db"
    with Ledger.create(src, origin="example.org/s", key=key, clock=fixed_clock()) as log:
        fill(log, key)
        root, size = log.root(), log.size
    url = pg_server.url(schema=schema())
    result = CliRunner().invoke(main, ["store", "copy", str(src), url])
    assert result.exit_code == 0, result.output
    assert f"root {root.hex()} agrees" in result.output
    back = tmp_path / "back.db"
    result = CliRunner().invoke(main, ["store", "copy", url, str(back)])
    assert result.exit_code == 0, result.output
    assert back.read_bytes() != b""
    with Ledger.open(url) as pg:
        assert pg.root() == root and pg.size == size
        pg.append("artifact.locked", {"after": "copy"}, key=key)  # the copy is a live ledger
        pg.sign_checkpoint(key)
    with Ledger.open(back, readonly=True) as lite:
        assert lite.root() == root
    assert verify_ledger_file(back).ok
    # refused: a destination that exists (file and schema), and nothing is changed
    for dst in (str(back), url):
        result = CliRunner().invoke(main, ["store", "copy", str(src), dst])
        assert result.exit_code != 0
        assert "already there; refusing to overwrite it" in result.output
    with Ledger.open(url, readonly=True) as pg:
        assert pg.size == size + 1


def test_bad_stores_get_one_line_naming_the_store(pg_server: Any, tmp_path: Path) -> None:
    key = fixed_key("example.org/owner")
    key.save(tmp_path / "owner.key")
    port = pg_server.port
    cases: list[tuple[list[str], str]] = [
        (
            ["log", f"postgresql://127.0.0.1:{_closed_port()}/ledgers?schema=x"],
            "cannot connect (no PostgreSQL server answers there); check the host and port",
        ),
        (
            ["log", pg_server.url(db="no_such_db", schema="x")],
            'database "no_such_db" does not exist',
        ),
        (["log", pg_server.url(schema="no_such_schema")], "no ledger there (schema"),
        (
            ["log", f"postgresql://{PW_USER}:secret@127.0.0.1:{port}/ledgers?schema=x"],
            "the URL holds a password; a password is never written",
        ),
        (["log", pg_server.url()], "the URL names no schema; add ?schema=NAME"),
        (["log", pg_server.url(schema="Bad-Name")], "must be 1-63 lower-case letters"),
        (
            ["new", str(tmp_path / "s1"), "--store", str(tmp_path / "x.db")],
            "takes a PostgreSQL URL",
        ),
        (["log", str(tmp_path)], "is a directory; give the ledger file"),
    ]
    for args, message in cases:
        result = CliRunner().invoke(main, args)
        assert result.exit_code != 0, (args, result.output)
        assert message in result.output, (args, result.output)
        assert "Traceback" not in result.output
    assert not (tmp_path / "s1").exists()  # nothing half-written


def test_a_refused_password_and_a_newer_schema_are_named(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = fixed_key("example.org/owner")
    name = schema()
    url = pg_server.url(schema=name)
    Ledger.create(url, origin="example.org/s", key=key).close()
    pg_server.psql(f'GRANT USAGE ON SCHEMA "{name}" TO {PW_USER}', db="ledgers")
    pg_server.psql(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{name}" TO {PW_USER}', db="ledgers")
    as_user = pg_server.url(schema=name, user=PW_USER)
    monkeypatch.setenv("PGPASSWORD", "wrong")
    refused = r"cannot connect \(the server refused the password\); check the user in the URL"
    with pytest.raises(StoreError, match=refused):
        Ledger.open(as_user, readonly=True)
    monkeypatch.setenv("PGPASSWORD", PW_USER_PASSWORD)
    with Ledger.open(as_user, readonly=True) as log:  # PGPASSWORD: the libpq way
        assert log.size == 1
    monkeypatch.delenv("PGPASSWORD")
    pg_server.psql(
        f"UPDATE \"{name}\".meta SET value = '2' WHERE key = 'schema_version'", db="ledgers"
    )
    with pytest.raises(SchemaVersionError, match=r"newer than 1 .* upgrade prompt-ledger"):
        Ledger.open(url)


def test_a_server_that_goes_away_loses_nothing_and_is_found_again(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill -9 of the server between and during appends: one message, no half-written event,
    and the next append after its restart continues the chain."""
    import ledger._postgres

    # one retry 0.5 s later, and the server is still down: the command gives up
    monkeypatch.setattr(ledger._postgres, "RECONNECT_SECONDS", 0.3)
    key = fixed_key("example.org/owner")
    url = pg_server.url(schema=schema())
    log = Ledger.create(url, origin="example.org/s", key=key)
    fill(log, key, batches=2)
    size, root = log.size, log.root()
    pg_server.kill()
    try:
        with pytest.raises(StoreError, match=r"PostgreSQL server went away|cannot connect"):
            log.append_many([EventSpec("artifact.locked", {"lost": i}) for i in range(3)], key=key)
        with pytest.raises(StoreError), log.transaction():
            log.append("artifact.locked", {"lost": "too"}, key=key)
    finally:
        pg_server.restart_after_kill()
    log.append("artifact.locked", {"after": "restart"}, key=key)  # reconnects
    assert log.size == size + 1 and log.root(size) == root
    assert [e.body for e in log.events(start=size)] == [{"after": "restart"}]
    log.close()


def test_the_demo_archive_from_postgresql_is_the_sqlite_archive_byte_for_byte(
    pg_server: Any,
) -> None:
    """scripts/make_archive.py with the ledger on PostgreSQL rebuilds the committed archive/
    (built on SQLite) byte for byte: lock, run, score, unblind, analyse, report, export."""
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "make_archive.py"),
            "--check",
            "--store",
            pg_server.url(schema=schema()),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "byte-identical to a fresh build (ledger on PostgreSQL)" in result.stdout


def _closed_port() -> int:
    from pg_server import free_port

    return free_port()
