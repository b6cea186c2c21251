"""Truth tables, read the way the study's parser scores them, and checked against it at lock.

A study's truth table (``[stimuli] truth``) takes one of two forms (``docs/study-spec.md``):

- **glyph table** (parser ``tumbling-e-json``): exactly the columns
  ``stimulus,row,position,orientation``, read by :func:`runner._stimuli.read_truth_csv`;
- **answer table** (every single-answer parser): a ``stimulus`` column and the answer column
  (``[stimuli] answer_column``; ``orientation`` for ``orientation-word``, else ``answer``), one
  row per stimulus; other columns (``source``, notes) are allowed and not scored.

:func:`truth_problems` is what ``ledger lock`` runs: it refuses a table the parser could not
score, saying what does not fit (a missing column, a stimulus listed twice, an answer outside
the parser's labels, a truth an exact match can never equal). :func:`study_truth` is what
``ledger score`` reads.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ledger import describe_os_error, describe_utf8_error
from runner._errors import SpecError, StimulusError
from runner._items import Item
from runner._stimuli import ORIENTATIONS, TRUTH_HEADER, Glyph, read_truth_csv
from runner.parsers import lookup
from runner.parsers._base import ANSWER_WHITESPACE as ANSWER_WHITESPACE
from runner.spec import DEFAULT_LETTERS, LOGPROB_PROVIDERS, SINGLE_ANSWER_PARSERS, Study

__all__ = [
    "ANSWER_WHITESPACE",
    "YES_NO_MAYBE",
    "AnswerTable",
    "cloze_problems",
    "labels",
    "read_answer_table",
    "stimulus_sources",
    "study_truth",
    "truth_problems",
    "variant_truth",
]

YES_NO_MAYBE: Final = ("yes", "no", "maybe")
"""The labels of the ``yes-no-maybe`` parser (lower case, as PubMedQA writes them)."""


def labels(parser: str, letters: str | None = None) -> tuple[str, ...] | None:
    """The closed set of answers a parser can read, or None (``exact``, ``normalized``).

    ``orientation-word``: UP RIGHT DOWN LEFT; ``yes-no-maybe``: yes no maybe;
    ``multiple-choice``: the study's letters (default ``ABCD``), one label each.
    """
    if parser == "orientation-word":
        return tuple(ORIENTATIONS)
    if parser == "yes-no-maybe":
        return YES_NO_MAYBE
    if parser in ("multiple-choice", "cloze"):
        return tuple(letters or DEFAULT_LETTERS)
    return None


@dataclass(frozen=True)
class AnswerTable:
    """An answer table: each stimulus's answer (as written) and the line it is on."""

    path: Path
    columns: tuple[str, ...]
    answers: dict[str, str]
    lines: dict[str, int]
    sources: dict[str, str] | None


def _text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StimulusError(f"cannot read {describe_os_error(exc, path)}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StimulusError(f"{path}: {describe_utf8_error(data, exc)}") from None


def _answer_header(path: Path, header: list[str] | None, column: str) -> list[str]:
    """An answer table's header: ``stimulus`` and ``column`` among distinct column names."""
    if header is None:
        raise StimulusError(f"{path}: empty file; expected a header with stimulus,{column}")
    missing = [name for name in ("stimulus", column) if name not in header]
    if missing:
        raise StimulusError(
            f"{path}:1: no {' or '.join(repr(m) for m in missing)} column (the header is "
            f"{','.join(header)})"
        )
    if len(set(header)) != len(header):
        raise StimulusError(f"{path}:1: a column name appears twice in {','.join(header)}")
    return header


def read_answer_table(path: str | Path, column: str) -> AnswerTable:
    """Read an answer table: one row per stimulus, its answer in ``column``.

    Raises :class:`StimulusError` naming the file and line for a missing ``stimulus`` or
    answer column, a row with the wrong number of fields, an empty stimulus id, a stimulus
    listed twice, or an empty answer. A ``source`` column, when present, is read too.
    """
    path = Path(path)
    reader = csv.reader(io.StringIO(_text(path), newline=""), strict=True)
    try:
        header = _answer_header(path, next(reader, None), column)
        at = {name: i for i, name in enumerate(header)}
        answers: dict[str, str] = {}
        lines: dict[str, int] = {}
        sources: dict[str, str] | None = {} if "source" in at else None
        for fields in reader:
            where = f"{path}:{reader.line_num}"
            if not fields:
                continue
            if len(fields) != len(header):
                raise StimulusError(f"{where}: expected {len(header)} fields, got {len(fields)}")
            stimulus = fields[at["stimulus"]]
            if not stimulus:
                raise StimulusError(f"{where}: empty stimulus id")
            if stimulus in answers:
                raise StimulusError(
                    f"{where}: stimulus {stimulus!r} is listed twice (first on line "
                    f"{lines[stimulus]}); an answer table has one row per stimulus"
                )
            answer = fields[at[column]]
            if not answer.strip(ANSWER_WHITESPACE):
                raise StimulusError(f"{where}: stimulus {stimulus!r} has an empty {column!r}")
            answers[stimulus] = answer
            lines[stimulus] = reader.line_num
            if sources is not None:
                sources[stimulus] = fields[at["source"]]
    except csv.Error as exc:
        raise StimulusError(f"{path}:{reader.line_num}: malformed CSV: {exc}") from None
    return AnswerTable(path, tuple(header), answers, lines, sources)


def _header(path: Path) -> list[str]:
    try:
        return next(csv.reader(io.StringIO(_text(path), newline=""), strict=True), [])
    except (StimulusError, csv.Error):
        return []


def _glyph_problems(study: Study) -> list[str]:
    try:
        read_truth_csv(study.truth_path)
    except StimulusError as exc:
        header = _header(study.truth_path)
        hint = ""
        if "stimulus" in header and tuple(header) != TRUTH_HEADER:
            parser = "orientation-word" if "orientation" in header else "a single-answer parser"
            hint = (
                f"; the {study.parser} parser scores a chart glyph by glyph, and this looks like "
                f"an answer table (one answer per stimulus): use {parser} in [response] parser"
            )
        return [f"truth table does not fit parser {study.parser}: {exc}{hint}"]
    return []


def _fits_text(answer: str, parser: str) -> str | None:
    """Why the parser's registry entry can never match ``answer`` (``exact``, ``normalized``)."""
    spec = lookup(parser)
    if spec is None or spec.answer_problem is None:
        return None
    return spec.answer_problem(answer)


def cloze_problems(study: Study) -> list[str]:
    """Why a ``cloze`` study cannot be scored: a model that cannot return log-probabilities.

    Every model an arm runs must be served by a provider that returns them
    (``openai-compatible``, ``openai``) and ask for them (``logprobs = N``), or the letters'
    log-probabilities would never be recorded (``docs/scoring.md`` section 5.5).
    """
    if study.parser != "cloze":
        return []
    used: dict[str | None, None] = {}
    for arm in study.arms.values():
        names: list[str | None] = (
            list(arm.models) if arm.models is not None else [m.name for m in study.model_specs()]
        )
        used.update(dict.fromkeys(names))
    problems: list[str] = []
    for model in study.model_specs():
        if model.name not in used:
            continue
        table = "[model]" if model.name is None else f"[models.{model.name}]"
        if model.provider not in LOGPROB_PROVIDERS:
            problems.append(
                f"{study.spec_path}: {table}: [response] parser 'cloze' reads option-letter "
                f"log-probabilities, and provider {model.provider!r} cannot return them (use an "
                "openai-compatible server such as vLLM or llama.cpp, with logprobs = 20)"
            )
        elif "logprobs" not in model.params:
            problems.append(
                f"{study.spec_path}: {table}: [response] parser 'cloze' reads option-letter "
                "log-probabilities; set logprobs = 20 (the top log-probabilities per token to "
                "ask for) so the server returns them"
            )
    return problems


def truth_problems(study: Study) -> list[str]:
    """Every way the truth table does not fit the study's parser (``ledger lock`` refuses)."""
    if study.parser == "cloze":
        found = cloze_problems(study)
        if found:
            return found
    if study.item_study:
        return _item_problems(study)
    if study.parser not in SINGLE_ANSWER_PARSERS:
        glyph_problems = _glyph_problems(study)
        if study.analysis.get("random_intercept") == "source":
            glyph_problems.append(
                f"{study.spec_path}: analysis.random_intercept: 'source' needs a 'source' column "
                f"in the truth table, and the {study.parser} table has the fixed columns "
                f"{','.join(TRUTH_HEADER)}"
            )
        return glyph_problems
    column = study.answer_column or ""
    try:
        table = read_answer_table(study.truth_path, column)
    except StimulusError as exc:
        return [
            f"truth table does not fit parser {study.parser} (answer column {column!r}, "
            f"[stimuli] answer_column): {exc}"
        ]
    problems: list[str] = []
    for stimulus, answer in table.answers.items():
        problem = _answer_problem(study, answer, column)
        if problem:
            where = f"{table.path}:{table.lines[stimulus]}"
            problems.append(f"{where}: stimulus {stimulus!r}: {column} {answer!r} {problem}")
    if study.analysis.get("random_intercept") == "source":
        problems += _source_problems(study, table)
    return problems


def _scorable(answer: str, allowed: Sequence[str]) -> bool:
    """Whether ``answer`` is one of the parser's labels (case-insensitively, ASCII)."""
    canonical = answer.strip(ANSWER_WHITESPACE).lower()
    return canonical in {label.lower() for label in allowed} and canonical.isascii()


def _answer_problem(study: Study, answer: str, column: str) -> str | None:
    """Why a truth table's answer can never be scored correct by the study's parser, or None."""
    allowed = labels(study.parser, study.letters)
    if allowed is None:
        return _fits_text(answer, study.parser) or None
    if _scorable(answer, allowed):
        return None
    source = (
        "[response] letters"
        if study.parser in ("multiple-choice", "cloze")
        else (f"the {study.parser} parser")
    )
    return (
        f"is not one of {', '.join(allowed)} ({source}), so no answer could ever be scored correct"
    )


def _source_problems(study: Study, table: AnswerTable) -> list[str]:
    """``random_intercept = "source"``: the table's ``source`` column, filled for every row."""
    if table.sources is None:
        return [
            f"{study.spec_path}: analysis.random_intercept: 'source' needs a 'source' column "
            f"in {table.path.name} (columns {','.join(table.columns)}); the rotation builder "
            "writes one"
        ]
    empty = sorted(s for s, v in table.sources.items() if not v)
    if not empty:
        return []
    return [
        f"{table.path}:{table.lines[empty[0]]}: stimulus {empty[0]!r} has no source "
        "(analysis.random_intercept is 'source')"
    ]


def _item_problems(study: Study) -> list[str]:
    """The truth of an item file: every item's answer must be one the parser can score."""
    where_spec = f"{study.spec_path}: response.parser"
    if study.parser.startswith("judge:"):
        return []  # the judges read the item's answer as the reference (docs/scoring.md §10)
    if study.parser == "ddx":
        return []  # scored against reference sets (docs/scoring.md §12), checked in runner._ddx
    if study.parser not in SINGLE_ANSWER_PARSERS:
        return [
            f"{where_spec}: {study.parser!r} scores a tumbling-E chart glyph by glyph; an item "
            f"file has one answer per item: use one of {', '.join(SINGLE_ANSWER_PARSERS)}"
        ]
    try:
        items = study.load_items()
    except SpecError as exc:
        return list(exc.problems)
    name = study.rel(study.items_path) if study.items_path is not None else "items"
    problems: list[str] = []
    for item in items:
        problems += _item_answer_problems(study, item, f"{name}:{item.line}: item {item.id!r}")
        if len(problems) >= 20:
            problems.append(f"{name}: (stopped after 20 problems)")
            break
    if study.analysis.get("random_intercept") == "source":
        lacking = [i for i in items if not isinstance(i.metadata.get("source"), str)]
        if lacking:
            problems.append(
                f"{name}:{lacking[0].line}: item {lacking[0].id!r} has no string metadata "
                "'source' (analysis.random_intercept is 'source')"
            )
    return problems


def _item_answer_problems(study: Study, item: Item, where: str) -> list[str]:
    """An item's options (choice parsers) and answer, against the study's parser."""
    problems: list[str] = []
    if study.parser in ("multiple-choice", "cloze"):
        letters = study.letters or DEFAULT_LETTERS
        if len(item.options) > len(letters):
            problems.append(
                f"{where} has {len(item.options)} options, but [response] letters is "
                f"{letters!r}: the model could not answer its last options"
            )
        if not item.options:
            problems.append(f"{where} has no options for the multiple-choice parser")
    allowed = labels(study.parser, study.letters)
    if allowed is not None:
        if not _scorable(item.answer, allowed):
            problems.append(
                f"{where}: answer {item.answer!r} is not one of {', '.join(allowed)} (the "
                f"{study.parser} parser), so no answer could ever be scored correct"
            )
    else:
        why = _fits_text(item.answer, study.parser)
        if why:
            problems.append(f"{where}: answer {item.answer!r} {why}")
    return problems


def study_truth(study: Study) -> dict[str, list[Glyph] | str]:
    """Each stimulus's truth as the study's scorer reads it.

    ``tumbling-e-json``: the chart's glyphs (or ``"not-a-tumbling-e-chart"``) from the glyph
    table; a single-answer parser: the answer string exactly as written in the answer column.
    Raises :class:`StimulusError` when the table cannot be read that way.
    """
    if study.item_study:
        return {item.id: item.answer for item in study.load_items()}
    if study.parser not in SINGLE_ANSWER_PARSERS:
        return read_truth_csv(study.truth_path)
    table = read_answer_table(study.truth_path, study.answer_column or "")
    return dict(table.answers)


def variant_truth(study: Study) -> dict[tuple[str, str], tuple[str, str | None]]:
    """(answer, order) of every (item, variant) the schedule runs (``docs/variants.md`` §5).

    The answer is the varied item's (a permutation's remapped key); the order is the
    permutation's order string, None for a text variant. Empty for a study without variants.
    """
    from runner._variants import apply, variant_order

    if not study.variants:
        return {}
    items = study.load_items()
    out: dict[tuple[str, str], tuple[str, str | None]] = {}
    for variant in study.variant_list():
        for item in items:
            try:
                varied = apply(variant, item)
            except ValueError:
                continue  # not run (an arm subset): lock refused every pair that is
            out[(item.id, variant.name)] = (varied.answer, variant_order(variant, item))
    return out


def stimulus_sources(study: Study) -> dict[str, str]:
    """Each stimulus's ``source`` (its source image) from an answer table with that column.

    Raises :class:`StimulusError` when the table has no ``source`` column.
    """
    if study.item_study:
        return {
            i.id: str(i.metadata["source"])
            for i in study.load_items()
            if isinstance(i.metadata.get("source"), str)
        }
    if study.parser not in SINGLE_ANSWER_PARSERS:
        raise StimulusError(f"{study.truth_path}: a glyph table has no source column")
    table = read_answer_table(study.truth_path, study.answer_column or "")
    if table.sources is None:
        raise StimulusError(f"{study.truth_path}: no 'source' column")
    return dict(table.sources)
