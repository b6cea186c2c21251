"""``bootstrap``: a stimulus-cluster bootstrap of two arms' difference (``docs/statistics.md``)."""

from __future__ import annotations

from runner.statistics._base import StatisticSpec

SPEC = StatisticSpec("bootstrap", 3)
