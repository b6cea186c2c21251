"""Where things are, the same from every test module however deep it sits.

``REPO`` is the repository root, ``TESTS_DIR`` the tests folder (``fixtures/``, ``vectors/``,
``workers/``, ``inspect_tasks/``), ``SUPPORT_DIR`` this folder of helper modules.
"""

from pathlib import Path

SUPPORT_DIR = Path(__file__).resolve().parent
TESTS_DIR = SUPPORT_DIR.parent
REPO = TESTS_DIR.parent
