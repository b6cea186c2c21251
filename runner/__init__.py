"""Run a PROMPT study: scaffold, arms and matched controls, lock, schedule, estimate, run, status.

A study is a folder (``study.toml``, prompt components, stimuli, truth table) with its signed
ledger (``ledger.db``); every step below is one call that reads the folder and appends to the
ledger, exactly what the ``ledger`` command does. Scoring, unblinding, analysis, the report and
the export are in :mod:`analysis`. Example::

    import runner

    made = runner.new_study("my-study", "prompt-tumbling-e", study_id="my-study")
    key = runner.study_owner_key("my-study")    # the owner key new_study made for it
    study = runner.load_study("my-study")       # the spec, validated; edit study.toml first
    assert not runner.check_matched_controls(study)
    locked = runner.lock_study("my-study", key) # publish locked.checkpoint now
    backend = runner.make_backend("simulated")  # or "anthropic", "openai-compatible", ...
    print(runner.estimate_study("my-study", backend).cost_max_usd)
    result = runner.run_study("my-study", key, backend, runner.RunOptions(concurrency=8))
    for arm in runner.arm_status(runner.study_state("my-study")):
        print(arm.arm, arm.responded, arm.given_up, arm.pending)

Errors (every message names the study, file or field at fault)::

    ledger.LedgerError
    └── StudyError          a study that cannot be locked, run or used as it stands
        ├── SpecError       study.toml problems; ``problems`` lists every one
        ├── StimulusError   a stimulus that cannot be generated, read or checked
        └── PreflightError  the backend refused the preflight: no trial was sent
    BackendError            one failed attempt; raised to callers only by make_backend

The package imports lazily (PEP 562): ``import runner`` loads none of its modules, so the
``ledger`` command starts fast; a name is imported from its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger._lazy import lazy_exports

if TYPE_CHECKING:
    from runner._arm_identity import identity_bytes, identity_object, identity_version
    from runner._backends import (
        BACKENDS,
        AnthropicBackend,
        Backend,
        BackendError,
        Reply,
        SimulatedBackend,
    )
    from runner._cli import study_key
    from runner._ddx import DDX_METRICS, REFERENCE_SETS, DdxSpec, supplied_reference
    from runner._engines import make_backend
    from runner._errors import PreflightError, SpecError, StimulusError, StudyError
    from runner._estimate import Estimate, estimate_study
    from runner._execute import Counters, RunOptions, RunResult, check_study, run_study
    from runner._factors import FACTORIAL_OUTCOMES, design_columns
    from runner._human_review import (
        REFERENCE_FIELDS,
        code_problem,
        code_table,
        edit_problem,
        item_sample,
        label_table,
        reference_table,
        supplied_sets,
    )
    from runner._identity import recorded_warnings, session_notice
    from runner._items import OPTION_LABELS
    from runner._lock import (
        LockResult,
        amend,
        blinding_secret,
        changed_files,
        check_integrity,
        ledger_path,
        lock_study,
        locked_manifest,
        protocol_body,
        protocol_event,
        secret_path,
        sign_missing_checkpoints,
        study_owner_key,
        validate_for_lock,
    )
    from runner._new import SUITES, NewStudy, new_study, new_template, study_id_from_directory
    from runner._phases import hypothesis_phases, protocol_events, trial_phases
    from runner._plancheck import plan_stimuli
    from runner._planspec import (
        PLAN_FILE,
        PLAN_VERSION,
        PlanSpec,
        Scenario,
        lock_warnings,
        plan_inputs,
    )
    from runner._progress import RunDisplay
    from runner._provenance import environment, model_mismatches
    from runner._publish import StudyPublisher
    from runner._qrboot import ARM_STATISTICS, BINARY_STATISTICS, QR_OUTCOMES, QR_TEST
    from runner._recorded import (
        EVENTS_FILE,
        Recorded,
        RecordedEvent,
        event_lines,
        layout,
        open_events,
        open_recorded,
        parse_line,
    )
    from runner._render import Renderer
    from runner._request import RequestBuilder, Trial
    from runner._schedule import arm_code, commitment, order_key, schedule_sha256, trial_ids
    from runner._state import (
        ArmStatus,
        StudyState,
        TrialState,
        arm_status,
        load_state,
        locked_order,
        study_state,
    )
    from runner._stimuli import EXPECTED_ORIENTATIONS, NOT_A_TUMBLING_E_CHART, Glyph, rotate_images
    from runner._truth import stimulus_sources, study_truth, variant_truth
    from runner._witnessing import POLICY_FILE
    from runner.spec import (
        Arm,
        Hypothesis,
        Study,
        check_matched_controls,
        component_differences,
        load_study,
    )

# Public name -> the module that defines it (imported on first use).
_EXPORTS: dict[str, str] = {
    # errors
    "StudyError": "runner._errors",
    "SpecError": "runner._errors",
    "StimulusError": "runner._errors",
    "PreflightError": "runner._errors",
    "BackendError": "runner._backends",
    # the study, its arms and matched controls
    "Study": "runner.spec",
    "Arm": "runner.spec",
    "Hypothesis": "runner.spec",
    "load_study": "runner.spec",
    "check_matched_controls": "runner.spec",
    "component_differences": "runner.spec",
    # new study, keys and files
    "new_study": "runner._new",
    "NewStudy": "runner._new",
    "study_id_from_directory": "runner._new",
    "study_owner_key": "runner._lock",
    "ledger_path": "runner._lock",
    # lock and amend
    "lock_study": "runner._lock",
    "LockResult": "runner._lock",
    "amend": "runner._lock",
    "check_integrity": "runner._lock",
    # the schedule (randomization and blinding codes)
    "Trial": "runner._request",
    "trial_ids": "runner._schedule",
    "order_key": "runner._schedule",
    "schedule_sha256": "runner._schedule",
    "arm_code": "runner._schedule",
    "commitment": "runner._schedule",
    "locked_order": "runner._state",
    # estimate and run
    "estimate_study": "runner._estimate",
    "Estimate": "runner._estimate",
    "run_study": "runner._execute",
    "check_study": "runner._execute",
    "RunOptions": "runner._execute",
    "RunResult": "runner._execute",
    "Counters": "runner._execute",
    "make_backend": "runner._engines",
    "Backend": "runner._backends",
    "Reply": "runner._backends",
    "BACKENDS": "runner._backends",
    # status
    "study_state": "runner._state",
    "load_state": "runner._state",
    "StudyState": "runner._state",
    "TrialState": "runner._state",
    "arm_status": "runner._state",
    "ArmStatus": "runner._state",
    # what other packages use (make_faces.py)
    "identity_bytes": "runner._arm_identity",
    "identity_object": "runner._arm_identity",
    "identity_version": "runner._arm_identity",
    "AnthropicBackend": "runner._backends",
    "SimulatedBackend": "runner._backends",
    "study_key": "runner._cli",
    "DDX_METRICS": "runner._ddx",
    "DdxSpec": "runner._ddx",
    "REFERENCE_SETS": "runner._ddx",
    "supplied_reference": "runner._ddx",
    "FACTORIAL_OUTCOMES": "runner._factors",
    "design_columns": "runner._factors",
    "REFERENCE_FIELDS": "runner._human_review",
    "code_problem": "runner._human_review",
    "code_table": "runner._human_review",
    "edit_problem": "runner._human_review",
    "item_sample": "runner._human_review",
    "label_table": "runner._human_review",
    "reference_table": "runner._human_review",
    "supplied_sets": "runner._human_review",
    "recorded_warnings": "runner._identity",
    "session_notice": "runner._identity",
    "OPTION_LABELS": "runner._items",
    "blinding_secret": "runner._lock",
    "changed_files": "runner._lock",
    "locked_manifest": "runner._lock",
    "protocol_body": "runner._lock",
    "protocol_event": "runner._lock",
    "secret_path": "runner._lock",
    "sign_missing_checkpoints": "runner._lock",
    "validate_for_lock": "runner._lock",
    "SUITES": "runner._new",
    "new_template": "runner._new",
    "hypothesis_phases": "runner._phases",
    "protocol_events": "runner._phases",
    "trial_phases": "runner._phases",
    "plan_stimuli": "runner._plancheck",
    "PLAN_FILE": "runner._planspec",
    "PLAN_VERSION": "runner._planspec",
    "PlanSpec": "runner._planspec",
    "Scenario": "runner._planspec",
    "lock_warnings": "runner._planspec",
    "plan_inputs": "runner._planspec",
    "RunDisplay": "runner._progress",
    "environment": "runner._provenance",
    "model_mismatches": "runner._provenance",
    "StudyPublisher": "runner._publish",
    "ARM_STATISTICS": "runner._qrboot",
    "BINARY_STATISTICS": "runner._qrboot",
    "QR_OUTCOMES": "runner._qrboot",
    "QR_TEST": "runner._qrboot",
    "EVENTS_FILE": "runner._recorded",
    "Recorded": "runner._recorded",
    "RecordedEvent": "runner._recorded",
    "event_lines": "runner._recorded",
    "layout": "runner._recorded",
    "open_events": "runner._recorded",
    "open_recorded": "runner._recorded",
    "parse_line": "runner._recorded",
    "Renderer": "runner._render",
    "RequestBuilder": "runner._request",
    "EXPECTED_ORIENTATIONS": "runner._stimuli",
    "Glyph": "runner._stimuli",
    "NOT_A_TUMBLING_E_CHART": "runner._stimuli",
    "rotate_images": "runner._stimuli",
    "stimulus_sources": "runner._truth",
    "study_truth": "runner._truth",
    "variant_truth": "runner._truth",
    "POLICY_FILE": "runner._witnessing",
}

__all__ = [
    "ARM_STATISTICS",
    "BACKENDS",
    "BINARY_STATISTICS",
    "DDX_METRICS",
    "EVENTS_FILE",
    "EXPECTED_ORIENTATIONS",
    "FACTORIAL_OUTCOMES",
    "NOT_A_TUMBLING_E_CHART",
    "OPTION_LABELS",
    "PLAN_FILE",
    "PLAN_VERSION",
    "POLICY_FILE",
    "QR_OUTCOMES",
    "QR_TEST",
    "REFERENCE_FIELDS",
    "REFERENCE_SETS",
    "SUITES",
    "AnthropicBackend",
    "Arm",
    "ArmStatus",
    "Backend",
    "BackendError",
    "Counters",
    "DdxSpec",
    "Estimate",
    "Glyph",
    "Hypothesis",
    "LockResult",
    "NewStudy",
    "PlanSpec",
    "PreflightError",
    "Recorded",
    "RecordedEvent",
    "Renderer",
    "Reply",
    "RequestBuilder",
    "RunDisplay",
    "RunOptions",
    "RunResult",
    "Scenario",
    "SimulatedBackend",
    "SpecError",
    "StimulusError",
    "Study",
    "StudyError",
    "StudyPublisher",
    "StudyState",
    "Trial",
    "TrialState",
    "amend",
    "arm_code",
    "arm_status",
    "blinding_secret",
    "changed_files",
    "check_integrity",
    "check_matched_controls",
    "check_study",
    "code_problem",
    "code_table",
    "commitment",
    "component_differences",
    "design_columns",
    "edit_problem",
    "environment",
    "estimate_study",
    "event_lines",
    "hypothesis_phases",
    "identity_bytes",
    "identity_object",
    "identity_version",
    "item_sample",
    "label_table",
    "layout",
    "ledger_path",
    "load_state",
    "load_study",
    "lock_study",
    "lock_warnings",
    "locked_manifest",
    "locked_order",
    "make_backend",
    "model_mismatches",
    "new_study",
    "new_template",
    "open_events",
    "open_recorded",
    "order_key",
    "parse_line",
    "plan_inputs",
    "plan_stimuli",
    "protocol_body",
    "protocol_event",
    "protocol_events",
    "recorded_warnings",
    "reference_table",
    "rotate_images",
    "run_study",
    "schedule_sha256",
    "secret_path",
    "session_notice",
    "sign_missing_checkpoints",
    "stimulus_sources",
    "study_id_from_directory",
    "study_key",
    "study_owner_key",
    "study_state",
    "study_truth",
    "supplied_reference",
    "supplied_sets",
    "trial_ids",
    "trial_phases",
    "validate_for_lock",
    "variant_truth",
]

if not TYPE_CHECKING:  # type checkers read the imports above instead
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
