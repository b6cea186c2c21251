"""Differential-diagnosis scores re-derived from the docs alone (``docs/scoring.md`` §12).

Every ddx ``trial.scored`` is re-derived from the recorded step responses: each step call's
responses re-parsed by the locked parser and schema, its votes aggregated by the locked rule
(element by element for set-valued steps, ``docs/prompts.md`` §8.3), the item's reference sets
taken from the locked item file or the reference step's decision, and every metric recomputed
from its formula. ``descriptive.ddx`` (``docs/analysis.md`` §9) is recomputed from the dataset.
Independent of ``ledger``, ``runner`` and ``analysis``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import rfc8785

from verify._prompts import PromptError, Template
from verify._steps import Call, StepPlan, judge_record, norm, parse, text_of

__all__ = ["METRICS", "SETS", "ddx_descriptive", "ddx_metrics", "ddx_records"]

METRICS = (
    "plausibility",
    "h_coverage",
    "s_coverage",
    "breadth",
    "grounding_rate",
    "indirect_rate",
    "uncertainty",
)
SETS = ("plausible", "highly_likely", "safety_critical")
Events = Sequence[tuple[int, str, dict[str, Any], Callable[[str], bytes | None]]]


def _plan(name: str, rec: Any, read: Callable[[str], bytes | None]) -> StepPlan:
    """The parts of a locked step the scores need (its template is not rendered here)."""
    if not isinstance(rec, dict):
        raise PromptError(f"protocol.locked has no step {name!r}")
    rule = rec.get("aggregate")
    rule = rule.get("k") if isinstance(rule, dict) else rule
    if rule not in ("majority", "unanimous") and type(rule) is not int:
        raise PromptError(f"protocol.locked steps.{name}.aggregate: {rec.get('aggregate')!r}")
    schema = None
    if rec.get("parser") == "json":
        raw = read(str(rec.get("schema")))
        if raw is None:
            raise PromptError(f"steps.{name}.schema {rec.get('schema')!r} is not a locked file")
        schema = json.loads(raw)
    return StepPlan(
        name,
        str(rec.get("on")),
        tuple(m or None for m in rec.get("models") or []),
        Template(name, ()),
        None,
        str(rec.get("parser")),
        tuple(rec.get("labels") or ()),
        schema,
        int((rec.get("on_unparseable") or {}).get("retry", 0)),
        "exclude",
        rule,
        "blind",
        None,
    )


def _members(plan: StepPlan) -> set[str]:
    """The members of a set-valued json step (every property an array), else none."""
    return set(plan.sets)


def ddx_lock_problems(
    protocol: Mapping[str, Any],
    plans: Mapping[str, StepPlan],
    fields: Callable[[str], Mapping[str, Any]],
    item_ids: Sequence[str],
) -> list[str]:
    """§12's lock rules on ``protocol.locked``: what a lock of a ddx study refuses.

    Each role names a locked step of its kind and shape, each template reads what its role
    needs, supplied reference sets exist for every item, and each hypothesis's outcome is one
    the study can carry.
    """
    response = protocol.get("response") or {}
    config = response.get("ddx")
    out: list[str] = []
    hyps = [h for h in protocol.get("hypotheses") or [] if isinstance(h, dict)]
    if response.get("parser") != "ddx":
        if config is not None:
            out.append("response.ddx is locked, but the parser is not ddx")
        out += [
            f"hypothesis {h.get('id')}: outcome {h.get('outcome')!r} is a ddx metric of a "
            "study whose parser is not ddx"
            for h in hyps
            if h.get("outcome") in METRICS
        ]
        return out
    if not isinstance(config, dict):
        return ["response.ddx is missing"]
    out += _role_problems(config, plans)
    out += _read_problems(config, plans)
    if config.get("reference") == "items":
        out += _reference_problems(fields, item_ids)
    out += _outcome_problems(config, hyps)
    return out


def _role_problems(config: Mapping[str, Any], plans: Mapping[str, StepPlan]) -> list[str]:
    """Each ddx role names a locked step of its kind (item or trial) and array members."""
    out: list[str] = []
    wants = {
        "list": ("trial", {"diagnoses"}),
        "match": ("trial", set(SETS)),
        "grounding": ("trial", {"grounded", "indirect"}),
    }
    if config.get("reference") != "items":
        wants["reference"] = ("item", set(SETS))
    for role, (on, members) in wants.items():
        name = config.get(role)
        if name is None and role == "grounding":
            continue
        plan = plans.get(str(name))
        if plan is None or plan.on != on or not members <= _members(plan):
            out.append(
                f"response.ddx.{role} = {name!r} is not a locked {on} step with the "
                f"array members {sorted(members)}"
            )
    doubt = config.get("uncertainty")
    if doubt is not None:
        plan = plans.get(str(doubt))
        if (
            plan is None
            or plan.on != "trial"
            or plan.parser != "label"
            or not ({"uncertain", "certain"} <= set(plan.labels))
        ):
            out.append(
                f"response.ddx.uncertainty = {doubt!r} is not a locked trial step with "
                "the labels uncertain and certain"
            )
    return out


def _read_problems(config: Mapping[str, Any], plans: Mapping[str, StepPlan]) -> list[str]:
    """Each role's template reads what the role needs (the response, the list, the sets)."""
    out: list[str] = []
    listed = str(config.get("list"))
    reference = (
        [f"metadata.reference_{n}" for n in SETS]
        if config.get("reference") == "items"
        else [f"steps.{config.get('reference')}"]
    )
    reads = {
        "list": [["response"]],
        "uncertainty": [["response"]],
        "match": [[f"steps.{listed}"], reference],
        "grounding": [[f"steps.{listed}"]],
    }
    for role, groups in reads.items():
        plan = plans.get(str(config.get(role)))
        if plan is None:
            continue
        names = [slot.name for slot in plan.template.slots]
        for group in groups:
            if not any(n == g or n.startswith(g + ".") for n in names for g in group):
                out.append(
                    f"response.ddx.{role}: step {plan.name!r} "
                    f"({plan.template.name}) does not read {group[0]}"
                )
    return out


def _reference_problems(
    fields: Callable[[str], Mapping[str, Any]], item_ids: Sequence[str]
) -> list[str]:
    """Supplied reference sets: each item has every set as a list of strings."""
    out: list[str] = []
    for item in item_ids:
        meta = fields(item).get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        for name in SETS:
            value = meta.get(f"reference_{name}")
            if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
                out.append(f"item {item!r} has no supplied reference set metadata.reference_{name}")
                break
    return out


_NEEDS = {"grounding_rate": "grounding", "indirect_rate": "grounding", "uncertainty": "uncertainty"}
"""The ddx role an outcome needs beyond the list and the match."""


def _outcome_problems(config: Mapping[str, Any], hyps: list[dict[str, Any]]) -> list[str]:
    """Each hypothesis's outcome is a ddx metric whose role the study locked."""
    out: list[str] = []
    for h in hyps:
        outcome = h.get("outcome")
        need = _NEEDS.get(str(outcome))
        if outcome not in METRICS:
            out.append(f"hypothesis {h.get('id')}: a ddx study has no outcome {outcome!r}")
        elif need is not None and config.get(need) is None:
            out.append(f"hypothesis {h.get('id')}: {outcome!r} needs response.ddx.{need}")
    return out


def _unique(elements: Sequence[Any]) -> list[str]:
    out: list[str] = []
    for element in elements:
        key = norm(str(element))
        if key and key not in out:
            out.append(key)
    return out


def _rate(part: list[str], whole: list[str]) -> float | None:
    """``len(part) / len(whole)``; None for an empty whole."""
    return len(part) / len(whole) if whole else None


def _split(
    name: str,
    decision: Mapping[str, Any],
    pool: list[str],
    matched: dict[str, list[str]],
    ignored: dict[str, list[str]],
) -> None:
    """The distinct entries a decision gives under ``name``: those in ``pool`` and the others."""
    given = _unique(decision.get(name) or [])
    matched[name] = [x for x in given if x in pool]
    ignored[name] = [x for x in given if x not in pool]


def ddx_metrics(
    listed: list[str] | None,
    reference: Mapping[str, list[str]] | None,
    match: Mapping[str, Any] | None,
    grounding: Mapping[str, Any] | None,
    uncertainty: Any,
) -> tuple[dict[str, Any], dict[str, list[str]], dict[str, list[str]]]:
    """§12: the metrics, the matched entries and the ignored ones, from the decisions."""
    values: dict[str, Any] = dict.fromkeys(METRICS)
    matched: dict[str, list[str]] = {}
    ignored: dict[str, list[str]] = {}
    if listed is None:
        return values, matched, ignored
    L = _unique(listed)
    values["breadth"] = len(L)

    if match is not None and reference is not None:
        H, S = _unique(reference["highly_likely"]), _unique(reference["safety_critical"])
        for name, pool in (("plausible", L), ("highly_likely", H), ("safety_critical", S)):
            _split(name, match, pool, matched, ignored)
        values["plausibility"] = _rate(matched["plausible"], L)
        values["h_coverage"] = _rate(matched["highly_likely"], H)
        values["s_coverage"] = _rate(matched["safety_critical"], S)
    if grounding is not None:
        for name in ("grounded", "indirect"):
            _split(name, grounding, L, matched, ignored)
        values["grounding_rate"] = _rate(matched["grounded"], L)
        values["indirect_rate"] = _rate(matched["indirect"], L)
    if uncertainty in ("uncertain", "certain"):
        values["uncertainty"] = 1 if uncertainty == "uncertain" else 0
    return values, matched, ignored


def _outcome(
    call: Call,
    plan: StepPlan,
    seq: int,
    kind: str,
    body: Mapping[str, Any],
    blob: Callable[[str], bytes | None],
) -> None:
    """A step call's response (re-parsed) or failure; a final one settles the call."""
    if kind == "step.responded":
        call.responses += 1
        value = parse(plan, text_of(blob("response") or b"", str(body.get("format"))))
        if value is not None:
            call.value, call.status, call.final_seq = value, "parsed", seq
        elif call.responses >= plan.retry + 1:
            call.status, call.final_seq = "unparseable", seq
    elif body.get("final") is True:
        call.status, call.final_seq = "given-up", seq


def ddx_records(
    protocol: Mapping[str, Any],
    events: Events,
    read: Callable[[str], bytes | None],
    metadata: Mapping[str, Mapping[str, Any]],
) -> dict[str, dict[str, Any] | None]:
    """§12: each trial's re-derived ``trial.scored`` fields (None: a step call not final).

    ``metadata``: each item's ``metadata`` object from the locked item file. The fields are
    ``status``, ``n_items``, ``n_answered``, ``n_correct``, ``ddx`` and ``blob`` (the scores
    blob, RFC 8785 of ``ddx``).
    """
    config = (protocol.get("response") or {}).get("ddx")
    if not isinstance(config, dict):
        raise PromptError("protocol.locked response.ddx is missing")
    steps = protocol.get("steps") or {}
    roles = {
        r: str(config[r])
        for r in ("list", "match", "grounding", "uncertainty")
        if isinstance(config.get(r), str)
    }
    source = config.get("reference")
    names = set(roles.values()) | ({source} if source != "items" else set())
    plans = {n: _plan(n, steps.get(n), read) for n in sorted(str(x) for x in names)}
    calls, stimulus = _replay(events, plans)
    out: dict[str, dict[str, Any] | None] = {}
    for trial, item in stimulus.items():
        out[trial] = _trial(plans, roles, source, calls, trial, item, metadata.get(item) or {})
    return out


def _replay(
    events: Events, plans: Mapping[str, StepPlan]
) -> tuple[dict[str, Call], dict[str, str]]:
    """The calls of the ddx steps, settled by their outcomes, and each trial's item."""
    calls: dict[str, Call] = {}
    request_call: dict[int, str] = {}
    stimulus: dict[str, str] = {}
    for seq, kind, body, blob in events:
        if kind == "trial.requested":
            stimulus[str(body.get("trial"))] = str(body.get("stimulus"))
        elif kind == "step.requested" and body.get("step") in plans:
            call_id = str(body.get("call"))
            call = calls.setdefault(
                call_id, Call(call_id, str(body.get("step")), None, "", body.get("trial"))
            )
            call.attempts += 1
            call.last_request = seq
            request_call[seq] = call_id
        elif kind in ("step.responded", "step.failed"):
            found = calls.get(request_call.get(body.get("request_seq"), ""))  # type: ignore[arg-type]
            if found is not None and found.final_seq is None:
                _outcome(found, plans[found.step], seq, kind, body, blob)
    return calls, stimulus


def _reference(
    plans: Mapping[str, StepPlan],
    source: Any,
    calls: Mapping[str, Call],
    item: str,
    metadata: Mapping[str, Any],
) -> dict[str, list[str]] | None:
    if source == "items":
        found = {name: metadata.get(f"reference_{name}") for name in SETS}
        if not all(
            isinstance(v, list) and all(isinstance(x, str) for x in v) for v in found.values()
        ):
            return None
        return {k: list(v) for k, v in found.items()}  # type: ignore[arg-type]
    record = judge_record(plans[str(source)], calls, item)
    decided = record["decision"] if record is not None else None
    if not isinstance(decided, dict):
        return None
    return {name: list(decided.get(name) or []) for name in SETS}


def _trial(
    plans: Mapping[str, StepPlan],
    roles: Mapping[str, str],
    source: Any,
    calls: Mapping[str, Call],
    trial: str,
    item: str,
    metadata: Mapping[str, Any],
) -> dict[str, Any] | None:
    records: dict[str, Any] = {}
    for role, step in roles.items():
        record = judge_record(plans[step], calls, trial)
        if record is None:
            return None
        records[role] = record
    decided = {role: r["decision"] for role, r in records.items()}
    reference = _reference(plans, source, calls, item, metadata)
    listed = decided["list"]
    values, matched, ignored = ddx_metrics(
        list(listed.get("diagnoses") or []) if isinstance(listed, dict) else None,
        reference,
        decided["match"] if isinstance(decided["match"], dict) else None,
        decided.get("grounding") if isinstance(decided.get("grounding"), dict) else None,
        decided.get("uncertainty"),
    )
    record = {
        "reference_source": "items" if source == "items" else f"step:{source}",
        "reference": reference,
        "list": _unique(listed.get("diagnoses") or []) if isinstance(listed, dict) else None,
        "matched": matched,
        "ignored": ignored,
        "metrics": values,
        "steps": records,
    }
    blob = bytes(rfc8785.dumps(record))
    ok = reference is not None and listed is not None and decided["match"] is not None
    return {
        "status": "ok" if ok else "unparseable",
        "n_items": 0,
        "n_answered": 0,
        "n_correct": 0,
        "ddx": record,
        "blob": blob,
        "scores_sha256": hashlib.sha256(blob).hexdigest(),
    }


def differing(recorded: Any, derived: Mapping[str, Any]) -> str:
    """Which members of a recorded ``ddx`` differ from the re-derived one, named."""
    if not isinstance(recorded, dict):
        return "it has no ddx record"
    names = [k for k in sorted(set(recorded) | set(derived)) if recorded.get(k) != derived.get(k)]
    parts = []
    for name in names:
        if name == "reference":
            parts.append(
                f"the reference sets ({derived.get('reference_source')}) differ: "
                f"recorded {recorded.get(name)!r}, re-derived {derived.get(name)!r}"
            )
        elif name == "steps":
            steps = [
                r
                for r in set(recorded.get(name) or {}) | set(derived.get(name) or {})
                if (recorded.get(name) or {}).get(r) != (derived.get(name) or {}).get(r)
            ]
            parts.append(
                "the votes or decision of the "
                + ", ".join(sorted(steps))
                + " step(s) differ from those re-derived from their responses"
            )
        else:
            parts.append(
                f"{name}: recorded {recorded.get(name)!r}, re-derived {derived.get(name)!r}"
            )
    return "; ".join(parts)


def ddx_descriptive(trials: Sequence[Mapping[str, Any]], several_models: bool) -> dict[str, Any]:
    """analysis.md §9: each metric's mean per arm (and arm and model), n and undefined."""

    def cell(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
        kept = [r for r in rows if not r["excluded"]]
        out: dict[str, Any] = {"trials": len(kept), "excluded": len(rows) - len(kept)}
        for name in METRICS:
            got = [
                float(r[name])
                for r in kept
                if r[name] is not None and not math.isnan(float(r[name]))
            ]
            out[name] = {
                "mean": math.fsum(got) / len(got) if got else None,
                "n": len(got),
                "undefined": len(kept) - len(got),
            }
        return out

    arms = sorted({str(t["arm"]) for t in trials})
    values: dict[str, Any] = {
        "metrics": list(METRICS),
        "arms": {a: cell([t for t in trials if t["arm"] == a]) for a in arms},
    }
    if several_models:
        values["arm_model"] = {
            a: {
                m: cell([t for t in trials if t["arm"] == a and t["model"] == m])
                for m in sorted({str(t["model"]) for t in trials if t["arm"] == a})
            }
            for a in arms
        }
    return values
