"""Human review of reference sets and codes (``docs/scoring.md`` §11): samples, edits, tables.

Pure functions shared by ``ledger review`` (:mod:`analysis._reviewing`, which records) and
``ledger analyze`` (which tabulates); ``verify/_human.py`` is the verifier's own second
implementation of the same rules.

- A *reference-set* sample (``[reviews.NAME] reference = "supplied"`` or ``"<item step>"``)
  is the ``n`` items of the item file with the smallest ``SHA-256("{seed}|{item id}")``, in
  that order. A review of item I is an edit of each of its three sets,
  ``{"<set>": {"remove": [...], "add": [...]}}``: a removal must be in the set, an addition
  must not, both compared after :func:`normal`.
- The table of a reference-set sample (:func:`reference_table`) counts, per set, the reviewed
  items with at least one removal (*commission*) and at least one addition (*omission*),
  under the *agreement* criterion (a diagnosis every reviewer flagged) and the *either*
  criterion (a diagnosis at least one reviewer flagged), and the mean number per item.
- A contrast sample with ``codes`` has its cases coded: a review's value is a list of the
  declared codes; :func:`code_table` counts them.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

__all__ = [
    "EDIT_KEYS",
    "REFERENCE_FIELDS",
    "REFERENCE_SETS",
    "code_problem",
    "code_table",
    "edit_problem",
    "item_sample",
    "label_table",
    "normal",
    "reference_table",
    "supplied_sets",
]

REFERENCE_SETS: Final = ("plausible", "highly_likely", "safety_critical")
"""The three reference diagnosis sets, in this order everywhere."""
REFERENCE_FIELDS: Final = {s: f"reference_{s}" for s in REFERENCE_SETS}
"""The item ``metadata`` arrays that supply each set (``docs/items.md``)."""
EDIT_KEYS: Final = ("remove", "add")


def normal(text: str) -> str:
    """A diagnosis as compared: NFC, casefolded, whitespace runs collapsed to one space, trimmed."""
    return " ".join(unicodedata.normalize("NFC", text).casefold().split())


def supplied_sets(metadata: Mapping[str, Any]) -> dict[str, list[str]] | None:
    """An item's supplied reference sets, or None unless all three arrays of strings are there."""
    out: dict[str, list[str]] = {}
    for name, key in REFERENCE_FIELDS.items():
        value = metadata.get(key)
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            return None
        out[name] = list(value)
    return out


def item_sample(items: Iterable[str], n: int, seed: str) -> list[str]:
    """The ``n`` items with the smallest ``SHA-256("{seed}|{item}")`` (hex), in that order."""
    key = {i: hashlib.sha256(f"{seed}|{i}".encode()).hexdigest() for i in items}
    return sorted(key, key=lambda i: key[i])[:n]


def edit_problem(value: Any, sets: Mapping[str, Sequence[str]]) -> str | None:
    """Why ``value`` is not an edit of ``sets`` (module docstring), or None."""
    if not isinstance(value, dict):
        return 'a reference-set review is an object {"<set>": {"remove": [...], "add": [...]}}'
    for name, edit in value.items():
        if name not in REFERENCE_SETS:
            return f"unknown set {name!r} (sets: {', '.join(REFERENCE_SETS)})"
        if not isinstance(edit, dict) or any(k not in EDIT_KEYS for k in edit):
            return f'{name}: an edit is {{"remove": [...], "add": [...]}}'
        for key in EDIT_KEYS:
            problem = _entries_problem(name, key, edit.get(key, []), sets[name])
            if problem is not None:
                return problem
    return None


def _entries_problem(name: str, key: str, entries: Any, have_set: Sequence[str]) -> str | None:
    """Why the ``remove`` or ``add`` list of the edit of set ``name`` is wrong, or None."""
    if not isinstance(entries, list) or not all(isinstance(x, str) and normal(x) for x in entries):
        return f"{name}.{key}: a list of diagnoses (non-empty strings)"
    have = {normal(x) for x in have_set}
    seen: set[str] = set()
    for entry in entries:
        if normal(entry) in seen:
            return f"{name}.{key}: {entry!r} is listed twice"
        seen.add(normal(entry))
        if key == "remove" and normal(entry) not in have:
            return (
                f"{name}.remove: {entry!r} is not in the {name} set "
                f"({', '.join(have_set) or 'empty'})"
            )
        if key == "add" and normal(entry) in have:
            return f"{name}.add: {entry!r} is already in the {name} set"
    return None


def code_problem(value: Any, codes: Sequence[str]) -> str | None:
    """Why ``value`` is not a list of distinct declared codes, or None."""
    if not isinstance(value, list) or not value or not all(isinstance(x, str) for x in value):
        return "codes are a non-empty list of the sample's declared codes"
    for code in value:
        if code not in codes:
            return f"code {code!r} is not declared (codes: {', '.join(codes)})"
    if len(set(value)) != len(value):
        return "a code is listed twice"
    return None


def _latest(reviews: Iterable[tuple[int, str, Any, Any]]) -> dict[str, dict[Any, Any]]:
    """Each reviewer's subjects -> -> value of the reviewer's last review of it (seq order)."""
    out: dict[str, dict[Any, Any]] = {}
    for _, actor, subject, value in sorted(reviews, key=lambda r: r[0]):
        out.setdefault(actor, {})[subject] = value
    return out


def _share(k: int, n: int) -> dict[str, Any]:
    return {"items": k, "n": n, "share": k / n if n else None}


def reference_table(
    sample: Sequence[str], reviews: Iterable[tuple[int, str, Any, Any]]
) -> dict[str, Any]:
    """The table of a reference-set sample (module docstring; ``docs/analysis.md`` §9).

    ``reviews``: (seq, reviewer actor, subject item, value) of each ``review.recorded`` of the
    sample. A reviewer's last review of an item counts. The items tabulated are those of the
    sample that every reviewer reviewed.
    """
    latest = _latest(reviews)
    reviewers = sorted(latest)
    items = [i for i in sample if reviewers and all(i in latest[r] for r in reviewers)]
    n = len(items)
    sets = {
        name: {
            criterion: _set_edits(name, criterion, items, reviewers, latest)
            for criterion in ("agreement", "either")
        }
        for name in REFERENCE_SETS
    }
    return {
        "reviewers": reviewers,
        "sample": list(sample),
        "reviewed": n,
        "partial": len([i for i in sample if any(i in latest[r] for r in reviewers)]) - n,
        "sets": sets,
    }


def _set_edits(
    name: str,
    criterion: str,
    items: Sequence[str],
    reviewers: Sequence[str],
    latest: Mapping[str, Mapping[Any, Any]],
) -> dict[str, Any]:
    """Commission and omission of one set over ``items``.

    An edit counts when every reviewer made it (``agreement``) or any did (``either``).
    """
    n = len(items)
    removed = added = removals = additions = 0
    for item in items:
        flags: dict[str, list[set[str]]] = {k: [] for k in EDIT_KEYS}
        for r in reviewers:
            edit = (latest[r][item] or {}).get(name) or {}
            for key in EDIT_KEYS:
                flags[key].append({normal(x) for x in edit.get(key, [])})
        pick = set.intersection if criterion == "agreement" else set.union
        rem, add = pick(*flags["remove"]), pick(*flags["add"])
        removed += bool(rem)
        added += bool(add)
        removals += len(rem)
        additions += len(add)
    return {
        "commission": _share(removed, n),
        "omission": _share(added, n),
        "mean_removals": removals / n if n else None,
        "mean_additions": additions / n if n else None,
    }


def code_table(
    sample: Sequence[Any], codes: Sequence[str], reviews: Iterable[tuple[int, str, Any, Any]]
) -> dict[str, Any]:
    """Code counts of a coded contrast sample, per reviewer and agreed / either.

    Agreed and either count over the cases every reviewer coded; a reviewer's last coding of
    a case counts.
    """
    latest = _latest(reviews)
    reviewers = sorted(latest)
    cases = [c for c in sample if reviewers and all(c in latest[r] for r in reviewers)]
    per = {r: {c: sum(c in v for v in latest[r].values()) for c in codes} for r in reviewers}
    agreed = {c: sum(all(c in latest[r][s] for r in reviewers) for s in cases) for c in codes}
    either = {c: sum(any(c in latest[r][s] for r in reviewers) for s in cases) for c in codes}
    return {
        "reviewers": reviewers,
        "codes": list(codes),
        "coded": len(cases),
        "by_reviewer": per,
        "agreement": agreed,
        "either": either,
    }


def label_table(
    decisions: Mapping[int, Any],
    labels: Sequence[str],
    reviews: Iterable[tuple[int, str, Any, Any]],
    unanimous: Mapping[int, bool] | None = None,
) -> dict[str, Any]:
    """Reviewers' labels against the judges' decisions (a judge-label sample).

    Per reviewer, over the subjects it labelled whose judges reached a decision: the count,
    the share agreeing, and Cohen's kappa of reviewer vs judges ((p_o - p_e) / (1 - p_e), the
    categories the step's labels; None when p_e = 1); and, per stratum of the sample
    (``unanimous``: subject -> whether the judges were unanimous), the count and the share
    agreeing (seed 001's Figure 6 stratifies the experts' labels so).
    """
    latest = _latest(reviews)
    strata = unanimous or {}
    out: dict[str, Any] = {}
    for reviewer in sorted(latest):
        pairs = [
            (s, v, decisions[s])
            for s, v in latest[reviewer].items()
            if decisions.get(s) is not None
        ]
        n = len(pairs)
        by_stratum = _strata(pairs, strata)
        if not n:
            out[reviewer] = {"n": 0, "agreement": None, "kappa": None, "strata": by_stratum}
            continue
        p_o, kappa = _kappa(pairs, labels)
        out[reviewer] = {"n": n, "agreement": p_o, "kappa": kappa, "strata": by_stratum}
    return {"reviewers": sorted(latest), "labels": list(labels), "by_reviewer": out}


def _strata(
    pairs: Sequence[tuple[int, Any, Any]], strata: Mapping[int, bool]
) -> dict[str, dict[str, Any]]:
    """Count and share agreeing of (subject, label, decision) pairs, per stratum."""
    by_stratum = {}
    for name, flag in (("unanimous", True), ("split", False)):
        mine = [(v, d) for s, v, d in pairs if strata.get(s) is flag]
        by_stratum[name] = {
            "n": len(mine),
            "agreement": sum(a == b for a, b in mine) / len(mine) if mine else None,
        }
    return by_stratum


def _kappa(
    pairs: Sequence[tuple[int, Any, Any]], labels: Sequence[str]
) -> tuple[float, float | None]:
    """(share agreeing, Cohen's kappa) of a reviewer's labels vs the judges' decisions."""
    n = len(pairs)
    p_o = sum(v == d for _, v, d in pairs) / n
    p_e = sum(
        (sum(v == c for _, v, _ in pairs) / n) * (sum(d == c for _, _, d in pairs) / n)
        for c in labels
    )
    return p_o, (p_o - p_e) / (1 - p_e) if p_e != 1 else None
