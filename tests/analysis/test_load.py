"""analysis.load: DataFrames of a study (partial, blinded, unblinded) and of its archive.

Every expectation is recomputed here from the events themselves (``ledger.Ledger`` and the raw
JSON of the blobs), never a number written down.
"""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from helpers import make_study, study_key

import analysis
import runner
from ledger import Ledger

FAST = {"backoff_base": 0.001, "backoff_max": 0.01, "jitter_seed": 1, "max_attempts": 2}
FRAMES = ("trials", "attempts", "scores", "items", "events")


class Flaky:
    """The simulated model behind a few injected failures (a custom runner.Backend).

    The first attempt of every replicate-1 trial of arm A fails with a retryable 500, and every
    attempt of ``doomed`` fails, so that trial is given up after ``max_attempts``.
    """

    name = "flaky-simulated"
    simulated = True
    priced = False
    wire_format = "anthropic-messages"

    def __init__(self, doomed: str) -> None:
        self.inner = runner.make_backend("simulated")
        self.doomed = doomed

    def wire_body(self, body: dict[str, Any]) -> dict[str, Any]:
        return body

    async def send(self, body: dict[str, Any], *, seed: str) -> runner.Reply:
        _, arm, stimulus, rep, attempt = seed.rsplit("|", 4)
        if f"{arm}|{stimulus}|{rep}" == self.doomed or (arm, rep, attempt) == ("A", "1", "1"):
            raise runner.BackendError("api_error", "injected 500", http_status=500, retryable=True)
        return await self.inner.send(body, seed=seed)

    async def count_tokens(self, body: dict[str, Any]) -> int | None:
        return await self.inner.count_tokens(body)

    async def aclose(self) -> None:
        await self.inner.aclose()


DOOMED = "B|uniform-up|2"


@pytest.fixture(scope="module")
def stages(tmp_path_factory: pytest.TempPathFactory, study_template: Path) -> dict[str, Path]:
    """One study (2 replicates) copied at each stage: partial, blinded, unblinded; its archive."""
    mp = pytest.MonkeyPatch()
    mp.setenv("PROMPT_LEDGER_HOME", str(tmp_path_factory.mktemp("home")))
    base = tmp_path_factory.mktemp("stages")
    try:
        study = make_study(base / "study", replicates=2, template=study_template)
        key = study_key()
        runner.run_study(study, key, Flaky(DOOMED), runner.RunOptions(max_trials=12, **FAST))
        shutil.copytree(study, base / "partial")
        runner.run_study(study, key, Flaky(DOOMED), runner.RunOptions(**FAST))
        analysis.score_study(study, key)
        shutil.copytree(study, base / "blinded")
        analysis.unblind_study(study, key)
        analysis.analyze_study(study, key)
        analysis.export_study(study, base / "archive", key)
    finally:
        mp.undo()
    return {
        "study": study,
        "partial": base / "partial",
        "blinded": base / "blinded",
        "archive": base / "archive",
    }


def events(root: Path) -> list[Any]:
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        return list(log.events())


def blob(root: Path, digest: str) -> bytes:
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        return log.blob(digest)


def nulls(values: Any) -> list[Any]:
    """A column as a list, with pandas' missing values as None."""
    return [None if pd.isna(v) else v for v in values.astype(object)]


def test_unblinded_study(stages: dict[str, Path]) -> None:
    root = stages["study"]
    evs = events(root)
    frames = analysis.load(root)
    assert (frames.source, frames.blinded, frames.study) == ("study", False, "prompt-tumbling-e")

    protocol = next(e for e in evs if e.kind == "protocol.locked")
    order = blob(root, protocol.blobs["schedule"]).decode().splitlines()
    codes = next(e for e in evs if e.kind == "blinding.revealed").body["arm_codes"]
    requests = {e.seq: e for e in evs if e.kind == "trial.requested"}
    responded = {e.seq: e for e in evs if e.kind == "trial.responded"}
    failed = [e for e in evs if e.kind == "trial.failed"]
    scored = [e for e in evs if e.kind == "trial.scored"]
    response_of = {requests[r.body["request_seq"]].body["trial"]: s for s, r in responded.items()}
    given_up = {requests[f.body["request_seq"]].body["trial"] for f in failed if f.body["final"]}
    assert given_up == {DOOMED} and failed  # the fixture's failures happened

    # trials: the locked schedule, each with its final outcome
    t = frames.trials
    assert list(t["trial"]) == order and list(t["position"]) == list(range(1, len(order) + 1))
    assert [
        f"{a}|{s}|{r}" for a, s, r in zip(t["arm"], t["stimulus"], t["rep"], strict=True)
    ] == order
    assert list(t["arm_code"]) == [codes[a] for a in t["arm"]]
    tries = Counter(r.body["trial"] for r in requests.values())
    assert list(t["attempts"]) == [tries[trial] for trial in order]
    assert list(t["outcome"]) == [
        "responded" if trial in response_of else "given_up" if trial in given_up else "pending"
        for trial in order
    ]
    assert nulls(t["response_seq"]) == [response_of.get(trial) for trial in order]

    # attempts: one per trial.requested, with the outcome and the response's own text
    a = frames.attempts
    assert list(a["request_seq"]) == list(requests)
    outcome = {e.body["request_seq"]: e for e in [*responded.values(), *failed]}
    for row in a.itertuples():
        request, out = requests[row.request_seq], outcome[row.request_seq]
        assert (row.trial, row.arm, row.attempt) == (
            request.body["trial"],
            request.body["arm"],
            request.body["attempt"],
        )
        assert row.outcome_seq == out.seq and row.final == (
            out.kind == "trial.responded" or out.body["final"]
        )
        if out.kind == "trial.responded":
            body = json.loads(blob(root, out.blobs["response"]))
            text = "".join(b["text"] for b in body["content"] if b["type"] == "text")
            assert (row.outcome, row.response_seq) == ("responded", out.seq)
            assert row.response_text == text
            assert row.input_tokens == out.body["usage"]["input_tokens"]
            assert row.output_tokens == out.body["usage"]["output_tokens"]
            assert pd.isna(row.error)
        else:
            assert (row.outcome, row.error_type, row.error) == (
                "failed",
                out.body["error_type"],
                out.body["message"],
            )
            assert row.http_status == out.body["http_status"] and pd.isna(row.response_text)
    doomed = a[a["trial"] == DOOMED]
    assert list(doomed["final"]) == [False, True] and set(doomed["outcome"]) == {"failed"}

    # scores and items: each trial.scored, tied to the arm its response was requested for
    s = frames.scores
    assert list(s["scored_seq"]) == [e.seq for e in scored]
    for row, event in zip(s.itertuples(), scored, strict=True):
        request = requests[responded[event.body["response_seq"]].body["request_seq"]].body
        assert (row.trial, row.arm, row.arm_code) == (
            request["trial"],
            request["arm"],
            event.body["arm_code"],
        )
        assert event.body["arm_code"] == codes[request["arm"]]
        for field in ("status", "n_items", "n_answered", "n_correct", "scores_sha256"):
            assert getattr(row, field) == event.body[field], field
    items = frames.items
    expected = [
        (e.seq, i["row"], i["position"], i["truth"], i["answer"], i["correct"])
        for e in scored
        for i in json.loads(blob(root, e.blobs["scores"]))
    ]
    got = zip(
        items["scored_seq"],
        nulls(items["row"]),
        nulls(items["position"]),
        items["truth"],
        items["answer"],
        items["correct"],
        strict=True,
    )
    assert list(got) == expected
    by_scored = dict(zip(s["scored_seq"], s["arm"], strict=True))
    assert list(items["arm"]) == [by_scored[q] for q in items["scored_seq"]]

    # events: the timeline
    assert list(frames.events["seq"]) == [e.seq for e in evs]
    assert list(frames.events["kind"]) == [e.kind for e in evs]
    assert list(frames.events["blobs"]) == [len(e.blobs) for e in evs]


BLIND = {
    "trials": ("trial", "arm"),
    "attempts": ("trial", "arm", "request_sha256"),
    "scores": ("trial", "arm"),
    "items": ("trial", "arm"),
}


def test_blinded_study_keeps_the_blind_until_broken_on_purpose(stages: dict[str, Path]) -> None:
    root = stages["blinded"]
    evs = events(root)
    assert not any(e.kind == "blinding.revealed" for e in evs)
    frames = analysis.load(root)
    assert frames.blinded
    for name, columns in BLIND.items():
        df = getattr(frames, name)
        assert len(df) > 0
        for column in columns:
            assert df[column].isna().all(), (name, column)
    # arm codes only from the scores: the given-up trial, never scored, has none
    requests = {e.seq: e.body for e in evs if e.kind == "trial.requested"}
    responded = {e.seq: e.body for e in evs if e.kind == "trial.responded"}
    code_of = {
        requests[responded[e.body["response_seq"]]["request_seq"]]["position"]: e.body["arm_code"]
        for e in evs
        if e.kind == "trial.scored"
    }
    t = frames.trials
    assert nulls(t["arm_code"]) == [code_of.get(p) for p in t["position"]]
    assert t.loc[t["outcome"] == "given_up", "arm_code"].isna().all()

    broken = analysis.load(root, break_blind=True)
    assert not broken.blinded
    arms = [requests[seq]["arm"] for seq in broken.attempts["request_seq"]]
    assert list(broken.attempts["arm"]) == arms
    for name, columns in BLIND.items():  # everything else is the same
        kept = [c for c in getattr(frames, name).columns if c not in columns]
        assert getattr(frames, name)[kept].equals(getattr(broken, name)[kept]), name


def test_partial_study_has_pending_trials(stages: dict[str, Path]) -> None:
    root = stages["partial"]
    evs = events(root)
    frames = analysis.load(root)
    requested = {e.body["trial"] for e in evs if e.kind == "trial.requested"}
    final = {
        e.body["trial"]
        for e in evs
        if e.kind == "trial.responded" or (e.kind == "trial.failed" and e.body["final"])
    }
    t = frames.trials
    assert frames.blinded and len(frames.scores) == 0 and len(frames.items) == 0
    assert (t["outcome"] == "pending").sum() == len(t) - len(final)
    assert (t["attempts"] > 0).sum() == len(requested)
    assert t["arm_code"].isna().all()  # nothing scored, nothing revealed


def read_csv(path: Path) -> list[list[str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.reader(fh))[1:]


def as_csv(values: list[Any]) -> list[str]:
    return ["" if pd.isna(v) else str(v) for v in values]


def test_archive_gives_the_frames_of_its_study_and_its_csv_rows(stages: dict[str, Path]) -> None:
    archive = analysis.load(stages["archive"])
    study = analysis.load(stages["study"])  # after the export: the same events
    assert (archive.source, archive.blinded) == ("archive", False)
    for name in FRAMES:
        assert getattr(archive, name).equals(getattr(study, name)), name
    a = archive.attempts
    columns = [
        "request_seq",
        "position",
        "trial",
        "attempt",
        "request_sha256",
        "outcome",
        "outcome_seq",
        "response_sha256",
        "error_type",
        "final",
    ]
    rows = [as_csv(list(r)) for r in a[columns].astype(object).itertuples(index=False)]
    assert rows == read_csv(stages["archive"] / "trials" / "attempts.csv")
    s = archive.scores
    columns = [
        "scored_seq",
        "response_seq",
        "arm_code",
        "stimulus",
        "status",
        "n_items",
        "n_answered",
        "n_correct",
        "scores_sha256",
    ]
    rows = [as_csv(list(r)) for r in s[columns].astype(object).itertuples(index=False)]
    assert rows == read_csv(stages["archive"] / "scores" / "scores.csv")
    assert "StudyFrames(archive" in repr(archive) and "blinded=False" in repr(archive)


def _events_file(root: Path) -> Path:
    return root / "ledger" / "events.jsonl"


def _rewrite(root: Path, kind: str, change: Callable[[dict[str, Any]], None]) -> int:
    """Change the first event of ``kind`` in an archive copy; return its seq."""
    lines = _events_file(root).read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        data = json.loads(line)
        if data["envelope"]["kind"] == kind:
            change(data["envelope"])
            lines[i] = json.dumps(data)
            _events_file(root).write_text("\n".join(lines) + "\n", encoding="utf-8")
            return int(data["envelope"]["seq"])
    raise AssertionError(kind)


def _bad_line(root: Path) -> str:
    lines = _events_file(root).read_text(encoding="utf-8").splitlines()
    lines[2] = "{not json"
    _events_file(root).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return r"ledger/events\.jsonl: line 3 is not an event"


def _no_field(root: Path) -> str:
    seq = _rewrite(root, "trial.scored", lambda env: env["body"].pop("arm_code"))
    return rf"events\.jsonl: seq {seq} \(trial\.scored\): no 'arm_code' in its body"


def _missing_blob(root: Path) -> str:
    digest = ""

    def note(env: dict[str, Any]) -> None:
        nonlocal digest
        digest = env["blobs"]["response"]

    _rewrite(root, "trial.responded", note)
    (root / "blobs" / digest).unlink()
    return rf"blobs/{digest}: no such file or directory"


def _changed_blob(root: Path) -> str:
    seq = _rewrite(root, "trial.scored", lambda env: None)
    digest = next(
        json.loads(line)["envelope"]["blobs"]["scores"]
        for line in _events_file(root).read_text(encoding="utf-8").splitlines()
        if json.loads(line)["envelope"]["seq"] == seq
    )
    (root / "blobs" / digest).write_bytes(b"[]")
    return rf"blobs/{digest}: content does not match its name"


def _bad_schedule(root: Path) -> str:
    data = b"A|uniform-up|1\nnot a trial id\n"
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs" / digest).write_bytes(data)
    seq = _rewrite(root, "protocol.locked", lambda env: env["blobs"].update(schedule=digest))
    return rf"seq {seq} \(protocol\.locked\): schedule line 2 is not a trial id"


@pytest.mark.parametrize(
    "damage",
    [_bad_line, _no_field, _missing_blob, _changed_blob, _bad_schedule],
    ids=["line-not-an-event", "missing-field", "missing-blob", "changed-blob", "bad-schedule"],
)
def test_a_damaged_archive_is_refused_naming_the_place(
    damage: Callable[[Path], str], stages: dict[str, Path], tmp_path: Path
) -> None:
    copy = tmp_path / "archive"
    shutil.copytree(stages["archive"], copy)
    message = damage(copy)
    with pytest.raises(analysis.AnalysisError, match=message):
        analysis.load(copy)


def test_a_path_that_is_neither_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x", encoding="utf-8")
    cases = {
        tmp_path / "nowhere": "does not exist",
        tmp_path / "file.txt": "is a file",
        tmp_path / "empty": r"holds neither ledger\.db nor ledger/events\.jsonl",
    }
    for path, problem in cases.items():
        with pytest.raises(analysis.AnalysisError, match=rf"^{path}: {problem}; analysis\.load"):
            analysis.load(path)
    assert issubclass(analysis.AnalysisError, runner.StudyError)


def test_a_study_not_locked_yet_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "study"
    root.mkdir()
    with Ledger.create(root / "ledger.db", origin="example.org/s", key=study_key()):
        pass
    with pytest.raises(analysis.AnalysisError, match=r"ledger\.db: the study is not locked yet"):
        analysis.load(root)
