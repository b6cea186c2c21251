"""Many ``ledger run`` workers on one PostgreSQL study (issue 34, ``docs/trials.md`` §8).

Real parts only: a throwaway PostgreSQL server (the ``pg_server`` fixture), the fake Messages
server over real HTTP, worker processes started through the CLI and killed with SIGKILL. Each
test has its own schema. Afterwards every request has exactly one outcome, every trial exactly
one final outcome, nothing is requested after a final outcome, and the ledger verifies.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fake_messages import FakeMessagesServer
from forked_cli import ForkedCli
from helpers import STUDY_ORIGIN, soak, study_key

from ledger import EventSpec, Ledger, RefusedError
from runner._backends import AnthropicBackend
from runner._execute import RunOptions, run_study
from runner._lock import StudyError

CLI = [sys.executable, "-c", "from ledger.cli import main; main()"]


def pg_study(
    root: Path, template: Path, url: str, *, replicates: int, witnessed: bool = False
) -> Path:
    """The tumbling-E template with its ledger on PostgreSQL at ``url``, locked."""
    from ledger import user_home
    from runner._lock import lock_study

    key = study_key()
    key_file = user_home() / "keys" / "prompt-tumbling-e-owner.key"
    if not key_file.exists():
        key_file.parent.mkdir(parents=True, exist_ok=True)
        key.save(key_file)
    shutil.copytree(template, root)
    with Ledger.create(url, origin=STUDY_ORIGIN, key=key):
        pass
    (root / "ledger.store").write_text(url + "\n", encoding="utf-8")
    spec = root / "study.toml"
    text = spec.read_text(encoding="utf-8").replace("replicates = 30", f"replicates = {replicates}")
    spec.write_text(text, encoding="utf-8")
    lock_study(root, key)
    return root


def events_of(url: str) -> list[Any]:
    with Ledger.open(url, readonly=True) as log:
        return list(log.events())


def check_exactly_once(url: str, trials: int) -> Counter[str]:
    """One outcome per request, one final outcome per trial, no request after it."""
    events = events_of(url)
    assert [e.seq for e in events] == list(range(len(events)))  # no gap, none twice
    requests = {e.seq: e.body["trial"] for e in events if e.kind == "trial.requested"}
    outcomes = Counter(
        e.body["request_seq"] for e in events if e.kind in ("trial.responded", "trial.failed")
    )
    assert set(outcomes) == set(requests), "a recorded request has no recorded outcome"
    assert max(outcomes.values()) == 1, "a request has two outcomes"
    finals: dict[str, list[int]] = {}
    for e in events:
        if e.kind == "trial.responded" or (e.kind == "trial.failed" and e.body["final"]):
            finals.setdefault(e.body["trial"], []).append(e.seq)
    assert len(finals) == trials and all(len(v) == 1 for v in finals.values())
    for e in events:
        if e.kind == "trial.requested":
            assert e.seq < finals[e.body["trial"]][0], e.seq
    return Counter(e.kind for e in events)


def sqlite_copy(url: str, path: Path) -> None:
    """Copy the PostgreSQL ledger at ``url`` into a new SQLite ledger file, row for row.

    The same bytes (envelopes, signatures, leaf hashes, blobs, tree, checkpoints, keys):
    ``ledger export`` and ``verify`` then read it as they read any study's ledger.
    """
    import sqlite3

    from ledger._store import _SCHEMA, APPLICATION_ID, SCHEMA_VERSION

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN")
    for stmt in _SCHEMA.split(";"):
        if stmt.strip():
            conn.execute(stmt)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    with Ledger.open(url, readonly=True) as log:
        pg = log._conn
        for table, columns in (
            ("meta", "key, value"),
            ("events", "seq, kind, actor, time, envelope, signature, leaf_hash"),
            ("blobs", "sha256, size, data"),
            ("checkpoints", "id, size, root, note, created"),
            ("keys", "actor, name, vkey, role, added_seq, revoked_seq"),
            ("tree", "level, idx, hash"),
        ):
            rows = [
                tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                for row in pg.execute(f"SELECT {columns} FROM {table}").fetchall()
            ]
            marks = ", ".join("?" for _ in columns.split(","))
            conn.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", rows)
    conn.execute("COMMIT")
    conn.close()


def verify_copy(url: str, tmp: Path) -> None:
    """The ledger's chain, signatures and checkpoints verify (its SQLite copy, offline)."""
    from verify import verify_ledger_file

    tmp.mkdir()
    sqlite_copy(url, tmp / "ledger.db")
    report = verify_ledger_file(tmp / "ledger.db")
    assert report.ok, report


def export_and_verify(study: Path, out: Path, url: str) -> None:
    """Score, unblind, analyze and export through the CLI; ``python -m verify`` passes.

    The commands after ``ledger run`` read the ledger from a SQLite copy of the PostgreSQL one
    (:func:`sqlite_copy`): the bytes the workers recorded, exported and verified offline.
    """
    from click.testing import CliRunner

    from ledger import user_home
    from ledger.cli import main
    from verify import verify_path

    sqlite_copy(url, study / "ledger.db")
    (study / "ledger.store").unlink()
    key = user_home() / "keys" / "prompt-tumbling-e-owner.key"
    for step in (("score", study), ("unblind", study), ("analyze", study), ("export", study, out)):
        result = CliRunner().invoke(main, [*map(str, step), "--key", str(key)])
        assert result.exit_code == 0, (step, result.output)
    report = verify_path(out)
    assert report.ok, report


@pytest.fixture
def template(study_template: Path, ledger_home: Path) -> Path:
    return study_template


def backend(server: FakeMessagesServer) -> AnthropicBackend:
    return AnthropicBackend(api_key="test", base_url=server.base_url)


def start_worker(
    study: Path, server: FakeMessagesServer, *extra: str, log: Path | None = None
) -> ForkedCli:
    """``ledger run STUDY --base-url ...`` as a worker process of its own, forked from one
    that imported the runner once (:class:`ForkedCli`); its output goes to ``log`` (appended)
    or to a new file beside the study, and ``communicate()`` returns it."""
    env = dict(os.environ, ANTHROPIC_API_KEY="test")
    if log is None:
        fd, name = tempfile.mkstemp(prefix="worker-", suffix=".log", dir=study.parent)
        os.close(fd)
        log = Path(name)
    return ForkedCli(["run", str(study), "--base-url", server.base_url, *extra], env, log)


def test_one_worker_on_postgresql_runs_the_study_and_verifies(
    tmp_path: Path, template: Path, pg_server: Any
) -> None:
    url = pg_server.url(schema="w_one")
    study = pg_study(tmp_path / "study", template, url, replicates=1)
    with FakeMessagesServer() as server:
        result = run_study(study, study_key(), backend(server), RunOptions(concurrency=4))
    assert result.reason == "complete", result
    kinds = check_exactly_once(url, trials=35)
    assert kinds["run.started"] == 1 and kinds["run.stopped"] == 1
    started = next(e for e in events_of(url) if e.kind == "run.started")
    assert "concurrent" not in started.body  # alone on the study: as on SQLite
    with Ledger.open(url, readonly=True) as log:
        assert log._conn.execute("SELECT COUNT(*) FROM workers").fetchone()[0] == 0
        assert log._conn.execute("SELECT COUNT(*) FROM leases").fetchone()[0] == 0


# ---------------------------------------------------------------------- the store's rules


def _bare(url: str) -> tuple[Ledger, Any]:
    key = study_key()
    return Ledger.create(url, origin="example.org/guard", key=key), key


def _request(trial: str, attempt: int, session: int) -> EventSpec:
    return EventSpec("trial.requested", {"trial": trial, "attempt": attempt, "session": session})


def _responded(trial: str, attempt: int, request_seq: int) -> EventSpec:
    return EventSpec(
        "trial.responded", {"trial": trial, "attempt": attempt, "request_seq": request_seq}
    )


def _failed(trial: str, attempt: int, request_seq: int, *, final: bool) -> EventSpec:
    return EventSpec(
        "trial.failed",
        {
            "trial": trial,
            "attempt": attempt,
            "request_seq": request_seq,
            "error_type": "server",
            "final": final,
        },
    )


@pytest.mark.parametrize(
    ("case", "rule", "message"),
    [
        ("second-final", "final", "trial a already has its final outcome"),
        ("final-failure-after-response", "final", "trial a already has its final outcome"),
        ("request-after-final", "final", "no request may follow it"),
        ("second-outcome", "answered", "already has its outcome"),
        ("closed-session", "closed", "which is not open"),
        ("attempt-out-of-turn", "attempt", "the trial's next attempt is 1"),
        ("unknown-request", "unknown", "which is no trial.requested"),
        ("other-trial", "unknown", "its request (seq"),
        ("second-stop", "closed", "run.stopped names run session"),
    ],
)
def test_the_store_refuses_what_would_break_a_trial_rule(
    pg_server: Any, case: str, rule: str, message: str
) -> None:
    url = pg_server.url(schema=f"g_{case.replace('-', '_')}")
    log, key = _bare(url)
    with log:
        s = log.append("run.started", {}, key=key).seq
        r1 = log.append_many([_request("a", 1, s)], key=key)[0].seq
        log.append_many([_failed("a", 1, r1, final=False)], key=key)
        r2 = log.append_many([_request("a", 2, s)], key=key)[0].seq
        bad: list[EventSpec]
        if case == "second-final":
            r3 = log.append_many([_request("a", 3, s)], key=key)[0].seq  # a lease ran out
            log.append_many([_responded("a", 3, r3)], key=key)
            bad = [_responded("a", 2, r2)]
        elif case == "final-failure-after-response":
            r3 = log.append_many([_request("a", 3, s)], key=key)[0].seq
            log.append_many([_responded("a", 2, r2)], key=key)
            bad = [_failed("a", 3, r3, final=True)]
        elif case == "request-after-final":
            log.append_many([_responded("a", 2, r2)], key=key)
            bad = [_request("a", 3, s)]
        elif case == "second-outcome":
            log.append_many([_failed("a", 2, r2, final=False)], key=key)
            bad = [_failed("a", 2, r2, final=False)]
        elif case == "closed-session":
            log.append("run.stopped", {"session": s}, key=key)
            bad = [_request("b", 1, s)]
        elif case == "attempt-out-of-turn":
            bad = [_request("b", 2, s)]
        elif case == "unknown-request":
            bad = [_responded("a", 2, r2 + 100)]
        elif case == "other-trial":
            bad = [_responded("b", 2, r2)]
        else:
            log.append("run.stopped", {"session": s}, key=key)
            bad = [EventSpec("run.stopped", {"session": s})]
        size = log.size
        ok = _request("c", 1, s) if case not in ("closed-session", "second-stop") else None
        batch = ([ok] if ok is not None else []) + bad
        with pytest.raises(RefusedError, match=re.escape(message)) as caught:
            log.append_many(batch, key=key)
        assert caught.value.rule == rule and caught.value.spec is bad[-1]
        assert f"seq {size + len(batch) - 1}: refused" in str(caught.value)
        assert log.size == size  # nothing of the batch was appended


def test_the_store_projects_events_it_has_not_seen(pg_server: Any) -> None:
    """A ledger whose projection lags (copied in) is projected before the next append."""
    url = pg_server.url(schema="g_catch_up")
    log, key = _bare(url)
    with log:
        s = log.append("run.started", {}, key=key).seq
        r1 = log.append_many([_request("a", 1, s)], key=key)[0].seq
        log.append_many([_responded("a", 1, r1)], key=key)
        for table in ("pj_trials", "pj_requests", "pj_sessions"):
            log._conn.execute(f"DELETE FROM {table}")
        log._conn.execute("UPDATE pj_meta SET projected = 0, spent_usd = 0")
        with pytest.raises(RefusedError, match="no request may follow it"):
            log.append_many([_request("a", 2, s)], key=key)


# ---------------------------------------------------------------------- leases


def test_two_workers_racing_for_one_trial_one_gets_it(pg_server: Any) -> None:
    import threading

    from ledger._workers import WorkerLink

    url = pg_server.url(schema="g_race")
    log, _key = _bare(url)
    log.close()
    where = Ledger.location(url)
    links = [WorkerLink(where, f"w{i}", 30.0) for i in range(2)]  # type: ignore[arg-type]
    try:
        for k in range(25):
            trial = f"t{k}"
            barrier = threading.Barrier(2)
            got: list[list[str]] = [[], []]

            def claim(i: int, trial: str = trial, barrier: Any = barrier, got: Any = got) -> None:
                barrier.wait()
                got[i] = [c.trial for c in links[i].claim([trial], 1)[0]]

            threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert sorted(got[0] + got[1]) == [trial], (k, got)
            loser = links[1] if got[0] else links[0]
            assert loser.claim([trial], 1) == ([], set(), False)  # held: nothing free to choose
        # a lease that ran out is free again; a live one is not
        links[0]._run("UPDATE leases SET expires = now() - interval '1 second' WHERE trial = 't0'")
        holder = links[0]._run("SELECT worker FROM leases WHERE trial = 't0'").fetchone()[0]
        other = links[1] if holder == "w0" else links[0]
        sql = "SELECT trial FROM leases WHERE worker = ? AND trial <> 't0' ORDER BY trial"
        held = links[0]._run(sql, (holder,)).fetchone()[0]
        assert [c.trial for c in other.claim(["t0", held], 2)[0]] == ["t0"]
    finally:
        for link in links:
            link.close()


# ---------------------------------------------------------------------- workers


def count_kind(url: str, kind: str) -> int:
    with Ledger.open(url, readonly=True) as log:
        row = log._conn.execute("SELECT COUNT(*) FROM events WHERE kind = ?", (kind,)).fetchone()
    return int(row[0])


def wait_for(url: str, kind: str, n: int, proc: ForkedCli | None = None) -> None:
    deadline = time.monotonic() + 60
    while count_kind(url, kind) < n:
        assert time.monotonic() < deadline, f"no {n} {kind} within 60 s"
        assert proc is None or proc.poll() is None, proc.communicate()
        time.sleep(0.05)


@pytest.mark.slow  # a process killed or frozen: seconds each (CI runs -m slow)
def test_a_worker_killed_mid_run_is_reaped_and_another_finishes_the_study(
    tmp_path: Path, template: Path, pg_server: Any
) -> None:
    url = pg_server.url(schema="w_kill")
    study = pg_study(tmp_path / "study", template, url, replicates=2)  # 70 trials
    with FakeMessagesServer(latency_ms=300) as server:
        proc = start_worker(study, server, "--concurrency", "4", "--lease-seconds", "1")
        wait_for(url, "trial.responded", 6, proc)
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        result = run_study(
            study, study_key(), backend(server), RunOptions(concurrency=8, lease_seconds=1)
        )
    assert result.reason == "complete", result
    kinds = check_exactly_once(url, trials=70)
    events = events_of(url)
    first, second = [e for e in events if e.kind == "run.started"]
    stops = [e for e in events if e.kind == "run.stopped"]
    assert [s.body["session"] for s in stops] == [first.seq, second.seq]
    lost = stops[0]
    assert lost.body["reason"].startswith("lost: worker ") and lost.seq < second.seq
    interrupted = [
        e for e in events if e.kind == "trial.failed" and e.body["error_type"] == "interrupted"
    ]
    # the dead worker's calls in flight, closed inside its session, before its stop
    assert 1 <= len(interrupted) <= 4 and all(first.seq < e.seq < lost.seq for e in interrupted)
    assert lost.body["interrupted"] == len(interrupted)
    assert "concurrent" not in second.body  # the dead session was closed before it started
    assert kinds["trial.responded"] == 70
    verify_copy(url, tmp_path / "copy")


def test_two_worker_processes_share_a_study_and_each_trial_is_answered_once(
    tmp_path: Path, template: Path, pg_server: Any
) -> None:
    url = pg_server.url(schema="w_two")
    study = pg_study(tmp_path / "study", template, url, replicates=2)  # 70 trials
    with FakeMessagesServer(latency_ms=60) as server:
        procs = [start_worker(study, server, "--concurrency", "4") for _ in range(2)]
        outs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err.decode()
    check_exactly_once(url, trials=70)
    events = events_of(url)
    sessions = [e for e in events if e.kind == "run.started"]
    assert len(sessions) == 2 and sessions[1].body.get("concurrent") == [sessions[0].seq]
    by_session = Counter(e.body["session"] for e in events if e.kind == "trial.requested")
    assert set(by_session) == {s.seq for s in sessions}  # both did some of the work
    assert sum(by_session.values()) == 70  # no trial was sent twice
    export_and_verify(study, tmp_path / "archive", url)


def status_of(study: Path) -> dict[str, Any]:
    import json

    from click.testing import CliRunner

    from ledger.cli import main

    result = CliRunner().invoke(main, ["status", str(study), "--json"])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.output))


@pytest.mark.slow  # a process killed or frozen: seconds each (CI runs -m slow)
def test_a_frozen_worker_whose_lease_ran_out_records_its_late_answers_as_superseded(
    tmp_path: Path, template: Path, pg_server: Any
) -> None:
    """Its final outcomes are refused (another worker's came first): each request still gets
    exactly one outcome, a non-final ``superseded`` failure, and the study verifies."""
    url = pg_server.url(schema="w_frozen")
    study = pg_study(tmp_path / "study", template, url, replicates=1)  # 35 trials
    with FakeMessagesServer(latency_ms=1500) as server:
        proc = start_worker(study, server, "--concurrency", "3")
        wait_for(url, "trial.requested", 3, proc)
        proc.send_signal(signal.SIGSTOP)  # its three calls are in flight
        try:
            shown = status_of(study)
            assert [(w["pid"], w["mode"], w["live"]) for w in shown["workers"]] == [
                (proc.pid, "shared", True)
            ]
            assert shown["workers"][0]["leases"] >= 3
            with Ledger.open(url) as log:  # its leases run out (a heartbeat that cannot reach)
                log._conn.execute("UPDATE leases SET expires = now() - interval '1 second'")
            server.latency_ms = 0
            result = run_study(
                study, study_key(), backend(server), RunOptions(concurrency=8, lease_seconds=30)
            )
            assert result.reason == "complete", result
        finally:
            proc.send_signal(signal.SIGCONT)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert status_of(study)["workers"] == []  # both stopped and left
    check_exactly_once(url, trials=35)
    events = events_of(url)
    superseded = [
        e for e in events if e.kind == "trial.failed" and e.body["error_type"] == "superseded"
    ]
    assert len(superseded) == 3 and not any(e.body["final"] for e in superseded)
    first = next(e for e in events if e.kind == "run.started")
    stops = {e.body["session"]: e for e in events if e.kind == "run.stopped"}
    assert all(first.seq < e.seq < stops[first.seq].seq for e in superseded)
    verify_copy(url, tmp_path / "copy")


# ---------------------------------------------------------------------- the acceptance soak


@pytest.mark.slow
def test_soak_four_workers_under_chaos_answer_each_of_2030_trials_once(
    tmp_path: Path, template: Path, pg_server: Any
) -> None:
    """Four ``ledger run`` processes on a 2,030-trial study; a chaos loop SIGKILLs a random
    worker (and restarts it) 10 times (22 with ``PROMPT_LEDGER_FULL_SOAK=1``: ``helpers.soak``)
    and ``kill -9``s PostgreSQL twice, after the third and the seventh kill (the seventh and the
    fifteenth in the full soak). Afterwards every request has one outcome, every trial one
    final outcome, the exported archive verifies (``verify_path``, whole: chain, signatures,
    checkpoints, re-scoring and re-analysis), and a final resume has nothing left to do."""
    import random

    url = pg_server.url(schema="soak_chaos")
    study = pg_study(tmp_path / "study", template, url, replicates=58)  # 2,030 trials
    rng = random.Random(20261128)
    logs = tmp_path / "logs"
    logs.mkdir()
    args = ("--concurrency", "8", "--max-attempts", "30", "--lease-seconds", "2")
    target = soak(10, 22)
    kills = restarts = 0
    with FakeMessagesServer(
        latency_ms=40,
        fault_rate=0.02,
        fault_kinds=("429", "500", "drop"),
        retry_after=0.1,
        seed=34,
    ) as server:
        # each worker a process forked from one that imported the runner once (ForkedCli)
        argv = ["run", str(study), "--base-url", server.base_url, *args]
        env = dict(os.environ, ANTHROPIC_API_KEY="test")
        workers = [ForkedCli(argv, env, logs / f"w{i}.log") for i in range(4)]
        spawned = 4
        pg_kills_at = {7, 15} if target > 10 else {3, 7}
        started = time.monotonic()
        while kills < target or restarts < 2:
            assert time.monotonic() - started < 1200, "the chaos loop did not finish in 20 min"
            time.sleep(rng.uniform(0.3, 1.2))
            if kills in pg_kills_at:
                pg_kills_at.discard(kills)
                pg_server.kill()
                time.sleep(rng.uniform(0.2, 1.0))
                pg_server.restart_after_kill()
                restarts += 1
            with Ledger.open(url, readonly=True) as log:  # workers whose session runs
                rows = log._conn.execute("SELECT pid FROM workers").fetchall()
            running = {r[0] for r in rows}
            ready = [w for w in workers if w.pid in running and w.poll() is None]
            if ready:
                victim = rng.choice(ready)
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                kills += 1
            for j, w in enumerate(workers):  # restart every worker that is gone
                if w.poll() is not None:
                    workers[j] = ForkedCli(argv, env, logs / f"w{j}.log")
                    spawned += 1
        deadline = time.monotonic() + 900
        while any(w.poll() is None for w in workers):  # let them finish the study
            assert time.monotonic() < deadline, "the workers did not finish in 15 min"
            time.sleep(0.5)
        final = subprocess.run(
            [*CLI, "run", str(study), "--base-url", server.base_url, *args, "--json"],
            env=dict(os.environ, ANTHROPIC_API_KEY="test"),
            capture_output=True,
            text=True,
            timeout=900,
        )
    assert final.returncode == 0, final.stdout + final.stderr
    assert '"stopped": "complete"' in final.stdout
    assert kills >= target and restarts == 2
    kinds = check_exactly_once(url, trials=2030)
    assert kinds["trial.responded"] == 2030  # answered once each: no trial was given up
    events = events_of(url)
    assert kinds["run.started"] == kinds["run.stopped"]  # every session closed, reaped or not
    assert kinds["run.started"] > kills and spawned > kills
    interrupted = sum(
        1 for e in events if e.kind == "trial.failed" and e.body["error_type"] == "interrupted"
    )
    assert interrupted > 0
    assert any(e.body.get("concurrent") for e in events if e.kind == "run.started")
    with Ledger.open(url, readonly=True) as log:
        assert log._conn.execute("SELECT COUNT(*) FROM workers").fetchone()[0] == 0
        sizes = {cp.size for cp in log.checkpoints()}
    stops = [e.seq + 1 for e in events if e.kind == "run.stopped"]
    assert set(stops) <= sizes  # every session's stop checkpoint was signed
    export_and_verify(study, tmp_path / "archive", url)  # verify_path: what python -m verify runs


def test_a_trial_left_before_the_sessions_last_is_taken_by_a_new_session(
    tmp_path: Path, template: Path, pg_server: Any
) -> None:
    """First requests ascend within a session: a never-requested trial another worker gave
    back after this session went past it is run by a new session (``rotate``)."""
    url = pg_server.url(schema="w_rotate")
    study = pg_study(tmp_path / "study", template, url, replicates=1)  # 35 trials
    first = events_of(url)
    with Ledger.open(url) as log:
        ids = log.blob(next(e for e in first if e.kind == "protocol.locked").blobs["schedule"])
        head = ids.decode().splitlines()[0]
        log._conn.execute(
            "INSERT INTO leases (trial, worker, expires) VALUES (?, 'ghost', now() + "
            "interval '1 hour')",
            (head,),
        )
    ghost = Ledger.open(url)

    def progress(_counters: Any, final: int, _total: int) -> None:
        if final >= 20:  # the ghost gives its trial back once the session went past it
            ghost._conn.execute("DELETE FROM leases WHERE worker = 'ghost'")

    with ghost, FakeMessagesServer() as server:
        result = run_study(
            study, study_key(), backend(server), RunOptions(concurrency=4), progress=progress
        )
    assert result.reason == "complete", result
    check_exactly_once(url, trials=35)
    events = events_of(url)
    started = [e for e in events if e.kind == "run.started"]
    stopped = [e for e in events if e.kind == "run.stopped"]
    assert len(started) == 2 and stopped[0].body["reason"].startswith("rotate: 1 trial(s)")
    late = [
        e for e in events if e.kind == "trial.requested" and e.body["session"] == started[1].seq
    ]
    assert [e.body["trial"] for e in late] == [head]
    verify_copy(url, tmp_path / "copy")


def test_a_worker_does_not_join_one_that_runs_alone(
    tmp_path: Path, template: Path, pg_server: Any
) -> None:
    url = pg_server.url(schema="w_alone")
    study = pg_study(tmp_path / "study", template, url, replicates=1)
    with Ledger.open(url) as log:  # a live worker of a study with steps, say
        log._conn.execute(
            "INSERT INTO workers (id, session, host, pid, mode, lease_seconds, expires) VALUES "
            "('elsewhere:1:abcdef', 5, 'elsewhere', 1, 'alone', 30, now() + interval '1 hour')"
        )
    size = len(events_of(url))
    with FakeMessagesServer() as server, pytest.raises(StudyError) as caught:
        run_study(study, study_key(), backend(server), RunOptions())
    want = (
        "worker elsewhere:1:abcdef (pid 1 on elsewhere, run session 5) is running this "
        "study, and no two workers may share it: it runs the study alone"
    )
    assert want in str(caught.value)
    assert len(events_of(url)) == size  # nothing was recorded, not even a preflight


def test_the_budget_is_the_studys_across_workers(
    tmp_path: Path, template: Path, pg_server: Any
) -> None:
    """Two workers with --budget-usd: together they never spend more than the budget."""
    url = pg_server.url(schema="w_budget")
    study = pg_study(tmp_path / "study", template, url, replicates=2)  # 70 trials
    budget = 0.05
    with FakeMessagesServer(latency_ms=300) as server:
        procs = [
            start_worker(study, server, "--concurrency", "2", "--budget-usd", str(budget), "--json")
            for _ in range(2)
        ]
        outs = [p.communicate(timeout=120) for p in procs]
    events = events_of(url)
    spent = sum(
        e.body["cost_usd"]
        for e in events
        if e.kind in ("trial.responded", "run.preflight")
        and isinstance(e.body.get("cost_usd"), float)
    )
    stops = [e.body["reason"] for e in events if e.kind == "run.stopped"]
    assert len(stops) == 2 and all(r.startswith("budget: ") for r in stops), (stops, outs)
    assert 0 < spent <= budget
