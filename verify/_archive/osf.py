"""The ``registration`` check: the OSF preregistration locked at lock (reporting §3).

Written from ``docs/reporting.md`` §3 of the tool, never from the writer: the expected
``osf-preregistration.md`` is rebuilt here from the first ``protocol.locked`` body and the
``plan/plan.json`` locked before it, and compared line by line with the locked bytes (the
``artifact.locked`` blob, role ``registration``) and with the archive's copy
``protocol/osf-preregistration.md``. The first differing line is named with its field.
"""

from __future__ import annotations

import json
import math
from typing import Any

from verify._archive.view import Archive
from verify._ledgerfile import _State
from verify._report import Check

__all__ = ["OSF_PATH", "check_registration", "expected_registration"]

OSF_PATH = "osf-preregistration.md"
_ARCHIVE_COPY = f"protocol/{OSF_PATH}"
_ROLE = "registration"
_PERSON = "**to be completed by the authors**"
_TOOL = "of PROMPT Ledger"


def _text(value: Any) -> str:
    """``js(v)`` of §3.1: a string as is, else sorted-key JSON; line breaks become spaces."""
    if not isinstance(value, str):
        value = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return " ".join(value.splitlines())


def _percent(entry: Any) -> str:
    """``share(e)`` of §3.1."""
    x = entry.get("share") if isinstance(entry, dict) else None
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
        return f"{100 * x:.1f}%"
    return "–"


class _Protocol:
    """The notation of §3.1 over the body ``P`` of the first ``protocol.locked``."""

    def __init__(self, p: dict[str, Any]) -> None:
        self.p = p
        arms = p.get("arms")
        self.arms: dict[str, dict[str, Any]] = {
            k: (v if isinstance(v, dict) else {})
            for k, v in sorted((arms if isinstance(arms, dict) else {}).items())
        }
        self.arm_list = ", ".join(f"{k} ({v.get('role')})" for k, v in self.arms.items())
        design = p.get("design")
        self.design: dict[str, Any] = design if isinstance(design, dict) else {}
        self.r = self.design.get("replicates")
        self.n = p.get("trials")
        self.s = p.get("schedule_sha256")
        response = p.get("response")
        response = response if isinstance(response, dict) else {}
        self.parser, self.format = response.get("parser"), response.get("format")
        hyps = p.get("hypotheses")
        self.hyps: list[dict[str, Any]] = [
            h for h in (hyps if isinstance(hyps, list) else []) if isinstance(h, dict)
        ]
        outs = sorted({str(h["outcome"]) for h in self.hyps if h.get("outcome")})
        self.outcomes = ", ".join(outs) or "none"
        self.item_study = isinstance(p.get("items"), dict) and "stimuli" not in p
        if self.item_study:
            self.sample = f"{p['items'].get('count')} items ({p['items'].get('path')})"
        else:
            self.sample = f"{len(p.get('stimuli') or [])} stimuli"
        self.many = isinstance(p.get("models"), dict)
        self.models = "; ".join(self._model(name, m) for name, m in self._model_list())

    def _model_list(self) -> list[tuple[str, dict[str, Any]]]:
        if self.many:
            table = self.p["models"]
            names = self.p.get("model_order") or sorted(table)
            return [(str(n), dict(table.get(n) or {})) for n in names]
        single = self.p.get("model")
        single = dict(single) if isinstance(single, dict) else {}
        return [(str(single.get("id")), single)]

    def _model(self, name: str, m: dict[str, Any]) -> str:
        keys = sorted(k for k in m if k not in ("id", "provider"))
        params = ", ".join(f"{k} {_text(m[k])}" for k in keys) or "no parameters"
        prefix = f"{name} = " if self.many else ""
        return f"{prefix}{m.get('id')} (provider {m.get('provider')}; {params})"

    def nonempty(self, key: str) -> dict[str, Any]:
        value = self.p.get(key)
        return value if isinstance(value, dict) and value else {}


def _hypotheses(pr: _Protocol) -> list[str]:
    out = []
    for h in pr.hyps:
        members = "; ".join(
            f"{k} {_text(h[k])}"
            for k in sorted(h)
            if k not in ("id", "description") and h[k] is not None
        )
        out.append(f"- {h.get('id')}: {_text(h.get('description') or '')} ({members})")
    return out or ["No registered hypothesis."]


def _criteria(pr: _Protocol) -> list[str]:
    keys = ("sides", "alpha", "correction", "family", "min_difference_pp", "margin_pp")
    out = []
    for h in pr.hyps:
        said = ", ".join(f"{k} {_text(h[k])}" for k in keys if h.get(k) is not None)
        out.append(
            f"- {h.get('id')} ({h.get('test')}): {said or 'no registered criterion'}; the "
            f"verdict is the registered decision rule of its test (docs/analysis.md {_TOOL})."
        )
    return out or ["No registered hypothesis."]


def _design(pr: _Protocol) -> list[str]:
    p = pr.p
    out = [
        f"- Arm {k} (role {v.get('role')}): "
        + (" + ".join(str(c) for c in v.get("components") or []) or "no components")
        + f"; arm hash {v.get('sha256')}"
        for k, v in pr.arms.items()
    ]
    out.append(f"- Model(s): {pr.models}")
    if pr.item_study:
        it = p["items"]
        out.append(
            f"- Items: {it.get('count')} in {it.get('path')} (format {it.get('format')}, "
            f"SHA-256 {it.get('sha256')})"
        )
    else:
        out.append("- Stimuli: " + ", ".join(str(x) for x in p.get("stimuli") or []))
    out.append(f"- Replicates: {pr.r} per arm and stimulus or item; {pr.n} trials")
    if pr.nonempty("factors"):
        out.append("- Factors: " + ", ".join(sorted(pr.nonempty("factors"))))
    if pr.nonempty("steps"):
        out.append("- Steps: " + ", ".join(sorted(pr.nonempty("steps"))))
    if p.get("variant_order"):
        out.append("- Variants: " + ", ".join(str(v) for v in p["variant_order"]))
    return out


def _rationale(plan: dict[str, Any] | None) -> list[str] | None:
    if plan is None:
        return None
    st = plan.get("settings") if isinstance(plan.get("settings"), dict) else {}
    results = [r for r in plan.get("results") or [] if isinstance(r, dict)]
    settings: dict[str, Any] = st or {}
    seen: list[str] = []
    for r in results:
        if str(r.get("replicates")) not in seen:
            seen.append(str(r.get("replicates")))
    target = settings.get("power_target")
    target_text = "–"
    if isinstance(target, (int, float)) and not isinstance(target, bool):
        target_text = f"{100 * target:.0f}%"
    scenarios = ", ".join(str(c.get("name")) for c in settings.get("scenarios") or [])
    primaries = ", ".join(str(x) for x in settings.get("primary") or []) or "none"
    out = [
        f"Design diagnostics by simulation (ledger plan; docs/planning.md {_TOOL}), locked as "
        f"plan/plan.json: {settings.get('studies')} simulated studies per scenario "
        f"({scenarios}) and replicate setting ({', '.join(seen)}), seed "
        f"{settings.get('seed')}; power target {target_text} for the primary hypotheses "
        f"({primaries})."
    ]
    for r in results:
        for h in r.get("hypotheses") or []:
            mark = ", primary" if h.get("primary") else ""
            coverage = h.get("coverage") if isinstance(h.get("coverage"), dict) else {}
            out.append(
                f"- {r.get('scenario')}, {r.get('replicates')} replicates, "
                f"{h.get('hypothesis')} ({h.get('test')}{mark}): P(supported) "
                f"{_percent(h.get('supported'))} ({h.get('role')}), not computed "
                f"{_percent(h.get('not_computed'))}, registered interval coverage "
                f"{_percent((coverage or {}).get('registered'))}"
            )
    return out


def _fields(pr: _Protocol, plan: dict[str, Any] | None) -> list[tuple[str, str, Any, str]]:
    """§3.2, row by row: (section, field, answer lines or None for a person, source)."""
    p, d = pr.p, pr.design
    analysis = p.get("analysis") if isinstance(p.get("analysis"), dict) else {}
    analysis = analysis or {}
    keep = analysis.get("exclude_unparseable", True)
    manipulated = f"The prompt arm, {len(pr.arms)} levels: {pr.arm_list}"
    if pr.many:
        names = [n for n, _ in pr._model_list()]
        manipulated += f"; the model, {len(names)} levels: {', '.join(names)}"
    if pr.nonempty("factors"):
        manipulated += "; factors: " + ", ".join(sorted(pr.nonempty("factors")))
    if p.get("variant_order"):
        manipulated += f"; the item variant, {len(p['variant_order'])} levels"
    deviations = [x for x in p.get("deviations") or [] if isinstance(x, dict)]
    other = [f"Deviations declared before the run: {len(deviations)}."]
    other += [
        f"- {x.get('id')}: " + "; ".join(f"{k} {_text(x[k])}" for k in sorted(x) if k != "id")
        for x in deviations
    ]
    amendable = ", ".join(str(g) for g in p.get("amendable") or []) or "none"
    other.append(
        f"Files that may change after lock, only by a recorded protocol.amended: {amendable}."
    )
    registered_tests = ", ".join(f"{h.get('id')} {h.get('test')}" for h in pr.hyps) or "none"
    settings = ", ".join(f"{k} {_text(analysis[k])}" for k in sorted(analysis)) or "none"
    where_model = "[model] or [models]"
    return [
        (
            "Study information",
            "Title",
            [_text(p.get("title") or p.get("study"))],
            "study.toml [study] title (protocol.locked title)",
        ),
        ("Study information", "Authors", None, ""),
        (
            "Study information",
            "Description",
            [
                f"A randomized prompt experiment: {len(pr.arms)} prompt arms ({pr.arm_list}) sent "
                f"to {pr.models}, with {pr.sample} and {pr.r} replicate(s) per arm and stimulus or "
                f"item: {pr.n} trials."
            ],
            f"study.toml [arms.*], {where_model}, [stimuli] or [items], [design] (protocol.locked "
            "arms, model or models, stimuli or items, design.replicates, trials)",
        ),
        (
            "Study information",
            "Hypotheses",
            _hypotheses(pr),
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
                "The model receives one arm's prompt per request and no other arm's. "
                "Responses are scored blind: the scorer sees arm codes only (HMAC-SHA256 of "
                "the arm under a secret), the scores are sealed, and only then is the secret "
                "revealed. The secret's SHA-256 is committed here: "
                f"{p.get('blinding_commitment')}. No arm code is in this document."
            ],
            "protocol.locked blinding_commitment (the secret itself is never locked)",
        ),
        (
            "Design plan",
            "Study design",
            _design(pr),
            f"study.toml [arms.*], [components], {where_model}, [stimuli] or [items], [design] "
            "(protocol.locked arms, model or models, stimuli or items, factors, steps, "
            "variant_order, design.replicates, trials)",
        ),
        (
            "Design plan",
            "Randomization",
            [
                f"The {pr.n} trials run in the order {d.get('order')} with seed {d.get('seed')}, "
                f"fixed at lock: schedule SHA-256 {pr.s}. Bootstrap seed "
                f"{d.get('bootstrap_seed') or 'none'}, {d.get('bootstrap_iterations')} iterations."
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
                f"checks that the lock precedes the first request. The {pr.sample} are existing "
                "materials, locked and hashed with the protocol."
            ],
            "protocol.locked (its seq precedes every trial.requested), stimuli or items",
        ),
        ("Sampling plan", "Explanation of existing data", None, ""),
        (
            "Sampling plan",
            "Data collection procedures",
            [
                f"Each trial is one request to the locked model(s), {pr.models}, sent by PROMPT "
                "Ledger's runner; every request and response is recorded byte for byte in the "
                f"signed ledger. Responses are parsed by {pr.parser} (format {pr.format})."
            ],
            f"study.toml {where_model}, [response] (protocol.locked model or models, response)",
        ),
        (
            "Sampling plan",
            "Sample size",
            [f"{pr.n} trials: {len(pr.arms)} arms, {pr.sample}, {pr.r} replicate(s), as locked."],
            "protocol.locked trials, arms, stimuli or items, design.replicates",
        ),
        (
            "Sampling plan",
            "Sample size rationale",
            _rationale(plan),
            "plan/plan.json settings and results (locked with role plan)",
        ),
        (
            "Sampling plan",
            "Stopping rule",
            [
                f"No data-dependent stopping: the {pr.n} trials are fixed at lock (schedule "
                f"SHA-256 {pr.s}); each is run until it has a final outcome (a response, a "
                "final failure after the runner's retries, or a recorded exclusion), and no "
                "interim analysis is registered."
            ],
            "protocol.locked trials, schedule_sha256",
        ),
        (
            "Variables",
            "Manipulated variables",
            [f"{manipulated}."],
            "study.toml [arms.*] (protocol.locked arms, models, factors, variant_order)",
        ),
        (
            "Variables",
            "Measured variables",
            [
                f"The model's response to each trial, parsed by {pr.parser} (format {pr.format}) "
                "and scored against the locked reference; the outcomes the hypotheses name: "
                f"{pr.outcomes}."
            ],
            "study.toml [response], [[hypotheses]] outcome (protocol.locked response, hypotheses)",
        ),
        (
            "Variables",
            "Indices",
            [
                f"Each outcome ({pr.outcomes}) is computed per trial by the scorer for parser "
                f"{pr.parser}, as docs/scoring.md {_TOOL} defines it."
            ],
            "protocol.locked response.parser, hypotheses",
        ),
        (
            "Analysis plan",
            "Statistical models",
            [f"Analysis settings as locked: {settings}. Registered tests: {registered_tests}."],
            "study.toml [analysis], [[hypotheses]] test (protocol.locked analysis, hypotheses)",
        ),
        ("Analysis plan", "Transformations", None, ""),
        (
            "Analysis plan",
            "Inference criteria",
            _criteria(pr),
            "study.toml [[hypotheses]] (protocol.locked hypotheses)",
        ),
        (
            "Analysis plan",
            "Data exclusion",
            [
                "Unparseable responses are "
                + ("excluded from the registered analysis" if keep else "kept and scored 0")
                + f" (analysis.exclude_unparseable = {_text(keep)})."
            ],
            "study.toml [analysis] exclude_unparseable (protocol.locked analysis)",
        ),
        (
            "Analysis plan",
            "Missing data",
            [
                "A trial without a response after the runner's retries has no outcome; it is not "
                f"imputed, and it is counted in the trial flow (docs/reporting.md §1 {_TOOL})."
            ],
            "fixed by PROMPT Ledger (docs/reporting.md §1)",
        ),
        (
            "Analysis plan",
            "Exploratory analysis",
            [
                "Every result other than the registered hypotheses (descriptive, "
                "exploratory, sensitivity and post hoc analyses) is reported as not registered "
                "and never changes a verdict."
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


def expected_registration(
    body: dict[str, Any], plan: dict[str, Any] | None
) -> tuple[list[str], list[str]]:
    """The lines of §3.3 for ``body`` and ``plan``, and the field (``section / field``) of each."""
    pr = _Protocol(body)
    rows = _fields(pr, plan)
    title = rows[0][2][0]
    intro = (
        f"Study {_text(body.get('study'))}. Written by `ledger lock` from the locked protocol "
        "and locked with it (an artifact.locked event of role registration; its SHA-256 is in "
        "the manifest of protocol.locked), following the fields of the OSF Preregistration "
        "template (Bowman et al. 2016, https://doi.org/10.31222/osf.io/epgjd). Each answer "
        f"names the locked file and field it comes from; a field marked {_PERSON} is for a "
        "person to answer when submitting the registration. Field names are the template's; "
        "its guidance texts are not copied."
    )
    lines = [f"# OSF Preregistration: {title}", "", intro]
    owners = ["title", "", "introduction"]
    current = None
    for section, name, answer, source in rows:
        if section != current:
            lines += ["", f"## {section}"]
            owners += [section, section]
            current = section
        block = ["", f"### {name}", ""]
        block += [_PERSON] if answer is None else [*answer, "", f"Source: {source}."]
        lines += block
        owners += [f"{section} / {name}"] * len(block)
    persons = ", ".join(name for _, name, answer, _ in rows if answer is None)
    lines += ["", f"Fields for the authors to complete: {persons}.", ""]
    owners += ["", "the closing list", ""]
    return lines, owners


def _compare(st: _State, label: str, data: bytes, want: list[str], owners: list[str]) -> None:
    try:
        got = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as exc:
        st.fail(f"{label} is not UTF-8 (byte {exc.start})", where=label)
        return
    for number, (g, w) in enumerate(zip(got, want, strict=False), start=1):
        if g != w:
            field = owners[number - 1] or "a separator line"
            st.fail(
                f"{label} line {number} ({field}) says {g[:160]!r}; the protocol gives {w[:160]!r}",
                where=f"{label} line {number}",
            )
            return
    if len(got) != len(want):
        st.fail(f"{label} has {len(got)} lines; the protocol gives {len(want)}", where=label)


def check_registration(a: Archive) -> Check:
    """The locked ``osf-preregistration.md`` is, line for line, the one the protocol gives (§3)."""
    st = _State("registration")
    locked = a.of_kind("protocol.locked")
    if not locked:
        return st.check("no protocol.locked: no registration to check")
    first = locked[0]
    versions = a.locked_versions.get(OSF_PATH, [])
    if not versions:
        st.warn(
            f"no {OSF_PATH} was locked: the study was locked before ledger lock wrote the OSF "
            "preregistration (docs/reporting.md §3), so there is nothing to check",
            first,
        )
        return st.check("")
    role, digest, seq = versions[0]
    if role != _ROLE:
        st.fail(f"seq {seq}: artifact.locked {OSF_PATH} has role {role!r}, not {_ROLE!r}", seq)
    if seq > first or len(versions) > 1:
        late = versions[-1][2] if len(versions) > 1 else seq
        st.fail(
            f"seq {late}: {OSF_PATH} is locked after the first protocol.locked (seq {first}); "
            "the registration is locked once, with it",
            late,
        )
    in_force = a.current_manifest().get(OSF_PATH)
    if in_force is not None and in_force[0] != digest:
        st.fail(
            f"seq {in_force[1]}: {OSF_PATH} was amended after lock; the registration may not "
            "change",
            in_force[1],
        )
    plan = None
    for path, found in a.locked_versions.items():
        earlier = [v for v in found if v[0] == "plan" and v[2] < first]
        if earlier:
            raw = a.locked_blob(path, first)
            try:
                plan = json.loads(raw.decode("utf-8")) if raw is not None else None
            except (UnicodeDecodeError, ValueError):
                st.fail(
                    f"{path} (role plan) is not JSON: its rationale cannot be re-derived", first
                )
            plan = plan if isinstance(plan, dict) else None
    want, owners = expected_registration(a.body(first), plan)
    data = a.blob(a.blob_ref(seq, "content"))
    if data is None:
        st.fail(f"seq {seq}: the blob of artifact.locked {OSF_PATH} is missing", seq)
    else:
        _compare(st, f"{OSF_PATH} as locked (seq {seq})", data, want, owners)
    copy = a.file(_ARCHIVE_COPY)
    if copy is None:
        st.fail(a.absent(_ARCHIVE_COPY), where=_ARCHIVE_COPY)
    else:
        _compare(st, _ARCHIVE_COPY, copy, want, owners)
    fields = sum(1 for line in want if line.startswith("### "))
    persons = sum(1 for line in want if line == _PERSON)
    return st.check(
        f"{OSF_PATH} (seq {seq}) re-derived line by line from protocol.locked seq {first}"
        f"{' and plan/plan.json' if plan is not None else ''}: {fields} fields of the OSF "
        f"Preregistration template, {fields - persons} filled from the locked protocol, "
        f"{persons} left to the authors"
    )
