"""Per-item variants at seed 002's scale: lock, render and re-derive, time and peak memory.

    .venv/bin/python benchmarks/bench_variants.py [--items 4183] [--quick]

Writes a study of ``items`` four-option questions, each with a three-paragraph context of about
120 words and its section labels, and eleven variants (``docs/variants.md``): the items as
written, rotate-1, rotate-2, reverse, the distractor swap, three seeded shuffles (42, 123, 456),
keep-first and keep-last half of the context words and the top three salient sentences. Arm
``direct`` runs every variant, arm ``bare`` the items as written; one model, one replicate:
4,183 x 12 = 50,196 trials by default. Then, each in a fresh process
so its peak resident memory is its own: ``ledger lock`` (every variant applied to every item
and checked, the schedule, the signed events), the rendering of every request (what ``ledger
run`` builds, without sending), and the verifier's independent re-derivation of every varied
item (``verify/_variants.py``). Prints wall time and peak RSS, against targets for the lock and
the re-derivation (10 s and 500 MB each), and against a limit measured in the same run: SHA-256
and sort of every trial's order key, which any implementation of the schedule must spend.
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

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 10.0
TARGET_MB = 500.0
VARIANTS = 11
"""The variants the study declares (arm ``direct`` runs them all)."""

_CHILD = r"""
import json, resource, sys, time
started = time.perf_counter()
what, root, key = sys.argv[1], sys.argv[2], sys.argv[3]
if what == "lock":
    from ledger import SigningKey
    from runner._lock import lock_study
    count = lock_study(root, SigningKey.load(key)).trials
elif what == "render":
    from runner._request import RequestBuilder, Trial, request_blob
    from runner.spec import load_study
    study = load_study(root, strict=False)
    builder = RequestBuilder(study)
    count = 0
    for position, trial_id in enumerate(study.trial_ids(), 1):
        request_blob(builder.body(Trial.from_id(trial_id, position)))
        count += 1
else:  # the verifier's re-derivation, from protocol.locked and the locked bytes alone
    from pathlib import Path
    from ledger import Ledger
    from verify._variants import Variants
    import json as j
    with Ledger.open(Path(root) / "ledger.db", readonly=True) as log:
        protocol = next(iter(log.events("protocol.locked"))).body
    base = Path(root)
    items = [j.loads(line) for line in (base / "items.jsonl").read_text().splitlines()]
    variants = Variants(protocol, lambda p: (base / p).read_bytes(), [4] * len(items))
    count = 0
    for name in variants.order:
        for item in items:
            variants.apply(name, item)
            count += 1
seconds = time.perf_counter() - started
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "rss_mb": rss, "count": count}))
"""

_WORDS = (
    "patients",
    "trial",
    "dose",
    "outcome",
    "mortality",
    "infection",
    "cohort",
    "randomized",
    "placebo",
    "symptoms",
    "hospital",
    "treatment",
    "therapy",
    "risk",
    "survival",
    "analysis",
    "clinical",
    "blood",
    "pressure",
    "cardiac",
)


def context(i: int) -> str:
    """Three paragraphs of about 40 words each, sentences ending in periods."""
    paragraphs = []
    for p in range(3):
        sentences = []
        for s in range(4):
            words = [_WORDS[(i * 7 + p * 5 + s * 3 + w) % len(_WORDS)] for w in range(10)]
            sentences.append(" ".join(words).capitalize() + ".")
        paragraphs.append(" ".join(sentences))
    return "\n\n".join(paragraphs)


def write_study(root: Path, items: int) -> None:
    """The study: items, an item template, the stop-word list and the ten variants."""
    (root / "prompts").mkdir(parents=True)
    with (root / "items.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(items):
            record = {
                "id": f"q{i:06d}",
                "question": f"Does therapy {i} reduce mortality in patients?",
                "options": [f"option {j} of {i}" for j in range(4)],
                "answer": "ABCD"[i % 4],
                "context": context(i),
                "metadata": {"context_labels": ["BACKGROUND", "METHODS", "RESULTS"]},
            }
            fh.write(json.dumps(record) + "\n")
    (root / "prompts" / "item.txt").write_text(
        "Context: {context}\nQuestion: {question}\n{options}\n"
    )
    (root / "prompts" / "task.txt").write_text("Answer with one letter.\n")
    (root / "stopwords.txt").write_text(
        (ROOT / "runner" / "templates" / "stopwords-en.txt").read_text()
    )
    variants = [
        ("original", ['kind = "identity"']),
        ("rot1", ['kind = "rotate"', "k = 1"]),
        ("rot2", ['kind = "rotate"', "k = 2"]),
        ("rev", ['kind = "reverse"']),
        ("swap", ['kind = "swap-distractors"']),
        ("s42", ['kind = "shuffle"', "seed = 42"]),
        ("s123", ['kind = "shuffle"', "seed = 123"]),
        ("s456", ['kind = "shuffle"', "seed = 456"]),
        ("first", ['kind = "keep-first"', 'field = "context"', "fraction = 0.5"]),
        ("last", ['kind = "keep-last"', 'field = "context"', "fraction = 0.5"]),
        (
            "salient",
            [
                'kind = "keep-salient"',
                'field = "context"',
                "count = 3",
                'stopwords = "stopwords.txt"',
            ],
        ),
    ]
    assert len(variants) == VARIANTS
    lines = [
        "[study]",
        'id = "bench-variants"',
        'title = "bench"',
        "",
        "[model]",
        'provider = "anthropic"',
        'id = "model-0"',
        "max_tokens = 8",
        "temperature = 0.0",
        "",
        "[components]",
        'task = "prompts/task.txt"',
        "",
        "[prompt]",
        'item = "prompts/item.txt"',
        "",
        "[arms.direct]",
        'role = "full"',
        'components = ["task"]',
        "",
        "[arms.bare]",
        'role = "vehicle"',
        "components = []",
        'variants = ["original"]',
        "",
        "[stimuli]",
        'items = "items.jsonl"',
        "",
        "[design]",
        "replicates = 1",
        "seed = 11",
        "bootstrap_seed = 12",
        "bootstrap_iterations = 1000",
        "",
        "[response]",
        'parser = "multiple-choice"',
        "",
        "[[hypotheses]]",
        'id = "H1"',
        'contrast = ["direct", "bare"]',
        'test = "mcnemar"',
        "alpha = 0.05",
        "",
        "[analysis]",
        "",
    ]
    for name, body in variants:
        lines += [f"[variants.{name}]", *body, ""]
    (root / "study.toml").write_text("\n".join(lines), encoding="utf-8")


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
    ids = [f"direct||q{t:06d}|v{t % 11}|1" for t in range(trials)]
    started = time.perf_counter()
    sorted(ids, key=lambda t: hashlib.sha256(f"11|{t}".encode()).hexdigest())
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    """Write the study, lock it, render every request, re-derive every variant; print figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=4183)
    parser.add_argument("--quick", action="store_true", help="300 items (a smoke run)")
    args = parser.parse_args(argv)
    items = 300 if args.quick else args.items
    with tempfile.TemporaryDirectory(prefix="bench-variants-") as tmp:
        root = Path(tmp) / "study"
        write_study(root, items)
        from ledger import SigningKey

        key = Path(tmp) / "owner.key"
        SigningKey.generate("bench.example/owner").save(key)
        trials = items * (VARIANTS) + items  # direct: every variant; bare: the original
        floor = hash_sort_floor(trials)
        print(
            f"design: {items:,} items x {VARIANTS} variants (arm direct) + {items:,} "
            f"(arm bare, original only) = {trials:,} trials"
        )
        print(f"floor: SHA-256 and sort of {trials:,} order keys: {floor:.2f} s")
        worst = 0
        for step, expected in (
            ("lock", trials),
            ("render", trials),
            ("rederive", items * (VARIANTS)),
        ):
            got = child(step, root, key)
            assert int(got["count"]) == expected, (step, got)
            verdict = ""
            if step != "render":  # rendering is spread over the run: no target
                ok = got["seconds"] <= TARGET_SECONDS and got["rss_mb"] <= TARGET_MB
                worst = max(worst, 0 if ok else 1)
                verdict = "  within target" if ok else "  OVER TARGET"
            print(
                f"{step:9s} {got['seconds']:7.2f} s ({got['seconds'] / floor:6.1f}x floor)  "
                f"peak RSS {got['rss_mb']:6.0f} MB{verdict}"
            )
        print(f"targets: lock and rederive each <= {TARGET_SECONDS:g} s and <= {TARGET_MB:g} MB")
    return worst


if __name__ == "__main__":
    sys.exit(main())
