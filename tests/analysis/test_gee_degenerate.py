"""A registered GEE the data cannot fit is "not applicable", or falls back as the plan declares.

Issue 31: the seed-002 ``mcq`` study run on a real server that answered both model names with
one model gave two "models" with byte-identical responses. The model term's robust variance is
then zero up to rounding: the writer's statsmodels fit returned (a variance of 2e-16) and the
verifier's own solver refused (a negative one), so an honest archive failed ``reanalysis``.
The rule of ``docs/mcq-statistics.md`` §8 decides it on both sides (robust variance at most
1e-8 times the model-based one); without a declared fallback the hypothesis is "not
applicable" with the reason, with ``fallback = "drop-factor"`` the GEE is refitted without the
factor at fault. Reproduced here on the simulated backend with the template's own prompts and
items: two ``[models]`` with one model id answer alike at temperature 0.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from helpers import fixed_key
from locations import REPO

from analysis.mcq import _stats as mcq
from ledger.cli import main
from verify import Report, verify_archive
from verify import _mcq as vm

TEMPLATE_DIR = REPO / "runner/templates/medmcqa_prompt_sensitivity"


def _table(seed: int, *, identical: bool = True, ceiling: bool = False) -> list[dict[str, Any]]:
    """A seed-002 trials table: 40 items, arms fs/zs, models m1/m2 (m2 a copy of m1)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(40):
        key = "ABCD"[i % 4]
        for arm, p in (("fs", 0.6), ("zs", 0.4)):
            first = bool(rng.random() < p)
            for model in ("m1", "m2"):
                right = first if identical else bool(rng.random() < p)
                if ceiling and model == "m2":
                    right = True
                letter = key if right else "ABCD"[(i + 1) % 4]
                rows.append(
                    {
                        "trial": f"{arm}|{model}|q{i}|original|1",
                        "item": f"q{i}",
                        "arm": arm,
                        "model": model,
                        "variant": "original",
                        "rep": 1,
                        "key": key,
                        "key_original": key,
                        "letter": letter,
                        "answer": letter,
                        "correct": right,
                        "parse": "ok",
                    }
                )
    return rows


@pytest.mark.parametrize("seed", range(6))
def test_identical_models_make_the_model_term_degenerate_on_both_sides(seed: int) -> None:
    rows = _table(seed)
    with pytest.raises(mcq.GeeNotFittable, match=r"robust variance of model\[T.m2\]") as w:
        mcq.gee_arm_effects(pd.DataFrame(rows), "zs", {"model": "m1"})
    with pytest.raises(vm.GeeNotFittable, match=r"model\[T.m2\] is degenerate") as v:
        vm.gee_arm_effects(rows, "zs", {"model": "m1"})
    assert w.value.column == v.value.column == "model"
    # without the factor at fault both fit, and agree (the drop-factor fallback's refit)
    fit = mcq.gee_arm_effects(pd.DataFrame(rows), "zs", {})
    mine = vm.gee_arm_effects(rows, "zs", {})
    assert [t.name for t in fit.terms] == [t["name"] for t in mine["terms"]]
    for t, u in zip(fit.terms, mine["terms"], strict=True):
        assert t.estimate == pytest.approx(u["estimate"], rel=1e-4)
        assert t.se == pytest.approx(u["se"], rel=1e-4)


def test_distinct_models_are_not_degenerate() -> None:
    rows = _table(0, identical=False)
    fit = mcq.gee_arm_effects(pd.DataFrame(rows), "zs", {"model": "m1"})
    mine = vm.gee_arm_effects(rows, "zs", {"model": "m1"})
    assert fit.terms[2].se == pytest.approx(mine["terms"][2]["se"], rel=1e-4)


def test_a_model_at_the_ceiling_is_separation_on_both_sides() -> None:
    rows = _table(1, identical=False, ceiling=True)
    with pytest.raises(mcq.GeeNotFittable, match="model 'm2' is correct") as w:
        mcq.gee_arm_effects(pd.DataFrame(rows), "zs", {"model": "m1"})
    with pytest.raises(vm.GeeNotFittable, match="model 'm2' has one outcome") as v:
        vm.gee_arm_effects(rows, "zs", {"model": "m1"})
    assert w.value.column == v.value.column == "model"


SPEC = """
[study]
id = "gee-degenerate"
title = "Seed 002's H9 when both model names reach one model"
origin = "prompt-ledger.local/gee-degenerate"

# Two names, one model: what a server that answers any model name does.
[models.medgemma_4b]
provider = "openai-compatible"
id = "google/medgemma-4b-it"
max_tokens = 256
temperature = 0.0

[models.medgemma_27b]
provider = "openai-compatible"
id = "google/medgemma-4b-it"
max_tokens = 256
temperature = 0.0

[components]
system = "prompts/system.txt"
direct_intro = "prompts/direct_intro.txt"
direct_ask = "prompts/direct_ask.txt"

[prompt]
item = "prompts/item.txt"

[fewshot.curated]
examples = "data/examples.jsonl"
rule = "fixed"
ids = ["e05", "e12", "e19"]
style = "inline"
answer = "prompts/answer_direct.txt"

# zero-shot direct also answers on the options rotated by one, as the template's does
[variants.original]
kind = "identity"

[variants.rotate-1]
kind = "rotate"
k = 1

[arms.zs_direct]
role = "full"
components = ["direct_intro", "item", "direct_ask"]
system = ["system"]

[arms.fs_direct]
role = "factorial"
components = ["direct_intro", "examples", "item", "direct_ask"]
system = ["system"]
fewshot = "curated"
variants = ["original"]

[stimuli]
items = "data/items.jsonl"

[design]
replicates = 1
seed = 20020042
bootstrap_seed = 20020123
bootstrap_iterations = 200
blinding_secret = "generate"

[response]
parser = "multiple-choice"
mode = "first-token"

[[hypotheses]]
id = "H9"
description = "Curated few-shot direct answers change the odds of a correct answer (GEE)."
test = "gee"
contrast = ["fs_direct", "zs_direct"]
variant = "original"
alpha = 0.05

[[hypotheses]]
id = "H9-fallback"
description = "The same, refitted without a factor the data cannot fit."
test = "gee"
contrast = ["fs_direct", "zs_direct"]
variant = "original"
alpha = 0.05
fallback = "drop-factor"

[analysis]
exclude_unparseable = false
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """The study run on the simulated backend, analysed and exported, once: (study, archive,
    owner key file), with ``PROMPT_LEDGER_HOME`` set while the module runs."""
    base = tmp_path_factory.mktemp("gee-degenerate")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
        root = base / "study"
        root.mkdir()
        for part in ("prompts", "data"):  # the template's own prompts, examples and items
            shutil.copytree(TEMPLATE_DIR / part, root / part)
        (root / "study.toml").write_text(SPEC, encoding="utf-8")
        key = base / "owner.key"
        fixed_key("gee/owner").save(key)
        for step in (
            ("lock", root),
            ("run", root, "--backend", "simulated"),
            ("score", root),
            ("unblind", root),
            ("analyze", root),
        ):
            result = CliRunner().invoke(main, [*map(str, step), "--key", str(key)])
            assert result.exit_code == 0, (step, result.output)
            if step[0] == "lock":  # the design invites copies: said at lock, locked anyway
                assert (
                    "warning: models 'medgemma_4b' and 'medgemma_27b' both name model "
                    "'google/medgemma-4b-it'"
                ) in result.stderr
        out = base / "archive"
        result = CliRunner().invoke(main, ["export", str(root), str(out), "--key", str(key)])
        assert result.exit_code == 0, result.output
        yield root, out, key


@pytest.fixture(scope="module")
def archive(built: tuple[Path, Path, Path]) -> Path:
    return built[1]


@pytest.fixture(scope="module")
def report(archive: Path) -> Report:
    """The archive verified in full, once (two tests read it; neither changes it)."""
    return verify_archive(archive)


def _results(archive: Path) -> dict[str, dict[str, Any]]:
    listed = json.loads((archive / "analysis" / "results.json").read_text("utf-8"))
    return {r["id"]: r for r in listed}


def test_the_degenerate_gee_is_not_applicable_and_the_archive_verifies(
    archive: Path, report: Report
) -> None:
    found = _results(archive)
    h9 = found["hypothesis.H9"]
    assert h9["status"] == h9["verdict"] == "not applicable", h9
    assert h9["error"] is None and "model[T.medgemma_27b]" in h9["values"]["reason"]
    assert "degenerate" in h9["values"]["reason"]
    for model in ("medgemma_4b", "medgemma_27b"):  # one model alone: no model factor
        assert found[f"hypothesis.H9@{model}"]["status"] == "ok"
    assert report.ok, [(c.name, c.reason) for c in report.checks if c.status.name == "FAIL"]
    html = (archive / "analysis" / "report.html").read_text("utf-8")
    assert "not applicable: GEE: the robust variance of model[T.medgemma_27b]" in html
    assert "Error:" not in html and "Exception" not in html


def test_the_declared_fallback_refits_without_the_model_factor(archive: Path) -> None:
    h = _results(archive)["hypothesis.H9-fallback"]
    assert h["status"] == "ok" and h["verdict"] in ("supported", "not supported")
    fallback = h["values"]["fallback"]
    assert fallback["rule"] == "drop-factor" and fallback["dropped"] == ["model"]
    assert h["values"]["fit"]["factors"] == []
    assert "degenerate" in fallback["reason"]


def test_the_copies_are_noted_in_the_results_report_and_verifier(
    archive: Path, report: Report
) -> None:
    """Issue 31: two "models" that answered alike are named, with how the pooled test counts
    them: a descriptive result, a banner in the report, and a WARN of the verifier."""
    found = _results(archive)["descriptive.identical_responses"]
    assert found["label"] == "descriptive" and found["status"] == "ok"
    assert found["values"]["models"] == [{"a": "medgemma_4b", "b": "medgemma_27b", "trials": 120}]
    assert found["values"]["replicates"] == []  # one replicate: nothing to compare
    assert "count each answer twice" in found["values"]["note"]
    check = next(c for c in report.checks if c.name == "reanalysis")
    assert check.status.name == "WARN", check.reason
    assert "models medgemma_4b and medgemma_27b alike on all 120 shared trial(s)" in check.reason
    html = (archive / "analysis" / "report.html").read_text("utf-8")
    assert (
        "Byte-identical responses (descriptive.identical_responses): models medgemma_4b "
        "and medgemma_27b: alike on all 120 shared trial(s)."
    ) in html


def reanalysis(archive: Path) -> Any:
    """The verifier's ``reanalysis`` check of ``archive`` (``verify._science.science_checks``)."""
    from verify._science import science_checks

    return next(c for c in science_checks(archive) if c.name == "reanalysis")


def test_a_posthoc_of_arms_over_different_variants_needs_a_variant(
    built: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """Issue 31: zs_direct ran two option orders, fs_direct one; ``ledger posthoc`` refuses to
    compare them until ``--variant`` names one both ran, and the verifier refuses a post-hoc
    event that compares them anyway (a forger's, re-signed)."""
    from tests.verify.test_archive_tamper import read_events, resign
    from verify import Status

    root = tmp_path / "study"
    shutil.copytree(built[0], root)
    key = built[2]

    def posthoc(name: str, *more: str) -> Any:
        return CliRunner().invoke(
            main,
            [
                "posthoc",
                str(root),
                name,
                "--contrast",
                "fs_direct",
                "zs_direct",
                "--test",
                "independent-t",
                "--reason",
                "few-shot against zero-shot",
                *more,
                "--key",
                str(key),
            ],
        )

    mixed = posthoc("mixed")
    assert mixed.exit_code != 0
    assert "the arms compared ran different variants (fs_direct: original; zs_direct: " in (
        mixed.output
    )
    assert "--variant (original)" in mixed.output
    unknown = posthoc("unknown", "--variant", "rotate-1")
    assert unknown.exit_code != 0 and "arm fs_direct has no scored trial" in unknown.output
    made = posthoc("same-order", "--variant", "original")
    assert made.exit_code == 0, made.output
    out = tmp_path / "archive"
    assert (
        CliRunner().invoke(main, ["export", str(root), str(out), "--key", str(key)]).exit_code == 0
    )
    events = read_events(out)
    body = next(e for e in events if e["kind"] == "analysis.posthoc")["body"]
    assert body["declared"]["variant"] == "original" and "(variant original)" in body["title"]
    assert body["values"]["n_x"] == body["values"]["n_y"] == 80  # 40 items x 2 models
    # the science checks alone: both assertions read the re-analysis only (the archive's
    # other checks are the `report` fixture's, on the honest archive)
    assert reanalysis(out).status is not Status.FAIL
    body["declared"]["variant"] = None  # a forger's: both orders of zs_direct against one
    resign(out, events)
    check = reanalysis(out)
    assert check.status is Status.FAIL
    assert "compares arms that ran different variants" in check.reason, check.reason


def test_the_viewer_shows_the_reason_and_the_copies(archive: Path) -> None:
    from starlette.testclient import TestClient

    from analysis.view._app import make_app
    from analysis.view._viewer import open_viewer

    viewer = open_viewer(archive, verify=False)
    page = TestClient(make_app(viewer), base_url="http://127.0.0.1").get("/").text
    assert "not applicable (GEE: the robust variance of model[T.medgemma_27b]" in page
    assert "Byte-identical responses (descriptive.identical_responses): models medgemma_4b" in page
