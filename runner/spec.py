"""The study spec (``study.toml``): parsing and validation, with every error reported at once.

See ``docs/study-spec.md`` for every field. :func:`load_study` returns a :class:`Study`; on bad
input it raises :class:`SpecError` whose message lists each problem as ``file:line: field:
what`` (the line is found by :mod:`runner._schema`, since ``tomllib`` reports none). A key the
spec does not know is a problem, never ignored: ``study.toml:14: [model] temprature: unknown key
(did you mean 'temperature'?)``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from ledger import describe_os_error, describe_utf8_error
from runner._errors import SpecError as SpecError
from runner._errors import StudyError
from runner._schema import (
    CONTRAST_REVIEW_KEYS,
    RANGE_KEYS,
    KeyPath,
    LineFinder,
    path_of,
    unknown_keys,
)
from runner.ddx import DDX_METRICS, DdxSpec, hypothesis_problems, parse_ddx
from runner.factors import (
    FACTORIAL_OUTCOMES,
    Factor,
    Factorial,
    ItemEdit,
    cell_arm_id,
    design_columns,
    parse_factorial,
    parse_factors,
)
from runner.human_review import REFERENCE_FIELDS, REFERENCE_SETS, supplied_sets
from runner.planspec import PLAN_FILE, PlanSpec, parse_plan
from runner.privacy import parse_privacy
from runner.qrboot import QR_KEYS, QR_TEST, check_outcomes, check_pairing, qr_keys
from runner.steps import StepSpec, parse_steps
from runner.timestamping import TimestampSpec, parse_timestamping
from runner.variants import FIELD_KINDS, KIND_KEYS, KINDS, Variant, VariantSpec
from runner.witnessing import WitnessPolicy, parse_policy

ARM_ROLES = ("full", "matched-control", "vehicle", "dismantling", "factorial")
MAX_REPLICATES = 100_000  # with the schedule's own cap, runner.schedule.MAX_TRIALS
MAX_SPEC_BYTES = 16 << 20  # a study.toml is a few kB; 16 MiB leaves room for long inline text
MCQ_TESTS = ("flip-rate", "position-bias", "voting", "self-consistency", "gee")
"""Seed 002's statistics as registered tests (``docs/mcq-statistics.md`` §11): each needs an
item file and a letter parser (``multiple-choice`` or ``cloze``)."""
TESTS = (
    "lmm",
    "paired-t",
    "independent-t",
    "bootstrap",
    "mcnemar",
    "chi-square",
    "equivalence",
    *MCQ_TESTS,
    QR_TEST,
    "factorial",
)
ARM_TESTS = ("flip-rate", "voting", "self-consistency")
"""Tests of one arm (``arm``, no ``contrast``); ``mcnemar`` is one too when it names ``arm``."""
INTERVAL_TESTS = ("flip-rate", "position-bias", "voting", "self-consistency")
"""Tests decided by an item-cluster bootstrap interval: they give no p, so take no correction."""
BASES = ("answer", "letter")
"""Flip-rate bases (``docs/mcq-statistics.md`` §3)."""
INCOMPLETE = ("exclude", "fail")
"""What voting and self-consistency do with an incomplete group (a trial given up)."""
MCQ_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "flip-rate": ("arm", "variants", "basis", "min_pp", "max_pp"),
    "position-bias": ("contrast", "variant", "sides", "min_difference_pp"),
    "voting": ("arm", "variants", "incomplete", "sides", "min_difference_pp"),
    "self-consistency": ("arm", "variant", "samples", "incomplete", "sides", "min_difference_pp"),
    "gee": ("contrast", "variant", "sides", "correction", "fallback"),
}
"""The keys each seed-002 test takes beyond ``id``, ``description``, ``test``, ``alpha``,
``outcome`` and ``family`` (any other hypothesis key is refused for it)."""
KIND_ONLY_KEYS = (
    "arm",
    "variants",
    "variant",
    "basis",
    "samples",
    "incomplete",
    "min_pp",
    "max_pp",
    "fallback",
)
"""Hypothesis keys only the seed-002 tests take (``mcnemar`` takes ``arm``, ``variants`` and
``variant``)."""
OUTCOMES = ("glyph_accuracy", "trial_accuracy")
CORRECTIONS = ("none", "bonferroni", "holm")
SIDES = ("one-sided", "two-sided")
PARSERS = (
    "tumbling-e-json",
    "multiple-choice",
    "yes-no-maybe",
    "orientation-word",
    "exact",
    "normalized",
    "cloze",
)
"""Every parser a study may name (``docs/scoring.md``)."""
VOCABULARY_PARSERS = ("multiple-choice", "yes-no-maybe", "orientation-word")
"""Single-answer parsers with a closed set of labels (they take ``[response] mode``)."""
TEXT_PARSERS = ("exact", "normalized")
"""Single-answer parsers that compare the whole response text with the truth."""
LETTER_PARSERS = ("multiple-choice", "cloze")
"""Parsers whose answers are option letters (they take ``[response] letters``)."""
SINGLE_ANSWER_PARSERS = (*VOCABULARY_PARSERS, *TEXT_PARSERS, "cloze")
"""Parsers scored against one answer per stimulus (``[stimuli] answer_column``)."""
LOGPROB_PROVIDERS = ("openai", "openai-compatible", "azure-openai")
"""Providers whose servers return token log-probabilities (``logprobs``, ``top_logprobs``)."""
JUDGE_PREFIX: Final = "judge:"
"""``[response] parser = "judge:<step>"``: a trial step scores each trial (scoring.md §10)."""
MODES = ("exactly-one", "first-token")
"""Parser modes of ``docs/scoring.md`` section 5.2."""
DEFAULT_LETTERS = "ABCD"
RANDOM_INTERCEPTS = ("stimulus", "source")
SECRET_SOURCES = ("generate", "env:", "file:")
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")


def default_answer_column(parser: str) -> str:
    """The truth-table column a single-answer parser reads by default.

    ``orientation`` for ``orientation-word`` (the rotation builder's table), else ``answer``.
    """
    return "orientation" if parser == "orientation-word" else "answer"


def default_outcome(parser: str) -> str:
    """The default hypothesis outcome: ``glyph_accuracy`` (tumbling-E), else ``trial_accuracy``."""
    return "glyph_accuracy" if parser == "tumbling-e-json" else "trial_accuracy"


RESERVED_COMPONENTS = ("item", "examples")
"""Component names an arm may list without declaring them: the item block and the inline
few-shot block (``docs/prompts.md`` section 3)."""
PROVIDERS_TEMPERATURE_MAX = {"anthropic": 1.0, "anthropic-bedrock": 1.0, "anthropic-vertex": 1.0}
"""The highest temperature a provider takes; 2 for the OpenAI-style providers (and Gemini)."""
CHAT_PROVIDERS = ("openai", "openai-compatible", "azure-openai", "gemini")
"""Providers sent chat completions (``docs/prompts.md`` §6): at most 4 ``stop`` strings."""
NO_TOP_K_PROVIDERS = ("openai", "azure-openai", "gemini")
"""Providers whose chat-completions API has no ``top_k`` (``docs/backends.md``)."""
FEWSHOT_RULES = ("fixed", "random", "label-balanced", "same-metadata", "distinct-metadata")
FEWSHOT_ORDERS = ("drawn", "id", "reverse")
FEWSHOT_STYLES = ("turns", "inline")


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
    """qr-bootstrap: the statistic bootstrapped (``runner.qrboot.STATISTICS``)."""
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


GEE_FALLBACKS: Final = ("none", "drop-factor")
"""A gee hypothesis's ``fallback`` (``docs/mcq-statistics.md`` §11): ``none`` (a fit the data
cannot make is not applicable, with the reason) or ``drop-factor`` (refit without the model or
variant factor at fault)."""
PAIRINGS: Final = (("stimulus",), ("stimulus", "rep"))
"""paired-t pairing keys: per-stimulus means (the default), or trials by (stimulus, rep)."""


@dataclass(frozen=True)
class Study:
    """A validated study: everything :mod:`runner.lock` needs, with paths resolved."""

    root: Path
    spec_path: Path
    id: str
    title: str
    origin: str
    model: dict[str, Any]
    components: dict[str, Path]
    arms: dict[str, Arm]
    stimuli_dir: Path
    truth_path: Path
    stimuli: dict[str, Path]
    replicates: int
    seed: str
    bootstrap_seed: str
    bootstrap_iterations: int
    blinding_secret: str
    response_format: str
    parser: str
    hypotheses: tuple[Hypothesis, ...]
    analysis: dict[str, Any]
    amendable: tuple[str, ...] = field(default=())
    deviations: tuple[dict[str, str], ...] = field(default=())
    """Declared deviations from the source protocol (``[[deviations]]``), locked."""
    answer_column: str | None = None
    letters: str | None = None
    mode: str = "exactly-one"
    items_path: Path | None = None
    item_first: int | None = None
    """``[stimuli] range = { first = N }``: only the item file's first N items are used."""
    prompt: PromptSpec = field(default_factory=PromptSpec)
    fewshot: dict[str, FewShotSpec] = field(default_factory=dict)
    models: dict[str, ModelSpec] | None = None
    phase: str | None = None
    variants: tuple[VariantSpec, ...] = ()
    witnessing: WitnessPolicy | None = None  # [[witnesses]] and [witnessing] (docs/witness.md)
    timestamping: TimestampSpec | None = None  # [timestamping] (docs/witness.md section 9)
    privacy: tuple[str, ...] = ()  # [privacy] withhold (docs/privacy.md)
    steps: dict[str, StepSpec] = field(default_factory=dict)  # [steps.NAME] (docs/prompts.md §8)
    reviews: tuple[Review, ...] = ()
    """Declared review samples (``[reviews.<NAME>]`` of either kind), locked."""
    factors: dict[str, Factor] = field(default_factory=dict)
    """``[factors.<NAME>]`` (``docs/study-spec.md``, "Factors"), in declaration order."""
    factorial: Factorial | None = None
    """``[factorial]``: its cells are arms of :attr:`arms` (the base arm is not)."""
    plan: PlanSpec | None = None
    """``[plan]``: the design diagnostics' scenarios (``docs/planning.md``), locked."""

    def arm_levels(self, arm: str) -> list[tuple[Factor, Any]]:
        """The (factor, level) of each factor of a cell arm, in ``[factorial]`` order."""
        chosen = self.arms[arm].factors or {}
        return [(self.factors[f], self.factors[f].level(lv)) for f, lv in chosen.items()]

    def arm_item_edits(self, arm: str) -> list[tuple[str, str, ItemEdit]]:
        """The item edits of a cell arm: ``(factor, level, edit)`` in factor order."""
        return [(f.name, lv.name, e) for f, lv in self.arm_levels(arm) for e in lv.edits]

    def arm_template(self, arm: str) -> Path | None:
        """A cell arm's item template: its level's ``template``, else ``[prompt] item``."""
        for _, lv in self.arm_levels(arm):
            if lv.template is not None:
                return Path(lv.template)
        return self.prompt.item

    ddx: DdxSpec | None = None
    """``[response.ddx]`` of a ``parser = "ddx"`` study (``docs/scoring.md`` §12)."""

    def model_specs(self) -> list[ModelSpec]:
        """Every model, in declaration order (one, named None, for a ``[model]`` study)."""
        if self.models is not None:
            return list(self.models.values())
        params = {k: v for k, v in self.model.items() if k not in ("provider", "id")}
        return [ModelSpec(None, str(self.model["provider"]), str(self.model["id"]), params)]

    def replication_warnings(self) -> list[str]:
        """Pseudo-replication the design invites (``docs/study-spec.md``, "Replicates").

        One sentence per arm and model that runs two or more replicates at temperature 0
        (a deterministic model gives identical copies, which the tests count as independent
        observations), and per pair of models that name one model id on one provider and base
        URL (two names, one model). Warnings only: such a design may be intended.
        """
        out: list[str] = []
        specs = {m.name: m for m in self.model_specs()}
        for arm in self.arms.values():
            reps = arm.replicates or self.replicates
            if arm.response_from is not None or reps < 2:
                continue
            names: list[str | None] = list(arm.models) if arm.models is not None else list(specs)
            for name in names:
                spec = specs.get(name)
                if spec is None:
                    continue
                temp = arm.sampling.get("temperature", spec.params.get("temperature", 1.0))
                if isinstance(temp, int | float) and not isinstance(temp, bool) and temp == 0:
                    on = f" on model {name!r}" if name is not None else ""
                    out.append(
                        f"arm {arm.id!r}{on} runs {reps} replicates at temperature 0: a "
                        "deterministic model answers each replicate alike, and the tests count "
                        "the copies as independent observations (pseudo-replication); use one "
                        "replicate, a temperature above 0, or a test whose unit is the "
                        "stimulus"
                    )
        seen: dict[tuple[str, str, str], str] = {}
        for spec in specs.values():
            where = (spec.provider, spec.id, str(spec.params.get("base_url", "")))
            if where in seen and spec.name is not None:
                out.append(
                    f"models {seen[where]!r} and {spec.name!r} both name model {spec.id!r} on "
                    f"provider {spec.provider!r}: if the server answers both with one model, "
                    "their responses are copies and a pooled test counts them twice"
                )
            elif spec.name is not None:
                seen[where] = spec.name
        return out

    @property
    def item_study(self) -> bool:
        """Whether the stimuli are an item file (else an image folder and truth table)."""
        return self.items_path is not None

    def response_plan(self) -> dict[str, Any]:
        """The ``response`` member of ``protocol.locked``: what shapes every score.

        Always ``format`` and ``parser``; a single-answer parser adds ``answer_column``; a
        parser with a closed vocabulary adds ``mode``; ``multiple-choice`` adds ``letters``
        (``docs/study-spec.md``, "After lock").
        """
        plan: dict[str, Any] = {"format": self.response_format, "parser": self.parser}
        if self.item_study:
            plan["truth"] = "items"
        elif self.parser in SINGLE_ANSWER_PARSERS:
            plan["answer_column"] = self.answer_column
        if self.parser in VOCABULARY_PARSERS:
            plan["mode"] = self.mode
        if self.parser in LETTER_PARSERS:
            plan["letters"] = self.letters
        if self.ddx is not None:
            plan["ddx"] = self.ddx.record()
        return plan

    def component_text(self, name: str) -> str:
        """The text of one component file (:class:`SpecError` naming the byte if not UTF-8)."""
        path = self.components[name]
        data = path.read_bytes()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError([f"{path}: {describe_utf8_error(data, exc)}"]) from None

    def arm_text(self, arm: str) -> str:
        """The arm's own text: its components' texts joined in order by a blank line.

        The reserved ``item`` and ``examples`` are left out (``docs/prompts.md`` section 3);
        for a study without an item template this is the text every request of the arm
        carries. Empty when the arm has no components of its own.
        """
        parts = [
            self.component_text(c).rstrip("\n")
            for c in self.arms[arm].components
            if c not in RESERVED_COMPONENTS
        ]
        return "\n\n".join(parts) + "\n" if parts else ""

    def arm_sha256(self, arm: str) -> str:
        """SHA-256 (hex) of the composed arm text."""
        return hashlib.sha256(self.arm_text(arm).encode("utf-8")).hexdigest()

    def locked_files(self) -> dict[str, str]:
        """Every file the lock covers, as study-relative path -> role."""
        files: dict[str, str] = {self._rel(self.spec_path): "spec"}
        for path in self.components.values():
            files[self._rel(path)] = "component"
        if self.items_path is not None:
            files[self._rel(self.items_path)] = "items"
            for path in self.item_images():
                files[self._rel(path)] = "item-image"
        else:
            files[self._rel(self.truth_path)] = "truth"
            for path in self.stimuli.values():
                files[self._rel(path)] = "stimulus"
        if self.prompt.item is not None:
            files[self._rel(self.prompt.item)] = "template"
        for fs in self.fewshot.values():
            files[self._rel(fs.examples)] = "examples"
            if fs.answer is not None:
                files[self._rel(fs.answer)] = "template"
        for step in self.steps.values():
            files[self._rel(step.template)] = "step-template"
            if step.schema is not None:
                files[self._rel(step.schema)] = "step-schema"
        for spec in self.variants:
            if "stopwords" in spec.params:
                files[str(spec.params["stopwords"])] = "stopwords"
        for factor in self.factors.values():  # docs/study-spec.md "Factors"
            for lv in factor.levels:
                if lv.template is not None:
                    files[self._rel(lv.template)] = "template"
                for edit in lv.edits:
                    if edit.file is not None:
                        files.setdefault(edit.file, "factor-text")
        if self.plan is not None and (self.root / PLAN_FILE).is_file():  # docs/planning.md
            files[PLAN_FILE] = "plan"
        for pattern in self.amendable:  # documents that may be amended are locked too
            for path in sorted(self.root.glob(pattern)):
                if path.is_file():
                    files.setdefault(self._rel(path), "document")
        return dict(sorted(files.items()))

    def rel(self, path: Path) -> str:
        """``path`` relative to the study folder, with ``/`` separators."""
        return self._rel(path)

    def _rel(self, path: Path) -> str:
        return path.resolve().relative_to(self.root.resolve()).as_posix()

    def load_items(self) -> Any:
        """The study's :class:`runner.items.ItemSet` (read once, then kept)."""
        from runner.items import load_items

        if self.items_path is None:
            raise StudyError(f"{self.spec_path}: the study has an image folder, not an item file")
        cache = self.__dict__.get("_items")
        if cache is None:
            cache = load_items(self.items_path, display=self._rel(self.items_path))
            if self.item_first is not None:  # [stimuli] range (docs/prompts.md §1.4)
                cache = cache.head(self.item_first)
            object.__setattr__(self, "_items", cache)
        return cache

    def item_images(self) -> list[Path]:
        """Every image file the items name, resolved against the item file's folder."""
        if self.items_path is None:
            return []
        base = self.items_path.parent
        seen: dict[Path, None] = {}
        for item in self.load_items():
            for rel in item.images:
                seen.setdefault((base / rel).resolve(), None)
        return list(seen)

    def placed_components(self, arm: str) -> tuple[str, ...]:
        """An arm's components as rendered (``docs/prompts.md`` §3).

        With an item template ``item`` is there (default last), and ``examples`` just before
        it for inline few-shot examples.
        """
        spec = self.arms[arm]
        names = list(spec.components)
        if self.prompt.item is not None and "item" not in names:
            names.append("item")
        inline = (
            spec.fewshot is not None
            and spec.fewshot in self.fewshot
            and (self.fewshot[spec.fewshot].style == "inline")
        )
        if inline and "examples" not in names:
            names.insert(names.index("item") if "item" in names else len(names), "examples")
        return tuple(names)

    def trial_ids(self) -> list[str]:
        """Every trial of the design (``docs/prompts.md`` section 7), in listing order."""
        from runner.schedule import crossed_trial_ids, subset

        stims = self.stimulus_ids()
        names: list[str | None] = [None] if self.models is None else list(self.models)
        if self.variants:
            return self._variant_trial_ids(stims, names)
        design = []
        for arm in self.arms.values():
            models: list[str | None] = list(arm.models) if arm.models is not None else names
            if arm.response_from is not None:  # a data arm runs once: model part "" (trials.md §6)
                models = [None] if self.models is None else [""]
            items = stims if arm.subset is None else subset(arm.subset[1], stims, arm.subset[0])
            design.append((arm.id, models, items, arm.replicates or self.replicates))
        return crossed_trial_ids(design)

    def variant_list(self) -> list[Variant]:
        """The variant order (``docs/variants.md`` section 1), ``all-orders`` expanded.

        Raises :class:`runner.variants.VariantError` when an ``all-orders`` cannot expand.
        """
        from runner.variants import expand

        cache = self.__dict__.get("_variant_list")
        if cache is None:
            counts = [len(i.options) for i in self.load_items()] if self.item_study else []
            cache = expand(self.variants, counts)
            object.__setattr__(self, "_variant_list", cache)
        return list(cache)

    def arm_variants(self, arm: str) -> list[Variant]:
        """The variants an arm runs, in variant order (every variant unless it lists some)."""
        chosen = self.arms[arm].variants
        every = self.variant_list()
        if chosen is None:
            return every
        return [v for v in every if v.name in chosen or v.declared in chosen]

    def variant(self, name: str) -> Variant:
        """The variant of the variant order called ``name`` (KeyError if none)."""
        for v in self.variant_list():
            if v.name == name:
                return v
        raise KeyError(name)

    def _variant_trial_ids(self, stims: list[str], names: list[str | None]) -> list[str]:
        """``arm|model|item|variant|rep`` of every trial (``docs/variants.md`` section 4)."""
        from runner.schedule import subset

        out: list[str] = []
        for arm in self.arms.values():
            models = list(arm.models) if arm.models is not None else names
            items = stims if arm.subset is None else subset(arm.subset[1], stims, arm.subset[0])
            variants = [v.name for v in self.arm_variants(arm.id)]
            reps = arm.replicates or self.replicates
            for model in models:
                head = f"{arm.id}|{model or ''}"
                out.extend(
                    f"{head}|{item}|{variant}|{rep}"
                    for item in items
                    for variant in variants
                    for rep in range(1, reps + 1)
                )
        return out

    def stimulus_ids(self) -> list[str]:
        """The stimulus (or item) ids in the order trials are listed."""
        if self.items_path is not None:
            return [item.id for item in self.load_items()]
        return list(self.stimuli)


class _Collector:
    def __init__(self, file: str, lines: LineFinder | None = None) -> None:
        self.file = file
        self.lines = lines
        self.problems: list[str] = []

    def where(self, path: KeyPath) -> str:
        """``file:line`` of the key at ``path``, or ``file`` when it has no line."""
        line = self.lines.line(path) if self.lines is not None else None
        return f"{self.file}:{line}" if line else self.file

    def add(self, field_name: str, message: str, path: KeyPath | None = None) -> None:
        where = self.where(path if path is not None else path_of(field_name))
        self.problems.append(f"{where}: {field_name}: {message}")


def _table(c: _Collector, data: dict[str, Any], name: str) -> dict[str, Any]:
    value = data.get(name)
    if value is None:
        c.add(name, "missing section")
        return {}
    if not isinstance(value, dict):
        c.add(name, "must be a table")
        return {}
    return value


def _str(
    c: _Collector, table: dict[str, Any], key: str, where: str, default: str | None = None
) -> str:
    value = table.get(key, default)
    if value is None:
        c.add(f"{where}.{key}", "missing")
        return ""
    if not isinstance(value, str) or not value:
        c.add(f"{where}.{key}", f"must be a non-empty string, got {value!r}")
        return ""
    return value


def _int_seed(c: _Collector, table: dict[str, Any], key: str, where: str) -> str:
    value = table.get(key)
    if value is None:
        c.add(f"{where}.{key}", "missing")
        return ""
    if isinstance(value, bool) or not isinstance(value, int | str):
        c.add(f"{where}.{key}", f"must be an integer, got {value!r}")
        return ""
    text = str(value)
    if not re.fullmatch(r"0|[1-9][0-9]*", text):
        c.add(f"{where}.{key}", f"must be a non-negative integer, got {value!r}")
        return ""
    return text


def _inside(c: _Collector, root: Path, rel: str, where: str, *, directory: bool = False) -> Path:
    path = (root / rel).resolve()
    try:
        path.relative_to(root.resolve())
    except ValueError:
        c.add(where, f"{rel!r} is outside the study folder")
        return path
    if directory:
        if path.is_file():
            c.add(where, f"{rel!r} is a file, where a directory is expected")
        elif not path.is_dir():
            c.add(where, f"directory {rel!r} does not exist")
    elif path.is_dir():
        c.add(where, f"{rel!r} is a directory, where a file is expected")
    elif not path.is_file():
        c.add(where, f"file {rel!r} does not exist")
    return path


def _read_text(c: _Collector, path: Path, where: str) -> str | None:
    """The UTF-8 text of ``path``, or None after recording why it cannot be read."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        c.add(where, f"cannot read {describe_os_error(exc, path)}")
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        c.add(where, f"{path}: {describe_utf8_error(data, exc)}")
        return None


def _outcome(c: _Collector, h: dict[str, Any], where: str, parser: str) -> str:
    outcome = _str(c, h, "outcome", where, default_outcome(parser))
    if not outcome or outcome in DDX_METRICS or parser == "ddx":  # runner.ddx checks those
        return outcome
    if outcome not in OUTCOMES:
        extra = (
            " (parse rates are reported per arm by descriptive.arms, not tested)"
            if outcome == "parse_rate"
            else ""
        )
        use = " or ".join(OUTCOMES)
        c.add(f"{where}.outcome", f"unknown outcome {outcome!r}; use {use}{extra}")
    elif outcome != default_outcome(parser):
        c.add(
            f"{where}.outcome",
            f"{outcome!r} does not fit parser {parser!r}: glyph_accuracy is the share of a "
            "tumbling-E chart's glyphs read correctly (tumbling-e-json), trial_accuracy is 1 "
            f"when a single-answer trial is correct; use {default_outcome(parser)!r}",
        )
    return outcome


def _name_list(c: _Collector, h: dict[str, Any], key: str, where: str) -> tuple[str, ...] | None:
    """A non-empty list of distinct non-empty strings, or None when absent (errors collected)."""
    value = h.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        c.add(f"{where}.{key}", f"must be a non-empty list of names, got {value!r}")
        return None
    if len(set(value)) != len(value):
        c.add(f"{where}.{key}", f"names a value twice: {value!r}")
        return None
    return tuple(value)


def _hypotheses(
    c: _Collector,
    data: dict[str, Any],
    arms: dict[str, Arm],
    parser: str,
    stimuli: Iterable[str] = (),
) -> list[Hypothesis]:
    raw = data.get("hypotheses", [])
    if not isinstance(raw, list) or not raw:
        c.add("hypotheses", "declare at least one [[hypotheses]] table")
        return []
    out: list[Hypothesis] = []
    seen: set[str] = set()
    for i, h in enumerate(raw):
        where = f"hypotheses[{i}]"
        if not isinstance(h, dict):
            c.add(where, "must be a table")
            continue
        hid = _str(c, h, "id", where)
        if "@" in hid:
            c.add(
                f"{where}.id",
                f"{hid!r}: '@' is reserved for the per-model results (H1@<model>)",
            )
        if hid in seen:
            c.add(f"{where}.id", f"duplicate hypothesis id {hid!r}")
        seen.add(hid)
        test = _str(c, h, "test", where)
        one_arm = (
            test in ARM_TESTS
            or (test in ("mcnemar", QR_TEST) and "arm" in h)
            or (test == "factorial")
        )
        contrast = h.get("contrast")
        pair: tuple[str, str] = ("", "")
        if one_arm:
            if contrast is not None:
                c.add(
                    f"{where}.contrast",
                    "a factorial test names effect = [...], not a contrast"
                    if test == "factorial"
                    else f"a {test} test of one arm names 'arm', not a contrast",
                )
        elif (
            not isinstance(contrast, list)
            or len(contrast) != 2
            or not all(isinstance(a, str) for a in contrast)
        ):
            c.add(f"{where}.contrast", 'must be a list of two arm ids, e.g. ["A", "B"]')
        else:
            pair = (contrast[0], contrast[1])
            for arm in pair:
                if arm not in arms:
                    c.add(f"{where}.contrast", f"unknown arm {arm!r}")
        outcome = (  # qr-bootstrap: runner.qrboot.check_outcomes, once the steps are read
            _str(c, h, "outcome", where, default_outcome(parser))
            if test == QR_TEST
            else _factorial_outcome(c, h, where, parser)
            if test == "factorial"
            else _outcome(c, h, where, parser)
        )
        if test and test not in TESTS:
            c.add(f"{where}.test", f"unknown test {test!r}; use one of {', '.join(TESTS)}")
        if test == "chi-square" and parser in TEXT_PARSERS:
            c.add(
                f"{where}.test",
                f"chi-square tests the spread of wrong answers over a parser's labels; parser "
                f"{parser!r} has no closed set of labels",
            )
        sides = _str(c, h, "sides", where, "two-sided")
        if sides and sides not in SIDES:
            c.add(f"{where}.sides", f"must be one of {', '.join(SIDES)}")
        correction = _str(c, h, "correction", where, "none")
        if correction and correction not in CORRECTIONS:
            c.add(f"{where}.correction", f"must be one of {', '.join(CORRECTIONS)}")
        numbers: dict[str, float | None] = {}
        for key in ("alpha", "min_difference_pp", "margin_pp"):
            value = h.get(key)
            bad = isinstance(value, bool) or not isinstance(value, int | float)
            if value is not None and bad:
                c.add(f"{where}.{key}", f"must be a number, got {value!r}")
                value = None
            numbers[key] = None if value is None else float(value)
        alpha = numbers["alpha"]
        if alpha is not None and not 0 < alpha < 1:
            c.add(f"{where}.alpha", f"must be between 0 and 1, got {alpha}")
        if test == "equivalence" and numbers["margin_pp"] is None:
            c.add(f"{where}.margin_pp", "an equivalence rule needs a margin in percentage points")
        if test and test != "equivalence" and alpha is None:
            c.add(f"{where}.alpha", f"a {test} rule needs alpha")
        family = h.get("family")
        if family is not None and not isinstance(family, str):
            c.add(f"{where}.family", "must be a string")
            family = None
        description = h.get("description", "")
        if not isinstance(description, str):
            c.add(f"{where}.description", f"must be a string, got {description!r}")
            description = ""
        subset = _name_list(c, h, "stimuli", where)
        known = set(stimuli)
        if subset is not None and known:
            for name in subset:
                if name not in known:
                    c.add(f"{where}.stimuli", f"unknown stimulus {name!r}")
        pairing = _name_list(c, h, "pairing", where)
        if pairing is not None:
            if test != "paired-t":
                c.add(f"{where}.pairing", f"applies to test 'paired-t' only, not {test!r}")
            elif pairing not in PAIRINGS:
                c.add(
                    f"{where}.pairing",
                    'must be ["stimulus"] (per-stimulus means) or '
                    f'["stimulus", "rep"] (trials), got {list(pairing)!r}',
                )
        kind = _kind_keys(c, h, where, test, arms, parser)
        kind.update(_effect_keys(c, h, where, test))
        out.append(
            Hypothesis(
                hid,
                pair,
                outcome,
                test,
                sides,
                alpha,
                numbers["min_difference_pp"],
                numbers["margin_pp"],
                correction,
                family,
                str(description),
                subset,
                pairing,
                **kind,
            )
        )
    return out


def _factorial_outcome(c: _Collector, h: dict[str, Any], where: str, parser: str) -> str:
    """A factorial hypothesis's outcome: a name of :data:`runner.factors.FACTORIAL_OUTCOMES`."""
    if parser == "tumbling-e-json":
        c.add(
            f"{where}.test",
            "a factorial test models a per-trial outcome of a single-answer "
            "parser (trial_accuracy), not a tumbling-E chart's glyph accuracy",
        )
    outcome = _str(c, h, "outcome", where, "trial_accuracy")
    if outcome and outcome not in FACTORIAL_OUTCOMES:
        c.add(
            f"{where}.outcome",
            f"unknown outcome {outcome!r} for a factorial test; use "
            f"{' or '.join(FACTORIAL_OUTCOMES)}",
        )
    return outcome


def _effect_keys(c: _Collector, h: dict[str, Any], where: str, test: str) -> dict[str, Any]:
    """``effect`` of a factorial hypothesis (and the keys a factorial test refuses)."""
    if test != "factorial":
        if "effect" in h:
            c.add(f"{where}.effect", f"does not apply to test {test!r} (only to factorial)")
        return {}
    for key in ("min_difference_pp", "margin_pp", "stimuli", "pairing"):
        if key in h:
            c.add(
                f"{where}.{key}",
                "does not apply to test 'factorial' (it takes effect, "
                "outcome, alpha, sides, correction, family)",
            )
    if h.get("sides", "two-sided") != "two-sided":
        c.add(f"{where}.sides", 'a factorial test is a two-sided Wald test: sides = "two-sided"')
    effect = _name_list(c, h, "effect", where)
    if effect is None:
        if "effect" not in h:
            c.add(
                f"{where}.effect",
                "missing (a factorial test names the factor of a main "
                'effect, or the factors of an interaction: effect = ["belief", "tone"])',
            )
        return {}
    return {"effect": effect}


def _kind_keys(
    c: _Collector, h: dict[str, Any], where: str, test: str, arms: dict[str, Arm], parser: str
) -> dict[str, Any]:
    """The seed-002 keys of one hypothesis (``docs/study-spec.md`` ``[[hypotheses]]``).

    Each key is refused where its test does not take it; what needs the variants, models and
    replicates is checked by :func:`_check_kinds` once those are read.
    """
    out: dict[str, Any] = {}
    takes = set(MCQ_KEYS.get(test, ()))
    if test == "mcnemar":
        takes = {"arm", "variants", "variant"}
    if test == QR_TEST:
        takes = set(QR_KEYS)
    if test in MCQ_TESTS:
        if parser not in LETTER_PARSERS:
            c.add(
                f"{where}.test",
                f"a {test} test reads option letters: it needs parser "
                f"'multiple-choice' or 'cloze', not {parser!r}",
            )
        for key in (
            "sides",
            "min_difference_pp",
            "margin_pp",
            "stimuli",
            "pairing",
            "correction",
            "contrast",
        ):
            if (
                key in h
                and key not in takes
                and not (key == "correction" and test != "gee" and h.get(key) == "none")
            ):
                c.add(
                    f"{where}.{key}",
                    f"does not apply to test {test!r} (it takes {', '.join(MCQ_KEYS[test])})",
                )
    for key in KIND_ONLY_KEYS:
        if key in h and key not in takes:
            where_ok = [t for t, keys in MCQ_KEYS.items() if key in keys]
            if key in ("arm", "variants", "variant"):
                where_ok.append("mcnemar")
            if key in QR_KEYS:
                where_ok.append(QR_TEST)
            c.add(
                f"{where}.{key}", f"does not apply to test {test!r} (only to {', '.join(where_ok)})"
            )
    if test == QR_TEST:
        return qr_keys(c.add, h, where, arms)
    if test not in MCQ_TESTS and test != "mcnemar":
        return out
    if "arm" in h and "arm" in takes:
        arm = h["arm"]
        if not isinstance(arm, str) or arm not in arms:
            c.add(f"{where}.arm", f"unknown arm {arm!r}")
        else:
            out["arm"] = arm
    elif test in ARM_TESTS:
        c.add(f"{where}.arm", f"missing (a {test} test names the arm it tests)")
    if "variants" in takes and ("variants" in h or test in ("flip-rate", "voting")):
        names = _name_list(c, h, "variants", where)
        if names is None and "variants" not in h:
            c.add(f"{where}.variants", f"missing (a {test} test names the variants it compares)")
        elif names is not None:
            two = test in ("flip-rate", "mcnemar")
            if two and len(names) != 2:
                c.add(
                    f"{where}.variants",
                    f"a {test} test compares exactly two variants, got {list(names)!r}",
                )
            elif len(names) < 2:
                c.add(f"{where}.variants", f"voting needs at least two orders, got {list(names)!r}")
            else:
                out["variants"] = names
    if test == "mcnemar" and ("arm" in h) != ("variants" in h):
        c.add(
            f"{where}.{'variants' if 'arm' in h else 'arm'}",
            "mcnemar between two variants of one arm names both 'arm' and 'variants'",
        )
    if test == "mcnemar" and "arm" in h and "variant" in h:
        c.add(f"{where}.variant", "mcnemar between two variants takes 'variants', not 'variant'")
    if "variant" in h and "variant" in takes:
        value = h["variant"]
        if not isinstance(value, str) or not value:
            c.add(f"{where}.variant", f"must be a variant name, got {value!r}")
        else:
            out["variant"] = value
    if test == "flip-rate":
        basis = h.get("basis", "answer")
        if basis not in BASES:
            c.add(f"{where}.basis", f"must be {' or '.join(map(repr, BASES))}, got {basis!r}")
        else:
            out["basis"] = basis
        bounds = {}
        for key in ("min_pp", "max_pp"):
            value = h.get(key)
            if value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (0 <= value <= 100)
            ):
                c.add(
                    f"{where}.{key}",
                    f"must be a number of percentage points from 0 to 100, got {value!r}",
                )
                continue
            bounds[key] = float(value)
        if ("min_pp" in h) == ("max_pp" in h):
            c.add(
                f"{where}.min_pp",
                "a flip-rate rule names exactly one of min_pp (the rate's "
                "lower bound must exceed it) and max_pp (its upper bound must stay below it)",
            )
        out.update(bounds)
    if test == "gee" and "fallback" in h:
        fallback = h["fallback"]
        if fallback not in GEE_FALLBACKS:
            c.add(
                f"{where}.fallback",
                f"must be one of {', '.join(map(repr, GEE_FALLBACKS))}, got {fallback!r}",
            )
        else:
            out["fallback"] = fallback
    if test in ("voting", "self-consistency"):
        incomplete = h.get("incomplete", "exclude")
        if incomplete not in INCOMPLETE:
            c.add(
                f"{where}.incomplete",
                f"must be 'exclude' (a counted exclusion) or 'fail', got {incomplete!r}",
            )
        else:
            out["incomplete"] = incomplete
    if test == "self-consistency":
        samples = h.get("samples")
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 2:
            c.add(
                f"{where}.samples",
                f"must be an integer >= 2 (the samples a majority is taken over), got {samples!r}",
            )
        else:
            out["samples"] = samples
    return out


def arm_runs(variants: Iterable[VariantSpec], arm: Arm, name: str) -> bool:
    """Whether ``arm`` runs the variant ``name`` (``original`` alone in a study without any)."""
    declared = {v.name: v for v in variants}
    if not declared:
        return name == "original"
    spec = declared.get(name)
    if spec is None:
        base = name.rsplit("-", 1)[0]
        spec = declared.get(base)
        if spec is None or spec.kind != "all-orders" or not name.rsplit("-", 1)[1].isdigit():
            return False
    return arm.variants is None or name in arm.variants or spec.name in arm.variants


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


def _review_kind(c: _Collector, name: str, table: dict[str, Any]) -> str | None:
    """The kind of ``[reviews.<name>]`` from its keys, or ``None`` (reported) when unclear.

    ``step`` makes a judge-label sample; ``failed``, ``succeeded`` or ``model`` a contrast
    sample. Each key of the other kind in a table is refused at its line.
    """
    where, path = f"reviews.{name}", ("reviews", name)
    if "reference" in table:
        for key in (k for k in (*CONTRAST_REVIEW_KEYS, "step", "codes") if k in table):
            c.add(
                f"{where}.{key}",
                "a key of another kind of sample, but this table names a "
                "reference, so it is a reference-set sample (keys: reference, n, seed, "
                "description); a review sample is one kind",
                (*path, key),
            )
        return "reference-set"
    if "step" in table:
        if "codes" in table:
            c.add(
                f"{where}.codes",
                "codes are declared for a contrast sample (failed, "
                "succeeded); a judge-label sample's values are the step's labels",
                (*path, "codes"),
            )
        for key in (k for k in CONTRAST_REVIEW_KEYS if k in table):
            c.add(
                f"{where}.{key}",
                "a contrast sample's key (with failed and succeeded), but "
                "this table names a step, so it is a judge-label sample (keys: step, n, "
                "seed, description); a review sample is one kind",
                (*path, key),
            )
        return "judge-label"
    if any(k in table for k in CONTRAST_REVIEW_KEYS):
        return "contrast"
    c.add(
        where,
        'say which sample it is: step = "<judge step>" (judge decisions, '
        'docs/scoring.md §11), reference = "supplied" or "<item step>" (reference '
        "sets) or failed = { arm = ... } and succeeded = { arm = ... } (items where one "
        "condition failed and another succeeded)",
        path,
    )
    return None


def _reference_review(
    c: _Collector, name: str, table: dict[str, Any], steps: dict[str, StepSpec], items: Any
) -> str | None:
    """The reference of a reference-set sample (``docs/scoring.md`` §11.1), checked.

    ``"supplied"``: every item carries the three ``metadata`` arrays ``reference_*`` (the
    first item without them is named). Otherwise an item step with the ``json`` parser whose
    decision for an item holds the three sets (``docs/prompts.md`` §8).
    """
    where, path = f"reviews.{name}.reference", ("reviews", name, "reference")
    ref = table.get("reference")
    if items is None:
        c.add(
            where,
            "reference sets belong to items: the study needs an item file ([stimuli] items)",
            path,
        )
        return None
    if ref == "supplied":
        for item in items:
            if supplied_sets(item.metadata) is None:
                c.add(
                    where,
                    f"item {item.id!r} (line {item.line}) lacks its reference sets: "
                    f"metadata arrays of strings {', '.join(REFERENCE_FIELDS.values())}",
                    path,
                )
                return None
        return "supplied"
    spec = steps.get(ref) if isinstance(ref, str) else None
    if spec is None or spec.on != "item" or spec.parser != "json":
        known = ", ".join(n for n, s in steps.items() if s.on == "item" and s.parser == "json")
        c.add(
            where,
            f'must be "supplied" (the items\' metadata arrays '
            f"{', '.join(REFERENCE_FIELDS.values())}) or an item step with the json parser "
            f"that decides the sets, got {ref!r} (such steps: {known or 'none declared'})",
            path,
        )
        return None
    return str(ref)


def _codes(c: _Collector, name: str, table: dict[str, Any]) -> tuple[str, ...] | None:
    """A contrast sample's declared codes: distinct names (letters, digits, '.', '_', '-')."""
    codes = table.get("codes")
    if codes is None:
        return None
    if (
        not isinstance(codes, list)
        or not codes
        or not all(isinstance(x, str) and ID_RE.match(x) for x in codes)
        or len(set(codes)) != len(codes)
    ):
        c.add(
            f"reviews.{name}.codes",
            "must be a non-empty list of distinct code names (letters, digits, '.', '_' or '-')",
            ("reviews", name, "codes"),
        )
        return None
    return tuple(codes)


def _judge_review(
    c: _Collector, name: str, table: dict[str, Any], steps: dict[str, StepSpec]
) -> str | None:
    """The judge step of a judge-label review sample (``docs/scoring.md`` §11), checked."""
    where, path = f"reviews.{name}", ("reviews", name)
    step = table.get("step")
    spec = steps.get(step) if isinstance(step, str) else None
    if spec is None or spec.on != "trial" or spec.parser != "label":
        known = ", ".join(n for n, s in steps.items() if s.on == "trial" and s.parser == "label")
        c.add(
            f"{where}.step",
            f"must name a trial step with the label parser, got {step!r} "
            f"(such steps: {known or 'none declared'})",
            (*path, "step"),
        )
        return None
    return str(step)


def _contrast_review(
    c: _Collector,
    name: str,
    table: dict[str, Any],
    arms: dict[str, Arm],
    variants: list[VariantSpec],
    models: dict[str, ModelSpec] | None,
    parser: str,
    item_study: bool,
) -> tuple[dict[str, tuple[str, str]], str | None]:
    """The conditions and model of a contrast review sample, checked against the design.

    Returns the ``failed``/``succeeded`` conditions that check out and the model whose
    trials are drawn (``docs/mcq-statistics.md`` §9).
    """
    where, path = f"reviews.{name}", ("reviews", name)
    if not item_study:
        c.add(where, "a contrast review sample needs an item file ([stimuli] items)", path)
    elif parser not in LETTER_PARSERS:
        c.add(
            where,
            f"a review sample pairs trials scored right or wrong on option letters: "
            f"it needs parser 'multiple-choice' or 'cloze', not {parser!r}",
            path,
        )
    model = table.get("model")
    if model is not None:
        if models is None:
            c.add(f"{where}.model", "the study has one [model]; name no model", (*path, "model"))
            model = None
        elif not isinstance(model, str) or model not in models:
            c.add(
                f"{where}.model",
                f"unknown model {model!r} (models: {', '.join(models)})",
                (*path, "model"),
            )
            model = None
    elif models is not None and len(models) > 1:
        c.add(
            f"{where}.model",
            f"missing: the study has {len(models)} models; a review "
            "sample names the one whose trials it draws",
            (*path, "model"),
        )
    elif models is not None:
        model = next(iter(models))
    sides: dict[str, tuple[str, str]] = {}
    for side in ("failed", "succeeded"):
        spot = (*path, side)
        cond = table.get(side)
        if cond is None:
            c.add(f"{where}.{side}", 'missing (e.g. { arm = "A", variant = "original" })', spot)
            continue
        if not isinstance(cond, dict):
            c.add(
                f"{where}.{side}",
                f"must be a table {{ arm = ..., variant = ... }}, got {cond!r}",
                spot,
            )
            continue
        arm_id = cond.get("arm")
        variant = cond.get("variant", "original")
        if not isinstance(arm_id, str) or arm_id not in arms:
            c.add(
                f"{where}.{side}.arm",
                f"unknown arm {arm_id!r} (arms: {', '.join(arms)})",
                (*spot, "arm"),
            )
            continue
        arm = arms[arm_id]
        if not isinstance(variant, str) or not arm_runs(variants, arm, variant):
            known = ", ".join([v.name for v in variants] if variants else ["original"])
            c.add(
                f"{where}.{side}.variant",
                f"arm {arm_id!r} does not run variant "
                f"{variant!r} (variants: {known}; the arm's variants: "
                f"{', '.join(arm.variants) if arm.variants else 'all'})",
                (*spot, "variant" if "variant" in cond else "arm"),
            )
            continue
        if isinstance(model, str) and arm.models is not None and model not in arm.models:
            c.add(
                f"{where}.{side}.arm",
                f"arm {arm_id!r} does not run model {model!r}",
                (*spot, "arm"),
            )
            continue
        sides[side] = (arm_id, variant)
    if len(sides) == 2 and sides["failed"] == sides["succeeded"]:
        c.add(
            f"{where}.succeeded", "names the same arm and variant as failed", (*path, "succeeded")
        )
    return sides, model if isinstance(model, str) else None


def _reviews(
    c: _Collector,
    data: dict[str, Any],
    arms: dict[str, Arm],
    variants: list[VariantSpec],
    models: dict[str, ModelSpec] | None,
    parser: str,
    item_study: bool,
    steps: dict[str, StepSpec],
    items: Any = None,
) -> tuple[Review, ...]:
    """The ``[reviews.<NAME>]`` tables of either kind (:data:`REVIEW_KINDS`), each checked."""
    raw = data.get("reviews")
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not raw or not all(isinstance(v, dict) for v in raw.values()):
        c.add("reviews", "declare each review sample as a [reviews.<NAME>] table")
        return ()
    out: list[Review] = []
    for name, table in raw.items():
        where = f"reviews.{name}"
        path: KeyPath = ("reviews", name)
        if not ID_RE.match(name):
            c.add(where, "review names are letters, digits, '.', '_' or '-' (at most 64)", path)
        kind = _review_kind(c, name, table)
        n = table.get("n")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            what = "decisions per stratum" if kind == "judge-label" else "the cases to draw"
            c.add(f"{where}.n", f"must be an integer >= 1 ({what}), got {n!r}", (*path, "n"))
        seed = _int_seed(c, table, "seed", where)
        description = table.get("description", "")
        if not isinstance(description, str):
            c.add(
                f"{where}.description",
                f"must be a string, got {description!r}",
                (*path, "description"),
            )
            description = ""
        ok = isinstance(n, int) and not isinstance(n, bool) and n >= 1 and bool(seed)
        if kind == "judge-label":
            step = _judge_review(c, name, table, steps)
            if ok and step is not None:
                out.append(Review(name, kind, int(n), seed, description, step=step))
        elif kind == "contrast":
            sides, model = _contrast_review(
                c, name, table, arms, variants, models, parser, item_study
            )
            codes = _codes(c, name, table)
            if ok and len(sides) == 2:
                out.append(
                    Review(
                        name,
                        kind,
                        int(n),
                        seed,
                        description,
                        failed=sides["failed"],
                        succeeded=sides["succeeded"],
                        model=model,
                        codes=codes,
                    )
                )
        elif kind == "reference-set":
            reference = _reference_review(c, name, table, steps, items)
            if ok and reference is not None:
                out.append(Review(name, kind, int(n), seed, description, reference=reference))
    return tuple(out)


def _check_kinds(
    c: _Collector,
    hypotheses: list[Hypothesis],
    arms: dict[str, Arm],
    variants: list[VariantSpec],
    models: dict[str, ModelSpec] | None,
    model: dict[str, Any],
    replicates: int,
    item_study: bool,
) -> None:
    """The seed-002 tests against the design: each variant one the arm runs, sampling > 0.

    A study without variants has the one variant ``original`` (the items as written).
    """

    def runs(arm: Arm, name: str) -> bool:
        return arm_runs(variants, arm, name)

    for i, h in enumerate(hypotheses):
        where = f"hypotheses[{i}]"
        if h.test in MCQ_TESTS and not item_study:
            c.add(f"{where}.test", f"a {h.test} test needs an item file ([stimuli] items)")
            continue
        if h.test not in MCQ_TESTS and not (
            h.test == "mcnemar" and (h.arm is not None or h.variant is not None)
        ):
            continue
        tested = (
            [arms[h.arm]]
            if h.arm is not None and h.arm in arms
            else [arms[a] for a in h.contrast if a in arms]
        )
        names = list(h.variants or ())
        if h.variant is not None:
            names.append(h.variant)
        elif variants and h.test in ("position-bias", "self-consistency"):
            c.add(
                f"{where}.variant",
                f"missing: a {h.test} test in a study with variants names the variant it tests",
            )
        key = "variants" if h.variants else "variant"
        for arm in tested:
            for name in names:
                if not runs(arm, name):
                    known = ", ".join([v.name for v in variants] if variants else ["original"])
                    c.add(
                        f"{where}.{key}",
                        f"arm {arm.id!r} does not run variant {name!r} "
                        f"(variants: {known}; the arm's variants: "
                        f"{', '.join(arm.variants) if arm.variants else 'all'})",
                    )
        if h.test == "self-consistency" and h.arm in arms and h.samples is not None:
            arm = arms[h.arm]
            reps = arm.replicates or replicates
            if reps < h.samples:
                c.add(
                    f"{where}.samples",
                    f"arm {arm.id!r} runs {reps} replicates, fewer than the {h.samples} samples",
                )
            specs: list[tuple[str | None, dict[str, Any]]] = (
                [(None, model)]
                if (models is None)
                else [
                    (m_name, dict(m.params))
                    for m_name, m in models.items()
                    if arm.models is None or m_name in arm.models
                ]
            )
            for m_label, params in specs:
                temp = arm.sampling.get("temperature", params.get("temperature", 1.0))
                if isinstance(temp, int | float) and temp <= 0:
                    on = f" on model {m_label!r}" if m_label else ""
                    c.add(
                        f"{where}.test",
                        f"self-consistency {h.id!r}: arm {arm.id!r} samples "
                        f"at temperature {temp}{on}; a majority over greedy samples measures "
                        "nothing (set the arm's sampling temperature > 0)",
                    )


def _deviations(c: _Collector, data: dict[str, Any]) -> tuple[dict[str, str], ...]:
    """``[[deviations]]``: each {id, source, choice, reason}, all non-empty strings, ids unique."""
    raw = data.get("deviations")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        c.add("deviations", "must be an array of tables: [[deviations]]")
        return ()
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    for i, d in enumerate(raw):
        where = f"deviations[{i}]"
        if not isinstance(d, dict):
            c.add(where, "must be a table")
            continue
        entry: dict[str, str] = {}
        for key in ("id", "source", "choice", "reason"):
            value = d.get(key)
            if not isinstance(value, str) or not value.strip():
                c.add(f"{where}.{key}", f"must be a non-empty string, got {value!r}")
                continue
            entry[key] = value
        if entry.get("id") in seen:
            c.add(f"{where}.id", f"duplicate deviation id {entry['id']!r}")
        seen.add(entry.get("id", ""))
        if len(entry) == 4:
            out.append(entry)
    return tuple(out)


def _arm_settings(
    c: _Collector,
    spec: dict[str, Any],
    where: str,
    components: dict[str, Path],
    models: dict[str, ModelSpec] | None,
    providers: list[str],
    fewshot: dict[str, FewShotSpec],
) -> dict[str, Any]:
    """The per-arm request settings of ``docs/prompts.md`` (system, fewshot, sampling, ...)."""
    out: dict[str, Any] = {}
    system = spec.get("system")
    if system is not None:
        if (
            not isinstance(system, list)
            or not system
            or not all(isinstance(x, str) for x in system)
        ):
            c.add(f"{where}.system", "must be a non-empty list of component names")
        else:
            for name in system:
                if name not in components:
                    c.add(f"{where}.system", f"unknown component {name!r}")
            out["system"] = tuple(system)
    if "fewshot" in spec:
        name = spec["fewshot"]
        if not isinstance(name, str) or name not in fewshot:
            known = ", ".join(fewshot) or "none declared"
            c.add(f"{where}.fewshot", f"unknown example set {name!r} (example sets: {known})")
        else:
            out["fewshot"] = name
    arm_models = spec.get("models")
    chosen = list(models) if models is not None else []
    if arm_models is not None:
        if models is None:
            c.add(f"{where}.models", "applies to a study with [models.<NAME>] tables")
        elif (
            not isinstance(arm_models, list)
            or not arm_models
            or not all(isinstance(x, str) for x in arm_models)
        ):
            c.add(f"{where}.models", "must be a non-empty list of model names")
        else:
            for name in arm_models:
                if name not in models:
                    known = ", ".join(models)
                    c.add(f"{where}.models", f"unknown model {name!r} (models: {known})")
            if len(set(arm_models)) != len(arm_models):
                c.add(f"{where}.models", "a model is listed twice")
            out["models"] = tuple(arm_models)
            chosen = list(arm_models)
    sampling = spec.get("sampling")
    if sampling is not None:
        if not isinstance(sampling, dict):
            c.add(f"{where}.sampling", "must be a table, e.g. { temperature = 0.7, top_p = 0.95 }")
        else:
            arm_providers = (
                [models[m].provider for m in chosen if m in models]
                if models is not None
                else providers
            )
            result: dict[str, Any] = {}
            for provider in dict.fromkeys(arm_providers):
                result = _sampling(c, sampling, f"{where}.sampling", provider, full=False)
            out["sampling"] = result
    if "replicates" in spec:
        reps = spec["replicates"]
        if isinstance(reps, bool) or not isinstance(reps, int) or not 0 < reps <= MAX_REPLICATES:
            c.add(
                f"{where}.replicates",
                f"must be an integer from 1 to {MAX_REPLICATES:,}, got {reps!r}",
            )
        else:
            out["replicates"] = reps
    if "variants" in spec:
        names = spec["variants"]
        if not isinstance(names, list) or not names or not all(isinstance(x, str) for x in names):
            c.add(f"{where}.variants", "must be a non-empty list of variant names")
        elif len(set(names)) != len(names):
            c.add(f"{where}.variants", "a variant is listed twice")
        else:
            out["variants"] = tuple(names)
    after = spec.get("after")
    if after is not None:
        if (
            not isinstance(after, dict)
            or not isinstance(after.get("arm"), str)
            or any(k not in ("arm", "answer", "rule") for k in after)
            or not all(isinstance(v, str) and v for v in after.values())
        ):
            c.add(
                f"{where}.after",
                'must be { arm = "A" } with, optionally, answer = "<trial '
                'step>" and rule = "next-option"',
            )
        elif after.get("rule", "next-option") != "next-option":
            c.add(f"{where}.after.rule", f"unknown rule {after['rule']!r}; use next-option")
        elif "rule" in after and "answer" not in after:
            c.add(
                f"{where}.after.rule",
                'next-option needs the prior\'s answer (answer = "<trial step>")',
            )
        else:
            out["after"] = dict(after)
    subset = spec.get("items")
    if subset is not None:
        if not isinstance(subset, dict):
            c.add(f"{where}.items", "must be a table { n = 100, seed = 7 }")
        else:
            n = subset.get("n")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                c.add(f"{where}.items.n", f"must be an integer >= 1, got {n!r}")
            seed = _int_seed(c, subset, "seed", f"{where}.items")
            if isinstance(n, int) and not isinstance(n, bool) and n >= 1 and seed:
                out["subset"] = (n, seed)
    return out


def _arms(
    c: _Collector,
    data: dict[str, Any],
    components: dict[str, Path],
    models: dict[str, ModelSpec] | None,
    providers: list[str],
    fewshot: dict[str, FewShotSpec],
) -> dict[str, Arm]:
    raw = _table(c, data, "arms")
    arms: dict[str, Arm] = {}
    for arm_id, spec in raw.items():
        where = f"arms.{arm_id}"
        if not ID_RE.match(arm_id):
            c.add(where, "arm ids are letters, digits, '.', '_' or '-'")
        if not isinstance(spec, dict):
            c.add(where, "must be a table")
            continue
        role = _str(c, spec, "role", where)
        if role and role not in ARM_ROLES:
            c.add(f"{where}.role", f"unknown role {role!r}; use one of {', '.join(ARM_ROLES)}")
        if "response_from" in spec:
            arms[arm_id] = _data_arm(c, spec, where, arm_id, role)
            continue
        comps = spec.get("components")
        names: tuple[str, ...] = ()
        if not isinstance(comps, list) or not all(isinstance(x, str) for x in comps):
            c.add(f"{where}.components", "must be a list of component names")
        else:
            names = tuple(comps)
            for name in names:
                if name not in components and name not in RESERVED_COMPONENTS:
                    c.add(f"{where}.components", f"unknown component {name!r}")
            if len(set(names)) != len(names):
                c.add(f"{where}.components", "a component is listed twice")
        differs = spec.get("differs_from")
        decl: tuple[str, tuple[str, ...]] | None = None
        claims: dict[str, Any] | None = None
        if differs is not None:
            decl, claims = _differs(c, differs, where)
        settings = _arm_settings(c, spec, where, components, models, providers, fewshot)
        arms[arm_id] = Arm(arm_id, role, names, decl, **settings, differs=claims)
    for arm in arms.values():
        if arm.differs_from and arm.differs_from[0] not in arms:
            c.add(f"arms.{arm.id}.differs_from", f"unknown arm {arm.differs_from[0]!r}")
    if raw and not arms:
        c.add("arms", "declare at least one arm")
    return arms


def _check_after(c: _Collector, arms: dict[str, Arm], base: str | None) -> None:
    """Each ``after`` names a first stage: an arm (a factorial cell too) run from a model.

    Checked once the factorial cells exist, so a second stage may follow a cell (seed 001's
    belief and binary-agreement arms follow the open-ended default cell). Naming the factorial
    base is reported by :func:`_factorial_arms`.
    """
    for arm in arms.values():
        if arm.after is None or arm.after["arm"] == base:
            continue
        prior = arms.get(arm.after["arm"])
        if prior is not None and prior.response_from is not None:
            c.add(
                f"arms.{arm.id}.after",
                f"arm {prior.id!r} takes its responses from "
                "data; a second stage follows a model's answer",
            )
        elif prior is None or prior.id == arm.id:
            c.add(f"arms.{arm.id}.after", f"unknown arm {arm.after['arm']!r}")
        elif prior.after is not None:
            c.add(
                f"arms.{arm.id}.after",
                f"arm {prior.id!r} is itself answer-dependent; "
                "a second stage follows a first stage only",
            )


def _differs(
    c: _Collector, differs: Any, where: str
) -> tuple[tuple[str, tuple[str, ...]] | None, dict[str, Any] | None]:
    """``differs_from``: ``{arm, by}`` as before, or ``{arm, removes, adds, replaces}``.

    Returns (``(arm, by)``, the exact claims or None); ``by`` is empty with the exact form.
    """
    exact = ("removes", "adds", "replaces")
    usage = (
        'must be {arm = "A", by = ["component", ...]} or {arm = "A"} with removes = '
        '[...], adds = [...] and/or replaces = { old = "new" }'
    )
    if not isinstance(differs, dict) or not isinstance(differs.get("arm"), str):
        c.add(f"{where}.differs_from", usage)
        return None, None
    if "by" in differs:
        by = differs["by"]
        if not isinstance(by, list) or not all(isinstance(x, str) for x in by):
            c.add(f"{where}.differs_from", usage)
            return None, None
        if any(k in differs for k in exact):
            c.add(
                f"{where}.differs_from",
                "states either by (removed or replaced) or the exact "
                "removes / adds / replaces, not both",
            )
            return None, None
        return (differs["arm"], tuple(by)), None
    claims: dict[str, Any] = {}
    for key in ("removes", "adds"):
        if key in differs:
            value = differs[key]
            if (
                not isinstance(value, list)
                or not value
                or not all(isinstance(x, str) and x for x in value)
            ):
                c.add(f"{where}.differs_from.{key}", "must be a non-empty list of component names")
                return None, None
            claims[key] = list(value)
    if "replaces" in differs:
        value = differs["replaces"]
        if (
            not isinstance(value, dict)
            or not value
            or not all(isinstance(v, str) and v for v in value.values())
        ):
            c.add(
                f"{where}.differs_from.replaces",
                'must be a table { old = "new", ... } of component names',
            )
            return None, None
        claims["replaces"] = dict(value)
    if not claims:
        c.add(f"{where}.differs_from", usage)
        return None, None
    return (differs["arm"], ()), claims


def _factorial_arms(
    c: _Collector,
    arms: dict[str, Arm],
    factors: dict[str, Factor],
    factorial: Factorial | None,
    has_template: bool,
) -> dict[str, Arm]:
    """The arms with ``[factorial]``'s base replaced by one arm per cell, in cell order.

    A cell is the base arm with ``factors = {factor: level}``, its prompt levels' components
    after the base's (the item block placed explicitly before them) and their system
    components after the base's system (``docs/prompts.md`` §3).
    """
    for name in factors:
        if factorial is None or name not in factorial.factors:
            c.add(
                f"factors.{name}",
                "is not crossed by [factorial] (factors = [...]): a factor "
                "no design uses would be locked without effect",
            )
    if factorial is None:
        return arms
    base = arms[factorial.base]
    for arm in arms.values():
        if arm.differs_from is not None and arm.differs_from[0] == base.id:
            c.add(
                f"arms.{arm.id}.differs_from",
                f"arm {base.id!r} is the template of the "
                "factorial cells and is not run; name a cell arm",
            )
        if arm.after is not None and arm.after["arm"] == base.id:
            c.add(
                f"arms.{arm.id}.after",
                f"arm {base.id!r} is the template of the factorial cells and is not run",
            )
    if base.after is not None or base.differs_from is not None:
        c.add(
            f"arms.{base.id}",
            "the factorial base arm may not be answer-dependent (after) or declare differs_from",
        )
    out: dict[str, Arm] = {}
    for arm_id, arm in arms.items():
        if arm_id != base.id:
            out[arm_id] = arm
            continue
        for cell in factorial.cells:
            levels = [factors[f].level(lv) for f, lv in cell.items()]
            components = list(base.components)
            added = [n for lv in levels for n in lv.components]
            if has_template and "item" not in components:
                components.append("item")
            components += added
            system = tuple(base.system) + tuple(n for lv in levels for n in lv.system)
            for name in set(components) | set(system):
                if components.count(name) > 1 or system.count(name) > 1:
                    c.add(
                        "factorial",
                        f"cell {cell_arm_id(base.id, factorial.factors, cell)}: "
                        f"component {name!r} is listed twice",
                    )
            if sum(1 for lv in levels if lv.template is not None) > 1:
                c.add(
                    "factorial",
                    f"cell {cell_arm_id(base.id, factorial.factors, cell)}: two "
                    "factors set the item template",
                )
            cid = cell_arm_id(base.id, factorial.factors, cell)
            out[cid] = replace(
                base, id=cid, components=tuple(components), system=system, factors=dict(cell)
            )
    return out


def _factorial_hypotheses(
    c: _Collector,
    hypotheses: list[Hypothesis],
    factors: dict[str, Factor],
    factorial: Factorial | None,
    has_variants: bool,
) -> None:
    """Each factorial hypothesis's effect: factors crossed by ``[factorial]``, and estimable.

    The model (docs/analysis.md "Factorial designs") has every crossed factor's main effects
    and every interaction a hypothesis registers; over the design's cells its columns must be
    linearly independent, else a term is aliased (a fraction) and its test is refused.
    """
    tests = [(i, h) for i, h in enumerate(hypotheses) if h.test == "factorial"]
    if not tests:
        return
    import numpy as np  # here: a study without a factorial test never loads numpy

    if factorial is None:
        for i, _ in tests:
            c.add(f"hypotheses[{i}].test", "a factorial test needs a [factorial] design")
        return
    if has_variants:
        for i, _ in tests:
            c.add(
                f"hypotheses[{i}].test",
                "a factorial test of a study with [variants] is not "
                "available (the variants are not factors of the model)",
            )
        return
    order = list(factorial.factors)
    inters: list[tuple[str, ...]] = []
    for i, h in tests:
        effect = h.effect or ()
        outside = [f for f in effect if f not in order]
        if outside:
            c.add(
                f"hypotheses[{i}].effect",
                f"factor {outside[0]!r} is not crossed by "
                f"[factorial] (its factors: {', '.join(order)})",
            )
            return
        if len(effect) > 1:
            key = tuple(sorted(effect, key=order.index))
            if key not in inters:
                inters.append(key)
    levels = [(f, [lv.name for lv in factors[f].levels]) for f in order]
    cols = design_columns(levels, inters)
    cells = list(factorial.cells)

    def column(at: dict[str, str]) -> list[float]:
        return [1.0 if all(cell[f] == v for f, v in at.items()) else 0.0 for cell in cells]

    x = np.array([[1.0] * len(cells)] + [column(at) for _, at in cols]).T
    full = int(np.linalg.matrix_rank(x))
    if full == x.shape[1]:
        return
    for i, h in tests:
        effect = tuple(sorted(h.effect or (), key=order.index))
        mine = [j + 1 for j, (_, at) in enumerate(cols) if tuple(at) == effect]
        rest = [j for j in range(x.shape[1]) if j not in mine]
        if int(np.linalg.matrix_rank(x[:, rest])) + len(mine) == full:
            continue
        partner = _alias_of(effect, cols, cells, factors)
        what = (
            "interaction " + " × ".join(effect) if len(effect) > 1 else f"main effect {effect[0]}"
        )
        c.add(
            f"hypotheses[{i}].effect",
            f"the {what} is aliased{partner} in this design: the "
            "cells do not cross those factors, so its term cannot be estimated apart from "
            "the model's other terms",
        )


def _alias_of(
    effect: tuple[str, ...],
    cols: list[tuple[str, dict[str, str]]],
    cells: list[dict[str, str]],
    factors: dict[str, Factor],
) -> str:
    """`` with <term>`` when another model term has the same ±1 contrast over the cells."""

    def code(names: Iterable[str]) -> list[int]:
        out = []
        for cell in cells:
            sign = 1
            for f in names:
                sign *= -1 if cell[f] == factors[f].reference else 1
            out.append(sign)
        return out

    mine = code(effect)
    seen: list[tuple[str, ...]] = []
    for _, at in cols:
        names = tuple(at)
        if names == effect or names in seen:
            continue
        seen.append(names)
        other = code(names)
        if other == mine or other == [-v for v in mine]:
            return " with " + (" × ".join(names) if len(names) > 1 else names[0])
    return ""


DATA_ARM_REFUSED: Final = (
    "components",
    "differs_from",
    "system",
    "fewshot",
    "sampling",
    "models",
    "replicates",
    "variants",
    "after",
)
"""Arm keys a data arm (``response_from``) refuses: each shapes a request, and it sends none."""


def _data_arm(c: _Collector, spec: dict[str, Any], where: str, arm_id: str, role: str) -> Arm:
    """A data arm (``response_from = "<item field>"``, ``docs/trials.md`` §6), checked.

    Its responses are an item field as written; so every key that shapes a request or a
    model's sampling is refused, naming it. ``items`` (a seeded subset) is kept.
    """
    field_name = spec.get("response_from")
    if not isinstance(field_name, str) or not field_name:
        c.add(
            f"{where}.response_from",
            f"must name an item field, got {field_name!r}",
            ("arms", arm_id, "response_from"),
        )
        field_name = ""
    for key in DATA_ARM_REFUSED:
        if key in spec:
            c.add(
                f"{where}.{key}",
                f"a data arm (response_from = {field_name!r}) sends no "
                f"request, so it has no {key}: its responses are the items' {field_name!r} "
                "as written",
                ("arms", arm_id, key),
            )
    subset = None
    table = spec.get("items")
    if table is not None:
        n, seed = (table.get("n"), table.get("seed")) if isinstance(table, dict) else (None, "")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1 or not isinstance(table, dict):
            c.add(f"{where}.items", "must be a table { n = 100, seed = 7 }")
        else:
            seed = _int_seed(c, table, "seed", f"{where}.items")
            subset = (n, seed) if seed else None
    return Arm(
        arm_id, role, (), None, subset=subset, replicates=1, response_from=field_name or None
    )


def _data_arm_items(c: _Collector, arms: dict[str, Arm], items: Any, variants: list[Any]) -> None:
    """Each data arm's field is a non-empty text of every item it takes (naming item and field)."""
    for arm in arms.values():
        name = arm.response_from
        if name is None:
            continue
        where = f"arms.{arm.id}.response_from"
        if items is None:
            c.add(
                where,
                "a data arm takes its responses from an item file ([stimuli] items)",
                ("arms", arm.id, "response_from"),
            )
            continue
        if variants:
            c.add(
                where,
                "a data arm cannot run item variants: its responses answer the items as written",
                ("arms", arm.id, "response_from"),
            )
        for item in items:
            value = item.data.get(name)
            if not isinstance(value, str) or not value:
                what = (
                    "lacks it"
                    if value is None
                    else (
                        "has it empty" if value == "" else f"has a {type(value).__name__}, not text"
                    )
                )
                c.add(
                    where,
                    f"item {item.id!r} (line {item.line}) {what}: every item of a data "
                    f"arm supplies its response as a non-empty text field {name!r}",
                    ("arms", arm.id, "response_from"),
                )
                break


def _items_stimuli(c: _Collector, root: Path, table: dict[str, Any]) -> tuple[Path, Any]:
    """The item file's path and its :class:`runner.items.ItemSet` (None if it has problems)."""
    for key in ("directory", "truth", "answer_column"):
        if key in table:
            c.add(
                f"stimuli.{key}",
                "an item file holds the questions and their answers; a study has items or an "
                "image folder with a truth table, not both",
            )
    path = _inside(c, root, _str(c, table, "items", "stimuli") or ".", "stimuli.items")
    first = _item_range(c, table)
    items = None
    if path.is_file():
        from runner.items import load_items

        try:
            items = load_items(path, display=str(path.relative_to(root.resolve())))
        except SpecError as exc:
            for problem in exc.problems:
                c.add("stimuli.items", problem)
    if items is not None and first is not None:
        if first > len(items):
            c.add(
                "stimuli.range.first", f"{first} is more than the {len(items)} items of {path.name}"
            )
        items = items.head(first)
    return path, items


def _item_range(c: _Collector, table: dict[str, Any]) -> int | None:
    """``[stimuli] range = { first = N }``: the study uses the file's first N items (§1.4)."""
    if "range" not in table:
        return None
    value = table["range"]
    if not isinstance(value, dict) or set(value) != {"first"}:
        extra = sorted(set(value) - set(RANGE_KEYS)) if isinstance(value, dict) else []
        c.add(
            "stimuli.range",
            "must be a table { first = N } (the first N items of the file, "
            "in file order)" + (f"; unknown key {extra[0]!r}" if extra else ""),
        )
        return None
    first = value["first"]
    if isinstance(first, bool) or not isinstance(first, int) or first < 1:
        c.add("stimuli.range.first", f"must be an integer >= 1, got {first!r}")
        return None
    return first


def _stimuli(
    c: _Collector, root: Path, data: dict[str, Any]
) -> tuple[Path, Path, dict[str, Path], Any]:
    """(directory, truth table, images by id, None), or (path, path, {}, items) for items."""
    table = _table(c, data, "stimuli")
    if "items" in table:
        path, items = _items_stimuli(c, root, table)
        return path, path, {}, items
    if "range" in table:
        c.add("stimuli.range", "applies to an item file ([stimuli] items), not an image folder")
    directory = _inside(
        c, root, _str(c, table, "directory", "stimuli") or ".", "stimuli.directory", directory=True
    )
    truth = _inside(c, root, _str(c, table, "truth", "stimuli") or "truth.csv", "stimuli.truth")
    stimuli: dict[str, Path] = {}
    if not truth.is_file() or not directory.is_dir():
        return directory, truth, stimuli, None
    text = _read_text(c, truth, "stimuli.truth")
    if text is None:
        return directory, truth, stimuli, None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows: list[dict[str, str]] = []
    try:
        header = next(reader, [])
        for cells in reader:
            if len(cells) != len(header):  # named at its own line, not as a coverage problem
                c.add(
                    "stimuli.truth",
                    f"{truth.name}:{reader.line_num}: {len(cells)} field(s), "
                    f"the header has {len(header)} ({','.join(header)})",
                )
                continue
            rows.append(dict(zip(header, cells, strict=True)))
    except csv.Error as exc:
        c.add("stimuli.truth", f"{truth.name}:{reader.line_num}: not valid CSV ({exc})")
        return directory, truth, stimuli, None
    covered = {row.get("stimulus", "") for row in rows}
    if "" in covered or not rows:
        c.add("stimuli.truth", f"{truth.name} needs a 'stimulus' column with a value on every row")
    images = sorted(p for p in directory.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    for image in images:
        stimuli[image.stem] = image
    for image_id in stimuli:
        if image_id not in covered:
            c.add("stimuli.truth", f"the truth table does not cover stimulus {image_id!r}")
    for stim in sorted(covered - set(stimuli) - {""}):
        c.add("stimuli.truth", f"truth row for {stim!r} has no image in {directory.name}/")
    if not stimuli:
        c.add("stimuli.directory", "no images (.png, .jpg, .gif, .webp) found")
    return directory, truth, stimuli, None


def _unknown_problems(c: _Collector, data: dict[str, Any]) -> None:
    """One problem per unknown key, in file order (before every other problem)."""
    found: list[tuple[int, str]] = []
    for unknown in unknown_keys(data):
        line = c.lines.line(unknown.path) if c.lines is not None else None
        where = f"{c.file}:{line}" if line else c.file
        if unknown.table:
            message = f"{where}: {unknown.table} {unknown.key}: unknown key ({unknown.hint})"
        else:
            what = "unknown section" if unknown.section else "unknown top-level key"
            message = f"{where}: {unknown.key}: {what} ({unknown.hint})"
        found.append((line or 0, message))
    c.problems.extend(message for _, message in sorted(found, key=lambda f: f[0]))


def _sampling(
    c: _Collector, table: dict[str, Any], where: str, provider: str, *, full: bool
) -> dict[str, Any]:
    """The sampling parameters of a model table or an arm's ``sampling`` (docs/prompts.md §5).

    ``full``: a model table, where ``max_tokens`` (2048) and ``temperature`` (1.0) default.
    """
    out: dict[str, Any] = {}
    if full:
        out["max_tokens"] = table.get("max_tokens", 2048)
        out["temperature"] = table.get("temperature", 1.0)
    for key in ("max_tokens", "temperature", "top_p", "top_k", "stop"):
        if key in table:
            out[key] = table[key]
    openai = provider in CHAT_PROVIDERS
    if "max_tokens" in out:
        tokens = out["max_tokens"]
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            c.add(f"{where}.max_tokens", f"must be a positive integer, got {tokens!r}")
    if "temperature" in out:
        top = PROVIDERS_TEMPERATURE_MAX.get(provider, 2.0)
        temp = out["temperature"]
        if isinstance(temp, bool) or not isinstance(temp, int | float) or not 0 <= temp <= top:
            c.add(
                f"{where}.temperature",
                f"must be a number between 0 and {top:g} for provider {provider!r}, got {temp!r}",
            )
    if "top_p" in out:
        top_p = out["top_p"]
        if isinstance(top_p, bool) or not isinstance(top_p, int | float) or not 0 <= top_p <= 1:
            c.add(f"{where}.top_p", f"must be a number between 0 and 1, got {top_p!r}")
    if "top_k" in out:
        top_k = out["top_k"]
        if provider in NO_TOP_K_PROVIDERS:
            c.add(f"{where}.top_k", f"provider {provider!r} takes no top_k (the chat API has none)")
        elif isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            c.add(f"{where}.top_k", f"must be a positive integer, got {top_k!r}")
    if full and "logprobs" in table:
        out["logprobs"] = table["logprobs"]
        value = out["logprobs"]
        if provider not in LOGPROB_PROVIDERS:
            c.add(
                f"{where}.logprobs",
                f"provider {provider!r} cannot return log-probabilities (only "
                f"{' and '.join(LOGPROB_PROVIDERS)} servers do)",
            )
        elif isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 20:
            c.add(f"{where}.logprobs", f"must be an integer from 1 to 20, got {value!r}")
    if "stop" in out:
        stop = out["stop"]
        most = 4 if openai else 8
        if (
            not isinstance(stop, list)
            or not 1 <= len(stop) <= most
            or not all(isinstance(x, str) and x for x in stop)
        ):
            c.add(
                f"{where}.stop",
                f"must be a list of 1 to {most} non-empty strings for provider {provider!r}, "
                f"got {stop!r}",
            )
    return out


def _model_table(c: _Collector, table: dict[str, Any], where: str) -> dict[str, Any]:
    provider = _str(c, table, "provider", where, "anthropic")
    model_id = _str(c, table, "id", where, "claude-sonnet-4-6")
    params = _sampling(c, table, where, provider or "anthropic", full=True)
    return {"provider": provider, "id": model_id, **params}


def _model(c: _Collector, data: dict[str, Any]) -> dict[str, Any]:
    if "models" in data and "model" not in data:
        return {}
    return _model_table(c, _table(c, data, "model"), "model")


def _models(c: _Collector, data: dict[str, Any]) -> dict[str, ModelSpec] | None:
    raw = data.get("models")
    if raw is None:
        return None
    if "model" in data:
        c.add("models", "a study has one [model] table or several [models.<NAME>] tables, not both")
    if not isinstance(raw, dict) or not raw or not all(isinstance(v, dict) for v in raw.values()):
        c.add("models", "declare each model as a [models.<NAME>] table")
        return None
    out: dict[str, ModelSpec] = {}
    for name, table in raw.items():
        where = f"models.{name}"
        if not ID_RE.match(name):
            c.add(where, "model names are letters, digits, '.', '_' or '-'")
        record = _model_table(c, table, where)
        params = {k: v for k, v in record.items() if k not in ("provider", "id")}
        out[name] = ModelSpec(name, record["provider"], record["id"], params)
    return out


def _prompt(c: _Collector, root: Path, data: dict[str, Any]) -> PromptSpec:
    table = data.get("prompt")
    if table is None:
        return PromptSpec()
    if not isinstance(table, dict):
        c.add("prompt", "must be a table")
        return PromptSpec()
    item: Path | None = None
    if "item" in table:
        rel = _str(c, table, "item", "prompt")
        if rel:
            item = _inside(c, root, rel, "prompt.item")
            if item.is_file():
                _read_text(c, item, "prompt.item")
    fmt = table.get("option_format", "{label}. {text}")
    sep = table.get("option_separator", "\n")
    if not isinstance(fmt, str):
        c.add("prompt.option_format", f"must be a string, got {fmt!r}")
        fmt = "{label}. {text}"
    if not isinstance(sep, str):
        c.add("prompt.option_separator", f"must be a string, got {sep!r}")
        sep = "\n"
    return PromptSpec(item, fmt, sep)


def _fewshot(c: _Collector, root: Path, data: dict[str, Any]) -> dict[str, FewShotSpec]:
    raw = data.get("fewshot")
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        c.add("fewshot", "declare each example set as a [fewshot.<NAME>] table")
        return {}
    out: dict[str, FewShotSpec] = {}
    for name, table in raw.items():
        where = f"fewshot.{name}"
        if not ID_RE.match(name):
            c.add(where, "example set names are letters, digits, '.', '_' or '-'")
        examples = _inside(c, root, _str(c, table, "examples", where) or ".", f"{where}.examples")
        rule = _str(c, table, "rule", where)
        if rule and rule not in FEWSHOT_RULES:
            c.add(f"{where}.rule", f"unknown rule {rule!r}; use one of {', '.join(FEWSHOT_RULES)}")
        ids_raw = table.get("ids")
        ids: tuple[str, ...] = ()
        if ids_raw is not None:
            if rule != "fixed":
                c.add(f"{where}.ids", f"applies to the fixed rule only, not {rule!r}")
            elif (
                not isinstance(ids_raw, list)
                or not ids_raw
                or not all(isinstance(x, str) for x in ids_raw)
            ):
                c.add(f"{where}.ids", "must be a non-empty list of example ids")
            else:
                ids = tuple(ids_raw)
                if len(set(ids)) != len(ids):
                    c.add(f"{where}.ids", "an example is listed twice")
        elif rule == "fixed":
            c.add(f"{where}.ids", "the fixed rule needs the example ids, in order")
        count = table.get("count", len(ids) if rule == "fixed" else None)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            c.add(f"{where}.count", f"must be an integer >= 1, got {count!r}")
            count = 1
        elif rule == "fixed" and ids and count != len(ids):
            c.add(f"{where}.count", f"is {count}, but ids lists {len(ids)} examples")
        seed: str | None = None
        if rule in ("random", "label-balanced", "same-metadata", "distinct-metadata"):
            seed = _int_seed(c, table, "seed", where)
        elif "seed" in table:
            c.add(f"{where}.seed", f"applies to the random rules only, not {rule!r}")
        field_name: str | None = None
        if rule in ("same-metadata", "distinct-metadata"):
            field_name = _str(c, table, "field", where)
        elif "field" in table:
            c.add(f"{where}.field", "applies to the same-metadata and distinct-metadata rules only")
        order = _str(c, table, "order", where, "drawn")
        if order and order not in FEWSHOT_ORDERS:
            c.add(f"{where}.order", f"must be one of {', '.join(FEWSHOT_ORDERS)}, got {order!r}")
        style = _str(c, table, "style", where, "turns")
        if style and style not in FEWSHOT_STYLES:
            c.add(f"{where}.style", f"must be one of {', '.join(FEWSHOT_STYLES)}, got {style!r}")
        answer: Path | None = None
        if "answer" in table:
            rel = _str(c, table, "answer", where)
            if rel:
                answer = _inside(c, root, rel, f"{where}.answer")
                if answer.is_file():
                    _read_text(c, answer, f"{where}.answer")
        out[name] = FewShotSpec(
            name,
            examples,
            rule,
            int(count),
            ids,
            seed or None,
            field_name or None,
            order or "drawn",
            style or "turns",
            answer,
        )
    return out


@dataclass(frozen=True)
class _Response:
    format: str
    parser: str
    letters: str | None
    mode: str


def _response(c: _Collector, data: dict[str, Any]) -> _Response:
    response = _table(c, data, "response")
    parser = _str(c, response, "parser", "response", "tumbling-e-json")
    if parser and parser not in PARSERS and parser != "ddx" and not parser.startswith(JUDGE_PREFIX):
        c.add("response.parser", f"unknown parser {parser!r}; use one of {', '.join(PARSERS)}")
    response_format = _str(c, response, "format", "response", parser or "tumbling-e-json")
    letters: str | None = None
    if "letters" in response and parser not in LETTER_PARSERS:
        c.add(
            "response.letters",
            f"applies to the multiple-choice and cloze parsers only, not {parser!r}",
        )
    elif parser in LETTER_PARSERS:
        letters = _str(c, response, "letters", "response", DEFAULT_LETTERS)
        if letters and (
            not re.fullmatch(r"[A-Z]{2,26}", letters) or len(set(letters)) != len(letters)
        ):
            c.add(
                "response.letters", f"must be 2 to 26 distinct capital letters A-Z, got {letters!r}"
            )
    mode = _str(c, response, "mode", "response", "exactly-one")
    if mode and mode not in MODES:
        c.add("response.mode", f"unknown mode {mode!r}; use {' or '.join(MODES)}")
    elif mode == "first-token" and parser not in VOCABULARY_PARSERS:
        c.add(
            "response.mode",
            f"first-token applies to the {', '.join(VOCABULARY_PARSERS)} parsers, not {parser!r}",
        )
    return _Response(response_format, parser, letters, mode or "exactly-one")


def _answer_column(c: _Collector, data: dict[str, Any], parser: str) -> str | None:
    table = data.get("stimuli")
    table = table if isinstance(table, dict) else {}
    if parser not in SINGLE_ANSWER_PARSERS:
        if "answer_column" in table:
            c.add(
                "stimuli.answer_column",
                f"applies to single-answer parsers only; the {parser} truth table has the fixed "
                "columns stimulus,row,position,orientation",
            )
        return None
    column = _str(c, table, "answer_column", "stimuli", default_answer_column(parser))
    if column == "stimulus":
        c.add("stimuli.answer_column", "the answer cannot be the 'stimulus' column itself")
    return column or None


def _analysis(c: _Collector, data: dict[str, Any], arms: Iterable[str] = ()) -> dict[str, Any]:
    analysis = _table(c, data, "analysis")
    analysis_out = {
        "model": analysis.get("model", "lmm"),
        "random_intercept": analysis.get("random_intercept", "stimulus"),
        "exclude_unparseable": analysis.get("exclude_unparseable", True),
    }
    if analysis_out["model"] != "lmm":
        c.add(
            "analysis.model",
            f"must be 'lmm' (the only primary model of v1), got {analysis_out['model']!r}",
        )
    group = analysis_out["random_intercept"]
    if group not in RANDOM_INTERCEPTS:
        extra = (
            " (a model without a random intercept is not available in v1)"
            if (group == "none")
            else ""
        )
        c.add("analysis.random_intercept", f"must be 'stimulus' or 'source', got {group!r}{extra}")
    if not isinstance(analysis_out["exclude_unparseable"], bool):
        c.add(
            "analysis.exclude_unparseable",
            f"must be true or false, got {analysis_out['exclude_unparseable']!r}",
        )
    model_arms = _name_list(c, analysis, "model_arms", "analysis")
    if model_arms is not None:
        if len(model_arms) < 2:
            c.add("analysis.model_arms", "the model needs at least two arms")
        unknown = [a for a in model_arms if a not in arms]
        if unknown:
            c.add("analysis.model_arms", f"unknown arm {unknown[0]!r}")
        analysis_out["model_arms"] = list(model_arms)
    if "covariates" in analysis:  # docs/analysis.md §11 (checked against the step below)
        from runner.steps import covariates_table

        covariates = covariates_table(analysis["covariates"], c.add)
        if covariates is not None:
            analysis_out["covariates"] = covariates
    return analysis_out


def load_study(root: str | Path, *, strict: bool = True) -> Study:
    """Read and validate ``ROOT/study.toml``. Raises :class:`SpecError` listing every problem.

    Every key must be one the spec knows (``docs/study-spec.md``); each problem names the file,
    the line (when the key is written) and the field. ``strict=False`` leaves unknown keys
    unreported: for a study already locked, whose spec can no longer change (``ledger new``,
    ``arms`` and ``lock`` are strict, so a study locked now has none).
    """
    root = Path(root)
    spec_path = root / "study.toml"
    if spec_path.is_dir():
        raise SpecError([f"{spec_path} is a directory, where the study spec file is expected"])
    try:
        if spec_path.stat().st_size > MAX_SPEC_BYTES:  # refused before a byte is read
            raise SpecError(
                [
                    f"{spec_path}: {spec_path.stat().st_size:,} bytes, more than the "
                    f"{MAX_SPEC_BYTES:,} a study spec may have"
                ]
            )
        raw = spec_path.read_bytes()
    except FileNotFoundError:
        raise SpecError([f"{spec_path}: no study spec (study.toml) in {root}"]) from None
    except OSError as exc:
        raise SpecError([f"cannot read {describe_os_error(exc, spec_path)}"]) from None
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text)
    except UnicodeDecodeError as exc:
        raise SpecError([f"{spec_path}: {describe_utf8_error(raw, exc)}"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError([f"{spec_path}: not valid TOML: {exc}"]) from None
    except RecursionError:  # tomllib recurses per nesting level
        raise SpecError(
            [
                f"{spec_path}: arrays or tables nested too deep to read (a study spec "
                "nests a few levels)"
            ]
        ) from None
    c = _Collector(str(spec_path), LineFinder(text))
    if strict:
        _unknown_problems(c, data)

    study = _table(c, data, "study")
    study_id = _str(c, study, "id", "study")
    if study_id and not ID_RE.match(study_id):
        c.add("study.id", "use letters, digits, '.', '_' or '-' (at most 64)")
    title = _str(c, study, "title", "study")
    origin = _str(c, study, "origin", "study", f"prompt-ledger.local/{study_id}")
    amendable = study.get("amendable", [])
    if not isinstance(amendable, list) or not all(isinstance(x, str) for x in amendable):
        c.add("study.amendable", "must be a list of study-relative file paths")
        amendable = []
    phase = study.get("phase")
    if phase is not None and not (isinstance(phase, str) and ID_RE.match(phase)):
        c.add("study.phase", "must be a name: letters, digits, '.', '_' or '-' (at most 64)")
        phase = None

    model_out = _model(c, data)
    models = _models(c, data)
    prompt = _prompt(c, root, data)
    fewshot = _fewshot(c, root, data)
    components: dict[str, Path] = {}
    for name, rel in _table(c, data, "components").items():
        if not isinstance(rel, str):
            c.add(f"components.{name}", "must be a file path")
            continue
        components[name] = _inside(c, root, rel, f"components.{name}")
        if components[name].is_file():
            _read_text(c, components[name], f"components.{name}")
    for name in components:
        if name in RESERVED_COMPONENTS:
            c.add(
                f"components.{name}",
                f"{name!r} is reserved (an arm lists it for the "
                f"{'item block' if name == 'item' else 'inline few-shot examples'})",
            )
    providers = (
        [str(model_out.get("provider", ""))]
        if models is None
        else [m.provider for m in models.values()]
    )
    arms = _arms(c, data, components, models, providers, fewshot)
    factors = parse_factors(
        data.get("factors"),
        c.add,
        lambda rel, where: _inside(c, root, rel, where),
        lambda path, where: _read_text(c, path, where),
        lambda path: path.resolve().relative_to(root.resolve()).as_posix(),
        components,
    )
    factorial = parse_factorial(data.get("factorial"), factors, arms, c.add)
    arms = _factorial_arms(c, arms, factors, factorial, prompt.item is not None)
    _check_after(c, arms, factorial.base if factorial is not None else None)
    response = _response(c, data)
    stimuli_dir, truth, stimuli, items = _stimuli(c, root, data)
    stimuli_table = data.get("stimuli")
    items_path = truth if isinstance(stimuli_table, dict) and "items" in stimuli_table else None
    answer_column = None if items_path is not None else _answer_column(c, data, response.parser)
    if items_path is not None and prompt.item is None:
        c.add(
            "prompt.item",
            "a study with an item file needs an item template ([prompt] item = "
            '"prompts/item.txt"), which places each item\'s question and options',
        )
    letters = response.letters
    response_table = data.get("response")
    if (
        items is not None
        and response.parser in LETTER_PARSERS
        and not (isinstance(response_table, dict) and "letters" in response_table)
        and not c.problems
    ):
        from runner.items import OPTION_LABELS

        widest = max((len(i.options) for i in items), default=4)
        letters = OPTION_LABELS[: max(widest, 2)]

    design = _table(c, data, "design")
    replicates = design.get("replicates")
    if (
        isinstance(replicates, bool)
        or not isinstance(replicates, int)
        or not 1 <= replicates <= MAX_REPLICATES
    ):
        c.add(
            "design.replicates",
            f"must be an integer from 1 to {MAX_REPLICATES:,}, got {replicates!r}",
        )
        replicates = 1
    seed = _int_seed(c, design, "seed", "design")
    bootstrap_seed = _int_seed(c, design, "bootstrap_seed", "design")
    iterations = design.get("bootstrap_iterations", 10000)
    if (
        isinstance(iterations, bool)
        or not isinstance(iterations, int)
        or not 100 <= iterations <= 1_000_000
    ):  # the verifier recomputes at most 1,000,000 (docs/archive-format.md §6)
        c.add(
            "design.bootstrap_iterations",
            f"must be an integer from 100 to 1000000, got {iterations!r}",
        )
        iterations = 10000
    secret = design.get("blinding_secret", "generate")
    if not isinstance(secret, str) or not any(
        secret == s or (s.endswith(":") and secret.startswith(s) and len(secret) > len(s))
        for s in SECRET_SOURCES
    ):
        c.add("design.blinding_secret", "must be 'generate', 'env:NAME' or 'file:PATH'")
        secret = "generate"

    hypotheses = _hypotheses(c, data, arms, response.parser, stimuli)
    _factorial_hypotheses(c, hypotheses, factors, factorial, "variants" in data)
    analysis_out = _analysis(c, data, arms)
    model_arms = analysis_out.get("model_arms")
    if model_arms is not None:
        for i, h in enumerate(hypotheses):
            if h.test == "lmm" and h.stimuli is None and not set(h.contrast) <= set(model_arms):
                c.add(
                    f"hypotheses[{i}].contrast",
                    f"an lmm contrast on the main model needs "
                    f"both arms in analysis.model_arms {model_arms}",
                )

    variants = _variants(c, root, data, items is not None)
    declared = {v.name for v in variants}
    for arm in arms.values():
        for name in arm.variants or ():
            if name not in declared and not any(
                name.startswith(f"{v.name}-") and v.kind == "all-orders" for v in variants
            ):
                known = ", ".join(sorted(declared)) or "none declared"
                c.add(f"arms.{arm.id}.variants", f"unknown variant {name!r} (variants: {known})")
    _check_kinds(
        c, hypotheses, arms, variants, models, model_out, int(replicates), items_path is not None
    )
    _data_arm_items(c, arms, items, variants)
    witnessing = parse_policy(data, c.add)
    timestamping = parse_timestamping(data, c.add)
    privacy = parse_privacy(data, c.add)
    deviations = _deviations(c, data)
    steps = parse_steps(
        data.get("steps"),
        root,
        c.add,
        list(models) if models is not None else None,
        components,
        lambda rel, where: _inside(c, root, rel, where),
    )
    if "covariates" in analysis_out:
        from runner.steps import covariate_problems

        covariate_problems(analysis_out["covariates"], steps, c.add)
    reviews = _reviews(
        c, data, arms, variants, models, response.parser, items_path is not None, steps, items
    )
    check_outcomes(c.add, hypotheses, response.parser, steps)
    check_pairing(c.add, hypotheses, arms, int(replicates))
    if response.parser.startswith(JUDGE_PREFIX):
        judge = steps.get(response.parser[len(JUDGE_PREFIX) :])
        if judge is None or judge.on != "trial":
            c.add(
                "response.parser",
                f'{response.parser!r} names no trial step ([steps.<NAME>] with on = "trial")',
            )
        elif judge.parser != "label" or "correct" not in judge.labels:
            c.add(
                "response.parser",
                f"judge step {judge.name!r} must use the label parser with "
                'a label "correct" (a trial is correct when the judges\' decision is it)',
            )
        if items is None:
            c.add("response.parser", "a judge scores item studies ([stimuli] items) only")
    raw_response = data.get("response")
    ddx = parse_ddx(
        c.add, raw_response if isinstance(raw_response, dict) else {}, response.parser, steps, items
    )
    for where, message in hypothesis_problems(
        [{"id": h.id, "outcome": h.outcome, "test": h.test} for h in hypotheses],
        response.parser,
        ddx,
    ):
        c.add(where, message)

    plan = parse_plan(
        data,
        c.add,
        arms=list(arms),
        models=list(models or {}),
        variants=[v.name for v in variants],
        hypotheses=[h.id for h in hypotheses],
        arm_replicates=any(a.replicates is not None for a in arms.values()),
    )
    if c.problems:
        raise SpecError(c.problems)
    loaded = Study(
        root=root,
        spec_path=spec_path,
        id=study_id,
        title=title,
        origin=origin,
        model=model_out,
        components=components,
        arms=arms,
        stimuli_dir=stimuli_dir,
        truth_path=truth,
        stimuli=stimuli,
        replicates=int(replicates),
        seed=seed,
        bootstrap_seed=bootstrap_seed,
        bootstrap_iterations=int(iterations),
        blinding_secret=secret,
        response_format=response.format,
        parser=response.parser,
        hypotheses=tuple(hypotheses),
        analysis=analysis_out,
        amendable=tuple(amendable),
        deviations=deviations,
        answer_column=answer_column,
        letters=letters,
        mode=response.mode,
        items_path=items_path,
        item_first=items.first if items is not None else None,
        prompt=prompt,
        fewshot=fewshot,
        models=models,
        phase=phase,
        variants=tuple(variants),
        witnessing=witnessing,
        timestamping=timestamping,
        steps=steps,
        reviews=reviews,
        privacy=privacy,
        factors=factors,
        factorial=factorial,
        ddx=ddx,
        plan=plan,
    )
    if items is not None:  # read once, here: Study.load_items returns it from now on
        object.__setattr__(loaded, "_items", items)
    return loaded


def component_differences(study: Study) -> dict[tuple[str, str], tuple[list[str], list[str]]]:
    """For every ordered pair of arms: (components only in the first, only in the second)."""
    out: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for a, b in itertools.permutations(study.arms, 2):
        ca, cb = study.placed_components(a), study.placed_components(b)
        out[(a, b)] = ([x for x in ca if x not in cb], [x for x in cb if x not in ca])
    return out


def check_matched_controls(study: Study) -> list[str]:
    """Check every ``differs_from`` declaration; return one message per false claim.

    ``B differs_from {arm = "A", by = ["rule"]}`` holds when B is A with exactly the components
    in ``by`` removed or replaced one for one in the same position (a matched control block), and
    nothing else differs.
    """
    problems: list[str] = []
    for arm in study.arms.values():
        if arm.differs_from is None:
            continue
        if arm.differs is not None:
            problems += _exact_claims(study, arm)
            continue
        base_id, by = arm.differs_from
        base = study.placed_components(base_id)
        mine = study.placed_components(arm.id)
        removed = [x for x in base if x not in mine]
        added = [x for x in mine if x not in base]
        where = f"{study.spec_path}: arms.{arm.id}.differs_from"
        if sorted(removed) != sorted(by):
            problems.append(
                f"{where}: arm {arm.id} is declared to differ from {base_id} by {list(by)}, but it "
                f"lacks {removed} and adds {added}"
            )
            continue
        if added and len(added) != len(removed):
            problems.append(
                f"{where}: {arm.id} adds {added} which do not replace {removed} one for one"
            )
            continue
        swapped = list(base)
        for old, new in zip(removed, added, strict=False):
            swapped[swapped.index(old)] = new
        expected = [x for x in swapped if x not in removed]
        if list(mine) != expected:
            problems.append(
                f"{where}: apart from {list(by)}, arm {arm.id} must keep {base_id}'s components in "
                f"order ({expected}), but it has {list(mine)}"
            )
    return problems


def _exact_claims(study: Study, arm: Arm) -> list[str]:
    """``differs_from = {arm, removes, adds, replaces}``: each claim held exactly.

    Against the base's placed components, the arm must lack exactly ``removes`` and the keys of
    ``replaces``, have exactly ``adds`` and the values of ``replaces`` beyond them, each
    replacement in the position of the component it replaces, and every other component in the
    base's order.
    """
    assert arm.differs_from is not None and arm.differs is not None
    base_id = arm.differs_from[0]
    where = f"{study.spec_path}: arms.{arm.id}.differs_from"
    base = list(study.placed_components(base_id))
    mine = list(study.placed_components(arm.id))
    removes = list(arm.differs.get("removes", []))
    adds = list(arm.differs.get("adds", []))
    replaces: dict[str, str] = dict(arm.differs.get("replaces", {}))
    removed = [x for x in base if x not in mine]
    added = [x for x in mine if x not in base]
    out: list[str] = []
    for name in [*removes, *replaces]:
        if name not in base:
            out.append(
                f"{where}: {base_id} has no component {name!r} for {arm.id} to remove or "
                f"replace ({base_id}: {base})"
            )
    for name in [*adds, *replaces.values()]:
        if name in base:
            out.append(
                f"{where}: {name!r} is already in {base_id} ({base}); {arm.id} cannot add it"
            )
    if out:
        return out
    claimed_removed = sorted([*removes, *replaces])
    claimed_added = sorted([*adds, *replaces.values()])
    if sorted(removed) != claimed_removed or sorted(added) != claimed_added:
        said = []
        if removes:
            said.append(f"removes {removes}")
        if adds:
            said.append(f"adds {adds}")
        if replaces:
            said.append(f"replaces {replaces}")
        return [
            f"{where}: arm {arm.id} is declared to differ from {base_id} as it "
            f"{', '.join(said)}, but it lacks {removed} and adds {added}"
        ]
    expected = [replaces.get(x, x) for x in base if x not in removes]
    kept = [x for x in mine if x not in adds]
    if kept != expected:
        return [
            f"{where}: apart from what it adds, arm {arm.id} must have {base_id}'s components "
            f"with {replaces or 'nothing'} replaced in place and {removes or 'nothing'} "
            f"removed ({expected}), but it has {kept}"
        ]
    return []


def _variants(
    c: _Collector, root: Path, data: dict[str, Any], item_study: bool
) -> list[VariantSpec]:
    """The ``[variants.<NAME>]`` tables (``docs/variants.md`` section 1), in declaration order."""
    from runner.variants import VariantError, read_stopwords

    raw = data.get("variants")
    if raw is None:
        return []
    if not isinstance(raw, dict) or not raw or not all(isinstance(v, dict) for v in raw.values()):
        c.add("variants", "declare each variant as a [variants.<NAME>] table")
        return []
    if not item_study:
        c.add("variants", "variants transform items: they need an item file ([stimuli] items)")
    out: list[VariantSpec] = []
    for name, table in raw.items():
        where = f"variants.{name}"
        if not ID_RE.match(name):
            c.add(where, "variant names are letters, digits, '.', '_' or '-' (at most 64)")
        kind = _str(c, table, "kind", where)
        if not kind:
            continue
        if kind not in KINDS:
            c.add(f"{where}.kind", f"unknown kind {kind!r}; use one of {', '.join(KINDS)}")
            continue
        allowed = KIND_KEYS[kind]
        params: dict[str, Any] = {}
        for key in table:
            if key != "kind" and key not in allowed:
                took = ", ".join(allowed) or "no other key"
                c.add(
                    f"{where}.{key}",
                    f"does not apply to kind {kind!r} (it takes {took})",
                    ("variants", name, key),
                )
        stop: frozenset[str] | None = None
        for key in allowed:
            path = ("variants", name, key)
            value = table.get(key)
            if value is None and key in ("labels_from", "query"):
                continue
            if value is None:
                c.add(f"{where}.{key}", f"missing (kind {kind!r} needs it)", path)
                continue
            ok = True
            if key in ("k", "count"):
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
                what = "an integer >= 1"
            elif key == "seed":
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
                what = "a non-negative integer"
                value = str(value) if ok else value
            elif key == "fraction":
                ok = (
                    isinstance(value, int | float)
                    and not isinstance(value, bool)
                    and (0 < value < 1)
                )
                what = "a number between 0 and 1 (exclusive)"
            elif key == "order":
                ok = isinstance(value, str) and bool(re.fullmatch(r"[A-Z]{2,26}", value))
                what = 'a string of option labels, e.g. "DCBA"'
            elif key == "labels":
                ok = (
                    isinstance(value, list)
                    and bool(value)
                    and all(isinstance(x, str) and x for x in value)
                )
                what = "a non-empty list of section labels"
            elif key == "field" or key == "query":
                ok = (
                    isinstance(value, str)
                    and bool(re.fullmatch(r"[a-z][a-z0-9_]*", value))
                    and (
                        value not in ("id", "answer", "options", "images", "metadata", "rationale")
                    )
                )
                what = "the name of a text field of the items"
            elif key == "labels_from":
                ok = isinstance(value, str) and bool(value)
                what = "the name of a metadata field"
            else:  # stopwords
                ok = isinstance(value, str) and bool(value)
                what = "the path of a stop-word file"
                if ok:
                    file = _inside(c, root, value, f"{where}.stopwords")
                    if file.is_file():
                        try:
                            stop = read_stopwords(file.read_bytes(), value)
                        except VariantError as exc:
                            c.add(f"{where}.stopwords", str(exc), path)
                        value = file.resolve().relative_to(root.resolve()).as_posix()
            if not ok:
                c.add(f"{where}.{key}", f"must be {what}, got {value!r}", path)
                continue
            params[key] = value
        if kind in FIELD_KINDS and kind == "keep-sections":
            params.setdefault("labels_from", "context_labels")
        if kind == "keep-salient":
            params.setdefault("query", "question")
        out.append(VariantSpec(name, kind, params, stop))
    return out
