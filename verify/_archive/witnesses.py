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
from dataclasses import dataclass
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


_Problem = tuple[str, int | None, str | None]  # (reason, seq, where)


@dataclass(frozen=True)
class _Witnessing:
    """The witness keys to trust, the quorum each promised checkpoint needs, the clock skew."""

    keys: list[CosignerKey]
    quorum: int
    skew: float
    given: bool  # the keys came from --witness, not from the study's own policy file


def _witnessing(a: Archive, record: dict[str, Any] | None, given: list[str]) -> _Witnessing | Check:
    """The keys, quorum and skew to check with, or the failing check saying why there are none."""
    name = "witnesses"
    skew = getattr(a, "witness_skew", 300.0)
    if isinstance(skew, bool) or not isinstance(skew, int | float) or not 0 <= skew <= 86400:
        return Check(
            name,
            Status.FAIL,
            f"the witness skew {skew!r} is not a number of seconds "
            "from 0 to 86400: no time could be checked",
        )
    source = "--witness" if given else POLICY_FILE
    try:
        keys = _witness_keys(record, given)
    except KeyFormatError as exc:
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
    return _Witnessing(keys, quorum, float(skew), bool(given))


def _witness_keys(record: dict[str, Any] | None, given: list[str]) -> list[CosignerKey]:
    """The cosigner keys of ``--witness`` if given, else of the policy file's witnesses."""
    if given:
        return [parse_cosigner_vkey(v) for v in given]
    assert record is not None
    return [parse_cosigner_vkey(str(w.get("vkey"))) for w in record["witnesses"] if type(w) is dict]


def _cosign_times(
    a: Archive, keys: list[CosignerKey], fails: list[_Problem]
) -> dict[int, dict[str, int]]:
    """The timestamps of valid cosignatures on the stored checkpoints: size -> witness -> time."""
    times: dict[int, dict[str, int]] = {}
    for size, fc in sorted(getattr(a, "stored_checkpoints", {}).items()):
        if fc.note is None:
            continue
        try:
            text, sigs = parse_note(fc.note)
        except NoteError:
            continue  # the checkpoints check reports it
        for key in keys:
            stamp = _cosigned(key, text, sigs, fc.where, size, fails)
            if stamp is not None:
                times.setdefault(size, {})[key.name] = stamp
    return times


def _cosigned(
    key: CosignerKey, text: str, sigs: Any, where: str, size: int, fails: list[_Problem]
) -> int | None:
    """The timestamp of ``key``'s first valid cosignature among ``sigs``, or None."""
    for sig in sigs:
        try:
            stamp = key.verify(text, sig)
        except ValueError as exc:
            fails.append((f"{where}: {exc}", size - 1, where))
            return None
        if stamp is not None:
            return stamp
    return None


def _concurrent_sessions(a: Archive, fails: list[_Problem]) -> None:
    """docs/witness.md §8: a witnessed study runs one session at a time."""
    for started in a.of_kind("run.started"):
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


def _check_promised(
    a: Archive,
    w: _Witnessing,
    promised: list[tuple[int, str, bool]],
    times: dict[int, dict[str, int]],
    may_continue: bool,
    fails: list[_Problem],
    warns: list[_Problem],
) -> None:
    """Each promised checkpoint carries a quorum of cosignatures made in time.

    In time: after its last event and (when the requests wait for it) before the next
    trial.requested, within the skew.
    """
    requests = a.of_kind("trial.requested")
    for size, what, before_sending in promised:
        at = f"ledger/checkpoints/{size:08d}.txt"
        got = times.get(size, {})
        if len(got) < w.quorum:
            message = (
                f"{at}: the {what} carries {len(got)} valid cosignature(s) of the "
                f"{w.quorum} required from {', '.join(k.name for k in w.keys)}"
            )
            if may_continue:
                warns.append(
                    (message + " (the study declared it may continue unwitnessed)", size - 1, at)
                )
            else:
                fails.append((message, size - 1, at))
        following = next((s for s in requests if s >= size), None)
        limit = _time(a, following) if before_sending and following is not None else None
        _check_stamps(a, w.skew, size, what, got, following, limit, fails)


def _check_stamps(
    a: Archive,
    skew: float,
    size: int,
    what: str,
    got: dict[str, int],
    following: int | None,
    limit: float | None,
    fails: list[_Problem],
) -> None:
    """A promised checkpoint's cosignatures were made in time, within the skew.

    Not older than its last event, nor (when the next request must wait for them) newer than
    that request, by more than the skew.
    """
    at = f"ledger/checkpoints/{size:08d}.txt"
    last = _time(a, size - 1)
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


def _check_order(w: _Witnessing, times: dict[int, dict[str, int]], fails: list[_Problem]) -> None:
    """A witness's cosignatures, and all of them within the skew, grow older with size."""
    sizes = sorted(times)
    for key in w.keys:
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
        if newest is not None and min(times[size].values()) < newest[1] - w.skew:
            fails.append(
                (
                    f"cosignatures on size {size} are older than a cosignature on size "
                    f"{newest[0]} by more than the {w.skew:g} s skew",
                    size - 1,
                    None,
                )
            )
        top = max(times[size].values())
        if newest is None or top > newest[1]:
            newest = (size, top)


def _summary(
    w: _Witnessing, promised: list[tuple[int, str, bool]], times: dict[int, dict[str, int]]
) -> str:
    """What a passing check says: the quorum met, and when the registration was witnessed."""
    registration = next((p for p in promised if p[1].startswith("registration")), None)
    summary = (
        f"{len(promised)} promised checkpoint(s) carry {w.quorum} of {len(w.keys)} witness "
        f"cosignatures, with times consistent within {w.skew:g} s"
    )
    if registration is not None and len(times.get(registration[0], {})) >= w.quorum:
        ranked = sorted(times[registration[0]].items(), key=lambda kv: kv[1])
        when = ranked[w.quorum - 1][1]
        summary += (
            f"; locked no later than {_iso(when)} (witnessed by {', '.join(n for n, _ in ranked)})"
        )
    return summary


def _first(problems: list[_Problem]) -> tuple[str, int | None, str | None]:
    """The first problem, its reason counting the others."""
    reason, seq, where = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return reason + more, seq, where


def check_witnesses(a: Archive) -> Check | None:
    """The ``witnesses`` check, or None when neither the study nor the auditor names witnesses."""
    name = "witnesses"
    record, problem = witness_policy(a)
    given: list[str] = list(getattr(a, "witness_keys", ()) or ())
    if record is None and problem is None and not given:
        return None
    if problem is not None:
        return Check(name, Status.FAIL, problem, a.protocol_seq, POLICY_FILE)
    w = _witnessing(a, record, given)
    if isinstance(w, Check):
        return w
    may_continue = record is not None and record.get("unreachable") in _UNREACHABLE[1:]
    fails: list[_Problem] = []
    warns: list[_Problem] = []
    times = _cosign_times(a, w.keys, fails)
    _concurrent_sessions(a, fails)
    locked_interval = record.get("interval_trials") if record is not None else None
    promised = _promised(a, locked_interval if type(locked_interval) is int else 0)
    _check_promised(a, w, promised, times, may_continue, fails, warns)
    _check_order(w, times, fails)
    if fails:
        reason, seq, where = _first(fails)
        return Check(name, Status.FAIL, reason, seq, where)
    summary = _summary(w, promised, times)
    if warns:
        reason, seq, where = _first(warns)
        return Check(name, Status.WARN, reason + "; " + summary, seq, where)
    if not w.given:
        return Check(
            name,
            Status.WARN,
            summary + f"; the witness keys come from {POLICY_FILE},"
            " which the study's owner chose: pass --witness VKEY with keys you trust",
            where=POLICY_FILE,
        )
    return Check(name, Status.PASS, summary)
