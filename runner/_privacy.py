"""``[privacy]`` of a study spec: what a public archive withholds (``docs/privacy.md``).

The table has one key, ``withhold``: a list of ``"<event kind>:<blob name>"`` entries naming
the blobs a public export leaves out (and the ledger seals as they are written, so that their
published addresses hide them: ``docs/ledger-format.md`` §6.1), and
``"artifact.locked:<role>"`` entries naming locked files by role. The list is locked in
``protocol.locked`` as ``privacy.withhold`` (sorted), so what will be withheld is registered
before the first trial.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

__all__ = ["WITHHOLDABLE", "WITHHOLDABLE_ROLES", "parse_privacy", "privacy_record"]

WITHHOLDABLE: Final[dict[str, tuple[str, ...]]] = {
    "trial.requested": ("request",),
    "trial.responded": ("response",),
    "trial.failed": ("response",),
    "run.preflight": ("request", "response"),
    "step.requested": ("request",),
    "step.responded": ("response",),
    "step.failed": ("response",),
    "trial.scored": ("scores",),
    "analysis.result": ("items_csv", "trials_csv"),
}
"""Each event kind whose blobs a policy may withhold, with those blob names."""

WITHHOLDABLE_ROLES: Final = ("examples", "item-image", "items", "stimulus", "truth")
"""Roles of locked files a policy may withhold (the data; prompts and the spec stay public)."""


def parse_privacy(data: dict[str, Any], add: Callable[[str, str], None]) -> tuple[str, ...]:
    """The validated ``withhold`` list of ``[privacy]`` (sorted, unique); ``()`` when absent.

    ``add(field, message)`` reports a problem, naming the entry (``privacy.withhold[2]``).
    """
    table = data.get("privacy")
    if table is None:
        return ()
    if not isinstance(table, dict):
        add("privacy", "must be a table with a 'withhold' list")
        return ()
    raw = table.get("withhold")
    if not isinstance(raw, list) or not raw:
        add(
            "privacy.withhold",
            'must be a non-empty list of "<event kind>:<blob name>" '
            'strings (for example "trial.responded:response")',
        )
        return ()
    out: set[str] = set()
    for index, entry in enumerate(raw):
        where = f"privacy.withhold[{index}]"
        if not isinstance(entry, str) or ":" not in entry:
            add(where, f'{entry!r} is not "<event kind>:<blob name>"')
            continue
        kind, _, name = entry.partition(":")
        if kind == "artifact.locked":
            if name not in WITHHOLDABLE_ROLES:
                add(
                    where,
                    f"{entry!r}: locked files are withheld by role, one of "
                    f"{', '.join(WITHHOLDABLE_ROLES)} (the spec, prompts and templates are "
                    "the protocol and stay public)",
                )
                continue
        elif kind not in WITHHOLDABLE:
            known = ", ".join(sorted(WITHHOLDABLE))
            add(
                where,
                f"{entry!r}: unknown event kind {kind!r} (kinds with blobs that may be "
                f"withheld: artifact.locked, {known})",
            )
            continue
        elif name not in WITHHOLDABLE[kind]:
            add(
                where,
                f"{entry!r}: {kind} has no blob {name!r} (its blobs: "
                f"{', '.join(WITHHOLDABLE[kind])})",
            )
            continue
        out.add(entry)
    return tuple(sorted(out))


def privacy_record(withhold: tuple[str, ...]) -> dict[str, Any]:
    """``protocol.locked``'s ``privacy`` member (``{}`` when nothing is withheld)."""
    return {"privacy": {"withhold": list(withhold)}} if withhold else {}
