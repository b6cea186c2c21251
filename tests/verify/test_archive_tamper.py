"""Tampering with an exported archive: every tamper is caught by the check that owns it.

A module-scoped fixture builds, runs, scores, unblinds, analyses and exports a small simulated
study once; each test copies the archive, applies one tamper and verifies the copy with the
independent verifier (``verify.verify_archive``).  File tampers also rewrite ``MANIFEST.sha256``
so that only the signed ``export.created`` event can catch them; semantic tampers that need a
consistent log re-sign the edited events with a new key (chain, signatures, checkpoints, keys
and manifest all consistent) and must still fail on content.
"""

from __future__ import annotations

import base64
import copy
import csv
import hashlib
import io
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers import SCIENCE_CHECKS, science_skipped, study_key

from ledger import (
    Checkpoint,
    SigningKey,
    VerifierKey,
    canonical_json,
    leaf_hash,
    root_from_leaf_hashes,
)
from verify import Report, Status, verify_archive, verify_path

EVENTS = "ledger/events.jsonl"


SLOW = pytest.mark.slow
"""Cases of the slow set (.ci/run): each is a whole verification of a case the default run
covers another way."""


# --------------------------------------------------------------------------------------------------
# fixtures and helpers


@pytest.fixture
def archive(simulated_archive: Path) -> Path:
    """A fresh export of a simulated study (2 replicates: 70 trials), built once per session
    (conftest's ``simulated_archive``; copy it to change it)."""
    return simulated_archive


@pytest.fixture
def copy_(archive: Path, tmp_path: Path) -> Path:
    target = tmp_path / "archive"
    shutil.copytree(archive, target)
    return target


def rewrite_manifest(root: Path) -> None:
    """Rewrite MANIFEST.sha256 to match the files as they are now (what a forger would do)."""
    lines = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel != "MANIFEST.sha256":
            lines.append(
                (rel.encode(), f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {rel}\n")
            )
    lines.sort()
    (root / "MANIFEST.sha256").write_text("".join(line for _, line in lines), "utf-8")


def flip_byte(path: Path, offset: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    at = len(data) // 2 if offset is None else offset
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def read_events(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line)["envelope"] for line in (root / EVENTS).read_bytes().splitlines()]


def seqs_of(events: list[dict[str, Any]], kind: str) -> list[int]:
    return [e["seq"] for e in events if e["kind"] == kind]


def failed(report: Report, name: str) -> str:
    """Assert check ``name`` FAILed; return its reason plus where."""
    check = report.get(name)
    assert check is not None, f"check {name} was not run: {[c.name for c in report.checks]}"
    assert check.status is Status.FAIL, f"{name} did not fail: {check}"
    assert not report.ok
    return f"{check.reason} @ {check.where} seq {check.seq}"


def passed(report: Report, name: str) -> None:
    check = report.get(name)
    assert check is not None and check.status is Status.PASS, check


_REFS = ("request_seq", "response_seq", "session", "protocol_seq")


def _remap(value: Any, mapping: dict[int, int]) -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in _REFS and isinstance(v, int) and v in mapping:
                out[k] = mapping[v]
            elif k == "requests" and isinstance(v, list):
                out[k] = [mapping.get(x, x) for x in v]
            else:
                out[k] = _remap(v, mapping)
        return out
    if isinstance(value, list):
        return [_remap(v, mapping) for v in value]
    return value


def resign(root: Path, events: list[dict[str, Any]], key: SigningKey | None = None) -> SigningKey:
    """Rewrite ``ledger/`` from ``events`` (old seqs kept in ``seq``), consistently re-signed.

    Events are renumbered in list order and references to old seqs (``request_seq``,
    ``response_seq``, ``session``, ``protocol_seq``, batch ``requests``) remapped; every event is
    signed by ``key`` (a new key by default), which becomes the genesis key; checkpoints are
    re-signed at the new size of each old one (so the registration and run-session checkpoints
    still follow their events, as a careful forger would make them) and at the final size; the
    manifest is rewritten.
    """
    key = key or SigningKey.generate("forger.example/owner")
    verifier = VerifierKey.parse(key.vkey)
    mapping = {e["seq"]: i for i, e in enumerate(events)}
    lines: list[bytes] = []
    leaves: list[bytes] = []
    prev = "0" * 64
    origin = ""
    for i, old in enumerate(events):
        env = copy.deepcopy(old)
        env["body"] = _remap(env["body"], mapping)
        env["seq"], env["prev"], env["actor"] = i, prev, verifier.actor
        if env["kind"] == "ledger.genesis":
            env["body"]["vkey"] = key.vkey
            origin = env["body"]["origin"]
        data = canonical_json(env)
        signature = base64.b64encode(key.sign(data)).decode()
        lines.append(canonical_json({"envelope": env, "signature": signature}) + b"\n")
        lh = leaf_hash(data)
        leaves.append(lh)
        prev = lh.hex()
    (root / EVENTS).write_bytes(b"".join(lines))
    cps = root / "ledger" / "checkpoints"
    sizes = {int(p.stem) for p in cps.iterdir()}
    shutil.rmtree(cps)
    cps.mkdir()
    moved = {mapping[s - 1] + 1 for s in sizes if s - 1 in mapping}
    for size in sorted(moved | {len(leaves)}):
        cp = Checkpoint(origin, size, root_from_leaf_hashes(leaves[:size]))
        (cps / f"{size:08d}.txt").write_text(cp.sign([key]), "utf-8")
    keys = root / "ledger" / "keys"
    shutil.rmtree(keys)
    keys.mkdir()
    name = verifier.actor.replace("/", "_").replace(":", "_").replace("+", "_")
    (keys / f"{name}.vkey").write_text(key.vkey + "\n", "utf-8")
    rewrite_manifest(root)
    return key


def first_trial_events(events: list[dict[str, Any]], position: int) -> dict[str, dict[str, Any]]:
    """The trial.requested, trial.responded and trial.scored events of the trial at ``position``."""
    req = next(
        e for e in events if e["kind"] == "trial.requested" and e["body"]["position"] == position
    )
    resp = next(
        e
        for e in events
        if e["kind"] == "trial.responded" and e["body"]["request_seq"] == req["seq"]
    )
    scored = next(
        e
        for e in events
        if e["kind"] == "trial.scored" and e["body"]["response_seq"] == resp["seq"]
    )
    return {"requested": req, "responded": resp, "scored": scored}


# --------------------------------------------------------------------------------------------------
# a fresh export


def test_fresh_export_verifies(simulated_report: Report) -> None:
    report = simulated_report
    assert report.ok, [c for c in report.checks if c.status is Status.FAIL]
    names = [c.name for c in report.checks]
    for name in (
        "manifest",
        "export-coverage",
        "protocol",
        "schedule",
        "requests",
        "outcomes",
        "blinding",
        "signatures",
        "chain",
        "checkpoints",
    ):
        assert name in names
        passed(report, name)
    assert report.get("trust") is not None and report.get("trust").status is Status.WARN  # type: ignore[union-attr]
    assert "integrity, not authorship" in report.get("trust").reason  # type: ignore[union-attr]
    assert "rescore" in names  # run by verify._science, or a WARN that it was not run


def test_fresh_export_passes_sha256sum(archive: Path) -> None:
    if shutil.which("sha256sum") is None:
        pytest.skip("sha256sum is not installed")
    result = subprocess.run(
        ["sha256sum", "--quiet", "-c", "MANIFEST.sha256"],
        cwd=archive,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_fresh_export_with_trusted_key_and_registration_checkpoint(
    archive: Path, simulated_report: Report
) -> None:
    """The trusted key and the published checkpoint reach the ledger's checks alone: the
    science checks are handed the archive's files and events, never the trust options
    (``verify._archive._science``), so they come out as in the session's report of the same
    archive without them (``simulated_report``), which must have them PASS; here they are
    skipped (``helpers.science_skipped``) and every other check must PASS."""
    with science_skipped():
        report = verify_path(  # a folder holding ledger/events.jsonl is verified as an archive
            archive,
            trusted_keys=[study_key().vkey],
            checkpoints=[sorted((archive / "ledger" / "checkpoints").iterdir())[0]],
        )
    assert report.ok, report.failures
    assert not {c.name for c in report.checks} & set(SCIENCE_CHECKS)
    for name in SCIENCE_CHECKS:
        if simulated_report.get(name) is not None:  # "plan" only where a plan is locked
            passed(simulated_report, name)
    passed(simulated_report, "rescore")
    passed(simulated_report, "reanalysis")
    passed(report, "trust")
    passed(report, "published-checkpoints")
    passed(report, "export-coverage")  # the archive's checks ran


@SLOW  # test_archive.py's test_archive_verifies_with_the_cli_and_sha256sum runs the CLI by default
def test_cli_verifies_an_archive(archive: Path) -> None:
    from click.testing import CliRunner

    from ledger.cli import main

    result = CliRunner().invoke(main, ["verify", str(archive)])
    assert result.exit_code == 0, result.output
    assert "manifest" in result.output and "export-coverage" in result.output
    result = CliRunner().invoke(main, ["verify", str(archive), "--json"])
    assert json.loads(result.output)["ok"] is True


@SLOW  # test_python_m_verify_fails_a_tampered_archive runs the same path by default
def test_cli_fails_a_tampered_archive(copy_: Path) -> None:
    from click.testing import CliRunner

    from ledger.cli import main

    flip_byte(copy_ / "README.md", 0)
    result = CliRunner().invoke(main, ["verify", str(copy_)])
    assert result.exit_code == 1
    assert "README.md" in result.output and "FAILED" in result.output


def test_skipping_science_changes_no_other_check(
    archive: Path, copy_: Path, simulated_report: Report
) -> None:
    """``helpers.science_skipped``, which most tests below verify in: without the science checks
    every other check of an honest and of a tampered archive comes out the same, and the
    tampered one still FAILs (the reason a test that expects a FAIL may skip them)."""
    flip_byte(copy_ / "analysis" / "results.json")
    rewrite_manifest(copy_)
    full = verify_archive(copy_)
    with science_skipped():
        pairs = [(simulated_report, verify_archive(archive)), (full, verify_archive(copy_))]
    assert full.get("reanalysis").status is Status.FAIL  # type: ignore[union-attr]
    for whole, skipped in pairs:
        others = [c for c in whole.checks if c.name not in SCIENCE_CHECKS]
        assert len(others) < len(whole.checks)  # the full report has science checks
        assert skipped.checks == others
    assert not pairs[1][1].ok and pairs[0][1].ok


# --------------------------------------------------------------------------------------------------
# one byte in a file, with the manifest rewritten to match


def _stimulus(root: Path) -> Path:
    return sorted((root / "stimuli").iterdir())[0]


@SLOW  # a whole verification; test_archive flips a byte of each part by default
def test_flip_byte_in_stimulus(copy_: Path) -> None:
    target = _stimulus(copy_)
    flip_byte(target)
    rewrite_manifest(copy_)
    report = verify_archive(copy_)
    passed(report, "manifest")
    rel = target.relative_to(copy_).as_posix()
    assert rel in failed(report, "export-coverage")
    assert rel in failed(report, "protocol")


@SLOW  # a whole verification; test_archive flips a byte of each part by default
def test_flip_byte_in_prompt(copy_: Path) -> None:
    target = copy_ / "protocol" / "prompts" / "decoding_rule.txt"
    flip_byte(target)
    rewrite_manifest(copy_)
    report = verify_archive(copy_)
    assert "protocol/prompts/decoding_rule.txt" in failed(report, "export-coverage")
    assert "protocol/prompts/decoding_rule.txt" in failed(report, "protocol")


@SLOW  # a whole verification; test_archive flips a byte of each part by default
def test_flip_byte_in_arm_text(copy_: Path) -> None:
    flip_byte(copy_ / "protocol" / "arms" / "A.txt")
    rewrite_manifest(copy_)
    report = verify_archive(copy_)
    assert "protocol/arms/A.txt" in failed(report, "protocol")


@SLOW  # a whole verification; test_archive flips a byte of each part by default
def test_flip_byte_in_response_blob(copy_: Path) -> None:
    events = read_events(copy_)
    digest = next(e for e in events if e["kind"] == "trial.responded")["blobs"]["response"]
    flip_byte(copy_ / "blobs" / digest)
    rewrite_manifest(copy_)
    report = verify_archive(copy_)
    assert f"blobs/{digest}" in failed(report, "blobs")
    assert f"blobs/{digest}" in failed(report, "export-coverage")
    assert digest in failed(report, "outcomes")


@SLOW  # a whole verification; test_archive flips a byte of each part by default
def test_flip_byte_in_scores_csv(copy_: Path) -> None:
    flip_byte(copy_ / "scores" / "scores.csv")
    rewrite_manifest(copy_)
    report = verify_archive(copy_)
    passed(report, "manifest")
    assert "scores/scores.csv" in failed(report, "export-coverage")


@SLOW  # a whole verification; test_archive flips a byte of each part by default
def test_flip_byte_in_results_json(copy_: Path) -> None:
    flip_byte(copy_ / "analysis" / "results.json")
    rewrite_manifest(copy_)
    report = verify_archive(copy_)
    assert "analysis/results.json" in failed(report, "export-coverage")


@SLOW  # a whole verification; test_archive flips a byte of each part by default
def test_flip_byte_in_readme(copy_: Path) -> None:
    flip_byte(copy_ / "README.md")
    rewrite_manifest(copy_)
    report = verify_archive(copy_)
    assert "README.md" in failed(report, "export-coverage")


def test_flip_byte_in_events_jsonl(copy_: Path) -> None:
    events = read_events(copy_)
    seq = seqs_of(events, "trial.scored")[0]
    lines = (copy_ / EVENTS).read_bytes().splitlines(keepends=True)
    lines[seq] = lines[seq].replace(b'"n_correct":', b'"n_correcu":', 1)
    (copy_ / EVENTS).write_bytes(b"".join(lines))
    rewrite_manifest(copy_)
    with science_skipped():
        report = verify_archive(copy_)
    passed(report, "manifest")
    where = failed(report, "signatures")
    assert f"seq {seq}" in where and f"line {seq + 1}" in where
    assert f"seq {seq + 1}" in failed(report, "chain")


@SLOW  # a whole verification; test_archive flips a byte of each part by default
def test_whitespace_flip_in_events_jsonl(copy_: Path) -> None:
    lines = (copy_ / EVENTS).read_bytes().splitlines(keepends=True)
    lines[5] = lines[5].replace(b'{"envelope":', b'{"envelope": ', 1)
    (copy_ / EVENTS).write_bytes(b"".join(lines))
    rewrite_manifest(copy_)
    report = verify_archive(copy_)
    reason = failed(report, "envelopes")
    assert "ledger/events.jsonl line 6" in reason and "canonical" in reason
    passed(report, "signatures")  # the content is intact: only the line's bytes changed
    passed(report, "chain")


# --------------------------------------------------------------------------------------------------
# files added or removed


def test_delete_file(copy_: Path) -> None:
    (copy_ / "truth" / "truth.csv").unlink()
    with science_skipped():
        report = verify_archive(copy_)
    assert "truth/truth.csv" in failed(report, "manifest")
    assert "truth/truth.csv" in failed(report, "export-coverage")
    assert "truth/truth.csv" in failed(report, "protocol")


def test_add_file(copy_: Path) -> None:
    (copy_ / "analysis" / "extra.csv").write_text("a,b\n1,2\n", "utf-8")
    with science_skipped():
        report = verify_archive(copy_)
    assert "analysis/extra.csv" in failed(report, "manifest")
    assert "analysis/extra.csv" in failed(report, "export-coverage")


def test_add_file_with_manifest_rewritten(copy_: Path) -> None:
    (copy_ / "stimuli" / "extra.png").write_bytes(_stimulus(copy_).read_bytes())
    rewrite_manifest(copy_)
    with science_skipped():
        report = verify_archive(copy_)
    passed(report, "manifest")
    assert "stimuli/extra.png" in failed(report, "export-coverage")
    assert "stimuli/extra.png" in failed(report, "protocol")


def test_malformed_manifest_line(copy_: Path) -> None:
    manifest = copy_ / "MANIFEST.sha256"
    lines = manifest.read_text("utf-8").splitlines(keepends=True)
    lines[2] = lines[2].replace("  ", " ", 1)
    manifest.write_text("".join(lines), "utf-8")
    with science_skipped():
        report = verify_archive(copy_)
    assert "MANIFEST.sha256 line 3" in failed(report, "manifest")


# --------------------------------------------------------------------------------------------------
# trials and the schedule


def test_drop_trial(copy_: Path) -> None:
    events = read_events(copy_)
    trial = first_trial_events(events, 3)
    drop = {e["seq"] for e in trial.values()}
    lines = (copy_ / EVENTS).read_bytes().splitlines(keepends=True)
    (copy_ / EVENTS).write_bytes(b"".join(line for i, line in enumerate(lines) if i not in drop))
    rewrite_manifest(copy_)
    with science_skipped():  # the checks read below are not science checks
        report = verify_archive(copy_)
    first = min(drop)
    assert f"seq {first}" in failed(report, "chain")  # the next event's prev names a dropped one
    assert f"line {first + 1}" in failed(report, "envelopes")  # seqs no longer match the lines


def test_drop_trial_resigned(copy_: Path) -> None:
    events = read_events(copy_)
    trial = first_trial_events(events, 3)
    drop = {e["seq"] for e in trial.values()}
    resign(copy_, [e for e in events if e["seq"] not in drop])
    with science_skipped():  # the checks read below are not science checks
        report = verify_archive(copy_)
    for name in ("chain", "signatures", "checkpoints", "keys", "manifest"):
        passed(report, name)
    tid = trial["requested"]["body"]["trial"]
    assert f"trial {tid} (position 3) has no final outcome" in failed(report, "outcomes")
    failed(report, "blinding")  # the seal no longer covers the recorded scores


def test_duplicate_trial_resigned(copy_: Path) -> None:
    events = read_events(copy_)
    one, two = first_trial_events(events, 1), first_trial_events(events, 2)
    for kind in ("requested", "responded"):  # trial 2's events now claim to be trial 1's
        body = two[kind]["body"]
        for field in ("trial", "arm", "stimulus", "rep", "position", "request_sha256"):
            if field in body:
                body[field] = one[kind]["body"][field]
    two["requested"]["blobs"] = dict(one["requested"]["blobs"])
    resign(copy_, events)
    with science_skipped():  # the checks read below are not science checks
        report = verify_archive(copy_)
    passed(report, "signatures")
    tid = one["requested"]["body"]["trial"]
    reason = failed(report, "outcomes")
    assert f"trial {tid} (position 1) has 2 final outcomes" in reason or "attempt" in reason


def test_swap_arms_of_two_trials_resigned(copy_: Path) -> None:
    events = read_events(copy_)
    reqs = [e for e in events if e["kind"] == "trial.requested"]
    a = reqs[0]
    b = next(e for e in reqs if e["body"]["arm"] != a["body"]["arm"])
    a["body"]["arm"], b["body"]["arm"] = b["body"]["arm"], a["body"]["arm"]
    resign(copy_, events)
    with science_skipped():  # the checks read below are not science checks
        report = verify_archive(copy_)
    passed(report, "signatures")
    assert f"seq {a['seq']}" in failed(report, "schedule")
    assert f"seq {a['seq']}" in failed(report, "requests")


def test_swap_request_blobs_of_two_trials_resigned(copy_: Path) -> None:
    """The trials claim their own arms, but the prompts actually sent were swapped."""
    events = read_events(copy_)
    reqs = [e for e in events if e["kind"] == "trial.requested"]
    a = reqs[0]
    b = next(e for e in reqs if e["body"]["arm"] != a["body"]["arm"])
    for field in ("request_sha256",):
        a["body"][field], b["body"][field] = b["body"][field], a["body"][field]
    a["blobs"], b["blobs"] = b["blobs"], a["blobs"]
    resign(copy_, events)
    with science_skipped():
        report = verify_archive(copy_)
    passed(report, "signatures")
    assert "not the locked arm text" in failed(report, "requests") or "stimulus" in failed(
        report, "requests"
    )


def test_reorder_schedule_csv(copy_: Path) -> None:
    path = copy_ / "trials" / "schedule.csv"
    lines = path.read_text("utf-8").splitlines(keepends=True)
    lines[1], lines[2] = lines[2], lines[1]
    path.write_text("".join(lines), "utf-8")
    rewrite_manifest(copy_)
    with science_skipped():
        report = verify_archive(copy_)
    assert "trials/schedule.csv line 2" in failed(report, "schedule")
    assert "trials/schedule.csv" in failed(report, "export-coverage")


def test_change_seed_in_study_toml(copy_: Path) -> None:
    path = copy_ / "protocol" / "study.toml"
    text = path.read_text("utf-8")
    assert "seed = 20260421" in text
    path.write_text(text.replace("seed = 20260421", "seed = 20260420", 1), "utf-8")
    rewrite_manifest(copy_)
    with science_skipped():
        report = verify_archive(copy_)
    assert "protocol/study.toml" in failed(report, "protocol")
    assert "protocol/study.toml" in failed(report, "export-coverage")


def test_change_seed_in_protocol_locked_resigned(copy_: Path) -> None:
    events = read_events(copy_)
    locked = next(e for e in events if e["kind"] == "protocol.locked")
    locked["body"]["design"]["seed"] = "20260420"
    resign(copy_, events)
    with science_skipped():
        report = verify_archive(copy_)
    passed(report, "signatures")
    assert "schedule_sha256" in failed(report, "schedule")


# --------------------------------------------------------------------------------------------------
# scores and results


def test_edit_score_in_scores_csv(copy_: Path) -> None:
    path = copy_ / "scores" / "scores.csv"
    rows = list(csv.reader(io.StringIO(path.read_text("utf-8"), newline="")))
    rows[1][7] = str(int(rows[1][7]) - 1)  # n_correct
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    path.write_text(out.getvalue(), "utf-8")
    rewrite_manifest(copy_)
    with science_skipped():
        report = verify_archive(copy_)
    assert "scores/scores.csv" in failed(report, "export-coverage")


def test_edit_score_in_event_resigned(copy_: Path) -> None:
    events = read_events(copy_)
    scored = next(e for e in events if e["kind"] == "trial.scored")
    scored["body"]["n_correct"] -= 1
    scored["body"]["scores_sha256"] = "0" * 64
    resign(copy_, events)
    report = verify_archive(copy_)
    passed(report, "signatures")
    assert "scores_sha256" in failed(report, "blinding")
    rescore = report.get("rescore")
    assert rescore is not None and rescore.status is not Status.PASS


def test_change_p_value_in_results_json(copy_: Path) -> None:
    path = copy_ / "analysis" / "results.json"
    results = json.loads(path.read_text("utf-8"))
    changed = False
    for result in results:
        values = result.get("values") or {}
        if isinstance(values.get("p_raw"), float):
            values["p_raw"] = values["p_raw"] / 2 + 1e-9
            changed = True
            break
    assert changed
    path.write_text(json.dumps(results, sort_keys=True, indent=2) + "\n", "utf-8")
    rewrite_manifest(copy_)
    with science_skipped():
        report = verify_archive(copy_)
    assert "analysis/results.json" in failed(report, "export-coverage")


# --------------------------------------------------------------------------------------------------
# protocol order, keys and rollback


def test_move_protocol_locked_after_first_request_resigned(copy_: Path) -> None:
    events = read_events(copy_)
    locked = next(e for e in events if e["kind"] == "protocol.locked")
    first_request = next(e for e in events if e["kind"] == "trial.requested")
    events.remove(locked)
    events.insert(events.index(first_request) + 1, locked)
    resign(copy_, events)
    with science_skipped():
        report = verify_archive(copy_)
    passed(report, "signatures")
    assert "comes before protocol.locked" in failed(report, "protocol")


def test_resign_whole_ledger_with_new_key(copy_: Path, archive: Path) -> None:
    registration = sorted((archive / "ledger" / "checkpoints").iterdir())[0]
    resign(copy_, read_events(copy_))
    plain = verify_archive(copy_)
    for check in plain.checks:
        if check.name == "rescore":
            continue
        assert check.status is not Status.FAIL, check
    assert plain.get("trust").status is Status.WARN  # type: ignore[union-attr]
    with science_skipped():  # the science checks ran above, on the same events
        trusted = verify_archive(copy_, trusted_keys=[study_key().vkey])
        published = verify_archive(copy_, checkpoints=[registration])
    assert "not among the trusted keys" in failed(trusted, "trust")
    assert str(registration) in failed(published, "published-checkpoints")


def test_roll_back_behind_published_checkpoint(copy_: Path, archive: Path) -> None:
    final = sorted((archive / "ledger" / "checkpoints").iterdir())[-1]
    lines = (copy_ / EVENTS).read_bytes().splitlines(keepends=True)
    keep = len(lines) - 30
    (copy_ / EVENTS).write_bytes(b"".join(lines[:keep]))
    for cp in (copy_ / "ledger" / "checkpoints").iterdir():
        if int(cp.stem) > keep:
            cp.unlink()
    rewrite_manifest(copy_)
    with science_skipped():  # the checks read below are not science checks
        report = verify_archive(copy_, checkpoints=[final])
    assert "rolled back" in failed(report, "published-checkpoints")
    for name in ("chain", "signatures", "checkpoints"):
        passed(report, name)
    failed(report, "export-coverage")  # export.created is gone


def test_verifier_never_raises_on_garbage(copy_: Path) -> None:
    (copy_ / EVENTS).write_bytes(b"not json\n")
    report = verify_archive(copy_)
    assert not report.ok


def test_trials_run_out_of_schedule_order_resigned(copy_: Path) -> None:
    """Every request keeps its true position label, but two trials ran in swapped order."""
    events = read_events(copy_)
    one, two = first_trial_events(events, 1), first_trial_events(events, 2)
    i, j = one["requested"]["seq"], two["requested"]["seq"]
    assert j == i + 1, "the fixture's first two requests are adjacent"
    events[i], events[j] = events[j], events[i]
    resign(copy_, events)
    with science_skipped():
        report = verify_archive(copy_)
    for name in ("signatures", "chain", "outcomes", "requests", "blinding"):
        passed(report, name)
    reason = failed(report, "schedule")
    assert f"seq {i}" in reason and "(position 1)" in reason and "locked execution order" in reason


def test_science_checks_that_cannot_run_fail(
    archive: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "verify._science", None)  # e.g. scipy not installed
    report = verify_archive(archive)
    assert "could not run" in failed(report, "rescore")
    assert "could not run" in failed(report, "reanalysis")


@pytest.mark.parametrize(
    ("rel", "old", "new", "where"),
    [
        ("README.md", "| H1 | lmm | supported |", "| H1 | lmm | not supported |", "README.md line"),
        (
            "analysis/tables/verdicts.csv",
            "H1,lmm,ok,supported",
            "H1,lmm,ok,not supported",
            "analysis/tables/verdicts.csv line 2",
        ),
        ("trials/attempts.csv", ",responded,", ",failed,", "trials/attempts.csv line"),
    ],
)
def test_derived_file_contradicting_the_events_signed_by_the_owner(
    copy_: Path, rel: str, old: str, new: str, where: str
) -> None:
    """The owner's own key signs an export whose human-readable files contradict the events."""
    path = copy_ / rel
    text = path.read_text("utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), "utf-8")
    events = read_events(copy_)
    events[-1]["body"]["files"][rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    resign(copy_, events, study_key())
    report = verify_archive(copy_, trusted_keys=[study_key().vkey])
    for name in ("trust", "signatures", "export-coverage", "reanalysis"):
        passed(report, name)
    assert where in failed(report, "derived")


# --------------------------------------------------------------------------------------------------
# the checkpoints the protocol promises


def test_delete_registration_checkpoint(copy_: Path) -> None:
    """Lock signs a checkpoint right after protocol.locked; deleting it is caught, by name."""
    events = read_events(copy_)
    locked = seqs_of(events, "protocol.locked")[0]
    path = copy_ / "ledger" / "checkpoints" / f"{locked + 1:08d}.txt"
    assert path.is_file(), "the export holds the registration checkpoint"
    path.unlink()
    rewrite_manifest(copy_)
    with science_skipped():
        report = verify_archive(copy_)
    passed(report, "manifest")
    reason = failed(report, "checkpoints")
    assert f"ledger/checkpoints/{locked + 1:08d}.txt" in reason
    assert f"tree size {locked + 1}" in reason and f"protocol.locked (seq {locked})" in reason
    assert report.get("checkpoints").seq == locked  # type: ignore[union-attr]


def test_delete_run_session_checkpoint(copy_: Path) -> None:
    """Every run session signs a checkpoint right after its run.stopped; one deleted is caught."""
    events = read_events(copy_)
    stopped = seqs_of(events, "run.stopped")[-1]
    path = copy_ / "ledger" / "checkpoints" / f"{stopped + 1:08d}.txt"
    assert path.is_file(), "the export holds the run session's checkpoint"
    path.unlink()
    rewrite_manifest(copy_)
    with science_skipped():
        report = verify_archive(copy_)
    reason = failed(report, "checkpoints")
    assert f"ledger/checkpoints/{stopped + 1:08d}.txt" in reason
    assert f"tree size {stopped + 1}" in reason and f"run.stopped (seq {stopped}" in reason


def test_fresh_export_has_the_promised_checkpoints(simulated_report: Report) -> None:
    report = simulated_report
    passed(report, "checkpoints")
    assert "registration size" in report.get("checkpoints").reason  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------------------
# the archive README says what the study is


def test_readme_says_what_the_study_is(archive: Path, simulated_report: Report) -> None:
    text = (archive / "README.md").read_text("utf-8")
    protocol = json.loads((archive / "protocol" / "protocol.json").read_text("utf-8"))
    assert text.startswith(f"# {protocol['title']}\n")
    assert "SIMULATED DATA" in text and "Backend: `simulated`" in text
    for arm, spec in protocol["arms"].items():
        # arm identity 2 (docs/prompts.md §3.1): the hash of the identity object
        digest = hashlib.sha256((archive / "protocol" / "arms" / f"{arm}.json").read_bytes())
        assert protocol["arm_identity"] == 2 and spec["sha256"] == digest.hexdigest()
        components = ", ".join(spec["components"])
        assert f"| {arm} | {spec['role']} | {components} | `{spec['sha256']}` |" in text
    assert f"Stimuli: {len(protocol['stimuli'])} images" in text
    assert f"Trials: {protocol['trials']} = " in text
    assert f"`{protocol['model']['id']}`" in text
    for h in protocol["hypotheses"]:
        assert f"**{h['id']}**: {h['description']}" in text
    assert "Verdict: **" in text
    assert "python -m verify . --trusted-key" in text and "sha256sum -c MANIFEST.sha256" in text
    assert "except `MANIFEST.sha256`" in text and "listing_sha256" in text
    locked = protocol["seq"]
    assert f"ledger/checkpoints/{locked + 1:08d}.txt" in text
    passed(simulated_report, "derived")


def _owner_signs_readme(root: Path, text: str) -> Report:
    """The owner's own key signs an export whose README says ``text``."""
    (root / "README.md").write_text(text, "utf-8")
    events = read_events(root)
    events[-1]["body"]["files"]["README.md"] = hashlib.sha256(text.encode()).hexdigest()
    resign(root, events, study_key())
    with science_skipped():
        report = verify_archive(root, trusted_keys=[study_key().vkey])
    for name in ("trust", "signatures", "export-coverage", "checkpoints"):
        passed(report, name)
    return report


def test_readme_arm_hash_contradicting_protocol_signed_by_the_owner(copy_: Path) -> None:
    arms = json.loads((copy_ / "protocol" / "protocol.json").read_text("utf-8"))["arms"]
    text = (copy_ / "README.md").read_text("utf-8")
    a, b = arms["A"]["sha256"], arms["B"]["sha256"]
    report = _owner_signs_readme(copy_, text.replace(f"`{a}`", f"`{b}`", 1))
    reason = failed(report, "derived")
    assert "README.md line" in reason and "arm A" in reason and b in reason


def test_readme_without_simulated_notice_signed_by_the_owner(copy_: Path) -> None:
    text = (copy_ / "README.md").read_text("utf-8")
    kept = [line for line in text.split("\n") if "simulated" not in line.lower()]
    report = _owner_signs_readme(copy_, "\n".join(kept))
    reason = failed(report, "derived")
    assert "does not say the responses are simulated" in reason and "@ README.md" in reason


# --------------------------------------------------------------------------------------------------
# export --force replaces an archive without a moment with none


@SLOW  # four exports, seconds each
def test_force_export_never_leaves_the_target_without_an_archive(
    archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import analysis._export as export

    study = tmp_path / "study"  # a private copy: each export appends to the study's ledger
    shutil.copytree(archive.parent / "study", study)
    target = tmp_path / "exports" / "out"
    target.parent.mkdir()
    export.export_study(study, target, study_key())
    first = (target / "MANIFEST.sha256").read_bytes()
    (target / "stale.txt").write_text("from the old archive\n", "utf-8")
    real_rmtree = shutil.rmtree
    deleted: list[Path] = []

    def rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
        real_rmtree(path, *args, **kwargs)
        deleted.append(Path(path))
        assert (target / "MANIFEST.sha256").is_file(), f"no archive at {target} after {path}"

    monkeypatch.setattr(export.shutil, "rmtree", rmtree)
    with pytest.raises(export.StudyError, match="not empty"):
        export.export_study(study, target, study_key())
    export.export_study(study, target, study_key(), force=True)
    assert deleted, "the old archive was deleted"
    assert all(p != target for p in deleted)
    assert not (target / "stale.txt").exists()
    assert (target / "MANIFEST.sha256").read_bytes() != first  # a new export.created
    assert sorted(p.name for p in target.parent.iterdir()) == ["out"]  # nothing left aside
    assert verify_archive(target).get("export-coverage").status is Status.PASS  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------------------
# python -m verify: the verifier without the writer

_NO_WRITER = """
import importlib.abc, runpy, sys
class NoWriter(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("ledger", "runner", "analysis"):
            raise ImportError(f"the writer's {name} must not be imported")
        return None
sys.meta_path.insert(0, NoWriter())
sys.argv = ["python -m verify", *sys.argv[1:]]
runpy.run_module("verify", run_name="__main__", alter_sys=True)
"""


def _python_m_verify(*args: str) -> subprocess.CompletedProcess[str]:
    import os
    import sys

    env = {**os.environ, "COLUMNS": "240"}  # rich wraps narrower tables; keep places whole
    return subprocess.run(
        [sys.executable, "-c", _NO_WRITER, *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
    )


@SLOW  # test_hostile_archive's test_a_fresh_export_verifies_under_the_harness: same options,
# by default, in a process that imports no module of the writer (and under its limits)
def test_python_m_verify_passes_a_good_archive_without_the_writer(
    archive: Path, tmp_path: Path
) -> None:
    vkey = tmp_path / "owner.vkey"
    vkey.write_text(study_key().vkey + "\n", "utf-8")
    locked = seqs_of(read_events(archive), "protocol.locked")[0]
    registration = archive / "ledger" / "checkpoints" / f"{locked + 1:08d}.txt"
    result = _python_m_verify(
        str(archive),
        "--trusted-key",
        f"@{vkey}",
        "--trusted-key",
        study_key().vkey,
        "--checkpoint",
        str(registration),
        "--jobs",
        "2",
        "--json",
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["ok"] is True
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses["trust"] == "PASS" and statuses["published-checkpoints"] == "PASS"
    assert statuses["reanalysis"] == "PASS"


def test_python_m_verify_fails_a_tampered_archive(copy_: Path) -> None:
    """One byte of an event line flipped (its closing brace), the manifest rewritten: the
    line no longer parses, so the re-scoring and the re-analysis, which need every envelope,
    stop at once and say so instead of refitting every model: the command's exit status and
    its naming of the place are what is tested here (the tampers above cover, in process, a
    changed file that only the signed ``export.created`` catches)."""
    events = read_events(copy_)
    seq = seqs_of(events, "trial.scored")[0]
    path = copy_ / EVENTS
    lines = path.read_bytes().split(b"\n")
    flip_byte(path, sum(len(line) + 1 for line in lines[:seq]) + len(lines[seq]) - 1)
    rewrite_manifest(copy_)
    result = _python_m_verify(str(copy_))
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "FAIL" in result.stdout and f"{EVENTS} line {seq + 1}" in result.stdout
    assert "FAILED:" in result.stdout


def test_python_m_verify_refuses_a_malformed_trusted_key(archive: Path) -> None:
    result = _python_m_verify(str(archive), "--trusted-key", "not-a-vkey")
    assert result.returncode == 2
    assert "--trusted-key" in result.stderr and "invalid vkey" in result.stderr


def test_checkpoints_missing_after_a_kill_are_signed_before_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, archive: Path
) -> None:
    """A process killed between protocol.locked or run.stopped and its checkpoint leaves a gap;
    the next ``ledger run`` or ``ledger export`` signs it, so an honest study still verifies.

    The study is a copy of the one ``simulated_archive`` was exported from (run, scored,
    unblinded and analysed: neither scoring nor analysis signs a missing checkpoint), with its
    promised checkpoints deleted as a kill in that window leaves them; the export signs them.
    """
    import sqlite3

    from analysis._export import export_study
    from ledger import Ledger
    from runner._lock import promised_checkpoint_sizes

    shutil.copytree(archive.parent / "study", tmp_path / "study")
    shutil.copytree(archive.parent / "home", tmp_path / "home")
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    root = tmp_path / "study"
    key = study_key()
    with Ledger.open(root / "ledger.db") as log:
        promised = promised_checkpoint_sizes(log)
        roots = {size: log.checkpoint(size).root for size in promised}
        sessions = len(list(log.events("run.stopped")))
    assert len(promised) == 1 + sessions >= 2  # the registration checkpoint and each session's
    with sqlite3.connect(root / "ledger.db") as db:  # the state a kill in that window leaves
        db.executemany("DELETE FROM checkpoints WHERE size = ?", [(s,) for s in promised])
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        assert not {cp.size for cp in log.checkpoints()} & set(promised)
    export_study(root, tmp_path / "archive", key)
    for size in promised:
        note = (tmp_path / "archive" / "ledger" / "checkpoints" / f"{size:08d}.txt").read_text()
        assert base64.b64encode(roots[size]).decode() in note
    with science_skipped():
        report = verify_archive(tmp_path / "archive")
    passed(report, "checkpoints")
