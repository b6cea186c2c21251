"""Differential-diagnosis scores (``[response] parser = "ddx"``, ``docs/scoring.md`` §12).

A trial of a ddx study is scored from recorded step decisions alone: the list step's
``diagnoses`` (L), the item's reference sets (supplied in the item file or decided by the
reference item step), the match step's decision and, when declared, the grounding and
uncertainty steps' decisions. :func:`metrics` is the documented formula; :func:`score_trial`
builds the ``ddx`` member of ``trial.scored`` with every step's votes named by seq (blind: call
ids carry the arm, seqs do not). :func:`descriptive_values` is ``descriptive.ddx``
(``docs/analysis.md`` §9).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import rfc8785

from runner import DDX_METRICS, REFERENCE_SETS, DdxSpec, supplied_reference
from runner.steps import aggregate_record, normalise_element, trial_step_calls

__all__ = ["DDX_METRICS", "descriptive_values", "metrics", "normalised", "score_trial"]


def normalised(elements: Sequence[str]) -> list[str]:
    """The elements normalised (``docs/prompts.md`` §8.3), de-duplicated, empty ones dropped."""
    out: list[str] = []
    for element in elements:
        key = normalise_element(element)
        if key and key not in out:
            out.append(key)
    return out


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def metrics(
    listed: Sequence[str] | None,
    reference: Mapping[str, Sequence[str]] | None,
    match: Mapping[str, Sequence[str]] | None,
    grounding: Mapping[str, Sequence[str]] | None,
    uncertainty: str | None,
) -> tuple[dict[str, Any], dict[str, list[str]], dict[str, list[str]]]:
    """The per-trial metrics, the matched sets and the ignored match entries (scoring.md §12).

    ``listed``: the list decision's ``diagnoses`` (None: no decision); ``reference``: the
    item's three sets (None: none); ``match``, ``grounding``: those steps' decisions (None: no
    decision or no such step); ``uncertainty``: that step's decision. L, P, H, S are
    normalised and de-duplicated. A match entry is kept only when it is on L (``plausible``) or
    in H / S (``highly_likely`` / ``safety_critical``); a grounding entry only when on L; the
    others are returned as ignored. A metric whose denominator is empty, or whose inputs have
    no decision, is None (undefined), never 0.
    """
    out: dict[str, Any] = dict.fromkeys(DDX_METRICS)
    matched: dict[str, list[str]] = {}
    ignored: dict[str, list[str]] = {}
    if listed is None:
        return out, matched, ignored
    L = normalised(listed)
    out["breadth"] = len(L)
    if match is not None and reference is not None:
        pools = {
            "plausible": L,
            "highly_likely": normalised(reference["highly_likely"]),
            "safety_critical": normalised(reference["safety_critical"]),
        }
        for name in REFERENCE_SETS:
            given = normalised(match.get(name) or [])
            matched[name] = [x for x in given if x in pools[name]]
            ignored[name] = [x for x in given if x not in pools[name]]
        out["plausibility"] = _share(len(matched["plausible"]), len(L))
        out["h_coverage"] = _share(len(matched["highly_likely"]), len(pools["highly_likely"]))
        out["s_coverage"] = _share(len(matched["safety_critical"]), len(pools["safety_critical"]))
    if grounding is not None:
        for name in ("grounded", "indirect"):
            given = normalised(grounding.get(name) or [])
            matched[name] = [x for x in given if x in L]
            ignored[name] = [x for x in given if x not in L]
        out["grounding_rate"] = _share(len(matched["grounded"]), len(L))
        out["indirect_rate"] = _share(len(matched["indirect"]), len(L))
    if uncertainty in ("uncertain", "certain"):
        out["uncertainty"] = int(uncertainty == "uncertain")
    return out, matched, ignored


def _votes(work: Any, step: str, trial: str) -> tuple[dict[str, Any], Any] | None:
    """The record of ``step``'s votes on ``trial`` and its decision; None while a call is due."""
    from runner.steps import aggregate

    spec = work.study.steps[step]
    votes: list[dict[str, Any]] = []
    values: list[Any] = []
    for call in trial_step_calls(spec, trial, work.trial_stimulus.get(trial, "")):
        record = work.calls.get(call.id)
        if record is None or not record.final:
            if record is None and work.inputs(call) is None:
                values.append(None)  # an input has no decision: no call was made
                votes.append(
                    {
                        "model": call.model or "",
                        "vote": None,
                        "status": "no-input",
                        "request_seq": None,
                        "response_seq": None,
                        "responses": 0,
                    }
                )
                continue
            return None
        value = record.value if record.responded is not None else None
        values.append(value)
        votes.append(
            {
                "model": call.model or "",
                "vote": value,
                "status": "parsed"
                if record.responded is not None
                else "given-up"
                if record.given_up is not None
                else "unparseable",
                "request_seq": record.last_request,
                "response_seq": record.responded or record.exhausted or record.given_up,
                "responses": record.unparseable + (record.responded is not None),
            }
        )
    decision = aggregate(spec.aggregate, values, spec.sets)
    return {
        "step": step,
        "aggregate": aggregate_record(spec.aggregate),
        "decision": decision,
        "votes": votes,
    }, decision


def reference_sets(study: Any, work: Any, item: str) -> dict[str, list[str]] | None:
    """The item's reference sets (supplied or decided by the reference step), or None."""
    ddx: DdxSpec = study.ddx
    if ddx.reference_step is None:
        found = supplied_reference(study.load_items().by_id[item].metadata)
        return found if isinstance(found, dict) else None
    decided = work.decision(ddx.reference_step, item)
    if not isinstance(decided, dict):
        return None
    return {name: list(decided.get(name) or []) for name in REFERENCE_SETS}


def score_trial(study: Any, work: Any, trial: str, item: str) -> dict[str, Any] | None:
    """The ``trial.scored`` fields of a ddx trial (status, counts, ``ddx``, the blob).

    None while a step call it reads is still due.
    """
    ddx: DdxSpec = study.ddx
    records: dict[str, dict[str, Any]] = {}
    decisions: dict[str, Any] = {}
    roles = {
        "list": ddx.list_step,
        "match": ddx.match,
        "grounding": ddx.grounding,
        "uncertainty": ddx.uncertainty,
    }
    for role, step in roles.items():
        if step is None:
            continue
        found = _votes(work, step, trial)
        if found is None:
            return None
        records[role], decisions[role] = found
    reference = reference_sets(study, work, item)
    listed = decisions["list"]
    values, matched, ignored = metrics(
        listed.get("diagnoses") or [] if isinstance(listed, dict) else None,
        reference,
        decisions["match"] if isinstance(decisions["match"], dict) else None,
        decisions.get("grounding") if isinstance(decisions.get("grounding"), dict) else None,
        decisions.get("uncertainty") if isinstance(decisions.get("uncertainty"), str) else None,
    )
    problems = []
    if reference is None:
        problems.append(f"item {item!r} has no reference set")
    for role in ("list", "match"):
        if decisions[role] is None:
            problems.append(
                f"the {role} step {roles[role]!r} reached no decision under "
                f"{records[role]['aggregate']}"
            )
    for name, extra in ignored.items():
        if extra:
            problems.append(
                f"ignored {name} entries not on the list or the reference set: " + ", ".join(extra)
            )
    record = {
        "reference_source": "items" if ddx.reference_step is None else f"step:{ddx.reference_step}",
        "reference": reference,
        "list": normalised(listed.get("diagnoses") or []) if isinstance(listed, dict) else None,
        "matched": matched,
        "ignored": ignored,
        "metrics": values,
        "steps": records,
    }
    blob = bytes(rfc8785.dumps(record))
    ok = reference is not None and decisions["list"] is not None and decisions["match"] is not None
    return {
        "status": "ok" if ok else "unparseable",
        "n_items": 0,
        "n_answered": 0,
        "n_correct": 0,
        "scores_sha256": hashlib.sha256(blob).hexdigest(),
        "problems": [p[:300] for p in problems[:20]],
        "ddx": record,
        "blob": blob,
    }


def descriptive_values(trials: pd.DataFrame, by_model: bool) -> dict[str, Any]:
    """``descriptive.ddx`` (``docs/analysis.md`` §9): each metric's mean per arm (and model).

    The mean is over the trials where the metric is defined, ``n`` those trials and
    ``undefined`` the others; trials excluded as unparseable are counted apart (``excluded``).
    """

    def cell(frame: pd.DataFrame) -> dict[str, Any]:
        kept = frame[~frame["excluded"].astype(bool)]
        out: dict[str, Any] = {"trials": len(kept), "excluded": int(len(frame) - len(kept))}
        for name in DDX_METRICS:
            values = [
                float(v)
                for v in kept[name]
                if v is not None and not (isinstance(v, float) and math.isnan(v))
            ]
            out[name] = {
                "mean": math.fsum(values) / len(values) if values else None,
                "n": len(values),
                "undefined": len(kept) - len(values),
            }
        return out

    arms = sorted(str(a) for a in trials["arm"].unique())
    result: dict[str, Any] = {
        "metrics": list(DDX_METRICS),
        "arms": {a: cell(trials[trials["arm"] == a]) for a in arms},
    }
    if by_model:
        result["arm_model"] = {
            a: {
                str(m): cell(trials[(trials["arm"] == a) & (trials["model"] == m)])
                for m in sorted(str(x) for x in trials[trials["arm"] == a]["model"].unique())
            }
            for a in arms
        }
    return result
