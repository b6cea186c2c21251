"""Item files read from ``docs/prompts.md`` §1 alone: strict JSONL and CSV, canonical forms, hashes.

An item file is read from its bytes and its study-relative path (the extension says the
format). Every rule of §1 is enforced, each problem naming the file, the line (for CSV the
line the row starts on) and, where there is one, the member or column:

* UTF-8 without a byte-order mark;
* JSONL: one JSON object per line, ``\\n`` line ends (the last may lack it, ``\\r\\n`` is
  refused), no blank line, no duplicate key, the members and types of the table of §1.1;
* CSV: RFC 4180 with a header row, the columns of §1.2, contiguous options without gaps;
* ids unique in the file (a duplicate names both lines).

An item's *canonical form* is the RFC 8785 JSON of the members it has (§1.3), its SHA-256 the
*item hash*; the *items digest* is the SHA-256 of the canonical forms in file order, each
followed by ``\\n``. Nothing here imports the writer (``runner/``): it is the verifier's own
reading of the page.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from verify._canonical import CanonicalError, canonical_json

__all__ = [
    "ITEM_ID",
    "Item",
    "ItemError",
    "ItemFile",
    "item_format",
    "items_digest",
    "read_items",
    "resolve_image",
]

ITEM_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""§1.1: an item id (letters, digits, ``.``, ``_``, ``-``; at most 64; a letter or digit first)."""

TEXT_NAME = re.compile(r"[a-z][a-z0-9_]*")
"""§1.1: the name of a text field."""

STRUCTURED = ("id", "answer", "question", "options", "images", "metadata", "rationale")
"""The members of §1.1 with a meaning of their own (every other member is a text field)."""

_OPTION_SLOT = re.compile(r"option_[A-Za-z]")
"""A name spelled like an option slot (``option_a``): not a text field's (§1.1)."""
_OPTION_COLUMN = re.compile(r"option_([A-Z])")
_LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_BOM = b"\xef\xbb\xbf"


class ItemError(ValueError):
    """An item file breaks a rule of ``docs/prompts.md`` §1; the message names file and line."""


@dataclass(frozen=True, eq=False)
class Item:
    """One item: its canonical-form object, the line it was read from and its canonical bytes."""

    data: dict[str, Any]
    line: int
    canonical: bytes = field(repr=False)

    @property
    def id(self) -> str:
        """The item id (the trial id's stimulus part)."""
        return str(self.data["id"])

    @property
    def answer(self) -> str:
        """The answer as written: an option label when the item has options, else the text."""
        return str(self.data["answer"])

    @property
    def question(self) -> str | None:
        """The question text, or ``None``."""
        value = self.data.get("question")
        return value if isinstance(value, str) else None

    @property
    def options(self) -> tuple[str, ...]:
        """The option texts in label order (``A``, ``B``, ...); empty without options."""
        return tuple(self.data.get("options") or ())

    @property
    def images(self) -> tuple[str, ...]:
        """The image paths as written (relative to the item file's folder)."""
        return tuple(self.data.get("images") or ())

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The metadata object (empty when absent)."""
        value = self.data.get("metadata")
        return value if isinstance(value, dict) else {}

    @property
    def rationale(self) -> str | None:
        """The worked explanation, or ``None``."""
        value = self.data.get("rationale")
        return value if isinstance(value, str) else None

    @property
    def sha256(self) -> str:
        """The item hash: SHA-256 of the canonical form."""
        return hashlib.sha256(self.canonical).hexdigest()


@dataclass(frozen=True, eq=False)
class ItemFile:
    """A parsed item file: its path, format (``jsonl`` or ``csv``) and items in file order."""

    path: str
    format: str
    items: tuple[Item, ...]
    first: int | None = None  # §1.4: [stimuli] range = { first = N }

    @property
    def digest(self) -> str:
        """The items digest (§1.3)."""
        return items_digest(self.items)

    def record(self) -> dict[str, Any]:
        """The object ``protocol.locked`` records for this file: path, format, count, sha256."""
        out: dict[str, Any] = {
            "path": self.path,
            "format": self.format,
            "count": len(self.items),
            "sha256": self.digest,
        }
        if self.first is not None:
            out["range"] = {"first": self.first}
        return out

    def ranged(self, record: Any) -> ItemFile:
        """§1.4: the items a locked ``items`` record uses (its ``range``: the first N).

        :class:`ItemError` when the range is malformed or longer than the file.
        """
        spec = record.get("range") if isinstance(record, dict) else None
        if spec is None:
            return self
        first = spec.get("first") if isinstance(spec, dict) else None
        if type(spec) is not dict or set(spec) != {"first"} or type(first) is not int or first < 1:
            raise ItemError(
                f'{self.path}: protocol.locked items.range {spec!r} is not {{"first": N}}'
            )
        if first > len(self.items):
            raise ItemError(
                f"{self.path}: protocol.locked items.range.first {first} is more "
                f"than the file's {len(self.items)} items"
            )
        return ItemFile(self.path, self.format, self.items[:first], first)

    def by_id(self) -> dict[str, Item]:
        """The items by id."""
        return {item.id: item for item in self.items}

    def image_paths(self) -> list[str]:
        """Every image the items name, as study-relative paths, in order, without repeats."""
        seen: dict[str, None] = {}
        for item in self.items:
            for image in item.images:
                seen.setdefault(resolve_image(self.path, image, item.line), None)
        return list(seen)


def item_format(path: str) -> str:
    """``jsonl`` or ``csv`` from the file name's ending; :class:`ItemError` otherwise."""
    if path.endswith(".jsonl"):
        return "jsonl"
    if path.endswith(".csv"):
        return "csv"
    raise ItemError(f"{path}: an item file's name must end in .jsonl or .csv")


def items_digest(items: tuple[Item, ...] | list[Item]) -> str:
    """SHA-256 of the canonical forms in order, each followed by ``\\n`` (§1.3)."""
    h = hashlib.sha256()
    for item in items:
        h.update(item.canonical)
        h.update(b"\n")
    return h.hexdigest()


def resolve_image(items_path: str, image: str, line: int | None = None) -> str:
    """The study-relative path of ``image`` named in the item file ``items_path``.

    Paths are relative to the item file's folder and must stay inside the study folder.
    """
    where = f"{items_path}" + (f" line {line}" if line is not None else "")
    if not image or image.startswith("/") or "\\" in image or "\x00" in image:
        raise ItemError(f"{where}: images: {image!r} is not a relative path")
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(items_path), image))
    if joined == ".." or joined.startswith("../") or joined in ("", ".") or joined.startswith("/"):
        raise ItemError(f"{where}: images: {image!r} is not inside the study folder")
    return joined


def read_items(data: bytes, path: str) -> ItemFile:
    """Read the item file ``path`` from its bytes, strictly (§1).

    :class:`ItemError` names the first fault: the file, the line, the member or column.
    """
    fmt = item_format(path)
    if data.startswith(_BOM):
        raise ItemError(f"{path} line 1: starts with a byte-order mark (UTF-8 without one)")
    items = _read_jsonl(data, path) if fmt == "jsonl" else _read_csv(data, path)
    if not items:
        raise ItemError(f"{path}: the file holds no items")
    seen: dict[str, int] = {}
    for item in items:
        if item.id in seen:
            raise ItemError(
                f"{path} line {item.line}: id {item.id!r} is also the id of line {seen[item.id]}"
            )
        seen[item.id] = item.line
        for image in item.images:
            resolve_image(path, image, item.line)
    return ItemFile(path, fmt, tuple(items))


# ------------------------------------------------------------------------------ members


def _text_name_problem(name: str) -> str | None:
    if not TEXT_NAME.fullmatch(name):
        return "not a text field name ([a-z][a-z0-9_]*)"
    if name == "answer_text" or _OPTION_SLOT.fullmatch(name):
        return "a reserved name (answer_text, option_ followed by one letter)"
    return None


def _check_item(obj: dict[str, Any], where: str, column: bool = False) -> None:
    """The member rules of §1.1 on one item object (``where``: ``<file> line N``)."""
    kind = "column" if column else "member"
    for name in ("id", "answer"):
        if name not in obj:
            raise ItemError(f"{where}: {name}: the required {kind} is missing")
    for name, value in obj.items():
        bad = f"{where}: {name}: "
        if name == "id":
            if type(value) is not str or not ITEM_ID.fullmatch(value):
                raise ItemError(
                    bad + f"{value!r} is not an id (letters, digits, '.', '_', '-', at most 64, "
                    "starting with a letter or digit)"
                )
        elif name == "answer":
            if type(value) is not str or value == "":
                raise ItemError(bad + "must be a non-empty string")
        elif name in ("question", "rationale"):
            if type(value) is not str:
                raise ItemError(bad + "must be a string")
        elif name == "options":
            if (
                type(value) is not list
                or not 2 <= len(value) <= 26
                or any(type(v) is not str or v == "" for v in value)
            ):
                raise ItemError(bad + "must be an array of 2 to 26 non-empty strings")
        elif name == "images":
            if type(value) is not list or any(type(v) is not str for v in value):
                raise ItemError(bad + "must be an array of strings")
        elif name == "metadata":
            if type(value) is not dict:
                raise ItemError(bad + "must be an object")
            for key, v in value.items():
                ok = type(v) in (str, int, float, bool) or (
                    type(v) is list and all(type(x) is str for x in v)
                )
                if not ok:
                    raise ItemError(
                        bad + f"{key}: a metadata value must be a string, a number, a boolean "
                        "or an array of strings"
                    )
        else:
            problem = _text_name_problem(name)
            if problem is not None:
                raise ItemError(bad + problem)
            if type(value) is not str:
                raise ItemError(bad + "a text field must be a string")
    options = obj.get("options")
    if options is not None:
        labels = _LABELS[: len(options)]
        if obj["answer"] not in labels:
            raise ItemError(
                f"{where}: answer: {obj['answer']!r} is not one of the option labels "
                f"{', '.join(labels)}"
            )


def _canonical(obj: dict[str, Any], where: str) -> bytes:
    try:
        return canonical_json(obj)
    except CanonicalError as exc:
        raise ItemError(f"{where}: {exc}") from None


# ------------------------------------------------------------------------------ JSONL


class _Duplicate(ValueError):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_no_constant, strict=True)


def _read_jsonl(data: bytes, path: str) -> list[Item]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline of the last line (which may lack it)
    items: list[Item] = []
    for number, raw in enumerate(lines, start=1):
        where = f"{path} line {number}"
        if raw.endswith(b"\r"):
            raise ItemError(f"{where}: ends in \\r\\n (lines end in \\n)")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ItemError(f"{where}: not UTF-8 (byte {exc.start + 1} of the line)") from None
        if text.strip() == "":
            raise ItemError(f"{where}: a blank line (one JSON object per line)")
        try:
            obj = _DECODER.decode(text)
        except _Duplicate as exc:
            raise ItemError(f"{where}: duplicate key {exc.args[0]!r}") from None
        except (ValueError, RecursionError) as exc:
            raise ItemError(f"{where}: not a JSON object ({exc})") from None
        if type(obj) is not dict:
            raise ItemError(f"{where}: not a JSON object")
        _check_item(obj, where)
        items.append(Item(obj, number, _canonical(obj, where)))
    return items


# ------------------------------------------------------------------------------ CSV


def _header(header: list[str], path: str) -> dict[str, str]:
    """Column -> kind (``id``, ``answer``, ``text``, ``option``, ``image``, ``metadata``)."""
    where = f"{path} line 1"
    kinds: dict[str, str] = {}
    for name in header:
        if name in kinds:
            raise ItemError(f"{where}: column {name!r} appears twice")
        if name in ("id", "answer", "image"):
            kinds[name] = name
        elif _OPTION_COLUMN.fullmatch(name):
            kinds[name] = "option"
        elif name.startswith("metadata."):
            if name == "metadata.":
                raise ItemError(f"{where}: column {name!r} names no metadata field")
            kinds[name] = "metadata"
        elif name in ("options", "images", "metadata"):
            raise ItemError(
                f"{where}: column {name!r}: not a CSV column (options are option_A, option_B, "
                "...; an image is image; metadata are metadata.NAME)"
            )
        else:
            problem = _text_name_problem(name)
            if problem is not None:
                raise ItemError(f"{where}: column {name!r}: {problem}")
            kinds[name] = "text"
    for name in ("id", "answer"):
        if name not in kinds:
            raise ItemError(f"{where}: the required column {name!r} is missing")
    letters = sorted(n[len("option_") :] for n, k in kinds.items() if k == "option")
    if letters != list(_LABELS[: len(letters)]):
        raise ItemError(
            f"{where}: the option columns {', '.join('option_' + x for x in letters)} are not "
            "contiguous from option_A"
        )
    return kinds


def _row_item(
    header: list[str], kinds: dict[str, str], options: list[str], row: list[str], where: str
) -> dict[str, Any]:
    """One CSV row as an item object: its non-empty cells, options in order, metadata."""
    cells = dict(zip(header, row, strict=True))
    obj: dict[str, Any] = {}
    for name in header:
        kind, value = kinds[name], cells[name]
        if value == "" or kind in ("option", "metadata"):
            continue
        if kind == "image":
            obj["images"] = [value]
        else:
            obj[name] = value
    filled = [cells[n] != "" for n in options]
    if any(filled):
        count = sum(filled)
        if not all(filled[:count]):
            raise ItemError(
                f"{where}: the options have a gap (non-empty option cells must run "
                "from option_A without an empty one)"
            )
        obj["options"] = [cells[n] for n in options[:count]]
    meta = {n[len("metadata.") :]: cells[n] for n in header if kinds[n] == "metadata"}
    meta = {k: v for k, v in meta.items() if v != ""}
    if meta:
        obj["metadata"] = meta
    return obj


def _read_csv(data: bytes, path: str) -> list[Item]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ItemError(f"{path} line {line}: not UTF-8") from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    items: list[Item] = []
    try:
        header = next(reader, None)
        if header is None:
            raise ItemError(f"{path}: no header row")
        kinds = _header(header, path)
        options = sorted((n for n, k in kinds.items() if k == "option"))
        while True:
            start = reader.line_num + 1
            row = next(reader, None)
            if row is None:
                break
            where = f"{path} line {start}"
            if len(row) != len(header):
                raise ItemError(f"{where}: {len(row)} cells, the header has {len(header)}")
            obj = _row_item(header, kinds, options, row, where)
            _check_item(obj, where, column=True)
            items.append(Item(obj, start, _canonical(obj, where)))
    except csv.Error as exc:
        raise ItemError(f"{path} line {reader.line_num}: not RFC 4180 CSV ({exc})") from None
    return items
