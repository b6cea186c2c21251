"""Recorded model steps: ``[steps.NAME]`` (``docs/adr/0005-recorded-model-steps.md``).

The steps of a study, their requests, where their calls stand, and the aggregates of
their replies.

The package imports lazily (PEP 562): importing it loads none of its modules; a name is imported
from its module on first use. Its modules are private (``_name.py``): other packages use the
names listed here (``docs/library.md``), which are what they import from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger._lazy import lazy_exports

if TYPE_CHECKING:
    from runner.steps._core import (
        StepCall,
        StepSpec,
        aggregate,
        aggregate_record,
        covariate_problems,
        covariates_table,
        normalise_element,
        output_text,
        parse_steps,
        review_sample,
        trial_step_calls,
    )
    from runner.steps._plan import step_study_plan
    from runner.steps._render import StepRenderer
    from runner.steps._state import CallState, StepWork, prior_values, reply_text, step_status

# Public name -> the module that defines it (imported on first use).
_EXPORTS: dict[str, str] = {
    "StepCall": "runner.steps._core",
    "StepSpec": "runner.steps._core",
    "aggregate": "runner.steps._core",
    "aggregate_record": "runner.steps._core",
    "covariate_problems": "runner.steps._core",
    "covariates_table": "runner.steps._core",
    "normalise_element": "runner.steps._core",
    "output_text": "runner.steps._core",
    "parse_steps": "runner.steps._core",
    "review_sample": "runner.steps._core",
    "trial_step_calls": "runner.steps._core",
    "step_study_plan": "runner.steps._plan",
    "StepRenderer": "runner.steps._render",
    "CallState": "runner.steps._state",
    "StepWork": "runner.steps._state",
    "prior_values": "runner.steps._state",
    "reply_text": "runner.steps._state",
    "step_status": "runner.steps._state",
}

__all__ = [
    "CallState",
    "StepCall",
    "StepRenderer",
    "StepSpec",
    "StepWork",
    "aggregate",
    "aggregate_record",
    "covariate_problems",
    "covariates_table",
    "normalise_element",
    "output_text",
    "parse_steps",
    "prior_values",
    "reply_text",
    "review_sample",
    "step_status",
    "step_study_plan",
    "trial_step_calls",
]

if not TYPE_CHECKING:  # type checkers read the imports above instead
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
