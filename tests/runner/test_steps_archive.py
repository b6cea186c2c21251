"""Issue 17 acceptance: a study with steps runs end to end and its archive verifies; blind
judges see no arm; a changed judge prompt, aggregation rule or reference after lock, and a
doctored request that reads a step, fail verification naming what changed.

The study (``tests/support/steps_study.py``): a screening item step, a rewriting item step read by
the item template, a target under two arms, two judges with majority aggregation scoring the
open-ended answers (``[response] parser = "judge:judge"``). Tampered archives are re-signed
consistently by a forger's key (``tests/verify/test_archive_tamper.py``'s ``resign``), so only the
re-derivation can catch them. A tamper whose FAIL comes from a check other than the science
ones verifies without them (``helpers.science_skipped``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import fixed_key, science_skipped
from steps_study import write_study

from ledger import Ledger
from ledger.cli import main
from runner._render import Renderer
from runner.spec import load_study
from runner.steps._core import StepCall
from runner.steps._state import StepWork
from tests.verify.test_archive_tamper import failed, passed, read_events, resign
from verify import verify_archive

KEY = fixed_key("steps.example/owner")


def invoke(*args: str | Path) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """lock, run (simulated), score, unblind, analyze, export: the study and its archive."""
    base = tmp_path_factory.mktemp("steps-archive")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
        root = write_study(base / "study")
        key = base / "owner.key"
        KEY.save(key)
        invoke("lock", root, "--key", key)
        invoke("run", root, "--backend", "simulated", "--key", key)
        invoke("score", root, "--key", key)
        reviewer = fixed_key("steps.example/reviewer")
        reviewer.save(base / "reviewer.key")
        invoke("key", "add", root / "ledger.db", reviewer.vkey, "--role", "reviewer", "--key", key)
        listed = invoke("review", root, "--sample", "audit")
        subject = listed.split("\t", 1)[0].removeprefix("seq ")
        invoke(
            "review",
            root,
            "--sample",
            "audit",
            "--subject",
            subject,
            "--value",
            "correct",
            "--key",
            base / "reviewer.key",
        )
        invoke("unblind", root, "--key", key)
        invoke("analyze", root, "--key", key)
        invoke("export", root, base / "archive", "--key", key)
        yield root


@pytest.fixture()
def archive(study: Path, tmp_path: Path) -> Path:
    target = tmp_path / "archive"
    shutil.copytree(study.parent / "archive", target)
    return target


def test_the_study_runs_is_judged_and_verifies(study: Path) -> None:
    report = verify_archive(study.parent / "archive")
    assert report.ok, [c for c in report.checks if c.status.name == "FAIL"]
    steps = report.get("steps")
    assert steps is not None and "re-rendered byte for byte" in steps.reason
    assert "1 reviews signed by reviewer keys" in steps.reason
    events = read_events(study.parent / "archive")
    kinds = {e["kind"] for e in events}
    assert {"step.requested", "step.responded", "trial.excluded"} <= kinds
    scored = [e["body"] for e in events if e["kind"] == "trial.scored"]
    assert scored and all(b["parser"] == "judge:judge" for b in scored)
    for body in scored:
        judge = body["judge"]
        assert judge["aggregate"] == "majority" and len(judge["votes"]) == 2
        votes = [v["vote"] for v in judge["votes"]]
        agreed = votes[0] if votes[0] is not None and votes.count(votes[0]) == 2 else None
        assert judge["decision"] == agreed
        assert body["status"] == ("ok" if agreed is not None else "unparseable")
        assert all(isinstance(v["request_seq"], int) for v in judge["votes"])
    # the judges' agreement, recomputed here from the recorded votes (Cohen's formula)
    pairs = [[v["vote"] for v in b["judge"]["votes"]] for b in scored]
    pairs = [p for p in pairs if None not in p]
    p_o = sum(a == b for a, b in pairs) / len(pairs)
    p_e = sum(
        (sum(p[0] == c for p in pairs) / len(pairs)) * (sum(p[1] == c for p in pairs) / len(pairs))
        for c in ("correct", "incorrect")
    )
    kappa = next(
        e["body"]["values"]["kappa"]
        for e in events
        if e["kind"] == "analysis.result" and e["body"]["id"] == "exploratory.judge_agreement"
    )
    assert kappa == pytest.approx((p_o - p_e) / (1 - p_e), abs=1e-12)
    status = json.loads(invoke("status", study, "--json"))
    assert {s["step"] for s in status["steps"]} == {"screen", "rewrite", "judge"}
    # issue 31: the preflight covered the step models before the first step call
    preflight = report.get("preflight")
    assert preflight is not None and "of them of step calls" in preflight.reason, preflight
    first_call = next(e["seq"] for e in events if e["kind"] == "step.requested")
    covered = {
        e["body"]["model"] for e in events if e["kind"] == "run.preflight" and e["seq"] < first_call
    }
    assert covered == {"claude-sonnet-4-6", "claude-haiku-4-5", "claude-opus-4-1"}


def test_a_step_preflight_naming_another_model_fails(archive: Path) -> None:
    events = read_events(archive)
    preflight = next(
        e for e in events if e["kind"] == "run.preflight" and e["body"].get("step") == "judge"
    )
    call = preflight["body"]["as_call"]
    preflight["body"]["as_call"] = call.replace("|judge_", "|target_", 1)  # not a judge model
    resign(archive, events)
    with science_skipped():
        reason = failed(verify_archive(archive), "preflight")
    assert f"seq {preflight['seq']}" in reason and "not a model of step 'judge'" in reason


def test_blind_judge_requests_do_not_depend_on_the_arm(study: Path) -> None:
    """Swapping the arm labels of two trials on one item gives the same judge request bytes."""
    loaded = load_study(study, strict=False)
    work = StepWork(loaded, Renderer(loaded))
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        work.load(log)
    trial = next(t for t in work.responses if t.startswith("plain|"))
    other = "sys|" + trial.split("|", 1)[1]
    item = work.trial_stimulus[trial]
    work.trial_stimulus[other] = item
    work.responses[other] = work.responses[trial]  # the same answer under the other arm
    for model in loaded.steps["judge"].models:
        mine = StepCall(f"step:judge|{model}|{trial}", "judge", model, item, trial, 0)
        theirs = StepCall(f"step:judge|{model}|{other}", "judge", model, item, other, 0)
        a, b = work.body(mine), work.body(theirs)
        assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
        shown = json.dumps(a)
        assert trial not in shown and other not in shown and "target" not in shown


# ------------------------------------------------------------------ tampering after lock


def replace_locked(root: Path, events: list[dict[str, Any]], rel: str, data: bytes) -> None:
    """Swap the locked bytes of ``rel`` everywhere a forger would: blob, artifact, manifest."""
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs" / digest).write_bytes(data)
    for e in events:
        if e["kind"] == "artifact.locked" and e["body"]["path"] == rel:
            e["body"]["sha256"], e["body"]["size"] = digest, len(data)
            e["blobs"]["content"] = digest
        if e["kind"] == "protocol.locked":
            e["body"]["manifest"][rel] = digest
            if rel == e["body"].get("items", {}).get("path"):
                lines = [json.loads(x) for x in data.decode().splitlines()]
                import rfc8785

                canon = b"".join(bytes(rfc8785.dumps(x)) + b"\n" for x in lines)
                e["body"]["items"]["sha256"] = hashlib.sha256(canon).hexdigest()
    (root / "protocol" / rel).write_bytes(data)


def test_changed_judge_prompt_fails_naming_it(archive: Path) -> None:
    events = read_events(archive)
    text = (archive / "protocol" / "prompts" / "judge.txt").read_text()
    replace_locked(
        archive,
        events,
        "prompts/judge.txt",
        text.replace("Is the candidate", "Is the given").encode(),
    )
    resign(archive, events)
    with science_skipped():
        report = verify_archive(archive)
    passed(report, "signatures")
    reason = failed(report, "steps")
    assert "the locked template prompts/judge.txt" in reason and "step:judge|" in reason


@pytest.mark.slow
def test_changed_aggregation_rule_fails_naming_it(archive: Path) -> None:
    events = read_events(archive)
    for e in events:
        if e["kind"] == "protocol.locked":
            e["body"]["steps"]["judge"]["aggregate"] = {"k": 1}
    resign(archive, events)
    report = verify_archive(archive)
    passed(report, "signatures")
    reason = failed(report, "rescore")
    assert "judge votes or decision differ" in reason and "'aggregate': {'k': 1}" in reason


@pytest.mark.slow
def test_changed_reference_fails_naming_the_call(archive: Path) -> None:
    events = read_events(archive)
    judged = next(
        e for e in events if e["kind"] == "step.requested" and e["body"]["step"] == "judge"
    )
    item = judged["body"]["item"]
    rows = [json.loads(x) for x in (archive / "protocol/data/items.jsonl").read_text().splitlines()]
    for row in rows:
        if row["id"] == item:
            row["answer"] = "influenza"
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    replace_locked(archive, events, "data/items.jsonl", data)
    resign(archive, events)
    report = verify_archive(archive)
    passed(report, "signatures")
    reason = failed(report, "steps")
    assert f"|{item}|" in reason and "not the one re-rendered" in reason


@pytest.mark.slow
def test_doctored_request_that_reads_a_step_fails_naming_the_trial(archive: Path) -> None:
    events = read_events(archive)
    request = next(e for e in events if e["kind"] == "trial.requested")
    blob = archive / "blobs" / request["blobs"]["request"]
    body = json.loads(blob.read_bytes())
    text = body["messages"][0]["content"][0]["text"]
    body["messages"][0]["content"][0]["text"] = text.replace("Case: I have", "Case: I had")
    import rfc8785

    data = bytes(rfc8785.dumps(body))
    digest = hashlib.sha256(data).hexdigest()
    (archive / "blobs" / digest).write_bytes(data)
    request["blobs"]["request"] = digest
    request["body"]["request_sha256"] = digest
    resign(archive, events)
    report = verify_archive(archive)
    passed(report, "signatures")
    assert f"trial {request['body']['trial']}" in failed(report, "requests")


@pytest.mark.slow
def test_judge_called_before_its_trial_answered_fails(archive: Path) -> None:
    """A judge call moved before its trial's response: the replay names the call."""
    events = read_events(archive)
    judge = next(
        e for e in events if e["kind"] == "step.requested" and e["body"]["step"] == "judge"
    )
    trial = judge["body"]["trial"]
    first = next(
        i
        for i, e in enumerate(events)
        if e["kind"] == "trial.requested" and e["body"]["trial"] == trial
    )
    events.remove(judge)
    events.insert(first + 1, judge)  # after the trial's request, before its response
    resign(archive, events)
    report = verify_archive(archive)
    reason = failed(report, "steps")
    assert "before its inputs existed" in reason and trial in reason


def test_doctored_second_stage_request_fails_naming_the_trial(archive: Path) -> None:
    """The first stage's answer, as the second-stage request quotes it, changed and re-signed."""
    events = read_events(archive)
    request = next(
        e for e in events if e["kind"] == "trial.requested" and e["body"]["arm"] == "doubt"
    )
    blob = archive / "blobs" / request["blobs"]["request"]
    body = json.loads(blob.read_bytes())
    text = body["messages"][0]["content"][0]["text"]
    assert "Earlier you answered: " in text
    body["messages"][0]["content"][0]["text"] = text.replace(
        "Earlier you answered: ", "Earlier you answered: not "
    )
    import rfc8785

    data = bytes(rfc8785.dumps(body))
    digest = hashlib.sha256(data).hexdigest()
    (archive / "blobs" / digest).write_bytes(data)
    request["blobs"]["request"] = digest
    request["body"]["request_sha256"] = digest
    resign(archive, events)
    with science_skipped():
        report = verify_archive(archive)
    passed(report, "signatures")
    reason = failed(report, "requests")
    assert f"trial {request['body']['trial']}" in reason


def test_second_stage_before_its_first_stage_answered_fails(archive: Path) -> None:
    events = read_events(archive)
    second = next(
        e for e in events if e["kind"] == "trial.requested" and e["body"]["arm"] == "doubt"
    )
    prior = "plain|" + second["body"]["trial"].split("|", 1)[1]
    first = next(
        i
        for i, e in enumerate(events)
        if e["kind"] == "trial.requested" and e["body"]["trial"] == prior
    )
    events.remove(second)
    events.insert(first + 1, second)  # after the first stage's request, before its response
    resign(archive, events)
    with science_skipped():
        report = verify_archive(archive)
    reason = failed(report, "steps")
    assert f"trial {second['body']['trial']} (a second stage) was requested" in reason
    assert f"waiting for its first-stage trial {prior}" in reason


def test_viewer_filters_trials_by_judge_verdict(study: Path) -> None:
    """The judge filter reads trial.scored (arm codes only), so it is offered while blind too."""
    from starlette.testclient import TestClient

    from analysis.view._app import make_app
    from analysis.view._index import FILTERS
    from analysis.view._viewer import open_viewer

    assert next(f for f in FILTERS if f.param == "judge").blind
    events = read_events(study.parent / "archive")
    expected: Counter[str] = Counter()
    for e in events:
        if e["kind"] == "trial.scored":
            j = e["body"]["judge"]
            votes = [v["vote"] for v in j["votes"]]
            agree = "unanimous" if None not in votes and len(set(votes)) == 1 else "split"
            expected[f"{j['decision'] or 'undecided'} ({agree})"] += 1
    viewer = open_viewer(study, verify=False)
    try:
        c = TestClient(make_app(viewer), base_url="http://127.0.0.1")
        for value, count in expected.items():
            got = c.get("/trials", params={"judge": value, "format": "json"}).json()
            assert got["total"] == count and all(r["judge"] == value for r in got["rows"])
    finally:
        viewer.index.close()


def test_review_signed_by_a_key_without_the_reviewer_role_fails(archive: Path) -> None:
    """Re-signed by a forger's owner key, the review no longer carries a reviewer's signature."""
    events = read_events(archive)
    review = next(e for e in events if e["kind"] == "review.recorded")
    resign(
        archive,
        [e for e in events if not (e["kind"] == "key.added" and e["body"]["role"] == "reviewer")],
    )
    with science_skipped():
        report = verify_archive(archive)
    passed(report, "signatures")
    reason = failed(report, "steps")
    assert "review.recorded signed by" in reason and "not 'reviewer'" in reason
    assert str(review["seq"] - 1) in reason  # the key.added before it was dropped: seq - 1


def test_a_review_of_a_sample_not_locked_as_judge_label_fails(study: Path) -> None:
    """The kind gate of the ``steps`` check (``docs/scoring.md`` §11), on the archive as read.

    A forger cannot isolate it by re-signing (every re-signed event loses the reviewer's
    signature first), so the locked kind is changed in the verifier's own view of the archive.
    """
    from verify._archive.ledger_checks import ArchiveRun
    from verify._archive.steps import check_steps
    from verify._archive.view import Archive
    from verify._reader.files import ArchiveFiles

    run = ArchiveRun(ArchiveFiles(str(study.parent / "archive")), (), (), 1)
    run.run()
    archive = Archive(run)
    assert check_steps(archive).status.name == "PASS"
    archive.protocol["reviews"]["audit"]["kind"] = "contrast"
    seq = archive.of_kind("review.recorded")[0]
    check = check_steps(archive)
    assert check.status.name == "FAIL"
    assert (
        f"seq {seq}: review.recorded of kind 'judge-label' names sample 'audit', locked as "
        "a 'contrast' sample"
    ) in check.reason, check.reason
