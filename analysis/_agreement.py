"""Judge agreement: Cohen's kappa for two judges, Fleiss' kappa for more (exploratory).

``docs/analysis.md`` §6: a study scored by a judge step (``[response] parser =
"judge:<step>"``) gets one more exploratory result, ``exploratory.judge_agreement``: how
often the step's judges agree beyond chance, over the trials every judge gave a parsed vote.
The kappas come from :mod:`statsmodels.stats.inter_rater`; the verifier recomputes them with
its own formulas.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from statsmodels.stats.inter_rater import aggregate_raters, cohens_kappa, fleiss_kappa

from analysis._stats import NotApplicableError

__all__ = ["judge_agreement_values"]

UNANIMOUS = (
    "every vote is the same label, so chance agreement is 1 and kappa is 0/0 "
    "(docs/analysis.md section 8)"
)
"""Why ``kappa`` is null when every vote of every trial is one label."""


def judge_agreement_values(
    judged: Sequence[dict[str, Any]], labels: Sequence[str]
) -> dict[str, Any]:
    """The values of ``exploratory.judge_agreement`` from the ``judge`` records of the scores.

    ``judged``: each scored trial's ``judge`` member (in ``trial.scored`` order); ``labels``:
    the judge step's labels, in locked order (the categories). Trials where a judge has no
    parsed vote are left out and counted. Raises
    :class:`~analysis._stats.NotApplicableError` with fewer than two judges (agreement does not
    apply: the result is "not applicable" with that reason) and :class:`ValueError` with no
    trial every judge voted on.
    """
    if not judged:
        raise ValueError("no judged trial")
    raters = [v["model"] for v in judged[0]["votes"]]
    if len(raters) < 2:
        raise NotApplicableError(
            f"agreement between judges needs two or more judges; this "
            f"step has one ({', '.join(map(str, raters)) or 'none'})"
        )
    index = {label: i for i, label in enumerate(labels)}
    rows = [
        [index[v["vote"]] for v in j["votes"]]
        for j in judged
        if all(v["vote"] in index for v in j["votes"])
    ]
    if not rows:
        raise ValueError("no trial has a parsed vote from every judge")
    data = np.array(rows, dtype=int)
    observed = float(np.mean([len(set(r)) == 1 for r in rows]))
    if len({vote for r in rows for vote in r}) == 1:  # chance agreement 1: kappa is 0/0
        return {
            "judges": raters,
            "labels": list(labels),
            "method": "cohen" if len(raters) == 2 else "fleiss",
            "n_trials": len(rows),
            "incomplete": len(judged) - len(rows),
            "all_agree": observed,
            "kappa": None,
            "kappa_undefined": UNANIMOUS,
        }
    if len(raters) == 2:
        table = np.zeros((len(labels), len(labels)))
        for a, b in rows:
            table[a, b] += 1
        kappa = float(cohens_kappa(table, return_results=False))
        method = "cohen"
    else:
        counts, _ = aggregate_raters(data, n_cat=len(labels))
        kappa = float(fleiss_kappa(counts, method="fleiss"))
        method = "fleiss"
    return {
        "judges": raters,
        "labels": list(labels),
        "method": method,
        "n_trials": len(rows),
        "incomplete": len(judged) - len(rows),
        "all_agree": observed,
        "kappa": kappa,
    }
