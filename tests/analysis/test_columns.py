"""analysis._rows.Column and columns_frame: the frame pandas' records path builds, compactly."""

from __future__ import annotations

import math
from typing import Any

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
