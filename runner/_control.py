"""Ctrl-C and SIGTERM during a run, from the command's first line to its last.

What a signal does depends on where the run is (``docs/trials.md`` §4):

- *before* the session (the study being checked, the ledger opened, the backend client built):
  nothing has been sent. The first Ctrl-C says so and the run stops at the next safe point,
  before ``run.started`` is appended (:class:`RunInterruptedError`): nothing is recorded.
- in the *preflight* (:mod:`runner._preflight`, before the session): the preflight request in
  flight is cancelled, recorded as an interrupted ``run.preflight``, and the run stops before
  ``run.started``; no trial is sent.
- *in* the session: the first Ctrl-C (SIGINT) starts no new request and lets the calls in
  flight finish; a second Ctrl-C, or SIGTERM at any time, cancels the calls in flight, which
  are recorded as interrupted. Either way the session closes with ``run.stopped`` and a signed
  checkpoint.
- *after* the session (``run.stopped`` being appended, the checkpoint signed, the summary
  printed): the run is ending anyway, and signals are ignored.

One handler (``signal.signal``) serves the whole run, so there is no moment at which Python's
default handler could raise ``KeyboardInterrupt`` in the middle of a write. Outside the event
loop the handler only sets flags (and prints one line); while the session's loop runs it hands
the signal to the loop with ``call_soon_threadsafe`` (as :class:`asyncio.Runner` does for its
own Ctrl-C), and a wake-up file descriptor makes sure the loop notices at once even when the
operating system delivered the signal to another thread. This module imports nothing heavy:
the ``ledger run`` command installs it before it imports the SDKs.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio

__all__ = ["RunControl", "RunInterruptedError", "SignalTarget"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunInterruptedError(Exception):
    """A signal stopped the run before its session started: nothing was sent or recorded."""

    def __init__(self, message: str, exit_code: int) -> None:
        """``exit_code`` is the conventional 128 + the signal's number (130 for Ctrl-C)."""
        super().__init__(message)
        self.exit_code = exit_code


class SignalTarget(Protocol):
    """The session a :class:`RunControl` hands its signals to (a runner)."""

    def on_signal(self, name: str, *, first: bool, interrupt: bool) -> str | None:
        """Act on a signal inside the event loop; return the line to show, if any.

        ``first`` is true for the run's first signal; ``interrupt`` is true (once) when the
        calls in flight are to be cancelled (a second Ctrl-C, or SIGTERM).
        """
        ...


class RunControl:
    """Ctrl-C and SIGTERM for one run; see the module docstring for what each one does.

    ``notify`` shows one line to the person at the terminal (the CLI passes a printer; library
    callers may leave it out). Use it as a context manager around the whole run, or let
    :func:`runner._execute.run_study` make one that covers the session only.
    """

    def __init__(
        self, notify: Callable[[str], None] | None = None, *, release_on_exit: bool = True
    ) -> None:
        """``release_on_exit=False``: after the run, ignore the signals instead of restoring.

        That is for a program that ends with the run: a late Ctrl-C while Python shuts down
        would otherwise meet Python's default handling (a ``KeyboardInterrupt`` trace, or the
        process killed at the end of finalization, which resets Python-level handlers).
        """
        self.notify = notify
        self.release_on_exit = release_on_exit
        self.signals: list[str] = []
        self.interrupting = False
        self.phase = "before"  # before (-> preflight -> before) -> opening -> session -> closing
        self.recorded: str | None = None  # what was recorded before the session, if anything
        self._previous: dict[signal.Signals, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._target: SignalTarget | None = None
        self._unsaid: list[str] = []
        self._wakeup: tuple[socket.socket, socket.socket] | None = None
        self._old_wakeup_fd = -1

    # ---------------------------------------------------------------- installing

    @property
    def installed(self) -> bool:
        """True while this control's handlers are the process's."""
        return bool(self._previous)

    def install(self) -> bool:
        """Catch SIGINT and SIGTERM from now on; False (and nothing done) off the main thread."""
        if self.installed:
            return True
        if threading.current_thread() is not threading.main_thread():
            return False
        for sig in SIGNALS:
            self._previous[sig] = signal.getsignal(sig)
            signal.signal(sig, self._handle)
        return True

    def restore(self) -> None:
        """Give the signals back to the handlers that were there before :meth:`install`."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def __enter__(self) -> RunControl:
        self.install()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.phase = "closing"
        if self.release_on_exit:
            self.restore()
        elif self.installed:
            for sig in SIGNALS:
                signal.signal(sig, signal.SIG_IGN)

    # ---------------------------------------------------------------- state

    @property
    def stopping(self) -> bool:
        """True once any signal was received."""
        return bool(self.signals)

    @property
    def signal_name(self) -> str | None:
        """The first signal received (``SIGINT``, ``SIGTERM``), or None."""
        return self.signals[0] if self.signals else None

    @property
    def exit_code(self) -> int:
        """128 + the first signal's number (130 for Ctrl-C, 143 for SIGTERM); 0 without one."""
        if not self.signals:
            return 0
        return 128 + int(signal.Signals[self.signals[0]])

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.press(signal.Signals(signum).name)

    def press(self, name: str) -> None:
        """Act on the signal ``name`` as if it had just been received (the handler calls this).

        Outside the event loop this only sets flags and shows a line; in the session it hands
        the signal to the loop, where the runner cancels or stops.
        """
        first = not self.signals
        self.signals.append(name)
        interrupt = not self.interrupting and (name == "SIGTERM" or len(self.signals) >= 2)
        if interrupt:
            self.interrupting = True
        loop = self._loop
        if self.phase == "session" and loop is not None:
            loop.call_soon_threadsafe(self._dispatch, name, first, interrupt)
        elif self.phase == "before" and first:
            if self.recorded is None:
                self._say(f"stopping ({name}): the run has not started; nothing will be sent")
            else:
                self._say(f"stopping ({name}): the run has not started; no trial will be sent")
        elif self.phase == "preflight" and first:
            self._say(f"stopping ({name}): cancelling the preflight request; no trial will be sent")
        elif self.phase == "opening" and first:
            self._say(f"stopping ({name}): no new requests; nothing is in flight yet")

    def _dispatch(self, name: str, first: bool, interrupt: bool) -> None:
        target = self._target
        if target is None or self.phase != "session":
            return
        line = target.on_signal(name, first=first, interrupt=interrupt)
        if line:
            self._say(line)

    def _say(self, line: str) -> None:
        if self.notify is None:
            return
        try:
            self.notify(line)
        except Exception:  # a reentrant write to the same stream: say it at the next safe point
            self._unsaid.append(line)

    def _flush(self) -> None:
        unsaid, self._unsaid = self._unsaid, []
        for line in unsaid:
            self._say(line)

    # ---------------------------------------------------------------- the run's safe points

    def check(self) -> None:
        """Before the session: stop here if a signal came (:class:`RunInterruptedError`)."""
        self._flush()
        if self.signals and self.phase in ("before", "preflight"):
            raise RunInterruptedError(
                f"interrupted by {self.signals[0]} before the session started: "
                + (self.recorded or "nothing was sent or recorded"),
                self.exit_code,
            )

    def start_preflight(self) -> None:
        """The preflight request is about to be sent (:mod:`runner._preflight`)."""
        self.check()
        self.phase = "preflight"

    def end_preflight(self, recorded: str) -> None:
        """The preflight is over; ``recorded`` says what it recorded (for a later stop)."""
        self.recorded = recorded
        self.phase = "before"

    def open_session(self) -> None:
        """Called just before ``run.started`` is appended: from here on the session closes."""
        self.check()
        self.phase = "opening"

    def attach(self, loop: asyncio.AbstractEventLoop, target: SignalTarget) -> None:
        """The session's loop runs: hand signals to ``target`` there, including any already in."""
        self._flush()
        self._loop, self._target = loop, target
        self.phase = "session"
        if self.installed:
            reader, writer = socket.socketpair()
            reader.setblocking(False)
            writer.setblocking(False)
            try:
                self._old_wakeup_fd = signal.set_wakeup_fd(
                    writer.fileno(), warn_on_full_buffer=False
                )
            except ValueError:  # not the main thread after all
                reader.close()
                writer.close()
            else:
                self._wakeup = (reader, writer)
                loop.add_reader(reader.fileno(), self._drain, reader)
        if self.signals:  # received while the session was opening
            target.on_signal(self.signals[-1], first=True, interrupt=self.interrupting)

    @staticmethod
    def _drain(reader: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while reader.recv(512):
                pass

    def detach(self) -> None:
        """The session's loop is about to stop; signals only set flags again."""
        self.phase = "closing"
        loop, self._loop, self._target = self._loop, None, None
        if self._wakeup is not None:
            reader, writer = self._wakeup
            self._wakeup = None
            signal.set_wakeup_fd(self._old_wakeup_fd)
            if loop is not None:
                loop.remove_reader(reader.fileno())
            reader.close()
            writer.close()
        self._flush()
