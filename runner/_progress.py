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
        self.terminal = console.is_terminal  # asked once: it is a system call
        self.shown_at = 0.0  # when the bar was last updated
        self.unshown: tuple[Any, int, int] | None = None  # an update not yet shown

    def __enter__(self) -> RunDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.unshown is not None:
            self._show(*self.unshown)
        self.progress.stop()

    def say(self, line: str) -> None:
        """Show one line (above the progress bar on a terminal) on the display's stream."""
        self.console.print(line, markup=False, highlight=False)

    def __call__(self, counters: Any, final: int, total: int) -> None:
        """Update the display: ``final`` of ``total`` trials have a final outcome.

        Called after every outcome: the bar is redrawn at most 20 times a second (rich draws
        10), and on a stream that is not a terminal only the line of each new tenth is written.
        """
        now = time.monotonic()
        if self.started is None:
            self.started, self.first_final = now, final
        if not self.terminal:
            if total and final * 10 // total != self.last_decile:
                self.last_decile = final * 10 // total
                print(
                    f"{final}/{total} trials final; {self._extra(counters)}",
                    file=sys.stderr,
                    flush=True,
                )
            return
        if now - self.shown_at < 0.05 and final < total:
            self.unshown = (counters, final, total)
            return
        self._show(counters, final, total)

    def _extra(self, counters: Any) -> str:
        cost = f" cost ${counters.cost_usd:.4f}" if self.priced else ""
        return (
            f"errors {counters.failed} retries {counters.retries} "
            f"given up {counters.given_up} conc {counters.concurrency}{cost}"
        )

    def _show(self, counters: Any, final: int, total: int) -> None:
        now = time.monotonic()
        self.shown_at, self.unshown = now, None
        done_here = final - (self.first_final or 0)
        elapsed = max(now - (self.started or now), 1e-9)
        self.progress.update(
            self.task,
            total=total,
            completed=final,
            rate=f"{done_here / elapsed:.1f}/s",
            extra=self._extra(counters),
        )
