"""ledger score, unblind and analyze on simulated studies: blinding, seal, the paper's pattern."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import make_study, study_key

import analysis._scoring as scoring
from analysis._analyze import analyze_study, load_dataset, run_analyses
from analysis._scoring import BlindTrial, score_blind, score_study, unblind_study
from ledger import Ledger
from ledger.cli import main
from runner._backends import SimulatedBackend
from runner._execute import RunOptions, run_study
from runner._lock import StudyError, protocol_event
from runner._stimuli import read_truth_csv


def events(root: Path, kind: str) -> list[Any]:
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        return list(log.events(kind))


@pytest.fixture(scope="module")
def run_study_dir(
    tmp_path_factory: pytest.TempPathFactory, study_template: Path
) -> tuple[Path, Path]:
    """A simulated study with 12 replicates, run but not scored, and its home directory."""
    mp = pytest.MonkeyPatch()
    home = tmp_path_factory.mktemp("home")
    mp.setenv("PROMPT_LEDGER_HOME", str(home))
    root = make_study(
        tmp_path_factory.mktemp("s") / "study", replicates=12, template=study_template
    )
    run_study(root, study_key(), SimulatedBackend(), RunOptions(concurrency=16))
    mp.undo()
    return root, home


@pytest.fixture
def study(
    run_study_dir: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A private copy of the run study (the blinding secret is in the module's home)."""
    source, home = run_study_dir
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(home))
    root = tmp_path / "study"
    shutil.copytree(source, root)
    return root


def test_scores_do_not_depend_on_the_arm(study: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = study.parent / "swapped"
    shutil.copytree(study, other)
    score_study(study, study_key())
    real = scoring._arm_codes

    def swapped(s: Any) -> dict[str, str]:
        codes = real(s)
        return {"A": codes["B"], "B": codes["A"], "C": codes["E"], "D": codes["D"], "E": codes["C"]}

    monkeypatch.setattr(scoring, "_arm_codes", swapped)
    score_study(other, study_key())
    first = {e.body["response_seq"]: e for e in events(study, "trial.scored")}
    second = {e.body["response_seq"]: e for e in events(other, "trial.scored")}
    assert first.keys() == second.keys() and len(first) == 420
    for seq, event in first.items():
        twin = second[seq]
        for field in ("status", "n_items", "n_answered", "n_correct", "scores_sha256"):
            assert event.body[field] == twin.body[field]
    assert any(first[s].body["arm_code"] != second[s].body["arm_code"] for s in first)
    # and the pure scorer, handed the same response under two codes, gives the same bytes
    truth = read_truth_csv(study / "stimuli" / "truth.csv")
    responded = events(study, "trial.responded")[0]
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        raw = log.blob(responded.blobs["response"])
        stim = log.get(responded.body["request_seq"]).body["stimulus"]
    a = score_blind(
        BlindTrial(1, "aaaaaaaaaaaa", stim, raw, "anthropic-messages"),
        "tumbling-e-json",
        truth[stim],
    )
    b = score_blind(
        BlindTrial(1, "bbbbbbbbbbbb", stim, raw, "anthropic-messages"),
        "tumbling-e-json",
        truth[stim],
    )
    assert a.items_bytes() == b.items_bytes()


def test_seal_unblind_order_and_commitment(study: Path) -> None:
    with pytest.raises(StudyError, match="not sealed yet"):
        unblind_study(study, study_key())
    result = score_study(study, study_key())
    assert result.sealed_seq is not None and result.pending == 0
    with pytest.raises(StudyError, match="sealed at seq"):
        score_study(study, study_key())
    with pytest.raises(StudyError, match="sealed at seq"):
        run_study(study, study_key(), SimulatedBackend(), RunOptions())
    with pytest.raises(StudyError, match="unblind"):
        analyze_study(study, study_key())
    revealed = unblind_study(study, study_key())
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        protocol = protocol_event(log)
        assert protocol is not None
        assert revealed.commitment == protocol.body["blinding_commitment"]
    with pytest.raises(StudyError, match="already unblinded"):
        unblind_study(study, study_key())


def test_wrong_secret_does_not_open_the_commitment(
    study: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    score_study(study, study_key())
    monkeypatch.setattr(scoring, "blinding_secret", lambda s: b"\x00" * 32)
    with pytest.raises(StudyError, match="does not open the commitment"):
        unblind_study(study, study_key())
    assert events(study, "blinding.revealed") == []


def test_score_before_every_trial_is_final_does_not_seal(
    tmp_path: Path, study_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    root = make_study(tmp_path / "partial", replicates=1, template=study_template)
    run_study(root, study_key(), SimulatedBackend(), RunOptions(max_trials=10))
    result = score_study(root, study_key())
    assert result.scored == 10 and result.sealed_seq is None and result.pending == 25
    run_study(root, study_key(), SimulatedBackend(), RunOptions())
    again = score_study(root, study_key())
    assert again.scored == 25 and again.already == 10 and again.sealed_seq is not None


def results_by_id(study: Path) -> dict[str, dict[str, Any]]:
    return {e.body["id"]: e.body for e in events(study, "analysis.result")}


def test_simulated_study_reproduces_the_papers_pattern(study: Path) -> None:
    score_study(study, study_key())
    unblind_study(study, study_key())
    out = CliRunner().invoke(main, ["analyze", str(study)])
    assert out.exit_code == 0, out.output
    results = results_by_id(study)
    acc = {
        arm: v["accuracy"]["estimate"] for arm, v in results["descriptive.arms"]["values"].items()
    }
    assert acc["A"] > 0.95 and acc["E"] > 0.95  # near ceiling
    assert acc["B"] < acc["C"]  # scaffolding without the rule is harmful
    for arm in ("B", "D"):  # canonical-RIGHT phenotype in no-rule arms
        share = results[f"exploratory.errors.{arm}"]["values"]["canonical_right_share"]["share"]
        assert share > 0.5
    rows = results["exploratory.errors.A"]["values"]["accuracy_by_row"]
    errors = {r: v["n"] - v["correct"] for r, v in rows.items()}
    assert errors["11"] >= 0.8 * sum(errors.values())  # residual A errors on the smallest row
    h1 = results["hypothesis.H1"]
    assert h1["label"] == "pre-registered" and h1["verdict"] in ("supported", "not supported")
    assert h1["values"]["estimate"] * 100 >= 10 and h1["verdict"] == "supported"
    assert h1["decided_by"]["rule"].startswith("p < 0.05")
    for rid, body in results.items():
        assert body["label"] == ("exploratory" if rid.startswith("exploratory.") else body["label"])
    control = results["descriptive.control"]["values"]
    assert all(v["estimate"] == 1.0 for v in control.values())  # Snellen rejected everywhere
    for body in results.values():
        assert (
            body["inputs"]["scores_sha256"]
            == events(study, "scoring.sealed")[0].body["scores_sha256"]
        )
    with pytest.raises(StudyError, match="already analysed"):
        analyze_study(study, study_key())


def _scored(study: Path) -> tuple[dict[str, Any], Any]:
    """Score and unblind ``study``; return its locked plan and its dataset."""
    score_study(study, study_key())
    unblind_study(study, study_key())
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        plan = protocol_event(log).body  # type: ignore[union-attr]
        return plan, load_dataset(log)


def _with_trials(ds: Any, trials: Any) -> Any:
    """``ds`` with its trial table replaced."""
    return type(ds)(trials, ds.items, ds.arms, ds.given_up, ds.scores_sha256)


def _without(ds: Any, arm: str) -> Any:
    """``ds`` with every trial of ``arm`` excluded (as if none of them parsed)."""
    trials = ds.trials.copy()
    trials.loc[trials["arm"] == arm, "excluded"] = True
    return _with_trials(ds, trials)


@pytest.fixture
def no_sensitivity(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_analyses`` without ``sensitivity.lmm`` (its REML refits: most of an analysis's CPU).

    For a test that reads descriptive, model, hypothesis, multiplicity and exploratory results
    only: ``run_analyses`` computes the sensitivity models last, from the hypotheses already
    tested, which it reads and never changes (``docs/statistics.md``, "Sensitivity": they
    never change a verdict); every other result comes out the same without them.
    ``test_sensitivity.py`` and ``test_simulated_study_reproduces_the_papers_pattern`` (a whole
    ``analyze_study``) compute them.
    """
    import analysis._analyze as analyze

    monkeypatch.setattr(analyze, "sensitivity_lmm", lambda *args, **kwargs: None)
    monkeypatch.setattr(analyze, "sensitivity_per_model", lambda *args, **kwargs: [])


def test_bad_data_gives_failed_results_not_a_crash(study: Path) -> None:
    plan, ds = _scored(study)
    # an arm with zero parseable responses
    broken = _without(ds, "B")
    results = {r.id: r for r in run_analyses(broken, plan)}
    assert results["descriptive.arms"].values["B"]["accuracy"] is None  # type: ignore[index]
    h1 = results["hypothesis.H1"]  # A vs B: B has nothing to analyse
    assert h1.status == "failed" and h1.verdict == "not computed" and "'B'" in (h1.error or "")
    assert results["exploratory.errors.B"].status == "failed"
    assert "no parseable" in (results["exploratory.errors.B"].error or "")
    assert results["hypothesis.H3"].status == "ok"  # A vs E is untouched
    # a zero-variance outcome (every trial of every arm has the same accuracy): the mixed
    # model does not apply (docs/statistics.md "Not applicable"; not a singular fit, see the
    # next test for that), and the hypotheses built on it are not computed
    flat = ds.trials.copy()
    flat["accuracy"] = 0.5
    same = _with_trials(ds, flat)
    computed = run_analyses(same, plan)
    results = {r.id: r for r in computed}
    assert results["model.lmm"].status == "not applicable"
    assert "zero variance" in (results["model.lmm"].values or {})["reason"]
    assert results["hypothesis.H1"].verdict == "not computed"
    assert results["descriptive.arms"].status == "ok"
    # no scored trials at all
    empty = type(ds)(ds.trials.iloc[0:0], ds.items.iloc[0:0], ds.arms, (), ds.scores_sha256)
    results = {r.id: r for r in run_analyses(empty, plan)}
    assert results["descriptive.arms"].error == "no scored trials: nothing to analyse"
    assert all(r.verdict == "not computed" for r in results.values() if r.hypothesis)
    json.dumps([r.as_dict() for r in computed], allow_nan=False)  # the flat data's, as computed


def test_decision_rules_keep_the_preregistered_family_and_direction(
    study: Path, no_sensitivity: None
) -> None:
    import copy

    plan, ds = _scored(study)
    # a failed member of a Bonferroni family does not shrink the family (H4-left/up/down: E-D
    # per probe; without D's trials on uniform-left, H4-left cannot be computed)
    trials, items = ds.trials, ds.items
    gone = (trials["arm"] == "D") & (trials["stimulus"] == "uniform-left")
    no_d_left = type(ds)(
        trials[~gone],
        items[~items["trial"].isin(set(trials[gone]["trial"]))],
        ds.arms,
        (),
        ds.scores_sha256,
    )
    results = {r.id: r for r in run_analyses(no_d_left, plan)}
    assert results["hypothesis.H4-left"].status == "failed"
    for hid in ("H4-up", "H4-down"):
        v = results[f"hypothesis.{hid}"].values or {}
        assert v["family_size"] == 3 and v["p_adjusted"] == pytest.approx(min(1, 3 * v["p_raw"]))
    # contrasts not involving the reference arm survive its loss (H2 B-C, H4-pooled E-D)
    no_a = _without(ds, "A")
    results = {r.id: r for r in run_analyses(no_a, plan)}
    assert results["model.lmm"].status == "ok"
    assert results["hypothesis.H2"].status == "ok"
    assert results["hypothesis.H4-pooled"].status == "ok"
    assert results["hypothesis.H1"].verdict == "not computed"
    # a one-sided McNemar hypothesis in the wrong direction is not supported
    wrong = copy.deepcopy(plan)
    wrong["hypotheses"] = [
        {
            "id": "M1",
            "description": "B beats A",
            "contrast": ["B", "A"],
            "test": "mcnemar",
            "sides": "one-sided",
            "alpha": 0.05,
            "outcome": "glyph_accuracy",
        },
    ]
    m1 = next(r for r in run_analyses(ds, wrong) if r.id == "hypothesis.M1")
    assert m1.values is not None and m1.values["estimate"] < 0
    assert m1.verdict == "not supported"


def _singular_dataset(ds: Any) -> Any:
    """Every stimulus has the same mean in every arm: the between-stimulus variance is 0."""
    trials = ds.trials.copy()
    base = {"A": 0.9, "B": 0.5, "C": 0.7, "D": 0.6, "E": 0.85}
    tumbling = ~trials["control"]
    trials.loc[tumbling, "excluded"] = False
    trials.loc[tumbling, "accuracy"] = [
        base[arm] + (0.05 if rep % 2 else -0.05)
        for arm, rep in zip(trials.loc[tumbling, "arm"], trials.loc[tumbling, "rep"], strict=True)
    ]
    return _with_trials(ds, trials)


def test_a_really_singular_model_is_flagged_beside_every_model_verdict(
    study: Path, tmp_path: Path, no_sensitivity: None
) -> None:
    from rich.console import Console

    from analysis._analyze import MODEL_CAUTION
    from analysis._report import Report, render_html, render_terminal

    plan, ds = _scored(study)
    flat = _singular_dataset(ds)
    per_stimulus = flat.trials[~flat.trials["control"]].groupby(["arm", "stimulus"])["accuracy"]
    assert per_stimulus.mean().groupby("arm").nunique().eq(1).all()  # no stimulus effect at all
    results = {r.id: r for r in run_analyses(flat, plan)}
    model = results["model.lmm"]
    assert model.status == "ok", model.error  # fitted, not refused by a precheck
    assert model.values is not None and model.values["singular"] is True
    assert model.values["group_variance"] <= 1e-6 * float(flat.trials["accuracy"].var())
    assert model.values["caution"] == MODEL_CAUTION
    assert model.values["group_variance_ci_lower"] is None  # no log-scale CI at the boundary
    lmm = [r for r in results.values() if r.hypothesis and r.test == "lmm"]
    assert len(lmm) == 3  # H1, H2 on model.lmm; H4-pooled on its own three-probe model
    for r in lmm:
        assert r.status == "ok" and r.values is not None, r.error
        assert r.values["singular_fit"] is True and r.values["caution"] == MODEL_CAUTION
    assert "caution" not in (results["hypothesis.H3"].values or {})  # equivalence: no model
    # the caution is shown beside each model verdict: terminal and HTML verdict tables
    from verify import verify_ledger_file

    path = study / "ledger.db"
    report = Report(
        study,
        path,
        tmp_path,
        tmp_path / "r.html",
        plan,
        [r.as_dict() for r in results.values()],
        [],
        [],
        verify_ledger_file(path),
    )
    console = Console(record=True, width=250)
    render_terminal(report, console)
    text = console.export_text()
    verdict_table = text.split("Descriptive:")[0]
    assert verdict_table.count("caution:") == 3
    html = render_html(report)
    verdicts_html = html.split("<h2>Verdicts")[1].split("<h2>")[0]
    assert verdicts_html.count("caution:") == 3


def test_items_read_once_per_scores_blob_are_the_items_of_every_trial(
    study: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41: trials whose scores are one blob reuse its item codes; the items are unchanged.

    The item columns equal each trial's scores read one by one, in ``trial.scored`` order, and
    with the memory at one blob (and one tuple a column) the dataset is the same frame.
    """
    import analysis._analyze as analyze_module
    import analysis._rows as rows_module
    from analysis._rows import plain

    score_study(study, study_key())
    unblind_study(study, study_key())
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        digests = [e.blobs["scores"] for e in log.events("trial.scored")]
        expected = [
            (item["row"], item["position"], item["truth"], item["answer"], item["correct"])
            for digest in digests
            for item in json.loads(log.blob(digest))
        ]
        real_blob, reads = log.blob, []

        def counted(digest: str) -> bytes:
            reads.append(digest)
            return real_blob(digest)

        monkeypatch.setattr(log, "blob", counted)
        ds = load_dataset(log)
        assert len(reads) == len(set(digests)) < len(digests)  # each blob read once
        reads.clear()
        monkeypatch.setattr(analyze_module, "SCORES_MEMO", 1)
        monkeypatch.setattr(rows_module, "EXTEND_MEMO", 1)
        again = load_dataset(log)
        changes = sum(1 for i, d in enumerate(digests) if i == 0 or digests[i - 1] != d)
        assert len(reads) == changes
    import pandas as pd

    columns = ["row", "position", "truth", "answer", "correct"]
    got = plain(ds.items)  # a control's items have no row or position: NaN, as pandas reads None
    pd.testing.assert_frame_equal(
        got.loc[:, columns], pd.DataFrame(expected, columns=columns), check_dtype=False
    )
    assert got["truth_original"].tolist() == got["truth"].tolist()
    assert got["answer_original"].fillna("-").tolist() == got["answer"].fillna("-").tolist()
    pd.testing.assert_frame_equal(ds.items, again.items)
    pd.testing.assert_frame_equal(ds.trials, again.trials)
