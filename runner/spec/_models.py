"""``[model]`` or ``[models.<NAME>]``, and sampling parameters (``docs/prompts.md`` §5)."""

from __future__ import annotations

from typing import Any, Final

from runner.spec._collector import Collector
from runner.spec._fields import ID_RE, section_table, string
from runner.spec._state import Loading
from runner.spec._types import ModelSpec

LOGPROB_PROVIDERS: Final = ("openai", "openai-compatible", "azure-openai")
"""Providers whose servers return token log-probabilities (``logprobs``, ``top_logprobs``)."""
PROVIDERS_TEMPERATURE_MAX: Final = {
    "anthropic": 1.0,
    "anthropic-bedrock": 1.0,
    "anthropic-vertex": 1.0,
}
"""The highest temperature a provider takes; 2 for the OpenAI-style providers (and Gemini)."""
CHAT_PROVIDERS: Final = ("openai", "openai-compatible", "azure-openai", "gemini")
"""Providers sent chat completions (``docs/prompts.md`` §6): at most 4 ``stop`` strings."""
NO_TOP_K_PROVIDERS: Final = ("openai", "azure-openai", "gemini")
"""Providers whose chat-completions API has no ``top_k`` (``docs/backends.md``)."""


def parse_models(st: Loading) -> None:
    """``[model]`` (one model) or ``[models.<NAME>]`` (several), not both."""
    st.model = _model(st.c, st.data)
    st.models = _models(st.c, st.data)


def providers(st: Loading) -> list[str]:
    """The provider of each model, in declaration order."""
    if st.models is None:
        return [str(st.model.get("provider", ""))]
    return [m.provider for m in st.models.values()]


def sampling_params(
    c: Collector, table: dict[str, Any], where: str, provider: str, *, full: bool
) -> dict[str, Any]:
    """The sampling parameters of a model table or an arm's ``sampling`` (docs/prompts.md §5).

    ``full``: a model table, where ``max_tokens`` (2048) and ``temperature`` (1.0) default.
    """
    out: dict[str, Any] = {}
    if full:
        out["max_tokens"] = table.get("max_tokens", 2048)
        out["temperature"] = table.get("temperature", 1.0)
    for key in ("max_tokens", "temperature", "top_p", "top_k", "stop"):
        if key in table:
            out[key] = table[key]
    openai = provider in CHAT_PROVIDERS
    if "max_tokens" in out:
        tokens = out["max_tokens"]
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            c.add(f"{where}.max_tokens", f"must be a positive integer, got {tokens!r}")
    if "temperature" in out:
        top = PROVIDERS_TEMPERATURE_MAX.get(provider, 2.0)
        temp = out["temperature"]
        if isinstance(temp, bool) or not isinstance(temp, int | float) or not 0 <= temp <= top:
            c.add(
                f"{where}.temperature",
                f"must be a number between 0 and {top:g} for provider {provider!r}, got {temp!r}",
            )
    if "top_p" in out:
        top_p = out["top_p"]
        if isinstance(top_p, bool) or not isinstance(top_p, int | float) or not 0 <= top_p <= 1:
            c.add(f"{where}.top_p", f"must be a number between 0 and 1, got {top_p!r}")
    if "top_k" in out:
        top_k = out["top_k"]
        if provider in NO_TOP_K_PROVIDERS:
            c.add(f"{where}.top_k", f"provider {provider!r} takes no top_k (the chat API has none)")
        elif isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            c.add(f"{where}.top_k", f"must be a positive integer, got {top_k!r}")
    if full and "logprobs" in table:
        out["logprobs"] = table["logprobs"]
        value = out["logprobs"]
        if provider not in LOGPROB_PROVIDERS:
            c.add(
                f"{where}.logprobs",
                f"provider {provider!r} cannot return log-probabilities (only "
                f"{' and '.join(LOGPROB_PROVIDERS)} servers do)",
            )
        elif isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 20:
            c.add(f"{where}.logprobs", f"must be an integer from 1 to 20, got {value!r}")
    if "stop" in out:
        stop = out["stop"]
        most = 4 if openai else 8
        if (
            not isinstance(stop, list)
            or not 1 <= len(stop) <= most
            or not all(isinstance(x, str) and x for x in stop)
        ):
            c.add(
                f"{where}.stop",
                f"must be a list of 1 to {most} non-empty strings for provider {provider!r}, "
                f"got {stop!r}",
            )
    return out


def _model_table(c: Collector, table: dict[str, Any], where: str) -> dict[str, Any]:
    provider = string(c, table, "provider", where, "anthropic")
    model_id = string(c, table, "id", where, "claude-sonnet-4-6")
    params = sampling_params(c, table, where, provider or "anthropic", full=True)
    return {"provider": provider, "id": model_id, **params}


def _model(c: Collector, data: dict[str, Any]) -> dict[str, Any]:
    if "models" in data and "model" not in data:
        return {}
    return _model_table(c, section_table(c, data, "model"), "model")


def _models(c: Collector, data: dict[str, Any]) -> dict[str, ModelSpec] | None:
    raw = data.get("models")
    if raw is None:
        return None
    if "model" in data:
        c.add("models", "a study has one [model] table or several [models.<NAME>] tables, not both")
    if not isinstance(raw, dict) or not raw or not all(isinstance(v, dict) for v in raw.values()):
        c.add("models", "declare each model as a [models.<NAME>] table")
        return None
    out: dict[str, ModelSpec] = {}
    for name, table in raw.items():
        where = f"models.{name}"
        if not ID_RE.match(name):
            c.add(where, "model names are letters, digits, '.', '_' or '-'")
        record = _model_table(c, table, where)
        params = {k: v for k, v in record.items() if k not in ("provider", "id")}
        out[name] = ModelSpec(name, record["provider"], record["id"], params)
    return out
