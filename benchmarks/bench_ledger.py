"""Ledger benchmarks, each related to an Ed25519 rate measured in the same process.

    python benchmarks/bench_ledger.py [--events 100000] [--batch 1000] [--json] [--quick]

Prints, for this machine and this run:
  * Ed25519 sign and verify rates (cryptography/OpenSSL) on envelope-sized messages;
  * batched signed durable appends per second (synchronous=FULL), ratio to the sign rate
    (target >= 0.5);
  * single appends per second, one transaction and fsync each, ratio to the sign rate;
  * full independent verification, events per second, ratio to the verify rate
    (target >= 0.8 on one core), and with --jobs = cores, its speed-up;
  * inclusion proofs (make from the store + check) per second at the full size, ratio to the
    verify rate.
Timings are never asserted in tests; this script is where they are read. ``--quick`` shortens
each rate's measuring window from 1-2 s to a tenth of that (used by the tests: every figure is
printed, none is worth reading).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from collections.abc import Callable
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


def _rate(fn: Callable[[], int], min_seconds: float = 1.0) -> float:
    """Run ``fn`` (which returns an operation count) until ``min_seconds`` pass; ops per second."""
    done = 0
    start = time.perf_counter()
    while True:
        done += fn()
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return done / elapsed


def ed25519_rates(message: bytes, window: float = 1.0) -> tuple[float, float]:
    """Sign and verify rates of ``cryptography``'s Ed25519 on ``message``."""
    key = SigningKey.generate("bench")
    signature = key.sign(message)
    verifier = key.verifier

    def sign() -> int:
        for _ in range(500):
            key.sign(message)
        return 500

    def check() -> int:
        for _ in range(500):
            verifier.verify(message, signature)
        return 500

    return _rate(sign, window), _rate(check, window)


def run(events: int, batch: int, jobs: int, window: float = 1.0) -> dict[str, Any]:
    """Run every benchmark and return the figures; each rate is measured for ``window`` s
    (single appends and inclusion proofs for twice that)."""
    results: dict[str, Any] = {"events": events, "batch": batch, "cores": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        owner = SigningKey.generate("bench.example/owner")
        path = Path(tmp) / "bench.db"
        log = Ledger.create(path, origin="bench.example/log", key=owner)
        sample = log.append("custom.sample", SAMPLE_BODY, key=owner).envelope
        sign_rate, verify_rate = ed25519_rates(sample, window)
        results["envelope_bytes"] = len(sample)
        results["ed25519_sign_per_s"] = sign_rate
        results["ed25519_verify_per_s"] = verify_rate

        remaining = events - log.size
        start = time.perf_counter()
        while remaining > 0:
            n = min(batch, remaining)
            log.append_many([EventSpec("custom.sample", SAMPLE_BODY)] * n, key=owner)
            remaining -= n
        appended = events - 2
        results["batched_append_per_s"] = appended / (time.perf_counter() - start)

        single_path = Path(tmp) / "single.db"
        single = Ledger.create(single_path, origin="bench.example/single", key=owner)

        def one() -> int:
            for _ in range(50):
                single.append("custom.sample", SAMPLE_BODY, key=owner)
            return 50

        results["single_append_per_s"] = _rate(one, 2 * window)
        single.close()

        rng = random.Random(1)
        size = log.size

        def proofs() -> int:
            for _ in range(200):
                index = rng.randrange(size)
                if not log.inclusion_proof(index, size).verify():
                    raise AssertionError("inclusion proof failed")
            return 200

        results["inclusion_proofs_per_s"] = _rate(proofs, 2 * window)
        log.sign_checkpoint(owner)
        log.close()

        start = time.perf_counter()
        report = verify_ledger_file(path, jobs=1)
        results["verify_per_s"] = size / (time.perf_counter() - start)
        if not report.ok:
            raise AssertionError(f"benchmark ledger failed verification: {report.failures}")
        start = time.perf_counter()
        report = verify_ledger_file(path, jobs=jobs)
        results["verify_jobs"] = jobs
        results["verify_jobs_per_s"] = size / (time.perf_counter() - start)
        if not report.ok:
            raise AssertionError("benchmark ledger failed parallel verification")
    results["ratios"] = {
        "batched_append / sign": results["batched_append_per_s"] / sign_rate,
        "single_append / sign": results["single_append_per_s"] / sign_rate,
        "verify(jobs=1) / verify": results["verify_per_s"] / verify_rate,
        f"verify(jobs={jobs}) / verify": results["verify_jobs_per_s"] / verify_rate,
        "inclusion_proof / verify": results["inclusion_proofs_per_s"] / verify_rate,
    }
    results["targets_met"] = {
        "batched_append >= 0.5 x sign": results["ratios"]["batched_append / sign"] >= 0.5,
        "verify(jobs=1) >= 0.8 x verify": results["ratios"]["verify(jobs=1) / verify"] >= 0.8,
    }
    return results


def main() -> None:
    """Parse arguments, run, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="measure each rate for 0.1-0.2 s instead of 1-2 s (the test suite)")
    args = parser.parse_args()
    results = run(args.events, args.batch, args.jobs, 0.1 if args.quick else 1.0)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"ledger benchmark: {results['events']} events of {results['envelope_bytes']} bytes, "
          f"{results['cores']} cores")
    rows = [
        ("Ed25519 sign", results["ed25519_sign_per_s"], "/s"),
        ("Ed25519 verify", results["ed25519_verify_per_s"], "/s"),
        (f"batched append (batch {results['batch']}, FULL)", results["batched_append_per_s"],
         "events/s"),
        ("single append (FULL)", results["single_append_per_s"], "events/s"),
        ("verify, 1 job", results["verify_per_s"], "events/s"),
        (f"verify, {results['verify_jobs']} jobs", results["verify_jobs_per_s"], "events/s"),
        ("inclusion proof make+check", results["inclusion_proofs_per_s"], "proofs/s"),
    ]
    for name, value, unit in rows:
        print(f"  {name:<40} {value:>12,.0f} {unit}")
    for name, ratio in results["ratios"].items():
        print(f"  ratio {name:<34} {ratio:>12.2f}")
    for name, met in results["targets_met"].items():
        print(f"  target {name:<33} {'met' if met else 'MISSED':>12}")


if __name__ == "__main__":
    main()
