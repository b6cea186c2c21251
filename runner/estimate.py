"""``ledger estimate``: tokens and cost of the pending trials, before anything is sent."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from ledger import Ledger
from runner.backends import Backend
from runner.execute import estimate_input_tokens
from runner.lock import check_integrity, ledger_path
from runner.pricing import BATCH_DISCOUNT, PRICES_AS_OF, Price, price_for
from runner.request import RequestBuilder
from runner.state import load_state
from runner.stimuli import check_image_for_api


@dataclass(frozen=True)
class Estimate:
    """Predicted tokens and cost for the trials still pending."""

    model: str
    trials: int
    pending: int
    input_tokens: int
    counted: bool
    source: str
    output_tokens_max: int
    output_tokens_typical: int | None
    cost_min_usd: float | None
    cost_typical_usd: float | None
    cost_max_usd: float | None
    batch_factor: float
    prices_as_of: str
    price_in_per_mtok: float | None = None
    price_out_per_mtok: float | None = None
    price_source: str | None = None


def estimate_study(root: str | Path, backend: Backend, price: Price | None = None) -> Estimate:
    """Count input tokens once per (arm, stimulus) and scale by the pending trials.

    Input tokens come from the backend's counter (the ``count_tokens`` endpoint for
    ``anthropic``) where it has one, else from :func:`runner.execute.estimate_input_tokens`,
    and the result says which. Output is bounded by ``max_tokens``; the typical output is the
    mean of the responses already recorded, when there are any. Costs use ``price`` when it is
    given (``--price-in`` / ``--price-out``), else the price table for a priced backend.
    """
    root = Path(root)
    study = check_integrity(root)
    builder = RequestBuilder(study)
    with Ledger.open(ledger_path(root), readonly=True) as log:
        state = load_state(study, log)
        outputs = [
            int(e.body["usage"]["output_tokens"])
            for e in log.events("trial.responded")
            if isinstance(e.body.get("usage", {}).get("output_tokens"), int)
        ]
    pending = state.pending()
    pairs = sorted({(t.arm, t.stimulus) for t in pending})
    sample = {(t.arm, t.stimulus): t for t in pending}

    async def count() -> tuple[dict[tuple[str, str], int], bool]:
        tokens: dict[tuple[str, str], int] = {}
        counted = True
        try:
            for pair in pairs:
                body = builder.body(sample[pair])
                value = await backend.count_tokens(backend.wire_body(body))
                if value is None:
                    counted = False
                    data = study.stimuli[pair[1]].read_bytes()
                    _, w, h = check_image_for_api(data, name=pair[1])
                    value = estimate_input_tokens(body, w, h)
                tokens[pair] = value
        finally:
            await backend.aclose()
        return tokens, counted

    per_pair, counted = asyncio.run(count())
    input_tokens = sum(per_pair[(t.arm, t.stimulus)] for t in pending)
    max_tokens = int(study.model.get("max_tokens", 4096))
    typical = round(sum(outputs) / len(outputs)) if outputs else None
    source = "--price-in/--price-out" if price is not None else None
    if price is None and backend.priced:
        price = price_for(builder.model)
        source = f"runner/pricing.py (prices as of {PRICES_AS_OF})" if price is not None else None

    def cost(output_per_trial: int | None) -> float | None:
        if price is None or output_per_trial is None:
            return None
        out = output_per_trial * len(pending)
        return (input_tokens * price.input + out * price.output) / 1_000_000

    return Estimate(
        model=builder.model,
        trials=len(state.order),
        pending=len(pending),
        input_tokens=input_tokens,
        counted=counted,
        source=f"{backend.name} count_tokens" if counted else "estimate (not counted)",
        output_tokens_max=max_tokens * len(pending),
        output_tokens_typical=typical * len(pending) if typical is not None else None,
        cost_min_usd=cost(0),
        cost_typical_usd=cost(typical),
        cost_max_usd=cost(max_tokens),
        batch_factor=BATCH_DISCOUNT,
        prices_as_of=PRICES_AS_OF,
        price_in_per_mtok=price.input if price is not None else None,
        price_out_per_mtok=price.output if price is not None else None,
        price_source=source,
    )
