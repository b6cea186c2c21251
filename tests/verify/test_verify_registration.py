"""The ``registration`` check (``docs/reporting.md`` §3.4): the OSF preregistration locked at
lock is re-derived from the first ``protocol.locked`` by the verifier's own code; a tampered
field fails naming it, and an archive locked before the file existed WARNs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from helpers import science_skipped

from verify import Report, Status, verify_archive
from verify._archive.osf import OSF_PATH, check_registration

COPY = f"protocol/{OSF_PATH}"


def test_the_verifier_rederives_it_and_names_a_tampered_field(
    simulated_archive: Path, simulated_report: Report, tmp_path: Path
) -> None:
    check = simulated_report.get("registration")
    assert check is not None and check.status is Status.PASS, check
    assert "24 fields" in check.reason and "20 filled" in check.reason
    copy = tmp_path / "archive"
    shutil.copytree(simulated_archive, copy)
    path = copy / COPY
    text = path.read_text("utf-8")
    tampered = re.sub(r"with seed (\d+)", lambda m: f"with seed {int(m[1]) + 1}", text)
    assert tampered != text
    path.write_text(tampered, "utf-8")
    with science_skipped():  # the registration check FAILs; the science checks could only add
        report = verify_archive(copy)
    check = report.get("registration")
    assert check is not None and check.status is Status.FAIL
    assert COPY in check.reason and "(Design plan / Randomization)" in check.reason
    assert not report.ok


def test_a_study_locked_before_the_registration_warns() -> None:
    """An archive without the file (locked before §3) is a WARN, not a FAIL."""
    old: Any = SimpleNamespace(
        of_kind=lambda kind: [7] if kind == "protocol.locked" else [], locked_versions={}
    )
    check = check_registration(old)
    assert check.status is Status.WARN and "nothing to check" in check.reason


def test_a_relocked_and_resigned_registration_still_fails_naming_the_field(
    simulated_archive: Path, tmp_path: Path
) -> None:
    """A careful forger re-locks a changed file and re-signs every event: the signatures pass,
    the verifier's own re-derivation from protocol.locked does not."""
    from tests.verify.test_archive_tamper import failed, passed
    from tests.verify.test_verify_text_study import relocked_report

    copy = tmp_path / "archive"
    shutil.copytree(simulated_archive, copy)

    def change(data: bytes) -> bytes:
        text = data.decode("utf-8")
        out = re.sub(r"alpha 0\.05", "alpha 0.5", text, count=1)
        assert out != text
        return out.encode("utf-8")

    with science_skipped():
        report = relocked_report(copy, OSF_PATH, change)
    passed(report, "signatures")
    passed(report, "protocol")
    reason = failed(report, "registration")
    assert "(Study information / Hypotheses)" in reason and "alpha 0.5" in reason
