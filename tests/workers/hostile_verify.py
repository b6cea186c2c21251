"""Run ``python -m verify ARCHIVE --json`` under resource limits and an audit hook on ``open``.

Used by tests/verify/test_hostile_archive.py, one process per case (an audit hook cannot be
removed). Usage: ``python hostile_verify.py CONFIG_JSON ARG...``; CONFIG_JSON holds ``archive`` (its
real path), ``forbidden`` (paths that must never be opened, e.g. a named pipe or a link inside the
archive), ``source`` (the project's source folder), ``as_bytes`` and ``cpu_seconds`` (the
limits), and optionally ``science``: ``false`` verifies without the science checks (``rescore``,
``reanalysis``; as ``helpers.science_skipped`` does in process). The report goes to stdout as
``python -m verify --json`` writes it; the last line of
stderr is JSON: ``{"rc", "outside", "forbidden", "maxrss_kib", "writer"}``, where ``outside``
lists every opened path outside the archive that is not Python's own (stdlib, site-packages, the
verifier's package data, the project's ``.py``/``.pyc`` files) and ``writer`` every module of
the writer (``ledger``, ``runner``, ``analysis``) the process has imported, from its start to the
end of the verification (none: the verifier is independent of them). The verifier's modules,
and the libraries they import lazily, are imported before the hook is installed.

With ``--serve`` it is a fork server instead (what the tests use): it imports the verifier and
its libraries once, then reads one request a line on stdin (``{"config", "stdout", "stderr",
"guard_seconds"}``), forks a child per request (so every case still runs in its own process, with
its own limits, its own audit hook and fresh CPU-time accounting), and answers one line on
stdout: ``{"status": exit status, or minus the signal}``. A child still running after
``guard_seconds`` of wall time is killed.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time

# The verifier's modules and the libraries they import lazily are imported before the hook:
# what is watched is what the verifier opens while it verifies, not what an import reads. The
# science checks import scipy's statistics and optimizer inside the functions that use them (a
# verification that stops before those checks does not load scipy): imported here, once, so each
# forked case does not pay it. Nothing else: the verifier never imports statsmodels or pandas
# (its mixed models are its own, verify/_reml.py), which would cost each fork server about 2.5 s
# of CPU to import for nothing (a verification of the demo archive loads neither).
import scipy.optimize
import scipy.stats  # noqa: F401

import verify.__main__
import verify._archive
import verify._science

WRITER = ("ledger", "runner", "analysis")
"""The writer's packages, of which the verifying process must import none."""


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def run_case(config: dict[str, object]) -> int:
    """Verify under the limits and the hook; write the trailer to stderr; return the status."""
    limit = int(str(config["as_bytes"]))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    cpu = int(str(config["cpu_seconds"]))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    archive = os.path.realpath(str(config["archive"]))
    forbidden = {os.path.abspath(str(p)) for p in config["forbidden"]}  # type: ignore[attr-defined]
    python_roots = sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)})
    source = os.path.realpath(str(config["source"]))
    outside: list[str] = []
    opened_forbidden: list[str] = []

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
        if _under(real, os.path.join(source, "verify")) and real.endswith(".json"):
            return  # the verifier's own package data (verify/_archive/checklists.json)
        outside.append(name)

    if config.get("science") is False:  # the science checks left out (helpers.science_skipped)
        verify._archive._science = lambda run: []
    sys.addaudithook(_hook)
    try:
        rc = verify.__main__.main(config["argv"])  # type: ignore[arg-type]
    except SystemExit as exc:  # argparse: a usage error
        rc = exc.code if isinstance(exc.code, int) else 2
    sys.stdout.flush()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    trailer = {
        "rc": rc,
        "outside": outside,
        "forbidden": opened_forbidden,
        "maxrss_kib": usage.ru_maxrss,
        "writer": sorted(m for m in sys.modules if m.split(".")[0] in WRITER),
    }
    sys.stderr.write("\n" + json.dumps(trailer) + "\n")
    sys.stderr.flush()
    return rc


def serve() -> None:
    """The fork server: one child per request line, one answer line per child."""
    for line in sys.stdin:
        request = json.loads(line)
        config = request["config"]
        pid = os.fork()
        if pid == 0:  # the child: its own output files, limits and audit hook
            status = 70
            try:
                os.chdir(str(config["cwd"]))
                for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
                    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    os.dup2(target, fd)
                    os.close(target)
                sys.stdout = os.fdopen(1, "w", closefd=False)
                sys.stderr = os.fdopen(2, "w", closefd=False)
                status = run_case(config)
            finally:
                os._exit(status)
        deadline = time.monotonic() + float(request["guard_seconds"])
        while True:
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                _, raw = os.waitpid(pid, 0)
                break
            time.sleep(0.01)
        code = os.waitstatus_to_exitcode(raw)
        sys.stdout.write(json.dumps({"status": code}) + "\n")
        sys.stdout.flush()


if sys.argv[1:] == ["--serve"]:
    serve()
else:
    cfg = json.loads(sys.argv[1])
    cfg.setdefault("cwd", os.getcwd())
    sys.exit(run_case(cfg))
