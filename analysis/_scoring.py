"""``ledger score`` and ``ledger unblind``: blinded scoring, the seal, and the commit-reveal.

Scoring reads each recorded response and hands the scorer a :class:`BlindTrial`: the response
bytes, their wire format, the stimulus id and the *arm code* (``HMAC-SHA256(secret, arm)``
truncated, ``docs/randomization.md``), never the arm, the trial id or the request. The scorer
(:func:`score_blind`) is a pure function of that record and the locked truth table, so the
same response always gets the same bytes, whatever arm it came from.

Events (``docs/trials.md`` §4): one ``trial.scored`` per response (blob ``scores``: the
per-item JSON of ``docs/scoring.md``), then, once every scheduled trial has a final outcome,
``scoring.sealed`` with the hash of all scores. ``ledger unblind`` refuses before the seal,
checks the blinding secret against the commitment made at lock, and appends
``blinding.revealed`` with the secret and every arm's code.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import rfc8785

from analysis._parse import ParserConfig, parse_response
from analysis._score import (
    ChartTruth,
    ScoreRecord,
    TrialScore,
    prepare_chart,
    score_judged,
    score_parsed,
    score_record,
)
from ledger import Event, EventSpec, Ledger, SigningKey, canonical_json
from runner import (
    Glyph,
    StudyError,
    arm_code,
    blinding_secret,
    check_integrity,
    commitment,
    ledger_path,
    load_state,
    protocol_event,
    study_truth,
    variant_truth,
)
from runner.spec import Study

BATCH = 2000
"""``trial.scored`` events appended per transaction (one signed batch, one fsync)."""


@dataclass(frozen=True)
class BlindTrial:
    """Everything the scorer may see of one response."""

    response_seq: int
    arm_code: str
    stimulus: str
    raw: bytes
    format: str
    variant: str | None = None


def score_blind(
    trial: BlindTrial, parser: str | ParserConfig, truth: list[Glyph] | str
) -> TrialScore:
    """Parse and score one blinded response against its stimulus's truth.

    ``parser`` is the study's :class:`~analysis._parse.ParserConfig` (or a parser name, with
    its defaults); ``truth`` is the stimulus's entry of :func:`runner._truth.study_truth`.
    """
    config = parser if isinstance(parser, ParserConfig) else ParserConfig(parser)
    raw, fmt = unwrap_batch(trial.raw, trial.format)
    return score_parsed(parse_response(raw, fmt, config), config.parser, truth)


def record_blind(
    trial: BlindTrial, config: ParserConfig, truth: list[Glyph] | ChartTruth | str
) -> ScoreRecord:
    """:func:`score_blind` as the :class:`~analysis._score.ScoreRecord` ``trial.scored`` records.

    The same pure function of the blinded record and the truth; with a
    :class:`~analysis._score.ChartTruth` (the chart prepared once per stimulus) it builds no
    per-item objects, which is how :func:`score_study` scores a large study.
    """
    raw, fmt = unwrap_batch(trial.raw, trial.format)
    return score_record(parse_response(raw, fmt, config), config.parser, truth)


def unwrap_batch(raw: bytes, format: str) -> tuple[bytes, str]:
    """A stored response body and its format as the parser reads them.

    A Message Batches result line (``anthropic-batch-result``) becomes its message
    (:func:`batch_message`) in ``anthropic-messages`` format; any other body is returned as is.
    """
    if format == "anthropic-batch-result":
        return batch_message(raw), "anthropic-messages"
    return raw, format


def batch_message(line: bytes) -> bytes:
    """The ``result.message`` object of a Message Batches result line, as JSON bytes.

    The runner stores the raw JSONL line; its message is re-encoded canonically (RFC 8785),
    which keeps every text block exactly. A line without a message gives ``b"null"``, which
    the parser reports as unparseable.
    """
    import json

    try:
        message = json.loads(line)["result"]["message"]
    except (ValueError, KeyError, TypeError):
        return b"null"
    return bytes(rfc8785.dumps(message))


def scores_digest(pairs: list[tuple[int, str]]) -> str:
    """SHA-256 of the canonical JSON list ``[[response_seq, scores_sha256], ...]`` by seq."""
    return hashlib.sha256(canonical_json([[s, h] for s, h in sorted(pairs)])).hexdigest()


@dataclass(frozen=True)
class ScoreResult:
    """What :func:`score_study` did."""

    scored: int
    already: int
    by_status: dict[str, int]
    sealed_seq: int | None
    pending: int


def _find(log: Ledger, kind: str) -> Any:
    return next(iter(log.events(kind)), None)


def _arm_codes(study: Study) -> dict[str, str]:
    secret = blinding_secret(study)
    return {arm: arm_code(secret, arm) for arm in study.arms}


def score_study(root: str | Path, key: SigningKey, *, workers: int | None = None) -> ScoreResult:
    """Score every response not yet scored; seal once every trial has a final outcome.

    ``workers`` is how many forked processes parse and score the responses while this one
    signs and appends their ``trial.scored`` events in order (``docs/scoring.md`` §13): None
    for one per core when there are at least :data:`POOL_MIN` responses to score (and the
    system can fork), 0 to score in this process. The events are the same bytes either way.
    """
    root = Path(root)
    study = check_integrity(root)
    truth = study_truth(study)
    varied = variant_truth(study)
    codes = _arm_codes(study)
    with Ledger.open(ledger_path(root)) as log:
        sealed = _find(log, "scoring.sealed")
        if sealed is not None:
            raise StudyError(f"{root}: scoring was sealed at seq {sealed.seq}; nothing to score")
        protocol = protocol_event(log)
        assert protocol is not None  # check_integrity refuses a study that is not locked
        config = ParserConfig.from_plan(protocol.body.get("response") or {})
        private = "trial.responded:response" in (protocol.body.get("privacy") or {}).get(
            "withhold", ()
        )
        seen = _Seen()
        state = load_state(study, log, observe=seen.take)  # one pass over the log
        scored, requests = seen.scored, seen.requests
        specs: list[EventSpec] = []
        by_status: dict[str, int] = {}
        count = 0
        judges = Judges(study, log) if study.parser.startswith("judge:") else None
        ddx_work = _step_work(study, log) if study.ddx is not None else None
        unjudged = 0
        todo = [r for r in seen.responded if r[0] not in scored]
        if judges is None and ddx_work is None:  # the study's own parser, one response each
            scorer = _Scorer(config, truth, varied)
            responses = _Responses(str(root), log, key, study, codes, private, scorer)
            count = responses.score(todo, requests, scored, by_status, workers)
            todo = []
        for seq, request_seq, _blob, _format in todo:
            trial_id, arm, stimulus, _variant = requests[request_seq]
            if ddx_work is not None:  # docs/scoring.md §12: scored from the recorded steps
                from analysis._ddx import score_trial

                found = score_trial(study, ddx_work, trial_id, stimulus)
                if found is None:
                    unjudged += 1  # a step call still to make: score after the next run
                    continue
                blob = found.pop("blob")
                by_status[found["status"]] = by_status.get(found["status"], 0) + 1
                specs.append(
                    EventSpec(
                        "trial.scored",
                        {
                            "response_seq": seq,
                            "arm_code": codes[arm],
                            "stimulus": stimulus,
                            "parser": study.parser,
                            **found,
                        },
                        {"scores": blob},
                    )
                )
                scored[seq] = found["scores_sha256"]
                count += 1
                continue
            assert judges is not None  # a study scored by its parser was scored above
            judged = judges.score(trial_id, truth[stimulus])
            if judged is None:
                unjudged += 1  # a judge call still to make: score after the next run
                continue
            result, record = judged
            by_status[result.status] = by_status.get(result.status, 0) + 1
            specs.append(
                EventSpec(
                    "trial.scored",
                    {
                        "response_seq": seq,
                        "arm_code": codes[arm],
                        "stimulus": stimulus,
                        "parser": study.parser,
                        "status": result.status,
                        "n_items": result.n_items,
                        "n_answered": result.n_answered,
                        "n_correct": result.n_correct,
                        "scores_sha256": result.sha256,
                        "problems": _problems(result.problems, private),
                        "judge": record,
                    },
                    {"scores": result.items_bytes()},
                )
            )
            scored[seq] = result.sha256
            count += 1
        if specs:
            _note_digests(scored, log.append_many(specs, key=key))
        pending = len(state.pending()) + unjudged
        sealed_seq = None
        if pending == 0:
            given_up = sum(s.given_up is not None for s in state.trials.values())
            seal = log.append(
                "scoring.sealed",
                {
                    "scored": len(scored),
                    "given_up": given_up,
                    "trials": len(state.order),
                    "scores_sha256": scores_digest(list(scored.items())),
                    "parser": study.parser,
                },
                key=key,
            )
            sealed_seq = seal.seq
            log.sign_checkpoint(key)
    return ScoreResult(count, len(scored) - count, by_status, sealed_seq, pending)


POOL_MIN = 4 * BATCH
"""Responses to score from which :func:`score_study` parses them in forked workers by default."""

Task = tuple[bytes, str, str, "str | None"]
"""What a worker is given of one response: (stored body, its format, stimulus, variant)."""


class _Scorer:
    """The blind scorer of one study: a response's body, format, stimulus and variant -> score.

    Built once per study (the parser's settings checked once, each chart's truth prepared
    once, on first use); called in this process or in a forked worker (:func:`_score_task`).
    """

    def __init__(
        self,
        config: ParserConfig,
        truth: dict[str, Any],
        varied: dict[tuple[str, str], tuple[str, str | None]],
    ) -> None:
        """The study's parser settings, its truth by stimulus and its varied keys."""
        self.config, self.truth, self.varied = config, truth, varied
        self.read = config.reader()
        self.charts: dict[str, ChartTruth] = {}

    def answer(self, stimulus: str, variant: str | None) -> tuple[Any, str | None]:
        """The truth a response is scored against and the variant's option order (or None)."""
        if variant is not None:  # docs/variants.md §5: the varied item's (remapped) key
            answer, order = self.varied[(stimulus, variant)]
            return answer, order
        found = self.truth[stimulus]
        if isinstance(found, str) or self.config.parser != "tumbling-e-json":
            return found, None
        chart = self.charts.get(stimulus)
        if chart is None:  # checked and prepared once per stimulus
            chart = self.charts[stimulus] = prepare_chart(found)
        return chart, None

    def __call__(self, task: Task) -> tuple[ScoreRecord, str]:
        """The :class:`ScoreRecord` of one response and its ``scores_sha256``.

        The scorer sees the response, its format and the stimulus's truth: the blind record of
        :func:`record_blind`, without building a :class:`BlindTrial` for each response.
        """
        raw, fmt, stimulus, variant = task
        answer, _order = self.answer(stimulus, variant)
        raw, fmt = unwrap_batch(raw, fmt)
        record = score_record(self.read(raw, fmt), self.config.parser, answer)
        return record, record.sha256


_FORKED: _Scorer | None = None
"""The scorer a forked worker inherits (set by :meth:`_Responses.score` before the fork)."""


def _score_tasks(tasks: list[Task]) -> list[tuple[ScoreRecord, str]]:
    """In a forked worker: the inherited scorer's score of each task, in order."""
    assert _FORKED is not None  # set before the pool forked
    return [_FORKED(task) for task in tasks]


class _Responses:
    """Scores a study's responses with its parser and appends ``trial.scored`` in seq order.

    The bodies are read :data:`BATCH` at a time. With workers, each batch is parsed and scored
    by the forked pool (in slices, one per worker) while this process signs and appends the
    batch before it; the events are built here, in order, from the workers' records, so their
    bytes do not depend on how many workers there were.
    """

    def __init__(
        self,
        root: str,
        log: Ledger,
        key: SigningKey,
        study: Study,
        codes: dict[str, str],
        private: bool,
        scorer: _Scorer,
    ) -> None:
        """The open ledger, the signing key, the arm codes, the privacy flag and the scorer."""
        self.root, self.log, self.key, self.study = root, log, key, study
        self.codes, self.private, self.score_with = codes, private, scorer

    def score(
        self,
        todo: list[tuple[int, int, str | None, str]],
        requests: dict[int, tuple[str, str, str, str | None]],
        scored: dict[int, str],
        by_status: dict[str, int],
        workers: int | None,
    ) -> int:
        """Score every response of ``todo`` (as :class:`_Seen` lists them); how many were."""
        global _FORKED
        if workers is None:
            workers = _default_workers(len(todo))
        if workers < 0:
            raise ValueError(f"workers must be 0 or more, not {workers}")
        batches = self._batches(todo, requests)
        if workers == 0:
            for part, tasks in batches:
                self._append(part, requests, list(map(self.score_with, tasks)), scored, by_status)
            return len(todo)
        import multiprocessing

        _FORKED = self.score_with
        try:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                waiting: tuple[list[Any], Any] | None = None
                for part, tasks in batches:
                    step = -(-len(tasks) // workers)
                    slices = [tasks[i : i + step] for i in range(0, len(tasks), step)]
                    job = pool.map_async(_score_tasks, slices, chunksize=1)
                    if waiting is not None:  # the batch before, signed while this one is parsed
                        self._append(waiting[0], requests, _joined(waiting[1]), scored, by_status)
                    waiting = (part, job)
                if waiting is not None:
                    self._append(waiting[0], requests, _joined(waiting[1]), scored, by_status)
        finally:
            _FORKED = None
        return len(todo)

    def _batches(
        self,
        todo: list[tuple[int, int, str | None, str]],
        requests: dict[int, tuple[str, str, str, str | None]],
    ) -> Iterator[tuple[list[tuple[int, int, str | None, str]], list[Task]]]:
        """The responses :data:`BATCH` at a time, with their bodies read in few queries."""
        for start in range(0, len(todo), BATCH):
            part = todo[start : start + BATCH]
            for seq, _request, blob, _format in part:
                if blob is None:
                    raise StudyError(f"{self.root}: trial.responded seq {seq} has no response blob")
            bodies = self.log.read_blobs(r[2] for r in part if r[2])
            tasks: list[Task] = []
            for _seq, request_seq, blob, fmt in part:
                _trial, _arm, stimulus, variant = requests[request_seq]
                tasks.append((bodies[cast(str, blob)], fmt, stimulus, variant))
            yield part, tasks

    def _append(
        self,
        part: list[tuple[int, int, str | None, str]],
        requests: dict[int, tuple[str, str, str, str | None]],
        records: list[tuple[ScoreRecord, str]],
        scored: dict[int, str],
        by_status: dict[str, int],
    ) -> None:
        """The ``trial.scored`` events of one batch, appended in one signed transaction."""
        parser, codes, private = self.study.parser, self.codes, self.private
        specs: list[EventSpec] = []
        for (seq, request_seq, _blob, _format), (rec, digest) in zip(part, records, strict=True):
            _trial, arm, stimulus, variant = requests[request_seq]
            by_status[rec.status] = by_status.get(rec.status, 0) + 1
            body: dict[str, Any] = {
                "response_seq": seq,
                "arm_code": codes[arm],
                "stimulus": stimulus,
            }
            if variant is not None:
                body["variant"] = variant
                order = self.score_with.varied[(stimulus, variant)][1]
                if order is not None:
                    body["order"] = order
            body["parser"] = parser
            body["status"] = rec.status
            body["n_items"] = rec.n_items
            body["n_answered"] = rec.n_answered
            body["n_correct"] = rec.n_correct
            body["scores_sha256"] = digest
            body["problems"] = _problems(rec.problems, private)
            specs.append(EventSpec("trial.scored", body, {"scores": rec.items_bytes}))
            scored[seq] = digest
        _note_digests(scored, self.log.append_many(specs, key=self.key))


def _joined(job: Any) -> list[tuple[ScoreRecord, str]]:
    """The records of a pool job of slices, in order."""
    return [record for part in job.get() for record in part]


def _default_workers(responses: int) -> int:
    """One worker per core for :data:`POOL_MIN` responses or more where processes can fork."""
    import multiprocessing
    import os

    cores = os.cpu_count() or 1
    if responses < POOL_MIN or cores < 2:
        return 0
    if "fork" not in multiprocessing.get_all_start_methods():
        return 0
    return cores


class _Seen:
    """What scoring needs of the log, taken event by event in the pass of ``load_state``.

    Only small tuples are kept (the repeated arm, stimulus, variant and format names shared,
    not copied), never envelopes, request bodies or responses: every ``trial.requested`` seq
    -> (trial id, arm, stimulus, variant); every ``trial.responded`` as (seq, request seq,
    response blob, format) in seq order; every ``trial.scored`` response seq -> its
    ``scores_sha256``.
    """

    def __init__(self) -> None:
        """Nothing seen yet."""
        self.requests: dict[int, tuple[str, str, str, str | None]] = {}
        self.responded: list[tuple[int, int, str | None, str]] = []
        self.scored: dict[int, str] = {}
        self._shared: dict[str, str] = {}

    def take(self, event: Event) -> None:
        """Keep what scoring needs of ``event`` (other kinds are ignored)."""
        kind, body, shared = event.kind, event.body, self._shared
        if kind == "trial.requested":
            arm, stimulus, variant = body["arm"], body["stimulus"], body.get("variant")
            self.requests[event.seq] = (
                body["trial"],
                shared.setdefault(arm, arm),
                shared.setdefault(stimulus, stimulus),
                None if variant is None else shared.setdefault(variant, variant),
            )
        elif kind == "trial.responded":
            fmt = str(body.get("format", "anthropic-messages"))
            self.responded.append(
                (
                    event.seq,
                    body["request_seq"],
                    event.blobs.get("response"),
                    shared.setdefault(fmt, fmt),
                )
            )
        elif kind == "trial.scored":
            self.scored[body["response_seq"]] = body["scores_sha256"]


def _problems(problems: tuple[str, ...] | list[str], private: bool) -> list[str]:
    """``trial.scored`` ``problems``: the first 20, or only their count when responses are private.

    A parser's message may quote a fragment of the response; under a privacy policy that
    withholds responses (``docs/privacy.md`` §3) the signed, public body says how many there
    were, never what they quote.
    """
    if private and problems:
        return [f"{len(problems)} problem(s), withheld with the response (docs/privacy.md)"]
    return [p[:300] for p in problems[:20]]


def _note_digests(scored: dict[int, str], events: Iterable[Event]) -> None:
    """Each appended score's ``scores_sha256`` as recorded (a sealed blob's commitment).

    Under a privacy policy that withholds ``trial.scored:scores`` the ledger seals the blob and
    records its commitment in place of the content hash (``docs/ledger-format.md`` §6.1); the
    seal's digest is over the recorded values.
    """
    for event in events:
        scored[int(event.body["response_seq"])] = str(event.body["scores_sha256"])


def _step_work(study: Study, log: Ledger) -> Any:
    """Every step call's state, rebuilt from ``log`` (the runner's projection)."""
    from runner import Renderer
    from runner.steps import StepWork

    work = StepWork(study, Renderer(study))
    work.load(log)
    return work


def _vote(call: Any, record: Any) -> dict[str, Any]:
    """One judge call's final vote: its value (when parsed), status and events."""
    value = record.value if record.responded is not None else None
    status = (
        "parsed"
        if record.responded is not None
        else "given-up"
        if record.given_up is not None
        else "unparseable"
    )
    return {
        "model": call.model or "",
        "vote": value,
        "status": status,
        "request_seq": record.last_request,
        "response_seq": record.responded or record.exhausted or record.given_up,
        "responses": record.unparseable + (record.responded is not None),
    }


class Judges:
    """The votes of a study's judge step (``[response] parser = "judge:<step>"``).

    A trial is scored from its judges' recorded responses alone (``docs/scoring.md`` §10): each
    judge call's parsed label (its vote; missing when its responses never parsed or it was
    given up), the aggregate under the locked rule, and the seqs of every call's request and
    final response. Call ids carry the trial id (and so the arm), so ``trial.scored`` names the
    calls by seq only.
    """

    def __init__(self, study: Study, log: Ledger) -> None:
        """Rebuild every step call's state from ``log``."""
        from runner import Renderer
        from runner.steps import StepWork

        self.study = study
        self.step = study.parser.split(":", 1)[1]
        self.spec = study.steps[self.step]
        self.work = StepWork(study, Renderer(study))
        self.work.load(log)

    def score(self, trial: str, truth: Any) -> tuple[TrialScore, dict[str, Any]] | None:
        """The score and the ``judge`` record of ``trial``; None while a judge call is due."""
        from runner.steps import aggregate, aggregate_record, trial_step_calls

        calls = trial_step_calls(self.spec, trial, self.work.trial_stimulus.get(trial, ""))
        votes: list[dict[str, Any]] = []
        values: list[Any] = []
        for call in calls:
            record = self.work.calls.get(call.id)
            if record is None or not record.final:
                if record is None and self.work.inputs(call) is None:
                    values.append(None)  # an input of the judge has no decision: no call
                    votes.append(
                        {
                            "model": call.model or "",
                            "vote": None,
                            "status": "no-input",
                            "request_seq": None,
                            "response_seq": None,
                            "responses": 0,
                        }
                    )
                    continue
                return None
            vote = _vote(call, record)
            values.append(vote["vote"])
            votes.append(vote)
        decision = aggregate(self.spec.aggregate, values, self.spec.sets)
        problems = []
        if decision is None:
            shown = ", ".join(
                str(v["vote"]) if v["vote"] is not None else f"({v['status']})" for v in votes
            )
            problems.append(
                f"the judges reached no decision under "
                f"{aggregate_record(self.spec.aggregate)}: {shown}"
            )
        record_out = {
            "step": self.step,
            "aggregate": aggregate_record(self.spec.aggregate),
            "decision": decision,
            "votes": votes,
        }
        return score_judged(decision, str(truth), problems), record_out


@dataclass(frozen=True)
class UnblindResult:
    """What :func:`unblind_study` revealed."""

    seq: int
    arm_codes: dict[str, str]
    commitment: str


def unblind_study(root: str | Path, key: SigningKey) -> UnblindResult:
    """Reveal the blinding secret after the seal, checked against the lock's commitment."""
    root = Path(root)
    study = check_integrity(root)
    with Ledger.open(ledger_path(root)) as log:
        if _find(log, "scoring.sealed") is None:
            raise StudyError(
                f"{root}: scoring is not sealed yet; run 'ledger score' after every trial has "
                "a final outcome (unblinding before the seal would break the blind)"
            )
        revealed = _find(log, "blinding.revealed")
        if revealed is not None:
            raise StudyError(f"{root}: already unblinded at seq {revealed.seq}")
        protocol = protocol_event(log)
        assert protocol is not None
        secret = blinding_secret(study)
        committed = protocol.body["blinding_commitment"]
        if commitment(secret) != committed:
            raise StudyError(
                f"{root}: the blinding secret does not open the commitment made at lock "
                f"(protocol.locked seq {protocol.seq}: {committed}); wrong secret source?"
            )
        codes = {arm: arm_code(secret, arm) for arm in study.arms}
        event = log.append(
            "blinding.revealed",
            {"secret_hex": secret.hex(), "commitment": committed, "arm_codes": codes},
            key=key,
        )
    return UnblindResult(event.seq, codes, committed)
