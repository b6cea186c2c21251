"""The ``flow`` check: the trial flow the archive shows is the one the events give (reporting §1).

The verifier counts, for every trial of the schedule it recomputes from the locked design, what
the events say happened to it (``docs/reporting.md`` §1.1 of the tool): sent or not, answered,
given up or left open, how it was scored and whether the analysis dataset (the first
``analysis.result``'s ``trials_csv``, itself re-derived by the ``reanalysis`` check) left it out
as a control or as unparseable. Those counts must be, cell for cell, ``analysis/tables/flow.csv``
and, line for line, the text of ``analysis/figures/flow.svg`` (§1.2); the report's flow table is
compared by the ``report`` check with :func:`flow_table`.
"""

from __future__ import annotations

import csv
import html
import re
from typing import Any

from verify._archive.view import Archive
from verify._ledgerfile import _State
from verify._reader.names import read_csv
from verify._report import Check

__all__ = [
    "FLOW_CSV",
    "FLOW_FIGURE",
    "FLOW_SVG",
    "check_flow",
    "flow_counts",
    "flow_table",
    "has_flow",
    "svg_lines",
]

FLOW_CSV = "analysis/tables/flow.csv"
FLOW_SVG = "analysis/figures/flow.svg"
FLOW_FIGURE = "flow.png"
NAMES = [
    "scheduled",
    "excluded_unsent",
    "never_sent",
    "requested",
    "given_up",
    "no_outcome",
    "interrupted_attempts",
    "responded",
    "not_scored",
    "parsed",
    "unparseable",
    "refused",
    "control",
    "excluded_unparseable",
    "analysed",
]
HEADER = ["level", "arm", "model", "variant", *NAMES]
_TEXT = re.compile(r"<text\b[^>]*>(.*?)</text>", re.S)
_FORBIDDEN = re.compile(
    r"<\s*(script|foreignObject|image|a|iframe|style)\b|\son[a-z]+\s*=|"
    r"href\s*=\s*\"(?!url\(#)|javascript:",
    re.I,
)

Key = tuple[str, str, str, str]  # (level, arm, model, variant)


def _dataset(a: Archive) -> dict[int, tuple[str, str]] | None:
    """``response_seq`` -> (control, excluded) cells of the recorded analysis dataset."""
    results = a.of_kind("analysis.result")
    data = a.blob(a.blob_ref(results[0], "trials_csv")) if results else None
    if data is None:
        return None
    try:
        rows = list(csv.DictReader(data.decode("utf-8").splitlines()))
    except (UnicodeDecodeError, csv.Error):
        return None
    out: dict[int, tuple[str, str]] = {}
    for r in rows:
        seq = r.get("response_seq") or ""
        if seq.isdigit():
            out[int(seq)] = (r.get("control") or "", r.get("excluded") or "")
    return out


def _outcome(a: Archive, dataset: dict[int, tuple[str, str]]) -> dict[str, list[str]]:
    """Per trial id, the names of the counts it adds 1 to (§1.1), for every trial with events."""
    sent: set[str] = set()
    answered: dict[str, int] = {}
    abandoned: set[str] = set()
    unsent: set[str] = set()
    for seq in a.of_kind("trial.requested"):
        sent.add(str(a.body(seq).get("trial")))
    for seq in a.of_kind("trial.responded"):
        answered[str(a.body(seq).get("trial"))] = seq
    for seq in a.of_kind("trial.failed"):
        if a.body(seq).get("final") is True:
            abandoned.add(str(a.body(seq).get("trial")))
    for seq in a.of_kind("trial.excluded"):
        unsent.add(str(a.body(seq).get("trial")))
    scored = {}
    for seq in a.of_kind("trial.scored"):
        body = a.body(seq)
        if type(body.get("response_seq")) is int:
            scored[body["response_seq"]] = body.get("status")
    out: dict[str, list[str]] = {}
    for tid in sent | unsent:
        if tid not in sent:
            out[tid] = ["excluded_unsent"]
            continue
        if tid not in answered:
            out[tid] = ["requested", "given_up" if tid in abandoned else "no_outcome"]
            continue
        rseq = answered[tid]
        if rseq not in scored:
            out[tid] = ["requested", "responded", "not_scored"]
            continue
        out[tid] = ["requested", "responded", *_scored_counts(scored[rseq], dataset.get(rseq))]
    return out


def _scored_counts(status: Any, row: tuple[str, str] | None) -> list[str]:
    """The last two counts of a scored trial: how it parsed, and whether it was analysed."""
    kind = (
        "parsed"
        if status in ("ok", "partial")
        else "refused"
        if status == "refused"
        else "unparseable"
    )
    control, excluded = row if row is not None else ("False", "False")
    last = (
        "control"
        if control == "True"
        else "excluded_unparseable"
        if excluded == "True"
        else "analysed"
    )
    return [kind, last]


def flow_counts(a: Archive) -> tuple[dict[Key, dict[str, int]], str | None]:
    """Every row of the flow by its key, in the order §1.1 gives, or ``({}, why not)``."""
    ids = a.schedule()
    if not ids:
        return {}, a.schedule_problem or "the schedule cannot be recomputed"
    dataset = _dataset(a)
    if dataset is None:
        return {}, "the analysis dataset (trials_csv of the first analysis.result) is unreadable"
    per_trial = _outcome(a, dataset)
    interrupted: dict[str, int] = {}
    for seq in a.of_kind("trial.failed"):
        body = a.body(seq)
        if body.get("error_type") == "interrupted":
            tid = str(body.get("trial"))
            interrupted[tid] = interrupted.get(tid, 0) + 1
    rows: dict[Key, dict[str, int]] = {}

    def add(key: Key, names: list[str], n_interrupted: int) -> None:
        row = rows.setdefault(key, dict.fromkeys(NAMES, 0))
        for name in names:
            row[name] += 1
        row["interrupted_attempts"] += n_interrupted

    rows[("all", "", "", "")] = dict.fromkeys(NAMES, 0)
    for tid in ids:
        parts = tid.split("|")
        names = ["scheduled", *per_trial.get(tid, ["never_sent"])]
        mine: list[Key] = [("all", "", "", ""), ("arm", parts[0], "", "")]
        if len(parts) >= 4:
            mine.append(("arm-model", parts[0], parts[1], ""))
        if len(parts) == 5:
            mine.append(("arm-model-variant", parts[0], parts[1], parts[3]))
        for key in mine:
            add(key, names, interrupted.get(tid, 0))
    level = {"all": 0, "arm": 1, "arm-model": 2, "arm-model-variant": 3}
    ordered = sorted(rows, key=lambda k: (level[k[0]], k[1], k[2], k[3]))
    return {k: rows[k] for k in ordered}, None


def has_flow(a: Archive) -> bool:
    """Whether the archive carries the trial flow.

    Archives exported before it existed (``docs/reporting.md`` §4) have none of its files and
    no flow section in their report; deleting the files of a newer archive is caught by the
    ``export-coverage`` check, whose signed list names them.
    """
    names = (FLOW_CSV, FLOW_SVG, f"analysis/figures/{FLOW_FIGURE}")
    return any(n in a.files.files or n in a.files.others for n in names)


# ------------------------------------------------------------------------ the diagram's text


def _arm_line(arms: list[tuple[str, int]]) -> list[str]:
    """§1.2's by-arm lines: ``by arm:`` and the first entry, then ` · ` within 60 characters."""
    lines: list[str] = []
    current = ""
    for i, (arm, n) in enumerate(arms):
        entry = f"{arm} {n}"
        if i == 0:
            current = f"by arm: {entry}"
        elif len(current) + 3 + len(entry) <= 60:
            current += f" · {entry}"
        else:
            lines.append(current)
            current = entry
    lines.append(current if arms else "by arm:")
    return lines


def svg_lines(rows: dict[Key, dict[str, int]]) -> list[str]:
    """The text of every box of the diagram, in order (§1.2)."""
    t = rows[("all", "", "", "")]
    arms = [(k[1], v) for k, v in rows.items() if k[0] == "arm"]
    out: list[str] = []

    def box(title: str, names: list[str], extra: list[str]) -> None:
        out.append(f"{title}: {sum(t[n] for n in names)}")
        out.extend(extra)
        out.extend(_arm_line([(arm, sum(c[n] for n in names)) for arm, c in arms]))

    box("Scheduled (the locked schedule)", ["scheduled"], [])
    box(
        "Not sent",
        ["excluded_unsent", "never_sent"],
        [
            f"excluded before sending (trial.excluded): {t['excluded_unsent']}",
            f"never requested: {t['never_sent']}",
        ],
    )
    box("Requested", ["requested"], [])
    box(
        "No response",
        ["given_up", "no_outcome"],
        [
            f"given up (final trial.failed): {t['given_up']}",
            f"no final outcome (interrupted or pending): {t['no_outcome']}",
            f"attempts interrupted (re-sent or open): {t['interrupted_attempts']}",
        ],
    )
    box("Responded", ["responded"], [])
    box("Not scored", ["not_scored"], [])
    box(
        "Scored",
        ["parsed", "unparseable", "refused"],
        [f"parsed {t['parsed']} · unparseable {t['unparseable']} · refused {t['refused']}"],
    )
    box(
        "Excluded from the registered analysis",
        ["control", "excluded_unparseable"],
        [
            f"control trials (analysed separately): {t['control']}",
            f"unparseable (analysis.exclude_unparseable): {t['excluded_unparseable']}",
        ],
    )
    box("Analysed", ["analysed"], [])
    return out


def flow_table(a: Archive) -> tuple[str, list[str], list[list[str]]] | None:
    """The report's flow table (§1.3): caption, header and rows, or ``None`` if underivable."""
    rows, _ = flow_counts(a)
    if not rows:
        return None
    columns = [
        ["scheduled"],
        ["excluded_unsent", "never_sent"],
        ["requested"],
        ["given_up"],
        ["no_outcome"],
        ["responded"],
        ["parsed"],
        ["unparseable"],
        ["refused"],
        ["control"],
        ["excluded_unparseable"],
        ["analysed"],
    ]
    body = [
        [k[1], *(str(sum(c[n] for n in col)) for col in columns)]
        for k, c in rows.items()
        if k[0] == "arm"
    ]
    total = rows[("all", "", "", "")]
    body.append(["all arms", *(str(sum(total[n] for n in col)) for col in columns)])
    return (
        "Trial flow per arm (CONSORT-style): from the locked schedule to the registered analysis",
        [
            "arm",
            "scheduled",
            "not sent",
            "requested",
            "given up",
            "no final outcome",
            "responded",
            "parsed",
            "unparseable",
            "refused",
            "control",
            "excluded",
            "analysed",
        ],
        body,
    )


# ------------------------------------------------------------------------------- the check


def _check_csv(st: _State, a: Archive, rows: dict[Key, dict[str, int]]) -> None:
    data = a.file(FLOW_CSV)
    if data is None:
        st.fail(a.absent(FLOW_CSV), where=FLOW_CSV)
        return
    try:
        table = read_csv(data)
    except (UnicodeDecodeError, csv.Error) as exc:
        st.fail(f"{FLOW_CSV} cannot be read: {exc}", where=FLOW_CSV)
        return
    if not table or table[0] != HEADER:
        st.fail(
            f"{FLOW_CSV} line 1: the header is not {','.join(HEADER)}", where=f"{FLOW_CSV} line 1"
        )
        return
    want = list(rows.items())
    for number, (row, (key, counts)) in enumerate(zip(table[1:], want, strict=False), start=2):
        where = f"{FLOW_CSV} line {number}"
        if len(row) != len(HEADER) or tuple(row[:4]) != key:
            st.fail(
                f"{where}: the row is {','.join(row[:4])!r}; the events give "
                f"{','.join(key)!r} there",
                where=where,
            )
            continue
        for name, cell in zip(NAMES, row[4:], strict=True):
            if cell != str(counts[name]):
                label = "/".join(p for p in key[1:] if p) or "all trials"
                st.fail(
                    f"{where} ({label}): {name} is {cell!r}; the events give {counts[name]}",
                    where=where,
                )
    if len(table) - 1 != len(want):
        st.fail(
            f"{FLOW_CSV} has {len(table) - 1} rows; the events give {len(want)}", where=FLOW_CSV
        )


def _check_svg(st: _State, a: Archive, rows: dict[Key, dict[str, int]]) -> None:
    data = a.file(FLOW_SVG)
    if data is None:
        st.fail(a.absent(FLOW_SVG), where=FLOW_SVG)
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        st.fail(f"{FLOW_SVG} is not UTF-8 (byte {exc.start})", where=FLOW_SVG)
        return
    bad = _FORBIDDEN.search(text)
    if bad is not None or not text.startswith("<?xml") or "<svg" not in text:
        line = text.count("\n", 0, bad.start()) + 1 if bad is not None else 1
        st.fail(
            f"{FLOW_SVG} line {line}: not the diagram's plain SVG (a script, link, "
            "embedded resource or no <svg> element)",
            where=f"{FLOW_SVG} line {line}",
        )
        return
    found = [html.unescape(m.group(1)) for m in _TEXT.finditer(text)]
    want = svg_lines(rows)
    for i, (got, expected) in enumerate(zip(found, want, strict=False), start=1):
        if got != expected:
            st.fail(
                f"{FLOW_SVG} text {i} says {got!r}; the events give {expected!r}", where=FLOW_SVG
            )
            return
    if len(found) != len(want):
        st.fail(
            f"{FLOW_SVG} has {len(found)} text lines; the events give {len(want)}", where=FLOW_SVG
        )


def check_flow(a: Archive) -> Check:
    """``flow.csv`` and ``flow.svg`` carry the counts the events give (§1)."""
    st = _State("flow")
    if not a.of_kind("analysis.result"):
        return st.check("no analysis.result: no trial flow to check")
    if not has_flow(a):
        st.warn(
            f"the archive has no trial flow ({FLOW_CSV}, {FLOW_SVG}): exported before "
            "docs/reporting.md existed, so there is nothing to check",
            where=FLOW_CSV,
        )
        return st.check("")
    rows, problem = flow_counts(a)
    if problem is not None:
        st.fail(f"the trial flow cannot be re-derived: {problem}", where=FLOW_CSV)
        return st.check("")
    _check_csv(st, a, rows)
    _check_svg(st, a, rows)
    t: dict[str, Any] = rows[("all", "", "", "")]
    return st.check(
        f"{FLOW_CSV} ({len(rows)} rows) and every text line of {FLOW_SVG} re-derived from the "
        f"events: {t['scheduled']} scheduled, {t['responded']} responded, {t['analysed']} "
        "analysed"
    )
