"""Declared review samples (``[reviews.<NAME>]``): the sample and its export for human coding.

A study declares, before it runs, which decisions will be coded by hand: the items where one
condition (arm, variant, on one model) was wrong and another right, ``n`` of them drawn by
``SHA-256("<seed>|<item>|<rep>")`` (``docs/mcq-statistics.md`` §9, ``docs/study-spec.md``).
:func:`review_values` is the ``review.<NAME>`` analysis result (pure, from the dataset);
:func:`review_csv` is ``analysis/review/<NAME>.csv`` of the archive (both responses, both
parsed answers, the question and options, a blank ``codes`` column). ``verify/_review.py``
re-derives both.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping
from typing import Any

from analysis import mcq, mcq_tests
from analysis.parse import ParseError, response_text
from analysis.scoring import unwrap_batch
from runner.items import OPTION_LABELS

__all__ = ["CSV_COLUMNS", "ORDER_RULE", "review_csv", "review_text", "review_values"]

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
