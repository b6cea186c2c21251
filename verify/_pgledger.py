"""Reads a PROMPT Ledger kept on PostgreSQL and runs every check of ``docs/ledger-format.md`` §8.

Written from ``docs/ledger-format.md`` §7 ("The PostgreSQL store"): a ledger lives in one schema
of one database, with the tables of the SQLite store and the column types listed there. The
checks are the verifier's own (:class:`verify._ledgerfile._Run`): only where the rows come from
differs. Everything is read in one ``REPEATABLE READ READ ONLY`` transaction, so a study that
workers are appending to is verified as one consistent snapshot, and large tables are streamed
through server-side cursors. Signatures checked in worker processes are handed to them with the
rows (the snapshot belongs to this one connection).

The store is named by a libpq URL with this project's ``schema`` parameter::

    postgresql://auditor@db.example.org:5432/studies?schema=tumbling_e

A password never belongs in the URL: libpq reads it from ``PGPASSWORD``, ``~/.pgpass`` or a
service file. Every problem reaching the store (a malformed URL, a refused password, a missing
database or schema, a newer schema version) is one FAIL of the ``file`` check naming the store
and what to do; nothing raises.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from verify._ledgerfile import SCHEMA_VERSION, _NotALedger, _Run
from verify._report import Check, Report, Status
from verify._safeio import UnsafeFileError, read_regular

__all__ = [
    "STORE_FILE",
    "PgLocation",
    "StoreURLError",
    "is_store_url",
    "read_store_file",
    "verify_postgres",
]

STORE_FILE = "ledger.store"
"""The file in a study folder that names its PostgreSQL store (one URL, no password)."""

_SCHEMES = ("postgresql", "postgres")
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_MAX_STORE_FILE = 4096
_CONNECT_TIMEOUT = 10
_PAGE = 2000  # rows fetched per round trip by the server-side cursors
_BLOB_PAGE = 64

_PASSWORD_ADVICE = (
    "give the password through PGPASSWORD, ~/.pgpass or a pg_service.conf service, as for psql"
)

_INTEGER = frozenset({"smallint", "integer", "bigint"})
_BYTES = frozenset({"bytea"})
_TEXT = frozenset({"text", "character varying"})
_TYPE_WORDS = {id(_INTEGER): "an integer type", id(_BYTES): "bytea", id(_TEXT): "text"}

# docs/ledger-format.md §7: each required table, its columns and the types a column may have.
_REQUIRED: dict[str, tuple[tuple[str, frozenset[str]], ...]] = {
    "meta": (("key", _TEXT), ("value", _TEXT)),
    "events": (
        ("seq", _INTEGER),
        ("kind", _TEXT),
        ("actor", _TEXT),
        ("time", _TEXT),
        ("envelope", _BYTES),
        ("signature", _BYTES),
        ("leaf_hash", _BYTES),
    ),
    "blobs": (("sha256", _TEXT), ("size", _INTEGER), ("data", _BYTES)),
    "checkpoints": (
        ("id", _INTEGER),
        ("size", _INTEGER),
        ("root", _BYTES),
        ("note", _TEXT),
        ("created", _TEXT),
    ),
    "keys": (
        ("actor", _TEXT),
        ("name", _TEXT),
        ("vkey", _TEXT),
        ("role", _TEXT),
        ("added_seq", _INTEGER),
        ("revoked_seq", _INTEGER),
    ),
    "tree": (("level", _INTEGER), ("idx", _INTEGER), ("hash", _BYTES)),
}


class StoreURLError(ValueError):
    """A store URL (or the ``ledger.store`` file holding it) that names no usable store."""


def is_store_url(text: str | os.PathLike[str]) -> bool:
    """True when ``text`` is a ``postgresql://`` or ``postgres://`` URL (not a file path)."""
    if not isinstance(text, str) or "://" not in text:
        return False
    return text.split("://", 1)[0].lower() in _SCHEMES


class PgLocation:
    """A parsed store URL: the libpq connection URL (without ``schema``) and the schema."""

    __slots__ = ("conninfo", "database", "schema", "shown")

    def __init__(self, text: str) -> None:
        """Parse ``postgresql://[user@]host[:port]/database?schema=NAME[&libpq options]``.

        Raises :class:`StoreURLError` naming what is wrong: not a URL, a password in it, no
        database, no schema or a schema name outside ``[a-z_][a-z0-9_]{0,62}``.
        """
        text = text.strip()
        if not is_store_url(text):
            raise StoreURLError(
                f"{text!r:.200} is not a PostgreSQL URL "
                "(postgresql://[user@]host[:port]/database?schema=NAME)"
            )
        try:
            parts = urlsplit(text)
            password = parts.password
            parts.port  # noqa: B018 - a port that is not a number raises here
        except ValueError as exc:
            raise StoreURLError(f"{_redact(text)}: not a valid URL ({exc})") from None
        query = parse_qsl(parts.query, keep_blank_values=True)
        if password is not None or any(k == "password" for k, _ in query):
            raise StoreURLError(
                f"{_redact(text)}: the URL holds a password; remove it and {_PASSWORD_ADVICE}"
            )
        schemas = [v for k, v in query if k == "schema"]
        rest = [(k, v) for k, v in query if k != "schema"]
        if not schemas:
            raise StoreURLError(
                f"{text}: the URL names no schema; add ?schema=NAME (a study's ledger.store "
                "holds its full URL)"
            )
        if len(schemas) > 1:
            raise StoreURLError(f"{text}: the URL names 'schema' {len(schemas)} times")
        schema = schemas[0]
        if not _SCHEMA_NAME.match(schema):
            raise StoreURLError(
                f"{text}: schema {schema!r:.80} is not 1-63 lower-case letters, digits or '_' "
                "starting with a letter or '_'"
            )
        database = parts.path.lstrip("/")
        if not database:
            raise StoreURLError(
                f"{text}: the URL names no database (postgresql://host/DATABASE?schema=NAME)"
            )
        self.conninfo = urlunsplit(
            ("postgresql", parts.netloc, parts.path, urlencode(rest), parts.fragment)
        )
        self.schema = schema
        self.database = database
        self.shown = text

    def __str__(self) -> str:
        return self.shown


def _redact(text: str) -> str:
    """``text`` with any password in its user information replaced by ``***``."""
    head, sep, tail = text.partition("://")
    userinfo, at, rest = tail.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return text
    return f"{head}://{userinfo.split(':', 1)[0]}:***@{rest}"


def read_store_file(folder: str | os.PathLike[str]) -> str:
    """The URL in ``folder/ledger.store`` (a regular file of at most 4 KiB, UTF-8, one line).

    Raises :class:`StoreURLError` naming the file when it cannot be read or is not UTF-8.
    """
    path = os.path.join(os.fspath(folder), STORE_FILE)
    try:
        data = read_regular(path, _MAX_STORE_FILE, follow_links=True)
    except UnsafeFileError as exc:
        raise StoreURLError(f"{path} {exc}: cannot read the study's store URL") from None
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise StoreURLError(f"{path}: not UTF-8 text at byte {exc.start}") from None
    if not text:
        raise StoreURLError(f"{path} is empty: it should hold the study's postgresql:// URL")
    return text


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def connect_problem(where: PgLocation, exc: BaseException) -> str:
    """One line: the store, why the connection failed, and what to do."""
    state = getattr(exc, "sqlstate", None)
    low = str(exc).lower()
    if state == "28P01" or "password authentication failed" in low:
        what, advice = "the server refused the password", f"check the user, and {_PASSWORD_ADVICE}"
    elif "no password supplied" in low:
        what, advice = "the server asks for a password and none was found", _PASSWORD_ADVICE
    elif state == "3D000" or ("database" in low and "does not exist" in low):
        what = f"database {where.database!r} does not exist on that server"
        advice = "check the database name in the URL"
    elif "role" in low and "does not exist" in low:
        what, advice = _first_line(exc), "name an existing user in the URL (postgresql://USER@...)"
    elif "could not translate host name" in low or "name or service not known" in low:
        what, advice = "the host name does not resolve", "check the host in the URL"
    elif "connection refused" in low or "timeout" in low or "could not connect" in low:
        what = "no PostgreSQL server answers there"
        advice = "check the host and port, and that the server is running"
    else:
        what, advice = _first_line(exc), "check the URL and the server"
    return f"{where}: cannot connect ({what}); {advice}"


class PgRun(_Run):
    """The checks of ``docs/ledger-format.md`` §8 on a ledger in a PostgreSQL schema."""

    def __init__(
        self,
        where: PgLocation,
        trusted_keys: Sequence[str],
        checkpoints: Sequence[str | os.PathLike[str]],
        jobs: int,
    ) -> None:
        super().__init__(str(where), trusted_keys, checkpoints, jobs)
        self.where = where
        self.uri = ""  # no SQLite file: worker processes get their rows from this process
        self.q = '"' + where.schema.replace('"', '""') + '"'  # the schema, a quoted identifier
        self.server = ""

    # ------------------------------------------------------------------ container

    def _open_store(self) -> Any:
        """Connect to the store and set up a read-only REPEATABLE READ transaction."""
        st = self.states["file"]
        try:
            import psycopg
        except ImportError as exc:
            st.fail(
                f"{self.where}: reading a PostgreSQL store needs psycopg 3 ({exc}); "
                "pip install 'psycopg[binary]'",
                where=str(self.where),
            )
            raise _NotALedger from None
        try:
            con = psycopg.connect(
                self.where.conninfo,
                connect_timeout=_CONNECT_TIMEOUT,
                application_name="prompt-ledger-verify",
            )
        except psycopg.Error as exc:
            st.fail(connect_problem(self.where, exc), where=str(self.where))
            raise _NotALedger from None
        # every statement from here on runs in one snapshot, and none of them can write
        con.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        con.read_only = True
        version = con.info.server_version
        self.server = f"PostgreSQL {version // 10000}.{version % 10000}"
        return con

    def _check_container(self, con: Any) -> None:
        st = self.states["file"]
        where, schema = self.where, self.where.schema
        found = con.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
        if found is None:
            st.fail(
                f"{where}: schema {schema!r} does not exist in database {where.database!r}; "
                "check ?schema= (a study's ledger.store holds its URL)",
                where=str(where),
            )
            raise _NotALedger
        have: dict[str, dict[str, str]] = {}
        for table, column, typ in con.execute(
            "SELECT c.relname, a.attname, format_type(a.atttypid, NULL) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_attribute a ON a.attrelid = c.oid "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND a.attnum > 0 "
            "AND NOT a.attisdropped",
            (schema,),
        ):
            have.setdefault(table, {})[column] = typ
        if "meta" not in have:
            st.fail(
                f"{where}: schema {schema!r} holds no ledger (no table meta); check ?schema=",
                where="meta",
            )
            raise _NotALedger
        self.meta = {k: v for k, v in con.execute(f"SELECT key, value FROM {self.q}.meta")}
        self._check_meta()
        self._check_columns(have)
        if "origin" not in self.meta:
            st.fail("meta has no origin row", where="meta.origin")

    def _check_meta(self) -> None:
        """The meta table names a PROMPT ledger of the schema version this verifier knows."""
        st = self.states["file"]
        where = self.where
        if self.meta.get("format") != "prompt-ledger":
            st.fail(
                f"{where} is not a PROMPT ledger: meta format is "
                f"{self.meta.get('format')!r:.80}, expected 'prompt-ledger'",
                where="meta.format",
            )
            raise _NotALedger
        text = self.meta.get("schema_version")
        version = int(text) if isinstance(text, str) and text.isdigit() else None
        if version is not None and version > SCHEMA_VERSION:
            st.fail(
                f"{where} has schema version {version}, newer than this verifier knows "
                f"({SCHEMA_VERSION}); use a newer verifier",
                where="meta.schema_version",
            )
            raise _NotALedger
        if version != SCHEMA_VERSION:
            st.fail(
                f"{where}: meta schema_version is {text!r:.80}, not a known schema version "
                f"(this verifier knows '{SCHEMA_VERSION}')",
                where="meta.schema_version",
            )
            raise _NotALedger

    def _check_columns(self, have: dict[str, dict[str, str]]) -> None:
        """Every required table and column, of an allowed type (``have``: their types)."""
        st = self.states["file"]
        where, schema = self.where, self.where.schema
        for table, columns in _REQUIRED.items():
            if table not in have:
                st.fail(f"{where}: schema {schema!r} has no table {table}", where=table)
                raise _NotALedger
            for column, allowed in columns:
                typ = have[table].get(column)
                if typ is None:
                    st.fail(f"{where}: table {table} lacks column {column}", where=table)
                    raise _NotALedger
                if typ not in allowed:
                    st.fail(
                        f"{where}: column {table}.{column} has type {typ}, not "
                        f"{_TYPE_WORDS[id(allowed)]}",
                        where=f"{table}.{column}",
                    )
                    raise _NotALedger

    def _file_pass(self) -> str:
        return (
            f"{self.server} ledger in schema {self.where.schema} of database "
            f"{self.where.database}: meta format prompt-ledger, schema version {SCHEMA_VERSION}, "
            "tables meta, events, blobs, checkpoints, keys and tree with their columns and "
            "types; read in one REPEATABLE READ read-only transaction"
        )

    # ------------------------------------------------------------------ run

    def run(self) -> Report:
        """Connect, check the container, then every ledger check in one snapshot."""
        import psycopg

        report = Report(path=str(self.where))
        con = None
        try:
            con = self._open_store()
            self._check_container(con)
            self._verify(con, report)
        except _NotALedger:
            report.checks = [self.states["file"].check("")]
        except psycopg.Error as exc:
            self.states["file"].fail(
                f"{self.where}: PostgreSQL error while reading ({_first_line(exc)}); check "
                "that the server is up and the user may read the schema (USAGE on it, SELECT "
                "on its tables), then verify again",
                where=str(self.where),
            )
            report.checks = [self.states["file"].check("")]
        finally:
            if con is not None:
                try:
                    con.rollback()
                finally:
                    con.close()
        return report

    # ------------------------------------------------------------------ sources

    def _stream_query(self, con: Any, name: str, sql: str, page: int) -> Iterator[Any]:
        """Rows of ``sql`` through a server-side cursor, ``page`` rows per round trip."""
        with con.cursor(name=name) as cur:
            cur.itersize = page
            cur.execute(sql)
            yield from cur

    def _checkpoint_rows(self, con: Any) -> Iterable[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = con.execute(
            f"SELECT id, size, root, note, created FROM {self.q}.checkpoints ORDER BY id"
        ).fetchall()
        return rows

    def _event_count(self, con: Any) -> int:
        return int(con.execute(f"SELECT count(*) FROM {self.q}.events").fetchone()[0])

    def _key_rows(self, con: Any) -> Iterable[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = con.execute(
            f"SELECT actor, name, vkey, role, added_seq, revoked_seq FROM {self.q}.keys"
        ).fetchall()
        return rows

    def _event_rows(self, con: Any) -> Iterator[tuple[Any, ...]]:
        return self._stream_query(
            con,
            "verify_events",
            "SELECT seq, kind, actor, time, envelope, signature, leaf_hash "
            f"FROM {self.q}.events ORDER BY seq",
            _PAGE,
        )

    def _tree_rows(self, con: Any) -> Iterator[tuple[Any, Any, Any]]:
        # the order in which the stream completes subtrees: by the size at which each node is
        # complete ((idx + 1) * 2^level), then level; rows that name no complete subtree first
        return self._stream_query(
            con,
            "verify_tree",
            f"SELECT level, idx, hash FROM {self.q}.tree "
            "ORDER BY CASE WHEN level BETWEEN 1 AND 61 "
            "AND idx BETWEEN 0 AND (1::bigint << (61 - level)) "
            "THEN (idx + 1) << level ELSE -1 END, level, idx",
            _PAGE,
        )

    def _check_blobs(self, con: Any) -> None:
        self._check_blob_rows(
            self._stream_query(
                con,
                "verify_blobs",
                f'SELECT sha256, size, data FROM {self.q}.blobs ORDER BY sha256 COLLATE "C"',
                _BLOB_PAGE,
            ),
            "is missing from the blobs table",
        )

    _submit = _Run._submit_buffered  # its rows are handed over: no file to reopen


def verify_postgres(
    url: str,
    *,
    trusted_keys: Sequence[str] = (),
    checkpoints: Sequence[str | os.PathLike[str]] = (),
    jobs: int = 1,
) -> Report:
    """Verify the ledger at the store ``url`` (``postgresql://...?schema=NAME``); never raises.

    The same checks as :func:`verify.verify_ledger_file` on a SQLite file; the ``file`` check
    covers the store (the URL, the connection, the schema, ``meta`` and the tables).
    """
    if isinstance(trusted_keys, str):
        trusted_keys = [trusted_keys]
    if isinstance(checkpoints, (str, os.PathLike)):
        checkpoints = [checkpoints]
    try:
        where = PgLocation(url)
    except StoreURLError as exc:
        shown = _redact(url.strip())
        return Report(path=shown, checks=[Check("file", Status.FAIL, str(exc), where=shown)])
    try:
        return PgRun(where, trusted_keys, checkpoints, jobs).run()
    except Exception as exc:  # fail closed: a verifier that crashes must not look like a pass
        return Report(
            path=str(where),
            checks=[
                Check(
                    "file",
                    Status.FAIL,
                    f"{where}: verification stopped by an unexpected error: "
                    f"{type(exc).__name__}: {exc}",
                    where=str(where),
                )
            ],
        )
