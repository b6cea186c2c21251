"""The analysis dataset rebuilt from the scores: ``trials.csv`` and ``items.csv`` (analysis.md §2).

Part of the science checks (:mod:`verify._science`); imports nothing from ``ledger``,
``runner`` or ``analysis``.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import io
import json
import math
import sys
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import rfc8785

from verify import _ddx
from verify._recompute.archive import (
    ORIENTATIONS,
    TUMBLING_E,
    _Archive,
    _Event,
    _locked_bytes,
    _Problem,
    _sources,
)
from verify._rescore import (
    CONTROL_TRUTH,
)
from verify._variants import back_to_original

TRIAL_COLUMNS = (
    "trial",
    "arm",
    "stimulus",
    "rep",
    "response_seq",
    "status",
    "n_items",
    "n_answered",
    "n_correct",
    "accuracy",
    "control",
    "excluded",
)


ITEM_COLUMNS = ("trial", "arm", "stimulus", "rep", "row", "position", "truth", "answer", "correct")


MODEL_TRIAL_COLUMNS = (*TRIAL_COLUMNS[:2], "model", *TRIAL_COLUMNS[2:])
"""``trials.csv`` of a study with ``[models]``: the model after the arm (analysis.md §2)."""


MODEL_ITEM_COLUMNS = (*ITEM_COLUMNS[:2], "model", *ITEM_COLUMNS[2:])


VARIANT_TRIAL_COLUMNS = (*MODEL_TRIAL_COLUMNS[:4], "variant", *MODEL_TRIAL_COLUMNS[4:])
"""``trials.csv`` of a study with variants: the variant after the stimulus (variants.md §5)."""


VARIANT_ITEM_COLUMNS = (
    *MODEL_ITEM_COLUMNS[:4],
    "variant",
    "order",
    *MODEL_ITEM_COLUMNS[4:],
    "truth_original",
    "answer_original",
)


@dataclass
class _Dataset:
    trials: list[dict[str, Any]]
    items: ItemTable  # a list of rows (dicts) is made a table
    arms: list[str]
    given_up: list[str]
    scores_sha256: str
    sources: dict[str, str] = field(default_factory=dict)
    models: list[str] = field(default_factory=list)  # model_order of a [models] study
    variants: bool = False  # the study declares variants (docs/variants.md)
    cloze: bool = False  # the parser is cloze: items.csv ends in logprobs, margin
    ddx: bool = False  # the parser is ddx: trials.csv ends in the metrics (scoring.md §12)
    covariates: list[str] = field(default_factory=list)  # analysis.md §11: covariate.NAME
    factors: list[str] = field(default_factory=list)  # analysis.md §2: factor.<NAME> columns
    excluded_trials: list[str] = field(default_factory=list)  # trial.excluded: never sent
    _analysable_items: ItemTable | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.items, ItemTable):
            self.items = ItemTable.from_rows(list(self.items))

    @property
    def several_models(self) -> bool:
        return len(self.models) >= 2

    def for_model(self, model: str) -> _Dataset:
        """Only the rows of one model, as the dataset of a one-model study."""
        return replace(
            self,
            # with a data arm's rows (model ""), compared within each model (trials.md §6)
            trials=[t | {"model": model} for t in self.trials if t["model"] in (model, "")],
            items=self.items.trials_where(lambda c: c[2] in (model, "")).with_common(
                "model", model
            ),
            given_up=[g for g in self.given_up if _trial_model(g) == model],
            excluded_trials=[g for g in self.excluded_trials if _trial_model(g) == model],
            models=[],
        )  # a one-model study's dataset; every other member (variants, cloze, ...) kept

    def for_variant(self, variant: str) -> _Dataset:
        """Only the rows of one variant (a post-hoc ``variant``, analysis.md §6)."""

        def of(trial: str) -> str | None:
            parts = trial.split("|")
            return parts[3] if len(parts) == 5 else None

        return replace(
            self,
            trials=[t for t in self.trials if str(t["variant"]) == variant],
            items=self.items.trials_where(lambda c: str(c[4]) == variant),
            given_up=[g for g in self.given_up if of(g) == variant],
            excluded_trials=[g for g in self.excluded_trials if of(g) == variant],
        )

    def for_stimuli(self, stimuli: list[str]) -> _Dataset:
        """Only the rows of these stimuli (a hypothesis's ``stimuli``, study-spec.md)."""
        keep = {str(s) for s in stimuli}
        return replace(
            self,
            trials=[t for t in self.trials if str(t["stimulus"]) in keep],
            items=self.items.trials_where(lambda c: str(c[3]) in keep),
        )  # every other member (given_up, sources, models, variants, cloze) kept

    def analysable(self) -> list[dict[str, Any]]:
        return [t for t in self.trials if not t["control"] and not t["excluded"]]

    def analysable_items(self) -> ItemTable:
        """The item rows of the analysable trials, control rows left out (read once, kept)."""
        if self._analysable_items is None:
            ids = {t["trial"] for t in self.analysable()}
            items = self.items
            ok = np.fromiter((c[0] in ids for c in items.commons), bool, len(items.commons))
            truth = items.truth
            real = np.fromiter((v != CONTROL_TRUTH for v in truth.labels), bool, len(truth.labels))
            keep = ok[_int_view(items.of)] & real[_int_view(truth.codes)]
            self._analysable_items = items.take(np.flatnonzero(keep))
        return self._analysable_items


def _trial_model(trial: str) -> str:
    """The model part of a trial id ``arm|model|item|rep`` (``""`` for ``arm|stimulus|rep``).

    A five-part id (with a variant, ``docs/variants.md`` §4) has it second too (maybe empty).
    """
    parts = trial.split("|")
    return parts[1] if len(parts) in (4, 5) else ""


def _plan_models(plan: dict[str, Any]) -> list[str]:
    """The model order of a ``[models]`` study (prompts.md §7), else an empty list."""
    declared = plan.get("models")
    if not isinstance(declared, dict):
        return []
    order = plan.get("model_order")
    names = [str(m) for m in order] if isinstance(order, list) else sorted(declared)
    return trial_models(plan, names)


def trial_models(plan: dict[str, Any], names: list[str]) -> list[str]:
    """``names`` less the models only steps use (docs/prompts.md §8), in their order.

    A model only steps use: every arm lists its models and none lists it. A study without
    steps keeps every name.
    """
    arms = plan.get("arms")
    if not plan.get("steps") or not isinstance(arms, dict):
        return names
    used: set[str] = set()
    for arm in arms.values():
        if isinstance(arm, dict) and "response_from" in arm:
            continue  # a data arm runs no model (docs/trials.md §6)
        listed = arm.get("models") if isinstance(arm, dict) else None
        if not isinstance(listed, list):
            return names
        used.update(str(m) for m in listed)
    return [n for n in names if n in used]


def _csv_chunks(
    rows: Sequence[Any] | ItemTable, columns: tuple[str, ...], per_chunk: int = 4096
) -> Iterator[bytes]:
    """The UTF-8 CSV of ``rows`` (header first), in pieces of ``per_chunk`` rows.

    A table of millions of rows is hashed piece by piece and never held whole. ``rows`` is a
    sequence of rows read by column name, or an :class:`ItemTable` (read by columns, each
    distinct value written once: :func:`_table_chunks`).
    """
    if isinstance(rows, ItemTable) and len(columns) > 1:
        yield from _table_chunks(rows, columns, 16 * per_chunk)
        return
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    values: Iterator[Sequence[Any]] = (
        rows.tuples(columns, per_chunk)
        if isinstance(rows, ItemTable)
        else ([row[c] for c in columns] for row in rows)
    )
    for n, row_values in enumerate(values, 1):
        writer.writerow([_cell(v) for v in row_values])
        if n % per_chunk == 0:
            yield out.getvalue().encode("utf-8")
            out.seek(0)
            out.truncate()
    yield out.getvalue().encode("utf-8")


def _cell(v: Any) -> Any:
    """What the CSV writer is given for value ``v``: empty for none or NaN, floats as ``.10g``."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float):
        return f"{v:.10g}"
    return v


class _CellText:
    """Each value's text in a CSV row, as ``csv.writer`` writes a field (quoted if it must be).

    A field's quoting depends on its text alone (a row of one empty field aside, which a table
    of several columns never has), so each distinct value is written once.
    """

    def __init__(self) -> None:
        self._out = io.StringIO()
        self._writer = csv.writer(self._out, lineterminator="\n")

    def __call__(self, v: Any) -> str:
        """The text of value ``v`` as a field of a row of several."""
        value = _cell(v)
        text = "" if value is None else value if isinstance(value, str) else str(value)
        if text == "":
            return ""
        self._out.seek(0)
        self._out.truncate()
        self._writer.writerow([text])
        return self._out.getvalue()[:-1]


def _table_chunks(table: ItemTable, columns: tuple[str, ...], per_chunk: int) -> Iterator[bytes]:
    """:func:`_csv_chunks` of an :class:`ItemTable`: each column's texts read through its codes.

    A trial column's text is made once per trial, a coded column's once per distinct value;
    a row is its cells joined, as ``csv.writer`` joins them (``docs/analysis.md`` §2).
    """
    text = _CellText()
    header = io.StringIO()
    csv.writer(header, lineterminator="\n").writerow(columns)
    yield header.getvalue().encode("utf-8")
    how: list[tuple[np.ndarray, np.ndarray] | str] = []  # (texts, codes), or a column name
    for name in columns:
        k = _COMMON.get(name)
        if k is not None:  # a trial's column: its text per trial, read through ``of``
            texts = [text(c[k]) for c in table.commons]
            how.append((np.array(texts or [""], dtype=object), _int_view(table.of)))
        elif name in _CODED:  # a coded column: its text per distinct value
            coded: Coded = getattr(table, name)
            texts = [text(v) for v in coded.labels]
            how.append((np.array(texts or [""], dtype=object), _int_view(coded.codes)))
        else:  # derived or listed columns (truth_original, logprobs, ...): value by value
            how.append(name)
    for lo in range(0, len(table), per_chunk):
        hi = min(lo + per_chunk, len(table))
        part: ItemTable | None = None
        cells: list[list[str]] = []
        for h in how:
            if isinstance(h, str):
                part = table.take(range(lo, hi)) if part is None else part
                cells.append([text(v) for v in part.column(h)])
            else:
                cells.append(h[0][h[1][lo:hi]].tolist())
        yield ("\n".join(map(",".join, zip(*cells, strict=True))) + "\n").encode("utf-8")


def _csv_bytes(rows: Sequence[Any], columns: tuple[str, ...]) -> bytes:
    """The UTF-8 CSV of ``rows`` (header first), whole."""
    return b"".join(_csv_chunks(rows, columns))


def _arm_codes(revealed: _Event) -> dict[str, str]:
    """The revealed arm codes, each checked to be HMAC-SHA256(secret, arm) (randomization)."""
    arm_codes: dict[str, str] = revealed.body.get("arm_codes") or {}
    secret_hex = revealed.body.get("secret_hex")
    if not isinstance(secret_hex, str):
        return arm_codes
    try:
        secret = bytes.fromhex(secret_hex)
    except ValueError:
        secret = b""
    for arm, code in arm_codes.items():
        expected = hmac.new(secret, arm.encode("utf-8"), hashlib.sha256).hexdigest()[:12]
        if code != expected:
            raise _Problem(
                f"blinding.revealed seq {revealed.seq}: code of arm {arm} is not "
                "HMAC-SHA256(secret, arm)",
                revealed.seq,
            )
    return arm_codes


@dataclass(frozen=True)
class _Reading:
    """What every trial row is read with: the arm of each code and the locked settings."""

    code_arm: dict[str, str]
    exclude: bool
    tumbling: bool
    ddx: bool


def _request_of(archive: _Archive, event: _Event, b: dict[str, Any]) -> dict[str, Any]:
    """The trial.requested body a trial.scored event scores."""
    response = archive.by_seq.get(b.get("response_seq", -1))
    request = archive.by_seq.get(response.body.get("request_seq", -1)) if response else None
    if response is None or request is None or request.kind != "trial.requested":
        raise _Problem(f"trial.scored seq {event.seq}: its request cannot be found", event.seq)
    return request.body


def _scored_items(archive: _Archive, event: _Event, ddx: bool) -> list[dict[str, Any]]:
    try:
        items: list[dict[str, Any]] = [] if ddx else json.loads(archive.event_blob(event, "scores"))
    except (ValueError, RecursionError):
        raise _Problem(
            f"trial.scored seq {event.seq}: scores blob is not JSON", event.seq
        ) from None
    return items


_ITEM_FIELDS = (
    "trial",
    "arm",
    "model",
    "stimulus",
    "variant",
    "rep",
    "order",
    "row",
    "position",
    "truth",
    "answer",
    "correct",
    "truth_original",
    "answer_original",
    "logprobs",
    "margin",
)
_COMMON = {name: k for k, name in enumerate(_ITEM_FIELDS[:7])}
"""The columns a trial's item rows share: one tuple per trial, by position."""
_OWN_ORDER = ("row", "position", "truth", "answer", "correct", "logprobs", "margin")
"""The columns each item row holds itself, in :class:`ItemRow`'s argument order."""
_OWN = frozenset(_OWN_ORDER)
_CODED = ("row", "position", "truth", "answer", "correct")
"""The columns an :class:`ItemTable` keeps as :class:`Coded` codes."""


class ItemRow:
    """One row of ``items.csv`` (analysis.md §2), read by column name like a dict.

    A study of 10^5 trials has millions of item rows, so each is a small slotted object, not a
    dict: the trial's columns (trial, arm, model, stimulus, variant, rep, order) are one tuple
    shared by its rows, short strings are shared (:func:`_shared`), and ``truth_original`` and
    ``answer_original`` are derived when read (variants.md §2/§5). ``row["truth"]``,
    ``row.get("answer")`` and ``row | {"model": m}`` (a copy with columns replaced) read and
    derive it as a dict would.
    """

    __slots__ = ("answer", "common", "correct", "logprobs", "margin", "position", "row", "truth")

    def __init__(
        self,
        common: tuple[Any, ...],
        row: Any,
        position: Any,
        truth: Any,
        answer: Any,
        correct: Any,
        logprobs: Any = None,
        margin: Any = None,
    ) -> None:
        self.common = common
        self.row = row
        self.position = position
        self.truth = truth
        self.answer = answer
        self.correct = correct
        self.logprobs = logprobs
        self.margin = margin

    def __getitem__(self, key: str) -> Any:
        k = _COMMON.get(key)
        if k is not None:
            return self.common[k]
        if key in _OWN:
            return getattr(self, key)
        if key == "truth_original":
            return _shared(_original(self.common[6], self.truth))
        if key == "answer_original":
            return _shared(_original(self.common[6], self.answer))
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        """The value of column ``key``, or ``default`` when there is no such column."""
        return self[key] if key in _ITEM_SET else default

    def __contains__(self, key: object) -> bool:
        return key in _ITEM_SET

    def keys(self) -> tuple[str, ...]:
        """The column names."""
        return _ITEM_FIELDS

    def as_dict(self) -> dict[str, Any]:
        """The row as a dict of every column."""
        return {n: self[n] for n in _ITEM_FIELDS}

    def __or__(self, other: dict[str, Any]) -> ItemRow:
        unknown = set(other) - _COMMON.keys() - _OWN
        if unknown:
            raise KeyError(sorted(unknown)[0])
        common = tuple(other.get(n, v) for n, v in zip(_COMMON, self.common, strict=True))
        own = [other.get(n, getattr(self, n)) for n in _OWN_ORDER]
        return ItemRow(common, *own)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ItemRow):
            return self.as_dict() == other.as_dict()
        if isinstance(other, dict):
            return self.as_dict() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ItemRow({self.as_dict()!r})"


_ITEM_SET = frozenset(_ITEM_FIELDS)
_SHORT = 64  # strings up to this length are shared between rows


def _shared(value: Any) -> Any:
    """``value``, a short string being the one shared copy of its text (``sys.intern``)."""
    if type(value) is str and len(value) <= _SHORT:
        return sys.intern(value)
    return value


Indices = Sequence[int] | np.ndarray
"""Row indices: a sequence of ints (a list, a ``range``, an ``array``) or a numpy array."""


def _int_view(values: array) -> np.ndarray:  # type: ignore[type-arg]
    """An ``array`` of integers seen as a numpy array (no copy)."""
    return np.frombuffer(values, dtype=np.dtype(values.typecode))


def _index_array(indices: Indices) -> np.ndarray:
    """``indices`` (a range, an ``array``, a numpy array or any sequence) as int64 numpy."""
    if isinstance(indices, np.ndarray):
        return indices.astype(np.int64, copy=False)
    if isinstance(indices, range):
        return np.arange(indices.start, indices.stop, indices.step, dtype=np.int64)
    if isinstance(indices, array):
        return _int_view(indices).astype(np.int64, copy=False)
    return np.fromiter(indices, np.int64, len(indices))


def _taken(values: array, picked: np.ndarray) -> array:  # type: ignore[type-arg]
    """The ``array`` of ``values`` at ``picked`` (same type code), as ``values[k]`` reads.

    An index past either end raises :class:`IndexError`, as reading it one by one does.
    """
    n = len(values)
    if len(picked) and (int(picked.max()) >= n or int(picked.min()) < -n):
        raise IndexError("array index out of range")
    out = array(values.typecode)
    if len(picked):
        out.frombytes(_int_view(values)[picked].tobytes())
    return out


class Coded:
    """A column of item rows held as 4-byte codes into its distinct values (``labels``).

    Item rows repeat few values (a truth, an answer, a row, a position, ``True``/``False``):
    each row costs 4 bytes, each distinct value one entry. A value is looked up by its type
    and value (``True`` and ``1``, ``0.0`` and ``-0.0`` stay apart); one that cannot be hashed
    gets its own entry.
    Read like a list: ``col[k]``, iteration, ``len``.
    """

    __slots__ = ("codes", "index", "labels")

    def __init__(
        self, labels: list[Any] | None = None, index: dict[Any, int] | None = None
    ) -> None:
        self.codes = array("I")
        self.labels: list[Any] = [] if labels is None else labels
        self.index: dict[Any, int] = {} if index is None else index

    def append(self, value: Any) -> None:
        """Append ``value`` (its code)."""
        try:
            key: Any = (type(value), value.hex() if type(value) is float else value)
            code = self.index.get(key)
        except TypeError:  # not hashable: an entry of its own
            key = code = None
        if code is None:
            code = len(self.labels)
            self.labels.append(value)
            if key is not None:
                self.index[key] = code
        self.codes.append(code)

    def extend(self, values: list[Any], share: Callable[[Any], Any] | None = None) -> None:
        """Append each of ``values``, as :meth:`append` does (``share``: a new value's copy).

        When every value is already known and none is a float, the codes are looked up in
        one pass; otherwise value by value.
        """
        types = list(map(type, values))
        if float not in types:
            try:
                found = list(map(self.index.get, zip(types, values, strict=True)))
            except TypeError:  # an unhashable value: value by value
                found = [None]
            if None not in found:
                self.codes.extend(found)  # type: ignore[arg-type]
                return
        for v in values:
            self.append(v if share is None else share(v))

    def take(self, indices: Indices) -> Coded:
        """The values at ``indices`` (the distinct values shared)."""
        out = Coded(self.labels, self.index)
        out.codes = _taken(self.codes, _index_array(indices))
        return out

    def __getitem__(self, k: int) -> Any:
        return self.labels[self.codes[k]]

    def __iter__(self) -> Iterator[Any]:
        labels = self.labels
        return (labels[c] for c in self.codes)

    def __len__(self) -> int:
        return len(self.codes)


class ItemTable:
    """``items.csv`` (analysis.md §2) as columns: what a study of 10^5-10^6 trials can hold.

    One entry per item row in each column list: ``of`` (an ``array('l')``) is the index of the
    row's trial in ``commons`` (that trial's (trial, arm, model, stimulus, variant, rep, order),
    one tuple shared by its rows); ``row``, ``position``, ``truth``, ``answer`` and ``correct``
    are :class:`Coded` columns (4 bytes a row); ``logprobs`` and ``margin`` are lists only
    in a cloze study (``None``: every row has none). ``truth_original`` and ``answer_original``
    are derived when read (variants.md §2/§5). The statistics read whole columns
    (:meth:`column`) and subsets (:meth:`where`, :meth:`take`); iterating or indexing gives
    :class:`ItemRow` views, built on demand.
    """

    __slots__ = (
        "answer",
        "commons",
        "correct",
        "logprobs",
        "margin",
        "of",
        "position",
        "row",
        "truth",
    )

    def __init__(self) -> None:
        self.commons: list[tuple[Any, ...]] = []
        self.of = array("l")
        self.row = Coded()
        self.position = Coded()
        self.truth = Coded()
        self.answer = Coded()
        self.correct = Coded()
        self.logprobs: list[Any] | None = None
        self.margin: list[Any] | None = None

    @classmethod
    def from_rows(cls, rows: Sequence[Any]) -> ItemTable:
        """A table of ``rows`` (dicts or :class:`ItemRow`), each read by column name."""
        table = cls()
        index: dict[tuple[Any, ...], int] = {}
        for r in rows:
            common = tuple(_shared(r.get(n)) for n in _COMMON)
            k = index.get(common)
            if k is None:
                k = index[common] = len(table.commons)
                table.commons.append(common)
            table.add(
                k,
                r.get("row"),
                r.get("position"),
                r.get("truth"),
                r.get("answer"),
                r.get("correct"),
            )
            table._extra(r.get("logprobs"), r.get("margin"))
        return table

    def add(
        self, trial: int, row: Any, position: Any, truth: Any, answer: Any, correct: Any
    ) -> None:
        """Append one row of trial ``trial`` (an index into ``commons``)."""
        self.of.append(trial)
        self.row.append(row)
        self.position.append(position)
        self.truth.append(_shared(truth))
        self.answer.append(_shared(answer))
        self.correct.append(correct)

    def _extra(self, logprobs: Any, margin: Any) -> None:
        """The last row's ``logprobs`` and ``margin`` (columns made on the first value)."""
        n = len(self.of)
        if logprobs is not None and self.logprobs is None:
            self.logprobs = [None] * n
        if margin is not None and self.margin is None:
            self.margin = [None] * n
        if self.logprobs is not None:
            self.logprobs[n - 1 :] = [logprobs]
        if self.margin is not None:
            self.margin[n - 1 :] = [margin]

    def __len__(self) -> int:
        return len(self.of)

    def __bool__(self) -> bool:
        return len(self.of) > 0

    def _view(self, k: int) -> ItemRow:
        return ItemRow(
            self.commons[self.of[k]],
            self.row[k],
            self.position[k],
            self.truth[k],
            self.answer[k],
            self.correct[k],
            None if self.logprobs is None else self.logprobs[k],
            None if self.margin is None else self.margin[k],
        )

    def __getitem__(self, k: int) -> ItemRow:
        if k < 0:
            k += len(self.of)
        if not 0 <= k < len(self.of):
            raise IndexError(k)
        return self._view(k)

    def __iter__(self) -> Iterator[ItemRow]:
        for k in range(len(self.of)):
            yield self._view(k)

    def column(self, name: str) -> list[Any]:
        """Every row's value of column ``name``, in row order."""
        k = _COMMON.get(name)
        if k is not None:
            commons = self.commons
            return [commons[t][k] for t in self.of]
        if name in ("logprobs", "margin"):
            values = getattr(self, name)
            return [None] * len(self.of) if values is None else list(values)
        if name in _OWN:
            return list(getattr(self, name))
        if name in ("truth_original", "answer_original"):
            orders = self.column("order")
            labels = self.truth if name == "truth_original" else self.answer
            return [_shared(_original(o, v)) for o, v in zip(orders, labels, strict=True)]
        raise KeyError(name)

    def take(self, indices: Indices) -> ItemTable:
        """The rows at ``indices``, in that order (the trials' tuples shared)."""
        out = ItemTable()
        out.commons = self.commons
        picked = _index_array(indices)  # one index array for every column
        out.of = _taken(self.of, picked)
        out.row = self.row.take(picked)
        out.position = self.position.take(picked)
        out.truth = self.truth.take(picked)
        out.answer = self.answer.take(picked)
        out.correct = self.correct.take(picked)
        if self.logprobs is not None or self.margin is not None:
            ks = picked.tolist()
            if self.logprobs is not None:
                out.logprobs = [self.logprobs[k] for k in ks]
            if self.margin is not None:
                out.margin = [self.margin[k] for k in ks]
        return out

    def trials_where(self, keep: Any) -> ItemTable:
        """The rows whose trial's tuple ``keep(common)`` accepts, in row order."""
        ok = np.fromiter((bool(keep(c)) for c in self.commons), bool, len(self.commons))
        return self.take(np.flatnonzero(ok[_int_view(self.of)]))

    def where(self, name: str, value: Any) -> ItemTable:
        """The rows whose trial column ``name`` (arm, model, stimulus, ...) equals ``value``."""
        k = _COMMON[name]
        return self.trials_where(lambda c: c[k] == value)

    def with_common(self, name: str, value: Any) -> ItemTable:
        """A copy in which every row's trial column ``name`` is ``value``."""
        k = _COMMON[name]
        out = self.take(range(len(self.of)))
        out.commons = [(*c[:k], value, *c[k + 1 :]) for c in self.commons]
        return out

    def tuples(self, columns: Sequence[str], per_chunk: int = 4096) -> Iterator[tuple[Any, ...]]:
        """Each row's values of ``columns``, read a chunk of rows at a time."""
        for start in range(0, len(self.of), per_chunk):
            part = self.take(range(start, min(start + per_chunk, len(self.of))))
            yield from zip(*(part.column(c) for c in columns), strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ItemTable):
            other = list(other)
        if isinstance(other, list):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ItemTable({len(self)} rows)"


def _add_items(table: ItemTable, common: tuple[Any, ...], items: list[dict[str, Any]]) -> None:
    """analysis.md §2: one trial's rows of ``items.csv``, appended to ``table``.

    ``common`` is the trial's (trial, arm, model, stimulus, variant, rep, order), shared by its
    rows.
    """
    trial = len(table.commons)
    table.commons.append(common)
    rows = [i.get("row") for i in items]  # a row that is not an object stops here
    positions = [i.get("position") for i in items]
    truths = [i.get("truth") for i in items]
    answers = [i.get("answer") for i in items]
    corrects = [i.get("correct") for i in items]
    margins = [i.get("margin") for i in items]
    listed = (
        table.logprobs is not None or table.margin is not None or margins.count(None) < len(items)
    )
    if not listed and True not in ["logprobs" in i for i in items]:
        table.of.extend([trial] * len(items))  # column by column: no logprobs, no margin
        table.row.extend(rows)
        table.position.extend(positions)
        table.truth.extend(truths, _shared)
        table.answer.extend(answers, _shared)
        table.correct.extend(corrects)
        return
    for i in items:
        table.add(
            trial,
            i.get("row"),
            i.get("position"),
            i.get("truth"),
            i.get("answer"),
            i.get("correct"),
        )
        table._extra(
            bytes(rfc8785.dumps(i["logprobs"])).decode("utf-8") if "logprobs" in i else None,
            i.get("margin"),
        )


def _trial_rows(
    archive: _Archive, event: _Event, reading: _Reading, table: ItemTable
) -> tuple[int, dict[str, Any], int]:
    """(response seq, the ``trials.csv`` row, its first row in ``table``) of one trial.scored.

    Its ``items.csv`` rows are appended to ``table``.
    """
    b = archive.at(event).body
    rq = _request_of(archive, event, b)
    trial_arm = reading.code_arm.get(b.get("arm_code", ""))
    if trial_arm is None or trial_arm != rq.get("arm"):
        raise _Problem(
            f"trial.scored seq {event.seq}: arm code {b.get('arm_code')} is not the code of "
            f"arm {rq.get('arm')} of trial {rq.get('trial')}",
            event.seq,
        )
    items = _scored_items(archive, event, reading.ddx)
    metrics = (b.get("ddx") or {}).get("metrics") if reading.ddx else None
    n_items = int(b["n_items"])
    common = {
        "trial": rq["trial"],
        "arm": trial_arm,
        "model": _shared(_trial_model(str(rq["trial"]))),
        "stimulus": _shared(rq["stimulus"]),
        "variant": _shared(str(rq.get("variant", ""))),
        "rep": int(rq["rep"]),
    }
    order = sys.intern(str(b.get("order", "")))
    row = {
        **common,
        "response_seq": b["response_seq"],
        "status": b["status"],
        "n_items": n_items,
        "n_answered": int(b["n_answered"]),
        "n_correct": int(b["n_correct"]),
        "accuracy": int(b["n_correct"]) / n_items if n_items else math.nan,
        "control": (
            reading.tumbling and len(items) == 1 and items[0].get("truth") == CONTROL_TRUTH
        ),
        "excluded": reading.exclude and b["status"] == "unparseable",
    }
    for name in _ddx.METRICS:  # scoring.md §12: None (undefined) is an empty cell
        value = (metrics or {}).get(name) if isinstance(metrics, dict) else None
        row[name] = math.nan if value is None else float(value)
    shared = (
        common["trial"],
        common["arm"],
        common["model"],
        common["stimulus"],
        common["variant"],
        common["rep"],
        order,
    )
    start = len(table)
    _add_items(table, shared, items)
    return int(b["response_seq"]), row, start


def _add_covariates(
    archive: _Archive, plan: dict[str, Any], rows: list[dict[str, Any]]
) -> list[str]:
    """analysis.md §11: each trial's item labels, from the step's responses; the names."""
    covariates = _covariate_names(plan)
    if not covariates:
        return covariates
    labels = _item_labels(archive, plan)
    for row in rows:
        decision = labels.get(str(row["stimulus"]))
        for name in covariates:
            value = decision.get(name) if isinstance(decision, dict) else None
            row[f"covariate.{name}"] = value if isinstance(value, bool) else None
    return covariates


def _add_factors(plan: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """analysis.md §2: a factorial study's ``factor.<NAME>`` columns; the names."""
    factorial = plan.get("factorial")
    factor_names = (
        [str(f) for f in factorial.get("factors") or []] if isinstance(factorial, dict) else []
    )
    arm_table = plan.get("arms") if isinstance(plan.get("arms"), dict) else {}
    for row in rows:
        info = arm_table.get(row["arm"]) if isinstance(arm_table, dict) else None
        cell = info.get("factors") if isinstance(info, dict) else None
        for f in factor_names:
            row[f"factor.{f}"] = str(cell.get(f, "")) if isinstance(cell, dict) else ""
    return factor_names


def _dataset(archive: _Archive, plan: dict[str, Any]) -> _Dataset:
    revealed = archive.first("blinding.revealed")
    sealed = archive.first("scoring.sealed")
    if revealed is None or sealed is None:
        raise _Problem("the dataset needs scoring.sealed and blinding.revealed events")
    arm_codes = _arm_codes(revealed)
    response = plan.get("response") or {}
    reading = _Reading(
        {code: arm for arm, code in arm_codes.items()},
        bool((plan.get("analysis") or {}).get("exclude_unparseable", True)),
        response.get("parser", TUMBLING_E) == TUMBLING_E,
        response.get("parser") == "ddx",
    )
    table = ItemTable()
    trials = [_trial_rows(archive, e, reading, table) for e in archive.of("trial.scored")]
    ends = [t[2] for t in trials[1:]] + [len(table)]
    order = sorted(range(len(trials)), key=lambda k: trials[k][0])
    if order != list(range(len(trials))):  # in response order, each trial's rows together
        table = table.take([j for k in order for j in range(trials[k][2], ends[k])])
    rows = [trials[k][1] for k in order]
    covariates = _add_covariates(archive, plan, rows)
    factor_names = _add_factors(plan, rows)
    given_up = [str(e.body.get("trial")) for e in archive.of("trial.failed") if e.body.get("final")]
    by_source = (plan.get("analysis") or {}).get("random_intercept") == "source"
    return _Dataset(
        rows,
        table,
        sorted(arm_codes),
        given_up,
        str(sealed.body.get("scores_sha256")),
        _sources(archive) if by_source else {},
        _plan_models(plan),
        variants=plan.get("variants") is not None,
        cloze=response.get("parser") == "cloze",
        ddx=reading.ddx,
        covariates=covariates,
        factors=factor_names,
        excluded_trials=sorted({str(e.body.get("trial")) for e in archive.of("trial.excluded")}),
    )


def _covariate_names(plan: dict[str, Any]) -> list[str]:
    """analysis.md §11: the declared labels, perturbable then indicators (else [])."""
    table = (plan.get("analysis") or {}).get("covariates")
    if not isinstance(table, dict):
        return []
    return [str(n) for key in ("perturbable", "indicators") for n in table.get(key) or []]


def _item_labels(archive: _Archive, plan: dict[str, Any]) -> dict[str, Any]:
    """analysis.md §11: the covariate step's decision per item, re-derived from its responses."""
    from verify._steps import item_decisions

    step = str(plan["analysis"]["covariates"].get("step"))
    rec = (plan.get("steps") or {}).get(step) or {}
    schema_path = rec.get("schema")
    raw = _locked_bytes(archive, schema_path) if isinstance(schema_path, str) else None
    if raw is None:
        raise _Problem(f"protocol.locked analysis.covariates: step {step!r} has no locked schema")
    kinds = ("step.requested", "step.responded", "step.failed")
    events = [
        (
            e.seq,
            e.kind,
            e.body,
            (lambda name, e=e: archive.event_blob(e, name) if name in e.blobs else None),
        )
        for e in archive.events
        if e.kind in kinds
    ]
    return item_decisions(plan, step, json.loads(raw), events)


def _original(order: str, label: Any) -> Any:
    """variants.md §2/§5: a label of a permuted trial mapped back (unchanged without order)."""
    if order and type(label) is str and len(label) == 1 and "A" <= label < chr(65 + len(order)):
        return back_to_original(order, label)
    return label


def _labels(plan: dict[str, Any]) -> tuple[str, ...] | None:
    """analysis.md §3: the answers the locked parser can give; None for free text."""
    response = plan.get("response") or {}
    parser = response.get("parser", TUMBLING_E)
    if parser in (TUMBLING_E, "orientation-word"):
        return ORIENTATIONS
    if parser == "yes-no-maybe":
        return ("yes", "no", "maybe")
    if parser in ("multiple-choice", "cloze"):
        return tuple(str(response.get("letters") or "ABCD"))
    return None


def _restrict(ds: _Dataset, keep: set[str]) -> _Dataset:
    return replace(
        ds,
        trials=[t for t in ds.trials if t["trial"] in keep],
        items=ds.items.trials_where(lambda c: c[0] in keep),
        given_up=[g for g in ds.given_up if g in keep],
        excluded_trials=[g for g in ds.excluded_trials if g in keep],
    )  # every other member (models, variants, cloze, ...) as the whole study's


def _metric_ds(ds: _Dataset, outcome: str) -> _Dataset:
    """analysis.md §9: ``ds`` with a ddx metric as each trial's accuracy; undefined: excluded."""
    rows = [
        {**t, "accuracy": t[outcome], "excluded": bool(t["excluded"]) or math.isnan(t[outcome])}
        for t in ds.trials
    ]
    return replace(ds, trials=rows)
