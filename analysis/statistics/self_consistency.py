"""``self-consistency``: the gain of a majority over an arm's samples (§11)."""

from __future__ import annotations

from typing import Any

from analysis import _stats as st
from analysis.mcq import _kinds as mcq_tests
from analysis.mcq import _stats as mcq
from analysis.mcq._rows import ORIGINAL
from analysis.statistics._base import Data, Statistic
from analysis.statistics._format import interval_cell, pct
from analysis.statistics.flip_rate import always
from analysis.statistics.position_bias import decide


def _ran(t: mcq_tests.Tables, arm: str) -> list[str]:
    """The models the arm ran, in model order."""
    models = list(t.models)
    return sorted(
        {c.model for c in t.by_model.cells() if c.arm == arm},
        key=lambda m: (models.index(m) if m in models else -1, m),
    )


def seed002_values(t: mcq_tests.Tables, h: dict[str, Any]) -> dict[str, Any]:
    """Each model's majority results and the clustered bootstrap of the gain over one sample."""
    variant = h.get("variant") or ORIGINAL
    incomplete = "error" if h.get("incomplete") == "fail" else "exclude"
    results: list[dict[str, Any]] = []
    diffs: list[float] = []
    items: list[str] = []
    runs: list[int] = []
    for j, m in enumerate(_ran(t, h["arm"])):
        sc = mcq.self_consistency(
            t.by_model,
            (h["arm"], variant, m),
            int(h["samples"]),
            mcq_tests.temperature(t.plan, h["arm"], m),
            incomplete,  # type: ignore[arg-type]
            letters=t.letters,
        )
        results.append(sc.as_dict())
        correct = mcq_tests.correct_of(t.by_model, h["arm"], m, [variant])
        for x in sc.answers:
            diffs.append(float(x.correct) - sum(correct[r] for r in x.trials) / len(x.trials))
            items.append(x.item)
            runs.append(j)
    if not diffs:
        raise mcq.McqError(
            f"self-consistency: arm {h['arm']!r} has no trials of variant {variant!r}"
        )
    boot = st.bootstrap_clustered(
        diffs, items, runs, t.iterations, t.seed, mcq_tests.interval_level(h), unit="question"
    )
    majority = sum(r["correct"] for r in results) / len(diffs)
    return {
        "results": results,
        "n_units": len(diffs),
        "n_items": boot.n_clusters,
        "excluded": sum(len(r["exclusions"]) for r in results),
        "accuracy_majority": majority,
        "accuracy_single": majority - boot.estimate,
        "estimate": boot.estimate,
        "lower": boot.lower,
        "upper": boot.upper,
        "conf": boot.conf,
        "iterations": boot.iterations,
        "seed": boot.seed,
        "ci_method": mcq_tests.CI_METHOD,
    }


def compute(data: Data, h: dict[str, Any]) -> dict[str, Any]:
    """:func:`seed002_values` on the dataset's tables."""
    return seed002_values(mcq_tests.dataset_tables(data.ds, data.plan), h)


def seed002_cells(v: dict[str, Any]) -> tuple[str, str, str]:
    """(n, statistic, interval) of the seed-002 row: the units, majority vs single."""
    stat = f"majority {pct(v.get('accuracy_majority'))} vs single {pct(v.get('accuracy_single'))}"
    return str(v.get("n_units")), stat, interval_cell(v)


def demo_row(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, str]:
    """(what, figures) the template demo prints: the majority against one sample."""
    figures = (
        f"majority {pct(v.get('accuracy_majority'))} vs one sample {pct(v.get('accuracy_single'))}"
    )
    return f"{h['arm']}: {h.get('samples')} samples", figures


STATISTIC = Statistic(
    key="self-consistency",
    order=10,
    compute=compute,
    schema=("accuracy_majority", "accuracy_single", "estimate", "lower", "upper", "conf"),
    decide=decide,
    in_pp=True,
    seed002=always,
    seed002_values=seed002_values,
    seed002_cells=seed002_cells,
    demo_row=demo_row,
)
