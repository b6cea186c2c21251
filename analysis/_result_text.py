"""A hypothesis result's cells in words: estimate, p and decision rule (``docs/reporting.md``).

The report's results table and the viewer's overview show the same three cells. They live
here, apart from :mod:`analysis._report`, so that ``ledger view`` can write them without
importing the report's figures (matplotlib), the analysis and the verifier.
"""

from __future__ import annotations

from typing import Any

from analysis.statistics import kind_of
from analysis.statistics._format import contrast as _contrast
from analysis.statistics._format import diagnoses as _diagnoses
from analysis.statistics._format import num as _num
from analysis.statistics._format import p as _p
from analysis.statistics._format import pp as _pp

__all__ = ["NOT_APPLICABLE", "estimate_text", "not_applicable_text", "p_text", "rule_text"]

NOT_APPLICABLE = "not applicable"
"""The status and the verdict of a test that does not apply to the data (``docs/analysis.md``
§3): its values hold the ``reason``; it has no error and, as a hypothesis, no decision."""


def not_applicable_text(result: dict[str, Any]) -> str:
    """The cell of a result that does not apply (``docs/analysis.md`` §3): the reason."""
    return f"not applicable: {(result.get('values') or {}).get('reason') or 'no reason given'}"


def estimate_text(result: dict[str, Any]) -> str:
    """Estimate and CI of a hypothesis result in words (percentage points of accuracy)."""
    if result.get("status") == "failed":
        return "not computed"
    if result.get("status") == NOT_APPLICABLE:
        return NOT_APPLICABLE
    v = result.get("values") or {}
    kind = kind_of(result)
    if kind is not None and kind.estimate_text is not None:
        return kind.estimate_text(v)
    est, lower, upper = _contrast(v)
    if est is None:
        return "–"
    conf = _num(v.get("conf")) or 0.95
    # a ddx breadth difference is a number of diagnoses, not percentage points (analysis.md §9)
    pp = _pp if v.get("outcome") != "breadth" else _diagnoses
    lo = "−∞" if lower is None else pp(lower)
    hi = "+∞" if upper is None else pp(upper)
    both = v.get("ci_two_sided")
    extra = (
        f"; two-sided 95% CI {pp(both[0])} to {pp(both[1])}"
        if isinstance(both, list) and len(both) == 2
        else ""
    )
    return f"{pp(est)} ({conf * 100:.0f}% CI {lo} to {hi}{extra})"


def p_text(result: dict[str, Any]) -> str:
    """The p cell of a result: raw p, and the adjusted p with its correction and family."""
    v = result.get("values") or {}
    if result.get("status") == "failed" or "p_raw" not in v:
        return "–"
    text = f"p = {_p(v.get('p_raw'))}"
    if "p_adjusted" in v:
        text += f"; {v.get('correction')}-adjusted {_p(v.get('p_adjusted'))}"
        if v.get("family"):
            text += f" (family {v['family']}, {v.get('family_size', '?')} tests)"
    return text


def rule_text(result: dict[str, Any]) -> str:
    """The decision rule of a result, or why it has none (not computed, not applicable)."""
    if result.get("status") == "failed":
        return f"not computed: {result.get('error') or 'unknown error'}"
    if result.get("status") == NOT_APPLICABLE:
        return not_applicable_text(result)
    decided = result.get("decided_by") or {}
    return str(decided.get("rule", "–"))
