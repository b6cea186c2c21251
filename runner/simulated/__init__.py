"""The offline, deterministic simulated models behind the ``simulated`` backend.

``docs/simulated.md``: the tumbling-E vision model, the text reader, the seed templates'
models and the step answers.

The package imports lazily (PEP 562): importing it loads none of its modules; a name is imported
from its module on first use. Its modules are private (``_name.py``): other packages use the
names listed here (``docs/library.md``), which are what they import from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger._lazy import lazy_exports

if TYPE_CHECKING:
    from runner.simulated._steps import is_step_seed, respond
    from runner.simulated._text import has_image
    from runner.simulated._vision import SimulatedModel

# Public name -> the module that defines it (imported on first use).
_EXPORTS: dict[str, str] = {
    "is_step_seed": "runner.simulated._steps",
    "respond": "runner.simulated._steps",
    "has_image": "runner.simulated._text",
    "SimulatedModel": "runner.simulated._vision",
}

__all__ = [
    "SimulatedModel",
    "has_image",
    "is_step_seed",
    "respond",
]

if not TYPE_CHECKING:  # type checkers read the imports above instead
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
