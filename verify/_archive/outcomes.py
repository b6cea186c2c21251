"""The ``outcomes`` and ``blinding`` checks: one final outcome per trial; sealed, then unblinded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verify._archive.view import Archive
from verify._canonical import canonical_json
from verify._ledgerfile import _State
from verify._reader.names import TRIAL_KINDS, sha_hex
from verify._report import Check

__all__ = ["check_blinding", "check_outcomes"]


def _check_attempts(st: _State, requests: Mapping[int, dict[str, Any]]) -> None:
    """Each trial's requests count their attempts 1, 2, ... in seq order."""
    attempts: dict[str, int] = {}
    for seq in sorted(requests):
        body = requests[seq]
        tid = body.get("trial")
        want = attempts.get(str(tid), 0) + 1
        if body.get("attempt") != want:
            st.fail(
                f"seq {seq}: trial {tid} attempt is {body.get('attempt')!r}, expected {want}", seq
            )
        attempts[str(tid)] = want


def _check_outcome_events(
    a: Archive, st: _State, requests: Mapping[int, dict[str, Any]]
) -> tuple[dict[int, list[int]], dict[str, list[int]]]:
    """Each trial.responded or trial.failed answers an earlier request of its trial and attempt.

    Return each request's outcomes by request seq, and each trial's final outcomes by trial.
    """
    outcomes: dict[int, list[int]] = {seq: [] for seq in requests}
    final: dict[str, list[int]] = {}
    for seq in sorted(a.of_kind("trial.responded") + a.of_kind("trial.failed")):
        kind = a.envs.kind(seq)
        body = a.body(seq)
        rseq = body.get("request_seq")
        if type(rseq) is not int or rseq not in requests or rseq >= seq:
            st.fail(f"seq {seq}: {kind} request_seq {rseq!r} is no earlier trial.requested", seq)
            continue
        outcomes[rseq].append(seq)
        req = requests[rseq]
        if body.get("trial") != req.get("trial") or body.get("attempt") != req.get("attempt"):
            st.fail(f"seq {seq}: {kind} trial/attempt differ from its request (seq {rseq})", seq)
        if kind == "trial.responded":
            ref = a.blob_ref(seq, "response")
            if ref is None or not a.blob_ok(ref):
                st.fail(
                    f"seq {seq}: response blob {ref} is missing or altered",
                    seq,
                    where=f"blobs/{ref}",
                )
        if kind == "trial.responded" or body.get("final") is True:
            final.setdefault(str(req.get("trial")), []).append(seq)
    return outcomes, final


def _check_one_outcome(
    st: _State, requests: Mapping[int, dict[str, Any]], outcomes: dict[int, list[int]]
) -> None:
    """Each request has exactly one outcome."""
    for rseq, outs in outcomes.items():
        if not outs:
            st.fail(
                f"seq {rseq}: trial.requested ({requests[rseq].get('trial')}) has no outcome", rseq
            )
        elif len(outs) > 1:
            st.fail(
                f"seq {rseq}: trial.requested has {len(outs)} outcomes (seqs "
                f"{', '.join(map(str, outs))})",
                outs[1],
            )


def _check_after_final(
    st: _State, requests: Mapping[int, dict[str, Any]], final: dict[str, list[int]]
) -> None:
    """No trial is requested again after its final outcome."""
    for seq, body in requests.items():
        first_final = final.get(str(body.get("trial")), [])
        if first_final and first_final[0] < seq:
            st.fail(
                f"seq {seq}: trial {body.get('trial')} requested after its final outcome "
                f"(seq {first_final[0]})",
                seq,
            )


def _check_one_final(st: _State, ids: list[str], final: dict[str, list[int]]) -> None:
    """Each scheduled trial has exactly one final outcome, and no other trial has one."""
    for i, tid in enumerate(ids, start=1):
        finals = final.get(tid, [])
        if not finals:
            st.fail(f"trial {tid} (position {i}) has no final outcome", where=f"trial {tid}")
        elif len(finals) > 1:
            st.fail(
                f"trial {tid} (position {i}) has {len(finals)} final outcomes (seqs "
                f"{', '.join(map(str, finals))})",
                finals[1],
            )
    for tid in sorted(set(final) - set(ids)):
        st.fail(f"trial {tid!r} has an outcome but is not in the schedule", final[tid][0])


def check_outcomes(a: Archive) -> Check:
    """Every request has one outcome; every scheduled trial exactly one final outcome."""
    st = _State("outcomes")
    requests = a.bodies("trial.requested")
    _check_attempts(st, requests)
    outcomes, final = _check_outcome_events(a, st, requests)
    _check_one_outcome(st, requests, outcomes)
    _check_after_final(st, requests, final)
    for seq in a.of_kind("trial.excluded"):  # docs/trials.md §5: the steps check justifies it
        final.setdefault(str(a.body(seq).get("trial")), []).append(seq)
    for values in final.values():
        values.sort()
    ids = a.schedule()
    _check_one_final(st, ids, final)
    sessions = _check_sessions(a, st)
    return st.check(
        f"{len(requests)} requests have one outcome each; each of {len(ids)} scheduled trials has "
        f"exactly one final outcome; every trial and step event lies inside one of {sessions} "
        "run session(s)"
    )


SESSION_KINDS = (
    "trial.requested",
    "trial.responded",
    "trial.failed",
    "trial.excluded",
    "batch.submitted",
    "step.requested",
    "step.responded",
    "step.failed",
)
"""Kinds only ``ledger run`` records, inside a run session (``docs/trials.md`` §1)."""


def _open_sessions(sessions: list[int]) -> str:
    if not sessions:
        return "no session is open"
    if len(sessions) == 1:
        return f"the open session is run.started seq {sessions[0]}"
    return f"the open sessions are run.started seqs {', '.join(map(str, sessions))}"


def _concurrent(a: Archive, st: _State, seq: int, opened: list[int]) -> list[int]:
    """The sessions a ``run.started`` at ``seq`` keeps open beside itself (``concurrent``).

    Without the member, none: the sessions still open were killed before their stop and end
    here. With it, a sorted list of distinct run sessions, each of them open here.
    """
    listed = a.body(seq).get("concurrent")
    if listed is None:
        return []
    if (
        type(listed) is not list
        or not listed
        or any(type(s) is not int for s in listed)
        or listed != sorted(set(listed))
    ):
        st.fail(
            f"seq {seq}: run.started concurrent {listed!r} is not a sorted list of distinct "
            "run session seqs",
            seq,
        )
        return []
    closed = [s for s in listed if s not in opened]
    if closed:
        st.fail(
            f"seq {seq}: run.started lists run session(s) {', '.join(map(str, closed))} as "
            f"concurrent, but {_open_sessions(opened)}",
            seq,
        )
    return [s for s in listed if s in opened]


def _stop(st: _State, seq: int, named: Any, known: bool, opened: list[int]) -> None:
    """A run.stopped closes the open session it names."""
    if not isinstance(named, int) or not known:
        st.fail(
            f"seq {seq}: run.stopped names run session {named!r}, but {_open_sessions(opened)}",
            seq,
        )
    else:
        opened.remove(named)


def _check_sessions(a: Archive, st: _State) -> int:
    """Every event of :data:`SESSION_KINDS` lies inside a run session; returns the sessions.

    A session runs from its ``run.started`` to the ``run.stopped`` that names it, or to the
    next ``run.started`` that does not list it as ``concurrent`` (a session killed before its
    stop). Sessions overlap only where a ``run.started`` says so: a PostgreSQL worker that
    starts beside live workers lists their sessions (``docs/trials.md`` §8). An event outside
    every session was not recorded by ``ledger run`` as ``docs/trials.md`` describes, and
    without its session it escapes the session's promised checkpoints (and their witnesses);
    an event naming a ``session`` must name one that is open where it lies.
    """
    marks = sorted(
        [(seq, "run.started") for seq in a.of_kind("run.started")]
        + [(seq, "run.stopped") for seq in a.of_kind("run.stopped")]
        + [(seq, kind) for kind in SESSION_KINDS for seq in a.of_kind(kind)]
    )
    opened: list[int] = []  # the open sessions, by run.started seq
    for seq, kind in marks:
        if kind == "run.started":
            opened = [*_concurrent(a, st, seq, opened), seq]
            continue
        named = a.body(seq).get("session")
        known = isinstance(named, int) and not isinstance(named, bool) and named in opened
        if kind == "run.stopped":
            _stop(st, seq, named, known, opened)
        elif not opened:
            st.fail(
                f"seq {seq}: {kind} lies outside every run session (no run.started since the "
                "last run.stopped): trial and step events are recorded by ledger run, inside "
                "a session, whose checkpoints the study promises",
                seq,
            )
        elif named is not None and not known:
            where = (
                f"the session of run.started seq {opened[0]}"
                if len(opened) == 1
                else f"the sessions of run.started seqs {', '.join(map(str, opened))}"
            )
            st.fail(f"seq {seq}: {kind} names run session {named!r}, but lies in {where}", seq)
    return len(a.of_kind("run.started"))


def _check_counts(st: _State, seals: list[int], revealed: list[int]) -> None:
    """Exactly one scoring.sealed and one blinding.revealed."""
    if len(seals) != 1:
        st.fail(
            f"the ledger has {len(seals)} scoring.sealed events; exactly one is required",
            seals[1] if len(seals) > 1 else None,
        )
    if len(revealed) != 1:
        st.fail(
            f"the ledger has {len(revealed)} blinding.revealed events; exactly one is required",
            revealed[1] if len(revealed) > 1 else None,
        )


def _secret(a: Archive, st: _State, reveal: int) -> bytes | None:
    """The revealed secret, checked against the locked commitment; None if it is not hex."""
    commitment = a.protocol.get("blinding_commitment")
    rbody = a.body(reveal)
    secret_hex = rbody.get("secret_hex")
    try:
        secret = bytes.fromhex(secret_hex) if type(secret_hex) is str else None
    except ValueError:
        secret = None
    if secret is None:
        st.fail(f"seq {reveal}: secret_hex is not hex", reveal)
        return None
    if sha_hex(secret) != commitment:
        st.fail(
            f"seq {reveal}: SHA-256(secret) {sha_hex(secret)} does not open the commitment "
            f"{commitment} of protocol.locked (seq {a.protocol_seq})",
            reveal,
        )
    if rbody.get("commitment") != commitment:
        st.fail(f"seq {reveal}: commitment differs from protocol.locked's", reveal)
    return secret


def _check_scores(a: Archive, st: _State, codes: dict[str, str]) -> list[tuple[int, str]]:
    """Every trial.scored: one per trial.responded, the code of its trial's arm.

    Return the (response seq, scores_sha256) pairs, in scored order.
    """
    responded = set(a.of_kind("trial.responded"))
    requests = a.bodies("trial.requested")
    seen: dict[int, int] = {}
    pairs: list[tuple[int, str]] = []
    for seq in a.of_kind("trial.scored"):
        body = a.body(seq)
        rseq = body.get("response_seq")
        if type(rseq) is not int or rseq not in responded:
            st.fail(f"seq {seq}: trial.scored response_seq {rseq!r} is no trial.responded", seq)
            continue
        if rseq in seen:
            st.fail(
                f"seq {seq}: second trial.scored for response seq {rseq} (first: seq {seen[rseq]})",
                seq,
            )
            continue
        seen[rseq] = seq
        pairs.append((rseq, str(body.get("scores_sha256"))))
        req = requests.get(a.body(rseq).get("request_seq"), {})  # type: ignore[arg-type]
        arm = req.get("arm")
        if body.get("arm_code") != codes.get(str(arm)):
            st.fail(
                f"seq {seq}: arm_code {body.get('arm_code')!r} is not the code of arm "
                f"{arm!r} of trial {req.get('trial')}",
                seq,
            )
        if body.get("stimulus") != req.get("stimulus"):
            st.fail(f"seq {seq}: stimulus differs from its trial's", seq)
    for rseq in sorted(responded - set(seen)):
        st.fail(f"seq {rseq}: trial.responded has no trial.scored", rseq)
    return pairs


def _check_seal(a: Archive, st: _State, seal: int, pairs: list[tuple[int, str]]) -> None:
    """The seal's scores_sha256 and count are those of the recorded scores."""
    sbody = a.body(seal)
    pairs.sort()
    digest = sha_hex(canonical_json([[r, h] for r, h in pairs]))
    if sbody.get("scores_sha256") != digest:
        st.fail(
            f"seq {seal}: the seal's scores_sha256 is not the hash of the recorded scores "
            f"({digest})",
            seal,
        )
    if sbody.get("scored") != len(pairs):
        st.fail(
            f"seq {seal}: scored is {sbody.get('scored')!r}, {len(pairs)} trials were scored", seal
        )


def check_blinding(a: Archive) -> Check:
    """Scores sealed before unblinding; the revealed secret opens the commitment."""
    st = _State("blinding")
    seals = a.of_kind("scoring.sealed")
    revealed = a.of_kind("blinding.revealed")
    _check_counts(st, seals, revealed)
    if not seals or not revealed:
        return st.check("")
    seal, reveal = seals[0], revealed[0]
    last_trial = max((s for k in TRIAL_KINDS for s in a.of_kind(k)), default=-1)
    if last_trial > seal:
        st.fail(f"seq {last_trial}: a trial event follows scoring.sealed (seq {seal})", last_trial)
    if reveal < seal:
        st.fail(f"seq {reveal}: blinding.revealed comes before scoring.sealed (seq {seal})", reveal)
    secret = _secret(a, st, reveal)
    if secret is None:
        return st.check("")
    codes = a.codes(secret)
    if a.body(reveal).get("arm_codes") != codes:
        st.fail(
            f"seq {reveal}: arm_codes are not HMAC-SHA256(secret, arm)[:12] of the locked arms",
            reveal,
        )
    pairs = _check_scores(a, st, codes)
    _check_seal(a, st, seal, pairs)
    return st.check(
        f"scoring sealed (seq {seal}) after every trial event and before blinding.revealed "
        f"(seq {reveal}); the commitment opens; {len(pairs)} scores carry their arm's code"
    )
