"""A strict study.toml: every unknown or misspelled key is refused, naming file, line and key.

Issue 15: ``temprature``, ``side``, ``top_p``, ``system`` or ``seed`` in the wrong table were
silently ignored at lock, so what was locked differed from what the researcher wrote. Each case
is refused by ``ledger arms`` and ``ledger lock`` with a one-line message naming the file, the
line, the table, the key and the nearest valid key; the exit status is non-zero and nothing is
appended to the ledger.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from helpers import STUDY_ORIGIN, study_key

from ledger import Ledger
from ledger.cli import main
from runner._schema import LineFinder
from runner.spec import SpecError, load_study


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def study(study_template: Path, tmp_path: Path, ledger_home: Path) -> Path:
    """The tumbling-E template with a fresh ledger (genesis only) and its owner key file."""
    root = tmp_path / "study"
    shutil.copytree(study_template, root)
    with Ledger.create(root / "ledger.db", origin=STUDY_ORIGIN, key=study_key()):
        pass
    study_key().save(tmp_path / "owner.key")
    return root


def ledger_size(root: Path) -> int:
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        return log.size


def edit(root: Path, old: str, new: str, key: str | None = None) -> int:
    """Replace the first ``old`` in study.toml by ``new``; return the 1-based line of ``key``.

    That is the first line of ``new`` holding ``key`` (the first line of ``new`` without one).
    """
    spec = root / "study.toml"
    text = spec.read_text(encoding="utf-8")
    assert old in text, old
    at = text.index(old)
    spec.write_text(text[:at] + new + text[at + len(old) :], encoding="utf-8")
    lines = new.split("\n")
    offset = next((i for i, t in enumerate(lines) if key in t), None) if key else 0
    assert offset is not None, (key, new)
    return text[:at].count("\n") + 1 + offset


# (case, old text, new text, the message after "study.toml:<line>: ")
UNKNOWN_KEYS = [
    (
        "top-level key",
        "[study]",
        'system = "You are a doctor."\n\n[study]',
        "system: unknown top-level key ('system' belongs in [arms.<ID>])",
    ),
    (
        "top-level key far from any",
        "[study]",
        'zzz = "x"\n\n[study]',
        "zzz: unknown top-level key (sections: study, model, models, components, prompt, "
        "fewshot, arms, stimuli, design, response, hypotheses, analysis, deviations, variants, "
        "witnesses, witnessing, timestamping, steps, reviews, factors, factorial, plan, privacy)",
    ),
    ("misspelled section", "[model]", "[modle]", "modle: unknown section (did you mean 'model'?)"),
    (
        "study",
        'amendable = ["README.md"]',
        'amendable = ["README.md"]\ntitel = "x"',
        "[study] titel: unknown key (did you mean 'title'?)",
    ),
    (
        "model misspelled",
        "temperature = 1.0",
        "temprature = 1.0",
        "[model] temprature: unknown key (did you mean 'temperature'?)",
    ),
    (
        "model top_q",
        "temperature = 1.0",
        "temperature = 1.0\ntop_q = 0.9",
        "[model] top_q: unknown key (did you mean 'top_p'?)",
    ),
    (
        "model penalty",
        "temperature = 1.0",
        "temperature = 1.0\npresence_penalty = 0.5",
        "[model] presence_penalty: unknown key (valid keys: provider, id, max_tokens, temperature, "
        "top_p, top_k, stop, logprobs)",
    ),
    (
        "model seed",
        "temperature = 1.0",
        "temperature = 1.0\nseed = 3",
        "[model] seed: unknown key ('seed' belongs in [design])",
    ),
    (
        "arm",
        'role = "vehicle"',
        'role = "vehicle"\ncomponets = ["vehicle"]',
        "[arms.C] componets: unknown key (did you mean 'components'?)",
    ),
    (
        "differs_from",
        'differs_from = { arm = "A", by = ["decoding_rule"] }',
        'differs_from = { arm = "A", by = ["decoding_rule"], because = "x" }',
        "[arms.B.differs_from] because: unknown key (valid keys: arm, by, removes, adds, replaces)",
    ),
    (
        "stimuli",
        'truth = "stimuli/truth.csv"',
        'truth = "stimuli/truth.csv"\ntruht = "x.csv"',
        "[stimuli] truht: unknown key (did you mean 'truth'?)",
    ),
    (
        "design",
        "replicates = 30",
        "replicate = 30",
        "[design] replicate: unknown key (did you mean 'replicates'?)",
    ),
    (
        "response",
        'parser = "tumbling-e-json"',
        'parser = "tumbling-e-json"\nparsr = "x"',
        "[response] parsr: unknown key (did you mean 'parser'?)",
    ),
    (
        "hypothesis",
        'sides = "two-sided"',
        'side = "two-sided"',
        "[[hypotheses]] #3 (H2) side: unknown key (did you mean 'sides'?)",
    ),
    (
        "analysis",
        'random_intercept = "stimulus"',
        'random_intercepts = "stimulus"',
        "[analysis] random_intercepts: unknown key (did you mean 'random_intercept'?)",
    ),
    (
        "subtable of an arm",
        "[arms.C]",
        "[arms.C.extra]\nx = 1\n\n[arms.C]",
        "[arms.C] extra: unknown key (valid keys: role, components, differs_from, system, fewshot, "
        "sampling, models, replicates, items, variants, after, response_from)",
    ),
    (
        "arm sampling",
        'role = "vehicle"',
        'role = "vehicle"\nsampling = { temprature = 0.5 }',
        "[arms.C.sampling] temprature: unknown key (did you mean 'temperature'?)",
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [case[1:] for case in UNKNOWN_KEYS],
    ids=[case[0] for case in UNKNOWN_KEYS],
)
def test_unknown_key_is_refused_with_file_line_and_nearest_key(
    study: Path, old: str, new: str, message: str
) -> None:
    line = edit(study, old, new, key=message.split(":")[0].split()[-1])
    expected = f"{study / 'study.toml'}:{line}: {message}"
    with pytest.raises(SpecError) as info:
        load_study(study)
    assert info.value.problems[0] == expected
    before = ledger_size(study)
    for command in (("arms", study), ("lock", study, "--key", study.parent / "owner.key")):
        result = run(*command)
        assert result.exit_code == 1, result.output
        assert expected in result.output
        assert "Traceback" not in result.output
    assert ledger_size(study) == before == 1
    assert not (study / "registration-checkpoint.txt").exists()


def test_lock_without_a_key_refuses_the_same_way(study: Path) -> None:
    line = edit(study, "temperature = 1.0", "temprature = 1.0")
    result = run("lock", study)
    assert result.exit_code == 1
    assert f"study.toml:{line}: [model] temprature: unknown key" in result.output
    assert ledger_size(study) == 1


def test_every_unknown_key_is_reported_at_once_in_file_order(study: Path) -> None:
    edit(study, 'sides = "two-sided"', 'side = "two-sided"')
    edit(study, "temperature = 1.0", "temprature = 1.0")
    edit(study, "replicates = 30", "replicates = 0")
    with pytest.raises(SpecError) as info:
        load_study(study)
    problems = info.value.problems
    assert len(problems) == 3
    assert "[model] temprature" in problems[0]
    assert "[[hypotheses]] #3 (H2) side" in problems[1]
    assert "design.replicates: must be an integer from 1 to 100,000, got 0" in problems[2]
    lines = [int(p.split(":")[1]) for p in problems]
    assert lines[0] < lines[1]


# (case, old text, new text, the message after "study.toml:<line>: ")
BAD_VALUES = [
    (
        "outcome for the parser",
        'outcome = "glyph_accuracy"\ntest = "lmm"\nsides = "one-sided"',
        'outcome = "trial_accuracy"\ntest = "lmm"\nsides = "one-sided"',
        "hypotheses[0].outcome: 'trial_accuracy' does not fit parser 'tumbling-e-json'",
    ),
    (
        "parse_rate outcome",
        'outcome = "glyph_accuracy"\ntest = "lmm"\nsides = "one-sided"',
        'outcome = "parse_rate"\ntest = "lmm"\nsides = "one-sided"',
        "hypotheses[0].outcome: unknown outcome 'parse_rate'",
    ),
    (
        "random intercept none",
        'random_intercept = "stimulus"',
        'random_intercept = "none"',
        "analysis.random_intercept: must be 'stimulus' or 'source', got 'none' (a model without",
    ),
    (
        "analysis model",
        'model = "lmm"',
        'model = "glmm"',
        "analysis.model: must be 'lmm' (the only primary model of v1), got 'glmm'",
    ),
    (
        "exclude_unparseable",
        "exclude_unparseable = true",
        'exclude_unparseable = "no"',
        "analysis.exclude_unparseable: must be true or false, got 'no'",
    ),
    (
        "letters for another parser",
        'parser = "tumbling-e-json"',
        'parser = "tumbling-e-json"\nletters = "ABCD"',
        "response.letters: applies to the multiple-choice and cloze parsers only, not "
        "'tumbling-e-json'",
    ),
    (
        "first-token for tumbling-E",
        'parser = "tumbling-e-json"',
        'parser = "tumbling-e-json"\nmode = "first-token"',
        "response.mode: first-token applies to the multiple-choice, yes-no-maybe, "
        "orientation-word parsers, not 'tumbling-e-json'",
    ),
    (
        "answer column for tumbling-E",
        'truth = "stimuli/truth.csv"',
        'truth = "stimuli/truth.csv"\nanswer_column = "answer"',
        "stimuli.answer_column: applies to single-answer parsers only",
    ),
    (
        "unknown parser",
        'parser = "tumbling-e-json"',
        'parser = "free-text"',
        "response.parser: unknown parser 'free-text'",
    ),
    (
        "max_tokens true",
        "max_tokens = 2048",
        "max_tokens = true",
        "model.max_tokens: must be a positive integer, got True",
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [case[1:] for case in BAD_VALUES],
    ids=[case[0] for case in BAD_VALUES],
)
def test_values_that_would_be_ignored_are_refused(
    study: Path, old: str, new: str, message: str
) -> None:
    line = edit(study, old, new, key=message.split(":")[0].rsplit(".", 1)[-1] + " =")
    with pytest.raises(SpecError) as info:
        load_study(study)
    prefix = f"{study / 'study.toml'}:{line}: {message}"
    assert any(p.startswith(prefix) for p in info.value.problems), info.value.problems
    result = run("lock", study, "--key", study.parent / "owner.key")
    assert result.exit_code == 1 and message in result.output
    assert ledger_size(study) == 1


def test_a_missing_key_is_named_at_its_table_header(study: Path) -> None:
    line = edit(study, "seed = 20260421\n", "")
    header = (study / "study.toml").read_text(encoding="utf-8").split("\n").index("[design]") + 1
    assert line > header
    with pytest.raises(SpecError) as info:
        load_study(study)
    assert info.value.problems == [f"{study / 'study.toml'}:{header}: design.seed: missing"]


# ------------------------------------------------------------------------------ the line rule

TOML = """\
# a comment: temprature = 1
top = 1

[model]
description = \"\"\"
[design]
temprature = 2
\"\"\"
"temprature" = 0.5

[arms."v1.2"]
role = "full"
differs_from.arm = "A"
differs_from.bi = ["x"]

[[hypotheses]]
id = "H1"

[[hypotheses]]
id = "H2"
side = "one-sided"

[hypotheses.sub]
x = 1
"""


@pytest.mark.parametrize(
    ("path", "line"),
    [
        (("top",), 2),
        (("model", "temprature"), 9),  # not the comment, not inside the multi-line string
        (("model", "missing"), 4),
        (("design", "seed"), None),  # [design] exists only inside a string: no table
        (("arms", "v1.2", "role"), 12),
        (("arms", "v1.2", "differs_from", "bi"), 14),
        (("hypotheses", 0, "id"), 17),
        (("hypotheses", 1, "side"), 21),
        (("hypotheses", 1, "sub", "x"), 24),
    ],
)
def test_line_finder_follows_the_documented_rule(
    path: tuple[str | int, ...], line: int | None
) -> None:
    assert LineFinder(TOML).line(path) == line


def test_a_study_locked_before_keys_were_strict_keeps_working(
    study: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Strict at new, arms and lock; a locked spec cannot change, so later commands read it."""
    import runner.spec._load

    line = edit(study, "temperature = 1.0", "temperature = 1.0\nlogit_bias = 0.9", key="logit_bias")
    with monkeypatch.context() as patch:  # as an earlier version locked it: logit_bias ignored
        patch.setattr(runner.spec._load, "_unknown_problems", lambda c, data: None)
        assert run("lock", study, "--key", study.parent / "owner.key").exit_code == 0
    assert run("schedule", study, "--limit", "1").exit_code == 0
    assert load_study(study, strict=False).model["temperature"] == 1.0
    refused = run("arms", study)
    assert refused.exit_code == 1 and f"study.toml:{line}: [model] logit_bias" in refused.output
