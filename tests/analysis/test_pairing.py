"""analysis._analyze._paired_items: the six-key merge's frame, from one integer per item."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis._analyze import _PAIR_KEYS, Dataset, _pair_codes, _paired_items
from analysis._rows import plain

ARMS = ("A", "B")


def _dataset(seed: int, *, drop: float, duplicate: bool, missing_answer: bool) -> Dataset:
    """Two arms' items over stimuli x reps x (row, position), some dropped on either side."""
    rng = np.random.default_rng(seed)
    rows = []
    for arm in ARMS:
        for stimulus in ("s1", "s2", "s3"):
            for rep in (1, 2, 7):
                trial = f"{arm}|{stimulus}|{rep}"
                for row in (1, 2):
                    for position in (1, 2, 3):
                        if rng.random() < drop:
                            continue
                        answer = str(rng.choice(["UP", "DOWN", "LEFT"]))
                        rows.append(
                            {
                                "trial": trial,
                                "arm": arm,
                                "model": "",
                                "stimulus": stimulus,
                                "variant": "",
                                "rep": rep,
                                "row": row,
                                "position": position,
                                "truth": "UP",
                                "answer": None if missing_answer and rng.random() < 0.2 else answer,
                                "correct": bool(answer == "UP"),
                            }
                        )
    if duplicate:
        rows.append(dict(rows[-1]))  # one item twice: a many-to-one join
    items = pd.DataFrame(rows)
    for name in ("arm", "model", "stimulus", "variant", "truth", "answer"):
        items[name] = items[name].astype("category")
    trials = items.drop_duplicates("trial").loc[:, ["trial", "arm", "stimulus", "rep"]]
    trials = trials.assign(control=False, excluded=False).reset_index(drop=True)
    return Dataset(trials, items.reset_index(drop=True), ARMS, (), "0" * 64)


def _merged(ds: Dataset) -> pd.DataFrame:
    it = ds.items
    left = it[it["arm"] == "A"].loc[:, [*_PAIR_KEYS, "correct", "answer", "truth"]]
    right = it[it["arm"] == "B"].loc[:, [*_PAIR_KEYS, "correct", "answer"]]
    return plain(left.merge(right, on=_PAIR_KEYS, suffixes=("_a", "_b")))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("drop", [0.0, 0.3])
@pytest.mark.parametrize("duplicate", [False, True])
def test_paired_items_is_the_merge(seed: int, drop: float, duplicate: bool) -> None:
    ds = _dataset(seed, drop=drop, duplicate=duplicate, missing_answer=seed % 2 == 1)
    got = _paired_items(ds, "A", "B")
    pd.testing.assert_frame_equal(got, _merged(ds))
    assert not got.empty
    it = ds.items
    assert _pair_codes(it[it["arm"] == "A"], it[it["arm"] == "B"]) is not None  # no fallback


def test_pair_codes_are_equal_exactly_when_the_keys_are() -> None:
    ds = _dataset(3, drop=0.2, duplicate=False, missing_answer=False)
    it = ds.items
    left, right = it[it["arm"] == "A"], it[it["arm"] == "B"]
    codes = _pair_codes(left, right)
    assert codes is not None
    lk, rk = codes
    keys_l = list(left.loc[:, _PAIR_KEYS].itertuples(index=False))
    keys_r = list(right.loc[:, _PAIR_KEYS].itertuples(index=False))
    for i in range(0, len(keys_l), 3):
        for j in range(0, len(keys_r), 2):
            assert (lk[i] == rk[j]) == (keys_l[i] == keys_r[j])


def _assert_coded_pairs_as_merged(ds: Dataset, items: pd.DataFrame) -> None:
    """With ``items`` in place of ``ds``'s, the pairs go by 64-bit codes and equal the merge's."""
    other = Dataset(ds.trials, items, ARMS, (), "0" * 64)
    it = other.items
    assert _pair_codes(it[it["arm"] == "A"], it[it["arm"] == "B"]) is not None
    pd.testing.assert_frame_equal(_paired_items(other, "A", "B"), _merged(other))


@pytest.mark.parametrize("seed", range(4))
def test_float_keys_with_missing_numbers_pair_as_the_merge_pairs(seed: int) -> None:
    ds = _dataset(seed, drop=0.2, duplicate=False, missing_answer=False)
    rng = np.random.default_rng(seed)
    rows = ds.items["row"].to_numpy(dtype=float, copy=True)
    rows[rng.random(len(rows)) < 0.3] = np.nan  # items with no row number (as controls have)
    items = ds.items.assign(row=rows, position=ds.items["position"].astype(float))
    items = items.drop_duplicates([*_PAIR_KEYS, "arm"]).reset_index(drop=True)
    _assert_coded_pairs_as_merged(ds, items)


def test_float_keys_that_are_not_whole_numbers_pair_as_the_merge_pairs() -> None:
    ds = _dataset(5, drop=0.2, duplicate=False, missing_answer=False)
    rows = ds.items["row"].to_numpy(dtype=float, copy=True) / 4.0  # 0.25, 0.5
    rows[::7] = np.nan
    items = ds.items.assign(row=rows, position=ds.items["position"] * -1.5)
    _assert_coded_pairs_as_merged(ds, items)


def test_a_key_column_of_objects_is_left_to_the_merge() -> None:
    ds = _dataset(1, drop=0.1, duplicate=False, missing_answer=False)
    items = ds.items.assign(row=ds.items["row"].astype(object))
    it = items
    assert _pair_codes(it[it["arm"] == "A"], it[it["arm"] == "B"]) is None
    other = Dataset(ds.trials, items, ARMS, (), "0" * 64)
    pd.testing.assert_frame_equal(_paired_items(other, "A", "B"), _merged(other))
