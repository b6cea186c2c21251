"""Model prices and the cost of a response from its real ``usage``.

Prices are USD per million tokens (MTok), copied from Anthropic's pricing page
(https://platform.claude.com/docs/en/about-claude/pricing, "Model pricing" and "Batch
processing"), as read on :data:`PRICES_AS_OF`. The Message Batches API costs half of every
price. Prices change: check the page before you budget a real study. Claude on Amazon Bedrock
and Google Vertex AI is priced from the same table for the ids its backend bills at the list
price (:func:`backend_price`; ``docs/backends.md``). A model that is not listed, and every other
backend, has no price: its cost is recorded as null, and ``--budget-usd`` refuses to run with it
unless the run is given its prices (``--price-in`` / ``--price-out``, :func:`given_price`), which
are then recorded in ``run.started``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PRICES_AS_OF = "2026-11-22"
BATCH_DISCOUNT = 0.5


@dataclass(frozen=True)
class Price:
    """USD per million tokens for one model."""

    input: float
    output: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float


def _p(inp: float, out: float) -> Price:
    # Cache multipliers on the pricing page: 5-minute write 1.25x, 1-hour write 2x, hit 0.1x.
    return Price(inp, out, inp * 1.25, inp * 2.0, inp * 0.1)


#: Model id prefixes and their prices; the longest matching prefix wins, so dated model ids
#: (``claude-sonnet-4-5-20250929``) and aliases (``claude-sonnet-4-5``) price alike.
PRICES: dict[str, Price] = {
    "claude-opus-4-6": _p(5.0, 25.0),
    "claude-opus-4-5": _p(5.0, 25.0),
    "claude-opus-4-1": _p(15.0, 75.0),
    "claude-opus-4-0": _p(15.0, 75.0),
    "claude-opus-4-2025": _p(15.0, 75.0),
    "claude-sonnet-4-6": _p(3.0, 15.0),
    "claude-sonnet-4-5": _p(3.0, 15.0),
    "claude-sonnet-4-0": _p(3.0, 15.0),
    "claude-sonnet-4-2025": _p(3.0, 15.0),
    "claude-3-7-sonnet": _p(3.0, 15.0),
    "claude-haiku-4-5": _p(1.0, 5.0),
    "claude-3-5-haiku": _p(0.8, 4.0),
    "claude-3-haiku": Price(0.25, 1.25, 0.30, 0.50, 0.03),
}


def given_price(input_per_mtok: float, output_per_mtok: float) -> Price:
    """The price of a run given by hand (USD per million input and output tokens).

    Cache writes and reads, which only the Messages API reports, are priced with the pricing
    page's multipliers of the input price (5-minute write 1.25x, 1-hour write 2x, hit 0.1x).
    """
    return _p(float(input_per_mtok), float(output_per_mtok))


def price_record(price: Price, source: str) -> dict[str, Any]:
    """What ``run.started`` records of the price a session is costed with (``docs/trials.md``)."""
    return {
        "source": source,
        "input": price.input,
        "output": price.output,
        "cache_write_5m": price.cache_write_5m,
        "cache_write_1h": price.cache_write_1h,
        "cache_read": price.cache_read,
        "batch_discount": BATCH_DISCOUNT,
    }


def price_for(model: str) -> Price | None:
    """The price of ``model`` (longest listed prefix), or None when it is not listed."""
    best = max((p for p in PRICES if model.startswith(p)), key=len, default=None)
    return PRICES[best] if best else None


def backend_price(backend: Any, model: str) -> Price | None:
    """The listed price of ``model`` on ``backend``, or None when the backend has none for it.

    A backend that is not ``priced`` has none. A priced backend with a ``billed_as(model)``
    method (the Bedrock and Vertex ones) names the model id of this table that the model is
    billed as, or None when the table does not price it there (``docs/backends.md``).
    """
    if not getattr(backend, "priced", False):
        return None
    billed = getattr(backend, "billed_as", None)
    name = billed(model) if callable(billed) else model
    return price_for(name) if isinstance(name, str) else None


def _tokens(usage: Mapping[str, Any], name: str) -> int:
    value = usage.get(name)
    return int(value) if isinstance(value, int | float) else 0


def cost_usd(model: str, usage: Mapping[str, Any], *, batch: bool = False) -> float | None:
    """The cost of one response from its ``usage`` object, or None for an unlisted model."""
    price = price_for(model)
    if price is None:
        return None
    return cost_at(price, usage, batch=batch)


def cost_at(price: Price, usage: Mapping[str, Any], *, batch: bool = False) -> float:
    """The cost of one response at ``price`` from its ``usage`` object.

    Counts ``input_tokens``, ``output_tokens``, ``cache_read_input_tokens`` and
    ``cache_creation_input_tokens`` (priced as 5-minute cache writes unless the usage splits
    them by ``cache_creation.ephemeral_1h_input_tokens``); a chat-completions usage object
    (``prompt_tokens``, ``completion_tokens``) counts as input and output. Batch requests cost
    half.
    """
    if "input_tokens" not in usage and "output_tokens" not in usage:
        usage = {
            "input_tokens": usage.get("prompt_tokens"),
            "output_tokens": usage.get("completion_tokens"),
        }
    creation = usage.get("cache_creation")
    one_hour = 0
    if isinstance(creation, Mapping):
        one_hour = _tokens(creation, "ephemeral_1h_input_tokens")
    five_min = max(_tokens(usage, "cache_creation_input_tokens") - one_hour, 0)
    total = (
        _tokens(usage, "input_tokens") * price.input
        + _tokens(usage, "output_tokens") * price.output
        + _tokens(usage, "cache_read_input_tokens") * price.cache_read
        + five_min * price.cache_write_5m
        + one_hour * price.cache_write_1h
    ) / 1_000_000
    return round(total * (BATCH_DISCOUNT if batch else 1.0), 8)


def max_cost_usd(price: Price, input_tokens: int, max_tokens: int, *, batch: bool = False) -> float:
    """The most one request can cost at ``price``: its input tokens and ``max_tokens`` of output."""
    total = (input_tokens * price.input + max_tokens * price.output) / 1_000_000
    return total * (BATCH_DISCOUNT if batch else 1.0)
