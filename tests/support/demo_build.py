"""``ledger demo --template TEMPLATE`` in its own process, for ``conftest.shared_demo``.

``python demo_build.py BASE TEMPLATE WIDTH`` runs :func:`analysis._demo.run_demo` in
``BASE/demo`` (its keys in ``BASE/demo/home``, as the demo always puts them) with a rich console
of WIDTH columns writing into memory, then leaves what the tests read: ``BASE/printed.txt``
(what the demo printed, exactly as :func:`helpers.template_demo` captures it) and
``BASE/result.json`` (the fields of its ``DemoResult``). A process of its own, because the
browser tests' worker runs Playwright's event loop, and because the demo points
``PROMPT_LEDGER_HOME`` at its own home for the rest of the process.
"""

from __future__ import annotations

import dataclasses
import io
import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    """Build the demo; exit 0 once ``printed.txt`` and ``result.json`` are written."""
    from rich.console import Console

    from analysis._demo import run_demo

    base, template, width = Path(argv[0]), argv[1], int(argv[2])
    out = io.StringIO()
    result = run_demo(base / "demo", Console(file=out, width=width), template=template)
    (base / "printed.txt").write_text(out.getvalue(), encoding="utf-8")
    fields = {
        name: str(value) if isinstance(value, Path) else value
        for name, value in dataclasses.asdict(result).items()
    }
    (base / "result.json").write_text(json.dumps(fields), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
