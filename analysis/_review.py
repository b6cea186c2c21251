"""Declared review samples (``[reviews.<NAME>]``, ``docs/study-spec.md``), of three kinds.

A study declares, before it runs, which decisions will be looked at by hand; the kind follows
from the table's keys and is locked as ``protocol.locked`` ``reviews.<NAME>.kind``:

- ``judge-label`` (``step``, ``n``, ``seed``; ``docs/scoring.md`` §11): once scoring is
  sealed, ``n`` decisions of a trial judge step per stratum of judge agreement, a function of
  the recorded votes alone (:func:`runner.steps._core.review_sample`). A reviewer, holding a key
  registered with the role ``reviewer`` (which may append ``review.recorded`` and nothing
  else), records one label per subject (:mod:`analysis._reviewing`); the verifier checks each
  against the locked sample and the reviewer's role.
- ``contrast`` (``failed``, ``succeeded``, ``n``, ``seed``, ``model``;
  ``docs/mcq-statistics.md`` §9): the items where one condition (arm, variant, on one model)
  was wrong and another right, ``n`` of them drawn by ``SHA-256("<seed>|<item>|<rep>")``.
  :func:`review_values` is the ``review.<NAME>`` analysis result (pure, from the dataset);
  :func:`review_csv` is ``analysis/review/<NAME>.csv`` of the archive (both responses, both
  parsed answers, the question and options, a blank ``codes`` column). ``verify/_review.py``
  re-derives both. With declared ``codes``, coders record them (:mod:`analysis._reviewing`).
- ``reference-set`` (``reference = "supplied"`` or an item step, ``n``, ``seed``): the ``n``
  items with the smallest ``SHA-256("<seed>|<item>")`` whose reference sets clinicians edit
  (:func:`reference_sets`, :func:`runner._human_review.item_sample`).

:func:`review_tables` gives the tables ``ledger analyze`` records of every sample's reviews
(``docs/analysis.md`` §9); ``verify/_human.py`` re-derives them.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping
from typing import Any

from analysis._parse import ParseError, response_text
from analysis._scoring import unwrap_batch
from analysis.mcq import _kinds as mcq_tests
from analysis.mcq import _stats as mcq
from ledger import Ledger
from runner import (
    OPTION_LABELS,
    REFERENCE_FIELDS,
    Renderer,
    code_table,
    item_sample,
    label_table,
    reference_table,
    supplied_sets,
)
from runner.spec import Study
from runner.steps import StepWork, review_sample

__all__ = [
    "CSV_COLUMNS",
    "ORDER_RULE",
    "reference_sets",
    "review_csv",
    "review_tables",
    "review_text",
    "review_values",
]

ORDER_RULE = "ascending SHA-256(seed|item|rep)"
"""The selection order, as ``review.<NAME>`` records it."""
CSV_COLUMNS = (
    "item",
    "rep",
    "order_key",
    "question",
    "options",
    "key_original",
    "failed_trial",
    "failed_letter",
    "failed_answer",
    "failed_response",
    "succeeded_trial",
    "succeeded_letter",
    "succeeded_answer",
    "succeeded_response",
    "codes",
)
"""The columns of ``analysis/review/<NAME>.csv`` (``docs/archive-format.md``)."""


def _cond(review: Mapping[str, Any], side: str) -> tuple[str, str, str]:
    return (
        str(review[side]["arm"]),
        str(review[side].get("variant", "original")),
        str(review.get("model") or ""),
    )


def review_values(ds: Any, plan: dict[str, Any], review: Mapping[str, Any]) -> dict[str, Any]:
    """The ``values`` of ``review.<NAME>`` for the locked ``review`` (module docstring).

    Candidates are the (item, rep) pairs of ``model`` where the ``failed`` condition's trial is
    scored wrong (an unparseable answer is wrong) and the ``succeeded`` condition's right; the
    ``n`` with the smallest order keys are taken, in key order. Each case names both trials,
    the ``trial.responded`` seq of each, the letter as presented and the answer on the options
    as written. Raises :class:`analysis.mcq._stats.McqError` when the two conditions share no pair.
    """
    table = mcq_tests._tables(ds, plan)[1]
    letters = mcq_tests._letters(plan)
    failed, succeeded = _cond(review, "failed"), _cond(review, "succeeded")
    sample = mcq.review_sample(
        table, failed, succeeded, int(review["n"]), int(review["seed"]), letters
    )
    frame = table.frame
    letter = dict(zip(frame["trial"], frame["letter"], strict=True))
    seqs = dict(zip(ds.trials["trial"], ds.trials["response_seq"], strict=True))

    def side(name: str, trial: str, answer: str | None) -> dict[str, Any]:
        value = letter.get(trial)
        return {
            f"{name}_trial": trial,
            f"{name}_response_seq": int(seqs[trial]),
            f"{name}_letter": None if value is None or value != value else str(value),
            f"{name}_answer": answer,
        }

    cases = [
        {
            "item": c.item,
            "rep": c.rep,
            "order_key": c.order_key,
            "key_original": c.key_original,
            **side("failed", c.failed_trial, c.failed_answer),
            **side("succeeded", c.succeeded_trial, c.succeeded_answer),
        }
        for c in sample.cases
    ]
    return {
        "failed": {"arm": failed[0], "variant": failed[1], "model": failed[2]},
        "succeeded": {"arm": succeeded[0], "variant": succeeded[1], "model": succeeded[2]},
        "n": int(review["n"]),
        "seed": str(review["seed"]),
        "order": ORDER_RULE,
        "n_candidates": sample.n_candidates,
        "size": sample.size,
        "cases": cases,
    }


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


def review_csv(
    values: Mapping[str, Any],
    items: Mapping[str, Mapping[str, Any]],
    response: Callable[[int], str],
) -> bytes:
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
        options = "\n".join(
            f"{OPTION_LABELS[i]}. {text}" for i, text in enumerate(item.get("options") or ())
        )
        row = [
            case["item"],
            case["rep"],
            case["order_key"],
            item.get("question") or "",
            options,
            case["key_original"],
        ]
        for name in ("failed", "succeeded"):
            row += [
                case[f"{name}_trial"],
                case[f"{name}_letter"],
                case[f"{name}_answer"],
                response(int(case[f"{name}_response_seq"])),
            ]
        row.append("")
        writer.writerow(["" if v is None else v for v in row])
    return out.getvalue().encode("utf-8")


# ------------------------------------------------------------- recorded reviews


def _judge_sample(log: Ledger, plan: dict[str, Any]) -> dict[int, Any]:
    scored = {
        e.body["response_seq"]: e.body
        for e in log.events("trial.scored")
        if isinstance(e.body.get("judge"), dict) and e.body["judge"].get("step") == plan["step"]
    }
    judged = []
    for seq, body in scored.items():
        votes = [v.get("vote") for v in body["judge"]["votes"]]
        judged.append((seq, None not in votes and len(set(votes)) == 1))
    chosen = review_sample(judged, int(plan["n"]), str(plan["seed"]))
    return {seq: scored[seq] for seq in chosen}


def reference_sets(
    study: Study, reference: str, log: Ledger
) -> dict[str, dict[str, list[str]] | None]:
    """Each item's reference sets (``docs/scoring.md`` §11.1), by item id in item order.

    ``"supplied"``: its metadata arrays; otherwise the decision of the item step
    ``reference`` (its three members, arrays of strings), read with the step-state readers;
    None for an item without them (a step that reached no decision).
    """
    if reference == "supplied":
        return {item.id: supplied_sets(item.metadata) for item in study.load_items()}
    work = StepWork(study, Renderer(study))
    work.load(log)
    out: dict[str, dict[str, list[str]] | None] = {}
    for item in study.stimulus_ids():
        decision = work.decision(reference, item)
        found = (
            {REFERENCE_FIELDS[k]: v for k, v in decision.items() if k in REFERENCE_FIELDS}
            if isinstance(decision, dict)
            else {}
        )
        out[item] = supplied_sets(found)
    return out


# ------------------------------------------------------------- tabulations (ledger analyze)


def review_tables(
    log: Ledger, plan: dict[str, Any], study: Study, drawn: Mapping[str, Any]
) -> list[tuple[str, str, str, Callable[[], dict[str, Any]]]]:
    """The tables of the recorded reviews: ``(id, title, test, compute)``, in name order.

    ``review.<NAME>`` of a reference-set sample (commission and omission per set, agreement
    and either criteria) and of a judge-label sample (reviewers against the judges: agreement
    and Cohen's kappa); ``review.<NAME>.codes`` of a contrast sample with codes (its cases are
    those of the ``values`` of ``review.<NAME>`` in ``drawn``, by result id). ``compute()``
    gives the ``values`` (``docs/analysis.md`` §9); :mod:`analysis._analyze` records them.
    """
    by_sample: dict[str, list[tuple[int, str, Any, Any]]] = {}
    for e in log.events("review.recorded"):
        by_sample.setdefault(str(e.body.get("sample")), []).append(
            (e.seq, e.actor, e.body.get("subject"), e.body.get("value"))
        )
    out: list[tuple[str, str, str, Callable[[], dict[str, Any]]]] = []
    for name, review in sorted((plan.get("reviews") or {}).items()):
        kind = review.get("kind")
        reviews = by_sample.get(name, [])
        if kind == "reference-set":

            def table(
                review: dict[str, Any] = review, reviews: list[Any] = reviews
            ) -> dict[str, Any]:
                sample = item_sample(study.stimulus_ids(), int(review["n"]), str(review["seed"]))
                return {
                    "reference": review["reference"],
                    "n": review["n"],
                    "seed": review["seed"],
                    **reference_table(sample, reviews),
                }

            out.append(
                (
                    f"review.{name}",
                    f"Review of reference sets, sample {name}: "
                    "commission and omission, agreement-based and either-annotator",
                    "reference-review",
                    table,
                )
            )
        elif kind == "judge-label":

            def labels(
                review: dict[str, Any] = review, reviews: list[Any] = reviews
            ) -> dict[str, Any]:
                chosen = _judge_sample(log, review)
                decisions = {seq: b["judge"]["decision"] for seq, b in chosen.items()}
                same = {
                    seq: None not in (v := [x.get("vote") for x in b["judge"]["votes"]])
                    and len(set(v)) == 1
                    for seq, b in chosen.items()
                }
                step = (plan.get("steps") or {}).get(review["step"]) or {}
                return {
                    "step": review["step"],
                    "sample": sorted(chosen),
                    **label_table(decisions, list(step.get("labels") or []), reviews, same),
                }

            out.append(
                (
                    f"review.{name}",
                    f"Reviewers against the judges of step {review['step']}, sample {name}",
                    "judge-review",
                    labels,
                )
            )
        elif kind == "contrast" and review.get("codes"):

            def codes(
                review: dict[str, Any] = review, name: str = name, reviews: list[Any] = reviews
            ) -> dict[str, Any]:
                values = drawn.get(f"review.{name}")
                if values is None:
                    raise ValueError(f"review.{name} was not drawn")
                sample = [c["failed_response_seq"] for c in values["cases"]]
                return code_table(sample, list(review["codes"]), reviews)

            out.append(
                (f"review.{name}.codes", f"Codes of review sample {name}", "review-codes", codes)
            )
    return out
