"""A session's witnesses (``docs/witness.md`` section 8).

Cosigned checkpoints at the session's start, every N final trial outcomes, and at its stop.

:class:`SessionWitness` runs the cosigning jobs of :class:`runner._witnessing.Cosigner` in any
thread and keeps what the session must report: the first refusal (the runner turns it into a
stop), the checkpoints that went on unwitnessed (``continue``), and the time spent waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ledger import Ledger, SigningKey
from runner._errors import StudyError


class SessionWitness:
    """The study's locked witness policy, applied to one session."""

    def __init__(
        self, log: Ledger, key: SigningKey, policy: Any, should_stop: Callable[[], bool]
    ) -> None:
        """Witness ``log`` under ``policy`` (None: the study has no witnesses)."""
        self.log = log
        self.key = key
        self.policy = policy
        self.should_stop = should_stop
        self.error: StudyError | None = None  # a refusal, or witnesses unreachable
        self.notes: list[str] = []  # checkpoints left unwitnessed ('continue')
        self.wait = 0.0  # seconds spent waiting on witnesses this session

    @property
    def interval(self) -> int:
        """Final trial outcomes between interval checkpoints (0: none)."""
        return int(self.policy.interval_trials) if self.policy is not None else 0

    def _cosigner(self) -> Any:
        from runner._witnessing import Cosigner

        assert self.policy is not None
        return Cosigner(self.log, self.key, self.policy, should_stop=self.should_stop)

    def run(self, job: Callable[[Any], Any]) -> Any:
        """Run ``job(cosigner)`` in any thread; keep a refusal in :attr:`error`.

        The caller, in the event loop, turns :attr:`error` into a stop.
        """
        from runner._witnessing import WitnessOutcome

        with self._cosigner() as cosigner:
            try:
                result = job(cosigner)
            except StudyError as exc:
                if self.error is None:
                    self.error = exc
                return None
            finally:
                self.wait += cosigner.waited
        outcomes = result if isinstance(result, list) else [result]
        for outcome in outcomes:
            if isinstance(outcome, WitnessOutcome) and not outcome.witnessed:
                self.notes.append(
                    f"checkpoint of size {outcome.size} continues unwitnessed ("
                    f"{len(outcome.cosigned_by)} of {outcome.quorum} cosignatures; "
                    + "; ".join(f"{k}: {v}" for k, v in outcome.missing.items())
                    + ")"
                )
        return result

    async def start(self, loop: asyncio.AbstractEventLoop, size: int) -> str | None:
        """Cosign every promised checkpoint up to ``size`` (the session's start).

        Before any trial; returns the stop reason when the witnesses refuse. The session-start
        checkpoint is the tree right after ``run.started``; earlier promised ones still short
        of the quorum (a lock or a stop whose witnesses were unreachable) are asked for first.
        """
        if self.policy is None:
            return None
        await loop.run_in_executor(None, self.run, lambda c: c.witness_promised(upto=size))
        return None if self.error is None else f"witness: {self.error}"

    def interval_job(
        self, loop: asyncio.AbstractEventLoop, stop: Callable[[str], None]
    ) -> Callable[[int], None]:
        """The group writer's ``on_interval``: cosign the tree of ``size`` (writer thread)."""

        def cosign_interval(size: int) -> None:  # in the writer thread: nothing else records
            if self.error is not None:
                return
            self.run(lambda c: c.witness(size, "interval"))
            if self.error is not None:
                loop.call_soon_threadsafe(stop, f"witness: {self.error}")

        return cosign_interval

    def stop(self, size: int) -> str | None:
        """Cosign the session's stop checkpoint (tree of ``size``); its note, or None."""
        if self.policy is None or self.error is not None:
            return None
        outcome = self.run(lambda cs: cs.witness(size, "session stop"))
        return outcome.note if outcome is not None else None
