"""The report's cell formats (docs/archive-format.md §7) a statistic's estimate cell is built of.

Shared by :mod:`verify._archive.report` and the statistic kinds' ``estimate_text``.
"""

from __future__ import annotations

import json
import math
from typing import Any


def num(value: Any) -> float | None:
    """A finite number as a float, else None (a bool is not a number)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float) and math.isfinite(float(value)):
        return float(value)
    return None


def pct(value: Any, digits: int = 1) -> str:
    """A share as a percentage (``–`` when absent)."""
    v = num(value)
    return "–" if v is None else f"{v * 100:.{digits}f}%"


def pp(value: Any, *, signed: bool = True) -> str:
    """A difference of shares in percentage points."""
    v = num(value)
    if v is None:
        return "–"
    return f"{v * 100:+.1f} pp" if signed else f"{v * 100:.1f} pp"


def p_value(value: Any) -> str:
    """A p-value to four decimals, small ones in exponent form."""
    v = num(value)
    if v is None:
        return "–"
    if v == 0:
        return "< 1e-300"
    if v < 1e-4:
        return f"{v:.1e}"
    return f"{v:.4f}"


def fmt(value: Any) -> str:
    """Any recorded value as cell text."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list | tuple):
        return ", ".join(fmt(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def cell(value: Any) -> str:
    """A recorded value as cell text, a string as it is."""
    return value if isinstance(value, str) else fmt(value)


def obj(value: Any) -> dict[str, Any]:
    """``value`` if it is an object, else an empty one."""
    return value if isinstance(value, dict) else {}


def contrast(values: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    """(estimate, lower, upper) of a contrast's values, under either naming."""
    est = num(values.get("estimate", values.get("difference")))
    lower = num(values.get("lower", values.get("ci_lower")))
    upper = num(values.get("upper", values.get("ci_upper")))
    return est, lower, upper


def diagnoses(value: Any, *, signed: bool = True) -> str:
    """A difference in breadth (a ddx hypothesis): a signed number of diagnoses."""
    v = num(value)
    return "–" if v is None else f"{v:+.3g} diagnoses"


def contrast_text(v: dict[str, Any]) -> str:
    """The estimate cell of a contrast: estimate and interval (analysis.md §3 names)."""
    est, lower, upper = contrast(v)
    if est is None:
        return "–"
    conf = num(v.get("conf")) or 0.95
    # a ddx breadth difference is a number of diagnoses, not percentage points (analysis.md §9)
    scale = pp if v.get("outcome") != "breadth" else diagnoses
    lo = "−∞" if lower is None else scale(lower)
    hi = "+∞" if upper is None else scale(upper)
    both = v.get("ci_two_sided")
    extra = (
        f"; two-sided 95% CI {scale(both[0])} to {scale(both[1])}"
        if isinstance(both, list) and len(both) == 2
        else ""
    )
    return f"{scale(est)} ({conf * 100:.0f}% CI {lo} to {hi}{extra})"


def interval_text(v: dict[str, Any]) -> str:
    """The seed-002 table's interval cell: the level and the bounds."""
    lo, hi = num(v.get("lower")), num(v.get("upper"))
    return f"{pct(v.get('conf'), 0)} CI {fmt(lo)} to {fmt(hi)}"
