"""``[design]``: replicates, the seeds, bootstrap iterations and the blinding secret."""

from __future__ import annotations

from typing import Any, Final, TypeGuard

from runner.spec._fields import MAX_REPLICATES, int_seed, section_table
from runner.spec._state import Loading

SECRET_SOURCES: Final = ("generate", "env:", "file:")
MAX_ITERATIONS: Final = 1_000_000
"""The verifier recomputes at most 1,000,000 (``docs/archive-format.md`` §6)."""


def _integer(value: Any, low: int, high: int) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _secret_source(secret: Any) -> bool:
    """``generate``, or ``env:NAME`` / ``file:PATH`` with a name or path."""
    if not isinstance(secret, str):
        return False
    return any(
        secret == s or (s.endswith(":") and secret.startswith(s) and len(secret) > len(s))
        for s in SECRET_SOURCES
    )


def parse_design(st: Loading) -> None:
    """``replicates`` (1 to 100,000), ``seed``, ``bootstrap_seed``, ``bootstrap_iterations``..."""
    c = st.c
    design = section_table(c, st.data, "design")
    replicates = design.get("replicates")
    if _integer(replicates, 1, MAX_REPLICATES):
        st.replicates = replicates
    else:
        c.add(
            "design.replicates",
            f"must be an integer from 1 to {MAX_REPLICATES:,}, got {replicates!r}",
        )
    st.seed = int_seed(c, design, "seed", "design")
    st.bootstrap_seed = int_seed(c, design, "bootstrap_seed", "design")
    iterations = design.get("bootstrap_iterations", 10000)
    if _integer(iterations, 100, MAX_ITERATIONS):
        st.bootstrap_iterations = iterations
    else:
        c.add(
            "design.bootstrap_iterations",
            f"must be an integer from 100 to 1000000, got {iterations!r}",
        )
    secret = design.get("blinding_secret", "generate")
    if not _secret_source(secret):
        c.add("design.blinding_secret", "must be 'generate', 'env:NAME' or 'file:PATH'")
        secret = "generate"
    st.blinding_secret = secret
