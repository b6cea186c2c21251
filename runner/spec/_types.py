"""The records of a study: arms, models, example sets, the prompt, hypotheses, reviews."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner._human_review import REFERENCE_SETS
from runner.statistics import KIND_ONLY_KEYS


@dataclass(frozen=True)
class Arm:
    """A prompt arm: an ordered list of components with a role, and its request settings.

    ``system``, ``fewshot``, ``sampling``, ``models``, ``replicates`` and ``subset`` are the
    per-arm settings of ``docs/prompts.md`` (empty or None when the arm does not set them).
    """

    id: str
    role: str
    components: tuple[str, ...]
    differs_from: tuple[str, tuple[str, ...]] | None = None
    system: tuple[str, ...] = ()
    fewshot: str | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    models: tuple[str, ...] | None = None
    replicates: int | None = None
    subset: tuple[int, str] | None = None
    variants: tuple[str, ...] | None = None
    after: dict[str, str] | None = None
    """An answer-dependent arm: ``{"arm", and "answer" (a trial step), "rule"}`` (prompts.md §9)."""
    factors: dict[str, str] | None = None
    """A cell of ``[factorial]``: ``{factor: level}`` (``docs/study-spec.md``, "Factors")."""
    differs: dict[str, Any] | None = None
    """``differs_from``'s exact claims: ``removes``, ``adds`` (lists), ``replaces`` ({old: new})."""
    response_from: str | None = None
    """A data arm: the item field its responses are taken from; no model is called
    (``docs/trials.md`` §6)."""

    def protocol_record(self) -> dict[str, Any]:
        """The per-arm settings ``protocol.locked`` records (only those the arm sets)."""
        out: dict[str, Any] = {}
        if self.system:
            out["system"] = list(self.system)
        if self.fewshot is not None:
            out["fewshot"] = self.fewshot
        if self.sampling:
            out["sampling"] = dict(self.sampling)
        if self.models is not None:
            out["models"] = list(self.models)
        if self.replicates is not None:
            out["replicates"] = self.replicates
        if self.subset is not None:
            out["items"] = {"n": self.subset[0], "seed": self.subset[1]}
        if self.variants is not None:
            out["variants"] = list(self.variants)
        if self.after is not None:
            out["after"] = dict(self.after)
        if self.factors is not None:
            out["factors"] = dict(self.factors)
        if self.response_from is not None:
            out["response_from"] = self.response_from
        return out


@dataclass(frozen=True)
class ModelSpec:
    """One model of the study: its name (None for a ``[model]`` study), provider, id, params."""

    name: str | None
    provider: str
    id: str
    params: dict[str, Any]

    def record(self) -> dict[str, Any]:
        """The model's table as ``protocol.locked`` records it."""
        return {"provider": self.provider, "id": self.id, **self.params}


@dataclass(frozen=True)
class FewShotSpec:
    """A ``[fewshot.<NAME>]`` example set (``docs/prompts.md`` section 4)."""

    name: str
    examples: Path
    rule: str
    count: int
    ids: tuple[str, ...]
    seed: str | None
    field: str | None
    order: str
    style: str
    answer: Path | None

    def record(self, rel: Any) -> dict[str, Any]:
        """The table as ``protocol.locked`` records it (``rel`` maps a path to its study path)."""
        out: dict[str, Any] = {
            "examples": rel(self.examples),
            "rule": self.rule,
            "count": self.count,
            "order": self.order,
            "style": self.style,
        }
        if self.ids:
            out["ids"] = list(self.ids)
        if self.seed is not None:
            out["seed"] = self.seed
        if self.field is not None:
            out["field"] = self.field
        if self.answer is not None:
            out["answer"] = rel(self.answer)
        return out


@dataclass(frozen=True)
class PromptSpec:
    """The ``[prompt]`` table: the item template and how options are written."""

    item: Path | None = None
    option_format: str = "{label}. {text}"
    option_separator: str = "\n"


@dataclass(frozen=True)
class Hypothesis:
    """A pre-registered hypothesis with its machine-readable decision rule."""

    id: str
    contrast: tuple[str, str]
    outcome: str
    test: str
    sides: str
    alpha: float | None
    min_difference_pp: float | None
    margin_pp: float | None
    correction: str
    family: str | None
    description: str
    stimuli: tuple[str, ...] | None = None
    """Only the trials of these stimuli (probes) enter this test (``docs/study-spec.md``)."""
    pairing: tuple[str, ...] | None = None
    """paired-t: the trial key that pairs a's and b's trials (``["stimulus", "rep"]``)."""
    arm: str | None = None
    """A test of one arm (flip-rate, voting, self-consistency, mcnemar between variants)."""
    variants: tuple[str, ...] | None = None
    """flip-rate and mcnemar: the two variants compared; voting: the orders voted over."""
    variant: str | None = None
    """position-bias, self-consistency, gee, mcnemar between arms: the variant tested."""
    basis: str | None = None
    """flip-rate: ``answer`` (mapped back to the original options) or ``letter``."""
    samples: int | None = None
    """self-consistency: N, the samples (replicates) per item the majority is taken over."""
    incomplete: str | None = None
    """voting and self-consistency: ``exclude`` (a counted exclusion) or ``fail``."""
    min_pp: float | None = None
    """flip-rate: supported when the interval's lower bound exceeds this (percentage points)."""
    max_pp: float | None = None
    """flip-rate: supported when the interval's upper bound is below this (percentage points)."""
    statistic: str | None = None
    """qr-bootstrap: the statistic bootstrapped (``runner._qrboot.STATISTICS``)."""
    effect: tuple[str, ...] | None = None
    """factorial: the factor (main effect) or factors (interaction) whose term is tested."""
    fallback: str | None = None
    """gee: what a fit the data cannot make falls back to (:data:`GEE_FALLBACKS`)."""

    def locked(self) -> dict[str, Any]:
        """The hypothesis as ``protocol.locked`` records it.

        Optional members (``stimuli``, ``pairing`` and the seed-002 keys) only when set; a test
        of one arm records ``arm`` and no ``contrast``.
        """
        out = self.__dict__ | {"contrast": list(self.contrast)}
        if self.arm is not None or self.effect is not None:
            del out["contrast"]
        if self.effect is None:
            del out["effect"]
        else:
            out["effect"] = list(self.effect)
        for key in ("stimuli", "pairing", "variants"):
            if out[key] is None:
                del out[key]
            else:
                out[key] = list(out[key])
        for key in (*KIND_ONLY_KEYS, "statistic"):
            if key in out and out[key] is None:
                del out[key]
        return out


REVIEW_KINDS = ("judge-label", "contrast", "reference-set")
"""The kinds of ``[reviews.<NAME>]`` (``docs/study-spec.md``): a sample of judge decisions
stratified by agreement (``docs/scoring.md`` §11), or of items where one condition failed and
another succeeded (``docs/mcq-statistics.md`` §9). The keys a table has decide its kind."""


@dataclass(frozen=True)
class Review:
    """A declared review sample (``[reviews.<NAME>]``, ``docs/study-spec.md``).

    ``kind`` ``judge-label``: ``n`` decisions of the trial judge ``step`` per stratum of judge
    agreement, drawn by ``seed`` (``docs/scoring.md`` §11), labelled by a reviewer with
    ``ledger review``. ``kind`` ``contrast``: the ``n`` (item, rep) pairs with the smallest
    ``SHA-256("<seed>|<item>|<rep>")`` among those where ``failed`` (arm, variant) was wrong and
    ``succeeded`` right, on ``model`` (``docs/mcq-statistics.md`` §9), exported with both
    responses for human coding.
    """

    name: str
    kind: str
    n: int
    seed: str
    description: str = ""
    step: str | None = None
    failed: tuple[str, str] | None = None
    succeeded: tuple[str, str] | None = None
    model: str | None = None
    reference: str | None = None
    """A reference-set sample: ``"supplied"`` (item metadata) or the item step deciding them."""
    codes: tuple[str, ...] | None = None
    """A contrast sample's declared codes (``ledger review`` records them), or None."""

    def locked(self) -> dict[str, Any]:
        """The review as ``protocol.locked`` ``reviews.<NAME>`` records it."""
        if self.kind == "reference-set":
            return {
                "kind": self.kind,
                "reference": self.reference,
                "n": self.n,
                "seed": self.seed,
                "sets": list(REFERENCE_SETS),
                "description": self.description,
            }
        if self.kind == "judge-label":
            return {
                "kind": self.kind,
                "step": self.step,
                "n": self.n,
                "seed": self.seed,
                "strata": "unanimity",
                "description": self.description,
            }
        assert self.failed is not None and self.succeeded is not None
        out: dict[str, Any] = {
            "kind": self.kind,
            "failed": {"arm": self.failed[0], "variant": self.failed[1]},
            "succeeded": {"arm": self.succeeded[0], "variant": self.succeeded[1]},
            "n": self.n,
            "seed": self.seed,
            "description": self.description,
        }
        if self.model is not None:
            out["model"] = self.model
        if self.codes is not None:
            out["codes"] = list(self.codes)
        return out
