"""``voting``: the gain of a permutation vote over an arm's orders (§11)."""

from __future__ import annotations

from typing import Any

from analysis import _stats as st
from analysis.mcq import _kinds as mcq_tests
from analysis.mcq import _stats as mcq
from analysis.statistics._base import Data, Statistic
from analysis.statistics._format import interval_cell, pct
from analysis.statistics.flip_rate import always
from analysis.statistics.position_bias import decide


def seed002_values(t: mcq_tests.Tables, h: dict[str, Any]) -> dict[str, Any]:
    """The vote's accuracy, the orders' mean, and the clustered bootstrap of the gain."""
    orders = list(h["variants"])
    incomplete = "error" if h.get("incomplete") == "fail" else "exclude"
    vote = mcq.permutation_vote(
        t.pooled,
        h["arm"],
        t.model,
        orders,
        incomplete,  # type: ignore[arg-type]
        letters=t.letters,
    )
    if not vote.answers:
        raise mcq.McqError(f"voting over {orders}: no complete group of orders")
    correct = mcq_tests.correct_of(t.pooled, h["arm"], t.model, orders)
    gains = [
        float(x.correct) - sum(correct[trial] for trial in x.trials) / len(x.trials)
        for x in vote.answers
    ]
    boot = st.bootstrap_clustered(
        gains,
        [x.item for x in vote.answers],
        [x.rep for x in vote.answers],
        t.iterations,
        t.seed,
        mcq_tests.interval_level(h),
        unit="question",
    )
    return {
        "vote": vote.as_dict(),
        "n_groups": len(gains),
        "n_items": boot.n_clusters,
        "excluded": len(vote.exclusions),
        "accuracy_vote": vote.accuracy,
        "accuracy_orders": vote.accuracy - boot.estimate,
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
    """(n, statistic, interval) of the seed-002 row: the groups, vote vs mean order."""
    stat = f"vote {pct(v.get('accuracy_vote'))} vs mean order {pct(v.get('accuracy_orders'))}"
    return str(v.get("n_groups")), stat, interval_cell(v)


def demo_row(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, str]:
    """(what, figures) the template demo prints: the vote against the mean per order."""
    figures = (
        f"vote {pct(v.get('accuracy_vote'))} vs mean per order {pct(v.get('accuracy_orders'))}"
    )
    return f"{h['arm']}: {len(h['variants'])} orders", figures


STATISTIC = Statistic(
    key="voting",
    order=9,
    compute=compute,
    schema=("accuracy_vote", "accuracy_orders", "estimate", "lower", "upper", "conf"),
    decide=decide,
    in_pp=True,
    seed002=always,
    seed002_values=seed002_values,
    seed002_cells=seed002_cells,
    demo_row=demo_row,
)
