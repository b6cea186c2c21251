"""Ctrl-C and SIGTERM during ``ledger run``, at any moment after the command has started.

The process tests send real signals to ``ledger run``, a process of its own, against the fake
Messages server (calls take 2 s, so some are always in flight once the session runs): Ctrl-C
once and twice, at 0.2 s, 0.5 s and 1 s after the command started, then SIGTERM. "Started" is
when the command has taken over SIGTERM, read from ``/proc/PID/status``. Each process is forked
from one that imported the command line once (``forked_cli``): the interpreter's start-up and
the imports, which are Python's and not the command's, come before the fork. Where the
moment matters (1 s: calls in flight; the second Ctrl-C: after the first was acted on) the test
waits for that state rather than sleeping. The in-process tests press Ctrl-C inside each step
before any task exists, deterministically. Every case ends with one line and a non-zero exit, a
ledger that verifies, and a later ``ledger run`` that completes every trial exactly once.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import select
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fake_messages import FakeMessagesServer
from forked_cli import ForkedCli
from helpers import make_study

import runner._control
import runner._engines
import runner._execute
import runner._session
from ledger import Ledger
from ledger.cli import main
from verify import verify_ledger_file

LATENCY_MS = (
    2000  # the first calls, sent before the 1 s press, are answered 1 s after it at the earliest
)
TRIALS = 35  # the template with one replicate
SIGTERM_CAUGHT = 1 << (signal.SIGTERM - 1)

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/status").exists(), reason="needs /proc to see when the command started"
)


class RunProcess:
    """``ledger run`` as a process of its own, forked from one that imported the command line
    once (:class:`ForkedCli`: the interpreter's start-up and imports are not the command's);
    its stderr is read line by line as it is written."""

    def __init__(self, study: Path, server: FakeMessagesServer) -> None:
        env = dict(os.environ, ANTHROPIC_API_KEY="test")
        argv = ["run", str(study), "--base-url", server.base_url, "--concurrency", "4"]
        out, err = study.parent / "run.out", study.parent / "run.err"
        self.proc = ForkedCli(argv, env, out, errors=err)
        self.lines: list[str] = []
        self.ended = False
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, args=(err,), daemon=True)
        self.reader.start()

    def _read(self, path: Path) -> None:
        """Follow the stderr file until the process has ended and all of it is read."""
        with path.open("rb") as f:
            pending = b""
            while True:
                ended = bool(select.select([self.proc.sentinel], [], [], 0.01)[0])
                pending += f.read()
                *complete, pending = pending.split(b"\n")
                if complete:
                    with self.changed:
                        self.lines.extend(line.decode() for line in complete)
                        self.changed.notify_all()
                if ended:  # read after the end: nothing more can come
                    break
        with self.changed:
            if pending:
                self.lines.append(pending.decode())
            self.ended = True
            self.changed.notify_all()

    def wait_for_line(self, text: str, timeout: float = 120) -> bool:
        """Wait until a stderr line contains ``text``; False if stderr ended without one."""

        def seen() -> bool:
            return any(text in line for line in self.lines)

        with self.changed:
            self.changed.wait_for(lambda: seen() or self.ended, timeout)
            return seen()

    def wait_until_started(self, timeout: float = 120) -> float:
        """The moment the command took over SIGTERM (its signal handling is in place).

        ``SigCgt`` in ``/proc/PID/status`` is the mask of signals the process catches. Python
        catches SIGINT from its start but SIGTERM only when a program asks, and ``ledger run``
        asks in its first line.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"ledger run ended first: {self.finish()}")
            with contextlib.suppress(OSError):
                status = Path(f"/proc/{self.proc.pid}/status").read_text()
                match = re.search(r"^SigCgt:\s*([0-9a-f]+)$", status, re.MULTILINE)
                if match and int(match.group(1), 16) & SIGTERM_CAUGHT:
                    return time.monotonic()
            time.sleep(0.005)
        raise AssertionError("ledger run did not start in time")

    def send(self, sig: signal.Signals) -> None:
        """Send ``sig`` unless the process has ended already."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def finish(self, timeout: float = 120) -> tuple[int, str, list[str]]:
        """(exit status, stdout, stderr lines) once the process has ended."""
        code = self.proc.wait(timeout)
        out, _err = self.proc.communicate()
        self.reader.join(timeout)
        return code, out.decode(), list(self.lines)

    def __enter__(self) -> RunProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:  # a failed test: do not leave it running
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(60)
        self.reader.join(60)


def all_events(study: Path) -> list[Any]:
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        return list(log.events())


def check_ledger(study: Path, *, complete: bool) -> list[Any]:
    """The ledger verifies and every request has one outcome; with ``complete``, every trial
    has exactly one final outcome."""
    report = verify_ledger_file(study / "ledger.db")
    assert report.ok, report
    events = all_events(study)
    requests = {e.seq for e in events if e.kind == "trial.requested"}
    outcomes = Counter(
        e.body["request_seq"] for e in events if e.kind in ("trial.responded", "trial.failed")
    )
    assert set(outcomes) == requests and set(outcomes.values()) <= {1}
    if complete:
        final = Counter(
            e.body["trial"]
            for e in events
            if e.kind == "trial.responded" or (e.kind == "trial.failed" and e.body["final"])
        )
        assert len(final) == TRIALS and set(final.values()) == {1}
    return events


def resume(study: Path, server: FakeMessagesServer) -> None:
    """A later ``ledger run`` (without latency) completes every trial exactly once."""
    server.on_arrival = None
    server.latency_ms = 0
    result = CliRunner().invoke(
        main,
        ["run", str(study), "--base-url", server.base_url, "--concurrency", "8"],
        env={"ANTHROPIC_API_KEY": "test"},
    )
    assert result.exit_code == 0, result.output
    assert "stopped: complete" in result.output
    check_ledger(study, complete=True)


def slow_after_the_preflight(server: FakeMessagesServer, arrived: threading.Event) -> None:
    """Answer the run's first request (its preflight) at once and every later one slowly.

    ``arrived`` is set when the first trial's request arrives: the session is under way.
    """
    seen = itertools.count()

    def on_arrival(route: str) -> None:
        if route == "messages" and next(seen) >= 1:
            server.latency_ms = LATENCY_MS  # read by the server after this call
            arrived.set()

    server.latency_ms = 0
    server.on_arrival = on_arrival


def interrupted_in_flight(events: list[Any]) -> list[Any]:
    return [
        e
        for e in events
        if e.kind == "trial.failed"
        and e.body["error_type"] == "interrupted"
        and "while in flight" in e.body["message"]
    ]


def _moments() -> list[Any]:
    """(after, presses) cases: three in the default run, the other three in the slow set.

    Each resumes a whole study afterwards (about 10 s on a loaded machine); the default run
    keeps a press before the session (0.2 s, twice) and both presses with calls in flight (1 s).
    """
    fast = {(0.2, 2), (1.0, 1), (1.0, 2)}
    out = []
    for after in (0.2, 0.5, 1.0):
        for presses in (1, 2):
            ident = f"{after:g}s-{'once' if presses == 1 else 'twice'}"
            marks = () if (after, presses) in fast else (pytest.mark.slow,)
            out.append(pytest.param(after, presses, id=ident, marks=marks))
    return out


@pytest.mark.parametrize(("after", "presses"), _moments())
def test_ctrl_c_at_any_moment_stops_cleanly_and_the_run_resumes(
    after: float, presses: int, tmp_path: Path, ledger_home: Path, study_template: Path
) -> None:
    study = make_study(tmp_path / "study", replicates=1, template=study_template)
    arrived = threading.Event()
    with FakeMessagesServer(latency_ms=LATENCY_MS) as server:
        slow_after_the_preflight(server, arrived)
        with RunProcess(study, server) as run:
            started = run.wait_until_started()
            if after >= 1:  # here the moment matters: calls must be in flight
                assert arrived.wait(120), "no request arrived"
            time.sleep(max(0.0, started + after - time.monotonic()))
            run.send(signal.SIGINT)
            if presses == 2:
                assert run.wait_for_line("stopping"), run.lines  # the first press was acted on
                run.send(signal.SIGINT)
            code, out, err = run.finish()
        assert code == 130, (out, err)
        assert not any("Traceback" in line or "KeyboardInterrupt" in line for line in err), err
        assert err[-1].startswith("Error: interrupted by SIGINT"), err
        assert sum(line.startswith("stopping") for line in err) == 1, err
        events = check_ledger(study, complete=False)
        sessions = [e for e in events if e.kind == "run.started"]
        if not sessions:  # stopped before the session: no trial was sent or recorded
            assert after < 1
            assert "before the session started" in err[-1] or "during the preflight" in err[-1]
            assert not any(e.kind.startswith("trial.") for e in events)
            preflights = [e for e in events if e.kind == "run.preflight"]
            if preflights:  # the preflight was recorded (answered, or cut off in flight)
                assert "no trial was sent" in err[-1], err[-1]
                assert server.count("messages") <= len(preflights)
            else:
                assert "nothing was sent or recorded" in err[-1], err[-1]
                assert server.count("messages") == 0  # the model list may have been asked
        else:
            [stopped] = [e for e in events if e.kind == "run.stopped"]
            assert stopped.body["reason"] == "interrupted: SIGINT"
            pending = stopped.body["pending"]
            assert pending > 0 and f"{pending} trials pending" in err[-1]
            assert "stopped: interrupted: SIGINT" in out
            cut = interrupted_in_flight(events)
            if presses == 1:  # the calls in flight were finished, none cut off
                assert cut == [] and "no call was cut off" in err[-1]
            if after >= 1:
                assert stopped.body["responded"] >= 1 or cut
            if after >= 1 and presses == 2:  # calls were in flight at the second press
                assert any(line.startswith("SIGINT: interrupting") for line in err), err
                assert cut and f"{len(cut)} call" in err[-1]
                assert stopped.body["interrupted"] == len(cut)
        resume(study, server)


def test_sigterm_interrupts_the_calls_in_flight_at_once(
    tmp_path: Path, ledger_home: Path, study_template: Path
) -> None:
    study = make_study(tmp_path / "study", replicates=1, template=study_template)
    arrived = threading.Event()
    with FakeMessagesServer(latency_ms=LATENCY_MS) as server:
        slow_after_the_preflight(server, arrived)
        with RunProcess(study, server) as run:
            run.wait_until_started()
            assert arrived.wait(120), "no request arrived"
            run.send(signal.SIGTERM)
            code, out, err = run.finish()
        assert code == 143, (out, err)
        assert not any("Traceback" in line for line in err), err
        assert any(line.startswith("SIGTERM: interrupting") for line in err), err
        assert err[-1].startswith("Error: interrupted by SIGTERM: "), err
        assert "recorded as interrupted" in err[-1]
        events = check_ledger(study, complete=False)
        [stopped] = [e for e in events if e.kind == "run.stopped"]
        assert stopped.body["reason"] == "interrupted: SIGTERM"
        assert interrupted_in_flight(events)
        resume(study, server)


# ------------------------------------------------------------------ the first moments, in process


@contextlib.contextmanager
def pressed_inside(
    monkeypatch: pytest.MonkeyPatch, where: str, presses: int
) -> Iterator[list[runner._control.RunControl]]:
    """Press Ctrl-C ``presses`` times inside the step ``where`` of ``ledger run``.

    The press is :meth:`runner._control.RunControl.press`, what the signal handler calls, on
    the control the command made (a real SIGINT is the process tests' part).
    """
    made: list[runner._control.RunControl] = []

    class Recorded(runner._control.RunControl):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(runner._control, "RunControl", Recorded)
    done = False

    def press() -> None:
        nonlocal done
        if not done:
            done = True
            for _ in range(presses):
                made[0].press("SIGINT")

    def after(module: Any, name: str) -> None:
        original = getattr(module, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            value = original(*args, **kwargs)
            press()
            return value

        monkeypatch.setattr(module, name, wrapped)

    if where == "backend-client":
        after(runner._engines, "make_backend")
    elif where == "study-check":
        after(runner._execute, "check_integrity")
    elif where == "ledger-read":
        after(runner._execute, "load_state")
    elif where == "session-opening":  # while run.started is being written
        after(runner._execute, "version")
    elif where == "before-tasks":  # the session's first progress tick, before any task
        original_tick: Callable[[runner._session.Session], None] = runner._session.Session.tick

        def tick(self: runner._session.Session) -> None:
            original_tick(self)
            press()

        monkeypatch.setattr(runner._session.Session, "tick", tick)
    else:
        raise AssertionError(where)
    yield made


@pytest.mark.parametrize("presses", [1, 2], ids=["once", "twice"])
@pytest.mark.parametrize(
    "where", ["backend-client", "study-check", "ledger-read", "session-opening", "before-tasks"]
)
def test_ctrl_c_in_each_step_before_any_task_exists(
    where: str,
    presses: int,
    tmp_path: Path,
    ledger_home: Path,
    study_template: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    study = make_study(tmp_path / "study", replicates=1, template=study_template)
    before = len(all_events(study))
    with FakeMessagesServer(latency_ms=0) as server:
        with pressed_inside(monkeypatch, where, presses) as made:
            result = CliRunner().invoke(
                main,
                ["run", str(study), "--base-url", server.base_url],
                env={"ANTHROPIC_API_KEY": "test"},
            )
        assert made and made[0].signals == ["SIGINT"] * presses
        assert not made[0].installed  # an in-process caller gets its handlers back
        assert result.exit_code == 130, result.output
        err = result.stderr.strip().splitlines()
        assert err[-1].startswith("Error: interrupted by SIGINT"), err
        assert sum(line.startswith("stopping") for line in err) == 1, err
        events = check_ledger(study, complete=False)
        if where in ("backend-client", "study-check", "ledger-read"):
            assert "before the session started: nothing was sent or recorded" in err[-1]
            assert len(events) == before
            assert server.count() == 0  # nothing was sent
        else:  # the session had begun: it is closed, with no trial sent (the preflight was)
            kinds = [e.kind for e in events[before:]]
            assert kinds == ["run.preflight", "run.started", "run.stopped"], kinds
            assert events[-1].body["reason"] == "interrupted: SIGINT"
            assert server.count("messages") == 1  # the preflight alone
            assert server.count("models.retrieve") == 1  # and the question which models
        resume(study, server)  # the wrappers pass through after their one press


def test_ctrl_c_wakes_a_retry_that_waits_out_a_long_retry_after(
    tmp_path: Path, ledger_home: Path, study_template: Path
) -> None:
    from helpers import study_key

    from runner._backends import AnthropicBackend
    from runner._execute import RunOptions, RunResult, run_study

    study = make_study(tmp_path / "study", replicates=1, template=study_template)
    control = runner._control.RunControl()

    def progress(counters: Any, final: int, total: int) -> None:
        if counters.retries == 1 and not control.signals:
            control.press("SIGINT")  # the trial is about to sleep 600 s (retry-after)

    results: list[RunResult] = []
    with FakeMessagesServer(latency_ms=0) as server:
        server.inject("429", count=1, retry_after=3600)
        backend = AnthropicBackend(api_key="test", base_url=server.base_url)
        options = RunOptions(concurrency=1, backoff_base=0.01, jitter_seed=1, preflight=False)
        thread = threading.Thread(
            target=lambda: results.append(
                run_study(study, study_key(), backend, options, progress, control)
            ),
            daemon=True,
        )
        thread.start()
        thread.join(300)
        assert not thread.is_alive(), "the retry slept through Ctrl-C"
    [result] = results
    assert result.reason == "interrupted: SIGINT" and result.signal == "SIGINT"
    assert result.counters.retries == 1 and result.counters.responded == 0
    check_ledger(study, complete=False)
