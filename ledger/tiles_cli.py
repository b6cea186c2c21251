"""The read path's commands: ``ledger serve``, ``ledger monitor``, ``ledger verify-receipt``.

Registered through the ``prompt_ledger.commands`` entry point (``docs/service.md``). They work on
published files and receipts only, never on a ledger: the study's own commands (``ledger tiles``,
``ledger receipt``) are in :mod:`runner._publish_cli`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ledger.cliutil import Command

__all__ = ["monitor", "serve_cmd", "verify_receipt_cmd"]


def _trusted(values: tuple[str, ...]) -> list[Any]:
    from ledger._keys import load_verifier

    return [load_verifier(v) for v in values]


def _witnesses(values: tuple[str, ...]) -> list[str]:
    from ledger.witness import CosignerVerifier

    out = []
    for value in values:
        text = Path(value[1:]).read_text("utf-8") if value.startswith("@") else value
        out.append(CosignerVerifier.parse(text.strip()).vkey)
    return out


def _quorum(quorum: int | None, witnesses: list[str]) -> int | None:
    if quorum is not None and not 0 < quorum <= len(witnesses):
        raise click.BadParameter(
            f"--quorum {quorum} must be between 1 and the number of --witness keys "
            f"({len(witnesses)})",
            param_hint="--quorum",
        )
    return quorum


def _trust_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--trusted-key``, ``--witness`` and ``--quorum``: whom a monitor or a receipt trusts."""
    for option in reversed(
        (
            click.option(
                "--trusted-key",
                "trusted_keys",
                multiple=True,
                required=True,
                help="The log's vkey (inline, @FILE or a .vkey path); repeatable.",
            ),
            click.option(
                "--witness",
                "witness_keys",
                multiple=True,
                help="A trusted witness's cosigner vkey (inline or @FILE); repeatable.",
            ),
            click.option(
                "--quorum",
                type=int,
                default=None,
                help="Cosignatures required (default: every --witness).",
            ),
        )
    ):
        command = option(command)
    return command


@click.command("serve", cls=Command)
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--store",
    default=None,
    metavar="URL|DIR",
    help="Serve the append API over this store: a PostgreSQL database (one schema per study) "
    "or a folder of SQLite ledgers (<study>.db).",
)
@click.option(
    "--allow-create",
    is_flag=True,
    help="Let a client create a study in the store (ledger new --store http://.../STUDY).",
)
@click.option(
    "--max-request-bytes",
    type=click.IntRange(1024),
    default=32 * 1024 * 1024,
    show_default=True,
    help="Refuse (413) a request body larger than this.",
)
@click.option(
    "--connections",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="Open ledger connections per study in this process.",
)
@click.option(
    "--turn-seconds",
    type=click.FloatRange(0, 60),
    default=2.0,
    show_default=True,
    help="How long a writer that lost a race may take to re-sign while the service holds the "
    "study's write lock for it (0: no turns, a plain 409).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=7381,
    show_default=True,
    help="Port (0: any free port).",
)
def serve_cmd(
    directory: Path | None,
    store: str | None,
    allow_create: bool,
    max_request_bytes: int,
    connections: int,
    turn_seconds: float,
    host: str,
    port: int,
) -> None:
    """Serve published logs (C2SP tlog-tiles) from DIRECTORY, and the append API over --store.

    DIRECTORY is one log written by `ledger tiles` (served at /) or a directory of them (each
    served at /NAME/). Only files are read, never a ledger: checkpoint (no-cache), tile/... and
    blob/<sha256> (immutable). A malformed path gets 400 with the reason.

    With --store, writers append to the studies of that store at /STUDY/api/v1/: they submit
    envelopes they signed, and the signature and the key's registered role are the only
    authorisation. Any number of service processes may share one PostgreSQL store. A study
    folder whose ledger.store names http(s)://HOST:PORT/STUDY works through it with every
    command. See docs/service.md.

    \b
    Example:
      ledger tiles my-study public/my-study --follow &
      ledger serve public --port 7381
      ledger serve --store postgresql://ledger@db/studies --port 7382
    """
    from ledger._service import AppendService, StoreRoot
    from ledger.tiles_server import serve

    if directory is None and store is None:
        raise click.UsageError("give a tiles DIRECTORY, a --store, or both")
    service = None
    if store is not None:
        service = AppendService(
            StoreRoot.parse(store),
            allow_create=allow_create,
            connections=connections,
            max_request_bytes=max_request_bytes,
            turn_seconds=turn_seconds,
        )
    serve(directory, host, port, service)


@click.command("monitor", cls=Command)
@click.argument("url")
@_trust_options
@click.option(
    "--state",
    "state_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="State file (default: none: every run starts from size 0).",
)
@click.option("--follow", is_flag=True, help="Keep checking every --interval seconds.")
@click.option(
    "--interval",
    type=click.FloatRange(0.1),
    default=30.0,
    show_default=True,
    help="Seconds between checks with --follow.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(0.1),
    default=30.0,
    show_default=True,
    help="HTTP timeout in seconds.",
)
def monitor(
    url: str,
    trusted_keys: tuple[str, ...],
    witness_keys: tuple[str, ...],
    quorum: int | None,
    state_file: Path | None,
    follow: bool,
    interval: float,
    timeout: float,
) -> None:
    """Follow the log published at URL: catch a fork, a rollback, a bad tile, a missing witness.

    Each check fetches URL/checkpoint, verifies the log's signature, compares it with the last
    checkpoint seen (--state), re-derives the tree from the tiles, checks that it extends the
    tree seen before, checks the published entry bundles and hash chain, and counts the
    witnesses' cosignatures. Exit status 1 with both checkpoints named on a fork or rollback;
    the state is written only after every check passed. See docs/service.md §5.

    \b
    Example:
      ledger monitor https://logs.example.org/my-study \\
          --trusted-key @keys/example.org_owner.vkey --witness @w1.vkey \\
          --state monitor.json --follow
    """
    from ledger._monitor import MonitorState, check_log, http_fetcher

    trusted = _trusted(trusted_keys)
    witnesses = _witnesses(witness_keys)
    need = _quorum(quorum, witnesses)
    fetch, close = http_fetcher(url, timeout)
    try:
        while True:
            state = MonitorState.load(state_file) if state_file is not None else None
            new, report = check_log(fetch, url, trusted, state, witnesses=witnesses, quorum=need)
            if state_file is not None:
                new.save(state_file)
            grew = (
                f"{report.old_size} -> {report.size}"
                if report.size != report.old_size
                else f"{report.size} (unchanged)"
            )
            witnessed = (
                f"cosigned by {', '.join(report.cosigned_by)}"
                if report.witnesses_checked
                else "witnesses not checked (no --witness)"
            )
            click.echo(
                f"OK {report.origin}: size {grew}; {report.tiles_fetched} tiles and "
                f"{report.entries_checked} entries checked, {report.bundles_withheld} entry "
                f"bundle(s) not published; {witnessed}"
            )
            if not follow:
                return
            time.sleep(interval)
    finally:
        close()


@click.command("verify-receipt", cls=Command)
@click.argument(
    "receipts",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
)
@_trust_options
def verify_receipt_cmd(
    receipts: tuple[Path, ...],
    trusted_keys: tuple[str, ...],
    witness_keys: tuple[str, ...],
    quorum: int | None,
) -> None:
    """Check receipts (C2SP tlog-proof files from `ledger receipt`) offline.

    Each receipt must carry an envelope whose leaf hash is proven at its index in a checkpoint
    signed by a --trusted-key and cosigned by the quorum of --witness keys. Exit status 1 when
    any receipt fails. See docs/service.md §4.

    \b
    Example:
      ledger verify-receipt receipts/*.tlog-proof \\
          --trusted-key @keys/example.org_owner.vkey --witness @w1.vkey
    """
    from ledger._receipt import verify_receipt

    trusted = _trusted(trusted_keys)
    witnesses = _witnesses(witness_keys)
    need = _quorum(quorum, witnesses)
    failed = 0
    for path in receipts:
        check = verify_receipt(path.read_bytes(), trusted, witnesses, need, what=str(path))
        if check:
            trial = check.envelope.get("body", {})
            trial_id = trial.get("trial", "") if isinstance(trial, dict) else ""
            click.echo(
                f"PASS {path}: seq {check.index} {check.kind} {trial_id} in "
                f"{check.origin} at size {check.size}, signed by "
                f"{', '.join(check.signed_by)}, cosigned by "
                f"{', '.join(check.cosigned_by) or 'no witness'}"
            )
        else:
            failed += 1
            click.echo(f"FAIL {path}: " + "; ".join(check.problems))
    if failed:
        raise click.ClickException(f"{failed} of {len(receipts)} receipt(s) failed")
