"""The viewer's plots: SVG drawn by the server with matplotlib, from the viewer's index.

Each plot is one entry of :data:`PLOTS` (a name, a title, a function of the :class:`PlotData`
giving a matplotlib figure or the sentence saying why there is none), drawn as SVG with its
text kept as text (``svg.fonttype = none``: a screen reader reads it, the blinding crawl of
``tests/analysis/test_view.py`` searches it) and no date, so the same index gives the same bytes.
The static bundle writes the same SVG files.

Blinding (``docs/viewer.md``): while the study is blind every plot groups trials by arm code,
never by arm, and the plots that would tie a trial to its arm (the factorial cell means, whose
factor levels name the arm; the flip matrix, whose variants may) say they wait for the reveal.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from analysis.view._index import ViewIndex

__all__ = ["PLOTS", "Plot", "PlotData", "render_svg", "wilson"]


@dataclass(frozen=True)
class PlotData:
    """What a plot may read: the index, whether the study is blind, and the protocol."""

    index: ViewIndex
    blind: bool
    protocol: dict[str, Any]

    @property
    def group(self) -> str:
        """The index column trials are grouped by: the arm after the reveal, else its code."""
        return "arm_code" if self.blind else "arm"


Drawn = tuple[Any, str | None]
"""A figure (or None) and the sentence shown when there is none."""


@dataclass(frozen=True)
class Plot:
    """One plot kind of the viewer: its URL name, title and what it shows."""

    name: str
    title: str
    caption: str
    draw: Callable[[PlotData], Drawn]


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float, float]:
    """The share ``k / n`` and its Wilson score interval (95% by default)."""
    if n <= 0:
        return math.nan, math.nan, math.nan
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return p, max(0.0, centre - half), min(1.0, centre + half)


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def render_svg(fig: Any) -> bytes:
    """``fig`` as SVG bytes: text as text, no date, a fixed id salt (same figure, same bytes)."""
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "ledger-view"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def _label(value: Any) -> str:
    return "not scored yet" if value is None else str(value)


# ---------------------------------------------------------------------- the plots


def _accuracy(data: PlotData) -> Drawn:
    g = data.group
    variant = "variant" if not data.blind else "NULL"
    rows = data.index.query(
        f"SELECT {g} AS grp, {variant} AS variant, model, SUM(n_correct) AS k, "
        f"SUM(n_items) AS n FROM trials WHERE n_items > 0 GROUP BY {g}, {variant}, model "
        f"ORDER BY {g}, {variant}, model"
    )
    if not rows:
        return None, "no scored trial has items with a key (nothing to count as correct)"
    models = sorted({str(r["model"]) for r in rows})
    colours = _colours(len(models))
    fig = _figure(8.6, 0.32 * len(rows) + 1.6)
    ax = fig.add_subplot()
    labels = []
    for y, r in enumerate(reversed(rows)):
        p, lo, hi = wilson(int(r["k"] or 0), int(r["n"] or 0))
        colour = colours[models.index(str(r["model"]))]
        ax.plot([100 * lo, 100 * hi], [y, y], color=colour, lw=2)
        ax.plot([100 * p], [y], "o", color=colour)
        ax.text(100 * hi + 1, y, f"{100 * p:.1f}% ({r['k']}/{r['n']})", va="center", fontsize=7)
        parts = [_label(r["grp"])] + ([str(r["variant"])] if r["variant"] is not None else [])
        labels.append(" · ".join([*parts, str(r["model"])]))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xlim(0, 112)
    ax.set_xlabel("items correct (%), Wilson 95% interval (items pooled, not clustered)")
    who = "arm code" if data.blind else "arm × variant"
    ax.set_title(f"Accuracy by {who} × model")
    for m, c in zip(models, colours, strict=True):
        ax.plot([], [], "o", color=c, label=m)
    ax.legend(loc="lower right", fontsize=7, title="model", title_fontsize=7)
    ax.grid(axis="x", alpha=0.3)
    return fig, None


def _forest_results(data: PlotData) -> list[tuple[Any, ...]]:
    """(seq, body, estimate, lower, upper) of each recorded difference with an estimate."""
    from analysis.statistics import kind_of
    from analysis.statistics._format import contrast

    results = []
    for seq, body, _ in data.index.singles("analysis.result"):
        kind = kind_of(body)  # a rate, a bias, a log odds ratio: not a difference in accuracy
        if not body.get("hypothesis") or (kind is not None and not kind.accuracy_difference):
            continue
        est, lo, hi = contrast(body.get("values") or {})
        if est is not None:
            results.append((seq, body, est, lo, hi))
    return results


def _forest(data: PlotData) -> Drawn:
    results = _forest_results(data)
    if not results:
        return None, (
            "no pre-registered result with an estimate and interval is recorded yet"
            " (ledger analyze records them after unblinding)"
        )
    fig = _figure(8.6, 0.5 * len(results) + 1.5)
    ax = fig.add_subplot()
    xs = [0.0] + [100 * x for _, _, e, lo, hi in results for x in (e, lo, hi) if x is not None]
    span = (max(xs) - min(xs)) or 10.0
    left, right = min(xs) - 0.1 * span, max(xs) + 0.1 * span
    ax.axvline(0, color="#555555", lw=1)
    labels = []
    for y, (_, body, est, lo, hi) in enumerate(reversed(results)):
        verdict = str(body.get("verdict") or body.get("status") or "")
        colour = {"supported": "#1a7f37", "not supported": "#cf222e"}.get(verdict, "#0969da")
        a = left if lo is None else 100 * lo
        b = right if hi is None else 100 * hi
        ax.plot([a, b], [y, y], color=colour, lw=2)
        ax.plot([100 * est], [y], "o", color=colour)
        ax.text(right, y, verdict, va="center", ha="right", fontsize=7, color=colour)
        labels.append(f"{body.get('hypothesis')} ({body.get('test')})")
    ax.set_yticks(range(len(results)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlim(left, right)
    ax.set_xlabel("estimate (×100: percentage points for a difference in shares), 95% CI")
    ax.set_title("Pre-registered hypotheses: estimate and interval")
    ax.grid(axis="x", alpha=0.3)
    return fig, None


def _factor_levels(protocol: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each cell arm's ``{factor: level}`` (arms that declare factors)."""
    arms = protocol.get("arms") if isinstance(protocol.get("arms"), dict) else {}
    assert isinstance(arms, dict)
    return {
        a: v["factors"]
        for a, v in arms.items()
        if isinstance(v, dict) and isinstance(v.get("factors"), dict)
    }


def _factorial_cells(
    rows: list[Any], levels: dict[str, dict[str, Any]], x_factor: str, line_factor: str | None
) -> dict[tuple[str, str, str], list[int]]:
    """(x level, line level, model) -> [items correct, items] summed over the cell arms."""
    cells: dict[tuple[str, str, str], list[int]] = {}
    for r in rows:
        lv = levels.get(str(r["arm"]))
        if lv is None or x_factor not in lv:
            continue
        key = (
            str(lv[x_factor]),
            str(lv.get(line_factor, "")) if line_factor else "",
            str(r["model"]),
        )
        acc = cells.setdefault(key, [0, 0])
        acc[0] += int(r["k"] or 0)
        acc[1] += int(r["n"] or 0)
    return cells


def _factorial_lines(
    ax: Any, cells: dict[tuple[str, str, str], list[int]], xs: list[str], line_factor: str | None
) -> None:
    """One line of Wilson intervals per (line level, model) across the x levels."""
    lines = sorted({(k[1], k[2]) for k in cells})
    for colour, (level, model) in zip(_colours(len(lines)), lines, strict=True):
        pts = [
            (i, *wilson(*cells[(x, level, model)]))
            for i, x in enumerate(xs)
            if (x, level, model) in cells
        ]
        ax.errorbar(
            [p[0] for p in pts],
            [100 * p[1] for p in pts],
            yerr=[[100 * (p[1] - p[2]) for p in pts], [100 * (p[3] - p[1]) for p in pts]],
            marker="o",
            capsize=3,
            color=colour,
            label=f"{line_factor}={level} · {model}" if line_factor else model,
        )


def _factorial(data: PlotData) -> Drawn:
    if data.blind:
        return None, "the factor levels name the arms: shown after blinding.revealed"
    levels = _factor_levels(data.protocol)
    factors = sorted({f for lv in levels.values() for f in lv})
    if not factors:
        return None, "no arm declares factor levels (not a factorial design)"
    rows = data.index.query(
        "SELECT arm, model, SUM(n_correct) AS k, SUM(n_items) AS n FROM trials "
        "WHERE n_items > 0 GROUP BY arm, model"
    )
    x_factor = factors[0]
    line_factor = factors[1] if len(factors) > 1 else None
    cells = _factorial_cells(rows, levels, x_factor, line_factor)
    if not cells:
        return None, "no factorial arm has scored items with a key"
    xs = list(dict.fromkeys(k[0] for k in sorted(cells)))
    fig = _figure(8.6, 4.2)
    ax = fig.add_subplot()
    _factorial_lines(ax, cells, xs, line_factor)
    ax.set_xticks(range(len(xs)))
    ax.set_xticklabels(xs, rotation=20, fontsize=8)
    ax.set_xlabel(x_factor)
    ax.set_ylabel("items correct (%), Wilson 95%")
    interaction = (
        f": {x_factor} × {line_factor} (lines not parallel = interaction)" if line_factor else ""
    )
    ax.set_title("Factorial cell means" + interaction)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return fig, None


def _answers(data: PlotData, wrong_only: bool) -> dict[str, dict[tuple[str, str], int]]:
    """Counts of (key, answer) of short-key items per group (arm code while blind), in SQL."""
    g = data.group
    rows = data.index.query(
        f"SELECT t.{g} AS grp, i.truth, i.answer, COUNT(*) AS n FROM items i "
        "JOIN trials t ON t.h = i.h WHERE i.truth IS NOT NULL AND length(i.truth) <= 16 "
        + ("AND i.correct = 0 " if wrong_only else "")
        + f"GROUP BY t.{g}, i.truth, i.answer"
    )
    out: dict[str, dict[tuple[str, str], int]] = {}
    for r in rows:
        pair = (str(r["truth"]), "(none)" if r["answer"] is None else str(r["answer"]))
        counts = out.setdefault(_label(r["grp"]), {})
        counts[pair] = counts.get(pair, 0) + int(r["n"])
    return out


def _position(data: PlotData) -> Drawn:
    found = _answers(data, wrong_only=False)
    labels = sorted({k for counts in found.values() for k, _ in counts})
    if not found or not 2 <= len(labels) <= 12:
        return None, (
            "position bias needs items whose keys are a few option labels "
            f"(found {len(labels)} distinct keys)"
        )
    groups = sorted(found)[:12]
    colours = _colours(len(groups))
    fig = _figure(8.6, 4.2)
    ax = fig.add_subplot()
    width = 0.8 / len(groups)
    for j, (grp, colour) in enumerate(zip(groups, colours, strict=True)):
        counts = found[grp]
        total = sum(counts.values())
        bias = [
            100
            * (
                sum(n for (_, a), n in counts.items() if a == lab)
                - sum(n for (k, _), n in counts.items() if k == lab)
            )
            / total
            for lab in labels
        ]
        ax.bar([i + j * width for i in range(len(labels))], bias, width, color=colour, label=grp)
    ax.axhline(0, color="#555555", lw=1)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))])
    ax.set_xticklabels(labels)
    ax.set_xlabel("option label")
    ax.set_ylabel("share answered − share keyed (pp)")
    ax.set_title("Position bias: how much more often each label is answered than it is the key")
    ax.legend(fontsize=7, title="arm code" if data.blind else "arm", title_fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    return fig, None


def _phenotype(data: PlotData) -> Drawn:
    found = _answers(data, wrong_only=True)
    if not found:
        return None, "no wrong answer to items with short keys"
    groups = sorted(found)[:6]
    fig = _figure(8.6, 3.2 * math.ceil(len(groups) / 3))
    cols = min(3, len(groups))
    for n, grp in enumerate(groups):
        counts = found[grp]
        keys = _top(counts, 0)
        answers = _top(counts, 1)
        grid = [[counts.get((kk, aa), 0) for aa in answers] for kk in keys]
        ax = fig.add_subplot(math.ceil(len(groups) / cols), cols, n + 1)
        ax.imshow(grid, cmap="Reds", aspect="auto")
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if v:
                    ax.text(j, i, str(v), ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(answers)))
        ax.set_xticklabels(answers, rotation=45, fontsize=7)
        ax.set_yticks(range(len(keys)))
        ax.set_yticklabels(keys, fontsize=7)
        ax.set_title(f"{grp}: {sum(counts.values())} wrong", fontsize=8)
        ax.set_xlabel("answered", fontsize=7)
        ax.set_ylabel("key", fontsize=7)
    fig.suptitle("Error phenotype: the wrong answers, key × answer")
    return fig, None


def _flip_share(units: dict[tuple[Any, ...], dict[str, bool]], a: str, b: str) -> float:
    """The % of units with both variants whose correctness differs between them (NaN: none)."""
    both = [u for u in units.values() if a in u and b in u]
    return 100 * sum(u[a] != u[b] for u in both) / len(both) if both else math.nan


def _flips(data: PlotData) -> Drawn:
    if data.blind:
        return None, "variants may point to arms: shown after blinding.revealed"
    rows = data.index.query(
        "SELECT arm, model, stimulus, rep, variant, correct FROM trials "
        "WHERE variant IS NOT NULL AND correct IS NOT NULL"
    )
    units: dict[tuple[Any, ...], dict[str, bool]] = {}
    for r in rows:
        units.setdefault((r["arm"], r["model"], r["stimulus"], r["rep"]), {})[str(r["variant"])] = (
            r["correct"] == "correct"
        )
    variants = sorted({v for u in units.values() for v in u})
    if len(variants) < 2:
        return None, "the study has fewer than two variants of an item (no flips to count)"
    grid = [[_flip_share(units, a, b) for b in variants] for a in variants]
    fig = _figure(6.4, 5.2)
    ax = fig.add_subplot()
    shown = ax.imshow(grid, cmap="Blues", vmin=0)
    for i, line in enumerate(grid):
        for j, v in enumerate(line):
            if not math.isnan(v):
                ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(variants)))
    ax.set_xticklabels(variants, rotation=45, fontsize=7)
    ax.set_yticks(range(len(variants)))
    ax.set_yticklabels(variants, fontsize=7)
    fig.colorbar(shown, ax=ax, label="% of (arm, model, item, replicate) whose correctness flips")
    ax.set_title("Flip matrix: correctness changes between variants of the same item")
    return fig, None


def _top(counts: dict[tuple[str, str], int], side: int, n: int = 10) -> list[str]:
    """The ``n`` most frequent keys (``side`` 0) or answers (1) of ``counts``, sorted."""
    totals: dict[str, int] = {}
    for pair, k in counts.items():
        totals[pair[side]] = totals.get(pair[side], 0) + k
    return sorted(sorted(totals, key=lambda v: -totals[v])[:n])


def _colours(n: int) -> list[str]:
    base = [
        "#0969da",
        "#cf222e",
        "#1a7f37",
        "#8250df",
        "#bc4c00",
        "#1b7c83",
        "#6e7781",
        "#bf3989",
        "#9a6700",
        "#0550ae",
        "#116329",
        "#a40e26",
    ]
    return [base[i % len(base)] for i in range(n)]


PLOTS: tuple[Plot, ...] = (
    Plot(
        "forest",
        "Pre-registered hypotheses",
        "each recorded hypothesis result with an estimate: the estimate, its interval and the "
        "verdict",
        _forest,
    ),
    Plot(
        "accuracy",
        "Accuracy by arm × variant × model",
        "items correct per arm (arm code while blind), variant and model, Wilson 95%",
        _accuracy,
    ),
    Plot(
        "factorial",
        "Factorial cell means",
        "items correct per level of the first factor, one line per level of the second",
        _factorial,
    ),
    Plot(
        "position",
        "Position bias",
        "per option label, the share of answers minus the share of keys",
        _position,
    ),
    Plot(
        "phenotype", "Error phenotype", "the wrong answers: which key drew which answer", _phenotype
    ),
    Plot(
        "flips",
        "Flip matrix",
        "for each pair of variants, the share of units whose correctness differs",
        _flips,
    ),
)
"""The plot kinds, in the order the plots page shows them."""
