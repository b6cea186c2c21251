"""``voting``: the permutation vote against the mean single order (mcq-statistics.md §11)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from verify import _mcq as vm
from verify import _mcqhyp as mh
from verify._restats import bootstrap_clustered
from verify._statistics._base import (
    Case,
    McqRows,
    Statistic,
    always,
    interval_rule,
    mcq_case_values,
    mcq_interval_cells,
    mcq_setting,
)
from verify._statistics._cells import pct


def mcq_values(rows: McqRows, models: Sequence[str]) -> dict[str, Any]:
    """The vote over the orders and the question-clustered bootstrap of its gain."""
    pooled, _, _, h = rows
    letters, model, iterations, seed = mcq_setting(rows)
    orders = list(h["variants"])
    vote = vm.permutation_vote(
        pooled, h["arm"], model, orders, mh.incomplete_rule(h), letters=letters
    )
    if not vote["answers"]:
        raise vm.McqStatError("voting: no complete group")
    correct = {r["trial"]: r["correct"] for r in pooled if r["arm"] == h["arm"]}
    gains = mh.gains(vote["answers"], correct)
    boot = bootstrap_clustered(
        gains,
        [x["item"] for x in vote["answers"]],
        [x["rep"] for x in vote["answers"]],
        iterations,
        seed,
        mh.level(h),
        unit="question",
    )
    return {
        "vote": vote,
        "n_groups": len(gains),
        "n_items": boot["n_clusters"],
        "excluded": len(vote["exclusions"]),
        "accuracy_vote": vote["accuracy"],
        "accuracy_orders": vote["accuracy"] - boot["estimate"],
        "estimate": boot["estimate"],
        "lower": boot["lower"],
        "upper": boot["upper"],
        "conf": boot["conf"],
        "iterations": boot["iterations"],
        "seed": boot["seed"],
        "ci_method": mh.CI_METHOD,
    }


def values(case: Case) -> dict[str, Any]:
    """§11 on the dataset's trial tables."""
    return mcq_case_values(case, mcq_values)


def mcq_cells(v: dict[str, Any]) -> tuple[Any, str, str]:
    """Groups, the vote's and the orders' accuracy, and the interval."""
    stat = f"vote {pct(v.get('accuracy_vote'))} vs mean order {pct(v.get('accuracy_orders'))}"
    return mcq_interval_cells(v, v.get("n_groups"), stat)


STATISTIC = Statistic(
    name="voting",
    order=9,
    values=values,
    decide=interval_rule,
    mcq=always,
    mcq_values=mcq_values,
    mcq_listed=always,
    mcq_cells=mcq_cells,
)
