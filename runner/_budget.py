"""A session's money: the price it is costed with, and the ``--budget-usd`` reservations.

``docs/trials.md`` §3 and §5: before each request the most it could cost (its input tokens and
``max_tokens`` of output) is reserved; a request that could push the study's total (earlier
sessions' recorded cost, this session's, and what is in flight) over the budget is not sent.
On PostgreSQL the reservation is made in the store, so every live worker's spend counts.
:class:`SessionBudget` keeps this for both session drivers (call by call, and batches): it
decides, and returns the stop reason for the runner to record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runner._backends import Backend
from runner._errors import StudyError
from runner._options import Counters, RunOptions, given_prices
from runner._pricing import PRICES_AS_OF, Price, backend_price, max_cost_usd, price_record
from runner._request import RequestBuilder, Trial
from runner._workers import SharedRun
from runner.spec import Study
from runner.steps._core import StepCall

#: Where the price table's prices come from (``run.started`` records it).
LISTED = f"runner/_pricing.py (prices as of {PRICES_AS_OF})"


def request_input_tokens(body: dict[str, Any], sizes: Sequence[tuple[int, int]]) -> int:
    """A generous input-token estimate: text at 3 characters per token, images by their pixels.

    Counts the system prompt and the text of every message (few-shot turns too); ``sizes``
    are the (width, height) of the request's images. Images cost about ``width * height /
    750`` tokens after the API scales them to at most 1568 px on the long side (Anthropic's
    vision guide); text rarely needs more than one token per 3 characters. Used only until a
    real ``usage`` is known for the same arm, model and stimulus.
    """
    chars = len(body.get("system", "") or "")
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            chars += len(content)
            continue
        chars += sum(len(b.get("text", "")) for b in content if b.get("type") == "text")
    tokens = chars // 3 + 16
    for width, height in sizes:
        scale = min(1.0, 1568 / max(width, height, 1))
        tokens += int((width * scale) * (height * scale) / 750) + 1
    return tokens


class SessionBudget:
    """The price of a session's calls and the reservations that keep it within its budget."""

    def __init__(
        self,
        study: Study,
        backend: Backend,
        options: RunOptions,
        builder: RequestBuilder,
        *,
        model: str,
        ids: Sequence[str],
        max_tokens: int,
        batch: bool,
    ) -> None:
        """Price the session (``ids``: the ids of its models, ``model`` as recorded).

        A budget without a price is refused here, before anything is recorded.
        """
        self.options = options
        self.builder = builder
        self.max_tokens = max_tokens
        self.batch = batch
        self.spent_before = 0.0  # cost recorded by earlier sessions; counts against the budget
        self.unrecorded_usd = 0.0  # costs of responses submitted and not yet committed
        # input tokens of the last response per (arm, model, stimulus): better than a guess
        self.input_tokens: dict[tuple[str, str | None, str], int] = {}
        # a session of several listed models with steps prices each call at its model's price
        self.prices_by_id: dict[str, Price] = {}
        self.price, self.source = self._session_price(study, backend, model, sorted(set(ids)))

    def _session_price(
        self, study: Study, backend: Backend, model: str, ids: list[str]
    ) -> tuple[Price | None, str | None]:
        """The price this session is costed with, and where it comes from."""
        given = given_prices(self.options.price_in, self.options.price_out)
        several = self._several(study, backend, ids, given) if len(ids) > 1 else None
        if several is not None:
            return several
        if given is not None:
            return given, "--price-in/--price-out"
        listed = backend_price(backend, model)
        if listed is not None:
            return listed, LISTED
        if self.options.budget_usd is not None:
            what = (
                f"for model {model!r} (runner/_pricing.py lists the known models)"
                if backend.priced
                else f"for the {backend.name} backend"
            )
            raise StudyError(
                f"--budget-usd: no price is known {what}, so the budget cannot be enforced; "
                "give the run its prices with --price-in and --price-out (USD per million "
                "input and output tokens), or run without --budget-usd"
            )
        return None, None

    def _several(
        self, study: Study, backend: Backend, ids: list[str], given: Price | None
    ) -> tuple[Price, str] | None:
        """A session of several model ids: priced per model (steps, ``docs/trials.md`` §5).

        None: the session is not priced here (an unpriced backend without given prices).
        """
        if given is None and backend.priced and study.steps:
            each = {i: backend_price(backend, i) for i in ids}
            if all(p is not None for p in each.values()):
                self.prices_by_id = {i: p for i, p in each.items() if p is not None}
                return self.prices_by_id[ids[0]], f"{LISTED}, per model"
        if given is not None or backend.priced:
            raise StudyError(
                f"this session would run {len(ids)} models ({', '.join(ids)}), each "
                "with its own price; run one model per priced session (--model NAME)"
            )
        return None

    def started_record(self, cost_before: float) -> dict[str, Any]:
        """The price members of ``run.started`` (none for an unpriced session)."""
        if self.price is None:
            return {}
        source = self.source or ""
        record: dict[str, Any] = {
            "cost_usd_before": round(cost_before, 8),
            "price_usd_per_mtok": price_record(self.price, source),
        }
        if self.prices_by_id:
            record["prices_by_model_usd_per_mtok"] = {
                i: price_record(p, source) for i, p in self.prices_by_id.items()
            }
        return record

    def price_of(self, call: Trial | StepCall) -> Price | None:
        """The price of ``call``: its model's in a per-model priced session, else the session's."""
        if not self.prices_by_id:
            return self.price
        return self.prices_by_id.get(self.builder.renderer.models[call.model].id, self.price)

    def worst_cost(
        self, trial: Trial | StepCall, wire: dict[str, Any], *, batch: bool | None = None
    ) -> float:
        """The most the request ``wire`` of ``trial`` can cost (a priced session only).

        ``batch`` (default: the session's) prices it at the Message Batches discount.
        """
        price = self.price_of(trial)
        assert price is not None
        tokens = self.input_tokens.get((trial.arm, trial.model, trial.stimulus))
        if tokens is None:
            sizes = (
                []
                if isinstance(trial, StepCall)
                else self.builder.renderer.image_sizes(trial.stimulus)
            )
            tokens = request_input_tokens(wire, sizes)
        discounted = self.batch if batch is None else batch
        max_tokens = wire.get("max_tokens", wire.get("max_completion_tokens", self.max_tokens))
        return max_cost_usd(price, tokens, int(max_tokens), batch=discounted)

    def observed(self, trial: Trial | StepCall, usage: dict[str, Any]) -> None:
        """Remember a response's input tokens for the next request of its arm, model and item."""
        if isinstance(usage.get("input_tokens"), int):
            used = int(usage["input_tokens"])
            self.input_tokens[(trial.arm, trial.model, trial.stimulus)] = used

    def reserve(
        self,
        trial: Trial | StepCall,
        wire: dict[str, Any],
        counters: Counters,
        shared: SharedRun | None,
    ) -> tuple[float | None, str | None]:
        """Reserve the most this request can cost: (the amount, None), or (None, why not).

        An unpriced session, or one without a budget, reserves nothing (0.0).
        """
        limit = self.options.budget_usd
        if limit is None or self.price is None:
            return 0.0, None
        worst = self.worst_cost(trial, wire)
        if shared is not None:
            return self._reserve_shared(worst, counters, shared, limit)
        c = counters
        if self.spent_before + c.cost_usd + c.reserved_usd + worst > limit:
            return None, (
                f"budget: the next request could cost up to ${worst:.4f}, which with "
                f"${self.spent_before:.4f} spent by earlier sessions, ${c.cost_usd:.4f} by this "
                f"one and ${c.reserved_usd:.4f} in flight would exceed --budget-usd "
                f"{limit} (the budget covers the whole study)"
            )
        c.reserved_usd += worst
        return worst, None

    def _reserve_shared(
        self, worst: float, counters: Counters, shared: SharedRun, limit: float
    ) -> tuple[float | None, str | None]:
        """Reserve against the study-wide budget in the store (every worker's spend counts)."""
        mine = counters.reserved_usd + self.unrecorded_usd
        granted, spent, others = shared.link.reserve(mine, worst, limit)
        if not granted:
            return None, (
                f"budget: the next request could cost up to ${worst:.4f}, which with "
                f"${spent:.4f} recorded by every session of the study, ${others:.4f} reserved "
                f"by the other live workers and ${mine:.4f} in flight here would exceed "
                f"--budget-usd {limit} (the budget covers the whole study)"
            )
        counters.reserved_usd += worst
        return worst, None
