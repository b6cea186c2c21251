"""Seed 002's multiple-choice statistics over a long-format table of scored trials.

Every column and rule is in ``docs/mcq-statistics.md``.

The package imports lazily (PEP 562): importing it loads none of its modules; a name is imported
from its module on first use. Its modules are private (``_name.py``): other packages use the
names listed here (``docs/library.md``), which are what they import from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger._lazy import lazy_exports

if TYPE_CHECKING:
    from analysis.mcq._rows import ORIGINAL

# Public name -> the module that defines it (imported on first use).
_EXPORTS: dict[str, str] = {
    "ORIGINAL": "analysis.mcq._rows",
}

__all__ = [
    "ORIGINAL",
]

if not TYPE_CHECKING:  # type checkers read the imports above instead
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
