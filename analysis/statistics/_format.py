"""How the report writes a statistic's numbers: the shared cell formatters.

One place for the report (:mod:`analysis._report`) and the statistic modules of this package,
which render their own cells (``docs/analysis.md`` §3): a missing or non-finite number is
``–``; shares are percentages, differences of shares percentage points.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["contrast", "count", "diagnoses", "fmt", "interval_cell", "num", "p", "pct", "pp"]


def num(value: Any) -> float | None:
    """``value`` as a finite float, else ``None`` (a bool is not a number here)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float) and math.isfinite(float(value)):
        return float(value)
    return None


def pct(value: Any, digits: int = 1) -> str:
    """A share as a percentage (``45.0%``)."""
    v = num(value)
    return "–" if v is None else f"{v * 100:.{digits}f}%"


def pp(value: Any, *, signed: bool = True) -> str:
    """A difference of shares in percentage points (``+45.0 pp``)."""
    v = num(value)
    if v is None:
        return "–"
    return f"{v * 100:+.1f} pp" if signed else f"{v * 100:.1f} pp"


def p(value: Any) -> str:
    """A p value: 4 decimals, ``1.2e-05`` below 1e-4, ``< 1e-300`` for 0."""
    v = num(value)
    if v is None:
        return "–"
    if v == 0:
        return "< 1e-300"
    if v < 1e-4:
        return f"{v:.1e}"
    return f"{v:.4f}"


def fmt(value: Any) -> str:
    """Any recorded value in words: 4 significant digits, ``yes``/``no``, lists joined."""
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


def count(values: dict[str, Any], name: str) -> Any:
    """McNemar's discordant count ``name`` (``b`` or ``c``).

    ``<name>_count`` when the result has it (a paired McNemar with variants, where ``b`` is
    the second condition), else ``<name>``.
    """
    return values[f"{name}_count"] if f"{name}_count" in values else values.get(name)


def contrast(values: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    """(estimate, lower, upper) of a difference result, whatever test produced it."""
    est = num(values.get("estimate", values.get("difference")))
    lower = num(values.get("lower", values.get("ci_lower")))
    upper = num(values.get("upper", values.get("ci_upper")))
    return est, lower, upper


def diagnoses(value: Any, *, signed: bool = True) -> str:
    """A difference in breadth (a ddx hypothesis): a signed number of diagnoses."""
    v = num(value)
    return "–" if v is None else f"{v:+.3g} diagnoses"


def interval_cell(values: dict[str, Any]) -> str:
    """The interval cell of a seed-002 row: ``95% CI lower to upper``."""
    lo, hi = num(values.get("lower")), num(values.get("upper"))
    return f"{pct(values.get('conf'), 0)} CI {fmt(lo)} to {fmt(hi)}"
