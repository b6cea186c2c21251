"""The PostgreSQL engine of the ledger store (``docs/storage.md``).

A ledger on PostgreSQL lives in one schema of one database: the same tables as the SQLite
engine (``events``, ``blobs``, ``tree``, ``checkpoints``, ``keys``, ``meta``) plus ``coord``,
one row that every write transaction locks first (``SELECT ... FOR UPDATE``), so appends from
any number of processes on any number of machines are sequenced inside the database, one
transaction at a time, and the chain stays gapless (the single-row coordinator of Tessera's
AWS driver). ``leases`` and ``workers`` hold what concurrent ``ledger run`` workers share
(``ledger/_workers.py``); the ``pj_*`` tables are a projection of the trial events that the
same transaction checks each append against (``ledger/_guard.py``).

A store is named by a libpq URL plus this project's own ``schema`` query parameter::

    postgresql://ledger@db.example.org:5432/studies?schema=tumbling_e

The password never appears in the URL (it would be written into the study folder): libpq finds
it in ``PGPASSWORD``, ``~/.pgpass`` or a service file, as every PostgreSQL tool does.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ledger._errors import NotALedgerError, SchemaVersionError, StoreError

if TYPE_CHECKING:
    import psycopg

URL_SCHEMES = ("postgresql", "postgres")
SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
CONNECT_TIMEOUT_SECONDS = 10
RECONNECT_SECONDS = 30.0
"""How long a connection lost between transactions is retried before the command gives up."""

PASSWORD_ADVICE = (
    "a password is never written into the study folder or the ledger: give it through "
    "PGPASSWORD, ~/.pgpass or a pg_service.conf service, as for psql"
)


def is_url(text: str) -> bool:
    """True when ``text`` names a PostgreSQL store (``postgresql://`` or ``postgres://``)."""
    return text.split("://", 1)[0].lower() in URL_SCHEMES if "://" in text else False


def schema_for(study_id: str) -> str:
    """A schema name derived from a study id: lower case, ``_`` for anything else."""
    name = re.sub(r"[^a-z0-9_]", "_", study_id.lower())[:63] or "ledger"
    return name if not name[0].isdigit() else ("s_" + name)[:63]


@dataclass(frozen=True)
class PostgresLocation:
    """Where a ledger lives on PostgreSQL: a libpq URL (without a password) and a schema."""

    conninfo: str
    schema: str

    @classmethod
    def parse(cls, text: str, *, default_schema: str | None = None) -> PostgresLocation:
        """Parse ``postgresql://...?schema=NAME``; refuse a password or a bad schema name.

        Raises:
            StoreError: naming what is wrong with the URL and what to do.
        """
        shown = text.strip()
        if not is_url(shown):
            raise StoreError(
                f"{shown!r} is not a PostgreSQL URL (postgresql://[user@]host[:port]/database"
                "?schema=NAME); a SQLite ledger is a file path, not a URL"
            )
        parts = urlsplit(shown)
        if parts.password is not None:
            raise StoreError(f"{_redact(shown)}: the URL holds a password; {PASSWORD_ADVICE}")
        query = parse_qsl(parts.query, keep_blank_values=True)
        if any(k == "password" for k, _ in query):
            raise StoreError(f"{_redact(shown)}: the URL holds a password; {PASSWORD_ADVICE}")
        schemas = [v for k, v in query if k == "schema"]
        rest = [(k, v) for k, v in query if k != "schema"]
        if len(schemas) > 1:
            raise StoreError(f"{shown}: the URL names 'schema' {len(schemas)} times")
        schema = schemas[0] if schemas else default_schema
        if schema is None:
            raise StoreError(
                f"{shown}: the URL names no schema; add ?schema=NAME (the study's ledger "
                "schema in that database, as `ledger new --store` wrote it into ledger.store)"
            )
        if not SCHEMA_RE.match(schema):
            raise StoreError(
                f"{shown}: schema {schema!r} must be 1-63 lower-case letters, digits or '_', "
                "not starting with a digit"
            )
        if not parts.path.strip("/"):
            raise StoreError(
                f"{shown}: the URL names no database (postgresql://host/DATABASE?schema=NAME)"
            )
        conninfo = urlunsplit(
            ("postgresql", parts.netloc, parts.path, urlencode(rest), parts.fragment)
        )
        return cls(conninfo, schema)

    def __str__(self) -> str:
        sep = "&" if "?" in self.conninfo else "?"
        return f"{self.conninfo}{sep}schema={self.schema}"

    def exists(self) -> bool:
        """True when the schema holds a ledger (``meta`` table); connects to find out.

        With :meth:`is_file`, code written for a SQLite ledger file (``path.exists()``) asks a
        PostgreSQL store the same question.
        """
        db = PgConnection(self, readonly=True)
        try:
            row = db.raw.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_schema = %s "
                "AND table_name = 'meta'",
                (self.schema,),
            ).fetchone()
        finally:
            db.close()
        return row is not None

    def is_file(self) -> bool:
        """The same as :meth:`exists` (a store is where a ledger file would be)."""
        return self.exists()


def _redact(text: str) -> str:
    parts = urlsplit(text)
    if parts.password is None:
        return text
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def connect_advice(where: PostgresLocation, exc: BaseException) -> str:
    """One line naming the store, what went wrong connecting, and what to do."""
    text = str(exc)
    low = text.lower()
    if "password authentication failed" in low or "no password supplied" in low:
        what = "the server refused the password"
        advice = (
            "check the user in the URL, and give its password through PGPASSWORD, ~/.pgpass "
            "or a pg_service.conf service (never in the URL)"
        )
    elif "does not exist" in low and "database" in low:
        what = _first_line(exc)
        advice = "create the database first (createdb, or CREATE DATABASE as its owner)"
    elif "role" in low and "does not exist" in low:
        what = _first_line(exc)
        advice = "name an existing user in the URL (postgresql://USER@host/...)"
    elif "connection refused" in low or "could not connect" in low or "timeout" in low:
        what = "no PostgreSQL server answers there"
        advice = "check the host and port, and that the server is running"
    elif "could not translate host name" in low or "name or service not known" in low:
        what = "the host name does not resolve"
        advice = "check the host in the URL"
    else:
        what = _first_line(exc)
        advice = "check the URL and the server"
    return f"{where}: cannot connect ({what}); {advice}"


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - psycopg is a dependency
        raise StoreError(
            f"the PostgreSQL engine needs psycopg 3 ({exc}); pip install 'psycopg[binary]'"
        ) from exc
    return psycopg


_PLACEHOLDER = re.compile(r"\?")
_PLAIN_INSERT = re.compile(
    r"^INSERT INTO (\w+) \(([\w, ]+)\) VALUES \((?:\?, )*\?\)( ON CONFLICT DO NOTHING)?$"
)


class PgConnection:
    """A psycopg connection that speaks the SQLite engine's SQL (``?`` placeholders).

    Between transactions a lost connection is opened again (for up to
    :data:`RECONNECT_SECONDS`); inside one, the error is raised and the transaction is lost
    whole, as the server rolls it back.
    """

    def __init__(self, where: PostgresLocation, *, readonly: bool) -> None:
        """Connect to ``where``; raise :class:`StoreError` with advice when that fails."""
        self.where = where
        self.readonly = readonly
        self._sql: dict[str, str] = {}
        self.in_transaction = False
        self._conn: psycopg.Connection[Any] = self._connect()

    def _connect(self) -> psycopg.Connection[Any]:
        pg = _psycopg()
        try:
            conn = pg.connect(
                self.where.conninfo,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                application_name="prompt-ledger",
            )
        except pg.Error as exc:
            raise StoreError(connect_advice(self.where, exc)) from exc
        try:
            conn.execute(f'SET search_path TO "{self.where.schema}"')
            if self.readonly:
                conn.execute("SET default_transaction_read_only = on")
        except pg.Error as exc:
            conn.close()
            raise StoreError(f"{self.where}: cannot set up the session ({exc})") from exc
        return cast("psycopg.Connection[Any]", conn)

    @property
    def raw(self) -> psycopg.Connection[Any]:
        """The psycopg connection (reconnected first if it was lost between transactions)."""
        if self._conn.closed and not self.in_transaction:
            self._reconnect()
        return self._conn

    def _reconnect(self) -> None:
        deadline = time.monotonic() + RECONNECT_SECONDS
        while True:
            try:
                self._conn = self._connect()
                return
            except StoreError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _translate(self, sql: str) -> str:
        out = self._sql.get(sql)
        if out is None:
            out = self._sql[sql] = _PLACEHOLDER.sub("%s", sql)
        return out

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        """Run one statement; return its cursor (``fetchone``, ``fetchall``, iteration)."""
        psycopg = _psycopg()
        head = sql.lstrip()[:8].upper()
        if head.startswith("BEGIN"):
            self._begin()
            return None
        if head.startswith("COMMIT") or (head.startswith("ROLLBACK") and " TO " not in sql):
            return self._end(sql)
        try:
            return self.raw.execute(self._translate(sql), tuple(args) if args else None)
        except psycopg.OperationalError:
            if self.in_transaction or not self._conn.closed:
                raise
            self._reconnect()  # lost between transactions: one more try on a new connection
            return self._conn.execute(self._translate(sql), tuple(args) if args else None)

    def _begin(self) -> None:
        conn = self.raw
        conn.execute("BEGIN")
        self.in_transaction = True
        if not self.readonly:
            # the sequencer: every writer of this ledger waits here for the one before it
            conn.execute("SELECT size FROM coord WHERE id = 1 FOR UPDATE")

    def _end(self, sql: str) -> None:
        try:
            self._conn.execute(sql)
        finally:
            self.in_transaction = False

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one ``INSERT`` for each row: as one ``COPY`` when it is a plain insert.

        ``INSERT INTO t (cols) VALUES (?, ...)`` becomes ``COPY t (cols) FROM STDIN`` (a batch of
        events, tree nodes or blobs in one round trip); with ``ON CONFLICT DO NOTHING`` the rows
        whose first column is already stored are left out first (appends hold the coordinator
        row, so nobody else inserts meanwhile). Any other statement is pipelined by psycopg.
        """
        if not rows:
            return
        match = _PLAIN_INSERT.match(sql.strip())
        if match is None:
            with self.raw.cursor() as cur:
                cur.executemany(self._translate(sql), rows)
            return
        table, columns, ignore = match.group(1), match.group(2), match.group(3)
        conn = self.raw
        if ignore:
            first = columns.split(",")[0].strip()
            wanted = list(dict.fromkeys(r[0] for r in rows))
            have = {
                r[0]
                for r in conn.execute(
                    f"SELECT {first} FROM {table} WHERE {first} = ANY(%s)", (wanted,)
                ).fetchall()
            }
            seen: set[Any] = set()
            kept = []
            for row in rows:
                if row[0] not in have and row[0] not in seen:
                    seen.add(row[0])
                    kept.append(row)
            rows = kept
        with conn.cursor() as cur, cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)

    def rows(self, sql: str, args: Sequence[Any], *, page: int = 2000) -> Iterator[Any]:
        """Stream a large result through a server-side cursor inside a read transaction."""
        conn = self.raw
        if self.in_transaction:
            yield from conn.execute(self._translate(sql), tuple(args))
            return
        with conn.transaction(), conn.cursor(name="prompt_ledger_rows") as cur:
            cur.itersize = page
            cur.execute(self._translate(sql), tuple(args))
            yield from cur

    def close(self) -> None:
        """Close the connection."""
        with suppress(Exception):
            self._conn.close()


SCHEMA_VERSION = 1

DDL = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE coord (id INTEGER PRIMARY KEY CHECK (id = 1), size BIGINT NOT NULL);
INSERT INTO coord (id, size) VALUES (1, 0);
CREATE TABLE events (
  seq BIGINT PRIMARY KEY,
  kind TEXT NOT NULL,
  actor TEXT NOT NULL,
  time TEXT NOT NULL,
  envelope BYTEA NOT NULL,
  signature BYTEA NOT NULL,
  leaf_hash BYTEA NOT NULL
);
CREATE INDEX events_kind ON events (kind, seq);
CREATE TABLE blobs (sha256 TEXT PRIMARY KEY, size BIGINT NOT NULL, data BYTEA NOT NULL);
CREATE TABLE checkpoints (
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  size BIGINT NOT NULL,
  root BYTEA NOT NULL,
  note TEXT NOT NULL,
  created TEXT NOT NULL
);
CREATE TABLE keys (
  actor TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  vkey TEXT NOT NULL,
  role TEXT NOT NULL,
  added_seq BIGINT NOT NULL,
  revoked_seq BIGINT
);
CREATE TABLE tree (
  level INTEGER NOT NULL,
  idx BIGINT NOT NULL,
  hash BYTEA NOT NULL,
  PRIMARY KEY (level, idx)
);
CREATE TABLE workers (
  id TEXT PRIMARY KEY,
  session BIGINT NOT NULL,
  host TEXT NOT NULL,
  pid INTEGER NOT NULL,
  mode TEXT NOT NULL,
  lease_seconds DOUBLE PRECISION NOT NULL,
  started TIMESTAMPTZ NOT NULL DEFAULT now(),
  heartbeat TIMESTAMPTZ NOT NULL DEFAULT now(),
  expires TIMESTAMPTZ NOT NULL,
  reserved_usd DOUBLE PRECISION NOT NULL DEFAULT 0
);
CREATE TABLE leases (
  trial TEXT PRIMARY KEY,
  worker TEXT NOT NULL,
  expires TIMESTAMPTZ NOT NULL
);
CREATE INDEX leases_worker ON leases (worker);
CREATE TABLE pj_meta (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  projected BIGINT NOT NULL,
  spent_usd DOUBLE PRECISION NOT NULL
);
INSERT INTO pj_meta (id, projected, spent_usd) VALUES (1, 0, 0);
CREATE TABLE pj_trials (
  trial TEXT PRIMARY KEY,
  attempts INTEGER NOT NULL,
  failures INTEGER NOT NULL,
  final_seq BIGINT
);
CREATE TABLE pj_requests (
  seq BIGINT PRIMARY KEY,
  trial TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  session BIGINT,
  outcome_seq BIGINT
);
CREATE INDEX pj_requests_open ON pj_requests (session) WHERE outcome_seq IS NULL;
CREATE TABLE pj_sessions (seq BIGINT PRIMARY KEY, stopped_seq BIGINT);
"""


def create_schema(where: PostgresLocation, meta: Sequence[tuple[str, str]]) -> PgConnection:
    """Create the ledger's schema and tables in one transaction; refuse an existing schema."""
    psycopg = _psycopg()
    db = PgConnection.__new__(PgConnection)
    db.where, db.readonly, db._sql, db.in_transaction = where, False, {}, False
    try:
        conn = psycopg.connect(
            where.conninfo,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            application_name="prompt-ledger",
        )
    except psycopg.Error as exc:
        raise StoreError(connect_advice(where, exc)) from exc
    try:
        with conn.transaction():
            found = conn.execute(
                "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s",
                (where.schema,),
            ).fetchone()
            if found:
                raise StoreError(
                    f"{where}: schema {where.schema!r} already exists in that database; refusing "
                    "to overwrite it (choose another with ?schema=NAME, or drop the old one)"
                )
            conn.execute(f'CREATE SCHEMA "{where.schema}"')
            conn.execute(f'SET LOCAL search_path TO "{where.schema}"')
            for stmt in DDL.split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO meta (key, value) VALUES (%s, %s)", list(meta))
        conn.execute(f'SET search_path TO "{where.schema}"')
    except psycopg.Error as exc:
        conn.close()
        raise StoreError(f"{where}: cannot create the ledger ({_first_line(exc)})") from exc
    except BaseException:
        conn.close()
        raise
    db._conn = conn
    return db


def check_schema(db: PgConnection, expected: int) -> None:
    """Refuse a schema that holds no ledger, or one written by a newer version."""
    psycopg = _psycopg()
    where = db.where
    try:
        found = db.raw.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = %s "
            "AND table_name = 'meta'",
            (where.schema,),
        ).fetchone()
        if not found:
            raise StoreError(
                f"{where}: no ledger there (schema {where.schema!r} holds no ledger tables); "
                "check the schema name, or create the study with `ledger new DIR --store URL`"
            )
        meta = dict(db.raw.execute("SELECT key, value FROM meta").fetchall())
    except psycopg.Error as exc:
        raise StoreError(f"{where}: cannot read the ledger ({_first_line(exc)})") from exc
    if meta.get("format") != "prompt-ledger":
        found_format = meta.get("format")
        raise NotALedgerError(f"{where} is not a PROMPT ledger (meta format {found_format!r})")
    try:
        version = int(meta.get("schema_version", "0"))
    except ValueError:
        version = 0
    if version > expected:
        raise SchemaVersionError(
            f"{where} has schema version {version}, newer than {expected} which this version "
            "of prompt-ledger understands; upgrade prompt-ledger to read it"
        )
    if version < 1:
        raise NotALedgerError(f"{where} is not a PROMPT ledger (schema version {version})")
