"""Render a :class:`~verify.Report` for people: a table of checks and a summary line.

Used by ``python -m verify``, ``ledger verify`` and ``ledger demo``. rich is optional here: without
it the same rows and summary are written as plain text.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

from verify._report import Report, Status

if TYPE_CHECKING:
    from rich.console import Console


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
    summary = (
        f"{'VERIFIED' if report.ok else 'FAILED'}: {report.size} events, "
        f"{len(report.checks)} checks, {failed} failed, {warned} warnings"
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
        console = Console(file=stream, soft_wrap=True, highlight=False)
    colours = {Status.PASS: "green", Status.FAIL: "red", Status.WARN: "yellow"}
    table = Table("check", "result", "where", "detail", title=escape(f"verify {report.path}"))
    for name, status, where, reason in rows:
        table.add_row(name, f"[{colours[status]}]{status.value}[/]", escape(where), escape(reason))
    console.print(table)
    colour = "green" if report.ok else "red"
    console.print(f"[{colour}]{escape(summary)}[/]")
