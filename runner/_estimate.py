"""``ledger estimate``: tokens and cost of the pending trials, before anything is sent."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger import Ledger
from runner._backends import Backend
from runner._budget import request_input_tokens
from runner._lock import check_integrity, ledger_path
from runner._pricing import BATCH_DISCOUNT, PRICES_AS_OF, Price, backend_price
from runner._request import RequestBuilder
from runner._state import load_state


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
    ``anthropic``) where it has one, else from :func:`runner._budget.request_input_tokens`,
    and the result says which. Output is bounded by ``max_tokens``; the typical output is the
    mean of the responses already recorded, when there are any. Costs use ``price`` when it is
    given (``--price-in`` / ``--price-out``), else the price table for a priced backend.
    """
    root = Path(root)
    study = check_integrity(root)
    builder = RequestBuilder(study)
    with Ledger.open(ledger_path(root), readonly=True) as log:
        state = load_state(study, log)
        typical = _typical_output(log)
        steps = _step_calls(study, builder, log, state) if study.steps else []
    pending = state.pending()
    _blank_priors(study, builder, pending)
    called = [t for t in pending if study.arms[t.arm].response_from is None]  # trials.md §6
    per_key, counted = asyncio.run(_count(builder, backend, called))
    per_trial: list[tuple[Any, int, int]] = [
        (t, *per_key[(t.arm, t.model or "", t.stimulus)]) for t in called
    ]
    trial_rows = len(per_trial)
    input_tokens, output_max = _sums(per_trial)
    per_trial += steps  # step calls are priced as their model's calls
    ids = {m.name: m.id for m in study.model_specs()}
    prices, source = _prices(ids, backend, price)
    distinct = {p for p in prices.values()}
    shown = next(iter(distinct)) if len(distinct) == 1 else None
    return Estimate(
        model=", ".join(dict.fromkeys(ids.values())),
        trials=len(state.order),
        pending=len(pending),
        input_tokens=input_tokens,
        counted=counted,
        source=f"{backend.name} count_tokens" if counted else "estimate (not counted)",
        output_tokens_max=output_max,
        output_tokens_typical=typical * trial_rows if typical is not None else None,
        cost_min_usd=_cost(per_trial, prices, 0),
        cost_typical_usd=_cost(per_trial, prices, typical),
        cost_max_usd=_cost(per_trial, prices, None, most=True),
        batch_factor=BATCH_DISCOUNT,
        prices_as_of=PRICES_AS_OF,
        price_in_per_mtok=shown.input if shown is not None else None,
        price_out_per_mtok=shown.output if shown is not None else None,
        price_source=source,
        step_calls=len(steps),
        step_input_tokens=_sums(steps)[0],
        step_output_tokens_max=_sums(steps)[1],
    )


def _sums(rows: list[tuple[Any, int, int]]) -> tuple[int, int]:
    """(input tokens, most output tokens) of (call, input, max_tokens) rows."""
    return sum(tokens for _, tokens, _ in rows), sum(most for _, _, most in rows)


#: A second stage's ``{prior.*}`` slots (``docs/prompts.md`` §9).
_PRIOR_SLOTS = (
    "prior.response",
    "prior.answer",
    "prior.answer_text",
    "prior.other",
    "prior.other_text",
)


def _typical_output(log: Ledger) -> int | None:
    """The mean output tokens of the recorded responses (None before the first)."""
    outputs = [
        int(e.body["usage"]["output_tokens"])
        for e in log.events("trial.responded")
        if isinstance(e.body.get("usage", {}).get("output_tokens"), int)
    ]
    return round(sum(outputs) / len(outputs)) if outputs else None


def _blank_priors(study: Any, builder: RequestBuilder, pending: list[Any]) -> None:
    """A second stage's prior is not known yet: its slots count empty."""
    for trial in pending:
        if study.arms[trial.arm].after is not None:
            builder.renderer.prior_values[trial.id] = {s: "" for s in _PRIOR_SLOTS}


async def _count(
    builder: RequestBuilder, backend: Backend, called: list[Any]
) -> tuple[dict[tuple[str, str, str], tuple[int, int]], bool]:
    """(input tokens, max_tokens) per (arm, model, stimulus); whether the backend counted all.

    A request the backend cannot count is estimated (:func:`request_input_tokens`).
    """
    keys = sorted({(t.arm, t.model or "", t.stimulus) for t in called})
    sample = {(t.arm, t.model or "", t.stimulus): t for t in called}
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


def _prices(
    ids: dict[str | None, str], backend: Backend, price: Price | None
) -> tuple[dict[str | None, Price | None], str | None]:
    """Each model's price (``price`` if given, else the table's), and where they come from."""
    prices: dict[str | None, Price | None] = {}
    source = "--price-in/--price-out" if price is not None else None
    for name, model_id in ids.items():
        prices[name] = price if price is not None else (backend_price(backend, model_id))
    if price is None and backend.priced and any(p is not None for p in prices.values()):
        source = f"runner/_pricing.py (prices as of {PRICES_AS_OF})"
    return prices, source


def _cost(
    per_trial: list[tuple[Any, int, int]],
    prices: dict[str | None, Price | None],
    output_per_trial: int | None,
    *,
    most: bool = False,
) -> float | None:
    """The cost of every call at ``output_per_trial`` output tokens (``most``: at max_tokens)."""
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
    from runner.steps._core import trial_step_calls
    from runner.steps._state import StepWork

    work = StepWork(study, builder.renderer)
    work.load(log)
    _fill_step_values(work, builder)
    calls = [c for cs in work.item_calls.values() for c in cs]
    trial_specs = [spec for spec in study.steps.values() if spec.on == "trial"]
    for trial in state.order:
        record = state.trials[trial.id]
        if record.excluded is None and record.given_up is None:
            for spec in trial_specs:
                calls += trial_step_calls(spec, trial.id, trial.stimulus)
    return [row for call in calls if (row := _call_row(work, call)) is not None]


def _fill_step_values(work: Any, builder: RequestBuilder) -> None:
    """Each item's ``{steps.*}`` values, empty where not decided yet.

    So the trials' requests can be rendered for their token count.
    """
    for item in work.items:
        values = work.item_inputs(item)
        rough = {
            s.name: ""
            for t in builder.renderer.item_templates()
            for s in t.slots()
            if s.name.startswith("steps.")
        }
        builder.renderer.step_values[item] = values if values is not None else rough


def _call_row(work: Any, call: Any) -> tuple[Any, int, int] | None:
    """(call, input tokens, max_tokens) of a step call still to make, else None."""
    record = work.calls.get(call.id)
    if record is not None and record.final:
        return None
    if call.trial is None and work.settled(call.step, call.stimulus):
        return None  # never to be called: the step has no decision there and cannot get one
    values = work.inputs(call) if call.trial is None or call.trial in work.responses else None
    if values is None:
        values = work.render.rough_values(call)
    body = work.render.body(call, values)
    return (
        _StepCallRow(call.model),
        request_input_tokens(body, []),
        int(body.get("max_tokens", 4096)),
    )
