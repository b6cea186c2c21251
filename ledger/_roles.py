"""Key roles and which event kinds each may append (docs/ledger-format.md §4)."""

from __future__ import annotations

ROLES = ("owner", "runner", "scorer", "analyst", "reviewer")

#: Event kinds of DESIGN §4. Any other kind is an extension kind, which only owners may append.
KNOWN_KINDS = frozenset(
    {
        "ledger.genesis",
        "key.added",
        "key.revoked",
        "artifact.locked",
        "protocol.locked",
        "protocol.amended",
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
        "review.recorded",
        "trial.scored",
        "scoring.sealed",
        "blinding.revealed",
        "analysis.result",
        "analysis.posthoc",
        "export.created",
        # an Inspect AI eval recorded by the inspect extra (docs/inspect.md section 4)
        "inspect.locked",
        "inspect.requested",
        "inspect.responded",
        "inspect.failed",
        "inspect.scored",
        "inspect.finished",
    }
)

ROLE_KINDS: dict[str, frozenset[str]] = {
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
    "reviewer": frozenset({"review.recorded"}),  # human review (docs/scoring.md §11)
}


def role_may_append(role: str, kind: str) -> bool:
    """Return True when a key with ``role`` may append an event of ``kind``."""
    if role == "owner":
        return True
    return kind in ROLE_KINDS.get(role, frozenset())
