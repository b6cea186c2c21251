"""The study as it is being read by :func:`runner.spec.load_study`, section by section.

The section parsers run in order (:data:`runner.spec._load.SECTIONS`); each reads its tables
from :attr:`Loading.data`, sends problems to :attr:`Loading.c` and sets its fields here. A
field holds its default until its section has run. :class:`Loading` is the
:class:`runner.statistics._base.Design` the statistic kinds' hooks see.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner._ddx import DdxSpec
from runner._factors import Factor, Factorial
from runner._planspec import PlanSpec
from runner._timestamping import TimestampSpec
from runner._variants import VariantSpec
from runner._witnessing import WitnessPolicy
from runner.spec._collector import Collector
from runner.spec._fields import inside, read_text
from runner.spec._types import Arm, FewShotSpec, Hypothesis, ModelSpec, PromptSpec, Review
from runner.steps._core import StepSpec


@dataclass
class Loading:
    """Everything read of one ``study.toml`` so far (see the module docstring)."""

    c: Collector
    root: Path
    spec_path: Path
    data: dict[str, Any]
    study_id: str = ""
    title: str = ""
    origin: str = ""
    amendable: tuple[str, ...] = ()
    phase: str | None = None
    model: dict[str, Any] = field(default_factory=dict)
    models: dict[str, ModelSpec] | None = None
    prompt: PromptSpec = field(default_factory=PromptSpec)
    fewshot: dict[str, FewShotSpec] = field(default_factory=dict)
    components: dict[str, Path] = field(default_factory=dict)
    arms: dict[str, Arm] = field(default_factory=dict)
    factors: dict[str, Factor] = field(default_factory=dict)
    factorial: Factorial | None = None
    response_format: str = ""
    parser: str = ""
    letters: str | None = None
    mode: str = "exactly-one"
    stimuli_dir: Path = Path()
    truth_path: Path = Path()
    stimuli: dict[str, Path] = field(default_factory=dict)
    items: Any = None
    """The :class:`runner._items.ItemSet` of an item study (None if it has problems)."""
    items_path: Path | None = None
    answer_column: str | None = None
    replicates: int = 1
    seed: str = ""
    bootstrap_seed: str = ""
    bootstrap_iterations: int = 10000
    blinding_secret: str = "generate"
    hypotheses: list[Hypothesis] = field(default_factory=list)
    analysis: dict[str, Any] = field(default_factory=dict)
    variants: list[VariantSpec] = field(default_factory=list)
    witnessing: WitnessPolicy | None = None
    timestamping: TimestampSpec | None = None
    privacy: tuple[str, ...] = ()
    deviations: tuple[dict[str, str], ...] = ()
    steps: dict[str, StepSpec] = field(default_factory=dict)
    reviews: tuple[Review, ...] = ()
    ddx: DdxSpec | None = None
    plan: PlanSpec | None = None

    @property
    def declares_variants(self) -> bool:
        """Whether the spec has a ``[variants]`` section (read or not yet)."""
        return "variants" in self.data

    @property
    def item_study(self) -> bool:
        """Whether the stimuli are an item file."""
        return self.items_path is not None

    def inside(self, rel: str, where: str) -> Path:
        """``rel`` resolved in the study folder, a file that exists (else a problem)."""
        return inside(self.c, self.root, rel, where)

    def read_text(self, path: Path, where: str) -> str | None:
        """The UTF-8 text of ``path`` (None after a problem)."""
        return read_text(self.c, path, where)
