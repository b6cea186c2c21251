"""verify._science: re-scoring and re-analysis of an exported archive, and its pure functions."""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import reanalysis_skipped
from locations import REPO
from scipy import stats as sps

from verify import Status
from verify import _parsers as vp
from verify import _rescore as rs
from verify import _restats as st
from verify._science import science_checks

DOCS = REPO / "docs"


# ------------------------------------------------------------------------------ the archive


@pytest.fixture
def archive(simulated_archive: Path) -> Path:
    """A simulated study (2 replicates), run, scored, unblinded, analysed and exported, built
    once per session (conftest's ``simulated_archive``; copy it to change it)."""
    return simulated_archive


@pytest.fixture
def copy(archive: Path, tmp_path: Path) -> Path:
    target = tmp_path / "archive"
    shutil.copytree(archive, target)
    return target


def read_events(root: Path) -> list[dict[str, Any]]:
    lines = (root / "ledger" / "events.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def rewrite_event(root: Path, seq: int, change: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``change`` to the body of event ``seq`` and write the line back (unsigned)."""
    path = root / "ledger" / "events.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for line in lines:
        event = json.loads(line)
        if event["envelope"]["seq"] == seq:
            change(event["envelope"]["body"])
            line = json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        out.append(line)
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


def checks(root: Path) -> dict[str, Any]:
    return {c.name: c for c in science_checks(root)}


def rescore(root: Path) -> Any:
    """The ``rescore`` check of ``root``, without the re-analysis (``helpers.reanalysis_skipped``:
    ``rescore`` runs first and on its own, so it says the same)."""
    with reanalysis_skipped():
        return checks(root)["rescore"]


def first(root: Path, kind: str, pred: Callable[[dict[str, Any]], bool] = lambda e: True) -> Any:
    return next(
        e["envelope"]
        for e in read_events(root)
        if e["envelope"]["kind"] == kind and pred(e["envelope"])
    )


def test_fresh_archive_passes(archive: Path) -> None:
    found = science_checks(archive)
    assert [c.name for c in found] == ["rescore", "reanalysis"]
    for check in found:
        assert check.status is Status.PASS, check


def test_edited_response_blob_fails_rescore(copy: Path) -> None:
    scored = first(copy, "trial.scored", lambda e: e["body"]["status"] == "ok")
    responded = next(
        e["envelope"]
        for e in read_events(copy)
        if e["envelope"]["seq"] == scored["body"]["response_seq"]
    )
    blob = copy / "blobs" / responded["blobs"]["response"]
    body = json.loads(blob.read_bytes())
    body["content"] = [{"type": "text", "text": "I would rather not say."}]
    blob.write_bytes(json.dumps(body).encode())
    result = rescore(copy)
    assert result.status is Status.FAIL
    assert result.seq == scored["seq"]
    assert f"seq {scored['seq']}" in result.reason
    assert "status" in result.reason


def test_edited_scored_body_fails_rescore(copy: Path) -> None:
    scored = first(copy, "trial.scored", lambda e: e["body"]["n_items"] > 1)

    def change(body: dict[str, Any]) -> None:
        body["n_correct"] -= 1

    rewrite_event(copy, scored["seq"], change)
    result = rescore(copy)
    assert result.status is Status.FAIL
    assert result.seq == scored["seq"]
    assert "n_correct" in result.reason


def test_missing_scored_event_fails_rescore(copy: Path) -> None:
    scored = first(copy, "trial.scored")

    def change(body: dict[str, Any]) -> None:
        body["response_seq"] = scored["seq"]  # not a trial.responded

    rewrite_event(copy, scored["seq"], change)
    assert rescore(copy).status is Status.FAIL


def test_edited_seal_fails_rescore(copy: Path) -> None:
    seal = first(copy, "scoring.sealed")

    def change(body: dict[str, Any]) -> None:
        body["scores_sha256"] = "0" * 64

    rewrite_event(copy, seal["seq"], change)
    result = rescore(copy)
    assert result.status is Status.FAIL and result.seq == seal["seq"]


@pytest.mark.parametrize(
    ("result_id", "path", "edit"),
    [
        ("hypothesis.H1", "values.p", lambda b: b["values"].__setitem__("p", 0.0456)),
        ("hypothesis.H2", "verdict", None),
        pytest.param(  # each case is a whole reanalysis: three here, three in the slow set
            "model.lmm",
            "values.icc",
            lambda b: b["values"].__setitem__("icc", 0.5),
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "exploratory.pair.A-B",
            "values.mcnemar.b",
            lambda b: b["values"]["mcnemar"].__setitem__("b", b["values"]["mcnemar"]["b"] + 1),
            marks=pytest.mark.slow,
        ),
        (
            "exploratory.question_run.C",
            "values.upper",
            lambda b: b["values"].__setitem__("upper", b["values"]["upper"] * 1.001),
        ),
        pytest.param(
            "hypothesis.H3",
            "decided_by.max_abs_diff",
            lambda b: b["decided_by"].__setitem__("max_abs_diff", 0.5),
            marks=pytest.mark.slow,
        ),
    ],
)
def test_edited_result_fails_reanalysis(
    copy: Path, result_id: str, path: str, edit: Callable[[dict[str, Any]], None] | None
) -> None:
    event = first(copy, "analysis.result", lambda e: e["body"]["id"] == result_id)

    def flip(body: dict[str, Any]) -> None:
        body["verdict"] = "not supported" if body["verdict"] == "supported" else "supported"

    rewrite_event(copy, event["seq"], edit or flip)
    found = checks(copy)  # one run of both checks: each reads the archive on its own
    result = found["reanalysis"]
    assert result.status is Status.FAIL
    assert result.seq == event["seq"]
    assert result.reason.startswith(f"{result_id} {path}"), result.reason
    assert found["rescore"].status is Status.PASS


def test_edited_results_json_fails_reanalysis(copy: Path) -> None:
    path = copy / "analysis" / "results.json"
    results = json.loads(path.read_bytes())
    results[0]["title"] = "something else"
    path.write_text(json.dumps(results, indent=2, sort_keys=True), encoding="utf-8")
    result = checks(copy)["reanalysis"]
    assert result.status is Status.FAIL and result.where == "analysis/results.json"


def test_edited_items_blob_fails_reanalysis(copy: Path) -> None:
    event = first(copy, "analysis.result")
    blob = copy / "blobs" / event["blobs"]["items_csv"]
    blob.write_bytes(blob.read_bytes().replace(b",True\n", b",False\n", 1))
    result = checks(copy)["reanalysis"]
    assert result.status is Status.FAIL and "items_csv" in result.reason


def test_unreadable_archive_fails_both(tmp_path: Path) -> None:
    found = science_checks(tmp_path)
    assert [c.status for c in found] == [Status.FAIL, Status.FAIL]


# ------------------------------------------------------------------------------ scoring


def doc_block(path: Path, after: str) -> list[str]:
    """The lines of the first ```text block after the heading ``after``."""
    text = path.read_text(encoding="utf-8")
    start = text.index(after)
    block = text[start:].split("```text\n", 1)[1].split("```", 1)[0]
    return block.strip("\n").split("\n")


def test_refusal_and_single_answer_patterns_are_the_documented_ones() -> None:
    doc = DOCS / "scoring.md"
    refusals = [line.split(" ", 1)[1] for line in doc_block(doc, "### 4.4")]
    assert list(rs.REFUSAL_PATTERNS) == refusals
    documented = dict(line.split(" ", 1) for line in doc_block(doc, "### 5.1"))
    assert documented == rs.SINGLE_PATTERNS


def test_documented_item_bytes() -> None:
    text = (DOCS / "scoring.md").read_text(encoding="utf-8")
    section = text[text.index("## 7. Item bytes") :]
    hashes = re.findall(r"`([0-9a-f]{64})`", section)
    cases: list[tuple[str, str, rs.Truth, str]] = [
        (
            '{"chart_type": "tumbling-e", "rows": [{"row": 1, "orientations": ["up"]}]}',
            "tumbling-e-json",
            (rs.Glyph(1, 1, "UP"),),
            "ok",
        ),
        ('{"chart_type": "other", "rows": []}', "tumbling-e-json", rs.CONTROL_TRUTH, "refused"),
        ("Answer: (c)", "multiple-choice", "B", "ok"),
    ]
    for (text_, parser, truth, status), digest in zip(cases, hashes, strict=True):
        scored = vp.score(vp.parse_text(text_, parser), parser, truth)
        assert scored.status == status
        assert scored.sha256 == digest
        assert hashlib.sha256(scored.items).hexdigest() == digest


def test_parsers_agree_with_the_reference_on_random_texts() -> None:
    from analysis._parse import PARSERS

    seeds = [
        '{"chart_type": "tumbling-e", "rows": [{"row": 1, "orientations": ["UP"]}, '
        '{"row": 2, "orientations": ["right", "DOWN"]}]}',
        '```json\n{"chart_type": "other", "rows": []}\n```',
        "This is not a tumbling E chart; the letters cannot be given orientations.",
        "Answer: B or C",
        "**C. Hypertension**",
        "No, the trial did not show a benefit.",
        "the top points LEFT",
        '[{"rows": 1}] {"rows": [{"row": 2.0, "orientations": "UP"}]} {"rows": []}',
    ]
    alphabet = [*'{}[]",:0123 \nUPLEFT*`-\u2013', '"row"', '"rows"', "answer: ", "(b)"]
    rng = random.Random(7)
    for _ in range(1500):
        text = rng.choice(seeds)
        for _ in range(rng.randint(1, 3)):
            k = rng.randrange(len(text) + 1)
            if rng.random() < 0.6:
                text = text[:k] + rng.choice(alphabet) + text[k:]
            else:
                text = text[:k] + text[k + 1 :]
        for name, reference in PARSERS.items():
            ref = reference(text)
            mine = vp.parse_text(text, name)
            assert mine.status == ref.status, (name, text)
            assert mine.answers == tuple((a.row, tuple(a.values)) for a in ref.answers)


def test_response_text_formats() -> None:
    messages = json.dumps(
        {
            "content": [
                {"type": "text", "text": "a"},
                {"type": "image"},
                {"type": "text", "text": "b"},
            ]
        }
    ).encode()
    assert rs.response_text(messages, "anthropic-messages") == "ab"
    chat = json.dumps({"choices": [{"message": {"content": "hi"}}]}).encode()
    assert rs.response_text(chat, "openai-chat") == "hi"
    for raw, fmt in ((b"\xef\xbb\xbf{}", "anthropic-messages"), (b"[]", "openai-chat")):
        assert vp.parse_body(raw, fmt, "tumbling-e-json").status == "unparseable"
    batch = json.dumps({"result": {"message": json.loads(messages)}}).encode()
    assert vp.parse_body(batch, "anthropic-batch-result", "multiple-choice").status == "unparseable"
    assert rs.batch_message(b"{}") == b"null"


# ------------------------------------------------------------------------------ statistics


def test_wilson_matches_newcombe() -> None:
    newcombe = [
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
        (29, 29, 0.8830, 1.0),
    ]
    for x, n, lo, hi in newcombe:
        w = st.wilson(x, n)
        assert round(w["lower"], 4) == lo and round(w["upper"], 4) == hi


def test_t_tests_match_scipy() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.normal(0.6, 0.1, 12), rng.normal(0.5, 0.2, 9)
    welch = st.independent_t(x, y)
    ref = sps.ttest_ind(x, y, equal_var=False)
    assert welch["t"] == pytest.approx(ref.statistic) and welch["p"] == pytest.approx(ref.pvalue)
    student = st.independent_t(x, y, welch=False)
    ref = sps.ttest_ind(x, y)
    assert student["p"] == pytest.approx(ref.pvalue) and student["df"] == 19
    paired = st.paired_t(x[:9], y)
    ref = sps.ttest_rel(x[:9], y)
    assert paired["t"] == pytest.approx(ref.statistic) and paired["p"] == pytest.approx(ref.pvalue)
    one = sps.ttest_rel(x[:9], y, alternative="greater")
    assert paired["p_one_sided"] == pytest.approx(one.pvalue)
    with pytest.raises(st.StatError):
        st.paired_t([1.0, 2.0], [0.0, 1.0])


def test_chi_square_mcnemar_and_corrections_match_scipy_statsmodels() -> None:
    from statsmodels.stats.contingency_tables import mcnemar
    from statsmodels.stats.multitest import multipletests

    chi = st.chi_square_gof([259, 398, 4, 1])
    ref = sps.chisquare([259, 398, 4, 1])
    assert chi["chi2"] == pytest.approx(ref.statistic) and chi["p"] == pytest.approx(ref.pvalue)
    for b, c in ((10, 18), (3, 9), (40, 12)):
        mine = st.mcnemar(b, c)
        table = [[0, b], [c, 0]]
        assert mine["p_exact"] == pytest.approx(mcnemar(table, exact=True).pvalue)
        assert mine["p_chi2_cc"] == pytest.approx(mcnemar(table, exact=False).pvalue)
        assert mine["p"] == (mine["p_exact"] if b + c < 25 else mine["p_chi2_cc"])
    assert st.mcnemar(5, 5)["p_chi2_cc"] == 1.0
    ps = [0.01, 0.04, 0.03, 0.2]
    assert st.holm(ps)["adjusted"] == pytest.approx(list(multipletests(ps, method="holm")[1]))
    assert st.bonferroni(ps)["adjusted"] == pytest.approx(
        list(multipletests(ps, method="bonferroni")[1])
    )


def test_bootstrap_follows_the_documented_draw_order() -> None:
    x = np.array([0.1, 0.5, 0.9, 0.7, 0.3])
    y = np.array([0.2, 0.4, 0.8])
    rng = np.random.Generator(np.random.PCG64(11))
    ix = [rng.integers(0, 5, size=5) for _ in range(300)]
    iy = [rng.integers(0, 3, size=3) for _ in range(300)]
    reps = np.array([x[i].mean() - y[j].mean() for i, j in zip(ix, iy, strict=True)])
    lower, upper = np.quantile(reps, [0.025, 0.975])
    result = st.bootstrap_diff(x, y, 300, "11")
    assert (result["lower"], result["upper"]) == (lower, upper)
    clustered = st.bootstrap_clustered(x, ["q1", "q1", "q2", "q2", "q3"], [1, 2, 1, 2, 1], 300, 11)
    rng = np.random.Generator(np.random.PCG64(11))
    reps = np.array([x[rng.integers(0, 5, size=5)].mean() for _ in range(300)])
    assert clustered["lower"] == np.quantile(reps, 0.025) and clustered["n_clusters"] == 3


def test_mixed_model_matches_the_statsmodels_formula_fit() -> None:
    import pandas as pd
    import statsmodels.formula.api as smf

    rng = np.random.default_rng(5)
    arms = ["A", "B", "C"] * 16
    groups = [f"s{i % 6}" for i in range(48)]
    effect = {"A": 0.9, "B": 0.6, "C": 0.7}
    shift = {g: rng.normal(0, 0.3) for g in sorted(set(groups))}
    y = [effect[a] + shift[g] + rng.normal(0, 0.1) for a, g in zip(arms, groups, strict=True)]
    fit = st.mixed_model(y, arms, groups, "A")
    df = pd.DataFrame({"y": y, "arm": arms, "g": groups})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = smf.mixedlm("y ~ arm", df, groups=df["g"]).fit(reml=True)
    estimates = [e["estimate"] for e in fit["fixed_effects"]]
    assert estimates == pytest.approx(list(ref.fe_params), rel=1e-4)
    assert fit["group_variance"] == pytest.approx(float(ref.cov_re.iloc[0, 0]), rel=1e-3)
    # log-scale Wald CIs: positive, containing the estimate, symmetric on the log scale
    for name in ("group_variance", "residual_variance"):
        lower, upper = fit[f"{name}_ci_lower"], fit[f"{name}_ci_upper"]
        assert 0 < lower < fit[name] < upper
        assert math.sqrt(lower * upper) == pytest.approx(fit[name], rel=1e-9)
    assert fit["variance_ci_method"] == "wald-log-observed-reml" and not fit["singular"]
    c = st.contrast(fit, "B", "C")
    assert c["estimate"] == pytest.approx(ref.fe_params.iloc[1] - ref.fe_params.iloc[2], rel=1e-4)
    one = st.contrast(fit, "A", "B", "one-sided")
    assert one["upper"] is None and one["p"] == pytest.approx(
        sps.norm.sf(one["estimate"] / one["se"])
    )


def test_mixed_model_with_a_model_factor_and_interaction_matches_statsmodels() -> None:
    import pandas as pd
    import statsmodels.formula.api as smf

    rng = np.random.default_rng(6)
    rows = []
    for item in range(24):
        u = rng.normal(0, 0.2)
        for model, shift in (("m1", 0.0), ("m2", -0.2)):
            for arm, effect in (("A", 0.7), ("B", 0.5), ("C", 0.6)):
                extra = 0.15 if (arm, model) == ("B", "m2") else 0.0
                rows.append(
                    (arm, model, f"s{item}", effect + shift + extra + u + rng.normal(0, 0.1))
                )
    df = pd.DataFrame(rows, columns=["arm", "model", "g", "y"])
    args = (list(df["y"]), list(df["arm"]), list(df["g"]), "A")
    factor = ("model", list(df["model"]), "m1")
    for interaction, formula in ((False, "y ~ arm + model"), (True, "y ~ arm * model")):
        fit = st.mixed_model(*args, factor=factor, interaction=interaction)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = smf.mixedlm(formula, df, groups=df["g"]).fit(reml=True)
        assert [e["estimate"] for e in fit["fixed_effects"]] == pytest.approx(
            list(ref.fe_params), rel=1e-4
        )
        assert fit["factors"] == ["model"] and fit["interaction"] is interaction
    terms = ["arm[T.B]:model[T.m2]", "arm[T.C]:model[T.m2]"]
    wald = st.wald(fit, terms)
    beta = ref.fe_params.to_numpy()[-2:]
    cov = ref.cov_params().to_numpy()[4:6, 4:6]
    assert wald["chi2"] == pytest.approx(float(beta @ np.linalg.solve(cov, beta)), rel=1e-3)
    assert wald["df"] == 2
    with pytest.raises(st.StatError):
        st.wald(fit, ["arm[T.Z]"])
    # B only on m1 and C only on m2 against A on both: still crossed (A spans both models)
    keep = ~(
        ((df["arm"] == "B") & (df["model"] == "m2")) | ((df["arm"] == "C") & (df["model"] == "m1"))
    )
    sub = df[keep]
    st.mixed_model(
        list(sub["y"]),
        list(sub["arm"]),
        list(sub["g"]),
        "A",
        factor=("model", list(sub["model"]), "m1"),
    )
    # only B and C, each on one model: arm and model confounded
    only = sub[sub["arm"] != "A"]
    with pytest.raises(st.StatError, match="linearly dependent"):
        st.mixed_model(
            list(only["y"]),
            list(only["arm"]),
            list(only["g"]),
            "B",
            factor=("model", list(only["model"]), "m1"),
        )


def test_descriptive_helpers() -> None:
    tvd = st.position_bias_tvd(
        ["UP", "UP", "(none)", "LEFT"],
        ["UP", "DOWN", "UP", "LEFT"],
        ["UP", "RIGHT", "DOWN", "LEFT"],
    )
    assert tvd["p_other"] == 0.25 and tvd["tvd"] == pytest.approx(0.5 * (0.25 + 0.25))
    share = st.canonical_share(["UP", "UP", "RIGHT"], ["RIGHT", "DOWN", "LEFT"])
    assert (share["count"], share["n"]) == (1, 3)
    eq = st.equivalence({"s1": 0.05, "s2": -0.08}, 0.1)
    assert eq["holds"] and eq["group"] == "s2"
    cm = st.confusion_matrix(["UP", "UP"], ["UP", "(none)"], ["UP", "DOWN"])
    assert cm["counts"] == [[1, 0], [0, 0]] and cm["other"] == [1, 0]
