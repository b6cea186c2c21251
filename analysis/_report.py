"""``ledger report``: figures, a self-contained HTML report and terminal tables of a study.

Everything shown is read back from the study ledger: the ``analysis.result`` events (and the
dataset blobs of the first one), ``protocol.locked``, ``protocol.amended`` (the deviations) and
``run.started`` (which backend produced the data; simulated data are flagged prominently). The
report recomputes no statistic except the Wilson intervals of the per-row figure, whose counts
come from the recorded results. The ledger is also verified (:func:`verify.verify_ledger_file`)
and the outcome of every check is listed.

Figures are PNGs drawn with matplotlib's Agg canvas at a fixed size and dpi, without a
``Software`` tag or timestamps, so the same data give the same bytes on the same machine. The
HTML embeds them as ``data:`` URIs and uses inline CSS only: one file, no network, no scripts.
Results labelled ``exploratory`` are marked "Exploratory (not pre-registered)" wherever they
appear.
"""

from __future__ import annotations

import base64
import csv
import functools
import html
import io
import math
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from rich.console import Console
from rich.markup import escape

from analysis import _flow as trial_flow
from analysis import _stats as stats
from analysis._identical import IDENTICAL_ID, identical_banner
from analysis._parse import ORIENTATIONS
from analysis._plan_facts import TUMBLING_E, labels, trial_models
from analysis._result_text import NOT_APPLICABLE, verdict_caution
from analysis._result_text import estimate_text as _estimate_text
from analysis._result_text import not_applicable_text as _not_applicable
from analysis._result_text import p_text as _p_text
from analysis._result_text import rule_text as _rule_text
from analysis.statistics import MIXED_MODEL, is_mixed_model, kind_of
from analysis.statistics._base import difference_effect
from analysis.statistics._format import contrast as _contrast
from analysis.statistics._format import fmt as _fmt
from analysis.statistics._format import num as _num
from analysis.statistics._format import p as _p
from analysis.statistics._format import pct as _pct
from analysis.statistics._format import pp as _pp
from ledger import Ledger, PostgresLocation, RemoteLocation, write_files
from ledger.cliutil import table
from runner import StudyError, ledger_path, protocol_event, session_notice
from verify import Report as VerificationReport
from verify import Status, verify_path

matplotlib.use("Agg")  # no display, ever; figures are drawn on FigureCanvasAgg directly

__all__ = ["EXPLORATORY", "FigureFile", "Report", "build_report", "render_html", "render_terminal"]

EXPLORATORY = "Exploratory (not pre-registered)"
"""The label every exploratory heading, caption and table carries."""

DPI = 110
LABELLED_STIMULI = 40
"""Up to this many stimuli the heatmap has a labelled column each; beyond, a fixed width."""
ROWS = tuple(range(1, 12))
OTHER_LABEL = "other/none"
_RC: Any = {  # fixed style, whatever the user's matplotlibrc says
    "font.family": "DejaVu Sans",
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.labelsize": 9.0,
    "axes.unicode_minus": True,
    "path.simplify": True,
    "image.interpolation": "nearest",
    "savefig.facecolor": "white",
    "figure.facecolor": "white",
    "svg.hashsalt": "prompt-ledger",
}
_PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
MODEL_FIELDS = ("model", "provider", "id", "max_tokens", "temperature", "top_p", "top_k", "stop")
"""The columns of the protocol's models table (a study with ``[models]``)."""
_VERDICT_COLOURS = {"supported": "#1a7f37", "not supported": "#57606a", "not computed": "#cf222e"}


# ----------------------------------------------------------------------------- data


@dataclass(frozen=True)
class FigureFile:
    """One written figure: file ``name`` in the output folder, with its title and caption."""

    name: str
    title: str
    caption: str
    label: str
    path: Path
    png: bytes


@dataclass
class Report:
    """What :func:`build_report` read and wrote."""

    root: Path
    ledger: Path | PostgresLocation | RemoteLocation
    out_dir: Path
    html_path: Path
    protocol: dict[str, Any]
    results: list[dict[str, Any]]
    amendments: list[dict[str, Any]]
    runs: list[dict[str, Any]]
    verification: VerificationReport
    figures: list[FigureFile] = field(default_factory=list)
    posthoc: list[dict[str, Any]] = field(default_factory=list)
    trials: list[dict[str, str]] = field(default_factory=list)
    flow: trial_flow.Flow | None = None
    """The CONSORT-style trial flow (``docs/reporting.md`` §1)."""
    distribution: list[list[str]] | None = None
    """The trial-level accuracy distribution's rows (:func:`trial_distribution_csv`); when None,
    computed from ``trials`` (rows of the analysis dataset's ``trials.csv``)."""
    """The ``analysis.posthoc`` bodies (with ``seq``): declared after unblinding, no verdict."""

    @property
    def simulated(self) -> bool:
        """True when any run session used the offline simulation (``simulated: true``)."""
        return any(run.get("simulated") for run in self.runs)

    @property
    def tumbling(self) -> bool:
        """True for a tumbling-E study (items are a chart's glyphs, with rows)."""
        return bool((self.protocol.get("response") or {}).get("parser", TUMBLING_E) == TUMBLING_E)

    @property
    def chance(self) -> float | None:
        """Accuracy of a uniform guess among the parser's labels (None for free text)."""
        found = labels(self.protocol)
        return 1 / len(found) if found else None

    @property
    def arms(self) -> list[str]:
        """The arms of the locked protocol, sorted."""
        return sorted(self.protocol.get("arms", {}))

    @property
    def models(self) -> list[str]:
        """The models of a ``[models]`` study in declaration order; empty for ``[model]``."""
        declared = self.protocol.get("models")
        if not isinstance(declared, dict):
            return []
        order = self.protocol.get("model_order")
        names = [str(m) for m in order] if isinstance(order, list) else sorted(declared)
        used = trial_models(self.protocol, tuple(names))
        return [n for n in names if n in used]

    def result(self, result_id: str) -> dict[str, Any] | None:
        """The result body with this id, or None when it was not recorded."""
        return next((r for r in self.results if r["id"] == result_id), None)

    def by_label(self, label: str) -> list[dict[str, Any]]:
        """Results with this label (``pre-registered``, ``descriptive``, ``exploratory``)."""
        return [r for r in self.results if r.get("label") == label]

    @property
    def hypotheses(self) -> list[dict[str, Any]]:
        """The results of the pre-registered hypotheses, in recorded order."""
        return [r for r in self.results if r.get("hypothesis")]

    @property
    def failed(self) -> list[dict[str, Any]]:
        """Every result that could not be computed."""
        return [r for r in self.results if r.get("status") == "failed"]


def _shown(root: Path) -> str:
    """The study as the report names it: its folder's name, never an absolute path.

    The report is archived; an absolute path would leak the machine's layout and make the
    same study export different bytes from different folders, and the engine that stores the
    ledger (``ledger.db`` or a PostgreSQL ``ledger.store``) is not named either: the same study
    exports the same bytes from both (``docs/storage.md``).
    """
    return root.name or "."


STORE_CHECK = "file"
"""The verifier's check of the container (a SQLite file, a PostgreSQL schema): engine-specific
in its detail, so the report words a pass the same for both engines."""


def _check_row(check: Any) -> tuple[str, str, str]:
    """(name, where, detail) of one verifier check as the report shows it."""
    where = check.where or ("" if check.seq is None else f"seq {check.seq}")
    if check.name == STORE_CHECK:
        if check.status.value == "PASS":
            return check.name, "", "a PROMPT ledger of a schema version this verifier knows"
        return check.name, where, check.reason
    return check.name, where, check.reason


def _verify(path: Path | PostgresLocation | RemoteLocation) -> Any:
    """The independent verifier's report on the ledger at ``path``.

    A ledger behind ``ledger serve`` is fetched into a temporary SQLite copy first (every
    envelope, signature, blob and checkpoint the service serves), and the verifier reads that.
    """
    if not isinstance(path, RemoteLocation):
        return verify_path(str(path))
    from ledger import RemoteLedger

    with tempfile.TemporaryDirectory(prefix="prompt-ledger-report-") as tmp:
        with Ledger.open(path, readonly=True) as log:
            assert isinstance(log, RemoteLedger)
            copy = log.copy_to(Path(tmp) / "ledger.db")
        return verify_path(str(copy))


DISTRIBUTION_COLUMNS = ("arm", "accuracy", "control", "excluded")
"""The columns of the dataset's ``trials.csv`` the trial-level distribution reads."""


def trial_distribution_csv(trials_csv: bytes, arms: list[str]) -> list[list[str]] | None:
    """:func:`trial_distribution` of the dataset's ``trials.csv``, folded row by row.

    Per arm only the count, the running sum (in row order, so the mean is the same float) and
    the ten bins are kept, never the rows. None when the table has no row.
    """
    reader = csv.reader(io.StringIO(trials_csv.decode("utf-8")))
    where = {name: i for i, name in enumerate(next(reader, []))}
    folded: dict[str, list[Any]] = {arm: [0, 0, [0] * 10] for arm in arms}
    rows = 0
    if all(name in where for name in DISTRIBUTION_COLUMNS):
        arm_at, accuracy, control, excluded = (where[n] for n in DISTRIBUTION_COLUMNS)
        for r in reader:
            rows += 1
            found = folded.get(r[arm_at])
            if found is None or r[control] != "False" or r[excluded] != "False":
                continue
            value = float(r[accuracy])
            found[0] += 1
            found[1] += value
            found[2][min(9, max(0, int(value * 10)))] += 1
    else:
        rows = sum(1 for _ in reader)
    if not rows:
        return None
    return [
        [arm, str(n), _pct(total / n) if n else "–", *(str(b) for b in bins)]
        for arm, (n, total, bins) in folded.items()
    ]


def _load(
    root: Path,
    out_dir: Path,
    html_path: Path,
    flow: trial_flow.Flow | None = None,
    verification: Callable[[], VerificationReport] | None = None,
) -> Report:
    path = ledger_path(root)
    if not path.is_file():
        raise StudyError(f"{path}: no study ledger here; run 'ledger new' and 'ledger lock'")
    with Ledger.open(path, readonly=True) as log:
        protocol = protocol_event(log)
        if protocol is None:
            raise StudyError(f"{path}: the study is not locked yet (run 'ledger lock')")
        events = list(log.events("analysis.result"))
        if not events:
            raise StudyError(
                f"{path}: no analysis.result events; nothing to report yet. "
                f"Run 'ledger analyze {root}' first"
            )
        results = [{"seq": e.seq, **e.body} for e in events]
        amendments = [
            {"seq": e.seq, "time": e.time, **e.body} for e in log.events("protocol.amended")
        ]
        runs = [{"seq": e.seq, **e.body} for e in log.events("run.started")]
        body = dict(protocol.body)
        body_arms = list(body.get("arms", {}))
        posthoc = [{"seq": e.seq, **e.body} for e in log.events("analysis.posthoc")]
        blob = events[0].blobs.get("trials_csv")
        tumbling = (body.get("response") or {}).get("parser", TUMBLING_E) == TUMBLING_E
        # the distribution is a tumbling-E study's section only (_section_distribution)
        distribution = (
            trial_distribution_csv(log.blob(blob), sorted(body_arms)) if blob and tumbling else None
        )
        if flow is None:
            flow = trial_flow.study_flow(log)
    checked = verification() if verification is not None else _verify(path)
    return Report(
        root,
        path,
        out_dir,
        html_path,
        body,
        results,
        amendments,
        runs,
        checked,
        posthoc=posthoc,
        distribution=distribution,
        flow=flow,
    )


def build_report(
    root: Path | str,
    out_dir: Path | str | None = None,
    *,
    html_path: Path | str | None = None,
    flow: trial_flow.Flow | None = None,
    verification: Callable[[], VerificationReport] | None = None,
) -> Report:
    """Read the study ledger under ``root`` and write the figures and the HTML report.

    Figures go to ``out_dir`` (default ``root/report``); the HTML to ``html_path`` (default
    ``out_dir/report.html``). ``flow``, when given, is the study's trial flow computed already
    (``ledger export`` reads the events once for it and the archive's tables).
    ``verification``, when given, gives the verifier's report of the study's ledger instead of
    a verification made here (``ledger export`` runs it in a child process beside its own pass:
    :class:`analysis._background.BackgroundVerification`).
    Raises :class:`runner._lock.StudyError` when the study has no
    ledger or has not been analysed yet. A failed result is reported with its error.
    """
    root = Path(root)
    out = Path(out_dir) if out_dir is not None else root / "report"
    html_file = Path(html_path) if html_path is not None else out / "report.html"
    report = _load(root, out, html_file, flow, verification)
    for name, title, caption, label, draw in _figure_specs(report):
        png = _render_png(draw)
        if png is None:
            continue
        report.figures.append(FigureFile(name, title, caption, label, out / name, png))
    # Every file is rendered first and then written all together or not at all.
    files: dict[Path, bytes | str] = {figure.path: figure.png for figure in report.figures}
    files[html_file] = render_html(report)
    write_files(files)
    return report


# -------------------------------------------------------------------------- formatting


def _hypothesis_plan(report: Report, hypothesis: str | None) -> dict[str, Any]:
    """The registered hypothesis of a result (``H1``, or ``H1@<model>`` for one model's)."""
    hyps = report.protocol.get("hypotheses", [])
    for h in hyps:
        if h.get("id") == hypothesis:
            return dict(h)
    base = str(hypothesis).rsplit("@", 1)[0] if hypothesis and "@" in hypothesis else None
    for h in hyps:
        if base is not None and h.get("id") == base:
            return dict(h)
    return {}


def _contrast_text(report: Report, result: dict[str, Any]) -> str:
    plan = _hypothesis_plan(report, result.get("hypothesis"))
    kind = kind_of(plan)
    if plan.get("arm") and kind is not None and not kind.arm_compares_variants:
        return f"arm {plan['arm']}"  # a statistic of one arm, no variants
    if plan.get("arm"):  # a seed-002 test of one arm: its variants (orders)
        return f"arm {plan['arm']}: " + " vs ".join(plan.get("variants") or [])
    contrast = plan.get("contrast") or []
    if len(contrast) != 2:
        return ""
    sides = plan.get("sides") or "two-sided"
    return f"{contrast[0]} vs {contrast[1]} ({sides})"


# ---------------------------------------------------------------------------- figures

DrawFn = Callable[[], Figure | None]


def _render_png(draw: DrawFn) -> bytes | None:
    with matplotlib.rc_context(_RC):
        fig = draw()
        if fig is None:
            return None
        FigureCanvasAgg(fig)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _arm_colour(report: Report, arm: str) -> str:
    arms = report.arms
    return _PALETTE[arms.index(arm) % len(_PALETTE)] if arm in arms else "#333333"


def _note_figure(title: str, text: str) -> Figure:
    fig = Figure(figsize=(7.0, 1.6))
    fig.text(0.5, 0.62, title, ha="center", va="center", fontsize=11, weight="bold")
    fig.text(0.5, 0.3, text, ha="center", va="center", fontsize=9, color="#cf222e", wrap=True)
    return fig


def _accuracy_bar(ax: Any, i: int, acc: dict[str, Any], report: Report, arm: str) -> None:
    """One arm's accuracy bar with its Wilson interval, value and n."""
    est, lower, upper = (_num(acc.get(k)) for k in ("estimate", "lower", "upper"))
    if est is None:
        ax.text(i, 0.05, "no parseable\nresponses", ha="center", fontsize=8, color="#cf222e")
        return
    colour = _arm_colour(report, arm)
    ax.bar(i, est * 100, color=colour, alpha=0.75, width=0.6)
    if lower is not None and upper is not None:
        ax.errorbar(
            i,
            est * 100,
            yerr=[[(est - lower) * 100], [(upper - est) * 100]],
            color="black",
            capsize=5,
            linewidth=1.2,
        )
    ax.text(i, min(est * 100 + 3, 103), f"{est * 100:.1f}%", ha="center", fontsize=8)
    ax.text(i, 2, f"n={acc.get('n', '?')}", ha="center", fontsize=7, color="white")


def _fig_accuracy_by_arm(report: Report) -> Figure:
    result = report.result("descriptive.arms")
    title = (
        "Glyph-level accuracy by arm (Wilson 95% CI)"
        if report.tumbling
        else ("Accuracy by arm (Wilson 95% CI)")
    )
    if result is None or result.get("status") != "ok":
        return _note_figure(title, f"not computed: {(result or {}).get('error', 'no result')}")
    fig = Figure(figsize=(7.0, 4.0), layout="constrained")
    _draw_accuracy_by_arm(fig.add_subplot(), report, result.get("values") or {}, title)
    return fig


def _draw_accuracy_by_arm(ax: Any, report: Report, values: dict[str, Any], title: str) -> None:
    """The bars of :func:`_fig_accuracy_by_arm`, the arms' roles and the chance line."""
    arms = [a for a in report.arms if a in values] or sorted(values)
    roles = report.protocol.get("arms", {})
    for i, arm in enumerate(arms):
        _accuracy_bar(ax, i, (values.get(arm) or {}).get("accuracy") or {}, report, arm)
    ax.set_xticks(range(len(arms)))
    ax.set_xticklabels([f"{a}\n{(roles.get(a) or {}).get('role', '')}" for a in arms])
    ax.set_ylim(0, 108)
    ax.set_ylabel(
        "accuracy (% of glyphs correct)" if report.tumbling else "accuracy (% of trials correct)"
    )
    ax.set_title(title)
    if report.chance is not None:
        chance = report.chance * 100
        ax.axhline(chance, color="#999999", linestyle=":", linewidth=1)
        ax.text(
            -0.45, chance + 1, f"chance ({chance:.0f}%)", ha="left", fontsize=7, color="#444444"
        )
    ax.grid(axis="y", alpha=0.3)


def _accuracy_grid(
    cells: list[dict[str, Any]],
) -> tuple[list[str], list[str], list[list[float]]]:
    """(arms, stimuli, accuracy in % per arm row and stimulus column, NaN where missing)."""
    arms = sorted({str(c["arm"]) for c in cells})
    stimuli = sorted({str(c["stimulus"]) for c in cells})
    grid = [[math.nan] * len(stimuli) for _ in arms]
    column = {stimulus: j for j, stimulus in enumerate(stimuli)}
    for c in cells:
        est = _num(c.get("estimate"))
        grid[arms.index(str(c["arm"]))][column[str(c["stimulus"])]] = (
            math.nan if est is None else est * 100
        )
    return arms, stimuli, grid


def _grid_labels(ax: Any, grid: list[list[float]]) -> None:
    """Each heatmap cell's accuracy (``–`` where missing), dark text on the light cells."""
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            text = "–" if math.isnan(value) else f"{value:.0f}%"
            colour = "black" if not math.isnan(value) and value > 60 else "white"
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color=colour)


def _fig_heatmap(report: Report) -> Figure:
    result = report.result("descriptive.arm_stimulus")
    title = "Accuracy by arm and stimulus"
    if result is None or result.get("status") != "ok" or not result.get("values"):
        return _note_figure(title, f"not computed: {(result or {}).get('error', 'no result')}")
    arms, stimuli, grid = _accuracy_grid(list((result.get("values") or {}).values()))
    labelled = len(stimuli) <= LABELLED_STIMULI
    width = max(6.0, 1.15 * len(stimuli) + 2.0) if labelled else 16.0
    fig = Figure(figsize=(width, 0.6 * len(arms) + 2.2), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(grid, cmap="viridis", vmin=0, vmax=100, aspect="auto")
    if labelled:
        _grid_labels(ax, grid)
        ax.set_xticks(range(len(stimuli)))
        ax.set_xticklabels(stimuli, rotation=30, ha="right")
    else:  # an item file of hundreds of items: one thin column each, no labels
        ax.set_xticks([])
    ax.set_yticks(range(len(arms)))
    ax.set_yticklabels(arms)
    ax.set_xlabel("stimulus" if labelled else f"stimulus ({len(stimuli)}, in id order)")
    ax.set_ylabel("arm")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label="accuracy (%)")
    return fig


def _confusion_rows(confusion: dict[str, Any]) -> tuple[list[str], list[list[int]]]:
    """(truth labels, per truth row the answer counts then the other answers) of a matrix."""
    labels = [str(x) for x in confusion.get("labels", ORIENTATIONS)]
    counts = confusion.get("counts") or [[0] * len(labels) for _ in labels]
    other = confusion.get("other") or [0] * len(labels)
    return labels, [[int(c) for c in row] + [int(o)] for row, o in zip(counts, other, strict=False)]


def _count_cells(ax: Any, rows: list[list[int]], shares: list[list[float]]) -> None:
    """Each cell's count and row share, white on the dark cells."""
    for i, row in enumerate(rows):
        for j, count in enumerate(row):
            colour = "white" if shares[i][j] > 0.55 else "black"
            ax.text(
                j,
                i,
                f"{count}\n{shares[i][j] * 100:.0f}%",
                ha="center",
                va="center",
                fontsize=8,
                color=colour,
            )


def _fig_confusion(report: Report, arm: str) -> Figure:
    result = report.result(f"exploratory.errors.{arm}")
    title = f"{EXPLORATORY}: confusion matrix, arm {arm}"
    if result is None or result.get("status") != "ok":
        return _note_figure(title, f"not computed: {(result or {}).get('error', 'no result')}")
    confusion = (result.get("values") or {}).get("confusion") or {}
    labels, rows = _confusion_rows(confusion)
    shares = [[c / max(sum(row), 1) for c in row] for row in rows]
    fig = Figure(figsize=(5.6, 4.4), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(shares, cmap="Blues", vmin=0, vmax=1, aspect="auto")
    _count_cells(ax, rows, shares)
    columns = [*labels, OTHER_LABEL]
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels(columns)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels)
    ax.set_xlabel("answer")
    ax.set_ylabel("truth")
    ax.set_title(
        f"Confusion matrix, arm {arm}  (accuracy {_pct(confusion.get('accuracy'))}, "
        f"n={confusion.get('n', '?')})\n{EXPLORATORY}",
        fontsize=9,
    )
    fig.colorbar(image, ax=ax, label="share of the truth row")
    return fig


def accuracy_difference(result: dict[str, Any]) -> bool:
    """Whether a hypothesis result is a difference in accuracy the forest plot draws.

    Not a kind whose estimate is something else (a rate, a bias difference, a log odds ratio:
    :attr:`analysis.statistics.Statistic.accuracy_difference`; the seed-002 table has them),
    nor a one-arm ``statistic`` other than ``difference``.
    """
    kind = kind_of(result)
    return (kind is None or kind.accuracy_difference) and (result.get("values") or {}).get(
        "statistic"
    ) in (None, "difference")


def _forest_extent(hyps: list[dict[str, Any]]) -> list[float]:
    """Every x the forest plot must show: 0, estimates, bounds, thresholds, kinds' marks."""
    xs: list[float] = [0.0]
    for r in hyps:
        v = r.get("values") or {}
        est, lower, upper = _contrast(v)
        xs += [x * 100 for x in (est, lower, upper) if x is not None]
        kind = kind_of(r)
        if kind is not None:
            xs += kind.forest_span(v)
        min_pp = _num(v.get("min_difference_pp"))
        if min_pp is not None:
            xs.append(min_pp)
    return xs


def _forest_note(ax: Any, y: float, text: str, **style: Any) -> None:
    ax.text(0, y, text, va="center", ha="center", fontsize=8, **style)


def _forest_interval(
    ax: Any, y: float, r: dict[str, Any], colour: str, limits: tuple[float, float, float]
) -> None:
    """A difference and its interval; an open side (one-sided) is an arrow to the edge."""
    left, right, span = limits
    est, lower, upper = _contrast(r.get("values") or {})
    if est is None:
        _forest_note(ax, y, f"no difference estimate (test {r.get('test')})")
        return
    lo = left if lower is None else lower * 100
    hi = right if upper is None else upper * 100
    ax.plot([lo, hi], [y, y], color=colour, lw=2)
    arrows = ((upper, right, right - 0.04 * span), (lower, left, left + 0.04 * span))
    for bound, edge, start in arrows:
        if bound is None:
            ax.annotate(
                "",
                xy=(edge, y),
                xytext=(start, y),
                arrowprops={"arrowstyle": "->", "color": colour},
            )
    ax.plot([est * 100], [y], marker="o", color=colour, markersize=8)
    ax.text(est * 100, y + 0.22, f"{est * 100:+.1f}", fontsize=7, ha="center")


def _forest_row(
    ax: Any, y: float, r: dict[str, Any], limits: tuple[float, float, float], threshold: bool
) -> bool:
    """One hypothesis's row; returns whether the threshold line (and its legend) is drawn."""
    v = r.get("values") or {}
    verdict = str(r.get("verdict") or "–")
    colour = _VERDICT_COLOURS.get(verdict, "#333333")
    kind = kind_of(r)
    if r.get("status") == "failed":
        _forest_note(
            ax,
            y,
            f"not computed: {str(r.get('error') or '')[:70]}",
            color=colour,
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.5},
        )
    elif kind is not None and kind.forest_marks is not None:
        kind.forest_marks(ax, y, v, colour)
    else:
        _forest_interval(ax, y, r, colour, limits)
    min_pp = _num(v.get("min_difference_pp"))
    if min_pp is not None:
        ax.plot(
            [min_pp, min_pp],
            [y - 0.35, y + 0.35],
            color="#cf222e",
            linestyle="--",
            lw=1.5,
            label=None if threshold else "decision threshold (min. pp)",
        )
        threshold = True
    ax.text(
        1.01,
        y,
        verdict.upper(),
        transform=ax.get_yaxis_transform(),
        va="center",
        fontsize=8,
        color=colour,
        weight="bold",
    )
    return threshold


def _fig_forest(report: Report) -> Figure:
    hyps = [r for r in report.hypotheses if accuracy_difference(r)]
    title = "Pre-registered contrasts (difference in accuracy, a − b)"
    if not hyps:
        return _note_figure(
            title,
            "no pre-registered difference in accuracy was recorded"
            + (
                " (the registered statistics are tabled under seed 002's statistics)"
                if report.hypotheses
                else ""
            ),
        )
    fig = Figure(figsize=(8.6, 0.75 * len(hyps) + 1.8), layout="constrained")
    ax = fig.add_subplot()
    xs = _forest_extent(hyps)
    span = max(xs) - min(xs) or 10.0
    left, right = min(xs) - 0.12 * span, max(xs) + 0.12 * span
    ax.set_xlim(left, right)
    ax.axvline(0, color="#555555", linewidth=1)
    threshold_drawn = False
    for i, r in enumerate(hyps):
        threshold_drawn = _forest_row(
            ax, len(hyps) - 1 - i, r, (left, right, span), threshold_drawn
        )
    labels = [f"{r.get('hypothesis')}: {_contrast_text(report, r)}" for r in hyps]
    ax.set_yticks(range(len(hyps)))
    ax.set_yticklabels(list(reversed(labels)))
    ax.set_ylim(-0.7, len(hyps) - 0.3)
    ax.set_xlabel("difference in accuracy (percentage points); arrow = one-sided CI")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    if threshold_drawn:
        ax.legend(loc="lower right", fontsize=7)
    return fig


def _fig_rows(report: Report) -> Figure:
    title = f"{EXPLORATORY}: accuracy by chart row (Wilson 95% CI)"
    fig = Figure(figsize=(8.0, 4.4), layout="constrained")
    ax = fig.add_subplot()
    drawn = 0
    missing = []
    for k, arm in enumerate(report.arms):
        result = report.result(f"exploratory.errors.{arm}")
        by_row = ((result or {}).get("values") or {}).get("accuracy_by_row") or {}
        if not result or result.get("status") != "ok" or not by_row:
            missing.append(arm)
            continue
        xs, ys, los, his = [], [], [], []
        for row in ROWS:
            cell = by_row.get(str(row))
            if not cell or not cell.get("n"):
                continue
            w = stats.wilson(int(cell["correct"]), int(cell["n"]))
            offset = (k - (len(report.arms) - 1) / 2) * 0.06
            xs.append(row + offset)
            ys.append(w.estimate * 100)
            los.append((w.estimate - w.lower) * 100)
            his.append((w.upper - w.estimate) * 100)
        ax.errorbar(
            xs,
            ys,
            yerr=[los, his],
            marker="o",
            markersize=4,
            capsize=2,
            lw=1.3,
            color=_arm_colour(report, arm),
            label=f"arm {arm}",
        )
        drawn += 1
    if missing:
        ax.text(
            0.01,
            0.02,
            f"not computed for arm(s) {', '.join(missing)}",
            transform=ax.transAxes,
            fontsize=8,
            color="#cf222e",
        )
    ax.set_xticks(list(ROWS))
    ax.set_xlim(0.5, 11.5)
    ax.set_ylim(0, 105)
    ax.set_xlabel("chart row (1 = largest optotypes)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(loc="lower left", fontsize=8, ncol=min(drawn, 5))
    return fig


def _figure_specs(report: Report) -> list[tuple[str, str, str, str, DrawFn]]:
    specs: list[tuple[str, str, str, str, DrawFn]] = [
        (FLOW_FIGURE, FLOW_TITLE, FLOW_CAPTION, "descriptive", lambda: _fig_flow(report)),
        (
            "accuracy_by_arm.png",
            "Accuracy by arm",
            "Glyph-level accuracy of each arm over the analysable trials, with Wilson 95% "
            "confidence intervals (descriptive).",
            "descriptive",
            lambda: _fig_accuracy_by_arm(report),
        ),
        (
            "accuracy_arm_stimulus.png",
            "Accuracy by arm and stimulus",
            "Glyph-level accuracy in each arm × stimulus cell (descriptive).",
            "descriptive",
            lambda: _fig_heatmap(report),
        ),
        (
            "forest_contrasts.png",
            "Pre-registered contrasts",
            "Estimate and confidence interval of each pre-registered contrast in percentage points "
            "(a one-sided interval runs to the edge as an arrow); red dashes mark a pre-registered "
            "minimum difference; the verdict is at the right. Equivalence tests show the largest "
            "per-stimulus |difference| against the ±margin band.",
            "pre-registered",
            lambda: _fig_forest(report),
        ),
        (
            "accuracy_by_row.png",
            f"{EXPLORATORY}: accuracy by chart row",
            f"{EXPLORATORY}. Accuracy by chart row (1–11) for each arm, Wilson 95% CIs.",
            "exploratory",
            lambda: _fig_rows(report),
        ),
    ]
    if not report.tumbling:  # single answers: no glyphs, no rows
        specs[1] = (
            specs[1][0],
            specs[1][1],
            "Accuracy of each arm over the analysable trials "
            "(one answer each), with Wilson 95% confidence intervals (descriptive).",
            specs[1][3],
            specs[1][4],
        )
        specs[2] = (
            specs[2][0],
            specs[2][1],
            "Accuracy in each arm × stimulus cell (descriptive).",
            specs[2][3],
            specs[2][4],
        )
        specs.pop()
    if labels(report.protocol) is None:  # free text: no confusion matrix
        return specs
    other = (
        "an orientation"
        if report.tumbling
        or (report.protocol.get("response") or {}).get("parser") == "orientation-word"
        else "one of the parser's labels"
    )
    for arm in report.arms:
        specs.append(
            (
                f"confusion_{_safe(arm)}.png",
                f"{EXPLORATORY}: confusion matrix, arm {arm}",
                f"{EXPLORATORY}. Truth (rows) × answer (columns) for arm {arm}, counts and share "
                f"of each truth row; '{OTHER_LABEL}' counts answers that are not {other}.",
                "exploratory",
                functools.partial(_fig_confusion, report, arm),
            )
        )
    return specs


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)


FLOW_FIGURE = "flow.png"
FLOW_TITLE = "Trial flow (CONSORT-style)"
FLOW_CAPTION = (
    "Every scheduled trial from the locked schedule to the registered analysis, "
    "counted from the signed events (docs/reporting.md §1 of the tool); the same "
    "diagram is analysis/figures/flow.svg and its numbers analysis/tables/flow.csv."
)


def _fig_flow(report: Report) -> Figure | None:
    return None if report.flow is None else trial_flow.flow_figure(report.flow, DPI)


def _section_flow(report: Report) -> str:
    """The trial flow: its diagram and its table per arm (``docs/reporting.md`` §1)."""
    if report.flow is None:
        return ""
    return (
        f"<h2>{_e(FLOW_TITLE)}</h2>"
        + _figure_html(report, FLOW_FIGURE)
        + _table(
            trial_flow.TABLE_CAPTION,
            trial_flow.TABLE_HEADER,
            trial_flow.flow_table_rows(report.flow),
            numeric=tuple(range(1, len(trial_flow.TABLE_HEADER))),
        )
    )


# ------------------------------------------------------------------------------- HTML

_CSS = """
body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:0 auto;
max-width:1180px;padding:1.2em 2em;color:#1f2328;line-height:1.45;background:#fff}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:2px solid #d0d7de;padding-bottom:.2em;
margin-top:1.8em}h3{margin-top:1.4em}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.9em;width:100%}
caption{text-align:left;font-weight:600;padding:.3em 0;color:#24292f}
th,td{border:1px solid #d0d7de;padding:.3em .55em;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
.banner{padding:1em 1.2em;border-radius:6px;margin:1em 0;font-size:1.05em}
.simulated{background:#fff1cc;border:3px solid #bf8700;color:#4d2d00;font-weight:600}
.failed{background:#ffebe9;border:2px solid #cf222e;color:#82071e}
.ok{background:#dafbe1;border:1px solid #1a7f37}
.verdict{font-weight:700}.v-supported{color:#1a7f37}.v-not-supported{color:#57606a}
.v-not-computed{color:#cf222e}
.PASS{color:#1a7f37;font-weight:700}.FAIL{color:#cf222e;font-weight:700}
.WARN{color:#9a6700;font-weight:700}
.exploratory{border-left:6px solid #8250df;padding-left:1em;background:#fbf8ff}
.tag{display:inline-block;font-size:.75em;padding:.1em .5em;border-radius:1em;
background:#8250df;color:#fff;vertical-align:middle}
figure{margin:1em 0 2em}figure img{max-width:100%;border:1px solid #d0d7de}
figcaption{font-size:.88em;color:#57606a}.error{color:#cf222e;font-weight:600}
code{background:#f6f8fa;padding:0 .25em;border-radius:3px}
.muted{color:#57606a;font-size:.9em}
"""


def _e(value: Any) -> str:
    return html.escape(value if isinstance(value, str) else _fmt(value), quote=True)


def _table(
    caption: str,
    header: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    numeric: Sequence[int] = (),
    raw: Sequence[int] = (),
) -> str:
    """An HTML table; cells are escaped unless their column is in ``raw`` (pre-escaped)."""
    out = [f"<table><caption>{_e(caption)}</caption><thead><tr>"]
    out += [f"<th>{_e(h)}</th>" for h in header]
    out.append("</tr></thead><tbody>")
    for row in rows:
        out.append("<tr>")
        for i, cell in enumerate(row):
            cls = ' class="num"' if i in numeric else ""
            out.append(f"<td{cls}>{cell if i in raw else _e(cell)}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _verdict_html(verdict: Any) -> str:
    text = str(verdict or "–")
    return f'<span class="verdict v-{_e(text.replace(" ", "-"))}">{_e(text)}</span>'


def _failed_html(result: dict[str, Any]) -> str:
    return (
        f'<p class="error">{_e(result.get("title") or result.get("id"))} '
        f"({_e(result.get('id'))}) could not be computed: "
        f"{_e(result.get('error') or 'unknown error')}</p>"
    )


def _figure_html(report: Report, name: str) -> str:
    fig = next((f for f in report.figures if f.name == name), None)
    if fig is None:
        return ""
    data = base64.b64encode(fig.png).decode("ascii")
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{_e(fig.title)}">'
        f"<figcaption>{_e(fig.caption)}</figcaption></figure>"
    )


def _section_verdicts(report: Report) -> str:
    rows = []
    for r in report.hypotheses:
        desc = f"{r.get('title', '')} [{_contrast_text(report, r)}]"
        verdict = _verdict_html(r.get("verdict"))
        caution = verdict_caution(r)
        if caution:
            verdict += f'<br><span class="error caution">caution: {_e(caution)}</span>'
        rows.append(
            (
                r.get("hypothesis"),
                desc,
                r.get("test"),
                _estimate_text(r),
                _p_text(r),
                verdict,
                _rule_text(r),
            )
        )
    if not rows:
        return "<h2>Verdicts of the pre-registered hypotheses</h2><p>No hypothesis results.</p>"
    return "<h2>Verdicts of the pre-registered hypotheses</h2>" + _table(
        "Pre-registered hypotheses: each verdict and the locked rule that decided it",
        ("hypothesis", "description", "test", "estimate (CI)", "p", "verdict", "decided by"),
        rows,
        raw=(5,),
    )


COMPONENT_RULE = (
    "A unit is the set of components arm a has and arm b lacks in a registered hypothesis"
    " a vs b (a chi-square test names none). Each pooled hypothesis result is evidence: "
    "supported with a positive estimate a benefit, with a negative one a harm; a "
    "supported equivalence no effect; anything else not shown. A unit with benefit and "
    "harm is task-dependent; with benefit only active; with harm only harmful; with no "
    'effect only inactive; otherwise not established (docs/analysis.md, "Component '
    'classes").'
)


def _component_evidence(
    arms: dict[str, Any], h: dict[str, Any], r: dict[str, Any]
) -> tuple[str, str, str] | None:
    """(unit, evidence text, effect) of one computed result, or ``None`` when it is no evidence.

    The unit is the components arm a has and arm b lacks; the kind says what its result
    shows (:attr:`analysis.statistics.Statistic.component_effect`).
    """
    kind = kind_of(h)
    effect = kind.component_effect(h, r) if kind is not None else difference_effect(h, r)
    if effect is None:
        return None
    a, b = (str(x) for x in h.get("contrast") or ["", ""])
    added = sorted(
        set((arms.get(a) or {}).get("components") or [])
        - set((arms.get(b) or {}).get("components") or [])
    )
    if not added:
        return None
    where = f" on {', '.join(map(str, h['stimuli']))}" if h.get("stimuli") else ""
    return " + ".join(added), f"{h.get('id')} ({a} vs {b}{where}): {effect}", effect


COMPONENT_CLASSES = (
    ("task-dependent", ("benefit", "harm")),
    ("active", ("benefit",)),
    ("harmful", ("harm",)),
    ("inactive", ("no effect",)),
)
"""A unit's class: the first whose effects all appear in its evidence (:data:`COMPONENT_RULE`)."""


def _component_class(effects: set[str]) -> str:
    return next(
        (cls for cls, needs in COMPONENT_CLASSES if set(needs) <= effects), "not established"
    )


def component_classes(
    protocol: dict[str, Any], results: list[dict[str, Any]]
) -> list[tuple[str, list[str], str]]:
    """Each prompt-component unit's evidence and class, by :data:`COMPONENT_RULE`."""
    arms = protocol.get("arms") or {}
    plan = {h.get("id"): h for h in protocol.get("hypotheses") or []}
    units: dict[str, list[tuple[str, str]]] = {}
    for r in results:
        h = plan.get(r.get("hypothesis"))
        found = (
            _component_evidence(arms, h, r) if h is not None and r.get("status") == "ok" else None
        )
        if found is not None:
            unit, text, effect = found
            units.setdefault(unit, []).append((text, effect))
    return [
        (unit, [t for t, _ in evidence], _component_class({e for _, e in evidence}))
        for unit, evidence in units.items()
    ]


def _section_components(report: Report) -> str:
    classes = component_classes(report.protocol, report.hypotheses)
    if not classes:
        return ""
    return (
        "<h2>Prompt components: active, inactive, harmful or task-dependent</h2>"
        f"<p>{_e(COMPONENT_RULE)}</p>"
        + _table(
            "Prompt components classified from the registered contrasts",
            ("component(s) under test", "registered evidence", "class"),
            [(u, "; ".join(ev), c) for u, ev, c in classes],
        )
    )


def _protocol_scope(p: dict[str, Any]) -> str:
    """What the trials run over: an item file's count and path, else the stimuli."""
    items = p.get("items")
    if "stimuli" not in p and isinstance(items, dict):  # an item file: ids are in the file
        return f"{_e(items.get('count'))} items ({_e(items.get('path'))})"
    return f"{_e(len(p.get('stimuli') or []))} stimuli ({_e(', '.join(p.get('stimuli') or []))})"


def _arms_table(arms: dict[str, Any]) -> str:
    return _table(
        "Arms and their prompt components",
        ("arm", "role", "components", "composed text SHA-256"),
        [
            (
                a,
                (arms[a] or {}).get("role"),
                " + ".join((arms[a] or {}).get("components") or []),
                str((arms[a] or {}).get("sha256", ""))[:16] + "…",
            )
            for a in sorted(arms)
        ],
    )


def _models_table(report: Report) -> str:
    """The models in declaration order, or the one model's fields."""
    p = report.protocol
    if not report.models:
        return _table("Model", ("field", "value"), sorted((p.get("model") or {}).items()))
    declared = p.get("models") or {}
    return _table(
        "Models, in declaration order",
        MODEL_FIELDS,
        [(m, *((declared.get(m) or {}).get(k) for k in MODEL_FIELDS[1:])) for m in report.models],
    )


def _design_table(design: dict[str, Any]) -> str:
    """The design, its usual fields first."""
    usual = ("replicates", "seed", "order", "bootstrap_seed", "bootstrap_iterations")
    design_rows: list[tuple[str, Any]] = [(k, design.get(k)) for k in usual if k in design]
    design_rows += [(k, v) for k, v in sorted(design.items()) if k not in dict(design_rows)]
    return _table("Design", ("field", "value"), design_rows)


def _hypothesis_cells(h: dict[str, Any]) -> tuple[Any, ...]:
    """A registered hypothesis as the protocol table shows it."""
    what = " vs ".join(h.get("contrast") or []) or (
        f"arm {h.get('arm')}: {', '.join(h.get('variants') or [])}"
    )
    return (
        h.get("id"),
        what,
        h.get("test"),
        h.get("sides"),
        h.get("alpha"),
        h.get("correction"),
        h.get("family"),
        "–" if h.get("min_difference_pp") is None else f"{h['min_difference_pp']} pp",
        "–" if h.get("margin_pp") is None else f"±{h['margin_pp']} pp",
    )


def _section_protocol(report: Report) -> str:
    p = report.protocol
    hypotheses_table = _table(
        "Pre-registered hypotheses",
        (
            "id",
            "contrast",
            "test",
            "sides",
            "alpha",
            "correction",
            "family",
            "min. difference",
            "equivalence margin",
        ),
        [_hypothesis_cells(h) for h in p.get("hypotheses") or []],
    )
    return "".join(
        [
            "<h2>Protocol (as locked)</h2>",
            f"<p>Study <code>{_e(p.get('study'))}</code>: {_e(p.get('title'))}. "
            f"{_e(p.get('trials'))} scheduled trials over {_protocol_scope(p)}.</p>",
            _arms_table(p.get("arms") or {}),
            _models_table(report),
            _design_table(p.get("design") or {}),
            _table("Analysis plan", ("field", "value"), sorted((p.get("analysis") or {}).items())),
            hypotheses_table,
        ]
    )


DECLARED = "Declared deviations from the source protocol ([[deviations]], locked before the run)"


def _section_plan(report: Report) -> str:
    """The locked design plan as the sample-size justification (docs/planning.md §8)."""
    from analysis import _report_plan as rp

    with Ledger.open(report.ledger, readonly=True) as log:
        found = [e for e in log.events("artifact.locked") if e.body["path"] == "plan/plan.json"]
        if not found:
            return ""
        event = found[-1]
        record = rp.read_record(log.blob(event.blobs["content"]))
    if record is None:
        return ""
    intro = rp.plan_intro(record, event.seq, event.body["sha256"])
    return f"<h2>{_e(rp.PLAN_HEADING)}</h2><p>{_e(intro)}</p>" + _table(
        rp.PLAN_CAPTION, rp.PLAN_HEADER, rp.plan_rows(record), numeric=(1,)
    )


def _section_deviations(report: Report) -> str:
    head = "<h2>Deviations from the protocol</h2>"
    declared = report.protocol.get("deviations") or []
    if declared:
        head += _table(
            DECLARED,
            ("id", "source protocol says", "this study does", "reason"),
            [(d.get("id"), d.get("source"), d.get("choice"), d.get("reason")) for d in declared],
        )
    if not report.amendments:
        return head + "<p>None: no <code>protocol.amended</code> event was recorded.</p>"
    rows = [
        (
            a["seq"],
            a.get("time"),
            a.get("reason"),
            ", ".join(str(c.get("path")) for c in a.get("changes") or []),
        )
        for a in report.amendments
    ]
    return head + _table(
        "Recorded amendments (protocol.amended)",
        ("seq", "time", "reason", "files changed"),
        rows,
        numeric=(0,),
    )


def _parse_cells(v: dict[str, Any]) -> tuple[Any, ...]:
    """(trials scored, statuses, parse rate, excluded, given up, analysed) of one cell."""
    statuses = ", ".join(f"{k} {n}" for k, n in sorted((v.get("status") or {}).items()))
    return (
        v.get("trials_scored"),
        statuses,
        _pct(v.get("parse_rate")),
        v.get("excluded"),
        v.get("given_up"),
        v.get("glyphs"),
    )


def _section_data(report: Report) -> str:
    parts = ["<h2>Data: parse rates and exclusions</h2>"]
    arms_result = report.result("descriptive.arms")
    if arms_result is None or arms_result.get("status") != "ok":
        parts.append(
            _failed_html(arms_result or {"id": "descriptive.arms", "error": "not recorded"})
        )
        return "".join(parts)
    values = arms_result.get("values") or {}
    rows = [(arm, *_parse_cells(values[arm] or {})) for arm in sorted(values)]
    kind, unit = ("Tumbling-E trials", "glyphs") if report.tumbling else ("Trials", "items")
    parts.append(
        _table(
            f"{kind} per arm: scoring status, parse rate, exclusions (unparseable "
            "responses when the plan excludes them) and trials given up",
            (
                "arm",
                "trials scored",
                "status",
                "parse rate",
                "excluded",
                "given up",
                f"{unit} analysed",
            ),
            rows,
            numeric=(1, 3, 4, 5, 6),
        )
    )
    by_model = report.result("descriptive.arm_model")
    if by_model is not None and by_model.get("status") == "ok":
        cells: list[tuple[Any, ...]] = [
            (v.get("arm"), v.get("model"), *_parse_cells(v))
            for v in (by_model.get("values") or {}).values()
        ]
        parts.append(
            _table(
                f"{kind} per arm and model: scoring status, parse rate, exclusions and trials "
                "given up",
                (
                    "arm",
                    "model",
                    "trials scored",
                    "status",
                    "parse rate",
                    "excluded",
                    "given up",
                    f"{unit} analysed",
                ),
                cells,
                numeric=(2, 4, 5, 6, 7),
            )
        )
    exclude = (report.protocol.get("analysis") or {}).get("exclude_unparseable", True)
    parts.append(f'<p class="muted">Plan: exclude_unparseable = {_e(exclude)}.</p>')
    return "".join(parts)


WILSON_DESCRIPTIVE = "Wilson 95% CI (items as independent: descriptive)"
CLUSTERED_CI = "95% CI clustered by probe (cluster-robust, t with probes − 1 df)"


def _clustered_text(value: Any) -> str:
    """The probe-clustered interval of ``descriptive.arms``, or why there is none."""
    if not isinstance(value, dict):
        return "–"
    if value.get("lower") is None:
        return f"none ({value.get('n_clusters')} probe)"
    return (
        f"{_pct(value.get('lower'))} – {_pct(value.get('upper'))} "
        f"({value.get('n_clusters')} probes)"
    )


def _accuracy_row(arm: str, v: dict[str, Any]) -> tuple[Any, ...]:
    """One arm's correct, n, accuracy, Wilson interval (or its note) and clustered interval."""
    acc = (v or {}).get("accuracy") or {}
    return (
        arm,
        acc.get("successes", v.get("correct")),
        acc.get("n", v.get("glyphs")),
        _pct(acc.get("estimate")),
        f"{_pct(acc.get('lower'))} – {_pct(acc.get('upper'))}" if acc else v.get("note", "–"),
        _clustered_text(v.get("accuracy_clustered")),
    )


def _arms_accuracy_html(report: Report) -> str:
    """``descriptive.arms``: accuracy by arm, Wilson and clustered intervals."""
    arms_result = report.result("descriptive.arms")
    if not arms_result:
        return ""
    if arms_result.get("status") != "ok":
        return _failed_html(arms_result)
    values = arms_result.get("values") or {}
    return _table(
        str(arms_result.get("title")),
        (
            "arm",
            "correct",
            "glyphs" if report.tumbling else "items",
            "accuracy",
            WILSON_DESCRIPTIVE,
            CLUSTERED_CI,
        ),
        [_accuracy_row(arm, values[arm]) for arm in sorted(values)],
        numeric=(1, 2, 3),
    )


def _arm_model_html(report: Report) -> str:
    """``descriptive.arm_model``: accuracy by arm and model (several models)."""
    by_model = report.result("descriptive.arm_model")
    if by_model is None:
        return ""
    if by_model.get("status") != "ok":
        return _failed_html(by_model)
    cells = [
        (v.get("arm"), v.get("model"), *_accuracy_row("", v)[1:5])
        for v in (by_model.get("values") or {}).values()
    ]
    return _table(
        str(by_model.get("title")),
        (
            "arm",
            "model",
            "correct",
            "glyphs" if report.tumbling else "items",
            "accuracy",
            "Wilson 95% CI",
        ),
        cells,
        numeric=(2, 3, 4),
    )


def _control_html(report: Report) -> str:
    """``descriptive.control``: each arm's specificity-control trials correctly rejected."""
    control = report.result("descriptive.control")
    if control is None:
        return "<p>Not recorded.</p>"
    if control.get("status") != "ok":
        return _failed_html(control)
    values = control.get("values") or {}
    crows = [
        (
            arm,
            (v or {}).get("successes", "–"),
            (v or {}).get("n", "–"),
            _pct((v or {}).get("estimate")),
            f"{_pct((v or {}).get('lower'))} – {_pct((v or {}).get('upper'))}"
            if v
            else "no control trials",
        )
        for arm, v in sorted(values.items())
    ]
    return _table(
        str(control.get("title")),
        ("arm", "correctly rejected", "control trials", "rate", "Wilson 95% CI"),
        crows,
        numeric=(1, 2, 3),
    )


def _section_descriptive(report: Report) -> str:
    parts = [
        "<h2>Descriptive results</h2>",
        _arms_accuracy_html(report),
        _arm_model_html(report),
        _section_mcq(report),
        _section_qr(report),
        _section_ddx(report),
        _section_covariates(report),
        _figure_html(report, "accuracy_by_arm.png"),
    ]
    stim = report.result("descriptive.arm_stimulus")
    if stim and stim.get("status") == "failed":
        parts.append(_failed_html(stim))
    parts.append(_figure_html(report, "accuracy_arm_stimulus.png"))
    if report.tumbling:  # only a tumbling-E study has specificity-control trials
        parts += ["<h3>Specificity control</h3>", _control_html(report)]
    return "".join(parts)


def mcq_rows(report: Report) -> list[tuple[str, ...]]:
    """One row per seed-002 hypothesis result (``docs/mcq-statistics.md`` §11).

    (hypothesis, test, what, n, statistic, estimate, interval, excluded, verdict); the kind's
    :attr:`analysis.statistics.Statistic.seed002_cells` gives n, statistic and interval.
    """
    rows: list[tuple[str, ...]] = []
    for r in report.hypotheses:
        plan = _hypothesis_plan(report, r.get("hypothesis"))
        kind = kind_of(r)
        if kind is None or kind.seed002_cells is None or not kind.seed002(plan):
            continue
        test = str(r.get("test"))
        what = _contrast_text(report, r) + (f" at {plan['variant']}" if plan.get("variant") else "")
        if r.get("status") != "ok":
            failed = (
                _not_applicable(r)
                if r.get("status") == NOT_APPLICABLE
                else f"not computed: {r.get('error')}"
            )
            rows.append((str(r.get("hypothesis")), test, what, *("–",) * 5, failed))
            continue
        v = r.get("values") or {}
        n, stat, interval = kind.seed002_cells(v)
        rows.append(
            (
                str(r.get("hypothesis")),
                test,
                what,
                n,
                stat,
                _fmt(v.get("estimate")),
                interval,
                str(v.get("excluded", "–")),
                str(r.get("verdict")),
            )
        )
    return rows


DDX_HEADER = (
    "arm",
    "model",
    "trials",
    "plausibility",
    "H-coverage",
    "S-coverage",
    "breadth",
    "grounding",
    "indirect",
    "uncertainty",
)
"""The columns of the differential-diagnosis table (``docs/analysis.md`` §9)."""


def ddx_rows(values: dict[str, Any]) -> list[list[str]]:
    """The rows of the ``descriptive.ddx`` table: each arm (model ``all``), then arm x model.

    A metric is its mean (a percentage, breadth a number) and how many trials leave it
    undefined.
    """

    def cell(entry: Any, name: str) -> str:
        m = entry.get(name) if isinstance(entry, dict) else None
        if not isinstance(m, dict):
            return "–"
        mean = _fmt(m.get("mean")) if name == "breadth" else _pct(m.get("mean"))
        return mean + (f" ({m.get('undefined')} undefined)" if m.get("undefined") else "")

    names = (
        "plausibility",
        "h_coverage",
        "s_coverage",
        "breadth",
        "grounding_rate",
        "indirect_rate",
        "uncertainty",
    )
    rows = []
    for arm, entry in sorted((values.get("arms") or {}).items()):
        rows.append([str(arm), "all", _fmt(entry.get("trials")), *(cell(entry, n) for n in names)])
    for arm, models in sorted((values.get("arm_model") or {}).items()):
        for model, entry in sorted(models.items()):
            rows.append(
                [str(arm), str(model), _fmt(entry.get("trials")), *(cell(entry, n) for n in names)]
            )
    return rows


def _section_ddx(report: Report) -> str:
    """``descriptive.ddx``: the differential-diagnosis metrics per arm and model, when recorded."""
    desc = report.result("descriptive.ddx")
    if desc is None:
        return ""
    if desc.get("status") != "ok":
        return _failed_html(desc)
    return _table(
        str(desc.get("title")),
        DDX_HEADER,
        ddx_rows(desc.get("values") or {}),
        numeric=tuple(range(2, 10)),
    )


def covariate_tables(values: dict[str, Any]) -> list[tuple[str, list[list[str]]]]:
    """``descriptive.covariates`` (``docs/analysis.md`` §11): perturbable, then indicators.

    Each table is (caption suffix, rows of label, value, arm, trials and each outcome's mean:
    a percentage, breadth a number), a label's ``no label`` row last.
    """
    outcomes = [str(o) for o in values.get("outcomes") or []]

    def mean(entry: Any, name: str) -> str:
        m = entry.get(name) if isinstance(entry, dict) else None
        got = m.get("mean") if isinstance(m, dict) else None
        return _fmt(got) if name == "breadth" else _pct(got)

    out = []
    strata = values.get("strata") or {}
    for key, what in (
        ("perturbable", "perturbable factors"),
        ("indicators", "indicator factors (annotated, never edited)"),
    ):
        rows: list[list[str]] = []
        for name in values.get(key) or []:
            stratum = strata.get(name) or {}
            for level in ("true", "false"):
                for arm, entry in sorted(((stratum.get("levels") or {}).get(level) or {}).items()):
                    rows.append(
                        [
                            str(name),
                            level,
                            str(arm),
                            _fmt(entry.get("trials")),
                            *(mean(entry, o) for o in outcomes),
                        ]
                    )
            rows.append(
                [
                    str(name),
                    "no label",
                    "all",
                    _fmt(stratum.get("undecided")),
                    *("–" for _ in outcomes),
                ]
            )
        if rows:
            out.append((f"{what}, step {values.get('step')}", rows))
    return out


def _section_covariates(report: Report) -> str:
    """``descriptive.covariates``: outcomes by factor label, indicators apart, when recorded."""
    desc = report.result("descriptive.covariates")
    if desc is None:
        return ""
    if desc.get("status") != "ok":
        return _failed_html(desc)
    values = desc.get("values") or {}
    header = ("label", "value", "arm", "trials", *(str(o) for o in values.get("outcomes") or []))
    return "".join(
        _table(
            f"Outcomes by factor label: {what}", header, rows, numeric=tuple(range(3, len(header)))
        )
        for what, rows in covariate_tables(values)
    )


def _section_qr(report: Report) -> str:
    """``descriptive.qr_bootstrap``'s tables (analysis/_qr_boot.py), or why it failed."""
    from analysis import _qr_boot as qr_boot

    result = report.result("descriptive.qr_bootstrap")
    if result is not None and result.get("status") != "ok":
        return _failed_html(result)
    return "".join(
        _table(caption, header, rows) for caption, header, rows in qr_boot.report_tables(result)
    )


def _section_mcq(report: Report) -> str:
    """Seed 002's registered statistics and ``descriptive.mcq``, when recorded."""
    parts = []
    rows = mcq_rows(report)
    if rows:
        parts.append(
            _table(
                "Seed 002's registered statistics (flip rate, position bias, voting, "
                "self-consistency, McNemar, GEE; excluded = incomplete groups, recorded with their "
                "trials)",
                (
                    "hypothesis",
                    "test",
                    "arms / variants",
                    "n",
                    "statistic",
                    "estimate",
                    "interval or p",
                    "excluded",
                    "verdict",
                ),
                rows,
            )
        )
    desc = report.result("descriptive.mcq")
    if desc is not None and desc.get("status") == "ok":
        v = desc.get("values") or {}
        parts.append(
            _table(
                str(desc.get("title")),
                (
                    "arm",
                    "variant",
                    "model",
                    "correct",
                    "n",
                    "unparsed",
                    "accuracy",
                    "Wilson 95% CI",
                ),
                [
                    (
                        c.get("arm"),
                        c.get("variant"),
                        c.get("model") or "–",
                        c.get("correct"),
                        c.get("n"),
                        c.get("unparsed"),
                        _pct(c.get("accuracy")),
                        f"{_pct(c.get('lower'))} – {_pct(c.get('upper'))}",
                    )
                    for c in v.get("cells") or []
                ],
                numeric=(3, 4, 5, 6),
            )
        )
        if v.get("seeds"):
            parts.append(
                _table(
                    "Accuracy over the shuffle seeds: mean and t interval",
                    ("arm", "model", "seeds", "per seed", "mean", "95% t interval"),
                    [
                        (
                            s.get("arm"),
                            s.get("model") or "–",
                            ", ".join(s["summary"]["seeds"]),
                            ", ".join(_pct(x) for x in s["summary"]["values"]),
                            _pct(s["summary"]["mean"]),
                            f"{_pct(s['summary']['lower'])} – {_pct(s['summary']['upper'])}",
                        )
                        for s in v["seeds"]
                    ],
                )
            )
    elif desc is not None:
        parts.append(_failed_html(desc))
    return "".join(parts)


def _model_html(model: dict[str, Any], extra: str = "", prefix: str = "") -> str:
    """A mixed-model result: its fixed effects as a table (and its caution), or the failure.

    ``prefix`` starts the caption (the exploratory label) and ``extra`` ends it (the
    interaction's Wald test).
    """
    if model.get("status") != "ok":
        return _failed_html(model)
    v = model.get("values") or {}
    rows = [
        (
            fe.get("name"),
            _pp(fe.get("estimate")),
            _pp(fe.get("se"), signed=False),
            f"{_pp(fe.get('ci_lower'))} to {_pp(fe.get('ci_upper'))}",
            _p(fe.get("p")),
        )
        for fe in v.get("fixed_effects") or []
    ]
    factors = ", ".join(
        f"reference {f} {r}"
        for f, r in zip(v.get("factors") or [], v.get("factor_references") or [], strict=False)
    )
    out = _table(
        f"{prefix}{model.get('title')} (reference arm {v.get('reference')}"
        + (f"; {factors}" if factors else "")
        + f"; {v.get('n_obs')} trials, "
        f"{v.get('n_groups')} groups; ICC {_fmt(v.get('icc'))}; converged "
        f"{_fmt(v.get('converged'))}, singular {_fmt(v.get('singular'))}){extra}",
        ("term", "estimate", "SE", "95% CI", "p"),
        rows,
        numeric=(1, 2, 4),
    )
    if v.get("caution"):
        out += f'<p class="error">{_e(v["caution"])}</p>'
    return out


SENSITIVITY = "Sensitivity (not registered; never changes a verdict)"
SENSITIVITY_MODELS = {
    "registered": "registered random intercept, Satterthwaite t",
    "probe_by_arm": "probe-by-arm",
    "probe_by_arm_arm_residual": "probe-by-arm, residual variance per arm",
}


def _interval(c: dict[str, Any]) -> str:
    lo = "−∞" if c.get("lower") is None else _pp(c.get("lower"))
    hi = "+∞" if c.get("upper") is None else _pp(c.get("upper"))
    return f"{_pp(c.get('estimate'))} ({lo} to {hi})"


def _sensitivity_cell(c: Any) -> str:
    if not isinstance(c, dict):
        return "not fitted"
    return f"{_interval(c)}, p {_p(c.get('p'))}, df {_fmt(c.get('df'))}"


def sensitivity_scope(values: dict[str, Any]) -> str:
    """How a sensitivity table names its fit: pooled over several models, one model, or ''."""
    if values.get("model") is not None:
        return f" (model {values['model']})"
    if values.get("factors"):
        return " (pooled over the models, model a fixed factor)"
    return ""


def sensitivity_results(report: Report) -> list[dict[str, Any]]:
    """``sensitivity.lmm`` and each ``sensitivity.lmm@<model>``, in recorded order."""
    return [
        r
        for r in report.results
        if str(r.get("id")) == "sensitivity.lmm" or str(r.get("id")).startswith("sensitivity.lmm@")
    ]


def sensitivity_tables(
    result: dict[str, Any] | None,
) -> list[tuple[str, list[str], list[list[str]]]]:
    """The two sensitivity tables (caption, header, rows): contrasts side by side, models."""
    if result is None or result.get("status") != "ok":
        return []
    v = result.get("values") or {}
    scope = sensitivity_scope(v)
    rows = []
    for c in v.get("contrasts") or []:
        on = f" on {', '.join(map(str, c['stimuli']))}" if c.get("stimuli") else ""
        if "error" in c:  # a stimulus subset whose model could not be fitted
            rows.append(
                [
                    str(c.get("hypothesis")),
                    f"subset{on}",
                    f"not fitted: {c['error']}",
                    *("–" for _ in SENSITIVITY_MODELS),
                    "–",
                    "–",
                ]
            )
            continue
        reg = c.get("as_registered") or {}
        p = f"p {_p(reg.get('p_raw'))}" + (
            f", adjusted {_p(reg.get('p_adjusted'))}" if reg.get("p_adjusted") is not None else ""
        )
        boot = c.get("cluster_bootstrap") or {}
        supports = c.get("supports")
        rows.append(
            [
                str(c.get("hypothesis")),
                f"{c.get('a')} vs {c.get('b')} ({c.get('sides')}){on}",
                f"{_interval(reg)}, {p}; {c.get('registered_verdict') or '–'}",
                *(_sensitivity_cell(c.get(m)) for m in SENSITIVITY_MODELS),
                f"{_interval(boot)} over {boot.get('n_clusters')} probes" if boot else "–",
                "–" if supports is None else ("yes" if supports else "no"),
            ]
        )
    out = [
        (
            f"{SENSITIVITY}{scope}: each registered mixed-model contrast beside its "
            "sensitivity intervals (95%; one-sided hypotheses: lower bound; df: Satterthwaite's "
            "formula with the expected REML information)",
            [
                "hypothesis",
                "contrast",
                "registered (z)",
                *SENSITIVITY_MODELS.values(),
                "bootstrap over probes",
                "sensitivity supports the verdict?",
            ],
            rows,
        )
    ]
    mrows = []
    for name, label in SENSITIVITY_MODELS.items():
        m = (v.get("models") or {}).get(name) or {}
        if not m.get("fitted"):
            mrows.append([label, f"no: {m.get('reason')}", "–", "–", "–"])
            continue
        lrt = f"chi2 {_fmt(m.get('lrt_chi2'))}, p {_p(m.get('lrt_p'))}" if "lrt_chi2" in m else "–"
        mrows.append(
            [
                label,
                "yes",
                ", ".join(f"{k} {_fmt(x)}" for k, x in (m.get("variances") or {}).items()),
                _fmt(m.get("log_likelihood")),
                lrt,
            ]
        )
    out.append(
        (
            f"{SENSITIVITY}{scope}: the models (REML, groups {v.get('group_col')})",
            [
                "model",
                "fitted",
                "variance components",
                "log-likelihood",
                "probe-by-arm vs registered (LRT, boundary-corrected)",
            ],
            mrows,
        )
    )
    return out


def sensitivity_flags(result: dict[str, Any] | None) -> list[str]:
    """The sentences flagging a registered verdict the sensitivity analysis would not support."""
    if result is None or result.get("status") != "ok":
        return []
    return [
        str(c["flag"]) for c in (result.get("values") or {}).get("contrasts") or [] if c.get("flag")
    ]


def _section_sensitivity(report: Report) -> str:
    results = sensitivity_results(report)
    if not results:
        return ""
    parts = [f"<h3>{_e(SENSITIVITY)}</h3>"]
    for result in results:  # the pooled fit, then each model's (several models)
        if result.get("status") != "ok":
            parts.append(_failed_html(result))
            continue
        for caption, header, rows in sensitivity_tables(result):
            parts.append(_table(caption, header, rows))
        parts += [f'<p class="error">{_e(flag)}</p>' for flag in sensitivity_flags(result)]
    return "".join(parts)


DISTRIBUTION_INTRO = (
    "Each analysable trial's accuracy (its share of glyphs read correctly), counted i"
    "n ten bins: an arm whose trials sit near ceiling and near collapse at once (the "
    "paper's bimodal arm B) shows at both ends, which its mean hides."
)
DISTRIBUTION_BINS = tuple(f"{10 * i}–{10 * i + 10}%" for i in range(10))


def trial_distribution(trials: list[dict[str, str]], arms: list[str]) -> list[list[str]]:
    """Per arm: analysable trials, mean accuracy and the count in each of ten accuracy bins."""
    rows = []
    for arm in arms:
        acc = [
            float(t["accuracy"])
            for t in trials
            if t.get("arm") == arm and t.get("control") == "False" and t.get("excluded") == "False"
        ]
        bins = [0] * 10
        for value in acc:
            bins[min(9, max(0, int(value * 10)))] += 1
        rows.append(
            [arm, str(len(acc)), _pct(sum(acc) / len(acc)) if acc else "–", *(str(b) for b in bins)]
        )
    return rows


def _section_distribution(report: Report) -> str:
    rows = report.distribution
    if rows is None and report.trials:
        rows = trial_distribution(report.trials, report.arms)
    if not report.tumbling or not rows:
        return ""
    return (
        "<h3>Trial-level accuracy distribution per arm (descriptive)</h3>"
        f"<p>{_e(DISTRIBUTION_INTRO)}</p>"
        + _table(
            "Analysable trials per arm by glyph accuracy",
            ("arm", "trials", "mean", *DISTRIBUTION_BINS),
            rows,
        )
    )


def _section_model(report: Report) -> str:
    parts = ["<h2>Pre-registered model and contrasts</h2>"]
    model = report.result("model.lmm")
    if model is None:
        parts.append("<p>No model result recorded.</p>")
    else:
        parts.append(_model_html(model))
    for name in report.models:
        each = report.result(f"model.lmm@{name}")
        if each is not None:
            parts.append(_model_html(each))
    parts.append(_figure_html(report, "forest_contrasts.png"))
    parts.append(_section_sensitivity(report))
    return "".join(parts)


NEWCOMBE = "Newcombe 95% CI of the difference (one answer per trial; – for charts)"


def _newcombe_text(value: Any) -> str:
    if not isinstance(value, dict):
        return "–"
    return f"{_pp(value.get('estimate'))} ({_pp(value.get('lower'))} to {_pp(value.get('upper'))})"


def _chi_text(chi: Any) -> str:
    if not isinstance(chi, dict) or not chi:
        return "–"
    if chi.get("error"):
        return str(chi["error"])
    return f"chi2 {_fmt(chi.get('chi2'))}, p {_p(chi.get('p'))}"


def _error_phenotype_row(arm: str, r: dict[str, Any]) -> tuple[str, ...]:
    """One arm's error phenotype cells (HTML-escaped), or why it was not computed."""
    if r.get("status") != "ok":
        error = f'<span class="error">not computed: {_e(r.get("error"))}</span>'
        return (arm, error, "", "", "", "", "")
    v = r.get("values") or {}
    share = v.get("canonical_right_share") or {}
    chi = v.get("error_chi_square") or {}
    dirs = v.get("error_directions") or v.get("error_answers") or {}  # orientation or label
    bias = v.get("position_bias") or {}
    return (
        arm,
        _e(_pct((v.get("confusion") or {}).get("accuracy"))),
        _e(", ".join(f"{k} {n}" for k, n in dirs.items()) or "no errors"),
        _e(
            f"{_pct(share.get('share'))} ({_pct(share.get('lower'))} – "
            f"{_pct(share.get('upper'))}), n={share.get('n', 0)}"
            if share
            else "–"
        ),
        _e(
            chi.get("error")
            or (f"chi2 {_fmt(chi.get('chi2'))}, p {_p(chi.get('p'))}" if chi else "–")
        ),
        _e(_chi_text(v.get("error_chi_square_excluding_truth"))),
        _e(f"TVD {_fmt(bias.get('tvd'))}" if bias else "–"),
    )


def _exploratory_errors_html(report: Report, tag: str) -> str:
    """The error phenotype of each arm (a parser with a closed set of labels)."""
    rows = []
    for arm in report.arms:
        r = report.result(f"exploratory.errors.{arm}")
        if r is not None:
            rows.append(_error_phenotype_row(arm, r))
    return f"<h3>{_e(EXPLORATORY)}: error phenotype by arm {tag}</h3>" + _table(
        f"{EXPLORATORY}: error phenotype (wrong answers that name an orientation)",
        (
            "arm",
            "accuracy",
            "error directions",
            "share of errors answering RIGHT (Wilson 95% CI, errors as independent: descriptive)",
            "errors uniform over all labels? (chi-square; the paper's null, replicated)",
            "errors uniform over the wrong labels? (chi-square, true label excluded)",
            "answer vs truth distribution",
        ),
        rows,
        raw=(0, 1, 2, 3, 4, 5, 6),
    )


def _pair_row(r: dict[str, Any]) -> tuple[Any, ...]:
    """One arm pair's paired metrics, or why they were not computed."""
    name = str(r["id"]).removeprefix("exploratory.pair.")
    if r.get("status") != "ok":
        return (name, f"not computed: {r.get('error')}", "", "", "", "", "")
    v = r.get("values") or {}
    mc, flip = v.get("mcnemar") or {}, v.get("flip_rate") or {}
    it, pt, boot = (
        v.get("independent_t") or {},
        v.get("paired_t") or {},
        v.get("bootstrap_diff") or {},
    )
    return (
        name,
        f"b={mc.get('b')}, c={mc.get('c')}, p {_p(mc.get('p'))}" if mc else "–",
        _pct(flip.get("share")) if flip else "–",
        f"{_pp(it.get('difference'))}, p {_p(it.get('p'))}" if it else "–",
        f"{_pp(pt.get('difference'))}, p {_p(pt.get('p'))}" if pt else "–",
        f"{_pp(boot.get('estimate'))} ({_pp(boot.get('lower'))} to {_pp(boot.get('upper'))})"
        if boot
        else "–",
        _newcombe_text(v.get("newcombe")),
    )


def _exploratory_pairs_html(report: Report, tag: str) -> str:
    """The paired-arm metrics of each registered contrast's arms."""
    pair_rows = [
        _pair_row(r) for r in report.results if str(r.get("id", "")).startswith("exploratory.pair.")
    ]
    return f"<h3>{_e(EXPLORATORY)}: paired-arm metrics {tag}</h3>" + _table(
        f"{EXPLORATORY}: paired-arm metrics (two-sided p, not adjusted)",
        (
            "pair a-b",
            "McNemar (items as independent: descriptive)",
            "answer flip rate",
            "Welch t",
            "paired t (per stimulus)",
            "bootstrap difference (95% CI)",
            NEWCOMBE,
        ),
        pair_rows,
    )


def _question_run_row(name: str, r: dict[str, Any]) -> tuple[Any, ...]:
    if r.get("status") != "ok":
        return (name, f"not computed: {r.get('error')}", "")
    v = r.get("values") or {}
    return (name, _pct(v.get("estimate")), f"{_pct(v.get('lower'))} – {_pct(v.get('upper'))}")


def _exploratory_question_run_html(report: Report, tag: str) -> str:
    """Accuracy by arm (and arm@model) with the bootstrap over trials."""
    qr_rows = []
    for r in report.results:
        name = str(r.get("id", "")).removeprefix("exploratory.question_run.")
        if name != r.get("id"):
            qr_rows.append(_question_run_row(name, r))
    caption = (
        f"{EXPLORATORY}: accuracy by arm (pooled over models: a run is a "
        "model and replicate) and by arm@model, bootstrap over (stimulus, "
        "run)"
        if len(report.models) >= 2
        else f"{EXPLORATORY}: accuracy by arm, bootstrap over (stimulus, replicate)"
    )
    return (
        f"<h3>{_e(EXPLORATORY)}: accuracy with a bootstrap over trials (probes are not "
        f"resampled) {tag}</h3>"
    ) + _table(caption, ("arm", "accuracy", "bootstrap 95% CI"), qr_rows)


def _exploratory_arm_by_model_html(report: Report, tag: str) -> str:
    """The arm × model mixed model (several models), when recorded."""
    by_model = report.result("exploratory.arm_by_model")
    if by_model is None:
        return ""
    test = (by_model.get("values") or {}).get("interaction_test") or {}
    return f"<h3>{_e(EXPLORATORY)}: does the arm effect differ between models? {tag}</h3>" + (
        _model_html(
            by_model,
            f"; joint Wald test of the {test.get('df')} arm × "
            f"model terms: chi2 {_fmt(test.get('chi2'))}, p "
            f"{_p(test.get('p'))}",
            f"{EXPLORATORY}: ",
        )
    )


def _multiplicity_body(mult: dict[str, Any] | None) -> str:
    """Every hypothesis p corrected as one family, or why there is nothing to show."""
    if mult is None:
        return "<p>Not recorded.</p>"
    if mult.get("status") != "ok":
        return _failed_html(mult)
    v = mult.get("values") or {}
    if v.get("note"):
        return f"<p>{_e(v.get('note'))}.</p>"
    bonf = (v.get("bonferroni") or {}).get("adjusted") or []
    holm = (v.get("holm") or {}).get("adjusted") or []
    raw = (v.get("bonferroni") or {}).get("pvalues") or []
    mrows = [
        (h, _p(p), _p(b), _p(hh))
        for h, p, b, hh in zip(v.get("hypotheses") or [], raw, bonf, holm, strict=False)
    ]
    return _table(
        f"{EXPLORATORY}: every hypothesis p-value corrected as one family",
        ("hypothesis", "p raw", "Bonferroni", "Holm"),
        mrows,
    )


SHOWN_EXPLORATORY = (
    "exploratory.errors.",
    "exploratory.pair.",
    "exploratory.question_run.",
    "exploratory.arm_by_model",
    "exploratory.by_truth",
    "exploratory.by_stimulus",
)
"""Exploratory results the section tables (a failed one there); others failed are listed."""


def _section_exploratory(report: Report) -> str:
    tag = f'<span class="tag">{_e(EXPLORATORY)}</span>'
    parts = [
        f'<div class="exploratory"><h2>{_e(EXPLORATORY)}</h2>',
        "<p>None of these results was pre-registered. They describe the data and may "
        "suggest hypotheses for a future study; they decide nothing.</p>",
        _exploratory_errors_html(report, tag),
        _figure_html(report, "accuracy_by_row.png"),
        *(_figure_html(report, f"confusion_{_safe(arm)}.png") for arm in report.arms),
        _by_truth_html(report, tag),
        _by_stimulus_html(report, tag),
        _exploratory_pairs_html(report, tag),
        _exploratory_question_run_html(report, tag),
        _exploratory_arm_by_model_html(report, tag),
        f"<h3>{_e(EXPLORATORY)}: multiplicity sensitivity {tag}</h3>",
        _multiplicity_body(report.result("exploratory.multiplicity")),
    ]
    other = [
        r
        for r in report.by_label("exploratory")
        if r.get("status") == "failed" and not str(r.get("id", "")).startswith(SHOWN_EXPLORATORY)
    ]
    parts += [_failed_html(r) for r in other if r.get("id") != "exploratory.multiplicity"]
    parts.append("</div>")
    return "".join(parts)


BY_STIMULUS_INTRO = (
    "Each pair of arms where the second has a strict subset of the first's components (the"
    " difference is the removed components), on each probe: Welch's t on the trials there."
    " Not adjusted for the number of probes and pairs: hypotheses for a powered replicatio"
    "n, as the paper's per-probe dismantling findings are."
)


def _by_stimulus_html(report: Report, tag: str) -> str:
    """``exploratory.by_stimulus``: each dismantling pair's difference on each probe."""
    r = report.result("exploratory.by_stimulus")
    if r is None:
        return ""
    head = (
        f"<h3>{_e(EXPLORATORY)}: dismantling contrasts per probe (hypothesis-generating) {tag}</h3>"
    )
    if r.get("status") != "ok":
        return head + _failed_html(r)
    v = r.get("values") or {}
    stimuli = [str(x) for x in v.get("stimuli") or []]
    rows = []
    for name, per in (v.get("contrasts") or {}).items():
        cells = []
        for stimulus in stimuli:
            d = (per or {}).get(stimulus) or {}
            cells.append(
                "not computable"
                if "error" in d or not d
                else f"{_pp(d.get('difference'))} ({_pp(d.get('ci_lower'))} to "
                f"{_pp(d.get('ci_upper'))}), p {_p(d.get('p'))}"
            )
        rows.append((name, *cells))
    return (
        head
        + f"<p>{_e(BY_STIMULUS_INTRO)}</p>"
        + _table(
            f"{EXPLORATORY}: dismantling differences per probe (Welch t, 95% CI, two-sided p)",
            ("arms a-b", *stimuli),
            rows,
        )
    )


def _truth_cell(c: dict[str, Any]) -> str:
    """An arm's accuracy at one true answer: correct/n = share (Wilson interval)."""
    w = c.get("wilson") or {}
    if not c.get("n"):
        return "no trials"
    return (
        f"{c.get('correct')}/{c.get('n')} = {_pct(w.get('estimate'))} "
        f"({_pct(w.get('lower'))} – {_pct(w.get('upper'))})"
    )


def _truth_difference(d: dict[str, Any]) -> str:
    """An arm difference at one true answer, with its interval, or why it is not computable."""
    if "error" in d or not d:
        return "not computable"
    return f"{_pp(d.get('estimate'))} ({_pp(d.get('lower'))} to {_pp(d.get('upper'))})"


def _by_truth_rows(
    v: dict[str, Any],
) -> tuple[list[str], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(true answers, accuracy rows per arm, difference rows per arm pair) of by_truth."""
    labels = [str(x) for x in v.get("labels") or []]
    cells = v.get("cells") or {}
    rows = [
        (arm, *(_truth_cell((cells.get(arm) or {}).get(label) or {}) for label in labels))
        for arm in cells
    ]
    contrast_rows = [
        (name, *(_truth_difference((per or {}).get(label) or {}) for label in labels))
        for name, per in (v.get("contrasts") or {}).items()
    ]
    return labels, rows, contrast_rows


def _by_truth_html(report: Report, tag: str) -> str:
    """``exploratory.by_truth``: accuracy per arm and true answer, and per-truth arm contrasts."""
    r = report.result("exploratory.by_truth")
    if r is None:
        return ""
    head = (
        f"<h3>{_e(EXPLORATORY)}: accuracy by true answer (per-orientation cells; "
        f"hypothesis-generating) {tag}</h3>"
    )
    if r.get("status") != "ok":
        return head + _failed_html(r)
    labels, rows, contrast_rows = _by_truth_rows(r.get("values") or {})
    return (
        head + "<p>Each cell holds few trials and nothing here is adjusted for the number "
        "of cells: read these as hypotheses for a powered replication, as the paper does "
        "for its per-orientation findings.</p>"
        + _table(
            f"{EXPLORATORY}: accuracy by arm and true answer (Wilson 95% CI)",
            ("arm", *labels),
            rows,
        )
        + _table(
            f"{EXPLORATORY}: arm differences by true answer ({NEWCOMBE})",
            ("arms a-b", *labels),
            contrast_rows,
        )
    )


POSTHOC = "Post hoc (declared after unblinding; not pre-registered)"


def posthoc_test_text(r: dict[str, Any]) -> str:
    """The test column of a post-hoc row: z (mixed model), t and df, or the bootstrap's draws."""
    kind = kind_of(r)
    posthoc = kind.posthoc if kind is not None else None
    if posthoc is None:  # an unknown kind: shown as the mixed model's contrast
        posthoc = MIXED_MODEL.posthoc
    return posthoc.detail(r.get("values") or {}) if posthoc is not None else "–"


def _section_posthoc(report: Report) -> str:
    """Every ``analysis.posthoc`` event: its declaration, difference and reason; no verdict."""
    if not report.posthoc:
        return ""
    rows = []
    for r in report.posthoc:
        d = r.get("declared") or {}
        if r.get("status") != "ok":
            rows.append(
                (
                    r.get("id"),
                    r.get("seq"),
                    r.get("title"),
                    "",
                    "",
                    "",
                    f"not computed: {r.get('error')}",
                    d.get("reason"),
                )
            )
            continue
        v = r.get("values") or {}
        c = v.get("contrast") or {}
        lmm = is_mixed_model(r)
        rows.append(
            (
                r.get("id"),
                r.get("seq"),
                r.get("title"),
                f"{_pp(c.get('estimate'))} ({_pp(c.get('lower'))} to {_pp(c.get('upper'))})",
                posthoc_test_text(r),
                _fmt(v.get("icc")) if lmm else "–",
                "singular fit" if lmm and v.get("singular") else "–",
                d.get("reason"),
            )
        )
    return (
        f'<div class="exploratory"><h2>{_e(POSTHOC)}</h2>'
        "<p>Each analysis below was declared after the data were unblinded and the "
        "registered analysis was recorded (an analysis.posthoc event after the last "
        "analysis.result). It has no verdict and changes none.</p>"
        + _table(
            f"{POSTHOC}: two-sided differences (mixed model, t-test or bootstrap)",
            (
                "id",
                "seq",
                "model",
                "difference (95% CI)",
                "two-sided test",
                "ICC",
                "caution",
                "reason",
            ),
            rows,
        )
        + "</div>"
    )


def _section_failed(report: Report) -> str:
    if not report.failed:
        return ""
    rows = [(r.get("id"), r.get("label"), r.get("error") or "unknown error") for r in report.failed]
    return (
        '<div class="banner failed">Some results could not be computed; each is listed '
        "with its reason below and shown as “not computed” where it belongs.</div>"
        + _table("Results that could not be computed", ("result", "label", "error"), rows)
    )


def _section_identical(report: Report) -> str:
    text = identical_banner(report.result(IDENTICAL_ID))
    return "" if text is None else f'<div class="banner">{_e(text)}</div>'


def _section_verification(report: Report) -> str:
    v = report.verification
    status = "VERIFIED" if v.ok else "FAILED"
    cls = "ok" if v.ok else "failed"
    rows = [
        (name, f'<span class="{c.status.value}">{c.status.value}</span>', _e(where), _e(reason))
        for c in v.checks
        for name, where, reason in [_check_row(c)]
    ]
    return (
        "<h2>Verification of the ledger</h2>"
        f'<div class="banner {cls}">{status}: {_e(v.size)} events, root '
        f"<code>{_e(v.root or '–')}</code>, origin <code>{_e(v.origin or '–')}</code>."
        "</div>"
        + _table(
            "Independent verifier checks of the study's ledger",
            ("check", "result", "where", "detail"),
            rows,
            raw=(1, 2, 3),
        )
        + '<p class="muted">Re-run offline: <code>ledger verify '
        f"{_e(_shown(report.root))} --trusted-key @OWNER.vkey</code> "
        "(trust needs the owner's vkey, obtained out of band).</p>"
    )


def _simulated_banner(report: Report) -> str:
    if not report.simulated:
        return ""
    sessions = [f"seq {r['seq']} ({r.get('backend')})" for r in report.runs if r.get("simulated")]
    return (
        '<div class="banner simulated" id="simulated">SIMULATED DATA: the responses were '
        "produced by the offline simulated model, not by a real model "
        f"(run session{'s' if len(sessions) > 1 else ''} {_e(', '.join(sessions))}). "
        "These results demonstrate the method only and say nothing about any model."
        "</div>"
    )


def _identity_banner(report: Report) -> str:
    """``MODEL IDENTITY NOT CONFIRMED: ...`` when a session's server did not list a locked model.

    From the ``run.started`` records (:func:`runner._identity.session_notice`,
    ``docs/trials.md`` §2); the verifier derives the same text from the events.
    """
    notice = session_notice(report.runs)
    if notice is None:
        return ""
    return f'<div class="banner identity" id="identity">{_e(notice)}</div>'


def render_html(report: Report) -> str:
    """The self-contained HTML report (inline CSS, figures as data URIs, no scripts)."""
    p = report.protocol
    title = f"PROMPT Ledger report: {p.get('title') or p.get('study') or report.root.name}"
    first = report.results[0]
    inputs = first.get("inputs") or {}
    backends = sorted({str(r.get("backend")) for r in report.runs}) or ["none recorded"]
    body = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="muted">Study <code>{_e(p.get("study"))}</code> (folder '
        f"<code>{_e(_shown(report.root))}</code>); analysis results from seq "
        f"{_e(first.get('seq'))} "
        f"(trials.csv SHA-256 <code>{_e(str(inputs.get('trials_csv_sha256', '–'))[:16])}…"
        f"</code>); backend{'s' if len(backends) > 1 else ''}: {_e(', '.join(backends))}.</p>",
        _simulated_banner(report),
        _identity_banner(report),
        _section_failed(report),
        _section_identical(report),
        _section_verdicts(report),
        _section_components(report),
        _section_protocol(report),
        _section_plan(report),
        _section_deviations(report),
        _section_flow(report),
        _section_data(report),
        _section_descriptive(report),
        _section_distribution(report),
        _section_model(report),
        _section_exploratory(report),
        _section_posthoc(report),
        _section_verification(report),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>\n"
        + "\n".join(b for b in body if b)
        + "\n</body></html>\n"
    )


# --------------------------------------------------------------------------- terminal


def render_terminal(report: Report, console: Console) -> None:
    """Rich tables: simulated warning, verdicts, descriptive accuracy, exploratory (labelled)."""
    for section in TERMINAL_SECTIONS:
        section(report, console)


def _terminal_banners(report: Report, console: Console) -> None:
    """The simulated-data and session warnings, first."""
    if report.simulated:
        console.print(
            "[bold black on yellow] SIMULATED DATA: responses from the offline "
            "simulated model, not a real model [/]"
        )
    notice = session_notice(report.runs)
    if notice is not None:
        console.print(f"[bold black on yellow] WARNING {escape(notice)} [/]")


def _terminal_verdicts(report: Report, console: Console) -> None:
    """The pre-registered verdicts, each with its caution."""
    colours = {
        "supported": "green",
        "not supported": "white",
        "not computed": "red",
        NOT_APPLICABLE: "yellow",
    }
    verdicts = table(
        "hypothesis",
        "contrast",
        "test",
        "estimate (CI)",
        "p",
        "verdict",
        "decided by",
        title="Pre-registered verdicts",
    )
    for r in report.hypotheses:
        verdict = str(r.get("verdict") or "-")
        shown = f"[{colours.get(verdict, 'white')}]{verdict}[/]"
        caution = verdict_caution(r)
        if caution:
            shown += f"\n[yellow]caution: {escape(caution)}[/]"
        verdicts.add_row(
            str(r.get("hypothesis")),
            _contrast_text(report, r),
            str(r.get("test")),
            _estimate_text(r),
            _p_text(r),
            shown,
            _rule_text(r),
        )
    console.print(verdicts)


def _terminal_seed002(report: Report, console: Console) -> None:
    """The identical-copies banner and seed 002's statistics."""
    copies = identical_banner(report.result(IDENTICAL_ID))
    if copies is not None:
        console.print(f"[bold yellow]{escape(copies)}[/]")
    seed002 = mcq_rows(report)
    if seed002:
        mcq_table = table(
            "hypothesis",
            "test",
            "arms / variants",
            "n",
            "statistic",
            "estimate",
            "interval or p",
            "excluded",
            "verdict",
            title="Seed 002's registered statistics",
        )
        for row in seed002:
            mcq_table.add_row(*(escape(x) for x in row))
        console.print(mcq_table)


def _terminal_qr(report: Report, console: Console) -> None:
    """The qr-bootstrap descriptive tables, when recorded."""
    from analysis import _qr_boot as qr_boot

    for caption, header, rows in qr_boot.report_tables(report.result("descriptive.qr_bootstrap")):
        qr_table = table(*header, title=caption)
        for cells in rows:
            qr_table.add_row(*(escape(x) for x in cells))
        console.print(qr_table)


def _terminal_ddx(report: Report, console: Console) -> None:
    """The ddx outcomes table, when recorded."""
    ddx = report.result("descriptive.ddx")
    if ddx is not None and ddx.get("status") == "ok":
        ddx_table = table(*DDX_HEADER, title=str(ddx.get("title")))
        for ddx_row in ddx_rows(ddx.get("values") or {}):
            ddx_table.add_row(*(escape(x) for x in ddx_row))
        console.print(ddx_table)


def _terminal_covariates(report: Report, console: Console) -> None:
    """The outcomes by factor label (``docs/analysis.md`` §11), when recorded."""
    strata = report.result("descriptive.covariates")  # docs/analysis.md §11
    if strata is not None and strata.get("status") == "ok":
        values = strata.get("values") or {}
        outcomes = [str(o) for o in values.get("outcomes") or []]
        for what, strata_rows in covariate_tables(values):
            strata_table = table(
                "label",
                "value",
                "arm",
                "trials",
                *outcomes,
                title=f"Outcomes by factor label: {what}",
            )
            for strata_row in strata_rows:
                strata_table.add_row(*(escape(x) for x in strata_row))
            console.print(strata_table)


def _unit_level(report: Report) -> tuple[str, str]:
    """(what is counted, what accuracy is) in the descriptive tables' headers."""
    return ("glyphs", "glyph-level accuracy") if report.tumbling else ("items", "accuracy")


def _accuracy_cells(v: dict[str, Any]) -> tuple[str, ...]:
    """(accuracy, Wilson interval, analysed, parse rate, excluded) of one descriptive cell."""
    acc = (v or {}).get("accuracy") or {}
    return (
        _pct(acc.get("estimate")),
        f"{_pct(acc.get('lower'))} – {_pct(acc.get('upper'))}",
        str(v.get("glyphs")),
        _pct(v.get("parse_rate")),
        str(v.get("excluded")),
    )


def _terminal_descriptive(report: Report, console: Console) -> None:
    """Descriptive accuracy by arm."""
    unit, level = _unit_level(report)
    arms_table = table(
        "arm",
        "role",
        "accuracy",
        "Wilson 95% CI",
        unit,
        "parse rate",
        "excluded",
        title=f"Descriptive: {level} by arm",
    )
    arms_result = report.result("descriptive.arms")
    if arms_result and arms_result.get("status") == "ok":
        roles = report.protocol.get("arms") or {}
        for arm, v in sorted((arms_result.get("values") or {}).items()):
            role = str((roles.get(arm) or {}).get("role", ""))
            arms_table.add_row(arm, role, *_accuracy_cells(v))
        console.print(arms_table)
    elif arms_result:
        console.print(f"[red]descriptive.arms not computed: {arms_result.get('error')}[/]")


def _terminal_by_model(report: Report, console: Console) -> None:
    """Descriptive accuracy by arm and model (several models)."""
    unit, level = _unit_level(report)
    by_model = report.result("descriptive.arm_model")
    if by_model and by_model.get("status") == "ok":
        model_table = table(
            "arm",
            "model",
            "accuracy",
            "Wilson 95% CI",
            unit,
            "parse rate",
            "excluded",
            title=f"Descriptive: {level} by arm and model",
        )
        for v in (by_model.get("values") or {}).values():
            model_table.add_row(str(v.get("arm")), str(v.get("model")), *_accuracy_cells(v))
        console.print(model_table)


def _terminal_exploratory(report: Report, console: Console) -> None:
    """The exploratory results (labelled) and the failed ones."""
    explore = table("result", "summary", title=f"{EXPLORATORY}")
    for r in report.by_label("exploratory"):
        explore.add_row(str(r.get("id")), _exploratory_summary(r))
    console.print(explore)
    for r in report.failed:
        if not r.get("hypothesis"):
            console.print(f"[red]{r.get('id')} not computed: {r.get('error')}[/]")


def _terminal_verification(report: Report, console: Console) -> None:
    """The ledger verification: its verdict and the checks not PASS."""
    v = report.verification
    checks = ", ".join(
        f"{c.name} {c.status.value}" for c in v.checks if c.status is not Status.PASS
    )
    console.print(
        ("[green]ledger VERIFIED[/]" if v.ok else "[red]ledger verification FAILED[/]")
        + f": {len(v.checks)} checks"
        + (f" ({checks})" if checks else " all PASS")
    )


TERMINAL_SECTIONS: tuple[Callable[[Report, Console], None], ...] = (
    _terminal_banners,
    _terminal_verdicts,
    _terminal_seed002,
    _terminal_qr,
    _terminal_ddx,
    _terminal_covariates,
    _terminal_descriptive,
    _terminal_by_model,
    _terminal_exploratory,
    _terminal_verification,
)
""":func:`render_terminal`'s sections, in the order printed."""


def _errors_summary(v: dict[str, Any]) -> str:
    share = v.get("canonical_right_share") or {}
    bias = v.get("position_bias") or {}
    right = (
        f"errors answering RIGHT {_pct(share.get('share'))} of {share.get('n', 0)}; "
        if share
        else ""
    )  # tumbling-E only
    return (
        f"accuracy {_pct((v.get('confusion') or {}).get('accuracy'))}; {right}"
        f"answer-vs-truth TVD {_fmt(bias.get('tvd'))}"
    )


def _arm_by_model_summary(v: dict[str, Any]) -> str:
    test = v.get("interaction_test") or {}
    return (
        f"arm × model terms: chi2 {_fmt(test.get('chi2'))}, df {_fmt(test.get('df'))}, "
        f"p {_p(test.get('p'))}" + ("; singular fit" if v.get("singular") else "")
    )


def _pair_summary(v: dict[str, Any]) -> str:
    boot = v.get("bootstrap_diff") or {}
    mc = v.get("mcnemar") or {}
    return (
        f"bootstrap diff {_pp(boot.get('estimate'))} ({_pp(boot.get('lower'))} to "
        f"{_pp(boot.get('upper'))}); McNemar p {_p(mc.get('p'))}"
    )


def _question_run_summary(v: dict[str, Any]) -> str:
    return f"accuracy {_pct(v.get('estimate'))} ({_pct(v.get('lower'))} – {_pct(v.get('upper'))})"


def _per_contrast(v: dict[str, Any], key: str) -> str:
    """``name: level difference; ...`` for each contrast of a per-level result."""
    return ", ".join(
        f"{name}: "
        + "; ".join(f"{level} {_pp((d or {}).get(key))}" for level, d in (per or {}).items())
        for name, per in (v.get("contrasts") or {}).items()
    )


def _by_stimulus_summary(v: dict[str, Any]) -> str:
    return "dismantling differences per probe, " + _per_contrast(v, "difference")


def _by_truth_summary(v: dict[str, Any]) -> str:
    return "accuracy by arm and true answer, " + _per_contrast(v, "estimate")


def _multiplicity_summary(v: dict[str, Any]) -> str:
    holm = (v.get("holm") or {}).get("adjusted") or []
    return "Holm: " + ", ".join(
        f"{h} {_p(p)}" for h, p in zip(v.get("hypotheses") or [], holm, strict=False)
    )


EXPLORATORY_SUMMARIES: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("exploratory.errors.", _errors_summary),
    ("exploratory.arm_by_model", _arm_by_model_summary),
    ("exploratory.pair.", _pair_summary),
    ("exploratory.question_run.", _question_run_summary),
    ("exploratory.by_stimulus", _by_stimulus_summary),
    ("exploratory.by_truth", _by_truth_summary),
    ("exploratory.multiplicity", _multiplicity_summary),
)
"""The terminal's one-line summary of an exploratory result, by id (a prefix ending in ``.``)."""


def _exploratory_summary(r: dict[str, Any]) -> str:
    if r.get("status") != "ok":
        return f"not computed: {r.get('error')}"
    v = r.get("values") or {}
    rid = str(r.get("id", ""))
    for name, summary in EXPLORATORY_SUMMARIES:
        if rid == name or (name.endswith(".") and rid.startswith(name)):
            return summary(v)
    return _fmt(v)[:120]
