"""``ledger witness``: run a C2SP tlog-witness (init, add-log, serve, evidence).

Registered as the ``witness`` entry point of ``prompt_ledger.commands`` (docs/adr/0004). The
HTTP stack (Starlette, uvicorn) is imported only by ``serve``. See docs/witness.md.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import click

from ledger.cliutil import Group, dump_json

__all__ = ["witness"]


@click.group(cls=Group)
def witness() -> None:
    """Run a C2SP witness that cosigns the checkpoints of the logs it knows.

    A witness cosigns a log's checkpoint only if it is consistent with every checkpoint of
    that log it cosigned before, so a log cannot show two histories. See docs/witness.md.

    \b
    Example:
      ledger witness init w1 --name witness.example/w1
      ledger witness add-log w1 --origin example.org/study-1 --vkey @owner.vkey
      ledger witness serve w1 --port 8080
    """


@witness.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--name", required=True, help="The witness's key name, e.g. witness.example/w1.")
@click.option(
    "--algorithm",
    type=click.Choice(["ed25519", "ml-dsa-44"]),
    default="ed25519",
    show_default=True,
    help="Cosignature key type (tlog-cosignature).",
)
def init_cmd(directory: Path, name: str, algorithm: str) -> None:
    """Create a witness in DIRECTORY: its cosigning key and state database.

    Writes witness.key (private, mode 0600), witness.vkey (the cosigner vkey that clients
    configure: type 0x04 for Ed25519, 0x06 for ML-DSA-44) and state.db. Refuses a directory
    that already holds a witness.

    \b
    Example:
      ledger witness init w1 --name witness.example/w1
      ledger witness init w2 --name witness.example/w2 --algorithm ml-dsa-44
    """
    from ledger.witness import Witness

    with Witness.init(directory, name, algorithm=algorithm) as w:
        click.echo(f"created witness {name} in {directory}", err=True)
        click.echo(w.key.vkey)


@witness.command("add-log")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--origin", required=True, help="The log's checkpoint origin.")
@click.option(
    "--vkey",
    "vkeys",
    required=True,
    multiple=True,
    help="A key of the log (vkey, @FILE or a .vkey path; repeatable).",
)
def add_log(directory: Path, origin: str, vkeys: tuple[str, ...]) -> None:
    """Make the log ORIGIN known to the witness, trusting its checkpoint keys.

    Adding keys to a known log keeps its state and the keys trusted before.

    \b
    Example:
      ledger witness add-log w1 --origin example.org/study-1 \\
          --vkey @keys/example.org_owner.vkey
    """
    from ledger._keys import load_verifier
    from ledger.witness import Witness

    parsed = [load_verifier(v).vkey for v in vkeys]
    with Witness.open(directory) as w:
        w.add_log(origin, parsed)
        trusted = w.logs()[origin]
    click.echo(f"log {origin}: {len(trusted)} trusted key(s)")


@witness.command("serve")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    default=7380,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on (0: any free port).",
)
def serve_cmd(directory: Path, host: str, port: int) -> None:
    """Serve the tlog-witness add-checkpoint endpoint until interrupted.

    POST /add-checkpoint cosigns a checkpoint; GET /<sha256 of origin>/checkpoint returns the
    latest cosigned one. Refuses to start when the state database is missing but the key
    exists (it would cosign from zero). Prints 'witness NAME listening on URL' when ready.

    \b
    Example:
      ledger witness serve w1 --host 127.0.0.1 --port 8080
    """
    from ledger.witness_server import serve

    serve(directory, host, port)


@witness.command("evidence")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def evidence(directory: Path, as_json: bool) -> None:
    """Print every pair of signed, mutually inconsistent checkpoints of one log.

    Same size with different roots is a proven fork (exit status 1). A refused checkpoint
    whose consistency proof failed is printed as unproven. Exit status 0 when no fork is
    proven.

    \b
    Example:
      ledger witness evidence w1
    """
    from ledger.witness import Witness

    with Witness.open(directory) as w:
        forks = w.forks()
    proven = any(f.proven for f in forks)
    if as_json:
        dump_json(
            [
                {
                    "origin": f.origin,
                    "proven": f.proven,
                    "reason": f.reason,
                    "checkpoints": [
                        {
                            "source": c.source,
                            "size": c.size,
                            "root": base64.b64encode(c.root).decode(),
                            "note": c.note,
                        }
                        for c in (f.first, f.second)
                    ],
                }
                for f in forks
            ]
        )
    else:
        if not forks:
            click.echo("no inconsistent checkpoints")
        for f in forks:
            label = "FORK PROVEN" if f.proven else "unproven"
            click.echo(f"{label}: {f.origin}: {f.reason}")
            for c in (f.first, f.second):
                click.echo(f"  {c.source}:")
                for line in c.note.splitlines():
                    click.echo(f"    {line}")
    if proven:
        sys.exit(1)
