"""`ledger demo` end to end in a subprocess, as the README's first command runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


def test_demo_runs_offline_verifies_and_catches_the_tamper(tmp_path: Path) -> None:
    env = dict(os.environ, COLUMNS="200")
    env.pop("ANTHROPIC_API_KEY", None)  # offline: nothing may need it
    result = subprocess.run(
        [sys.executable, "-c", "from ledger.cli import main; main()", "demo",
         str(tmp_path / "demo"), "--replicates", "2"],
        capture_output=True, text=True, timeout=600, env=env,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "SIMULATED" in out
    assert "VERIFIED:" in out and "FAILED:" in out  # the archive, then the tampered copy
    assert "pre-registered verdicts" in out
    # the demo's own witness cosigned the lock and the run, and the verifier trusted its key
    assert re.search(r"│ witnesses\s+│ PASS", out), out
    assert "--witness @" in out and (tmp_path / "demo" / "witness" / "state.db").is_file()
    archive = tmp_path / "demo" / "archive"
    assert (archive / "MANIFEST.sha256").is_file()
    assert (archive / "analysis" / "report.html").is_file()
    check = subprocess.run(["sha256sum", "--quiet", "-c", "MANIFEST.sha256"], cwd=archive,
                           capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    assert not (tmp_path / "demo" / "study" / "home").exists()  # keys stay outside the study


def test_demo_prints_commands_that_run(tmp_path: Path) -> None:
    """Without the venv activated, the printed commands name the ledger that ran the demo."""
    from analysis.demo import _ledger_command

    exe = tmp_path / "bin" / "ledger"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n", encoding="utf-8")
    exe.chmod(0o755)
    argv, path = sys.argv, os.environ.get("PATH", "")
    try:
        sys.argv = [str(exe)]
        os.environ["PATH"] = "/usr/bin:/bin"
        assert _ledger_command() == str(exe)
        os.environ["PATH"] = f"{exe.parent}:/usr/bin:/bin"
        assert _ledger_command() == "ledger"
    finally:
        sys.argv = argv
        os.environ["PATH"] = path
