"""Runner benchmark: ``run_study`` against plain SDK calls, both on the fake Messages server.

    python benchmarks/bench_runner.py [--latencies 0,200] [--concurrency 1,8,32,128]
        [--rounds 10] [--min-trials 20] [--fast-trials 350] [--quick] [--json]

The fake Messages API server (``tests/fake_messages.py``) runs as a separate process, so its
threads do not share this process's GIL. For each server latency and each concurrency, in the
same run, this measures:

  * plain: the trials' exact request bodies (:class:`runner.request.RequestBuilder`) sent with
    plain ``anthropic.AsyncAnthropic(max_retries=0).messages.create(...)``, one task per
    trial, at most ``concurrency`` at once (an ``asyncio.Semaphore``): no ledger and none of
    this project's code on the request path (``max_retries=0`` as in the runner, which does its
    own retries; the fake server injects no faults, so none happen either way);
  * runner: :func:`runner.execute.run_study` with the ``anthropic`` backend on a fresh copy of a
    locked, never-run study (every trial appends ``trial.requested`` and ``trial.responded``,
    each a signed, durable SQLite transaction);

and prints trials per second of both, their ratio (runner end to end, and over the trial phase
only, from the first progress call to the last), and the ledger's share of the runner's wall
time (time spent inside ``Ledger.append_many``, on the runner's writer thread, timed by wrapping the
method in this script only).
Trials per configuration: ``rounds x concurrency`` (at least ``min-trials``) with latency, and
``fast-trials`` at 0 ms. Target: at 200 ms latency and concurrency 32, runner >= 0.9 x plain.
Timings are never asserted in tests; this script is where they are read.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anthropic

from ledger import Ledger, SigningKey
from runner.backends import AnthropicBackend
from runner.execute import Counters, RunOptions, run_study
from runner.lock import lock_study
from runner.new import new_study
from runner.request import RequestBuilder
from runner.spec import load_study
from runner.state import load_state

ROOT = Path(__file__).resolve().parent.parent
FAKE_SERVER = ROOT / "tests" / "fake_messages.py"
TEMPLATE = "prompt-tumbling-e"
TRIALS_PER_REPLICATE = 35
TARGET = (200.0, 32, 0.9)  # latency ms, concurrency, runner / plain


@dataclass
class Row:
    """The figures of one (latency, concurrency) configuration."""

    latency_ms: float
    concurrency: int
    trials: int
    plain_per_s: float
    runner_per_s: float
    runner_phase_per_s: float
    ratio: float
    phase_ratio: float
    ledger_share: float
    ledger_ms_per_append: float
    appends: int
    setup_ms: float


@contextlib.contextmanager
def fake_server(latency_ms: float) -> Iterator[str]:
    """Run ``tests/fake_messages.py`` as a child process; yield its base URL."""
    proc = subprocess.Popen(
        [sys.executable, str(FAKE_SERVER), "--port", "0", "--latency-ms", str(latency_ms)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "PORT":
            raise RuntimeError(f"fake server did not start (first line {line!r})")
        yield f"http://127.0.0.1:{line[1]}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class AppendTimer:
    """Wrap ``Ledger.append_many`` (on the class, for this script only) to sum the time inside it.

    ``Ledger.append`` goes through ``append_many`` too; the runner's group writer calls it from
    its own thread, so the time counted overlaps the network wait rather than adding to it.
    ``calls`` counts events, not transactions.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    @contextlib.contextmanager
    def installed(self) -> Iterator[AppendTimer]:
        """Time every ``Ledger.append_many`` while the block runs."""
        original: Callable[..., Any] = Ledger.__dict__["append_many"]

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            stored = original(*args, **kwargs)
            self.seconds += time.perf_counter() - start
            self.calls += len(stored)
            return stored

        setattr(Ledger, "append_many", timed)  # noqa: B010 (mypy refuses assigning to a method)
        try:
            yield self
        finally:
            setattr(Ledger, "append_many", original)  # noqa: B010


def locked_study(root: Path, trials: int) -> Path:
    """A locked, never-run tumbling-E study with at least ``trials`` trials in its schedule."""
    replicates = max(1, math.ceil(trials / TRIALS_PER_REPLICATE))
    key = SigningKey.generate("prompt-ledger.local/prompt-tumbling-e/owner")
    new_study(root, TEMPLATE, key)
    spec = root / "study.toml"
    text = spec.read_text(encoding="utf-8")
    if "replicates = 30" not in text:
        raise RuntimeError(f"{spec}: the template no longer says 'replicates = 30'")
    spec.write_text(text.replace("replicates = 30", f"replicates = {replicates}"), "utf-8")
    lock_study(root, key)
    key.save(root.parent / "owner.key")
    return root


def request_bodies(study_root: Path, trials: int) -> list[dict[str, Any]]:
    """The first ``trials`` pending trials' request bodies, as the runner would build them."""
    study = load_study(study_root)
    with Ledger.open(study_root / "ledger.db", readonly=True) as log:
        pending = load_state(study, log).pending()[:trials]
    builder = RequestBuilder(study)
    return [builder.body(trial) for trial in pending]


async def _plain(base_url: str, bodies: list[dict[str, Any]], conc: int) -> float:
    client = anthropic.AsyncAnthropic(api_key="test", base_url=base_url, max_retries=0)
    gate = asyncio.Semaphore(conc)

    async def call(body: dict[str, Any]) -> None:
        # anthropic 2.x no longer names ``temperature``: it travels in extra_body, so the JSON
        # sent is the same as the runner's
        named = {k: body[k] for k in ("model", "max_tokens", "messages")}
        extra = {k: v for k, v in body.items() if k not in named}
        async with gate:
            message = await client.messages.create(**named, extra_body=extra or None)
        if message.type != "message":
            raise RuntimeError(f"plain call answered {message.type!r}")

    start = time.perf_counter()
    try:
        await asyncio.gather(*(call(body) for body in bodies))
    finally:
        await client.close()
    return time.perf_counter() - start


def plain_rate(base_url: str, bodies: list[dict[str, Any]], concurrency: int) -> float:
    """Trials per second of plain ``AsyncAnthropic().messages.create`` calls, no ledger."""
    elapsed = asyncio.run(_plain(base_url, bodies, concurrency))
    return len(bodies) / elapsed


def runner_rates(
    base_url: str, locked: Path, work: Path, trials: int, concurrency: int
) -> tuple[float, float, AppendTimer, float]:
    """(end-to-end trials/s, trial-phase trials/s, append timer, setup+close seconds)."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(locked, work)  # a fresh ledger: locked, nothing run
    key = SigningKey.load(locked.parent / "owner.key")
    backend = AnthropicBackend(api_key="test", base_url=base_url)
    ticks: list[float] = []

    def progress(counters: Counters, final: int, total: int) -> None:
        ticks.append(time.perf_counter())

    options = RunOptions(concurrency=concurrency, max_trials=trials, jitter_seed=1)
    timer = AppendTimer()
    with timer.installed():
        start = time.perf_counter()
        result = run_study(work, key, backend, options, progress)
        elapsed = time.perf_counter() - start
    if result.fatal or result.counters.responded != trials or result.counters.retries:
        raise RuntimeError(f"runner did not answer every trial cleanly: {result}")
    phase = ticks[-1] - ticks[0]
    shutil.rmtree(work)
    return trials / elapsed, trials / phase, timer, elapsed - phase


def trials_for(latency_ms: float, concurrency: int, args: argparse.Namespace) -> int:
    """How many trials make a stable figure for one configuration."""
    if latency_ms <= 0:
        return int(args.fast_trials)
    return max(int(args.min_trials), int(args.rounds) * concurrency)


def run(args: argparse.Namespace) -> list[Row]:
    """Measure every configuration; return one row each."""
    latencies = [float(x) for x in args.latencies.split(",")]
    concurrencies = [int(x) for x in args.concurrency.split(",")]
    most = max(trials_for(lat, c, args) for lat in latencies for c in concurrencies)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        os.environ["PROMPT_LEDGER_HOME"] = str(Path(tmp) / "home")
        locked = locked_study(Path(tmp) / "locked" / "study", most)
        all_bodies = request_bodies(locked, most)
        work = Path(tmp) / "run" / "study"
        for latency in latencies:
            with fake_server(latency) as base_url:
                plain_rate(base_url, all_bodies[: min(8, most)], 8)  # warm up server and SDK
                for conc in concurrencies:
                    n = trials_for(latency, conc, args)
                    plain = plain_rate(base_url, all_bodies[:n], conc)
                    total, phase, timer, setup = runner_rates(base_url, locked, work, n, conc)
                    wall = n / total
                    rows.append(Row(
                        latency_ms=latency, concurrency=conc, trials=n,
                        plain_per_s=plain, runner_per_s=total, runner_phase_per_s=phase,
                        ratio=total / plain, phase_ratio=phase / plain,
                        ledger_share=timer.seconds / wall,
                        ledger_ms_per_append=1000 * timer.seconds / max(timer.calls, 1),
                        appends=timer.calls, setup_ms=1000 * setup,
                    ))  # fmt: skip
                    if args.progress:
                        print(f"  ... {latency:g} ms, concurrency {conc}: done", file=sys.stderr)
    return rows


def report(rows: list[Row]) -> None:
    """Print the table and the target."""
    print(f"runner benchmark: run_study vs plain AsyncAnthropic calls, fake server in a separate "
          f"process, {os.cpu_count()} cores")
    head = (f"  {'latency':>7} {'conc':>4} {'trials':>6} {'plain/s':>9} {'runner/s':>9} "
            f"{'ratio':>6} {'phase/s':>9} {'ph.ratio':>8} {'ledger':>7} {'ms/append':>9} "
            f"{'setup ms':>8}")  # fmt: skip
    print(head)
    for r in rows:
        print(f"  {r.latency_ms:>5g}ms {r.concurrency:>4} {r.trials:>6} {r.plain_per_s:>9.1f} "
              f"{r.runner_per_s:>9.1f} {r.ratio:>6.2f} {r.runner_phase_per_s:>9.1f} "
              f"{r.phase_ratio:>8.2f} {r.ledger_share:>6.1%} {r.ledger_ms_per_append:>9.2f} "
              f"{r.setup_ms:>8.0f}")  # fmt: skip
    print("  (ratio = runner end to end / plain; phase = first to last trial outcome; ledger = "
          "share of the runner's wall time inside Ledger.append_many (writer thread, "
          "overlapping the network); ms/append = per event; setup = integrity check, "
          "session open, run.stopped and checkpoint)")
    latency, conc, limit = TARGET
    for r in rows:
        if r.latency_ms == latency and r.concurrency == conc:
            met = "met" if r.ratio >= limit else "MISSED"
            print(f"  target runner >= {limit} x plain at {latency:g} ms, concurrency {conc}: "
                  f"{r.ratio:.2f} {met}")


def main() -> None:
    """Parse arguments, run, print."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--latencies", default="0,200", help="server latencies, ms")
    parser.add_argument("--concurrency", default="1,8,32,128")
    parser.add_argument("--rounds", type=int, default=10, help="trials = rounds x concurrency")
    parser.add_argument("--min-trials", type=int, default=20)
    parser.add_argument("--fast-trials", type=int, default=350, help="trials at 0 ms latency")
    parser.add_argument("--dir", default=None, help="where the studies are written")
    parser.add_argument("--quick", action="store_true", help="0 ms, concurrency 1 and 8, 35 trials")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.latencies, args.concurrency, args.fast_trials = "0", "1,8", 35
    rows = run(args)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return
    report(rows)


if __name__ == "__main__":
    main()
