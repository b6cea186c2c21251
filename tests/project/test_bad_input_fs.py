"""Bad input from the file system: never a traceback, always one line, nothing half-made.

Issue 13's list, one named test per case. Each failing command must exit non-zero with one
line that names the path and says what to do, print no traceback, leave nothing half-made
(no stray file, no event or checkpoint in the ledger), and leave a study that still verifies.

Unwritable paths are real: the tests chmod them and run the command in-process inside
:func:`helpers.permissions_bind`, which makes the permission bits bind even when the suite runs
as root (CI does); a test whose chmod would not bind fails rather than passing vacuously.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from helpers import make_study, permissions_bind, study_key
from locations import SUPPORT_DIR

from ledger import Ledger, StoreError
from ledger.cli import main

OWNER_KEY = "prompt-tumbling-e-owner.key"


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], prog_name="ledger")


def refused(result: Result, *fragments: str | Path, usage: bool = False) -> str:
    """Assert a clean refusal: non-zero exit, one error line, no traceback; return the line."""
    output = result.output
    assert result.exit_code != 0, output
    assert "Traceback" not in output, output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    lines = [line for line in output.splitlines() if line.strip()]
    if usage:  # click's usage errors: "Usage: ...", "Try ...", then the one error line
        assert result.exit_code == 2, output
        lines = [ln for ln in lines if not ln.startswith(("Usage: ", "Try "))]
    assert len(lines) == 1, output
    (line,) = lines
    assert line.startswith("Error: "), output
    for fragment in fragments:
        assert str(fragment) in line, f"{fragment!r} not in {line!r}"
    return line


def verifies(db: Path) -> None:
    result = run("verify", db)
    assert result.exit_code == 0, result.output
    assert "VERIFIED" in result.output


def ledger_state(db: Path) -> tuple[int, int, list[str]]:
    """(events, checkpoints, kinds): what a failed command must not have changed."""
    with Ledger.open(db, readonly=True) as log:
        return log.size, len(log.checkpoints()), [e.kind for e in log.events()]


def listing(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


@contextmanager
def read_only(*paths: Path) -> Iterator[None]:
    """Make ``paths`` (recursively) read-only and the permission bits bind; restore after."""
    saved: list[tuple[Path, int]] = []
    for top in paths:
        for path in [top, *top.rglob("*")] if top.is_dir() else [top]:
            mode = stat.S_IMODE(path.stat().st_mode)
            saved.append((path, mode))
    for path, mode in saved:
        path.chmod(mode & ~0o222)
    try:
        with permissions_bind():
            for directory in (p for p in paths if p.is_dir()):
                with pytest.raises(PermissionError):  # else the test would prove nothing
                    (directory / ".probe").touch()
            yield
    finally:
        for path, mode in reversed(saved):
            path.chmod(mode)


# ---------------------------------------------------------------------- studies


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory, study_template: Path) -> tuple[Path, Path]:
    """A small study locked, run on the simulated backend, scored, unblinded and analysed."""
    mp = pytest.MonkeyPatch()
    home = tmp_path_factory.mktemp("home")
    mp.setenv("PROMPT_LEDGER_HOME", str(home))
    try:
        root = make_study(
            tmp_path_factory.mktemp("analysed") / "study", replicates=1, template=study_template
        )
        for args in (
            ["run", root, "--backend", "simulated"],
            ["score", root],
            ["unblind", root],
            ["analyze", root],
        ):
            result = run(*args)
            assert result.exit_code == 0, result.output
    finally:
        mp.undo()
    return root, home


@pytest.fixture
def study(analysed: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the analysed study; its owner key and secret are in the module's home."""
    source, home = analysed
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(home))
    root = tmp_path / "study"
    shutil.copytree(source, root)
    return root


@pytest.fixture
def unlocked(study_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A study as `ledger new` leaves it: files and a ledger with only its genesis event."""
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    key = study_key()
    key.save(tmp_path / "home" / "keys" / OWNER_KEY, vkey=True)
    root = tmp_path / "unlocked"
    shutil.copytree(study_template, root)
    with Ledger.create(root / "ledger.db", origin="prompt-ledger.local/prompt-tumbling-e", key=key):
        pass
    return root


@pytest.fixture
def locked(study_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A locked study with every trial still to run."""
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    return make_study(tmp_path / "locked", replicates=1, template=study_template)


@pytest.fixture
def unwritable(tmp_path: Path) -> Iterator[Path]:
    """An existing directory nobody may write into (permission bits binding)."""
    directory = tmp_path / "unwritable"
    directory.mkdir()
    with read_only(directory):
        yield directory


# ---------------------------------------------------------------------- unwritable outputs


@pytest.mark.parametrize(
    "case",
    ["keygen --out a new directory inside it", "keygen --out it", "checkpoint --out a file in it"],
)
def test_unwritable_out(case: str, study: Path, unwritable: Path) -> None:
    db = study / "ledger.db"
    before = ledger_state(db)
    key = Path(os.environ["PROMPT_LEDGER_HOME"]) / "keys" / OWNER_KEY
    if case == "keygen --out a new directory inside it":
        result = run("keygen", "example.org/alice", "--out", unwritable / "keys")
        refused(
            result,
            f"key directory {unwritable / 'keys'}",
            "permission denied",
            "fix its permissions",
        )
    elif case == "keygen --out it":
        result = run("keygen", "example.org/alice", "--out", unwritable)
        refused(
            result, unwritable / "example.org_alice.key", "permission denied", "fix its permissions"
        )
    else:
        out = unwritable / "registration.checkpoint"
        result = run("checkpoint", db, "--key", key, "--out", out)
        refused(result, "--out", out, "permission denied", "fix its permissions")
    assert listing(unwritable) == []
    assert ledger_state(db) == before  # the checkpoint not written is not stored either
    verifies(db)


def test_unwritable_report_html(study: Path, unwritable: Path) -> None:
    html = unwritable / "report.html"
    result = run("report", study, "--html", html)
    refused(result, html, "permission denied", "fix its permissions")
    assert listing(unwritable) == []
    assert not (study / "report").exists()  # no figures without their report
    verifies(study / "ledger.db")


def test_unwritable_export_target(study: Path, unwritable: Path) -> None:
    db = study / "ledger.db"
    before = ledger_state(db)
    target = unwritable / "archive"
    result = run("export", study, target)
    refused(result, "cannot write the archive", target, "permission denied", "fix its permissions")
    assert listing(unwritable) == []
    assert ledger_state(db) == before
    assert "export.created" not in before[2]
    verifies(db)


@pytest.mark.parametrize("directory", ["absent", "empty"])
def test_unwritable_key_home(
    directory: str, tmp_path: Path, unwritable: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(unwritable / "home"))
    root = tmp_path / "my-study"
    if directory == "empty":
        root.mkdir()
    result = run("new", root)
    refused(
        result,
        f"key directory {unwritable / 'home' / 'keys'}",
        "permission denied",
        "PROMPT_LEDGER_HOME",
        "--key",
    )
    if directory == "empty":
        assert root.is_dir() and listing(root) == []  # the folder it was given, emptied again
    else:
        assert not root.exists()
    assert listing(unwritable) == []
    # a retry with a writable home just works (it used to say the folder was "not empty")
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    result = run("new", root)
    assert result.exit_code == 0, result.output
    verifies(root / "ledger.db")


# ---------------------------------------------------------------------- a read-only study


@pytest.mark.parametrize("command", ["status", "log", "verify", "schedule"])
def test_read_only_study_read_commands_work(command: str, study: Path) -> None:
    args: dict[str, list[str | Path]] = {
        "status": ["status", study],
        "log": ["log", study / "ledger.db", "--kind", "protocol.locked", "--json"],
        "verify": ["verify", study / "ledger.db"],
        "schedule": ["schedule", study, "--limit", "3"],
    }
    expected = {
        "status": "35/35 trials final",
        "log": "protocol.locked",
        "verify": "VERIFIED",
        "schedule": "35 trials, schedule sha256",
    }
    files = listing(study)
    with read_only(study):
        result = run(*args[command])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert expected[command] in result.output
    assert listing(study) == files  # no -wal or -shm left behind


def test_read_only_study_with_pending_wal_is_refused(study: Path) -> None:
    """A -wal file with changes not in ledger.db cannot be read without -shm: say so."""
    db = study / "ledger.db"
    # a writer killed mid-session (in another process: SQLite shares -shm within one)
    script = (
        f"import os, sys; sys.path.insert(0, {str(SUPPORT_DIR)!r})\n"
        "from helpers import study_key\n"
        "from ledger import Ledger\n"
        f"log = Ledger.open({str(db)!r})\n"
        "log._conn.execute('PRAGMA wal_autocheckpoint = 0')\n"
        "log.append('custom.note', {'text': 'not yet in ledger.db'}, key=study_key())\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    (study / "ledger.db-shm").unlink()
    assert (study / "ledger.db-wal").stat().st_size > 1000
    with read_only(study):
        result = run("log", db)
    refused(result, db, "ledger.db-wal", "make the directory writable")
    verifies(db)  # writable again: SQLite folds the -wal in, the note included
    assert ledger_state(db)[2][-1] == "custom.note"


@pytest.mark.parametrize("command", ["lock", "run", "score"])
def test_read_only_study_write_commands_refuse(
    command: str, request: pytest.FixtureRequest
) -> None:
    root: Path = request.getfixturevalue(
        {"lock": "unlocked", "run": "locked", "score": "study"}[command]
    )
    db = root / "ledger.db"
    before = ledger_state(db)
    files = listing(root)
    args: list[str | Path] = [command, root]
    if command == "run":
        args += ["--backend", "simulated"]
    with read_only(root):
        result = run(*args)
    refused(result, db, "cannot be written", "chmod u+w", "writable copy")
    assert listing(root) == files
    assert ledger_state(db) == before
    verifies(db)


# ---------------------------------------------------------------------- encodings


@pytest.mark.parametrize("target", ["prompt component", "truth table", "study.toml"])
def test_non_utf8_input(target: str, unlocked: Path) -> None:
    path = {
        "prompt component": unlocked / "prompts" / "decoding_rule.txt",
        "truth table": unlocked / "stimuli" / "truth.csv",
        "study.toml": unlocked / "study.toml",
    }[target]
    data = path.read_bytes()
    lines = data.split(b"\n")
    lines[1] = lines[1][:3] + b"\xe9" + lines[1][3:]  # Latin-1 e-acute on line 2, column 4
    path.write_bytes(b"\n".join(lines))
    offset = len(lines[0]) + 1 + 3
    for command in ("arms", "lock"):
        result = run(command, unlocked)
        line = refused(
            result,
            path,
            "not UTF-8",
            f"offset {offset}",
            "line 2, column 4",
            "save the file as UTF-8",
        )
        assert "0xe9" in line
    assert ledger_state(unlocked / "ledger.db")[0] == 1  # nothing locked
    verifies(unlocked / "ledger.db")


# ---------------------------------------------------------------------- a directory in the way


@pytest.mark.parametrize(
    "case", ["study.toml", "prompt component", "report --html", "checkpoint --out", "log PATH"]
)
def test_directory_where_a_file_is_expected(case: str, study: Path, tmp_path: Path) -> None:
    db = study / "ledger.db"
    before = ledger_state(db)
    folder = tmp_path / "a-folder"
    folder.mkdir()
    key = Path(os.environ["PROMPT_LEDGER_HOME"]) / "keys" / OWNER_KEY
    if case == "study.toml":
        spec = study / "study.toml"
        spec.unlink()
        spec.mkdir()
        refused(run("arms", study), spec, "is a directory, where the study spec file is expected")
    elif case == "prompt component":
        component = study / "prompts" / "decoding_rule.txt"
        component.unlink()
        component.mkdir()
        refused(
            run("arms", study),
            "components.decoding_rule",
            "'prompts/decoding_rule.txt' is a directory, where a file is expected",
        )
    elif case == "report --html":
        refused(
            run("report", study, "--html", folder), "--html", folder, "is a directory", usage=True
        )
        assert not (study / "report").exists()
    elif case == "checkpoint --out":
        refused(
            run("checkpoint", db, "--key", key, "--out", folder),
            "--out",
            folder,
            "is a directory",
            usage=True,
        )
    else:
        refused(run("log", folder), folder, "is a directory", usage=True)
        # a study folder names its ledger (ledger.db or ledger.store) on the command line
        listed = run("log", study, "--json")
        assert listed.exit_code == 0 and '"kind": "ledger.genesis"' in listed.output
        with pytest.raises(StoreError, match="is a directory, where the ledger file is expected"):
            Ledger.open(study, readonly=True)
    assert ledger_state(db) == before
    verifies(db)


# ---------------------------------------------------------------------- a full disk


def test_disk_full_during_export(
    study: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = study / "ledger.db"
    before = ledger_state(db)
    target = tmp_path / "archive"
    real_write = os.write
    budget = {"bytes": 50_000}  # the disk fills after this much of the archive

    def write(fd: int, data: bytes | memoryview) -> int:
        if f"/.{target.name}.tmp-" in os.readlink(f"/proc/self/fd/{fd}"):
            if budget["bytes"] <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            data = bytes(data[: budget["bytes"]])
            budget["bytes"] -= len(data)
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    result = run("export", study, target)
    monkeypatch.setattr(os, "write", real_write)
    refused(
        result,
        "cannot write the archive",
        target,
        "no space left on the device",
        "free some space",
        "the ledger is unchanged",
    )
    assert budget["bytes"] <= 0  # the disk really filled part-way
    assert not target.exists()
    assert not [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]
    after = ledger_state(db)
    assert after == before and "export.created" not in after[2]
    verifies(db)
    # with space again the export goes through, export.created right after the last event
    result = run("export", study, target)
    assert result.exit_code == 0, result.output
    assert f"export.created at seq {before[0]}" in result.output
    verifies(target)


# ---------------------------------------------------------------------- the unexpected


def test_unexpected_exception_prints_one_line_and_where_the_trace_is(
    study: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import runner._lock

    home = tmp_path / "crash-home"
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(home))

    def broken(root: object) -> None:
        raise RuntimeError("injected failure")

    monkeypatch.setattr(runner._lock, "check_integrity", broken)
    result = run("status", study)
    line = refused(
        result,
        "internal error: RuntimeError: injected failure",
        "the full trace was written to",
        "please report it",
    )
    where = Path(line.split("written to ", 1)[1].split(" (please report it)")[0])
    assert where.parent == home / "crash"
    trace = where.read_text(encoding="utf-8")
    assert trace.startswith(f"ledger status {study}")
    assert "Traceback (most recent call last)" in trace
    assert "RuntimeError: injected failure" in trace
