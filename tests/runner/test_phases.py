"""Staged pre-registration (``docs/study-spec.md``, "Phases"), end to end and under attack.

The text multiple-choice example of ``docs/study-spec.md`` runs in two phases as that page
describes them: phase ``main`` (arms ``direct`` and ``bare``, items q1-q4, H2), run; then phase
``cot`` (adds the ``cot`` arm, appends q5 and q6, adds H1), run; then score, unblind, analyse,
export and verify. The earlier phase's hypothesis gives exactly the result of the same study
locked with phase ``main`` alone. A phase that changes anything an earlier one locked is refused
naming it, with nothing appended; an archive whose phase order was forged fails ``phases``.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from locations import REPO

from ledger import Ledger, SigningKey
from ledger.cli import main
from tests.e2e.test_text_studies import MC, example_files
from tests.verify.test_archive_tamper import read_events, resign
from verify import verify_archive
from verify._report import Status

SPEC_DOC = REPO / "docs" / "study-spec.md"


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def ok(*args: str | Path) -> Result:
    result = run(*args)
    assert result.exit_code == 0, (args[0], result.output)
    return result


def ledger_size(root: Path) -> int:
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        return log.size


def phase_lines() -> tuple[str, str]:
    """The two phase names of the page's worked example, from its prose and its TOML line."""
    text = SPEC_DOC.read_text(encoding="utf-8")
    section = text[text.index("## Phases: staged pre-registration") :]
    section = section[: section.index("\n## ")]
    first = re.search(r'```toml\nphase = "(\w+)"\n```', section)
    second = re.search(r'`phase = "(\w+)"`', section)
    assert first and second, "the Phases section lost its example"
    return first.group(1), second.group(1)


def phase_files(full: bool) -> dict[str, str]:
    """The example's files for phase ``main`` (``full=False``) or phase ``cot``."""
    files = example_files(MC)
    main_name, cot_name = phase_lines()
    toml = files["study.toml"]
    name = cot_name if full else main_name
    toml = toml.replace("[study]\n", f'[study]\nphase = "{name}"\n', 1)
    items = files["data/items.jsonl"].splitlines(keepends=True)
    if not full:
        toml = re.sub(r"\[arms\.cot\]\n.*?\n\n", "", toml, flags=re.S)
        toml = re.sub(r'\[\[hypotheses\]\]\nid = "H1"\n.*?\n\n', "", toml, flags=re.S)
        files["data/items.jsonl"] = "".join(items[:4])
    files["study.toml"] = toml
    return files


def write(root: Path, files: dict[str, str]) -> None:
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(path))
        yield path


@pytest.fixture(scope="module")
def key(home: Path) -> Path:
    path = home / "owner.key"
    SigningKey.generate("phases.example/owner").save(path)
    return path


def finish(root: Path, key: Path) -> Path:
    for command in ("score", "unblind", "analyze"):
        ok(command, root, "--key", key)
    archive = root.parent / "archive"
    ok("export", root, archive, "--key", key)
    return archive


@pytest.fixture(scope="module")
def phased(tmp_path_factory: pytest.TempPathFactory, key: Path) -> dict[str, Any]:
    """The example locked and run in two phases, then scored, analysed and exported."""
    root = tmp_path_factory.mktemp("phased") / "study"
    write(root, phase_files(full=False))
    first = ok("lock", root, "--key", key)
    ok("run", root, "--backend", "simulated", "--key", key)
    size_before = ledger_size(root)
    write(root, phase_files(full=True))
    second = ok("lock", root, "--key", key)
    status = ok("status", root).output
    ok("run", root, "--backend", "simulated", "--key", key)
    archive = finish(root, key)
    return {
        "root": root,
        "archive": archive,
        "first": first.output,
        "second": second.output,
        "status": status,
        "size_before": size_before,
    }


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory, key: Path) -> Path:
    """Phase ``main`` alone, locked, run and analysed: what its hypothesis says on its own."""
    root = tmp_path_factory.mktemp("single") / "study"
    write(root, phase_files(full=False))
    ok("lock", root, "--key", key)
    ok("run", root, "--backend", "simulated", "--key", key)
    return finish(root, key)


def results(archive: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in json.loads((archive / "analysis/results.json").read_text())}


@pytest.mark.slow  # two full studies: the slow set (.ci/run runs it)
def test_the_two_phase_example_runs_and_verifies(phased: dict[str, Any]) -> None:
    report = verify_archive(phased["archive"])
    failed = [c for c in report.checks if c.status is Status.FAIL]
    assert not failed, failed
    check = next(c for c in report.checks if c.name == "phases")
    assert check.status is Status.PASS and "2 phases" in check.reason
    # the OSF preregistration is the first lock's, kept unchanged by the second phase
    check = next(c for c in report.checks if c.name == "registration")
    assert check.status is Status.PASS, check
    events = (phased["archive"] / "ledger/events.jsonl").read_text("utf-8").splitlines()
    osf = [e for e in events if '"path":"osf-preregistration.md"' in e]
    assert len(osf) == 1
    schedule = (phased["archive"] / "trials/schedule.csv").read_text().splitlines()[1:]
    assert len(schedule) == 3 * 2 * 6 * 2  # the whole example's trials
    # the earlier phase's trials come first, in their locked order
    first = [row.split(",")[-1] for row in schedule[: 2 * 2 * 4 * 2]]
    assert {t.split("|")[0] for t in first} == {"direct", "bare"}
    assert {t.split("|")[2] for t in first} == {"q1", "q2", "q3", "q4"}


@pytest.mark.slow  # two full studies: the slow set (.ci/run runs it)
def test_each_phase_has_its_own_registration_checkpoint(phased: dict[str, Any]) -> None:
    root = phased["root"]
    assert (root / "registration-checkpoint.txt").is_file()
    note = (root / "registration-checkpoint-cot.txt").read_text()
    assert "registration-checkpoint-cot.txt" in phased["second"]
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        locks = list(log.events("protocol.locked"))
        sizes = {cp.size for cp in log.checkpoints()}
    assert [e.body["phase"]["name"] for e in locks] == ["main", "cot"]
    assert locks[1].body["phase"]["previous"] == locks[0].seq
    assert locks[1].seq == phased["size_before"] + 2  # two re-locked files, then the lock
    assert note.splitlines()[1] == str(locks[1].seq + 1)  # the tree right after the lock
    assert {locks[0].seq + 1, locks[1].seq + 1} <= sizes
    assert "32/72 trials final" in phased["status"]


@pytest.mark.slow  # two full studies: the slow set (.ci/run runs it)
def test_an_earlier_phase_result_is_the_one_it_gives_alone(
    phased: dict[str, Any], single: Path
) -> None:
    together, alone = results(phased["archive"]), results(single)
    for rid in ("hypothesis.H2", "hypothesis.H2@large", "hypothesis.H2@small"):
        assert together[rid]["values"] == alone[rid]["values"], rid
        assert together[rid]["verdict"] == alone[rid]["verdict"]
        assert together[rid]["values"]["phase"] == "main"
    assert together["hypothesis.H1"]["values"]["phase"] == "cot"
    assert "hypothesis.H1" not in alone


# ------------------------------------------------------------------ refused phases


@pytest.fixture
def locked_main(tmp_path: Path, key: Path) -> Path:
    root = tmp_path / "study"
    write(root, phase_files(full=False))
    ok("lock", root, "--key", key)
    return root


def refused(root: Path, key: Path, *needles: str) -> str:
    before = ledger_size(root)
    result = run("lock", root, "--key", key)
    assert result.exit_code != 0, result.output
    for needle in needles:
        assert needle in result.output, (needle, result.output)
    assert ledger_size(root) == before
    return result.output


def next_phase(root: Path) -> None:
    write(root, phase_files(full=True))


def test_locking_again_without_a_new_phase_is_refused(locked_main: Path, key: Path) -> None:
    refused(locked_main, key, "already locked", "phases: 'main'", "[study] phase")


def test_a_phase_that_edits_an_earlier_component_is_refused(locked_main: Path, key: Path) -> None:
    next_phase(locked_main)
    path = locked_main / "prompts/direct.txt"
    path.write_text(path.read_text() + "Be brief.\n")
    refused(locked_main, key, "prompts/direct.txt", "role component", "arm 'direct'")


def test_a_phase_that_changes_an_earlier_hypothesis_is_refused(
    locked_main: Path, key: Path
) -> None:
    next_phase(locked_main)
    spec = locked_main / "study.toml"
    spec.write_text(spec.read_text().replace('sides = "one-sided"', 'sides = "two-sided"'))
    refused(locked_main, key, "hypothesis 'H2' of an earlier phase changed (sides)")


def test_a_phase_that_edits_an_earlier_item_is_refused(locked_main: Path, key: Path) -> None:
    next_phase(locked_main)
    items = locked_main / "data/items.jsonl"
    items.write_text(items.read_text().replace("Which organ pumps", "Which organ moves"))
    refused(locked_main, key, "data/items.jsonl", "not a prefix")


def test_a_phase_that_drops_an_earlier_trial_is_refused(locked_main: Path, key: Path) -> None:
    next_phase(locked_main)
    spec = locked_main / "study.toml"
    spec.write_text(spec.read_text().replace("replicates = 2", "replicates = 1"))
    refused(locked_main, key, "no longer in the design", "'design' differs")


def test_a_new_hypothesis_in_an_earlier_family_is_refused(locked_main: Path, key: Path) -> None:
    root = locked_main  # locked again from scratch, with H2 in a family
    shutil.rmtree(root)
    files = phase_files(full=False)
    files["study.toml"] = files["study.toml"].replace(
        'sides = "one-sided"', 'sides = "one-sided"\nfamily = "accuracy"\ncorrection = "holm"'
    )
    write(root, files)
    ok("lock", root, "--key", key)
    full = phase_files(full=True)
    full["study.toml"] = (
        full["study.toml"]
        .replace(
            'sides = "one-sided"', 'sides = "one-sided"\nfamily = "accuracy"\ncorrection = "holm"'
        )
        .replace('test = "mcnemar"', 'test = "mcnemar"\nfamily = "accuracy"\ncorrection = "holm"')
    )
    write(root, full)
    refused(root, key, "hypothesis 'H1'", "family 'accuracy' belongs to an earlier phase")


def test_a_phase_after_scoring_is_sealed_is_refused(locked_main: Path, key: Path) -> None:
    ok("run", locked_main, "--backend", "simulated", "--key", key)
    ok("score", locked_main, "--key", key)
    next_phase(locked_main)
    refused(locked_main, key, "scoring was sealed at seq", "before scoring")


def test_a_bad_phase_name_is_refused_naming_the_field(tmp_path: Path, key: Path) -> None:
    root = tmp_path / "study"
    files = phase_files(full=False)
    files["study.toml"] = files["study.toml"].replace('phase = "main"', 'phase = "two words"')
    write(root, files)
    result = run("lock", root, "--key", key)
    assert result.exit_code != 0
    assert "study.toml:2: study.phase" in result.output, result.output
    assert not (root / "ledger.db").exists() or ledger_size(root) <= 1


# ------------------------------------------------------------------ forged archives


def copy(archive: Path, tmp_path: Path) -> Path:
    target = tmp_path / "archive"
    shutil.copytree(archive, target)
    return target


def phases_check(archive: Path) -> tuple[Status, str]:
    report = verify_archive(archive)
    check = next(c for c in report.checks if c.name == "phases")
    return check.status, check.reason


@pytest.mark.slow  # two full studies: the slow set (.ci/run runs it)
def test_a_trial_requested_before_its_phase_lock_fails_verification(
    phased: dict[str, Any], tmp_path: Path
) -> None:
    archive = copy(phased["archive"], tmp_path)
    events = read_events(archive)
    locks = [e for e in events if e["kind"] == "protocol.locked"]
    second = locks[1]["seq"]
    # a forger moves the first request of a cot-arm trial (and its response) before phase 2
    req = next(
        e
        for e in events
        if e["kind"] == "trial.requested" and e["body"]["trial"].startswith("cot|")
    )
    resp = next(
        e
        for e in events
        if e["kind"] in ("trial.responded", "trial.failed")
        and e["body"]["request_seq"] == req["seq"]
    )
    moved = [e for e in events if e["seq"] not in (req["seq"], resp["seq"])]
    at = next(i for i, e in enumerate(moved) if e["seq"] == second) - 2
    moved[at:at] = [req, resp]
    resign(archive, moved)
    status, reason = phases_check(archive)
    assert status is Status.FAIL
    assert f"of trial {req['body']['trial']} comes before the lock of its phase" in reason


@pytest.mark.slow  # two full studies: the slow set (.ci/run runs it)
def test_a_later_phase_that_rewrites_an_earlier_arm_fails_verification(
    phased: dict[str, Any], tmp_path: Path
) -> None:
    archive = copy(phased["archive"], tmp_path)
    events = read_events(archive)
    second = [e for e in events if e["kind"] == "protocol.locked"][1]
    second["body"]["arms"]["direct"]["sha256"] = "0" * 64
    second["body"]["hypotheses"][0]["alpha"] = 0.1
    resign(archive, events)
    status, reason = phases_check(archive)
    assert status is Status.FAIL
    assert "arm direct of an earlier phase is changed" in reason


@pytest.mark.slow  # a whole two-phase study: the slow set (.ci/run runs it)
def test_a_phase_added_to_a_study_first_locked_without_a_phase_name_verifies(
    tmp_path: Path, key: Path
) -> None:
    """Issue 32, an honest workflow: the page says a study first locked without ``phase`` may
    still add phases. Its first lock is then the unnamed phase 0, and the archive verifies."""
    root = tmp_path / "study"
    files = phase_files(full=False)
    files["study.toml"] = re.sub(r'phase = "\w+"\n', "", files["study.toml"], count=1)
    write(root, files)
    ok("lock", root, "--key", key)
    ok("run", root, "--backend", "simulated", "--key", key)
    write(root, phase_files(full=True))
    second = ok("lock", root, "--key", key)
    assert "registration-checkpoint-cot.txt" in second.output
    ok("run", root, "--backend", "simulated", "--key", key)
    report = verify_archive(finish(root, key))
    assert report.ok, [(c.name, c.reason) for c in report.checks if c.status is Status.FAIL]
    phases = report.get("phases")
    assert phases is not None and phases.status is Status.PASS and "2 phases" in phases.reason
