"""``[factorial]``: the base arm replaced by one arm per cell (``docs/study-spec.md``)."""

from __future__ import annotations

from dataclasses import replace

from runner._factors import Factor, Factorial, Level, cell_arm_id, parse_factorial, parse_factors
from runner.spec._arms import check_after
from runner.spec._collector import Collector
from runner.spec._state import Loading
from runner.spec._types import Arm


def parse_factorial_tables(st: Loading) -> None:
    """``[factors.<NAME>]`` and ``[factorial]``: its cells replace the base arm.

    Then each answer-dependent arm's first stage, which may be a cell (:func:`check_after`).
    """
    root = st.root
    st.factors = parse_factors(
        st.data.get("factors"),
        st.c.add,
        st.inside,
        st.read_text,
        lambda path: path.resolve().relative_to(root.resolve()).as_posix(),
        st.components,
    )
    st.factorial = parse_factorial(st.data.get("factorial"), st.factors, st.arms, st.c.add)
    st.arms = _factorial_arms(st.c, st.arms, st.factors, st.factorial, st.prompt.item is not None)
    check_after(st.c, st.arms, st.factorial.base if st.factorial is not None else None)


def _factorial_arms(
    c: Collector,
    arms: dict[str, Arm],
    factors: dict[str, Factor],
    factorial: Factorial | None,
    has_template: bool,
) -> dict[str, Arm]:
    """The arms with ``[factorial]``'s base replaced by one arm per cell, in cell order.

    A cell is the base arm with ``factors = {factor: level}``, its prompt levels' components
    after the base's (the item block placed explicitly before them) and their system
    components after the base's system (``docs/prompts.md`` §3).
    """
    for name in factors:
        if factorial is None or name not in factorial.factors:
            c.add(
                f"factors.{name}",
                "is not crossed by [factorial] (factors = [...]): a factor "
                "no design uses would be locked without effect",
            )
    if factorial is None:
        return arms
    base = arms[factorial.base]
    _check_base(c, arms, base)
    out: dict[str, Arm] = {}
    for arm_id, arm in arms.items():
        if arm_id != base.id:
            out[arm_id] = arm
            continue
        for cell in factorial.cells:
            cid = cell_arm_id(base.id, factorial.factors, cell)
            out[cid] = _cell_arm(
                c, base, cid, [factors[f].level(lv) for f, lv in cell.items()], has_template, cell
            )
    return out


def _check_base(c: Collector, arms: dict[str, Arm], base: Arm) -> None:
    """The base arm is a template, never run: no arm follows it or differs from it."""
    for arm in arms.values():
        if arm.differs_from is not None and arm.differs_from[0] == base.id:
            c.add(
                f"arms.{arm.id}.differs_from",
                f"arm {base.id!r} is the template of the "
                "factorial cells and is not run; name a cell arm",
            )
        if arm.after is not None and arm.after["arm"] == base.id:
            c.add(
                f"arms.{arm.id}.after",
                f"arm {base.id!r} is the template of the factorial cells and is not run",
            )
    if base.after is not None or base.differs_from is not None:
        c.add(
            f"arms.{base.id}",
            "the factorial base arm may not be answer-dependent (after) or declare differs_from",
        )


def _cell_arm(
    c: Collector,
    base: Arm,
    cid: str,
    levels: list[Level],
    has_template: bool,
    cell: dict[str, str],
) -> Arm:
    """The arm of one cell: the base with its levels' components and system components."""
    components = list(base.components)
    added = [n for lv in levels for n in lv.components]
    if has_template and "item" not in components:
        components.append("item")
    components += added
    system = tuple(base.system) + tuple(n for lv in levels for n in lv.system)
    for name in set(components) | set(system):
        if components.count(name) > 1 or system.count(name) > 1:
            c.add("factorial", f"cell {cid}: component {name!r} is listed twice")
    if sum(1 for lv in levels if lv.template is not None) > 1:
        c.add("factorial", f"cell {cid}: two factors set the item template")
    return replace(base, id=cid, components=tuple(components), system=system, factors=dict(cell))
