"""Science checks of an exported archive: re-scoring every response and re-running the analysis.

Written from ``docs/scoring.md``, ``docs/statistics.md``, ``docs/analysis.md``, ``docs/trials.md``
and ``docs/archive-format.md``; it imports nothing from ``ledger``, ``runner`` or ``analysis``.

* ``rescore``: every response is re-extracted, re-parsed with the locked parser and re-scored
  against the archived truth table; each ``trial.scored`` must match (status, counts, item hash,
  item blob), every ``trial.responded`` must have exactly one ``trial.scored``, and the seal's
  digest must be the digest over all scores.
* ``reanalysis``: the dataset is rebuilt (``trials.csv`` / ``items.csv`` bytes and ``inputs``),
  every result of ``docs/analysis.md`` §3 is recomputed with :mod:`verify._restats` and compared
  number by number (relative tolerance :data:`REL_TOL`, absolute :data:`ABS_TOL`, p-values
  relative only; mixed models are evaluated at the recorded variance components once
  :mod:`verify._reml` has shown them to be a REML maximum), with every status, verdict and
  ``decided_by``; and
  ``analysis/results.json`` must equal the events' bodies plus their seq.

The stages live in :mod:`verify._recompute` (one module each, mirroring the writer's: archive,
rescore, dataset, model, descriptive, hypotheses, exploratory, agreement, sensitivity, reviews,
recompute, reanalysis, posthoc); the statistic kinds in :mod:`verify._statistics`. This module
runs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verify._blas import one_blas_thread
from verify._pool import ChildError, forked
from verify._privacy import Withheld
from verify._reader.files import ArchiveFiles
from verify._reader.names import line_where
from verify._recompute.archive import _Archive, _load, _Problem
from verify._recompute.reanalysis import _reanalysis
from verify._recompute.rescore import _rescore
from verify._recompute.results import (
    ABS_TOL,
    LMM_REL_TOL,
    MAX_BOOTSTRAP_ITERATIONS,
    MAX_BOOTSTRAP_WORK,
    REL_TOL,
)
from verify._reml import remembered_maxima
from verify._report import Check, Status

__all__ = [
    "ABS_TOL",
    "LMM_REL_TOL",
    "MAX_BOOTSTRAP_ITERATIONS",
    "MAX_BOOTSTRAP_WORK",
    "REL_TOL",
    "science_checks",
]


def _run(name: str, archive: _Archive | None, error: _Problem | None, fn: Any) -> Check:
    if error is not None or archive is None:
        assert error is not None
        return Check(name, Status.FAIL, error.reason, error.seq, error.where)
    archive.current = None
    try:
        result = fn(archive)
    except _Problem as exc:
        return Check(name, Status.FAIL, exc.reason.rstrip(".") + ".", exc.seq, exc.where)
    except Withheld as withheld:  # a public archive (docs/privacy.md): each check on its own
        return Check(
            name,
            Status.LIMITED,
            f"not re-derived: it needs {withheld.rel}, which the public archive withholds",
            where=withheld.rel,
        )
    except Exception as exc:  # malformed input must end as a FAIL naming its place
        text = f"{type(exc).__name__}: {exc}"
        text = text if len(text) <= 200 else text[:197] + "..."
        event = archive.current
        if event is None:
            return Check(name, Status.FAIL, f"{name} stopped by an unexpected error: {text}.")
        where = line_where(event.seq)
        return Check(
            name,
            Status.FAIL,
            f"{name} stopped by an unexpected error while reading {where} (seq {event.seq}, "
            f"{event.kind}): {text}.",
            event.seq,
            where,
        )
    check: Check = result[0] if isinstance(result, tuple) else result
    return check


def science_checks(
    archive: str | Path,
    *,
    envelopes: Sequence[dict[str, Any] | None] | None = None,
    files: ArchiveFiles | None = None,
    unkept: int | None = None,
    plan: Any = None,
    fork: bool = False,
) -> list[Check]:
    """Run the ``rescore`` and ``reanalysis`` checks on an exported archive directory.

    ``plan`` (:func:`verify._plan.plan_check`, handed in by the caller: that module builds on
    this one) runs the ``plan`` check when the archive locked ``plan/plan.json``.

    ``envelopes`` (one per line of ``ledger/events.jsonl``, ``None`` for a line the strict
    parse refused or whose envelope the ledger checks did not keep: ``unkept`` is the first
    of those) and ``files`` (the archive's walk and reader) are those the other checks used,
    shared, never copied; without them the archive is walked and its events parsed here, the
    same way.

    The checks run on one BLAS thread (:func:`verify._blas.one_blas_thread`) and remember
    each REML maximum they find (:func:`verify._reml.remembered_maxima`) until they return.
    With ``fork`` (the verifier has a second CPU) ``rescore`` runs in a forked child process
    (:func:`verify._pool.forked`) beside ``reanalysis`` here, which hashes its rebuilt tables
    in another (:func:`verify._recompute.reanalysis._forked_rest`): they read the same loaded
    archive and share nothing they write, so the checks are the same either way.
    """
    loaded: _Archive | None = None
    error: _Problem | None = None
    try:
        loaded = _load(Path(archive), envelopes, files, unkept)
    except _Problem as exc:
        error = exc
    if loaded is not None:
        loaded.fork = fork
    with one_blas_thread(), remembered_maxima():
        if fork:
            rescored = forked(lambda: _run("rescore", loaded, error, _rescore), "rescore")
            reanalysed = _run("reanalysis", loaded, error, _reanalysis)
            try:
                first = rescored()
            except ChildError as exc:  # fail closed
                first = Check("rescore", Status.FAIL, f"rescore could not run: {exc}.")
            checks = [first, reanalysed]
        else:
            checks = [
                _run("rescore", loaded, error, _rescore),
                _run("reanalysis", loaded, error, _reanalysis),
            ]
        if (
            plan is not None
            and loaded is not None
            and any(e.body.get("path") == "plan/plan.json" for e in loaded.of("artifact.locked"))
        ):  # docs/planning.md §7
            checks.append(_run("plan", loaded, None, plan))
    return checks
