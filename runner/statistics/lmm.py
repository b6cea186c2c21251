"""``lmm``: the linear mixed model's contrast of two arms (``docs/statistics.md``).

Its contrast is a term of the study's primary model, so both arms must be among
``analysis.model_arms`` when the study names them (``docs/study-spec.md``).
"""

from __future__ import annotations

from runner.statistics._base import StatisticSpec

SPEC = StatisticSpec("lmm", 0, main_model=True)
