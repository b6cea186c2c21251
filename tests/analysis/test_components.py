"""The report's component classes and trial-level distribution (docs/analysis.md §7).

The rule is applied to hand-made registered results, by the writer (``analysis._report``) and
by the verifier's twin (``verify._archive.report``), which must agree row for row.
"""

from __future__ import annotations

from typing import Any

import pytest

from analysis._report import component_classes, trial_distribution
from verify._archive import report as twin

ARMS = {
    "A": {"components": ["framing", "rule", "block", "schema"]},
    "B": {"components": ["framing", "note", "block", "schema"]},
    "C": {"components": ["vehicle", "schema"]},
    "D": {"components": ["framing", "schema"]},
    "E": {"components": ["framing", "rule", "schema"]},
}


def _protocol(*hypotheses: dict[str, Any]) -> dict[str, Any]:
    return {"arms": ARMS, "hypotheses": list(hypotheses)}


def _result(hid: str, verdict: str, estimate: float | None, status: str = "ok") -> dict[str, Any]:
    return {
        "hypothesis": hid,
        "status": status,
        "verdict": verdict,
        "values": {} if estimate is None else {"estimate": estimate},
    }


def _both(protocol: dict[str, Any], results: list[dict[str, Any]]) -> list[list[str]]:
    mine = [
        [unit, "; ".join(evidence), cls]
        for unit, evidence, cls in component_classes(protocol, results)
    ]
    assert twin._component_classes(protocol, results) == mine
    return mine


def test_the_papers_experiment_1_classes() -> None:
    protocol = _protocol(
        {"id": "H1", "contrast": ["A", "B"], "test": "lmm"},
        {"id": "H2", "contrast": ["B", "C"], "test": "lmm"},
        {"id": "H3", "contrast": ["A", "E"], "test": "equivalence"},
        {
            "id": "H4-left",
            "contrast": ["E", "D"],
            "test": "independent-t",
            "stimuli": ["uniform-left"],
        },
        {"id": "H5", "contrast": ["B", "A"], "test": "chi-square"},
    )
    rows = _both(
        protocol,
        [
            _result("H1", "supported", 0.48),
            _result("H2", "supported", -0.25),
            _result("H3", "supported", None),
            _result("H4-left", "supported", 0.85),
            _result("H5", "supported", None),
            _result("H1@m2", "supported", -0.3),
        ],
    )
    assert rows == [
        ["rule", "H1 (A vs B): benefit; H4-left (E vs D on uniform-left): benefit", "active"],
        ["block + framing + note", "H2 (B vs C): harm", "harmful"],
        ["block", "H3 (A vs E): no effect", "inactive"],
    ]


@pytest.mark.parametrize(
    ("results", "cls"),
    [
        ([("H1", "supported", 0.2), ("H2", "supported", -0.2)], "task-dependent"),
        ([("H1", "not supported", 0.2), ("H2", "not supported", -0.2)], "not established"),
        ([("H1", "supported", 0.0), ("H2", "not computed", None)], "not established"),
        ([("H1", "not supported", 0.4), ("H2", "supported", -0.1)], "harmful"),
    ],
    ids=["benefit-and-harm", "nothing-shown", "zero-estimate", "harm-only"],
)
def test_each_class_by_the_rule(results: list[tuple[str, str, float | None]], cls: str) -> None:
    protocol = _protocol(
        {"id": "H1", "contrast": ["B", "D"], "test": "independent-t", "stimuli": ["p3"]},
        {"id": "H2", "contrast": ["B", "D"], "test": "independent-t", "stimuli": ["p4"]},
    )
    made = [_result(h, v, e, "ok" if v != "not computed" else "failed") for h, v, e in results]
    rows = _both(protocol, made)
    assert [r[0] for r in rows] == ["block + note"] and rows[0][2] == cls


def test_a_contrast_that_adds_nothing_names_no_component() -> None:
    protocol = _protocol({"id": "H1", "contrast": ["D", "A"], "test": "lmm"})
    assert _both(protocol, [_result("H1", "supported", -0.3)]) == []


def test_trial_distribution_bins_match_the_twin() -> None:
    trials = [
        {"arm": "A", "accuracy": "1", "control": "False", "excluded": "False"},
        {"arm": "A", "accuracy": "0.9836065574", "control": "False", "excluded": "False"},
        {"arm": "B", "accuracy": "0.1", "control": "False", "excluded": "False"},
        {"arm": "B", "accuracy": "0.7", "control": "False", "excluded": "False"},
        {"arm": "B", "accuracy": "0", "control": "False", "excluded": "False"},
        {"arm": "B", "accuracy": "0.5", "control": "False", "excluded": "True"},
        {"arm": "B", "accuracy": "1", "control": "True", "excluded": "False"},
    ]
    rows = trial_distribution(trials, ["A", "B", "C"])
    assert rows[0] == ["A", "2", "99.2%", *["0"] * 9, "2"]
    assert rows[1] == ["B", "3", "26.7%", "1", "1", "0", "0", "0", "0", "0", "1", "0", "0"]
    assert rows[2] == ["C", "0", "–", *["0"] * 10]

    class Blobs:
        def blob_ref(self, seq: int, name: str) -> str:
            return "d"

        def blob(self, digest: str) -> bytes:
            head = "arm,accuracy,control,excluded\n"
            return (
                head
                + "".join(
                    f"{t['arm']},{t['accuracy']},{t['control']},{t['excluded']}\n" for t in trials
                )
            ).encode()

    assert twin._distribution(Blobs(), 1, ["A", "B", "C"]) == rows  # type: ignore[arg-type]


def test_dismantling_contrasts_per_probe_match_the_verifiers_twin() -> None:
    """exploratory.by_stimulus: Welch t per dismantling pair and probe (the paper's B vs D per
    probe), writer against the verifier; an unfittable cell says so."""
    import numpy as np
    import pandas as pd

    from analysis._analyze import Dataset, by_stimulus, nested_pairs
    from verify._recompute.compare import _first_difference
    from verify._recompute.dataset import _Dataset
    from verify._recompute.exploratory import _by_stimulus

    plan = {"arms": ARMS}
    assert nested_pairs(plan) == [("A", "D"), ("A", "E"), ("B", "D"), ("E", "D")]
    rng = np.random.default_rng(9)
    rows = []
    for n, (arm, stimulus, rep) in enumerate(
        (a, s, r) for a in ARMS for s in ("p3", "p4") for r in range(4)
    ):
        acc = (
            1.0
            if arm in ("D", "E") and stimulus == "p4"
            else (float(np.clip(rng.normal(0.7, 0.2), 0, 1)))
        )
        rows.append(
            {
                "trial": f"{arm}|{stimulus}|{rep}",
                "arm": arm,
                "stimulus": stimulus,
                "rep": rep,
                "response_seq": n,
                "accuracy": acc,
                "control": False,
                "excluded": False,
                "status": "ok",
            }
        )
    trials = pd.DataFrame(rows)
    ds = Dataset(
        trials,
        pd.DataFrame(columns=["trial", "arm", "stimulus", "truth", "correct"]),
        tuple(ARMS),
        (),
        "0" * 64,
    )
    result = by_stimulus(ds, plan)
    assert result.status == "ok" and result.label == "exploratory"
    values = result.as_dict()["values"]
    assert values["stimuli"] == ["p3", "p4"]
    assert "error" in values["contrasts"]["E-D"]["p4"]  # both arms at ceiling there
    bd = values["contrasts"]["B-D"]["p3"]
    b = trials[(trials["arm"] == "B") & (trials["stimulus"] == "p3")]["accuracy"]
    d = trials[(trials["arm"] == "D") & (trials["stimulus"] == "p3")]["accuracy"]
    assert bd["difference"] == pytest.approx(b.mean() - d.mean())
    twin = _by_stimulus(_Dataset(rows, [], list(ARMS), [], "0" * 64), plan)
    assert twin.status == "ok"
    assert _first_difference(values, twin.values, "values", 1e-9) is None
