"""Declared review samples (``[reviews.<NAME>]``, ``docs/study-spec.md``), of two kinds.

A study declares, before it runs, which decisions will be looked at by hand; the kind follows
from the table's keys and is locked as ``protocol.locked`` ``reviews.<NAME>.kind``:

- ``judge-label`` (``step``, ``n``, ``seed``; ``docs/scoring.md`` §11): once scoring is
  sealed, ``n`` decisions of a trial judge step per stratum of judge agreement, a function of
  the recorded votes alone (:func:`runner.steps.review_sample`). A reviewer, holding a key
  registered with the role ``reviewer`` (which may append ``review.recorded`` and nothing
  else), records one label per subject (:func:`review_subjects`, :func:`record_review`); the
  verifier checks each against the locked sample and the reviewer's role.
- ``contrast`` (``failed``, ``succeeded``, ``n``, ``seed``, ``model``;
  ``docs/mcq-statistics.md`` §9): the items where one condition (arm, variant, on one model)
  was wrong and another right, ``n`` of them drawn by ``SHA-256("<seed>|<item>|<rep>")``.
  :func:`review_values` is the ``review.<NAME>`` analysis result (pure, from the dataset);
  :func:`review_csv` is ``analysis/review/<NAME>.csv`` of the archive (both responses, both
  parsed answers, the question and options, a blank ``codes`` column). ``verify/_review.py``
  re-derives both.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis import mcq, mcq_tests
from analysis.parse import ParseError, response_text
from analysis.scoring import unwrap_batch
from ledger import Ledger, SigningKey
from runner.items import OPTION_LABELS
from runner.lock import StudyError, check_integrity, ledger_path, protocol_event
from runner.steps import review_sample

__all__ = [
    "CSV_COLUMNS", "ORDER_RULE", "ReviewSubject", "record_review", "review_csv", "review_subjects",
    "review_text", "review_values",
]  # fmt: skip

ORDER_RULE = "ascending SHA-256(seed|item|rep)"
"""The selection order, as ``review.<NAME>`` records it."""
CSV_COLUMNS = (
    "item", "rep", "order_key", "question", "options", "key_original", "failed_trial",
    "failed_letter", "failed_answer", "failed_response", "succeeded_trial", "succeeded_letter",
    "succeeded_answer", "succeeded_response", "codes",
)  # fmt: skip
"""The columns of ``analysis/review/<NAME>.csv`` (``docs/archive-format.md``)."""


def _cond(review: Mapping[str, Any], side: str) -> tuple[str, str, str]:
    return (str(review[side]["arm"]), str(review[side].get("variant", "original")),
            str(review.get("model") or ""))  # fmt: skip


def review_values(ds: Any, plan: dict[str, Any], review: Mapping[str, Any]) -> dict[str, Any]:
    """The ``values`` of ``review.<NAME>`` for the locked ``review`` (module docstring).

    Candidates are the (item, rep) pairs of ``model`` where the ``failed`` condition's trial is
    scored wrong (an unparseable answer is wrong) and the ``succeeded`` condition's right; the
    ``n`` with the smallest order keys are taken, in key order. Each case names both trials,
    the ``trial.responded`` seq of each, the letter as presented and the answer on the options
    as written. Raises :class:`analysis.mcq.McqError` when the two conditions share no pair.
    """
    table = mcq_tests._tables(ds, plan)[1]
    letters = mcq_tests._letters(plan)
    failed, succeeded = _cond(review, "failed"), _cond(review, "succeeded")
    sample = mcq.review_sample(table, failed, succeeded, int(review["n"]), int(review["seed"]),
                               letters)  # fmt: skip
    frame = table.frame
    letter = dict(zip(frame["trial"], frame["letter"], strict=True))
    seqs = dict(zip(ds.trials["trial"], ds.trials["response_seq"], strict=True))

    def side(name: str, trial: str, answer: str | None) -> dict[str, Any]:
        value = letter.get(trial)
        return {f"{name}_trial": trial, f"{name}_response_seq": int(seqs[trial]),
                f"{name}_letter": None if value is None or value != value else str(value),
                f"{name}_answer": answer}  # fmt: skip

    cases = [
        {"item": c.item, "rep": c.rep, "order_key": c.order_key, "key_original": c.key_original,
         **side("failed", c.failed_trial, c.failed_answer),
         **side("succeeded", c.succeeded_trial, c.succeeded_answer)}
        for c in sample.cases
    ]  # fmt: skip
    return {
        "failed": {"arm": failed[0], "variant": failed[1], "model": failed[2]},
        "succeeded": {"arm": succeeded[0], "variant": succeeded[1], "model": succeeded[2]},
        "n": int(review["n"]), "seed": str(review["seed"]), "order": ORDER_RULE,
        "n_candidates": sample.n_candidates, "size": sample.size, "cases": cases,
    }  # fmt: skip


def review_text(raw: bytes, fmt: str) -> str:
    """The response as the CSV shows it: the text the scorer reads (``docs/trials.md`` §2).

    A body with no text of its format's shape is shown whole, decoded as UTF-8 with U+FFFD
    for each invalid sequence, so the coder sees what came back.
    """
    body, form = unwrap_batch(raw, fmt)
    try:
        return response_text(body, form)
    except ParseError:
        return raw.decode("utf-8", errors="replace")


def review_csv(values: Mapping[str, Any], items: Mapping[str, Mapping[str, Any]],
               response: Callable[[int], str]) -> bytes:
    """``analysis/review/<NAME>.csv`` of a ``review.<NAME>`` result's ``values``.

    ``items`` maps item ids to their data as written (``question``, ``options``);
    ``response(seq)`` is the text of the ``trial.responded`` event at ``seq``
    (:func:`review_text`). One row per case, in sample order; ``options`` is each option as
    ``"<letter>. <text>"`` on its own line, in the order written; ``codes`` is empty.
    """
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for case in values["cases"]:
        item = items[str(case["item"])]
        options = "\n".join(f"{OPTION_LABELS[i]}. {text}"
                            for i, text in enumerate(item.get("options") or ()))  # fmt: skip
        row = [case["item"], case["rep"], case["order_key"], item.get("question") or "", options,
               case["key_original"]]  # fmt: skip
        for name in ("failed", "succeeded"):
            row += [case[f"{name}_trial"], case[f"{name}_letter"], case[f"{name}_answer"],
                    response(int(case[f"{name}_response_seq"]))]  # fmt: skip
        row.append("")
        writer.writerow(["" if v is None else v for v in row])
    return out.getvalue().encode("utf-8")


# ------------------------------------------------------------- judge-label samples


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
    plan = reviews[name]
    if plan.get("kind") != "judge-label":
        raise StudyError(f"{root}: review sample {name!r} is a {plan.get('kind')} sample, not "
                         "one of judge decisions: its cases are the result review."
                         f"{name} of 'ledger analyze', exported for coding as "
                         f"analysis/review/{name}.csv by 'ledger export'")  # fmt: skip
    if next(iter(log.events("scoring.sealed")), None) is None:
        raise StudyError(f"{root}: scoring is not sealed yet; a review sample is drawn from the "
                         "sealed judge decisions (run 'ledger score')")  # fmt: skip
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
