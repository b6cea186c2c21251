"""Differential conformance suite, fixed-seed slice and named regression cases (issue 31).

Each generated study (``tests/support/conformance.py``, ``docs/conformance.md``) is locked, run on
the simulated backend with its response mix, scored, unblinded, analysed and exported in process;
the honest archive must verify (no check FAILs, the owner key trusted), and every tamper of
``conformance.TAMPERS`` must FAIL the check that owns it, with a message naming the place. The
larger soak (at least 200 studies) is ``tests/verify/test_conformance_soak.py``, in the slow set.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conformance import (
    FAMILIES,
    Design,
    Tally,
    check_design,
    failures,
    generate,
    owner_key,
    run_design,
    run_live,
    verify_honest,
)

from ledger import canonical_json
from verify import Status, verify_archive, verify_path

SLICE = (0, 1, 2, 3, 7, 10, 16, 17, 37)
"""The fixed-seed slice: every family, the edges (ceilings, floors, an arm all unparseable,
exclusions, one judge, identical models, temperature-0 replicates, variants and voting, three
factor levels, phases). About 25 s of CPU. The generated seeds that once failed run as the
named regression cases below, in the slow set (docs/conformance.md)."""


PG_SEED = 0
"""The generated study the PostgreSQL slice runs on both engines (a small multiple-choice one)."""


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Blinding secrets of the generated studies live in a temporary home."""
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    yield tmp_path / "home"


@pytest.mark.parametrize("seed", SLICE)
def test_generated_study_verifies_and_every_tamper_fails(seed: int, tmp_path: Path) -> None:
    design = generate(seed)
    tally = Tally()
    check_design(design, tmp_path, owner_key(seed), tally)
    assert tally.honest == 1
    caught = set(tally.tampers)
    assert {"response", "score", "report-cell", "arm-text"} <= caught, design.describe()
    assert ("step-output" in caught) == ("steps" in design.tags), design.describe()


def test_a_generated_study_on_postgres_verifies_like_its_sqlite_twin(
    pg_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The PostgreSQL slice: one generated study run live on each engine (issue 34).

    The same design, key and backend on SQLite and on PostgreSQL: both live ledgers verify,
    with the same events and the same verdict from every check but the container's (``file``);
    an envelope changed in the PostgreSQL store fails its signature there as in SQLite.
    """
    import uuid

    import psycopg

    design, key = generate(PG_SEED), owner_key(PG_SEED)
    url = pg_server.url(schema=f"c_{uuid.uuid4().hex[:16]}")
    roots = {}
    for engine, store in (("sqlite", None), ("pg", url)):
        monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / engine / "home"))
        roots[engine] = run_live(design, tmp_path / engine, key, store=store)
    assert (roots["pg"] / "ledger.store").is_file() and not (roots["pg"] / "ledger.db").exists()
    reports = {e: verify_path(root, trusted_keys=[key.vkey]) for e, root in roots.items()}
    for engine, report in reports.items():
        assert report.ok, f"{engine}: {design.describe()}\n{failures(report)}"

    def verdicts(report: Any) -> list[tuple[str, str, str, int | None]]:
        return [
            (c.name, c.status.value, c.reason, c.seq) for c in report.checks if c.name != "file"
        ]

    assert verdicts(reports["pg"]) == verdicts(reports["sqlite"])
    assert reports["pg"].size == reports["sqlite"].size and reports["pg"].path == url
    file = reports["pg"].get("file")
    assert file is not None and "PostgreSQL" in file.reason
    with psycopg.connect(pg_server.url(), autocommit=True) as pg:
        schema = url.rsplit("=", 1)[1]
        pg.execute(f'SET search_path TO "{schema}"')
        seq, envelope = pg.execute(
            "SELECT seq, envelope FROM events WHERE kind = 'trial.responded' ORDER BY seq LIMIT 1"
        ).fetchone()  # type: ignore[misc]
        # a trailing space: the bytes are no longer the canonical envelope that was signed
        pg.execute("UPDATE events SET envelope = %s WHERE seq = %s", (bytes(envelope) + b" ", seq))
    tampered = verify_path(roots["pg"], trusted_keys=[key.vkey])
    failed = tampered.get("envelopes")
    assert failed is not None and failed.status is Status.FAIL and failed.seq == seq


def test_the_generator_is_deterministic_and_the_slice_covers_every_family() -> None:
    for seed in SLICE[:3]:
        one, two = generate(seed), generate(seed)
        assert one.files == two.files and one.mix == two.mix and one.phase_one == two.phase_one
    assert {generate(seed).family for seed in SLICE} == set(FAMILIES)
    tags = set().union(*(generate(seed).tags for seed in SLICE))
    for edge in (
        "ceiling",
        "floor",
        "arm-unparseable",
        "exclusions",
        "judges-1",
        "identical-models",
        "temp0-replicates",
        "variants",
        "phases",
        "three-levels",
    ):
        assert edge in tags, edge
    # the versions of the draws: the soak's seeds draw `sign-test` at the latest, none at 1
    drawn = [s for s in range(1000, 1052) if "sign-test" in generate(s).files["study.toml"]]
    assert drawn, "no soak seed draws sign-test"
    assert not any("sign-test" in generate(s, draws=1).files["study.toml"] for s in drawn)


def test_every_family_generates_a_study_the_lock_accepts(tmp_path: Path) -> None:
    """A quick guard on the generator itself: 12 designs of every family load without a
    refusal (``runner.load_study`` validates everything the lock does before appending)."""
    from conformance import write_study

    import runner

    for family in FAMILIES:
        for seed in range(12):
            design = generate(seed, family)
            root = tmp_path / f"{family}-{seed}"
            write_study(design, root)
            runner.load_study(root)


# ---------------------------------------------------------------------------------------------
# named regression cases: failures the suite found, each minimised to a fixed small study

LETTERS_ABC_SPEC = """\
[study]
id = "conf-letters-abc"
title = "Three options and a seed-002 test"

[model]
id = "claude-sonnet-4-6"
max_tokens = 64
temperature = 0.0

[components]
direct = "prompts/direct.txt"
rule = "prompts/rule.txt"

[prompt]
item = "prompts/item.txt"

[arms.full]
role = "full"
components = ["item", "rule", "direct"]

[arms.bare]
role = "vehicle"
components = ["item", "direct"]

[stimuli]
items = "data/items.jsonl"

[design]
replicates = 1
seed = 3
bootstrap_seed = 4
bootstrap_iterations = 200

[response]
parser = "multiple-choice"
letters = "ABC"

[[hypotheses]]
id = "H1"
description = "Position bias differs."
test = "position-bias"
contrast = ["full", "bare"]
alpha = 0.05

[analysis]
exclude_unparseable = false
"""


def letters_abc_design() -> Design:
    """Two items of three options, two arms, one ``position-bias`` test (seed 002's)."""
    items = [
        {
            "id": "q01",
            "question": "Which drug is named aspirin?",
            "options": ["aspirin", "insulin", "heparin"],
            "answer": "A",
        },
        {
            "id": "q02",
            "question": "Which drug is named lithium?",
            "options": ["digoxin", "lithium", "atropine"],
            "answer": "B",
        },
    ]
    return Design(
        seed=-1,
        family="mc",
        letters=True,
        files={
            "study.toml": LETTERS_ABC_SPEC,
            "data/items.jsonl": "".join(json.dumps(i) + "\n" for i in items),
            "prompts/item.txt": "Question: {question}\n{options}\n",
            "prompts/direct.txt": "Reply with the letter of the correct option only.\n",
            "prompts/rule.txt": "Read every option before you choose one.\n",
        },
        answers={"q01": "aspirin", "q02": "lithium"},
        wrongs={"q01": "insulin", "q02": "atropine"},
        mix={"full": "coin", "bare": "coin"},
    )


def test_regression_descriptive_mcq_with_three_letters(tmp_path: Path) -> None:
    """Found by the suite (generated seed 1, family mc): with ``letters = "ABC"`` (or any
    letters but ``ABCD``) and a seed-002 test registered, the writer recorded
    ``descriptive.mcq`` as failed ("letters: the table was checked with ['A', 'B', 'C'], not
    ['A', 'B', 'C', 'D']": ``accuracy_by_cell`` was called without the study's letters), the
    verifier recomputed it, and the honest archive FAILED ``reanalysis``."""
    design = letters_abc_design()
    key = owner_key(-1)
    archive = run_design(design, tmp_path, key)
    mcq = recorded_result(archive, "descriptive.mcq")
    assert mcq["status"] == "ok", mcq["error"]
    cells = mcq["values"]["cells"]
    assert {(c["arm"], c["n"]) for c in cells} == {("full", 2), ("bare", 2)}
    verify_honest(design, archive, key)


@pytest.mark.slow  # a whole generated study: the slow set (README budget)
def test_regression_judge_agreement_with_unanimous_judges(tmp_path: Path) -> None:
    """Found by the suite (generated seed 48): every judge gave every trial the same label, so
    chance agreement is 1 and kappa is 0/0. The writer (statsmodels) recorded NaN as "ok", the
    verifier's formula divided by zero ("failed"), and the honest archive FAILED
    ``reanalysis``. Both sides now record kappa null with the reason (analysis.md §8)."""
    design = generate(48, draws=1)
    assert _files_digest(design) == "a70ec98293670de8", "the generator drifted: re-pin it"
    key = owner_key(48)
    archive = run_design(design, tmp_path, key)
    agreement = recorded_result(archive, "exploratory.judge_agreement")
    assert agreement["status"] == "ok", agreement
    assert agreement["values"]["kappa"] is None and agreement["values"]["all_agree"] == 1
    assert "chance agreement is 1" in agreement["values"]["kappa_undefined"]
    verify_honest(design, archive, key)


@pytest.mark.slow  # a whole generated study: the slow set (README budget)
def test_regression_forest_plot_of_an_equivalence_beyond_its_margin(tmp_path: Path) -> None:
    """Found by the suite (generated seed 1008): an equivalence test whose largest difference
    (100 pp) lay far beyond its margin (20 pp) drew its marker and label outside the forest
    plot's x range; constrained layout then collapsed the axes to make room (a matplotlib
    warning, an error under pytest) and the export failed. The range now holds the difference."""
    design = generate(1008, draws=1)
    assert _files_digest(design) == "4dd80d77b9745081", "the generator drifted: re-pin it"
    key = owner_key(1008)
    archive = run_design(design, tmp_path, key)
    assert (archive / "analysis" / "figures" / "forest_contrasts.png").stat().st_size > 0
    report = verify_archive(archive, trusted_keys=[key.vkey]).get("report")
    assert report is not None and report.status is Status.PASS, report


@pytest.mark.slow  # whole generated studies: the slow set (README budget)
@pytest.mark.parametrize(
    ("seed", "digest"),
    [(44, "cc6fe77ba55c959d"), (23, "61c1fa1fafe9041b")],
    ids=["lmm-short-of-its-maximum", "sensitivity-lmm-short-of-its-maximum"],
)
def test_regression_mixed_models_at_their_reml_maximum(
    tmp_path: Path, seed: int, digest: str
) -> None:
    """Found by the suite (generated seeds 44 and 23): the writer recorded a registered model
    (seed 44) and a sensitivity model (seed 23) short of the REML maximum, which the verifier
    refused ("not a stationary point", "not a maximum"). Issue 42's exact-gradient polish
    records both at the maximum; the honest archives verify."""
    design = generate(seed, draws=1)
    assert _files_digest(design) == digest, "the generator drifted: re-pin it"
    key = owner_key(seed)
    verify_honest(design, run_design(design, tmp_path, key), key)


@pytest.mark.slow  # a whole generated study: the slow set (README budget)
@pytest.mark.parametrize(
    ("seed", "family", "digest", "status"),
    [
        (33, None, "29eacc1bd8f6b48f", "not applicable"),
        (25, None, "2b82c51da41a224a", "not applicable"),
        (1, "phases", "4961a3f099e4ca3f", "not applicable"),
        (11, None, "31fdd523aa0e2b57", "ok"),
    ],
    ids=[
        "lmm-zero-variances",
        "lmm-zero-variances-ceiling-floor",
        "lmm-singular-matrix-in-writer",
        "lmm-singular-fit-ci-and-boundary",
    ],
)
def test_regression_degenerate_mixed_models(
    tmp_path: Path, seed: int, family: str | None, digest: str, status: str
) -> None:
    """Found by the suite (generated seeds 33, 25, 1 and 11), fixed by one documented rule on
    each side (docs/statistics.md, "Linear mixed model"):

    - seeds 33, 25 and 1: every arm's trials (each arm at a ceiling, a floor, or a seeded coin
      that came out one way) are constant, so the fixed effects fit the outcome exactly. The
      writer recorded variances (0, 0) that the verifier's REML cannot evaluate (33, 25) or
      failed with statsmodels' "Singular matrix" where the verifier found a fit (1). The REML
      likelihood has no maximum there: both sides now record ``model.lmm`` as "not applicable".
    - seed 11: a group variance barely above the boundary had a Wald interval from 2e-23 to
      5e15, whose bounds the two sides' information matrices (analytic, and central
      differences) put 2e-4 apart; both now withhold an interval wider than a factor 1e8 (null
      bounds, ``variance_ci_note``). Its phase-one per-model fit, at the boundary, the
      verifier's own optimum stopped at 1.6e-7 instead of 0; it now tries the boundary.
    """
    design = generate(seed, family, draws=1)
    assert _files_digest(design) == digest, "the generator drifted: re-pin it"
    key = owner_key(seed)
    archive = run_design(design, tmp_path, key)
    model = recorded_result(archive, "model.lmm")
    assert model["status"] == status, model
    if status == "not applicable":
        assert "fit the outcome exactly" in model["values"]["reason"]
    else:
        values = model["values"]
        assert values["group_variance_ci_lower"] is None
        assert values["group_variance_ci_upper"] is None
        assert "group variance" in values["variance_ci_note"]
        assert values["residual_variance_ci_upper"] > values["residual_variance_ci_lower"] > 0
    verify_honest(design, archive, key)


@pytest.mark.slow  # a whole generated study: the slow set (README budget)
@pytest.mark.parametrize(
    ("seed", "digest", "model_id", "error"),
    [
        (1017, "100437a7d8edf292", "model.lmm", "two arms"),
        (1021, "ffefb30c857a41f2", "model.lmm@m2", "needs at least 3 values"),
    ],
    ids=["lmm-one-arm-at-a-ceiling", "lmm-one-arm-per-model"],
)
def test_regression_a_failed_mixed_model_is_not_also_not_applicable(
    tmp_path: Path, seed: int, digest: str, model_id: str, error: str
) -> None:
    """Found by the soak (generated seeds 1017 and 1021) right after the exact-fit rule: the
    only arm with analysable trials (1017), or the two trials of one model (1021), had a
    constant outcome. The writer failed the model (one arm; two rows), the verifier called
    the constant outcome "not applicable" first. Both now apply every failure check before
    the not-applicable rule (docs/statistics.md)."""
    design = generate(seed, draws=1)
    assert _files_digest(design) == digest, "the generator drifted: re-pin it"
    key = owner_key(seed)
    archive = run_design(design, tmp_path, key)
    model = recorded_result(archive, model_id)
    assert model["status"] == "failed" and error in model["error"], model
    verify_honest(design, archive, key)


@pytest.mark.slow  # a whole generated study: the slow set (README budget)
def test_regression_writer_reml_polish_beyond_exp_range(tmp_path: Path) -> None:
    """Found by the soak (generated seed 1076, one arm at a ceiling, two models): the writer's
    L-BFGS-B polish of a mixed model tried a log variance beyond ``math.exp``'s range and the
    analysis crashed (OverflowError) before any archive was written. Such a point is now no
    candidate (a non-finite likelihood), and the honest archive verifies."""
    design = generate(1076, draws=1)
    assert _files_digest(design) == "9335640948dd1a2e", "the generator drifted: re-pin it"
    key = owner_key(1076)
    verify_honest(design, run_design(design, tmp_path, key), key)


def recorded_result(archive: Path, result_id: str) -> dict[str, Any]:
    """The body of the archive's ``analysis.result`` with id ``result_id``."""
    lines = (archive / "ledger" / "events.jsonl").read_text("utf-8").splitlines()
    return next(
        e["body"]
        for e in (json.loads(line)["envelope"] for line in lines)
        if e["kind"] == "analysis.result" and e["body"]["id"] == result_id
    )


def _files_digest(design: Design) -> str:
    return hashlib.sha256(canonical_json(sorted(design.files.items()))).hexdigest()[:16]


@pytest.mark.slow  # a whole generated study: the slow set (README budget)
def test_regression_gee_without_enough_data_for_its_working_correlation(tmp_path: Path) -> None:
    """Found by the suite (generated seed 15): a per-model ``gee`` hypothesis on six trials.
    The exchangeable correlation's moment estimate divides by trials less coefficients and
    by within-item pairs less coefficients; statsmodels returned NaN variances (the writer:
    "not applicable", a degenerate term), the verifier's own solver divided by zero
    ("failed"). Both sides now apply rule 0 of mcq-statistics.md §8 before fitting."""
    design = generate(15, draws=1)
    assert _files_digest(design) == "f3a0f89cf786a1a1", "the generator drifted: re-pin it"
    key = owner_key(15)
    archive = run_design(design, tmp_path, key)
    h2 = recorded_result(archive, "hypothesis.H2@m2")
    assert h2["status"] == "not applicable", h2
    assert "the exchangeable working correlation cannot be estimated" in h2["values"]["reason"]
    verify_honest(design, archive, key)


@pytest.mark.slow  # a whole generated study: the slow set (README budget)
def test_regression_gee_whose_working_covariance_is_singular(tmp_path: Path) -> None:
    """Found by the soak (seed 1112, a phased study with exclusions): the GEE's working
    covariance was singular. statsmodels returned a model-based variance of -1e-14 (the writer:
    "not applicable", a degenerate term), the verifier's solver raised "Singular matrix"
    ("failed"). A singular fit is degenerate on both sides (mcq-statistics.md §8, rule 3)."""
    design = generate(1112, draws=1)
    assert _files_digest(design) == "49ae5c5ad758cfdb", "the generator drifted: re-pin it"
    key = owner_key(1112)
    archive = run_design(design, tmp_path, key)
    h1 = recorded_result(archive, "hypothesis.H1")
    assert h1["status"] == "not applicable", h1
    verify_honest(design, archive, key)
