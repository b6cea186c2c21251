"""The walk over an archive and the one reader of its files (``docs/archive-format.md`` §6).

The walk lists the archive with ``lstat`` only (``os.scandir`` without following links): each
entry is a directory (descended into), a regular file (recorded with its size and identity)
or something else (a symbolic link, named pipe, device or socket), which is recorded as what it
is and never opened or followed. The walk stops at :data:`MAX_ENTRIES` entries or
:data:`MAX_DEPTH` levels, and refuses an archive whose regular files hold more than
:data:`MAX_TOTAL_BYTES`.

:meth:`ArchiveFiles.read` is the only way a check reads an archive file: it accepts only a path
the walk recorded as a regular file, refuses it when it is larger than its limit
(:func:`limit_for`) before opening it, and opens it without following links, checking that the
file opened is the one listed (:mod:`verify._safeio`).
"""

from __future__ import annotations

import hashlib
import os
import stat
import unicodedata
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO

from verify._reader.names import EVENTS
from verify._safeio import UnsafeFileError, describe_mode, human_bytes, open_regular

__all__ = [
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_ENTRIES",
    "MAX_EVENTS_BYTES",
    "MAX_FILE_BYTES",
    "MAX_PARSED_BYTES",
    "MAX_TOTAL_BYTES",
    "ArchiveFileError",
    "ArchiveFiles",
    "limit_for",
    "show",
]

MAX_ENTRIES = 1_000_000
"""Files and directories an archive may hold (a 100,000-trial study holds about 300,000)."""
MAX_DEPTH = 16
"""Directory levels below the archive root."""
MAX_TOTAL_BYTES = 8 << 30
"""Bytes the regular files of an archive may hold together (each is hashed once)."""
MAX_EVENTS_BYTES = 2 << 30
"""Size of ``ledger/events.jsonl`` (read line by line)."""
MAX_FILE_BYTES = 1 << 30
"""Size of a blob, a dataset CSV, a stimulus or any file without a smaller limit."""
MAX_DOCUMENT_BYTES = 16 << 20
"""Size of a file people read or the verifier parses whole: README, report, figures, JSON..."""
MAX_PARSED_BYTES = 64 << 20
"""Size of a blob the verifier parses (a request, response or scores body, a locked spec or
truth table); larger ones are compared by hash only or refused."""
MAX_CHECKPOINT_BYTES = 1 << 20
MAX_KEY_BYTES = 64 << 10

_DOCUMENTS = frozenset(
    {
        "README.md",
        "analysis/report.html",
        "analysis/results.json",
        "analysis/tables/verdicts.csv",
        "protocol/files.csv",
        "protocol/protocol.json",
    }
)


def limit_for(rel: str) -> int:
    """The most bytes the verifier reads of the archive file ``rel``."""
    if rel == EVENTS:
        return MAX_EVENTS_BYTES
    if rel.startswith("ledger/checkpoints/"):
        return MAX_CHECKPOINT_BYTES
    if rel.startswith("ledger/keys/"):
        return MAX_KEY_BYTES
    if rel in _DOCUMENTS or rel.startswith(("analysis/figures/", "protocol/arms/")):
        return MAX_DOCUMENT_BYTES
    return MAX_FILE_BYTES


def show(name: str) -> str:
    """A file name as it may be printed: undecodable bytes and control characters escaped.

    A name is data from the archive; printed raw it could fake a line of the report.
    """
    raw = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    if raw.isprintable():
        return raw
    return "".join(
        ch if ch.isprintable() and unicodedata.category(ch) != "Cc" else ascii(ch)[1:-1]
        for ch in raw
    )


HASH_CHUNK_BYTES = 32 << 20
"""Bytes of files a worker hashes per task (a task holds at least one file)."""
_HASH_CHUNK_FILES = 2048


def _chunks(
    tasks: list[tuple[str, int, tuple[int, int], int]],
) -> Iterator[list[tuple[str, int, tuple[int, int], int]]]:
    """``tasks`` cut in order into chunks of about :data:`HASH_CHUNK_BYTES` bytes."""
    chunk: list[tuple[str, int, tuple[int, int], int]] = []
    size = 0
    for task in tasks:
        chunk.append(task)
        size += task[3]
        if size >= HASH_CHUNK_BYTES or len(chunk) >= _HASH_CHUNK_FILES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _hash_files(
    root: str, tasks: list[tuple[str, int, tuple[int, int], int]]
) -> list[tuple[str, str | None, str | None]]:
    """``(rel, SHA-256 hex or None, why not or None)`` of each task's file, in order.

    Run inline or by a worker process (:meth:`ArchiveFiles.hash_all`): each file is opened as
    :meth:`ArchiveFiles.open` opens it (a regular file, within its limit, the one listed).
    """
    out: list[tuple[str, str | None, str | None]] = []
    for rel, cap, identity, _size in tasks:
        path = os.path.join(root, *rel.split("/"))
        try:
            fh = open_regular(path, cap, identity=identity)
        except UnsafeFileError as exc:
            out.append((rel, None, str(exc)))
            continue
        except OSError as exc:
            out.append((rel, None, f"cannot be read ({exc.strerror or exc})"))
            continue
        try:
            with fh:
                h = hashlib.sha256()
                for block in iter(lambda fh=fh: fh.read(1 << 20), b""):  # type: ignore[misc]
                    h.update(block)
        except OSError as exc:
            out.append((rel, None, f"cannot be read ({exc.strerror or exc})"))
            continue
        out.append((rel, h.hexdigest(), None))
    return out


def _nothing() -> None:
    """The finish of a hash that has nothing left to record."""


class ArchiveFileError(Exception):
    """Internal: an archive file was not read; the message names it and says why."""


@dataclass(frozen=True)
class Entry:
    """A regular file the walk listed."""

    size: int
    identity: tuple[int, int]


class _Hashes(dict[str, str]):
    """The walk's hashes; looking up a withheld path of a public archive raises Withheld."""

    def __init__(self, files: ArchiveFiles) -> None:
        super().__init__()
        self._files = files

    def get(self, rel: str, default: Any = None) -> Any:
        """The hash of ``rel`` (``default`` when unhashed); Withheld for a withheld path."""
        if rel not in self and self._files.withheld is not None and self._files.withheld(rel):
            from verify._privacy import Withheld

            raise Withheld(rel)
        return super().get(rel, default)


class ArchiveFiles:
    """The archive as the walk found it, and the reader of its regular files."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.files: dict[str, Entry] = {}
        self.dirs: set[str] = set()
        self.others: dict[str, str] = {}  # rel -> what it is, as a reason ("is a symbolic ...")
        self.problems: list[tuple[str, str]] = []  # (where, reason) of the walk itself
        self.hashes: dict[str, str] = _Hashes(self)
        # a public archive's withheld paths (docs/privacy.md): reading one raises Withheld
        self.withheld: Callable[[str], bool] | None = None
        self.unhashed: dict[str, str] = {}  # rel -> why it was not hashed
        self.complete = False  # the walk listed everything (no limit stopped it)

    # ------------------------------------------------------------------------------ walk

    def _record(
        self, entry: os.DirEntry[str], rel: str, depth: int, children: list[tuple[str, int]]
    ) -> int:
        """Record one entry as a folder (to walk), a file or another thing.

        Return its size if it is a regular file, else 0.
        """
        try:
            est = entry.stat(follow_symlinks=False)
        except OSError as exc:
            self.others[rel] = f"cannot be examined ({exc.strerror})"
            return 0
        mode = est.st_mode
        if stat.S_ISDIR(mode):
            self.dirs.add(rel)
            if depth + 1 >= MAX_DEPTH:
                self.problems.append(
                    (rel, f"{show(rel)}/ is {MAX_DEPTH} levels deep: not examined")
                )
            else:
                children.append((rel, depth + 1))
        elif stat.S_ISREG(mode):
            self.files[rel] = Entry(est.st_size, (est.st_dev, est.st_ino))
            return est.st_size
        elif stat.S_ISLNK(mode):
            try:
                target = f" to {show(os.readlink(entry.path))!r}"
            except OSError:
                target = ""
            self.others[rel] = f"is a symbolic link{target}, not a regular file: not followed"
        else:
            what = describe_mode(mode)
            self.others[rel] = f"is {what}, not a regular file: not opened"
        return 0

    def walk(self) -> None:
        """List the archive (``lstat`` only; nothing is opened or followed)."""
        try:
            st = os.stat(self.root)
        except OSError as exc:
            self.problems.append((self.root, f"{self.root} cannot be examined ({exc.strerror})"))
            return
        if not stat.S_ISDIR(st.st_mode):
            self.problems.append(
                (self.root, f"{self.root} is {describe_mode(st.st_mode)}, not a directory")
            )
            return
        count = 0
        total = 0
        pending: list[tuple[str, int]] = [("", 0)]
        while pending:
            rel_dir, depth = pending.pop()
            path = os.path.join(self.root, rel_dir) if rel_dir else self.root
            try:
                with os.scandir(path) as it:
                    entries = []
                    for entry in it:
                        entries.append(entry)
                        if count + len(entries) > MAX_ENTRIES:
                            break
            except OSError as exc:
                where = rel_dir or "."
                self.problems.append((where, f"{show(where)}/ cannot be listed ({exc.strerror})"))
                continue
            entries.sort(key=lambda e: e.name)
            children: list[tuple[str, int]] = []
            for entry in entries:
                count += 1
                if count > MAX_ENTRIES:
                    self.problems.append(
                        (
                            rel_dir or ".",
                            f"the archive holds more than {MAX_ENTRIES:,} entries: "
                            "the rest was not examined",
                        )
                    )
                    return
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                total += self._record(entry, rel, depth, children)
            pending.extend(reversed(children))
        if total > MAX_TOTAL_BYTES:
            self.problems.append(
                (
                    ".",
                    f"the archive's files hold {total:,} bytes, more than the "
                    f"{human_bytes(MAX_TOTAL_BYTES)} limit: no file was read",
                )
            )
            return
        self.complete = True

    def hash_all(
        self, pool: Executor | None = None, *, now: Collection[str] = ()
    ) -> Callable[[], None]:
        """Hash every listed regular file within its limit, once, in 1 MiB blocks.

        Without ``pool`` every file is hashed here and now. With ``pool`` the files in ``now``
        are hashed here and now and the others by the pool's workers in chunks of about
        :data:`HASH_CHUNK_BYTES`, recorded (same digests, same reasons for a file not hashed)
        when the function returned is called; the caller calls it before anything reads
        :attr:`hashes` or :attr:`unhashed` for those files.
        """
        if not self.complete:
            for rel in self.files:
                self.unhashed[rel] = "was not read (the walk stopped at a limit)"
            return _nothing
        tasks = [self._hash_task(rel) for rel in sorted(self.files)]
        if pool is None:
            self._record_hashes(_hash_files(self.root, tasks))
            return _nothing
        self._record_hashes(_hash_files(self.root, [t for t in tasks if t[0] in now]))
        rest = [t for t in tasks if t[0] not in now]
        futures = [pool.submit(_hash_files, self.root, chunk) for chunk in _chunks(rest)]

        def finish() -> None:
            while futures:
                self._record_hashes(futures.pop(0).result())

        return finish

    def _record_hashes(self, results: list[tuple[str, str | None, str | None]]) -> None:
        for rel, digest, why in results:
            if digest is not None:
                self.hashes[rel] = digest
            else:
                assert why is not None
                self.unhashed[rel] = why

    def _hash_task(self, rel: str) -> tuple[str, int, tuple[int, int], int]:
        """``(rel, limit, identity, size)`` of a listed file: what a worker needs to hash it."""
        entry = self.files[rel]
        return rel, limit_for(rel), entry.identity, entry.size

    # ------------------------------------------------------------------------------ read

    def describe(self, rel: str) -> str:
        """Why ``rel`` cannot be read as a regular file, as a predicate: ``is missing``..."""
        if rel in self.others:
            return self.others[rel]
        if rel in self.dirs:
            return "is a directory, not a regular file"
        if rel in self.unhashed:
            return self.unhashed[rel]
        entry = self.files.get(rel)
        if entry is not None and entry.size > limit_for(rel):
            return (
                f"is {entry.size:,} bytes, more than the {human_bytes(limit_for(rel))} limit: "
                "not read"
            )
        if entry is None:
            return "is missing"
        return "is readable"

    @contextmanager
    def open(self, rel: str, limit: int | None = None) -> Iterator[BinaryIO]:
        """Open the listed regular file ``rel`` (for streaming); see :meth:`read`."""
        entry = self.files.get(rel)
        if entry is None and self.withheld is not None and self.withheld(rel):
            from verify._privacy import Withheld

            raise Withheld(rel)
        if entry is None or not self.complete:
            raise ArchiveFileError(f"{show(rel)} {self.describe(rel)}")
        cap = limit_for(rel) if limit is None else min(limit, limit_for(rel))
        path = os.path.join(self.root, *rel.split("/"))
        try:
            fh = open_regular(path, cap, identity=entry.identity)
        except UnsafeFileError as exc:
            raise ArchiveFileError(f"{show(rel)} {exc}") from None
        with fh:
            yield fh

    def read(self, rel: str, limit: int | None = None) -> bytes:
        """The bytes of ``rel`` if the walk listed it as a regular file within its limit.

        ``limit`` lowers the file's limit (:func:`limit_for`). Raises
        :class:`ArchiveFileError` naming the file and the reason otherwise; a file that is
        not a regular file is never opened, a link never followed.
        """
        cap = limit_for(rel) if limit is None else min(limit, limit_for(rel))
        with self.open(rel, cap) as fh:
            try:
                data = fh.read(cap + 1)
            except OSError as exc:
                raise ArchiveFileError(
                    f"{show(rel)} cannot be read ({exc.strerror or exc})"
                ) from None
        if len(data) > cap:
            raise ArchiveFileError(f"{show(rel)} grew past its limit while read: not read")
        return data

    def get(self, rel: str, limit: int | None = None) -> tuple[bytes | None, str]:
        """``(bytes, "")`` of a readable file, else ``(None, reason naming the file)``."""
        try:
            return self.read(rel, limit), ""
        except ArchiveFileError as exc:
            return None, str(exc)
