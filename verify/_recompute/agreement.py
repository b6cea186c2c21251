"""``exploratory.judge_agreement`` (analysis.md §8): how far a panel of judges agrees.

Part of the science checks (:mod:`verify._science`); imports nothing from ``ledger``,
``runner`` or ``analysis``.
"""

from __future__ import annotations

import math
from typing import Any

from verify import _restats as st
from verify._recompute.archive import _Archive
from verify._recompute.results import _guard, _Result

UNDEFINED = (
    "every vote is the same label, so chance agreement is 1 and "
    "kappa is 0/0 (docs/analysis.md section 8)"
)


def _cohen(rows: list[list[Any]], labels: list[str]) -> float:
    """(p_o - p_e) / (1 - p_e), p_e the sum over labels of the two judges' shares' product."""
    n = len(rows)
    p_o = math.fsum(a == b for a, b in rows) / n
    p_e = math.fsum(
        (sum(r[0] == c for r in rows) / n) * (sum(r[1] == c for r in rows) / n) for c in labels
    )
    return (p_o - p_e) / (1 - p_e)


def _fleiss(rows: list[list[Any]], labels: list[str], m: int) -> float:
    """(P - P_e) / (1 - P_e): P the mean per-trial agreement, P_e the squared overall shares."""
    n = len(rows)
    counts = [[r.count(c) for c in labels] for r in rows]
    big_p = math.fsum((math.fsum(x * x for x in row) - m) / (m * (m - 1)) for row in counts) / n
    shares = [math.fsum(row[j] for row in counts) / (n * m) for j in range(len(labels))]
    p_e = math.fsum(s * s for s in shares)
    return (big_p - p_e) / (1 - p_e)


def _agreement(judged: list[dict[str, Any]], labels: list[str]) -> dict[str, Any]:
    if not judged:
        raise ValueError("no judged trial")
    raters = [v["model"] for v in judged[0]["votes"]]
    if len(raters) < 2:  # analysis.md §8: agreement does not apply to one judge
        raise st.NotApplicable("one judge")
    rows = [
        [v["vote"] for v in j["votes"]]
        for j in judged
        if all(v["vote"] in labels for v in j["votes"])
    ]
    if not rows:
        raise ValueError("no complete trial")
    n, m = len(rows), len(raters)
    out: dict[str, Any] = {
        "judges": raters,
        "labels": labels,
        "method": "cohen" if m == 2 else "fleiss",
        "n_trials": n,
        "incomplete": len(judged) - n,
        "all_agree": math.fsum(len(set(r)) == 1 for r in rows) / n,
    }
    if len({vote for r in rows for vote in r}) == 1:  # analysis.md §8: p_e = 1, kappa 0/0
        return out | {"kappa": None, "kappa_undefined": UNDEFINED}
    return out | {"kappa": _cohen(rows, labels) if m == 2 else _fleiss(rows, labels, m)}


def _judge_agreement(archive: _Archive, plan: dict[str, Any], step: str) -> _Result:
    """analysis.md §8: Cohen's kappa (two judges) or Fleiss' kappa (more), by their formulas.

    Over the trials every judge gave a parsed vote, the categories being the step's labels.
    Cohen: (p_o - p_e) / (1 - p_e) with p_e the sum over labels of the product of the two
    judges' label shares. Fleiss: (P - P_e) / (1 - P_e), P the mean over trials of
    (sum_j n_ij^2 - n) / (n (n - 1)), P_e the sum over labels of the squared overall share.
    """
    spec = (plan.get("steps") or {}).get(step) or {}
    labels = [str(x) for x in spec.get("labels") or []]
    judged = [
        e.body["judge"] for e in archive.of("trial.scored") if isinstance(e.body.get("judge"), dict)
    ]
    return _guard(_Result("exploratory.judge_agreement"), lambda: _agreement(judged, labels))
