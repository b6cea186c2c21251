"""Verifies an exported archive directory (``docs/archive-format.md`` §4), from the docs alone.

The ledger-level checks of ``docs/ledger-format.md`` §8 run on ``ledger/events.jsonl``,
``ledger/checkpoints/`` and ``blobs/`` through the same engine as a SQLite ledger file; then the
archive checks (``manifest``, ``export-coverage``, ``protocol``, ``schedule``, ``requests``,
``outcomes``, ``blinding``, ``derived``) and, when ``verify._science`` is present, ``rescore`` and
``reanalysis``.
"""

from __future__ import annotations

import base64
import binascii
import csv
import fnmatch
import hashlib
import hmac
import io
import json
import os
import re
import time
import tomllib
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from verify._canonical import CanonicalError, Canonicalizer, canonical_json
from verify._envelope import is_hex64
from verify._errors import CheckpointFormatError, NoteError
from verify._ledgerfile import _Run, _State, _verify_items
from verify._note import Checkpoint, parse_checkpoint, parse_note
from verify._report import Check, Report, Status

__all__ = ["verify_archive"]

EVENTS = "ledger/events.jsonl"
MANIFEST = "MANIFEST.sha256"
_CHECKPOINT_NAME = re.compile(r"^([0-9]{8})\.txt$")
_MANIFEST_LINE = re.compile(r"^([0-9a-f]{64})  (.+)$")
_TRIAL_KINDS = frozenset(
    {"trial.requested", "trial.responded", "trial.failed", "trial.scored", "batch.submitted"}
)
_ENVELOPE_PREFIX = b'{"envelope":'
_SIGNATURE_SEP = b',"signature":"'


def _line_where(seq: int) -> str:
    return f"{EVENTS} line {seq + 1}"


def _sha_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------------------------------
# the ledger-level checks on the archive's files


class _FileCheckpoint:
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


class _ArchiveRun(_Run):
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
        self.stored: list[_FileCheckpoint] = []
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
            where = _line_where(index)
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
            return Check(check.name, check.status, check.reason, check.seq, _line_where(check.seq))
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

    def _read_checkpoints(self) -> list[_FileCheckpoint]:
        folder = self.root / "ledger" / "checkpoints"
        out: list[_FileCheckpoint] = []
        if not folder.is_dir():
            self.states["checkpoints"].fail(
                "ledger/checkpoints/ is missing", where="ledger/checkpoints"
            )
            return out
        for entry in sorted(folder.iterdir()):
            if entry.is_file():
                out.append(_FileCheckpoint(entry.name, entry.read_bytes()[: 1 << 20]))
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


# --------------------------------------------------------------------------------------------------
# the archive checks


class _Archive:
    """What the archive checks share: the events, the files and their hashes, the blobs."""

    def __init__(self, run: _ArchiveRun) -> None:
        self.root = run.root
        self.hashes = run.file_hashes
        self.envs: list[dict[str, Any] | None] = run.envs
        self.n = len(run.envs)
        self.checkpoint_sizes = {s.cp.size for s in run.stored if s.cp is not None}
        self.by_kind: dict[str, list[int]] = {}
        for seq, env in enumerate(self.envs):
            if env is not None and type(env.get("kind")) is str:
                self.by_kind.setdefault(env["kind"], []).append(seq)
        locked = self.of_kind("protocol.locked")
        self.protocol_seq: int | None = locked[0] if locked else None
        self.protocol: dict[str, Any] = self.body(locked[0]) if locked else {}
        self.locked_files: dict[str, tuple[str, str, int]] = {}  # path -> (role, sha256, seq)
        for seq in self.of_kind("artifact.locked"):
            body = self.body(seq)
            path, role, digest = body.get("path"), body.get("role"), body.get("sha256")
            if type(path) is str and type(role) is str and type(digest) is str:
                self.locked_files.setdefault(path, (role, digest, seq))
        self._arm_texts: dict[str, str] | None = None
        self._arm_problem: str | None = None
        self._blob_cache: dict[str, bytes | None] = {}

    def of_kind(self, kind: str) -> list[int]:
        return self.by_kind.get(kind, [])

    def body(self, seq: int) -> dict[str, Any]:
        env = self.envs[seq]
        body = env.get("body") if env is not None else None
        return body if type(body) is dict else {}

    def blob_ref(self, seq: int, name: str) -> str | None:
        env = self.envs[seq]
        blobs = env.get("blobs") if env is not None else None
        digest = blobs.get(name) if type(blobs) is dict else None
        return digest if type(digest) is str else None

    def blob(self, digest: str | None) -> bytes | None:
        """The bytes of ``blobs/<digest>`` if present and hashing to its name."""
        if digest is None or not is_hex64(digest):
            return None
        if digest in self._blob_cache:
            return self._blob_cache[digest]
        path = self.root / "blobs" / digest
        data: bytes | None = None
        if self.hashes.get(f"blobs/{digest}") == digest:
            try:
                data = path.read_bytes()
            except OSError:
                data = None
            if data is not None and _sha_hex(data) != digest:
                data = None
        if data is not None and len(data) < (1 << 22):
            self._blob_cache[digest] = data
        return data

    def file(self, rel: str) -> bytes | None:
        try:
            return (self.root / rel).read_bytes()
        except OSError:
            return None

    def locked_blob(self, path: str) -> bytes | None:
        entry = self.locked_files.get(path)
        if entry is None:
            return None
        return self.blob(self.blob_ref(entry[2], "content"))

    def current_manifest(self) -> dict[str, tuple[str, int]]:
        """Locked path -> (sha256, seq of the event that set it): as locked, then amended."""
        out: dict[str, tuple[str, int]] = {}
        manifest = self.protocol.get("manifest")
        if type(manifest) is dict:
            for path, digest in manifest.items():
                out[path] = (str(digest), self.protocol_seq or 0)
        for seq in self.of_kind("protocol.amended"):
            changes = self.body(seq).get("changes")
            for change in changes if type(changes) is list else []:
                if type(change) is dict and type(change.get("path")) is str:
                    out[change["path"]] = (str(change.get("sha256")), seq)
        return out

    def spec(self) -> dict[str, Any] | None:
        """The locked ``study.toml`` (role ``spec``) parsed, or ``None``."""
        for path, (role, _, _) in self.locked_files.items():
            if role == "spec":
                data = self.locked_blob(path)
                if data is None:
                    return None
                try:
                    return tomllib.loads(data.decode("utf-8"))
                except (UnicodeDecodeError, tomllib.TOMLDecodeError):
                    return None
        return None

    def arm_texts(self) -> tuple[dict[str, str], str | None]:
        """Each locked arm's composed prompt, from the locked spec and component files."""
        if self._arm_texts is not None:
            return self._arm_texts, self._arm_problem
        texts: dict[str, str] = {}
        problem: str | None = None
        spec = self.spec()
        arms = self.protocol.get("arms")
        components = spec.get("components") if spec is not None else None
        if type(arms) is not dict:
            problem = "protocol.locked has no arms object"
        elif type(components) is not dict:
            problem = "the locked study.toml cannot be read or has no [components] table"
        else:
            for arm, info in arms.items():
                names = info.get("components") if type(info) is dict else None
                if type(names) is not list:
                    problem = problem or f"arm {arm} has no component list in protocol.locked"
                    continue
                parts: list[str] = []
                for name in names:
                    path = components.get(name)
                    data = self.locked_blob(path) if type(path) is str else None
                    if data is None:
                        problem = problem or (
                            f"arm {arm}: component {name!r} is not a locked file with a blob"
                        )
                        break
                    try:
                        parts.append(data.decode("utf-8").rstrip("\n"))
                    except UnicodeDecodeError:
                        problem = problem or f"arm {arm}: component {name!r} is not UTF-8"
                        break
                else:
                    texts[arm] = "\n\n".join(parts) + "\n"
        self._arm_texts, self._arm_problem = texts, problem
        return texts, problem

    def schedule(self) -> list[str]:
        """The trial ids in locked execution order (``docs/randomization.md``)."""
        design = self.protocol.get("design")
        arms = self.protocol.get("arms")
        stimuli = self.protocol.get("stimuli")
        if type(design) is not dict or type(arms) is not dict or type(stimuli) is not list:
            return []
        seed, reps = design.get("seed"), design.get("replicates")
        if type(reps) is not int or isinstance(seed, (dict, list, bool)) or seed is None:
            return []
        seed_text = seed if type(seed) is str else str(seed)
        ids = [f"{a}|{s}|{r}" for a in arms for s in stimuli for r in range(1, reps + 1)]
        return sorted(ids, key=lambda t: hashlib.sha256(f"{seed_text}|{t}".encode()).hexdigest())

    def codes(self, secret: bytes) -> dict[str, str]:
        arms = self.protocol.get("arms")
        return {
            arm: hmac.new(secret, arm.encode("utf-8"), hashlib.sha256).hexdigest()[:12]
            for arm in (arms if type(arms) is dict else {})
        }

    def revealed_codes(self) -> dict[str, str]:
        """The arm codes opened by ``blinding.revealed`` (recomputed from its secret), or {}."""
        revealed = self.of_kind("blinding.revealed")
        if not revealed:
            return {}
        secret_hex = self.body(revealed[-1]).get("secret_hex")
        try:
            secret = bytes.fromhex(secret_hex) if type(secret_hex) is str else None
        except ValueError:
            secret = None
        return self.codes(secret) if secret is not None else {}


def _read_csv(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))


def _check_manifest(a: _Archive) -> Check:
    st = _State("manifest")
    data = a.file(MANIFEST)
    if data is None:
        st.fail(f"{MANIFEST} is missing", where=MANIFEST)
        return st.check("")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        st.fail(f"{MANIFEST} is not UTF-8 (byte {exc.start})", where=MANIFEST)
        return st.check("")
    if text and not text.endswith("\n"):
        st.fail(f"{MANIFEST}: the last line does not end in a newline", where=MANIFEST)
    listed: dict[str, tuple[str, int]] = {}
    previous: bytes | None = None
    for number, line in enumerate(text.split("\n")[:-1] if text else [], start=1):
        where = f"{MANIFEST} line {number}"
        match = _MANIFEST_LINE.match(line)
        if match is None:
            st.fail(f"{where} is malformed: expected '<64 hex>  <path>'", where=where)
            continue
        digest, path = match.groups()
        if path in listed:
            st.fail(f"{where}: {path} is listed twice", where=where)
            continue
        key = path.encode("utf-8")
        if previous is not None and key < previous:
            st.fail(f"{where}: {path} is out of order (paths are sorted by bytes)", where=where)
        previous = key
        listed[path] = (digest, number)
    present = {p: h for p, h in a.hashes.items() if p != MANIFEST}
    for path, (digest, number) in listed.items():
        have = present.get(path)
        if have is None:
            st.fail(f"{path} is listed ({MANIFEST} line {number}) but missing", where=path)
        elif have != digest:
            st.fail(
                f"{path}: SHA-256 {have} differs from {MANIFEST} line {number} ({digest})",
                where=path,
            )
    for path in sorted(set(present) - set(listed)):
        st.fail(f"{path} is present but not listed in {MANIFEST}", where=path)
    return st.check(f"{len(listed)} files listed, present and matching their SHA-256")


def _check_export(a: _Archive) -> Check:
    st = _State("export-coverage")
    exports = a.of_kind("export.created")
    if not exports:
        st.fail("the ledger has no export.created event", where=EVENTS)
        return st.check("")
    seq = exports[-1]
    body = a.body(seq)
    if seq != a.n - 1:
        st.fail(
            f"seq {seq}: export.created is not the last event ({a.n - 1 - seq} event(s) follow it, "
            f"first seq {seq + 1} {a.envs[seq + 1] and a.envs[seq + 1].get('kind')!r})",  # type: ignore[union-attr]
            seq + 1,
            where=_line_where(seq + 1),
        )
    if body.get("archive_format") != 1:
        st.fail(f"seq {seq}: archive_format is {body.get('archive_format')!r}, not 1", seq)
    study = a.protocol.get("study")
    if study is not None and body.get("study") != study:
        st.fail(f"seq {seq}: study {body.get('study')!r} is not the locked study {study!r}", seq)
    files = body.get("files")
    if type(files) is not dict:
        st.fail(f"seq {seq}: export.created has no files object", seq)
        return st.check("")
    covered = {
        p: h
        for p, h in a.hashes.items()
        if p != MANIFEST and not p.startswith("ledger/") and not p.startswith("blobs/")
    }
    blob_names = sorted(p[len("blobs/") :] for p in a.hashes if p.startswith("blobs/"))
    for name in blob_names:
        if a.hashes[f"blobs/{name}"] != name:
            st.fail(f"blobs/{name}: content SHA-256 is {a.hashes['blobs/' + name]}, not its name",
                    seq, where=f"blobs/{name}")  # fmt: skip
    blobs = body.get("blobs")
    listing = hashlib.sha256("".join(f"{n}\n" for n in blob_names).encode("ascii")).hexdigest()
    if type(blobs) is not dict:
        st.fail(f"seq {seq}: export.created has no blobs object", seq)
    elif blobs.get("count") != len(blob_names) or blobs.get("listing_sha256") != listing:
        st.fail(
            f"blobs/ holds {len(blob_names)} blobs (listing SHA-256 {listing}); export.created "
            f"(seq {seq}) recorded {blobs.get('count')!r} ({blobs.get('listing_sha256')!r}): "
            "a blob was added or removed",
            seq,
            where="blobs/",
        )
    for path in sorted(files):
        have = covered.get(path)
        if have is None:
            st.fail(f"{path} is covered by export.created (seq {seq}) but missing", seq,
                    where=path)  # fmt: skip
        elif have != files[path]:
            st.fail(
                f"{path}: SHA-256 {have} differs from export.created (seq {seq}): {files[path]}",
                seq,
                where=path,
            )
    for path in sorted(set(covered) - set(files)):
        st.fail(f"{path} is not covered by export.created (seq {seq})", seq, where=path)
    if a.n not in a.checkpoint_sizes:
        st.fail(
            f"no checkpoint in ledger/checkpoints/ has size {a.n}, so none covers export.created "
            f"(seq {seq})",
            seq,
            where="ledger/checkpoints",
        )
    return st.check(
        f"export.created (seq {seq}, the last event) covers the {len(files)} files outside "
        f"ledger/ and blobs/ with matching SHA-256 and the {len(blob_names)} blobs by their "
        f"listing; checkpoint {a.n:08d} covers it"
    )


def _archive_path(locked_path: str, role: str) -> str:
    name = locked_path.rsplit("/", 1)[-1]
    if role == "stimulus":
        return f"stimuli/{name}"
    if role == "truth":
        return f"truth/{name}"
    return f"protocol/{locked_path}"


def _check_protocol(a: _Archive) -> Check:
    st = _State("protocol")
    locked = a.of_kind("protocol.locked")
    if len(locked) != 1:
        where = _line_where(locked[1]) if len(locked) > 1 else EVENTS
        st.fail(
            f"the ledger has {len(locked)} protocol.locked events; exactly one is required"
            + (f" (second at seq {locked[1]})" if len(locked) > 1 else ""),
            locked[1] if len(locked) > 1 else None,
            where=where,
        )
        if not locked:
            return st.check("")
    pseq = locked[0]
    requested = a.of_kind("trial.requested")
    if requested and requested[0] < pseq:
        st.fail(
            f"seq {requested[0]}: trial.requested comes before protocol.locked (seq {pseq})",
            requested[0],
        )
    for kind in ("artifact.locked",):
        for seq in a.of_kind(kind):
            if seq > pseq:
                st.fail(f"seq {seq}: artifact.locked after protocol.locked (seq {pseq})", seq)
    # artifacts and the locked manifest
    manifest = a.protocol.get("manifest")
    if type(manifest) is not dict:
        st.fail(f"seq {pseq}: protocol.locked has no manifest object", pseq)
        manifest = {}
    for path, (_role, digest, seq) in sorted(a.locked_files.items()):
        body = a.body(seq)
        ref = a.blob_ref(seq, "content")
        if ref != digest:
            st.fail(f"seq {seq}: artifact.locked {path}: content blob is not its sha256", seq)
        elif a.blob(ref) is None:
            st.fail(f"seq {seq}: artifact.locked {path}: blob {ref} missing or altered", seq,
                    where=f"blobs/{ref}")  # fmt: skip
        elif body.get("size") != len(a.blob(ref) or b""):
            st.fail(f"seq {seq}: artifact.locked {path}: size differs from the blob's", seq)
        if manifest.get(path) != digest:
            st.fail(
                f"seq {seq}: artifact.locked {path} ({digest}) differs from the protocol.locked "
                f"manifest (seq {pseq}): {manifest.get(path)!r}",
                seq,
            )
    for path in sorted(set(manifest) - set(a.locked_files)):
        st.fail(f"seq {pseq}: manifest path {path} has no artifact.locked event", pseq)
    # amendments
    amendable = a.protocol.get("amendable")
    patterns = [p for p in amendable if type(p) is str] if type(amendable) is list else []
    running = {p: str(h) for p, h in manifest.items()}
    for seq in a.of_kind("protocol.amended"):
        if seq < pseq:
            st.fail(f"seq {seq}: protocol.amended before protocol.locked", seq)
        changes = a.body(seq).get("changes")
        for change in changes if type(changes) is list else [None]:
            if type(change) is not dict or type(change.get("path")) is not str:
                st.fail(f"seq {seq}: protocol.amended change is not an object with a path", seq)
                continue
            path = change["path"]
            if not any(fnmatch.fnmatch(path, p) for p in patterns):
                st.fail(f"seq {seq}: protocol.amended changes {path}, which is not amendable",
                        seq)  # fmt: skip
            if change.get("previous_sha256") != running.get(path):
                st.fail(f"seq {seq}: protocol.amended {path}: previous_sha256 is not the "
                        "hash in force", seq)  # fmt: skip
            blob_name = change.get("blob")
            ref = a.blob_ref(seq, blob_name) if type(blob_name) is str else None
            if ref != change.get("sha256") or a.blob(ref) is None:
                st.fail(f"seq {seq}: protocol.amended {path}: blob missing or not its sha256",
                        seq)  # fmt: skip
            running[path] = str(change.get("sha256"))
    current = a.current_manifest()
    # protocol/files.csv and every locked file
    files_csv = a.file("protocol/files.csv")
    listed: set[str] = set()
    if files_csv is None:
        st.fail("protocol/files.csv is missing", where="protocol/files.csv")
    else:
        try:
            rows = _read_csv(files_csv)
        except (UnicodeDecodeError, csv.Error) as exc:
            rows = []
            st.fail(f"protocol/files.csv cannot be read: {exc}", where="protocol/files.csv")
        if rows and rows[0] != ["locked_path", "role", "sha256", "archive_path"]:
            st.fail("protocol/files.csv line 1: header is not locked_path,role,sha256,"
                    "archive_path", where="protocol/files.csv line 1")  # fmt: skip
        for number, row in enumerate(rows[1:], start=2):
            where = f"protocol/files.csv line {number}"
            if len(row) != 4:
                st.fail(f"{where}: expected 4 cells, found {len(row)}", where=where)
                continue
            path, role, digest, archive_path = row
            listed.add(path)
            entry = a.locked_files.get(path)
            want = current.get(path)
            if entry is None or want is None:
                st.fail(f"{where}: {path} is not a locked file", where=where)
                continue
            if role != entry[0]:
                st.fail(f"{where}: role {role!r} is not the locked role {entry[0]!r}", where=where)
            if digest != want[0]:
                st.fail(f"{where}: {path}: sha256 {digest} is not the locked (or amended) "
                        f"{want[0]} (seq {want[1]})", want[1], where=where)  # fmt: skip
            if archive_path != _archive_path(path, entry[0]):
                st.fail(f"{where}: archive_path {archive_path!r} should be "
                        f"{_archive_path(path, entry[0])!r}", where=where)  # fmt: skip
    for path in sorted(set(a.locked_files) - listed):
        st.fail(f"protocol/files.csv does not list the locked file {path}",
                where="protocol/files.csv")  # fmt: skip
    expected_files: set[str] = {"protocol/files.csv", "protocol/protocol.json"}
    for path, (role, _, seq) in sorted(a.locked_files.items()):
        target = _archive_path(path, role)
        expected_files.add(target)
        want = current.get(path, ("", seq))
        have = a.hashes.get(target)
        if have is None:
            st.fail(f"{target} (locked {path}) is missing", want[1], where=target)
        elif have != want[0]:
            st.fail(
                f"{target}: SHA-256 {have} is not the "
                f"{'locked' if want[1] == pseq else 'amended'} hash {want[0]} of {path} "
                f"(seq {want[1]})",
                want[1],
                where=target,
            )
    # composed arms
    texts, problem = a.arm_texts()
    if problem is not None:
        st.fail(f"seq {pseq}: cannot compose the arms: {problem}", pseq)
    arms = a.protocol.get("arms")
    for arm, text in sorted(texts.items()):
        info = arms.get(arm) if type(arms) is dict else None
        digest = _sha_hex(text.encode("utf-8"))
        if type(info) is dict and info.get("sha256") != digest:
            st.fail(
                f"seq {pseq}: arm {arm}: the composed text hashes to {digest}, protocol.locked "
                f"says {info.get('sha256')}",
                pseq,
            )
        target = f"protocol/arms/{arm}.txt"
        expected_files.add(target)
        if a.hashes.get(target) != digest:
            st.fail(f"{target} is not the composed text of arm {arm}", where=target)
    # protocol.json
    data = a.file("protocol/protocol.json")
    if data is None:
        st.fail("protocol/protocol.json is missing", where="protocol/protocol.json")
    else:
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            doc = None
        want_doc = dict(a.protocol)
        want_doc["seq"] = pseq
        if doc != want_doc:
            st.fail(
                f"protocol/protocol.json differs from the protocol.locked body (seq {pseq})",
                pseq,
                where="protocol/protocol.json",
            )
    for path in sorted(a.hashes):
        if path.split("/", 1)[0] in ("protocol", "stimuli", "truth") and path not in expected_files:
            st.fail(f"{path} is not a locked file, arm text or protocol record", where=path)
    return st.check(
        f"protocol.locked (seq {pseq}) precedes every request; {len(a.locked_files)} locked "
        f"files match their locked or amended hash; {len(texts)} arm texts and protocol.json "
        "match"
    )


def _check_schedule(a: _Archive) -> Check:
    st = _State("schedule")
    pseq = a.protocol_seq
    if pseq is None:
        st.fail("no protocol.locked: the schedule cannot be recomputed")
        return st.check("")
    ids = a.schedule()
    if not ids:
        st.fail(f"seq {pseq}: protocol.locked lacks a usable design, arms or stimuli", pseq)
        return st.check("")
    sched = "".join(t + "\n" for t in ids).encode("utf-8")
    digest = _sha_hex(sched)
    if a.protocol.get("schedule_sha256") != digest:
        st.fail(
            f"seq {pseq}: the recomputed schedule hashes to {digest}, but protocol.locked "
            f"schedule_sha256 is {a.protocol.get('schedule_sha256')}",
            pseq,
        )
    if a.protocol.get("trials") != len(ids):
        st.fail(f"seq {pseq}: trials is {a.protocol.get('trials')!r}, the design has {len(ids)}",
                pseq)  # fmt: skip
    ref = a.blob_ref(pseq, "schedule")
    blob = a.blob(ref)
    if blob is None:
        st.fail(f"seq {pseq}: the schedule blob is missing or altered", pseq,
                where=f"blobs/{ref}")  # fmt: skip
    elif blob != sched:
        st.fail(f"seq {pseq}: the schedule blob is not the recomputed schedule", pseq,
                where=f"blobs/{ref}")  # fmt: skip
    position = {t: i for i, t in enumerate(ids, start=1)}
    # trials/schedule.csv
    codes = a.revealed_codes()
    data = a.file("trials/schedule.csv")
    if data is None:
        st.fail("trials/schedule.csv is missing", where="trials/schedule.csv")
    else:
        try:
            rows = _read_csv(data)
        except (UnicodeDecodeError, csv.Error) as exc:
            rows = [[]]
            st.fail(f"trials/schedule.csv cannot be read: {exc}", where="trials/schedule.csv")
        if not rows or rows[0] != ["position", "arm_code", "stimulus", "rep", "trial"]:
            st.fail("trials/schedule.csv line 1: header is not position,arm_code,stimulus,rep,"
                    "trial", where="trials/schedule.csv line 1")  # fmt: skip
        body_rows = rows[1:]
        if len(body_rows) != len(ids):
            st.fail(f"trials/schedule.csv has {len(body_rows)} rows, the schedule {len(ids)}",
                    where="trials/schedule.csv")  # fmt: skip
        for i, (row, tid) in enumerate(zip(body_rows, ids, strict=False), start=1):
            arm, stim, rep = tid.split("|")
            want_row = [str(i), codes.get(arm, ""), stim, rep, tid]
            if row != want_row:
                where = f"trials/schedule.csv line {i + 1}"
                st.fail(f"{where}: {','.join(row)!r} should be {','.join(want_row)!r}", where=where)
    # executed order
    for seq in a.of_kind("trial.requested"):
        body = a.body(seq)
        trial: Any = body.get("trial")
        if trial not in position:
            st.fail(f"seq {seq}: trial {trial!r} is not in the locked schedule", seq)
            continue
        if body.get("position") != position[trial]:
            st.fail(
                f"seq {seq}: trial {trial} has position {body.get('position')!r}, its place in "
                f"the schedule is {position[trial]}",
                seq,
            )
        arm, stim, rep = str(trial).split("|")
        if (body.get("arm"), body.get("stimulus"), str(body.get("rep"))) != (arm, stim, rep):
            st.fail(f"seq {seq}: arm/stimulus/rep do not match the trial id {trial}", seq)
    # executed order: within one run session (from a run.started to the next), trials are first
    # requested in ascending schedule position (docs/randomization.md: "Trials run in ascending
    # key order"); retries (attempt > 1) and a new session may go back.
    session: int | None = None
    last: tuple[int, int] | None = None  # (position, seq) of the latest first attempt
    for seq in sorted(a.of_kind("run.started") + a.of_kind("trial.requested")):
        env = a.envs[seq]
        if env is not None and env.get("kind") == "run.started":
            session, last = seq, None
            continue
        body = a.body(seq)
        pos = body.get("position")
        if body.get("attempt") != 1 or type(pos) is not int:
            continue
        if last is not None and pos < last[0]:
            st.fail(
                f"seq {seq}: trial {body.get('trial')} (position {pos}) was first requested "
                f"after position {last[0]} (seq {last[1]}) in the same run session "
                f"(run.started seq {session}): not the locked execution order",
                seq,
            )
        else:
            last = (pos, seq)
    return st.check(
        f"schedule of {len(ids)} trials recomputed from the locked seed: equals schedule_sha256, "
        "the schedule blob, trials/schedule.csv, every request's position and, within each run "
        "session, the order in which trials were first requested"
    )


_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def _media_type(data: bytes) -> str | None:
    for magic, media in _MAGIC:
        if data.startswith(magic):
            return media
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _b64(text: object) -> bytes | None:
    if type(text) is not str:
        return None
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None
    return raw if base64.b64encode(raw).decode("ascii") == text else None


def _request_problem(req: Any, arm_text: str, stimulus: bytes, model: dict[str, Any]) -> str | None:
    """How a decoded request differs from the locked one (docs/trials.md §1), or ``None``."""
    if type(req) is not dict:
        return "the request is not a JSON object"
    messages = req.get("messages")
    if type(messages) is not list or len(messages) != 1 or type(messages[0]) is not dict:
        return "the request does not hold exactly one message"
    message = messages[0]
    if message.get("role") != "user" or set(message) != {"role", "content"}:
        return "the message is not a single user message"
    content = message.get("content")
    if type(content) is not list or len(content) != 2:
        return "the message does not hold exactly an image block and a text block"
    image, text = content
    openai = type(image) is dict and image.get("type") == "image_url"
    allowed = {"model", "messages", "max_tokens", "temperature", "top_p"}
    if not openai:
        allowed.add("top_k")
    extra = sorted(set(req) - allowed)
    if extra:
        return f"the request has member(s) {', '.join(extra)} (a system prompt or an addition)"
    want = {"model": model.get("id"), "max_tokens": model.get("max_tokens"),
            "temperature": model.get("temperature"), "top_p": model.get("top_p"),
            "top_k": None if openai else model.get("top_k")}  # fmt: skip
    for name, value in want.items():
        got = req.get(name)
        if (got is None) != (value is None) or (got is not None and (
            type(got) is bool or got != value or (name in ("model",) and type(got) is not str)
        )):  # fmt: skip
            return f"{name} is {got!r}, the locked model says {value!r}"
    if openai:
        url = image.get("image_url", {}).get("url") if type(image) is dict else None
        match = re.fullmatch(r"data:([a-z/]+);base64,(.*)", url or "", re.S)
        media, data = (match.group(1), _b64(match.group(2))) if match else (None, None)
        if set(image) != {"type", "image_url"}:
            return "the image block has unexpected members"
    else:
        source = image.get("source") if type(image) is dict else None
        if type(image) is not dict or image.get("type") != "image" or type(source) is not dict:
            return "the first block is not an image block"
        if set(image) != {"type", "source"} or set(source) != {"type", "media_type", "data"}:
            return "the image block has unexpected members"
        if source.get("type") != "base64":
            return "the image source is not base64"
        media, data = source.get("media_type"), _b64(source.get("data"))
    if data is None:
        return "the image data is not standard padded base64"
    if data != stimulus:
        return "the image bytes are not the locked stimulus file"
    if media != _media_type(stimulus):
        return f"media_type {media!r} does not follow the stimulus's magic bytes"
    if type(text) is not dict or text.get("type") != "text" or set(text) != {"type", "text"}:
        return "the second block is not a text block"
    if text.get("text") != arm_text:
        return "the text is not the locked arm text"
    return None


def _check_requests(a: _Archive) -> Check:
    st = _State("requests")
    texts, problem = a.arm_texts()
    if problem is not None:
        st.fail(f"cannot compose the locked arm texts: {problem}", a.protocol_seq)
    model = a.protocol.get("model")
    model = model if type(model) is dict else {}
    stimuli: dict[str, bytes | None] = {}
    for path, (role, _, _) in a.locked_files.items():
        if role == "stimulus":
            stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
            stimuli[stem] = a.locked_blob(path)
    verdicts: dict[tuple[str, str, str], str | None] = {}
    count = 0
    for seq in a.of_kind("trial.requested"):
        count += 1
        body = a.body(seq)
        ref = a.blob_ref(seq, "request")
        if ref is None or body.get("request_sha256") != ref:
            st.fail(f"seq {seq}: request_sha256 {body.get('request_sha256')!r} is not the "
                    f"request blob's hash {ref!r}", seq)  # fmt: skip
            continue
        arm, stim = body.get("arm"), body.get("stimulus")
        key = (ref, str(arm), str(stim))
        if key not in verdicts:
            data = a.blob(ref)
            if data is None:
                verdicts[key] = f"request blob {ref} is missing or does not hash to its name"
            elif arm not in texts:
                verdicts[key] = f"arm {arm!r} is not a locked arm"
            elif stimuli.get(str(stim)) is None:
                verdicts[key] = f"stimulus {stim!r} is not a locked stimulus with a blob"
            else:
                try:
                    req = json.loads(data)
                except ValueError:
                    req = None
                found = _request_problem(req, texts[str(arm)], stimuli[str(stim)] or b"", model)
                verdicts[key] = None if found is None else f"request blob {ref}: {found}"
        verdict = verdicts[key]
        if verdict is not None:
            st.fail(f"seq {seq}: trial {body.get('trial')}: {verdict}", seq)
    return st.check(
        f"{count} requests carry exactly the locked arm text, stimulus bytes and model "
        f"parameters ({len(verdicts)} distinct request bodies)"
    )


def _check_outcomes(a: _Archive) -> Check:
    st = _State("outcomes")
    requests: dict[int, dict[str, Any]] = {seq: a.body(seq) for seq in a.of_kind("trial.requested")}
    outcomes: dict[int, list[int]] = {seq: [] for seq in requests}
    final: dict[str, list[int]] = {}
    attempts: dict[str, int] = {}
    outcome_seqs = sorted(a.of_kind("trial.responded") + a.of_kind("trial.failed"))
    for seq in sorted(requests):
        body = requests[seq]
        tid = body.get("trial")
        want = attempts.get(str(tid), 0) + 1
        if body.get("attempt") != want:
            st.fail(f"seq {seq}: trial {tid} attempt is {body.get('attempt')!r}, expected {want}",
                    seq)  # fmt: skip
        attempts[str(tid)] = want
    for seq in outcome_seqs:
        env = a.envs[seq]
        kind = env.get("kind") if env is not None else None
        body = a.body(seq)
        rseq = body.get("request_seq")
        if type(rseq) is not int or rseq not in requests or rseq >= seq:
            st.fail(f"seq {seq}: {kind} request_seq {rseq!r} is no earlier trial.requested", seq)
            continue
        outcomes[rseq].append(seq)
        req = requests[rseq]
        if body.get("trial") != req.get("trial") or body.get("attempt") != req.get("attempt"):
            st.fail(f"seq {seq}: {kind} trial/attempt differ from its request (seq {rseq})", seq)
        if kind == "trial.responded":
            ref = a.blob_ref(seq, "response")
            if ref is None or a.blob(ref) is None:
                st.fail(f"seq {seq}: response blob {ref} is missing or altered", seq,
                        where=f"blobs/{ref}")  # fmt: skip
        if kind == "trial.responded" or body.get("final") is True:
            final.setdefault(str(req.get("trial")), []).append(seq)
    for rseq, outs in outcomes.items():
        if not outs:
            st.fail(f"seq {rseq}: trial.requested ({requests[rseq].get('trial')}) has no "
                    "outcome", rseq)  # fmt: skip
        elif len(outs) > 1:
            st.fail(f"seq {rseq}: trial.requested has {len(outs)} outcomes (seqs "
                    f"{', '.join(map(str, outs))})", outs[1])  # fmt: skip
    for seq, body in requests.items():
        first_final = final.get(str(body.get("trial")), [])
        if first_final and first_final[0] < seq:
            st.fail(f"seq {seq}: trial {body.get('trial')} requested after its final outcome "
                    f"(seq {first_final[0]})", seq)  # fmt: skip
    ids = a.schedule()
    for i, tid in enumerate(ids, start=1):
        finals = final.get(tid, [])
        if not finals:
            st.fail(f"trial {tid} (position {i}) has no final outcome", where=f"trial {tid}")
        elif len(finals) > 1:
            st.fail(f"trial {tid} (position {i}) has {len(finals)} final outcomes (seqs "
                    f"{', '.join(map(str, finals))})", finals[1])  # fmt: skip
    for tid in sorted(set(final) - set(ids)):
        st.fail(f"trial {tid!r} has an outcome but is not in the schedule",
                final[tid][0])  # fmt: skip
    return st.check(
        f"{len(requests)} requests have one outcome each; each of {len(ids)} scheduled trials has "
        "exactly one final outcome"
    )


def _check_blinding(a: _Archive) -> Check:
    st = _State("blinding")
    seals = a.of_kind("scoring.sealed")
    revealed = a.of_kind("blinding.revealed")
    scored = a.of_kind("trial.scored")
    if len(seals) != 1:
        st.fail(f"the ledger has {len(seals)} scoring.sealed events; exactly one is required",
                seals[1] if len(seals) > 1 else None)  # fmt: skip
    if len(revealed) != 1:
        st.fail(f"the ledger has {len(revealed)} blinding.revealed events; exactly one is "
                "required", revealed[1] if len(revealed) > 1 else None)  # fmt: skip
    if not seals or not revealed:
        return st.check("")
    seal, reveal = seals[0], revealed[0]
    last_trial = max((s for k in _TRIAL_KINDS for s in a.of_kind(k)), default=-1)
    if last_trial > seal:
        st.fail(f"seq {last_trial}: a trial event follows scoring.sealed (seq {seal})", last_trial)
    if reveal < seal:
        st.fail(f"seq {reveal}: blinding.revealed comes before scoring.sealed (seq {seal})",
                reveal)  # fmt: skip
    commitment = a.protocol.get("blinding_commitment")
    rbody = a.body(reveal)
    secret_hex = rbody.get("secret_hex")
    try:
        secret = bytes.fromhex(secret_hex) if type(secret_hex) is str else None
    except ValueError:
        secret = None
    if secret is None:
        st.fail(f"seq {reveal}: secret_hex is not hex", reveal)
        return st.check("")
    if _sha_hex(secret) != commitment:
        st.fail(f"seq {reveal}: SHA-256(secret) {_sha_hex(secret)} does not open the commitment "
                f"{commitment} of protocol.locked (seq {a.protocol_seq})", reveal)  # fmt: skip
    if rbody.get("commitment") != commitment:
        st.fail(f"seq {reveal}: commitment differs from protocol.locked's", reveal)
    codes = a.codes(secret)
    if rbody.get("arm_codes") != codes:
        st.fail(f"seq {reveal}: arm_codes are not HMAC-SHA256(secret, arm)[:12] of the locked "
                "arms", reveal)  # fmt: skip
    # every trial.scored: one per trial.responded, the code of its trial's arm
    responded = set(a.of_kind("trial.responded"))
    requests = {seq: a.body(seq) for seq in a.of_kind("trial.requested")}
    seen: dict[int, int] = {}
    pairs: list[tuple[int, str]] = []
    for seq in scored:
        body = a.body(seq)
        rseq = body.get("response_seq")
        if type(rseq) is not int or rseq not in responded:
            st.fail(f"seq {seq}: trial.scored response_seq {rseq!r} is no trial.responded", seq)
            continue
        if rseq in seen:
            st.fail(f"seq {seq}: second trial.scored for response seq {rseq} (first: seq "
                    f"{seen[rseq]})", seq)  # fmt: skip
            continue
        seen[rseq] = seq
        pairs.append((rseq, str(body.get("scores_sha256"))))
        req = requests.get(a.body(rseq).get("request_seq"), {})  # type: ignore[arg-type]
        arm = req.get("arm")
        if body.get("arm_code") != codes.get(str(arm)):
            st.fail(f"seq {seq}: arm_code {body.get('arm_code')!r} is not the code of arm "
                    f"{arm!r} of trial {req.get('trial')}", seq)  # fmt: skip
        if body.get("stimulus") != req.get("stimulus"):
            st.fail(f"seq {seq}: stimulus differs from its trial's", seq)
    for rseq in sorted(responded - set(seen)):
        st.fail(f"seq {rseq}: trial.responded has no trial.scored", rseq)
    sbody = a.body(seal)
    pairs.sort()
    digest = _sha_hex(canonical_json([[r, h] for r, h in pairs]))
    if sbody.get("scores_sha256") != digest:
        st.fail(f"seq {seal}: the seal's scores_sha256 is not the hash of the recorded scores "
                f"({digest})", seal)  # fmt: skip
    if sbody.get("scored") != len(pairs):
        st.fail(f"seq {seal}: scored is {sbody.get('scored')!r}, {len(pairs)} trials were scored",
                seal)  # fmt: skip
    return st.check(
        f"scoring sealed (seq {seal}) after every trial event and before blinding.revealed "
        f"(seq {reveal}); the commitment opens; {len(pairs)} scores carry their arm's code"
    )


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def _compare_csv(st: _State, a: _Archive, rel: str, header: list[str], want: list[list[str]],
                 same: Any = None) -> None:  # fmt: skip
    data = a.file(rel)
    if data is None:
        st.fail(f"{rel} is missing", where=rel)
        return
    try:
        rows = _read_csv(data)
    except (UnicodeDecodeError, csv.Error) as exc:
        st.fail(f"{rel} cannot be read: {exc}", where=rel)
        return
    if not rows or rows[0] != header:
        st.fail(f"{rel} line 1: header is not {','.join(header)}", where=f"{rel} line 1")
        return
    if len(rows) - 1 != len(want):
        st.fail(f"{rel} has {len(rows) - 1} rows, the events give {len(want)}", where=rel)
    for number, (row, expected) in enumerate(zip(rows[1:], want, strict=False), start=2):
        if row != expected and not (same is not None and same(row, expected)):
            where = f"{rel} line {number}"
            st.fail(f"{where}: {','.join(row)!r} is not {','.join(expected)!r} from the events",
                    where=where)  # fmt: skip


def _check_readme_study(st: _State, a: _Archive, text: list[str]) -> None:
    """The README's arm table and simulated-data notice say what the events say."""
    arms = a.protocol.get("arms")
    arms = arms if type(arms) is dict else {}
    for number, line in enumerate(text, start=1):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| ") or len(cells) != 4 or cells[0] not in arms:
            continue
        locked = arms[cells[0]].get("sha256") if type(arms[cells[0]]) is dict else None
        said = cells[3].strip("`")
        if is_hex64(said) and said != locked:
            where = f"README.md line {number}"
            st.fail(
                f"{where}: arm {cells[0]} has composed prompt SHA-256 {said}, protocol.locked "
                f"says {locked}",
                where=where,
            )
    simulated = [s for s in a.of_kind("run.started") if a.body(s).get("simulated") is True]
    if simulated and "simulated model" not in "\n".join(text).lower():
        st.fail(
            f"README.md does not say the responses are simulated (run.started seq "
            f"{simulated[0]} has simulated: true)",
            simulated[0],
            where="README.md",
        )


def _check_derived(a: _Archive) -> Check:
    """The human-readable tables and the README verdicts say what the events say."""
    st = _State("derived")
    scores = [
        [_cell(seq)] + [_cell(a.body(seq).get(k)) for k in (
            "response_seq", "arm_code", "stimulus", "status", "n_items", "n_answered",
            "n_correct", "scores_sha256")]
        for seq in a.of_kind("trial.scored")
    ]  # fmt: skip
    header = ["scored_seq", "response_seq", "arm_code", "stimulus", "status", "n_items",
              "n_answered", "n_correct", "scores_sha256"]  # fmt: skip
    _compare_csv(st, a, "scores/scores.csv", header, scores)
    outcome: dict[int, int] = {}
    for seq in sorted(a.of_kind("trial.responded") + a.of_kind("trial.failed")):
        rseq = a.body(seq).get("request_seq")
        if type(rseq) is int:
            outcome[rseq] = seq
    attempts = []
    for seq in a.of_kind("trial.requested"):
        b = a.body(seq)
        out = outcome.get(seq)
        env = a.envs[out] if out is not None else None
        kind = env.get("kind") if env is not None else None
        ob = a.body(out) if out is not None else {}
        final = kind == "trial.responded" or bool(ob.get("final")) if out is not None else False
        attempts.append([
            _cell(seq), _cell(b.get("position")), _cell(b.get("trial")), _cell(b.get("attempt")),
            _cell(b.get("request_sha256")), str(kind).split(".")[1] if kind else "none",
            _cell(out), _cell(a.blob_ref(out, "response")) if out is not None else "",
            _cell(ob.get("error_type")) if kind == "trial.failed" else "", str(final),
        ])  # fmt: skip
    _compare_csv(st, a, "trials/attempts.csv", ["request_seq", "position", "trial", "attempt",
                 "request_sha256", "outcome", "outcome_seq", "response_sha256", "error_type",
                 "final"], attempts)  # fmt: skip
    results = [a.body(seq) for seq in a.of_kind("analysis.result")]
    hyps = [r for r in results if r.get("hypothesis")]
    verdicts = [
        [_cell(r.get("hypothesis")), _cell(r.get("test")), _cell(r.get("status")),
         _cell(r.get("verdict")), json.dumps(r["decided_by"], sort_keys=True)
         if r.get("decided_by") else "", _cell(r.get("error")) if r.get("error") else ""]
        for r in hyps
    ]  # fmt: skip

    def same_verdict(row: list[str], want: list[str]) -> bool:  # decided_by compared as JSON
        try:
            parsed = json.loads(row[4]) if row[4] else None
            return row[:4] + row[5:] == want[:4] + want[5:] and parsed == (
                json.loads(want[4]) if want[4] else None)
        except (ValueError, IndexError):
            return False

    _compare_csv(st, a, "analysis/tables/verdicts.csv", ["hypothesis", "test", "status",
                 "verdict", "decided_by", "error"], verdicts, same_verdict)  # fmt: skip
    readme = a.file("README.md")
    if readme is None:
        st.fail("README.md is missing", where="README.md")
    else:
        text = readme.decode("utf-8", errors="replace").split("\n")
        table = {}
        for number, line in enumerate(text, start=1):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if line.startswith("| ") and len(cells) == 3 and cells[0] not in ("hypothesis",):
                table[cells[0]] = (cells[1], cells[2], number)
        for r in hyps:
            h = str(r.get("hypothesis"))
            got = table.pop(h, None)
            want_cells = (_cell(r.get("test")), _cell(r.get("verdict")))
            if got is None:
                st.fail(f"README.md has no verdict row for {h}", where="README.md")
            elif got[:2] != want_cells:
                st.fail(f"README.md line {got[2]}: {h} says {got[0]} / {got[1]}, the "
                        f"analysis.result says {want_cells[0]} / {want_cells[1]}",
                        where=f"README.md line {got[2]}")  # fmt: skip
        for h, (_, _, number) in table.items():
            if not h.startswith("---"):
                st.fail(f"README.md line {number}: verdict row {h} has no analysis.result",
                        where=f"README.md line {number}")  # fmt: skip
        _check_readme_study(st, a, text)
    return st.check(
        f"scores/scores.csv, trials/attempts.csv, analysis/tables/verdicts.csv and the README "
        f"(verdicts, arm hashes, simulated-data notice) match the events ({len(scores)} scores, "
        f"{len(attempts)} attempts, {len(hyps)} verdicts)"
    )


_ARCHIVE_CHECKS = (
    ("manifest", _check_manifest),
    ("export-coverage", _check_export),
    ("protocol", _check_protocol),
    ("schedule", _check_schedule),
    ("requests", _check_requests),
    ("outcomes", _check_outcomes),
    ("blinding", _check_blinding),
    ("derived", _check_derived),
)


def _science(root: Path) -> list[Check]:
    try:
        from verify._science import science_checks  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:  # fail closed: a required check that cannot run has not passed
        reason = (
            f"re-scoring and re-analysis could not run ({type(exc).__name__}: {exc}); install "
            "the verifier's dependencies (numpy, scipy, statsmodels, rfc8785)"
        )
        return [Check("rescore", Status.FAIL, reason), Check("reanalysis", Status.FAIL, reason)]
    return list(science_checks(root))


def verify_archive(
    path: str | os.PathLike[str],
    trusted_keys: Sequence[str] = (),
    checkpoints: Sequence[str | os.PathLike[str]] = (),
    jobs: int = 1,
) -> Report:
    """Verify an archive directory written by ``ledger export``; never raises for a bad archive.

    Runs the ledger checks of ``docs/ledger-format.md`` §8 on ``ledger/`` and ``blobs/`` and
    the archive checks of ``docs/archive-format.md`` §4; ``report.timings`` holds the seconds
    spent per phase.
    """
    name = os.fspath(path)
    if isinstance(trusted_keys, str):
        trusted_keys = [trusted_keys]
    if isinstance(checkpoints, (str, os.PathLike)):
        checkpoints = [checkpoints]
    try:
        run = _ArchiveRun(Path(name), trusted_keys, checkpoints, jobs)
        report = run.run()
        if len(report.checks) == 1 and report.checks[0].name == "file":
            return report
        archive = _Archive(run)
        for check_name, func in _ARCHIVE_CHECKS:
            t0 = time.perf_counter()
            try:
                check = func(archive)
            except Exception as exc:  # fail closed, but keep the other checks
                reason = f"check stopped by an unexpected error: {type(exc).__name__}: {exc}"
                check = Check(check_name, Status.FAIL, reason)
            report.timings[check_name] = time.perf_counter() - t0
            report.checks.append(run._archive_check(check))
        t0 = time.perf_counter()
        try:
            report.checks.extend(run._archive_check(c) for c in _science(Path(name)))
        except Exception as exc:
            report.checks.append(Check("rescore", Status.FAIL,
                                       f"re-scoring stopped by an unexpected error: "
                                       f"{type(exc).__name__}: {exc}"))  # fmt: skip
        report.timings["science"] = time.perf_counter() - t0
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
