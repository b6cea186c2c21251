"""Synthetic stimuli for the PROMPT tumbling-E benchmark, and a rotation builder for real images.

A tumbling-E chart has 61 E optotypes on 11 rows laid out like a Snellen chart
(:data:`SNELLEN_ROWS` glyphs per row, acuity lines :data:`ACUITY_LINES` from 20/200 down
to 20/10). Each E is drawn geometrically as a 5x5-unit optotype with strokes one unit thick
(a full-height spine and three bars) and faces one of :data:`ORIENTATIONS`, the direction of
its *open* side: ``"RIGHT"`` is the ordinary letter E.

The probe set of the main study (:func:`probe_set`) has seven charts: four uniform charts,
two mixed charts whose orientations derive from a seed, and a Snellen letter chart that is a
specificity control (the expected answer is that it is not a tumbling-E chart).

Reproducibility: all geometry is integer pixel arithmetic, orientations and letters derive
from SHA-256, and PNGs are written without metadata and with fixed zlib settings, so the same
arguments give the same bytes with the same Pillow/zlib build. The tumbling-E charts use
rectangles only; the Snellen chart renders Pillow's built-in Aileron font through FreeType,
so its pixels can change with the Pillow or FreeType version.

:func:`rotate_images` builds rotated stimuli (as in the mammography experiment) from source
images, each source annotated with its own base orientation (``orientation.csv``, read by
:func:`read_orientation_annotations`); :func:`synthetic_crop` and :func:`write_rotation_set`
make the synthetic, mammogram-like source crops of the ``prompt-rotation`` template (the
PROMPT paper's Experiment 2 used 16 CBIS-DDSM crops, which cannot be shipped); and
:func:`check_image_for_api` checks an image against the Messages API limits.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from PIL import Image, ImageDraw, ImageFont, ImageOps, UnidentifiedImageError, features

from ledger import describe_os_error, describe_utf8_error
from runner._errors import StimulusError

__all__ = [
    "ACUITY_LINES",
    "ANNOTATED_TRUTH_HEADER",
    "ANNOTATION_FILE",
    "ANNOTATION_HEADER",
    "API_MAX_IMAGE_BYTES",
    "API_MAX_IMAGE_SIDE",
    "DEFAULT_HEIGHT",
    "DEFAULT_WIDTH",
    "EXPECTED_ORIENTATIONS",
    "KIND_SNELLEN",
    "KIND_TUMBLING_E",
    "NOT_A_TUMBLING_E_CHART",
    "ORIENTATIONS",
    "PROBE_IDS",
    "ROTATION_TRUTH_HEADER",
    "SNELLEN_LETTERS",
    "SNELLEN_ROWS",
    "SOURCE_SUFFIXES",
    "TRUTH_HEADER",
    "Chart",
    "Glyph",
    "StimulusError",
    "check_image_for_api",
    "glyph_sizes",
    "mixed_chart",
    "mixed_orientations",
    "probe_set",
    "read_orientation_annotations",
    "read_truth_csv",
    "rotate_images",
    "snellen_letter_chart",
    "synthetic_crop",
    "truth_rows",
    "tumbling_e_chart",
    "uniform_chart",
    "write_probe_set",
    "write_rotation_set",
    "write_truth_csv",
]

ORIENTATIONS: Final = ("UP", "RIGHT", "DOWN", "LEFT")
"""Direction the open side of an E faces; ``"RIGHT"`` is the normal letter E."""

SNELLEN_ROWS: Final = (1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 9)
"""Glyphs per row, top to bottom (61 in all)."""

ACUITY_LINES: Final = (
    "20/200",
    "20/100",
    "20/70",
    "20/50",
    "20/40",
    "20/30",
    "20/25",
    "20/20",
    "20/15",
    "20/13",
    "20/10",
)
"""Acuity line of each row; glyph height is proportional to the denominator."""

SNELLEN_LETTERS: Final = ("C", "D", "H", "K", "N", "O", "R", "S", "V", "Z")
"""The ten Sloan letters used by the Snellen letter chart."""

KIND_TUMBLING_E: Final = "tumbling-e"
KIND_SNELLEN: Final = "snellen-letters"
EXPECTED_ORIENTATIONS: Final = "orientations"
NOT_A_TUMBLING_E_CHART: Final = "not-a-tumbling-e-chart"

DEFAULT_WIDTH: Final = 1000
DEFAULT_HEIGHT: Final = 1400

PROBE_IDS: Final = (
    "uniform-up",
    "uniform-right",
    "uniform-down",
    "uniform-left",
    "mixed-1",
    "mixed-2",
    "snellen-letters",
)
"""Ids of the seven probes of :func:`probe_set`, in order."""

TRUTH_HEADER: Final = ("stimulus", "row", "position", "orientation")
ROTATION_TRUTH_HEADER: Final = ("stimulus", "source", "orientation")
ANNOTATED_TRUTH_HEADER: Final = (
    "stimulus",
    "source",
    "orientation",
    "source_orientation",
    "rotation_cw",
)
"""The rotation builder's truth table when the sources are annotated (:data:`ANNOTATION_FILE`):
each stimulus's truth, its source's annotated base orientation and the clockwise rotation in
degrees that turned one into the other."""

ANNOTATION_FILE: Final = "orientation.csv"
"""A source folder's per-image base orientations (:func:`read_orientation_annotations`)."""
ANNOTATION_HEADER: Final = ("source", "orientation")

API_MAX_IMAGE_BYTES: Final = 5 * 1024 * 1024
"""Messages API per-image limit (5 MiB). The API measures the base64-encoded data."""

API_MAX_IMAGE_SIDE: Final = 8000
"""Messages API limit on each side of an image, in pixels."""

_GLYPH_COUNT: Final = sum(SNELLEN_ROWS)
_MIN_GLYPH_PX: Final = 5
_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SOURCE_SUFFIXES: Final = (".png", ".jpg", ".jpeg")
SOURCE_SUFFIXES: Final = _SOURCE_SUFFIXES
"""File suffixes (lower case) of the source images :func:`rotate_images` reads."""
_PNG_MODES: Final = frozenset({"1", "L", "LA", "I", "I;16", "P", "RGB", "RGBA"})

# Rotation applied to a source image (defined as UP) to produce each orientation.
# PIL's ROTATE_90 is counter-clockwise: the image's up direction then points LEFT.
_ROTATIONS: Final = {
    "UP": None,
    "RIGHT": Image.Transpose.ROTATE_270,
    "DOWN": Image.Transpose.ROTATE_180,
    "LEFT": Image.Transpose.ROTATE_90,
}

_MAGIC: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png", "PNG"),
    (b"\xff\xd8\xff", "image/jpeg", "JPEG"),
    (b"GIF87a", "image/gif", "GIF"),
    (b"GIF89a", "image/gif", "GIF"),
)


@dataclass(frozen=True)
class Glyph:
    """One E on a chart: 1-based row and position (reading order) and the open side."""

    row: int
    position: int
    orientation: str

    def __post_init__(self) -> None:
        if type(self.row) is not int or not 1 <= self.row <= len(SNELLEN_ROWS):
            raise StimulusError(
                f"glyph row must be an integer 1..{len(SNELLEN_ROWS)}: {self.row!r}"
            )
        if type(self.position) is not int or not 1 <= self.position <= SNELLEN_ROWS[self.row - 1]:
            raise StimulusError(
                f"glyph position must be an integer 1..{SNELLEN_ROWS[self.row - 1]} "
                f"on row {self.row}: {self.position!r}"
            )
        if self.orientation not in ORIENTATIONS:
            raise StimulusError(
                f"glyph orientation must be one of {', '.join(ORIENTATIONS)}: {self.orientation!r}"
            )


@dataclass(frozen=True)
class Chart:
    """A generated chart: id, kind, PNG bytes, glyph truth and the expected kind of answer.

    ``kind`` is ``"tumbling-e"`` (61 glyphs, ``expected == "orientations"``) or
    ``"snellen-letters"`` (no glyphs, ``expected == "not-a-tumbling-e-chart"``).
    """

    id: str
    kind: str
    png: bytes
    glyphs: tuple[Glyph, ...]
    expected: str

    def __post_init__(self) -> None:
        _check_id(self.id, "chart id")
        if self.kind == KIND_TUMBLING_E:
            if self.expected != EXPECTED_ORIENTATIONS or len(self.glyphs) != _GLYPH_COUNT:
                raise StimulusError(
                    f"chart {self.id}: a tumbling-e chart has {_GLYPH_COUNT} glyphs and "
                    f"expected={EXPECTED_ORIENTATIONS!r}"
                )
        elif self.kind == KIND_SNELLEN:
            if self.expected != NOT_A_TUMBLING_E_CHART or self.glyphs:
                raise StimulusError(
                    f"chart {self.id}: a snellen-letters chart has no glyphs and "
                    f"expected={NOT_A_TUMBLING_E_CHART!r}"
                )
        else:
            raise StimulusError(f"chart {self.id}: unknown kind {self.kind!r}")


# --------------------------------------------------------------------------- layout


def glyph_sizes(*, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT) -> tuple[int, ...]:
    """Glyph height (= width) in pixels of each of the 11 rows on a chart of this size.

    ``size_k = max(5, round(base * denominator_k / 200))`` where ``base`` (the 20/200 row) is
    the largest integer for which the whole chart fits inside the margins.
    """
    return tuple(size for size, _ in _layout(width, height))


def _row_sizes(base: int) -> list[int]:
    return [
        max(_MIN_GLYPH_PX, (base * int(line.split("/")[1]) + 100) // 200) for line in ACUITY_LINES
    ]


def _row_gaps(sizes: Sequence[int]) -> list[int]:
    """Vertical space between consecutive rows: half the mean glyph size of the two rows."""
    return [max(2, (a + b) // 4) for a, b in itertools.pairwise(sizes)]


def _fits(base: int, inner_w: int, inner_h: int) -> bool:
    sizes = _row_sizes(base)
    widest = max((2 * n - 1) * s for n, s in zip(SNELLEN_ROWS, sizes, strict=True))
    return widest <= inner_w and sum(sizes) + sum(_row_gaps(sizes)) <= inner_h


def _layout(width: int, height: int) -> list[tuple[int, list[tuple[int, int]]]]:
    """Per row: glyph size and the top-left corner of each glyph cell, in reading order."""
    for name, value in (("width", width), ("height", height)):
        if type(value) is not int or not 1 <= value <= API_MAX_IMAGE_SIDE:
            raise StimulusError(
                f"chart {name} must be an integer 1..{API_MAX_IMAGE_SIDE}: {value!r}"
            )
    margin = max(4, min(width, height) // 25)
    inner_w, inner_h = width - 2 * margin, height - 2 * margin
    if not _fits(1, inner_w, inner_h):
        raise StimulusError(f"chart size {width}x{height} is too small for 11 rows of glyphs")
    lo, hi = 1, max(width, height)  # _fits(lo) holds; find the largest base that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _fits(mid, inner_w, inner_h):
            lo = mid
        else:
            hi = mid - 1
    sizes = _row_sizes(lo)
    gaps = [*_row_gaps(sizes), 0]
    y = margin + (inner_h - sum(sizes) - sum(gaps)) // 2
    rows: list[tuple[int, list[tuple[int, int]]]] = []
    for n, size, gap in zip(SNELLEN_ROWS, sizes, gaps, strict=True):
        x0 = (width - (2 * n - 1) * size) // 2
        rows.append((size, [(x0 + 2 * size * i, y) for i in range(n)]))
        y += size + gap
    return rows


def _units(size: int) -> list[int]:
    """Pixel boundaries of the 5 units of a glyph of ``size`` px (rounded, half up)."""
    return [(2 * i * size + 5) // 10 for i in range(6)]


def _draw_e(draw: ImageDraw.ImageDraw, x: int, y: int, size: int, orientation: str) -> None:
    u = _units(size)

    def cells(c0: int, r0: int, c1: int, r1: int) -> None:
        # Unit cells [c0, c1) x [r0, r1); rectangle() includes both end pixels.
        draw.rectangle((x + u[c0], y + u[r0], x + u[c1] - 1, y + u[r1] - 1), fill=0)

    if orientation in ("RIGHT", "LEFT"):
        spine = 0 if orientation == "RIGHT" else 4
        cells(spine, 0, spine + 1, 5)
        for r in (0, 2, 4):
            cells(0, r, 5, r + 1)
    else:
        spine = 4 if orientation == "UP" else 0
        cells(0, spine, 5, spine + 1)
        for c in (0, 2, 4):
            cells(c, 0, c + 1, 5)


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=False, compress_level=9)
    return buffer.getvalue()


def _check_id(value: str, what: str) -> None:
    if not isinstance(value, str) or not _ID_RE.fullmatch(value):
        raise StimulusError(
            f"{what} must be letters, digits, '.', '_' or '-' (not starting with '.', '_' "
            f"or '-'): {value!r}"
        )


def _digest(*parts: object) -> bytes:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()


# --------------------------------------------------------------------------- charts


def tumbling_e_chart(
    chart_id: str,
    orientations: Sequence[str],
    *,
    width: int = DEFAULT_WIDTH,
    height: int = DEFAULT_HEIGHT,
) -> Chart:
    """Draw a tumbling-E chart with the 61 given orientations in reading order.

    Raises :class:`StimulusError` for a bad id, a wrong number of orientations, an unknown
    orientation or a canvas too small (or larger than the API's 8000 px) for the layout.
    """
    _check_id(chart_id, "chart id")
    if isinstance(orientations, str) or len(orientations) != _GLYPH_COUNT:
        raise StimulusError(
            f"chart {chart_id}: need a sequence of {_GLYPH_COUNT} orientations in reading order"
        )
    for index, orientation in enumerate(orientations):
        if orientation not in ORIENTATIONS:
            raise StimulusError(
                f"chart {chart_id}: orientation {index + 1} is {orientation!r}, not one of "
                f"{', '.join(ORIENTATIONS)}"
            )
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    glyphs: list[Glyph] = []
    remaining = iter(orientations)
    for row, (size, cells) in enumerate(_layout(width, height), start=1):
        for position, (x, y) in enumerate(cells, start=1):
            orientation = next(remaining)
            _draw_e(draw, x, y, size, orientation)
            glyphs.append(Glyph(row, position, orientation))
    return Chart(chart_id, KIND_TUMBLING_E, _png(image), tuple(glyphs), EXPECTED_ORIENTATIONS)


def uniform_chart(
    orientation: str, *, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT
) -> Chart:
    """A tumbling-E chart with every glyph facing ``orientation``; id ``uniform-<orientation>``."""
    if orientation not in ORIENTATIONS:
        raise StimulusError(
            f"uniform chart: orientation {orientation!r} is not one of {', '.join(ORIENTATIONS)}"
        )
    return tumbling_e_chart(
        f"uniform-{orientation.lower()}", [orientation] * _GLYPH_COUNT, width=width, height=height
    )


def mixed_orientations(chart_id: str, seed: int) -> list[str]:
    """The 61 orientations of the mixed chart ``chart_id`` for ``seed``.

    Glyph ``i`` (0-based, reading order) faces
    ``ORIENTATIONS[SHA256(f"{chart_id}|{seed}|{attempt}|{i}")[0] % 4]`` (256 is a multiple of
    4, so each orientation is equally likely). ``attempt`` starts at 0 and is increased until
    all four orientations occur, so a mixed chart always contains every orientation (a draw
    missing one has probability about 4 x 0.75**61 = 1.0e-7, so attempt is practically 0).
    """
    if type(seed) is not int:
        raise StimulusError(f"mixed chart {chart_id}: seed must be an integer: {seed!r}")
    attempt = 0
    while True:
        result = [
            ORIENTATIONS[_digest(chart_id, seed, attempt, i)[0] % 4] for i in range(_GLYPH_COUNT)
        ]
        if len(set(result)) == len(ORIENTATIONS):
            return result
        attempt += 1


def mixed_chart(
    chart_id: str, seed: int, *, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT
) -> Chart:
    """A tumbling-E chart with orientations from :func:`mixed_orientations` (SHA-256 of seed)."""
    return tumbling_e_chart(
        chart_id, mixed_orientations(chart_id, seed), width=width, height=height
    )


def _snellen_letters(chart_id: str) -> list[str]:
    """61 Sloan letters derived from SHA-256 of the chart id; no letter repeats its neighbour."""
    letters: list[str] = []
    row_starts = set(itertools.accumulate(SNELLEN_ROWS, initial=0))
    for i in range(_GLYPH_COUNT):
        d = _digest(chart_id, "letters", i)
        index = int.from_bytes(d[:8], "big") % len(SNELLEN_LETTERS)
        if i not in row_starts and SNELLEN_LETTERS[index] == letters[-1]:
            index = (index + 1 + d[8] % (len(SNELLEN_LETTERS) - 1)) % len(SNELLEN_LETTERS)
        letters.append(SNELLEN_LETTERS[index])
    return letters


# 5x5 bitmaps, used only when Pillow has no FreeType support.
_LETTER_BITMAPS: Final = {
    "C": ("#####", "#....", "#....", "#....", "#####"),
    "D": ("####.", "#...#", "#...#", "#...#", "####."),
    "H": ("#...#", "#...#", "#####", "#...#", "#...#"),
    "K": ("#...#", "#..#.", "###..", "#..#.", "#...#"),
    "N": ("#...#", "##..#", "#.#.#", "#..##", "#...#"),
    "O": ("#####", "#...#", "#...#", "#...#", "#####"),
    "R": ("####.", "#...#", "####.", "#..#.", "#...#"),
    "S": ("#####", "#....", "#####", "....#", "#####"),
    "V": ("#...#", "#...#", "#...#", ".#.#.", "..#.."),
    "Z": ("#####", "...#.", "..#..", ".#...", "#####"),
}


def _font_available() -> bool:
    return bool(features.check("freetype2"))


def _draw_letter_font(
    draw: ImageDraw.ImageDraw, x: int, y: int, size: int, letter: str, font: ImageFont.FreeTypeFont
) -> None:
    left, top, right, bottom = (round(v) for v in font.getbbox(letter, anchor="ls"))
    ox = x + (size - (right - left)) // 2 - left
    oy = y + (size - (bottom - top)) // 2 - top
    draw.text((ox, oy), letter, font=font, fill=0, anchor="ls")


def _draw_letter_cells(draw: ImageDraw.ImageDraw, x: int, y: int, size: int, letter: str) -> None:
    u = _units(size)
    for r, line in enumerate(_LETTER_BITMAPS[letter]):
        for c, cell in enumerate(line):
            if cell == "#":
                draw.rectangle((x + u[c], y + u[r], x + u[c + 1] - 1, y + u[r + 1] - 1), fill=0)


def snellen_letter_chart(
    chart_id: str = "snellen-letters", *, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT
) -> Chart:
    """A Snellen chart of Sloan letters in the tumbling-E layout: the specificity control.

    Letters derive from SHA-256 of ``chart_id``. They are rendered with Pillow's built-in
    font (FreeType) scaled so the cap height equals the row's glyph size, or from 5x5
    rectangles if FreeType is unavailable. The chart has no glyph truth;
    ``expected == "not-a-tumbling-e-chart"``.
    """
    _check_id(chart_id, "chart id")
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    letters = iter(_snellen_letters(chart_id))
    use_font = _font_available()
    for size, cells in _layout(width, height):
        font = None
        if use_font:
            # Aileron's cap height is 0.70 em: scale the em so capitals are ``size`` px tall.
            font = ImageFont.load_default(size=max(1, round(size / 0.70)))
        for x, y in cells:
            letter = next(letters)
            if isinstance(font, ImageFont.FreeTypeFont):
                _draw_letter_font(draw, x, y, size, letter, font)
            else:
                _draw_letter_cells(draw, x, y, size, letter)
    return Chart(chart_id, KIND_SNELLEN, _png(image), (), NOT_A_TUMBLING_E_CHART)


def probe_set(
    seed: int, *, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT
) -> list[Chart]:
    """The seven probes of the main study, in :data:`PROBE_IDS` order.

    Four uniform charts (UP, RIGHT, DOWN, LEFT), ``mixed-1`` and ``mixed-2`` with
    orientations derived from ``seed``, and the ``snellen-letters`` control.
    """
    size = {"width": width, "height": height}
    return [
        *(uniform_chart(o, **size) for o in ORIENTATIONS),
        mixed_chart("mixed-1", seed, **size),
        mixed_chart("mixed-2", seed, **size),
        snellen_letter_chart("snellen-letters", **size),
    ]


# --------------------------------------------------------------------------- truth tables


def truth_rows(charts: Sequence[Chart]) -> list[dict[str, str]]:
    """Ground-truth rows (columns :data:`TRUTH_HEADER`) for the charts, in chart order.

    One row per glyph; a Snellen letter chart gets a single row with empty ``row`` and
    ``position`` and ``orientation == "not-a-tumbling-e-chart"``. Duplicate chart ids raise.
    """
    rows: list[dict[str, str]] = []
    seen: set[str] = set()
    for chart in charts:
        if chart.id in seen:
            raise StimulusError(f"duplicate chart id {chart.id!r}")
        seen.add(chart.id)
        if chart.kind == KIND_SNELLEN:
            rows.append(
                {"stimulus": chart.id, "row": "", "position": "", "orientation": chart.expected}
            )
        else:
            rows.extend(
                {
                    "stimulus": chart.id,
                    "row": str(g.row),
                    "position": str(g.position),
                    "orientation": g.orientation,
                }
                for g in chart.glyphs
            )
    return rows


def _write_csv(
    path: Path, header: Sequence[str], rows: Iterable[dict[str, str]], *, overwrite: bool
) -> None:
    try:
        with path.open("w" if overwrite else "x", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(header), lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
    except FileExistsError:
        raise StimulusError(f"{path}: already exists; refusing to overwrite") from None


def write_truth_csv(path: str | Path, charts: Sequence[Chart], *, overwrite: bool = False) -> None:
    """Write :func:`truth_rows` of ``charts`` as UTF-8 CSV with ``\\n`` line ends.

    Refuses to replace an existing file unless ``overwrite`` is true.
    """
    _write_csv(Path(path), TRUTH_HEADER, truth_rows(charts), overwrite=overwrite)


def _positive_int(text: str, field: str, where: str) -> int:
    if not text.isascii() or not text.isdigit() or text.startswith("0"):
        raise StimulusError(f"{where}: {field} must be a positive integer, got {text!r}")
    return int(text)


def read_truth_csv(path: str | Path) -> dict[str, list[Glyph] | str]:
    """Read a truth CSV written by :func:`write_truth_csv`.

    Returns, per stimulus in file order, its glyphs in reading order, or the string
    ``"not-a-tumbling-e-chart"`` for a Snellen control. The header must be exactly
    ``stimulus,row,position,orientation``; rows must have four fields, valid positions of
    the 11-row layout and known orientations; a glyph may appear once and every tumbling-E
    stimulus must list all 61 glyphs. Errors raise :class:`StimulusError` naming the file
    and line.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StimulusError(f"cannot read {describe_os_error(exc, path)}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StimulusError(f"{path}: {describe_utf8_error(data, exc)}") from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, None)
        if header is None:
            raise StimulusError(f"{path}: empty file; expected header {','.join(TRUTH_HEADER)}")
        if tuple(header) != TRUTH_HEADER:
            missing = [c for c in TRUTH_HEADER if c not in header]
            detail = f"missing column {', '.join(missing)}" if missing else "wrong columns"
            raise StimulusError(
                f"{path}:{reader.line_num}: {detail}; expected header "
                f"{','.join(TRUTH_HEADER)}, got {','.join(header)}"
            )
        result: dict[str, list[Glyph] | str] = {}
        first_line: dict[str, int] = {}
        seen: dict[tuple[str, int, int], int] = {}
        for fields in reader:
            where = f"{path}:{reader.line_num}"
            if not fields:
                continue  # blank line
            if len(fields) != len(TRUTH_HEADER):
                raise StimulusError(
                    f"{where}: expected {len(TRUTH_HEADER)} fields, got {len(fields)}"
                )
            stimulus, row_text, position_text, orientation = fields
            try:
                _check_id(stimulus, "stimulus")
            except StimulusError as exc:
                raise StimulusError(f"{where}: {exc}") from None
            entry = result.get(stimulus)
            if orientation == NOT_A_TUMBLING_E_CHART:
                if row_text or position_text:
                    raise StimulusError(
                        f"{where}: a {NOT_A_TUMBLING_E_CHART} row has empty row and position"
                    )
                if entry is not None:
                    raise StimulusError(
                        f"{where}: stimulus {stimulus} already has rows "
                        f"(line {first_line[stimulus]})"
                    )
                result[stimulus] = NOT_A_TUMBLING_E_CHART
                first_line[stimulus] = reader.line_num
                continue
            if orientation not in ORIENTATIONS:
                raise StimulusError(
                    f"{where}: unknown orientation {orientation!r}; expected one of "
                    f"{', '.join(ORIENTATIONS)} or {NOT_A_TUMBLING_E_CHART}"
                )
            row = _positive_int(row_text, "row", where)
            position = _positive_int(position_text, "position", where)
            if row > len(SNELLEN_ROWS) or position > SNELLEN_ROWS[row - 1]:
                raise StimulusError(
                    f"{where}: no glyph at row {row}, position {position} of the "
                    f"{len(SNELLEN_ROWS)}-row chart"
                )
            key = (stimulus, row, position)
            if key in seen:
                raise StimulusError(
                    f"{where}: duplicate glyph {stimulus} row {row} position {position} "
                    f"(first on line {seen[key]})"
                )
            seen[key] = reader.line_num
            if isinstance(entry, str):
                raise StimulusError(
                    f"{where}: stimulus {stimulus} is marked {NOT_A_TUMBLING_E_CHART} "
                    f"on line {first_line[stimulus]}"
                )
            if entry is None:
                entry = result[stimulus] = []
                first_line[stimulus] = reader.line_num
            entry.append(Glyph(row, position, orientation))
    except csv.Error as exc:
        raise StimulusError(f"{path}:{reader.line_num}: malformed CSV: {exc}") from None
    for stimulus, entry in result.items():
        if isinstance(entry, list):
            if len(entry) != _GLYPH_COUNT:
                raise StimulusError(
                    f"{path}:{first_line[stimulus]}: stimulus {stimulus} lists {len(entry)} "
                    f"glyphs, expected {_GLYPH_COUNT}"
                )
            entry.sort(key=lambda g: (g.row, g.position))
    return result


# --------------------------------------------------------------------------- files


def write_probe_set(
    directory: Path, seed: int, *, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT
) -> list[Path]:
    """Write the seven probes as ``<id>.png`` and their ``truth.csv`` into ``directory``.

    Creates ``directory`` if needed. Refuses (before writing anything) if any of the eight
    files already exists. Returns the paths written, PNGs in probe order then ``truth.csv``.
    """
    directory = Path(directory)
    charts = probe_set(seed, width=width, height=height)
    targets = [directory / f"{chart.id}.png" for chart in charts]
    truth = directory / "truth.csv"
    existing = [p for p in [*targets, truth] if p.exists()]
    if existing:
        raise StimulusError(
            f"{existing[0]}: already exists; refusing to overwrite a probe set "
            f"({len(existing)} of {len(targets) + 1} files present)"
        )
    _mkdir(directory)
    for chart, target in zip(charts, targets, strict=True):
        _write_new(target, chart.png)
    write_truth_csv(truth, charts)
    return [*targets, truth]


def _mkdir(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StimulusError(
            f"{directory}: cannot create directory: {exc.strerror or exc}"
        ) from None


def _write_new(path: Path, data: bytes) -> None:
    try:
        with path.open("xb") as handle:
            handle.write(data)
    except FileExistsError:
        raise StimulusError(f"{path}: already exists; refusing to overwrite") from None
    except OSError as exc:
        raise StimulusError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _annotation(fields: list[str], where: str, lines: Mapping[str, int]) -> tuple[str, str]:
    """One row of ``orientation.csv``: (source, orientation); a source annotated once."""
    if len(fields) != 2:
        raise StimulusError(f"{where}: expected 2 fields, got {len(fields)}")
    source, orientation = (f.strip() for f in fields)
    if orientation not in ORIENTATIONS:
        raise StimulusError(
            f"{where}: source {source!r}: unknown orientation {orientation!r}; expected "
            f"one of {', '.join(ORIENTATIONS)}"
        )
    if source in lines:
        raise StimulusError(
            f"{where}: source {source!r} is annotated twice (first on line {lines[source]})"
        )
    return source, orientation


def read_orientation_annotations(path: Path, stems: Iterable[str]) -> dict[str, str]:
    """Read a source folder's ``orientation.csv``: each source image's annotated base orientation.

    The file has the header ``source,orientation`` and one row per source image: the image's
    file name stem and the direction its reference vector points in the image as it is (for a
    mammographic crop, the investigator-annotated chest-wall-to-nipple vector; for an ordinary
    photograph, where its top is), one of :data:`ORIENTATIONS`. Every stem in ``stems`` needs
    exactly one row and every row an image. Raises :class:`StimulusError` naming the file and
    line.
    """
    path = Path(path)
    wanted = set(stems)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StimulusError(f"cannot read {describe_os_error(exc, path)}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StimulusError(f"{path}: {describe_utf8_error(data, exc)}") from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise StimulusError(f"{path}:{reader.line_num}: not valid CSV ({exc})") from None
    if header is None or tuple(h.strip() for h in header) != ANNOTATION_HEADER:
        raise StimulusError(
            f"{path}:1: expected the header {','.join(ANNOTATION_HEADER)}, got "
            f"{','.join(header or []) or 'an empty file'}"
        )
    found: dict[str, str] = {}
    lines: dict[str, int] = {}
    try:
        for fields in reader:
            if not fields:
                continue
            source, orientation = _annotation(fields, f"{path}:{reader.line_num}", lines)
            if source not in wanted:
                raise StimulusError(
                    f"{path}:{reader.line_num}: source {source!r} has no .png, .jpg or .jpeg "
                    f"image in {path.parent}"
                )
            found[source], lines[source] = orientation, reader.line_num
    except csv.Error as exc:
        raise StimulusError(f"{path}:{reader.line_num}: malformed CSV: {exc}") from None
    missing = sorted(wanted - set(found))
    if missing:
        raise StimulusError(
            f"{path}: no base orientation for source {missing[0]!r}"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
            + "; every source image needs a row source,orientation"
        )
    return found


def rotate_images(source_dir: Path, out_dir: Path) -> list[dict[str, str]]:
    """Build the four rotations of every PNG/JPEG in ``source_dir`` into ``out_dir``.

    Each source image is taken as it is (after applying any EXIF orientation tag). Its base
    orientation is the one annotated for it in ``source_dir/orientation.csv``
    (:func:`read_orientation_annotations`) or, without that file, UP (every source the right
    way up). For each orientation ``o`` of :data:`ORIENTATIONS` the image is turned clockwise
    by the quarter turns that bring its base orientation to ``o`` (UP -> RIGHT -> DOWN ->
    LEFT is clockwise), with :meth:`PIL.Image.Image.transpose` (pixel-exact, no resampling),
    and saved losslessly as ``<source-stem>-<o in lower case>.png`` (ICC profile and
    transparency kept; other metadata dropped): a stimulus's name states its truth. Writes
    ``truth.csv`` with columns ``stimulus,source,orientation`` (:data:`ROTATION_TRUTH_HEADER`;
    with annotations :data:`ANNOTATED_TRUTH_HEADER`, which adds the source's base orientation
    and the clockwise rotation in degrees) and returns its rows (sources sorted by file name,
    orientations in :data:`ORIENTATIONS` order), so analyses can group stimuli by source
    image. Refuses to overwrite any existing file.
    """
    source_dir, out_dir = Path(source_dir), Path(out_dir)
    if not source_dir.is_dir():
        raise StimulusError(f"{source_dir}: not a directory")
    if out_dir.exists() and out_dir.resolve() == source_dir.resolve():
        raise StimulusError(f"{out_dir}: output directory must differ from the source directory")
    sources = sorted(
        p for p in source_dir.iterdir() if p.is_file() and p.suffix.lower() in _SOURCE_SUFFIXES
    )
    if not sources:
        raise StimulusError(f"{source_dir}: no .png, .jpg or .jpeg source images")
    stems: dict[str, Path] = {}
    for source in sources:
        _check_id(source.stem, f"{source}: source file name stem")
        if source.stem in stems:
            raise StimulusError(f"{source}: same stem as {stems[source.stem].name}")
        stems[source.stem] = source
    annotated = (source_dir / ANNOTATION_FILE).is_file()
    base = (
        read_orientation_annotations(source_dir / ANNOTATION_FILE, stems)
        if annotated
        else dict.fromkeys(stems, "UP")
    )
    truth = out_dir / "truth.csv"
    targets = [out_dir / f"{s.stem}-{o.lower()}.png" for s in sources for o in ORIENTATIONS]
    existing = [p for p in [*targets, truth] if p.exists()]
    if existing:
        raise StimulusError(f"{existing[0]}: already exists; refusing to overwrite")
    images = [_load_source(source) for source in sources]
    _mkdir(out_dir)
    rows: list[dict[str, str]] = []
    for source, image in zip(sources, images, strict=True):
        for orientation in ORIENTATIONS:
            turns = (ORIENTATIONS.index(orientation) - ORIENTATIONS.index(base[source.stem])) % 4
            method = _ROTATIONS[ORIENTATIONS[turns]]
            rotated = image.copy() if method is None else image.transpose(method)
            stimulus = f"{source.stem}-{orientation.lower()}"
            _write_new(out_dir / f"{stimulus}.png", _png_lossless(rotated))
            row = {"stimulus": stimulus, "source": source.stem, "orientation": orientation}
            if annotated:
                row |= {"source_orientation": base[source.stem], "rotation_cw": str(90 * turns)}
            rows.append(row)
    header = ANNOTATED_TRUTH_HEADER if annotated else ROTATION_TRUTH_HEADER
    _write_csv(truth, header, rows, overwrite=False)
    return rows


# ------------------------------------------------------------------ synthetic crops

CROP_SIZE: Final = 384
"""Side in px of a synthetic crop (:func:`synthetic_crop`)."""


def synthetic_crop(seed: int, index: int, *, size: int = CROP_SIZE) -> tuple[bytes, str]:
    """A synthetic, mammogram-like grey-scale crop and its chest-wall-to-nipple direction.

    Drawn as a crop of a mammogram looks: a dark background, a bright half-ellipse of tissue
    standing on the chest wall (one edge of the image), brighter fibroglandular patches and
    a nipple at the tissue's far end. The tissue's size, the patches and which edge carries
    the chest wall derive from SHA-256 of ``(seed, index)``; the returned direction (one of
    :data:`ORIENTATIONS`) is where the nipple points from the chest wall, the annotation the
    paper's investigator made by hand. Even and odd indexes alternate between RIGHT and LEFT
    (the two sides of a craniocaudal view); every fourth crop points UP or DOWN instead. All
    geometry is integer; the PNG is written without metadata, so the same arguments give the
    same bytes.
    """
    digest = _digest("prompt-rotation crop", seed, index)
    width = size * (40 + digest[0] % 8) // 100  # half-width of the tissue
    reach = size * (58 + digest[1] % 14) // 100  # chest wall to nipple
    image = Image.new("L", (size, size), 12 + digest[2] % 10)
    draw = ImageDraw.Draw(image)
    centre = size // 2 + (digest[3] % 21) - 10
    # drawn with the nipple pointing UP (chest wall along the bottom edge), turned below
    draw.ellipse(
        (centre - width, size - reach, centre + width, size + reach), fill=150 + digest[4] % 40
    )
    for k in range(6):  # fibroglandular patches inside the tissue
        d = _digest("patch", seed, index, k)
        rx, ry = size * (5 + d[0] % 8) // 100, size * (4 + d[1] % 6) // 100
        x = centre + (d[2] - 128) * (width - rx) // 160
        y = size - reach // 4 - d[3] * (reach // 2) // 255
        draw.ellipse((x - rx, y - ry, x + rx, y + ry), fill=200 + d[4] % 40)
    nipple = max(4, size // 40)
    top = size - reach
    draw.ellipse(
        (centre - nipple, top - nipple // 2, centre + nipple, top + nipple * 3 // 2), fill=215
    )
    direction = (
        "UP"
        if index % 4 == 3 and digest[5] % 2
        else "DOWN"
        if index % 4 == 3
        else ("RIGHT" if index % 2 == 0 else "LEFT")
    )
    method = _ROTATIONS[direction]
    turned = image if method is None else image.transpose(method)
    return _png_lossless(turned), direction


def write_rotation_set(root: Path, seed: int, count: int = 16) -> list[dict[str, str]]:
    """Write ``count`` synthetic crops and their annotations, then their four rotations.

    ``root/sources/crop-01.png`` ... (:func:`synthetic_crop`) and
    ``root/sources/orientation.csv`` (each crop's chest-wall-to-nipple direction), then
    :func:`rotate_images` into ``root/stimuli`` (``count`` x 4 stimuli and ``truth.csv``).
    Refuses to overwrite any file. Returns the truth table's rows.
    """
    root = Path(root)
    sources = root / "sources"
    if count < 1:
        raise StimulusError(f"count must be at least 1, not {count}")
    if sources.exists():
        raise StimulusError(f"{sources}: already exists; refusing to overwrite")
    _mkdir(sources)
    rows = []
    for index in range(count):
        png, direction = synthetic_crop(seed, index)
        stem = f"crop-{index + 1:02d}"
        _write_new(sources / f"{stem}.png", png)
        rows.append({"source": stem, "orientation": direction})
    _write_csv(sources / ANNOTATION_FILE, ANNOTATION_HEADER, rows, overwrite=False)
    return rotate_images(sources, root / "stimuli")


def _load_source(path: Path) -> Image.Image:
    try:
        with Image.open(path) as opened:
            if opened.format not in ("PNG", "JPEG"):
                raise StimulusError(f"{path}: is {opened.format}, expected PNG or JPEG")
            opened.load()
            image = ImageOps.exif_transpose(opened)
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise StimulusError(f"{path}: cannot read image: {exc}") from None
    if image.mode not in _PNG_MODES:
        image = image.convert("RGB")  # e.g. CMYK or YCbCr JPEG: PNG cannot store these modes
    return image


def _png_lossless(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    kept = {k: image.info[k] for k in ("icc_profile", "transparency") if k in image.info}
    image.save(buffer, format="PNG", optimize=False, compress_level=9, **kept)
    return buffer.getvalue()


# --------------------------------------------------------------------------- API limits


def check_image_for_api(data: bytes, *, name: str) -> tuple[str, int, int]:
    """Check an image against the Messages API limits; return ``(media_type, width, height)``.

    Accepts PNG, JPEG, GIF and WEBP (recognised by their signatures and parsed by Pillow)
    of at most :data:`API_MAX_IMAGE_BYTES` and at most :data:`API_MAX_IMAGE_SIDE` px per
    side. The byte limit is applied to the base64 encoding the API receives, so the raw
    file may be at most 3/4 of 5 MiB (3,932,160 bytes). Only the header is parsed; pixel
    data is not decoded. Raises :class:`StimulusError` naming ``name`` and the limit.
    """
    encoded = 4 * ((len(data) + 2) // 3)
    if encoded > API_MAX_IMAGE_BYTES:
        raise StimulusError(
            f"{name}: {len(data)} bytes ({encoded} bytes base64) exceeds the API limit of "
            f"5 MB ({API_MAX_IMAGE_BYTES} bytes base64-encoded, i.e. "
            f"{API_MAX_IMAGE_BYTES * 3 // 4} bytes raw)"
        )
    expected: tuple[str, str] | None = None
    for magic, media_type, pil_format in _MAGIC:
        if data.startswith(magic):
            expected = (media_type, pil_format)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        expected = ("image/webp", "WEBP")
    if expected is None:
        raise StimulusError(
            f"{name}: unsupported image format; the API accepts PNG, JPEG, GIF and WEBP"
        )
    media_type, pil_format = expected
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=[pil_format]) as image:
                width, height = image.size
    except Image.DecompressionBombError:
        raise StimulusError(
            f"{name}: too many pixels; the API limit is {API_MAX_IMAGE_SIDE} px per side"
        ) from None
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise StimulusError(f"{name}: not a readable {pil_format} image: {exc}") from None
    if width > API_MAX_IMAGE_SIDE or height > API_MAX_IMAGE_SIDE:
        raise StimulusError(
            f"{name}: {width}x{height} px exceeds the API limit of {API_MAX_IMAGE_SIDE} px per side"
        )
    return media_type, width, height
