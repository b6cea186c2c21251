"""Run ``python -m verify ARCHIVE --json`` under resource limits and an audit hook on ``open``.

Used by tests/test_hostile_archive.py, one process per case (an audit hook cannot be removed).
Usage: ``python hostile_verify.py CONFIG_JSON ARG...``; CONFIG_JSON holds ``archive`` (its real
path), ``forbidden`` (paths that must never be opened, e.g. a named pipe or a link inside the
archive), ``source`` (the project's source folder), ``as_bytes`` and ``cpu_seconds`` (the
limits). The report goes to stdout as ``python -m verify --json`` writes it; the last line of
stderr is JSON: ``{"rc", "outside", "forbidden", "maxrss_kib"}``, where ``outside`` lists every
opened path outside the archive that is not Python's own (stdlib, site-packages, the project's
``.py``/``.pyc`` files). The verifier's modules, and the libraries they import lazily, are
imported before the hook is installed.
"""

from __future__ import annotations

import json
import os
import resource
import sys

config = json.loads(sys.argv[1])
limit = int(config["as_bytes"])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
cpu = int(config["cpu_seconds"])
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))

# The verifier's modules and the libraries they import lazily are imported before the hook:
# what is watched is what the verifier opens while it verifies (pandas, under statsmodels,
# reads the system's time zone database when first imported).
import statsmodels.regression.mixed_linear_model  # noqa: E402, F401

import verify.__main__  # noqa: E402
import verify._science  # noqa: E402

archive = os.path.realpath(config["archive"])
forbidden = {os.path.abspath(p) for p in config["forbidden"]}
python_roots = sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)})
source = os.path.realpath(config["source"])
outside: list[str] = []
opened_forbidden: list[str] = []


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def _hook(event: str, args: tuple[object, ...]) -> None:
    if event != "open" or not args or isinstance(args[0], int):
        return
    raw = args[0]
    name = os.fsdecode(raw) if isinstance(raw, str | bytes) else str(raw)
    absolute = os.path.abspath(name)
    if absolute in forbidden:
        opened_forbidden.append(absolute)
    real = os.path.realpath(absolute)
    if _under(real, archive) and _under(absolute, archive):
        return
    if any(_under(real, root) for root in python_roots):
        return
    if _under(real, source) and real.endswith((".py", ".pyc")):
        return
    outside.append(name)


sys.addaudithook(_hook)
try:
    rc = verify.__main__.main(config["argv"])
except SystemExit as exc:  # argparse: a usage error
    rc = exc.code if isinstance(exc.code, int) else 2
sys.stdout.flush()
usage = resource.getrusage(resource.RUSAGE_SELF)
sys.stderr.write(
    "\n"
    + json.dumps(
        {
            "rc": rc,
            "outside": outside,
            "forbidden": opened_forbidden,
            "maxrss_kib": usage.ru_maxrss,
        }
    )
    + "\n"
)
sys.exit(rc)
