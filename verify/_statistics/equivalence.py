"""``equivalence``: every per-stimulus |a − b| within the margin (analysis.md §3)."""

from __future__ import annotations

from typing import Any

from verify import _restats as st
from verify._recompute.compare import _close
from verify._recompute.pairs import _per_group_diff
from verify._recompute.results import REL_TOL
from verify._statistics._base import Case, Decision, Statistic
from verify._statistics._cells import pp


def values(case: Case) -> dict[str, Any]:
    """The largest per-stimulus difference against ``margin_pp``; the groups that reach it."""
    diffs = _per_group_diff(case.ds, case.a, case.b)
    out = st.equivalence(diffs, case.h["margin_pp"] / 100)
    best = out["max_abs_diff"]
    out["_group_ok"] = [g for g, d in diffs.items() if _close(abs(d), best, REL_TOL)]
    return out


def decide(h: dict[str, Any], v: dict[str, Any]) -> Decision:
    """Supported when the largest |difference| is below the margin."""
    return ("supported" if v["holds"] else "not supported"), {
        "rule": "max per-group |difference| < margin",
        "max_abs_diff": v["max_abs_diff"],
        "group": v["group"],
        "margin": v["margin"],
        "_group_ok": v.get("_group_ok", []),
    }


def component_effect(h: dict[str, Any], result: dict[str, Any]) -> str | None:
    """Equivalence shown is "no effect" of the components; otherwise nothing is shown."""
    return "no effect" if result.get("verdict") == "supported" else "not shown"


def estimate_text(v: dict[str, Any]) -> str:
    """The largest |difference|, where, and the margin."""
    return (
        f"max |diff| {pp(v.get('max_abs_diff'), signed=False)} "
        f"(at {v.get('group', '?')}); margin ±{pp(v.get('margin'), signed=False)}"
    )


STATISTIC = Statistic(
    name="equivalence",
    order=6,
    values=values,
    decide=decide,
    estimate_text=estimate_text,
    component_effect=component_effect,
)
