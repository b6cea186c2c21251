"""The README's CLI reference is the commands' own --help (regenerate with the script)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_cli_reference_matches_help() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "cli_reference.py"), "--check"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_command_is_in_the_reference() -> None:
    from ledger.cli import main

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in main.commands:
        assert f"### `ledger {name}`" in readme, name
