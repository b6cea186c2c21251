"""The ledger-level checks (``docs/ledger-format.md`` §8) on an archive's files.

``ledger/events.jsonl``, ``ledger/checkpoints/``, ``ledger/keys/`` and ``blobs/`` take the place of
the SQLite tables; the engine is the one that verifies a ledger file (:mod:`verify._ledgerfile`).
The walk over the archive (every file hashed once) happens here too.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from verify._archive.common import EVENTS, line_where
from verify._canonical import CanonicalError, Canonicalizer, canonical_json
from verify._errors import CheckpointFormatError, NoteError
from verify._ledgerfile import _Run, _verify_items
from verify._note import Checkpoint, parse_checkpoint, parse_note
from verify._report import Check, Report, Status

__all__ = ["ArchiveRun", "FileCheckpoint"]

_CHECKPOINT_NAME = re.compile(r"^([0-9]{8})\.txt$")
_ENVELOPE_PREFIX = b'{"envelope":'
_SIGNATURE_SEP = b',"signature":"'


class FileCheckpoint:
    """A checkpoint file in ``ledger/checkpoints/``, shaped like a stored checkpoint row."""

    __slots__ = (
        "cp", "created", "id", "label", "note", "problem", "root_col", "size_col", "where"
    )  # fmt: skip

    def __init__(self, name: str, data: bytes) -> None:
        self.id = name
        self.where = f"ledger/checkpoints/{name}"
        self.created = None
        self.cp: Checkpoint | None = None
        self.problem: str | None = None
        self.note: str | None = None
        match = _CHECKPOINT_NAME.match(name)
        self.size_col: int | None = int(match.group(1)) if match else None
        self.root_col: bytes | None = None
        size: object = self.size_col
        try:
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
        root: Path,
        trusted_keys: Sequence[str],
        checkpoints: Sequence[str | os.PathLike[str]],
        jobs: int,
    ) -> None:
        super().__init__(str(root), trusted_keys, checkpoints, jobs)
        self.root = root
        self.has_tree = False
        self.envs: list[Any] = []  # the parsed envelope of each line (None when unreadable)
        self.lines = 0
        self.file_hashes: dict[str, str] = {}
        self.file_sizes: dict[str, int] = {}
        self.hash_time = 0.0
        self.stored: list[FileCheckpoint] = []
        self.promised: list[tuple[int, int, str]] = []  # (size, seq, what) the protocol promises

    # ------------------------------------------------------------------ sources

    def _event_rows(self, con: object) -> Iterator[tuple[Any, ...]]:
        st = self.states["envelopes"]
        path = self.root / EVENTS
        with open(path, "rb") as fh:
            data = fh.read()
        if data and not data.endswith(b"\n"):
            last = data.count(b"\n")
            st.fail(
                f"{EVENTS} line {last + 1}: the last line does not end in a newline",
                last,
                where=f"{EVENTS} line {last + 1}",
            )
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        self.lines = len(lines)
        parse = Canonicalizer().parse
        envs = self.envs
        sha256 = hashlib.sha256
        for index, line in enumerate(lines):
            where = line_where(index)
            envelope: bytes = line
            signature: Any = None
            env: Any = None
            try:
                obj, canonical = parse(line)
            except CanonicalError as exc:
                st.fail(f"{where}: not valid JSON for JCS: {exc}", index, where=where)
                envs.append(None)
                yield index, None, None, None, line, None, sha256(b"\x00" + line).digest()
                continue
            if type(obj) is not dict or set(obj) != {"envelope", "signature"}:
                st.fail(
                    f"{where}: a line must be an object with exactly the members 'envelope' and "
                    "'signature'",
                    index,
                    where=where,
                )
            if type(obj) is dict:
                env = obj.get("envelope")
                sig_text = obj.get("signature")
                if type(sig_text) is str:
                    try:
                        raw = base64.b64decode(sig_text.encode("ascii"), validate=True)
                        if base64.b64encode(raw).decode("ascii") == sig_text:
                            signature = raw
                    except (binascii.Error, UnicodeEncodeError, ValueError):
                        pass
            if canonical != line:
                st.fail(
                    f"{where} (seq {index}): the line is not the RFC 8785 canonical JSON of its "
                    "content (whitespace, member order, escaping or number form changed)",
                    index,
                    where=where,
                )
            if type(env) is dict:
                if canonical == line and line.startswith(_ENVELOPE_PREFIX):
                    envelope = line[len(_ENVELOPE_PREFIX) : line.rindex(_SIGNATURE_SEP)]
                else:
                    try:
                        envelope = canonical_json(env)
                    except CanonicalError:
                        envelope = line
            envs.append(env if type(env) is dict else None)
            if type(env) is dict:
                kind, actor, etime = env.get("kind"), env.get("actor"), env.get("time")
            else:
                kind = actor = etime = None
            yield (
                index,
                kind,
                actor,
                etime,
                envelope,
                signature,
                sha256(b"\x00" + envelope).digest(),
            )

    def _submit(
        self,
        pool: ProcessPoolExecutor,
        lo: int,
        hi: int,
        keys: dict[str, bytes],
        overrides: dict[int, str | None],
    ) -> Future[list[tuple[int, str]]]:
        items = [item for item in self.sig_buffer if lo <= item[0] <= hi]
        self.sig_buffer = [item for item in self.sig_buffer if item[0] > hi]
        return pool.submit(_verify_items, items, keys, overrides)

    # ------------------------------------------------------------------ run

    def run(self) -> Report:
        report = Report(path=self.path)
        st_file = self.states["file"]
        events = self.root / EVENTS
        if not events.is_file():
            st_file.fail(f"{self.root}: {EVENTS} is missing: not an archive", where=EVENTS)
            report.checks = [st_file.check("")]
            return report
        t0 = time.perf_counter()
        self._hash_files()
        self.hash_time += time.perf_counter() - t0
        self.stored = self._read_checkpoints()
        sizes: set[int] = set()
        for s in self.stored:
            if s.cp is not None:
                sizes.add(s.cp.size)
        for p in self.published:
            if p.cp is not None:
                sizes.add(p.cp.size)
        pool: ProcessPoolExecutor | None = None
        total = self._count_lines(events)
        from verify import _ledgerfile

        if self.jobs > 1 and total >= _ledgerfile._MIN_PARALLEL_EVENTS:
            import multiprocessing

            pool = ProcessPoolExecutor(
                max_workers=self.jobs, mp_context=multiprocessing.get_context("spawn")
            )
        t0 = time.perf_counter()
        try:
            futures = self._stream(None, sizes, pool, total)
            for future in futures:
                self.crypto_failures.extend(future.result())
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        stream_time = time.perf_counter() - t0
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

    def _check_promised_checkpoints(self) -> None:
        """Require the checkpoints the protocol promises (``docs/archive-format.md`` §4).

        ``ledger lock`` signs the registration checkpoint in the transaction's wake, right after
        ``protocol.locked`` (tree size = its seq + 1); every run session signs one right after
        its ``run.stopped`` (size = that seq + 1). The final one (after ``export.created``) is
        required by ``export-coverage``. Deleting one of them must not pass silently.
        """
        st = self.states["checkpoints"]
        sizes = {s.cp.size for s in self.stored if s.cp is not None}
        for seq, env in enumerate(self.envs):
            kind = env.get("kind") if env is not None else None
            if kind == "protocol.locked":
                what = f"protocol.locked (seq {seq}): the registration checkpoint signed at lock"
            elif kind == "run.stopped":
                body = env.get("body") if env is not None else None
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
                st.fail(
                    f"{name} is missing: no checkpoint of tree size {size}, which {what} "
                    "promises",
                    seq,
                    where=name,
                )

    @staticmethod
    def _count_lines(path: Path) -> int:
        count = 0
        with open(path, "rb") as fh:
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
        reg = f"registration size {registration[0]}" if registration else "no registration"
        return f"{reg}, {sessions} run session(s)"

    def _hash_files(self) -> None:
        root = self.root
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in filenames:
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                if os.path.islink(full) or not os.path.isfile(full):
                    self.file_hashes[rel] = "not a regular file"
                    continue
                h = hashlib.sha256()
                size = 0
                with open(full, "rb") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        h.update(block)
                        size += len(block)
                self.file_hashes[rel] = h.hexdigest()
                self.file_sizes[rel] = size

    def _blob_rows(self) -> Iterator[tuple[Any, Any, Any]]:
        """``(name, size, digest)`` of every file in ``blobs/`` (hashed once, on reading)."""
        for rel in sorted(self.file_hashes):
            if rel.startswith("blobs/"):
                yield rel[6:], self.file_sizes.get(rel), self.file_hashes[rel]

    def _check_blob_rows(self, cur: Any, missing: str) -> None:
        st = self.states["blobs"]
        refs = self.blob_refs
        seen: set[str] = set()
        unreferenced: list[str] = []
        for name, _size, digest in cur:
            ref = refs.get(name)
            prefix = f"seq {ref[0]}: blob {ref[1]!r} (blobs/{name})" if ref else f"blobs/{name}"
            if ref is not None:
                seen.add(name)
            else:
                unreferenced.append(name)
            if digest != name:
                st.fail(f"{prefix} does not hash to its name", ref[0] if ref else None,
                        where=f"blobs/{name}")  # fmt: skip
        for address, (seq, bname) in refs.items():
            if address not in seen:
                st.fail(f"seq {seq}: blob {bname!r} ({address}) {missing}", seq,
                        where=f"blobs/{address}")  # fmt: skip
        if unreferenced:
            st.warn(
                f"{len(unreferenced)} file(s) in blobs/ are referenced by no event "
                f"(first: blobs/{unreferenced[0]})",
                where=f"blobs/{unreferenced[0]}",
            )

    def _read_checkpoints(self) -> list[FileCheckpoint]:
        folder = self.root / "ledger" / "checkpoints"
        out: list[FileCheckpoint] = []
        if not folder.is_dir():
            self.states["checkpoints"].fail(
                "ledger/checkpoints/ is missing", where="ledger/checkpoints"
            )
            return out
        for entry in sorted(folder.iterdir()):
            if entry.is_file():
                out.append(FileCheckpoint(entry.name, entry.read_bytes()[: 1 << 20]))
        return out

    def _check_key_files(self) -> None:
        st = self.states["keys"]
        folder = self.root / "ledger" / "keys"
        present: dict[str, bytes] = {}
        if folder.is_dir():
            present = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
        for actor, rec in self.registry.keys.items():
            name = re.sub(r"[/:+]", "_", actor) + ".vkey"
            data = present.pop(name, None)
            if data is None:
                st.fail(
                    f"ledger/keys/{name} is missing (key {actor} registered at seq "
                    f"{rec.added_seq})",
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
                f"ledger/keys/{name} is the vkey of no registered key",
                where=f"ledger/keys/{name}",
                rank=1,
            )
