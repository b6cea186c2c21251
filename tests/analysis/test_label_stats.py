"""The label statistics counted by array (issue 41) equal the item-by-item loops they replace.

Each reference below is the loop the writer ran before (kept here as the definition): the
counts, shares and float sums must be the same numbers, bit for bit, and the errors the same.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis import _stats as stats

VOCAB = ("UP", "RIGHT", "DOWN", "LEFT")


def ref_null(truth: Sequence[Hashable], labels: Sequence[str]) -> list[float]:
    labs = [str(lb) for lb in labels]
    k = len(labs)
    weights = np.zeros(k)
    for t in truth:
        if str(t) in labs:
            row = np.full(k, 1.0 / (k - 1))
            row[labs.index(str(t))] = 0.0
        else:
            row = np.full(k, 1.0 / k)
        weights += row
    return [float(w) for w in weights / len(truth)]


def ref_confusion(truth: list[Any], pred: list[Any], labels: Sequence[str]) -> dict[str, Any]:
    names = [str(label) for label in labels]
    t, p = [str(v) for v in truth], [str(v) for v in pred]
    index = {label: i for i, label in enumerate(names)}
    k = len(names)
    matrix = np.zeros((k, k), dtype=np.int64)
    other = np.zeros(k, dtype=np.int64)
    for true_label, pred_label in zip(t, p, strict=True):
        if true_label not in index:
            raise stats.StatsError(f"truth: label {true_label!r} is not in labels {names}")
        if pred_label in index:
            matrix[index[true_label], index[pred_label]] += 1
        else:
            other[index[true_label]] += 1
    return {"counts": matrix.tolist(), "other": other.tolist(), "n": len(t)}


def ref_position(pred: list[Any], truth: list[Any], labels: Sequence[str]) -> tuple[Any, ...]:
    names = [str(label) for label in labels]
    t, p = [str(v) for v in truth], [str(v) for v in pred]
    n = len(t)
    for label in t:
        if label not in names:
            raise stats.StatsError(f"truth: label {label!r} is not in labels {names}")
    p_pred = [sum(1 for v in p if v == name) / n for name in names]
    p_truth = [sum(1 for v in t if v == name) / n for name in names]
    p_other = sum(1 for v in p if v not in names) / n
    return tuple(p_pred), tuple(p_truth), p_other


labels_drawn = st.lists(
    st.one_of(st.sampled_from([*VOCAB, "other", None]), st.integers(0, 2)), min_size=1, max_size=40
)


@settings(max_examples=50, deadline=None)
@given(labels_drawn, st.data())
def test_counts_and_shares_are_the_loops(truth: list[Any], data: st.DataObject) -> None:
    pred = data.draw(
        st.lists(st.sampled_from([*VOCAB, "(none)", 1]), min_size=len(truth), max_size=len(truth))
    )
    in_vocab = [t if str(t) in VOCAB else "UP" for t in truth]
    got = stats.confusion_matrix(in_vocab, pred, VOCAB)
    ref = ref_confusion(in_vocab, pred, VOCAB)
    assert [list(r) for r in got.counts] == ref["counts"]
    assert list(got.other) == ref["other"] and got.n == ref["n"]
    bias = stats.position_bias_tvd(pred, in_vocab, VOCAB)
    assert (bias.p_pred, bias.p_truth, bias.p_other) == ref_position(pred, in_vocab, VOCAB)
    share = stats.canonical_share(in_vocab, pred)
    errors = [p for t, p in zip(in_vocab, pred, strict=True) if str(t) != str(p)]
    assert (share.count, share.n) == (sum(1 for p in errors if str(p) == "RIGHT"), len(errors))
    flips = stats.flip_rate(truth, pred)
    assert flips.count == sum(1 for a, b in zip(truth, pred, strict=True) if str(a) != str(b))
    assert stats.error_null_excluding_truth(truth, VOCAB) == ref_null(truth, VOCAB)
    assert stats.error_null_excluding_truth(truth, [*VOCAB, "UP"]) == ref_null(
        truth, [*VOCAB, "UP"]
    )


def test_the_null_shares_are_added_in_order_not_multiplied() -> None:
    """777,777 thirds added one by one are not 777,777 / 3: the loop's sum is the one kept."""
    truth = ["UP"] * 777_777
    got = stats.error_null_excluding_truth(truth, ["UP", "DOWN", "LEFT", "RIGHT"])
    total = 0.0
    for _ in range(777_777):
        total += 1.0 / 3
    assert got[1] == total / 777_777
    assert total != 777_777 / 3  # the product differs in its last bits
    assert got[0] == 0.0 and math.isclose(sum(got), 1.0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: stats.confusion_matrix(["UP", "x", "y"], ["UP"] * 3, VOCAB), "label 'x' is not"),
        (lambda: stats.position_bias_tvd(["UP"] * 2, ["UP", 3], VOCAB), "label '3' is not"),
        (lambda: stats.confusion_matrix(["UP"], ["UP", "UP"], VOCAB), "lengths differ"),
        (lambda: stats.confusion_matrix([], [], VOCAB), "no items"),
        (lambda: stats.flip_rate(["a"], ["a", "b"]), "equal lengths"),
        (lambda: stats.flip_rate([], []), "no paired items"),
        (lambda: stats.canonical_share("UP", "UP"), "expected a sequence"),
    ],
)
def test_errors_are_the_loops(call: Any, message: str) -> None:
    with pytest.raises(stats.StatsError, match=message):
        call()
