"""Lock refuses a study whose truth table, parser and scorer do not fit: it could not be scored.

Each case is a named bad input: ``ledger lock`` exits non-zero with a message naming the file
(and line) and what does not fit, and nothing is appended to the ledger.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from helpers import STUDY_ORIGIN, fixed_key, study_key
from single_answer import rotation_study

from ledger import Ledger, SigningKey
from ledger.cli import main

ROTATION_ORIGIN = "prompt-ledger.local/rotation-pilot"


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def rotation_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rotation_study(tmp_path_factory.mktemp("rotation") / "study")


def prepare(root: Path, key: SigningKey, origin: str) -> Path:
    """Create the study's ledger (genesis only) and save its owner key beside the study."""
    with Ledger.create(root / "ledger.db", origin=origin, key=key):
        pass
    path = root.parent / "owner.key"
    key.save(path)
    return path


def size(root: Path) -> int:
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        return log.size


def spec(root: Path, old: str, new: str) -> None:
    path = root / "study.toml"
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def table(root: Path, change: Callable[[list[str]], list[str]]) -> None:
    path = root / "stimuli" / "truth.csv"
    lines = path.read_text(encoding="utf-8").split("\n")
    path.write_text("\n".join(change(lines)), encoding="utf-8")


def letters_column(lines: list[str]) -> list[str]:
    letter = {"UP": "A", "RIGHT": "B", "DOWN": "C", "LEFT": "D"}
    out = [lines[0] + ",answer"]
    out += [f"{line},{letter[line.rsplit(',', 1)[1]]}" for line in lines[1:] if line]
    return [*out, ""]


def replace_row(index: int, new: str) -> Callable[[list[str]], list[str]]:
    def change(lines: list[str]) -> list[str]:
        lines[index] = new
        return lines

    return change


def insert_row(index: int, new: str) -> Callable[[list[str]], list[str]]:
    def change(lines: list[str]) -> list[str]:
        lines.insert(index, new)
        return lines

    return change


def drop_column(name: str) -> Callable[[list[str]], list[str]]:
    def change(lines: list[str]) -> list[str]:
        at = lines[0].split(",").index(name)
        return [",".join(c for i, c in enumerate(line.split(",")) if i != at) for line in lines]

    return change


# (case, spec edits, truth table edit, the message)
PARSER = 'parser = "orientation-word"'
CHI = ('test = "chi-square"', 'test = "mcnemar"')
ANSWER_ORIENTATION = (
    'truth = "stimuli/truth.csv"',
    'truth = "stimuli/truth.csv"\nanswer_column = "orientation"',
)
ROTATION_CASES: list[
    tuple[str, list[tuple[str, str]], Callable[[list[str]], list[str]] | None, str]
] = [
    (
        "multiple-choice without an answer column",
        [(PARSER, 'parser = "multiple-choice"')],
        None,
        "truth table does not fit parser multiple-choice (answer column 'answer', [stimuli] "
        "answer_column): {truth}:1: no 'answer' column (the header is stimulus,source,orientation)",
    ),
    (
        "answer outside the declared letters",
        [(PARSER, 'parser = "multiple-choice"\nletters = "ABC"')],
        letters_column,
        "{truth}:5: stimulus 'scan1-left': answer 'D' is not one of A, B, C ([response] letters), "
        "so no answer could ever be scored correct",
    ),
    (
        "orientations for the yes-no-maybe parser",
        [(PARSER, 'parser = "yes-no-maybe"'), ANSWER_ORIENTATION],
        None,
        "{truth}:2: stimulus 'scan1-up': orientation 'UP' is not one of yes, no, maybe (the "
        "yes-no-maybe parser)",
    ),
    (
        "orientation-word reading a missing column",
        [('truth = "stimuli/truth.csv"', 'truth = "stimuli/truth.csv"\nanswer_column = "answer"')],
        None,
        "{truth}:1: no 'answer' column",
    ),
    (
        "orientation-word with an unknown word",
        [],
        replace_row(3, "scan1-down,scan1,SIDEWAYS"),
        "{truth}:4: stimulus 'scan1-down': orientation 'SIDEWAYS' is not one of UP, RIGHT, DOWN, "
        "LEFT (the orientation-word parser)",
    ),
    (
        "a stimulus listed twice",
        [],
        insert_row(3, "scan1-right,scan1,DOWN"),
        "{truth}:4: stimulus 'scan1-right' is listed twice (first on line 3); an answer table has "
        "one row per stimulus",
    ),
    (
        "an empty answer",
        [],
        replace_row(2, "scan1-right,scan1,"),
        "{truth}:3: stimulus 'scan1-right' has an empty 'orientation'",
    ),
    (
        "exact truth with surrounding whitespace",
        [(PARSER, 'parser = "exact"'), CHI, ANSWER_ORIENTATION],
        replace_row(1, "scan1-up,scan1, UP"),
        "{truth}:2: stimulus 'scan1-up': orientation ' UP' has whitespace at its start or end, "
        "which an exact match can never equal",
    ),
    (
        "normalized truth that normalizes to nothing",
        [(PARSER, 'parser = "normalized"'), CHI, ANSWER_ORIENTATION],
        replace_row(1, "scan1-up,scan1,..."),
        "{truth}:2: stimulus 'scan1-up': orientation '...' is only punctuation and whitespace, so "
        "it normalizes to nothing",
    ),
    (
        "chi-square for a parser without labels",
        [(PARSER, 'parser = "exact"')],
        None,
        "{spec}:57: hypotheses[2].test: chi-square tests the spread of wrong answers over a "
        "parser's labels; parser 'exact' has no closed set of labels",
    ),
    (
        "random intercept by source without a source column",
        [('random_intercept = "source"', 'random_intercept = "source"')],
        drop_column("source"),
        "{spec}: analysis.random_intercept: 'source' needs a 'source' column in truth.csv "
        "(columns stimulus,orientation)",
    ),
    (
        "a rotation table for the tumbling-E parser",
        [
            (PARSER, 'parser = "tumbling-e-json"'),
            ('random_intercept = "source"', 'random_intercept = "stimulus"'),
        ],
        None,
        "truth table does not fit parser tumbling-e-json: {truth}:1: missing column row, position; "
        "expected header stimulus,row,position,orientation, got stimulus,source,orientation; the "
        "tumbling-e-json parser scores a chart glyph by glyph, and this looks like an answer table "
        "(one answer per stimulus): use orientation-word in [response] parser",
    ),
]


@pytest.mark.parametrize(
    ("edits", "change", "message"),
    [case[1:] for case in ROTATION_CASES],
    ids=[case[0] for case in ROTATION_CASES],
)
def test_rotation_study_truth_that_does_not_fit_is_refused(
    rotation_template: Path,
    tmp_path: Path,
    ledger_home: Path,
    edits: list[tuple[str, str]],
    change: Callable[[list[str]], list[str]] | None,
    message: str,
) -> None:
    root = tmp_path / "study"
    shutil.copytree(rotation_template, root)
    for old, new in edits:
        spec(root, old, new)
    if change is not None:
        table(root, change)
    key_file = prepare(root, fixed_key("truth-fit/owner"), ROTATION_ORIGIN)
    result = run("lock", root, "--key", key_file)
    expected = message.format(truth=root / "stimuli" / "truth.csv", spec=root / "study.toml")
    assert result.exit_code == 1, result.output
    assert expected in result.output, result.output
    assert "Traceback" not in result.output
    assert size(root) == 1
    assert not (root / "registration-checkpoint.txt").exists()


def test_the_unchanged_rotation_study_locks(
    rotation_template: Path, tmp_path: Path, ledger_home: Path
) -> None:
    root = tmp_path / "study"
    shutil.copytree(rotation_template, root)
    key_file = prepare(root, fixed_key("truth-fit/owner"), ROTATION_ORIGIN)
    result = run("lock", root, "--key", key_file)
    assert result.exit_code == 0, result.output
    assert size(root) > 1


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (
            "a chart missing a glyph",
            "truth table does not fit parser tumbling-e-json: {truth}:2: stimulus uniform-up lists "
            "60 glyphs, expected 61",
        ),
        (
            "a random intercept by source",
            "{spec}: analysis.random_intercept: 'source' needs a 'source' column in the truth "
            "table, "
            "and the tumbling-e-json table has the fixed columns stimulus,row,position,orientation",
        ),
    ],
)
def test_tumbling_e_truth_that_does_not_fit_is_refused(
    study_template: Path, tmp_path: Path, ledger_home: Path, case: str, message: str
) -> None:
    root = tmp_path / "study"
    shutil.copytree(study_template, root)
    if case == "a chart missing a glyph":
        table(root, lambda lines: [line for line in lines if line != "uniform-up,11,9,UP"])
    else:
        spec(root, 'random_intercept = "stimulus"', 'random_intercept = "source"')
    key_file = prepare(root, study_key(), STUDY_ORIGIN)
    result = run("lock", root, "--key", key_file)
    expected = message.format(truth=root / "stimuli" / "truth.csv", spec=root / "study.toml")
    assert result.exit_code == 1, result.output
    assert expected in result.output, result.output
    assert size(root) == 1
