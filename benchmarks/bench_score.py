"""Benchmark: ``ledger score`` against the speed of parsing (issue 41).

A simulated tumbling-E study of about ``--trials`` trials (35 a replicate) is run once with a
fixed key and cached under ``--cache`` (default: ``$TMPDIR/prompt-ledger-bench-score``). Each
round scores a fresh copy of it in this process (:func:`analysis.score_study`: one pass over the
log, every response parsed and scored, ``trial.scored`` appended in signed batches, the seal)
and measures, on the same responses and interleaved with the scoring, the two costs a score
cannot avoid:

- *parse*: the study's parser alone (:func:`analysis._parse.parse_response`) on every response
  body, already in memory;
- *sign*: one Ed25519 signature of a 900-byte message (about one ``trial.scored`` envelope)
  per trial.

Times are CPU seconds of this process (``time.process_time``), not wall time, so a busy
neighbour on a shared machine slows the figures less. Scoring runs in this one process unless
``--workers N`` is given; with workers (``ledger score``'s default from 8,000 responses) the
score's figure is this process's CPU alone, the critical path while the workers keep up, and
the workers' own CPU is printed beside it; each is the median of ``--rounds``
rounds (the minimum beside it). Printed per trial: score, parse and sign; the score's rate in
trials/s; and two ratios, a ratio above 1 being a miss: score against issue 41's target of
10,000 trials/s on one core (100 us a trial), and score against parse + sign (1.0 would mean
that scoring costs nothing beyond parsing each response and signing its event).

    python benchmarks/bench_score.py                  # 10,010 trials, 3 rounds
    python benchmarks/bench_score.py --trials 2000 --rounds 5
    python benchmarks/bench_score.py --profile        # one round under cProfile (CPU time)
    python benchmarks/bench_score.py --workers 2      # parsed in 2 forked workers
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
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
TARGET_PER_SECOND = 10_000
"""Issue 41: scoring at >= 10,000 trials/s for the template's parser on one core."""


def _key() -> Any:
    from ledger import SigningKey

    name = f"{ORIGIN}/owner"
    return SigningKey(name, hashlib.sha256(f"prompt-ledger bench key {name}".encode()).digest())


def build_study(target: Path, replicates: int) -> Path:
    """A locked and run (not scored) simulated study under ``target``; its folder.

    Built once per size: a later call finds the finished study (``target/done``) and reuses it.
    """
    study = target / "study"
    os.environ["PROMPT_LEDGER_HOME"] = str(target / "home")
    if (target / "done").exists():
        return study
    from runner import RunOptions, SimulatedBackend, lock_study, new_study, run_study

    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    key = _key()
    new_study(study, "prompt-tumbling-e", key)
    spec = study / "study.toml"
    text = spec.read_text(encoding="utf-8")
    if "replicates = 30" not in text:
        raise SystemExit(f"{spec}: the template no longer says 'replicates = 30'")
    spec.write_text(text.replace("replicates = 30", f"replicates = {replicates}"), "utf-8")
    lock_study(study, key)
    run_study(study, key, SimulatedBackend(), RunOptions(concurrency=32))
    (target / "done").write_text("built\n", encoding="utf-8")
    return study


def _responses(study: Path) -> tuple[Any, list[tuple[bytes, str]]]:
    """The study's parser settings and every response body with its format, in seq order."""
    from analysis._parse import ParserConfig
    from ledger import Ledger
    from runner import ledger_path, protocol_event

    with Ledger.open(ledger_path(study), readonly=True) as log:
        protocol = protocol_event(log)
        assert protocol is not None
        config = ParserConfig.from_plan(protocol.body.get("response") or {})
        bodies = [
            (log.blob(e.blobs["response"]), str(e.body.get("format", "anthropic-messages")))
            for e in log.events("trial.responded")
        ]
    return config, bodies


def parse_seconds(config: Any, bodies: list[tuple[bytes, str]]) -> float:
    """CPU seconds to parse every body with the study's parser (the bodies already read)."""
    from analysis._parse import parse_response

    started = time.process_time()
    for raw, fmt in bodies:
        parse_response(raw, fmt, config)
    return time.process_time() - started


def sign_seconds(count: int) -> float:
    """CPU seconds for ``count`` Ed25519 signatures of a 900-byte message (one envelope each)."""
    key = _key()
    message = os.urandom(900)
    started = time.process_time()
    for _ in range(count):
        key.sign(message)
    return time.process_time() - started


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def score_round(
    study: Path, scratch: Path, profile: bool, workers: int = 0
) -> tuple[int, float, float]:
    """Score a fresh copy of ``study``: (trials scored, CPU seconds, the workers' CPU seconds)."""
    from analysis import score_study

    before = _children_cpu()
    copy = scratch / "study"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(study, copy)
    key = _key()
    if profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile(time.process_time)
        started = time.process_time()
        profiler.enable()
        result = score_study(copy, key, workers=workers)
        profiler.disable()
        seconds = time.process_time() - started
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
    else:
        started = time.process_time()
        result = score_study(copy, key, workers=workers)
        seconds = time.process_time() - started
    children = _children_cpu() - before
    if result.sealed_seq is None:
        raise SystemExit(f"{copy}: scoring did not seal ({result.pending} trials pending)")
    shutil.rmtree(copy, ignore_errors=True)
    return result.scored, seconds, children


def main(argv: list[str] | None = None) -> int:
    """Build (or reuse) the study, score it ``--rounds`` times, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=10_010)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--profile", action="store_true", help="one round under cProfile")
    parser.add_argument("--workers", type=int, default=0, help="forked workers (default 0)")
    opts = parser.parse_args(argv)
    replicates = max(1, round(opts.trials / PER_REPLICATE))
    cache = opts.cache or Path(tempfile.gettempdir()) / "prompt-ledger-bench-score"
    load = os.getloadavg()
    print(f"bench_score: {os.cpu_count()} cores, load average {load[0]:.1f} at the start")
    started = time.perf_counter()
    study = build_study(cache / str(replicates * PER_REPLICATE), replicates)
    built = time.perf_counter() - started
    print(f"study of {replicates * PER_REPLICATE:,} trials ready in {built:.1f} s")
    config, bodies = _responses(study)
    scratch = Path(tempfile.mkdtemp(prefix="bench-score-"))
    scores: list[float] = []
    parses: list[float] = []
    signs: list[float] = []
    workers: list[float] = []
    try:
        for _ in range(1 if opts.profile else opts.rounds):
            trials, seconds, children = score_round(study, scratch, opts.profile, opts.workers)
            scores.append(seconds / trials)
            workers.append(children / trials)
            parses.append(parse_seconds(config, bodies) / len(bodies))
            signs.append(sign_seconds(trials) / trials)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    score, parse, sign = (statistics.median(x) for x in (scores, parses, signs))
    us = 1e6
    print(f"{trials:,} trials scored, {len(scores)} round(s); CPU time per trial, median (min):")
    print(f"  score {us * score:7.1f} us ({us * min(scores):.1f})  = {1 / score:,.0f} trials/s")
    if opts.workers:
        print(f"  (+ {us * statistics.median(workers):.1f} us in {opts.workers} workers)")
    print(f"  parse {us * parse:7.1f} us ({us * min(parses):.1f})  the study's parser alone")
    print(f"  sign  {us * sign:7.1f} us ({us * min(signs):.1f})  one Ed25519 signature")
    print(
        f"  ratios: score {score * TARGET_PER_SECOND:.2f}x of the target "
        f"({TARGET_PER_SECOND:,} trials/s); score {score / (parse + sign):.2f}x of parse + sign"
    )
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
