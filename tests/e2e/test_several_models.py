"""Text-item studies (no probes, no rows) and studies with several models, end to end.

Issue 15 made items, templates and ``[models.NAME]`` tables part of a study. Analysis then had
to work for any arm names and roles, without probes or chart rows, and per model: each
registered hypothesis is computed on every model's trials (``hypothesis.H1@big``) and pooled
with the model as a fixed factor (``docs/analysis.md`` §4). The studies here run on the
simulated backend, are analysed, exported and verified; every per-model number is then
recomputed here from ``analysis/trials.csv`` and ``analysis/items.csv`` with pandas, scipy and
statsmodels (no expected number is written down).

The archive's ``protocol``, ``schedule``, ``requests``, ``outcomes`` and ``rescore`` checks of a
study with items or models are another branch's work; only ``reanalysis``, ``report`` and
``derived`` are asserted here.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from click.testing import CliRunner, Result
from helpers import fixed_key
from multitest_ref import multipletests
from scipy import stats as sps
from statsmodels.regression.mixed_linear_model import MixedLM
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.proportion import proportion_confint

from ledger.cli import main
from verify import Status, verify_path

OURS = ("reanalysis", "report", "derived")
"""The checks this branch answers for on an item study."""
ARMS = ("with.rule-1", "plain_2", "Zsys")
RULE, PLAIN, SYS, BIG_ONLY = (*ARMS, "bigonly")
LETTERS = "ABCD"

ITEMS = [
    {
        "id": f"q{i:02d}",
        "question": f"Which option is number {i}?",
        "options": [f"option {i}-{k}" for k in range(4)],
        "answer": LETTERS[i % 4],
    }
    for i in range(1, 13)
]
PROMPTS = {
    "item.txt": "Question: {question}\n{options}\n",
    "task.txt": "Answer with the letter of the correct option only.\n",
    "rule.txt": "Decoding rule: read every option before you answer.\n",
    "system.txt": "You are a careful clinician.\n",
}
HYPOTHESES = f"""
[[hypotheses]]
id = "H1"
description = "The rule beats the plain prompt."
contrast = ["{RULE}", "{PLAIN}"]
test = "lmm"
sides = "one-sided"
alpha = 0.05

[[hypotheses]]
id = "H2"
contrast = ["{RULE}", "{PLAIN}"]
test = "paired-t"
alpha = 0.05
correction = "holm"
family = "secondary"

[[hypotheses]]
id = "H3"
contrast = ["{PLAIN}", "{SYS}"]
test = "independent-t"
alpha = 0.05
correction = "holm"
family = "secondary"

[[hypotheses]]
id = "H4"
contrast = ["{{a4}}", "{PLAIN}"]
test = "bootstrap"
alpha = 0.05

[[hypotheses]]
id = "H5"
contrast = ["{RULE}", "{PLAIN}"]
test = "mcnemar"
alpha = 0.05

[[hypotheses]]
id = "H6"
contrast = ["{PLAIN}", "{RULE}"]
test = "chi-square"
alpha = 0.05

[[hypotheses]]
id = "H7"
contrast = ["{PLAIN}", "{SYS}"]
test = "equivalence"
margin_pp = 40
"""


def text_study(root: Path, *, models: bool, replicates: int) -> Path:
    """A multiple-choice item study written from ``docs/prompts.md``.

    No arm has the role ``full`` (the reference is the first arm by name); arm names use
    ``.``, ``-``, ``_`` and capitals. With ``models``, two ``[models.*]`` tables (anthropic,
    openai-compatible) and an arm run on one model only (``arms.bigonly.models``).
    """
    (root / "data").mkdir(parents=True)
    (root / "prompts").mkdir()
    (root / "data" / "items.jsonl").write_text(
        "".join(json.dumps(item) + "\n" for item in ITEMS), encoding="utf-8"
    )
    for name, text in PROMPTS.items():
        (root / "prompts" / name).write_text(text, encoding="utf-8")
    if models:
        model = """
[models.big]
provider = "anthropic"
id = "claude-sonnet-4-6"
max_tokens = 32
temperature = 0.0

[models.small]
provider = "openai-compatible"
id = "smollm2"
max_tokens = 32
temperature = 0.0
"""
    else:
        model = """
[model]
provider = "anthropic"
id = "claude-sonnet-4-6"
max_tokens = 32
temperature = 0.0
"""
    extra = (
        f"""
[arms.{BIG_ONLY}]
role = "factorial"
components = ["rule", "item", "task"]
models = ["big"]
"""
        if models
        else ""
    )
    spec = f"""[study]
id = "text-items"
title = "Text items{" on two models" if models else ""}"
{model}
[components]
task = "prompts/task.txt"
rule = "prompts/rule.txt"
system = "prompts/system.txt"

[prompt]
item = "prompts/item.txt"

[arms."{RULE}"]
role = "factorial"
components = ["rule", "item", "task"]

[arms.{PLAIN}]
role = "vehicle"
components = ["item", "task"]

[arms.{SYS}]
role = "dismantling"
components = ["item", "task"]
system = ["system"]
{extra}
[stimuli]
items = "data/items.jsonl"

[design]
replicates = {replicates}
seed = 3
bootstrap_seed = 4
bootstrap_iterations = 400

[response]
parser = "multiple-choice"
mode = "first-token"

[analysis]
exclude_unparseable = true
{HYPOTHESES.replace("{a4}", BIG_ONLY if models else RULE)}"""
    (root / "study.toml").write_text(spec, encoding="utf-8")
    return root


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("PROMPT_LEDGER_HOME", str(home))
    path = home / "owner.key"
    fixed_key("several-models/owner").save(path)
    yield path
    mp.undo()


def analysed(root: Path, key: Path) -> Path:
    """Lock, run (simulated), score, unblind, analyse and export; returns the archive."""
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
    return archive


@pytest.fixture(scope="module")
def two_models(tmp_path_factory: pytest.TempPathFactory, key_file: Path) -> Path:
    root = text_study(tmp_path_factory.mktemp("two") / "study", models=True, replicates=2)
    return analysed(root, key_file)


@pytest.fixture(scope="module")
def one_model(tmp_path_factory: pytest.TempPathFactory, key_file: Path) -> Path:
    root = text_study(tmp_path_factory.mktemp("one") / "study", models=False, replicates=1)
    return analysed(root, key_file)


def results(archive: Path) -> dict[str, dict[str, Any]]:
    listed = json.loads((archive / "analysis" / "results.json").read_text(encoding="utf-8"))
    return {r["id"]: r for r in listed}


def frames(archive: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The analysable trials and items of the archive's dataset (``docs/analysis.md`` §2)."""
    kinds = {"stimulus": str, "arm": str, "model": str, "answer": str, "truth": str}
    trials = pd.read_csv(archive / "analysis" / "trials.csv", dtype=kinds, keep_default_na=False)
    items = pd.read_csv(archive / "analysis" / "items.csv", dtype=kinds, keep_default_na=False)
    trials = trials[~trials["excluded"] & ~trials["control"]]
    items = items[items["trial"].isin(set(trials["trial"]))]
    return trials, items


def quiet(model: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(reml=True)


def close(a: Any, b: Any, rel: float = 1e-9) -> bool:
    return bool(math.isclose(float(a), float(b), rel_tol=rel, abs_tol=1e-9))


# ------------------------------------------------------------------------------ checks


@pytest.mark.parametrize("study", ["one_model", "two_models"])
def test_our_checks_pass(study: str, request: pytest.FixtureRequest) -> None:
    archive: Path = request.getfixturevalue(study)
    checks = {c.name: c for c in verify_path(archive).checks}
    for name in OURS:
        if study == "two_models" and name == "reanalysis":
            # two replicates at temperature 0: copies, named (issue 31); the numbers match
            assert checks[name].status is Status.WARN, checks[name].reason
            assert "every replicate alike" in checks[name].reason
            continue
        assert checks[name].status is Status.PASS, (name, checks[name].reason)


def test_every_test_type_runs_on_a_one_model_text_study(one_model: Path) -> None:
    """One observation per item and arm: lmm, paired-t, bootstrap, chi-square, equivalence."""
    found = results(one_model)
    assert not [r for r in found.values() if r["status"] != "ok"], [
        (r["id"], r["error"]) for r in found.values() if r["status"] != "ok"
    ]
    assert not any("@" in rid for rid in found) and "descriptive.arm_model" not in found
    header = (one_model / "analysis" / "trials.csv").read_text().splitlines()[0]
    assert header.startswith("trial,arm,stimulus,rep,")  # no model column without [models]
    trials, items = frames(one_model)
    assert set(trials.groupby(["arm", "stimulus"]).size()) == {1}
    # no "full" arm: the reference is the first arm by name (capitals sort first)
    assert found["model.lmm"]["values"]["reference"] == SYS == min(ARMS)
    assert found["model.lmm"]["values"]["n_groups"] == len(ITEMS)
    # chi-square over the parser's letters, equivalence over items
    wrong = items[(items["arm"] == PLAIN) & ~items["correct"] & items["answer"].isin(list(LETTERS))]
    counts = [int((wrong["answer"] == letter).sum()) for letter in LETTERS]
    assert found["hypothesis.H6"]["values"]["observed"] == counts
    assert close(found["hypothesis.H6"]["values"]["p"], sps.chisquare(counts).pvalue, 1e-9)
    means = trials.pivot_table("accuracy", "stimulus", "arm")
    diffs = (means[PLAIN] - means[SYS]).dropna()
    assert close(found["hypothesis.H7"]["values"]["max_abs_diff"], diffs.abs().max())
    assert found["hypothesis.H7"]["values"]["n_groups"] == len(diffs)


# ------------------------------------------------------------------------------ several models


def test_result_ids_follow_the_documented_order(two_models: Path) -> None:
    ids = list(results(two_models))
    per_model = [
        f"hypothesis.H{i}{suffix}" for i in range(1, 8) for suffix in ("", "@big", "@small")
    ]
    expected_start = [
        "descriptive.arms",
        "descriptive.arm_model",
        "descriptive.arm_stimulus",
        "descriptive.control",
        "model.lmm",
        "model.lmm@big",
        "model.lmm@small",
        *per_model,
    ]
    assert ids[: len(expected_start)] == expected_start
    runs = [i for i in ids if i.startswith("exploratory.question_run.")]
    arms = sorted([*ARMS, BIG_ONLY])
    assert runs == [
        f"exploratory.question_run.{a}{m}"
        for a in arms
        for m in ("", "@big") + (() if a == BIG_ONLY else ("@small",))
    ]
    assert ids[-6:] == [
        "exploratory.arm_by_model",
        "exploratory.multiplicity",
        "sensitivity.lmm",
        "sensitivity.lmm@big",
        "sensitivity.lmm@small",
        "descriptive.identical_responses",
    ]
    copies = results(two_models)["descriptive.identical_responses"]["values"]
    assert {(r["arm"], r["model"]) for r in copies["replicates"]} == {
        (a, m)
        for a in [*ARMS, BIG_ONLY]
        for m in ("big", "small")
        if not (a == BIG_ONLY and m == "small")
    }
    assert copies["models"] == []  # two model ids: different answers
    html = (two_models / "analysis" / "report.html").read_text(encoding="utf-8")
    for scope in ("(pooled over the models, model a fixed factor)", "(model big)", "(model small)"):
        assert f"Sensitivity (not registered; never changes a verdict) {scope}" in html
    header = (two_models / "analysis" / "trials.csv").read_text().splitlines()[0]
    assert header.startswith("trial,arm,model,stimulus,rep,")


def test_question_run_is_computed_with_several_models(two_models: Path) -> None:
    """It failed with 'a (question, run) pair occurs more than once' (one pair per model)."""
    found = results(two_models)
    trials, _ = frames(two_models)
    for arm in ARMS:
        pooled = found[f"exploratory.question_run.{arm}"]
        assert pooled["status"] == "ok", pooled["error"]
        mine = trials[trials["arm"] == arm]
        assert pooled["values"]["n_x"] == len(mine)
        assert close(pooled["values"]["estimate"], mine["accuracy"].mean())
        for model in ("big", "small"):
            each = found[f"exploratory.question_run.{arm}@{model}"]["values"]
            assert each["n_x"] == int((mine["model"] == model).sum())


def test_descriptive_by_arm_and_model(two_models: Path) -> None:
    found = results(two_models)["descriptive.arm_model"]["values"]
    _, items = frames(two_models)
    scored = pd.read_csv(two_models / "analysis" / "trials.csv", dtype={"model": str})
    assert set(found) == {f"{a}|{m}" for a in [*ARMS, BIG_ONLY] for m in ("big", "small")} - {
        f"{BIG_ONLY}|small"
    }
    for key, cell in found.items():
        arm, model = key.split("|")
        assert (cell["arm"], cell["model"]) == (arm, model)
        mine = scored[(scored["arm"] == arm) & (scored["model"] == model)]
        assert cell["trials_scored"] == len(mine)
        assert cell["parse_rate"] == pytest.approx((mine["status"] != "unparseable").mean())
        it = items[(items["arm"] == arm) & (items["model"] == model)]
        assert (cell["glyphs"], cell["correct"]) == (len(it), int(it["correct"].sum()))
        lower, upper = proportion_confint(int(it["correct"].sum()), len(it), method="wilson")
        assert cell["accuracy"]["lower"] == pytest.approx(lower, abs=1e-12)
        assert cell["accuracy"]["upper"] == pytest.approx(upper, abs=1e-12)


def _lmm_contrast(data: pd.DataFrame, a: str, b: str, *, model_factor: bool) -> tuple[float, float]:
    """a - b from statsmodels' formula fit with b as the reference arm (and a model term)."""
    formula = f"accuracy ~ C(arm, Treatment('{b}'))" + (" + C(model)" if model_factor else "")
    fit = quiet(smf.mixedlm(formula, data, groups=data["stimulus"]))
    name = f"C(arm, Treatment('{b}'))[T.{a}]"
    return float(fit.fe_params[name]), float(fit.bse_fe[name])


def test_lmm_per_model_and_pooled_with_the_model_as_a_factor(two_models: Path) -> None:
    found = results(two_models)
    trials, _ = frames(two_models)
    for model in ("big", "small"):
        v = found[f"hypothesis.H1@{model}"]["values"]
        assert v["model"] == model and v["sides"] == "one-sided"
        est, se = _lmm_contrast(trials[trials["model"] == model], RULE, PLAIN, model_factor=False)
        assert v["estimate"] == pytest.approx(est, rel=1e-3, abs=1e-6)
        assert v["se"] == pytest.approx(se, rel=1e-3)
        assert v["p_raw"] == pytest.approx(sps.norm.sf(v["estimate"] / v["se"]), rel=1e-9)
        assert found[f"model.lmm@{model}"]["values"]["n_obs"] == int(
            (trials["model"] == model).sum()
        )
    pooled = found["hypothesis.H1"]["values"]
    est, se = _lmm_contrast(trials, RULE, PLAIN, model_factor=True)
    assert pooled["estimate"] == pytest.approx(est, rel=1e-3, abs=1e-6)
    assert pooled["se"] == pytest.approx(se, rel=1e-3)
    fit = found["model.lmm"]["values"]
    assert fit["factors"] == ["model"] and fit["factor_references"] == ["big"]
    assert "model[T.small]" in [e["name"] for e in fit["fixed_effects"]]
    assert "accuracy ~ arm + model + (1 | stimulus)" in found["model.lmm"]["title"]
    assert "accuracy ~ arm + (1 | stimulus)" in found["model.lmm@big"]["title"]


def test_interaction_wald_test_matches_a_direct_fit(two_models: Path) -> None:
    """arm × model cells, the never-observed one (bigonly on small) left out; joint Wald χ²."""
    found = results(two_models)["exploratory.arm_by_model"]
    trials, _ = frames(two_models)
    reference = found["values"]["reference"]
    others = sorted(set(trials["arm"]) - {reference})
    columns = {"Intercept": np.ones(len(trials))}
    for arm in others:
        columns[f"arm[T.{arm}]"] = (trials["arm"] == arm).to_numpy(float)
    columns["model[T.small]"] = (trials["model"] == "small").to_numpy(float)
    for arm in others:
        cell = columns[f"arm[T.{arm}]"] * columns["model[T.small]"]
        if cell.any():
            columns[f"arm[T.{arm}]:model[T.small]"] = cell
    names = list(columns)
    assert [e["name"] for e in found["values"]["fixed_effects"]] == names
    assert f"arm[T.{BIG_ONLY}]:model[T.small]" not in names
    fit = quiet(
        MixedLM(
            trials["accuracy"].to_numpy(float),
            np.column_stack(list(columns.values())),
            groups=trials["stimulus"].to_numpy(),
        )
    )
    cells = [i for i, n in enumerate(names) if ":" in n]
    beta = np.asarray(fit.fe_params)[cells]
    cov = np.asarray(fit.cov_params())[np.ix_(cells, cells)]
    chi2 = float(beta @ np.linalg.solve(cov, beta))
    test = found["values"]["interaction_test"]
    assert test["df"] == len(cells) and test["chi2"] == pytest.approx(chi2, rel=1e-3)
    assert test["p"] == pytest.approx(sps.chi2.sf(chi2, len(cells)), rel=1e-2, abs=1e-9)


def _stimulus_means(trials: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    cells = trials.pivot_table("accuracy", ["model", "stimulus"], "arm")[[a, b]].dropna()
    return cells.groupby(level="stimulus").mean()


def test_paired_and_unpaired_tests_per_model_and_pooled(two_models: Path) -> None:
    found = results(two_models)
    trials, _ = frames(two_models)
    for suffix, data in (
        ("", trials),
        ("@big", trials[trials["model"] == "big"]),
        ("@small", trials[trials["model"] == "small"]),
    ):
        means = _stimulus_means(data, RULE, PLAIN)  # the items are the units
        paired = found[f"hypothesis.H2{suffix}"]["values"]
        ref = sps.ttest_rel(means[RULE], means[PLAIN])
        # an item whose replies in one arm were all unparseable (excluded) drops out
        assert paired["n_x"] == len(means) and len(ITEMS) - 2 <= len(means) <= len(ITEMS)
        assert close(paired["t"], ref.statistic) and close(paired["p_raw"], ref.pvalue)
        welch = found[f"hypothesis.H3{suffix}"]["values"]
        x, y = (data[data["arm"] == arm]["accuracy"] for arm in (PLAIN, SYS))
        ref = sps.ttest_ind(x, y, equal_var=False)
        assert close(welch["t"], ref.statistic) and close(welch["p_raw"], ref.pvalue)
        # holm within the family "secondary", within each model's copy of it
        adjusted = multipletests([paired["p_raw"], welch["p_raw"]], method="holm")[1]
        assert [paired["p_adjusted"], welch["p_adjusted"]] == pytest.approx(list(adjusted))
        assert paired["family_size"] == welch["family_size"] == 2
        diffs = (means := _stimulus_means(data, PLAIN, SYS))[PLAIN] - means[SYS]
        equivalence = found[f"hypothesis.H7{suffix}"]
        assert close(equivalence["values"]["max_abs_diff"], diffs.abs().max())
        assert equivalence["verdict"] == (
            "supported" if diffs.abs().max() < 0.4 else "not supported"
        )


def test_mcnemar_pairs_within_a_model(two_models: Path) -> None:
    found = results(two_models)
    _, items = frames(two_models)
    keys = ["model", "stimulus", "rep"]
    pairs = items[items["arm"] == RULE].merge(items[items["arm"] == PLAIN], on=keys)
    for suffix, data in (
        ("", pairs),
        ("@big", pairs[pairs["model"] == "big"]),
        ("@small", pairs[pairs["model"] == "small"]),
    ):
        v = found[f"hypothesis.H5{suffix}"]["values"]
        b = int((data["correct_x"] & ~data["correct_y"]).sum())
        c = int((~data["correct_x"] & data["correct_y"]).sum())
        assert (v["b"], v["c"]) == (b, c)
        assert close(v["estimate"], (b - c) / len(data))
        table = [[0, b], [c, 0]]
        ref = sm_mcnemar(table, exact=b + c < 25, correction=True)
        assert close(v["p_raw"], ref.pvalue, 1e-9)
    # the pooled pairs are the models' pairs together: 2 models x 12 items x 2 replicates at most
    flips = found[f"exploratory.pair.{RULE}-{PLAIN}"]["values"]["flip_rate"]
    assert flips["n"] == len(pairs) <= 2 * len(ITEMS) * 2


def test_chi_square_and_bootstrap_per_model(two_models: Path) -> None:
    found = results(two_models)
    trials, items = frames(two_models)
    for suffix, model in (("", None), ("@big", "big"), ("@small", "small")):
        it = items if model is None else items[items["model"] == model]
        wrong = it[(it["arm"] == PLAIN) & ~it["correct"] & it["answer"].isin(list(LETTERS))]
        counts = [int((wrong["answer"] == letter).sum()) for letter in LETTERS]
        chi = found[f"hypothesis.H6{suffix}"]["values"]
        assert chi["observed"] == counts and close(chi["p_raw"], sps.chisquare(counts).pvalue)
    # H4: bigonly ran on big only; pooled, plain_2 is compared on that model alone
    big = trials[trials["model"] == "big"]
    x = big[big["arm"] == BIG_ONLY]["accuracy"].to_numpy(float)
    y = big[big["arm"] == PLAIN]["accuracy"].to_numpy(float)
    for suffix in ("", "@big"):
        boot = found[f"hypothesis.H4{suffix}"]["values"]
        assert (boot["n_x"], boot["n_y"]) == (len(x), len(y))
        assert close(boot["estimate"], x.mean() - y.mean())
        rng = np.random.Generator(np.random.PCG64(4))  # docs/statistics.md draw order
        ix = rng.integers(0, len(x), size=(400, len(x)))
        iy = rng.integers(0, len(y), size=(400, len(y)))
        lower, upper = np.quantile(x[ix].mean(axis=1) - y[iy].mean(axis=1), [0.025, 0.975])
        assert close(boot["lower"], lower) and close(boot["upper"], upper)
    small = found["hypothesis.H4@small"]
    assert small["status"] == "failed" and small["verdict"] == "not computed"
    assert BIG_ONLY in small["error"]


def test_multiplicity_covers_pooled_and_per_model_verdicts(two_models: Path) -> None:
    found = results(two_models)
    tested = [
        r
        for r in found.values()
        if r["hypothesis"] and r["status"] == "ok" and r["values"].get("p_raw") is not None
    ]
    mult = found["exploratory.multiplicity"]["values"]
    assert mult["hypotheses"] == [r["hypothesis"] for r in tested]
    ps = [r["values"]["p_raw"] for r in tested]
    assert mult["holm"]["adjusted"] == pytest.approx(list(multipletests(ps, method="holm")[1]))


def test_report_and_readme_show_the_models(two_models: Path) -> None:
    html = (two_models / "analysis" / "report.html").read_text(encoding="utf-8")
    for text in (
        "Models, in declaration order",
        "per arm and model",
        "by arm and model",
        "H1@small",
        "(model big)",
        "does the arm effect differ between models?",
        f"{len(ITEMS)} items (data/items.jsonl)",
    ):
        assert text in html, text
    readme = (two_models / "README.md").read_text(encoding="utf-8")
    assert "`big`: `claude-sonnet-4-6`" in readme and "| H1@small | lmm |" in readme
    verdicts = (two_models / "analysis" / "tables" / "verdicts.csv").read_text(encoding="utf-8")
    assert "\nH3@big,independent-t," in verdicts


@pytest.mark.parametrize(
    ("result_id", "member", "value"),
    [
        ("hypothesis.H5@small", "b", 99),
        ("hypothesis.H1", "estimate", 0.5),
        ("descriptive.arm_model", None, None),
        ("exploratory.arm_by_model", "interaction_test", None),
        ("exploratory.question_run.plain_2@big", "n_x", 1),
    ],
)
def test_an_edited_new_result_fails_reanalysis(
    two_models: Path, tmp_path: Path, result_id: str, member: str | None, value: Any
) -> None:
    """Each new number is recomputed: a changed one (unsigned edit) is named by the verifier."""
    import shutil

    from verify._science import science_checks

    copy = tmp_path / "archive"
    shutil.copytree(two_models, copy)
    path = copy / "ledger" / "events.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        event = json.loads(line)
        body = event["envelope"]["body"]
        if event["envelope"]["kind"] == "analysis.result" and body["id"] == result_id:
            values = body["values"]
            if member is None:  # drop one arm x model cell
                values.pop(next(iter(values)))
            elif value is None:
                values[member]["chi2"] *= 2
            else:
                values[member] = value
            lines[i] = json.dumps(event, sort_keys=True, separators=(",", ":"))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    check = next(c for c in science_checks(copy) if c.name == "reanalysis")
    assert check.status is Status.FAIL and check.reason.startswith(result_id), check.reason


def test_the_stimulus_heatmap_of_a_large_item_file_stays_a_bounded_png() -> None:
    """Hundreds of items (a MedQA-sized file): a fixed-width heatmap the verifier accepts."""
    import struct

    from analysis._report import Report, _fig_heatmap, _render_png
    from verify._archive.report import png_problem

    cells = {
        f"{arm}|q{i:04d}": {"arm": arm, "stimulus": f"q{i:04d}", "estimate": (i % 7) / 6}
        for arm in ARMS
        for i in range(1500)
    }
    result = {"id": "descriptive.arm_stimulus", "status": "ok", "values": cells}
    report = Report(
        Path("s"), Path("s/ledger.db"), Path("o"), Path("o/r.html"), {}, [result], [], [], None
    )  # type: ignore[arg-type]
    png = _render_png(lambda: _fig_heatmap(report))
    assert png is not None and png_problem(png) is None
    width, height = struct.unpack(">II", png[16:24])
    assert width * height < 40_000_000 and width < 2000
