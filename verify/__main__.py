"""``python -m verify PATH``: the independent verifier's own command line.

An auditor needs only ``verify/`` (and its dependencies), never the writer: this module imports
nothing from ``ledger``, ``runner`` or ``analysis``. It runs the same checks as ``ledger verify``
(:func:`verify.verify_path`): a directory is verified as an exported archive or a study folder, a
file as a SQLite ledger, a ``postgresql://...?schema=NAME`` URL as a ledger on PostgreSQL. Exit
status: 0 when no check FAILed, 1 when one did, 2 for a usage error.

Example::

    python -m verify archive/prompt-tumbling-e --trusted-key @archive/owner.vkey \\
        --checkpoint archive/registration-checkpoint.txt --jobs 2
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from verify import KeyFormatError, parse_vkey, render_report, verify_path
from verify._pool import AUTO_JOBS
from verify._report import PARTIAL_EXIT
from verify._safeio import UnsafeFileError, read_regular

__all__ = [
    "build_parser",
    "main",
    "read_tsa_cert",
    "read_vkey",
    "read_witness_vkey",
    "render_report",
]

_MAX_VKEY_FILE = 64 << 10


def read_vkey(value: str) -> str:
    """A vkey given inline, as ``@FILE``, or as the path of a ``.vkey`` file; checked, stripped.

    The vkey is parsed with this package's own parser (``docs/ledger-format.md`` §4); a file
    that cannot be read or a malformed vkey raises :class:`argparse.ArgumentTypeError`.
    """
    text = _read_text(value)
    try:
        parse_vkey(text)
    except KeyFormatError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def read_witness_vkey(value: str) -> str:
    """A witness's cosigner vkey (type 0x04), inline, as ``@FILE`` or a file path; checked."""
    from verify._witness import parse_cosigner_vkey

    text = _read_text(value)
    try:
        parse_cosigner_vkey(text)
    except KeyFormatError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def read_tsa_cert(value: str) -> bytes:
    """The PEM certificate(s) of ``--tsa-cert FILE``: a regular file of at most 64 KiB."""
    try:
        data = read_regular(value, _MAX_VKEY_FILE, follow_links=True)
    except UnsafeFileError as exc:
        raise argparse.ArgumentTypeError(f"--tsa-cert {value}: {exc}") from None
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise argparse.ArgumentTypeError(f"--tsa-cert {value}: no PEM certificate in it")
    return data


def _read_text(value: str) -> str:
    text = value
    if value.startswith("@") or (os.sep in value and os.path.isfile(value)):
        path = value[1:] if value.startswith("@") else value
        try:  # a regular file of at most 64 KiB: a pipe or device is never opened
            text = read_regular(path, _MAX_VKEY_FILE, follow_links=True).decode("utf-8")
        except UnsafeFileError as exc:
            if str(exc) == "is missing":
                raise argparse.ArgumentTypeError(f"vkey file {path}: not found") from None
            raise argparse.ArgumentTypeError(f"vkey file {path}: unreadable ({exc})") from None
        except UnicodeDecodeError as exc:
            raise argparse.ArgumentTypeError(f"vkey file {path}: unreadable ({exc})") from None
    return text.strip()


def _workers(value: str) -> int:
    try:
        jobs = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if jobs < 0:
        raise argparse.ArgumentTypeError(f"{jobs} is not >= 0")
    return jobs


def _jobs(value: str) -> int:
    try:
        jobs = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"{jobs} is not >= 1")
    return jobs


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not 0 <= seconds <= 86400:
        raise argparse.ArgumentTypeError(f"{value} is not from 0 to 86400 seconds")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m verify`` (the options of ``ledger verify``)."""
    parser = argparse.ArgumentParser(
        prog="python -m verify",
        description=(
            "Verify a PROMPT Ledger archive directory or ledger file, offline, with the "
            "independent verifier alone; exit 0 only if no check fails. Without --trusted-key "
            "the keys are self-asserted: signatures then prove integrity, not authorship (a WARN)."
        ),
        epilog=(
            "example: python -m verify archive/ --trusted-key @owner.vkey "
            "--checkpoint registration-checkpoint.txt"
        ),
    )
    parser.add_argument(
        "path",
        metavar="PATH|URL",
        help="an exported archive directory, a study folder, a ledger file, or a PostgreSQL "
        "store: postgresql://[user@]host[:port]/database?schema=NAME (no password in it)",
    )
    parser.add_argument(
        "--trusted-key",
        dest="trusted",
        action="append",
        default=[],
        type=read_vkey,
        metavar="VKEY",
        help="a trusted vkey, inline or @FILE (repeatable)",
    )
    parser.add_argument(
        "--checkpoint",
        dest="checkpoints",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="a checkpoint published elsewhere (repeatable)",
    )
    parser.add_argument(
        "--witness",
        dest="witnesses",
        action="append",
        default=[],
        type=read_witness_vkey,
        metavar="VKEY",
        help="a trusted witness's cosigner vkey, inline or @FILE (repeatable): "
        "every promised checkpoint must carry --quorum valid cosignatures from these",
    )
    parser.add_argument(
        "--quorum",
        type=_jobs,
        default=None,
        metavar="K",
        help="cosignatures required per checkpoint (default: every --witness)",
    )
    parser.add_argument(
        "--witness-skew",
        dest="skew",
        type=_seconds,
        default=300.0,
        metavar="SECONDS",
        help="allowed clock difference between witnesses "
        "and the ledger's event times (default 300)",
    )
    parser.add_argument(
        "--tsa-cert",
        dest="tsa_roots",
        type=read_tsa_cert,
        default=None,
        metavar="FILE",
        help="PEM root certificate(s) of the time-stamping "
        "authority: check the RFC 3161 time stamps",
    )
    parser.add_argument(
        "--annex",
        default=None,
        metavar="FILE",
        help="a public archive's sealed annex (with --identity)",
    )
    parser.add_argument(
        "--identity",
        default=None,
        metavar="KEY",
        help="the auditor's secret key file that opens the annex",
    )
    parser.add_argument(
        "--json", dest="as_json", action="store_true", help="print the report as JSON"
    )
    parser.add_argument(
        "--jobs",
        type=_workers,
        default=AUTO_JOBS,
        metavar="N",
        help="processes (default 0: one per CPU this process may use; 1: this one alone): "
        "signatures and file hashes in workers, the archive checks and re-scoring beside "
        "the re-analysis",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the verifier on the command line ``argv``; return the exit status (0, 1, 2 or 3).

    0: no check FAILed; 1: a check FAILed (or the verifier itself stopped, which never
    counts as verified); 2: a usage error (an unknown option, a malformed ``--trusted-key``);
    3: a public archive verified PARTIAL (nothing FAILed, some checks LIMITED: docs/privacy.md).
    """
    args = build_parser().parse_args(argv)
    if isinstance(sys.stdout, io.TextIOWrapper):  # names from an archive never crash printing
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        report = verify_path(
            args.path,
            trusted_keys=args.trusted,
            checkpoints=args.checkpoints,
            jobs=args.jobs,
            witnesses=args.witnesses,
            quorum=args.quorum,
            skew=args.skew,
            tsa_roots=args.tsa_roots,
            annex=args.annex,
            identity=args.identity,
        )
        if args.as_json:
            sys.stdout.write(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n")
        else:
            render_report(report)
    except Exception as exc:  # fail closed, in one line
        sys.stderr.write(f"python -m verify: stopped by an unexpected error: {exc!r:.300}\n")
        return 1
    if not report.ok:
        return 1
    return PARTIAL_EXIT if report.status == "partial" else 0


if __name__ == "__main__":
    sys.exit(main())
