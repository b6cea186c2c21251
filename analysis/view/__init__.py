"""``ledger view``: browse a study (live) or an exported archive in the browser.

Or write an archive's pages as a static site (``ledger view --bundle``,
``docs/viewer.md``).

The package imports lazily (PEP 562): importing it loads none of its modules; a name is imported
from its module on first use. Its modules are private (``_name.py``): other packages use the
names listed here (``docs/library.md``), which are what they import from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger._lazy import lazy_exports

if TYPE_CHECKING:
    from analysis.view._app import make_app
    from analysis.view._viewer import LOOPBACK_HOSTS, bind, open_viewer, serve, write_bundle

# Public name -> the module that defines it (imported on first use).
_EXPORTS: dict[str, str] = {
    "make_app": "analysis.view._app",
    "LOOPBACK_HOSTS": "analysis.view._viewer",
    "bind": "analysis.view._viewer",
    "open_viewer": "analysis.view._viewer",
    "serve": "analysis.view._viewer",
    "write_bundle": "analysis.view._viewer",
}

__all__ = [
    "LOOPBACK_HOSTS",
    "bind",
    "make_app",
    "open_viewer",
    "serve",
    "write_bundle",
]

if not TYPE_CHECKING:  # type checkers read the imports above instead
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
