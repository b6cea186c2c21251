"""Seed 002's statistics as registered hypotheses (docs/study-spec.md, docs/mcq-statistics.md §11).

One module-scoped study (10 items, three arms, four option orders, two models, a sampling arm
with three replicates) is locked, run on the simulated backend, scored, unblinded and analysed
once; the tests read its results, recompute them with scipy/statsmodels, check the verifier's
re-derivation and its refusal of an edited, re-signed value, and check each bad input at lock.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import fixed_key

from ledger.cli import main
from runner.spec import SpecError, load_study

ITEMS = [
    {
        "id": f"q{i:02d}",
        "question": f"Which finding best fits clinical vignette number {i}?",
        "options": [f"finding {i}-{k}" for k in range(4)],
        "answer": "ABCD"[(i * 3) % 4],
    }
    for i in range(1, 11)
]

HYPOTHESES = '''
[[hypotheses]]
id = "Hflip"
description = "Rotating the options by one changes the answer."
test = "flip-rate"
arm = "direct"
variants = ["original", "rot1"]
basis = "answer"
min_pp = 1
alpha = 0.05

[[hypotheses]]
id = "Hflipl"
description = "Letters change rarely under a distractor swap."
test = "flip-rate"
arm = "direct"
variants = ["original", "swap"]
basis = "letter"
max_pp = 90
alpha = 0.05

[[hypotheses]]
id = "Hbias"
description = "The bare arm is more position-biased than the task arm."
test = "position-bias"
contrast = ["bare", "direct"]
variant = "original"
sides = "one-sided"
alpha = 0.05

[[hypotheses]]
id = "Hvote"
description = "Voting over four orders beats the mean single order."
test = "voting"
arm = "direct"
variants = ["original", "rot1", "rot2", "swap"]
incomplete = "exclude"
sides = "one-sided"
alpha = 0.05

[[hypotheses]]
id = "Hsc"
description = "A majority of three samples beats one sample."
test = "self-consistency"
arm = "sampled"
variant = "original"
samples = 3
alpha = 0.05

[[hypotheses]]
id = "Hmv"
description = "Rotation changes accuracy (McNemar between variants)."
test = "mcnemar"
arm = "direct"
variants = ["original", "rot1"]
alpha = 0.05
correction = "holm"
family = "mc"

[[hypotheses]]
id = "Hma"
description = "The task text changes accuracy (McNemar between arms)."
test = "mcnemar"
contrast = ["direct", "bare"]
variant = "original"
alpha = 0.05
correction = "holm"
family = "mc"

[[hypotheses]]
id = "Hgee"
description = "The task text raises the odds of a correct answer."
test = "gee"
contrast = ["direct", "bare"]
alpha = 0.05
'''

SPEC = '''[study]
id = "mcq-hyp"
title = "Seed 002 hypotheses"

[models.small]
provider = "anthropic"
id = "claude-haiku-4-5"
max_tokens = 16
temperature = 0.0

[models.large]
provider = "anthropic"
id = "claude-sonnet-4-6"
max_tokens = 16
temperature = 0.0

[components]
task = "prompts/task.txt"

[prompt]
item = "prompts/item.txt"

[variants.original]
kind = "identity"

[variants.rot1]
kind = "rotate"
k = 1

[variants.rot2]
kind = "rotate"
k = 2

[variants.swap]
kind = "swap-distractors"

[variants.s42]
kind = "shuffle"
seed = 42

[variants.s123]
kind = "shuffle"
seed = 123

[arms.direct]
role = "full"
components = ["task"]
variants = ["original", "rot1", "rot2", "swap", "s42", "s123"]

[arms.bare]
role = "vehicle"
components = []
variants = ["original", "rot1"]

[arms.sampled]
role = "factorial"
components = ["task"]
variants = ["original"]
replicates = 3
sampling = { temperature = 0.7 }

[stimuli]
items = "items.jsonl"

[design]
replicates = 1
seed = 5
bootstrap_seed = 6
bootstrap_iterations = 300

[response]
parser = "multiple-choice"
mode = "first-token"
''' + HYPOTHESES + '''
[analysis]
exclude_unparseable = false
'''


def write_study(root: Path, spec: str = SPEC) -> Path:
    """The study's files under ``root``."""
    files = {
        "study.toml": spec,
        "prompts/task.txt": "Answer with the letter of the right option.\n",
        "prompts/item.txt": "Question: {question}\n{options}\n",
        "items.jsonl": "".join(json.dumps(r) + "\n" for r in ITEMS),
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def refused(tmp_path: Path, spec: str) -> str:
    """The SpecError text of ``spec`` (it must be refused)."""
    root = write_study(tmp_path / "bad", spec)
    with pytest.raises(SpecError) as info:
        load_study(root)
    return str(info.value)


def line_of(spec: str, text: str) -> int:
    """The 1-based line of the first line of ``spec`` that holds ``text``."""
    return next(i for i, line in enumerate(spec.splitlines(), 1) if text in line)


# ------------------------------------------------------------------------------ lock


def test_the_study_loads_and_locks_each_kind(tmp_path: Path) -> None:
    study = load_study(write_study(tmp_path / "s"))
    kinds = {h.id: h for h in study.hypotheses}
    assert kinds["Hflip"].locked() == {
        "id": "Hflip", "outcome": "trial_accuracy", "test": "flip-rate", "sides": "two-sided",
        "alpha": 0.05, "min_difference_pp": None, "margin_pp": None, "correction": "none",
        "family": None, "description": "Rotating the options by one changes the answer.",
        "arm": "direct", "variants": ["original", "rot1"], "basis": "answer", "min_pp": 1.0,
    }  # fmt: skip
    assert "contrast" not in kinds["Hvote"].locked()
    assert kinds["Hsc"].locked()["samples"] == 3
    assert kinds["Hvote"].locked()["incomplete"] == "exclude"
    assert kinds["Hgee"].locked()["contrast"] == ["direct", "bare"]
    assert "arm" not in kinds["Hgee"].locked()


def test_self_consistency_at_temperature_zero_is_refused_naming_hypothesis_and_arm(
    tmp_path: Path,
) -> None:
    spec = SPEC.replace("sampling = { temperature = 0.7 }", "sampling = { temperature = 0.0 }")
    text = refused(tmp_path, spec)
    assert re.search(r"study\.toml:\d+: hypotheses\[4\]\.test: self-consistency 'Hsc': arm "
                     r"'sampled' samples at temperature 0\.0 on model 'small'", text), text


def test_a_flip_rate_between_variants_the_arm_does_not_run_is_refused(tmp_path: Path) -> None:
    spec = SPEC.replace('variants = ["original", "rot1"]\nbasis', 'variants = ["original", '
                        '"rot2"]\nbasis').replace('arm = "direct"\nvariants = ["original", "rot2"]',
                                                  'arm = "bare"\nvariants = ["original", "rot2"]')
    text = refused(tmp_path, spec)
    line = line_of(spec, 'variants = ["original", "rot2"]')
    assert f"study.toml:{line}: hypotheses[0].variants: arm 'bare' does not run variant 'rot2'" in (
        text), text


def test_an_unknown_variant_is_refused(tmp_path: Path) -> None:
    text = refused(tmp_path, SPEC.replace('"rot1", "rot2", "swap"]\nincomplete',
                                          '"rot1", "rot9", "swap"]\nincomplete'))
    assert "hypotheses[3].variants: arm 'direct' does not run variant 'rot9'" in text, text


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('parser = "multiple-choice"\nmode = "first-token"', 'parser = "normalized"',
         "hypotheses[0].test: a flip-rate test reads option letters: it needs parser "
         "'multiple-choice' or 'cloze', not 'normalized'"),
        ('basis = "answer"', 'basis = "content"',
         "hypotheses[0].basis: must be 'answer' or 'letter', got 'content'"),
        ("min_pp = 1\n", "", "hypotheses[0].min_pp: a flip-rate rule names exactly one of "
         "min_pp"),
        ('arm = "direct"\nvariants = ["original", "rot1"]\nbasis',
         'contrast = ["direct", "bare"]\nvariants = ["original", "rot1"]\nbasis',
         "hypotheses[0].arm: missing (a flip-rate test names the arm it tests)"),
        ('incomplete = "exclude"', 'incomplete = "skip"',
         "hypotheses[3].incomplete: must be 'exclude' (a counted exclusion) or 'fail'"),
        ("samples = 3", "samples = 4",
         "hypotheses[4].samples: arm 'sampled' runs 3 replicates, fewer than the 4 samples"),
        ("samples = 3", "samples = 1", "hypotheses[4].samples: must be an integer >= 2"),
        ('variant = "original"\nsides = "one-sided"', 'sides = "one-sided"',
         "hypotheses[2].variant: missing: a position-bias test in a study with variants"),
        ('test = "gee"\ncontrast = ["direct", "bare"]',
         'test = "gee"\ncontrast = ["direct", "bare"]\nmin_difference_pp = 5',
         "hypotheses[7].min_difference_pp: does not apply to test 'gee'"),
        ('max_pp = 90', 'max_pp = 90\nsides = "one-sided"',
         "hypotheses[1].sides: does not apply to test 'flip-rate'"),
        ('sides = "one-sided"\nalpha = 0.05\n\n[[hypotheses]]\nid = "Hvote"',
         'sides = "one-sided"\ncorrection = "holm"\nalpha = 0.05\n\n[[hypotheses]]\nid = "Hvote"',
         "hypotheses[2].correction: does not apply to test 'position-bias'"),
        ('id = "Hmv"\ndescription = "Rotation changes accuracy (McNemar between variants)."\n'
         'test = "mcnemar"\narm = "direct"\nvariants = ["original", "rot1"]',
         'id = "Hmv"\ndescription = "x"\ntest = "mcnemar"\narm = "direct"\nvariants = '
         '["original", "rot1", "rot2"]',
         "hypotheses[5].variants: a mcnemar test compares exactly two variants"),
        ('test = "gee"', 'test = "gee"\nbasis = "letter"',
         "hypotheses[7].basis: does not apply to test 'gee' (only to flip-rate)"),
        ('test = "voting"\narm = "direct"', 'test = "voting"\narm = "direct"\ncontrast = '
         '["direct", "bare"]', "hypotheses[3].contrast: a voting test of one arm names 'arm'"),
    ],
)
def test_a_kind_that_does_not_fit_is_refused_naming_line_and_field(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    assert old in SPEC, old
    text = refused(tmp_path, SPEC.replace(old, new, 1))
    assert expected in text, text
    assert re.search(r"study\.toml:\d+: " + re.escape(expected.split(":")[0]), text), text


def test_an_old_kind_refuses_the_new_keys(tmp_path: Path) -> None:
    spec = SPEC.replace('test = "gee"\ncontrast = ["direct", "bare"]',
                        'test = "lmm"\ncontrast = ["direct", "bare"]\nsamples = 3')
    text = refused(tmp_path, spec)
    assert "hypotheses[7].samples: does not apply to test 'lmm' (only to self-consistency)" in (
        text), text




# ------------------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """The study locked, run (simulated), scored, unblinded, analysed and exported, once."""
    base = tmp_path_factory.mktemp("mcqhyp")
    mp = pytest.MonkeyPatch()
    mp.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
    try:
        key = base / "owner.key"
        fixed_key("mcq-hyp/owner").save(key)
        root = write_study(base / "study")
        for step in (
            ("lock", root), ("run", root, "--backend", "simulated"), ("score", root),
            ("unblind", root), ("analyze", root),
        ):  # fmt: skip
            result = CliRunner().invoke(main, [*map(str, step), "--key", str(key)])
            assert result.exit_code == 0, (step, result.output)
        out = base / "archive"
        result = CliRunner().invoke(main, ["export", str(root), str(out), "--key", str(key)])
        assert result.exit_code == 0, result.output
        yield root, out, key
    finally:
        mp.undo()


def results(archive: Path) -> dict[str, dict[str, Any]]:
    """The archive's analysis results by id."""
    listed = json.loads((archive / "analysis" / "results.json").read_text("utf-8"))
    return {r["id"]: r for r in listed}


def test_every_kind_is_computed_with_a_verdict(built: tuple[Path, Path, Path]) -> None:
    got = results(built[1])
    for hid in ("Hflip", "Hflipl", "Hbias", "Hvote", "Hsc", "Hmv", "Hma", "Hgee"):
        for suffix in ("", "@small", "@large"):
            r = got[f"hypothesis.{hid}{suffix}"]
            assert r["status"] == "ok", (hid, suffix, r["error"])
            assert r["verdict"] in ("supported", "not supported"), r
    assert got["descriptive.mcq"]["status"] == "ok"
