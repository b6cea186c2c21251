"""``chi-square``: the spread of wrong answers over a parser's labels, between two arms.

It needs a parser with a closed set of labels (``labels``): the text parsers have none.
"""

from __future__ import annotations

from runner.statistics._base import StatisticSpec

SPEC = StatisticSpec("chi-square", 5, labels=True)
