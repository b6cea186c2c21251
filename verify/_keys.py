"""The key registry of ``docs/ledger-format.md`` §4: keys, roles and validity by seq."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from verify._errors import KeyFormatError
from verify._note import Vkey, parse_vkey

__all__ = ["ROLES", "KeyRecord", "Registry", "role_may_append"]

ROLES = frozenset({"owner", "runner", "scorer", "analyst", "reviewer"})

_ROLE_KINDS: dict[str, frozenset[str]] = {
    "runner": frozenset(
        {
            "run.started",
            "run.stopped",
            "trial.requested",
            "trial.responded",
            "trial.failed",
            "batch.submitted",
            "run.preflight",
            "step.requested",
            "step.responded",
            "step.failed",
            "trial.excluded",
            "inspect.requested",
            "inspect.responded",
            "inspect.failed",
        }
    ),
    "scorer": frozenset({"trial.scored", "scoring.sealed"}),
    "analyst": frozenset({"analysis.result", "analysis.posthoc"}),
    "reviewer": frozenset({"review.recorded"}),
}

_ORIGIN_BAD = re.compile(r"[\s+]")


def role_may_append(role: str, kind: str) -> bool:
    """Whether a key with ``role`` may append an event of ``kind`` (owner: every kind)."""
    if role == "owner":
        return True
    kinds = _ROLE_KINDS.get(role)
    return kinds is not None and kind in kinds


@dataclass
class KeyRecord:
    """One registered key: the projection row of the ``keys`` table."""

    vkey: Vkey
    role: str
    added_seq: int
    revoked_seq: int | None = None

    @property
    def actor(self) -> str:
        """The key's actor id."""
        return self.vkey.actor

    def valid_for(self, seq: int) -> bool:
        """Whether the key may sign event ``seq`` (registered before it, not revoked before it)."""
        if not (self.added_seq < seq or seq == self.added_seq == 0):
            return False
        return self.revoked_seq is None or seq <= self.revoked_seq


def _exact_members(body: dict[str, Any], members: tuple[str, ...]) -> str | None:
    if body.keys() == set(members):
        return None
    wanted = " and ".join(members)
    return f"body must have exactly the members {wanted}, has {sorted(body)}"


class Registry:
    """Applies key events in seq order; each ``apply_*`` returns a problem (str) or ``None``.

    A key event whose body breaks a rule is not applied.  Whether its *signer* may append it is the
    signatures check's business, not the registry's.
    """

    def __init__(self) -> None:
        self.keys: dict[str, KeyRecord] = {}
        self.origin: str | None = None
        self.genesis: KeyRecord | None = None

    def apply(self, seq: int, kind: str, actor: object, body: dict[str, Any]) -> str | None:
        """Apply the event if it is a key event; return the problem, if any."""
        if kind == "ledger.genesis":
            return self._genesis(seq, actor, body)
        if kind == "key.added":
            return self._added(seq, body)
        if kind == "key.revoked":
            return self._revoked(seq, body)
        return None

    def _genesis(self, seq: int, actor: object, body: dict[str, Any]) -> str | None:
        if seq != 0:
            return "ledger.genesis is only allowed at seq 0"
        problem = _exact_members(body, ("origin", "vkey"))
        if problem:
            return f"genesis {problem}"
        origin = body["origin"]
        if (
            not isinstance(origin, str)
            or not origin
            or len(origin) > 256
            or _ORIGIN_BAD.search(origin)
        ):
            return (
                f"genesis origin {origin!r:.80} is not 1-256 characters without white space or '+'"
            )
        try:
            vkey = _vkey(body["vkey"])
        except KeyFormatError as exc:
            return f"genesis vkey: {exc}"
        record = KeyRecord(vkey, "owner", 0)
        self.keys[vkey.actor] = record
        self.genesis = record
        self.origin = origin
        if actor != vkey.actor:
            return f"genesis actor {actor!r:.80} is not the actor id {vkey.actor} of its vkey"
        return None

    def _added(self, seq: int, body: dict[str, Any]) -> str | None:
        problem = _exact_members(body, ("vkey", "role"))
        if problem:
            return f"key.added {problem}"
        role = body["role"]
        if role not in ROLES:
            return f"key.added role {role!r:.80} is not one of owner, runner, scorer, analyst"
        try:
            vkey = _vkey(body["vkey"])
        except KeyFormatError as exc:
            return f"key.added vkey: {exc}"
        old = self.keys.get(vkey.actor)
        if old is not None:
            return f"key {vkey.actor} was already registered at seq {old.added_seq}"
        self.keys[vkey.actor] = KeyRecord(vkey, role, seq)
        return None

    def _revoked(self, seq: int, body: dict[str, Any]) -> str | None:
        problem = _exact_members(body, ("actor", "reason"))
        if problem:
            return f"key.revoked {problem}"
        target, reason = body["actor"], body["reason"]
        if not isinstance(reason, str):
            return "key.revoked reason is not a string"
        record = self.keys.get(target) if isinstance(target, str) else None
        if record is None or record.added_seq >= seq:
            return f"key.revoked names {target!r:.80}, which is not a registered key"
        if record.revoked_seq is not None:
            return f"key {target} was already revoked at seq {record.revoked_seq}"
        if record.role == "owner":
            owners = sum(
                1 for k in self.keys.values() if k.role == "owner" and k.revoked_seq is None
            )
            if owners <= 1:
                return f"key.revoked would revoke {target}, the last unrevoked owner key"
        record.revoked_seq = seq
        return None


def _vkey(value: object) -> Vkey:
    if not isinstance(value, str):
        raise KeyFormatError(f"vkey is not a string: {value!r:.80}")
    return parse_vkey(value)
