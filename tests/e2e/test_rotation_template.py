"""The ``prompt-rotation`` template (the PROMPT paper's Experiment 2), issue 19.

Cheap tests: the annotated rotation builder, the synthetic crops, ``ledger new --template
prompt-rotation`` (with the shipped crops and with the user's images), the simulated model's
Experiment 2 phenotype, ``exploratory.by_truth`` against the verifier's twin, and the datasets'
subsets keeping every member. The whole demo (``ledger demo --template prompt-rotation``) is
in the slow set.
"""

from __future__ import annotations

import base64
import collections
import csv
import os
import subprocess
import sys
from dataclasses import fields
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers import assert_flow_matches_ledger, fixed_key
from PIL import Image

from analysis._analyze import Dataset, by_truth, truth_contrasts
from runner._lock import StudyError
from runner._new import new_study
from runner._stimuli import (
    ANNOTATED_TRUTH_HEADER,
    ORIENTATIONS,
    StimulusError,
    rotate_images,
    synthetic_crop,
    write_rotation_set,
)
from runner.simulated._vision import SimulatedModel, image_direction
from runner.spec import load_study
from verify import _restats as vst
from verify._recompute.compare import _first_difference
from verify._recompute.dataset import _Dataset
from verify._recompute.exploratory import _by_truth
from verify._recompute.model import _model

SEED = 20260425


def _truth(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


# ------------------------------------------------------------------ the annotated builder


def _marked(size: tuple[int, int], edge: str) -> Image.Image:
    """A grey image with a red stripe along ``edge`` (where its reference vector points)."""
    w, h = size
    image = Image.new("RGB", size, (90, 90, 90))
    box = {
        "UP": (0, 0, w, 1),
        "DOWN": (0, h - 1, w, h),
        "LEFT": (0, 0, 1, h),
        "RIGHT": (w - 1, 0, w, h),
    }[edge]
    image.paste((255, 0, 0), box)
    return image


def _red_edge(path: Path) -> str:
    with Image.open(path) as image:
        rgb = image.convert("RGB")
        w, h = rgb.size
        sides = {
            "UP": [rgb.getpixel((x, 0)) for x in range(w)],
            "DOWN": [rgb.getpixel((x, h - 1)) for x in range(w)],
            "LEFT": [rgb.getpixel((0, y)) for y in range(h)],
            "RIGHT": [rgb.getpixel((w - 1, y)) for y in range(h)],
        }
    (edge,) = [side for side, pixels in sides.items() if set(pixels) == {(255, 0, 0)}]
    return edge


def test_annotated_sources_rotate_to_their_truth(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _marked((30, 20), "RIGHT").save(src / "left-breast.png")
    _marked((16, 24), "DOWN").save(src / "odd.png")
    (src / "orientation.csv").write_text(
        "source,orientation\nleft-breast,RIGHT\nodd,DOWN\n", encoding="utf-8"
    )
    rows = rotate_images(src, tmp_path / "out")
    assert [tuple(r) for r in rows] == [ANNOTATED_TRUTH_HEADER] * 8
    assert _truth(tmp_path / "out" / "truth.csv") == rows
    for row in rows:
        # the stimulus is named by its truth, and its marked edge points where the truth says
        assert row["stimulus"] == f"{row['source']}-{row['orientation'].lower()}"
        assert _red_edge(tmp_path / "out" / f"{row['stimulus']}.png") == row["orientation"]
        base = {"left-breast": "RIGHT", "odd": "DOWN"}[row["source"]]
        assert row["source_orientation"] == base
        turns = (ORIENTATIONS.index(row["orientation"]) - ORIENTATIONS.index(base)) % 4
        assert row["rotation_cw"] == str(90 * turns)


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ("source,direction\na,UP\nb,UP\n", r"orientation\.csv:1: expected the header"),
        (
            "source,orientation\na,UP\nb,SIDEWAYS\n",
            r"orientation\.csv:3: source 'b': unknown orientation 'SIDEWAYS'",
        ),
        (
            "source,orientation\na,UP\na,LEFT\nb,UP\n",
            r"orientation\.csv:3: source 'a' is annotated twice \(first on line 2\)",
        ),
        (
            "source,orientation\na,UP\nb,UP\nc,UP\n",
            r"orientation\.csv:4: source 'c' has no \.png, \.jpg or \.jpeg image",
        ),
        ("source,orientation\na,UP\n", r"orientation\.csv: no base orientation for source 'b'"),
        ("source,orientation\na,UP,extra\nb,UP\n", r"orientation\.csv:2: expected 2 fields"),
    ],
    ids=["header", "unknown", "twice", "no-image", "missing", "fields"],
)
def test_bad_annotations_are_refused_by_name(
    tmp_path: Path, annotations: str, message: str
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for stem in ("a", "b"):
        _marked((8, 8), "UP").save(src / f"{stem}.png")
    (src / "orientation.csv").write_text(annotations, encoding="utf-8")
    with pytest.raises(StimulusError, match=message):
        rotate_images(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_synthetic_crops_are_deterministic_and_read_as_annotated(tmp_path: Path) -> None:
    assert synthetic_crop(SEED, 2) == synthetic_crop(SEED, 2)
    rows = write_rotation_set(tmp_path, SEED, count=4)
    annotated = _truth(tmp_path / "sources" / "orientation.csv")
    assert [a["source"] for a in annotated] == ["crop-01", "crop-02", "crop-03", "crop-04"]
    assert {a["orientation"] for a in annotated} > {"RIGHT", "LEFT"}  # not all upright
    assert len(rows) == 16
    for row in rows:  # the simulated reader sees the annotated chest-wall-to-nipple direction
        png = (tmp_path / "stimuli" / f"{row['stimulus']}.png").read_bytes()
        assert image_direction(png) == row["orientation"], row
    with pytest.raises(StimulusError, match="already exists"):
        write_rotation_set(tmp_path, SEED, count=4)


# ------------------------------------------------------------------ ledger new


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rotation") / "study"
    new_study(root, "prompt-rotation", fixed_key("rotation/owner"))
    return root


def test_new_study_is_the_papers_experiment_2(scaffolded: Path) -> None:
    study = load_study(scaffolded)
    assert sorted(study.arms) == ["A", "B", "C", "D", "E"]
    assert len(study.stimuli) == 64 and study.replicates == 1
    assert len(study.arms) * len(study.stimuli) * study.replicates == 256 + 64
    assert (str(study.seed), str(study.bootstrap_seed), study.bootstrap_iterations) == (
        str(SEED),
        str(SEED),
        5000,
    )
    tests = {h.id: h.test for h in study.hypotheses}
    assert tests == {"H-mammo-1": "bootstrap", "H-mammo-2": "chi-square"}
    truth = _truth(scaffolded / "stimuli" / "truth.csv")
    annotated = {
        r["source"]: r["orientation"] for r in _truth(scaffolded / "sources" / "orientation.csv")
    }
    assert len(annotated) == 16
    assert all(r["source_orientation"] == annotated[r["source"]] for r in truth)


def test_new_study_takes_the_users_annotated_images(tmp_path: Path) -> None:
    images = tmp_path / "mine"
    images.mkdir()
    for index in range(2):
        png, _ = synthetic_crop(7, index)
        (images / f"scan-{index}.png").write_bytes(png)
    (images / "notes.txt").write_text("not copied", encoding="utf-8")
    no_annotations = tmp_path / "refused"
    with pytest.raises(StudyError, match=r"no orientation\.csv"):
        new_study(no_annotations, "prompt-rotation", fixed_key("rotation/u"), images=images)
    assert not no_annotations.exists()
    (images / "orientation.csv").write_text(
        "source,orientation\nscan-0,RIGHT\nscan-1,SIDEWAYS\n", encoding="utf-8"
    )
    with pytest.raises(StudyError, match=r"mine/orientation\.csv:3: .*SIDEWAYS"):
        new_study(tmp_path / "bad", "prompt-rotation", fixed_key("rotation/u"), images=images)
    assert not (tmp_path / "bad").exists()
    (images / "orientation.csv").write_text(
        "source,orientation\nscan-0,RIGHT\nscan-1,LEFT\n", encoding="utf-8"
    )
    root = tmp_path / "study"
    new_study(root, "prompt-rotation", fixed_key("rotation/u"), images=images)
    assert sorted(p.name for p in (root / "sources").iterdir()) == [
        "orientation.csv",
        "scan-0.png",
        "scan-1.png",
    ]
    assert len(load_study(root).stimuli) == 8
    with pytest.raises(StudyError, match="does not take images"):
        new_study(tmp_path / "e", "prompt-tumbling-e", fixed_key("rotation/e"), images=images)


# ------------------------------------------------------------------ the simulated phenotype


def test_simulated_model_shows_the_experiment_2_phenotype(scaffolded: Path) -> None:
    """Rule arms beat the matched control; without the rule errors collapse to RIGHT; the
    prohibited-reasoning block holds DOWN up when the rule is present (A vs E)."""
    study = load_study(scaffolded)
    truth = {r["stimulus"]: r["orientation"] for r in _truth(scaffolded / "stimuli" / "truth.csv")}
    model = SimulatedModel()
    correct: dict[tuple[str, str], list[bool]] = collections.defaultdict(list)
    wrong: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for arm in ("A", "B", "E"):
        text = study.arm_text(arm)
        for stimulus, t in truth.items():
            data = base64.b64encode(study.stimuli[stimulus].read_bytes()).decode()
            request = {
                "model": "m",
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": data,
                                },
                            },
                            {"type": "text", "text": text},
                        ],
                    }
                ],
            }
            for rep in range(6):
                reply = model.respond(request, f"t|{arm}|{stimulus}|{rep}")["content"][0]["text"]
                said = next((w for w in ORIENTATIONS if w in reply), None)
                if said is None:
                    continue
                correct[(arm, t)].append(said == t)
                if said != t:
                    wrong[arm][said] += 1

    def acc(arm: str, *truths: str) -> float:
        hits = [c for t in truths or ORIENTATIONS for c in correct[(arm, t)]]
        return sum(hits) / len(hits)

    assert acc("A") > acc("B") + 0.08
    assert wrong["B"].most_common(1)[0][0] == "RIGHT"
    assert wrong["B"]["RIGHT"] > 0.4 * sum(wrong["B"].values())
    assert acc("A", "DOWN") > acc("E", "DOWN") + 0.1
    assert acc("B", "RIGHT") > acc("B", "DOWN")


# ------------------------------------------------------------------ exploratory.by_truth

PLAN = {
    "arms": {"A": {"role": "full"}, "B": {"role": "matched-control"}, "E": {"role": "x"}},
    "hypotheses": [{"id": "H1", "contrast": ["B", "E"]}, {"id": "H2", "contrast": ["B", "A"]}],
}


def _dataset() -> Dataset:
    rng = np.random.default_rng(3)
    trials, items = [], []
    for n, (arm, truth) in enumerate(
        (a, t) for a in ("A", "B", "E") for t in ORIENTATIONS for _ in range(5)
    ):
        if arm == "E" and truth == "LEFT":
            continue  # an empty cell: no interval, its contrasts not computable
        answer = truth if rng.random() < {"A": 0.8, "B": 0.5, "E": 0.7}[arm] else "RIGHT"
        trial = f"{arm}|s{n}|1"
        excluded = n % 17 == 0
        trials.append(
            {
                "trial": trial,
                "arm": arm,
                "stimulus": f"s{n}",
                "rep": 1,
                "response_seq": n,
                "status": "unparseable" if excluded else "ok",
                "n_items": 1,
                "n_answered": 1,
                "n_correct": int(answer == truth),
                "accuracy": float(answer == truth),
                "control": False,
                "excluded": excluded,
            }
        )
        items.append(
            {
                "trial": trial,
                "arm": arm,
                "stimulus": f"s{n}",
                "rep": 1,
                "row": None,
                "position": None,
                "truth": truth,
                "answer": answer,
                "correct": answer == truth,
            }
        )
    return Dataset(pd.DataFrame(trials), pd.DataFrame(items), ("A", "B", "E"), (), "0" * 64)


def test_by_truth_counts_cells_and_matches_the_verifiers_twin() -> None:
    ds = _dataset()
    assert truth_contrasts(PLAN, ds.arms) == [("A", "B"), ("A", "E"), ("B", "E")]
    result = by_truth(ds, PLAN, ORIENTATIONS)
    assert result.status == "ok" and result.label == "exploratory"
    values = result.as_dict()["values"]
    kept = ds.trials[~ds.trials["excluded"]]
    for arm in ds.arms:
        for label in ORIENTATIONS:
            rows = ds.items[
                ds.items["trial"].isin(kept["trial"])
                & (ds.items["arm"] == arm)
                & (ds.items["truth"] == label)
            ]
            cell = values["cells"][arm][label]
            assert (cell["correct"], cell["n"]) == (int(rows["correct"].sum()), len(rows))
            assert (cell["wilson"] is None) == (len(rows) == 0)
    assert "error" in values["contrasts"]["A-E"]["LEFT"]
    down = values["contrasts"]["A-B"]["DOWN"]
    a, b = values["cells"]["A"]["DOWN"], values["cells"]["B"]["DOWN"]
    assert down["estimate"] == pytest.approx(a["correct"] / a["n"] - b["correct"] / b["n"])
    assert down["lower"] < down["estimate"] < down["upper"]
    twin = _Dataset(
        ds.trials.to_dict("records"), ds.items.to_dict("records"), list(ds.arms), [], "0" * 64
    )
    recomputed = _by_truth(twin, PLAN, ORIENTATIONS)
    assert recomputed.status == "ok"
    assert _first_difference(values, recomputed.values, "values", 1e-9) is None
    moved = {
        **values,
        "cells": {
            **values["cells"],
            "A": {**values["cells"]["A"], "UP": {**values["cells"]["A"]["UP"], "correct": 0}},
        },
    }
    assert "values.cells.A.UP.correct" in str(
        _first_difference(moved, recomputed.values, "values", 1e-9)
    )
    assert vst.wilson(1, 2)  # the twin's own statistics, not the writer's


# ------------------------------------------------------------------ subsets keep every member


def test_subsets_keep_the_datasets_flags() -> None:
    """for_stimuli / for_model are the dataset with fewer rows (dataclasses.replace): a variant
    or cloze study's subset hypothesis sees variants and cloze as the whole study does."""
    ds = _dataset()
    ds = Dataset(
        ds.trials.assign(model="m1", variant="v1"),
        ds.items.assign(model="m1", variant="v1"),
        ds.arms,
        ("A|m1|s0|v1|1",),
        ds.scores_sha256,
        {"s0": "src"},
        ("m1", "m2"),
        variants=True,
        cloze=True,
    )
    sub = ds.for_stimuli(["s1", "s2"])
    assert set(sub.trials["stimulus"]) == {"s1", "s2"}
    for f in fields(Dataset):
        if f.name not in ("trials", "items"):
            assert getattr(sub, f.name) == getattr(ds, f.name), f.name
    one = ds.for_model("m1")
    assert (one.variants, one.cloze, one.models, one.sources) == (True, True, (), {"s0": "src"})
    assert sub.trials_csv().startswith(b"trial,arm,model,stimulus,variant,")
    twin = _Dataset(
        ds.trials.to_dict("records"),
        ds.items.to_dict("records"),
        list(ds.arms),
        list(ds.given_up),
        ds.scores_sha256,
        dict(ds.sources),
        list(ds.models),
        variants=True,
        cloze=True,
    )
    tsub = twin.for_stimuli(["s1"])
    assert (tsub.variants, tsub.cloze, tsub.models, tsub.given_up) == (
        True,
        True,
        ["m1", "m2"],
        ["A|m1|s0|v1|1"],
    )
    tone = twin.for_model("m1")
    assert (tone.variants, tone.cloze, tone.models) == (True, True, [])


# ------------------------------------------------------------------ the demo (slow)


@pytest.mark.slow
def test_rotation_demo_runs_offline_and_its_export_verifies(tmp_path: Path) -> None:
    env = dict(os.environ, COLUMNS="200")
    env.pop("ANTHROPIC_API_KEY", None)
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ledger.cli import main; main()",
            "demo",
            str(tmp_path / "demo"),
            "--template",
            "prompt-rotation",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "VERIFIED:" in out and "FAILED:" in out  # the archive, then the tampered copy
    assert "H-mammo-1" in out and "H-mammo-2" in out
    archive = tmp_path / "demo" / "archive"
    assert (archive / "truth" / "truth.csv").is_file()
    assert_flow_matches_ledger(archive)  # docs/reporting.md §1
    html = (archive / "analysis" / "report.html").read_text(encoding="utf-8")
    assert "accuracy by true answer" in html and "hypothesis-generating" in html
    assert "Declared deviations" in html
    check = subprocess.run(
        ["sha256sum", "--quiet", "-c", "MANIFEST.sha256"],
        cwd=archive,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert resources.files("runner").joinpath("templates/prompt_rotation/study.toml").is_file()


# ------------------------------------------------------------------ post-hoc analyses


def test_posthoc_result_is_labelled_post_hoc_and_matches_the_verifier() -> None:
    """The paper's post-hoc model (stimulus as random intercept) on a small dataset: the
    writer's result and the verifier's recomputation (its own REML check) agree."""
    from analysis._posthoc import POSTHOC_LABEL, posthoc_result

    ds = _dataset()
    for frame in (ds.trials, ds.items):  # each stimulus seen several times: a group variance
        frame["stimulus"] = [f"s{int(s[1:]) % 6}" for s in frame["stimulus"]]
    plan = {**PLAN, "analysis": {"random_intercept": "source", "model_arms": None}}
    declared = {
        "contrast": ["A", "B"],
        "random_intercept": "stimulus",
        "arms": ["A", "B"],
        "reason": "as the paper did",
        "after_seq": 1,
    }
    result = posthoc_result(ds, plan, declared, "stim")
    body = result.as_dict()
    assert (body["id"], body["label"], body["hypothesis"], body["verdict"]) == (
        "posthoc.stim",
        POSTHOC_LABEL,
        None,
        None,
    )
    assert body["status"] == "ok", body["error"]
    c = body["values"]["contrast"]
    assert (c["a"], c["b"], c["sides"]) == ("A", "B", "two-sided")
    assert body["values"]["group_col"] == "stimulus"  # the declaration's, not the plan's
    twin = _Dataset(
        ds.trials.to_dict("records"), ds.items.to_dict("records"), list(ds.arms), [], "0" * 64
    )
    sub_plan = {**plan, "analysis": {"random_intercept": "stimulus", "model_arms": ["A", "B"]}}
    fitted, fit = _model(twin, sub_plan, recorded=body["values"])
    assert fit is not None and fitted.values["_reml_problem"] is None
    values = dict(fitted.values) | {"contrast": vst.contrast(fit, "A", "B", "two-sided")}
    assert _first_difference(body["values"], values, "values", 1e-6) is None
    moved = {**body["values"], "contrast": {**c, "estimate": c["estimate"] * (1 + 1e-4)}}
    assert "values.contrast.estimate" in str(_first_difference(moved, values, "values", 1e-6))


def _small_rotation(root: Path, images: Path) -> None:
    images.mkdir()
    lines = ["source,orientation"]
    for index in range(2):
        png, direction = synthetic_crop(11, index)
        (images / f"scan-{index}.png").write_bytes(png)
        lines.append(f"scan-{index},{direction}")
    (images / "orientation.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    new_study(root, "prompt-rotation", fixed_key("rotation/posthoc"), images=images)
    spec = root / "study.toml"
    spec.write_text(
        spec.read_text(encoding="utf-8")
        .replace("replicates = 1\n", "replicates = 3\n")
        .replace("bootstrap_iterations = 5000", "bootstrap_iterations = 500"),
        encoding="utf-8",
    )


@pytest.mark.slow
def test_posthoc_analysis_end_to_end_and_a_resigned_change_fails(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from ledger.cli import main
    from tests.verify.test_archive_tamper import read_events, resign
    from verify import Status, verify_archive

    root = tmp_path / "study"
    _small_rotation(root, tmp_path / "images")
    key = tmp_path / "owner.key"
    fixed_key("rotation/posthoc").save(key)

    def run(*args: object) -> Any:
        return CliRunner().invoke(main, [str(a) for a in args])

    for step in (
        ("lock", root),
        ("run", root, "--backend", "simulated"),
        ("score", root),
        ("unblind", root),
    ):
        assert run(*step, "--key", key).exit_code == 0, step
    early = run("posthoc", root, "early", "--contrast", "A", "B", "--reason", "x", "--key", key)
    assert early.exit_code != 0 and "after 'ledger analyze'" in early.output
    assert run("analyze", root, "--key", key).exit_code == 0
    registered = [e.body for e in _events(root, "analysis.result")]
    made = run(
        "posthoc",
        root,
        "stim-lmm",
        "--contrast",
        "A",
        "B",
        "--arms",
        "A,B,C,D",
        "--reason",
        "the paper's post-hoc LMM with stimulus as random intercept",
        "--key",
        key,
    )
    assert made.exit_code == 0, made.output
    assert "post hoc, no verdict" in made.output
    again = run("posthoc", root, "stim-lmm", "--contrast", "A", "B", "--reason", "x", "--key", key)
    assert again.exit_code != 0 and "already recorded" in again.output
    assert [e.body for e in _events(root, "analysis.result")] == registered  # untouched
    (event,) = _events(root, "analysis.posthoc")
    assert event.body["label"] == "post hoc" and event.body["verdict"] is None
    assert event.body["declared"]["after_seq"] == max(
        e.seq for e in _events(root, "analysis.result")
    )
    archive = tmp_path / "archive"
    assert run("export", root, archive, "--key", key).exit_code == 0
    report = verify_archive(archive)
    assert report.ok, [c for c in report.checks if c.status is Status.FAIL]
    assert "post-hoc" in str(report.get("reanalysis").reason)
    html = (archive / "analysis" / "report.html").read_text(encoding="utf-8")
    assert "Post hoc (declared after unblinding; not pre-registered)" in html
    assert "posthoc.stim-lmm" in (archive / "README.md").read_text(encoding="utf-8")

    events = read_events(archive)
    target = next(e for e in events if e["kind"] == "analysis.posthoc")
    target["body"]["values"]["contrast"]["estimate"] *= 1 + 1e-4
    resign(archive, events)
    forged = verify_archive(archive)
    assert forged.get("signatures").status is Status.PASS
    check = forged.get("reanalysis")
    assert check.status is Status.FAIL
    assert "posthoc.stim-lmm" in check.reason and "contrast.estimate" in check.reason, check
    assert json.loads((archive / "analysis" / "results.json").read_text())  # untouched file


def _events(root: Path, kind: str) -> list[Any]:
    from ledger import Ledger

    with Ledger.open(root / "ledger.db", readonly=True) as log:
        return list(log.events(kind))


def test_stimulus_subsets_are_kept_only_for_small_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan's small simulated studies keep each stimulus subset for its hypotheses; a large
    dataset makes it again each time (issue 41: a kept subset is a second item table)."""
    from analysis import _analyze

    ds = _dataset()
    kept = _analyze._stimulus_subset(ds, ["s1", "s2"])
    assert _analyze._stimulus_subset(ds, ["s1", "s2"]) is kept
    assert set(kept.trials["stimulus"]) == {"s1", "s2"}
    monkeypatch.setattr(_analyze, "SUBSET_MEMO_MAX_TRIALS", len(ds.trials) - 1)
    big = _dataset()
    one, two = _analyze._stimulus_subset(big, ["s1"]), _analyze._stimulus_subset(big, ["s1"])
    assert one is not two and "_stimulus_subsets" not in big.__dict__
    assert one.trials.equals(two.trials) and one.items.equals(two.items)
