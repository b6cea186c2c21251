"""What every package's command group shares: help formatting, error boundary, output.

The ``ledger`` command is composed of command groups owned by the packages that implement them
(``ledger.cli``: the core's low-level commands; ``runner._cli``, ``analysis._cli``, ``verify.cli``:
the study's). Each group is a plain :class:`click.Group` of :class:`Command` objects built with
the helpers here, so every command formats its help the same way and meets the same error
boundary (:class:`Group`): library errors become one line and exit status 1; filesystem and
encoding failures name the path and what to do; anything unexpected prints one line and writes
the full trace to a file it names. Nothing here imports a heavy module at import time: the
``ledger`` command starts in a fraction of a second.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import sys
import tempfile
import time
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from ledger._files import describe_os_error

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = [
    "HELP_WIDTH",
    "Command",
    "Context",
    "FiniteFloat",
    "Group",
    "console",
    "dump_json",
    "filesystem_message",
    "is_library_error",
    "table",
]

# Help is wrapped at most this wide: click's default, so `--help` in any terminal of 80 columns
# or more prints exactly what scripts/cli_reference.py puts in the README.
HELP_WIDTH = 80
_NO_BREAK_HYPHEN = "\u2011"


class HelpFormatter(click.HelpFormatter):
    """Click's formatter, except that lines never break at a hyphen.

    Paths such as ``~/.prompt-ledger/keys`` and options such as ``--trusted-key`` stay whole:
    hyphens are swapped for a non-breaking one (same width) while wrapping and back on output.
    """

    def write(self, string: str) -> None:
        """Append ``string`` to the buffer with the ordinary hyphens restored."""
        super().write(string.replace(_NO_BREAK_HYPHEN, "-"))

    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        """Write the usage line, wrapping only at spaces."""
        super().write_usage(prog, args.replace("-", _NO_BREAK_HYPHEN), prefix)

    def write_text(self, text: str) -> None:
        """Write a paragraph, wrapping only at spaces."""
        super().write_text(text.replace("-", _NO_BREAK_HYPHEN))

    def write_dl(
        self, rows: Iterable[tuple[str, str]], col_max: int = 30, col_spacing: int = 2
    ) -> None:
        """Write a definition list (options, commands), wrapping only at spaces."""
        protected = [(a, b.replace("-", _NO_BREAK_HYPHEN)) for a, b in rows]
        super().write_dl(protected, col_max, col_spacing)


class Context(click.Context):
    """A click context whose help uses :class:`HelpFormatter`."""

    formatter_class = HelpFormatter


class FiniteFloat(click.FloatRange):
    """:class:`click.FloatRange` that also refuses ``nan`` and the infinities.

    A range alone lets ``nan`` through (every comparison with it is false) and ``inf`` through
    an open upper end; a budget, a price or an interval must be a number.
    """

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The number, refusing what is not finite before the range check."""
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


class Command(click.Command):
    """A click command whose help uses :class:`HelpFormatter`."""

    context_class = Context


# ---------------------------------------------------------------------- the error boundary


def is_library_error(exc: BaseException) -> bool:
    """True for the packages' own error types, whose message is meant for the user.

    Recognised by name and module rather than imported, so the boundary imports no package:
    ``ledger.LedgerError``, ``runner`` errors (``SpecError``, ``StudyError``, ``BackendError``,
    ...), ``analysis`` errors and ``verify.VerificationError`` all end in ``Error`` and live in
    one of the project's packages.
    """
    for cls in type(exc).__mro__:
        package = cls.__module__.partition(".")[0]
        if package in {"ledger", "runner", "analysis", "verify"} and cls.__name__.endswith("Error"):
            return True
    return False


def filesystem_message(exc: OSError) -> str:
    """One line naming the path of a failed file operation and what to do about it."""
    return describe_os_error(exc)


def _encoding_message(exc: UnicodeError) -> str:
    """A decoding failure that escaped the reader that should have named its file."""
    return f"input is not valid UTF-8 ({exc}); save the file as UTF-8 and run the command again"


def _write_trace(argv: list[str]) -> str:
    """Write the command and the current exception's trace to a file; return where it is."""
    text = traceback.format_exc()
    candidates = []
    home = os.environ.get("PROMPT_LEDGER_HOME")
    if home:
        candidates.append(Path(home) / "crash")
    candidates.append(Path(tempfile.gettempdir()))
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for directory in candidates:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(
                prefix=f"ledger-crash-{stamp}-", suffix=".txt", dir=directory
            )
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(f"ledger {shlex.join(argv)}\n\n{text}")
            return name
        except OSError:
            continue
    return "nowhere (no writable directory for it)"


_ARGV = "prompt_ledger.argv"


class Group(click.Group):
    """A click group with this project's help, command listing and error boundary."""

    context_class = Context
    command_class = Command
    group_class: type[click.Group | type] | None = type

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the subcommands with their whole first sentence, wrapped rather than cut."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Parse the group's arguments, remembering the whole command line for a crash report."""
        ctx.meta.setdefault(_ARGV, list(args))  # the top-level group's: every word after ledger
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        """Invoke the subcommand; turn every failure into one line and a non-zero exit."""
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except KeyboardInterrupt:
            raise click.ClickException("interrupted") from None
        except OSError as exc:
            if is_library_error(exc):
                raise click.ClickException(str(exc)) from exc
            raise click.ClickException(filesystem_message(exc)) from exc
        except UnicodeError as exc:
            raise click.ClickException(_encoding_message(exc)) from exc
        except Exception as exc:
            if is_library_error(exc):
                raise click.ClickException(str(exc)) from exc
            where = _write_trace(ctx.meta.get(_ARGV, sys.argv[1:]))
            _fail(
                f"internal error: {type(exc).__name__}: {exc}; the full trace was written to "
                f"{where} (please report it)"
            )


def _fail(message: str) -> NoReturn:
    click.echo(f"Error: {message}", err=True)
    sys.exit(1)


# ---------------------------------------------------------------------- output


def _terminal_width() -> int | None:
    """The width of the terminal this process runs in, even when stdout is piped."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    for fd in (1, 2, 0):
        try:
            return os.get_terminal_size(fd).columns
        except OSError:
            continue
    return None


def console(stderr: bool = False) -> Console:
    """A rich console: the terminal's width even when piped, soft-wrapped, no highlighting.

    Without any terminal (a pipe in CI) tables are laid out 100 columns wide; cells wrap and
    long values fold onto the next line, so nothing is cut (see :func:`table`).
    """
    from rich.console import Console

    return Console(stderr=stderr, soft_wrap=True, highlight=False, width=_terminal_width() or 100)


def table(*columns: str, title: str | None = None) -> Table:
    """A rich table whose cells wrap and fold, never end in an ellipsis."""
    from rich.table import Table

    result = Table(title=title)
    for name in columns:
        result.add_column(name, overflow="fold")
    return result


def dump_json(data: Any) -> None:
    """Print ``data`` as indented JSON on standard output (``--json``)."""
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def end_process(code: int = 0) -> NoReturn:
    """End this process now with ``code``, skipping the interpreter's teardown.

    For a command that owns its process and has finished: every file it wrote is closed and
    synced, so what Python's shutdown would still do is free memory object by object (some
    tenths of a second once the ``anthropic`` SDK's 1,400 model classes are loaded; a bare SDK
    script pays it too). Standard output and error are flushed first. Never call it from code
    that runs inside another program (click's ``CliRunner``, a notebook).
    """
    for stream in (sys.stdout, sys.stderr):
        # a closed pipe: nothing more can reach it anyway
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
