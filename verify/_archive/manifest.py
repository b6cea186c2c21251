"""The ``manifest`` and ``export-coverage`` checks: which files the archive holds, with hashes."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from verify._archive.view import Archive
from verify._ledgerfile import _State
from verify._reader.files import show
from verify._reader.names import EVENTS, MANIFEST, line_where
from verify._report import Check

__all__ = ["check_export", "check_manifest"]

_MANIFEST_LINE = re.compile(r"^([0-9a-f]{64})  (.+)$")


def _manifest_lines(st: _State, text: str) -> dict[str, tuple[str, int]]:
    """The (digest, line number) by path of each well-formed line, each path's first."""
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
    return listed


def _absent(a: Archive, path: str) -> str:
    """Why a listed file is not there: ``missing``, or ``it is a folder`` and the like."""
    why = a.files.describe(path)
    return "missing" if why == "is missing" else f"it {why}"


def check_manifest(a: Archive) -> Check:
    """``MANIFEST.sha256`` lists exactly the files present, sorted, with their SHA-256."""
    st = _State("manifest")
    data = a.file(MANIFEST)
    if data is None:
        st.fail(a.absent(MANIFEST), where=MANIFEST)
        return st.check("")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        st.fail(f"{MANIFEST} is not UTF-8 (byte {exc.start})", where=MANIFEST)
        return st.check("")
    if text and not text.endswith("\n"):
        st.fail(f"{MANIFEST}: the last line does not end in a newline", where=MANIFEST)
    listed = _manifest_lines(st, text)
    present = {p: h for p, h in a.hashes.items() if p != MANIFEST}
    for path, (digest, number) in listed.items():
        have = present.get(path)
        if have is None:
            st.fail(
                f"{path} is listed ({MANIFEST} line {number}) but {_absent(a, path)}", where=path
            )
        elif have != digest:
            st.fail(
                f"{path}: SHA-256 {have} differs from {MANIFEST} line {number} ({digest})",
                where=path,
            )
    for path in sorted(set(a.files.files) - set(listed) - {MANIFEST} - a.restored):
        st.fail(f"{show(path)} is present but not listed in {MANIFEST}", where=show(path))
    return st.check(f"{len(listed)} files listed, present and matching their SHA-256")


def _check_export_event(a: Archive, st: _State, seq: int, body: dict[str, Any]) -> None:
    """export.created is the last event, of archive format 1, of the locked study."""
    if seq != a.n - 1:
        st.fail(
            f"seq {seq}: export.created is not the last event ({a.n - 1 - seq} event(s) follow it, "
            f"first seq {seq + 1} {a.envs[seq + 1] and a.envs[seq + 1].get('kind')!r})",  # type: ignore[union-attr]
            seq + 1,
            where=line_where(seq + 1),
        )
    if body.get("archive_format") != 1:
        st.fail(f"seq {seq}: archive_format is {body.get('archive_format')!r}, not 1", seq)
    study = a.protocol.get("study")
    if study is not None and body.get("study") != study:
        st.fail(f"seq {seq}: study {body.get('study')!r} is not the locked study {study!r}", seq)


def _check_blobs(a: Archive, st: _State, seq: int, body: dict[str, Any]) -> int:
    """Each blob hashes to its name, and the set of blobs is the one export.created recorded.

    Return how many blobs there are.
    """
    entries = [*a.files.files, *a.files.others, *a.files.dirs]
    blob_names = sorted(
        p[len("blobs/") :] for p in entries if p.startswith("blobs/") and p not in a.restored
    )
    for name in blob_names:
        have = a.hashes.get(f"blobs/{name}")
        if have is None:
            st.fail(
                f"blobs/{show(name)} {a.files.describe('blobs/' + name)}",
                seq,
                where=f"blobs/{show(name)}",
            )
        elif have != name:
            st.fail(
                f"blobs/{show(name)}: content SHA-256 is {have}, not its name",
                seq,
                where=f"blobs/{show(name)}",
            )
    blobs = body.get("blobs")
    listing_text = "".join(f"{n}\n" for n in blob_names).encode("utf-8", "surrogateescape")
    listing = hashlib.sha256(listing_text).hexdigest()
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
    return len(blob_names)


def _check_covered(a: Archive, st: _State, seq: int, files: dict[str, Any]) -> None:
    """export.created lists every file outside ledger/ and blobs/ with its SHA-256.

    A withheld file put back from the annex (docs/privacy.md) is not among them.
    """
    covered = {
        p: a.hashes.get(p)
        for p in a.files.files
        if p != MANIFEST
        and not p.startswith("ledger/")
        and not p.startswith("blobs/")
        and p not in a.restored
    }
    for path in sorted(files):
        have = covered.get(path)
        if have is None:
            st.fail(
                f"{path} is covered by export.created (seq {seq}) but {_absent(a, path)}",
                seq,
                where=path,
            )
        elif have != files[path]:
            st.fail(
                f"{path}: SHA-256 {have} differs from export.created (seq {seq}): {files[path]}",
                seq,
                where=path,
            )
    for path in sorted(set(covered) - set(files)):
        st.fail(f"{show(path)} is not covered by export.created (seq {seq})", seq, where=show(path))


def check_export(a: Archive) -> Check:
    """The last event, ``export.created``, covers every file outside ``ledger/`` and ``blobs/``."""
    st = _State("export-coverage")
    exports = a.of_kind("export.created")
    if not exports:
        st.fail("the ledger has no export.created event", where=EVENTS)
        return st.check("")
    seq = exports[-1]
    body = a.body(seq)
    _check_export_event(a, st, seq, body)
    files = body.get("files")
    if type(files) is not dict:
        st.fail(f"seq {seq}: export.created has no files object", seq)
        return st.check("")
    n_blobs = _check_blobs(a, st, seq, body)
    _check_covered(a, st, seq, files)
    if a.n not in a.checkpoint_sizes:
        st.fail(
            f"no checkpoint in ledger/checkpoints/ has size {a.n}, so none covers export.created "
            f"(seq {seq})",
            seq,
            where="ledger/checkpoints",
        )
    return st.check(
        f"export.created (seq {seq}, the last event) covers the {len(files)} files outside "
        f"ledger/ and blobs/ with matching SHA-256 and the {n_blobs} blobs by their "
        f"listing; checkpoint {a.n:08d} covers it"
    )
