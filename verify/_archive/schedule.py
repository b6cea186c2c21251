"""The ``schedule`` check: the order recomputed from the locked seed is the order executed."""

from __future__ import annotations

import csv
from collections.abc import Callable
from typing import Any

from verify._archive.view import Archive
from verify._ledgerfile import _State
from verify._privacy import Withheld
from verify._prompts import parse_trial_id, trial_variant
from verify._reader.files import MAX_PARSED_BYTES
from verify._reader.names import read_csv, sha_hex
from verify._report import Check, Status

__all__ = [
    "SCHEDULE_HEADER",
    "SCHEDULE_HEADER_WITH_MODEL",
    "SCHEDULE_HEADER_WITH_VARIANT",
    "check_schedule",
]

SCHEDULE_HEADER = ("position", "arm_code", "stimulus", "rep", "trial")
"""The header of ``trials/schedule.csv`` (``docs/archive-format.md`` §1)."""
SCHEDULE_HEADER_WITH_MODEL = ("position", "arm_code", "model", "stimulus", "rep", "trial")
"""The header of a study with ``[models]``: the model's name in its own column."""
SCHEDULE_HEADER_WITH_VARIANT = (
    "position",
    "arm_code",
    "model",
    "stimulus",
    "variant",
    "rep",
    "trial",
)
"""The header of a study with variants (``docs/variants.md`` §4; model empty with ``[model]``)."""


def _id_form(a: Archive, ids: list[str]) -> tuple[bool, bool]:
    """Whether trial ids name a model (multi) and a variant (varied)."""
    try:
        study, _ = a.study()
    except Withheld:  # a public archive (docs/privacy.md): the trial ids' form says it
        study = None
    if study is None and a.signed_schedule is not None:
        parts = len(ids[0].split("|"))
        return parts == 4, parts == 5
    multi = study is not None and study.multi_model
    varied = study is not None and study.variants is not None
    return multi, varied


def _check_locked(a: Archive, st: _State, pseq: int, ids: list[str]) -> None:
    """protocol.locked's schedule_sha256, trials and schedule blob are the recomputed schedule."""
    sched = "".join(t + "\n" for t in ids).encode("utf-8")
    digest = sha_hex(sched)
    if a.protocol.get("schedule_sha256") != digest:
        st.fail(
            f"seq {pseq}: the recomputed schedule hashes to {digest}, but protocol.locked "
            f"schedule_sha256 is {a.protocol.get('schedule_sha256')}",
            pseq,
        )
    if a.protocol.get("trials") != len(ids):
        st.fail(
            f"seq {pseq}: trials is {a.protocol.get('trials')!r}, the design has {len(ids)}", pseq
        )
    ref = a.blob_ref(pseq, "schedule")
    blob = a.blob(ref, MAX_PARSED_BYTES)
    if blob is None:
        st.fail(f"seq {pseq}: the schedule blob is missing or altered", pseq, where=f"blobs/{ref}")
    elif blob != sched:
        st.fail(
            f"seq {pseq}: the schedule blob is not the recomputed schedule",
            pseq,
            where=f"blobs/{ref}",
        )


def _schedule_rows(a: Archive, st: _State) -> list[list[str]] | None:
    """The rows of trials/schedule.csv (``[[]]`` when unreadable), or None when it is absent."""
    data = a.file("trials/schedule.csv")
    if data is None:
        st.fail(a.absent("trials/schedule.csv"), where="trials/schedule.csv")
        return None
    try:
        return read_csv(data)
    except (UnicodeDecodeError, csv.Error) as exc:
        st.fail(f"trials/schedule.csv cannot be read: {exc}", where="trials/schedule.csv")
        return [[]]


def _check_schedule_csv(a: Archive, st: _State, ids: list[str], multi: bool, varied: bool) -> None:
    """trials/schedule.csv lists the schedule in order, with the revealed arm codes."""
    rows = _schedule_rows(a, st)
    if rows is None:
        return
    header = rows[0] if rows else []
    if varied:
        want_header = list(SCHEDULE_HEADER_WITH_VARIANT)
    else:
        want_header = list(SCHEDULE_HEADER_WITH_MODEL if multi else SCHEDULE_HEADER)
    if header != want_header:
        st.fail(
            f"trials/schedule.csv line 1: header is not {','.join(want_header)}",
            where="trials/schedule.csv line 1",
        )
    body_rows = rows[1:]
    if len(body_rows) != len(ids):
        st.fail(
            f"trials/schedule.csv has {len(body_rows)} rows, the schedule {len(ids)}",
            where="trials/schedule.csv",
        )
    codes = a.revealed_codes()
    for i, (row, tid) in enumerate(zip(body_rows, ids, strict=False), start=1):
        arm, model, stim, rep = parse_trial_id(tid, multi, varied)
        want_row = [str(i), codes.get(arm, "")]
        want_row += [model or ""] if multi or varied else []
        want_row += [stim, *([str(trial_variant(tid))] if varied else []), rep, tid]
        if row != want_row:
            where = f"trials/schedule.csv line {i + 1}"
            st.fail(f"{where}: {','.join(row)!r} should be {','.join(want_row)!r}", where=where)


def _check_requested(a: Archive, st: _State, ids: list[str], multi: bool, varied: bool) -> None:
    """Each trial.requested names a scheduled trial, its position and its id's parts."""
    position = {t: i for i, t in enumerate(ids, start=1)}
    for seq in a.of_kind("trial.requested"):
        body = a.body(seq)
        trial: Any = body.get("trial")
        if trial not in position:
            st.fail(f"seq {seq}: trial {trial!r} is not in the locked schedule", seq)
            continue
        if body.get("position") != position[trial]:
            st.fail(
                f"seq {seq}: trial {trial} has position {body.get('position')!r}, its place in "
                f"the schedule is {position[trial]}",
                seq,
            )
        arm, model, stim, rep = parse_trial_id(str(trial), multi, varied)
        if (body.get("arm"), body.get("stimulus"), str(body.get("rep"))) != (arm, stim, rep):
            st.fail(f"seq {seq}: arm/stimulus/rep do not match the trial id {trial}", seq)
        if body.get("variant") != trial_variant(str(trial)):
            st.fail(
                f"seq {seq}: variant {body.get('variant')!r} does not match the trial id {trial}",
                seq,
            )
        if ("model" in body or multi) and body.get("model") != model:
            st.fail(
                f"seq {seq}: model {body.get('model')!r} does not match the trial id {trial}", seq
            )


def _stage_of(a: Archive) -> Callable[[Any], str]:
    """A trial's stage by its arm: ``data``, ``second`` or ``first``.

    A data arm's trials (docs/trials.md §6) are recorded apart, first: their own stage.
    Second-stage trials (an arm with ``after``, docs/prompts.md §9) run after their first
    stages, in a later round: each stage is in ascending position on its own.
    """
    arms = a.protocol.get("arms") if type(a.protocol.get("arms")) is dict else {}
    second = {n for n, info in (arms or {}).items() if type(info) is dict and "after" in info}
    data_arms = {
        n for n, info in (arms or {}).items() if type(info) is dict and "response_from" in info
    }

    def stage(arm: Any) -> str:
        return "data" if arm in data_arms else ("second" if arm in second else "first")

    return stage


def _check_order(a: Archive, st: _State) -> None:
    """Within one run session, each stage's trials are first requested in ascending position.

    docs/randomization.md: "Trials run in ascending key order"; retries (attempt > 1) and a
    new session may go back. Concurrent sessions (PostgreSQL workers, docs/trials.md §8)
    interleave: each request is ordered within the session it names (its ``session``), else
    the latest run.started's.
    """
    stage_of = _stage_of(a)
    latest: int | None = None
    by_session: dict[int | None, dict[str, tuple[int, int]]] = {}
    for seq in sorted(a.of_kind("run.started") + a.of_kind("trial.requested")):
        if a.envs.kind(seq) == "run.started":
            latest = seq
            by_session[seq] = {}
            continue
        body = a.body(seq)
        pos = body.get("position")
        if body.get("attempt") != 1 or type(pos) is not int:
            continue
        named = body.get("session")
        session = named if type(named) is int and named in by_session else latest
        lasts = by_session.setdefault(session, {})  # stage -> (position, seq), latest first try
        stage = stage_of(body.get("arm"))
        last = lasts.get(stage)
        if last is not None and pos < last[0]:
            st.fail(
                f"seq {seq}: trial {body.get('trial')} (position {pos}) was first requested "
                f"after position {last[0]} (seq {last[1]}) in the same run session "
                f"(run.started seq {session}): not the locked execution order",
                seq,
            )
        else:
            lasts[stage] = (pos, seq)


def check_schedule(a: Archive) -> Check:
    """The schedule recomputed from the locked seed is the locked, listed and executed one."""
    st = _State("schedule")
    pseq = a.protocol_seq
    if pseq is None:
        st.fail("no protocol.locked: the schedule cannot be recomputed")
        return st.check("")
    ids = a.schedule()
    if not ids:
        why = a.schedule_problem or "protocol.locked lacks a usable design, arms or stimuli"
        st.fail(f"seq {pseq}: {why}", pseq)
        return st.check("")
    multi, varied = _id_form(a, ids)
    _check_locked(a, st, pseq, ids)
    _check_schedule_csv(a, st, ids, multi, varied)
    _check_requested(a, st, ids, multi, varied)
    _check_order(a, st)
    if a.signed_schedule is not None:
        check = st.check(
            f"schedule of {len(ids)} trials: the signed schedule blob's trial ids are in the "
            "locked seed's order and equal schedule_sha256, trials/schedule.csv, every "
            "request's position and, within each run session, the order in which trials were "
            f"first requested; not re-derived: the trial set, from {a.signed_schedule}, which "
            "the public archive withholds"
        )
        if check.status is Status.PASS:
            return Check("schedule", Status.LIMITED, check.reason, where=a.signed_schedule)
        return check
    return st.check(
        f"schedule of {len(ids)} trials recomputed from the locked seed, arms, models, "
        "replicates and items: equals schedule_sha256, "
        "the schedule blob, trials/schedule.csv, every request's position and, within each run "
        "session, the order in which trials were first requested"
    )
