"""``ledger new`` gives each study its own id, origin and owner key; lock follows study.toml."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ledger import Ledger, SigningKey, VerifierKey, open_checkpoint
from ledger.cli import main
from runner._lock import study_owner_key
from runner._new import new_study, study_id_from_directory
from runner.spec import load_study


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def _fewer_replicates(root: Path) -> None:
    spec = root / "study.toml"
    spec.write_text(spec.read_text().replace("replicates = 30", "replicates = 1"), "utf-8")


def _set(root: Path, field: str, value: str) -> None:
    spec = root / "study.toml"
    line = f'{field} = "{value}"'
    text, n = re.subn(rf"^{field} = .*$", line, spec.read_text(), count=1, flags=re.M)
    assert n == 1
    spec.write_text(text, "utf-8")


def test_directory_name_gives_id_origin_and_key(tmp_path: Path, ledger_home: Path) -> None:
    r = run("new", tmp_path / "my-study")
    assert r.exit_code == 0, r.output
    study = load_study(tmp_path / "my-study")
    assert (study.id, study.origin) == ("my-study", "prompt-ledger.local/my-study")
    key_file = ledger_home / "keys" / "my-study-owner.key"
    key = SigningKey.load(key_file)
    assert key.name == "prompt-ledger.local/my-study/owner"
    assert key_file.with_suffix(".vkey").read_text().strip() == key.vkey
    with Ledger.open(tmp_path / "my-study" / "ledger.db", readonly=True) as log:
        assert log.origin == "prompt-ledger.local/my-study"
    assert "study id: my-study" in r.output and str(key_file) in r.output


def test_id_and_origin_options(tmp_path: Path, ledger_home: Path) -> None:
    r = run("new", tmp_path / "s", "--id", "pilot-1", "--origin", "example.org/pilot-1")
    assert r.exit_code == 0, r.output
    study = load_study(tmp_path / "s")
    assert (study.id, study.origin) == ("pilot-1", "example.org/pilot-1")
    assert (ledger_home / "keys" / "pilot-1-owner.key").exists()
    bad = run("new", tmp_path / "t", "--id", "no spaces")
    assert bad.exit_code == 1 and "study id" in bad.output and not (tmp_path / "t").exists()


def test_directory_name_is_sanitised() -> None:
    assert study_id_from_directory("/x/my study (v2)") == "my-study-v2"
    assert study_id_from_directory("/x/.hidden_one") == "hidden_one"


def test_second_study_with_same_id_is_refused_unless_key_given(
    tmp_path: Path, ledger_home: Path
) -> None:
    assert run("new", tmp_path / "a" / "study").exit_code == 0
    again = run("new", tmp_path / "b" / "study")
    assert again.exit_code == 1, again.output
    assert "already exists" in again.output and "--id" in again.output
    assert not (tmp_path / "b" / "study").exists()  # nothing written
    other = run("new", tmp_path / "b" / "study", "--id", "study-b")
    assert other.exit_code == 0, other.output
    with Ledger.open(tmp_path / "b" / "study" / "ledger.db", readonly=True) as log:
        assert log.origin == "prompt-ledger.local/study-b"
    key_file = ledger_home / "keys" / "study-owner.key"
    reused = run("new", tmp_path / "c" / "study", "--key", key_file)
    assert reused.exit_code == 0, reused.output


def test_lock_after_editing_the_id_finds_the_owner_key(tmp_path: Path, ledger_home: Path) -> None:
    root = tmp_path / "my-study"
    assert run("new", root).exit_code == 0
    _fewer_replicates(root)
    _set(root, "id", "renamed")  # the README invites editing study.toml
    assert (
        study_owner_key(root).vkey
        == SigningKey.load(ledger_home / "keys" / "my-study-owner.key").vkey
    )
    r = run("lock", root)
    assert r.exit_code == 0, r.output
    note = (root / "registration-checkpoint.txt").read_text()
    assert note.splitlines()[0] == "prompt-ledger.local/my-study"
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        assert next(log.events("protocol.locked")).body["study"] == "renamed"
        records = log.keys()
    owner = VerifierKey.parse(next(k.vkey for k in records if k.role == "owner"))
    assert open_checkpoint(note, [owner])[0].origin == "prompt-ledger.local/my-study"


def test_lock_refuses_an_origin_the_ledger_does_not_have(tmp_path: Path, ledger_home: Path) -> None:
    root = tmp_path / "s2"
    assert run("new", root).exit_code == 0
    _fewer_replicates(root)
    _set(root, "origin", "example.org/s2")
    r = run("lock", root)
    assert r.exit_code == 1
    assert "study.origin is 'example.org/s2'" in r.output
    assert "'prompt-ledger.local/s2'" in r.output
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        assert not list(log.events("protocol.locked"))  # nothing appended
    (root / "ledger.db").unlink()  # the remedy the message names
    r = run("lock", root)
    assert r.exit_code == 0, r.output
    assert (root / "registration-checkpoint.txt").read_text().startswith("example.org/s2\n")


def test_lock_without_key_names_the_id_it_looked_for(tmp_path: Path, ledger_home: Path) -> None:
    root = tmp_path / "s3"
    assert run("new", root, "--key", _saved_key(tmp_path)).exit_code == 0
    r = run("lock", root)
    assert r.exit_code == 1
    assert "no key in" in r.output and "study.id 's3'" in r.output


def _saved_key(tmp_path: Path) -> Path:
    return SigningKey.generate("example.org/owner").save(tmp_path / "owner.key")


def test_library_default_keeps_the_template_spec(tmp_path: Path, ledger_home: Path) -> None:
    """scripts/make_archive.py and the demo rely on this: the spec stays byte for byte."""
    from importlib import resources

    key = SigningKey.generate("prompt-ledger.local/prompt-tumbling-e/owner")
    made = new_study(tmp_path / "study", "prompt-tumbling-e", key)
    template = resources.files("runner") / "templates" / "prompt_tumbling_e" / "study.toml"
    assert (tmp_path / "study" / "study.toml").read_text() == template.read_text()
    assert (made.study_id, made.origin) == (
        "prompt-tumbling-e",
        "prompt-ledger.local/prompt-tumbling-e",
    )


@pytest.mark.parametrize("name", ["study", "x"])
def test_new_study_with_id_rewrites_only_the_study_table(
    tmp_path: Path, ledger_home: Path, name: str
) -> None:
    new_study(tmp_path / name, "prompt-tumbling-e", study_id=f"id-{name}")
    text = (tmp_path / name / "study.toml").read_text()
    assert f'id = "id-{name}"' in text and 'id = "claude-sonnet-4-6"' in text
    assert f'origin = "prompt-ledger.local/id-{name}"' in text
