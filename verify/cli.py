"""``ledger verify``: the verifier's own subcommand of the ``ledger`` command.

Registered through the ``prompt_ledger.commands`` entry point. Like ``python -m verify`` it
imports nothing from the writer (``ledger``, ``runner``, ``analysis``): trusted keys are parsed
by this package's own vkey parser. Exit status: 0 when no check FAILed, 1 when one did, 2 for a
usage error (a malformed ``--trusted-key`` among them), as for ``python -m verify``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import click

from verify._report import PARTIAL_EXIT

__all__ = ["verify_cmd"]


def _trusted_key(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[str]:
    from verify.__main__ import read_vkey

    keys = []
    for value in values:
        try:
            keys.append(read_vkey(value))
        except argparse.ArgumentTypeError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    return keys


class _Seconds(click.FloatRange):
    """A number of seconds in a range, refusing ``nan`` and the infinities.

    A skew of ``nan`` would make every time comparison false, turning the time checks off.
    """

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return super().convert(number, param, ctx)


def _witness_key(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[str]:
    from verify.__main__ import read_witness_vkey

    keys = []
    for value in values:
        try:
            keys.append(read_witness_vkey(value))
        except argparse.ArgumentTypeError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    return keys


@click.command("verify")
@click.argument("path", metavar="PATH|URL")  # a URL is not a path: no click.Path mangling
@click.option(
    "--trusted-key",
    "trusted",
    multiple=True,
    callback=_trusted_key,
    help="A trusted vkey or @FILE (repeatable).",
)
@click.option(
    "--checkpoint",
    "checkpoints",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A checkpoint published elsewhere (repeatable).",
)
@click.option(
    "--witness",
    "witnesses",
    multiple=True,
    callback=_witness_key,
    help="A trusted witness's cosigner vkey or @FILE (repeatable).",
)
@click.option(
    "--quorum",
    type=click.IntRange(min=1),
    default=None,
    help="Cosignatures required per checkpoint (default: every --witness).",
)
@click.option(
    "--witness-skew",
    "skew",
    type=_Seconds(0, 86400),
    default=300.0,
    show_default=True,
    help="Seconds witnesses' and events' clocks may differ.",
)
@click.option(
    "--tsa-cert",
    "tsa_cert",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="PEM root certificate(s) of the time-stamping authority.",
)
@click.option(
    "--log",
    "log_url",
    default=None,
    help="URL of the log published as tiles: the archive must be exactly it.",
)
@click.option(
    "--inspect-log",
    "inspect_logs",
    multiple=True,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Inspect AI's log (.eval) of an eval recorded in this ledger: cross-check it "
    "(repeatable; docs/inspect.md).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--jobs",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Processes (0: one per CPU this process may use; 1: this one alone): signatures "
    "and file hashes in workers, the archive checks and re-scoring beside the re-analysis.",
)
@click.option(
    "--annex",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A public archive's sealed annex (with --identity): verify in full.",
)
@click.option(
    "--identity",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The auditor's secret key file that opens the --annex.",
)
def verify_cmd(
    path: str,
    trusted: list[str],
    checkpoints: tuple[Path, ...],
    witnesses: list[str],
    quorum: int | None,
    skew: float,
    tsa_cert: Path | None,
    log_url: str | None,
    inspect_logs: tuple[Path, ...],
    as_json: bool,
    jobs: int,
    annex: Path | None,
    identity: Path | None,
) -> None:
    """Verify an exported archive, a study's ledger, a ledger file or a PostgreSQL store.

    Exit 0 only if no check fails. Uses the separate implementation in verify/ (which shares
    no code with the writer). A directory holding ledger/events.jsonl is verified as an archive
    (docs/archive-format.md §4: the ledger checks on ledger/events.jsonl plus manifest, export
    coverage, protocol, schedule, requests, preflight, outcomes, provenance, blinding,
    re-scoring and re-analysis; a reported model other than the requested one is a WARN); a
    study folder by its live ledger (the PostgreSQL store its ledger.store names, else its
    ledger.db); a file as a SQLite ledger; a postgresql://...?schema=NAME URL as the ledger in
    that schema, read in one read-only snapshot (no password in the URL: PGPASSWORD, ~/.pgpass
    or a service file, as for psql; docs/ledger-format.md §7). Without --trusted-key the
    keys are self-asserted: signatures then prove integrity, not authorship (a WARN).
    With --witness, every promised checkpoint (registration, each session's start and stop)
    must carry --quorum valid cosignatures from those witnesses, with times consistent within
    --witness-skew (docs/witness.md section 8); without it, a witnessed archive is checked
    against its own ledger/witnesses.json (a WARN: the owner chose those keys). With
    --tsa-cert, every RFC 3161 time stamp on the registration checkpoint must verify against
    that root (docs/witness.md section 9). With --log URL, the archive must be exactly the log
    published there as C2SP tlog-tiles: same size and root, every tile and entry bundle
    (docs/service.md section 6). A ledger holding an Inspect AI eval (the inspect extra,
    docs/inspect.md) gets the inspect-eval check; with --inspect-log, Inspect's own .eval log
    is cross-checked against it: every model output equal to the recorded response. A public
    archive (exported with --public, docs/privacy.md) verifies PARTIAL (exit 3): every check
    that needs withheld data is LIMITED, naming what it could not re-derive; with --annex and
    --identity the annex is decrypted, every withheld blob and file checked against its
    commitment and the whole archive verified.

    \b
    Example:
      ledger verify study.db --trusted-key @keys/example.org_owner.vkey \\
          --checkpoint registration.checkpoint --jobs 2
      ledger verify archive/ --checkpoint registration-checkpoint.txt
      ledger verify my-study/
      ledger verify 'postgresql://auditor@db.example.org/lab?schema=study1'
      ledger verify archive/ --witness @w1.vkey --witness @w2.vkey --quorum 1
      ledger verify archive/ --tsa-cert tsa-root.pem
      ledger verify my-ledger/ --inspect-log logs/run.eval
      ledger verify archive/ --log https://logs.example.org/my-study \\
          --trusted-key @owner.vkey
      ledger verify public/ --annex study.annex --identity irb-auditor.x25519
    """
    from verify import render_report, verify_path
    from verify.__main__ import read_tsa_cert

    try:
        roots = read_tsa_cert(str(tsa_cert)) if tsa_cert is not None else None
    except argparse.ArgumentTypeError as exc:
        raise click.BadParameter(str(exc), param_hint="--tsa-cert") from None
    report = verify_path(
        path,
        trusted_keys=trusted,
        checkpoints=checkpoints,
        jobs=jobs,
        witnesses=witnesses,
        quorum=quorum,
        skew=skew,
        tsa_roots=roots,
        annex=annex,
        identity=identity,
    )
    if log_url is not None:
        from verify._published import check_published_log

        report.checks.extend(check_published_log(path, log_url, trusted))
    if inspect_logs:
        from verify._inspect import cross_check_log

        db = Path(path) / "ledger.db" if Path(path).is_dir() else Path(path)
        report.checks.extend(cross_check_log(db, log) for log in inspect_logs)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        render_report(report)
    if not report.ok:
        sys.exit(1)
    if report.status == "partial":
        sys.exit(PARTIAL_EXIT)
