"""``ledger`` command-line sessions forked from one process that has already imported them.

A kill soak starts ``ledger run`` again after every SIGKILL, and a fresh interpreter spends
about 1.5-2 s of CPU importing before its first call (the ``anthropic`` SDK alone about 1.8 s,
building its 1,400 pydantic model classes): a third of each session's life in the soaks,
paid once per kill. :class:`ForkedCli` starts each session instead as a fork of a
``multiprocessing`` fork server that imported the command line, the runner and the SDK once
(:data:`PRELOAD`) and did nothing else: it opened no ledger, no socket and no thread.

Each session is still a process of its own, as a user's ``ledger run`` is: it gets the
environment and arguments it is given, opens its ledger, its HTTP client and its signal
handlers itself after the fork, runs ``ledger.cli.main`` exactly as the console script does
(including ``end_process`` at its end), and dies as a whole when it is sent SIGKILL. What the
fork saves is only the import. Its standard output and error go to one file, or to two.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path

PRELOAD = ["anthropic", "ledger.cli", "runner._cli", "runner._execute", "runner._engines"]
"""What the fork server imports once: the console script's module, the ``run`` command and
the runner, and the Anthropic SDK the runner's backend loads when a session starts."""

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOAD)


def _session(argv: list[str], env: dict[str, str], output: str, errors: str | None) -> None:
    """The forked process: ``ledger ARGV`` with ``env`` as its whole environment, its standard
    output (and error, unless ``errors`` names a file of its own) appended to ``output``."""
    for target, fds in ((output, (1,) if errors else (1, 2)), (errors, (2,))):
        if target is None:
            continue
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        for to in fds:
            os.dup2(fd, to)
        os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["ledger", *argv]
    from ledger.cli import main

    main()


class ForkedCli:
    """One ``ledger ARGV`` session: the parts of ``subprocess.Popen`` the kill soaks use
    (``pid``, ``poll``, ``send_signal``, ``wait``, ``communicate``, ``returncode``).

    Its standard output and error go to ``output``; with ``errors``, its standard error goes
    to that file instead (created empty here if missing, so that it can be read at once).
    """

    def __init__(
        self, argv: list[str], env: dict[str, str], output: Path, errors: Path | None = None
    ) -> None:
        self.output = output
        self.errors = errors
        self._start = output.stat().st_size if output.exists() else 0
        self._errors_start = 0
        if errors is not None:
            errors.touch()
            self._errors_start = errors.stat().st_size
        target = (argv, env, str(output), None if errors is None else str(errors))
        self._proc = _context.Process(target=_session, args=target)
        self._proc.start()
        assert self._proc.pid is not None
        self.pid: int = self._proc.pid

    @property
    def sentinel(self) -> int:
        """A file descriptor that becomes readable when the session ends (for ``select``,
        from any thread: unlike :meth:`poll`, waiting on it reads nothing from it)."""
        return int(self._proc.sentinel)

    @property
    def returncode(self) -> int | None:
        """The exit code, ``-9`` after SIGKILL, or ``None`` while it runs."""
        return self._proc.exitcode

    def poll(self) -> int | None:
        return self._proc.exitcode

    def send_signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def wait(self, timeout: float | None = None) -> int:
        """The exit code once the session ends; one still running after ``timeout`` seconds
        is killed (so that no session outlives the test) and ``TimeoutError`` raised."""
        self._proc.join(timeout)
        code = self._proc.exitcode
        if code is None:
            self._proc.kill()
            self._proc.join()
            raise TimeoutError(f"ledger session {self.pid} still ran after {timeout} s: killed")
        return code

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        """Wait for the end; return (b"", what this session wrote to its standard output and
        error) when both went to one file, as a ``Popen`` with ``stderr=STDOUT`` would, or
        (its standard output, its standard error) when ``errors`` was given."""
        self.wait(timeout)
        with self.output.open("rb") as f:
            f.seek(self._start)
            written = f.read()
        if self.errors is None:
            return b"", written
        with self.errors.open("rb") as f:
            f.seek(self._errors_start)
            return written, f.read()
