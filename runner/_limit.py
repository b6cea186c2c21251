"""The session's adaptive concurrency limit (``docs/trials.md`` §3).

429 and 529 halve it; it climbs back one step per window of successes. A retry waits for a
slot under the current limit, so a lowered limit also holds back trials already in flight.
"""

from __future__ import annotations

import asyncio


class AdaptiveLimit:
    """A concurrency limit that halves on overload and climbs back one step per window."""

    def __init__(self, maximum: int) -> None:
        """Start at ``maximum``."""
        self.maximum = maximum
        self.limit = maximum
        self.active = 0
        self._streak = 0
        self._cond = asyncio.Condition()

    async def acquire(self) -> None:
        """Wait for a free slot under the current limit."""
        async with self._cond:
            await self._cond.wait_for(lambda: self.active < self.limit)
            self.active += 1

    async def release(self) -> None:
        """Free a slot."""
        async with self._cond:
            self.active -= 1
            self._cond.notify_all()

    async def requeue(self) -> None:
        """Before a retry: wait for a slot under the current (perhaps lowered) limit.

        If more are in flight than the limit allows, this slot is given back first, so a retry
        obeys the limit like a new trial. Cancelled while waiting, the slot is taken back
        anyway, so the caller's :meth:`release` stays balanced.
        """
        async with self._cond:
            if self.active <= self.limit:
                return
            self.active -= 1
            self._cond.notify_all()
            try:
                await self._cond.wait_for(lambda: self.active < self.limit)
            finally:
                self.active += 1

    def overloaded(self) -> None:
        """The API said 429 or 529: halve the limit."""
        self.limit = max(1, self.limit // 2)
        self._streak = 0

    async def succeeded(self) -> None:
        """One success; after ``limit`` successes in a row, allow one more in flight."""
        if self.limit >= self.maximum:
            return
        self._streak += 1
        if self._streak >= self.limit:
            self._streak = 0
            self.limit += 1
            async with self._cond:
                self._cond.notify_all()
