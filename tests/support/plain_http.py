"""Plain HTTP requests of the tests to servers on 127.0.0.1, through one ``httpx.Client``.

``httpx.get``/``httpx.post``/``httpx.request`` build a new client for every request, and a new
client builds an SSL context and loads the CA bundle (about 25 ms of CPU each, for a plain
``http://`` request that never uses it): the fuzzed-request tests of the service make hundreds.
This client is built once per process and keeps no connection alive (each request opens and
closes its own, as ``httpx.get`` does), so a server stopped between tests leaves nothing stale
behind. The timeout is ``httpx``'s default (5 s) unless a call gives its own.
"""

from __future__ import annotations

import functools
from typing import Any

import httpx

__all__ = ["get", "post", "request"]


@functools.cache
def _client() -> httpx.Client:
    return httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))


def request(method: str, url: str, **kwargs: Any) -> httpx.Response:
    """``httpx.request(method, url, **kwargs)`` through the shared client."""
    return _client().request(method, url, **kwargs)


def get(url: str, **kwargs: Any) -> httpx.Response:
    """``httpx.get(url, **kwargs)`` through the shared client."""
    return _client().get(url, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    """``httpx.post(url, **kwargs)`` through the shared client."""
    return _client().post(url, **kwargs)
