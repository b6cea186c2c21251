"""A module imported on the first use of one of its names.

scipy.stats and statsmodels take about a second of CPU to import. The statistic registry
(:mod:`analysis.statistics`) needs them only to compute a test, not to describe a recorded
result, so the modules it loads name them through :class:`DeferredModule`: ``ledger view``
formats the recorded results (:mod:`analysis._result_text`) without importing them.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["DeferredModule"]


class DeferredModule:
    """The module ``name``, imported when one of its attributes is first read.

    Each attribute is looked up in the imported module once and then kept on this object, so
    later reads are plain attribute reads. An import error surfaces at that first read.
    """

    def __init__(self, name: str) -> None:
        """Name the module; nothing is imported yet."""
        self._deferred_name = name

    def __getattr__(self, attr: str) -> Any:
        """The module's attribute ``attr`` (imports the module on first use)."""
        if attr.startswith("__"):  # copy, pickle and introspection probe dunders: not ours
            raise AttributeError(attr)
        value = getattr(importlib.import_module(self._deferred_name), attr)
        setattr(self, attr, value)
        return value

    def __repr__(self) -> str:
        """``<deferred module NAME>``."""
        return f"<deferred module {self._deferred_name}>"
