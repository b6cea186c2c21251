"""Deterministic keys and clocks shared by tests."""

from __future__ import annotations

import ctypes
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ledger import FixedClock, Ledger, SigningKey


def fixed_key(name: str) -> SigningKey:
    """A deterministic key: seed = SHA-256("prompt-ledger test key <name>")."""
    return SigningKey(name, hashlib.sha256(f"prompt-ledger test key {name}".encode()).digest())


def fixed_clock() -> FixedClock:
    """A clock that starts at 2026-01-01T00:00:00Z and advances one millisecond per reading."""
    return FixedClock()


STUDY_ORIGIN = "prompt-ledger.local/prompt-tumbling-e"


def study_key() -> SigningKey:
    """The fixed owner key of test studies."""
    return fixed_key(f"{STUDY_ORIGIN}/owner")


def make_study(
    root: Path, *, replicates: int, template: Path | None = None, provider: str | None = None
) -> Path:
    """A study from the tumbling-E template with ``replicates`` replicates, locked.

    ``template`` (a folder made by :func:`runner._new.new_study` whose ledger was removed) is
    copied when given, which saves drawing the stimuli again. ``PROMPT_LEDGER_HOME`` must point
    at a temporary directory (the blinding secret is written there). ``provider`` replaces the
    template's ``[model] provider``.
    """
    from ledger import user_home
    from runner._lock import lock_study
    from runner._new import new_study

    key = study_key()
    key_file = user_home() / "keys" / "prompt-tumbling-e-owner.key"
    if not key_file.exists():
        key_file.parent.mkdir(parents=True, exist_ok=True)
        key.save(key_file)
    if template is None:
        new_study(root, "prompt-tumbling-e", key)
    else:
        shutil.copytree(template, root)
        with Ledger.create(root / "ledger.db", origin=STUDY_ORIGIN, key=key):
            pass
    spec = root / "study.toml"
    text = spec.read_text(encoding="utf-8")
    text = text.replace("replicates = 30", f"replicates = {replicates}")
    if provider is not None:  # the template is locked for anthropic
        text = text.replace('provider = "anthropic"', f"provider = {provider!r}".replace("'", '"'))
    spec.write_text(text, "utf-8")
    lock_study(root, key)
    return root


# ---------------------------------------------------------------------- permission bits


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_CAP_VERSION_3 = 0x20080522
_CAP_DAC_OVERRIDE = 1
_CAP_DAC_READ_SEARCH = 2


def _set_dac_capabilities(enabled: bool) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget failed")
    mask = (1 << _CAP_DAC_OVERRIDE) | (1 << _CAP_DAC_READ_SEARCH)
    if enabled:
        data[0].effective |= mask & data[0].permitted
    else:
        data[0].effective &= ~mask
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


@contextmanager
def permissions_bind() -> Iterator[None]:
    """Make file permission bits bind this thread even when it runs as root (CI does).

    Root writes into a mode 0555 directory through CAP_DAC_OVERRIDE; inside this block the
    calling thread has neither that capability nor CAP_DAC_READ_SEARCH in its effective set,
    so a chmod'ed path refuses it exactly as it refuses an ordinary user (root still owns its
    files, so it can read them and chmod them back). Outside Linux-as-root it changes nothing.
    Capabilities are per thread: the code under test must do its file operations on this one.
    """
    if sys.platform != "linux" or os.geteuid() != 0:
        yield
        return
    _set_dac_capabilities(False)
    try:
        yield
    finally:
        _set_dac_capabilities(True)


LEDGER_CLI = [sys.executable, "-c", "from ledger.cli import main; main()"]
"""The ``ledger`` command as the tests start it (the console script's ``main``)."""

FULL_SOAK = os.environ.get("PROMPT_LEDGER_FULL_SOAK") == "1"
"""``PROMPT_LEDGER_FULL_SOAK=1``: the kill soaks make their full number of kills (:func:`soak`)."""


def soak(quick: int, full: int) -> int:
    """How many times a kill soak kills: ``quick`` in the slow set, ``full`` (the soak as first
    written, hours of CI time over a year) where ``PROMPT_LEDGER_FULL_SOAK=1`` is set.

    The quick count still reaches every kind of moment the soak aims at, because the kills are
    spread over the soak's window (:func:`spread`) rather than drawn where chance puts them;
    the full count adds more draws of the same kinds, for rarer interleavings."""
    return full if FULL_SOAK else quick


def spread(rng: random.Random, n: int, low: float, high: float) -> list[float]:
    """``n`` moments in [``low``, ``high``): one drawn uniformly in each of ``n`` equal slices,
    in an order shuffled by ``rng``. Every part of the window is hit as ``n`` grows, even for a
    small ``n``, where ``n`` independent draws can leave a third of it untouched."""
    width = (high - low) / n
    moments = [low + width * (i + rng.random()) for i in range(n)]
    rng.shuffle(moments)
    return moments


def sigkill_sessions(
    args: list[str],
    env: dict[str, str],
    kills: int,
    progress: Callable[[], int],
    rng: random.Random,
    *,
    delay: float = 0.5,
    grow: int = 0,
    log: Path | None = None,
) -> int:
    """SIGKILL up to ``kills`` sessions of ``args`` (a ``ledger run``), then finish the run.

    Each session is started, watched until ``progress()`` exceeds its value at the start by more
    than ``grow`` (or 120 s pass), left a moment more, and killed with SIGKILL. The moments
    cover [0, ``delay``) seconds, one in each of ``kills`` equal slices (:func:`spread`), so
    that kills land both with the session's first calls just sent and after some have been
    answered. A session that ends on its own must exit 0, and ends the kills (the run finished
    before it could be killed). A last session then runs to completion and must exit 0.
    Returns the number of kills made.

    With ``log``, ``args`` must be ``[*LEDGER_CLI, ...]`` and each session is a process forked
    from one that imported the runner once (``forked_cli.ForkedCli``), its output appended to
    ``log``; without it, each is a fresh ``subprocess.Popen`` of ``args``.
    """

    def start() -> Any:
        if log is None:
            return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        from forked_cli import ForkedCli

        assert args[: len(LEDGER_CLI)] == LEDGER_CLI, args
        return ForkedCli(args[len(LEDGER_CLI) :], env, log)

    made = 0
    for moment in spread(rng, kills, 0.0, delay):
        before = progress()
        proc = start()
        deadline = time.monotonic() + 120
        while progress() <= before + grow and proc.poll() is None and (time.monotonic() < deadline):
            time.sleep(0.05)  # wait for this session's first calls (each look reads the ledger)
        time.sleep(moment)
        if proc.poll() is not None:
            _out, err = proc.communicate()
            assert proc.returncode == 0, err.decode()
            break
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        made += 1
    proc = start()
    _out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err.decode()
    return made


def template_demo(base: Path, template: str, width: int = 220) -> Iterator[tuple[object, str]]:
    """``ledger demo --template TEMPLATE`` in ``base``: yield (its DemoResult, what it printed).

    ``PROMPT_LEDGER_HOME`` points into ``base`` while the caller holds the result (a module
    fixture's ``yield from``), so the demo's keys never reach the user's home.
    """
    import io

    import pytest
    from rich.console import Console

    from analysis._demo import run_demo

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
        result = run_demo(base / "demo", Console(file=out, width=width), template=template)
        yield result, out.getvalue()


def cli_export(root: Path, key: Path, out: Path) -> None:
    """``ledger lock``, ``run`` (simulated), ``score``, ``unblind``, ``analyze`` and ``export``
    of the study at ``root`` through the CLI, each with ``--key``; every step must succeed."""
    from click.testing import CliRunner

    from ledger.cli import main

    for step in (
        ("lock", root),
        ("run", root, "--backend", "simulated"),
        ("score", root),
        ("unblind", root),
        ("analyze", root),
        ("export", root, out),
    ):
        result = CliRunner().invoke(main, [*map(str, step), "--key", str(key)])
        assert result.exit_code == 0, (step, result.output)


SCIENCE_CHECKS = ("rescore", "reanalysis", "plan")
"""The checks ``verify._science`` adds to an archive's report, after every other check."""


@contextmanager
def science_skipped() -> Iterator[None]:
    """Inside the block, archives verify without their science checks (:data:`SCIENCE_CHECKS`).

    For a test whose assertions read only other checks (that one FAILs or PASSes, what it
    says) and, at most, that the report is not ``ok``: re-scoring and re-analysing (seconds:
    every mixed model refitted) are then work no assertion reads. The test proves the same
    thing with them skipped, because (``verify/_archive/__init__.py``, ``_verify``) the science
    checks run after every other check (but a public archive's ``privacy``, which reads none of
    their results) and on what those checks already read, so every other check comes out the
    same; and a report is ``ok`` when no check FAILed, so a report
    that FAILs without them FAILs with them too. ``test_archive_tamper.py``'s
    ``test_skipping_science_changes_no_other_check`` compares a full report with one made in
    this block. A test that asserts a report is ``ok``, or reads a science check, verifies in
    full.
    """
    import verify._archive

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(verify._archive, "_science", lambda run: [])
        yield


@contextmanager
def reanalysis_skipped() -> Iterator[None]:
    """Inside the block, archives verify without the ``reanalysis`` check (``rescore`` runs).

    For a test whose assertions read ``rescore`` and other checks, never ``reanalysis``, and at
    most that the report is not ``ok`` (a tamper that ``rescore`` owns):
    ``verify._science.science_checks`` runs ``rescore`` first and ``reanalysis`` after it,
    each on its own (``_run``; the re-analysis re-derives its own dataset and reads nothing the
    re-scoring found), so ``rescore`` and every check before the science checks come out the
    same without it, and a report that FAILs without it FAILs with it. The re-analysis (every
    mixed model refitted) is most of the science checks' CPU. The check is left out of an
    archive's report, never recorded as passed; ``science_checks`` called directly returns a
    ``WARN`` in its place ("not run").
    """
    import verify
    import verify._archive
    import verify._science

    real = verify._archive._science

    def science(run: Any) -> list[Any]:
        return [c for c in real(run) if c.name != "reanalysis"]

    def not_run(archive: Any) -> Any:
        return verify.Check("reanalysis", verify.Status.WARN, "not run (left out)")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(verify._science, "_reanalysis", not_run)
        mp.setattr(verify._archive, "_science", science)
        yield


def assert_flow_matches_ledger(archive: Path) -> None:
    """The archive's ``analysis/tables/flow.csv`` says, per arm and in total, what a plain count
    of its ``ledger/events.jsonl``, ``trials/schedule.csv`` and ``analysis/trials.csv`` gives
    (``docs/reporting.md`` §1): scheduled, requested, responded, given up, analysed."""
    import csv
    import json
    from collections import Counter

    events = [
        json.loads(line)["envelope"]
        for line in (archive / "ledger" / "events.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    with (archive / "trials" / "schedule.csv").open(encoding="utf-8") as f:
        schedule = [row["trial"] for row in csv.DictReader(f)]
    arm_of = {tid: tid.split("|")[0] for tid in schedule}
    want: dict[str, Counter[str]] = {"": Counter()}
    for tid in schedule:
        for key in ("", arm_of[tid]):
            want.setdefault(key, Counter())["scheduled"] += 1
    kinds = {"trial.requested": "requested", "trial.responded": "responded"}
    seen: dict[str, set[str]] = {"requested": set(), "responded": set(), "given_up": set()}
    for e in events:
        name = kinds.get(e["kind"])
        if e["kind"] == "trial.failed" and e["body"].get("final") is True:
            name = "given_up"
        if name is not None:
            seen[name].add(e["body"]["trial"])
    for name, trials in seen.items():
        for tid in trials:
            for key in ("", arm_of[tid]):
                want[key][name] += 1
    with (archive / "analysis" / "trials.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["control"] == "False" and row["excluded"] == "False":
                for key in ("", row["arm"]):
                    want[key]["analysed"] += 1
    with (archive / "analysis" / "tables" / "flow.csv").open(encoding="utf-8") as f:
        rows = {r["arm"]: r for r in csv.DictReader(f) if r["level"] in ("all", "arm")}
    assert sorted(rows) == sorted(want), (sorted(rows), sorted(want))
    for key, counts in want.items():
        for name in ("scheduled", "requested", "responded", "given_up", "analysed"):
            assert int(rows[key][name]) == counts[name], (key or "all", name)
