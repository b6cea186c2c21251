"""The ``derived`` check: the human-readable tables and the README say what the events say."""

from __future__ import annotations

import csv
import io
import itertools
import json
from collections.abc import Iterable, Iterator
from typing import Any

from verify._archive.preflight import identity_notice
from verify._archive.view import Archive
from verify._envelope import is_hex64
from verify._ledgerfile import _State
from verify._report import Check

__all__ = ["check_derived"]


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def _compare_csv(
    st: _State,
    a: Archive,
    rel: str,
    header: list[str],
    want: Iterable[list[str]],
    same: Any = None,
    count: int | None = None,
) -> None:
    """Compare the CSV file ``rel`` with the rows ``want`` (``count`` of them, or ``len(want)``).

    Neither side is held whole: the file's rows are read twice (counted, then compared) and
    ``want`` may be a generator, made row by row (and made to its end, so an event that cannot
    be read stops the check wherever the file ends).
    """
    wanted = len(want) if count is None else count  # type: ignore[arg-type]
    expected_rows = iter(want)
    try:
        _compare_rows(st, a, rel, header, expected_rows, wanted, same)
    finally:
        for _ in expected_rows:
            pass


def _compare_rows(
    st: _State,
    a: Archive,
    rel: str,
    header: list[str],
    want: Iterator[list[str]],
    wanted: int,
    same: Any,
) -> None:
    data = a.file(rel)
    if data is None:
        st.fail(a.absent(rel), where=rel)
        return
    try:
        text = data.decode("utf-8")
        del data
        lines = -1
        first: list[str] | None = None
        for lines, row in enumerate(csv.reader(io.StringIO(text, newline=""))):
            if lines == 0:
                first = row
    except (UnicodeDecodeError, csv.Error) as exc:
        st.fail(f"{rel} cannot be read: {exc}", where=rel)
        return
    if first != header:
        st.fail(f"{rel} line 1: header is not {','.join(header)}", where=f"{rel} line 1")
        return
    if lines != wanted:
        st.fail(f"{rel} has {lines} rows, the events give {wanted}", where=rel)
    rows = itertools.islice(csv.reader(io.StringIO(text, newline="")), 1, None)
    for number, (row, expected) in enumerate(zip(rows, want, strict=False), start=2):
        if row != expected and not (same is not None and same(row, expected)):
            where = f"{rel} line {number}"
            st.fail(
                f"{where}: {','.join(row)!r} is not {','.join(expected)!r} from the events",
                where=where,
            )


def _outcomes(a: Archive, kinds: tuple[str, str]) -> dict[int, int]:
    """The seq of each request's (last) outcome event among ``kinds``, by request seq."""
    outcome: dict[int, int] = {}
    for seq in sorted(a.of_kind(kinds[0]) + a.of_kind(kinds[1])):
        rseq = a.body(seq).get("request_seq")
        if type(rseq) is int:
            outcome[rseq] = seq
    return outcome


_STEPS_HEADER = [
    "request_seq",
    "call",
    "step",
    "model",
    "item",
    "trial",
    "attempt",
    "request_sha256",
    "outcome",
    "outcome_seq",
    "response_sha256",
    "vote",
    "error_type",
    "final",
]


def _compare_steps(st: _State, a: Archive) -> None:
    """``trials/steps.csv``: each step attempt, its outcome and its re-parsed vote (§1)."""
    from verify._archive.steps import replay_of

    study, _ = a.study()
    replay = replay_of(a, study)[0] if study is not None else None
    if replay is None:
        st.fail(
            "trials/steps.csv cannot be re-derived: the locked steps cannot be read",
            where="trials/steps.csv",
        )
        return
    outcome = _outcomes(a, ("step.responded", "step.failed"))
    responses: dict[str, int] = {}
    rows = [
        _step_row(a, replay.plans, seq, outcome.get(seq), responses)
        for seq in a.of_kind("step.requested")
    ]
    _compare_csv(st, a, "trials/steps.csv", _STEPS_HEADER, rows)


def _step_row(
    a: Archive, plans: dict[str, Any], seq: int, out: int | None, responses: dict[str, int]
) -> list[str]:
    """The ``trials/steps.csv`` row of the step.requested at ``seq``, its outcome at ``out``.

    ``responses`` counts each call's responses so far (its vote is final once parsed or out
    of retries).
    """
    b = a.body(seq)
    kind = str(a.envs.kind(out)) if out is not None else ""
    ob = a.body(out) if out is not None else {}
    plan = plans.get(str(b.get("step")))
    vote, final = "", False
    if kind == "step.responded" and plan is not None and out is not None:
        vote, final = _step_vote(a, plan, str(b.get("call")), out, ob, responses)
    elif out is not None:
        final = ob.get("final") is True
    return [
        _cell(seq),
        _cell(b.get("call")),
        _cell(b.get("step")),
        _cell(b.get("model")),
        _cell(b.get("item")),
        _cell(b.get("trial")) if "trial" in b else "",
        _cell(b.get("attempt")),
        _cell(b.get("request_sha256")),
        kind.split(".")[1] if kind else "none",
        _cell(out),
        _cell(a.blob_ref(out, "response")) if kind == "step.responded" and out else "",
        vote,
        _cell(ob.get("error_type")) if kind == "step.failed" else "",
        str(final),
    ]


def _step_vote(
    a: Archive, plan: Any, call: str, out: int, ob: dict[str, Any], responses: dict[str, int]
) -> tuple[str, bool]:
    """(the re-parsed vote, whether it is final) of a step.responded at ``out``."""
    from verify._steps import parse, slot_text, text_of

    raw = a.blob(a.blob_ref(out, "response")) or b""
    value = parse(plan, text_of(raw, str(ob.get("format"))))
    responses[call] = responses.get(call, 0) + 1
    vote = "" if value is None else str(slot_text(value, None))
    return vote, value is not None or responses[call] >= plan.retry + 1


def _check_readme_arms(st: _State, a: Archive, text: list[str]) -> None:
    """The README's arm table gives each arm's composed prompt SHA-256 as locked."""
    arms = a.protocol.get("arms")
    arms = arms if type(arms) is dict else {}
    for number, line in enumerate(text, start=1):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| ") or len(cells) != 4 or cells[0] not in arms:
            continue
        locked = arms[cells[0]].get("sha256") if type(arms[cells[0]]) is dict else None
        said = cells[3].strip("`")
        if is_hex64(said) and said != locked:
            where = f"README.md line {number}"
            st.fail(
                f"{where}: arm {cells[0]} has composed prompt SHA-256 {said}, protocol.locked "
                f"says {locked}",
                where=where,
            )


def _check_readme_study(st: _State, a: Archive, text: list[str]) -> None:
    """The README's arm table and simulated-data notice say what the events say."""
    _check_readme_arms(st, a, text)
    notice = identity_notice(a)
    if notice is not None and f"**{notice}**" not in text:
        st.fail(
            "README.md does not carry the notice that a locked model's identity is not "
            f"confirmed by its server, which the run.started events call for: {notice[:160]!r}",
            where="README.md",
        )
    simulated = [s for s in a.of_kind("run.started") if a.body(s).get("simulated") is True]
    if simulated and "simulated model" not in "\n".join(text).lower():
        st.fail(
            f"README.md does not say the responses are simulated (run.started seq "
            f"{simulated[0]} has simulated: true)",
            simulated[0],
            where="README.md",
        )


_SCORE_MEMBERS = (
    "response_seq",
    "arm_code",
    "stimulus",
    "status",
    "n_items",
    "n_answered",
    "n_correct",
    "scores_sha256",
)


def _compare_scores(st: _State, a: Archive) -> int:
    """``scores/scores.csv``: one row per trial.scored; return how many."""
    seqs = a.of_kind("trial.scored")
    scores = ([_cell(seq)] + [_cell(a.body(seq).get(k)) for k in _SCORE_MEMBERS] for seq in seqs)
    header = ["scored_seq", *_SCORE_MEMBERS]
    _compare_csv(st, a, "scores/scores.csv", header, scores, count=len(seqs))
    return len(seqs)


_ATTEMPTS_HEADER = [
    "request_seq",
    "position",
    "trial",
    "attempt",
    "request_sha256",
    "outcome",
    "outcome_seq",
    "response_sha256",
    "error_type",
    "final",
]


def _attempt_row(a: Archive, seq: int, out: int | None) -> list[str]:
    """The ``trials/attempts.csv`` row of the trial.requested at ``seq``, its outcome at ``out``."""
    b = a.body(seq)
    kind = a.envs.kind(out) if out is not None else None
    ob = a.body(out) if out is not None else {}
    final = kind == "trial.responded" or bool(ob.get("final")) if out is not None else False
    return [
        _cell(seq),
        _cell(b.get("position")),
        _cell(b.get("trial")),
        _cell(b.get("attempt")),
        _cell(b.get("request_sha256")),
        str(kind).split(".")[1] if kind else "none",
        _cell(out),
        _cell(a.blob_ref(out, "response")) if out is not None else "",
        _cell(ob.get("error_type")) if kind == "trial.failed" else "",
        str(final),
    ]


def _compare_attempts(st: _State, a: Archive) -> int:
    """``trials/attempts.csv``: one row per trial.requested and its outcome; return how many."""
    outcome = _outcomes(a, ("trial.responded", "trial.failed"))
    seqs = a.of_kind("trial.requested")
    attempts = (_attempt_row(a, seq, outcome.get(seq)) for seq in seqs)
    _compare_csv(st, a, "trials/attempts.csv", _ATTEMPTS_HEADER, attempts, count=len(seqs))
    return len(seqs)


def _same_verdict(row: list[str], want: list[str]) -> bool:
    """Two verdicts.csv rows are the same, ``decided_by`` compared as JSON."""
    try:
        parsed = json.loads(row[4]) if row[4] else None
        return row[:4] + row[5:] == want[:4] + want[5:] and parsed == (
            json.loads(want[4]) if want[4] else None
        )
    except (ValueError, IndexError, RecursionError):
        return False


def _compare_verdicts(st: _State, a: Archive, hyps: list[dict[str, Any]]) -> None:
    """``analysis/tables/verdicts.csv``: one row per hypothesis's analysis.result."""
    verdicts = [
        [
            _cell(r.get("hypothesis")),
            _cell(r.get("test")),
            _cell(r.get("status")),
            _cell(r.get("verdict")),
            json.dumps(r["decided_by"], sort_keys=True) if r.get("decided_by") else "",
            _cell(r.get("error")) if r.get("error") else "",
        ]
        for r in hyps
    ]
    _compare_csv(
        st,
        a,
        "analysis/tables/verdicts.csv",
        ["hypothesis", "test", "status", "verdict", "decided_by", "error"],
        verdicts,
        _same_verdict,
    )


def _check_readme_verdicts(st: _State, text: list[str], hyps: list[dict[str, Any]]) -> None:
    """The README's verdict table: one row per hypothesis, with its test and verdict."""
    table = {}
    for number, line in enumerate(text, start=1):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 3 and cells[0] not in ("hypothesis",):
            table[cells[0]] = (cells[1], cells[2], number)
    for r in hyps:
        h = str(r.get("hypothesis"))
        got = table.pop(h, None)
        want_cells = (_cell(r.get("test")), _cell(r.get("verdict")))
        if got is None:
            st.fail(f"README.md has no verdict row for {h}", where="README.md")
        elif got[:2] != want_cells:
            st.fail(
                f"README.md line {got[2]}: {h} says {got[0]} / {got[1]}, the "
                f"analysis.result says {want_cells[0]} / {want_cells[1]}",
                where=f"README.md line {got[2]}",
            )
    for h, (_, _, number) in table.items():
        if not h.startswith("---"):
            st.fail(
                f"README.md line {number}: verdict row {h} has no analysis.result",
                where=f"README.md line {number}",
            )


def check_derived(a: Archive) -> Check:
    """The human-readable tables and the README verdicts say what the events say."""
    st = _State("derived")
    n_scores = _compare_scores(st, a)
    n_attempts = _compare_attempts(st, a)
    if "steps" in a.protocol:
        _compare_steps(st, a)
    results = [a.body(seq) for seq in a.of_kind("analysis.result")]
    hyps = [r for r in results if r.get("hypothesis")]
    _compare_verdicts(st, a, hyps)
    readme = a.file("README.md")
    if readme is None:
        st.fail(a.absent("README.md"), where="README.md")
    else:
        text = readme.decode("utf-8", errors="replace").split("\n")
        _check_readme_verdicts(st, text, hyps)
        _check_readme_study(st, a, text)
    return st.check(
        f"scores/scores.csv, trials/attempts.csv, analysis/tables/verdicts.csv and the README "
        f"(verdicts, arm hashes, simulated-data notice) match the events ({n_scores} scores, "
        f"{n_attempts} attempts, {len(hyps)} verdicts)"
    )
