"""``ledger report``: figures, the self-contained HTML report, terminal tables, failures."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import make_study, science_skipped, study_key
from PIL import Image, ImageStat
from rich.console import Console

from analysis import _stats as stats
from analysis._analyze import analyze_study
from analysis._report import EXPLORATORY, Report, build_report, render_terminal
from analysis._scoring import score_study, unblind_study
from ledger import Ledger
from ledger.cli import main
from runner._backends import SimulatedBackend
from runner._execute import RunOptions, run_study
from runner._lock import StudyError, amend


class Rebuilt(NamedTuple):
    """What :func:`rebuilt` made: the study copy, the HTML written, what the command printed."""

    root: Path
    html: Path
    output: str

    def figures(self) -> list[Path]:
        """The figures the command printed it wrote, in its order."""
        return [
            Path(line.removeprefix("figure: "))
            for line in self.output.splitlines()
            if line.startswith("figure: ")
        ]


INJECTED = "injected failure: the model matrix is singular <&>"
REASON = "fixed a <typo> & clarified the README"


@pytest.fixture(scope="module")
def studies(
    tmp_path_factory: pytest.TempPathFactory, study_template: Path
) -> Iterator[dict[str, Path]]:
    """One small simulated study, analysed; a copy analysed with the model failing; a copy
    never analysed. Built once for the module (PROMPT_LEDGER_HOME private to it)."""
    base = tmp_path_factory.mktemp("report")
    key = study_key()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
        root = make_study(base / "s", replicates=3, template=study_template)
        readme = root / "README.md"
        readme.write_text(readme.read_text(encoding="utf-8") + "\nClarified.\n", "utf-8")
        amend(root, key, REASON)
        run_study(root, key, SimulatedBackend(), RunOptions(concurrency=8))
        score_study(root, key)
        unblind_study(root, key)
        unanalysed = base / "unanalysed"
        failed = base / "failed"
        shutil.copytree(root, unanalysed)
        shutil.copytree(root, failed)
        analyze_study(root, key)

        def broken(*args: object, **kwargs: object) -> None:
            raise stats.StatsError(INJECTED)

        mp.setattr(stats, "mixed_model", broken)
        analyze_study(failed, key)
        yield {"ok": root, "failed": failed, "unanalysed": unanalysed}


@pytest.fixture(scope="module")
def exported(
    studies: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, Report]]:
    """The analysed and the failed study, each exported once from a copy (the copy keeps the
    study folder's name, which the report shows): ``(archive, report)``, the report being the
    one the export rendered for the archive, left in a folder of its own as
    ``build_report(study, folder)`` writes it (``export_study(..., report_dir=...)``).
    Read-only."""
    from analysis._export import export_study

    out = {}
    for which in ("ok", "failed"):
        base = tmp_path_factory.mktemp(f"exported-{which}")
        root = base / studies[which].name
        shutil.copytree(studies[which], root)
        done = export_study(root, base / "archive", study_key(), report_dir=base / "report-out")
        assert done.report is not None
        out[which] = (base / "archive", done.report)
    return out


@pytest.fixture(scope="module")
def built_report(exported: dict[str, tuple[Path, Report]]) -> Report:
    """The report of the analysed study, built once for the module by its export (read-only)."""
    return exported["ok"][1]


@pytest.fixture(scope="module")
def built(built_report: Report) -> Path:
    """The folder :func:`built_report` wrote its figures and ``report.html`` to."""
    return built_report.html_path.parent


@pytest.fixture(scope="module")
def rebuilt(studies: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Rebuilt:
    """``ledger report COPY --html OUT/study.html`` on a copy of the analysed study (the copy
    keeps the study folder's name, which the report shows): the report built again, by the
    command line, its figures at their default place (``COPY/report``) and its HTML where
    ``--html`` says. The default place of the HTML (``FIGURES/report.html``) and ``--figures``
    are ``tests/project/test_cli_house.py``'s (``report --json --figures``)."""
    base = tmp_path_factory.mktemp("report-copy")
    root = base / studies["ok"].name
    shutil.copytree(studies["ok"], root)
    html = base / "out" / "study.html"
    result = CliRunner().invoke(main, ["report", str(root), "--html", str(html)])
    assert result.exit_code == 0, result.output
    return Rebuilt(root, html, result.output)


def _hypothesis_results(root: Path) -> list[dict[str, object]]:
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        return [e.body for e in log.events("analysis.result") if e.body["hypothesis"]]


def test_html_is_written_and_self_contained(built: Path) -> None:
    text = (built / "report.html").read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert "<script" not in text.lower()
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", text, re.I)
    assert not re.search(r"@import|url\(", text)
    sources = re.findall(r"""<img[^>]*\ssrc="([^"]*)\"""", text)
    assert len(sources) >= 5
    assert all(s.startswith("data:image/png;base64,") for s in sources)
    assert len(sources) == len(re.findall(r"<img\b", text))
    assert not re.search(r"\shref=", text)


def test_html_content(built: Path, studies: dict[str, Path]) -> None:
    text = (built / "report.html").read_text(encoding="utf-8")
    assert "SIMULATED DATA" in text
    assert text.index("SIMULATED DATA") < text.index("Verdicts of the pre-registered")
    verdicts = text.index("Verdicts of the pre-registered")
    assert verdicts < text.index("Protocol (as locked)") < text.index(EXPLORATORY)
    for r in _hypothesis_results(studies["ok"]):
        assert r["status"] == "ok"
        row = re.search(rf"<tr><td>{r['hypothesis']}</td>.*?</tr>", text)
        assert row is not None, r["hypothesis"]
        assert f">{r['verdict']}</span>" in row.group(0)
        assert str(r["decided_by"]["rule"]).replace(">", "&gt;").replace("<", "&lt;") in (
            row.group(0)
        )
    # every exploratory heading and table caption is labelled
    exploratory = text[text.index('<div class="exploratory">') :]
    for tag in ("h2", "h3", "caption"):
        for heading in re.findall(
            rf"<{tag}>(.*?)</{tag}>", exploratory[: exploratory.index("</div>")]
        ):
            assert heading.startswith(EXPLORATORY), heading
    assert text.count(EXPLORATORY) >= 8
    # protocol, deviations (escaped), data, control, verification
    assert "replicates" in text and "bootstrap_iterations" in text and "bootstrap_seed" in text
    assert "fixed a &lt;typo&gt; &amp; clarified the README" in text
    assert REASON not in text
    assert "parse rate" in text and "excluded" in text
    assert "Specificity control" in text
    assert "Verification of the ledger" in text
    for name in ("chain", "signatures", "blobs", "tree"):
        assert re.search(rf"<td>{name}</td><td><span class=\"(PASS|WARN|FAIL)\">", text), name
    assert "VERIFIED" in text


def test_figures_are_valid_nonblank_pngs(built: Path) -> None:
    names = sorted(p.name for p in built.glob("*.png"))
    expected = {
        "flow.png",
        "accuracy_by_arm.png",
        "accuracy_arm_stimulus.png",
        "forest_contrasts.png",
        "accuracy_by_row.png",
    } | {f"confusion_{a}.png" for a in "ABCDE"}
    assert set(names) == expected
    for name in names:
        path = built / name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        with Image.open(path) as im:
            im.verify()
        with Image.open(path) as im:
            assert im.width > 300 and im.height > 200
            rgb = im.convert("RGB")
            variance = ImageStat.Stat(rgb.convert("L")).var[0]
            assert variance > 100, (name, variance)
            colours = rgb.getcolors(maxcolors=1 << 20)
            assert colours is not None and len(colours) > 20, name


def test_same_data_same_png_bytes(built: Path, rebuilt: Rebuilt) -> None:
    """The command line's report of a copy of the same study and ledger: the same figure and
    HTML bytes as the export's."""
    figures = rebuilt.figures()
    assert figures
    for figure in figures:
        assert figure.read_bytes() == (built / figure.name).read_bytes(), figure.name
    assert sorted(f.name for f in figures) == sorted(p.name for p in built.glob("*.png"))
    assert rebuilt.html.read_bytes() == (built / "report.html").read_bytes()


def test_default_locations(rebuilt: Rebuilt) -> None:
    """Without ``--figures`` the figures go to ``STUDY/report``; the HTML goes to ``--html``
    (and nothing else is written there)."""
    assert rebuilt.html.is_file()
    assert all(f.parent == rebuilt.root / "report" for f in rebuilt.figures())
    assert sorted(p.name for p in (rebuilt.root / "report").iterdir()) == sorted(
        f.name for f in rebuilt.figures()
    )
    assert sorted(p.name for p in rebuilt.html.parent.iterdir()) == [rebuilt.html.name]


def test_terminal_tables(studies: dict[str, Path], built_report: Report) -> None:
    report = built_report
    buf = io.StringIO()
    render_terminal(report, Console(file=buf, width=200, color_system=None))
    out = buf.getvalue()
    assert "SIMULATED DATA" in out
    verdicts = out.index("Pre-registered verdicts")
    assert verdicts < out.index("Descriptive: glyph-level accuracy") < out.index(EXPLORATORY)
    for r in _hypothesis_results(studies["ok"]):
        assert re.search(rf"{r['hypothesis']}\s.*{r['verdict']}", out)
    assert "exploratory.errors.A" in out
    assert "ledger VERIFIED" in out


def test_failed_result_is_rendered_with_its_error(
    exported: dict[str, tuple[Path, Report]],
) -> None:
    report = exported["failed"][1]
    failed_ids = {r["id"] for r in report.failed}
    assert "model.lmm" in failed_ids and "hypothesis.H1" in failed_ids
    text = report.html_path.read_text(encoding="utf-8")
    escaped = INJECTED.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert escaped in text
    assert INJECTED not in text
    assert "Results that could not be computed" in text
    assert ">not computed</span>" in text
    # the hypotheses that do not need the model are still decided
    h3 = re.search(r"<tr><td>H3</td>.*?</tr>", text)
    assert h3 is not None
    assert "supported</span>" in h3.group(0) and "not computed" not in h3.group(0)
    assert {f.name for f in report.figures} >= {"forest_contrasts.png", "accuracy_by_arm.png"}
    buf = io.StringIO()
    render_terminal(report, Console(file=buf, width=250, color_system=None))
    assert "not computed" in buf.getvalue() and "injected failure" in buf.getvalue()


def test_report_before_analyze_is_a_clear_error(studies: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(StudyError, match=r"ledger\.db.*no analysis\.result.*ledger analyze"):
        build_report(studies["unanalysed"], tmp_path / "out")
    assert not (tmp_path / "out").exists()
    result = CliRunner().invoke(main, ["report", str(studies["unanalysed"])])
    assert result.exit_code == 1
    assert "ledger analyze" in result.output and "ledger.db" in result.output
    assert "Traceback" not in result.output


def test_cli_report(rebuilt: Rebuilt) -> None:
    """``ledger report``: the terminal tables, then every file it wrote (:func:`rebuilt`)."""
    assert f"report: {rebuilt.html}" in rebuilt.output
    assert f"figure: {rebuilt.root / 'report' / 'accuracy_by_arm.png'}" in rebuilt.output
    assert (rebuilt.root / "report" / "forest_contrasts.png").is_file()
    assert "Pre-registered verdicts" in rebuilt.output


# ------------------------------------------------------------------ headless browser


_CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-extensions",
    "--no-first-run",
    "--enable-logging=stderr",
    "--v=0",
)

#: Lines chromium writes to stderr (``--enable-logging=stderr``) for a script error, any
#: console message (the report has no script, so any is unexpected: chromium logs
#: console.error as ``INFO:CONSOLE:<line>]`` without its level) or a resource it refused.
_PAGE_ERRORS = re.compile(
    r"Uncaught|:CONSOLE[:(]|net::ERR_|Failed to load|"
    r"Not allowed to load local resource"
)


def _chromium(chromium: str, page: Path, profile: Path, *extra: str) -> str:
    """Run headless chromium on ``page``; fail on a non-zero exit or any page error line."""
    cmd = [
        chromium,
        *_CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        *extra,
        page.resolve().as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if _PAGE_ERRORS.search(line)]
    assert errors == [], "\n".join(errors)
    return proc.stdout


def _screenshot(chromium: str, page: Path, out: Path, profile: Path) -> None:
    _chromium(chromium, page, profile, f"--screenshot={out}", "--window-size=1280,8000")
    assert out.is_file() and out.stat().st_size > 0


def _coloured_pixels(path: Path) -> int:
    """Pixels clearly not grey (max - min channel > 40): figure colours, not text."""
    with Image.open(path) as im:
        pixels = np.asarray(im.convert("RGB"), dtype=np.int16)
    return int(((pixels.max(axis=2) - pixels.min(axis=2)) > 40).sum())


@pytest.mark.browser  # chromium: .ci/run runs it with the slow set (-m "slow or browser")
def test_browser_renders_the_figures(built: Path, tmp_path: Path) -> None:
    # CI (.ci/run) installs chromium when it is missing; skip only where it is absent.
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium not installed")
    page = built / "report.html"
    bare = tmp_path / "bare.html"
    bare.write_text(re.sub(r"<img\b[^>]*>", "", page.read_text(encoding="utf-8")), "utf-8")
    with_figures, without = tmp_path / "with.png", tmp_path / "without.png"
    _screenshot(chromium, page, with_figures, tmp_path / "profile1")
    _screenshot(chromium, bare, without, tmp_path / "profile2")
    with Image.open(with_figures) as im:
        assert im.size == (1280, 8000)
    coloured, baseline = _coloured_pixels(with_figures), _coloured_pixels(without)
    shutil.copy(with_figures, built.parent / "screenshot.png")  # for a human to look at
    assert coloured > 3 * baseline + 50_000, (coloured, baseline)
    # the loaded DOM: every figure is an <img> with an embedded PNG data: URL, nothing external
    dom = _chromium(chromium, page, tmp_path / "profile3", "--dump-dom")
    images = re.findall(r"<img\b[^>]*>", dom)
    sources = [re.search(r'src="([^"]*)"', tag) for tag in images]
    expected = len(re.findall(r"<img\b", page.read_text(encoding="utf-8")))
    assert expected >= 5 and len(images) == expected, (len(images), expected)
    assert all(
        m is not None and m.group(1).startswith("data:image/png;base64,iVBORw0KGgo")
        for m in sources
    )
    assert "</html>" in dom and "Verdicts of the pre-registered hypotheses" in dom


@pytest.mark.parametrize("which", ["ok", "failed"])
def test_the_verifier_reads_the_report_as_written(
    exported: dict[str, tuple[Path, Report]], which: str
) -> None:
    """The verifier's ``report`` check re-derives every table of report.html from the events;
    it agrees with the writer, also on an amendment and on results that could not be computed."""
    from verify import Status, verify_archive

    archive, written = exported[which]
    assert (archive / "analysis" / "report.html").read_bytes() == written.html_path.read_bytes()
    with science_skipped():  # only the report and layout checks are read
        report = verify_archive(archive)
    check = report.get("report")
    assert check is not None and check.status is Status.PASS, check
    layout = report.get("layout")
    assert layout is not None and layout.status is Status.PASS, layout
