"""Hostile archives (issue 14): the verifier never hangs, never reads outside the archive,
accounts for every entry, and checks what readers read.

Each case copies the session's exported archive (``simulated_archive`` in conftest.py), makes it
hostile, and runs ``python -m verify ARCHIVE --json`` in a process of its own
(``tests/workers/hostile_verify.py``) with an address-space limit (``RLIMIT_AS``), a CPU-time
limit (``RLIMIT_CPU``) and an audit hook on ``open``. Every case must end non-zero, name the
path or line at fault in the check that owns it, report no "unexpected error", stay under the
memory bound, and open nothing outside the archive (nor the hostile entry itself). The wall
clock is only a hang guard: a verifier blocked on a pipe uses no CPU time.

Cases that need a consistent log re-sign it with the owner's own key (``resign`` of
tests/verify/test_archive_tamper.py) and verify with that key trusted, so that only the check under
test can catch them.

A case whose hostile entry lies beyond what the science checks read, and whose assertions read no
science check, verifies without them (``run_verify(..., science=False)``, as
``helpers.science_skipped`` does in process): ``rescore`` and ``reanalysis`` read the events the
ledger checks parsed, the blobs those events name by address, and ``analysis/results.json``,
``analysis/trials.csv``, ``analysis/items.csv`` and ``analysis/review/``, through the archive
reader the other checks use (``verify/_recompute/archive.py``, ``reanalysis.py``,
``reviews.py``), and nothing else, so they cannot open a hostile report, README, checkpoint, key,
figure, extra entry, link or published checkpoint, nor add to what those cases assert (they run
after every other check). Every case whose entry they do read (the events, a blob, the tables
above) runs them, and so does the fresh export under the harness.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import study_key
from locations import REPO

from ledger import canonical_json
from tests.verify.test_archive_tamper import read_events, resign

ROOT = REPO
WORKER = ROOT / "tests" / "workers" / "hostile_verify.py"
EVENTS = "ledger/events.jsonl"


def _cases(names: list[str], fast: set[str]) -> list[Any]:
    """``names`` as parameters: those in ``fast`` in the README's test command, the rest slow.

    Each case is a whole verification in a process of its own (about 2 s); the default run keeps
    one case of each kind of entry the verifier reads (events, a blob, a checkpoint, a derived
    file, the report), and the slow set (.ci/run) runs every other.
    """
    unknown = fast - set(names)
    assert not unknown, unknown
    return [n if n in fast else pytest.param(n, marks=pytest.mark.slow) for n in names]


AS_BYTES = 2 << 30  # address space of the verifying process
CPU_SECONDS = 30  # CPU time of the verifying process (SIGXCPU beyond)
MAX_RSS_KIB = 1 << 20  # peak resident memory allowed: 1 GiB
HANG_GUARD_SECONDS = 300  # wall clock, only so that a hang fails instead of blocking the suite


# --------------------------------------------------------------------------------------------------
# running the verifier in its own process


@dataclass
class Outcome:
    rc: int
    report: dict[str, Any] | None
    stderr: str
    trailer: dict[str, Any]

    def check(self, name: str) -> dict[str, Any]:
        assert self.report is not None, self.stderr[-2000:]
        for check in self.report["checks"]:
            if check["name"] == name:
                return dict(check)
        names = [c["name"] for c in self.report["checks"]]
        raise AssertionError(f"check {name} was not run: {names}")

    def failed(self, name: str) -> str:
        """Assert check ``name`` FAILed; return its reason and place."""
        check = self.check(name)
        assert check["status"] == "FAIL", f"{name} did not fail: {check}"
        return f"{check['reason']} @ {check['where']}"

    def passed(self, name: str) -> None:
        check = self.check(name)
        assert check["status"] == "PASS", f"{name} did not pass: {check}"


class _ForkServer:
    """``hostile_verify.py --serve``: the verifier imported once, a forked child per case."""

    def __init__(self) -> None:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )

    def run(self, config: dict[str, object], out: Path, err: Path) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        request = {
            "config": config,
            "stdout": str(out),
            "stderr": str(err),
            "guard_seconds": HANG_GUARD_SECONDS,
        }
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer, f"the fork server died (rc {self.proc.poll()})"
        return int(json.loads(answer)["status"])

    def close(self) -> None:
        self.proc.communicate(timeout=60)  # closes stdin (the server ends) and stdout


_SERVER: list[_ForkServer] = []


@pytest.fixture(scope="session", autouse=True)
def _fork_server() -> Iterator[None]:
    """One fork server per test process (xdist worker), closed at the end of the session."""
    yield
    while _SERVER:
        _SERVER.pop().close()


def run_verify(
    archive: Path,
    *args: str,
    forbidden: tuple[Path, ...] = (),
    allow_outside: bool = False,
    science: bool = True,
) -> Outcome:
    """``python -m verify ARCHIVE ARGS --json`` in a fresh process, under the limits and the
    audit hook (a child forked by :class:`_ForkServer`, which has the libraries imported).

    ``science=False`` leaves the science checks out (see the module's docstring)."""
    config = {
        "science": science,
        "archive": str(archive),
        "forbidden": [str(p) for p in forbidden],
        "source": str(ROOT),
        "as_bytes": AS_BYTES,
        "cpu_seconds": CPU_SECONDS,
        "argv": [str(archive), *args, "--json"],
        "cwd": str(archive.parent),
    }
    if not _SERVER:
        _SERVER.append(_ForkServer())
    out, err = archive.parent / "verify.stdout", archive.parent / "verify.stderr"
    returncode = _SERVER[0].run(config, out, err)
    proc = subprocess.CompletedProcess(
        [],
        returncode,
        out.read_text(encoding="utf-8", errors="replace"),
        err.read_text(encoding="utf-8", errors="replace"),
    )
    lines = proc.stderr.strip().splitlines()
    assert lines, f"the verifier died without a word (rc {proc.returncode})"
    try:
        trailer = json.loads(lines[-1])
    except ValueError:
        raise AssertionError(
            f"the verifier died (rc {proc.returncode}): {proc.stderr[-3000:]}"
        ) from None
    assert proc.returncode == trailer["rc"]
    assert trailer["forbidden"] == [], f"opened a hostile entry: {trailer['forbidden']}"
    if not allow_outside:
        assert trailer["outside"] == [], f"opened outside the archive: {trailer['outside']}"
    assert trailer["maxrss_kib"] < MAX_RSS_KIB, f"peak memory {trailer['maxrss_kib']} KiB"
    assert trailer["writer"] == [], f"imported the writer: {trailer['writer']}"
    report = json.loads(proc.stdout) if proc.stdout.strip() else None
    if report is not None:
        for check in report["checks"]:
            assert "unexpected error" not in check["reason"], check
    return Outcome(proc.returncode, report, proc.stderr, trailer)


# --------------------------------------------------------------------------------------------------
# fixtures and helpers


@pytest.fixture
def copy(simulated_archive: Path, tmp_path: Path) -> Path:
    target = tmp_path / "archive"
    shutil.copytree(simulated_archive, target)
    return target


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A secret file beside the archive, which no verifier may read."""
    path = tmp_path / "outside-secret.txt"
    path.write_text("the auditor's private notes\n", "utf-8")
    return path


def owner_vkey() -> str:
    return study_key().vkey


def seq_of(root: Path, kind: str, nth: int = 0) -> int:
    return [e["seq"] for e in read_events(root) if e["kind"] == kind][nth]


def response_blob(root: Path) -> str:
    event = next(e for e in read_events(root) if e["kind"] == "trial.responded")
    return str(event["blobs"]["response"])


def replace_line(root: Path, seq: int, old: bytes, new: bytes) -> None:
    path = root / EVENTS
    lines = path.read_bytes().split(b"\n")
    assert old in lines[seq], (old, lines[seq][:200])
    lines[seq] = lines[seq].replace(old, new, 1)
    path.write_bytes(b"\n".join(lines))


def owner_resigns(root: Path, change: Callable[[list[dict[str, Any]]], None] | None = None) -> None:
    """The owner re-signs the ledger after editing files: export.created lists them anew."""
    events = read_events(root)
    files = events[-1]["body"]["files"]
    for rel in list(files):
        path = root / rel
        if path.is_file():
            files[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        top = rel.split("/")[0]
        if path.is_file() and top not in ("ledger", "blobs") and rel != "MANIFEST.sha256":
            files[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    names = sorted(p.name for p in (root / "blobs").iterdir())
    listing = hashlib.sha256("".join(f"{n}\n" for n in names).encode()).hexdigest()
    events[-1]["body"]["blobs"] = {"count": len(names), "listing_sha256": listing}
    if change is not None:
        change(events)
    resign(root, events, study_key())


# --------------------------------------------------------------------------------------------------
# the harness itself


def test_a_fresh_export_verifies_under_the_harness(copy: Path, tmp_path: Path) -> None:
    """The honest archive, with every option an auditor gives (the owner's key from a file and
    on the command line, the registration checkpoint, two jobs), verifies in full under the
    limits, opening nothing outside it but the key file and importing no module of the writer
    (the run of ``python -m verify`` that test_archive_tamper.py makes with the writer's
    packages unimportable, in the slow set, proves the same)."""
    vkey = tmp_path / "owner.vkey"
    vkey.write_text(owner_vkey() + "\n", "utf-8")
    registration = (
        copy / "ledger" / "checkpoints" / f"{seq_of(copy, 'protocol.locked') + 1:08d}.txt"
    )
    out = run_verify(
        copy,
        *("--trusted-key", f"@{vkey}", "--trusted-key", owner_vkey()),
        *("--checkpoint", str(registration), "--jobs", "2"),
        allow_outside=True,
    )
    assert out.rc == 0, [c for c in out.report["checks"] if c["status"] == "FAIL"]  # type: ignore[index]
    assert set(out.trailer["outside"]) == {str(vkey)}, out.trailer["outside"]
    for name in ("layout", "report", "rescore", "reanalysis", "trust", "published-checkpoints"):
        out.passed(name)


def test_the_audit_hook_sees_an_open_outside_the_archive(copy: Path, tmp_path: Path) -> None:
    """The proof can fail: a checkpoint the auditor passes lies outside, and the hook says so."""
    published = tmp_path / "published.txt"
    shutil.copyfile(sorted((copy / "ledger" / "checkpoints").iterdir())[0], published)
    out = run_verify(copy, "--checkpoint", str(published), allow_outside=True, science=False)
    assert str(published) in out.trailer["outside"]


# --------------------------------------------------------------------------------------------------
# a named pipe in place of each kind of file

PIPES = {
    "events": EVENTS,
    "checkpoint": "ledger/checkpoints/00000019.txt",  # the registration checkpoint
    "key": "ledger/keys/*.vkey",
    "blob": "blobs/<response>",
    "manifest": "MANIFEST.sha256",
    "readme": "README.md",
    "files-csv": "protocol/files.csv",
    "protocol-json": "protocol/protocol.json",
    "spec": "protocol/study.toml",
    "prompt": "protocol/prompts/framing.txt",
    "arm-text": "protocol/arms/A.txt",
    "stimulus": "stimuli/mixed-1.png",
    "truth": "truth/truth.csv",
    "schedule": "trials/schedule.csv",
    "attempts": "trials/attempts.csv",
    "scores": "scores/scores.csv",
    "results": "analysis/results.json",
    "trials-csv": "analysis/trials.csv",
    "items-csv": "analysis/items.csv",
    "verdicts": "analysis/tables/verdicts.csv",
    "report": "analysis/report.html",
    "figure": "analysis/figures/accuracy_by_arm.png",
}
SCIENCE_READS = {"events", "blob", "results", "trials-csv", "items-csv"}
"""The kinds of :data:`PIPES` the science checks read (see the module's docstring)."""


@pytest.mark.parametrize("kind", _cases(list(PIPES), {"events", "blob", "report"}))
def test_named_pipe_in_place_of_a_file(copy: Path, kind: str) -> None:
    rel = PIPES[kind]
    if rel == "blobs/<response>":
        rel = f"blobs/{response_blob(copy)}"
    elif "*" in rel:
        rel = next(copy.glob(rel)).relative_to(copy).as_posix()
    path = copy / rel
    path.unlink()
    os.mkfifo(path)
    out = run_verify(copy, forbidden=(path,), science=kind in SCIENCE_READS)
    assert out.rc == 1
    if kind == "events":
        reason = out.failed("file")
        assert f"{EVENTS} is a named pipe (FIFO), not a regular file: not opened" in reason
        return
    reason = out.failed("layout")
    assert f"{rel} is a named pipe (FIFO), not a regular file: not opened" in reason
    owner = {
        "checkpoint": "checkpoints",
        "key": "keys",
        "blob": "blobs",
        "manifest": "manifest",
        "readme": "derived",
        "report": "report",
        "figure": "report",
    }.get(kind)
    if owner is not None:
        assert "named pipe" in out.failed(owner)


# --------------------------------------------------------------------------------------------------
# protocol/files.csv pointing elsewhere (unsigned data never chooses what is read)


@pytest.mark.parametrize("target", _cases(["absolute", "dotdot", "pipe"], {"dotdot"}))
def test_files_csv_points_the_truth_table_elsewhere(
    copy: Path, outside: Path, tmp_path: Path, target: str
) -> None:
    fifo = tmp_path / "outside.fifo"
    os.mkfifo(fifo)
    pointer = {"absolute": str(outside), "dotdot": f"../{outside.name}", "pipe": str(fifo)}[target]
    path = copy / "protocol" / "files.csv"
    lines = path.read_text("utf-8").split("\n")
    number = next(i for i, line in enumerate(lines) if ",truth," in line)
    lines[number] = lines[number].replace("truth/truth.csv", pointer)
    path.write_text("\n".join(lines), "utf-8")
    owner_resigns(copy)
    out = run_verify(copy, "--trusted-key", owner_vkey(), forbidden=(fifo, outside))
    assert out.rc == 1
    reason = out.failed("protocol")
    assert f"protocol/files.csv line {number + 1}: archive_path {pointer!r}" in reason
    for name in ("trust", "signatures", "export-coverage", "rescore", "reanalysis"):
        out.passed(name)  # the truth table comes from the signed artifact.locked event


# --------------------------------------------------------------------------------------------------
# a blob address that is a path


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
@pytest.mark.parametrize("address", ["absolute", "dotdot"])
def test_blob_address_that_is_a_path(copy: Path, outside: Path, signed: bool, address: str) -> None:
    pointer = str(outside) if address == "absolute" else f"../../{outside.name}"
    seq = seq_of(copy, "trial.responded")
    if signed:

        def change(events: list[dict[str, Any]]) -> None:
            events[seq]["blobs"]["response"] = pointer

        owner_resigns(copy, change)
    else:
        event = read_events(copy)[seq]
        digest = event["blobs"]["response"]
        replace_line(
            copy, seq, f'"response":"{digest}"'.encode(), f'"response":"{pointer}"'.encode()
        )
    out = run_verify(copy, "--trusted-key", owner_vkey(), forbidden=(outside,))
    assert out.rc == 1
    reason = out.failed("envelopes")
    shown = repr(pointer) if len(repr(pointer)) <= 80 else repr(pointer)[:77]
    assert f"seq {seq}: blob 'response': {shown}" in reason
    assert "is not a 64 lowercase hex SHA-256" in reason
    assert out.check("envelopes")["where"] == f"{EVENTS} line {seq + 1}"
    for name in ("rescore", "reanalysis"):
        assert f"{EVENTS} line {seq + 1} is not a valid event envelope" in out.failed(name)


# --------------------------------------------------------------------------------------------------
# symbolic links, to files and folders, inside and outside the archive


def _link_readme_outside(root: Path, outside: Path) -> tuple[str, Path]:
    (root / "README.md").unlink()
    (root / "README.md").symlink_to(outside)
    return "README.md", root / "README.md"


def _link_readme_inside(root: Path, outside: Path) -> tuple[str, Path]:
    (root / "README.md").unlink()
    (root / "README.md").symlink_to("protocol/README.md")
    return "README.md", root / "README.md"


def _link_readme_dev_zero(root: Path, outside: Path) -> tuple[str, Path]:
    (root / "README.md").unlink()
    (root / "README.md").symlink_to("/dev/zero")
    return "README.md", root / "README.md"


def _link_checkpoint_outside(root: Path, outside: Path) -> tuple[str, Path]:
    path = sorted((root / "ledger" / "checkpoints").iterdir())[0]
    copy = outside.parent / path.name
    shutil.copyfile(path, copy)  # the same bytes: only following the link would pass
    path.unlink()
    path.symlink_to(copy)
    return path.relative_to(root).as_posix(), path


def _link_keys_folder_outside(root: Path, outside: Path) -> tuple[str, Path]:
    keys = root / "ledger" / "keys"
    shutil.copytree(keys, outside.parent / "keys")
    shutil.rmtree(keys)
    keys.symlink_to(outside.parent / "keys", target_is_directory=True)
    return "ledger/keys", keys


def _link_truth_folder_outside(root: Path, outside: Path) -> tuple[str, Path]:
    truth = root / "truth"
    shutil.copytree(truth, outside.parent / "truth")
    shutil.rmtree(truth)
    truth.symlink_to(outside.parent / "truth", target_is_directory=True)
    return "truth", truth


def _link_root_folder_to_etc(root: Path, outside: Path) -> tuple[str, Path]:
    (root / "extra").symlink_to("/etc", target_is_directory=True)
    return "extra", root / "extra"


def _link_folder_inside(root: Path, outside: Path) -> tuple[str, Path]:
    (root / "analysis" / "more").symlink_to("../blobs", target_is_directory=True)
    return "analysis/more", root / "analysis" / "more"


LINKS = {
    "readme-to-outside-file": _link_readme_outside,
    "readme-to-inside-file": _link_readme_inside,
    "readme-to-dev-zero": _link_readme_dev_zero,
    "checkpoint-to-outside-copy": _link_checkpoint_outside,
    "keys-folder-to-outside-copy": _link_keys_folder_outside,
    "truth-folder-to-outside-copy": _link_truth_folder_outside,
    "root-folder-to-etc": _link_root_folder_to_etc,
    "folder-to-inside-folder": _link_folder_inside,
}


@pytest.mark.parametrize(
    "case",
    _cases(
        list(LINKS), {"readme-to-outside-file", "keys-folder-to-outside-copy", "root-folder-to-etc"}
    ),
)
def test_symbolic_link(copy: Path, outside: Path, case: str) -> None:
    rel, link = LINKS[case](copy, outside)
    out = run_verify(copy, forbidden=(link,), science=False)  # no link is a path science reads
    assert out.rc == 1
    reason = out.failed("layout")
    assert f"{rel} is a symbolic link to " in reason and "not followed" in reason
    if rel == "README.md":
        assert "README.md is a symbolic link" in out.failed("derived")


# --------------------------------------------------------------------------------------------------
# sizes: a 1 GB blob, a blob past the limit, a 1 GB checkpoint, a million junk lines, a 1 GB line


def _sparse(path: Path, size: int) -> None:
    path.unlink(missing_ok=True)
    with open(path, "wb") as fh:
        fh.truncate(size)


@pytest.mark.slow  # a giant input: the slow set (.ci/run) runs it
def test_one_gb_blob_in_place_of_a_response(copy: Path) -> None:
    digest = response_blob(copy)
    _sparse(copy / "blobs" / digest, 10**9)
    out = run_verify(copy)
    assert out.rc == 1
    assert f"(blobs/{digest}) does not hash to its name" in out.failed("blobs")


def test_blob_past_the_size_limit(copy: Path) -> None:
    digest = response_blob(copy)
    _sparse(copy / "blobs" / digest, (1 << 30) + 1)
    out = run_verify(copy)
    assert out.rc == 1
    reason = out.failed("blobs")
    assert f"blobs/{digest}) is 1,073,741,825 bytes, more than the 1 GiB limit" in reason


def test_one_gb_sparse_checkpoint(copy: Path) -> None:
    path = sorted((copy / "ledger" / "checkpoints").iterdir())[0]
    _sparse(path, 1 << 30)
    out = run_verify(copy, science=False)  # a checkpoint: science reads none
    assert out.rc == 1
    rel = path.relative_to(copy).as_posix()
    assert f"{rel} is 1,073,741,824 bytes, more than the 1 MiB limit: not read" in out.failed(
        "checkpoints"
    )


@pytest.mark.slow  # a giant input: the slow set (.ci/run) runs it
def test_a_million_junk_lines(copy: Path) -> None:
    n = len(read_events(copy))
    with open(copy / EVENTS, "ab") as fh:
        fh.write(b"junk\n" * 1_000_000)
    out = run_verify(copy)
    assert out.rc == 1
    reason = out.failed("envelopes")
    assert f"{EVENTS} line {n + 1}: not valid JSON for JCS" in reason
    assert re.search(r"\(and [0-9]{6,} more\)", reason), reason  # one per line (or more)
    assert f"{EVENTS} line {n + 1} is not a valid event envelope" in out.failed("rescore")


@pytest.mark.slow  # a giant input: the slow set (.ci/run) runs it
def test_a_one_gb_line(copy: Path) -> None:
    n = len(read_events(copy))
    path = copy / EVENTS
    with open(path, "ab") as fh:
        fh.truncate(path.stat().st_size + 10**9)
    out = run_verify(copy)
    assert out.rc == 1
    reason = out.failed("envelopes")
    assert f"{EVENTS} line {n + 1}: the line is longer than" in reason and "not parsed" in reason


JUNK_LINES = 4_000_000  # the most lines the verifier reads (verify._reader.events)


@pytest.mark.slow  # a giant input: the slow set (.ci/run) runs it
def test_four_million_envelope_shaped_junk_lines(copy: Path) -> None:
    """Issue 32: lines that parse as envelopes of this study (the owner's actor, a trial kind,
    the next seq) but are not its events (a wrong prev, a signature that does not verify) stay
    within the bounds of docs/archive-format.md §6, up to the line limit and near the 2 GiB
    file limit: memory does not grow with them, and past MAX_FAULTY_KEPT faulty lines they are
    only hashed, never kept."""
    from verify._ledgerfile import MAX_FAULTY_KEPT
    from verify._reader.events import MAX_EVENT_LINES
    from verify._reader.files import MAX_EVENTS_BYTES

    events = read_events(copy)
    n = len(events)
    model = next(e for e in events if e["kind"] == "trial.responded")
    envelope = {**model, "seq": 0, "prev": "ab" * 32, "blobs": {}, "body": {"note": ""}}
    signature = base64.b64encode(b"\x01" * 64).decode()
    line = canonical_json({"envelope": envelope, "signature": signature}) + b"\n"
    count = MAX_EVENT_LINES - n
    pad = (MAX_EVENTS_BYTES - (copy / EVENTS).stat().st_size) // count - len(line) - 16
    envelope["body"]["note"] = "x" * max(pad, 0)  # lines as long as the file limit allows
    template = (canonical_json({"envelope": envelope, "signature": signature}) + b"\n").replace(
        b'"seq":0,', b'"seq":%d,'
    )
    with open(copy / EVENTS, "ab") as fh:
        for lo in range(n, n + count, 100_000):
            fh.write(b"".join(template % seq for seq in range(lo, min(lo + 100_000, n + count))))
    assert (copy / EVENTS).stat().st_size <= MAX_EVENTS_BYTES
    assert count == JUNK_LINES - n
    out = run_verify(copy)  # under 30 s of CPU and 1 GiB resident (run_verify's limits)
    assert out.rc == 1
    first, unkept, skimmed = n, n + MAX_FAULTY_KEPT, n + MAX_FAULTY_KEPT + 1
    chain = out.failed("chain")
    assert f"{EVENTS} line {first + 1}" in chain and f"seq {first}: prev does not match" in chain
    signatures = out.failed("signatures")
    assert f"seq {first}: signature does not verify under key {model['actor']}" in signatures
    envelopes = out.failed("envelopes")
    assert f"seq {skimmed}: this line and the {n + count - skimmed - 1:,} after it" in envelopes
    assert f"{EVENTS} line {skimmed + 1}" in envelopes
    for name in ("rescore", "reanalysis"):
        reason = out.failed(name)
        assert f"{EVENTS} line {unkept + 1} is one of more than {MAX_FAULTY_KEPT:,} lines" in reason


# --------------------------------------------------------------------------------------------------
# an extra file: every entry is accounted for, even when the owner re-signs the export


def _extra_ledger(root: Path) -> str:
    (root / "ledger" / "NOTES.txt").write_text("errata: H1 was not supported\n", "utf-8")
    return "ledger/NOTES.txt"


def _extra_blobs(root: Path) -> str:
    (root / "blobs" / "NOTES.txt").write_text("errata: H1 was not supported\n", "utf-8")
    return "blobs/NOTES.txt"


def _extra_blob_by_hash(root: Path) -> str:
    data = b"errata: H1 was not supported\n"
    name = hashlib.sha256(data).hexdigest()
    (root / "blobs" / name).write_bytes(data)
    return f"blobs/{name}"


def _extra_root(root: Path) -> str:
    (root / "NOTES.txt").write_text("errata: H1 was not supported\n", "utf-8")
    return "NOTES.txt"


def _extra_folder(root: Path) -> str:
    (root / "ledger" / "old").mkdir()
    return "ledger/old/"


EXTRA = {
    "ledger": _extra_ledger,
    "blobs": _extra_blobs,
    "blob-named-by-its-hash": _extra_blob_by_hash,
    "root": _extra_root,
    "empty-folder": _extra_folder,
}


@pytest.mark.parametrize("case", _cases(list(EXTRA), {"ledger", "blobs"}))
def test_extra_entry_signed_by_the_owner(copy: Path, case: str) -> None:
    rel = EXTRA[case](copy)
    owner_resigns(copy)
    # no extra entry is read by science (it reads blobs by the address an event names)
    out = run_verify(copy, "--trusted-key", owner_vkey(), science=False)
    assert out.rc == 1
    for name in ("trust", "signatures", "manifest"):
        out.passed(name)
    if case == "blobs":  # a blob must be named by its content's hash (export-coverage)
        assert "blobs/NOTES.txt: content SHA-256" in out.failed("export-coverage")
    else:
        out.passed("export-coverage")
    reason = out.failed("layout")
    assert rel in reason
    assert "not part of the archive" in reason or "a folder the archive format does not" in reason


# --------------------------------------------------------------------------------------------------
# what readers look at: report.html and the figures, doctored and re-signed by the owner

REPORT = "analysis/report.html"


def _edit_report(root: Path, old: str, new: str) -> None:
    path = root / REPORT
    text = path.read_text("utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), "utf-8")


def _verdict(root: Path) -> str:
    _edit_report(
        root,
        '<span class="verdict v-supported">supported</span>',
        '<span class="verdict v-supported">not supported</span>',
    )
    return "verdict: the report says 'not supported', the events say 'supported'"


def _estimate(root: Path) -> str:
    text = (root / REPORT).read_text("utf-8")
    match = re.search(r"<td>lmm</td><td>([+-][0-9.]+) pp \(", text)
    assert match is not None
    _edit_report(root, f"<td>lmm</td><td>{match.group(1)} pp (", "<td>lmm</td><td>+99.9 pp (")
    return "estimate (CI): the report says '+99.9 pp"


def _model_p(root: Path) -> str:
    text = (root / REPORT).read_text("utf-8")
    match = re.search(
        r'<tr><td>arm\[T\.B\]</td>(?:<td class="num">[^<]*</td>){2}<td>[^<]*</td>'
        r'<td class="num">([^<]*)</td>',
        text,
    )
    assert match is not None
    _edit_report(root, match.group(0), match.group(0).replace(match.group(1), "0.0001", 1))
    return "row 'arm[T.B]', p: the report says '0.0001'"


def _simulated_banner(root: Path) -> str:
    text = (root / REPORT).read_text("utf-8")
    banner = re.search(r'<div class="banner simulated".*?</div>', text)
    assert banner is not None
    _edit_report(root, banner.group(0), "")
    return "does not carry the SIMULATED DATA banner"


def _script(root: Path) -> str:
    _edit_report(root, "<h2>Verdicts", "<script>document.title='x'</script><h2>Verdicts")
    return "<script> is not an element of the report"


def _paragraph(root: Path) -> str:
    _edit_report(root, "<h2>Verdicts", "<p>Errata: H1 was not supported.</p><h2>Verdicts")
    return "<p> says 'Errata: H1 was not supported.'"


def _verifier_row(root: Path) -> str:
    _edit_report(
        root,
        "<tr><td>file</td>",
        "<tr><td>errata</td><td>FAIL</td><td></td><td>H1 was not supported</td></tr>"
        "<tr><td>file</td>",
    )
    return "the last table is not the verifier's checks"


def _figure_file_swapped(root: Path) -> str:
    figures = root / "analysis" / "figures"
    shutil.copyfile(figures / "confusion_B.png", figures / "confusion_A.png")
    return "the image embedded as confusion_A.png is not the bytes of analysis/figures/"


def _figure_not_a_png(root: Path) -> str:
    figures = root / "analysis" / "figures"
    old = (figures / "accuracy_by_arm.png").read_bytes()
    new = old[: len(old) // 2]  # truncated, and embedded so in the HTML too
    (figures / "accuracy_by_arm.png").write_bytes(new)
    _edit_report(root, base64.b64encode(old).decode(), base64.b64encode(new).decode())
    return "analysis/figures/accuracy_by_arm.png chunk"


DOCTORED = {
    "verdict": _verdict,
    "estimate": _estimate,
    "model-p-value": _model_p,
    "simulated-banner-removed": _simulated_banner,
    "script-added": _script,
    "paragraph-added": _paragraph,
    "row-added-to-the-verifier-table": _verifier_row,
    "figure-file-swapped": _figure_file_swapped,
    "figure-truncated-in-file-and-html": _figure_not_a_png,
}


@pytest.mark.parametrize("case", _cases(list(DOCTORED), {"verdict"}))
def test_report_doctored_and_resigned_by_the_owner(copy: Path, case: str) -> None:
    needle = DOCTORED[case](copy)
    owner_resigns(copy)
    out = run_verify(copy, "--trusted-key", owner_vkey())
    assert out.rc == 1
    for name in ("trust", "signatures", "export-coverage", "derived", "reanalysis"):
        out.passed(name)
    reason = out.failed("report")
    assert needle in reason
    assert "analysis/" in reason


# --------------------------------------------------------------------------------------------------
# malformed lines: NaN, Infinity, deep nesting, a lone surrogate


def _nan(value: bytes) -> bytes:
    return b"NaN"


def _infinity(value: bytes) -> bytes:
    return b"-Infinity"


def _deep(value: bytes) -> bytes:
    return b"[" * 100_000 + value + b"]" * 100_000


def _nested(value: bytes) -> bytes:
    return b"[" * 100 + value + b"]" * 100


MALFORMED: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "nan": (_nan, "not valid JSON for JCS"),
    "infinity": (_infinity, "not valid JSON for JCS"),
    "deep-nesting": (_deep, "nested too deeply"),
    "nesting-past-the-limit": (_nested, "nests arrays and objects deeper than 64 levels"),
}


@pytest.mark.parametrize("case", [*MALFORMED, "lone-surrogate"])
def test_malformed_line(copy: Path, case: str) -> None:
    seq = seq_of(copy, "trial.scored")
    line = (copy / EVENTS).read_bytes().split(b"\n")[seq]
    if case == "lone-surrogate":
        match = re.search(rb'"stimulus":"([^"]*)"', line)
        assert match is not None
        replace_line(copy, seq, match.group(0), b'"stimulus":"\\ud800"')
        needle = "cannot be canonicalised"
    else:
        make, needle = MALFORMED[case]
        match = re.search(rb'"n_correct":([0-9]+)', line)
        assert match is not None
        replace_line(copy, seq, match.group(0), b'"n_correct":' + make(match.group(1)))
    out = run_verify(copy)
    assert out.rc == 1
    reason = out.failed("envelopes")
    assert f"{EVENTS} line {seq + 1}" in reason and needle in reason
    for name in ("rescore", "reanalysis"):
        assert f"{EVENTS} line {seq + 1} is not a valid event envelope" in out.failed(name)


def test_nesting_past_the_limit_signed_by_the_owner(copy: Path) -> None:
    seq = seq_of(copy, "trial.scored")
    deep: Any = 1
    for _ in range(100):
        deep = [deep]

    def change(events: list[dict[str, Any]]) -> None:
        events[seq]["body"]["note"] = deep

    owner_resigns(copy, change)
    assert canonical_json(read_events(copy)[seq])  # a valid, signed JSON line
    out = run_verify(copy, "--trusted-key", owner_vkey())
    assert out.rc == 1
    out.passed("signatures")
    reason = out.failed("envelopes")
    assert f"{EVENTS} line {seq + 1}: the envelope nests arrays and objects deeper" in reason
    assert f"{EVENTS} line {seq + 1} is not a valid event envelope" in out.failed("rescore")


# --------------------------------------------------------------------------------------------------
# the command line's own inputs: exit 2 for a usage error, 1 for a failed check, never a hang


def test_trusted_key_from_a_named_pipe_is_a_usage_error(copy: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "owner.vkey"
    os.mkfifo(fifo)
    out = run_verify(copy, "--trusted-key", f"@{fifo}", forbidden=(fifo,))
    assert out.rc == 2 and out.report is None
    assert f"vkey file {fifo}: unreadable (is a named pipe (FIFO)" in out.stderr


def test_trusted_key_from_dev_zero_is_a_usage_error(copy: Path) -> None:
    out = run_verify(copy, "--trusted-key", "@/dev/zero", forbidden=(Path("/dev/zero"),))
    assert out.rc == 2 and "vkey file /dev/zero: unreadable (is a character device" in out.stderr


def test_published_checkpoint_that_is_a_named_pipe(copy: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "published.txt"
    os.mkfifo(fifo)
    out = run_verify(copy, "--checkpoint", str(fifo), forbidden=(fifo,), science=False)
    assert out.rc == 1
    assert "is a named pipe (FIFO), not a regular file" in out.failed("published-checkpoints")


# --------------------------------------------------------------------------------------------------
# signed numbers that would make the verifier work forever


@pytest.mark.parametrize(
    ("field", "value", "check", "needle"),
    [
        ("replicates", 10**9, "schedule", "more trials than the log's"),
        (
            "bootstrap_iterations",
            10**9,
            "reanalysis",
            "asks for 1,000,000,000 bootstrap iterations",
        ),
    ],
    ids=["replicates", "bootstrap-iterations"],
)
def test_signed_design_that_would_never_finish(
    copy: Path, field: str, value: int, check: str, needle: str
) -> None:
    locked = seq_of(copy, "protocol.locked")

    def change(events: list[dict[str, Any]]) -> None:
        events[locked]["body"]["design"][field] = value

    owner_resigns(copy, change)
    out = run_verify(copy, "--trusted-key", owner_vkey())
    assert out.rc == 1
    out.passed("signatures")
    assert needle in out.failed(check)
