"""Single-answer studies end to end: lock, run (simulated), score, unblind, analyse, export, verify.

Issue 15's first slice: a study scored by ``orientation-word``, ``yes-no-maybe`` or
``multiple-choice`` (first-token mode) locked and ran, and then ``ledger score`` crashed
("expected header stimulus,row,position,orientation"). Each study here is written without a
template: the rotation study is the example of ``docs/study-spec.md`` read from the page.
"""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from helpers import fixed_key, science_skipped
from single_answer import rotation_study, yes_no_maybe_study

import analysis
from ledger import Ledger
from ledger.cli import main
from verify import Status
from verify._science import science_checks


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def events(root: Path, kind: str) -> list[Any]:
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        return list(log.events(kind))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("PROMPT_LEDGER_HOME", str(home))
    yield home
    mp.undo()


@pytest.fixture(scope="module")
def key_file(home: Path) -> Path:
    path = home / "owner.key"
    fixed_key("single-answer/owner").save(path)
    return path


def full_run(root: Path, key: Path) -> Path:
    """Every step of the flow through the CLI; returns the exported archive."""
    for step in (
        ("lock", root),
        ("run", root, "--backend", "simulated"),
        ("score", root),
        ("unblind", root),
        ("analyze", root),
    ):
        result = run(*step, "--key", key)
        assert result.exit_code == 0, (step, result.output)
    archive = root.parent / f"{root.name}-archive"
    result = run("export", root, archive, "--key", key)
    assert result.exit_code == 0, result.output
    verified = run("verify", archive)
    assert verified.exit_code == 0, verified.output
    assert "VERIFIED" in verified.output and "rescore" in verified.output
    return archive


def truth_table(path: Path) -> dict[str, dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return {row["stimulus"]: row for row in csv.DictReader(handle)}


def scored_items(root: Path) -> list[tuple[str, dict[str, Any]]]:
    """(stimulus, item) of every trial.scored event, from the item blobs."""
    out = []
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        for event in log.events("trial.scored"):
            (item,) = json.loads(log.blob(event.blobs["scores"]))
            out.append((event.body["stimulus"], item))
    return out


def result(root: Path, result_id: str) -> dict[str, Any]:
    found = [e.body for e in events(root, "analysis.result") if e.body["id"] == result_id]
    assert len(found) == 1, result_id
    body: dict[str, Any] = found[0]
    return body


# ------------------------------------------------------------------------------ rotation


@pytest.fixture(scope="module")
def rotation(tmp_path_factory: pytest.TempPathFactory, key_file: Path) -> tuple[Path, Path]:
    root = rotation_study(tmp_path_factory.mktemp("rotation") / "study")
    return root, full_run(root, key_file)


def test_rotation_study_from_the_docs_runs_end_to_end(rotation: tuple[Path, Path]) -> None:
    root, archive = rotation
    (protocol,) = events(root, "protocol.locked")
    assert protocol.body["response"] == {
        "format": "orientation-word",
        "parser": "orientation-word",
        "answer_column": "orientation",
        "mode": "exactly-one",
    }
    assert [h["outcome"] for h in protocol.body["hypotheses"]] == ["trial_accuracy"] * 3
    assert len(events(root, "trial.scored")) == protocol.body["trials"] == 3 * 4 * 2 * 3
    truth = truth_table(root / "stimuli" / "truth.csv")
    items = scored_items(root)
    for stimulus, item in items:
        assert item["truth"] == truth[stimulus]["orientation"]
        assert item["correct"] == (item["answer"] == item["truth"])
    assert sum(item["correct"] for _, item in items) > len(items) / 2  # it reads the pixels
    model = result(root, "model.lmm")
    assert model["status"] == "ok" and model["values"]["group_col"] == "source", model
    errors = result(root, "exploratory.errors.note")
    assert errors["status"] == "ok" and "accuracy_by_row" not in errors["values"]
    assert errors["values"]["confusion"]["labels"] == ["UP", "RIGHT", "DOWN", "LEFT"]
    assert result(root, "hypothesis.H3")["values"]["labels"] == ["UP", "RIGHT", "DOWN", "LEFT"]
    assert not [
        r
        for r in (e.body for e in events(root, "analysis.result"))
        if r["id"] == "descriptive.control" and any(r["values"].values())
    ]
    assert (archive / "truth" / "truth.csv").is_file()


def test_a_changed_answer_in_the_truth_table_fails_verification(
    rotation: tuple[Path, Path], tmp_path: Path
) -> None:
    """The archive's truth/truth.csv is a copy: changing it fails the manifest and the export's
    coverage, while re-scoring keeps reading the truth from the signed artifact.locked blob."""
    from verify import verify_path

    copy = tmp_path / "archive"
    shutil.copytree(rotation[1], copy)
    path = copy / "truth" / "truth.csv"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    assert lines[1].endswith(",UP\n")  # scan1-up,scan1,UP
    lines[1] = lines[1].replace(",UP", ",DOWN")
    path.write_text("".join(lines), encoding="utf-8")
    with science_skipped():  # re-scoring is read on its own below
        report = verify_path(copy)
    failed = {c.name: c for c in report.failures}
    assert not report.ok and "manifest" in failed
    assert "truth/truth.csv" in (failed["manifest"].where or "") + failed["manifest"].reason
    rescore = next(c for c in science_checks(copy) if c.name == "rescore")
    assert rescore.status is Status.PASS, rescore.reason


# ------------------------------------------------------------------------------ yes/no/maybe


@pytest.fixture(scope="module")
def yes_no_maybe(tmp_path_factory: pytest.TempPathFactory, key_file: Path) -> tuple[Path, Path]:
    root = yes_no_maybe_study(tmp_path_factory.mktemp("ynm") / "study")
    return root, full_run(root, key_file)


def test_yes_no_maybe_study_runs_end_to_end(yes_no_maybe: tuple[Path, Path]) -> None:
    root, archive = yes_no_maybe
    (protocol,) = events(root, "protocol.locked")
    assert protocol.body["response"] == {
        "format": "yes-no-maybe",
        "parser": "yes-no-maybe",
        "answer_column": "answer",
        "mode": "exactly-one",
    }
    items = scored_items(root)
    assert len(items) == 7 * 3 * 3
    assert {item["truth"] for _, item in items} == {"yes", "no"}
    assert {item["answer"] for _, item in items} <= {"yes", "no", "maybe", None}
    assert all(item["truth"] == "no" for s, item in items if s == "snellen-letters")
    # the Snellen chart is an ordinary trial here, not a specificity control
    control = result(root, "descriptive.control")
    assert control["values"] == {"bare.1": None, "with-note": None, "with-rule": None}
    arms = result(root, "descriptive.arms")["values"]
    assert sorted(arms) == ["bare.1", "with-note", "with-rule"]
    assert sum(a["trials_scored"] for a in arms.values()) == len(items)
    errors = result(root, "exploratory.errors.bare.1")["values"]
    assert errors["confusion"]["labels"] == ["yes", "no", "maybe"]
    assert "error_directions" not in errors and "canonical_right_share" not in errors
    assert result(root, "hypothesis.H6")["values"]["labels"] == ["yes", "no", "maybe"]
    for hypothesis in ("H1", "H2", "H3", "H4", "H5", "H6"):
        assert result(root, f"hypothesis.{hypothesis}")["status"] == "ok", hypothesis
    unparseable = [e for e in events(root, "trial.scored") if e.body["status"] == "unparseable"]
    excluded = sum(a["excluded"] for a in arms.values())
    assert excluded == len(unparseable)  # exclude_unparseable = true
    html = (archive / "analysis" / "report.html").read_text(encoding="utf-8")
    assert "Accuracy by arm" in html and "accuracy by chart row" not in html
    assert "Specificity control" not in html
    frames = analysis.load(archive)
    assert len(frames.scores) == len(items)
    assert set(frames.scores["accuracy"]) <= {0.0, 1.0}
    assert sorted(frames.scores["arm"].unique()) == ["bare.1", "with-note", "with-rule"]


# ------------------------------------------------------------------------------ multiple choice


def test_multiple_choice_first_token_study_runs_end_to_end(
    tmp_path: Path, key_file: Path, home: Path
) -> None:
    """Letters as options of the rotation question, read in first-token mode, unparseable wrong."""
    root = rotation_study(tmp_path / "mc")
    letter = {"UP": "A", "RIGHT": "B", "DOWN": "C", "LEFT": "D"}
    truth = truth_table(root / "stimuli" / "truth.csv")
    with (root / "stimuli" / "truth.csv").open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["stimulus", "source", "orientation", "answer"])
        for stimulus, row in truth.items():
            orientation = row["orientation"]
            writer.writerow([stimulus, row["source"], orientation, letter[orientation]])
    (root / "prompts" / "task.txt").write_text(
        "Which way does the top of this image point?\nA. UP\nB. RIGHT\nC. DOWN\nD. LEFT\n"
        "Answer with the letter.\n",
        encoding="utf-8",
    )
    spec = root / "study.toml"
    text = spec.read_text(encoding="utf-8").replace(
        'parser = "orientation-word"',
        'parser = "multiple-choice"\nletters = "ABCD"\nmode = "first-token"',
    )
    spec.write_text(text, encoding="utf-8")
    full_run(root, key_file)
    (protocol,) = events(root, "protocol.locked")
    assert protocol.body["response"] == {
        "format": "multiple-choice",
        "parser": "multiple-choice",
        "answer_column": "answer",
        "mode": "first-token",
        "letters": "ABCD",
    }
    items = scored_items(root)
    assert {item["answer"] for _, item in items} <= {"A", "B", "C", "D", None}
    assert sum(item["correct"] for _, item in items) > len(items) / 2
    for stimulus, item in items:
        assert item["truth"] == letter[truth[stimulus]["orientation"]]
    assert result(root, "hypothesis.H3")["values"]["labels"] == ["A", "B", "C", "D"]
