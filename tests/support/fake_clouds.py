"""Fake cloud model endpoints on 127.0.0.1, each speaking its vendor's wire protocol (issue 39).

One :class:`FakeClouds` server answers all five cloud backends, routed by path, and checks
authentication the way each service does:

- Bedrock runtime ``POST /model/{id}/invoke`` and control plane ``GET /foundation-models/{id}``
  and ``GET /inference-profiles/{id}``: AWS SigV4, re-computed with botocore's own signer from
  the request as received (method, path, query, the signed headers, the body) and the secret
  key of :data:`AWS_KEY` (403 ``UnrecognizedClientException`` for another key id, 403
  ``InvalidSignatureException`` for a signature that does not match). The body must carry
  ``anthropic_version`` ``bedrock-2023-05-31`` and no ``model`` (400 ``ValidationException``:
  ``extraneous key [model] is not permitted``). Throttling: 429 ``ThrottlingException`` (the
  ``x-amzn-ErrorType`` header, no retry-after, as Bedrock answers).
- Google OAuth ``POST /token``: the JWT-bearer grant of the ``service_account`` credentials
  file :meth:`FakeClouds.google_credentials` writes (its ``token_uri`` is this server; the
  assertion's RS256 signature is verified with the account's public key, its ``iss``, ``aud``
  (Google's token audience, as the service checks) and ``scope`` checked: 400
  ``invalid_grant`` otherwise) and Vertex AI ``POST /v1/projects/{p}/locations/{r}/publishers/
  anthropic/models/{m}:rawPredict`` with ``Authorization: Bearer`` a
  token the endpoint issued (401 ``UNAUTHENTICATED``), ``anthropic_version``
  ``vertex-2023-10-16``; 429 ``RESOURCE_EXHAUSTED`` with a ``RetryInfo`` detail.
- Azure OpenAI ``POST /openai/deployments/{d}/chat/completions?api-version=V``: ``api-key``
  (401), a known ``api-version`` (404 ``Resource not found`` otherwise, as Azure answers), a
  known deployment (404 ``DeploymentNotFound``); 429 with ``retry-after`` and
  ``retry-after-ms``. Answers name the deployment's model and version, with
  ``system_fingerprint`` and the ``apim-request-id`` / ``x-ms-region`` headers.
- OpenAI ``POST /v1/chat/completions`` and ``GET /v1/models/{id}``: ``Authorization: Bearer``
  (401 ``invalid_api_key``); an alias answered by its dated snapshot; 429 with
  ``x-ratelimit-reset-requests``.
- Gemini ``POST /v1beta/openai/chat/completions`` and ``GET /v1beta/openai/models/{id}``:
  ``Authorization: Bearer`` the key (400 ``API key not valid``, as Gemini answers); 429 as a
  list holding one Google error with a ``RetryInfo`` detail.

The text of every answer comes from the simulated model (:mod:`runner.simulated`), given the
request in its Messages form, so the studies run to the end. ``received`` keeps the raw bytes of
every model request body (route, bytes); ``inject(route, kind)`` queues a fault.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import urllib.parse
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from runner._provenance import anthropic_name
from runner.simulated._vision import SimulatedModel

AWS_KEY = ("AKIAFAKEKEY000000001", "fake-aws-secret-canary-7f3a9c")
REGION = "us-east-1"
PROJECT = "fake-project"
GOOGLE_ACCOUNT = f"ledger-runner@{PROJECT}.iam.gserviceaccount.com"
#: The service account's private key (made once per process; its PEM is a credential too).
GOOGLE_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
GOOGLE_PEM = GOOGLE_KEY.private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
).decode()
AZURE_KEY = "fake-azure-key-canary-3e9b"
AZURE_VERSIONS = ("2024-10-21", "2024-06-01")
#: Azure deployments: name -> the model (and version) it runs.
AZURE_DEPLOYMENTS = {"gpt-4o": "gpt-4o-2024-08-06", "clinic-gpt": "gpt-4o-2024-08-06"}
OPENAI_KEY = "sk-fake-openai-canary-9d41"
#: OpenAI models: id -> the snapshot it answers with.
OPENAI_MODELS = {"gpt-4o": "gpt-4o-2024-08-06", "gpt-4o-mini": "gpt-4o-mini-2024-07-18"}
GEMINI_KEY = "fake-gemini-key-canary-aa17"
GEMINI_MODELS = ("gemini-2.5-flash", "gemini-2.5-pro")
#: Bedrock model ids served (and inference profiles).
BEDROCK_MODELS = (
    "anthropic.claude-sonnet-4-5-20250929-v1:0",
    "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
    "anthropic.claude-haiku-4-5-20251001-v1:0",
    "global.anthropic.claude-haiku-4-5-20251001-v1:0",
    "anthropic.claude-opus-4-1-20250805-v1:0",
    "global.anthropic.claude-opus-4-1-20250805-v1:0",
)
VERTEX_MODELS = (
    "claude-sonnet-4-5@20250929",
    "claude-haiku-4-5@20251001",
    "claude-opus-4-1@20250805",
)
#: Every credential the fake knows: none may appear in a ledger, an archive or a log.
SECRETS = (AWS_KEY[1], GOOGLE_PEM.splitlines()[5], AZURE_KEY, OPENAI_KEY, GEMINI_KEY)


def to_messages(chat: dict[str, Any]) -> dict[str, Any]:
    """A chat-completions body in its Messages form (for the simulated model's answer)."""
    out: dict[str, Any] = {"model": chat["model"], "max_tokens": chat.get("max_tokens", 1024)}
    messages = []
    for m in chat["messages"]:
        if m["role"] == "system":
            out["system"] = m["content"]
            continue
        content = m["content"]
        if isinstance(content, str):
            blocks = [{"type": "text", "text": content}]
        else:
            blocks = []
            for part in content:
                if part["type"] == "text":
                    blocks.append({"type": "text", "text": part["text"]})
                else:
                    head, data = part["image_url"]["url"].split(",", 1)
                    media = head.removeprefix("data:").removesuffix(";base64")
                    blocks.append(
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": media, "data": data},
                        }
                    )
        messages.append({"role": m["role"], "content": blocks})
    out["messages"] = messages
    return out


class FakeClouds:
    """The five fake endpoints on one port (see the module docstring)."""

    def __init__(self) -> None:
        self.received: list[tuple[str, bytes]] = []
        self.faults: dict[str, deque[str]] = {}
        self.tokens: set[str] = set()
        self.lock = threading.Lock()
        self.model = SimulatedModel()
        self.count = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake.handle(self, b"")

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                fake.handle(self, self.rfile.read(length))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FakeClouds:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def inject(self, route: str, kind: str, count: int = 1) -> None:
        """Make the next ``count`` model requests of ``route`` fail with ``kind`` (``"429"``)."""
        with self.lock:
            self.faults.setdefault(route, deque()).extend([kind] * count)

    def google_credentials(self, folder: Path) -> Path:
        """Write a ``service_account`` credentials file whose ``token_uri`` is this server."""
        path = folder / "adc.json"
        path.write_text(
            json.dumps(
                {
                    "type": "service_account",
                    "project_id": PROJECT,
                    "private_key_id": "fake-key-1",
                    "private_key": GOOGLE_PEM,
                    "client_email": GOOGLE_ACCOUNT,
                    "client_id": "1001",
                    "token_uri": f"{self.url}/token",
                }
            ),
            encoding="utf-8",
        )
        return path

    def environment(self, folder: Path) -> dict[str, str]:
        """The environment each backend reads its endpoint and credentials from, all here."""
        folder.mkdir(parents=True, exist_ok=True)
        return {
            "AWS_ACCESS_KEY_ID": AWS_KEY[0],
            "AWS_SECRET_ACCESS_KEY": AWS_KEY[1],
            "AWS_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": str(folder / "aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(folder / "aws-credentials"),
            "ANTHROPIC_BEDROCK_BASE_URL": self.url,
            "AWS_ENDPOINT_URL_BEDROCK": self.url,
            "GOOGLE_APPLICATION_CREDENTIALS": str(self.google_credentials(folder)),
            "CLOUD_ML_REGION": "global",
            "ANTHROPIC_VERTEX_PROJECT_ID": PROJECT,
            "ANTHROPIC_VERTEX_BASE_URL": f"{self.url}/v1",
            "GCE_METADATA_HOST": "127.0.0.1:9",
            "GCE_METADATA_IP": "127.0.0.1:9",
            "AZURE_OPENAI_ENDPOINT": self.url,
            "AZURE_OPENAI_API_KEY": AZURE_KEY,
            "OPENAI_API_VERSION": AZURE_VERSIONS[0],
            "OPENAI_API_KEY": OPENAI_KEY,
            "OPENAI_BASE_URL": f"{self.url}/v1",
            "GEMINI_API_KEY": GEMINI_KEY,
            "GEMINI_BASE_URL": f"{self.url}/v1beta/openai/",
        }

    # ------------------------------------------------------------------ routing

    def handle(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        """Route one request; every answer is JSON."""
        parsed = urllib.parse.urlsplit(h.path)
        path, query = parsed.path, urllib.parse.parse_qs(parsed.query)
        try:
            if path == "/token":
                self.token(h, body)
            elif path.startswith("/model/") and path.endswith("/invoke"):
                self.bedrock(h, body, urllib.parse.unquote(path[len("/model/") : -len("/invoke")]))
            elif path.startswith(("/foundation-models/", "/inference-profiles/")):
                self.bedrock_control(h, path)
            elif path.startswith("/v1/projects/") and path.endswith(":rawPredict"):
                self.vertex(h, body, path)
            elif path.startswith("/openai/deployments/") and path.endswith("/chat/completions"):
                deployment = urllib.parse.unquote(path.split("/")[3])
                self.azure(h, body, deployment, query.get("api-version", [""])[0])
            elif path == "/v1/chat/completions":
                self.chat(h, body, "openai")
            elif path.startswith("/v1/models/"):
                self.openai_model(h, urllib.parse.unquote(path[len("/v1/models/") :]))
            elif path == "/v1beta/openai/chat/completions":
                self.chat(h, body, "gemini")
            elif path.startswith("/v1beta/openai/models/"):
                self.gemini_model(h, urllib.parse.unquote(path.split("/models/", 1)[1]))
            else:
                send(h, 404, {"error": {"message": f"no route {path}"}})
        except Exception as exc:
            send(h, 500, {"error": {"message": f"fake server error: {exc!r}"}})

    def _fault(self, route: str) -> str | None:
        with self.lock:
            queue = self.faults.get(route)
            return queue.popleft() if queue else None

    def _record(self, route: str, body: bytes) -> None:
        with self.lock:
            self.received.append((route, body))
            self.count += 1

    def answer(self, messages_body: dict[str, Any]) -> dict[str, Any]:
        """The simulated model's Messages answer to a request in its Messages form."""
        seed = hashlib.sha256(json.dumps(messages_body, sort_keys=True).encode()).hexdigest()
        return self.model.respond(messages_body, seed)

    # ------------------------------------------------------------------ Google OAuth

    def token(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        form = urllib.parse.parse_qs(body.decode())
        ok = form.get("grant_type") == ["urn:ietf:params:oauth:grant-type:jwt-bearer"]
        try:
            head, claims, signature = form["assertion"][0].split(".")
            GOOGLE_KEY.public_key().verify(
                unb64(signature),
                f"{head}.{claims}".encode(),
                padding.PKCS1v15(),
                hashes.SHA256(),
            )
            info = json.loads(unb64(claims))
        except Exception:
            ok = False
        else:
            ok = (
                ok
                and info.get("iss") == GOOGLE_ACCOUNT
                and info.get("aud") == ("https://oauth2.googleapis.com/token")
                and "cloud-platform" in str(info.get("scope"))
            )
        if not ok:
            send(h, 400, {"error": "invalid_grant", "error_description": "Bad Request"})
            return
        token = "ya29.fake-" + secrets.token_hex(8)
        with self.lock:
            self.tokens.add(token)
        send(
            h,
            200,
            {
                "access_token": token,
                "expires_in": 3599,
                "token_type": "Bearer",
                "scope": "https://www.googleapis.com/auth/cloud-platform",
            },
        )

    # ------------------------------------------------------------------ AWS

    def sigv4(self, h: BaseHTTPRequestHandler, body: bytes, service: str) -> str | None:
        """Why the request's SigV4 signature is refused, or None (botocore re-signs it)."""
        auth = h.headers.get("authorization", "")
        fields = dict(
            part.strip().split("=", 1)
            for part in auth.removeprefix("AWS4-HMAC-SHA256 ").split(",")
            if "=" in part
        )
        scope = fields.get("Credential", "").split("/")
        if not auth.startswith("AWS4-HMAC-SHA256 ") or len(scope) != 5:
            return "MissingAuthenticationTokenException"
        if scope[0] != AWS_KEY[0]:
            return "UnrecognizedClientException"
        if scope[2:] != [REGION, service, "aws4_request"]:
            return "InvalidSignatureException"
        signed = fields.get("SignedHeaders", "").split(";")
        headers = {k: v for k, v in h.headers.items() if k.lower() in signed}
        request = AWSRequest(
            method=h.command, url=f"{self.url}{h.path}", headers=headers, data=body
        )
        request.context["timestamp"] = h.headers.get("x-amz-date", "")
        signer = SigV4Auth(Credentials(*AWS_KEY), service, REGION)
        canonical = signer.canonical_request(request)
        expected = signer.signature(signer.string_to_sign(request, canonical), request)
        return (
            None
            if secrets.compare_digest(expected, fields.get("Signature", ""))
            else ("InvalidSignatureException")
        )

    def bedrock(self, h: BaseHTTPRequestHandler, body: bytes, model: str) -> None:
        refused = self.sigv4(h, body, "bedrock")
        if refused:
            aws_error(
                h,
                403,
                refused,
                "The request signature we calculated does not match the signature you provided."
                if refused == "InvalidSignatureException"
                else "The security token included in the request is invalid.",
            )
            return
        self._record("bedrock", body)
        data = json.loads(body)
        if "model" in data:
            aws_error(h, 400, "ValidationException", "extraneous key [model] is not permitted")
            return
        if data.get("anthropic_version") != "bedrock-2023-05-31":
            aws_error(h, 400, "ValidationException", "invalid anthropic_version")
            return
        if model not in BEDROCK_MODELS:
            aws_error(h, 400, "ValidationException", "The provided model identifier is invalid.")
            return
        if self._fault("bedrock") == "429":
            aws_error(
                h, 429, "ThrottlingException", "Too many requests, please wait before trying again."
            )
            return
        message = self.answer({**data, "model": model})
        message["model"] = anthropic_name(model)
        message["id"] = "msg_bdrk_" + secrets.token_hex(8)
        send(
            h,
            200,
            message,
            {
                "x-amzn-RequestId": secrets.token_hex(16),
                "X-Amzn-Bedrock-Input-Token-Count": str(message["usage"]["input_tokens"]),
            },
        )

    def bedrock_control(self, h: BaseHTTPRequestHandler, path: str) -> None:
        refused = self.sigv4(h, b"", "bedrock")
        if refused:
            aws_error(h, 403, refused, "The security token included in the request is invalid.")
            return
        route, _, model = path.strip("/").partition("/")
        model = urllib.parse.unquote(model)
        if model not in BEDROCK_MODELS:
            aws_error(h, 404, "ResourceNotFoundException", "The model is not found.")
            return
        arn = f"arn:aws:bedrock:{REGION}::foundation-model/{model}"
        if route == "inference-profiles":
            send(
                h,
                200,
                {
                    "inferenceProfileId": model,
                    "inferenceProfileArn": arn,
                    "status": "ACTIVE",
                    "type": "SYSTEM_DEFINED",
                    "models": [{"modelArn": arn}],
                },
            )
        else:
            send(
                h,
                200,
                {
                    "modelDetails": {
                        "modelId": model,
                        "modelArn": arn,
                        "providerName": "Anthropic",
                        "modelLifecycle": {"status": "ACTIVE"},
                    }
                },
            )

    # ------------------------------------------------------------------ Vertex AI

    def vertex(self, h: BaseHTTPRequestHandler, body: bytes, path: str) -> None:
        bearer = h.headers.get("authorization", "").removeprefix("Bearer ")
        with self.lock:
            known = bearer in self.tokens
        if not known:
            google_error(
                h,
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token.",
            )
            return
        self._record("vertex", body)
        parts = path.split("/")
        project, region = parts[3], parts[5]
        model = urllib.parse.unquote(parts[-1].removesuffix(":rawPredict"))
        data = json.loads(body)
        if project != PROJECT:
            google_error(h, 403, "PERMISSION_DENIED", f"Permission denied on project {project}")
            return
        if model not in VERTEX_MODELS:
            google_error(
                h,
                404,
                "NOT_FOUND",
                f"Publisher Model `projects/{project}/locations/"
                f"{region}/publishers/anthropic/models/{model}` not found.",
            )
            return
        if data.get("anthropic_version") != "vertex-2023-10-16" or "model" in data:
            google_error(
                h,
                400,
                "INVALID_ARGUMENT",
                "anthropic_version: vertex-2023-10-16 required, model not allowed in the body",
            )
            return
        if self._fault("vertex") == "429":
            google_error(
                h,
                429,
                "RESOURCE_EXHAUSTED",
                "Quota exceeded for aiplatform."
                "googleapis.com/online_prediction_requests_per_base_model.",
                retry="1s",
            )
            return
        message = self.answer({**data, "model": model})
        message["model"] = anthropic_name(model)
        message["id"] = "msg_vrtx_" + secrets.token_hex(8)
        send(h, 200, message)

    # ------------------------------------------------------------------ chat completions

    def azure(self, h: BaseHTTPRequestHandler, body: bytes, deployment: str, version: str) -> None:
        key = h.headers.get("api-key")
        if key != AZURE_KEY:
            send(
                h,
                401,
                {
                    "error": {
                        "code": "401",
                        "message": "Access denied due to invalid "
                        "subscription key or wrong API endpoint. Make sure to provide a "
                        "valid key for an active subscription and use a correct regional "
                        "API endpoint for your resource.",
                    }
                },
            )
            return
        if version not in AZURE_VERSIONS:
            send(h, 404, {"error": {"code": "404", "message": "Resource not found"}})
            return
        if deployment not in AZURE_DEPLOYMENTS:
            send(
                h,
                404,
                {
                    "error": {
                        "code": "DeploymentNotFound",
                        "message": "The API "
                        "deployment for this resource does not exist. If you created the "
                        "deployment within the last 5 minutes, please wait a moment and try "
                        "again.",
                    }
                },
            )
            return
        self._record("azure-openai", body)
        if self._fault("azure-openai") == "429":
            send(
                h,
                429,
                {
                    "error": {
                        "code": "429",
                        "message": "Requests to the ChatCompletions_"
                        "Create Operation under Azure OpenAI API version "
                        f"{version} have exceeded call rate limit of your current pricing "
                        "tier. Please retry after 1 second.",
                    }
                },
                {"retry-after": "1", "retry-after-ms": "800"},
            )
            return
        completion = self.completion(json.loads(body), AZURE_DEPLOYMENTS[deployment])
        completion["prompt_filter_results"] = [{"prompt_index": 0, "content_filter_results": {}}]
        send(
            h, 200, completion, {"apim-request-id": secrets.token_hex(16), "x-ms-region": "East US"}
        )

    def chat(self, h: BaseHTTPRequestHandler, body: bytes, vendor: str) -> None:
        bearer = h.headers.get("authorization", "").removeprefix("Bearer ")
        if vendor == "openai" and bearer != OPENAI_KEY:
            send(
                h,
                401,
                {
                    "error": {
                        "message": "Incorrect API key provided.",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": "invalid_api_key",
                    }
                },
            )
            return
        if vendor == "gemini" and bearer != GEMINI_KEY:
            send(
                h,
                400,
                [
                    {
                        "error": {
                            "code": 400,
                            "message": "API key not valid. Please pass a valid API key.",
                            "status": "INVALID_ARGUMENT",
                        }
                    }
                ],
            )
            return
        self._record(vendor, body)
        data = json.loads(body)
        model = data.get("model")
        known = OPENAI_MODELS if vendor == "openai" else {m: m for m in GEMINI_MODELS}
        if model not in known:
            if vendor == "openai":
                send(
                    h,
                    404,
                    {
                        "error": {
                            "message": f"The model `{model}` does not exist or you "
                            "do not have access to it.",
                            "type": "invalid_request_error",
                            "param": None,
                            "code": "model_not_found",
                        }
                    },
                )
            else:
                send(
                    h,
                    404,
                    [
                        {
                            "error": {
                                "code": 404,
                                "message": f"models/{model} is not found for API version v1main",
                                "status": "NOT_FOUND",
                            }
                        }
                    ],
                )
            return
        if self._fault(vendor) == "429":
            if vendor == "openai":
                send(
                    h,
                    429,
                    {
                        "error": {
                            "message": "Rate limit reached for requests",
                            "type": "requests",
                            "param": None,
                            "code": "rate_limit_exceeded",
                        }
                    },
                    {"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "120ms"},
                )
            else:
                send(
                    h,
                    429,
                    [
                        {
                            "error": {
                                "code": 429,
                                "message": "Resource has been exhausted (e.g. check quota).",
                                "status": "RESOURCE_EXHAUSTED",
                                "details": [
                                    {
                                        "@type": "type.googleapis.com/google.rpc.RetryInfo",
                                        "retryDelay": "1s",
                                    }
                                ],
                            }
                        }
                    ],
                )
            return
        completion = self.completion(data, known[model])
        if vendor == "gemini":
            completion.pop("system_fingerprint")
        send(h, 200, completion, {"x-request-id": secrets.token_hex(8)})

    def completion(self, chat: dict[str, Any], reported: str) -> dict[str, Any]:
        message = self.answer(to_messages(chat))
        text = "".join(b.get("text", "") for b in message["content"])
        usage = message["usage"]
        return {
            "id": "chatcmpl-" + secrets.token_hex(8),
            "object": "chat.completion",
            "created": 1767225600,
            "model": reported,
            "system_fingerprint": "fp_fake01",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": usage["input_tokens"],
                "completion_tokens": usage["output_tokens"],
                "total_tokens": usage["input_tokens"] + usage["output_tokens"],
            },
        }

    def openai_model(self, h: BaseHTTPRequestHandler, model: str) -> None:
        if h.headers.get("authorization", "").removeprefix("Bearer ") != OPENAI_KEY:
            send(
                h,
                401,
                {
                    "error": {
                        "message": "Incorrect API key provided.",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                },
            )
            return
        if model not in OPENAI_MODELS:
            send(
                h,
                404,
                {
                    "error": {
                        "message": f"The model '{model}' does not exist",
                        "type": "invalid_request_error",
                        "code": "model_not_found",
                    }
                },
            )
            return
        send(h, 200, {"id": model, "object": "model", "created": 1715367049, "owned_by": "system"})

    def gemini_model(self, h: BaseHTTPRequestHandler, model: str) -> None:
        if h.headers.get("authorization", "").removeprefix("Bearer ") != GEMINI_KEY:
            send(
                h,
                400,
                [
                    {
                        "error": {
                            "code": 400,
                            "message": "API key not valid.",
                            "status": "INVALID_ARGUMENT",
                        }
                    }
                ],
            )
            return
        if model not in GEMINI_MODELS:
            send(
                h,
                404,
                [
                    {
                        "error": {
                            "code": 404,
                            "message": f"models/{model} is not found",
                            "status": "NOT_FOUND",
                        }
                    }
                ],
            )
            return
        send(h, 200, {"id": f"models/{model}", "object": "model", "owned_by": "google"})


def unb64(text: str) -> bytes:
    """base64url without padding, as JWTs write it."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def send(
    h: BaseHTTPRequestHandler, status: int, data: object, headers: dict[str, str] | None = None
) -> None:
    raw = json.dumps(data).encode()
    h.send_response(status)
    h.send_header("content-type", "application/json")
    h.send_header("content-length", str(len(raw)))
    for name, value in (headers or {}).items():
        h.send_header(name, value)
    h.end_headers()
    h.wfile.write(raw)


def aws_error(h: BaseHTTPRequestHandler, status: int, kind: str, message: str) -> None:
    send(
        h,
        status,
        {"message": message},
        {
            "x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/",
            "x-amzn-RequestId": secrets.token_hex(16),
        },
    )


def google_error(
    h: BaseHTTPRequestHandler, status: int, kind: str, message: str, retry: str | None = None
) -> None:
    error: dict[str, Any] = {"code": status, "message": message, "status": kind}
    if retry:
        error["details"] = [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry}
        ]
    send(h, status, {"error": error})
