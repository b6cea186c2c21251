"""The runner's connection pool: the SDK's own, with a cheaper idle-connection check.

httpcore (the SDK's HTTP core, ``httpcore2``) re-examines its pool whenever a request is added
or leaves: for every idle connection, ``has_expired()`` asks the network stream whether its
socket is readable (a server that closed an idle keep-alive connection makes it readable).
Through anyio that question builds a dictionary of every socket attribute (addresses,
``getpeername``...) on each call, to read one of them; at concurrency 32 and above that was a
quarter of the event loop's time in a run (docs/trials.md §7). :func:`fast_idle_checks` gives
the pool a network backend whose streams answer ``is_readable`` from the socket found once, with
the same test (a zero-timeout ``poll`` for input). Nothing else changes: the same SDK client,
headers, proxies, TLS, timeouts and limits; the bytes on the wire are the same.
"""

from __future__ import annotations

import select
import socket
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["fast_idle_checks", "socket_readable"]


def socket_readable(sock: socket.socket | None) -> bool:
    """True if ``sock`` has input waiting (or is gone): httpcore's ``is_socket_readable`` test.

    A socket without a file descriptor counts as readable, as httpcore counts it: its next
    read returns the end of the stream, so the connection is expired.
    """
    fd = None if sock is None else sock.fileno()
    if fd is None or fd < 0:
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def _with_cached_socket(stream: Any) -> Any:
    """``stream`` (an httpcore network stream) answering ``is_readable`` from a cached socket.

    Its ``start_tls`` returns a stream treated the same way.
    """
    original: Callable[[str], Any] = stream.get_extra_info
    sock = original("socket")

    def get_extra_info(info: str) -> Any:
        if info == "is_readable":
            return socket_readable(sock)
        return original(info)

    start_tls = stream.start_tls

    async def start_tls_cached(*args: Any, **kwargs: Any) -> Any:
        return _with_cached_socket(await start_tls(*args, **kwargs))

    stream.get_extra_info = get_extra_info
    stream.start_tls = start_tls_cached
    return stream


def _backend(httpcore: Any) -> Any:
    """An ``httpcore2.AsyncNetworkBackend``: anyio's, with :func:`_with_cached_socket` streams."""

    class CachedSocketBackend(httpcore.AsyncNetworkBackend):  # type: ignore[misc]
        """anyio's TCP backend whose streams answer ``is_readable`` cheaply."""

        def __init__(self) -> None:
            self._anyio = httpcore.AnyIOBackend()

        async def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,
            local_address: str | None = None,
            socket_options: Iterable[Any] | None = None,
        ) -> Any:
            stream = await self._anyio.connect_tcp(
                host,
                port,
                timeout=timeout,
                local_address=local_address,
                socket_options=socket_options,
            )
            return _with_cached_socket(stream)

        async def connect_unix_socket(
            self,
            path: str,
            timeout: float | None = None,
            socket_options: Iterable[Any] | None = None,
        ) -> Any:
            stream = await self._anyio.connect_unix_socket(
                path, timeout=timeout, socket_options=socket_options
            )
            return _with_cached_socket(stream)

        async def sleep(self, seconds: float) -> None:
            await self._anyio.sleep(seconds)

    return CachedSocketBackend()


def fast_idle_checks(http_client: Any) -> bool:
    """Give ``http_client``'s direct connection pool the cached-socket backend; True if it did.

    ``http_client`` is the ``httpx2.AsyncClient`` the SDK's ``AsyncAnthropic`` uses. Only its
    default transport's ``httpcore2.AsyncConnectionPool`` is changed, before any connection is
    made; a proxied transport, or a layout this does not recognise, is left as it is (False):
    the run is then as fast as the SDK alone, never wrong.
    """
    import httpcore2

    transport = getattr(http_client, "_transport", None)
    pool = getattr(transport, "_pool", None)
    if type(pool) is not httpcore2.AsyncConnectionPool or pool.connections:
        return False
    if not hasattr(pool, "_network_backend"):
        return False
    pool._network_backend = _backend(httpcore2)
    return True
