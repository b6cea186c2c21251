"""Clocks for envelopes: the real UTC clock, and a fixed one for reproducible ledgers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def utc_now() -> datetime:
    """The default clock: the current UTC time."""
    return datetime.now(UTC)


class FixedClock:
    """A deterministic clock: starts at ``start`` and advances by ``step`` on every reading.

    With a fixed key and a ``FixedClock`` the same operations write the same bytes, which is how
    the test vectors and the demonstration archive are made reproducible.
    """

    def __init__(
        self,
        start: datetime = datetime(2026, 1, 1, tzinfo=UTC),
        step: timedelta = timedelta(milliseconds=1),
    ) -> None:
        """Start the clock at ``start`` (timezone-aware) with ``step`` between readings."""
        if start.tzinfo is None:
            raise ValueError("FixedClock start must be timezone-aware")
        self._now = start
        self._step = step

    def __call__(self) -> datetime:
        """Return the current reading and advance the clock."""
        now = self._now
        self._now = now + self._step
        return now
