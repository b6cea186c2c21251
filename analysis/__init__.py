"""Score blind, unblind, analyse, report, export, and load a study into pandas.

The steps after :mod:`runner` has run a study, each one call that reads the study folder and
appends to its ledger (what the ``ledger`` command does), plus :func:`load`, which reads a study
folder or an exported archive into pandas DataFrames and writes nothing. Example::

    import analysis
    import runner

    key = runner.study_owner_key("my-study")
    analysis.score_study("my-study", key)     # blind to the arm; seals once all trials are final
    analysis.unblind_study("my-study", key)   # reveal the arm codes (commit-reveal)
    analysis.analyze_study("my-study", key)   # the locked plan and decision rules
    report = analysis.build_report("my-study")           # figures and report.html
    archive = analysis.export_study("my-study", "my-study-archive", key).directory

    frames = analysis.load(archive)           # or analysis.load("my-study")
    print(frames.scores.groupby("arm")["accuracy"].mean())
    print(frames.attempts[["trial", "response_text", "output_tokens"]])

Errors: :class:`AnalysisError` (a :class:`runner.StudyError`, so a :class:`ledger.LedgerError`)
for what :func:`load` cannot read, naming the path; the other steps refuse a study that is not
ready with :class:`runner.StudyError`, naming the study and what to run first.

The package imports lazily (PEP 562): ``import analysis`` loads none of its modules (no pandas,
statsmodels or matplotlib), so the ``ledger`` command starts fast; a name is imported from its
module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger._lazy import lazy_exports

if TYPE_CHECKING:
    from analysis._analyze import (
        ITEM_COLUMNS,
        TRIAL_COLUMNS,
        AnalyzeResult,
        Dataset,
        analyze_study,
        run_analyses,
    )
    from analysis._demo import DemoResult, run_demo
    from analysis._errors import AnalysisError
    from analysis._export import ExportResult, export_study
    from analysis._frames import StudyFrames, load
    from analysis._plan import PlanError, PlanRun, plan_study
    from analysis._qr_boot import resample_means
    from analysis._report import Report, build_report
    from analysis._scoring import ScoreResult, UnblindResult, score_study, unblind_study
    from analysis._stats import CHUNK_ELEMENTS, bootstrap_diff

# Public name -> the module that defines it (imported on first use).
_EXPORTS: dict[str, str] = {
    "AnalysisError": "analysis._errors",
    # score blind, seal, unblind
    "score_study": "analysis._scoring",
    "ScoreResult": "analysis._scoring",
    "unblind_study": "analysis._scoring",
    "UnblindResult": "analysis._scoring",
    # design diagnostics before the lock (docs/planning.md)
    "plan_study": "analysis._plan",
    "PlanRun": "analysis._plan",
    "PlanError": "analysis._plan",
    # the locked analysis plan, the report, the archive
    "analyze_study": "analysis._analyze",
    "AnalyzeResult": "analysis._analyze",
    "build_report": "analysis._report",
    "Report": "analysis._report",
    "export_study": "analysis._export",
    "ExportResult": "analysis._export",
    # DataFrames of a study or an archive
    "load": "analysis._frames",
    "StudyFrames": "analysis._frames",
    # everything, offline
    "run_demo": "analysis._demo",
    "DemoResult": "analysis._demo",
    # what other packages use (make_faces.py)
    "Dataset": "analysis._analyze",
    "ITEM_COLUMNS": "analysis._analyze",
    "TRIAL_COLUMNS": "analysis._analyze",
    "run_analyses": "analysis._analyze",
    "resample_means": "analysis._qr_boot",
    "CHUNK_ELEMENTS": "analysis._stats",
    "bootstrap_diff": "analysis._stats",
}

__all__ = [
    "CHUNK_ELEMENTS",
    "ITEM_COLUMNS",
    "TRIAL_COLUMNS",
    "AnalysisError",
    "AnalyzeResult",
    "Dataset",
    "DemoResult",
    "ExportResult",
    "PlanError",
    "PlanRun",
    "Report",
    "ScoreResult",
    "StudyFrames",
    "UnblindResult",
    "analyze_study",
    "bootstrap_diff",
    "build_report",
    "export_study",
    "load",
    "plan_study",
    "resample_means",
    "run_analyses",
    "run_demo",
    "score_study",
    "unblind_study",
]

if not TYPE_CHECKING:  # type checkers read the imports above instead
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
