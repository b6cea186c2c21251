"""A study on patient data: the public archive, the sealed annex and the two tiers (issue 36).

One study (``tests/support/privacy_study.py``: every item and every response carries a unique
canary) is locked with a ``[privacy]`` policy, run against the fake Messages server over real HTTP,
scored, analysed and exported with ``--public``. No byte sequence of any canary may appear in
the public archive (file contents and names), in its static viewer bundle or in the verifier's
JSON; hashing every candidate answer with everything else known does not meet any published
digest; the public archive verifies PARTIAL with its limits named, and in full with the annex;
a withheld response changed and re-signed by the owner is caught with the annex; bad input
(an unknown kind or blob, another auditor's key, a corrupted or foreign annex, an annex whose
content does not open its commitments) is refused naming it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from locations import REPO
from privacy_study import (
    CANARIES,
    ITEM_CANARY,
    RESPONSE_CANARY,
    WITHHOLD,
    canaries_in,
    cli,
    run_study,
    write_study,
)

from analysis._annex import ANNEX_MAGIC, AuditorKey, annex_bytes, read_auditor_public_key
from ledger import Ledger, SigningKey, canonical_json, is_sealed, open_blob, seal
from tests.verify.test_archive_tamper import resign
from verify import verify_path
from verify._privacy import open_annex
from verify._report import Status

HEX64 = re.compile(rb"[0-9a-f]{64}")


class Exported:
    """The study, its public archive, the annex and the auditors' keys."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = base / "study"
        self.owner = base / "owner.key"
        self.public = base / "public"
        self.annex = base / "study.annex"
        self.identity = base / "keys" / "irb.x25519"
        self.other = base / "keys" / "other.x25519"

    def verify(
        self, path: Path | None = None, *, annex: Path | None = None, identity: Path | None = None
    ) -> Any:
        return verify_path(path or self.public, annex=annex, identity=identity)


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exported]:
    base = tmp_path_factory.mktemp("privacy")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
        ex = Exported(base)
        SigningKey.generate("hospital.example/owner").save(ex.owner)
        write_study(ex.root)
        run_study(ex.root, ex.owner)
        for name in ("irb", "other"):
            result = cli("auditor-key", name, base / "keys")
            assert result.exit_code == 0, result.output
        auditor = base / "keys" / "irb.x25519.pub"
        result = cli(
            "export",
            ex.root,
            ex.public,
            "--key",
            ex.owner,
            "--public",
            "--annex",
            ex.annex,
            "--auditor",
            auditor,
        )
        assert result.exit_code == 0, result.output
        yield ex


def every_file(root: Path) -> Iterator[tuple[str, bytes]]:
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        yield rel, rel.encode()
        if path.is_file():
            yield rel, path.read_bytes()


# ------------------------------------------------------------------------------ no canary


def test_the_private_ledger_holds_every_canary(study: Exported) -> None:
    """The control: the canaries are in the study's own ledger, so their absence below counts."""
    data = (study.root / "ledger.db").read_bytes()
    with Ledger.open(study.root / "ledger.db", readonly=True) as log:
        contents = b"".join(log.blob(d) for e in log.events() for d in e.blobs.values())
    assert sorted(canaries_in(data + contents)) == sorted(CANARIES)


def test_no_canary_anywhere_in_the_public_archive(study: Exported) -> None:
    leaks = [(rel, canaries_in(data)) for rel, data in every_file(study.public)]
    assert [leak for leak in leaks if leak[1]] == []
    assert not (study.public / "protocol" / "data" / "questions.jsonl").exists()
    assert not (study.public / "analysis" / "items.csv").exists()


def test_no_canary_in_the_static_viewer_bundle(study: Exported) -> None:
    bundle = study.base / "bundle"
    result = cli("view", study.public, "--bundle", bundle)
    assert result.exit_code == 0, result.output
    assert "PARTIAL" in result.output or "partial" in result.output, result.output
    leaks = [(rel, canaries_in(data)) for rel, data in every_file(bundle)]
    assert [leak for leak in leaks if leak[1]] == []
    page = next(bundle.glob("trial-*.html")).read_text(encoding="utf-8")
    assert "is withheld: this is a public archive" in page
    assert "verification-partial" in (bundle / "index.html").read_text(encoding="utf-8")


def test_no_canary_in_the_verifiers_json(study: Exported) -> None:
    result = cli("verify", study.public, "--json")
    assert result.exit_code == 3, result.output
    assert canaries_in(result.output.encode()) == []
    full = cli(
        "verify", study.public, "--json", "--annex", study.annex, "--identity", study.identity
    )
    assert full.exit_code == 0, full.output
    assert canaries_in(full.output.encode()) == []


# ------------------------------------------------------------------------------ brute force


def published_digests(root: Path) -> set[bytes]:
    """Every 64-hex token anywhere in the public archive (names, events, CSVs, README...)."""
    found: set[bytes] = set()
    for _, data in every_file(root):
        found.update(HEX64.findall(data))
    return found


def test_brute_force_of_the_withheld_answers_matches_no_commitment(study: Exported) -> None:
    """Knowing every byte of each withheld response and score but its answer, try them all.

    The answers are one word from a vocabulary of three; the attacker hashes each candidate
    response and each candidate score record (as a plain SHA-256, the only hash one can form
    without the salt) and looks for it among every digest the public archive publishes.
    """
    published = published_digests(study.public)
    opened = open_annex(str(study.annex), str(study.identity))
    responses = scores = 0
    for stored in opened.blobs.values():
        content = open_blob(stored)
        if not is_sealed(stored):  # the locked item file: committed by its plain SHA-256
            assert content == (study.root / "data" / "questions.jsonl").read_bytes()
            continue
        text = content.decode("utf-8", "replace")
        if any(c in text for c in RESPONSE_CANARY.values()) and "Answer: " in text:
            template = re.sub(r"Answer: (yes|no|maybe)", "Answer: {}", text)
            assert template != text
            responses += 1
        elif text.startswith('[{"answer":'):
            template = re.sub(r'"answer":"(yes|no|maybe)"', '"answer":"{}"', text)
            scores += 1
        else:
            continue
        candidates = {
            hashlib.sha256(template.replace("{}", word, 1).encode()).hexdigest().encode()
            for word in ("yes", "no", "maybe", "Yes", "No", "YES", "NO", "")
        }
        # the attack is sound: the true content is among the candidates...
        assert hashlib.sha256(content).hexdigest().encode() in candidates
        # ...and yet none is published: the addresses are salted commitments
        assert candidates.isdisjoint(published)
    assert responses >= 16 and scores >= 16  # every trial (and the preflight) and its score


def test_sealing_is_what_defeats_it(study: Exported) -> None:
    """The same attack on unsealed content succeeds: a plain address would give it away."""
    opened = open_annex(str(study.annex), str(study.identity))
    address, stored = next(iter(opened.blobs.items()))
    content = open_blob(stored)
    assert hashlib.sha256(stored).hexdigest() == address
    assert hashlib.sha256(content).hexdigest() != address
    resealed = seal(content)  # a fresh salt: another commitment to the same content
    assert open_blob(resealed) == content and resealed != stored


# ------------------------------------------------------------------------------ two tiers


def test_the_public_archive_verifies_partial_with_its_limits(study: Exported) -> None:
    report = study.verify()
    assert report.ok and report.status == "partial", report.failures
    statuses = {c.name: c.status for c in report.checks}
    for name in (
        "chain",
        "signatures",
        "checkpoints",
        "keys",
        "layout",
        "manifest",
        "export-coverage",
        "phases",
        "outcomes",
        "blinding",
        "derived",
        "report",
        "flow",
        "checklists",
    ):
        assert statuses[name] is Status.PASS, (name, report.get(name))
    for name in (
        "blobs",
        "protocol",
        "schedule",
        "requests",
        "preflight",
        "rescore",
        "reanalysis",
        "privacy",
    ):
        assert statuses[name] is Status.LIMITED, (name, report.get(name))
    schedule = report.get("schedule")
    assert schedule is not None and "in the locked seed's order" in schedule.reason
    assert "not re-derived: the trial set" in schedule.reason
    privacy = report.get("privacy")
    assert privacy is not None and "withheld under the locked privacy policy" in privacy.reason
    assert "trial.responded:response" in privacy.reason
    for check in report.limited:
        if check.name not in ("blobs", "privacy", "schedule"):
            assert check.reason.startswith("not re-derived: it needs "), check
            assert check.where, check
    assert report.to_dict()["status"] == "partial"
    assert report.to_dict()["limits"]
    rescore = report.get("rescore")
    assert rescore is not None and "(seq " in rescore.reason  # the event naming the blob
    from verify.__main__ import main as verify_main

    assert verify_main([str(study.public), "--json"]) == 3  # python -m verify: PARTIAL is 3
    assert (
        verify_main(
            [
                str(study.public),
                "--json",
                "--annex",
                str(study.annex),
                "--identity",
                str(study.identity),
            ]
        )
        == 0
    )


def test_with_the_annex_it_verifies_in_full(study: Exported) -> None:
    report = study.verify(annex=study.annex, identity=study.identity)
    assert report.status == "verified", [(c.name, c.reason) for c in report.failures]
    assert not report.limited
    privacy = report.get("privacy")
    assert privacy is not None and privacy.status is Status.PASS
    for name in ("requests", "rescore", "reanalysis", "protocol", "schedule", "report"):
        check = report.get(name)
        # reanalysis WARNs about the replicates' identical responses (deterministic server)
        assert check is not None and check.status in (Status.PASS, Status.WARN), check
        assert check.status is Status.PASS or name == "reanalysis", check


def _tamper_copy(study: Exported, name: str) -> tuple[Path, Path, dict[str, Any]]:
    """A copy of the public archive and a decrypted copy of its annex payload."""
    target = study.base / name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(study.public, target)
    opened = open_annex(str(study.annex), str(study.identity))
    payload = {
        "blobs": {a: base64.b64encode(d).decode() for a, d in opened.blobs.items()},
        "files": {
            rel: {"salt": base64.b64encode(s).decode(), "content": base64.b64encode(c).decode()}
            for rel, (s, c) in opened.files.items()
        },
    }
    return target, target.parent / f"{name}.annex", {"header": opened.header, **payload}


def _write_annex(
    path: Path, header: dict[str, Any], payload: dict[str, Any], auditor: Path
) -> None:
    key: AuditorKey = read_auditor_public_key(auditor)
    path.write_bytes(annex_bytes(header, payload, [key]))


def _replace_response(
    study: Exported, name: str, change: Any
) -> tuple[Path, Path, list[dict[str, Any]], dict[str, Any]]:
    """The owner replaces one withheld response by ``change(content)`` (stored bytes) and
    re-signs everything consistently: events, checkpoints, attempts.csv, export.created, the
    manifest and the annex. Returns the archive, the annex, the events and the response event.
    """
    target, annex, doc = _tamper_copy(study, name)
    events = [
        json.loads(line)["envelope"]
        for line in (target / "ledger/events.jsonl").read_bytes().splitlines()
    ]
    responded = next(e for e in events if e["kind"] == "trial.responded")
    old = responded["blobs"]["response"]
    new_stored = change(open_blob(base64.b64decode(doc["blobs"][old])))
    new = hashlib.sha256(new_stored).hexdigest()
    responded["blobs"]["response"] = new
    del doc["blobs"][old]
    doc["blobs"][new] = base64.b64encode(new_stored).decode()
    attempts = target / "trials" / "attempts.csv"  # a careful forger rewrites it too
    attempts.write_bytes(attempts.read_bytes().replace(old.encode(), new.encode()))
    export = events[-1]
    export["body"]["files"]["trials/attempts.csv"] = hashlib.sha256(
        attempts.read_bytes()
    ).hexdigest()
    withheld = sorted(doc["blobs"])
    export["body"]["privacy"]["withheld_blobs"] = {
        "count": len(withheld),
        "listing_sha256": hashlib.sha256("".join(f"{a}\n" for a in withheld).encode()).hexdigest(),
    }
    resign(target, events, SigningKey.load(study.owner))
    last = (target / "ledger/events.jsonl").read_bytes().splitlines()[-1]
    envelope = canonical_json(json.loads(last)["envelope"])
    header = dict(doc["header"], export_leaf_hash=hashlib.sha256(b"\x00" + envelope).hexdigest())
    _write_annex(
        annex,
        header,
        {"blobs": doc["blobs"], "files": doc["files"]},
        study.base / "keys" / "irb.x25519.pub",
    )
    return target, annex, events, responded


def _flip(content: bytes) -> bytes:
    flipped = re.sub(rb"Answer: (yes|maybe)", b"Answer: no", content)
    return seal(flipped if flipped != content else content.replace(b"Answer: no", b"Answer: yes"))


def test_a_withheld_response_changed_and_resigned_by_the_owner_is_caught_with_the_annex(
    study: Exported,
) -> None:
    target, annex, events, responded = _replace_response(study, "tampered", _flip)
    public = study.verify(target)
    assert public.ok and public.status == "partial", public.failures  # invisible without it
    report = study.verify(target, annex=annex, identity=study.identity)
    rescore = report.get("rescore")
    assert rescore is not None and rescore.status is Status.FAIL, rescore
    scored = next(
        e
        for e in events
        if e["kind"] == "trial.scored" and e["body"]["response_seq"] == responded["seq"]
    )
    assert f"trial.scored seq {scored['seq']} does not re-score" in rescore.reason, rescore
    assert report.status == "failed"


def test_a_withheld_response_stored_unsealed_is_caught_with_the_annex(study: Exported) -> None:
    """A plain address would let anyone test guesses: with the annex, the verifier says so."""
    target, annex, _, responded = _replace_response(study, "unsealed", lambda content: content)
    report = study.verify(target, annex=annex, identity=study.identity)
    check = report.checks[0]
    assert check.name == "privacy" and check.status is Status.FAIL
    assert f"seq {responded['seq']} trial.responded response) is not sealed" in check.reason


# ------------------------------------------------------------------------------ bad input


def test_another_auditors_identity_is_refused_naming_it(study: Exported) -> None:
    report = study.verify(annex=study.annex, identity=study.other)
    check = report.get("privacy")
    assert check is not None and check.status is Status.FAIL
    assert "not sealed to the identity 'other'" in check.reason and "irb" in check.reason


def test_a_missing_identity_or_annex_is_refused(study: Exported) -> None:
    for annex, identity, needle in (
        (study.annex, None, "--annex FILE and --identity KEY go together"),
        (study.annex, study.base / "keys" / "nobody.x25519", "cannot be read"),
        (study.base / "no.annex", study.identity, "cannot be read"),
    ):
        report = study.verify(annex=annex, identity=identity)
        assert not report.ok and needle in report.checks[0].reason, report.checks[0]


def test_a_corrupted_annex_is_refused(study: Exported) -> None:
    doc = json.loads(study.annex.read_bytes())
    cipher = bytearray(base64.b64decode(doc["ciphertext"]))
    cipher[len(cipher) // 2] ^= 1
    doc["ciphertext"] = base64.b64encode(bytes(cipher)).decode()
    broken = study.base / "corrupted.annex"
    broken.write_bytes(json.dumps(doc).encode())
    report = study.verify(annex=broken, identity=study.identity)
    assert not report.ok and "does not decrypt" in report.checks[0].reason
    broken.write_bytes(b"\x00not an annex")
    report = study.verify(annex=broken, identity=study.identity)
    assert not report.ok and "not an annex" in report.checks[0].reason


def test_an_annex_for_another_export_is_refused(study: Exported) -> None:
    _, annex, doc = _tamper_copy(study, "foreign")
    header = dict(doc["header"], export_seq=doc["header"]["export_seq"] - 1)
    _write_annex(
        annex,
        header,
        {"blobs": doc["blobs"], "files": doc["files"]},
        study.base / "keys" / "irb.x25519.pub",
    )
    report = study.verify(annex=annex, identity=study.identity)
    assert not report.ok and "another export of the study" in report.checks[0].reason
    header = dict(doc["header"], study="another-study")
    _write_annex(
        annex,
        header,
        {"blobs": doc["blobs"], "files": doc["files"]},
        study.base / "keys" / "irb.x25519.pub",
    )
    report = study.verify(annex=annex, identity=study.identity)
    assert not report.ok and "for study 'another-study'" in report.checks[0].reason


def test_annex_content_that_does_not_open_its_commitment_is_named(study: Exported) -> None:
    _, annex, doc = _tamper_copy(study, "mismatch")
    address = sorted(doc["blobs"])[0]
    stored = bytearray(base64.b64decode(doc["blobs"][address]))
    stored[-1] ^= 1
    doc["blobs"][address] = base64.b64encode(bytes(stored)).decode()
    rel = sorted(doc["files"])[0]
    doc["files"][rel]["content"] = base64.b64encode(b"another file").decode()
    _write_annex(
        annex,
        doc["header"],
        {"blobs": doc["blobs"], "files": doc["files"]},
        study.base / "keys" / "irb.x25519.pub",
    )
    report = study.verify(annex=annex, identity=study.identity)
    reason = report.checks[0].reason
    assert not report.ok and f"annex blob {address} does not open its commitment" in reason
    assert "(1 more)" in reason


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ("trial.answered:response", "unknown event kind 'trial.answered'"),
        ("trial.responded:body", "trial.responded has no blob 'body'"),
        ("artifact.locked:spec", "locked files are withheld by role"),
        ("responses", 'is not "<event kind>:<blob name>"'),
    ],
)
def test_a_policy_naming_an_unknown_kind_or_blob_is_refused(
    tmp_path: Path, entry: str, needle: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    root = write_study(tmp_path / "study", ["trial.responded:response", entry])
    key = tmp_path / "owner.key"
    SigningKey.generate("hospital.example/owner").save(key)
    result = cli("lock", root, "--key", key)
    assert result.exit_code != 0
    assert "privacy.withhold[1]" in result.output and needle in result.output, result.output
    assert not (root / "ledger.db").exists() or _size(root) <= 1


def _size(root: Path) -> int:
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        return log.size


def test_a_public_export_of_a_study_without_a_policy_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    root = write_study(tmp_path / "study", None)
    key = tmp_path / "owner.key"
    SigningKey.generate("hospital.example/owner").save(key)
    assert cli("lock", root, "--key", key).exit_code == 0
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        size = log.size
    result = cli(
        "export",
        root,
        tmp_path / "out",
        "--key",
        key,
        "--public",
        "--annex",
        tmp_path / "a.annex",
        "--auditor",
        tmp_path / "none.pub",
    )
    assert result.exit_code != 0 and "needs a locked [privacy] policy" in result.output
    assert not (tmp_path / "out").exists() and not (tmp_path / "a.annex").exists()
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        assert log.size == size


def test_a_public_export_needs_an_annex_and_a_readable_auditor_key(study: Exported) -> None:
    result = cli("export", study.root, study.base / "x", "--key", study.owner, "--public")
    assert result.exit_code != 0 and "--public needs --annex FILE" in result.output
    bad = study.base / "bad.pub"
    bad.write_text("not a key\n")
    result = cli(
        "export",
        study.root,
        study.base / "x",
        "--key",
        study.owner,
        "--public",
        "--annex",
        study.base / "x.annex",
        "--auditor",
        bad,
    )
    assert result.exit_code != 0 and "not an auditor public key" in result.output
    assert not (study.base / "x").exists() and not (study.base / "x.annex").exists()


def test_items_and_responses_are_withheld_by_the_locked_policy(study: Exported) -> None:
    locked = json.loads((study.public / "protocol" / "protocol.json").read_text())
    assert "trial.responded:response" in locked["privacy"]["withhold"]
    assert ITEM_CANARY and os.path.isdir(study.public / "blobs")
    assert ANNEX_MAGIC in study.annex.read_text()


def test_the_shipped_archive_still_verifies_unchanged() -> None:
    """``archive/`` (no privacy policy) is read exactly as before: VERIFIED, no privacy check."""
    shipped = REPO / "archive" / "prompt-tumbling-e"
    report = verify_path(shipped)
    assert report.status == "verified", report.failures
    assert report.get("privacy") is None and not report.limited
    assert "privacy" not in json.loads((shipped / "protocol" / "protocol.json").read_text())


def test_an_unknown_key_in_privacy_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    root = write_study(tmp_path / "study")
    spec = root / "study.toml"
    spec.write_text(spec.read_text().replace("withhold = ", "withold = "), encoding="utf-8")
    key = tmp_path / "owner.key"
    SigningKey.generate("hospital.example/owner").save(key)
    result = cli("lock", root, "--key", key)
    assert result.exit_code != 0 and "[privacy] withold: unknown key" in result.output, (
        result.output
    )


def test_an_auditor_key_is_never_overwritten(study: Exported) -> None:
    before = study.identity.read_bytes()
    result = cli("auditor-key", "irb", study.base / "keys")
    assert result.exit_code != 0 and "is never overwritten" in result.output
    assert study.identity.read_bytes() == before
    assert oct(study.identity.stat().st_mode & 0o777) == "0o600"


def test_withholding_a_file_the_policy_does_not_name_fails(study: Exported) -> None:
    """The owner hides the report too (re-signed): what is withheld is the locked policy's."""
    target, _, _ = _tamper_copy(study, "hidden-report")
    events = [
        json.loads(line)["envelope"]
        for line in (target / "ledger/events.jsonl").read_bytes().splitlines()
    ]
    report_file = target / "analysis" / "report.html"
    export = events[-1]["body"]
    del export["files"]["analysis/report.html"]
    export["privacy"]["withheld_files"]["analysis/report.html"] = hashlib.sha256(
        seal(report_file.read_bytes())
    ).hexdigest()
    report_file.unlink()
    resign(target, events, SigningKey.load(study.owner))
    report = study.verify(target)
    privacy = report.get("privacy")
    assert privacy is not None and privacy.status is Status.FAIL, privacy
    assert "withholds analysis/report.html, which the locked policy does not" in privacy.reason


SCORES_PUBLIC = [
    e for e in WITHHOLD if e not in ("trial.scored:scores", "analysis.result:items_csv")
]


def test_with_the_scores_public_every_statistic_is_recomputed_without_the_annex(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A policy that withholds the notes and the replies but not the per-item scores."""
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    root = write_study(tmp_path / "study", SCORES_PUBLIC)
    key = tmp_path / "owner.key"
    SigningKey.generate("hospital.example/owner").save(key)
    run_study(root, key)
    assert cli("auditor-key", "irb", tmp_path / "keys").exit_code == 0
    public = tmp_path / "public"
    auditor = tmp_path / "keys" / "irb.x25519.pub"
    result = cli(
        "export",
        root,
        public,
        "--key",
        key,
        "--public",
        "--annex",
        tmp_path / "a.annex",
        "--auditor",
        auditor,
    )
    assert result.exit_code == 0, result.output
    assert [leak for leak in every_file(public) if canaries_in(leak[1])] == []
    report = verify_path(public)
    assert report.status == "partial", report.failures
    reanalysis = report.get("reanalysis")
    assert reanalysis is not None and reanalysis.status is Status.LIMITED
    assert "analysis results were recomputed and match" in reanalysis.reason
    assert "except the identical responses" in reanalysis.reason
    rescore = report.get("rescore")
    assert rescore is not None and rescore.status is Status.LIMITED
