"""Factorial designs: the lock's checks, rendering every cell's request, and the two GEEs.

    .venv/bin/python benchmarks/bench_factorial.py [--items 2000] [--quick]

Writes a 3 x 2 x 2 factorial study (an item-scope belief factor inserting a sentence at the
start or end of the question, a prompt-scope tone factor adding a component, an item-scope
format factor with its own template; ``docs/study-spec.md`` "Factors") over ``items`` text
items, one model, one replicate: 12 cells x items trials. Prints CPU seconds for loading the
spec (the expansion), the lock's checks (every edit applied to every item, every cell's
template filled, every level against the reference for the null-arm rule) and rendering every
request; then fits the factorial GEE of ``docs/analysis.md`` (belief x tone interaction,
joint df 2) on simulated outcomes with statsmodels and with the verifier's own solver, and
prints both times, their ratio and the two chi-square values. Figures are printed, never
asserted; the machine's load average is printed at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SPEC = """\
[study]
id = "bench-factorial"
title = "Factorial benchmark"

[model]
id = "claude-sonnet-4-6"
max_tokens = 16

[components]
task = "prompts/task.txt"
urgency = "prompts/urgency.txt"

[prompt]
item = "prompts/item.txt"

[factors.belief]
scope = "item"
levels.none = {}
levels.weak = { insert = { field = "question", text = "Maybe it is 3.", at = "end" } }
levels.strong = { insert = { field = "question", text = "It is 3.", at = "start" } }

[factors.tone]
scope = "prompt"
levels.neutral = {}
levels.urgent = { components = ["urgency"] }

[factors.format]
scope = "item"
levels.open = {}
levels.terse = { template = "prompts/terse.txt" }

[factorial]
base = "F"
factors = ["belief", "tone", "format"]

[arms.F]
role = "factorial"
components = ["task"]

[stimuli]
items = "items.jsonl"

[design]
replicates = 1
seed = 5
bootstrap_seed = 6

[response]
parser = "normalized"

[[hypotheses]]
id = "H1"
test = "factorial"
effect = ["belief", "tone"]
alpha = 0.05

[analysis]
"""


def load_average() -> str:
    """The 1-minute load average and the CPU count."""
    return f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="200 items")
    args = parser.parse_args()
    n = 200 if args.quick else args.items
    print(f"load average at start: {load_average()}")
    import numpy as np
    import pandas as pd

    from analysis import _factorial as af
    from runner import Renderer, validate_for_lock
    from runner.spec import load_study
    from verify import _factorial as vf

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = {
            "study.toml": SPEC,
            "prompts/task.txt": "Answer with the number.\n",
            "prompts/urgency.txt": "Please hurry!\n",
            "prompts/item.txt": "Question: {question}\n",
            "prompts/terse.txt": "{question}\n",
            "items.jsonl": "".join(
                json.dumps(
                    {"id": f"q{i}", "question": f"What is {i} plus {i}?", "answer": str(2 * i)}
                )
                + "\n"
                for i in range(1, n + 1)
            ),
        }
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, encoding="utf-8")
        t0 = time.process_time()
        study = load_study(root)
        t1 = time.process_time()
        problems = validate_for_lock(study)
        t2 = time.process_time()
        renderer = Renderer(study)
        ids = study.trial_ids()
        for tid in ids:
            arm, item, _ = tid.split("|")
            renderer.body(arm, None, item)
        t3 = time.process_time()
        cells = [a for a in study.arms.values() if a.factors]
        print(
            f"study: {n} items, {len(cells)} cells, {len(ids)} trials; lock problems "
            f"{len(problems)}"
        )
        print(f"load spec (expansion): {t1 - t0:.3f} s CPU")
        print(f"lock checks (edits, templates, null levels): {t2 - t1:.3f} s CPU")
        print(
            f"render every request: {t3 - t2:.3f} s CPU ({(t3 - t2) / len(ids) * 1e6:.1f} us "
            "per request)"
        )
        plan: dict[str, Any] = {
            "factors": {f.name: f.record(study.rel) for f in study.factors.values()},
            "factorial": {"factors": list(study.factorial.factors) if study.factorial else []},
            "arms": {a.id: {"factors": a.factors} for a in cells},
            "hypotheses": [h.locked() for h in study.hypotheses],
        }
    rng = np.random.default_rng(1)
    rows = []
    for cell in cells:
        shift = sum(
            0.3 * [lv.name for lv in study.factors[f].levels].index(level)
            for f, level in (cell.factors or {}).items()
        )
        for i in range(n):
            eta = -0.3 + shift + rng.normal(0, 0.3)
            rows.append(
                {
                    "arm": cell.id,
                    "model": "",
                    "stimulus": f"q{i + 1}",
                    "accuracy": float(rng.random() < 1 / (1 + np.exp(-eta))),
                }
            )
    frame = pd.DataFrame(rows)
    records = frame.to_dict("records")
    h = plan["hypotheses"][0]
    t0 = time.process_time()
    mine = af.factorial_values(frame, plan, h)
    t1 = time.process_time()
    theirs = vf.factorial_values(records, plan, h)
    t2 = time.process_time()
    print(f"factorial GEE, statsmodels: {t1 - t0:.3f} s CPU ({len(rows)} trials, {n} clusters)")
    print(f"factorial GEE, verifier's solver: {t2 - t1:.3f} s CPU")
    print(f"ratio verifier / statsmodels: {(t2 - t1) / max(t1 - t0, 1e-9):.2f}")
    print(f"chi2 (df {mine['df']}): {mine['chi2']:.8f} statsmodels, {theirs['chi2']:.8f} verifier")
    print(f"load average at end: {load_average()}")


if __name__ == "__main__":
    main()
