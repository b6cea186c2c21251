"""``equivalence``: the largest per-stimulus |a − b| against a margin (``docs/analysis.md`` §3)."""

from __future__ import annotations

from typing import Any

from analysis import _stats as stats
from analysis.statistics._base import Data, Statistic, contrast_of
from analysis.statistics._format import num, pp


def compute(data: Data, h: dict[str, Any]) -> dict[str, Any]:
    """The equivalence rule on the per-stimulus differences, margin ``margin_pp`` / 100."""
    a, b = contrast_of(h)
    return stats.equivalence(data.per_group_diff(a, b), h["margin_pp"] / 100).as_dict()


def decide(h: dict[str, Any], v: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Supported when the largest per-group |difference| is below the margin."""
    holds = bool(v["holds"])
    return ("supported" if holds else "not supported"), {
        "rule": "max per-group |difference| < margin",
        "max_abs_diff": v["max_abs_diff"],
        "group": v["group"],
        "margin": v["margin"],
    }


def estimate_text(v: dict[str, Any]) -> str:
    """The largest difference, where, and the margin."""
    return (
        f"max |diff| {pp(v.get('max_abs_diff'), signed=False)} "
        f"(at {v.get('group', '?')}); margin ±{pp(v.get('margin'), signed=False)}"
    )


def component_effect(h: dict[str, Any], result: dict[str, Any]) -> str | None:
    """A supported equivalence is evidence of no effect."""
    return "no effect" if result.get("verdict") == "supported" else "not shown"


def forest_span(v: dict[str, Any]) -> list[float]:
    """The margin both ways and the difference both ways (its label stays inside the axes)."""
    margin = num(v.get("margin"))
    if margin is None:
        return []
    xs = [margin * 100, -margin * 100]
    diff = num(v.get("max_abs_diff"))
    if diff is not None:
        xs += [diff * 100, -diff * 100]
    return xs


def forest_marks(ax: Any, y: float, v: dict[str, Any], colour: str) -> None:
    """The margin band and the largest |difference| against it."""
    margin = (num(v.get("margin")) or 0.0) * 100
    ax.fill_betweenx([y - 0.25, y + 0.25], -margin, margin, color="#1a7f37", alpha=0.12)
    for m in (-margin, margin):
        ax.plot([m, m], [y - 0.3, y + 0.3], color="#1a7f37", linestyle="--", lw=1)
    diff = (num(v.get("max_abs_diff")) or 0.0) * 100
    ax.plot([-diff, diff], [y, y], color=colour, lw=2)
    ax.plot([diff], [y], marker="D", color=colour, markersize=7)
    ax.text(diff, y + 0.28, "max |diff| vs ±margin", fontsize=7, ha="center")


STATISTIC = Statistic(
    key="equivalence",
    order=6,
    compute=compute,
    schema=("max_abs_diff", "group", "margin", "holds"),
    decide=decide,
    in_pp=True,
    estimate_text=estimate_text,
    component_effect=component_effect,
    forest_span=forest_span,
    forest_marks=forest_marks,
    plannable=True,
    claims_difference=False,
)
