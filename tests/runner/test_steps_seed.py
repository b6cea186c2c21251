"""Seed 001's recorded steps (issue 18): a semantic verifier that rejects a rewrite (retry,
exclude, stop), screening with a confidence rule over a declared item range, end to end.

The study is ``tests/support/stepsx_study.py`` (``docs/prompts.md`` §1.4, §8.3, §8.6): 8 items of
which the range keeps the first 6; a json screening step keeping items that are diagnostic
with confidence >= 0.8 (q02 is not diagnostic, q03 not confident enough); a rewriting step
verified by ``semcheck`` (q04's first sample is rejected and its second accepted; every
sample of q05 is rejected). Tampered archives are re-signed by a forger
(``tests/verify/test_archive_tamper.py``), so only the re-derivation can catch them.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import fixed_key, science_skipped
from stepsx_study import SCHEMA, Scripted, steps, write

from ledger import Ledger
from ledger.cli import main
from runner._execute import RunOptions, run_study
from runner._lock import lock_study
from runner.spec import StudyError
from tests.verify.test_archive_tamper import failed, passed, read_events, resign
from verify import verify_archive

KEY = fixed_key("steps.example/owner")


def invoke(*args: str | Path) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def refused(root: Path) -> str:
    """Lock ``root`` through the CLI; assert it is refused with nothing written; the message."""
    key = root.parent / "owner.key"
    if not key.exists():
        KEY.save(key)
    result = CliRunner().invoke(main, ["lock", str(root), "--key", str(key)])
    assert result.exit_code != 0, result.output
    assert not (root / "ledger.db").exists()
    return result.output


def events(root: Path) -> list[Any]:
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        return list(log.events())


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(path))
        yield path


@pytest.fixture(scope="module")
def study(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """lock, run (scripted simulation), score, unblind, analyze, export: study and archive."""
    base = tmp_path_factory.mktemp("stepsx")
    root = write(base / "study")
    KEY.save(base / "owner.key")
    lock_study(root, KEY)
    result = run_study(root, KEY, Scripted(), RunOptions(concurrency=4, jitter_seed=1))
    assert result.reason == "complete"
    for command in ("score", "unblind", "analyze"):
        invoke(command, root, "--key", base / "owner.key")
    invoke("export", root, base / "archive", "--key", base / "owner.key")
    return root


@pytest.fixture()
def archive(study: Path, tmp_path: Path) -> Path:
    target = tmp_path / "archive"
    shutil.copytree(study.parent / "archive", target)
    return target


def calls(root: Path, step: str) -> dict[str, list[Any]]:
    """step.requested bodies of ``step`` by call id."""
    out: dict[str, list[Any]] = {}
    for e in events(root):
        if e.kind == "step.requested" and e.body["step"] == step:
            out.setdefault(e.body["call"], []).append(e)
    return out


# ------------------------------------------------------------------ range and screening


def test_range_keeps_the_first_items_in_file_order(study: Path) -> None:
    protocol = next(e.body for e in events(study) if e.kind == "protocol.locked")
    assert protocol["items"]["range"] == {"first": 6} and protocol["items"]["count"] == 6
    items = {e.body["stimulus"] for e in events(study) if e.kind == "trial.requested"}
    excluded = {e.body["item"] for e in events(study) if e.kind == "trial.excluded"}
    screened = {c.split("|")[2] for c in calls(study, "screen")}
    assert screened == {f"q0{i}" for i in range(1, 7)}  # q07, q08 are outside the range
    assert items | excluded == screened


def test_confidence_rule_screens_items_out(study: Path) -> None:
    excluded = {e.body["item"]: e.body for e in events(study) if e.kind == "trial.excluded"}
    assert excluded["q02"]["step"] == "screen" and excluded["q03"]["step"] == "screen"
    assert "'confidence': 0.6" in excluded["q03"]["reason"]
    sent = {e.body["stimulus"] for e in events(study) if e.kind == "trial.requested"}
    assert {"q01", "q04"} <= sent and not sent & {"q02", "q03", "q05", "q06"}


def test_range_and_keep_rule_are_refused_when_malformed(tmp_path: Path, home: Path) -> None:
    root = write(tmp_path / "a", first=9)
    assert "stimuli.range.first" in refused(root) and "more than the 8 items" in refused(root)
    root = write(tmp_path / "b", steps().replace("at_least = {", "atleast = {"))
    out = refused(root)
    assert re.search(r"study\.toml:\d+: steps\.screen\.keep: unknown key 'atleast'", out)
    root = write(
        tmp_path / "c", steps().replace("at_least = { confidence", "at_least = { diagnostic")
    )
    assert "at_least compares a number" in refused(root)
    root = write(tmp_path / "d", steps().replace("diagnostic = true", 'diagnostic = "yes"'))
    assert "not a value of the field's type (boolean)" in refused(root)
    assert SCHEMA["properties"]  # the schema the rule is checked against


# ------------------------------------------------------------------ the semantic verifier


def test_rejected_sample_is_retried_and_the_accepted_one_is_the_decision(study: Path) -> None:
    rewrites, checks = calls(study, "rewrite"), calls(study, "semcheck")
    assert "step:rewrite|judge_a|q04|2" in rewrites and "step:semcheck|judge_a|q04|2" in checks
    assert not any(c.endswith("|q01|2") for c in rewrites)  # accepted at once: no sample 2
    seq = {e.body["call"]: e.seq for c in (rewrites, checks) for es in c.values() for e in es}
    assert (
        seq["step:rewrite|judge_a|q04|1"]
        < seq["step:semcheck|judge_a|q04|1"]
        < (seq["step:rewrite|judge_a|q04|2"])
        < seq["step:semcheck|judge_a|q04|2"]
    )
    # the trial reads the accepted (second) sample's rewrite
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        second = next(
            e
            for e in log.events("step.requested")
            if e.body["call"] == "step:rewrite|judge_a|q04|2"
        )
        reply = next(e for e in log.events("step.responded") if e.body["request_seq"] == second.seq)
        text = json.loads(log.blob(reply.blobs["response"]))["content"][0]["text"]
        trial = next(e for e in log.events("trial.requested") if e.body["stimulus"] == "q04")
        request = json.loads(log.blob(trial.blobs["request"]))
    assert text.strip() and text.strip() in json.dumps(request, ensure_ascii=False).replace(
        "\\n", "\n"
    )


def test_rejected_every_time_excludes_the_item(study: Path) -> None:
    assert {c for c in calls(study, "rewrite") if "|q05|" in c} == {
        "step:rewrite|judge_a|q05|1",
        "step:rewrite|judge_a|q05|2",
    }  # retry = 1: two samples
    excluded = [
        e.body for e in events(study) if e.kind == "trial.excluded" and e.body["item"] == "q05"
    ]
    assert len(excluded) == 3 and all(b["step"] == "rewrite" for b in excluded)
    assert "verifier 'semcheck' accepted none of its 2 sample(s)" in excluded[0]["reason"]


def test_verifier_that_cannot_judge_excludes_the_item(study: Path) -> None:
    """q06's annotation does not parse; the verifier reads it, so it can judge no sample."""
    assert {c for c in calls(study, "rewrite") if "|q06|" in c} == {"step:rewrite|judge_a|q06|1"}
    assert not any("|q06|" in c for c in calls(study, "semcheck"))
    excluded = [
        e.body for e in events(study) if e.kind == "trial.excluded" and e.body["item"] == "q06"
    ]
    assert len(excluded) == 3 and "'semcheck' can judge no sample" in excluded[0]["reason"]


def test_rejected_every_time_with_stop_stops_the_run(home: Path, tmp_path: Path) -> None:
    root = write(tmp_path / "study", steps(then="stop"))
    lock_study(root, KEY)
    result = run_study(root, KEY, Scripted(), RunOptions(concurrency=2))
    assert result.reason.startswith("error:") and 'then = "stop"' in result.reason
    assert result.fatal  # `ledger run` exits 1 on a fatal stop (a ClickException)
    # the first item whose chain ends without an accepted sample (q05: both rejected; q06:
    # the verifier cannot judge) stops the run, naming the call that ended it
    assert re.search(
        r"for item 'q0[56]'.*\(last call step:[a-z]+\|judge_a\|q0[56]\|[12], "
        r"seq \d+\)",
        result.reason,
    )
    assert not any(e.kind == "trial.requested" for e in events(root))


def test_verifier_must_be_a_label_item_step_reading_the_sample(tmp_path: Path, home: Path) -> None:
    root = write(tmp_path / "a", steps().replace('accept = ["retained"]', 'accept = ["kept"]'))
    assert "'kept' is not a label of step 'semcheck'" in refused(root)
    root = write(tmp_path / "b", steps().replace("retry = 1, then", "retries = 1, then"))
    assert "unknown key 'retries'" in refused(root)
    root = write(tmp_path / "c")
    (root / "prompts" / "semcheck.txt").write_text("Answer retained or lost.\n{context}\n")
    assert "a verifier must read the sample it judges" in refused(root)


class _CrashOnce(Scripted):
    """Scripted, but the first attempt of q04's second rewrite sample crashes the session."""

    crashed = False

    async def send(self, body: dict[str, Any], *, seed: str):  # type: ignore[no-untyped-def]
        if "|step:rewrite|judge_a|q04|2|" in seed and not _CrashOnce.crashed:
            _CrashOnce.crashed = True
            raise RuntimeError("simulated crash")
        return await super().send(body, seed=seed)


def test_a_crash_between_samples_resumes_without_a_call_twice(home: Path, tmp_path: Path) -> None:
    root = write(tmp_path / "study")
    lock_study(root, KEY)
    with pytest.raises(StudyError, match="simulated crash"):
        run_study(root, KEY, _CrashOnce(), RunOptions(concurrency=1))
    result = run_study(root, KEY, Scripted(), RunOptions(concurrency=2))
    assert result.reason == "complete"
    outcomes: dict[str, int] = {}
    request_call: dict[int, str] = {}
    for e in events(root):
        if e.kind == "step.requested":
            request_call[e.seq] = e.body["call"]
        elif e.kind == "step.responded":
            call = request_call[e.body["request_seq"]]
            outcomes[call] = outcomes.get(call, 0) + 1
    assert outcomes["step:rewrite|judge_a|q04|2"] == 1
    assert outcomes["step:semcheck|judge_a|q04|2"] == 1
    assert all(n == 1 for c, n in outcomes.items() if "rewrite" not in c)  # no call twice


# ------------------------------------------------------------------ the verifier


def test_the_study_verifies(study: Path) -> None:
    report = verify_archive(study.parent / "archive")
    assert report.ok, [c for c in report.checks if c.status.name == "FAIL"]
    steps_check = report.get("steps")
    assert steps_check is not None and "exclusions justified" in steps_check.reason


def _reply(archive: Path, events_: list[dict[str, Any]], call: str, text: str) -> int:
    """Rewrite the reply text of ``call``'s response blob; the response's seq."""
    request = next(
        e for e in events_ if e["kind"] == "step.requested" and e["body"]["call"] == call
    )
    response = next(
        e
        for e in events_
        if e["kind"] == "step.responded" and e["body"]["request_seq"] == request["seq"]
    )
    blob = archive / "blobs" / response["blobs"]["response"]
    data = json.loads(blob.read_bytes())
    data["content"] = [{"type": "text", "text": text}]
    raw = json.dumps(data).encode()
    import hashlib

    digest = hashlib.sha256(raw).hexdigest()
    (archive / "blobs" / digest).write_bytes(raw)
    response["blobs"]["response"] = digest
    if "response_sha256" in response["body"]:
        response["body"]["response_sha256"] = digest
    return int(response["seq"])


def test_doctored_verifier_decision_fails_naming_the_seq(archive: Path) -> None:
    """The first verdict on q04 changed to "retained": its second sample was not due."""
    events_ = read_events(archive)
    _reply(archive, events_, "step:semcheck|judge_a|q04|1", "retained")
    resign(archive, events_)
    with science_skipped():
        report = verify_archive(archive)
    passed(report, "signatures")
    reason = failed(report, "steps")
    assert (
        "step:rewrite|judge_a|q04|2 was requested, but the verifier 'semcheck' accepted sample 1"
        in reason
        and "seq" in reason
    )


def test_changed_range_fails_verification(archive: Path) -> None:
    events_ = read_events(archive)
    for e in events_:
        if e["kind"] == "protocol.locked":
            e["body"]["items"]["range"] = {"first": 4}
    resign(archive, events_)
    with science_skipped():
        report = verify_archive(archive)
    passed(report, "signatures")
    assert "protocol.locked items (data/items.jsonl): count 6 (the file gives 4)" in failed(
        report, "protocol"
    )
    assert "is not a call of item step" in failed(report, "steps")  # q05, q06: out of range


def test_changed_keep_rule_fails_naming_the_exclusion(archive: Path) -> None:
    events_ = read_events(archive)
    for e in events_:
        if e["kind"] == "protocol.locked":
            e["body"]["steps"]["screen"]["keep"]["at_least"]["confidence"] = 0.5
    resign(archive, events_)
    with science_skipped():
        report = verify_archive(archive)
    reason = failed(report, "steps")
    assert "excluded, but every step it reads decided for item 'q03'" in reason


# ------------------------------------------------------------------ factor labels as covariates


def test_covariates_are_columns_of_the_dataset(study: Path) -> None:
    import csv

    from stepsx_study import INDICATORS, PERTURBABLE, item_labels

    with (study.parent / "archive" / "analysis" / "trials.csv").open() as f:
        rows = list(csv.DictReader(f))
    names = PERTURBABLE + INDICATORS
    assert list(rows[0])[-7:] == [f"covariate.{n}" for n in names]
    for row in rows:
        labels = item_labels(row["stimulus"])
        assert [row[f"covariate.{n}"] for n in names] == [str(labels[n]) for n in names]


def test_covariate_strata_are_the_means_by_label_and_arm(study: Path) -> None:
    import csv

    from stepsx_study import INDICATORS, PERTURBABLE

    results = json.loads((study.parent / "archive" / "analysis" / "results.json").read_text())
    desc = next(r for r in results if r["id"] == "descriptive.covariates")
    values = desc["values"]
    assert values["perturbable"] == PERTURBABLE and values["indicators"] == INDICATORS
    assert {values["strata"][n]["group"] for n in INDICATORS} == {"indicator"}
    with (study.parent / "archive" / "analysis" / "trials.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["excluded"] == "False"]
    for name in PERTURBABLE + INDICATORS:
        for level in ("true", "false"):
            for arm, cell in values["strata"][name]["levels"][level].items():
                part = [
                    float(r["accuracy"])
                    for r in rows
                    if r["arm"] == arm and r[f"covariate.{name}"] == level.capitalize()
                ]
                assert cell["trials"] == len(part)
                assert cell["accuracy"]["mean"] == (
                    pytest.approx(sum(part) / len(part)) if part else None
                )
    html = (study.parent / "archive" / "analysis" / "report.html").read_text()
    assert html.index("perturbable factors, step annotate") < html.index(
        "indicator factors (annotated, never edited), step annotate"
    )


def test_covariates_are_refused_when_malformed(tmp_path: Path, home: Path) -> None:
    root = write(tmp_path / "a")
    spec = root / "study.toml"
    text = spec.read_text()
    spec.write_text(
        text.replace('"lack_objective_data", ', '"lack_objective_data", "diagnostic_guess", ')
    )
    assert "listed as perturbable too" in refused(root)
    spec.write_text(text.replace('step = "annotate"', 'step = "screen"'))
    assert "is not a boolean field of the schema of step 'screen'" in refused(root)
    spec.write_text(text.replace('step = "annotate"', 'step = "rewrite"'))
    assert "'rewrite' is not an item step with the json parser" in refused(root)
    spec.write_text(text.replace("covariates = { step", "covariates = { stratify = true, step"))
    assert re.search(
        r"study\.toml:\d+: analysis\.covariates: unknown key 'stratify'", refused(root)
    )


def test_doctored_label_fails_verification(archive: Path) -> None:
    from stepsx_study import item_labels

    events_ = read_events(archive)

    labels = item_labels("q01") | {"diagnostic_guess": not item_labels("q01")["diagnostic_guess"]}
    _reply(archive, events_, "step:annotate|judge_a|q01|1", json.dumps(labels))
    resign(archive, events_)
    report = verify_archive(archive)
    passed(report, "signatures")
    reason = failed(report, "reanalysis")
    assert "trials_csv blob differs from the dataset rebuilt" in reason


def test_the_simulated_semantic_verifier() -> None:
    """docs/simulated.md §3: a rewrite that drops a number is lost; sampling noise 0.1."""
    from runner.simulated._steps import answer

    ask = "Does the rewrite keep every fact? Answer retained or lost.\nOriginal: {o}\nRewrite: {r}"
    keep = [0.5, 0.5, 0.5, 0.5]
    assert (
        answer(ask.format(o="Fever of 39.5 for 3 days.", r="I had 39.5 for 3 days."), keep)
        == "retained"
    )
    assert (
        answer(ask.format(o="Fever of 39.5 for 3 days.", r="I had a fever for 3 days."), keep)
        == "lost"
    )
    assert answer(ask.format(o="Fever.", r=""), keep) == "lost"
    assert answer(ask.format(o="Fever.", r="I have a fever."), [0.05, 0.5, 0.5, 0.5]) == "lost"


def test_arms_show_the_verifier_and_the_range(tmp_path: Path, home: Path) -> None:
    root = write(tmp_path / "study")
    out = invoke("arms", root)
    assert "verified by semcheck (accept retained; up to 2 samples, then exclude)" in out
    assert "step screen: on item, models judge_a, parser json, sees blind, reads -, 6 calls" in out


@pytest.mark.slow
def test_covariates_of_a_ddx_study_stratify_its_metrics(tmp_path: Path, home: Path) -> None:
    """A ddx study (``tests/support/ddx_study.py``) with the annotation step: the strata are the
    seven metrics' means, and the archive verifies."""
    from ddx_study import REFERENCE_STEP, STEPS, spec_text, write_study
    from stepsx_study import INDICATORS, LABELS_SCHEMA, PERTURBABLE

    annotate = (
        '\n[steps.annotate]\non = "item"\nmodels = ["judge_a"]\ntemplate = '
        '"prompts/annotate.txt"\nparser = "json"\nschema = "schemas/labels.json"\n'
    )
    text = spec_text(steps=REFERENCE_STEP + STEPS + annotate).replace(
        "[analysis]\n",
        f'[analysis]\ncovariates = {{ step = "annotate", perturbable = '
        f"{json.dumps(PERTURBABLE)}, indicators = {json.dumps(INDICATORS)} }}\n",
    )
    root = write_study(tmp_path / "study", text, annotate="Label the factors.\nQuery: {question}\n")
    (root / "schemas" / "labels.json").write_text(json.dumps(LABELS_SCHEMA), encoding="utf-8")
    KEY.save(tmp_path / "owner.key")
    lock_study(root, KEY)
    assert run_study(root, KEY, Scripted(), RunOptions(concurrency=4)).reason == "complete"
    for command in ("score", "unblind", "analyze"):
        invoke(command, root, "--key", tmp_path / "owner.key")
    invoke("export", root, tmp_path / "archive", "--key", tmp_path / "owner.key")
    report = verify_archive(tmp_path / "archive")
    assert report.ok, [c for c in report.checks if c.status.name == "FAIL"]
    results = json.loads((tmp_path / "archive" / "analysis" / "results.json").read_text())
    values = next(r for r in results if r["id"] == "descriptive.covariates")["values"]
    assert values["outcomes"][0] == "plausibility" and len(values["outcomes"]) == 7


def test_a_verified_step_whose_input_has_no_decision_excludes_the_item(
    home: Path, tmp_path: Path
) -> None:
    """The rewrite reads q06's annotation, which does not parse: no sample can be taken, and
    q06's trials are recorded exclusions instead of waiting; the session completes."""
    root = write(
        tmp_path / "study",
        steps().replace('template = "prompts/rewrite.txt"', 'template = "prompts/rewrite2.txt"'),
    )
    (root / "prompts" / "rewrite2.txt").write_text(
        "Rewrite the case in the first person ({steps.annotate.first_person}).\nText: {context}\n"
    )
    (root / "prompts" / "semcheck.txt").write_text(
        "Answer retained or lost.\nOriginal: {context}\nRewrite: {steps.rewrite}\n"
    )
    lock_study(root, KEY)
    assert run_study(root, KEY, Scripted(), RunOptions(concurrency=2)).reason == "complete"
    assert not any("|q06|" in c for c in calls(root, "rewrite"))
    excluded = {e.body["trial"]: e.body for e in events(root) if e.kind == "trial.excluded"}
    assert {t for t, b in excluded.items() if b["item"] == "q06"} == {
        "plain|target|q06|1",
        "sys|target|q06|1",
        "doubt|target|q06|1",
    }
    # q06's rewrite and verifier calls can never be made: the estimate counts none of them
    estimate = json.loads(invoke("estimate", root, "--backend", "simulated", "--json"))
    assert estimate.get("step_calls", 0) == 0, estimate
