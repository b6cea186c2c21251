"""The pairings of two arms the contrast statistics are computed on (analysis.md §3).

Part of the science checks (:mod:`verify._science`); imports nothing from ``ledger``,
``runner`` or ``analysis``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from verify import _restats as st
from verify._recompute.dataset import ItemTable, _Dataset, _int_view
from verify._recompute.results import _mean


def _stimulus_pairs(ds: _Dataset, a: str, b: str) -> dict[str, tuple[float, float]]:
    """Per stimulus (sorted): (mean of a, mean of b) over the models.

    Each is the mean over the models of the (model, stimulus) cell means, on the cells where
    both arms have analysable trials (one model: the per-stimulus means).
    """
    acc: dict[tuple[str, str, str], list[float]] = {}
    for t in ds.analysable():
        key = (str(t["model"]), str(t["stimulus"]), str(t["arm"]))
        acc.setdefault(key, []).append(t["accuracy"])
    arms = {arm for _, _, arm in acc}
    if a not in arms or b not in arms:
        raise st.StatError(f"arms {a!r} and {b!r} need scored trials on common stimuli")
    cells: dict[str, list[tuple[float, float]]] = {}
    for model, stim in sorted({(m, s) for m, s, _ in acc}):
        if (model, stim, a) in acc and (model, stim, b) in acc:
            cells.setdefault(stim, []).append(
                (_mean(acc[(model, stim, a)]), _mean(acc[(model, stim, b)]))
            )
    if not cells:
        raise st.StatError(f"arms {a!r} and {b!r} share no stimulus")
    return {
        s: (_mean([x for x, _ in c]), _mean([y for _, y in c])) for s, c in sorted(cells.items())
    }


def _per_group_diff(ds: _Dataset, a: str, b: str) -> dict[str, float]:
    return {s: x - y for s, (x, y) in _stimulus_pairs(ds, a, b).items()}


def _pair_accuracies(ds: _Dataset, a: str, b: str) -> tuple[list[float], list[float]]:
    """Trial accuracies of a and b on the models both have analysable trials on (any, if none)."""
    t = ds.analysable()
    shared = {r["model"] for r in t if r["arm"] == a} & {r["model"] for r in t if r["arm"] == b}
    keep = [r for r in t if not shared or r["model"] in shared]
    return [r["accuracy"] for r in keep if r["arm"] == a], [
        r["accuracy"] for r in keep if r["arm"] == b
    ]


def _paired_t_means(ds: _Dataset, a: str, b: str) -> dict[str, Any] | None:
    pairs = _stimulus_pairs(ds, a, b)
    if len(pairs) < 2:
        return None
    return st.paired_t([x for x, _ in pairs.values()], [y for _, y in pairs.values()])


def _paired_items(ds: _Dataset, a: str, b: str) -> tuple[ItemTable, ItemTable]:
    """The analysable item rows of arms a and b paired by their place in the design.

    The place is (model, stimulus, variant, rep, row, position). Row ``k`` of the first table
    pairs with row ``k`` of the second: each of a's rows in order, with each of b's rows of its
    place in theirs (in their order). Places are compared as Python values (``1`` and ``1.0``
    are one place), each made one integer, so the pairing is a sort, not a dict of tuples.
    """
    items = ds.analysable_items()
    commons = items.commons
    of = _int_view(items.of)
    arm_of = [c[1] for c in commons]
    in_a = np.fromiter((x == a for x in arm_of), bool, len(arm_of))[of]
    in_b = np.fromiter((x == b for x in arm_of), bool, len(arm_of))[of]
    used = np.flatnonzero(in_a | in_b)
    if not len(used):
        return items.take(used), items.take(used)
    trials = of[used]
    places: dict[tuple[Any, ...], int] = {}
    place_of = np.fromiter(
        (places.setdefault((c[2], c[3], c[4], c[5]), len(places)) for c in commons),
        np.int64,
        len(commons),
    )
    key = place_of[trials]
    for column in (items.row, items.position):  # then the row, then the position
        codes = _int_view(column.codes)[used]
        present = np.unique(codes)
        same: dict[Any, int] = {}
        ids = np.zeros(len(column.labels), np.int64)
        ids[present] = [same.setdefault(column.labels[c], len(same)) for c in present.tolist()]
        _, key = np.unique(key * len(same) + ids[codes], return_inverse=True)
    key = key.reshape(-1)
    right = used[in_b[used]]
    right_keys = key[in_b[used]]
    order = np.argsort(right_keys, kind="stable")
    right, right_keys = right[order], right_keys[order]
    left_keys = key[in_a[used]]
    lo = np.searchsorted(right_keys, left_keys, "left")
    counts = np.searchsorted(right_keys, left_keys, "right") - lo
    left_rows = np.repeat(used[in_a[used]], counts)
    firsts = np.repeat(lo - (np.cumsum(counts) - counts), counts)
    right_rows = right[firsts + np.arange(len(left_rows))]
    return items.take(left_rows), items.take(right_rows)


def _answer(value: Any) -> str:
    return "(none)" if value is None else str(value)


def _wrong_counts(items: ItemTable, labels: tuple[str, ...]) -> list[int]:
    wrong = [a for a, ok in zip(items.answer, items.correct, strict=True) if not ok and a in labels]
    return [sum(1 for a in wrong if a == o) for o in labels]


def _id_parts(trial: str) -> tuple[str, str, int]:
    """(arm, stimulus, rep) of a trial id (randomization.md, variants.md §4).

    The id is ``arm|stimulus|rep``, ``arm|model|stimulus|rep`` or ``arm|model|item|variant|rep``.
    """
    parts = trial.split("|")
    stimulus = parts[1] if len(parts) == 3 else parts[2]
    return parts[0], stimulus, int(parts[-1])


Keyed = dict[str, dict[tuple[str, int], tuple[str, str, float]]]
"""Per arm: (stimulus, rep) -> (kind, trial id, accuracy) of its trial there."""


def _put(seen: Keyed, arm: str, key: tuple[str, int], entry: tuple[str, str, float]) -> None:
    if key in seen[arm]:
        raise st.StatError(f"pairing: arm {arm} has a key twice")
    seen[arm][key] = entry


def _keyed(ds: _Dataset, a: str, b: str) -> Keyed:
    """Every scheduled trial of a and b by (stimulus, rep): scored, given up or excluded."""
    controls = {str(t["stimulus"]) for t in ds.trials if t["control"]}
    stimuli = {str(t["stimulus"]) for t in ds.trials}
    seen: Keyed = {a: {}, b: {}}
    for t in ds.trials:
        if t["arm"] in seen and not t["control"]:
            kind = "unparseable" if t["excluded"] else "ok"
            entry = (kind, str(t["trial"]), float(t["accuracy"]))
            _put(seen, t["arm"], (str(t["stimulus"]), int(t["rep"])), entry)
    for kind, ids in (("given-up", ds.given_up), ("excluded", ds.excluded_trials)):
        for g in ids:
            arm, stimulus, rep = _id_parts(g)
            if arm in seen and stimulus in stimuli and stimulus not in controls:
                _put(seen, arm, (stimulus, rep), (kind, g, math.nan))
    return seen


def _pairs_by_trial(
    ds: _Dataset, a: str, b: str
) -> tuple[list[float], list[float], list[dict[str, Any]]]:
    """analysis.md §3, paired-t with pairing (stimulus, rep): complete pairs, the rest listed.

    A key with a trial in both arms pairs when both trials have a value; a key whose trial in
    either arm is unparseable-and-excluded, given up or a recorded exclusion is a dropped pair;
    a key one arm never had fails the test.
    """
    seen = _keyed(ds, a, b)
    if set(seen[a]) != set(seen[b]):
        raise st.StatError(
            "pairing (stimulus, rep) does not pair: a key was never scheduled in one arm"
        )
    xs: list[float] = []
    ys: list[float] = []
    dropped: list[dict[str, Any]] = []
    for key in sorted(seen[a]):
        ea, eb = seen[a][key], seen[b][key]
        if ea[0] == "ok" and eb[0] == "ok":
            xs.append(ea[2])
            ys.append(eb[2])
            continue
        excluded = [
            {"arm": arm, "kind": e[0], "trial": e[1]}
            for arm, e in ((a, ea), (b, eb))
            if e[0] != "ok"
        ]
        dropped.append({"stimulus": key[0], "rep": key[1], "excluded": excluded})
    return xs, ys, dropped
