"""Lazy public faces (PEP 562): a package exports names that are imported on first use.

``ledger``, ``runner`` and ``analysis`` each list their public names with the module that
defines them; importing the package then costs nothing until a name is used, so the ``ledger``
command starts without loading SQLite wrappers, pandas or the SDKs. (``verify`` has its own
copy: it imports nothing from the writer.)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str], names: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each name in ``exports`` from its module.

    A name is imported from ``exports[name]`` on first access and then kept in the package's
    namespace, so later accesses are plain lookups.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(names)  # the public names, loaded or not (tab completion shows them)

    return __getattr__, __dir__
