"""`ledger amend` and `ledger checkpoint` on a study behind a real `ledger serve` (service.md §9).

Real parts only: a `ledger serve --store DIR` process on 127.0.0.1 (its own process, started
here and stopped by its handle), a study folder whose ``ledger.store`` names it, real keys and
real HTTP. Each refusal asserts its message and that nothing reached the service's store.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ledger import Ledger, SigningKey
from ledger._note import open_note
from ledger.cli import main


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A `ledger serve --store FOLDER --allow-create` process: (base URL, store folder)."""
    from pg_server import free_port

    store = tmp_path / "store"
    store.mkdir()
    port = free_port()
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "ledger"),
            "serve",
            "--store",
            str(store),
            "--allow-create",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "serving the append API" in line, line
        yield f"http://127.0.0.1:{port}", store
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


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


def _events(path: Path) -> list[Any]:
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
