"""Pending trials as one of several workers of a study (PostgreSQL, ``docs/trials.md`` §8).

:class:`LeaseQueue` feeds a call-by-call session: each worker coroutine takes its next trial
from a queue refilled with leases claimed in the store
(:meth:`ledger._workers.WorkerLink.claim`), at most ``--concurrency`` at a time. A trial
leased by another worker is looked at again until it is final (or its worker died and its
lease ran out); the session ends when every candidate is final, run here or elsewhere.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from runner._limit import AdaptiveLimit
from runner._request import Trial
from runner._session import Session
from runner._workers import reap_dead

#: The reason a worker's session ends to let a new session take trials that come before its
#: own in the locked order (``docs/trials.md`` §8); :func:`runner._execute.run_study` then
#: starts that session.
ROTATE = "rotate"
#: Trial ids offered to the store per claim.
CLAIM_CHUNK = 1024

RunTrial = Callable[[Trial, AdaptiveLimit], Awaitable[None]]


class LeaseQueue:
    """The trials this worker runs, claimed from the store as its workers need them."""

    def __init__(self, session: Session, candidates: deque[Trial]) -> None:
        """``candidates``: the trials pending at the session's start, in schedule order."""
        assert session.shared is not None
        self.s = session
        self.by_id = {t.id: t for t in candidates}
        self.waiting: deque[str] = deque(t.id for t in candidates)
        self.queue: deque[Trial] = deque()
        self.lock = asyncio.Lock()
        self.budget = session.options.max_trials
        # the highest schedule position first requested in this session: a never-requested
        # trial before it (another worker's, given back or left by a dead worker) is left to
        # a new session, so first requests ascend within each session (docs/trials.md §8)
        self.high = 0
        self.deferred: set[str] = set()

    async def run(self, run_trial: RunTrial, limit: AdaptiveLimit) -> list[Any]:
        """Run claimed trials with ``--concurrency`` workers; their results."""
        tasks = [
            asyncio.create_task(self._work(run_trial, limit))
            for _ in range(self.s.options.concurrency)
        ]
        return list(await asyncio.gather(*tasks, return_exceptions=True))

    async def _work(self, run_trial: RunTrial, limit: AdaptiveLimit) -> None:
        s = self.s
        while s.stop_reason is None:
            await limit.acquire()
            try:
                if not self.queue:
                    async with self.lock:
                        if not self.queue and not await self.refill():
                            return
                if not self.queue or s.stop_reason is not None:
                    continue
                trial = self.queue.popleft()
                try:
                    await run_trial(trial, limit)
                except Exception as exc:  # a bug or a broken ledger: stop everyone else
                    s.request_stop(f"crash: {type(exc).__name__}: {exc}")
                    raise
            finally:
                await limit.release()

    async def refill(self) -> bool:
        """Claim more trials into the queue; False when none is left to wait for."""
        s = self.s
        assert s.shared is not None
        while s.stop_reason is None:
            self.waiting.extend(s.retake)
            s.retake.clear()
            if not self.waiting or self.budget == 0:
                return False
            await self._reap()
            if self._claim():
                return True
            if self.deferred:
                s.request_stop(
                    f"{ROTATE}: {len(self.deferred)} trial(s) left by other workers come before "
                    "this session's last in the locked order; a new session takes them"
                )
                return False
            await s.pause(s.shared.poll_seconds)  # the rest are other workers'
        return False

    async def _reap(self) -> None:
        """Close the sessions of dead workers (in the writer thread: it owns the connection)."""
        s = self.s
        assert s.shared is not None and s.recorder.writer is not None
        if s.shared.link.any_dead():
            total = len(s.state.order) if s.state is not None else None
            reap = functools.partial(reap_dead, s.log, s.key, by=s.shared.id, trials=total)
            await s.recorder.writer.call(reap)

    def _claim(self) -> bool:
        """Claim the lowest free waiting trials, chunk by chunk; True when some were claimed."""
        s = self.s
        assert s.shared is not None
        link = s.shared.link
        want = s.options.concurrency
        if self.budget is not None:
            want = min(want, self.budget)
        ids = [t for t in self.waiting if t not in self.deferred]
        for start in range(0, len(ids), CLAIM_CHUNK):
            raced = True
            while raced:  # lost a race for the lowest free trials: ask again
                claimed, finals, raced = link.claim(ids[start : start + CLAIM_CHUNK], want)
            claimed = self._defer_late(claimed)
            if not claimed and not finals:
                continue
            self._forget(finals | {c.trial for c in claimed})
            self._enqueue(claimed)
            if claimed:
                s.final = link.finals()
                s.tick()
                return True
        return False

    def _defer_late(self, claimed: list[Any]) -> list[Any]:
        """The claimed trials this session keeps; the others are given back.

        A never-requested trial before this session's highest first request is left to a new
        session (first requests ascend within each session, ``docs/trials.md`` §8).
        """
        late = [
            c.trial for c in claimed if c.attempts == 0 and self.by_id[c.trial].position < self.high
        ]
        if not late:
            return claimed
        assert self.s.shared is not None
        self.s.shared.link.release(late)
        self.deferred.update(late)
        return [c for c in claimed if c.trial not in self.deferred]

    def _forget(self, taken: set[str]) -> None:
        """Drop ``taken`` (claimed here, or final) from the trials waited for."""
        kept = [t for t in self.waiting if t not in taken]
        self.waiting.clear()
        self.waiting.extend(kept)
        self.deferred.difference_update(taken)

    def _enqueue(self, claimed: list[Any]) -> None:
        """Queue the claimed trials, with the attempts and failures the store counts."""
        s = self.s
        assert s.state is not None
        for c in claimed:
            record = s.state.trials[c.trial]
            record.attempts, record.failures = c.attempts, c.failures
            record.open_request = None
            self.queue.append(self.by_id[c.trial])
            if c.attempts == 0:
                self.high = max(self.high, self.by_id[c.trial].position)
        if claimed and self.budget is not None:
            self.budget -= len(claimed)
