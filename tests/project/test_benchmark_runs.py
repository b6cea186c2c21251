"""The benchmark script runs end to end on a small log (figures are read, never asserted)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from locations import REPO

ROOT = REPO
# each benchmark runs a real workload in quick mode: the slow set (.ci/run) runs them
pytestmark = pytest.mark.slow


def test_bench_ledger_runs_and_reports_every_figure() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_ledger.py"),
            "--events",
            "3000",
            "--batch",
            "500",
            "--jobs",
            "2",
            "--quick",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    for label in (
        "Ed25519 sign",
        "Ed25519 verify",
        "batched append",
        "single append",
        "verify, 1 job",
        "verify, 2 jobs",
        "inclusion proof",
        "ratio batched_append",
        "load average at start",
        "load average at end",
    ):
        assert label in result.stdout, result.stdout


def test_bench_analysis_quick_runs_the_whole_plan() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_analysis.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert "full analysis: 26 results" in result.stdout, result.stdout
    assert "failed: none" in result.stdout, result.stdout
    assert "mixed model: singular False" in result.stdout, result.stdout
    for label in (
        "tracemalloc peak",
        "vectorized bootstrap_diff",
        "pandas per-iteration loop",
        "EXTRAPOLATED",
        "ratio pandas / vectorized",
    ):
        assert label in result.stdout, result.stdout


def test_bench_verify_quick_runs_and_reports_every_share(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_verify.py"),
            "--quick",
            "--cache",
            str(tmp_path / "cache"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    for label in (
        "Ed25519 verify",
        "trials",
        "(ok)",
        "signatures",
        "hashing",
        "rescore",
        "statistics",
        "ratio signatures/",
        "/s before",
        "load average at start",
        "load average at end",
        "verifier REML maximise",
        "same optimum: yes",
    ):
        assert label in result.stdout, result.stdout


def test_bench_runner_quick_compares_runner_and_plain_calls() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_runner.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    for label in ("plain/s", "runner/s", "ratio", "ledger", "ms/append"):
        assert label in result.stdout, result.stdout
    rows = [line.split() for line in result.stdout.splitlines() if line.strip().startswith("0ms")]
    assert [row[1] for row in rows] == ["1", "8"], result.stdout


def test_bench_runner_e2e_quick_times_ledger_run_and_bare_sdk_processes() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_runner.py"), "--e2e", "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    for label in (
        "load average at start",
        "load average at end",
        "bare s",
        "ledger s",
        "ratio",
        "paired",
        "runs 0 ms / 8: bare",
    ):
        assert label in result.stdout, result.stdout
    rows = [line.split() for line in result.stdout.splitlines() if line.strip().startswith("0ms")]
    assert [(row[1], row[2]) for row in rows] == [("8", "70")], result.stdout
    # inspect eval runs beside them when inspect-ai is installed, and says so when it is not
    assert ("vs inspect" in result.stdout and "inspect eval: not measured" in result.stdout) or (
        " inspect " in result.stdout.split("runs 0 ms / 8:")[1]
    ), result.stdout


def test_bench_runner_plain_baseline_is_plain_sdk_calls(
    tmp_path: Path, ledger_home: Path, study_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The baseline sends the same bodies with ``AsyncAnthropic().messages.create`` only."""
    from fake_messages import FakeMessagesServer, canonical_sha256
    from helpers import make_study

    from runner._backends import AnthropicBackend

    spec = importlib.util.spec_from_file_location(
        "bench_runner", ROOT / "benchmarks" / "bench_runner.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_runner", bench)  # its dataclasses look it up
    spec.loader.exec_module(bench)

    def not_plain(*args: object, **kwargs: object) -> None:
        raise AssertionError("the plain baseline went through the project's backend")

    monkeypatch.setattr(AnthropicBackend, "send", not_plain)
    monkeypatch.setattr(AnthropicBackend, "__init__", not_plain)
    study = make_study(tmp_path / "study", replicates=1, template=study_template)
    bodies = bench.request_bodies(study, 12)
    with FakeMessagesServer(latency_ms=30) as server:
        rate = bench.plain_rate(server.base_url, bodies, 4)
        assert rate > 0
        assert sorted(a.sha256 for a in server.answered) == sorted(
            canonical_sha256(b) for b in bodies
        )  # the same bodies, each sent once
        assert 2 <= server.max_in_flight <= 4  # bounded by the concurrency, and concurrent


def test_bench_design_locks_schedules_and_renders_a_small_design() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_design.py"),
            "--items",
            "40",
            "--arms",
            "2",
            "--models",
            "2",
            "--replicates",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "= 320 trials" in result.stdout, result.stdout + result.stderr
    for label in ("floor: SHA-256 and sort", "lock ", "schedule ", "render ", "peak RSS"):
        assert label in result.stdout, result.stdout


def test_bench_design_analyse_quick_runs_the_seed_002_plan() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_design.py"),
            "--analyse",
            "--quick",
            "--iterations",
            "200",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "6,000 scored MCQ trials" in result.stdout, result.stdout + result.stderr
    assert "failed: none" in result.stdout, result.stdout
    for label in (
        "floor: pandas groupby",
        "run_analyses ",
        "x floor",
        "peak RSS",
        "mixed models (4 fits)",
        "seed-002 kinds",
        "hypothesis.Hvote ",
    ):
        assert label in result.stdout, result.stdout


def test_bench_witness_quick_reports_every_rate_and_ratio() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_witness.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    for label in (
        "600 logs configured",
        "Ed25519 verify",
        "in process",
        "HTTP, 1 client",
        "HTTP, 4 clients",
        "ratio",
        "every cosigned checkpoint is the witness's state",
        "no witness:",
        "waiting on witnesses",
        "ratio to the unwitnessed run",
    ):
        assert label in result.stdout, result.stdout


def test_bench_variants_quick_locks_renders_and_rederives() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_variants.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr  # 1: over a target (a figure, not a failure)
    for label in (
        "design: 300 items x 11 variants",
        "floor: SHA-256",
        "lock ",
        "render ",
        "rederive ",
        "targets:",
    ):
        assert label in result.stdout, result.stdout


def test_bench_view_quick_times_pages_and_a_watched_run(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_view.py"),
            "--quick",
            "--cache",
            str(tmp_path / "cache"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    for label in (
        "2,000 trials",
        "index built",
        "peak RSS",
        "first page",
        "filter arm",
        "trial page",
        "comparison",
        "proof",
        "worst/target",
        "watched/s",
        "ratio",
    ):
        assert label in result.stdout, result.stdout
    rows = [
        line.split()
        for line in result.stdout.splitlines()
        if re.match(r"\s+(1|8)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+$", line)
    ]
    assert [row[0] for row in rows] == ["1", "1", "8", "8"], result.stdout


def test_bench_coverage_quick_prints_both_coverages_and_the_tool_check() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_coverage.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    for label in (
        "registered (RI, z): coverage",
        "Satterthwaite t): coverage",
        "Monte Carlo SE",
        "closed forms vs the tool",
        " 4 replicates",
        "30 replicates",
    ):
        assert label in result.stdout, result.stdout


def test_bench_store_reports_both_engines_against_the_sign_rate() -> None:
    from pg_server import find_bindir

    if find_bindir() is None:
        pytest.skip("no PostgreSQL binaries (pg_ctl, postgres) found; apt-get install postgresql")
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_store.py"),
            "--events",
            "800",
            "--batch",
            "50",
            "--quick",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for line in (
        "Ed25519 sign rate (limit):",
        "SQLite, one writer",
        "PostgreSQL, one writer",
        "PostgreSQL, 4 writers",
        "x the sign rate",
        "4 writers vs one:",
        "target PostgreSQL one writer >= 0.3x the sign rate:",
    ):
        assert line in result.stdout, result.stdout


def test_bench_serve_quick_reports_nginx_and_ledger_serve() -> None:
    import shutil

    if not Path("/usr/sbin/nginx").exists() and shutil.which("nginx") is None:
        pytest.skip("nginx is not installed (apt-get install nginx-light; .ci/run does)")
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_serve.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    for label in (
        "published 2000 events",
        "nginx (2 keep-alive clients",
        "ledger serve (",
        "level-0 tiles (8 KiB)",
        "entry bundles",
        "p99",
        "ledger monitor, first check",
    ):
        assert label in result.stdout, result.stdout


def test_bench_scale_runs_every_command_on_a_small_study() -> None:
    """bench_scale at 350 trials: each command after ``ledger run`` runs and is measured."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_scale.py"), "--trials", "350"],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    assert "350 trials" in result.stdout, result.stdout
    for command in ("run", "score", "unblind", "analyze", "report", "export", "verify"):
        row = re.search(rf"^  {command} +([\d.]+) +(\d+) +(\d+)", result.stdout, re.M)
        assert row is not None, (command, result.stdout)
        assert float(row.group(1)) > 0 and int(row.group(2)) > 0, row.group(0)
    assert "EXIT" not in result.stdout, result.stdout


def test_bench_score_reports_score_parse_and_sign_per_trial(tmp_path: Path) -> None:
    """bench_score on 70 trials: the score, the parser alone and a signature, with both ratios."""
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_score.py"),
            "--trials",
            "70",
            "--rounds",
            "2",
            "--cache",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    assert "70 trials scored, 2 round(s)" in result.stdout, result.stdout
    for label in ("score", "parse", "sign"):
        row = re.search(rf"^  {label} +([\d.]+) us", result.stdout, re.M)
        assert row is not None and float(row.group(1)) > 0, (label, result.stdout)
    assert re.search(
        r"x of the target \(10,000 trials/s\); score [\d.]+x of parse \+ sign", result.stdout
    )
    forked = subprocess.run(  # the same study (cached), parsed in two forked workers
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_score.py"),
            "--trials",
            "70",
            "--rounds",
            "1",
            "--workers",
            "2",
            "--cache",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    row = re.search(r"^  \(\+ ([\d.]+) us in 2 workers\)", forked.stdout, re.M)
    assert row is not None and float(row.group(1)) > 0, forked.stdout
