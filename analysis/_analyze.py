"""``ledger analyze``: the locked analysis plan and decision rules, run on the scored data.

Everything here is a pure function of the *dataset* (:class:`Dataset`, built from the
``trial.scored`` events and their item blobs, with arms from ``blinding.revealed``) and of the
*plan* (the ``protocol.locked`` body: hypotheses, analysis table, bootstrap seed and
iterations). ``docs/analysis.md`` lists every result, its inputs and its decision rule, so an
auditor can recompute them; the verifier does (``verify/``).

Each result is one ``analysis.result`` event: ``{"id", "title", "label", "hypothesis", "test",
"status", "values", "verdict", "decided_by", "error", "inputs"}``. ``label`` is
``"pre-registered"`` (a hypothesis's own test and the locked model), ``"descriptive"`` or
``"exploratory"`` (not pre-registered; said so everywhere). A test that cannot run on the data
(no scored trials, an arm without parseable responses, a singular model) gives ``status:
"failed"`` with the reason and verdict ``"not computed"``; the other results are still computed.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import rfc8785
from scipy import stats as sps

from analysis import _stats as stats
from analysis import statistics
from analysis._plan_facts import TUMBLING_E as TUMBLING_E
from analysis._plan_facts import labels as labels
from analysis._plan_facts import trial_models as trial_models
from analysis._result_text import NOT_APPLICABLE as NOT_APPLICABLE
from analysis._result_text import describe_decision as describe_decision
from analysis._result_text import verdict_caution as verdict_caution
from analysis._rows import Column, columns_frame, plain, split_trial
from analysis._table_csv import frame_csv
from analysis.statistics.lmm import MODEL_CAUTION
from ledger import EventSpec, Ledger, SealPolicy, SigningKey
from runner import (
    DDX_METRICS,
    StudyError,
    check_integrity,
    hypothesis_phases,
    ledger_path,
    model_mismatches,
    protocol_event,
    protocol_events,
    recorded_warnings,
    stimulus_sources,
    trial_phases,
)

ORIENTATIONS = ("UP", "RIGHT", "DOWN", "LEFT")
YES_NO_MAYBE = ("yes", "no", "maybe")
CONTROL_TRUTH = "not-a-tumbling-e-chart"
TRIAL_COLUMNS = (
    "trial",
    "arm",
    "stimulus",
    "rep",
    "response_seq",
    "status",
    "n_items",
    "n_answered",
    "n_correct",
    "accuracy",
    "control",
    "excluded",
)
ITEM_COLUMNS = ("trial", "arm", "stimulus", "rep", "row", "position", "truth", "answer", "correct")
MODEL_TRIAL_COLUMNS = (
    "trial",
    "arm",
    "model",
    "stimulus",
    "rep",
    "response_seq",
    "status",
    "n_items",
    "n_answered",
    "n_correct",
    "accuracy",
    "control",
    "excluded",
)
"""``trials.csv`` of a study with ``[models]`` (trial ids ``arm|model|item|rep``)."""
MODEL_ITEM_COLUMNS = (
    "trial",
    "arm",
    "model",
    "stimulus",
    "rep",
    "row",
    "position",
    "truth",
    "answer",
    "correct",
)
"""``items.csv`` of a study with ``[models]``."""
VARIANT_TRIAL_COLUMNS = (
    "trial",
    "arm",
    "model",
    "stimulus",
    "variant",
    "rep",
    "response_seq",
    "status",
    "n_items",
    "n_answered",
    "n_correct",
    "accuracy",
    "control",
    "excluded",
)
"""``trials.csv`` of a study with variants (``docs/variants.md`` section 5)."""
VARIANT_ITEM_COLUMNS = (
    "trial",
    "arm",
    "model",
    "stimulus",
    "variant",
    "order",
    "rep",
    "row",
    "position",
    "truth",
    "answer",
    "correct",
    "truth_original",
    "answer_original",
)
"""``items.csv`` of a study with variants: the order and the answers mapped back."""
CODED_ITEM_COLUMNS = (
    "arm",
    "model",
    "stimulus",
    "variant",
    "order",
    "truth",
    "answer",
    "truth_original",
    "answer_original",
)
"""Item columns of a few distinct strings, held as ``category`` (codes, issue 41); the trial
id stays ``str`` (a key that merges with the trial table)."""
_TRIAL_LEVEL_ITEM_COLUMNS = ("trial", "arm", "model", "stimulus", "variant", "rep")
"""Item columns that hold their trial's value (the trial table's column of that name)."""
CLOZE_ITEM_COLUMNS = ("logprobs", "margin")
"""Appended to ``items.csv`` for the ``cloze`` parser: each letter's log-probability (the
RFC 8785 JSON object of the scores) and the margin (``docs/scoring.md`` §5.5)."""


@dataclass(frozen=True)
class Dataset:
    """The scored data of a study, unblinded: one row per scored trial and per item."""

    trials: pd.DataFrame
    items: pd.DataFrame
    """One row per scored item; the label columns :data:`CODED_ITEM_COLUMNS` are ``category``
    (:func:`analysis._rows.plain` gives them as ``str``). :data:`CLOZE_ITEM_COLUMNS` are there
    for the ``cloze`` parser only (no other item has them: issue 41)."""
    arms: tuple[str, ...]
    given_up: tuple[str, ...]
    scores_sha256: str
    sources: dict[str, str] = field(default_factory=dict)
    """Each stimulus's source image (``random_intercept = "source"``), else empty."""
    models: tuple[str, ...] = ()
    """The models of a ``[models]`` study in declaration order (``model_order``); empty for a
    ``[model]`` study. The frames' ``model`` column holds each row's model (``""`` without)."""
    variants: bool = False
    """Whether the study declares variants (``docs/variants.md``): the frames' ``variant``
    column then names each row's variant (``""`` without)."""
    cloze: bool = False
    """Whether the parser is ``cloze``: ``items.csv`` then ends in :data:`CLOZE_ITEM_COLUMNS`."""
    ddx: bool = False
    """Whether the parser is ``ddx``: ``trials.csv`` then ends in :data:`DDX_METRICS`."""
    covariates: tuple[str, ...] = ()
    """Declared factor labels (``docs/analysis.md`` §11): ``trials.csv`` then ends in a
    ``covariate.NAME`` column for each (:mod:`analysis._covariates`)."""
    factors: tuple[str, ...] = ()
    """A factorial study's crossed factors: ``trials.csv`` ends in one ``factor.<NAME>``
    column each, the trial's level (empty for an arm that is no cell; analysis.md §2)."""
    excluded_trials: tuple[str, ...] = ()
    """The trials recorded as ``trial.excluded`` (never sent: a screening step, a step the item
    template reads without a decision, a second stage with nothing to build on)."""

    def __post_init__(self) -> None:
        for name in ("trials", "items"):
            frame = getattr(self, name)
            if "model" not in frame.columns:  # a frame built without models (benchmarks)
                frame = frame.assign(model="")
            if "variant" not in frame.columns:
                frame = frame.assign(variant="")
            object.__setattr__(self, name, frame)

    @property
    def several_models(self) -> bool:
        """True when the study declares two or more models (per-model results are made)."""
        return len(self.models) >= 2

    def for_stimuli(self, stimuli: Sequence[str]) -> Dataset:
        """Only the trials and items of these stimuli (a hypothesis's ``stimuli`` subset)."""
        keep = {str(x) for x in stimuli}
        return replace(
            self,
            trials=self.trials[_str_in(self.trials["stimulus"], keep)],
            items=self.items[_str_in(self.items["stimulus"], keep)],
        )  # every other member (given_up, sources, models, variants, cloze) kept

    def for_model(self, model: str) -> Dataset:
        """The trials and items of one model only, as a dataset of a one-model study."""
        # with a data arm's rows (model ""), compared within each model (docs/trials.md §6)
        mine = (model, "")
        return replace(
            self,
            trials=self.trials[self.trials["model"].isin(mine)].assign(model=model),
            items=self.items[self.items["model"].isin(mine)].assign(model=model),
            given_up=tuple(g for g in self.given_up if split_trial(g)[1] == model),
            excluded_trials=tuple(g for g in self.excluded_trials if split_trial(g)[1] == model),
            models=(),
        )  # a one-model study's dataset; every other member (variants, cloze, ...) kept

    def for_variant(self, variant: str) -> Dataset:
        """The trials and items of one variant only (a post-hoc ``--variant``)."""
        from analysis._rows import trial_variant

        return replace(
            self,
            trials=self.trials[_str_in(self.trials["variant"], {variant})],
            items=self.items[_str_in(self.items["variant"], {variant})],
            given_up=tuple(g for g in self.given_up if trial_variant(g) == variant),
            excluded_trials=tuple(g for g in self.excluded_trials if trial_variant(g) == variant),
        )  # every other member (models, variants, cloze, ...) kept

    def trials_csv(self) -> bytes:
        """The trial table as CSV (``\\n`` line ends).

        Columns :data:`TRIAL_COLUMNS`, or :data:`MODEL_TRIAL_COLUMNS` for a ``[models]`` study.
        """
        extra = (
            *(f"factor.{f}" for f in self.factors),
            *(DDX_METRICS if self.ddx else ()),
            *(f"covariate.{n}" for n in self.covariates),
        )  # analysis.md §2: factor levels, ddx metrics, factor labels (§11)
        if self.variants:
            return frame_csv(self.trials, (*VARIANT_TRIAL_COLUMNS, *extra))
        return frame_csv(
            self.trials, (*(MODEL_TRIAL_COLUMNS if self.models else TRIAL_COLUMNS), *extra)
        )

    def items_csv(self) -> bytes:
        """The item table as CSV (columns :data:`ITEM_COLUMNS` or :data:`MODEL_ITEM_COLUMNS`)."""
        columns = (
            VARIANT_ITEM_COLUMNS
            if self.variants
            else MODEL_ITEM_COLUMNS
            if self.models
            else ITEM_COLUMNS
        )
        return frame_csv(self.items, columns + CLOZE_ITEM_COLUMNS if self.cloze else columns)


def _str_in(values: pd.Series, keep: set[str]) -> npt.NDArray[np.bool_]:
    """``values.astype(str).isin(keep)`` as an array; a category column by its categories.

    A ``category`` column of strings (the item table's labels) is tested category by category
    and the answer taken by each row's code (a missing cell is never kept), so no string is
    made per row: at 10^5 trials the item table has 5.5 million rows (issue 41).
    """
    if isinstance(values.dtype, pd.CategoricalDtype) and values.cat.categories.dtype == "str":
        table = np.append(values.cat.categories.isin(keep), False)
        return np.asarray(table[values.cat.codes.to_numpy()], dtype=bool)  # code -1: the last
    return np.asarray(values.astype(str).isin(keep).to_numpy(), dtype=bool)


def models(plan: dict[str, Any]) -> tuple[str, ...]:
    """The models of a ``[models]`` study in declaration order (``model_order``), else ``()``."""
    declared = plan.get("models")
    if not isinstance(declared, dict):
        return ()
    order = plan.get("model_order")
    names = tuple(order) if isinstance(order, list) else tuple(sorted(declared))
    return tuple(n for n in names if n in trial_models(plan, names))


def load_dataset(
    log: Ledger,
    *,
    exclude_unparseable: bool = True,
    parser: str = TUMBLING_E,
    sources: dict[str, str] | None = None,
    models: Sequence[str] = (),
    variants: bool = False,
    factorial: tuple[Sequence[str], Mapping[str, Mapping[str, str]]] | None = None,
    observe: Callable[[Any], None] | None = None,
) -> Dataset:
    """Build the dataset from the ledger; refuses before ``blinding.revealed``.

    ``parser`` is the locked parser: only a ``tumbling-e-json`` trial can be a specificity
    control. ``sources`` maps each stimulus to its source image, for a random intercept by source.
    ``models`` is the model order of a ``[models]`` study (its trial ids name the model).
    ``factorial``: the crossed factors and each cell arm's levels
    (:func:`analysis._factorial.plan_cells`), for the ``factor.<NAME>`` columns.
    ``observe`` is handed every event of the ledger, in seq order, as the one pass reads it
    (``ledger analyze`` takes the responses' provenance from it: no second pass, issue 41).
    """
    revealed = next(iter(log.events("blinding.revealed")), None)
    sealed = next(iter(log.events("scoring.sealed")), None)
    if sealed is None or revealed is None:
        raise StudyError(
            f"{log.path}: analysis needs sealed scores and revealed arm codes; "
            "run 'ledger score' and 'ledger unblind' first"
        )
    code_arm = {code: arm for arm, code in revealed.body["arm_codes"].items()}
    # One pass in seq order (issue 41): each request kept as a small tuple, each response as
    # its request's seq, each scored trial and item as compact columns (analysis._rows.Column);
    # a trial's scores blob is read when its trial.scored is reached, one at a time.
    requests: dict[int, tuple[Any, ...]] = {}
    responses: dict[int, int] = {}
    names, cells = factorial or ((), {})
    trial_names = [*VARIANT_TRIAL_COLUMNS, *(f"factor.{f}" for f in names), *DDX_METRICS]
    # the cloze columns only for the cloze parser (the only one whose items.csv has them)
    item_names = [*VARIANT_ITEM_COLUMNS, *(CLOZE_ITEM_COLUMNS if parser == "cloze" else ())]
    tcol = {name: Column() for name in trial_names}
    items = _ItemColumns(item_names, parser)
    given_up: list[str] = []
    excluded: set[str] = set()
    for event in log.events():
        if observe is not None:
            observe(event)
        kind = event.kind
        if kind == "trial.requested":
            b = event.body
            requests[event.seq] = (
                b["trial"],
                b["arm"],
                b["stimulus"],
                b["rep"],
                str(b.get("variant", "")),
            )
        elif kind == "trial.responded":
            responses[event.seq] = event.body["request_seq"]
        elif kind == "trial.failed":
            if event.body.get("final"):
                given_up.append(event.body["trial"])
        elif kind == "trial.excluded":
            excluded.add(str(event.body["trial"]))
        elif kind == "trial.scored":
            _fold_scored(
                log,
                event,
                requests[responses[event.body["response_seq"]]],
                code_arm,
                exclude_unparseable,
                cells,
                names,
                tcol,
                items,
            )
    del requests, responses
    icol, per_trial = items.columns, items.per_trial
    del items
    counts = np.frombuffer(per_trial, dtype=np.int32).astype(np.intp)
    order = icol.pop("order")
    items_df = columns_frame(  # the trial-level columns repeated on each trial's items
        icol,
        item_names,
        categorical=CODED_ITEM_COLUMNS,
        release=True,
        repeat=(counts, {**{n: tcol[n] for n in _TRIAL_LEVEL_ITEM_COLUMNS}, "order": order}),
    )
    del order, counts, per_trial
    trials = columns_frame(tcol, trial_names, release=True)
    trials = trials.sort_values("response_seq", kind="stable").reset_index(drop=True)
    return Dataset(
        trials,
        items_df,
        tuple(sorted(revealed.body["arm_codes"])),
        tuple(given_up),
        sealed.body["scores_sha256"],
        dict(sources or {}),
        tuple(models),
        variants,
        parser == "cloze",
        ddx=parser == "ddx",
        factors=tuple(names),
        excluded_trials=tuple(sorted(excluded)),
    )


class _ItemColumns:
    """The item columns of the dataset being read (:func:`load_dataset`), one trial at a time.

    ``columns`` holds the item-level columns and ``order`` (one row per trial, repeated on its
    items when the frame is built), ``per_trial`` each trial's number of items. A scores blob
    is named by its SHA-256, so trials whose scores are the same blob (a perfect answer to a
    stimulus, a deterministic model's replicates) have the same items: the codes of the last
    :data:`SCORES_MEMO` blobs read (with the trial's option order, which maps the labels back)
    are kept and reused without reading or parsing the blob again (issue 41).
    """

    def __init__(self, names: Sequence[str], parser: str) -> None:
        self.columns = {name: Column() for name in names if name not in _TRIAL_LEVEL_ITEM_COLUMNS}
        self.columns["order"] = Column()
        self.per_trial = array("i")
        self.parser = parser
        self._read: dict[tuple[str, str], tuple[int, bool, tuple[array[int], ...]]] = {}

    def add(self, log: Ledger, event: Any, order: str) -> bool:
        """Add the items of one ``trial.scored``; whether the trial is a specificity control."""
        self.columns["order"].append(order)
        if self.parser == "ddx":  # a differential list has metrics, no items
            self.per_trial.append(0)
            return False
        digest = str(event.blobs["scores"])
        known = self._read.get((digest, order))
        if known is not None:
            count, control, codes = known
            for name, column_codes in zip(_ITEM_FIELD_NAMES, codes, strict=True):
                self.columns[name].extend_codes(column_codes)
            self.per_trial.append(count)
            return control
        items = json.loads(log.blob(digest))
        count = len(items)
        self.per_trial.append(count)
        control = self.parser == TUMBLING_E and count == 1 and items[0]["truth"] == CONTROL_TRUTH
        if not items:
            return control
        # each item column's values as one tuple (the trial's items), coded at once
        rows, positions, truths, answers, corrects = zip(*map(_ITEM_FIELDS, items), strict=True)
        if order:  # the labels mapped back to the original options (docs/variants.md section 2)
            originals = (
                tuple(_back(order, t) for t in truths),
                tuple(_back(order, a) for a in answers),
            )
        else:
            originals = (truths, answers)
        values = (rows, positions, truths, answers, corrects, *originals)
        codes = tuple(
            self.columns[name].extend(v) for name, v in zip(_ITEM_FIELD_NAMES, values, strict=True)
        )
        if "logprobs" in self.columns:  # the cloze parser: its own columns, never remembered
            for item in items:
                self.columns["logprobs"].append(
                    rfc8785.dumps(item["logprobs"]).decode("utf-8") if "logprobs" in item else None
                )
                self.columns["margin"].append(item.get("margin"))
            return control
        if len(self._read) >= SCORES_MEMO:
            self._read.clear()
        self._read[(digest, order)] = (count, control, codes)
        return control


SCORES_MEMO = 4096
"""How many scores blobs' item codes :class:`_ItemColumns` keeps (a few kB each)."""
_ITEM_FIELDS = operator.itemgetter("row", "position", "truth", "answer", "correct")
"""An item's values of the item columns read from its scores (:class:`_ItemColumns`)."""
_ITEM_FIELD_NAMES = (
    "row",
    "position",
    "truth",
    "answer",
    "correct",
    "truth_original",
    "answer_original",
)
"""The item columns :class:`_ItemColumns` fills from a trial's scores, in its order."""


def _fold_scored(
    log: Ledger,
    event: Any,
    request: tuple[Any, ...],
    code_arm: Mapping[str, str],
    exclude_unparseable: bool,
    cells: Mapping[str, Mapping[str, str]],
    names: Sequence[str],
    tcol: dict[str, Column],
    items: _ItemColumns,
) -> None:
    """Add one ``trial.scored`` (its trial row and its items) to the dataset's columns.

    The item columns get the item-level values only (:class:`_ItemColumns`); the trial's own
    (``trial``, ``arm``, ..., and ``order``) are repeated on its items when the frame is
    built, from ``items.per_trial``, each trial's number of items.
    """
    trial, request_arm, stimulus, rep, variant = request
    body = event.body
    arm = code_arm.get(body["arm_code"])
    if arm != request_arm:
        raise StudyError(
            f"{log.path}: seq {event.seq}: arm code {body['arm_code']} does not belong to "
            f"arm {request_arm} of trial {trial}"
        )
    parser = items.parser
    metric_values = (body.get("ddx") or {}).get("metrics") if parser == "ddx" else None
    control = items.add(log, event, str(body.get("order", "")))
    n_items = int(body["n_items"])
    model = split_trial(trial)[1] or ""
    row = {
        "trial": trial,
        "arm": arm,
        "model": model,
        "stimulus": stimulus,
        "variant": variant,
        "rep": int(rep),
        "response_seq": body["response_seq"],
        "status": body["status"],
        "n_items": n_items,
        "n_answered": int(body["n_answered"]),
        "n_correct": int(body["n_correct"]),
        "accuracy": int(body["n_correct"]) / n_items if n_items else math.nan,
        "control": control,
        "excluded": exclude_unparseable and body["status"] == "unparseable",
        **{name: _metric((metric_values or {}).get(name)) for name in DDX_METRICS},
        **{f"factor.{f}": (cells.get(str(arm)) or {}).get(f, "") for f in names},
    }
    for name, column in tcol.items():
        column.append(row[name])


def _metric(value: Any) -> float:
    """A ddx metric as a dataset cell: a number, NaN when undefined (``None``)."""
    return math.nan if value is None else float(value)


def metric_dataset(ds: Dataset, outcome: str) -> Dataset:
    """``ds`` with the ddx metric ``outcome`` as each trial's ``accuracy`` (its outcome).

    A trial where the metric is undefined is excluded from the test (``docs/analysis.md`` §9).
    """
    trials = ds.trials.copy()
    trials["accuracy"] = trials[outcome].astype(float)
    trials["excluded"] = trials["excluded"].astype(bool) | trials[outcome].isna()
    return replace(ds, trials=trials)


def _back(order: str, label: Any) -> Any:
    """A label mapped back to the original options (``docs/variants.md`` section 2).

    ``order`` empty (no permutation) or an answer that is not one of its labels (None, or a
    label the item does not have) gives the label unchanged.
    """
    if not order or not isinstance(label, str) or len(label) != 1:
        return label
    index = ord(label) - ord("A")
    return order[index] if 0 <= index < len(order) else label


# ------------------------------------------------------------------------------- results


@dataclass
class Result:
    """One analysis result (one ``analysis.result`` event)."""

    id: str
    title: str
    label: str
    test: str
    hypothesis: str | None = None
    status: str = "ok"
    values: dict[str, Any] | None = None
    verdict: str | None = None
    decided_by: dict[str, Any] | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The event body (without ``inputs``), JSON-ready."""
        return {
            "id": self.id,
            "title": self.title,
            "label": self.label,
            "test": self.test,
            "hypothesis": self.hypothesis,
            "status": self.status,
            "values": _clean(self.values or {}),
            "verdict": self.verdict,
            "decided_by": _clean(self.decided_by) if self.decided_by else None,
            "error": self.error,
        }


def _clean(value: Any) -> Any:
    """JSON-ready: NaN and infinities become None, numpy scalars Python numbers."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        f = float(value)
        return f if math.isfinite(f) else None
    return value


def _guard(result: Result, compute: Callable[[], None]) -> Result:
    """Run ``compute``; a test that cannot run becomes a failed result, not a crash.

    A test that does not apply (:class:`~analysis._stats.NotApplicableError`) is recorded as
    :data:`NOT_APPLICABLE` with its reason.
    """
    try:
        compute()
    except stats.NotApplicableError as exc:
        result.status = NOT_APPLICABLE
        result.values = {"reason": str(exc)}
        result.verdict = NOT_APPLICABLE if result.hypothesis else None
    except (stats.StatsError, ValueError, KeyError, ZeroDivisionError) as exc:
        result.status = "failed"
        result.error = (
            f"{type(exc).__name__}: {exc}" if not isinstance(exc, stats.StatsError) else str(exc)
        )
        result.verdict = "not computed" if result.hypothesis else None
    return result


def _analysable(ds: Dataset) -> pd.DataFrame:
    t = ds.trials
    return t[(~t["control"]) & (~t["excluded"])]


def _items(ds: Dataset) -> pd.DataFrame:
    """The analysable items (of analysable trials, not controls); computed once per dataset."""
    cached = ds.__dict__.get("_analysable_items")
    if cached is not None:
        return cached
    t = _analysable(ds)
    it = ds.items
    out = it[it["trial"].isin(t["trial"].unique()) & (it["truth"] != CONTROL_TRUTH)]
    object.__setattr__(ds, "_analysable_items", out)
    return out


def _unit(plan: dict[str, Any] | None) -> str:
    """What an item is called in titles: a glyph of a tumbling-E chart, else a trial's answer."""
    parser = ((plan or {}).get("response") or {}).get("parser", TUMBLING_E)
    return "Glyph-level accuracy" if parser == TUMBLING_E else "Accuracy"


def _arm_entry(trials: pd.DataFrame, items: pd.DataFrame, given_up: int) -> dict[str, Any]:
    """One arm's (or one arm × model cell's) counts, parse rate and Wilson accuracy.

    ``trials`` are its scored trials, ``items`` its analysable items, ``given_up`` the number
    of its trials given up (``docs/analysis.md`` §3, ``descriptive.arms``).
    """
    tumbling = trials[~trials["control"]]
    statuses = {s: int(n) for s, n in tumbling["status"].value_counts().items()}
    entry: dict[str, Any] = {
        "trials_scored": len(tumbling),
        "status": dict(sorted(statuses.items())),
        "excluded": int(tumbling["excluded"].sum()),
        "parse_rate": (statuses.get("ok", 0) + statuses.get("partial", 0)) / len(tumbling)
        if len(tumbling)
        else None,
        "given_up": given_up,
        "glyphs": len(items),
        "correct": int(items["correct"].sum()),
    }
    if len(items):
        entry["accuracy"] = stats.wilson(int(items["correct"].sum()), len(items)).as_dict()
        by = items.groupby(items["stimulus"].astype(str))["correct"].agg(["sum", "count"])
        entry["accuracy_clustered"] = stats.cluster_proportion(
            [int(x) for x in by["sum"]], [int(x) for x in by["count"]]
        ) | {"cluster": "stimulus"}
    else:
        entry["accuracy"] = None
        entry["note"] = "no parseable responses: accuracy not computed"
    return entry


def descriptive(ds: Dataset, plan: dict[str, Any] | None = None) -> list[Result]:
    """Item accuracy with Wilson CIs, parse rates and exclusions; the specificity control.

    Per arm, per (arm, model) when the study has several models, and per (arm, stimulus).
    """
    out = []
    unit = _unit(plan)
    by_arm = Result("descriptive.arms", f"{unit} by arm (Wilson 95% CI)", "descriptive", "wilson")

    def arms() -> None:
        values: dict[str, Any] = {}
        items = _items(ds)
        for arm in ds.arms:
            given_up = sum(1 for g in ds.given_up if g.split("|")[0] == arm)
            values[arm] = _arm_entry(
                ds.trials[ds.trials["arm"] == arm], items[items["arm"] == arm], given_up
            )
        by_arm.values = values

    out.append(_guard(by_arm, arms))
    if ds.several_models:
        by_model = Result(
            "descriptive.arm_model",
            f"{unit} by arm and model (Wilson 95% CI), parse rate and exclusions",
            "descriptive",
            "wilson",
        )

        def arm_models() -> None:
            values: dict[str, Any] = {}
            items = _items(ds)
            gave_up = [split_trial(g) for g in ds.given_up]
            for arm in ds.arms:
                for model in ds.models:
                    t = ds.trials[(ds.trials["arm"] == arm) & (ds.trials["model"] == model)]
                    given_up = sum(1 for g in gave_up if g[0] == arm and g[1] == model)
                    if t.empty and not given_up:
                        continue  # the arm did not run on this model
                    it = items[(items["arm"] == arm) & (items["model"] == model)]
                    values[f"{arm}|{model}"] = {"arm": arm, "model": model} | _arm_entry(
                        t, it, given_up
                    )
            by_model.values = values

        out.append(_guard(by_model, arm_models))
    by_stim = Result(
        "descriptive.arm_stimulus",
        f"{unit} (Wilson 95% CI), parse rate and exclusions by arm and stimulus",
        "descriptive",
        "wilson",
    )

    def cells() -> None:
        items = _items(ds)
        correct = items.groupby(["arm", "stimulus"], sort=False)["correct"].agg(["sum", "size"])
        hits_n = dict(
            zip(
                correct.index,
                zip(correct["sum"].tolist(), correct["size"].tolist(), strict=True),
                strict=True,
            )
        )
        tumbling = ds.trials[~ds.trials["control"]]
        grouped = tumbling.groupby(["arm", "stimulus"], sort=True)
        excluded_sums = grouped["excluded"].sum()
        excluded = dict(zip(excluded_sums.index, excluded_sums.tolist(), strict=True))
        by_status: dict[tuple[Any, Any], dict[str, int]] = {}
        for (arm, stim, status), count in (
            tumbling.groupby(["arm", "stimulus", "status"], sort=True).size().items()
        ):  # one pass, not a value_counts per cell
            by_status.setdefault((arm, stim), {})[str(status)] = int(count)
        values: dict[str, Any] = {}
        for (arm, stim), size in grouped.size().items():
            statuses = by_status[(arm, stim)]
            entry: dict[str, Any] = {"arm": arm, "stimulus": stim}
            hits, n = hits_n.get((arm, stim), (0, 0))
            if n:
                entry.update(stats.wilson(int(hits), int(n)).as_dict())
            else:
                entry.update(
                    successes=0,
                    n=0,
                    conf=0.95,
                    estimate=None,
                    lower=None,
                    upper=None,
                    note="no analysable items: accuracy not computed",
                )
            entry.update(
                trials_scored=int(size),
                status=dict(sorted(statuses.items())),
                excluded=int(excluded[(arm, stim)]),
                parse_rate=(statuses.get("ok", 0) + statuses.get("partial", 0)) / int(size),
            )
            values[f"{arm}|{stim}"] = entry
        by_stim.values = values

    out.append(_guard(by_stim, cells))
    control = Result(
        "descriptive.control",
        "Specificity control: non-tumbling-E chart rejected",
        "descriptive",
        "wilson",
    )

    def ctrl() -> None:
        t = ds.trials[ds.trials["control"]]
        values: dict[str, Any] = {}
        for arm in ds.arms:
            a = t[t["arm"] == arm]
            values[arm] = (
                stats.wilson(int(a["n_correct"].sum()), len(a)).as_dict() if len(a) else None
            )
        control.values = values

    out.append(_guard(control, ctrl))
    return out


def _trial_outcome(ds: Dataset) -> pd.DataFrame:
    """The analysable trials' outcome columns, computed once per dataset.

    Every test, model and sensitivity block of an analysis asks for it; callers only read it.
    """
    cached = ds.__dict__.get("_trial_outcome")
    if cached is not None:
        return cached
    t = _analysable(ds).loc[:, ["trial", "arm", "model", "stimulus", "variant", "rep", "accuracy"]]
    if ds.sources:
        t["source"] = t["stimulus"].map(ds.sources)
    object.__setattr__(ds, "_trial_outcome", t)
    return t


def _outcome_arrays(
    ds: Dataset,
) -> tuple[npt.NDArray[np.object_], npt.NDArray[np.object_], npt.NDArray[np.float64]]:
    """The analysable trials' arm, model (as ``str``) and accuracy as arrays, once per dataset.

    :func:`_trial_outcome`'s columns for the statistics that select rows by arm and model:
    a boolean mask over these arrays keeps the rows, in their order, that pandas' boolean
    selection keeps (so the same values, bit for bit), without building a frame per selection.
    """
    cached = ds.__dict__.get("_outcome_arrays")
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    t = _trial_outcome(ds)
    out = (
        t["arm"].astype(str).to_numpy(dtype=object),
        t["model"].astype(str).to_numpy(dtype=object),
        t["accuracy"].to_numpy(dtype=np.float64),
    )
    object.__setattr__(ds, "_outcome_arrays", out)
    return out


def _model_reference(ds: Dataset, present: pd.Series) -> str:
    """The reference model of the model factor: the first declared model with data."""
    seen = set(present.astype(str).unique().tolist())
    return next((m for m in ds.models if m in seen), ds.models[0])


_FITS: ContextVar[dict[Any, tuple[Result, stats.MixedModelFit | None]] | None] = ContextVar(
    "_FITS", default=None
)


@contextmanager
def remembered_fits() -> Iterator[None]:
    """Within the block, :func:`fit_model` fits the same trials under the same plan once.

    ``ledger plan`` enters it for one simulated study: a stimulus subset's model is fitted by
    its hypothesis and again by ``sensitivity.lmm`` (the same inputs, so the same numbers).
    Keyed by the trial ids, the plan's canonical JSON and ``interaction``; the memory is the
    block's own. The results are shared: callers must not change them.
    """
    token = _FITS.set({})
    try:
        yield
    finally:
        _FITS.reset(token)


def fit_model(
    ds: Dataset, plan: dict[str, Any], *, interaction: bool = False
) -> tuple[Result, stats.MixedModelFit | None]:
    """The locked linear mixed model: trial accuracy ~ arm + (1 | stimulus), REML.

    With several models the model is a fixed factor: ``accuracy ~ arm + model + (1 | group)``
    (``docs/analysis.md`` §4); ``interaction`` adds the arm × model cells (the exploratory
    ``exploratory.arm_by_model``, which this function then returns under that id). Inside
    :func:`remembered_fits` a repeated fit is the remembered one.
    """
    memo = _FITS.get()
    if memo is None:
        return _fit_model(ds, plan, interaction)
    key = (
        interaction,
        tuple(ds.trials["trial"].astype(str).tolist()),
        json.dumps(plan, sort_keys=True, default=str),
    )
    got = memo.get(key)
    if got is None:
        got = memo[key] = _fit_model(ds, plan, interaction)
    return got


def _fit_model(
    ds: Dataset, plan: dict[str, Any], interaction: bool
) -> tuple[Result, stats.MixedModelFit | None]:
    arms = plan["arms"]
    present = set(_trial_outcome(ds)["arm"].astype(str).unique().tolist())
    full = [a for a in sorted(arms) if arms[a].get("role") == "full"]
    reference = full[0] if full else min(arms)
    if reference not in present and present:
        # contrasts do not depend on the reference level: fall back to an arm with data, so an
        # arm without analysable trials does not stop the contrasts between the other arms
        reference = min(present)
    group = str(plan.get("analysis", {}).get("random_intercept", "stimulus"))
    terms = "arm + model + arm:model" if interaction else "arm + model"
    formula = terms if ds.several_models else "arm"
    model_arms = plan.get("analysis", {}).get("model_arms")
    on = f" on arms {', '.join(model_arms)}" if model_arms else ""
    if model_arms:
        present &= set(model_arms)
        if reference not in present and present:
            reference = min(present)
    result = Result(
        "exploratory.arm_by_model" if interaction else "model.lmm",
        f"Linear mixed model: accuracy ~ {formula} + (1 | {group}), REML{on}",
        "exploratory" if interaction else "pre-registered",
        "lmm",
    )
    holder: list[stats.MixedModelFit] = []

    def compute() -> None:
        t = _trial_outcome(ds)
        if model_arms:
            t = t[t["arm"].astype(str).isin(set(model_arms))]
        factors = {"model": _model_reference(ds, t["model"])} if ds.several_models else None
        fit = stats.mixed_model(
            t, "accuracy", "arm", group, reference, factors=factors, interaction=interaction
        )
        holder.append(fit)
        result.values = fit.as_dict()
        if interaction:
            cells = [e.name for e in fit.fixed_effects if ":" in e.name]
            result.values["interaction_test"] = stats.wald_test(fit, cells).as_dict()
        if fit.singular or not fit.converged:
            result.values["caution"] = MODEL_CAUTION

    _guard(result, compute)
    return result, (holder[0] if holder else None)


def _pair_values(
    ds: Dataset, a: str, b: str
) -> tuple[np.ndarray[Any, np.dtype[np.float64]], np.ndarray[Any, np.dtype[np.float64]]]:
    """Trial accuracies of arms ``a`` and ``b`` on the models both ran on (with any data).

    A model only one of the two arms has analysable trials on would confound the comparison
    of arms with that of models, so its trials are left out; in a one-model study (or when
    the arms share no model) every analysable trial of each arm is used.
    """
    arms, model, accuracy = _outcome_arrays(ds)
    in_a, in_b = arms == a, arms == b
    shared = set(model[in_a].tolist()) & set(model[in_b].tolist())
    if shared:  # the same rows, in the same order, as pandas' boolean selection
        keep = np.isin(model, list(shared))
        in_a, in_b = in_a & keep, in_b & keep
    x, y = accuracy[in_a], accuracy[in_b]
    for arm, values in ((a, x), (b, y)):
        if not values.size:
            raise stats.StatsError(
                f"arm {arm!r} has no analysable trials"
                + (f" (models: {', '.join(ds.models)})" if ds.models else "")
            )
    return x, y


def _stimulus_means(ds: Dataset, a: str, b: str) -> pd.DataFrame:
    """Per stimulus: mean accuracy of ``a`` and of ``b`` (columns), on shared stimuli.

    Means are taken per (model, stimulus) cell, the cells where both arms have analysable
    trials are kept, and a stimulus's value is the mean of its cells over the models: the
    difference of the columns is the model-averaged within-model difference (one model: the
    per-stimulus means of ``docs/analysis.md`` §3). Sorted by stimulus.
    """
    t = _trial_outcome(ds)
    cells = t.groupby(["model", "stimulus", "arm"])["accuracy"].mean().unstack("arm")
    if a not in cells or b not in cells:
        raise stats.StatsError(f"arms {a!r} and {b!r} need scored trials on common stimuli")
    both = cells.loc[:, [a, b]].dropna()
    if both.empty:
        raise stats.StatsError(f"arms {a!r} and {b!r} share no stimulus with scored trials")
    return both.groupby(level="stimulus", sort=True).mean()


def _per_group_diff(ds: Dataset, a: str, b: str) -> dict[str, float]:
    means = _stimulus_means(ds, a, b)
    return {str(k): float(v) for k, v in (means[a] - means[b]).items()}


PairState = dict[str, dict[tuple[str, int], tuple[str, str, float]]]
"""Per arm, (stimulus, rep) -> (kind: ok, unparseable, given-up or excluded; trial; value)."""


_PAIR_STATE_COLUMNS = ("excluded", "stimulus", "rep", "trial", "accuracy")


def _pair_state(ds: Dataset, a: str, b: str) -> PairState:
    """Every scheduled (stimulus, rep) key of arms ``a`` and ``b`` and what it gave."""
    controls = set(ds.trials.loc[ds.trials["control"].astype(bool), "stimulus"].astype(str))
    stimuli = set(ds.trials["stimulus"].astype(str))
    state: PairState = {a: {}, b: {}}

    def note(arm: str, key: tuple[str, int], kind: str, trial: str, value: float) -> None:
        if key in state[arm]:
            raise stats.StatsError(
                f"pairing (stimulus, rep): arm {arm} has a key twice "
                f"(stimulus {key[0]!r}, replicate {key[1]})"
            )
        state[arm][key] = (kind, trial, value)

    t = ds.trials
    arms = t["arm"].astype(str).to_numpy()
    mine = np.isin(arms, list(state)) & ~t["control"].astype(bool).to_numpy()
    for arm, excluded, stimulus, rep, trial, accuracy in zip(
        *(col[mine].tolist() for col in (arms, *(t[c].to_numpy() for c in _PAIR_STATE_COLUMNS))),
        strict=True,
    ):  # the trial table's rows of a and b in its order, not controls
        kind = "unparseable" if excluded else "ok"
        note(arm, (str(stimulus), int(rep)), kind, str(trial), float(accuracy))
    for kind, ids in (("given-up", ds.given_up), ("excluded", ds.excluded_trials)):
        for trial in ids:
            arm, _model, stimulus, rep = split_trial(trial)
            if arm in state and stimulus in stimuli and stimulus not in controls:
                note(arm, (stimulus, int(rep)), kind, trial, math.nan)
    return state


def _check_pairing(state: PairState, a: str, b: str) -> None:
    """Refuse a key one arm has and the other never had: the arms' designs differ."""
    only = {arm: sorted(set(state[arm]) - set(state[other])) for arm, other in ((a, b), (b, a))}
    if only[a] or only[b]:
        arm, other = (a, b) if only[a] else (b, a)
        first = only[arm][0]
        raise stats.StatsError(
            f"pairing (stimulus, rep) does not pair: arm {arm} has replicate {first[1]} of "
            f"stimulus {first[0]!r} and arm {other} has no such trial: it was never scheduled "
            f"({len(only[a]) + len(only[b])} key(s) in one arm only; the arms' designs differ)"
        )


def _trial_pairs(ds: Dataset, a: str, b: str) -> tuple[Any, Any, list[dict[str, Any]]]:
    """Trial accuracies of a and b paired by (stimulus, rep): complete pairs only.

    ``docs/analysis.md`` §3: a key whose trial in either arm was scheduled but gave no value
    (unparseable and excluded, given up, or recorded as ``trial.excluded``) drops the pair,
    listed in the third member; a key one arm has and the other never had (no such trial was
    scheduled) raises :class:`~analysis._stats.StatsError` naming it: the pairing is part of
    the plan.
    """
    state = _pair_state(ds, a, b)
    _check_pairing(state, a, b)
    xs: list[float] = []
    ys: list[float] = []
    dropped: list[dict[str, Any]] = []
    for key in sorted(state[a]):
        sides = ((a, state[a][key]), (b, state[b][key]))
        lost = [
            {"arm": arm, "kind": kind, "trial": trial}
            for arm, (kind, trial, _v) in sides
            if kind != "ok"
        ]
        if lost:
            dropped.append({"stimulus": key[0], "rep": key[1], "excluded": lost})
        else:
            xs.append(state[a][key][2])
            ys.append(state[b][key][2])
    return np.array(xs, dtype=np.float64), np.array(ys, dtype=np.float64), dropped


_PAIR_KEYS = ["model", "stimulus", "variant", "rep", "row", "position"]
"""What pairs an item of arm ``a`` with an item of arm ``b`` (``docs/analysis.md`` §3)."""


def _paired_items(ds: Dataset, a: str, b: str) -> pd.DataFrame:
    """Arm ``a``'s analysable items inner-joined with arm ``b``'s on :data:`_PAIR_KEYS`.

    ``left.merge(right, on=_PAIR_KEYS, suffixes=("_a", "_b"))`` with its label columns as
    ``str``. When each side's keys are unique (one trial per arm and cell) the join is made
    from one integer per item (:func:`_pair_codes`) instead of pandas' six-key join, whose
    factorized keys cost several times the item columns at 10^5 trials (issue 41); the frame
    is the merge's, row for row (left order, a fresh index).
    """
    it = _items(ds)
    left = it.loc[(it["arm"] == a).to_numpy(), [*_PAIR_KEYS, "correct", "answer", "truth"]]
    right = it.loc[(it["arm"] == b).to_numpy(), [*_PAIR_KEYS, "correct", "answer"]]
    codes = None if left.empty or right.empty else _pair_codes(left, right)
    if codes is not None:
        lk, rk = codes
        order = np.argsort(rk, kind="stable")
        ranked = rk[order]
        if _distinct(ranked) and _distinct(np.sort(lk)):
            at = np.searchsorted(ranked, lk)
            inside = at < len(ranked)
            found = np.zeros(len(lk), dtype=bool)
            found[inside] = ranked[at[inside]] == lk[inside]
            mine = np.flatnonzero(found)
            theirs = order[at[mine]]
            paired = left.iloc[mine].rename(columns={"correct": "correct_a", "answer": "answer_a"})
            paired = paired.reset_index(drop=True)
            paired["correct_b"] = right["correct"].iloc[theirs].to_numpy()
            paired["answer_b"] = right["answer"].iloc[theirs].reset_index(drop=True)
            return plain(paired)
    return plain(left.merge(right, on=_PAIR_KEYS, suffixes=("_a", "_b")))


def _distinct(ranked: npt.NDArray[np.int64]) -> bool:
    """Whether a sorted array has no value twice (a sort, not ``np.unique``'s hash table)."""
    return not (len(ranked) > 1 and bool((ranked[1:] == ranked[:-1]).any()))


def _whole(values: pd.Series) -> bool:
    """Whether a float column's numbers (NaN aside) are whole and below 2^52 in size."""
    v = values.to_numpy()
    v = v[~np.isnan(v)]
    return bool(np.all((np.abs(v) < 2.0**52) & (v == np.floor(v))))


def _floor(values: npt.NDArray[np.float64]) -> int:
    """The smallest number of a whole-number float array (0 when it holds only NaN)."""
    present = values[~np.isnan(values)]
    return int(present.min()) if len(present) else 0


def _pair_codes(
    left: pd.DataFrame, right: pd.DataFrame
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
    """One int64 per row of each side, equal exactly when its :data:`_PAIR_KEYS` are equal.

    A label column's category code (both sides are slices of one ``category`` column, so they
    share its categories; a missing label is code -1 on both, as the merge matches missing
    with missing), an integer column's offset from the smallest value of both sides, a float
    column of whole numbers likewise (NaN, a ``row`` with no number, one more code), another
    float column's rank among the distinct values of both (NaN one value), mixed by the
    product of the ranges. Both sides have rows. None when a key column is none
    of these (then the merge pairs), or the ranges' product does not fit in 62 bits.
    """
    lk = np.zeros(len(left), dtype=np.int64)
    rk = np.zeros(len(right), dtype=np.int64)
    span = 1
    for name in _PAIR_KEYS:
        lc, rc = left[name], right[name]
        if isinstance(lc.dtype, pd.CategoricalDtype) and lc.dtype == rc.dtype:
            lv, rv = lc.cat.codes.to_numpy(np.int64) + 1, rc.cat.codes.to_numpy(np.int64) + 1
            size = len(lc.cat.categories) + 1
        elif lc.dtype.kind == "i" and rc.dtype.kind == "i" and lc.dtype == rc.dtype:
            lv, rv = lc.to_numpy(np.int64), rc.to_numpy(np.int64)
            low = min(int(lv.min()), int(rv.min()))
            lv, rv = lv - low, rv - low
            size = max(int(lv.max()), int(rv.max())) + 1
        elif lc.dtype.kind == "f" and lc.dtype == rc.dtype and _whole(lc) and _whole(rc):
            lf, rf = lc.to_numpy(), rc.to_numpy()  # whole numbers and NaN (a row with none)
            low = min(_floor(lf), _floor(rf))
            lv = np.where(np.isnan(lf), 0, lf - low + 1).astype(np.int64)  # NaN: code 0
            rv = np.where(np.isnan(rf), 0, rf - low + 1).astype(np.int64)
            size = max(int(lv.max()), int(rv.max())) + 1
        elif lc.dtype.kind == "f" and lc.dtype == rc.dtype:
            found, inverse = np.unique(
                np.concatenate([lc.to_numpy(), rc.to_numpy()]), return_inverse=True
            )  # NaNs are one value, as the merge matches them
            lv, rv = inverse[: len(lc)].astype(np.int64), inverse[len(lc) :].astype(np.int64)
            size = len(found)
        else:
            return None
        span *= size
        if span >= 1 << 62:
            return None
        lk = lk * size + lv
        rk = rk * size + rv
    return lk, rk


@dataclass
class StatisticData:
    """The analysis dataset as the statistics of :mod:`analysis.statistics` read it.

    Implements :class:`analysis.statistics.Data`: the dataset ``ds`` of one hypothesis (its
    stimulus subset, its ddx metric as the outcome), the locked ``plan``, the study's mixed
    model ``fit`` and the parser's ``vocabulary``, with the pairings of ``docs/analysis.md`` §3.
    """

    ds: Dataset
    plan: dict[str, Any]
    fit: stats.MixedModelFit | None = None
    vocabulary: tuple[str, ...] | None = None

    def analysable(self) -> pd.DataFrame:
        """The analysable trials (not controls, not excluded)."""
        return _analysable(self.ds)

    def items(self) -> pd.DataFrame:
        """The analysable items."""
        return _items(self.ds)

    def pair_values(
        self, a: str, b: str
    ) -> tuple[np.ndarray[Any, np.dtype[np.float64]], np.ndarray[Any, np.dtype[np.float64]]]:
        """Trial accuracies of arms ``a`` and ``b`` on the models both ran."""
        return _pair_values(self.ds, a, b)

    def stimulus_means(self, a: str, b: str) -> pd.DataFrame:
        """Per stimulus, the mean accuracy of ``a`` and of ``b`` on shared stimuli."""
        return _stimulus_means(self.ds, a, b)

    def per_group_diff(self, a: str, b: str) -> dict[str, float]:
        """Per stimulus, the difference of the mean accuracies ``a - b``."""
        return _per_group_diff(self.ds, a, b)

    def trial_pairs(self, a: str, b: str) -> tuple[Any, Any, list[dict[str, Any]]]:
        """Trial accuracies paired by (stimulus, rep), and the pairs dropped."""
        return _trial_pairs(self.ds, a, b)

    def paired_items(self, a: str, b: str) -> pd.DataFrame:
        """The items of ``a`` and ``b`` paired by (model, stimulus, variant, rep, row, position)."""
        return _paired_items(self.ds, a, b)

    def refit(self, plan: dict[str, Any]) -> tuple[Result, stats.MixedModelFit | None]:
        """The locked mixed model fitted on this data under ``plan``."""
        return fit_model(self.ds, plan)


SUBSET_MEMO_MAX_TRIALS = 20_000
"""The largest dataset (trials) whose stimulus subsets :func:`_stimulus_subset` keeps: a plan's
simulated studies reuse them; at 10^5 trials each kept subset is a second item table (issue 41:
the peak of ``ledger analyze`` rose from about 940 MB to 1.2 GB at 99,995 trials)."""


def _stimulus_subset(ds: Dataset, stimuli: Sequence[str]) -> Dataset:
    """``ds.for_stimuli(stimuli)``, made once per dataset and list of stimuli when it is small.

    The hypotheses of one stimulus subset and ``sensitivity.lmm``'s subset model then share
    one dataset (and its :func:`_trial_outcome`). ``for_stimuli`` is deterministic, so a subset
    made again gives the same numbers; a dataset of more than
    :data:`SUBSET_MEMO_MAX_TRIALS` trials makes it again instead of keeping it. Callers only
    read it.
    """
    key = tuple(str(x) for x in stimuli)
    if len(ds.trials) > SUBSET_MEMO_MAX_TRIALS:
        return ds.for_stimuli(key)
    memo: dict[tuple[str, ...], Dataset] = ds.__dict__.setdefault("_stimulus_subsets", {})
    got = memo.get(key)
    if got is None:
        got = memo[key] = ds.for_stimuli(key)
    return got


def _hypothesis_dataset(ds: Dataset, h: dict[str, Any]) -> Dataset:
    """The data a hypothesis reads: its stimuli, its ddx metric as the outcome (§9)."""
    subset = _stimulus_subset(ds, h["stimuli"]) if h.get("stimuli") else ds
    if h.get("outcome") in DDX_METRICS:  # docs/analysis.md §9: the metric is the outcome
        subset = metric_dataset(subset, str(h["outcome"]))
    return subset


def _recorded_settings(h: dict[str, Any]) -> dict[str, Any]:
    """What every hypothesis result records of its declaration beside the statistic."""
    return (
        {
            "alpha": h.get("alpha") or 0.05,
            "sides": h.get("sides") or "two-sided",
            "min_difference_pp": h.get("min_difference_pp"),
            "correction": h.get("correction", "none"),
            "family": h.get("family"),
        }
        | ({"phase": h["phase"]} if h.get("phase") is not None else {})
        | ({"outcome": h["outcome"]} if h.get("outcome") in DDX_METRICS else {})
    )


def hypothesis_results(
    ds: Dataset, plan: dict[str, Any], fit: stats.MixedModelFit | None
) -> list[Result]:
    """Each pre-registered hypothesis's test and decision rule, with multiplicity corrections.

    Each hypothesis is computed and decided by its kind in :data:`analysis.statistics.REGISTRY`.
    With several models these are the pooled results (pairs matched within a model, the
    model a fixed factor of the mixed model); :func:`per_model_results` gives each model's.
    """
    vocabulary = labels(plan)
    out: list[Result] = []
    for h in plan["hypotheses"]:
        r = Result(
            f"hypothesis.{h['id']}",
            h["description"],
            "pre-registered",
            h["test"],
            hypothesis=h["id"],
        )
        data = StatisticData(_hypothesis_dataset(ds, h), plan, fit, vocabulary)

        def compute(h: dict[str, Any] = h, r: Result = r, data: StatisticData = data) -> None:
            r.values = statistics.statistic(h["test"]).compute(data, h)

        _guard(r, compute)
        r.values = (r.values or {}) | _recorded_settings(h)
        out.append(r)
    _apply_corrections(out, plan)
    for h, r in zip(plan["hypotheses"], out, strict=True):
        if r.status == "ok":
            r.verdict, r.decided_by = statistics.decide(h, r.values or {})
    return out


def _for_model(result: Result, model: str) -> Result:
    """``result`` computed on one model's data, renamed ``<id>@<model>`` (``H1@small``)."""
    result.id = f"{result.id}@{model}"
    result.title = f"{result.title} (model {model})" if result.title else f"model {model}"
    if result.hypothesis is not None:
        result.hypothesis = f"{result.hypothesis}@{model}"
        result.values = (result.values or {}) | {"model": model}
    return result


def per_model_results(
    ds: Dataset, plan: dict[str, Any]
) -> tuple[list[Result], dict[str, list[Result]]]:
    """Each model's own mixed model and hypothesis results (several models only).

    For each model, in model order, the locked plan is run on that model's trials alone, as
    in a one-model study: ``model.lmm@<model>`` and ``hypothesis.<id>@<model>`` (corrections
    within each model's copy of the family). Returns the fits and, per hypothesis id, its
    per-model results in model order.
    """
    fits: list[Result] = []
    by_hypothesis: dict[str, list[Result]] = {h["id"]: [] for h in plan["hypotheses"]}
    for model in ds.models:
        sub = ds.for_model(model)
        fit_result, fit = fit_model(sub, plan)
        fits.append(_for_model(fit_result, model))
        for h, r in zip(plan["hypotheses"], hypothesis_results(sub, plan, fit), strict=True):
            by_hypothesis[h["id"]].append(_for_model(r, model))
    return fits, by_hypothesis


def _apply_corrections(results: list[Result], plan: dict[str, Any]) -> None:
    """Adjust p within each family (Bonferroni or Holm), as each hypothesis declares.

    The family is the pre-registered one: a member that failed, or whose test gives no p,
    still counts (as p = 1), so a failure never shrinks the correction.
    """
    families: dict[tuple[str, str], list[Result]] = {}
    for h, r in zip(plan["hypotheses"], results, strict=True):
        correction = h.get("correction", "none")
        if correction in ("bonferroni", "holm"):
            families.setdefault((h.get("family") or h["id"], correction), []).append(r)
    for (_family, method), members in families.items():
        has_p = [
            m.status == "ok" and m.values is not None and m.values.get("p_raw") is not None
            for m in members
        ]
        ps = [
            float(m.values["p_raw"]) if ok and m.values else 1.0
            for m, ok in zip(members, has_p, strict=True)
        ]
        adjust = stats.bonferroni if method == "bonferroni" else stats.holm
        for m, ok, p_adj in zip(members, has_p, adjust(ps).adjusted, strict=True):
            if ok and m.values is not None:
                m.values["p_adjusted"] = p_adj
                m.values["family_size"] = len(members)


def _error_tests(
    wrong: pd.DataFrame, vocab: tuple[str, ...], tumbling: bool, oriented: bool
) -> dict[str, Any]:
    """The wrong answers' canonical RIGHT share (tumbling-E), counts and chi-square tests."""
    values: dict[str, Any] = {}
    if tumbling:
        values["canonical_right_share"] = stats.canonical_share(
            wrong["truth"].astype(str).tolist(), wrong["answer"].astype(str).tolist()
        ).as_dict()
    counts = [int((wrong["answer"] == o).sum()) for o in vocab]
    name = "error_directions" if oriented else "error_answers"
    values[name] = dict(zip(vocab, counts, strict=True))
    try:
        values["error_chi_square"] = stats.chi_square_gof(counts).as_dict()
    except stats.StatsError as exc:
        values["error_chi_square"] = {"error": str(exc)}
    try:
        shares = stats.error_null_excluding_truth(wrong["truth"].astype(str).tolist(), vocab)
        kept = [i for i, sh in enumerate(shares) if sh > 0]  # structural zeros out
        values["error_chi_square_excluding_truth"] = stats.chi_square_gof(
            [counts[i] for i in kept], [shares[i] for i in kept]
        ).as_dict() | {"labels": [vocab[i] for i in kept]}
    except stats.StatsError as exc:
        values["error_chi_square_excluding_truth"] = {"error": str(exc)}
    return values


def _error_values(
    it: pd.DataFrame, vocab: tuple[str, ...], tumbling: bool, oriented: bool
) -> dict[str, Any]:
    """``exploratory.errors.<arm>``'s values from the arm's analysable items ``it``."""
    if it.empty:
        kind = "tumbling-E " if tumbling else ""
        raise stats.StatsError(f"no parseable {kind}responses in this arm")
    answers = plain(it.loc[:, ["answer"]])["answer"].fillna("(none)").astype(str).tolist()
    truth = it["truth"].astype(str).tolist()
    confusion = stats.confusion_matrix(truth, answers, vocab)
    wrong = it[(~it["correct"]) & it["answer"].isin(vocab)]
    values: dict[str, Any] = {"confusion": confusion.as_dict()}
    if len(wrong):
        values |= _error_tests(wrong, vocab, tumbling, oriented)
    if tumbling:
        rows = it.groupby("row")["correct"].agg(["sum", "count"])
        values["accuracy_by_row"] = {
            str(int(row)): {"correct": int(s), "n": int(c), "accuracy": s / c}
            for row, (s, c) in rows.iterrows()
        }
    values["position_bias"] = stats.position_bias_tvd(answers, truth, vocab).as_dict()
    return values


def _error_phenotypes(ds: Dataset, plan: dict[str, Any]) -> list[Result]:
    """``exploratory.errors.<arm>`` of each arm (a parser with a closed set of labels)."""
    vocabulary = labels(plan)
    if vocabulary is None:
        return []
    items = _items(ds)
    parser = (plan.get("response") or {}).get("parser", TUMBLING_E)
    tumbling = parser == TUMBLING_E
    oriented = parser in (TUMBLING_E, "orientation-word")
    out: list[Result] = []
    for arm in ds.arms:  # the columns _error_values reads, the arm's rows (in their order)
        it = items.loc[(items["arm"] == arm).to_numpy(), ["truth", "answer", "correct", "row"]]
        r = Result(
            f"exploratory.errors.{arm}",
            f"Error phenotype of arm {arm}",
            "exploratory",
            "confusion, canonical share, chi-square, rows, position bias"
            if tumbling
            else "confusion, chi-square, position bias",
        )

        def compute(it: pd.DataFrame = it, r: Result = r) -> None:
            r.values = _error_values(it, vocabulary, tumbling, oriented)

        out.append(_guard(r, compute))
    return out


def _pair_metrics(
    ds: Dataset, design: dict[str, Any], tumbling: bool, a: str, b: str
) -> dict[str, Any]:
    """``exploratory.pair.<a>-<b>``'s values: McNemar, flips, t-tests, bootstrap, Newcombe."""
    values: dict[str, Any] = {}
    paired = _paired_items(ds, a, b)
    if not paired.empty:
        values["mcnemar"] = stats.mcnemar_paired(
            paired["correct_a"].to_numpy(), paired["correct_b"].to_numpy()
        ).as_dict()
        values["flip_rate"] = stats.flip_rate(
            paired["answer_a"].fillna("(none)").astype(str).tolist(),
            paired["answer_b"].fillna("(none)").astype(str).tolist(),
        ).as_dict()
    x, y = _pair_values(ds, a, b)
    values["independent_t"] = stats.independent_t(x, y).as_dict()
    means = _stimulus_means(ds, a, b)
    if len(means) >= 2:
        values["paired_t"] = stats.paired_t(means[a].to_numpy(), means[b].to_numpy()).as_dict()
    values["bootstrap_diff"] = stats.bootstrap_diff(
        x, y, int(design["bootstrap_iterations"]), design["bootstrap_seed"]
    ).as_dict()
    binary = bool(np.isin(x, (0.0, 1.0)).all() and np.isin(y, (0.0, 1.0)).all())
    if not tumbling and len(x) and len(y) and binary:  # one answer per trial
        values["newcombe"] = stats.newcombe_diff(
            round(float(np.sum(x))), len(x), round(float(np.sum(y))), len(y)
        )
    return values


def _question_runs(ds: Dataset, design: dict[str, Any]) -> list[Result]:
    """``exploratory.question_run.<arm>`` of each arm, then of each arm@model it ran."""
    out: list[Result] = []
    for arm in ds.arms:
        out.append(_question_run(ds, design, arm, None))
        ran = set(ds.trials.loc[ds.trials["arm"] == arm, "model"].unique().tolist())
        for model in ds.models if ds.several_models else ():
            if model in ran:
                out.append(_question_run(ds, design, arm, model))
    return out


def exploratory(ds: Dataset, plan: dict[str, Any]) -> list[Result]:
    """Not pre-registered: error phenotype, rows, position bias, paired-arm metrics.

    ``exploratory.errors.<arm>`` needs a parser with a closed set of labels (:func:`labels`);
    its members follow ``docs/analysis.md`` §3 (rows and the canonical RIGHT share only for
    tumbling-E charts).
    """
    out = _error_phenotypes(ds, plan)
    vocabulary = labels(plan)
    parser = (plan.get("response") or {}).get("parser", TUMBLING_E)
    tumbling = parser == TUMBLING_E
    design = plan["design"]
    pairs = sorted({tuple(h["contrast"]) for h in plan["hypotheses"] if h.get("contrast")})
    for a, b in pairs:
        r = Result(
            f"exploratory.pair.{a}-{b}",
            f"Paired-arm metrics {a} vs {b}",
            "exploratory",
            "mcnemar, flip rate, t-tests, bootstraps",
        )

        def compute_pair(a: str = a, b: str = b, r: Result = r) -> None:
            r.values = _pair_metrics(ds, design, tumbling, a, b)

        out.append(_guard(r, compute_pair))
    if parser == "orientation-word" and vocabulary is not None:
        out.append(by_truth(ds, plan, vocabulary))
    if tumbling and nested_pairs(plan):
        out.append(by_stimulus(ds, plan))
    out += _question_runs(ds, design)
    if ds.several_models:
        out.append(fit_model(ds, plan, interaction=True)[0])
    return out


def truth_contrasts(plan: dict[str, Any], arms: Sequence[str]) -> list[tuple[str, str]]:
    """The arm pairs of ``exploratory.by_truth`` (``docs/analysis.md`` §3).

    (full arm, each other arm), then each hypothesis contrast not already there in either order.
    """
    full = sorted(a for a, spec in plan.get("arms", {}).items() if spec.get("role") == "full")
    pairs = [(full[0], arm) for arm in arms if arm != full[0]] if full else []
    for h in plan["hypotheses"]:
        a, b = str(h["contrast"][0]), str(h["contrast"][1])
        if (a, b) not in pairs and (b, a) not in pairs:
            pairs.append((a, b))
    return pairs


def by_truth(ds: Dataset, plan: dict[str, Any], vocab: Sequence[str]) -> Result:
    """``exploratory.by_truth``: accuracy per arm and true label, and arm contrasts per label.

    The PROMPT paper's per-orientation cells (Experiment 2): hypothesis-generating, not
    adjusted for the number of cells, so labelled exploratory. Each cell is the Wilson 95%
    interval of the arm's analysable items with that truth; each contrast the Newcombe
    hybrid-score interval of the difference (:func:`truth_contrasts` names the pairs).
    """
    r = Result(
        "exploratory.by_truth",
        "Accuracy by true answer, per arm, with arm contrasts (exploratory, hypothesis-generating)",
        "exploratory",
        "wilson, newcombe",
    )

    def compute() -> None:
        items = _items(ds)
        counts: dict[str, dict[str, tuple[int, int]]] = {}
        cells: dict[str, dict[str, Any]] = {}
        for arm in ds.arms:
            it = items[items["arm"] == arm]
            counts[arm], cells[arm] = {}, {}
            for label in vocab:
                hit = it[it["truth"].astype(str) == label]
                k, n = int(hit["correct"].sum()), len(hit)
                counts[arm][label] = (k, n)
                cells[arm][label] = {
                    "correct": k,
                    "n": n,
                    "wilson": stats.wilson(k, n).as_dict() if n else None,
                }
        contrasts: dict[str, dict[str, Any]] = {}
        for a, b in truth_contrasts(plan, ds.arms):
            if a not in counts or b not in counts:
                continue
            contrasts[f"{a}-{b}"] = {}
            for label in vocab:
                (ka, na), (kb, nb) = counts[a][label], counts[b][label]
                try:
                    value: dict[str, Any] = stats.newcombe_diff(ka, na, kb, nb)
                except stats.StatsError as exc:
                    value = {"error": str(exc)}
                contrasts[f"{a}-{b}"][label] = value
        r.values = {
            "labels": list(vocab),
            "cells": cells,
            "contrasts": contrasts,
            "note": "exploratory and hypothesis-generating: one cell per arm and true answer, "
            "intervals not adjusted for the number of cells",
        }

    return _guard(r, compute)


def nested_pairs(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """Dismantling pairs (a, b): b's components a strict subset of a's (arms sorted)."""
    arms = plan.get("arms") or {}
    comps = {a: set((arms[a] or {}).get("components") or []) for a in sorted(arms)}
    return [(a, b) for a in comps for b in comps if a != b and comps[b] < comps[a]]


def by_stimulus(ds: Dataset, plan: dict[str, Any]) -> Result:
    """``exploratory.by_stimulus``: each dismantling pair's difference on each probe.

    The PROMPT paper's per-probe dismantling findings (Experiment 1: removing the
    prohibited-reasoning block from arm B "harmful on P3 and beneficial on P4"): for every pair
    of :func:`nested_pairs` and every stimulus with analysable trials, Welch's t on the two arms'
    trial accuracies there (in dataset order). Exploratory, hypothesis-generating, unadjusted.
    """
    r = Result(
        "exploratory.by_stimulus",
        "Dismantling contrasts per probe (exploratory, hypothesis-generating)",
        "exploratory",
        "welch t per stimulus",
    )

    def compute() -> None:
        t = _analysable(ds)
        stimuli = sorted(set(t["stimulus"].astype(str)))
        contrasts: dict[str, dict[str, Any]] = {}
        for a, b in nested_pairs(plan):
            row: dict[str, Any] = {}
            for stimulus in stimuli:
                here = t[t["stimulus"].astype(str) == stimulus]
                x = here.loc[here["arm"] == a, "accuracy"].to_numpy(dtype=np.float64)
                y = here.loc[here["arm"] == b, "accuracy"].to_numpy(dtype=np.float64)
                try:
                    row[stimulus] = stats.independent_t(x, y).as_dict()
                except stats.StatsError as exc:
                    row[stimulus] = {"error": str(exc)}
            contrasts[f"{a}-{b}"] = row
        r.values = {
            "stimuli": stimuli,
            "contrasts": contrasts,
            "note": "exploratory and hypothesis-generating: Welch t per probe, not "
            "adjusted for the number of probes and pairs",
        }

    return _guard(r, compute)


def _question_run(ds: Dataset, design: dict[str, Any], arm: str, model: str | None) -> Result:
    """``exploratory.question_run.<arm>`` (``@<model>``): the (stimulus, run) bootstrap.

    A run is a replicate; pooled over several models it is a (model, replicate) pair, so each
    model's answer to a question is its own observation.
    """
    where = f"{arm}@{model}" if model is not None else arm
    r = Result(
        f"exploratory.question_run.{where}",
        f"Accuracy of arm {arm}"
        + (f" on model {model}" if model is not None else "")
        + ", bootstrap over (stimulus, "
        + ("model × replicate" if model is None and ds.several_models else "replicate")
        + ") observations",
        "exploratory",
        "bootstrap_clustered",
    )

    def compute() -> None:
        t = _trial_outcome(ds)
        t = t[t["arm"] == arm]
        if model is not None:
            t = t[t["model"] == model]
        runs = (
            (t["model"] + "|" + t["rep"].astype(str)).tolist()
            if model is None and ds.several_models
            else t["rep"].tolist()
        )
        if ds.variants:  # a run is (variant, replicate): docs/variants.md §5
            runs = [f"{v}|{r}" for v, r in zip(t["variant"].tolist(), runs, strict=True)]
        res = stats.bootstrap_clustered(
            t["accuracy"].to_numpy(dtype=np.float64),
            t["stimulus"].tolist(),
            runs,
            int(design["bootstrap_iterations"]),
            design["bootstrap_seed"],
        )
        r.values = res.as_dict()

    return _guard(r, compute)


def _identical_responses(log: Ledger, ds: Dataset) -> Result | None:
    """``descriptive.identical_responses`` when replicates or models gave copies, else None."""
    from analysis._identical import IDENTICAL_ID, CopyWatch, identical_values, response_digests

    watch = CopyWatch(ds.trials, ds.models)  # stops reading once no copy can be found
    seqs = [int(s) for s in ds.trials["response_seq"].tolist()]
    digests = response_digests(log, seqs, watch.add)
    if watch.ruled_out:
        return None
    found = identical_values(ds.trials, digests, ds.models)
    if found is None:
        return None
    return Result(
        IDENTICAL_ID,
        "Byte-identical responses: copies the trial-level tests count as independent observations",
        "descriptive",
        "identical-responses",
        values=found,
    )


def judge_agreement(log: Ledger, plan: dict[str, Any], step: str) -> Result:
    """``exploratory.judge_agreement``: Cohen's (two judges) or Fleiss' kappa of a judge step."""
    from analysis._agreement import judge_agreement_values

    spec = (plan.get("steps") or {}).get(step) or {}
    method = "cohens_kappa" if len(spec.get("models") or []) == 2 else "fleiss_kappa"
    r = Result(
        "exploratory.judge_agreement",
        f"Agreement of the judges of step {step}",
        "exploratory",
        method,
    )
    judged = [e.body["judge"] for e in log.events("trial.scored") if "judge" in e.body]

    def compute() -> None:
        r.values = judge_agreement_values(judged, list(spec.get("labels") or []))

    return _guard(r, compute)


NO_P_VALUES = "no registered test gives a p-value (interval tests only): nothing to correct"
"""``exploratory.multiplicity``'s note when every hypothesis was decided by an interval."""


def multiplicity(hypotheses: list[Result]) -> Result:
    """Bonferroni and Holm over every hypothesis with a raw p (exploratory: a sensitivity view)."""
    r = Result(
        "exploratory.multiplicity",
        "All hypothesis p-values, Bonferroni and Holm",
        "exploratory",
        "bonferroni, holm",
    )

    def compute() -> None:
        rows = [
            (h.hypothesis, h.values["p_raw"])
            for h in hypotheses
            if h.status == "ok" and h.values and h.values.get("p_raw") is not None
        ]
        if not rows and all(h.status == "ok" for h in hypotheses):
            # every registered test is an interval test (no p-value): nothing to correct
            r.values = {"hypotheses": [], "note": NO_P_VALUES}
            return
        if not rows:
            raise stats.StatsError("no hypothesis produced a p-value")
        ps = [p for _, p in rows]
        r.values = {
            "hypotheses": [h for h, _ in rows],
            "bonferroni": stats.bonferroni(ps).as_dict(),
            "holm": stats.holm(ps).as_dict(),
        }

    return _guard(r, compute)


def phase_dataset(ds: Dataset, keep: set[str]) -> Dataset:
    """``ds`` restricted to the trials in ``keep`` (one phase's trials and its predecessors')."""
    return replace(
        ds,
        trials=ds.trials[ds.trials["trial"].isin(keep)],
        items=ds.items[ds.items["trial"].isin(keep)],
        given_up=tuple(g for g in ds.given_up if g in keep),
        excluded_trials=tuple(g for g in ds.excluded_trials if g in keep),
    )  # every other member (models, variants, cloze, ...) as the whole study's


def _phase_parts(
    ds: Dataset,
    plan: dict[str, Any],
    fit: stats.MixedModelFit | None,
    phases: Mapping[str, int] | None,
    hypothesis_phases: Mapping[str, int] | None,
) -> list[tuple[dict[str, Any], Dataset, stats.MixedModelFit | None]]:
    """(the plan with one phase's hypotheses, the data up to that phase, its model fit).

    One part per phase that locked hypotheses, in phase order. The last phase of the study
    uses the whole dataset and ``fit``; an earlier phase gets its own data and its own fit.
    A study not locked in phases gets one part: the whole plan, data and fit.
    """
    if not phases or not hypothesis_phases:
        return [(plan, ds, fit)]
    last = max(phases.values())
    levels = sorted({hypothesis_phases.get(h["id"], 0) for h in plan["hypotheses"]})
    out: list[tuple[dict[str, Any], Dataset, stats.MixedModelFit | None]] = []
    for level in levels:
        part = {
            **plan,
            "hypotheses": [
                h for h in plan["hypotheses"] if hypothesis_phases.get(h["id"], 0) == level
            ],
        }
        if level >= last:
            out.append((part, ds, fit))
            continue
        sub = phase_dataset(ds, {t for t, p in phases.items() if p <= level})
        _, sub_fit = fit_model(sub, plan)
        out.append((part, sub, sub_fit))
    return out


SENSITIVITY_MODELS = ("registered", "probe_by_arm", "probe_by_arm_arm_residual")
"""The models of ``sensitivity.lmm``, in order (``docs/statistics.md``, "Sensitivity")."""
SENSITIVITY_NAMES = {
    "registered": "registered random-intercept (Satterthwaite df, expected information)",
    "probe_by_arm": "probe-by-arm",
    "probe_by_arm_arm_residual": "probe-by-arm with a residual variance per arm",
}
"""How the report names each sensitivity model."""


def _support(
    h: dict[str, Any], registered: dict[str, Any], p: float | None, estimate: float | None
) -> bool | None:
    """Whether the registered decision rule would hold with this p and estimate.

    The registered correction's factor (``p_adjusted / p_raw``) is applied; ``None`` without a p.
    """
    if p is None or estimate is None or not math.isfinite(p):
        return None
    raw, adjusted = registered.get("p_raw"), registered.get("p_adjusted")
    factor = adjusted / raw if isinstance(adjusted, float) and raw else 1.0
    ok = min(1.0, p * factor) < float(h.get("alpha") or 0.05)
    if (h.get("sides") or "two-sided") == "one-sided":
        ok = ok and estimate > 0
    if h.get("min_difference_pp") is not None:
        ok = ok and estimate * 100 >= float(h["min_difference_pp"])
    return bool(ok)


def sensitivity_lmm(
    ds: Dataset,
    plan: dict[str, Any],
    fit: stats.MixedModelFit | None,
    tested: list[Result],
    model: str | None = None,
    plan_fits: bool = False,
) -> Result | None:
    """``sensitivity.lmm``: the registered mixed model's contrasts under other assumptions.

    Labelled sensitivity; never changes a verdict. ``None`` when the plan has no ``lmm``
    hypothesis. With several models ``fit`` is the pooled ``model.lmm`` (the model a fixed
    factor, kept in every sensitivity model); ``model`` names one model's copy,
    ``sensitivity.lmm@<model>`` on that model's dataset and ``model.lmm@<model>`` fit, whose
    rows are the ``<id>@<model>`` hypotheses (:func:`sensitivity_per_model`).
    ``plan_fits`` (``ledger plan`` only, ``docs/planning.md`` §3): each REML fit starts at the
    study's method-of-moments variances (:func:`analysis._sensitivity.moment_starts`, the fit's
    ``warm``) and takes its Newton steps with the observed Hessian in closed form (its
    ``exact``); the analysis never passes it.
    """
    from analysis import _sensitivity as sens

    modelled = [h for h in plan["hypotheses"] if statistics.is_mixed_model(h)]
    lmm = [h for h in modelled if not h.get("stimuli")]
    subsets = [h for h in modelled if h.get("stimuli")]
    if not (lmm or subsets):
        return None
    suffix = f"@{model}" if model is not None else ""
    r = Result(
        f"sensitivity.lmm{suffix}",
        "Sensitivity analyses of the registered mixed model (not registered: they never "
        "change a verdict)" + (f" (model {model})" if model is not None else ""),
        "sensitivity",
        "lmm-sensitivity",
    )
    by_id = {x.hypothesis: x for x in tested}
    design = plan["design"]

    def block(
        t: pd.DataFrame, fit: stats.MixedModelFit, hyps: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The sensitivity models of ``fit``'s data ``t`` and the rows of ``hyps``."""
        t = t[t["arm"].astype(str).isin(set(fit.arms))]
        group = fit.group_col
        y = t["accuracy"].to_numpy(dtype=np.float64)
        arm = t["arm"].astype(str).to_numpy()
        groups = t[group].astype(str).tolist()
        others = list(fit.arms[1:])
        exog = sens.design_matrix(
            arm.tolist(),
            others,
            t["model"].astype(str).tolist(),
            fit.factor_references[0] if fit.factors else None,
        )
        cells = [f"{g}|{a}" for g, a in zip(groups, arm, strict=True)]
        one = [""] * y.size
        fits: dict[str, Any] = {}
        models: dict[str, Any] = {}
        reg = sens.fit_at(
            y,
            exog,
            groups,
            [groups],
            one,
            ["group", "residual"],
            [fit.group_variance, fit.residual_variance],
        )
        fits["registered"] = reg
        models["registered"] = {
            "fitted": True,
            "log_likelihood": reg.loglik,
            "variances": {"group": fit.group_variance, "residual": fit.residual_variance},
        }
        why = sens.not_fittable(arm.tolist(), groups, False)
        left = sens.cell_residuals(y, exog, cells, arm.tolist()) if why is None else {}
        tiny = 1e-12 * max(float(np.sum((y - y.mean()) ** 2)), 1e-300)
        for name in SENSITIVITY_MODELS[1:]:
            reason = why
            classes = one if name == "probe_by_arm" else arm.tolist()
            if reason is None and name == "probe_by_arm" and sum(left.values()) <= tiny:
                reason = (
                    "no trial differs from the others of its probe × arm cell beyond the "
                    "fixed effects: the residual variance cannot be separated from the "
                    "probe-by-arm variance"
                )
            if reason is None and name == "probe_by_arm_arm_residual":
                # each arm's probes' variances: one grouping by (arm, probe), the same
                # groups with their trials in the same order as one grouping per arm
                spreads = t["accuracy"].groupby([arm, t[group].to_numpy()]).var(ddof=1).fillna(0.0)
                for a in sorted(set(arm.tolist())):
                    mine = spreads.index.get_level_values(0) == a
                    spread = spreads[mine]
                    if float(spread.max()) <= 0.0 or left[a] <= tiny:
                        reason = (
                            f"arm {a} has zero residual variance (every trial of a probe "
                            "scores the same, e.g. at ceiling): a residual variance per "
                            "arm cannot be estimated"
                        )
                        break
            if reason is not None:
                models[name] = {"fitted": False, "reason": reason}
                continue
            labels = sorted(set(classes))
            names = ["group", "group_by_arm"] + (
                ["residual"] if name == "probe_by_arm" else [f"residual[{c}]" for c in labels]
            )
            try:
                f = sens.fit_reml(
                    y,
                    exog,
                    groups,
                    [groups, cells],
                    classes,
                    names,
                    label=f"sensitivity model {name}",
                    warm=(
                        sens.moment_starts(
                            y,
                            exog,
                            groups,
                            cells,
                            classes,
                            left if name != "probe_by_arm" else {"": sum(left.values())},
                        )
                        if plan_fits
                        else None
                    ),
                    exact=plan_fits,
                )
            except (ValueError, np.linalg.LinAlgError) as exc:
                models[name] = {"fitted": False, "reason": f"the REML fit failed: {exc}"}
                continue
            fits[name] = f
            entry: dict[str, Any] = {
                "fitted": True,
                "log_likelihood": f.loglik,
                "variances": dict(zip(names, (float(v) for v in f.params), strict=True)),
            }
            if name == "probe_by_arm":
                chi2 = max(0.0, 2.0 * (f.loglik - fits["registered"].loglik))
                entry["lrt_chi2"] = chi2
                entry["lrt_p"] = 0.5 * float(sps.chi2.sf(chi2, 1)) if chi2 > 0 else 1.0
            models[name] = entry
        contrasts = []
        for h in hyps:
            a, b = h["contrast"]
            sides = h.get("sides") or "two-sided"
            hid = h["id"] + suffix
            hyp = by_id.get(hid)
            registered = (hyp.values or {}) if hyp is not None else {}
            weights = np.zeros(exog.shape[1])
            for level, sign in ((a, 1.0), (b, -1.0)):
                if level in others:
                    weights[1 + others.index(level)] += sign
            row: dict[str, Any] = {
                "hypothesis": hid,
                "a": a,
                "b": b,
                "sides": sides,
                "as_registered": {
                    k: registered.get(k)
                    for k in ("estimate", "lower", "upper", "p_raw", "p_adjusted")
                },
                "registered_verdict": hyp.verdict if hyp is not None else None,
            }
            for name in SENSITIVITY_MODELS:
                if name in fits:
                    c = sens.satterthwaite_contrast(fits[name], weights, sides)
                    c["supports"] = _support(h, registered, c["p"], c["estimate"])
                    row[name] = c
                else:
                    row[name] = None
            diffs = sens.group_differences(
                groups, t["model"].astype(str).tolist(), arm.tolist(), y, a, b
            )
            boot = sens.cluster_bootstrap(
                np.asarray(diffs),
                int(design["bootstrap_iterations"]),
                int(design["bootstrap_seed"]),
                sides,
            )
            lower_ok = boot["lower"] > 0
            boot["supports"] = bool(
                lower_ok if sides == "one-sided" else lower_ok or boot["upper"] < 0
            )
            row["cluster_bootstrap"] = boot
            primary = next(
                (m for m in ("probe_by_arm_arm_residual", "probe_by_arm") if row[m] is not None),
                None,
            )
            row["primary"] = primary
            row["supports"] = row[primary]["supports"] if primary else None
            if (
                primary is not None
                and row["registered_verdict"] == "supported"
                and row["supports"] is False
            ):
                row["flag"] = (
                    f"{hid} is supported as registered, but not under the "
                    f"{SENSITIVITY_NAMES[primary]} model (p "
                    f"{row[primary]['p']:.3g}, Satterthwaite df from the "
                    f"expected information {row[primary]['df']:.3g})"
                )
            contrasts.append(row)
        return models, contrasts

    def compute() -> None:
        if fit is None:
            raise stats.StatsError("the registered mixed model could not be fitted")
        models, contrasts = block(_trial_outcome(ds), fit, lmm)
        for h in subsets:  # its own subset model, as hypothesis_results fits it
            sub = _stimulus_subset(ds, h["stimuli"])
            sub_plan = {
                **plan,
                "analysis": {
                    k: v for k, v in (plan.get("analysis") or {}).items() if k != "model_arms"
                },
            }
            fitted, sub_fit = fit_model(sub, sub_plan)
            if sub_fit is None:
                contrasts.append(
                    {
                        "hypothesis": h["id"] + suffix,
                        "stimuli": list(h["stimuli"]),
                        "error": f"the subset model could not be fitted: {fitted.error}",
                    }
                )
                continue
            sub_models, rows = block(_trial_outcome(sub), sub_fit, [h])
            rows[0]["stimuli"] = list(h["stimuli"])
            rows[0]["subset_models"] = sub_models
            contrasts.append(rows[0])
        r.values = {
            "group_col": fit.group_col,
            "reference": fit.reference,
            "n_groups": fit.n_groups,
            "models": models,
            "contrasts": contrasts,
        }
        if fit.factors:  # the pooled fit of several models: the model a fixed factor
            r.values["factors"] = list(fit.factors)
            r.values["factor_references"] = list(fit.factor_references)
        if model is not None:
            r.values["model"] = model

    return _guard(r, compute)


def sensitivity_per_model(ds: Dataset, plan: dict[str, Any], tested: list[Result]) -> list[Result]:
    """``sensitivity.lmm@<model>`` for each model in model order (several models only).

    Each is :func:`sensitivity_lmm` on that model's trials alone, around its own
    ``model.lmm@<model>`` fit (refitted here: the same function on the same data), with rows
    for the ``<id>@<model>`` hypotheses; ``[]`` for a one-model study or a plan without ``lmm``.
    """
    if not ds.several_models:
        return []
    out = []
    for model in ds.models:
        sub = ds.for_model(model)
        _, sub_fit = fit_model(sub, plan)
        r = sensitivity_lmm(sub, plan, sub_fit, tested, model=model)
        if r is not None:
            out.append(r)
    return out


def mcq_descriptive(ds: Dataset, plan: dict[str, Any]) -> Result | None:
    """``descriptive.mcq`` when the plan registers a seed-002 test (else None).

    Accuracy with Wilson intervals per (arm, variant, model) and the mean and t interval over
    each arm's shuffle seeds (``docs/mcq-statistics.md`` §11).
    """
    from analysis.mcq import _kinds as mcq_tests

    if not statistics.registers_seed002(plan):
        return None
    r = Result(
        "descriptive.mcq",
        "Accuracy per arm, variant and model (Wilson 95%); means over shuffle seeds (t interval)",
        "descriptive",
        "wilson, mean-over-seeds",
    )

    def compute() -> None:
        r.values = mcq_tests.mcq_descriptive_values(ds, plan)

    return _guard(r, compute)


def qr_descriptive(ds: Dataset, plan: dict[str, Any]) -> Result | None:
    """``descriptive.qr_bootstrap`` when the plan registers a qr-bootstrap test (else None).

    Default accuracy, success rate and perturbed accuracy (or an outcome's means and
    difference) with their (question, run) bootstrap intervals, pooled and per model
    (``docs/statistics.md``, "(question, run) bootstrap as a registered test").
    """
    from analysis import _qr_boot as qr_boot

    if not qr_boot.registers_qr(plan):
        return None
    r = Result(
        "descriptive.qr_bootstrap",
        "Default accuracy, success rate and perturbed "
        "accuracy, bootstrap over (question, run) observations (95%)",
        "descriptive",
        "qr-bootstrap",
    )

    def compute() -> None:
        r.values = qr_boot.descriptive_values(ds, plan)

    return _guard(r, compute)


def run_analyses(
    ds: Dataset,
    plan: dict[str, Any],
    phases: Mapping[str, int] | None = None,
    hypothesis_phases: Mapping[str, int] | None = None,
) -> list[Result]:
    """Every result, in a fixed order: descriptive, model, hypotheses, exploratory.

    ``phases`` maps each trial id to the index of the phase that scheduled it, and
    ``hypothesis_phases`` each hypothesis id to the index of the phase that locked it (a study
    locked in phases, ``runner._phases``): a hypothesis of phase *k* is then tested, with its
    own mixed model, on the trials of phases up to *k* only, so a later phase never moves an
    earlier phase's confirmatory result (``docs/analysis.md``, "Phases").
    """
    if ds.trials.empty:
        empty = Result(
            "descriptive.arms",
            f"{_unit(plan)} by arm",
            "descriptive",
            "wilson",
            status="failed",
            error="no scored trials: nothing to analyse",
        )
        failed = [empty]
        for h in plan["hypotheses"]:
            failed.append(
                Result(
                    f"hypothesis.{h['id']}",
                    h["description"],
                    "pre-registered",
                    h["test"],
                    hypothesis=h["id"],
                    status="failed",
                    verdict="not computed",
                    error="no scored trials",
                )
            )
        return failed
    if ds.ddx:  # docs/analysis.md §9: the metrics per arm and model, then the hypotheses
        return ddx_results(ds, plan)
    out = descriptive(ds, plan)
    extra_mcq = mcq_descriptive(ds, plan)
    if extra_mcq is not None:
        out.append(extra_mcq)
    extra_qr = qr_descriptive(ds, plan)
    if extra_qr is not None:
        out.append(extra_qr)
    model, fit = fit_model(ds, plan)
    out.append(model)
    tested: list[Result] = []
    parts = _phase_parts(ds, plan, fit, phases, hypothesis_phases)
    for part, sub, sub_fit in parts:
        pooled = hypothesis_results(sub, part, sub_fit)
        if sub.several_models:
            fits, by_model = per_model_results(sub, part)
            if sub is ds:  # the whole study's per-model fits; an earlier phase's stay internal
                out.extend(fits)
            for h, r in zip(part["hypotheses"], pooled, strict=True):
                tested += [r, *by_model[h["id"]]]
        else:
            tested += pooled
    order = {h["id"]: i for i, h in enumerate(plan["hypotheses"])}
    tested.sort(key=lambda r: order[str(r.hypothesis).split("@", 1)[0]])
    out.extend(tested)
    out.extend(exploratory(ds, plan))
    out.append(multiplicity(tested))
    last_part = parts[-1][0] if parts[-1][1] is ds else {**plan, "hypotheses": []}
    extra = sensitivity_lmm(ds, last_part, fit, tested)  # the whole data's hypotheses only
    if extra is not None:
        out.append(extra)
    out.extend(sensitivity_per_model(ds, last_part, tested))
    out.extend(review_results(ds, plan))
    return out


def ddx_results(ds: Dataset, plan: dict[str, Any]) -> list[Result]:
    """A ddx study's results: ``descriptive.ddx``, each hypothesis (and per model), multiplicity.

    The trial-accuracy results (the mixed model, the exploratory contrasts) do not apply: a
    differential list has metrics, not a correct answer (``docs/analysis.md`` §9).
    """
    from analysis._ddx import descriptive_values

    r = Result(
        "descriptive.ddx",
        "Differential-diagnosis metrics by arm (means over the trials where each is defined)",
        "descriptive",
        "mean",
    )

    def compute() -> None:
        r.values = descriptive_values(ds.trials, ds.several_models)

    out = [_guard(r, compute)]
    tested: list[Result] = []
    pooled = hypothesis_results(ds, plan, None)
    by_model = (
        {m: hypothesis_results(ds.for_model(m), plan, None) for m in ds.models}
        if ds.several_models
        else {}
    )
    for i, result in enumerate(pooled):
        tested += [result, *(_for_model(by_model[m][i], m) for m in by_model)]
    out.extend(tested)
    out.append(multiplicity(tested))
    return out


def review_results(ds: Dataset, plan: dict[str, Any]) -> list[Result]:
    """One ``review.<NAME>`` per declared contrast review sample, in name order.

    (:mod:`analysis._review`; a ``judge-label`` sample is labelled by reviewers instead.)
    """
    from analysis._review import review_values
    from analysis.mcq import _stats as mcq

    out = []
    for name, review in sorted((plan.get("reviews") or {}).items()):
        if review.get("kind") != "contrast":
            continue
        r = Result(
            f"review.{name}",
            f"Review sample {name}: {review['failed']['arm']} wrong, "
            f"{review['succeeded']['arm']} right",
            "descriptive",
            "review-sample",
        )

        def compute(r: Result = r, review: dict[str, Any] = review) -> None:
            try:
                r.values = review_values(ds, plan, review)
            except mcq.McqError as exc:
                raise stats.StatsError(str(exc)) from None

        out.append(_guard(r, compute))
    return out


def _review_tables(
    log: Ledger, plan: dict[str, Any], study: Any, results: list[Result]
) -> list[Result]:
    """The tables of the recorded human reviews (:func:`analysis._review.review_tables`)."""
    from analysis._review import review_tables

    drawn = {r.id: r.values for r in results if r.status == "ok" and r.values is not None}
    out = []
    for rid, title, test, compute in review_tables(log, plan, study, drawn):
        r = Result(rid, title, "descriptive", test)

        def run(r: Result = r, compute: Any = compute) -> None:
            r.values = compute()

        out.append(_guard(r, run))
    return out


@dataclass(frozen=True)
class AnalyzeResult:
    """What :func:`analyze_study` recorded, and the study's provenance.

    ``provenance`` (not recorded: recomputable from the ledger) holds the ``environment``
    ``protocol.locked`` recorded and the responses whose reported model is not the one
    requested (``model_mismatches``, a count, and ``first_mismatches``, the first five:
    :func:`runner._provenance.model_mismatches`), and ``model_identity_warnings``: each locked
    model the server did not list or could not be asked about
    (:func:`runner._identity.recorded_warnings`).
    """

    results: list[dict[str, Any]]
    first_seq: int
    dataset_sha256: str
    provenance: dict[str, Any] = field(default_factory=dict)


def _study_dataset(
    study: Any, log: Ledger, plan: dict[str, Any], observe: Callable[[Any], None] | None = None
) -> Dataset:
    """The analysis dataset of the study's ledger, as the plan reads it, with factor labels.

    ``observe`` sees every event of the ledger's one pass (:func:`load_dataset`).
    """
    from analysis._covariates import covariate_columns
    from analysis._factorial import plan_cells

    settings = plan.get("analysis", {})
    sources = stimulus_sources(study) if settings.get("random_intercept") == "source" else {}
    ds = load_dataset(
        log,
        exclude_unparseable=bool(settings.get("exclude_unparseable", True)),
        parser=str((plan.get("response") or {}).get("parser", TUMBLING_E)),
        sources=sources,
        models=models(plan),
        variants=bool(plan.get("variants")),
        factorial=plan_cells(plan),
        observe=observe,
    )
    with_labels, labels = covariate_columns(ds.trials, plan, study, log)
    if labels:  # docs/analysis.md §11: factor labels
        ds = replace(ds, trials=with_labels, covariates=labels)
    return ds


def _study_results(
    study: Any, log: Ledger, plan: dict[str, Any], ds: Dataset, results: list[Result]
) -> list[Result]:
    """The results that read more than the dataset, after :func:`run_analyses`'s.

    Judge agreement, review tables, outcomes by factor label, identical responses.
    """
    from analysis._covariates import covariates_title, covariates_values

    parser = str((plan.get("response") or {}).get("parser", TUMBLING_E))
    out: list[Result] = []
    if parser.startswith("judge:"):  # docs/analysis.md §8: exploratory judge agreement
        out.append(judge_agreement(log, plan, parser.split(":", 1)[1]))
    out += _review_tables(log, plan, study, results + out)  # docs/analysis.md §10
    if ds.covariates:
        strata = Result("descriptive.covariates", covariates_title(plan), "descriptive", "mean")

        def compute_strata() -> None:
            strata.values = covariates_values(ds.trials, ds.ddx, plan)

        out.append(_guard(strata, compute_strata))
    copies = _identical_responses(log, ds)  # docs/analysis.md §3: pseudo-replication
    if copies is not None:
        out.append(copies)
    return out


class _Provenance:
    """The responses' provenance, gathered event by event from the dataset's one pass.

    Each ``trial.responded`` and ``run.preflight`` whose reported model is not the one
    requested (:func:`runner._provenance.model_mismatches`, in seq order) and the sessions
    (``run.started``, ``run.preflight``: a few) for their warnings; analysing adds neither kind,
    so this is what a pass after the results are appended read (issue 41: one pass, not two).
    """

    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        self.sessions: list[Any] = []
        self.mismatches: list[Any] = []

    def __call__(self, event: Any) -> None:
        kind = event.kind
        if kind in ("run.started", "run.preflight"):
            self.sessions.append(event)
        if kind in ("trial.responded", "run.preflight"):
            self.mismatches += model_mismatches(self.plan, (event,))


def forget_derived(ds: Dataset) -> None:
    """Drop what the analyses cached on ``ds`` (analysable items, outcomes, stimulus subsets).

    They are recomputed on demand; dropping them before the CSVs are written keeps the peak
    of ``ledger analyze`` at one item table and its CSV, not two tables (issue 41).
    """
    for name in ("_analysable_items", "_trial_outcome", "_outcome_arrays", "_stimulus_subsets"):
        ds.__dict__.pop(name, None)


def _dataset_csvs(ds: Dataset) -> tuple[bytes, bytes]:
    """``trials.csv`` and ``items.csv`` of ``ds``, its cached derived tables dropped first."""
    forget_derived(ds)
    return ds.trials_csv(), ds.items_csv()


def analyze_study(root: str | Path, key: SigningKey) -> AnalyzeResult:
    """Run the locked plan on the scored data; append one ``analysis.result`` per result."""
    root = Path(root)
    study = check_integrity(root)
    with Ledger.open(ledger_path(root)) as log:
        done = next(iter(log.events("analysis.result")), None)
        if done is not None:
            raise StudyError(f"{root}: already analysed (analysis.result from seq {done.seq})")
        protocol = protocol_event(log)
        assert protocol is not None
        plan = protocol.body
        provenance = _Provenance(plan)
        ds = _study_dataset(study, log, plan, provenance)
        trial_phase = trial_phases(log) if len(protocol_events(log)) > 1 else None
        results = run_analyses(ds, plan, trial_phase, hypothesis_phases(plan, log))
        results += _study_results(study, log, plan, ds, results)
        trials_csv, items_csv = _dataset_csvs(ds)
        scores_sha256 = ds.scores_sha256
        del ds  # issue 41: the tables are not held beside their CSV while it is appended
        policy = SealPolicy.from_protocol(plan)  # docs/privacy.md: withheld datasets are sealed
        trials_csv = policy.seal_now("analysis.result", "trials_csv", trials_csv)
        items_csv = policy.seal_now("analysis.result", "items_csv", items_csv)
        inputs = {
            "scores_sha256": scores_sha256,
            "trials_csv_sha256": hashlib.sha256(trials_csv).hexdigest(),
            "items_csv_sha256": hashlib.sha256(items_csv).hexdigest(),
            "protocol_seq": protocol.seq,
        }
        specs = [
            EventSpec(
                "analysis.result",
                r.as_dict() | {"inputs": inputs},
                {"trials_csv": trials_csv, "items_csv": items_csv} if i == 0 else None,
            )
            for i, r in enumerate(results)
        ]
        events = log.append_many(specs, key=key)
        log.sign_checkpoint(key)
    mismatches = provenance.mismatches
    warned = recorded_warnings(provenance.sessions)
    recorded = {
        "environment": plan.get("environment"),
        "model_mismatches": len(mismatches),
        "first_mismatches": [m.as_dict() for m in mismatches[:5]],
        "model_identity_warnings": [{"seq": seq, "warning": line} for seq, line in warned],
    }
    return AnalyzeResult(
        [r.as_dict() for r in results], events[0].seq, inputs["trials_csv_sha256"], recorded
    )
