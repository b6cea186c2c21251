"""``[stimuli]``: an item file, or an image folder with its truth table."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Final

from runner._errors import SpecError
from runner._schema import RANGE_KEYS
from runner.spec._collector import Collector
from runner.spec._fields import inside, read_text, section_table, string
from runner.spec._response import LETTER_PARSERS, answer_column
from runner.spec._state import Loading

IMAGE_SUFFIXES: Final = (".png", ".jpg", ".jpeg", ".gif", ".webp")


def parse_stimuli(st: Loading) -> None:
    """``[stimuli]``: an item file (which needs ``[prompt] item``), or images and a truth table.

    With an item file and a letter parser the letters default to as many as the widest item
    has options (at least two), unless ``[response] letters`` names them.
    """
    c = st.c
    st.stimuli_dir, st.truth_path, st.stimuli, st.items = _stimuli(c, st.root, st.data)
    table = st.data.get("stimuli")
    st.items_path = st.truth_path if isinstance(table, dict) and "items" in table else None
    if st.items_path is None:
        st.answer_column = answer_column(c, st.data, st.parser)
    elif st.prompt.item is None:
        c.add(
            "prompt.item",
            "a study with an item file needs an item template ([prompt] item = "
            '"prompts/item.txt"), which places each item\'s question and options',
        )
    response = st.data.get("response")
    named = isinstance(response, dict) and "letters" in response
    if st.items is not None and st.parser in LETTER_PARSERS and not named and not c.problems:
        from runner._items import OPTION_LABELS

        widest = max((len(i.options) for i in st.items), default=4)
        st.letters = OPTION_LABELS[: max(widest, 2)]


def _items_stimuli(c: Collector, root: Path, table: dict[str, Any]) -> tuple[Path, Any]:
    """The item file's path and its :class:`runner._items.ItemSet` (None if it has problems)."""
    for key in ("directory", "truth", "answer_column"):
        if key in table:
            c.add(
                f"stimuli.{key}",
                "an item file holds the questions and their answers; a study has items or an "
                "image folder with a truth table, not both",
            )
    path = inside(c, root, string(c, table, "items", "stimuli") or ".", "stimuli.items")
    first = _item_range(c, table)
    items = None
    if path.is_file():
        from runner._items import load_items

        try:
            items = load_items(path, display=str(path.relative_to(root.resolve())))
        except SpecError as exc:
            for problem in exc.problems:
                c.add("stimuli.items", problem)
    if items is not None and first is not None:
        if first > len(items):
            c.add(
                "stimuli.range.first", f"{first} is more than the {len(items)} items of {path.name}"
            )
        items = items.head(first)
    return path, items


def _item_range(c: Collector, table: dict[str, Any]) -> int | None:
    """``[stimuli] range = { first = N }``: the study uses the file's first N items (§1.4)."""
    if "range" not in table:
        return None
    value = table["range"]
    if not isinstance(value, dict) or set(value) != {"first"}:
        extra = sorted(set(value) - set(RANGE_KEYS)) if isinstance(value, dict) else []
        c.add(
            "stimuli.range",
            "must be a table { first = N } (the first N items of the file, "
            "in file order)" + (f"; unknown key {extra[0]!r}" if extra else ""),
        )
        return None
    first = value["first"]
    if isinstance(first, bool) or not isinstance(first, int) or first < 1:
        c.add("stimuli.range.first", f"must be an integer >= 1, got {first!r}")
        return None
    return first


def _stimuli(
    c: Collector, root: Path, data: dict[str, Any]
) -> tuple[Path, Path, dict[str, Path], Any]:
    """(directory, truth table, images by id, None), or (path, path, {}, items) for items."""
    table = section_table(c, data, "stimuli")
    if "items" in table:
        path, items = _items_stimuli(c, root, table)
        return path, path, {}, items
    if "range" in table:
        c.add("stimuli.range", "applies to an item file ([stimuli] items), not an image folder")
    directory = inside(
        c,
        root,
        string(c, table, "directory", "stimuli") or ".",
        "stimuli.directory",
        directory=True,
    )
    truth = inside(c, root, string(c, table, "truth", "stimuli") or "truth.csv", "stimuli.truth")
    if not truth.is_file() or not directory.is_dir():
        return directory, truth, {}, None
    rows = _truth_rows(c, truth)
    if rows is None:
        return directory, truth, {}, None
    return directory, truth, _images(c, directory, truth, rows), None


def _truth_rows(c: Collector, truth: Path) -> list[dict[str, str]] | None:
    """The truth table's rows (a row of the wrong width named at its line), None if unreadable."""
    text = read_text(c, truth, "stimuli.truth")
    if text is None:
        return None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows: list[dict[str, str]] = []
    try:
        header = next(reader, [])
        for cells in reader:
            if len(cells) != len(header):  # named at its own line, not as a coverage problem
                c.add(
                    "stimuli.truth",
                    f"{truth.name}:{reader.line_num}: {len(cells)} field(s), "
                    f"the header has {len(header)} ({','.join(header)})",
                )
                continue
            rows.append(dict(zip(header, cells, strict=True)))
    except csv.Error as exc:
        c.add("stimuli.truth", f"{truth.name}:{reader.line_num}: not valid CSV ({exc})")
        return None
    return rows


def _images(
    c: Collector, directory: Path, truth: Path, rows: list[dict[str, str]]
) -> dict[str, Path]:
    """The images by id, each covered by a truth row and each row by an image."""
    covered = {row.get("stimulus", "") for row in rows}
    if "" in covered or not rows:
        c.add("stimuli.truth", f"{truth.name} needs a 'stimulus' column with a value on every row")
    images = sorted(p for p in directory.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    stimuli = {image.stem: image for image in images}
    for image_id in stimuli:
        if image_id not in covered:
            c.add("stimuli.truth", f"the truth table does not cover stimulus {image_id!r}")
    for stim in sorted(covered - set(stimuli) - {""}):
        c.add("stimuli.truth", f"truth row for {stim!r} has no image in {directory.name}/")
    if not stimuli:
        c.add("stimuli.directory", "no images (.png, .jpg, .gif, .webp) found")
    return stimuli
