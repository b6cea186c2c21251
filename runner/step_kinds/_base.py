"""The registry's entry, :class:`StepKind`: what a step's ``parser = "..."`` makes of a reply.

A step kind is the ``parser`` of a ``[steps.<NAME>]`` table (``docs/prompts.md`` §8): ``text``,
``label`` or ``json``. Each module of :mod:`runner.step_kinds` describes one kind in a
module-level ``KIND``: the step-table key only it takes (``labels``, ``schema``) with its
validation, and how it parses a step response's text into the value later requests and votes
read. :mod:`runner.steps` asks the registry; it never names a step parser to dispatch.

Problems go to an ``add(field, message)`` callback, as in :mod:`runner.steps`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Add", "Inside", "StepKind", "StepParts"]

Add = Callable[[str, str], None]
"""``add(field, message)``: records one problem (``field`` as ``steps.judge.labels``)."""
Inside = Callable[[str, str], Path]
"""``inside(rel, where)``: a study path, recording a problem if it is outside or missing."""


@dataclass(frozen=True)
class StepParts:
    """What a kind reads from its own key: labels (``label``), schema and set members (``json``)."""

    labels: tuple[str, ...] = ()
    schema: Path | None = None
    sets: tuple[str, ...] = ()


@dataclass(frozen=True)
class StepKind:
    """One step kind.

    ``order`` places it in :data:`runner.step_kinds.STEP_KINDS` (the vocabulary's
    "step_kinds" order). ``key`` is the step-table key only this kind takes (None: none); on
    another kind it is refused, naming this one. ``read(table, where, add, inside)`` validates
    that key; ``parse(text, labels, schema)`` is a response text's value, or None when it does
    not parse (``docs/prompts.md`` §8).
    """

    name: str
    order: int
    parse: Callable[[str, tuple[str, ...], Mapping[str, Any] | None], Any]
    key: str | None = None
    read: Callable[[dict[str, Any], str, Add, Inside], StepParts] | None = None
