"""When a failed attempt is tried again, given up, or stops the run (``docs/trials.md`` §3).

:class:`RetryPolicy` holds what a session learns from its failures: the back-off with jitter
(``retry-after`` wins), the comparison of the session's first failures (all alike: a
configuration error), and the streak of attempts that got no HTTP response at all (the API is
unreachable: stop instead of giving trials up). It decides; the session records.
"""

from __future__ import annotations

import enum
import random

from runner._backends import CONFIGURATION, BackendError
from runner._options import RunOptions

#: A session whose first attempts all fail with the same error (at most this many, and never
#: more than --max-attempts) stops as a configuration error (``docs/trials.md`` §3).
SAME_ERROR_ATTEMPTS = 3
#: Statuses that say "try again later" by definition; they never make a configuration error.
TRANSIENT_STATUS = frozenset({429, 503, 529})


class Verdict(enum.Enum):
    """What becomes of a failed attempt."""

    STOP = "stop"  # not retryable: record it (not final) and stop the run
    UNREACHABLE = "unreachable"  # nothing answers: record it (not final) and stop the run
    GIVE_UP = "give up"  # the trial's last attempt: record it final
    RETRY = "retry"  # record it (not final) and try again after the back-off


class RetryPolicy:
    """The session's retry decisions (``--max-attempts``, back-off, configuration errors)."""

    def __init__(self, options: RunOptions) -> None:
        """Decide by ``options`` (``max_attempts``, ``backoff_*``, ``jitter_seed``)."""
        self.options = options
        self.rng = random.Random(options.jitter_seed)
        self.transport_streak = 0  # attempts in a row, across trials, with no HTTP response
        self.answered = False  # a response came in this session
        # the session's first failures, while they are all alike (None: no longer compared)
        self.same_errors: list[tuple[str, int | None, str]] | None = []
        self.configuration_stop = False  # the session stopped on a configuration error

    def backoff(self, failures: int, error: BackendError) -> float:
        """Seconds to wait after the ``failures``-th failure (``retry-after``, else jitter)."""
        if error.retry_after is not None:
            # the server's word wins over our own ceiling (but not beyond ten minutes)
            return min(error.retry_after, 600.0) + self.rng.uniform(0, 0.1)
        ceiling = min(self.options.backoff_max, self.options.backoff_base * 2 ** (failures - 1))
        return self.rng.uniform(ceiling / 2, ceiling)  # "equal jitter"

    def responded(self) -> None:
        """A response came: the API is reachable, and the first failures are no longer compared."""
        self.transport_streak = 0
        self.answered = True

    def verdict(self, error: BackendError, failures: int) -> Verdict:
        """The fate of a failed attempt (``error`` as :meth:`same_error` made it).

        ``failures``: the trial's counted failures, this one included.
        """
        if not error.retryable:
            return Verdict.STOP
        # after a configuration stop, no failure in flight counts (``docs/trials.md`` §3)
        final = failures >= self.options.max_attempts and not self.configuration_stop
        if error.http_status is None:
            self.transport_streak += 1
        else:
            self.transport_streak = 0
        if final and self.transport_streak >= self.options.max_attempts:
            # nothing has answered for a while: the API is unreachable (wrong base URL,
            # network down), which is not this trial's fault. Stop instead of giving
            # trials up, so nothing is lost.
            return Verdict.UNREACHABLE
        return Verdict.GIVE_UP if final else Verdict.RETRY

    def unreachable(self, error: BackendError) -> str:
        """Why the run stops when nothing answers (:attr:`Verdict.UNREACHABLE`)."""
        return (
            f"the API did not answer {self.transport_streak} attempts in a row "
            f"(last: {error.message}); check --base-url and the network"
        )

    def same_error(self, error: BackendError) -> BackendError:
        """The error to record: ``configuration`` once the session's first attempts fail alike.

        Before the session's first response, every failure with an HTTP status (other than
        429, 503 and 529, which mean "later") is compared with the ones before it; when the
        first ``min(3, --max-attempts)`` failed attempts of the session carry the same error
        (type, status and message), the last one is recorded as ``configuration`` and the run
        stops, before any trial can have used up its attempts. Any other outcome first (a
        response, a different error, a transport error) ends the comparison for the session.
        """
        if self.answered or self.same_errors is None or not error.retryable:
            return error
        if error.http_status is None or error.http_status in TRANSIENT_STATUS:
            self.same_errors = None
            return error
        key = (error.error_type, error.http_status, error.message)
        if self.same_errors and self.same_errors[0] != key:
            self.same_errors = None
            return error
        self.same_errors.append(key)
        needed = min(SAME_ERROR_ATTEMPTS, self.options.max_attempts)
        if len(self.same_errors) < needed:
            return error
        self.same_errors = None
        self.configuration_stop = True
        return BackendError(
            CONFIGURATION,
            f"configuration error: the first {needed} attempts of this session all failed "
            f"with the same error ({error.message}); the backend cannot serve this study as "
            "configured (a model that cannot take images, a wrong model or URL?); no trial "
            "was given up",
            http_status=error.http_status,
            retryable=False,
            raw=error.raw,
        )
