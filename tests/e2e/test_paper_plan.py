"""The tumbling-E template follows the PROMPT paper's Experiment 1 plan (issue 19).

The paper (Statistical Analysis, Results): the main LMM on arms A-C with probe as random
intercept and a one-sided z test; a paired t-test on 180 trials paired by (probe, replicate);
per-probe dismantling E - D on the probes LEFT, UP and DOWN with Bonferroni x3, plus a pooled
LMM over those three probes; A - E equivalence below 10 pp. Every choice of the template's own
is a declared deviation. Also the strict validation of the new spec fields, and a pairing key
that does not pair.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from locations import REPO

from analysis._analyze import Dataset, hypothesis_results
from runner.spec import SpecError, load_study
from verify import _restats as st
from verify._recompute.dataset import _Dataset
from verify._recompute.pairs import _pairs_by_trial

SEED = REPO / ".." / "shared" / "seeds" / "000_430eb21b5fed3159.txt"


def test_the_template_registers_the_papers_plan(study_template: Path) -> None:
    study = load_study(study_template)
    by_id = {h.id: h for h in study.hypotheses}
    assert study.analysis["model_arms"] == ["A", "B", "C"]  # "Arms A-C" (Methods)
    h1 = by_id["H1"]
    assert (h1.test, h1.contrast, h1.sides, h1.stimuli) == ("lmm", ("A", "B"), "one-sided", None)
    paired = by_id["H1-paired"]
    assert paired.test == "paired-t" and paired.pairing == ("stimulus", "rep")
    assert by_id["H2"].contrast == ("B", "C") and by_id["H2"].test == "lmm"
    assert by_id["H3"].test == "equivalence" and by_id["H3"].margin_pp == 10
    probes = [by_id[f"H4-{p}"] for p in ("left", "up", "down")]
    assert [h.stimuli for h in probes] == [("uniform-left",), ("uniform-up",), ("uniform-down",)]
    assert {(h.contrast, h.correction, h.family, h.sides) for h in probes} == {
        (("E", "D"), "bonferroni", "dismantling", "one-sided")
    }
    family = [h for h in study.hypotheses if h.family == "dismantling"]
    assert family == probes  # Bonferroni x3, the pooled model is not in the family
    pooled = by_id["H4-pooled"]
    assert pooled.test == "lmm" and pooled.stimuli == ("uniform-left", "uniform-up", "uniform-down")
    assert "H5" not in by_id  # A - D is not a contrast of the paper
    assert [d["id"] for d in study.deviations] == ["D1", "D2", "D3", "D4"]
    assert all(d["reason"] and d["choice"] and d["source"] for d in study.deviations)
    if SEED.is_file():  # the probes the paper names for E - D
        text = SEED.read_text("utf-8")
        assert "E–D was +85.2 percentage points on LEFT, +46.7 on UP, and +90.0 on DOWN" in text
        assert "paired t-test using 180 probe-matched pairs" in text


def _printed_side(
    text: str, printed_p: float, statistic: float, decimals: int, sf: Callable[[float], float]
) -> str:
    """The side whose test statistic, solved from the printed P, rounds to the printed one."""
    from scipy import optimize

    found = []
    for side, factor in (("one-sided", 1.0), ("two-sided", 2.0)):
        root = optimize.brentq(lambda x, k=factor: k * sf(x) - printed_p, 1.0, 60.0)
        if round(root, decimals) == statistic:
            found.append(side)
    assert len(found) == 1, (text, found)
    return found[0]


def test_the_sides_follow_the_papers_printed_numbers(study_template: Path) -> None:
    """Issue 31: the paper prints t(179) = 15.0, P = 9.6e-34 and z = 16.9, P = 6.7e-64; only one
    side reproduces each, and the template registers that side."""
    from scipy import stats

    by_id = {h.id: h for h in load_study(study_template).hypotheses}
    if SEED.is_file():
        text = SEED.read_text("utf-8")
        assert "$t(179) = 15.0$ , and  $P = 9.6 \\times 10^{-34}$" in text
        assert "$z=16.9$ ;  $P=6.7\\times 10^{-64}$" in text
    paired = _printed_side("t(179)", 9.6e-34, 15.0, 1, lambda t: stats.t.sf(t, 179))
    pooled = _printed_side("z", 6.7e-64, 16.9, 1, stats.norm.sf)
    assert (paired, pooled) == (by_id["H1-paired"].sides, by_id["H4-pooled"].sides)


def test_the_locked_protocol_carries_the_new_fields_only_when_set(study_template: Path) -> None:
    study = load_study(study_template)
    locked = {h.id: h.locked() for h in study.hypotheses}
    assert "stimuli" not in locked["H1"] and "pairing" not in locked["H1"]
    assert locked["H4-pooled"]["stimuli"] == ["uniform-left", "uniform-up", "uniform-down"]
    assert locked["H1-paired"]["pairing"] == ["stimulus", "rep"]


@pytest.fixture
def spec(study_template: Path, tmp_path: Path) -> Path:
    root = tmp_path / "study"
    shutil.copytree(study_template, root)
    return root


def _edit(root: Path, old: str, new: str) -> None:
    path = root / "study.toml"
    text = path.read_text("utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), "utf-8")


@pytest.mark.parametrize(
    ("old", "new", "field", "words"),
    [
        (
            'stimuli = ["uniform-left"]',
            'stimuli = ["uniform-sideways"]',
            "hypotheses[4].stimuli",
            "unknown stimulus 'uniform-sideways'",
        ),
        ('stimuli = ["uniform-left"]', "stimuli = []", "hypotheses[4].stimuli", "non-empty list"),
        (
            'stimuli = ["uniform-left"]',
            'stimuli = ["uniform-left", "uniform-left"]',
            "hypotheses[4].stimuli",
            "twice",
        ),
        ('pairing = ["stimulus", "rep"]', 'pairing = ["rep"]', "hypotheses[1].pairing", "must be"),
        (
            'test = "independent-t"\nstimuli = ["uniform-left"]',
            'test = "independent-t"\npairing = ["stimulus", "rep"]\nstimuli = ["uniform-left"]',
            "hypotheses[4].pairing",
            "'paired-t' only",
        ),
        (
            'model_arms = ["A", "B", "C"]',
            'model_arms = ["A", "Z"]',
            "analysis.model_arms",
            "unknown arm 'Z'",
        ),
        (
            'model_arms = ["A", "B", "C"]',
            'model_arms = ["A", "B"]',
            "hypotheses[2].contrast",
            "analysis.model_arms",
        ),
        (
            'reason = "Locked here so every exploratory bootstrap is reproducible."',
            "",
            "deviations[3].reason",
            "non-empty string",
        ),
        ('id = "D2"', 'id = "D1"', "deviations[1].id", "duplicate deviation id"),
    ],
)
def test_new_fields_are_validated_strictly(
    spec: Path, old: str, new: str, field: str, words: str
) -> None:
    _edit(spec, old, new)
    with pytest.raises(SpecError) as info:
        load_study(spec)
    text = str(info.value)
    assert field in text and words in text, text


def test_an_unknown_key_in_a_deviation_is_refused(spec: Path) -> None:
    _edit(spec, 'id = "D4"', 'id = "D4"\nseverity = "minor"')
    with pytest.raises(SpecError) as info:
        load_study(spec)
    assert "severity" in str(info.value) and "[[deviations]]" in str(info.value)


def _dataset(reps: dict[str, int]) -> Dataset:
    rng = np.random.default_rng(9)
    rows = []
    for arm, n in reps.items():
        for s in ("s1", "s2", "s3"):
            for r in range(1, n + 1):
                rows.append(
                    {
                        "trial": f"{arm}|{s}|{r}",
                        "arm": arm,
                        "model": "",
                        "stimulus": s,
                        "rep": r,
                        "accuracy": float(rng.uniform(0, 1)),
                        "control": False,
                        "excluded": False,
                        "status": "ok",
                    }
                )
    items = pd.DataFrame(
        columns=[
            "trial",
            "arm",
            "model",
            "stimulus",
            "rep",
            "row",
            "position",
            "truth",
            "answer",
            "correct",
        ]
    )
    return Dataset(pd.DataFrame(rows), items, tuple(reps), (), "0" * 64)


PLAN = {
    "arms": {"A": {"role": "full"}, "B": {"role": "matched-control"}},
    "design": {"bootstrap_iterations": 100, "bootstrap_seed": 1},
    "hypotheses": [
        {
            "id": "P",
            "description": "paired",
            "contrast": ["A", "B"],
            "test": "paired-t",
            "pairing": ["stimulus", "rep"],
            "sides": "two-sided",
            "alpha": 0.05,
        }
    ],
}


def test_a_pairing_key_that_does_not_pair_fails_the_hypothesis_clearly() -> None:
    ok = hypothesis_results(_dataset({"A": 3, "B": 3}), PLAN, None)[0]
    assert ok.status == "ok" and (ok.values or {})["n_x"] == 9  # 3 stimuli x 3 replicates
    assert (ok.values or {})["df"] == 8 and (ok.values or {})["pairing"] == ["stimulus", "rep"]
    bad = hypothesis_results(_dataset({"A": 3, "B": 2}), PLAN, None)[0]
    assert bad.status == "failed" and bad.verdict == "not computed"
    assert (
        "does not pair: arm A has replicate 3 of stimulus 's1' and arm B has no such "
        "trial: it was never scheduled"
    ) in str(bad.error)
    assert "3 key(s) in one arm only" in str(bad.error)
    # the verifier's mirror refuses the same data
    trials = _dataset({"A": 3, "B": 2}).trials.to_dict("records")
    ds = _Dataset(trials, [], ["A", "B"], [], "0" * 64)
    with pytest.raises(st.StatError, match="does not pair"):
        _pairs_by_trial(ds, "A", "B")


def _lose(ds: Dataset, trial: str, how: str) -> Dataset:
    """``ds`` with one trial of arm B unparseable (and excluded), given up or never sent."""
    from dataclasses import replace

    if how == "unparseable":
        t = ds.trials.copy()
        t.loc[t["trial"] == trial, ["excluded", "status"]] = [True, "unparseable"]
        return replace(ds, trials=t)
    kept = replace(ds, trials=ds.trials[ds.trials["trial"] != trial])
    if how == "given-up":
        return replace(kept, given_up=(trial,))
    return replace(kept, excluded_trials=(trial,))


@pytest.mark.parametrize("how", ["unparseable", "given-up", "excluded"])
def test_a_pair_lost_to_an_exclusion_is_dropped_listed_and_counted(how: str) -> None:
    """Issue 31: the paper's paired t uses complete pairs; an excluded trial drops its pair."""
    full = _dataset({"A": 3, "B": 3})
    ds = _lose(full, "B|s2|3", how)
    r = hypothesis_results(ds, PLAN, None)[0]
    assert r.status == "ok" and r.verdict in ("supported", "not supported"), r.error
    values = r.values or {}
    assert values["n_x"] == 8 and values["df"] == 7 and values["n_dropped"] == 1
    assert values["dropped_pairs"] == [
        {"stimulus": "s2", "rep": 3, "excluded": [{"arm": "B", "kind": how, "trial": "B|s2|3"}]}
    ]
    keep = full.trials[~full.trials["stimulus"].eq("s2") | full.trials["rep"].ne(3)]
    a = keep[keep["arm"] == "A"].sort_values(["stimulus", "rep"])["accuracy"].to_numpy()
    b = keep[keep["arm"] == "B"].sort_values(["stimulus", "rep"])["accuracy"].to_numpy()
    from analysis._stats import paired_t

    assert values["t"] == pytest.approx(paired_t(a, b).t, rel=1e-12)  # the complete pairs
    # the verifier's mirror drops the same pair and agrees on every number
    vds = _Dataset(
        ds.trials.to_dict("records"),
        [],
        ["A", "B"],
        list(ds.given_up),
        "0" * 64,
        excluded_trials=list(ds.excluded_trials),
    )
    xs, ys, dropped = _pairs_by_trial(vds, "A", "B")
    assert dropped == values["dropped_pairs"]
    assert st.paired_t(xs, ys)["t"] == pytest.approx(values["t"], rel=1e-12)
