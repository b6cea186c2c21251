"""The runner's error tree (also drawn in the ``runner`` package docstring).

::

    ledger.LedgerError
    └── StudyError          a study that cannot be locked, run or used as it stands
        ├── SpecError       a study.toml with problems; ``problems`` lists every one
        ├── StimulusError   a stimulus that cannot be generated, read, written or checked
        └── PreflightError  the backend refused the preflight request: no trial was sent

Every message names the study, file or field at fault. :class:`runner._backends.BackendError`
stands apart: it is one failed attempt (data the runner records and retries), and only
:func:`runner._backends.make_backend` raises it to a caller, for a backend it cannot configure.
"""

from __future__ import annotations

from ledger import LedgerError


class StudyError(LedgerError):
    """A study that cannot be locked or used as it stands (the message says why and where)."""


class SpecError(StudyError):
    """A study spec that cannot be used; the message lists every problem found."""

    def __init__(self, problems: list[str]) -> None:
        """Keep the list of problems; the message joins them one per line."""
        self.problems = problems
        super().__init__("\n".join(problems))


class StimulusError(StudyError):
    """A stimulus could not be generated, read, written or checked; the message says why."""


class PreflightError(StudyError):
    """The preflight failed: the backend cannot serve the study as configured.

    Raised by ``ledger run`` (and ``--check``) after the failed ``run.preflight`` was recorded
    and before any trial was sent; ``seqs`` are the ``run.preflight`` events of this attempt.
    """

    def __init__(self, message: str, seqs: list[int]) -> None:
        """Keep the seqs of the recorded preflight events."""
        self.seqs = seqs
        super().__init__(message)
