"""The ledger-level checks (``docs/ledger-format.md`` §8) on an archive's files.

``ledger/events.jsonl``, ``ledger/checkpoints/``, ``ledger/keys/`` and ``blobs/`` take the place of
the SQLite tables; the engine is the one that verifies a ledger file (:mod:`verify._ledgerfile`).
Every file is read through :class:`~verify._reader.files.ArchiveFiles`, whose walk also hashes
each regular file once; the events are parsed once by :mod:`verify._reader.events`.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from verify._errors import CheckpointFormatError, NoteError
from verify._ledgerfile import RECOMPUTED, SKIMMED, _Run
from verify._note import Checkpoint, parse_checkpoint, parse_note
from verify._pool import worker_pool
from verify._reader.columns import EventColumns
from verify._reader.events import EventReader
from verify._reader.files import ArchiveFileError, ArchiveFiles, show
from verify._reader.names import EVENTS, line_where
from verify._report import Check, Report, Status

__all__ = ["ArchiveRun", "FileCheckpoint"]

_CHECKPOINT_NAME = re.compile(r"^([0-9]{8})\.txt$")
_CHECKPOINTS = "ledger/checkpoints/"
_KEYS = "ledger/keys/"


def _nothing() -> None:
    """Nothing left to record."""


class FileCheckpoint:
    """A checkpoint file in ``ledger/checkpoints/``, shaped like a stored checkpoint row.

    ``data`` is ``None`` when the file could not be read; ``unreadable`` then says why.
    """

    __slots__ = ("cp", "created", "id", "label", "note", "problem", "root_col", "size_col", "where")

    def __init__(self, name: str, data: bytes | None, unreadable: str = "") -> None:
        self.id = name
        self.where = f"{_CHECKPOINTS}{name}"
        self.created = None
        self.cp: Checkpoint | None = None
        self.problem: str | None = None
        self.note: str | None = None
        match = _CHECKPOINT_NAME.match(name)
        self.size_col: int | None = int(match.group(1)) if match else None
        self.root_col: bytes | None = None
        size: object = self.size_col
        try:
            if data is None:
                raise CheckpointFormatError(unreadable)
            self.note = data.decode("utf-8")
            text, _ = parse_note(self.note)
            self.cp = parse_checkpoint(text)
            size = self.cp.size
            self.root_col = self.cp.root
        except (NoteError, CheckpointFormatError) as exc:
            self.problem = str(exc)
        except UnicodeDecodeError as exc:
            self.problem = f"not valid UTF-8 at byte {exc.start}"
        if match is None and self.problem is None:
            self.problem = "file name is not <size, 8 digits>.txt"
        elif self.problem is None and self.size_col != size:
            self.problem = f"file name says size {self.size_col}, the note says {size}"
        self.label = f"{self.where} (size {size})"


class ArchiveRun(_Run):
    """The checks of ``docs/ledger-format.md`` §8 on an archive's ``ledger/`` and ``blobs/``."""

    def __init__(
        self,
        files: ArchiveFiles,
        trusted_keys: Sequence[str],
        checkpoints: Sequence[str | os.PathLike[str]],
        jobs: int,
    ) -> None:
        super().__init__(files.root, trusted_keys, checkpoints, jobs)
        self.files = files
        self.has_tree = False
        # each line's shared envelope, or None (refused, or a faulty line beyond
        # MAX_FAULTY_KEPT: ``unkept`` is the first such line), packed as columns
        self.envs = EventColumns()
        self._pre: tuple[bytes, dict[str, Any]] | None = None  # the line the stream reads
        self.lines = 0
        self.hash_time = 0.0
        self.stored: list[FileCheckpoint] = []
        self.restored = False  # a public archive completed by its annex (docs/privacy.md)
        self.withheld_missing = 0  # referenced blobs a public archive withholds (not present)
        self.promised: list[tuple[int, int, str]] = []  # (size, seq, what) the protocol promises
        self.pool: ProcessPoolExecutor | None = None  # jobs > 1 on a log large enough
        self.total = 0  # lines of ledger/events.jsonl, counted when a pool may be used
        self.finish_hashes: Callable[[], None] = _nothing  # records the workers' file hashes

    @property
    def parallel(self) -> bool:
        """Whether the checks are split over forked processes.

        ``jobs > 1`` and a log of at least ``_MIN_PARALLEL_EVENTS`` lines (the pool's own
        threshold); a smaller archive is verified in one process, where its forks would cost
        more than they save.
        """
        from verify import _ledgerfile

        return self.jobs > 1 and self.total >= _ledgerfile._MIN_PARALLEL_EVENTS

    # ------------------------------------------------------------------ sources

    def _event_rows(self, con: object) -> Iterator[tuple[Any, ...]]:
        st = self.states["envelopes"]
        reader = EventReader(self.files)
        envs = self.envs
        for ev in reader:
            if reader.skim:  # not parsed: only hashed into the tree by the stream
                envs.append(None)
                yield ev.index, SKIMMED, None, None, ev.envelope, None, RECOMPUTED
                continue
            for problem in ev.problems:
                where = line_where(ev.index)
                st.fail(problem, ev.index, where=where)
            envs.append(ev.shared)
            env = ev.env
            if env is not None:
                kind, actor, etime = env.get("kind"), env.get("actor"), env.get("time")
                self._pre = (ev.envelope, env) if ev.canonical else None
            else:
                kind = actor = etime = None
                self._pre = None
            yield ev.index, kind, actor, etime, ev.envelope, ev.signature, RECOMPUTED
            if self.unkept_row == ev.index:  # the stream found it faulty, beyond the ones kept
                envs[-1] = None
                reader.skim = True  # and every later line is only hashed
        self._pre = None
        self.lines = reader.lines
        if reader.cut_problem is not None:
            st.fail(reader.cut_problem, reader.lines, where=EVENTS)
        if reader.tail_problem is not None:
            last = reader.lines - 1
            st.fail(reader.tail_problem, last, where=line_where(last))

    def _parsed(self, envelope: bytes) -> tuple[Any, bytes] | None:
        """The reader's parse of the line being streamed: its envelope bytes are canonical."""
        pre = self._pre
        if pre is not None and pre[0] is envelope:
            return pre[1], envelope
        return None

    _submit = _Run._submit_buffered  # its rows are handed over: no file to reopen

    # ------------------------------------------------------------------ run

    def run(self) -> Report:
        report = Report(path=self.path)
        try:
            return self._run(report)
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)
                self.pool = None

    def _run(self, report: Report) -> Report:
        st_file = self.states["file"]
        problem = self._walk_and_hash()
        if problem is not None:
            st_file.fail(problem[0], where=problem[1])
            report.checks = [st_file.check("")]
            return report
        self.stored = self._read_checkpoints()
        sizes = {s.cp.size for s in self.stored if s.cp is not None}
        sizes.update(p.cp.size for p in self.published if p.cp is not None)
        t0 = time.perf_counter()
        try:
            futures = self._stream(None, sizes, self.pool, self.total)
            for future in futures:
                self.crypto_failures.extend(future.result())
        except ArchiveFileError as exc:
            st_file.fail(f"{exc}: not an archive", where=EVENTS)
            report.checks = [st_file.check("")]
            return report
        stream_time = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.finish_hashes()  # the files the workers hashed meanwhile
        self.hash_time += time.perf_counter() - t0
        final_root = self.roots.get(self.size, hashlib.sha256(b"").digest())
        report.size = self.size
        report.root = final_root.hex()
        report.origin = self.registry.origin
        self._finish_signatures()
        self._check_key_files()
        t0 = time.perf_counter()
        self._check_blob_rows(self._blob_rows(), "is missing from blobs/")
        self.hash_time += time.perf_counter() - t0
        t0 = time.perf_counter()
        trusted = self._trusted_keys()
        self._check_stored_checkpoints(self.stored, trusted)  # type: ignore[arg-type]
        self._check_promised_checkpoints()
        self._check_published(trusted, final_root)
        checks = self._checks(self.stored, trusted)  # type: ignore[arg-type]
        report.checks = [self._archive_check(c) for c in checks]
        report.timings["ledger"] = stream_time + time.perf_counter() - t0
        report.timings["signatures"] = self.sig_time
        report.timings["hashing"] = self.hash_time
        return report

    def _walk_and_hash(self) -> tuple[str, str] | None:
        """Walk the archive and hash its files; (why it is not an archive, where) if it is not.

        With ``jobs > 1`` and a log of at least ``_MIN_PARALLEL_EVENTS`` lines, the worker
        pool starts here: ``ledger/events.jsonl`` is hashed in this process, every other file
        by the workers while this process streams the events (:attr:`finish_hashes` records
        their digests).
        """
        files = self.files
        t0 = time.perf_counter()
        files.walk()
        if files.problems and not files.complete:
            where, reason = files.problems[0]
            return f"{reason}: not verified", show(where)
        if EVENTS not in files.files:
            return f"{self.path}: {EVENTS} {files.describe(EVENTS)}: not an archive", EVENTS
        if self.jobs > 1 and files.complete:
            try:
                self.total = self._count_lines()
            except (ArchiveFileError, OSError):
                self.total = 0  # the hash below says why it cannot be read
            if self.parallel:
                self.pool = worker_pool(self.jobs)
        self.finish_hashes = files.hash_all(self.pool, now=(EVENTS,))
        self.hash_time += time.perf_counter() - t0
        if EVENTS in files.unhashed:
            return f"{EVENTS} {files.unhashed[EVENTS]}: not an archive", EVENTS
        return None

    def _check_promised_checkpoints(self) -> None:
        """Require the checkpoints the protocol promises (``docs/archive-format.md`` §4).

        ``ledger lock`` signs the registration checkpoint in the transaction's wake, right after
        ``protocol.locked`` (tree size = its seq + 1); every run session signs one right after
        its ``run.stopped`` (size = that seq + 1). The final one (after ``export.created``) is
        required by ``export-coverage``. Deleting one of them must not pass silently.
        """
        st = self.states["checkpoints"]
        sizes = {s.cp.size for s in self.stored if s.cp is not None}
        envs = self.envs
        for seq in sorted(envs.of_kind("protocol.locked") + envs.of_kind("run.stopped")):
            kind = envs.kind(seq)
            if kind == "protocol.locked":
                what = f"protocol.locked (seq {seq}): the registration checkpoint signed at lock"
            elif kind == "run.stopped":
                body = envs.body(seq)
                session = body.get("session") if type(body) is dict else None
                what = (
                    f"run.stopped (seq {seq}, run session of run.started seq {session}): the "
                    "checkpoint signed at the end of the session"
                )
            else:
                continue
            size = seq + 1
            self.promised.append((size, seq, what))
            if size not in sizes:
                name = f"ledger/checkpoints/{size:08d}.txt"
                why = self.files.describe(name)
                st.fail(
                    f"{name} {'is missing' if why == 'is readable' else why}: no checkpoint of "
                    f"tree size {size}, which {what} promises",
                    seq,
                    where=name,
                )

    def _count_lines(self) -> int:
        count = 0
        with self.files.open(EVENTS) as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                count += block.count(b"\n")
        return count

    def _archive_check(self, check: Check) -> Check:
        """Reword the SQLite-specific checks for an archive and name the line of a seq."""
        n = self.size
        if check.status is Status.PASS:
            reason = {
                "file": f"archive with {EVENTS} ({self.lines} lines)",
                "envelopes": f"{n} lines are canonical JSON holding canonical v1 envelopes",
                "leaf-hashes": f"{n} leaf hashes recomputed (an archive stores none)",
                "keys": f"{len(self.registry.keys)} key(s) registered by valid key events; "
                "ledger/keys/ holds exactly their vkeys",
                "tree": "no stored tree in an archive: roots are recomputed from the events",
                "blobs": f"{len(self.blob_refs)} referenced blob(s) present in blobs/ and hashing "
                "to their names",
                "checkpoints": f"{len(self.stored)} checkpoint file(s) parse, are validly signed "
                "and match the recomputed roots; the protocol's promised ones are present "
                f"({self._promised_summary()})",
            }.get(check.name, check.reason)
            return Check(check.name, check.status, reason, check.seq, check.where)
        if check.where is None and check.seq is not None and check.seq < n:
            return Check(check.name, check.status, check.reason, check.seq, line_where(check.seq))
        return check

    def _promised_summary(self) -> str:
        registration = [size for size, _, what in self.promised if what.startswith("protocol")]
        sessions = len(self.promised) - len(registration)
        reg = (
            f"registration size {registration[0]}"
            if len(registration) == 1
            else f"registration sizes {', '.join(map(str, registration))} (one per phase)"
            if registration
            else "no registration"
        )
        return f"{reg}, {sessions} run session(s)"

    def _blob_rows(self) -> Iterator[tuple[Any, Any, Any]]:
        """``(name, size, digest)`` of each regular file in ``blobs/`` (hashed once by the walk)."""
        files = self.files
        for rel in sorted(files.files):
            if rel.startswith("blobs/"):
                yield rel[6:], files.files[rel].size, files.hashes.get(rel)

    def _check_blob_rows(self, cur: Any, missing: str) -> None:
        st = self.states["blobs"]
        refs = self.blob_refs
        files = self.files
        seen: set[str] = set()
        unreferenced: list[str] = []
        for name, _size, digest in cur:
            ref = refs.get(name)
            rel = f"blobs/{name}"
            prefix = f"seq {ref[0]}: blob {ref[1]!r} ({rel})" if ref else show(rel)
            if ref is not None:
                seen.add(name)
            else:
                unreferenced.append(name)
            if digest is None:
                st.fail(f"{prefix} {files.describe(rel)}", ref[0] if ref else None, where=rel)
            elif digest != name:
                st.fail(
                    f"{prefix} does not hash to its name", ref[0] if ref else None, where=show(rel)
                )
        withheld = self._withheld_blobs()
        for address, (seq, bname) in refs.items():
            if address not in seen and address in withheld:
                self.withheld_missing += 1  # its address is signed; its content is withheld
            elif address not in seen:
                rel = f"blobs/{address}"
                why = missing if rel not in files.others else files.describe(rel)
                st.fail(f"seq {seq}: blob {bname!r} ({address}) {why}", seq, where=rel)
        if unreferenced:
            st.warn(
                f"{len(unreferenced)} file(s) in blobs/ are referenced by no event "
                f"(first: blobs/{show(unreferenced[0])})",
                where=f"blobs/{show(unreferenced[0])}",
            )

    def _withheld_blobs(self) -> set[str]:
        """The blobs a public archive withholds (docs/privacy.md); none once restored."""
        if self.restored:
            return set()
        from verify._privacy import privacy_of

        privacy = privacy_of(self.envs)
        return privacy.blobs if privacy is not None else set()

    def _read_checkpoints(self) -> list[FileCheckpoint]:
        files = self.files
        out: list[FileCheckpoint] = []
        if "ledger/checkpoints" not in files.dirs:
            why = files.describe("ledger/checkpoints").replace("regular file", "directory")
            self.states["checkpoints"].fail(
                f"ledger/checkpoints/ {why if why != 'is readable' else 'is missing'}",
                where="ledger/checkpoints",
            )
            return out
        for rel in sorted(files.files):
            if rel.startswith(_CHECKPOINTS) and "/" not in rel[len(_CHECKPOINTS) :]:
                data, why = files.get(rel)
                out.append(FileCheckpoint(rel[len(_CHECKPOINTS) :], data, why))
        for rel, what in sorted(files.others.items()):
            if rel.startswith(_CHECKPOINTS):
                self.states["checkpoints"].fail(f"{show(rel)} {what}", where=show(rel))
        return out

    def _check_key_files(self) -> None:
        st = self.states["keys"]
        files = self.files
        present: dict[str, tuple[bytes | None, str]] = {}
        for rel in sorted(files.files):
            if rel.startswith(_KEYS) and "/" not in rel[len(_KEYS) :]:
                present[rel[len(_KEYS) :]] = files.get(rel)
        for rel, what in sorted(files.others.items()):
            if rel.startswith(_KEYS):
                st.fail(f"{show(rel)} {what}", where=show(rel), rank=1)
        for actor, rec in self.registry.keys.items():
            name = re.sub(r"[/:+]", "_", actor) + ".vkey"
            data, why = present.pop(name, (None, ""))
            if data is None:
                st.fail(
                    (why or f"ledger/keys/{name} {files.describe(_KEYS + name)}")
                    + f" (key {actor} registered at seq {rec.added_seq})",
                    rec.added_seq,
                    where=f"ledger/keys/{name}",
                    rank=1,
                )
            elif data != (rec.vkey.text + "\n").encode("utf-8"):
                st.fail(
                    f"ledger/keys/{name} is not the vkey registered at seq {rec.added_seq} "
                    "followed by a newline",
                    rec.added_seq,
                    where=f"ledger/keys/{name}",
                    rank=1,
                )
        for name in sorted(present):
            st.fail(
                f"ledger/keys/{show(name)} is the vkey of no registered key",
                where=f"ledger/keys/{show(name)}",
                rank=1,
            )
