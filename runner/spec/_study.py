"""The validated study (:class:`Study`): everything :mod:`runner._lock` needs."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger import describe_utf8_error
from runner._ddx import DdxSpec
from runner._errors import SpecError, StudyError
from runner._factors import Factor, Factorial, ItemEdit
from runner._planspec import PLAN_FILE, PlanSpec
from runner._timestamping import TimestampSpec
from runner._variants import Variant, VariantSpec
from runner._witnessing import WitnessPolicy
from runner.spec._components import RESERVED_COMPONENTS
from runner.spec._response import LETTER_PARSERS, SINGLE_ANSWER_PARSERS, VOCABULARY_PARSERS
from runner.spec._types import Arm, FewShotSpec, Hypothesis, ModelSpec, PromptSpec, Review
from runner.steps._core import StepSpec


@dataclass(frozen=True)
class Study:
    """A validated study: everything :mod:`runner._lock` needs, with paths resolved."""

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
        specs = {m.name: m for m in self.model_specs()}
        out: list[str] = []
        for arm in self.arms.values():
            out += self._greedy_replicates(arm, specs)
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

    def _greedy_replicates(self, arm: Arm, specs: dict[str | None, ModelSpec]) -> list[str]:
        """One warning per model the arm runs two or more replicates of at temperature 0."""
        reps = arm.replicates or self.replicates
        if arm.response_from is not None or reps < 2:
            return []
        names: list[str | None] = list(arm.models) if arm.models is not None else list(specs)
        out = []
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
        files.update(self._stimulus_files())
        files.update(self._template_files())
        for spec in self.variants:
            if "stopwords" in spec.params:
                files[str(spec.params["stopwords"])] = "stopwords"
        templates, texts = self._factor_files()
        files.update(templates)
        for text in texts:
            files.setdefault(text, "factor-text")
        if self.plan is not None and (self.root / PLAN_FILE).is_file():  # docs/planning.md
            files[PLAN_FILE] = "plan"
        for pattern in self.amendable:  # documents that may be amended are locked too
            for path in sorted(self.root.glob(pattern)):
                if path.is_file():
                    files.setdefault(self._rel(path), "document")
        return dict(sorted(files.items()))

    def _stimulus_files(self) -> dict[str, str]:
        """The item file and its images, or the truth table and the stimulus images."""
        if self.items_path is not None:
            files = {self._rel(self.items_path): "items"}
            files.update((self._rel(path), "item-image") for path in self.item_images())
            return files
        files = {self._rel(self.truth_path): "truth"}
        files.update((self._rel(path), "stimulus") for path in self.stimuli.values())
        return files

    def _template_files(self) -> dict[str, str]:
        """The item template, the example sets (and answer templates), the steps' files."""
        files: dict[str, str] = {}
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
        return files

    def _factor_files(self) -> tuple[dict[str, str], list[str]]:
        """The factors' level templates, and their edits' text files (study-spec.md "Factors")."""
        levels = [lv for factor in self.factors.values() for lv in factor.levels]
        templates = {self._rel(lv.template): "template" for lv in levels if lv.template is not None}
        texts = [edit.file for lv in levels for edit in lv.edits if edit.file is not None]
        return templates, texts

    def rel(self, path: Path) -> str:
        """``path`` relative to the study folder, with ``/`` separators."""
        return self._rel(path)

    def _rel(self, path: Path) -> str:
        return path.resolve().relative_to(self.root.resolve()).as_posix()

    def load_items(self) -> Any:
        """The study's :class:`runner._items.ItemSet` (read once, then kept)."""
        from runner._items import load_items

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
        from runner._schedule import crossed_trial_ids, subset

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

        Raises :class:`runner._variants.VariantError` when an ``all-orders`` cannot expand.
        """
        from runner._variants import expand

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
        from runner._schedule import subset

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
