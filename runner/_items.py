"""Item files (``docs/prompts.md`` section 1): JSONL or CSV questions, read strictly.

:func:`load_items` reads an item file into :class:`Item` objects in file order and reports
every problem at once as ``file:line: what`` (a blank line, a line that is not a JSON object, a
duplicate id naming both lines, a missing answer, an answer not among the options, bytes that
are not UTF-8, a member of the wrong type). Each item's canonical form is RFC 8785 JSON of the
members it has; :attr:`ItemSet.sha256` is the items digest ``protocol.locked`` records.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ledger import LedgerError, canonical_json, describe_os_error, describe_utf8_error
from runner._errors import SpecError

__all__ = [
    "ITEM_ID_RE",
    "OPTION_LABELS",
    "Item",
    "ItemSet",
    "load_items",
    "option_label",
]

ITEM_ID_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
"""What an item id may be: letters, digits, ``.``, ``_``, ``-``, at most 64.

Anchored with ``\\Z``, not ``$`` (which also matches before a final newline), so ``"q1\\n"`` is
not an id.
"""
OPTION_LABELS: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
"""Option labels in order: the first option is ``A``."""
TEXT_FIELD_RE: Final = re.compile(r"^[a-z][a-z0-9_]*\Z")
RESERVED: Final = frozenset({"id", "answer", "options", "images", "metadata", "answer_text"})
_OPTION_SLOT: Final = re.compile(r"^option_[A-Za-z]\Z")


def option_label(index: int) -> str:
    """The label of the option at 0-based ``index`` (``A`` for 0)."""
    return OPTION_LABELS[index]


@dataclass(frozen=True)
class Item:
    """One item in canonical form: ``data`` holds exactly the members the file gave."""

    id: str
    data: Mapping[str, Any]
    line: int

    @property
    def answer(self) -> str:
        """The answer: an option label when the item has options, else the answer text."""
        return str(self.data["answer"])

    @property
    def options(self) -> tuple[str, ...]:
        """The option texts, in label order (empty without options)."""
        return tuple(self.data.get("options", ()))

    @property
    def labels(self) -> str:
        """The labels of this item's options (``"ABCD"`` for four)."""
        return OPTION_LABELS[: len(self.options)]

    @property
    def images(self) -> tuple[str, ...]:
        """Image paths relative to the item file's folder."""
        return tuple(self.data.get("images", ()))

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The metadata object (empty when absent)."""
        value = self.data.get("metadata", {})
        return value if isinstance(value, dict) else {}

    def text_fields(self) -> dict[str, str]:
        """Every text member (``question``, ``context``, ``rationale``, ...) by name."""
        return {k: v for k, v in self.data.items() if k not in RESERVED and isinstance(v, str)}

    def canonical(self) -> bytes:
        """RFC 8785 canonical JSON of the item."""
        return canonical_json(dict(self.data))

    @property
    def sha256(self) -> str:
        """The item hash: SHA-256 of :meth:`canonical`."""
        return hashlib.sha256(self.canonical()).hexdigest()


@dataclass(frozen=True)
class ItemSet:
    """The items of one file, in file order."""

    path: Path
    format: str
    items: tuple[Item, ...]
    by_id: dict[str, Item] = field(compare=False)
    first: int | None = None
    """``[stimuli] range = { first = N }``: the set is the file's first N items (else all)."""

    def head(self, n: int) -> ItemSet:
        """The first ``n`` items in file order, as the set a ``range = { first = n }`` uses."""
        kept = self.items[:n]
        return ItemSet(self.path, self.format, kept, {i.id: i for i in kept}, n)

    def __iter__(self) -> Iterator[Item]:
        """The items in file order."""
        return iter(self.items)

    def __len__(self) -> int:
        """How many items."""
        return len(self.items)

    @property
    def sha256(self) -> str:
        """The items digest: SHA-256 of every canonical form followed by ``\\n``, in file order."""
        digest = hashlib.sha256()
        for item in self.items:
            digest.update(item.canonical())
            digest.update(b"\n")
        return digest.hexdigest()

    def record(self, rel: str) -> dict[str, Any]:
        """The object ``protocol.locked`` records for this file (``rel``: study-relative path)."""
        out: dict[str, Any] = {
            "path": rel,
            "format": self.format,
            "count": len(self.items),
            "sha256": self.sha256,
        }
        if self.first is not None:  # docs/prompts.md §1.4: count and sha256 of the range
            out["range"] = {"first": self.first}
        return out


def _is_string(value: Any) -> bool:
    return isinstance(value, str)


def _is_options(value: Any) -> bool:
    return (
        isinstance(value, list)
        and 2 <= len(value) <= 26
        and all(isinstance(v, str) and v.strip() for v in value)
    )


def _is_images(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) and v for v in value)


def _is_metadata(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(v, str | bool | int | float)
        or (isinstance(v, list) and all(isinstance(x, str) for x in v))
        for v in value.values()
    )


#: The members with a type of their own: (the check, what it must be).
_MEMBER_TYPES: Final[dict[str, tuple[Callable[[Any], bool], str]]] = {
    "id": (_is_string, "a string"),
    "answer": (_is_string, "a string"),
    "options": (_is_options, "an array of 2 to 26 non-empty strings"),
    "images": (_is_images, "a non-empty array of file paths"),
    "metadata": (_is_metadata, "an object of strings, numbers, booleans or arrays of strings"),
}


def _check_value(name: str, value: Any, where: str, problems: list[str]) -> bool:
    """Whether member ``name`` has a type the format allows (recording why not)."""
    if name in _MEMBER_TYPES:
        check, what = _MEMBER_TYPES[name]
        ok = check(value)
    else:
        if not TEXT_FIELD_RE.match(name) or name in RESERVED or _OPTION_SLOT.match(name):
            problems.append(
                f"{where}: member {name!r}: not a field name an item may have (text fields are "
                "named [a-z][a-z0-9_]*, and not answer_text or option_X)"
            )
            return False
        ok = isinstance(value, str)
        what = "a string (a text field)"
    if not ok:
        problems.append(f"{where}: member {name!r} must be {what}, got {_short(value)}")
    return ok


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_item(data: dict[str, Any], where: str, problems: list[str]) -> bool:
    before = len(problems)
    for name, value in data.items():
        _check_value(name, value, where, problems)
    if len(problems) > before:
        return False
    item_id = data.get("id")
    if item_id is None:
        problems.append(f"{where}: no 'id'")
    elif not ITEM_ID_RE.match(item_id):
        problems.append(
            f"{where}: id {item_id!r}: use letters, digits, '.', '_' or '-' (at most 64, "
            "starting with a letter or digit)"
        )
    answer = data.get("answer")
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        problems.append(f"{where}: item {item_id!r} has no answer")
    elif "options" in data:
        labels = OPTION_LABELS[: len(data["options"])]
        if answer not in labels:
            problems.append(
                f"{where}: item {item_id!r}: answer {answer!r} is not among its options' labels "
                f"({', '.join(labels)})"
            )
    return len(problems) == before


class _DuplicateMember(ValueError):
    """A JSON object names one member twice (json.loads would silently keep the last)."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateMember(f"duplicate member {key!r}")
        out[key] = value
    return out


MAX_NESTING = 64
"""Deepest nesting of arrays and objects an item, a record or a sidecar may have."""


def _nesting(value: Any) -> int:
    """How deep ``value``'s arrays and objects nest (0 for a scalar), iteratively."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
    return deepest


class _TooDeep(ValueError):
    """A JSON value whose arrays and objects nest deeper than :data:`MAX_NESTING` levels."""


def parse_json(text: str) -> Any:
    """``text`` parsed as JSON: no member named twice, at most :data:`MAX_NESTING` levels.

    Raises ``ValueError`` (:class:`_DuplicateMember` for a repeated member) with the reason; a
    document nested too deep for Python's parser is the same ``ValueError``, never a
    ``RecursionError``.
    """
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise _TooDeep(f"arrays and objects nested deeper than {MAX_NESTING} levels") from None
    depth = _nesting(value)
    if depth > MAX_NESTING:
        raise _TooDeep(f"arrays and objects nested {depth} levels deep, more than {MAX_NESTING}")
    return value


def _jsonl(text: str, name: str, problems: list[str]) -> list[tuple[int, dict[str, Any]]]:
    rows: list[tuple[int, dict[str, Any]]] = []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        where = f"{name}:{number}"
        if line.endswith("\r"):
            problems.append(f"{where}: line ends in \\r\\n; item files use \\n line ends")
            continue
        if not line.strip():
            problems.append(f"{where}: blank line (an item file has one JSON object per line)")
            continue
        try:
            data = parse_json(line)
        except _DuplicateMember as exc:
            problems.append(f"{where}: {exc}")
            continue
        except ValueError as exc:
            problems.append(f"{where}: not a JSON object: {exc}")
            continue
        if not isinstance(data, dict):
            problems.append(f"{where}: not a JSON object, got {_short(data)}")
            continue
        rows.append((number, data))
    return rows


def _csv_rows(text: str, name: str, problems: list[str]) -> list[tuple[int, dict[str, Any]]]:
    table = _csv_table(text, name, problems)
    if not table:
        return []
    header = table[0][1]
    option_columns = _header_problems(header, name, problems)
    if problems:
        return []
    rows: list[tuple[int, dict[str, Any]]] = []
    for line, cells in table[1:]:
        data = _csv_row(header, option_columns, cells, f"{name}:{line}", problems)
        if data is not None:
            rows.append((line, data))
    return rows


def _csv_table(text: str, name: str, problems: list[str]) -> list[tuple[int, list[str]]]:
    """The CSV's rows, each with the line it starts on (none, recorded, if it does not parse)."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    table: list[tuple[int, list[str]]] = []  # (the line the row starts on, its cells)
    start = 1
    try:
        for cells in reader:
            table.append((start, cells))
            start = reader.line_num + 1  # a quoted cell may span several lines
    except csv.Error as exc:
        if str(exc) == "unexpected end of data":  # strict: a quote that is never closed
            problems.append(
                f"{name}:{start}: not valid CSV: a quoted cell opened in the row "
                f"starting on this line is never closed (the file ends inside it)"
            )
        else:
            problems.append(f"{name}:{reader.line_num}: not valid CSV: {exc}")
        return []
    if not table:
        problems.append(f"{name}: empty file (a CSV item file needs a header row)")
    return table


def _header_problems(header: list[str], name: str, problems: list[str]) -> list[str]:
    """Check the header row (recording problems); its option columns."""
    if len(set(header)) != len(header):
        dup = sorted({h for h in header if header.count(h) > 1})
        problems.append(f"{name}:1: column(s) {', '.join(dup)} appear more than once")
        return []
    for column in ("id", "answer"):
        if column not in header:
            problems.append(f"{name}:1: no {column!r} column (header: {','.join(header)})")
    option_columns = [h for h in header if h.startswith("option_")]
    labels = [h[len("option_") :] for h in option_columns]
    if labels != list(OPTION_LABELS[: len(labels)]):
        problems.append(
            f"{name}:1: option columns must be option_A, option_B, ... in order, got "
            f"{', '.join(option_columns)}"
        )
    for h in header:
        if h not in option_columns and not _known_column(h):
            problems.append(f"{name}:1: column {h!r} is not a field an item may have")
    return option_columns


def _known_column(h: str) -> bool:
    """Whether ``h`` (not an option column) names a member an item may have."""
    if h in ("id", "answer", "image"):
        return True
    if h.startswith("metadata.") and len(h) > len("metadata."):
        return True
    return bool(TEXT_FIELD_RE.match(h)) and h not in RESERVED


def _csv_row(
    header: list[str], option_columns: list[str], cells: list[str], where: str, problems: list[str]
) -> dict[str, Any] | None:
    """One data row as an item's members (None, recorded, for a blank or short row)."""
    if not any(cells):
        problems.append(f"{where}: blank row")
        return None
    if len(cells) != len(header):
        problems.append(f"{where}: {len(cells)} cells, the header has {len(header)}")
        return None
    data: dict[str, Any] = {}
    options: list[str] = []
    metadata: dict[str, str] = {}
    gap = False
    for h, cell in zip(header, cells, strict=True):
        if h in option_columns:
            if cell:
                if gap:
                    problems.append(f"{where}: {h} follows an empty option cell")
                options.append(cell)
            else:
                gap = True
        elif not cell:
            continue
        elif h == "image":
            data["images"] = [cell]
        elif h.startswith("metadata."):
            metadata[h[len("metadata.") :]] = cell
        else:
            data[h] = cell
    if options:
        data["options"] = options
    if metadata:
        data["metadata"] = metadata
    return data


def _read_text(path: Path, name: str) -> str:
    """The item file's text: UTF-8 without a byte-order mark (else :class:`SpecError`)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SpecError([f"cannot read {describe_os_error(exc, path)}"]) from None
    if raw.startswith(b"\xef\xbb\xbf"):
        raise SpecError([f"{name}:1: starts with a UTF-8 byte-order mark; save it without one"])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise SpecError([f"{name}:{line}: {describe_utf8_error(raw, exc)}"]) from None


def load_items(path: str | Path, *, display: str | None = None) -> ItemSet:
    """Read and check the item file at ``path`` (JSONL or CSV, by its name's ending).

    Raises :class:`SpecError` listing every problem as ``file:line: what``; ``display`` is the
    name used in messages (default: the path as given).
    """
    path = Path(path)
    name = display or str(path)
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".csv"):
        raise SpecError([f"{name}: an item file's name ends in .jsonl or .csv"])
    text = _read_text(path, name)
    problems: list[str] = []
    fmt = "jsonl" if suffix == ".jsonl" else "csv"
    rows = _jsonl(text, name, problems) if fmt == "jsonl" else _csv_rows(text, name, problems)
    items: list[Item] = []
    first_line: dict[str, int] = {}
    for number, data in rows:
        where = f"{name}:{number}"
        if not _check_item(data, where, problems):
            continue
        item_id = data["id"]
        if item_id in first_line:
            problems.append(
                f"{where}: duplicate id {item_id!r} (first on line {first_line[item_id]})"
            )
            continue
        item = Item(item_id, data, number)
        try:
            item.canonical()
        except LedgerError as exc:  # NaN, an integer beyond 2^53 - 1
            problems.append(f"{where}: item {item_id!r} has no canonical JSON form: {exc}")
            continue
        first_line[item_id] = number
        items.append(item)
    if not items and not problems:
        problems.append(f"{name}: no items")
    if problems:
        raise SpecError(problems)
    return ItemSet(path, fmt, tuple(items), {i.id: i for i in items})
