"""`ledger demo` end to end in a subprocess, as the README's first command runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_flow_matches_ledger


def test_demo_runs_offline_verifies_and_catches_the_tamper(tmp_path: Path) -> None:
    env = dict(os.environ, COLUMNS="200")
    env.pop("ANTHROPIC_API_KEY", None)  # offline: nothing may need it
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ledger.cli import main; main()",
            "demo",
            str(tmp_path / "demo"),
            "--replicates",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "SIMULATED" in out
    assert "VERIFIED:" in out and "FAILED:" in out  # the archive, then the tampered copy
    assert "pre-registered verdicts" in out
    # the demo's own witness cosigned the lock and the run, and the verifier trusted its key
    assert re.search(r"│ witnesses\s+│ PASS", out), out
    assert "--witness @" in out and (tmp_path / "demo" / "witness" / "state.db").is_file()
    archive = tmp_path / "demo" / "archive"
    assert (archive / "MANIFEST.sha256").is_file()
    assert (archive / "analysis" / "report.html").is_file()
    # rendered once: the study's report folder holds the archive's report, byte for byte
    study_report = tmp_path / "demo" / "study" / "report"
    assert f"report {study_report / 'report.html'}" in out
    html = (study_report / "report.html").read_bytes()
    assert html == (archive / "analysis" / "report.html").read_bytes()
    figures = sorted(study_report.glob("*.png"))
    assert figures and sorted(p.name for p in study_report.iterdir()) == sorted(
        [*(p.name for p in figures), "report.html"]
    )
    for figure in figures:
        assert figure.read_bytes() == (archive / "analysis" / "figures" / figure.name).read_bytes()
    assert_flow_matches_ledger(archive)  # docs/reporting.md §1
    check = subprocess.run(
        ["sha256sum", "--quiet", "-c", "MANIFEST.sha256"],
        cwd=archive,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert not (tmp_path / "demo" / "study" / "home").exists()  # keys stay outside the study
    assert "ledger view" in out
    assert_paired_t_has_a_verdict(archive)
    view_the_demo(tmp_path / "demo", env)


def assert_paired_t_has_a_verdict(archive: Path) -> None:
    """Issue 31: the paper's paired t (H1-paired) is decided on the complete pairs."""
    import json

    results = json.loads((archive / "analysis" / "results.json").read_text("utf-8"))
    paired = next(r for r in results if r["id"] == "hypothesis.H1-paired")
    assert paired["status"] == "ok", paired["error"]
    assert paired["verdict"] in ("supported", "not supported")
    values = paired["values"]
    assert values["n_dropped"] == len(values["dropped_pairs"])
    assert values["df"] == values["n_x"] - 1


@pytest.mark.slow
def test_the_default_demo_decides_the_papers_paired_t(tmp_path: Path) -> None:
    """``ledger demo`` as the README runs it (30 replicates): one arm-B trial of the default
    run is unparseable and excluded; H1-paired drops that pair and still gets its verdict, and
    the archive verifies (the verifier drops the same pair)."""
    env = dict(os.environ, COLUMNS="200")
    env.pop("ANTHROPIC_API_KEY", None)
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ledger.cli import main; main()",
            "demo",
            str(tmp_path / "demo"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "VERIFIED:" in result.stdout
    archive = tmp_path / "demo" / "archive"
    assert_paired_t_has_a_verdict(archive)
    import json

    results = json.loads((archive / "analysis" / "results.json").read_text("utf-8"))
    paired = next(r for r in results if r["id"] == "hypothesis.H1-paired")["values"]
    excluded = [e for d in paired["dropped_pairs"] for e in d["excluded"]]
    assert paired["n_x"] + paired["n_dropped"] == 180  # the paper's 180 (probe, rep) pairs
    assert all(e["kind"] == "unparseable" for e in excluded)


def view_the_demo(demo: Path, env: dict[str, str]) -> None:
    """The README's `ledger view` lines on the demo's study and archive, as a user runs them."""
    import re

    import httpx

    for target in (demo / "study", demo / "archive"):
        server = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from ledger.cli import main; main()",
                "view",
                str(target),
                "--port",
                "0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert server.stdout is not None
            line = server.stdout.readline()
            url = re.search(r"http://[\d.]+:\d+", line)
            assert url, line
            with httpx.Client(base_url=url.group(0), timeout=60) as http:
                overview = http.get("/")
                assert overview.status_code == 200 and "prompt-tumbling-e" in overview.text
                rows = http.get("/trials?format=json").json()["rows"]
                assert rows and not http.get("/trials?format=json").json()["blind"]
                trial = http.get(f"/trial/{rows[0]['h']}")
                assert trial.status_code == 200 and "Request as sent" in trial.text
        finally:
            server.terminate()
            _, err = server.communicate(timeout=30)
        assert "Traceback" not in err, err
    site = demo / "site"
    bundle = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ledger.cli import main; main()",
            "view",
            str(demo / "archive"),
            "--bundle",
            str(site),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert bundle.returncode == 0, bundle.stdout + bundle.stderr
    assert "verification PASSED" in bundle.stdout
    assert "PASSED" in (site / "index.html").read_text(encoding="utf-8")


def test_demo_prints_commands_that_run(tmp_path: Path) -> None:
    """Without the venv activated, the printed commands name the ledger that ran the demo."""
    from analysis._demo import _ledger_command

    exe = tmp_path / "bin" / "ledger"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n", encoding="utf-8")
    exe.chmod(0o755)
    argv, path = sys.argv, os.environ.get("PATH", "")
    try:
        sys.argv = [str(exe)]
        os.environ["PATH"] = "/usr/bin:/bin"
        assert _ledger_command() == str(exe)
        os.environ["PATH"] = f"{exe.parent}:/usr/bin:/bin"
        assert _ledger_command() == "ledger"
    finally:
        sys.argv = argv
        os.environ["PATH"] = path
