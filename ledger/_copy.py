"""Move a ledger between engines: ``ledger store copy SRC DST`` (``docs/storage.md``).

Every row is copied as stored (envelope bytes, signatures, leaf hashes, blobs, tree nodes,
checkpoint notes with their cosignatures, the key registry, the origin): nothing is signed
again, so the copy is the same log, and an archive exported from either is the same bytes.
The destination is written in one transaction and checked before it is kept: same size, same
leaf hash at every seq, the same Merkle root at the log's size and at every stored
checkpoint's, the same blobs. A copy that fails any of it is removed. A study behind
``ledger serve`` is fetched through the service first (:func:`_copy_from_service`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger._errors import StoreError
from ledger._files import read_regular_file
from ledger._http import RemoteLocation, is_http_url
from ledger._postgres import PostgresLocation, is_url
from ledger._store import Ledger, Location, _drop

LEDGER_FILE = "ledger.db"
STORE_FILE = "ledger.store"
PAGE = 1000


def study_ledger(root: Path) -> Path | PostgresLocation | RemoteLocation:
    """Where the study folder ``root`` keeps its ledger: ``ledger.store``'s URL, or ``ledger.db``.

    ``ledger.store`` names a PostgreSQL store (``postgresql://...``) or the study behind
    ``ledger serve`` (``http(s)://HOST/STUDY``, or several such URLs of one study separated
    by white space: ``docs/service.md`` §9).

    Raises :class:`StoreError` naming ``ledger.store`` when it is not valid.
    """
    store = root / STORE_FILE
    if not store.is_file():
        return root / LEDGER_FILE
    try:
        text = read_regular_file(store, 4096).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"{store}: cannot read the study's store URL ({exc})") from exc
    try:
        if is_http_url(text):
            return RemoteLocation.parse(text)
        return PostgresLocation.parse(text)
    except StoreError as exc:
        raise StoreError(f"{store}: {exc}") from exc


def resolve(text: str) -> Path | PostgresLocation | RemoteLocation:
    """A ledger named on the command line: a URL, a study folder, or a SQLite file."""
    if is_url(text):
        return PostgresLocation.parse(text)
    if is_http_url(text):
        return RemoteLocation.parse(text)
    path = Path(text)
    if path.is_dir():
        return study_ledger(path)
    return path


@dataclass(frozen=True)
class CopyResult:
    """What :func:`copy_ledger` copied and checked."""

    source: str
    target: str
    events: int
    blobs: int
    checkpoints: int
    root: str


def copy_ledger(src: Location, dst: Location) -> CopyResult:
    """Copy the ledger at ``src`` to a new ledger at ``dst`` (either engine) and check it.

    Raises :class:`StoreError` when ``dst`` exists, when either cannot be opened, or when
    the copy's roots or rows disagree with the source (the copy is then removed).
    """
    target = Ledger.location(dst)
    if isinstance(target, RemoteLocation):
        raise StoreError(
            f"{target}: ledger store copy does not copy into `ledger serve`; copy into the "
            "store the service runs on (a SQLite file of its --store folder, or a schema of "
            "its PostgreSQL) and the service serves it"
        )
    if Ledger.exists(target):
        raise StoreError(f"{target}: a ledger is already there; refusing to overwrite it")
    if isinstance(Ledger.location(src), RemoteLocation):
        return _copy_from_service(src, target)
    with Ledger.open(src, readonly=True) as source:
        origin = source.origin
        empty = Ledger._create_empty(target, origin)
        try:
            with empty:
                _copy_rows(source, empty)
                result = _check_copy(source, empty)
        except BaseException:
            _drop(target)
            raise
    return result


def _copy_from_service(src: Location, target: Path | PostgresLocation) -> CopyResult:
    """Copy a study served by ``ledger serve`` (its URL, or a folder whose ledger.store names it).

    The service's envelopes, signatures, blobs and checkpoints are fetched (signed reads,
    docs/service.md §8) into a temporary SQLite ledger, each envelope checked again on the
    way (:meth:`RemoteLedger.copy_to`); that ledger must agree with what the service
    answers (size, root, every checkpoint's size, root and signature lines), and is then
    copied to ``target`` and checked as any copy is.
    """
    import shutil
    import tempfile

    from ledger._note import parse_note

    place = target.parent if isinstance(target, Path) else None
    scratch = Path(tempfile.mkdtemp(prefix=".ledger-copy-", dir=place))
    try:
        with Ledger.open(src, readonly=True) as remote:
            fetched = remote.copy_to(scratch / "fetched.db")  # type: ignore[attr-defined]
            where = str(remote.path)
            with Ledger.open(fetched, readonly=True) as local:
                if (local.size, local.root()) != (remote.size, remote.root()):
                    raise StoreError(
                        f"{where}: the service's log changed or disagrees while it was fetched "
                        f"(fetched size {local.size}); run the copy again"
                    )
                served = [
                    (c.size, c.root, _lines(parse_note, c.note)) for c in remote.checkpoints()
                ]
                kept = [(c.size, c.root, _lines(parse_note, c.note)) for c in local.checkpoints()]
                if served != kept:
                    raise StoreError(f"{where}: the fetched checkpoints differ from the served")
        result = copy_ledger(fetched, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return CopyResult(
        where, result.target, result.events, result.blobs, result.checkpoints, result.root
    )


def _lines(parse: Any, note: str) -> tuple[str, frozenset[str]]:
    """A note's text and its signature lines (their order is not part of what it proves)."""
    parsed = parse(note)
    return parsed.text, frozenset(s.line for s in parsed.signatures)


def _copy_rows(source: Ledger, target: Ledger) -> None:
    """Every row of ``source`` into ``target``, in one transaction of ``target``."""

    def get(sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        return list(source._conn.execute(sql, args).fetchall())

    with target.transaction():
        conn = target._conn
        last = -1
        while True:
            rows = get(
                "SELECT seq, kind, actor, time, envelope, signature, leaf_hash FROM events "
                "WHERE seq > ? ORDER BY seq LIMIT ?",
                (last, PAGE),
            )
            if not rows:
                break
            conn.executemany(
                "INSERT INTO events (seq, kind, actor, time, envelope, signature, leaf_hash) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(r[0], r[1], r[2], r[3], bytes(r[4]), bytes(r[5]), bytes(r[6])) for r in rows],
            )
            last = int(rows[-1][0])
        after = ""
        while True:
            rows = get(
                "SELECT sha256, size, data FROM blobs WHERE sha256 > ? ORDER BY sha256 LIMIT ?",
                (after, 100),
            )
            if not rows:
                break
            conn.executemany(
                "INSERT INTO blobs (sha256, size, data) VALUES (?, ?, ?)",
                [(r[0], r[1], bytes(r[2])) for r in rows],
            )
            after = str(rows[-1][0])
        for level_row in get("SELECT DISTINCT level FROM tree ORDER BY level", ()):
            level, idx = int(level_row[0]), -1
            while True:
                rows = get(
                    "SELECT level, idx, hash FROM tree WHERE level = ? AND idx > ? "
                    "ORDER BY idx LIMIT ?",
                    (level, idx, PAGE * 10),
                )
                if not rows:
                    break
                conn.executemany(
                    "INSERT INTO tree (level, idx, hash) VALUES (?, ?, ?)",
                    [(r[0], r[1], bytes(r[2])) for r in rows],
                )
                idx = int(rows[-1][1])
        conn.executemany(
            "INSERT INTO checkpoints (id, size, root, note, created) VALUES (?, ?, ?, ?, ?)",
            [
                (r[0], r[1], bytes(r[2]), r[3], r[4])
                for r in get(
                    "SELECT id, size, root, note, created FROM checkpoints ORDER BY id", ()
                )
            ],
        )
        conn.executemany(
            "INSERT INTO keys (actor, name, vkey, role, added_seq, revoked_seq) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                tuple(r)
                for r in get(
                    "SELECT actor, name, vkey, role, added_seq, revoked_seq "
                    "FROM keys ORDER BY added_seq",
                    (),
                )
            ],
        )
        if target.engine == "postgresql":
            conn.execute("UPDATE coord SET size = ? WHERE id = 1", (last + 1,))
            conn.execute(
                "SELECT setval(pg_get_serial_sequence('checkpoints', 'id'), "
                "GREATEST((SELECT MAX(id) FROM checkpoints), 1))"
            )


def _check_copy(source: Ledger, target: Ledger) -> CopyResult:
    """Compare the copy with its source: sizes, every leaf, every stored root, the blobs."""
    size = source.size
    if target.size != size:
        raise StoreError(f"{target.path}: the copy has {target.size} events, the source {size}")
    digest_src, digest_dst = hashlib.sha256(), hashlib.sha256()
    for a, b in zip(source.events(), target.events(), strict=True):
        if a.leaf_hash != b.leaf_hash or a.envelope != b.envelope or a.signature != b.signature:
            raise StoreError(f"{target.path}: event {a.seq} differs from the source's")
        digest_src.update(a.leaf_hash)
        digest_dst.update(b.leaf_hash)
    root = source.root()
    if target.root() != root:
        raise StoreError(f"{target.path}: the copy's Merkle root differs from the source's")
    stored = source.checkpoints()
    copied = target.checkpoints()
    if [(c.size, c.root, c.note) for c in stored] != [(c.size, c.root, c.note) for c in copied]:
        raise StoreError(f"{target.path}: the copy's checkpoints differ from the source's")
    for cp in stored:
        if target.root(cp.size) != cp.root:
            raise StoreError(
                f"{target.path}: the copy's root at checkpoint size {cp.size} is not the "
                "checkpoint's"
            )
    count = 0
    for (sha,) in source._conn.execute("SELECT sha256 FROM blobs ORDER BY sha256").fetchall():
        data = target.stored_blob(str(sha))
        if hashlib.sha256(data).hexdigest() != sha:
            raise StoreError(f"{target.path}: blob {sha} does not hash to its address")
        count += 1
    registry = [source.keys(), target.keys()]
    if [(k.actor, k.vkey, k.role, k.added_seq, k.revoked_seq) for k in registry[0]] != [
        (k.actor, k.vkey, k.role, k.added_seq, k.revoked_seq) for k in registry[1]
    ]:
        raise StoreError(f"{target.path}: the copy's key registry differs from the source's")
    return CopyResult(str(source.path), str(target.path), size, count, len(stored), root.hex())
