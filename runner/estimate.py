"""``ledger estimate``: tokens and cost of the pending trials, before anything is sent."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger import Ledger
from runner._budget import request_input_tokens
from runner.backends import Backend
from runner.lock import check_integrity, ledger_path
from runner.pricing import BATCH_DISCOUNT, PRICES_AS_OF, Price, backend_price
from runner.request import RequestBuilder
from runner.state import load_state


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
    step_calls: int = 0
    """Step calls still to make (``docs/trials.md`` §5), counted in the tokens and costs."""
    step_input_tokens: int = 0
    step_output_tokens_max: int = 0


def estimate_study(root: str | Path, backend: Backend, price: Price | None = None) -> Estimate:
    """Count input tokens once per (arm, stimulus) and scale by the pending trials.

    Input tokens come from the backend's counter (the ``count_tokens`` endpoint for
    ``anthropic``) where it has one, else from :func:`runner.execute.request_input_tokens`,
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
        steps = _step_calls(study, builder, log, state) if study.steps else []
    pending = state.pending()
    for trial in pending:  # a second stage's prior is not known yet: its slots count empty
        after = study.arms[trial.arm].after
        if after is not None:
            builder.renderer.prior_values[trial.id] = {
                s: ""
                for s in (
                    "prior.response",
                    "prior.answer",
                    "prior.answer_text",
                    "prior.other",
                    "prior.other_text",
                )
            }
    called = [t for t in pending if study.arms[t.arm].response_from is None]  # trials.md §6
    keys = sorted({(t.arm, t.model or "", t.stimulus) for t in called})
    sample = {(t.arm, t.model or "", t.stimulus): t for t in called}

    async def count() -> tuple[dict[tuple[str, str, str], tuple[int, int]], bool]:
        found: dict[tuple[str, str, str], tuple[int, int]] = {}  # (input, max_tokens)
        counted = True
        try:
            for key in keys:
                body = builder.body(sample[key])
                value = await backend.count_tokens(backend.wire_body(body))
                if value is None:
                    counted = False
                    value = request_input_tokens(body, builder.renderer.image_sizes(key[2]))
                found[key] = (value, int(body.get("max_tokens", 4096)))
        finally:
            await backend.aclose()
        return found, counted

    per_key, counted = asyncio.run(count())
    per_trial: list[tuple[Any, int, int]] = [
        (t, *per_key[(t.arm, t.model or "", t.stimulus)]) for t in called
    ]
    trial_rows = len(per_trial)
    input_tokens = sum(tokens for _, tokens, _ in per_trial)
    output_max = sum(most for _, _, most in per_trial)
    per_trial += steps  # step calls are priced as their model's calls
    typical = round(sum(outputs) / len(outputs)) if outputs else None
    ids = {m.name: m.id for m in study.model_specs()}
    prices: dict[str | None, Price | None] = {}
    source = "--price-in/--price-out" if price is not None else None
    for name, model_id in ids.items():
        prices[name] = price if price is not None else (backend_price(backend, model_id))
    if price is None and backend.priced and any(p is not None for p in prices.values()):
        source = f"runner/pricing.py (prices as of {PRICES_AS_OF})"
    distinct = {p for p in prices.values()}
    shown = next(iter(distinct)) if len(distinct) == 1 else None

    def cost(output_per_trial: int | None, *, most: bool = False) -> float | None:
        if output_per_trial is None and not most:
            return None
        total = 0.0
        for trial, tokens, max_out in per_trial:
            rate = prices.get(trial.model)
            if rate is None:
                return None
            out = max_out if most else (output_per_trial or 0)
            total += tokens * rate.input + out * rate.output
        return total / 1_000_000

    return Estimate(
        model=", ".join(dict.fromkeys(ids.values())),
        trials=len(state.order),
        pending=len(pending),
        input_tokens=input_tokens,
        counted=counted,
        source=f"{backend.name} count_tokens" if counted else "estimate (not counted)",
        output_tokens_max=output_max,
        output_tokens_typical=typical * trial_rows if typical is not None else None,
        cost_min_usd=cost(0),
        cost_typical_usd=cost(typical),
        cost_max_usd=cost(None, most=True),
        batch_factor=BATCH_DISCOUNT,
        prices_as_of=PRICES_AS_OF,
        price_in_per_mtok=shown.input if shown is not None else None,
        price_out_per_mtok=shown.output if shown is not None else None,
        price_source=source,
        step_calls=len(steps),
        step_input_tokens=sum(tokens for _, tokens, _ in steps),
        step_output_tokens_max=sum(most for _, _, most in steps),
    )


@dataclass(frozen=True)
class _StepCallRow:
    """A pending step call as the estimate prices it: its model's name."""

    model: str | None


def _step_calls(
    study: Any, builder: RequestBuilder, log: Ledger, state: Any
) -> list[tuple[Any, int, int]]:
    """(call, input tokens, max_tokens) of every step call still to make.

    Item step calls not final; trial step calls on every trial not excluded, given up or
    already judged. Inputs not known yet (a response, a decision) count as empty text, so the
    input is a lower bound; the output is bounded by the model's ``max_tokens``. Trial requests
    that read a step not decided yet are rendered with that step's slot empty.
    """
    from runner.step_state import StepWork
    from runner.steps import trial_step_calls

    work = StepWork(study, builder.renderer)
    work.load(log)
    for item in work.items:  # so the trials' requests can be rendered for their token count
        values = work.item_inputs(item)
        rough = {
            s.name: ""
            for t in builder.renderer.item_templates()
            for s in t.slots()
            if s.name.startswith("steps.")
        }
        builder.renderer.step_values[item] = values if values is not None else rough
    calls = [c for cs in work.item_calls.values() for c in cs]
    for trial in state.order:
        record = state.trials[trial.id]
        if record.excluded is not None or record.given_up is not None:
            continue
        for spec in study.steps.values():
            if spec.on == "trial":
                calls += trial_step_calls(spec, trial.id, trial.stimulus)
    out: list[tuple[Any, int, int]] = []
    for call in calls:
        record = work.calls.get(call.id)
        if record is not None and record.final:
            continue
        if call.trial is None and work.settled(call.step, call.stimulus):
            continue  # never to be called: the step has no decision there and cannot get one
        values = work.inputs(call) if call.trial is None or call.trial in work.responses else None
        if values is None:
            values = work.render.rough_values(call)
        body = work.render.body(call, values)
        out.append(
            (
                _StepCallRow(call.model),
                request_input_tokens(body, []),
                int(body.get("max_tokens", 4096)),
            )
        )
    return out
