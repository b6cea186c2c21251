"""Overhead of the Inspect extension: ``inspect eval`` with and without it, in one run.

    python benchmarks/bench_inspect.py [--repeat 10] [--reps 3]

The MCQ task of ``tests/inspect_tasks/ledger_mcq.py`` (12 questions x ``--repeat``) against
the project's fake OpenAI-compatible server (``tests/support/inspect_support.py``, real HTTP on
127.0.0.1, in this process's threads), each side a fresh ``inspect eval`` process, start to
exit. Repetitions are interleaved (the order alternating), medians compared: overhead per
sample = (median with - median without) / samples. Each run with the extension writes a fresh
ledger (its keys, genesis, lock, two checkpoints, and per call two events and their blobs,
each event one fsynced SQLite transaction). Needs the ``inspect`` extra.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT))  # the package `tests`, for the helpers that import test modules
# the fake server and the `inspect eval` runner the tests use (tests/support/inspect_support.py)
support = importlib.import_module("inspect_support")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="question set repetitions")
    parser.add_argument("--reps", type=int, default=3, help="runs of each side")
    args = parser.parse_args()
    samples = 12 * args.repeat
    server = support.McqChatServer()
    server.thread.start()
    times: dict[str, list[float]] = {"plain": [], "ledger": []}
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            sides = ["plain", "ledger"] if rep % 2 == 0 else ["ledger", "plain"]
            for side in sides:
                logs = Path(tmp) / f"logs-{side}-{rep}"
                folder = Path(tmp) / f"ledger-{rep}" if side == "ledger" else None
                start = time.perf_counter()
                done = support.inspect_eval(
                    server.url,
                    logs,
                    folder,
                    "-T",
                    f"repeat={args.repeat}",
                    "--max-connections",
                    "10",
                )
                elapsed = time.perf_counter() - start
                if done.returncode != 0:
                    sys.exit(f"inspect eval ({side}) failed:\n{done.stderr[-3000:]}")
                times[side].append(elapsed)
                shutil.rmtree(logs)
    server.httpd.shutdown()
    plain, ledger = statistics.median(times["plain"]), statistics.median(times["ledger"])
    print(
        f"inspect eval, {samples} samples (1 call each), {args.reps} interleaved runs per side; "
        f"load average {load_start[0]:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    print(
        f"  plain      runs {', '.join(f'{t:.2f}' for t in times['plain'])} s, median {plain:.2f} s"
    )
    print(
        f"  extension  runs {', '.join(f'{t:.2f}' for t in times['ledger'])} s, "
        f"median {ledger:.2f} s"
    )
    print(
        f"  overhead   {ledger - plain:+.2f} s per eval, "
        f"{(ledger - plain) / samples * 1000:+.1f} ms per sample ({ledger / plain:.2f}x)"
    )


if __name__ == "__main__":
    main()
