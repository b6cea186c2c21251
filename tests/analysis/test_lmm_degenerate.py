"""Degenerate mixed models on both sides (issue 31, ``docs/statistics.md``).

An outcome the fixed effects and group intercepts fit exactly is "not applicable" to the
writer and to the verifier; a variance interval wider than a factor 1e8 is withheld by both;
the verifier's own REML optimum lands on the boundary when the maximum is there.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from locations import REPO
from statsmodels.regression.mixed_linear_model import MixedLM

from analysis import _stats as stats
from verify import _restats as vst
from verify._reml import RemlModel


def _frame(acc: list[float], arms: list[str], groups: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"acc": acc, "arm": arms, "probe": groups})


# arm A right on p0, wrong on p1; arm B wrong everywhere: arm + probe fit it exactly
ARMS = ["A", "A", "A", "A", "B", "B", "B", "B"]
GROUPS = ["p0", "p0", "p1", "p1", "p0", "p0", "p1", "p1"]
ADDITIVE = [1.0, 1.0, 0.0, 0.0, 0.5, 0.5, -0.5, -0.5]  # A − B = 0.5, p0 − p1 = 1


@pytest.mark.parametrize(
    "acc",
    [ADDITIVE, [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0], [0.5] * 8],
    ids=["arm-plus-probe", "arm-only", "constant"],
)
def test_an_exactly_fitted_outcome_is_not_applicable_on_both_sides(acc: list[float]) -> None:
    with pytest.raises(stats.NotApplicableError) as writer:
        stats.mixed_model(_frame(acc, ARMS, GROUPS), "acc", "arm", "probe", reference="A")
    assert "fit the outcome exactly" in str(writer.value) or "zero variance" in str(writer.value)
    with pytest.raises(vst.NotApplicable):
        vst.mixed_model(acc, ARMS, GROUPS, "A")


def test_one_trial_off_the_exact_fit_is_fitted_on_both_sides() -> None:
    acc = [*ADDITIVE[:-1], 0.5]  # the last trial breaks the additive pattern
    fit = stats.mixed_model(_frame(acc, ARMS, GROUPS), "acc", "arm", "probe", reference="A")
    assert fit.residual_variance > 0
    mine = vst.mixed_model(acc, ARMS, GROUPS, "A", at=(fit.group_variance, fit.residual_variance))
    assert mine["_reml_problem"] is None
    assert mine["fixed_effects"][1]["estimate"] == pytest.approx(
        fit.fixed_effects[1].estimate, rel=1e-9
    )


WIDTH_VECTORS = [
    ((1.0, 2.0, 0.5, 0.6), ()),
    ((1.0, 1e8, 0.5, 0.6), ()),  # exactly a factor 1e8: kept
    ((2.3e-23, 4.7e15, 0.05, 0.12), ("group",)),
    ((0.0, 3.0, 0.05, 0.12), ("group",)),  # a lower bound that underflowed
    ((1e-3, math.inf, 1e-300, 1.0), ("group", "residual")),
    ((math.nan, math.nan, 0.05, 0.12), ()),  # a singular fit's null interval: no note
]


@pytest.mark.parametrize(("cis", "withheld"), WIDTH_VECTORS)
def test_an_uninformative_variance_interval_is_withheld_by_both(
    cis: tuple[float, float, float, float], withheld: tuple[str, ...]
) -> None:
    kept, note = stats.informative_variance_cis(cis)
    mine, names = vst._withhold_wide_intervals(cis)
    assert tuple(names) == withheld
    assert bool(note) == bool(withheld) and all(name in note for name in withheld)
    for k, name in ((0, "group"), (2, "residual")):
        for got in (kept, mine):
            if name in withheld:
                assert math.isnan(got[k]) and math.isnan(got[k + 1])
            else:
                assert got[k : k + 2] == cis[k : k + 2] or all(map(math.isnan, got[k : k + 2]))


def test_the_verifiers_own_optimum_is_on_the_boundary_when_the_maximum_is() -> None:
    # every probe has the same mean in each arm: the REML maximum is at σ²_g = 0 exactly,
    # where the writer's fit is (its boundary candidate σ²_e = RSS/(n − p))
    rng = np.random.default_rng(5)
    groups = [f"p{j}" for j in range(6) for _ in range(4)]
    arms = ["A", "B"] * 12
    noise = rng.normal(0, 0.2, size=2)
    acc = [
        float(noise[i % 2] * (1 if (i // 2) % 2 else -1)) + (0.3 if a == "A" else 0.0)
        for i, a in enumerate(arms)
    ]
    fit = stats.mixed_model(_frame(acc, arms, groups), "acc", "arm", "probe", reference="A")
    assert fit.group_variance == 0.0
    exog = np.column_stack([np.ones(len(acc)), [a == "B" for a in arms]]).astype(float)
    own = RemlModel(acc, exog, groups, [groups]).maximise()
    assert own.params[0] == 0.0
    assert own.params[1] == pytest.approx(fit.residual_variance, rel=1e-9)


def test_a_fit_statsmodels_fails_numerically_takes_the_closed_form_path_on_both_sides() -> None:
    # conformance seed 1016 (text family, two models, one arm with three holes): statsmodels'
    # optimiser raised "Singular matrix" on a step far from the REML maximum, which is on the
    # boundary; the writer recorded model.lmm "failed" and the verifier, fitting it, "ok"
    t = pd.read_csv(REPO / "tests" / "vectors" / "lmm-statsmodels-singular.csv")
    exog = np.column_stack(
        [np.ones(len(t)), t["arm"] == "plain", t["arm"] == "sys", t["model"] == "m2"]
    ).astype(float)
    y = t["accuracy"].to_numpy(dtype=float)
    with warnings.catch_warnings(), pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        warnings.simplefilter("ignore")  # its optimiser's warnings on the way to the error
        MixedLM(y, exog, groups=t["stimulus"].to_numpy()).fit(reml=True)  # what the vector pins
    args = (t, "accuracy", "arm", "stimulus", "evidence")
    fit = stats.mixed_model(*args, factors={"model": "m1"})
    with stats.closed_form_fits():
        direct = stats.mixed_model(*args, factors={"model": "m1"})
    assert fit.as_dict() == direct.as_dict()
    model = ("model", t["model"].tolist(), "m1")
    arms, groups = t["arm"].tolist(), t["stimulus"].tolist()
    own = vst.mixed_model(y, arms, groups, "evidence", factor=model)
    assert (fit.group_variance, own["group_variance"]) == (0.0, 0.0)  # the boundary
    assert fit.residual_variance == pytest.approx(own["residual_variance"], rel=1e-9)
    assert fit.singular and own["singular"]
    checked = vst.mixed_model(
        y, arms, groups, "evidence", factor=model, at=(fit.group_variance, fit.residual_variance)
    )
    assert checked["_reml_problem"] is None
    for mine, theirs in zip(checked["fixed_effects"], fit.fixed_effects, strict=True):
        assert mine["estimate"] == pytest.approx(theirs.estimate, rel=1e-9, abs=1e-12)
        assert mine["se"] == pytest.approx(theirs.se, rel=1e-9)
