"""``ledger plan`` on the tumbling-E template: what a plan costs, with and without sensitivity.

    .venv/bin/python benchmarks/bench_plan.py [--studies 200] [--replicates 30] [--jobs N] [--quick]

Writes the tumbling-E template study (``runner/templates/prompt_tumbling_e``) with its
``[plan]`` cut to one scenario (``demo``) at ``replicates`` replicates, and runs
:func:`analysis.plan_study` on it with ``studies`` simulated studies, twice: with
``sensitivity = true`` (the registered analysis and ``sensitivity.lmm``: four more REML fits
per study) and ``sensitivity = false``. Then the cold sensitivity fits ``ledger analyze`` runs
(no warm start: three shares, the scan, the boundary; ``docs/statistics.md``) on a few of the
same simulated studies. With more than one core available (or ``--jobs N``), the plan with
sensitivity runs a third time in that many worker processes, as ``ledger plan`` runs it by
default: its wall seconds, and the CPU seconds of this process and of its workers.

Each figure is CPU seconds of this process (and wall seconds), per run and per simulated
study, and a ratio against a **limit measured in the same run**: drawing every simulated
study's trials and building its analysis dataset (``docs/planning.md`` §2), which any
implementation of the plan must spend. Figures are printed, never asserted; the machine's load
average is printed at start and end (this project's machine is shared: the CPU seconds are the
figure to compare).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``fn()``, its CPU seconds (this process) and wall seconds."""
    cpu, wall = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - cpu, time.perf_counter() - wall


def make_study(root: Path, replicates: int, sensitivity: bool) -> Path:
    """The template study with ``[plan]``: the ``demo`` scenario at ``replicates`` only."""
    from ledger import SigningKey
    from runner import new_study

    new_study(root, "prompt-tumbling-e", SigningKey.generate("bench.example/owner"))
    spec = root / "study.toml"
    text = spec.read_text(encoding="utf-8")
    text = text.replace("replicates = [4, 30]", f"replicates = [{replicates}]")
    text = text[: text.index('[[plan.scenarios]]\nname = "null"')]
    head = f"replicates = [{replicates}]\n"
    text = text.replace(
        head, head + "max_seconds = 86400\n" + ("" if sensitivity else "sensitivity = false\n")
    )
    spec.write_text(text, encoding="utf-8")
    return root


def _drawer(root: Path) -> Callable[[int], Iterator[tuple[Any, Any]]]:
    """The template's simulated studies as ``ledger plan`` draws them: the study is loaded
    here, once, and the returned function yields ``(protocol, dataset)`` for each of its
    ``studies`` (the first scenario, the plan's seed), so only the draws are timed."""
    import numpy as np

    from analysis import _plan as plan
    from runner import plan_stimuli, protocol_body
    from runner.spec import load_study

    study = load_study(root)
    spec = study.plan
    assert spec is not None
    protocol = protocol_body(study, b"\0" * 32, study.trial_ids())
    stimuli = plan_stimuli(study)
    design = plan._design(plan._trial_ids(study, plan._settings(spec, study)[0]))
    scenario = spec.scenarios[0]

    def draws(studies: int) -> Iterator[tuple[Any, Any]]:
        for k in range(studies):
            rng = np.random.default_rng([int(spec.seed), 0, 0, k])
            frame, _, _ = plan.simulate_trials(scenario, design, stimuli, rng)
            yield protocol, plan._simulated_dataset(protocol, frame)

    return draws


def limit(root: Path, studies: int) -> float:
    """CPU seconds to draw every simulated study's trials and build its dataset (§2)."""
    draws = _drawer(root)

    def draw() -> None:
        for _ in draws(studies):
            pass

    return _timed(draw)[1]


def cold_fits(root: Path, studies: int) -> tuple[float, int]:
    """CPU seconds of ``sensitivity.lmm`` as ``ledger analyze`` runs it (no warm starts)."""
    from analysis import _analyze as an

    draws = _drawer(root)
    total, fits = 0.0, 0
    for protocol, ds in draws(studies):
        _, fit = an.fit_model(ds, protocol)
        tested = an.hypothesis_results(ds, protocol, fit)
        cpu = time.process_time()
        result = an.sensitivity_lmm(ds, protocol, fit, tested)
        total += time.process_time() - cpu
        values = (result.values or {}) if result is not None else {}
        blocks = [values.get("models") or {}] + [
            c.get("subset_models") or {} for c in values.get("contrasts") or []
        ]
        fits += sum(
            1
            for models in blocks
            for name, m in models.items()
            if name != "registered" and m.get("fitted")
        )
    return total, fits


def main(argv: list[str] | None = None) -> int:
    """Time the plan with and without sensitivity, the cold fits, and the limit."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=200, help="simulated studies per run")
    parser.add_argument("--replicates", type=int, default=30, help="replicates per cell")
    parser.add_argument("--cold", type=int, default=3, help="studies for the cold fits")
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="worker processes of the third run (default: the cores available, as ledger plan)",
    )
    parser.add_argument("--quick", action="store_true", help="20 studies, 1 cold study")
    args = parser.parse_args(argv)
    if args.quick:
        args.studies, args.cold = 20, 1
    from analysis import plan_study
    from analysis._plan import available_cores

    args.jobs = args.jobs if args.jobs is not None else available_cores()

    print(_load())
    print(f"tumbling-E template, demo scenario, {args.replicates} replicates")
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as tmp:
        os.environ["PROMPT_LEDGER_HOME"] = str(Path(tmp) / "home")
        roots = {
            sens: make_study(Path(tmp) / f"study-{sens}", args.replicates, sens)
            for sens in (True, False)
        }
        floor = limit(roots[False], args.studies)
        print(
            f"limit (draw {args.studies} studies' trials and datasets): {floor:.2f} s CPU, "
            f"{1000 * floor / args.studies:.1f} ms per study"
        )
        for sens in (True, False):
            cpu, wall = time.process_time(), time.perf_counter()
            run = plan_study(roots[sens], studies=args.studies)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            print(
                f"plan, sensitivity = {str(sens).lower()}: {cpu:.2f} s CPU ({wall:.2f} s wall; "
                f"the plan's own clock {run.seconds:.2f} s, its estimate "
                f"{run.estimate_seconds:.2f} s), {1000 * cpu / args.studies:.1f} ms CPU per "
                f"study, {cpu / floor:.1f} x the limit"
            )
        if args.jobs > 1:
            before = os.times()
            wall = time.perf_counter()
            run = plan_study(roots[True], studies=args.studies, jobs=args.jobs)
            wall = time.perf_counter() - wall
            after = os.times()
            mine = (after.user - before.user) + (after.system - before.system)
            workers = (after.children_user - before.children_user) + (
                after.children_system - before.children_system
            )
            print(
                f"plan, sensitivity = true, {args.jobs} worker processes: {wall:.2f} s wall "
                f"(the plan's own clock {run.seconds:.2f} s), {mine + workers:.2f} s CPU "
                f"(this process {mine:.2f} s, the workers {workers:.2f} s), "
                f"{1000 * wall / args.studies:.1f} ms wall per study"
            )
        cold, fits = cold_fits(roots[True], args.cold)
        print(
            f"sensitivity.lmm as ledger analyze fits it (cold starts), {args.cold} studies: "
            f"{cold:.2f} s CPU for {fits} REML fits, {1000 * cold / max(fits, 1):.0f} ms per fit"
        )
    print(_load())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
