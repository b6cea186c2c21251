"""The report's sample-size justification: the locked ``plan/plan.json`` as text and a table.

``docs/planning.md`` §8 gives every text and number format; the verifier's report check
re-derives them from the locked plan (``verify/_archive/report.py``).
"""

from __future__ import annotations

import json
from typing import Any, Final

__all__ = [
    "PLAN_CAPTION",
    "PLAN_HEADER",
    "PLAN_HEADING",
    "plan_intro",
    "plan_rows",
    "read_record",
]

PLAN_HEADING: Final = "Sample-size justification (ledger plan, locked before the run)"
PLAN_CAPTION: Final = (
    "Design diagnostics by simulation: share of simulated studies with a supported verdict "
    "(power where the scenario's contrast is an effect, type-I error where it is 0), share "
    "not computed, and how often each interval covers its truth"
)
PLAN_HEADER: Final = (
    "scenario",
    "replicates",
    "hypothesis",
    "truth",
    "P(supported)",
    "not computed",
    "coverage: registered",
    "two-sided",
    "sensitivity (per-arm residual)",
)


def _pct(entry: Any) -> str:
    share = entry.get("share") if isinstance(entry, dict) else None
    return "–" if not isinstance(share, int | float) else f"{share * 100:.1f}%"


def plan_intro(record: dict[str, Any], seq: int, sha256: str) -> str:
    """The paragraph above the table: what was simulated, from which seed, locked where."""
    s = record["settings"]
    names = ", ".join(str(sc["name"]) for sc in s["scenarios"])
    reps = ", ".join(str(r["replicates"]) for r in record["results"][:: len(s["scenarios"])])
    return (
        f"plan/plan.json locked at seq {seq} (SHA-256 {sha256[:16]}…): {s['studies']} "
        f"simulated studies per scenario ({names}) and replicate setting ({reps}), seed "
        f"{s['seed']}, each analysed with the registered analysis; power target "
        f"{float(s['power_target']) * 100:.0f}% for the primary hypotheses "
        f"({', '.join(s['primary']) or 'none'})."
    )


def plan_rows(record: dict[str, Any]) -> list[list[str]]:
    """One row per setting, scenario and hypothesis, in recorded order."""
    rows = []
    for res in record["results"]:
        for h in res["hypotheses"]:
            role = {"power": " power", "type-I error": " type I"}.get(h["role"], "")
            sens = (h.get("sensitivity") or {}).get("probe_by_arm_arm_residual")
            rows.append(
                [
                    str(res["scenario"]),
                    str(res["replicates"]),
                    str(h["hypothesis"]) + (" (primary)" if h["primary"] else ""),
                    f"{h['truth'] * 100:+.1f} pp",
                    _pct(h["supported"]) + role,
                    _pct(h["not_computed"]),
                    _pct(h["coverage"].get("registered")),
                    _pct(h["coverage"].get("two_sided")),
                    _pct(sens),
                ]
            )
    return rows


def read_record(data: bytes) -> dict[str, Any] | None:
    """The plan record, or None when the bytes are not a version-1 record."""
    try:
        record = json.loads(data)
    except ValueError:
        return None
    return record if isinstance(record, dict) and record.get("version") == 1 else None
