"""``gee``: the arm's log odds ratio of a logistic GEE (mcq-statistics.md §11)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# scipy is imported inside the functions that use it: the checks before the science ones load
# none of it (tests/verify/test_verify_imports.py).
from verify import _mcq as vm
from verify._recompute.results import GEE_REL_TOL
from verify._statistics._base import (
    Case,
    McqRows,
    Statistic,
    always,
    directional_p_rule,
    mcq_case_values,
    mcq_setting,
)
from verify._statistics._cells import fmt, interval_text, obj


def _rows(rows: McqRows) -> list[dict[str, Any]]:
    """A's and b's trials at the variant (else the variants both ran)."""
    _, by_model, _, h = rows
    a, b = h["contrast"]
    out = [r for r in by_model if r["arm"] in (a, b)]
    if h.get("variant"):
        return [r for r in out if r["variant"] == h["variant"]]
    shared = {r["variant"] for r in out if r["arm"] == a} & {
        r["variant"] for r in out if r["arm"] == b
    }
    return [r for r in out if r["variant"] in shared]


def _factors(
    rows: list[dict[str, Any]], plan: dict[str, Any], models: Sequence[str]
) -> dict[str, str]:
    """The model and variant factors the rows vary in, with their reference levels."""
    factors: dict[str, str] = {}
    models_present = {r["model"] for r in rows}
    if len(models_present) > 1:
        factors["model"] = next((m for m in models if m in models_present), min(models_present))
    variants_present = {r["variant"] for r in rows}
    if len(variants_present) > 1:
        order = [str(v) for v in plan.get("variant_order") or []]
        factors["variant"] = next(
            (v for v in order if v in variants_present), min(variants_present)
        )
    return factors


def mcq_values(rows: McqRows, models: Sequence[str]) -> dict[str, Any]:
    """The fit, the arm's term and its one- or two-sided p; a declared fallback recorded."""
    from scipy import stats as sps

    _, _, plan, h = rows
    letters, _, _, _ = mcq_setting(rows)
    a, b = h["contrast"]
    table = _rows(rows)
    factors = _factors(table, plan, models)
    dropped: list[str] = []
    while True:  # §11: a declared fallback "drop-factor" refits without the factor at fault
        try:
            fit = vm.gee_arm_effects(table, b, factors, letters=letters)
            break
        except vm.GeeNotFittable as exc:
            if h.get("fallback") != "drop-factor" or exc.column not in factors:
                raise
            factors.pop(exc.column)
            dropped.append(exc.column)
    term = next(t for t in fit["terms"] if t["name"] == f"arm[T.{a}]")
    one = (h.get("sides") or "two-sided") == "one-sided"
    out = {
        "fit": fit,
        "term": term["name"],
        "estimate": term["estimate"],
        "odds_ratio": term["odds_ratio"],
        "lower": term["lower"],
        "upper": term["upper"],
        "p_raw": float(sps.norm.sf(term["z"])) if one else term["p"],
    }
    if dropped:
        out["fallback"] = {"rule": "drop-factor", "dropped": dropped, "reason": None}
    return out


def values(case: Case) -> dict[str, Any]:
    """§11 on the dataset's trial tables."""
    return mcq_case_values(case, mcq_values)


def estimate_text(v: dict[str, Any]) -> str:
    """The log odds ratio, its interval and the odds ratio."""
    return (
        f"log OR {fmt(v.get('estimate'))} (95% CI {fmt(v.get('lower'))} to "
        f"{fmt(v.get('upper'))}; OR {fmt(v.get('odds_ratio'))})"
    )


def mcq_cells(v: dict[str, Any]) -> tuple[Any, str, str]:
    """Observations, the odds ratio and the interval."""
    return obj(v.get("fit")).get("n_obs"), f"OR {fmt(v.get('odds_ratio'))}", interval_text(v)


STATISTIC = Statistic(
    name="gee",
    order=11,
    values=values,
    decide=directional_p_rule,
    estimate_text=estimate_text,
    rel_tol=GEE_REL_TOL,
    mcq=always,
    mcq_values=mcq_values,
    mcq_listed=always,
    mcq_cells=mcq_cells,
)
