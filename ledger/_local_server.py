"""An ASGI app served by uvicorn in a thread of this process: the local witness and tiles.

For ``ledger demo``, tests and benchmarks: the socket is bound first (port 0: the system picks
one), :meth:`LocalServer.start` returns once the server answers, :meth:`LocalServer.stop`
ends it and its thread; as a context manager it serves for the block.
"""

from __future__ import annotations

import socket
import threading
from typing import Any, Self

from ledger._errors import LedgerError


class LocalServer:
    """Serve ``app`` on the bound ``sock`` in a daemon thread named ``name``."""

    def __init__(
        self,
        sock: socket.socket,
        app: Any,
        *,
        name: str,
        what: str,
        error: type[LedgerError],
        **config: Any,
    ) -> None:
        """Prepare the server; ``what`` and ``error`` say what did not start, if it does not."""
        import uvicorn

        self._sock = sock
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self._what, self._error = what, error
        self._server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", **config)
        )
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True, name=name
        )

    def start(self) -> Self:
        """Serve until :meth:`stop`; returns once the server answers."""
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise self._error(f"the {self._what} at {self.url} did not start")
            threading.Event().wait(0.01)
        return self

    def stop(self) -> None:
        """Stop serving and wait for the server's thread."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        self._sock.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
