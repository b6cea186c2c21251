"""One BLAS thread for the verifier's numerical work (its REML maxima, GEE, the plan's re-run).

The verifier's numbers come from small matrices (per-group sums, a few dozen fixed effects):
with OpenBLAS's default thread pool, a second thread only spins while scipy's L-BFGS-B and the
batched likelihoods call into BLAS, which on the golden archive took several times the CPU of
one thread for the same result. :func:`one_blas_thread` limits every BLAS library loaded in the
process (numpy's and scipy's each ship one) for the duration of a ``with`` block and restores
the previous limits on exit. It imports nothing from ``ledger``, ``runner`` or ``analysis``.

The libraries are looked up once, when this module is imported (threadpoolctl reads the
process's ``/proc/self/maps``): numpy and scipy are imported first so that both BLAS copies are
found, and a verification itself opens nothing outside the archive
(tests/verify/test_hostile_archive.py audits every ``open``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, cast

import numpy  # noqa: F401  (loads numpy's BLAS before the lookup below)
import scipy.linalg  # scipy's own BLAS copy, looked up below too
import scipy.optimize  # noqa: F401
from threadpoolctl import ThreadpoolController

__all__ = ["one_blas_thread"]

_CONTROLLER = ThreadpoolController()


def one_blas_thread() -> AbstractContextManager[Any]:
    """A context in which every loaded BLAS (numpy's, scipy's) runs on one thread.

    The libraries are those found when this module was imported (numpy's and scipy's).
    """
    return cast(AbstractContextManager[Any], _CONTROLLER.limit(limits=1, user_api="blas"))
