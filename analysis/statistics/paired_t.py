"""``paired-t``: the paired t-test of a − b (``docs/analysis.md`` §3).

Paired by stimulus (per-stimulus means), or by (stimulus, rep) when the hypothesis declares
``pairing = ["stimulus", "rep"]`` (then the pairs an excluded trial breaks are dropped and
listed).
"""

from __future__ import annotations

from typing import Any

from analysis import _stats as stats
from analysis.statistics._base import Data, Posthoc, Statistic, contrast_of, decide_by_p, sides_of
from analysis.statistics._format import fmt, p

TRIAL_PAIRING = ["stimulus", "rep"]


def compute(data: Data, h: dict[str, Any]) -> dict[str, Any]:
    """The t-test on the pairs, its p (one-sided when declared) and the difference."""
    a, b = contrast_of(h)
    dropped: list[dict[str, Any]] | None = None
    if h.get("pairing") == TRIAL_PAIRING:
        x, y, dropped = data.trial_pairs(a, b)
    else:
        means = data.stimulus_means(a, b)
        x, y = means[a].to_numpy(), means[b].to_numpy()
    res = stats.paired_t(x, y)
    values = {
        **res.as_dict(),
        "p_raw": res.p_one_sided if sides_of(h) == "one-sided" else res.p,
        "estimate": res.difference,
    }
    if h.get("pairing"):
        values["pairing"] = list(h["pairing"])
    if dropped is not None:
        values["n_dropped"] = len(dropped)
        values["dropped_pairs"] = dropped
    return values


def decide(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The p rule: p < alpha (one-sided: the estimate in the predicted direction too)."""
    return decide_by_p(h, v, directional=True)


def t_summary(res: stats.TTestResult) -> dict[str, Any]:
    """The post-hoc contrast summary of a two-sided t-test (``docs/analysis.md`` §6)."""
    return {
        "estimate": res.difference,
        "lower": res.ci_lower,
        "upper": res.ci_upper,
        "p": res.p,
        "t": res.t,
        "df": res.df,
        "conf": 0.95,
    }


def posthoc_compute(data: Data, a: str, b: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Post hoc: trials paired by (stimulus, rep), two-sided."""
    x, y, dropped = data.trial_pairs(a, b)
    res = stats.paired_t(x, y)
    values = {
        **res.as_dict(),
        "estimate": res.difference,
        "pairing": list(TRIAL_PAIRING),
        "n_dropped": len(dropped),
        "dropped_pairs": dropped,
    }
    return values, t_summary(res)


def t_detail(v: dict[str, Any]) -> str:
    """The report's test cell of a post-hoc t-test: t, df and p."""
    c = v.get("contrast") or {}
    return f"t {fmt(c.get('t'))} (df {fmt(c.get('df'))}), p {p(c.get('p'))}"


def t_echo(v: dict[str, Any]) -> str:
    """What ``ledger posthoc`` prints of a recorded post-hoc t-test."""
    c = v["contrast"]
    return f"t({c['df']:.4g}) = {c['t']:.2f}, two-sided p = {c['p']:.3g}"


STATISTIC = Statistic(
    key="paired-t",
    order=1,
    compute=compute,
    schema=("estimate", "p_raw", "t", "df", "ci_lower", "ci_upper"),
    decide=decide,
    in_pp=True,
    posthoc=Posthoc(
        title="paired t-test, trials paired by (stimulus, rep)",
        detail=t_detail,
        echo=t_echo,
        compute=posthoc_compute,
    ),
    plannable=True,
)
