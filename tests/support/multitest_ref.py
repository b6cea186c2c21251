"""statsmodels' ``multipletests``, the tests' reference for Bonferroni and Holm, without its
garbage collection.

statsmodels 0.14 ends the Holm branch of ``multipletests`` with ``del`` of an intermediate
array and ``gc.collect()`` (``statsmodels/stats/multitest.py``): a full collection of the calling
process. In a pytest worker that has imported the whole project and built studies that is
0.1-0.4 s of CPU per call, and it changes no number. :func:`multipletests` makes the same call
with ``gc.collect`` a no-op for its duration (the test process is single-threaded while it
runs) and returns exactly what statsmodels returns.
"""

from __future__ import annotations

import gc
from typing import Any

from statsmodels.stats.multitest import multipletests as _multipletests


def _no_collection(generation: int = 2) -> int:
    """``gc.collect``'s stand-in during one :func:`multipletests` call: collects nothing."""
    return 0


def multipletests(pvals: Any, alpha: float = 0.05, method: str = "hs", **kwargs: Any) -> Any:
    """``statsmodels.stats.multitest.multipletests(pvals, alpha, method, ...)``, its own result,
    with the ``gc.collect()`` of its Holm branch skipped."""
    collect = gc.collect
    gc.collect = _no_collection
    try:
        return _multipletests(pvals, alpha=alpha, method=method, **kwargs)
    finally:
        gc.collect = collect
