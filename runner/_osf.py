"""The OSF preregistration written and locked by ``ledger lock`` (``docs/reporting.md`` §3).

``osf-preregistration.md`` answers the fields of the OSF Preregistration template (Bowman et
al. 2016, https://doi.org/10.31222/osf.io/epgjd) from the protocol as locked: each answer the
locked study can give is filled mechanically from the ``protocol.locked`` body (read back as
the ledger stores it, RFC 8785 JSON) and, when one is locked, ``plan/plan.json``, and names the
file and field it comes from; the fields only a person can answer are listed for the authors.
The file is a function of those inputs alone (no time, no path, no secret: the blinding
secret's SHA-256 only, never an arm code), so the same study writes the same bytes. The lock
locks it as an artifact (role ``registration``), so it is part of what is registered; the
verifier re-derives it from the docs (``verify/_archive/osf.py``).
"""

from __future__ import annotations

import json
import math
from typing import Any

import rfc8785

__all__ = ["OSF_FILE", "OSF_ROLE", "PERSON", "osf_preregistration"]

OSF_FILE = "osf-preregistration.md"
"""The study-relative path of the preregistration (the archive's ``protocol/<this>``)."""
OSF_ROLE = "registration"
"""The ``artifact.locked`` role of :data:`OSF_FILE`."""
PERSON = "**to be completed by the authors**"

_HEADER = (
    "Study {study}. Written by `ledger lock` from the locked protocol and locked with it (an "
    "artifact.locked event of role registration; its SHA-256 is in the manifest of "
    "protocol.locked), following the fields of the OSF Preregistration template (Bowman et al. "
    "2016, https://doi.org/10.31222/osf.io/epgjd). Each answer names the locked file and field "
    "it comes from; a field marked {person} is for a person to answer when submitting the "
    "registration. Field names are the template's; its guidance texts are not copied."
)


def _js(value: Any) -> str:
    """A locked value as text: a string as is, anything else as JSON (sorted keys)."""
    text = (
        value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    )
    return " ".join(text.splitlines())


def _pct(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "–"
    return f"{100 * value:.1f}%"


def _share(entry: Any) -> str:
    return _pct(entry.get("share")) if isinstance(entry, dict) else "–"


def _sample(p: dict[str, Any]) -> str:
    items = p.get("items")
    if isinstance(items, dict) and "stimuli" not in p:
        return f"{items.get('count')} items ({items.get('path')})"
    return f"{len(p.get('stimuli') or [])} stimuli"


def _models(p: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    models = p.get("models")
    if isinstance(models, dict):
        order = p.get("model_order") or sorted(models)
        return [(str(name), dict(models.get(name) or {})) for name in order]
    one = dict(p.get("model") or {})
    return [(str(one.get("id")), one)]


def _model_text(name: str, m: dict[str, Any], named: bool) -> str:
    params = ", ".join(f"{k} {_js(m[k])}" for k in sorted(m) if k not in ("id", "provider"))
    head = f"{name} = {m.get('id')}" if named else str(m.get("id"))
    return f"{head} (provider {m.get('provider')}; {params or 'no parameters'})"


def _models_text(p: dict[str, Any]) -> str:
    named = isinstance(p.get("models"), dict)
    return "; ".join(_model_text(n, m, named) for n, m in _models(p))


def _outcomes(p: dict[str, Any]) -> str:
    found = {str(h.get("outcome")) for h in p.get("hypotheses") or [] if h.get("outcome")}
    return ", ".join(sorted(found)) or "none"


def _hypothesis_lines(p: dict[str, Any]) -> list[str]:
    lines = []
    for h in p.get("hypotheses") or []:
        rest = "; ".join(
            f"{k} {_js(h[k])}"
            for k in sorted(h)
            if k not in ("id", "description") and h[k] is not None
        )
        lines.append(f"- {h.get('id')}: {_js(h.get('description') or '')} ({rest})")
    return lines or ["No registered hypothesis."]


_INFERENCE_KEYS = ("sides", "alpha", "correction", "family", "min_difference_pp", "margin_pp")


def _inference_lines(p: dict[str, Any]) -> list[str]:
    lines = []
    for h in p.get("hypotheses") or []:
        parts = ", ".join(f"{k} {_js(h[k])}" for k in _INFERENCE_KEYS if h.get(k) is not None)
        lines.append(
            f"- {h.get('id')} ({h.get('test')}): {parts or 'no registered criterion'}; the verdict "
            "is the registered decision rule of its test (docs/analysis.md of PROMPT Ledger)."
        )
    return lines or ["No registered hypothesis."]


def _plan_lines(plan: dict[str, Any]) -> list[str]:
    settings = plan.get("settings") or {}
    results = plan.get("results") or []
    names = ", ".join(str(s.get("name")) for s in settings.get("scenarios") or [])
    reps: list[str] = []
    for r in results:
        if str(r.get("replicates")) not in reps:
            reps.append(str(r.get("replicates")))
    target = settings.get("power_target")
    shown = f"{100 * target:.0f}%" if isinstance(target, (int, float)) else "–"
    primary = ", ".join(str(x) for x in settings.get("primary") or []) or "none"
    lines = [
        "Design diagnostics by simulation (ledger plan; docs/planning.md of PROMPT Ledger), "
        f"locked as plan/plan.json: {settings.get('studies')} simulated studies per scenario "
        f"({names}) and replicate setting ({', '.join(reps)}), seed {settings.get('seed')}; "
        f"power target {shown} for the primary hypotheses ({primary})."
    ]
    for r in results:
        for h in r.get("hypotheses") or []:
            tag = ", primary" if h.get("primary") else ""
            cover = (h.get("coverage") or {}).get("registered")
            lines.append(
                f"- {r.get('scenario')}, {r.get('replicates')} replicates, {h.get('hypothesis')} "
                f"({h.get('test')}{tag}): P(supported) {_share(h.get('supported'))} "
                f"({h.get('role')}), not computed {_share(h.get('not_computed'))}, registered "
                f"interval coverage {_share(cover)}"
            )
    return lines


def _fields(p: dict[str, Any], plan: dict[str, Any] | None) -> list[tuple[str, str, Any, str]]:
    """(section, field, answer lines or None for a person, source) in template order."""
    arms = p.get("arms") or {}
    design = p.get("design") or {}
    reps = design.get("replicates")
    trials = p.get("trials")
    response = p.get("response") or {}
    parser, fmt = response.get("parser"), response.get("format")
    arm_list = ", ".join(f"{a} ({(arms[a] or {}).get('role')})" for a in sorted(arms))
    commitment = p.get("blinding_commitment")
    models = p.get("models")
    n_models = len(models) if isinstance(models, dict) else 1
    design_lines = []
    for a in sorted(arms):
        record = arms[a] or {}
        parts = " + ".join(str(c) for c in record.get("components") or []) or "no components"
        design_lines.append(
            f"- Arm {a} (role {record.get('role')}): {parts}; arm hash {record.get('sha256')}"
        )
    design_lines.append(f"- Model(s): {_models_text(p)}")
    items = p.get("items")
    if isinstance(items, dict) and "stimuli" not in p:
        design_lines.append(
            f"- Items: {items.get('count')} in {items.get('path')} (format {items.get('format')}, "
            f"SHA-256 {items.get('sha256')})"
        )
    else:
        design_lines.append(f"- Stimuli: {', '.join(str(s) for s in p.get('stimuli') or [])}")
    design_lines.append(f"- Replicates: {reps} per arm and stimulus or item; {trials} trials")
    for key, label in (("factors", "Factors"), ("steps", "Steps")):
        if isinstance(p.get(key), dict) and p[key]:
            design_lines.append(f"- {label}: {', '.join(sorted(p[key]))}")
    if p.get("variant_order"):
        design_lines.append(f"- Variants: {', '.join(str(v) for v in p['variant_order'])}")
    manipulated = f"The prompt arm, {len(arms)} levels: {arm_list}"
    if isinstance(models, dict):
        manipulated += f"; the model, {n_models} levels: {', '.join(n for n, _ in _models(p))}"
    if isinstance(p.get("factors"), dict) and p["factors"]:
        manipulated += f"; factors: {', '.join(sorted(p['factors']))}"
    if p.get("variant_order"):
        manipulated += f"; the item variant, {len(p['variant_order'])} levels"
    analysis = p.get("analysis") or {}
    settings = ", ".join(f"{k} {_js(analysis[k])}" for k in sorted(analysis)) or "none"
    tests = ", ".join(f"{h.get('id')} {h.get('test')}" for h in p.get("hypotheses") or [])
    exclude = analysis.get("exclude_unparseable", True)
    deviations = p.get("deviations") or []
    other = [f"Deviations declared before the run: {len(deviations)}."]
    for d in deviations:
        rest = "; ".join(f"{k} {_js(d[k])}" for k in sorted(d) if k != "id")
        other.append(f"- {d.get('id')}: {rest}")
    patterns = ", ".join(str(x) for x in p.get("amendable") or []) or "none"
    other.append(
        f"Files that may change after lock, only by a recorded protocol.amended: {patterns}."
    )
    schedule = p.get("schedule_sha256")
    sample = _sample(p)
    return [
        (
            "Study information",
            "Title",
            [_js(p.get("title") or p.get("study"))],
            "study.toml [study] title (protocol.locked title)",
        ),
        ("Study information", "Authors", None, ""),
        (
            "Study information",
            "Description",
            [
                f"A randomized prompt experiment: {len(arms)} prompt arms ({arm_list}) sent to "
                f"{_models_text(p)}, with {sample} and {reps} replicate(s) per arm and stimulus or "
                f"item: {trials} trials."
            ],
            "study.toml [arms.*], [model] or [models], [stimuli] or [items], [design] "
            "(protocol.locked arms, model or models, stimuli or items, design.replicates, trials)",
        ),
        (
            "Study information",
            "Hypotheses",
            _hypothesis_lines(p),
            "study.toml [[hypotheses]] (protocol.locked hypotheses)",
        ),
        (
            "Design plan",
            "Study type",
            [
                "Experiment: a randomized experiment on a language model; each trial is one "
                "stateless request of one arm's prompt for one stimulus or item, with no "
                "conversation history."
            ],
            "protocol.locked design, arms",
        ),
        (
            "Design plan",
            "Blinding",
            [
                "The model receives one arm's prompt per request and no other arm's. Responses "
                "are scored blind: the scorer sees arm codes only (HMAC-SHA256 of the arm under a "
                "secret), the scores are sealed, and only then is the secret revealed. The "
                f"secret's SHA-256 is committed here: {commitment}. No arm code is in this "
                "document."
            ],
            "protocol.locked blinding_commitment (the secret itself is never locked)",
        ),
        (
            "Design plan",
            "Study design",
            design_lines,
            "study.toml [arms.*], [components], [model] or [models], [stimuli] or [items], "
            "[design] (protocol.locked arms, model or models, stimuli or items, factors, steps, "
            "variant_order, design.replicates, trials)",
        ),
        (
            "Design plan",
            "Randomization",
            [
                f"The {trials} trials run in the order {design.get('order')} with seed "
                f"{design.get('seed')}, fixed at lock: schedule SHA-256 {schedule}. Bootstrap seed "
                f"{design.get('bootstrap_seed') or 'none'}, "
                f"{design.get('bootstrap_iterations')} iterations."
            ],
            "study.toml [design] seed, bootstrap_seed, bootstrap_iterations (protocol.locked "
            "design, schedule_sha256, trials)",
        ),
        (
            "Sampling plan",
            "Existing data",
            [
                "Registration prior to creation of data: no model response exists at lock; the "
                "ledger refuses a trial request before this protocol is locked, and the verifier "
                f"checks that the lock precedes the first request. The {sample} are existing "
                "materials, locked and hashed with the protocol."
            ],
            "protocol.locked (its seq precedes every trial.requested), stimuli or items",
        ),
        ("Sampling plan", "Explanation of existing data", None, ""),
        (
            "Sampling plan",
            "Data collection procedures",
            [
                f"Each trial is one request to the locked model(s), {_models_text(p)}, sent by "
                "PROMPT Ledger's runner; every request and response is recorded byte for byte in "
                f"the signed ledger. Responses are parsed by {parser} (format {fmt})."
            ],
            "study.toml [model] or [models], [response] (protocol.locked model or models, "
            "response)",
        ),
        (
            "Sampling plan",
            "Sample size",
            [f"{trials} trials: {len(arms)} arms, {sample}, {reps} replicate(s), as locked."],
            "protocol.locked trials, arms, stimuli or items, design.replicates",
        ),
        (
            "Sampling plan",
            "Sample size rationale",
            None if plan is None else _plan_lines(plan),
            "plan/plan.json settings and results (locked with role plan)",
        ),
        (
            "Sampling plan",
            "Stopping rule",
            [
                f"No data-dependent stopping: the {trials} trials are fixed at lock (schedule "
                f"SHA-256 {schedule}); each is run until it has a final outcome (a response, a "
                "final failure after the runner's retries, or a recorded exclusion), and no "
                "interim analysis is registered."
            ],
            "protocol.locked trials, schedule_sha256",
        ),
        (
            "Variables",
            "Manipulated variables",
            [manipulated + "."],
            "study.toml [arms.*] (protocol.locked arms, models, factors, variant_order)",
        ),
        (
            "Variables",
            "Measured variables",
            [
                f"The model's response to each trial, parsed by {parser} (format {fmt}) and "
                "scored against the locked reference; the outcomes the hypotheses name: "
                f"{_outcomes(p)}."
            ],
            "study.toml [response], [[hypotheses]] outcome (protocol.locked response, hypotheses)",
        ),
        (
            "Variables",
            "Indices",
            [
                f"Each outcome ({_outcomes(p)}) is computed per trial by the scorer for parser "
                f"{parser}, as docs/scoring.md of PROMPT Ledger defines it."
            ],
            "protocol.locked response.parser, hypotheses",
        ),
        (
            "Analysis plan",
            "Statistical models",
            [f"Analysis settings as locked: {settings}. Registered tests: {tests or 'none'}."],
            "study.toml [analysis], [[hypotheses]] test (protocol.locked analysis, hypotheses)",
        ),
        ("Analysis plan", "Transformations", None, ""),
        (
            "Analysis plan",
            "Inference criteria",
            _inference_lines(p),
            "study.toml [[hypotheses]] (protocol.locked hypotheses)",
        ),
        (
            "Analysis plan",
            "Data exclusion",
            [
                "Unparseable responses are "
                f"{'excluded from the registered analysis' if exclude else 'kept and scored 0'} "
                f"(analysis.exclude_unparseable = {_js(exclude)})."
            ],
            "study.toml [analysis] exclude_unparseable (protocol.locked analysis)",
        ),
        (
            "Analysis plan",
            "Missing data",
            [
                "A trial without a response after the runner's retries has no outcome; it is not "
                "imputed, and it is counted in the trial flow (docs/reporting.md §1 of PROMPT "
                "Ledger)."
            ],
            "fixed by PROMPT Ledger (docs/reporting.md §1)",
        ),
        (
            "Analysis plan",
            "Exploratory analysis",
            [
                "Every result other than the registered hypotheses (descriptive, exploratory, "
                "sensitivity and post hoc analyses) is reported as not registered and never "
                "changes a verdict."
            ],
            "fixed by PROMPT Ledger (docs/analysis.md)",
        ),
        (
            "Other",
            "Other",
            other,
            "study.toml [[deviations]], [study] amendable (protocol.locked deviations, amendable)",
        ),
    ]


def osf_preregistration(body: dict[str, Any], plan_text: str | None = None) -> bytes:
    """The bytes of ``osf-preregistration.md`` for the ``protocol.locked`` ``body``.

    ``body`` is read as the ledger stores it (RFC 8785 JSON, so ``1.0`` reads ``1``); its
    ``manifest`` and ``environment`` are not used. ``plan_text`` is the locked
    ``plan/plan.json``, when there is one. Raises :class:`ValueError` naming the plan file
    when it is not JSON (the lock has already refused such a plan).
    """
    p = json.loads(rfc8785.dumps(body))
    plan = None
    if plan_text is not None:
        try:
            plan = json.loads(plan_text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"plan/plan.json: not JSON ({exc})") from None
    fields = _fields(p, plan if isinstance(plan, dict) else None)
    title = _js(p.get("title") or p.get("study"))
    lines = [
        f"# OSF Preregistration: {title}",
        "",
        _HEADER.format(study=_js(p.get("study")), person=PERSON),
    ]
    section = None
    for sec, field, answer, source in fields:
        if sec != section:
            lines += ["", f"## {sec}"]
            section = sec
        lines += ["", f"### {field}", ""]
        if answer is None:
            lines.append(PERSON)
        else:
            lines += answer
            lines += ["", f"Source: {source}."]
    person = [field for _, field, answer, _ in fields if answer is None]
    lines += ["", f"Fields for the authors to complete: {', '.join(person)}.", ""]
    return "\n".join(lines).encode("utf-8")
