"""Trial events inside run sessions, quorums of distinct witnesses, finite skews (issue 32).

The owner holds every key, so a forger re-signs whatever he changes (``resign``, from the
forged-archive tests): each case below is an archive the owner could produce, and each must
FAIL naming the seq or the option at fault. The session rule (``docs/trials.md`` §1): every
trial and step event lies inside a run session, and an event naming its session names the one
it lies in; without it, an owner who deletes ``run.started`` and ``run.stopped`` escapes the
checkpoints a witnessed study promises for each session.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import science_skipped

from ledger.cli import main
from ledger.witness import CosignerVerifier
from tests.verify.test_archive_tamper import resign
from verify import Report, Status
from verify import verify_path as _verify_path


def verify_path(path: Path, **options: Any) -> Report:
    """``verify.verify_path`` without the science checks: every test here reads the outcomes
    or witnesses check and, at most, that the report is not ok (``helpers.science_skipped``)."""
    with science_skipped():
        return _verify_path(path, **options)


def events_of(archive: Path) -> list[dict[str, Any]]:
    lines = (archive / "ledger" / "events.jsonl").read_bytes().splitlines()
    return [json.loads(line)["envelope"] for line in lines]


def without_sessions(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] not in ("run.started", "run.stopped")]


def stop_moved_up(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first session's run.stopped moved to right after its run.started."""
    stop = next(e for e in events if e["kind"] == "run.stopped")
    rest = [e for e in events if e is not stop]
    start = next(i for i, e in enumerate(rest) if e["kind"] == "run.started")
    return [*rest[: start + 1], stop, *rest[start + 1 :]]


def start_removed(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] != "run.started"]


def other_session_named(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [dict(e) for e in events]
    first = next(e for e in out if e["kind"] == "trial.requested")
    first["body"] = {**first["body"], "session": first["body"]["session"] - 1}
    return out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (without_sessions, "trial.requested lies outside every run session"),
        (stop_moved_up, "lies outside every run session (no run.started since the last"),
        (start_removed, "trial.requested lies outside every run session (no run.started"),
        (other_session_named, "trial.requested names run session"),
    ],
    ids=["sessions-deleted", "stop-moved-up", "start-deleted", "other-session-named"],
)
def test_a_trial_event_outside_its_run_session_fails_outcomes(
    simulated_archive: Path,
    tmp_path: Path,
    change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    message: str,
) -> None:
    copy = tmp_path / "archive"
    shutil.copytree(simulated_archive, copy)
    resign(copy, change(events_of(copy)))
    report = verify_path(copy)
    outcomes = report.get("outcomes")
    assert outcomes is not None and outcomes.status is Status.FAIL, outcomes
    assert message in outcomes.reason and outcomes.seq is not None
    assert not report.ok


def test_an_honest_archive_names_its_sessions(
    simulated_archive: Path, simulated_report: Report
) -> None:
    outcomes = simulated_report.get("outcomes")  # verify_archive of simulated_archive
    assert outcomes is not None and outcomes.status is Status.PASS, outcomes
    sessions = sum(e["kind"] == "run.started" for e in events_of(simulated_archive))
    assert f"inside one of {sessions} run session(s)" in outcomes.reason


def test_one_witness_key_under_two_names_is_not_a_quorum_of_two(simulated_archive: Path) -> None:
    key = bytes(range(32))
    twins = [CosignerVerifier(f"witness.example/{n}", key).vkey for n in ("a", "b")]
    report = verify_path(simulated_archive, witnesses=twins, quorum=2)
    witnesses = report.get("witnesses")
    assert witnesses is not None and witnesses.status is Status.FAIL
    assert "witness.example/a and witness.example/b are one key under 2 names" in witnesses.reason


@pytest.mark.parametrize("skew", [float("nan"), float("inf"), -1.0])
def test_a_skew_that_is_not_a_number_of_seconds_fails_the_witness_check(
    simulated_archive: Path, skew: float
) -> None:
    vkey = CosignerVerifier("witness.example/a", bytes(range(32))).vkey
    witnesses = verify_path(simulated_archive, witnesses=[vkey], skew=skew).get("witnesses")
    assert witnesses is not None and witnesses.status is Status.FAIL
    assert "is not a number of seconds from 0 to 86400" in witnesses.reason


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["verify", "ARCHIVE", "--witness-skew", "nan"], "'nan' is not a finite number of seconds"),
        (["verify", "ARCHIVE", "--witness-skew", "inf"], "'inf' is not a finite number of seconds"),
        (["run", "STUDY", "--budget-usd", "nan"], "'nan' is not a finite number"),
        (["run", "STUDY", "--price-in", "inf", "--price-out", "1"], "'inf' is not a finite"),
        (["estimate", "STUDY", "--price-in", "-inf", "--price-out", "1"], "is not a finite"),
    ],
)
def test_numeric_options_refuse_nan_and_infinities(
    simulated_archive: Path, argv: list[str], message: str
) -> None:
    args = [str(simulated_archive) if a in ("ARCHIVE", "STUDY") else a for a in argv]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert message in result.output


# ---------------------------------------------------------------------- concurrent sessions

FORGED = 10**6  # the old-seq key of the second session's run.started (resign renumbers)


def two_workers(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The archive as two PostgreSQL workers would have recorded it (docs/trials.md §8).

    A second run.started, listing the first session as ``concurrent``, after the fifth trial
    request; from there every other trial request names the second session, which stops
    right before the first.
    """
    out = [dict(e) for e in events]
    first = next(i for i, e in enumerate(out) if e["kind"] == "run.started")
    requests = [i for i, e in enumerate(out) if e["kind"] == "trial.requested"]
    at = requests[5]
    second = {**out[first], "seq": FORGED, "body": {**out[first]["body"], "concurrent": [first]}}
    for n, i in enumerate(requests[5:]):
        if n % 2:
            out[i] = {**out[i], "body": {**out[i]["body"], "session": FORGED}}
    stop = next(i for i, e in enumerate(out) if e["kind"] == "run.stopped")
    stop2 = {**out[stop], "seq": FORGED + 1, "body": {**out[stop]["body"], "session": FORGED}}
    return [*out[:at], second, *out[at:stop], stop2, *out[stop:]]


def _second(events: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in events if e["seq"] == FORGED)


def not_declared(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = two_workers(events)
    body = dict(_second(out)["body"])
    del body["concurrent"]
    _second(out)["body"] = body
    return out


def closed_session_listed(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = two_workers(events)
    listed = _second(out)["body"]["concurrent"]
    _second(out)["body"] = {**_second(out)["body"], "concurrent": [listed[0], listed[0] + 1]}
    return out


def listed_badly(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = two_workers(events)
    _second(out)["body"] = {**_second(out)["body"], "concurrent": "all"}
    return out


def stopped_early(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The second session's run.stopped moved up, before requests that name it."""
    out = two_workers(events)
    stop = next(e for e in out if e["seq"] == FORGED + 1)
    rest = [e for e in out if e is not stop]
    at = next(i for i, e in enumerate(rest) if e["seq"] == FORGED)
    return [*rest[: at + 2], stop, *rest[at + 2 :]]


def test_concurrent_sessions_that_say_so_pass_outcomes(
    simulated_archive: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "archive"
    shutil.copytree(simulated_archive, copy)
    resign(copy, two_workers(events_of(copy)))
    outcomes = verify_path(copy).get("outcomes")
    assert outcomes is not None and outcomes.status is Status.PASS, outcomes
    sessions = sum(e["kind"] == "run.started" for e in events_of(copy))
    assert f"inside one of {sessions} run session(s)" in outcomes.reason


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (not_declared, "trial.requested names run session"),
        (closed_session_listed, "as concurrent, but the open session is run.started seq"),
        (listed_badly, "run.started concurrent 'all' is not a sorted list of distinct"),
        (stopped_early, "trial.requested names run session"),
    ],
    ids=["overlap-not-declared", "closed-session-listed", "listed-badly", "stopped-early"],
)
def test_concurrent_sessions_that_do_not_say_so_fail_outcomes(
    simulated_archive: Path,
    tmp_path: Path,
    change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    message: str,
) -> None:
    copy = tmp_path / "archive"
    shutil.copytree(simulated_archive, copy)
    resign(copy, change(events_of(copy)))
    outcomes = verify_path(copy).get("outcomes")
    assert outcomes is not None and outcomes.status is Status.FAIL, outcomes
    assert message in outcomes.reason and outcomes.seq is not None


def test_a_witnessed_study_with_concurrent_sessions_fails_witnesses(
    simulated_archive: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "archive"
    shutil.copytree(simulated_archive, copy)
    resign(copy, two_workers(events_of(copy)))
    vkey = CosignerVerifier("witness.example/a", bytes(range(32))).vkey
    witnesses = verify_path(copy, witnesses=[vkey]).get("witnesses")
    assert witnesses is not None and witnesses.status is Status.FAIL
    assert "runs beside other sessions (concurrent [" in witnesses.reason
