"""Staged pre-registration: a study locked in phases (``docs/study-spec.md``, "Phases").

A study that is already locked is locked again only as a new *phase*: ``[study] phase`` names
one that is not locked yet. A phase adds arms, stimuli or items, models and hypotheses; it
changes nothing an earlier phase locked. Its ``protocol.locked`` holds the whole plan (every
earlier arm, hypothesis and file as locked, plus the new ones) and the whole schedule: the
earlier phases' trials first, in their locked order, then the new trials in the locked order
of the same seed. Its own registration checkpoint is signed right after it, before any of its
trials can run. The rules, each refused with the thing that breaks it named:

* the plan of every earlier phase is unchanged: each earlier arm, model and hypothesis record
  is identical, and so are the design, the response plan, the analysis table, the prompt, the
  few-shot sets, the amendable list, the title and the blinding commitment (one secret for the
  whole study);
* a locked file is unchanged, except ``study.toml`` (checked through the plan above) and the
  item file or truth table, which may only grow: the file as locked is a byte prefix of the new
  one (items and truth rows appended, none edited, none reordered);
* every earlier trial is still in the design (nothing is dropped);
* a hypothesis of the new phase is not in the family of an earlier phase's hypothesis
  (a correction never spans phases);
* no phase is locked once scoring is sealed: a phase's trials are scored blind with the rest,
  under the commitment locked at the first phase.
"""

from __future__ import annotations

from typing import Any

from ledger import Ledger

__all__ = [
    "GROWABLE_ROLES",
    "UNCHANGED_MEMBERS",
    "hypothesis_phases",
    "locked_bytes",
    "merge_hypotheses",
    "phase_of",
    "plan_problems",
    "protocol_events",
    "trial_phases",
]


def protocol_events(log: Ledger) -> list[Any]:
    """Every ``protocol.locked`` event (one per phase), in ledger order."""
    return list(log.events("protocol.locked"))


GROWABLE_ROLES = ("items", "truth")
"""Roles of locked files a later phase may extend by appending (the old file a byte prefix)."""

UNCHANGED_MEMBERS = (
    "study",
    "title",
    "model",
    "design",
    "response",
    "analysis",
    "amendable",
    "prompt",
    "fewshot",
    "blinding_commitment",
    "witnessing",
    "timestamping",
    "deviations",
    "reviews",
    "privacy",
)
"""Members of ``protocol.locked`` a later phase must carry exactly as the earlier phase did."""


def phase_of(body: dict[str, Any]) -> tuple[int, str | None]:
    """(index, name) of the phase a ``protocol.locked`` body locks; (0, None) if unnamed."""
    phase = body.get("phase")
    if isinstance(phase, dict):
        return int(phase.get("index", 0)), phase.get("name")
    return 0, None


def trial_phases(log: Ledger) -> dict[str, int]:
    """Trial id -> index of the phase whose lock first scheduled it (0 for an unphased study)."""
    out: dict[str, int] = {}
    for event in protocol_events(log):
        index = phase_of(event.body)[0]
        for trial in log.blob(event.blobs["schedule"]).decode("utf-8").splitlines():
            out.setdefault(trial, index)
    return out


def hypothesis_phases(plan: dict[str, Any], log: Ledger) -> dict[str, int]:
    """Hypothesis id -> index of the phase that locked it (0 when it carries no phase)."""
    index = {name: i for i, name in (phase_of(e.body) for e in protocol_events(log))}
    return {h["id"]: index.get(h.get("phase"), 0) for h in plan.get("hypotheses") or []}


def plan_problems(prev: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What the new phase's plan changes of the earlier phase's (each a refusal)."""
    problems: list[str] = []
    for member in UNCHANGED_MEMBERS:
        if prev.get(member) != new.get(member):
            problems.append(
                f"protocol member {member!r} differs from the earlier phase's "
                f"({prev.get(member)!r} locked, {new.get(member)!r} now)"
            )
    for arm, record in (prev.get("arms") or {}).items():
        now = (new.get("arms") or {}).get(arm)
        if now is None:
            problems.append(f"arm {arm!r} of an earlier phase is missing")
        elif now != record:
            changed = sorted(k for k in set(record) | set(now) if record.get(k) != now.get(k))
            problems.append(f"arm {arm!r} of an earlier phase changed ({', '.join(changed)})")
    for name, record in (prev.get("models") or {}).items():
        now = (new.get("models") or {}).get(name)
        if now != record:
            problems.append(
                f"model {name!r} of an earlier phase "
                + ("is missing" if now is None else "changed")
            )
    order = prev.get("model_order")
    if order is not None and (new.get("model_order") or [])[: len(order)] != order:
        problems.append("models: the earlier phase's models must come first, in their order")
    if "models" in prev and "models" not in new:
        problems.append("the earlier phase declared [models]; the new one must too")
    stimuli = prev.get("stimuli")
    if stimuli is not None:
        gone = sorted(set(stimuli) - set(new.get("stimuli") or []))
        if gone:
            problems.append(f"stimuli of an earlier phase are missing: {', '.join(gone)}")
    items = prev.get("items")
    if items is not None:
        now_items = new.get("items") or {}
        for member in ("path", "format"):
            if now_items.get(member) != items.get(member):
                problems.append(f"items.{member} differs from the earlier phase's")
    return problems


def merge_hypotheses(
    prev: dict[str, Any], new: dict[str, Any], name: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """The merged hypothesis records (earlier ones as locked) and what is wrong with them."""
    problems: list[str] = []
    earlier = {h["id"]: h for h in prev.get("hypotheses") or []}
    families = {h.get("family") for h in earlier.values() if h.get("family")}
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for record in new.get("hypotheses") or []:
        seen.add(record["id"])
        old = earlier.get(record["id"])
        if old is not None:
            problems += _changed(old, record)
            out.append(old)
            continue
        if record.get("family") in families:
            problems.append(
                f"hypothesis {record['id']!r}: family {record['family']!r} belongs "
                "to an earlier phase; a correction cannot span phases"
            )
        out.append(record | {"phase": name})
    for hid in earlier:
        if hid not in seen:
            problems.append(f"hypothesis {hid!r} of an earlier phase is missing")
    return out, problems


def _changed(old: dict[str, Any], record: dict[str, Any]) -> list[str]:
    """A hypothesis of an earlier phase must come back as it was locked (its phase aside)."""
    bare_old = {k: v for k, v in old.items() if k != "phase"}
    bare_new = {k: v for k, v in record.items() if k != "phase"}
    if bare_old == bare_new:
        return []
    changed = sorted(k for k in set(bare_old) | set(bare_new) if bare_old.get(k) != bare_new.get(k))
    return [f"hypothesis {record['id']!r} of an earlier phase changed ({', '.join(changed)})"]


def locked_bytes(log: Ledger, rel: str, digest: str) -> bytes | None:
    """The content of ``rel`` as some ``artifact.locked`` or amendment recorded it."""
    for event in log.events("artifact.locked"):
        if event.body["path"] == rel and event.body["sha256"] == digest:
            return log.blob(event.blobs["content"])
    return None
