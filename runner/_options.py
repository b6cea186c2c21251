"""What a session of ``ledger run`` is given and what it gives back (``docs/trials.md``).

:class:`RunOptions` (one field per CLI option), :class:`Counters` (what a session did, shown
live and recorded in ``run.stopped``) and :class:`RunResult` (one session's outcome). Public
through :mod:`runner._execute` and :mod:`runner`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from runner._errors import StudyError
from runner._preflight import Preflight
from runner._pricing import Price, given_price
from runner._workers import DEFAULT_LEASE_SECONDS


@dataclass(frozen=True)
class RunOptions:
    """How a session runs; every field has a CLI option of the same name.

    ``price_in`` and ``price_out`` (USD per million input and output tokens, given together)
    price the session instead of the price table, and make ``budget_usd`` possible on a backend
    or model that has no listed price. ``preflight`` (the CLI has no option for it: every
    ``ledger run`` preflights) sends the recorded preflight requests before the session
    (:mod:`runner._preflight`); a library caller or a test may turn it off. ``lease_seconds``
    (PostgreSQL only) is how long after this worker's last heartbeat others count it as dead
    and take over its trials (``docs/trials.md`` §8).
    """

    concurrency: int = 8
    max_trials: int | None = None
    until: datetime | None = None
    budget_usd: float | None = None
    max_attempts: int = 5
    backoff_base: float = 1.0
    backoff_max: float = 60.0
    jitter_seed: int | None = None
    poll_interval: float = 10.0
    price_in: float | None = None
    price_out: float | None = None
    models: tuple[str, ...] | None = None
    preflight: bool = True
    lease_seconds: float = DEFAULT_LEASE_SECONDS

    def __post_init__(self) -> None:
        """Refuse one price without the other, and a lease that is not positive."""
        given_prices(self.price_in, self.price_out)
        if not self.lease_seconds > 0:
            raise StudyError(f"--lease-seconds must be positive, not {self.lease_seconds}")


def given_prices(price_in: float | None, price_out: float | None) -> Price | None:
    """The price given with ``--price-in`` and ``--price-out``, or None; both or neither."""
    if price_in is None and price_out is None:
        return None
    if price_in is None or price_out is None:
        raise StudyError(
            "--price-in and --price-out go together: give both (USD per million input and "
            "output tokens) or neither"
        )
    if price_in < 0 or price_out < 0:
        raise StudyError("--price-in and --price-out must not be negative")
    return given_price(price_in, price_out)


@dataclass
class Counters:
    """What a session did; shown live and recorded in ``run.stopped``."""

    responded: int = 0
    failed: int = 0
    given_up: int = 0
    interrupted: int = 0
    cancelled: int = 0  # of the interrupted: calls in flight cancelled by a signal this session
    retries: int = 0
    cost_usd: float = 0.0
    reserved_usd: float = 0.0
    concurrency: int = 0


@dataclass(frozen=True)
class RunResult:
    """The outcome of one session."""

    started_seq: int
    stopped_seq: int
    reason: str
    counters: Counters
    final: int
    pending: int
    checkpoint: str
    fatal: str | None = None
    priced: bool = False
    signal: str | None = None  # the first Ctrl-C (SIGINT) or SIGTERM of the session, if any
    preflights: tuple[Preflight, ...] = ()  # the preflights sent before the session
    witness_wait: float = 0.0  # seconds the session waited on its witnesses
    unwitnessed: tuple[str, ...] = ()  # checkpoints that went on unwitnessed ('continue')
    server_warnings: tuple[str, ...] = ()  # locked models the server did not list, or unasked


ProgressHook = Callable[[Counters, int, int], None]
"""Called after every outcome with (counters, trials final, trials in total)."""
