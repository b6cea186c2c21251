"""Human review of judge decisions as signed events (``docs/scoring.md`` §11).

A study declares its review samples before lock (``[reviews.NAME]``: a judge step, ``n``
decisions per stratum, a seed); once scoring is sealed, the sample is a function of the
recorded judge votes alone (:func:`runner.steps.review_sample`), so which decisions are
reviewed is never chosen after the fact. A reviewer, holding a key registered with the role
``reviewer`` (which may append ``review.recorded`` and nothing else), records one label per
subject; the verifier checks each against the locked sample and the reviewer's role.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger import Ledger, SigningKey
from runner.lock import StudyError, check_integrity, ledger_path, protocol_event
from runner.steps import review_sample

__all__ = ["ReviewSubject", "record_review", "review_subjects"]


@dataclass(frozen=True)
class ReviewSubject:
    """One decision of a review sample: its ``trial.scored`` and what the judges said."""

    response_seq: int
    stimulus: str
    arm_code: str
    decision: str | None
    votes: tuple[Any, ...]
    reviewed: tuple[str, ...]


def _sample(log: Ledger, root: Path, name: str) -> tuple[dict[str, Any], dict[int, Any]]:
    protocol = protocol_event(log)
    assert protocol is not None
    reviews = protocol.body.get("reviews") or {}
    if name not in reviews:
        known = ", ".join(reviews) or "none declared"
        raise StudyError(f"{root}: no review sample {name!r} was locked (samples: {known})")
    if next(iter(log.events("scoring.sealed")), None) is None:
        raise StudyError(f"{root}: scoring is not sealed yet; a review sample is drawn from the "
                         "sealed judge decisions (run 'ledger score')")  # fmt: skip
    plan = reviews[name]
    scored = {
        e.body["response_seq"]: e.body for e in log.events("trial.scored")
        if isinstance(e.body.get("judge"), dict) and e.body["judge"].get("step") == plan["step"]
    }  # fmt: skip
    judged = []
    for seq, body in scored.items():
        votes = [v.get("vote") for v in body["judge"]["votes"]]
        judged.append((seq, None not in votes and len(set(votes)) == 1))
    chosen = review_sample(judged, int(plan["n"]), str(plan["seed"]))
    return plan, {seq: scored[seq] for seq in chosen}


def review_subjects(root: str | Path, name: str) -> list[ReviewSubject]:
    """The subjects of review sample ``name``, with the labels already recorded for each."""
    root = Path(root)
    check_integrity(root)
    with Ledger.open(ledger_path(root), readonly=True) as log:
        _, chosen = _sample(log, root, name)
        done: dict[int, list[str]] = {}
        for e in log.events("review.recorded"):
            if e.body.get("sample") == name:
                done.setdefault(e.body["subject"], []).append(str(e.body["value"]))
    return [
        ReviewSubject(seq, b["stimulus"], b["arm_code"], b["judge"]["decision"],
                      tuple(v["vote"] for v in b["judge"]["votes"]), tuple(done.get(seq, [])))
        for seq, b in chosen.items()
    ]  # fmt: skip


def record_review(root: str | Path, key: SigningKey, name: str, subject: int, value: str) -> int:
    """Append a ``review.recorded`` for ``subject`` (a ``response_seq`` of sample ``name``).

    The key must be registered with the role ``reviewer``; ``value`` one of the judge step's
    labels; ``subject`` in the sample. Returns the event's seq; nothing is appended otherwise.
    """
    root = Path(root)
    study = check_integrity(root)
    with Ledger.open(ledger_path(root)) as log:
        records = log.keys()
        role = next((k.role for k in records if k.vkey == key.vkey
                     and k.revoked_seq is None), None)  # fmt: skip
        if role != "reviewer":
            raise StudyError(f"{root}: a review is signed by a key with the role 'reviewer' "
                             f"(this key's role: {role or 'not registered'}); register one "
                             "with 'ledger key add ... --role reviewer'")  # fmt: skip
        plan, chosen = _sample(log, root, name)
        if subject not in chosen:
            raise StudyError(f"{root}: seq {subject} is not in review sample {name!r} (its "
                             f"subjects: {', '.join(map(str, chosen))})")  # fmt: skip
        labels = study.steps[plan["step"]].labels
        if value not in labels:
            raise StudyError(f"value {value!r} is not a label of step {plan['step']!r} "
                             f"({', '.join(labels)})")  # fmt: skip
        event = log.append(
            "review.recorded",
            {"sample": name, "subject": subject, "kind": "judge-label", "value": value},
            key=key,
        )
    return event.seq
