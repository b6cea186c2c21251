"""Bootstrap benchmark: vectorized analysis.stats.bootstrap_diff beside a per-iteration pandas loop.

    python benchmarks/bench_bootstrap.py [--iterations 5000] [--trials 10000] [--loop 200]
                                         [--quick] [--json]

Prints, for this machine and this run:
  * the vectorized unpaired bootstrap (two arms of trials/2 trial-level glyph accuracies k/61),
    its wall time (median of REPEATS runs) and, in a separate pass, tracemalloc peak memory;
  * a per-iteration pandas loop (``df.sample(frac=1, replace=True)`` per arm per iteration),
    timed on ``--loop`` iterations in the same run and extrapolated to ``--iterations``;
  * the speed ratio (target >= 20x).
``--quick`` shrinks everything so the script finishes in a couple of seconds.
Timings are never asserted in tests; this script is where they are read.
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from analysis.stats import bootstrap_diff

SEED = 20260425
REPEATS = 5
"""The vectorized bootstrap's time is the median of this many runs (a run is ~0.2 s)."""


def make_arms(trials: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Two arms of trial-level glyph accuracy (k correct of 61 glyphs)."""
    rng = np.random.default_rng(1)
    half = trials // 2
    x = rng.binomial(61, 0.986, half) / 61
    y = rng.binomial(61, 0.501, trials - half) / 61
    return x, y


def pandas_loop(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], iterations: int) -> float:
    """Seconds for ``iterations`` of the naive per-iteration pandas bootstrap."""
    dx = pd.DataFrame({"value": x})
    dy = pd.DataFrame({"value": y})
    diffs = np.empty(iterations)
    start = time.perf_counter()
    for i in range(iterations):
        mx = dx.sample(frac=1, replace=True, random_state=2 * i)["value"].mean()
        my = dy.sample(frac=1, replace=True, random_state=2 * i + 1)["value"].mean()
        diffs[i] = mx - my
    elapsed = time.perf_counter() - start
    np.quantile(diffs, [0.025, 0.975])
    return elapsed


def run(iterations: int, trials: int, loop: int) -> dict[str, Any]:
    """Run both bootstraps and return the figures."""
    x, y = make_arms(trials)
    bootstrap_diff(x[:100], y[:100], 10, SEED)  # warm-up (imports, allocator)
    times = []
    for _ in range(REPEATS):  # timed without tracemalloc, which slows allocation-heavy code
        start = time.perf_counter()
        result = bootstrap_diff(x, y, iterations, SEED)
        times.append(time.perf_counter() - start)
    elapsed = sorted(times)[len(times) // 2]
    tracemalloc.start()
    bootstrap_diff(x, y, iterations, SEED)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    loop_iterations = min(loop, iterations)
    loop_seconds = pandas_loop(x, y, loop_iterations)
    extrapolated = loop_seconds * iterations / loop_iterations
    ratio = extrapolated / elapsed
    return {
        "iterations": iterations,
        "trials": trials,
        "seed": SEED,
        "estimate": result.estimate,
        "ci": [result.lower, result.upper],
        "vectorized_s": elapsed,
        "vectorized_peak_mib": peak / 2**20,
        "pandas_loop_iterations": loop_iterations,
        "pandas_loop_s": loop_seconds,
        "pandas_extrapolated_s": extrapolated,
        "ratio": ratio,
        "target_met": ratio >= 20.0,
    }


def main() -> None:
    """Parse arguments, run, print."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5000)
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--loop", type=int, default=200,
                        help="pandas-loop iterations actually run (then extrapolated)")
    parser.add_argument("--quick", action="store_true", help="small sizes, a couple of seconds")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.iterations, args.trials, args.loop = 500, 2000, 20
    results = run(args.iterations, args.trials, args.loop)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"bootstrap benchmark: {results['iterations']} iterations over {results['trials']} "
          f"trials (two arms), seed {results['seed']}")
    print(f"  {'estimate (A - B)':<40} {results['estimate']:>12.4f}")
    print(f"  {'95% CI':<40} {results['ci'][0]:>12.4f} {results['ci'][1]:.4f}")
    print(f"  {'vectorized bootstrap_diff (median of ' + str(REPEATS) + ')':<40} "
          f"{results['vectorized_s']:>12.3f} s")
    print(f"  {'vectorized peak memory (tracemalloc)':<40} "
          f"{results['vectorized_peak_mib']:>12.1f} MiB")
    print(f"  {'pandas loop, ' + str(results['pandas_loop_iterations']) + ' iterations':<40} "
          f"{results['pandas_loop_s']:>12.3f} s")
    print(f"  {'pandas loop, extrapolated':<40} {results['pandas_extrapolated_s']:>12.3f} s")
    print(f"  {'ratio pandas / vectorized':<40} {results['ratio']:>12.1f} x")
    print(f"  {'target ratio >= 20x':<40} {'met' if results['target_met'] else 'MISSED':>12}")


if __name__ == "__main__":
    main()
