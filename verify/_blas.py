"""One BLAS thread for the verifier's numerical work (its REML maxima, GEE, the plan's re-run).

The verifier's numbers come from small matrices (per-group sums, a few dozen fixed effects):
with OpenBLAS's default thread pool, a second thread only spins while scipy's L-BFGS-B and the
batched likelihoods call into BLAS, which on the golden archive took several times the CPU of
one thread for the same result. :func:`one_blas_thread` limits every BLAS library loaded in the
process (numpy's and scipy's each ship one) for the duration of a ``with`` block and restores
the previous limits on exit. It imports nothing from ``ledger``, ``runner`` or ``analysis``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, cast

from threadpoolctl import ThreadpoolController

__all__ = ["one_blas_thread"]


def one_blas_thread() -> AbstractContextManager[Any]:
    """A context in which every loaded BLAS (numpy's, scipy's) runs on one thread.

    The libraries are looked up when it is called, so call it after numpy and scipy are
    imported (they are, by the modules whose work it wraps).
    """
    return cast(
        AbstractContextManager[Any], ThreadpoolController().limit(limits=1, user_api="blas")
    )
