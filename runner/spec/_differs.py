"""``differs_from``: an arm's declared difference from another, read and checked."""

from __future__ import annotations

import itertools
from typing import Any

from runner.spec._collector import Collector
from runner.spec._study import Study
from runner.spec._types import Arm


def parse_differs(
    c: Collector, differs: Any, where: str
) -> tuple[tuple[str, tuple[str, ...]] | None, dict[str, Any] | None]:
    """``differs_from``: ``{arm, by}`` as before, or ``{arm, removes, adds, replaces}``.

    Returns (``(arm, by)``, the exact claims or None); ``by`` is empty with the exact form.
    """
    exact = ("removes", "adds", "replaces")
    usage = (
        'must be {arm = "A", by = ["component", ...]} or {arm = "A"} with removes = '
        '[...], adds = [...] and/or replaces = { old = "new" }'
    )
    if not isinstance(differs, dict) or not isinstance(differs.get("arm"), str):
        c.add(f"{where}.differs_from", usage)
        return None, None
    if "by" in differs:
        by = differs["by"]
        if not isinstance(by, list) or not all(isinstance(x, str) for x in by):
            c.add(f"{where}.differs_from", usage)
            return None, None
        if any(k in differs for k in exact):
            c.add(
                f"{where}.differs_from",
                "states either by (removed or replaced) or the exact "
                "removes / adds / replaces, not both",
            )
            return None, None
        return (differs["arm"], tuple(by)), None
    claims: dict[str, Any] = {}
    for key in ("removes", "adds"):
        if key in differs:
            value = differs[key]
            if (
                not isinstance(value, list)
                or not value
                or not all(isinstance(x, str) and x for x in value)
            ):
                c.add(f"{where}.differs_from.{key}", "must be a non-empty list of component names")
                return None, None
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
            return None, None
        claims["replaces"] = dict(value)
    if not claims:
        c.add(f"{where}.differs_from", usage)
        return None, None
    return (differs["arm"], ()), claims


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
    removed = [x for x in base if x not in mine]
    added = [x for x in mine if x not in base]
    out: list[str] = []
    for name in [*removes, *replaces]:
        if name not in base:
            out.append(
                f"{where}: {base_id} has no component {name!r} for {arm.id} to remove or "
                f"replace ({base_id}: {base})"
            )
    for name in [*adds, *replaces.values()]:
        if name in base:
            out.append(
                f"{where}: {name!r} is already in {base_id} ({base}); {arm.id} cannot add it"
            )
    if out:
        return out
    claimed_removed = sorted([*removes, *replaces])
    claimed_added = sorted([*adds, *replaces.values()])
    if sorted(removed) != claimed_removed or sorted(added) != claimed_added:
        said = []
        if removes:
            said.append(f"removes {removes}")
        if adds:
            said.append(f"adds {adds}")
        if replaces:
            said.append(f"replaces {replaces}")
        return [
            f"{where}: arm {arm.id} is declared to differ from {base_id} as it "
            f"{', '.join(said)}, but it lacks {removed} and adds {added}"
        ]
    expected = [replaces.get(x, x) for x in base if x not in removes]
    kept = [x for x in mine if x not in adds]
    if kept != expected:
        return [
            f"{where}: apart from what it adds, arm {arm.id} must have {base_id}'s components "
            f"with {replaces or 'nothing'} replaced in place and {removes or 'nothing'} "
            f"removed ({expected}), but it has {kept}"
        ]
    return []
