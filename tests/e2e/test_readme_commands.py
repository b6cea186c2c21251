"""The README's command blocks run as written (offline: a simulated backend stands in for the API).

The walkthroughs are read from README.md itself, so a command added to or changed there is run
here: ``ledger`` commands in-process, ``export`` and ``$EDITOR`` lines by the rules below, and
the auditors' shell script with bash. Every ``ledger`` line in any block is also checked
against the CLI (command and options exist).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from locations import REPO

from ledger.cli import main

ROOT = REPO
README = (ROOT / "README.md").read_text(encoding="utf-8")
REAL_STUDY = "Walkthrough: a real study against the Anthropic API"
BY_HAND = "Walkthrough: the ledger by hand"
AUDITORS = "For auditors"


def sh_blocks(heading: str | None = None) -> list[str]:
    """The ```sh blocks of the README, or of the ``## heading`` section only."""
    text = README
    if heading is not None:
        text = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```sh\n(.*?)^```$", text, flags=re.M | re.S)


def command_lines(block: str) -> list[tuple[str, list[str]]]:
    """Each command of a block as (its text, argv): continuations joined, comments dropped."""
    joined = block.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        for part in re.split(r"\s+&&\s+", line):
            argv = shlex.split(part, comments=True)
            if argv:
                out.append((part, argv))
    return out


def commands(block: str) -> list[list[str]]:
    """Each command line of a block as argv: continuations joined, comments dropped."""
    return [argv for _, argv in command_lines(block)]


def expand(arg: str) -> str:
    return os.path.expanduser(os.path.expandvars(arg))


def invoke(argv: list[str]) -> str:
    args = [expand(a) for a in argv[1:]]
    result = CliRunner().invoke(main, args, prog_name="ledger")
    assert result.exit_code == 0, f"{shlex.join(argv)}\n{result.output}\n{result.exception!r}"
    return result.output


def viewed(study: Path) -> None:
    """What `ledger view STUDY` serves, fetched in process: the overview and the trial table."""
    from starlette.testclient import TestClient

    from analysis.view._app import make_app
    from analysis.view._viewer import open_viewer

    viewer = open_viewer(study, verify=False)
    try:
        client = TestClient(make_app(viewer), base_url="http://127.0.0.1")
        assert client.get("/").status_code == 200
        table = client.get("/trials?format=json").json()
        assert table["total"] > 0 and table["blind"]  # run, not yet unblinded
    finally:
        viewer.index.close()


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Run the real-study walkthrough in a temporary directory; yield that directory."""
    work = tmp_path_factory.mktemp("walkthrough")
    mp = pytest.MonkeyPatch()
    mp.chdir(work)
    mp.setenv("HOME", str(work))  # the README's ~/.prompt-ledger lands in the temp dir
    mp.delenv("PROMPT_LEDGER_HOME", raising=False)
    mp.delenv("ANTHROPIC_API_KEY", raising=False)
    try:
        (block,) = sh_blocks(REAL_STUDY)
        for argv in commands(block):
            if argv[0] == ".":
                continue  # activating the venv: this test already runs inside it
            if argv[0] == "export":
                name, _, value = argv[1].partition("=")
                if name == "ANTHROPIC_API_KEY":
                    continue  # the simulated backend answers instead
                mp.setenv(name, expand(value))
            elif argv[0] == "$EDITOR":
                # the edit a newcomer makes: here, few replicates so the run is quick
                spec = work / "my-study" / "study.toml"
                text = spec.read_text(encoding="utf-8")
                text = text.replace("replicates = 30", "replicates = 1")
                # and a smaller plan: 10 simulated studies a cell instead of 200 (minutes), the
                # registered analysis only (docs/planning.md: the sensitivity models are most
                # of a plan's time; tests/analysis/test_plan.py plans and verifies them), at
                # one replicate setting instead of two (4; the 30-replicate cells simulate
                # 1,050 trials a study)
                text = text.replace("studies = 200", "studies = 10\nsensitivity = false", 1)
                assert "replicates = [4, 30]\n" in text, "the template's [plan] replicates"
                text = text.replace("replicates = [4, 30]\n", "replicates = [4]\n", 1)
                spec.write_text(text, "utf-8")
            elif argv[0] == "ledger" and argv[1] == "view":
                viewed(Path(expand(argv[2])))  # it serves until stopped: pages fetched here
            elif argv[0] == "ledger":
                if argv[1] in ("run", "estimate") and "--backend" not in argv:
                    argv = [*argv, "--backend", "simulated"]
                    if "--budget-usd" in argv:  # the API's model is priced, a simulation is not
                        argv = [*argv, "--price-in", "3", "--price-out", "15"]
                invoke(argv)
            else:
                pytest.fail(f"README walkthrough: no rule to run {shlex.join(argv)}")
        yield work
    finally:
        mp.undo()


def test_real_study_walkthrough_runs(walkthrough: Path) -> None:
    home = walkthrough / ".prompt-ledger"
    assert (home / "keys" / "my-study-owner.key").exists()
    assert (walkthrough / "my-study" / "registration-checkpoint.txt").exists()
    assert (walkthrough / "report.html").exists()
    assert (walkthrough / "my-study-archive" / "MANIFEST.sha256").exists()


@pytest.mark.skipif(
    not all(shutil.which(t) for t in ("bash", "jq", "openssl", "xxd", "sha256sum")),
    reason="needs bash, jq, openssl, xxd and coreutils",
)
def test_auditors_by_hand_check_runs(walkthrough: Path, tmp_path: Path) -> None:
    (script,) = sh_blocks(AUDITORS)

    def audit(cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-e", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=120
        )

    result = audit(walkthrough)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken link" not in result.stdout
    assert "Signature Verified Successfully" in result.stdout + result.stderr
    # the chain check can fail: one changed hex digit of the third line's prev breaks two
    # links, that line's (its prev) and the fourth's (the third line's bytes changed)
    shutil.copytree(walkthrough / "my-study-archive", tmp_path / "my-study-archive")
    events = tmp_path / "my-study-archive" / "ledger" / "events.jsonl"
    lines = events.read_text("utf-8").splitlines(keepends=True)
    linked = re.search(r'"prev":"([0-9a-f]{64})"', lines[2])
    assert linked, lines[2]
    digit = "1" if linked.group(1)[-1] == "0" else "0"
    lines[2] = lines[2].replace(linked.group(1), linked.group(1)[:-1] + digit)
    events.write_text("".join(lines), "utf-8")
    tampered = audit(tmp_path)
    broken = [line for line in tampered.stdout.splitlines() if line.startswith("broken link")]
    assert len(broken) == 2, tampered.stdout + tampered.stderr
    assert linked.group(1)[:-1] + digit in broken[0], broken[0]


def test_ledger_by_hand_walkthrough_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The block as written, from an empty directory: it makes every file it uses itself."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    (block,) = sh_blocks(BY_HAND)
    ran = 0
    for text, argv in command_lines(block):
        if argv[0] == ".":
            continue  # activating the venv: this test already runs inside it
        if argv[0] == "ledger":
            out = invoke(argv)
            ran += 1
        else:  # a shell line (making a file): run verbatim by the shell
            result = subprocess.run(
                ["bash", "-e", "-c", text], cwd=work, capture_output=True, text=True, timeout=60
            )
            assert result.returncode == 0, f"{text}\n{result.stdout}{result.stderr}"
    assert ran >= 12
    assert "VERIFIED" in out  # the last command is ledger verify
    assert (work / "prompt.txt").is_file()


def _check_against_cli(argv: list[str]) -> None:
    command: click.Command = main
    words = argv[1:]
    while isinstance(command, click.Group) and words and not words[0].startswith("-"):
        sub = command.get_command(click.Context(command), words[0])  # loads entry points
        assert sub is not None, f"{shlex.join(argv)}: no command {words[0]!r}"
        command, words = sub, words[1:]
    names = {n for p in command.params for n in (*p.opts, *p.secondary_opts)}
    names |= {"-h", "--help"}
    for word in words:
        if word.startswith("--"):
            assert word.split("=", 1)[0] in names, f"{shlex.join(argv)}: no option {word}"


def test_every_ledger_command_in_the_readme_exists() -> None:
    checked = 0
    for block in sh_blocks():
        for argv in commands(block):
            for i, word in enumerate(argv):
                if word in ("ledger", ".venv/bin/ledger") and i + 1 < len(argv):
                    _check_against_cli(["ledger", *argv[i + 1 :]])
                    checked += 1
    assert checked >= 25
