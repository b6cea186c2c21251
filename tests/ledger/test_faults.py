"""Concurrency and crash safety with real processes and SIGKILL."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from helpers import fixed_key
from locations import TESTS_DIR

from ledger import Ledger, SigningKey
from verify import verify_ledger_file

WORKER = str(TESTS_DIR / "workers" / "append_worker.py")


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, WORKER, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_four_processes_append_into_one_linear_chain(tmp_path: Path) -> None:
    owner = fixed_key("example.org/owner")
    path = tmp_path / "ledger.db"
    keyfiles = []
    with Ledger.create(path, origin="example.org/concurrency", key=owner) as log:
        for w in range(4):
            key = SigningKey.generate(f"example.org/runner{w}")
            log.add_key(key.vkey, "runner", key=owner)
            keyfiles.append(str(key.save(tmp_path / f"runner{w}.key")))
    procs = [_spawn("concurrent", str(path), keyfiles[w], str(w), "2000", str(w)) for w in range(4)]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    with Ledger.open(path) as log:
        assert log.size == 5 + 8000
        seen: dict[int, list[int]] = defaultdict(list)
        prev = None
        for event in log.events():
            if prev is not None:
                assert event.prev == prev.leaf_hash.hex()
            prev = event
            if event.kind == "trial.requested":
                seen[event.body["worker"]].append(event.body["i"])
    assert {w: v for w, v in seen.items()} == {w: list(range(2000)) for w in range(4)}
    report = verify_ledger_file(path)
    assert report.ok, report.failures


def _batch_setup(tmp_path: Path) -> tuple[Path, str]:
    owner = fixed_key("example.org/owner")
    path = tmp_path / "ledger.db"
    runner = SigningKey.generate("example.org/runner")
    with Ledger.create(path, origin="example.org/crash", key=owner) as log:
        log.add_key(runner.vkey, "runner", key=owner)
    return path, str(runner.save(tmp_path / "runner.key"))


def _kill(proc: subprocess.Popen[str], *, may_have_finished: bool = False) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)  # reap it and close its pipes
    if may_have_finished and proc.returncode == 0:
        assert "done" in out  # it committed and exited between poll() and kill()
        return
    assert proc.returncode == -signal.SIGKILL


def _assert_whole_or_nothing(path: Path, before: int, batch: int) -> int:
    with Ledger.open(path) as log:
        size = log.size
        raw_blobs = log.db.execute("SELECT COUNT(*) FROM blobs").fetchone()[0]
    assert size in (before, before + batch), f"partial batch: {size - before} of {batch}"
    assert raw_blobs == size - 2  # one unique blob per batched event, none half-written
    report = verify_ledger_file(path)
    assert report.ok, report.failures
    return size


def test_sigkill_inside_the_transaction_leaves_nothing(tmp_path: Path) -> None:
    path, keyfile = _batch_setup(tmp_path)
    rng = random.Random(7)
    size = 2
    for _ in range(10):
        proc = _spawn("batch", str(path), keyfile, "2000", str(rng.randint(1, 2000)))
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        assert proc.stdout.readline().strip() == "stalled"
        _kill(proc)
        assert _assert_whole_or_nothing(path, size, 2000) == size
    with Ledger.open(path) as log:  # the file is still writable after every kill
        log.append("trial.requested", {}, key=SigningKey.load(keyfile))
        assert log.size == size + 1


@pytest.mark.slow
def test_sigkill_at_random_moments_keeps_batches_whole(tmp_path: Path) -> None:
    path, keyfile = _batch_setup(tmp_path)
    rng = random.Random(11)
    size = 2
    outcomes = {"none": 0, "whole": 0}
    for _ in range(12):
        proc = _spawn("batch", str(path), keyfile, "3000")
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.4))
        if proc.poll() is None:
            _kill(proc, may_have_finished=True)
        else:
            proc.communicate()
        new_size = _assert_whole_or_nothing(path, size, 3000)
        outcomes["whole" if new_size > size else "none"] += 1
        size = new_size
    print(f"random-kill outcomes: {outcomes}")
