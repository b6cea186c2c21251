"""Analysis benchmark: the full locked plan on 100,000 trials, and the bootstrap against pandas.

    python benchmarks/bench_analysis.py [--trials 100000] [--iterations 10000]
        [--boot-trials 10000] [--boot-iterations 5000] [--loop N] [--quick]

Two measurements, each in two passes (wall time without tracemalloc, then the tracemalloc peak
in a separate pass, because tracing inflates the time):

1. **Full analysis**: an unblinded dataset of ``--trials`` tumbling-E trials x 61 glyphs (five
   arms, six stimuli, per-arm accuracies like the paper's, and a real between-stimulus effect
   so the mixed model is not near-singular) built in memory, then
   :func:`analysis._analyze.run_analyses` with the tumbling-E template's locked plan: Wilson
   tables, the mixed model (with its variance-component CIs), H1-H5 with corrections, error
   phenotypes, paired-arm metrics and the bootstraps (``--iterations``, the plan's 10,000).
2. **Bootstrap**: :func:`analysis._stats.bootstrap_diff`, ``--boot-iterations`` (5,000) over
   ``--boot-trials`` (10,000) trials in two arms, beside the per-iteration pandas loop of
   ``benchmarks/bench_bootstrap.py`` measured in the same run. The loop runs ``--loop``
   iterations (default: all of them, no extrapolation); when fewer, its time is scaled up and
   the output says so. Target: the vectorized bootstrap at least 20 x faster.

``--quick`` shrinks everything (used by the tests). Timings are read here, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_bootstrap import REPEATS as BOOT_REPEATS
from bench_bootstrap import SEED as BOOT_SEED
from bench_bootstrap import make_arms, pandas_loop

from analysis import ITEM_COLUMNS, TRIAL_COLUMNS, Dataset, bootstrap_diff, run_analyses

T = TypeVar("T")

ARMS = {"A": 0.986, "B": 0.501, "C": 0.748, "D": 0.54, "E": 0.985}
STIMULI = ("uniform-up", "uniform-right", "uniform-down", "uniform-left", "mixed-1", "mixed-2")
ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 9)
ORIENTATIONS = np.array(["UP", "RIGHT", "DOWN", "LEFT"], dtype=object)
#: Per-stimulus shift of every arm's log-odds of a correct glyph: a real between-stimulus
#: variance (the random intercept), so the mixed model is not fitted at its boundary.
STIMULUS_LOGIT_SHIFT = (0.45, -0.30, 0.10, -0.55, 0.25, 0.05)


def plan(iterations: int) -> dict[str, Any]:
    """The tumbling-E template's locked plan (as in ``protocol.locked``)."""
    roles = {
        "A": "full",
        "B": "matched-control",
        "C": "vehicle",
        "D": "dismantling",
        "E": "dismantling",
    }
    h: list[tuple[str, list[str], str, str | None, dict[str, Any]]] = [
        ("H1", ["A", "B"], "lmm", "one-sided", {"min_difference_pp": 10}),
        ("H2", ["B", "C"], "lmm", "two-sided", {}),
        ("H3", ["A", "E"], "equivalence", None, {"margin_pp": 10}),
        ("H4", ["E", "D"], "lmm", "one-sided", {"correction": "bonferroni", "family": "d"}),
        ("H5", ["A", "D"], "lmm", "one-sided", {"correction": "bonferroni", "family": "d"}),
    ]
    return {
        "arms": {a: {"role": r} for a, r in roles.items()},
        "design": {"bootstrap_seed": "20260422", "bootstrap_iterations": iterations},
        "analysis": {"model": "lmm", "random_intercept": "stimulus", "exclude_unparseable": True},
        "hypotheses": [
            {
                "id": i,
                "contrast": c,
                "test": t,
                "sides": s,
                "alpha": 0.05,
                "description": f"{i} {c}",
                **extra,
            }
            for i, c, t, s, extra in h
        ],
    }


def dataset(trials: int, seed: int = 1) -> Dataset:
    """``trials`` scored trials (61 items each), arms and stimuli balanced.

    A glyph is correct with probability ``logistic(logit(ARMS[arm]) + STIMULUS_LOGIT_SHIFT)``.
    """
    rng = np.random.default_rng(seed)
    arms = np.array(list(ARMS))[np.arange(trials) % len(ARMS)]
    stimuli = np.array(STIMULI)[(np.arange(trials) // len(ARMS)) % len(STIMULI)]
    reps = np.arange(trials) // (len(ARMS) * len(STIMULI)) + 1
    ids = [f"{a}|{s}|{r}" for a, s, r in zip(arms, stimuli, reps, strict=True)]
    base = np.array([ARMS[a] for a in arms])
    shift = np.array(STIMULUS_LOGIT_SHIFT)[(np.arange(trials) // len(ARMS)) % len(STIMULI)]
    p = 1.0 / (1.0 + np.exp(-(np.log(base / (1.0 - base)) + shift)))
    row = np.repeat(np.arange(1, 12), ROWS)
    position = np.concatenate([np.arange(1, n + 1) for n in ROWS])
    correct = rng.random((trials, 61)) < p[:, None]
    truth = ORIENTATIONS[rng.integers(0, 4, (trials, 61))]
    wrong = np.where(rng.random((trials, 61)) < 0.6, "RIGHT", "UP")
    answer = np.where(correct, truth, wrong)
    n_correct = correct.sum(axis=1)
    trial_df = pd.DataFrame(
        {
            "trial": ids,
            "arm": arms,
            "stimulus": stimuli,
            "rep": reps,
            "response_seq": np.arange(trials) * 3 + 100,
            "status": "ok",
            "n_items": 61,
            "n_answered": 61,
            "n_correct": n_correct,
            "accuracy": n_correct / 61,
            "control": False,
            "excluded": False,
        },
        columns=list(TRIAL_COLUMNS),
    )
    items = pd.DataFrame(
        {
            "trial": np.repeat(np.array(ids, dtype=object), 61),
            "arm": np.repeat(arms, 61),
            "stimulus": np.repeat(stimuli, 61),
            "rep": np.repeat(reps, 61),
            "row": np.tile(row, trials),
            "position": np.tile(position, trials),
            "truth": truth.ravel(),
            "answer": answer.ravel(),
            "correct": correct.ravel(),
        },
        columns=list(ITEM_COLUMNS),
    )
    return Dataset(trial_df, items, tuple(ARMS), (), "0" * 64)


def measure(work: Callable[[], T], repeats: int = 1) -> tuple[T, float, float]:
    """``(result, seconds, peak MiB)``: timed passes (the median of ``repeats``), then a
    separate tracemalloc pass."""
    times = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - start)
        del result
    seconds = sorted(times)[len(times) // 2]
    gc.collect()
    tracemalloc.start()
    try:
        result = work()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, seconds, peak / 2**20


def full_analysis(trials: int, iterations: int) -> None:
    """Build the dataset and run the whole plan; print time, memory, verdicts."""
    start = time.perf_counter()
    ds = dataset(trials)
    built = time.perf_counter() - start
    print(
        f"dataset: {trials:,} trials x 61 glyphs = {len(ds.items):,} items, built in {built:.1f} s"
    )
    results, elapsed, peak = measure(lambda: run_analyses(ds, plan(iterations)))
    failed = [r.id for r in results if r.status != "ok"]
    verdicts = ", ".join(f"{r.hypothesis}={r.verdict}" for r in results if r.hypothesis)
    print(
        f"full analysis: {len(results)} results in {elapsed:.1f} s "
        f"({trials / elapsed:,.0f} trials/s), tracemalloc peak {peak:,.0f} MiB "
        f"(separate pass), bootstrap iterations {iterations:,}"
    )
    model = next(r for r in results if r.id == "model.lmm").values or {}
    print(
        f"mixed model: singular {model.get('singular')}, group variance "
        f"{model.get('group_variance', float('nan')):.3g} (95% CI "
        f"{model.get('group_variance_ci_lower')} to {model.get('group_variance_ci_upper')}), "
        f"ICC {model.get('icc', float('nan')):.3f}"
    )
    print(f"verdicts: {verdicts}; failed: {failed or 'none'}")
    start = time.perf_counter()
    csv = ds.trials_csv()
    print(f"trials.csv: {len(csv):,} bytes in {time.perf_counter() - start:.2f} s")


def bootstrap_vs_pandas(trials: int, iterations: int, loop: int) -> dict[str, Any]:
    """The vectorized bootstrap beside the per-iteration pandas loop, in this run."""
    x, y = make_arms(trials)
    bootstrap_diff(x[:100], y[:100], 10, BOOT_SEED)  # warm-up (imports, allocator)
    result, seconds, peak = measure(
        lambda: bootstrap_diff(x, y, iterations, BOOT_SEED), repeats=BOOT_REPEATS
    )
    loop_iterations = max(1, min(loop, iterations))
    loop_seconds = pandas_loop(x, y, loop_iterations)
    pandas_seconds = loop_seconds * iterations / loop_iterations
    ratio = pandas_seconds / seconds
    print(
        f"bootstrap: {iterations:,} iterations over {trials:,} trials (two arms), seed "
        f"{BOOT_SEED}: estimate {result.estimate:.4f}, 95% CI {result.lower:.4f} to "
        f"{result.upper:.4f}"
    )
    print(
        f"  vectorized bootstrap_diff: {seconds:.3f} s (median of {BOOT_REPEATS} runs), "
        f"tracemalloc peak {peak:.1f} MiB (separate pass)"
    )
    if loop_iterations == iterations:
        print(
            f"  pandas per-iteration loop: {loop_seconds:.3f} s for all {iterations:,} "
            "iterations (measured, not extrapolated)"
        )
    else:
        print(
            f"  pandas per-iteration loop: {loop_seconds:.3f} s for {loop_iterations:,} "
            f"iterations, EXTRAPOLATED x{iterations / loop_iterations:.1f} to "
            f"{pandas_seconds:.3f} s for {iterations:,}"
        )
    print(
        f"  ratio pandas / vectorized: {ratio:.1f} x (target >= 20 x: "
        f"{'met' if ratio >= 20 else 'MISSED'})"
    )
    return {
        "seconds": seconds,
        "peak_mib": peak,
        "pandas_seconds": pandas_seconds,
        "extrapolated": loop_iterations != iterations,
        "ratio": ratio,
    }


def main(argv: list[str] | None = None) -> None:
    """Run the full analysis and the bootstrap comparison; print times and memory."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trials", type=int, default=100_000)
    parser.add_argument(
        "--iterations",
        type=int,
        default=10_000,
        help="bootstrap iterations inside the full analysis (the plan's)",
    )
    parser.add_argument("--boot-trials", type=int, default=10_000)
    parser.add_argument("--boot-iterations", type=int, default=5_000)
    parser.add_argument(
        "--loop",
        type=int,
        default=None,
        help="pandas-loop iterations run (default: all; fewer are extrapolated)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="2,000 trials, 200 iterations; bootstrap 500 over 2,000, loop 100",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.trials, args.iterations = 2_000, 200
        args.boot_trials, args.boot_iterations = 2_000, 500
        args.loop = 100 if args.loop is None else args.loop
    loop = args.boot_iterations if args.loop is None else args.loop
    full_analysis(args.trials, args.iterations)
    bootstrap_vs_pandas(args.boot_trials, args.boot_iterations, loop)


if __name__ == "__main__":
    main()
