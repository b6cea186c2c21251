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
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis import mcq, mcq_tests
from analysis.parse import ParseError, response_text
from analysis.scoring import unwrap_batch
from ledger import Ledger, SigningKey
from runner.human_review import (
    code_problem,
    code_table,
    edit_problem,
    item_sample,
    label_table,
    reference_table,
    supplied_sets,
)
from runner.items import OPTION_LABELS
from runner.lock import StudyError, check_integrity, ledger_path, protocol_event
from runner.spec import Study
from runner.steps import review_sample

__all__ = [
    "CSV_COLUMNS", "ORDER_RULE", "ReviewSubject", "contrast_cases", "parse_value", "record_review",
    "reference_sets", "review_csv", "review_subjects", "review_tables", "review_text",
    "review_values",
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


# ------------------------------------------------------------- recorded reviews


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
        raise StudyError(f"{root}: review sample {name!r} is a contrast sample without codes: "
                         f"its cases are the result review.{name} of 'ledger analyze', "
                         f"exported for coding as analysis/review/{name}.csv by 'ledger "
                         "export'; declare codes = [...] to record codes with 'ledger "
                         "review'")  # fmt: skip
    if next(iter(log.events("scoring.sealed")), None) is None:
        raise StudyError(f"{root}: scoring is not sealed yet; a review is recorded once the "
                         "scores are sealed (run 'ledger score'), so no review can shape "
                         "what was collected or scored")  # fmt: skip
    return plan


def _judge_sample(log: Ledger, plan: dict[str, Any]) -> dict[int, Any]:
    scored = {
        e.body["response_seq"]: e.body for e in log.events("trial.scored")
        if isinstance(e.body.get("judge"), dict) and e.body["judge"].get("step") == plan["step"]
    }  # fmt: skip
    judged = []
    for seq, body in scored.items():
        votes = [v.get("vote") for v in body["judge"]["votes"]]
        judged.append((seq, None not in votes and len(set(votes)) == 1))
    chosen = review_sample(judged, int(plan["n"]), str(plan["seed"]))
    return {seq: scored[seq] for seq in chosen}


def reference_sets(study: Study, reference: str) -> dict[str, dict[str, list[str]]]:
    """Each item's reference sets as supplied in its metadata (``reference = "supplied"``)."""
    assert reference == "supplied", reference
    out: dict[str, dict[str, list[str]]] = {}
    for item in study.load_items():
        sets = supplied_sets(item.metadata)
        if sets is not None:
            out[item.id] = sets
    return out


def contrast_cases(
    log: Ledger, plan: dict[str, Any], review: dict[str, Any]
) -> list[dict[str, Any]]:
    """The cases of a contrast sample, drawn as ``review.<NAME>`` draws them (after unblinding)."""
    from analysis.analyze import load_dataset, models  # analyze imports this module

    settings = plan.get("analysis", {})
    parser = str((plan.get("response") or {}).get("parser", ""))
    ds = load_dataset(log, exclude_unparseable=bool(settings.get("exclude_unparseable", True)),
                      parser=parser, models=models(plan),
                      variants=bool(plan.get("variants")))  # fmt: skip
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
            sets = reference_sets(study, str(plan["reference"]))
            chosen = item_sample(sets, int(plan["n"]), str(plan["seed"]))
            return [ReviewSubject(i, i, "", None, (), tuple(done.get(i, [])),
                                  json.dumps(sets[i], ensure_ascii=False))
                    for i in chosen]  # fmt: skip
        if plan["kind"] == "contrast":
            protocol = protocol_event(log)
            assert protocol is not None
            cases = contrast_cases(log, protocol.body, plan)
            return [ReviewSubject(
                c["failed_response_seq"], str(c["item"]), "", None, (),
                tuple(done.get(c["failed_response_seq"], [])),
                f"rep {c['rep']}: {c['failed_trial']} answered {c['failed_answer']}, "
                f"{c['succeeded_trial']} answered {c['succeeded_answer']}")
                for c in cases]  # fmt: skip
        chosen_scores = _judge_sample(log, plan)
    return [
        ReviewSubject(seq, b["stimulus"], b["arm_code"], b["judge"]["decision"],
                      tuple(v["vote"] for v in b["judge"]["votes"]), tuple(done.get(seq, [])))
        for seq, b in chosen_scores.items()
    ]  # fmt: skip


def parse_value(kind: str, text: str) -> Any:
    """A review value as ``ledger review --value`` gives it.

    A label (judge-label); a JSON object of edits (reference-set); codes separated by commas
    (code).
    """
    if kind == "reference-set":
        try:
            return json.loads(text)
        except ValueError as exc:
            raise StudyError(f"--value: a reference-set review is a JSON object of edits "
                             f"({exc})") from None
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
        role = next((k.role for k in records if k.vkey == key.vkey
                     and k.revoked_seq is None), None)  # fmt: skip
        if role != "reviewer":
            raise StudyError(f"{root}: a review is signed by a key with the role 'reviewer' "
                             f"(this key's role: {role or 'not registered'}); register one "
                             "with 'ledger key add ... --role reviewer'")  # fmt: skip
        plan = _plan(log, root, name)
        kind = plan["kind"]
        if kind == "reference-set":
            sets = reference_sets(study, str(plan["reference"]))
            chosen = item_sample(sets, int(plan["n"]), str(plan["seed"]))
            if str(subject) not in chosen:
                raise StudyError(f"{root}: item {subject!r} is not in review sample {name!r} "
                                 f"(its items: {', '.join(chosen)})")  # fmt: skip
            subject = str(subject)
            problem = edit_problem(value, sets[subject])
            if problem is not None:
                raise StudyError(f"review of item {subject!r}: {problem}")
        elif kind == "contrast":
            protocol = protocol_event(log)
            assert protocol is not None
            seqs = [int(c["failed_response_seq"]) for c in contrast_cases(log, protocol.body, plan)]
            if not str(subject).isdigit() or int(subject) not in seqs:
                raise StudyError(f"{root}: {subject!r} is not a case of review sample {name!r} "
                                 f"(its cases, by failed_response_seq: "
                                 f"{', '.join(map(str, seqs))})")  # fmt: skip
            subject, kind = int(subject), "code"
            problem = code_problem(value, plan["codes"])
            if problem is not None:
                raise StudyError(f"review of case {subject}: {problem}")
        else:
            chosen_scores = _judge_sample(log, plan)
            if not str(subject).isdigit() or int(subject) not in chosen_scores:
                raise StudyError(f"{root}: seq {subject} is not in review sample {name!r} (its "
                                 f"subjects: {', '.join(map(str, chosen_scores))})")  # fmt: skip
            subject = int(subject)
            labels = study.steps[plan["step"]].labels
            if value not in labels:
                raise StudyError(f"value {value!r} is not a label of step {plan['step']!r} "
                                 f"({', '.join(labels)})")  # fmt: skip
        event = log.append(
            "review.recorded",
            {"sample": name, "subject": subject, "kind": kind, "value": value},
            key=key,
        )
    return event.seq


# ------------------------------------------------------------- tabulations (ledger analyze)


def review_tables(log: Ledger, plan: dict[str, Any], study: Study, results: list[Any]) -> list[Any]:
    """The tables of the recorded reviews, one result per sample that has them, in name order.

    ``review.<NAME>`` of a reference-set sample (commission and omission per set, agreement
    and either criteria) and of a judge-label sample (reviewers against the judges: agreement
    and Cohen's kappa); ``review.<NAME>.codes`` of a contrast sample with codes (its cases
    are those of ``review.<NAME>`` in ``results``). ``docs/analysis.md`` §9.
    """
    from analysis.analyze import Result, _guard  # analyze imports this module

    by_sample: dict[str, list[tuple[int, str, Any, Any]]] = {}
    for e in log.events("review.recorded"):
        by_sample.setdefault(str(e.body.get("sample")), []).append(
            (e.seq, e.actor, e.body.get("subject"), e.body.get("value")))
    recorded = {r.id: r for r in results}
    out = []
    for name, review in sorted((plan.get("reviews") or {}).items()):
        kind = review.get("kind")
        reviews = by_sample.get(name, [])
        if kind == "reference-set":
            r = Result(f"review.{name}", f"Review of reference sets, sample {name}: commission "
                       "and omission, agreement-based and either-annotator", "descriptive",
                       "reference-review")  # fmt: skip

            def table(r: Any = r, review: dict[str, Any] = review,
                      reviews: list[Any] = reviews) -> None:
                sets = reference_sets(study, str(review["reference"]))
                sample = item_sample(sets, int(review["n"]), str(review["seed"]))
                r.values = {"reference": review["reference"], "n": review["n"],
                            "seed": review["seed"], **reference_table(sample, reviews)}

            out.append(_guard(r, table))
        elif kind == "judge-label":
            r = Result(f"review.{name}", f"Reviewers against the judges of step "
                       f"{review['step']}, sample {name}", "descriptive", "judge-review")

            def labels(r: Any = r, review: dict[str, Any] = review,
                       reviews: list[Any] = reviews) -> None:
                chosen = _judge_sample(log, review)
                decisions = {seq: b["judge"]["decision"] for seq, b in chosen.items()}
                step = (plan.get("steps") or {}).get(review["step"]) or {}
                r.values = {"step": review["step"], "sample": sorted(chosen),
                            **label_table(decisions, list(step.get("labels") or []),
                                          reviews)}  # fmt: skip

            out.append(_guard(r, labels))
        elif kind == "contrast" and review.get("codes"):
            r = Result(f"review.{name}.codes", f"Codes of review sample {name}", "descriptive",
                       "review-codes")  # fmt: skip

            def codes(r: Any = r, review: dict[str, Any] = review, name: str = name,
                      reviews: list[Any] = reviews) -> None:
                drawn = recorded.get(f"review.{name}")
                if drawn is None or drawn.values is None:
                    raise ValueError(f"review.{name} was not drawn")
                sample = [c["failed_response_seq"] for c in drawn.values["cases"]]
                r.values = code_table(sample, list(review["codes"]), reviews)

            out.append(_guard(r, codes))
    return out
