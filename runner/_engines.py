"""Which backend answers a run: the one place that knows every backend by name.

Kept apart from :mod:`runner._backends` (the backends themselves) so that the batch backend,
which builds on both the backends and the executor, is imported without an import circle.
"""

from __future__ import annotations

import os

from runner._backends import (
    BACKENDS,
    AnthropicBackend,
    Backend,
    BackendError,
    OpenAICompatibleBackend,
    ReplayBackend,
    SimulatedBackend,
)
from runner._batch import AnthropicBatchBackend
from runner._cloud import (
    AnthropicBedrockBackend,
    AnthropicVertexBackend,
    AzureOpenAIBackend,
    GeminiBackend,
    OpenAIBackend,
)

#: The cloud backends (runner/_cloud.py), each constructed with ``base_url`` alone.
CLOUD = {
    "anthropic-bedrock": AnthropicBedrockBackend,
    "anthropic-vertex": AnthropicVertexBackend,
    "azure-openai": AzureOpenAIBackend,
    "openai": OpenAIBackend,
    "gemini": GeminiBackend,
}

__all__ = ["make_backend"]


def make_backend(
    name: str, *, base_url: str | None = None, replay_from: str | None = None
) -> Backend:
    """Construct the backend called ``name`` (``anthropic-batch``: see :mod:`runner._batch`)."""
    if name == "anthropic":
        return AnthropicBackend(base_url=base_url)
    if name == "anthropic-batch":
        return AnthropicBatchBackend(base_url=base_url)
    if name in CLOUD:
        backend: Backend = CLOUD[name](base_url=base_url)
        return backend
    if name == "openai-compatible":
        if not base_url:
            raise BackendError(
                "configuration",
                "the openai-compatible backend needs --base-url, e.g. http://127.0.0.1:8000/v1",
                retryable=False,
            )
        return OpenAICompatibleBackend(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY"))
    if name == "simulated":
        return SimulatedBackend()
    if name == "replay":
        if not replay_from:
            raise BackendError(
                "configuration", "the replay backend needs --replay-from LEDGER", retryable=False
            )
        return ReplayBackend(replay_from)
    raise BackendError(
        "configuration",
        f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}",
        retryable=False,
    )
