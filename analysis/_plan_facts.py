"""Facts of a locked plan that the analysis, the report and the export all read.

The parser's closed answer set and the models trials run, apart from :mod:`analysis._analyze`
so that the report and ``ledger export`` read them without importing the statistics (scipy):
an export's memory before its first event is mostly the modules it loads (issue 41).
"""

from __future__ import annotations

from typing import Any

from analysis import parsers

__all__ = ["TUMBLING_E", "labels", "trial_models"]

TUMBLING_E = "tumbling-e-json"
"""The template's parser, and the one a plan without ``[response] parser`` uses."""


def labels(plan: dict[str, Any]) -> tuple[str, ...] | None:
    """The answers the study's parser can give (``docs/analysis.md`` §3), or None.

    Its registry entry's closed answer set (:mod:`analysis.parsers`): UP RIGHT DOWN LEFT for
    ``tumbling-e-json`` and ``orientation-word``; yes no maybe; the letters of
    ``multiple-choice`` and ``cloze``; None for ``exact`` and ``normalized`` (free text).
    """
    response = plan.get("response") or {}
    entry = parsers.lookup(str(response.get("parser", TUMBLING_E)))
    if entry is None or entry.answers is None:
        return None
    return entry.answers(str(response.get("letters") or "ABCD"))


def trial_models(plan: dict[str, Any], names: tuple[str, ...]) -> set[str]:
    """The models trials run (``docs/prompts.md`` §8).

    Every model, unless the study has steps and every arm lists its models: then their union
    (a model only steps use has no trial).
    """
    arms = plan.get("arms")
    if not plan.get("steps") or not isinstance(arms, dict):
        return set(names)
    used: set[str] = set()
    for arm in arms.values():
        if isinstance(arm, dict) and "response_from" in arm:
            continue  # a data arm runs no model (docs/trials.md §6)
        listed = arm.get("models") if isinstance(arm, dict) else None
        if not isinstance(listed, list):
            return set(names)
        used.update(str(m) for m in listed)
    return used
