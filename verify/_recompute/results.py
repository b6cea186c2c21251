"""A recomputed result, its guard, and the tolerances of the comparison (analysis.md §3).

Part of the science checks (:mod:`verify._science`); imports nothing from ``ledger``,
``runner`` or ``analysis``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from verify import _restats as st

REL_TOL = 1e-6
"""Relative tolerance for recomputed numbers (``docs/analysis.md``)."""


ABS_TOL = 1e-9
"""Absolute tolerance near zero."""


LMM_REL_TOL = 1e-4
"""Mixed-model outputs are compared at :data:`REL_TOL` (own REML check), except the profile
likelihood bounds of variance components (``*_ci_lower``/``*_ci_upper``), iterative roots on
both sides, compared at this tolerance."""


GEE_REL_TOL = 1e-4
"""A ``gee`` hypothesis's numbers (statsmodels's iterative fit and the verifier's own solver,
each stopping at its own tolerance) are compared at this relative tolerance."""


MAX_BOOTSTRAP_ITERATIONS = 1_000_000
"""The most bootstrap iterations a plan may ask the verifier to recompute (time bound)."""


MAX_BOOTSTRAP_WORK = 20_000_000_000
"""The most bootstrap iterations x scored trials the verifier recomputes (time bound)."""


@dataclass
class _Result:
    id: str
    hypothesis: str | None = None
    status: str = "ok"
    values: dict[str, Any] = field(default_factory=dict)
    verdict: str | None = None
    decided_by: dict[str, Any] | None = None
    lmm: bool = False


NOT_APPLICABLE = "not applicable"
"""analysis.md §3: the status and verdict of a test that does not apply, its reason in values."""


def _guard(result: _Result, compute: Callable[[], dict[str, Any]]) -> _Result:
    try:
        result.values = compute()
    except st.NotApplicable as exc:
        result.status = NOT_APPLICABLE
        result.values = {"reason": str(exc)}
        result.verdict = NOT_APPLICABLE if result.hypothesis else None
    except (st.StatError, ValueError, KeyError, ZeroDivisionError):
        result.status = "failed"
        result.values = {}
        result.verdict = "not computed" if result.hypothesis else None
    return result


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def _obj_of(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
