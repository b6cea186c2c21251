"""Independent verifier of PROMPT Ledger files, written from ``docs/ledger-format.md`` alone.

It imports nothing from ``ledger``, ``runner`` or ``analysis``: only the standard library,
``cryptography`` (Ed25519), ``rfc8785`` (canonical JSON) and, for a ledger kept on PostgreSQL
(:func:`verify_postgres`), ``psycopg``.

Example::

    from verify import verify_ledger_file, require_valid

    report = verify_ledger_file("study.ledger", trusted_keys=[owner_vkey], checkpoints=["cp.txt"])
    for check in report.checks:
        print(check.name, check.status.value, check.reason)

    report = verify_path("archive-dir")  # an exported archive: adds the checks of the archive
    report = verify_path("postgresql://auditor@db.example.org/lab?schema=study1")  # a live store
    require_valid("study.ledger")  # raises VerificationError naming the first failed check
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verify._archive import verify_archive
    from verify._canonical import canonical_json
    from verify._errors import (
        AmbiguousKeyError,
        CheckpointFormatError,
        InvalidSignatureError,
        KeyFormatError,
        MalformedNoteError,
        NoteError,
        ProofError,
        UnverifiedNoteError,
        VerificationError,
    )
    from verify._ledgerfile import APPLICATION_ID, SCHEMA_VERSION, verify_ledger_file
    from verify._merkle import (
        EMPTY_ROOT,
        CompactTree,
        consistency_proof,
        inclusion_proof,
        leaf_hash,
        merkle_root,
        node_hash,
        verify_consistency,
        verify_inclusion,
    )
    from verify._note import (
        MAX_NOTE_SIGNATURES,
        Checkpoint,
        Note,
        NoteSignature,
        Vkey,
        compute_key_id,
        open_checkpoint,
        open_note,
        parse_checkpoint,
        parse_note,
        parse_vkey,
    )
    from verify._pgledger import verify_postgres
    from verify._receipt import ReceiptReport, check_receipt
    from verify._render import render_report
    from verify._report import ARCHIVE_CHECK_NAMES, CHECK_NAMES, Check, Report, Status

__all__ = [
    "APPLICATION_ID",
    "ARCHIVE_CHECK_NAMES",
    "CHECK_NAMES",
    "EMPTY_ROOT",
    "MAX_NOTE_SIGNATURES",
    "SCHEMA_VERSION",
    "AmbiguousKeyError",
    "Check",
    "Checkpoint",
    "CheckpointFormatError",
    "CompactTree",
    "InvalidSignatureError",
    "KeyFormatError",
    "MalformedNoteError",
    "Note",
    "NoteError",
    "NoteSignature",
    "ProofError",
    "ReceiptReport",
    "Report",
    "Status",
    "UnverifiedNoteError",
    "VerificationError",
    "Vkey",
    "canonical_json",
    "check_receipt",
    "compute_key_id",
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash",
    "merkle_root",
    "node_hash",
    "open_checkpoint",
    "open_note",
    "parse_checkpoint",
    "parse_note",
    "parse_vkey",
    "render_report",
    "require_valid",
    "verify_archive",
    "verify_consistency",
    "verify_inclusion",
    "verify_ledger_file",
    "verify_path",
    "verify_postgres",
]

# Names are imported on first use (PEP 562): `import verify` (and `ledger --help`, which lists
# the verify command) does not load the checks until a verification runs.
_LAZY: dict[str, str] = {
    "APPLICATION_ID": "verify._ledgerfile",
    "ARCHIVE_CHECK_NAMES": "verify._report",
    "CHECK_NAMES": "verify._report",
    "EMPTY_ROOT": "verify._merkle",
    "MAX_NOTE_SIGNATURES": "verify._note",
    "SCHEMA_VERSION": "verify._ledgerfile",
    "AmbiguousKeyError": "verify._errors",
    "Check": "verify._report",
    "Checkpoint": "verify._note",
    "CheckpointFormatError": "verify._errors",
    "CompactTree": "verify._merkle",
    "InvalidSignatureError": "verify._errors",
    "KeyFormatError": "verify._errors",
    "MalformedNoteError": "verify._errors",
    "Note": "verify._note",
    "NoteError": "verify._errors",
    "NoteSignature": "verify._note",
    "ProofError": "verify._errors",
    "ReceiptReport": "verify._receipt",
    "Report": "verify._report",
    "Status": "verify._report",
    "UnverifiedNoteError": "verify._errors",
    "VerificationError": "verify._errors",
    "Vkey": "verify._note",
    "canonical_json": "verify._canonical",
    "check_receipt": "verify._receipt",
    "compute_key_id": "verify._note",
    "consistency_proof": "verify._merkle",
    "inclusion_proof": "verify._merkle",
    "leaf_hash": "verify._merkle",
    "merkle_root": "verify._merkle",
    "node_hash": "verify._merkle",
    "open_checkpoint": "verify._note",
    "open_note": "verify._note",
    "parse_checkpoint": "verify._note",
    "parse_note": "verify._note",
    "parse_vkey": "verify._note",
    "render_report": "verify._render",
    "verify_archive": "verify._archive",
    "verify_consistency": "verify._merkle",
    "verify_inclusion": "verify._merkle",
    "verify_ledger_file": "verify._ledgerfile",
    "verify_postgres": "verify._pgledger",
}


def verify_path(
    path: str | os.PathLike[str],
    trusted_keys: Sequence[str] = (),
    checkpoints: Sequence[str | os.PathLike[str]] = (),
    jobs: int = 1,
    witnesses: Sequence[str] = (),
    quorum: int | None = None,
    skew: float = 300.0,
    tsa_roots: bytes | None = None,
    annex: str | os.PathLike[str] | None = None,
    identity: str | os.PathLike[str] | None = None,
) -> Report:
    """Verify ``path``: an archive, a study's live ledger, a ledger file or a PostgreSQL store.

    ``path`` is one of: a ``postgresql://...?schema=NAME`` URL (:func:`verify_postgres`); a
    directory holding ``ledger/events.jsonl`` (an archive, :func:`verify_archive`); a study
    folder, whose ``ledger.store`` names its PostgreSQL store or, without one, whose
    ``ledger.db`` is its ledger file; any other directory (verified as an archive, which says
    what is missing); a file (:func:`verify_ledger_file`). None raises for a bad ledger, store
    or archive. ``witnesses``, ``quorum``, ``skew`` and ``tsa_roots`` apply to archives
    (``docs/witness.md`` §8-9); witnesses given for a live ledger make a ``witnesses`` FAIL
    saying to export it first. ``annex`` and ``identity`` (an auditor's secret key file)
    complete a public archive (``docs/privacy.md``): without them its report is ``partial``.
    ``jobs`` is how many processes to use (0: one per CPU this process may run on; 1: this
    one alone; the report is the same: ``docs/archive-format.md`` §4.1, *Processes*).
    """
    from verify._pgledger import STORE_FILE, is_store_url

    spec = os.fspath(path)
    study = os.path.isdir(spec) and not os.path.isfile(os.path.join(spec, "ledger", "events.jsonl"))
    if is_store_url(spec) or (study and os.path.lexists(os.path.join(spec, STORE_FILE))):
        report = _verify_store(spec, trusted_keys, checkpoints, jobs)
    elif study and os.path.isfile(os.path.join(spec, "ledger.db")):
        from verify._ledgerfile import verify_ledger_file

        report = verify_ledger_file(
            os.path.join(spec, "ledger.db"),
            trusted_keys=trusted_keys,
            checkpoints=checkpoints,
            jobs=jobs,
        )
    elif os.path.isdir(spec):
        from verify._archive import verify_archive

        return verify_archive(
            path,
            trusted_keys=trusted_keys,
            checkpoints=checkpoints,
            jobs=jobs,
            witnesses=witnesses,
            quorum=quorum,
            skew=skew,
            tsa_roots=tsa_roots,
            annex=annex,
            identity=identity,
        )
    else:
        from verify._ledgerfile import verify_ledger_file

        report = verify_ledger_file(
            path, trusted_keys=trusted_keys, checkpoints=checkpoints, jobs=jobs
        )
    if annex is not None or identity is not None:
        from verify._report import Check, Status

        report.checks.append(
            Check(
                "privacy",
                Status.FAIL,
                "--annex completes a public archive (docs/privacy.md): "
                f"{spec} is not an archive directory",
            )
        )
    if witnesses:
        from verify._report import Check, Status

        report.checks.append(
            Check(
                "witnesses",
                Status.FAIL,
                "witness cosignatures are verified on an archive ("
                "docs/witness.md): export the study ('ledger export') and verify the archive",
            )
        )
    return report


def _verify_store(
    spec: str,
    trusted_keys: Sequence[str],
    checkpoints: Sequence[str | os.PathLike[str]],
    jobs: int,
) -> Report:
    """Verify the PostgreSQL store named by the URL ``spec`` or by ``spec/ledger.store``."""
    from verify._pgledger import STORE_FILE, StoreURLError, read_store_file, verify_postgres
    from verify._report import Check, Report, Status

    url = spec
    if os.path.isdir(spec):
        try:
            url = read_store_file(spec)
        except StoreURLError as exc:
            where = os.path.join(spec, STORE_FILE)
            return Report(path=where, checks=[Check("file", Status.FAIL, str(exc), where=where)])
    return verify_postgres(url, trusted_keys=trusted_keys, checkpoints=checkpoints, jobs=jobs)


def require_valid(
    path: str | os.PathLike[str],
    *,
    trusted_keys: Sequence[str] = (),
    checkpoints: Sequence[str | os.PathLike[str]] = (),
    jobs: int = 1,
) -> Report:
    """Verify a ledger file or an archive (:func:`verify_path`); return the report unless it FAILed.

    Raises :class:`VerificationError` for the first failed check (in report order); the error's
    ``check`` and ``report`` attributes carry the details, and its message names the check, the seq
    or place at fault and the reason.  WARN checks do not raise.
    """
    report = verify_path(path, trusted_keys=trusted_keys, checkpoints=checkpoints, jobs=jobs)
    failure = report.first_failure
    if failure is not None:
        from verify._errors import VerificationError

        raise VerificationError.from_check(failure, report)
    return report


if not TYPE_CHECKING:  # type checkers read the imports above instead

    def __getattr__(name: str) -> Any:
        """Import a public name from its module on first use (PEP 562)."""
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'verify' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The public names, loaded or not."""
    return sorted(__all__)
