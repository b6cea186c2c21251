"""Ledger benchmarks, each related to an Ed25519 rate measured interleaved with it.

    python benchmarks/bench_ledger.py [--events 100000] [--batch 1000] [--repeat 3] [--json]
        [--quick] [--with-neighbour]

Prints, for this machine and this run:
  * Ed25519 sign and verify rates (cryptography/OpenSSL) on envelope-sized messages;
  * batched signed durable appends per second (synchronous=FULL), ratio to the sign rate
    (target >= 0.5);
  * single appends per second, one transaction and fsync each, ratio to the sign rate;
  * full independent verification, events per second, ratio to the verify rate
    (target >= 0.8 on one core), and with --jobs = cores, its speed-up;
  * inclusion proofs (make from the store + check) per second at the full size, ratio to the
    verify rate;
  * the machine's load average at the start and at the end.

Every ratio's Ed25519 rate is measured *interleaved* with the work it is compared to, not once
before it: appends and proofs alternate slice by slice with sign (verify) slices, and each full
verification runs between two verify-rate windows of about its length, whose mean it is
compared to (the median of ``--repeat`` verifications is reported). A busy neighbour therefore
slows both sides of a ratio alike. ``--with-neighbour`` runs everything twice, alone and then
beside a CPU-bound process this script starts (and stops), and prints both. Timings are never
asserted in tests; this script is where they are read. ``--quick`` shortens every measuring
window to a tenth (used by the tests: every figure is printed, none is worth reading).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ledger import EventSpec, Ledger, SigningKey
from verify import verify_ledger_file

SAMPLE_BODY = {
    "trial": "A|chart-mixed-1|7",
    "attempt": 1,
    "request_id": "req_011CZ2mfq4cX9Z7mJ8y3Q1vB",
    "usage": {"input_tokens": 1834, "output_tokens": 412},
    "latency_ms": 2318,
    "stop_reason": "end_turn",
}
NEIGHBOUR = "while True:\n    pass\n"  # one core's worth of pure-Python work, until stopped


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` shows them."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


class Interleaved:
    """Time the work and an Ed25519 operation in alternating slices; sum each side's time."""

    def __init__(self, probe: Callable[[], int]) -> None:
        """``probe()`` runs a slice of Ed25519 operations and returns how many it ran."""
        self.probe = probe
        self.work_s = 0.0
        self.work_ops = 0
        self.probe_s = 0.0
        self.probe_ops = 0

    def work(self, fn: Callable[[], int]) -> None:
        """Time one slice of work (``fn`` returns its operation count), then one probe slice."""
        start = time.perf_counter()
        self.work_ops += fn()
        middle = time.perf_counter()
        self.probe_ops += self.probe()
        self.work_s += middle - start
        self.probe_s += time.perf_counter() - middle

    def until(self, fn: Callable[[], int], seconds: float) -> None:
        """Alternate work and probe slices until ``seconds`` of work were timed."""
        while self.work_s < seconds:
            self.work(fn)

    @property
    def rate(self) -> float:
        """Work operations per second of work."""
        return self.work_ops / self.work_s

    @property
    def probe_rate(self) -> float:
        """Ed25519 operations per second of probing, over the same stretch of time."""
        return self.probe_ops / self.probe_s


def ed25519_probes(message: bytes) -> tuple[Callable[[int], int], Callable[[int], int]]:
    """(sign n times, verify n times) with ``cryptography``'s Ed25519 on ``message``."""
    key = SigningKey.generate("bench")
    signature = key.sign(message)
    verifier = key.verifier

    def sign(n: int) -> int:
        for _ in range(n):
            key.sign(message)
        return n

    def check(n: int) -> int:
        for _ in range(n):
            verifier.verify(message, signature)
        return n

    return sign, check


def _window_rate(fn: Callable[[int], int], seconds: float) -> float:
    done, start = 0, time.perf_counter()
    while True:
        done += fn(200)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return done / elapsed


def timed_verifications(
    path: Path, jobs: int, repeat: int, verify: Callable[[int], int]
) -> tuple[float, float, float]:
    """Verify ``path`` ``repeat`` times, each between two verify-rate windows of its length.

    Returns (median events/s, median ratio to the mean of each run's two windows, the mean
    Ed25519 verify rate of all windows).
    """
    with Ledger.open(path, readonly=True) as log:
        size = log.size
    window = 0.5
    before = _window_rate(verify, window)
    rates, ratios, windows = [], [], [before]
    for _ in range(repeat):
        start = time.perf_counter()
        report = verify_ledger_file(path, jobs=jobs)
        elapsed = time.perf_counter() - start
        if not report.ok:
            raise AssertionError(f"benchmark ledger failed verification: {report.failures}")
        window = min(max(elapsed, 0.2), 5.0)
        after = _window_rate(verify, window)
        rates.append(size / elapsed)
        ratios.append((size / elapsed) / ((before + after) / 2))
        windows.append(after)
        before = after
    return statistics.median(rates), statistics.median(ratios), statistics.fmean(windows)


def run(events: int, batch: int, jobs: int, window: float = 1.0, repeat: int = 3) -> dict[str, Any]:
    """Run every benchmark and return the figures; each rate is measured for ``window`` s
    (single appends and inclusion proofs for twice that), interleaved with Ed25519 slices."""
    results: dict[str, Any] = {
        "events": events,
        "batch": batch,
        "cores": os.cpu_count(),
        "load_start": load_average(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        owner = SigningKey.generate("bench.example/owner")
        path = Path(tmp) / "bench.db"
        log = Ledger.create(path, origin="bench.example/log", key=owner)
        sample = log.append("custom.sample", SAMPLE_BODY, key=owner).envelope
        results["envelope_bytes"] = len(sample)
        sign, verify = ed25519_probes(sample)

        # batched appends, each batch followed by a slice of signatures about as long
        slice_signs = max(20, batch // 4)
        appends = Interleaved(lambda: sign(slice_signs))
        remaining = events - log.size

        def one_batch() -> int:
            n = min(batch, remaining)
            log.append_many([EventSpec("custom.sample", SAMPLE_BODY)] * n, key=owner)
            return n

        while remaining > 0:
            appends.work(one_batch)
            remaining = events - log.size
        results["batched_append_per_s"] = appends.rate
        results["ed25519_sign_per_s"] = appends.probe_rate

        single_path = Path(tmp) / "single.db"
        single = Ledger.create(single_path, origin="bench.example/single", key=owner)

        def singles() -> int:
            for _ in range(10):
                single.append("custom.sample", SAMPLE_BODY, key=owner)
            return 10

        one_by_one = Interleaved(lambda: sign(10))
        one_by_one.until(singles, 2 * window)
        results["single_append_per_s"] = one_by_one.rate
        results["single_append_sign_per_s"] = one_by_one.probe_rate
        single.close()

        rng = random.Random(1)
        size = log.size

        def proofs() -> int:
            for _ in range(100):
                index = rng.randrange(size)
                if not log.inclusion_proof(index, size).verify():
                    raise AssertionError("inclusion proof failed")
            return 100

        proving = Interleaved(lambda: verify(100))
        proving.until(proofs, 2 * window)
        results["inclusion_proofs_per_s"] = proving.rate
        results["proof_verify_per_s"] = proving.probe_rate
        log.sign_checkpoint(owner)
        log.close()

        rate, ratio, verify_rate = timed_verifications(path, 1, repeat, verify)
        results["verify_per_s"], results["ed25519_verify_per_s"] = rate, verify_rate
        rate_jobs, ratio_jobs, _ = timed_verifications(path, jobs, 1, verify)
        results["verify_jobs"] = jobs
        results["verify_jobs_per_s"] = rate_jobs
    results["load_end"] = load_average()
    results["ratios"] = {
        "batched_append / sign": appends.rate / appends.probe_rate,
        "single_append / sign": one_by_one.rate / one_by_one.probe_rate,
        "verify(jobs=1) / verify": ratio,
        f"verify(jobs={jobs}) / verify": ratio_jobs,
        "inclusion_proof / verify": proving.rate / proving.probe_rate,
    }
    results["targets_met"] = {
        "batched_append >= 0.5 x sign": results["ratios"]["batched_append / sign"] >= 0.5,
        "verify(jobs=1) >= 0.8 x verify": results["ratios"]["verify(jobs=1) / verify"] >= 0.8,
    }
    return results


@contextlib.contextmanager
def neighbour() -> Iterator[int]:
    """A CPU-bound Python process beside the benchmark (stopped, by its pid, at the end)."""
    proc = subprocess.Popen([sys.executable, "-c", NEIGHBOUR])
    try:
        time.sleep(0.5)  # let it reach the scheduler's steady state
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def report(results: dict[str, Any], label: str) -> None:
    """Print one run's figures."""
    print(
        f"ledger benchmark{label}: {results['events']} events of {results['envelope_bytes']} "
        f"bytes, {results['cores']} cores"
    )
    print(f"  load average at start: {results['load_start']}")
    rows = [
        ("Ed25519 sign (beside the batched appends)", results["ed25519_sign_per_s"], "/s"),
        ("Ed25519 verify (beside the verifications)", results["ed25519_verify_per_s"], "/s"),
        (
            f"batched append (batch {results['batch']}, FULL)",
            results["batched_append_per_s"],
            "events/s",
        ),
        ("single append (FULL)", results["single_append_per_s"], "events/s"),
        ("verify, 1 job", results["verify_per_s"], "events/s"),
        (f"verify, {results['verify_jobs']} jobs", results["verify_jobs_per_s"], "events/s"),
        ("inclusion proof make+check", results["inclusion_proofs_per_s"], "proofs/s"),
    ]
    for name, value, unit in rows:
        print(f"  {name:<44} {value:>12,.0f} {unit}")
    for name, ratio in results["ratios"].items():
        print(f"  ratio {name:<38} {ratio:>12.2f}")
    for name, met in results["targets_met"].items():
        print(f"  target {name:<37} {'met' if met else 'MISSED':>12}")
    print(f"  load average at end: {results['load_end']}")


def main() -> None:
    """Parse arguments, run, print."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=3, help="verifications (1 job) timed")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="measure each rate for 0.1-0.2 s instead of 1-2 s (the test suite)",
    )
    parser.add_argument(
        "--with-neighbour",
        action="store_true",
        help="run alone, then again beside a CPU-bound process; print both",
    )
    args = parser.parse_args()
    window, repeat = (0.1, 1) if args.quick else (1.0, args.repeat)
    runs = [("", run(args.events, args.batch, args.jobs, window, repeat))]
    if args.with_neighbour:
        with neighbour() as pid:
            runs.append(
                (
                    f" beside a CPU-bound neighbour (pid {pid})",
                    run(args.events, args.batch, args.jobs, window, repeat),
                )
            )
    if args.json:
        print(json.dumps({label or "alone": r for label, r in runs}, indent=2))
        return
    for label, results in runs:
        report(results, label)


if __name__ == "__main__":
    main()
