"""The ``ledger`` command: the core's low-level commands, composed with every package's own.

This module owns the commands of the signed event store (``keygen``, ``init``, ``append``,
``log``, ``show``, ``checkpoint``, ``proof``, ``key``) and the top-level ``ledger`` group. The
study's commands belong to the packages that implement them (``runner._cli``: new, arms, lock,
amend, schedule, estimate, run, status; ``analysis._cli``: score, unblind, analyze, report,
export, demo; ``verify.cli``: verify) and are registered as entry points in the group
``prompt_ledger.commands`` (see ``pyproject.toml``). The group loads a command's module only
when that command is asked for, so the core imports nothing above it and ``ledger --help``
starts fast. Errors meet one boundary (:class:`ledger.cliutil.Group`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ledger._errors import FormatError
from ledger._files import describe_os_error, describe_utf8_error, write_files
from ledger._roles import ROLES
from ledger.cliutil import HELP_WIDTH, Context, Group, console, dump_json, table

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = ["COMMAND_ENTRY_POINTS", "HELP_WIDTH", "key_file_stem", "main"]

#: The entry-point group in which packages register their ``ledger`` subcommands.
COMMAND_ENTRY_POINTS = "prompt_ledger.commands"


def key_file_stem(name: str) -> str:
    """File name stem for a key name (``/`` and ``:`` become ``_``)."""
    return name.replace("/", "_").replace(":", "_")


class _Main(Group):
    """The top-level group: the core's commands plus those registered as entry points."""

    group_class = Group  # subgroups (``key``) list only their own commands

    @cached_property
    def _registered(self) -> dict[str, EntryPoint]:
        from importlib.metadata import entry_points

        return {ep.name: ep for ep in entry_points(group=COMMAND_ENTRY_POINTS)}

    def list_commands(self, ctx: click.Context) -> list[str]:
        """The core's commands and every registered one, sorted."""
        return sorted(set(self.commands) | set(self._registered))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command ``cmd_name``, importing its package's command module on first use."""
        command = self.commands.get(cmd_name)
        if command is not None:
            return command
        entry = self._registered.get(cmd_name)
        if entry is None:
            return None
        try:
            loaded = entry.load()
        except ImportError as exc:
            raise click.ClickException(
                f"command {cmd_name!r} ({entry.value}) cannot be loaded: {exc}; reinstall "
                "prompt-ledger (pip install -e .)"
            ) from exc
        if not isinstance(loaded, click.Command):
            raise click.ClickException(
                f"entry point {cmd_name} = {entry.value} is not a click command"
            )
        if loaded.context_class is click.Context:
            loaded.context_class = Context
        self.add_command(loaded, cmd_name)
        return loaded


class _LedgerLocation(click.ParamType[Any]):
    """A ledger: a SQLite file, a study folder, a ``postgresql://`` or ``http(s)://`` URL."""

    name = "LEDGER"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """A URL stays a string (click.Path would fold its '//'); anything else is a Path.

        A study folder is the ledger its ``ledger.store`` or ``ledger.db`` names (a study
        behind ``ledger serve`` included).
        """
        from ledger._copy import LEDGER_FILE, STORE_FILE, study_ledger
        from ledger._errors import LedgerError

        if isinstance(value, str) and "://" in value:
            return value
        path = Path(value)
        if path.is_dir() and any((path / f).is_file() for f in (STORE_FILE, LEDGER_FILE)):
            try:
                return study_ledger(path)
            except LedgerError as exc:
                self.fail(str(exc), param, ctx)
        if path.is_dir():
            self.fail(
                f"{path} is a directory; give the ledger file (a study's is STUDY/ledger.db),"
                " a study folder, or a postgresql:// or http(s):// URL",
                param,
                ctx,
            )
        return path


_LEDGER = _LedgerLocation()


def _read_body(value: str) -> dict[str, Any]:
    """Parse ``--body``: inline JSON, ``@FILE``, or ``-`` for standard input."""
    source = "--body"
    text = value
    if value == "-":
        text = sys.stdin.read()
        source = "--body (stdin)"
    elif value.startswith("@"):
        path = Path(value[1:])
        source = f"--body file {path}"
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise FormatError(f"{source}: not found") from exc
        except OSError as exc:
            raise FormatError(f"{source}: unreadable ({describe_os_error(exc)})") from exc
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FormatError(f"{source}: {describe_utf8_error(data, exc)}") from exc
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(
            f"{source}: not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})"
        ) from exc
    if not isinstance(body, dict):
        raise FormatError(f"{source}: must be a JSON object, got {type(body).__name__}")
    return body


def _read_blobs(specs: Sequence[str]) -> dict[str, bytes]:
    blobs: dict[str, bytes] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep or not name or not file:
            raise FormatError(f"--blob {spec!r}: expected NAME=FILE")
        try:
            blobs[name] = Path(file).read_bytes()
        except FileNotFoundError as exc:
            raise FormatError(f"--blob {name}: file {file} not found") from exc
        except OSError as exc:
            raise FormatError(f"--blob {name}: cannot read {file} ({exc.strerror})") from exc
    return blobs


@click.group(
    cls=_Main,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": HELP_WIDTH},
)
@click.version_option(package_name="prompt-ledger")
def main() -> None:
    """PROMPT Ledger: provable randomized prompt experiments.

    Every protocol artifact, trial, score and result is an event in an append-only, hash-chained,
    Ed25519-signed ledger with RFC 6962 Merkle checkpoints. See docs/ledger-format.md.

    \b
    Example:
      ledger keygen example.org/owner --out keys
      ledger init study.db --origin example.org/study-1 \\
          --key keys/example.org_owner.key
      ledger verify study.db
    """


@main.command()
@click.argument("name")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Key file directory (default: $PROMPT_LEDGER_HOME/keys, else ~/.prompt-ledger/keys).",
)
def keygen(name: str, out_dir: Path | None) -> None:
    """Create an Ed25519 key NAME and print its vkey.

    Writes NAME.key (private, mode 0600, never overwritten) and NAME.vkey (public) into the key
    directory; '/' and ':' in NAME become '_' in the file names. Key names are C2SP names:
    no spaces and no '+'; schema-less URLs such as example.org/owner are recommended.

    \b
    Example:
      ledger keygen example.org/owner --out keys
    """
    from ledger._keys import SigningKey, user_home

    directory = out_dir or user_home() / "keys"
    key = SigningKey.generate(name)
    key_path = key.save(directory / f"{key_file_stem(name)}.key", vkey=True)
    vkey_path = key_path.with_suffix(".vkey")
    click.echo(f"wrote {key_path} (private, keep it secret) and {vkey_path}", err=True)
    click.echo(key.vkey)


@main.command()
@click.argument("path", type=_LEDGER)
@click.option("--origin", required=True, help="Checkpoint origin, e.g. example.org/study-1.")
@click.option("--key", "key_file", required=True, help="Owner's private key file.")
def init(path: Path, origin: str, key_file: str) -> None:
    """Create a new ledger at PATH owned by the key in --key.

    The genesis event registers the key as the owner; the file is never overwritten.

    \b
    Example:
      ledger init study.db --origin example.org/study-1 \\
          --key keys/example.org_owner.key
    """
    from ledger._keys import SigningKey
    from ledger._store import Ledger

    key = SigningKey.load(key_file)
    with Ledger.create(path, origin=origin, key=key) as log:
        event = log.get(0)
    click.echo(f"created {path}: origin {origin}, owner {key.actor}")
    click.echo(f"genesis leaf hash {event.leaf_hash.hex()}")


@main.command()
@click.argument("path", type=_LEDGER)
@click.argument("kind")
@click.option("--body", "body_arg", required=True, help="JSON object, @FILE, or - for stdin.")
@click.option("--blob", "blob_args", multiple=True, help="Attach a file as blob NAME=FILE.")
@click.option("--key", "key_file", required=True, help="Private key file of a registered key.")
def append(path: Path, kind: str, body_arg: str, blob_args: tuple[str, ...], key_file: str) -> None:
    """Append one event of KIND to the ledger at PATH.

    Everything is read and checked before the ledger is touched: a bad body, a missing blob file
    or a wrong key appends nothing.

    \b
    Example:
      ledger append study.db note.added --body '{"text": "pilot run"}' \\
          --blob data=pilot.csv --key keys/example.org_owner.key
    """
    from ledger._keys import SigningKey
    from ledger._store import Ledger

    body = _read_body(body_arg)
    blobs = _read_blobs(blob_args)
    key = SigningKey.load(key_file)
    with Ledger.open(path) as log:
        event = log.append(kind, body, key=key, blobs=blobs)
    click.echo(f"appended seq {event.seq} ({event.kind}) leaf {event.leaf_hash.hex()}")


@main.command("log")
@click.argument("path", type=_LEDGER)
@click.option("--kind", default=None, help="Only events of this kind.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def log_cmd(path: Path, kind: str | None, as_json: bool) -> None:
    """List the events of the ledger at PATH.

    \b
    Example:
      ledger log study.db --kind key.added
    """
    from ledger._store import Ledger

    with Ledger.open(path, readonly=True) as log:
        if as_json:
            for event in log.events(kind):
                click.echo(json.dumps(event.to_json(), ensure_ascii=False))
            return
        grid = table("seq", "time", "kind", "actor", "blobs", "leaf hash")
        for event in log.events(kind):
            grid.add_row(
                str(event.seq),
                event.time,
                event.kind,
                event.actor,
                str(len(event.blobs)),
                event.leaf_hash.hex()[:16],
            )
        console().print(grid)


@main.command()
@click.argument("path", type=_LEDGER)
@click.argument("seq", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(path: Path, seq: int, as_json: bool) -> None:
    """Show event SEQ of the ledger at PATH: envelope, signature, leaf hash and blobs.

    \b
    Example:
      ledger show study.db 0
    """
    from ledger._store import Ledger

    with Ledger.open(path, readonly=True) as log:
        event = log.get(seq)
        sizes = {name: len(log.stored_blob(h)) for name, h in event.blobs.items()}
    data = event.to_json()
    data["blob_sizes"] = sizes
    if as_json:
        dump_json(data)
        return
    out = console()
    out.print(f"[bold]seq {event.seq}[/] {event.kind} by {event.actor} at {event.time}")
    out.print(json.dumps(data["envelope"], indent=2, ensure_ascii=False), markup=False)
    out.print(f"leaf hash  {event.leaf_hash.hex()}")
    out.print(f"signature  {data['signature']}")
    for name, digest in event.blobs.items():
        out.print(f"blob {name}: {digest} ({sizes[name]} bytes)")


@main.command()
@click.argument("path", type=_LEDGER)
@click.option(
    "--key", "key_files", required=True, multiple=True, help="Signing key file (repeatable)."
)
@click.option(
    "--out",
    "out_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the signed note to this file.",
)
def checkpoint(path: Path, key_files: tuple[str, ...], out_file: Path | None) -> None:
    """Sign a checkpoint of the ledger at PATH and print the signed note.

    The note is a C2SP tlog-checkpoint (origin, size, root) to publish, for example in a
    preregistration; `ledger verify --checkpoint FILE` later proves the log extends it.

    \b
    Example:
      ledger checkpoint study.db --key keys/example.org_owner.key \\
          --out registration.checkpoint
    """
    from ledger._keys import SigningKey
    from ledger._store import Ledger

    keys = [SigningKey.load(k) for k in key_files]
    with Ledger.open(path) as log, log.transaction():  # no --out file, no stored checkpoint
        note = log.sign_checkpoint(keys)
        if out_file is not None:
            write_files({out_file: note}, what="--out ")
    click.echo(note, nl=False)


@main.command()
@click.argument("path", type=_LEDGER)
@click.argument("proof_type", type=click.Choice(["inclusion", "consistency"]))
@click.argument("numbers", nargs=-1, type=int, required=True)
@click.option("--size", type=int, default=None, help="Tree size for an inclusion proof.")
def proof(path: Path, proof_type: str, numbers: tuple[int, ...], size: int | None) -> None:
    """Print an RFC 9162 proof as JSON, checked before it is printed.

    `inclusion SEQ [--size N]` proves event SEQ is in the tree of N events (default: all).
    `consistency OLD NEW` proves the tree of NEW events extends the tree of OLD events.

    \b
    Example:
      ledger proof study.db inclusion 3 --size 10
      ledger proof study.db consistency 5 10
    """
    from ledger._store import Ledger

    with Ledger.open(path, readonly=True) as log:
        if proof_type == "inclusion":
            if len(numbers) != 1:
                raise click.UsageError("inclusion takes one SEQ")
            result: Any = log.inclusion_proof(numbers[0], size)
        else:
            if len(numbers) != 2 or size is not None:
                raise click.UsageError("consistency takes OLD NEW (and no --size)")
            result = log.consistency_proof(numbers[0], numbers[1])
    if not result.verify():
        raise click.ClickException("the proof the ledger produced does not verify")
    dump_json(result.to_json())


@main.group()
def store() -> None:
    """Move a ledger between its engines (SQLite file, PostgreSQL schema): docs/storage.md.

    \b
    Example:
      ledger store copy my-study 'postgresql://ledger@db/lab?schema=my_study'
    """


@store.command("copy")
@click.argument("src")
@click.argument("dst")
def store_copy(src: str, dst: str) -> None:
    """Copy the ledger at SRC to a new ledger at DST and check that they agree.

    SRC is a ledger file, a study folder (its ledger.db or ledger.store) or a PostgreSQL URL
    (postgresql://[user@]host[:port]/db?schema=NAME), or a study behind `ledger serve`
    (http(s)://HOST/STUDY, read with a key the study registered); DST a new file or a
    PostgreSQL URL whose schema does not exist yet. Every row is copied as stored (nothing
    is signed again); the copy is kept only when its size, every leaf, its root and every
    checkpoint's root, its blobs and its keys equal the source's. The password comes from
    PGPASSWORD, ~/.pgpass or a service file, never from the URL.

    \b
    Example:
      ledger store copy my-study 'postgresql://ledger@db/lab?schema=my_study'
      echo 'postgresql://ledger@db/lab?schema=my_study' > my-study/ledger.store
      ledger store copy 'postgresql://ledger@db/lab?schema=my_study' backup.db
      ledger store copy https://ledger.example.org/my-study backup.db
    """
    from ledger._copy import copy_ledger, resolve

    result = copy_ledger(resolve(src), resolve(dst))
    click.echo(
        f"copied {result.events} events, {result.blobs} blobs and {result.checkpoints} "
        f"checkpoint(s) from {result.source} to {result.target}; root {result.root} agrees"
    )


@main.group()
def key() -> None:
    """Register, revoke and list the keys of a ledger (owner only for changes).

    \b
    Example:
      ledger key add study.db @keys/runner.vkey --role runner \\
          --key keys/example.org_owner.key
    """


@key.command("add")
@click.argument("path", type=_LEDGER)
@click.argument("vkey")
@click.option("--role", type=click.Choice(ROLES), required=True, help="The key's role.")
@click.option("--key", "key_file", required=True, help="An owner's private key file.")
def key_add(path: Path, vkey: str, role: str, key_file: str) -> None:
    """Register VKEY (inline or @FILE) with a role, signed by an owner key.

    \b
    Example:
      ledger key add study.db @keys/runner.vkey --role runner \\
          --key keys/example.org_owner.key
    """
    from ledger._keys import SigningKey, load_verifier
    from ledger._store import Ledger

    verifier = load_verifier(vkey)
    owner = SigningKey.load(key_file)
    with Ledger.open(path) as log:
        event = log.add_key(verifier, role, key=owner)
    click.echo(f"seq {event.seq}: added {verifier.actor} as {role}")


@key.command("revoke")
@click.argument("path", type=_LEDGER)
@click.argument("actor")
@click.option("--reason", default="", help="Why the key is revoked.")
@click.option("--key", "key_file", required=True, help="An owner's private key file.")
def key_revoke(path: Path, actor: str, reason: str, key_file: str) -> None:
    """Revoke the key ACTOR (name+keyid); it can append nothing afterwards.

    \b
    Example:
      ledger key revoke study.db runner+1a2b3c4d --reason "laptop lost" \\
          --key keys/owner.key
    """
    from ledger._keys import SigningKey
    from ledger._store import Ledger

    owner = SigningKey.load(key_file)
    with Ledger.open(path) as log:
        event = log.revoke_key(actor, key=owner, reason=reason)
    click.echo(f"seq {event.seq}: revoked {actor}")


@key.command("list")
@click.argument("path", type=_LEDGER)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def key_list(path: Path, as_json: bool) -> None:
    """List every key ever registered in the ledger at PATH.

    \b
    Example:
      ledger key list study.db
    """
    from ledger._store import Ledger

    with Ledger.open(path, readonly=True) as log:
        records = log.keys()
    if as_json:
        dump_json([r.__dict__ for r in records])
        return
    grid = table("actor", "role", "added at", "revoked at", "vkey")
    for r in records:
        revoked = "" if r.revoked_seq is None else str(r.revoked_seq)
        grid.add_row(r.actor, r.role, str(r.added_seq), revoked, r.vkey)
    console().print(grid)
