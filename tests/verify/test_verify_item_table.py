"""The verifier's items table read by whole columns (issue 41): pairing, subsets and CSV bytes.

:func:`verify._recompute.pairs._paired_items` pairs two arms' item rows by a sort of one integer
per place; it is checked against the definition (analysis.md §3: each of a's rows in order, with
each of b's rows of the same (model, stimulus, variant, rep, row, position), compared as Python
values). ``items.csv`` written from the columns (each distinct value's text made once) is checked
byte for byte against ``csv.writer`` fed one row at a time, on values that need quoting.
"""

from __future__ import annotations

import csv
import io
import math
import random
from array import array
from typing import Any

import pytest

from verify._recompute.dataset import (
    ITEM_COLUMNS,
    VARIANT_ITEM_COLUMNS,
    Coded,
    ItemTable,
    _csv_chunks,
    _Dataset,
)
from verify._recompute.pairs import _paired_items

_AWKWARD = ["a,b", 'say "hi"', "two\nlines", "cr\rhere", "", None, math.nan, 1.5, 1e-30]
_AWKWARD += [True, False, 1, 1.0, 0, -0.0, "UP", "é", " lead", "x" * 70]


def _rows(seed: int) -> list[dict[str, Any]]:
    """Item rows of three arms whose places repeat, with ``1``, ``1.0`` and ``True`` mixed."""
    rng = random.Random(seed)
    rows = []
    for t in range(rng.randint(0, 50)):
        arm = rng.choice("ABC")
        common = {
            "trial": f"{arm}|s{t}|{t}",
            "arm": arm,
            "model": rng.choice(["", "m"]),
            "stimulus": f"s{rng.randint(0, 3)}",
            "variant": "",
            "rep": rng.randint(0, 2),
            "order": rng.choice(["", "BCA"]),
        }
        for _ in range(rng.randint(0, 6)):
            rows.append(
                common
                | {
                    "row": rng.choice([0, 1, True, 1.0, 2]),
                    "position": rng.choice([0, 1, 2, False]),
                    "truth": rng.choice(_AWKWARD),
                    "answer": rng.choice([*_AWKWARD, "A", "B"]),
                    "correct": rng.choice([True, False, None]),
                }
            )
    return rows


def _by_definition(items: ItemTable, a: str, b: str) -> tuple[list[int], list[int]]:
    """analysis.md §3's pairing, row by row with a dict of place tuples."""
    arm = [items.commons[t][1] for t in items.of]

    def place(k: int) -> tuple[Any, ...]:
        c = items.commons[items.of[k]]
        return (c[2], c[3], c[4], c[5], items.row[k], items.position[k])

    right: dict[tuple[Any, ...], list[int]] = {}
    for k in range(len(items)):
        if arm[k] == b:
            right.setdefault(place(k), []).append(k)
    pairs = [(k, j) for k in range(len(items)) if arm[k] == a for j in right.get(place(k), ())]
    return [k for k, _ in pairs], [j for _, j in pairs]


@pytest.mark.parametrize("seed", range(12))
def test_paired_items_are_the_pairs_of_the_definition(seed: int) -> None:
    rows = _rows(seed)
    trials = [{"trial": r["trial"], "control": False, "excluded": False} for r in rows]
    ds = _Dataset(trials, ItemTable.from_rows(rows), ["A", "B", "C"], [], "")
    items = ds.analysable_items()
    for a, b in (("A", "B"), ("B", "A"), ("A", "C"), ("A", "A")):
        left, right = _paired_items(ds, a, b)
        want_left, want_right = _by_definition(items, a, b)
        assert list(left) == [items[k] for k in want_left]
        assert list(right) == [items[k] for k in want_right]


def test_paired_items_refuse_a_place_that_cannot_be_compared() -> None:
    rows = _rows(3)
    rows[0] = rows[0] | {"row": [1, 2]}  # a list is no place: as a dict of tuples refuses it
    trials = [{"trial": r["trial"], "control": False, "excluded": False} for r in rows]
    ds = _Dataset(trials, ItemTable.from_rows(rows), ["A", "B", "C"], [], "")
    with pytest.raises(TypeError, match="unhashable"):
        _paired_items(ds, rows[0]["arm"], rows[0]["arm"])


def _written(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> bytes:
    """``csv.writer``'s bytes of the rows: empty for none and NaN, floats as ``.10g``."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        cells = []
        for v in (r[c] for c in columns):
            if v is None or (isinstance(v, float) and math.isnan(v)):
                cells.append("")
            else:
                cells.append(f"{v:.10g}" if isinstance(v, float) else v)
        writer.writerow(cells)
    return out.getvalue().encode("utf-8")


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("columns", [ITEM_COLUMNS, VARIANT_ITEM_COLUMNS])
def test_items_csv_from_the_columns_is_what_csv_writer_writes(
    seed: int, columns: tuple[str, ...]
) -> None:
    table = ItemTable.from_rows(_rows(seed))
    want = _written([r.as_dict() for r in table], columns)
    for per_chunk in (1, 3, 4096):
        assert b"".join(_csv_chunks(table, columns, per_chunk)) == want


def test_a_subset_of_the_table_reads_its_rows_and_refuses_rows_it_lacks() -> None:
    table = ItemTable.from_rows(_rows(5))
    n = len(table)
    assert n > 3
    picks = [n - 1, 0, 2, 2, -1]
    for indices in (picks, array("l", picks), range(n - 1, -1, -2)):
        assert list(table.take(indices)) == [table[k] for k in indices]
    assert len(table.take([])) == 0
    for bad in ([n], [-n - 1], array("l", [0, n + 5])):
        with pytest.raises(IndexError):
            table.take(bad)


def test_a_coded_column_extended_at_once_is_the_column_appended_one_by_one() -> None:
    batches: list[list[Any]] = [
        ["UP", "UP", 1],
        [True, 1, "UP"],
        [1.0, -0.0, 0.0],
        [[1], "UP"],
        ["LEFT", True],
    ]
    one, many = Coded(), Coded()
    for batch in batches:
        for v in batch:
            one.append(v)
        many.extend(batch)
    flat = [v for batch in batches for v in batch]
    assert list(many) == list(one) == flat
    assert [type(v) for v in many] == [type(v) for v in flat]
    assert math.copysign(1.0, many[7]) == -1.0
    assert list(many.codes) == list(one.codes) and len(many.labels) == len(one.labels)
