"""Verifies an exported archive directory (``docs/archive-format.md`` §4), from the docs alone.

Every file is read through :mod:`verify._reader` (the walk, the one reader, the one strict
parse of the events: ``docs/archive-format.md`` §6). The ledger-level checks of
``docs/ledger-format.md`` §8 run on ``ledger/events.jsonl``, ``ledger/checkpoints/``,
``ledger/keys/`` and ``blobs/`` through the same engine as a SQLite ledger file; then the archive
checks (``layout``, ``manifest``, ``export-coverage``, ``protocol``, ``phases``, ``schedule``,
``requests``, ``preflight``, ``outcomes``, ``provenance``, ``blinding``, ``derived``,
``report``) and, when ``verify._science`` is present, ``rescore`` and ``reanalysis`` on the
same parsed envelopes.

One module per check or group of checks:

=================  ======================================================================
``ledger_checks``  the ledger-level checks on ``ledger/`` and ``blobs/``
``view``           :class:`~verify._archive.view.Archive`: what the archive checks share
``layout``         ``layout``: every entry accounted for
``manifest``       ``manifest`` and ``export-coverage``
``protocol``       ``protocol``
``phases``         ``phases``: a study locked in phases changed nothing earlier
``schedule``       ``schedule``
``requests``       ``requests``
``preflight``      ``preflight`` and ``provenance``
``outcomes``       ``outcomes`` and ``blinding``
``derived``        ``derived``
``report``         ``report``: ``analysis/report.html`` and the figures
``flow``           ``flow``: the CONSORT-style trial flow
``checklists``     ``checklists``: the reporting checklists
``osf``            ``registration``: the OSF preregistration locked at lock
=================  ======================================================================
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from verify._archive.checklists import check_checklists
from verify._archive.derived import check_derived
from verify._archive.flow import check_flow
from verify._archive.layout import check_layout
from verify._archive.ledger_checks import ArchiveRun
from verify._archive.manifest import check_export, check_manifest
from verify._archive.osf import check_registration
from verify._archive.outcomes import check_blinding, check_outcomes
from verify._archive.phases import check_phases
from verify._archive.preflight import check_preflight, check_provenance
from verify._archive.protocol import check_protocol
from verify._archive.report import check_report
from verify._archive.requests import check_requests
from verify._archive.schedule import check_schedule
from verify._archive.steps import check_steps
from verify._archive.timestamps import check_timestamps
from verify._archive.view import Archive
from verify._archive.witnesses import check_witnesses
from verify._canonical import canonical_json
from verify._pool import ChildError, forked
from verify._privacy import (
    AnnexError,
    Privacy,
    Withheld,
    annex_problems,
    open_annex,
    privacy_check,
    privacy_of,
    restored_copy,
)
from verify._reader.files import ArchiveFiles
from verify._reader.names import line_where
from verify._report import Check, Report, Status

__all__ = ["verify_archive"]


_ARCHIVE_CHECKS = (
    ("layout", check_layout),
    ("manifest", check_manifest),
    ("export-coverage", check_export),
    ("protocol", check_protocol),
    ("phases", check_phases),
    ("schedule", check_schedule),
    ("requests", check_requests),
    ("steps", check_steps),
    ("preflight", check_preflight),
    ("outcomes", check_outcomes),
    ("provenance", check_provenance),
    ("blinding", check_blinding),
    ("derived", check_derived),
    ("report", check_report),
    ("flow", check_flow),
    ("checklists", check_checklists),
    ("registration", check_registration),
)


def _error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 200 else text[:197] + "..."


def stopped(name: str, exc: BaseException, seq: int | None) -> Check:
    """The FAIL of check ``name`` that stopped on ``exc`` while reading event ``seq``."""
    if seq is None:
        return Check(name, Status.FAIL, f"check stopped by an unexpected error: {_error(exc)}")
    where = line_where(seq)
    return Check(
        name,
        Status.FAIL,
        f"check stopped by an unexpected error while reading {where} (seq {seq}): {_error(exc)}",
        seq,
        where,
    )


def _blobs_limited(check: Check, run: ArchiveRun, privacy: Privacy) -> Check:
    """The ledger's ``blobs`` check of a public archive: LIMITED when blobs are withheld."""
    if check.name != "blobs" or check.status is not Status.PASS or not run.withheld_missing:
        return check
    return Check(
        "blobs",
        Status.LIMITED,
        f"{check.reason}; {run.withheld_missing} referenced blob(s) are withheld under the "
        "locked privacy policy: their addresses (salted commitments) are signed, their content "
        "is not in this archive",
        where="blobs/",
    )


def _science(run: ArchiveRun) -> list[Check]:
    try:
        from verify._plan import plan_check  # type: ignore[import-not-found,unused-ignore]
        from verify._science import science_checks  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:  # fail closed: a required check that cannot run has not passed
        reason = (
            f"re-scoring and re-analysis could not run ({type(exc).__name__}: {exc}); install "
            "the verifier's dependencies (numpy, scipy, threadpoolctl, rfc8785)"
        )
        return [Check("rescore", Status.FAIL, reason), Check("reanalysis", Status.FAIL, reason)]
    checks = science_checks(
        run.files.root,
        envelopes=run.envs,
        files=run.files,
        unkept=run.unkept,
        plan=plan_check,
        fork=run.parallel,
    )
    return list(checks)


def _limited(name: str, withheld: Withheld, privacy: Privacy | None) -> Check:
    """The ``LIMITED`` outcome of check ``name``, which needed the withheld ``withheld.rel``."""
    why = privacy.limits() if privacy is not None else "withheld"
    what = privacy.describe(withheld.rel) if privacy is not None else withheld.rel
    return Check(
        name,
        Status.LIMITED,
        f"not re-derived: it needs {what}, which the public archive withholds ({why}); "
        "what it checks of that data was taken as signed",
        where=withheld.rel,
    )


def _leaf_hex(env: dict[str, Any] | None) -> str | None:
    if env is None:
        return None
    return hashlib.sha256(b"\x00" + canonical_json(env)).hexdigest()


def _with_annex(
    name: str, annex: str | None, identity: str | None, kwargs: dict[str, Any]
) -> Report:
    """Open the annex, check it against the public archive, verify the completed archive."""

    def failed(reason: str) -> Report:
        return Report(path=name, checks=[Check("privacy", Status.FAIL, reason, where=annex)])

    if annex is None or identity is None:
        return failed("--annex FILE and --identity KEY go together (docs/privacy.md)")
    run = ArchiveRun(ArchiveFiles(name), (), (), 1)
    run.path = str(Path(name))
    first = run.run()
    if len(first.checks) == 1 and first.checks[0].name == "file":
        return first
    privacy = privacy_of(run.envs)
    if privacy is None:
        return failed(
            f"{name} is not a public archive (its export.created withholds nothing); "
            "verify it without --annex"
        )
    try:
        opened = open_annex(annex, identity)
    except AnnexError as exc:
        return failed(str(exc))
    seq = len(run.envs) - 1
    problems = privacy.problems or annex_problems(
        opened, privacy, run.envs, _leaf_hex(run.envs[seq] if run.envs else None), seq
    )
    if problems:
        more = f" ({len(problems) - 1} more)" if len(problems) > 1 else ""
        return failed(f"the annex does not complete this archive: {problems[0]}{more}")
    restored = frozenset([*(f"blobs/{a}" for a in opened.blobs), *opened.files])
    try:
        with restored_copy(name, opened) as copy:
            report = _verify(copy, kwargs, restored=restored)
    except (AnnexError, OSError) as exc:
        return failed(f"the annex could not be put back: {exc}")
    report.path = name
    privacy.restored = True
    report.checks.append(privacy_check(privacy))
    return report


def verify_archive(
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
    """Verify an archive directory written by ``ledger export``; never raises for a bad archive.

    ``witnesses`` (cosigner vkeys the auditor trusts), ``quorum`` (default: all of them) and
    ``skew`` (seconds) drive the ``witnesses`` check (``docs/witness.md`` §8); without them it
    uses the archive's ``ledger/witnesses.json`` and at best WARNs. ``tsa_roots`` (PEM
    certificates) checks the RFC 3161 time stamps (``timestamps``, ``docs/witness.md`` §9).

    Runs the ledger checks of ``docs/ledger-format.md`` §8 on ``ledger/`` and ``blobs/`` and
    the archive checks of ``docs/archive-format.md`` §4; ``report.timings`` holds the seconds
    spent per phase. Every file is read through one reader that never follows a link, never
    opens anything but a regular file the walk listed, and caps sizes (§6).
    """
    name = os.fspath(path)
    if isinstance(trusted_keys, str):
        trusted_keys = [trusted_keys]
    if isinstance(checkpoints, (str, os.PathLike)):
        checkpoints = [checkpoints]
    kwargs: dict[str, Any] = {
        "trusted_keys": trusted_keys,
        "checkpoints": checkpoints,
        "jobs": jobs,
        "witnesses": witnesses,
        "quorum": quorum,
        "skew": skew,
        "tsa_roots": tsa_roots,
    }
    if annex is not None or identity is not None:
        try:
            return _with_annex(
                name,
                None if annex is None else os.fspath(annex),
                None if identity is None else os.fspath(identity),
                kwargs,
            )
        except Exception as exc:  # fail closed
            return Report(
                path=name,
                checks=[
                    Check(
                        "privacy",
                        Status.FAIL,
                        f"verification with the annex stopped: {_error(exc)}",
                    )
                ],
            )
    return _verify(name, kwargs)


def _archive_checks(
    run: ArchiveRun, archive: Archive, report: Report, privacy: Privacy | None
) -> None:
    """Run every check of ``_ARCHIVE_CHECKS`` in order, each timed, none stopping the others."""
    for check_name, func in _ARCHIVE_CHECKS:
        t0 = time.perf_counter()
        archive.current = None
        try:
            check = func(archive)
        except Withheld as withheld:  # a public archive: it needs what is withheld
            check = _limited(check_name, withheld, privacy)
        except Exception as exc:  # fail closed, but keep the other checks
            check = stopped(check_name, exc, archive.current)
        report.timings[check_name] = time.perf_counter() - t0
        report.checks.append(run._archive_check(check))


def _archive_part(
    run: ArchiveRun, archive: Archive, privacy: Privacy | None
) -> tuple[list[Check], dict[str, float]]:
    """The archive checks, then ``witnesses`` and ``timestamps``: their checks and timings."""
    part = Report(path=run.path)
    _archive_checks(run, archive, part, privacy)
    t0 = time.perf_counter()
    for check_name, optional in (
        ("witnesses", check_witnesses),
        ("timestamps", check_timestamps),
    ):
        found = _optional_check(check_name, optional, archive, privacy)
        if found is not None:
            part.checks.append(found)
    part.timings["witnesses"] = time.perf_counter() - t0
    return part.checks, part.timings


def _optional_check(
    name: str,
    func: Callable[[Archive], Check | None],
    archive: Archive,
    privacy: Privacy | None,
) -> Check | None:
    """A check that may not apply (None), such as ``witnesses``; fails closed."""
    try:
        return func(archive)
    except Withheld as withheld:
        return _limited(name, withheld, privacy)
    except Exception as exc:
        return stopped(name, exc, archive.current)


def _science_checks(run: ArchiveRun, report: Report, privacy: Privacy | None) -> None:
    """The re-scoring and re-analysis checks; a generic LIMITED one names what it needs."""
    try:
        for check in _science(run):
            generic = check.reason.startswith("not re-derived: it needs")
            if check.status is Status.LIMITED and check.where and generic:  # name it
                check = _limited(check.name, Withheld(check.where), privacy)
            report.checks.append(run._archive_check(check))
    except Withheld as withheld:
        report.checks.append(_limited("rescore", withheld, privacy))
        report.checks.append(_limited("reanalysis", withheld, privacy))
    except Exception as exc:
        report.checks.append(stopped("rescore", exc, None))


def _verify(name: str, kwargs: dict[str, Any], restored: frozenset[str] = frozenset()) -> Report:
    """:func:`verify_archive` of ``name`` (``restored``: paths an annex put back)."""
    trusted_keys, checkpoints, jobs = kwargs["trusted_keys"], kwargs["checkpoints"], kwargs["jobs"]
    witnesses, quorum = kwargs["witnesses"], kwargs["quorum"]
    skew, tsa_roots = kwargs["skew"], kwargs["tsa_roots"]
    try:
        run = ArchiveRun(ArchiveFiles(name), trusted_keys, checkpoints, jobs)
        run.path = str(Path(name))
        run.restored = bool(restored)
        report = run.run()
        if len(report.checks) == 1 and report.checks[0].name == "file":
            return report
        privacy = None if restored else privacy_of(run.envs)
        if privacy is not None:  # a public archive without its annex: docs/privacy.md
            run.files.withheld = privacy.rel_withheld
            report.checks = [_blobs_limited(c, run, privacy) for c in report.checks]
        archive = Archive(run)
        archive.restored = restored
        archive.witness_keys = tuple(witnesses)
        archive.witness_quorum = quorum
        archive.witness_skew = skew
        archive.tsa_roots = tsa_roots
        if run.parallel:  # the archive checks in a forked child, beside the science here
            archive_part = forked(lambda: _archive_part(run, archive, privacy), "the archive")
            science = Report(path=report.path)
            t0 = time.perf_counter()
            _science_checks(run, science, privacy)
            report.timings["science"] = time.perf_counter() - t0
            try:
                checks, timings = archive_part()
            except ChildError as exc:  # fail closed
                checks, timings = [Check("layout", Status.FAIL, f"{exc}")], {}
            report.checks += checks + science.checks
            report.timings.update(timings)
        else:
            checks, timings = _archive_part(run, archive, privacy)
            report.checks += checks
            report.timings.update(timings)
            t0 = time.perf_counter()
            _science_checks(run, report, privacy)
            report.timings["science"] = time.perf_counter() - t0
        if privacy is not None:
            report.checks.append(privacy_check(privacy))
        return report
    except Exception as exc:  # fail closed: a verifier that crashes must not look like a pass
        return Report(
            path=name,
            checks=[
                Check(
                    "file",
                    Status.FAIL,
                    f"{name}: verification stopped by an unexpected error: {_error(exc)}",
                    where=name,
                )
            ],
        )
