"""The verifier's step-kind entry, :class:`StepKind` (``docs/prompts.md`` §8).

Written from the docs, never from the writer's modules: a step kind is a step's ``parser``
(``text``, ``label``, ``json``); its entry says how a step response's text is re-parsed and
whether the locked step names a schema file (``json``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["StepKind"]


@dataclass(frozen=True)
class StepKind:
    """One step kind as the verifier re-derives it.

    ``order``: its place in the vocabulary's "step_kinds". ``parse(text, labels, schema)``: the
    value of a response text, or None (unparseable). ``schema``: the locked step names a JSON
    Schema file its values are checked against (and which may make it set-valued, §8.3).
    """

    name: str
    order: int
    parse: Callable[[str, tuple[str, ...], Mapping[str, Any] | None], Any]
    schema: bool = False
