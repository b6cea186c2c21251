"""``ledger export`` and ``ledger report`` read the ledger once, in seq order (issue 41).

The export copies each event's envelope and signature as stored into ``ledger/events.jsonl``
and each blob once, checked against its name; it folds the tables, the trial flow and the
checklists' facts from the same pass. These tests pin that the shortcuts say what the long way
said: the lines are the canonical JSON the format defines, the one-pass folds equal the
kind-by-kind reads, the report's folded distribution equals the row-by-row one, a damaged blob
stops the export with its name and seq, and the archive is the same where each file is synced
on its own (no ``syncfs``).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers import study_key

from analysis._checklists import ChecklistEvents, facts
from analysis._export import _FAILED, _RESPONDED, _Attempts, export_study
from analysis._flow import FlowFold, study_flow
from analysis._report import trial_distribution, trial_distribution_csv
from ledger import Ledger, canonical_json
from runner._lock import StudyError
from verify import verify_path


def _study_copy(simulated_archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the simulated archive's study (analysed and exported once), with its home."""
    base = simulated_archive.parent
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
    root = tmp_path / "study"
    shutil.copytree(base / "study", root)
    return root


def test_each_ledger_line_is_the_canonical_json_of_its_event(simulated_archive: Path) -> None:
    lines = (simulated_archive / "ledger" / "events.jsonl").read_bytes().splitlines()
    with Ledger.open(simulated_archive.parent / "study" / "ledger.db", readonly=True) as log:
        events = list(log.events(end=len(lines)))
    assert len(lines) == len(events) > 70
    for line, event in zip(lines, events, strict=True):
        expected = canonical_json(
            {
                "envelope": json.loads(event.envelope),
                "signature": base64.b64encode(event.signature).decode("ascii"),
            }
        )
        assert line == expected, event.seq


def test_the_one_pass_folds_equal_the_kind_by_kind_reads(simulated_archive: Path) -> None:
    with Ledger.open(simulated_archive.parent / "study" / "ledger.db", readonly=True) as log:
        flow = study_flow(log)
        folded_flow, folded = FlowFold(), ChecklistEvents()
        for e in log.events():
            folded_flow.feed(e.kind, e.seq, e.body)
            folded.feed(e)
        assert study_flow(log, folded_flow) == flow
        assert flow.total.counts["requested"] == folded.requests == 70
        assert facts(log, flow, folded) == facts(log, flow)


def test_the_folded_distribution_is_the_row_by_row_one() -> None:
    rows = [("arm", "trial", "accuracy", "control", "excluded")]
    for i in range(50):
        arm = "ABC"[i % 3]
        rows.append((arm, f"t{i}", repr((i % 7) / 7 + 0.1), str(i % 11 == 0), str(i % 13 == 0)))
    rows.append(("Z", "tz", "0.5", "False", "False"))  # an arm the protocol does not have
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)
    data = text.getvalue().encode("utf-8")
    arms = ["A", "B", "C", "D"]  # D: no trial, its mean a dash
    expected = trial_distribution(list(csv.DictReader(io.StringIO(text.getvalue()))), arms)
    assert trial_distribution_csv(data, arms) == expected
    assert expected[3][1:3] == ["0", "–"] and int(expected[0][1]) > 0
    assert trial_distribution_csv(b"arm,trial,accuracy,control,excluded\n", arms) is None


def test_a_damaged_blob_stops_the_export_naming_it(
    simulated_archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _study_copy(simulated_archive, tmp_path, monkeypatch)
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        size = log.size
        responded = next(iter(log.events("trial.responded")))
    digest = responded.blobs["response"]
    db = sqlite3.connect(root / "ledger.db")
    with db:
        (data,) = db.execute("SELECT data FROM blobs WHERE sha256 = ?", (digest,)).fetchone()
        db.execute("UPDATE blobs SET data = ? WHERE sha256 = ?", (bytes(data) + b" ", digest))
    db.close()
    out = tmp_path / "archive"
    with pytest.raises(StudyError, match=rf"blob {digest} \(named by event seq \d+\).*damaged"):
        export_study(root, out, study_key())
    assert not out.exists() and not list(tmp_path.glob(".archive.tmp-*"))
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        assert log.size == size  # no export.created without its archive


def test_an_archive_synced_file_by_file_verifies(
    simulated_archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import analysis._export

    root = _study_copy(simulated_archive, tmp_path, monkeypatch)
    monkeypatch.setattr(analysis._export, "can_sync_file_system", lambda: False)
    result = export_study(root, tmp_path / "archive", study_key())
    report = verify_path(tmp_path / "archive")
    assert report.ok, [(c.name, c.reason) for c in report.checks if c.status.value == "FAIL"]
    manifest = (tmp_path / "archive" / "MANIFEST.sha256").read_text("utf-8").splitlines()
    assert result.files == len(manifest) + 1  # every file but the manifest is listed in it
    assert sorted(manifest, key=lambda line: line.split("  ", 1)[1]) == manifest


def test_the_background_verification_is_the_one_made_in_place(simulated_archive: Path) -> None:
    """The child's report equals verify_path's, check for check; it can be read twice."""
    from analysis._background import BackgroundVerification

    ledger = str(simulated_archive.parent / "study" / "ledger.db")
    background = BackgroundVerification(ledger)
    got = background.result()
    expected = verify_path(ledger)
    assert got == expected and got.checks == expected.checks and len(got.checks) > 10
    assert background.result() is got
    background.close()


def test_a_background_verification_that_dies_says_so(simulated_archive: Path) -> None:
    """A child that ends without a report raises AnalysisError; close() reaps a running one."""
    from analysis._background import BackgroundVerification
    from analysis._errors import AnalysisError

    ledger = str(simulated_archive.parent / "study" / "ledger.db")
    background = BackgroundVerification(ledger)
    background._process.kill()
    with pytest.raises(AnalysisError, match=r"ledger\.db: the verification of the ledger stopped"):
        background.result()
    running = BackgroundVerification(ledger)
    running.close()
    assert running._process.returncode is not None


def _attempt_rows_by_tuples(
    feed: list[tuple[str, tuple[Any, ...]]],
) -> list[tuple[Any, ...]]:
    """``trials/attempts.csv``'s rows the long way: a tuple per request, a dict of outcomes."""
    requests: list[tuple[Any, ...]] = []
    outcomes: dict[Any, tuple[Any, ...]] = {}
    for kind, values in feed:
        if kind == "request":
            requests.append(values)
        else:
            outcomes[values[0]] = values[1:]
    none = ("none", None, None, None, False)
    return [r + outcomes.get(r[0], none) for r in requests]


SHA = [hashlib.sha256(bytes([i])).hexdigest() for i in range(8)]

ATTEMPT_FEEDS = {
    "one attempt each": [
        ("request", (10, 0, "a|s1|1", 1, SHA[0])),
        ("request", (11, 1, "b|s1|1", 1, SHA[1])),
        ("outcome", (11, "responded", 12, SHA[2], None, True)),
        ("outcome", (10, "responded", 13, SHA[3], None, True)),
    ],
    "a retry, a failure without a response, a final failure": [
        ("request", (5, 0, "a|s1|1", 1, SHA[0])),
        ("outcome", (5, "failed", 6, None, "rate_limit", False)),
        ("request", (7, 0, "a|s1|1", 2, SHA[0])),
        ("outcome", (7, "failed", 8, SHA[4], "server_error", True)),
        ("request", (9, 1, "b|s1|1", 1, SHA[1])),
    ],
    "the last outcome of a request wins": [
        ("request", (3, 0, "a|s1|1", 1, SHA[0])),
        ("outcome", (3, "failed", 4, SHA[4], "timeout", False)),
        ("outcome", (3, "responded", 5, SHA[5], None, True)),
        ("request", (6, 1, "b|s1|1", 1, SHA[1])),
        ("outcome", (6, "responded", 7, None, None, True)),
        ("outcome", (6, "failed", 8, SHA[6], {"odd": "error"}, True)),
        ("outcome", (6, "failed", 9, SHA[7], "timeout", True)),
    ],
    "values the columns cannot hold are kept as recorded": [
        ("request", (3, "0", "a|s1|1", 1, SHA[0])),
        ("request", (4, 1, "b|s1|1", 1, SHA[1].upper())),
        ("request", (5, 2, "c|s1|1", True, "not a hash")),
        ("outcome", (3, "responded", 6, "not a hash", None, True)),
        ("outcome", (4, "failed", 7, SHA[2], ["a", "list"], True)),
        ("outcome", (5, "responded", 8, SHA[3].upper(), None, True)),
    ],
    "an outcome naming no request yet, or a seq that is not an integer": [
        ("outcome", (20, "failed", 2, SHA[4], "timeout", True)),
        ("request", (4, 0, "a|s1|1", 1, SHA[0])),
        ("outcome", (4.0, "responded", 5, SHA[5], None, True)),
        ("request", (20, 1, "b|s1|1", 1, SHA[1])),
        ("request", (21, 2, "c|s1|1", 1, SHA[2])),
        ("outcome", (21, "responded", 22, SHA[6], None, True)),
        ("outcome", (21.0, "failed", 23, None, "late", True)),
        ("outcome", (99, "responded", 24, SHA[7], None, True)),
    ],
}


@pytest.mark.parametrize("name", list(ATTEMPT_FEEDS))
def test_the_compact_attempt_columns_give_the_rows_of_the_events(name: str) -> None:
    """``_Attempts`` (8-byte integers and 32-byte hashes a request) writes the rows the
    tuples and the dict of outcomes wrote, whatever the events hold."""
    feed = ATTEMPT_FEEDS[name]
    folded = _Attempts()
    codes = {"responded": _RESPONDED, "failed": _FAILED}
    for kind, values in feed:
        if kind == "request":
            folded.request(*values)
        else:
            request_seq, outcome, seq, response, error, final = values
            folded.outcome(request_seq, codes[outcome], seq, response, error, final)
    expected = _attempt_rows_by_tuples(feed)
    assert list(folded.rows()) == expected
    assert [tuple(map(type, r)) for r in folded.rows()] == [tuple(map(type, r)) for r in expected]
