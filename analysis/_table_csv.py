"""A DataFrame's columns as CSV text, each distinct cell formatted once (issue 41).

The dataset's ``trials.csv`` and ``items.csv`` (``docs/analysis.md`` §2) are the bytes
``csv.writer(lineterminator="\\n")`` writes for the rows of the chosen columns, each cell made
as :func:`cell` says: empty for None and NaN, a float as ``%.10g``, anything else as ``str``.
At 10^5 trials ``items.csv`` has 5.5 million rows of a few distinct cells per column (an arm,
a stimulus, a row number, an answer), so a column is factorized and each distinct value
formatted and quoted once, then the rows are joined: the same bytes as formatting and quoting
every cell, at a fraction of the cost. A value whose equality is not its text (an object
column that is not all strings) is formatted one by one.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import infer_dtype

__all__ = ["CSV_CHUNK", "cell", "frame_csv"]

CSV_CHUNK = 65_536
"""Rows per chunk (the cells of one chunk are held at once, then its text is encoded)."""


def cell(value: Any) -> str:
    """One value's CSV text before quoting: empty for None and NaN, ``%.10g``, else ``str``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.10g}"
    return value if isinstance(value, str) else str(value)


class _Quoter:
    """A field as ``csv.writer`` writes it among others (quoted when it must be)."""

    def __init__(self) -> None:
        self._text = io.StringIO()
        self._writer = csv.writer(self._text, lineterminator="\n")

    def __call__(self, text: str) -> str:
        if not text:
            return ""
        self._text.seek(0)
        self._text.truncate()
        self._writer.writerow((text, ""))  # a second field: a lone empty field is quoted
        return self._text.getvalue()[:-2]  # less the "," and "\n" of the empty field


def _column(values: pd.Series, quote: _Quoter) -> list[str]:
    """One column's CSV fields (formatted by :func:`cell`, quoted as ``csv.writer`` does)."""
    dtype = values.dtype
    if isinstance(dtype, pd.CategoricalDtype):  # missing (code -1): the last, empty field
        table = [quote(cell(v)) for v in values.cat.categories.tolist()] + [""]
        return list(np.array(table, dtype=object)[values.cat.codes.to_numpy()].tolist())
    if dtype.kind in "iub":  # integers and bools: equal values are equal texts
        codes, uniques = pd.factorize(values.to_numpy())
        table = [quote(cell(v)) for v in uniques.tolist()]
        return list(np.array(table, dtype=object)[codes].tolist())
    if dtype.kind == "f":  # by the bits: 0.0 and -0.0 print differently
        bits = np.ascontiguousarray(values.to_numpy(dtype=np.float64)).view(np.int64)
        codes, uniques = pd.factorize(bits)
        table = [quote(cell(v)) for v in uniques.view(np.float64).tolist()]
        return list(np.array(table, dtype=object)[codes].tolist())
    objects = values.to_numpy(dtype=object)
    missing = pd.isna(objects)
    present = objects[~missing]
    if infer_dtype(present, skipna=False) not in ("string", "empty"):
        return [quote(cell(v)) for v in objects.tolist()]  # mixed objects: one by one
    out = np.empty(len(objects), dtype=object)
    codes, uniques = pd.factorize(present)
    out[~missing] = np.array([quote(cell(v)) for v in uniques.tolist()], dtype=object)[codes]
    out[missing] = [quote(cell(v)) for v in objects[missing].tolist()]
    return list(out.tolist())


def frame_csv(df: pd.DataFrame, columns: Sequence[str]) -> bytes:
    """``df``'s ``columns`` as CSV: a header, then one line per row (``\\n`` line ends).

    The bytes of ``csv.writer(lineterminator="\\n")`` writing the header and each row's
    fields as :func:`cell` makes them, chunk by chunk (:data:`CSV_CHUNK` rows), so the memory
    held is one chunk's fields and text beside the bytes written.
    """
    out = io.BytesIO()
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(columns)
    out.write(text.getvalue().encode("utf-8"))
    if not columns:  # no fields: the header's empty line only, as the writer gives
        return out.getvalue()
    series = [df[name] for name in columns]
    quote = _Quoter()
    for start in range(0, len(df), CSV_CHUNK):
        chunk = [s.iloc[start : start + CSV_CHUNK] for s in series]
        if len(columns) == 1:  # a lone empty field is written quoted: the writer decides
            text.seek(0)
            text.truncate()
            writer.writerows((cell(v),) for v in chunk[0].tolist())
            out.write(text.getvalue().encode("utf-8"))
            continue
        fields = [_column(s, quote) for s in chunk]
        lines = "\n".join(map(",".join, zip(*fields, strict=True)))
        out.write(lines.encode("utf-8"))
        out.write(b"\n")
    return out.getvalue()
