"""The README's CLI reference is the commands' own --help (regenerate with the script)."""

from __future__ import annotations

import re
import subprocess
import sys

import click
import pytest
from locations import REPO

ROOT = REPO
sys.path.insert(0, str(ROOT / "scripts"))

import cli_reference  # noqa: E402


def _all_commands(group: click.Group, prefix: list[str]) -> list[list[str]]:
    out = [prefix]
    ctx = click.Context(group, info_name=" ".join(prefix))
    for name in group.list_commands(ctx):  # entry-point commands are loaded on demand
        command = group.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            out += _all_commands(command, [*prefix, name])
        elif not command.hidden:
            out.append([*prefix, name])
    return out


def _readme_blocks() -> dict[str, str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split(cli_reference.START, 1)[1].split(cli_reference.END, 1)[0]
    found = re.findall(r"^### `([^`]+)`\n\n```text\n(.*?)\n```$", block, flags=re.M | re.S)
    return dict(found)


def test_readme_cli_reference_matches_help() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "cli_reference.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_command_is_in_the_reference() -> None:
    from ledger.cli import main

    blocks = _readme_blocks()
    paths = _all_commands(main, ["ledger"])
    assert ["ledger", "key", "add"] in paths and ["ledger"] in paths
    for path in paths:
        assert " ".join(path) in blocks, path
    assert len(blocks) == len(paths)


@pytest.mark.parametrize("columns", ["80", "200"])
def test_reference_is_what_a_terminal_prints(
    columns: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ledger ... --help`` in a terminal of 80 columns or more prints the README's text.

    Not through CliRunner, which forces a width of 80: the terminal's own width is used here.
    """
    from ledger.cli import main

    monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setattr(click.formatting, "FORCED_WIDTH", None)
    blocks = _readme_blocks()
    for path in _all_commands(main, ["ledger"]):
        code = main.main([*path[1:], "--help"], prog_name="ledger", standalone_mode=False)
        assert code in (0, None)
        assert capsys.readouterr().out.rstrip() == blocks[" ".join(path)], path


def test_reference_fits_80_columns_and_keeps_paths_whole() -> None:
    blocks = _readme_blocks()
    for name, text in blocks.items():
        assert all(len(line) <= 80 for line in text.splitlines()), name
    assert "~/.prompt-ledger/keys" in blocks["ledger keygen"]
    assert "~/.prompt-\n" not in "\n".join(blocks.values())
    # subcommand summaries are whole sentences, wrapped rather than cut with "..."
    commands = "\n".join(b.split("Commands:")[1] for b in (blocks["ledger"], blocks["ledger key"]))
    assert "..." not in commands
    assert "signed by an owner" in blocks["ledger key"] and "afterwards." in blocks["ledger key"]
