"""Where a ledger behind ``ledger serve`` lives, and the HTTP client that reaches it.

See ``ledger/_remote.py`` (the :class:`ledger.Ledger` interface over this client) and
``docs/service.md`` §7-9 (the append API).
"""

from __future__ import annotations

import base64
import http.client
import json as _json
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from ledger._errors import (
    AuthorizationError,
    ConflictError,
    FormatError,
    LedgerError,
    NoteError,
    ProofError,
    RefusedError,
    StoreError,
)

if TYPE_CHECKING:
    from ledger._keys import SigningKey

URL_SCHEMES = ("http", "https")
STUDY_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
API = "api/v1"
READ_HEADER = "Ledger-Signature"
READ_CONTEXT = "prompt-ledger read v1"
KEY_ENV = "PROMPT_LEDGER_KEY"
TURN_HEADER = "Ledger-Turn"
"""Header of an append: ``ask`` (give me a turn if I lose the race), ``wait`` (give me a turn
before I sign: the body is ``{}``) or a turn's token."""
TURN_ASK = "ask"
TURN_WAIT = "wait"
RETRY_SECONDS = 60.0
"""How long a request that got no answer (or a 502/503/504) is retried, byte for byte."""
TIMEOUT_SECONDS = 60.0
PAGE = 2000


def is_http_url(text: str) -> bool:
    """True when ``text`` names a ledger behind ``ledger serve`` (``http(s)://``)."""
    return "://" in text and text.split("://", 1)[0].lower() in URL_SCHEMES


def read_message(method: str, target: str, when: int) -> bytes:
    """The bytes a signed read request signs: context, method, path with query, unix time."""
    return f"{READ_CONTEXT}\n{method}\n{target}\n{when}\n".encode()


@dataclass(frozen=True)
class RemoteLocation:
    """A study's ledger behind one or more ``ledger serve`` processes of one store.

    ``urls`` are the study's base URLs (``http(s)://HOST[:PORT][/PREFIX]/STUDY``), all naming
    the same study: the client spreads its requests over them in turn and moves to the next
    on a connection error (several stateless service processes on one PostgreSQL).
    """

    urls: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> RemoteLocation:
        """Parse one URL, or several separated by white space. Raises :class:`StoreError`."""
        urls = text.split()
        if not urls:
            raise StoreError("no service URL given")
        names = set()
        out = []
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme.lower() not in URL_SCHEMES or not parts.netloc:
                raise StoreError(f"{url!r} is not an http(s)://HOST/STUDY URL of `ledger serve`")
            if parts.password is not None or parts.username is not None:
                raise StoreError(
                    f"{url}: the URL holds a user name or password; writers authenticate by "
                    "their signatures only (docs/service.md)"
                )
            if parts.query or parts.fragment:
                raise StoreError(f"{url}: a service URL has no query or fragment")
            path = parts.path.rstrip("/")
            study = path.rsplit("/", 1)[-1]
            if not STUDY_RE.match(study):
                raise StoreError(
                    f"{url}: the URL must end in the study's name (1-63 lower-case letters, "
                    "digits, '-' or '_'), e.g. https://ledger.example.org/my-study"
                )
            names.add(study)
            out.append(f"{parts.scheme.lower()}://{parts.netloc}{path}")
        if len(names) > 1:
            raise StoreError(f"the URLs name different studies ({', '.join(sorted(names))})")
        return cls(tuple(out))

    @property
    def study(self) -> str:
        """The study's name (the last path element)."""
        return self.urls[0].rsplit("/", 1)[-1]

    def __str__(self) -> str:
        return " ".join(self.urls)

    def exists(self) -> bool:
        """True when the service holds a ledger for the study (asks it)."""
        with Client(self) as client:
            answer = client.request("GET", "head", allow=(404,))
        return answer.status_code == 200

    def is_file(self) -> bool:
        """The same as :meth:`exists` (code written for ``ledger.db`` asks it this way)."""
        return self.exists()


@dataclass(frozen=True)
class Answer:
    """One HTTP answer of the service: status, headers (lower-case names) and body."""

    status_code: int
    headers: dict[str, str]
    content: bytes
    url: str = ""
    """The base URL the request was answered by (one of the location's)."""

    @property
    def is_success(self) -> bool:
        """True for a 2xx status."""
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        """The body as text (UTF-8, undecodable bytes replaced)."""
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body parsed as JSON (raises ValueError when it is not)."""
        return _json.loads(self.content)


class Client:
    """HTTP/1.1 to the service: keep-alive connections, round robin over the URLs, retries.

    ``http.client`` (the standard library's) costs a third of what httpx does per request,
    which is most of an append's time on loopback (``docs/service.md`` §10).
    """

    def __init__(self, where: RemoteLocation) -> None:
        self.where = where
        self._next = 0
        self._conns: dict[str, http.client.HTTPConnection] = {}
        self._lock = threading.Lock()  # one request at a time (`ledger run`'s writer thread)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every open connection."""
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def _conn(self, base: str) -> tuple[http.client.HTTPConnection, str]:
        parts = urlsplit(base)
        conn = self._conns.get(base)
        if conn is None:
            host, port = parts.hostname or "", parts.port
            if parts.scheme == "https":
                conn = http.client.HTTPSConnection(host, port, timeout=TIMEOUT_SECONDS)
            else:
                conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT_SECONDS)
            self._conns[base] = conn
        return conn, parts.path

    def request(
        self,
        method: str,
        op: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        signer: SigningKey | None = None,
        allow: tuple[int, ...] = (),
        headers: Mapping[str, str] | None = None,
        url: str | None = None,
    ) -> Answer:
        """Send one request; retry it unchanged while no answer comes (or 502/503/504).

        Answers other than 2xx and ``allow`` raise the library error their status means.
        ``url`` (one of the location's base URLs) is where the first attempt goes, instead of
        the next in turn. Thread-safe: requests from several threads are sent one after the
        other.
        """
        with self._lock:
            return self._request(method, op, json, params, signer, allow, headers or {}, url)

    def _request(
        self,
        method: str,
        op: str,
        json: Any,
        params: Mapping[str, Any] | None,
        signer: SigningKey | None,
        allow: tuple[int, ...],
        extra: Mapping[str, str],
        first: str | None,
    ) -> Answer:
        deadline = time.monotonic() + RETRY_SECONDS
        urls = self.where.urls
        delay = 0.1
        body = None if json is None else _json.dumps(json, separators=(",", ":")).encode()
        query = f"?{urlencode(params)}" if params else ""
        while True:
            if first in urls:
                base, first = str(first), None
            else:
                base = urls[self._next % len(urls)]
                self._next += 1
            conn, prefix = self._conn(base)
            target = f"{prefix}/{API}/{op}{query}"
            headers = {"Accept": "application/json", **extra}
            if body is not None:
                headers["Content-Type"] = "application/json"
            if signer is not None:
                when = int(time.time())
                sig = signer.sign(read_message(method, target, when))
                headers[READ_HEADER] = f"{signer.actor} {when} {base64.b64encode(sig).decode()}"
            try:
                conn.request(method, target, body=body, headers=headers)
                raw = conn.getresponse()
                answer = Answer(
                    raw.status, {k.lower(): v for k, v in raw.getheaders()}, raw.read(), base
                )
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                self._conns.pop(base, None)
                if time.monotonic() > deadline:
                    raise StoreError(
                        f"{self.where}: the service does not answer ({exc or type(exc).__name__});"
                        " whatever the last request carried was recorded once or not at all: "
                        "run the command again"
                    ) from exc
                time.sleep(delay if len(urls) == 1 else 0)
                delay = min(delay * 2, 2.0)
                continue
            if answer.status_code in (502, 503, 504) and time.monotonic() <= deadline:
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            if answer.is_success or answer.status_code in allow:
                return answer
            raise _error(self.where, answer)


def reason(answer: Answer) -> str:
    try:
        data = answer.json()
    except ValueError:
        return answer.text.strip()[:500] or f"HTTP {answer.status_code}"
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return str(data["error"])
    return f"HTTP {answer.status_code}"


def _error(where: RemoteLocation, answer: Answer) -> LedgerError:
    """The library error an error answer of the service stands for."""
    status, why = answer.status_code, reason(answer)
    text = f"{where}: {why}"
    if status == 409:
        data = answer.json() if _is_json(answer) else {}
        head = data.get("head", {})
        turn = data.get("turn")
        return ConflictError(
            text,
            size=int(head.get("size", -1)),
            last=str(head.get("last", "")),
            head=head if "frontier" in head else None,
            turn=turn if isinstance(turn, str) and "frontier" in head else None,
            turn_url=answer.url or None,
        )
    if status == 403:
        return AuthorizationError(text)
    if status == 422:
        data = answer.json() if _is_json(answer) else {}
        seq = data.get("seq") if isinstance(data, dict) else None
        rule = data.get("rule", "") if isinstance(data, dict) else ""
        return RefusedError(text, spec=None, rule=str(rule), seq=seq if type(seq) is int else None)
    kind = answer.json().get("type") if _is_json(answer) else None
    if status == 400:
        return {"ProofError": ProofError, "NoteError": NoteError}.get(str(kind), FormatError)(text)
    return StoreError(f"{text} (HTTP {status})")


def _is_json(answer: Answer) -> bool:
    return str(answer.headers.get("content-type", "")).startswith("application/json")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
