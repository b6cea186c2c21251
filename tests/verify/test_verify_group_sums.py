"""The verifier's sufficient statistics of a random-intercept model (``verify/_restats.py``).

``docs/statistics.md`` ("Designs of many rows") defines ``l_R`` from per-group sums
(``n_j``, ``s_j``, ``t_j``) and ``XᵀX``, ``Xᵀy``, ``yᵀy``. The verifier's :class:`GroupSums`
is checked against the dense textbook formula (an ``n × n`` ``V``) and against the verifier's
other likelihood (:class:`verify._reml.RemlModel`); the exact-fit rule built on the same sums
is checked on an exact and a noisy outcome. The items table the statistics read by columns
(:class:`verify._recompute.dataset.ItemTable`) is checked against the rows it was made from.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from verify._recompute.dataset import Coded, ItemTable
from verify._reml import RemlModel
from verify._restats import GroupSums, _no_residual_variation


def _design(seed: int, groups: int = 5, per: int = 12) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Outcome, treatment-coded design (3 arms) and group labels of an unbalanced design."""
    rng = np.random.default_rng(seed)
    labels, arms = [], []
    for j in range(groups):
        for i in range(per + j):  # unbalanced: group j has per + j rows
            labels.append(f"g{j}")
            arms.append(i % 3)
    arm = np.asarray(arms)
    x = np.column_stack([np.ones(arm.size), arm == 1, arm == 2]).astype(np.float64)
    grp = np.asarray(labels)
    u = rng.normal(0.0, 0.7, groups)[[int(g[1:]) for g in labels]]
    y = x @ np.array([0.5, 0.3, -0.2]) + u + rng.normal(0.0, 1.0, arm.size)
    return y, x, grp


def _dense_loglik(y: np.ndarray, x: np.ndarray, grp: np.ndarray, g: float, e: float) -> float:
    """``-½[log|V| + log|XᵀV⁻¹X| + yᵀPy]`` with ``V = e·I + g·ZZᵀ`` built whole."""
    same = (grp[:, None] == grp[None, :]).astype(np.float64)
    v = e * np.eye(y.size) + g * same
    vinv = np.linalg.inv(v)
    xvx = x.T @ vinv @ x
    p = vinv - vinv @ x @ np.linalg.solve(xvx, x.T @ vinv)
    return -0.5 * (np.linalg.slogdet(v)[1] + np.linalg.slogdet(xvx)[1] + float(y @ p @ y))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_group_sums_give_the_dense_reml_likelihood(seed: int) -> None:
    y, x, grp = _design(seed)
    sums = GroupSums.of(y, x, grp)
    for g, e in ((0.4, 1.1), (0.0, 0.9), (2.5, 0.3), (1e-4, 1.0)):
        dense = _dense_loglik(y, x, grp, g, e)
        assert sums.loglik(g, e) == pytest.approx(dense, rel=1e-10, abs=1e-9)


def test_group_sums_agree_with_the_verifiers_other_likelihood() -> None:
    y, x, grp = _design(7, groups=9)
    sums = GroupSums.of(y - y.mean(), x, grp)
    model = RemlModel(y, x, grp.tolist(), [grp.tolist()])
    points = [(0.4, 1.1), (1.7, 0.6), (0.05, 1.3)]
    mine = [sums.loglik(g, e) for g, e in points]
    other = [model.loglik(np.array([g, e])) for g, e in points]
    # the same function up to its constant: differences between points agree
    for k in (1, 2):
        assert mine[k] - mine[0] == pytest.approx(other[k] - other[0], rel=1e-9, abs=1e-9)


def test_group_sums_are_the_per_group_sums() -> None:
    y, x, grp = _design(4)
    sums = GroupSums.of(y, x, grp)
    for j, label in enumerate(sorted(set(grp.tolist()))):
        rows = grp == label
        assert sums.n[j] == rows.sum()
        assert np.allclose(sums.s[j], x[rows].sum(axis=0), rtol=1e-13)
        assert math.isclose(sums.t[j], float(y[rows].sum()), rel_tol=1e-13)
    assert np.allclose(sums.xx, x.T @ x) and np.allclose(sums.xy, x.T @ y)


def test_exact_fit_is_found_from_the_group_means() -> None:
    y, x, grp = _design(5)
    offsets = {label: 0.37 * k for k, label in enumerate(sorted(set(grp.tolist())))}
    exact = x @ np.array([0.5, 0.25, -0.125]) + np.array([offsets[g] for g in grp])
    assert _no_residual_variation(exact, x, grp)
    assert not _no_residual_variation(y, x, grp)


def test_item_table_reads_back_its_rows_by_column() -> None:
    rows = [
        {
            "trial": f"A|s{k % 3}|{k}",
            "arm": "AB"[k % 2],
            "model": "",
            "stimulus": f"s{k % 3}",
            "variant": "",
            "rep": k,
            "order": "",
            "row": k % 4,
            "position": k % 5,
            "truth": "UP",
            "answer": None if k % 7 == 0 else "LEFT",
            "correct": k % 3 == 0,
        }
        for k in range(40)
    ]
    table = ItemTable.from_rows(rows)
    assert len(table) == 40
    for name in ("trial", "arm", "stimulus", "rep", "row", "position", "answer", "correct"):
        assert table.column(name) == [r[name] for r in rows]
    assert table.column("truth_original") == ["UP"] * 40
    b_rows = table.where("arm", "B")
    assert b_rows.column("rep") == [r["rep"] for r in rows if r["arm"] == "B"]
    assert [r["answer"] for r in b_rows] == [r["answer"] for r in rows if r["arm"] == "B"]
    moved = table.with_common("model", "m1")
    assert set(moved.column("model")) == {"m1"} and table.column("model") == [""] * 40
    chunked = list(table.tuples(("rep", "answer"), per_chunk=7))
    assert chunked == [(r["rep"], r["answer"]) for r in rows]


def test_a_coded_column_gives_back_every_value_as_it_was() -> None:
    values = [True, 1, 1.0, -0.0, 0.0, None, "UP", "UP", [1, 2], False, 0]
    column = Coded()
    for v in values:
        column.append(v)
    back = list(column)
    assert back == values
    assert [type(v) for v in back] == [type(v) for v in values]
    assert math.copysign(1.0, back[3]) == -1.0 and math.copysign(1.0, back[4]) == 1.0
    assert len(column.labels) == len(values) - 1  # "UP" twice is one value
    assert list(column.take([6, 0, 9])) == ["UP", True, False]
