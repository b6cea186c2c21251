"""Human review re-derived from ``docs/scoring.md`` §11 and ``docs/analysis.md`` §9.

The verifier's own second implementation of the reference-set sample and its edits, the
declared codes of a contrast sample, and the tables ``ledger analyze`` records of them
(commission and omission under the agreement and either criteria; code counts; reviewers
against the judges). Imports nothing from ``ledger``, ``runner`` or ``analysis``.
"""

from __future__ import annotations

import hashlib
import math
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "SETS",
    "code_problem",
    "code_table",
    "edit_problem",
    "item_sample",
    "label_table",
    "normal",
    "reference_table",
    "supplied_sets",
]

SETS = ("plausible", "highly_likely", "safety_critical")
Review = tuple[int, str, Any, Any]  # (seq, reviewer actor, subject, value)


def normal(text: str) -> str:
    """§11: NFC, casefold, whitespace runs to one space, trimmed."""
    return " ".join(unicodedata.normalize("NFC", text).casefold().split())


def supplied_sets(metadata: Any) -> dict[str, list[str]] | None:
    """The three ``metadata.reference_<set>`` arrays of strings, or None if one is missing."""
    if type(metadata) is not dict:
        return None
    out = {}
    for name in SETS:
        value = metadata.get(f"reference_{name}")
        if type(value) is not list or any(type(x) is not str for x in value):
            return None
        out[name] = list(value)
    return out


def item_sample(items: Iterable[str], n: int, seed: str) -> list[str]:
    """§11: the ``n`` items with the smallest SHA-256("{seed}|{item}") hex, in that order."""
    keyed = sorted((hashlib.sha256(f"{seed}|{i}".encode()).hexdigest(), i) for i in items)
    return [i for _, i in keyed[:n]]


def edit_problem(value: Any, sets: Mapping[str, Sequence[str]]) -> str | None:
    """§11: why ``value`` is not an edit of ``sets`` (removals in the set, additions not)."""
    if type(value) is not dict:
        return "not an object of edits"
    for name, edit in value.items():
        if name not in SETS:
            return f"unknown set {name!r}"
        if type(edit) is not dict or not set(edit) <= {"remove", "add"}:
            return f"{name}: not an edit {{remove, add}}"
        have = {normal(x) for x in sets[name]}
        for key in ("remove", "add"):
            problem = _entries_problem(f"{name}.{key}", key == "remove", edit.get(key, []), have)
            if problem is not None:
                return problem
    return None


def _entries_problem(where: str, remove: bool, entries: Any, have: set[str]) -> str | None:
    """Why one side of an edit (``remove`` or ``add``) is not a list of distinct diagnoses.

    Removals must each be in the set, additions each not.
    """
    if type(entries) is not list or any(type(x) is not str or not normal(x) for x in entries):
        return f"{where}: not a list of diagnoses"
    normals = [normal(x) for x in entries]
    if len(set(normals)) != len(normals):
        return f"{where}: a diagnosis twice"
    for entry, norm in zip(entries, normals, strict=True):
        if remove and norm not in have:
            return f"{where}: {entry!r} is not in the set"
        if not remove and norm in have:
            return f"{where}: {entry!r} is already in the set"
    return None


def code_problem(value: Any, codes: Sequence[str]) -> str | None:
    """§11: why ``value`` is not a non-empty list of distinct declared codes."""
    if type(value) is not list or not value or any(type(x) is not str for x in value):
        return "not a non-empty list of codes"
    bad = [x for x in value if x not in codes]
    if bad:
        return f"code {bad[0]!r} is not declared"
    if len(set(value)) != len(value):
        return "a code twice"
    return None


def _last(reviews: Iterable[Review]) -> dict[str, dict[Any, Any]]:
    out: dict[str, dict[Any, Any]] = {}
    for _, actor, subject, value in sorted(reviews, key=lambda r: r[0]):
        out.setdefault(actor, {})[subject] = value
    return out


def reference_table(sample: Sequence[str], reviews: Iterable[Review]) -> dict[str, Any]:
    """analysis.md §10: per set, commission and omission under agreement and either."""
    last = _last(reviews)
    who = sorted(last)
    done = [i for i in sample if who and all(i in last[r] for r in who)]
    n = len(done)
    touched = [i for i in sample if any(i in last[r] for r in who)]
    table: dict[str, Any] = {}
    for name in SETS:
        table[name] = {
            criterion: _set_row(_edit_counts(name, criterion, done, last, who), n)
            for criterion in ("agreement", "either")
        }
    return {
        "reviewers": who,
        "sample": list(sample),
        "reviewed": n,
        "partial": len(touched) - n,
        "sets": table,
    }


def _edit_counts(
    name: str, criterion: str, done: Sequence[str], last: dict[str, dict[Any, Any]], who: list[str]
) -> dict[str, list[int]]:
    """Per side (remove, add) of set ``name``: [items with at least one, diagnoses].

    The reviewers' edits are taken where all agree (``agreement``) or where any made one
    (``either``).
    """
    counts = {"remove": [0, 0], "add": [0, 0]}
    for item in done:
        for key in ("remove", "add"):
            flagged = [
                {normal(x) for x in ((last[r][item] or {}).get(name) or {}).get(key, [])}
                for r in who
            ]
            both = (
                flagged[0].intersection(*flagged[1:])
                if criterion == "agreement"
                else flagged[0].union(*flagged[1:])
            )
            counts[key][0] += 1 if both else 0
            counts[key][1] += len(both)
    return counts


def _set_row(counts: dict[str, list[int]], n: int) -> dict[str, Any]:
    """One set's commission (removals) and omission (additions) over ``n`` reviewed items."""
    return {
        "commission": {
            "items": counts["remove"][0],
            "n": n,
            "share": counts["remove"][0] / n if n else None,
        },
        "omission": {
            "items": counts["add"][0],
            "n": n,
            "share": counts["add"][0] / n if n else None,
        },
        "mean_removals": counts["remove"][1] / n if n else None,
        "mean_additions": counts["add"][1] / n if n else None,
    }


def code_table(
    sample: Sequence[Any], codes: Sequence[str], reviews: Iterable[Review]
) -> dict[str, Any]:
    """analysis.md §10: code counts per reviewer, and agreed / either over fully coded cases."""
    last = _last(reviews)
    who = sorted(last)
    full = [s for s in sample if who and all(s in last[r] for r in who)]
    return {
        "reviewers": who,
        "codes": list(codes),
        "coded": len(full),
        "by_reviewer": {
            r: {c: len([v for v in last[r].values() if c in v]) for c in codes} for r in who
        },
        "agreement": {c: _coded(c, full, last, who, all) for c in codes},
        "either": {c: _coded(c, full, last, who, any) for c in codes},
    }


def _coded(
    code: str,
    full: Sequence[Any],
    last: dict[str, dict[Any, Any]],
    who: list[str],
    combine: Callable[[Iterable[bool]], bool],
) -> int:
    """How many fully coded cases all (``combine=all``) or any reviewer gave ``code``."""
    return len([s for s in full if combine(code in last[r][s] for r in who)])


def _strata(rows: list[tuple[int, Any, Any]], unanimous: Mapping[int, bool]) -> dict[str, Any]:
    """A reviewer's agreement with the judges where they were unanimous, and where split."""
    strata = {}
    for name in ("unanimous", "split"):
        inside = [(v, d) for s, v, d in rows if unanimous.get(s) is (name == "unanimous")]
        strata[name] = {
            "n": len(inside),
            "agreement": (len([1 for v, d in inside if v == d]) / len(inside) if inside else None),
        }
    return strata


def _reviewer_agreement(
    rows: list[tuple[int, Any, Any]], labels: Sequence[str], strata: dict[str, Any]
) -> dict[str, Any]:
    """A reviewer's agreement with the judges' decisions and Cohen's kappa over ``rows``."""
    n = len(rows)
    if n == 0:
        return {"n": 0, "agreement": None, "kappa": None, "strata": strata}
    p_o = math.fsum(1 for _, v, d in rows if v == d) / n
    reviewer_share = {c: len([1 for _, v, _ in rows if v == c]) / n for c in labels}
    judges_share = {c: len([1 for _, _, d in rows if d == c]) / n for c in labels}
    p_e = math.fsum(reviewer_share[c] * judges_share[c] for c in labels)
    return {
        "n": n,
        "agreement": p_o,
        "kappa": (p_o - p_e) / (1 - p_e) if p_e != 1 else None,
        "strata": strata,
    }


def label_table(
    decisions: Mapping[int, Any],
    labels: Sequence[str],
    reviews: Iterable[Review],
    unanimous: Mapping[int, bool],
) -> dict[str, Any]:
    """analysis.md §10: each reviewer against the judges' decisions.

    Agreement, Cohen's kappa, and the agreement within each stratum (judges unanimous, split).
    """
    last = _last(reviews)
    per: dict[str, Any] = {}
    for who in sorted(last):
        rows = [(s, v, decisions[s]) for s, v in last[who].items() if decisions.get(s) is not None]
        per[who] = _reviewer_agreement(rows, labels, _strata(rows, unanimous))
    return {"reviewers": sorted(last), "labels": list(labels), "by_reviewer": per}
