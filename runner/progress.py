"""Progress of a run for people: a rich progress bar on a terminal, a line per 10% otherwise."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["RunDisplay"]


class RunDisplay:
    """A rich progress bar on a terminal; one summary line per 10% otherwise."""

    def __init__(self, console: Console, label: str, priced: bool) -> None:
        """Show progress of a run labelled ``label`` on ``console`` (cost when ``priced``)."""
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = console
        self.priced = priced
        self.last_decile = -1
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[extra]}"),
            console=console,
            disable=not console.is_terminal,
        )
        self.task = self.progress.add_task(label, total=None, rate="", extra="")
        self.started: float | None = None
        self.first_final: int | None = None

    def __enter__(self) -> RunDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def say(self, line: str) -> None:
        """Show one line (above the progress bar on a terminal) on the display's stream."""
        self.console.print(line, markup=False, highlight=False)

    def __call__(self, counters: Any, final: int, total: int) -> None:
        """Update the display: ``final`` of ``total`` trials have a final outcome."""
        now = time.monotonic()
        if self.started is None:
            self.started, self.first_final = now, final
        done_here = final - (self.first_final or 0)
        elapsed = max(now - self.started, 1e-9)
        cost = f" cost ${counters.cost_usd:.4f}" if self.priced else ""
        extra = (
            f"errors {counters.failed} retries {counters.retries} "
            f"given up {counters.given_up} conc {counters.concurrency}{cost}"
        )
        self.progress.update(
            self.task,
            total=total,
            completed=final,
            rate=f"{done_here / elapsed:.1f}/s",
            extra=extra,
        )
        if not self.console.is_terminal and total:
            decile = final * 10 // total
            if decile != self.last_decile:
                self.last_decile = decile
                print(f"{final}/{total} trials final; {extra}", file=sys.stderr, flush=True)
