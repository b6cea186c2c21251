"""Differential-diagnosis scoring at scale: run, score, re-derive; seconds per phase.

    .venv/bin/python benchmarks/bench_ddx.py [--items 60] [--quick]

Writes the study of ``tests/support/ddx_study.py`` with ``items`` cases (its six cases repeated
under new ids): a semantic extractor and a reference item step voted element-wise by three
simulated models, two target models under two arms (4 trials per item), a list extractor, a
matcher voted by three models, a grounding and an uncertainty judge (6 trial step calls per
trial). Times ``ledger run`` (simulated; every trial and step call recorded), ``ledger score``
(every ddx score from the recorded decisions, ``docs/scoring.md`` §12), ``ledger analyze``
(``descriptive.ddx`` and the hypotheses) and the verifier's re-derivation of every ddx score
(``verify/_ddx.py``). Prints each phase's wall time, per trial, and the scoring's ratio to a
floor measured in the same run: reading and JSON-parsing every step response body, which any
implementation of the scoring must do.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=60)
    parser.add_argument("--quick", action="store_true", help="6 items")
    args = parser.parse_args()
    n = 6 if args.quick else args.items

    import os

    from ddx_study import items, write_study  # type: ignore[import-not-found]
    from helpers import fixed_key  # type: ignore[import-not-found]

    from analysis import analyze_study, score_study, unblind_study
    from ledger import Ledger
    from runner import RunOptions, SimulatedBackend, lock_study, run_study

    load = os.getloadavg()
    base = Path(tempfile.mkdtemp(prefix="bench-ddx-"))
    os.environ["PROMPT_LEDGER_HOME"] = str(base / "home")
    cases = items()
    records = []
    for i in range(n):
        record = json.loads(json.dumps(cases[i % len(cases)]))
        record["id"] = f"c{i + 1:05d}"
        records.append(record)
    root = write_study(base / "study", records=records)
    key = fixed_key("bench.example/owner")
    figures: dict[str, float] = {}
    t0 = time.perf_counter()
    lock_study(root, key)
    figures["lock"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = run_study(root, key, SimulatedBackend(), RunOptions(concurrency=8, jitter_seed=1))
    figures["run"] = time.perf_counter() - t0
    assert result.reason == "complete", result.reason
    t0 = time.perf_counter()
    scored = score_study(root, key)
    figures["score"] = time.perf_counter() - t0
    unblind_study(root, key)
    t0 = time.perf_counter()
    analyze_study(root, key)
    figures["analyze"] = time.perf_counter() - t0

    from verify import _ddx

    with Ledger.open(root / "ledger.db", readonly=True) as log:
        protocol = next(iter(log.events("protocol.locked"))).body
        kinds = ("trial.requested", "step.requested", "step.responded", "step.failed")
        events = [(e.seq, e.kind, e.body, e.blobs) for e in log.events() if e.kind in kinds]
        blobs = {d: log.blob(d) for _, _, _, b in events for d in b.values()}
        locked = {e.body["path"]: e.body.get("sha256") for e in log.events("artifact.locked")}
    t0 = time.perf_counter()
    for _, kind, _, b in events:
        if kind == "step.responded":
            json.loads(blobs[b["response"]])
    figures["floor"] = time.perf_counter() - t0
    metadata = {r["id"]: r["metadata"] for r in records}

    def read(path: str) -> bytes | None:
        file = root / path
        return file.read_bytes() if path in locked and file.is_file() else None

    def getter(refs: dict[str, str]) -> Any:
        return lambda name: blobs.get(refs[name]) if name in refs else None

    t0 = time.perf_counter()
    derived = _ddx.ddx_records(
        protocol, [(s, k, body, getter(b)) for s, k, body, b in events], read, metadata
    )
    figures["verify_rescore"] = time.perf_counter() - t0
    trials = scored.scored
    steps = sum(1 for _, k, _, _ in events if k == "step.requested")
    assert sum(v is not None for v in derived.values()) == trials
    print(
        f"ddx benchmark: {n} items, {trials} trials, {steps} step calls; load average at "
        f"start {load[0]:.2f}, at end {os.getloadavg()[0]:.2f}"
    )
    for name in ("lock", "run", "score", "analyze", "verify_rescore", "floor"):
        per = figures[name] / max(trials, 1) * 1000
        print(f"  {name:<15} {figures[name]:8.3f} s   {per:8.3f} ms/trial")
    print(
        f"  score / floor (JSON-parse every step response): "
        f"{figures['score'] / max(figures['floor'], 1e-9):.1f}x"
    )
    print(
        f"  verifier re-derivation / score: "
        f"{figures['verify_rescore'] / max(figures['score'], 1e-9):.2f}x"
    )


if __name__ == "__main__":
    main()
