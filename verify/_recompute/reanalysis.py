"""The ``reanalysis`` check: the dataset and every result recomputed and compared.

Part of the science checks (:mod:`verify._science`); imports nothing from ``ledger``,
``runner`` or ``analysis``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from verify import _copies, _ddx, _sealed
from verify import _statistics as registry
from verify._envelope import is_hex64
from verify._pool import ChildError, forked
from verify._privacy import Withheld
from verify._reader.files import MAX_PARSED_BYTES, ArchiveFileError
from verify._recompute.agreement import _judge_agreement
from verify._recompute.archive import (
    _Archive,
    _Event,
    _file_sha,
    _plan,
    _Problem,
    _protocol,
)
from verify._recompute.compare import _first_difference, _fmt
from verify._recompute.dataset import (
    ITEM_COLUMNS,
    MODEL_ITEM_COLUMNS,
    MODEL_TRIAL_COLUMNS,
    TRIAL_COLUMNS,
    VARIANT_ITEM_COLUMNS,
    VARIANT_TRIAL_COLUMNS,
    ItemTable,
    _csv_chunks,
    _Dataset,
    _dataset,
)
from verify._recompute.descriptive import _covariates_result
from verify._recompute.posthoc import POSTHOC_KIND, _posthoc_problem
from verify._recompute.recompute import _phases, _recompute
from verify._recompute.results import (
    ABS_TOL,
    MAX_BOOTSTRAP_ITERATIONS,
    MAX_BOOTSTRAP_WORK,
    REL_TOL,
    _Result,
)
from verify._recompute.reviews import _human_tables, _review_files
from verify._report import Check, Status


def _fail(reason: str, seq: int | None = None, where: str | None = None) -> Check:
    return Check("reanalysis", Status.FAIL, reason, seq, where)


def _within_bounds(archive: _Archive, plan: dict[str, Any], protocol: _Event | None) -> None:
    """The plan's bootstrap work is within what this verifier recomputes, else a _Problem."""
    design = plan.get("design")
    iterations = design.get("bootstrap_iterations") if isinstance(design, dict) else None
    scored = len(archive.of("trial.scored"))
    if isinstance(iterations, int) and (
        iterations > MAX_BOOTSTRAP_ITERATIONS or iterations * scored > MAX_BOOTSTRAP_WORK
    ):
        seq = protocol.seq if protocol else None
        raise _Problem(
            f"protocol.locked (seq {seq}) asks for {iterations:,} bootstrap iterations over "
            f"{scored:,} scored trials, more than this verifier recomputes "
            f"({MAX_BOOTSTRAP_ITERATIONS:,} iterations, {MAX_BOOTSTRAP_WORK:,} iterations x "
            "trials)",
            seq,
        )


_Table = tuple[Sequence[Any] | ItemTable, tuple[str, ...]]
"""A rebuilt table: its rows and its columns."""


def _csvs(ds: _Dataset) -> dict[str, _Table]:
    """analysis.md §2: ``trials.csv`` and ``items.csv`` of the rebuilt dataset (rows, columns)."""
    trial_extra = (
        *(f"factor.{f}" for f in ds.factors),
        *(_ddx.METRICS if ds.ddx else ()),
        *(f"covariate.{n}" for n in ds.covariates),
    )
    if ds.variants:  # analysis.md §2: factor.<NAME>, a ddx study's metrics, covariate.<NAME>
        trials_csv: _Table = (ds.trials, (*VARIANT_TRIAL_COLUMNS, *trial_extra))
        item_columns: tuple[str, ...] = VARIANT_ITEM_COLUMNS
    else:
        trials_csv = (
            ds.trials,
            (*(MODEL_TRIAL_COLUMNS if ds.models else TRIAL_COLUMNS), *trial_extra),
        )
        item_columns = MODEL_ITEM_COLUMNS if ds.models else ITEM_COLUMNS
    if ds.cloze:  # analysis.md §2: each letter's log-probability and the margin
        item_columns = (*item_columns, "logprobs", "margin")
    return {"trials_csv": trials_csv, "items_csv": (ds.items, item_columns)}


def _salt(archive: _Archive, event: _Event, name: str) -> bytes | None:
    """The salt of ``event``'s stored blob ``name`` if sealed, read from its header only.

    ``None`` for a plain or unreadable blob (docs/ledger-format.md §6.1).
    """
    ref = event.blobs.get(name)
    if not isinstance(ref, str) or not is_hex64(ref):
        return None
    try:
        with archive.files.open(f"blobs/{ref}", MAX_PARSED_BYTES) as fh:
            head = fh.read(len(_sealed.MAGIC) + _sealed.SALT_BYTES)
    except (ArchiveFileError, OSError):
        return None
    return _sealed.salt_of(head)


def _table_digests(table: _Table, salt: bytes | None) -> tuple[str, str]:
    """(SHA-256 of the table's CSV bytes, its address stored sealed with ``salt`` or plain)."""
    plain = hashlib.sha256()
    sealed = hashlib.sha256(_sealed.MAGIC + salt) if salt is not None else None
    for chunk in _csv_chunks(*table):
        plain.update(chunk)
        if sealed is not None:
            sealed.update(chunk)
    return plain.hexdigest(), (sealed or plain).hexdigest()


def _blob_addresses(
    archive: _Archive, first: _Event, csvs: dict[str, _Table]
) -> tuple[dict[str, str], Check | None]:
    """The rebuilt tables' addresses, and a FAIL if the blobs or analysis/ files differ.

    Each table's CSV is hashed piece by piece, never held whole (issue 41).
    """
    addresses: dict[str, str] = {}
    for name, table in csvs.items():
        sha, digest = _table_digests(table, _salt(archive, first, name))
        addresses[name] = digest
        ref = first.blobs.get(name)
        if ref != digest or _file_sha(archive, f"blobs/{ref}") != digest:
            return addresses, _fail(
                f"analysis.result seq {first.seq}: the {name} blob differs from the dataset "
                "rebuilt from the trial.scored events.",
                first.seq,
                f"blobs/{ref}",
            )
        where = f"analysis/{name.replace('_', '.')}"
        if where in archive.files.files and _file_sha(archive, where) != sha:
            return addresses, _fail(f"{where} differs from the rebuilt dataset.", None, where)
    return addresses, None


def _inputs_problem(
    archive: _Archive, results: list[_Event], inputs: dict[str, Any]
) -> Check | None:
    for event in results:
        archive.at(event)
        if event.body.get("inputs") != inputs:
            diff = _first_difference(event.body.get("inputs"), inputs, "inputs", 0.0)
            return _fail(f"{event.body.get('id')} (seq {event.seq}) {diff}.", event.seq)
    return None


@dataclass
class _Copies:
    """analysis.md §3 identical responses: found, or withheld by a public archive."""

    found: dict[str, Any] | None = None
    withheld: str | None = None


def _copies_result(
    archive: _Archive, ds: _Dataset, results: list[_Event], recomputed: list[_Result]
) -> _Copies:
    """``descriptive.identical_responses``, appended to ``recomputed``.

    Taken as signed when the public archive withholds the responses (privacy.md §6).
    """
    responded = {e.seq: e for e in archive.of("trial.responded")}
    try:
        found = _copies.copies(
            ds.trials,
            lambda seq: (
                archive.event_blob(responded[seq], "response"),
                str(responded[seq].body.get("format", "")),
            ),
            ds.models,
        )
    except Withheld as withheld:  # every other result is still recomputed from the scores
        signed = [e for e in results if e.body.get("id") == "descriptive.identical_responses"]
        if signed:  # taken as signed: its responses cannot be compared here
            recomputed.append(
                _Result(
                    "descriptive.identical_responses",
                    values=dict(signed[0].body.get("values") or {}),
                )
            )
        return _Copies(withheld=withheld.rel)
    if found is not None:  # analysis.md §3: identical responses (pseudo-replication)
        recomputed.append(_Result("descriptive.identical_responses", values=found))
    return _Copies(found=found)


def _all_results(
    archive: _Archive, plan: dict[str, Any], ds: _Dataset, results: list[_Event]
) -> tuple[list[_Result], _Copies]:
    """Every result the plan gives, recomputed, in the writer's order."""
    recorded_values = {
        str(e.body.get("id")): e.body.get("values") for e in results if isinstance(e.body, dict)
    }
    recomputed = _recompute(ds, plan, _phases(archive), recorded_values)
    parser = str((plan.get("response") or {}).get("parser", ""))
    if parser.startswith("judge:"):  # analysis.md §8
        recomputed.append(_judge_agreement(archive, plan, parser.split(":", 1)[1]))
    recomputed += _human_tables(archive, plan, recomputed)  # analysis.md §10
    if ds.covariates:  # analysis.md §11
        recomputed.append(_covariates_result(ds, plan))
    return recomputed, _copies_result(archive, ds, results, recomputed)


def _result_problem(body: dict[str, Any], r: _Result, rel: float) -> str | None:
    """What differs between one recorded result and its recomputation, or None."""
    reml_problem = r.values.get("_reml_problem")
    if isinstance(reml_problem, str):
        return f"values: {reml_problem} (the verifier's own REML check, numpy only)"
    if body.get("status") != r.status:
        return f"status: recorded {_fmt(body.get('status'))}, recomputed {_fmt(r.status)}"
    if body.get("hypothesis") != r.hypothesis:
        return f"hypothesis: recorded {_fmt(body.get('hypothesis'))}"
    if body.get("verdict") != r.verdict:
        return f"verdict: recorded {_fmt(body.get('verdict'))}, recomputed {_fmt(r.verdict)}"
    problem = _first_difference(body.get("values"), r.values, "values", rel)
    if problem is not None:
        return problem
    if r.decided_by is None or body.get("decided_by") is None:
        if r.decided_by != body.get("decided_by"):
            return f"decided_by: recorded {_fmt(body.get('decided_by'))}"
        return None
    return _first_difference(body.get("decided_by"), r.decided_by, "decided_by", rel)


def _compared(
    archive: _Archive, plan: dict[str, Any], results: list[_Event], recomputed: list[_Result]
) -> Check | None:
    """The ids in order, then each result against its recomputation; a FAIL at the first."""
    recorded_ids = [e.body.get("id") for e in results]
    new_ids = [r.id for r in recomputed]
    if recorded_ids != new_ids:
        return _fail(
            f"the analysis.result ids are {recorded_ids}; the plan gives {new_ids}.",
            results[0].seq,
        )
    test_of = {
        str(h.get("id")): h.get("test") for h in plan.get("hypotheses") or [] if isinstance(h, dict)
    }
    for event, r in zip(results, recomputed, strict=True):
        body = archive.at(event).body
        # a kind fitted iteratively is compared at its own tolerance (mcq-statistics.md §11)
        rel = REL_TOL
        if r.hypothesis:
            rel = registry.rel_tol(test_of.get(r.hypothesis.split("@", 1)[0]))
        problem = _result_problem(body, r, rel)
        if problem:
            return _fail(f"{r.id} {problem}.", event.seq, r.id)
    return None


def _results_json_problem(archive: _Archive, results: list[_Event]) -> Check | None:
    """``analysis/results.json`` is the events' bodies with their seq."""
    archive.current = None
    try:
        listed = json.loads(archive.file("analysis/results.json"))
    except _Problem as exc:
        return _fail(f"{exc.reason}.", None, "analysis/results.json")
    except (ValueError, RecursionError) as exc:
        return _fail(f"cannot read analysis/results.json: {exc}.", None, "analysis/results.json")
    expected = [e.body | {"seq": e.seq} for e in results]
    if listed != expected:
        return _fail(
            "analysis/results.json is not the analysis.result bodies with their seq.",
            None,
            "analysis/results.json",
        )
    return None


def _posthoc_check(
    archive: _Archive,
    ds: _Dataset,
    plan: dict[str, Any],
    inputs: dict[str, Any],
    results: list[_Event],
) -> Check | None:
    """Each ``analysis.posthoc`` recomputed (analysis.md §6); a FAIL at the first that differs."""
    for event in archive.of(POSTHOC_KIND):
        failed = _posthoc_problem(archive, event, ds, plan, inputs, results[-1].seq)
        if failed is not None:
            archive.current = None
            return _fail(
                f"{event.body.get('id')} (seq {event.seq}, post hoc) {failed}.",
                event.seq,
                str(event.body.get("id")),
            )
    return None


def _passed(archive: _Archive, results: list[_Event], copies: _Copies) -> Check:
    """PASS, or LIMITED without the responses, or WARN when responses were copied."""
    posthoc = archive.of(POSTHOC_KIND)
    extra = (
        (
            f", and {len(posthoc)} post-hoc analysis(es) declared after them (labelled post "
            "hoc, no verdict)"
        )
        if posthoc
        else ""
    )
    passed = (
        f"The dataset and all {len(results)} analysis results{extra} were recomputed and match "
        f"(relative tolerance {REL_TOL:g}, p-values relative only, absolute {ABS_TOL:g}; every "
        "recorded mixed model is a maximum of the verifier's own REML likelihood)."
    )
    if copies.withheld is not None:
        return Check(
            "reanalysis",
            Status.LIMITED,
            f"{passed[:-1]}, except the identical "
            "responses (descriptive.identical_responses: taken as signed, or absent as "
            f"signed): not re-derived, it needs {copies.withheld}, which the public "
            "archive withholds.",
            None,
            copies.withheld,
        )
    if copies.found is not None:  # analysis.md §3: numbers right, but copies counted as new
        said = _copies.summary(copies.found)
        return Check(
            "reanalysis",
            Status.WARN,
            f"{passed[:-1]}; but {said}.",
            None,
            "descriptive.identical_responses",
        )
    return Check("reanalysis", Status.PASS, passed)


def _reanalysis(archive: _Archive) -> tuple[Check, list[str]]:
    """The check and the list of result ids that could only be WARNed."""
    plan = _plan(archive)
    protocol = _protocol(archive)
    results = archive.of("analysis.result")
    if not results:
        raise _Problem("the ledger has no analysis.result event")
    _within_bounds(archive, plan, protocol)
    ds = _dataset(archive, plan)
    csvs = _csvs(ds)
    first = archive.at(results[0])
    if archive.fork:
        return _forked_rest(archive, plan, protocol, ds, csvs, results)
    addresses, failed = _blob_addresses(archive, first, csvs)
    if failed is not None:
        return failed, []
    inputs = _inputs(ds, addresses, protocol)
    failed = _inputs_problem(archive, results, inputs)
    if failed is not None:
        return failed, []
    recomputed, copies = _all_results(archive, plan, ds, results)
    return _finish(archive, plan, ds, inputs, results, recomputed, copies)


def _forked_rest(
    archive: _Archive,
    plan: dict[str, Any],
    protocol: _Event | None,
    ds: Any,
    csvs: dict[str, _Table],
    results: list[_Event],
) -> tuple[Check, list[str]]:
    """The rest of :func:`_reanalysis` with the tables hashed in a forked child (issue 41).

    The child hashes the rebuilt ``trials.csv`` and ``items.csv`` while this process
    recomputes every result; the outcome is then decided in the serial order: a table's
    FAIL, then the inputs', then whatever stopped the recomputation (raised again with the
    event it was reading), then the comparisons. A child that raised or died is replaced by
    the same hashing here, so its exception is the serial one.
    """
    first = results[0]
    addressed = forked(lambda: _blob_addresses(archive, first, csvs), "the rebuilt tables")
    archive.current = results[-1]  # where the serial path's _inputs_problem leaves it
    stopped: BaseException | None = None
    stopped_at: _Event | None = None
    try:
        recomputed, copies = _all_results(archive, plan, ds, results)
    except (Exception, Withheld) as exc:  # decided below, after the tables, as serially
        stopped, stopped_at = exc, archive.current
    try:
        addresses, failed = addressed()
    except ChildError:
        archive.current = first
        addresses, failed = _blob_addresses(archive, first, csvs)
    if failed is not None:
        return failed, []
    inputs = _inputs(ds, addresses, protocol)
    failed = _inputs_problem(archive, results, inputs)
    if failed is not None:
        return failed, []
    if stopped is not None:
        archive.current = stopped_at
        raise stopped
    return _finish(archive, plan, ds, inputs, results, recomputed, copies)


def _inputs(ds: Any, addresses: dict[str, str], protocol: _Event | None) -> dict[str, Any]:
    """The ``inputs`` every analysis.result must record (docs/analysis.md §3)."""
    return {
        "scores_sha256": ds.scores_sha256,
        "trials_csv_sha256": addresses["trials_csv"],
        "items_csv_sha256": addresses["items_csv"],
        "protocol_seq": protocol.seq if protocol else None,
    }


def _finish(
    archive: _Archive,
    plan: dict[str, Any],
    ds: Any,
    inputs: dict[str, Any],
    results: list[_Event],
    recomputed: Any,
    copies: Any,
) -> tuple[Check, list[str]]:
    """The comparisons after the recomputation: the check and the ids only WARNed."""
    failed = (
        _compared(archive, plan, results, recomputed)
        or _results_json_problem(archive, results)
        or _review_files(archive, plan, results)
        or _posthoc_check(archive, ds, plan, inputs, results)
    )
    archive.current = None
    if failed is not None:
        return failed, []
    return _passed(archive, results, copies), []
