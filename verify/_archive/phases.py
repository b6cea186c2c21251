"""The ``phases`` check: a study locked in phases changed nothing an earlier phase locked.

``docs/study-spec.md`` ("Phases") is the contract, re-derived here from the events alone:

* each ``protocol.locked`` after the first names its phase: ``phase.index`` counts from 0,
  ``phase.name`` is new, ``phase.previous`` is the seq of the previous ``protocol.locked`` and
  ``phase.trials`` the number of trials it adds;
* every member an earlier phase locked is carried unchanged: the design, response plan,
  analysis table, prompt, few-shot sets, amendable list, title and blinding commitment; each
  earlier arm, model and hypothesis record (hypotheses keep their phase); the earlier models
  first, in order; the earlier stimuli; the item file's path and format;
* a re-locked file is the spec, or an item file or truth table of which the earlier version is a
  byte prefix (rows appended only); any other locked file is never re-locked;
* the earlier schedule is a prefix of the later one (the ``schedule`` check recomputes each);
* every trial is first requested (and every preflight run as it) after the lock of the phase
  that scheduled it, and no phase is locked after ``scoring.sealed``;
* a new hypothesis is tagged with the new phase and is in no family of an earlier phase.
"""

from __future__ import annotations

from typing import Any

from verify._archive.view import Archive
from verify._ledgerfile import _State
from verify._reader.files import MAX_PARSED_BYTES
from verify._report import Check

__all__ = ["UNCHANGED_MEMBERS", "check_phases"]

UNCHANGED_MEMBERS = (
    "study",
    "title",
    "model",
    "design",
    "response",
    "analysis",
    "amendable",
    "prompt",
    "fewshot",
    "blinding_commitment",
    "witnessing",
    "timestamping",
    "deviations",
    "reviews",
    "privacy",
)
"""The members of ``protocol.locked`` every later phase carries exactly as the first did."""

_GROWABLE = ("items", "truth")


def _kept(st: _State, seq: int, what: str, prev: Any, new: Any, *, by_name: bool = True) -> None:
    """Every entry of an earlier phase's table is in the new one, unchanged.

    Arms and models are taken by name (``by_name``); hypotheses in the order they were listed.
    """
    prev = prev if type(prev) is dict else {}
    new = new if type(new) is dict else {}
    for name, record in sorted(prev.items()) if by_name else prev.items():
        if new.get(name) != record:
            st.fail(
                f"seq {seq}: {what} {name} of an earlier phase is "
                + ("missing" if name not in new else "changed"),
                seq,
            )


def _plan(st: _State, seq: int, prev: dict[str, Any], new: dict[str, Any]) -> None:
    """Every way the plan at ``seq`` changes the earlier phase's plan, as a FAIL."""
    for member in UNCHANGED_MEMBERS:
        if prev.get(member) != new.get(member):
            st.fail(f"seq {seq}: protocol.locked {member} differs from the earlier phase's", seq)
    _kept(st, seq, "arm", prev.get("arms"), new.get("arms"))
    _kept(st, seq, "model", prev.get("models"), new.get("models"))
    order, new_order = prev.get("model_order"), new.get("model_order")
    if type(order) is list and (type(new_order) is not list or new_order[: len(order)] != order):
        st.fail(f"seq {seq}: model_order does not begin with the earlier phase's", seq)
    stimuli, new_stimuli = prev.get("stimuli"), new.get("stimuli")
    if type(stimuli) is list:
        kept = set(new_stimuli) if type(new_stimuli) is list else set()
        gone = sorted(str(s) for s in stimuli if s not in kept)
        if gone:
            st.fail(f"seq {seq}: stimuli of an earlier phase are missing: {', '.join(gone)}", seq)
    items, new_items = prev.get("items"), new.get("items")
    if type(items) is dict:
        new_items = new_items if type(new_items) is dict else {}
        for member in ("path", "format"):
            if items.get(member) != new_items.get(member):
                st.fail(f"seq {seq}: items.{member} differs from the earlier phase's", seq)


def _hypotheses(st: _State, seq: int, prev: dict[str, Any], new: dict[str, Any], name: Any) -> None:
    """Earlier hypotheses unchanged (their phase kept); new ones tagged, in no earlier family."""
    prev_h: list[Any] = prev["hypotheses"] if type(prev.get("hypotheses")) is list else []
    new_h: list[Any] = new["hypotheses"] if type(new.get("hypotheses")) is list else []
    earlier = {h.get("id"): h for h in prev_h if type(h) is dict}
    families = {h.get("family") for h in earlier.values() if h.get("family")}
    now = {h.get("id"): h for h in new_h if type(h) is dict}
    _kept(st, seq, "hypothesis", earlier, now, by_name=False)
    for hid, record in now.items():
        if hid in earlier:
            continue
        if record.get("phase") != name:
            st.fail(
                f"seq {seq}: hypothesis {hid} is new in phase {name!r} but its phase is "
                f"{record.get('phase')!r}",
                seq,
            )
        if record.get("family") in families:
            st.fail(
                f"seq {seq}: hypothesis {hid} is in family {record.get('family')!r} of an "
                "earlier phase (a correction cannot span phases)",
                seq,
            )


def _files(st: _State, a: Archive, prev_seq: int, seq: int) -> None:
    """Files re-locked by the phase at ``seq``: the spec, or a grown item file or truth table."""
    for path, versions in sorted(a.locked_versions.items()):
        before = [v for v in versions if v[2] < prev_seq]
        now = [v for v in versions if prev_seq < v[2] < seq]
        if not before or not now:
            continue
        role = now[-1][0]
        if role == "spec":
            continue
        if role not in _GROWABLE or before[-1][0] != role:
            st.fail(
                f"seq {now[-1][2]}: artifact.locked {path} (role {role}) re-locks a file an "
                "earlier phase locked; only the spec, the item file and truth tables may "
                "change, by appending",
                now[-1][2],
            )
            continue
        old = a.locked_blob(path, prev_seq + 1)
        new = a.locked_blob(path, seq)
        if old is None or new is None or not new.startswith(old):
            st.fail(
                f"seq {now[-1][2]}: artifact.locked {path}: the {role} file locked by the "
                "earlier phase is not a prefix of it (earlier rows edited, removed or "
                "reordered)",
                now[-1][2],
            )


def _schedule(a: Archive, seq: int) -> list[str] | None:
    blob = a.blob(a.blob_ref(seq, "schedule"), MAX_PARSED_BYTES)
    if blob is None:
        return None
    try:
        return blob.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None


def _phase_of(a: Archive, index: int, seq: int, body: dict[str, Any]) -> Any:
    """The phase object of the protocol.locked at ``seq``.

    A study first locked with no phase name: its first lock is the unnamed phase 0.
    """
    phase = body.get("phase")
    if index == 0 and "phase" not in body and _schedule(a, seq) is not None:
        phase = {
            "index": 0,
            "name": None,
            "previous": None,
            "trials": len(_schedule(a, seq) or []),
        }
    return phase


def _check_phase_object(
    st: _State, seqs: list[int], index: int, phase: dict[str, Any], names: set[Any]
) -> None:
    """A phase's index, new name and previous lock (``names``: the names so far, updated)."""
    seq = seqs[index]
    name = phase.get("name")
    if phase.get("index") != index:
        st.fail(f"seq {seq}: phase.index is {phase.get('index')!r}, expected {index}", seq)
    if index and (type(name) is not str or name in names):
        st.fail(f"seq {seq}: phase.name {name!r} is not a new name", seq)
    names.add(name)
    want_prev = seqs[index - 1] if index else None
    if phase.get("previous") != want_prev:
        st.fail(
            f"seq {seq}: phase.previous is {phase.get('previous')!r}, expected {want_prev}", seq
        )


def _check_phase_schedule(
    st: _State, seq: int, phase: dict[str, Any], order: list[str], prev_order: list[str]
) -> None:
    """A phase's schedule extends the earlier phases' by its ``trials``."""
    if order[: len(prev_order)] != prev_order:
        st.fail(f"seq {seq}: the earlier phases' schedule is not a prefix of this phase's", seq)
    if phase.get("trials") != len(order) - len(prev_order):
        st.fail(
            f"seq {seq}: phase.trials is {phase.get('trials')!r}, the schedule adds "
            f"{len(order) - len(prev_order)}",
            seq,
        )


def _check_single(st: _State, a: Archive, seqs: list[int]) -> None:
    """The only protocol.locked, if it names a phase, is phase 0."""
    phase = a.protocol.get("phase")
    if phase is not None and (
        type(phase) is not dict or phase.get("index") != 0 or phase.get("previous") is not None
    ):
        st.fail(
            f"seq {seqs[0]}: the only protocol.locked is not phase 0 (phase {phase!r})", seqs[0]
        )


def _check_each_phase(st: _State, a: Archive, seqs: list[int]) -> dict[str, int]:
    """Each phase's object, schedule, plan, hypotheses and files.

    Return the protocol.locked seq of each trial's phase, by trial.
    """
    names: set[Any] = set()
    first_of: dict[str, int] = {}
    prev_order: list[str] = []
    for index, seq in enumerate(seqs):
        body = a.body(seq)
        phase = _phase_of(a, index, seq, body)
        if type(phase) is not dict:
            st.fail(f"seq {seq}: protocol.locked has no phase object", seq)
            continue
        _check_phase_object(st, seqs, index, phase, names)
        order = _schedule(a, seq)
        if order is None:
            st.fail(f"seq {seq}: the schedule blob is missing or unreadable", seq)
            continue
        _check_phase_schedule(st, seq, phase, order, prev_order)
        for trial in order[len(prev_order) :]:
            first_of.setdefault(trial, seq)
        if index:
            prev = a.body(seqs[index - 1])
            _plan(st, seq, prev, body)
            _hypotheses(st, seq, prev, body, phase.get("name"))
            _files(st, a, seqs[index - 1], seq)
        prev_order = order
    return first_of


def check_phases(a: Archive) -> Check:
    """A study locked in phases changed nothing an earlier phase locked (module docstring)."""
    st = _State("phases")
    seqs = a.phase_seqs
    if len(seqs) < 2:
        _check_single(st, a, seqs)
        return st.check("one protocol.locked: the study is locked in one phase")
    sealed = a.of_kind("scoring.sealed")
    if sealed and sealed[0] < seqs[-1]:
        st.fail(
            f"seq {seqs[-1]}: a phase is locked after scoring.sealed (seq {sealed[0]})", seqs[-1]
        )
    first_of = _check_each_phase(st, a, seqs)
    for kind, member in (("trial.requested", "trial"), ("run.preflight", "as_trial")):
        for seq in a.of_kind(kind):
            named = a.body(seq).get(member)
            lock = first_of.get(named) if type(named) is str else None
            if lock is not None and seq < lock:
                st.fail(
                    f"seq {seq}: {kind} of trial {named} comes before the lock of its "
                    f"phase (protocol.locked seq {lock})",
                    seq,
                )
    return st.check(
        f"{len(seqs)} phases, each locked (with its registration checkpoint) before its first "
        "trial; no phase changes an earlier phase's arms, models, hypotheses, design, files or "
        "schedule, and none is locked after scoring was sealed"
    )
