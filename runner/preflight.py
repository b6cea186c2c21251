"""The preflight: before any trial, one recorded request per request shape (``docs/trials.md`` §3).

A run's first request is not a trial. For every distinct *request shape* among the trials the
session is about to send (per model: whether the request has images, a system prompt, prior
turns, and which parameter names it carries), the runner sends the request of the first such
trial in schedule order, exactly as that trial would send it (the runner's request builder and
the backend's wire translation), and records it as ``run.preflight`` with the request blob and
the response blob or the error. It proves, before anything can be given up, that the backend
serves the locked model and accepts the study's requests: a wrong model id (404), a server that
cannot take images (a 500 or a 400), a bad key. A failed preflight stops the run with a message
naming the model, the backend, its URL and the error (:class:`runner._errors.PreflightError`):
no trial was requested, none was given up.

A preflight is not a trial: it is not in the schedule, never scored or analysed, and not counted
in any trial count. Its cost, when the session is priced, counts against ``--budget-usd``.
``ledger run --check`` runs the preflight alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any, Protocol

from ledger import Ledger, SigningKey
from runner._errors import PreflightError, StudyError
from runner.backends import Backend, BackendError, Reply
from runner.control import RunControl, RunInterruptedError
from runner.pricing import Price, cost_at
from runner.provenance import model_matches
from runner.request import RequestBuilder, Trial, request_blob
from runner.spec import Study

__all__ = [
    "Preflight", "PreflightHost", "Shape", "plan_preflights", "request_shape", "run_preflights",
]  # fmt: skip

#: Members of a Messages request that are its structure, not its parameters.
STRUCTURE = frozenset({"model", "messages", "system"})
#: Statuses that mean "later": retried up to ``--max-attempts``, never the same-error rule.
LATER = frozenset({429, 503, 529})
#: A preflight that fails this many times in a row with the same error (never more than
#: ``--max-attempts``) has failed; so has one that fails ``--max-attempts`` times.
SAME_ERROR_ATTEMPTS = 3


class PreflightHost(Protocol):
    """What the preflight needs of the session it precedes (:class:`runner.execute.Runner`)."""

    study: Study
    log: Ledger
    key: SigningKey
    backend: Backend
    builder: RequestBuilder
    control: RunControl | None
    price: Price | None

    @property
    def options(self) -> Any:
        """The session's :class:`runner.execute.RunOptions`."""
        ...

    def worst_cost(self, trial: Trial, wire: dict[str, Any], *, batch: bool | None = None) -> float:
        """The most the request ``wire`` can cost (a priced session only)."""
        ...

    def backoff(self, failures: int, error: BackendError) -> float:
        """Seconds to wait after the ``failures``-th failure."""
        ...


@dataclass(frozen=True)
class Shape:
    """What a request holds besides its text: the key of one preflight."""

    model: str
    images: bool
    system: bool
    prior_turns: bool
    parameters: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        """The ``shape`` member of ``run.preflight`` (the model is recorded beside it)."""
        return {
            "images": self.images,
            "system": self.system,
            "prior_turns": self.prior_turns,
            "parameters": list(self.parameters),
        }

    def describe(self) -> str:
        """``images, no system prompt, no prior turns; parameters max_tokens, temperature``."""
        return (
            f"{'images' if self.images else 'no images'}, "
            f"{'a system prompt' if self.system else 'no system prompt'}, "
            f"{'prior turns' if self.prior_turns else 'no prior turns'}; "
            f"parameters {', '.join(self.parameters) or 'none'}"
        )


def request_shape(body: dict[str, Any]) -> Shape:
    """The shape of a Messages request body (``docs/trials.md`` §1, ``docs/prompts.md`` §6)."""
    messages = body.get("messages") or []
    images = any(
        isinstance(block, dict) and block.get("type") == "image"
        for message in messages
        if isinstance(message.get("content"), list)
        for block in message["content"]
    )
    return Shape(
        model=str(body.get("model", "")),
        images=images,
        system=bool(body.get("system")),
        prior_turns=len(messages) > 1,
        parameters=tuple(sorted(set(body) - STRUCTURE)),
    )


def plan_preflights(
    trials: list[Trial], body_of: Any
) -> list[tuple[Trial, dict[str, Any], Shape]]:
    """For each distinct shape among ``trials`` (in order), its first trial and request body.

    ``body_of(trial)`` builds a trial's Messages request (the runner's request builder). A
    trial's request depends on its arm, model, stimulus and variant, not on its replicate, so
    each of those is built once (a study of 30 replicates builds a thirtieth of its requests).
    """
    seen: dict[Shape, tuple[Trial, dict[str, Any], Shape]] = {}
    built: set[tuple[str, str | None, str, str | None]] = set()
    for trial in trials:
        request = (trial.arm, trial.model, trial.stimulus, trial.variant)
        if request in built:
            continue
        built.add(request)
        body = body_of(trial)
        shape = request_shape(body)
        if shape not in seen:
            seen[shape] = (trial, body, shape)
    return list(seen.values())


@dataclass(frozen=True)
class Preflight:
    """One preflight request that succeeded (the last ``run.preflight`` of its shape)."""

    seq: int
    trial: str
    model: str
    shape: Shape
    attempts: int
    http_status: int
    reported_model: str | None
    model_match: bool | None
    simulated: bool

    def describe(self) -> str:
        """One line for the person at the terminal."""
        reported = (
            f"; the backend reports model {self.reported_model!r}"
            if self.reported_model is not None and self.reported_model != self.model
            else ""
        )
        label = " (simulated)" if self.simulated else ""
        return (
            f"preflight{label}: model {self.model!r} accepted a request like trial "
            f"{self.trial} ({self.shape.describe()}): HTTP {self.http_status}{reported} "
            f"(run.preflight at seq {self.seq})"
        )


def backend_url(backend: Any) -> str | None:
    """The URL a backend sends requests to, when it has one (for messages and the record)."""
    url = getattr(backend, "url", None)
    if isinstance(url, str):
        return url
    base = getattr(backend, "base_url", None)
    if isinstance(base, str):
        return base.rstrip("/") + "/v1/messages"
    return None


def _hint(error: BackendError, shape: Shape) -> str:
    status = error.http_status
    if status == 404:
        return (
            "Check [model] id in study.toml against the models the server serves (a model id "
            "the server does not have answers 404), and --base-url"
        )
    if status in (401, 403):
        return "Check the API key (ANTHROPIC_API_KEY, OPENAI_API_KEY) and its permissions"
    if status is None:
        return "Check --base-url, that the server is up, and the network"
    if status in LATER:
        return "The API is rate-limited or overloaded: run again later"
    if shape.images:
        return (
            "A server or model that cannot take images refuses requests like this one; use a "
            "model that can, or check the server's own log for the cause"
        )
    return "Check the server's own log for the cause"


async def _send(runner: PreflightHost, wire: dict[str, Any], seed: str) -> Reply:
    """Send ``wire``; cancelled (:class:`_Cancelled`) as soon as a signal arrives."""
    backend = runner.backend
    peek = getattr(backend, "peek", None)  # a replay answers without using up a recorded answer
    call = asyncio.ensure_future(peek(wire) if peek is not None else backend.send(wire, seed=seed))
    control = runner.control
    while True:
        done, _ = await asyncio.wait([call], timeout=0.05)
        if done:
            reply: Reply = call.result()
            return reply
        if control is not None and control.stopping:
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError, BackendError):
                await call
            raise _Cancelled(control.signal_name or "a signal")


class _Cancelled(Exception):
    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


async def _wait(runner: PreflightHost, seconds: float) -> None:
    """Sleep ``seconds``, or less if a signal arrives."""
    end = time.monotonic() + seconds
    control = runner.control
    while time.monotonic() < end:
        if control is not None and control.stopping:
            return
        await asyncio.sleep(min(0.05, max(end - time.monotonic(), 0)))


def _record(
    runner: PreflightHost,
    trial: Trial,
    shape: Shape,
    attempt: int,
    wire: dict[str, Any],
    *,
    check: bool,
    reply: Reply | None = None,
    error: BackendError | None = None,
    latency: float | None = None,
    cost: float | None = None,
) -> int:
    """Append one ``run.preflight``; return its seq."""
    blob, digest = request_blob(wire)
    simulated = runner.backend.simulated
    body: dict[str, Any] = {
        "check": check,
        "backend": runner.backend.name,
        "url": backend_url(runner.backend),
        "simulated": simulated,
        "package_version": version("prompt-ledger"),
        "model": shape.model,
        "shape": shape.as_dict(),
        "as_trial": trial.id,
        "position": trial.position,
        "attempt": attempt,
        "request_sha256": digest,
        "ok": reply is not None,
        "http_status": reply.http_status if reply is not None else (
            error.http_status if error is not None else None
        ),
        "latency_ms": None if simulated or latency is None else round(latency * 1000, 3),
    }
    blobs: dict[str, bytes] = {"request": blob}
    if reply is not None:
        body.update(
            request_id=reply.request_id,
            reported_model=reply.model,
            model_match=None if simulated else model_matches(shape.model, reply.model),
            stop_reason=reply.stop_reason,
            usage=reply.usage,
            cost_usd=cost,
            format=reply.format,
        )
        blobs["response"] = reply.raw
    else:
        assert error is not None
        body.update(
            error_type=error.error_type,
            message=error.message[:2000],
            retryable=error.retryable,
        )
        if error.raw is not None:
            blobs["response"] = error.raw
    return runner.log.append("run.preflight", body, key=runner.key, blobs=blobs).seq


def _budget_check(runner: PreflightHost, trial: Trial, wire: dict[str, Any], spent: float) -> None:
    """Refuse (nothing sent) a preflight that could take the study over ``--budget-usd``."""
    budget = runner.options.budget_usd
    if budget is None or runner.price is None:
        return
    worst = runner.worst_cost(trial, wire, batch=False)  # sent as a single Messages call
    if spent + worst > budget:
        raise StudyError(
            f"budget: the preflight request could cost up to ${worst:.4f}, which with "
            f"${spent:.4f} already spent would exceed --budget-usd {budget} (the budget covers "
            "the whole study); nothing was sent"
        )


async def run_preflights(
    runner: PreflightHost, trials: list[Trial], *, check: bool, spent: float
) -> list[Preflight]:
    """Send and record the preflight of every shape among ``trials``; raise if one fails.

    ``spent`` is what the study has spent so far (it counts against ``--budget-usd``). Raises
    :class:`PreflightError` (after recording the failed ``run.preflight`` events) when the
    backend does not accept a preflight, and :class:`runner.control.RunInterruptedError` when
    a signal cancels one (recorded as ``interrupted``).
    """
    out: list[Preflight] = []
    options = runner.options
    name, url = runner.backend.name, backend_url(runner.backend)
    where = f"the {name} backend" + (f" at {url}" if url else "")
    control = runner.control
    for trial, body, shape in plan_preflights(trials, runner.builder.body):
        wire = runner.backend.wire_body(body)
        _budget_check(runner, trial, wire, spent)
        seqs: list[int] = []
        errors: list[tuple[str, int | None, str]] = []
        attempt = 0
        while True:
            attempt += 1
            if control is not None:
                control.start_preflight()
            started = time.monotonic()
            try:
                reply = await _send(runner, wire, f"{runner.study.seed}|preflight|{trial.id}")
            except _Cancelled as stop:
                error = BackendError(
                    "interrupted",
                    f"interrupted by {stop.signal_name} while in flight; the preflight request "
                    "may or may not have reached the API",
                    retryable=True,
                )
                seq = _record(runner, trial, shape, attempt, wire, check=check, error=error)
                assert control is not None
                raise RunInterruptedError(
                    f"interrupted by {stop.signal_name} during the preflight (recorded as "
                    f"interrupted, run.preflight at seq {seq}); no trial was sent",
                    control.exit_code or 130,
                ) from None
            except BackendError as exc:
                seq = _record(runner, trial, shape, attempt, wire, check=check, error=exc)
                seqs.append(seq)
                if control is not None:
                    control.end_preflight(
                        f"the preflight was recorded (run.preflight at seq {seq}); no trial was "
                        "sent"
                    )
                errors.append((exc.error_type, exc.http_status, exc.message))
                needed = min(SAME_ERROR_ATTEMPTS, options.max_attempts)
                later = exc.http_status is None or exc.http_status in LATER
                same = len(errors) >= needed and len(set(errors[-needed:])) == 1
                if (
                    not exc.retryable
                    or attempt >= options.max_attempts
                    or (same and not later)
                ):
                    tries = f" ({attempt} attempts)" if attempt > 1 else ""
                    raise PreflightError(
                        f"preflight failed{tries}: {where} did not accept the request for model "
                        f"{shape.model!r} ({shape.describe()}; built as trial {trial.id} would "
                        f"be): {exc.message.rstrip('.')}. {_hint(exc, shape)}. No trial was sent "
                        f"or given up (run.preflight at seq {seq}); fix the cause and run again",
                        seqs,
                    ) from None
                if control is not None:
                    control.check()
                await _wait(runner, runner.backoff(attempt, exc))
                if control is not None:
                    control.check()
                continue
            latency = time.monotonic() - started
            cost = cost_at(runner.price, reply.usage) if runner.price is not None else None
            spent += cost or 0.0
            seq = _record(
                runner, trial, shape, attempt, wire, check=check, reply=reply, latency=latency,
                cost=cost,
            )
            if control is not None:
                control.end_preflight(
                    f"the preflight was recorded (run.preflight at seq {seq}); no trial was sent"
                )
            out.append(
                Preflight(
                    seq, trial.id, shape.model, shape, attempt, reply.http_status, reply.model,
                    None if runner.backend.simulated else model_matches(shape.model, reply.model),
                    runner.backend.simulated,
                )
            )
            break
    return out
