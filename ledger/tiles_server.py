"""``ledger serve``: the tlog-tiles read path, and the append API, over HTTP (Starlette, uvicorn).

The append API (``--store``, ``ledger/_service.py``, ``docs/service.md`` §7) is routed first,
under ``/<study>/api/v1/``; everything else is the read path below.

The service serves the files of a published directory (``ledger tiles``) and nothing else; it
never opens a ledger, so reads never reach the database. ``DIR`` is one published log (served at
``/``) or a directory of them (``DIR/<name>/checkpoint``, served at ``/<name>/``). Routes:

* ``GET [/<name>]/checkpoint``: ``text/plain; charset=utf-8``, ``Cache-Control: no-cache``;
* ``GET [/<name>]/tile/<L>/<N>[.p/<W>]`` and ``tile/entries/<N>[.p/<W>]``:
  ``application/octet-stream``, ``Cache-Control: public, max-age=31536000, immutable``;
* ``GET [/<name>]/blob/<sha256 hex>``: the blob, immutable likewise.

A path that is not one of these (a non-canonical tile path, ``..``, a name with a dot first) is
answered 400 with the reason, a method other than GET or HEAD 405, a file not published 404.
"""

from __future__ import annotations

import re
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from ledger._errors import LedgerError
from ledger._local_server import LocalServer
from ledger._tiles import TileError, parse_tile_path

if TYPE_CHECKING:
    from ledger._service import AppendService

__all__ = ["IMMUTABLE", "LocalTiles", "ServeError", "make_app", "serve"]

IMMUTABLE = "public, max-age=31536000, immutable"
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")
_BLOB = re.compile(r"blob/[0-9a-f]{64}")
MAX_PATH = 512


class ServeError(LedgerError):
    """The service cannot start (a missing directory, a port in use)."""


def _text(body: str, status: int) -> Response:
    return Response(body + "\n", status, media_type="text/plain; charset=utf-8")


def _resolve(root: Path, path: str) -> tuple[Path | None, str, str]:
    """(file, kind, error) for a request path: kind is checkpoint, tile or blob."""
    if len(path) > MAX_PATH:
        return None, "", f"path longer than {MAX_PATH} characters"
    base = root
    rest = path
    first, sep, tail = path.partition("/")
    if sep and first not in ("tile", "blob"):
        if not _NAME.fullmatch(first):
            return None, "", f"{first!r} is not a log name"
        base, rest = root / first, tail
    elif not sep and first != "checkpoint":
        if _NAME.fullmatch(first):
            return None, "", "a log's files are checkpoint, tile/... and blob/..."
        return None, "", f"{first!r} is not a path of the log"
    if rest == "checkpoint":
        return base / "checkpoint", "checkpoint", ""
    if rest.startswith("tile/"):
        try:
            ref = parse_tile_path(rest)
        except TileError as exc:
            return None, "", str(exc)
        return base / ref.path, "tile", ""
    if _BLOB.fullmatch(rest):
        return base / rest, "blob", ""
    return None, "", f"{rest!r} is not checkpoint, a tile path or blob/<sha256 hex>"


def make_app(directory: Path | None, service: AppendService | None = None) -> ASGIApp:
    """The application serving the published log(s) in ``directory`` and ``service``'s API."""
    if directory is not None and not directory.is_dir():
        raise ServeError(f"{directory} is not a directory (publish a log with `ledger tiles`)")
    if directory is None and service is None:
        raise ServeError("nothing to serve: give a tiles DIRECTORY, a --store, or both")
    root = directory.resolve() if directory is not None else None

    async def get(request: Request) -> Response:
        path = str(request.path_params["path"])
        if root is None:
            return _text(f"not found: /{path} (this service serves the append API only)", 404)
        target, kind, error = _resolve(root, path)
        if target is None:
            return _text(f"bad request: {error}", 400)
        try:
            data = target.read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return _text(f"not found: /{path} is not published", 404)
        except OSError as exc:
            return _text(f"cannot read /{path}: {exc.strerror}", 500)
        if kind == "checkpoint":
            return Response(
                data,
                200,
                media_type="text/plain; charset=utf-8",
                headers={"Cache-Control": "no-cache"},
            )
        return Response(
            data, 200, media_type="application/octet-stream", headers={"Cache-Control": IMMUTABLE}
        )

    async def refuse(request: Request) -> Response:
        return _text(f"method {request.method} not allowed: the read path is GET only", 405)

    from ledger._service import AppendRoute, api_routes

    app = Starlette(
        routes=[
            *(api_routes(service) if service is not None else []),
            Route("/{path:path}", get, methods=["GET", "HEAD"]),
            Route("/{path:path}", refuse, methods=["POST", "PUT", "DELETE", "PATCH", "OPTIONS"]),
        ]
    )
    return app if service is None else AppendRoute(app, service)


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ServeError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}); choose another --port"
        ) from exc
    return sock


class LocalTiles(LocalServer):
    """The read path (and the append API) served in a thread of this process on 127.0.0.1.

    For tests and benchmarks; ``service`` adds the append API over its store.
    """

    def __init__(
        self, directory: Path | None, port: int = 0, service: AppendService | None = None
    ) -> None:
        """Bind the socket (port 0: the system picks one); :meth:`start` serves it."""
        self.service = service
        super().__init__(
            _listen("127.0.0.1", port),
            make_app(directory, service),
            name="local-tiles",
            what="tiles service",
            error=ServeError,
            timeout_keep_alive=5,
        )

    def stop(self) -> None:
        """Stop serving, wait for the server's thread, and close the append service."""
        super().stop()
        if self.service is not None:
            self.service.close()


def serve(
    directory: Path | None, host: str, port: int, service: AppendService | None = None
) -> None:
    """Serve ``directory`` (and ``service``'s append API) on ``host:port`` until SIGTERM.

    Prints ``serving WHAT on http://HOST:PORT`` (flushed) once the socket is bound.
    """
    import uvicorn

    app = make_app(directory, service)
    sock = _listen(host, port)
    shown = f"[{host}]" if ":" in host else host
    what = " and ".join(
        [
            *([str(directory)] if directory is not None else []),
            *([f"the append API over {service.store.text}"] if service is not None else []),
        ]
    )
    print(f"serving {what} on http://{shown}:{sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_keep_alive=5,
        limit_concurrency=1000,
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        if service is not None:
            service.close()
        sys.stdout.flush()
