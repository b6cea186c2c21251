"""Analysis benchmark: the full locked plan on a large synthetic dataset, with time and memory.

    python benchmarks/bench_analysis.py [--trials 100000] [--iterations N] [--quick]

Builds an unblinded dataset of ``--trials`` tumbling-E trials x 61 glyphs (five arms, six
probes, per-arm accuracies like the paper's) directly in memory, then runs
:func:`analysis.analyze.run_analyses` with the tumbling-E template's locked plan: Wilson
tables, the mixed model, H1-H5 with corrections, error phenotypes, paired-arm metrics and
the bootstraps (``--iterations``, default the plan's 10,000). Prints wall time per stage and
the tracemalloc peak. The bootstrap's speed against a per-iteration pandas loop is measured by
``benchmarks/bench_bootstrap.py``. Timings are read here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from typing import Any

import numpy as np
import pandas as pd

from analysis.analyze import ITEM_COLUMNS, TRIAL_COLUMNS, Dataset, run_analyses

ARMS = {"A": 0.986, "B": 0.501, "C": 0.748, "D": 0.54, "E": 0.985}
STIMULI = ("uniform-up", "uniform-right", "uniform-down", "uniform-left", "mixed-1", "mixed-2")
ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 9)
ORIENTATIONS = np.array(["UP", "RIGHT", "DOWN", "LEFT"], dtype=object)


def plan(iterations: int) -> dict[str, Any]:
    """The tumbling-E template's locked plan (as in ``protocol.locked``)."""
    roles = {"A": "full", "B": "matched-control", "C": "vehicle", "D": "dismantling",
             "E": "dismantling"}  # fmt: skip
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
    """``trials`` scored trials (61 items each), arms and probes balanced."""
    rng = np.random.default_rng(seed)
    arms = np.array(list(ARMS))[np.arange(trials) % len(ARMS)]
    stimuli = np.array(STIMULI)[(np.arange(trials) // len(ARMS)) % len(STIMULI)]
    reps = np.arange(trials) // (len(ARMS) * len(STIMULI)) + 1
    ids = [f"{a}|{s}|{r}" for a, s, r in zip(arms, stimuli, reps, strict=True)]
    p = np.array([ARMS[a] for a in arms])
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


def main(argv: list[str] | None = None) -> None:
    """Build the dataset, run every analysis, print times and memory."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100_000)
    parser.add_argument("--iterations", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="2,000 trials, 200 iterations")
    args = parser.parse_args(argv)
    trials, iterations = (2_000, 200) if args.quick else (args.trials, args.iterations)
    start = time.perf_counter()
    ds = dataset(trials)
    built = time.perf_counter() - start
    print(f"dataset: {trials:,} trials x 61 glyphs = {len(ds.items):,} items, built in "
          f"{built:.1f} s")  # fmt: skip
    tracemalloc.start()
    start = time.perf_counter()
    results = run_analyses(ds, plan(iterations))
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    failed = [r.id for r in results if r.status != "ok"]
    verdicts = ", ".join(f"{r.hypothesis}={r.verdict}" for r in results if r.hypothesis)
    print(f"full analysis: {len(results)} results in {elapsed:.1f} s "
          f"({trials / elapsed:,.0f} trials/s), tracemalloc peak {peak / 2**20:,.0f} MiB, "
          f"bootstrap iterations {iterations:,}")  # fmt: skip
    print(f"verdicts: {verdicts}; failed: {failed or 'none'}")
    start = time.perf_counter()
    csv = ds.trials_csv()
    print(f"trials.csv: {len(csv):,} bytes in {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
