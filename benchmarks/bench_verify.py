"""Benchmark: verifying exported archives of 2,000, 20,000 and 100,000 simulated trials.

Each archive is built once with the simulated backend (lock, run, score, unblind, analyse,
export) and cached under ``--cache`` (default: ``$TMPDIR/prompt-ledger-bench-verify``), then
verified with the independent verifier (``verify.verify_archive``). Reported per size: total
verify time, time per trial, the share spent on signatures, hashing, re-scoring and statistics
(and every other check), and the ratio of the signature time to ``events / Ed25519 verify rate``
with the rate measured interleaved with the work: a window of Ed25519 verifications just
before and just after each archive's verification, as long as it, whose mean is the rate (1.0
means signature checking costs exactly the raw Ed25519 verifications), so a busy neighbour
slows both sides alike. The machine's load average is printed at the start and at the end.
Targets: 2,000 trials verify in under 10 s; cost linear in trials. Last, the verifier's REML
maximum (``verify/_reml.py``) batched against one likelihood evaluation at a time, with the
ratio of the two times (:func:`reml_batching`).

Usage::

    python benchmarks/bench_verify.py                    # 2000, 20000, 100000 trials
    python benchmarks/bench_verify.py --trials 2000 20000
    python benchmarks/bench_verify.py --quick            # ~200 trials (the test suite)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PER_REPLICATE = 35  # the tumbling-E template: 5 arms x 7 stimuli
ORIGIN = "prompt-ledger.local/prompt-tumbling-e"


def _key() -> Any:
    from ledger import SigningKey

    name = f"{ORIGIN}/owner"
    return SigningKey(name, hashlib.sha256(f"prompt-ledger bench key {name}".encode()).digest())


def build_archive(target: Path, replicates: int) -> float:
    """Build and export a simulated study with ``replicates``; return the seconds it took."""
    from analysis import analyze_study, export_study, score_study, unblind_study
    from runner import RunOptions, SimulatedBackend, lock_study, new_study, run_study

    started = time.perf_counter()
    work = target.with_name(target.name + ".work")
    shutil.rmtree(work, ignore_errors=True)
    os.environ["PROMPT_LEDGER_HOME"] = str(work / "home")
    key = _key()
    study = work / "study"
    new_study(study, "prompt-tumbling-e", key)
    spec = study / "study.toml"
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace("replicates = 30", f"replicates = {replicates}"), "utf-8")
    lock_study(study, key)
    run_study(study, key, SimulatedBackend(), RunOptions(concurrency=32))
    score_study(study, key)
    unblind_study(study, key)
    analyze_study(study, key)
    shutil.rmtree(target, ignore_errors=True)
    export_study(study, target, key)
    shutil.rmtree(work, ignore_errors=True)
    return time.perf_counter() - started


def ed25519_rate(seconds: float = 0.5) -> float:
    """Ed25519 verifications per second on a 700-byte message (about one envelope).

    Measured for ``seconds`` (in slices of 200 verifications, at least one slice).
    """
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.generate()
    public = private.public_key()
    message = os.urandom(700)
    signature = private.sign(message)
    done = 0
    started = time.perf_counter()
    while True:
        for _ in range(200):
            public.verify(signature, message)
        done += 200
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return done / elapsed


def reml_batching() -> dict[str, float]:
    """The verifier's REML maximum batched, against the same arithmetic one point at a time.

    The three mixed models of the sensitivity analysis (probe intercept; probe and probe x
    arm; that with a residual variance per arm) of ``tests/vectors/reml-two-maxima.csv``, each
    maximised by ``verify._reml.RemlModel`` as it is (``points``: a grid, a difference stencil
    or a climb's gradient per call) and by a subclass that evaluates every row of each batch
    alone, as the verifier did before the batching; both must reach the same optimum bit for
    bit. Prints both times, the evaluation counts and their ratio.
    """
    import csv

    import numpy as np

    from verify._reml import RemlModel

    with (ROOT / "tests" / "vectors" / "reml-two-maxima.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    y = np.array([int(r["n_correct"]) / int(r["n_items"]) for r in rows])
    arm = [r["arm"] for r in rows]
    groups = [r["stimulus"] for r in rows]
    cells = [f"{g}|{a}" for g, a in zip(groups, arm, strict=True)]
    exog = np.column_stack([np.ones(len(rows))] + [[a == b for a in arm] for b in ("B", "C")])
    models = [([groups], None), ([groups, cells], None), ([groups, cells], arm)]
    counts = {"calls": 0, "rows": 0}

    class Counted(RemlModel):
        def _evaluate(self, theta: Any) -> Any:
            counts["calls"] += 1
            counts["rows"] += theta.shape[0]
            return super()._evaluate(theta)

    class RowByRow(Counted):
        def _evaluate(self, theta: Any) -> Any:
            each = [Counted._evaluate(self, theta[i : i + 1]) for i in range(theta.shape[0])]
            return tuple(np.concatenate([e[j] for e in each]) for j in range(4))

    out: dict[str, float] = {}
    optima = {}
    for name, cls in (("batched", Counted), ("one at a time", RowByRow)):
        counts.update(calls=0, rows=0)
        started = time.perf_counter()
        optima[name] = [cls(y, exog, groups, t, r).maximise() for t, r in models]
        out[name] = time.perf_counter() - started
        out[f"{name} calls"] = counts["calls"]
    same = all(
        np.array_equal(a.params, b.params) and a.loglik == b.loglik
        for a, b in zip(optima["batched"], optima["one at a time"], strict=True)
    )
    print(
        f"verifier REML maximise (3 models, tests/vectors/reml-two-maxima.csv): batched "
        f"{out['batched']:.3f} s in {out['batched calls']:,.0f} calls, one at a time "
        f"{out['one at a time']:.3f} s in {out['one at a time calls']:,.0f} evaluations: "
        f"ratio {out['one at a time'] / out['batched']:.1f} "
        f"(same optimum: {'yes' if same else 'NO'})"
    )
    return out


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` shows them."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def science_split(archive: Path) -> dict[str, float]:
    """Time re-scoring and re-analysis separately (``verify._recompute`` internals, if present)."""
    try:
        from verify._recompute.archive import _load
        from verify._recompute.reanalysis import _reanalysis
        from verify._recompute.rescore import _rescore
    except ImportError:
        return {}
    out: dict[str, float] = {}
    try:
        started = time.perf_counter()
        loaded = _load(archive)
        out["science load"] = time.perf_counter() - started
        started = time.perf_counter()
        _rescore(loaded)
        out["rescore"] = time.perf_counter() - started
        started = time.perf_counter()
        _reanalysis(loaded)
        out["statistics"] = time.perf_counter() - started
    except Exception as exc:  # the split is informative only
        print(f"  (science split unavailable: {type(exc).__name__}: {exc})")
        return {}
    return out


def bench(archive: Path, trials: int, jobs: int, before: float) -> tuple[dict[str, float], float]:
    """Verify ``archive`` and print its split; (figures, the Ed25519 rate measured after it).

    Its signatures are compared with the mean of ``before`` (the rate measured just before)
    and a window of the same length as the verification measured just after it.
    """
    from verify import Status, verify_archive

    started = time.perf_counter()
    report = verify_archive(archive, jobs=jobs)
    total = time.perf_counter() - started
    after = ed25519_rate(min(max(total, 0.2), 5.0))
    rate = (before + after) / 2
    failed = [c for c in report.checks if c.status is Status.FAIL]
    status = "ok" if report.ok else f"FAILED {[c.name for c in failed]}"
    timings = dict(report.timings)
    split = science_split(archive)
    science = timings.get("science", 0.0)
    signatures = timings.get("signatures", 0.0)
    hashing = timings.get("hashing", 0.0)
    rescore = split.get("rescore", 0.0) + split.get("science load", 0.0)
    statistics = split.get("statistics", 0.0)
    if not split:
        rescore, statistics = science, 0.0
    else:  # scale the separate runs to the science time measured inside verify_archive
        scale = science / max(rescore + statistics, 1e-9)
        rescore, statistics = rescore * scale, statistics * scale
    ledger_other = max(timings.get("ledger", 0.0) - signatures, 0.0)
    archive_checks = sum(
        v for k, v in timings.items() if k not in ("ledger", "signatures", "hashing", "science")
    )
    expected_sig = report.size / rate
    print(
        f"{trials} trials, {report.size} events: verify {total:.2f} s ({status}), "
        f"{1e3 * total / trials:.3f} ms/trial"
    )
    parts = {
        "signatures": signatures,
        "hashing": hashing,
        "rescore": rescore,
        "statistics": statistics,
        "ledger parse/chain/tree/keys": ledger_other,
        "archive checks": archive_checks,
    }
    for name, seconds in parts.items():
        print(f"  {name:30} {seconds:8.3f} s  {100 * seconds / total:5.1f}%")
    for name, seconds in timings.items():  # every archive check the report timed
        if name not in ("ledger", "signatures", "hashing", "science"):
            print(f"    check {name:24} {seconds:8.4f} s")
    sig_note = "" if jobs == 1 else " (jobs > 1: signatures run in workers, not timed inline)"
    print(
        f"  ratio signatures/(events / Ed25519 rate) = {signatures:.3f} / {expected_sig:.3f} = "
        f"{signatures / expected_sig if expected_sig else 0:.2f}{sig_note} (Ed25519 verify "
        f"{before:,.0f} /s before, {after:,.0f} /s after)"
    )
    return {"total": total, **parts}, after


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[2000, 20000, 100000])
    parser.add_argument("--quick", action="store_true", help="one archive of about 200 trials")
    parser.add_argument("--cache", type=Path, default=None, help="where built archives are kept")
    parser.add_argument("--jobs", type=int, default=1, help="signature worker processes")
    args = parser.parse_args(argv)
    sizes = [200] if args.quick else args.trials
    cache = args.cache or Path(tempfile.gettempdir()) / "prompt-ledger-bench-verify"
    cache.mkdir(parents=True, exist_ok=True)
    print(f"load average at start: {load_average()}")
    rate = ed25519_rate()
    print(f"Ed25519 verify: {rate:,.0f} /s (700-byte messages)")
    results: dict[int, dict[str, float]] = {}
    for wanted in sizes:
        replicates = max(1, round(wanted / PER_REPLICATE))
        trials = replicates * PER_REPLICATE
        archive = cache / f"archive-{trials}"
        done = archive.with_name(archive.name + ".done")
        if not done.exists():
            seconds = build_archive(archive, replicates)
            done.write_text(f"{seconds:.1f}\n", "utf-8")
            print(f"built {trials} trials in {seconds:.1f} s -> {archive}")
        else:
            print(f"cached {trials} trials ({archive}, built in {done.read_text().strip()} s)")
        rate = ed25519_rate()  # measured just before the verification, and again after it
        results[trials], rate = bench(archive, trials, args.jobs, rate)
    if len(results) > 1:
        items = sorted(results.items())
        base_n, base = items[0]
        for n, r in items[1:]:
            print(
                f"ratio per trial {n} vs {base_n}: "
                f"{(r['total'] / n) / (base['total'] / base_n):.2f} (1.00 = linear)"
            )
    reml_batching()
    print(f"load average at end: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
