"""analysis._rows.Column and columns_frame: the frame pandas' records path builds, compactly."""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd
import pytest

from analysis._rows import Column, columns_frame, plain

ROWS: list[dict[str, Any]] = [
    {"s": "UP", "i": 1, "f": 0.5, "b": True, "o": None, "m": None, "l": [1, 2], "n": 3},
    {"s": None, "i": 2, "f": None, "b": False, "o": None, "m": "x", "l": None, "n": None},
    {"s": "UP", "i": 1, "f": math.nan, "b": True, "o": None, "m": 1, "l": [1, 2], "n": 4},
    {"s": "1", "i": True, "f": 1.0, "b": 1, "o": None, "m": 1.0, "l": {"a": 1}, "n": 5},
]
NAMES = ["s", "i", "f", "b", "o", "m", "l", "n"]


def _columns(rows: list[dict[str, Any]]) -> dict[str, Column]:
    columns = {name: Column() for name in NAMES}
    for row in rows:
        for name in NAMES:
            columns[name].append(row[name])
    return columns


@pytest.mark.parametrize("count", [0, 1, 2, 4])
def test_columns_frame_is_the_records_frame(count: int) -> None:
    rows = ROWS[:count]
    expected = pd.DataFrame(rows, columns=NAMES)
    got = columns_frame(_columns(rows), NAMES)
    pd.testing.assert_frame_equal(got, expected)
    assert list(got.dtypes) == list(expected.dtypes)


def test_a_column_gives_back_each_value_with_its_type() -> None:
    values: list[Any] = ["1", 1, True, 1.0, None, "1", [1], (1,), "True", False, 0, 0.0]
    column = Column()
    for value in values:
        column.append(value)
    got = list(column.objects())
    assert [type(v) for v in got] == [type(v) for v in values]
    assert got == values
    assert len(column) == len(values)


def test_repeated_values_extend_a_column() -> None:
    trial, item = Column(), Column()
    for name, count in (("t1", 3), ("t2", 0), ("t3", 2)):
        trial.append(name)
        item.extend_code(trial, count)
    item.extend_value(7, 2)
    assert list(item.objects()) == ["t1", "t1", "t1", "t3", "t3", 7, 7]


def test_columns_of_unequal_length_are_refused() -> None:
    a, b = Column(), Column()
    a.append(1)
    a.append(2)
    b.append(1)
    with pytest.raises(ValueError, match="column 'b' has 1 rows, not 2"):
        columns_frame({"a": a, "b": b}, ["a", "b"])


@pytest.mark.parametrize("count", [1, 2, 4])
def test_categorical_columns_are_the_str_columns_coded(count: int) -> None:
    rows = [*ROWS[:count], {**ROWS[0], "s": "DOWN"}, {**ROWS[0], "s": "LEFT"}]
    expected = pd.DataFrame(rows, columns=NAMES)
    got = columns_frame(_columns(rows), NAMES, categorical=("s", "m", "o", "i"))
    # coded exactly where pandas infers str ("m" mixes types but for 2 rows, "o" is all
    # None, "i" is numbers); every other column as pandas builds it
    for name in NAMES:
        if name in ("s", "m", "o", "i") and str(expected[name].dtype) == "str":
            assert isinstance(got[name].dtype, pd.CategoricalDtype), name
        else:
            assert got[name].dtype == expected[name].dtype, name
    assert list(got["s"].cat.categories) == sorted({r["s"] for r in rows if r["s"] is not None})
    pd.testing.assert_frame_equal(plain(got), expected)
    assert got["s"].isna().tolist() == expected["s"].isna().tolist()
    assert plain(expected) is expected  # nothing coded: the frame itself


def test_a_repeated_column_is_the_column_extended_item_by_item() -> None:
    """Column.repeated(counts) gives what extend_code builds; a value no row has is no category."""
    import numpy as np

    trial, extended = Column(), Column()
    counts = [2, 0, 3, 1]
    for name, count in zip(["t1", "only-empty", "t2", "t1"], counts, strict=True):
        trial.append(name)
        extended.extend_code(trial, count)
    repeated = trial.repeated(np.array(counts, dtype=np.intp))
    assert len(repeated) == len(extended) == sum(counts)
    assert list(repeated.objects()) == list(extended.objects())
    coded, expected = repeated.categorical(), extended.categorical()
    assert coded is not None and expected is not None
    assert list(coded.categories) == list(expected.categories) == ["t1", "t2"]
    assert list(coded) == list(expected)
    with pytest.raises(ValueError, match="3 counts for a column of 4 rows"):
        trial.repeated(np.array([1, 1, 1], dtype=np.intp))


def test_columns_frame_releases_and_repeats_columns() -> None:
    """release=True empties the dict as it converts; repeat builds the repeated columns."""
    import numpy as np

    rows = ROWS[:4]
    columns = _columns(rows)
    got = columns_frame(columns, NAMES, release=True)
    assert columns == {}
    pd.testing.assert_frame_equal(got, pd.DataFrame(rows, columns=NAMES))
    with pytest.raises(TypeError, match="takes the columns as a dict"):
        columns_frame(MappingProxyType(_columns(rows)), NAMES, release=True)
    trial, item = Column(), Column()
    for name, count in (("a", 2), ("b", 1)):
        trial.append(name)
        for k in range(count):
            item.append(k)
    frame = columns_frame(
        {"item": item},
        ["trial", "item"],
        categorical=("trial",),
        release=True,
        repeat=(np.array([2, 1], dtype=np.intp), {"trial": trial}),
    )
    assert list(frame["trial"].astype(str)) == ["a", "a", "b"]
    assert isinstance(frame["trial"].dtype, pd.CategoricalDtype)
    assert list(frame["item"]) == [0, 1, 0]


def test_extend_is_append_one_by_one_with_types_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Column.extend gives the codes and values append gives, tuple after tuple.

    Equal tuples of other types (True and 1, 1 and 1.0) are not confused by the remembered
    codes, unhashable values are appended one by one, and a full memory is forgotten.
    """
    import analysis._rows as rows_module

    monkeypatch.setattr(rows_module, "EXTEND_MEMO", 3)
    runs: list[tuple[Any, ...]] = [
        ("UP", "DOWN", "UP"),
        (1, 0, 1),
        (True, False, True),
        (1.0, 0.0, 1.0),
        ("UP", "DOWN", "UP"),
        (None, "UP"),
        ([1], {"a": 1}),
        ((1, 2), "x"),
        (True, False, True),
        ("LEFT",),
        ("UP", "DOWN", "UP"),
        (),
    ]
    extended, appended = Column(), Column()
    for run in runs:
        codes = extended.extend(run)
        for value in run:
            appended.append(value)
        assert len(codes) == len(run)
        assert len(extended) == len(appended)
    got, expected = list(extended.objects()), list(appended.objects())
    assert got == expected
    assert [type(v) for v in got] == [type(v) for v in expected]
    assert len(extended._runs) <= 3


def test_extend_codes_repeat_an_extend() -> None:
    """The codes extend returns, given back by extend_codes, add the same values again."""
    column = Column()
    codes = column.extend(("a", 1, True))
    column.extend_codes(codes)
    assert list(column.objects()) == ["a", 1, True, "a", 1, True]
    assert [type(v) for v in column.objects()] == [str, int, bool] * 2


@pytest.mark.parametrize(
    "values",
    [
        [1, 2, 2, -5],
        [True, False, True],
        [2**63 - 1, 0],
        [2**63, 1],  # beyond int64: pandas decides (uint64)
        [-(2**63) - 1, 1],  # below int64: object
        [1, True],  # mixed: object
        [1, 2.5],
        [1, None],
        ["a", "b"],
    ],
)
def test_typed_columns_are_what_pandas_infers(values: list[Any]) -> None:
    """columns_frame's direct int64 and bool arrays equal pandas' inference from the objects."""
    column = Column()
    for value in values:
        column.append(value)
    expected = pd.DataFrame({"x": values})
    got = columns_frame({"x": column}, ["x"])
    pd.testing.assert_frame_equal(got, expected)
    assert got["x"].dtype == expected["x"].dtype
    typed = column.typed()
    if typed is not None:
        assert typed.dtype in (np.int64, np.bool_)
        assert typed.tolist() == values


@pytest.mark.parametrize(
    "values",
    [
        pd.Series(pd.Categorical(["s1", None, "s2", "nan", "s1"])),
        pd.Series(pd.Categorical([1, 2, None, 1])),
        pd.Series(pd.Categorical([None, None], categories=[])),
        pd.Series(["s1", None, "s2"], dtype="str"),
        pd.Series([1, 2, 3]),
    ],
)
def test_str_in_is_astype_str_isin(values: pd.Series) -> None:
    """Issue 41: a category column is tested by its categories, with astype(str).isin's answer."""
    from analysis._analyze import _str_in

    for keep in ({"s1"}, {"1", "s2"}, {"nan"}, set()):
        expected = values.astype(str).isin(keep).to_numpy()
        assert _str_in(values, keep).tolist() == expected.tolist(), keep
