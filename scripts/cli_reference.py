"""Generate the README's CLI reference from the commands' own ``--help`` texts.

    .venv/bin/python scripts/cli_reference.py           # rewrite the block in README.md
    .venv/bin/python scripts/cli_reference.py --check   # exit 1 if README.md is out of date

The block sits between the ``<!-- cli-reference:start -->`` and ``<!-- cli-reference:end -->``
markers; ``tests/project/test_cli_reference.py`` runs ``--check``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
START = "<!-- cli-reference:start -->"
END = "<!-- cli-reference:end -->"


def _commands(group: click.Group, prefix: list[str]) -> list[tuple[list[str], click.Command]]:
    out: list[tuple[list[str], click.Command]] = []
    ctx = click.Context(group, info_name=" ".join(prefix))
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        out.append(([*prefix, name], command))
        if isinstance(command, click.Group):
            out.extend(_commands(command, [*prefix, name]))
    return out


def _help(path: list[str], command: click.Command, root: click.Group) -> str:
    """``command``'s help as ``ledger ... --help`` prints it in a terminal of 80+ columns."""
    from ledger.cli import HELP_WIDTH

    # click wraps at min(terminal columns, max_content_width) - 2
    width = HELP_WIDTH - 2
    settings = {k: v for k, v in root.context_settings.items() if k != "max_content_width"}
    parent = root.context_class(root, info_name="ledger", terminal_width=width, **settings)
    if command is root:
        return root.get_help(parent)
    ctx = command.context_class(
        command, info_name=" ".join(path[1:]), parent=parent, terminal_width=width
    )
    return command.get_help(ctx)


def commands() -> list[tuple[list[str], click.Command]]:
    """Every command of ``ledger`` with its path, the group itself first, subcommands included."""
    from ledger.cli import main

    return [(["ledger"], main), *_commands(main, ["ledger"])]


def reference() -> str:
    """The Markdown block: one heading and one ``--help`` text per command."""
    from ledger.cli import main

    parts = [START, "", "Generated from `--help` by `scripts/cli_reference.py`; do not edit.", ""]
    for path, command in commands():
        parts += [
            f"### `{' '.join(path)}`",
            "",
            "```text",
            _help(path, command, main).rstrip(),
            "```",
            "",
        ]
    parts.append(END)
    return "\n".join(parts)


def updated(text: str) -> str:
    """``text`` (the README) with its reference block replaced."""
    if START not in text or END not in text:
        raise SystemExit(f"{README}: no {START} ... {END} block")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return head + reference() + tail


def main(argv: list[str] | None = None) -> int:
    """Rewrite README.md's block, or with ``--check`` compare it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = README.read_text(encoding="utf-8")
    new = updated(text)
    if args.check:
        if new != text:
            print("README.md's CLI reference is out of date: run scripts/cli_reference.py")
            return 1
        return 0
    README.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
