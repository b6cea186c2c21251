"""The ``witnesses`` check: every promised checkpoint carries a quorum of witness cosignatures.

Written from ``docs/witness.md`` §8 and ``docs/archive-format.md``. A study that declared
witnesses records them in ``protocol.locked`` (``witnessing``) and its archive carries the same
record in ``ledger/witnesses.json`` (the trust policy). The checkpoints a witnessed study
promises are the tree right after each ``protocol.locked`` (registration), each ``run.started``
(session start) and each ``run.stopped`` (session stop). Each must carry valid cosignatures from
``quorum`` distinct trusted witnesses, and the cosignature times must agree with each other and
with the events' times within the skew:

* a cosignature on the tree of size ``n`` is not older than event ``n - 1`` (minus the skew);
* a registration or session-start cosignature is not newer than the first ``trial.requested``
  after it (plus the skew): the runner waited for it before sending;
* one witness's times never go back as the tree grows; and no cosignature on a larger tree is
  older, by more than the skew, than any on a smaller one.

Trusted witnesses are those given with ``--witness`` (the auditor's keys, with ``--quorum``,
default all of them), else those of ``ledger/witnesses.json``, which the study's owner chose:
then the check at best WARNs, saying so.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from verify._archive.view import Archive
from verify._errors import KeyFormatError, NoteError
from verify._note import parse_note
from verify._report import Check, Status
from verify._witness import CosignerKey, parse_cosigner_vkey

__all__ = ["POLICY_FILE", "check_witnesses", "witness_policy"]

POLICY_FILE = "ledger/witnesses.json"
_UNREACHABLE = ("wait", "continue")


def _time(a: Archive, seq: int) -> float | None:
    env = a.envs[seq] if 0 <= seq < a.n else None
    text = env.get("time") if env is not None else None
    if type(text) is not str:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def witness_policy(a: Archive) -> tuple[dict[str, Any] | None, str | None]:
    """The locked ``witnessing`` record, and what is wrong with it or its policy file.

    The record is that of the last ``protocol.locked`` (a study locked in phases has one per
    phase; the last is the one in force).
    """
    locked = a.of_kind("protocol.locked")
    record = a.body(locked[-1]).get("witnessing") if locked else None
    present = POLICY_FILE in a.files.files
    if record is None:
        if present:
            return None, f"{POLICY_FILE} is present but protocol.locked declares no witnesses"
        return None, None
    if type(record) is not dict or type(record.get("witnesses")) is not list:
        return None, "protocol.locked: witnessing is not an object with a witnesses list"
    if not present:
        return record, f"{POLICY_FILE} is missing, but protocol.locked declares witnesses"
    data, why = a.files.get(POLICY_FILE, 1 << 20)
    try:
        parsed = json.loads(data.decode("utf-8")) if data is not None else None
    except (UnicodeDecodeError, ValueError) as exc:
        return record, f"{POLICY_FILE} is not JSON ({exc})"
    if data is None:
        return record, f"{POLICY_FILE} {why}"
    if parsed != record:
        return record, (
            f"{POLICY_FILE} differs from the witnessing that protocol.locked (seq "
            f"{locked[-1]}) recorded: it is not the policy the study locked"
        )
    return record, None


def _promised(a: Archive, interval: int) -> list[tuple[int, str, bool]]:
    """(tree size, what, sends follow) of every promised checkpoint, by size.

    With ``interval_trials`` N > 0: in each run session but a Message Batches one, the tree
    right after its N-th, 2N-th, ... final trial outcome (a ``trial.responded`` not of a data
    trial, or a ``trial.failed`` with ``final`` true), counted from its ``run.started``:
    derived from the trials, so no owner's omission of an event removes the promise.
    """
    out = []
    for kind, label, before_sending in (
        ("protocol.locked", "registration", True),
        ("run.started", "session start", True),
        ("run.stopped", "session stop", False),
    ):
        for seq in a.of_kind(kind):
            out.append((seq + 1, f"{label} checkpoint (after {kind} seq {seq})", before_sending))
    if interval > 0:
        kinds = ("run.started", "trial.responded", "trial.failed")
        marks = sorted((seq, kind) for kind in kinds for seq in a.of_kind(kind))
        session, count, counted = None, 0, False
        for seq, kind in marks:
            body = a.body(seq)
            if kind == "run.started":
                session, count = seq, 0
                counted = body.get("backend") != "anthropic-batch"
                continue
            if kind == "trial.responded":
                final = body.get("backend") != "data"  # a data trial made no call
            else:
                final = body.get("final") is True
            if session is None or not counted or not final:
                continue
            count += 1
            if count % interval == 0:
                out.append(
                    (
                        seq + 1,
                        f"interval checkpoint {count // interval} (after the "
                        f"{count}th final trial outcome, seq {seq}, of the session "
                        f"of run.started seq {session})",
                        False,
                    )
                )
    return sorted(set(out))


def check_witnesses(a: Archive) -> Check | None:
    """The ``witnesses`` check, or None when neither the study nor the auditor names witnesses."""
    name = "witnesses"
    record, problem = witness_policy(a)
    given: list[str] = list(getattr(a, "witness_keys", ()) or ())
    if record is None and problem is None and not given:
        return None
    if problem is not None:
        return Check(name, Status.FAIL, problem, a.protocol_seq, POLICY_FILE)
    skew = getattr(a, "witness_skew", 300.0)
    if isinstance(skew, bool) or not isinstance(skew, int | float) or not 0 <= skew <= 86400:
        return Check(
            name,
            Status.FAIL,
            f"the witness skew {skew!r} is not a number of seconds "
            "from 0 to 86400: no time could be checked",
        )
    skew = float(skew)
    keys: list[CosignerKey] = []
    try:
        if given:
            keys = [parse_cosigner_vkey(v) for v in given]
        else:
            assert record is not None
            keys = [
                parse_cosigner_vkey(str(w.get("vkey")))
                for w in record["witnesses"]
                if type(w) is dict
            ]
    except KeyFormatError as exc:
        source = "--witness" if given else POLICY_FILE
        return Check(name, Status.FAIL, f"{source}: {exc}", where=source)
    if given:
        quorum = int(getattr(a, "witness_quorum", None) or len(keys))
    else:
        assert record is not None
        locked = record.get("quorum")
        if type(locked) is not int:
            return Check(
                name, Status.FAIL, f"{POLICY_FILE}: quorum is not an integer", where=POLICY_FILE
            )
        quorum = locked
    names_of: dict[bytes, list[str]] = {}
    for key in keys:
        names_of.setdefault(key.public_key, []).append(key.name)
    twins = next((names for names in names_of.values() if len(names) > 1), None)
    if twins is not None:  # one witness under two names must not count twice toward a quorum
        source = "--witness" if given else POLICY_FILE
        return Check(
            name,
            Status.FAIL,
            f"{source}: {' and '.join(twins)} are one key under "
            f"{len(twins)} names: a quorum counts each witness once",
            where=source,
        )
    if not 1 <= quorum <= len(keys):
        return Check(
            name, Status.FAIL, f"a quorum of {quorum} cannot be met by {len(keys)} witness key(s)"
        )
    may_continue = record is not None and record.get("unreachable") in _UNREACHABLE[1:]
    stored = getattr(a, "stored_checkpoints", {})
    fails: list[tuple[str, int | None, str | None]] = []
    warns: list[tuple[str, int | None, str | None]] = []
    times: dict[int, dict[str, int]] = {}  # size -> witness -> timestamp
    for size, fc in sorted(stored.items()):
        if fc.note is None:
            continue
        try:
            text, sigs = parse_note(fc.note)
        except NoteError:
            continue  # the checkpoints check reports it
        for key in keys:
            for sig in sigs:
                try:
                    stamp = key.verify(text, sig)
                except ValueError as exc:
                    fails.append((f"{fc.where}: {exc}", size - 1, fc.where))
                    break
                if stamp is not None:
                    times.setdefault(size, {})[key.name] = stamp
                    break
    for started in a.of_kind("run.started"):  # docs/witness.md §8: one session at a time
        if "concurrent" in a.body(started):
            fails.append(
                (
                    f"seq {started}: run.started runs beside other sessions (concurrent "
                    f"{a.body(started).get('concurrent')!r}); a witnessed study's sessions "
                    "run one at a time, so its checkpoints are cosigned in order of size",
                    started,
                    None,
                )
            )
    locked_interval = record.get("interval_trials") if record is not None else None
    promised = _promised(a, locked_interval if type(locked_interval) is int else 0)
    requests = a.of_kind("trial.requested")
    for size, what, before_sending in promised:
        at = f"ledger/checkpoints/{size:08d}.txt"
        got = times.get(size, {})
        if len(got) < quorum:
            message = (
                f"{at}: the {what} carries {len(got)} valid cosignature(s) of the "
                f"{quorum} required from {', '.join(k.name for k in keys)}"
            )
            if may_continue:
                warns.append(
                    (message + " (the study declared it may continue unwitnessed)", size - 1, at)
                )
            else:
                fails.append((message, size - 1, at))
        last = _time(a, size - 1)
        following = next((s for s in requests if s >= size), None)
        limit = _time(a, following) if before_sending and following is not None else None
        for witness, stamp in got.items():
            if last is not None and stamp < last - skew:
                fails.append(
                    (
                        f"{at}: {witness} cosigned the {what} at {_iso(stamp)}, before "
                        f"its last event (seq {size - 1}, {_iso(last)}) by more than the "
                        f"{skew:g} s skew",
                        size - 1,
                        at,
                    )
                )
            if limit is not None and stamp > limit + skew:
                fails.append(
                    (
                        f"{at}: {witness} cosigned the {what} at {_iso(stamp)}, after "
                        f"trial.requested seq {following} ({_iso(limit)}) by more than the "
                        f"{skew:g} s skew: the request did not wait for the witness",
                        following,
                        at,
                    )
                )
    sizes = sorted(times)
    for key in keys:
        previous: tuple[int, int] | None = None
        for size in sizes:
            stamp = times[size].get(key.name)
            if stamp is None:
                continue
            if previous is not None and stamp < previous[1]:
                fails.append(
                    (
                        f"{key.name}'s cosignature on size {size} ({_iso(stamp)}) is older "
                        f"than its cosignature on size {previous[0]} "
                        f"({_iso(previous[1])})",
                        size - 1,
                        None,
                    )
                )
            previous = (size, stamp)
    newest = None
    for size in sizes:
        if newest is not None and min(times[size].values()) < newest[1] - skew:
            fails.append(
                (
                    f"cosignatures on size {size} are older than a cosignature on size "
                    f"{newest[0]} by more than the {skew:g} s skew",
                    size - 1,
                    None,
                )
            )
        top = max(times[size].values())
        if newest is None or top > newest[1]:
            newest = (size, top)
    if fails:
        reason, seq, where = fails[0]
        more = f" (and {len(fails) - 1} more)" if len(fails) > 1 else ""
        return Check(name, Status.FAIL, reason + more, seq, where)
    registration = next((p for p in promised if p[1].startswith("registration")), None)
    summary = (
        f"{len(promised)} promised checkpoint(s) carry {quorum} of {len(keys)} witness "
        f"cosignatures, with times consistent within {skew:g} s"
    )
    if registration is not None and len(times.get(registration[0], {})) >= quorum:
        ranked = sorted(times[registration[0]].items(), key=lambda kv: kv[1])
        when = ranked[quorum - 1][1]
        summary += (
            f"; locked no later than {_iso(when)} (witnessed by {', '.join(n for n, _ in ranked)})"
        )
    if warns:
        reason, seq, where = warns[0]
        more = f" (and {len(warns) - 1} more)" if len(warns) > 1 else ""
        return Check(name, Status.WARN, reason + more + "; " + summary, seq, where)
    if not given:
        return Check(
            name,
            Status.WARN,
            summary + f"; the witness keys come from {POLICY_FILE},"
            " which the study's owner chose: pass --witness VKEY with keys you trust",
            where=POLICY_FILE,
        )
    return Check(name, Status.PASS, summary)
