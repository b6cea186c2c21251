"""The CONSORT-style trial flow of a study (``docs/reporting.md`` §1).

Every scheduled trial is followed from the locked schedule to the registered analysis:
scheduled → sent or not → responded, given up or left without a final outcome → scored as
parsed, unparseable or refused → excluded (a control, or unparseable under
``analysis.exclude_unparseable``) → analysed. The counts are read from the signed events
(``protocol.locked``'s schedule, ``trial.requested``, ``trial.responded``, ``trial.failed``,
``trial.excluded``, ``trial.scored``) and the analysis dataset of the first ``analysis.result``
(its ``control`` and ``excluded`` columns), per arm and, where the trial ids have those parts,
per arm and model and per arm, model and variant.

The same flow is written three ways, all from one :class:`Flow`: ``analysis/tables/flow.csv``
(the data), ``analysis/figures/flow.svg`` (written here, text only, byte-stable) and
``analysis/figures/flow.png`` (drawn with matplotlib from the same layout, in the report). The
verifier re-derives the counts from the events and compares the CSV, every text line of the SVG
and the report's flow table.
"""

from __future__ import annotations

import csv
import html
import io
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from ledger import Ledger
from runner import StudyError, protocol_event

__all__ = [
    "COUNTS",
    "FLOW_COLUMNS",
    "FLOW_KINDS",
    "Flow",
    "FlowFold",
    "FlowRow",
    "dataset_flags",
    "flow_csv",
    "flow_figure",
    "flow_lines",
    "flow_svg",
    "flow_table_rows",
    "study_flow",
]

COUNTS = (
    "scheduled",
    "excluded_unsent",
    "never_sent",
    "requested",
    "given_up",
    "no_outcome",
    "interrupted_attempts",
    "responded",
    "not_scored",
    "parsed",
    "unparseable",
    "refused",
    "control",
    "excluded_unparseable",
    "analysed",
)
"""The counts of one stratum, in the CSV's column order (``docs/reporting.md`` §1.1)."""
FLOW_COLUMNS = ("level", "arm", "model", "variant", *COUNTS)
"""The header of ``analysis/tables/flow.csv``."""
PARSED = frozenset({"ok", "partial"})
WRAP = 60
"""No by-arm line of a diagram box is longer than this (unless one entry alone is)."""


@dataclass
class FlowRow:
    """The counts of one stratum.

    ``level`` is ``all``, ``arm``, ``arm-model`` or ``arm-model-variant``; the names it does
    not use are empty.
    """

    level: str
    arm: str = ""
    model: str = ""
    variant: str = ""
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))

    def cells(self) -> list[str]:
        """The row as ``flow.csv`` writes it."""
        return [
            self.level,
            self.arm,
            self.model,
            self.variant,
            *(str(self.counts[c]) for c in COUNTS),
        ]


@dataclass
class Flow:
    """The trial flow: the total, then each arm, arm × model and arm × model × variant."""

    rows: list[FlowRow]

    @property
    def total(self) -> FlowRow:
        """The ``all`` row."""
        return self.rows[0]

    def level(self, name: str) -> list[FlowRow]:
        """The rows of one level, in order."""
        return [r for r in self.rows if r.level == name]


def _parts(trial: str) -> tuple[str, str, str]:
    """(arm, model, variant) of a trial id; the parts it does not have are empty."""
    parts = trial.split("|")
    if len(parts) == 5:
        return parts[0], parts[1], parts[3]
    if len(parts) == 4:
        return parts[0], parts[1], ""
    return parts[0], "", ""


FLOW_KINDS = (
    "trial.requested",
    "trial.responded",
    "trial.failed",
    "trial.excluded",
    "trial.scored",
)
"""The event kinds the trial flow reads (besides ``protocol.locked`` and ``analysis.result``)."""

_REQUESTED, _GIVEN_UP, _EXCLUDED = 1, 2, 4


class FlowFold:
    """The trial flow's facts folded from the events, read once in seq order.

    Per trial id a compact record ``[flags, responded seq or -1, interrupted attempts]`` and per
    response seq the scored status; nothing else of an event is kept, so a study of any size is
    followed in memory proportional to its trial count only.
    """

    def __init__(self) -> None:
        self.states: dict[str, list[int]] = {}
        self.statuses: dict[int, str] = {}

    def _state(self, trial: str) -> list[int]:
        found = self.states.get(trial)
        if found is None:
            found = self.states[trial] = [0, -1, 0]
        return found

    def feed(self, kind: str, seq: int, body: dict[str, Any]) -> None:
        """Fold one event (any kind; the ones the flow does not read are ignored)."""
        if kind == "trial.requested":
            self._state(str(body.get("trial")))[0] |= _REQUESTED
        elif kind == "trial.responded":
            self._state(str(body.get("trial")))[1] = seq
        elif kind == "trial.failed":
            s = self._state(str(body.get("trial")))
            if body.get("final") is True:
                s[0] |= _GIVEN_UP
            if body.get("error_type") == "interrupted":
                s[2] += 1
        elif kind == "trial.excluded":
            self._state(str(body.get("trial")))[0] |= _EXCLUDED
        elif kind == "trial.scored":
            self.statuses[int(body["response_seq"])] = str(body.get("status"))

    def flow(self, schedule: Iterable[str], flags: dict[int, int]) -> Flow:
        """The flow of the ``schedule``'s trial ids; ``flags`` from :func:`dataset_flags`."""
        total = FlowRow("all")
        by_key: dict[tuple[str, ...], FlowRow] = {}
        for trial in schedule:
            arm, model, variant = _parts(trial)
            rows = [total, by_key.setdefault(("arm", arm), FlowRow("arm", arm))]
            if model or variant or trial.count("|") >= 3:
                rows.append(
                    by_key.setdefault(("arm-model", arm, model), FlowRow("arm-model", arm, model))
                )
            if trial.count("|") == 4:
                rows.append(
                    by_key.setdefault(
                        ("arm-model-variant", arm, model, variant),
                        FlowRow("arm-model-variant", arm, model, variant),
                    )
                )
            state = self.states.get(trial)
            for name in _stages(state, self.statuses, flags):
                for row in rows:
                    row.counts[name] += 1
            interrupted = state[2] if state is not None else 0
            for row in rows:
                row.counts["interrupted_attempts"] += interrupted
        order = {"arm": 1, "arm-model": 2, "arm-model-variant": 3}
        ordered = sorted(by_key.values(), key=lambda r: (order[r.level], r.arm, r.model, r.variant))
        return Flow([total, *ordered])


CONTROL, EXCLUDED = 1, 2
"""The bits of :func:`dataset_flags`: the trial is a control, the trial is excluded."""


def dataset_flags(trials_csv: bytes) -> dict[int, int]:
    """``response_seq`` -> :data:`CONTROL` | :data:`EXCLUDED` bits of the dataset's trial table."""
    reader = csv.reader(io.StringIO(trials_csv.decode("utf-8")))
    header = next(reader, [])
    where = {name: i for i, name in enumerate(header)}
    need = ("response_seq", "control", "excluded")
    if any(name not in where for name in need):
        missing = ", ".join(n for n in need if n not in where)
        raise StudyError(f"the analysis dataset's trials.csv has no column {missing}")
    at, control, excluded = (where[n] for n in need)
    out: dict[int, int] = {}
    for r in reader:
        if r[at]:
            out[int(r[at])] = (CONTROL if r[control] == "True" else 0) | (
                EXCLUDED if r[excluded] == "True" else 0
            )
    return out


def analysis_trials_csv(log: Ledger) -> bytes:
    """The analysis dataset's ``trials.csv`` (the first ``analysis.result``'s blob)."""
    first = next(iter(log.events("analysis.result")), None)
    if first is None or "trials_csv" not in first.blobs:
        raise StudyError("the trial flow needs the analysis dataset: run 'ledger analyze' first")
    return log.blob(first.blobs["trials_csv"])


def locked_schedule(log: Ledger) -> list[str]:
    """The trial ids of the locked schedule, in execution order."""
    protocol = protocol_event(log)
    if protocol is None:
        raise StudyError("the trial flow needs a locked study (run 'ledger lock')")
    return log.blob(protocol.blobs["schedule"]).decode("utf-8").splitlines()


def study_flow(log: Ledger, fold: FlowFold | None = None) -> Flow:
    """The trial flow of the analysed study in ``log`` (``docs/reporting.md`` §1).

    ``fold``, when given, already holds every event of ``log`` (a caller reading the ledger
    once for several purposes); otherwise the flow's own event kinds are read here.
    """
    schedule = locked_schedule(log)
    if fold is None:
        fold = FlowFold()
        for kind in FLOW_KINDS:
            for e in log.events(kind):
                fold.feed(e.kind, e.seq, e.body)
    return fold.flow(schedule, dataset_flags(analysis_trials_csv(log)))


def _stages(state: list[int] | None, statuses: dict[int, str], flags: dict[int, int]) -> list[str]:
    """The counts one scheduled trial adds 1 to (``state``: a :class:`FlowFold` record)."""
    out = ["scheduled"]
    if state is None or not state[0] & _REQUESTED:
        return [
            *out,
            "excluded_unsent" if state is not None and state[0] & _EXCLUDED else "never_sent",
        ]
    out.append("requested")
    response = state[1]
    if response < 0:
        return [*out, "given_up" if state[0] & _GIVEN_UP else "no_outcome"]
    out.append("responded")
    status = statuses.get(response)
    if status is None:
        return [*out, "not_scored"]
    out.append(
        "parsed" if status in PARSED else "refused" if status == "refused" else "unparseable"
    )
    bits = flags.get(response, 0)
    if bits & CONTROL:
        out.append("control")
    elif bits & EXCLUDED:
        out.append("excluded_unparseable")
    else:
        out.append("analysed")
    return out


def flow_csv(flow: Flow) -> bytes:
    """``analysis/tables/flow.csv``: the header, then every row of the flow."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(FLOW_COLUMNS)
    for row in flow.rows:
        writer.writerow(row.cells())
    return out.getvalue().encode("utf-8")


# ------------------------------------------------------------------------- the diagram


@dataclass(frozen=True)
class Box:
    """One box of the diagram: its text lines, the first its title and count.

    ``side`` boxes sit to the right of the main column.
    """

    lines: tuple[str, ...]
    side: bool


def _by_arm(flow: Flow, count: Any) -> list[str]:
    """The box's by-arm lines: ``by arm: A 28 · B 28 · ...``, wrapped greedily at :data:`WRAP`."""
    entries = [f"{r.arm} {count(r.counts)}" for r in flow.level("arm")]
    lines: list[str] = []
    line = "by arm:"
    for n, entry in enumerate(entries):
        joined = f"{line} {entry}" if n == 0 else f"{line} · {entry}"
        if n == 0 or len(joined) <= WRAP:
            line = joined
        else:
            lines.append(line)
            line = entry
    lines.append(line)
    return lines


def _boxes(flow: Flow) -> list[Box]:
    """The diagram's boxes in drawing order (``docs/reporting.md`` §1.2)."""
    t = flow.total.counts

    def box(title: str, count: Any, details: Sequence[str] = (), side: bool = False) -> Box:
        return Box((f"{title}: {count(t)}", *details, *_by_arm(flow, count)), side)

    return [
        box("Scheduled (the locked schedule)", lambda c: c["scheduled"]),
        box(
            "Not sent",
            lambda c: c["excluded_unsent"] + c["never_sent"],
            [
                f"excluded before sending (trial.excluded): {t['excluded_unsent']}",
                f"never requested: {t['never_sent']}",
            ],
            side=True,
        ),
        box("Requested", lambda c: c["requested"]),
        box(
            "No response",
            lambda c: c["given_up"] + c["no_outcome"],
            [
                f"given up (final trial.failed): {t['given_up']}",
                f"no final outcome (interrupted or pending): {t['no_outcome']}",
                f"attempts interrupted (re-sent or open): {t['interrupted_attempts']}",
            ],
            side=True,
        ),
        box("Responded", lambda c: c["responded"]),
        box("Not scored", lambda c: c["not_scored"], side=True),
        box(
            "Scored",
            lambda c: c["parsed"] + c["unparseable"] + c["refused"],
            [f"parsed {t['parsed']} · unparseable {t['unparseable']} · refused {t['refused']}"],
        ),
        box(
            "Excluded from the registered analysis",
            lambda c: c["control"] + c["excluded_unparseable"],
            [
                f"control trials (analysed separately): {t['control']}",
                f"unparseable (analysis.exclude_unparseable): {t['excluded_unparseable']}",
            ],
            side=True,
        ),
        box("Analysed", lambda c: c["analysed"]),
    ]


def flow_lines(flow: Flow) -> list[str]:
    """Every text line of the diagram, in drawing order (what the verifier compares)."""
    return [line for b in _boxes(flow) for line in b.lines]


_W, _MAIN_X, _MAIN_W, _SIDE_X, _SIDE_W = 960, 20, 440, 500, 440
_LINE, _PAD, _GAP = 16, 8, 22


@dataclass(frozen=True)
class _Placed:
    box: Box
    x: int
    y: int
    w: int
    h: int


def _layout(flow: Flow) -> tuple[list[_Placed], int]:
    """Each box placed: a main box, then its side box level with the arrow below it."""
    placed: list[_Placed] = []
    y = 20
    boxes = _boxes(flow)
    i = 0
    while i < len(boxes):
        main = boxes[i]
        h = 2 * _PAD + _LINE * len(main.lines)
        placed.append(_Placed(main, _MAIN_X, y, _MAIN_W, h))
        y += h + _GAP
        if i + 1 < len(boxes) and boxes[i + 1].side:
            side = boxes[i + 1]
            sh = 2 * _PAD + _LINE * len(side.lines)
            placed.append(_Placed(side, _SIDE_X, y, _SIDE_W, sh))
            y += sh + _GAP
            i += 1
        i += 1
    return placed, y


def _arrows(placed: list[_Placed]) -> list[tuple[float, float, float, float]]:
    """(x1, y1, x2, y2) of each arrow: main box to main box, and the trunk to each side box."""
    mains = [p for p in placed if not p.box.side]
    trunk = _MAIN_X + _MAIN_W / 2
    out: list[tuple[float, float, float, float]] = [
        (trunk, a.y + a.h, trunk, b.y) for a, b in itertools.pairwise(mains)
    ]
    out += [(trunk, p.y + p.h / 2, p.x, p.y + p.h / 2) for p in placed if p.box.side]
    return out


def flow_svg(flow: Flow) -> bytes:
    """``analysis/figures/flow.svg``: the diagram as SVG text (the same bytes for the same flow)."""
    placed, height = _layout(flow)
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{height}" '
        f'viewBox="0 0 {_W} {height}" font-family="DejaVu Sans, sans-serif" font-size="12">',
        "<title>Trial flow (CONSORT-style)</title>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#333333"/></marker>'
        "</defs>",
        f'<rect x="0" y="0" width="{_W}" height="{height}" fill="#ffffff"/>',
    ]
    for x1, y1, x2, y2 in _arrows(placed):
        out.append(
            f'<line x1="{x1:g}" y1="{y1:g}" x2="{x2:g}" y2="{y2:g}" stroke="#333333" '
            'stroke-width="1.2" marker-end="url(#arrow)"/>'
        )
    for p in placed:
        fill = "#f6f8fa" if p.box.side else "#ffffff"
        out.append(
            f'<rect x="{p.x}" y="{p.y}" width="{p.w}" height="{p.h}" fill="{fill}" '
            'stroke="#333333" stroke-width="1"/>'
        )
        for n, line in enumerate(p.box.lines):
            weight = ' font-weight="bold"' if n == 0 else ""
            y = p.y + _PAD + _LINE * n + 12
            out.append(f'<text x="{p.x + _PAD}" y="{y}"{weight}>{html.escape(line)}</text>')
    out.append("</svg>")
    return ("\n".join(out) + "\n").encode("utf-8")


def flow_figure(flow: Flow, dpi: float) -> Figure:
    """The diagram drawn with matplotlib from the layout of :func:`flow_svg` (for the PNG)."""
    placed, height = _layout(flow)
    fig = Figure(figsize=(_W / dpi, height / dpi))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0, _W)
    ax.set_ylim(height, 0)
    ax.axis("off")
    for x1, y1, x2, y2 in _arrows(placed):
        ax.add_patch(
            FancyArrowPatch(
                (x1, y1),
                (x2, y2),
                arrowstyle="-|>",
                mutation_scale=10,
                color="#333333",
                linewidth=1.0,
            )
        )
    for p in placed:
        ax.add_patch(
            Rectangle(
                (p.x, p.y),
                p.w,
                p.h,
                facecolor="#f6f8fa" if p.box.side else "#ffffff",
                edgecolor="#333333",
                linewidth=0.8,
            )
        )
        for n, line in enumerate(p.box.lines):
            ax.text(
                p.x + _PAD,
                p.y + _PAD + _LINE * n + 12,
                line,
                fontsize=12 * 72 / dpi,
                weight="bold" if n == 0 else "normal",
                va="baseline",
                ha="left",
            )
    return fig


TABLE_CAPTION = (
    "Trial flow per arm (CONSORT-style): from the locked schedule to the registered analysis"
)
TABLE_HEADER = (
    "arm",
    "scheduled",
    "not sent",
    "requested",
    "given up",
    "no final outcome",
    "responded",
    "parsed",
    "unparseable",
    "refused",
    "control",
    "excluded",
    "analysed",
)


def flow_table_rows(flow: Flow) -> list[list[str]]:
    """The report's flow table: one row per arm, then ``all arms``."""

    def cells(name: str, c: dict[str, int]) -> list[str]:
        return [
            name,
            *(
                str(v)
                for v in (
                    c["scheduled"],
                    c["excluded_unsent"] + c["never_sent"],
                    c["requested"],
                    c["given_up"],
                    c["no_outcome"],
                    c["responded"],
                    c["parsed"],
                    c["unparseable"],
                    c["refused"],
                    c["control"],
                    c["excluded_unparseable"],
                    c["analysed"],
                )
            ),
        ]

    return [
        *(cells(r.arm, r.counts) for r in flow.level("arm")),
        cells("all arms", flow.total.counts),
    ]


def check_invariants(flow: Flow) -> Iterable[str]:
    """The sums every row must satisfy (a broken one is a bug in the writer: raised)."""
    for r in flow.rows:
        c = r.counts
        sums = (
            ("scheduled", c["excluded_unsent"] + c["never_sent"] + c["requested"]),
            ("requested", c["given_up"] + c["no_outcome"] + c["responded"]),
            ("responded", c["not_scored"] + c["parsed"] + c["unparseable"] + c["refused"]),
            (
                "analysed",
                c["parsed"]
                + c["unparseable"]
                + c["refused"]
                - c["control"]
                - c["excluded_unparseable"],
            ),
        )
        for name, value in sums:
            if c[name] != value:
                yield f"flow row {r.cells()[:4]}: {name} {c[name]} != {value}"
