"""Public medical QA datasets, from their publishers' own files to item files (``docs/items.md``).

:func:`import_dataset` reads one file of MedMCQA, MedQA, PubMedQA, MedXpertQA (Text) or
HealthCareMagic-100k exactly as it is distributed, converts every record into an item of
``docs/prompts.md`` section 1 and writes the items as a JSONL item file, each line the item's
RFC 8785 canonical JSON (so the same input always gives the same bytes, and the file's items
digest is the one ``ledger lock`` will record). The conversion is strict: the whole file is read
and every record checked, and any problem (a missing or mistyped field, an answer that is not
among the options, malformed JSON, a duplicate id) is reported as ``file:line: what``, with
nothing written. The file is written beside DEST, loaded back with
:func:`runner._items.load_items`, and only then renamed into place; an existing DEST is
replaced only when asked (``force``). Example::

    from runner._importers import import_dataset

    result = import_dataset("medmcqa", "dev.json", "study/items/medmcqa-dev.jsonl")
    print(result.items.sha256, len(result.items))

The mapping of each dataset's fields to item members is :data:`FORMATS`' documentation in
``docs/items.md``; :func:`convert` returns the items without writing them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from ledger import (
    canonical_json,
    describe_os_error,
    describe_utf8_error,
    fsync_directory,
    read_regular_file,
)
from runner._errors import SpecError
from runner._items import (
    ITEM_ID_RE,
    MAX_NESTING,
    OPTION_LABELS,
    ItemSet,
    _DuplicateMember,
    _nesting,
    _no_duplicates,
    _TooDeep,
    load_items,
    parse_json,
)

__all__ = [
    "FORMATS",
    "MAX_PROBLEMS_SHOWN",
    "DatasetError",
    "ImportResult",
    "convert",
    "import_dataset",
    "item_id_for",
    "merge_metadata",
]

FORMATS: Final = ("medmcqa", "medqa", "pubmedqa", "medxpertqa", "healthcaremagic")
"""The dataset formats :func:`import_dataset` reads (``docs/items.md`` has one section each)."""
MAX_PROBLEMS_SHOWN: Final = 50
"""A :class:`DatasetError`'s message lists at most this many problems, then how many more."""
PUBMEDQA_ANSWERS: Final = ("yes", "no", "maybe")
ANSWER_CHOICES: Final = "\nAnswer Choices:"
"""Where a MedXpertQA question's own copy of its options starts."""

_DEFAULT_PREFIX: Final = {"medqa": "medqa", "healthcaremagic": "hcm"}
_WS: Final = re.compile(r"[ \t\n\r]*")
_NOT_ID: Final = re.compile(r"[^A-Za-z0-9_.-]")


class DatasetError(SpecError):
    """A dataset file that cannot be converted, or an item file that cannot be written.

    ``problems`` lists every problem as ``file:line: what``; the message shows the first
    :data:`MAX_PROBLEMS_SHOWN` and how many more there are.
    """

    def __init__(self, problems: list[str]) -> None:
        """Keep every problem; the message lists the first :data:`MAX_PROBLEMS_SHOWN`."""
        super().__init__(problems)
        if len(problems) > MAX_PROBLEMS_SHOWN:
            more = len(problems) - MAX_PROBLEMS_SHOWN
            shown = [*problems[:MAX_PROBLEMS_SHOWN], f"... and {more} more problem(s)"]
            self.args = ("\n".join(shown),)


@dataclass(frozen=True)
class ImportResult:
    """What :func:`import_dataset` wrote: ``items`` is DEST loaded back with ``load_items``."""

    format: str
    source: Path
    dest: Path
    records: int
    items: ItemSet


def item_id_for(source_id: str, prefix: str | None = None) -> str:
    """The item id of a record whose own id is ``source_id`` (``docs/items.md``, "Item ids").

    ``PREFIX-`` is put in front when a prefix is given; every character an item id may not
    have becomes ``-``; leading ``.``, ``_`` and ``-`` are dropped; an id longer than 64 keeps
    its first 55 characters, then ``-`` and the first 8 hex digits of the SHA-256 of the whole
    (prefixed) id. The result is empty only when nothing usable is left.
    """
    raw = f"{prefix}-{source_id}" if prefix else source_id
    clean = _NOT_ID.sub("-", raw).lstrip("._-")
    if len(clean) > 64:
        clean = f"{clean[:55]}-{hashlib.sha256(raw.encode('utf-8')).hexdigest()[:8]}"
    return clean


# ---------------------------------------------------------------------- reading the source


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class _Record:
    """One record of the source: its 1-based number, where it is, and its parsed value."""

    number: int
    where: str
    key: str | None
    value: Any


MAX_SOURCE_BYTES = 512 << 20
"""Largest dataset source read (a source is parsed whole: its records, their checks and the
items written hold about ten times its size in memory; the largest supported release,
HealthCareMagic-100k, is about 150 MB)."""


def _read_text(src: Path, name: str) -> str:
    try:
        if src.stat().st_size > MAX_SOURCE_BYTES:  # refused before a byte is read
            raise DatasetError(
                [
                    f"{name}: {src.stat().st_size:,} bytes, more than the "
                    f"{MAX_SOURCE_BYTES:,} a dataset source may have: cut it to "
                    "the records the study needs"
                ]
            )
        raw = read_regular_file(src, MAX_SOURCE_BYTES)
    except OSError as exc:
        raise DatasetError([f"cannot read {describe_os_error(exc, name)}"]) from None
    if raw.startswith(b"\xef\xbb\xbf"):
        raise DatasetError([f"{name}:1: starts with a UTF-8 byte-order mark; save it without one"])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DatasetError([f"{name}:{line}: {describe_utf8_error(raw, exc)}"]) from None


def _jsonl_records(text: str, name: str, problems: list[str]) -> list[_Record]:
    """One JSON object per line (``\\r\\n`` line ends are read as well)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    records: list[_Record] = []
    for number, line in enumerate(lines, start=1):
        where = f"{name}:{number}"
        if not line.strip():
            problems.append(f"{where}: blank line (the file has one JSON object per line)")
            continue
        try:
            value = parse_json(line)
        except _DuplicateMember as exc:
            problems.append(f"{where}: {exc}")
            continue
        except json.JSONDecodeError as exc:
            problems.append(f"{where}: not valid JSON: {exc.msg} (column {exc.colno})")
            continue
        except ValueError as exc:  # nested too deep
            problems.append(f"{where}: not an item record: {exc}")
            continue
        if not isinstance(value, dict):
            problems.append(f"{where}: not a JSON object, got {_short(value)}")
            continue
        records.append(_Record(number, where, None, value))
    return records


class _Lines:
    """Line numbers of offsets into ``text`` asked for in increasing order (linear overall)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.offset = 0
        self.line = 1

    def at(self, offset: int) -> int:
        self.line += self.text.count("\n", self.offset, offset)
        self.offset = offset
        return self.line


def _document_records(
    text: str, name: str, problems: list[str], opener: str, key_name: str = "key"
) -> list[_Record]:
    """The elements of one JSON array (``opener`` ``[``) or the members of one object (``{``).

    Each record is located by the line its value starts on. A member name given twice is a
    problem naming both lines. Malformed JSON stops the reading at the first error.
    """
    closer = "]" if opener == "[" else "}"
    what = "array" if opener == "[" else "object"
    decoder = json.JSONDecoder(object_pairs_hook=_no_duplicates)  # records bounded below
    lines = _Lines(text)
    records: list[_Record] = []
    first_line: dict[str, int] = {}

    def skip(pos: int) -> int:
        match = _WS.match(text, pos)
        return match.end() if match else pos

    def found(pos: int) -> str:
        return repr(text[pos]) if pos < len(text) else "the end of the file"

    pos = skip(0)
    if not text.startswith(opener, pos):
        problems.append(f"{name}:{lines.at(pos)}: expected a JSON {what}, found {found(pos)}")
        return []
    pos = skip(pos + 1)
    if text.startswith(closer, pos):
        pos += 1
    else:
        while True:
            key: str | None = None
            try:
                if opener == "{":
                    if not text.startswith('"', pos):
                        line = lines.at(pos)
                        problems.append(
                            f"{name}:{line}: expected a member name, found {found(pos)}"
                        )
                        return records
                    key_line = lines.at(pos)
                    key, pos = decoder.raw_decode(text, pos)
                    pos = skip(pos)
                    if not text.startswith(":", pos):
                        line = lines.at(pos)
                        problems.append(f"{name}:{line}: expected ':', found {found(pos)}")
                        return records
                    pos = skip(pos + 1)
                line = lines.at(pos)
                number = len(records) + 1
                where = f"{name}:{line}: record {number}"
                if key is not None:
                    where += f" ({key_name} {key})"
                    if key in first_line:
                        problems.append(
                            f"{name}:{key_line}: {key_name} {key} appears twice (first on "
                            f"line {first_line[key]})"
                        )
                    else:
                        first_line[key] = key_line
                value, pos = decoder.raw_decode(text, pos)
                if _nesting(value) > MAX_NESTING:
                    raise _TooDeep(f"arrays and objects nested more than {MAX_NESTING} levels deep")
            except RecursionError:
                problems.append(
                    f"{where}: arrays and objects nested more than {MAX_NESTING} levels deep"
                )
                return records
            except (_DuplicateMember, _TooDeep) as exc:
                problems.append(f"{where}: {exc}")
                return records
            except json.JSONDecodeError as exc:
                problems.append(
                    f"{name}:{exc.lineno}: not valid JSON: {exc.msg} (column {exc.colno})"
                )
                return records
            if isinstance(value, dict):
                records.append(_Record(number, where, key, value))
            else:
                problems.append(f"{where}: not a JSON object, got {_short(value)}")
                records.append(_Record(number, where, key, None))
            pos = skip(pos)
            if text.startswith(",", pos):
                pos = skip(pos + 1)
                continue
            if text.startswith(closer, pos):
                pos += 1
                break
            line = lines.at(pos)
            problems.append(f"{name}:{line}: expected ',' or '{closer}', found {found(pos)}")
            return records
    pos = skip(pos)
    if pos < len(text):
        problems.append(f"{name}:{lines.at(pos)}: extra data after the JSON {what}")
    return records


# ---------------------------------------------------------------------- one record's fields


class _Fields:
    """Typed access to one record's members; each failure is recorded as a problem."""

    def __init__(self, record: _Record, problems: list[str]) -> None:
        self.value: Mapping[str, Any] = record.value
        self.where = record.where
        self.problems = problems
        self.ok = True

    def fail(self, what: str) -> None:
        self.problems.append(f"{self.where}: {what}")
        self.ok = False

    def present(self, name: str, *, required: bool) -> bool:
        """Whether member ``name`` holds a value (recording why not when it is required)."""
        if name not in self.value:
            if required:
                self.fail(f"no {name!r}")
            return False
        if self.value[name] is None:
            if required:
                self.fail(f"{name!r} is null")
            return False
        return True

    def text(self, name: str, *, required: bool = True) -> str | None:
        """A string member; a required one must hold some non-blank text.

        An optional member that is absent, null or blank gives None.
        """
        if not self.present(name, required=required):
            return None
        value = self.value[name]
        if not isinstance(value, str):
            self.fail(f"{name!r} must be a string, got {_short(value)}")
            return None
        if not value.strip():
            if required:
                self.fail(f"{name!r} is empty")
            return None
        return value

    def strings(
        self, name: str, *, required: bool = True, nonempty: bool = True
    ) -> list[str] | None:
        """An array of strings (non-empty when ``nonempty``)."""
        if not self.present(name, required=required):
            return None
        value = self.value[name]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(f"{name!r} must be an array of strings, got {_short(value)}")
            return None
        if nonempty and not value:
            self.fail(f"{name!r} is an empty array")
            return None
        return list(value)

    def integer(self, name: str) -> int | None:
        """A required integer member (not a boolean)."""
        if not self.present(name, required=True):
            return None
        value = self.value[name]
        if not isinstance(value, int) or isinstance(value, bool):
            self.fail(f"{name!r} must be an integer, got {_short(value)}")
            return None
        return value

    def option_object(self, name: str) -> list[str] | None:
        """An object of option texts keyed ``A``, ``B``, ... (2 to 26, no gap), in label order."""
        if not self.present(name, required=True):
            return None
        value = self.value[name]
        if not isinstance(value, dict):
            self.fail(
                f"{name!r} must be an object of option texts keyed A, B, ..., got {_short(value)}"
            )
            return None
        labels = OPTION_LABELS[: len(value)]
        if not 2 <= len(value) <= 26 or set(value) != set(labels):
            self.fail(
                f"{name!r} must be keyed A, B, ... without gaps (2 to 26 options), got "
                f"keys {', '.join(sorted(value))}"
            )
            return None
        texts: list[str] = []
        for label in labels:
            text = value[label]
            if not isinstance(text, str) or not text.strip():
                self.fail(f"option {label} in {name!r} must be non-empty text, got {_short(text)}")
                return None
            texts.append(text)
        return texts


def _option_texts(fields: _Fields, names: tuple[str, ...]) -> list[str] | None:
    """Options held one per member (MedMCQA's ``opa`` ... ``opd``), each non-empty text."""
    texts = [fields.text(name) for name in names]
    return [t for t in texts if t is not None] if fields.ok else None


def _metadata(pairs: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata object of the values that are present (not None)."""
    return {name: value for name, value in pairs.items() if value is not None}


# ---------------------------------------------------------------------- the five datasets


@dataclass(frozen=True)
class _Options:
    id_prefix: str | None
    cop_base: int | None


@dataclass(frozen=True)
class _Converted:
    """One record's item without its id, and the record's own id (None: numbered)."""

    source_id: str | None
    item: dict[str, Any]


_Converter = Callable[[_Record, _Fields, _Options], _Converted | None]

MEDMCQA_OPTIONS: Final = ("opa", "opb", "opc", "opd")


def _medmcqa_base(records: list[_Record], name: str, problems: list[str]) -> int | None:
    """Whether ``cop`` counts from 0 or 1 in this file, told from every record's value.

    The Hugging Face files (``openlifescienceai/medmcqa``, a class label) hold 0-3 and the
    original GitHub release holds 1-4; a file with a 0 is 0-based, one with a 4 is 1-based,
    one with both is refused, and one with only 1-3 cannot be told (``--cop-base``).
    """
    seen = {
        cop
        for r in records
        if isinstance(r.value, dict)
        and isinstance(cop := r.value.get("cop"), int)
        and not isinstance(cop, bool)
    }
    if 0 in seen and 4 in seen:
        problems.append(
            f"{name}: 'cop' is 0 in some records and 4 in others: neither 0-based (A-D = 0-3, "
            "the Hugging Face files) nor 1-based (1-4, the original GitHub release)"
        )
        return None
    if 0 in seen:
        return 0
    if 4 in seen:
        return 1
    if seen & {1, 2, 3}:
        problems.append(
            f"{name}: cannot tell whether 'cop' counts from 0 (A-D = 0-3, the Hugging Face "
            "files) or from 1 (1-4, the original GitHub release): no record has cop 0 or 4; "
            "pass --cop-base 0 or --cop-base 1"
        )
    return None


def _medmcqa(record: _Record, fields: _Fields, options: _Options) -> _Converted | None:
    source_id = fields.text("id")
    question = fields.text("question")
    texts = _option_texts(fields, MEDMCQA_OPTIONS)
    cop = fields.integer("cop")
    explanation = fields.text("exp", required=False)
    metadata = _metadata(
        {
            "subject": fields.text("subject_name", required=False),
            "topic": fields.text("topic_name", required=False),
            "choice_type": fields.text("choice_type", required=False),
        }
    )
    base = options.cop_base
    if cop is not None:
        if cop == -1:
            fields.fail(
                "'cop' is -1: the record has no answer key (the test split's answers "
                "are not published)"
            )
        elif base is not None and not base <= cop <= base + 3:
            fields.fail(
                f"'cop' {cop} is not an option number ({base}-{base + 3} in this {base}-based file)"
            )
        elif not 0 <= cop <= 4:
            fields.fail(f"'cop' {cop} is not an option number (0-3 or 1-4)")
    if not fields.ok or base is None:
        return None
    assert source_id is not None and question is not None and texts is not None
    assert cop is not None
    answer = OPTION_LABELS[cop - base]
    item: dict[str, Any] = {"question": question, "options": texts, "answer": answer}
    if explanation is not None:
        item["rationale"] = explanation
    if metadata:
        item["metadata"] = metadata
    return _Converted(source_id, item)


def _medqa(record: _Record, fields: _Fields, options: _Options) -> _Converted | None:
    question = fields.text("question")
    texts = fields.option_object("options")
    answer_idx = fields.text("answer_idx")
    answer = fields.text("answer")
    meta_info = fields.text("meta_info", required=False)
    if not fields.ok:
        return None
    assert question is not None and texts is not None
    assert answer_idx is not None and answer is not None
    labels = OPTION_LABELS[: len(texts)]
    if answer_idx not in labels:
        fields.fail(
            f"'answer_idx' {answer_idx!r} is not one of the option labels ({', '.join(labels)})"
        )
        return None
    chosen = texts[labels.index(answer_idx)]
    if answer.strip() != chosen.strip():
        fields.fail(
            f"'answer' {_short(answer)} is not the text of option {answer_idx} ({_short(chosen)})"
        )
        return None
    item: dict[str, Any] = {"question": question, "options": texts, "answer": answer_idx}
    if meta_info is not None:
        item["metadata"] = {"meta_info": meta_info}
    return _Converted(None, item)


def _pubmedqa(record: _Record, fields: _Fields, options: _Options) -> _Converted | None:
    question = fields.text("QUESTION")
    contexts = fields.strings("CONTEXTS")
    labels = fields.strings("LABELS")
    decision = fields.text("final_decision")
    long_answer = fields.text("LONG_ANSWER", required=False)
    meshes = fields.strings("MESHES", required=False, nonempty=False)
    year: Any = None
    if fields.present("YEAR", required=False):
        year = fields.value["YEAR"]
        if isinstance(year, bool) or not isinstance(year, str | int):
            fields.fail(f"'YEAR' must be a string or an integer, got {_short(year)}")
    predictions = {
        name: fields.text(name, required=False)
        for name in ("reasoning_required_pred", "reasoning_free_pred")
    }
    if decision is not None and decision not in PUBMEDQA_ANSWERS:
        fields.fail(f"'final_decision' {decision!r} is not yes, no or maybe")
    if contexts is not None and labels is not None and len(contexts) != len(labels):
        fields.fail(
            f"'LABELS' has {len(labels)} labels for {len(contexts)} 'CONTEXTS' "
            "paragraphs (one label each)"
        )
    if not fields.ok:
        return None
    assert question is not None and contexts is not None and labels is not None
    assert decision is not None and record.key is not None
    item: dict[str, Any] = {
        "question": question,
        "context": "\n\n".join(contexts),
        "answer": decision,
    }
    if long_answer is not None:
        item["rationale"] = long_answer
    item["metadata"] = _metadata(
        {
            "context_labels": labels,
            "meshes": meshes,
            "year": year,
            **predictions,
        }
    )
    return _Converted(record.key, item)


def _medxpertqa(record: _Record, fields: _Fields, options: _Options) -> _Converted | None:
    if "images" in fields.value:
        fields.fail(
            "has 'images': this is the MedXpertQA MM (multimodal) subset; import the "
            "Text subset (Text/test.jsonl, Text/dev.jsonl)"
        )
        return None
    source_id = fields.text("id")
    question = fields.text("question")
    texts = fields.option_object("options")
    label = fields.text("label")
    metadata = _metadata(
        {
            name: fields.text(name, required=False)
            for name in ("medical_task", "body_system", "question_type")
        }
    )
    if not fields.ok:
        return None
    assert source_id is not None and question is not None and texts is not None
    assert label is not None
    labels = OPTION_LABELS[: len(texts)]
    if label not in labels:
        fields.fail(f"'label' {label!r} is not one of the option labels ({', '.join(labels)})")
        return None
    item: dict[str, Any] = {"options": texts, "answer": label}
    cut = question.rfind(ANSWER_CHOICES)
    if cut == -1:
        item["question"] = question
    else:
        stem, block = question[:cut], question[cut + len(ANSWER_CHOICES) :]
        missing = _unlisted_option(block, texts)
        if missing is not None:
            fields.fail(
                f"the question's own 'Answer Choices:' list does not give option "
                f"{missing} as '({missing}) {_short(texts[labels.index(missing)])}'"
            )
            return None
        if not stem.strip():
            fields.fail("'question' has nothing before its 'Answer Choices:' list")
            return None
        item["question"] = stem
        item["question_with_choices"] = question
    if metadata:
        item["metadata"] = metadata
    return _Converted(source_id, item)


def _unlisted_option(block: str, texts: list[str]) -> str | None:
    """The first option that ``block`` does not list as ``(X) text`` in label order, or None."""
    pos = 0
    for label, text in zip(OPTION_LABELS, texts, strict=False):
        found = block.find(f"({label}) {text}", pos)
        if found == -1:
            return label
        pos = found + len(label) + 3 + len(text)
    return None


def _healthcaremagic(record: _Record, fields: _Fields, options: _Options) -> _Converted | None:
    instruction = fields.text("instruction", required=False)
    patient = fields.text("input")
    doctor = fields.text("output")
    if not fields.ok:
        return None
    assert patient is not None and doctor is not None
    item: dict[str, Any] = {"question": patient, "answer": doctor}
    if instruction is not None:
        item["instruction"] = instruction
    return _Converted(None, item)


_CONVERTERS: Final[dict[str, _Converter]] = {
    "medmcqa": _medmcqa,
    "medqa": _medqa,
    "pubmedqa": _pubmedqa,
    "medxpertqa": _medxpertqa,
    "healthcaremagic": _healthcaremagic,
}


def _records(fmt: str, text: str, name: str, problems: list[str]) -> list[_Record]:
    """The source's records: JSON lines, or a PubMedQA object keyed by PMID.

    A HealthCareMagic file is one JSON array (the original release) or JSON lines (a Hugging
    Face export), told by its first character.
    """
    if fmt == "pubmedqa":
        return _document_records(text, name, problems, "{", key_name="PMID")
    if fmt == "healthcaremagic" and text.lstrip(" \t\r\n").startswith("["):
        return _document_records(text, name, problems, "[")
    return _jsonl_records(text, name, problems)


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise DatasetError([f"unknown dataset format {fmt!r}; use one of {', '.join(FORMATS)}"])


def _item_id(fmt: str, record: _Record, source_id: str | None, id_prefix: str | None) -> str:
    """A converted record's item id: from its source id, else from its record number.

    Empty when the source id has no letter or digit to make one of.
    """
    if source_id is None:
        return item_id_for(str(record.number), id_prefix or _DEFAULT_PREFIX[fmt])
    return item_id_for(source_id, id_prefix)


def _check_options(id_prefix: str | None, cop_base: int | None) -> None:
    """``--id-prefix`` and ``--cop-base`` as the command gives them (DatasetError if not)."""
    if id_prefix is not None and not ITEM_ID_RE.match(id_prefix):
        raise DatasetError(
            [
                f"id prefix {id_prefix!r}: use letters, digits, '.', '_' or '-', starting with a "
                "letter or digit"
            ]
        )
    if cop_base not in (None, 0, 1):
        raise DatasetError([f"cop base {cop_base!r}: use 0 or 1"])


def _convert(
    fmt: str, src: Path, name: str, id_prefix: str | None, cop_base: int | None
) -> tuple[int, list[dict[str, Any]]]:
    """(how many records SRC has, its items in file order); DatasetError on any problem."""
    _check_format(fmt)
    _check_options(id_prefix, cop_base)
    text = _read_text(src, name)
    problems: list[str] = []
    records = _records(fmt, text, name, problems)
    if fmt == "medmcqa" and cop_base is None:
        cop_base = _medmcqa_base(records, name, problems)
    options = _Options(id_prefix, cop_base)
    converter = _CONVERTERS[fmt]
    items: list[dict[str, Any]] = []
    first: dict[str, str] = {}
    for record in records:
        if record.value is None:
            continue
        fields = _Fields(record, problems)
        converted = converter(record, fields, options)
        if converted is None:
            continue
        item_id = _item_id(fmt, record, converted.source_id, id_prefix)
        if not item_id and converted.source_id is not None:
            fields.fail(f"id {converted.source_id!r} has no letter or digit to make an item id of")
            continue
        if item_id in first:
            problems.append(f"{record.where}: item id {item_id!r} again (first: {first[item_id]})")
            continue
        first[item_id] = record.where
        item = {"id": item_id, **converted.item}
        if converted.source_id is not None and item_id != converted.source_id:
            item["metadata"] = {**item.get("metadata", {}), "source_id": converted.source_id}
        items.append(item)
    if not records and not problems:
        problems.append(f"{name}: no records")
    if problems:
        raise DatasetError(problems)
    return len(records), items


def convert(
    fmt: str,
    src: str | Path,
    *,
    id_prefix: str | None = None,
    cop_base: int | None = None,
) -> list[dict[str, Any]]:
    """The items of the dataset file ``src`` (format ``fmt``, one of :data:`FORMATS`), in order.

    Each item is a dict of item members (``docs/prompts.md`` section 1) in the mapping
    ``docs/items.md`` gives for the format. ``id_prefix`` puts ``PREFIX-`` before every item id
    (the numbered formats, MedQA and HealthCareMagic, use it instead of ``medqa`` and ``hcm``);
    ``cop_base`` (MedMCQA only) says whether ``cop`` counts from 0 or 1 instead of telling it
    from the file. Raises :class:`DatasetError` listing every problem as ``file:line: what``.
    """
    path = Path(src)
    return _convert(fmt, path, str(path), id_prefix, cop_base)[1]


# ---------------------------------------------------------------------- writing DEST


def _refuse_dest(dest: Path, src: Path, force: bool) -> None:
    """Problems with DEST known before reading SRC: its name, a directory, SRC itself, exists."""
    if dest.suffix.lower() != ".jsonl":
        raise DatasetError(
            [f"{dest}: an imported item file is JSONL; give a name ending in .jsonl"]
        )
    if dest.is_dir():
        raise DatasetError([f"{dest}: is a directory; give the item file's name"])
    if dest.exists() or dest.is_symlink():
        try:
            same = dest.exists() and src.exists() and os.path.samefile(dest, src)
        except OSError:
            same = False
        if same:
            raise DatasetError([f"{dest}: is the source file itself; write the items elsewhere"])
        if not force:
            raise DatasetError([f"{dest}: already exists; pass --force to replace it"])
    if not dest.parent.is_dir():
        raise DatasetError([f"{dest}: its folder {dest.parent} does not exist; create it first"])


def _publish(staged: Path, dest: Path, force: bool) -> None:
    """Rename ``staged`` to ``dest``; without ``force`` never over an existing file."""
    if force:
        os.replace(staged, dest)
        return
    try:
        os.link(staged, dest)  # fails, atomically, when dest exists
    except FileExistsError:
        raise DatasetError([f"{dest}: already exists; pass --force to replace it"]) from None
    except OSError:  # a file system without hard links: check, then rename
        if dest.exists() or dest.is_symlink():
            raise DatasetError([f"{dest}: already exists; pass --force to replace it"]) from None
        os.replace(staged, dest)
    else:
        staged.unlink()


def _write_items(dest: Path, items: list[dict[str, Any]], force: bool) -> ItemSet:
    """Write ``items`` to DEST whole or not at all, loaded back before the rename."""
    data = b"".join(canonical_json(item) + b"\n" for item in items)
    # a new file beside DEST, with the permissions a new file gets (0o666 less the umask)
    staged = dest.with_name(f".{dest.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp.jsonl")
    try:
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        raise DatasetError([f"cannot write {describe_os_error(exc, dest)}"]) from None
    try:
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            raise DatasetError([f"cannot write {describe_os_error(exc, dest)}"]) from None
        try:
            loaded = load_items(staged, display=str(dest))
        except SpecError as exc:  # a converter bug: never publish a file that does not load
            raise DatasetError(
                [
                    f"internal error: the items converted from the dataset do not load as {dest} "
                    "(please report it):",
                    *exc.problems,
                ]
            ) from None
        try:
            _publish(staged, dest, force)
        except OSError as exc:
            raise DatasetError([f"cannot write {describe_os_error(exc, dest)}"]) from None
        fsync_directory(dest.parent)
    finally:
        staged.unlink(missing_ok=True)
    return replace(loaded, path=dest)


def merge_metadata(items: list[dict[str, Any]], sidecar: str | Path) -> list[dict[str, Any]]:
    """``items`` with the metadata of the JSON file ``sidecar`` merged into each one's.

    The sidecar is ``{"items": {"<item id>": {name: value, ...}, ...}}`` (``docs/items.md``,
    "Metadata sidecar"): each entry's members are added to that item's ``metadata``. An entry
    naming no item, a member the item's metadata already has, or a malformed file is refused
    with :class:`DatasetError` naming the file and the entry; items without an entry keep theirs.
    """
    path = Path(sidecar)
    name = str(path)
    try:
        data = parse_json(_read_text(path, name))
    except (ValueError, _DuplicateMember) as exc:
        raise DatasetError([f"{name}: not a JSON metadata sidecar: {exc}"]) from None
    entries = data.get("items") if isinstance(data, dict) else None
    if not isinstance(entries, dict) or set(data) - {"items", "version"}:
        raise DatasetError(
            [
                f'{name}: a metadata sidecar is an object {{"items": {{"<item '
                'id>": {...}}}} (and an optional "version")'
            ]
        )
    by_id = {item["id"]: item for item in items}
    problems = []
    out = [dict(item) for item in items]
    index = {item["id"]: i for i, item in enumerate(out)}
    for item_id, members in entries.items():
        if item_id not in by_id:
            problems.append(f"{name}: items.{item_id}: no item has this id")
            continue
        if not isinstance(members, dict):
            problems.append(f"{name}: items.{item_id}: must be an object of metadata members")
            continue
        current = dict(out[index[item_id]].get("metadata") or {})
        clash = sorted(set(members) & set(current))
        if clash:
            problems.append(
                f"{name}: items.{item_id}: metadata {clash[0]!r} is already set by the dataset"
            )
            continue
        out[index[item_id]]["metadata"] = {**current, **members}
    if problems:
        raise DatasetError(problems)
    return out


def import_dataset(
    fmt: str,
    src: str | Path,
    dest: str | Path,
    *,
    limit: int | None = None,
    force: bool = False,
    id_prefix: str | None = None,
    cop_base: int | None = None,
    metadata: str | Path | None = None,
) -> ImportResult:
    """Convert the dataset file ``src`` (format ``fmt``) and write its items to ``dest``.

    The whole of ``src`` is read and checked; ``limit`` keeps only its first ``limit`` items.
    ``dest`` (a name ending in ``.jsonl``, in an existing folder) is written whole or not at
    all, loaded back with :func:`runner._items.load_items` before it is renamed into place, and
    never replaces an existing file unless ``force``. ``id_prefix`` and ``cop_base`` are as for
    :func:`convert`. ``metadata`` is a sidecar file whose entries are merged into the items'
    metadata (:func:`merge_metadata`). Raises :class:`DatasetError` naming every problem.
    """
    source, target = Path(src), Path(dest)
    if limit is not None and limit < 1:
        raise DatasetError([f"limit {limit}: keep at least 1 item"])
    _check_format(fmt)
    _refuse_dest(target, source, force)
    records, items = _convert(fmt, source, str(source), id_prefix, cop_base)
    if metadata is not None:
        items = merge_metadata(items, metadata)
    kept = items if limit is None else items[:limit]
    written = _write_items(target, kept, force)
    return ImportResult(fmt, source, target, records, written)
