"""analysis._table_csv.frame_csv: the bytes csv.writer gives for every cell formatted alone."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import analysis._table_csv as table_csv
from analysis._table_csv import cell, frame_csv


def writer_csv(df: pd.DataFrame, columns: list[str]) -> bytes:
    """The reference: every row's cells formatted one by one and written by csv.writer."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(columns)
    for row in zip(*(df[name].tolist() for name in columns), strict=True):
        writer.writerow([cell(v) for v in row])
    return text.getvalue().encode("utf-8")


def hostile_frame() -> pd.DataFrame:
    """Every kind of column the datasets have, with the cells that need care."""
    labels = ["UP", None, 'say "hi"', "a,b", "line\nbreak", "", " lead", "UP", "ünï", "\r"]
    n = len(labels)
    return pd.DataFrame(
        {
            "str": pd.Series(labels, dtype="str"),
            "object": pd.Series(labels, dtype=object),
            "category": pd.Series(labels, dtype="category"),
            "int": np.arange(n, dtype=np.int64) - 3,
            "bool": [i % 3 == 0 for i in range(n)],
            "float": [0.1, -0.0, 0.0, math.nan, 1e-12, 2.5, 1 / 3, math.inf, -math.inf, 7.0],
            "mixed": [1, True, 1.0, None, "1", math.nan, [1], {"a": 1}, pd.NA, -0.0],
            "all_missing": pd.Series([None] * n, dtype=object),
        }
    )


@pytest.mark.parametrize("chunk", [1, 3, 65_536])
def test_frame_csv_is_the_writer_cell_by_cell(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(table_csv, "CSV_CHUNK", chunk)
    df = hostile_frame()
    columns = list(df.columns)
    assert frame_csv(df, columns) == writer_csv(df, columns)
    for name in columns:  # one column: a lone empty field is quoted
        assert frame_csv(df, [name]) == writer_csv(df, [name]), name
    assert frame_csv(df, ["float", "int", "float"]) == writer_csv(df, ["float", "int", "float"])
    assert frame_csv(df.iloc[:0], columns) == writer_csv(df.iloc[:0], columns)
    assert frame_csv(df, []) == writer_csv(df.iloc[:0], [])


def test_zero_and_minus_zero_and_nan_are_kept_apart() -> None:
    """Equal floats of other texts (0.0, -0.0) are not one cell; NaN is empty."""
    df = pd.DataFrame({"x": [0.0, -0.0, math.nan, 0.0], "y": ["a"] * 4})
    assert frame_csv(df, ["x", "y"]) == b"x,y\n0,a\n-0,a\n,a\n0,a\n"


cells = st.one_of(
    st.none(),
    st.text(alphabet=st.sampled_from(list("ab ,\"\n\r'x1")), max_size=4),
    st.integers(-3, 3),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(cells, st.text(max_size=3), st.floats(), st.integers()), max_size=12))
def test_any_rows_are_written_as_the_writer_writes_them(rows: list[tuple[Any, ...]]) -> None:
    df = pd.DataFrame(rows, columns=["a", "b", "c", "d"])
    columns = ["a", "b", "c", "d"]
    assert frame_csv(df, columns) == writer_csv(df, columns)
    coded = df.assign(b=df["b"].astype("category"))
    assert frame_csv(coded, columns) == writer_csv(coded, columns)
