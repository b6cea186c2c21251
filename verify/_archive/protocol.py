"""The ``protocol`` check: locked before the first request, no locked file changed unrecorded."""

from __future__ import annotations

import csv
import fnmatch
import json
from typing import Any

from verify._archive.view import Archive
from verify._armid import IdentityProblem, identity, identity_version
from verify._items import ItemError
from verify._ledgerfile import _State
from verify._prompts import RESERVED_COMPONENTS
from verify._reader.files import show
from verify._reader.names import EVENTS, line_where, read_csv, sha_hex
from verify._report import Check

__all__ = ["check_protocol", "locked_archive_path"]


def locked_archive_path(locked_path: str, role: str) -> str:
    """Where a locked file lies in the archive (``docs/archive-format.md`` §2)."""
    name = locked_path.rsplit("/", 1)[-1]
    if role == "stimulus":
        return f"stimuli/{name}"
    if role == "truth":
        return f"truth/{name}"
    return f"protocol/{locked_path}"


def _prompt_problems(a: Archive) -> list[tuple[str, int | None, str | None]]:
    """``docs/prompts.md`` at lock, seen again: records, images, templates, draws, parameters.

    The items digest and each example set's digest recomputed from the locked files equal
    ``protocol.locked``; every image an item names is locked with role ``item-image`` (and
    every such file is named by an item); every template fills, every draw finds its
    examples, no example is a test item, every model parameter is in its backend's range.
    """
    pseq = a.protocol_seq
    study, problem = a.study()
    if study is None:
        return [(f"seq {pseq}: the locked study cannot be rendered: {problem}", pseq, None)]
    out: list[tuple[str, int | None, str | None]] = []
    for reason in study.record_problems() + study.lock_problems():
        out.append((f"seq {pseq}: {reason}", pseq, None))
    named: set[str] = set()
    if study.items is not None:
        try:
            named = set(study.items.image_paths())
        except ItemError as exc:
            out.append((f"seq {pseq}: {exc}", pseq, None))
    for path in sorted(named):
        entry = a.locked_files.get(path)
        if entry is None:
            out.append(
                (
                    f"seq {pseq}: image {path} of {study.items.path if study.items else ''} "
                    "is not a locked file",
                    pseq,
                    None,
                )
            )
        elif entry[0] != "item-image":
            out.append(
                (
                    f"seq {entry[2]}: artifact.locked {path}: role {entry[0]!r}, but an item "
                    "names it (role 'item-image')",
                    entry[2],
                    None,
                )
            )
    for path, (role, _, seq) in sorted(a.locked_files.items()):
        if role == "item-image" and path not in named:
            out.append(
                (
                    f"seq {seq}: artifact.locked {path} has role 'item-image' but no item names it",
                    seq,
                    None,
                )
            )
    return out


def _identity_problems(
    a: Archive, arms: dict[str, Any], expected_files: set[str]
) -> list[tuple[str, int | None, str | None]]:
    """Arm identity version 2 (``docs/prompts.md`` §3.1), re-derived for every arm.

    Each arm's hash, re-derived from the locked records and files, equals ``arms.X.sha256``,
    and ``protocol/arms/<X>.json`` holds the identity object's canonical bytes.
    """
    pseq = a.protocol_seq
    spec = a.spec()
    components = spec.get("components") if spec is not None else None
    table = components if type(components) is dict else {}

    def component_hash(name: str) -> str | None:
        path = table.get(name)
        if path is None and name in RESERVED_COMPONENTS:
            return None
        data = a.locked_blob(path) if type(path) is str else None
        if data is None:
            raise IdentityProblem(f"component {name!r} is not a locked file with a blob")
        return sha_hex(data)

    def file_hash(path: str) -> str | None:
        data = a.locked_blob(path)
        return None if data is None else sha_hex(data)

    out: list[tuple[str, int | None, str | None]] = []
    for arm, info in sorted(arms.items()):
        target = f"protocol/arms/{arm}.json"
        expected_files.add(target)
        try:
            _, _, digest = identity(a.protocol, arm, component_hash, file_hash)
        except IdentityProblem as exc:
            out.append(
                (f"seq {pseq}: arm {arm}: cannot derive the arm identity: {exc}", pseq, None)
            )
            continue
        said = info.get("sha256") if type(info) is dict else None
        if said != digest:
            out.append(
                (
                    f"seq {pseq}: arm {arm}: the arm identity (docs/prompts.md §3.1) hashes "
                    f"to {digest}, protocol.locked says {said}",
                    pseq,
                    None,
                )
            )
        if a.hashes.get(target) != digest:
            why = "is missing" if target not in a.hashes else "is not its identity object"
            out.append(
                (
                    f"{target} {why} (arm {arm}: SHA-256 {digest}, docs/prompts.md §3.1)",
                    None,
                    target,
                )
            )
    return out


def _check_lock_events(a: Archive, st: _State, locked: list[int]) -> None:
    """One protocol.locked, or one per phase; nothing requested or locked out of order."""
    # the first lock may name no phase: it is then the unnamed phase 0 (study-spec.md, Phases)
    if len(locked) > 1 and any(type(a.body(seq).get("phase")) is not dict for seq in locked[1:]):
        st.fail(
            f"the ledger has {len(locked)} protocol.locked events (second at seq {locked[1]}); "
            "only a study locked in phases has more than one, each after the first naming its "
            "phase",
            locked[1],
            where=line_where(locked[1]),
        )
    first, pseq = locked[0], locked[-1]
    requested = a.of_kind("trial.requested")
    if requested and requested[0] < first:
        st.fail(
            f"seq {requested[0]}: trial.requested comes before protocol.locked (seq {first})",
            requested[0],
        )
    for seq in a.of_kind("artifact.locked"):
        if seq > pseq:
            st.fail(f"seq {seq}: artifact.locked after protocol.locked (seq {pseq})", seq)
    if type(a.protocol.get("manifest")) is not dict:
        st.fail(f"seq {pseq}: protocol.locked has no manifest object", pseq)


def _check_artifact_blobs(a: Archive, st: _State) -> None:
    """Each artifact.locked names its content blob, present, unaltered and of its size."""
    for path, versions in sorted(a.locked_versions.items()):
        for _role, digest, seq in versions:
            ref = a.blob_ref(seq, "content")
            if ref != digest:
                st.fail(f"seq {seq}: artifact.locked {path}: content blob is not its sha256", seq)
            elif not a.blob_ok(ref):
                st.fail(
                    f"seq {seq}: artifact.locked {path}: blob {ref} missing or altered",
                    seq,
                    where=f"blobs/{ref}",
                )
            elif a.body(seq).get("size") != a.blob_size(ref):
                st.fail(f"seq {seq}: artifact.locked {path}: size differs from the blob's", seq)


def _check_lock_manifest(
    st: _State, seq: int, body: dict[str, Any], running: dict[str, str]
) -> None:
    """A protocol.locked manifest lists exactly the files in force, with their hashes."""
    locked_manifest = body.get("manifest")
    locked_manifest = locked_manifest if type(locked_manifest) is dict else {}
    for path in sorted(set(running) | set(locked_manifest)):
        have, want = running.get(path), locked_manifest.get(path)
        if want is None:
            st.fail(
                f"seq {seq}: artifact.locked {path} ({have}) is not in the "
                f"protocol.locked manifest (seq {seq})",
                seq,
            )
        elif have is None:
            st.fail(f"seq {seq}: manifest path {path} has no artifact.locked event", seq)
        elif have != want:
            st.fail(
                f"seq {seq}: artifact.locked {path} ({have}) differs from the "
                f"protocol.locked manifest (seq {seq}): {want!r}",
                seq,
            )


def _check_amendment(
    a: Archive,
    st: _State,
    seq: int,
    body: dict[str, Any],
    running: dict[str, str],
    patterns: list[str],
    first: int,
) -> None:
    """A protocol.amended after the lock, changing only amendable files from the hash in force."""
    if seq < first:
        st.fail(f"seq {seq}: protocol.amended before protocol.locked", seq)
    changes = body.get("changes")
    for change in changes if type(changes) is list else [None]:
        if type(change) is not dict or type(change.get("path")) is not str:
            st.fail(f"seq {seq}: protocol.amended change is not an object with a path", seq)
            continue
        path = change["path"]
        if not any(fnmatch.fnmatch(path, p) for p in patterns):
            st.fail(f"seq {seq}: protocol.amended changes {path}, which is not amendable", seq)
        if change.get("previous_sha256") != running.get(path):
            st.fail(
                f"seq {seq}: protocol.amended {path}: previous_sha256 is not the hash in force",
                seq,
            )
        blob_name = change.get("blob")
        ref = a.blob_ref(seq, blob_name) if type(blob_name) is str else None
        if ref != change.get("sha256") or not a.blob_ok(ref):
            st.fail(f"seq {seq}: protocol.amended {path}: blob missing or not its sha256", seq)
        running[path] = str(change.get("sha256"))


def _replay_manifest(a: Archive, st: _State, locked: list[int]) -> None:
    """Replay artifact locks and amendments in seq order against each lock's manifest."""
    running: dict[str, str] = {}
    amendable = a.protocol.get("amendable")
    patterns = [p for p in amendable if type(p) is str] if type(amendable) is list else []
    kinds = ("artifact.locked", "protocol.amended", "protocol.locked")
    for seq in sorted(s for kind in kinds for s in a.of_kind(kind)):
        env = a.envs[seq]
        kind = env.get("kind") if env is not None else None
        body = a.body(seq)
        if kind == "artifact.locked":
            locked_path, locked_digest = body.get("path"), body.get("sha256")
            if type(locked_path) is str and type(locked_digest) is str:
                running[locked_path] = locked_digest
        elif kind == "protocol.locked":
            _check_lock_manifest(st, seq, body, running)
        else:
            _check_amendment(a, st, seq, body, running, patterns, locked[0])


_FILES_CSV = "protocol/files.csv"
_FILES_HEADER = ["locked_path", "role", "sha256", "archive_path"]


def _files_csv_row(
    a: Archive, st: _State, number: int, row: list[str], current: dict[str, tuple[str, int]]
) -> str | None:
    """Check one row of protocol/files.csv; return the locked path it lists, if it has 4 cells."""
    where = f"{_FILES_CSV} line {number}"
    if len(row) != 4:
        st.fail(f"{where}: expected 4 cells, found {len(row)}", where=where)
        return None
    path, role, digest, archive_path = row
    entry = a.locked_files.get(path)
    want = current.get(path)
    if entry is None or want is None:
        st.fail(f"{where}: {path} is not a locked file", where=where)
        return path
    if role != entry[0]:
        st.fail(f"{where}: role {role!r} is not the locked role {entry[0]!r}", where=where)
    if digest != want[0]:
        st.fail(
            f"{where}: {path}: sha256 {digest} is not the locked (or amended) "
            f"{want[0]} (seq {want[1]})",
            want[1],
            where=where,
        )
    if archive_path != locked_archive_path(path, entry[0]):
        st.fail(
            f"{where}: archive_path {archive_path!r} should be "
            f"{locked_archive_path(path, entry[0])!r}",
            where=where,
        )
    return path


def _files_csv_rows(a: Archive, st: _State) -> list[list[str]]:
    """The rows of protocol/files.csv (header included), or none if it is absent or unreadable."""
    files_csv = a.file(_FILES_CSV)
    if files_csv is None:
        st.fail(a.absent(_FILES_CSV), where=_FILES_CSV)
        return []
    try:
        rows = read_csv(files_csv)
    except (UnicodeDecodeError, csv.Error) as exc:
        st.fail(f"{_FILES_CSV} cannot be read: {exc}", where=_FILES_CSV)
        return []
    if rows and rows[0] != _FILES_HEADER:
        st.fail(
            f"{_FILES_CSV} line 1: header is not locked_path,role,sha256,archive_path",
            where=f"{_FILES_CSV} line 1",
        )
    return rows


def _check_files_csv(a: Archive, st: _State, current: dict[str, tuple[str, int]]) -> None:
    """protocol/files.csv lists every locked file with its role, hash in force and place."""
    listed: set[str] = set()
    for number, row in enumerate(_files_csv_rows(a, st)[1:], start=2):
        path = _files_csv_row(a, st, number, row, current)
        if path is not None:
            listed.add(path)
    for path in sorted(set(a.locked_files) - listed):
        st.fail(f"{_FILES_CSV} does not list the locked file {path}", where=_FILES_CSV)


def _check_locked_copies(
    a: Archive, st: _State, current: dict[str, tuple[str, int]], pseq: int
) -> set[str]:
    """Each locked file's archive copy has the hash in force; return the archive paths expected."""
    expected_files: set[str] = {_FILES_CSV, "protocol/protocol.json"}
    for path, (role, _, seq) in sorted(a.locked_files.items()):
        target = locked_archive_path(path, role)
        expected_files.add(target)
        want = current.get(path, ("", seq))
        have = a.hashes.get(target)
        if have is None:
            why = a.files.describe(target)
            st.fail(f"{target} (locked {path}) {why}", want[1], where=target)
        elif have != want[0]:
            st.fail(
                f"{target}: SHA-256 {have} is not the "
                f"{'locked' if want[1] == pseq else 'amended'} hash {want[0]} of {path} "
                f"(seq {want[1]})",
                want[1],
                where=target,
            )
    return expected_files


def _check_arm_texts(
    a: Archive, st: _State, pseq: int, expected_files: set[str]
) -> tuple[int, int]:
    """Composed arm texts hash as locked and are archived; return (arm count, identity version)."""
    texts, problem = a.arm_texts()
    if problem is not None:
        st.fail(f"seq {pseq}: cannot compose the arms: {problem}", pseq)
    arms = a.protocol.get("arms")
    try:
        version = identity_version(a.protocol)
    except IdentityProblem as exc:
        st.fail(f"seq {pseq}: {exc}", pseq)
        version = 0
    for arm, text in sorted(texts.items()):
        info = arms.get(arm) if type(arms) is dict else None
        digest = sha_hex(text.encode("utf-8"))
        if version == 1 and type(info) is dict and info.get("sha256") != digest:
            st.fail(
                f"seq {pseq}: arm {arm}: the composed text hashes to {digest}, protocol.locked "
                f"says {info.get('sha256')}",
                pseq,
            )
        target = f"protocol/arms/{arm}.txt"
        expected_files.add(target)
        if a.hashes.get(target) != digest:
            st.fail(f"{target} is not the composed text of arm {arm}", where=target)
    return len(texts), version


def _check_protocol_json(a: Archive, st: _State, pseq: int) -> None:
    """protocol/protocol.json is the protocol.locked body with its seq."""
    data = a.file("protocol/protocol.json")
    if data is None:
        st.fail(a.absent("protocol/protocol.json"), where="protocol/protocol.json")
        return
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        doc = None
    want_doc = dict(a.protocol)
    want_doc["seq"] = pseq
    if doc != want_doc:
        st.fail(
            f"protocol/protocol.json differs from the protocol.locked body (seq {pseq})",
            pseq,
            where="protocol/protocol.json",
        )


def _check_unexpected_files(a: Archive, st: _State, expected_files: set[str]) -> None:
    """Nothing under protocol/, stimuli/ or truth/ but locked files, arm texts and records."""
    for path in sorted([*a.files.files, *a.files.others]):
        if path.split("/", 1)[0] in ("protocol", "stimuli", "truth") and path not in expected_files:
            st.fail(
                f"{show(path)} is not a locked file, arm text or protocol record", where=show(path)
            )


def check_protocol(a: Archive) -> Check:
    """Locked before the first request; every locked file as locked or as amended."""
    st = _State("protocol")
    locked = a.of_kind("protocol.locked")
    if not locked:
        st.fail(
            "the ledger has 0 protocol.locked events; exactly one is required, or one per phase",
            where=EVENTS,
        )
        return st.check("")
    pseq = locked[-1]
    _check_lock_events(a, st, locked)
    # artifacts and each phase's manifest: the files in force when that phase was locked
    _check_artifact_blobs(a, st)
    _replay_manifest(a, st, locked)
    current = a.current_manifest()
    # protocol/files.csv and every locked file
    _check_files_csv(a, st, current)
    expected_files = _check_locked_copies(a, st, current, pseq)
    # composed arms
    n_texts, version = _check_arm_texts(a, st, pseq, expected_files)
    # items, templates, few-shot examples, models (docs/prompts.md)
    for reason, at, place in _prompt_problems(a):
        st.fail(reason, at, where=place)
    arms = a.protocol.get("arms")
    if version == 2 and type(arms) is dict:  # after the specific problems, which say more
        for reason, at, place in _identity_problems(a, arms, expected_files):
            st.fail(reason, at, where=place)
    _check_protocol_json(a, st, pseq)
    _check_unexpected_files(a, st, expected_files)
    return st.check(
        f"protocol.locked (seq {pseq}) precedes every request; {len(a.locked_files)} locked "
        f"files match their locked or amended hash; {n_texts} arm texts and protocol.json "
        "match; the items, templates, few-shot examples and models are as docs/prompts.md locks "
        "them"
    )
