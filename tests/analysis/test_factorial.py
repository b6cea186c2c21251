"""Factors and factorial designs (docs/study-spec.md "Factors", docs/analysis.md "Factorial
designs", docs/adr/0007-factorial-designs.md).

One module-scoped 2 x 2 study (an item-scope belief factor that appends a sentence to the
question, a prompt-scope tone factor that adds a component; simulated backend, text items,
the ``normalized`` parser) with an interaction hypothesis and a main-effect hypothesis is
locked, run, scored, unblinded, analysed, exported and verified in process. Tampers then
change a level's text or an expanded arm and must fail naming it. Bad input is refused before
anything is locked, each in its own named test. The runner's and the verifier's GEE are two
implementations of one page and must agree (logistic and Gaussian, 2- and 3-level factors).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers import cli_export, fixed_key, science_skipped
from locations import REPO

from analysis import _factorial as af
from analysis.statistics import REGISTRY
from runner._lock import validate_for_lock
from runner._render import Renderer
from runner.spec import SpecError, check_matched_controls, load_study
from tests.verify.test_archive_tamper import failed, passed, read_events
from tests.verify.test_verify_text_study import forge, relocked_report
from verify import _factorial as vf
from verify import verify_archive

BELIEF = "I am fairly sure the answer is 3."
WRONG = (
    'levels.wrong = { insert = { field = "question", file = "prompts/belief.txt", at = "end" } }'
)
URGENCY = "Please hurry, I am really anxious about this!"

SPEC = """\
[study]
id = "fx-pilot"
title = "Belief and tone, crossed"

[model]
id = "claude-sonnet-4-6"
max_tokens = 64
temperature = 1.0

[components]
task = "prompts/task.txt"
urgency = "prompts/urgency.txt"

[prompt]
item = "prompts/item.txt"

[factors.belief]
scope = "item"
levels.none = {}
levels.wrong = { insert = { field = "question", file = "prompts/belief.txt", at = "end" } }

[factors.tone]
scope = "prompt"
levels.neutral = {}
levels.urgent = { components = ["urgency"] }

[factorial]
base = "F"
factors = ["belief", "tone"]

[arms.F]
role = "factorial"
components = ["task"]

[stimuli]
items = "items.jsonl"

[design]
replicates = 4
seed = 5
bootstrap_seed = 6
bootstrap_iterations = 200

[response]
parser = "normalized"

[[hypotheses]]
id = "H1"
description = "Belief and tone interact."
test = "factorial"
effect = ["belief", "tone"]
alpha = 0.05

[[hypotheses]]
id = "H2"
description = "A wrong belief changes accuracy."
test = "factorial"
effect = ["belief"]
alpha = 0.05

[analysis]
exclude_unparseable = false
"""
ITEMS = [
    {"id": f"q{i}", "question": f"What is {i + 3} plus {2 * i}?", "answer": str(3 * i + 3)}
    for i in range(1, 9)
]


def write_study(
    root: Path,
    spec: str = SPEC,
    items: list[dict[str, Any]] | None = None,
    extra: dict[str, str] | None = None,
) -> Path:
    files = {
        "study.toml": spec,
        "prompts/task.txt": "Answer with the number only.\n",
        "prompts/urgency.txt": URGENCY + "\n",
        "prompts/belief.txt": BELIEF + "\n",
        "prompts/item.txt": "Question: {question}\n",
        "items.jsonl": "".join(json.dumps(r) + "\n" for r in (items or ITEMS)),
        **(extra or {}),
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    base = tmp_path_factory.mktemp("factorial")
    mp = pytest.MonkeyPatch()
    mp.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
    try:
        key = base / "owner.key"
        fixed_key("fx-pilot/owner").save(key)
        root = write_study(base / "study")
        out = base / "archive"
        cli_export(root, key, out)
        yield root, out
    finally:
        mp.undo()


@pytest.fixture
def copy_(built: tuple[Path, Path], tmp_path: Path) -> Path:
    target = tmp_path / "archive"
    shutil.copytree(built[1], target)
    return target


def protocol_of(archive: Path) -> dict[str, Any]:
    return next(e for e in read_events(archive) if e["kind"] == "protocol.locked")["body"]


def test_the_factorial_study_locks_runs_analyses_and_verifies(built: tuple[Path, Path]) -> None:
    _, archive = built
    report = verify_archive(archive)
    assert report.ok, [c for c in report.checks if c.status.name == "FAIL"]
    for name in ("protocol", "schedule", "requests", "rescore", "reanalysis", "report"):
        passed(report, name)
    protocol = protocol_of(archive)
    cells = {a: info["factors"] for a, info in protocol["arms"].items()}
    assert cells == {
        "F.none.neutral": {"belief": "none", "tone": "neutral"},
        "F.none.urgent": {"belief": "none", "tone": "urgent"},
        "F.wrong.neutral": {"belief": "wrong", "tone": "neutral"},
        "F.wrong.urgent": {"belief": "wrong", "tone": "urgent"},
    }
    assert protocol["arms"]["F.wrong.urgent"]["components"] == ["task", "item", "urgency"]
    assert [lv["name"] for lv in protocol["factors"]["belief"]["levels"]] == ["none", "wrong"]
    assert protocol["factors"]["belief"]["levels"][1]["insert"] == {
        "field": "question",
        "text": BELIEF,
        "at": "end",
        "separator": " ",
        "file": "prompts/belief.txt",
    }
    assert "prompts/belief.txt" in protocol["manifest"]
    trials = list(csv.DictReader(io.StringIO((archive / "analysis" / "trials.csv").read_text())))
    assert list(trials[0])[-2:] == ["factor.belief", "factor.tone"]
    for row in trials:
        assert row["arm"] == f"F.{row['factor.belief']}.{row['factor.tone']}"
    results = json.loads((archive / "analysis" / "results.json").read_text())
    results = results if isinstance(results, list) else results["results"]
    by_id = {r["id"]: r for r in results}
    h1, h2 = by_id["hypothesis.H1"], by_id["hypothesis.H2"]
    assert h1["status"] == "ok" and h2["status"] == "ok"
    assert set(REGISTRY["factorial"].schema) <= set(h1["values"]) & set(h2["values"])
    assert h1["values"]["tested"] == ["belief[T.wrong]:tone[T.urgent]"]
    assert h2["values"]["tested"] == ["belief[T.wrong]"]
    assert [t["name"] for t in h1["values"]["terms"]] == [
        "Intercept",
        "belief[T.wrong]",
        "tone[T.urgent]",
        "belief[T.wrong]:tone[T.urgent]",
    ]
    assert h1["values"]["n_obs"] == 128 and h1["values"]["n_clusters"] == 8
    readme = (archive / "README.md").read_text("utf-8")
    assert "effect belief × tone on `trial_accuracy`; factorial; two-sided" in readme
    html = (archive / "analysis" / "report.html").read_text("utf-8")
    assert "belief × tone: Wald chi2" in html


def test_each_cell_renders_its_levels_edits(built: tuple[Path, Path]) -> None:
    root, _ = built
    study = load_study(root, strict=False)
    renderer = Renderer(study)
    text = renderer.body("F.wrong.urgent", None, "q3")["messages"][-1]["content"][-1]["text"]
    assert text == (
        f"Answer with the number only.\n\nQuestion: What is 6 plus 6? {BELIEF}\n\n{URGENCY}\n"
    )
    text = renderer.body("F.none.neutral", None, "q3")["messages"][-1]["content"][-1]["text"]
    assert text == "Answer with the number only.\n\nQuestion: What is 6 plus 6?\n"


# ------------------------------------------------------------------------------ tampers


def test_a_tampered_factor_level_text_fails_naming_it(copy_: Path) -> None:
    """A forger edits the belief sentence in protocol.locked and re-signs everything."""
    events = read_events(copy_)
    protocol = next(e for e in events if e["kind"] == "protocol.locked")
    protocol["body"]["factors"]["belief"]["levels"][1]["insert"]["text"] = "It is surely 4."
    forge(copy_, events)
    with science_skipped():
        report = verify_archive(copy_)
    passed(report, "signatures")
    assert "factors.belief level 'wrong'" in failed(report, "protocol")
    assert "F.wrong." in failed(report, "requests")


def test_a_tampered_level_file_fails_naming_the_trial(copy_: Path) -> None:
    with science_skipped():
        report = relocked_report(copy_, "prompts/belief.txt", lambda b: b.replace(b"3.", b"4."))
    passed(report, "signatures")
    assert "factors.belief level 'wrong'" in failed(report, "protocol")


def test_a_forged_null_level_fails_naming_item_factor_and_level(copy_: Path) -> None:
    """The verifier re-checks the lock's null-arm rule on the locked records."""
    events = read_events(copy_)
    protocol = next(e for e in events if e["kind"] == "protocol.locked")
    protocol["body"]["factors"]["belief"]["levels"][1] = {
        "name": "wrong",
        "replace": {"field": "question", "text": ITEMS[2]["question"]},
    }
    forge(copy_, events)
    with science_skipped():
        reason = failed(verify_archive(copy_), "protocol")
    assert "item 'q3': factor 'belief' level 'wrong' leaves the item's request unchanged" in reason


def test_an_edited_expanded_arm_fails_naming_it(copy_: Path) -> None:
    """A forger drops the urgency component from one cell arm and re-signs everything."""
    events = read_events(copy_)
    protocol = next(e for e in events if e["kind"] == "protocol.locked")
    arms = protocol["body"]["arms"]
    arms["F.wrong.urgent"]["components"] = ["task", "item"]
    arms["F.wrong.urgent"]["sha256"] = arms["F.wrong.neutral"]["sha256"]  # a careful forger
    forge(copy_, events)
    with science_skipped():
        report = verify_archive(copy_)
    passed(report, "signatures")
    assert "arms.F.wrong.urgent.components" in failed(report, "protocol")


# ------------------------------------------------------------------------------ bad input


def problems_of(
    tmp_path: Path,
    spec: str,
    items: list[dict[str, Any]] | None = None,
    extra: dict[str, str] | None = None,
) -> str:
    """Every problem ``ledger lock`` would name (spec, then the lock checks), as one text."""
    root = write_study(tmp_path / "study", spec, items, extra)
    try:
        study = load_study(root)
    except SpecError as exc:
        return str(exc)
    problems = validate_for_lock(study)
    assert problems, "the study was expected to be refused"
    return "\n".join(problems)


def test_a_factor_naming_a_field_the_item_lacks_is_refused(tmp_path: Path) -> None:
    spec = SPEC.replace('field = "question", file', 'field = "history", file')
    out = problems_of(tmp_path, spec)
    assert "items.jsonl:1: item 'q1': factor 'belief' level 'wrong' inserts field 'history'" in out
    assert "which the item lacks" in out


def test_a_level_that_leaves_an_item_unchanged_is_refused(tmp_path: Path) -> None:
    spec = SPEC.replace(
        WRONG,
        'levels.wrong = { replace = { field = "question", text = "What is 6 plus 6?" } }',
    )
    out = problems_of(tmp_path, spec)
    assert (
        "items.jsonl:3: item 'q3': factor 'belief' level 'wrong' leaves the item's request "
        "unchanged (a silent null arm)"
    ) in out
    assert "'q1'" not in out


def test_an_empty_prompt_level_is_refused_as_a_null_arm(tmp_path: Path) -> None:
    out = problems_of(tmp_path, SPEC, extra={"prompts/urgency.txt": "\n"})
    assert "factors.tone.levels.urgent: its components are empty" in out


def test_an_interaction_with_a_factor_not_crossed_is_refused(tmp_path: Path) -> None:
    spec = SPEC.replace('effect = ["belief", "tone"]', 'effect = ["belief", "format"]')
    out = problems_of(tmp_path, spec)
    assert "hypotheses[0].effect: factor 'format' is not crossed by [factorial]" in out
    assert "study.toml:" in out


FRACTION = SPEC.replace(
    """[factorial]
base = "F"
factors = ["belief", "tone"]
""",
    """[factors.task]
scope = "prompt"
levels.plain = {}
levels.careful = { system = ["careful"] }

[factorial]
base = "F"
factors = ["belief", "tone", "task"]
fraction = { generators = ["task = belief*tone"] }
""",
).replace(
    'urgency = "prompts/urgency.txt"',
    'urgency = "prompts/urgency.txt"\ncareful = "prompts/careful.txt"',
)


def test_a_half_fraction_runs_the_generated_cells(tmp_path: Path) -> None:
    spec = FRACTION.replace('effect = ["belief", "tone"]', 'effect = ["tone"]')
    root = write_study(tmp_path / "study", spec, extra={"prompts/careful.txt": "Be careful.\n"})
    study = load_study(root)
    assert validate_for_lock(study) == []
    cells = {a.id: a.factors for a in study.arms.values()}
    # task = belief*tone with the reference level coded -1: I = +belief.tone.task
    assert list(cells) == [
        "F.none.neutral.careful",
        "F.none.urgent.plain",
        "F.wrong.neutral.plain",
        "F.wrong.urgent.careful",
    ]
    assert study.arms["F.wrong.urgent.careful"].system == ("careful",)


def test_an_interaction_aliased_in_a_fraction_is_refused(tmp_path: Path) -> None:
    out = problems_of(tmp_path, FRACTION, extra={"prompts/careful.txt": "Be careful.\n"})
    assert (
        "hypotheses[0].effect: the interaction belief × tone is aliased with task in this design"
    ) in out


def test_unknown_keys_in_factor_tables_are_refused_naming_the_line(tmp_path: Path) -> None:
    spec = SPEC.replace('at = "end" }', 'at = "end", seperator = "\\n" }').replace(
        'base = "F"', 'base = "F"\nfactor = ["belief"]'
    )
    out = problems_of(tmp_path, spec)
    lines = SPEC.splitlines()
    insert_line = next(i for i, t in enumerate(lines, 1) if t.startswith("levels.wrong"))
    assert (
        f"study.toml:{insert_line}: [factors.belief] level wrong insert seperator: unknown key"
    ) in out
    assert "did you mean 'separator'?" in out
    assert "[factorial] factor: unknown key (did you mean 'factors'?)" in out


def test_a_reference_level_with_an_edit_is_refused(tmp_path: Path) -> None:
    spec = SPEC.replace("levels.neutral = {}", 'levels.neutral = { components = ["task"] }')
    out = problems_of(tmp_path, spec)
    assert "factors.tone.levels.neutral: the first level is the reference level" in out


def test_a_level_template_makes_multiple_choice_against_open_ended(tmp_path: Path) -> None:
    items = [dict(r, options=[r["answer"], "1", "2"], answer="A") for r in ITEMS]
    spec = (
        SPEC.replace(
            WRONG,
            WRONG + '\n\n[factors.format]\nscope = "item"\nlevels.open = {}\n'
            'levels.choice = { template = "prompts/mc.txt" }',
        )
        .replace('factors = ["belief", "tone"]', 'factors = ["belief", "tone", "format"]')
        .replace('parser = "normalized"', 'parser = "multiple-choice"')
    )
    root = write_study(
        tmp_path / "study", spec, items, {"prompts/mc.txt": "Question: {question}\n{options}\n"}
    )
    study = load_study(root)
    assert validate_for_lock(study) == []
    renderer = Renderer(study)
    text = renderer.body("F.none.neutral.choice", None, "q1")["messages"][-1]["content"][-1]
    assert text["text"].endswith("Question: What is 4 plus 2?\nA. 6\nB. 1\nC. 2\n")
    text = renderer.body("F.none.neutral.open", None, "q1")["messages"][-1]["content"][-1]
    assert text["text"].endswith("Question: What is 4 plus 2?\n")
    assert "prompts/mc.txt" in study.locked_files()


REMOVE = SPEC.replace(
    WRONG,
    WRONG + '\n\n[factors.history]\nscope = "item"\nlevels.full = {}\n'
    'levels.lacking = { remove = "context", template = "prompts/short.txt" }',
).replace('factors = ["belief", "tone"]', 'factors = ["belief", "tone", "history"]')
CONTEXT_ITEMS = [dict(r, context=f"History {r['id']}.") for r in ITEMS]
CONTEXT_FILES = {
    "prompts/item.txt": "History: {context}\nQuestion: {question}\n",
    "prompts/short.txt": "Question: {question}\n",
}


def test_a_removed_field_and_its_level_template(tmp_path: Path) -> None:
    root = write_study(tmp_path / "study", REMOVE, CONTEXT_ITEMS, CONTEXT_FILES)
    study = load_study(root)
    assert validate_for_lock(study) == []
    renderer = Renderer(study)
    full = renderer.item_block("q2", None, "F.none.neutral.full")
    lacking = renderer.item_block("q2", None, "F.wrong.neutral.lacking")
    assert full == "History: History q2.\nQuestion: What is 5 plus 4?"
    assert lacking == f"Question: What is 5 plus 4? {BELIEF}"
    assert "context" not in renderer.edited_item("F.none.urgent.lacking", "q2").data


def test_a_removed_field_the_template_still_places_is_refused(tmp_path: Path) -> None:
    spec = REMOVE.replace(', template = "prompts/short.txt"', "")
    out = problems_of(tmp_path, spec, CONTEXT_ITEMS, CONTEXT_FILES)
    assert "prompts/item.txt:1:10: slot {context}: item 'q1' has no such field" in out


# ------------------------------------------------------------------------------ differs_from

CLAIMS = """\
[study]
id = "claims"
title = "Exact claims"

[model]
id = "claude-sonnet-4-6"
max_tokens = 16

[components]
task = "prompts/task.txt"
urgency = "prompts/urgency.txt"
calm = "prompts/belief.txt"

[prompt]
item = "prompts/item.txt"

[arms.A]
role = "full"
components = ["task"]

[arms.B]
role = "matched-control"
components = ["task", "urgency"]
differs_from = { arm = "A", CLAIM }

[stimuli]
items = "items.jsonl"

[design]
replicates = 1
seed = 5
bootstrap_seed = 6

[response]
parser = "normalized"

[[hypotheses]]
id = "H1"
description = "x"
contrast = ["A", "B"]
test = "mcnemar"
alpha = 0.05

[analysis]
"""


def claims(tmp_path: Path, claim: str, components: str | None = None) -> list[str]:
    spec = CLAIMS.replace("CLAIM", claim)
    if components is not None:
        spec = spec.replace('components = ["task", "urgency"]', f"components = {components}")
    return check_matched_controls(load_study(write_study(tmp_path / "s", spec)))


def test_an_arm_that_adds_a_component_holds_its_adds_claim(tmp_path: Path) -> None:
    assert claims(tmp_path, 'adds = ["urgency"]') == []


def test_a_by_claim_still_refuses_an_added_component(tmp_path: Path) -> None:
    out = claims(tmp_path, 'by = ["urgency"]')
    assert "lacks [] and adds ['urgency']" in out[0]


def test_each_exact_claim_is_held_exactly(tmp_path: Path) -> None:
    assert (
        "declared to differ from A as it adds ['calm']"
        in claims(tmp_path / "1", 'adds = ["calm"]')[0]
    )
    assert claims(tmp_path / "2", 'replaces = { task = "urgency" }', '["urgency"]') == []
    out = claims(tmp_path / "3", 'replaces = { task = "urgency" }', '["item", "urgency"]')
    assert "with {'task': 'urgency'} replaced in place" in out[0]
    assert claims(tmp_path / "4", 'removes = ["task"]', "[]") == []
    assert "has no component 'calm'" in claims(tmp_path / "5", 'removes = ["calm"]', "[]")[0]


# ------------------------------------------------------------------------------ the model


def synthetic(levels: dict[str, list[str]], family: str, seed: int = 3) -> pd.DataFrame:
    """Trials of every cell x 12 items x 3 reps, with an outcome that depends on the cell."""
    rng = np.random.default_rng(seed)
    rows = []
    names = list(levels)
    import itertools

    for combo in itertools.product(*levels.values()):
        arm = "F." + ".".join(combo)
        shift = sum(
            levels[n].index(c) * (0.4 + 0.3 * i)
            for i, (n, c) in enumerate(zip(names, combo, strict=True))
        )
        for item in range(12):
            u = rng.normal(0, 0.5)
            for rep in range(3):
                eta = -0.2 + shift + u
                y = (
                    float(rng.random() < 1 / (1 + np.exp(-eta)))
                    if family == "binomial"
                    else float(eta + rng.normal(0, 1))
                )
                rows.append(
                    {
                        "arm": arm,
                        "model": "",
                        "stimulus": f"i{item}",
                        "rep": rep + 1,
                        "accuracy": y,
                        "score": y,
                    }
                )
    return pd.DataFrame(rows)


def plan_for(levels: dict[str, list[str]], effects: list[list[str]]) -> dict[str, Any]:
    import itertools

    arms = {
        "F." + ".".join(c): {"factors": dict(zip(levels, c, strict=True))}
        for c in itertools.product(*levels.values())
    }
    return {
        "factors": {
            n: {"scope": "item", "levels": [{"name": v} for v in lv]} for n, lv in levels.items()
        },
        "factorial": {"factors": list(levels)},
        "arms": arms,
        "hypotheses": [
            {"id": f"H{i}", "test": "factorial", "effect": e} for i, e in enumerate(effects)
        ],
    }


@pytest.mark.parametrize("family", ["binomial", "gaussian"])
def test_the_runner_and_the_verifier_fit_the_same_gee(
    family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 3 x 2 design, a joint (df 2) interaction test; the Gaussian family via the table."""
    levels = {"belief": ["none", "weak", "strong"], "tone": ["neutral", "urgent"]}
    plan = plan_for(levels, [["belief", "tone"], ["belief"]])
    frame = synthetic(levels, family)
    if family == "gaussian":  # the outcome table is the only place an outcome is added
        monkeypatch.setitem(af.OUTCOMES, "score_outcome", ("score", "gaussian"))
        monkeypatch.setitem(vf.OUTCOMES, "score_outcome", ("score", "gaussian"))
    for h in plan["hypotheses"]:
        h["outcome"] = "score_outcome" if family == "gaussian" else "trial_accuracy"
        mine = af.factorial_values(frame, plan, h)
        theirs = vf.factorial_values(frame.to_dict("records"), plan, h)
        assert mine["gee_family"] == theirs["gee_family"] == family
        assert mine["tested"] == theirs["tested"]
        assert mine["df"] == theirs["df"] == 2  # 2 x 1 interaction columns; 2 belief dummies
        assert mine["chi2"] == pytest.approx(theirs["chi2"], rel=1e-4)
        assert mine["p"] == pytest.approx(theirs["p"], rel=1e-3)
        for a, b in zip(mine["terms"], theirs["terms"], strict=True):
            assert a["name"] == b["name"]
            assert a["estimate"] == pytest.approx(b["estimate"], rel=1e-4, abs=1e-8)
            assert a["se"] == pytest.approx(b["se"], rel=1e-4)
        assert mine["dependence"] == pytest.approx(theirs["dependence"], rel=1e-3, abs=1e-6)


@pytest.mark.parametrize("case", ["ceiling-model", "copied-model", "separated-level"])
def test_a_gee_the_data_cannot_fit_is_not_applicable_on_both_sides(case: str) -> None:
    """Issue 31: separation (a model or a level at the ceiling) and a degenerate term (two
    models answering alike) make the factorial test not applicable on both sides, by the rule
    of docs/mcq-statistics.md §8, never a failure one side has and the other not."""
    from analysis._stats import NotApplicableError

    levels = {"belief": ["none", "strong"], "tone": ["neutral", "urgent"]}
    plan = plan_for(levels, [["belief"]])
    one = synthetic(levels, "binomial")
    other = one.assign(model="b")
    if case == "ceiling-model":
        other = other.assign(accuracy=1.0)
    frame = pd.concat([one.assign(model="a"), other], ignore_index=True)
    if case == "separated-level":
        frame = one.assign(model="")
        frame.loc[frame["arm"].str.endswith(".urgent"), "accuracy"] = 0.0
    h = {**plan["hypotheses"][0], "outcome": "trial_accuracy"}
    models = ("a", "b") if case != "separated-level" else ()
    with pytest.raises(NotApplicableError) as mine:
        af.factorial_values(frame, plan, h, models)
    with pytest.raises(vf.FactorialNotApplicable) as theirs:
        vf.factorial_values(frame.to_dict("records"), plan, h, models)
    word = "degenerate" if case == "copied-model" else "separation"
    assert word in str(mine.value) and word in str(theirs.value)


# ------------------------------------------------------------------------------ slow: seed 001


JUDGED = """\
[study]
id = "fx-judged"
title = "Belief x tone x format, judged, two target models"

[models.target_a]
provider = "anthropic"
id = "claude-sonnet-4-6"
max_tokens = 64
temperature = 1.0

[models.target_b]
provider = "anthropic"
id = "claude-haiku-4-5"
max_tokens = 64
temperature = 1.0

[models.judge_a]
provider = "anthropic"
id = "claude-opus-4-1"
max_tokens = 16
temperature = 0.0

[models.judge_b]
provider = "anthropic"
id = "claude-haiku-4-5-judge"
max_tokens = 16
temperature = 0.0

[components]
task = "prompts/task.txt"
urgency = "prompts/urgency.txt"
judge_system = "prompts/judge-system.txt"

[prompt]
item = "prompts/item.txt"

[steps.rewrite]
on = "item"
models = ["judge_a"]
template = "prompts/rewrite.txt"
parser = "text"
on_unparseable = { retry = 2, then = "exclude" }

[steps.judge]
on = "trial"
models = ["judge_a", "judge_b"]
template = "prompts/judge.txt"
system = ["judge_system"]
parser = "label"
labels = ["correct", "incorrect"]
aggregate = "majority"
on_unparseable = { retry = 1, then = "exclude" }

[factors.belief]
scope = "item"
levels.none = {}
levels.weak = { insert = { field = "context", text = "Maybe it is nothing serious.", at = "end" } }
levels.strong = { insert = { field = "context", text = "I am sure it is gout.", at = "start" } }

[factors.tone]
scope = "prompt"
levels.neutral = {}
levels.urgent = { components = ["urgency"] }

[factors.voice]
scope = "item"
levels.exam = {}
levels.patient = { template = "prompts/patient.txt" }

[factorial]
base = "F"
factors = ["belief", "tone", "voice"]

[arms.F]
role = "factorial"
components = ["task"]
models = ["target_a", "target_b"]

[stimuli]
items = "data/items.jsonl"

[design]
replicates = 2
seed = 6
bootstrap_seed = 6
bootstrap_iterations = 200

[response]
parser = "judge:judge"

[analysis]
exclude_unparseable = true

[[hypotheses]]
id = "H1"
description = "Belief and tone interact (a joint test over two belief levels)."
test = "factorial"
effect = ["belief", "tone"]
alpha = 0.05

[[hypotheses]]
id = "H2"
description = "The patient's voice changes correctness."
test = "factorial"
effect = ["voice"]
alpha = 0.05
correction = "holm"
family = "main"

[[hypotheses]]
id = "H3"
description = "Belief changes correctness."
test = "factorial"
effect = ["belief"]
alpha = 0.05
correction = "holm"
family = "main"
"""


@pytest.mark.slow
def test_a_judged_factorial_study_with_two_models_runs_and_verifies_by_subprocess(
    tmp_path: Path,
) -> None:
    """Seed 001's pilot shape, every command a real ``ledger`` subprocess.

    Content x tone x format factors on open-ended answers, a judge scoring correctness, a
    recorded rewrite step read by one level's template, two target models (the model a factor
    of the GEE).
    """
    import subprocess
    import sys

    from steps_study import ITEMS as CASES
    from steps_study import PROMPTS

    root = tmp_path / "study"
    files = {
        "study.toml": JUDGED,
        "data/items.jsonl": "".join(json.dumps(r) + "\n" for r in CASES),
        "prompts/urgency.txt": URGENCY + "\n",
        "prompts/item.txt": "Question: {question}\nCase: {context}\n",
        "prompts/patient.txt": "Question: {question}\nIn my own words: {steps.rewrite}\n",
        **{f"prompts/{k}": v for k, v in PROMPTS.items() if k != "item.txt"},
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    key = tmp_path / "owner.key"
    fixed_key("fx-judged/owner").save(key)
    env = {**os.environ, "PROMPT_LEDGER_HOME": str(tmp_path / "home")}

    def ledger(*args: str | Path) -> str:
        done = subprocess.run(
            [sys.executable, "-c", "from ledger.cli import main; main()", *map(str, args)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    shown = ledger("arms", root, "--json")
    arms = json.loads(shown)["arms"]
    assert len(arms) == 3 * 2 * 2 and {"factors"} <= set(arms[0])
    for step in (
        ("lock",),
        ("run", "--backend", "simulated"),
        ("score",),
        ("unblind",),
        ("analyze",),
    ):
        ledger(step[0], root, *step[1:], "--key", key)
    out = tmp_path / "archive"
    ledger("export", root, out, "--key", key)
    verified = ledger("verify", out)
    assert "VERIFIED" in verified
    report = verify_archive(out)
    for name in ("requests", "steps", "rescore", "reanalysis"):
        passed(report, name)
    results = json.loads((out / "analysis" / "results.json").read_text())
    results = results if isinstance(results, list) else results["results"]
    tested = {r["id"]: r for r in results if r.get("hypothesis")}
    assert len(tested) == 9  # H1-H3 pooled, then per model (the model column left out)
    assert all(r["status"] == "ok" for r in tested.values()), tested
    h1 = tested["hypothesis.H1"]
    assert h1["values"]["df"] == 2
    assert "model[T.target_b]" in [t["name"] for t in h1["values"]["terms"]]
    assert "model[T.target_b]" not in [
        t["name"] for t in tested["hypothesis.H1@target_a"]["values"]["terms"]
    ]
    requested = [e for e in read_events(out) if e["kind"] == "trial.requested"]
    assert {e["body"]["arm"] for e in requested} == {a["id"] for a in arms}


@pytest.mark.slow
def test_bench_factorial_quick_reports_every_figure() -> None:
    import subprocess
    import sys

    bench = REPO / "benchmarks" / "bench_factorial.py"
    result = subprocess.run(
        [sys.executable, str(bench), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    for label in (
        "12 cells, 2400 trials; lock problems 0",
        "lock checks",
        "render every request",
        "factorial GEE, statsmodels",
        "verifier's solver",
        "ratio verifier",
        "load average at end",
    ):
        assert label in result.stdout, result.stdout
