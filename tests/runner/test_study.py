"""Study spec validation, ledger new / lock / schedule / amend, end to end through the CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ledger import Ledger, SigningKey, open_checkpoint
from ledger.cli import main
from runner._lock import StudyError, check_integrity
from runner.spec import SpecError, load_study


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("PROMPT_LEDGER_HOME", str(home))
    root = tmp_path_factory.mktemp("studies") / "template"
    result = run("new", root, "--template", "prompt-tumbling-e", "--id", "prompt-tumbling-e")
    mp.undo()
    assert result.exit_code == 0, result.output
    (root / "ledger.db").unlink()  # each test makes its own ledger
    return root


@pytest.fixture
def study(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    root = tmp_path / "study"
    shutil.copytree(template, root)
    keys = tmp_path / "home" / "keys"
    keys.mkdir(parents=True)
    SigningKey.generate("prompt-ledger.local/prompt-tumbling-e/owner").save(
        keys / "prompt-tumbling-e-owner.key"
    )
    return root


def test_template_is_valid_with_1050_trials(study: Path) -> None:
    spec = load_study(study)
    assert list(spec.arms) == ["A", "B", "C", "D", "E"]
    assert len(spec.stimuli) == 7
    assert spec.replicates * len(spec.arms) * len(spec.stimuli) == 1050


def test_new_lock_log_and_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    root = tmp_path / "s"
    assert run("new", root).exit_code == 0
    assert not list(root.glob("*.key")) and (tmp_path / "home" / "keys").is_dir()
    r = run("lock", root)
    assert r.exit_code == 0, r.output
    assert "1050 trials" in r.output and "publish it" in r.output
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        kinds = [e.kind for e in log.events()]
        protocol = next(log.events("protocol.locked"))
        vkeys = list(log.keys())
    # spec, prompts, truth, PNGs, README, the OSF preregistration
    assert kinds.count("artifact.locked") == 1 + 6 + 1 + 7 + 1 + 1
    assert kinds[-1] == "protocol.locked"
    assert protocol.body["trials"] == 1050
    note = (root / "registration-checkpoint.txt").read_text()
    from ledger import VerifierKey

    cp, _ = open_checkpoint(note, [VerifierKey.parse(k.vkey) for k in vkeys])
    assert cp.size == len(kinds)
    r = run("log", root / "ledger.db", "--kind", "protocol.locked", "--json")
    assert (
        json.loads(r.output)["envelope"]["body"]["schedule_sha256"]
        == (protocol.body["schedule_sha256"])
    )
    again = run("lock", root)
    assert again.exit_code == 1 and "already locked" in again.output
    r = run("verify", root / "ledger.db")
    assert r.exit_code == 0, r.output


def test_schedule_command_and_tamper_refusal(study: Path) -> None:
    r = run("lock", study)
    assert r.exit_code == 0, r.output
    first = run("schedule", study, "--limit", "3")
    assert first.exit_code == 0, first.output
    assert first.output == run("schedule", study, "--limit", "3").output
    stimulus = sorted((study / "stimuli").glob("*.png"))[0]
    data = bytearray(stimulus.read_bytes())
    data[-20] ^= 1
    stimulus.write_bytes(bytes(data))
    r = run("schedule", study)
    assert r.exit_code == 1
    assert f"stimuli/{stimulus.name}: locked" in r.output
    r = run("amend", study, "--reason", "oops")
    assert r.exit_code == 1 and "may not change after lock" in r.output


def test_amend_records_a_deviation(study: Path) -> None:
    assert run("lock", study).exit_code == 0
    readme = study / "README.md"
    readme.write_text(readme.read_text() + "\nAmended.\n")
    with pytest.raises(StudyError, match=r"README\.md: locked"):
        check_integrity(study)
    r = run("amend", study, "--reason", "clarified the workflow")
    assert r.exit_code == 0, r.output
    check_integrity(study)
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        amended = next(log.events("protocol.amended"))
    assert amended.body["reason"] == "clarified the workflow"
    assert amended.body["changes"][0]["path"] == "README.md"


def test_false_matched_control_is_refused(study: Path) -> None:
    spec = study / "study.toml"
    text = spec.read_text().replace(
        'differs_from = { arm = "A", by = ["decoding_rule"] }',
        'differs_from = { arm = "A", by = ["prohibited_reasoning"] }',
    )
    spec.write_text(text)
    r = run("lock", study)
    assert r.exit_code == 1
    assert "arms.B.differs_from" in r.output and "lacks ['decoding_rule']" in r.output
    assert (
        not (study / "ledger.db").exists()
        or "protocol.locked" not in run("log", study / "ledger.db").output
    )
    assert run("arms", study).exit_code == 1


def test_arms_shows_components_and_claims(study: Path) -> None:
    r = run("arms", study)
    assert r.exit_code == 0, r.output
    assert "claim: B differs from A by ['decoding_rule']: holds" in r.output
    assert "A vs B: only in A: ['decoding_rule']; only in B: ['matched_control']" in r.output


@pytest.mark.parametrize(
    ("old", "new", "messages"),
    [
        (
            '"prompts/framing.txt"',
            '"prompts/missing.txt"',
            ["components.framing: file 'prompts/missing.txt' does not exist"],
        ),
        (
            'components = ["vehicle", "output_schema"]',
            'components = ["vehicle", "nope"]',
            ["arms.C.components: unknown component 'nope'"],
        ),
        (
            "replicates = 30",
            "replicates = 0",
            ["design.replicates: must be an integer from 1 to 100,000, got 0"],
        ),
        (
            "replicates = 30",
            "replicates = 1000000000",  # issue 32: never a MemoryError at lock
            ["design.replicates: must be an integer from 1 to 100,000, got 1000000000"],
        ),
        ("seed = 20260421", 'seed = "abc"', ["design.seed: must be a non-negative integer"]),
        (
            'contrast = ["A", "B"]',
            'contrast = ["A", "Z"]',
            ["hypotheses[0].contrast: unknown arm 'Z'"],
        ),
        ('test = "equivalence"', 'test = "magic"', ["hypotheses[3].test: unknown test 'magic'"]),
        ('id = "H2"', 'id = "H1"', ["hypotheses[2].id: duplicate hypothesis id 'H1'"]),
    ],
)
def test_bad_specs_name_file_and_field(
    study: Path, old: str, new: str, messages: list[str]
) -> None:
    spec = study / "study.toml"
    text = spec.read_text()
    assert old in text
    spec.write_text(text.replace(old, new, 1))
    with pytest.raises(SpecError) as info:
        load_study(study)
    for message in messages:
        assert any(message in p for p in info.value.problems), info.value.problems
    assert all(p.startswith(str(spec)) for p in info.value.problems)


def test_all_errors_reported_at_once(study: Path) -> None:
    spec = study / "study.toml"
    spec.write_text(
        spec.read_text()
        .replace("replicates = 30", "replicates = 0")
        .replace("seed = 20260421", "seed = -1")
    )
    with pytest.raises(SpecError) as info:
        load_study(study)
    assert len(info.value.problems) == 2


def test_truth_table_must_cover_every_stimulus(study: Path) -> None:
    truth = study / "stimuli" / "truth.csv"
    lines = truth.read_text().splitlines(keepends=True)
    victim = sorted((study / "stimuli").glob("*.png"))[0].stem
    truth.write_text("".join(line for line in lines if not line.startswith(victim + ",")))
    with pytest.raises(SpecError, match=f"does not cover stimulus '{victim}'"):
        load_study(study)


def test_a_malformed_truth_row_is_named_at_its_line(study: Path) -> None:
    """Issue 32: a row with too few fields is named at truth.csv:LINE, not reported as a
    stimulus the truth table does not cover."""
    truth = study / "stimuli" / "truth.csv"
    lines = truth.read_text().splitlines(keepends=True)
    lines[4] = lines[4].split(",", 1)[0] + "\n"  # line 5: the stimulus id alone
    truth.write_text("".join(lines))
    with pytest.raises(SpecError) as info:
        load_study(study)
    header = lines[0].strip()
    fields = len(header.split(","))
    assert any(
        f"truth.csv:5: 1 field(s), the header has {fields} ({header})" in p
        for p in info.value.problems
    ), info.value.problems


def test_image_the_api_cannot_take_is_refused(study: Path) -> None:
    from PIL import Image

    victim = sorted((study / "stimuli").glob("*.png"))[0]
    Image.new("L", (9000, 10), 255).save(victim)
    r = run("lock", study)
    assert r.exit_code == 1 and victim.name in r.output and "8000" in r.output


def test_a_design_past_the_schedule_cap_is_refused_before_any_id_is_built() -> None:
    """Issue 32: 200 items x 100,000 replicates would be 20 million ids held in memory."""
    from runner import StudyError
    from runner._schedule import crossed_trial_ids

    items = [f"q{i}" for i in range(200)]
    with pytest.raises(StudyError, match=r"crosses to 20,000,000 trials, more than the 10,000,000"):
        crossed_trial_ids([("A", [None], items, 100_000)])
    assert len(crossed_trial_ids([("A", [None], items, 3)])) == 600
