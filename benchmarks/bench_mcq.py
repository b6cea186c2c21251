"""Analyse 100,000 scored multiple-choice trials with variants and voting: time and peak memory.

    .venv/bin/python benchmarks/bench_mcq.py [--items 2500 --models 2 --iterations 2000]

Builds a synthetic trials table (docs/mcq-statistics.md) of ``items`` four-option items and
``models`` models: arms ``direct`` and ``cot`` under five option orders (original, rotate-1,
rotate-2, swap, shuffle-42), a ``cloze`` arm with log-probabilities under the same orders, and a
``cot-sc`` arm with five samples per item at temperature 0.7 (default 2,500 x 2 = 100,000
trials). Then runs every statistic of analysis/mcq/_stats.py over it: validation, accuracy per cell,
a McNemar family with Holm, flip rates on both bases (cluster bootstrap), position metrics per
cell, consistency and permutation voting per arm and model, self-consistency, cloze, the
logistic GEE and a review sample. Prints the wall time (one pass) and the tracemalloc peak
(a second pass) against the targets (10 s, 500 MB) and against a limit measured in the same run:
one pandas pass that groups the table by cell and pivots the orders, which any analysis of it
must at least do.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.mcq import _stats as mcq

TARGET_SECONDS = 10.0
TARGET_MB = 500.0
ORDERS = ("original", "rotate-1", "rotate-2", "swap", "shuffle-42")
LETTERS = np.array(list("ABCD"), dtype=object)


def _perms(keys: np.ndarray) -> dict[str, np.ndarray]:
    """Per order, an (items, 4) array: perm[i, j] = original option shown at position j."""
    n = keys.size
    base = np.tile(np.arange(4), (n, 1))
    out = {"original": base, "rotate-1": (base + 1) % 4, "rotate-2": (base + 2) % 4}
    swap = base.copy()
    first = np.where(keys == 0, 1, 0)
    second = np.where(keys <= 1, 2, 1)
    rows = np.arange(n)
    swap[rows, first], swap[rows, second] = second, first
    out["swap"] = swap
    rng = np.random.default_rng(42)
    out["shuffle-42"] = np.argsort(rng.uniform(size=(n, 4)), axis=1)
    return out


def synthetic(items: int, models: int, seed: int = 0) -> pd.DataFrame:
    """The benchmark's trials table (vectorized; a model that knows some items, prefers A)."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 4, size=items)
    know = rng.uniform(0.2, 0.9, size=items)
    perms = _perms(keys)
    prior = np.array([0.55, 0.2, 0.15, 0.1])
    frames = []

    def block(
        arm: str, model: str, variant: str, rep: int, shift: float, logprobs: bool
    ) -> pd.DataFrame:
        perm = perms[variant]
        shown_key = np.argmax(perm == keys[:, None], axis=1)
        knows = rng.uniform(size=items) < know - shift
        guess = rng.choice(4, size=items, p=prior)
        letter = np.where(knows, shown_key, guess)
        unparsed = (rng.uniform(size=items) < 0.03) & (not logprobs)
        answer = perm[np.arange(items), letter]
        letters = LETTERS[letter]
        letters[unparsed] = None
        answers = LETTERS[answer]
        answers[unparsed] = None
        item_ids = np.char.add("q", np.char.zfill(np.arange(items).astype(str), 6))
        data = {
            "trial": np.char.add(f"{arm}|{model}|{variant}|{rep}|", item_ids).astype(object),
            "item": item_ids.astype(object),
            "arm": arm,
            "model": model,
            "variant": variant,
            "rep": rep,
            "key": LETTERS[shown_key],
            "key_original": LETTERS[keys],
            "letter": letters,
            "answer": answers,
            "correct": ~unparsed & (answer == keys),
            "parse": np.where(unparsed, "unparseable", "ok"),
            "response": np.char.add("Answer: ", LETTERS[letter].astype(str)).astype(object),
        }
        if logprobs:
            lp = rng.normal(-4.0, 1.5, size=(items, 4))
            lp[np.arange(items), letter] = lp.max(axis=1) + rng.exponential(1.0, size=items)
            for j, name in enumerate("ABCD"):
                data[f"logprob_{name}"] = lp[:, j]
        return pd.DataFrame(data)

    for m in range(models):
        model = f"m{m}"
        for variant in ORDERS:
            frames.append(block("direct", model, variant, 1, 0.0, False))
            frames.append(block("cot", model, variant, 1, 0.1, False))
            frames.append(block("cloze", model, variant, 1, -0.1, True))
        for rep in range(1, 6):
            frames.append(block("cot-sc", model, "original", rep, 0.1, False))
    return pd.concat(frames, ignore_index=True)


def floor(frame: pd.DataFrame) -> float:
    """Seconds for one grouped pass and one pivot of the orders: what any analysis must do."""
    started = time.perf_counter()
    frame.groupby(["arm", "variant", "model"])["correct"].mean()
    part = frame.loc[frame["arm"] == "direct"]
    part.pivot(index=["item", "model", "rep"], columns="variant", values="answer")
    return time.perf_counter() - started


@dataclass
class Figures:
    """What one analysis pass produced (counts, and a few results to print)."""

    cells: int
    tests: int
    flips: int
    positions: int
    votes: list[mcq.VoteResult]
    sc: list[mcq.SelfConsistencyResult]
    cloze: int
    gee: mcq.GeeFit
    review: mcq.ReviewSample


def analyse(frame: pd.DataFrame, models: int, iterations: int) -> Figures:
    """Every statistic of analysis/mcq/_stats.py over the table."""
    table = mcq.check_trials(frame)
    cells = mcq.accuracy_by_cell(table)
    family = []
    for m in range(models):
        ref = ("direct", "original", f"m{m}")
        family += [(ref, ("cot", "original", f"m{m}")), (ref, ("cloze", "original", f"m{m}"))]
        family += [(ref, ("direct", v, f"m{m}")) for v in ORDERS[1:]]
    tests = mcq.mcnemar_family(table, family, method="holm")
    flips = [
        mcq.flip_rate_between(
            table,
            ("direct", "original", f"m{m}"),
            ("direct", v, f"m{m}"),
            basis=basis,
            iterations=iterations,
            seed=7,
        )
        for m in range(models)
        for v in ORDERS[1:]
        for basis in ("answer", "letter")
    ]
    positions = [mcq.position_metrics(table, c) for c in table.cells()]
    votes = [
        mcq.permutation_vote(table, arm, f"m{m}", ORDERS, abstain_below=0.6)
        for m in range(models)
        for arm in ("direct", "cot")
    ]
    sc = [
        mcq.self_consistency(table, ("cot-sc", "original", f"m{m}"), 5, 0.7) for m in range(models)
    ]
    cloze = [mcq.cloze(table, ("cloze", v, f"m{m}")) for m in range(models) for v in ORDERS]
    gee = mcq.gee_arm_effects(table, "direct", {"model": "m0"})
    review = mcq.review_sample(
        table, ("cot", "original", "m0"), ("direct", "original", "m0"), 200, 2026
    )
    return Figures(
        len(cells),
        len(tests.comparisons),
        len(flips),
        len(positions),
        votes,
        sc,
        len(cloze),
        gee,
        review,
    )


def main(argv: list[str] | None = None) -> int:
    """Build the table, analyse it twice (time, then memory); print figures and verdicts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2500)
    parser.add_argument("--models", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args(argv)
    frame = synthetic(args.items, args.models)
    print(
        f"table: {len(frame):,} scored trials ({args.items:,} items x {args.models} models; "
        f"direct, cot, cloze x {len(ORDERS)} orders; cot-sc x 5 samples)"
    )
    limit = floor(frame)
    started = time.perf_counter()
    got = analyse(frame, args.models, args.iterations)
    seconds = time.perf_counter() - started
    tracemalloc.start()
    analyse(frame, args.models, args.iterations)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak_mb = peak / 2**20
    vote = got.votes[0]
    cot = next(t for t in got.gee.terms if t.name == "arm[T.cot]")
    print(
        f"results: {got.cells} cells, {got.tests} McNemar tests (Holm), {got.flips} flip "
        f"rates ({args.iterations} bootstrap draws each), {got.positions} position profiles, "
        f"{len(got.votes)} votes, {len(got.sc)} self-consistency, {got.cloze} cloze, 1 GEE, "
        f"a review sample of {got.review.size}"
    )
    print(
        f"direct/m0 vote: accuracy {vote.accuracy:.3f} vs mean per-order "
        f"{vote.consistency.order_mean:.3f}; GEE arm[T.cot] {cot.estimate:+.3f} "
        f"(clusters {got.gee.n_clusters})"
    )
    print(f"floor: one grouped pass and one pivot: {limit:.3f} s")
    ok = seconds <= TARGET_SECONDS and peak_mb <= TARGET_MB
    print(
        f"analysis  {seconds:6.2f} s ({seconds / limit:5.1f}x floor)  tracemalloc peak "
        f"{peak_mb:6.0f} MB  {'within target' if ok else 'OVER TARGET'}"
    )
    print(f"targets: <= {TARGET_SECONDS:g} s and <= {TARGET_MB:g} MB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
