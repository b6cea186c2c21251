"""The analysis package's error base.

::

    ledger.LedgerError
    └── runner.StudyError
        └── AnalysisError   a path or record the analysis package cannot read (names the path)

Scoring, unblinding, analysis, report and export refuse a study that is not ready with
:class:`runner.StudyError` (so ``except runner.StudyError`` catches every refusal, whichever
package made it); statistics that cannot run on the data are recorded as failed results, not
raised.
"""

from __future__ import annotations

from runner import StudyError


class AnalysisError(StudyError):
    """A study directory or archive that cannot be read; the message names the path at fault."""
