"""The preflight: before any paid call, one recorded request per shape (``docs/trials.md`` §3).

A run's first request is not a trial. For every distinct *request shape* among the requests
the session is about to send (per model: whether the request has images, a system prompt,
prior turns, and which parameter names it carries), the runner sends the request of the first
such trial in schedule order, exactly as that trial would send it (the runner's request builder
and the backend's wire translation), and records it as ``run.preflight`` with the request blob
and the response blob or the error. In a study with model steps the step calls are requests
too (screeners, rewriters, judges, each with its own model): the preflight covers their shapes
as well, before the first step call, and a request whose inputs do not exist yet (a trial
whose item template reads a step's output, a judge that reads a response) is sent with those
slots empty and says so (``empty_slots``). It shows, before anything can be given up or paid
for, that the backend *accepts* a request naming the locked model and takes the study's
requests: a wrong model id (404), a server that cannot take images (a 500 or a 400), a bad
key. It does not show which model answered (a server may answer any name with the model it
has): what the server reports about itself is recorded beside it (``server_identity``,
:mod:`runner._identity`). A failed preflight stops the run with a message naming the model, the
backend, its URL and the error (:class:`runner._errors.PreflightError`): no trial or step call
was requested, none was given up.

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
from typing import Any, NoReturn, Protocol

from ledger import Ledger, SigningKey
from runner._backends import Backend, BackendError, Reply
from runner._control import RunControl, RunInterruptedError
from runner._errors import PreflightError, StudyError
from runner._identity import ServerIdentity
from runner._pricing import Price, cost_at
from runner._provenance import model_matches
from runner._request import RequestBuilder, Trial, request_blob
from runner.spec import Study
from runner.steps._core import StepCall

__all__ = [
    "Planned",
    "Preflight",
    "PreflightHost",
    "Shape",
    "first_per_shape",
    "plan_preflights",
    "request_shape",
    "run_preflights",
]

#: Members of a Messages request that are its structure, not its parameters.
STRUCTURE = frozenset({"model", "messages", "system"})
#: Statuses that mean "later": retried up to ``--max-attempts``, never the same-error rule.
LATER = frozenset({429, 503, 529})
#: A preflight that fails this many times in a row with the same error (never more than
#: ``--max-attempts``) has failed; so has one that fails ``--max-attempts`` times.
SAME_ERROR_ATTEMPTS = 3


class PreflightHost(Protocol):
    """What the preflight needs of the session it precedes (:class:`runner._execute.Runner`)."""

    identity: ServerIdentity | None

    @property
    def study(self) -> Study:
        """The locked study."""
        ...

    @property
    def log(self) -> Ledger:
        """The study's ledger."""
        ...

    @property
    def key(self) -> SigningKey:
        """The key the preflight events are signed with."""
        ...

    @property
    def backend(self) -> Backend:
        """The backend the session sends to."""
        ...

    @property
    def builder(self) -> RequestBuilder:
        """The study's request builder."""
        ...

    @property
    def control(self) -> RunControl | None:
        """The session's signal handling, if any."""
        ...

    @property
    def price(self) -> Price | None:
        """The price the session is costed with (None: unpriced)."""
        ...

    @property
    def options(self) -> Any:
        """The session's :class:`runner._execute.RunOptions`."""
        ...

    def worst_cost(
        self, trial: Trial | StepCall, wire: dict[str, Any], *, batch: bool | None = None
    ) -> float:
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


def plan_preflights(trials: list[Trial], body_of: Any) -> list[tuple[Trial, dict[str, Any], Shape]]:
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
class Planned:
    """One request the preflight may send: a trial's or a step call's, and its shape.

    ``empty_slots`` names the template slots sent empty because their values do not exist
    yet (a step's output, a first stage's answer, a judged response); empty for a request
    built exactly as it will be sent.
    """

    subject: Trial | StepCall
    body: dict[str, Any]
    shape: Shape
    empty_slots: tuple[str, ...] = ()

    @property
    def what(self) -> str:
        """``trial A|q1|1`` or ``step call step:judge|judge_a|A|q1|1``."""
        kind = "step call" if isinstance(self.subject, StepCall) else "trial"
        return f"{kind} {self.subject.id}"


def first_per_shape(planned: list[Planned]) -> list[Planned]:
    """The first request of each distinct shape, in the order given."""
    seen: dict[Shape, Planned] = {}
    for entry in planned:
        seen.setdefault(entry.shape, entry)
    return list(seen.values())


@dataclass(frozen=True)
class Preflight:
    """One preflight request that succeeded (the last ``run.preflight`` of its shape).

    ``trial`` is the id of the trial (or, with ``step`` set, the step call) it copies;
    ``warnings`` what the server said about the locked model (:mod:`runner._identity`).
    """

    seq: int
    trial: str
    model: str
    shape: Shape
    attempts: int
    http_status: int
    reported_model: str | None
    model_match: bool | None
    simulated: bool
    step: str | None = None
    empty_slots: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for the person at the terminal: what the server accepted and reported."""
        reported = (
            f"; the response reports model {self.reported_model!r}"
            if self.reported_model is not None
            else "; the response reports no model"
        )
        label = " (simulated)" if self.simulated else ""
        like = f"step call {self.trial}" if self.step is not None else f"trial {self.trial}"
        empty = (
            f", with {', '.join(self.empty_slots)} sent empty (their values come later)"
            if self.empty_slots
            else ""
        )
        return (
            f"preflight{label}: a request naming model {self.model!r} was accepted, built like "
            f"{like}{empty} ({self.shape.describe()}): HTTP {self.http_status}{reported} "
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
    planned: Planned,
    attempt: int,
    wire: dict[str, Any],
    *,
    check: bool,
    reply: Reply | None = None,
    error: BackendError | None = None,
    latency: float | None = None,
    cost: float | None = None,
) -> int:
    """Append one ``run.preflight``; return its seq.

    A real backend's preflight also records what the server said about itself
    (``server_identity``) and, when answered, the response's ``system_fingerprint`` and
    identity ``headers`` (``docs/trials.md`` §3); a simulated one's body is as it was.
    """
    blob, digest = request_blob(wire)
    simulated = runner.backend.simulated
    subject, shape = planned.subject, planned.shape
    copies: dict[str, Any] = (
        {"as_call": subject.id, "step": subject.step}
        if isinstance(subject, StepCall)
        else {"as_trial": subject.id, "position": subject.position}
    )
    body: dict[str, Any] = {
        "check": check,
        "backend": runner.backend.name,
        "url": backend_url(runner.backend),
        "simulated": simulated,
        "package_version": version("prompt-ledger"),
        "model": shape.model,
        "shape": shape.as_dict(),
        **copies,
        **({"empty_slots": list(planned.empty_slots)} if planned.empty_slots else {}),
        "attempt": attempt,
        "request_sha256": digest,
        "ok": reply is not None,
        "http_status": reply.http_status
        if reply is not None
        else (error.http_status if error is not None else None),
        "latency_ms": None if simulated or latency is None else round(latency * 1000, 3),
    }
    if runner.identity is not None:
        body["server_identity"] = runner.identity.as_dict()
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
        if not simulated:
            body.update(system_fingerprint=reply.system_fingerprint, headers=reply.headers)
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


def _budget_check(
    runner: PreflightHost, subject: Trial | StepCall, wire: dict[str, Any], spent: float
) -> None:
    """Refuse (nothing sent) a preflight that could take the study over ``--budget-usd``."""
    budget = runner.options.budget_usd
    if budget is None or runner.price is None:
        return
    worst = runner.worst_cost(subject, wire, batch=False)  # sent as a single Messages call
    if spent + worst > budget:
        raise StudyError(
            f"budget: the preflight request could cost up to ${worst:.4f}, which with "
            f"${spent:.4f} already spent would exceed --budget-usd {budget} (the budget covers "
            "the whole study); nothing was sent"
        )


def _warnings(runner: PreflightHost, model: str) -> tuple[str, ...]:
    """What the server said about ``model``, as warning lines (none when it lists it)."""
    identity = runner.identity
    if identity is None or identity.listed.get(model) is True:
        return ()
    name, url = runner.backend.name, backend_url(runner.backend)
    where = f"the {name} backend" + (f" at {url}" if url else "")
    mine = ServerIdentity(
        identity.asked, identity.models, {model: identity.listed.get(model)}, identity.note
    )
    return tuple(mine.warnings(where))


async def run_preflights(
    runner: PreflightHost, planned: list[Planned], *, check: bool, spent: float
) -> list[Preflight]:
    """Send and record the preflight of every shape among ``planned``; raise if one fails.

    ``planned`` are the session's candidate requests (trials', then step calls'), in order;
    the first of each shape is sent (:func:`first_per_shape`).

    ``spent`` is what the study has spent so far (it counts against ``--budget-usd``). Raises
    :class:`PreflightError` (after recording the failed ``run.preflight`` events) when the
    backend does not accept a preflight, and :class:`runner._control.RunInterruptedError` when
    a signal cancels one (recorded as ``interrupted``).
    """
    out: list[Preflight] = []
    for entry in first_per_shape(planned):
        wire = runner.backend.wire_body(entry.body)
        _budget_check(runner, entry.subject, wire, spent)
        preflight, cost = await _preflight_one(runner, entry, wire, check=check)
        spent += cost or 0.0
        out.append(preflight)
    return out


async def _preflight_one(
    runner: PreflightHost, entry: Planned, wire: dict[str, Any], *, check: bool
) -> tuple[Preflight, float | None]:
    """Send one preflight until it is answered (retrying as a trial would); it and its cost."""
    trial, shape = entry.subject, entry.shape
    control = runner.control
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
            _interrupted(runner, entry, attempt, wire, stop, check=check)
        except BackendError as exc:
            seq = _record(runner, entry, attempt, wire, check=check, error=exc)
            seqs.append(seq)
            _end(control, seq)
            errors.append((exc.error_type, exc.http_status, exc.message))
            _refuse(runner, entry, exc, attempt, errors, seqs)
            if control is not None:
                control.check()
            await _wait(runner, runner.backoff(attempt, exc))
            if control is not None:
                control.check()
            continue
        latency = time.monotonic() - started
        cost = cost_at(runner.price, reply.usage) if runner.price is not None else None
        seq = _record(
            runner, entry, attempt, wire, check=check, reply=reply, latency=latency, cost=cost
        )
        _end(control, seq)
        simulated = runner.backend.simulated
        return Preflight(
            seq,
            trial.id,
            shape.model,
            shape,
            attempt,
            reply.http_status,
            reply.model,
            None if simulated else model_matches(shape.model, reply.model),
            simulated,
            trial.step if isinstance(trial, StepCall) else None,
            entry.empty_slots,
            _warnings(runner, shape.model),
        ), cost


def _end(control: RunControl | None, seq: int) -> None:
    """Tell the signal handling the preflight at ``seq`` is recorded."""
    if control is not None:
        control.end_preflight(
            f"the preflight was recorded (run.preflight at seq {seq}); no trial was sent"
        )


def _interrupted(
    runner: PreflightHost,
    entry: Planned,
    attempt: int,
    wire: dict[str, Any],
    stop: _Cancelled,
    *,
    check: bool,
) -> NoReturn:
    """Record a preflight a signal cancelled as ``interrupted``, and stop the run."""
    error = BackendError(
        "interrupted",
        f"interrupted by {stop.signal_name} while in flight; the preflight request "
        "may or may not have reached the API",
        retryable=True,
    )
    seq = _record(runner, entry, attempt, wire, check=check, error=error)
    control = runner.control
    assert control is not None
    raise RunInterruptedError(
        f"interrupted by {stop.signal_name} during the preflight (recorded as "
        f"interrupted, run.preflight at seq {seq}); no trial was sent",
        control.exit_code or 130,
    ) from None


def _refuse(
    runner: PreflightHost,
    entry: Planned,
    exc: BackendError,
    attempt: int,
    errors: list[tuple[str, int | None, str]],
    seqs: list[int],
) -> None:
    """Raise :class:`PreflightError` when a failed preflight is not to be tried again.

    Not retryable, ``--max-attempts`` used up, or the same error (not a "later" one) the last
    ``min(3, --max-attempts)`` times.
    """
    options = runner.options
    needed = min(SAME_ERROR_ATTEMPTS, options.max_attempts)
    later = exc.http_status is None or exc.http_status in LATER
    same = len(errors) >= needed and len(set(errors[-needed:])) == 1
    if exc.retryable and attempt < options.max_attempts and (not same or later):
        return
    name, url = runner.backend.name, backend_url(runner.backend)
    where = f"the {name} backend" + (f" at {url}" if url else "")
    shape = entry.shape
    tries = f" ({attempt} attempts)" if attempt > 1 else ""
    raise PreflightError(
        f"preflight failed{tries}: {where} did not accept the request for model "
        f"{shape.model!r} ({shape.describe()}; built as {entry.what} would be): "
        f"{exc.message.rstrip('.')}. {_hint(exc, shape)}. No trial was sent or "
        f"given up, nor any step call (run.preflight at seq {seqs[-1]}); fix the "
        "cause and run again",
        seqs,
    ) from None
