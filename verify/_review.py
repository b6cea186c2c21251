"""Declared review samples, re-derived from ``docs/mcq-statistics.md`` §9 and the archive format.

The verifier's own second implementation of ``review.<NAME>`` (the sample drawn from the
locked ``reviews.<NAME>`` declaration and the rebuilt trials table) and of
``analysis/review/<NAME>.csv`` (the cases with the question, the options and both responses,
``docs/archive-format.md``). Imports nothing from ``ledger``, ``runner`` or ``analysis``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping
from typing import Any

from verify import _mcq as vm
from verify import _mcqhyp
from verify._rescore import BodyError, batch_message, response_text

__all__ = ["CSV_COLUMNS", "ORDER_RULE", "csv_bytes", "shown_response", "values_of"]

ORDER_RULE = "ascending SHA-256(seed|item|rep)"
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
LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _cond(review: Mapping[str, Any], side: str) -> tuple[str, str, str]:
    cond = review[side]
    return (str(cond["arm"]), str(cond.get("variant", "original")), str(review.get("model") or ""))


def values_of(ds: Any, plan: dict[str, Any], review: Mapping[str, Any]) -> dict[str, Any]:
    """§9: the ``n`` smallest SHA-256 keys among the pairs with failed wrong, succeeded right."""
    rows = _mcqhyp._tables(ds, plan)[1]
    letters = _mcqhyp._letters(plan)
    failed, succeeded = _cond(review, "failed"), _cond(review, "succeeded")
    seed = review["seed"]
    if not (isinstance(seed, str) and seed.isdigit()) or isinstance(review["n"], bool):
        raise vm.McqStatError("reviews: seed must be a decimal string and n an integer")
    sample = vm.review_sample(rows, failed, succeeded, int(review["n"]), int(seed), letters)
    letter = {r["trial"]: r["letter"] for r in rows}
    seqs = {t["trial"]: t["response_seq"] for t in ds.trials}

    def side(name: str, trial: str, answer: Any) -> dict[str, Any]:
        return {
            f"{name}_trial": trial,
            f"{name}_response_seq": int(seqs[trial]),
            f"{name}_letter": letter.get(trial),
            f"{name}_answer": answer,
        }

    cases = [
        {
            "item": c["item"],
            "rep": c["rep"],
            "order_key": c["order_key"],
            "key_original": c["key_original"],
            **side("failed", c["failed_trial"], c["failed_answer"]),
            **side("succeeded", c["succeeded_trial"], c["succeeded_answer"]),
        }
        for c in sample["cases"]
    ]
    return {
        "failed": {"arm": failed[0], "variant": failed[1], "model": failed[2]},
        "succeeded": {"arm": succeeded[0], "variant": succeeded[1], "model": succeeded[2]},
        "n": int(review["n"]),
        "seed": seed,
        "order": ORDER_RULE,
        "n_candidates": sample["n_candidates"],
        "size": sample["size"],
        "cases": cases,
    }


def shown_response(raw: bytes, fmt: str) -> str:
    """The response text of ``docs/trials.md`` §2, else the whole body (UTF-8, U+FFFD)."""
    body, form = (
        (batch_message(raw), "anthropic-messages")
        if (fmt == "anthropic-batch-result")
        else (raw, fmt)
    )
    try:
        return response_text(body, form)
    except BodyError:
        return raw.decode("utf-8", errors="replace")


def csv_bytes(
    values: Mapping[str, Any],
    items: Mapping[str, Mapping[str, Any]],
    response: Callable[[int], str],
) -> bytes:
    """``analysis/review/<NAME>.csv`` (``docs/archive-format.md``), from verified ``values``."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for case in values["cases"]:
        item = items[str(case["item"])]
        options = "\n".join(
            f"{LABELS[i]}. {text}" for i, text in enumerate(item.get("options") or ())
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
