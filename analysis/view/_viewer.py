"""``ledger view``: browse a study (live) or an exported archive in the browser.

:func:`open_viewer` indexes a study folder or an archive (:mod:`analysis.view._index`) and starts
the verifier in a background thread; :func:`serve` serves the pages with uvicorn on 127.0.0.1
(:mod:`analysis.view._app`); :func:`write_bundle` writes them as a static site
(:mod:`analysis.view._bundle`). ``docs/viewer.md`` describes the pages and the blinding rules.

Example::

    from analysis.view._viewer import open_viewer, write_bundle

    viewer = open_viewer("my-study-archive")
    print(viewer.overview()["totals"])
    write_bundle("my-study-archive", "site")
"""

from __future__ import annotations

import errno
import os
import socket
import sys
from collections.abc import Callable

from analysis._errors import AnalysisError
from analysis.view._app import (
    LOOPBACK_HOSTS,
    Verification,
    Viewer,
    make_app,
    verify_command,
    verify_target,
)
from analysis.view._bundle import BundleResult, write_bundle
from analysis.view._index import FILTERS, ViewIndex

__all__ = [
    "DEFAULT_PORT",
    "FILTERS",
    "LOOPBACK_HOSTS",
    "BundleResult",
    "PortInUseError",
    "Viewer",
    "bind",
    "open_viewer",
    "serve",
    "verify_command",
    "write_bundle",
]

DEFAULT_PORT = 8765
_TRIES = 50


class PortInUseError(AnalysisError):
    """The port asked for with ``--port`` is taken (no other port is tried)."""


def open_viewer(path: str | os.PathLike[str], *, verify: bool = True) -> Viewer:
    """Index ``path`` (a study folder or an archive) and start verifying it in the background.

    Raises :class:`AnalysisError` naming the path when it is neither, or is not locked yet.
    """
    index = ViewIndex.open(path)
    verification = Verification(command=verify_command(index.path))
    if verify:
        verification.start(verify_target(index.path))
    else:
        verification.state, verification.error = "error", "verification was turned off"
    viewer = Viewer(index, verification)
    viewer.overview()  # the aggregates and filter choices, computed once before the first page
    viewer.choices()
    viewer.counts()
    return viewer


def bind(host: str, port: int | None) -> tuple[socket.socket, str | None]:
    """A listening socket on ``host``: on ``port`` exactly, or the first free from the default.

    With ``port`` None, :data:`DEFAULT_PORT` and the next ones are tried; the note says which
    port was taken instead. An explicit port that is in use raises :class:`PortInUseError`.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    candidates = [port] if port is not None else list(range(DEFAULT_PORT, DEFAULT_PORT + _TRIES))
    first_error: OSError | None = None
    for candidate in candidates:
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.bind((host, candidate))
            sock.listen(128)
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EADDRINUSE:
                raise AnalysisError(
                    f"cannot listen on {host}:{candidate} ({exc.strerror})"
                ) from exc
            first_error = first_error or exc
            continue
        note = None
        if port is None and candidate != DEFAULT_PORT:
            note = f"port {DEFAULT_PORT} is in use; serving on port {candidate} instead"
        return sock, note
    if port is not None:
        raise PortInUseError(
            f"port {port} on {host} is in use ({first_error.strerror if first_error else ''}); "
            "choose another --port, or leave --port out to take the next free one"
        )
    raise PortInUseError(
        f"ports {DEFAULT_PORT} to {DEFAULT_PORT + _TRIES - 1} on {host} are all in use; "
        "choose one with --port"
    )


def serve(
    viewer: Viewer,
    sock: socket.socket,
    *,
    on_ready: Callable[[str], None] | None = None,
    hosts: tuple[str, ...] | None = LOOPBACK_HOSTS,
) -> None:
    """Serve ``viewer`` on the bound socket until SIGINT or SIGTERM, then close the index.

    ``hosts``: the ``Host`` names answered (:func:`analysis.view._app.make_app`); None, for a
    public address, answers any.
    """
    import uvicorn

    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
    url = f"http://{shown}:{port}/"
    config = uvicorn.Config(
        make_app(viewer, hosts), log_level="warning", access_log=False, lifespan="off"
    )
    if on_ready is not None:
        on_ready(url)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises the SIGINT it handled: a clean stop
        pass
    finally:
        sock.close()
        viewer.verification.stop()
        viewer.index.close()
        sys.stdout.flush()
