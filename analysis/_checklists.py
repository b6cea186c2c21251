"""Reporting checklists filled from the ledger: TRIPOD-LLM, CHART, MI-CLEAR-LLM.

``analysis/checklists.json`` lists each checklist's items (paraphrased) and, for each item the
ledger can answer, the *fact* that answers it. Every fact is a sentence computed from the signed
events by the rules of ``docs/reporting.md`` §2, with the seqs of the events that prove it; an
item with no fact is left for the authors. Each checklist is written to the archive as
``analysis/checklists/<id>.md`` and ``analysis/checklists/<id>.html``; the verifier re-derives
every answer and every seq from the events and compares both files line by line.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis._flow import Flow
from ledger import Ledger
from runner import StudyError

__all__ = [
    "DATA_ROLES",
    "FACTS",
    "KEPT_KINDS",
    "PERSON",
    "ChecklistEvents",
    "Fact",
    "checklist_files",
    "checklists",
    "facts",
    "read_events",
]

CHECKLISTS_FILE = Path(__file__).with_name("checklists.json")
PERSON = "to be completed by the authors"
"""The answer of an item only a person can give."""
DATA_ROLES = ("items", "item-image", "stimulus", "truth")
"""The roles of locked files that are the study's test data."""

Fact = tuple[str, list[int]]
"""A fact: its answer and the seqs of the events that prove it (ascending, no repeats)."""


def checklists() -> list[dict[str, Any]]:
    """The checklists of ``analysis/checklists.json`` (format version 1)."""
    data = json.loads(CHECKLISTS_FILE.read_text(encoding="utf-8"))
    if data.get("version") != 1:
        raise StudyError(f"{CHECKLISTS_FILE}: version {data.get('version')!r} is not 1")
    return list(data["checklists"])


def _value(v: Any) -> str:
    """A locked value as the answers write it: a string as is, anything else as JSON."""
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True, ensure_ascii=False)


KEPT_KINDS = frozenset(
    {
        "protocol.locked",
        "run.started",
        "scoring.sealed",
        "blinding.revealed",
        "protocol.amended",
        "analysis.result",
        "artifact.locked",
    }
)
"""The event kinds the facts read whole: a handful per study, however many trials it has."""


class ChecklistEvents:
    """The events the facts read, folded in one pass in seq order.

    The few study-level kinds (:data:`KEPT_KINDS`) are kept whole; of the per-trial events only
    what the facts say: the count, first and last of ``trial.requested`` and, per model a
    response names, its count and first seq. Feed every event with :meth:`feed`.
    """

    def __init__(self) -> None:
        self.by_kind: dict[str, list[Any]] = {}
        self.requests = 0
        self.first_request: tuple[int, str] | None = None
        self.last_request: tuple[int, str] | None = None
        self.reported: dict[str, list[int]] = {}  # model -> [responses, first seq]

    def feed(self, e: Any) -> None:
        """Fold one event (an :class:`ledger.Event`)."""
        kind = e.kind
        if kind == "trial.requested":
            self.requests += 1
            self.last_request = (e.seq, e.time)
            if self.first_request is None:
                self.first_request = self.last_request
        elif kind == "trial.responded":
            name = e.body.get("model")
            if isinstance(name, str) and name:
                found = self.reported.get(name)
                if found is None:
                    self.reported[name] = [1, e.seq]
                else:
                    found[0] += 1
        elif kind in KEPT_KINDS:
            self.by_kind.setdefault(kind, []).append(e)


class _Events:
    """The facts' view of a :class:`ChecklistEvents`."""

    def __init__(self, folded: ChecklistEvents) -> None:
        self.folded = folded
        self.by_kind = folded.by_kind
        locked = self.by_kind.get("protocol.locked") or []
        if not locked:
            raise StudyError("the checklists need a locked study (run 'ledger lock')")
        self.first_lock = locked[0]
        self.lock = locked[-1]
        self.p: dict[str, Any] = dict(self.lock.body)

    def of(self, kind: str) -> list[Any]:
        assert kind in KEPT_KINDS, kind
        return self.by_kind.get(kind) or []

    def first(self, kind: str) -> Any:
        found = self.of(kind)
        return found[0] if found else None


def _seqs(*groups: Any) -> list[int]:
    out: set[int] = set()
    for g in groups:
        if g is None:
            continue
        if isinstance(g, int):
            out.add(g)
        else:
            out.update(int(s) for s in g)
    return sorted(out)


def _models(p: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, model record) of each locked model: ``[models]`` in model order, else ``[model]``."""
    models = p.get("models")
    if isinstance(models, dict):
        order = p.get("model_order") or sorted(models)
        return [(str(n), dict(models.get(n) or {})) for n in order]
    model = dict(p.get("model") or {})
    return [(str(model.get("id")), model)]


def _fact_model(ev: _Events, flow: Flow) -> Fact:
    p = ev.p
    models = _models(p)
    if isinstance(p.get("models"), dict):
        locked = "; ".join(f"{n} = {m.get('id')} (provider {m.get('provider')})" for n, m in models)
    else:
        locked = f"{models[0][1].get('id')} (provider {models[0][1].get('provider')})"
    reported = ev.folded.reported
    said = ", ".join(f"{m} ({s[0]})" for m, s in sorted(reported.items())) or "none reported"
    runs = ev.of("run.started")
    backends = ", ".join(sorted({str(r.body.get("backend")) for r in runs})) or "none"
    simulated = (
        " (simulated: no real model answered)" if any(r.body.get("simulated") for r in runs) else ""
    )
    return (
        f"Locked: {locked}. Reported by the responses: {said}. Backends: {backends}{simulated}.",
        _seqs(ev.lock.seq, [r.seq for r in runs], [s[1] for s in reported.values()]),
    )


def _fact_query_dates(ev: _Events, flow: Flow) -> Fact:
    folded = ev.folded
    if folded.first_request is None or folded.last_request is None:
        return "No trial request was sent.", _seqs(ev.lock.seq)
    (a_seq, a_time), (b_seq, b_time) = folded.first_request, folded.last_request
    return (
        f"First request {a_time} (seq {a_seq}); last request {b_time} (seq {b_seq}); "
        f"{folded.requests} requests. Times are the appender's clock, bounded by the signed "
        "checkpoints.",
        _seqs(a_seq, b_seq),
    )


def _fact_prompts(ev: _Events, flow: Flow) -> Fact:
    arms = ev.p.get("arms") or {}
    hashes = "; ".join(f"{a} {arms[a].get('sha256')}" for a in sorted(arms))
    return (
        f"{len(arms)} arms; each arm's prompt text is protocol/arms/<arm>.txt in the archive "
        f"and its locked hash is in protocol.locked: {hashes}.",
        _seqs(ev.lock.seq),
    )


def _fact_structure(ev: _Events, flow: Flow) -> Fact:
    arms = ev.p.get("arms") or {}
    system = ", ".join(a for a in sorted(arms) if arms[a].get("system")) or "none"
    fewshot = ", ".join(a for a in sorted(arms) if arms[a].get("fewshot")) or "none"
    return (
        f"Each trial is one stateless request with no conversation history. Arms with a "
        f"system prompt: {system}. Arms with few-shot examples: {fewshot}.",
        _seqs(ev.lock.seq),
    )


def _fact_parameters(ev: _Events, flow: Flow) -> Fact:
    parts = []
    for name, m in _models(ev.p):
        settings = ", ".join(
            f"{k} {_value(m[k])}" for k in sorted(m) if k not in ("id", "provider")
        )
        parts.append(f"{name}: {settings or 'none'}")
    return "; ".join(parts) + ".", _seqs(ev.lock.seq)


def _fact_runs(ev: _Events, flow: Flow) -> Fact:
    design = ev.p.get("design") or {}
    runs = ev.of("run.started")
    analysis = ev.p.get("analysis") or {}
    settings = ", ".join(f"{k} {_value(analysis[k])}" for k in sorted(analysis)) or "none"
    return (
        f"{ev.p.get('trials')} trials scheduled with {_value(design.get('replicates'))} "
        f"replicate(s) per arm and stimulus or item; {ev.folded.requests} requests "
        f"sent in {len(runs)} run session(s). Each replicate is an independent stateless call "
        f"at the locked sampling parameters and every replicate is analysed; analysis "
        f"settings as locked: {settings}.",
        _seqs(ev.lock.seq, [r.seq for r in runs[:1]]),
    )


def _fact_randomization(ev: _Events, flow: Flow) -> Fact:
    design = ev.p.get("design") or {}
    boot = design.get("bootstrap_seed")
    return (
        f'Execution order: ascending SHA-256("seed|trial id") with seed '
        f"{_value(design.get('seed'))}; schedule SHA-256 {ev.p.get('schedule_sha256')}; "
        f"bootstrap seed {_value(boot) if boot is not None else 'none'}.",
        _seqs(ev.lock.seq),
    )


def _fact_blinding(ev: _Events, flow: Flow) -> Fact:
    sealed, revealed = ev.first("scoring.sealed"), ev.first("blinding.revealed")
    sealed_text = (
        f"scores were sealed at seq {sealed.seq} ({sealed.body.get('scored')} trials scored)"
        if sealed is not None
        else "scores were not sealed"
    )
    revealed_text = (
        f"the secret was revealed at seq {revealed.seq}"
        if revealed is not None
        else "the secret was not revealed"
    )
    return (
        f"Scoring saw arm codes only (HMAC-SHA256 of the arm under a secret); the secret's "
        f"SHA-256 {ev.p.get('blinding_commitment')} was committed at lock (seq "
        f"{ev.lock.seq}); {sealed_text}, then {revealed_text}.",
        _seqs(ev.lock.seq, sealed.seq if sealed else None, revealed.seq if revealed else None),
    )


def _fact_registration(ev: _Events, flow: Flow) -> Fact:
    lock = ev.first_lock
    first = ev.folded.first_request
    before = (
        f"before the first trial request (seq {first[0]})"
        if first is not None
        else "no trial request followed"
    )
    return (
        f"Protocol locked at seq {lock.seq} ({lock.time}), {before}; its registration "
        f"checkpoint is ledger/checkpoints/{lock.seq + 1:08d}.txt.",
        _seqs(lock.seq, first[0] if first is not None else None),
    )


def _fact_deviations(ev: _Events, flow: Flow) -> Fact:
    declared = ", ".join(str((d or {}).get("id")) for d in ev.p.get("deviations") or []) or "none"
    amended = ev.of("protocol.amended")
    listed = ", ".join(f"seq {e.seq}" for e in amended) or "none"
    return (
        f"Declared before the run: {declared}. Amendments recorded: {listed}.",
        _seqs(ev.lock.seq, [e.seq for e in amended]),
    )


def _fact_flow(ev: _Events, flow: Flow) -> Fact:
    c = flow.total.counts
    sealed = ev.first("scoring.sealed")
    result = ev.first("analysis.result")
    return (
        f"Scheduled {c['scheduled']}, requested {c['requested']}, responded "
        f"{c['responded']}, given up {c['given_up']}, no final outcome {c['no_outcome']}, "
        f"scored {c['parsed'] + c['unparseable'] + c['refused']}, excluded "
        f"{c['control'] + c['excluded_unparseable']}, analysed {c['analysed']} (per arm: "
        "analysis/tables/flow.csv and analysis/figures/flow.svg).",
        _seqs(ev.lock.seq, sealed.seq if sealed else None, result.seq if result else None),
    )


def _fact_sample(ev: _Events, flow: Flow) -> Fact:
    p = ev.p
    items = p.get("items")
    if "stimuli" not in p and isinstance(items, dict):
        units = f"{items.get('count')} items"
    else:
        units = f"{len(p.get('stimuli') or [])} stimuli"
    return (
        f"{units}, {len(p.get('arms') or {})} arms, {p.get('trials')} trials, as locked.",
        _seqs(ev.lock.seq),
    )


def _fact_analysis(ev: _Events, flow: Flow) -> Fact:
    results = [e for e in ev.of("analysis.result") if e.body.get("hypothesis")]
    if not results:
        return "No registered hypothesis.", _seqs(ev.lock.seq)
    listed = "; ".join(
        f"{e.body.get('hypothesis')} ({e.body.get('test')}): {e.body.get('verdict')}"
        for e in results
    )
    return (
        f"{len(results)} registered hypothesis result(s): {listed} (estimates and intervals "
        "in analysis/results.json and the report).",
        _seqs(ev.lock.seq, [e.seq for e in results]),
    )


def _fact_parser(ev: _Events, flow: Flow) -> Fact:
    response = ev.p.get("response") or {}
    exclude = (ev.p.get("analysis") or {}).get("exclude_unparseable", True)
    sealed = ev.first("scoring.sealed")
    return (
        f"Responses parsed by {response.get('parser')} (format {response.get('format')}) "
        f"and scored against the locked reference by the scorer, blind to the arm; "
        f"exclude_unparseable {_value(exclude)}.",
        _seqs(ev.lock.seq, sealed.seq if sealed else None),
    )


def _fact_stimuli(ev: _Events, flow: Flow) -> Fact:
    data = [e for e in ev.of("artifact.locked") if e.body.get("role") in DATA_ROLES]
    counts: dict[str, int] = {}
    for e in data:
        counts[str(e.body.get("role"))] = counts.get(str(e.body.get("role")), 0) + 1
    roles = ", ".join(f"{r} {n}" for r, n in sorted(counts.items())) or "none"
    return (
        f"{len(data)} locked data files ({roles}), each hashed in its artifact.locked "
        "event and included in the archive.",
        _seqs(ev.lock.seq, [e.seq for e in data]),
    )


FACTS: dict[str, Callable[[_Events, Flow], Fact]] = {
    "model": _fact_model,
    "query_dates": _fact_query_dates,
    "prompts": _fact_prompts,
    "structure": _fact_structure,
    "parameters": _fact_parameters,
    "runs": _fact_runs,
    "randomization": _fact_randomization,
    "blinding": _fact_blinding,
    "registration": _fact_registration,
    "deviations": _fact_deviations,
    "flow": _fact_flow,
    "sample": _fact_sample,
    "analysis": _fact_analysis,
    "parser": _fact_parser,
    "stimuli": _fact_stimuli,
}
"""Each mechanical fact by name (``docs/reporting.md`` §2.2)."""


def read_events(log: Ledger) -> ChecklistEvents:
    """The :class:`ChecklistEvents` of the study in ``log``, read kind by kind."""
    folded = ChecklistEvents()
    for kind in (*sorted(KEPT_KINDS), "trial.requested", "trial.responded"):
        for e in log.events(kind):
            folded.feed(e)
    return folded


def facts(log: Ledger, flow: Flow, events: ChecklistEvents | None = None) -> dict[str, Fact]:
    """Every fact of the study in ``log``: name -> (answer, seqs).

    ``events``, when given, holds every event of ``log`` folded already (one pass shared with
    other readers); otherwise they are read here.
    """
    ev = _Events(events if events is not None else read_events(log))
    return {name: fn(ev, flow) for name, fn in FACTS.items()}


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _markdown(checklist: dict[str, Any], title: str, study: str, known: dict[str, Fact]) -> str:
    lines = [
        f"# {checklist['title']} checklist: {title}",
        "",
        f"Study {study}. Filled from the signed ledger by PROMPT Ledger (docs/reporting.md §2 of "
        "the tool): each answer the ledger can give links the events that prove it, as "
        "/proof/SEQ pages of `ledger view` on this archive. Item texts are paraphrases; check "
        f"them against the published checklist: {checklist['source']}.",
        "",
        "| item | section | what to report | answer | evidence |",
        "|---|---|---|---|---|",
    ]
    person = []
    for item in checklist["items"]:
        fact = item.get("fact")
        if fact is None:
            answer, evidence = f"**{PERSON}**", "–"
            person.append(str(item["id"]))
        else:
            text, seqs = known[fact]
            answer = _md_cell(text)
            evidence = ", ".join(f"[seq {s}](/proof/{s})" for s in seqs)
        lines.append(
            f"| {_md_cell(str(item['id']))} | {_md_cell(str(item['section']))} | "
            f"{_md_cell(str(item['text']))} | {answer} | {evidence} |"
        )
    lines += ["", f"Items for the authors to complete: {', '.join(person) or 'none'}.", ""]
    return "\n".join(lines)


_CSS = (
    "body{font-family:sans-serif;margin:1.5em auto;max-width:1100px;color:#1f2328}"
    "table{border-collapse:collapse;width:100%}th,td{border:1px solid #d0d7de;"
    "padding:.3em .5em;text-align:left;vertical-align:top}th{background:#f6f8fa}"
    "td.person{color:#9a6700;font-weight:600}"
)


def _html(checklist: dict[str, Any], title: str, study: str, known: dict[str, Fact]) -> str:
    e = html.escape
    heading = f"{checklist['title']} checklist: {title}"
    lines = [
        "<!DOCTYPE html>",
        f'<html lang="en"><head><meta charset="utf-8"><title>{e(heading)}</title>'
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{e(heading)}</h1>",
        f"<p>Study {e(study)}. Filled from the signed ledger by PROMPT Ledger (docs/reporting.md "
        "§2 of the tool): each answer the ledger can give links the events that prove it, as "
        "/proof/SEQ pages of <code>ledger view</code> on this archive. Item texts are "
        f"paraphrases; check them against the published checklist: {e(checklist['source'])}."
        "</p>",
        "<table><thead><tr><th>item</th><th>section</th><th>what to report</th><th>answer</th>"
        "<th>evidence</th></tr></thead><tbody>",
    ]
    for item in checklist["items"]:
        fact = item.get("fact")
        cells = (
            f"<td>{e(str(item['id']))}</td><td>{e(str(item['section']))}</td><td>"
            f"{e(str(item['text']))}</td>"
        )
        if fact is None:
            lines.append(f'<tr>{cells}<td class="person">{e(PERSON)}</td><td>–</td></tr>')
        else:
            text, seqs = known[fact]
            links = ", ".join(f'<a href="/proof/{s}">seq {s}</a>' for s in seqs)
            lines.append(f"<tr>{cells}<td>{e(text)}</td><td>{links}</td></tr>")
    lines += ["</tbody></table>", "</body></html>", ""]
    return "\n".join(lines)


def checklist_files(
    log: Ledger, flow: Flow, events: ChecklistEvents | None = None
) -> dict[str, bytes]:
    """``analysis/checklists/<id>.md`` and ``.html`` of every checklist, by archive path.

    ``events`` as for :func:`facts`.
    """
    known = facts(log, flow, events)
    locked = list(log.events("protocol.locked"))
    if not locked:
        raise StudyError("the checklists need a locked study (run 'ledger lock')")
    body = locked[-1].body
    title = str(body.get("title") or body.get("study"))
    study = str(body.get("study"))
    out: dict[str, bytes] = {}
    for checklist in checklists():
        name = str(checklist["id"])
        out[f"analysis/checklists/{name}.md"] = _markdown(checklist, title, study, known).encode(
            "utf-8"
        )
        out[f"analysis/checklists/{name}.html"] = _html(checklist, title, study, known).encode(
            "utf-8"
        )
    return out
