"""``ledger review``: list a locked review sample and record reviews (``docs/scoring.md`` §11).

A review is a signed ``review.recorded`` event appended by a key with the role ``reviewer``,
once scoring is sealed, of a subject of its locked sample: a judge decision (judge-label), an
item whose supplied reference sets are edited (reference-set), or a case of a contrast sample
with declared codes (its cases drawn from the unblinded dataset as ``review.<NAME>`` draws
them). :mod:`analysis._review` holds the samples and the tables ``ledger analyze`` records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis._analyze import load_dataset, models
from analysis._review import _judge_sample, reference_sets, review_values
from analysis.mcq import _stats as mcq
from ledger import Ledger, SigningKey
from runner import (
    StudyError,
    check_integrity,
    code_problem,
    edit_problem,
    item_sample,
    ledger_path,
    protocol_event,
)

__all__ = ["ReviewSubject", "contrast_cases", "parse_value", "record_review", "review_subjects"]


@dataclass(frozen=True)
class ReviewSubject:
    """One subject of a review sample and the reviews already recorded for it.

    A judge-label sample's subject is a ``response_seq`` (with the votes and decision: blind);
    a reference-set sample's an item id (with its sets, ``shown``); a coded contrast sample's
    the ``failed_response_seq`` of a case (with its item and both answers, ``shown``).
    """

    response_seq: int | str
    stimulus: str
    arm_code: str
    decision: str | None
    votes: tuple[Any, ...]
    reviewed: tuple[str, ...]
    shown: str = ""


def _plan(log: Ledger, root: Path, name: str) -> dict[str, Any]:
    protocol = protocol_event(log)
    assert protocol is not None
    reviews = protocol.body.get("reviews") or {}
    if name not in reviews:
        known = ", ".join(reviews) or "none declared"
        raise StudyError(f"{root}: no review sample {name!r} was locked (samples: {known})")
    plan = dict(reviews[name])
    if plan.get("kind") == "contrast" and not plan.get("codes"):
        raise StudyError(
            f"{root}: review sample {name!r} is a contrast sample without codes: "
            f"its cases are the result review.{name} of 'ledger analyze', "
            f"exported for coding as analysis/review/{name}.csv by 'ledger "
            "export'; declare codes = [...] to record codes with 'ledger "
            "review'"
        )
    if next(iter(log.events("scoring.sealed")), None) is None:
        raise StudyError(
            f"{root}: scoring is not sealed yet; a review is recorded once the "
            "scores are sealed (run 'ledger score'), so no review can shape "
            "what was collected or scored"
        )
    return plan


def contrast_cases(
    log: Ledger, plan: dict[str, Any], review: dict[str, Any]
) -> list[dict[str, Any]]:
    """The cases of a contrast sample, drawn as ``review.<NAME>`` draws them (after unblinding)."""
    settings = plan.get("analysis", {})
    parser = str((plan.get("response") or {}).get("parser", ""))
    ds = load_dataset(
        log,
        exclude_unparseable=bool(settings.get("exclude_unparseable", True)),
        parser=parser,
        models=models(plan),
        variants=bool(plan.get("variants")),
    )
    try:
        return list(review_values(ds, plan, review)["cases"])
    except mcq.McqError as exc:
        raise StudyError(f"review sample: {exc}") from None


def _reviewed(log: Ledger, name: str) -> dict[Any, list[str]]:
    done: dict[Any, list[str]] = {}
    for e in log.events("review.recorded"):
        if e.body.get("sample") == name:
            value = e.body["value"]
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            done.setdefault(e.body["subject"], []).append(text)
    return done


def review_subjects(root: str | Path, name: str) -> list[ReviewSubject]:
    """The subjects of review sample ``name``, with the reviews already recorded for each."""
    root = Path(root)
    study = check_integrity(root)
    with Ledger.open(ledger_path(root), readonly=True) as log:
        plan = _plan(log, root, name)
        done = _reviewed(log, name)
        if plan["kind"] == "reference-set":
            sets = reference_sets(study, str(plan["reference"]), log)
            chosen = item_sample(study.stimulus_ids(), int(plan["n"]), str(plan["seed"]))
            return [
                ReviewSubject(
                    i,
                    i,
                    "",
                    None,
                    (),
                    tuple(done.get(i, [])),
                    json.dumps(sets[i], ensure_ascii=False)
                    if sets[i]
                    else "(no reference sets: the step reached no decision)",
                )
                for i in chosen
            ]
        if plan["kind"] == "contrast":
            protocol = protocol_event(log)
            assert protocol is not None
            cases = contrast_cases(log, protocol.body, plan)
            return [
                ReviewSubject(
                    c["failed_response_seq"],
                    str(c["item"]),
                    "",
                    None,
                    (),
                    tuple(done.get(c["failed_response_seq"], [])),
                    f"rep {c['rep']}: {c['failed_trial']} answered {c['failed_answer']}, "
                    f"{c['succeeded_trial']} answered {c['succeeded_answer']}",
                )
                for c in cases
            ]
        chosen_scores = _judge_sample(log, plan)
    return [
        ReviewSubject(
            seq,
            b["stimulus"],
            b["arm_code"],
            b["judge"]["decision"],
            tuple(v["vote"] for v in b["judge"]["votes"]),
            tuple(done.get(seq, [])),
        )
        for seq, b in chosen_scores.items()
    ]


def parse_value(kind: str, text: str) -> Any:
    """A review value as ``ledger review --value`` gives it.

    A label (judge-label); a JSON object of edits (reference-set); codes separated by commas
    (code).
    """
    if kind == "reference-set":
        try:
            return json.loads(text)
        except ValueError as exc:
            raise StudyError(
                f"--value: a reference-set review is a JSON object of edits ({exc})"
            ) from None
    if kind == "code":
        return [c.strip() for c in text.split(",") if c.strip()]
    return text


def record_review(
    root: str | Path, key: SigningKey, name: str, subject: int | str, value: Any
) -> int:
    """Append a ``review.recorded`` of ``subject`` in sample ``name`` (``docs/scoring.md`` §11).

    The key must be registered with the role ``reviewer``; the subject in the locked sample;
    the value a label of the judge step (judge-label), an edit of the item's reference sets
    (reference-set: removals in the set, additions not) or a list of the declared codes (a
    coded contrast sample). Returns the event's seq; nothing is appended otherwise.
    """
    root = Path(root)
    study = check_integrity(root)
    with Ledger.open(ledger_path(root)) as log:
        records = log.keys()
        role = next((k.role for k in records if k.vkey == key.vkey and k.revoked_seq is None), None)
        if role != "reviewer":
            raise StudyError(
                f"{root}: a review is signed by a key with the role 'reviewer' "
                f"(this key's role: {role or 'not registered'}); register one "
                "with 'ledger key add ... --role reviewer'"
            )
        plan = _plan(log, root, name)
        kind = plan["kind"]
        if kind == "reference-set":
            sets = reference_sets(study, str(plan["reference"]), log)
            chosen = item_sample(study.stimulus_ids(), int(plan["n"]), str(plan["seed"]))
            if str(subject) not in chosen:
                raise StudyError(
                    f"{root}: item {subject!r} is not in review sample {name!r} "
                    f"(its items: {', '.join(chosen)})"
                )
            subject = str(subject)
            found = sets[subject]
            if found is None:
                raise StudyError(
                    f"{root}: item {subject!r} has no reference sets to review "
                    f"(step {plan['reference']!r} reached no decision)"
                )
            problem = edit_problem(value, found)
            if problem is not None:
                raise StudyError(f"review of item {subject!r}: {problem}")
        elif kind == "contrast":
            protocol = protocol_event(log)
            assert protocol is not None
            seqs = [int(c["failed_response_seq"]) for c in contrast_cases(log, protocol.body, plan)]
            if not str(subject).isdigit() or int(subject) not in seqs:
                raise StudyError(
                    f"{root}: {subject!r} is not a case of review sample {name!r} "
                    f"(its cases, by failed_response_seq: "
                    f"{', '.join(map(str, seqs))})"
                )
            subject, kind = int(subject), "code"
            problem = code_problem(value, plan["codes"])
            if problem is not None:
                raise StudyError(f"review of case {subject}: {problem}")
        else:
            chosen_scores = _judge_sample(log, plan)
            if not str(subject).isdigit() or int(subject) not in chosen_scores:
                raise StudyError(
                    f"{root}: seq {subject} is not in review sample {name!r} (its "
                    f"subjects: {', '.join(map(str, chosen_scores))})"
                )
            subject = int(subject)
            labels = study.steps[plan["step"]].labels
            if value not in labels:
                raise StudyError(
                    f"value {value!r} is not a label of step {plan['step']!r} ({', '.join(labels)})"
                )
        analysed = next(iter(log.events("analysis.result")), None)
        if analysed is not None:
            raise StudyError(
                f"{root}: the study is analysed (analysis.result from seq {analysed.seq}): a "
                "review recorded now would be in no result; reviews are recorded between "
                "'ledger score' (the seal) and 'ledger analyze' (docs/scoring.md section 11)"
            )
        event = log.append(
            "review.recorded",
            {"sample": name, "subject": subject, "kind": kind, "value": value},
            key=key,
        )
    return event.seq
