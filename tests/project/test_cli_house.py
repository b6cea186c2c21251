"""The command line as a whole: fast start, --json on every data command, tables that never cut,
a malformed trusted key as a usage error. (An unexpected failure's one line and trace file:
tests/project/test_bad_input_fs.py.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from helpers import make_study

from ledger import Ledger
from ledger.cli import main

HEAVY = ("pandas", "numpy", "statsmodels", "matplotlib", "scipy", "anthropic", "httpx", "PIL")


def run(*args: str | Path, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["--version"], ["verify", "--help"], ["run", "--help"], ["analyze", "--help"]],
)
def test_start_up_imports_no_heavy_library(argv: list[str]) -> None:
    probe = (
        "import sys\nfrom ledger.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        f"print('HEAVY:', *(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "Usage:" in out or "version" in out
    assert out.strip().splitlines()[-1] == "HEAVY:"


def test_the_viewers_modules_import_no_statistics_or_figures_library() -> None:
    """``ledger view`` imports its modules and formats recorded results (the overview's
    verdict cells) without scipy.stats, statsmodels or matplotlib: each would cost its
    process a second of CPU before it serves (the plots import matplotlib when drawn)."""
    probe = (
        "import sys\n"
        "import analysis.view._viewer\n"
        "from analysis._result_text import estimate_text, p_text, rule_text\n"
        "result = {'hypothesis': 'H1', 'test': 'lmm', 'status': 'ok', 'verdict': 'supported',\n"
        "          'values': {'estimate': 0.12, 'ci_lower': 0.02, 'ci_upper': 0.22,\n"
        "                     'p_raw': 0.01}, 'decided_by': {'rule': 'p < 0.05'}}\n"
        "print('CELLS:', estimate_text(result), '|', p_text(result), '|', rule_text(result))\n"
        "heavy = ('scipy.stats', 'statsmodels', 'matplotlib')\n"
        "print('HEAVY:', *(m for m in heavy if m in sys.modules))"
    )
    lines = _probe_lines(probe)
    assert lines[-2].startswith("CELLS: ") and "p = " in lines[-2] and "p < 0.05" in lines[-2]
    assert lines[-1] == "HEAVY:"


def _probe_lines(probe: str) -> list[str]:
    """The lines a fresh interpreter prints running ``probe`` (its modules loaded from nothing)."""
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return out.strip().splitlines()


def test_the_export_and_report_modules_import_no_statistics_library() -> None:
    """``ledger export`` and ``ledger report`` write recorded results (the README's decision
    lines, the report's tables and figures) without scipy or statsmodels: the analysis's
    statistics are not theirs to load (about 35 MB and a second of CPU each; issue 41)."""
    probe = (
        "import sys\n"
        "import analysis._export, analysis._report, analysis._flow, analysis._checklists\n"
        "from analysis._result_text import describe_decision\n"
        "result = {'hypothesis': 'H1', 'test': 'two-proportion-z', 'status': 'ok',\n"
        "          'verdict': 'supported', 'values': {},\n"
        "          'decided_by': {'rule': 'p < 0.05', 'p': 0.01}}\n"
        "print('LINE:', describe_decision(result))\n"
        "heavy = ('scipy', 'statsmodels')\n"
        "print('HEAVY:', *(m for m in heavy if m in sys.modules))"
    )
    lines = _probe_lines(probe)
    assert lines[-2] == "LINE: rule `p < 0.05`; p = 0.01"
    assert lines[-1] == "HEAVY:"


def test_every_package_command_is_registered_and_loads() -> None:
    ctx = main.make_context("ledger", ["--help"], resilient_parsing=True)
    names = main.list_commands(ctx)
    for name in (
        "new",
        "arms",
        "lock",
        "amend",
        "schedule",
        "estimate",
        "run",
        "status",
        "score",
        "unblind",
        "analyze",
        "report",
        "export",
        "demo",
        "verify",
        "items",
        "witness",
    ):
        assert name in names
        command = main.get_command(ctx, name)
        assert command is not None and command.help, name
    assert main.get_command(ctx, "no-such-command") is None


@pytest.fixture(scope="module")
def scored_study(tmp_path_factory: pytest.TempPathFactory, study_template: Path) -> Path:
    """A small locked study, run on the simulated backend through the CLI, scored."""
    base = tmp_path_factory.mktemp("house")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
        root = make_study(base / "study", replicates=1, template=study_template)
    return root


def _json(result: Result) -> object:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_json_on_every_data_command(scored_study: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(scored_study.parent / "home"))
    root = scored_study
    arms = _json(run("arms", root, "--json"))
    assert isinstance(arms, dict)
    assert {a["id"] for a in arms["arms"]} == set(arms_in_protocol(root))
    assert all(len(a["sha256"]) == 64 for a in arms["arms"])
    assert arms["problems"] == [] and all(c["holds"] for c in arms["claims"])

    schedule = _json(run("schedule", root, "--json"))
    assert isinstance(schedule, dict)
    assert schedule["trials"] == len(schedule["order"]) == protocol_body(root)["trials"]
    assert schedule["schedule_sha256"] == protocol_body(root)["schedule_sha256"]

    estimate = _json(run("estimate", root, "--backend", "simulated", "--json"))
    assert isinstance(estimate, dict)
    assert estimate["pending"] == estimate["trials"] == schedule["trials"]

    ran = _json(run("run", root, "--backend", "simulated", "--json"))
    assert isinstance(ran, dict)
    assert ran["simulated"] is True and ran["pending"] == 0
    assert ran["final"] == schedule["trials"] and ran["fatal"] is None

    status = _json(run("status", root, "--json"))
    assert isinstance(status, dict)
    assert sum(a["responded"] + a["given_up"] for a in status["arms"]) == schedule["trials"]

    assert run("score", root).exit_code == 0
    assert run("unblind", root).exit_code == 0
    analysed = _json(run("analyze", root, "--json"))
    assert isinstance(analysed, dict)
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        recorded = [e.body for e in log.events("analysis.result")]

    def key(r: dict[str, object]) -> tuple[object, ...]:
        return (r["id"], r["status"], r.get("verdict"), r.get("hypothesis"))

    assert [key(r) for r in analysed["results"]] == [key(r) for r in recorded]

    report = _json(run("report", root, "--json", "--figures", root.parent / "figs"))
    assert isinstance(report, dict)
    assert report["simulated"] is True and report["verification"]["ok"] is True
    assert [h["hypothesis"] for h in report["hypotheses"]] == [
        r["hypothesis"] for r in recorded if r.get("hypothesis")
    ]
    assert all(Path(f).is_file() for f in report["figures"])
    # --figures puts the figures there, and the HTML beside them by default (FIGURES/report.html)
    figs = root.parent / "figs"
    assert report["figures"] and all(Path(f).parent == figs for f in report["figures"])
    assert report["html"] == str(figs / "report.html") and (figs / "report.html").is_file()


def protocol_body(root: Path) -> dict[str, object]:
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        return next(iter(log.events("protocol.locked"))).body


def arms_in_protocol(root: Path) -> list[str]:
    arms = protocol_body(root)["arms"]
    assert isinstance(arms, dict)
    return list(arms)


def test_tables_fold_long_values_when_piped(tmp_path: Path) -> None:
    """A narrow pipe: the vkey column wraps onto more lines; no value ends in an ellipsis."""
    keys = tmp_path / "keys"
    assert run("keygen", "example.org/a-rather-long-owner-name", "--out", keys).exit_code == 0
    vkey = (keys / "example.org_a-rather-long-owner-name.vkey").read_text().strip()
    db = tmp_path / "x.db"
    key = keys / "example.org_a-rather-long-owner-name.key"
    assert run("init", db, "--origin", "example.org/x", "--key", key).exit_code == 0
    result = run("key", "list", db, env={"COLUMNS": "60"})
    assert result.exit_code == 0, result.output
    assert "…" not in result.output
    # the vkey is in the last column: glue its folded pieces back together
    pieces = [
        re.split(r"[│|]", line)[-2].strip()
        for line in result.output.splitlines()
        if line.count("│") >= 5
    ]
    assert vkey in "".join(pieces)


@pytest.mark.parametrize("value", ["bogus+key", "@/nonexistent/owner.vkey"])
def test_malformed_trusted_key_is_a_usage_error_like_python_m_verify(
    value: str, tmp_path: Path
) -> None:
    from verify.__main__ import main as verify_main

    result = run("verify", tmp_path, "--trusted-key", value)
    assert result.exit_code == 2, result.output
    assert "--trusted-key" in result.output and "Traceback" not in result.output
    with pytest.raises(SystemExit) as exited:
        verify_main([str(tmp_path), "--trusted-key", value])
    assert exited.value.code == 2
