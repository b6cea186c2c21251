"""Provenance (issue 15): the environment the lock records, responses whose reported model is not
the requested one (flagged by ``ledger status``, ``ledger analyze`` and the verifier, as a WARN),
and the verifier's checks of ``run.preflight`` events."""

from __future__ import annotations

import hashlib
import json
import shutil
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fake_messages import FakeMessagesServer
from helpers import make_study, science_skipped, study_key

from analysis._analyze import analyze_study
from analysis._export import export_study
from analysis._scoring import score_study, unblind_study
from ledger import Ledger, SigningKey, canonical_json
from ledger.cli import main
from runner._backends import AnthropicBackend, SimulatedBackend
from runner._execute import RunOptions, run_study
from runner._lock import protocol_event
from runner._provenance import ENVIRONMENT_PACKAGES, environment, model_matches
from tests.verify.test_archive_tamper import read_events, resign, rewrite_manifest
from verify import Report, Status, verify_archive, verify_ledger_file
from verify._archive.preflight import model_matches as verify_model_matches

MODEL = "claude-sonnet-4-6"


@pytest.fixture
def study(tmp_path: Path, ledger_home: Path, study_template: Path) -> Path:
    return make_study(tmp_path / "study", replicates=1, template=study_template)


def events(study: Path, kind: str | None = None) -> list[Any]:
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        return list(log.events(kind))


# ---------------------------------------------------------------------------- environment


def test_the_lock_records_the_environment(study: Path) -> None:
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        locked = protocol_event(log).body["environment"]
    assert locked == environment()
    assert locked["prompt_ledger"] == version("prompt-ledger")
    assert locked["python"].count(".") == 2 and locked["python_implementation"]
    assert sorted(locked["packages"]) == sorted(ENVIRONMENT_PACKAGES)
    for name in (
        "anthropic",
        "httpx",
        "numpy",
        "scipy",
        "statsmodels",
        "pandas",
        "cryptography",
        "rfc8785",
        "sqlite-utils",
        "click",
    ):
        assert locked["packages"][name] == version(name)


# ---------------------------------------------------------------------------- the match rule


@pytest.mark.parametrize(
    ("requested", "reported", "match"),
    [
        (MODEL, MODEL, True),
        ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929", True),  # a dated snapshot
        ("gpt-4o", "gpt-4o-2024-08-06", True),
        ("claude-sonnet-4", "claude-sonnet-4-5", False),  # another model, not a snapshot
        ("claude-sonnet-4", "claude-sonnet-4-5-20250929", False),
        (MODEL, "claude-haiku-4-5", False),
        (MODEL, f"{MODEL}-2026", False),
        (MODEL, f"{MODEL}-20260101-extra", False),
        (MODEL, MODEL.upper(), False),
        ("smollm2-135m", "/models/SmolLM2-135M-Instruct.Q4_1.gguf", False),
        # Bedrock and Vertex AI ids report the Anthropic name they name (docs/backends.md)
        ("global.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5-20250929", True),
        ("anthropic.claude-3-haiku-20240307-v1:0", "claude-3-haiku-20240307", True),
        ("us.anthropic.claude-opus-4-1-20250805-v1:0", "claude-opus-4-1-20250805", True),
        ("eu.anthropic.claude-sonnet-4-6", "claude-sonnet-4-6", True),
        ("anthropic.claude-sonnet-4-6", "claude-sonnet-4-6-20260101", True),
        ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5-20250929", True),
        ("global.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-haiku-4-5-20251001", False),
        ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5", False),
        ("claude-3-5-sonnet-v2@20241022", "claude-3-5-sonnet-20241022", False),
        ("notanthropic.claude-sonnet-4-6", "claude-sonnet-4-6", False),
        ("amazon.titan-text-express-v1", "titan-text-express", False),
    ],
)
def test_requested_and_reported_models_match_by_one_rule(
    requested: str, reported: str, match: bool
) -> None:
    assert model_matches(requested, reported) is match
    assert verify_model_matches(requested, reported) is match  # the verifier's own code agrees
    assert model_matches(requested, None) is None


# ---------------------------------------------------------------------------- a mismatch


def test_a_server_that_reports_another_model_is_flagged_everywhere(
    study: Path, tmp_path: Path
) -> None:
    other = "claude-haiku-4-5"
    with FakeMessagesServer(latency_ms=0, reported_model=other) as server:
        result = CliRunner().invoke(
            main,
            ["run", str(study), "--base-url", server.base_url, "--concurrency", "4"],
            env={"ANTHROPIC_API_KEY": "test"},
        )
    assert result.exit_code == 0, result.output
    assert f"warning: the backend reports model '{other}' for requested '{MODEL}'" in (
        result.stderr
    )
    [preflight] = events(study, "run.preflight")
    assert preflight.body["model_match"] is False and preflight.body["reported_model"] == other
    # ledger status: a count and the first few
    status = CliRunner().invoke(main, ["status", str(study), "--json"])
    data = json.loads(status.stdout)["model_mismatches"]
    assert data["count"] == 36  # 35 responses and the preflight
    assert data["first"][0] == {
        "seq": preflight.seq,
        "kind": "run.preflight",
        "trial": None,
        "requested": MODEL,
        "reported": other,
    }
    assert len(data["first"]) == 5 and data["first"][1]["kind"] == "trial.responded"
    text = CliRunner().invoke(main, ["status", str(study)]).output
    assert "model mismatch: 36 response(s) report a model other than the one requested" in text
    # ledger analyze: the provenance member
    key = study_key()
    score_study(study, key)
    unblind_study(study, key)
    analysed = analyze_study(study, key)
    assert analysed.provenance["model_mismatches"] == 36
    assert analysed.provenance["first_mismatches"][1]["reported"] == other
    assert analysed.provenance["environment"] == environment()
    # the verifier: a WARN naming the first, not a failure
    out = tmp_path / "archive"
    export_study(study, out, key)
    report = verify_archive(out)
    check = report.get("provenance")
    assert check is not None and check.status is Status.WARN, check
    assert f"reports model '{other}'" in check.reason and "(and 35 more)" in check.reason
    assert check.seq == preflight.seq
    assert report.ok, [c for c in report.checks if c.status is Status.FAIL]


def test_a_dated_snapshot_is_no_mismatch(study: Path) -> None:
    with FakeMessagesServer(latency_ms=0, reported_model=f"{MODEL}-20260101") as server:
        backend = AnthropicBackend(api_key="test", base_url=server.base_url)
        run_study(study, study_key(), backend, RunOptions(max_trials=3))
    [preflight] = events(study, "run.preflight")
    assert preflight.body["model_match"] is True
    status = CliRunner().invoke(main, ["status", str(study), "--json"])
    assert json.loads(status.stdout)["model_mismatches"]["count"] == 0


# ---------------------------------------------------------------------------- the verifier


def test_a_runner_key_may_append_run_preflight(study: Path, tmp_path: Path) -> None:
    runner_key = SigningKey.generate("example.org/runner")
    with Ledger.open(study / "ledger.db") as log:
        log.add_key(runner_key.vkey, "runner", key=study_key())
    run_study(study, runner_key, SimulatedBackend(), RunOptions(max_trials=2))
    [preflight] = events(study, "run.preflight")
    assert preflight.actor == runner_key.actor
    report = verify_ledger_file(study / "ledger.db")
    assert report.ok, report.failures


@pytest.fixture
def archive(simulated_archive: Path, tmp_path: Path) -> Path:
    target = tmp_path / "archive"
    shutil.copytree(simulated_archive, target)
    return target


def test_a_fresh_archive_passes_preflight_and_provenance(simulated_report: Report) -> None:
    report = simulated_report  # the session's archive, verified once
    assert report.ok
    preflight, provenance = report.get("preflight"), report.get("provenance")
    assert preflight is not None and preflight.status is Status.PASS, preflight
    assert preflight.reason.startswith("1 preflight request(s) (1 answered)")
    assert provenance is not None and provenance.status is Status.PASS, provenance
    assert "simulated answers are not compared" in provenance.reason
    assert "protocol.locked records the environment" in provenance.reason


def _preflight(events_: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in events_ if e["kind"] == "run.preflight")


def test_a_preflight_request_for_another_model_fails(archive: Path) -> None:
    events_ = read_events(archive)
    preflight = _preflight(events_)
    request = json.loads((archive / "blobs" / preflight["blobs"]["request"]).read_bytes())
    request["model"] = "claude-haiku-4-5"
    data = canonical_json(request)
    digest = hashlib.sha256(data).hexdigest()
    (archive / "blobs" / digest).write_bytes(data)
    preflight["blobs"]["request"] = preflight["body"]["request_sha256"] = digest
    resign(archive, events_)
    with science_skipped():  # only the preflight check is read
        check = verify_archive(archive).get("preflight")
    assert check is not None and check.status is Status.FAIL
    assert "carries model 'claude-haiku-4-5'" in check.reason
    assert f"the locked model is '{MODEL}'" in check.reason


SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda b: b.pop("as_trial"), "has no 'as_trial'"),
        pytest.param(lambda b: b.update(ok="yes"), "'ok' is 'yes'", marks=SLOW),
        # each case is a whole verification: two here, four in the slow set (.ci/run)
        pytest.param(lambda b: b.update(extra=1), "unexpected member(s) extra", marks=SLOW),
        pytest.param(lambda b: b["shape"].pop("images"), "'shape' is not", marks=SLOW),
        pytest.param(
            lambda b: b.update(position=2), "is not a trial of the locked schedule", marks=SLOW
        ),
        (lambda b: b.update(request_sha256="0" * 64), "is not the request blob's hash"),
    ],
)
def test_a_malformed_preflight_body_fails(archive: Path, change: Any, words: str) -> None:
    events_ = read_events(archive)
    change(_preflight(events_)["body"])
    resign(archive, events_)
    with science_skipped():  # only the preflight check is read
        check = verify_archive(archive).get("preflight")
    assert check is not None and check.status is Status.FAIL, check
    assert words in check.reason, check.reason


def test_a_missing_preflight_response_blob_fails(archive: Path) -> None:
    preflight = _preflight(read_events(archive))
    (archive / "blobs" / preflight["blobs"]["response"]).unlink()
    rewrite_manifest(archive)
    with science_skipped():  # only the preflight check is read
        report = verify_archive(archive)
    check = report.get("preflight")
    assert check is not None and check.status is Status.FAIL
    assert "response blob" in check.reason and "missing or altered" in check.reason


def test_a_response_reporting_another_model_warns(archive: Path) -> None:
    events_ = read_events(archive)
    response = next(e for e in events_ if e["kind"] == "trial.responded")
    response["body"]["simulated"] = False  # a real backend's answer ...
    response["body"]["model"] = "claude-haiku-4-5"  # ... naming another model
    resign(archive, events_)
    with science_skipped():  # only the provenance check is read
        check = verify_archive(archive).get("provenance")
    assert check is not None and check.status is Status.WARN, check
    assert "reports model 'claude-haiku-4-5'" in check.reason
