"""The witness's HTTP service: Starlette routes served by uvicorn (``ledger witness serve``).

Routes (tlog-witness [HTTP Interface]; the submission and monitoring prefixes are both ``/``):

* ``POST /add-checkpoint`` [add-checkpoint]: answered by
  :meth:`ledger.witness.Witness.add_checkpoint` in a worker thread, each thread with its own
  SQLite connection;
* ``GET /<sha256 hex of origin>/checkpoint`` [Monitor Retrieval Mechanism]: the latest cosigned
  checkpoint with the log's and the witness's signatures, or 404.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ledger._local_server import LocalServer
from ledger.witness import MAX_BODY, AddResult, Witness, WitnessError

__all__ = ["LocalWitness", "make_app", "serve"]


def make_app(directory: Path, clock: Callable[[], int] | None = None) -> Starlette:
    """The Starlette application of the witness in ``directory`` (opened once per thread).

    ``clock`` (POSIX seconds) times the cosignatures (default: the system clock).
    """
    Witness.open(directory).close()  # refuse to start on a bad directory, before listening
    local = threading.local()

    def witness() -> Witness:
        current: Witness | None = getattr(local, "witness", None)
        if current is None:
            current = Witness.open(directory, clock)
            local.witness = current
        return current

    async def add_checkpoint(request: Request) -> Response:
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                return Response(
                    f"request body larger than {MAX_BODY} bytes\n", 400, media_type="text/plain"
                )
        result: AddResult = await run_in_threadpool(lambda: witness().add_checkpoint(body))
        return Response(result.body, result.status, headers={"content-type": result.content_type})

    async def checkpoint(request: Request) -> Response:
        origin_hash = str(request.path_params["origin_hash"])
        note = await run_in_threadpool(lambda: witness().checkpoint_for(origin_hash))
        if note is None:
            return Response("no checkpoint cosigned for this log\n", 404, media_type="text/plain")
        return Response(note, 200, media_type="text/plain")

    return Starlette(
        routes=[
            Route("/add-checkpoint", add_checkpoint, methods=["POST"]),
            Route("/{origin_hash:str}/checkpoint", checkpoint, methods=["GET"]),
        ]
    )


def _listen(directory: Path, host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP,
    # and without it every keep-alive response's body waits ~40 ms behind its headers
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise WitnessError(
            f"witness {directory}: cannot listen on {host}:{port} ({exc.strerror or exc}); "
            "choose another --port or --host"
        ) from exc
    return sock


class LocalWitness(LocalServer):
    """A witness served in a thread of this process on ``127.0.0.1`` and an ephemeral port.

    For ``ledger demo`` and tests: ``with LocalWitness(directory) as w: ... w.url ...``; the
    server stops (and its thread ends) when the block ends. ``clock`` times the cosignatures.
    """

    def __init__(
        self, directory: Path, clock: Callable[[], int] | None = None, port: int = 0
    ) -> None:
        """Bind the socket (port 0: the system picks one); :meth:`start` serves it."""
        super().__init__(
            _listen(directory, "127.0.0.1", port),
            make_app(directory, clock),
            name="local-witness",
            what="local witness",
            error=WitnessError,
        )


def serve(directory: Path, host: str, port: int) -> None:
    """Serve the witness in ``directory`` on ``host:port`` until SIGINT or SIGTERM.

    Port 0 picks a free port. The line ``witness <name> listening on http://HOST:PORT`` is
    printed (and flushed) on standard output once the socket is bound.
    """
    import uvicorn

    app = make_app(directory)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = _listen(directory, host, port)
    bound = sock.getsockname()[1]
    with Witness.open(directory) as w:
        name = w.key.name
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    print(f"witness {name} listening on http://{shown}:{bound}", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises the SIGINT it handled: a clean stop
        pass
    finally:
        sock.close()
        sys.stdout.flush()
