"""``sign-test``: the exact sign test of two arms, paired by stimulus (``docs/analysis.md`` §3).

A contrast of two arms like ``paired-t``, without its normality: it takes the common keys only.
"""

from __future__ import annotations

from runner.statistics._base import StatisticSpec

SPEC = StatisticSpec("sign-test", 14)
