"""Pin the public names, so a change to the API is a deliberate, reviewed change."""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import analysis
import ledger
import runner
import verify


def test_ledger_public_names() -> None:
    assert sorted(ledger.__all__) == sorted(
        [
            "EMPTY_ROOT",
            "KNOWN_KINDS",
            "MAX_SAFE_INTEGER",
            "ROLES",
            "AuthorizationError",
            "CanonicalError",
            "Checkpoint",
            "ConsistencyProof",
            "Envelope",
            "Event",
            "EventSpec",
            "FixedClock",
            "FormatError",
            "InclusionProof",
            "KeyFileError",
            "KeyRecord",
            "Ledger",
            "LedgerError",
            "NotALedgerError",
            "Note",
            "NoteError",
            "OutputError",
            "ProofError",
            "PostgresLocation",
            "RefusedError",
            "RemoteLocation",
            "ConflictError",
            "SchemaVersionError",
            "SigningKey",
            "StoreError",
            "StoredCheckpoint",
            "VerifierKey",
            "canonical_json",
            "describe_os_error",
            "describe_utf8_error",
            "leaf_hash",
            "load_verifier",
            "node_hash",
            "open_checkpoint",
            "open_note",
            "open_regular_file",
            "parse_checkpoint",
            "parse_envelope",
            "read_regular_file",
            "role_may_append",
            "is_url",
            "schema_for",
            "root_from_leaf_hashes",
            "root_from_leaves",
            "sign_note",
            "user_home",
            "CopyResult",
            "copy_ledger",
            "study_ledger",
            "SealPolicy",
            "commitment",
            "is_sealed",
            "open_blob",
            "seal",
            "split_sealed",
            "verify_consistency",
            "verify_inclusion",
            "write_files",
            "SALT_BYTES",
            "RemoteLedger",
            "TileError",
            "WorkerLink",
            "WorkerRecord",
            "can_sync_file_system",
            "check_origin",
            "cosigned_by",
            "dead_workers",
            "fsync_directory",
            "is_http_url",
            "list_workers",
            "make_receipt",
            "new_worker_id",
            "open_requests",
            "publish",
            "register_worker",
            "remove_worker",
            "session_open",
            "sync_file_system",
        ]
    )
    for name in ledger.__all__:
        assert hasattr(ledger, name), name


def test_verify_public_names() -> None:
    for name in (
        "Check",
        "Report",
        "Status",
        "VerificationError",
        "require_valid",
        "verify_ledger_file",
        "CHECK_NAMES",
    ):
        assert name in verify.__all__
    for name in verify.__all__:
        assert hasattr(verify, name), name
    assert list(verify.CHECK_NAMES) == [
        "file",
        "envelopes",
        "sequence",
        "chain",
        "leaf-hashes",
        "keys",
        "signatures",
        "blobs",
        "tree",
        "checkpoints",
        "published-checkpoints",
        "trust",
        "time-order",
    ]


def test_every_error_is_a_ledger_error() -> None:
    for name in ledger.__all__:
        obj = getattr(ledger, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, ledger.LedgerError), name


RUNNER_NAMES = [
    "BACKENDS",
    "Arm",
    "ArmStatus",
    "Backend",
    "BackendError",
    "Counters",
    "Estimate",
    "Hypothesis",
    "LockResult",
    "NewStudy",
    "PreflightError",
    "Reply",
    "RunOptions",
    "RunResult",
    "SpecError",
    "StimulusError",
    "Study",
    "StudyError",
    "StudyState",
    "Trial",
    "TrialState",
    "amend",
    "arm_code",
    "arm_status",
    "check_integrity",
    "check_matched_controls",
    "check_study",
    "commitment",
    "component_differences",
    "estimate_study",
    "ledger_path",
    "load_state",
    "load_study",
    "lock_study",
    "locked_order",
    "make_backend",
    "new_study",
    "order_key",
    "run_study",
    "schedule_sha256",
    "study_id_from_directory",
    "study_owner_key",
    "study_state",
    "trial_ids",
    "ARM_STATISTICS",
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
    "DdxSpec",
    "Glyph",
    "PlanSpec",
    "Recorded",
    "RecordedEvent",
    "Renderer",
    "RequestBuilder",
    "RunDisplay",
    "Scenario",
    "SimulatedBackend",
    "StudyPublisher",
    "blinding_secret",
    "changed_files",
    "code_problem",
    "code_table",
    "design_columns",
    "edit_problem",
    "environment",
    "event_lines",
    "hypothesis_phases",
    "identity_bytes",
    "identity_object",
    "identity_version",
    "item_sample",
    "label_table",
    "layout",
    "lock_warnings",
    "locked_manifest",
    "model_mismatches",
    "new_template",
    "open_events",
    "open_recorded",
    "parse_line",
    "plan_inputs",
    "plan_stimuli",
    "protocol_body",
    "protocol_event",
    "protocol_events",
    "recorded_warnings",
    "reference_table",
    "rotate_images",
    "secret_path",
    "session_notice",
    "sign_missing_checkpoints",
    "stimulus_sources",
    "study_key",
    "study_truth",
    "supplied_reference",
    "supplied_sets",
    "trial_phases",
    "validate_for_lock",
    "variant_truth",
]
ANALYSIS_NAMES = [
    "AnalysisError",
    "AnalyzeResult",
    "DemoResult",
    "ExportResult",
    "PlanError",
    "PlanRun",
    "Report",
    "ScoreResult",
    "StudyFrames",
    "UnblindResult",
    "analyze_study",
    "build_report",
    "export_study",
    "load",
    "plan_study",
    "run_demo",
    "score_study",
    "unblind_study",
    "CHUNK_ELEMENTS",
    "ITEM_COLUMNS",
    "TRIAL_COLUMNS",
    "Dataset",
    "bootstrap_diff",
    "resample_means",
    "run_analyses",
]
HEAVY = ("pandas", "numpy", "statsmodels", "scipy", "matplotlib", "PIL", "anthropic")


def _lazy_table(package: ModuleType) -> tuple[dict[str, str], dict[str, str]]:
    """(the name -> module table, the names the TYPE_CHECKING block imports -> their module)."""
    tree = ast.parse(Path(package.__file__ or "").read_text(encoding="utf-8"))
    table: dict[str, str] = {}
    typed: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "_EXPORTS":
            table = ast.literal_eval(node.value)
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module
                for alias in imp.names:
                    typed[alias.asname or alias.name] = imp.module
    return table, typed


@pytest.mark.parametrize(
    ("package", "names"),
    [(runner, RUNNER_NAMES), (analysis, ANALYSIS_NAMES)],
    ids=["runner", "analysis"],
)
def test_runner_and_analysis_public_names(package: ModuleType, names: list[str]) -> None:
    assert sorted(package.__all__) == sorted(names)
    table, typed = _lazy_table(package)
    assert table == typed  # what type checkers see is what __getattr__ loads, name by name
    assert sorted(table) == sorted(package.__all__)
    submodules = {m.name for m in pkgutil.iter_modules(package.__path__)}
    assert not submodules & set(package.__all__)  # a submodule import would shadow the name
    for name in package.__all__:
        value = getattr(package, name)
        assert value is getattr(importlib.import_module(table[name]), name), name
        if callable(value):
            assert value.__doc__, f"{package.__name__}.{name} has no docstring"
    assert dir(package) == sorted(package.__all__)
    with pytest.raises(AttributeError, match=rf"module '{package.__name__}' has no attribute 'x'"):
        package.x  # noqa: B018


def test_runner_and_analysis_errors_are_study_errors() -> None:
    for package in (runner, analysis):
        for name in package.__all__:
            obj = getattr(package, name)
            if isinstance(obj, type) and issubclass(obj, Exception) and name != "BackendError":
                assert issubclass(obj, runner.StudyError), name
    assert issubclass(runner.StudyError, ledger.LedgerError)


def test_importing_runner_and_analysis_loads_nothing_heavy() -> None:
    code = (
        "import json, sys\n"
        "import runner, analysis\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.partition('.')[0] in "
        f"{HEAVY!r} or m.startswith(('runner.', 'analysis.', 'ledger')))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    # only the core's (itself lazy) face and the PEP 562 helper all three packages share
    assert json.loads(result.stdout) == ["ledger", "ledger._lazy"]
