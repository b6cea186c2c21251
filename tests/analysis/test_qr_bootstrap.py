"""Seed 001's bootstrap over (question, run) observations as a registered test.

``test = "qr-bootstrap"`` (docs/study-spec.md ``[[hypotheses]]``; docs/statistics.md "(question,
run) bootstrap as a registered test"). One module-scoped text study (8 multiple-choice items,
arms ``default`` and ``perturbed`` = default plus an urgency sentence, two simulated models,
two replicates) is locked, run, scored, unblinded, analysed and exported once; the tests
recompute its results with a direct per-iteration implementation of the seed's Appendix A (bit
for bit from the seed), check the verifier's re-derivation and its refusal of an edited,
re-signed result, the report's table, and each bad input.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from helpers import fixed_key
from locations import REPO

from analysis import _qr_boot as qr_boot
from analysis._analyze import Dataset, hypothesis_results, load_dataset, models
from analysis.statistics import REGISTRY
from ledger import Ledger
from ledger.cli import main
from runner._lock import ledger_path, protocol_event
from runner.spec import SpecError, load_study
from tests.analysis.test_mcq_hypotheses import edit_result
from tests.verify.test_archive_tamper import failed, passed
from tests.verify.test_verify_text_study import forge
from verify import _qrboot as vq
from verify import verify_archive
from verify._recompute.compare import _first_difference
from verify._recompute.dataset import _Dataset
from verify._report import Status
from verify._science import science_checks

ITEMS = [
    {
        "id": f"q{i:02d}",
        "question": f"Which finding best fits clinical vignette number {i}?",
        "options": [f"finding {i}-{k}" for k in range(4)],
        "answer": "ABCD"[(i * 3) % 4],
    }
    for i in range(1, 9)
]

HYPOTHESES = """
[[hypotheses]]
id = "Hdefault"
description = "Default accuracy is above 20%."
test = "qr-bootstrap"
statistic = "accuracy"
arm = "default"
min_pp = 20
alpha = 0.05

[[hypotheses]]
id = "Hsuccess"
description = "The urgency sentence changes correctness in fewer than 60% of (question, run) pairs."
test = "qr-bootstrap"
statistic = "success-rate"
contrast = ["perturbed", "default"]
max_pp = 60
alpha = 0.05

[[hypotheses]]
id = "Hperturbed"
description = "Post-perturbation global accuracy stays above 10%."
test = "qr-bootstrap"
statistic = "perturbed-accuracy"
contrast = ["perturbed", "default"]
min_pp = 10
alpha = 0.05

[[hypotheses]]
id = "Hdiff"
description = "The urgency sentence lowers accuracy."
test = "qr-bootstrap"
statistic = "difference"
contrast = ["perturbed", "default"]
sides = "two-sided"
alpha = 0.05
"""

SPEC = (
    """[study]
id = "qr-boot"
title = "Seed 001's pilot metrics"

[models.small]
provider = "anthropic"
id = "claude-haiku-4-5"
max_tokens = 16
temperature = 0.7

[models.large]
provider = "anthropic"
id = "claude-sonnet-4-6"
max_tokens = 16
temperature = 0.7

[components]
task = "prompts/task.txt"
urgency = "prompts/urgency.txt"

[prompt]
item = "prompts/item.txt"

[arms.default]
role = "full"
components = ["task"]

[arms.perturbed]
role = "factorial"
components = ["task", "urgency"]

[stimuli]
items = "items.jsonl"

[design]
replicates = 2
seed = 5
bootstrap_seed = 6
bootstrap_iterations = 400

[response]
parser = "multiple-choice"
mode = "first-token"

[analysis]
exclude_unparseable = false
"""
    + HYPOTHESES
)

IDS = ("Hdefault", "Hsuccess", "Hperturbed", "Hdiff")


def write_study(root: Path, spec: str = SPEC) -> Path:
    """The study's files under ``root``."""
    files = {
        "study.toml": spec,
        "prompts/task.txt": "Answer with the letter of the right option.\n",
        "prompts/urgency.txt": "Please hurry, I am really worried about this!\n",
        "prompts/item.txt": "Question: {question}\n{options}\n",
        "items.jsonl": "".join(json.dumps(r) + "\n" for r in ITEMS),
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def refused(tmp_path: Path, spec: str) -> str:
    """The SpecError text of ``spec`` (it must be refused)."""
    root = write_study(tmp_path / "bad", spec)
    with pytest.raises(SpecError) as info:
        load_study(root)
    return str(info.value)


def line_of(spec: str, text: str, after: str = "") -> int:
    """The 1-based line of the first line holding ``text`` (after the line holding ``after``)."""
    start = spec.index(after) if after else 0
    return spec.count("\n", 0, spec.index(text, start)) + 1


# ------------------------------------------------------------------------------ the study


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """The study locked, run (simulated), scored, unblinded, analysed and exported, once."""
    base = tmp_path_factory.mktemp("qrboot")
    mp = pytest.MonkeyPatch()
    mp.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
    try:
        key = base / "owner.key"
        fixed_key("qr-boot/owner").save(key)
        root = write_study(base / "study")
        for step in (
            ("lock", root),
            ("run", root, "--backend", "simulated"),
            ("score", root),
            ("unblind", root),
            ("analyze", root),
        ):
            result = CliRunner().invoke(main, [*map(str, step), "--key", str(key)])
            assert result.exit_code == 0, (step, result.output)
        out = base / "archive"
        result = CliRunner().invoke(main, ["export", str(root), str(out), "--key", str(key)])
        assert result.exit_code == 0, result.output
        yield root, out, key
    finally:
        mp.undo()


def results(archive: Path) -> dict[str, dict[str, Any]]:
    """The archive's analysis results by id."""
    listed = json.loads((archive / "analysis" / "results.json").read_text("utf-8"))
    return {r["id"]: r for r in listed}


@pytest.fixture(scope="module")
def data(built: tuple[Path, Path, Path]) -> tuple[Dataset, dict[str, Any]]:
    """The unblinded dataset and the locked plan."""
    with Ledger.open(ledger_path(built[0]), readonly=True) as log:
        event = protocol_event(log)
        assert event is not None
        plan = event.body
        ds = load_dataset(
            log, exclude_unparseable=False, parser="multiple-choice", models=models(plan)
        )
    return ds, plan


def test_the_hypotheses_lock_with_their_statistics(built: tuple[Path, Path, Path]) -> None:
    with Ledger.open(ledger_path(built[0]), readonly=True) as log:
        event = protocol_event(log)
        assert event is not None
    locked = {h["id"]: h for h in event.body["hypotheses"]}
    assert locked["Hdefault"]["arm"] == "default" and "contrast" not in locked["Hdefault"]
    assert locked["Hdefault"]["statistic"] == "accuracy"
    assert locked["Hdefault"]["min_pp"] == 20.0
    assert locked["Hsuccess"]["contrast"] == ["perturbed", "default"]
    assert locked["Hsuccess"]["max_pp"] == 60.0
    assert {h["outcome"] for h in locked.values()} == {"trial_accuracy"}


def test_every_result_is_computed_with_a_verdict(built: tuple[Path, Path, Path]) -> None:
    got = results(built[1])
    for hid in IDS:
        for suffix in ("", "@small", "@large"):
            r = got[f"hypothesis.{hid}{suffix}"]
            assert r["status"] == "ok", (hid, suffix, r["error"])
            assert r["verdict"] in ("supported", "not supported"), r
            assert r["values"]["n"] == (32 if not suffix else 16)
            assert set(REGISTRY["qr-bootstrap"].schema) <= set(r["values"]), (hid, suffix)
    assert got["descriptive.qr_bootstrap"]["status"] == "ok"
    # interval tests only: nothing for the multiplicity view to correct, and nothing failed
    assert got["exploratory.multiplicity"]["status"] == "ok"
    assert got["exploratory.multiplicity"]["values"]["hypotheses"] == []
    html = (built[1] / "analysis" / "report.html").read_text("utf-8")
    assert "Some results could not be computed" not in html
    assert "interval tests only): nothing to correct." in html


def test_the_archive_verifies(built: tuple[Path, Path, Path]) -> None:
    report = verify_archive(built[1])
    assert report.ok, [(c.name, c.reason) for c in report.checks if c.status.name == "FAIL"]


# ------------------------------------------------------------------------------ the numbers


def trials_table(archive: Path) -> pd.DataFrame:
    """The archive's ``trials.csv`` blob (the first analysis.result's), read by hand."""
    events = [
        json.loads(line)["envelope"]
        for line in (archive / "ledger" / "events.jsonl").read_text("utf-8").splitlines()
    ]
    first = next(e for e in events if e["kind"] == "analysis.result")
    blob = (archive / "blobs" / first["blobs"]["trials_csv"]).read_bytes()
    return pd.read_csv(
        io.BytesIO(blob), dtype={"model": str, "stimulus": str}, keep_default_na=False
    )


def seed_bootstrap(
    column: np.ndarray, iterations: int, seed: int, conf: float
) -> tuple[float, float]:
    """The seed's Appendix A, one iteration at a time: N indices drawn with replacement."""
    rng = np.random.default_rng(seed)
    n = column.size
    reps = np.empty(iterations)
    for i in range(iterations):
        draw = rng.integers(0, n, size=n)
        reps[i] = column[draw].mean()
    lo, hi = np.quantile(
        reps, [round((1 - conf) / 2, 12), round((1 + conf) / 2, 12)], method="linear"
    )
    return float(lo), float(hi)


def by_hand(t: pd.DataFrame, h: dict[str, Any], model: str | None) -> dict[str, Any]:
    """The hypothesis's estimate and interval from trials.csv, following the docs."""
    if model is not None:
        t = t[t["model"] == model]
    t = t.assign(rep=t["rep"].astype(int))
    keys = ["stimulus", "model", "rep"]

    def arm(name: str) -> pd.DataFrame:
        return t[t["arm"] == name].set_index(keys)["accuracy"].astype(float)

    if "arm" in h:
        column = arm(h["arm"]).sort_index().to_numpy()
    else:
        a, b = arm(h["contrast"][0]), arm(h["contrast"][1])
        joined = pd.concat({"a": a, "b": b}, axis=1).sort_index()
        x, y = joined["a"].to_numpy(), joined["b"].to_numpy()
        column = {
            "success-rate": (x != y).astype(float),
            "perturbed-accuracy": x,
            "difference": x - y,
        }[h["statistic"]]
    conf = 1 - h["alpha"] if h["statistic"] == "difference" else 1 - 2 * h["alpha"]
    lower, upper = seed_bootstrap(column, 400, 6, conf)
    return {
        "estimate": float(column.mean()),
        "lower": lower,
        "upper": upper,
        "conf": conf,
        "n": int(column.size),
    }


@pytest.mark.parametrize("hid", IDS)
def test_each_result_matches_the_seed_bootstrap_bit_for_bit(
    built: tuple[Path, Path, Path], data: tuple[Dataset, dict[str, Any]], hid: str
) -> None:
    got = results(built[1])
    t = trials_table(built[1])
    h = next(x for x in data[1]["hypotheses"] if x["id"] == hid)
    for model in (None, "small", "large"):
        v = got[f"hypothesis.{hid}" + (f"@{model}" if model else "")]["values"]
        want = by_hand(t, h, model)
        for k, value in want.items():
            assert v[k] == value, (hid, model, k, v[k], value)  # exactly: bit for bit


def test_the_vectorised_draw_is_the_per_iteration_draw_bit_for_bit() -> None:
    """Several row blocks (N large, so few rows per block), float values, both sides."""
    rng = np.random.default_rng(3)
    n = 70_001  # 2**18 // n = 3 rows per block: 11 iterations span four blocks
    x = rng.random(n)
    w = rng.random(n) - rng.random(n)
    got = qr_boot.resample_means([x, w], 11, 2026)
    mirrored = vq._replicates([x, w], 11, 2026)
    direct = np.random.default_rng(2026)
    for i in range(11):
        draw = direct.integers(0, n, size=n)
        assert got[0][i] == x[draw].mean() and got[1][i] == w[draw].mean(), i
        assert mirrored[0][i] == got[0][i] and mirrored[1][i] == got[1][i], i


def twin(ds: Dataset) -> _Dataset:
    """The verifier's dataset with the same rows."""
    return _Dataset(
        ds.trials.to_dict("records"),
        ds.items.to_dict("records"),
        list(ds.arms),
        list(ds.given_up),
        ds.scores_sha256,
        models=list(ds.models),
    )


def test_the_verifier_mirror_gives_the_same_values(data: tuple[Dataset, dict[str, Any]]) -> None:
    ds, plan = data
    vds = twin(ds)
    for h in plan["hypotheses"]:
        mine = qr_boot.qr_values(ds, plan, h)
        theirs = vq.values_of(vds, plan, h)
        assert mine == theirs, h["id"]
        assert qr_boot.decide(h, mine) == vq.decide(h, theirs)
    assert qr_boot.descriptive_values(ds, plan) == vq.descriptive_values(vds, plan)


def test_the_descriptive_table_is_the_seed_triple(
    built: tuple[Path, Path, Path], data: tuple[Dataset, dict[str, Any]]
) -> None:
    v = results(built[1])["descriptive.qr_bootstrap"]["values"]
    t = trials_table(built[1])
    contrast, arm = v["entries"]
    assert contrast["contrast"] == ["perturbed", "default"] and arm["arm"] == "default"
    assert [r["model"] for r in contrast["rows"]] == [None, "small", "large"]
    for row in contrast["rows"]:
        part = t if row["model"] is None else t[t["model"] == row["model"]]
        rows = part.assign(rep=part["rep"].astype(int)).set_index(["stimulus", "model", "rep"])
        joined = pd.concat(
            {a: rows[rows["arm"] == a]["accuracy"].astype(float) for a in ("perturbed", "default")},
            axis=1,
        ).sort_index()
        d, p = joined["default"].to_numpy(), joined["perturbed"].to_numpy()
        for name, column in (
            ("default", d),
            ("perturbed", p),
            ("success_rate", (d != p).astype(float)),
            ("difference", p - d),
        ):
            lower, upper = seed_bootstrap(column, 400, 6, 0.95)
            cell = row[name]
            assert (cell["estimate"], cell["lower"], cell["upper"]) == (
                float(column.mean()),
                lower,
                upper,
            ), (row["model"], name)
            assert cell["half_width"] == (upper - lower) / 2
    # the pooled default accuracy is the one-arm hypothesis's estimate
    pooled = results(built[1])["hypothesis.Hdefault"]["values"]["estimate"]
    assert arm["rows"][0]["mean"]["estimate"] == pooled


def test_the_report_shows_the_table_with_half_widths(built: tuple[Path, Path, Path]) -> None:
    html = (built[1] / "analysis" / "report.html").read_text("utf-8")
    v = results(built[1])["descriptive.qr_bootstrap"]["values"]
    row = v["entries"][0]["rows"][0]
    cell = row["success_rate"]
    shown = f"{cell['estimate'] * 100:.1f} ± {cell['half_width'] * 100:.1f}"
    assert "bootstrap over (question, run) observations" in html
    assert shown in html, shown
    assert "estimate ± half the width of the 95% percentile interval" in html


# ------------------------------------------------------------------------------ exclusions


def without(ds: Dataset, trial: str) -> Dataset:
    """``ds`` without one scored trial."""
    return replace(
        ds,
        trials=ds.trials[ds.trials["trial"] != trial],
        items=ds.items[ds.items["trial"] != trial],
    )


def test_arms_that_do_not_pair_fail_naming_the_first_unpaired_key(
    data: tuple[Dataset, dict[str, Any]],
) -> None:
    ds, plan = data
    lost = without(without(ds, "default|small|q05|2"), "perturbed|large|q07|2")
    by_id = {r.hypothesis: r for r in hypothesis_results(lost, plan, None)}
    r = by_id["Hsuccess"]
    assert r.status == "failed" and r.verdict == "not computed"
    assert r.error == (
        "qr-bootstrap pairs by (item, model, variant, rep): arm 'perturbed' has item 'q05' "
        "model 'small' rep 2 and arm 'default' does not (2 unpaired observations; the arms "
        "must run the same items and replicates)"
    )
    assert by_id["Hdefault"].status == "ok"  # one arm: nothing to pair
    h = next(x for x in plan["hypotheses"] if x["id"] == "Hsuccess")
    with pytest.raises(vq.QrError, match="arm 'perturbed' has item 'q05' model 'small' rep 2"):
        vq.values_of(twin(lost), plan, h)


def test_a_given_up_partner_is_a_counted_exclusion(data: tuple[Dataset, dict[str, Any]]) -> None:
    ds, plan = data
    gone = "default|small|q05|2"
    lost = replace(without(ds, gone), given_up=(gone,))
    h = next(x for x in plan["hypotheses"] if x["id"] == "Hsuccess")
    v = qr_boot.qr_values(lost, plan, h)
    assert v["n"] == 31 and v["given_up"] == 1 and v["undefined"] == 0
    assert v["excluded"] == [
        {
            "item": "q05",
            "model": "small",
            "variant": "",
            "rep": 2,
            "kind": "given-up",
            "trials": ["default|small|q05|2", "perturbed|small|q05|2"],
        }
    ]
    assert vq.values_of(twin(lost), plan, h) == v
    h1 = next(x for x in plan["hypotheses"] if x["id"] == "Hdefault")
    one = qr_boot.qr_values(lost, plan, h1)
    assert one["n"] == 31 and one["given_up"] == 1
    assert vq.values_of(twin(lost), plan, h1) == one


def test_an_undefined_value_is_excluded_and_counted(data: tuple[Dataset, dict[str, Any]]) -> None:
    ds, plan = data
    trials = ds.trials.copy()
    trials.loc[trials["trial"] == "perturbed|large|q03|1", "excluded"] = True
    h = next(x for x in plan["hypotheses"] if x["id"] == "Hdiff")
    v = qr_boot.qr_values(replace(ds, trials=trials), plan, h)
    assert vq.values_of(twin(replace(ds, trials=trials)), plan, h) == v
    assert v["n"] == 31 and v["undefined"] == 1
    assert v["excluded"][0]["kind"] == "undefined"
    assert v["excluded"][0]["trials"] == ["default|large|q03|1", "perturbed|large|q03|1"]


# ------------------------------------------------------------------------------ tampers


@pytest.fixture
def copied(built: tuple[Path, Path, Path], tmp_path: Path) -> Path:
    target = tmp_path / "archive"
    shutil.copytree(built[1], target)
    return target


def test_an_edited_re_signed_result_fails_naming_the_hypothesis(copied: Path) -> None:
    events, _ = edit_result(
        copied, "hypothesis.Hsuccess", lambda b: b["values"].__setitem__("upper", 0.7)
    )
    forge(copied, events)
    report = verify_archive(copied)
    passed(report, "signatures")
    reason = failed(report, "reanalysis")
    assert reason.startswith("hypothesis.Hsuccess values.upper: recorded 0.7, recomputed"), reason


@pytest.mark.parametrize(
    ("result_id", "path", "change"),
    [
        (
            "hypothesis.Hdefault@large",
            "verdict",
            lambda b: b.__setitem__(
                "verdict", "supported" if b["verdict"] != "supported" else "not supported"
            ),
        ),
        pytest.param(
            "descriptive.qr_bootstrap",
            "values.entries[0].rows[1].success_rate.lower",
            lambda b: b["values"]["entries"][0]["rows"][1]["success_rate"].__setitem__(
                "lower", 0.0
            ),
            marks=pytest.mark.slow,
        ),
    ],
    ids=["verdict", "descriptive"],
)
def test_an_edited_value_fails_reanalysis_naming_the_result(
    copied: Path, result_id: str, path: str, change: Any
) -> None:
    edit_result(copied, result_id, change)
    check = {c.name: c for c in science_checks(copied)}["reanalysis"]
    assert check.status is Status.FAIL
    assert check.reason.startswith(f"{result_id} {path}"), check.reason


# ------------------------------------------------------------------------------ bad input


def with_hypothesis(text: str) -> str:
    """The study with its hypotheses replaced by ``text``."""
    return SPEC.replace(HYPOTHESES, text)


def test_the_study_loads(tmp_path: Path) -> None:
    study = load_study(write_study(tmp_path / "s"))
    assert [h.statistic for h in study.hypotheses] == [
        "accuracy",
        "success-rate",
        "perturbed-accuracy",
        "difference",
    ]


@pytest.mark.parametrize(
    ("hypothesis", "field", "message"),
    [
        (
            'outcome = "glyph_accuracy"\n',
            "outcome",
            "hypothesis 'Hx': this study cannot produce outcome 'glyph_accuracy': parser "
            "'multiple-choice' gives one answer per trial",
        ),
        (
            'outcome = "fluency"\n',
            "outcome",
            "hypothesis 'Hx': unknown outcome 'fluency' for test 'qr-bootstrap'",
        ),
        ("", "alpha", "a qr-bootstrap rule needs alpha"),
        ('statstic = "difference"\n', "statstic", "unknown key (did you mean 'statistic'?)"),
        ("margin_pp = 5\n", "margin_pp", "does not apply to test 'qr-bootstrap' (hypothesis 'Hx'"),
        ('correction = "holm"\n', "correction", "does not apply to test 'qr-bootstrap'"),
        ('variant = "original"\n', "variant", "does not apply to test 'qr-bootstrap'"),
        ("min_pp = 5\n", "min_pp", "does not apply to statistic 'difference'"),
    ],
    ids=[
        "parser-cannot",
        "unknown-outcome",
        "missing-alpha",
        "unknown-key",
        "margin",
        "correction",
        "variant",
        "bound-on-difference",
    ],
)
def test_a_bad_hypothesis_is_refused_naming_line_and_field(
    tmp_path: Path, hypothesis: str, field: str, message: str
) -> None:
    alpha = "" if field == "alpha" else "alpha = 0.05\n"
    text = (
        '\n[[hypotheses]]\nid = "Hx"\ndescription = "x"\ntest = "qr-bootstrap"\n'
        'statistic = "difference"\ncontrast = ["perturbed", "default"]\n' + alpha + hypothesis
    )
    spec = with_hypothesis(text)
    error = refused(tmp_path, spec)
    key = field if field != "alpha" else "test"
    line = line_of(spec, f"{key} ", after='id = "Hx"') if field != "alpha" else None
    want = f"hypotheses[0].{field}: {message}"
    if field == "statstic":
        want = f"[[hypotheses]] #1 (Hx) statstic: {message}"
    assert want in error, error
    if line is not None:
        assert f"study.toml:{line}:" in error, error


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        (
            'statistic = "accuracy"\ncontrast = ["perturbed", "default"]\nmin_pp = 1\n',
            "contrast",
            "statistic 'accuracy' is of one arm: name it with 'arm', not a contrast",
        ),
        (
            'statistic = "success-rate"\narm = "default"\nmax_pp = 50\n',
            "arm",
            "statistic 'success-rate' pairs two arms",
        ),
        (
            'statistic = "success-rate"\ncontrast = ["perturbed", "default"]\n',
            "min_pp",
            "statistic 'success-rate' is decided by exactly one of min_pp",
        ),
        ('arm = "default"\nmin_pp = 1\n', "statistic", "missing: a qr-bootstrap hypothesis"),
        (
            'statistic = "flip"\narm = "default"\nmin_pp = 1\n',
            "statistic",
            "unknown statistic 'flip' (hypothesis 'Hx')",
        ),
        ('statistic = "accuracy"\narm = "nope"\nmin_pp = 1\n', "arm", "unknown arm 'nope'"),
        (
            'statistic = "accuracy"\narm = "default"\nmin_pp = 1\nsides = "one-sided"\n',
            "sides",
            "does not apply to statistic 'accuracy'",
        ),
    ],
    ids=[
        "contrast-on-accuracy",
        "arm-on-success",
        "no-bound",
        "no-statistic",
        "unknown-statistic",
        "unknown-arm",
        "sides-on-rate",
    ],
)
def test_a_statistic_that_does_not_fit_is_refused(
    tmp_path: Path, body: str, field: str, message: str
) -> None:
    text = (
        '\n[[hypotheses]]\nid = "Hx"\ndescription = "x"\ntest = "qr-bootstrap"\n'
        "alpha = 0.05\n" + body
    )
    error = refused(tmp_path, with_hypothesis(text))
    assert f"hypotheses[0].{field}: {message}" in error, error


def test_a_correctness_statistic_of_a_non_binary_outcome_is_refused() -> None:
    from runner import _qrboot as qrboot

    problems: list[str] = []
    assert not qrboot.QR_OUTCOMES["breadth"].binary  # a ddx study's count (scoring.md §12)
    h = type(
        "H",
        (),
        {
            "test": "qr-bootstrap",
            "outcome": "breadth",
            "id": "Hb",
            "statistic": "success-rate",
            "min_pp": None,
            "max_pp": 5.0,
            "min_difference_pp": None,
        },
    )()
    qrboot.check_outcomes(lambda w, m: problems.append(f"{w}: {m}"), [h], "ddx", {})
    assert problems == [
        "hypotheses[0].outcome: hypothesis 'Hb': statistic 'success-rate' needs a 0/1 outcome "
        "(correctness); 'breadth' is the number of diagnoses in a differential: use 'mean' or "
        "'difference'",
        "hypotheses[0].outcome: hypothesis 'Hb': 'breadth' is not a share, so bounds in "
        "percentage points do not apply: test the paired 'difference' with sides",
    ]


def test_the_bootstrap_needs_an_observation(data: tuple[Dataset, dict[str, Any]]) -> None:
    ds, plan = data
    empty = replace(ds, trials=ds.trials[ds.trials["arm"] != "default"])
    h = next(x for x in plan["hypotheses"] if x["id"] == "Hdefault")
    with pytest.raises(qr_boot.st.StatsError, match="no observation"):
        qr_boot.qr_values(empty, plan, h)


def test_the_archive_readme_names_the_statistic_and_the_arm(
    built: tuple[Path, Path, Path],
) -> None:
    text = (built[1] / "README.md").read_text("utf-8")
    assert (
        "arm default on `trial_accuracy`; qr-bootstrap; two-sided; statistic accuracy; "
        "min_pp 20; alpha 0.05." in text
    ), text
    assert (
        "perturbed - default on `trial_accuracy`; qr-bootstrap; two-sided; statistic "
        "success-rate; max_pp 60; alpha 0.05." in text
    ), text


def test_glyph_accuracy_pairs_charts_and_leaves_the_controls_out() -> None:
    """A tumbling-E shape: glyph accuracies (not 0/1), a control trial per arm and rep."""
    rows = []
    for arm, shift in (("A", 0.0), ("B", 0.1)):
        for stim in ("p1", "p2", "p3", "ctl"):
            for rep in (1, 2):
                control = stim == "ctl"
                acc = 1.0 if control else round(0.5 + shift + 0.1 * rep - 0.05 * len(stim), 4)
                rows.append(
                    {
                        "trial": f"{arm}|{stim}|{rep}",
                        "arm": arm,
                        "model": "",
                        "stimulus": stim,
                        "variant": "",
                        "rep": rep,
                        "accuracy": acc,
                        "control": control,
                        "excluded": False,
                    }
                )
    trials = pd.DataFrame(rows)
    ds = Dataset(
        trials, pd.DataFrame(columns=["trial", "stimulus", "model"]), ("A", "B"), (), "0" * 64
    )
    plan = {"design": {"bootstrap_iterations": 300, "bootstrap_seed": "11"}}
    h = {
        "id": "G",
        "test": "qr-bootstrap",
        "statistic": "difference",
        "contrast": ["B", "A"],
        "outcome": "glyph_accuracy",
        "alpha": 0.05,
        "sides": "one-sided",
    }
    v = qr_boot.qr_values(ds, plan, h)
    assert v["n"] == 6 and v["excluded"] == [] and v["conf"] == 0.9
    assert v["estimate"] == pytest.approx(0.1)
    vds = _Dataset(trials.to_dict("records"), [], ["A", "B"], [], "0" * 64)
    assert vq.values_of(vds, plan, h) == v
    with pytest.raises(qr_boot.st.StatsError, match="values other than 0 and 1"):
        qr_boot.qr_values(ds, plan, h | {"statistic": "success-rate", "max_pp": 50})


@pytest.mark.parametrize(
    ("arm_line", "message"),
    [("replicates = 1", "replicates 2 vs 1"), ('models = ["small"]', "models None vs ('small',)")],
    ids=["replicates", "models"],
)
def test_a_contrast_whose_arms_cannot_pair_is_refused_at_lock(
    tmp_path: Path, arm_line: str, message: str
) -> None:
    spec = SPEC.replace('components = ["task"]\n', f'components = ["task"]\n{arm_line}\n', 1)
    error = refused(tmp_path, spec)
    assert (
        "hypotheses[1].contrast: hypothesis 'Hsuccess': arms 'perturbed' and 'default' "
        f"cannot pair by (item, model, variant, rep): {message}"
    ) in error, error


def test_the_verifier_knows_every_outcome_of_the_table() -> None:
    """runner._qrboot.QR_OUTCOMES and the verifier's own lists describe the same outcomes.

    A row added to the table (a new per-trial metric) must be added to the verifier too: its
    column when it is not the outcome's own name, whether it is 0/1 and whether it is a share.
    """
    from runner._qrboot import QR_OUTCOMES

    assert {k: o.column for k, o in QR_OUTCOMES.items() if o.column != k} == vq.COLUMNS
    assert {k for k, o in QR_OUTCOMES.items() if o.binary} == set(vq.BINARY)
    assert {k for k, o in QR_OUTCOMES.items() if o.share} == set(vq.SHARES)


@pytest.mark.slow
def test_bench_bootstrap_quick_times_the_registered_bootstrap() -> None:
    import subprocess
    import sys

    bench = REPO / "benchmarks" / "bench_bootstrap.py"
    result = subprocess.run(
        [sys.executable, str(bench), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    for label in (
        "(question, run) bootstrap, registered",
        "qr_boot.resample_means",
        "numpy floor (the index draws alone)",
        "direct per-iteration loop",
        "time / floor",
        "speed-up over the loop",
    ):
        assert label in result.stdout, result.stdout


def test_only_the_difference_is_evidence_about_the_added_component(
    built: tuple[Path, Path, Path],
) -> None:
    """A success rate or a perturbed accuracy is a rate, not an a − b effect of the sentence."""
    html = (built[1] / "analysis" / "report.html").read_text("utf-8")
    assert "Hdiff (perturbed vs default): " in html, html
    for hid in ("Hsuccess", "Hperturbed"):
        assert f"{hid} (perturbed vs default)" not in html


def test_a_row_that_cannot_pair_is_shown_not_computed_both_ways(
    built: tuple[Path, Path, Path], data: tuple[Dataset, dict[str, Any]]
) -> None:
    ds, plan = data
    lost = without(ds, "default|small|q05|2")
    mine = qr_boot.descriptive_values(lost, plan)
    theirs = vq.descriptive_values(twin(lost), plan)
    assert _first_difference(mine, theirs, "values", 1e-12) is None
    rows = {r["model"]: r for r in mine["entries"][0]["rows"]}
    assert set(rows[None]) == set(rows["small"]) == {"model", "error"}
    assert "default" in rows["large"] and "error" not in rows["large"]
    result = {"status": "ok", "title": "T", "values": mine}
    assert qr_boot.report_tables(result) == vq.report_tables(result)
    assert qr_boot.report_tables(result)[0][2][0][1].startswith(
        "not computed: qr-bootstrap pairs by"
    )
    recorded = results(built[1])["descriptive.qr_bootstrap"]
    assert qr_boot.report_tables(recorded) == vq.report_tables(recorded)
    for r in results(built[1]).values():
        if r["test"] == "qr-bootstrap" and r["hypothesis"]:
            assert qr_boot.estimate_text(r["values"]) == vq.estimate_text(r["values"])
