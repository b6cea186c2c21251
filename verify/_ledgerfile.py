"""Reads a PROMPT Ledger SQLite file read-only and runs every check of ``docs/ledger-format.md`` §8.

One read transaction, one cursor over ``events`` in seq order, and a second cursor over ``tree``
walked in lockstep with the incremental Merkle tree.  Ed25519 checks run inline (``jobs == 1``) or
in worker processes that each open the file read-only and verify a range of seqs; the main process
does every other check, so the report does not depend on ``jobs``.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from verify._canonical import CanonicalError, Canonicalizer
from verify._envelope import MAX_ENVELOPE_BYTES, ZERO_PREV, envelope_problem
from verify._errors import CheckpointFormatError, KeyFormatError, NoteError
from verify._keys import Registry, role_may_append
from verify._merkle import (
    EMPTY_ROOT,
    LeafHashes,
    consistency_proof,
    verify_consistency,
)
from verify._note import Checkpoint, Vkey, open_note, parse_checkpoint, parse_note, parse_vkey
from verify._pool import resolve_jobs, worker_pool
from verify._report import Check, Report, Status
from verify._safeio import UnsafeFileError, describe_mode, read_regular

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "verify_ledger_file"]

APPLICATION_ID = 1347176241  # 0x504C4731, "PLG1"
SCHEMA_VERSION = 1

_REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "meta": ("key", "value"),
    "events": ("seq", "kind", "actor", "time", "envelope", "signature", "leaf_hash"),
    "blobs": ("sha256", "size", "data"),
    "checkpoints": ("id", "size", "root", "note", "created"),
    "keys": ("actor", "name", "vkey", "role", "added_seq", "revoked_seq"),
    "tree": ("level", "idx", "hash"),
}
_KEY_KINDS = frozenset({"ledger.genesis", "key.added", "key.revoked"})
_MAX_CHECKPOINT_FILE = 1 << 20
_LAST = 1 << 62

# Logs smaller than this are verified in-process even when jobs > 1 (tests set it to 0).
_MIN_PARALLEL_EVENTS = 2048
# Events per chunk handed to a worker: about 8 chunks per worker, within these bounds (tests
# set _MIN_CHUNK to a few events to force many chunks on a small log).
_MIN_CHUNK = 256
_MAX_CHUNK = 8192
SKIMMED: Any = object()
"""The ``kind`` of an archive line read but not parsed: more than :data:`MAX_FAULTY_KEPT`
earlier lines were faulty, so it is only hashed into the tree (``docs/archive-format.md`` §6)."""
RECOMPUTED: Any = object()
"""The ``leaf_hash`` of a source that stores none (an archive): nothing to compare."""
MAX_FAULTY_KEPT = 1000
"""Lines that are not the next event of the log (an envelope problem, a seq that is not the
next, a broken chain, a signature that fails) whose envelopes are kept for the other checks;
beyond them a faulty line is still checked and counted by every ledger check, but neither its
envelope nor its blob references are kept, so memory never grows with junk
(``docs/archive-format.md`` §6)."""

_sha256 = hashlib.sha256


# --------------------------------------------------------------------------------------------------
# per-check bookkeeping


class _State:
    """Accumulates one check's failures and warnings, keeping the first by seq."""

    __slots__ = ("_n", "fails", "first", "first_warn", "name", "warns")

    def __init__(self, name: str) -> None:
        self.name = name
        self.fails = 0
        self.warns = 0
        self._n = 0
        self.first: tuple[tuple[int, int, int], str, int | None, str | None] | None = None
        self.first_warn: tuple[tuple[int, int, int], str, int | None, str | None] | None = None

    def _key(self, seq: int | None, rank: int = 0) -> tuple[int, int, int]:
        self._n += 1
        return (rank, seq if seq is not None else _LAST, self._n)

    def fail(
        self,
        reason: str,
        seq: int | None = None,
        where: str | None = None,
        *,
        rank: int = 0,
        count: int = 1,
    ) -> None:
        """Record a failure; the first is the lowest (rank, seq), then the earliest recorded.

        ``rank`` 1 marks consequences (derived tables) that should not hide a root cause;
        ``count`` is how many failures ``reason`` stands for (lines not parsed, one each).
        """
        self.fails += count
        key = self._key(seq, rank)
        if self.first is None or key < self.first[0]:
            self.first = (key, reason, seq, where)

    def warn(self, reason: str, seq: int | None = None, where: str | None = None) -> None:
        self.warns += 1
        key = self._key(seq)
        if self.first_warn is None or key < self.first_warn[0]:
            self.first_warn = (key, reason, seq, where)

    def check(self, pass_reason: str) -> Check:
        if self.first is not None:
            _, reason, seq, where = self.first
            if self.fails > 1:
                reason += f" (and {self.fails - 1} more)"
            return Check(self.name, Status.FAIL, reason, seq, where)
        if self.first_warn is not None:
            _, reason, seq, where = self.first_warn
            if self.warns > 1:
                reason += f" (and {self.warns - 1} more)"
            return Check(self.name, Status.WARN, reason, seq, where)
        return Check(self.name, Status.PASS, pass_reason)


# --------------------------------------------------------------------------------------------------
# signatures (shared by the inline path and the worker processes)


def _as_bytes(value: object) -> bytes:
    """Column value as bytes: BLOBs as they are, TEXT as UTF-8, anything else as its text."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return b"" if value is None else str(value).encode("ascii")


def _signature_problem(
    key: Ed25519PublicKey, signature: object, envelope: bytes, seq: int, actor: str
) -> str | None:
    if not isinstance(signature, bytes) or len(signature) != 64:
        return f"seq {seq}: signature is not a 64-byte BLOB"
    try:
        key.verify(signature, envelope)
    except InvalidSignature:
        return f"seq {seq}: signature does not verify under key {actor}"
    return None


_worker_keys: dict[bytes, Ed25519PublicKey] = {}


def _verify_range(
    uri: str, lo: int, hi: int, keys: dict[str, bytes], overrides: dict[int, str | None]
) -> list[tuple[int, str]]:
    """Worker: verify the signatures of events ``lo..hi``; return ``(seq, reason)`` failures.

    ``keys`` maps actor ids to raw public keys; ``overrides`` maps seqs to the actor to use instead
    of the row's ``actor`` column, or to ``None`` to skip the event (the main process already
    reported a structural problem there).
    """
    failures: list[tuple[int, str]] = []
    con = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    try:
        rows = con.execute(
            "SELECT seq, actor, envelope, signature FROM events "
            "WHERE seq >= ? AND seq <= ? ORDER BY seq",
            (lo, hi),
        )
        for seq, actor, envelope, signature in rows:
            if seq in overrides:
                actor = overrides[seq]
                if actor is None:
                    continue
            raw = keys.get(actor)
            if raw is None:
                failures.append((seq, f"seq {seq}: actor {actor!r:.80} is not a registered key"))
                continue
            key = _worker_keys.get(raw)
            if key is None:
                key = _worker_keys[raw] = Ed25519PublicKey.from_public_bytes(raw)
            problem = _signature_problem(key, signature, _as_bytes(envelope), seq, actor)
            if problem is not None:
                failures.append((seq, problem))
    finally:
        con.close()
    return failures


def _verify_items(
    items: list[tuple[int, Any, bytes, Any]],
    keys: dict[str, bytes],
    overrides: dict[int, str | None],
) -> list[tuple[int, str]]:
    """Worker: like :func:`_verify_range` for ``(seq, actor, envelope, signature)`` given inline."""
    failures: list[tuple[int, str]] = []
    for seq, actor, envelope, signature in items:
        if seq in overrides:
            actor = overrides[seq]
            if actor is None:
                continue
        raw = keys.get(actor)
        if raw is None:
            failures.append((seq, f"seq {seq}: actor {actor!r:.80} is not a registered key"))
            continue
        key = _worker_keys.get(raw)
        if key is None:
            key = _worker_keys[raw] = Ed25519PublicKey.from_public_bytes(raw)
        problem = _signature_problem(key, signature, envelope, seq, actor)
        if problem is not None:
            failures.append((seq, problem))
    return failures


def _stack_root(stack: list[bytes]) -> bytes:
    """The Merkle root of a compact range (complete-subtree hashes, largest first)."""
    if not stack:
        return EMPTY_ROOT
    root = stack[-1]
    for h in reversed(stack[:-1]):
        root = _sha256(b"\x01" + h + root).digest()
    return root


# --------------------------------------------------------------------------------------------------
# the verifier run


# SQLite's answers when a read-only connection cannot create or open the WAL index (-shm).
_NO_SHM = frozenset(
    {
        "SQLITE_CANTOPEN",
        "SQLITE_READONLY",
        "SQLITE_READONLY_DIRECTORY",
        "SQLITE_READONLY_CANTINIT",
        "SQLITE_READONLY_CANTLOCK",
    }
)


BLOB_PIECE = 1 << 20
"""A stored blob longer than this is hashed in pieces of this many bytes (SQLite's incremental
blob I/O), never read whole: an ``items.csv`` of 10^5 trials is about 290 MB, and reading it as
one value held it twice (SQLite's copy and Python's), most of a verification's memory."""


class _HashedBlob:
    """A large stored blob, read in pieces of :data:`BLOB_PIECE`: its SHA-256 and length."""

    __slots__ = ("hexdigest", "length")

    def __init__(self, con: sqlite3.Connection, rowid: int) -> None:
        hashed, length = _sha256(), 0
        with con.blobopen("blobs", "data", rowid, readonly=True) as blob:
            while piece := blob.read(BLOB_PIECE):
                hashed.update(piece)
                length += len(piece)
        self.hexdigest, self.length = hashed.hexdigest(), length


def _blob_row_problem(address: Any, size: Any, data: Any) -> str | None:
    """What is wrong with a stored blob row (to follow its name), or None.

    ``data`` is the stored value, or a :class:`_HashedBlob` of a large one.
    """
    if isinstance(data, _HashedBlob):
        digest, length = data.hexdigest, data.length
    elif not isinstance(data, bytes):
        return ": data is not a BLOB"
    else:
        digest, length = _sha256(data).hexdigest(), len(data)
    if digest != address:
        return " does not hash to its address"
    if size != length or type(size) is not int:
        return f": size column is {size!r:.40}, the data has {length} bytes"
    return None


def _wal_has_frames(path: str) -> bool:
    """True when ``path``-wal is long enough to hold a frame (32 + 24 + 512 bytes at least)."""
    try:
        return os.path.getsize(path + "-wal") >= 32 + 24 + 512
    except FileNotFoundError:
        return False


def _ro_uri(path: str, *, immutable: bool = False) -> str:
    quoted = urllib.parse.quote(os.path.abspath(path))
    return f"file:{quoted}?mode=ro" + ("&immutable=1" if immutable else "")


class _NotALedger(Exception):
    """Internal: the file check failed in a way that stops every other check."""


class _StoredCheckpoint:
    __slots__ = ("cp", "created", "id", "label", "note", "problem", "root_col", "size_col", "where")

    def __init__(self, row: tuple[Any, ...]) -> None:
        self.id, self.size_col, self.root_col, self.note, self.created = row
        self.cp: Checkpoint | None = None
        self.problem: str | None = None
        size = self.size_col
        try:
            note = self.note.decode("utf-8") if isinstance(self.note, bytes) else self.note
            if not isinstance(note, str):
                raise CheckpointFormatError("note is not text")
            text, _ = parse_note(note)
            self.cp = parse_checkpoint(text)
            size = self.cp.size
        except (NoteError, CheckpointFormatError, UnicodeDecodeError) as exc:
            self.problem = str(exc)
        self.label = f"checkpoint {self.id} (size {size})"
        self.where = f"checkpoint {self.id}"


class _PublishedCheckpoint:
    __slots__ = ("cp", "data", "label", "path", "problem")

    def __init__(self, path: str) -> None:
        self.path = path
        self.label = f"published checkpoint {path}"
        self.cp: Checkpoint | None = None
        self.data: bytes | None = None
        self.problem: str | None = None
        try:  # a regular file only (a pipe or device is never opened), size checked first
            data = read_regular(path, _MAX_CHECKPOINT_FILE, follow_links=True)
        except UnsafeFileError as exc:
            self.problem = str(exc)
            return
        self.data = data
        try:
            text, _ = parse_note(data)
            self.cp = parse_checkpoint(text)
        except (NoteError, CheckpointFormatError) as exc:
            self.problem = str(exc)


class _Run:
    def __init__(
        self,
        path: str,
        trusted_keys: Sequence[str],
        checkpoints: Sequence[str | os.PathLike[str]],
        jobs: int,
    ) -> None:
        self.path = path
        self.trusted_texts = [str(k) for k in trusted_keys]
        self.published = [_PublishedCheckpoint(os.fspath(p)) for p in checkpoints]
        self.jobs = resolve_jobs(jobs)
        self.states = {
            name: _State(name)
            for name in (
                "file",
                "envelopes",
                "sequence",
                "chain",
                "leaf-hashes",
                "keys",
                "signatures",
                "blobs",
                "tree",
                "checkpoints",
                "published-checkpoints",
                "trust",
                "time-order",
            )
        }
        self.registry = Registry()
        self.uri = _ro_uri(path)
        self.meta: dict[str, Any] = {}
        self.size = 0
        self.roots: dict[int, bytes] = {}
        self.leaves: LeafHashes | None = LeafHashes() if self.published else None
        self.blob_refs: dict[str, tuple[int, str]] = {}
        self.crypto_failures: list[tuple[int, str]] = []
        self.structural_sig_fails: set[int] = set()
        self.tree_nodes = 0
        self.sig_time = 0.0  # seconds spent in inline Ed25519 verification
        self.has_tree = True  # the source stores interior tree nodes to compare
        self.sig_buffer: list[tuple[int, Any, bytes, Any]] = []  # for sources without a file URI
        self.faulty = 0  # lines that are not the next event of the log (MAX_FAULTY_KEPT)
        self.unkept: int | None = None  # the first faulty line beyond MAX_FAULTY_KEPT
        self.unkept_row = -1  # the last such line (read by a source that keeps envelopes)

    # ---------------------------------------------------------------------------------- file

    def _open(self) -> sqlite3.Connection:
        st = self.states["file"]
        path = self.path
        if not os.path.exists(path):
            st.fail(f"no such file: {path}", where=path)
            raise _NotALedger
        if os.path.isdir(path):
            st.fail(f"{path} is a directory, not a ledger file", where=path)
            raise _NotALedger
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):  # a pipe or device is never handed to SQLite to open
            st.fail(f"{path} is {describe_mode(mode)}, not a ledger file", where=path)
            raise _NotALedger
        try:
            con = self._connect(self.uri)
        except sqlite3.OperationalError as exc:
            # WAL mode needs the -shm file beside the database even to read. In a folder this
            # process cannot write, with no -shm there, the file is read as immutable, which is
            # sound only if no -wal file holds changes not yet in the main file.
            if exc.sqlite_errorname not in _NO_SHM or _wal_has_frames(path):
                st.fail(f"{path} cannot be opened read-only: {exc}", where=path)
                raise _NotALedger from None
            self.uri = _ro_uri(path, immutable=True)
            try:
                con = self._connect(self.uri)
            except sqlite3.DatabaseError as exc2:
                st.fail(f"{path} cannot be opened read-only: {exc2}", where=path)
                raise _NotALedger from None
        except sqlite3.DatabaseError as exc:
            st.fail(f"{path} is not a SQLite database ({exc})", where=path)
            raise _NotALedger from None
        return con

    @staticmethod
    def _connect(uri: str) -> sqlite3.Connection:
        con = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        try:
            con.execute("BEGIN")
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except BaseException:
            con.close()
            raise
        return con

    def _check_file(self, con: sqlite3.Connection) -> None:
        st = self.states["file"]
        path = self.path
        app_id = con.execute("PRAGMA application_id").fetchone()[0]
        if app_id != APPLICATION_ID:
            st.fail(
                f"{path} is not a PROMPT ledger: application_id is {app_id} (0x{app_id:08X}), "
                f"expected {APPLICATION_ID} (0x504C4731, 'PLG1')",
                where=path,
            )
            raise _NotALedger
        version = con.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            st.fail(
                f"{path} has schema version {version}, newer than this verifier knows "
                f"({SCHEMA_VERSION}); use a newer verifier",
                where=path,
            )
            raise _NotALedger
        if version != SCHEMA_VERSION:
            st.fail(
                f"{path} has schema version {version}, not a known schema version "
                f"(this verifier knows {SCHEMA_VERSION})",
                where=path,
            )
            raise _NotALedger
        tables = {
            name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        for table, columns in _REQUIRED_COLUMNS.items():
            if table not in tables:
                st.fail(f"{path} has no table {table}", where=table)
                raise _NotALedger
            have = {row[1] for row in con.execute(f"PRAGMA table_info({table})")}
            for column in columns:
                if column not in have:
                    st.fail(f"table {table} lacks column {column}", where=table)
                    raise _NotALedger
        self.meta = {key: value for key, value in con.execute("SELECT key, value FROM meta")}
        if self.meta.get("format") != "prompt-ledger":
            st.fail(
                f"meta format is {self.meta.get('format')!r:.80}, expected 'prompt-ledger'",
                where="meta.format",
            )
        if self.meta.get("schema_version") != str(SCHEMA_VERSION):
            st.fail(
                f"meta schema_version is {self.meta.get('schema_version')!r:.80}, "
                f"expected '{SCHEMA_VERSION}' (user_version is {version})",
                where="meta.schema_version",
            )
        if "origin" not in self.meta:
            st.fail("meta has no origin row", where="meta.origin")
        mode = con.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":
            st.warn(f"journal mode is {mode}, not WAL", where=path)

    # ---------------------------------------------------------------------------------- run

    def run(self) -> Report:
        report = Report(path=self.path)
        try:
            con = self._open()
            try:
                self._check_file(con)
                self._verify(con, report)
            finally:
                con.close()
        except _NotALedger:
            report.checks = [self.states["file"].check("")]
            return report
        except sqlite3.Error as exc:
            self.states["file"].fail(f"{self.path}: SQLite error while reading: {exc}")
            report.checks = [self.states["file"].check("")]
            return report
        return report

    def _verify(self, con: Any, report: Report) -> None:
        """Every check after the file check, on the rows that ``con`` (the source) yields."""
        stored = [_StoredCheckpoint(row) for row in self._checkpoint_rows(con)]
        sizes: set[int] = set()
        for s in stored:
            if s.cp is not None:
                sizes.add(s.cp.size)
            if type(s.size_col) is int:
                sizes.add(s.size_col)
        for p in self.published:
            if p.cp is not None:
                sizes.add(p.cp.size)
        total = self._event_count(con)
        pool: ProcessPoolExecutor | None = None
        if self.jobs > 1 and total >= _MIN_PARALLEL_EVENTS:
            pool = worker_pool(self.jobs)
        try:
            futures = self._stream(con, sizes, pool, total)
            for future in futures:
                self.crypto_failures.extend(future.result())
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        final_root = self.roots.get(self.size, EMPTY_ROOT)
        report.size = self.size
        report.root = final_root.hex()
        report.origin = self.registry.origin
        self._finish_signatures()
        self._check_keys_table(con)
        self._check_blobs(con)
        trusted = self._trusted_keys()
        self._check_stored_checkpoints(stored, trusted)
        self._check_published(trusted, final_root)
        self._check_origin_meta()
        report.checks = self._checks(stored, trusted)

    # ---------------------------------------------------------------------------------- sources
    # The rows every check reads, one method per table: a SQLite file's queries here, a
    # PostgreSQL schema's in verify._pgledger (the same rows, the same checks).

    def _checkpoint_rows(self, con: Any) -> Iterable[tuple[Any, ...]]:
        """``(id, size, root, note, created)`` of every stored checkpoint, by id."""
        rows: Iterable[tuple[Any, ...]] = con.execute(
            "SELECT id, size, root, note, created FROM checkpoints ORDER BY id"
        )
        return rows

    def _event_count(self, con: Any) -> int:
        """The number of event rows (to decide whether signatures go to worker processes)."""
        return int(con.execute("SELECT count(*) FROM events").fetchone()[0])

    def _key_rows(self, con: Any) -> Iterable[tuple[Any, ...]]:
        """``(actor, name, vkey, role, added_seq, revoked_seq)`` of every keys row."""
        rows: Iterable[tuple[Any, ...]] = con.execute(
            "SELECT actor, name, vkey, role, added_seq, revoked_seq FROM keys"
        )
        return rows

    def _file_pass(self) -> str:
        """The reason the ``file`` check gives when it passes."""
        return f"SQLite ledger, application id 0x504C4731, schema version {SCHEMA_VERSION}"

    # ---------------------------------------------------------------------------------- stream

    def _parsed(self, envelope: bytes) -> tuple[Any, bytes] | None:
        """``(value, canonical bytes)`` of ``envelope`` when the source has already parsed it.

        A SQLite row's envelope is parsed here, by the stream; an archive line was parsed once
        by its reader (:class:`~verify._archive.ledger_checks.ArchiveRun` overrides this).
        """
        return None

    def _event_rows(self, con: Any) -> Iterator[tuple[Any, ...]]:
        """``(seq, kind, actor, time, envelope, signature, leaf_hash)`` rows in seq order."""
        assert con is not None
        return iter(
            con.execute(
                "SELECT seq, kind, actor, time, envelope, signature, leaf_hash "
                "FROM events ORDER BY seq"
            )
        )

    def _submit(
        self,
        pool: ProcessPoolExecutor,
        lo: int,
        hi: int,
        keys: dict[str, bytes],
        overrides: dict[int, str | None],
    ) -> Future[list[tuple[int, str]]]:
        """Hand the signatures of seqs ``lo..hi`` to a worker process."""
        return pool.submit(_verify_range, self.uri, lo, hi, keys, overrides)

    def _submit_buffered(
        self,
        pool: ProcessPoolExecutor,
        lo: int,
        hi: int,
        keys: dict[str, bytes],
        overrides: dict[int, str | None],
    ) -> Future[list[tuple[int, str]]]:
        """Hand the buffered rows ``lo..hi`` to a worker with the task (no file to reopen).

        :meth:`_submit` of the sources read from elsewhere: an archive, a PostgreSQL snapshot.
        """
        items = [item for item in self.sig_buffer if lo <= item[0] <= hi]
        # in place: the stream appends to this very list
        self.sig_buffer[:] = [item for item in self.sig_buffer if item[0] > hi]
        return pool.submit(_verify_items, items, keys, overrides)

    def _tree_rows(self, con: Any) -> Iterator[tuple[Any, Any, Any]]:
        if con is None:
            return

        cur = con.cursor()
        cur.arraysize = 512
        cur.execute(
            "SELECT level, idx, hash FROM tree "
            "ORDER BY CASE WHEN typeof(level) = 'integer' AND typeof(idx) = 'integer' "
            "AND level BETWEEN 1 AND 61 AND idx BETWEEN 0 AND (1 << (61 - level)) "
            "THEN (idx + 1) << level ELSE -1 END, level, idx"
        )
        while True:
            rows = cur.fetchmany()
            if not rows:
                return
            yield from rows

    def _stream(
        self,
        con: Any,
        snapshot_sizes: set[int],
        pool: ProcessPoolExecutor | None,
        total: int,
    ) -> list[Future[list[tuple[int, str]]]]:
        """Check every event row in one pass (see :class:`_Stream`); return the workers' futures."""
        stream = _Stream(self, con, snapshot_sizes, pool, total)
        row = stream.row
        for seq, kind, actor, time_, envelope, signature, leaf_hash in self._event_rows(con):
            row(seq, kind, actor, time_, envelope, signature, leaf_hash)
        return stream.finish()

    # ---------------------------------------------------------------------------------- tree

    def _tree_extra(self, row: tuple[Any, Any, Any]) -> None:
        level, idx, _ = row
        self.states["tree"].fail(
            f"tree has node (level {level!r:.20}, index {idx!r:.20}), which is not a complete "
            "subtree of the log",
            where=f"tree level {level!r:.20} index {idx!r:.20}",
        )

    def _tree_mismatch(
        self, level: int, idx: int, size: int, want: bytes, row: tuple[Any, Any, Any]
    ) -> None:
        if type(row[2]) is bytes and row[2] == want:
            return
        first = idx << level
        self.states["tree"].fail(
            f"tree node (level {level}, index {idx}) over seqs {first}..{size - 1} "
            "differs from the recomputed hash",
            where=f"tree level {level} index {idx}",
        )

    def _compare_tree(
        self,
        done: list[tuple[int, int, bytes]],
        pending: tuple[Any, Any, Any] | None,
        rows: Iterator[tuple[Any, Any, Any]],
        size: int,
    ) -> tuple[Any, Any, Any] | None:
        """Compare the nodes the last append completed with the stored rows, in the same order."""
        st = self.states["tree"]
        for level, idx, h in done:
            want = (size, level)
            have: tuple[int, int] | None = None
            while pending is not None:
                plevel, pidx, _ = pending
                if (
                    type(plevel) is int
                    and type(pidx) is int
                    and 1 <= plevel <= 61
                    and 0 <= pidx <= 1 << (61 - plevel)
                ):
                    have = ((pidx + 1) << plevel, plevel)
                    if have >= want:
                        break
                self._tree_extra(pending)
                pending = next(rows, None)
                have = None
            first, where = idx << level, f"tree level {level} index {idx}"
            if pending is not None and have == want:
                self._tree_mismatch(level, idx, size, h, pending)
                pending = next(rows, None)
            else:
                st.fail(
                    f"tree lacks node (level {level}, index {idx}) over seqs {first}..{size - 1}",
                    where=where,
                )
        return pending

    # ---------------------------------------------------------------------------------- after

    def _finish_signatures(self) -> None:
        st = self.states["signatures"]
        for seq, reason in self.crypto_failures:
            if seq not in self.structural_sig_fails:
                st.fail(reason, seq)

    def _check_keys_table(self, con: Any) -> None:
        st = self.states["keys"]
        rows = {row[0]: row for row in self._key_rows(con)}
        columns = ("actor", "name", "vkey", "role", "added_seq", "revoked_seq")
        for actor, rec in self.registry.keys.items():
            row = rows.pop(actor, None)
            if row is None:
                st.fail(
                    f"keys table has no row for {actor} (registered at seq {rec.added_seq})",
                    rec.added_seq,
                    where=f"keys row {actor}",
                    rank=1,
                )
                continue
            want = (actor, rec.vkey.name, rec.vkey.text, rec.role, rec.added_seq, rec.revoked_seq)
            for column, got, expect in zip(columns, row, want, strict=True):
                if got != expect or type(got) is not type(expect):
                    seq = rec.revoked_seq if column == "revoked_seq" and expect else rec.added_seq
                    st.fail(
                        f"keys table row for {actor}: {column} is {got!r:.80}, "
                        f"the log says {expect!r}",
                        seq,
                        where=f"keys row {actor}",
                        rank=1,
                    )
                    break
        for actor in rows:
            st.fail(
                f"keys table has a row for {actor!r:.80} that no key event registers",
                where=f"keys row {actor!r:.80}",
                rank=1,
            )

    def _check_blobs(self, con: Any) -> None:
        self._check_blob_rows(self._stored_blob_rows(con), "is missing from the blobs table")

    @staticmethod
    def _stored_blob_rows(con: sqlite3.Connection) -> Iterator[tuple[Any, Any, Any]]:
        """Each stored ``(address, size, data)``, by address.

        A BLOB longer than :data:`BLOB_PIECE` comes as a :class:`_HashedBlob`, read in pieces.
        """
        rows = con.execute(
            "SELECT sha256, size, CASE WHEN typeof(data) = 'blob' AND length(data) > ? "
            "THEN NULL ELSE data END, rowid, typeof(data) = 'blob' AND length(data) > ? "
            "FROM blobs ORDER BY sha256",
            (BLOB_PIECE, BLOB_PIECE),
        )
        for address, size, data, rowid, large in rows:
            yield address, size, _HashedBlob(con, rowid) if large else data

    def _check_blob_rows(self, cur: Iterable[tuple[Any, Any, Any]], missing: str) -> None:
        """Check stored ``(address, size, data)`` rows against the referenced blobs."""
        st = self.states["blobs"]
        refs = self.blob_refs
        seen: set[str] = set()
        unreferenced = 0
        first_unreferenced: str | None = None
        for address, size, data in cur:
            ref = refs.get(address) if isinstance(address, str) else None
            label = f"{address!r:.80}" if not isinstance(address, str) else address
            prefix = f"seq {ref[0]}: blob {ref[1]!r} ({label})" if ref else f"blob {label}"
            seq = ref[0] if ref else None
            if ref is not None:
                seen.add(address)
            elif first_unreferenced is None or label < first_unreferenced:
                unreferenced += 1
                first_unreferenced = label
            else:
                unreferenced += 1
            problem = _blob_row_problem(address, size, data)
            if problem is not None:
                st.fail(f"{prefix}{problem}", seq, where=label)
        for address, (seq, name) in refs.items():
            if address not in seen:
                st.fail(
                    f"seq {seq}: blob {name!r} ({address}) {missing}",
                    seq,
                    where=address,
                )
        if unreferenced:
            st.warn(
                f"{unreferenced} stored blob(s) are referenced by no event "
                f"(first: {first_unreferenced})",
                where=first_unreferenced,
            )

    def _trusted_keys(self) -> list[Vkey]:
        st = self.states["trust"]
        trusted: list[Vkey] = []
        for number, text in enumerate(self.trusted_texts, start=1):
            try:
                trusted.append(parse_vkey(text.strip()))
            except KeyFormatError as exc:
                st.fail(
                    f"trusted key {number} is not a valid vkey: {exc}",
                    where=f"trusted key {number}",
                )
        genesis = self.registry.genesis
        if st.fails:
            pass  # a trusted key the caller gave is unusable: that is the failure to report
        elif self.trusted_texts:
            if genesis is None:
                st.fail("the log has no valid genesis key to compare with the trusted keys", 0)
            elif genesis.vkey not in trusted:
                st.fail(
                    f"seq 0: the genesis key {genesis.actor} is not among the trusted keys",
                    0,
                    where=genesis.vkey.text,
                )
        else:
            st.warn("keys are self-asserted: signatures prove integrity, not authorship")
        return trusted

    def _signed_at(self, note_keys: Sequence[Vkey], size: int, trusted: Sequence[Vkey]) -> bool:
        """Whether one verified signer is trusted or a ledger key valid for event ``size - 1``."""
        for key in note_keys:
            if key in trusted:
                return True
            record = self.registry.keys.get(key.actor)
            if (
                record is not None
                and record.vkey == key
                and size >= 1
                and record.valid_for(size - 1)
            ):
                return True
        return False

    def _open_checkpoint(
        self, data: str | bytes, trusted: Sequence[Vkey]
    ) -> tuple[Checkpoint, tuple[Vkey, ...]]:
        known = [r.vkey for r in self.registry.keys.values()] + list(trusted)
        note = open_note(data, known)
        return parse_checkpoint(note.text), note.verified_by

    def _check_stored_checkpoints(
        self, stored: list[_StoredCheckpoint], trusted: Sequence[Vkey]
    ) -> None:
        st = self.states["checkpoints"]
        for s in stored:
            label = s.label
            where = s.where
            if s.problem is not None or not isinstance(s.note, str):
                st.fail(f"{label}: {s.problem or 'note is not text'}", where=where)
                continue
            try:
                cp, signers = self._open_checkpoint(s.note, trusted)
            except (NoteError, CheckpointFormatError) as exc:
                st.fail(f"{label}: {exc}", where=where)
                continue
            problem = self._stored_checkpoint_problem(s, cp, signers, trusted)
            if problem is not None:
                st.fail(f"{label}: {problem[0]}", problem[1], where=where)

    def _stored_checkpoint_problem(
        self,
        s: _StoredCheckpoint,
        cp: Checkpoint,
        signers: Sequence[Vkey],
        trusted: Sequence[Vkey],
    ) -> tuple[str, int | None] | None:
        """What is wrong with an opened stored checkpoint, and at which seq; or None."""
        origin = self.registry.origin
        root = self.roots.get(cp.size)
        n = self.size
        if origin is None or cp.origin != origin:
            return f"origin {cp.origin!r:.80} is not the log's origin {origin!r}", None
        if cp.size > n:
            # the first event the checkpoint covers and the log lacks is seq n
            return f"size exceeds log size {n}", n
        if root is None or cp.root != root:
            return f"root differs from the recomputed root at size {cp.size}", None
        if not self._signed_at(signers, cp.size, trusted):
            return (
                f"not signed by a trusted key or by a ledger key valid at size "
                f"{cp.size} (verified signers: {', '.join(k.actor for k in signers)})"
            ), None
        if s.size_col != cp.size or type(s.size_col) is not int:
            return f"size column is {s.size_col!r:.40}, the note says {cp.size}", None
        if s.root_col != cp.root:
            return "root column differs from the note's root", None
        return None

    def _check_published(self, trusted: Sequence[Vkey], final_root: bytes) -> None:
        st = self.states["published-checkpoints"]
        origin = self.registry.origin
        n = self.size
        for p in self.published:
            label, where = p.label, p.path
            if p.problem is not None or p.data is None:
                st.fail(f"{label}: {p.problem}", where=where)
                continue
            try:
                cp, signers = self._open_checkpoint(p.data, trusted)
            except (NoteError, CheckpointFormatError) as exc:
                st.fail(f"{label}: {exc}", where=where)
                continue
            if origin is None or cp.origin != origin:
                st.fail(
                    f"{label}: origin {cp.origin!r:.80} is not the log's origin {origin!r}",
                    where=where,
                )
            elif not self._signed_at(signers, cp.size, trusted):
                st.fail(
                    f"{label}: not signed by a trusted key or by a ledger key valid at size "
                    f"{cp.size} (verified signers: {', '.join(k.actor for k in signers)})",
                    where=where,
                )
            elif cp.size > n:
                st.fail(
                    f"{label}: log rolled back: checkpoint has size {cp.size} but the log has "
                    f"{n} events",
                    n,
                    where=where,
                )
            else:
                assert self.leaves is not None
                proof = consistency_proof(cp.size, self.leaves)
                if not verify_consistency(cp.size, n, proof, cp.root, final_root):
                    st.fail(
                        f"{label}: consistency proof from size {cp.size} to size {n} does not "
                        f"verify: the log's root at size {cp.size} is not the checkpoint's (the "
                        "log was rewritten after the checkpoint was published)",
                        where=where,
                    )

    def _check_origin_meta(self) -> None:
        origin = self.registry.origin
        meta_origin = self.meta.get("origin")
        if origin is not None and meta_origin is not None and meta_origin != origin:
            self.states["file"].fail(
                f"meta origin {meta_origin!r:.80} differs from the genesis origin {origin!r}",
                where="meta.origin",
            )

    def _checks(self, stored: list[_StoredCheckpoint], trusted: list[Vkey]) -> list[Check]:
        st = self.states
        n = self.size
        genesis = self.registry.genesis
        published = len(self.published)
        passes = {
            "file": self._file_pass(),
            "envelopes": f"{n} envelopes are canonical v1 envelopes matching their rows",
            "sequence": f"seqs 0..{n - 1} without gaps, event 0 is ledger.genesis",
            "chain": f"every prev links to the previous leaf hash ({n} links)",
            "leaf-hashes": f"{n} stored leaf hashes equal SHA-256(0x00 || envelope)",
            "keys": f"{len(self.registry.keys)} key(s) registered by valid key events; "
            "the keys table equals their projection",
            "signatures": f"{n} signatures verify under keys valid for their seq and role",
            "blobs": f"{len(self.blob_refs)} referenced blob(s) present and hashing to their "
            "addresses",
            "tree": f"{self.tree_nodes} stored interior nodes equal the recomputed ones",
            "checkpoints": f"{len(stored)} stored checkpoint(s) parse, are validly signed and "
            "match the recomputed roots",
            "published-checkpoints": f"{published} published checkpoint(s) are signed and the log "
            f"(size {n}) is consistent with each",
            "trust": (
                f"the genesis key {genesis.actor} is one of the {len(trusted)} trusted key(s)"
                if genesis is not None
                else "trusted"
            ),
            "time-order": "event times never step back",
        }
        checks = []
        for name, state in st.items():
            if name == "published-checkpoints" and not published:
                continue
            checks.append(state.check(passes[name]))
        return checks


class _Stream:
    """One pass over the event rows in seq order, for :meth:`_Run._stream`.

    The attributes carry what one row hands to the next (the expected seq, the previous leaf
    hash, the compact range of the tree, the keys authorized since the last key event, the
    chunk of signatures not yet handed to a worker ...); :meth:`row` runs the checks of
    ``docs/ledger-format.md`` §8 on one row, one method per check, in the order they depend on
    each other.
    """

    __slots__ = (
        "authorized",
        "blob_refs",
        "buffer",
        "check_tree",
        "chunk",
        "chunk_lo",
        "chunk_n",
        "expected",
        "first_faulty",
        "first_skimmed",
        "futures",
        "inline",
        "key_map",
        "leaves",
        "n_faulty",
        "n_skimmed",
        "overrides",
        "parse",
        "pending",
        "pool",
        "position",
        "prev_hex",
        "prev_seq",
        "prev_time",
        "prev_time_seq",
        "reg_keys",
        "roots",
        "run",
        "sig_time",
        "snapshot_sizes",
        "st_chain",
        "st_env",
        "st_keys",
        "st_leaf",
        "st_seq",
        "st_sig",
        "st_time",
        "stack",
        "tree_rows",
    )

    def __init__(
        self,
        run: _Run,
        con: Any,
        snapshot_sizes: set[int],
        pool: ProcessPoolExecutor | None,
        total: int,
    ) -> None:
        st = run.states
        self.run = run
        self.st_env, self.st_seq, self.st_chain = st["envelopes"], st["sequence"], st["chain"]
        self.st_leaf, self.st_keys = st["leaf-hashes"], st["keys"]
        self.st_sig, self.st_time = st["signatures"], st["time-order"]
        self.parse = Canonicalizer().parse
        self.stack: list[bytes] = []  # complete-subtree hashes, largest first (a compact range)
        self.leaves = run.leaves
        self.roots = run.roots
        self.snapshot_sizes = snapshot_sizes
        if 0 in snapshot_sizes:
            self.roots[0] = EMPTY_ROOT
        self.reg_keys = run.registry.keys
        self.blob_refs = run.blob_refs
        self.pool = pool
        self.inline = pool is None
        self.tree_rows = run._tree_rows(con)
        self.pending = next(self.tree_rows, None)
        self.check_tree = run.has_tree
        self.buffer = run.sig_buffer if pool is not None else None
        # (actor, kind) -> key, for pairs that were valid and allowed; valid for every later
        # seq until the next key event, because validity only starts (a < seq) or ends
        # (revocation)
        self.authorized: dict[tuple[str, str], Ed25519PublicKey] = {}
        self.futures: list[Future[list[tuple[int, str]]]] = []
        self.chunk = max(_MIN_CHUNK, min(_MAX_CHUNK, total // (run.jobs * 8) + 1))
        self.chunk_lo: int | None = None
        self.chunk_n = 0
        self.overrides: dict[int, str | None] = {}
        self.key_map: dict[str, bytes] = {}
        self.expected = 0
        self.n_faulty = 0
        self.first_faulty = -1
        self.n_skimmed = 0
        self.first_skimmed = -1
        self.position = 0
        self.prev_hex = ZERO_PREV
        self.prev_seq = -1
        self.prev_time: str | None = None
        self.prev_time_seq = -1
        self.sig_time = 0.0

    # ------------------------------------------------------------------------------ one row

    def row(
        self,
        seq: int,
        kind_col: Any,
        actor_col: Any,
        time_col: Any,
        envelope: Any,
        signature: Any,
        stored_leaf: Any,
    ) -> None:
        """Every check on one ``(seq, kind, actor, time, envelope, signature, leaf_hash)`` row."""
        faulty = self.sequence(seq)
        envelope, lh = self.leaf_hash(seq, envelope, stored_leaf)
        skim = kind_col is SKIMMED  # an archive line not parsed (MAX_FAULTY_KEPT)
        env: Any = None
        env_ok = False
        if not skim:
            env, env_ok = self.envelope(seq, envelope, kind_col, actor_col, time_col)
        is_obj = env_ok or type(env) is dict
        if env_ok:
            kind, actor, prev = env["kind"], env["actor"], env["prev"]
        elif is_obj:
            kind, actor, prev = env.get("kind"), env.get("actor"), env.get("prev")
        else:
            kind = actor = prev = None
        faulty = self.chain(seq, lh, prev, is_obj, skim) or faulty or not env_ok
        self.tree(lh)
        if skim:  # hashed into the tree (checkpoints are still compared), nothing else
            if self.first_skimmed < 0:
                self.first_skimmed = seq
            self.n_skimmed += 1
            return
        self.keys(seq, kind, actor, env, is_obj)
        faulty = self.signature(seq, kind, actor, actor_col, env_ok, envelope, signature) or faulty
        if not self.inline:
            self.hand_over(seq, actor_col, envelope, signature)
        if faulty:
            self.count_faulty(seq)
        if env_ok:
            self.blobs_and_time(seq, env)

    def sequence(self, seq: int) -> bool:
        """Check that ``seq`` is the next one; return whether it is not (the line is faulty)."""
        expected = self.expected
        self.expected = seq + 1
        if seq == expected:
            return False
        if self.position == 0:
            self.st_seq.fail(f"the first row has seq {seq}, not 0", seq=0)
        else:
            self.st_seq.fail(
                f"seq {expected} is missing (the row after seq {self.prev_seq} has seq {seq})",
                seq=expected,
            )
        return True

    def leaf_hash(self, seq: int, envelope: Any, stored_leaf: Any) -> tuple[bytes, bytes]:
        """The envelope as bytes and its leaf hash, compared with the stored one if any."""
        if type(envelope) is not bytes:
            self.st_env.fail(
                f"seq {seq}: envelope is stored as {type(envelope).__name__}, not as a BLOB", seq
            )
            envelope = _as_bytes(envelope)
        lh = _sha256(b"\x00" + envelope).digest()
        if stored_leaf is not RECOMPUTED and stored_leaf != lh:
            self.st_leaf.fail(
                f"seq {seq}: stored leaf_hash differs from SHA-256(0x00 || envelope)", seq
            )
        return envelope, lh

    def envelope(
        self, seq: int, envelope: bytes, kind_col: Any, actor_col: Any, time_col: Any
    ) -> tuple[Any, bool]:
        """The parsed envelope (or None) and whether it is a well-formed event matching its row."""
        try:
            env, canonical = self.run._parsed(envelope) or self.parse(envelope)
        except CanonicalError as exc:
            self.st_env.fail(f"seq {seq}: envelope is not valid JSON for JCS: {exc}", seq)
            return None, False
        problem = self.form_problem(seq, envelope, canonical, env)
        if problem is None:
            problem = _row_mismatch(env, kind_col, actor_col, time_col)
        if problem is not None:
            self.st_env.fail(f"seq {seq}: {problem}", seq)
            return env, False
        return env, True

    def form_problem(self, seq: int, envelope: bytes, canonical: bytes, env: Any) -> str | None:
        """What is wrong with a parsed envelope's size, bytes or fields, if anything."""
        if len(envelope) > MAX_ENVELOPE_BYTES:
            return f"envelope is {len(envelope)} bytes, more than {MAX_ENVELOPE_BYTES}"
        if canonical != envelope:
            return "envelope bytes are not in RFC 8785 canonical form"
        return envelope_problem(
            env, seq, prev_ok=type(env) is dict and env.get("prev") == self.prev_hex
        )

    def chain(self, seq: int, lh: bytes, prev: Any, is_obj: bool, skim: bool) -> bool:
        """Check ``prev`` against the previous leaf hash; return whether it breaks the chain."""
        broken: bool = prev != self.prev_hex
        if broken and not skim:
            if not is_obj:
                self.st_chain.fail(
                    f"seq {seq}: prev cannot be read: the envelope is not a JSON object", seq
                )
            elif self.position == 0:
                self.st_chain.fail(f"seq {seq}: prev of the first event is not 64 zeros", seq)
            else:
                self.st_chain.fail(
                    f"seq {seq}: prev does not match leaf hash of seq {self.prev_seq}", seq
                )
        self.prev_hex = lh.hex()
        self.prev_seq = seq
        return broken

    def tree(self, lh: bytes) -> None:
        """Append ``lh`` to the compact range, checking each subtree it completes.

        Each completed subtree is compared with the next stored row, which the ORDER BY of
        :meth:`_Run._tree_rows` puts in exactly this order.
        """
        if self.leaves is not None:
            self.leaves.append(lh)
        h = lh
        m = self.position
        self.position = position = m + 1
        stack = self.stack
        level = 0
        while m & 1:
            h = _sha256(b"\x01" + stack.pop() + h).digest()
            m >>= 1
            level += 1
            if self.check_tree:
                self.compare_node(level, m, h, position)
        stack.append(h)
        if position in self.snapshot_sizes:
            self.roots[position] = _stack_root(stack)

    def compare_node(self, level: int, idx: int, h: bytes, size: int) -> None:
        """Compare the completed node ``(level, idx)`` with the stored tree rows."""
        pending = self.pending
        if pending is not None and pending[0] == level and pending[1] == idx:
            if pending[2] != h:
                self.run._tree_mismatch(level, idx, size, h, pending)
            self.pending = next(self.tree_rows, None)
        else:
            self.pending = self.run._compare_tree([(level, idx, h)], pending, self.tree_rows, size)

    def keys(self, seq: int, kind: Any, actor: Any, env: Any, is_obj: bool) -> None:
        """The first event is a genesis; key events update the registry."""
        if self.position == 1 and kind != "ledger.genesis":
            self.st_seq.fail(
                f"seq {seq}: the first event is {kind!r:.80}, not ledger.genesis"
                if is_obj
                else f"seq {seq}: the first event is unreadable, not a ledger.genesis",
                seq,
            )
            self.st_keys.fail(f"seq {seq}: no ledger.genesis event registers an owner key", seq)
        if kind not in _KEY_KINDS:
            return
        self.authorized.clear()  # validity and roles may change from here on
        body = env.get("body")
        if type(body) is not dict:
            self.st_keys.fail(f"seq {seq}: {kind} body is not a JSON object", seq)
            return
        problem = self.run.registry.apply(seq, kind, actor, body)
        if problem is not None:
            self.st_keys.fail(f"seq {seq}: {problem}", seq)

    def signer(
        self, seq: int, kind: Any, actor: Any, env_ok: bool
    ) -> tuple[Ed25519PublicKey | None, str | None]:
        """The key that must have signed this event, or why there is none."""
        if type(actor) is not str:
            return None, f"seq {seq}: actor cannot be read, so the signature cannot be checked"
        record = self.reg_keys.get(actor)
        if record is None:
            return None, f"seq {seq}: actor {actor} is not a registered key"
        if not record.valid_for(seq):
            if record.revoked_seq is not None and seq > record.revoked_seq:
                return None, f"seq {seq}: key {actor} was revoked at seq {record.revoked_seq}"
            return None, (
                f"seq {seq}: key {actor} is registered by this event and may sign only later events"
            )
        if type(kind) is not str or not role_may_append(record.role, kind):
            return None, (
                f"seq {seq}: key {actor} has role {record.role}, which may not append {kind!r:.80}"
            )
        key_obj = record.vkey.ed25519
        if env_ok:
            self.authorized[(actor, kind)] = key_obj
        return key_obj, None

    def signature(
        self,
        seq: int,
        kind: Any,
        actor: Any,
        actor_col: Any,
        env_ok: bool,
        envelope: bytes,
        signature: Any,
    ) -> bool:
        """Check who signed, and the signature itself when inline; return whether it fails."""
        problem = None
        key_obj = self.authorized.get((actor, kind)) if env_ok else None
        if key_obj is None:  # else: passed every check of signer for this kind since the last
            key_obj, problem = self.signer(seq, kind, actor, env_ok)  # key event
        if problem is not None:
            self.st_sig.fail(problem, seq)
            if not self.inline:
                self.run.structural_sig_fails.add(seq)
                self.overrides[seq] = None
            return True
        if key_obj is not None and self.n_faulty >= MAX_FAULTY_KEPT:
            # the log is junk from here on: a signature costs as much as a thousand lines,
            # so none is verified any more (and the line is not kept), only counted
            self.st_sig.fail(
                f"seq {seq}: signature not verified: {self.n_faulty:,} earlier lines (the first "
                f"at seq {self.first_faulty}) are not the next event of the log",
                seq,
                rank=1,
            )
            if not self.inline:
                self.overrides[seq] = None
            return True
        if key_obj is not None and self.inline:
            return self.verify_inline(seq, actor, key_obj, envelope, signature)
        if actor != actor_col:
            self.overrides[seq] = actor
        return False

    def verify_inline(
        self, seq: int, actor: Any, key_obj: Ed25519PublicKey, envelope: bytes, signature: Any
    ) -> bool:
        """Verify the Ed25519 signature here; return whether it fails."""
        t0 = time.perf_counter()
        failed = True
        if type(signature) is not bytes or len(signature) != 64:
            self.st_sig.fail(f"seq {seq}: signature is not a 64-byte BLOB", seq)
        else:
            try:
                key_obj.verify(signature, envelope)
            except InvalidSignature:
                # inline, no structural problem was found at this seq: counted at once
                self.st_sig.fail(f"seq {seq}: signature does not verify under key {actor}", seq)
            else:
                failed = False
        self.sig_time += time.perf_counter() - t0
        return failed

    def hand_over(self, seq: int, actor_col: Any, envelope: bytes, signature: Any) -> None:
        """Add the row to the chunk of signatures for the workers; submit a full chunk."""
        if self.buffer is not None:
            self.buffer.append((seq, actor_col, envelope, signature))
        if self.chunk_lo is None:
            self.chunk_lo = seq
        self.chunk_n += 1
        if self.chunk_n >= self.chunk:
            reg_keys = self.reg_keys
            if len(self.key_map) != len(reg_keys):
                self.key_map = {a: r.vkey.public_key for a, r in reg_keys.items()}
            self.futures.append(
                self.run._submit(self.pool, self.chunk_lo, seq, self.key_map, self.overrides)  # type: ignore[arg-type]
            )
            self.chunk_lo, self.chunk_n, self.overrides = None, 0, {}

    def count_faulty(self, seq: int) -> None:
        """Count a faulty line.

        Beyond MAX_FAULTY_KEPT, neither the envelope (the source's business, through
        ``unkept_row``) nor its blob references are kept.
        """
        self.n_faulty += 1
        if self.first_faulty < 0:
            self.first_faulty = seq
        if self.n_faulty > MAX_FAULTY_KEPT:
            self.run.unkept_row = seq
            if self.run.unkept is None:
                self.run.unkept = seq

    def blobs_and_time(self, seq: int, env: dict[str, Any]) -> None:
        """Note the blobs the event references; warn if its time runs backwards."""
        blobs = env["blobs"]
        if blobs and self.n_faulty <= MAX_FAULTY_KEPT:
            blob_refs = self.blob_refs
            for name, digest in blobs.items():
                if digest not in blob_refs:
                    blob_refs[digest] = (seq, name)
        t = env["time"]
        prev_time = self.prev_time
        if prev_time is not None and t < prev_time:
            self.st_time.warn(
                f"seq {seq}: time {t} is earlier than seq {self.prev_time_seq}'s {prev_time}", seq
            )
        self.prev_time, self.prev_time_seq = t, seq

    # ------------------------------------------------------------------------------ the end

    def finish(self) -> list[Future[list[tuple[int, str]]]]:
        """After the last row: report what is left over and return the workers' futures.

        The lines not parsed, the last chunk, the tree rows left over, an empty log; the run's
        size, roots and counts.
        """
        run = self.run
        run.sig_time += self.sig_time
        run.faulty = self.n_faulty
        if self.n_skimmed:
            self.report_skimmed()
        if self.pool is not None and self.chunk_lo is not None:
            key_map = {a: r.vkey.public_key for a, r in self.reg_keys.items()}
            self.futures.append(
                run._submit(self.pool, self.chunk_lo, self.prev_seq, key_map, self.overrides)
            )
        pending = self.pending
        while pending is not None:
            run._tree_extra(pending)
            pending = next(self.tree_rows, None)
        position = self.position
        if position == 0:
            self.st_seq.fail("the log has no events (no ledger.genesis)", seq=0)
            self.st_keys.fail("the log has no events, so no owner key is registered", seq=0)
        run.size = position
        self.roots[position] = _stack_root(self.stack)
        run.tree_nodes = position - bin(position).count("1")
        return self.futures

    def report_skimmed(self) -> None:
        """One failure each for envelopes and signatures over the lines only hashed."""
        n_skimmed, first_skimmed = self.n_skimmed, self.first_skimmed
        why = (
            f"{self.n_faulty:,} earlier lines (the first at seq {self.first_faulty}) are not the "
            "next event of the log"
        )
        self.st_env.fail(
            f"seq {first_skimmed}: this line and the {n_skimmed - 1:,} after it were not "
            f"parsed, only hashed into the tree: {why}",
            first_skimmed,
            rank=1,
            count=n_skimmed,
        )
        self.st_sig.fail(
            f"seq {first_skimmed}: the signatures of this line and the {n_skimmed - 1:,} "
            f"after it were not verified: {why}",
            first_skimmed,
            rank=1,
            count=n_skimmed,
        )


def _row_mismatch(env: dict[str, Any], kind_col: Any, actor_col: Any, time_col: Any) -> str | None:
    """How the row's kind, actor or time columns differ from the envelope's, if they do."""
    for name, column in (("kind", kind_col), ("actor", actor_col), ("time", time_col)):
        if env[name] != column:
            return f"row {name} {column!r:.80} differs from the envelope's {env[name]!r}"
    return None


def verify_ledger_file(
    path: str | os.PathLike[str],
    *,
    trusted_keys: Sequence[str] = (),
    checkpoints: Sequence[str | os.PathLike[str]] = (),
    jobs: int = 1,
) -> Report:
    """Verify a ledger file and return a :class:`Report`; never raises for a bad ledger.

    ``trusted_keys`` are vkeys the caller trusts (the genesis key must be one of them);
    ``checkpoints`` are files each holding one published signed checkpoint, which the log must
    extend; ``jobs > 1`` verifies Ed25519 signatures in that many worker processes (same report).
    """
    name = os.fspath(path)
    if isinstance(trusted_keys, str):  # one vkey given where a list was meant
        trusted_keys = [trusted_keys]
    if isinstance(checkpoints, (str, os.PathLike)):  # one path given where a list was meant
        checkpoints = [checkpoints]
    try:
        report = _Run(name, trusted_keys, checkpoints, jobs).run()
        if report.checks and report.checks[0].status is not Status.FAIL:  # a readable file
            from verify._inspect import inspect_checks  # an Inspect eval's record, if any

            report.checks.extend(inspect_checks(name))
        return report
    except Exception as exc:  # fail closed: a verifier that crashes must not look like a pass
        return Report(
            path=name,
            checks=[
                Check(
                    "file",
                    Status.FAIL,
                    f"{name}: verification stopped by an unexpected error: "
                    f"{type(exc).__name__}: {exc}",
                    where=name,
                )
            ],
        )
