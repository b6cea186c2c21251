"""The tests, one folder per package they pin (see each folder's ``__init__.py``).

``tests`` is a package so that its folders, named like the product packages (``tests/ledger/``,
``tests/runner/``, ...), never shadow them: a test module is ``tests.<folder>.test_x``, and one
test module imports another by that name. The helper modules live in ``tests/support/`` (not a
package: pyproject's pytest ``pythonpath`` puts it on ``sys.path``, so ``from helpers import X``);
``tests/support/locations.py`` says where the repository, the tests and the helpers are. The data
stay beside this file: ``fixtures/``, ``vectors/``, ``workers/``, ``inspect_tasks/``.
"""
