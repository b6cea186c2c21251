"""``[model]`` or ``[models.<NAME>]``, and sampling parameters (``docs/prompts.md`` §5)."""

from __future__ import annotations

from collections.abc import Callable
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


def _count(value: Any, low: int, high: int | None = None) -> bool:
    """Whether ``value`` is an integer (not a bool) from ``low`` (to ``high``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return low <= value and (high is None or value <= high)


def _number(value: Any, high: float) -> bool:
    """Whether ``value`` is a number (not a bool) from 0 to ``high``."""
    return not isinstance(value, bool) and isinstance(value, int | float) and 0 <= value <= high


def _max_tokens(value: Any, provider: str) -> str | None:
    return None if _count(value, 1) else f"must be a positive integer, got {value!r}"


def _temperature(value: Any, provider: str) -> str | None:
    top = PROVIDERS_TEMPERATURE_MAX.get(provider, 2.0)
    if _number(value, top):
        return None
    return f"must be a number between 0 and {top:g} for provider {provider!r}, got {value!r}"


def _top_p(value: Any, provider: str) -> str | None:
    return None if _number(value, 1) else f"must be a number between 0 and 1, got {value!r}"


def _top_k(value: Any, provider: str) -> str | None:
    if provider in NO_TOP_K_PROVIDERS:
        return f"provider {provider!r} takes no top_k (the chat API has none)"
    return None if _count(value, 1) else f"must be a positive integer, got {value!r}"


def _logprobs(value: Any, provider: str) -> str | None:
    if provider not in LOGPROB_PROVIDERS:
        return (
            f"provider {provider!r} cannot return log-probabilities (only "
            f"{' and '.join(LOGPROB_PROVIDERS)} servers do)"
        )
    return None if _count(value, 1, 20) else f"must be an integer from 1 to 20, got {value!r}"


def _stop(value: Any, provider: str) -> str | None:
    most = 4 if provider in CHAT_PROVIDERS else 8
    if (
        isinstance(value, list)
        and 1 <= len(value) <= most
        and all(isinstance(x, str) and x for x in value)
    ):
        return None
    return (
        f"must be a list of 1 to {most} non-empty strings for provider {provider!r}, got {value!r}"
    )


SAMPLING_KEYS: Final = ("max_tokens", "temperature", "top_p", "top_k", "stop")
"""The sampling parameters a model table or an arm's ``sampling`` may set."""
CHECKS: Final[tuple[tuple[str, Callable[[Any, str], str | None]], ...]] = (
    ("max_tokens", _max_tokens),
    ("temperature", _temperature),
    ("top_p", _top_p),
    ("top_k", _top_k),
    ("logprobs", _logprobs),
    ("stop", _stop),
)
"""Each parameter's check for a provider: the problem, or None (in the order reported)."""


def sampling_params(
    c: Collector, table: dict[str, Any], where: str, provider: str, *, full: bool
) -> dict[str, Any]:
    """The sampling parameters of a model table or an arm's ``sampling`` (docs/prompts.md §5).

    ``full``: a model table, where ``max_tokens`` (2048) and ``temperature`` (1.0) default,
    and which may ask for ``logprobs``.
    """
    out: dict[str, Any] = {}
    if full:
        out["max_tokens"] = table.get("max_tokens", 2048)
        out["temperature"] = table.get("temperature", 1.0)
    out.update((key, table[key]) for key in SAMPLING_KEYS if key in table)
    if full and "logprobs" in table:
        out["logprobs"] = table["logprobs"]
    for key, check in CHECKS:
        problem = check(out[key], provider) if key in out else None
        if problem is not None:
            c.add(f"{where}.{key}", problem)
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
