"""A hypothesis result's cells in words: estimate, p and decision rule (``docs/reporting.md``).

The report's results table and the viewer's overview show the same three cells. They live
here, apart from :mod:`analysis._report`, so that ``ledger view`` can write them without
importing the report's figures (matplotlib), the analysis and the verifier; the verdict's
decision line (:func:`describe_decision`) and caution likewise, for the report and the archive
README without the statistics (scipy) the analysis loads.
"""

from __future__ import annotations

from typing import Any

from analysis.statistics import kind_of
from analysis.statistics._format import contrast as _contrast
from analysis.statistics._format import diagnoses as _diagnoses
from analysis.statistics._format import num as _num
from analysis.statistics._format import p as _p
from analysis.statistics._format import pp as _pp

__all__ = [
    "NOT_APPLICABLE",
    "describe_decision",
    "estimate_text",
    "not_applicable_text",
    "p_text",
    "rule_text",
    "verdict_caution",
]

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


_SHARE_KEYS = ("estimate", "lower", "upper", "max_abs_diff", "margin")
"""``decided_by`` members that are shares or differences of shares when the rule is in pp."""


def _decision_number(key: str, value: Any, in_pp: bool) -> str:
    """One ``decided_by`` number, written for :func:`describe_decision`.

    In pp beside a rule in pp, a p value as the report writes it, else 4 significant digits
    with float noise below 1e-12 written as 0.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if in_pp and key in _SHARE_KEYS:
        signed = key in ("estimate", "lower", "upper")
        return f"{value * 100:+.1f} pp" if signed else f"{value * 100:.1f} pp"
    if key == "p":
        return "< 1e-300" if value == 0 else f"{value:.1e}" if value < 1e-4 else f"{value:.4g}"
    cleaned = round(float(value), 12) + 0.0  # 6.939e-18 -> 0, and -0.0 -> 0
    return f"{cleaned:.4g}"


def describe_decision(result: dict[str, Any]) -> str:
    """How the verdict was reached, in one line: the rule and the numbers it read.

    The one formatter of ``decided_by``: the archive README's verdict table and ``ledger
    analyze`` both print it (never cut inside a number). The estimate and bounds of a
    difference of shares (the tests the report writes in pp, and beside any rule written in
    pp) are in pp (``+45.0 pp``), as are an equivalence margin and difference;
    a p value is written as the report writes it; other numbers take 4 significant digits,
    with float noise below 1e-12 written as 0 (not ``6.939e-18``).
    """
    if result.get("status") != "ok":
        return f"not decided: {result.get('error') or result.get('status')}"
    decided = result.get("decided_by") or {}
    rule = decided.get("rule")
    values = result.get("values") or {}
    kind = kind_of(result)
    in_pp = (" pp" in str(rule or "") or (kind is not None and kind.in_pp)) and (
        values.get("outcome") != "breadth"  # a number of diagnoses (docs/analysis.md §9)
    )
    shown = [(k, _decision_number(k, v, in_pp)) for k, v in sorted(decided.items()) if k != "rule"]
    numbers = ", ".join(f"{k} {n}" if n.startswith("<") else f"{k} = {n}" for k, n in shown)
    text = f"rule `{rule}`" if rule else "no rule recorded"
    return f"{text}; {numbers}" if numbers else text


def verdict_caution(result: dict[str, Any]) -> str | None:
    """The caution recorded on a verdict (an ``lmm`` one whose model fit is flagged), or ``None``.

    ``result`` is a hypothesis's ``analysis.result`` body; the analysis
    (:func:`analysis._analyze.hypothesis_results`) records
    :data:`analysis.statistics.lmm.MODEL_CAUTION` on every ``lmm`` hypothesis whose fit is
    singular or did not converge.
    """
    caution = (result.get("values") or {}).get("caution")
    return str(caution) if caution else None
