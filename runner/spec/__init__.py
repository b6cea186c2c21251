"""The study spec (``study.toml``): parsing and validation, with every error reported at once.

See ``docs/study-spec.md`` for every field. :func:`load_study` returns a :class:`Study`; on bad
input it raises :class:`SpecError` whose message lists each problem as ``file:line: field:
what`` (the line is found by :mod:`runner._schema`, since ``tomllib`` reports none). A key the
spec does not know is a problem, never ignored: ``study.toml:14: [model] temprature: unknown key
(did you mean 'temperature'?)``.

One module per section of ``study.toml`` (``_study_table``, ``_models``, ``_prompt``,
``_components``, ``_arms``, ``_factorial``, ``_response``, ``_stimuli``, ``_design``,
``_hypotheses``, ``_analysis``, ``_variants``, ``_reviews``, ``_deviations``, ...), run in the
order of :data:`runner.spec._load.SECTIONS`; the records in ``_types`` and ``_study``. A
hypothesis is validated by asking the statistic registry, :mod:`runner.statistics`.
"""

from __future__ import annotations

from pathlib import Path as Path

from runner._errors import SpecError, StudyError
from runner.spec._arms import ARM_ROLES, arm_runs
from runner.spec._components import RESERVED_COMPONENTS
from runner.spec._data_arm import DATA_ARM_REFUSED
from runner.spec._differs import check_matched_controls, component_differences
from runner.spec._fields import ID_RE, MAX_REPLICATES
from runner.spec._hypotheses import CORRECTIONS, PAIRINGS, SIDES
from runner.spec._load import MAX_SPEC_BYTES, load_study
from runner.spec._models import (
    CHAT_PROVIDERS,
    LOGPROB_PROVIDERS,
    NO_TOP_K_PROVIDERS,
    PROVIDERS_TEMPERATURE_MAX,
)
from runner.spec._prompt import FEWSHOT_ORDERS, FEWSHOT_RULES, FEWSHOT_STYLES
from runner.spec._response import (
    DEFAULT_LETTERS,
    JUDGE_PREFIX,
    LETTER_PARSERS,
    MODES,
    PARSERS,
    SINGLE_ANSWER_PARSERS,
    TEXT_PARSERS,
    VOCABULARY_PARSERS,
    default_answer_column,
)
from runner.spec._stimuli import IMAGE_SUFFIXES
from runner.spec._study import Study
from runner.spec._types import (
    REVIEW_KINDS,
    Arm,
    FewShotSpec,
    Hypothesis,
    ModelSpec,
    PromptSpec,
    Review,
)
from runner.statistics import KIND_ONLY_KEYS, MCQ_TESTS, TESTS
from runner.statistics._base import OUTCOMES, default_outcome
from runner.statistics.gee import GEE_FALLBACKS

__all__ = [
    "ARM_ROLES",
    "CHAT_PROVIDERS",
    "CORRECTIONS",
    "DATA_ARM_REFUSED",
    "DEFAULT_LETTERS",
    "FEWSHOT_ORDERS",
    "FEWSHOT_RULES",
    "FEWSHOT_STYLES",
    "GEE_FALLBACKS",
    "ID_RE",
    "IMAGE_SUFFIXES",
    "JUDGE_PREFIX",
    "KIND_ONLY_KEYS",
    "LETTER_PARSERS",
    "LOGPROB_PROVIDERS",
    "MAX_REPLICATES",
    "MAX_SPEC_BYTES",
    "MCQ_TESTS",
    "MODES",
    "NO_TOP_K_PROVIDERS",
    "OUTCOMES",
    "PAIRINGS",
    "PARSERS",
    "PROVIDERS_TEMPERATURE_MAX",
    "RESERVED_COMPONENTS",
    "REVIEW_KINDS",
    "SIDES",
    "SINGLE_ANSWER_PARSERS",
    "TESTS",
    "TEXT_PARSERS",
    "VOCABULARY_PARSERS",
    "Arm",
    "FewShotSpec",
    "Hypothesis",
    "ModelSpec",
    "PromptSpec",
    "Review",
    "SpecError",
    "Study",
    "StudyError",
    "arm_runs",
    "check_matched_controls",
    "component_differences",
    "default_answer_column",
    "default_outcome",
    "load_study",
]
