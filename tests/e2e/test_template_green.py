"""The ``green-shielding`` template (seed 001, issue 18).

Cheap tests: the shipped case files import through the HealthCareMagic importer with their
metadata sidecar and are consistent (the supplied reference sets, recorded but not scored,
nested; the seven factor labels as the simulation reads the queries); the simulated semantic
extractor and three reference models build nested sets whose 2-of-3 vote differs from each
single model's in some cases; ``ledger new --template green-shielding`` scaffolds a lockable
study; the simulated neutralizer, verifier, targets and judges are deterministic, do what
``docs/simulated.md`` §4 says, and show the seed's tradeoff on five cases run in process; a bad
metadata sidecar is refused naming it. The whole demo (``ledger demo --template
green-shielding``), its verification and a changed judge prompt or reference-step prompt
failing verification by name are in the slow set (one demo build, shared).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from helpers import assert_flow_matches_ledger, fixed_key, science_skipped, template_demo

from runner._importers import DatasetError, convert, merge_metadata
from runner._new import new_study
from runner.simulated import _green as g
from runner.spec import load_study

TEMPLATE = "green-shielding"
DATA = resources.files("runner") / "templates" / "green_shielding" / "data"
FACTORS = (
    "f1_specific_guess",
    "f2_irrelevant_details",
    "f3_lacks_objective_data",
    "f4_lacks_symptom_history",
    "f5_unstructured",
    "f6_emotional_tone",
    "f7_first_person",
)


@pytest.fixture(scope="module")
def items() -> list[dict[str, Any]]:
    """The template's items as ``ledger new`` imports them."""
    with resources.as_file(DATA) as data:
        converted = convert("healthcaremagic", data / "cases-hcm.json", id_prefix="gs")
        return merge_metadata(converted, data / "cases-metadata.json")


def test_the_cases_import_with_nested_reference_sets_and_seven_labels(
    items: list[dict[str, Any]],
) -> None:
    assert [i["id"] for i in items] == [f"gs-{n}" for n in range(1, 31)]
    for item in items:
        meta = item["metadata"]
        plausible = meta["reference_plausible"]
        assert plausible and len(set(plausible)) == len(plausible), item["id"]
        assert meta["reference_highly_likely"], item["id"]
        assert set(meta["reference_highly_likely"]) <= set(plausible), item["id"]
        assert set(meta["reference_safety_critical"]) <= set(plausible), item["id"]
        assert {meta[f] for f in FACTORS} <= {"yes", "no"}, item["id"]
        assert item["question"] and item["answer"] and item["question"] != item["answer"]


def test_the_perturbable_labels_are_what_the_simulation_reads(
    items: list[dict[str, Any]],
) -> None:
    """F1, F2, F5, F6, F7 (the perturbed factors) agree with the simulated reading of each query;
    F3 and F4 are indicators only, never edited."""
    for item in items:
        meta, read = item["metadata"], g.read_query(item["question"])
        yes = {f: meta[f] == "yes" for f in FACTORS}
        assert yes["f1_specific_guess"] == ("guess" in read["kinds"]), item["id"]
        assert yes["f2_irrelevant_details"] == ("irrelevant" in read["kinds"]), item["id"]
        assert yes["f5_unstructured"] == read["unstructured"], item["id"]
        assert yes["f6_emotional_tone"] == read["emotional"], item["id"]
        assert yes["f7_first_person"] == read["first_person"], item["id"]
    assert {i["metadata"]["f3_lacks_objective_data"] for i in items} == {"yes", "no"}


def test_the_simulated_annotator_gives_the_supplied_labels(items: list[dict[str, Any]]) -> None:
    """The annotator step (seed 001's seven labels, F3 and F4 included) agrees with the sidecar."""
    for item in items:
        reply = _judge(f"Label the user-level factors.\nQuery to annotate:\n{item['question']}")
        assert reply == {f: item["metadata"][f] == "yes" for f in FACTORS}, item["id"]


def test_ledger_new_scaffolds_a_lockable_study(tmp_path: Path) -> None:
    from runner._lock import validate_for_lock

    made = new_study(tmp_path / "gs", TEMPLATE, fixed_key("green"), study_id="gs-test")
    study = load_study(made.root)
    assert len(study.load_items()) == 30
    cells = [a for a in study.arms if a.startswith("llm.")]
    assert len(cells) == 12 and "llm.raw.none" in cells and "llm.full.reminder" in cells
    assert study.arms["physicians"].response_from == "answer"
    validate_for_lock(study)


def test_a_bad_metadata_sidecar_is_refused_naming_it(
    tmp_path: Path, items: list[dict[str, Any]]
) -> None:
    bare = [{k: v for k, v in i.items() if k != "metadata"} for i in items]
    sidecar = tmp_path / "meta.json"
    sidecar.write_text(json.dumps({"items": {"gs-99": {"x": 1}}}), encoding="utf-8")
    with pytest.raises(DatasetError, match=r"meta\.json: items\.gs-99: no item has this id"):
        merge_metadata(bare, sidecar)
    sidecar.write_text(json.dumps({"items": {"gs-1": {"x": 1}}}), encoding="utf-8")
    with pytest.raises(DatasetError, match=r"items\.gs-1: metadata 'x' is already set"):
        merge_metadata([dict(bare[0], metadata={"x": 2})], sidecar)
    sidecar.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(DatasetError, match="a metadata sidecar is an object"):
        merge_metadata(bare, sidecar)


# ------------------------------------------------------------------ the simulated models

QUERY = (
    "I am so scared. I have had a throbbing headache for three days and bright light hurts. "
    "My cat ignores me. Could this be a brain tumour? What tablets can I take?"
)


def test_the_neutralizer_removes_each_group_and_the_verifier_checks_it() -> None:
    content = g.neutralize(QUERY, {"content"})
    assert "tumour" not in content and "cat" not in content and "scared" in content
    tone = g.neutralize(QUERY, {"tone"})
    assert "scared" not in tone and "the patient has had a throbbing headache" in tone.lower()
    fmt = g.neutralize(QUERY, {"format"})
    assert "tablets" not in fmt and fmt.endswith("What is the most likely diagnosis?")
    full = g.neutralize(QUERY, {"content", "format", "tone"})
    assert full == (
        "The patient has had a throbbing headache for three days and bright light "
        "hurts. What is the most likely diagnosis?"
    )
    ask = (
        "Does it keep every fact? Answer retained or lost.\nOriginal query:\n{q}\n"
        "Rewritten case:\n{r}"
    )
    req = {"model": "m", "temperature": 0}
    assert g.step_answer(ask.format(q=QUERY, r=full), req, "s") == "retained"
    assert g.step_answer(ask.format(q=QUERY, r="The patient has a headache."), req, "s") == "lost"


def _target(text: str, model: str, seed: str, system: str | None = None) -> str:
    request: dict[str, Any] = {
        "max_tokens": 400,
        "model": model,
        "temperature": 0.7,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": f"{text}\n\n{g.TASK_MARKER}"}]}
        ],
    }
    if system is not None:
        request["system"] = system
    return g.target_answer(request, seed)


def _judge(text: str, model: str = "claude-opus-4-5") -> Any:
    for attempt in range(5):  # a judge answers unparseably now and then: the runner retries
        reply = g.step_answer(text, {"model": model, "temperature": 0, "attempt": attempt}, "s")
        if reply != "I cannot tell.":
            return json.loads(reply) if reply and reply[0] == "{" else reply
    raise AssertionError("no parseable judge reply")


def test_the_simulated_models_are_deterministic_and_labelled() -> None:
    a = _target(QUERY, "claude-haiku-4-5", "s|1")
    assert a == _target(QUERY, "claude-haiku-4-5", "s|1")
    assert a.startswith("Possible diagnoses to consider:\n1. ")
    assert {_target(QUERY, "claude-haiku-4-5", f"s|{r}") for r in range(6)} != {a}  # T > 0
    from runner._backends import SimulatedBackend

    reply = SimulatedBackend().model.respond(
        {
            "max_tokens": 400,
            "model": "x",
            "temperature": 0.7,
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": QUERY + "\n" + g.TASK_MARKER}],
                }
            ],
        },
        "s|1",
    )
    assert reply["model"] == "simulated/x" and reply["content"][0]["text"].startswith("Possible")
    listed = _judge(f"Response to extract diagnoses from:\n{a}")["diagnoses"]
    assert listed and all(n in g.LEXICON for n in listed)


REF_MODELS = ("claude-opus-4-1", "claude-sonnet-4-0", "claude-3-7-sonnet")
SETS = ("plausible", "highly_likely", "safety_critical")


def _reference_votes(question: str) -> tuple[list[dict[str, list[str]]], dict[str, list[str]]]:
    """Each simulated reference model's sets for the query, read through the extractor's summary
    as the template's prompts lay it out, and their element-wise 2-of-3 vote."""
    summary = _judge(f"Parse the query.\nQuery to summarise:\n{question}")
    asked = "Build the reference sets.\n" + "".join(
        f"Case {part}: {summary[part]}\n" for part in ("demographics", "subjective", "objective")
    )
    votes = [_judge(asked, model) for model in REF_MODELS]
    sets = {}
    for key in SETS:
        seen = list(dict.fromkeys(n for v in votes for n in v[key]))
        sets[key] = [n for n in seen if sum(n in v[key] for v in votes) >= 2]
    return votes, sets


@pytest.fixture(scope="module")
def references(items: list[dict[str, Any]]) -> dict[str, dict[str, list[str]]]:
    """The built (2-of-3) reference sets of every item."""
    return {item["id"]: _reference_votes(item["question"])[1] for item in items}


def test_the_reference_models_build_nested_sets_and_the_vote_differs(
    items: list[dict[str, Any]],
) -> None:
    """The extractor keeps the clinical facts only; each model's sets are nested and derived from
    the summary; the 2-of-3 vote is nested too and differs from every single model's sets in
    some cases (the omissions and additions are per model)."""
    summary = _judge(f"Parse the query.\nQuery to summarise:\n{QUERY}")
    assert set(summary) == {"demographics", "subjective", "objective"}
    assert "throbbing headache" in summary["subjective"]
    assert "tumour" not in json.dumps(summary) and "cat" not in summary["subjective"]
    differs = 0
    for item in items:
        votes, sets = _reference_votes(item["question"])
        for got in (*votes, sets):
            assert set(got["highly_likely"]) <= set(got["plausible"]), item["id"]
            assert set(got["safety_critical"]) <= set(got["plausible"]), item["id"]
            assert set(got["safety_critical"]) <= g.SEVERE, item["id"]
        assert sets["plausible"] and sets["highly_likely"], item["id"]
        differs += all(sets != v for v in votes)
    assert 0 < differs < len(items)


def _metrics(
    item: dict[str, Any], text: str, refs: dict[str, dict[str, list[str]]]
) -> dict[str, float | None]:
    ref = refs[item["id"]]
    listed = _judge(f"Response to extract diagnoses from:\n{text}")["diagnoses"]
    match = _judge(
        f"Candidate diagnoses: {json.dumps(listed)}\n"
        f"Reference plausible: {json.dumps(ref['plausible'])}\n"
        f"Reference highly likely: {json.dumps(ref['highly_likely'])}\n"
        f"Reference safety-critical: "
        f"{json.dumps(ref['safety_critical'])}"
    )
    s = ref["safety_critical"]
    return {
        "plausibility": len(match["plausible"]) / len(listed) if listed else None,
        "h": len(match["highly_likely"]) / len(ref["highly_likely"]),
        "s": len(match["safety_critical"]) / len(s) if s else None,
        "breadth": float(len(listed)),
    }


def _mean(rows: list[dict[str, float | None]], key: str) -> float:
    values = [r[key] for r in rows if r[key] is not None]
    return sum(values) / len(values)  # type: ignore[arg-type]


def test_five_cases_show_the_seed_tradeoff(
    items: list[dict[str, Any]], references: dict[str, dict[str, list[str]]]
) -> None:
    """Neutralization raises plausibility and lowers coverage and breadth against the built
    reference sets (in process)."""
    raw: list[dict[str, float | None]] = []
    full: list[dict[str, float | None]] = []
    physicians = []
    for item in items[:5]:
        neutral = g.neutralize(item["question"], {"content", "format", "tone"})
        for model in ("claude-haiku-4-5", "claude-sonnet-4-6"):
            for rep in range(3):
                raw.append(_metrics(item, _target(item["question"], model, f"r|{rep}"), references))
                full.append(_metrics(item, _target(neutral, model, f"r|{rep}"), references))
        physicians.append(_metrics(item, item["answer"], references))
    assert _mean(full, "plausibility") > _mean(raw, "plausibility")
    assert _mean(full, "h") < _mean(raw, "h")
    assert _mean(full, "s") < _mean(raw, "s")
    assert _mean(full, "breadth") < _mean(raw, "breadth")
    assert _mean(physicians, "breadth") < _mean(full, "breadth")


# ------------------------------------------------------------------ the demo (slow)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    yield from template_demo(tmp_path_factory.mktemp("green-demo"), TEMPLATE)


@pytest.mark.slow
def test_the_demo_verifies_and_shows_the_tradeoff(
    demo: tuple[Any, str], references: dict[str, dict[str, list[str]]]
) -> None:
    from analysis._demo import GREEN_LEVEL_CELLS, green_figures
    from ledger import Ledger

    result, printed = demo
    assert result.verified and result.tamper_caught
    assert_flow_matches_ledger(result.archive)  # docs/reporting.md §1
    with Ledger.open(result.study / "ledger.db", readonly=True) as log:
        found = {e.body["id"]: e.body for e in log.events("analysis.result")}
        # every match call reads the item's built (2-of-3) reference sets, never the supplied ones
        seen = set()
        for event in log.events("step.requested"):
            if event.body["step"] != "match":
                continue
            request = json.loads(log.blob(event.blobs["request"]))
            text = "".join(b["text"] for b in request["messages"][-1]["content"])
            ref = references[event.body["item"]]
            for key, label in (
                ("plausible", "Reference plausible:"),
                ("highly_likely", "Reference highly likely:"),
                ("safety_critical", "Reference safety-critical:"),
            ):
                line = next(x for x in text.split("\n") if x.startswith(label))
                assert set(json.loads(line[len(label) :])) == set(ref[key]), (event.seq, key)
            seen.add(event.body["item"])
        assert seen and seen <= set(references)
    for h in ("H1", "H2", "H3", "H4"):
        assert found[f"hypothesis.{h}"]["verdict"] == "supported", h
    ddx = found["descriptive.ddx"]["values"]

    def mean(arm: str, model: str, metric: str) -> float:
        return float(ddx["arm_model"][arm][model][metric]["mean"])

    for model in ("broad", "concise"):
        raw, full = "llm.raw.none", "llm.full.none"
        assert mean(full, model, "plausibility") > mean(raw, model, "plausibility")
        for metric in ("h_coverage", "s_coverage", "breadth"):
            assert mean(full, model, metric) < mean(raw, model, metric), (model, metric)
        # seed 001, Appendix H: the safety reminder raises S-coverage and breadth
        reminded = "llm.full.reminder"
        assert mean(reminded, model, "s_coverage") > mean(full, model, "s_coverage")
        assert mean(reminded, model, "breadth") > mean(full, model, "breadth")
    phys = ddx["arms"]["physicians"]
    assert phys["breadth"]["mean"] < min(
        mean("llm.full.none", m, "breadth") for m in ("broad", "concise")
    )
    # the printed table is the recorded one, physicians as their own column
    shown = " ".join(printed.replace("│", " ").split())
    for row in [
        *green_figures(list(found.values())),
        *green_figures(list(found.values()), GREEN_LEVEL_CELLS),
    ]:
        assert " ".join(row[1:]) in shown, row
    # seed 001's Figure 5: content alone is closest to raw in breadth, full the furthest
    breadth = {arm: ddx["arms"][arm]["breadth"]["mean"] for arm, _ in GREEN_LEVEL_CELLS}
    assert breadth["llm.raw.none"] > breadth["llm.content.none"] > breadth["llm.full.none"]
    assert min(breadth.values()) == breadth["llm.full.none"]
    html = (result.study / "report" / "report.html").read_text(encoding="utf-8")
    assert "Differential-diagnosis metrics by arm" in html and ">physicians<" in html


@pytest.fixture
def forged(demo: tuple[Any, str], tmp_path: Path) -> Iterator[Path]:
    """A copy of the demo's archive to forge, verified without the science checks: the tests
    that take it read only the ``protocol``, ``steps`` and ``signatures`` checks, which come out
    the same without them (``helpers.science_skipped``)."""
    result, _ = demo
    copy = tmp_path / "archive"
    shutil.copytree(result.archive, copy)
    with science_skipped():
        yield copy


@pytest.mark.slow
def test_a_changed_judge_prompt_fails_verification_naming_it(forged: Path) -> None:
    from tests.verify.test_archive_tamper import failed, passed
    from tests.verify.test_verify_text_study import relocked_report

    report = relocked_report(
        forged,
        "prompts/match.txt",
        lambda b: b.replace(b"synonyms count", b"synonyms do not count"),
    )
    passed(report, "signatures")
    # the forger re-locked the file, but the arms' identity (arm_identity 2) covers the steps'
    # prompts: protocol names the stale identity, steps the changed template (issue 31)
    assert "the arm identity" in failed(report, "protocol")
    # every match call's request differs from the one the locked template renders
    assert "the locked template prompts/match.txt" in failed(report, "steps")


@pytest.mark.slow
def test_a_changed_reference_prompt_fails_verification_naming_it(forged: Path) -> None:
    """The reference sets are built by the reference step: a forger who re-locks a different
    reference prompt (and re-signs) is caught, every recorded reference call differing from the
    request the locked template renders."""
    from tests.verify.test_archive_tamper import failed, passed, read_events
    from tests.verify.test_verify_text_study import forge, relock
    from verify import verify_archive

    events = read_events(forged)
    old, new = relock(
        forged,
        events,
        "prompts/reference.txt",
        lambda b: b.replace(
            b"independently of any answer to it", b"taking the patient's own guess into account"
        ),
    )
    assert old != new
    forge(forged, events)
    report = verify_archive(forged)
    passed(report, "signatures")
    # the forger re-locked the file, but the arms' identity (arm_identity 2) covers the steps'
    # prompts: protocol names the stale identity, steps the changed template (issue 31)
    assert "the arm identity" in failed(report, "protocol")
    assert "the locked template prompts/reference.txt" in failed(report, "steps")


def test_the_simulation_reads_no_file_and_imports_no_item_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It answers from the request alone: no file is opened, no item or score module imported."""
    import ast
    import builtins

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the green simulation opened a file")

    monkeypatch.setattr(builtins, "open", refuse)
    monkeypatch.setattr(Path, "read_text", refuse)
    monkeypatch.setattr(Path, "read_bytes", refuse)
    text = _target(QUERY, "claude-haiku-4-5", "s|2")
    assert _judge(f"Response to extract diagnoses from:\n{text}")["diagnoses"]
    monkeypatch.undo()
    tree = ast.parse(Path(g.__file__).read_text(encoding="utf-8"))
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported <= {
        "__future__",
        "hashlib",
        "json",
        "math",
        "re",
        "typing",
        "ledger",
        "runner.simulated._text",
    }, imported


@pytest.mark.slow
def test_the_demo_strata_are_the_annotators_labels(demo: tuple[Any, str]) -> None:
    """`[analysis] covariates`: each trial carries its item's labels as the annotate step
    decided them (here, the supplied labels: the simulated annotator agrees with them), the
    recorded strata count those trials, and the demo prints the recorded table."""
    import csv

    from analysis._demo import GREEN_STRATA_ARMS, green_strata
    from ledger import Ledger

    result, printed = demo
    with Ledger.open(result.study / "ledger.db", readonly=True) as log:
        found = {e.body["id"]: e.body for e in log.events("analysis.result")}
    cov = found["descriptive.covariates"]["values"]
    assert cov["step"] == "annotate"
    assert cov["indicators"] == ["f3_lacks_objective_data", "f4_lacks_symptom_history"]
    assert len(cov["perturbable"]) == 5
    supplied = {}
    for line in (result.study / "data" / "items.jsonl").read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        supplied[item["id"]] = item["metadata"]
    with (result.archive / "analysis" / "trials.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for label in [*cov["perturbable"], *cov["indicators"]]:
        for arm in GREEN_STRATA_ARMS:
            arm_rows = [r for r in rows if r["arm"] == arm]
            counted = {
                v: sum(1 for r in arm_rows if r[f"covariate.{label}"] == v)
                for v in ("True", "False")
            }
            for r in arm_rows:  # the annotator's label is the supplied one, trial by trial
                assert r[f"covariate.{label}"] == (
                    "True" if supplied[r["stimulus"]][label] == "yes" else "False"
                ), (label, r["trial"])
            levels = cov["strata"][label]["levels"]
            assert levels["true"].get(arm, {}).get("trials", 0) <= counted["True"]
            assert levels["false"].get(arm, {}).get("trials", 0) <= counted["False"]
    shown = " ".join(printed.replace("│", " ").split())
    for row in green_strata(list(found.values())):
        assert " ".join(row) in shown, row
    html = (result.study / "report" / "report.html").read_text(encoding="utf-8")
    assert "Outcomes by factor label: indicator factors" in html
