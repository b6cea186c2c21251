"""Seed 002's multiple-choice statistics over a long-format table of scored trials (no I/O).

The input is one row per scored trial (``docs/mcq-statistics.md`` gives every column and rule);
:func:`check_trials` validates it once and returns a :class:`Trials` table, which every other
function takes (a plain DataFrame is checked on each call). Conditions are
``(arm, variant, model)`` cells (:class:`Condition`); trials of two conditions are paired by
``(item, rep)``. Results are frozen dataclasses with ``as_dict()`` as in :mod:`analysis._stats`;
inputs a statistic cannot be computed on raise :class:`McqError` (a :class:`StatsError`) with a
message naming the column, trial, item or variant at fault. Aggregations (permutation voting,
self-consistency) name the trials each aggregated answer came from and record every group they
leave out as an :class:`Exclusion` (or raise, as the caller declares). ``docs/mcq-statistics.md``,
not this module, is the contract that ``verify/_mcq.py`` re-implements.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import numpy as np
import numpy.typing as npt
import pandas as pd

from analysis._deferred import DeferredModule
from analysis._stats import (
    EXACT_THRESHOLD,
    McNemarResult,
    NotApplicableError,
    StatsError,
    _Result,
    bonferroni,
    bootstrap_clustered,
    holm,
    mcnemar,
    wilson,
)

__all__ = [
    "EXACT_THRESHOLD",
    "LETTERS",
    "ORIGINAL",
    "REQUIRED_COLUMNS",
    "AbstentionResult",
    "AggregatedAnswer",
    "CellAccuracy",
    "ClozeResult",
    "Condition",
    "ConsistencyResult",
    "Exclusion",
    "FlipRateResult",
    "GeeFit",
    "GeeNotFittable",
    "GeeTerm",
    "McNemarFamily",
    "McqError",
    "OrderAccuracy",
    "PairedMcNemar",
    "PerPositionAccuracy",
    "PositionResult",
    "ReviewCase",
    "ReviewSample",
    "SeedSummary",
    "SelfConsistencyResult",
    "Trials",
    "VoteResult",
    "accuracy_by_cell",
    "check_trials",
    "ckld",
    "cloze",
    "flip_rate_between",
    "gee_arm_effects",
    "mcnemar_family",
    "mean_over_seeds",
    "ordering_consistency",
    "paired_mcnemar",
    "permutation_vote",
    "position_bias_from_shares",
    "position_metrics",
    "review_sample",
    "rstd",
    "self_consistency",
]

sps = DeferredModule("scipy.stats")  # imported on first use (analysis._deferred)

#: The option letters of a four-option item (the default label set).
LETTERS: tuple[str, ...] = ("A", "B", "C", "D")
#: The variant name of an item as written (no transformation).
ORIGINAL = "original"
#: Columns every trials table has (``response`` and ``logprob_<letter>`` are optional).
REQUIRED_COLUMNS: tuple[str, ...] = (
    "trial",
    "item",
    "arm",
    "model",
    "variant",
    "rep",
    "key",
    "key_original",
    "letter",
    "answer",
    "correct",
    "parse",
)
#: The parse status of a trial whose letter was read.
PARSED = "ok"

Basis = Literal["answer", "letter"]
Incomplete = Literal["exclude", "error"]


class McqError(StatsError):
    """A trials table or a request a multiple-choice statistic cannot be computed on."""


class GeeNotFittable(McqError, NotApplicableError):
    """A logistic GEE the data cannot fit, by the rule of ``docs/mcq-statistics.md`` §8.

    ``column`` names the design column at fault (``"arm"``, ``"model"`` or ``"variant"``; none
    for a constant outcome or the intercept), so a declared ``fallback = "drop-factor"`` can
    refit without a factor.
    """

    def __init__(self, message: str, column: str | None) -> None:
        super().__init__(message)
        self.column = column


GEE_DEGENERATE_RATIO = 1e-8
"""A GEE coefficient whose robust variance is at most this times its model-based variance is
degenerate (``docs/mcq-statistics.md`` §8)."""


@dataclass(frozen=True)
class Condition(_Result):
    """One cell of the design: an arm, a variant and a model."""

    arm: str
    variant: str
    model: str

    @property
    def label(self) -> str:
        """``arm/variant/model``."""
        return f"{self.arm}/{self.variant}/{self.model}"


CondLike = Condition | tuple[str, str, str]


def _cond(value: CondLike) -> Condition:
    if isinstance(value, Condition):
        return value
    if isinstance(value, tuple) and len(value) == 3:
        return Condition(str(value[0]), str(value[1]), str(value[2]))
    raise McqError(f"condition: expected (arm, variant, model), got {value!r}")


# --------------------------------------------------------------------------------------------
# the table


def _null(series: pd.Series) -> npt.NDArray[np.bool_]:
    return np.asarray(series.isna().to_numpy(), dtype=bool)


def _first_bad(frame: pd.DataFrame, mask: npt.NDArray[np.bool_]) -> str:
    row = frame.loc[mask].iloc[0]
    return f"trial {row['trial']!r} (item {row['item']!r}, variant {row['variant']!r})"


def check_trials(trials: TrialsLike, letters: Sequence[str] = LETTERS) -> Trials:
    """Validate a trials table; return it normalized (labels ``str``, ``rep`` int) as Trials.

    Refused (``McqError`` naming the column and the first trial at fault): a missing column, a
    repeated ``trial`` or ``(item, arm, model, variant, rep)``, a ``key``/``key_original``
    outside ``letters``, an item whose ``key_original`` differs between rows, ``letter`` and
    ``answer`` not both null or both in ``letters``, ``parse == "ok"`` not matching a non-null
    letter, ``correct`` not boolean, or ``correct`` differing from ``letter == key`` or from
    ``answer == key_original``.
    """
    names = [str(v) for v in letters]
    if len(names) < 2 or len(set(names)) != len(names):
        raise McqError(f"letters: need at least two distinct labels, got {names}")
    if isinstance(trials, Trials):
        trials = trials.frame
    if not isinstance(trials, pd.DataFrame):
        raise McqError("trials: expected a pandas DataFrame")
    missing = [c for c in REQUIRED_COLUMNS if c not in trials.columns]
    if missing:
        raise McqError(f"trials table: missing column {missing[0]!r}")
    if trials.empty:
        raise McqError("trials table: no rows")
    frame = trials.copy()
    for column in ("trial", "item", "arm", "model", "variant", "parse"):
        if frame[column].isna().any():
            bad = _null(frame[column])
            raise McqError(
                f"trials table: column {column!r} is empty in row {int(np.flatnonzero(bad)[0])}"
            )
        frame[column] = frame[column].astype(str)
    try:
        reps = pd.to_numeric(frame["rep"], errors="raise")
    except (TypeError, ValueError) as exc:
        raise McqError(f"trials table: column 'rep' is not an integer ({exc})") from exc
    if reps.isna().any() or not np.all(np.asarray(reps, dtype=np.float64) % 1 == 0):
        raise McqError("trials table: column 'rep' is not an integer in every row")
    frame["rep"] = reps.astype(np.int64)
    duplicated = frame["trial"].duplicated().to_numpy()
    if duplicated.any():
        raise McqError(f"trials table: column 'trial' repeats {_first_bad(frame, duplicated)}")
    cell = frame.duplicated(["item", "arm", "model", "variant", "rep"]).to_numpy()
    if cell.any():
        raise McqError(
            f"trials table: (item, arm, model, variant, rep) repeats in {_first_bad(frame, cell)}"
        )
    allowed = set(names)
    for column in ("key", "key_original"):
        bad = ~frame[column].isin(allowed).to_numpy()
        if bad.any():
            raise McqError(
                f"trials table: column {column!r} is not one of {names} in {_first_bad(frame, bad)}"
            )
        frame[column] = frame[column].astype(str)
    keys = frame.groupby("item")["key_original"].nunique()
    if (keys > 1).any():
        item = keys.index[np.flatnonzero(keys.to_numpy() > 1)[0]]
        raise McqError(f"trials table: column 'key_original' differs between rows of item {item!r}")
    letter_null = _null(frame["letter"])
    answer_null = _null(frame["answer"])
    for column, null in (("letter", letter_null), ("answer", answer_null)):
        bad = ~null & ~frame[column].isin(allowed).to_numpy()
        if bad.any():
            raise McqError(
                f"trials table: column {column!r} is neither null nor one of "
                f"{names} in {_first_bad(frame, bad)}"
            )
    mismatch = letter_null != answer_null
    if mismatch.any():
        raise McqError(
            "trials table: columns 'letter' and 'answer' must be null together, "
            f"not in {_first_bad(frame, mismatch)}"
        )
    parsed = frame["parse"].to_numpy() == PARSED
    bad_parse = parsed == letter_null
    if bad_parse.any():
        raise McqError(
            f"trials table: column 'parse' is {PARSED!r} exactly when 'letter' is "
            f"read, not in {_first_bad(frame, bad_parse)}"
        )
    correct = frame["correct"]
    if correct.dtype != bool:
        values = set(correct.dropna().unique().tolist()) if not correct.isna().any() else None
        if values is None or not values <= {0, 1}:
            raise McqError("trials table: column 'correct' must be boolean in every row")
        frame["correct"] = correct.astype(bool)
    frame["letter"] = frame["letter"].where(~letter_null, None).astype(object)
    frame["answer"] = frame["answer"].where(~answer_null, None).astype(object)
    ok = frame["correct"].to_numpy()
    by_letter = ~letter_null & (frame["letter"].to_numpy() == frame["key"].to_numpy())
    by_answer = ~answer_null & (frame["answer"].to_numpy() == frame["key_original"].to_numpy())
    for basis, expected in (("letter == key", by_letter), ("answer == key_original", by_answer)):
        wrong = ok != expected
        if wrong.any():
            raise McqError(
                f"trials table: column 'correct' differs from {basis} in {_first_bad(frame, wrong)}"
            )
    return Trials(frame, tuple(names))


class Trials:
    """A validated trials table: what :func:`check_trials` returns and every statistic takes.

    ``frame`` is a copy-on-write view of the normalized table (changing it does not change this
    object: build a new one with :func:`check_trials`); ``letters`` the label set. Rows of each
    (arm, variant, model) cell are indexed once, so the statistics do not re-scan the table.
    """

    __slots__ = ("_cells", "_frame", "letters")

    def __init__(self, frame: pd.DataFrame, letters: tuple[str, ...]) -> None:
        self._frame = frame
        self.letters = letters
        self._cells: dict[tuple[str, str, str], npt.NDArray[np.intp]] = {
            (str(k[0]), str(k[1]), str(k[2])): np.asarray(v, dtype=np.intp)
            for k, v in frame.groupby(["arm", "variant", "model"], sort=True).indices.items()
        }

    @property
    def frame(self) -> pd.DataFrame:
        """The normalized table (a copy-on-write shallow copy)."""
        return self._frame.copy(deep=False)

    def __len__(self) -> int:
        return len(self._frame)

    def cells(self) -> list[Condition]:
        """The (arm, variant, model) cells present, sorted as strings."""
        return [Condition(*key) for key in sorted(self._cells)]

    def select(self, cond: Condition) -> pd.DataFrame:
        """The rows of one cell, in table order; McqError when it has none."""
        index = self._cells.get((cond.arm, cond.variant, cond.model))
        if index is None:
            raise McqError(f"condition {cond.label}: no trials in the table")
        return self._frame.iloc[index]

    def rows_in(self, arm: str, model: str, variants: Sequence[str]) -> pd.DataFrame:
        """The rows of (arm, model) whose variant is one of ``variants``, in table order."""
        parts = [self._cells[(arm, v, model)] for v in variants if (arm, v, model) in self._cells]
        if not parts:
            return self._frame.iloc[[]]
        return self._frame.iloc[np.sort(np.concatenate(parts))]


TrialsLike: TypeAlias = pd.DataFrame | Trials


def _checked(trials: TrialsLike, letters: Sequence[str]) -> Trials:
    if isinstance(trials, Trials):
        if trials.letters != tuple(str(v) for v in letters):
            raise McqError(
                f"letters: the table was checked with {list(trials.letters)}, not "
                f"{[str(v) for v in letters]}"
            )
        return trials
    return check_trials(trials, letters)


def _select(table: Trials, cond: Condition) -> pd.DataFrame:
    return table.select(cond)


# --------------------------------------------------------------------------------------------
# 1. accuracy per cell


@dataclass(frozen=True)
class CellAccuracy(_Result):
    """Accuracy of one (arm, variant, model) cell with a Wilson interval.

    Unparseable trials are in ``n`` and count as incorrect (the seed's rule); ``unparsed``
    says how many there were.
    """

    arm: str
    variant: str
    model: str
    n: int
    correct: int
    unparsed: int
    accuracy: float
    lower: float
    upper: float
    conf: float


def accuracy_by_cell(
    trials: TrialsLike, conf: float = 0.95, letters: Sequence[str] = LETTERS
) -> tuple[CellAccuracy, ...]:
    """Accuracy with a Wilson ``conf`` interval per (arm, variant, model), sorted by those."""
    table = _checked(trials, letters)
    frame = table.frame
    grouped = (
        frame.assign(unparsed=frame["letter"].isna())
        .groupby(["arm", "variant", "model"], sort=True)[["correct", "unparsed"]]
        .agg(["sum", "count"])
    )
    out = []
    for (arm, variant, model), row in grouped.iterrows():
        n = int(row[("correct", "count")])
        k = int(row[("correct", "sum")])
        interval = wilson(k, n, conf)
        out.append(
            CellAccuracy(
                str(arm),
                str(variant),
                str(model),
                n,
                k,
                int(row[("unparsed", "sum")]),
                interval.estimate,
                interval.lower,
                interval.upper,
                conf,
            )
        )
    return tuple(out)


# --------------------------------------------------------------------------------------------
# pairing


def _paired(
    table: Trials, a: Condition, b: Condition, columns: Sequence[str]
) -> tuple[pd.DataFrame, int, int]:
    """Rows of ``a`` and ``b`` joined on (item, rep); counts of unpaired rows of each."""
    if a == b:
        raise McqError(f"conditions: a and b are the same cell {a.label}")
    left = _select(table, a)[["item", "rep", *columns]]
    right = _select(table, b)[["item", "rep", *columns]]
    joined = left.merge(right, on=["item", "rep"], suffixes=("_a", "_b"), how="inner")
    if joined.empty:
        raise McqError(f"conditions {a.label} and {b.label}: no (item, rep) in common")
    return joined, len(left) - len(joined), len(right) - len(joined)


# --------------------------------------------------------------------------------------------
# 2. McNemar


@dataclass(frozen=True)
class PairedMcNemar(_Result):
    """McNemar's test of condition ``a`` against ``b``, paired by (item, rep).

    ``b_count`` = a right and b wrong, ``c_count`` = a wrong and b right; ``test`` is
    :func:`analysis._stats.mcnemar` on them (exact binomial when b + c < 25, continuity-corrected
    chi-square otherwise). Unpaired trials are counted, not used.
    """

    a: Condition
    b: Condition
    n_pairs: int
    both_correct: int
    b_count: int
    c_count: int
    both_wrong: int
    unpaired_a: int
    unpaired_b: int
    accuracy_a: float
    accuracy_b: float
    difference: float
    test: McNemarResult


def paired_mcnemar(
    trials: TrialsLike, a: CondLike, b: CondLike, letters: Sequence[str] = LETTERS
) -> PairedMcNemar:
    """McNemar's test between two conditions, pairing their trials by (item, rep)."""
    table = _checked(trials, letters)
    ca, cb = _cond(a), _cond(b)
    joined, ua, ub = _paired(table, ca, cb, ["correct"])
    xa = joined["correct_a"].to_numpy(dtype=bool)
    xb = joined["correct_b"].to_numpy(dtype=bool)
    b_count = int(np.sum(xa & ~xb))
    c_count = int(np.sum(~xa & xb))
    n = int(xa.size)
    acc_a, acc_b = float(xa.mean()), float(xb.mean())
    return PairedMcNemar(
        ca,
        cb,
        n,
        int(np.sum(xa & xb)),
        b_count,
        c_count,
        int(np.sum(~xa & ~xb)),
        ua,
        ub,
        acc_a,
        acc_b,
        acc_a - acc_b,
        mcnemar(b_count, c_count),
    )


@dataclass(frozen=True)
class McNemarFamily(_Result):
    """A declared family of McNemar comparisons with Bonferroni or Holm adjusted p-values."""

    method: str
    alpha: float
    comparisons: tuple[PairedMcNemar, ...]
    p: tuple[float, ...]
    adjusted: tuple[float, ...]
    reject: tuple[bool, ...]


def mcnemar_family(
    trials: TrialsLike,
    comparisons: Sequence[tuple[CondLike, CondLike]],
    method: Literal["holm", "bonferroni"] = "holm",
    alpha: float = 0.05,
    letters: Sequence[str] = LETTERS,
) -> McNemarFamily:
    """:func:`paired_mcnemar` for each declared comparison; the primary ``p`` adjusted over them.

    The family is exactly ``comparisons`` (its size is the Bonferroni factor), in that order.
    """
    if not comparisons:
        raise McqError("comparisons: the family is empty")
    if method not in ("holm", "bonferroni"):
        raise McqError(f"method: must be 'holm' or 'bonferroni', got {method!r}")
    table = _checked(trials, letters)
    results = tuple(paired_mcnemar(table, a, b, letters) for a, b in comparisons)
    ps = [r.test.p for r in results]
    adjusted = holm(ps, alpha) if method == "holm" else bonferroni(ps, alpha)
    return McNemarFamily(method, alpha, results, tuple(ps), adjusted.adjusted, adjusted.reject)


# --------------------------------------------------------------------------------------------
# 3. flip rate


@dataclass(frozen=True)
class FlipRateResult(_Result):
    """Share of (item, rep) pairs whose prediction differs between two conditions.

    ``basis="letter"``: the letters as presented differ; ``basis="answer"``: the options mapped
    back to the original order differ (the seed's Table 5 flip: same letter, other content).
    An unparseable prediction is a value of its own ("no answer"): parsed versus unparseable is
    a flip, unparseable in both is not (``unparsed_pairs`` counts pairs with either). The CI
    is a percentile cluster bootstrap over items (``analysis._stats.bootstrap_clustered`` with
    ``unit="question"``: items drawn with replacement, replicate = flips / pairs drawn).
    """

    a: Condition
    b: Condition
    basis: str
    n_pairs: int
    n_items: int
    flips: int
    rate: float
    lower: float
    upper: float
    conf: float
    ci_method: str
    iterations: int
    seed: int
    unparsed_pairs: int
    unpaired_a: int
    unpaired_b: int


def _basis(basis: str) -> str:
    if basis not in ("answer", "letter"):
        raise McqError(f"basis: must be 'answer' or 'letter', got {basis!r}")
    return basis


def flip_rate_between(
    trials: TrialsLike,
    a: CondLike,
    b: CondLike,
    basis: Basis = "answer",
    iterations: int = 2000,
    seed: int = 0,
    conf: float = 0.95,
    letters: Sequence[str] = LETTERS,
) -> FlipRateResult:
    """Flip rate between two conditions (usually two variants), CI clustered by item."""
    column = _basis(basis)
    table = _checked(trials, letters)
    ca, cb = _cond(a), _cond(b)
    joined, ua, ub = _paired(table, ca, cb, [column])
    va = joined[f"{column}_a"].fillna("\x00none").to_numpy()
    vb = joined[f"{column}_b"].fillna("\x00none").to_numpy()
    flips = (va != vb).astype(np.float64)
    unparsed = int(
        np.sum(joined[f"{column}_a"].isna().to_numpy() | joined[f"{column}_b"].isna().to_numpy())
    )
    boot = bootstrap_clustered(
        flips,
        joined["item"].tolist(),
        joined["rep"].tolist(),
        iterations,
        seed,
        conf,
        unit="question",
    )
    return FlipRateResult(
        ca,
        cb,
        column,
        int(flips.size),
        boot.n_clusters,
        int(flips.sum()),
        float(flips.mean()),
        boot.lower,
        boot.upper,
        conf,
        "item-cluster-bootstrap-percentile",
        boot.iterations,
        boot.seed,
        unparsed,
        ua,
        ub,
    )


# --------------------------------------------------------------------------------------------
# 4. position bias, per-position accuracy, CKLD, RStd


def position_bias_from_shares(p_pred: npt.ArrayLike, p_truth: npt.ArrayLike) -> float:
    """Seed 002's prediction frequency bias, pinned as ``½·Σ_i |p_pred(i) − p_truth(i)|``.

    That is the total variation distance between the two distributions; it reproduces the
    seed's 0.137 from its Table 11 (the printed formula's ``¼·Σ`` gives 0.0685).
    """
    pred = np.asarray(p_pred, dtype=np.float64)
    truth = np.asarray(p_truth, dtype=np.float64)
    if pred.ndim != 1 or pred.shape != truth.shape or pred.size < 2:
        raise McqError("p_pred, p_truth: need two equal-length distributions of >= 2 shares")
    if not (np.all(np.isfinite(pred)) and np.all(np.isfinite(truth))):
        raise McqError("p_pred, p_truth: not finite")
    return 0.5 * float(np.abs(pred - truth).sum())


def ckld(counts: npt.ArrayLike, reference: npt.ArrayLike | None = None) -> float:
    """Seed 002's CKLD: ``Σ_i (O_i − E_i)² / E_i`` on prediction **counts**.

    ``E_i = n·q_i`` with ``n = Σ O_i`` and ``q`` the reference distribution (uniform when
    ``None``, the seed's "departure from uniform answering"; any positive weights otherwise,
    normalized). It is Pearson's chi-square statistic, so it grows with ``n``.
    """
    observed = np.asarray(counts, dtype=np.float64)
    if observed.ndim != 1 or observed.size < 2 or np.any(observed < 0):
        raise McqError("counts: need >= 2 non-negative counts")
    n = float(observed.sum())
    if n <= 0:
        raise McqError("counts: no predictions")
    if reference is None:
        q = np.full(observed.size, 1.0 / observed.size)
    else:
        raw = np.asarray(reference, dtype=np.float64)
        if raw.shape != observed.shape:
            raise McqError("reference: not one weight per position")
        if not np.all(np.isfinite(raw)) or np.any(raw <= 0):
            raise McqError("reference: every position needs a positive weight")
        q = raw / raw.sum()
    expected = n * q
    return float(np.sum((observed - expected) ** 2 / expected))


def rstd(accuracies: npt.ArrayLike) -> float:
    """Seed 002's RStd: ``σ/µ`` of per-position accuracies, σ the population SD (ddof = 0).

    NaN when the mean accuracy is 0.
    """
    acc = np.asarray(accuracies, dtype=np.float64)
    if acc.ndim != 1 or acc.size < 2 or not np.all(np.isfinite(acc)):
        raise McqError("accuracies: need >= 2 finite per-position accuracies")
    mean = float(acc.mean())
    return float(np.std(acc, ddof=0)) / mean if mean > 0 else math.nan


@dataclass(frozen=True)
class PerPositionAccuracy(_Result):
    """Accuracy over the trials whose correct answer is at ``letter`` (Wilson interval)."""

    letter: str
    n: int
    correct: int
    accuracy: float
    lower: float
    upper: float


@dataclass(frozen=True)
class PositionResult(_Result):
    """Position bias, per-position accuracy, CKLD and RStd of one condition.

    ``p_truth`` is the key distribution over all ``n`` trials; ``p_pred`` the predicted-letter
    distribution over the ``n_parsed`` parsed trials (the seed's Table 11 rows sum to 100%
    despite its parse errors). ``bias = ½·Σ|p_pred − p_truth|``; ``bias_quarter = ¼·Σ`` (the
    seed's printed formula, for comparison). ``ckld`` is on the parsed prediction counts
    against ``ckld_reference`` ("uniform" or "truth" = ``p_truth``), with its chi-square
    ``ckld_p`` (df = k − 1). ``rstd`` is over ``rstd_positions``: the letters that are the key
    of at least one trial.
    """

    condition: Condition
    letters: tuple[str, ...]
    n: int
    n_parsed: int
    pred_counts: tuple[int, ...]
    truth_counts: tuple[int, ...]
    p_pred: tuple[float, ...]
    p_truth: tuple[float, ...]
    bias: float
    bias_quarter: float
    ckld: float
    ckld_reference: str
    ckld_df: int
    ckld_p: float
    per_position: tuple[PerPositionAccuracy, ...]
    rstd: float
    rstd_positions: tuple[str, ...]


def position_metrics(
    trials: TrialsLike,
    condition: CondLike,
    reference: Literal["uniform", "truth"] = "uniform",
    letters: Sequence[str] = LETTERS,
) -> PositionResult:
    """Position bias, per-position accuracy, CKLD and RStd of one condition (letters as shown)."""
    if reference not in ("uniform", "truth"):
        raise McqError(f"reference: must be 'uniform' or 'truth', got {reference!r}")
    table = _checked(trials, letters)
    cond = _cond(condition)
    part = _select(table, cond)
    names = tuple(str(v) for v in letters)
    n = len(part)
    pred = part["letter"].dropna().value_counts()
    truth = part["key"].value_counts()
    pred_counts = np.array([int(pred.get(v, 0)) for v in names], dtype=np.int64)
    truth_counts = np.array([int(truth.get(v, 0)) for v in names], dtype=np.int64)
    n_parsed = int(pred_counts.sum())
    if n_parsed == 0:
        raise McqError(f"condition {cond.label}: no parsed prediction")
    p_pred = pred_counts / n_parsed
    p_truth = truth_counts / n
    diff = float(np.abs(p_pred - p_truth).sum())
    if reference == "truth" and np.any(truth_counts == 0):
        missing = names[int(np.flatnonzero(truth_counts == 0)[0])]
        raise McqError(f"condition {cond.label}: reference 'truth' has no key at {missing!r}")
    value = ckld(pred_counts, None if reference == "uniform" else truth_counts)
    df = len(names) - 1
    per = []
    correct_by_key = part.groupby("key")["correct"].sum()
    for letter, count in zip(names, truth_counts, strict=True):
        if count == 0:
            per.append(PerPositionAccuracy(letter, 0, 0, math.nan, math.nan, math.nan))
            continue
        k = int(correct_by_key.get(letter, 0))
        interval = wilson(k, int(count))
        per.append(
            PerPositionAccuracy(
                letter, int(count), k, interval.estimate, interval.lower, interval.upper
            )
        )
    used = [p for p in per if p.n > 0]
    spread = rstd([p.accuracy for p in used]) if len(used) >= 2 else math.nan
    return PositionResult(
        cond,
        names,
        n,
        n_parsed,
        tuple(int(v) for v in pred_counts),
        tuple(int(v) for v in truth_counts),
        tuple(p_pred.tolist()),
        tuple(p_truth.tolist()),
        diff / 2.0,
        diff / 4.0,
        value,
        reference,
        df,
        float(sps.chi2.sf(value, df)),
        tuple(per),
        spread,
        tuple(p.letter for p in used),
    )


# --------------------------------------------------------------------------------------------
# 5 and 6. consistency across orderings, permutation voting, self-consistency


@dataclass(frozen=True)
class Exclusion(_Result):
    """A group an aggregation left out, with the reason and the trials it did have."""

    item: str
    rep: int
    arm: str
    model: str
    reason: str
    trials: tuple[str, ...]


@dataclass(frozen=True)
class AggregatedAnswer(_Result):
    """One aggregated answer (original option order) and the trials it came from.

    ``votes`` is the winning answer's count of the ``k`` predictions (unparseable ones vote for
    nothing); ``agreement = votes / k``; ``tie`` says the tie rule chose among answers with
    equal counts; ``answer`` is ``None`` when no prediction was parsed (counted incorrect).
    """

    item: str
    rep: int
    answer: str | None
    key_original: str
    correct: bool
    votes: int
    k: int
    agreement: float
    tie: bool
    trials: tuple[str, ...]


@dataclass(frozen=True)
class OrderAccuracy(_Result):
    """Accuracy of one ordering (variant) over the complete groups."""

    variant: str
    n: int
    correct: int
    accuracy: float


@dataclass(frozen=True)
class ConsistencyResult(_Result):
    """Consistency of predictions across ``orders`` per (item, rep) group.

    ``levels[j]`` is ``(m, count, share)`` for the groups whose most common parsed prediction
    was given by ``m`` of the ``k`` orders, ``m = k, k−1, …, 0`` (the seed's Table 12;
    unparseable predictions agree with nothing; ``m = 0``: none parsed). The agreement rate of
    a group is ``m/k``; ``agreement_mean``/``agreement_sd`` are over groups (SD with ddof = 1,
    NaN for one group); ``order_mean``/``order_sd`` over the ``k`` per-order accuracies
    (ddof = 1).
    """

    arm: str
    model: str
    orders: tuple[str, ...]
    basis: str
    n_groups: int
    levels: tuple[tuple[int, int, float], ...]
    agreement_mean: float
    agreement_sd: float
    per_order: tuple[OrderAccuracy, ...]
    order_mean: float
    order_sd: float
    exclusions: tuple[Exclusion, ...]


@dataclass(frozen=True)
class AbstentionResult(_Result):
    """Abstain when agreement < ``threshold``: coverage and accuracy of the answered groups."""

    threshold: float
    n: int
    answered: int
    abstained: int
    coverage: float
    accuracy_answered: float


@dataclass(frozen=True)
class VoteResult(_Result):
    """Permutation voting over ``orders``: majority of the inverse-mapped answers per group.

    Tie rule ``"first-order"``: among answers with the top count, the one given by the earliest
    order in ``orders`` wins. Accuracy over the complete groups with a Wilson interval; the
    per-order accuracies and agreement are over the same groups.
    """

    arm: str
    model: str
    orders: tuple[str, ...]
    tie_rule: str
    n_groups: int
    correct: int
    accuracy: float
    lower: float
    upper: float
    ties: int
    consistency: ConsistencyResult
    abstention: AbstentionResult | None
    answers: tuple[AggregatedAnswer, ...]
    exclusions: tuple[Exclusion, ...]


def _index_of(letters: Sequence[str]) -> dict[str, int]:
    return {v: i for i, v in enumerate(letters)}


def _majority(
    codes: npt.NDArray[np.int64], n_letters: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Per row of ``codes`` (−1 = unparsed): winner (−1 if none), its count, tie flag.

    Among the letters with the top count the one whose first vote comes earliest in the row
    wins (the row is in declared order).
    """
    rows, k = codes.shape
    counts = np.zeros((rows, n_letters), dtype=np.int64)
    first = np.full((rows, n_letters), k, dtype=np.int64)
    for j in range(k - 1, -1, -1):
        col = codes[:, j]
        has = col >= 0
        idx = np.flatnonzero(has)
        counts[idx, col[has]] += 1
        first[idx, col[has]] = j
    top = counts.max(axis=1)
    at_top = counts == top[:, None]
    tie = at_top.sum(axis=1) > 1
    ranked = np.where(at_top, first, k + 1)
    winner = ranked.argmin(axis=1).astype(np.int64)
    winner[top == 0] = -1
    tie[top == 0] = False
    return winner, top, tie


def _rows_in(
    table: Trials, arm: str, model: str, variants: Sequence[str], incomplete: str, what: str
) -> pd.DataFrame:
    """Rows of (arm, model) whose variant is one of ``variants``."""
    if incomplete not in ("exclude", "error"):
        raise McqError(f"incomplete: must be 'exclude' or 'error', got {incomplete!r}")
    part = table.rows_in(arm, model, variants)
    if part.empty:
        raise McqError(f"{what}: no trials for arm {arm!r}, model {model!r} in {list(variants)}")
    return part


def _consistency_frame(
    table: Trials,
    arm: str,
    model: str,
    orders: Sequence[str],
    basis: str,
    incomplete: str,
    what: str,
) -> tuple[pd.DataFrame, npt.NDArray[np.int64], list[Exclusion]]:
    """Wide table (item, rep) x orders of codes, complete groups only; the exclusions."""
    order_list = [str(v) for v in orders]
    if len(order_list) < 2 or len(set(order_list)) != len(order_list):
        raise McqError(f"{what}: orders must be >= 2 distinct variants, got {order_list}")
    part = _rows_in(table, arm, model, order_list, incomplete, what)
    present = set(part["variant"].unique().tolist())
    absent = [v for v in order_list if v not in present]
    if absent:
        raise McqError(
            f"{what}: variant {absent[0]!r} has no trial for arm {arm!r}, model {model!r}"
        )
    letters: tuple[str, ...] = table.letters
    index = _index_of(letters)
    counts = part.groupby(["item", "rep"], sort=True)["variant"].count()
    short = counts[counts < len(order_list)]
    exclusions: list[Exclusion] = []
    if len(short):
        have = part.set_index(["item", "rep"]).sort_index()
        for item, rep in short.index:
            rows = have.loc[[(item, rep)]]
            missing = [v for v in order_list if v not in set(rows["variant"])]
            reason = f"incomplete orders: missing {', '.join(missing)}"
            if incomplete == "error":
                raise McqError(
                    f"{what}: item {item!r} rep {rep} (arm {arm!r}, model "
                    f"{model!r}) has no trial for variant {missing[0]!r}: {reason}"
                )
            exclusions.append(
                Exclusion(
                    str(item), int(rep), arm, model, reason, tuple(sorted(rows["trial"].tolist()))
                )
            )
        keep = part.set_index(["item", "rep"]).index.isin(short.index)
        part = part.loc[~keep]
    if part.empty:
        raise McqError(f"{what}: no (item, rep) group has every order of {order_list}")
    codes = part[basis].map(index).fillna(-1).astype(np.int64)
    wide = part.assign(code=codes).pivot(
        index=["item", "rep"],
        columns="variant",
        values=["code", "trial", "correct", "key_original"],
    )
    code_matrix = wide["code"][order_list].to_numpy(dtype=np.int64)
    return wide, code_matrix, exclusions


def _consistency(
    wide: pd.DataFrame,
    codes: npt.NDArray[np.int64],
    arm: str,
    model: str,
    orders: Sequence[str],
    basis: str,
    letters: Sequence[str],
    exclusions: Sequence[Exclusion],
) -> tuple[ConsistencyResult, npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    winner, top, tie = _majority(codes, len(letters))
    k = codes.shape[1]
    groups = codes.shape[0]
    levels = tuple(
        (m, int(np.sum(top == m)), float(np.sum(top == m)) / groups) for m in range(k, -1, -1)
    )
    agreement = top / k
    correct = wide["correct"][list(orders)].to_numpy(dtype=bool)
    per_order = tuple(
        OrderAccuracy(v, groups, int(correct[:, j].sum()), float(correct[:, j].mean()))
        for j, v in enumerate(orders)
    )
    acc = np.array([p.accuracy for p in per_order])
    result = ConsistencyResult(
        arm,
        model,
        tuple(orders),
        basis,
        groups,
        levels,
        float(agreement.mean()),
        float(np.std(agreement, ddof=1)) if groups > 1 else math.nan,
        per_order,
        float(acc.mean()),
        float(np.std(acc, ddof=1)),
        tuple(exclusions),
    )
    return result, winner, top, tie


def ordering_consistency(
    trials: TrialsLike,
    arm: str,
    model: str,
    orders: Sequence[str],
    basis: Basis = "answer",
    incomplete: Incomplete = "exclude",
    letters: Sequence[str] = LETTERS,
) -> ConsistencyResult:
    """Consistency of predictions across ``orders`` (all same, k−1 of k, …) per (item, rep)."""
    table = _checked(trials, letters)
    column = _basis(basis)
    wide, codes, excl = _consistency_frame(
        table, str(arm), str(model), orders, column, incomplete, "consistency"
    )
    result, _, _, _ = _consistency(
        wide, codes, str(arm), str(model), [str(v) for v in orders], column, table.letters, excl
    )
    return result


def _aggregated(
    wide: pd.DataFrame,
    columns: Sequence[str],
    winner: npt.NDArray[np.int64],
    top: npt.NDArray[np.int64],
    tie: npt.NDArray[np.bool_],
    letters: Sequence[str],
) -> tuple[AggregatedAnswer, ...]:
    keys = wide["key_original"][columns[0]].to_numpy()
    trials = wide["trial"][list(columns)].to_numpy()
    k = len(columns)
    out = []
    for row, (item, rep) in enumerate(wide.index):
        answer = letters[int(winner[row])] if winner[row] >= 0 else None
        out.append(
            AggregatedAnswer(
                str(item),
                int(rep),
                answer,
                str(keys[row]),
                answer == keys[row],
                int(top[row]),
                k,
                int(top[row]) / k,
                bool(tie[row]),
                tuple(str(t) for t in trials[row]),
            )
        )
    return tuple(out)


def permutation_vote(
    trials: TrialsLike,
    arm: str,
    model: str,
    orders: Sequence[str],
    incomplete: Incomplete = "exclude",
    abstain_below: float | None = None,
    conf: float = 0.95,
    letters: Sequence[str] = LETTERS,
) -> VoteResult:
    """Majority over the inverse-mapped answers of ``orders`` per (item, rep); see VoteResult.

    A group missing an order (a trial given up) is an :class:`Exclusion` with
    ``incomplete="exclude"`` and raises :class:`McqError` naming the item and the variant with
    ``incomplete="error"``. ``abstain_below`` adds the abstention summary at that agreement.
    """
    table = _checked(trials, letters)
    order_list = [str(v) for v in orders]
    wide, codes, excl = _consistency_frame(
        table, str(arm), str(model), order_list, "answer", incomplete, "permutation vote"
    )
    names: tuple[str, ...] = table.letters
    consistency, winner, top, tie = _consistency(
        wide, codes, str(arm), str(model), order_list, "answer", names, excl
    )
    answers = _aggregated(wide, order_list, winner, top, tie, names)
    n = len(answers)
    k = sum(1 for a in answers if a.correct)
    interval = wilson(k, n, conf)
    abstention = None
    if abstain_below is not None:
        if not 0.0 <= abstain_below <= 1.0:
            raise McqError(f"abstain_below: must lie in [0, 1], got {abstain_below}")
        kept = [a for a in answers if a.agreement >= abstain_below]
        abstention = AbstentionResult(
            float(abstain_below),
            n,
            len(kept),
            n - len(kept),
            len(kept) / n,
            sum(1 for a in kept if a.correct) / len(kept) if kept else math.nan,
        )
    return VoteResult(
        str(arm),
        str(model),
        tuple(order_list),
        "first-order",
        n,
        k,
        interval.estimate,
        interval.lower,
        interval.upper,
        int(sum(1 for a in answers if a.tie)),
        consistency,
        abstention,
        answers,
        tuple(excl),
    )


@dataclass(frozen=True)
class SelfConsistencyResult(_Result):
    """Self-consistency: majority over ``n_samples`` sampled answers per item.

    Samples are the reps of one (arm, variant, model) cell, voted in rep order with the
    first-order tie rule (the lowest rep among tied answers wins).
    """

    condition: Condition
    n_samples: int
    temperature: float
    n_items: int
    correct: int
    accuracy: float
    lower: float
    upper: float
    mean_sample_accuracy: float
    ties: int
    answers: tuple[AggregatedAnswer, ...]
    exclusions: tuple[Exclusion, ...]


def self_consistency(
    trials: TrialsLike,
    condition: CondLike,
    n_samples: int,
    temperature: float,
    incomplete: Incomplete = "exclude",
    conf: float = 0.95,
    letters: Sequence[str] = LETTERS,
) -> SelfConsistencyResult:
    """Majority over the first ``n_samples`` reps of each item of ``condition``.

    ``temperature`` is the sampling temperature the condition ran at: 0 (or less) is refused
    as a configuration error, since greedy decoding repeats one answer. An item with fewer
    than ``n_samples`` reps is excluded or refused, as ``incomplete`` declares; reps after the
    first ``n_samples`` are not used.
    """
    cond = _cond(condition)
    if isinstance(n_samples, bool) or int(n_samples) != n_samples or n_samples < 2:
        raise McqError(
            f"self-consistency {cond.label}: n_samples must be an integer >= 2, got {n_samples!r}"
        )
    if not math.isfinite(float(temperature)) or float(temperature) <= 0:
        raise McqError(
            f"self-consistency {cond.label}: temperature {temperature:g} is a "
            "configuration error: at temperature 0 every sample is the same greedy "
            "answer, so a majority over samples measures nothing; sample at a "
            "temperature > 0 (the seed uses 0.7)"
        )
    if incomplete not in ("exclude", "error"):
        raise McqError(f"incomplete: must be 'exclude' or 'error', got {incomplete!r}")
    table = _checked(trials, letters)
    names: tuple[str, ...] = table.letters
    part = _select(table, cond).sort_values(["item", "rep"], kind="stable")
    part = part.assign(slot=part.groupby("item").cumcount())
    sizes = part.groupby("item")["slot"].count()
    exclusions: list[Exclusion] = []
    for item in sizes.index[sizes.to_numpy() < n_samples]:
        rows = part.loc[part["item"] == item]
        reason = f"incomplete samples: {len(rows)} of {n_samples}"
        if incomplete == "error":
            raise McqError(
                f"self-consistency {cond.label}: item {item!r} has {len(rows)} of "
                f"{n_samples} samples (variant {cond.variant!r})"
            )
        exclusions.append(
            Exclusion(
                str(item), 0, cond.arm, cond.model, reason, tuple(sorted(rows["trial"].tolist()))
            )
        )
    part = part.loc[
        (part["slot"] < n_samples).to_numpy()
        & part["item"].isin(sizes.index[sizes.to_numpy() >= n_samples]).to_numpy()
    ]
    if part.empty:
        raise McqError(f"self-consistency {cond.label}: no item has {n_samples} samples")
    index = _index_of(names)
    wide = part.assign(code=part["answer"].map(index).fillna(-1).astype(np.int64)).pivot(
        index="item", columns="slot", values=["code", "trial", "correct", "key_original"]
    )
    slots = list(range(int(n_samples)))
    codes = wide["code"][slots].to_numpy(dtype=np.int64)
    winner, top, tie = _majority(codes, len(names))
    keys = wide["key_original"][0].to_numpy()
    trial_ids = wide["trial"][slots].to_numpy()
    answers = []
    for row, item in enumerate(wide.index):
        answer = names[int(winner[row])] if winner[row] >= 0 else None
        answers.append(
            AggregatedAnswer(
                str(item),
                0,
                answer,
                str(keys[row]),
                answer == keys[row],
                int(top[row]),
                len(slots),
                int(top[row]) / len(slots),
                bool(tie[row]),
                tuple(str(t) for t in trial_ids[row]),
            )
        )
    k = sum(1 for a in answers if a.correct)
    interval = wilson(k, len(answers), conf)
    sample_acc = float(wide["correct"][slots].to_numpy(dtype=bool).mean())
    return SelfConsistencyResult(
        cond,
        int(n_samples),
        float(temperature),
        len(answers),
        k,
        interval.estimate,
        interval.lower,
        interval.upper,
        sample_acc,
        int(sum(1 for a in answers if a.tie)),
        tuple(answers),
        tuple(exclusions),
    )


# --------------------------------------------------------------------------------------------
# 7. cloze


@dataclass(frozen=True)
class ClozeResult(_Result):
    """Cloze scoring from the ``logprob_<letter>`` columns of one condition.

    Per trial the chosen letter is the highest log-probability (the first letter in ``letters``
    order on an exact tie) and the margin is its log-probability minus the next highest.
    """

    condition: Condition
    n: int
    correct: int
    accuracy: float
    lower: float
    upper: float
    margin_mean: float
    margin_sd: float
    pred_counts: tuple[int, ...]
    bias: float
    exclusions: tuple[Exclusion, ...]


def cloze(
    trials: TrialsLike,
    condition: CondLike,
    missing: Incomplete = "error",
    conf: float = 0.95,
    letters: Sequence[str] = LETTERS,
) -> ClozeResult:
    """Cloze accuracy, mean log-probability margin and position bias of one condition.

    A trial lacking a finite log-probability for some option letter is refused (naming the
    item, variant and letter) or excluded, as ``missing`` declares. When the trial's ``letter``
    is recorded it must be the cloze choice.
    """
    if missing not in ("exclude", "error"):
        raise McqError(f"missing: must be 'exclude' or 'error', got {missing!r}")
    table = _checked(trials, letters)
    cond = _cond(condition)
    names: tuple[str, ...] = table.letters
    columns = [f"logprob_{v}" for v in names]
    absent = [c for c in columns if c not in table.frame.columns]
    if absent:
        raise McqError(f"cloze {cond.label}: trials table has no column {absent[0]!r}")
    part = _select(table, cond)
    lp = part[columns].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(lp)
    exclusions: list[Exclusion] = []
    rows_bad = bad.any(axis=1)
    if rows_bad.any():
        for r in np.flatnonzero(rows_bad):
            row = part.iloc[int(r)]
            letter = names[int(np.flatnonzero(bad[r])[0])]
            reason = f"no log-probability for option letter {letter!r}"
            if missing == "error":
                raise McqError(
                    f"cloze {cond.label}: item {row['item']!r} variant "
                    f"{row['variant']!r} (trial {row['trial']!r}): {reason}"
                )
            exclusions.append(
                Exclusion(
                    str(row["item"]),
                    int(row["rep"]),
                    cond.arm,
                    cond.model,
                    reason,
                    (str(row["trial"]),),
                )
            )
        part = part.loc[~rows_bad]
        lp = lp[~rows_bad]
    if part.empty:
        raise McqError(f"cloze {cond.label}: no trial with every log-probability")
    chosen = lp.argmax(axis=1)
    ordered = np.sort(lp, axis=1)
    margin = ordered[:, -1] - ordered[:, -2]
    chosen_letters = np.array(names, dtype=object)[chosen]
    recorded = part["letter"].to_numpy(dtype=object)
    read = ~_null(part["letter"])
    disagree = read & (recorded != chosen_letters)
    if disagree.any():
        row = part.iloc[int(np.flatnonzero(disagree)[0])]
        raise McqError(
            f"cloze {cond.label}: trial {row['trial']!r} (item {row['item']!r}) "
            f"records letter {row['letter']!r} but its highest log-probability is "
            f"{chosen_letters[np.flatnonzero(disagree)[0]]!r}"
        )
    hits = chosen_letters == part["key"].to_numpy()
    n = int(hits.size)
    k = int(hits.sum())
    interval = wilson(k, n, conf)
    counts = np.bincount(chosen, minlength=len(names))
    truth = part["key"].value_counts()
    p_truth = [int(truth.get(v, 0)) / n for v in names]
    return ClozeResult(
        cond,
        n,
        k,
        interval.estimate,
        interval.lower,
        interval.upper,
        float(margin.mean()),
        float(np.std(margin, ddof=1)) if n > 1 else math.nan,
        tuple(int(c) for c in counts),
        position_bias_from_shares(counts / n, p_truth),
        tuple(exclusions),
    )


# --------------------------------------------------------------------------------------------
# 8. logistic GEE and the mean over perturbation seeds


@dataclass(frozen=True)
class GeeTerm(_Result):
    """One GEE coefficient (log-odds) with a robust (sandwich) SE, Wald z, p and 95% CI."""

    name: str
    estimate: float
    se: float
    z: float
    p: float
    lower: float
    upper: float
    odds_ratio: float


@dataclass(frozen=True)
class GeeFit(_Result):
    """Logistic GEE of ``correct`` on arm (+ factors), exchangeable correlation within item."""

    reference: str
    arms: tuple[str, ...]
    factors: tuple[str, ...]
    factor_references: tuple[str, ...]
    n_obs: int
    n_clusters: int
    terms: tuple[GeeTerm, ...]
    dependence: float
    converged: bool
    warnings: tuple[str, ...]


def _dummies(
    values: npt.NDArray[Any], reference: str, name: str
) -> tuple[list[str], list[npt.NDArray[np.float64]], list[str]]:
    levels = sorted({str(v) for v in values})
    if reference not in levels:
        raise McqError(f"{name}: reference {reference!r} is not among the levels {levels}")
    others = [v for v in levels if v != reference]
    cols = [(values == v).astype(np.float64) for v in others]
    return [f"{name}[T.{v}]" for v in others], cols, levels


def _column_of(term: str) -> str | None:
    """The design column of a GEE term (``model[T.big]`` -> ``model``); none: the intercept."""
    return term.split("[", 1)[0] if "[" in term else None


def gee_arm_effects(
    trials: TrialsLike,
    reference: str,
    factors: Mapping[str, str] | None = None,
    conf: float = 0.95,
    letters: Sequence[str] = LETTERS,
) -> GeeFit:
    """Logistic GEE (statsmodels, Binomial, Exchangeable, item as cluster) of arm effects.

    Design: an intercept, one treatment dummy ``arm[T.<a>]`` per arm other than ``reference``
    (sorted as strings), then for each ``factors`` column (``"model"`` or ``"variant"``) in the
    mapping's order one dummy per level other than its reference. Robust (sandwich) SEs; Wald
    z, two-sided normal p, CI ``β ± z·SE``. Warnings are recorded, never raised.
    """
    from statsmodels.genmod.cov_struct import Exchangeable
    from statsmodels.genmod.families import Binomial
    from statsmodels.genmod.generalized_estimating_equations import GEE

    table = _checked(trials, letters)
    extra = dict(factors or {})
    for column in extra:
        if column not in ("model", "variant"):
            raise McqError(f"factors: {column!r} is not 'model' or 'variant'")
    frame = table.frame
    names = ["Intercept"]
    cols = [np.ones(len(frame))]
    arm_names, arm_cols, arms = _dummies(frame["arm"].to_numpy(), str(reference), "arm")
    if len(arms) < 2:
        raise McqError("arm: the GEE needs at least two arms")
    names += arm_names
    cols += arm_cols
    for column, ref in extra.items():
        more, more_cols, _ = _dummies(frame[column].to_numpy(), str(ref), column)
        names += more
        cols += more_cols
    exog = np.column_stack(cols)
    if np.linalg.matrix_rank(exog) < exog.shape[1]:
        raise McqError("GEE design: columns are linearly dependent (arms and factors not crossed)")
    endog = frame["correct"].to_numpy(dtype=np.float64)
    if endog.min() == endog.max():
        raise GeeNotFittable(
            "correct: every trial has the same outcome; the GEE cannot be fitted", None
        )
    for column in ("arm", *extra):
        values = frame[column].astype(str).to_numpy()
        for level in sorted(set(values.tolist())):
            outcomes = endog[values == level]
            if outcomes.min() == outcomes.max():
                raise GeeNotFittable(
                    f"GEE: every trial of {column} {level!r} is "
                    f"{'correct' if outcomes[0] else 'wrong'} (separation): "
                    "its log odds ratio is infinite and the GEE cannot be "
                    "fitted",
                    column,
                )
    items = frame["item"].to_numpy()
    groups = pd.factorize(items, sort=True)[0]
    sizes = np.bincount(groups)
    n, p = exog.shape
    pairs = int((sizes * (sizes - 1) // 2).sum())
    if n - p <= 0 or pairs - p <= 0:  # mcq-statistics.md §8, rule 0
        raise GeeNotFittable(
            f"GEE: {n} trials and {pairs} within-item pairs for {p} coefficients: the "
            "exchangeable working correlation cannot be estimated (it needs more of each than "
            "coefficients)",
            None,
        )
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        model = GEE(endog, exog, groups=groups, family=Binomial(), cov_struct=Exchangeable())
        try:
            fit = model.fit()
        except np.linalg.LinAlgError:  # mcq-statistics.md §8 rule 3: a singular fit
            raise GeeNotFittable(
                "GEE: the working covariance or the information matrix is "
                "singular (a degenerate fit)",
                None,
            ) from None
    caught = [f"{w.category.__name__}: {w.message}" for w in seen]
    params = np.asarray(fit.params, dtype=np.float64)
    cov = np.asarray(fit.cov_params(), dtype=np.float64)
    robust = np.diag(cov)
    naive = np.diag(np.asarray(fit.cov_naive, dtype=np.float64))  # B⁻¹ (Binomial: scale 1)
    with np.errstate(invalid="ignore"):
        degenerate = ~(
            np.isfinite(robust)
            & np.isfinite(naive)
            & (naive > 0)
            & (robust > GEE_DEGENERATE_RATIO * naive)
        )
    if degenerate.any():
        k = int(np.flatnonzero(degenerate)[0])
        raise GeeNotFittable(
            f"GEE: the robust variance of {names[k]} is {robust[k]:.3g}, not above "
            f"{GEE_DEGENERATE_RATIO:g} x its model-based variance {naive[k]:.3g} (a degenerate "
            "fit: no cluster's estimating equation varies in that direction, e.g. levels whose "
            "trials answer alike in every item)",
            _column_of(names[k]),
        )
    se = np.sqrt(robust)
    crit = float(sps.norm.ppf(0.5 + conf / 2.0))
    terms = []
    for i, name in enumerate(names):
        z = params[i] / se[i]
        terms.append(
            GeeTerm(
                name,
                float(params[i]),
                float(se[i]),
                float(z),
                float(2.0 * sps.norm.sf(abs(z))),
                float(params[i] - crit * se[i]),
                float(params[i] + crit * se[i]),
                float(math.exp(params[i])),
            )
        )
    converged = bool(fit.converged)
    return GeeFit(
        str(reference),
        tuple([str(reference)] + [a for a in arms if a != reference]),
        tuple(extra),
        tuple(str(v) for v in extra.values()),
        int(endog.size),
        int(groups.max() + 1),
        tuple(terms),
        float(np.asarray(model.cov_struct.dep_params).ravel()[0]),
        converged,
        tuple(caught),
    )


@dataclass(frozen=True)
class SeedSummary(_Result):
    """Mean over perturbation seeds with a t interval: ``mean ± t_{(1+conf)/2, k−1}·sd/√k``."""

    seeds: tuple[str, ...]
    values: tuple[float, ...]
    k: int
    mean: float
    sd: float
    lower: float
    upper: float
    conf: float
    method: str


def mean_over_seeds(values: Mapping[str, float], conf: float = 0.95) -> SeedSummary:
    """Mean and t interval over ``k >= 2`` per-seed values (sd with ddof = 1), seeds sorted."""
    if not 0.0 < conf < 1.0:
        raise McqError(f"conf: must be strictly between 0 and 1, got {conf}")
    pairs = sorted((str(k), float(v)) for k, v in values.items())
    if len(pairs) < 2:
        raise McqError(f"values: a t interval over seeds needs >= 2 seeds, got {len(pairs)}")
    for key, value in pairs:
        if not math.isfinite(value):
            raise McqError(f"values: seed {key!r} has a non-finite value")
    arr = np.array([v for _, v in pairs])
    k = arr.size
    mean = float(arr.mean())
    sd = float(np.std(arr, ddof=1))
    half = float(sps.t.ppf(0.5 + conf / 2.0, k - 1)) * sd / math.sqrt(k)
    return SeedSummary(
        tuple(p[0] for p in pairs),
        tuple(arr.tolist()),
        k,
        mean,
        sd,
        mean - half,
        mean + half,
        conf,
        "t",
    )


# --------------------------------------------------------------------------------------------
# 9. review sample


@dataclass(frozen=True)
class ReviewCase(_Result):
    """One (item, rep) where ``failed`` was wrong and ``succeeded`` right, with both responses."""

    item: str
    rep: int
    key_original: str
    failed_trial: str
    succeeded_trial: str
    failed_answer: str | None
    succeeded_answer: str | None
    failed_response: str | None
    succeeded_response: str | None
    order_key: str


@dataclass(frozen=True)
class ReviewSample(_Result):
    """A seeded sample of discordant cases for human coding (the seed codes 200 of them).

    Selection: every (item, rep) paired between the two conditions with ``failed`` wrong and
    ``succeeded`` right is a candidate; each gets ``order_key = SHA-256("<seed>|<item>|<rep>")``
    (hex); the ``size`` smallest keys are taken, in key order.
    """

    failed: Condition
    succeeded: Condition
    seed: int
    n_candidates: int
    size: int
    cases: tuple[ReviewCase, ...]


def review_sample(
    trials: TrialsLike,
    failed: CondLike,
    succeeded: CondLike,
    size: int,
    seed: int,
    letters: Sequence[str] = LETTERS,
) -> ReviewSample:
    """The declared review sample; responses come from the optional ``response`` column."""
    if isinstance(size, bool) or int(size) != size or size < 1:
        raise McqError(f"size: must be a positive integer, got {size!r}")
    if isinstance(seed, bool) or int(seed) != seed or seed < 0:
        raise McqError(f"seed: must be a non-negative integer, got {seed!r}")
    table = _checked(trials, letters)
    has_response = "response" in table.frame.columns
    cf, cs = _cond(failed), _cond(succeeded)
    columns = ["trial", "correct", "answer", "key_original"] + (
        ["response"] if has_response else []
    )
    joined, _, _ = _paired(table, cf, cs, columns)
    if not has_response:
        joined = joined.assign(response_a=None, response_b=None)
    mask = ~joined["correct_a"].to_numpy(dtype=bool) & joined["correct_b"].to_numpy(dtype=bool)
    cand = joined.loc[mask]
    cases = []
    for row in cand.itertuples(index=False):
        key = hashlib.sha256(f"{int(seed)}|{row.item}|{int(row.rep)}".encode()).hexdigest()

        def text(v: Any) -> str | None:
            return None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)

        cases.append(
            ReviewCase(
                str(row.item),
                int(row.rep),
                str(row.key_original_a),
                str(row.trial_a),
                str(row.trial_b),
                text(row.answer_a),
                text(row.answer_b),
                text(row.response_a),
                text(row.response_b),
                key,
            )
        )
    cases.sort(key=lambda c: c.order_key)
    chosen = tuple(cases[: int(size)])
    return ReviewSample(cf, cs, int(seed), len(cases), len(chosen), chosen)
