"""``independent-t``: Welch's t-test of two arms' per-stimulus scores (``docs/statistics.md``)."""

from __future__ import annotations

from runner.statistics._base import StatisticSpec

SPEC = StatisticSpec("independent-t", 2)
