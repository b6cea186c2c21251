"""The runner's connection pool (runner/_pool.py): the SDK's pool with a cheaper idle check.

Real sockets and a real HTTP/1.1 server on 127.0.0.1: a keep-alive connection is reused, and one
the server closed while idle is noticed before a request is written to it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator

import pytest

from runner._backends import AnthropicBackend
from runner._pool import socket_readable

MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-test",
    "content": [{"type": "text", "text": "UP"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 1},
}
BODY = {"model": "claude-test", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}


def test_socket_readable_follows_the_socket() -> None:
    a, b = socket.socketpair()
    try:
        assert socket_readable(a) is False  # idle, nothing waiting
        b.sendall(b"x")
        assert socket_readable(a) is True  # input waiting
        a.recv(1)
        assert socket_readable(a) is False
        b.close()
        assert socket_readable(a) is True  # the peer closed: the next read is the end
    finally:
        a.close()
    assert socket_readable(a) is True  # no descriptor: gone, as httpcore counts it
    assert socket_readable(None) is True


class OneShotServer:
    """HTTP/1.1 on 127.0.0.1: answers each request with a Message; keeps the connection open
    (no ``Connection: close``) unless ``close_after`` says to close it after that many replies,
    silently, as a server whose keep-alive timer ran out does."""

    def __init__(self, close_after: int | None) -> None:
        self.close_after = close_after
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.requests = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        served = 0
        data = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, rest = data.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                while len(rest) < length:
                    rest += conn.recv(65536)
                data = rest[length:]
                payload = json.dumps(MESSAGE).encode()
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"request-id: req_1\r\ncontent-length: "
                    + str(len(payload)).encode()
                    + b"\r\n\r\n"
                    + payload
                )
                self.requests += 1
                served += 1
                if self.close_after is not None and served >= self.close_after:
                    return

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[OneShotServer]:
    served = OneShotServer(request.param)
    yield served
    served.close()


async def _three_calls(backend: AnthropicBackend) -> list[str]:
    texts = []
    try:
        for _ in range(3):
            reply = await backend.send(BODY, seed="s")
            assert reply.http_status == 200
            texts.append(json.loads(reply.raw)["content"][0]["text"])
            await asyncio.sleep(0.05)  # the server's close reaches the idle socket
    finally:
        await backend.aclose()
    return texts


@pytest.mark.parametrize("server", [None], indirect=True)
def test_the_pool_reuses_a_kept_alive_connection(server: OneShotServer) -> None:
    backend = AnthropicBackend(api_key="test", base_url=f"http://127.0.0.1:{server.port}")
    assert backend.fast_pool, "the SDK's pool layout changed: runner/_pool.py no longer applies"
    assert asyncio.run(_three_calls(backend)) == ["UP", "UP", "UP"]
    assert (server.requests, server.connections) == (3, 1)


@pytest.mark.parametrize("server", [1], indirect=True)
def test_a_connection_the_server_closed_while_idle_is_not_reused(server: OneShotServer) -> None:
    backend = AnthropicBackend(api_key="test", base_url=f"http://127.0.0.1:{server.port}")
    assert backend.fast_pool
    # max_retries=0: a request written to the dead connection would fail, not be retried
    assert asyncio.run(_three_calls(backend)) == ["UP", "UP", "UP"]
    assert (server.requests, server.connections) == (3, 3)
