"""Render a :class:`~verify.Report` for people: a table of checks and a summary line.

Used by ``python -m verify``, ``ledger verify`` and ``ledger demo``. rich is optional here: without
it the same rows and summary are written as plain text.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, TextIO

from verify._report import Report, Status

if TYPE_CHECKING:
    from rich.console import Console


def _width() -> int:
    """The terminal's width even when standard output is piped; 100 without any terminal."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    for fd in (1, 2, 0):
        try:
            return os.get_terminal_size(fd).columns
        except OSError:
            continue
    return 100


def render_report(
    report: Report, stream: TextIO | None = None, *, console: Console | None = None
) -> None:
    """Print ``report`` as a table of checks and a summary line.

    On ``console`` when given (a rich console), else on ``stream`` (default: standard output),
    with rich if it is installed and as plain text if not. Paths and reasons are printed as
    they are, never read as rich markup.
    """
    failed = len(report.failures)
    warned = len(report.warnings)
    limited = len(report.limited)
    summary = (
        f"{report.status.upper()}: {report.size} events, "
        f"{len(report.checks)} checks, {failed} failed, {warned} warnings"
        + (f", {limited} limited (withheld data not re-derived)" if limited else "")
    )
    rows = [
        (c.name, c.status, c.where or ("" if c.seq is None else f"seq {c.seq}"), c.reason)
        for c in report.checks
    ]
    stream = stream if stream is not None else sys.stdout
    try:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table
    except ImportError:  # rich is optional: plain text carries the same information
        stream.write(f"verify {report.path}\n")
        for name, status, where, reason in rows:
            stream.write(f"{status.value:4}  {name}  {where}  {reason}\n")
        stream.write(summary + "\n")
        return
    if console is None:
        console = Console(file=stream, soft_wrap=True, highlight=False, width=_width())
    colours = {
        Status.PASS: "green",
        Status.FAIL: "red",
        Status.WARN: "yellow",
        Status.LIMITED: "cyan",
    }
    table = Table(title=escape(f"verify {report.path}"))
    for column in ("check", "result", "where", "detail"):
        table.add_column(column, overflow="fold")  # wrap long paths and reasons, never cut them
    for name, status, where, reason in rows:
        table.add_row(name, f"[{colours[status]}]{status.value}[/]", escape(where), escape(reason))
    console.print(table)
    colour = {"verified": "green", "partial": "cyan"}.get(report.status, "red")
    console.print(f"[{colour}]{escape(summary)}[/]")
