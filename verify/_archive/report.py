"""The ``report`` check: what readers look at says what the events say (archive-format §7).

``analysis/report.html`` is parsed with :mod:`html.parser` (after refusing what the writer never
writes: scripts, comments, links, forms, event handlers, style attributes, any resource that is
not an embedded PNG) and compared with the signed events:

* the stylesheet is the one of archive format 1 (its SHA-256 is pinned);
* the title, the SIMULATED DATA banner and the failed-results banner;
* every table but the last (the writer's own verifier run at report time, only signed): its
  caption, header and every cell, re-derived from ``protocol.locked``, ``protocol.amended``,
  ``run.started`` and the ``analysis.result`` bodies with the number formats of §7;
* every figure: the image embedded in the HTML is byte for byte the file
  ``analysis/figures/<name>.png`` the format names for its place, with its title and caption; each
  PNG is well formed (chunks, CRCs, no text chunks, image data of exactly the stated size) and
  every figure file is embedded once.

The pixels of a figure are not recomputed (that needs the writer's plotting code): a figure
redrawn and embedded consistently, then re-signed, is caught only by outside evidence.
"""

from __future__ import annotations

import base64
import binascii
import csv
import hashlib
import io
import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from verify import _plan, _qrboot
from verify import _statistics as statistics
from verify._archive.flow import FLOW_FIGURE, flow_table, has_flow
from verify._archive.preflight import identity_notice
from verify._archive.view import Archive
from verify._ledgerfile import _State
from verify._recompute.archive import TUMBLING_E
from verify._recompute.dataset import _labels as parser_labels
from verify._report import CHECK_NAMES, Check
from verify._statistics._cells import fmt as _fmt
from verify._statistics._cells import obj as _obj
from verify._statistics._cells import p_value as _p
from verify._statistics._cells import pct as _pct
from verify._statistics._cells import pp as _pp

__all__ = ["REPORT", "STYLESHEET_SHA256", "check_report", "expected_figures", "figure_names"]

REPORT = "analysis/report.html"
STYLESHEET_SHA256 = "62a8aa12229232ebc7c5ec82a4e5cd4889cab9097cb2e6b0066a624af9aefde1"
"""SHA-256 of the text of the report's one ``<style>`` element (archive format 1)."""

EXPLORATORY = "Exploratory (not pre-registered)"
SENSITIVITY = "Sensitivity (not registered; never changes a verdict)"
SENSITIVITY_MODELS = {
    "registered": "registered random intercept, Satterthwaite t",
    "probe_by_arm": "probe-by-arm",
    "probe_by_arm_arm_residual": "probe-by-arm, residual variance per arm",
}
OTHER_LABEL = "other/none"
MODEL_FIELDS = ["model", "provider", "id", "max_tokens", "temperature", "top_p", "top_k", "stop"]
"""Columns of the protocol's models table (a study with ``[models]``, prompts.md §5)."""
_DATA_PNG = "data:image/png;base64,"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CHUNKS = frozenset(
    {
        b"IHDR",
        b"PLTE",
        b"tRNS",
        b"pHYs",
        b"IDAT",
        b"IEND",
        b"gAMA",
        b"cHRM",
        b"sRGB",
        b"iCCP",
        b"bKGD",
    }
)
_MAX_PIXELS = 40_000_000
_ALLOWED_TAGS = frozenset(
    {
        "html",
        "head",
        "meta",
        "title",
        "style",
        "body",
        "h1",
        "h2",
        "h3",
        "p",
        "div",
        "span",
        "code",
        "br",
        "table",
        "caption",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "figure",
        "img",
        "figcaption",
    }
)
_VOID = frozenset({"br", "img", "meta"})
_BLOCKS = frozenset({"h1", "h2", "h3", "p"})
_ALLOWED_ATTRS = {
    "html": {"lang"},
    "meta": {"charset"},
    "div": {"class", "id"},
    "span": {"class"},
    "p": {"class"},
    "td": {"class"},
    "img": {"src", "alt"},
}


# ------------------------------------------------------------------------------ figures


POSTHOC = "Post hoc (declared after unblinding; not pre-registered)"
BY_STIMULUS_INTRO = (
    "Each pair of arms where the second has a strict subset of the first's components (the"
    " difference is the removed components), on each probe: Welch's t on the trials there."
    " Not adjusted for the number of probes and pairs: hypotheses for a powered replicatio"
    "n, as the paper's per-probe dismantling findings are."
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


DISTRIBUTION_INTRO = (
    "Each analysable trial's accuracy (its share of glyphs read correctly), counted i"
    "n ten bins: an arm whose trials sit near ceiling and near collapse at once (the "
    "paper's bimodal arm B) shows at both ends, which its mean hides."
)


def _distribution(a: Archive, first: int | None, arms: list[str]) -> list[list[str]] | None:
    """analysis.md "Trial-level distribution": per arm, ten accuracy bins of trials.csv."""
    data = a.blob(a.blob_ref(first, "trials_csv")) if first is not None else None
    if data is None:
        return None
    try:
        trials = list(csv.DictReader(io.StringIO(data.decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error):
        return None
    rows = []
    for arm in arms:
        acc: list[float] = []
        for t in trials:
            if t.get("arm") == arm and t.get("control") == "False" and t.get("excluded") == "False":
                try:
                    acc.append(float(t.get("accuracy") or "nan"))
                except ValueError:
                    return None
        bins = [0] * 10
        for value in acc:
            bins[min(9, max(0, int(value * 10)))] += 1
        rows.append(
            [arm, str(len(acc)), _pct(sum(acc) / len(acc)) if acc else "–", *(str(b) for b in bins)]
        )
    return rows


def _component_effect(h: dict[str, Any], result: dict[str, Any]) -> str | None:
    """What a computed hypothesis says of its components (its kind's rule), or None."""
    if result.get("status") != "ok":
        return None
    return statistics.component_effect(h, result)


def _component_class(effects: set[str]) -> str:
    """analysis.md "Component classes": the class the evidence of one unit gives."""
    if {"benefit", "harm"} <= effects:
        return "task-dependent"
    for effect, cls in (("benefit", "active"), ("harm", "harmful"), ("no effect", "inactive")):
        if effect in effects:
            return cls
    return "not established"


def _added(arms: dict[str, Any], a: str, b: str) -> list[str]:
    """The components arm a has and arm b lacks."""
    have = set(_obj(arms.get(a)).get("components") or [])
    lack = set(_obj(arms.get(b)).get("components") or [])
    return sorted(str(c) for c in have - lack)


def _component_classes(protocol: dict[str, Any], results: list[dict[str, Any]]) -> list[list[str]]:
    """analysis.md "Component classes": one row (unit, evidence, class) per unit."""
    arms = _obj(protocol.get("arms"))
    plan = {_obj(h).get("id"): _obj(h) for h in protocol.get("hypotheses") or []}
    units: dict[str, list[tuple[str, str]]] = {}
    for r in results:
        h = plan.get(r.get("hypothesis"))
        effect = None if h is None else _component_effect(h, r)
        if h is None or effect is None:
            continue
        contrast = h.get("contrast") or ["", ""]
        a, b = str(contrast[0]), str(contrast[1])
        added = _added(arms, a, b)
        if not added:
            continue
        stimuli = h.get("stimuli")
        where = f" on {', '.join(str(x) for x in stimuli)}" if stimuli else ""
        units.setdefault(" + ".join(added), []).append(
            (f"{h.get('id')} ({a} vs {b}{where}): {effect}", effect)
        )
    return [
        [unit, "; ".join(t for t, _ in evidence), _component_class({e for _, e in evidence})]
        for unit, evidence in units.items()
    ]


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)


def _arms(a: Archive) -> list[str]:
    arms = a.protocol.get("arms")
    return sorted(arms) if type(arms) is dict else []


def _tumbling(protocol: dict[str, Any]) -> bool:
    """A tumbling-E study: items are a chart's glyphs, with rows and control trials (§7)."""
    response = protocol.get("response")
    parser = response.get("parser", TUMBLING_E) if isinstance(response, dict) else TUMBLING_E
    return bool(parser == TUMBLING_E)


def expected_figures(a: Archive) -> list[tuple[str, str, str]]:
    """``(file name, title, caption)`` of each figure, in the report's order (§7).

    A single-answer study (any parser but tumbling-E) has no chart rows, so no by-row figure,
    and its captions speak of trials; a free-text parser (no label set) has no confusion
    matrices.
    """
    tumbling = _tumbling(a.protocol)
    out = [(FLOW_FIGURE, FLOW_TITLE, FLOW_CAPTION)] if has_flow(a) else []
    out += [
        (
            "accuracy_by_arm.png",
            "Accuracy by arm",
            "Glyph-level accuracy of each arm over the analysable trials, with Wilson 95% "
            "confidence intervals (descriptive)."
            if tumbling
            else "Accuracy of each arm over the analysable trials (one answer each), with "
            "Wilson 95% "
            "confidence intervals (descriptive).",
        ),
        (
            "accuracy_arm_stimulus.png",
            "Accuracy by arm and stimulus",
            "Glyph-level accuracy in each arm × stimulus cell (descriptive)."
            if tumbling
            else "Accuracy in each arm × stimulus cell (descriptive).",
        ),
        (
            "forest_contrasts.png",
            "Pre-registered contrasts",
            "Estimate and confidence interval of each pre-registered contrast in percentage points "
            "(a one-sided interval runs to the edge as an arrow); red dashes mark a pre-registered "
            "minimum difference; the verdict is at the right. Equivalence tests show the largest "
            "per-stimulus |difference| against the ±margin band.",
        ),
    ]
    if tumbling:
        out.append(
            (
                "accuracy_by_row.png",
                f"{EXPLORATORY}: accuracy by chart row",
                f"{EXPLORATORY}. Accuracy by chart row (1–11) for each arm, Wilson 95% CIs.",
            )
        )
    if parser_labels(a.protocol) is None:
        return out
    response = a.protocol.get("response")
    parser = response.get("parser") if isinstance(response, dict) else None
    other = (
        "an orientation"
        if tumbling or parser == "orientation-word"
        else "one of the parser's labels"
    )
    for arm in _arms(a):
        out.append(
            (
                f"confusion_{_safe(arm)}.png",
                f"{EXPLORATORY}: confusion matrix, arm {arm}",
                f"{EXPLORATORY}. Truth (rows) × answer (columns) for arm {arm}, counts and share "
                f"of each truth row; '{OTHER_LABEL}' counts answers that are not {other}.",
            )
        )
    return out


FLOW_TITLE = "Trial flow (CONSORT-style)"
FLOW_CAPTION = (
    "Every scheduled trial from the locked schedule to the registered analysis, "
    "counted from the signed events (docs/reporting.md §1 of the tool); the same "
    "diagram is analysis/figures/flow.svg and its numbers analysis/tables/flow.csv."
)


def figure_names(a: Archive) -> list[str]:
    """The file names ``analysis/figures/`` may hold (§1)."""
    return [name for name, _, _ in expected_figures(a)]


class _PngProblem(Exception):
    """Why a PNG is refused."""


def _png_chunk(data: bytes, pos: int) -> tuple[bytes, bytes, int]:
    """(kind, payload, end) of the chunk at ``pos``: whole, its CRC right, an image chunk."""
    if pos + 12 > len(data):
        raise _PngProblem(f"chunk at byte {pos} is truncated")
    (length,) = struct.unpack(">I", data[pos : pos + 4])
    kind = data[pos + 4 : pos + 8]
    end = pos + 12 + length
    if end > len(data):
        raise _PngProblem(f"chunk {kind!r} at byte {pos} runs past the end of the file")
    payload = data[pos + 8 : pos + 8 + length]
    (crc,) = struct.unpack(">I", data[end - 4 : end])
    if zlib.crc32(kind + payload) != crc:
        raise _PngProblem(f"chunk {kind!r} at byte {pos} has a wrong CRC")
    if kind not in _PNG_CHUNKS:
        raise _PngProblem(
            f"chunk {kind!r} at byte {pos} is not an image chunk (no text or private data)"
        )
    return kind, payload, end


def _png_expected(payload: bytes, seen: list[bytes]) -> int:
    """The bytes the image data decode to, by IHDR (the first chunk, once, supported)."""
    if seen or len(payload) != 13:
        raise _PngProblem("IHDR is repeated or malformed")
    width, height, depth, colour = struct.unpack(">IIBB", payload[:10])
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(colour)
    if channels is None or depth not in (1, 2, 4, 8, 16) or payload[12] != 0:
        raise _PngProblem("IHDR has an unsupported colour type, depth or interlace")
    if not 0 < width * height <= _MAX_PIXELS:
        raise _PngProblem(f"IHDR says {width} x {height} pixels")
    return int(height * (1 + (width * channels * depth + 7) // 8))


def _png_walk(data: bytes) -> None:
    pos = len(_PNG_SIGNATURE)
    seen: list[bytes] = []
    idat = zlib.decompressobj()
    raw = 0
    expected = -1
    while pos < len(data):
        kind, payload, end = _png_chunk(data, pos)
        if not seen and kind != b"IHDR":
            raise _PngProblem("the first chunk is not IHDR")
        if kind == b"IHDR":
            expected = _png_expected(payload, seen)
        if kind == b"IDAT":
            raw += len(idat.decompress(payload, max(expected - raw + 1, 1)))
            if raw > expected or idat.unconsumed_tail:
                raise _PngProblem("the image data decode to more bytes than IHDR states")
        seen.append(kind)
        pos = end
        if kind == b"IEND":
            break
    if not seen or seen[-1] != b"IEND" or pos != len(data):
        raise _PngProblem("does not end with IEND (or has bytes after it)")
    if raw != expected or not idat.eof:
        raise _PngProblem(f"the image data decode to {raw} bytes, IHDR states {expected}")


def png_problem(data: bytes) -> str | None:
    """Why ``data`` is not a well-formed PNG without text chunks, or ``None``."""
    if not data.startswith(_PNG_SIGNATURE):
        return "does not start with the PNG signature"
    try:
        _png_walk(data)
    except _PngProblem as exc:
        return str(exc)
    return None


# ------------------------------------------------------------------------------ parsing


@dataclass
class _Table:
    line: int
    caption: str = ""
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    row_lines: list[int] = field(default_factory=list)
    verdict_classes: list[list[str]] = field(default_factory=list)


@dataclass
class _Figure:
    line: int
    src: str
    alt: str
    caption: str = ""


class _ReportParser(HTMLParser):
    """Collects what the report check compares, and every construct the writer never writes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.tables: list[_Table] = []
        self.figures: list[_Figure] = []
        self.styles: list[str] = []
        self.banners: list[tuple[str, str]] = []  # (class, text)
        self.blocks: list[tuple[str, str, int]] = []  # (h1/h2/h3/p/div, text, line) in order
        self.title = ""
        self._stack: list[str] = []
        self._text: list[str] | None = None  # text of the cell, caption... being read
        self._table: _Table | None = None
        self._row: list[str] | None = None
        self._in = ""
        self._banner: list[Any] | None = None
        self._block: tuple[str, list[str], int] | None = None

    def _where(self) -> str:
        return f"{REPORT} line {self.getpos()[0]}"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _ALLOWED_TAGS:
            self.problems.append(f"{self._where()}: <{tag}> is not an element of the report")
            return
        self._check_attributes(tag, attrs)
        values = dict(attrs)
        if tag not in _VOID:
            self._stack.append(tag)
        opener = _OPENERS.get(tag)
        if opener is not None:
            opener(self, values)
        self._open_block(tag, values)
        if tag == "meta" and (values.get("charset") or "").lower() != "utf-8":
            self.problems.append(f"{self._where()}: <meta> other than charset utf-8")

    def _check_attributes(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {k for k, _ in attrs}
        extra = sorted(names - _ALLOWED_ATTRS.get(tag, {"class"} if tag != "code" else set()))
        if extra:
            self.problems.append(
                f"{self._where()}: <{tag}> has attribute {extra[0]!r}, which the report never uses"
            )

    def _open_block(self, tag: str, values: dict[str, str | None]) -> None:
        """A heading, paragraph or banner outside the tables starts a block."""
        is_banner = tag == "div" and "banner" in (values.get("class") or "").split()
        if (tag in _BLOCKS or is_banner) and self._table is None:
            if self._block is not None:
                self.problems.append(f"{self._where()}: <{tag}> inside <{self._block[0]}>")
            self._block = (tag, [], self.getpos()[0])

    def _open_table(self, values: dict[str, str | None]) -> None:
        self._table = _Table(self.getpos()[0])

    def _open_row(self, values: dict[str, str | None]) -> None:
        if self._table is not None:
            self._row = []
            self._table.row_lines.append(self.getpos()[0])
            self._table.verdict_classes.append([])

    def _open_text(self, values: dict[str, str | None]) -> None:
        self._text = []

    def _open_span(self, values: dict[str, str | None]) -> None:
        cls = values.get("class") or ""
        if self._table is not None and self._row is not None and cls.startswith("verdict "):
            self._table.verdict_classes[-1].append(cls)

    def _open_img(self, values: dict[str, str | None]) -> None:
        self.figures.append(
            _Figure(self.getpos()[0], values.get("src") or "", values.get("alt") or "")
        )

    def _open_div(self, values: dict[str, str | None]) -> None:
        if "banner" in (values.get("class") or "").split():
            self._banner = [values.get("class") or "", []]

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag not in _ALLOWED_TAGS or tag in _VOID:
            return
        if tag in self._stack:
            while self._stack and self._stack.pop() != tag:
                pass
        text = "".join(self._text) if self._text is not None else ""
        closer = _CLOSERS.get(tag)
        if closer is not None:
            closer(self, text)
        if self._block is not None and tag == self._block[0]:
            kind, parts, line = self._block
            self.blocks.append(("div" if kind == "div" else kind, "".join(parts), line))
            self._block = None
        if tag in _TEXT_TAGS:
            self._text = None

    def _close_cell(self, text: str) -> None:
        if self._row is not None:
            self._row.append(text)

    def _close_row(self, text: str) -> None:
        if self._table is not None and self._row is not None:
            self._table.rows.append(self._row)
            self._row = None

    def _close_caption(self, text: str) -> None:
        if self._table is not None:
            self._table.caption = text

    def _close_table(self, text: str) -> None:
        table = self._table
        if table is None:
            return
        if table.rows:
            table.header = table.rows.pop(0)
            table.row_lines.pop(0)
            table.verdict_classes.pop(0)
        self.tables.append(table)
        self._table = None

    def _close_title(self, text: str) -> None:
        self.title = text

    def _close_figcaption(self, text: str) -> None:
        if self.figures:
            self.figures[-1].caption = text

    def _close_style(self, text: str) -> None:
        self.styles.append(text)

    def _close_div(self, text: str) -> None:
        if self._banner is not None:
            self.banners.append((self._banner[0], "".join(self._banner[1])))
            self._banner = None

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)
        if self._banner is not None:
            self._banner[1].append(data)
        if self._block is not None:
            self._block[1].append(data)
        elif (
            self._table is None
            and data.strip()
            and "style" not in self._stack[-1:]
            and ("title" not in self._stack[-1:] and "figcaption" not in self._stack[-1:])
        ):
            self.problems.append(
                f"{self._where()}: text outside any heading, paragraph or table: "
                f"{data.strip()[:60]!r}"
            )

    def handle_comment(self, data: str) -> None:
        self.problems.append(f"{self._where()}: a comment, which the report never has")

    def handle_decl(self, decl: str) -> None:
        if decl.lower() != "doctype html":
            self.problems.append(f"{self._where()}: declaration <!{decl[:40]}>")

    def handle_pi(self, data: str) -> None:
        self.problems.append(f"{self._where()}: a processing instruction")

    def unknown_decl(self, data: str) -> None:
        self.problems.append(f"{self._where()}: a marked section <![{data[:40]}")


_TEXT_TAGS = ("td", "th", "caption", "title", "h1", "figcaption", "style")
"""Elements whose text the parser collects."""
_OPENERS: dict[str, Callable[[_ReportParser, dict[str, str | None]], None]] = {
    "table": _ReportParser._open_table,
    "tr": _ReportParser._open_row,
    **dict.fromkeys(_TEXT_TAGS, _ReportParser._open_text),
    "span": _ReportParser._open_span,
    "img": _ReportParser._open_img,
    "div": _ReportParser._open_div,
}
"""What opening each element does (besides the stack, blocks and the meta check)."""
_CLOSERS: dict[str, Callable[[_ReportParser, str], None]] = {
    "td": _ReportParser._close_cell,
    "th": _ReportParser._close_cell,
    "tr": _ReportParser._close_row,
    "caption": _ReportParser._close_caption,
    "table": _ReportParser._close_table,
    "title": _ReportParser._close_title,
    "figcaption": _ReportParser._close_figcaption,
    "style": _ReportParser._close_style,
    "div": _ReportParser._close_div,
}
"""What closing each element does with its collected text."""

# ------------------------------------------------------------------------------ formats (§7)


def _cell(value: Any) -> str:
    return value if isinstance(value, str) else _fmt(value)


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


NOT_APPLICABLE = "not applicable"  # analysis.md §3: a test that does not apply, with a reason


def _inapplicable(result: dict[str, Any]) -> str:
    reason = _obj(result.get("values")).get("reason")
    return f"not applicable: {reason or 'no reason given'}"


def _estimate_text(result: dict[str, Any]) -> str:
    if result.get("status") == "failed":
        return "not computed"
    if result.get("status") == NOT_APPLICABLE:
        return NOT_APPLICABLE
    return statistics.estimate_text(result.get("test"), _obj(result.get("values")))


def _p_text(result: dict[str, Any]) -> str:
    v = _obj(result.get("values"))
    if result.get("status") == "failed" or "p_raw" not in v:
        return "–"
    text = f"p = {_p(v.get('p_raw'))}"
    if "p_adjusted" in v:
        text += f"; {v.get('correction')}-adjusted {_p(v.get('p_adjusted'))}"
        if v.get("family"):
            text += f" (family {v['family']}, {v.get('family_size', '?')} tests)"
    return text


def _rule_text(result: dict[str, Any]) -> str:
    if result.get("status") == "failed":
        return f"not computed: {result.get('error') or 'unknown error'}"
    if result.get("status") == NOT_APPLICABLE:
        return _inapplicable(result)
    return str(_obj(result.get("decided_by")).get("rule", "–"))


def _chi_text(chi: Any) -> str:
    if not isinstance(chi, dict) or not chi:
        return "–"
    if chi.get("error"):
        return _cell(chi["error"])
    return f"chi2 {_fmt(chi.get('chi2'))}, p {_p(chi.get('p'))}"


def _registered_row(h: dict[str, Any]) -> list[str]:
    """One registered hypothesis as the protocol table shows it."""
    return [
        _cell(h.get("id")),
        " vs ".join(map(str, h.get("contrast") or []))
        or f"arm {h.get('arm')}: {', '.join(map(str, h.get('variants') or []))}",
        _cell(h.get("test")),
        _cell(h.get("sides")),
        _cell(h.get("alpha")),
        _cell(h.get("correction")),
        _cell(h.get("family")),
        "–" if h.get("min_difference_pp") is None else f"{h['min_difference_pp']} pp",
        "–" if h.get("margin_pp") is None else f"±{h['margin_pp']} pp",
    ]


class _Expect:
    """The report's content as the events give it."""

    def __init__(self, a: Archive) -> None:
        self.a = a
        self.protocol = a.protocol
        self.results = [{"seq": s, **a.body(s)} for s in a.of_kind("analysis.result")]
        self.posthoc = [{"seq": s, **a.body(s)} for s in a.of_kind("analysis.posthoc")]
        self.amendments = [
            {"seq": s, "time": (a.envs[s] or {}).get("time"), **a.body(s)}
            for s in a.of_kind("protocol.amended")
        ]
        self.runs = [{"seq": s, **a.body(s)} for s in a.of_kind("run.started")]
        self.arms = _arms(a)
        self.tumbling = _tumbling(a.protocol)
        declared = a.protocol.get("models")
        order = a.protocol.get("model_order")
        from verify._recompute.dataset import trial_models

        self.models: list[str] = trial_models(
            a.protocol,
            (
                ([str(m) for m in order] if isinstance(order, list) else sorted(declared))
                if isinstance(declared, dict)
                else []
            ),
        )

    def result(self, rid: str) -> dict[str, Any] | None:
        return next((r for r in self.results if r.get("id") == rid), None)

    def _plan_of(self, result: dict[str, Any]) -> dict[str, Any]:
        hyps = self.protocol.get("hypotheses")
        plan: Any = {}
        hid = result.get("hypothesis")
        if isinstance(hyps, list):
            plan = next((h for h in hyps if _get(h, "id") == hid), None)
            if plan is None and isinstance(hid, str) and "@" in hid:  # one model's verdict
                plan = next((h for h in hyps if _get(h, "id") == hid.rsplit("@", 1)[0]), {})
            plan = plan or {}
        return _obj(plan)

    def _contrast_text(self, result: dict[str, Any]) -> str:
        plan = self._plan_of(result)
        if plan.get("arm"):  # a test of one arm: its kind says how (mcq-statistics.md §11)
            return statistics.arm_text(plan)
        contrast = _get(plan, "contrast") or []
        if not isinstance(contrast, list) or len(contrast) != 2:
            return ""
        sides = _get(plan, "sides") or "two-sided"
        return f"{contrast[0]} vs {contrast[1]} ({sides})"

    def _failed_text(self, result: dict[str, Any]) -> str:
        return (
            f"{result.get('title') or result.get('id')} ({result.get('id')}) could not be "
            f"computed: {result.get('error') or 'unknown error'}"
        )

    def _plan(self) -> tuple[dict[str, Any], int, str] | None:
        """The locked plan record, its ``artifact.locked`` seq and SHA-256 (planning.md §8)."""
        versions = self.a.locked_versions.get(_plan.PLAN_PATH) or []
        if not versions:
            return None
        _role, digest, seq = versions[-1]
        try:
            record = _plan.locked_record(self.a.locked_blob(_plan.PLAN_PATH))
            if record is not None:
                _plan.report_rows(record)  # a malformed record has no section
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            return None
        return (record, seq, str(digest)) if record is not None else None

    def tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        """Every table but the verification one, in order: (caption, header, rows)."""
        hyps = [r for r in self.results if r.get("hypothesis")]
        return [
            *self._failed_tables(),
            *self._hypothesis_tables(hyps),
            *self._component_tables(hyps),
            *self._protocol_tables(),
            *self._plan_tables(),
            *self._deviation_tables(),
            *self._amendment_tables(),
            *self._flow_tables(),
            *self._data_tables(),
            *self._distribution_tables(),
            *self._model_tables(),
            *self._exploratory_tables(),
            *self._posthoc_tables(),
        ]

    def _failed_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        failed = [r for r in self.results if r.get("status") == "failed"]
        if not failed:
            return []
        rows = [
            [
                _cell(r.get("id")),
                _cell(r.get("label")),
                _cell(r.get("error") or "unknown error"),
            ]
            for r in failed
        ]
        return [("Results that could not be computed", ["result", "label", "error"], rows)]

    def _hypothesis_row(self, r: dict[str, Any]) -> list[str]:
        caution = _obj(r.get("values")).get("caution")
        verdict = str(r.get("verdict") or "–") + (f"caution: {caution}" if caution else "")
        return [
            _cell(r.get("hypothesis")),
            f"{r.get('title', '')} [{self._contrast_text(r)}]",
            _cell(r.get("test")),
            _estimate_text(r),
            _p_text(r),
            verdict,
            _rule_text(r),
        ]

    def _hypothesis_tables(
        self, hyps: list[dict[str, Any]]
    ) -> list[tuple[str, list[str], list[list[str]]]]:
        if not hyps:
            return []
        return [
            (
                "Pre-registered hypotheses: each verdict and the locked rule that decided it",
                [
                    "hypothesis",
                    "description",
                    "test",
                    "estimate (CI)",
                    "p",
                    "verdict",
                    "decided by",
                ],
                [self._hypothesis_row(r) for r in hyps],
            )
        ]

    def _component_tables(
        self, hyps: list[dict[str, Any]]
    ) -> list[tuple[str, list[str], list[list[str]]]]:
        classes = _component_classes(self.protocol, hyps)
        if not classes:
            return []
        return [
            (
                "Prompt components classified from the registered contrasts",
                ["component(s) under test", "registered evidence", "class"],
                classes,
            )
        ]

    def _plan_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        plan = self._plan()
        if plan is None:
            return []
        # docs/planning.md §8
        return [(_plan.REPORT_CAPTION, list(_plan.REPORT_HEADER), _plan.report_rows(plan[0]))]

    def _deviation_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        declared = self.protocol.get("deviations")
        if not isinstance(declared, list) or not declared:
            return []
        return [
            (
                "Declared deviations from the source protocol ([[deviations]], locked "
                "before the run)",
                ["id", "source protocol says", "this study does", "reason"],
                [
                    [_cell(_obj(d).get(k)) for k in ("id", "source", "choice", "reason")]
                    for d in declared
                ],
            )
        ]

    def _amendment_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        if not self.amendments:
            return []
        return [
            (
                "Recorded amendments (protocol.amended)",
                ["seq", "time", "reason", "files changed"],
                [
                    [
                        _cell(m["seq"]),
                        _cell(m.get("time")),
                        _cell(m.get("reason")),
                        ", ".join(str(_get(c, "path")) for c in m.get("changes") or []),
                    ]
                    for m in self.amendments
                ],
            )
        ]

    def _flow_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        if not has_flow(self.a):
            return []
        flow = flow_table(self.a)
        return [flow] if flow is not None else []

    def _distribution_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        first_seq = self.results[0].get("seq") if self.results else None
        dist = _distribution(self.a, first_seq, self.arms) if self.tumbling else None
        if not dist:
            return []
        return [
            (
                "Analysable trials per arm by glyph accuracy",
                ["arm", "trials", "mean", *(f"{10 * i}–{10 * i + 10}%" for i in range(10))],
                dist,
            )
        ]

    def _posthoc_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        """analysis.md §6: one row per analysis.posthoc event; none without one."""
        if not self.posthoc:
            return []
        rows = []
        for r in self.posthoc:
            d = _obj(r.get("declared"))
            if r.get("status") != "ok":
                rows.append(
                    [
                        _cell(r.get("id")),
                        _cell(r.get("seq")),
                        _cell(r.get("title")),
                        "",
                        "",
                        "",
                        f"not computed: {r.get('error')}",
                        _cell(d.get("reason")),
                    ]
                )
                continue
            v = _obj(r.get("values"))
            c = _obj(v.get("contrast"))
            test, icc, caution = statistics.posthoc_cells(r.get("test"), v, c)
            rows.append(
                [
                    _cell(r.get("id")),
                    _cell(r.get("seq")),
                    _cell(r.get("title")),
                    f"{_pp(c.get('estimate'))} ({_pp(c.get('lower'))} to {_pp(c.get('upper'))})",
                    test,
                    icc,
                    caution,
                    _cell(d.get("reason")),
                ]
            )
        return [
            (
                f"{POSTHOC}: two-sided differences (mixed model, t-test or bootstrap)",
                [
                    "id",
                    "seq",
                    "model",
                    "difference (95% CI)",
                    "two-sided test",
                    "ICC",
                    "caution",
                    "reason",
                ],
                rows,
            )
        ]

    def _models_table(self, model: dict[str, Any]) -> tuple[str, list[str], list[list[str]]]:
        """The locked model, or the models in declaration order."""
        if not self.models:
            return ("Model", ["field", "value"], [[k, _cell(v)] for k, v in sorted(model.items())])
        declared = _obj(self.protocol.get("models"))
        return (
            "Models, in declaration order",
            MODEL_FIELDS,
            [
                [m] + [_cell(_obj(declared.get(m)).get(k)) for k in MODEL_FIELDS[1:]]
                for m in self.models
            ],
        )

    def _protocol_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        p = self.protocol
        design, model = _obj(p.get("design")), _obj(p.get("model"))
        analysis, arms = _obj(p.get("analysis")), _obj(p.get("arms"))
        out = [
            (
                "Arms and their prompt components",
                ["arm", "role", "components", "composed text SHA-256"],
                [
                    [
                        a,
                        _cell(_obj(arms[a]).get("role")),
                        " + ".join(map(str, _obj(arms[a]).get("components") or [])),
                        str(_obj(arms[a]).get("sha256", ""))[:16] + "…",
                    ]
                    for a in sorted(arms)
                ],
            )
        ]
        out.append(self._models_table(model))
        keys = ("replicates", "seed", "order", "bootstrap_seed", "bootstrap_iterations")
        design_rows = [(k, design.get(k)) for k in keys if k in design]
        design_rows += [(k, v) for k, v in sorted(design.items()) if k not in keys]
        out.append(("Design", ["field", "value"], [[k, _cell(v)] for k, v in design_rows]))
        out.append(
            (
                "Analysis plan",
                ["field", "value"],
                [[k, _cell(v)] for k, v in sorted(analysis.items())],
            )
        )
        hyps = p.get("hypotheses")
        rows = [_registered_row(_obj(item)) for item in (hyps if isinstance(hyps, list) else [])]
        out.append(
            (
                "Pre-registered hypotheses",
                [
                    "id",
                    "contrast",
                    "test",
                    "sides",
                    "alpha",
                    "correction",
                    "family",
                    "min. difference",
                    "equivalence margin",
                ],
                rows,
            )
        )
        return out

    def _ddx_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        """analysis.md §9: ``descriptive.ddx``, each metric's mean per arm, then arm x model.

        A percentage (breadth a number), with how many trials leave it undefined.
        """
        desc = self.result("descriptive.ddx")
        if desc is None or desc.get("status") != "ok":
            return []
        v = _obj(desc.get("values"))
        names = (
            "plausibility",
            "h_coverage",
            "s_coverage",
            "breadth",
            "grounding_rate",
            "indirect_rate",
            "uncertainty",
        )

        def cell(entry: dict[str, Any], name: str) -> str:
            m = entry.get(name)
            if not isinstance(m, dict):
                return "–"
            mean = _fmt(m.get("mean")) if name == "breadth" else _pct(m.get("mean"))
            return mean + (f" ({m.get('undefined')} undefined)" if m.get("undefined") else "")

        rows = [
            [str(arm), "all", _fmt(_obj(e).get("trials")), *(cell(_obj(e), n) for n in names)]
            for arm, e in sorted(_obj(v.get("arms")).items())
        ]
        for arm, models in sorted(_obj(v.get("arm_model")).items()):
            rows += [
                [str(arm), str(m), _fmt(_obj(e).get("trials")), *(cell(_obj(e), n) for n in names)]
                for m, e in sorted(_obj(models).items())
            ]
        return [
            (
                str(desc.get("title")),
                [
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
                ],
                rows,
            )
        ]

    def _covariate_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        """analysis.md §11: ``descriptive.covariates``, perturbable labels, then indicators.

        Per label: a row per value (true, false) and arm (trials, each outcome's mean: a
        percentage, breadth a number), then ``no label`` (trials without a value).
        """
        desc = self.result("descriptive.covariates")
        if desc is None or desc.get("status") != "ok":
            return []
        v = _obj(desc.get("values"))
        outcomes = [str(o) for o in v.get("outcomes") or []]
        strata = _obj(v.get("strata"))
        out: list[tuple[str, list[str], list[list[str]]]] = []
        for key, what in (
            ("perturbable", "perturbable factors"),
            ("indicators", "indicator factors (annotated, never edited)"),
        ):
            rows: list[list[str]] = []
            for name in v.get(key) or []:
                stratum = _obj(strata.get(name))
                for level in ("true", "false"):
                    for arm, e in sorted(_obj(_obj(stratum.get("levels")).get(level)).items()):
                        cells = []
                        for o in outcomes:
                            got = _obj(_obj(e).get(o)).get("mean")
                            cells.append(_fmt(got) if o == "breadth" else _pct(got))
                        rows.append(
                            [str(name), level, str(arm), _fmt(_obj(e).get("trials")), *cells]
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
                out.append(
                    (
                        f"Outcomes by factor label: {what}, step {v.get('step')}",
                        ["label", "value", "arm", "trials", *outcomes],
                        rows,
                    )
                )
        return out

    def _mcq_row(self, r: dict[str, Any]) -> list[str] | None:
        """One seed-002 hypothesis's row (mcq-statistics.md §11), or None if not one of them."""
        plan = self._plan_of(r)
        test = str(r.get("test"))
        kind = statistics.get(test)
        if kind is None or kind.mcq_cells is None or not kind.mcq_listed(plan):
            return None
        what = self._contrast_text(r) + (f" at {plan['variant']}" if plan.get("variant") else "")
        head = [_cell(r.get("hypothesis")), test, what]
        if r.get("status") == NOT_APPLICABLE:
            return [*head, "–", "–", "–", "–", "–", _inapplicable(r)]
        if r.get("status") != "ok":
            return [*head, "–", "–", "–", "–", "–", f"not computed: {r.get('error')}"]
        v = _obj(r.get("values"))
        n, stat, interval = kind.mcq_cells(v)
        return [
            *head,
            str(n),
            stat,
            _fmt(v.get("estimate")),
            interval,
            str(v.get("excluded", "–")),
            str(r.get("verdict")),
        ]

    def _mcq_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        """archive-format §7: seed 002's registered statistics and ``descriptive.mcq``."""
        out: list[tuple[str, list[str], list[list[str]]]] = []
        rows = [
            row
            for row in (self._mcq_row(r) for r in self.results if r.get("hypothesis"))
            if row is not None
        ]
        if rows:
            out.append(
                (
                    "Seed 002's registered statistics (flip rate, position bias, voting, "
                    "self-consistency, McNemar, GEE; excluded = incomplete groups, recorded "
                    "with their trials)",
                    [
                        "hypothesis",
                        "test",
                        "arms / variants",
                        "n",
                        "statistic",
                        "estimate",
                        "interval or p",
                        "excluded",
                        "verdict",
                    ],
                    rows,
                )
            )
        out += self._mcq_descriptive_tables()
        return out

    def _mcq_descriptive_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        """``descriptive.mcq``: accuracy per cell, and over the shuffle seeds."""
        out: list[tuple[str, list[str], list[list[str]]]] = []
        desc = self.result("descriptive.mcq")
        if desc is not None and desc.get("status") == "ok":
            v = _obj(desc.get("values"))
            out.append(
                (
                    str(desc.get("title")),
                    [
                        "arm",
                        "variant",
                        "model",
                        "correct",
                        "n",
                        "unparsed",
                        "accuracy",
                        "Wilson 95% CI",
                    ],
                    [
                        [
                            _cell(c.get("arm")),
                            _cell(c.get("variant")),
                            _cell(c.get("model") or "–"),
                            _cell(c.get("correct")),
                            _cell(c.get("n")),
                            _cell(c.get("unparsed")),
                            _pct(c.get("accuracy")),
                            f"{_pct(c.get('lower'))} – {_pct(c.get('upper'))}",
                        ]
                        for c in map(_obj, v.get("cells") or [])
                    ],
                )
            )
            seeds = [_obj(x) for x in v.get("seeds") or []]
            if seeds:
                out.append(
                    (
                        "Accuracy over the shuffle seeds: mean and t interval",
                        ["arm", "model", "seeds", "per seed", "mean", "95% t interval"],
                        [
                            [
                                _cell(x.get("arm")),
                                _cell(x.get("model") or "–"),
                                ", ".join(map(str, _obj(x.get("summary")).get("seeds") or [])),
                                ", ".join(
                                    _pct(y) for y in _obj(x.get("summary")).get("values") or []
                                ),
                                _pct(_obj(x.get("summary")).get("mean")),
                                f"{_pct(_obj(x.get('summary')).get('lower'))} – "
                                f"{_pct(_obj(x.get('summary')).get('upper'))}",
                            ]
                            for x in seeds
                        ],
                    )
                )
        return out

    def _data_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        out: list[tuple[str, list[str], list[list[str]]]] = []
        arms_result = self.result("descriptive.arms")
        if arms_result is not None and arms_result.get("status") == "ok":
            values = _obj(arms_result.get("values"))
            rows = []
            for arm in sorted(values):
                v = _obj(values[arm])
                statuses = ", ".join(f"{k} {n}" for k, n in sorted(_obj(v.get("status")).items()))
                rows.append(
                    [
                        arm,
                        _cell(v.get("trials_scored")),
                        statuses,
                        _pct(v.get("parse_rate")),
                        _cell(v.get("excluded")),
                        _cell(v.get("given_up")),
                        _cell(v.get("glyphs")),
                    ]
                )
            kind, unit = ("Tumbling-E trials", "glyphs") if self.tumbling else ("Trials", "items")
            out.append(
                (
                    f"{kind} per arm: scoring status, parse rate, exclusions "
                    "(unparseable responses when the plan excludes them) and trials given up",
                    [
                        "arm",
                        "trials scored",
                        "status",
                        "parse rate",
                        "excluded",
                        "given up",
                        f"{unit} analysed",
                    ],
                    rows,
                )
            )
            cells = self._arm_model_cells()
            if cells is not None:
                rows = []
                for v in cells:
                    statuses = ", ".join(
                        f"{k} {n}" for k, n in sorted(_obj(v.get("status")).items())
                    )
                    rows.append(
                        [
                            _cell(v.get("arm")),
                            _cell(v.get("model")),
                            _cell(v.get("trials_scored")),
                            statuses,
                            _pct(v.get("parse_rate")),
                            _cell(v.get("excluded")),
                            _cell(v.get("given_up")),
                            _cell(v.get("glyphs")),
                        ]
                    )
                out.append(
                    (
                        f"{kind} per arm and model: scoring status, parse rate, exclusions "
                        "and trials given up",
                        [
                            "arm",
                            "model",
                            "trials scored",
                            "status",
                            "parse rate",
                            "excluded",
                            "given up",
                            f"{unit} analysed",
                        ],
                        rows,
                    )
                )
            rows = []
            for arm in sorted(values):
                v = _obj(values[arm])
                acc = _obj(v.get("accuracy"))
                clu = v.get("accuracy_clustered")
                if not isinstance(clu, dict):
                    clustered = "–"
                elif clu.get("lower") is None:
                    clustered = f"none ({clu.get('n_clusters')} probe)"
                else:
                    clustered = (
                        f"{_pct(clu.get('lower'))} – {_pct(clu.get('upper'))} "
                        f"({clu.get('n_clusters')} probes)"
                    )
                rows.append(
                    [
                        arm,
                        _cell(acc.get("successes", v.get("correct"))),
                        _cell(acc.get("n", v.get("glyphs"))),
                        _pct(acc.get("estimate")),
                        f"{_pct(acc.get('lower'))} – {_pct(acc.get('upper'))}"
                        if acc
                        else _cell(v.get("note", "–")),
                        clustered,
                    ]
                )
            out.append(
                (
                    str(arms_result.get("title")),
                    [
                        "arm",
                        "correct",
                        "glyphs" if self.tumbling else "items",
                        "accuracy",
                        "Wilson 95% CI (items as independent: descriptive)",
                        "95% CI clustered by probe (cluster-robust, t with probes − 1 df)",
                    ],
                    rows,
                )
            )
        cells = self._arm_model_cells()
        if cells is not None:
            rows = []
            for v in cells:
                acc = _obj(v.get("accuracy"))
                rows.append(
                    [
                        _cell(v.get("arm")),
                        _cell(v.get("model")),
                        _cell(acc.get("successes", v.get("correct"))),
                        _cell(acc.get("n", v.get("glyphs"))),
                        _pct(acc.get("estimate")),
                        f"{_pct(acc.get('lower'))} – {_pct(acc.get('upper'))}"
                        if acc
                        else _cell(v.get("note", "–")),
                    ]
                )
            out.append(
                (
                    str(_obj(self.result("descriptive.arm_model")).get("title")),
                    [
                        "arm",
                        "model",
                        "correct",
                        "glyphs" if self.tumbling else "items",
                        "accuracy",
                        "Wilson 95% CI",
                    ],
                    rows,
                )
            )
        out.extend(self._mcq_tables())
        out.extend(_qrboot.report_tables(self.result("descriptive.qr_bootstrap")))
        out.extend(self._ddx_tables())
        out.extend(self._covariate_tables())
        control = self.result("descriptive.control")
        if self.tumbling and control is not None and control.get("status") == "ok":
            rows = []
            for arm, value in sorted(_obj(control.get("values")).items()):
                v = _obj(value)
                rows.append(
                    [
                        arm,
                        _cell(v.get("successes", "–")),
                        _cell(v.get("n", "–")),
                        _pct(v.get("estimate")),
                        f"{_pct(v.get('lower'))} – {_pct(v.get('upper'))}"
                        if value
                        else "no control trials",
                    ]
                )
            out.append(
                (
                    str(control.get("title")),
                    ["arm", "correctly rejected", "control trials", "rate", "Wilson 95% CI"],
                    rows,
                )
            )
        return out

    def _arm_model_cells(self) -> list[dict[str, Any]] | None:
        """The cells of ``descriptive.arm_model`` when it was computed, else ``None``."""
        r = self.result("descriptive.arm_model")
        if r is None or r.get("status") != "ok":
            return None
        return [_obj(v) for v in _obj(r.get("values")).values()]

    @staticmethod
    def _model_table(
        model: dict[str, Any] | None, prefix: str = "", extra: str = ""
    ) -> list[tuple[str, list[str], list[list[str]]]]:
        """A mixed model's fixed-effects table (none when it was not computed)."""
        if model is None or model.get("status") != "ok":
            return []
        v = _obj(model.get("values"))
        rows = [
            [
                _cell(_get(fe, "name")),
                _pp(_get(fe, "estimate")),
                _pp(_get(fe, "se"), signed=False),
                f"{_pp(_get(fe, 'ci_lower'))} to {_pp(_get(fe, 'ci_upper'))}",
                _p(_get(fe, "p")),
            ]
            for fe in v.get("fixed_effects") or []
        ]
        names, refs = v.get("factors") or [], v.get("factor_references") or []
        factors = ", ".join(f"reference {f} {r}" for f, r in zip(names, refs, strict=False))
        caption = (
            f"{prefix}{model.get('title')} (reference arm {v.get('reference')}"
            + (f"; {factors}" if factors else "")
            + f"; {v.get('n_obs')} "
            f"trials, {v.get('n_groups')} groups; ICC {_fmt(v.get('icc'))}; converged "
            f"{_fmt(v.get('converged'))}, singular {_fmt(v.get('singular'))}){extra}"
        )
        return [(caption, ["term", "estimate", "SE", "95% CI", "p"], rows)]

    def _model_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        out = self._model_table(self.result("model.lmm"))
        for name in self.models:
            out += self._model_table(self.result(f"model.lmm@{name}"))
        return out + self._sensitivity_tables()

    def _sensitivity_results(self) -> list[dict[str, Any]]:
        """``sensitivity.lmm`` and each ``sensitivity.lmm@<model>``, in recorded order."""
        return [
            r
            for r in self.results
            if str(r.get("id")) == "sensitivity.lmm"
            or str(r.get("id")).startswith("sensitivity.lmm@")
        ]

    def _sensitivity_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        """statistics.md "Sensitivity": the tables of each sensitivity result that was computed."""
        out: list[tuple[str, list[str], list[list[str]]]] = []
        for result in self._sensitivity_results():
            if result.get("status") == "ok":
                out += self._sensitivity_tables_of(_obj(result.get("values")))
        return out

    def _sensitivity_tables_of(
        self, v: dict[str, Any]
    ) -> list[tuple[str, list[str], list[list[str]]]]:
        """One sensitivity result's tables: contrasts side by side, then its models."""
        if v.get("model") is not None:  # a model's own copy, or the pooled fit, or one model
            scope = f" (model {v['model']})"
        elif v.get("factors"):
            scope = " (pooled over the models, model a fixed factor)"
        else:
            scope = ""

        def interval(c: dict[str, Any]) -> str:
            lo = "−∞" if c.get("lower") is None else _pp(c.get("lower"))
            hi = "+∞" if c.get("upper") is None else _pp(c.get("upper"))
            return f"{_pp(c.get('estimate'))} ({lo} to {hi})"

        rows = []
        for c in v.get("contrasts") or []:
            c = _obj(c)
            stimuli = c.get("stimuli")
            on = (
                f" on {', '.join(str(x) for x in stimuli)}"
                if isinstance(stimuli, list) and stimuli
                else ""
            )
            if "error" in c:  # statistics.md "Sensitivity": a subset that could not be fitted
                rows.append(
                    [
                        _cell(c.get("hypothesis")),
                        f"subset{on}",
                        f"not fitted: {c['error']}",
                        *("–" for _ in SENSITIVITY_MODELS),
                        "–",
                        "–",
                    ]
                )
                continue
            reg = _obj(c.get("as_registered"))
            p = f"p {_p(reg.get('p_raw'))}" + (
                f", adjusted {_p(reg.get('p_adjusted'))}"
                if reg.get("p_adjusted") is not None
                else ""
            )
            cells = []
            for m in SENSITIVITY_MODELS:
                got = c.get(m)
                cells.append(
                    f"{interval(got)}, p {_p(got.get('p'))}, df {_fmt(got.get('df'))}"
                    if isinstance(got, dict)
                    else "not fitted"
                )
            boot = _obj(c.get("cluster_bootstrap"))
            supports = c.get("supports")
            rows.append(
                [
                    _cell(c.get("hypothesis")),
                    f"{c.get('a')} vs {c.get('b')} ({c.get('sides')}){on}",
                    f"{interval(reg)}, {p}; {c.get('registered_verdict') or '–'}",
                    *cells,
                    f"{interval(boot)} over {boot.get('n_clusters')} probes" if boot else "–",
                    "–" if supports is None else ("yes" if supports else "no"),
                ]
            )
        named = any(
            isinstance(_obj(c).get(m), dict) and "df_method" in _obj(c)[m]
            for c in v.get("contrasts") or []
            for m in SENSITIVITY_MODELS
        )
        df_note = (
            "; df: Satterthwaite's formula with the expected REML information" if named else ""
        )  # an archive from before df_method (archive-format.md §5)
        out = [
            (
                f"{SENSITIVITY}{scope}: each registered mixed-model contrast beside its "
                f"sensitivity intervals (95%; one-sided hypotheses: lower bound{df_note})",
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
            entry = _obj(_obj(v.get("models")).get(name))
            if not entry.get("fitted"):
                mrows.append([label, f"no: {entry.get('reason')}", "–", "–", "–"])
                continue
            lrt = (
                f"chi2 {_fmt(entry.get('lrt_chi2'))}, p {_p(entry.get('lrt_p'))}"
                if "lrt_chi2" in entry
                else "–"
            )
            mrows.append(
                [
                    label,
                    "yes",
                    ", ".join(f"{k} {_fmt(x)}" for k, x in _obj(entry.get("variances")).items()),
                    _fmt(entry.get("log_likelihood")),
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

    def _sensitivity_blocks(self) -> list[tuple[str, str]]:
        results = self._sensitivity_results()
        if not results:
            return []
        out = [("h3", SENSITIVITY)]
        for result in results:  # the pooled fit, then each model's
            if result.get("status") != "ok":
                out.append(("p", self._failed_text(result)))
                continue
            for c in _obj(result.get("values")).get("contrasts") or []:
                if _obj(c).get("flag"):
                    out.append(("p", str(_obj(c)["flag"])))
        return out

    def _by_stimulus_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        """analysis.md §3 exploratory.by_stimulus: one row per dismantling pair."""
        r = self.result("exploratory.by_stimulus")
        if r is None or r.get("status") != "ok":
            return []
        v = _obj(r.get("values"))
        stimuli = [str(x) for x in v.get("stimuli") or []]
        rows = []
        for name, per in _obj(v.get("contrasts")).items():
            cells = []
            for stimulus in stimuli:
                d = _obj(_obj(per).get(stimulus))
                cells.append(
                    "not computable"
                    if "error" in d or not d
                    else f"{_pp(d.get('difference'))} ({_pp(d.get('ci_lower'))} to "
                    f"{_pp(d.get('ci_upper'))}), p {_p(d.get('p'))}"
                )
            rows.append([str(name), *cells])
        return [
            (
                f"{EXPLORATORY}: dismantling differences per probe (Welch t, 95% CI, two-sided p)",
                ["arms a-b", *stimuli],
                rows,
            )
        ]

    def _by_truth_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        """analysis.md §3 exploratory.by_truth: the Wilson cells, then the Newcombe contrasts."""
        r = self.result("exploratory.by_truth")
        if r is None or r.get("status") != "ok":
            return []
        v = _obj(r.get("values"))
        labels = [str(x) for x in v.get("labels") or []]
        cells = _obj(v.get("cells"))

        def cell(c: dict[str, Any]) -> str:
            w = _obj(c.get("wilson"))
            if not c.get("n"):
                return "no trials"
            return (
                f"{c.get('correct')}/{c.get('n')} = {_pct(w.get('estimate'))} "
                f"({_pct(w.get('lower'))} – {_pct(w.get('upper'))})"
            )

        rows = [
            [str(arm), *(cell(_obj(_obj(cells.get(arm)).get(label))) for label in labels)]
            for arm in cells
        ]
        contrasts = []
        for name, per in _obj(v.get("contrasts")).items():
            texts = []
            for label in labels:
                d = _obj(_obj(per).get(label))
                texts.append(
                    "not computable"
                    if "error" in d or not d
                    else f"{_pp(d.get('estimate'))} ({_pp(d.get('lower'))} to "
                    f"{_pp(d.get('upper'))})"
                )
            contrasts.append([str(name), *texts])
        return [
            (
                f"{EXPLORATORY}: accuracy by arm and true answer (Wilson 95% CI)",
                ["arm", *labels],
                rows,
            ),
            (
                f"{EXPLORATORY}: arm differences by true answer (Newcombe 95% CI of the difference "
                "(one answer per trial; – for charts))",
                ["arms a-b", *labels],
                contrasts,
            ),
        ]

    def _exploratory_tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        out: list[tuple[str, list[str], list[list[str]]]] = []
        rows = []
        for arm in self.arms:
            r = self.result(f"exploratory.errors.{arm}")
            if r is None:
                continue
            if r.get("status") != "ok":
                rows.append([arm, f"not computed: {_cell(r.get('error'))}", "", "", "", "", ""])
                continue
            v = _obj(r.get("values"))
            share, chi = _obj(v.get("canonical_right_share")), _obj(v.get("error_chi_square"))
            dirs = _obj(v.get("error_directions") or v.get("error_answers"))
            bias = _obj(v.get("position_bias"))
            rows.append(
                [
                    arm,
                    _pct(_obj(v.get("confusion")).get("accuracy")),
                    ", ".join(f"{k} {n}" for k, n in dirs.items()) or "no errors",
                    f"{_pct(share.get('share'))} ({_pct(share.get('lower'))} – "
                    f"{_pct(share.get('upper'))}), n={share.get('n', 0)}"
                    if share
                    else "–",
                    _cell(
                        chi.get("error")
                        or (f"chi2 {_fmt(chi.get('chi2'))}, p {_p(chi.get('p'))}" if chi else "–")
                    ),
                    _chi_text(v.get("error_chi_square_excluding_truth")),
                    f"TVD {_fmt(bias.get('tvd'))}" if bias else "–",
                ]
            )
        out.append(
            (
                f"{EXPLORATORY}: error phenotype (wrong answers that name an orientation)",
                [
                    "arm",
                    "accuracy",
                    "error directions",
                    "share of errors answering RIGHT (Wilson 95% CI, errors as independent: "
                    "descriptive)",
                    "errors uniform over all labels? (chi-square; the paper's null, replicated)",
                    "errors uniform over the wrong labels? (chi-square, true label excluded)",
                    "answer vs truth distribution",
                ],
                rows,
            )
        )
        out += self._by_truth_tables()
        out += self._by_stimulus_tables()
        rows = []
        for r in self.results:
            rid = str(r.get("id", ""))
            if not rid.startswith("exploratory.pair."):
                continue
            name = rid.removeprefix("exploratory.pair.")
            if r.get("status") != "ok":
                rows.append([name, f"not computed: {r.get('error')}", "", "", "", "", ""])
                continue
            v = _obj(r.get("values"))
            mc, flip = _obj(v.get("mcnemar")), _obj(v.get("flip_rate"))
            nc = v.get("newcombe")
            newcombe = (
                f"{_pp(nc.get('estimate'))} ({_pp(nc.get('lower'))} to {_pp(nc.get('upper'))})"
                if isinstance(nc, dict)
                else "–"
            )
            it, pt, boot = (_obj(v.get(k)) for k in ("independent_t", "paired_t", "bootstrap_diff"))
            rows.append(
                [
                    name,
                    f"b={mc.get('b')}, c={mc.get('c')}, p {_p(mc.get('p'))}" if mc else "–",
                    _pct(flip.get("share")) if flip else "–",
                    f"{_pp(it.get('difference'))}, p {_p(it.get('p'))}" if it else "–",
                    f"{_pp(pt.get('difference'))}, p {_p(pt.get('p'))}" if pt else "–",
                    f"{_pp(boot.get('estimate'))} ({_pp(boot.get('lower'))} to "
                    f"{_pp(boot.get('upper'))})"
                    if boot
                    else "–",
                    newcombe,
                ]
            )
        out.append(
            (
                f"{EXPLORATORY}: paired-arm metrics (two-sided p, not adjusted)",
                [
                    "pair a-b",
                    "McNemar (items as independent: descriptive)",
                    "answer flip rate",
                    "Welch t",
                    "paired t (per stimulus)",
                    "bootstrap difference (95% CI)",
                    "Newcombe 95% CI of the difference (one answer per trial; – for charts)",
                ],
                rows,
            )
        )
        rows = []
        for r in self.results:
            rid = str(r.get("id", ""))
            if not rid.startswith("exploratory.question_run."):
                continue
            name = rid.removeprefix("exploratory.question_run.")
            if r.get("status") != "ok":
                rows.append([name, f"not computed: {r.get('error')}", ""])
                continue
            v = _obj(r.get("values"))
            rows.append(
                [name, _pct(v.get("estimate")), f"{_pct(v.get('lower'))} – {_pct(v.get('upper'))}"]
            )
        caption = (
            f"{EXPLORATORY}: accuracy by arm (pooled over models: a run is a model and "
            "replicate) and by arm@model, bootstrap over (stimulus, run)"
            if len(self.models) >= 2
            else f"{EXPLORATORY}: accuracy by arm, bootstrap over (stimulus, replicate)"
        )
        out.append((caption, ["arm", "accuracy", "bootstrap 95% CI"], rows))
        by_model = self.result("exploratory.arm_by_model")
        test = _obj(_obj(_obj(by_model).get("values")).get("interaction_test"))
        out += self._model_table(
            by_model,
            f"{EXPLORATORY}: ",
            f"; joint Wald test of the {test.get('df')} arm × "
            f"model terms: chi2 {_fmt(test.get('chi2'))}, p {_p(test.get('p'))}",
        )
        mult = self.result("exploratory.multiplicity")
        if (
            mult is not None
            and mult.get("status") == "ok"
            and not _obj(mult.get("values")).get("note")
        ):
            v = _obj(mult.get("values"))
            bonf = _obj(v.get("bonferroni")).get("adjusted") or []
            holm = _obj(v.get("holm")).get("adjusted") or []
            raw = _obj(v.get("bonferroni")).get("pvalues") or []
            rows = [
                [_cell(h), _p(p), _p(b), _p(hh)]
                for h, p, b, hh in zip(v.get("hypotheses") or [], raw, bonf, holm, strict=False)
            ]
            out.append(
                (
                    f"{EXPLORATORY}: every hypothesis p-value corrected as one family",
                    ["hypothesis", "p raw", "Bonferroni", "Holm"],
                    rows,
                )
            )
        return out

    def title(self) -> str | None:
        name = self.protocol.get("title") or self.protocol.get("study")
        return f"PROMPT Ledger report: {name}" if name else None

    def _copies_banner(self) -> str | None:
        """analysis.md §3: the banner of a recorded descriptive.identical_responses."""
        found = next(
            (r for r in self.results if r.get("id") == "descriptive.identical_responses"), None
        )
        if found is None or found.get("status") != "ok":
            return None
        v = _obj(found.get("values"))
        said = []
        for r in v.get("replicates") or []:
            model = _obj(r).get("model")
            said.append(
                f"arm {_obj(r).get('arm')}"
                + (f", model {model}" if model else "")
                + f": every replicate alike in {_obj(r).get('cells')} stimulus cell(s)"
            )
        for p in v.get("models") or []:
            said.append(
                f"models {_obj(p).get('a')} and {_obj(p).get('b')}: alike on all "
                f"{_obj(p).get('trials')} shared trial(s)"
            )
        note = v.get("note") if isinstance(v.get("note"), str) else ""
        return (
            f"Byte-identical responses (descriptive.identical_responses): {'; '.join(said)}. {note}"
        ).rstrip()

    def blocks(self) -> list[tuple[str, str | re.Pattern[str]]]:
        """Every heading, paragraph and banner outside the tables, in order (§7).

        The ledger's local path (in the first paragraph and the last) and the verification
        banner (the writer's verifier run) are the only text not derived from the events.
        """
        p = self.protocol
        out: list[tuple[str, str | re.Pattern[str]]] = []
        title = self.title()
        out.append(("h1", title if title is not None else re.compile(r"PROMPT Ledger report: .*")))
        first = self.results[0] if self.results else {}
        inputs = _obj(first.get("inputs"))
        backends = sorted({str(r.get("backend")) for r in self.runs}) or ["none recorded"]
        out.append(
            (
                "p",
                re.compile(
                    re.escape(f"Study {_cell(p.get('study'))} (folder ")
                    + r".*"
                    + re.escape(
                        f"); analysis results from seq {_cell(first.get('seq'))} (trials.csv "
                        f"SHA-256 {str(inputs.get('trials_csv_sha256', '–'))[:16]}…); "
                        f"backend{'s' if len(backends) > 1 else ''}: {', '.join(backends)}."
                    ),
                    re.S,
                ),
            )
        )
        banner = self.simulated_banner()
        if banner is not None:
            out.append(("div", banner))
        notice = identity_notice(self.a)
        if notice is not None:  # docs/trials.md §2: a locked model the server did not confirm
            out.append(("div", notice))
        if any(r.get("status") == "failed" for r in self.results):
            out.append(
                (
                    "div",
                    "Some results could not be computed; each is listed with its "
                    "reason below and shown as “not computed” where it belongs.",
                )
            )
        copies = self._copies_banner()
        if copies is not None:
            out.append(("div", copies))
        out.append(("h2", "Verdicts of the pre-registered hypotheses"))
        if not any(r.get("hypothesis") for r in self.results):
            out.append(("p", "No hypothesis results."))
        if _component_classes(p, [r for r in self.results if r.get("hypothesis")]):
            out += [
                ("h2", "Prompt components: active, inactive, harmful or task-dependent"),
                ("p", COMPONENT_RULE),
            ]
        listed = p.get("stimuli")
        stimuli: list[Any] = listed if isinstance(listed, list) else []
        items = p.get("items")
        if "stimuli" not in p and isinstance(items, dict):  # an item file (prompts.md §1)
            over = f"{_cell(items.get('count'))} items ({_cell(items.get('path'))})"
        else:
            over = f"{len(stimuli)} stimuli ({', '.join(map(str, stimuli))})"
        out += [
            ("h2", "Protocol (as locked)"),
            (
                "p",
                f"Study {_cell(p.get('study'))}: {_cell(p.get('title'))}. "
                f"{_cell(p.get('trials'))} scheduled trials over {over}.",
            ),
        ]
        plan = self._plan()
        if plan is not None:  # docs/planning.md §8
            out += [("h2", _plan.REPORT_HEADING), ("p", _plan.report_text(*plan))]
        out.append(("h2", "Deviations from the protocol"))
        if not self.amendments:
            out.append(("p", "None: no protocol.amended event was recorded."))
        if has_flow(self.a):  # docs/reporting.md §1.3: the trial flow, before the data
            out.append(("h2", FLOW_TITLE))
        out.append(("h2", "Data: parse rates and exclusions"))
        arms_result = self.result("descriptive.arms")
        if arms_result is None or arms_result.get("status") != "ok":
            missing = {"id": "descriptive.arms", "error": "not recorded"}
            out.append(("p", self._failed_text(arms_result or missing)))
        else:
            exclude = _obj(p.get("analysis")).get("exclude_unparseable", True)
            out.append(("p", f"Plan: exclude_unparseable = {_cell(exclude)}."))
        out.append(("h2", "Descriptive results"))
        if arms_result is not None and arms_result.get("status") != "ok":
            out.append(("p", self._failed_text(arms_result)))
        by_model = self.result("descriptive.arm_model")
        if by_model is not None and by_model.get("status") != "ok":
            out.append(("p", self._failed_text(by_model)))
        qr = self.result("descriptive.qr_bootstrap")
        if qr is not None and qr.get("status") != "ok":
            out.append(("p", self._failed_text(qr)))
        stim = self.result("descriptive.arm_stimulus")
        if stim is not None and stim.get("status") == "failed":
            out.append(("p", self._failed_text(stim)))
        control = self.result("descriptive.control")
        if not self.tumbling:  # only a tumbling-E study has specificity-control trials
            pass
        elif control is None:
            out += [("h3", "Specificity control"), ("p", "Not recorded.")]
        elif control.get("status") != "ok":
            out += [("h3", "Specificity control"), ("p", self._failed_text(control))]
        else:
            out.append(("h3", "Specificity control"))
        first_seq = self.results[0].get("seq") if self.results else None
        if self.tumbling and _distribution(self.a, first_seq, self.arms):
            out += [
                ("h3", "Trial-level accuracy distribution per arm (descriptive)"),
                ("p", DISTRIBUTION_INTRO),
            ]
        out.append(("h2", "Pre-registered model and contrasts"))
        model = self.result("model.lmm")
        if model is None:
            out.append(("p", "No model result recorded."))
        out += self._model_blocks(model)
        for name in self.models:
            out += self._model_blocks(self.result(f"model.lmm@{name}"))
        out += self._sensitivity_blocks()
        out += [
            ("h2", EXPLORATORY),
            (
                "p",
                "None of these results was pre-registered. They describe the data and may "
                "suggest hypotheses for a future study; they decide nothing.",
            ),
            ("h3", f"{EXPLORATORY}: error phenotype by arm {EXPLORATORY}"),
        ]
        by_truth = self.result("exploratory.by_truth")
        if by_truth is not None:
            out.append(
                (
                    "h3",
                    f"{EXPLORATORY}: accuracy by true answer (per-orientation cells; "
                    f"hypothesis-generating) {EXPLORATORY}",
                )
            )
            out.append(
                (
                    "p",
                    self._failed_text(by_truth)
                    if by_truth.get("status") != "ok"
                    else "Each cell holds few trials and nothing here is adjusted for the number "
                    "of cells: read these as hypotheses for a powered replication, as the "
                    "paper does for its per-orientation findings.",
                )
            )
        by_stimulus = self.result("exploratory.by_stimulus")
        if by_stimulus is not None:
            out.append(
                (
                    "h3",
                    f"{EXPLORATORY}: dismantling contrasts per probe "
                    f"(hypothesis-generating) {EXPLORATORY}",
                )
            )
            out.append(
                (
                    "p",
                    self._failed_text(by_stimulus)
                    if by_stimulus.get("status") != "ok"
                    else BY_STIMULUS_INTRO,
                )
            )
        out += [
            ("h3", f"{EXPLORATORY}: paired-arm metrics {EXPLORATORY}"),
            (
                "h3",
                f"{EXPLORATORY}: accuracy with a bootstrap over trials (probes are not "
                f"resampled) {EXPLORATORY}",
            ),
        ]
        by_model = self.result("exploratory.arm_by_model")
        if by_model is not None:
            out.append(
                ("h3", f"{EXPLORATORY}: does the arm effect differ between models? {EXPLORATORY}")
            )
            out += self._model_blocks(by_model)
        out.append(("h3", f"{EXPLORATORY}: multiplicity sensitivity {EXPLORATORY}"))
        mult = self.result("exploratory.multiplicity")
        if mult is None:
            out.append(("p", "Not recorded."))
        elif mult.get("status") != "ok":
            out.append(("p", self._failed_text(mult)))
        elif _obj(mult.get("values")).get("note"):
            out.append(("p", f"{_obj(mult.get('values')).get('note')}."))
        skip = (
            "exploratory.errors.",
            "exploratory.pair.",
            "exploratory.question_run.",
            "exploratory.arm_by_model",
            "exploratory.by_truth",
            "exploratory.by_stimulus",
        )
        for r in self.results:
            rid = str(r.get("id", ""))
            if (
                r.get("label") == "exploratory"
                and r.get("status") == "failed"
                and not rid.startswith(skip)
                and rid != "exploratory.multiplicity"
            ):
                out.append(("p", self._failed_text(r)))
        if self.posthoc:
            out += [
                ("h2", POSTHOC),
                (
                    "p",
                    "Each analysis below was declared after the data were unblinded and "
                    "the registered analysis was recorded (an analysis.posthoc event after "
                    "the last analysis.result). It has no verdict and changes none.",
                ),
            ]
        out += [
            ("h2", "Verification of the ledger"),
            (
                "div",
                re.compile(
                    r"(VERIFIED|FAILED): [0-9]+ events, root (–|[0-9a-f]{64}), "
                    r"origin .*\.",
                    re.S,
                ),
            ),
            (
                "p",
                re.compile(
                    r"Re-run offline: ledger verify .* --trusted-key @OWNER\.vkey "
                    r"\(trust needs the owner's vkey, obtained out of band\)\.",
                    re.S,
                ),
            ),
        ]
        return out

    def _model_blocks(self, model: dict[str, Any] | None) -> list[tuple[str, str]]:
        """The paragraph under a mixed model's table: its failure or its caution, if any."""
        if model is None:
            return []
        if model.get("status") != "ok":
            return [("p", self._failed_text(model))]
        caution = _obj(model.get("values")).get("caution")
        return [("p", _cell(caution))] if caution else []

    def simulated_banner(self) -> str | None:
        sessions = [f"seq {r['seq']} ({r.get('backend')})" for r in self.runs if r.get("simulated")]
        if not sessions:
            return None
        return (
            "SIMULATED DATA: the responses were produced by the offline simulated model, not "
            f"by a real model (run session{'s' if len(sessions) > 1 else ''} "
            f"{', '.join(sessions)}). These results demonstrate the method only and say "
            "nothing about any model."
        )


# ------------------------------------------------------------------------------ the check


def _check_checks_table(st: _State, last: _Table) -> None:
    """The last table lists the verifier's checks, in its order, PASS, WARN or FAIL."""
    names = [row[0] for row in last.rows if row]
    order = [n for n in CHECK_NAMES if n in names]
    if (
        not last.caption.startswith("Independent verifier checks of ")
        or last.header != ["check", "result", "where", "detail"]
        or names != order
        or any(len(row) != 4 or row[1] not in ("PASS", "WARN", "FAIL") for row in last.rows)
    ):
        st.fail(
            f"{REPORT} line {last.line}: the last table is not the verifier's checks "
            "(one row per check, in the verifier's order, PASS, WARN or FAIL)",
            where=f"{REPORT} line {last.line}",
        )


def _compare_row(
    st: _State, caption: str, header: list[str], row: list[str], want_row: list[str], line: int
) -> None:
    """The first cell that differs, or the row's length."""
    at = f"{REPORT} line {line}"
    for col, (got, exp) in enumerate(zip(row, want_row, strict=False)):
        if got != exp:
            name = header[col] if col < len(header) else f"column {col + 1}"
            st.fail(
                f"{at}: table {caption!r}, row {want_row[0]!r}, {name}: the report "
                f"says {got!r}, the events say {exp!r}",
                where=at,
            )
            return
    st.fail(
        f"{at}: table {caption!r}, row {want_row[0]!r} has {len(row)} cells, not {len(want_row)}",
        where=at,
    )


def _compare_table(st: _State, i: int, table: _Table, want: Any) -> bool:
    """One table against the events' (caption, header, rows); False if they no longer line up."""
    caption, header, rows = want
    where = f"{REPORT} line {table.line}"
    if table.caption != caption:
        st.fail(
            f"{where}: table {i + 1} is {table.caption!r}; the events give {caption!r}",
            where=where,
        )
        return False
    if table.header != header:
        st.fail(
            f"{where}: table {caption!r} has the header {table.header}, not {header}",
            where=where,
        )
    if len(table.rows) != len(rows):
        st.fail(
            f"{where}: table {caption!r} has {len(table.rows)} rows; the events give {len(rows)}",
            where=where,
        )
    for row, want_row, line in zip(table.rows, rows, table.row_lines, strict=False):
        if row != want_row:
            _compare_row(st, caption, header, row, want_row, line)
    return True


def _check_verdict_classes(st: _State, body: list[_Table], a: Archive) -> None:
    """The verdict cells carry the class of their verdict (it colours them)."""
    hyps = [r for r in (a.body(s) for s in a.of_kind("analysis.result")) if r.get("hypothesis")]
    for table in body:
        if not table.caption.startswith("Pre-registered hypotheses: each verdict"):
            continue
        for classes, r, line in zip(table.verdict_classes, hyps, table.row_lines, strict=False):
            text = str(r.get("verdict") or "–")
            want_cls = f"verdict v-{text.replace(' ', '-')}"
            if classes[:1] != [want_cls]:
                at = f"{REPORT} line {line}"
                st.fail(
                    f"{at}: the verdict of {r.get('hypothesis')} is styled "
                    f"{classes[:1]}, not [{want_cls!r}]",
                    where=at,
                )


def _compare_tables(st: _State, parsed: list[_Table], want: list[Any], a: Archive) -> None:
    if not parsed:
        st.fail(f"{REPORT} has no table", where=REPORT)
        return
    body, last = parsed[:-1], parsed[-1]
    _check_checks_table(st, last)
    for i, wanted in enumerate(want):
        if i >= len(body):
            st.fail(f"{REPORT}: table {wanted[0]!r} is missing (the events give it)", where=REPORT)
            continue
        if not _compare_table(st, i, body[i], wanted):
            return  # the tables no longer line up; one message is enough
    for table in body[len(want) :]:
        where = f"{REPORT} line {table.line}"
        st.fail(f"{where}: table {table.caption!r} is not one the events give", where=where)
    _check_verdict_classes(st, body, a)


def _compare_blocks(
    st: _State, parsed: list[tuple[str, str, int]], want: list[tuple[str, str | re.Pattern[str]]]
) -> None:
    """Every heading, paragraph and banner is the one the events give, in order."""
    for i, (tag, text, line) in enumerate(parsed):
        where = f"{REPORT} line {line}"
        if i >= len(want):
            st.fail(f"{where}: <{tag}> {text[:80]!r} is not text the events give", where=where)
            return
        want_tag, expected = want[i]
        same = (
            expected.fullmatch(text) is not None
            if isinstance(expected, re.Pattern)
            else text == expected
        )
        if tag != want_tag or not same:
            shown = expected.pattern if isinstance(expected, re.Pattern) else expected
            st.fail(
                f"{where}: <{tag}> says {text[:120]!r}; the events give <{want_tag}> "
                f"{shown[:120]!r}",
                where=where,
            )
            return  # the blocks no longer line up; one message is enough
    if len(parsed) < len(want):
        want_tag, expected = want[len(parsed)]
        shown = expected.pattern if isinstance(expected, re.Pattern) else expected
        st.fail(f"{REPORT} lacks <{want_tag}> {shown[:120]!r}", where=REPORT)


def _embedded_png(st: _State, fig: _Figure, name: str, where: str) -> bytes | None:
    """The bytes a figure embeds, or None (a FAIL) if it is not a base64 PNG data URL."""
    if not fig.src.startswith(_DATA_PNG):
        st.fail(
            f"{where}: figure {name} is not an embedded PNG (data:image/png;base64)",
            where=where,
        )
        return None
    text = fig.src[len(_DATA_PNG) :]
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        st.fail(f"{where}: figure {name} is not valid base64", where=where)
        return None


def _compare_figure(
    st: _State, a: Archive, i: int, fig: _Figure, want: tuple[str, str, str]
) -> str | None:
    """One figure: its title and caption, its bytes those of its file, a well-formed PNG.

    Returns the file it embeds, or None.
    """
    where = f"{REPORT} line {fig.line}"
    name, title, caption = want
    rel = f"analysis/figures/{name}"
    if fig.alt != title or fig.caption != caption:
        st.fail(
            f"{where}: figure {i + 1} is titled {fig.alt!r}; the report's figure {i + 1} "
            f"is {title!r} with its caption",
            where=where,
        )
    data = _embedded_png(st, fig, name, where)
    if data is None:
        return None
    file_data = a.file(rel)
    if file_data is None:
        st.fail(f"{a.absent(rel)} (embedded at {where})", where=rel)
        return None
    if data != file_data:
        st.fail(
            f"{where}: the image embedded as {name} is not the bytes of {rel} "
            f"(SHA-256 {hashlib.sha256(data).hexdigest()[:16]}… vs "
            f"{hashlib.sha256(file_data).hexdigest()[:16]}…)",
            where=rel,
        )
    problem = png_problem(file_data)
    if problem is not None:
        st.fail(f"{rel} {problem}", where=rel)
    return rel


def _compare_figures(st: _State, a: Archive, figures: list[_Figure]) -> int:
    want = expected_figures(a)
    present = sorted(r for r in a.files.files if r.startswith("analysis/figures/"))
    embedded: set[str] = set()
    for i, fig in enumerate(figures):
        if i >= len(want):
            where = f"{REPORT} line {fig.line}"
            st.fail(
                f"{where}: image {i + 1} ({fig.alt!r}) is not a figure of the report", where=where
            )
            continue
        rel = _compare_figure(st, a, i, fig, want[i])
        if rel is not None:
            embedded.add(rel)
    for _, title, _ in want[len(figures) :]:
        st.fail(f"{REPORT} does not embed the figure {title!r}", where=REPORT)
    for rel in present:
        if rel not in embedded and rel in {f"analysis/figures/{n}" for n, _, _ in want}:
            st.fail(f"{rel} is not embedded in {REPORT}", where=rel)
    return len(figures)


def _report_text(st: _State, a: Archive) -> str | None:
    """The report's text, or None after a WARN (no report at all) or a FAIL."""
    data = a.file(REPORT)
    if data is None:
        figures = [r for r in a.files.files if r.startswith("analysis/figures/")]
        if REPORT not in a.files.others and REPORT not in a.files.dirs and not figures:
            st.warn(
                f"{REPORT} is missing: the archive has no report to check (it was exported "
                "without the report module)",
                where=REPORT,
            )
            return None
        st.fail(a.absent(REPORT), where=REPORT)
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        st.fail(f"{REPORT} is not UTF-8 (byte {exc.start})", where=REPORT)
        return None
    hidden = re.search(r"<!--|<!\[|<\?", text)
    if hidden is not None:
        line = text.count("\n", 0, hidden.start()) + 1
        st.fail(
            f"{REPORT} line {line}: a comment or marked section, which the report never has",
            where=f"{REPORT} line {line}",
        )
        return None
    return text


def _compare_frame(st: _State, parser: _ReportParser, expect: _Expect) -> None:
    """The stylesheet, the title and the SIMULATED DATA banner."""
    if len(parser.styles) != 1 or (
        hashlib.sha256(parser.styles[0].encode("utf-8")).hexdigest() != STYLESHEET_SHA256
    ):
        st.fail(f"{REPORT}: the stylesheet is not the report's (format 1) stylesheet", where=REPORT)
    title = expect.title()
    if title is not None and parser.title != title:
        st.fail(
            f"{REPORT}: the <title> is {parser.title!r}; the protocol gives {title!r}", where=REPORT
        )
    banner = expect.simulated_banner()
    simulated = [t for cls, t in parser.banners if "simulated" in cls.split()]
    if banner is not None and simulated != [banner]:
        st.fail(
            f"{REPORT} does not carry the SIMULATED DATA banner the run.started events call for",
            where=REPORT,
        )
    if banner is None and simulated:
        st.fail(f"{REPORT} says SIMULATED DATA, but no run.started is simulated", where=REPORT)


def check_report(a: Archive) -> Check:
    """``report.html`` and every figure say what the events say (§7)."""
    st = _State("report")
    text = _report_text(st, a)
    if text is None:
        return st.check("")
    parser = _ReportParser()
    parser.feed(text)
    parser.close()
    for problem in parser.problems:
        st.fail(problem, where=problem.split(":", 1)[0])
    expect = _Expect(a)
    _compare_frame(st, parser, expect)
    _compare_blocks(st, parser.blocks, expect.blocks())
    wanted = expect.tables()
    _compare_tables(st, parser.tables, wanted, a)
    n_figures = _compare_figures(st, a, parser.figures)
    return st.check(
        f"{REPORT}: {len(wanted)} tables (verdicts, protocol, data, descriptive, model, "
        f"exploratory) re-derived from the events cell by cell; {n_figures} figures embedded "
        "byte for byte as analysis/figures/*.png, each a well-formed PNG; no script, link or "
        "outside resource"
    )
