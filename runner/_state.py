"""Where a study stands: a projection of its trial events (nothing here is stored separately).

The ledger is event-sourced: the state of every trial (attempts, final outcome, a request still
waiting for its answer) is rebuilt from ``trial.requested``, ``trial.responded``,
``trial.failed`` and ``batch.submitted`` events each time it is needed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ledger import Event, Ledger
from runner._lock import StudyError, check_integrity, ledger_path, protocol_event
from runner._request import Trial
from runner._schedule import schedule, schedule_sha256
from runner.spec import Study

#: ``trial.failed`` error types that do not count against ``--max-attempts``: the outcome of an
#: interrupted call was never observed, a configuration error (a 404 from a wrong base URL)
#: is the run's fault, not the trial's, and a superseded attempt was answered after another
#: worker had recorded the trial's final outcome (``docs/trials.md`` §3, §8). Nor does
#: any failed attempt of a session that a configuration error stopped (:func:`load_state`).
NOT_COUNTED = frozenset({"interrupted", "configuration", "superseded"})


@dataclass
class TrialState:
    """The recorded history of one trial."""

    attempts: int = 0
    failures: int = 0
    responded: int | None = None
    given_up: int | None = None
    open_request: int | None = None
    open_batch: str | None = None
    open_session: int | None = None  # the run session of the open request
    cost_usd: float = 0.0
    excluded: int | None = None  # seq of its trial.excluded (docs/trials.md §5)

    @property
    def final(self) -> bool:
        """True once the trial has a response, was given up, or was excluded by a step."""
        return (
            self.responded is not None or self.given_up is not None or (self.excluded is not None)
        )


@dataclass
class StudyState:
    """Every trial's state, in schedule order, and the batches still open."""

    order: list[Trial]
    trials: dict[str, TrialState]
    open_batches: dict[str, list[int]] = field(default_factory=dict)
    cost_usd: float = 0.0
    sessions: int = 0

    def pending(self) -> list[Trial]:
        """Trials without a final outcome, in schedule order."""
        return [t for t in self.order if not self.trials[t.id].final]

    def dangling(self) -> list[tuple[Trial, int]]:
        """(trial, request seq) for requests with no outcome and no open batch."""
        return [
            (t, s.open_request)
            for t in self.order
            if (s := self.trials[t.id]).open_request is not None and s.open_batch is None
        ]


def locked_order(study: Study, log: Ledger) -> list[Trial]:
    """The locked schedule (the ``schedule`` blob of the ``protocol.locked`` in force).

    Checked against its ``schedule_sha256`` and against the spec: the schedule derived from
    ``study.toml`` is the locked one (for a study locked in phases, each phase's new trials
    follow the earlier phases' in the seed's order, ``runner._phases``).
    """
    protocol = protocol_event(log)
    if protocol is None:
        raise StudyError(f"{study.root}: the study is not locked yet; run 'ledger lock' first")
    ids = log.blob(protocol.blobs["schedule"]).decode("utf-8").splitlines()
    derived = study.trial_ids()
    phased = "phase" in protocol.body and protocol.body["phase"]["index"] > 0
    if (
        schedule_sha256(ids) != protocol.body["schedule_sha256"]
        or (not phased and ids != schedule(study.seed, derived))
        or (phased and set(ids) != set(derived))
    ):
        raise StudyError(
            f"{study.root}: the schedule derived from study.toml does not match the locked "
            f"schedule_sha256 (protocol.locked seq {protocol.seq})"
        )
    return [Trial.from_id(tid, i) for i, tid in enumerate(ids, 1)]


def load_state(
    study: Study, log: Ledger, observe: Callable[[Event], None] | None = None
) -> StudyState:
    """Rebuild every trial's state from the ledger.

    ``observe``, when given, is called with every event of the same pass, in seq order (after
    the state has taken it), so a caller that needs its own projection of the log (``ledger
    score``: requests, responses and scores) reads the log once.
    """
    replay = _Replay(locked_order(study, log), log)
    for event in log.events():
        handler = _HANDLERS.get(event.kind)
        if handler is not None:
            handler(replay, event)
        if observe is not None:
            observe(event)
    return replay.finish()


class _Replay:
    """The trials' state, event by event (:func:`load_state`)."""

    def __init__(self, order: list[Trial], log: Ledger) -> None:
        self.log = log
        self.trials = {t.id: TrialState() for t in order}
        self.state = StudyState(order, self.trials)
        self.request_trial: dict[int, str] = {}
        self.request_session: dict[int, int | None] = {}
        self.failures: list[tuple[str, int | None]] = []  # counted-type: (trial, session)
        self.configured: set[int | None] = set()  # sessions stopped by a configuration error

    def started(self, event: Event) -> None:
        self.state.sessions += 1

    def spent(self, event: Event) -> None:
        """A preflight's or a step call's cost counts against the budget (not a trial)."""
        cost = event.body.get("cost_usd")
        if isinstance(cost, int | float):
            self.state.cost_usd += cost

    def requested(self, event: Event) -> None:
        body = event.body
        trial = self.trials.get(body.get("trial", ""))
        if trial is None:
            raise StudyError(
                f"{self.log.path}: seq {event.seq}: trial.requested for {body.get('trial')!r}, "
                "which is not in the locked schedule"
            )
        trial.attempts = max(trial.attempts, int(body["attempt"]))
        trial.open_request = event.seq
        trial.open_session = body.get("session")
        self.request_trial[event.seq] = body["trial"]
        self.request_session[event.seq] = body.get("session")

    def outcome(self, event: Event) -> None:
        body = event.body
        trial = self.trials[self.request_trial[body["request_seq"]]]
        if trial.open_request == body["request_seq"]:
            trial.open_request = None
            trial.open_batch = None
        if event.kind == "trial.responded":
            trial.responded = event.seq
            cost = body.get("cost_usd")
            if isinstance(cost, int | float):
                trial.cost_usd += cost
                self.state.cost_usd += cost
            return
        session = self.request_session.get(body["request_seq"])
        if body.get("error_type") == "configuration":
            self.configured.add(session)
        if body.get("error_type") not in NOT_COUNTED:
            self.failures.append((self.request_trial[body["request_seq"]], session))
        if body.get("final"):
            trial.given_up = event.seq

    def excluded(self, event: Event) -> None:
        self.trials[event.body["trial"]].excluded = event.seq

    def batch(self, event: Event) -> None:
        body = event.body
        open_seqs = []
        for seq in body["requests"]:
            trial = self.trials[self.request_trial[seq]]
            if trial.open_request == seq:
                trial.open_batch = body["batch_id"]
                open_seqs.append(seq)
        self.state.open_batches[body["batch_id"]] = open_seqs

    def finish(self) -> StudyState:
        """The state: failures counted (none of a session a configuration error stopped).

        Only the batches with requests still open are kept.
        """
        trials, state = self.trials, self.state
        for trial_id, session in self.failures:
            if session not in self.configured:
                trials[trial_id].failures += 1
        for batch_id in list(state.open_batches):
            still = [
                seq
                for seq in state.open_batches[batch_id]
                if trials[self.request_trial[seq]].open_request == seq
            ]
            if still:
                state.open_batches[batch_id] = still
            else:
                del state.open_batches[batch_id]
        return state


#: What each kind of event does to the trials' state (other kinds do nothing).
_HANDLERS: dict[str, Callable[[_Replay, Event], None]] = {
    "run.started": _Replay.started,
    "run.preflight": _Replay.spent,
    "trial.requested": _Replay.requested,
    "trial.responded": _Replay.outcome,
    "trial.failed": _Replay.outcome,
    "step.responded": _Replay.spent,
    "trial.excluded": _Replay.excluded,
    "batch.submitted": _Replay.batch,
}


def study_state(root: str | Path) -> StudyState:
    """Where the study at ``root`` stands (``ledger status``): its trials rebuilt from the ledger.

    Checks first that no locked file changed (:func:`runner._lock.check_integrity`), then reads
    the ledger without writing to it. Raises :class:`StudyError` for a study not locked yet.
    """
    study = check_integrity(root)
    with Ledger.open(ledger_path(Path(root)), readonly=True) as log:
        return load_state(study, log)


@dataclass(frozen=True)
class ArmStatus:
    """Counts for one arm (on one model, in a study with ``[models]``)."""

    arm: str
    trials: int
    responded: int
    given_up: int
    pending: int
    in_flight: int
    attempts: int
    cost_usd: float
    model: str | None = None

    @property
    def label(self) -> str:
        """``arm``, or ``arm on model`` in a study with several models."""
        return self.arm if self.model is None else f"{self.arm} on {self.model}"


def arm_status(state: StudyState) -> list[ArmStatus]:
    """Per arm (and model): trials, responded, given up, pending, awaiting, attempts, cost."""
    arms: dict[tuple[str, str], list[Trial]] = {}
    for trial in state.order:
        arms.setdefault((trial.arm, trial.model or ""), []).append(trial)
    out = []
    for (arm, model), trials in sorted(arms.items()):
        states = [state.trials[t.id] for t in trials]
        out.append(
            ArmStatus(
                arm=arm,
                trials=len(trials),
                responded=sum(s.responded is not None for s in states),
                given_up=sum(s.given_up is not None for s in states),
                pending=sum(not s.final for s in states),
                in_flight=sum(s.open_request is not None for s in states),
                attempts=sum(s.attempts for s in states),
                cost_usd=sum(s.cost_usd for s in states),
                model=model or None,
            )
        )
    return out
