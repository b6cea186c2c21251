"""Model identity, stated honestly (issue 31): what the server says about itself is recorded
(``server_identity`` in ``run.preflight`` and ``run.started``, ``docs/trials.md`` §2-3), and a
locked model the server does not list, or a server that cannot be asked, is a WARNING in the
preflight output, ``ledger status``, ``ledger analyze``, the report, the archive README and the
verifier. A server that answers any model name (as llama-cpp-python's does) is the bad input:
its responses echo the requested id, so only its model list tells the reader what it serves.
"""

from __future__ import annotations

import html as html_module
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fake_messages import FakeMessagesServer
from helpers import make_study, science_skipped, study_key

from analysis._analyze import analyze_study
from analysis._export import export_study
from analysis._report import Report, render_terminal
from analysis._scoring import score_study, unblind_study
from ledger import Ledger
from ledger.cli import main
from tests.runner.test_openai_backend import FINGERPRINT, FakeChatServer
from tests.verify.test_archive_tamper import read_events, resign, rewrite_manifest
from verify import Status, verify_archive

MODEL = "claude-sonnet-4-6"  # the template's [model] id
OTHER = "smollm2-135m"  # the one model the server lists
NOT_LISTED = f"the locked model '{MODEL}' is not among the models"


def events(study: Path, kind: str) -> list[Any]:
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        return list(log.events(kind))


def chat_server(listed: list[str] | None) -> Iterator[FakeChatServer]:
    fake = FakeChatServer(listed)
    fake.thread.start()
    try:
        yield fake
    finally:
        fake.httpd.shutdown()
        fake.httpd.server_close()


def run_openai(study: Path, server: FakeChatServer, *extra: str) -> Any:
    return CliRunner().invoke(
        main,
        [
            "run",
            str(study),
            "--backend",
            "openai-compatible",
            "--base-url",
            f"{server.url}/v1",
            *extra,
        ],
    )


def status(study: Path) -> tuple[str, dict[str, Any]]:
    text = CliRunner().invoke(main, ["status", str(study)]).output
    data = json.loads(CliRunner().invoke(main, ["status", str(study), "--json"]).stdout)
    return text, data


def finish(study: Path, tmp_path: Path) -> tuple[Any, Path, Report]:
    """Score, unblind, analyse, report and export the run study; (analysis, archive, report).

    The report is the one the export renders for the archive, left in the study's ``report``
    folder as ``build_report(study)`` writes it (``export_study(..., report_dir=...)``).
    """
    key = study_key()
    score_study(study, key)
    unblind_study(study, key)
    analysed = analyze_study(study, key)
    out = tmp_path / "archive"
    exported = export_study(study, out, key, report_dir=study / "report")
    assert exported.report is not None
    return analysed, out, exported.report


@pytest.fixture(scope="module")
def unlisted(
    tmp_path_factory: pytest.TempPathFactory, study_template: Path
) -> Iterator[dict[str, Any]]:
    """One study run, analysed and exported against a server that lists only another model."""
    tmp = tmp_path_factory.mktemp("unlisted")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(tmp / "home"))
        study = make_study(
            tmp / "study", replicates=1, template=study_template, provider="openai-compatible"
        )
        for server in chat_server([OTHER]):
            result = run_openai(study, server, "--concurrency", "4")
            url = server.url
        analysed, archive, report = finish(study, tmp)
        yield {
            "study": study,
            "run": result,
            "url": url,
            "analysed": analysed,
            "archive": archive,
            "report": report,
        }


# ---------------------------------------------------------------------------- the bad input


def test_the_run_records_what_the_server_listed_and_warns(unlisted: dict[str, Any]) -> None:
    result, study, url = unlisted["run"], unlisted["study"], unlisted["url"]
    assert result.exit_code == 0, result.output
    warning = re.search(r"WARNING model identity: (.*)", result.stderr)
    assert warning is not None, result.stderr
    assert NOT_LISTED in warning.group(1) and f"it named: '{OTHER}'" in warning.group(1)
    assert f"the openai-compatible backend at {url}/v1/chat/completions" in warning.group(1)
    # the preflight: accepted (the server answers any name) and the reported id echoes it
    [preflight] = events(study, "run.preflight")
    body = preflight.body
    assert body["ok"] and body["reported_model"] == MODEL and body["model_match"] is True
    identity = body["server_identity"]
    assert identity["models"] == [OTHER] and identity["listed"] == {MODEL: False}
    [asked] = identity["asked"]
    assert asked["url"] == f"{url}/v1/models" and asked["http_status"] == 200
    assert asked["error"] is None and asked["headers"]["server"].startswith("BaseHTTP")
    assert body["system_fingerprint"] == FINGERPRINT
    # run.started records the same
    [started] = events(study, "run.started")
    assert started.body["server_identity"] == identity


def test_ledger_status_warns(unlisted: dict[str, Any]) -> None:
    text, data = status(unlisted["study"])
    line = next(x for x in text.splitlines() if x.startswith("WARNING model identity"))
    assert "run.preflight seq" in line and NOT_LISTED in line
    warnings = data["model_identity_warnings"]
    assert warnings and all(NOT_LISTED in w["warning"] for w in warnings)
    assert data["model_mismatches"]["count"] == 0  # the reported ids all match: that is the trap


def test_ledger_analyze_and_the_report_warn(unlisted: dict[str, Any]) -> None:
    from rich.console import Console

    provenance = unlisted["analysed"].provenance
    assert any(NOT_LISTED in w["warning"] for w in provenance["model_identity_warnings"])
    html = (unlisted["study"] / "report" / "report.html").read_text("utf-8")
    banner = re.search(r'<div class="banner identity" id="identity">(.*?)</div>', html)
    assert banner is not None
    seq = events(unlisted["study"], "run.started")[0].seq
    assert html_module.unescape(banner.group(1)) == (
        f"MODEL IDENTITY NOT CONFIRMED: the server did not list the locked model '{MODEL}' "
        f"among its models (run.started seq {seq}). A response's model id is what the "
        "server reports, not proof of which model answered."
    )
    console = Console(record=True, width=400)
    render_terminal(unlisted["report"], console)
    assert "WARNING MODEL IDENTITY NOT CONFIRMED" in console.export_text()


def test_the_archive_and_the_verifier_warn(unlisted: dict[str, Any]) -> None:
    archive = unlisted["archive"]
    readme = (archive / "README.md").read_text("utf-8")
    assert (
        f"**MODEL IDENTITY NOT CONFIRMED: the server did not list the locked model '{MODEL}'"
        in readme
    )
    report = verify_archive(archive)
    assert report.ok, [c for c in report.checks if c.status is Status.FAIL]
    provenance = report.get("provenance")
    assert provenance is not None and provenance.status is Status.WARN, provenance
    assert NOT_LISTED in provenance.reason and "proves nothing about which model answered" in (
        provenance.reason
    )
    for name in ("preflight", "report", "derived"):  # the banner and notice are re-derived
        check = report.get(name)
        assert check is not None and check.status is Status.PASS, check


@pytest.fixture
def archive(unlisted: dict[str, Any], tmp_path: Path) -> Path:
    target = tmp_path / "archive"
    shutil.copytree(unlisted["archive"], target)
    return target


def test_a_listed_flag_that_contradicts_the_model_list_fails(archive: Path) -> None:
    events_ = read_events(archive)
    preflight = next(e for e in events_ if e["kind"] == "run.preflight")
    preflight["body"]["server_identity"]["listed"][MODEL] = True  # claims the server listed it
    resign(archive, events_)
    with science_skipped():
        check = verify_archive(archive).get("preflight")
    assert check is not None and check.status is Status.FAIL, check
    assert f"'server_identity.listed' says '{MODEL}' is True, but it is not among" in check.reason


def test_a_readme_without_the_notice_fails(archive: Path) -> None:
    readme = archive / "README.md"
    text = readme.read_text("utf-8")
    kept = [line for line in text.split("\n") if "MODEL IDENTITY NOT CONFIRMED" not in line]
    readme.write_text("\n".join(kept), "utf-8")
    rewrite_manifest(archive)
    with science_skipped():
        check = verify_archive(archive).get("derived")
    assert check is not None and check.status is Status.FAIL, check
    assert "README.md does not carry the notice" in check.reason


# ---------------------------------------------------------------------------- the honest case


@pytest.mark.slow  # a whole study of its own: the slow set (README budget)
def test_a_server_that_lists_the_locked_model_gives_no_warning(
    tmp_path: Path, ledger_home: Path, study_template: Path
) -> None:
    study = make_study(
        tmp_path / "study", replicates=1, template=study_template, provider="openai-compatible"
    )
    for server in chat_server([OTHER, MODEL]):
        result = run_openai(study, server, "--concurrency", "4")
    assert result.exit_code == 0, result.output
    assert "WARNING" not in result.output
    [preflight] = events(study, "run.preflight")
    assert preflight.body["server_identity"]["listed"] == {MODEL: True}
    text, data = status(study)
    assert "WARNING" not in text and data["model_identity_warnings"] == []
    _, archive, _ = finish(study, tmp_path)
    assert "MODEL IDENTITY" not in (archive / "README.md").read_text("utf-8")
    assert 'class="banner identity"' not in (study / "report" / "report.html").read_text("utf-8")
    report = verify_archive(archive)
    provenance = report.get("provenance")
    assert provenance is not None and provenance.status is Status.PASS, provenance
    assert provenance.reason.startswith("the server reported the requested model id")
    assert "not proof of which model answered" in provenance.reason
    assert "the server listed the locked model id in 1 (run session, model) pair(s)" in (
        provenance.reason
    )


@pytest.mark.slow  # a whole study of its own: the slow set (README budget)
def test_a_server_that_cannot_be_asked_warns_at_the_preflight(
    tmp_path: Path, ledger_home: Path, study_template: Path
) -> None:
    study = make_study(
        tmp_path / "study", replicates=1, template=study_template, provider="openai-compatible"
    )
    for server in chat_server(None):  # no /v1/models route
        result = run_openai(study, server, "--check")
        url = server.url
    assert result.exit_code == 0, result.output
    assert (
        f"WARNING model identity: the openai-compatible backend at {url}/v1/chat/completions "
        f"could not be asked whether it serves the locked model '{MODEL}' (HTTP 404 from "
        f"{url}/v1/models"
    ) in result.stderr
    [preflight] = events(study, "run.preflight")
    identity = preflight.body["server_identity"]
    assert identity["models"] is None and identity["listed"] == {MODEL: None}
    text, _ = status(study)
    assert "could not be asked whether it serves the locked model" in text


# ---------------------------------------------------------------------------- Anthropic


@pytest.mark.slow  # a whole study of its own: the slow set (README budget)
def test_the_anthropic_models_api_is_asked_and_an_unknown_id_warns(
    tmp_path: Path, ledger_home: Path, study_template: Path
) -> None:
    study = make_study(tmp_path / "study", replicates=1, template=study_template)
    # the Messages API answers any name; the Models API knows only another model
    with FakeMessagesServer(latency_ms=0, listed_models={"claude-haiku-4-5"}) as server:
        result = CliRunner().invoke(
            main,
            ["run", str(study), "--base-url", server.base_url, "--max-trials", "2"],
            env={"ANTHROPIC_API_KEY": "test"},
        )
        base = server.base_url
        assert server.count("models.retrieve", 404) == 1
    assert result.exit_code == 0, result.output
    assert (
        f"WARNING model identity: the locked model '{MODEL}' is not among the models the "
        f"anthropic backend at {base}/v1/messages reports serving (it named: none)"
        in (result.stderr)
    )
    [preflight] = events(study, "run.preflight")
    identity = preflight.body["server_identity"]
    [asked] = identity["asked"]
    assert asked["url"] == f"{base}/v1/models/{MODEL}" and asked["http_status"] == 404
    assert "not_found_error" in asked["error"] and asked["headers"]["request-id"]
    assert identity["models"] == [] and identity["listed"] == {MODEL: False}
    assert events(study, "run.started")[0].body["server_identity"] == identity
    text, _ = status(study)
    assert "WARNING model identity" in text and "is not among the models" in text


def test_an_anthropic_alias_resolved_to_its_snapshot_is_listed(
    tmp_path: Path, ledger_home: Path, study_template: Path
) -> None:
    study = make_study(tmp_path / "study", replicates=1, template=study_template)
    with FakeMessagesServer(latency_ms=0) as server:  # the Models API knows every id asked
        result = CliRunner().invoke(
            main,
            ["run", str(study), "--base-url", server.base_url, "--check"],
            env={"ANTHROPIC_API_KEY": "test"},
        )
    assert result.exit_code == 0 and "WARNING" not in result.output, result.output
    [preflight] = events(study, "run.preflight")
    assert preflight.body["server_identity"]["listed"] == {MODEL: True}
