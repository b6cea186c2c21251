"""Differential-diagnosis lists (issue 18, ``docs/scoring.md`` §12, ``docs/analysis.md`` §9).

The study of ``tests/support/ddx_study.py`` (a reference item step voted element-wise by three
simulated models, a list extractor, a matcher voted by three, a grounding and an uncertainty judge;
two target models under two arms) locks, runs, is scored, analysed, exported and verified. Every
metric is re-derived here by a direct implementation of the documented formulas; each bad
input is a named test; a changed reference set, judge prompt or late reference call fails
verification naming it.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from ddx_study import STEPS, SUPPLIED_MATCH, items, spec_text, write_study
from helpers import fixed_key, science_skipped
from hypothesis import given, settings
from hypothesis import strategies as st
from locations import REPO

from analysis._ddx import metrics
from ledger import Ledger
from ledger.cli import main
from runner.steps._core import aggregate, aggregate_sets
from tests.runner.test_steps_archive import replace_locked
from tests.verify.test_archive_tamper import failed, passed, read_events, resign
from verify import _ddx as vddx
from verify import _steps as vsteps
from verify import verify_archive

KEY = fixed_key("ddx.example/owner")
METRICS = (
    "plausibility",
    "h_coverage",
    "s_coverage",
    "breadth",
    "grounding_rate",
    "indirect_rate",
    "uncertainty",
)


def invoke(*args: str | Path) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def refused(root: Path) -> str:
    """Lock ``root``; assert it is refused with nothing written; the message."""
    key = root.parent / "owner.key"
    if not key.exists():
        KEY.save(key)
    result = CliRunner().invoke(main, ["lock", str(root), "--key", str(key)])
    assert result.exit_code != 0, result.output
    assert not (root / "ledger.db").exists()
    return result.output


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("ddx-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(path))
        yield path


@pytest.fixture(scope="module")
def study(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """lock, run (simulated), score, unblind, analyze, export: the study and its archive."""
    base = tmp_path_factory.mktemp("ddx")
    root = write_study(base / "study")
    key = base / "owner.key"
    KEY.save(key)
    for command in ("lock", "run", "score", "unblind", "analyze"):
        extra = ["--backend", "simulated"] if command == "run" else []
        invoke(command, root, *extra, "--key", key)
    invoke("export", root, base / "archive", "--key", key)
    return root


@pytest.fixture()
def archive(study: Path, tmp_path: Path) -> Path:
    target = tmp_path / "archive"
    shutil.copytree(study.parent / "archive", target)
    return target


def scored(root: Path) -> list[dict[str, Any]]:
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        return [e.body for e in log.events("trial.scored")]


# ------------------------------------------------------------------ a direct implementation


def norm(text: str) -> str:
    """scoring.md §12 / prompts.md §8.3, written again: NFC, casefold, NFC, one space."""
    return " ".join(
        unicodedata.normalize("NFC", unicodedata.normalize("NFC", text).casefold()).split()
    )


def direct(record: dict[str, Any]) -> dict[str, Any]:
    """Every metric of a ddx record from its decisions, by the documented formulas."""
    steps = record["steps"]
    listed = steps["list"]["decision"]
    if listed is None:
        return dict.fromkeys(METRICS)
    L = list(dict.fromkeys(n for n in map(norm, listed["diagnoses"]) if n))
    ref = record["reference"]
    H = {norm(x) for x in ref["highly_likely"]} - {""}
    S = {norm(x) for x in ref["safety_critical"]} - {""}
    match = steps["match"]["decision"]
    out: dict[str, Any] = {"breadth": len(L)}
    if match is None:
        out.update(plausibility=None, h_coverage=None, s_coverage=None)
    else:
        P = {norm(x) for x in match["plausible"]} & set(L)
        out["plausibility"] = len(P) / len(L) if L else None
        out["h_coverage"] = (
            len({norm(x) for x in match["highly_likely"]} & H) / len(H) if H else None
        )
        out["s_coverage"] = (
            len({norm(x) for x in match["safety_critical"]} & S) / len(S) if S else None
        )
    ground = steps["grounding"]["decision"]
    for name, member in (("grounding_rate", "grounded"), ("indirect_rate", "indirect")):
        out[name] = (
            len({norm(x) for x in ground[member]} & set(L)) / len(L)
            if ground is not None and L
            else None
        )
    doubt = steps["uncertainty"]["decision"]
    out["uncertainty"] = None if doubt is None else int(doubt == "uncertain")
    return out


# ------------------------------------------------------------------ end to end


def test_the_study_runs_is_scored_analysed_and_verifies(study: Path) -> None:
    report = verify_archive(study.parent / "archive")
    assert report.ok, [c for c in report.checks if c.status.name == "FAIL"]
    bodies = scored(study)
    assert len(bodies) == 24 and {b["parser"] for b in bodies} == {"ddx"}
    assert {b["status"] for b in bodies} <= {"ok", "unparseable"}


def test_every_metric_matches_a_direct_implementation(study: Path) -> None:
    bodies = scored(study)
    for body in bodies:
        record = body["ddx"]
        want = direct(record)
        got = record["metrics"]
        assert set(got) == set(METRICS)
        for name in METRICS:
            if want[name] is None:
                assert got[name] is None, (name, record)
            else:
                assert got[name] == pytest.approx(want[name], abs=0), (name, record)
    # the study exercises every case: defined and undefined values, a spread of breadths
    assert any(b["ddx"]["metrics"]["plausibility"] not in (None, 0, 1) for b in bodies)
    assert len({b["ddx"]["metrics"]["breadth"] for b in bodies}) >= 3


def test_trial_scored_names_the_judge_calls_by_seq_only(study: Path) -> None:
    for body in scored(study):
        text = json.dumps(body)
        assert "step:" not in text.replace('"reference_source": "step:reference"', "")
        assert "|target|" not in text and "plain" not in text and "sys|" not in text
        for role in ("list", "match", "grounding", "uncertainty"):
            for vote in body["ddx"]["steps"][role]["votes"]:
                assert isinstance(vote["request_seq"], int)
                assert vote["status"] in ("parsed", "unparseable", "given-up", "no-input")
        assert len(body["ddx"]["steps"]["match"]["votes"]) == 3


def test_reference_sets_are_final_before_any_trial(study: Path) -> None:
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        first = next(iter(log.events("trial.requested"))).seq
        reference = [
            e.seq
            for e in log.events()
            if e.kind.startswith("step.") and e.body.get("step") == "reference"
        ]
    assert reference and max(reference) < first


def test_dataset_columns_and_descriptive_means(study: Path) -> None:
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        results = [e for e in log.events("analysis.result")]
    first = results[0]
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        table = log.blob(first.blobs["trials_csv"]).decode()
    rows = list(csv.DictReader(io.StringIO(table)))
    assert list(rows[0])[-7:] == list(METRICS)
    desc = next(e.body for e in results if e.body["id"] == "descriptive.ddx")
    by_seq = {b["response_seq"]: b for b in scored(study)}
    for arm, cell in desc["values"]["arms"].items():
        mine = [r for r in rows if r["arm"] == arm and r["excluded"] == "False"]
        for name in METRICS:
            defined = [float(r[name]) for r in mine if r[name] != ""]
            assert cell[name]["n"] == len(defined)
            assert cell[name]["undefined"] == len(mine) - len(defined)
            if defined:
                assert cell[name]["mean"] == pytest.approx(sum(defined) / len(defined))
        for r in mine:  # the csv holds the recorded metric, empty when undefined
            value = by_seq[int(r["response_seq"])]["ddx"]["metrics"]["h_coverage"]
            assert r["h_coverage"] == ("" if value is None else f"{float(value):.10g}")
    assert set(desc["values"]["arm_model"]["plain"]) == {"target", "target_b"}
    ids = [e.body["id"] for e in results]
    assert "hypothesis.H1" in ids and "hypothesis.H1@target_b" in ids
    html = (study.parent / "archive" / "analysis" / "report.html").read_text()
    assert "Differential-diagnosis metrics by arm" in html and "H-coverage" in html


# ------------------------------------------------------------------ set-valued decisions


def test_set_valued_votes_are_aggregated_element_wise() -> None:
    votes = [
        {"d": ["Migraine", "sinusitis", "  tension   headache "]},
        {"d": ["migraine", "Tension headache", "MIGRAINE"]},
        {"d": ["meningitis"]},
    ]
    assert aggregate_sets(2, votes, ["d"]) == {"d": ["Migraine", "tension headache"]}
    assert aggregate({"k": 2}["k"], votes, ("d",)) == {"d": ["Migraine", "tension headache"]}
    assert aggregate("majority", votes, ("d",)) == {"d": ["Migraine", "tension headache"]}
    assert aggregate("unanimous", votes, ("d",)) == {"d": []}
    assert aggregate(1, votes, ("d",)) == {
        "d": ["Migraine", "sinusitis", "tension headache", "meningitis"]
    }
    # fewer parsed votes than the rule needs: no decision; a missing vote counts for nothing
    assert aggregate("majority", [votes[0], None, None], ("d",)) is None
    assert aggregate(2, [votes[0], None, votes[1]], ("d",)) == {
        "d": ["Migraine", "tension headache"]
    }
    # the verifier's second implementation agrees
    for rule, need in (("majority", 2), ("unanimous", 3), (1, 1), (2, 2)):
        assert vsteps.decide(rule, list(votes), ("d",)) == aggregate(rule, votes, ("d",))
        assert vsteps.decide_sets(need, list(votes), ("d",)) == aggregate_sets(rule, votes, ["d"])


# ------------------------------------------------------------------ metrics: the edge cases


REF = {"plausible": ["a", "b"], "highly_likely": ["a"], "safety_critical": ["c"]}


def test_empty_differential_list_has_breadth_zero_and_undefined_plausibility() -> None:
    got, _, _ = metrics(
        [],
        REF,
        {"plausible": [], "highly_likely": [], "safety_critical": []},
        {"grounded": [], "indirect": []},
        "certain",
    )
    assert got["breadth"] == 0
    assert got["plausibility"] is None and got["grounding_rate"] is None
    assert got["indirect_rate"] is None
    assert got["h_coverage"] == 0 and got["s_coverage"] == 0 and got["uncertainty"] == 0
    assert (
        vddx.ddx_metrics(
            [],
            REF,
            {"plausible": [], "highly_likely": [], "safety_critical": []},
            {"grounded": [], "indirect": []},
            "certain",
        )[0]
        == got
    )


def test_empty_reference_set_leaves_its_coverage_undefined() -> None:
    ref = {"plausible": ["a"], "highly_likely": [], "safety_critical": []}
    got, _, _ = metrics(
        ["a"], ref, {"plausible": ["a"], "highly_likely": [], "safety_critical": []}, None, None
    )
    assert got["h_coverage"] is None and got["s_coverage"] is None
    assert got["plausibility"] == 1 and got["breadth"] == 1
    assert got["grounding_rate"] is None and got["uncertainty"] is None


def test_match_naming_a_diagnosis_not_on_the_list_is_ignored_and_recorded() -> None:
    match = {
        "plausible": ["A", "zebra"],
        "highly_likely": ["a", "not-a-reference"],
        "safety_critical": [],
    }
    got, matched, ignored = metrics(["a", "b"], REF, match, None, None)
    assert got["plausibility"] == 0.5 and got["h_coverage"] == 1.0
    assert matched["plausible"] == ["a"] and ignored["plausible"] == ["zebra"]
    assert ignored["highly_likely"] == ["not-a-reference"]
    assert vddx.ddx_metrics(["a", "b"], REF, match, None, None) == (got, matched, ignored)


# ------------------------------------------------------------------ bad input at lock


def test_missing_reference_set_is_refused_naming_the_item(tmp_path: Path, home: Path) -> None:
    records = items()
    del records[2]["metadata"]["reference_highly_likely"]
    root = write_study(
        tmp_path / "s", spec_text(steps=STEPS, reference="items"), records, match=SUPPLIED_MATCH
    )
    out = refused(root)
    assert "item 'c03'" in out and "reference_highly_likely" in out


def test_metric_of_a_multiple_choice_study_is_refused_naming_the_hypothesis(
    tmp_path: Path, home: Path
) -> None:
    one = (
        '\n[[hypotheses]]\nid = "H1"\ncontrast = ["sys", "plain"]\n'
        'outcome = "h_coverage"\ntest = "paired-t"\n'
    )
    text = spec_text(hypotheses=one)
    text = text.replace('parser = "ddx"', 'parser = "multiple-choice"')
    text = text[: text.index("[response.ddx]")] + text[text.index("[analysis]") :]
    root = write_study(tmp_path / "s", text)
    out = refused(root)
    assert "hypotheses[0] (H1).outcome" in out and "'h_coverage'" in out and "ddx" in out


def test_inconsistent_ddx_table_is_refused(tmp_path: Path, home: Path) -> None:
    text = spec_text(
        ddx='list = "doubt"\nmatch = "match"\nreference = "dxlist"\n'
        'uncertainty = "ground"\nsource = "x"\n'
    )
    root = write_study(tmp_path / "s", text)
    out = refused(root)
    assert "source" in out  # an unknown key
    assert "response.ddx.list" in out and "'doubt'" in out
    assert "response.ddx.reference" in out and "item step" in out
    assert "response.ddx.uncertainty" in out


def test_a_metric_needing_an_undeclared_step_is_refused(tmp_path: Path, home: Path) -> None:
    text = spec_text(ddx='list = "dxlist"\nmatch = "match"\nreference = "{reference}"\n')
    root = write_study(tmp_path / "s", text.replace('"plausibility"', '"grounding_rate"'))
    assert "needs [response.ddx] grounding" in refused(root)


def test_trial_accuracy_in_a_ddx_study_is_refused(tmp_path: Path, home: Path) -> None:
    root = write_study(tmp_path / "s", spec_text().replace('outcome = "plausibility"\n', ""))
    assert "a ddx study has no trial accuracy" in refused(root)


# ------------------------------------------------------------------ runs


@pytest.mark.parametrize("broken", [pytest.param("reference", marks=pytest.mark.slow), "extract"])
def test_reference_step_without_a_decision_excludes_the_items_trials(
    tmp_path: Path, home: Path, broken: str
) -> None:
    """The reference builder's (or the extractor it reads) replies do not parse: no reference
    sets, so every trial is a recorded exclusion naming the step and the item (an extractor
    without a decision blocks the reference step: it never waits forever)."""
    root = write_study(tmp_path / "s", **{broken: "Give the sets.\nCase: {context}\n"})
    KEY.save(tmp_path / "owner.key")
    invoke("lock", root, "--key", tmp_path / "owner.key")
    out = invoke("run", root, "--backend", "simulated", "--key", tmp_path / "owner.key")
    assert "stopped: complete" in out
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        excluded = [e.body for e in log.events("trial.excluded")]
        assert not list(log.events("trial.requested"))
        if broken == "extract":
            assert not [e for e in log.events("step.requested") if e.body["step"] == "reference"]
    assert len(excluded) == 24
    assert {e["step"] for e in excluded} == {broken}
    assert "c01" in {e["item"] for e in excluded}
    assert "scoring.sealed" in invoke("score", root, "--key", tmp_path / "owner.key")


def test_supplied_reference_sets_score_and_verify(tmp_path: Path, home: Path) -> None:
    root = write_study(
        tmp_path / "s", spec_text(steps=STEPS, reference="items"), items()[:3], match=SUPPLIED_MATCH
    )
    key = tmp_path / "owner.key"
    KEY.save(key)
    for command in ("lock", "run", "score", "unblind", "analyze"):
        extra = ["--backend", "simulated"] if command == "run" else []
        invoke(command, root, *extra, "--key", key)
    invoke("export", root, tmp_path / "archive", "--key", key)
    bodies = scored(root)
    by_item = {i["id"]: i["metadata"] for i in items()}
    for body in bodies:
        assert body["ddx"]["reference_source"] == "items"
        meta = by_item[body["stimulus"]]
        assert body["ddx"]["reference"]["safety_critical"] == meta["reference_safety_critical"]
    assert verify_archive(tmp_path / "archive").ok


# ------------------------------------------------------------------ tampering


def test_changed_reference_set_in_a_score_fails_naming_it(archive: Path) -> None:
    events = read_events(archive)
    body = next(e for e in events if e["kind"] == "trial.scored")["body"]
    body["ddx"]["reference"]["highly_likely"] = ["something else"]
    resign(archive, events)
    report = verify_archive(archive)
    passed(report, "signatures")
    assert "the reference sets (step:reference) differ" in failed(report, "rescore")


def test_changed_match_prompt_fails_naming_it(archive: Path) -> None:
    events = read_events(archive)
    text = (archive / "protocol" / "prompts" / "match.txt").read_text()
    replace_locked(
        archive,
        events,
        "prompts/match.txt",
        text.replace("Match the listed", "Compare the listed").encode(),
    )
    resign(archive, events)
    with science_skipped():
        report = verify_archive(archive)
    passed(report, "signatures")
    reason = failed(report, "steps")
    assert "the locked template prompts/match.txt" in reason and "step:match|" in reason


@pytest.mark.slow
def test_changed_reference_response_fails_naming_the_calls_that_read_it(archive: Path) -> None:
    """Every vote on one item's reference sets doctored (one vote alone may not move a k-of-n
    decision, and then nothing that follows differs): the match requests no longer follow."""
    import hashlib

    events = read_events(archive)
    calls = {e["seq"]: e["body"]["call"] for e in events if e["kind"] == "step.requested"}
    item = next(
        e["body"]["item"]
        for e in events
        if e["kind"] == "step.requested" and e["body"]["step"] == "reference"
    )
    for answer in events:
        if (
            answer["kind"] != "step.responded"
            or answer["body"]["step"] != "reference"
            or (f"|{item}|" not in calls[answer["body"]["request_seq"]])
        ):
            continue
        blob = archive / "blobs" / answer["blobs"]["response"]
        body = json.loads(blob.read_bytes())
        body["content"][0]["text"] = json.dumps(
            {
                "plausible": ["a new diagnosis"],
                "highly_likely": ["a new diagnosis"],
                "safety_critical": [],
            }
        )
        data = json.dumps(body).encode()
        digest = hashlib.sha256(data).hexdigest()
        (archive / "blobs" / digest).write_bytes(data)
        answer["blobs"]["response"] = digest
    resign(archive, events)
    report = verify_archive(archive)
    passed(report, "signatures")
    assert "not the one re-rendered" in failed(report, "steps")


def test_reference_call_after_the_first_trial_fails(archive: Path) -> None:
    events = read_events(archive)
    last = max(
        i
        for i, e in enumerate(events)
        if e["kind"] == "step.requested" and e["body"]["step"] == "reference"
    )
    moved = [events[last]] + [
        e
        for e in events[last + 1 :]
        if e["kind"] in ("step.responded", "step.failed")
        and e["body"]["request_seq"] == events[last]["seq"]
    ]
    call = moved[0]["body"]["call"]
    first = next(i for i, e in enumerate(events) if e["kind"] == "trial.requested")
    rest = [e for e in events if e not in moved]
    first = next(i for i, e in enumerate(rest) if e["kind"] == "trial.requested")
    events = rest[: first + 1] + moved + rest[first + 1 :]
    resign(archive, events)
    with science_skipped():
        report = verify_archive(archive)
    reason = failed(report, "steps")
    assert call in reason and "after the first trial" in reason


def test_a_session_of_the_target_alone_waits_for_the_reference_sets(
    tmp_path: Path, home: Path
) -> None:
    """Another session runs the reference models: no trial is sent before they have run."""
    root = write_study(tmp_path / "s")
    key = tmp_path / "owner.key"
    KEY.save(key)
    invoke("lock", root, "--key", key)
    invoke("run", root, "--backend", "simulated", "--model", "target", "--key", key)
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        assert not list(log.events("trial.requested"))
        assert not list(log.events("step.requested"))
    invoke(
        "run",
        root,
        "--backend",
        "simulated",
        "--model",
        "judge_a",
        "--model",
        "judge_b",
        "--model",
        "judge_c",
        "--key",
        key,
    )
    invoke("run", root, "--backend", "simulated", "--key", key)
    test_reference_sets_are_final_before_any_trial(root)
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        assert len(list(log.events("trial.responded"))) == 24


@pytest.mark.slow
def test_bench_ddx_quick_runs_and_reports_every_phase() -> None:
    import subprocess
    import sys

    bench = REPO / "benchmarks" / "bench_ddx.py"
    out = subprocess.run(
        [sys.executable, str(bench), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    for label in ("lock", "run", "score", "analyze", "verify_rescore", "floor", "load average"):
        assert label in out, out


def test_a_match_step_that_does_not_read_the_list_is_refused(tmp_path: Path, home: Path) -> None:
    root = write_study(tmp_path / "s", match="Match.\nPlausible set: {steps.reference.plausible}\n")
    out = refused(root)
    assert "response.ddx.match" in out and "{steps.dxlist}" in out


_NAMES = [
    "Migraine",
    "migraine",
    " MIGRAINE ",
    "tension  headache",
    "Tension headache",
    "meningitis",
    "Ménière",
    "Me\u0301nie\u0300re",
    "",
    "sinusitis",
]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {
                    "a": st.lists(st.sampled_from(_NAMES), max_size=6),
                    "b": st.lists(st.sampled_from(_NAMES), max_size=6),
                }
            ),
        ),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from(["majority", "unanimous", 1, 2, 3]),
)
def test_runner_and_verifier_aggregate_sets_alike(votes: list[Any], rule: Any) -> None:
    """Both implementations of the element-wise vote agree, and every element of a decision
    is in at least N votes (normalised)."""
    if isinstance(rule, int) and rule > len(votes):
        rule = len(votes)
    got = aggregate(rule, votes, ("a", "b"))
    assert got == vsteps.decide(rule, list(votes), ("a", "b"))
    need = (
        len(votes) // 2 + 1 if rule == "majority" else (len(votes) if rule == "unanimous" else rule)
    )
    if got is None:
        assert sum(v is not None for v in votes) < need
        return
    for member in ("a", "b"):
        keys = [norm(x) for x in got[member]]
        assert len(set(keys)) == len(keys) and "" not in keys
        for key in keys:
            assert sum(key in {norm(x) for x in v[member]} for v in votes if v) >= need


def test_ddx_parser_without_its_table_and_a_table_without_the_parser_are_refused(
    tmp_path: Path, home: Path
) -> None:
    text = spec_text()
    bare = text[: text.index("[response.ddx]")] + text[text.index("[analysis]") :]
    assert "needs a [response.ddx] table" in refused(write_study(tmp_path / "a", bare))
    other = text.replace('parser = "ddx"', 'parser = "exact"')
    assert 'applies to parser = "ddx" only' in refused(write_study(tmp_path / "b", other))


def test_a_forged_inconsistent_ddx_protocol_fails_naming_the_role(archive: Path) -> None:
    """protocol.locked re-signed with a match role that names the list step: the verifier
    re-checks the lock rules of §12 and names the role."""
    events = read_events(archive)
    for e in events:
        if e["kind"] == "protocol.locked":
            e["body"]["response"]["ddx"]["match"] = "dxlist"
    resign(archive, events)
    with science_skipped():
        report = verify_archive(archive)
    passed(report, "signatures")
    assert "response.ddx.match = 'dxlist'" in failed(report, "steps")
