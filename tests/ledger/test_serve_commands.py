"""`amend`, `checkpoint`, `receipt`, `posthoc`, `review` on a study behind a real `ledger serve`.

docs/service.md §9.

Real parts only: a `ledger serve --store DIR` process on 127.0.0.1 (its own process, started
here and stopped by its handle), a study folder whose ``ledger.store`` names it, real keys and
real HTTP. Each refusal asserts its message and that nothing reached the service's store.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from serve_process import serve, stop

from ledger import Ledger, SigningKey
from ledger._note import open_note
from ledger.cli import main


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A `ledger serve --store FOLDER --allow-create` process: (base URL, store folder)."""
    store = tmp_path / "store"
    store.mkdir()
    proc, base = serve(str(store), "--allow-create")
    try:
        yield base, store
    finally:
        stop(proc)


def _ledger(*args: Any, ok: bool = True) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert (result.exit_code == 0) == ok, (args, result.output)
    return str(result.output)


@pytest.fixture
def remote_study(
    served: tuple[str, Path], tmp_path: Path, ledger_home: Path
) -> tuple[Path, str, Path]:
    """A locked study whose ledger is behind the service: (folder, study URL, store file)."""
    base, store = served
    root = tmp_path / "remote-study"
    url = f"{base}/remote-study"
    _ledger("new", root, "--store", url)
    spec = root / "study.toml"
    spec.write_text(spec.read_text().replace("replicates = 30", "replicates = 1"))
    _ledger("lock", root)
    return root, url, store / "remote-study.db"


def _events(path: Path | str) -> list[Any]:
    with Ledger.open(path, readonly=True) as log:
        return list(log.events())


def _checkpoints(path: Path) -> list[Any]:
    with Ledger.open(path, readonly=True) as log:
        return log.checkpoints()


def test_amend_through_the_service_records_the_change_and_refuses_what_it_must(
    remote_study: tuple[Path, str, Path],
) -> None:
    root, _, stored = remote_study
    before = len(_events(stored))
    refused = _ledger("amend", root, "--reason", "nothing changed", ok=False)
    assert "no locked file has changed; nothing to amend" in refused
    spec = root / "study.toml"
    locked_spec = spec.read_bytes()
    spec.write_bytes(locked_spec + b"\n# an edit after lock\n")
    refused = _ledger("amend", root, "--reason", "edit the spec", ok=False)
    assert "may not change after lock (not listed in study.amendable): study.toml" in refused
    assert len(_events(stored)) == before
    spec.write_bytes(locked_spec)
    readme = root / "README.md"
    readme.write_text(readme.read_text() + "\nA typo fixed after lock.\n")
    out = _ledger("amend", root, "--reason", "fixed a typo")
    events = _events(stored)
    assert len(events) == before + 1 and f"at seq {before}" in out
    amended = events[-1]
    assert amended.kind == "protocol.amended" and amended.body["reason"] == "fixed a typo"
    (change,) = amended.body["changes"]
    assert change["path"] == "README.md"
    with Ledger.open(stored, readonly=True) as log:
        assert log.blob(amended.blobs[change["blob"]]) == readme.read_bytes()
    assert _ledger("amend", root, "--reason", "again", ok=False).count("nothing to amend") == 1
    assert len(_events(stored)) == before + 1


def test_checkpoint_through_the_service_is_stored_signed_and_all_or_nothing(
    remote_study: tuple[Path, str, Path], tmp_path: Path, ledger_home: Path
) -> None:
    root, url, stored = remote_study
    owner_file = next((ledger_home / "keys").glob("*.key"))
    owner = SigningKey.load(owner_file)
    out_file = tmp_path / "registration.checkpoint"
    note = _ledger("checkpoint", url, "--key", owner_file, "--out", out_file)
    assert out_file.read_text() == note
    # nothing was appended since lock: the same note as the registration's, stored once
    assert [c.note for c in _checkpoints(stored)] == [note]
    before = _checkpoints(stored)
    _ledger("append", root, "note.added", "--body", '{"text": "pilot"}', "--key", owner_file)
    note = _ledger("checkpoint", root, "--key", owner_file, "--out", out_file)  # the folder
    assert out_file.read_text() == note
    latest = _checkpoints(stored)[-1]
    assert len(_checkpoints(stored)) == len(before) + 1
    assert latest.note == note and latest.size == len(_events(stored))
    assert open_note(note, [owner.verifier]).verified == (owner.verifier,)
    with Ledger.open(stored, readonly=True) as log:
        assert latest.root == log.root()
    _ledger("append", root, "note.added", "--body", '{"text": "later"}', "--key", owner_file)
    before = _checkpoints(stored)
    stranger = SigningKey.generate("example.org/stranger")
    stranger_file = tmp_path / "stranger.key"
    stranger.save(stranger_file)
    refused = _ledger("checkpoint", root, "--key", stranger_file, ok=False)
    assert stranger.actor.split("+")[0] in refused and "registered" in refused
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    refused = _ledger("checkpoint", root, "--key", owner_file, "--out", blocked / "cp", ok=False)
    assert "--out" in refused
    assert _checkpoints(stored) == before  # neither reached the store


def test_the_viewers_verification_of_a_study_behind_the_service_reads_a_copy(
    remote_study: tuple[Path, str, Path],
) -> None:
    """`ledger view`'s background check fetches the study into a SQLite copy and verifies it
    (``python -m verify`` cannot read a URL); a study the service does not hold is an error."""
    from analysis.view._app import Verification, verify_target

    root, url, _ = remote_study
    assert verify_target(root) == url
    verification = Verification()
    verification.start(verify_target(root)).join(timeout=300)
    assert verification.state == "passed", verification.summary()
    assert verification.size == len(_events(remote_study[2]))
    gone = Verification()
    gone.start(url.rsplit("/", 1)[0] + "/no-such-study").join(timeout=300)
    assert gone.state == "error" and "cannot fetch the study from the service" in str(gone.error)
    assert "no study 'no-such-study'" in str(gone.error)


def _local_twin(root: Path, stored: Path | str, tmp_path: Path) -> Path:
    """A copy of the study folder whose ledger is a copy of the service's store (SQLite file
    or PostgreSQL schema) in a SQLite file: `ledger store copy`, which checks the copy."""
    import shutil

    twin = tmp_path / "twin"
    shutil.copytree(root, twin)
    (twin / "ledger.store").unlink()
    _ledger("store", "copy", stored, twin / "ledger.db")
    return twin


def _check_receipts(root: Path, stored: Path | str, tmp_path: Path, ledger_home: Path) -> None:
    """`ledger receipt` through the service writes, byte for byte, the receipts the same log
    gives locally; they verify with the owner's vkey; an unknown trial is refused."""
    _ledger("run", root, "--backend", "simulated")
    trial = next(e.body["trial"] for e in _events(stored) if e.kind == "trial.responded")
    out = _ledger("receipt", root, trial, "--out", tmp_path / "remote")
    remote = sorted((tmp_path / "remote").iterdir())
    assert remote and all(f"wrote {p}" in out for p in remote)
    twin = _local_twin(root, stored, tmp_path)
    _ledger("receipt", twin, trial, "--out", tmp_path / "local")
    local = sorted((tmp_path / "local").iterdir())
    assert [p.name for p in remote] == [p.name for p in local]
    assert [p.read_bytes() for p in remote] == [p.read_bytes() for p in local]
    vkey = next((ledger_home / "keys").glob("*.vkey"))
    checked = _ledger("verify-receipt", *remote, "--trusted-key", f"@{vkey}")
    assert checked.count("PASS ") == len(remote) and trial in checked, checked
    before = len(_events(stored))
    refused = _ledger("receipt", root, "Z|nothing|9", "--out", tmp_path / "none", ok=False)
    assert "no event names the trial 'Z|nothing|9'" in refused
    assert len(_events(stored)) == before


def test_receipts_through_the_service_are_the_local_ones_and_verify(
    remote_study: tuple[Path, str, Path], tmp_path: Path, ledger_home: Path
) -> None:
    root, _, stored = remote_study
    _check_receipts(root, stored, tmp_path, ledger_home)


@pytest.mark.slow
def test_receipts_through_a_service_on_postgresql_are_the_local_ones(
    pg_server: Any, tmp_path: Path, ledger_home: Path
) -> None:
    from ledger import schema_for

    name = f"receipts-{os.getpid()}-{int(time.time() * 1000) % 10**8}"
    proc, base = serve(pg_server.url(), "--allow-create")
    try:
        root = tmp_path / "pg-study"
        _ledger("new", root, "--store", f"{base}/{name}")
        spec = root / "study.toml"
        spec.write_text(spec.read_text().replace("replicates = 30", "replicates = 1"))
        _ledger("lock", root)
        _check_receipts(root, pg_server.url(schema=schema_for(name)), tmp_path, ledger_home)
    finally:
        stop(proc)


@pytest.mark.slow
def test_posthoc_through_the_service_is_recorded_signed_and_refusals_append_nothing(
    remote_study: tuple[Path, str, Path], ledger_home: Path
) -> None:
    """`ledger posthoc` on a study behind the service: one analysis.posthoc event and a
    checkpoint covering it in the service's store; a name used before, an unknown arm and
    an empty reason are refused with the reason and append nothing."""
    root, _, stored = remote_study
    _ledger("run", root, "--backend", "simulated")
    for step in ("score", "unblind", "analyze"):
        _ledger(step, root)
    before = len(_events(stored))
    out = _ledger(
        "posthoc",
        root,
        "ab",
        "--contrast",
        "A",
        "B",
        "--test",
        "paired-t",
        "--reason",
        "A minus B, paired",
    )
    events = _events(stored)
    assert len(events) == before + 1 and "recorded posthoc.ab (post hoc, no verdict)" in out
    recorded = events[-1]
    assert recorded.kind == "analysis.posthoc" and recorded.body["id"] == "posthoc.ab"
    assert recorded.body["declared"]["reason"] == "A minus B, paired"
    owner = SigningKey.load(next((ledger_home / "keys").glob("*.key")))
    assert recorded.actor == owner.actor
    latest = _checkpoints(stored)[-1]
    assert latest.size == len(events) and open_note(latest.note, [owner.verifier]).verified
    for args, reason in [
        (("ab", "--contrast", "A", "B", "--reason", "again"), "'ab' already recorded at seq"),
        (("az", "--contrast", "A", "Z", "--reason", "no such arm"), "unknown arm 'Z'"),
        (("ac", "--contrast", "A", "C", "--reason", " "), "reason"),
    ]:
        refused = _ledger("posthoc", root, *args, "--test", "paired-t", ok=False)
        assert reason in refused, refused
    assert len(_events(stored)) == before + 1


@pytest.mark.slow
def test_review_through_the_service_lists_records_and_refuses_what_it_must(
    served: tuple[str, Path], tmp_path: Path, ledger_home: Path
) -> None:
    """`ledger review` on a study behind the service: the sample is listed, a reviewer's
    review is one review.recorded event in the service's store, and a key without the
    reviewer role, a subject outside the sample and a label the judge step does not know
    are refused with the reason, appending nothing."""
    from helpers import fixed_key
    from steps_study import write_study

    from analysis._scoring import score_study
    from runner._backends import SimulatedBackend
    from runner._execute import RunOptions, run_study
    from runner._lock import lock_study

    base, store = served
    owner = fixed_key("steps.example/owner")
    root = write_study(tmp_path / "steps-study")
    (root / "ledger.store").write_text(f"{base}/steps-study\n")
    lock_study(root, owner)  # creates the study through the service
    stored = store / "steps-study.db"
    assert stored.is_file() and not (root / "ledger.db").exists()
    assert run_study(root, owner, SimulatedBackend(), RunOptions(concurrency=4)).reason == (
        "complete"
    )
    score_study(root, owner)
    listed = _ledger("review", root, "--sample", "audit").splitlines()
    assert listed and all(line.startswith("seq ") for line in listed)
    subject = listed[0].split("\t")[0].removeprefix("seq ")
    owner_file, reviewer_file = tmp_path / "owner.key", tmp_path / "reviewer.key"
    owner.save(owner_file)
    reviewer = SigningKey.generate("steps.example/reviewer")
    reviewer.save(reviewer_file)
    before = len(_events(stored))
    refused = _ledger(
        "review",
        root,
        "--sample",
        "audit",
        "--subject",
        subject,
        "--value",
        "correct",
        "--key",
        owner_file,
        ok=False,
    )
    assert "role 'reviewer'" in refused and len(_events(stored)) == before
    _ledger("key", "add", root, reviewer.vkey, "--role", "reviewer", "--key", owner_file)
    before = len(_events(stored))
    for args, reason in [
        (("--subject", "1", "--value", "correct"), "is not in review sample 'audit'"),
        (("--subject", subject, "--value", "maybe"), "is not a label"),
    ]:
        refused = _ledger(
            "review", root, "--sample", "audit", *args, "--key", reviewer_file, ok=False
        )
        assert reason in refused, refused
    assert len(_events(stored)) == before
    _ledger(
        "review",
        root,
        "--sample",
        "audit",
        "--subject",
        subject,
        "--value",
        "incorrect",
        "--key",
        reviewer_file,
    )
    events = _events(stored)
    assert len(events) == before + 1
    recorded = events[-1]
    assert recorded.kind == "review.recorded" and recorded.actor == reviewer.actor
    assert recorded.body["subject"] == int(subject) and recorded.body["value"] == "incorrect"
    assert "reviewed: incorrect" in _ledger("review", root, "--sample", "audit")


def test_store_copy_fetches_a_study_from_the_service_and_refuses_to_copy_into_one(
    remote_study: tuple[Path, str, Path], tmp_path: Path
) -> None:
    """`ledger store copy` reads a study through the service (its folder or its URL) into a
    new ledger equal to the service's store, row for row; copying into a service, from a
    study it does not hold, or over an existing ledger is refused and leaves nothing."""
    root, url, stored = remote_study
    assert _checkpoints(stored)  # the lock's registration checkpoint
    out = tmp_path / "out"
    out.mkdir()
    for name, src in (("from-folder.db", root), ("from-url.db", url)):
        said = _ledger("store", "copy", src, out / name)
        assert f"from {url} to {out / name}" in said
        assert [(e.envelope, e.signature) for e in _events(out / name)] == [
            (e.envelope, e.signature) for e in _events(stored)
        ]
        assert [(c.size, c.root, c.note, c.created) for c in _checkpoints(out / name)] == [
            (c.size, c.root, c.note, c.created) for c in _checkpoints(stored)
        ]
    refused = _ledger("store", "copy", out / "from-url.db", f"{url}-copy", ok=False)
    assert "does not copy into `ledger serve`" in refused
    refused = _ledger("store", "copy", url + "-none", out / "none.db", ok=False)
    assert "no study 'remote-study-none'" in refused
    refused = _ledger("store", "copy", url, out / "from-url.db", ok=False)
    assert "a ledger is already there" in refused
    left = sorted(p.name for p in out.iterdir() if not p.name.endswith(("-wal", "-shm")))
    assert left == ["from-folder.db", "from-url.db"]  # no none.db, no scratch folder
    assert not (stored.parent / "remote-study-copy.db").exists()


def test_store_copy_fetches_a_study_from_the_service_into_a_postgresql_schema(
    remote_study: tuple[Path, str, Path],
    pg_server: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`ledger store copy URL postgresql://...?schema=S` (docs/service.md §9): the schema then
    holds the service's study row for row, with the same root; a second copy into it, and a
    copy of a study the service does not hold, are refused and create nothing (no schema, no
    scratch folder left in the temporary directory)."""
    import tempfile

    from ledger import schema_for

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    _, url, stored = remote_study
    schema = schema_for(f"copied-{os.getpid()}-{int(time.time() * 1000) % 10**8}")
    target = pg_server.url(schema=schema)
    with Ledger.open(stored, readonly=True) as log:
        root = log.root()
    said = _ledger("store", "copy", url, target)
    assert f"root {root.hex()} agrees" in said
    assert [(e.envelope, e.signature) for e in _events(target)] == [
        (e.envelope, e.signature) for e in _events(stored)
    ]
    with Ledger.open(target, readonly=True) as pg:
        assert pg.root() == root
        copied = [(c.size, c.root, c.note, c.created) for c in pg.checkpoints()]
    assert copied == [(c.size, c.root, c.note, c.created) for c in _checkpoints(stored)]
    refused = _ledger("store", "copy", url, target, ok=False)
    assert "already there; refusing to overwrite it" in refused
    assert len(_events(target)) == len(_events(stored))
    missing = pg_server.url(schema=schema + "_none")
    refused = _ledger("store", "copy", url + "-none", missing, ok=False)
    assert "no study 'remote-study-none'" in refused
    refused = _ledger("log", missing, ok=False)
    assert "no ledger there (schema" in refused
    assert list(scratch.iterdir()) == []
