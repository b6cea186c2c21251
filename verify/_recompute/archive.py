"""The archive as the science checks read it: its events, blobs and locked files.

Part of the science checks (:mod:`verify._science`); imports nothing from ``ledger``,
``runner`` or ``analysis``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verify import _sealed
from verify._envelope import is_hex64
from verify._items import ItemError, ItemFile, read_items
from verify._ledgerfile import MAX_FAULTY_KEPT
from verify._reader.columns import EventColumns
from verify._reader.events import EventReader
from verify._reader.files import MAX_PARSED_BYTES, ArchiveFileError, ArchiveFiles
from verify._reader.names import EVENTS, line_where
from verify._rescore import (
    Truth,
    TruthError,
    read_sources,
    read_truth,
)
from verify._variants import VariantError, Variants

ORIENTATIONS = ("UP", "RIGHT", "DOWN", "LEFT")


TUMBLING_E = "tumbling-e-json"


class _Problem(Exception):
    """A check cannot proceed: ``(reason, seq, where)``."""

    def __init__(self, reason: str, seq: int | None = None, where: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.seq = seq
        self.where = where


class _Event:
    """One event as the science checks read it: its body and blobs rebuilt from the columns.

    Nothing is kept but the line: each ``body`` read rebuilds the dict (the columns keep the
    last ones read, so reading one event again is cheap), so a list of events holds no bodies.
    """

    __slots__ = ("_columns", "_index", "kind", "seq")

    def __init__(self, columns: EventColumns, index: int) -> None:
        self._columns = columns
        self._index = index
        self.seq = int(columns.seq(index) or 0)
        self.kind = str(columns.kind(index))

    @property
    def body(self) -> dict[str, Any]:
        """The event's body (a dict: the shared parse keeps only envelopes with one)."""
        body: dict[str, Any] = self._columns.body(self._index)
        return body

    @property
    def blobs(self) -> dict[str, str]:
        """The event's blobs: name -> address."""
        blobs: dict[str, str] = self._columns.blobs(self._index)
        return blobs

    @property
    def actor(self) -> str:
        """The event's actor."""
        return str(self._columns.actor(self._index))


class _BySeq:
    """The events by their envelope ``seq`` (each line's, unless a line says another)."""

    def __init__(self, columns: EventColumns) -> None:
        self._columns = columns
        self._odd: dict[int, int] | None = None
        if any(columns.seq(i) != i for i in range(len(columns))):
            self._odd = {int(columns.seq(i) or 0): i for i in range(len(columns))}

    def get(self, seq: Any, default: _Event | None = None) -> _Event | None:
        """The event whose envelope has ``seq``, or ``default``."""
        if self._odd is not None:
            index = self._odd.get(seq) if type(seq) is int else None
        else:
            index = seq if type(seq) is int and 0 <= seq < len(self._columns) else None
        return default if index is None else _Event(self._columns, index)


@dataclass
class _Archive:
    files: ArchiveFiles
    columns: EventColumns
    by_seq: _BySeq = field(init=False)
    current: _Event | None = None  # the event being read (named if a check stops on it)
    fork: bool = False  # a second CPU: reanalysis hashes its tables in a forked child

    def __post_init__(self) -> None:
        self.by_seq = _BySeq(self.columns)

    @property
    def events(self) -> list[_Event]:
        """Every event, in order (made afresh: none is kept)."""
        return [_Event(self.columns, i) for i in range(len(self.columns))]

    def of(self, kind: str) -> list[_Event]:
        return [_Event(self.columns, i) for i in self.columns.of_kind(kind)]

    def first(self, kind: str) -> _Event | None:
        seqs = self.columns.of_kind(kind)
        return _Event(self.columns, seqs[0]) if seqs else None

    def at(self, event: _Event) -> _Event:
        """Note ``event`` as the one being read; return it."""
        self.current = event
        return event

    def blob(self, digest: str, seq: int | None = None, limit: int = MAX_PARSED_BYTES) -> bytes:
        """The bytes of ``blobs/<digest>`` (64 lowercase hex only), read by the archive reader."""
        if not is_hex64(digest):
            raise _Problem(
                f"seq {seq}: blob address {digest[:80]!r} is not 64 lowercase hex",
                seq,
                line_where(seq) if seq is not None else None,
            )
        return _sealed.content_of(self.stored(digest, seq, limit))

    def stored(self, digest: str, seq: int | None = None, limit: int = MAX_PARSED_BYTES) -> bytes:
        """The stored bytes of ``blobs/<digest>`` (a sealed blob whole, salt included)."""
        rel = f"blobs/{digest}"
        try:
            return self.files.read(rel, limit)
        except ArchiveFileError as exc:
            raise _Problem(
                f"seq {seq}: blob {exc}" if seq is not None else str(exc), seq, rel
            ) from None

    def event_blob(self, event: _Event, name: str, limit: int = MAX_PARSED_BYTES) -> bytes:
        digest = event.blobs.get(name)
        if not isinstance(digest, str):
            raise _Problem(f"seq {event.seq} ({event.kind}) has no {name} blob", event.seq)
        return self.blob(digest, event.seq, limit)

    def file(self, rel: str) -> bytes:
        try:
            return self.files.read(rel)
        except ArchiveFileError as exc:
            raise _Problem(str(exc), None, rel) from None


def _events(envelopes: Sequence[dict[str, Any] | None], unkept: int | None = None) -> EventColumns:
    """The events of the shared strict parse; the first line it refused stops both checks.

    ``unkept`` is the first line the ledger checks found faulty beyond the ones whose
    envelopes are kept (``verify._ledgerfile.MAX_FAULTY_KEPT``); it stops them too.
    ``envelopes`` packed as columns (:class:`EventColumns`) are read as they are, not copied.
    """
    if isinstance(envelopes, EventColumns):
        columns = envelopes
    else:
        columns = EventColumns()
        for env in envelopes:
            columns.append(env)
    for index in range(len(columns)):
        if not columns.kept(index):
            where = line_where(index)
            if index == unkept:
                raise _Problem(
                    f"{where} is one of more than {MAX_FAULTY_KEPT:,} lines that are not the "
                    "next event of the log (the envelopes, sequence, chain and signatures "
                    "checks name the first): nothing is re-scored or re-analysed",
                    index,
                    where,
                )
            raise _Problem(
                f"{where} is not a valid event envelope (the envelopes check says why): "
                "nothing is re-scored or re-analysed",
                index,
                where,
            )
    return columns


def _load(
    root: Path,
    envelopes: Sequence[dict[str, Any] | None] | None = None,
    files: ArchiveFiles | None = None,
    unkept: int | None = None,
) -> _Archive:
    if files is None:
        files = ArchiveFiles(root)
        files.walk()
    if envelopes is None:
        if files.problems and not files.complete:
            raise _Problem(files.problems[0][1], where=files.problems[0][0])
        try:
            envelopes = EventColumns()
            for line in EventReader(files):
                envelopes.append(line.shared)
        except ArchiveFileError as exc:
            raise _Problem(f"{exc}: nothing is re-scored or re-analysed", where=EVENTS) from None
    return _Archive(files, _events(envelopes, unkept))


def _protocol(archive: _Archive) -> _Event | None:
    """The ``protocol.locked`` in force: the last one.

    A study locked in phases has several, each holding the whole plan (``docs/study-spec.md``,
    "Phases").
    """
    locked = archive.of("protocol.locked")
    return locked[-1] if locked else None


def _plan(archive: _Archive) -> dict[str, Any]:
    event = _protocol(archive)
    if event is None:
        raise _Problem("the ledger has no protocol.locked event")
    return event.body


def _files_in_force(archive: _Archive) -> dict[str, tuple[str, str | None, _Event]]:
    """Locked path -> (blob address, role, event) of each locked file in force.

    The last ``artifact.locked`` of each path (a later phase re-locks a grown file), or the
    last ``protocol.amended`` change after it.
    """
    out: dict[str, tuple[str, str | None, _Event]] = {}
    seqs = archive.columns.of_kind("artifact.locked") + archive.columns.of_kind("protocol.amended")
    for event in (_Event(archive.columns, i) for i in sorted(seqs)):
        if event.kind == "artifact.locked":
            path, role = event.body.get("path"), event.body.get("role")
            if isinstance(path, str):
                out[path] = (
                    str(event.blobs.get("content")),
                    role if isinstance(role, str) else None,
                    event,
                )
        elif event.kind == "protocol.amended":
            changes = event.body.get("changes")
            for change in changes if isinstance(changes, list) else []:
                path = change.get("path") if isinstance(change, dict) else None
                if path in out and isinstance(change.get("blob"), str):
                    out[path] = (str(event.blobs.get(change["blob"])), out[path][1], event)
    return out


def _truth_tables(archive: _Archive) -> list[tuple[str, bytes, int]]:
    """The truth tables in force: (path, bytes, seq) from the signed ``artifact.locked`` events.

    Each is read from its blob (its address from the signed event, as locked or as last
    amended by ``protocol.amended``), never from a path written in an unsigned file.
    """
    digests = {
        path: (digest, event)
        for path, (digest, role, event) in _files_in_force(archive).items()
        if role == "truth"
    }
    if not digests:
        raise _Problem("no artifact.locked event locks a truth table (role truth)")
    tables = []
    for path, (digest, event) in sorted(digests.items()):
        archive.at(event)
        tables.append((f"{path} (blob {digest})", archive.blob(digest, event.seq), event.seq))
    return tables


def _item_file(archive: _Archive) -> ItemFile:
    """The locked item file in force (``docs/prompts.md`` §1), read from its signed blob.

    Its path is ``protocol.locked`` ``items.path``; its bytes are the blob of the
    last ``artifact.locked`` event of that path, or of the last ``protocol.amended`` change to it.
    """
    record = _plan(archive).get("items")
    path = record.get("path") if isinstance(record, dict) else None
    if not isinstance(path, str):
        raise _Problem("protocol.locked response.truth is 'items' but items has no path")
    entry = _files_in_force(archive).get(path)
    found = (entry[0], entry[2]) if entry is not None else None
    if found is None:
        raise _Problem(f"no artifact.locked event locks the item file {path}")
    digest, event = found
    archive.at(event)
    try:
        return read_items(archive.blob(digest, event.seq), path).ranged(record)
    except ItemError as exc:
        raise _Problem(f"item file {path} (blob {digest}): {exc}", event.seq) from None


def _locked_bytes(archive: _Archive, path: str) -> bytes | None:
    """The locked bytes of a study-relative path in force (as locked, or as last amended)."""
    found: tuple[str, _Event] | None = None
    for event in archive.of("artifact.locked"):
        if event.body.get("path") == path and found is None:
            found = (str(event.blobs.get("content")), event)
    for event in archive.of("protocol.amended"):
        changes = event.body.get("changes")
        for change in changes if isinstance(changes, list) else []:
            if isinstance(change, dict) and change.get("path") == path and found is not None:
                found = (str(event.blobs.get(str(change.get("blob")))), event)
    if found is None:
        return None
    digest, event = found
    archive.at(event)
    return archive.blob(digest, event.seq)


def _variant_truth(archive: _Archive) -> Callable[[str, str], tuple[str, str | None]]:
    """``(item, variant) -> (answer, order)`` re-derived by ``docs/variants.md`` (§2, §5)."""
    plan = _plan(archive)
    items = {item.id: item.data for item in _item_file(archive).items}
    counts = [len(data.get("options") or []) for data in items.values()]
    try:
        variants = Variants(plan, lambda path: _locked_bytes(archive, path), counts)
    except VariantError as exc:
        raise _Problem(str(exc)) from None
    cache: dict[tuple[str, str], tuple[str, str | None]] = {}

    def truth(item: str, variant: str) -> tuple[str, str | None]:
        if (item, variant) not in cache:
            if item not in items:
                raise VariantError(f"item {item!r} is not in the locked item file")
            varied = variants.apply(variant, items[item])
            cache[(item, variant)] = (
                str(varied["answer"]),
                variants.order_for(variant, items[item]),
            )
        return cache[(item, variant)]

    return truth


def _truth(archive: _Archive, response: dict[str, Any]) -> dict[str, Truth]:
    """The truth of every stimulus, read as the locked parser scores it (scoring.md §8).

    With ``response.truth = "items"`` (``docs/prompts.md`` §1): each item's answer as written.
    """
    if response.get("truth") == "items":
        return {item.id: item.answer for item in _item_file(archive).items}
    parser = str(response.get("parser", TUMBLING_E))
    column = response.get("answer_column")
    truth: dict[str, Truth] = {}
    for name, data, seq in _truth_tables(archive):
        try:
            truth.update(read_truth(data, parser, column))
        except TruthError as exc:
            raise _Problem(f"truth table {name}: {exc}", seq) from None
    return truth


def _sources(archive: _Archive) -> dict[str, str]:
    """Each stimulus's source image, from the truth table's ``source`` column.

    For an item file, each item's string ``metadata.source``.
    """
    if (_plan(archive).get("response") or {}).get("truth") == "items":
        return {
            item.id: str(item.metadata["source"])
            for item in _item_file(archive).items
            if isinstance(item.metadata.get("source"), str)
        }
    sources: dict[str, str] = {}
    for name, data, seq in _truth_tables(archive):
        try:
            sources.update(read_sources(data))
        except TruthError as exc:
            raise _Problem(f"truth table {name}: {exc}", seq) from None
    return sources


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _address(archive: _Archive, event: _Event, name: str, content: bytes, plain: str) -> str:
    """The address re-derived ``content`` has as ``event``'s blob ``name`` (``plain``: unsealed).

    A sealed blob (``docs/ledger-format.md`` §6.1) is addressed with the salt stored with it; a
    blob that cannot be read keeps the plain hash (the comparison then fails, naming it).
    """
    ref = event.blobs.get(name)
    if not isinstance(ref, str) or not is_hex64(ref):
        return plain
    try:
        stored = archive.stored(ref, event.seq)
    except _Problem:
        return plain
    return _sealed.address_for(content, stored)


def _file_sha(archive: _Archive, rel: str) -> str | None:
    """SHA-256 of the archive file ``rel`` (the walk's, else read in blocks), or ``None``."""
    files = archive.files
    if rel in files.hashes:
        return files.hashes[rel]
    try:
        with files.open(rel) as fh:
            h = hashlib.sha256()
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except (ArchiveFileError, OSError):
        return None
    return h.hexdigest()
