"""Bootstrap benchmark: vectorized analysis._stats.bootstrap_diff beside a per-iteration pandas
loop.

    python benchmarks/bench_bootstrap.py [--iterations 5000] [--trials 10000] [--loop 200]
                                         [--quick] [--json]

Prints, for this machine and this run:
  * the vectorized unpaired bootstrap (two arms of trials/2 trial-level glyph accuracies k/61),
    its wall time (median of REPEATS runs) and, in a separate pass, tracemalloc peak memory;
  * a per-iteration pandas loop (``df.sample(frac=1, replace=True)`` per arm per iteration),
    timed on ``--loop`` iterations in the same run and extrapolated to ``--iterations``;
  * the speed ratio (target >= 20x);
  * seed 001's (question, run) bootstrap as registered (``analysis._qr_boot.resample_means``, the
    triple default / success / perturbed from one draw over ``trials/2`` pairs): iterations per
    second beside a measured numpy floor (the index draws alone, which the documented draw order
    requires) and the direct per-iteration loop of the seed's Appendix A.
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

from analysis import CHUNK_ELEMENTS, bootstrap_diff, resample_means

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


def qr_figures(iterations: int, pairs: int, loop: int) -> dict[str, Any]:
    """Iterations/s of the registered (question, run) bootstrap, its draw floor and the loop."""
    rng = np.random.default_rng(2)
    default = (rng.random(pairs) < 0.6).astype(np.float64)
    perturbed = np.where(rng.random(pairs) < 0.15, 1.0 - default, default)
    columns = [default, (default != perturbed).astype(np.float64), perturbed]
    resample_means(columns, 10, SEED)  # warm-up
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        resample_means(columns, iterations, SEED)
        times.append(time.perf_counter() - start)
    vectorised = sorted(times)[len(times) // 2]
    floors = []
    for _ in range(REPEATS):  # the same index blocks, nothing else
        draw = np.random.default_rng(SEED)
        rows = max(1, CHUNK_ELEMENTS // pairs)
        start = time.perf_counter()
        for first in range(0, iterations, rows):
            draw.integers(0, pairs, size=(min(rows, iterations - first), pairs))
        floors.append(time.perf_counter() - start)
    floor = sorted(floors)[len(floors) // 2]
    n_loop = min(loop, iterations)
    direct = np.random.default_rng(SEED)
    start = time.perf_counter()
    for _ in range(n_loop):
        idx = direct.integers(0, pairs, size=pairs)
        for column in columns:
            column[idx].mean()
    loop_s = time.perf_counter() - start
    return {
        "qr_iterations": iterations,
        "qr_pairs": pairs,
        "qr_vectorised_it_per_s": iterations / vectorised,
        "qr_draw_floor_it_per_s": iterations / floor,
        "qr_loop_it_per_s": n_loop / loop_s,
        "qr_ratio_to_floor": vectorised / floor,
        "qr_speedup_over_loop": (n_loop / loop_s and (iterations / vectorised) / (n_loop / loop_s)),
    }


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
        **qr_figures(iterations, max(1, trials // 2), loop),
    }


def main() -> None:
    """Parse arguments, run, print."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5000)
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument(
        "--loop",
        type=int,
        default=200,
        help="pandas-loop iterations actually run (then extrapolated)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, a couple of seconds")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.iterations, args.trials, args.loop = 500, 2000, 20
    results = run(args.iterations, args.trials, args.loop)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"bootstrap benchmark: {results['iterations']} iterations over {results['trials']} "
        f"trials (two arms), seed {results['seed']}"
    )
    print(f"  {'estimate (A - B)':<40} {results['estimate']:>12.4f}")
    print(f"  {'95% CI':<40} {results['ci'][0]:>12.4f} {results['ci'][1]:.4f}")
    print(
        f"  {'vectorized bootstrap_diff (median of ' + str(REPEATS) + ')':<40} "
        f"{results['vectorized_s']:>12.3f} s"
    )
    print(
        f"  {'vectorized peak memory (tracemalloc)':<40} "
        f"{results['vectorized_peak_mib']:>12.1f} MiB"
    )
    print(
        f"  {'pandas loop, ' + str(results['pandas_loop_iterations']) + ' iterations':<40} "
        f"{results['pandas_loop_s']:>12.3f} s"
    )
    print(f"  {'pandas loop, extrapolated':<40} {results['pandas_extrapolated_s']:>12.3f} s")
    print(f"  {'ratio pandas / vectorized':<40} {results['ratio']:>12.1f} x")
    print(f"  {'target ratio >= 20x':<40} {'met' if results['target_met'] else 'MISSED':>12}")
    print(
        f"(question, run) bootstrap, registered: {results['qr_iterations']} iterations over "
        f"{results['qr_pairs']} pairs, three columns from one draw"
    )
    print(f"  {'qr_boot.resample_means':<40} {results['qr_vectorised_it_per_s']:>12.0f} it/s")
    print(
        f"  {'numpy floor (the index draws alone)':<40} "
        f"{results['qr_draw_floor_it_per_s']:>12.0f} it/s"
    )
    print(f"  {'direct per-iteration loop':<40} {results['qr_loop_it_per_s']:>12.0f} it/s")
    print(f"  {'time / floor':<40} {results['qr_ratio_to_floor']:>12.2f} x")
    print(f"  {'speed-up over the loop':<40} {results['qr_speedup_over_loop']:>12.1f} x")


if __name__ == "__main__":
    main()
