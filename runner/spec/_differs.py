"""``differs_from``: an arm's declared difference from another, read and checked."""

from __future__ import annotations

import itertools
from typing import Any, Final

from runner.spec._collector import Collector
from runner.spec._study import Study
from runner.spec._types import Arm

USAGE: Final = (
    'must be {arm = "A", by = ["component", ...]} or {arm = "A"} with removes = '
    '[...], adds = [...] and/or replaces = { old = "new" }'
)
EXACT: Final = ("removes", "adds", "replaces")


def parse_differs(
    c: Collector, differs: Any, where: str
) -> tuple[tuple[str, tuple[str, ...]] | None, dict[str, Any] | None]:
    """``differs_from``: ``{arm, by}`` as before, or ``{arm, removes, adds, replaces}``.

    Returns (``(arm, by)``, the exact claims or None); ``by`` is empty with the exact form.
    """
    if not isinstance(differs, dict) or not isinstance(differs.get("arm"), str):
        c.add(f"{where}.differs_from", USAGE)
        return None, None
    if "by" in differs:
        return _by(c, differs, where), None
    claims = _claims(c, differs, where)
    if claims is None:
        return None, None
    return (differs["arm"], ()), claims


def _by(c: Collector, differs: dict[str, Any], where: str) -> tuple[str, tuple[str, ...]] | None:
    """``{arm, by}``: the components removed (or replaced one for one)."""
    by = differs["by"]
    if not isinstance(by, list) or not all(isinstance(x, str) for x in by):
        c.add(f"{where}.differs_from", USAGE)
        return None
    if any(k in differs for k in EXACT):
        c.add(
            f"{where}.differs_from",
            "states either by (removed or replaced) or the exact "
            "removes / adds / replaces, not both",
        )
        return None
    return (differs["arm"], tuple(by))


def _claims(c: Collector, differs: dict[str, Any], where: str) -> dict[str, Any] | None:
    """The exact claims ``removes``, ``adds`` (lists) and ``replaces`` ({old: new})."""
    claims: dict[str, Any] = {}
    for key in ("removes", "adds"):
        value = differs.get(key)
        if key not in differs:
            continue
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(x, str) and x for x in value)
        ):
            c.add(f"{where}.differs_from.{key}", "must be a non-empty list of component names")
            return None
        claims[key] = list(value)
    if "replaces" in differs:
        value = differs["replaces"]
        if (
            not isinstance(value, dict)
            or not value
            or not all(isinstance(v, str) and v for v in value.values())
        ):
            c.add(
                f"{where}.differs_from.replaces",
                'must be a table { old = "new", ... } of component names',
            )
            return None
        claims["replaces"] = dict(value)
    if not claims:
        c.add(f"{where}.differs_from", USAGE)
        return None
    return claims


def component_differences(study: Study) -> dict[tuple[str, str], tuple[list[str], list[str]]]:
    """For every ordered pair of arms: (components only in the first, only in the second)."""
    out: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for a, b in itertools.permutations(study.arms, 2):
        ca, cb = study.placed_components(a), study.placed_components(b)
        out[(a, b)] = ([x for x in ca if x not in cb], [x for x in cb if x not in ca])
    return out


def check_matched_controls(study: Study) -> list[str]:
    """Check every ``differs_from`` declaration; return one message per false claim.

    ``B differs_from {arm = "A", by = ["rule"]}`` holds when B is A with exactly the components
    in ``by`` removed or replaced one for one in the same position (a matched control block), and
    nothing else differs.
    """
    problems: list[str] = []
    for arm in study.arms.values():
        if arm.differs_from is None:
            continue
        if arm.differs is not None:
            problems += _exact_claims(study, arm)
            continue
        base_id, by = arm.differs_from
        base = study.placed_components(base_id)
        mine = study.placed_components(arm.id)
        removed = [x for x in base if x not in mine]
        added = [x for x in mine if x not in base]
        where = f"{study.spec_path}: arms.{arm.id}.differs_from"
        if sorted(removed) != sorted(by):
            problems.append(
                f"{where}: arm {arm.id} is declared to differ from {base_id} by {list(by)}, but it "
                f"lacks {removed} and adds {added}"
            )
            continue
        if added and len(added) != len(removed):
            problems.append(
                f"{where}: {arm.id} adds {added} which do not replace {removed} one for one"
            )
            continue
        swapped = list(base)
        for old, new in zip(removed, added, strict=False):
            swapped[swapped.index(old)] = new
        expected = [x for x in swapped if x not in removed]
        if list(mine) != expected:
            problems.append(
                f"{where}: apart from {list(by)}, arm {arm.id} must keep {base_id}'s components in "
                f"order ({expected}), but it has {list(mine)}"
            )
    return problems


def _exact_claims(study: Study, arm: Arm) -> list[str]:
    """``differs_from = {arm, removes, adds, replaces}``: each claim held exactly.

    Against the base's placed components, the arm must lack exactly ``removes`` and the keys of
    ``replaces``, have exactly ``adds`` and the values of ``replaces`` beyond them, each
    replacement in the position of the component it replaces, and every other component in the
    base's order.
    """
    assert arm.differs_from is not None and arm.differs is not None
    base_id = arm.differs_from[0]
    where = f"{study.spec_path}: arms.{arm.id}.differs_from"
    base = list(study.placed_components(base_id))
    mine = list(study.placed_components(arm.id))
    removes = list(arm.differs.get("removes", []))
    adds = list(arm.differs.get("adds", []))
    replaces: dict[str, str] = dict(arm.differs.get("replaces", {}))
    out = _impossible_claims(
        where, arm.id, base_id, base, [*removes, *replaces], [*adds, *replaces.values()]
    )
    if out:
        return out
    said = {"removes": removes, "adds": adds, "replaces": replaces}
    out = _not_as_said(where, arm.id, base_id, base, mine, said)
    if out:
        return out
    expected = [replaces.get(x, x) for x in base if x not in removes]
    kept = [x for x in mine if x not in adds]
    if kept != expected:
        return [
            f"{where}: apart from what it adds, arm {arm.id} must have {base_id}'s components "
            f"with {replaces or 'nothing'} replaced in place and {removes or 'nothing'} "
            f"removed ({expected}), but it has {kept}"
        ]
    return []


def _not_as_said(
    where: str, arm_id: str, base_id: str, base: list[str], mine: list[str], said: dict[str, Any]
) -> list[str]:
    """The components the arm lacks and adds are not those its claims name."""
    removed = [x for x in base if x not in mine]
    added = [x for x in mine if x not in base]
    replaces = said["replaces"]
    if sorted(removed) == sorted([*said["removes"], *replaces]) and sorted(added) == sorted(
        [*said["adds"], *replaces.values()]
    ):
        return []
    claims = ", ".join(f"{verb} {value}" for verb, value in said.items() if value)
    return [
        f"{where}: arm {arm_id} is declared to differ from {base_id} as it "
        f"{claims}, but it lacks {removed} and adds {added}"
    ]


def _impossible_claims(
    where: str, arm_id: str, base_id: str, base: list[str], gone: list[str], new: list[str]
) -> list[str]:
    """A claim to remove (or replace) what the base lacks, or to add what it has."""
    out = [
        f"{where}: {base_id} has no component {name!r} for {arm_id} to remove or "
        f"replace ({base_id}: {base})"
        for name in gone
        if name not in base
    ]
    return out + [
        f"{where}: {name!r} is already in {base_id} ({base}); {arm_id} cannot add it"
        for name in new
        if name in base
    ]
