"""Sections whose parsers live in other runner modules, each called with the collector.

``[[witnesses]]`` / ``[witnessing]`` (:mod:`runner._witnessing`), ``[timestamping]``,
``[privacy]``, ``[steps.<NAME>]`` (:mod:`runner.steps`), ``[response.ddx]`` (:mod:`runner._ddx`)
and ``[plan]`` (:mod:`runner._planspec`).
"""

from __future__ import annotations

from runner._ddx import hypothesis_problems, parse_ddx
from runner._planspec import parse_plan
from runner._privacy import parse_privacy
from runner._timestamping import parse_timestamping
from runner._witnessing import parse_policy
from runner.spec._state import Loading
from runner.steps._core import covariate_problems, parse_steps


def parse_records(st: Loading) -> None:
    """``[[witnesses]]``, ``[witnessing]``, ``[timestamping]`` and ``[privacy]``."""
    st.witnessing = parse_policy(st.data, st.c.add)
    st.timestamping = parse_timestamping(st.data, st.c.add)
    st.privacy = parse_privacy(st.data, st.c.add)


def parse_step_tables(st: Loading) -> None:
    """``[steps.<NAME>]`` (``docs/prompts.md`` §8), then ``[analysis] covariates`` against them."""
    st.steps = parse_steps(
        st.data.get("steps"),
        st.root,
        st.c.add,
        list(st.models) if st.models is not None else None,
        st.components,
        st.inside,
    )
    if "covariates" in st.analysis:
        covariate_problems(st.analysis["covariates"], st.steps, st.c.add)


def parse_ddx_table(st: Loading) -> None:
    """``[response.ddx]`` of a ddx study, and each hypothesis's outcome against the response."""
    raw = st.data.get("response")
    st.ddx = parse_ddx(
        st.c.add, raw if isinstance(raw, dict) else {}, st.parser, st.steps, st.items
    )
    for where, message in hypothesis_problems(
        [{"id": h.id, "outcome": h.outcome, "test": h.test} for h in st.hypotheses],
        st.parser,
        st.ddx,
    ):
        st.c.add(where, message)


def parse_plan_table(st: Loading) -> None:
    """``[plan]``: the design diagnostics' scenarios (``docs/planning.md``)."""
    st.plan = parse_plan(
        st.data,
        st.c.add,
        arms=list(st.arms),
        models=list(st.models or {}),
        variants=[v.name for v in st.variants],
        hypotheses=[h.id for h in st.hypotheses],
        arm_replicates=any(a.replicates is not None for a in st.arms.values()),
    )
