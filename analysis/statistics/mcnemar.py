"""``mcnemar``: McNemar's test on paired items (``docs/analysis.md`` §3).

Between two arms (``contrast``) the items pair by (model, stimulus, variant, rep, row,
position); a hypothesis that names a ``variant`` (at one variant) or an ``arm`` (between two
variants) is one of seed 002's statistics (``docs/mcq-statistics.md`` §11), computed on the
long-format table.
"""

from __future__ import annotations

from typing import Any

from analysis import _stats as stats
from analysis.mcq import _kinds as mcq_tests
from analysis.mcq import _stats as mcq
from analysis.statistics._base import Data, Statistic, contrast_of, decide_by_p
from analysis.statistics._format import count, fmt, p


def seed002(h: dict[str, Any]) -> bool:
    """A McNemar between two variants of an arm, or between arms at one variant."""
    return "arm" in h or "variant" in h


def seed002_values(t: mcq_tests.Tables, h: dict[str, Any]) -> dict[str, Any]:
    """McNemar on the table's (item, rep) pairs of the two conditions."""
    if "arm" in h:
        v1, v2 = h["variants"]
        ca, cb = (h["arm"], v1, t.model), (h["arm"], v2, t.model)
    else:
        a, b = h["contrast"]
        ca, cb = (a, h["variant"], t.model), (b, h["variant"], t.model)
    mc = mcq.paired_mcnemar(t.pooled, ca, cb, t.letters)
    if mc.n_pairs == 0:
        raise mcq.McqError(f"mcnemar: {'/'.join(ca)} and {'/'.join(cb)} share no (item, rep)")
    return {**mc.as_dict(), "p_raw": mc.test.p, "estimate": mc.difference}


def compute(data: Data, h: dict[str, Any]) -> dict[str, Any]:
    """McNemar's test of the paired items; the estimate is (b − c) / pairs."""
    if seed002(h):
        return seed002_values(mcq_tests.dataset_tables(data.ds, data.plan), h)
    a, b = contrast_of(h)
    pairs = data.paired_items(a, b)
    if pairs.empty:
        raise stats.StatsError(f"no paired items between arms {a!r} and {b!r}")
    mc = stats.mcnemar_paired(pairs["correct_a"].to_numpy(), pairs["correct_b"].to_numpy())
    return {**mc.as_dict(), "p_raw": mc.p, "estimate": (mc.b - mc.c) / len(pairs)}


def decide(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The p rule: p < alpha (one-sided: the estimate in the predicted direction too)."""
    return decide_by_p(h, v, directional=True)


def estimate_text(v: dict[str, Any]) -> str:
    """The discordant counts (with variants ``b`` is a condition: ``b_count``, ``c_count``)."""
    return f"discordant b={fmt(count(v, 'b'))}, c={fmt(count(v, 'c'))}"


def seed002_cells(v: dict[str, Any]) -> tuple[str, str, str]:
    """(n, statistic, interval) of the seed-002 row: the pairs, the counts, the p."""
    return (
        str(v.get("n_pairs")),
        f"b={v.get('b_count')}, c={v.get('c_count')}",
        f"p {p(v.get('p_raw'))}",
    )


STATISTIC = Statistic(
    key="mcnemar",
    order=4,
    compute=compute,
    schema=("estimate", "p_raw"),
    decide=decide,
    in_pp=True,
    estimate_text=estimate_text,
    seed002=seed002,
    seed002_values=seed002_values,
    seed002_cells=seed002_cells,
)
