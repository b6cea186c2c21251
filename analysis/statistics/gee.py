"""``gee``: the arm effect of a logistic GEE over the items (``docs/mcq-statistics.md`` §11)."""

from __future__ import annotations

from typing import Any

from analysis._deferred import DeferredModule
from analysis.mcq import _kinds as mcq_tests
from analysis.statistics._base import Data, Statistic, decide_by_p
from analysis.statistics._format import fmt, interval_cell
from analysis.statistics.flip_rate import always

sps = DeferredModule("scipy.stats")  # imported on first use (analysis._deferred)


def _rows(t: mcq_tests.Tables, h: dict[str, Any]) -> Any:
    """The table's rows of the two arms: at the declared variant, else the variants both ran."""
    a, b = h["contrast"]
    frame = t.by_model.frame
    keep = frame["arm"].isin([a, b])
    if h.get("variant"):
        keep &= frame["variant"] == h["variant"]
    else:  # the variants both arms ran (arms and variants crossed)
        shared = set(frame.loc[frame["arm"] == a, "variant"]) & set(
            frame.loc[frame["arm"] == b, "variant"]
        )
        keep &= frame["variant"].isin(shared)
    return frame.loc[keep.to_numpy()]


def _factors(t: mcq_tests.Tables, sub: Any) -> dict[str, str]:
    """The model and variant factors present in the rows, each with its reference level."""
    factors: dict[str, str] = {}
    present_models = set(sub["model"])
    if len(present_models) > 1:
        factors["model"] = next((m for m in t.models if m in present_models), min(present_models))
    present_variants = set(sub["variant"])
    if len(present_variants) > 1:
        order = list(t.plan.get("variant_order") or [])
        factors["variant"] = next(
            (v for v in order if v in present_variants), min(present_variants)
        )
    return factors


def seed002_values(t: mcq_tests.Tables, h: dict[str, Any]) -> dict[str, Any]:
    """The fit (with the declared fallback) and the term ``arm[T.a]``: log odds ratio a vs b."""
    a, b = h["contrast"]
    sub = _rows(t, h)
    fit, used = mcq_tests.gee_with_fallback(sub, b, _factors(t, sub), t.letters, h.get("fallback"))
    term = next(x for x in fit.terms if x.name == f"arm[T.{a}]")
    one = (h.get("sides") or "two-sided") == "one-sided"
    p = float(sps.norm.sf(term.z)) if one else term.p
    return {
        "fit": fit.as_dict(),
        "term": term.name,
        "estimate": term.estimate,
        "odds_ratio": term.odds_ratio,
        "lower": term.lower,
        "upper": term.upper,
        "p_raw": p,
        **used,
    }


def compute(data: Data, h: dict[str, Any]) -> dict[str, Any]:
    """:func:`seed002_values` on the dataset's tables."""
    return seed002_values(mcq_tests.dataset_tables(data.ds, data.plan), h)


def decide(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The p rule: p < alpha (one-sided: the estimate in the predicted direction too)."""
    return decide_by_p(h, v, directional=True)


def estimate_text(v: dict[str, Any]) -> str:
    """The log odds ratio, its interval and the odds ratio."""
    return (
        f"log OR {fmt(v.get('estimate'))} (95% CI {fmt(v.get('lower'))} to "
        f"{fmt(v.get('upper'))}; OR {fmt(v.get('odds_ratio'))})"
    )


def seed002_cells(v: dict[str, Any]) -> tuple[str, str, str]:
    """(n, statistic, interval) of the seed-002 row: the observations and the odds ratio."""
    n = (v.get("fit") or {}).get("n_obs")
    return str(n), f"OR {fmt(v.get('odds_ratio'))}", interval_cell(v)


STATISTIC = Statistic(
    key="gee",
    order=11,
    compute=compute,
    schema=("fit", "term", "estimate", "odds_ratio", "lower", "upper", "p_raw"),
    decide=decide,
    accuracy_difference=False,
    estimate_text=estimate_text,
    seed002=always,
    seed002_values=seed002_values,
    seed002_cells=seed002_cells,
)
