"""``bootstrap``: the percentile bootstrap of the difference in mean trial accuracy (§3)."""

from __future__ import annotations

from typing import Any

from analysis import _stats as stats
from analysis.statistics._base import Data, Posthoc, Statistic, contrast_of, decide_by_interval
from analysis.statistics._format import fmt


def _bootstrap(data: Data, a: str, b: str) -> stats.BootstrapResult:
    design = data.plan["design"]
    return stats.bootstrap_diff(
        *data.pair_values(a, b),
        int(design["bootstrap_iterations"]),
        design["bootstrap_seed"],
    )


def compute(data: Data, h: dict[str, Any]) -> dict[str, Any]:
    """The locked bootstrap (the design's iterations and seed) of a − b."""
    return _bootstrap(data, *contrast_of(h)).as_dict()


def decide(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The 95% interval excludes 0 (one-sided: its lower bound > 0), and the minimum difference."""
    return decide_by_interval(h, v, "95% bootstrap CI", v.get("min_difference_pp"))


def posthoc_compute(data: Data, a: str, b: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Post hoc: the locked bootstrap of a − b (no p)."""
    boot = _bootstrap(data, a, b)
    summary = {
        "estimate": boot.estimate,
        "lower": boot.lower,
        "upper": boot.upper,
        "p": None,
        "conf": boot.conf,
    }
    return boot.as_dict(), summary


def posthoc_detail(v: dict[str, Any]) -> str:
    """The report's test cell of a post-hoc bootstrap: its draws and seed."""
    return f"percentile bootstrap, {fmt(v.get('iterations'))} draws (seed {v.get('seed')})"


def posthoc_echo(v: dict[str, Any]) -> str:
    """What ``ledger posthoc`` prints of a recorded post-hoc bootstrap."""
    return f"{v['iterations']:,} bootstrap draws, seed {v['seed']}"


STATISTIC = Statistic(
    key="bootstrap",
    order=3,
    compute=compute,
    schema=("estimate", "lower", "upper", "conf", "iterations", "seed"),
    decide=decide,
    in_pp=True,
    posthoc=Posthoc(
        title="percentile bootstrap of the difference in mean trial accuracy",
        detail=posthoc_detail,
        echo=posthoc_echo,
        compute=posthoc_compute,
    ),
    plannable=True,
)
