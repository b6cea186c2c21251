"""Start-up time of the ``ledger`` command against the floor of any click program.

    .venv/bin/python benchmarks/bench_cli.py [--repeat 15]

Runs, interleaved so a busy neighbour slows every side alike: ``ledger --help``,
``ledger --version``, ``ledger verify --help``, ``ledger run --help`` and
``python -c "import click"`` (the least a click command can cost), each as a fresh process,
and prints the median wall time of each and its ratio to ``import click``. Targets (issue 13):
``ledger --help`` under 0.25 s and within 5x of ``import click``. Also lists the heavy modules
that ``ledger --help`` must not import (pandas, statsmodels, matplotlib, anthropic, numpy).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 0.25
TARGET_RATIO = 5.0
HEAVY = ("pandas", "statsmodels", "matplotlib", "anthropic", "numpy", "scipy", "PIL", "httpx")


def _ledger(*args: str) -> list[str]:
    return [sys.executable, "-c", "from ledger.cli import main; main()", *args]


CASES: dict[str, list[str]] = {
    "python -c 'import click'": [sys.executable, "-c", "import click"],
    "ledger --help": _ledger("--help"),
    "ledger --version": _ledger("--version"),
    "ledger verify --help": _ledger("verify", "--help"),
    "ledger run --help": _ledger("run", "--help"),
}


def _time(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - started


def heavy_modules_imported() -> list[str]:
    """The heavy modules that ``ledger --help`` imports (should be none)."""
    probe = (
        "import sys; from ledger.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print('HEAVY:', *(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True, cwd=ROOT
    ).stdout
    line = next(x for x in out.splitlines() if x.startswith("HEAVY:"))
    return line.split()[1:]


def main() -> int:
    """Time every case interleaved; print medians and ratios; exit 1 if a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    for command in CASES.values():  # warm the bytecode caches once
        _time(command)
    samples: dict[str, list[float]] = {name: [] for name in CASES}
    load_start = os.getloadavg()[0]
    for _ in range(args.repeat):
        for name, command in CASES.items():
            samples[name].append(_time(command))
    load_end = os.getloadavg()[0]
    floor = statistics.median(samples["python -c 'import click'"])
    print(
        f"start-up, median of {args.repeat} interleaved runs "
        f"(load average {load_start:.2f} -> {load_end:.2f}, {os.cpu_count()} cores)"
    )
    print(f"{'command':28} {'median s':>9} {'min s':>7} {'x import click':>15}")
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"{name:28} {median:9.3f} {min(values):7.3f} {median / floor:15.2f}")
    help_median = statistics.median(samples["ledger --help"])
    ratio = help_median / floor
    heavy = heavy_modules_imported()
    print(
        f"ledger --help: {help_median:.3f} s (target < {TARGET_SECONDS} s), "
        f"{ratio:.2f} x import click (target <= {TARGET_RATIO} x)"
    )
    print(f"heavy modules imported by ledger --help: {', '.join(heavy) or 'none'}")
    ok = help_median < TARGET_SECONDS and ratio <= TARGET_RATIO and not heavy
    print("targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
