"""Post-hoc analyses other than the mixed model (``docs/analysis.md`` §6), issue 19.

``ledger posthoc --test paired-t | independent-t | bootstrap`` computes what the registered test
of that name computes, two-sided, on the analysable trials (one model's with ``--model``); the
verifier recomputes each from its own statistics. The numbers here are checked against scipy
on pairs built in the test, and a moved number is caught. The end-to-end run (CLI, refusals,
archive, verification, report, README and ``ledger view``) is in the slow set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from analysis._analyze import Dataset
from analysis._posthoc import POSTHOC_LABEL, posthoc_result
from analysis.view._app import _posthoc_row
from verify._recompute.compare import _first_difference
from verify._recompute.dataset import _Dataset
from verify._recompute.posthoc import _posthoc_values
from verify._recompute.results import _guard, _Result

PLAN: dict[str, Any] = {
    "arms": {"A": {"role": "full"}, "B": {"role": "matched-control"}, "C": {"role": "vehicle"}},
    "design": {"bootstrap_iterations": 300, "bootstrap_seed": 11},
    "analysis": {"random_intercept": "stimulus"},
    "hypotheses": [],
}


def _rows(seed: int, models: tuple[str, ...] = ("",)) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for model in models:
        for j in range(5):
            u = rng.normal(0, 0.1)
            for arm, mean in (("A", 0.8), ("B", 0.55), ("C", 0.6)):
                for rep in range(1, 4):
                    acc = float(np.clip(mean + u + rng.normal(0, 0.12), 0, 1))
                    trial = f"{arm}|{model}|s{j}|{rep}" if model else f"{arm}|s{j}|{rep}"
                    out.append(
                        {
                            "trial": trial,
                            "arm": arm,
                            "model": model,
                            "stimulus": f"s{j}",
                            "rep": rep,
                            "accuracy": acc,
                            "control": False,
                            "excluded": False,
                            "status": "ok",
                        }
                    )
    return out


def _datasets(rows: list[dict[str, Any]], models: tuple[str, ...] = ()) -> tuple[Dataset, Any]:
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
    ds = Dataset(pd.DataFrame(rows), items, ("A", "B", "C"), (), "0" * 64, models=models)
    twin = _Dataset(rows, [], ["A", "B", "C"], [], "0" * 64, models=list(models))
    return ds, twin


def _declared(model: str | None = None) -> dict[str, Any]:
    return {
        "contrast": ["A", "B"],
        "random_intercept": None,
        "arms": None,
        "model": model,
        "reason": "reported as the paper does",
        "after_seq": 9,
    }


@pytest.mark.parametrize("test", ["paired-t", "independent-t", "bootstrap"])
def test_posthoc_tests_match_scipy_and_the_verifier(test: str) -> None:
    rows = _rows(1)
    ds, twin = _datasets(rows)
    body = posthoc_result(ds, PLAN, _declared(), "ab", test).as_dict()
    assert (body["id"], body["label"], body["test"]) == ("posthoc.ab", POSTHOC_LABEL, test)
    assert body["hypothesis"] is None and body["verdict"] is None
    assert body["status"] == "ok", body["error"]
    v, c = body["values"], body["values"]["contrast"]
    assert (c["a"], c["b"], c["sides"]) == ("A", "B", "two-sided")
    a = {(r["stimulus"], r["rep"]): r["accuracy"] for r in rows if r["arm"] == "A"}
    b = {(r["stimulus"], r["rep"]): r["accuracy"] for r in rows if r["arm"] == "B"}
    keys = sorted(a)
    if test == "paired-t":  # the paper's pairing: (probe, replicate)
        ref = sps.ttest_rel([a[k] for k in keys], [b[k] for k in keys])
        assert v["pairing"] == ["stimulus", "rep"] and v["n_x"] == len(keys)
    elif test == "independent-t":
        ref = sps.ttest_ind(list(a.values()), list(b.values()), equal_var=False)
    if test != "bootstrap":
        assert c["t"] == pytest.approx(float(ref.statistic), rel=1e-10)
        assert c["p"] == pytest.approx(float(ref.pvalue), rel=1e-9)
        lo, hi = ref.confidence_interval(0.95)
        assert (c["lower"], c["upper"]) == pytest.approx((lo, hi), rel=1e-9)
    else:
        assert c["p"] is None and v["iterations"] == 300 and v["seed"] == 11
        assert c["lower"] < c["estimate"] < c["upper"]
    assert c["estimate"] == pytest.approx(np.mean(list(a.values())) - np.mean(list(b.values())))
    again = _posthoc_values(twin, PLAN, "A", "B", test)
    assert _first_difference(v, again, "values", 1e-6) is None
    moved = {**v, "contrast": {**c, "upper": c["upper"] * (1 + 1e-4)}}
    assert "values.contrast.upper" in str(_first_difference(moved, again, "values", 1e-6))


def test_posthoc_on_one_model_uses_that_models_trials_only() -> None:
    rows = _rows(2, models=("big", "small"))
    ds, twin = _datasets(rows, ("big", "small"))
    body = posthoc_result(ds, PLAN, _declared("small"), "ab-small", "paired-t").as_dict()
    assert body["status"] == "ok", body["error"]
    assert body["values"]["n_x"] == 15  # five probes x three replicates of model small
    again = _posthoc_values(twin.for_model("small"), PLAN, "A", "B", "paired-t")
    assert _first_difference(body["values"], again, "values", 1e-6) is None
    # pooled over both models, (stimulus, rep) does not pair one trial with one trial
    pooled = posthoc_result(ds, PLAN, _declared(), "ab", "paired-t").as_dict()
    assert pooled["status"] == "failed" and "has a key twice" in str(pooled["error"])


def test_a_pairing_that_does_not_pair_is_a_failed_posthoc_result_naming_the_trial() -> None:
    rows = [
        r for r in _rows(3) if not (r["arm"] == "B" and r["stimulus"] == "s2" and r["rep"] == 3)
    ]
    ds, twin = _datasets(rows)
    body = posthoc_result(ds, PLAN, _declared(), "ab", "paired-t").as_dict()
    assert body["status"] == "failed" and body["verdict"] is None
    assert "arm A has replicate 3 of stimulus 's2' and arm B has no such trial" in str(
        body["error"]
    )
    failed = _guard(_Result("posthoc"), lambda: _posthoc_values(twin, PLAN, "A", "B", "paired-t"))
    assert failed.status == "failed"


def test_viewer_row_of_a_posthoc_event() -> None:
    ds, _ = _datasets(_rows(4))
    body = posthoc_result(ds, PLAN, _declared(), "ab", "bootstrap").as_dict()
    body["declared"] = _declared()
    row = _posthoc_row(41, body)
    c = body["values"]["contrast"]
    assert row["label"] == "post hoc" and row["test"] == "bootstrap" and row["p"] == "–"
    assert row["difference"] == (
        f"{100 * c['estimate']:+.1f} pp ({100 * c['lower']:+.1f} to {100 * c['upper']:+.1f})"
    )
    assert row["reason"] == "reported as the paper does" and row["seq"] == 41


@pytest.mark.slow
def test_posthoc_kinds_end_to_end_viewed_verified_and_a_forged_one_fails(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from helpers import fixed_key
    from starlette.testclient import TestClient

    from analysis.view._app import make_app
    from analysis.view._viewer import open_viewer
    from ledger.cli import main
    from tests.e2e.test_rotation_template import _small_rotation
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
        ("analyze", root),
    ):
        assert run(*step, "--key", key).exit_code == 0, step
    refused = run(
        "posthoc",
        root,
        "x",
        "--contrast",
        "A",
        "B",
        "--test",
        "paired-t",
        "--arms",
        "A,B",
        "--reason",
        "x",
        "--key",
        key,
    )
    assert refused.exit_code != 0 and "--arms belong to the mixed model" in refused.output
    no_model = run(
        "posthoc",
        root,
        "x",
        "--contrast",
        "A",
        "B",
        "--test",
        "bootstrap",
        "--model",
        "nope",
        "--reason",
        "x",
        "--key",
        key,
    )
    assert no_model.exit_code != 0 and "--model 'nope'" in no_model.output
    for name, test in (("ab-paired", "paired-t"), ("ab-boot", "bootstrap")):
        made = run(
            "posthoc",
            root,
            name,
            "--contrast",
            "A",
            "B",
            "--test",
            test,
            "--reason",
            f"A - B by {test}",
            "--key",
            key,
        )
        assert made.exit_code == 0 and "post hoc, no verdict" in made.output, made.output
    archive = tmp_path / "archive"
    assert run("export", root, archive, "--key", key).exit_code == 0
    report = verify_archive(archive)
    assert report.ok, [c for c in report.checks if c.status is Status.FAIL]
    html = (archive / "analysis" / "report.html").read_text(encoding="utf-8")
    assert "percentile bootstrap, 500 draws" in html and "posthoc.ab-paired" in html
    readme = (archive / "README.md").read_text(encoding="utf-8")
    assert "posthoc.ab-boot" in readme and "(percentile bootstrap)" in readme
    viewer = open_viewer(archive, verify=False)
    page = TestClient(make_app(viewer), base_url="http://127.0.0.1").get("/").text
    assert "Post hoc (declared after unblinding; not pre-registered)" in page
    assert "posthoc.ab-paired" in page and "posthoc.ab-boot" in page and "post hoc" in page

    events = read_events(archive)
    target = next(
        e for e in events if e["kind"] == "analysis.posthoc" and e["body"]["test"] == "paired-t"
    )
    target["body"]["values"]["contrast"]["t"] *= 1 + 1e-4
    resign(archive, events)
    check = verify_archive(archive).get("reanalysis")
    assert check.status is Status.FAIL
    assert "posthoc.ab-paired" in check.reason and "contrast.t" in check.reason, check
