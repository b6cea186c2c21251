"""Tumbling-E charts, probe set, truth CSVs, rotation builder and API image checks."""

from __future__ import annotations

import csv
import io
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image, features

from runner import _stimuli as stimuli
from runner._stimuli import (
    ACUITY_LINES,
    ORIENTATIONS,
    PROBE_IDS,
    SNELLEN_ROWS,
    Chart,
    Glyph,
    StimulusError,
    check_image_for_api,
    glyph_sizes,
    mixed_chart,
    mixed_orientations,
    probe_set,
    read_truth_csv,
    rotate_images,
    snellen_letter_chart,
    truth_rows,
    tumbling_e_chart,
    uniform_chart,
    write_probe_set,
    write_truth_csv,
)

SEED = 20240601


@pytest.fixture(scope="module")
def probes() -> list[Chart]:
    return probe_set(SEED)


def by_id(charts: list[Chart]) -> dict[str, Chart]:
    return {c.id: c for c in charts}


# ----------------------------------------------------------------- decoding from pixels


def _runs(flags: list[bool]) -> list[tuple[int, int]]:
    """Half-open index ranges of consecutive True values."""
    runs, start = [], None
    for i, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            runs.append((start, i))
            start = None
    return runs


def _dark_lines(image: Image.Image) -> list[bool]:
    """Per pixel row: does it contain a dark pixel?"""
    w = image.width
    data = image.point(lambda v: 0 if v < 128 else 255).tobytes()
    return [0 in data[y * w : (y + 1) * w] for y in range(image.height)]


def glyph_boxes(png: bytes) -> list[list[tuple[int, int, int, int]]]:
    """Segment a chart into row bands, then glyphs: boxes (x0, y0, x1, y1), half-open."""
    image = Image.open(io.BytesIO(png)).convert("L")
    rows = []
    for y0, y1 in _runs(_dark_lines(image)):
        band = image.crop((0, y0, image.width, y1)).transpose(Image.Transpose.TRANSPOSE)
        rows.append([(x0, y0, x1, y1) for x0, x1 in _runs(_dark_lines(band))])
    return rows


def decode_orientations(png: bytes) -> list[list[str]]:
    """Read each E's open side from the pixels: the edge strip with the fewest dark pixels."""
    image = Image.open(io.BytesIO(png)).convert("L")
    result = []
    for row in glyph_boxes(png):
        decoded = []
        for x0, y0, x1, y1 in row:
            assert x1 - x0 == y1 - y0, "glyph box is not square"
            box = image.crop((x0, y0, x1, y1))
            w, h = box.size
            px = box.load()
            assert px is not None

            def density(points: list[tuple[int, int]], px: object = px) -> float:
                return sum(px[p] < 128 for p in points) / len(points)  # type: ignore[index]

            edges = {
                "UP": density([(x, 0) for x in range(w)]),
                "DOWN": density([(x, h - 1) for x in range(w)]),
                "LEFT": density([(0, y) for y in range(h)]),
                "RIGHT": density([(w - 1, y) for y in range(h)]),
            }
            open_side = min(edges, key=lambda k: edges[k])
            closed = [v for k, v in edges.items() if k != open_side]
            assert closed == [1.0, 1.0, 1.0], edges  # spine and the two outer bars are solid
            assert 0.4 <= edges[open_side] <= 0.8, edges  # three bar ends and two gaps
            decoded.append(open_side)
        result.append(decoded)
    return result


def truth_by_row(chart: Chart) -> list[list[str]]:
    rows: list[list[str]] = [[] for _ in SNELLEN_ROWS]
    for g in chart.glyphs:
        rows[g.row - 1].append(g.orientation)
    return rows


# ----------------------------------------------------------------- charts


def test_tumbling_chart_has_61_glyphs_in_the_snellen_layout(probes: list[Chart]) -> None:
    assert sum(SNELLEN_ROWS) == 61
    assert len(ACUITY_LINES) == len(SNELLEN_ROWS) == 11
    for chart in probes[:6]:
        assert chart.kind == "tumbling-e"
        assert chart.expected == "orientations"
        assert len(chart.glyphs) == 61
        expected = [(r, p) for r, n in enumerate(SNELLEN_ROWS, 1) for p in range(1, n + 1)]
        assert [(g.row, g.position) for g in chart.glyphs] == expected
        # the pixels agree: 11 bands with the right number of glyphs each
        assert [len(row) for row in glyph_boxes(chart.png)] == list(SNELLEN_ROWS)


def test_probe_set_ids_and_kinds(probes: list[Chart]) -> None:
    assert [c.id for c in probes] == list(PROBE_IDS)
    assert PROBE_IDS == (
        "uniform-up",
        "uniform-right",
        "uniform-down",
        "uniform-left",
        "mixed-1",
        "mixed-2",
        "snellen-letters",
    )
    snellen = probes[-1]
    assert snellen.kind == "snellen-letters"
    assert snellen.glyphs == ()
    assert snellen.expected == "not-a-tumbling-e-chart"


def test_regeneration_gives_identical_bytes(probes: list[Chart]) -> None:
    again = probe_set(SEED)
    for a, b in zip(probes, again, strict=True):
        assert a.png == b.png, a.id
        assert a == b
    other = by_id(probe_set(SEED + 1))
    for chart in probes:
        if chart.id.startswith("mixed"):
            assert other[chart.id].png != chart.png
        else:
            assert other[chart.id].png == chart.png


def test_pngs_carry_no_metadata(probes: list[Chart]) -> None:
    for chart in probes:
        data, pos, chunks = chart.png, 8, []
        while pos < len(data):
            length = int.from_bytes(data[pos : pos + 4], "big")
            chunks.append(data[pos + 4 : pos + 8])
            pos += 12 + length
        assert set(chunks) == {b"IHDR", b"IDAT", b"IEND"}, chart.id


@pytest.mark.parametrize("orientation", ORIENTATIONS)
def test_uniform_chart_orientations_read_from_pixels(probes: list[Chart], orientation: str) -> None:
    chart = by_id(probes)[f"uniform-{orientation.lower()}"]
    assert {g.orientation for g in chart.glyphs} == {orientation}
    assert decode_orientations(chart.png) == truth_by_row(chart)


@pytest.mark.parametrize("chart_id", ["mixed-1", "mixed-2"])
def test_mixed_chart_orientations_read_from_pixels(probes: list[Chart], chart_id: str) -> None:
    chart = by_id(probes)[chart_id]
    decoded = decode_orientations(chart.png)
    truth = truth_by_row(chart)
    assert decoded[:10] == truth[:10]  # rows 1-10
    assert decoded[10] == truth[10]  # the 20/10 row (16 px) is still exact


def test_smallest_glyphs_are_clamped_to_5px_and_still_readable() -> None:
    sizes = glyph_sizes(width=200, height=260)
    assert min(sizes) == 5
    chart = mixed_chart("tiny", 3, width=200, height=260)
    assert decode_orientations(chart.png) == truth_by_row(chart)
    boxes = glyph_boxes(chart.png)
    assert [x1 - x0 for x0, _, x1, _ in boxes[-1]] == [5] * 9


@settings(max_examples=15, deadline=None)
@given(
    orientations=st.lists(st.sampled_from(ORIENTATIONS), min_size=61, max_size=61),
    width=st.integers(200, 700),
    height=st.integers(260, 900),
)
def test_any_chart_reads_back_from_pixels(orientations: list[str], width: int, height: int) -> None:
    chart = tumbling_e_chart("prop", orientations, width=width, height=height)
    assert decode_orientations(chart.png) == truth_by_row(chart)
    assert Image.open(io.BytesIO(chart.png)).size == (width, height)


def test_glyph_sizes_follow_the_acuity_lines() -> None:
    sizes = glyph_sizes()
    assert len(sizes) == 11
    assert list(sizes) == sorted(sizes, reverse=True)
    base = sizes[0]
    for size, line in zip(sizes, ACUITY_LINES, strict=True):
        assert abs(size - base * int(line.split("/")[1]) / 200) <= 0.5
    # the pixels agree with the reported sizes
    chart = uniform_chart("UP")
    heights = [row[0][3] - row[0][1] for row in glyph_boxes(chart.png)]
    assert heights == list(sizes)


def test_mixed_charts_differ_and_use_every_orientation(probes: list[Chart]) -> None:
    m1, m2 = by_id(probes)["mixed-1"], by_id(probes)["mixed-2"]
    assert m1.glyphs != m2.glyphs
    for chart in (m1, m2):
        assert {g.orientation for g in chart.glyphs} == set(ORIENTATIONS)
    assert [g.orientation for g in m1.glyphs] == mixed_orientations("mixed-1", SEED)
    for seed in range(50):
        assert set(mixed_orientations("mixed-1", seed)) == set(ORIENTATIONS)
    assert mixed_orientations("mixed-1", 1) != mixed_orientations("mixed-1", 2)


def test_every_probe_passes_the_api_check(probes: list[Chart]) -> None:
    for chart in probes:
        assert check_image_for_api(chart.png, name=chart.id) == ("image/png", 1000, 1400)


def test_snellen_chart_has_letters_in_11_rows(probes: list[Chart]) -> None:
    chart = by_id(probes)["snellen-letters"]
    image = Image.open(io.BytesIO(chart.png))
    assert image.size == (1000, 1400)
    assert len(_runs(_dark_lines(image.convert("L")))) == 11
    boxes = glyph_boxes(chart.png)
    assert [len(row) for row in boxes] == list(SNELLEN_ROWS)  # 61 separate letters
    for row, size in zip(boxes, glyph_sizes(), strict=True):  # cap height about the row size
        assert all(abs((y1 - y0) - size) <= max(2, size // 20) for _, y0, _, y1 in row)
    assert truth_rows([chart]) == [
        {
            "stimulus": "snellen-letters",
            "row": "",
            "position": "",
            "orientation": "not-a-tumbling-e-chart",
        }
    ]


def test_snellen_chart_without_freetype_uses_rectangles(monkeypatch: pytest.MonkeyPatch) -> None:
    with_font = snellen_letter_chart()
    monkeypatch.setattr(stimuli, "_font_available", lambda: False)
    fallback = snellen_letter_chart()
    assert fallback.png == snellen_letter_chart().png
    assert fallback.glyphs == ()
    if features.check("freetype2"):
        assert fallback.png != with_font.png
    boxes = glyph_boxes(fallback.png)
    assert [len(row) for row in boxes] == list(SNELLEN_ROWS)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: tumbling_e_chart("x", ["UP"] * 60), "61 orientations"),
        (lambda: tumbling_e_chart("x", ["UP"] * 60 + ["up"]), "orientation 61 is 'up'"),
        (lambda: tumbling_e_chart("../x", ["UP"] * 61), "chart id"),
        (lambda: uniform_chart("NORTH"), "NORTH"),
        (lambda: uniform_chart("UP", width=50, height=50), "too small"),
        (lambda: uniform_chart("UP", width=9000), "width must be an integer 1..8000"),
        (lambda: Glyph(12, 1, "UP"), "row must be"),
        (lambda: Glyph(1, 2, "UP"), "position must be an integer 1..1 on row 1"),
    ],
)
def test_bad_chart_arguments(call: object, message: str) -> None:
    with pytest.raises(StimulusError, match=message):
        call()  # type: ignore[operator]


# ----------------------------------------------------------------- truth CSV


def test_truth_csv_round_trip(tmp_path: Path, probes: list[Chart]) -> None:
    path = tmp_path / "truth.csv"
    write_truth_csv(path, probes)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "stimulus,row,position,orientation"
    assert len(lines) == 1 + 6 * 61 + 1
    assert lines[-1] == "snellen-letters,,,not-a-tumbling-e-chart"
    truth = read_truth_csv(path)
    assert list(truth) == list(PROBE_IDS)
    for chart in probes[:6]:
        assert truth[chart.id] == list(chart.glyphs)
    assert truth["snellen-letters"] == "not-a-tumbling-e-chart"
    with pytest.raises(StimulusError, match="already exists"):
        write_truth_csv(path, probes)
    write_truth_csv(path, probes[:1], overwrite=True)
    assert list(read_truth_csv(path)) == ["uniform-up"]


def _bad_csv(tmp_path: Path, probes: list[Chart], edit: str) -> Path:
    rows = [dict(r) for r in truth_rows(probes[:2] + probes[-1:])]
    header = ["stimulus", "row", "position", "orientation"]
    if edit == "missing column":
        header.remove("position")
        for r in rows:
            del r["position"]
    elif edit == "unknown orientation":
        rows[4]["orientation"] = "NORTH"
    elif edit == "duplicate glyph":
        rows[70]["position"] = "1"
    elif edit == "non-integer row":
        rows[4]["row"] = "three"
    elif edit == "missing glyph":
        del rows[5]
    elif edit == "snellen with glyphs":
        rows.append(dict(rows[0], stimulus="snellen-letters"))
    path = tmp_path / "bad truth.csv"
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("missing column", r"bad truth\.csv:1: missing column position"),
        ("unknown orientation", r"bad truth\.csv:6: unknown orientation 'NORTH'"),
        (
            "duplicate glyph",
            r"bad truth\.csv:72: duplicate glyph uniform-right row 4 position 1 "
            r"\(first on line 69\)",
        ),
        ("non-integer row", r"bad truth\.csv:6: row must be a positive integer, got 'three'"),
        ("missing glyph", r"bad truth\.csv:2: stimulus uniform-up lists 60 glyphs, expected 61"),
        ("snellen with glyphs", r"bad truth\.csv:125: stimulus snellen-letters is marked"),
    ],
)
def test_bad_truth_csv(tmp_path: Path, probes: list[Chart], edit: str, message: str) -> None:
    path = _bad_csv(tmp_path, probes, edit)
    with pytest.raises(StimulusError, match=message):
        read_truth_csv(path)


def test_truth_csv_not_utf8_or_empty(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(b"")
    with pytest.raises(StimulusError, match=r"t\.csv: empty file"):
        read_truth_csv(path)
    path.write_bytes(b"stimulus,row,position,orientation\n\xff,1,1,UP\n")
    with pytest.raises(StimulusError, match=r"t\.csv: not UTF-8"):
        read_truth_csv(path)
    path.write_text("stimulus,row,position,orientation\nx,1,1\n", encoding="utf-8")
    with pytest.raises(StimulusError, match=r"t\.csv:2: expected 4 fields, got 3"):
        read_truth_csv(path)


def test_truth_rows_rejects_duplicate_chart_ids(probes: list[Chart]) -> None:
    with pytest.raises(StimulusError, match="duplicate chart id 'uniform-up'"):
        truth_rows([probes[0], probes[0]])


# ----------------------------------------------------------------- files


def test_write_probe_set(tmp_path: Path, probes: list[Chart]) -> None:
    out = tmp_path / "probes"
    paths = write_probe_set(out, SEED)
    assert [p.name for p in paths] == [f"{i}.png" for i in PROBE_IDS] + ["truth.csv"]
    for chart, path in zip(probes, paths, strict=False):
        assert path.read_bytes() == chart.png
    assert read_truth_csv(out / "truth.csv")["mixed-2"] == list(by_id(probes)["mixed-2"].glyphs)
    before = {p: p.stat().st_mtime_ns for p in paths}
    with pytest.raises(StimulusError, match=r"uniform-up\.png: already exists"):
        write_probe_set(out, SEED + 1)
    assert {p: p.stat().st_mtime_ns for p in paths} == before
    # a single existing file blocks the whole set: nothing is written
    other = tmp_path / "other"
    other.mkdir()
    (other / "truth.csv").write_text("keep", encoding="utf-8")
    with pytest.raises(StimulusError, match=r"truth\.csv: already exists"):
        write_probe_set(other, SEED)
    assert sorted(p.name for p in other.iterdir()) == ["truth.csv"]
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    with pytest.raises(StimulusError, match=r"file: cannot create directory"):
        write_probe_set(blocker, SEED)


def _source(size: tuple[int, int], seed: int, mode: str = "RGB") -> Image.Image:
    rng = random.Random(seed)
    image = Image.new(mode, size)
    image.putdata([tuple(rng.randrange(256) for _ in mode) for _ in range(size[0] * size[1])])
    return image


def test_rotate_images(tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    a = _source((30, 20), 1)
    a.paste((255, 0, 0), (0, 0, 30, 1))  # a red top edge marks the image's UP
    a.save(src / "case-a.png")
    Image.new("L", (16, 24), 200).save(src / "case-b.jpg", quality=90)
    (src / "notes.txt").write_text("ignored", encoding="utf-8")
    with Image.open(src / "case-b.jpg") as jpeg:
        b = jpeg.convert("L")

    rows = rotate_images(src, out)
    assert rows == [
        {"stimulus": f"case-{s}-{o.lower()}", "source": f"case-{s}", "orientation": o}
        for s in ("a", "b")
        for o in ORIENTATIONS
    ]
    assert sorted(p.name for p in out.glob("*.png")) == sorted(f"{r['stimulus']}.png" for r in rows)
    with (out / "truth.csv").open(encoding="utf-8", newline="") as f:
        assert list(csv.DictReader(f)) == rows

    undo = {
        "UP": None,
        "RIGHT": Image.Transpose.ROTATE_90,
        "DOWN": Image.Transpose.ROTATE_180,
        "LEFT": Image.Transpose.ROTATE_270,
    }
    for stem, original in (("case-a", a), ("case-b", b)):
        for orientation, method in undo.items():
            with Image.open(out / f"{stem}-{orientation.lower()}.png") as rotated:
                assert rotated.format == "PNG"
                assert rotated.mode == original.mode
                back = rotated if method is None else rotated.transpose(method)
                assert back.tobytes() == original.tobytes(), (stem, orientation)
    # the red UP edge ends up on the side the orientation names
    with Image.open(out / "case-a-right.png") as right:
        assert right.size == (20, 30)
        assert {right.getpixel((19, y)) for y in range(30)} == {(255, 0, 0)}
    with Image.open(out / "case-a-left.png") as left:
        assert {left.getpixel((0, y)) for y in range(30)} == {(255, 0, 0)}
    with Image.open(out / "case-a-down.png") as down:
        assert {down.getpixel((x, 19)) for x in range(30)} == {(255, 0, 0)}

    with pytest.raises(StimulusError, match=r"case-a-up\.png: already exists"):
        rotate_images(src, out)


def test_rotate_images_errors(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    with pytest.raises(StimulusError, match=r"no \.png, \.jpg or \.jpeg"):
        rotate_images(src, tmp_path / "out")
    (src / "x.png").write_bytes(b"not an image")
    with pytest.raises(StimulusError, match=r"x\.png: cannot read image"):
        rotate_images(src, tmp_path / "out")
    (src / "x.png").unlink()
    Image.new("L", (4, 4)).save(src / "x.png")
    Image.new("L", (4, 4)).save(src / "x.jpeg")
    with pytest.raises(StimulusError, match=r"x\.png: same stem as x\.jpeg"):
        rotate_images(src, tmp_path / "out")
    with pytest.raises(StimulusError, match="must differ from the source"):
        rotate_images(src, src)
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------- API limits


def _encode(image: Image.Image, fmt: str, **params: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **params)
    return buffer.getvalue()


def test_api_check_accepts_the_four_formats() -> None:
    image = Image.new("RGB", (40, 30), (10, 20, 30))
    assert check_image_for_api(_encode(image, "PNG"), name="a") == ("image/png", 40, 30)
    assert check_image_for_api(_encode(image, "JPEG"), name="a") == ("image/jpeg", 40, 30)
    assert check_image_for_api(_encode(image, "GIF"), name="a") == ("image/gif", 40, 30)
    if features.check("webp"):
        assert check_image_for_api(_encode(image, "WEBP"), name="a") == ("image/webp", 40, 30)


def test_api_check_rejects_bmp() -> None:
    data = _encode(Image.new("RGB", (40, 30)), "BMP")
    with pytest.raises(StimulusError, match=r"scan\.bmp: unsupported image format.*PNG, JPEG"):
        check_image_for_api(data, name="scan.bmp")


def test_api_check_rejects_more_than_5_mb() -> None:
    noise = Image.frombytes("RGB", (1400, 1300), random.Random(0).randbytes(1400 * 1300 * 3))
    data = _encode(noise, "PNG", compress_level=0)
    assert len(data) > 5 * 1024 * 1024
    with pytest.raises(StimulusError, match=r"big\.png: .*exceeds the API limit of 5 MB"):
        check_image_for_api(data, name="big.png")
    # the API counts base64 characters: 4 MB raw is 5.3 MB encoded and is rejected too
    with pytest.raises(StimulusError, match=r"4mb\.png: 4194304 bytes \(5592408 bytes base64\)"):
        check_image_for_api(b"\x89PNG\r\n\x1a\n" + bytes(4 * 1024 * 1024 - 8), name="4mb.png")


def test_api_check_rejects_more_than_8000_px() -> None:
    data = _encode(Image.new("L", (9000, 10), 255), "PNG")
    with pytest.raises(StimulusError, match=r"wide\.png: 9000x10 px exceeds .* 8000 px per side"):
        check_image_for_api(data, name="wide.png")
    tall = _encode(Image.new("L", (10, 8001), 255), "PNG")
    with pytest.raises(StimulusError, match="8000 px per side"):
        check_image_for_api(tall, name="tall.png")
    assert check_image_for_api(_encode(Image.new("L", (8000, 8000)), "PNG"), name="ok")[1:] == (
        8000,
        8000,
    )


def test_api_check_rejects_truncated_header() -> None:
    with pytest.raises(StimulusError, match=r"cut\.png: not a readable PNG image"):
        check_image_for_api(b"\x89PNG\r\n\x1a\n\x00\x00", name="cut.png")
