"""Rows derived from the trial and score events, shared by the archive and :func:`analysis.load`.

``docs/archive-format.md`` §1 defines ``trials/schedule.csv``, ``trials/attempts.csv`` and
``scores/scores.csv`` as functions of the events. :mod:`analysis._export` writes those files from
the rows made here, and :func:`analysis.load` builds its DataFrames on the same rows, so a
notebook and the archive cannot disagree. Everything here takes events from either a study's
ledger or an archive (:mod:`runner._recorded`).
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from runner import RecordedEvent

SCHEDULE_COLUMNS = ("position", "arm_code", "stimulus", "rep", "trial")
MODEL_SCHEDULE_COLUMNS = ("position", "arm_code", "model", "stimulus", "rep", "trial")
"""``trials/schedule.csv`` of a study with ``[models]`` (trial ids ``arm|model|item|rep``)."""


VARIANT_SCHEDULE_COLUMNS = ("position", "arm_code", "model", "stimulus", "variant", "rep", "trial")
"""``trials/schedule.csv`` of a study with variants (trial ids ``arm|model|item|variant|rep``)."""


def split_trial(trial: str) -> tuple[str, str | None, str, str]:
    """(arm, model or None, stimulus, rep) of ``"{arm}|{stimulus}|{rep}"`` or the 4-part id.

    The five-part id of a study with variants (``arm|model|item|variant|rep``, an empty model
    part for a ``[model]`` study: ``docs/variants.md`` section 4) gives its arm, model, item
    and rep; :func:`trial_variant` gives its variant.
    """
    parts = trial.split("|")
    if len(parts) == 5:
        return parts[0], parts[1] or None, parts[2], parts[4]
    if len(parts) == 4:
        return parts[0], parts[1], parts[2], parts[3]
    arm, stimulus, rep = parts
    return arm, None, stimulus, rep


def trial_variant(trial: str) -> str | None:
    """The variant part of a five-part trial id, or None (``docs/variants.md`` section 4)."""
    parts = trial.split("|")
    return parts[3] if len(parts) == 5 else None


def schedule_columns(order: Sequence[str]) -> tuple[str, ...]:
    """The columns of ``trials/schedule.csv`` for a schedule (a model column with models).

    With variants, a model column (empty for a ``[model]`` study) and a variant column.
    """
    if order and order[0].count("|") == 4:
        return VARIANT_SCHEDULE_COLUMNS
    return MODEL_SCHEDULE_COLUMNS if order and order[0].count("|") == 3 else SCHEDULE_COLUMNS


ATTEMPT_COLUMNS = (
    "request_seq",
    "position",
    "trial",
    "attempt",
    "request_sha256",
    "outcome",
    "outcome_seq",
    "response_sha256",
    "error_type",
    "final",
)
SCORE_COLUMNS = (
    "scored_seq",
    "response_seq",
    "arm_code",
    "stimulus",
    "status",
    "n_items",
    "n_answered",
    "n_correct",
    "scores_sha256",
)


def schedule_ids(schedule_blob: bytes) -> list[str]:
    """The trial ids of the locked schedule, in execution order (the ``schedule`` blob)."""
    return schedule_blob.decode("utf-8").splitlines()


def schedule_rows(order: Sequence[str], arm_codes: Mapping[str, str]) -> list[tuple[Any, ...]]:
    """``trials/schedule.csv`` rows (:data:`SCHEDULE_COLUMNS`); codes empty before the reveal."""
    rows: list[tuple[Any, ...]] = []
    for position, trial in enumerate(order, 1):
        arm, model, stimulus, rep = split_trial(trial)
        variant = trial_variant(trial)
        if variant is not None:
            rows.append(
                (position, arm_codes.get(arm, ""), model or "", stimulus, variant, rep, trial)
            )
        elif model is None:
            rows.append((position, arm_codes.get(arm, ""), stimulus, rep, trial))
        else:
            rows.append((position, arm_codes.get(arm, ""), model, stimulus, rep, trial))
    return rows


@dataclass(frozen=True)
class Attempt:
    """One ``trial.requested`` event and the ``trial.responded`` or ``trial.failed`` closing it."""

    request: RecordedEvent
    outcome: RecordedEvent | None

    @property
    def outcome_kind(self) -> str:
        """``responded``, ``failed``, or ``none`` while no outcome is recorded."""
        return self.outcome.kind.split(".")[1] if self.outcome is not None else "none"

    @property
    def final(self) -> bool:
        """True when this attempt gave its trial a final outcome (``docs/trials.md`` §3)."""
        out = self.outcome
        if out is None:
            return False
        return out.kind == "trial.responded" or bool(out.body.get("final"))

    def row(self) -> tuple[Any, ...]:
        """The ``trials/attempts.csv`` row (:data:`ATTEMPT_COLUMNS`)."""
        b, out = self.request.body, self.outcome
        return (
            self.request.seq,
            b["position"],
            b["trial"],
            b["attempt"],
            b["request_sha256"],
            self.outcome_kind,
            out.seq if out else None,
            out.blobs.get("response") if out else None,
            out.body.get("error_type") if out and out.kind == "trial.failed" else None,
            self.final,
        )


def attempts(events: Iterable[RecordedEvent]) -> list[Attempt]:
    """Every attempt in request order, each with its outcome (the last recorded, if several)."""
    requests: list[RecordedEvent] = []
    outcomes: dict[int, RecordedEvent] = {}
    for event in events:
        if event.kind == "trial.requested":
            requests.append(event)
        elif event.kind in ("trial.responded", "trial.failed"):
            outcomes[event.body["request_seq"]] = event
    return [Attempt(r, outcomes.get(r.seq)) for r in requests]


def score_row(event: RecordedEvent) -> tuple[Any, ...]:
    """The ``scores/scores.csv`` row (:data:`SCORE_COLUMNS`) of one ``trial.scored`` event."""
    b = event.body
    return (
        event.seq,
        b["response_seq"],
        b["arm_code"],
        b["stimulus"],
        b["status"],
        b["n_items"],
        b["n_answered"],
        b["n_correct"],
        b["scores_sha256"],
    )


EXTEND_MEMO = 4096
"""How many value tuples a :class:`Column` remembers for :meth:`Column.extend` (each a few
hundred bytes: a trial's items)."""


class Column:
    """One column of a table built row by row, kept compact: a code per row, each value once.

    Values are stored once in a table (keyed by type and value, so ``True``, ``1`` and ``1.0``
    stay distinct; an unhashable value gets its own entry) and each row holds a 4-byte code,
    so a column of a few distinct values (an arm, a stimulus, an answer) costs 4 bytes a row
    instead of a pointer and an object. :meth:`objects` gives the values back as an object
    array holding the very objects appended (issue 41: the analysis dataset at 10^5 trials).
    """

    __slots__ = ("_codes", "_index", "_repeated", "_runs", "_values")

    def __init__(self) -> None:
        self._codes = array("i")
        self._index: dict[Any, int] = {}
        self._values: list[Any] = []
        self._repeated: npt.NDArray[np.int32] | None = None
        """The row codes of a column made by :meth:`repeated` (read-only), else None."""
        self._runs: dict[tuple[tuple[Any, ...], tuple[type, ...]], array[int]] = {}
        """Codes of value tuples :meth:`extend` was given, keyed by the values and their types."""

    def __len__(self) -> int:
        return len(self._codes) if self._repeated is None else len(self._repeated)

    def _rows(self) -> npt.NDArray[np.int32]:
        """Each row's code."""
        if self._repeated is not None:
            return self._repeated
        return np.frombuffer(self._codes, dtype=np.int32)

    def append(self, value: Any) -> None:
        """Add one row's value."""
        try:  # a str is its own key (no other type's key is a str); others keyed by type
            key = value if value.__class__ is str else (value.__class__, value)
            code = self._index.get(key)
            if code is None:
                code = self._index[key] = len(self._values)
                self._values.append(value)
        except TypeError:  # unhashable (a list, a dict): its own entry
            code = len(self._values)
            self._values.append(value)
        self._codes.append(code)

    def extend(self, values: tuple[Any, ...]) -> array[int]:
        """Add one row per value, in order: the codes :meth:`append` would give, one by one.

        A tuple of values given before (equal values of the same types: a stimulus's rows and
        truths repeat on each of its trials, a perfect trial's answers too) reuses the codes
        made the first time, so a trial's items cost one tuple look-up a column instead of an
        :meth:`append` an item (issue 41: the dataset of 10^5 trials has 5.5 million items).
        At most :data:`EXTEND_MEMO` tuples are remembered (then forgotten all at once).
        Returns the codes added (shared: for :meth:`extend_codes` of this column only).
        """
        key = (values, tuple(map(type, values)))
        try:
            codes = self._runs.get(key)
        except TypeError:  # an unhashable value (a list, a dict): appended one by one
            start = len(self._codes)
            for value in values:
                self.append(value)
            return self._codes[start:]
        if codes is not None:
            self._codes.extend(codes)
            return codes
        index = self._index
        try:  # every value seen before: their codes (the keys append uses)
            codes = array(
                "i", [index[v if v.__class__ is str else (v.__class__, v)] for v in values]
            )
            self._codes.extend(codes)
        except KeyError:  # a new value: one by one
            start = len(self._codes)
            for value in values:
                self.append(value)
            codes = self._codes[start:]
        if len(self._runs) >= EXTEND_MEMO:
            self._runs.clear()
        self._runs[key] = codes
        return codes

    def extend_codes(self, codes: array[int]) -> None:
        """Add rows by codes an :meth:`extend` of this very column returned (the same values)."""
        self._codes.extend(codes)

    def extend_code(self, other: Column, count: int) -> None:
        """Repeat ``other``'s last value ``count`` times (a trial's value on each of its items)."""
        self.extend_value(other._values[other._codes[-1]], count)

    def extend_value(self, value: Any, count: int) -> None:
        """Add ``count`` rows of one value."""
        if count <= 0:
            return
        self.append(value)
        if count > 1:
            self._codes.extend(array("i", [self._codes[-1]]) * (count - 1))

    def repeated(self, counts: npt.NDArray[np.intp]) -> Column:
        """A read-only column holding row ``i``'s value ``counts[i]`` times, in row order.

        What :meth:`extend_code` would build item by item (a trial's value on each of its
        items), made in one step when the frame is built, so the item table's trial-level
        columns cost nothing while the events are read (issue 41). The values are shared.
        """
        if len(counts) != len(self):
            raise ValueError(f"{len(counts)} counts for a column of {len(self)} rows")
        out = Column()
        out._values, out._index = self._values, self._index
        out._repeated = np.repeat(self._rows(), counts)
        return out

    def categorical(self) -> pd.Categorical | None:
        """The column as a categorical of its strings (None missing), else None.

        Categories are the distinct strings in sorted order (as ``pd.Categorical`` infers
        them); None when a value is neither a string nor None, or no value is a string.
        """
        raw = self._rows()
        used = np.bincount(raw, minlength=len(self._values)).astype(bool).tolist()
        present = [v for v, here in zip(self._values, used, strict=True) if here]
        if not all(v is None or v.__class__ is str for v in present):
            return None
        strings = sorted({v for v in present if v is not None})
        if not strings:
            return None
        rank = {v: i for i, v in enumerate(strings)}
        remap = np.array(  # a value no row has (of a repeated column) is never looked up
            [rank.get(v, -1) if v.__class__ is str else -1 for v in self._values], dtype=np.int32
        )
        return pd.Categorical.from_codes(remap[raw], categories=pd.Index(strings, dtype="str"))

    def typed(self) -> npt.NDArray[np.int64] | npt.NDArray[np.bool_] | None:
        """The column as ``int64`` or ``bool`` when pandas would infer that, without objects.

        ``int64`` when every value is an ``int`` within 64 bits, ``bool`` when every value is a
        ``bool``: the array pandas infers from :meth:`objects`. None for any other column
        (None, floats, strings, mixed types: :meth:`objects` then).
        """
        values = self._values
        if not values:
            return None
        if all(v.__class__ is bool for v in values):
            return np.array(values, dtype=np.bool_)[self._rows()]
        if not all(v.__class__ is int for v in values):
            return None
        try:
            table = np.array(values, dtype=np.int64)
        except OverflowError:  # beyond int64: pandas' inference decides (uint64 or object)
            return None
        return table[self._rows()]

    def objects(self) -> npt.NDArray[np.object_]:
        """The column as an object array of the appended values (shared, not copied)."""
        table = np.empty(len(self._values), dtype=object)
        for i, value in enumerate(self._values):
            table[i] = value
        return np.asarray(table[self._rows()], dtype=object)


def columns_frame(
    columns: Mapping[str, Column],
    names: Sequence[str],
    categorical: Collection[str] = (),
    *,
    release: bool = False,
    repeat: tuple[npt.NDArray[np.intp], Mapping[str, Column]] | None = None,
) -> pd.DataFrame:
    """The DataFrame ``pd.DataFrame(rows_as_dicts, columns=names)`` would build, from columns.

    The same per-column inference as pandas' records path (``convert_object_array`` on each
    column's object array: ints to ``int64``, floats with ``None`` to ``float64``, strings to
    ``str``), one column at a time, so no list of row dicts and no 2-D object array is held.
    A name without a column is all ``None``.

    A column named in ``categorical`` whose values are all strings (or None) becomes a
    ``category`` column instead of ``str`` (:meth:`Column.categorical`): the same values and
    missing cells, a small integer code a row instead of a pointer (issue 41: the item table).
    :func:`plain` turns it back into the ``str`` column.

    With ``release`` (``columns`` then a ``dict``), each column is taken out of ``columns`` as
    soon as it is converted, so its codes are freed while the next column is built and the
    peak is one column's conversion beside the frame, not every column twice (issue 41).

    ``repeat`` is ``(counts, {name: column})``: each such column's row ``i`` stands for
    ``counts[i]`` rows of the frame (:meth:`Column.repeated`), made only when it is converted.
    """
    from pandas.core.internals.construction import convert_object_array

    counts, repeated = repeat if repeat is not None else (None, {})
    sizes = [len(c) for c in columns.values()]
    if counts is not None:
        sizes.append(int(counts.sum()))
    n = max(sizes, default=0)
    if n == 0:
        return pd.DataFrame([], columns=list(names))
    data: dict[str, Any] = {}
    pool = columns if isinstance(columns, dict) and release else None
    if release and pool is None:
        raise TypeError("columns_frame(release=True) takes the columns as a dict")
    for name in names:
        column = pool.pop(name, None) if pool is not None else columns.get(name)
        if column is None and name in repeated:
            assert counts is not None
            column = repeated[name].repeated(counts)
        if column is None:
            objects = np.empty(n, dtype=object)
        else:
            if len(column) != n:
                raise ValueError(f"column {name!r} has {len(column)} rows, not {n}")
            if name in categorical:
                coded = column.categorical()
                if coded is not None:
                    data[name] = coded
                    continue
            typed = column.typed()
            if typed is not None:  # ints or bools: the array pandas would infer, made directly
                data[name] = typed
                continue
            objects = column.objects()
        del column
        data[name] = convert_object_array([objects], dtype=None)[0]
        del objects
    return pd.DataFrame(data, columns=list(names), copy=False)


def plain(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each ``category`` column as the column of its categories' dtype (``str``).

    For code that needs ``str`` semantics (``fillna`` with a new value, comparing two label
    columns): the values and missing cells are those of the column before it was coded.
    """
    coded = [name for name in frame.columns if isinstance(frame[name].dtype, pd.CategoricalDtype)]
    if not coded:
        return frame
    return frame.assign(
        **{str(name): frame[name].astype(frame[name].cat.categories.dtype) for name in coded}
    )
