"""A study's witnesses: its spec sections, and the client that gets its checkpoints cosigned.

``[[witnesses]]`` and ``[witnessing]`` of ``study.toml``, and the client that gets a quorum of
them to cosign the study's checkpoints (``docs/witness.md`` §8).

* :func:`parse_policy` reads and validates the two sections (every problem named, like every
  other section of the spec); :meth:`WitnessPolicy.record` is what ``protocol.locked`` locks
  and what an archive carries in ``ledger/witnesses.json``.
* :class:`Cosigner` asks each witness for its cosignature on a stored checkpoint
  (:func:`ledger.witness.add_checkpoint`), verifies the answer, appends the lines to the stored
  note (:meth:`ledger.Ledger.add_cosignatures`), and stops at the quorum. A witness that refuses
  raises :class:`WitnessRefusal` with its answer; an unreachable one is retried with back-off
  for ``retry_seconds``, after which :class:`WitnessUnavailable` is raised, unless the study
  declared ``unreachable = "continue"``: then the checkpoint stays unwitnessed and the archive
  shows it (the verifier WARNs).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ledger import Ledger, SigningKey
from runner._errors import StudyError

__all__ = [
    "POLICY_FILE",
    "UNREACHABLE",
    "Cosigner",
    "WitnessOutcome",
    "WitnessPolicy",
    "WitnessRefusal",
    "WitnessSpec",
    "WitnessUnavailable",
    "interval_sizes",
    "is_final_outcome",
    "parse_policy",
    "policy_of",
    "promised_sizes",
]

#: Where an archive carries the trust policy (``docs/archive-format.md``).
POLICY_FILE = "ledger/witnesses.json"
#: What a run does when a witness cannot be reached for ``retry_seconds``.
UNREACHABLE = ("wait", "continue")
WITNESSING_KEYS = ("quorum", "interval_trials", "unreachable", "retry_seconds")
WITNESS_KEYS = ("name", "vkey", "url")


class WitnessRefusal(StudyError):
    """A witness refused a checkpoint of the study (a fork, a rolled-back ledger, a bad key)."""


class WitnessUnavailable(StudyError):
    """Too few witnesses answered within ``retry_seconds`` and the study may not go on without."""


@dataclass(frozen=True)
class WitnessSpec:
    """One ``[[witnesses]]`` entry: the cosigner key name, its vkey (type 0x04) and its URL."""

    name: str
    vkey: str
    url: str

    def record(self) -> dict[str, str]:
        """The locked form."""
        return {"name": self.name, "vkey": self.vkey, "url": self.url}


@dataclass(frozen=True)
class WitnessPolicy:
    """The study's witnesses and how a run uses them (``docs/study-spec.md``, witnesses)."""

    witnesses: tuple[WitnessSpec, ...]
    quorum: int
    interval_trials: int = 0
    unreachable: str = "wait"
    retry_seconds: float = 600.0

    def record(self) -> dict[str, Any]:
        """The locked form (``protocol.locked`` ``witnessing``, ``ledger/witnesses.json``)."""
        return {
            "version": 1,
            "witnesses": [w.record() for w in self.witnesses],
            "quorum": self.quorum,
            "interval_trials": self.interval_trials,
            "unreachable": self.unreachable,
            "retry_seconds": self.retry_seconds,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> WitnessPolicy:
        """The policy a ``protocol.locked`` event recorded."""
        return cls(
            tuple(WitnessSpec(w["name"], w["vkey"], w["url"]) for w in record["witnesses"]),
            int(record["quorum"]),
            int(record["interval_trials"]),
            str(record["unreachable"]),
            float(record["retry_seconds"]),
        )


def parse_policy(data: dict[str, Any], add: Callable[[str, str], None]) -> WitnessPolicy | None:
    """Validate ``[[witnesses]]`` and ``[witnessing]`` of a parsed spec; None when absent.

    ``add(field, message)`` reports a problem (``witnesses[2].vkey``, ``witnessing.quorum``).
    """
    from ledger import KeyFileError
    from ledger.witness import CosignerVerifier

    raw, table = data.get("witnesses"), data.get("witnessing")
    if raw is None and table is None:
        return None
    if raw is None:
        add("witnessing", "declares how witnesses are used, but there is no [[witnesses]] entry")
        return None
    if not isinstance(raw, list) or not raw or not all(isinstance(w, dict) for w in raw):
        add("witnesses", "must be one or more [[witnesses]] tables (name, vkey, url)")
        return None
    if table is None:
        table = {}
    if not isinstance(table, dict):
        add("witnessing", "must be a table")
        return None
    witnesses: list[WitnessSpec] = []
    keys: list[bytes] = []  # each witness's public key, beside it
    for index, entry in enumerate(raw):
        where = f"witnesses[{index}]"
        values = {}
        for key in WITNESS_KEYS:
            value = entry.get(key)
            if not isinstance(value, str) or not value.strip():
                add(f"{where}.{key}", f"must be a non-empty string, got {value!r}")
            values[key] = value if isinstance(value, str) else ""
        if not all(values.values()):
            continue
        try:
            verifier = CosignerVerifier.parse(values["vkey"])
        except KeyFileError as exc:
            add(f"{where}.vkey", str(exc))
            continue
        if verifier.name != values["name"]:
            add(
                f"{where}.name",
                f"{values['name']!r} is not the name in its vkey "
                f"({verifier.name!r}); a cosignature names its key",
            )
            continue
        url = urlsplit(values["url"])
        if url.scheme not in ("http", "https") or not url.hostname or url.query or url.fragment:
            add(
                f"{where}.url",
                f"{values['url']!r} is not an http(s) URL of a witness's "
                "submission prefix (add-checkpoint is POSTed below it)",
            )
            continue
        if any(w.name == verifier.name for w in witnesses):
            add(f"{where}.name", f"witness {verifier.name!r} is listed twice")
            continue
        twin = next(
            (w for w, k in zip(witnesses, keys, strict=True) if k == verifier.public_key), None
        )
        if twin is not None:
            add(
                f"{where}.vkey",
                f"is the key of witness {twin.name!r} under another name: one "
                "witness, which a quorum must count once",
            )
            continue
        witnesses.append(WitnessSpec(verifier.name, verifier.vkey, values["url"].rstrip("/")))
        keys.append(verifier.public_key)
    quorum = table.get("quorum", len(raw))
    if isinstance(quorum, bool) or not isinstance(quorum, int) or not 1 <= quorum <= len(raw):
        add(
            "witnessing.quorum",
            f"must be an integer from 1 to {len(raw)} (the number of "
            f"[[witnesses]]), got {quorum!r}",
        )
        quorum = 1
    interval = table.get("interval_trials", 0)
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 0:
        add(
            "witnessing.interval_trials",
            f"must be an integer >= 0 (0: cosign only at each "
            f"session's start and stop), got {interval!r}",
        )
        interval = 0
    unreachable = table.get("unreachable", "wait")
    if unreachable not in UNREACHABLE:
        add(
            "witnessing.unreachable",
            f"must be 'wait' (stop when the witnesses stay "
            f"unreachable) or 'continue' (go on unwitnessed, shown in "
            f"the archive), got {unreachable!r}",
        )
        unreachable = "wait"
    retry = table.get("retry_seconds", 600)
    if isinstance(retry, bool) or not isinstance(retry, int | float) or not 0 <= retry <= 86400:
        add(
            "witnessing.retry_seconds",
            f"must be a number of seconds from 0 to 86400, got {retry!r}",
        )
        retry = 600
    if len(witnesses) != len(raw):
        return None
    return WitnessPolicy(
        tuple(witnesses), int(quorum), int(interval), str(unreachable), float(retry)
    )


BATCH_BACKEND = "anthropic-batch"
"""A session of this backend records its events its own way: witnessed at start and stop only."""


def is_final_outcome(kind: str, body: Mapping[str, Any]) -> bool:
    """Whether an event is a final trial outcome that counts toward ``interval_trials``.

    A ``trial.responded`` (other than a data trial's, ``backend`` ``"data"``: no call was
    made) or a ``trial.failed`` with ``final`` true (``docs/witness.md`` section 8).
    """
    if kind == "trial.responded":
        return body.get("backend") != "data"
    return kind == "trial.failed" and body.get("final") is True


def interval_sizes(log: Ledger, interval: int) -> list[tuple[int, str]]:
    """The interval checkpoints of every session: (tree size, what).

    In each run session (from its ``run.started`` to the next ``run.started``), other than a
    Message Batches session, the tree right after its N-th, 2N-th, ... final trial outcome
    (:func:`is_final_outcome`), N = ``interval``.
    """
    if interval <= 0:
        return []
    found: list[tuple[int, str]] = []
    session: int | None = None
    count = 0
    batch = False
    for event in log.events():
        if event.kind == "run.started":
            session, count = event.seq, 0
            batch = event.body.get("backend") == BATCH_BACKEND
        elif session is not None and not batch and is_final_outcome(event.kind, event.body):
            count += 1
            if count % interval == 0:
                found.append(
                    (
                        event.seq + 1,
                        f"interval {count // interval} of the session of run.started seq {session}",
                    )
                )
    return found


def promised_sizes(log: Ledger) -> list[tuple[int, str]]:
    """The checkpoints a witnessed study promises: (tree size, what), in size order.

    Right after each ``protocol.locked`` (registration), each ``run.started`` (session start,
    before the session's first trial request) and each ``run.stopped`` (session stop), and,
    with ``interval_trials`` N, after every N-th final trial outcome of a session
    (:func:`interval_sizes`).
    """
    found = [
        (e.seq + 1, f"registration (protocol.locked seq {e.seq})")
        for e in log.events("protocol.locked")
    ]
    found += [
        (e.seq + 1, f"session start (run.started seq {e.seq})") for e in log.events("run.started")
    ]
    found += [
        (e.seq + 1, f"session stop (run.stopped seq {e.seq})") for e in log.events("run.stopped")
    ]
    locks = list(log.events("protocol.locked"))
    record = locks[-1].body.get("witnessing") if locks else None
    if isinstance(record, dict) and isinstance(record.get("interval_trials"), int):
        found += interval_sizes(log, record["interval_trials"])
    return sorted(set(found))


@dataclass
class WitnessOutcome:
    """What :meth:`Cosigner.witness` got for one checkpoint."""

    size: int
    note: str
    quorum: int
    cosigned_by: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)  # witness name -> why
    waited: float = 0.0

    @property
    def witnessed(self) -> bool:
        """True when the quorum cosigned."""
        return len(self.cosigned_by) >= self.quorum


class Cosigner:
    """Gets a study's checkpoints cosigned by a quorum of its witnesses.

    ``should_stop`` is polled while waiting for an unreachable witness (a Ctrl-C ends the wait);
    ``sleep`` and the back-off (``backoff_base`` doubling to ``backoff_max`` seconds) are
    parameters so tests need not wait. ``waited`` adds up the seconds spent waiting on
    witnesses (requests and back-off), for ``benchmarks/bench_witness.py``.
    """

    def __init__(
        self,
        log: Ledger,
        key: SigningKey,
        policy: WitnessPolicy,
        *,
        should_stop: Callable[[], bool] = lambda: False,
        sleep: Callable[[float], None] = time.sleep,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        timeout: float = 30.0,
    ) -> None:
        """Prepare a client for the witnesses of ``policy`` over the open ledger ``log``."""
        from ledger.witness import CosignerVerifier

        self.log = log
        self.key = key
        self.policy = policy
        self.should_stop = should_stop
        self.sleep = sleep
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.timeout = timeout
        self.verifiers = {w.name: CosignerVerifier.parse(w.vkey) for w in policy.witnesses}
        self.waited = 0.0
        self._client: Any = None
        self._verified: dict[str, list[str]] = {}

    def close(self) -> None:
        """Close the HTTP connections."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> Cosigner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what the ledger holds

    def _stored(self, size: int) -> tuple[int, str]:
        """(id, note) of the stored checkpoint of ``size`` with the most cosignatures.

        Signed with the study's key when there is none.
        """
        best: tuple[int, str, int] | None = None
        for cp in self.log.checkpoints():
            if cp.size == size:
                count = len(self._cosigned_by(cp.note))
                if best is None or count > best[2]:
                    best = (cp.id, cp.note, count)
        if best is None:
            self.log.sign_checkpoint(self.key, size=size)
            cp = self.log.checkpoints()[-1]
            return cp.id, cp.note
        return best[0], best[1]

    def _cosigned_by(self, note: str) -> list[str]:
        """The policy's witnesses whose valid cosignature ``note`` carries (memoised)."""
        known = self._verified.get(note)
        if known is None:
            known = self._verified[note] = self._verify_lines(note)
        return known

    def _verify_lines(self, note: str) -> list[str]:
        from ledger import NoteError

        text, _, block = note.partition("\n\n")
        text += "\n"
        names = []
        for name, verifier in self.verifiers.items():
            for line in block.splitlines(keepends=True):
                try:
                    if verifier.verify_line(text, line) is not None:
                        names.append(name)
                        break
                except NoteError:
                    continue
        return names

    def _witness_size(self, name: str) -> int:
        """The largest stored checkpoint size witness ``name`` cosigned (0: none)."""
        sizes = [cp.size for cp in self.log.checkpoints() if name in self._cosigned_by(cp.note)]
        return max(sizes, default=0)

    # -- asking

    def _ask(self, spec: WitnessSpec, size: int, note: str, old: int) -> list[str]:
        """One add-checkpoint request from ``old``; on a 409 retried once from the witness's size.

        Raises :class:`WitnessRefusal` for any other refusal, or a 409 whose size is beyond this
        ledger (the witness cosigned a longer history: this ledger was rolled back or forked).
        """
        from ledger.witness import WitnessRefusedError, add_checkpoint, new_client

        if self._client is None:
            self._client = new_client(self.timeout)
        for _ in range(2):
            proof = self.log.consistency_proof(old, size).path if 0 < old < size else ()
            try:
                return add_checkpoint(
                    spec.url, old, proof, note, timeout=self.timeout, client=self._client
                )
            except WitnessRefusedError as exc:
                if exc.status == 409 and exc.size is not None and exc.size != old:
                    if exc.size <= size:
                        old = exc.size  # the witness knows more than this ledger recorded
                        continue
                    raise WitnessRefusal(
                        f"witness {spec.name} ({spec.url}) refused the checkpoint of size {size}"
                        f" of {self.log.origin}: HTTP 409, it has already cosigned size "
                        f"{exc.size} of this log, which this ledger does not reach; this ledger "
                        "is not the history the witness cosigned (restored from an earlier "
                        "copy, or forked)"
                    ) from exc
                raise WitnessRefusal(
                    f"witness {spec.name} ({spec.url}) refused the checkpoint of size {size} of "
                    f"{self.log.origin}: HTTP {exc.status}: {exc.body.strip()}"
                ) from exc
        raise WitnessRefusal(
            f"witness {spec.name} ({spec.url}) kept answering 409 for the checkpoint of size {size}"
        )

    def witness(self, size: int, what: str = "checkpoint") -> WitnessOutcome:
        """Get the quorum's cosignatures on the study's checkpoint of ``size`` (signed if absent).

        Returns the outcome (the note with every cosignature got). Raises
        :class:`WitnessRefusal` when a witness refuses, and :class:`WitnessUnavailable` when too
        few witnesses answered within ``retry_seconds`` and the study declared ``wait``.
        """
        from ledger import NoteError
        from ledger.witness import WitnessError, WitnessUnreachableError

        policy = self.policy
        cp_id, note = self._stored(size)
        text = note.partition("\n\n")[0] + "\n"
        done = self._cosigned_by(note)
        outcome = WitnessOutcome(size, note, policy.quorum, list(done))
        started = time.monotonic()
        failures = 0
        todo = [w for w in policy.witnesses if w.name not in done]
        while len(outcome.cosigned_by) < policy.quorum and todo:
            unreachable: dict[str, str] = {}
            for spec in list(todo):
                if len(outcome.cosigned_by) >= policy.quorum:
                    break
                old = self._witness_size(spec.name)
                if old > size:
                    raise WitnessRefusal(
                        f"witness {spec.name} already cosigned size {old} of this ledger, so it "
                        f"cannot cosign the {what} checkpoint of size {size} any more"
                    )
                t0 = time.monotonic()
                try:
                    lines = self._ask(spec, size, note, old)
                except WitnessUnreachableError as exc:
                    unreachable[spec.name] = str(exc)
                    continue
                except WitnessError as exc:
                    if isinstance(exc, WitnessRefusal):
                        raise
                    raise WitnessRefusal(f"witness {spec.name}: {exc}") from exc
                finally:
                    self.waited += time.monotonic() - t0
                verifier = self.verifiers[spec.name]
                good = []
                for line in lines:
                    try:
                        if verifier.verify_line(text, line) is not None:
                            good.append(line)
                    except NoteError as exc:
                        raise WitnessRefusal(
                            f"witness {spec.name} answered with a cosignature that does not "
                            f"verify under its locked key: {exc}"
                        ) from exc
                if not good:
                    raise WitnessRefusal(
                        f"witness {spec.name} answered 200 without a cosignature by its locked "
                        f"key {spec.vkey}"
                    )
                note = self.log.add_cosignatures(cp_id, good)
                outcome.note = note
                outcome.cosigned_by.append(spec.name)
                todo.remove(spec)
            if len(outcome.cosigned_by) >= policy.quorum or not todo:
                break
            elapsed = time.monotonic() - started
            if elapsed >= policy.retry_seconds or self.should_stop():
                outcome.missing = unreachable
                break
            failures += 1
            pause = min(
                self.backoff_max,
                self.backoff_base * 2 ** (failures - 1),
                max(0.0, policy.retry_seconds - elapsed),
            )
            t0 = time.monotonic()
            end = t0 + pause
            while time.monotonic() < end and not self.should_stop():
                self.sleep(min(0.1, end - time.monotonic()))
            self.waited += time.monotonic() - t0
        outcome.waited = time.monotonic() - started
        if len(outcome.cosigned_by) < policy.quorum:
            outcome.missing = outcome.missing or {w.name: "not asked" for w in todo}
            reasons = "; ".join(f"{k}: {v}" for k, v in outcome.missing.items())
            if policy.unreachable != "continue":
                raise WitnessUnavailable(
                    f"the {what} checkpoint (size {size}) has {len(outcome.cosigned_by)} of the "
                    f"{policy.quorum} cosignatures the study requires, and the witnesses stayed "
                    f"unreachable for {policy.retry_seconds:g} s ({reasons}); nothing more was "
                    "sent (the study declared unreachable = 'wait')"
                )
        return outcome

    def witness_promised(self, upto: int | None = None) -> list[WitnessOutcome]:
        """Witness every promised checkpoint (:func:`promised_sizes`) still short of the quorum.

        In size order, up to tree size ``upto``; a promised checkpoint below a size a witness
        already cosigned cannot be cosigned any more and is left as it is (the verifier says so).
        """
        out = []
        for size, what in promised_sizes(self.log):
            if upto is not None and size > upto:
                break
            _, note = self._stored(size)
            have = self._cosigned_by(note)
            if len(have) >= self.policy.quorum:
                continue
            later = max((self._witness_size(w.name) for w in self.policy.witnesses), default=0)
            if later > size:
                continue
            out.append(self.witness(size, what))
        return out


def policy_of(protocol_body: dict[str, Any]) -> WitnessPolicy | None:
    """The witness policy a ``protocol.locked`` body recorded, or None."""
    record = protocol_body.get("witnessing")
    return None if record is None else WitnessPolicy.from_record(record)


def witness_registration(
    log: Ledger, key: SigningKey, policy: WitnessPolicy, size: int
) -> tuple[str, StudyError | None]:
    """``ledger lock``: get the quorum's cosignatures on the registration checkpoint.

    Runs after the lock is committed (a witness never sees a checkpoint the ledger could still
    lose). Returns the note (with the cosignatures got) and the error that kept the quorum from
    cosigning, if any: the lock stands, and ``ledger run`` asks again before it sends anything.
    """
    with Cosigner(log, key, policy) as cosigner:
        try:
            outcome = cosigner.witness(size, "registration")
        except StudyError as exc:
            note = cosigner._stored(size)[1]
            return note, type(exc)(
                f"locked, but {exc}; the registration checkpoint is not witnessed yet "
                "('ledger run' asks the witnesses again before it sends anything)"
            )
    return outcome.note, None
