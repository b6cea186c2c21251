"""An ASGI app served by uvicorn in a thread of this process: the local witness and tiles.

For ``ledger demo``, tests and benchmarks: the socket is bound first (port 0: the system picks
one), :meth:`LocalServer.start` returns once the server answers, :meth:`LocalServer.stop`
ends it and its thread; as a context manager it serves for the block.

uvicorn's server looks at its ``should_exit`` flag once a tick (every 0.1 s); the server here
is woken from its tick's wait when :meth:`LocalServer.stop` sets the flag, so that a stop does
not wait out the rest of a tick (tests start and stop some hundreds of these servers).
"""

from __future__ import annotations

import asyncio
import contextlib
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
        self._server = _server_class()(
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
        self._server.wake()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        self._sock.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _server_class() -> Any:
    """``uvicorn.Server`` with a :meth:`wake` that cuts a tick's wait short.

    uvicorn is imported here, when a server is made, not with this module.
    """
    import uvicorn

    class WakeableServer(uvicorn.Server):
        """uvicorn's main loop, each tick's wait ended early by :meth:`wake`.

        As uvicorn's own: a tick every 0.1 s, whose ``on_tick`` refreshes the Date header and
        reads ``should_exit``.
        """

        _loop: asyncio.AbstractEventLoop | None = None
        _woken: asyncio.Event | None = None

        async def main_loop(self) -> None:
            self._loop, self._woken = asyncio.get_running_loop(), asyncio.Event()
            counter = 0
            should_exit = await self.on_tick(counter)
            while not should_exit:
                counter = (counter + 1) % 864000
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._woken.wait(), 0.1)
                should_exit = await self.on_tick(counter)

        def wake(self) -> None:
            """End the current tick's wait now; callable from any thread.

            A no-op before the loop runs or after it closed: the next tick then reads
            ``should_exit`` as before.
            """
            loop, woken = self._loop, self._woken
            if loop is not None and woken is not None:
                with contextlib.suppress(RuntimeError):  # the loop has closed already
                    loop.call_soon_threadsafe(woken.set)

    return WakeableServer
