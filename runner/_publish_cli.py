"""The study's publishing commands: ``ledger tiles`` and ``ledger receipt`` (``docs/service.md``).

Registered as ``ledger`` subcommands through the ``prompt_ledger.commands`` entry points.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ledger.cliutil import Command

__all__ = ["receipt", "tiles"]


def _describe(result: Any) -> str:
    plan = result.plan
    blind = f"; blind: entries published up to seq {plan.entries_upto} only" if plan.blind else ""
    cosigned = f", cosigned by {', '.join(plan.cosigned_by)}" if plan.cosigned_by else ""
    return (
        f"published size {result.size}{cosigned}: {len(result.tiles_written)} new tile(s), "
        f"{len(result.blobs_written)} new blob(s), {result.entries_published} entries "
        f"public{blind}"
    )


@click.command(cls=Command)
@click.argument("study_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--follow", is_flag=True, help="Keep publishing as the log grows (Ctrl-C stops).")
@click.option(
    "--interval",
    type=click.FloatRange(0.1),
    default=2.0,
    show_default=True,
    help="Seconds between looks with --follow.",
)
def tiles(study_dir: Path, directory: Path, follow: bool, interval: float) -> None:
    """Publish the study's log into DIRECTORY as C2SP tlog-tiles.

    Writes checkpoint (the largest checkpoint cosigned by the study's witness quorum), the hash
    tiles, and the entry bundles and blobs that blinding allows (before unblinding: the
    lock-time prefix only). Files are written once, atomically; a directory holding another
    history is refused. Serve DIRECTORY with any static host or `ledger serve`. See
    docs/service.md.

    \b
    Example:
      ledger tiles my-study public/my-study --follow
    """
    from runner._publish import StudyPublisher

    publisher = StudyPublisher(study_dir, directory)
    if not follow:
        click.echo(_describe(publisher.publish_once()))
        return
    try:
        publisher.follow(interval, lambda r: click.echo(_describe(r)))
    except KeyboardInterrupt:
        click.echo("stopped", err=True)


@click.command(cls=Command)
@click.argument("study_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("trial")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Directory for the receipts.",
)
def receipt(study_dir: Path, trial: str, out_dir: Path) -> None:
    """Write a receipt (C2SP tlog-proof) for each event of TRIAL.

    Each file OUT/seq-N.tlog-proof carries the event's envelope and its inclusion proof in the
    largest witnessed checkpoint; anyone checks it offline with `ledger verify-receipt` and the
    owner's and witnesses' public keys. A receipt names its trial and so its arm: before
    unblinding, hand it only to whoever may know. See docs/service.md §4.

    \b
    Example:
      ledger receipt my-study 'A|s1|1' --out receipts
    """
    from ledger import write_files
    from runner._publish import trial_receipts

    found = trial_receipts(study_dir, trial)
    files = {out_dir / f"seq-{seq}.tlog-proof": text for seq, _, text in found}
    out_dir.mkdir(parents=True, exist_ok=True)
    write_files(files, what="receipt ")
    for (seq, kind, _), path in zip(found, files, strict=True):
        click.echo(f"wrote {path} ({kind}, seq {seq})")
