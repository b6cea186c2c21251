"""The cloud backends: Claude on Amazon Bedrock and Google Vertex AI, Azure OpenAI, OpenAI, Gemini.

Each goes through its vendor's own SDK client, with the SDK's retries off (every attempt is a
ledger event) and credentials only from the vendor's standard sources, never from the study
(``docs/backends.md``):

- ``anthropic-bedrock``: ``anthropic.AsyncAnthropicBedrock`` (AWS SigV4 by botocore: the AWS
  environment, profiles, SSO; or a Bedrock API key, ``AWS_BEARER_TOKEN_BEDROCK``). The body is the
  Messages request without ``model`` and with ``"anthropic_version": "bedrock-2023-05-31"``,
  posted to ``/model/{model id}/invoke``.
- ``anthropic-vertex``: ``anthropic.AsyncAnthropicVertex`` (Google application-default
  credentials). The body is the Messages request without ``model`` and with
  ``"anthropic_version": "vertex-2023-10-16"``, posted to
  ``/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict``.
- ``azure-openai``: ``openai.AsyncAzureOpenAI`` (``api-key`` or an Entra token, and the
  ``api-version`` query parameter). The chat-completions body (``docs/prompts.md`` §6), posted
  to ``/openai/deployments/{deployment}/chat/completions``; the study's model id is the
  deployment's name.
- ``openai``: ``openai.AsyncOpenAI``, ``POST /v1/chat/completions`` (the Chat Completions API,
  not the Responses API).
- ``gemini``: ``openai.AsyncOpenAI`` against Gemini's OpenAI-compatible endpoint
  (``.../v1beta/openai/chat/completions``) with a Gemini API key.

Every request goes out as the canonical JSON bytes of the wire body, the bytes
``trial.requested`` records, through the SDK's raw ``post`` (its auth, signing, headers and
error classes, no second serialisation). Failures become :class:`runner._backends.BackendError`
with the server's throttling signal as ``retry_after`` (:func:`throttle_delay`).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import re
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from ledger import canonical_json
from runner._backends import (
    CONFIGURATION,
    FORMAT_ANTHROPIC,
    FORMAT_OPENAI,
    RETRYABLE_STATUS,
    BackendError,
    Reply,
    import_sdk,
    openai_body,
    reply_from_chat_json,
    reply_from_messages_json,
)
from runner._identity import (
    ASK_TIMEOUT_SECONDS,
    Asked,
    ServerIdentity,
    identity_headers,
    listed_in,
    unanswered,
)
from runner._provenance import BEDROCK_ID as _BEDROCK_ID
from runner._provenance import anthropic_name

__all__ = [
    "BEDROCK_VERSION",
    "VERTEX_VERSION",
    "AnthropicBedrockBackend",
    "AnthropicVertexBackend",
    "AzureOpenAIBackend",
    "GeminiBackend",
    "OpenAIBackend",
    "Routed",
    "anthropic_name",
    "throttle_delay",
]

#: ``anthropic_version`` of a Messages body on Bedrock (the body names no model).
BEDROCK_VERSION = "bedrock-2023-05-31"
#: ``anthropic_version`` of a Messages body on Vertex AI (the body names no model).
VERTEX_VERSION = "vertex-2023-10-16"
#: The Azure OpenAI ``api-version`` used unless ``OPENAI_API_VERSION`` names another (a GA one).
AZURE_API_VERSION = "2024-10-21"
#: Gemini's OpenAI-compatible API root.
GEMINI_BASE_URL = "https://generativelanguage.googleapis.com/v1beta/openai/"
#: Google's OAuth scope for Vertex AI.
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


class Routed(dict[str, Any]):
    """A wire body that names no model (Bedrock, Vertex): the model rides beside it, for the URL.

    It is a ``dict`` (its canonical JSON is the body alone, what is recorded and sent); ``model``
    is the locked model id the request is routed to.
    """

    model: str


def _routed(body: Mapping[str, Any], version: str) -> Routed:
    out = Routed({k: v for k, v in body.items() if k != "model"})
    out["anthropic_version"] = version
    out.model = str(body["model"])
    return out


def _duration(text: str) -> float | None:
    """Seconds of a duration written ``1s``, ``6m0s``, ``20ms``, ``1h2m`` or ``37.5s``."""
    parts = _DURATION.findall(text.strip())
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        return None
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in parts)


def throttle_delay(headers: Mapping[str, str], body: object) -> float | None:
    """How long the server asks the client to wait, from whichever signal it gave, in seconds.

    In order: ``retry-after-ms`` (Azure, OpenAI), ``retry-after`` (seconds or an HTTP date),
    a Google ``RetryInfo`` detail's ``retryDelay`` (``"37s"``, Vertex AI and Gemini, in the
    error body), and OpenAI's ``x-ratelimit-reset-requests`` / ``-tokens`` (``"6m0s"``; the
    longer). None when the response gave none (Bedrock gives none: the runner backs off on its
    own, with jitter).
    """
    lower = {k.lower(): v for k, v in headers.items()}
    for signal in (_retry_after_ms(lower), _retry_after(lower), _retry_info(body)):
        if signal is not None:
            return signal
    resets = [
        _duration(lower[name])
        for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")
        if name in lower
    ]
    known = [r for r in resets if r is not None]
    return max(known) if known else None


def _retry_after_ms(lower: Mapping[str, str]) -> float | None:
    """``retry-after-ms`` (Azure, OpenAI), in seconds."""
    ms = lower.get("retry-after-ms")
    if ms is None:
        return None
    try:
        return max(float(ms) / 1000.0, 0.0)
    except ValueError:
        return None


def _retry_after(lower: Mapping[str, str]) -> float | None:
    """``retry-after``: seconds, or an HTTP date (seconds from now)."""
    after = lower.get("retry-after")
    if after is None:
        return None
    try:
        return max(float(after), 0.0)
    except ValueError:
        moment = email.utils.parsedate_to_datetime(after) if after.strip() else None
        return max(moment.timestamp() - time.time(), 0.0) if moment is not None else None


def _retry_info(body: object) -> float | None:
    """A Google ``RetryInfo`` detail's ``retryDelay`` in the error body, in seconds."""
    errors = body if isinstance(body, list) else [body]
    for entry in errors:
        error = entry.get("error") if isinstance(entry, dict) else None
        details = error.get("details") if isinstance(error, dict) else None
        for detail in details if isinstance(details, list) else []:
            delay = detail.get("retryDelay") if isinstance(detail, dict) else None
            if isinstance(delay, str) and _duration(delay) is not None:
                return _duration(delay)
    return None


def _nested_error(error: dict[str, Any]) -> tuple[str | None, str | None]:
    """(type or code, message) of an ``{"error": {...}}`` body: its code, else type, else status."""
    code, kind, status = (
        value if isinstance(value := error.get(k), str) else None
        for k in ("code", "type", "status")
    )
    message = error.get("message")
    return code or kind or status, message if isinstance(message, str) else None


def _error_fields(headers: Mapping[str, str], body: object) -> tuple[str | None, str | None]:
    """(the error's type or code, its message) from any of the vendors' error bodies."""
    lower = {k.lower(): v for k, v in headers.items()}
    aws = lower.get("x-amzn-errortype")
    entry = body[0] if isinstance(body, list) and body else body
    if isinstance(entry, dict):
        error = entry.get("error")
        if isinstance(error, dict):
            return _nested_error(error)
        message = entry.get("message") or entry.get("Message")
        if aws:
            return aws.split(":")[0], message if isinstance(message, str) else None
        return None, message if isinstance(message, str) else None
    return (aws.split(":")[0] if aws else None), None


def _bedrock_resolved(raw: bytes) -> str | None:
    """The model id (or inference profile id) a Bedrock control-plane answer names."""
    try:
        info = json.loads(raw)
    except ValueError:
        return None
    details = info.get("modelDetails") if isinstance(info, dict) else None
    named = (details or {}).get("modelId") if isinstance(details, dict) else None
    named = named or (info.get("inferenceProfileId") if isinstance(info, dict) else None)
    return named if isinstance(named, str) else None


def status_error(status: int, headers: Mapping[str, str], body: object, where: str) -> BackendError:
    """One failed HTTP exchange with a cloud API as a :class:`BackendError`.

    Retryable: the statuses of :data:`runner._backends.RETRYABLE_STATUS`, except a 429 that
    says the account has no quota left (``insufficient_quota``), which no wait mends. A 404 is
    the run's configuration (a model, deployment or region that does not serve it).
    """
    kind, message = _error_fields(headers, body)
    kind = kind or f"http_{status}"
    text = f"HTTP {status} {kind} from {where}: {message or 'no message'}"
    if status == 404:
        return BackendError(
            CONFIGURATION,
            f"{text}; no such model, deployment or route there (check the study's model id, "
            "the region or endpoint, and --base-url)",
            http_status=404,
            retryable=False,
        )
    quota = kind == "insufficient_quota"
    return BackendError(
        str(kind),
        text,
        http_status=status,
        retryable=status in RETRYABLE_STATUS and not quota,
        retry_after=throttle_delay(headers, body) if status in RETRYABLE_STATUS else None,
    )


def _configuration(message: str) -> BackendError:
    return BackendError(CONFIGURATION, message, retryable=False)


class _RawSDKBackend:
    """What the five share: a raw ``post`` of the recorded bytes through the vendor's SDK."""

    name = ""
    simulated = False
    priced = False
    wire_format = FORMAT_OPENAI
    sdk: Any
    client: Any
    response_type: Any
    base_url: str

    @property
    def url(self) -> str:
        """The API root requests go to (recorded in ``run.preflight`` and ``run.started``)."""
        return self.base_url

    def wire_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat-completions translation of the Messages request (``docs/prompts.md`` §6)."""
        return openai_body(body)

    def path(self, wire: Mapping[str, Any]) -> str:
        """The path (under :attr:`base_url`) a wire body is posted to."""
        raise NotImplementedError

    def reply(self, raw: bytes, status: int, headers: Mapping[str, str]) -> Reply:
        """Read a successful response body."""
        return reply_from_chat_json(raw, status, identity_headers(headers))

    async def send(self, body: dict[str, Any], *, seed: str) -> Reply:
        """POST ``body`` as its canonical JSON bytes (:meth:`send_encoded`)."""
        return await self.send_encoded(body, canonical_json(body), seed=seed)

    async def send_encoded(self, body: dict[str, Any], data: bytes, *, seed: str) -> Reply:
        """POST ``data``, the canonical bytes of ``body`` as recorded, through the SDK as is."""
        sdk = self.sdk
        path = self.path(body)
        try:
            response = await self.client.post(path, cast_to=self.response_type, content=data)
            raw = response.content
        except sdk.APIStatusError as exc:
            try:
                parsed: object = json.loads(exc.response.content)
            except (ValueError, UnicodeDecodeError):
                parsed = exc.body
            raise status_error(
                exc.status_code, exc.response.headers, parsed, f"{self.base_url}{path}"
            ) from None
        except sdk.APITimeoutError as exc:
            raise BackendError("timeout", f"request timed out: {exc}", retryable=True) from None
        except sdk.APIConnectionError as exc:
            raise BackendError(
                "connection_error",
                f"connection to {self.base_url} failed: {exc}",
                retryable=True,
            ) from None
        except (ValueError, RuntimeError) as exc:  # credentials the SDK could not resolve
            raise _configuration(f"the {self.name} backend: {exc}") from None
        return self.reply(raw, response.status_code, response.headers)

    async def count_tokens(self, body: dict[str, Any]) -> int | None:
        """None: the estimate counts tokens on its own, and says so."""
        return None

    async def aclose(self) -> None:
        """Close the SDK's connection pool."""
        await self.client.close()


def _openai_sdk() -> tuple[Any, Any]:
    import httpx2
    import openai

    return openai, httpx2


class _OpenAIFamily(_RawSDKBackend):
    """Chat completions through the ``openai`` SDK (OpenAI, Azure OpenAI, Gemini)."""

    wire_format = FORMAT_OPENAI

    def _finish(self, client: Any) -> None:
        self.client = client
        self.base_url = str(client.base_url).rstrip("/")

    def path(self, wire: Mapping[str, Any]) -> str:
        """``/chat/completions``."""
        return "/chat/completions"

    def models_named(self, info: Mapping[str, Any]) -> list[str]:
        """The model ids a ``GET /models/{id}`` answer names."""
        model_id = info.get("id")
        return [model_id] if isinstance(model_id, str) else []

    async def server_identity(self, model_ids: Sequence[str]) -> ServerIdentity:
        """``GET {base_url}/models/{id}`` for each locked id (a 404: not served)."""
        sdk = self.sdk
        asked: list[Asked] = []
        models: list[str] = []
        answered: dict[str, bool] = {}
        for model_id in model_ids:
            path = f"/models/{urllib.parse.quote(model_id, safe='')}"
            url = f"{self.base_url}{path}"
            try:
                response = await self.client.get(
                    path,
                    cast_to=self.response_type,
                    options={"timeout": ASK_TIMEOUT_SECONDS},
                )
                info = json.loads(response.content)
            except sdk.APIStatusError as exc:
                status = exc.status_code
                asked.append(
                    Asked(
                        url,
                        status,
                        identity_headers(exc.response.headers),
                        f"HTTP {status}: {str(exc)[:200]}",
                    )
                )
                answered[model_id] = status == 404
                continue
            except (sdk.APIError, ValueError) as exc:
                asked.append(Asked(url, None, {}, f"{type(exc).__name__}: {exc}"))
                continue
            asked.append(Asked(url, response.status_code, identity_headers(response.headers)))
            answered[model_id] = True
            if isinstance(info, dict):
                models += self.models_named(info)
        listed = {
            m: True if listed_in(m, models) else (False if answered.get(m) else None)
            for m in model_ids
        }
        return ServerIdentity(tuple(asked), tuple(models) if answered else None, listed)


class OpenAIBackend(_OpenAIFamily):
    """The OpenAI API itself: ``POST /v1/chat/completions`` with ``OPENAI_API_KEY``."""

    name = "openai"

    def __init__(self, *, base_url: str | None = None, timeout: float = 600.0) -> None:
        """The key from ``OPENAI_API_KEY``; the root: ``--base-url``, else ``OPENAI_BASE_URL``."""
        key = os.environ.get("OPENAI_API_KEY")
        if not key:
            raise _configuration("the openai backend needs an API key: set OPENAI_API_KEY")
        self.sdk, http = _openai_sdk()
        self.response_type = http.Response
        self._finish(
            self.sdk.AsyncOpenAI(
                api_key=key,
                base_url=base_url or os.environ.get("OPENAI_BASE_URL"),
                max_retries=0,
                timeout=timeout,
            )
        )


class GeminiBackend(_OpenAIFamily):
    """Gemini through its OpenAI-compatible endpoint, with ``GEMINI_API_KEY`` (docs/backends.md)."""

    name = "gemini"

    def __init__(self, *, base_url: str | None = None, timeout: float = 600.0) -> None:
        """The key from ``GEMINI_API_KEY`` (else ``GOOGLE_API_KEY``).

        The API root from ``--base-url``, else ``GEMINI_BASE_URL``, else Google's.
        """
        key = os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")
        if not key:
            raise _configuration(
                "the gemini backend needs an API key: set GEMINI_API_KEY (or GOOGLE_API_KEY)"
            )
        self.sdk, http = _openai_sdk()
        self.response_type = http.Response
        root = base_url or os.environ.get("GEMINI_BASE_URL") or GEMINI_BASE_URL
        self._finish(
            self.sdk.AsyncOpenAI(api_key=key, base_url=root, max_retries=0, timeout=timeout)
        )

    def models_named(self, info: Mapping[str, Any]) -> list[str]:
        """Gemini names its models ``models/ID``: the id without that prefix."""
        model_id = info.get("id")
        if not isinstance(model_id, str):
            return []
        return [model_id.removeprefix("models/")]


class AzureOpenAIBackend(_OpenAIFamily):
    """Azure OpenAI: a deployment's chat completions, with ``api-key`` or an Entra token."""

    name = "azure-openai"

    def __init__(self, *, base_url: str | None = None, timeout: float = 600.0) -> None:
        """The resource endpoint from ``--base-url``, else ``AZURE_OPENAI_ENDPOINT``.

        The key from ``AZURE_OPENAI_API_KEY`` or an Entra ID token from ``AZURE_OPENAI_AD_TOKEN``
        (the SDK's own sources); ``api-version`` from ``OPENAI_API_VERSION``, else
        :data:`AZURE_API_VERSION`.
        """
        endpoint = base_url or os.environ.get("AZURE_OPENAI_ENDPOINT")
        if not endpoint:
            raise _configuration(
                "the azure-openai backend needs the resource endpoint: --base-url or "
                "AZURE_OPENAI_ENDPOINT (https://NAME.openai.azure.com)"
            )
        key = os.environ.get("AZURE_OPENAI_API_KEY")
        token = os.environ.get("AZURE_OPENAI_AD_TOKEN")
        if not key and not token:
            raise _configuration(
                "the azure-openai backend needs credentials: AZURE_OPENAI_API_KEY, or an Entra "
                "ID token in AZURE_OPENAI_AD_TOKEN"
            )
        self.api_version = os.environ.get("OPENAI_API_VERSION") or AZURE_API_VERSION
        self.sdk, http = _openai_sdk()
        self.response_type = http.Response
        auth: dict[str, str] = {"azure_ad_token": token} if token and not key else {}
        if key:
            auth = {"api_key": key}
        self._finish(
            self.sdk.AsyncAzureOpenAI(
                azure_endpoint=endpoint,
                api_version=self.api_version,
                max_retries=0,
                timeout=timeout,
                **auth,
            )
        )

    @property
    def url(self) -> str:
        """The API root and the api-version every request carries."""
        return f"{self.base_url}?api-version={self.api_version}"

    def path(self, wire: Mapping[str, Any]) -> str:
        """``/deployments/{deployment}/chat/completions``: the model id names the deployment."""
        deployment = urllib.parse.quote(str(wire["model"]), safe="")
        return f"/deployments/{deployment}/chat/completions"

    async def server_identity(self, model_ids: Sequence[str]) -> ServerIdentity:
        """Not asked: Azure OpenAI's data plane names no deployment's model (recorded so)."""
        return unanswered(
            model_ids,
            [],
            "Azure OpenAI's inference API has no route naming a deployment's "
            "model (its management API does, with other credentials); each answer's model "
            "(name and version) and system_fingerprint are recorded",
        )


class _ClaudeCloud(_RawSDKBackend):
    """Claude through a cloud's own endpoint: the Messages body without ``model``."""

    wire_format = FORMAT_ANTHROPIC
    priced = True
    version = ""

    def wire_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The Messages request without ``model``, with this cloud's ``anthropic_version``."""
        return _routed(body, self.version)

    @staticmethod
    def _model(wire: Mapping[str, Any]) -> str:
        model = getattr(wire, "model", None)
        if not isinstance(model, str):
            raise _configuration("internal: a wire body without its model (not from wire_body)")
        return model

    def reply(self, raw: bytes, status: int, headers: Mapping[str, str]) -> Reply:
        """A Messages API message, as the Anthropic API answers."""
        found = identity_headers(headers)
        request_id = found.get("x-amzn-requestid") or found.get("request-id")
        return reply_from_messages_json(raw, status, request_id, found)


class AnthropicBedrockBackend(_ClaudeCloud):
    """Claude on Amazon Bedrock (``InvokeModel``) through ``anthropic.AsyncAnthropicBedrock``."""

    name = "anthropic-bedrock"
    version = BEDROCK_VERSION

    def __init__(self, *, base_url: str | None = None, timeout: float = 600.0) -> None:
        """Region and credentials from the AWS environment and profiles (boto3's chain).

        The runtime endpoint from ``--base-url``, else ``ANTHROPIC_BEDROCK_BASE_URL``, else
        ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``, else ``bedrock-runtime.{region}.amazonaws.com``;
        the control plane (asked which model an id is) from ``AWS_ENDPOINT_URL_BEDROCK``, else
        ``bedrock.{region}.amazonaws.com``.
        """
        sdk, http = import_sdk()
        self.sdk = sdk
        self.response_type = http.Response
        token = os.environ.get("AWS_BEARER_TOKEN_BEDROCK")
        import boto3
        import botocore.exceptions

        try:
            session = boto3.Session()
            self.region = (
                os.environ.get("AWS_REGION")
                or os.environ.get("AWS_DEFAULT_REGION")
                or session.region_name
            )
            credentials = None if token else session.get_credentials()
        except botocore.exceptions.BotoCoreError as exc:
            raise _configuration(
                f"the anthropic-bedrock backend: AWS configuration: {exc}"
            ) from None
        if not self.region:
            raise _configuration(
                "the anthropic-bedrock backend needs an AWS region: AWS_REGION, or a region in "
                "the AWS profile"
            )
        if not token and credentials is None:
            raise _configuration(
                "the anthropic-bedrock backend found no AWS credentials (AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws/credentials, SSO), nor a Bedrock "
                "API key (AWS_BEARER_TOKEN_BEDROCK)"
            )
        self.session = session
        self.credentials = credentials
        root = (
            base_url
            or os.environ.get("ANTHROPIC_BEDROCK_BASE_URL")
            or os.environ.get("AWS_ENDPOINT_URL_BEDROCK_RUNTIME")
            or f"https://bedrock-runtime.{self.region}.amazonaws.com"
        )
        self.control_url = (
            os.environ.get("AWS_ENDPOINT_URL_BEDROCK")
            or f"https://bedrock.{self.region}.amazonaws.com"
        ).rstrip("/")
        self.client = sdk.AsyncAnthropicBedrock(
            aws_region=self.region,
            base_url=root,
            max_retries=0,
            timeout=timeout,
            **({"api_key": token} if token else {}),
        )
        self.base_url = str(self.client.base_url).rstrip("/")
        self.token = token

    def path(self, wire: Mapping[str, Any]) -> str:
        """``/model/{model id}/invoke``."""
        return f"/model/{urllib.parse.quote(self._model(wire), safe=':')}/invoke"

    def billed_as(self, model: str) -> str | None:
        """The Anthropic model a ``global.`` id bills as at the list price (else None).

        Regional and geographic ids (``us.``, ``eu.``, a bare ``anthropic.`` id) and
        provisioned throughput are priced by AWS on its own page: give ``--price-in`` and
        ``--price-out`` for them (``docs/backends.md``).
        """
        match = _BEDROCK_ID.fullmatch(model)
        return match.group("name") if match and match.group("geo") == "global" else None

    async def server_identity(self, model_ids: Sequence[str]) -> ServerIdentity:
        """``GET /foundation-models/{id}`` (``GET /inference-profiles/{id}`` for a profile id).

        On the Bedrock control plane, SigV4-signed for ``bedrock``: the model id or inference
        profile Bedrock resolves the locked id to (a 404: not served in this region).
        """
        asked: list[Asked] = []
        models: list[str] = []
        answered: dict[str, bool] = {}
        for model_id in model_ids:
            match = _BEDROCK_ID.fullmatch(model_id)
            route = "inference-profiles" if match and match.group("geo") else "foundation-models"
            url = f"{self.control_url}/{route}/{urllib.parse.quote(model_id, safe=':')}"
            try:
                status, headers, raw = await asyncio.to_thread(self._signed_get, url)
            except Exception as exc:
                asked.append(Asked(url, None, {}, f"{type(exc).__name__}: {exc}"))
                continue
            found = identity_headers(headers)
            if status >= 400:
                try:
                    parsed: object = json.loads(raw)
                except ValueError:
                    parsed = None
                asked.append(
                    Asked(
                        url, status, found, status_error(status, headers, parsed, url).message[:300]
                    )
                )
                answered[model_id] = status == 404
                continue
            asked.append(Asked(url, status, found))
            answered[model_id] = True
            named = _bedrock_resolved(raw)
            if named is not None:
                models.append(named)
        listed = {
            m: True if listed_in(m, models) else (False if answered.get(m) else None)
            for m in model_ids
        }
        return ServerIdentity(tuple(asked), tuple(models) if answered else None, listed)

    def _signed_get(self, url: str) -> tuple[int, dict[str, str], bytes]:
        import httpx

        headers = {"accept": "application/json"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        else:
            from botocore.auth import SigV4Auth
            from botocore.awsrequest import AWSRequest

            request = AWSRequest(method="GET", url=url, headers=headers)
            SigV4Auth(self.credentials, "bedrock", self.region).add_auth(request)
            headers = {k: v for k, v in request.headers.items() if v is not None}
        response = httpx.get(url, headers=headers, timeout=ASK_TIMEOUT_SECONDS)
        return response.status_code, dict(response.headers), response.content


class AnthropicVertexBackend(_ClaudeCloud):
    """Claude on Google Vertex AI (``rawPredict``) through ``anthropic.AsyncAnthropicVertex``."""

    name = "anthropic-vertex"
    version = VERTEX_VERSION

    def __init__(self, *, base_url: str | None = None, timeout: float = 600.0) -> None:
        """Google application-default credentials; the region from ``CLOUD_ML_REGION``.

        The project from ``ANTHROPIC_VERTEX_PROJECT_ID``, else ``GOOGLE_CLOUD_PROJECT``, else
        the credentials' own.

        The API root from ``--base-url``, else ``ANTHROPIC_VERTEX_BASE_URL``, else the region's.
        The credentials are loaded and a token fetched here, so a missing or refused credential
        stops the run before anything is recorded.
        """
        import google.auth
        import google.auth.exceptions
        import google.auth.transport.requests

        self.region = os.environ.get("CLOUD_ML_REGION") or ""
        if not self.region:
            raise _configuration(
                "the anthropic-vertex backend needs a region: CLOUD_ML_REGION (us-east5, "
                "europe-west1, global, ...)"
            )
        try:
            credentials, found_project = google.auth.default(scopes=[CLOUD_PLATFORM])
        except google.auth.exceptions.GoogleAuthError as exc:
            raise _configuration(
                f"the anthropic-vertex backend found no usable Google application-default "
                f"credentials ({exc}); run `gcloud auth application-default login` or set "
                "GOOGLE_APPLICATION_CREDENTIALS"
            ) from None
        self.project = (
            os.environ.get("ANTHROPIC_VERTEX_PROJECT_ID")
            or os.environ.get("GOOGLE_CLOUD_PROJECT")
            or found_project
            or ""
        )
        if not self.project:
            raise _configuration(
                "the anthropic-vertex backend needs a Google Cloud project: "
                "ANTHROPIC_VERTEX_PROJECT_ID or GOOGLE_CLOUD_PROJECT"
            )
        try:
            credentials.refresh(google.auth.transport.requests.Request())  # type: ignore[no-untyped-call]
        except google.auth.exceptions.GoogleAuthError as exc:
            raise _configuration(
                f"the anthropic-vertex backend: Google refused the credentials' token "
                f"request ({exc})"
            ) from None
        sdk, http = import_sdk()
        self.sdk = sdk
        self.response_type = http.Response
        self.client = sdk.AsyncAnthropicVertex(
            region=self.region,
            project_id=self.project,
            credentials=credentials,
            base_url=base_url or os.environ.get("ANTHROPIC_VERTEX_BASE_URL"),
            max_retries=0,
            timeout=timeout,
        )
        self.base_url = str(self.client.base_url).rstrip("/")

    def path(self, wire: Mapping[str, Any]) -> str:
        """``/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict``."""
        model = urllib.parse.quote(self._model(wire), safe="@")
        return (
            f"/projects/{urllib.parse.quote(self.project, safe='')}/locations/"
            f"{urllib.parse.quote(self.region, safe='')}/publishers/anthropic/models/"
            f"{model}:rawPredict"
        )

    def billed_as(self, model: str) -> str | None:
        """The Anthropic model a model on the ``global`` endpoint bills as (else None).

        Regional endpoints are priced by Google on its own page: give ``--price-in`` and
        ``--price-out`` for them (``docs/backends.md``).
        """
        return anthropic_name(model) if self.region == "global" else None

    async def server_identity(self, model_ids: Sequence[str]) -> ServerIdentity:
        """Not asked: Vertex AI's ``rawPredict`` API has no model route (recorded so)."""
        return unanswered(
            model_ids,
            [],
            "Vertex AI's prediction API has no route naming the model behind a "
            "publisher model id; each answer's model field is recorded",
        )
