"""The independent verifier on a ledger kept on PostgreSQL (issue 34), and `ledger view` of one.

Every test runs against the real throwaway server of the ``pg_server`` fixture, each in its own
schema. A ledger written by the writer to PostgreSQL and its twin written to SQLite (same keys,
same fixed clock, so the same bytes) must get the same verdict from every check except the
container check (``file``), honest or tampered with the same change.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from helpers import STUDY_ORIGIN, fixed_clock, fixed_key, study_key
from starlette.testclient import TestClient

import verify
import verify._ledgerfile
from ledger import Ledger
from ledger.cli import main
from verify import Report, Status, verify_path
from verify.__main__ import main as verify_main

OWNER = fixed_key("example.org/owner")
RUNNER = fixed_key("example.org/runner")
ORIGIN = "example.org/test"


def new_schema() -> str:
    """A schema name no other test uses."""
    return f"t_{uuid.uuid4().hex[:16]}"


def write_log(where: str | Path) -> None:
    """The same 22 events and two checkpoints, on either engine (fixed key and clock).

    Step events, not trial events: on PostgreSQL the store checks trial events against the
    trial rules (ledger/_guard.py), which these bodies are not meant to satisfy.
    """
    with Ledger.create(where, origin=ORIGIN, key=OWNER, clock=fixed_clock()) as log:
        log.add_key(RUNNER.vkey, "runner", key=OWNER)
        for i in range(10):
            log.append("step.requested", {"i": i}, key=RUNNER, blobs={"request": b"q%d" % i})
        log.sign_checkpoint(OWNER)
        log.append_many([("step.responded", {"i": i}) for i in range(10)], key=RUNNER)
        log.sign_checkpoint(OWNER)


@dataclass
class Twin:
    """One log on SQLite (``path``) and on PostgreSQL (``url``, schema ``schema``)."""

    path: Path
    url: str
    schema: str
    conninfo: str

    def execute(self, engine: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        """Run ``sql`` (``?`` placeholders) directly on one engine's tables: a tamper."""
        if engine == "sqlite":
            con = sqlite3.connect(self.path)
            try:
                rows = con.execute(sql, args).fetchall()
                con.commit()
            finally:
                con.close()
            return rows
        with psycopg.connect(self.conninfo, autocommit=True) as pg:
            pg.execute(f'SET search_path TO "{self.schema}"')
            cur = pg.execute(sql.replace("?", "%s"), args)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []

    def target(self, engine: str) -> str:
        return str(self.path) if engine == "sqlite" else self.url


@pytest.fixture
def twin(pg_server: Any, tmp_path: Path) -> Twin:
    schema = new_schema()
    url = pg_server.url(schema=schema)
    write_log(tmp_path / "ledger.db")
    write_log(url)
    return Twin(tmp_path / "ledger.db", url, schema, pg_server.url())


def verdicts(report: Report) -> list[tuple[str, str, str, int | None, str | None]]:
    """Every check but the container check, as comparable tuples."""
    checks = [c for c in report.checks if c.name != "file"]
    return [(c.name, c.status.value, c.reason, c.seq, c.where) for c in checks]


# ---------------------------------------------------------------------- honest ledgers


def test_a_postgres_ledger_verifies_like_its_sqlite_twin(twin: Twin) -> None:
    lite, pg = verify_path(twin.path), verify_path(twin.url)
    assert lite.ok and pg.ok, (lite.first_failure, pg.first_failure)
    assert pg.size == lite.size == 22 and pg.root == lite.root
    assert verdicts(pg) == verdicts(lite)
    file = pg.get("file")
    assert file is not None and file.status is Status.PASS
    assert f"schema {twin.schema} of database ledgers" in file.reason
    assert "schema version 1" in file.reason and "REPEATABLE READ" in file.reason
    assert pg.path == twin.url


def test_signatures_in_worker_processes_give_the_same_report(
    twin: Twin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verify._ledgerfile, "_MIN_PARALLEL_EVENTS", 0)
    twin.execute("pg", "UPDATE events SET signature = ? WHERE seq = 15", OWNER.sign(b"x"))
    one, two = verify_path(twin.url), verify_path(twin.url, jobs=2)
    assert verdicts(one) == verdicts(two)
    failed = two.get("signatures")
    assert failed is not None and failed.status is Status.FAIL and failed.seq == 15


def test_the_verifier_reads_one_snapshot_and_never_writes(twin: Twin) -> None:
    before = twin.execute("pg", "SELECT count(*), max(seq) FROM events")
    report = verify_path(twin.url)
    assert report.ok
    assert twin.execute("pg", "SELECT count(*), max(seq) FROM events") == before
    # nothing of the verifier's is left open on the server
    with psycopg.connect(twin.conninfo, autocommit=True) as pg:
        left = pg.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'prompt-ledger-verify'"
        ).fetchone()
    assert left == (0,)


# ---------------------------------------------------------------------- tampered rows


def t_envelope_byte(t: Twin, engine: str) -> None:
    [(envelope,)] = t.execute(engine, "SELECT envelope FROM events WHERE seq = 5")
    t.execute(
        engine,
        "UPDATE events SET envelope = ? WHERE seq = 5",
        bytes(envelope).replace(b'"i":3', b'"i":9'),
    )


def t_deleted_event(t: Twin, engine: str) -> None:
    t.execute(engine, "DELETE FROM events WHERE seq = 7")


def t_tree_node(t: Twin, engine: str) -> None:
    t.execute(engine, "UPDATE tree SET hash = ? WHERE level = 1 AND idx = 1", b"\x00" * 32)


def t_keys_row(t: Twin, engine: str) -> None:
    t.execute(engine, "UPDATE keys SET role = 'owner' WHERE role = 'runner'")


def t_checkpoint_note(t: Twin, engine: str) -> None:
    [(note,)] = t.execute(engine, "SELECT note FROM checkpoints WHERE id = 1")
    lines = note.split("\n")
    lines[1] = "11"  # the size line: the signature no longer covers the text
    t.execute(engine, "UPDATE checkpoints SET note = ? WHERE id = 1", "\n".join(lines))


def t_blob_data(t: Twin, engine: str) -> None:
    t.execute(engine, "UPDATE blobs SET data = ? WHERE data = ?", b"tampered", b"q4")


def t_leaf_hash(t: Twin, engine: str) -> None:
    t.execute(engine, "UPDATE events SET leaf_hash = ? WHERE seq = 12", b"\x01" * 32)


def t_meta_origin(t: Twin, engine: str) -> None:
    t.execute(engine, "UPDATE meta SET value = 'other' WHERE key = 'origin'")


TAMPERS = [
    (
        "envelope byte",
        t_envelope_byte,
        "signatures",
        5,
        "seq 5: signature does not verify under key example.org/runner+",
    ),
    ("deleted event", t_deleted_event, "sequence", 7, "seq 7 is missing (the row after seq 6"),
    ("tree node", t_tree_node, "tree", None, "tree node (level 1, index 1) over seqs 2..3 differs"),
    ("keys row", t_keys_row, "keys", 1, "keys table row for example.org/runner+"),
    ("checkpoint note", t_checkpoint_note, "checkpoints", None, "checkpoint 1 (size 11): "),
    ("blob data", t_blob_data, "blobs", 6, "does not hash to its address"),
    ("leaf hash", t_leaf_hash, "leaf-hashes", 12, "seq 12: stored leaf_hash differs"),
]


@pytest.mark.parametrize(
    ("tamper", "check", "seq", "message"), [pytest.param(*t[1:], id=t[0]) for t in TAMPERS]
)
def test_a_tampered_row_fails_the_check_that_owns_it_on_both_engines(
    twin: Twin,
    tamper: Callable[[Twin, str], None],
    check: str,
    seq: int | None,
    message: str,
) -> None:
    reports = {}
    for engine in ("sqlite", "pg"):
        tamper(twin, engine)
        report = reports[engine] = verify_path(twin.target(engine))
        assert not report.ok
        failed = report.get(check)
        assert failed is not None and failed.status is Status.FAIL, (engine, report.checks)
        assert message in failed.reason and failed.seq == seq, (engine, failed)
        assert report.get("file").status is Status.PASS  # type: ignore[union-attr]
    assert verdicts(reports["pg"]) == verdicts(reports["sqlite"])


def test_meta_origin_is_a_file_failure_on_both_engines(twin: Twin) -> None:
    for engine in ("sqlite", "pg"):
        t_meta_origin(twin, engine)
        file = verify_path(twin.target(engine)).get("file")
        assert file is not None and file.status is Status.FAIL
        assert "meta origin 'other' differs from the genesis origin" in file.reason


# ---------------------------------------------------------------------- bad input


def _drop_table(t: Twin) -> None:
    t.execute("pg", "DROP TABLE tree")


def _text_envelope(t: Twin) -> None:
    t.execute(
        "pg", "ALTER TABLE events ALTER COLUMN envelope TYPE text USING encode(envelope, 'escape')"
    )


def _newer(t: Twin) -> None:
    t.execute("pg", "UPDATE meta SET value = '2' WHERE key = 'schema_version'")


def _other_format(t: Twin) -> None:
    t.execute("pg", "UPDATE meta SET value = 'something-else' WHERE key = 'format'")


def _empty_schema(t: Twin) -> None:
    t.execute("pg", f'DROP SCHEMA "{t.schema}" CASCADE; CREATE SCHEMA "{t.schema}"')


def _no_schema(t: Twin) -> None:
    t.execute("pg", f'DROP SCHEMA "{t.schema}" CASCADE')


STORE_PROBLEMS = [
    (
        "newer schema version",
        _newer,
        "has schema version 2, newer than this verifier knows (1); use a newer verifier",
    ),
    ("missing schema", _no_schema, "does not exist in database 'ledgers'; check ?schema="),
    ("schema without a ledger", _empty_schema, "holds no ledger (no table meta)"),
    (
        "not a prompt ledger",
        _other_format,
        "is not a PROMPT ledger: meta format is 'something-else'",
    ),
    ("missing table", _drop_table, "has no table tree"),
    ("column of the wrong type", _text_envelope, "column events.envelope has type text, not bytea"),
]


@pytest.mark.parametrize(
    ("change", "message"), [pytest.param(*p[1:], id=p[0]) for p in STORE_PROBLEMS]
)
def test_a_store_that_holds_no_readable_ledger_is_one_file_failure(
    twin: Twin, change: Callable[[Twin], None], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    change(twin)
    report = verify_path(twin.url)
    assert [(c.name, c.status) for c in report.checks] == [("file", Status.FAIL)]
    assert message in report.checks[0].reason and twin.url in report.checks[0].reason
    assert verify_main([twin.url]) == 1
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err and "FAIL" in out.out


def _refused_password(server: Any, schema: str, monkeypatch: pytest.MonkeyPatch) -> str:
    from pg_server import PW_USER

    monkeypatch.setenv("PGPASSWORD", "not the password")
    return str(server.url(schema=schema, user=PW_USER))


def _no_password(server: Any, schema: str, monkeypatch: pytest.MonkeyPatch) -> str:
    from pg_server import PW_USER

    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", "/nonexistent/pgpass")
    return str(server.url(schema=schema, user=PW_USER))


URL_PROBLEMS: list[tuple[str, Callable[[Any, str, pytest.MonkeyPatch], str], str]] = [
    (
        "refused password",
        _refused_password,
        "cannot connect (the server refused the password); check the user, and give the password "
        "through PGPASSWORD, ~/.pgpass",
    ),
    (
        "no password found",
        _no_password,
        "cannot connect (the server asks for a password and none was found); give the password",
    ),
    (
        "missing database",
        lambda s, schema, mp: s.url(db="no_such_db", schema=schema),
        "cannot connect (database 'no_such_db' does not exist on that server); check the database",
    ),
    (
        "no server there",
        lambda s, schema, mp: f"postgresql://{s.user}@127.0.0.1:1/ledgers?schema={schema}",
        "cannot connect (no PostgreSQL server answers there); check the host",
    ),
    (
        "no schema in the URL",
        lambda s, schema, mp: s.url(),
        "the URL names no schema; add ?schema=NAME",
    ),
    (
        "password in the URL",
        lambda s, schema, mp: f"postgresql://u:hunter2@127.0.0.1:{s.port}/ledgers?schema={schema}",
        "postgresql://u:***@127.0.0.1",
    ),
    (
        "bad schema name",
        lambda s, schema, mp: s.url(schema="Robert'); DROP"),
        "is not 1-63 lower-case letters",
    ),
    (
        "no database in the URL",
        lambda s, schema, mp: f"postgresql://127.0.0.1:{s.port}/?schema={schema}",
        "the URL names no database",
    ),
]


@pytest.mark.parametrize(("make", "message"), [pytest.param(*p[1:], id=p[0]) for p in URL_PROBLEMS])
def test_a_store_that_cannot_be_reached_is_one_line_naming_it_and_what_to_do(
    pg_server: Any,
    make: Callable[[Any, str, pytest.MonkeyPatch], str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = make(pg_server, new_schema(), monkeypatch)
    result = CliRunner().invoke(main, ["verify", url])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    report = verify_path(url)
    assert [(c.name, c.status) for c in report.checks] == [("file", Status.FAIL)]
    reason = report.checks[0].reason
    assert message in reason, reason
    assert "hunter2" not in reason and "hunter2" not in result.output
    assert "Traceback" not in result.output


def test_ledger_verify_takes_a_url_a_study_folder_with_either_store(
    twin: Twin, tmp_path: Path
) -> None:
    pg_study, lite_study = tmp_path / "pg-study", tmp_path / "lite-study"
    pg_study.mkdir()
    (pg_study / "ledger.store").write_text(twin.url + "\n")
    lite_study.mkdir()
    shutil.copy(twin.path, lite_study / "ledger.db")
    for target in (twin.url, pg_study, lite_study):
        result = CliRunner().invoke(main, ["verify", str(target), "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["ok"] is True
    # python -m verify, in its own process: a URL survives the command line unchanged
    out = subprocess.run(
        [sys.executable, "-m", "verify", "--json", twin.url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["path"] == twin.url


def test_a_study_folder_whose_ledger_store_is_unusable_fails_naming_the_file(
    tmp_path: Path,
) -> None:
    study = tmp_path / "study"
    study.mkdir()
    (study / "ledger.store").write_text("/home/me/ledger.db\n")
    report = verify_path(study)
    assert [(c.name, c.status) for c in report.checks] == [("file", Status.FAIL)]
    assert "is not a PostgreSQL URL" in report.checks[0].reason
    (study / "ledger.store").write_bytes(b"\xff\xfe")
    report = verify_path(study)
    assert f"{study / 'ledger.store'}: not UTF-8" in report.checks[0].reason


# ---------------------------------------------------------------------- a study on PostgreSQL


@pytest.fixture(scope="module")
def pg_study(
    pg_server: Any, study_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """A locked, run and scored tumbling-E study (1 replicate) whose ledger is on PostgreSQL."""
    from analysis._scoring import score_study
    from ledger import user_home
    from runner._backends import SimulatedBackend
    from runner._execute import RunOptions, run_study
    from runner._lock import lock_study

    base = tmp_path_factory.mktemp("pg-study")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
        key = study_key()
        key_file = user_home() / "keys" / "prompt-tumbling-e-owner.key"
        key_file.parent.mkdir(parents=True)
        key.save(key_file)
        root = base / "study"
        shutil.copytree(study_template, root)
        url = pg_server.url(schema=new_schema())
        with Ledger.create(url, origin=STUDY_ORIGIN, key=key):
            pass
        (root / "ledger.store").write_text(url + "\n")
        spec = root / "study.toml"
        spec.write_text(spec.read_text("utf-8").replace("replicates = 30", "replicates = 1"))
        lock_study(root, key)
        run_study(root, key, SimulatedBackend(), RunOptions(concurrency=4))
        score_study(root, key)
        yield root


def test_a_postgres_study_verifies_through_its_folder(pg_study: Path) -> None:
    url = (pg_study / "ledger.store").read_text().strip()
    report = verify_path(pg_study)
    assert report.ok, report.first_failure
    assert report.path == url and report.size is not None and report.size > 40
    assert "PostgreSQL" in report.get("file").reason  # type: ignore[union-attr]


def test_ledger_view_serves_a_postgres_study(pg_study: Path) -> None:
    from analysis.view._app import make_app
    from analysis.view._viewer import open_viewer

    url = (pg_study / "ledger.store").read_text().strip()
    viewer = open_viewer(pg_study)
    try:
        assert url in viewer.verification.command
        c = TestClient(make_app(viewer), base_url="http://127.0.0.1")
        overview = c.get("/")
        assert overview.status_code == 200
        rows = c.get("/trials?format=json").json()["rows"]
        assert rows
        page = c.get(f"/trial/{rows[0]['h']}")
        assert page.status_code == 200
        deadline = time.monotonic() + 120
        while viewer.verification.state == "running":
            assert time.monotonic() < deadline, "the background verification did not finish"
            time.sleep(0.05)
        assert viewer.verification.state == "passed", viewer.verification.error
        assert 'id="verification-failed"' not in c.get("/").text
    finally:
        viewer.verification.stop()
        viewer.index.close()
