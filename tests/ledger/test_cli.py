"""The ledger CLI, end to end, including misuse."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from locations import REPO

from ledger import Ledger
from ledger.cli import main

ROOT = REPO


def run(*args: str | Path, input: str | None = None) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


@pytest.fixture
def study(tmp_path: Path) -> dict[str, Path]:
    keys = tmp_path / "keys"
    for name in ("example.org/owner", "example.org/runner"):
        result = run("keygen", name, "--out", keys)
        assert result.exit_code == 0, result.output
    db = tmp_path / "study.db"
    owner = keys / "example.org_owner.key"
    result = run("init", db, "--origin", "example.org/cli", "--key", owner)
    assert result.exit_code == 0, result.output
    return {
        "db": db,
        "owner": owner,
        "owner_vkey": keys / "example.org_owner.vkey",
        "runner": keys / "example.org_runner.key",
        "runner_vkey": keys / "example.org_runner.vkey",
        "dir": tmp_path,
    }


def size(db: Path) -> int:
    with Ledger.open(db, readonly=True) as log:
        return log.size


def test_keygen_writes_0600_key_and_prints_vkey(tmp_path: Path) -> None:
    result = run("keygen", "alice", "--out", tmp_path)
    assert result.exit_code == 0
    key = tmp_path / "alice.key"
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    vkey = (tmp_path / "alice.vkey").read_text().strip()
    assert vkey in result.output and vkey.startswith("alice+")
    again = run("keygen", "alice", "--out", tmp_path)
    assert again.exit_code == 1 and "refusing to overwrite" in again.output


def test_keygen_default_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    assert run("keygen", "bob").exit_code == 0
    assert (tmp_path / "home" / "keys" / "bob.key").exists()


def test_full_walkthrough(study: dict[str, Path]) -> None:
    db = study["db"]
    assert (
        run(
            "key",
            "add",
            db,
            f"@{study['runner_vkey']}",
            "--role",
            "runner",
            "--key",
            study["owner"],
        ).exit_code
        == 0
    )
    blob = study["dir"] / "prompt.txt"
    blob.write_text("Report every E.\n")
    r = run(
        "append",
        db,
        "artifact.locked",
        "--body",
        '{"path": "prompt.txt"}',
        "--blob",
        f"content={blob}",
        "--key",
        study["owner"],
    )
    assert r.exit_code == 0 and "appended seq 2" in r.output
    cp_file = study["dir"] / "registration.checkpoint"
    r = run("checkpoint", db, "--key", study["owner"], "--out", cp_file)
    assert r.exit_code == 0 and r.output == cp_file.read_text()
    assert r.output.startswith("example.org/cli\n3\n")
    body_file = study["dir"] / "body.json"
    body_file.write_text('{"trial": "A|c|0"}')
    assert (
        run(
            "append", db, "trial.requested", "--body", f"@{body_file}", "--key", study["runner"]
        ).exit_code
        == 0
    )
    assert (
        run(
            "append",
            db,
            "trial.responded",
            "--body",
            "-",
            "--key",
            study["runner"],
            input='{"ok": true}',
        ).exit_code
        == 0
    )
    r = run("log", db, "--json")
    lines = [json.loads(line) for line in r.output.splitlines()]
    assert [x["envelope"]["kind"] for x in lines][-2:] == ["trial.requested", "trial.responded"]
    r = run("log", db, "--kind", "key.added")
    assert r.exit_code == 0 and "key.added" in r.output
    r = run("show", db, "2", "--json")
    shown = json.loads(r.output)
    assert shown["blob_sizes"] == {"content": len("Report every E.\n")}
    r = run("proof", db, "inclusion", "2", "--size", "4")
    proof = json.loads(r.output)
    assert proof["leaf_index"] == 2 and proof["tree_size"] == 4
    r = run("proof", db, "consistency", "3", "5")
    assert json.loads(r.output)["old_size"] == 3
    r = run("verify", db, "--trusted-key", f"@{study['owner_vkey']}", "--checkpoint", cp_file)
    assert r.exit_code == 0, r.output
    assert "VERIFIED" in r.output
    r = run("verify", db, "--json")
    assert json.loads(r.output)["ok"] is True
    r = run("key", "list", db, "--json")
    assert [k["role"] for k in json.loads(r.output)] == ["owner", "runner"]
    runner_actor = json.loads(r.output)[1]["actor"]
    assert (
        run(
            "key", "revoke", db, runner_actor, "--reason", "done", "--key", study["owner"]
        ).exit_code
        == 0
    )
    r = run("append", db, "trial.requested", "--body", "{}", "--key", study["runner"])
    assert r.exit_code == 1 and "revoked" in r.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--body", "{bad json"], "--body: not valid JSON (line 1 column 2"),
        (["--body", "[1, 2]"], "must be a JSON object"),
        (["--body", "@missing.json"], "--body file missing.json: not found"),
        (["--body", "{}", "--blob", "x=nope.bin"], "--blob x: file nope.bin not found"),
        (["--body", "{}", "--blob", "novalue"], "expected NAME=FILE"),
        (["--body", '{"seed": 18446744073709551615}'], "write it as a decimal string"),
    ],
)
def test_append_misuse_appends_nothing(
    study: dict[str, Path], args: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(study["dir"])
    before = size(study["db"])
    r = run("append", study["db"], "custom.note", *args, "--key", study["owner"])
    assert r.exit_code != 0
    assert message in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert size(study["db"]) == before


def test_wrong_and_missing_keys(study: dict[str, Path]) -> None:
    db = study["db"]
    for key, message in [
        (study["runner"], "not registered"),
        (study["dir"] / "none.key", "not found"),
        (study["owner_vkey"], "looks like a public vkey"),
    ]:
        r = run("append", db, "custom.note", "--body", "{}", "--key", key)
        assert r.exit_code == 1 and message in r.output, r.output
    garbage = study["dir"] / "garbage.key"
    garbage.write_bytes(b"\xff\xfe\x00binary")
    r = run("append", db, "custom.note", "--body", "{}", "--key", garbage)
    assert r.exit_code == 1 and "unreadable" in r.output, r.output
    r = run("append", db, "custom.note", "--body", "{}", "--key", study["dir"])
    assert r.exit_code == 1 and "is a directory" in r.output, r.output
    study["owner"].chmod(0)
    if os.geteuid() != 0:  # root reads any file
        r = run("append", db, "custom.note", "--body", "{}", "--key", study["owner"])
        assert r.exit_code == 1 and "permission denied" in r.output
    assert size(db) == 1


def test_not_a_ledger(tmp_path: Path, study: dict[str, Path]) -> None:
    bogus = tmp_path / "bogus.db"
    bogus.write_text("just text\n" * 50)
    for args in (["log", bogus], ["append", bogus, "a.b", "--body", "{}", "--key", study["owner"]]):
        r = run(*args)
        assert r.exit_code == 1
        assert "is not a PROMPT ledger" in r.output
    r = run("log", tmp_path / "absent.db")
    assert r.exit_code == 1 and "no such ledger file" in r.output
    r = run("verify", bogus)
    assert r.exit_code == 1 and "FAIL" in r.output


def test_init_refuses_existing(study: dict[str, Path]) -> None:
    r = run("init", study["db"], "--origin", "example.org/x", "--key", study["owner"])
    assert r.exit_code == 1 and "already exists" in r.output


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = []
    for name, cmd in sorted(group.commands.items()):
        out.append((f"{prefix}{name}", cmd))
        if isinstance(cmd, click.Group):
            out.extend(_commands(cmd, f"{prefix}{name} "))
    return out


@pytest.mark.parametrize(("name", "command"), _commands(main), ids=lambda x: str(x))
def test_every_command_has_help_with_an_example(name: str, command: click.Command) -> None:
    r = run(*name.split(), "--help")
    assert r.exit_code == 0
    assert "Example:" in r.output and "ledger " in r.output.split("Example:")[1]


def test_readme_test_command_is_what_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)\n```", readme, re.S)
    test_command = next(b for b in blocks if "pytest" in b)
    assert test_command in (ROOT / ".ci" / "run").read_text()
