"""Benchmark: every command after ``ledger run`` at 10^4, 10^5 (and 10^6) trials (issue 41).

Builds the tumbling-E template grown by replicates (35 trials each) with the simulated backend,
then runs each command as its own process, as a user would, and prints its wall time, its peak
resident memory (the process's own ``ru_maxrss``, from ``wait4``) and its cost per trial:

    ledger new / lock / run / score / unblind / analyze / report / export / verify

Limits (issue 41), printed as ratios measured in the same run: at 100,000 trials score,
analyze, export and verify each under 30 s and 1 GB; at 1,000,000 each under 2 GB and its
time per trial within 20% of the 100,000-trial cost (linear). A ratio above 1 is a miss.

    python benchmarks/bench_scale.py                       # 10,000 and 100,000 trials
    python benchmarks/bench_scale.py --trials 10000        # one size
    python benchmarks/bench_scale.py --trials 100000 1000000
    python benchmarks/bench_scale.py --keep /tmp/scale     # keep the studies and archives
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PER_REPLICATE = 35  # the tumbling-E template: 5 arms x 7 stimuli
CHECKED = ("score", "analyze", "export", "verify")
"""The commands issue 41 sets limits for."""
LIMIT_SECONDS_100K = 30.0
LIMIT_MB_100K = 1024.0
LIMIT_MB_1M = 2048.0
LINEAR = 1.2


@dataclass
class Step:
    """One command's cost."""

    command: str
    seconds: float
    peak_mb: float
    status: int


def _ledger() -> str:
    exe = Path(sys.executable).with_name("ledger")
    return str(exe) if exe.exists() else "ledger"


def measure(args: list[str], env: dict[str, str], log: Path) -> Step:
    """Run ``ledger ARGS`` as a child process; its wall time and its own peak RSS."""
    started = time.perf_counter()
    with log.open("ab") as out:
        out.write(f"$ ledger {' '.join(args)}\n".encode())
        out.flush()
        proc = subprocess.Popen([_ledger(), *args], env=env, stdout=out, stderr=out)
        _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    return Step(args[0], seconds, usage.ru_maxrss / 1024.0, proc.returncode)


def build_and_measure(trials: int, base: Path) -> tuple[int, list[Step]]:
    """Every command on a study of about ``trials`` trials; (the exact trial count, steps)."""
    replicates = max(1, round(trials / PER_REPLICATE))
    exact = replicates * PER_REPLICATE
    work = base / f"scale-{exact}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    home = work / "home"
    env = {**os.environ, "PROMPT_LEDGER_HOME": str(home)}
    study, archive, log = work / "study", work / "archive", work / "commands.log"
    steps = [measure(["new", str(study), "--template", "prompt-tumbling-e"], env, log)]
    spec = study / "study.toml"
    text = spec.read_text("utf-8")
    if "replicates = 30" not in text:
        raise SystemExit(f"{spec}: the template no longer says 'replicates = 30'")
    spec.write_text(text.replace("replicates = 30", f"replicates = {replicates}"), "utf-8")
    vkey = home / "keys" / f"{study.name}-owner.vkey"
    commands = [
        ["lock", str(study)],
        ["run", str(study), "--backend", "simulated", "--concurrency", "32"],
        ["score", str(study)],
        ["unblind", str(study)],
        ["analyze", str(study)],
        ["report", str(study), "--html", str(work / "report.html")],
        ["export", str(study), str(archive)],
        ["verify", str(archive), "--trusted-key", f"@{vkey}"],
    ]
    for args in commands:
        step = measure(args, env, log)
        steps.append(step)
        if step.status != 0:
            print(f"  ledger {args[0]} exited {step.status}; see {log}", file=sys.stderr)
            break
    return exact, steps


def _table(
    trials: int, size: int, steps: list[Step], per_trial_100k: dict[str, float]
) -> list[str]:
    """The printed rows of one size (``size``: the size asked for), with its limits as ratios."""
    lines = [f"{trials:,} trials", f"  {'command':<8} {'s':>8} {'MB':>7} {'us/trial':>9}  limits"]
    for s in steps:
        per = 1e6 * s.seconds / trials
        notes = []
        if s.command in CHECKED and size == 100_000:
            notes.append(f"time {s.seconds / LIMIT_SECONDS_100K:.2f}x of 30 s")
            notes.append(f"memory {s.peak_mb / LIMIT_MB_100K:.2f}x of 1 GB")
        if s.command in CHECKED and size == 1_000_000:
            notes.append(f"memory {s.peak_mb / LIMIT_MB_1M:.2f}x of 2 GB")
            if s.command in per_trial_100k:
                ratio = per / per_trial_100k[s.command]
                notes.append(f"per trial {ratio:.2f}x of 100k's (limit {LINEAR:.1f})")
        failed = "" if s.status == 0 else f"  EXIT {s.status}"
        lines.append(
            f"  {s.command:<8} {s.seconds:8.1f} {s.peak_mb:7.0f} {per:9.0f}  "
            + ", ".join(notes)
            + failed
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    """Build each size, run every command, print the table; exit 1 if a command failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--keep", type=Path, help="build here and keep the studies")
    opts = parser.parse_args(argv)
    base = opts.keep or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    load = os.getloadavg()
    print(f"bench_scale: {os.cpu_count()} cores, load average {load[0]:.1f} at the start")
    per_trial_100k: dict[str, float] = {}
    failed = False
    try:
        for wanted in sorted(opts.trials):
            trials, steps = build_and_measure(wanted, base)
            if wanted == 100_000:
                per_trial_100k = {s.command: 1e6 * s.seconds / trials for s in steps}
            print("\n".join(_table(trials, wanted, steps, per_trial_100k)), flush=True)
            failed = failed or any(s.status != 0 for s in steps)
    finally:
        if opts.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
