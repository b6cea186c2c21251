"""The verifier's worker pool (issue 41): the same report with workers as without.

The pool is forced on for the golden archive (474 lines) with chunks of a few events and of a
few KiB of files, so signatures and file hashes cross many chunks and workers; the report must
equal the serial one field for field, the first failure included.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import science_skipped
from locations import REPO

import verify._archive.ledger_checks
import verify._ledgerfile
import verify._reader.files
from verify import Report, Status, verify_archive
from verify._pool import AUTO_JOBS, ChildError, available_cpus, forked, resolve_jobs

GOLDEN = REPO / "archive" / "prompt-tumbling-e"


def _bad_signature(archive: Path, seq: int) -> None:
    """Flip one bit of line ``seq``'s signature (still 64 bytes of standard base64)."""
    events = archive / "ledger" / "events.jsonl"
    lines = events.read_bytes().split(b"\n")
    line = json.loads(lines[seq])
    raw = bytearray(base64.b64decode(line["signature"]))
    raw[5] ^= 0x01
    line["signature"] = base64.b64encode(bytes(raw)).decode("ascii")
    lines[seq] = json.dumps(line, separators=(",", ":")).encode("utf-8")
    events.write_bytes(b"\n".join(lines))


def _bad_blob(archive: Path, index: int) -> str:
    """Change one byte of the ``index``-th blob (by name); return its name."""
    blob = sorted((archive / "blobs").iterdir())[index]
    data = bytearray(blob.read_bytes())
    data[0] ^= 0x01
    blob.write_bytes(bytes(data))
    return blob.name


@pytest.fixture
def pooled(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Force the pool on with tiny chunks; yield the list of pools made (a spy, real pools)."""
    made: list[Any] = []
    real = verify._archive.ledger_checks.worker_pool

    def spy(jobs: int) -> Any:
        pool = real(jobs)
        made.append(pool)
        return pool

    monkeypatch.setattr(verify._archive.ledger_checks, "worker_pool", spy)
    monkeypatch.setattr(verify._ledgerfile, "_MIN_PARALLEL_EVENTS", 0)
    monkeypatch.setattr(verify._ledgerfile, "_MIN_CHUNK", 7)
    monkeypatch.setattr(verify._reader.files, "HASH_CHUNK_BYTES", 4096)
    yield made


def _both(archive: Path, made: list[Any]) -> tuple[Report, Report]:
    with science_skipped():  # the pool reaches the ledger checks and the hashes alone
        serial = verify_archive(archive, jobs=1)
        assert not made, "jobs=1 must not start a pool"
        parallel = verify_archive(archive, jobs=2)
    assert len(made) == 1, "the pool was not used"
    return serial, parallel


def test_pool_gives_the_serial_report_on_a_tampered_archive(
    tmp_path: Path, pooled: list[Any]
) -> None:
    archive = tmp_path / "archive"
    shutil.copytree(GOLDEN, archive)
    lines = (archive / "ledger" / "events.jsonl").read_bytes().count(b"\n")
    late, early = lines - 40, 150  # in different chunks; the early one must be reported
    _bad_signature(archive, late)
    _bad_signature(archive, early)
    blob = _bad_blob(archive, 200)
    serial, parallel = _both(archive, pooled)
    assert parallel.to_dict() == serial.to_dict()
    sig = parallel.get("signatures")
    assert sig is not None and sig.status is Status.FAIL and sig.seq == early
    assert sig.reason.startswith(f"seq {early}: signature does not verify")
    assert "(and 1 more)" in sig.reason
    blobs = parallel.get("blobs")
    assert blobs is not None and blobs.status is Status.FAIL
    assert f"blobs/{blob}" in blobs.reason and "does not hash to its name" in blobs.reason
    manifest = parallel.get("manifest")
    assert manifest is not None and manifest.status is Status.FAIL and blob in manifest.reason


def test_pool_gives_the_serial_report_on_an_intact_archive(
    tmp_path: Path, pooled: list[Any]
) -> None:
    serial, parallel = _both(GOLDEN, pooled)
    assert parallel.to_dict() == serial.to_dict()
    for name in ("signatures", "blobs", "manifest", "chain", "tree"):
        check = parallel.get(name)
        assert check is not None and check.status is not Status.FAIL, check


def test_jobs_zero_is_one_worker_per_available_cpu() -> None:
    assert resolve_jobs(AUTO_JOBS) == available_cpus() >= 1
    assert resolve_jobs(3) == 3
    with pytest.raises(ValueError, match="jobs is -1"):
        resolve_jobs(-1)


def _changed_response(archive: Path) -> tuple[str, ...]:
    lines = (archive / "ledger" / "events.jsonl").read_bytes().split(b"\n")
    responded = next(
        json.loads(line)["envelope"]
        for line in lines
        if line and json.loads(line)["envelope"]["kind"] == "trial.responded"
    )
    blob = archive / "blobs" / responded["blobs"]["response"]
    blob.write_bytes(blob.read_bytes().replace(b"content", b"kontent", 1))
    return ("blobs", "export-coverage", "manifest", "outcomes", "rescore")


def _changed_trials_csv(archive: Path) -> tuple[str, ...]:
    table = archive / "analysis" / "trials.csv"
    data = table.read_bytes()
    accuracy = re.search(rb",0\.[0-9]{9}([0-8]),", data)  # a trial's accuracy, last digit + 1
    assert accuracy is not None
    at = accuracy.start(1)
    table.write_bytes(data[:at] + bytes([data[at] + 1]) + data[at + 1 :])
    return ("export-coverage", "manifest", "reanalysis")


@pytest.mark.parametrize("tamper", [_changed_response, _changed_trials_csv])
def test_forked_checks_give_the_serial_report_with_the_science(
    simulated_archive: Path, tmp_path: Path, tamper: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With jobs > 1 the archive checks, ``rescore`` and the hashing of the rebuilt tables
    run in forked children beside ``reanalysis`` (forced for this small log: the session's
    simulated archive, whose re-analysis costs two thirds of the golden one's): a changed
    response or dataset table fails the same checks in the same words, first failures
    included."""
    monkeypatch.setattr(verify._ledgerfile, "_MIN_PARALLEL_EVENTS", 0)
    archive = tmp_path / "archive"
    shutil.copytree(simulated_archive, archive)
    failing = tamper(archive)
    serial = verify_archive(archive, jobs=1)
    parallel = verify_archive(archive, jobs=2)
    assert parallel.to_dict() == serial.to_dict()
    assert [c.name for c in parallel.checks] == [c.name for c in serial.checks]
    failed = {c.name for c in parallel.checks if c.status is Status.FAIL}
    assert failed == set(failing), failed
    if "reanalysis" in failing:  # the forked hashing of the rebuilt tables found it
        check = parallel.get("reanalysis")
        assert check is not None
        assert check.reason == "analysis/trials.csv differs from the rebuilt dataset."


def test_a_forked_child_that_fails_is_named() -> None:
    def boom() -> int:
        raise RuntimeError("no table")

    def vanish() -> int:
        os._exit(3)

    assert forked(lambda: 41, "a number")() == 41
    with pytest.raises(ChildError, match="checking the thing stopped: RuntimeError: no table"):
        forked(boom, "the thing")()
    with pytest.raises(ChildError, match="checking the other exited with status 3 before"):
        forked(vanish, "the other")()


def test_a_small_archive_is_verified_in_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below the pool's threshold (the golden archive: 474 lines) ``jobs=2`` forks no child:
    the forks would cost more than they save (and the test suite verifies hundreds)."""
    import verify._archive
    import verify._science

    def refuse(fn: Any, what: str) -> Any:
        raise AssertionError(f"forked {what} for a small archive")

    monkeypatch.setattr(verify._archive, "forked", refuse)
    monkeypatch.setattr(verify._science, "forked", refuse)
    with science_skipped():
        report = verify_archive(GOLDEN, jobs=2)
    assert report.ok, report
