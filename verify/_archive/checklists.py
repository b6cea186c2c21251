"""The ``checklists`` check: every mechanical answer of the reporting checklists (reporting §2).

``analysis/checklists/<id>.md`` and ``.html`` are re-rendered here from the verifier's own copy
of the item lists (``checklists.json`` beside this module) and the facts of
``docs/reporting.md`` §2.2 of the tool, each computed from the signed events with the seqs that
prove it, and compared line by line: a changed answer, a changed seq, a changed item or an item
left out fails, naming the file, line and item.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verify._archive.flow import flow_counts
from verify._archive.view import Archive
from verify._ledgerfile import _State
from verify._report import Check

__all__ = ["CHECKLIST_DIR", "check_checklists", "checklist_names", "expected_files"]

CHECKLIST_DIR = "analysis/checklists"
_DATA = Path(__file__).with_name("checklists.json")
_PERSON = "to be completed by the authors"
_DATA_ROLES = {"items", "item-image", "stimulus", "truth"}
_STYLE = (
    "body{font-family:sans-serif;margin:1.5em auto;max-width:1100px;color:#1f2328}"
    "table{border-collapse:collapse;width:100%}th,td{border:1px solid #d0d7de;"
    "padding:.3em .5em;text-align:left;vertical-align:top}th{background:#f6f8fa}"
    "td.person{color:#9a6700;font-weight:600}"
)


def _lists() -> list[dict[str, Any]]:
    data = json.loads(_DATA.read_text(encoding="utf-8"))
    if data.get("version") != 1:
        raise ValueError(f"{_DATA}: version {data.get('version')!r} is not 1")
    return list(data["checklists"])


def checklist_names() -> list[str]:
    """The archive files of the checklists (``analysis/checklists/<id>.md`` and ``.html``)."""
    return [f"{CHECKLIST_DIR}/{c['id']}.{ext}" for c in _lists() for ext in ("md", "html")]


def _js(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True, ensure_ascii=False)


class _Facts:
    """§2.2: each fact's answer and the seqs of its evidence."""

    def __init__(self, a: Archive) -> None:
        self.a = a
        self.p = a.protocol
        locked = a.of_kind("protocol.locked")
        self.lock = locked[-1]
        self.registered = locked[0]
        self.requests = a.of_kind("trial.requested")
        self.sessions = a.of_kind("run.started")

    def _first(self, kind: str) -> int | None:
        seqs = self.a.of_kind(kind)
        return seqs[0] if seqs else None

    def _time(self, seq: int) -> Any:
        env = self.a.envs[seq]
        return env.get("time") if env is not None else None

    def _models(self) -> list[tuple[str, dict[str, Any]]]:
        models = self.p.get("models")
        if isinstance(models, dict):
            names = self.p.get("model_order") or sorted(models)
            return [(str(n), dict(models.get(n) or {})) for n in names]
        one = dict(self.p.get("model") or {})
        return [(str(one.get("id")), one)]

    def model(self) -> tuple[str, set[int]]:
        models = self._models()
        if isinstance(self.p.get("models"), dict):
            locked = "; ".join(
                f"{n} = {m.get('id')} (provider {m.get('provider')})" for n, m in models
            )
        else:
            locked = f"{models[0][1].get('id')} (provider {models[0][1].get('provider')})"
        firsts: dict[str, int] = {}
        counts: dict[str, int] = {}
        for seq in self.a.of_kind("trial.responded"):
            name = self.a.body(seq).get("model")
            if isinstance(name, str) and name:
                firsts.setdefault(name, seq)
                counts[name] = counts.get(name, 0) + 1
        said = ", ".join(f"{m} ({counts[m]})" for m in sorted(counts)) or "none reported"
        backends = (
            ", ".join(sorted({str(self.a.body(s).get("backend")) for s in self.sessions})) or "none"
        )
        sim = any(self.a.body(s).get("simulated") for s in self.sessions)
        return (
            f"Locked: {locked}. Reported by the responses: {said}. Backends: {backends}"
            f"{' (simulated: no real model answered)' if sim else ''}.",
            {self.lock, *self.sessions, *firsts.values()},
        )

    def query_dates(self) -> tuple[str, set[int]]:
        if not self.requests:
            return "No trial request was sent.", {self.lock}
        a, b = self.requests[0], self.requests[-1]
        return (
            f"First request {self._time(a)} (seq {a}); last request {self._time(b)} (seq "
            f"{b}); {len(self.requests)} requests. Times are the appender's clock, bounded "
            "by the signed checkpoints.",
            {a, b},
        )

    def prompts(self) -> tuple[str, set[int]]:
        arms = self.p.get("arms") or {}
        listed = "; ".join(f"{arm} {(arms[arm] or {}).get('sha256')}" for arm in sorted(arms))
        return (
            f"{len(arms)} arms; each arm's prompt text is protocol/arms/<arm>.txt in the "
            f"archive and its locked hash is in protocol.locked: {listed}.",
            {self.lock},
        )

    def structure(self) -> tuple[str, set[int]]:
        arms = self.p.get("arms") or {}
        system = [x for x in sorted(arms) if (arms[x] or {}).get("system")]
        fewshot = [x for x in sorted(arms) if (arms[x] or {}).get("fewshot")]
        return (
            "Each trial is one stateless request with no conversation history. Arms with "
            f"a system prompt: {', '.join(system) or 'none'}. Arms with few-shot examples: "
            f"{', '.join(fewshot) or 'none'}.",
            {self.lock},
        )

    def parameters(self) -> tuple[str, set[int]]:
        parts = []
        for name, m in self._models():
            rest = [f"{k} {_js(m[k])}" for k in sorted(m) if k not in {"id", "provider"}]
            parts.append(f"{name}: {', '.join(rest) or 'none'}")
        return "; ".join(parts) + ".", {self.lock}

    def runs(self) -> tuple[str, set[int]]:
        design = self.p.get("design") or {}
        plan = self.p.get("analysis") or {}
        settings = ", ".join(f"{k} {_js(plan[k])}" for k in sorted(plan)) or "none"
        return (
            f"{self.p.get('trials')} trials scheduled with {_js(design.get('replicates'))} "
            "replicate(s) per arm and stimulus or item; "
            f"{len(self.requests)} requests sent in {len(self.sessions)} run session(s). "
            "Each replicate is an independent stateless call at the locked sampling "
            "parameters and every replicate is analysed; analysis settings as locked: "
            f"{settings}.",
            {self.lock, *self.sessions[:1]},
        )

    def randomization(self) -> tuple[str, set[int]]:
        design = self.p.get("design") or {}
        boot = design.get("bootstrap_seed")
        return (
            'Execution order: ascending SHA-256("seed|trial id") with seed '
            f"{_js(design.get('seed'))}; schedule SHA-256 {self.p.get('schedule_sha256')}; "
            f"bootstrap seed {'none' if boot is None else _js(boot)}.",
            {self.lock},
        )

    def blinding(self) -> tuple[str, set[int]]:
        sealed, revealed = self._first("scoring.sealed"), self._first("blinding.revealed")
        s_text = (
            "scores were not sealed"
            if sealed is None
            else f"scores were sealed at seq {sealed} "
            f"({self.a.body(sealed).get('scored')} trials scored)"
        )
        r_text = (
            "the secret was not revealed"
            if revealed is None
            else f"the secret was revealed at seq {revealed}"
        )
        seqs = {self.lock} | {s for s in (sealed, revealed) if s is not None}
        return (
            "Scoring saw arm codes only (HMAC-SHA256 of the arm under a secret); the "
            f"secret's SHA-256 {self.p.get('blinding_commitment')} was committed at lock "
            f"(seq {self.lock}); {s_text}, then {r_text}.",
            seqs,
        )

    def registration(self) -> tuple[str, set[int]]:
        r = self.registered
        first = self.requests[0] if self.requests else None
        when = (
            "no trial request followed"
            if first is None
            else f"before the first trial request (seq {first})"
        )
        return (
            f"Protocol locked at seq {r} ({self._time(r)}), {when}; its registration "
            f"checkpoint is ledger/checkpoints/{r + 1:08d}.txt.",
            {r} | ({first} if first is not None else set()),
        )

    def deviations(self) -> tuple[str, set[int]]:
        declared = [str((d or {}).get("id")) for d in self.p.get("deviations") or []]
        amended = self.a.of_kind("protocol.amended")
        return (
            f"Declared before the run: {', '.join(declared) or 'none'}. Amendments "
            f"recorded: {', '.join(f'seq {s}' for s in amended) or 'none'}.",
            {self.lock, *amended},
        )

    def flow(self) -> tuple[str, set[int]]:
        rows, _ = flow_counts(self.a)
        t = rows.get(("all", "", "", "")) or {}

        def n(*names: str) -> int:
            return sum(int(t.get(x, 0)) for x in names)

        seqs = {self.lock} | {
            s
            for s in (self._first("scoring.sealed"), self._first("analysis.result"))
            if s is not None
        }
        return (
            f"Scheduled {n('scheduled')}, requested {n('requested')}, responded "
            f"{n('responded')}, given up {n('given_up')}, no final outcome "
            f"{n('no_outcome')}, scored {n('parsed', 'unparseable', 'refused')}, excluded "
            f"{n('control', 'excluded_unparseable')}, analysed {n('analysed')} (per arm: "
            "analysis/tables/flow.csv and analysis/figures/flow.svg).",
            seqs,
        )

    def sample(self) -> tuple[str, set[int]]:
        items = self.p.get("items")
        if "stimuli" not in self.p and isinstance(items, dict):
            what = f"{items.get('count')} items"
        else:
            what = f"{len(self.p.get('stimuli') or [])} stimuli"
        return (
            f"{what}, {len(self.p.get('arms') or {})} arms, {self.p.get('trials')} trials, "
            "as locked.",
            {self.lock},
        )

    def analysis(self) -> tuple[str, set[int]]:
        seqs = [s for s in self.a.of_kind("analysis.result") if self.a.body(s).get("hypothesis")]
        if not seqs:
            return "No registered hypothesis.", {self.lock}
        listed = "; ".join(
            f"{b.get('hypothesis')} ({b.get('test')}): {b.get('verdict')}"
            for b in (self.a.body(s) for s in seqs)
        )
        return (
            f"{len(seqs)} registered hypothesis result(s): {listed} (estimates and "
            "intervals in analysis/results.json and the report).",
            {self.lock, *seqs},
        )

    def parser(self) -> tuple[str, set[int]]:
        response = self.p.get("response") or {}
        exclude = (self.p.get("analysis") or {}).get("exclude_unparseable", True)
        sealed = self._first("scoring.sealed")
        return (
            f"Responses parsed by {response.get('parser')} (format "
            f"{response.get('format')}) and scored against the locked reference by the "
            f"scorer, blind to the arm; exclude_unparseable {_js(exclude)}.",
            {self.lock} | ({sealed} if sealed is not None else set()),
        )

    def stimuli(self) -> tuple[str, set[int]]:
        seqs = [
            s
            for s in self.a.of_kind("artifact.locked")
            if self.a.body(s).get("role") in _DATA_ROLES
        ]
        roles: dict[str, int] = {}
        for s in seqs:
            role = str(self.a.body(s).get("role"))
            roles[role] = roles.get(role, 0) + 1
        said = ", ".join(f"{r} {roles[r]}" for r in sorted(roles)) or "none"
        return (
            f"{len(seqs)} locked data files ({said}), each hashed in its artifact.locked "
            "event and included in the archive.",
            {self.lock, *seqs},
        )

    def get(self, name: str) -> tuple[str, list[int]]:
        fn: Callable[[], tuple[str, set[int]]] | None = getattr(self, name, None)
        if fn is None or name.startswith("_") or name in ("get",):
            raise ValueError(f"unknown fact {name!r}")
        text, seqs = fn()
        return text, sorted(seqs)


def _md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def expected_files(a: Archive) -> dict[str, tuple[str, list[str]]]:
    """Path -> (the text the events give, the item id of each line or '') of every file."""
    facts = _Facts(a)
    cache: dict[str, tuple[str, list[int]]] = {}
    title = str(a.protocol.get("title") or a.protocol.get("study"))
    study = str(a.protocol.get("study"))
    out: dict[str, tuple[str, list[str]]] = {}
    for c in _lists():
        head = f"{c['title']} checklist: {title}"
        intro = (
            "Filled from the signed ledger by PROMPT Ledger (docs/reporting.md §2 of the "
            "tool): each answer the ledger can give links the events that prove it, as "
            "/proof/SEQ pages of "
        )
        tail = (
            "on this archive. Item texts are paraphrases; check them against the published "
            "checklist: "
        )
        md = [
            f"# {head}",
            "",
            f"Study {study}. {intro}`ledger view` {tail}{c['source']}.",
            "",
            "| item | section | what to report | answer | evidence |",
            "|---|---|---|---|---|",
        ]
        ht = [
            "<!DOCTYPE html>",
            f'<html lang="en"><head><meta charset="utf-8"><title>{html.escape(head)}</title>'
            f"<style>{_STYLE}</style></head><body>",
            f"<h1>{html.escape(head)}</h1>",
            f"<p>Study {html.escape(study)}. {intro}<code>ledger view</code> {tail}"
            f"{html.escape(c['source'])}.</p>",
            "<table><thead><tr><th>item</th><th>section</th><th>what to report</th>"
            "<th>answer</th><th>evidence</th></tr></thead><tbody>",
        ]
        md_ids = [""] * len(md)
        ht_ids = [""] * len(ht)
        person: list[str] = []
        for item in c["items"]:
            iid, sec, what = str(item["id"]), str(item["section"]), str(item["text"])
            cells = (
                f"<td>{html.escape(iid)}</td><td>{html.escape(sec)}</td>"
                f"<td>{html.escape(what)}</td>"
            )
            if item.get("fact") is None:
                person.append(iid)
                md.append(f"| {_md(iid)} | {_md(sec)} | {_md(what)} | **{_PERSON}** | – |")
                ht.append(f'<tr>{cells}<td class="person">{_PERSON}</td><td>–</td></tr>')
            else:
                fact = str(item["fact"])
                if fact not in cache:
                    cache[fact] = facts.get(fact)
                text, seqs = cache[fact]
                md.append(
                    f"| {_md(iid)} | {_md(sec)} | {_md(what)} | {_md(text)} | "
                    + ", ".join(f"[seq {s}](/proof/{s})" for s in seqs)
                    + " |"
                )
                ht.append(
                    f"<tr>{cells}<td>{html.escape(text)}</td><td>"
                    + ", ".join(f'<a href="/proof/{s}">seq {s}</a>' for s in seqs)
                    + "</td></tr>"
                )
            md_ids.append(iid)
            ht_ids.append(iid)
        md += ["", f"Items for the authors to complete: {', '.join(person) or 'none'}.", ""]
        ht += ["</tbody></table>", "</body></html>", ""]
        md_ids += ["", "", ""]
        ht_ids += ["", "", ""]
        out[f"{CHECKLIST_DIR}/{c['id']}.md"] = ("\n".join(md), md_ids)
        out[f"{CHECKLIST_DIR}/{c['id']}.html"] = ("\n".join(ht), ht_ids)
    return out


def _compare_file(st: _State, a: Archive, rel: str, want: str, ids: list[str]) -> bool:
    """Compare checklist ``rel`` with what the events give; False if it cannot be read."""
    data = a.file(rel)
    if data is None:
        st.fail(a.absent(rel), where=rel)
        return False
    try:
        got = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        st.fail(f"{rel} is not UTF-8 (byte {exc.start})", where=rel)
        return False
    got_lines, want_lines = got.split("\n"), want.split("\n")
    for number, (g, w) in enumerate(zip(got_lines, want_lines, strict=False), start=1):
        if g != w:
            item = ids[number - 1] if number - 1 < len(ids) else ""
            what = f" (item {item})" if item else ""
            st.fail(
                f"{rel} line {number}{what} says {g[:160]!r}; the events give {w[:160]!r}",
                where=f"{rel} line {number}",
            )
            return True
    if len(got_lines) != len(want_lines):
        st.fail(f"{rel} has {len(got_lines)} lines; the events give {len(want_lines)}", where=rel)
    return True


def check_checklists(a: Archive) -> Check:
    """Each checklist file is, line for line, the one the events give (§2)."""
    st = _State("checklists")
    if not a.of_kind("analysis.result") or not a.of_kind("protocol.locked"):
        return st.check("no analysis.result: no checklist to check")
    expected = expected_files(a)
    if not any(rel in a.files.files or rel in a.files.others for rel in expected):
        st.warn(
            f"the archive has no reporting checklists ({CHECKLIST_DIR}/): exported before "
            "docs/reporting.md existed, so there is nothing to check",
            where=CHECKLIST_DIR,
        )
        return st.check("")
    mechanical = 0
    for rel, (want, ids) in expected.items():
        if _compare_file(st, a, rel, want, ids) and rel.endswith(".md"):
            mechanical += sum(1 for line in want.split("\n") if "](/proof/" in line)
    return st.check(
        f"{len(expected)} checklist files (Markdown and HTML) re-derived line by line from the "
        f"events; {mechanical} mechanical answers, each with the seqs that prove it"
    )
