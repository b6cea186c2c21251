"""A `ledger serve --store` process for the tests that need a real one (its own process).

Started on a free port of 127.0.0.1 and stopped by its own handle (SIGTERM), never by name.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pg_server import free_port


def serve(store: str, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """Start `ledger serve --store STORE [EXTRA...]`; (process, base URL) once it answers."""
    port = free_port()
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "ledger"),
            "serve",
            "--store",
            store,
            "--port",
            str(port),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "serving the append API" in line, line + (proc.stdout.read() if proc.poll() else "")
    return proc, f"http://127.0.0.1:{port}"


def stop(proc: subprocess.Popen[str]) -> None:
    """Stop a service process the test started (SIGTERM, by its own handle)."""
    proc.terminate()
    proc.wait(timeout=30)
    if proc.stdout is not None:
        proc.stdout.close()
