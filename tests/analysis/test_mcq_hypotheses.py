"""Seed 002's statistics as registered hypotheses (docs/study-spec.md, docs/mcq-statistics.md §11).

One module-scoped study (10 items, three arms, four option orders, two models, a sampling arm
with three replicates) is locked, run on the simulated backend, scored, unblinded and analysed
once; the tests read its results, recompute them with scipy/statsmodels, check the verifier's
re-derivation and its refusal of an edited, re-signed value, and check each bad input at lock.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import shutil
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from helpers import fixed_key, science_skipped
from mcq_tables import records
from multitest_ref import multipletests
from scipy import stats as sps
from statsmodels.genmod.cov_struct import Exchangeable
from statsmodels.genmod.families import Binomial
from statsmodels.genmod.generalized_estimating_equations import GEE
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.proportion import proportion_confint

from analysis._analyze import Dataset, _clean, hypothesis_results, load_dataset, models
from analysis.mcq import _stats as mcq
from analysis.mcq._rows import mcq_trials
from analysis.statistics import REGISTRY
from analysis.statistics import decide as decide_interval
from analysis.statistics import seed002_values as hypothesis_values
from ledger import Ledger
from ledger.cli import main
from runner._lock import ledger_path, protocol_event
from runner.spec import SpecError, load_study
from tests.verify.test_archive_tamper import failed, passed, read_events
from tests.verify.test_verify_text_study import forge
from verify import _mcq as vm
from verify import _mcqhyp as vmh
from verify import verify_archive
from verify._report import Status
from verify._science import science_checks
from verify._statistics import mcq_values_from_rows

ITEMS = [
    {
        "id": f"q{i:02d}",
        "question": f"Which finding best fits clinical vignette number {i}?",
        "options": [f"finding {i}-{k}" for k in range(4)],
        "answer": "ABCD"[(i * 3) % 4],
    }
    for i in range(1, 11)
]

HYPOTHESES = """
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
variants = ["original", "rot1", "swap", "s42"]
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
"""

SPEC = (
    """[study]
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
variants = ["original", "rot1", "swap", "s42", "s123"]

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
"""
    + HYPOTHESES
    + """
[reviews.bare_hurt]
description = "Cases where the bare prompt was wrong and the task prompt right, for coding."
failed = { arm = "bare", variant = "original" }
succeeded = { arm = "direct" }
model = "small"
n = 3
seed = 7

[analysis]
exclude_unparseable = false
"""
)


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
        "id": "Hflip",
        "outcome": "trial_accuracy",
        "test": "flip-rate",
        "sides": "two-sided",
        "alpha": 0.05,
        "min_difference_pp": None,
        "margin_pp": None,
        "correction": "none",
        "family": None,
        "description": "Rotating the options by one changes the answer.",
        "arm": "direct",
        "variants": ["original", "rot1"],
        "basis": "answer",
        "min_pp": 1.0,
    }
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
    assert re.search(
        r"study\.toml:\d+: hypotheses\[4\]\.test: self-consistency 'Hsc': arm "
        r"'sampled' samples at temperature 0\.0 on model 'small'",
        text,
    ), text


def test_a_flip_rate_between_variants_the_arm_does_not_run_is_refused(tmp_path: Path) -> None:
    spec = SPEC.replace(
        'variants = ["original", "rot1"]\nbasis', 'variants = ["original", "rot2"]\nbasis'
    ).replace(
        'arm = "direct"\nvariants = ["original", "rot2"]',
        'arm = "bare"\nvariants = ["original", "rot2"]',
    )
    text = refused(tmp_path, spec)
    line = line_of(spec, 'variants = ["original", "rot2"]')
    assert f"study.toml:{line}: hypotheses[0].variants: arm 'bare' does not run variant 'rot2'" in (
        text
    ), text


def test_an_unknown_variant_is_refused(tmp_path: Path) -> None:
    text = refused(
        tmp_path,
        SPEC.replace('"rot1", "swap", "s42"]\nincomplete', '"rot1", "rot9", "s42"]\nincomplete'),
    )
    assert "hypotheses[3].variants: arm 'direct' does not run variant 'rot9'" in text, text


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            'parser = "multiple-choice"\nmode = "first-token"',
            'parser = "normalized"',
            "hypotheses[0].test: a flip-rate test reads option letters: it needs parser "
            "'multiple-choice' or 'cloze', not 'normalized'",
        ),
        (
            'basis = "answer"',
            'basis = "content"',
            "hypotheses[0].basis: must be 'answer' or 'letter', got 'content'",
        ),
        ("min_pp = 1\n", "", "hypotheses[0].min_pp: a flip-rate rule names exactly one of min_pp"),
        (
            'arm = "direct"\nvariants = ["original", "rot1"]\nbasis',
            'contrast = ["direct", "bare"]\nvariants = ["original", "rot1"]\nbasis',
            "hypotheses[0].arm: missing (a flip-rate test names the arm it tests)",
        ),
        (
            'incomplete = "exclude"',
            'incomplete = "skip"',
            "hypotheses[3].incomplete: must be 'exclude' (a counted exclusion) or 'fail'",
        ),
        (
            "samples = 3",
            "samples = 4",
            "hypotheses[4].samples: arm 'sampled' runs 3 replicates, fewer than the 4 samples",
        ),
        ("samples = 3", "samples = 1", "hypotheses[4].samples: must be an integer >= 2"),
        (
            'variant = "original"\nsides = "one-sided"',
            'sides = "one-sided"',
            "hypotheses[2].variant: missing: a position-bias test in a study with variants",
        ),
        (
            'test = "gee"\ncontrast = ["direct", "bare"]',
            'test = "gee"\ncontrast = ["direct", "bare"]\nmin_difference_pp = 5',
            "hypotheses[7].min_difference_pp: does not apply to test 'gee'",
        ),
        (
            "max_pp = 90",
            'max_pp = 90\nsides = "one-sided"',
            "hypotheses[1].sides: does not apply to test 'flip-rate'",
        ),
        (
            'sides = "one-sided"\nalpha = 0.05\n\n[[hypotheses]]\nid = "Hvote"',
            'sides = "one-sided"\ncorrection = "holm"\nalpha = 0.05\n\n'
            '[[hypotheses]]\nid = "Hvote"',
            "hypotheses[2].correction: does not apply to test 'position-bias'",
        ),
        (
            'id = "Hmv"\ndescription = "Rotation changes accuracy (McNemar between variants)."\n'
            'test = "mcnemar"\narm = "direct"\nvariants = ["original", "rot1"]',
            'id = "Hmv"\ndescription = "x"\ntest = "mcnemar"\narm = "direct"\nvariants = '
            '["original", "rot1", "rot2"]',
            "hypotheses[5].variants: a mcnemar test compares exactly two variants",
        ),
        (
            'test = "gee"',
            'test = "gee"\nbasis = "letter"',
            "hypotheses[7].basis: does not apply to test 'gee' (only to flip-rate)",
        ),
        (
            'test = "voting"\narm = "direct"',
            'test = "voting"\narm = "direct"\ncontrast = ["direct", "bare"]',
            "hypotheses[3].contrast: a voting test of one arm names 'arm'",
        ),
    ],
)
def test_a_kind_that_does_not_fit_is_refused_naming_line_and_field(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    assert old in SPEC, old
    text = refused(tmp_path, SPEC.replace(old, new, 1))
    assert expected in text, text
    assert re.search(r"study\.toml:\d+: " + re.escape(expected.split(":")[0]), text), text


def test_a_mcnemar_at_a_variant_one_arm_does_not_run_is_refused(tmp_path: Path) -> None:
    spec = SPEC.replace(
        'contrast = ["direct", "bare"]\nvariant = "original"',
        'contrast = ["direct", "bare"]\nvariant = "swap"',
    )
    text = refused(tmp_path, spec)
    line = line_of(spec, 'variant = "swap"')
    assert f"study.toml:{line}: hypotheses[6].variant: arm 'bare' does not run variant 'swap'" in (
        text
    ), text


def test_an_old_kind_refuses_the_new_keys(tmp_path: Path) -> None:
    spec = SPEC.replace(
        'test = "gee"\ncontrast = ["direct", "bare"]',
        'test = "lmm"\ncontrast = ["direct", "bare"]\nsamples = 3',
    )
    text = refused(tmp_path, spec)
    assert "hypotheses[7].samples: does not apply to test 'lmm' (only to self-consistency)" in (
        text
    ), text


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
            ("lock", root),
            ("run", root, "--backend", "simulated"),
            ("score", root),
            ("unblind", root),
            ("analyze", root),
        ):
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
            assert set(REGISTRY[r["test"]].schema) <= set(r["values"]), (hid, r["test"])
    assert got["descriptive.mcq"]["status"] == "ok"


def test_the_archive_verifies(built: tuple[Path, Path, Path]) -> None:
    report = verify_archive(built[1])
    assert report.ok, [(c.name, c.reason) for c in report.checks if c.status.name == "FAIL"]


# ------------------------------------------------------------------------------ the numbers


@pytest.fixture(scope="module")
def data(built: tuple[Path, Path, Path]) -> tuple[Dataset, dict[str, Any], pd.DataFrame]:
    """The study's unblinded dataset, its locked plan and its seed-002 trials table."""
    with Ledger.open(ledger_path(built[0]), readonly=True) as log:
        event = protocol_event(log)
        assert event is not None
        plan = event.body
        ds = load_dataset(
            log,
            exclude_unparseable=False,
            parser="multiple-choice",
            models=models(plan),
            variants=True,
        )
    return ds, plan, mcq_trials(ds)


def pooled_reps(t: pd.DataFrame) -> pd.DataFrame:
    """docs/mcq-statistics.md §11: pooled over models, rep + R * (model index)."""
    top = int(t["rep"].max())
    return t.assign(rep=t["rep"] + top * t["model"].map({"small": 0, "large": 1}))


def cell(t: pd.DataFrame, arm: str, variant: str) -> pd.DataFrame:
    return t[(t["arm"] == arm) & (t["variant"] == variant)]


def quantiles(values: Any, conf: float) -> tuple[float, float]:
    lo, hi = np.quantile(np.asarray(values), [round((1 - conf) / 2, 12), round((1 + conf) / 2, 12)])
    return float(lo), float(hi)


def test_mcnemar_kinds_match_statsmodels_and_holm(
    built: tuple[Path, Path, Path], data: tuple[Dataset, dict[str, Any], pd.DataFrame]
) -> None:
    got = results(built[1])
    t = pooled_reps(data[2])
    raw = []
    for hid, (a, b) in {
        "Hmv": (("direct", "original"), ("direct", "rot1")),
        "Hma": (("direct", "original"), ("bare", "original")),
    }.items():
        m = cell(t, *a).merge(cell(t, *b), on=["item", "rep"], suffixes=("_a", "_b"))
        xa, xb = m["correct_a"].to_numpy(bool), m["correct_b"].to_numpy(bool)
        n10, n01 = int((xa & ~xb).sum()), int((~xa & xb).sum())
        table = [[int((xa & xb).sum()), n10], [n01, int((~xa & ~xb).sum())]]
        ref = sm_mcnemar(table, exact=n10 + n01 < 25, correction=True)
        v = got[f"hypothesis.{hid}"]["values"]
        assert (v["n_pairs"], v["b_count"], v["c_count"]) == (len(m), n10, n01)
        assert v["p_raw"] == pytest.approx(ref.pvalue, rel=1e-12)
        assert v["estimate"] == pytest.approx(xa.mean() - xb.mean(), abs=1e-12)
        raw.append(v["p_raw"])
    holm = multipletests(raw, method="holm")[1]
    assert [got[f"hypothesis.{h}"]["values"]["p_adjusted"] for h in ("Hmv", "Hma")] == (
        pytest.approx(list(holm), rel=1e-12)
    )


def test_wilson_cells_and_the_seed_interval_match_statsmodels_and_scipy(
    built: tuple[Path, Path, Path], data: tuple[Dataset, dict[str, Any], pd.DataFrame]
) -> None:
    values = results(built[1])["descriptive.mcq"]["values"]
    t = data[2]
    assert len(values["cells"]) == t.groupby(["arm", "variant", "model"]).ngroups
    for c in values["cells"]:
        rows = t[
            (t["arm"] == c["arm"]) & (t["variant"] == c["variant"]) & (t["model"] == c["model"])
        ]
        k, n = int(rows["correct"].sum()), len(rows)
        lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
        assert (c["n"], c["correct"]) == (n, k)
        assert (c["lower"], c["upper"]) == (
            pytest.approx(lo, abs=1e-12),
            pytest.approx(hi, abs=1e-12),
        )
    seeds = {(s["arm"], s["model"]): s for s in values["seeds"]}
    assert set(seeds) == {("direct", "small"), ("direct", "large")}
    for (arm, model), s in seeds.items():
        acc = [cell(t[t["model"] == model], arm, v)["correct"].mean() for v in ("s123", "s42")]
        lo, hi = sps.t.interval(0.95, 1, loc=np.mean(acc), scale=sps.sem(acc))
        assert s["summary"]["seeds"] == ["123", "42"]
        if np.std(acc) > 0:
            assert (s["summary"]["lower"], s["summary"]["upper"]) == (
                pytest.approx(lo, rel=1e-9),
                pytest.approx(hi, rel=1e-9),
            )


def test_gee_matches_statsmodels(
    built: tuple[Path, Path, Path], data: tuple[Dataset, dict[str, Any], pd.DataFrame]
) -> None:
    v = results(built[1])["hypothesis.Hgee"]["values"]
    t = data[2]
    sub = t[t["arm"].isin(["direct", "bare"]) & t["variant"].isin(["original", "rot1"])]
    exog = np.column_stack(
        [
            np.ones(len(sub)),
            (sub["arm"] == "direct").to_numpy(float),
            (sub["model"] == "large").to_numpy(float),
            (sub["variant"] == "rot1").to_numpy(float),
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = GEE(
            sub["correct"].to_numpy(float),
            exog,
            groups=pd.factorize(sub["item"], sort=True)[0],
            family=Binomial(),
            cov_struct=Exchangeable(),
        ).fit()
    assert v["fit"]["factor_references"] == ["small", "original"]  # the first of each order
    assert [t_["name"] for t_ in v["fit"]["terms"]] == [
        "Intercept",
        "arm[T.direct]",
        "model[T.large]",
        "variant[T.rot1]",
    ]
    assert v["estimate"] == pytest.approx(float(ref.params[1]), rel=1e-9)
    assert v["p_raw"] == pytest.approx(float(ref.pvalues[1]), rel=1e-9)


def test_flip_rates_and_their_interval_by_hand(
    built: tuple[Path, Path, Path], data: tuple[Dataset, dict[str, Any], pd.DataFrame]
) -> None:
    got = results(built[1])
    t = pooled_reps(data[2])
    for hid, other, basis in (("Hflip", "rot1", "answer"), ("Hflipl", "swap", "letter")):
        v = got[f"hypothesis.{hid}"]["values"]
        m = cell(t, "direct", "original").merge(cell(t, "direct", other), on=["item", "rep"])
        flips = (m[f"{basis}_x"].fillna("-") != m[f"{basis}_y"].fillna("-")).to_numpy(float)
        assert (v["flips"], v["n_pairs"]) == (int(flips.sum()), len(flips))
        items = sorted(set(m["item"]))
        sums = np.array([flips[(m["item"] == i).to_numpy()].sum() for i in items])
        counts = np.array([(m["item"] == i).sum() for i in items], dtype=float)
        rng = np.random.Generator(np.random.PCG64(6))
        draw = rng.integers(0, len(items), size=(300, len(items)))
        conf = 1 - 2 * 0.05
        assert v["conf"] == conf
        assert (v["lower"], v["upper"]) == quantiles(sums[draw].sum(1) / counts[draw].sum(1), conf)
    assert got["hypothesis.Hflip"]["decided_by"]["rule"] == "90% interval lower bound > 1 pp"


def bias(rows: pd.DataFrame) -> float:
    pred = rows["letter"].dropna().value_counts(normalize=True)
    truth = rows["key"].value_counts(normalize=True)
    return 0.5 * sum(abs(pred.get(x, 0.0) - truth.get(x, 0.0)) for x in "ABCD")


def test_position_bias_and_its_paired_bootstrap_by_hand(
    built: tuple[Path, Path, Path], data: tuple[Dataset, dict[str, Any], pd.DataFrame]
) -> None:
    v = results(built[1])["hypothesis.Hbias"]["values"]
    t = data[2]
    a, b = cell(t, "bare", "original"), cell(t, "direct", "original")
    assert v["estimate"] == pytest.approx(bias(a) - bias(b), abs=1e-12)
    items = sorted(set(a["item"]) | set(b["item"]))

    def tallies(rows: pd.DataFrame) -> dict[str, tuple[Counter[str], Counter[str]]]:
        return {
            i: (
                Counter(rows.loc[rows["item"] == i, "letter"].dropna()),
                Counter(rows.loc[rows["item"] == i, "key"]),
            )
            for i in items
        }

    def tvd(pred: Counter[str], key: Counter[str]) -> float:
        n_p, n_k = sum(pred.values()), sum(key.values())
        return 0.5 * sum(abs(pred[x] / n_p - key[x] / n_k) for x in "ABCD")

    ta, tb = tallies(a), tallies(b)
    rng = np.random.Generator(np.random.PCG64(6))
    draw = rng.integers(0, len(items), size=(300, len(items)))
    reps = []
    for row in draw:
        sums: list[tuple[Counter[str], Counter[str]]] = [
            (Counter(), Counter()),
            (Counter(), Counter()),
        ]
        for i in row:
            for (pred, key), tally in zip(sums, (ta, tb), strict=True):
                pred.update(tally[items[i]][0])
                key.update(tally[items[i]][1])
        if all(sum(pred.values()) and sum(key.values()) for pred, key in sums):
            reps.append(tvd(*sums[0]) - tvd(*sums[1]))
    lower, upper = quantiles(reps, 1 - 2 * 0.05)
    assert (v["lower"], v["upper"]) == (
        pytest.approx(lower, abs=1e-12),
        pytest.approx(upper, abs=1e-12),
    )


def majority(answers: list[Any]) -> Any:
    """Most common parsed answer; ties go to the one voted first (the documented rule)."""
    counts: dict[Any, int] = {}
    for x in answers:
        if x is not None:
            counts[x] = counts.get(x, 0) + 1
    if not counts:
        return None
    top = max(counts.values())
    return next(x for x in answers if x is not None and counts[x] == top)


def test_voting_names_its_trials_and_gains_over_the_mean_order(
    built: tuple[Path, Path, Path], data: tuple[Dataset, dict[str, Any], pd.DataFrame]
) -> None:
    v = results(built[1])["hypothesis.Hvote"]["values"]
    t = pooled_reps(data[2])
    orders = ["original", "rot1", "swap", "s42"]
    gains = []
    answers = {(x["item"], x["rep"]): x for x in v["vote"]["answers"]}
    for (item, rep), group in t[t["arm"] == "direct"].groupby(["item", "rep"]):
        by = {r["variant"]: r for r in group.to_dict("records")}
        rows = [by[o] for o in orders]
        x = answers[(item, rep)]
        assert x["trials"] == [r["trial"] for r in rows]
        assert x["answer"] == majority([r["answer"] for r in rows])
        gains.append(float(x["correct"]) - np.mean([r["correct"] for r in rows]))
    assert v["n_groups"] == len(gains) == 20 and v["excluded"] == 0
    assert v["estimate"] == pytest.approx(np.mean(gains), abs=1e-12)


def test_self_consistency_names_its_samples(
    built: tuple[Path, Path, Path], data: tuple[Dataset, dict[str, Any], pd.DataFrame]
) -> None:
    v = results(built[1])["hypothesis.Hsc"]["values"]
    t = data[2]
    assert [r["temperature"] for r in v["results"]] == [0.7, 0.7]
    assert [r["condition"]["model"] for r in v["results"]] == ["small", "large"]
    for r in v["results"]:
        for x in r["answers"]:
            rows = t[
                (t["arm"] == "sampled")
                & (t["model"] == r["condition"]["model"])
                & (t["item"] == x["item"])
            ].sort_values("rep")
            assert x["trials"] == rows["trial"].tolist()
            assert x["answer"] == majority(rows["answer"].tolist())


# ------------------------------------------------------------------------------ bad input


def without(ds: Dataset, trial: str) -> Dataset:
    """``ds`` as if ``trial`` had been given up (no score)."""
    return replace(
        ds,
        trials=ds.trials[ds.trials["trial"] != trial],
        items=ds.items[ds.items["trial"] != trial],
        given_up=(trial,),
    )


@pytest.mark.parametrize(
    ("hid", "trial"),
    [("Hvote", "direct|large|q03|swap|1"), ("Hsc", "sampled|small|q03|original|2")],
)
def test_an_incomplete_group_is_a_counted_exclusion_or_a_failure_as_declared(
    data: tuple[Dataset, dict[str, Any], pd.DataFrame], hid: str, trial: str
) -> None:
    ds, plan, _ = data
    assert trial in set(ds.trials["trial"])
    short = without(ds, trial)
    h = next(x for x in plan["hypotheses"] if x["id"] == hid)
    one = {**plan, "hypotheses": [h]}
    [r] = hypothesis_results(short, one, None)
    assert r.status == "ok" and r.values is not None
    assert r.values["excluded"] == 1
    excluded = (
        r.values["vote"]["exclusions"]
        if hid == "Hvote"
        else [e for x in r.values["results"] for e in x["exclusions"]]
    )
    [e] = excluded
    assert e["item"] == "q03" and trial not in e["trials"] and e["reason"].startswith("incomplete")
    # the verifier's mirror counts the same exclusion
    pooled, by_model = vmh._tables(VerifyDs(short), plan)
    assert mcq_values_from_rows(pooled, by_model, plan, h, ["small", "large"])["excluded"] == 1
    [failed_] = hypothesis_results(
        short, {**plan, "hypotheses": [{**h, "incomplete": "fail"}]}, None
    )
    assert failed_.status == "failed" and failed_.verdict == "not computed"
    assert "'q03'" in str(failed_.error), failed_.error


class VerifyDs:
    """The verifier's view of a dataset: plain dict rows (verify/_science.py's _Dataset)."""

    def __init__(self, ds: Dataset) -> None:
        self.trials = ds.trials.to_dict("records")
        self.items = [
            {k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.items()}
            for r in ds.items.to_dict("records")
        ]
        self.models = list(ds.models)
        self.several_models = ds.several_models


# ------------------------------------------------------------------------------ tampers


def edit_result(root: Path, result_id: str, change: Any) -> tuple[list[dict[str, Any]], int]:
    """Apply ``change`` to one analysis.result body, rewrite results.json; (events, seq)."""
    events = read_events(root)
    event = next(
        e for e in events if e["kind"] == "analysis.result" and e["body"]["id"] == result_id
    )
    change(event["body"])
    listed = [e["body"] | {"seq": e["seq"]} for e in events if e["kind"] == "analysis.result"]
    (root / "analysis" / "results.json").write_text(json.dumps(listed, indent=2), "utf-8")
    path = root / "ledger" / "events.jsonl"  # the line itself (forge() re-signs it)
    lines = []
    for line in path.read_text("utf-8").splitlines():
        record = json.loads(line)
        if record["envelope"]["seq"] == event["seq"]:
            record["envelope"] = event
            line = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        lines.append(line)
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return events, int(event["seq"])


@pytest.fixture
def copied(built: tuple[Path, Path, Path], tmp_path: Path) -> Path:
    target = tmp_path / "archive"
    shutil.copytree(built[1], target)
    return target


def test_an_edited_re_signed_flip_rate_fails_naming_the_hypothesis(copied: Path) -> None:
    events, _ = edit_result(
        copied, "hypothesis.Hflip", lambda b: b["values"].__setitem__("rate", 0.35)
    )
    forge(copied, events)
    report = verify_archive(copied)
    passed(report, "signatures")
    reason = failed(report, "reanalysis")
    assert reason.startswith("hypothesis.Hflip values.rate: recorded 0.35, recomputed 0.6"), reason


def _vote_trial(b: dict[str, Any]) -> None:
    answer = b["values"]["vote"]["answers"][0]
    answer["trials"] = [*answer["trials"][:-1], "direct|large|q09|s42|1"]


TAMPERS = [
    ("hypothesis.Hvote", "values.vote.answers[0].trials[3]", _vote_trial),
    (
        "hypothesis.Hvote@large",
        "values.estimate",
        lambda b: b["values"].__setitem__("estimate", b["values"]["estimate"] + 0.01),
    ),
    (
        "hypothesis.Hbias",
        "values.upper",
        lambda b: b["values"].__setitem__("upper", b["values"]["upper"] + 0.001),
    ),
    (
        "hypothesis.Hsc",
        "values.results[1].answers[2].answer",
        lambda b: b["values"]["results"][1]["answers"][2].__setitem__("answer", "Z"),
    ),
    (
        "hypothesis.Hmv",
        "values.c_count",
        lambda b: b["values"].__setitem__("c_count", b["values"]["c_count"] + 1),
    ),
    (
        "hypothesis.Hgee@small",
        "values.estimate",
        lambda b: b["values"].__setitem__("estimate", b["values"]["estimate"] * 1.01),
    ),
    ("hypothesis.Hflipl", "verdict", lambda b: b.__setitem__("verdict", "supported")),
    (
        "descriptive.mcq",
        "values.seeds[0].summary.mean",
        lambda b: b["values"]["seeds"][0]["summary"].__setitem__("mean", 0.99),
    ),
]


@pytest.mark.parametrize(
    ("result_id", "path", "change"),
    [TAMPERS[0], *(pytest.param(*t, marks=pytest.mark.slow) for t in TAMPERS[1:])],
    ids=[t[0] + ":" + t[1] for t in TAMPERS],
)
def test_an_edited_value_fails_reanalysis_naming_the_result(
    copied: Path, result_id: str, path: str, change: Any
) -> None:
    edit_result(copied, result_id, change)
    check = {c.name: c for c in science_checks(copied)}["reanalysis"]
    assert check.status is Status.FAIL
    assert check.reason.startswith(f"{result_id} {path}"), check.reason


def test_the_report_tables_the_seed_002_results(built: tuple[Path, Path, Path]) -> None:
    html = (built[1] / "analysis" / "report.html").read_text("utf-8")
    assert "Seed 002&#x27;s registered statistics" in html, html[:2000]
    vote = results(built[1])["hypothesis.Hvote"]["values"]
    assert f"vote {vote['accuracy_vote'] * 100:.1f}% vs mean order" in html
    assert "Accuracy over the shuffle seeds" in html


def mcnemar_cells(archive: Path) -> list[str]:
    """The estimate cell every McNemar result must show: its discordant counts (issue 31)."""
    cells = []
    for rid, r in results(archive).items():
        if rid.startswith(("hypothesis.Hmv", "hypothesis.Hma")):
            v = r["values"]
            assert isinstance(v["b"], dict)  # with variants "b" is the second condition
            cells.append(f"discordant b={v['b_count']}, c={v['c_count']}")
    assert len(cells) == 6
    return cells


def test_the_mcnemar_cells_read_as_counts_in_the_html_and_the_archive(
    built: tuple[Path, Path, Path],
) -> None:
    html = (built[1] / "analysis" / "report.html").read_text("utf-8")
    for cell in mcnemar_cells(built[1]):
        assert cell in html
    assert "discordant b={" not in html
    with science_skipped():  # only the report check is read; test_the_archive_verifies runs all
        report = verify_archive(built[1])  # the verifier expects the same cells (its own code)
    assert report.get("report") is not None and report.get("report").status.name == "PASS"


@pytest.mark.slow
def test_the_terminal_report_tables_them_too(
    built: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    from rich.console import Console

    from analysis._report import build_report, render_terminal

    console = Console(record=True, width=400)
    render_terminal(build_report(built[0], tmp_path / "report"), console)
    text = console.export_text()
    assert "Seed 002's registered statistics" in text and "Hsc@large" in text
    for cell in mcnemar_cells(built[1]):
        assert cell in text
    assert "discordant b={" not in text


# ------------------------------------------------------------------------------ the seed's tables

SEED_PLAN: dict[str, Any] = {
    "design": {"bootstrap_iterations": 1000, "bootstrap_seed": 1},
    "response": {"letters": "ABCD"},
}


def seed_rows(arms: dict[str, list[tuple[str, str]]]) -> pd.DataFrame:
    """A table from (key, prediction) per item for each arm (one model, one rep, as written)."""
    rows = []
    for arm, pairs in arms.items():
        for i, (key, letter) in enumerate(pairs):
            rows.append(
                {
                    "trial": f"{arm}|q{i}",
                    "item": f"q{i:05d}",
                    "arm": arm,
                    "model": "",
                    "variant": "original",
                    "rep": 1,
                    "key": key,
                    "key_original": key,
                    "letter": letter,
                    "answer": letter,
                    "correct": letter == key,
                    "parse": "ok",
                }
            )
    return pd.DataFrame(rows)


def both_ways(frame: pd.DataFrame, h: dict[str, Any]) -> dict[str, Any]:
    """The registered kind's values by analysis, checked against the verifier's mirror."""
    table = mcq.check_trials(frame)
    got = hypothesis_values(table, table, SEED_PLAN, h)
    rows = vm.check_trials(records(frame))
    mirror = mcq_values_from_rows(rows, rows, SEED_PLAN, h)
    same(json.loads(json.dumps(_clean(got))), json.loads(json.dumps(mirror)))
    return got


def same(a: Any, b: Any, path: str = "") -> None:
    """Equal JSON trees, floats to 1e-9."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (path, set(a) ^ set(b))
        for k in a:
            same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool):
        assert b == pytest.approx(a, rel=1e-9, abs=1e-12), (path, a, b)
    else:
        assert a == b, (path, a, b)


def test_table_9_through_the_registered_mcnemar_kind() -> None:
    """Seed 002 Table 9: 1,511 both right, 1,410 both wrong, 750 direct only, 512 CoT only."""
    cells = (
        [(True, True)] * 1511
        + [(False, False)] * 1410
        + [(True, False)] * 750
        + [(False, True)] * 512
    )
    arms = {
        arm: [("A", "A" if ok[j] else "B") for ok in cells]
        for j, arm in enumerate(("direct", "cot"))
    }
    h = {
        "id": "T9",
        "test": "mcnemar",
        "contrast": ["direct", "cot"],
        "variant": "original",
        "alpha": 0.05,
    }
    v = both_ways(seed_rows(arms), h)
    assert (v["n_pairs"], v["b_count"], v["c_count"]) == (4183, 750, 512)
    assert round(100 * v["estimate"], 1) == 5.7  # "CoT reduces accuracy by 5.7 points"
    assert v["p_raw"] < 0.001 and v["test"]["primary"] == "chi2_cc"  # 1,262 discordant


def test_table_11_through_the_registered_position_bias_kind() -> None:
    """Table 11 as 1,000 items: zero-shot 0.137 (Table 4's value) and few-shot direct 0.438."""
    keys = ["A"] * 322 + ["B"] * 251 + ["C"] * 214 + ["D"] * 213

    def predictions(shares: tuple[int, ...]) -> list[str]:
        return [x for x, n in zip("ABCD", shares, strict=True) for _ in range(n)]

    arms = {
        "fewshot": list(zip(keys, predictions((760, 120, 70, 50)), strict=True)),
        "zeroshot": list(zip(keys, predictions((459, 221, 178, 142)), strict=True)),
    }
    h = {
        "id": "T11",
        "test": "position-bias",
        "contrast": ["fewshot", "zeroshot"],
        "variant": "original",
        "sides": "one-sided",
        "alpha": 0.05,
    }
    v = both_ways(seed_rows(arms), h)
    assert round(v["bias_b"], 3) == 0.137 and round(v["bias_a"], 3) == 0.438
    assert v["estimate"] == pytest.approx(0.301, abs=1e-9)
    verdict, decided = decide_interval(h, v)
    assert verdict == "supported" and decided["lower"] > 0.2


def test_an_unparseable_trial_stays_in_the_bias_denominators_both_ways() -> None:
    """p_truth over every trial, p_pred over the parsed ones (a null letter is no letter)."""
    arms = {
        "a": [("A", "A"), ("B", "A"), ("C", "A"), ("D", "D")],
        "b": [("A", "A"), ("B", "B"), ("C", "C"), ("D", "D")],
    }
    frame = seed_rows(arms)
    frame.loc[1, ["letter", "answer", "parse"]] = [None, None, "unparseable"]
    h = {
        "id": "U",
        "test": "position-bias",
        "contrast": ["a", "b"],
        "variant": "original",
        "alpha": 0.05,
    }
    v = both_ways(frame, h)
    assert v["a"]["n"] == 4 and v["a"]["n_parsed"] == 3
    assert v["bias_a"] == pytest.approx(0.5 * (abs(2 / 3 - 0.25) + 0.25 + 0.25 + abs(1 / 3 - 0.25)))


def test_the_archive_readme_names_the_arm_of_a_one_arm_test(
    built: tuple[Path, Path, Path],
) -> None:
    text = (built[1] / "README.md").read_text("utf-8")
    assert "arm direct, original vs rot1 on `trial_accuracy`; flip-rate" in text, text


# ------------------------------------------------------------------------------ review sample


def test_the_review_sample_is_locked_as_declared(built: tuple[Path, Path, Path]) -> None:
    with Ledger.open(ledger_path(built[0]), readonly=True) as log:
        event = protocol_event(log)
        assert event is not None
        locked = event.body["reviews"]
    assert locked == {
        "bare_hurt": {
            "kind": "contrast",
            "failed": {"arm": "bare", "variant": "original"},
            "succeeded": {"arm": "direct", "variant": "original"},
            "model": "small",
            "n": 3,
            "seed": "7",
            "description": "Cases where the bare prompt was wrong and the task prompt "
            "right, for coding.",
        }
    }


def test_the_review_sample_follows_the_documented_rule_by_hand(
    built: tuple[Path, Path, Path], data: tuple[Dataset, dict[str, Any], pd.DataFrame]
) -> None:
    """docs/mcq-statistics.md §9: bare wrong and direct right on (item, rep) of model small;
    the 3 smallest SHA-256("7|item|rep"); the CSV holds the items and the responses."""
    _, _, table = data
    small = table[(table["model"] == "small") & (table["variant"] == "original")]
    right = {(r.item, r.rep): r for r in small[small["arm"] == "direct"].itertuples()}
    cands = sorted(
        (hashlib.sha256(f"7|{r.item}|{r.rep}".encode()).hexdigest(), r, right[(r.item, r.rep)])
        for r in small[small["arm"] == "bare"].itertuples()
        if not r.correct and (r.item, r.rep) in right and right[(r.item, r.rep)].correct
    )
    got = results(built[1])["review.bare_hurt"]
    assert got["status"] == "ok" and got["label"] == "descriptive"
    values = got["values"]
    assert values["n_candidates"] == len(cands) and values["size"] == min(3, len(cands)) > 0
    assert [(c["order_key"], c["failed_trial"], c["succeeded_trial"]) for c in values["cases"]] == [
        (k, a.trial, b.trial) for k, a, b in cands[:3]
    ]
    rows = list(
        csv.DictReader(
            io.StringIO((built[1] / "analysis" / "review" / "bare_hurt.csv").read_text("utf-8"))
        )
    )
    items = {i["id"]: i for i in ITEMS}
    with Ledger.open(ledger_path(built[0]), readonly=True) as log:
        for row, case in zip(rows, values["cases"], strict=True):
            item = items[row["item"]]
            assert row["question"] == item["question"] and row["codes"] == ""
            assert row["options"].splitlines() == [
                f"{'ABCD'[i]}. {text}" for i, text in enumerate(item["options"])
            ]
            assert row["failed_answer"] != row["key_original"] == row["succeeded_answer"]
            for side in ("failed", "succeeded"):
                event = log.get(case[f"{side}_response_seq"])
                assert event.kind == "trial.responded"
                assert event.body["trial"] == row[f"{side}_trial"]
                body = json.loads(log.blob(event.blobs["response"]))
                text = "".join(b["text"] for b in body["content"] if b["type"] == "text")
                assert row[f"{side}_response"] == text
    listed = (built[1] / "MANIFEST.sha256").read_text("utf-8")
    assert "  analysis/review/bare_hurt.csv\n" in listed


REVIEW = """[reviews.bare_hurt]
description = "Cases where the bare prompt was wrong and the task prompt right, for coding."
failed = { arm = "bare", variant = "original" }
succeeded = { arm = "direct" }
model = "small"
n = 3
seed = 7
"""


@pytest.mark.parametrize(
    ("old", "new", "line_text", "expected"),
    [
        (
            'failed = { arm = "bare"',
            'failed = { arm = "naked"',
            'arm = "naked"',
            "reviews.bare_hurt.failed.arm: unknown arm 'naked'",
        ),
        (
            'variant = "original" }\nsucceeded',
            'variant = "swap" }\nsucceeded',
            'failed = { arm = "bare", variant = "swap" }',
            "reviews.bare_hurt.failed.variant: arm 'bare' does not run variant 'swap'",
        ),
        (
            'model = "small"\n',
            "",
            "[reviews.bare_hurt]",
            "reviews.bare_hurt.model: missing: the study has 2 models",
        ),
        (
            'model = "small"',
            'model = "medium"',
            'model = "medium"',
            "reviews.bare_hurt.model: unknown model 'medium'",
        ),
        ("n = 3", "n = 0", "n = 0", "reviews.bare_hurt.n: must be an integer >= 1"),
        ("seed = 7", "seed = -7", "seed = -7", "reviews.bare_hurt.seed: must be a non-negative"),
        (
            'succeeded = { arm = "direct" }',
            'succeeded = { arm = "bare" }',
            'succeeded = { arm = "bare" }',
            "reviews.bare_hurt.succeeded: names the same arm and variant as failed",
        ),
        (
            'succeeded = { arm = "direct" }',
            'succeeded = { arm = "direct", varient = "x" }',
            "varient",
            "[reviews.bare_hurt] succeeded varient: unknown key (did you mean 'variant'?)",
        ),
        ("seed = 7", "seed = 7\nsize = 3", "size = 3", "[reviews.bare_hurt] size: unknown key"),
        # one kind per table: a judge-label sample's step refuses the contrast keys, line by line
        (
            "seed = 7",
            'seed = 7\nstep = "judge"',
            'failed = { arm = "bare"',
            "reviews.bare_hurt.failed: a contrast sample's key (with failed and succeeded), but "
            "this table names a step, so it is a judge-label sample",
        ),
        (
            "seed = 7",
            'seed = 7\nstep = "judge"',
            'model = "small"',
            "reviews.bare_hurt.model: a contrast sample's key",
        ),
        (
            'failed = { arm = "bare", variant = "original" }\nsucceeded = { arm = "direct" }\n'
            'model = "small"\n',
            "",
            "[reviews.bare_hurt]",
            'reviews.bare_hurt: say which sample it is: step = "<judge step>"',
        ),
    ],
)
def test_a_bad_review_declaration_is_refused_naming_line_and_field(
    tmp_path: Path, old: str, new: str, line_text: str, expected: str
) -> None:
    assert REVIEW in SPEC
    spec = SPEC.replace(REVIEW, REVIEW.replace(old, new))
    text = refused(tmp_path, spec)
    assert f"study.toml:{line_of(spec, line_text)}: {expected}" in text, text


def test_a_review_on_a_parser_without_letters_is_refused(tmp_path: Path) -> None:
    spec = SPEC.replace(HYPOTHESES, "").replace(
        'parser = "multiple-choice"\nmode = "first-token"', 'parser = "normalized"'
    )
    text = refused(tmp_path, spec)
    assert (
        f"study.toml:{line_of(spec, '[reviews.bare_hurt]')}: reviews.bare_hurt: a review "
        "sample pairs trials scored right or wrong on option letters: it needs parser "
        "'multiple-choice' or 'cloze', not 'normalized'"
    ) in text, text


def test_a_changed_review_sample_re_signed_fails_naming_it(copied: Path) -> None:
    def swap(b: dict[str, Any]) -> None:
        cases = b["values"]["cases"]
        cases[0], cases[-1] = cases[-1], cases[0]

    events, _ = edit_result(copied, "review.bare_hurt", swap)
    forge(copied, events)
    report = verify_archive(copied)
    passed(report, "signatures")
    assert failed(report, "reanalysis").startswith("review.bare_hurt values.cases[0]")


@pytest.mark.slow
def test_a_changed_review_declaration_re_signed_fails_naming_it(copied: Path) -> None:
    events = read_events(copied)
    protocol = next(e for e in events if e["kind"] == "protocol.locked")
    protocol["body"]["reviews"]["bare_hurt"]["seed"] = "8"
    forge(copied, events)
    report = verify_archive(copied)
    passed(report, "signatures")
    assert failed(report, "reanalysis").startswith("review.bare_hurt values.")


def test_a_changed_review_csv_fails_reanalysis_naming_it(copied: Path) -> None:
    """The science checks alone (the manifest and export.created are the other checks')."""
    path = copied / "analysis" / "review" / "bare_hurt.csv"
    text = path.read_text("utf-8")
    path.write_text(text.replace("finding", "finding (edited)", 1), "utf-8")
    check = {c.name: c for c in science_checks(copied)}["reanalysis"]
    assert check.status is Status.FAIL
    reason = check.reason
    assert "(first at line 2)" in reason, reason
    assert reason.startswith(
        "analysis/review/bare_hurt.csv differs from the review sample rebuilt from review.bare_hurt"
    ), reason


def test_ledger_review_refuses_a_contrast_sample_naming_its_export(
    built: tuple[Path, Path, Path],
) -> None:
    """`ledger review` lists and labels judge-label samples; a contrast one is analyzed."""
    from analysis._reviewing import review_subjects
    from runner._lock import StudyError

    with pytest.raises(
        StudyError,
        match=r"'bare_hurt' is a contrast sample.*"
        r"analysis/review/bare_hurt\.csv",
    ):
        review_subjects(built[0], "bare_hurt")
