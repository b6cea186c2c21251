"""``ledger export``: the OSF-style archive of ``docs/archive-format.md``.

The archive is written into a temporary directory beside the target and renamed into place, so
a crash never leaves half an archive. Before the ledger's own files are put in it, an
``export.created`` event carrying the SHA-256 of every other archive file is appended and a
checkpoint is signed, so the exported ledger covers the archive: a file changed afterwards is
caught even if ``MANIFEST.sha256`` is rewritten to match. Both are made in one ledger
transaction that commits only after every archive file is written and synced: an export that
fails (a full disk, an unwritable target) leaves no ``export.created`` behind.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import heapq
import io
import json
import os
import shutil
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from analysis._background import BackgroundVerification
from analysis._result_text import describe_decision
from analysis._rows import (
    ATTEMPT_COLUMNS,
    SCORE_COLUMNS,
    schedule_columns,
    schedule_ids,
    schedule_rows,
    score_row,
)
from analysis.statistics import kind_of
from ledger import (
    SALT_BYTES,
    Event,
    Ledger,
    OutputError,
    PostgresLocation,
    RemoteLocation,
    SealPolicy,
    SigningKey,
    can_sync_file_system,
    canonical_json,
    commitment,
    describe_os_error,
    fsync_directory,
    sync_file_system,
)
from runner import (
    POLICY_FILE,
    StudyError,
    check_integrity,
    identity_bytes,
    identity_object,
    identity_version,
    ledger_path,
    protocol_event,
    session_notice,
    sign_missing_checkpoints,
)
from runner.spec import Study

if TYPE_CHECKING:
    from analysis._flow import Flow
    from analysis._report import Report

ARCHIVE_FORMAT = 1
LEDGER_DIR = "ledger"
MANIFEST = "MANIFEST.sha256"


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_study` wrote."""

    directory: Path
    files: int
    bytes: int
    export_seq: int
    checkpoint: str
    report: Report | None = None
    """The report written to ``report_dir`` (None without one)."""


def _csv_bytes(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow(["" if v is None else v for v in row])
    return out.getvalue().encode("utf-8")


def _json_bytes(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _event_line(event: Event) -> bytes:
    """The event's line of ``ledger/events.jsonl``, from its bytes as stored.

    ``{"envelope":ENVELOPE,"signature":"BASE64"}`` and a newline: the canonical JSON of that
    object, whose members are in canonical order already and whose envelope is stored as its
    own RFC 8785 canonical JSON (the bytes the signature covers), so nothing is re-encoded.
    """
    signature = base64.b64encode(event.signature)
    return b'{"envelope":' + event.envelope + b',"signature":"' + signature + b'"}\n'


PAGE = 4096
"""Events read per query by :func:`_events_in_pages`."""


def _events_in_pages(log: Ledger, start: int, end: int) -> Iterator[Event]:
    """Events ``[start, end)`` in seq order, a page of :data:`PAGE` per query.

    Inside the export's transaction PostgreSQL's client fetches a query's whole result at
    once; pages of seqs keep that to a page of envelopes (SQLite reads each page by its key).
    """
    for low in range(start, end, PAGE):
        yield from log.events(start=low, end=min(end, low + PAGE))


def blob_listing_sha256(names: Iterable[str]) -> str:
    """SHA-256 of the sorted blob names, each followed by ``\n`` (``docs/archive-format.md``).

    Blob files are named by the SHA-256 of their content, so they need no hash of their own
    in ``export.created``; this one digest pins which blobs the archive holds, and keeps the
    event small however many trials the study has.
    """
    return hashlib.sha256("".join(f"{n}\n" for n in sorted(names)).encode("ascii")).hexdigest()


def archive_path(rel: str, role: str) -> str:
    """Where a locked study file goes in the archive (``docs/archive-format.md`` §2)."""
    name = rel.rsplit("/", 1)[-1]
    if role == "stimulus":
        return f"stimuli/{name}"
    if role == "truth":
        return f"truth/{name}"
    return f"protocol/{rel}"


class _Sink:
    """One archive file being written: buffered, hashed as it goes, synced when closed."""

    def __init__(self, writer: _Writer, rel: str) -> None:
        self.writer, self.rel = writer, rel
        self.digest = hashlib.sha256()
        self.size = 0
        self.held: io.BytesIO | None = None  # a file a public export withholds
        self.file: BinaryIO | None = None
        if writer.withholds(rel):
            self.held = io.BytesIO()
        else:
            self.file = writer.create(rel)

    def write(self, data: bytes) -> None:
        """Append ``data`` to the file."""
        if self.held is not None:
            self.held.write(data)
            return
        assert self.file is not None
        self.digest.update(data)
        self.size += len(data)
        self.writer.guard(self.file.write, data)

    def close(self) -> None:
        """Finish the file: sync it (unless the whole tree is synced at the end), record it."""
        if self.held is not None:
            self.writer.hold(self.rel, self.held.getvalue())
            return
        assert self.file is not None
        self.writer.finish(self.file)
        self.writer.record(self.rel, self.digest.hexdigest(), self.size)


class _CsvSink:
    """A CSV file written row by row (``None`` as an empty cell), in chunks of about 1 MB."""

    def __init__(self, sink: _Sink, header: Sequence[str]) -> None:
        self.sink = sink
        self.buffer = io.StringIO()
        self.writer = csv.writer(self.buffer, lineterminator="\n")
        self.writer.writerow(header)

    def row(self, values: Iterable[Any]) -> None:
        """Write one row."""
        self.writer.writerow(["" if v is None else v for v in values])
        if self.buffer.tell() >= 1 << 20:
            self._drain()

    def _drain(self) -> None:
        self.sink.write(self.buffer.getvalue().encode("utf-8"))
        self.buffer.seek(0)
        self.buffer.truncate()

    def close(self) -> None:
        """Write what is buffered and finish the file."""
        self._drain()
        self.sink.close()


class _Writer:
    """Writes the archive's files straight into the (new, empty) ``root``, one at a time.

    Nothing is held: each file is hashed as it is written and only its archive path, SHA-256
    and size are kept (a blob's, whose name is its SHA-256, only as 32 bytes). The files are
    made durable together at the end by one ``syncfs`` where the system has it, else each is
    synced as it is closed. A public export's withheld blobs and files are kept aside instead
    (``docs/privacy.md``), for the annex.
    """

    def __init__(
        self,
        root: Path,
        target: Path,
        withheld_paths: set[str] | None = None,
        withheld_blobs: set[str] | None = None,
    ) -> None:
        self.root = root
        self.target = target
        self.hashes: dict[str, str] = {}
        """Every file written but the blobs: archive path -> SHA-256."""
        self.files = 0
        self.bytes = 0
        self.withheld = _Withheld({}, {})
        self._withheld_paths = withheld_paths or set()
        self._withheld_blobs = withheld_blobs or set()
        self._blobs = bytearray()  # the written blobs' SHA-256s, 32 bytes each
        self._directories = {root, root / "blobs"}
        self._blob_dir = str(root / "blobs")
        self._open: set[BinaryIO] = set()  # files made by create() and not finished yet
        self._sync_each = True
        self.guard((root / "blobs").mkdir)

    def guard(self, call: Any, *args: Any) -> Any:
        """``call(*args)``, an ``OSError`` turned into the export's :class:`OutputError`."""
        try:
            return call(*args)
        except OSError as exc:
            raise OutputError(
                f"cannot write the archive: {describe_os_error(exc, self.target)}; nothing "
                "was exported and the ledger is unchanged"
            ) from exc

    def withholds(self, rel: str) -> bool:
        """True when a public export leaves ``rel`` out (``_withheld_paths``)."""
        paths = self._withheld_paths
        return rel in paths or any(p.endswith("/") and rel.startswith(p) for p in paths)

    def hold(self, rel: str, data: bytes) -> None:
        """Keep a withheld file for the annex, with the salt of its commitment."""
        if rel in self.withheld.files:
            raise StudyError(f"archive: two files map to {rel}")
        self.withheld.files[rel] = (os.urandom(SALT_BYTES), data)

    def create(self, rel: str) -> BinaryIO:
        """A new file at ``rel`` (its directories made), open for buffered writing."""
        path = self.root / rel
        if path.parent not in self._directories:
            self.guard(partial(path.parent.mkdir, parents=True, exist_ok=True))
            self._directories.update((path.parent, *path.parent.parents))
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            raise StudyError(f"archive: two files map to {rel}") from None
        except OSError as exc:
            self.guard(partial(_raise, exc))
            raise
        file = os.fdopen(fd, "wb", buffering=1 << 16)
        self._open.add(file)
        return file

    def finish(self, file: BinaryIO) -> None:
        """Flush and close a file made by :meth:`create` (synced now unless synced at the end)."""
        try:
            self.guard(file.flush)
            if self._sync_each:
                self.guard(os.fsync, file.fileno())
        finally:
            self._open.discard(file)
            file.close()

    def close_all(self) -> None:
        """Close every file still open (an export that failed half way); errors ignored."""
        for file in self._open:
            with suppress(OSError):
                file.close()
        self._open.clear()

    def record(self, rel: str, digest: str, size: int) -> None:
        """Count a written file."""
        self.hashes[rel] = digest
        self.files += 1
        self.bytes += size

    def put(self, rel: str, data: bytes) -> None:
        """Write the file ``rel`` whole."""
        sink = self.open(rel)
        sink.write(data)
        sink.close()

    def open(self, rel: str) -> _Sink:
        """The file ``rel``, written piece by piece; close it when done."""
        return _Sink(self, rel)

    def csv(self, rel: str, header: Sequence[str]) -> _CsvSink:
        """The CSV file ``rel`` with ``header``, written row by row; close it when done."""
        return _CsvSink(self.open(rel), header)

    def blob(self, digest: str, pieces: Callable[[], Iterable[bytes]], seq: int) -> None:
        """``blobs/<digest>`` with the stored bytes ``pieces()`` gives, once however often named.

        The bytes are written and hashed piece by piece (a large blob is never held whole) and
        must hash to ``digest`` (the store's own promise, checked as they pass).
        """
        if digest in self._withheld_blobs:
            if digest not in self.withheld.blobs:
                self.withheld.blobs[digest] = b"".join(pieces())
            return
        try:
            fd = os.open(f"{self._blob_dir}/{digest}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            return  # written for an earlier event
        except OSError as exc:
            self.guard(partial(_raise, exc))
            raise
        size = 0
        try:
            hashed = hashlib.sha256()
            for data in pieces():
                hashed.update(data)
                size += len(data)
                view = memoryview(data)
                while view:
                    view = view[self.guard(os.write, fd, view) :]
            found = hashed.hexdigest()
            if found != digest:
                raise StudyError(
                    f"blob {digest} (named by event seq {seq}): its stored bytes hash to "
                    f"{found}; the store is damaged"
                )
            if self._sync_each:
                self.guard(os.fsync, fd)
        finally:
            os.close(fd)
        self._blobs += bytes.fromhex(digest)
        self.files += 1
        self.bytes += size

    def blob_names(self) -> Iterator[str]:
        """The written blobs' names, sorted (from 32 bytes each, never a list of them all)."""
        import numpy as np

        for digest in np.sort(np.frombuffer(bytes(self._blobs), dtype="V32")):
            yield bytes(digest).hex()

    def blob_listing(self) -> dict[str, Any]:
        """``export.created``'s ``blobs``: the count and :func:`blob_listing_sha256`."""
        listing = hashlib.sha256()
        for name in self.blob_names():
            listing.update(f"{name}\n".encode("ascii"))
        return {"count": len(self._blobs) // 32, "listing_sha256": listing.hexdigest()}

    def sync_at_end(self) -> None:
        """From now on files are not synced one by one, where :meth:`sync` syncs them all."""
        self._sync_each = not can_sync_file_system()

    def sync(self) -> None:
        """Make every written file and directory durable."""
        if not self._sync_each:
            self.guard(sync_file_system, self.root)
        for directory in sorted(self._directories, key=lambda d: len(d.parts), reverse=True):
            if directory == self.root or self.root in directory.parents:
                fsync_directory(directory)


def _raise(exc: BaseException) -> None:
    raise exc


def _protocol_files(w: _Writer, study: Study, log: Ledger) -> None:
    protocol = protocol_event(log)
    assert protocol is not None
    locked: dict[str, tuple[str, str]] = {}
    for event in log.events("artifact.locked"):
        locked[event.body["path"]] = (event.body["role"], event.blobs["content"])
    for amendment in log.events("protocol.amended"):
        for change in amendment.body["changes"]:
            role = locked.get(change["path"], ("document", ""))[0]
            locked[change["path"]] = (role, change["sha256"])
    rows = []
    for rel, (role, digest) in sorted(locked.items()):
        target = archive_path(rel, role)
        w.put(target, log.blob(digest))
        rows.append((rel, role, digest, target))
    w.put("protocol/files.csv", _csv_bytes(("locked_path", "role", "sha256", "archive_path"), rows))
    for arm in sorted(study.arms):
        w.put(f"protocol/arms/{arm}.txt", study.arm_text(arm).encode("utf-8"))
    if identity_version(protocol.body) >= 2:  # docs/prompts.md §3.1: the arm identity objects
        for arm, data in sorted(_arm_identities(study, log, protocol.body).items()):
            w.put(f"protocol/arms/{arm}.json", data)
    w.put("protocol/protocol.json", _json_bytes({"seq": protocol.seq, **protocol.body}))


def _arm_identities(study: Study, log: Ledger, body: dict[str, Any]) -> dict[str, bytes]:
    """Each locked arm's identity object as canonical JSON, from the locked files' hashes."""
    digests = {e.body["path"]: e.body["sha256"] for e in log.events("artifact.locked")}

    def file(rel: str) -> str:
        if rel not in digests:
            raise StudyError(f"export: {rel} (named by protocol.locked) is not a locked file")
        return str(digests[rel])

    def component(name: str) -> str | None:
        path = study.components.get(name)
        return None if path is None else file(study.rel(path))

    return {
        arm: identity_bytes(identity_object(body, arm, component, file)) for arm in body["arms"]
    }


def trial_id_form(body: dict[str, Any]) -> str:
    """The form of a study's trial ids (``docs/prompts.md`` §7), e.g. ``arm|model|item|rep``."""
    unit = "item" if isinstance(body.get("items"), dict) else "stimulus"
    if "variants" in body:
        return f"arm|model|{unit}|variant|rep"
    if "models" in body:
        return f"arm|model|{unit}|rep"
    return f"arm|{unit}|rep"


def _readme_arm_intro(body: dict[str, Any]) -> list[str]:
    """The sentence and header of the README's arm table, by arm identity version."""
    if identity_version(body) < 2:
        return [
            "The composed prompt of each arm is `protocol/arms/<arm>.txt`; its SHA-256 is "
            "locked in `protocol.locked`.",
            "",
            "| arm | role | components | composed prompt SHA-256 |",
            "|---|---|---|---|",
        ]
    return [
        "Each arm's own text (its components joined by a blank line) is "
        "`protocol/arms/<arm>.txt`. Its identity, everything that shapes its requests (the "
        "component files, system prompt, item template, few-shot set, factor levels, sampling "
        "parameters, models and steps; `docs/prompts.md` §3.1 of the tool), is "
        "`protocol/arms/<arm>.json`, whose SHA-256 is the arm hash locked in `protocol.locked`: "
        "two arms that send different requests never share it.",
        "",
        "| arm | role | components | arm SHA-256 |",
        "|---|---|---|---|",
    ]


def _arm_settings_text(arm: dict[str, Any]) -> str:
    """What else an arm record sets, for the README's components cell (empty when nothing)."""
    said = []
    if arm.get("system"):
        said.append(f"system: {', '.join(arm['system'])}")
    if arm.get("factors"):
        said.append("levels: " + ", ".join(f"{f}={lv}" for f, lv in arm["factors"].items()))
    for key in ("fewshot", "sampling", "models", "replicates", "after"):
        if arm.get(key) is not None:
            value = arm[key]
            if isinstance(value, dict):
                value = ", ".join(f"{k}={v}" for k, v in value.items())
            elif isinstance(value, list):
                value = ", ".join(map(str, value))
            said.append(f"{key}: {value}")
    return f" ({'; '.join(said)})" if said else ""


_NONE, _RESPONDED, _FAILED, _ODD = 0, 1, 2, 3
"""An attempt's outcome code in :class:`_Attempts`: none yet, ``trial.responded``,
``trial.failed``, or one kept as recorded (a value the compact columns cannot hold)."""
_OUTCOME_NAMES = ("none", "responded", "failed")


def _sha_bytes(value: Any) -> bytes | None:
    """The 32 bytes of a lower-case hex SHA-256, or None for any other value (kept as is)."""
    if type(value) is not str or len(value) != 64:
        return None
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return None
    return raw if raw.hex() == value else None


class _Attempts:
    """``trials/attempts.csv``'s rows folded from the events, in compact columns (issue 41).

    Per ``trial.requested`` its seq, position and attempt as 8-byte integers, its request's
    SHA-256 as 32 bytes and its trial id; per request its outcome (the last ``trial.responded``
    or ``trial.failed`` naming its seq, as :func:`analysis._rows.attempts` has it) as a code,
    a seq, the response's 32 bytes, an error type (each distinct one kept once) and ``final``:
    about 200 bytes a trial where tuples of the event's values took 650. A value these columns
    cannot hold (not an integer, not a lower-case hex SHA-256) is kept as recorded, so the
    rows are those of the events whatever they hold.
    """

    def __init__(self) -> None:
        self.seqs = array("q")
        self.positions = array("q")
        self.numbers = array("q")  # the attempt numbers
        self.trials: list[str] = []
        self.request_shas = bytearray()
        self.odd_requests: dict[int, tuple[Any, ...]] = {}  # index -> the request's values
        self.codes = bytearray()
        self.outcome_seqs = array("q")
        self.response_shas = bytearray()
        self.finals = bytearray()
        self.errors = array("l")  # index into error_types, -1 for None
        self.error_types: list[str] = []
        self._error_index: dict[str, int] = {}
        self.odd_outcomes: dict[int, tuple[Any, ...]] = {}  # index -> the outcome's values
        self.unmatched: dict[Any, tuple[Any, ...]] = {}  # request_seq -> (event seq, outcome)

    def request(self, seq: int, position: Any, trial: Any, attempt: Any, sha256: Any) -> None:
        """Fold one ``trial.requested`` (events come in seq order)."""
        index = len(self.seqs)
        raw = _sha_bytes(sha256)
        regular = type(position) is int and type(attempt) is int and type(trial) is str
        if raw is None or not regular:
            self.odd_requests[index] = (seq, position, trial, attempt, sha256)
            position, attempt, trial, raw = 0, 0, "", bytes(32)
        self.seqs.append(seq)
        self.positions.append(position)
        self.numbers.append(attempt)
        self.trials.append(trial)
        self.request_shas += raw
        self.codes.append(_NONE)
        self.outcome_seqs.append(0)
        self.response_shas += bytes(32)
        self.finals.append(0)
        self.errors.append(-1)

    def _index(self, request_seq: Any) -> int | None:
        if type(request_seq) is not int:
            return None
        i = bisect_left(self.seqs, request_seq)
        return i if i < len(self.seqs) and self.seqs[i] == request_seq else None

    def outcome(
        self, request_seq: Any, code: int, seq: int, response: Any, error: Any, final: bool
    ) -> None:
        """Fold one ``trial.responded`` or ``trial.failed``: the later one wins."""
        index = self._index(request_seq)
        values = (_OUTCOME_NAMES[code], seq, response, error, final)
        if index is None:  # no request at that seq yet, or not an integer: kept as recorded
            self.unmatched[request_seq] = (seq, values)
            return
        raw = b"" if response is None else _sha_bytes(response)
        number = -1
        if error is not None:
            number = self._error_index.get(error, -1) if type(error) is str else -2
            if number == -1:
                number = self._error_index[error] = len(self.error_types)
                self.error_types.append(error)
        if raw is None or number == -2:
            self.odd_outcomes[index] = values
            code = _ODD
        else:
            self.odd_outcomes.pop(index, None)
            if raw:
                self.response_shas[32 * index : 32 * index + 32] = raw
        self.codes[index] = code
        self.outcome_seqs[index] = seq
        self.finals[index] = final
        self.errors[index] = max(number, -1)
        if code != _ODD and response is None:
            self.codes[index] = code | 4  # no response blob

    def rows(self) -> Iterator[tuple[Any, ...]]:
        """Each request's row of :data:`analysis._rows.ATTEMPT_COLUMNS`, in request order."""
        none = ("none", None, None, None, False)
        types = self.error_types
        for i, seq in enumerate(self.seqs):
            request = self.odd_requests.get(i) or (
                seq,
                self.positions[i],
                self.trials[i],
                self.numbers[i],
                self.request_shas[32 * i : 32 * i + 32].hex(),
            )
            code = self.codes[i]
            outcome: tuple[Any, ...] = none
            if code == _ODD:
                outcome = self.odd_outcomes[i]
            elif code != _NONE:
                error = self.errors[i]
                outcome = (
                    _OUTCOME_NAMES[code & 3],
                    self.outcome_seqs[i],
                    None if code & 4 else self.response_shas[32 * i : 32 * i + 32].hex(),
                    None if error < 0 else types[error],
                    bool(self.finals[i]),
                )
            late = self.unmatched.get(seq) if self.unmatched else None
            if late is not None and (code == _NONE or late[0] > self.outcome_seqs[i]):
                outcome = late[1]
            yield request + outcome


class _Fold:
    """What the archive's tables need from the events, folded in one pass in seq order.

    Each trial attempt and step call as a small tuple, each outcome as one (the last recorded
    wins, as :func:`analysis._rows.attempts` has it); the flow's and the checklists' facts in
    their own folds; ``scores/scores.csv`` written as its events pass.
    """

    def __init__(self, study: Study, scores: _CsvSink) -> None:
        from analysis._checklists import ChecklistEvents
        from analysis._flow import FlowFold

        self.steps = bool(study.steps)
        self.scores = scores
        self.flow = FlowFold()
        self.checklist = ChecklistEvents()
        self.attempts = _Attempts()
        self.step_requests: list[tuple[Any, ...]] = []
        self.step_outcomes: dict[int, tuple[Any, ...]] = {}

    def feed(self, event: Event) -> None:
        """Fold one event."""
        kind, b = event.kind, event.body
        if kind == "trial.requested":
            self.attempts.request(
                event.seq, b["position"], b["trial"], b["attempt"], b["request_sha256"]
            )
        elif kind == "trial.responded":
            self.attempts.outcome(
                b["request_seq"], _RESPONDED, event.seq, event.blobs.get("response"), None, True
            )
        elif kind == "trial.failed":
            self.attempts.outcome(
                b["request_seq"],
                _FAILED,
                event.seq,
                event.blobs.get("response"),
                b.get("error_type"),
                bool(b.get("final")),
            )
        elif kind == "trial.scored":
            self.scores.row(score_row(event))
        elif self.steps and kind == "step.requested":
            self.step_requests.append(
                (
                    event.seq,
                    b["call"],
                    b["step"],
                    b["model"],
                    b["item"],
                    b.get("trial", ""),
                    b["attempt"],
                    b["request_sha256"],
                )
            )
        elif self.steps and kind in ("step.responded", "step.failed"):
            self.step_outcomes[b["request_seq"]] = (
                kind.split(".")[1],
                event.seq,
                event.blobs.get("response"),
                b.get("format", ""),
                b.get("error_type", ""),
                bool(b.get("final")),
            )
        self.flow.feed(kind, event.seq, b)
        self.checklist.feed(event)

    def release(self) -> None:
        """Drop the per-trial records once the tables and the flow are written."""
        from analysis._flow import FlowFold

        self.attempts = _Attempts()
        self.step_requests, self.step_outcomes = [], {}
        self.flow = FlowFold()


def _trial_files(w: _Writer, log: Ledger, fold: _Fold) -> None:
    revealed = next(iter(log.events("blinding.revealed")), None)
    codes: dict[str, str] = revealed.body["arm_codes"] if revealed else {}
    protocol = protocol_event(log)
    assert protocol is not None
    schedule = schedule_ids(log.blob(protocol.blobs["schedule"]))
    out = w.csv("trials/schedule.csv", schedule_columns(schedule))
    for row in schedule_rows(schedule, codes):
        out.row(row)
    out.close()
    del schedule
    out = w.csv("trials/attempts.csv", ATTEMPT_COLUMNS)
    for row in fold.attempts.rows():  # as analysis._rows.Attempt.row() writes each attempt
        out.row(row)
    out.close()


STEP_COLUMNS = (
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
)
"""``trials/steps.csv``: one row per step call attempt (``docs/archive-format.md`` §1)."""


def _step_file(w: _Writer, study: Study, log: Ledger, fold: _Fold) -> None:
    """``trials/steps.csv``: each step request, its outcome and the vote its response parses to.

    ``vote`` is the parsed value as the slot writes it (a string as is, other JSON as canonical
    JSON), empty for an unparseable response or a failure; ``final`` says whether the attempt
    made its call final (``docs/prompts.md`` §8.3). Responses are read one at a time.
    """
    from runner import Renderer
    from runner.steps import StepWork, output_text, reply_text

    work = StepWork(study, Renderer(study))
    responses: dict[str, int] = {}
    out = w.csv("trials/steps.csv", STEP_COLUMNS)
    for seq, call, step, model, item, trial, attempt, request_sha256 in fold.step_requests:
        found = fold.step_outcomes.get(seq)
        vote = ""
        final = False
        if found is not None and found[0] == "responded":
            if found[2] is None:
                raise StudyError(f"step.responded seq {found[1]}: no response blob")
            text = reply_text(log.blob(found[2]), found[3])
            value = work.parsed(step, text)
            responses[call] = responses.get(call, 0) + 1
            spec = study.steps[step]
            vote = "" if value is None else str(output_text(value))
            final = value is not None or responses[call] >= spec.retry + 1
        elif found is not None:
            final = found[5]
        out.row(
            (
                seq,
                call,
                step,
                model,
                item,
                trial,
                attempt,
                request_sha256,
                found[0] if found is not None else "none",
                found[1] if found is not None else "",
                (found[2] or "") if found is not None else "",
                vote,
                found[4] if found is not None and found[0] == "failed" else "",
                str(final),
            )
        )
    out.close()


def _analysis_files(
    w: _Writer,
    root: Path,
    log: Ledger,
    study: Study | None = None,
    fold: _Fold | None = None,
    verification: Callable[[], Any] | None = None,
    report_dir: Path | None = None,
) -> tuple[list[dict[str, Any]], Report | None]:
    """The archive's ``analysis/`` files: results, tables, checklists and the report.

    Returns the results and, with ``report_dir``, the report written there (its figures and
    HTML are rendered once, into ``report_dir``, and the archive takes the same bytes; None
    when the report module is not installed). ``verification``, when given, gives the
    verifier's report of the ledger (the export's child process) to the report.
    """
    results = [{"seq": e.seq, **e.body} for e in log.events("analysis.result")]
    if not results:
        raise StudyError(f"{root}: nothing to export yet; run 'ledger analyze' first")
    first = next(iter(log.events("analysis.result")))
    w.put("analysis/results.json", _json_bytes(results))
    for rel, name in (("analysis/trials.csv", "trials_csv"), ("analysis/items.csv", "items_csv")):
        sink = w.open(rel)  # hundreds of megabytes at 10^5 trials: copied piece by piece
        for piece in log.blob_chunks(first.blobs[name]):
            sink.write(piece)
        sink.close()
    verdicts = [
        (
            r["hypothesis"],
            r["test"],
            r["status"],
            r["verdict"],
            json.dumps(r["decided_by"], sort_keys=True) if r["decided_by"] else "",
            r["error"] or "",
        )
        for r in results
        if r["hypothesis"]
    ]
    _review_files(w, study or check_integrity(root), log, results)
    w.put(
        "analysis/tables/verdicts.csv",
        _csv_bytes(("hypothesis", "test", "status", "verdict", "decided_by", "error"), verdicts),
    )
    flow = _reporting_files(w, log, fold)
    if fold is not None:
        fold.release()  # before the report, which verifies the whole ledger
    try:
        from analysis._report import build_report
    except ImportError:  # the report module is optional for an export
        return results, None
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) if report_dir is None else report_dir
        report = build_report(root, out, flow=flow, verification=verification)
        # what build_report wrote: its figures and report.html (report_dir may hold others)
        written = [*(figure.path for figure in report.figures), report.html_path]
        for rel, path in sorted((p.relative_to(out).as_posix(), p) for p in written):
            name = "analysis/report.html" if rel == "report.html" else f"analysis/figures/{rel}"
            w.put(name, path.read_bytes())
    return results, None if report_dir is None else report


def _reporting_files(w: _Writer, log: Ledger, fold: _Fold | None = None) -> Flow:
    """The trial flow's data and SVG, and the reporting checklists (``docs/reporting.md``).

    ``fold``, when given, has read every event already (the export's one pass).
    """
    from analysis._checklists import checklist_files
    from analysis._flow import check_invariants, flow_csv, flow_svg, study_flow

    flow = study_flow(log, fold.flow if fold is not None else None)
    broken = list(check_invariants(flow))
    if broken:  # a writer bug, never the user's input
        raise StudyError(f"export: the trial flow does not add up: {broken[0]}")
    w.put("analysis/tables/flow.csv", flow_csv(flow))
    w.put("analysis/figures/flow.svg", flow_svg(flow))
    checklist = fold.checklist if fold is not None else None
    for rel, data in checklist_files(log, flow, checklist).items():
        w.put(rel, data)
    return flow


def _review_files(w: _Writer, study: Study, log: Ledger, results: list[dict[str, Any]]) -> None:
    """``analysis/review/<NAME>.csv`` of each computed ``review.<NAME>`` result."""
    from analysis._review import review_csv, review_text

    reviews = [
        r
        for r in results
        if str(r["id"]).startswith("review.")
        and r["status"] == "ok"
        and r["test"] == "review-sample"
    ]  # a contrast sample's cases (not the tables)
    if not reviews:
        return
    items = {item.id: item.data for item in study.load_items()}

    def response(seq: int) -> str:
        event = log.get(seq)
        fmt = str(event.body.get("format", "anthropic-messages"))
        return review_text(log.blob(event.blobs["response"]), fmt)

    for r in reviews:
        name = str(r["id"])[len("review.") :]
        w.put(f"analysis/review/{name}.csv", review_csv(r["values"], items, response))


def _cell_text(value: Any) -> str:
    """One Markdown table cell: a pipe or a newline cannot split the row."""
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _model_text(model: dict[str, Any]) -> str:
    return (
        f"`{model.get('id')}` (provider `{model.get('provider')}`), max_tokens "
        f"{model.get('max_tokens')}, temperature {model.get('temperature')}"
        + (f", top_p {model['top_p']}" if "top_p" in model else "")
    )


def _readme_models(body: dict[str, Any]) -> list[str]:
    """The README's model line, or one line per model of a ``[models]`` study.

    A list, not a table: the verifier reads the README's only three-column table as the
    verdicts.
    """
    models = body.get("models")
    if not isinstance(models, dict):
        return [f"- Model: {_model_text(body.get('model', {}))}"]
    order = body.get("model_order") or sorted(models)
    return [
        f"- Models ({len(order)}, each analysed on its own and pooled with the model as a "
        "fixed factor; verdicts `<hypothesis>@<model>` are one model's):"
    ] + [f"  - `{name}`: {_model_text(models.get(name) or {})}" for name in order]


def _readme_design(body: dict[str, Any], arms: int) -> list[str]:
    """The README's stimuli and trials lines: an image folder, or an item file."""
    design = body.get("design", {})
    order = (
        f"in the order fixed by seed `{design.get('seed')}` (schedule SHA-256 "
        f"`{body.get('schedule_sha256')}`)"
    )
    items = body.get("items")
    if "stimuli" in body or not isinstance(items, dict):
        stimuli = len(body.get("stimuli", []))
        return [
            f"- Stimuli: {stimuli} images (`stimuli/`, truth in `truth/`)",
            f"- Trials: {body.get('trials')} = {arms} arms x {stimuli} stimuli x "
            f"{design.get('replicates')} replicate(s), {order}",
        ]
    return [
        f"- Items: {items.get('count')} in `{items.get('path')}` (the answers are the "
        "items' `answer`)",
        f"- Trials: {body.get('trials')} over {arms} arms (each arm's models, items and "
        f"replicates as locked in `protocol.locked`), {order}",
    ]


def _readme(study: Study, log: Ledger, results: list[dict[str, Any]]) -> bytes:
    """The archive's README: what the study is, its verdicts, and how to verify it.

    Everything comes from the signed events (``protocol.locked``, ``run.started``,
    ``analysis.result``). The verdict table (``| hypothesis | test | verdict |``) is the one the
    verifier's ``derived`` check reads; no other table in this file has three columns.
    """
    protocol = protocol_event(log)
    assert protocol is not None
    body = protocol.body
    sessions = [e.body for e in log.events("run.started")]
    lines = [
        *_readme_title(study, log, protocol.seq, body, sessions),
        *_readme_study(body, sessions),
        *_readme_arms(body),
        *_readme_verdicts(body, results),
        *_readme_deviations(body),
        *_readme_posthoc(log),
        *_readme_how_to_verify(body, protocol.seq),
    ]
    return "\n".join(lines).encode("utf-8")


def _simulated(sessions: list[dict[str, Any]]) -> bool:
    return any(s.get("simulated") for s in sessions)


def _readme_title(
    study: Study, log: Ledger, seq: int, body: dict[str, Any], sessions: list[dict[str, Any]]
) -> list[str]:
    """The title, where the study comes from, and the notices above everything else."""
    title = body.get("title") or study.title
    lines = [
        f"# {title}",
        "",
        f"Study `{body.get('study', study.id)}` (ledger origin `{study.origin}`), registered "
        f"with `protocol.locked` at seq {seq} and exported by PROMPT Ledger as an "
        f"OSF-style archive (format {ARCHIVE_FORMAT}, described in `docs/archive-format.md` of "
        "the tool).",
        "",
    ]
    notice = session_notice([{"seq": e.seq, **e.body} for e in log.events("run.started")])
    if notice is not None:  # docs/trials.md §2: what the server said about the locked model
        lines += [f"**{notice}**", ""]
    if _simulated(sessions):
        lines += [
            "**SIMULATED DATA. The responses in this archive come from the offline simulated "
            "model (backend `simulated`), not from a real model: no model was asked anything. "
            "The archive demonstrates the method only; its verdicts say nothing about any "
            "model.**",
            "",
        ]
    return lines


def _readme_study(body: dict[str, Any], sessions: list[dict[str, Any]]) -> list[str]:
    """``## The study``: what an arm is, the models, backends, design and response format."""
    simulated = _simulated(sessions)
    backends = sorted({str(s.get("backend")) for s in sessions})
    return [
        "## The study",
        "",
        "A randomized experiment on prompts: each arm is a fixed prompt (its components joined "
        "by a blank line) sent with one stimulus image per trial; responses are parsed and "
        "scored against the truth table, blinded to the arm, then analysed as pre-registered."
        if "stimuli" in body or not isinstance(body.get("items"), dict)
        else "A randomized experiment on prompts: each arm is a prompt template rendered for one "
        "item per trial (`docs/prompts.md` of the tool); responses are parsed and scored "
        "against the item's answer, blinded to the arm, then analysed as pre-registered.",
        "",
        *_readme_models(body),
        f"- Backend: {', '.join(f'`{b}`' for b in backends) or 'none (never run)'} in "
        f"{len(sessions)} run session(s)"
        + (" -- **SIMULATED: no real model answered**" if simulated else ""),
        *_readme_design(body, len(body.get("arms", {}))),
        f"- Response format `{body.get('response', {}).get('format')}`, parsed by "
        f"`{body.get('response', {}).get('parser')}`",
        "",
    ]


def _readme_arms(body: dict[str, Any]) -> list[str]:
    """``### Arms``: each arm's role, components (or data field) and hash."""
    arms: dict[str, Any] = body.get("arms", {})
    lines = [
        "### Arms",
        "",
        *_readme_arm_intro(body),
    ]
    for arm_id in sorted(arms):
        arm = arms[arm_id]
        parts = ", ".join(arm.get("components", []))
        if arm.get("response_from"):  # docs/trials.md §6: a data arm, no model asked
            parts = f"none: responses are the items' {arm['response_from']} field (data)"
        elif identity_version(body) >= 2:
            parts += _arm_settings_text(arm)
        lines.append(
            f"| {_cell_text(arm_id)} | {_cell_text(arm.get('role'))} | "
            f"{_cell_text(parts)} | `{arm.get('sha256')}` |"
        )
    return lines


def _readme_verdicts(body: dict[str, Any], results: list[dict[str, Any]]) -> list[str]:
    """The verdict table (the verifier's ``derived`` check reads it) and each hypothesis."""
    by_id = {r["hypothesis"]: r for r in results if r["hypothesis"]}
    lines = [
        "",
        "## Verdicts of the pre-registered hypotheses",
        "",
        "| hypothesis | test | verdict |",
        "|---|---|---|",
    ]
    for r in results:
        if r["hypothesis"]:
            lines.append(f"| {r['hypothesis']} | {r['test']} | {r['verdict']} |")
    lines += ["", "### The hypotheses as registered", ""]
    for h in body.get("hypotheses", []):
        lines += _readme_hypothesis(h, by_id.get(h.get("id")))
    return lines


def _hypothesis_details(h: dict[str, Any]) -> list[str]:
    """The registered settings of a hypothesis, in words (test, sides, kind's keys, rule)."""
    details = [f"{h.get('test')}", f"{h.get('sides')}"]
    for key in ("statistic", "variant", "basis", "samples", "incomplete", "min_pp", "max_pp"):
        if h.get(key) is not None:  # seed 002's kinds (docs/mcq-statistics.md §11)
            details.append(f"{key} {h[key]}")
    optional = (
        ("alpha", "alpha {}"),
        ("min_difference_pp", "minimum difference {} pp"),
        ("margin_pp", "margin {} pp"),
    )
    details += [text.format(h[key]) for key, text in optional if h.get(key) is not None]
    if h.get("correction") not in (None, "none"):
        details.append(f"{h['correction']} within family `{h.get('family')}`")
    if h.get("stimuli"):
        details.append(f"on stimuli {', '.join(map(str, h['stimuli']))} only")
    if h.get("pairing"):
        details.append(f"pairs by ({', '.join(map(str, h['pairing']))})")
    return details


def _readme_hypothesis(h: dict[str, Any], res: dict[str, Any] | None) -> list[str]:
    """One registered hypothesis: what it compares, its settings, and its verdict."""
    contrast = h.get("contrast") or ["?", "?"]
    details = "; ".join(_hypothesis_details(h))
    desc = " ".join(str(h.get("description") or "(no description)").split())
    verdict = (
        f"**{res['verdict']}** ({describe_decision(res)})"
        if res is not None
        else "no analysis.result"
    )
    if h.get("arm"):
        kind = kind_of(h)
        variants = h.get("variants") or kind is None or kind.arm_compares_variants
        listed = f", {' vs '.join(map(str, h.get('variants') or []))}" if variants else ""
        what = f"  arm {h['arm']}{listed}"
    elif h.get("effect"):  # a factorial term
        what = f"  effect {' × '.join(map(str, h['effect']))}"
    else:
        what = f"  {contrast[0]} - {contrast[1]}"
    return [
        f"- **{h.get('id')}**: {desc}  ",
        f"{what} on `{h.get('outcome')}`; {details}.  ",
        f"  Verdict: {verdict}",
    ]


def _readme_deviations(body: dict[str, Any]) -> list[str]:
    """The declared deviations from the source protocol, when there are any."""
    deviations = body.get("deviations") or []
    if not deviations:
        return []
    lines = [
        "",
        "### Declared deviations from the source protocol",
        "",
        "Locked in `protocol.locked` (`[[deviations]]` of `study.toml`) before any trial ran:",
        "",
    ]
    for d in deviations:
        lines.append(
            f"- **{d.get('id')}** ({' '.join(str(d.get('source')).split())}): "
            f"{' '.join(str(d.get('choice')).split())} Reason: "
            f"{' '.join(str(d.get('reason')).split())}"
        )
    return lines


def _readme_posthoc(log: Ledger) -> list[str]:
    """The post-hoc analyses: each one's difference and reason (no verdict)."""
    posthoc = [e for e in log.events("analysis.posthoc")]
    if not posthoc:
        return []
    lines = [
        "",
        "### Post hoc analyses (declared after unblinding; not pre-registered)",
        "",
        "Each was declared and recorded (`analysis.posthoc`) after the registered "
        "analysis; none has a verdict or changes one:",
        "",
    ]
    for e in posthoc:
        b, d = e.body, e.body.get("declared") or {}
        c = (b.get("values") or {}).get("contrast") or {}
        test = (
            f", two-sided p = {c['p']:.3g}" if c.get("p") is not None else " (percentile bootstrap)"
        )
        outcome = (
            f"{100 * c['estimate']:+.1f} pp (95% CI {100 * c['lower']:+.1f} to "
            f"{100 * c['upper']:+.1f}){test}"
            if b.get("status") == "ok" and c
            else f"not computed: {b.get('error')}"
        )
        lines.append(
            f"- **{b.get('id')}** (seq {e.seq}, post hoc): {b.get('title')}: "
            f"{outcome}. Reason: {d.get('reason')}"
        )
    return lines


def _readme_how_to_verify(body: dict[str, Any], seq: int) -> list[str]:
    """Where the numbers are, and how to verify the archive (with the verifier and by hand)."""
    return [
        "",
        "Every number is in `analysis/results.json` (the signed `analysis.result` events); "
        "`analysis/report.html` shows them with figures.",
        "",
        "## How to verify",
        "",
        "Get the owner's vkey and the registration checkpoint from where the authors published "
        "them (a preregistration, a registry entry), not from this archive. Then, offline, with "
        "the independent verifier of PROMPT Ledger (`verify/`, which shares no code with the "
        "writer and runs without it):",
        "",
        "    python -m verify . --trusted-key @OWNER.vkey --checkpoint REGISTRATION.txt",
        "",
        "where `OWNER.vkey` holds the published vkey and `REGISTRATION.txt` the published "
        "checkpoint.",
        "(`ledger verify .` with the same options runs the same checks.) It prints every check "
        "with PASS, FAIL or WARN and the file, line or event seq at fault, and exits 0 only if "
        "nothing failed.",
        "",
        "By hand:",
        "",
        "- `sha256sum -c MANIFEST.sha256` checks every file against the manifest. A forger can "
        "rewrite the manifest, so the signed ledger is what counts:",
        '- `ledger/events.jsonl` has one event per line, `{"envelope":ENVELOPE,'
        '"signature":"BASE64"}`, where ENVELOPE is RFC 8785 canonical JSON, its leaf hash is '
        "`SHA-256(0x00 || ENVELOPE)`, the next event's `prev` is that leaf hash, and the "
        "signature is Ed25519 over ENVELOPE by the key in `ledger/keys/` its `actor` names.",
        "- The last event, `export.created`, lists in `files` the SHA-256 of every file outside "
        "`ledger/` and `blobs/` except `MANIFEST.sha256` (`sha256sum` each and compare). Each "
        "file in `blobs/` is named by the SHA-256 of its content (`sha256sum blobs/*`), and the "
        "event pins which blobs there are: `blobs.count` and `blobs.listing_sha256`, the "
        "SHA-256 of the sorted names each followed by a newline "
        "(`ls blobs | LC_ALL=C sort | sha256sum`; `ls blobs | wc -l` for the count).",
        "- `ledger/checkpoints/<size>.txt` are signed C2SP checkpoints (origin, tree size, "
        "RFC 6962 Merkle root), one signed at each step the protocol promises: the "
        f"registration checkpoint `ledger/checkpoints/{seq + 1:08d}.txt` (signed at "
        "lock, size = `protocol.locked` seq + 1) must equal the published one; then one right "
        "after each run session's `run.stopped` and the final one (after `export.created`).",
        f"- The schedule is the trial ids (`{trial_id_form(body)}`) sorted by "
        '`SHA-256("{seed}|{trial id}")` '
        "(`protocol/protocol.json` has the seed; `trials/schedule.csv` the order); "
        f"`sha256sum protocol/arms/*.{'json' if identity_version(body) >= 2 else 'txt'}` "
        "gives the arm hashes above.",
        "- `blobs/` holds every request and response byte for byte; `trials/attempts.csv` "
        "says which blob is which attempt's request (`request_sha256`) and response "
        "(`response_sha256`).",
        "",
    ]


def witness_policy_file(log: Ledger) -> bytes | None:
    """``ledger/witnesses.json``: the trust policy the study locked (``docs/witness.md`` §8).

    The ``witnessing`` member of the last ``protocol.locked`` (the one in force) as canonical
    JSON and a newline, or None for a study without witnesses.
    """
    locked = list(log.events("protocol.locked"))  # the last is in force (a later phase's)
    record = locked[-1].body.get("witnessing") if locked else None
    return None if record is None else canonical_json(record) + b"\n"


def _locked_withhold(log: Ledger) -> list[str]:
    """The ``withhold`` list of the locked ``[privacy]`` policy (the last ``protocol.locked``)."""
    locked = list(log.events("protocol.locked"))
    privacy = locked[-1].body.get("privacy") if locked else None
    return list(privacy.get("withhold", [])) if isinstance(privacy, dict) else []


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _swap_into_place(tmp: Path, target: Path) -> None:
    """Rename the finished archive ``tmp`` to ``target`` with no moment without an archive.

    An existing ``target`` (``--force``) is renamed aside first, the new archive renamed into
    place, and only then is the old one deleted; if the second rename fails, the old archive is
    put back.
    """
    if not target.exists() and not target.is_symlink():
        os.replace(tmp, target)
        return
    aside = target.parent / f".{target.name}.old-{os.getpid()}"
    if aside.exists() or aside.is_symlink():
        _remove(aside)
    os.replace(target, aside)
    try:
        os.replace(tmp, target)
    except BaseException:
        os.replace(aside, target)
        raise
    try:
        _remove(aside)
    except OSError as exc:
        raise StudyError(
            f"the new archive is in place at {target}, but the old one, renamed to {aside}, "
            f"could not be deleted: {exc}"
        ) from exc


@dataclass(frozen=True)
class PublicExport:
    """What a public export (``ledger export --public``) needs: the annex file and its auditors."""

    annex: Path
    auditors: tuple[Path, ...]


@dataclass
class _Withheld:
    """What a public export leaves out: stored blobs by address, files with their salts."""

    blobs: dict[str, bytes]
    files: dict[str, tuple[bytes, bytes]]  # archive path -> (salt, content)

    def commitments(self) -> dict[str, str]:
        """Each withheld file's commitment (``docs/privacy.md`` §3): a sealed blob's address."""
        return {rel: commitment(data, salt) for rel, (salt, data) in sorted(self.files.items())}


def _withheld_paths(log: Ledger, withhold: Sequence[str]) -> set[str]:
    """The archive files a public export leaves out under ``withhold`` (``docs/privacy.md``)."""
    entries = set(withhold)
    roles = {e.partition(":")[2] for e in entries if e.startswith("artifact.locked:")}
    paths: set[str] = set()
    locked_roles: dict[str, str] = {}
    for event in log.events("artifact.locked"):
        locked_roles[event.body["path"]] = event.body["role"]
    for rel, role in locked_roles.items():
        if role in roles:
            paths.add(archive_path(rel, role))
    if "analysis.result:items_csv" in entries:
        paths.add("analysis/items.csv")
    if "analysis.result:trials_csv" in entries:
        paths.add("analysis/trials.csv")
    if entries & {"step.responded:response", "step.requested:request"}:
        paths.add("trials/steps.csv")
    if entries & {"trial.responded:response", "artifact.locked:items"}:
        paths.add("analysis/review/")  # every review sample (questions and responses)
    return paths


def _withheld_blobs(log: Ledger, withhold: Sequence[str]) -> set[str]:
    """The addresses of every blob a public export withholds (``docs/privacy.md`` §3)."""
    policy = SealPolicy.from_entries(withhold)
    amended: dict[str, list[str]] = {}
    for event in log.events("protocol.amended"):
        for change in event.body["changes"]:
            amended.setdefault(change["path"], []).append(event.blobs[change["blob"]])
    addresses: set[str] = set()
    for event in log.events():
        for name in policy.names(event.kind, event.body):
            if name in event.blobs:
                addresses.add(event.blobs[name])
        if event.kind == "artifact.locked" and event.body["role"] in policy.roles:
            addresses.add(event.blobs["content"])
            addresses.update(amended.get(event.body["path"], ()))
    return addresses


def _public_notice(withheld: _Withheld, withhold: Sequence[str]) -> bytes:
    """The README's section on what a public archive withholds (``docs/privacy.md``)."""
    files = ", ".join(f"`{rel}`" for rel in sorted(withheld.files)) or "none"
    return (
        "\n## Public archive: withheld data\n\n"
        f"This is a public archive. Under the privacy policy locked in `protocol.locked` "
        f"({', '.join(f'`{e}`' for e in withhold)}), {len(withheld.blobs)} blob(s) and "
        f"{len(withheld.files)} file(s) ({files}) are withheld; `export.created` commits to "
        "each. `ledger verify .` reports PARTIAL and names every check it could not re-derive; "
        "an auditor holding the sealed annex verifies everything with "
        "`ledger verify . --annex FILE --identity KEY` (`docs/privacy.md`).\n"
    ).encode()


def _annex_payload(withheld: _Withheld) -> dict[str, Any]:
    b64 = base64.b64encode
    return {
        "blobs": {a: b64(data).decode("ascii") for a, data in withheld.blobs.items()},
        "files": {
            rel: {"salt": b64(salt).decode("ascii"), "content": b64(data).decode("ascii")}
            for rel, (salt, data) in withheld.files.items()
        },
    }


def _background_verification(
    path: Path | PostgresLocation | RemoteLocation,
) -> BackgroundVerification | None:
    """The report's verification of ``path`` started in a child process, or None.

    None for a ledger behind ``ledger serve``: the report copies it first, in place. (Without
    the report module, the export has no report and stops the child unread.)
    """
    if isinstance(path, RemoteLocation):
        return None
    return BackgroundVerification(str(path))


def export_study(
    root: str | Path,
    directory: str | Path,
    key: SigningKey,
    *,
    force: bool = False,
    public: PublicExport | None = None,
    report_dir: str | Path | None = None,
) -> ExportResult:
    """Write the archive of the analysed study at ``root`` into ``directory``.

    With ``public``, the archive is the public one of ``docs/privacy.md``: every blob and file
    the locked ``[privacy]`` policy withholds is left out (committed in ``export.created``) and
    written, encrypted to the auditors, to the annex file instead. With ``report_dir``, the
    report the archive holds (its figures and ``report.html``) is also left in that folder, as
    :func:`analysis.build_report` ``(root, report_dir)`` would write it, without rendering it
    a second time (``ledger demo`` does this).
    """
    root, target = Path(root), Path(directory)
    real_root, real_target = root.resolve(), target.resolve()
    if real_target == real_root or real_target in real_root.parents or real_target == Path.cwd():
        raise StudyError(
            f"{target} is the study directory, one of its parents or the current directory; "
            "an export there would delete the study's ledger: choose another directory"
        )
    target = real_target
    if target.exists() and (not target.is_dir() or any(target.iterdir())) and not force:
        raise StudyError(f"{target} exists and is not empty; choose another directory or --force")
    study = check_integrity(root)
    auditors = []
    if public is not None:
        from analysis._annex import read_auditor_public_key

        if not study.privacy:
            raise StudyError(
                f"{root}: --public needs a locked [privacy] policy (docs/privacy.md); this "
                "study withholds nothing"
            )
        auditors = [read_auditor_public_key(p) for p in public.auditors]
        if not auditors:
            raise StudyError("--public needs at least one --auditor public key for the annex")
        if public.annex.exists() or public.annex.is_symlink():
            raise StudyError(f"{public.annex} exists; choose another annex file")
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
    except OSError as exc:
        raise OutputError(f"cannot write the archive: {describe_os_error(exc, target)}") from exc
    committed = False
    annex_written: Path | None = None
    w: _Writer | None = None
    background: BackgroundVerification | None = None
    try:
        # One transaction holds export.created, the final checkpoint and any promised checkpoint
        # signed here; it commits only once every archive file is written and synced, so an
        # archive that cannot be written (a full disk) leaves the ledger as it was.
        with Ledger.open(ledger_path(root)) as log, log.transaction():
            # The report's verification of the ledger runs beside this export's own pass: this
            # transaction holds the write lock, so it verifies what the report would (issue 41).
            background = _background_verification(ledger_path(root))
            sign_missing_checkpoints(log, key)  # a lock or a session killed before signing
            withhold = _locked_withhold(log) if public is not None else []
            w = _Writer(
                tmp,
                target,
                _withheld_paths(log, withhold) if public is not None else None,
                _withheld_blobs(log, withhold) if public is not None else None,
            )
            w.sync_at_end()
            _protocol_files(w, study, log)
            # One pass over the events in seq order: the ledger's lines and the blobs are
            # copied as stored, the tables' rows and the flow's and checklists' facts folded.
            size = log.size
            events = w.open(f"{LEDGER_DIR}/events.jsonl")
            fold = _Fold(study, w.csv("scores/scores.csv", SCORE_COLUMNS))
            for e in _events_in_pages(log, 0, size):
                events.write(_event_line(e))
                for digest in e.blobs.values():
                    w.blob(digest, partial(log.stored_blob_chunks, digest), e.seq)
                fold.feed(e)
            fold.scores.close()
            _trial_files(w, log, fold)
            if study.steps:
                _step_file(w, study, log, fold)
            results, report = _analysis_files(
                w,
                root,
                log,
                study,
                fold,
                background.result if background else None,
                None if report_dir is None else Path(report_dir),
            )
            if background is not None:
                background.close()  # reaped (its report was read, or there is no report)
            del fold
            readme = _readme(study, log, results)
            privacy: dict[str, Any] = {}
            withheld = w.withheld
            if public is not None:
                readme += _public_notice(withheld, withhold)
                privacy = {
                    "privacy": {
                        "withhold": withhold,
                        "withheld_blobs": {
                            "count": len(withheld.blobs),
                            "listing_sha256": blob_listing_sha256(withheld.blobs),
                        },
                        "withheld_files": withheld.commitments(),
                    }
                }
            w.put("README.md", readme)
            covered = {rel: digest for rel, digest in w.hashes.items() if rel != events.rel}
            event = log.append(
                "export.created",
                {
                    "archive_format": ARCHIVE_FORMAT,
                    "study": study.id,
                    "files": covered,
                    "blobs": w.blob_listing(),
                    **privacy,
                },
                key=key,
            )
            note = log.sign_checkpoint(key)
            for e in log.events(start=size):  # this connection sees its own uncommitted events
                events.write(_event_line(e))
            events.close()
            # of two notes of one size, the one with the most (co)signatures is the one kept
            checkpoints: dict[str, bytes] = {}
            for cp in sorted(log.checkpoints(), key=lambda c: c.note.count("\n")):
                checkpoints[f"{LEDGER_DIR}/checkpoints/{cp.size:08d}.txt"] = cp.note.encode()
            for rel, data in checkpoints.items():
                w.put(rel, data)
            policy = witness_policy_file(log)
            if policy is not None:
                w.put(POLICY_FILE, policy)
            registered = log.keys()
            for k in registered:
                stem = k.actor.replace("/", "_").replace(":", "_").replace("+", "_")
                w.put(f"{LEDGER_DIR}/keys/{stem}.vkey", (k.vkey + "\n").encode("ascii"))
            manifest = w.open(MANIFEST)
            listed = heapq.merge(
                sorted(w.hashes.items()),
                ((f"blobs/{name}", name) for name in w.blob_names()),
            )
            chunk: list[str] = []
            for rel, digest in listed:
                chunk.append(f"{digest}  {rel}\n")
                if len(chunk) >= 4096:
                    manifest.write("".join(chunk).encode("utf-8"))
                    chunk.clear()
            manifest.write("".join(chunk).encode("utf-8"))
            manifest.close()
            w.sync()
            if public is not None:
                from analysis._annex import ANNEX_MAGIC, annex_bytes, write_annex

                header = {
                    "annex": ANNEX_MAGIC,
                    "study": study.id,
                    "origin": log.origin,
                    "export_seq": event.seq,
                    "export_leaf_hash": event.leaf_hash.hex(),
                }
                write_annex(public.annex, annex_bytes(header, _annex_payload(withheld), auditors))
                annex_written = public.annex
        committed = True
        _swap_into_place(tmp, target)
    except BaseException as exc:
        if background is not None:
            background.close()
        if w is not None:
            w.close_all()
        if not committed:
            shutil.rmtree(tmp, ignore_errors=True)
            if annex_written is not None:
                annex_written.unlink(missing_ok=True)
        elif isinstance(exc, OSError):  # the archive is complete in tmp and recorded
            raise StudyError(
                f"the archive was written to {tmp} and export.created recorded, but it could "
                f"not be renamed to {target} ({describe_os_error(exc)}); rename it yourself"
            ) from exc
        raise
    fsync_directory(target.parent)
    return ExportResult(target, w.files, w.bytes, event.seq, note, report)
