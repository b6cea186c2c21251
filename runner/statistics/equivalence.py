"""``equivalence``: two one-sided tests of two arms within ``margin_pp`` (``docs/statistics.md``).

Its rule needs a margin in percentage points; ``alpha`` is optional.
"""

from __future__ import annotations

from runner.statistics._base import StatisticSpec

SPEC = StatisticSpec("equivalence", 6, alpha=False, margin=True)
