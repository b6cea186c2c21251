"""Lock and schedule a large design; analyse seed 002's design: time and peak memory.

    .venv/bin/python benchmarks/bench_design.py [--items 1000 --arms 4 --replicates 5 --models 5]
    .venv/bin/python benchmarks/bench_design.py --analyse [--mcq-items 2500] [--quick]

``--analyse`` (issue 16): a synthetic dataset of 100,000 scored multiple-choice trials (2,500
items x 2 models x 20: arms ``direct``, ``fewshot`` and ``cot`` each under five option orders
and a ``sampled`` arm with five samples at temperature 0.7), analysed by
``analysis._analyze.run_analyses`` (what ``ledger analyze`` runs) with a plan of seed 002's
registered kinds (two flip rates, position bias, two votes, self-consistency, two McNemars, a
GEE) on top of the always-run mixed model, descriptive and exploratory results, in a fresh
process: the wall time of ``run_analyses`` and the process's peak RSS against the targets (10
s, 500 MB), and the ratio to a floor measured in the same process (one pandas groupby of the
trials by arm, model and variant plus one pivot of the orders). ``--quick`` is 150 items.

Writes a text study of ``items`` multiple-choice items, ``arms`` arms, ``models`` models and
``replicates`` replicates (default 1,000 x 4 x 5 x 5 = 100,000 trials) with an item template,
a system prompt and few-shot examples, then, each in a fresh process so the peak resident
memory is its own: ``ledger lock`` (validation, every draw, the schedule, the signed events),
``ledger schedule`` (the locked schedule re-derived and checked), and the rendering of every
request (what ``ledger run`` builds, without sending). Prints each one's wall time and peak
RSS, against the targets (10 s and 500 MB for the lock and the schedule) and against a limit
measured in the same run: the time to SHA-256 every trial's order key and sort them, which any
implementation of the randomization must spend.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 10.0
TARGET_MB = 500.0

_CHILD = r"""
import json, resource, sys, time
started, cpu = time.perf_counter(), time.process_time()
what, root, key = sys.argv[1], sys.argv[2], sys.argv[3]
if what == "lock":
    from ledger import SigningKey
    from runner._lock import lock_study
    result = lock_study(root, SigningKey.load(key))
    count = result.trials
elif what == "schedule":
    from ledger import Ledger
    from runner._lock import check_integrity, ledger_path
    from runner._state import locked_order
    study = check_integrity(root)
    with Ledger.open(ledger_path(root), readonly=True) as log:
        count = len(locked_order(study, log))
else:
    from runner._request import RequestBuilder, Trial, request_blob
    from runner.spec import load_study
    study = load_study(root, strict=False)
    builder = RequestBuilder(study)
    count = 0
    for position, trial_id in enumerate(study.trial_ids(), 1):
        request_blob(builder.body(Trial.from_id(trial_id, position)))
        count += 1
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "cpu": cpu, "rss_mb": rss, "count": count}))
"""


def write_study(root: Path, items: int, arms: int, models: int, replicates: int) -> None:
    """A text multiple-choice study of the given size (every file a real study has)."""
    (root / "prompts").mkdir(parents=True)
    (root / "data").mkdir()
    with (root / "data" / "items.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(items):
            record = {
                "id": f"q{i:06d}",
                "question": f"Question {i}: which option is number {i % 4}?",
                "options": [f"option {j} of {i}" for j in range(4)],
                "answer": "ABCD"[i % 4],
                "metadata": {"subject": f"s{i % 20}"},
            }
            fh.write(json.dumps(record) + "\n")
    with (root / "data" / "examples.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(40):
            record = {
                "id": f"e{i:03d}",
                "question": f"Example {i}?",
                "options": ["a", "b", "c", "d"],
                "answer": "ABCD"[i % 4],
                "metadata": {"subject": f"s{i % 20}"},
            }
            fh.write(json.dumps(record) + "\n")
    (root / "prompts" / "item.txt").write_text("Question: {question}\n{options}\n")
    (root / "prompts" / "system.txt").write_text("You are a careful clinician.\n")
    (root / "prompts" / "task.txt").write_text("Answer with one letter.\n")
    (root / "prompts" / "cot.txt").write_text("Think step by step, then write 'Answer: X'.\n")
    lines = [
        "[study]",
        'id = "bench-design"',
        'title = "bench"',
        "",
        "[components]",
        'system = "prompts/system.txt"',
        'task = "prompts/task.txt"',
        'cot = "prompts/cot.txt"',
        "",
        "[prompt]",
        'item = "prompts/item.txt"',
        "",
        "[fewshot.three]",
        'examples = "data/examples.jsonl"',
        'rule = "same-metadata"',
        'field = "subject"',
        "count = 2",
        "seed = 3",
        "",
        "[stimuli]",
        'items = "data/items.jsonl"',
        "",
        "[design]",
        f"replicates = {replicates}",
        "seed = 11",
        "bootstrap_seed = 12",
        "bootstrap_iterations = 1000",
        "",
        "[response]",
        'parser = "multiple-choice"',
        "",
        "[[hypotheses]]",
        'id = "H1"',
        'contrast = ["arm0", "arm1"]',
        'test = "mcnemar"',
        "alpha = 0.05",
        "",
        "[analysis]",
        "",
    ]
    for m in range(models):
        lines += [
            f"[models.m{m}]",
            'provider = "anthropic"',
            f'id = "model-{m}"',
            "max_tokens = 64",
            "temperature = 0.0",
            "",
        ]
    for a in range(arms):
        comps = '["item", "task"]' if a % 2 == 0 else '["item", "cot"]'
        lines += [f"[arms.arm{a}]", 'role = "factorial"', f"components = {comps}"]
        if a % 2 == 0:
            lines += ['system = ["system"]', 'fewshot = "three"']
        lines.append("")
    (root / "study.toml").write_text("\n".join(lines), encoding="utf-8")


_ANALYSE = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[2])
import bench_design
from analysis._analyze import run_analyses
items, iterations = int(sys.argv[1]), int(sys.argv[3])
ds, plan = bench_design.mcq_dataset(items, iterations)
floor = bench_design.pandas_floor(ds)
started, cpu = time.perf_counter(), time.process_time()
results = run_analyses(ds, plan)
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
failed = [r.id + ": " + str(r.error) for r in results if r.status != "ok"]
parts = bench_design.breakdown(ds, plan)
print(json.dumps({"seconds": seconds, "cpu": cpu, "rss_mb": rss, "floor": floor,
                  "trials": len(ds.trials), "results": len(results), "failed": failed,
                  "parts": parts, "verdicts": {r.id: r.verdict for r in results if r.hypothesis}}))
"""


def breakdown(ds: Any, plan: dict[str, Any]) -> dict[str, float]:
    """Where ``run_analyses``'s time goes, re-timed part by part on fresh copies of ``ds``.

    ``mixed models``: the registered model pooled, per model and with the arm x model cells
    (2,500 stimuli: the closed-form REML maximum, ``analysis._stats.CLOSED_FORM_MIN_GROUPS``;
    smaller designs go through statsmodels' MixedLM and the polish); ``seed-002 kinds``:
    every seed-002 hypothesis (pooled and per model, the trials table built as analyze builds
    it) and ``descriptive.mcq``.
    """
    from dataclasses import replace

    from analysis import _analyze as analyze

    out = {}
    fresh = replace(ds)
    started = time.perf_counter()
    analyze.fit_model(fresh, plan)
    for model in fresh.models:
        analyze.fit_model(fresh.for_model(model), plan)
    analyze.fit_model(fresh, plan, interaction=True)
    out["mixed models (4 fits)"] = time.perf_counter() - started
    fresh = replace(ds)
    started = time.perf_counter()
    analyze.mcq_descriptive(fresh, plan)
    analyze.hypothesis_results(fresh, plan, None)
    for model in fresh.models:
        analyze.hypothesis_results(fresh.for_model(model), plan, None)
    out["seed-002 kinds (pooled + per model) and descriptive.mcq"] = time.perf_counter() - started
    return out


MCQ_ORDERS = ("original", "rot1", "rot2", "swap", "s42")


def mcq_dataset(items: int, iterations: int = 1000) -> tuple[Any, dict[str, Any]]:
    """The synthetic seed-002 dataset and its locked plan (module docstring; vectorized)."""
    import numpy as np
    import pandas as pd

    from analysis import Dataset

    rng = np.random.default_rng(16)
    letters = np.array(list("ABCD"), dtype=object)
    keys = rng.integers(0, 4, size=items)
    know = rng.uniform(0.2, 0.9, size=items)
    base = np.tile(np.arange(4), (items, 1))
    swap = base.copy()
    first, second = np.where(keys == 0, 1, 0), np.where(keys <= 1, 2, 1)
    rows = np.arange(items)
    swap[rows, first], swap[rows, second] = second, first
    perms = {
        "original": base,
        "rot1": (base + 1) % 4,
        "rot2": (base + 2) % 4,
        "swap": swap,
        "s42": np.argsort(np.random.default_rng(42).uniform(size=(items, 4)), axis=1),
    }
    ids = np.char.add("q", np.char.zfill(np.arange(items).astype(str), 6)).astype(object)
    trials, item_rows = [], []
    seq = 0
    cells = [
        (arm, variant, 1, shift, prior)
        for arm, shift, prior in (
            ("direct", 0.0, (0.45, 0.22, 0.18, 0.15)),
            ("fewshot", 0.1, (0.76, 0.12, 0.07, 0.05)),
            ("cot", 0.05, (0.52, 0.19, 0.16, 0.13)),
        )
        for variant in MCQ_ORDERS
    ]
    cells += [("sampled", "original", rep, 0.05, (0.5, 0.2, 0.16, 0.14)) for rep in range(1, 6)]
    for model in ("m0", "m1"):
        for arm, variant, rep, shift, prior in cells:
            perm = perms[variant]
            order = (
                np.array(["".join("ABCD"[j] for j in p) for p in perm], dtype=object)
                if (variant != "original")
                else np.full(items, "", dtype=object)
            )
            shown = np.argmax(perm == keys[:, None], axis=1)
            knows = rng.uniform(size=items) < know - shift
            letter = np.where(knows, shown, rng.choice(4, size=items, p=np.array(prior)))
            parsed = rng.uniform(size=items) >= 0.02
            answer = perm[rows, letter]
            trial = np.array([f"{arm}|{model}|{q}|{variant}|{rep}" for q in ids], dtype=object)
            correct = parsed & (letter == shown)
            status = np.where(parsed, "ok", "unparseable").astype(object)
            trials.append(
                pd.DataFrame(
                    {
                        "trial": trial,
                        "arm": arm,
                        "model": model,
                        "stimulus": ids,
                        "variant": variant,
                        "rep": rep,
                        "response_seq": np.arange(seq, seq + items),
                        "status": status,
                        "n_items": 1,
                        "n_answered": parsed.astype(int),
                        "n_correct": correct.astype(int),
                        "accuracy": correct.astype(float),
                        "control": False,
                        "excluded": False,
                    }
                )
            )
            item_rows.append(
                pd.DataFrame(
                    {
                        "trial": trial,
                        "arm": arm,
                        "model": model,
                        "stimulus": ids,
                        "variant": variant,
                        "order": order,
                        "rep": rep,
                        "row": None,
                        "position": None,
                        "truth": letters[shown],
                        "answer": pd.Series(letters[letter]).where(parsed, None),
                        "correct": correct,
                        "truth_original": letters[keys],
                        "answer_original": pd.Series(letters[answer]).where(parsed, None),
                        "logprobs": None,
                        "margin": None,
                    }
                )
            )
            seq += items
    ds = Dataset(
        pd.concat(trials, ignore_index=True),
        pd.concat(item_rows, ignore_index=True),
        ("cot", "direct", "fewshot", "sampled"),
        (),
        "0" * 64,
        {},
        ("m0", "m1"),
        True,
    )

    def hyp(hid: str, test: str, **keys: Any) -> dict[str, Any]:
        return {
            "id": hid,
            "description": hid,
            "test": test,
            "outcome": "trial_accuracy",
            "sides": keys.pop("sides", "two-sided"),
            "alpha": 0.05,
            "min_difference_pp": None,
            "margin_pp": None,
            "correction": keys.pop("correction", "none"),
            "family": keys.pop("family", None),
            **keys,
        }

    plan = {
        "arms": {
            "direct": {"role": "full"},
            "fewshot": {"role": "factorial"},
            "cot": {"role": "factorial"},
            "sampled": {"role": "factorial", "sampling": {"temperature": 0.7}},
        },
        "models": {
            "m0": {"provider": "anthropic", "id": "a", "temperature": 0.0},
            "m1": {"provider": "anthropic", "id": "b", "temperature": 0.0},
        },
        "model_order": ["m0", "m1"],
        "variants": {
            "original": {"kind": "identity"},
            "rot1": {"kind": "rotate", "k": 1},
            "rot2": {"kind": "rotate", "k": 2},
            "swap": {"kind": "swap-distractors"},
            "s42": {"kind": "shuffle", "seed": "42"},
        },
        "variant_order": list(MCQ_ORDERS),
        "design": {
            "replicates": 1,
            "seed": "1",
            "bootstrap_seed": "2",
            "bootstrap_iterations": iterations,
        },
        "response": {
            "format": "multiple-choice",
            "parser": "multiple-choice",
            "letters": "ABCD",
            "mode": "exactly-one",
        },
        "analysis": {"model": "lmm", "random_intercept": "stimulus", "exclude_unparseable": False},
        "hypotheses": [
            hyp(
                "Hflip",
                "flip-rate",
                arm="direct",
                variants=["original", "rot1"],
                basis="answer",
                min_pp=10.0,
            ),
            hyp(
                "Hflipl",
                "flip-rate",
                arm="fewshot",
                variants=["original", "swap"],
                basis="letter",
                max_pp=90.0,
            ),
            hyp(
                "Hbias",
                "position-bias",
                contrast=["fewshot", "direct"],
                variant="original",
                sides="one-sided",
            ),
            hyp(
                "Hvote",
                "voting",
                arm="direct",
                variants=list(MCQ_ORDERS[:4]),
                incomplete="exclude",
                sides="one-sided",
            ),
            hyp("Hvote5", "voting", arm="cot", variants=list(MCQ_ORDERS), incomplete="exclude"),
            hyp(
                "Hsc",
                "self-consistency",
                arm="sampled",
                variant="original",
                samples=5,
                incomplete="exclude",
                sides="one-sided",
            ),
            hyp(
                "Hmv",
                "mcnemar",
                arm="direct",
                variants=["original", "rot1"],
                correction="holm",
                family="mc",
            ),
            hyp(
                "Hma",
                "mcnemar",
                contrast=["direct", "cot"],
                variant="original",
                correction="holm",
                family="mc",
            ),
            hyp("Hgee", "gee", contrast=["direct", "fewshot"], variant="original"),
        ],
    }
    return ds, plan


def pandas_floor(ds: Any) -> float:
    """Seconds for one pandas groupby of the trials by arm, model and variant and one pivot."""
    started = time.perf_counter()
    ds.items.groupby(["arm", "model", "variant"])["correct"].agg(["sum", "count"])
    ds.items.pivot_table(
        index=["arm", "model", "stimulus", "rep"],
        columns="variant",
        values="answer_original",
        aggfunc="first",
    )
    return time.perf_counter() - started


def analyse(items: int, iterations: int) -> int:
    """The ``--analyse`` mode: run it in a fresh process and print the figures."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _ANALYSE,
            str(items),
            str(Path(__file__).resolve().parent),
            str(iterations),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if out.returncode != 0:
        raise SystemExit(f"analyse failed:\n{out.stderr}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    ok = got["seconds"] <= TARGET_SECONDS and got["rss_mb"] <= TARGET_MB
    print(
        f"seed-002 design: {got['trials']:,} scored MCQ trials ({items:,} items x 2 models x "
        f"20: 3 arms x 5 orders + 5 samples), bootstrap iterations {iterations:,}"
    )
    print(
        f"floor: pandas groupby by arm, model, variant + pivot of the orders: {got['floor']:.2f} s"
    )
    print(
        f"run_analyses {got['seconds']:7.2f} s ({got['seconds'] / got['floor']:5.1f}x floor)  "
        f"peak RSS {got['rss_mb']:6.0f} MB  {got['results']} results; CPU {got['cpu']:.2f} s"
        + ("  within target" if ok else "  OVER TARGET")
    )
    for name, part in got["parts"].items():
        print(f"  of which {name}: {part:.2f} s (re-timed separately)")
    print("failed: " + ("; ".join(got["failed"]) if got["failed"] else "none"))
    print("verdicts: " + ", ".join(f"{k} {v}" for k, v in got["verdicts"].items() if "@" not in k))
    print(
        f"targets: run_analyses <= {TARGET_SECONDS:g} s and peak RSS <= {TARGET_MB:g} MB "
        f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs: wall time on a "
        "shared machine is above the process's CPU time)"
    )
    return 0 if ok else 1


def child(what: str, root: Path, key: Path) -> dict[str, float]:
    """Run one step in a fresh process; its seconds, peak RSS (MB) and count."""
    env = {**os.environ, "PROMPT_LEDGER_HOME": str(root.parent / "home")}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, what, str(root), str(key)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    if out.returncode != 0:
        raise SystemExit(f"{what} failed:\n{out.stderr}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def hash_sort_floor(trials: int) -> float:
    """Seconds to SHA-256 ``trials`` order keys and sort them: the randomization's own floor."""
    ids = [f"arm{t % 4}|m{t % 5}|q{t:06d}|{t % 5 + 1}" for t in range(trials)]
    started = time.perf_counter()
    sorted(ids, key=lambda t: hashlib.sha256(f"11|{t}".encode()).hexdigest())
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    """Write the study, lock it, re-derive its schedule, render every request; print figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--arms", type=int, default=4)
    parser.add_argument("--models", type=int, default=5)
    parser.add_argument("--replicates", type=int, default=5)
    parser.add_argument("--no-render", action="store_true", help="skip rendering every request")
    parser.add_argument(
        "--analyse",
        action="store_true",
        help="analyse 100,000 scored seed-002 trials instead (issue 16)",
    )
    parser.add_argument(
        "--mcq-items", type=int, default=2500, help="--analyse: items (x 2 models x 20 trials)"
    )
    parser.add_argument(
        "--iterations", type=int, default=1000, help="--analyse: bootstrap iterations of the plan"
    )
    parser.add_argument("--quick", action="store_true", help="--analyse with 150 items")
    args = parser.parse_args(argv)
    if args.analyse:
        return analyse(150 if args.quick else args.mcq_items, args.iterations)
    trials = args.items * args.arms * args.models * args.replicates
    with tempfile.TemporaryDirectory(prefix="bench-design-") as tmp:
        root = Path(tmp) / "study"
        write_study(root, args.items, args.arms, args.models, args.replicates)
        from ledger import SigningKey

        key = Path(tmp) / "owner.key"
        SigningKey.generate("bench.example/owner").save(key)
        floor = hash_sort_floor(trials)
        print(
            f"design: {args.items} items x {args.arms} arms x {args.models} models x "
            f"{args.replicates} replicates = {trials:,} trials"
        )
        print(f"floor: SHA-256 and sort of {trials:,} order keys: {floor:.2f} s")
        steps = ["lock", "schedule"] + ([] if args.no_render else ["render"])
        worst = 0
        for step in steps:
            got = child(step, root, key)
            assert int(got["count"]) == trials, (step, got)
            target = step != "render"
            verdict = ""
            if target:
                ok = got["seconds"] <= TARGET_SECONDS and got["rss_mb"] <= TARGET_MB
                verdict = "  within target" if ok else "  OVER TARGET"
                worst = max(worst, 0 if ok else 1)
            print(
                f"{step:9s} {got['seconds']:7.2f} s ({got['seconds'] / floor:5.1f}x floor)  "
                f"peak RSS {got['rss_mb']:6.0f} MB{verdict}"
            )
        print(f"targets: lock and schedule each <= {TARGET_SECONDS:g} s and <= {TARGET_MB:g} MB")
    return worst


if __name__ == "__main__":
    sys.exit(main())
