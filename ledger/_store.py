"""The ledger store: one SQLite file holding signed envelopes, blobs, checkpoints and the tree.

Every append (one event or a batch) runs in one ``BEGIN IMMEDIATE`` transaction: the writer
reads the head, signs the new envelopes against it and commits, so concurrent writers serialise
and the chain never forks, and a killed writer leaves all of its batch or none of it. Inside
:meth:`Ledger.transaction` an append is a savepoint of the caller's transaction instead, and
nothing is committed until the caller's block ends. Read-only opening works in a read-only
folder (``docs/ledger-format.md``, "Store").
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import sqlite_utils

from ledger._canonical import loads_json
from ledger._clock import FixedClock, utc_now
from ledger._envelope import (
    ACTOR_RE,
    BLOB_NAME_RE,
    ZERO_HASH,
    check_kind,
    envelope_bytes,
    format_time,
)
from ledger._errors import (
    AuthorizationError,
    FormatError,
    LedgerError,
    NotALedgerError,
    NoteError,
    ProofError,
    SchemaVersionError,
    StoreError,
)
from ledger._files import describe_os_error, os_error_advice, os_error_reason
from ledger._http import RemoteLocation, is_http_url
from ledger._keys import SigningKey, VerifierKey
from ledger._merkle import (
    EMPTY_ROOT,
    consistency_proof,
    decompose,
    fold,
    inclusion_proof,
    node_hash,
    verify_consistency,
    verify_inclusion,
)
from ledger._note import Checkpoint, open_checkpoint
from ledger._postgres import (
    PgConnection,
    PostgresLocation,
    check_schema,
    create_schema,
    is_url,
)
from ledger._roles import ROLES, role_may_append
from ledger._sealed import SealPolicy, is_sealed, open_blob

APPLICATION_ID = 0x504C4731  # "PLG1"
SCHEMA_VERSION = 1
MAX_ORIGIN = 256

Clock = Callable[[], datetime]
Location = str | os.PathLike[str] | PostgresLocation | RemoteLocation
"""Where a ledger lives: a SQLite file path, a PostgreSQL store (a URL or its location), or a
study behind ``ledger serve`` (an ``http(s)://`` URL or its location)."""
BlobValue = bytes | str
"""A blob given to :meth:`Ledger.append`: raw bytes to store, or the hex SHA-256 of a stored one."""

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE events (
  seq INTEGER PRIMARY KEY,
  kind TEXT NOT NULL,
  actor TEXT NOT NULL,
  time TEXT NOT NULL,
  envelope BLOB NOT NULL,
  signature BLOB NOT NULL,
  leaf_hash BLOB NOT NULL
);
CREATE INDEX events_kind ON events (kind, seq);
CREATE TABLE blobs (sha256 TEXT PRIMARY KEY, size INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE checkpoints (
  id INTEGER PRIMARY KEY,
  size INTEGER NOT NULL,
  root BLOB NOT NULL,
  note TEXT NOT NULL,
  created TEXT NOT NULL
);
CREATE TABLE keys (
  actor TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  vkey TEXT NOT NULL,
  role TEXT NOT NULL,
  added_seq INTEGER NOT NULL,
  revoked_seq INTEGER
);
CREATE TABLE tree (
  level INTEGER NOT NULL,
  idx INTEGER NOT NULL,
  hash BLOB NOT NULL,
  PRIMARY KEY (level, idx)
) WITHOUT ROWID;
"""


BLOBS_PER_QUERY = 500
"""Digests looked up per query by :meth:`Ledger.read_blobs` (SQLite allows 32,766 variables)."""
STREAMED_BLOB_BYTES = 1 << 20
"""From this size a blob is written into SQLite by incremental blob I/O (``_insert_blobs``)."""
_BLOB_CHUNK = 1 << 20

BLOB_CHUNK = 1 << 20
"""Bytes per piece of :meth:`Ledger.stored_blob_chunks` and :meth:`Ledger.blob_chunks`."""

MIN_BLOB_CHUNK = 4096
"""The smallest piece those take (a sealed blob's header fits in the first)."""


def check_origin(origin: str) -> str:
    """Return ``origin`` if it is a valid checkpoint origin (non-empty, no spaces or '+')."""
    if (
        not origin
        or len(origin) > MAX_ORIGIN
        or any(c.isspace() or c == "+" or ord(c) < 0x20 for c in origin)
    ):
        raise FormatError(
            f"origin {origin!r} must be 1-{MAX_ORIGIN} characters with no white space or '+' "
            "(a schema-less URL such as example.org/study-1 is recommended)"
        )
    return origin


@dataclass(frozen=True)
class Event:
    """One stored event: the parsed envelope, its bytes, signature and leaf hash."""

    seq: int
    time: str
    kind: str
    actor: str
    prev: str
    body: dict[str, Any]
    blobs: dict[str, str]
    envelope: bytes
    signature: bytes
    leaf_hash: bytes

    def to_json(self) -> dict[str, Any]:
        """Return ``{"envelope": {...}, "signature": base64, "leaf_hash": hex}``."""
        return {
            "envelope": json.loads(self.envelope),
            "signature": base64.b64encode(self.signature).decode(),
            "leaf_hash": self.leaf_hash.hex(),
        }

    @classmethod
    def _from_row(cls, row: Sequence[Any]) -> Event:
        envelope, signature, leaf = bytes(row[0]), bytes(row[1]), bytes(row[2])
        obj = loads_json(envelope)
        return _event(
            obj["seq"],
            obj["time"],
            obj["kind"],
            obj["actor"],
            obj["prev"],
            obj["body"],
            obj["blobs"],
            envelope,
            signature,
            leaf,
        )


_new_object = object.__new__
_set_attribute = object.__setattr__


def _event(
    seq: int,
    time: str,
    kind: str,
    actor: str,
    prev: str,
    body: dict[str, Any],
    blobs: dict[str, str],
    envelope: bytes,
    signature: bytes,
    leaf_hash: bytes,
) -> Event:
    """``Event(...)``, the same object, for the store's many events (reads and appends).

    A frozen dataclass's ``__init__`` sets its ten fields one checked call at a time; the
    instance's attributes are given here at once (half the time of the per-field calls).
    """
    event = _new_object(Event)
    _set_attribute(
        event,
        "__dict__",
        {
            "seq": seq,
            "time": time,
            "kind": kind,
            "actor": actor,
            "prev": prev,
            "body": body,
            "blobs": blobs,
            "envelope": envelope,
            "signature": signature,
            "leaf_hash": leaf_hash,
        },
    )
    return event


@dataclass(frozen=True)
class KeyRecord:
    """A registered key: who it is, its role, and when it was added and revoked."""

    actor: str
    name: str
    vkey: str
    role: str
    added_seq: int
    revoked_seq: int | None

    def valid_for(self, seq: int) -> bool:
        """True when this key may sign event ``seq`` (format §4)."""
        added_ok = self.added_seq < seq or (seq == 0 and self.added_seq == 0)
        return added_ok and (self.revoked_seq is None or seq <= self.revoked_seq)


@dataclass(frozen=True)
class InclusionProof:
    """An RFC 9162 inclusion proof of leaf ``index`` in the tree of ``size``."""

    index: int
    size: int
    leaf_hash: bytes
    root: bytes
    path: tuple[bytes, ...]

    def verify(self) -> bool:
        """Check the proof against its own leaf hash and root."""
        return verify_inclusion(self.index, self.size, self.leaf_hash, self.path, self.root)

    def to_json(self) -> dict[str, Any]:
        """Return the proof as JSON-ready data (hashes in hex)."""
        return {
            "type": "inclusion",
            "leaf_index": self.index,
            "tree_size": self.size,
            "leaf_hash": self.leaf_hash.hex(),
            "root": self.root.hex(),
            "path": [p.hex() for p in self.path],
        }


@dataclass(frozen=True)
class ConsistencyProof:
    """An RFC 9162 consistency proof from the tree of ``old`` leaves to the tree of ``new``."""

    old: int
    new: int
    old_root: bytes
    new_root: bytes
    path: tuple[bytes, ...]

    def verify(self) -> bool:
        """Check the proof against its own two roots."""
        return verify_consistency(self.old, self.new, self.old_root, self.new_root, self.path)

    def to_json(self) -> dict[str, Any]:
        """Return the proof as JSON-ready data (hashes in hex)."""
        return {
            "type": "consistency",
            "old_size": self.old,
            "new_size": self.new,
            "old_root": self.old_root.hex(),
            "new_root": self.new_root.hex(),
            "path": [p.hex() for p in self.path],
        }


@dataclass(frozen=True)
class StoredCheckpoint:
    """A signed checkpoint kept in the ledger."""

    id: int
    size: int
    root: bytes
    note: str
    created: str


@dataclass(frozen=True)
class EventSpec:
    """One event to append with :meth:`Ledger.append_many`."""

    kind: str
    body: Mapping[str, Any]
    blobs: Mapping[str, BlobValue] | None = None


@dataclass(frozen=True)
class PreparedBatch:
    """Envelopes parsed, signatures checked, outside the write lock (:meth:`Ledger.prepare_signed`).

    ``parsed`` holds (envelope, signature) pairs, ``sent`` the blobs by SHA-256, ``verified``
    the (index, vkey) pairs whose signature verified with the key registered then.
    """

    parsed: list[tuple[Any, bytes]]
    sent: dict[str, bytes]
    verified: set[tuple[int, str]]


class _Head:
    """Head of the log inside a transaction: size, last leaf hash, and the Merkle frontier."""

    __slots__ = ("frontier", "last", "size")

    def __init__(self, size: int, last: bytes, frontier: list[tuple[int, bytes]]) -> None:
        self.size = size
        self.last = last
        self.frontier = frontier  # complete subtrees of the whole log, largest first

    def push(self, leaf: bytes, nodes: list[tuple[int, int, bytes]]) -> None:
        """Add a leaf, merging equal subtrees; new interior nodes are appended to ``nodes``."""
        index = self.size
        level, cur = 0, leaf
        frontier = self.frontier
        while frontier and frontier[-1][0] == level:
            cur = node_hash(frontier.pop()[1], cur)
            level += 1
            nodes.append((level, index >> level, cur))
        frontier.append((level, cur))
        self.size += 1
        self.last = leaf

    def root(self) -> bytes:
        return fold([h for _, h in self.frontier]) if self.frontier else EMPTY_ROOT


# SQLite's answers when it cannot set up WAL's shared-memory file (-shm) for a connection:
# the directory is read-only, or the file there cannot be created or opened.
_READ_ONLY_PLACE = frozenset(
    {
        "SQLITE_READONLY_DIRECTORY",
        "SQLITE_CANTOPEN",
        "SQLITE_READONLY_CANTINIT",
        "SQLITE_READONLY_CANTLOCK",
        "SQLITE_READONLY",
    }
)
# A -wal file shorter than its 32-byte header, one 24-byte frame header and the smallest
# page (512 bytes) holds no complete frame, so nothing that is not already in the main file.
_WAL_FRAME_MINIMUM = 32 + 24 + 512
_READ_ONLY_ADVICE = (
    "this command records events in the ledger: make the study folder and its ledger writable "
    "(chmod u+w), or run the command on a writable copy; read-only commands (ledger status, "
    "schedule, log, show, verify) work as they are"
)


def _wal_has_frames(path: Path) -> bool:
    """True when ``path``-wal may hold committed changes not yet written into ``path``."""
    try:
        return os.stat(f"{path}-wal").st_size >= _WAL_FRAME_MINIMUM
    except FileNotFoundError:
        return False


def _probe(conn: sqlite3.Connection) -> sqlite3.Connection:
    """Read the header through ``conn`` (SQLite opens files lazily); close it on failure."""
    try:
        conn.execute("PRAGMA application_id").fetchone()
    except BaseException:
        conn.close()
        raise
    return conn


FIXED_CLOCK_ENV = "PROMPT_LEDGER_FIXED_CLOCK"


def _env_clock(conn: sqlite3.Connection | PgConnection) -> Clock | None:
    """A :class:`FixedClock` when ``$PROMPT_LEDGER_FIXED_CLOCK`` holds an ISO 8601 start time.

    For reproducible demonstrations only (``scripts/make_archive.py``): every process that
    opens the ledger continues one millisecond after the last event, so times never step back.
    """
    value = os.environ.get(FIXED_CLOCK_ENV)
    if not value:
        return None
    try:
        start = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise StoreError(f"${FIXED_CLOCK_ENV}: {value!r} is not an ISO 8601 time") from None
    if start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    try:
        row = conn.execute("SELECT time FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        last = conn.execute("SELECT MAX(created) FROM checkpoints").fetchone()
    except Exception:  # sqlite3.Error or psycopg.Error: a ledger being created has no tables
        row, last = None, None
    for text in (row[0] if row else None, last[0] if last else None):
        if text:
            seen = datetime.fromisoformat(text.replace("Z", "+00:00")) + timedelta(milliseconds=1)
            start = max(start, seen)
    return FixedClock(start)


class Ledger:
    """A PROMPT ledger stored in one SQLite file or one PostgreSQL schema (``docs/storage.md``).

    Create one with :meth:`create`, open one with :meth:`open`; use it as a context manager or
    call :meth:`close`. Each instance holds one connection; use one instance per thread or
    process (any number of processes may append to the same ledger, on PostgreSQL from any
    number of machines).
    """

    def __init__(
        self,
        path: Path | PostgresLocation,
        conn: sqlite3.Connection | PgConnection,
        clock: Clock | None,
        *,
        readonly: bool = False,
    ) -> None:
        """Wrap an open connection; use :meth:`create` or :meth:`open` instead."""
        self.path = path
        self.readonly = readonly
        self._conn: Any = conn
        self.engine = "postgresql" if isinstance(conn, PgConnection) else "sqlite"
        self._db_errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
        self._lost_errors: tuple[type[BaseException], ...] = ()
        if isinstance(conn, PgConnection):
            import psycopg

            self._db_errors = (psycopg.Error,)
            self._lost_errors = (psycopg.OperationalError,)
        self._clock: Clock = clock or _env_clock(conn) or utc_now
        self._head_cache: _Head | None = None
        self._seal_policy: SealPolicy | None = None  # the locked privacy policy, once locked
        self._in_transaction = False
        self.trial_guard = self.engine == "postgresql"
        """Whether appends are checked against the trial rules (``ledger/_guard.py``): always on
        PostgreSQL; on SQLite when ``ledger serve`` appends for its clients (docs/service.md §7)."""
        with self._errors():
            row = conn.execute("SELECT value FROM meta WHERE key = 'origin'").fetchone()
        if row is None:
            raise NotALedgerError(f"{path}: ledger has no origin in its meta table")
        self.origin: str = row[0]

    # ------------------------------------------------------------------ opening and closing

    @staticmethod
    def location(path: Location) -> Path | PostgresLocation | RemoteLocation:
        """Parse where a ledger lives: a PostgreSQL URL, a service URL, or a file path.

        ``postgresql://``: a PostgreSQL store; ``http(s)://``: a study behind ``ledger serve``
        (one or several URLs, space-separated); anything else: a SQLite file.
        """
        if isinstance(path, PostgresLocation | RemoteLocation):
            return path
        if isinstance(path, str) and is_url(path):
            return PostgresLocation.parse(path)
        if isinstance(path, str) and is_http_url(path):
            return RemoteLocation.parse(path)
        return Path(path)

    @staticmethod
    def exists(path: Location) -> bool:
        """True when a ledger is stored there (a file, or a PostgreSQL schema with its tables)."""
        where = Ledger.location(path)
        return where.is_file() if isinstance(where, Path) else where.exists()

    @cached_property
    def db(self) -> sqlite_utils.Database:
        """The connection wrapped by sqlite-utils, for ad-hoc queries (imported on first use)."""
        if self.engine != "sqlite":
            raise StoreError(f"{self.path}: sqlite-utils reads SQLite ledgers only")
        import sqlite_utils

        return sqlite_utils.Database(self._conn)

    @staticmethod
    def _connect(path: Path, readonly: bool) -> sqlite3.Connection:
        """Open a connection to an existing ledger file and read its header once.

        Read-only connections use ``mode=ro``. In WAL mode SQLite needs the ``-shm`` file
        beside the database even to read; when the directory is not writable and there is none,
        the file is opened ``immutable=1`` instead, provided no ``-wal`` file holds changes not
        yet in the main file (``docs/ledger-format.md``, "Store"). A writable connection is
        refused with advice when the file or its directory is read-only.
        """
        try:
            os.close(os.open(path, os.O_RDONLY if readonly else os.O_RDWR))
        except OSError as exc:
            if readonly:
                raise StoreError(f"{path} cannot be read ({os_error_advice(exc)})") from exc
            raise StoreError(
                f"{path} cannot be written ({os_error_reason(exc)}); {_READ_ONLY_ADVICE}"
            ) from exc
        uri = path.absolute().as_uri()
        try:
            try:
                return _probe(
                    sqlite3.connect(
                        f"{uri}?mode=ro" if readonly else uri,
                        uri=True,
                        isolation_level=None,
                        timeout=60,
                        check_same_thread=False,
                    )
                )
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorname not in _READ_ONLY_PLACE:
                    raise
                if not readonly:
                    raise StoreError(
                        f"{path} cannot be written: its directory {path.parent} is read-only, "
                        f"and SQLite must create {path.name}-wal and {path.name}-shm there to "
                        f"write ({exc}); {_READ_ONLY_ADVICE}"
                    ) from exc
                if _wal_has_frames(path):
                    raise StoreError(
                        f"{path} cannot be read: {path.name}-wal beside it holds changes not yet "
                        f"written into {path.name}, and SQLite cannot read them without "
                        f"creating {path.name}-shm in {path.parent}, which is read-only ({exc}); "
                        "make the directory writable (the next ledger command folds them in), "
                        "or copy the folder with its -wal file somewhere writable"
                    ) from exc
                return _probe(
                    sqlite3.connect(
                        f"{uri}?mode=ro&immutable=1",
                        uri=True,
                        isolation_level=None,
                        timeout=60,
                        check_same_thread=False,
                    )
                )
        except sqlite3.OperationalError as exc:
            raise StoreError(f"{path}: cannot open ({exc})") from exc
        except sqlite3.DatabaseError as exc:
            raise NotALedgerError(f"{path} is not a PROMPT ledger ({exc})") from exc
        except OSError as exc:
            raise StoreError(f"{path}: cannot open ({describe_os_error(exc)})") from exc

    @classmethod
    def create(
        cls,
        path: Location,
        *,
        origin: str,
        key: SigningKey,
        clock: Clock | None = None,
    ) -> Ledger:
        """Create a new ledger whose genesis event registers ``key`` as the owner.

        ``path`` is a SQLite file, or a PostgreSQL store (``postgresql://...?schema=NAME``:
        the schema is created, and must not exist). Refuses to touch an existing file or
        schema. The schema is created in one transaction; a genesis that fails removes it.
        """
        where = cls.location(path)
        check_origin(origin)
        if isinstance(where, RemoteLocation):  # the service creates it from our genesis
            remote: Any = _remote_engine()
            return cast(Ledger, remote.create_remote(where, origin=origin, key=key, clock=clock))
        ledger = cls._create_empty(where, origin, clock)
        try:
            ledger._append_batch(
                [EventSpec("ledger.genesis", {"origin": origin, "vkey": key.vkey})],
                key,
                genesis=True,
            )
        except BaseException:
            ledger.close()
            _drop(where)
            raise
        return ledger

    @classmethod
    def _create_empty(
        cls, where: Path | PostgresLocation, origin: str, clock: Clock | None = None
    ) -> Ledger:
        """A new ledger with its tables and origin and no event (``ledger store copy``'s target).

        Refuses an existing file or schema; the tables are created in one transaction.
        """
        if isinstance(where, PostgresLocation):
            meta = [
                ("format", "prompt-ledger"),
                ("schema_version", str(SCHEMA_VERSION)),
                ("origin", origin),
            ]
            return cls(where, create_schema(where, meta), clock)
        p = where
        if p.exists():
            raise StoreError(f"{p} already exists; refusing to overwrite it")
        if not p.parent.is_dir():
            raise StoreError(f"{p}: directory {p.parent} does not exist")
        try:
            conn = sqlite3.connect(p, isolation_level=None, timeout=60, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(
                f"{p}: cannot create the ledger ({exc}); check that {p.parent} is writable"
            ) from exc
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("BEGIN IMMEDIATE")
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [
                    ("format", "prompt-ledger"),
                    ("schema_version", str(SCHEMA_VERSION)),
                    ("origin", origin),
                ],
            )
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            conn.close()
            _drop(p)
            raise StoreError(f"{p}: cannot create ledger ({exc})") from exc
        return cls(p, conn, clock)

    @classmethod
    def open(
        cls,
        path: Location,
        *,
        clock: Clock | None = None,
        readonly: bool = False,
    ) -> Ledger:
        """Open an existing ledger: a SQLite file, or a PostgreSQL store.

        Raises:
            StoreError: the file or schema does not exist or cannot be opened.
            NotALedgerError: the file is not SQLite, or not a PROMPT ledger.
            SchemaVersionError: the ledger was written by a newer version of this tool.
        """
        where = cls.location(path)
        if isinstance(where, RemoteLocation):
            remote = _remote_engine()
            return cast(Ledger, remote.connect(where, clock=clock, readonly=readonly))
        if isinstance(where, PostgresLocation):
            db = PgConnection(where, readonly=readonly)
            try:
                check_schema(db, SCHEMA_VERSION)
                return cls(where, db, clock, readonly=readonly)
            except BaseException:
                db.close()
                raise
        p = where
        if p.is_dir():
            raise StoreError(
                f"{p} is a directory, where the ledger file is expected (a study's is "
                "STUDY/ledger.db)"
            )
        if not p.is_file():
            raise StoreError(f"{p}: no such ledger file")
        conn = cls._connect(p, readonly)
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise NotALedgerError(f"{p} is not a PROMPT ledger ({exc})") from exc
        if app_id != APPLICATION_ID:
            conn.close()
            raise NotALedgerError(
                f"{p} is not a PROMPT ledger (SQLite application id {app_id:#x}, "
                f"expected {APPLICATION_ID:#x})"
            )
        if version > SCHEMA_VERSION:
            conn.close()
            raise SchemaVersionError(
                f"{p} has schema version {version}, newer than {SCHEMA_VERSION} which this "
                "version of prompt-ledger understands; upgrade prompt-ledger to read it"
            )
        if version < 1:
            conn.close()
            raise NotALedgerError(f"{p} is not a PROMPT ledger (schema version {version})")
        try:
            if not readonly:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = FULL")
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"{p}: cannot open for writing ({exc})") from exc
        return cls(p, conn, clock, readonly=readonly)

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except self._db_errors as exc:
            text = str(exc).strip() or type(exc).__name__
            if isinstance(exc, self._lost_errors):
                raise StoreError(
                    f"{self.path}: the PostgreSQL server went away ({text.splitlines()[0]}); "
                    "the transaction in progress was not recorded: run the command again "
                    "when the server is back"
                ) from exc
            raise StoreError(f"{self.path}: {text}") from exc

    @contextmanager
    def transaction(self) -> Iterator[Ledger]:
        """Hold one write transaction across the block: committed when it ends, else undone.

        Every append and checkpoint made through this ledger inside the block becomes visible
        to other connections only when the block ends without an exception, and is rolled back
        if it raises; reads through this ledger inside the block already see them. Use it when
        a change to the ledger must not outlive work done outside it: ``ledger export`` appends
        ``export.created`` and writes the archive in one transaction, so an archive that could
        not be written leaves no event. Other writers wait (up to 60 s) until the block ends;
        transactions do not nest.

        Example::

            with Ledger.open("study.db") as log, log.transaction():
                note = log.sign_checkpoint(owner)
                write_files({"registration.checkpoint": note})   # fails: no checkpoint kept
        """
        if self.readonly:
            raise StoreError(f"{self.path} was opened read-only; open it for writing")
        if self._in_transaction:
            raise StoreError(f"{self.path}: a transaction is already open on this connection")
        with self._errors():
            self._conn.execute("BEGIN IMMEDIATE")
        self._in_transaction = True
        try:
            yield self
        except BaseException:
            self._in_transaction = False
            self._head_cache = None
            self._seal_policy = None
            with suppress(*self._db_errors):
                self._conn.execute("ROLLBACK")
            raise
        self._in_transaction = False
        try:
            self._conn.execute("COMMIT")
        except self._db_errors as exc:
            self._head_cache = None
            self._seal_policy = None
            with suppress(*self._db_errors):
                self._conn.execute("ROLLBACK")
            raise StoreError(
                f"{self.path}: cannot commit ({exc}); nothing of the transaction was recorded"
            ) from exc

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One all-or-nothing write: its own transaction, or a savepoint in :meth:`transaction`."""
        conn = self._conn
        nested = self._in_transaction
        conn.execute("SAVEPOINT write" if nested else "BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._head_cache = None
            self._seal_policy = None
            with suppress(*self._db_errors):
                if nested:
                    conn.execute("ROLLBACK TO write")
                    conn.execute("RELEASE write")
                else:
                    conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("RELEASE write" if nested else "COMMIT")
        except self._db_errors:
            self._head_cache = None
            self._seal_policy = None
            if not nested:
                with suppress(*self._db_errors):
                    conn.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------ appending

    def append(
        self,
        kind: str,
        body: Mapping[str, Any],
        *,
        key: SigningKey,
        blobs: Mapping[str, BlobValue] | None = None,
    ) -> Event:
        """Append one event signed by ``key`` and return it.

        ``blobs`` maps blob names to raw bytes (stored content-addressed) or to the hex SHA-256
        of a blob already in the ledger.
        """
        return self._append_batch([EventSpec(kind, body, blobs)], key)[0]

    def append_many(
        self, items: Iterable[EventSpec | tuple[str, Mapping[str, Any]]], *, key: SigningKey
    ) -> list[Event]:
        """Append several events signed by ``key`` in one transaction: all or none."""
        specs = [i if isinstance(i, EventSpec) else EventSpec(i[0], i[1]) for i in items]
        if not specs:
            return []
        return self._append_batch(specs, key)

    def add_key(self, vkey: str | VerifierKey, role: str, *, key: SigningKey) -> Event:
        """Register another key with a role (``key`` must be an owner key)."""
        text = vkey.vkey if isinstance(vkey, VerifierKey) else VerifierKey.parse(vkey).vkey
        return self.append("key.added", {"vkey": text, "role": role}, key=key)

    def revoke_key(self, actor: str, *, key: SigningKey, reason: str = "") -> Event:
        """Revoke a registered key (``key`` must be an owner key)."""
        return self.append("key.revoked", {"actor": actor, "reason": reason}, key=key)

    def _load_head(self) -> _Head:
        row = self._conn.execute(
            "SELECT seq, leaf_hash FROM events ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return _Head(0, b"", [])
        size, last = row[0] + 1, bytes(row[1])
        cached = self._head_cache
        if cached is not None and cached.size == size and cached.last == last:
            return _Head(size, last, list(cached.frontier))
        frontier = [(lvl, self._node(lvl, idx)) for lvl, idx in decompose(0, size)]
        return _Head(size, last, frontier)

    def _append_batch(
        self, specs: Sequence[EventSpec], key: SigningKey, *, genesis: bool = False
    ) -> list[Event]:
        checked: set[str] = set()
        for spec in specs:
            kind = spec.kind
            if type(kind) is str and kind in checked:
                continue  # each kind checked once (a batch has few), the first bad one named
            check_kind(kind)
            if kind == "ledger.genesis" and not genesis:
                raise FormatError("ledger.genesis can only be the first event of a new ledger")
            checked.add(kind)
        with self._errors(), self._write():
            return self._append_locked(specs, key, genesis)

    def _append_locked(
        self, specs: Sequence[EventSpec], key: SigningKey, genesis: bool
    ) -> list[Event]:
        conn = self._conn
        head = self._load_head()
        if genesis and head.size:
            raise StoreError(f"{self.path}: ledger already has a genesis event")
        keys = _KeyView(conn)
        actor = key.actor
        if not ACTOR_RE.match(actor):
            raise FormatError(f"actor id {actor!r} cannot be written in an envelope")
        authorized: set[str] = set()
        event_rows: list[tuple[Any, ...]] = []
        node_rows: list[tuple[int, int, bytes]] = []
        blob_rows: dict[str, tuple[Any, ...]] = {}
        events: list[Event] = []
        clock = self._clock
        for spec in specs:
            seq = head.size
            body = dict(spec.body)
            if genesis:
                keys.register(key.verifier, "owner", 0)
            elif spec.kind in authorized:
                pass  # same key, same kind, later seq in this batch: nothing can have changed
            else:
                keys.authorize(key, spec.kind, seq)
                if spec.kind in ("key.added", "key.revoked"):
                    self._apply_key_event(keys, spec.kind, body, seq)
                    authorized.clear()  # a revocation may have ended this key's rights
                else:
                    authorized.add(spec.kind)
            blob_refs: dict[str, str] = {}
            if spec.blobs:  # sealed blobs of the locked privacy policy (docs/privacy.md)
                blobs = spec.blobs
                policy = self._sealing()
                if policy.blobs:  # a policy that seals nothing leaves body and blobs as they are
                    body, blobs = policy.apply(spec.kind, body, blobs)
                blob_refs = self._store_blobs(blobs, seq, blob_rows)
            kind = spec.kind
            when = format_time(clock())
            prev = head.last.hex() if seq else ZERO_HASH
            data = envelope_bytes(
                seq=seq, time=when, kind=kind, actor=actor, prev=prev, body=body, blobs=blob_refs
            )
            signature = key.sign(data)
            leaf = hashlib.sha256(b"\x00" + data).digest()
            event_rows.append((seq, kind, actor, when, data, signature, leaf))
            head.push(leaf, node_rows)
            events.append(
                _event(seq, when, kind, actor, prev, body, dict(blob_refs), data, signature, leaf)
            )
        self._insert(events, specs, blob_rows, event_rows, node_rows, head, keys)
        return events

    def _insert(
        self,
        events: Sequence[Event],
        specs: Sequence[object],
        blob_rows: dict[str, tuple[Any, ...]],
        event_rows: list[tuple[Any, ...]],
        node_rows: list[tuple[int, int, bytes]],
        head: _Head,
        keys: _KeyView,
    ) -> None:
        """Write a checked batch's rows (inside the write transaction) and keep its head.

        On PostgreSQL, and on a SQLite ledger behind ``ledger serve`` (:attr:`trial_guard`), the
        trial rules are checked first (``ledger/_guard.py``: many writers, checked in sequence);
        on PostgreSQL the sequencer row records the size it let through.
        """
        conn = self._conn
        if self.trial_guard:
            from ledger._guard import guard_appends

            guard_appends(
                conn, self.path, [(e.seq, e.kind, e.body) for e in events], specs, self.engine
            )
        if blob_rows:
            self._insert_blobs(list(blob_rows.values()))
        conn.executemany(
            "INSERT INTO events (seq, kind, actor, time, envelope, signature, leaf_hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            event_rows,
        )
        conn.executemany("INSERT INTO tree (level, idx, hash) VALUES (?, ?, ?)", node_rows)
        if self.engine == "postgresql":
            conn.execute("UPDATE coord SET size = ? WHERE id = 1", (head.size,))
        keys.flush()
        self._head_cache = head

    def _insert_blobs(self, rows: list[tuple[Any, ...]]) -> None:
        """Insert (sha256, size, data) rows in order, a blob already stored left as it is.

        On SQLite a blob of :data:`STREAMED_BLOB_BYTES` or more is inserted as a ``zeroblob``
        of its size and its bytes written into the row by incremental blob I/O, a chunk at a
        time: bound as a parameter, SQLite copies it twice (the bound value and the record it
        builds), three times the blob at once (issue 41: ``items.csv`` of 10^5 trials is
        287 MB). The stored bytes are the same.
        """
        conn = self._conn
        sql = "INSERT INTO blobs (sha256, size, data) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
        if self.engine != "sqlite":
            conn.executemany(sql, rows)
            return
        small: list[tuple[Any, ...]] = []
        for row in rows:
            if row[1] < STREAMED_BLOB_BYTES:
                small.append(row)
                continue
            if small:
                conn.executemany(sql, small)
                small = []
            digest, size, data = row
            found = conn.execute(
                "INSERT INTO blobs (sha256, size, data) VALUES (?, ?, zeroblob(?)) "
                "ON CONFLICT DO NOTHING RETURNING rowid",
                (digest, size, size),
            ).fetchone()
            if found is None:  # stored already (the same digest: the same bytes)
                continue
            view = memoryview(data)
            with conn.blobopen("blobs", "data", found[0]) as target:
                for at in range(0, size, _BLOB_CHUNK):
                    target.write(view[at : at + _BLOB_CHUNK])
        if small:
            conn.executemany(sql, small)

    # ------------------------------------------------------------------ pre-signed appends

    def append_signed(
        self, entries: Sequence[tuple[bytes, bytes]], blobs: Mapping[str, bytes] | None = None
    ) -> tuple[list[Event], bool]:
        """Append envelopes their actors signed elsewhere (the hook of ``ledger serve``).

        ``entries`` are (canonical envelope bytes, Ed25519 signature) pairs with consecutive
        seqs; ``blobs`` maps the hex SHA-256 of each blob sent with them to its bytes. In one
        write transaction: each envelope must be canonical v1, continue the head (``seq`` is
        the log's size, ``prev`` its last leaf hash), be signed by its actor's registered key
        that is valid at that seq and whose role may append the kind, and reference only blobs
        sent or already stored; on PostgreSQL, and on SQLite behind ``ledger serve``
        (:attr:`trial_guard`), the trial rules apply (``ledger/_guard.py``).
        All of the batch is appended or none. A batch already stored byte for byte (a retried
        request) is answered with the stored events and ``True`` (idempotent); otherwise
        returns the new events and ``False``.

        Raises:
            FormatError: a malformed or non-canonical envelope, a blob whose bytes do not
                hash to its name, a reference to a blob neither sent nor stored.
            AuthorizationError: an unregistered or revoked key, a role that may not append the
                kind, a signature that does not verify.
            ConflictError: the batch does not continue the head (another writer was first).
            RefusedError: a trial rule (:attr:`trial_guard`).
        """
        return self.append_prepared(self.prepare_signed(entries, blobs))

    def prepare_signed(
        self, entries: Sequence[tuple[bytes, bytes]], blobs: Mapping[str, bytes] | None = None
    ) -> PreparedBatch:
        """The checks of :meth:`append_signed` that need no write lock: parse, hash, verify.

        Raises :class:`FormatError` for a malformed envelope or blob; signatures that do not
        verify are refused by :meth:`append_prepared`, which checks the keys again under the
        lock. ``ledger serve`` prepares a batch before it waits for a study's write lock.
        """
        from ledger._envelope import parse_envelope

        if not entries:
            return PreparedBatch([], {}, set())
        parsed: list[tuple[Any, bytes]] = []
        for i, (data, signature) in enumerate(entries):
            try:
                env = parse_envelope(data)
            except FormatError as exc:
                raise FormatError(f"entry {i}: {exc}") from exc
            if parsed and env.seq != parsed[0][0].seq + i:
                raise FormatError(
                    f"entry {i}: seq {env.seq} does not follow seq {parsed[-1][0].seq} "
                    "(a batch holds consecutive envelopes)"
                )
            parsed.append((env, bytes(signature)))
        sent: dict[str, bytes] = {}
        for digest, value in (blobs or {}).items():
            actual = hashlib.sha256(value).hexdigest()
            if actual != digest:
                raise FormatError(f"blob {digest}: its bytes hash to {actual}")
            sent[digest] = bytes(value)
        # Signatures are checked before the write lock against the keys registered now, so
        # several service processes verify in parallel and the sequenced transaction only
        # checks that each key is still what it was (a key added in this batch: checked there).
        # An actor id names its key (the id hashes the name and the public key), so a vkey
        # seen once stays right; only an actor not seen yet sends us to the keys table.
        vkeys: dict[str, str] = self.__dict__.setdefault("_signed_vkeys", {})
        if any(env.actor not in vkeys for env, _ in parsed):
            with self._errors():
                vkeys.update((r.actor, r.vkey) for r in self.keys())
        verified: set[tuple[int, str]] = set()
        for i, (env, signature) in enumerate(parsed):
            vkey = vkeys.get(env.actor)
            if vkey is not None and VerifierKey.parse(vkey).verify_strict(env.data, signature):
                verified.add((i, vkey))
        return PreparedBatch(parsed, sent, verified)

    def append_prepared(self, batch: PreparedBatch) -> tuple[list[Event], bool]:
        """Append a :meth:`prepare_signed` batch in one write transaction (or a savepoint).

        The rest of :meth:`append_signed`: position, keys and roles, blobs, trial rules.
        """
        if not batch.parsed:
            return [], False
        with self._errors(), self._write():
            return self._append_signed_locked(batch.parsed, batch.sent, batch.verified)

    def _append_signed_locked(
        self,
        parsed: Sequence[tuple[Any, bytes]],
        sent: dict[str, bytes],
        verified: set[tuple[int, str]],
    ) -> tuple[list[Event], bool]:
        from ledger._errors import ConflictError

        conn = self._conn
        head = self._load_head_at_once()
        first = parsed[0][0].seq
        if parsed[-1][0].seq < head.size:  # wholly inside the log: a retried request?
            stored = self._stored_range(first, parsed[-1][0].seq + 1)
            if len(stored) == len(parsed) and all(
                e.envelope == env.data and e.signature == sig
                for e, (env, sig) in zip(stored, parsed, strict=True)
            ):
                return stored, True
        if first != head.size or parsed[0][0].prev != (head.last.hex() if head.size else ZERO_HASH):
            raise ConflictError(
                f"{self.path}: seq {first} does not continue the log (size {head.size}, last "
                f"leaf {head.last.hex() or 'none'}): another writer appended first; re-sign "
                "against the new head",
                size=head.size,
                last=head.last.hex(),
            )
        keys = _KeyView(conn)
        event_rows: list[tuple[Any, ...]] = []
        node_rows: list[tuple[int, int, bytes]] = []
        blob_rows: dict[str, tuple[Any, ...]] = {}
        events: list[Event] = []
        for i, (env, signature) in enumerate(parsed):
            seq, kind, body = env.seq, env.kind, dict(env.body)
            prev = head.last.hex() if seq else ZERO_HASH
            if env.prev != prev:
                raise FormatError(
                    f"seq {seq}: prev {env.prev} is not the leaf hash of seq {seq - 1}"
                )
            if seq == 0:
                if kind != "ledger.genesis" or set(body) != {"origin", "vkey"}:
                    raise FormatError("seq 0 must be ledger.genesis with body {origin, vkey}")
                if body["origin"] != self.origin:
                    raise FormatError(f"genesis origin {body['origin']!r} is not {self.origin!r}")
                verifier = VerifierKey.parse(str(body["vkey"]))
                if verifier.actor != env.actor:
                    raise AuthorizationError(f"seq 0: actor {env.actor} is not the genesis key")
                keys.register(verifier, "owner", 0)
            else:
                if kind == "ledger.genesis":
                    raise FormatError("ledger.genesis can only be the first event of a new ledger")
                record = keys.get(env.actor)
                if record is None:
                    raise AuthorizationError(
                        f"seq {seq}: key {env.actor} is not registered in this ledger; an owner "
                        "must add it first (ledger key add)"
                    )
                verifier = VerifierKey.parse(record.vkey)
                keys.authorize(verifier, kind, seq)
                if kind in ("key.added", "key.revoked"):
                    self._apply_key_event(keys, kind, body, seq)
                    if body != env.body:
                        raise FormatError(f"seq {seq}: key.added vkey is not in its canonical form")
            if (i, verifier.vkey) not in verified and not verifier.verify_strict(
                env.data, signature
            ):
                raise AuthorizationError(
                    f"seq {seq}: the signature does not verify with {env.actor}'s registered key"
                )
            withheld = self._sealing().names(kind, body) if env.blobs else frozenset()
            for name, digest in env.blobs.items():
                if name in withheld and digest in sent and not is_sealed(sent[digest]):
                    raise FormatError(
                        f"seq {seq}: blob {name!r} of {kind} is withheld by the locked privacy "
                        "policy, so it must be sent sealed (docs/privacy.md); nothing appended"
                    )
                if digest in sent:
                    data = sent[digest]
                    blob_rows.setdefault(digest, (digest, len(data), data))
                elif (
                    digest not in blob_rows
                    and not conn.execute(
                        "SELECT 1 FROM blobs WHERE sha256 = ?", (digest,)
                    ).fetchone()
                ):
                    raise FormatError(
                        f"seq {seq}: blob {name!r} refers to {digest}, which was neither sent "
                        "nor stored"
                    )
            leaf = hashlib.sha256(b"\x00" + env.data).digest()
            event_rows.append((seq, kind, env.actor, env.time, env.data, signature, leaf))
            head.push(leaf, node_rows)
            events.append(
                Event(
                    seq,
                    env.time,
                    kind,
                    env.actor,
                    prev,
                    dict(env.body),
                    dict(env.blobs),
                    env.data,
                    signature,
                    leaf,
                )
            )
        self._insert(
            events, [env for env, _ in parsed], blob_rows, event_rows, node_rows, head, keys
        )
        return events, False

    def _stored_range(self, start: int, end: int) -> list[Event]:
        """The stored events of seqs ``start`` to ``end - 1`` in one query (a retry's check).

        Only a batch whose every seq is inside the log can be a retried request, so a batch
        that lost a race (its last seq at or past the head) reads nothing here.
        """
        rows = self._conn.execute(
            "SELECT envelope, signature, leaf_hash FROM events WHERE seq >= ? AND seq < ? "
            "ORDER BY seq",
            (start, end),
        ).fetchall()
        return [Event._from_row(row) for row in rows]

    def _load_head_at_once(self) -> _Head:
        """:meth:`_load_head` with the frontier read in one query when the cache missed.

        Several service processes append in turn, so each one's cached head is usually stale;
        one query instead of one per subtree keeps that cheap on PostgreSQL.
        """
        row = self._conn.execute(
            "SELECT seq, leaf_hash FROM events ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return _Head(0, b"", [])
        size, last = int(row[0]) + 1, bytes(row[1])
        cached = self._head_cache
        if cached is not None and cached.size == size and cached.last == last:
            return _Head(size, last, list(cached.frontier))
        parts = decompose(0, size)
        wanted = [(lvl, idx) for lvl, idx in parts if lvl > 0]
        found: dict[tuple[int, int], bytes] = {}
        if wanted:
            where = " OR ".join(["(level = ? AND idx = ?)"] * len(wanted))
            args = [v for pair in wanted for v in pair]
            for lvl, idx, h in self._conn.execute(
                f"SELECT level, idx, hash FROM tree WHERE {where}", args
            ).fetchall():
                found[(int(lvl), int(idx))] = bytes(h)
        frontier = []
        for lvl, idx in parts:
            h = last if lvl == 0 else found.get((lvl, idx))
            if h is None:
                raise StoreError(f"{self.path}: Merkle node (level {lvl}, index {idx}) is missing")
            frontier.append((lvl, h))
        return _Head(size, last, frontier)

    def store_checkpoint(self, note: str, created: str | None = None) -> tuple[int, bool]:
        """Store a checkpoint signed elsewhere (the hook of ``ledger serve``); (id, replayed).

        The note must name this log's origin, a size within the log and that size's root, and
        every signature line must verify with a key registered here that is valid at the
        tree's last event. ``created`` is the signer's clock (``format_time``; default: this
        store's). The same note already stored is answered with its id (idempotent).

        Raises:
            NoteError: a malformed note, another origin, a line by an unknown key or a bad one.
            ProofError: a size outside the log, or a root that is not the log's at that size.
            AuthorizationError: a signer revoked before the tree's last event.
        """
        from ledger._envelope import check_time
        from ledger._note import parse_checkpoint

        cp, parsed = parse_checkpoint(note)
        if cp.origin != self.origin:
            raise NoteError(f"checkpoint origin {cp.origin!r} is not this log's {self.origin!r}")
        if created is not None:
            check_time(created)
        with self._errors(), self._write():
            row = self._conn.execute(
                "SELECT id FROM checkpoints WHERE size = ? AND note = ?", (cp.size, note)
            ).fetchone()
            if row is not None:
                return int(row[0]), True
            n = self._check_size(cp.size)
            if n == 0:
                raise NoteError(f"{self.path}: cannot store a checkpoint of an empty log")
            if self._range_hash(0, n) != cp.root:
                raise ProofError(f"checkpoint root is not the log's root at size {n}")
            view = _KeyView(self._conn)
            known = []
            for sig in parsed.signatures:
                actor = f"{sig.name}+{sig.key_id.hex()}"
                record = view.get(actor)
                if record is None:
                    raise NoteError(f"checkpoint signed by {actor}, which is not registered here")
                if not record.valid_for(n - 1):
                    raise AuthorizationError(f"key {actor} is not valid at tree size {n} (revoked)")
                known.append(VerifierKey.parse(record.vkey))
            open_checkpoint(note, known)  # every line verifies (a bad one raises)
            self._conn.execute(
                "INSERT INTO checkpoints (size, root, note, created) VALUES (?, ?, ?, ?)",
                (n, cp.root, note, created or format_time(self._clock())),
            )
            row = self._conn.execute(
                "SELECT id FROM checkpoints WHERE size = ? AND note = ?", (n, note)
            ).fetchone()
        return int(row[0]), False

    def head(self) -> tuple[int, bytes, list[tuple[int, bytes]]]:
        """The log's size, last leaf hash (empty when empty) and Merkle frontier (largest first).

        The frontier is the hashes of the complete subtrees the tree of ``size`` leaves is
        made of: with it a writer computes the root after its own appends (``docs/service.md``).
        """
        with self._errors():
            head = self._load_head()
        return head.size, head.last, list(head.frontier)

    def _apply_key_event(self, keys: _KeyView, kind: str, body: dict[str, Any], seq: int) -> None:
        if kind == "key.added":
            if set(body) != {"vkey", "role"}:
                raise FormatError("key.added body must be exactly {vkey, role}")
            role = body["role"]
            if role not in ROLES:
                raise FormatError(f"key.added: role {role!r} is not one of {', '.join(ROLES)}")
            if not isinstance(body["vkey"], str):
                raise FormatError("key.added: vkey must be a string")
            verifier = VerifierKey.parse(body["vkey"])
            body["vkey"] = verifier.vkey
            keys.register(verifier, role, seq)
        elif kind == "key.revoked":
            if set(body) != {"actor", "reason"} or not all(
                isinstance(v, str) for v in body.values()
            ):
                raise FormatError("key.revoked body must be exactly {actor, reason} (strings)")
            keys.revoke(body["actor"], seq)

    def _sealing(self) -> SealPolicy:
        """The privacy policy of the last ``protocol.locked`` (empty before the lock)."""
        if self._seal_policy is None:
            row = self._conn.execute(
                "SELECT envelope FROM events WHERE kind = 'protocol.locked' "
                "ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            if row is None:
                return SealPolicy()
            self._seal_policy = SealPolicy.from_protocol(json.loads(bytes(row[0]))["body"])
        return self._seal_policy

    def _store_blobs(
        self, blobs: Mapping[str, BlobValue], seq: int, pending: dict[str, tuple[Any, ...]]
    ) -> dict[str, str]:
        """Blob references of one event; new blobs join ``pending`` (inserted with the batch)."""
        refs: dict[str, str] = {}
        for name, value in blobs.items():
            if not isinstance(name, str) or not BLOB_NAME_RE.match(name):
                raise FormatError(
                    f"blob name {name!r} of event {seq} is invalid (letters, digits, '.', '_', '-')"
                )
            if isinstance(value, str):
                digest = value.lower()
                if (
                    digest not in pending
                    and not self._conn.execute(
                        "SELECT 1 FROM blobs WHERE sha256 = ?", (digest,)
                    ).fetchone()
                ):
                    raise FormatError(
                        f"blob {name!r} of event {seq} refers to {digest}, which is not stored"
                    )
            elif isinstance(value, bytes | bytearray | memoryview):
                data = bytes(value)
                digest = hashlib.sha256(data).hexdigest()
                pending.setdefault(digest, (digest, len(data), data))
            else:
                raise FormatError(f"blob {name!r} must be bytes or a stored blob's SHA-256")
            refs[name] = digest
        return refs

    # ------------------------------------------------------------------ reading

    @property
    def size(self) -> int:
        """Number of events in the log."""
        with self._errors():
            row = self._conn.execute("SELECT MAX(seq) FROM events").fetchone()
        return 0 if row[0] is None else int(row[0]) + 1

    def get(self, seq: int) -> Event:
        """Return event ``seq``. Raises :class:`LedgerError` when there is none."""
        with self._errors():
            row = self._conn.execute(
                "SELECT envelope, signature, leaf_hash FROM events WHERE seq = ?", (seq,)
            ).fetchone()
        if row is None:
            raise LedgerError(f"{self.path}: no event with seq {seq} (log size {self.size})")
        return Event._from_row(row)

    def events(
        self, kind: str | None = None, *, start: int = 0, end: int | None = None
    ) -> Iterator[Event]:
        """Iterate events in seq order, optionally of one kind and within ``[start, end)``."""
        sql = "SELECT envelope, signature, leaf_hash FROM events WHERE seq >= ?"
        args: list[Any] = [start]
        if end is not None:
            sql += " AND seq < ?"
            args.append(end)
        if kind is not None:
            sql += " AND kind = ?"
            args.append(kind)
        sql += " ORDER BY seq"
        with self._errors():
            pg = self.engine == "postgresql"
            rows = self._conn.rows(sql, args) if pg else self._conn.execute(sql, args)
            for row in rows:
                yield Event._from_row(row)

    def blob(self, sha256: str) -> bytes:
        """Return a blob's content by its hex SHA-256 (a sealed blob's content, unwrapped)."""
        return open_blob(self.stored_blob(sha256))

    def stored_blob(self, sha256: str) -> bytes:
        """Return a blob's stored bytes (those its address hashes: a sealed blob whole)."""
        with self._errors():
            row = self._conn.execute(
                "SELECT data FROM blobs WHERE sha256 = ?", (sha256.lower(),)
            ).fetchone()
        if row is None:
            raise LedgerError(f"{self.path}: no blob {sha256}")
        return bytes(row[0])

    def stored_blob_chunks(self, sha256: str, chunk: int = BLOB_CHUNK) -> Iterator[bytes]:
        """A blob's stored bytes (as :meth:`stored_blob` gives them) in pieces of ``chunk`` bytes.

        For copying a large blob (an archive's ``items.csv`` of a hundred thousand trials is
        hundreds of megabytes) without holding it whole: on SQLite the pieces are read with
        incremental blob I/O, so neither Python nor SQLite holds more than one piece. The other
        engines give the blob in one piece. Raises :class:`LedgerError` when there is none.
        """
        if chunk < MIN_BLOB_CHUNK:
            raise ValueError(f"blob pieces must be at least {MIN_BLOB_CHUNK} bytes, not {chunk}")
        if self.engine != "sqlite":
            yield self.stored_blob(sha256)
            return
        with self._errors():  # a small blob's bytes come with its row (one query, as before)
            row = self._conn.execute(
                "SELECT rowid, CASE WHEN size <= ? THEN data END FROM blobs WHERE sha256 = ?",
                (chunk, sha256.lower()),
            ).fetchone()
        if row is None:
            raise LedgerError(f"{self.path}: no blob {sha256}")
        if row[1] is not None:
            yield bytes(row[1])
            return
        with self._errors(), self._conn.blobopen("blobs", "data", row[0], readonly=True) as blob:
            while piece := blob.read(chunk):
                yield piece

    def blob_chunks(self, sha256: str, chunk: int = BLOB_CHUNK) -> Iterator[bytes]:
        """A blob's content (as :meth:`blob` gives it) in pieces of at most ``chunk`` bytes.

        :meth:`stored_blob_chunks` with a sealed blob's header left out.
        """
        # the first piece holds a sealed blob's whole header (or the whole blob): chunk >= 4096
        pieces = self.stored_blob_chunks(sha256, chunk)
        first = open_blob(next(pieces, b""))
        if first:
            yield first
        yield from pieces

    def read_blobs(self, digests: Iterable[str]) -> dict[str, bytes]:
        """Several blobs' contents by hex SHA-256, as :meth:`blob` gives each, in few queries.

        Returns ``{digest: content}`` (digests in lower case). One query per
        :data:`BLOBS_PER_QUERY` distinct digests instead of one per blob, so a command that
        reads many (``ledger score``: a batch of responses) does not pay a statement, or on
        PostgreSQL a round trip, for each. Raises :class:`LedgerError` naming the first digest
        that is not stored.
        """
        wanted = list(dict.fromkeys(d.lower() for d in digests))
        found: dict[str, bytes] = {}
        pg = self.engine == "postgresql"
        with self._errors():
            for start in range(0, len(wanted), BLOBS_PER_QUERY):
                part = wanted[start : start + BLOBS_PER_QUERY]
                args: list[Any] = [part] if pg else part
                where = "= ANY(?)" if pg else f"IN ({','.join('?' * len(part))})"
                sql = f"SELECT sha256, data FROM blobs WHERE sha256 {where}"
                for digest, data in self._conn.execute(sql, args):
                    found[digest] = open_blob(bytes(data))
        for digest in wanted:
            if digest not in found:
                raise LedgerError(f"{self.path}: no blob {digest}")
        return found

    def has_blob(self, sha256: str) -> bool:
        """True when a blob with this SHA-256 is stored."""
        with self._errors():
            row = self._conn.execute(
                "SELECT 1 FROM blobs WHERE sha256 = ?", (sha256.lower(),)
            ).fetchone()
        return row is not None

    def keys(self) -> list[KeyRecord]:
        """Every key ever registered, in registration order."""
        with self._errors():
            rows = self._conn.execute(
                "SELECT actor, name, vkey, role, added_seq, revoked_seq FROM keys "
                "ORDER BY added_seq"
            ).fetchall()
        return [KeyRecord(*r) for r in rows]

    # ------------------------------------------------------------------ Merkle tree

    def _node(self, level: int, index: int) -> bytes:
        if level == 0:
            row = self._conn.execute(
                "SELECT leaf_hash FROM events WHERE seq = ?", (index,)
            ).fetchone()
        else:
            row = self._conn.execute(
                "SELECT hash FROM tree WHERE level = ? AND idx = ?", (level, index)
            ).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: Merkle node (level {level}, index {index}) is missing")
        return bytes(row[0])

    def _range_hash(self, start: int, end: int) -> bytes:
        return fold([self._node(lvl, idx) for lvl, idx in decompose(start, end)])

    def _check_size(self, size: int | None) -> int:
        current = self.size
        if size is None:
            return current
        if not 0 <= size <= current:
            raise ProofError(f"tree size {size} is outside the log (size {current})")
        return size

    def root(self, size: int | None = None) -> bytes:
        """Merkle root of the first ``size`` events (default: the whole log)."""
        return self._root(self._check_size(size))

    def _root(self, n: int) -> bytes:
        if n == 0:
            return EMPTY_ROOT
        with self._errors():
            return self._range_hash(0, n)

    def inclusion_proof(self, index: int, size: int | None = None) -> InclusionProof:
        """RFC 9162 inclusion proof of event ``index`` in the tree of ``size`` (default: now)."""
        n = self._check_size(size)
        with self._errors():
            path = inclusion_proof(index, n, self._range_hash)
            return InclusionProof(index, n, self._node(0, index), self._root(n), tuple(path))

    def consistency_proof(self, old: int, new: int | None = None) -> ConsistencyProof:
        """RFC 9162 consistency proof from the tree of ``old`` to ``new`` events (default: now)."""
        n = self._check_size(new)
        if not 0 < old <= n:
            raise ProofError(f"consistency proof needs 0 < old <= new, got old={old}, new={n}")
        with self._errors():
            path = consistency_proof(old, n, self._range_hash)
            return ConsistencyProof(old, n, self._root(old), self._root(n), tuple(path))

    # ------------------------------------------------------------------ checkpoints

    def checkpoint(self, size: int | None = None) -> Checkpoint:
        """The unsigned checkpoint of the first ``size`` events (default: the whole log)."""
        n = self._check_size(size)
        return Checkpoint(self.origin, n, self._root(n))

    def sign_checkpoint(
        self, keys: SigningKey | Sequence[SigningKey], size: int | None = None
    ) -> str:
        """Sign a checkpoint with registered keys, store it, and return the signed note.

        Every signing key must be registered in this ledger and valid for the tree's last event.
        """
        signers = [keys] if isinstance(keys, SigningKey) else list(keys)
        if not signers:
            raise NoteError("a checkpoint needs at least one signing key")
        with self._errors(), self._write():
            n = self._check_size(size)
            if n == 0:
                raise NoteError(f"{self.path}: cannot sign a checkpoint of an empty log")
            view = _KeyView(self._conn)
            for signer in signers:
                record = view.get(signer.actor)
                if record is None or record.vkey != signer.vkey:
                    raise AuthorizationError(f"key {signer.actor} is not registered in {self.path}")
                if not record.valid_for(n - 1):
                    raise AuthorizationError(
                        f"key {signer.actor} is not valid at tree size {n} (revoked)"
                    )
            cp = Checkpoint(self.origin, n, self._range_hash(0, n))
            note = cp.sign(signers)
            # One stored checkpoint per tree size: a second signing of the same size (two
            # workers closing sessions at once, a retry) adds its signature lines to it.
            row = self._conn.execute(
                "SELECT id, note FROM checkpoints WHERE size = ? ORDER BY id LIMIT 1", (n,)
            ).fetchone()
            if row is not None:
                have = str(row[1])
                lines = have.split("\n\n", 1)[1].splitlines(keepends=True)
                extra = [
                    x for x in note.split("\n\n", 1)[1].splitlines(keepends=True) if x not in lines
                ]
                if extra:
                    have += "".join(extra)
                    self._conn.execute(
                        "UPDATE checkpoints SET note = ? WHERE id = ?", (have, row[0])
                    )
                return have
            self._conn.execute(
                "INSERT INTO checkpoints (size, root, note, created) VALUES (?, ?, ?, ?)",
                (n, cp.root, note, format_time(self._clock())),
            )
        return note

    def add_cosignatures(self, checkpoint_id: int, lines: Sequence[str]) -> str:
        """Append witness cosignature lines to the stored checkpoint ``checkpoint_id``.

        The stored note becomes the note as published: the log's signature lines, then each
        cosignature line (``docs/witness.md`` §8) not already present. Returns the new note.
        Lines must be note signature lines (``— <name> <base64>\\n``); the caller verifies them.
        """
        for line in lines:
            if not line.startswith("\u2014 ") or not line.endswith("\n") or line.count("\n") != 1:
                raise NoteError(f"{line!r} is not one note signature line")
        with self._errors(), self._write():
            row = self._conn.execute(
                "SELECT note FROM checkpoints WHERE id = ?", (checkpoint_id,)
            ).fetchone()
            if row is None:
                raise StoreError(f"{self.path}: no checkpoint #{checkpoint_id}")
            note = str(row[0])
            have = set(note.split("\n\n", 1)[1].splitlines(keepends=True))
            note += "".join(line for line in dict.fromkeys(lines) if line not in have)
            self._conn.execute(
                "UPDATE checkpoints SET note = ? WHERE id = ?", (note, checkpoint_id)
            )
        return note

    def checkpoints(self) -> list[StoredCheckpoint]:
        """Every stored checkpoint, oldest first."""
        with self._errors():
            rows = self._conn.execute(
                "SELECT id, size, root, note, created FROM checkpoints ORDER BY id"
            ).fetchall()
        return [StoredCheckpoint(r[0], r[1], bytes(r[2]), r[3], r[4]) for r in rows]

    def check_integrity(self) -> None:
        """Refuse a damaged file before anything more is appended to it (``ledger run``).

        SQLite's ``PRAGMA quick_check`` (every page and index readable and well formed: a
        zeroed or torn page is found) and the log's own shape: no stored checkpoint may reach
        past the last event (a ledger that lost its last events, restored from an older copy
        or truncated, would otherwise be extended as if nothing were missing). Raises
        :class:`StoreError` naming the file and what is wrong.
        """
        with self._errors():
            found = ["ok"]  # PostgreSQL checks its own pages (data checksums, amcheck)
            try:
                if self.engine == "sqlite":
                    found = [r[0] for r in self._conn.execute("PRAGMA quick_check(5)").fetchall()]
            except sqlite3.DatabaseError as exc:  # a page so damaged the check cannot go on
                found = [str(exc)]
            if found != ["ok"]:
                raise StoreError(
                    f"{self.path}: the file is damaged (SQLite quick_check: {'; '.join(found)}); "
                    "nothing was appended: restore the ledger from a backup or its exported "
                    "archive"
                )
            top = self._conn.execute("SELECT MAX(size) FROM checkpoints").fetchone()[0]
        size = self.size
        if top is not None and top > size:
            raise StoreError(
                f"{self.path}: a stored checkpoint has tree size {top}, but the log has {size} "
                f"events: the last {top - size} event(s) are missing (a truncated or older copy "
                "of the ledger); nothing was appended"
            )

    def check_published(self, note: str) -> ConsistencyProof:
        """Check that this log extends a published checkpoint; return the consistency proof.

        The checkpoint must be signed by a key registered here, name this log's origin, and be
        consistent with the current tree.
        """
        cp, _ = open_checkpoint(note, [VerifierKey.parse(k.vkey) for k in self.keys()])
        if cp.origin != self.origin:
            raise NoteError(f"checkpoint origin {cp.origin!r} is not this log's {self.origin!r}")
        size = self.size
        if cp.size > size:
            raise ProofError(
                f"log rolled back: checkpoint has size {cp.size} but the log has {size} events"
            )
        proof = self.consistency_proof(cp.size, size) if cp.size else None
        if proof is None or proof.old_root != cp.root or not proof.verify():
            raise ProofError(f"log is not consistent with the checkpoint of size {cp.size}")
        return proof


def _remote_engine() -> Any:
    """:class:`ledger._remote.RemoteLedger`, the engine behind an ``http(s)://`` location.

    It is a :class:`Ledger` subclass, so this module cannot import it by name (the import graph
    stays acyclic, ``tests/project/test_structure.py``): it is loaded by name when a remote location
    is opened, the way the CLI loads a package's commands (``ledger/cli.py``), and only then.
    """
    return importlib.import_module("ledger._remote").RemoteLedger


def _drop(where: Path | PostgresLocation) -> None:
    """Remove a ledger being created that failed: its file (with -wal, -shm) or its schema."""
    if isinstance(where, Path):
        for suffix in ("", "-wal", "-shm"):
            Path(str(where) + suffix).unlink(missing_ok=True)
        return
    with suppress(Exception):
        db = PgConnection(PostgresLocation(where.conninfo, "public"), readonly=False)
        try:
            db.raw.execute(f'DROP SCHEMA IF EXISTS "{where.schema}" CASCADE')
        finally:
            db.close()


class _KeyView:
    """The key registry inside a transaction, with a write-through cache."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._cache: dict[str, KeyRecord | None] = {}
        self._inserts: list[tuple[Any, ...]] = []

    def get(self, actor: str) -> KeyRecord | None:
        if actor not in self._cache:
            row = self._conn.execute(
                "SELECT actor, name, vkey, role, added_seq, revoked_seq FROM keys WHERE actor = ?",
                (actor,),
            ).fetchone()
            self._cache[actor] = KeyRecord(*row) if row else None
        return self._cache[actor]

    def authorize(self, key: SigningKey | VerifierKey, kind: str, seq: int) -> None:
        record = self.get(key.actor)
        if record is None or record.vkey != key.vkey:
            raise AuthorizationError(
                f"key {key.actor} is not registered in this ledger; an owner must add it first "
                "(ledger key add)"
            )
        if record.revoked_seq is not None:
            raise AuthorizationError(
                f"key {key.actor} was revoked at seq {record.revoked_seq}; it cannot append"
            )
        if not record.valid_for(seq):
            raise AuthorizationError(f"key {key.actor} is not valid for seq {seq}")
        if not role_may_append(record.role, kind):
            raise AuthorizationError(
                f"key {key.actor} has role {record.role!r}, which may not append {kind!r}"
            )

    def register(self, verifier: VerifierKey, role: str, seq: int) -> None:
        if self.get(verifier.actor) is not None:
            raise AuthorizationError(f"key {verifier.actor} is already registered")
        record = KeyRecord(verifier.actor, verifier.name, verifier.vkey, role, seq, None)
        self._cache[verifier.actor] = record
        self._inserts.append((record.actor, record.name, record.vkey, role, seq))

    def revoke(self, actor: str, seq: int) -> None:
        record = self.get(actor)
        if record is None:
            raise AuthorizationError(f"key {actor} is not registered; nothing to revoke")
        if record.revoked_seq is not None:
            raise AuthorizationError(f"key {actor} was already revoked at seq {record.revoked_seq}")
        self.flush()
        if record.role == "owner":
            owners = self._conn.execute(
                "SELECT COUNT(*) FROM keys WHERE role = 'owner' AND revoked_seq IS NULL"
            ).fetchone()[0]
            if owners <= 1:
                raise AuthorizationError(
                    f"key {actor} is the last active owner key; add another owner first"
                )
        self._conn.execute("UPDATE keys SET revoked_seq = ? WHERE actor = ?", (seq, actor))
        self._cache[actor] = KeyRecord(
            record.actor, record.name, record.vkey, record.role, record.added_seq, seq
        )

    def flush(self) -> None:
        if self._inserts:
            self._conn.executemany(
                "INSERT INTO keys (actor, name, vkey, role, added_seq) VALUES (?, ?, ?, ?, ?)",
                self._inserts,
            )
            self._inserts = []
