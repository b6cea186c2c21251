"""Backends: one small interface the runner drives without knowing which one it is.

A backend takes the exact request body of one trial (``docs/trials.md`` §1) and returns a
:class:`Reply` holding the raw response bytes, or raises :class:`BackendError` saying what went
wrong, whether retrying can help, and how long the server asked us to wait. Backends never
retry on their own (the SDK's ``max_retries`` is 0): every attempt is a ledger event.

- ``anthropic``: the official SDK; ``ANTHROPIC_API_KEY``; ``base_url`` configurable. The body
  sent is the request blob itself (its canonical JSON bytes, recorded in ``trial.requested``),
  posted with the SDK's raw ``post``, so the bytes on the wire are the bytes hashed.
- ``openai-compatible``: chat completions over httpx for local servers (vLLM, llama.cpp, Ollama).
- ``simulated``: :class:`runner.simulated._vision.SimulatedModel`, offline and deterministic.
- ``replay``: answers each trial with the response recorded for it in another study's ledger.
- ``anthropic-bedrock``, ``anthropic-vertex``, ``azure-openai``, ``openai``, ``gemini``: the
  cloud endpoints, each through its vendor's SDK (:mod:`runner._cloud`, ``docs/backends.md``).
- ``anthropic-batch`` is driven by :mod:`runner._batch` (a different flow: submit, poll, collect).
"""

from __future__ import annotations

import base64
import gc
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ledger import LedgerError, PostgresLocation, RemoteLocation, canonical_json
from runner._identity import (
    ASK_TIMEOUT_SECONDS,
    Asked,
    ServerIdentity,
    identity_headers,
    listed_in,
    unanswered,
)
from runner._pool import fast_idle_checks
from runner._recorded import RecordedEvent, open_recorded

if TYPE_CHECKING:  # imported by the backends that use them: ``import anthropic`` takes seconds
    import anthropic
    import httpx2

FORMAT_ANTHROPIC = "anthropic-messages"
FORMAT_OPENAI = "openai-chat"

#: HTTP statuses worth another attempt (rate limit, overload, server errors, timeouts).
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
#: Request fields passed to the SDK by name; the rest (``temperature``, ``top_p``, ``top_k``,
#: which some SDK releases no longer name) travel as ``extra_body``, so the JSON sent is the same.
SDK_NAMED_PARAMS = frozenset({"model", "max_tokens", "messages", "system", "stop_sequences"})
#: Statuses that mean the API is overloaded: the runner lowers its concurrency.
OVERLOAD_STATUS = frozenset({429, 529})
#: ``error_type`` of a failure that is the run's configuration, not the trial's: a 404 from the
#: API root (a wrong ``--base-url`` path, or a model the server does not have). The run stops;
#: the attempt is recorded but does not count against ``--max-attempts`` (``docs/trials.md``).
CONFIGURATION = "configuration"


class BackendError(Exception):
    """One failed attempt: what happened, and whether another attempt can help."""

    def __init__(
        self,
        error_type: str,
        message: str,
        *,
        http_status: int | None = None,
        retryable: bool,
        retry_after: float | None = None,
        raw: bytes | None = None,
    ) -> None:
        """Describe the failure; ``raw`` keeps an unusable response body for the record."""
        super().__init__(message)
        self.error_type = error_type
        self.message = message
        self.http_status = http_status
        self.retryable = retryable
        self.retry_after = retry_after
        self.raw = raw

    @property
    def overloaded(self) -> bool:
        """True for 429 and 529: the runner should lower its concurrency."""
        return self.http_status in OVERLOAD_STATUS


@dataclass(frozen=True)
class Reply:
    """One response: raw body bytes and what the runner records beside them."""

    raw: bytes
    http_status: int
    request_id: str | None
    model: str | None
    stop_reason: str | None
    usage: dict[str, Any] = field(default_factory=dict)
    format: str = FORMAT_ANTHROPIC
    system_fingerprint: str | None = None
    """A chat completion's ``system_fingerprint`` (the backend configuration that answered)."""
    headers: dict[str, str] = field(default_factory=dict)
    """The response's identity headers (:data:`runner._identity.IDENTITY_HEADERS`)."""


class Backend(Protocol):
    """What the runner needs from a backend."""

    name: str
    simulated: bool
    priced: bool
    wire_format: str

    def wire_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The exact body this backend sends for a Messages request body (it is recorded)."""
        ...

    async def send(self, body: dict[str, Any], *, seed: str) -> Reply:
        """Send one wire body; ``seed`` is the trial's seed (used only by the simulation)."""
        ...

    async def count_tokens(self, body: dict[str, Any]) -> int | None:
        """Input tokens of one request, or None when the backend cannot count them."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


def reply_from_messages_json(
    raw: bytes, http_status: int, request_id: str | None, headers: dict[str, str] | None = None
) -> Reply:
    """Read a Messages API response body; raise :class:`BackendError` if it is not one."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BackendError(
            "malformed_response",
            f"HTTP {http_status} body is not JSON ({exc}); first bytes {raw[:60]!r}",
            http_status=http_status,
            retryable=True,
            raw=raw,
        ) from None
    if not isinstance(data, dict) or data.get("type") != "message":
        raise BackendError(
            "malformed_response",
            f"HTTP {http_status} body is JSON but not a Messages API message",
            http_status=http_status,
            retryable=True,
            raw=raw,
        )
    usage = data.get("usage")
    return Reply(
        raw=raw,
        http_status=http_status,
        request_id=request_id or (data.get("id") if isinstance(data.get("id"), str) else None),
        model=data.get("model") if isinstance(data.get("model"), str) else None,
        stop_reason=data.get("stop_reason") if isinstance(data.get("stop_reason"), str) else None,
        usage=usage if isinstance(usage, dict) else {},
        headers=headers or {},
    )


def reply_from_chat_json(raw: bytes, http_status: int, headers: dict[str, str]) -> Reply:
    """Read a chat completion body; raise :class:`BackendError` if it is not one.

    The completion's ``id`` is the request id, its ``model`` the model reported, its first
    choice's ``finish_reason`` the stop reason; ``system_fingerprint`` is kept where given.
    """
    try:
        data = json.loads(raw)
        text = data["choices"][0]["message"]["content"]
        if text is not None and not isinstance(text, str):  # null: no text, scored so
            raise TypeError("content is neither a string nor null")
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise BackendError(
            "malformed_response",
            f"HTTP {http_status} body is not a chat completion ({exc})",
            http_status=http_status,
            retryable=True,
            raw=raw,
        ) from None
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    choice = data["choices"][0]
    fingerprint = data.get("system_fingerprint")
    return Reply(
        raw=raw,
        http_status=http_status,
        request_id=data.get("id") if isinstance(data.get("id"), str) else None,
        model=data.get("model") if isinstance(data.get("model"), str) else None,
        stop_reason=choice.get("finish_reason") if isinstance(choice, dict) else None,
        usage=usage,
        format=FORMAT_OPENAI,
        system_fingerprint=fingerprint if isinstance(fingerprint, str) else None,
        headers=headers,
    )


def not_found(url: str, detail: str) -> BackendError:
    """A 404 from ``url``: the base URL (or the model) is wrong, which no retry can mend."""
    return BackendError(
        CONFIGURATION,
        f"HTTP 404 from {url} ({detail}): no such API route or model there; check --base-url "
        "(else ANTHROPIC_BASE_URL) and the study's model",
        http_status=404,
        retryable=False,
    )


def error_from_status(exc: anthropic.APIStatusError) -> BackendError:
    """Map an SDK status error to a :class:`BackendError`, keeping retry-after."""
    status = exc.status_code
    retry_after: float | None = None
    header = exc.response.headers.get("retry-after")
    if header is not None:
        try:
            retry_after = max(float(header), 0.0)
        except ValueError:
            retry_after = None
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error") if isinstance(body.get("error"), dict) else {}
    kind = error.get("type") if isinstance(error, dict) and error.get("type") else f"http_{status}"
    message = error.get("message") if isinstance(error, dict) and error.get("message") else str(exc)
    return BackendError(
        str(kind),
        f"HTTP {status} {kind}: {message}",
        http_status=status,
        retryable=status in RETRYABLE_STATUS,
        retry_after=retry_after,
    )


def import_sdk() -> tuple[Any, Any]:
    """Import ``anthropic`` and ``httpx2`` (its HTTP client) with the garbage collector paused.

    The SDK defines some 1,400 pydantic model classes; importing them with the collector on
    triggers collection after collection over every object already loaded, a fifth of the
    import's cost (which is most of ``ledger run``'s start). Nothing of the import is garbage.
    """
    paused = gc.isenabled()
    gc.disable()
    try:
        import anthropic
        import httpx2
    finally:
        if paused:
            gc.enable()
    return anthropic, httpx2


class AnthropicBackend:
    """The official ``anthropic`` SDK over HTTP, with retries left to the runner."""

    name = "anthropic"
    simulated = False
    priced = True
    wire_format = FORMAT_ANTHROPIC

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 600.0,
        max_connections: int = 256,
    ) -> None:
        """Create the client; the key defaults to ``ANTHROPIC_API_KEY``.

        Its connection pool keeps up to ``max_connections`` connections alive (the SDK's
        default keeps 100 of its 1,000), so a run of up to that concurrency reuses its
        connections instead of closing and reopening them.
        """
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise BackendError(
                "configuration",
                "the anthropic backend needs an API key: set ANTHROPIC_API_KEY",
                retryable=False,
            )
        sdk, http = import_sdk()
        self.sdk = sdk
        self.response_type: type[httpx2.Response] = http.Response
        limits = http.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        http_client = sdk.DefaultAsyncHttpxClient(limits=limits)
        self.fast_pool = fast_idle_checks(http_client)  # runner/_pool.py: the same pool, cheaper
        self.client: anthropic.AsyncAnthropic = sdk.AsyncAnthropic(
            api_key=key,
            base_url=base_url or os.environ.get("ANTHROPIC_BASE_URL"),
            max_retries=0,
            timeout=timeout,
            http_client=http_client,
        )
        self.base_url = str(self.client.base_url).rstrip("/")

    def unreachable(self, exc: Exception) -> str:
        """Explain a failed connection: the URL tried, the SDK's words, and what to check."""
        return (
            f"cannot reach the Messages API at {self.base_url} ({exc}); check that the URL is "
            "right (--base-url, else ANTHROPIC_BASE_URL, else the SDK's default), that the "
            "server is up, and the network or proxy"
        )

    def wire_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """Messages requests are sent as they are."""
        return body

    async def send(self, body: dict[str, Any], *, seed: str) -> Reply:
        """POST /v1/messages with ``body`` as its canonical JSON bytes (:meth:`send_encoded`)."""
        return await self.send_encoded(body, canonical_json(body), seed=seed)

    async def send_encoded(self, body: dict[str, Any], data: bytes, *, seed: str) -> Reply:
        """POST /v1/messages with ``data``, the canonical bytes of ``body`` (its request blob).

        The SDK's raw ``post`` sends the bytes as they are (its headers, key, base URL and
        error classes as ``messages.create`` has them), so the body is not serialised again
        and what reaches the API is byte for byte what ``trial.requested`` recorded. The raw
        response bytes are read before anything is parsed.
        """
        sdk = self.sdk
        try:
            response = await self.client.post(
                "/v1/messages", cast_to=self.response_type, content=data
            )
            raw = response.content
        except sdk.NotFoundError as exc:
            raise not_found(str(exc.response.request.url), error_from_status(exc).message) from None
        except sdk.APIStatusError as exc:
            raise error_from_status(exc) from None
        except sdk.APITimeoutError as exc:
            raise BackendError("timeout", f"request timed out: {exc}", retryable=True) from None
        except sdk.APIConnectionError as exc:
            raise BackendError(
                "connection_error", f"connection to {self.base_url} failed: {exc}", retryable=True
            ) from None
        except sdk.APIResponseValidationError as exc:
            raise BackendError(
                "malformed_response", f"response failed validation: {exc}", retryable=True
            ) from None
        return reply_from_messages_json(
            raw,
            response.status_code,
            response.headers.get("request-id"),
            identity_headers(response.headers),
        )

    async def server_identity(self, model_ids: Sequence[str]) -> ServerIdentity:
        """Ask the Models API about each locked id: ``GET /v1/models/{id}`` (a 404: not served).

        The Models API resolves an alias to the snapshot it names; what it returns is recorded
        as the model the server names. No request here costs tokens.
        """
        sdk = self.sdk
        asked: list[Asked] = []
        models: list[str] = []
        answered: dict[str, bool] = {}
        for model_id in model_ids:
            url = f"{self.base_url}/v1/models/{model_id}"
            try:
                raw = await self.client.models.with_raw_response.retrieve(
                    model_id, timeout=ASK_TIMEOUT_SECONDS
                )
                info = await raw.parse()
            except sdk.APIStatusError as exc:
                status = exc.status_code
                asked.append(
                    Asked(
                        url,
                        status,
                        identity_headers(exc.response.headers),
                        error_from_status(exc).message,
                    )
                )
                answered[model_id] = status == 404  # "no such model" is an answer
                continue
            except (sdk.APIError, ValueError) as exc:  # connection, timeout, a body not JSON
                asked.append(Asked(url, None, {}, f"{type(exc).__name__}: {exc}"))
                continue
            asked.append(Asked(url, raw.http_response.status_code, identity_headers(raw.headers)))
            answered[model_id] = True
            if isinstance(getattr(info, "id", None), str):
                models.append(info.id)
        listed = {
            m: True if listed_in(m, models) else (False if answered.get(m) else None)
            for m in model_ids
        }
        return ServerIdentity(tuple(asked), tuple(models) if answered else None, listed)

    async def count_tokens(self, body: dict[str, Any]) -> int | None:
        """POST /v1/messages/count_tokens for the request's model and messages."""
        params = {k: body[k] for k in ("model", "messages", "system") if k in body}
        sdk = self.sdk
        try:
            result = await self.client.messages.count_tokens(**params)
        except sdk.NotFoundError as exc:
            raise not_found(str(exc.response.request.url), error_from_status(exc).message) from None
        except sdk.APIStatusError as exc:
            raise error_from_status(exc) from None
        except sdk.APIConnectionError as exc:  # a timeout too
            raise BackendError("connection_error", self.unreachable(exc), retryable=True) from None
        return int(result.input_tokens)

    async def aclose(self) -> None:
        """Close the SDK's connection pool."""
        await self.client.close()


def openai_body(body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions body equivalent to a Messages request (``docs/prompts.md`` §6).

    The system prompt becomes a first ``system`` message; a message of text blocks only has
    its texts as one string, any other a list of parts (images as data URLs);
    ``stop_sequences`` is written ``stop``.
    """
    messages: list[dict[str, Any]] = []
    if "system" in body:
        messages.append({"role": "system", "content": body["system"]})
    for message in body["messages"]:
        blocks = message["content"]
        if all(block["type"] == "text" for block in blocks):
            messages.append(
                {"role": message["role"], "content": "".join(b["text"] for b in blocks)}
            )
            continue
        content: list[dict[str, Any]] = []
        for block in blocks:
            if block["type"] == "image":
                src = block["source"]
                url = f"data:{src['media_type']};base64,{src['data']}"
                content.append({"type": "image_url", "image_url": {"url": url}})
            else:
                content.append({"type": "text", "text": block["text"]})
        messages.append({"role": message["role"], "content": content})
    out: dict[str, Any] = {
        "model": body["model"],
        "messages": messages,
        "max_tokens": body["max_tokens"],
    }
    for name in ("temperature", "top_p", "top_k"):
        if name in body:
            out[name] = body[name]
    if "stop_sequences" in body:
        out["stop"] = list(body["stop_sequences"])
    for name in ("logprobs", "top_logprobs"):
        if name in body:
            out[name] = body[name]
    return out


class OpenAICompatibleBackend:
    """``POST {base_url}/chat/completions`` over httpx, for local model servers."""

    name = "openai-compatible"
    simulated = False
    priced = False
    wire_format = FORMAT_OPENAI

    def __init__(
        self, *, base_url: str, api_key: str | None = None, timeout: float = 600.0
    ) -> None:
        """``base_url`` is the server's API root, e.g. ``http://127.0.0.1:8000/v1``."""
        import httpx

        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.models_url = base_url.rstrip("/") + "/models"
        self.httpx = httpx
        self.client = httpx.AsyncClient(timeout=timeout, headers=headers)

    def wire_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat-completions translation of the Messages request."""
        return openai_body(body)

    async def send(self, body: dict[str, Any], *, seed: str) -> Reply:
        """POST the chat-completions body (already translated by :meth:`wire_body`)."""
        httpx = self.httpx
        try:
            response = await self.client.post(self.url, json=body)
        except httpx.TimeoutException as exc:
            raise BackendError("timeout", f"request timed out: {exc}", retryable=True) from None
        except httpx.HTTPError as exc:
            raise BackendError("connection_error", f"{self.url}: {exc}", retryable=True) from None
        status = response.status_code
        if status == 404:
            raise not_found(self.url, response.text[:200])
        if status >= 400:
            header = response.headers.get("retry-after")
            raise BackendError(
                f"http_{status}",
                f"HTTP {status} from {self.url}: {response.text[:200]}",
                http_status=status,
                retryable=status in RETRYABLE_STATUS,
                retry_after=float(header) if header and header.isdigit() else None,
            )
        return reply_from_chat_json(response.content, status, identity_headers(response.headers))

    async def server_identity(self, model_ids: Sequence[str]) -> ServerIdentity:
        """``GET {base_url}/models``: the OpenAI-compatible list of the models served.

        A server that cannot be asked (no such route, an error, a body that is no model list)
        leaves every id unknown (None), and the error says why.
        """
        httpx = self.httpx
        url = self.models_url
        try:
            response = await self.client.get(url, timeout=ASK_TIMEOUT_SECONDS)
        except httpx.HTTPError as exc:
            return unanswered(
                model_ids, [Asked(url, None, {}, f"{type(exc).__name__}: {exc}")], None
            )
        headers = identity_headers(response.headers)
        status = response.status_code
        if status >= 400:
            error = f"HTTP {status} from {url}: {response.text[:200]}"
            return unanswered(model_ids, [Asked(url, status, headers, error)], None)
        try:
            data = json.loads(response.content)
            ids = [entry["id"] for entry in data["data"]]
            if not all(isinstance(i, str) for i in ids):
                raise TypeError("a model id is not a string")
        except (ValueError, KeyError, TypeError) as exc:
            error = f"HTTP {status} body is not a model list ({type(exc).__name__}: {exc})"
            return unanswered(model_ids, [Asked(url, status, headers, error)], None)
        listed = {m: listed_in(m, ids) for m in model_ids}
        return ServerIdentity((Asked(url, status, headers),), tuple(ids), listed)

    async def count_tokens(self, body: dict[str, Any]) -> int | None:
        """Local servers have no standard token-counting route: None (the estimate says so)."""
        return None

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.client.aclose()


class SimulatedBackend:
    """The offline simulated model (:mod:`runner.simulated`); labelled as such everywhere."""

    name = "simulated"
    simulated = True
    priced = False
    wire_format = FORMAT_ANTHROPIC

    def __init__(self) -> None:
        """Create the model with its default, documented parameters."""
        from runner.simulated._vision import SimulatedModel

        self.model = SimulatedModel()

    def wire_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """Messages requests are sent as they are."""
        return body

    async def send(self, body: dict[str, Any], *, seed: str) -> Reply:
        """Answer from the image's pixels and the prompt's components; never the truth table.

        A text request that asks for log-probabilities (``top_logprobs``) is answered in the
        chat-completions form with them, as vLLM and llama.cpp answer (``docs/simulated.md``).
        """
        from runner.simulated._steps import is_step_seed
        from runner.simulated._text import has_image

        if is_step_seed(seed):  # a step call (docs/simulated.md §3)
            from runner.simulated._steps import respond

            step = json.dumps(respond(body, seed), ensure_ascii=False, separators=(",", ":"))
            return reply_from_messages_json(step.encode("utf-8"), 200, None)
        if "top_logprobs" in body and not has_image(body):
            data = self.model.text.respond_openai(body, seed)
            raw = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            return Reply(
                raw=raw,
                http_status=200,
                request_id=data["id"],
                model=data["model"],
                stop_reason=data["choices"][0]["finish_reason"],
                usage=data["usage"],
                format=FORMAT_OPENAI,
            )
        data = self.model.respond(body, seed)
        raw = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return reply_from_messages_json(raw, 200, None)

    async def count_tokens(self, body: dict[str, Any]) -> int | None:
        """The simulation's own token estimate for the request."""
        data = self.model.respond(body, "count-tokens")
        return int(data["usage"]["input_tokens"])

    async def aclose(self) -> None:
        """Nothing to release."""


class ReplayBackend:
    """Answer each request with the response recorded for the same request in another ledger.

    Requests are matched by the SHA-256 of their canonical bytes, so a replay only answers a
    request that is byte for byte one the source study sent. Where the source answered the same
    request several times (replicates), the answers are given out in the source's order.
    """

    name = "replay"
    simulated = False
    priced = False
    wire_format = FORMAT_ANTHROPIC

    def __init__(self, source: str | Path) -> None:
        """Index the responses recorded at ``source``.

        ``source`` is an exported archive (its folder, holding ``ledger/events.jsonl`` and
        ``blobs/``), a study folder (its ``ledger.db``) or a ``ledger.db`` file. Where the
        source's responses came from the simulation, this backend is labelled simulated too.
        """
        self._answers: dict[str, list[tuple[bytes, Mapping[str, Any]]]] = {}
        self.simulated = False
        self.source: Path | PostgresLocation | RemoteLocation = Path(source)
        try:
            with open_recorded(source) as recorded:
                self.source = recorded.source
                self._index(recorded.events(), recorded.blob)
        except LedgerError as exc:
            raise BackendError("configuration", f"replay source: {exc}", retryable=False) from None

    def _index(self, events: Iterable[RecordedEvent], blob: Callable[[str], bytes]) -> None:
        requests: dict[int, str] = {}
        for event in events:
            kind, body = event.kind, event.body
            if kind == "run.started" and body.get("simulated"):
                self.simulated = True
            elif kind == "trial.requested":
                requests[event.seq] = body["request_sha256"]
            elif kind == "trial.responded":
                if body.get("simulated"):
                    self.simulated = True
                digest = requests.get(body["request_seq"])
                if digest is not None:
                    self._answers.setdefault(digest, []).append(
                        (blob(event.blobs["response"]), body)
                    )

    def wire_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """Messages requests are sent as they are."""
        return body

    async def send(self, body: dict[str, Any], *, seed: str) -> Reply:
        """The next recorded response to this exact request."""
        return self._answer(body, take=True)

    async def peek(self, body: dict[str, Any]) -> Reply:
        """The response :meth:`send` would give next, without using it up (the preflight)."""
        return self._answer(body, take=False)

    async def server_identity(self, model_ids: Sequence[str]) -> ServerIdentity:
        """No server to ask: the answers come from a recorded ledger (every id unknown)."""
        return unanswered(
            model_ids,
            [],
            f"the replay backend answers from the responses recorded in "
            f"{self.source}; there is no server to ask",
        )

    def _answer(self, body: dict[str, Any], *, take: bool) -> Reply:
        from runner._request import request_blob

        _, digest = request_blob(body)
        answers = self._answers.get(digest)
        if not answers:
            raise BackendError(
                "replay_missing",
                f"{self.source} has no (more) recorded responses to request {digest[:16]}",
                retryable=False,
            )
        raw, recorded = answers.pop(0) if take else answers[0]
        reply = reply_from_messages_json(raw, int(recorded.get("http_status", 200)), None)
        return Reply(
            raw=reply.raw,
            http_status=reply.http_status,
            request_id=recorded.get("request_id"),
            model=reply.model,
            stop_reason=reply.stop_reason,
            usage=reply.usage,
            format=str(recorded.get("format", FORMAT_ANTHROPIC)),
        )

    async def count_tokens(self, body: dict[str, Any]) -> int | None:
        """The input tokens the source recorded for this request, if any."""
        from runner._request import request_blob

        _, digest = request_blob(body)
        answers = self._answers.get(digest)
        if answers:
            value = answers[0][1].get("usage", {}).get("input_tokens")
            return int(value) if isinstance(value, int) else None
        return None

    async def aclose(self) -> None:
        """Nothing to release."""


BACKENDS = (
    "anthropic",
    "anthropic-batch",
    "anthropic-bedrock",
    "anthropic-vertex",
    "azure-openai",
    "openai",
    "gemini",
    "openai-compatible",
    "simulated",
    "replay",
)

#: Which backends serve a locked ``[model] provider`` (``docs/study-spec.md``). ``simulated`` and
#: ``replay`` answer for any provider: they are not the provider's model, and say so.
PROVIDER_BACKENDS: dict[str, tuple[str, ...]] = {
    "anthropic": ("anthropic", "anthropic-batch"),
    "anthropic-bedrock": ("anthropic-bedrock",),
    "anthropic-vertex": ("anthropic-vertex",),
    "azure-openai": ("azure-openai",),
    "openai-compatible": ("openai-compatible",),
    "openai": ("openai", "openai-compatible"),
    "gemini": ("gemini",),
}
ANY_PROVIDER = ("simulated", "replay")


def provider_refusal(provider: str, backend: str) -> str | None:
    """Why ``backend`` may not run a study locked for ``provider``, or None when it may."""
    if backend in ANY_PROVIDER:
        return None
    served = PROVIDER_BACKENDS.get(provider, ())
    if backend in served:
        return None
    known = ", ".join(f"{p} -> {' or '.join(b)}" for p, b in PROVIDER_BACKENDS.items())
    if served:
        use = f"use --backend {' or '.join(served)}"
    else:
        use = f"no real backend serves it (known providers: {known})"
    return (
        f"the study is locked for provider {provider!r} ([model] provider), which the "
        f"{backend} backend does not serve; {use}, or simulated / replay (labelled simulated); "
        "nothing was recorded"
    )


def image_bytes(body: Mapping[str, Any]) -> bytes:
    """The decoded image of a request body (for checks and tests)."""
    for block in body["messages"][0]["content"]:
        if block["type"] == "image":
            return base64.b64decode(block["source"]["data"], validate=True)
    raise ValueError("request has no image block")
