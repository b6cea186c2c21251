"""The independent verification of a study's ledger, run in a child process (issue 41).

``ledger export`` embeds the report, and the report lists the verifier's checks of the study's
ledger: about half of an export's time. The verification reads only what is committed, and the
export holds the ledger's write transaction from its start, so a verification started then sees
the very ledger the report would have verified after the export's own pass: the same report.
:class:`BackgroundVerification` runs :func:`verify.verify_path` in a fresh interpreter
(``python -m analysis._background PATH``: nothing of the parent is inherited, and the caller's
main module is not imported again, as ``multiprocessing`` would) while the export writes its
files, and :meth:`~BackgroundVerification.result` waits for it where the report needs it.

Failures are those of the call made in place: an exception raised by the verifier is raised
again in the parent; a child that dies without an answer raises :class:`AnalysisError` with its
exit status and the end of what it wrote to stderr. :meth:`~BackgroundVerification.close` stops
a child still running (an export that failed before its report), so nothing outlives the export.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from typing import Any

from analysis._errors import AnalysisError

__all__ = ["BackgroundVerification"]


class BackgroundVerification:
    """:func:`verify.verify_path` of ``path`` in a child process, started at once."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._process = subprocess.Popen(  # stderr is read with stdout once it is wanted
            [sys.executable, "-m", "analysis._background", path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._answer: tuple[str, Any] | None = None

    def result(self) -> Any:
        """The verifier's report (:class:`verify.Report`), waiting for the child if need be."""
        if self._answer is None:
            out, err = self._process.communicate()
            try:
                answer = pickle.loads(out) if out else None
            except Exception:  # a child killed while writing
                answer = None
            if not isinstance(answer, tuple) or self._process.returncode != 0:
                said = err.decode("utf-8", "replace").strip().splitlines()
                raise AnalysisError(
                    f"{self._path}: the verification of the ledger stopped without a report "
                    f"(exit status {self._process.returncode})" + (f": {said[-1]}" if said else "")
                )
            self._answer = answer
        status, value = self._answer
        if status == "error":
            raise value
        return value

    def close(self) -> None:
        """Stop the child if it still runs (its report is no longer wanted) and reap it."""
        if self._process.poll() is None:
            self._process.kill()
        self._process.communicate()


def _main(argv: list[str]) -> int:
    """The child: verify ``argv[0]`` and write the pickled ``("ok", report)`` or the error."""
    try:
        from verify import verify_path

        answer: tuple[str, Any] = ("ok", verify_path(argv[0]))
    except Exception as exc:  # raised again by the parent
        answer = ("error", exc)
    try:
        data = pickle.dumps(answer)
    except Exception:  # an exception that cannot be pickled: its text instead
        data = pickle.dumps(("error", AnalysisError(f"the verification failed: {answer[1]!r}")))
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
