"""``ledger lock`` writes and locks the OSF preregistration (``docs/reporting.md`` §3).

The file is filled from the locked protocol, locked as an artifact (role ``registration``,
hashed in the manifest), the same bytes for the same study, free of arm codes, never amended;
the independent verifier's ``registration`` check re-derives it, and a tampered field fails
naming the field.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
import tomllib
from pathlib import Path

import pytest
from helpers import make_study, study_key

from ledger import Ledger
from runner._lock import StudyError, amend, blinding_secret, protocol_event
from runner._osf import OSF_FILE, OSF_ROLE, PERSON
from runner.spec import load_study
from verify._archive.osf import expected_registration


@pytest.fixture
def locked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, study_template: Path) -> Path:
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    return make_study(tmp_path / "study", replicates=2, template=study_template)


def _sections(text: str) -> dict[str, list[str]]:
    """Field name -> its answer lines (without the Source line and blank lines)."""
    out: dict[str, list[str]] = {}
    field = None
    for line in text.split("\n"):
        if line.startswith("### "):
            field = line[4:]
            out[field] = []
        elif line.startswith("## ") or line.startswith("Fields for the authors"):
            field = None
        elif field is not None and line and not line.startswith("Source: "):
            out[field].append(line)
    return out


def test_lock_writes_the_registration_and_locks_it_with_the_protocol(locked: Path) -> None:
    data = (locked / OSF_FILE).read_bytes()
    with Ledger.open(locked / "ledger.db", readonly=True) as log:
        event = protocol_event(log)
        artifact = [e for e in log.events("artifact.locked") if e.body["path"] == OSF_FILE]
    assert len(artifact) == 1 and artifact[0].body["role"] == OSF_ROLE
    assert artifact[0].seq < event.seq
    assert event.body["manifest"][OSF_FILE] == hashlib.sha256(data).hexdigest()
    body = event.body
    fields = _sections(data.decode("utf-8"))
    spec = tomllib.loads((locked / "study.toml").read_text("utf-8"))
    assert fields["Title"] == [spec["study"]["title"]]
    assert fields["Authors"] == [PERSON]
    hyp_lines = fields["Hypotheses"]
    assert [line.split(":")[0] for line in hyp_lines] == [
        f"- {h['id']}" for h in body["hypotheses"]
    ]
    for h, line in zip(body["hypotheses"], hyp_lines, strict=True):
        assert f"test {h['test']}" in line and f"sides {h['sides']}" in line
    randomization = fields["Randomization"][0]
    assert f"seed {spec['design']['seed']}" in randomization
    assert body["schedule_sha256"] in randomization
    assert f"The {body['trials']} trials" in randomization
    assert body["blinding_commitment"] in fields["Blinding"][0]
    study = load_study(locked, strict=False)
    for arm, record in body["arms"].items():
        line = next(x for x in fields["Study design"] if x.startswith(f"- Arm {arm} "))
        assert f"(role {record['role']})" in line and record["sha256"] in line
        assert " + ".join(record["components"]) in line
    # blinding: no arm code (the HMAC of an arm under the secret) is anywhere in the file
    secret = blinding_secret(study)
    for arm in body["arms"]:
        code = hmac.new(secret, arm.encode(), hashlib.sha256).hexdigest()
        assert code[:12] not in data.decode("utf-8")
    assert secret.hex() not in data.decode("utf-8")
    person = [f for f, lines in fields.items() if lines == [PERSON]]
    assert person == [
        "Authors",
        "Explanation of existing data",
        "Sample size rationale",
        "Transformations",
    ]
    assert data.decode("utf-8").endswith(
        f"Fields for the authors to complete: {', '.join(person)}.\n"
    )


def test_the_same_study_writes_the_same_bytes_and_the_verifier_derives_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, study_template: Path
) -> None:
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))  # one secret for both
    one = make_study(tmp_path / "one", replicates=2, template=study_template)
    two = make_study(tmp_path / "two", replicates=2, template=study_template)
    assert (one / OSF_FILE).read_bytes() == (two / OSF_FILE).read_bytes()
    with Ledger.open(one / "ledger.db", readonly=True) as log:
        body = json.loads(json.dumps(protocol_event(log).body))
    lines, owners = expected_registration(body, None)
    assert "\n".join(lines).encode("utf-8") == (one / OSF_FILE).read_bytes()
    assert owners[lines.index("### Randomization") + 2] == "Design plan / Randomization"
    # a changed design changes the file (the seed is read, not copied)
    changed = tmp_path / "changed-template"
    shutil.copytree(study_template, changed)
    (changed / "study.toml").write_text(
        (changed / "study.toml").read_text("utf-8").replace("20260421", "20260420"), "utf-8"
    )
    four = make_study(tmp_path / "four", replicates=2, template=changed)
    text = (four / OSF_FILE).read_text("utf-8")
    assert "with seed 20260420" in text and text != (one / OSF_FILE).read_text("utf-8")


def test_the_registration_may_not_be_amended(locked: Path) -> None:
    (locked / OSF_FILE).write_text("# edited\n", "utf-8")
    with pytest.raises(StudyError, match=r"osf-preregistration\.md is the registration"):
        amend(locked, study_key(), "edit the registration")


def test_ledger_lock_says_where_the_registration_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, study_template: Path
) -> None:
    from click.testing import CliRunner

    from ledger.cli import main

    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    root = tmp_path / "study"
    shutil.copytree(study_template, root)
    key_file = tmp_path / "owner.key"
    study_key().save(key_file)
    result = CliRunner().invoke(main, ["lock", str(root), "--key", str(key_file)])
    assert result.exit_code == 0, result.output
    assert f"OSF preregistration locked as {root / OSF_FILE}" in result.output
    assert (root / OSF_FILE).is_file()
