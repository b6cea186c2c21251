"""Pure statistical functions for PROMPT analyses (no I/O).

Every function takes numpy arrays, sequences or pandas DataFrames and returns a small frozen
dataclass whose fields are plain ``float``/``int``/``str``/``bool`` (or tuples of them, or of
other result dataclasses). ``as_dict()`` turns a result into JSON-ready values: tuples become
lists and NaN/±inf become ``None``. Inputs a test cannot run on raise :class:`StatsError` with a
message naming the input. The formulas and conventions are specified in ``docs/statistics.md``;
that page, not this module, is the contract an independent verifier implements.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import warnings
from collections.abc import Hashable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd
from pandas.api.types import infer_dtype

from analysis._deferred import DeferredModule

__all__ = [
    "BootstrapResult",
    "ChiSquareResult",
    "ConfusionMatrix",
    "ContrastResult",
    "EquivalenceResult",
    "FixedEffect",
    "McNemarResult",
    "MixedModelFit",
    "MultipleTestingResult",
    "NotApplicableError",
    "PositionBiasResult",
    "ProportionResult",
    "StatsError",
    "TTestResult",
    "WaldTestResult",
    "WilsonInterval",
    "bonferroni",
    "bootstrap_clustered",
    "bootstrap_diff",
    "bootstrap_replicates_diff",
    "canonical_share",
    "chi_square_gof",
    "confusion_matrix",
    "contrast",
    "draw_indices",
    "equivalence",
    "exactly_fitted",
    "flip_rate",
    "holm",
    "independent_t",
    "informative_variance_cis",
    "mcnemar",
    "mcnemar_paired",
    "mixed_model",
    "paired_t",
    "position_bias_tvd",
    "reml_loglik",
    "variance_component_cis",
    "wald_test",
    "wilson",
]

# imported on first use: describing a recorded result needs neither (analysis._deferred)
sps = DeferredModule("scipy.stats")
mixed_linear_model = DeferredModule("statsmodels.regression.mixed_linear_model")
sm_exceptions = DeferredModule("statsmodels.tools.sm_exceptions")

#: Upper bound on the number of index draws held in memory at once by the bootstraps.
CHUNK_ELEMENTS = 1 << 18
#: Below this many chunks a bootstrap is drawn and reduced on one thread (no pool to start).
PIPELINE_MIN_CHUNKS = 4
#: Index draws per ``rng.integers`` call when a chunk is filled (64 KiB: a heap block, reused).
DRAW_PIECE = 1 << 13

Sides = Literal["two-sided", "one-sided"]


class StatsError(Exception):
    """Raised for inputs a statistic cannot be computed on (empty arm, zero variance, ...)."""


class NotApplicableError(StatsError):
    """A test that does not apply to these data, for a reason the docs name (not a failure).

    A logistic GEE with separation or a degenerate robust variance, agreement with one judge:
    the result is recorded with status ``"not applicable"`` and the reason in its values
    (``docs/analysis.md`` §3), never as an error.
    """


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
"""Each result dataclass's field names, read once (aggregated answers come by the thousand)."""


def _json_value(value: Any) -> Any:
    kind = type(value)
    if kind is float:  # the common cases first (results hold them by the hundred thousand)
        return value if math.isfinite(value) else None
    if kind is int or kind is str or kind is bool or value is None:
        return value
    if isinstance(value, bool | str):
        return value
    names = _FIELD_NAMES.get(type(value))
    if names is None and is_dataclass(value) and not isinstance(value, type):
        names = _FIELD_NAMES.setdefault(type(value), tuple(f.name for f in fields(value)))
    if names is not None:
        return {name: _json_value(getattr(value, name)) for name in names}
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, tuple | list):
        return [_json_value(item) for item in value]
    raise TypeError(f"cannot convert {type(value).__name__} to JSON")


class _Result:
    """Mixin giving frozen result dataclasses a JSON-ready ``as_dict``."""

    def as_dict(self) -> dict[str, Any]:
        """Fields as JSON-ready values: tuples become lists, NaN and ±inf become ``None``."""
        converted = _json_value(self)
        assert isinstance(converted, dict)
        return converted


# --------------------------------------------------------------------------------------------
# input helpers


def _floats(values: npt.ArrayLike, name: str, *, min_n: int = 1) -> npt.NDArray[np.float64]:
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise StatsError(f"{name}: values are not numeric ({exc})") from exc
    if array.ndim != 1:
        raise StatsError(f"{name}: expected a one-dimensional array, got shape {array.shape}")
    if array.size < min_n:
        raise StatsError(f"{name}: needs at least {min_n} values, got {array.size}")
    if not np.all(np.isfinite(array)):
        raise StatsError(f"{name}: contains NaN or infinite values")
    return array


def _labels(values: Sequence[Hashable] | npt.ArrayLike, name: str) -> list[Hashable]:
    if isinstance(values, pd.Series | np.ndarray):
        return list(values.tolist())
    if isinstance(values, Sequence) and not isinstance(values, str | bytes):
        return list(values)
    raise StatsError(f"{name}: expected a sequence of labels")


def _seed(seed: int | str) -> int:
    try:
        value = int(seed)
    except (TypeError, ValueError) as exc:
        raise StatsError(f"seed: {seed!r} is not an integer") from exc
    if value < 0:
        raise StatsError(f"seed: must be non-negative, got {value}")
    return value


def _check_conf(conf: float) -> None:
    if not 0.0 < conf < 1.0:
        raise StatsError(f"conf: must be strictly between 0 and 1, got {conf}")


# --------------------------------------------------------------------------------------------
# proportions


@dataclass(frozen=True)
class WilsonInterval(_Result):
    """Wilson score interval for a binomial proportion (no continuity correction)."""

    successes: int
    n: int
    conf: float
    estimate: float
    lower: float
    upper: float


@functools.lru_cache(maxsize=64)
def _z_two_sided(conf: float) -> float:
    """``Φ⁻¹(½ + conf/2)``, computed once per level (a Wilson interval per cell adds up)."""
    return float(sps.norm.ppf(0.5 + conf / 2.0))


def wilson(successes: int, n: int, conf: float = 0.95) -> WilsonInterval:
    """Wilson score interval for ``successes`` out of ``n``; ``n == 0`` raises StatsError."""
    _check_conf(conf)
    if isinstance(successes, bool) or isinstance(n, bool):
        raise StatsError("successes, n: must be integers, not booleans")
    successes, n = int(successes), int(n)
    if n <= 0:
        raise StatsError(f"n: a proportion needs n >= 1 trials, got {n}")
    if not 0 <= successes <= n:
        raise StatsError(f"successes: must be between 0 and n={n}, got {successes}")
    z = _z_two_sided(conf)
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2.0 * n)) / denom
    half = (z / denom) * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    lower = 0.0 if successes == 0 else max(0.0, centre - half)
    upper = 1.0 if successes == n else min(1.0, centre + half)
    return WilsonInterval(successes, n, conf, p, lower, upper)


# --------------------------------------------------------------------------------------------
# t-tests


@dataclass(frozen=True)
class TTestResult(_Result):
    """A t-test: difference of means (x − y), t, df, p-values, CI and a standardized effect."""

    method: str
    n_x: int
    n_y: int
    mean_x: float
    mean_y: float
    difference: float
    se: float
    t: float
    df: float
    p: float
    p_one_sided: float
    ci_lower: float
    ci_upper: float
    effect_size: float
    effect_size_name: str


def _t_result(
    method: str,
    nx: int,
    ny: int,
    mx: float,
    my: float,
    se: float,
    df: float,
    effect: float,
    effect_name: str,
) -> TTestResult:
    diff = mx - my
    t = diff / se
    crit = float(sps.t.ppf(0.975, df))
    return TTestResult(
        method=method,
        n_x=nx,
        n_y=ny,
        mean_x=mx,
        mean_y=my,
        difference=diff,
        se=se,
        t=t,
        df=df,
        p=float(2.0 * sps.t.sf(abs(t), df)),
        p_one_sided=float(sps.t.sf(t, df)),
        ci_lower=diff - crit * se,
        ci_upper=diff + crit * se,
        effect_size=effect,
        effect_size_name=effect_name,
    )


def paired_t(x: npt.ArrayLike, y: npt.ArrayLike) -> TTestResult:
    """Paired t-test on ``d = x − y`` (df = n − 1) with Cohen's d_z = mean(d) / sd(d, ddof=1)."""
    xa = _floats(x, "x", min_n=2)
    ya = _floats(y, "y", min_n=2)
    if xa.size != ya.size:
        raise StatsError(f"x, y: paired samples need equal lengths, got {xa.size} and {ya.size}")
    d = xa - ya
    sd = float(np.std(d, ddof=1))
    if sd == 0.0:
        raise StatsError("x - y: the paired differences have zero variance")
    n = d.size
    return _t_result(
        "paired",
        n,
        n,
        float(xa.mean()),
        float(ya.mean()),
        sd / math.sqrt(n),
        float(n - 1),
        float(d.mean()) / sd,
        "d_z",
    )


def independent_t(x: npt.ArrayLike, y: npt.ArrayLike, *, welch: bool = True) -> TTestResult:
    """Two-sample t-test of mean(x) − mean(y); Welch by default, Student with ``welch=False``.

    The effect size is always Cohen's d with the pooled SD,
    ``sqrt(((n_x−1)s_x² + (n_y−1)s_y²) / (n_x+n_y−2))``, whichever test is chosen.
    """
    xa = _floats(x, "x", min_n=2)
    ya = _floats(y, "y", min_n=2)
    nx, ny = xa.size, ya.size
    vx, vy = float(np.var(xa, ddof=1)), float(np.var(ya, ddof=1))
    if vx == 0.0 and vy == 0.0:
        raise StatsError("x, y: both samples have zero variance")
    pooled_var = ((nx - 1) * vx + (ny - 1) * vy) / (nx + ny - 2)
    d = (float(xa.mean()) - float(ya.mean())) / math.sqrt(pooled_var)
    if welch:
        ax, ay = vx / nx, vy / ny
        se = math.sqrt(ax + ay)
        df = (ax + ay) ** 2 / (ax**2 / (nx - 1) + ay**2 / (ny - 1))
        method = "welch"
    else:
        se = math.sqrt(pooled_var * (1.0 / nx + 1.0 / ny))
        df = float(nx + ny - 2)
        method = "student"
    return _t_result(method, nx, ny, float(xa.mean()), float(ya.mean()), se, df, d, "cohen_d")


# --------------------------------------------------------------------------------------------
# bootstrap


@dataclass(frozen=True)
class BootstrapResult(_Result):
    """A percentile bootstrap CI; ``estimate`` is the statistic on the original data."""

    method: str
    estimate: float
    lower: float
    upper: float
    conf: float
    iterations: int
    seed: int
    n_x: int
    n_y: int
    n_clusters: int


def _generator(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


def draw_indices(rng: np.random.Generator, n: int, out: npt.NDArray[np.int64]) -> None:
    """Fill ``out`` (C order) with ``rng.integers(0, n, size=out.shape)``'s draws, the same stream.

    Drawn :data:`DRAW_PIECE` at a time into ``out``: the stream is one sequence whatever the
    calls' sizes, and no fresh array of the chunk's size is made per chunk. (``ledger analyze``
    fixes glibc's mmap threshold at 128 KiB, so every fresh chunk was a new mapping whose pages
    faulted in one by one: at 10^5 trials most of the bootstraps' system time, issue 41.)
    """
    flat = out.reshape(-1)
    for start in range(0, flat.size, DRAW_PIECE):
        stop = min(flat.size, start + DRAW_PIECE)
        flat[start:stop] = rng.integers(0, n, size=stop - start)


def _resampled_means(
    rng: np.random.Generator, values: npt.NDArray[np.float64], iterations: int
) -> npt.NDArray[np.float64]:
    """Means of ``iterations`` resamples; indices drawn as one (iterations, n) C-order block.

    The block is drawn in cache-sized chunks of rows, in order, on this thread (so the stream is
    the documented one), into two index buffers made once (:func:`draw_indices`); each chunk is
    gathered into one value buffer (``np.take``) and averaged row by row, as
    ``values[idx].mean(axis=1)`` does. With several chunks, each chunk's gather-and-mean runs on
    a second thread while the next chunk is drawn: numpy releases the GIL in both, so on two
    cores the reduction hides behind the draws. At most two chunks are alive at a time.
    """
    n = values.size
    out = np.empty(iterations, dtype=np.float64)
    rows = max(1, CHUNK_ELEMENTS // n)
    shape = (min(rows, iterations), n)
    buffers = [np.empty(shape, dtype=np.int64), np.empty(shape, dtype=np.int64)]
    gathered = np.empty(shape, dtype=np.float64)

    def reduce(start: int, idx: npt.NDArray[np.int64]) -> None:
        block = gathered[: idx.shape[0]]
        np.take(values, idx, out=block, mode="clip")  # every index is in range: no clipping
        out[start : start + idx.shape[0]] = block.mean(axis=1)

    starts = range(0, iterations, rows)
    if len(starts) < PIPELINE_MIN_CHUNKS:
        for start in starts:
            idx = buffers[0][: min(rows, iterations - start)]
            draw_indices(rng, n, idx)
            reduce(start, idx)
        return out
    with ThreadPoolExecutor(max_workers=1) as worker:
        pending: Future[None] | None = None
        for k, start in enumerate(starts):
            idx = buffers[k % 2][: min(rows, iterations - start)]  # not the one being reduced
            draw_indices(rng, n, idx)
            if pending is not None:
                pending.result()
            pending = worker.submit(reduce, start, idx)
        assert pending is not None
        pending.result()
    return out


def _quantile_levels(conf: float) -> list[float]:
    """[(1 − conf)/2, (1 + conf)/2], each rounded to 12 decimals (0.95 → exactly 0.025, 0.975)."""
    return [round((1.0 - conf) / 2.0, 12), round((1.0 + conf) / 2.0, 12)]


def _percentile_ci(replicates: npt.NDArray[np.float64], conf: float) -> tuple[float, float]:
    lo, hi = np.quantile(replicates, _quantile_levels(conf))
    return float(lo), float(hi)


def _check_iterations(iterations: int) -> int:
    if isinstance(iterations, bool) or int(iterations) < 1:
        raise StatsError(f"iterations: must be a positive integer, got {iterations!r}")
    return int(iterations)


def bootstrap_replicates_diff(
    x: npt.ArrayLike, y: npt.ArrayLike, iterations: int, seed: int | str
) -> npt.NDArray[np.float64]:
    """The ``iterations`` bootstrap replicates of mean(x*) − mean(y*) used by bootstrap_diff."""
    xa = _floats(x, "x")
    ya = _floats(y, "y")
    rng = _generator(_seed(seed))
    n_iter = _check_iterations(iterations)
    means_x = _resampled_means(rng, xa, n_iter)
    means_y = _resampled_means(rng, ya, n_iter)
    return means_x - means_y


def bootstrap_diff(
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    iterations: int = 5000,
    seed: int | str = 0,
    conf: float = 0.95,
) -> BootstrapResult:
    """Unpaired percentile bootstrap CI of mean(x) − mean(y), resampling within each arm.

    Draw order (numpy ``Generator(PCG64(int(seed)))``): first every x index, as if by one call
    ``rng.integers(0, n_x, size=(iterations, n_x))``, then every y index, as if by
    ``rng.integers(0, n_y, size=(iterations, n_y))``; row ``i`` is iteration ``i``. The work is
    chunked by rows, which does not change the stream. The CI is ``np.quantile`` (linear
    interpolation) of the replicates at round((1−conf)/2, 12) and round((1+conf)/2, 12).
    """
    _check_conf(conf)
    xa = _floats(x, "x")
    ya = _floats(y, "y")
    seed_value = _seed(seed)
    n_iter = _check_iterations(iterations)
    replicates = bootstrap_replicates_diff(xa, ya, n_iter, seed_value)
    lower, upper = _percentile_ci(replicates, conf)
    return BootstrapResult(
        "unpaired-percentile",
        float(xa.mean()) - float(ya.mean()),
        lower,
        upper,
        conf,
        n_iter,
        seed_value,
        xa.size,
        ya.size,
        0,
    )


def bootstrap_clustered(
    values: npt.ArrayLike,
    questions: Sequence[Hashable] | npt.ArrayLike,
    runs: Sequence[Hashable] | npt.ArrayLike,
    iterations: int = 1000,
    seed: int | str = 0,
    conf: float = 0.95,
    *,
    unit: Literal["observation", "question"] = "observation",
) -> BootstrapResult:
    """Percentile bootstrap CI of a mean over (question, run) observations.

    ``unit="observation"`` (default) follows paper 001: each (question, run) pair is one
    exchangeable observation; every iteration draws N indices uniformly with replacement from
    the N observations (``rng.integers(0, N, size=(iterations, N))`` in C order) and the
    replicate is the mean of the drawn values. ``unit="question"`` is a cluster bootstrap: the
    Q distinct questions (sorted by ``str``) are drawn with ``rng.integers(0, Q, size=(iterations,
    Q))`` and the replicate is (sum of the drawn questions' values) / (their observation count).
    Each (question, run) pair must occur once. ``n_x`` is N, ``n_clusters`` is Q.
    """
    _check_conf(conf)
    vals = _floats(values, "values")
    qs = _labels(questions, "questions")
    rs = _labels(runs, "runs")
    if not len(qs) == len(rs) == vals.size:
        raise StatsError(
            f"values, questions, runs: lengths differ ({vals.size}, {len(qs)}, {len(rs)})"
        )
    pairs = set(zip(qs, rs, strict=True))
    if len(pairs) != vals.size:
        raise StatsError("questions, runs: a (question, run) pair occurs more than once")
    seed_value = _seed(seed)
    n_iter = _check_iterations(iterations)
    rng = _generator(seed_value)
    keys = sorted({str(q) for q in qs})
    if len(keys) != len(set(qs)):
        raise StatsError("questions: two question ids have the same string form")
    if unit == "observation":
        replicates = _resampled_means(rng, vals, n_iter)
    elif unit == "question":
        position = {key: i for i, key in enumerate(keys)}
        codes = np.array([position[str(q)] for q in qs], dtype=np.intp)
        sums = np.bincount(codes, weights=vals, minlength=len(keys))
        counts = np.bincount(codes, minlength=len(keys)).astype(np.float64)
        n_q = len(keys)
        replicates = np.empty(n_iter, dtype=np.float64)
        rows = max(1, CHUNK_ELEMENTS // n_q)
        for start in range(0, n_iter, rows):
            m = min(rows, n_iter - start)
            idx = rng.integers(0, n_q, size=(m, n_q))
            replicates[start : start + m] = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    else:
        raise StatsError(f"unit: must be 'observation' or 'question', got {unit!r}")
    lower, upper = _percentile_ci(replicates, conf)
    return BootstrapResult(
        f"{unit}-percentile",
        float(vals.mean()),
        lower,
        upper,
        conf,
        n_iter,
        seed_value,
        vals.size,
        0,
        len(keys),
    )


# --------------------------------------------------------------------------------------------
# linear mixed model


@dataclass(frozen=True)
class FixedEffect(_Result):
    """One fixed-effect coefficient with a Wald (normal) CI and two-sided p."""

    name: str
    estimate: float
    se: float
    z: float
    p: float
    ci_lower: float
    ci_upper: float


#: How :func:`mixed_model` computes the variance components' CIs (see ``docs/statistics.md``).
VARIANCE_CI_METHOD = "wald-log-observed-reml"


@dataclass(frozen=True)
class MixedModelFit(_Result):
    """REML fit of ``outcome ~ arm (+ factors) + (1 | group)``, treatment coding.

    ``fixed_effects[0]`` is the intercept (mean of the reference arm); then one coefficient
    ``arm[T.<level>]`` per other arm, in ``arms`` order; then, for each extra fixed factor
    (``factors``, e.g. ``("model",)``, with reference levels ``factor_references``), one
    coefficient ``<factor>[T.<level>]`` per other level sorted as strings; then, with
    ``interaction``, one ``arm[T.<a>]:<factor>[T.<level>]`` per observed cell. ``fe_cov`` is
    the fixed effects' covariance matrix in the same order. ``singular`` flags a boundary fit
    (group or residual variance ~ 0, or a non-finite covariance); ``warnings`` holds every
    warning caught. ``group_variance_ci_*`` and ``residual_variance_ci_*`` are 95% Wald
    intervals on the log-variance scale from the observed REML information
    (``variance_ci_method``); NaN when the fit is singular or the information is not positive
    definite, and NaN with ``variance_ci_note`` saying why when an interval spans more than
    :data:`MAX_VARIANCE_CI_RATIO` (:func:`informative_variance_cis`).
    """

    outcome: str
    arm_col: str
    group_col: str
    reference: str
    arms: tuple[str, ...]
    n_obs: int
    n_groups: int
    fixed_effects: tuple[FixedEffect, ...]
    fe_cov: tuple[tuple[float, ...], ...]
    group_variance: float
    residual_variance: float
    icc: float
    log_likelihood: float
    converged: bool
    singular: bool
    warnings: tuple[str, ...]
    group_variance_ci_lower: float = math.nan
    group_variance_ci_upper: float = math.nan
    residual_variance_ci_lower: float = math.nan
    residual_variance_ci_upper: float = math.nan
    variance_ci_method: str = VARIANCE_CI_METHOD
    variance_ci_note: str = ""
    factors: tuple[str, ...] = ()
    factor_references: tuple[str, ...] = ()
    interaction: bool = False

    def as_dict(self) -> dict[str, Any]:
        """Fields as JSON-ready values, as :meth:`_Result.as_dict`.

        ``factors``, ``factor_references`` and ``interaction`` appear only when the model has
        an extra factor, and ``variance_ci_note`` only when an interval was withheld
        (:func:`informative_variance_cis`), so other fits keep the layout they always had.
        """
        out = super().as_dict()
        if not self.variance_ci_note:
            out.pop("variance_ci_note")
        if not self.factors:
            for name in ("factors", "factor_references", "interaction"):
                out.pop(name)
        return out


#: Variance components below this fraction of the outcome's variance count as zero (singular).
SINGULAR_TOLERANCE = 1e-6


def _block_product(
    n: npt.NDArray[np.float64], left: tuple[Any, Any], right: tuple[Any, Any]
) -> tuple[Any, Any]:
    """Product of per-group matrices ``a·I + b·J`` (``J`` all ones, size n): closed under ·."""
    a1, b1 = left
    a2, b2 = right
    return a1 * a2, a1 * b2 + b1 * a2 + n * b1 * b2


@dataclass(frozen=True)
class RemlParts:
    """What :func:`reml_loglik` needs of the data, computed once: group sizes and sums."""

    n: npt.NDArray[np.float64]
    sx: npt.NDArray[np.float64]
    sy: npt.NDArray[np.float64]
    xtx: npt.NDArray[np.float64]
    xty: npt.NDArray[np.float64]
    yty: float


def reml_parts(
    y: npt.NDArray[np.float64], exog: npt.NDArray[np.float64], codes: npt.NDArray[np.intp]
) -> RemlParts:
    """Per-group sizes and sums (``Σ_j x``, ``Σ_j y``) and ``XᵀX``, ``Xᵀy``, ``yᵀy``.

    The sums of a group are accumulated in row order (``numpy.bincount``), as ``np.add.at``
    accumulates them, so the likelihood is the same number whichever computes it.
    """
    n_groups = int(codes.max()) + 1
    n = np.bincount(codes, minlength=n_groups).astype(np.float64)
    sx = np.zeros((n_groups, exog.shape[1]))
    for k in range(exog.shape[1]):
        sx[:, k] = np.bincount(codes, weights=exog[:, k], minlength=n_groups)
    sy = np.asarray(np.bincount(codes, weights=y, minlength=n_groups), dtype=np.float64)
    return RemlParts(n, sx, sy, exog.T @ exog, exog.T @ y, float(y @ y))


def reml_loglik(
    y: npt.NDArray[np.float64],
    exog: npt.NDArray[np.float64],
    codes: npt.NDArray[np.intp],
    group_var: float,
    resid_var: float,
    parts: RemlParts | None = None,
) -> float:
    """REML log-likelihood of the random-intercept model, without the ``2π`` constant.

    ``−½[log|V| + log|XᵀV⁻¹X| + (y − Xβ̂)ᵀV⁻¹(y − Xβ̂)]`` with ``V_j = σ²_e·I + σ²_g·J``;
    ``group_var = 0`` is allowed (the ordinary least-squares model). ``parts``
    (:func:`reml_parts` of the same data) saves recomputing the sums on every evaluation.
    """
    g, e = float(group_var), float(resid_var)
    if parts is None:
        parts = reml_parts(y, exog, codes)
    n, sx, sy = parts.n, parts.sx, parts.sy
    c = g / (e + n * g)  # V_j⁻¹ = (I − c_j·J)/σ²_e
    xvx = (parts.xtx - np.einsum("j,jk,jl->kl", c, sx, sx)) / e
    xvy = (parts.xty - sx.T @ (c * sy)) / e
    yvy = (parts.yty - float(np.sum(c * sy * sy))) / e
    beta = np.linalg.solve(xvx, xvy)
    logdet_v = float(np.sum((n - 1.0) * math.log(e) + np.log(e + n * g)))
    return -0.5 * (logdet_v + float(np.linalg.slogdet(xvx)[1]) + yvy - float(xvy @ beta))


def _group_sums(
    exog: npt.NDArray[np.float64],
    codes: npt.NDArray[np.intp],
    n_groups: int,
    *,
    cross: bool = True,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per-group ``Σ_j x·xᵀ`` (``(G, p, p)``; zeros unless ``cross``) and ``Σ_j x`` (``(G, p)``).

    One ``numpy.bincount`` per column (pair): the same row-order sums as ``np.add.at``, bit
    for bit, without its per-element overhead.
    """
    p = exog.shape[1]
    sums = np.zeros((n_groups, p))
    for k in range(p):
        sums[:, k] = np.bincount(codes, weights=exog[:, k], minlength=n_groups)
    xtx = np.zeros((n_groups, p, p))
    if cross:
        for k in range(p):
            for m in range(k, p):
                xtx[:, k, m] = np.bincount(
                    codes, weights=exog[:, k] * exog[:, m], minlength=n_groups
                )
                xtx[:, m, k] = xtx[:, k, m]
    return xtx, sums


def gls_at(
    y: npt.NDArray[np.float64],
    exog: npt.NDArray[np.float64],
    codes: npt.NDArray[np.intp],
    group_var: float,
    resid_var: float,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``β̂ = (XᵀV⁻¹X)⁻¹XᵀV⁻¹y`` and its REML covariance ``(XᵀV⁻¹X)⁻¹`` at given variances.

    ``(XᵀV⁻¹X)⁻¹`` is the inverse of the negative Hessian of the log-likelihood in β (the
    covariance lme4 and nlme report); per-group sums with ``V_j⁻¹ = (I − c_j·J)/σ²_e``.
    """
    g, e = float(group_var), float(resid_var)
    n_groups = int(codes.max()) + 1
    n = np.bincount(codes, minlength=n_groups).astype(np.float64)
    c = g / (e + n * g)
    sx = _group_sums(exog, codes, n_groups, cross=False)[1]
    sy = np.bincount(codes, weights=y, minlength=n_groups)
    xvx = (exog.T @ exog - np.einsum("j,jk,jl->kl", c, sx, sx)) / e
    xvy = (exog.T @ y - sx.T @ (c * sy)) / e
    cov = np.linalg.inv(xvx)
    cov = (cov + cov.T) / 2.0
    return cov @ xvy, cov


def reml_derivatives(
    y: npt.NDArray[np.float64],
    exog: npt.NDArray[np.float64],
    codes: npt.NDArray[np.intp],
    group_var: float,
    resid_var: float,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Score, Hessian and expected information of ``l_R`` in ``θ = (σ²_g, σ²_e)``, analytic.

    ``∂l_R/∂θ_i = −½tr(PV_i) + ½yᵀPV_iPy``, ``∂²l_R/∂θ_i∂θ_k = ½tr(PV_iPV_k) −
    yᵀPV_iPV_kPy`` and the expected information ``½tr(PV_iPV_k)``, with ``V_g = J``,
    ``V_e = I`` per group and ``P = V⁻¹ − V⁻¹X(XᵀV⁻¹X)⁻¹XᵀV⁻¹``: every per-group matrix is
    ``a·I + b·J``, so no ``n × n`` matrix is formed. ``σ²_g = 0`` is allowed (``σ²_e > 0``).
    """
    g, e = float(group_var), float(resid_var)
    n_groups = int(codes.max()) + 1
    n = np.bincount(codes, minlength=n_groups).astype(np.float64)
    xtx, s = _group_sums(exog, codes, n_groups)
    ones = np.ones_like(n)
    zeros = np.zeros_like(n)
    w = (ones / e, -g / (e * (e + n * g)))  # V_j⁻¹
    derivs = ((zeros, ones), (ones, zeros))  # ∂V_j/∂σ²_g = J, ∂V_j/∂σ²_e = I

    def x_b_x(block: tuple[Any, Any]) -> npt.NDArray[np.float64]:
        a, b = block
        return np.asarray(np.einsum("j,jkl->kl", a, xtx) + np.einsum("j,jk,jl->kl", b, s, s))

    def apply(block: tuple[Any, Any], vec: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        a, b = block
        sums = np.bincount(codes, weights=vec, minlength=n_groups)
        return np.asarray(a[codes] * vec + b[codes] * sums[codes])

    def trace(block: tuple[Any, Any]) -> float:
        a, b = block
        return float(np.sum(n * (a + b)))

    m = np.linalg.inv(x_b_x(w))
    beta = m @ (exog.T @ apply(w, y))
    q = apply(w, y - exog @ beta)  # P·y
    wxt = [x_b_x(_block_product(n, _block_product(n, w, v), w)) for v in derivs]
    u = [apply(v, q) for v in derivs]  # V_i·P·y

    def p_form(left: npt.NDArray[np.float64], right: npt.NDArray[np.float64]) -> float:
        xl, xr = exog.T @ apply(w, left), exog.T @ apply(w, right)
        return float(left @ apply(w, right) - xl @ m @ xr)

    grad = np.zeros(2)
    hess = np.zeros((2, 2))
    expected = np.zeros((2, 2))
    for i in range(2):
        wvi = _block_product(n, w, derivs[i])
        grad[i] = -0.5 * (trace(wvi) - float(np.trace(m @ wxt[i]))) + 0.5 * float(q @ u[i])
        for k in range(2):
            wvk = _block_product(n, w, derivs[k])
            tr_w = trace(_block_product(n, wvi, wvk))
            mid = x_b_x(_block_product(n, _block_product(n, wvi, wvk), w))
            tr_p = tr_w - 2.0 * float(np.trace(m @ mid)) + float(np.trace(m @ wxt[i] @ m @ wxt[k]))
            expected[i, k] = 0.5 * tr_p
            hess[i, k] = 0.5 * tr_p - p_form(u[i], u[k])
    return grad, hess, expected


def variance_component_cis(
    y: npt.NDArray[np.float64],
    exog: npt.NDArray[np.float64],
    codes: npt.NDArray[np.intp],
    group_var: float,
    resid_var: float,
    conf: float = 0.95,
) -> tuple[float, float, float, float]:
    """Wald CIs on the log scale for (σ²_g, σ²_e) of a random-intercept model, REML.

    ``codes`` are group indices ``0..G-1``. The observed information is the negative Hessian
    of the REML log-likelihood with respect to ``(log σ²_g, log σ²_e)`` at the estimates,
    from :func:`reml_derivatives` (analytic) by the chain rule. Returns ``(g_lower, g_upper,
    e_lower, e_upper)``; all NaN when a variance is not positive or the information is not
    positive definite.
    """
    nan4 = (math.nan, math.nan, math.nan, math.nan)
    g, e = float(group_var), float(resid_var)
    if not (g > 0 and e > 0 and math.isfinite(g) and math.isfinite(e)):
        return nan4
    try:
        grad, hess, _ = reml_derivatives(y, exog, codes, g, e)
        theta = np.array([g, e])
        info = -(np.outer(theta, theta) * hess + np.diag(theta * grad))
        if not np.all(np.isfinite(info)) or np.any(np.linalg.eigvalsh(info) <= 0):
            return nan4
        se = np.sqrt(np.diag(np.linalg.inv(info)))
    except (np.linalg.LinAlgError, FloatingPointError, ZeroDivisionError):
        return nan4
    crit = float(sps.norm.ppf(0.5 + conf / 2.0))

    def exp(x: float) -> float:  # a bound beyond a double is +inf: the interval is withheld
        return math.exp(x) if x < 709.0 else math.inf

    return (
        g * exp(-crit * se[0]),
        g * exp(crit * se[0]),
        e * exp(-crit * se[1]),
        e * exp(crit * se[1]),
    )


#: A variance component's Wald interval is withheld when its upper bound exceeds its lower by
#: more than this factor (``docs/statistics.md``, "Variance-component CIs").
MAX_VARIANCE_CI_RATIO = 1e8


def informative_variance_cis(
    cis: tuple[float, float, float, float],
) -> tuple[tuple[float, float, float, float], str]:
    """The intervals of :func:`variance_component_cis`, each withheld when not informative.

    A component's interval is kept when both bounds are finite, the lower positive and the
    upper at most :data:`MAX_VARIANCE_CI_RATIO` times the lower; otherwise both its bounds
    become NaN and the returned note (empty when nothing was withheld) names it. An interval
    NaN already (a singular fit) is left as it is, without a note.
    """
    out = list(cis)
    withheld = []
    for k, name in ((0, "group"), (2, "residual")):
        lower, upper = cis[k], cis[k + 1]
        if math.isnan(lower) and math.isnan(upper):
            continue
        if not (
            math.isfinite(lower)
            and math.isfinite(upper)
            and lower > 0
            and upper <= MAX_VARIANCE_CI_RATIO * lower
        ):
            out[k] = out[k + 1] = math.nan
            withheld.append(name)
    note = ""
    if withheld:
        note = (
            f"the {' and '.join(withheld)} variance's Wald interval spans more than a "
            f"factor {MAX_VARIANCE_CI_RATIO:g} (its log-scale standard error is too large "
            "for the interval to say anything about the variance's size): withheld"
        )
    return (out[0], out[1], out[2], out[3]), note


#: Largest Newton decrement ``½·gᵀ(−H)⁻¹g`` (in ``log σ²``, log-likelihood units) of a recorded
#: mixed model: ``sqrt(2δ)`` standard errors from the maximum at any sample size (1e-9: 4.5e-5
#: standard errors), a thousand times inside the verifier's 1e-6 (``docs/statistics.md``).
REML_DECREMENT_TOL = 1e-9


def _log_newton(
    y: npt.NDArray[np.float64],
    exog: npt.NDArray[np.float64],
    codes: npt.NDArray[np.intp],
    group_var: float,
    resid_var: float,
    free: Sequence[int],
) -> tuple[float, npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``(decrement, score, step)`` in the log of the ``free`` variances.

    The Newton step ``(−H)⁻¹g`` and its decrement ``½·gᵀ(−H)⁻¹g``; where ``−H`` is not
    positive definite, the decrement is ``inf`` and the step Fisher scoring's (the expected
    information, positive definite).
    """
    theta = np.array([group_var, resid_var])
    grad, hess, expected = reml_derivatives(y, exog, codes, group_var, resid_var)
    idx = list(free)
    scale = np.outer(theta, theta)[np.ix_(idx, idx)]
    log_grad = theta[idx] * grad[idx]
    log_hess = scale * hess[np.ix_(idx, idx)] + np.diag(log_grad)
    try:
        chol = np.linalg.cholesky(-log_hess)
    except np.linalg.LinAlgError:
        fisher = np.linalg.solve(scale * expected[np.ix_(idx, idx)], log_grad)
        return math.inf, log_grad, np.asarray(fisher, dtype=np.float64)
    step = np.asarray(np.linalg.solve(chol.T, np.linalg.solve(chol, log_grad)), dtype=np.float64)
    return 0.5 * float(log_grad @ step), log_grad, step


def _polish_reml(
    y: npt.NDArray[np.float64],
    exog: npt.NDArray[np.float64],
    codes: npt.NDArray[np.intp],
    group_var: float,
    resid_var: float,
) -> tuple[float, float]:
    """Newton steps in ``(log σ²_g, log σ²_e)`` on the analytic derivatives to the maximum.

    From an interior point near the maximum (an optimiser's answer); each step is halved
    until ``l_R`` grows and capped at a factor ``e²`` (Fisher scoring's step where ``−H`` is
    not positive definite); stops when the decrement is below 1e-13, when no step gains, when
    ``σ²_g`` falls to the boundary, or after 50 steps.
    """
    parts = reml_parts(y, exog, codes)
    g, e = float(group_var), float(resid_var)
    floor = SINGULAR_TOLERANCE * float(np.var(y, ddof=1))
    for _ in range(50):
        if not (g > floor and e > 0):
            break
        decrement, score, step = _log_newton(y, exog, codes, g, e, (0, 1))
        if not (
            decrement > 1e-13 and 0.5 * float(score @ step) > 1e-13 and np.all(np.isfinite(step))
        ):
            break
        step = step * min(1.0, 2.0 / float(np.max(np.abs(step))))
        f0 = reml_loglik(y, exog, codes, g, e, parts)
        for scale in 0.5 ** np.arange(12):
            cg, ce = g * math.exp(scale * step[0]), e * math.exp(scale * step[1])
            if reml_loglik(y, exog, codes, cg, ce, parts) > f0:
                g, e = cg, ce
                break
        else:
            break
    return g, e


def check_reml_maximum(
    y: npt.NDArray[np.float64],
    exog: npt.NDArray[np.float64],
    codes: npt.NDArray[np.intp],
    group_var: float,
    resid_var: float,
    label: str,
) -> None:
    """Raise StatsError unless ``(σ²_g, σ²_e)`` is the REML maximum (``docs/statistics.md``).

    With ``σ²_g`` above the boundary (``SINGULAR_TOLERANCE × var(y)``): a negative definite
    Hessian in the log variances and a Newton decrement ``½·gᵀ(−H)⁻¹g`` at most
    :data:`REML_DECREMENT_TOL`. On the boundary: the decrement in ``log σ²_e`` alone, and
    ``σ²_g`` must not gain more than that by leaving it (``½·s²/I``, ``s > 0`` its score and
    ``I`` its expected information). ``label`` names the model in the message.
    """
    g, e = float(group_var), float(resid_var)
    floor = SINGULAR_TOLERANCE * float(np.var(y, ddof=1))
    at = f"σ²_g = {g:.6g}, σ²_e = {e:.6g}"
    with np.errstate(all="ignore"):
        free = (0, 1) if g > floor else (1,)
        try:
            decrement, score, _ = _log_newton(y, exog, codes, g, e, free)
            gain = 0.0
            if g <= floor:
                grad, _, expected = reml_derivatives(y, exog, codes, g, e)
                if grad[0] > 0:
                    gain = 0.5 * grad[0] ** 2 / expected[0, 0] if expected[0, 0] > 0 else math.inf
        except (np.linalg.LinAlgError, ValueError, ZeroDivisionError, FloatingPointError) as exc:
            raise StatsError(
                f"{label}: the REML derivatives at ({at}) cannot be evaluated ({exc}); not recorded"
            ) from exc
    if not math.isfinite(decrement):
        raise StatsError(
            f"{label}: ({at}) is not a REML maximum (the observed information "
            "there is not positive definite); not recorded"
        )
    if decrement > REML_DECREMENT_TOL:
        raise StatsError(
            f"{label}: ({at}) is short of the REML maximum by a Newton decrement of "
            f"{decrement:.3g} (> {REML_DECREMENT_TOL:g}; score in log variance "
            + ", ".join(f"{float(v):.3g}" for v in score)
            + "); not recorded"
        )
    if gain > REML_DECREMENT_TOL:
        raise StatsError(
            f"{label}: ({at}) is not a REML maximum: σ²_g on the boundary would "
            f"gain {gain:.3g} in l_R by leaving it (> {REML_DECREMENT_TOL:g}); "
            "not recorded"
        )


def _boundary_at_least_as_likely(
    y: npt.NDArray[np.float64],
    exog: npt.NDArray[np.float64],
    codes: npt.NDArray[np.intp],
    group_var: float,
    resid_var: float,
) -> bool:
    """True when σ²_g = 0 (σ²_e = RSS/(n − p), its REML optimum there) is as likely as the fit."""
    if not (group_var > 0 and resid_var > 0):
        return True
    with np.errstate(all="ignore"):
        try:
            beta, *_ = np.linalg.lstsq(exog, y, rcond=None)
            rss = float(np.sum((y - exog @ beta) ** 2))
            at_zero = reml_loglik(y, exog, codes, 0.0, rss / (y.size - exog.shape[1]))
            at_fit = reml_loglik(y, exog, codes, group_var, resid_var)
        except (np.linalg.LinAlgError, ValueError, ZeroDivisionError):
            return False
    if not (math.isfinite(at_zero) and math.isfinite(at_fit)):
        return False
    return at_zero >= at_fit - 1e-9 * max(1.0, abs(at_fit))


def _reml_maximum(
    y: npt.NDArray[np.float64],
    exog: npt.NDArray[np.float64],
    codes: npt.NDArray[np.intp],
    group_var: float,
    resid_var: float,
) -> tuple[float, float, float] | None:
    """The REML maximum near statsmodels' answer: ``(σ²_g, σ²_e, log-likelihood)`` or None.

    statsmodels stops short of the maximum (by ~1e-8 in the interior; further near the
    boundary, and sometimes far with a 0/1 outcome). Starting from its point, L-BFGS-B in
    ``(log σ²_g, log σ²_e)`` on :func:`reml_loglik`; the boundary ``σ²_g = 0`` with
    ``σ²_e = RSS/(n − p)`` is a candidate too. The best of the three is returned (with the
    ``−(n − p)/2·log 2π`` constant statsmodels' ``llf`` has); None when nothing is finite.
    """
    n, p = int(exog.shape[0]), int(exog.shape[1])
    const = -0.5 * float(n - p) * math.log(2 * math.pi)
    parts = reml_parts(y, exog, codes)

    def ll(g: float, e: float) -> float:
        try:
            return float(reml_loglik(y, exog, codes, g, e, parts)) + const
        except (np.linalg.LinAlgError, ValueError, ZeroDivisionError, FloatingPointError):
            return -math.inf

    candidates: list[tuple[float, float, float]] = [
        (ll(group_var, resid_var), group_var, resid_var)
    ]
    beta, *_ = np.linalg.lstsq(exog, y, rcond=None)
    rss = float(np.sum((y - exog @ beta) ** 2))
    if rss > 0:
        candidates.append((ll(0.0, rss / (n - p)), 0.0, rss / (n - p)))
    start = np.log([max(group_var, 1e-8 * resid_var, 1e-300), resid_var])

    def neg(phi: npt.NDArray[np.float64]) -> float:
        try:  # L-BFGS-B may try a log variance beyond exp's range: not a candidate
            value = ll(math.exp(float(phi[0])), math.exp(float(phi[1])))
        except OverflowError:
            return 1e300
        return -value if math.isfinite(value) else 1e300

    from scipy import optimize

    res = optimize.minimize(
        neg, start, method="L-BFGS-B", options={"ftol": 1e-15, "gtol": 1e-11, "maxiter": 500}
    )
    g, e = math.exp(float(res.x[0])), math.exp(float(res.x[1]))
    candidates.append((ll(g, e), g, e))
    best = max(candidates, key=lambda c: c[0])
    if not math.isfinite(best[0]):
        return None
    return best[1], best[2], best[0]


#: A design with at least this many groups is fitted without statsmodels' optimiser (whose
#: likelihood loops over the groups in Python: 3-4 s of CPU per fit at 2,500 groups): the
#: REML maximum is found directly (:func:`_closed_form_fit`) from a moment start.
CLOSED_FORM_MIN_GROUPS = 1000

#: A design with at least this many rows is fitted by the same closed-form path, from its
#: sufficient statistics (:func:`reml_parts`: per-group sizes and sums, ``XᵀX``, ``Xᵀy``,
#: ``yᵀy``), whatever its number of groups: statsmodels' optimiser costs 2-3 s per fit at
#: 100,000 rows over 7 groups (``docs/statistics.md``, "Designs of many rows").
CLOSED_FORM_MIN_ROWS = 20_000

#: ``ledger plan`` fits every mixed model by the closed-form path (:func:`closed_form_fits`):
#: both paths report the REML maximum (the same convergence check), and it is ~10 times faster
#: on the template's simulated studies than statsmodels' optimiser. The analysis never sets it.
_CLOSED_FORM_ALWAYS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "closed_form_always", default=False
)


@contextlib.contextmanager
def closed_form_fits() -> Iterator[None]:
    """Within the block, :func:`mixed_model` takes the closed-form path at any group count.

    For ``ledger plan`` (``docs/planning.md`` §3); statsmodels' warnings (other than its
    boundary warning, kept by its rule) then do not arise, as for large designs.
    """
    token = _CLOSED_FORM_ALWAYS.set(True)
    try:
        yield
    finally:
        _CLOSED_FORM_ALWAYS.reset(token)


#: statsmodels' warning when a variance component is under 0.01 (its rule, kept on both paths).
BOUNDARY_WARNING = "The MLE may be on the boundary of the parameter space."


def _moment_start(parts: RemlParts, n_obs: int) -> tuple[float, float, float]:
    """A method-of-moments start ``(σ²_g, σ²_e)`` and the OLS residual sum of squares.

    From the per-group sums (:func:`reml_parts`) and the OLS fit by the normal equations:
    ``σ²_e`` the within-group mean square of the residuals; ``σ²_g`` the mean squared group
    mean of the residuals less ``σ²_e·mean(1/n_j)``, at least ``σ²_e/100`` (a start in the
    interior: the optimiser's log scale cannot start at 0).
    """
    p = parts.xtx.shape[0]
    beta = np.linalg.solve(parts.xtx, parts.xty)
    rss = parts.yty - float(parts.xty @ beta)
    means = (parts.sy - parts.sx @ beta) / parts.n
    within = rss - float(np.sum(parts.n * means * means))
    dof = n_obs - parts.n.size
    e = within / dof if dof > 0 and within > 0 else rss / (n_obs - p)
    g = max(float(np.mean(means * means)) - e * float(np.mean(1.0 / parts.n)), e / 100.0)
    return g, e, rss


def _closed_form_fit(
    y: npt.NDArray[np.float64], exog: npt.NDArray[np.float64], codes: npt.NDArray[np.intp]
) -> tuple[float, float, float] | None:
    """The REML maximum ``(σ²_g, σ²_e, log-likelihood)`` without statsmodels, or None.

    With ``γ = σ²_g/σ²_e`` and ``W_j = I + γ·J``, ``l_R`` is maximised over ``σ²_e`` in closed
    form (``σ̂²_e(γ) = rᵀW⁻¹r/(n − p)``, ``r`` the GLS residual), which leaves a smooth
    function of ``log γ`` alone: Brent's bounded method on it (to 1e-10 in ``log γ``), from a
    bracket around :func:`_moment_start`'s ratio. The boundary ``σ²_g = 0``,
    ``σ²_e = RSS/(n − p)`` is a candidate too; the more likely of the two is returned (the
    log-likelihood from :func:`reml_loglik` with statsmodels' ``−(n − p)/2·log 2π``; the OLS
    fit of the boundary by the normal equations on the centred outcome). None (the caller
    falls back to statsmodels) when Brent does not converge, stops at the bracket's upper
    end, or nothing finite is found.
    """
    from scipy import optimize

    n_obs, p = int(exog.shape[0]), int(exog.shape[1])
    parts = reml_parts(y - float(np.mean(y)), exog, codes)  # REML is invariant to y + Xb
    g0, e0, rss = _moment_start(parts, n_obs)
    if not (math.isfinite(g0) and math.isfinite(e0) and g0 > 0 and e0 > 0):
        return None

    def profile(t: float) -> tuple[float, float]:
        gamma = math.exp(t)
        c = gamma / (1.0 + parts.n * gamma)  # W_j⁻¹ = I − c_j·J
        xwx = parts.xtx - np.einsum("j,jk,jl->kl", c, parts.sx, parts.sx)
        xwy = parts.xty - parts.sx.T @ (c * parts.sy)
        ywy = parts.yty - float(np.sum(c * parts.sy * parts.sy))
        resid_var = (ywy - float(xwy @ np.linalg.solve(xwx, xwy))) / (n_obs - p)
        logdet_w = float(np.sum(np.log1p(parts.n * gamma)))
        value = -0.5 * (
            (n_obs - p) * math.log(resid_var) + logdet_w + float(np.linalg.slogdet(xwx)[1])
        )
        return value, resid_var

    def neg(t: float) -> float:
        try:
            value = profile(t)[0]
        except (np.linalg.LinAlgError, ValueError, ZeroDivisionError, FloatingPointError):
            return 1e300
        return -value if math.isfinite(value) else 1e300

    t0 = math.log(g0 / e0)
    res = optimize.minimize_scalar(
        neg,
        bounds=(t0 - 30.0, t0 + 12.0),
        method="bounded",
        options={"xatol": 1e-10, "maxiter": 500},
    )
    if not res.success or float(res.x) > t0 + 12.0 - 1e-3:
        return None  # no maximum inside the bracket: statsmodels' path decides
    const = -0.5 * float(n_obs - p) * math.log(2 * math.pi)
    raw = reml_parts(y, exog, codes)
    candidates: list[tuple[float, float, float]] = []
    resid_var = profile(float(res.x))[1]
    if resid_var > 0:
        g = math.exp(float(res.x)) * resid_var
        candidates.append((reml_loglik(y, exog, codes, g, resid_var, raw) + const, g, resid_var))
    if rss > 0:
        e = rss / (n_obs - p)
        candidates.append((reml_loglik(y, exog, codes, 0.0, e, raw) + const, 0.0, e))
    candidates = [c for c in candidates if math.isfinite(c[0])]
    if not candidates:
        return None
    best = max(candidates, key=lambda c: c[0])
    return best[1], best[2], best[0]


def _direct_fit(
    y: npt.NDArray[np.float64], exog: npt.NDArray[np.float64], codes: npt.NDArray[np.intp]
) -> (
    tuple[tuple[float, float, float], tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]]
    | None
):
    """:func:`_closed_form_fit` and the GLS fixed effects there, or None when either fails.

    Returns ``((σ²_g, σ²_e, log-likelihood), (β̂, fe_cov))``; None when no finite maximum was
    found or the fixed effects or their covariance are not finite there.
    """
    with np.errstate(all="ignore"):
        try:
            point = _closed_form_fit(y, exog, codes)
        except (np.linalg.LinAlgError, ValueError, FloatingPointError, ZeroDivisionError):
            return None
        if point is None:
            return None
        gls = gls_at(y, exog, codes, point[0], point[1])
    if not (np.all(np.isfinite(gls[0])) and np.all(np.isfinite(gls[1]))):
        return None
    return point, gls


def _factor_columns(
    df: pd.DataFrame,
    arm: npt.NDArray[Any],
    others: Sequence[str],
    arm_col: str,
    factors: Mapping[str, str],
    interaction: bool,
) -> tuple[list[npt.NDArray[np.float64]], list[str], list[str]]:
    """Dummy columns (and names) of the extra factors, then of the arm × factor cells.

    Returns ``(columns, names, references)``. A factor's levels are compared as strings and
    sorted; its reference must be one of them. An interaction cell never observed (an arm
    not run at that level) has an all-zero column and is left out.
    """
    columns: list[npt.NDArray[np.float64]] = []
    names: list[str] = []
    references: list[str] = []
    dummies: list[tuple[str, npt.NDArray[np.float64]]] = []
    for column, reference in factors.items():
        if column not in df.columns:
            raise StatsError(f"df: no column {column!r}")
        if df[column].isna().any():
            raise StatsError(f"df: missing values in {column!r}")
        values = df[column].astype(str).to_numpy()
        levels = sorted(set(values.tolist()))
        reference = str(reference)
        if reference not in levels:
            raise StatsError(f"factors: level {reference!r} not in df[{column!r}] ({levels})")
        references.append(reference)
        for level in levels:
            if level != reference:
                dummy = (values == level).astype(np.float64)
                columns.append(dummy)
                names.append(f"{column}[T.{level}]")
                dummies.append((names[-1], dummy))
    if interaction:
        for level in others:
            arm_dummy = (arm == level).astype(np.float64)
            for name, dummy in dummies:
                cell = arm_dummy * dummy
                if cell.any():
                    columns.append(cell)
                    names.append(f"{arm_col}[T.{level}]:{name}")
    return columns, names, references


def _statsmodels_fit(
    y: npt.NDArray[np.float64],
    exog: npt.NDArray[np.float64],
    groups: npt.NDArray[Any],
    codes: npt.NDArray[np.intp],
    k_fe: int,
    outcome: str,
    arm_col: str,
    group_col: str,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], float, float, float, bool]:
    """The statsmodels REML fit, polished: ``(β̂, fe_cov, σ²_g, σ²_e, llf, converged)``.

    Its warnings propagate to the caller (:func:`mixed_model` records them); a numerical
    failure raises StatsError.
    """
    try:
        result = mixed_linear_model.MixedLM(y, exog, groups=groups).fit(reml=True)
        group_var = float(np.asarray(result.cov_re, dtype=np.float64)[0, 0])
        resid_var = float(result.scale)
        fe = np.asarray(result.fe_params, dtype=np.float64)
        cov = np.asarray(result.cov_params(), dtype=np.float64)[:k_fe, :k_fe]
        llf = float(result.llf)
        converged = bool(result.converged)
        if resid_var > 0 and group_var >= 0:
            with np.errstate(all="ignore"):
                polished = _reml_maximum(y, exog, codes, group_var, resid_var)
                if polished is not None:
                    group_var, resid_var, llf = polished
                    converged = True
                gls = gls_at(y, exog, codes, group_var, resid_var)
            if np.all(np.isfinite(gls[0])) and np.all(np.isfinite(gls[1])):
                fe, cov = gls
    except (np.linalg.LinAlgError, ValueError, FloatingPointError, ZeroDivisionError) as exc:
        raise StatsError(
            f"mixed model for {outcome!r} by {arm_col!r} with groups "
            f"{group_col!r} could not be fitted: {exc}"
        ) from exc
    return fe, cov, group_var, resid_var, llf, converged


def _to_the_maximum(
    y: npt.NDArray[np.float64],
    exog: npt.NDArray[np.float64],
    codes: npt.NDArray[np.intp],
    group_var: float,
    resid_var: float,
    llf: float,
    fe: npt.NDArray[np.float64],
    cov: npt.NDArray[np.float64],
) -> tuple[float, float, float, npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Newton-polish an optimiser's answer (:func:`_polish_reml`) to the REML maximum.

    An interior answer is polished from where it is; one on the boundary (``σ²_g`` at most
    ``SINGULAR_TOLERANCE × var(y)``) stays unless its score in ``σ²_g`` is positive, when the
    polish starts from the scoring step off it (``σ²_g = s/I``). The polished point replaces
    the answer when it is more likely; should it fall to the boundary, ``σ²_g = 0`` with
    ``σ²_e = RSS/(n − p)`` is compared too. Returns ``(σ²_g, σ²_e, l_R with statsmodels'
    constant, β̂, fe_cov)`` evaluated at the point kept.
    """
    floor = SINGULAR_TOLERANCE * float(np.var(y, ddof=1))
    n, p = exog.shape
    const = -0.5 * float(n - p) * math.log(2 * math.pi)
    parts = reml_parts(y, exog, codes)
    with np.errstate(all="ignore"):
        try:
            start = group_var
            if group_var <= floor:
                score, _, expected = reml_derivatives(y, exog, codes, group_var, resid_var)
                if not (score[0] > 0 and expected[0, 0] > 0):
                    return group_var, resid_var, llf, fe, cov
                start = max(float(score[0] / expected[0, 0]), 10 * floor)
            candidates = [
                (reml_loglik(y, exog, codes, group_var, resid_var, parts), group_var, resid_var)
            ]
            g, e = _polish_reml(y, exog, codes, start, resid_var)
            candidates.append((reml_loglik(y, exog, codes, g, e, parts), g, e))
            if g <= floor:
                beta, *_ = np.linalg.lstsq(exog, y, rcond=None)
                e0 = float(np.sum((y - exog @ beta) ** 2)) / (n - p)
                candidates.append((reml_loglik(y, exog, codes, 0.0, e0, parts), 0.0, e0))
        except (np.linalg.LinAlgError, ValueError, FloatingPointError, ZeroDivisionError):
            return group_var, resid_var, llf, fe, cov
        ll, g, e = max(
            (c for c in candidates if math.isfinite(c[0])),
            key=lambda c: c[0],
            default=candidates[0],
        )
        if (g, e) == (group_var, resid_var):
            return group_var, resid_var, llf, fe, cov
        beta_new, cov_new = gls_at(y, exog, codes, g, e)
    if not (np.all(np.isfinite(beta_new)) and np.all(np.isfinite(cov_new))):
        return group_var, resid_var, llf, fe, cov
    return g, e, ll + const, beta_new, cov_new


#: The outcome counts as fitted exactly when the within-group least-squares residual sum of
#: squares is at most this fraction of ``Σ(y − ȳ)²`` (``docs/statistics.md``, "Not applicable").
EXACT_FIT_TOLERANCE = 1e-10


def exactly_fitted(
    y: npt.NDArray[np.float64],
    exog: npt.NDArray[np.float64],
    codes: npt.NDArray[np.intp],
    n_groups: int,
) -> bool:
    """True when ``y`` lies in the span of the fixed effects and the group indicators.

    The least-squares fit of ``y`` on ``[X, Z]`` (``Z`` one indicator per group) is computed
    within groups (Frisch-Waugh: ``y`` and ``X`` less their group means, then ordinary least
    squares); its residual sum of squares at most :data:`EXACT_FIT_TOLERANCE` times
    ``Σ(y − ȳ)²`` means the REML likelihood has no maximum (it grows without bound as
    ``σ²_e → 0``). A constant outcome is fitted exactly too.
    """
    total = float(np.sum((y - float(np.mean(y))) ** 2))
    n = np.bincount(codes, minlength=n_groups).astype(np.float64)
    y_within = y - (np.bincount(codes, weights=y, minlength=n_groups) / n)[codes]
    x_within = np.column_stack(
        [
            exog[:, k] - (np.bincount(codes, weights=exog[:, k], minlength=n_groups) / n)[codes]
            for k in range(exog.shape[1])
        ]
    )
    beta, *_ = np.linalg.lstsq(x_within, y_within, rcond=None)
    rss = float(np.sum((y_within - x_within @ beta) ** 2))
    return rss <= EXACT_FIT_TOLERANCE * total


def mixed_model(
    df: pd.DataFrame,
    outcome: str,
    arm_col: str,
    group_col: str,
    reference: str,
    *,
    factors: Mapping[str, str] | None = None,
    interaction: bool = False,
) -> MixedModelFit:
    """Fit a linear mixed model: arm (and ``factors``) as fixed effects, random intercept, REML.

    Arm levels are compared as strings; the non-reference arms are sorted. ``factors`` maps
    each extra categorical fixed factor (e.g. ``"model"``) to its reference level; with
    ``interaction`` the arm × factor cells get their own coefficients. A design whose columns
    are linearly dependent (arms and factor levels not crossed) raises StatsError. Warnings
    raised by statsmodels are caught into ``warnings``; a failed fit raises StatsError.
    """
    factors = dict(factors or {})
    for column in (outcome, arm_col, group_col):
        if column not in df.columns:
            raise StatsError(f"df: no column {column!r}")
    if len(df) == 0:
        raise StatsError("df: no rows")
    y = _floats(df[outcome].to_numpy(), f"df[{outcome!r}]", min_n=3)
    if df[arm_col].isna().any() or df[group_col].isna().any():
        raise StatsError(f"df: missing values in {arm_col!r} or {group_col!r}")
    arm = df[arm_col].astype(str).to_numpy()
    groups = df[group_col].astype(str).to_numpy()
    levels = sorted(set(arm.tolist()))
    reference = str(reference)
    if reference not in levels:
        raise StatsError(f"reference: arm {reference!r} not in df[{arm_col!r}] ({levels})")
    if len(levels) < 2:
        raise StatsError(f"df[{arm_col!r}]: needs at least two arms, got {levels}")
    n_groups = len(set(groups.tolist()))
    if n_groups < 2:
        raise StatsError(
            f"df[{group_col!r}]: a random intercept needs at least two groups, got {n_groups}"
        )
    total_var = float(np.var(y, ddof=1))
    others = [level for level in levels if level != reference]
    extra, extra_names, factor_refs = _factor_columns(
        df, arm, others, arm_col, factors, interaction
    )
    exog = np.column_stack(
        [np.ones(y.size)] + [(arm == level).astype(np.float64) for level in others] + extra
    )
    names = ["Intercept"] + [f"{arm_col}[T.{level}]" for level in others] + extra_names
    if y.size <= exog.shape[1] + 1:
        raise StatsError(f"df: {y.size} rows are too few for {exog.shape[1]} fixed effects")
    if extra and np.linalg.matrix_rank(exog) < exog.shape[1]:
        raise StatsError(
            f"df: the fixed effects {names[1:]} are linearly dependent (arms and "
            f"{', '.join(factors)} levels are not crossed)"
        )
    caught: list[str] = []
    codes = pd.factorize(groups, sort=True)[0].astype(np.intp)  # np.unique's inverse, faster
    if total_var == 0.0:  # the failures above come first, then "not applicable"
        raise NotApplicableError(
            f"df[{outcome!r}]: the outcome has zero variance (every trial has the same "
            "value), so the mixed model's variance components cannot be estimated"
        )
    if exactly_fitted(y, exog, codes, n_groups):
        raise NotApplicableError(
            f"df[{outcome!r}]: the fixed effects ({', '.join(names[1:])}) and the "
            f"{group_col!r} intercepts fit the outcome exactly (no residual variation: "
            "every trial is predicted without error), so the REML likelihood grows without "
            "bound as the residual variance goes to 0 and the variance components cannot be "
            "estimated"
        )
    large = (
        n_groups >= CLOSED_FORM_MIN_GROUPS
        or y.size >= CLOSED_FORM_MIN_ROWS
        or _CLOSED_FORM_ALWAYS.get()
    )
    direct = _direct_fit(y, exog, codes) if large else None
    if direct is None:
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            try:
                fe, cov, group_var, resid_var, llf, converged = _statsmodels_fit(
                    y, exog, groups, codes, len(names), outcome, arm_col, group_col
                )
            except StatsError:
                # statsmodels' optimiser can fail numerically ("Singular matrix") on a step
                # far from a maximum that exists: the closed-form path then looks for it,
                # and the fit fails only when it finds none (docs/statistics.md)
                direct = None if large else _direct_fit(y, exog, codes)
                if direct is None:
                    raise
        if direct is None:
            caught.extend(f"{item.category.__name__}: {item.message}" for item in record)
    if direct is not None:
        (group_var, resid_var, llf), (fe, cov) = direct
        converged = True
        if group_var < 0.01:  # statsmodels' boundary warning, by its own rule
            caught.append(f"{sm_exceptions.ConvergenceWarning.__name__}: {BOUNDARY_WARNING}")
    if resid_var > 0 and group_var >= 0:
        group_var, resid_var, llf, fe, cov = _to_the_maximum(
            y, exog, codes, group_var, resid_var, llf, fe, cov
        )
        check_reml_maximum(
            y,
            exog,
            codes,
            group_var,
            resid_var,
            f"mixed model for {outcome!r} by {arm_col!r} with groups {group_col!r} ({y.size} rows)",
        )
        converged = True
    se = np.sqrt(np.where(np.diag(cov) >= 0, np.diag(cov), np.nan))
    z_crit = float(sps.norm.ppf(0.975))
    effects = []
    for i, name in enumerate(names):
        z = fe[i] / se[i] if se[i] > 0 else math.nan
        effects.append(
            FixedEffect(
                name,
                float(fe[i]),
                float(se[i]),
                float(z),
                float(2.0 * sps.norm.sf(abs(z))),
                float(fe[i] - z_crit * se[i]),
                float(fe[i] + z_crit * se[i]),
            )
        )
    tol = SINGULAR_TOLERANCE * total_var
    singular = (
        group_var <= tol
        or resid_var <= tol
        or not np.all(np.isfinite(cov))
        or not np.all(np.isfinite(se))
        # statsmodels' "may be on the boundary" warning fires whenever σ²_g < 0.01 in absolute
        # units (any accuracy outcome with a between-stimulus SD under 10 pp): recorded in
        # ``warnings`` but not decisive; the boundary is tested on the likelihood instead
        or any(
            "singular" in message.lower() or "not positive definite" in message
            for message in caught
        )
        or _boundary_at_least_as_likely(y, exog, codes, group_var, resid_var)
    )
    total = group_var + resid_var
    icc = group_var / total if total > 0 else math.nan
    ci = (math.nan,) * 4
    ci_note = ""
    if not singular:
        with np.errstate(all="ignore"):
            ci, ci_note = informative_variance_cis(
                variance_component_cis(y, exog, codes, group_var, resid_var)
            )
    return MixedModelFit(
        outcome=outcome,
        arm_col=arm_col,
        group_col=group_col,
        reference=reference,
        arms=tuple([reference, *others]),
        n_obs=int(y.size),
        n_groups=n_groups,
        fixed_effects=tuple(effects),
        fe_cov=tuple(tuple(float(v) for v in row) for row in cov),
        group_variance=group_var,
        residual_variance=resid_var,
        icc=float(icc),
        log_likelihood=llf,
        converged=converged,
        singular=bool(singular),
        warnings=tuple(caught),
        group_variance_ci_lower=ci[0],
        group_variance_ci_upper=ci[1],
        residual_variance_ci_lower=ci[2],
        residual_variance_ci_upper=ci[3],
        variance_ci_note=ci_note,
        factors=tuple(factors),
        factor_references=tuple(factor_refs),
        interaction=bool(interaction and factors),
    )


@dataclass(frozen=True)
class ContrastResult(_Result):
    """Wald contrast ``a − b`` of two arms from a mixed-model fit.

    Two-sided: ``[lower, upper]`` is the ``conf`` CI and ``p`` is two-sided. One-sided
    (H1: a > b): ``lower`` is the one-sided ``conf`` lower bound, ``upper`` is +inf (``None`` in
    JSON) and ``p = P(Z ≥ z)``.
    """

    a: str
    b: str
    sides: str
    estimate: float
    se: float
    z: float
    p: float
    lower: float
    upper: float
    conf: float


def contrast(
    fit: MixedModelFit, a: str, b: str, sides: Sides = "two-sided", conf: float = 0.95
) -> ContrastResult:
    """Estimate ``a − b`` from ``fit``: L·β with SE sqrt(L·Σ·Lᵀ), normal z and p."""
    _check_conf(conf)
    a, b = str(a), str(b)
    for arm in (a, b):
        if arm not in fit.arms:
            raise StatsError(f"contrast: arm {arm!r} not in the fit's arms {fit.arms}")
    if a == b:
        raise StatsError(f"contrast: a and b are the same arm {a!r}")
    if sides not in ("two-sided", "one-sided"):
        raise StatsError(f"sides: must be 'two-sided' or 'one-sided', got {sides!r}")
    weights = np.zeros(len(fit.fixed_effects), dtype=np.float64)
    # coefficient k (1 <= k < len(arms)) is arm fit.arms[k]; the reference arm has none.
    # Any factor coefficients follow the arms' and get weight 0 (the contrast is within a
    # level of every factor: in an additive model the same at every level).
    if a != fit.reference:
        weights[fit.arms.index(a)] += 1.0
    if b != fit.reference:
        weights[fit.arms.index(b)] -= 1.0
    beta = np.array([effect.estimate for effect in fit.fixed_effects], dtype=np.float64)
    cov = np.array(fit.fe_cov, dtype=np.float64)
    estimate = float(weights @ beta)
    variance = float(weights @ cov @ weights)
    se = math.sqrt(variance) if variance > 0 else math.nan
    z = estimate / se if se > 0 else math.nan
    if sides == "two-sided":
        crit = float(sps.norm.ppf(0.5 + conf / 2.0))
        p = float(2.0 * sps.norm.sf(abs(z)))
        lower, upper = estimate - crit * se, estimate + crit * se
    else:
        crit = float(sps.norm.ppf(conf))
        p = float(sps.norm.sf(z))
        lower, upper = estimate - crit * se, math.inf
    return ContrastResult(a, b, sides, estimate, se, z, p, lower, upper, conf)


@dataclass(frozen=True)
class WaldTestResult(_Result):
    """Joint Wald test that the named fixed effects of a fit are all zero."""

    terms: tuple[str, ...]
    chi2: float
    df: int
    p: float


def wald_test(fit: MixedModelFit, terms: Sequence[str]) -> WaldTestResult:
    """``χ² = βᵀ Σ⁻¹ β`` over the named coefficients, ``df`` = their number, ``p = P(χ²_df ≥ χ²)``.

    ``Σ`` is the sub-matrix of ``fe_cov`` for those terms. An unknown term, no term, or a
    covariance that is not positive definite raises StatsError.
    """
    names = [effect.name for effect in fit.fixed_effects]
    if not terms:
        raise StatsError("terms: no coefficient to test")
    missing = [t for t in terms if t not in names]
    if missing:
        raise StatsError(f"terms: {missing[0]!r} is not a coefficient of the fit ({names})")
    index = [names.index(t) for t in terms]
    beta = np.array([fit.fixed_effects[i].estimate for i in index], dtype=np.float64)
    cov = np.array(fit.fe_cov, dtype=np.float64)[np.ix_(index, index)]
    if not (np.all(np.isfinite(beta)) and np.all(np.isfinite(cov))):
        raise StatsError("fe_cov: not finite for the tested terms")
    try:
        chol = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError as exc:
        raise StatsError("fe_cov: not positive definite for the tested terms") from exc
    solved = np.linalg.solve(chol, beta)
    chi2 = float(solved @ solved)
    return WaldTestResult(tuple(terms), chi2, len(index), float(sps.chi2.sf(chi2, len(index))))


# --------------------------------------------------------------------------------------------
# categorical outcomes


@dataclass(frozen=True)
class ChiSquareResult(_Result):
    """Pearson chi-square goodness of fit with Cramér's V = sqrt(chi2 / (n·(k−1)))."""

    chi2: float
    df: int
    p: float
    n: int
    k: int
    cramers_v: float
    observed: tuple[float, ...]
    expected: tuple[float, ...]


def chi_square_gof(counts: npt.ArrayLike, expected: npt.ArrayLike | None = None) -> ChiSquareResult:
    """Goodness of fit of ``counts`` to ``expected`` (uniform by default).

    ``expected`` may be counts or proportions: it is rescaled to sum to ``n = sum(counts)``.
    """
    observed = _floats(counts, "counts", min_n=2)
    if np.any(observed < 0):
        raise StatsError("counts: negative counts")
    n = float(observed.sum())
    if n <= 0:
        raise StatsError("counts: the total count is zero")
    k = observed.size
    if expected is None:
        exp = np.full(k, n / k)
    else:
        raw = _floats(expected, "expected", min_n=2)
        if raw.size != k:
            raise StatsError(f"expected: {raw.size} categories, counts has {k}")
        if np.any(raw <= 0):
            raise StatsError("expected: every expected count must be positive")
        exp = raw * (n / float(raw.sum()))
    chi2 = float(np.sum((observed - exp) ** 2 / exp))
    df = k - 1
    return ChiSquareResult(
        chi2,
        df,
        float(sps.chi2.sf(chi2, df)),
        round(n),
        k,
        math.sqrt(chi2 / (n * (k - 1))),
        tuple(observed.tolist()),
        tuple(exp.tolist()),
    )


@dataclass(frozen=True)
class ConfusionMatrix(_Result):
    """Counts with rows = truth label, columns = predicted label, both in ``labels`` order.

    ``other[i]`` counts predictions outside ``labels`` (e.g. unparseable) for truth row ``i``.
    """

    labels: tuple[str, ...]
    counts: tuple[tuple[int, ...], ...]
    other: tuple[int, ...]
    n: int
    correct: int
    accuracy: float


def _texts(values: Sequence[Hashable] | npt.ArrayLike, name: str) -> npt.NDArray[np.object_]:
    """Each label's ``str``, as an object array (:func:`_labels` checks the sequence)."""
    labels = _labels(values, name)
    array = np.fromiter(labels, dtype=object, count=len(labels))
    if len(array) and infer_dtype(array, skipna=False) != "string":
        array = np.fromiter((str(v) for v in labels), dtype=object, count=len(labels))
    return array


def _shared_codes(
    *arrays: npt.NDArray[np.object_],
) -> tuple[list[npt.NDArray[np.intp]], list[str]]:
    """The texts of ``arrays`` coded in one space: equal codes exactly where the texts are equal.

    Returns each array's codes and the distinct texts (in order of first appearance), so the
    per-item comparisons and counts of the label statistics are array operations (issue 41:
    a hundred thousand trials have millions of items) with the counts the loops gave.
    """
    sizes = np.cumsum([len(a) for a in arrays])[:-1]
    joined = np.concatenate(arrays) if arrays else np.empty(0, dtype=object)
    codes, uniques = pd.factorize(joined)
    return list(np.split(np.asarray(codes, dtype=np.intp), sizes)), list(uniques.tolist())


def _positions(texts: Sequence[str], names: Sequence[str]) -> npt.NDArray[np.intp]:
    """Each text's index in ``names`` (its first), -1 for a text that is no name."""
    index: dict[str, int] = {}
    for i, label in enumerate(names):
        index.setdefault(label, i)
    return np.array([index.get(t, -1) for t in texts], dtype=np.intp)


def _pair_labels(
    truth: Sequence[Hashable] | npt.ArrayLike, pred: Sequence[Hashable] | npt.ArrayLike
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], list[str]]:
    """Truth and predictions as ``str``, coded in one space (:func:`_shared_codes`)."""
    t = _texts(truth, "truth")
    p = _texts(pred, "pred")
    if len(t) != len(p):
        raise StatsError(f"truth, pred: lengths differ ({len(t)} and {len(p)})")
    if not len(t):
        raise StatsError("truth, pred: no items")
    (tc, pc), texts = _shared_codes(t, p)
    return tc, pc, texts


def _check_truth(
    at: npt.NDArray[np.intp], t: npt.NDArray[np.intp], texts: list[str], names: list[str]
) -> None:
    """Refuse the first truth (in item order) that is not one of the labels."""
    outside = at[t] < 0
    if outside.any():
        label = texts[int(t[int(np.argmax(outside))])]
        raise StatsError(f"truth: label {label!r} is not in labels {names}")


def newcombe_diff(x1: int, n1: int, x2: int, n2: int, conf: float = 0.95) -> dict[str, Any]:
    """Newcombe's hybrid score interval for ``p1 − p2`` (his method 10, from Wilson intervals).

    ``L = d − sqrt((p1 − l1)² + (u2 − p2)²)``, ``U = d + sqrt((u1 − p1)² + (p2 − l2)²)`` with
    ``(l_i, u_i)`` the Wilson intervals of each proportion (statsmodels'
    ``confint_proportions_2indep(..., method="newcomb")``). Independent proportions only.
    """
    w1, w2 = wilson(x1, n1, conf), wilson(x2, n2, conf)
    p1, p2 = x1 / n1, x2 / n2
    d = p1 - p2
    lower = d - math.sqrt((p1 - w1.lower) ** 2 + (w2.upper - p2) ** 2)
    upper = d + math.sqrt((w1.upper - p1) ** 2 + (p2 - w2.lower) ** 2)
    return {
        "method": "newcombe-hybrid-score",
        "estimate": d,
        "lower": lower,
        "upper": upper,
        "conf": conf,
        "x1": x1,
        "n1": n1,
        "x2": x2,
        "n2": n2,
    }


def cluster_proportion(
    correct: Sequence[int], n: Sequence[int], conf: float = 0.95
) -> dict[str, Any]:
    """A proportion over items clustered in groups (the items of a probe's trials).

    Ratio estimator ``p = Σc_j / Σn_j`` with the cluster-robust variance
    ``G/(G − 1) · Σ(c_j − p·n_j)² / (Σn_j)²`` (statsmodels' ``cov_type="cluster"`` for the mean
    of the item outcomes), and a ``t_{G−1}`` interval clipped to [0, 1]. Fewer than two
    clusters: no interval (``lower = upper = None``) and a ``note``.
    """
    _check_conf(conf)
    c = np.asarray(correct, dtype=np.float64)
    m = np.asarray(n, dtype=np.float64)
    keep = m > 0
    c, m = c[keep], m[keep]
    clusters = int(c.size)
    total = float(m.sum())
    if total <= 0:
        raise StatsError("cluster_proportion: no items")
    p = float(c.sum()) / total
    out: dict[str, Any] = {
        "method": "cluster-robust-ratio-t",
        "estimate": p,
        "n_clusters": clusters,
        "n": int(total),
        "conf": conf,
    }
    if clusters < 2:
        return out | {
            "se": None,
            "df": None,
            "lower": None,
            "upper": None,
            "note": "fewer than two clusters: no interval",
        }
    resid = c - p * m
    se = math.sqrt(clusters / (clusters - 1) * float(resid @ resid)) / total
    df = clusters - 1
    q = float(sps.t.ppf(0.5 + conf / 2.0, df))
    return out | {"se": se, "df": df, "lower": max(0.0, p - q * se), "upper": min(1.0, p + q * se)}


def error_null_excluding_truth(truth: Sequence[Hashable], labels: Sequence[str]) -> list[float]:
    """Expected shares of the wrong answers when an error is any label but the true one.

    Each wrong item adds ``1/(k − 1)`` to every label other than its truth (``1/k`` to each
    when its truth is not a label); the result is divided by the number of items. The shares
    are added item by item, in order (a cumulative sum: the bits of the loop it replaces).
    """
    labs = [str(lb) for lb in labels]
    k = len(labs)
    if k < 2 or not truth:
        raise StatsError("error_null_excluding_truth: needs two labels and one wrong item")
    (codes,), texts = _shared_codes(_texts(truth, "truth"))
    at = _positions(texts, labs)[codes]  # each item's truth as a label index, -1 if none
    share = np.where(at >= 0, 1.0 / (k - 1), 1.0 / k)
    weights = np.array(
        [np.cumsum(np.where(at == j, 0.0, share))[-1] for j in range(k)], dtype=np.float64
    )
    return [float(w) for w in weights / len(truth)]


def confusion_matrix(
    truth: Sequence[Hashable] | npt.ArrayLike,
    pred: Sequence[Hashable] | npt.ArrayLike,
    labels: Sequence[str],
) -> ConfusionMatrix:
    """Confusion matrix of ``pred`` against ``truth``; labels are compared as strings."""
    names = [str(label) for label in labels]
    if len(set(names)) != len(names) or not names:
        raise StatsError("labels: must be non-empty and distinct")
    t, p, texts = _pair_labels(truth, pred)
    at = _positions(texts, names)
    _check_truth(at, t, texts, names)
    k = len(names)
    ti, pi = at[t], at[p]
    named = pi >= 0
    matrix = np.bincount(ti[named] * k + pi[named], minlength=k * k).reshape(k, k)
    other = np.bincount(ti[~named], minlength=k)
    correct = int(np.trace(matrix))
    return ConfusionMatrix(
        tuple(names),
        tuple(tuple(int(v) for v in row) for row in matrix),
        tuple(int(v) for v in other),
        len(t),
        correct,
        correct / len(t),
    )


@dataclass(frozen=True)
class ProportionResult(_Result):
    """``count`` of ``n`` with share and Wilson 95% CI; NaN (JSON ``None``) when ``n == 0``."""

    name: str
    count: int
    n: int
    share: float
    lower: float
    upper: float


def _proportion(name: str, count: int, n: int) -> ProportionResult:
    if n == 0:
        return ProportionResult(name, 0, 0, math.nan, math.nan, math.nan)
    interval = wilson(count, n)
    return ProportionResult(name, count, n, interval.estimate, interval.lower, interval.upper)


def canonical_share(
    truth: Sequence[Hashable] | npt.ArrayLike,
    pred: Sequence[Hashable] | npt.ArrayLike,
    canonical: str = "RIGHT",
) -> ProportionResult:
    """Share of errors (pred ≠ truth) whose prediction is ``canonical``, with Wilson CI."""
    t, p, texts = _pair_labels(truth, pred)
    errors = t != p
    code = texts.index(str(canonical)) if str(canonical) in texts else -1
    hits = int(np.count_nonzero(errors & (p == code)))
    return _proportion(f"canonical_share:{canonical}", hits, int(np.count_nonzero(errors)))


def flip_rate(
    a: Sequence[Hashable] | npt.ArrayLike, b: Sequence[Hashable] | npt.ArrayLike
) -> ProportionResult:
    """Share of paired items whose answers differ (compared as strings), with Wilson CI."""
    first = _texts(a, "a")
    second = _texts(b, "b")
    if len(first) != len(second):
        raise StatsError(f"a, b: paired answers need equal lengths ({len(first)}, {len(second)})")
    if not len(first):
        raise StatsError("a, b: no paired items")
    (fc, sc), _ = _shared_codes(first, second)
    return _proportion("flip_rate", int(np.count_nonzero(fc != sc)), len(first))


@dataclass(frozen=True)
class PositionBiasResult(_Result):
    """Predicted vs true answer distributions over ``labels`` (+ an 'other' prediction mass).

    ``tvd = ½·Σ|p_pred − p_truth|`` over labels and 'other'; ``mad = (1/k)·Σ_labels|p_pred −
    p_truth|`` is paper 002's "Bias" formula.
    """

    labels: tuple[str, ...]
    p_pred: tuple[float, ...]
    p_truth: tuple[float, ...]
    p_other: float
    n: int
    tvd: float
    mad: float


def position_bias_tvd(
    pred: Sequence[Hashable] | npt.ArrayLike,
    truth: Sequence[Hashable] | npt.ArrayLike,
    labels: Sequence[str],
) -> PositionBiasResult:
    """Total variation distance between predicted and true answer distributions."""
    names = [str(label) for label in labels]
    if len(set(names)) != len(names) or not names:
        raise StatsError("labels: must be non-empty and distinct")
    t, p, texts = _pair_labels(truth, pred)
    n = len(t)
    at = _positions(texts, names)
    _check_truth(at, t, texts, names)
    k = len(names)
    pi = at[p]
    pred_counts = np.bincount(pi[pi >= 0], minlength=k).tolist()
    truth_counts = np.bincount(at[t], minlength=k).tolist()
    p_pred = np.array([c / n for c in pred_counts])
    p_truth = np.array([c / n for c in truth_counts])
    p_other = int(np.count_nonzero(pi < 0)) / n
    diff = np.abs(p_pred - p_truth)
    tvd = 0.5 * (float(diff.sum()) + p_other)
    return PositionBiasResult(
        tuple(names),
        tuple(p_pred.tolist()),
        tuple(p_truth.tolist()),
        p_other,
        n,
        tvd,
        float(diff.mean()),
    )


@dataclass(frozen=True)
class McNemarResult(_Result):
    """McNemar's test on discordant counts ``b`` (x right, y wrong) and ``c`` (x wrong, y right).

    ``primary`` names the p reported as ``p``: "exact" (two-sided binomial) when b + c < 25,
    else "chi2_cc" (continuity-corrected chi-square, 1 df).
    """

    b: int
    c: int
    n_discordant: int
    chi2: float
    p_chi2: float
    chi2_cc: float
    p_chi2_cc: float
    p_exact: float
    primary: str
    p: float


#: Below this many discordant pairs the exact binomial p is primary.
EXACT_THRESHOLD = 25


def mcnemar(b: int, c: int) -> McNemarResult:
    """McNemar's test from discordant counts; see :class:`McNemarResult` for conventions."""
    if isinstance(b, bool) or isinstance(c, bool) or int(b) != b or int(c) != c:
        raise StatsError("b, c: discordant counts must be integers")
    b, c = int(b), int(c)
    if b < 0 or c < 0:
        raise StatsError(f"b, c: counts must be non-negative, got {b}, {c}")
    n = b + c
    if n == 0:
        return McNemarResult(b, c, 0, math.nan, math.nan, math.nan, math.nan, 1.0, "exact", 1.0)
    chi2 = (b - c) ** 2 / n
    chi2_cc = max(0, abs(b - c) - 1) ** 2 / n
    p_chi2 = float(sps.chi2.sf(chi2, 1))
    p_cc = float(sps.chi2.sf(chi2_cc, 1))
    p_exact = float(min(1.0, 2.0 * sps.binom.cdf(min(b, c), n, 0.5)))
    primary = "exact" if n < EXACT_THRESHOLD else "chi2_cc"
    return McNemarResult(
        b,
        c,
        n,
        chi2,
        p_chi2,
        chi2_cc,
        p_cc,
        p_exact,
        primary,
        p_exact if primary == "exact" else p_cc,
    )


def mcnemar_paired(x_correct: npt.ArrayLike, y_correct: npt.ArrayLike) -> McNemarResult:
    """McNemar's test from paired booleans: b = x right & y wrong, c = x wrong & y right."""
    xa = np.asarray(x_correct)
    ya = np.asarray(y_correct)
    if xa.ndim != 1 or xa.shape != ya.shape:
        raise StatsError(
            f"x_correct, y_correct: need equal-length 1-D arrays, got {xa.shape} and {ya.shape}"
        )
    if xa.size == 0:
        raise StatsError("x_correct, y_correct: no pairs")
    for name, arr in (("x_correct", xa), ("y_correct", ya)):
        if not np.all(np.isin(arr, [0, 1])):
            raise StatsError(f"{name}: values must be booleans or 0/1")
    xb, yb = xa.astype(bool), ya.astype(bool)
    return mcnemar(int(np.sum(xb & ~yb)), int(np.sum(~xb & yb)))


# --------------------------------------------------------------------------------------------
# multiplicity and decision rules


@dataclass(frozen=True)
class MultipleTestingResult(_Result):
    """Adjusted p-values (capped at 1), in input order, and rejections at ``alpha``."""

    method: str
    pvalues: tuple[float, ...]
    adjusted: tuple[float, ...]
    alpha: float
    reject: tuple[bool, ...]


def _pvalues(pvalues: npt.ArrayLike) -> npt.NDArray[np.float64]:
    p = _floats(pvalues, "pvalues")
    if np.any((p < 0) | (p > 1)):
        raise StatsError("pvalues: every p-value must lie in [0, 1]")
    return p


def bonferroni(pvalues: npt.ArrayLike, alpha: float = 0.05) -> MultipleTestingResult:
    """Bonferroni: ``min(1, m·p_i)``."""
    p = _pvalues(pvalues)
    adjusted = np.minimum(1.0, p * p.size)
    return MultipleTestingResult(
        "bonferroni",
        tuple(p.tolist()),
        tuple(adjusted.tolist()),
        alpha,
        tuple(bool(v <= alpha) for v in adjusted),
    )


def holm(pvalues: npt.ArrayLike, alpha: float = 0.05) -> MultipleTestingResult:
    """Holm step-down: sorted ascending, ``max_{j≤i} min(1, (m−j+1)·p_(j))`` (ties stable)."""
    p = _pvalues(pvalues)
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, p[order] * (m - np.arange(m)))
    monotone = np.maximum.accumulate(scaled)
    adjusted = np.empty(m, dtype=np.float64)
    adjusted[order] = monotone
    return MultipleTestingResult(
        "holm",
        tuple(p.tolist()),
        tuple(adjusted.tolist()),
        alpha,
        tuple(bool(v <= alpha) for v in adjusted),
    )


@dataclass(frozen=True)
class EquivalenceResult(_Result):
    """Equivalence rule: holds iff max |diff| over groups < margin (strict)."""

    max_abs_diff: float
    group: str
    margin: float
    holds: bool
    n_groups: int


def equivalence(
    per_group_diffs: Mapping[str, float] | pd.Series, margin: float
) -> EquivalenceResult:
    """Largest per-group |difference|, the group attaining it (first in order on ties)."""
    items = [(str(k), float(v)) for k, v in per_group_diffs.items()]
    if not items:
        raise StatsError("per_group_diffs: no groups")
    if not math.isfinite(margin) or margin <= 0:
        raise StatsError(f"margin: must be a positive finite number, got {margin}")
    for key, value in items:
        if not math.isfinite(value):
            raise StatsError(f"per_group_diffs: group {key!r} has a non-finite difference")
    group, worst = items[0][0], abs(items[0][1])
    for key, value in items[1:]:
        if abs(value) > worst:
            group, worst = key, abs(value)
    return EquivalenceResult(worst, group, float(margin), worst < margin, len(items))
