"""verify/_mcq.py, the independent MCQ statistics, against analysis.mcq and the references."""

from __future__ import annotations

import ast
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from mcq_tables import records, synthetic_trials
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar

from analysis.mcq import _stats as mcq
from verify import _mcq as vm

ORDERS = ["original", "rotate-1", "rotate-2", "swap", "shuffle-42"]
DIRECT = ("direct", "original", "m1")
COT = ("cot", "original", "m1")


def same(a: Any, b: Any, path: str = "", tol: float = 1e-9) -> None:
    """Equal JSON trees: same keys, same strings/ints/bools, floats within ``tol``."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (path, sorted(set(a) ^ set(b)))
        for key in a:
            same(a[key], b[key], f"{path}.{key}", tol)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (path, a, b)
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{path}[{i}]", tol)
    elif isinstance(a, float) and not isinstance(b, bool):
        assert b is not None and math.isclose(a, b, rel_tol=tol, abs_tol=tol), (path, a, b)
    else:
        assert a == b and type(a) is type(b), (path, a, b)


@pytest.fixture(scope="module")
def tables() -> tuple[mcq.Trials, list[dict[str, Any]]]:
    frame = synthetic_trials(
        items=40,
        arms=("direct", "cot"),
        models=("m1", "m2"),
        variants=ORDERS,
        reps=3,
        seed=11,
        unparsed=0.06,
    )
    return mcq.check_trials(frame), records(frame)


def test_verify_mcq_imports_nothing_from_the_writer() -> None:
    source = Path(vm.__file__).read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom | ast.Import):
            names = (
                [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            )
            for name in names:
                assert (name or "").split(".")[0] not in (
                    "ledger",
                    "runner",
                    "analysis",
                    "statsmodels",
                    "pandas",
                ), name


def test_accuracy_mcnemar_family_agree(tables: tuple[mcq.Trials, list[dict[str, Any]]]) -> None:
    frame, rows = tables
    same([c.as_dict() for c in mcq.accuracy_by_cell(frame)], vm.accuracy_by_cell(rows))
    family = [
        (DIRECT, COT),
        (DIRECT, ("direct", "rotate-1", "m1")),
        (("direct", "original", "m2"), ("cot", "original", "m2")),
    ]
    for method in ("holm", "bonferroni"):
        same(
            mcq.mcnemar_family(frame, family, method=method).as_dict(),  # type: ignore[arg-type]
            vm.mcnemar_family(rows, family, method=method),
        )


@pytest.mark.parametrize("basis", ["answer", "letter"])
def test_flip_rates_agree_bit_for_bit(
    tables: tuple[mcq.Trials, list[dict[str, Any]]], basis: str
) -> None:
    frame, rows = tables
    for other in ORDERS[1:]:
        b = ("direct", other, "m2")
        same(
            mcq.flip_rate_between(
                frame, ("direct", "original", "m2"), b, basis=basis, iterations=300, seed=4
            ).as_dict(),  # type: ignore[arg-type]
            vm.flip_rate_between(
                rows, ("direct", "original", "m2"), b, basis=basis, iterations=300, seed=4
            ),
            tol=0.0,
        )


@pytest.mark.parametrize("reference", ["uniform", "truth"])
def test_position_metrics_agree(
    tables: tuple[mcq.Trials, list[dict[str, Any]]], reference: str
) -> None:
    frame, rows = tables
    refused = 0
    for variant in ORDERS:
        cond = ("cot", variant, "m1")
        try:
            expected = mcq.position_metrics(frame, cond, reference=reference)  # type: ignore[arg-type]
        except mcq.McqError:  # a letter that is no trial's key has no 'truth' expectation
            refused += 1
            with pytest.raises(vm.McqStatError, match="reference 'truth'"):
                vm.position_metrics(rows, cond, reference=reference)
            continue
        same(expected.as_dict(), vm.position_metrics(rows, cond, reference=reference))
    assert refused == (1 if reference == "truth" else 0)


def test_consistency_voting_and_self_consistency_agree(
    tables: tuple[mcq.Trials, list[dict[str, Any]]],
) -> None:
    frame, rows = tables
    for basis in ("answer", "letter"):
        same(
            mcq.ordering_consistency(frame, "cot", "m2", ORDERS, basis=basis).as_dict(),  # type: ignore[arg-type]
            vm.ordering_consistency(rows, "cot", "m2", ORDERS, basis=basis),
        )
    same(
        mcq.permutation_vote(frame, "direct", "m1", ORDERS, abstain_below=0.6).as_dict(),
        vm.permutation_vote(rows, "direct", "m1", ORDERS, abstain_below=0.6),
    )
    same(mcq.self_consistency(frame, COT, 3, 0.7).as_dict(), vm.self_consistency(rows, COT, 3, 0.7))


def test_exclusions_agree(tables: tuple[mcq.Trials, list[dict[str, Any]]]) -> None:
    frame, rows = tables
    given_up = {"direct|m1|rotate-2|q003|2", "direct|m1|swap|q010|1", "cot|m1|original|q005|3"}
    kept = frame.frame.loc[~frame.frame["trial"].isin(given_up)]
    kept_rows = [r for r in rows if r["trial"] not in given_up]
    vote = mcq.permutation_vote(kept, "direct", "m1", ORDERS)
    assert [(e.item, e.rep) for e in vote.exclusions] == [("q003", 2), ("q010", 1)]
    same(vote.as_dict(), vm.permutation_vote(kept_rows, "direct", "m1", ORDERS))
    sc = mcq.self_consistency(kept, COT, 3, 0.7)
    assert [e.item for e in sc.exclusions] == ["q005"]
    same(sc.as_dict(), vm.self_consistency(kept_rows, COT, 3, 0.7))


def test_cloze_review_and_seeds_agree(tables: tuple[mcq.Trials, list[dict[str, Any]]]) -> None:
    frame, rows = tables
    for variant in ORDERS:
        same(
            mcq.cloze(frame, ("direct", variant, "m2")).as_dict(),
            vm.cloze(rows, ("direct", variant, "m2")),
        )
    same(
        mcq.review_sample(frame, COT, DIRECT, 7, 200).as_dict(),
        vm.review_sample(rows, COT, DIRECT, 7, 200),
    )
    values = {"42": 0.273, "123": 0.281, "456": 0.262}
    same(mcq.mean_over_seeds(values).as_dict(), vm.mean_over_seeds(values))


def test_gee_mirror_agrees_with_analysis_and_statsmodels(
    tables: tuple[mcq.Trials, list[dict[str, Any]]],
) -> None:
    frame, rows = tables
    fit = mcq.gee_arm_effects(frame, "direct", {"model": "m1", "variant": "original"})
    mirror = vm.gee_arm_effects(rows, "direct", {"model": "m1", "variant": "original"})
    assert mirror["converged"] and fit.converged
    expected = fit.as_dict()
    same({**expected, "warnings": []}, mirror, tol=1e-6)
    # and the mirror against statsmodels on a second, one-factor design
    data = frame.frame
    exog = np.column_stack([np.ones(len(data)), (data["arm"] == "cot").to_numpy(float)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sm.GEE(
            data["correct"].to_numpy(float),
            exog,
            groups=pd.factorize(data["item"], sort=True)[0],
            family=sm.families.Binomial(),
            cov_struct=sm.cov_struct.Exchangeable(),
        ).fit()
    one = vm.gee_arm_effects(rows, "direct")
    assert [t["estimate"] for t in one["terms"]] == pytest.approx(list(ref.params), abs=1e-6)
    assert [t["se"] for t in one["terms"]] == pytest.approx(list(ref.bse), abs=1e-6)
    assert one["dependence"] == pytest.approx(float(ref.cov_struct.dep_params), abs=1e-6)


def test_other_label_sets_agree() -> None:
    rows = []
    rng = np.random.default_rng(3)
    labels = ("yes", "no", "maybe")
    for i in range(30):
        key = labels[i % 3]
        for arm in ("full", "front-50"):
            guess = (
                key
                if rng.uniform() < (0.6 if arm == "full" else 0.3)
                else labels[int(rng.integers(0, 3))]
            )
            rows.append(
                {
                    "trial": f"{arm}{i}",
                    "item": f"p{i}",
                    "arm": arm,
                    "model": "4b",
                    "variant": "original",
                    "rep": 1,
                    "key": key,
                    "key_original": key,
                    "letter": guess,
                    "answer": guess,
                    "correct": guess == key,
                    "parse": "ok",
                }
            )
    frame = mcq.check_trials(pd.DataFrame(rows), labels)
    a, b = ("full", "original", "4b"), ("front-50", "original", "4b")
    same(mcq.paired_mcnemar(frame, a, b, labels).as_dict(), vm.paired_mcnemar(rows, a, b, labels))
    same(
        mcq.position_metrics(frame, b, letters=labels).as_dict(),
        vm.position_metrics(rows, b, letters=labels),
    )


def test_verify_mirror_matches_references_directly(
    tables: tuple[mcq.Trials, list[dict[str, Any]]],
) -> None:
    _, rows = tables
    result = vm.paired_mcnemar(rows, DIRECT, COT)
    grid = [[result["both_correct"], result["b_count"]], [result["c_count"], result["both_wrong"]]]
    assert result["test"]["p_exact"] == pytest.approx(sm_mcnemar(grid, exact=True).pvalue)
    counts = vm.position_metrics(rows, COT)["pred_counts"]
    assert vm.ckld(counts) == pytest.approx(sps.chisquare(counts).statistic)
    assert vm.rstd([0.6, 0.4, 0.5, 0.3]) == pytest.approx(np.std([0.6, 0.4, 0.5, 0.3]) / 0.45)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda r: vm.self_consistency(r, COT, 3, 0), "temperature 0 is a configuration error"),
        (
            lambda r: vm.permutation_vote(
                [x for x in r if x["trial"] != "direct|m1|swap|q001|1"],
                "direct",
                "m1",
                ORDERS,
                incomplete="error",
            ),
            "item 'q001' rep 1 has no trial for variant 'swap'",
        ),
        (
            lambda r: vm.cloze(
                [
                    {**x, "logprob_B": None} if x["trial"] == "direct|m1|original|q002|1" else x
                    for x in r
                ],
                DIRECT,
            ),
            "item 'q002' variant 'original': no log-probability for option letter 'B'",
        ),
        (
            lambda r: vm.check_trials(
                [{**x, "key": x["key_original"]} if x["variant"] == "rotate-1" else x for x in r]
            ),
            "column 'correct' differs from",
        ),
    ],
)
def test_verify_mirror_refuses_bad_input(
    tables: tuple[mcq.Trials, list[dict[str, Any]]], call, message: str
) -> None:  # type: ignore[no-untyped-def]
    _, rows = tables
    with pytest.raises(vm.McqStatError, match=message):
        call(rows)


@pytest.mark.parametrize("seed", [21, 22, 23])
def test_random_small_tables_agree_with_many_ties_and_unparsed(seed: int) -> None:
    orders = ["original", "rotate-1", "reverse", "shuffle-7"]
    frame = synthetic_trials(
        items=9, arms=("x", "y"), models=("m",), variants=orders, reps=4, seed=seed, unparsed=0.3
    )
    table, rows = mcq.check_trials(frame), records(frame)
    same(
        mcq.permutation_vote(table, "x", "m", orders, abstain_below=0.5).as_dict(),
        vm.permutation_vote(rows, "x", "m", orders, abstain_below=0.5),
    )
    same(
        mcq.ordering_consistency(table, "y", "m", orders, basis="letter").as_dict(),
        vm.ordering_consistency(rows, "y", "m", orders, basis="letter"),
    )
    same(
        mcq.self_consistency(table, ("y", "reverse", "m"), 4, 1.0).as_dict(),
        vm.self_consistency(rows, ("y", "reverse", "m"), 4, 1.0),
    )
    same(
        mcq.flip_rate_between(
            table, ("x", "original", "m"), ("y", "shuffle-7", "m"), iterations=50, seed=seed
        ).as_dict(),
        vm.flip_rate_between(
            rows, ("x", "original", "m"), ("y", "shuffle-7", "m"), iterations=50, seed=seed
        ),
        tol=0.0,
    )
    same(
        mcq.paired_mcnemar(table, ("x", "rotate-1", "m"), ("y", "rotate-1", "m")).as_dict(),
        vm.paired_mcnemar(rows, ("x", "rotate-1", "m"), ("y", "rotate-1", "m")),
    )
