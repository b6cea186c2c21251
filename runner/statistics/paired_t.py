"""``paired-t``: a paired t-test of two arms, paired by stimulus (or by stimulus and rep).

The one kind that takes ``pairing`` (``docs/study-spec.md`` ``[[hypotheses]]``).
"""

from __future__ import annotations

from runner.statistics._base import StatisticSpec

SPEC = StatisticSpec("paired-t", 1, takes=("pairing",))
