"""Human inputs (issue 17): responses supplied as data, and reviews of reference sets and codes.

A study (``tests/support/human_study.py``) with a model arm on two target models, the physicians'
replies as a data arm (``response_from``) and two judges runs on the simulated backend, is
judged, scored, reviewed by two clinician keys (a reference-set sample) and one reviewer of
judge decisions, analysed, exported and verified once (module fixture). Each refusal is a
named test that appends nothing; each tampering is caught by the verifier naming the seq.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import fixed_key, science_skipped
from human_study import ITEMS, write_study

from ledger import Ledger
from ledger.cli import main
from runner._backends import SimulatedBackend
from runner._execute import RunOptions, run_study
from runner._lock import StudyError, lock_study
from runner.spec import SpecError, load_study
from tests.verify.test_archive_tamper import failed, read_events, resign
from verify import verify_archive

KEY = fixed_key("human.example/owner")
CLINICIANS = ("human.example/clinician-a", "human.example/clinician-b")


def invoke(*args: str | Path, ok: bool = True) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    if ok:
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code != 0, result.output
    return result.output


def edits(index: int, who: int) -> dict[str, Any]:
    """Clinician ``who``'s edits of the ``index``-th sampled item (varied, partly agreeing)."""
    if who == 0:
        return {"plausible": {"add": ["sepsis"]}} if index % 2 else {}
    if index % 3:
        return {"plausible": {"add": ["  Sepsis"], "remove": ["stress"]}}
    return {"safety_critical": {"add": ["meningitis"]}, "highly_likely": {"remove": []}}


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """lock, run, score, review (two clinicians; one judge reviewer), unblind, analyze, export."""
    base = tmp_path_factory.mktemp("human")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
        root = write_study(base / "study")
        key = base / "owner.key"
        KEY.save(key)
        invoke("lock", root, "--key", key)
        invoke("run", root, "--backend", "simulated", "--key", key)
        invoke("score", root, "--key", key)
        for i, actor in enumerate(CLINICIANS):
            reviewer = fixed_key(actor)
            reviewer.save(base / f"clinician-{i}.key")
            invoke(
                "key", "add", root / "ledger.db", reviewer.vkey, "--role", "reviewer", "--key", key
            )
        listed = invoke("review", root, "--sample", "refsets")
        items = [line.split("\t", 1)[0] for line in listed.splitlines() if line.strip()]
        for index, item in enumerate(items):
            for who in (0, 1):
                invoke(
                    "review",
                    root,
                    "--sample",
                    "refsets",
                    "--subject",
                    item,
                    "--value",
                    json.dumps(edits(index, who)),
                    "--key",
                    base / f"clinician-{who}.key",
                )
        for index, line in enumerate(invoke("review", root, "--sample", "audit").splitlines()):
            seq = line.split("\t", 1)[0].removeprefix("seq ")
            label = "incorrect" if index % 3 == 1 else "correct"
            invoke(
                "review",
                root,
                "--sample",
                "audit",
                "--subject",
                seq,
                "--value",
                label,
                "--key",
                base / "clinician-0.key",
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


def results(root: Path) -> dict[str, dict[str, Any]]:
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        return {e.body["id"]: e.body for e in log.events("analysis.result")}


# ------------------------------------------------------------------ the data arm


def test_data_trials_take_the_item_field_and_send_nothing(study: Path) -> None:
    fields = {i["id"]: i["physician"] for i in ITEMS}
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        requests = {e.seq: e for e in log.events("trial.requested")}
        data = {s: e for s, e in requests.items() if e.body["arm"] == "physicians"}
        assert len(data) == len(ITEMS)  # once per item, not once per model
        for event in data.values():
            body = event.body
            assert body["backend"] == "data" and body["simulated"] is False
            assert body["trial"] == f"physicians||{body['stimulus']}|1" and body["model"] == ""
            source = json.loads(log.blob(event.blobs["request"]))
            assert source == {
                "item": body["stimulus"],
                "response_from": "physician",
                "source": "data",
            }
        answers = [e for e in log.events("trial.responded") if e.body["request_seq"] in data]
        assert len(answers) == len(ITEMS)
        for event in answers:
            item = data[event.body["request_seq"]].body["stimulus"]
            assert event.seq == event.body["request_seq"] + 1  # one transaction, in order
            assert event.body["format"] == "text" and event.body["backend"] == "data"
            assert event.body["model"] is None and event.body["cost_usd"] is None
            assert log.blob(event.blobs["response"]) == fields[item].encode("utf-8")
        preflights = [
            e.body.get("as_trial") or e.body["as_call"] for e in log.events("run.preflight")
        ]
        assert preflights and not any(t.startswith("physicians|") for t in preflights)
        # the judges' step calls are preflighted too, before the first step call
        assert any(t.startswith("step:") for t in preflights)
        judged = {e.body["trial"] for e in log.events("step.requested")}
        assert {e.body["trial"] for e in data.values()} <= judged  # judged like a model


def test_data_arm_is_its_own_column_and_pairs_within_each_model(study: Path) -> None:
    got = results(study)
    arms = got["descriptive.arms"]["values"]
    assert "physicians" in arms and arms["physicians"]["trials_scored"] == len(ITEMS)
    for model in ("target", "target2"):
        h = got[f"hypothesis.H1@{model}"]
        assert h["status"] == "ok", h["error"]
    assert got["hypothesis.H1"]["status"] == "failed"  # pooled pairs within a model: none


def test_a_restart_takes_only_the_data_trials_not_recorded(tmp_path: Path) -> None:
    root = write_study(tmp_path / "study", reviews="")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
        lock_study(root, KEY)
        run_study(root, KEY, SimulatedBackend(), RunOptions(max_trials=5, jitter_seed=1))
        run_study(root, KEY, SimulatedBackend(), RunOptions(jitter_seed=1))
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        trials = [e.body["trial"] for e in log.events("trial.requested")]
    assert len(trials) == len(set(trials)) == 3 * len(ITEMS)


@pytest.mark.slow
def test_a_batch_session_records_data_trials_without_batching_them(tmp_path: Path) -> None:
    """With no steps the batch backend may run: the data trials are taken, never submitted."""
    from fake_messages import FakeMessagesServer
    from human_study import spec_text

    from runner._batch import AnthropicBatchBackend

    text = spec_text(reviews="")
    start = text.index("[steps.judge]")
    text = text[:start] + text[text.index("[stimuli]") :]
    root = write_study(tmp_path / "s")
    (root / "study.toml").write_text(text.replace('"judge:judge"', '"normalized"'), "utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
        lock_study(root, KEY)
        with FakeMessagesServer(batch_ready_after_polls=1) as server:
            backend = AnthropicBatchBackend(api_key="test", base_url=server.base_url)
            result = run_study(
                root,
                KEY,
                backend,
                RunOptions(poll_interval=0.01, preflight=False, models=("target",)),
            )  # one price a session
            submitted = [b for batch in server._batches.values() for b in batch["requests"]]
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        data = [e for e in log.events("trial.requested") if e.body["backend"] == "data"]
    assert len(data) == len(ITEMS) and len(submitted) == len(ITEMS), result.reason


@pytest.mark.slow
def test_reference_sets_decided_by_a_step_are_reviewed_and_verified(tmp_path: Path) -> None:
    """``reference = "<item step>"``: the sets are the step's decision (a json item step; the
    simulated model answers with the first line of the prompt, here the sets as JSON)."""
    from human_study import spec_text

    items = [
        {
            **i,
            "sets": json.dumps(
                {
                    "plausible": [i["answer"], "stress"],
                    "highly_likely": [i["answer"]],
                    "safety_critical": [],
                }
            ),
        }
        for i in ITEMS
    ]
    root = write_study(tmp_path / "s", items=items)
    (root / "prompts" / "refs.txt").write_text("{sets}\nThe reference sets, as JSON.\n", "utf-8")
    (root / "prompts" / "refs.json").write_text(
        json.dumps(
            {
                "type": "object",
                "required": ["plausible", "highly_likely", "safety_critical"],
                "properties": {
                    k: {"type": "array", "items": {"type": "string"}}
                    for k in ("plausible", "highly_likely", "safety_critical")
                },
            }
        ),
        "utf-8",
    )
    steps = """[steps.refs]
on = "item"
models = ["judge_a"]
template = "prompts/refs.txt"
parser = "json"
schema = "prompts/refs.json"

[reviews.refsets]
reference = "refs"
n = 3
seed = 11
"""
    (root / "study.toml").write_text(spec_text(reviews=steps), "utf-8")
    key = tmp_path / "owner.key"
    KEY.save(key)
    reviewer = fixed_key(CLINICIANS[0])
    reviewer.save(tmp_path / "r.key")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
        invoke("lock", root, "--key", key)
        invoke("run", root, "--backend", "simulated", "--key", key)
        invoke("score", root, "--key", key)
        invoke("key", "add", root / "ledger.db", reviewer.vkey, "--role", "reviewer", "--key", key)
        listed = invoke("review", root, "--sample", "refsets").splitlines()
        item = listed[0].split("\t", 1)[0]
        assert '"highly_likely":' in listed[0]
        out = invoke(
            "review",
            root,
            "--sample",
            "refsets",
            "--subject",
            item,
            "--value",
            json.dumps({"plausible": {"remove": ["gout fever"]}}),
            "--key",
            tmp_path / "r.key",
            ok=False,
        )
        assert "is not in the plausible set" in out
        invoke(
            "review",
            root,
            "--sample",
            "refsets",
            "--subject",
            item,
            "--value",
            json.dumps({"plausible": {"remove": ["stress"]}}),
            "--key",
            tmp_path / "r.key",
        )
        for step in ("unblind", "analyze"):
            invoke(step, root, "--key", key)
        invoke("export", root, tmp_path / "archive", "--key", key)
    table = results(root)["review.refsets"]["values"]
    assert table["reviewed"] == 1 and table["sets"]["plausible"]["either"]["commission"] == {
        "items": 1,
        "n": 1,
        "share": 1,
    }
    report = verify_archive(tmp_path / "archive")
    assert report.ok, [(c.name, c.reason) for c in report.checks if c.status.name == "FAIL"]


# ------------------------------------------------------------------ bad input


def test_response_from_field_missing_on_an_item_is_refused(tmp_path: Path) -> None:
    items = [dict(i) for i in ITEMS]
    del items[4]["physician"]
    root = write_study(tmp_path / "s", items=items)
    with pytest.raises(SpecError) as err:
        load_study(root)
    text = str(err.value)
    assert "arms.physicians.response_from" in text and "item 'q05'" in text
    assert "'physician'" in text and "line 5" in text


@pytest.mark.parametrize(
    "extra",
    [
        'components = ["task"]',
        "sampling = { temperature = 1.0 }",
        'after = { arm = "model" }',
        'models = ["target"]',
    ],
)
def test_a_data_arm_that_shapes_a_request_is_refused(tmp_path: Path, extra: str) -> None:
    from human_study import ARMS

    root = write_study(tmp_path / "s", arms=ARMS + extra + "\n")
    with pytest.raises(SpecError) as err:
        load_study(root)
    key = extra.split(" ", 1)[0]
    assert f"arms.physicians.{key}" in str(err.value) and "sends no request" in str(err.value)


def test_reference_sets_missing_on_an_item_are_refused(tmp_path: Path) -> None:
    items = [dict(i) for i in ITEMS]
    items[2] = {**items[2], "metadata": {"reference_plausible": ["x"]}}
    root = write_study(tmp_path / "s", items=items)
    with pytest.raises(SpecError, match=r"reviews\.refsets\.reference.*item 'q03'"):
        load_study(root)


def test_a_reference_that_is_not_a_json_item_step_is_refused(tmp_path: Path) -> None:
    from human_study import REVIEWS

    root = write_study(tmp_path / "s", reviews=REVIEWS.replace('"supplied"', '"judge"'))
    with pytest.raises(
        SpecError,
        match=r"reviews\.refsets\.reference.*an item step with the "
        r"json parser.*got 'judge'",
    ):
        load_study(root)


def _reviewer(study: Path) -> Any:
    from ledger import SigningKey

    return SigningKey.load(study.parent / "clinician-1.key")


def test_review_of_an_item_outside_the_sample_is_refused(study: Path) -> None:
    from analysis._reviewing import record_review, review_subjects

    sample = {str(s.response_seq) for s in review_subjects(study, "refsets")}
    outside = next(i["id"] for i in ITEMS if i["id"] not in sample)
    size = _size(study)
    with pytest.raises(StudyError, match=f"item '{outside}' is not in review sample 'refsets'"):
        record_review(study, _reviewer(study), "refsets", outside, {})
    assert _size(study) == size


def test_an_edit_removing_a_diagnosis_not_in_the_set_is_refused(study: Path) -> None:
    from analysis._reviewing import record_review, review_subjects

    item = str(review_subjects(study, "refsets")[0].response_seq)
    size = _size(study)
    with pytest.raises(StudyError, match=r"plausible\.remove: 'gout fever' is not in"):
        record_review(
            study, _reviewer(study), "refsets", item, {"plausible": {"remove": ["gout fever"]}}
        )
    with pytest.raises(StudyError, match="already in the highly_likely set"):
        word = next(i["answer"] for i in ITEMS if i["id"] == item)
        record_review(
            study,
            _reviewer(study),
            "refsets",
            item,
            {"highly_likely": {"add": [f" {word.upper()} "]}},
        )
    assert _size(study) == size


def test_review_before_the_seal_is_refused(tmp_path: Path) -> None:
    from analysis._reviewing import record_review

    root = write_study(tmp_path / "s")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
        lock_study(root, KEY)
        reviewer = fixed_key(CLINICIANS[0])
        with Ledger.open(root / "ledger.db") as log:
            log.add_key(reviewer.vkey, "reviewer", key=KEY)
        with pytest.raises(StudyError, match="scoring is not sealed yet"):
            record_review(root, reviewer, "refsets", "q01", {})
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        assert not list(log.events("review.recorded"))


def _size(root: Path) -> int:
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        return log.size


# ------------------------------------------------------------------ tabulation


def test_reference_review_table_counts_as_the_seed_does(study: Path) -> None:
    """Table 2 and Appendix G: recomputed here from the recorded edits by a direct count."""
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        recorded = [
            (e.actor, e.body["subject"], e.body["value"])
            for e in log.events("review.recorded")
            if e.body["sample"] == "refsets"
        ]
    table = results(study)["review.refsets"]["values"]
    assert len(table["reviewers"]) == 2 and table["reviewed"] == 5 == len(table["sample"])
    by: dict[str, dict[str, Any]] = {}
    for actor, item, value in recorded:
        by.setdefault(item, {})[actor] = value

    def flagged(value: dict[str, Any], name: str, key: str) -> set[str]:
        return {" ".join(x.lower().split()) for x in value.get(name, {}).get(key, [])}

    for name in ("plausible", "highly_likely", "safety_critical"):
        for criterion, join in (("agreement", set.intersection), ("either", set.union)):
            rows = [
                [
                    join(*(flagged(v, name, key) for v in by[item].values()))
                    for key in ("remove", "add")
                ]
                for item in table["sample"]
            ]
            got = table["sets"][name][criterion]
            assert got["commission"]["items"] == sum(bool(r) for r, _ in rows)
            assert got["omission"]["items"] == sum(bool(a) for _, a in rows)
            assert got["commission"]["share"] == pytest.approx(got["commission"]["items"] / 5)
            assert got["mean_additions"] == pytest.approx(sum(len(a) for _, a in rows) / 5)
            assert got["mean_removals"] == pytest.approx(sum(len(r) for r, _ in rows) / 5)
    plausible = table["sets"]["plausible"]
    assert plausible["either"]["omission"]["items"] > plausible["agreement"]["omission"]["items"]
    assert plausible["agreement"]["omission"]["items"] >= 1  # "Sepsis" and "sepsis" agree


def test_reviews_against_the_judges_match_statsmodels_kappa(study: Path) -> None:
    from statsmodels.stats.inter_rater import cohens_kappa

    table = results(study)["review.audit"]["values"]
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        decisions = {
            e.body["response_seq"]: e.body["judge"]["decision"] for e in log.events("trial.scored")
        }
        votes = {
            e.body["response_seq"]: [v["vote"] for v in e.body["judge"]["votes"]]
            for e in log.events("trial.scored")
        }
        reviews = {
            e.body["subject"]: e.body["value"]
            for e in log.events("review.recorded")
            if e.body["sample"] == "audit"
        }
    pairs = [(v, decisions[s]) for s, v in reviews.items() if decisions[s] is not None]
    (who,) = table["reviewers"]
    got = table["by_reviewer"][who]
    assert got["n"] == len(pairs) and got["agreement"] == pytest.approx(
        sum(a == b for a, b in pairs) / len(pairs)
    )
    labels = ["correct", "incorrect"]
    grid = [[sum(1 for a, b in pairs if (a, b) == (x, y)) for y in labels] for x in labels]
    assert got["kappa"] == pytest.approx(float(cohens_kappa(grid, return_results=False)))
    for name, same in (("unanimous", True), ("split", False)):
        inside = [
            (v, decisions[s])
            for s, v in reviews.items()
            if decisions[s] is not None
            and (None not in votes[s] and len(set(votes[s])) == 1) is same
        ]
        cell = got["strata"][name]
        assert cell["n"] == len(inside)
        if inside:
            assert cell["agreement"] == pytest.approx(sum(a == b for a, b in inside) / len(inside))


# ------------------------------------------------------------------ the archive


def test_the_archive_verifies(study: Path) -> None:
    report = verify_archive(study.parent / "archive")
    assert report.ok, [(c.name, c.reason) for c in report.checks if c.status.name == "FAIL"]
    assert "data trials took their responses byte for byte" in report.get("requests").reason
    assert "reviews signed by reviewer keys" in report.get("steps").reason


def _view(study: Path) -> Any:
    """The verifier's own view of the exported archive (to change one fact in isolation)."""
    from verify._archive.ledger_checks import ArchiveRun
    from verify._archive.view import Archive
    from verify._reader.files import ArchiveFiles

    run = ArchiveRun(ArchiveFiles(str(study.parent / "archive")), (), (), 1)
    run.run()
    return Archive(run)


def _changed_body(view: Any, seq: int, **changes: Any) -> None:
    """Event ``seq``'s body as the view's checks read it, with ``changes`` (the view keeps
    packed bodies and rebuilds each when read, so a change is made where bodies are read)."""
    body = {**view.body(seq), **changes}
    read = view.envs.body
    view.envs.body = lambda index: body if index == seq else read(index)


def test_a_tampered_data_response_fails_naming_its_seq(archive: Path) -> None:
    """The physician's reply is changed and the archive re-signed: the response is no longer
    the locked item field."""
    events = read_events(archive)
    event = next(
        e for e in events if e["kind"] == "trial.responded" and e["body"].get("backend") == "data"
    )
    data = b"Definitely gout."
    digest = hashlib.sha256(data).hexdigest()
    (archive / "blobs" / digest).write_bytes(data)
    event["blobs"]["response"] = digest
    resign(archive, events)
    with science_skipped():
        reason = failed(verify_archive(archive), "requests")
    assert f"seq {events.index(event)}:" in reason and "byte for byte" in reason, reason


def test_a_review_outside_its_sample_fails_naming_its_seq(study: Path) -> None:
    from verify._archive.steps import check_steps

    view = _view(study)
    assert check_steps(view).status.name == "PASS"
    sample = results(study)["review.refsets"]["values"]["sample"]
    outside = next(i["id"] for i in ITEMS if i["id"] not in sample)
    seq = next(s for s in view.of_kind("review.recorded") if view.body(s)["sample"] == "refsets")
    _changed_body(view, seq, subject=outside)
    check = check_steps(view)
    assert check.status.name == "FAIL"
    assert f"seq {seq}: review.recorded subject '{outside}' is not an item" in check.reason


def test_a_review_removing_what_the_set_lacks_fails_naming_its_seq(study: Path) -> None:
    from verify._archive.steps import check_steps

    view = _view(study)
    seq = next(s for s in view.of_kind("review.recorded") if view.body(s)["sample"] == "refsets")
    _changed_body(view, seq, value={"plausible": {"remove": ["not a listed diagnosis"]}})
    check = check_steps(view)
    assert check.status.name == "FAIL" and f"seq {seq}:" in check.reason
    assert "is not in the set" in check.reason


def test_a_review_by_a_key_without_the_reviewer_role_fails_naming_its_seq(study: Path) -> None:
    from verify._archive.steps import check_steps

    view = _view(study)
    seq = next(s for s in view.of_kind("review.recorded") if view.body(s)["sample"] == "refsets")
    actor = str(view.envs[seq]["actor"])
    view.roles[actor] = "runner"
    check = check_steps(view)
    assert check.status.name == "FAIL" and f"seq {seq}: review.recorded signed by" in check.reason


# ------------------------------------------------------------------ codes of a contrast sample

CODED_SPEC = """[study]
id = "coded"
title = "A contrast sample coded by a reviewer"

[model]
provider = "anthropic"
id = "claude-haiku-4-5"
max_tokens = 16
temperature = 0.0

[components]
task = "prompts/task.txt"

[prompt]
item = "prompts/item.txt"

[arms.direct]
role = "full"
components = ["task"]

[arms.bare]
role = "vehicle"
components = []

[stimuli]
items = "items.jsonl"

[design]
replicates = 2
seed = 5
bootstrap_seed = 6
bootstrap_iterations = 200

[response]
parser = "multiple-choice"

[[hypotheses]]
id = "H1"
contrast = ["direct", "bare"]
test = "mcnemar"
alpha = 0.05

[analysis]
exclude_unparseable = false

[reviews.hurt]
failed = { arm = "bare" }
succeeded = { arm = "direct" }
n = 3
seed = 7
codes = ["misread", "guess", "format"]
"""


@pytest.fixture(scope="module")
def coded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str]]]:
    """An MCQ study locked, run, scored and unblinded; its contrast cases listed for coding."""
    from tests.analysis.test_mcq_hypotheses import ITEMS as MCQ_ITEMS

    base = tmp_path_factory.mktemp("coded")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
        root = base / "study"
        files = {
            "study.toml": CODED_SPEC,
            "prompts/item.txt": "Question: {question}\n{options}\n",
            "prompts/task.txt": "Answer with the letter of the right option.\n",
            "items.jsonl": "".join(json.dumps(r) + "\n" for r in MCQ_ITEMS),
        }
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, encoding="utf-8")
        key = base / "owner.key"
        fixed_key("coded/owner").save(key)
        for step in (("lock",), ("run", "--backend", "simulated"), ("score",), ("unblind",)):
            invoke(step[0], root, *step[1:], "--key", key)
        coder = fixed_key("coded/coder")
        coder.save(base / "coder.key")
        invoke("key", "add", root / "ledger.db", coder.vkey, "--role", "reviewer", "--key", key)
        listed = invoke("review", root, "--sample", "hurt")
        yield root, [line.split("\t", 1)[0] for line in listed.splitlines() if line.strip()]


def test_a_code_not_in_the_declared_list_is_refused(coded: tuple[Path, list[str]]) -> None:
    root, cases = coded
    assert cases, "the simulated models give no case where bare failed and direct succeeded"
    size = _size(root)
    out = invoke(
        "review",
        root,
        "--sample",
        "hurt",
        "--subject",
        cases[0],
        "--value",
        "misread,nonsense",
        "--key",
        root.parent / "coder.key",
        ok=False,
    )
    assert "code 'nonsense' is not declared" in out
    assert _size(root) == size


def test_codes_are_signed_tabulated_and_verified(coded: tuple[Path, list[str]]) -> None:
    root, cases = coded
    given = {case: ["misread", "guess"] if i % 2 else ["format"] for i, case in enumerate(cases)}
    for case, codes in given.items():
        invoke(
            "review",
            root,
            "--sample",
            "hurt",
            "--subject",
            case,
            "--value",
            ",".join(codes),
            "--key",
            root.parent / "coder.key",
        )
    key = root.parent / "owner.key"
    invoke("analyze", root, "--key", key)
    table = results(root)["review.hurt.codes"]["values"]
    (who,) = table["reviewers"]
    for code in ("misread", "guess", "format"):
        count = sum(code in v for v in given.values())
        assert table["by_reviewer"][who][code] == count == table["agreement"][code]
    assert table["coded"] == len(cases)
    invoke("export", root, root.parent / "archive", "--key", key)
    report = verify_archive(root.parent / "archive")
    assert report.ok, [(c.name, c.reason) for c in report.checks if c.status.name == "FAIL"]


# ------------------------------------------------------------------ slow: kills and the whole run


@pytest.mark.slow
def test_data_trials_survive_sigkills_and_the_study_verifies(tmp_path: Path) -> None:
    """Up to six SIGKILLs of ``ledger run`` at random moments; then the whole study verifies.

    A subprocess, the real SDK over HTTP to the fake server, a data arm of 40 items: every
    data trial is recorded once, whole (request and response in one commit), the model trials
    and judges resume, and the study is scored, analysed, exported and verified.
    """
    import os
    import random
    import sys
    from collections import Counter

    from fake_messages import FakeMessagesServer
    from helpers import sigkill_sessions
    from human_study import WORDS

    from tests.runner.test_steps_crash import responder

    items = [
        {
            **ITEMS[i % len(ITEMS)],
            "id": f"c{i:03d}",
            "physician": f"Reply {i}: likely {WORDS[i % len(WORDS)]}.",
        }
        for i in range(40)
    ]
    root = write_study(tmp_path / "study", items=items)
    home = tmp_path / "home"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(home))
        lock_study(root, KEY)
    key = tmp_path / "owner.key"
    KEY.save(key)
    env = dict(os.environ, ANTHROPIC_API_KEY="test", PROMPT_LEDGER_HOME=str(home))
    cli = [sys.executable, "-c", "from ledger.cli import main; main()"]
    rng = random.Random(23)
    with FakeMessagesServer(latency_ms=60, responder=responder, seed=5) as server:
        args = [
            *cli,
            "run",
            str(root),
            "--base-url",
            server.base_url,
            "--key",
            str(key),
            "--concurrency",
            "4",
        ]
        # 6 kills (the judge-phase soak is test_steps_crash), each once the session has
        # written; each session forked from a process that imported the runner once
        sigkill_sessions(
            args, env, 6, lambda: _size(root), rng, delay=0.6, grow=2, log=tmp_path / "runs.log"
        )
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        evs = list(log.events())
    assert sum(e.kind == "run.started" for e in evs) >= 3, "the kills came too late"
    requests = {e.seq: e.body for e in evs if e.kind == "trial.requested"}
    data = {s: b for s, b in requests.items() if b["backend"] == "data"}
    assert Counter(b["trial"] for b in data.values()) == Counter(
        f"physicians||c{i:03d}|1" for i in range(40)
    )  # each once, none twice
    responded = {e.body["request_seq"]: e.seq for e in evs if e.kind == "trial.responded"}
    assert all(responded.get(s) == s + 1 for s in data), "a data trial recorded in two commits"
    assert not any(e.kind == "trial.failed" and e.body["request_seq"] in data for e in evs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(home))
        for step in ("score", "unblind", "analyze"):
            invoke(step, root, "--key", key)
        invoke("export", root, tmp_path / "archive", "--key", key)
    report = verify_archive(tmp_path / "archive")
    assert report.ok, [(c.name, c.reason) for c in report.checks if c.status.name == "FAIL"]


# ------------------------------------------------------------------ reviews after the analysis


def test_a_review_after_the_analysis_is_refused(study: Path) -> None:
    """Issue 32: the analysis is recorded once; a review after it would be in no result."""
    from analysis._reviewing import record_review, review_subjects

    item = str(review_subjects(study, "refsets")[0].response_seq)
    size = _size(study)
    with pytest.raises(StudyError, match=r"the study is analysed \(analysis.result from seq \d+\)"):
        record_review(study, _reviewer(study), "refsets", item, {})
    assert _size(study) == size


def test_a_review_appended_after_the_analysis_leaves_a_re_export_verifying(
    study: Path, tmp_path: Path
) -> None:
    """Issue 32: a reviewer key appends a valid review after the analysis by hand (ledger
    append); the study is exported again. The analysis holds the reviews before it, as
    recorded, so the re-export verifies; the steps check WARNs, naming the late review."""
    from analysis._reviewing import review_subjects

    copy = tmp_path / "study"
    shutil.copytree(study, copy)
    item = str(review_subjects(copy, "refsets")[0].response_seq)
    with Ledger.open(copy / "ledger.db") as log:
        late = log.append(
            "review.recorded",
            {
                "sample": "refsets",
                "subject": item,
                "kind": "reference-set",
                "value": {"plausible": {"add": ["late finding"]}},
            },
            key=_reviewer(study),
        )
    invoke("export", copy, tmp_path / "archive", "--key", study.parent / "owner.key")
    report = verify_archive(tmp_path / "archive")
    assert report.ok, [(c.name, c.reason) for c in report.checks if c.status.name == "FAIL"]
    steps = report.get("steps")
    assert steps is not None and steps.status.name == "WARN"
    assert f"seq {late.seq}: review.recorded after the analysis" in steps.reason
