"""The medmcqa-prompt-sensitivity template as studies: `ledger new`, lock, the simulated
phenomena seed 002 reports, and (slow) `ledger demo --template medmcqa-prompt-sensitivity` end
to end with forgeries of an item, a variant definition and a few-shot example.

The default-set tests are cheap: the template is scaffolded and locked once per module, and the
phenomena are measured on the rendered requests with the simulated model directly (no ledger),
through the statistics of ``analysis.mcq``; every threshold compares two computed figures.
"""

from __future__ import annotations

import csv
import io
import math
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from helpers import assert_flow_matches_ledger, science_skipped
from locations import REPO

from analysis._parse import parse_multiple_choice
from analysis.mcq import _stats as mcq
from ledger import SigningKey
from runner._lock import lock_study
from runner._new import SUITES, NewStudy, new_study, new_template
from runner._render import Renderer
from runner.simulated._text import SimulatedTextModel, TextParams, read_prompt
from runner.spec import load_study

TEMPLATE = "medmcqa-prompt-sensitivity"
LABELS = "ABCD"
ORDERS = ("original", "shuffle-42", "rotate-1", "rotate-2", "swap")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("mcq-template")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
        yield base


@pytest.fixture(scope="module")
def suite(home: Path) -> list[NewStudy]:
    key = SigningKey.generate("prompt-ledger.local/seed002/owner")
    return new_template(home / "seed002", TEMPLATE, key, study_id="seed002")


# ---------------------------------------------------------------- ledger new, lock


def test_ledger_new_writes_each_study_of_the_template(suite: list[NewStudy], home: Path) -> None:
    root = home / "seed002"
    assert [s.root for s in suite] == [root / part for part in SUITES[TEMPLATE]]
    assert [s.study_id for s in suite] == [f"seed002-{part}" for part in SUITES[TEMPLATE]]
    origins = [f"prompt-ledger.local/seed002-{p}" for p in SUITES[TEMPLATE]]
    assert [s.origin for s in suite] == origins
    assert (root / "README.md").is_file()
    for made in suite:
        assert made.ledger.is_file() and (made.root / "study.toml").is_file()
        assert not (made.root / "studies").exists() and not (made.root / "stimuli").exists()
        study = load_study(made.root)
        assert study.id == made.study_id and len(study.models) == 2


def test_each_study_of_the_template_locks(suite: list[NewStudy], home: Path) -> None:
    key = SigningKey.generate("prompt-ledger.local/seed002/owner")
    for made in suite:
        root = home / "locked" / made.root.name
        shutil.copytree(made.root, root, ignore=shutil.ignore_patterns("ledger.db"))
        locked = lock_study(root, key)
        study = load_study(root)
        # every arm on both models, every item, each variant it runs, each replicate
        expected = sum(
            2
            * len(study.load_items())
            * max(1, len(study.arm_variants(arm)))
            * (study.arms[arm].replicates or study.replicates)
            for arm in study.arms
        )
        assert locked.trials == expected == len(study.trial_ids()), made.root.name


def test_the_mcq_study_registers_seed_002s_statistics(suite: list[NewStudy]) -> None:
    study = load_study(suite[0].root)
    tests = {h.test for h in study.hypotheses}
    assert tests == {"mcnemar", "position-bias", "flip-rate", "voting", "self-consistency", "gee"}
    assert {v.name for v in study.variant_list()} == set(ORDERS) | {"shuffle-123", "shuffle-456"}
    assert len(study.arms) == 11
    review = study.reviews[0]
    assert (review.failed, review.succeeded) == (("zs_cot", "original"), ("zs_direct", "original"))


def test_a_template_of_several_studies_is_refused_by_new_study(home: Path) -> None:
    from runner._lock import StudyError

    with pytest.raises(StudyError, match=r"is 4 studies .*new_template"):
        new_study(home / "one", TEMPLATE)
    assert not (home / "one").exists()


def test_new_template_refuses_a_directory_that_is_not_empty(home: Path) -> None:
    from runner._lock import StudyError

    target = home / "busy"
    target.mkdir()
    (target / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(StudyError, match="not empty"):
        new_template(target, TEMPLATE, SigningKey.generate("x.example/owner"))
    assert [p.name for p in target.iterdir()] == ["notes.txt"]


# ---------------------------------------------------------------- the simulated phenomena


def _answer_original(varied: Any, item: Any, letter: str | None) -> str | None:
    if letter is None:
        return None
    text = varied.options[LABELS.index(letter)]
    return LABELS[list(item.options).index(text)]


@pytest.fixture(scope="module")
def trials(suite: list[NewStudy]) -> mcq.Trials:
    """The mcq study's zero-shot and few-shot arms under the five voting orders, answered by
    the simulated model from the rendered requests (the study's own renderer), as the MCQ
    statistics' trials table; plus cloze letters from the model's letter distribution."""
    renderer = Renderer(load_study(suite[0].root))
    assert renderer.items is not None
    sim = SimulatedTextModel()
    rows = []
    cells = [("zs_direct", v) for v in ORDERS] + [("fs_direct", "original"), ("zs_cot", "original")]
    for model in renderer.study.models or {}:
        for arm, variant in cells:
            for item in renderer.items:
                varied = renderer.varied_item(item.id, variant)
                body = renderer.body(arm, model, item.id, variant)
                text = "".join(b["text"] for b in sim.respond(body, "seed")["content"])
                letter = parse_multiple_choice(text, LABELS, mode="first-token").answer
                shares = dict(sim.letter_distribution(body))
                cloze = max(LABELS, key=lambda lab: (shares[lab], -LABELS.index(lab)))
                for kind, said in (("text", letter), ("cloze", cloze)):
                    rows.append(
                        {
                            "trial": f"{kind}|{arm}|{model}|{item.id}|{variant}",
                            "item": item.id,
                            "arm": f"{arm}/{kind}",
                            "model": model,
                            "variant": variant,
                            "rep": 1,
                            "key": varied.answer,
                            "key_original": item.answer,
                            "letter": said,
                            "answer": _answer_original(varied, item, said),
                            "correct": said == varied.answer,
                            "parse": "ok" if said is not None else "unparseable",
                        }
                    )
    return mcq.check_trials(pd.DataFrame(rows))


MODELS = ("medgemma_4b", "medgemma_27b")


@pytest.mark.parametrize("model", MODELS)
def test_few_shot_examples_raise_position_bias(trials: mcq.Trials, model: str) -> None:
    zero = mcq.position_metrics(trials, ("zs_direct/text", "original", model))
    few = mcq.position_metrics(trials, ("fs_direct/text", "original", model))
    assert few.bias > zero.bias + 0.1, (few.bias, zero.bias)
    # towards the first letter, the seed's Appendix C
    assert few.pred_counts[0] == max(few.pred_counts)


@pytest.mark.parametrize("model", MODELS)
def test_reordering_the_options_flips_answers(trials: mcq.Trials, model: str) -> None:
    for variant in ORDERS[1:]:
        flips = mcq.flip_rate_between(
            trials,
            ("zs_direct/text", "original", model),
            ("zs_direct/text", variant, model),
            iterations=200,
        )
        assert flips.rate > 0.1 and flips.lower > 0, (variant, flips.rate)


@pytest.mark.parametrize("model", MODELS)
def test_voting_over_orders_beats_the_mean_single_order(trials: mcq.Trials, model: str) -> None:
    vote = mcq.permutation_vote(trials, "zs_direct/text", model, list(ORDERS))
    assert vote.accuracy > vote.consistency.order_mean, (vote.accuracy, vote.consistency)
    # and the mean single order is above chance: the reader knows some items, by content
    assert vote.consistency.order_mean > 1 / len(LABELS)


@pytest.mark.parametrize("model", MODELS)
def test_cloze_reads_the_readers_answer_with_less_position_bias(
    trials: mcq.Trials, model: str
) -> None:
    text = mcq.position_metrics(trials, ("zs_direct/text", "original", model))
    cloze = mcq.position_metrics(trials, ("zs_direct/cloze", "original", model))
    accuracy = mcq.accuracy_by_cell(trials)
    acc = {(c.arm, c.variant, c.model): c.accuracy for c in accuracy}
    assert acc[("zs_direct/cloze", "original", model)] >= acc[("zs_direct/text", "original", model)]
    assert cloze.bias <= text.bias


def test_chain_of_thought_and_examples_move_the_capture_and_the_slips(
    suite: list[NewStudy],
) -> None:
    """The CoT effect and the few-shot prior, from the prompt alone: CoT slips less and is
    captured by position more; examples strengthen the capture."""
    renderer = Renderer(load_study(suite[0].root))
    sim = SimulatedTextModel()
    body = {
        arm: renderer.body(arm, "medgemma_4b", "m07", "original")
        for arm in ("zs_direct", "zs_cot", "fs_direct")
    }
    assert read_prompt(body["zs_cot"]).cot and read_prompt(body["fs_direct"]).shots == 3
    assert sim.slip_probability(body["zs_cot"]) < sim.slip_probability(body["zs_direct"])
    capture = {arm: sim.capture_probability(b) for arm, b in body.items()}
    assert capture["zs_direct"] < capture["zs_cot"] < capture["fs_direct"]
    p = TextParams()
    assert capture["fs_direct"] == pytest.approx(
        1 / (1 + math.exp(-(p.prior_base + 3 * p.prior_shot)))
    )


# ---------------------------------------------------------------- the demo (slow)


@pytest.fixture(scope="module")
def demo(shared_demo: Callable[..., tuple[Any, str]]) -> tuple[Any, str]:
    """The template's demo, built once per run for this module and the browser tests."""
    return shared_demo(TEMPLATE, width=200)


@pytest.mark.slow
def test_the_template_demo_verifies_and_shows_the_phenomena(demo: tuple[Any, str]) -> None:
    from ledger import Ledger

    result, printed = demo
    assert result.verified and result.tamper_caught
    for part in SUITES[TEMPLATE]:
        assert (result.archive / part / "MANIFEST.sha256").is_file()
        assert_flow_matches_ledger(result.archive / part)  # docs/reporting.md §1
    with Ledger.open(result.study / "mcq" / "ledger.db", readonly=True) as log:
        found = {e.body["id"]: e.body for e in log.events("analysis.result")}
    bias = found["hypothesis.H5"]["values"]
    assert bias["bias_a"] > bias["bias_b"]  # few-shot over zero-shot
    for name in ("H6-shuffle", "H6-rotate-1", "H6-rotate-2", "H6-swap"):
        assert found[f"hypothesis.{name}"]["values"]["estimate"] > 0.1
    vote = found["hypothesis.H7"]["values"]
    assert vote["accuracy_vote"] > vote["accuracy_orders"]
    # the printed table shows the recorded figures
    assert f"fs_direct {bias['bias_a']:.3f}, zs_direct {bias['bias_b']:.3f}" in printed
    assert f"vote {100 * vote['accuracy_vote']:.1f}% vs mean per order" in printed
    # the report's table of seed 002's registered statistics shows them too
    html = (result.study / "mcq" / "report" / "report.html").read_text(encoding="utf-8")
    assert (
        f"vote {100 * vote['accuracy_vote']:.1f}% vs mean order "
        f"{100 * vote['accuracy_orders']:.1f}%"
    ) in html
    assert f"bias {bias['bias_a']:.4g} vs {bias['bias_b']:.4g}" in html
    # the declared review sample: CoT wrong, direct right, exported for coding
    review = found["review.cot_hurt"]["values"]
    assert review["size"] == min(10, review["n_candidates"]) > 0
    rows = list(
        csv.DictReader(
            io.StringIO(
                (result.archive / "mcq" / "analysis" / "review" / "cot_hurt.csv").read_text("utf-8")
            )
        )
    )
    assert [r["failed_trial"] for r in rows] == [c["failed_trial"] for c in review["cases"]]
    assert all(r["failed_answer"] != r["key_original"] == r["succeeded_answer"] for r in rows)
    assert all(r["codes"] == "" and r["failed_response"] for r in rows)


@pytest.fixture
def forged(demo: tuple[Any, str], tmp_path: Path) -> Iterator[Path]:
    """A copy of the demo's archive to forge, verified without the science checks: the tests
    that take it read only the ``protocol``, ``requests``, ``report`` and ``signatures``
    checks, which come out the same without them (``helpers.science_skipped``)."""
    result, _ = demo
    copy = tmp_path / "mcq"
    shutil.copytree(result.archive / "mcq", copy)
    with science_skipped():
        yield copy


@pytest.mark.slow
def test_a_changed_item_fails_verification_naming_it(forged: Path) -> None:
    from tests.verify.test_archive_tamper import failed, passed
    from tests.verify.test_verify_text_study import relocked_report

    report = relocked_report(
        forged, "data/items.jsonl", lambda b: b.replace(b"paracetamol", b"ibuprofen")
    )
    passed(report, "signatures")
    assert "data/items.jsonl" in failed(report, "protocol")
    assert "|m01|" in failed(report, "requests")


@pytest.mark.slow
def test_a_changed_variant_definition_fails_verification_naming_it(forged: Path) -> None:
    from tests.verify.test_archive_tamper import failed, passed, read_events
    from tests.verify.test_verify_text_study import forge
    from verify import verify_archive

    events = read_events(forged)
    protocol = next(e for e in events if e["kind"] == "protocol.locked")
    protocol["body"]["variants"]["shuffle-42"]["seed"] = "43"
    forge(forged, events)
    report = verify_archive(forged)
    passed(report, "signatures")
    assert "|shuffle-42|" in failed(report, "requests")


@pytest.mark.slow
def test_a_changed_few_shot_example_fails_verification_naming_it(forged: Path) -> None:
    from tests.verify.test_archive_tamper import failed, passed, read_events
    from tests.verify.test_verify_text_study import forge, relock
    from verify import verify_archive

    events = read_events(forged)
    old, new = relock(
        forged,
        events,
        "data/examples.jsonl",
        lambda b: b.replace(b"cholecystokinin", b"gastrin", 1),
    )
    assert old != new
    forge(forged, events)
    report = verify_archive(forged)
    passed(report, "signatures")
    assert "data/examples.jsonl" in failed(report, "protocol")
    assert "fs_" in failed(report, "requests")


def test_the_docs_numbers_of_the_phenomena_are_the_models() -> None:
    """docs/simulated.md §2: capture shares and knowledge coverage, recomputed."""
    from runner.simulated._text import knowledge_coverage

    path = REPO / "docs" / "simulated.md"
    doc = " ".join(path.read_text(encoding="utf-8").split())
    p = TextParams()

    def pct(logit: float) -> str:
        return f"{round(100 / (1 + math.exp(-logit)))} %"

    assert (
        f"`sigmoid({p.prior_base} + {p.prior_shot}*examples + {p.prior_cot}*[step by step])` "
        f"({pct(p.prior_base)} for a bare prompt, {pct(p.prior_base + p.prior_cot)} asked to "
        f"think step by step, {pct(p.prior_base + 3 * p.prior_shot)} with three few-shot "
        "examples)"
    ) in doc
    assert f"between {round(100 * p.knowledge_low)} % and {round(100 * p.knowledge_high)} %" in doc
    for model in ("google/medgemma-4b-it", "google/medgemma-27b-text-it"):
        assert f"`{model}` knows about {round(100 * knowledge_coverage(model))} %" in doc
    assert f"less `{p.weight_known}*[from knowledge]`" in doc


def test_the_demo_rows_read_the_recorded_values() -> None:
    """suite_figures: one row per seed-002 result, from its recorded values alone."""
    from analysis._demo import suite_figures

    plan = {
        "hypotheses": [
            {"id": "B", "test": "position-bias", "contrast": ["few", "zero"]},
            {"id": "F", "test": "flip-rate", "arm": "zero", "variants": ["original", "rot1"]},
            {"id": "V", "test": "voting", "arm": "zero", "variants": ["original", "rot1", "swap"]},
            {"id": "M", "test": "mcnemar", "contrast": ["few", "zero"]},
        ]
    }
    results = [
        {
            "hypothesis": "B",
            "status": "ok",
            "verdict": "supported",
            "values": {"bias_a": 0.4, "bias_b": 0.1},
        },
        {
            "hypothesis": "F@m1",
            "status": "ok",
            "verdict": "supported",
            "values": {"estimate": 0.375},
        },
        {"hypothesis": "V", "status": "failed", "error": "no complete group"},
        {"hypothesis": "M", "status": "ok", "verdict": "supported", "values": {}},
        {"hypothesis": None, "status": "ok"},
    ]
    assert suite_figures(results, plan) == [
        ("B", "position-bias", "few vs zero", "few 0.400, zero 0.100", "supported"),
        ("F@m1", "flip-rate", "zero: original vs rot1", "37.5% of pairs (answer)", "supported"),
        ("V", "voting", "zero: 3 orders", "not computed: no complete group", ""),
    ]


@pytest.mark.slow
def test_a_changed_figure_in_the_report_fails_verification_naming_it(forged: Path) -> None:
    from tests.verify.test_archive_tamper import failed
    from verify import verify_archive

    report = forged / "analysis" / "report.html"
    html = report.read_text(encoding="utf-8")
    number = html.index(">vote ") + len(">vote ")  # the first voting row's vote accuracy
    digit = "1" if html[number] != "1" else "2"
    report.write_text(html[:number] + digit + html[number + 1 :], encoding="utf-8")
    reason = failed(verify_archive(forged), "report")
    assert "statistic: the report says 'vote " in reason, reason


def test_the_template_demo_refuses_replicates(tmp_path: Path) -> None:
    """--replicates shapes the tumbling-E demo only: with the template it is refused, not
    ignored, and nothing is written."""
    from click.testing import CliRunner

    from ledger.cli import main

    out = CliRunner().invoke(
        main, ["demo", str(tmp_path / "d"), "--template", TEMPLATE, "--replicates", "3"]
    )
    assert out.exit_code == 2
    assert "--replicates does not apply to the medmcqa-prompt-sensitivity demo" in out.output
    assert not (tmp_path / "d").exists()
