"""The recorded events of a study, read alike from its ledger or from an exported archive.

A study folder keeps its events in ``ledger.db`` (SQLite, :class:`ledger.Ledger`); an archive
written by ``ledger export`` keeps the same events in ``ledger/events.jsonl`` and the blobs they
name in ``blobs/`` (``docs/archive-format.md`` §1). :func:`open_recorded` gives both one
read-only face: the events in seq order and the blobs by SHA-256. The replay backend and
:func:`analysis.load` read through it.

It reads; it does not verify (``verify/`` does), beyond refusing a line that is not an event
and a blob file whose content does not match its name. An archive is a folder anyone may hand
over, so it is read as the verifier reads it: only regular files are opened (a named pipe in
place of a blob would block the reader forever), a line is at most :data:`MAX_LINE_BYTES`, an
envelope nested too deep to parse is a bad line, and a blob is at most :data:`MAX_BLOB_BYTES`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Literal, Protocol

from ledger import (
    Ledger,
    PostgresLocation,
    RemoteLocation,
    describe_os_error,
    open_blob,
    open_regular_file,
    read_regular_file,
)
from runner._errors import StudyError
from runner._lock import LEDGER_FILE, STORE_FILE, ledger_path

EVENTS_FILE = "ledger/events.jsonl"
BLOBS_DIR = "blobs"
_SHA256 = re.compile(r"[0-9a-f]{64}")

Layout = Literal["study", "archive", "ledger"]

MAX_LINE_BYTES = (1 << 20) + 1024
"""Longest ``events.jsonl`` line read: an envelope is at most 1 MiB (``docs/ledger-format.md``)
and its line adds the signature and the wrapper."""
MAX_BLOB_BYTES = 1 << 30
"""Largest blob read from an archive (the verifier's limit for a blob, ``docs/archive-format.md``
§6)."""


class RecordedEvent(Protocol):
    """What a reader needs of one event (:class:`ledger.Event` and :class:`ArchivedEvent`)."""

    @property
    def seq(self) -> int:
        """The event's position in the log, from 0."""
        ...

    @property
    def time(self) -> str:
        """The appender's clock, RFC 3339 UTC."""
        ...

    @property
    def kind(self) -> str:
        """The event kind, e.g. ``trial.responded``."""
        ...

    @property
    def actor(self) -> str:
        """The signing key's name and key id."""
        ...

    @property
    def body(self) -> dict[str, Any]:
        """The event body."""
        ...

    @property
    def blobs(self) -> dict[str, str]:
        """Blob name -> SHA-256 (hex)."""
        ...


@dataclass(frozen=True)
class ArchivedEvent:
    """One event read from an archive's ``ledger/events.jsonl``."""

    seq: int
    time: str
    kind: str
    actor: str
    body: dict[str, Any]
    blobs: dict[str, str]


def layout(path: str | os.PathLike[str]) -> Layout | None:
    """What ``path`` is: an archive folder, a study folder, a ledger file, or None (neither).

    An archive holds ``ledger/events.jsonl``; a study folder holds ``ledger.db``; any other
    existing file is taken to be a ledger file (:class:`ledger.Ledger` says whether it is one).
    """
    p = Path(path)
    if (p / EVENTS_FILE).is_file():
        return "archive"
    if (p / LEDGER_FILE).is_file() or (p / STORE_FILE).is_file():
        return "study"
    if p.is_file():
        return "ledger"
    return None


def event_lines(handle: BinaryIO, file: Path, number: int = 1) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line with its newline) of an open ``events.jsonl``, from ``number``.

    Raises :class:`StudyError` naming the file and line for a line over :data:`MAX_LINE_BYTES`
    (read no further than the limit).
    """
    while raw := handle.readline(MAX_LINE_BYTES + 1):
        if len(raw) > MAX_LINE_BYTES:
            raise StudyError(
                f"{file}: line {number} is longer than {MAX_LINE_BYTES:,} bytes (an envelope is "
                "at most 1 MiB): not an event"
            )
        yield number, raw
        number += 1


def open_events(file: Path) -> BinaryIO:
    """``file`` opened for reading if it is a regular file; :class:`StudyError` otherwise."""
    try:
        return open_regular_file(file)
    except OSError as exc:
        raise StudyError(describe_os_error(exc, file)) from None


def parse_line(line: bytes, number: int, file: Path) -> dict[str, Any]:
    """The envelope object of an ``events.jsonl`` line; :class:`StudyError` naming the line."""
    try:
        envelope = json.loads(line)["envelope"]
    except RecursionError:
        raise StudyError(
            f"{file}: line {number} is not an event (arrays and objects nested too deep)"
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise StudyError(f"{file}: line {number} is not an event ({exc})") from None
    if not isinstance(envelope, dict):
        raise StudyError(f"{file}: line {number} is not an event (the envelope is not an object)")
    return envelope


def _event(line: bytes, number: int, file: Path) -> ArchivedEvent:
    envelope = parse_line(line, number, file)
    try:
        event = ArchivedEvent(
            envelope["seq"],
            envelope["time"],
            envelope["kind"],
            envelope["actor"],
            envelope["body"],
            envelope.get("blobs", {}),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StudyError(f"{file}: line {number} is not an event ({exc})") from None
    if (
        type(event.seq) is not int
        or not isinstance(event.kind, str)
        or not isinstance(event.body, dict)
        or not isinstance(event.blobs, dict)
    ):
        raise StudyError(
            f"{file}: line {number} is not an event (seq, kind, body or blobs of the wrong type)"
        )
    return event


class Recorded:
    """A study's or an archive's events and blobs, read-only; use :func:`open_recorded`."""

    def __init__(self, path: Path, kind: Layout) -> None:
        """Open ``path`` as ``kind`` (see :func:`layout`)."""
        self.path = path
        self.layout: Layout = kind
        self._log: Ledger | None = None
        self._is_public: bool | None = None
        self.source: Path | PostgresLocation | RemoteLocation = path
        if kind != "archive":
            self.source = ledger_path(path) if kind == "study" else path
            self._log = Ledger.open(self.source, readonly=True)

    def events(self, kind: str | None = None) -> Iterator[RecordedEvent]:
        """Every event in seq order (only those of ``kind`` when given)."""
        if self._log is not None:
            yield from self._log.events(kind)
            return
        file = self.path / EVENTS_FILE
        try:
            with open_events(file) as handle:
                for number, line in event_lines(handle, file):
                    event = _event(line, number, file)
                    if kind is None or event.kind == kind:
                        yield event
        except OSError as exc:
            raise StudyError(describe_os_error(exc, file)) from exc

    def blob(self, digest: str) -> bytes:
        """The bytes of the blob with this SHA-256 (hex); StudyError if missing or altered."""
        if self._log is not None:
            return self._log.blob(digest)
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise StudyError(f"{self.path}: blob name {digest!r} is not a SHA-256")
        file = self.path / BLOBS_DIR / digest
        try:
            data = read_regular_file(file, MAX_BLOB_BYTES)
        except OSError as exc:
            if isinstance(exc, FileNotFoundError) and self._public():
                raise StudyError(
                    f"blob {digest} is withheld: this is a public archive, and the locked "
                    "privacy policy withholds it (docs/privacy.md); only its commitment is "
                    "published"
                ) from None
            raise StudyError(describe_os_error(exc, file)) from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise StudyError(f"{file}: content does not match its name")
        return open_blob(data)  # a sealed blob's content (docs/ledger-format.md §6.1)

    def _public(self) -> bool:
        """Whether this archive is a public one (its ``export.created`` withholds data)."""
        if self._is_public is None:
            exports = list(self.events("export.created"))
            self._is_public = bool(exports) and "privacy" in exports[-1].body
        return self._is_public

    def close(self) -> None:
        """Close the ledger (nothing to do for an archive)."""
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Recorded:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_recorded(path: str | os.PathLike[str]) -> Recorded:
    """Open a study folder, its ledger file or an exported archive for reading.

    Raises :class:`StudyError` naming ``path`` when it is none of them, and
    :class:`ledger.LedgerError` when the ledger file cannot be opened.
    """
    p = Path(path)
    kind = layout(p)
    if kind is None:
        what = "does not exist" if not p.exists() else "holds neither ledger.db nor " + EVENTS_FILE
        raise StudyError(f"{p}: {what}; expected a study folder or an exported archive")
    return Recorded(p, kind)
