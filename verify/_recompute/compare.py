"""Recorded against recomputed values: the first difference, with both values.

Part of the science checks (:mod:`verify._science`); imports nothing from ``ledger``,
``runner`` or ``analysis``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from verify._recompute.results import ABS_TOL, LMM_REL_TOL

_TEXT_KEYS = frozenset(
    {"warnings", "note", "caution", "error", "reason", "flag", "variance_ci_note"}
)
"""Members whose text is informative only: their presence is compared, not their wording."""


def _close(a: float, b: float, rel: float) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=ABS_TOL)


P_KEYS = frozenset({"p", "p_raw", "p_adjusted", "p_one_sided", "p_exact", "p_chi2", "p_chi2_cc"})
"""Members that are p-values: compared relatively, with no absolute slack (statistics.md)."""


P_LISTS = frozenset({"pvalues", "adjusted"})
"""Members that are lists of p-values."""


def _is_p(path: str) -> bool:
    """Whether ``path`` (``values.a.b[3]``) names a p-value."""
    last = path.rsplit(".", 1)[-1]
    if last.endswith("]"):
        return last.split("[", 1)[0] in P_LISTS
    return last in P_KEYS


def _p_close(a: float, b: float, rel: float) -> bool:
    """Two p-values agree to ``rel`` relative (``|log a - log b| <~ rel``); 0 only equals 0.

    A p-value of 3.4e-87 recorded as 0 differs: an absolute tolerance would hide it.
    """
    if a == b:
        return True
    if a <= 0 or b <= 0 or not (math.isfinite(a) and math.isfinite(b)):
        return False
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)


def _fmt(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, dict | list) else "a " + type(value).__name__


def _first_difference(recorded: Any, new: Any, path: str, rel: float) -> str | None:
    """The first path where ``recorded`` and ``new`` differ, with both values, or ``None``."""
    if isinstance(new, dict):
        return _object_difference(recorded, new, path, rel)
    if isinstance(new, list | tuple):
        return _list_difference(recorded, new, path, rel)
    if _same_scalar(recorded, new, path, rel):
        return None
    return f"{path}: recorded {_fmt(recorded)}, recomputed {_fmt(_plain(new))}"


def _object_difference(recorded: Any, new: dict[str, Any], path: str, rel: float) -> str | None:
    """Members: none unexpected, none missing, then each compared in key order."""
    if not isinstance(recorded, dict):
        return f"{path}: recorded {_fmt(recorded)}, recomputed an object"
    keys = [k for k in new if not k.startswith("_")]
    for k in sorted(set(recorded) - set(keys)):
        return f"{path}.{k}: recorded {_fmt(recorded[k])}, not recomputed (unexpected member)"
    for k in sorted(keys):
        found = _member_difference(recorded, new, k, path, rel)
        if found:
            return found
    return None


def _member_difference(
    recorded: dict[str, Any], new: dict[str, Any], k: str, path: str, rel: float
) -> str | None:
    if k not in recorded:
        return f"{path}.{k}: missing, recomputed {_fmt(new[k])}"
    if k in _TEXT_KEYS:
        return None
    if k == "group" and isinstance(new.get("_group_ok"), list):
        if recorded[k] not in new["_group_ok"]:
            return f"{path}.{k}: recorded {_fmt(recorded[k])}, recomputed {_fmt(new[k])}"
        return None
    # a variance component's profile-likelihood bound is a root found iteratively by
    # each side (docs/statistics.md): compared at the root finder's precision
    tol = max(rel, LMM_REL_TOL) if k.endswith(("_ci_lower", "_ci_upper")) else rel
    return _first_difference(recorded[k], new[k], f"{path}.{k}", tol)


def _list_difference(
    recorded: Any, new: list[Any] | tuple[Any, ...], path: str, rel: float
) -> str | None:
    if not isinstance(recorded, list) or len(recorded) != len(new):
        return f"{path}: recorded {_fmt(recorded)}, recomputed a list of {len(new)}"
    for i, (x, y) in enumerate(zip(recorded, new, strict=True)):
        found = _first_difference(x, y, f"{path}[{i}]", rel)
        if found:
            return found
    return None


def _same_scalar(recorded: Any, new: Any, path: str, rel: float) -> bool:
    """Numbers within tolerance (p-values relatively); anything else of one type and equal."""
    if isinstance(new, bool) or isinstance(recorded, bool) or new is None or recorded is None:
        return type(new) is type(recorded) and new == recorded
    if isinstance(new, int | float) and isinstance(recorded, int | float):
        if _is_p(path):
            return _p_close(float(recorded), float(new), rel)
        return _close(float(recorded), float(new), rel)
    return bool(type(new) is type(recorded) and new == recorded)


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
