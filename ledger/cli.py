"""The ``ledger`` command line: a thin skin over the library.

Each command parses its options, makes one library call and renders the result. Library errors
(:class:`ledger.LedgerError`, :class:`verify.VerificationError`) are caught once, in
:class:`_Group`, and printed as a one-line message with exit status 1.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ledger._errors import FormatError, KeyFileError, LedgerError
from ledger._keys import SigningKey, load_verifier, user_home
from ledger._roles import ROLES
from ledger._store import Ledger
from runner.spec import SpecError
from verify import VerificationError


def key_file_stem(name: str) -> str:
    """File name stem for a key name (``/`` and ``:`` become ``_``)."""
    return name.replace("/", "_").replace(":", "_")


# Help is wrapped at most this wide: click's default, so `--help` in any terminal of 80 columns
# or more prints exactly what scripts/cli_reference.py puts in the README.
HELP_WIDTH = 80
_NO_BREAK_HYPHEN = "\u2011"


class _HelpFormatter(click.HelpFormatter):
    """Click's formatter, except that lines never break at a hyphen.

    Paths such as ``~/.prompt-ledger/keys`` and options such as ``--trusted-key`` stay whole:
    hyphens are swapped for a non-breaking one (same width) while wrapping and back on output.
    """

    def write(self, string: str) -> None:
        """Append ``string`` to the buffer with the ordinary hyphens restored."""
        super().write(string.replace(_NO_BREAK_HYPHEN, "-"))

    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        """Write the usage line, wrapping only at spaces."""
        super().write_usage(prog, args.replace("-", _NO_BREAK_HYPHEN), prefix)

    def write_text(self, text: str) -> None:
        """Write a paragraph, wrapping only at spaces."""
        super().write_text(text.replace("-", _NO_BREAK_HYPHEN))

    def write_dl(
        self, rows: Iterable[tuple[str, str]], col_max: int = 30, col_spacing: int = 2
    ) -> None:
        """Write a definition list (options, commands), wrapping only at spaces."""
        protected = [(a, b.replace("-", _NO_BREAK_HYPHEN)) for a, b in rows]
        super().write_dl(protected, col_max, col_spacing)


class _Context(click.Context):
    """A click context whose help uses :class:`_HelpFormatter`."""

    formatter_class = _HelpFormatter


class _Command(click.Command):
    """A click command whose help uses :class:`_HelpFormatter`."""

    context_class = _Context


class _Group(click.Group):
    """A click group that turns library errors into one-line messages."""

    context_class = _Context
    command_class = _Command
    group_class = type

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the subcommands with their whole first sentence, wrapped rather than cut."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (LedgerError, VerificationError, SpecError) as exc:
            raise click.ClickException(str(exc)) from exc


def _out() -> Console:
    return Console(soft_wrap=True, highlight=False)


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
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise FormatError(f"{source}: not found") from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise FormatError(f"{source}: unreadable ({exc})") from exc
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


def _dump(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


@click.group(
    cls=_Group,
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
    directory = out_dir or user_home() / "keys"
    key = SigningKey.generate(name)
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise KeyFileError(f"key directory {directory}: {exc.strerror}") from exc
    stem = key_file_stem(name)
    key_path = key.save(directory / f"{stem}.key")
    vkey_path = directory / f"{stem}.vkey"
    vkey_path.write_text(key.vkey + "\n", encoding="utf-8")
    click.echo(f"wrote {key_path} (private, keep it secret) and {vkey_path}", err=True)
    click.echo(key.vkey)


@main.command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
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
    key = SigningKey.load(key_file)
    with Ledger.create(path, origin=origin, key=key) as log:
        event = log.get(0)
    click.echo(f"created {path}: origin {origin}, owner {key.actor}")
    click.echo(f"genesis leaf hash {event.leaf_hash.hex()}")


@main.command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
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
    body = _read_body(body_arg)
    blobs = _read_blobs(blob_args)
    key = SigningKey.load(key_file)
    with Ledger.open(path) as log:
        event = log.append(kind, body, key=key, blobs=blobs)
    click.echo(f"appended seq {event.seq} ({event.kind}) leaf {event.leaf_hash.hex()}")


@main.command("log")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--kind", default=None, help="Only events of this kind.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def log_cmd(path: Path, kind: str | None, as_json: bool) -> None:
    """List the events of the ledger at PATH.

    \b
    Example:
      ledger log study.db --kind key.added
    """
    with Ledger.open(path, readonly=True) as log:
        if as_json:
            for event in log.events(kind):
                click.echo(json.dumps(event.to_json(), ensure_ascii=False))
            return
        table = Table("seq", "time", "kind", "actor", "blobs", "leaf hash")
        for event in log.events(kind):
            table.add_row(
                str(event.seq), event.time, event.kind, event.actor,
                str(len(event.blobs)), event.leaf_hash.hex()[:16],
            )
        _out().print(table)


@main.command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("seq", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(path: Path, seq: int, as_json: bool) -> None:
    """Show event SEQ of the ledger at PATH: envelope, signature, leaf hash and blobs.

    \b
    Example:
      ledger show study.db 0
    """
    with Ledger.open(path, readonly=True) as log:
        event = log.get(seq)
        sizes = {name: len(log.blob(h)) for name, h in event.blobs.items()}
    data = event.to_json()
    data["blob_sizes"] = sizes
    if as_json:
        _dump(data)
        return
    console = _out()
    console.print(f"[bold]seq {event.seq}[/] {event.kind} by {event.actor} at {event.time}")
    console.print(json.dumps(data["envelope"], indent=2, ensure_ascii=False), markup=False)
    console.print(f"leaf hash  {event.leaf_hash.hex()}")
    console.print(f"signature  {data['signature']}")
    for name, digest in event.blobs.items():
        console.print(f"blob {name}: {digest} ({sizes[name]} bytes)")


@main.command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--key", "key_files", required=True, multiple=True, help="Signing key file (repeatable)."
)
@click.option(
    "--out", "out_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
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
    keys = [SigningKey.load(k) for k in key_files]
    with Ledger.open(path) as log:
        note = log.sign_checkpoint(keys)
    if out_file is not None:
        out_file.write_text(note, encoding="utf-8")
    click.echo(note, nl=False)


@main.command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
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
    _dump(result.to_json())


@main.command("verify")
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--trusted-key", "trusted", multiple=True, help="A trusted vkey or @FILE (repeatable)."
)
@click.option(
    "--checkpoint", "checkpoints", multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A checkpoint published elsewhere (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, help="Processes for signatures.")
def verify_cmd(
    path: Path,
    trusted: tuple[str, ...],
    checkpoints: tuple[Path, ...],
    as_json: bool,
    jobs: int,
) -> None:
    """Verify a ledger file or an exported archive at PATH; exit 0 only if no check fails.

    Uses the separate implementation in verify/ (which shares no code with the writer). A
    directory is verified as an archive (docs/archive-format.md §4: the ledger checks on
    ledger/events.jsonl plus manifest, export coverage, protocol, schedule, requests, outcomes,
    blinding, re-scoring and re-analysis); a file as a SQLite ledger. Without --trusted-key the
    keys are self-asserted: signatures then prove integrity, not authorship (a WARN).

    \b
    Example:
      ledger verify study.db --trusted-key @keys/example.org_owner.vkey \\
          --checkpoint registration.checkpoint --jobs 2
      ledger verify archive/ --checkpoint registration-checkpoint.txt
    """
    from verify import render_report, verify_path

    vkeys = [load_verifier(t).vkey for t in trusted]
    report = verify_path(path, trusted_keys=vkeys, checkpoints=checkpoints, jobs=jobs)
    if as_json:
        _dump(report.to_dict())
    else:
        render_report(report, console=_out())
    if not report.ok:
        sys.exit(1)


@main.group()
def key() -> None:
    """Register, revoke and list the keys of a ledger (owner only for changes).

    \b
    Example:
      ledger key add study.db @keys/runner.vkey --role runner \\
          --key keys/example.org_owner.key
    """


@key.command("add")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
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
    verifier = load_verifier(vkey)
    owner = SigningKey.load(key_file)
    with Ledger.open(path) as log:
        event = log.add_key(verifier, role, key=owner)
    click.echo(f"seq {event.seq}: added {verifier.actor} as {role}")


@key.command("revoke")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
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
    owner = SigningKey.load(key_file)
    with Ledger.open(path) as log:
        event = log.revoke_key(actor, key=owner, reason=reason)
    click.echo(f"seq {event.seq}: revoked {actor}")


@key.command("list")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def key_list(path: Path, as_json: bool) -> None:
    """List every key ever registered in the ledger at PATH.

    \b
    Example:
      ledger key list study.db
    """
    with Ledger.open(path, readonly=True) as log:
        records = log.keys()
    if as_json:
        _dump([r.__dict__ for r in records])
        return
    table = Table("actor", "role", "added at", "revoked at", "vkey")
    for r in records:
        revoked = "" if r.revoked_seq is None else str(r.revoked_seq)
        table.add_row(r.actor, r.role, str(r.added_seq), revoked, r.vkey)
    _out().print(table)


@main.command()
@click.argument(
    "directory", required=False, type=click.Path(file_okay=False, path_type=Path)
)
@click.option(
    "--replicates",
    type=click.IntRange(1, 1000),
    default=30,
    show_default=True,
    help="Replicates per arm and probe (the template's 30 give 1,050 trials).",
)
def demo(directory: Path | None, replicates: int) -> None:
    """Run the whole PROMPT workflow offline on the simulated model, then verify and tamper.

    Scaffolds the tumbling-E study in DIRECTORY (default ./prompt-ledger-demo, which must not
    exist or be empty), locks it, runs it on the simulated backend, scores blind, unblinds,
    analyses, reports, exports an archive, verifies it, and shows a one-byte change caught.

    \b
    Example:
      ledger demo /tmp/ledger-demo
      ledger demo /tmp/quick-demo --replicates 3
    """
    from analysis.demo import run_demo

    run_demo(directory or Path("prompt-ledger-demo"), _out(), replicates=replicates)


# ---------------------------------------------------------------------- study commands


def _study_key(root: Path, key_file: str | None) -> SigningKey:
    """The key given, else the owner key ``ledger new`` made for this study."""
    if key_file:
        return SigningKey.load(key_file)
    from runner.lock import study_owner_key

    return study_owner_key(root)


@main.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--template", default="prompt-tumbling-e", show_default=True, help="Study template.")
@click.option(
    "--id", "study_id", default=None, help="Study id (default: DIRECTORY's name, made valid)."
)
@click.option(
    "--origin", default=None, help="Checkpoint origin (default: prompt-ledger.local/ID)."
)
@click.option("--key", "key_file", default=None, help="Owner key file (default: create one).")
def new(
    directory: Path, template: str, study_id: str | None, origin: str | None, key_file: str | None
) -> None:
    """Scaffold a complete, lockable study in DIRECTORY and create its ledger.

    The study gets its own id (written to study.toml) and checkpoint origin, fixed in the
    ledger from now on. Without --key an owner key ID-owner.key (and its .vkey) is created in
    the user's key directory ($PROMPT_LEDGER_HOME/keys, else ~/.prompt-ledger/keys), never in
    the study folder; if that file exists already (another study with this id), pass another
    --id, or --key to reuse it deliberately.

    \b
    Example:
      ledger new my-study --template prompt-tumbling-e
      ledger new pilot --id tumbling-e-pilot --origin example.org/tumbling-e-pilot
    """
    from runner.new import new_study, study_id_from_directory

    key = SigningKey.load(key_file) if key_file else None
    chosen = study_id if study_id is not None else study_id_from_directory(directory)
    made = new_study(directory, template, key, study_id=chosen, origin=origin)
    click.echo(f"created study {made.root} with ledger {made.ledger} (owner {made.owner})")
    click.echo(f"study id: {made.study_id}   checkpoint origin: {made.origin}")
    if made.key_path is not None:
        vkey = made.key_path.with_suffix(".vkey")
        click.echo(f"owner key: {made.key_path} (verifier key, to publish: {vkey})")
    click.echo(f"next: edit {made.root / 'study.toml'}, then: ledger lock {made.root}")


@main.command()
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
def arms(study_dir: Path) -> None:
    """Show each arm's components, its SHA-256, and how every pair of arms differs.

    Matched-control declarations (differs_from) are checked and shown as held or FALSE.

    \b
    Example:
      ledger arms my-study
    """
    from runner.spec import check_matched_controls, component_differences, load_study

    study = load_study(study_dir)
    names = list(study.components)
    table = Table("component", *study.arms, title=f"arms of {study.id}")
    for name in names:
        table.add_row(name, *["x" if name in a.components else "" for a in study.arms.values()])
    table.add_row("role", *[a.role for a in study.arms.values()])
    table.add_row("sha256", *[study.arm_sha256(a)[:12] for a in study.arms])
    console = _out()
    console.print(table)
    for (a, b), (only_a, only_b) in component_differences(study).items():
        if a < b:
            console.print(f"{a} vs {b}: only in {a}: {only_a or '-'}; only in {b}: {only_b or '-'}")
    problems = check_matched_controls(study)
    for arm in study.arms.values():
        if arm.differs_from:
            bad = [p for p in problems if f"arms.{arm.id}." in p]
            state = "[red]FALSE[/]" if bad else "[green]holds[/]"
            base, by = arm.differs_from
            console.print(f"claim: {arm.id} differs from {base} by {list(by)}: {state}")
    for problem in problems:
        console.print(problem, markup=False)
    if problems:
        sys.exit(1)


@main.command()
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option("--limit", type=int, default=None, help="Show only the first N trials.")
def schedule(study_dir: Path, limit: int | None) -> None:
    """Print the locked trial order (after checking no locked file changed).

    \b
    Example:
      ledger schedule my-study --limit 10
    """
    from runner.lock import check_integrity
    from runner.schedule import order_key, schedule_sha256, trial_ids
    from runner.schedule import schedule as make_schedule

    study = check_integrity(study_dir)
    order = make_schedule(study.seed, trial_ids(study.arms, study.stimuli, study.replicates))
    for position, trial in enumerate(order[:limit] if limit else order, 1):
        click.echo(f"{position}\t{trial}\t{order_key(study.seed, trial)[:16]}")
    click.echo(f"{len(order)} trials, schedule sha256 {schedule_sha256(order)}", err=True)


@main.command()
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option("--key", "key_file", default=None, help="Owner key file (default: the study's).")
def lock(study_dir: Path, key_file: str | None) -> None:
    """Lock the study: every file, the protocol, and a registration checkpoint to publish.

    \b
    Example:
      ledger lock my-study
    """
    from runner.lock import lock_study

    result = lock_study(study_dir, _study_key(study_dir, key_file))
    click.echo(
        f"locked {result.artifacts} files; protocol.locked at seq {result.protocol_seq}; "
        f"{result.trials} trials; schedule sha256 {result.schedule_sha256}"
    )
    click.echo(result.checkpoint, nl=False)
    click.echo(
        f"registration checkpoint written to {result.checkpoint_path}: publish it now, for "
        "example in your preregistration, so the lock can be proven later"
    )


@main.command()
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option("--reason", required=True, help="Why the locked file changed (shown in the archive).")
@click.option("--key", "key_file", default=None, help="Owner key file (default: the study's).")
def amend(study_dir: Path, reason: str, key_file: str | None) -> None:
    """Record changed amendable files as a protocol.amended deviation.

    \b
    Example:
      ledger amend my-study --reason "fixed a typo in README.md"
    """
    from runner.lock import amend as record_amendment

    seq = record_amendment(study_dir, _study_key(study_dir, key_file), reason)
    click.echo(f"recorded protocol.amended at seq {seq}")


# ---------------------------------------------------------------------- running a study


def _parse_until(value: str | None) -> Any:
    """``--until``: an ISO 8601 time (local time if it has no offset) or a duration (90m, 8h)."""
    from datetime import UTC, datetime, timedelta

    if value is None:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if value[:-1].isdigit() and value[-1:] in units:
        return datetime.now(UTC) + timedelta(seconds=int(value[:-1]) * units[value[-1]])
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is neither an ISO time (2026-11-22T18:00) nor a duration (90m, 8h)",
            param_hint="--until",
        ) from None
    return (moment if moment.tzinfo else moment.astimezone()).astimezone(UTC)


class _RunDisplay:
    """A rich progress bar on a terminal; one summary line per 10% otherwise."""

    def __init__(self, console: Console, label: str, priced: bool) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = console
        self.priced = priced
        self.last_decile = -1
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[extra]}"),
            console=console,
            disable=not console.is_terminal,
        )
        self.task = self.progress.add_task(label, total=None, rate="", extra="")
        self.started: float | None = None
        self.first_final: int | None = None

    def __enter__(self) -> _RunDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def __call__(self, counters: Any, final: int, total: int) -> None:
        import time

        now = time.monotonic()
        if self.started is None:
            self.started, self.first_final = now, final
        done_here = final - (self.first_final or 0)
        elapsed = max(now - self.started, 1e-9)
        cost = f" cost ${counters.cost_usd:.4f}" if self.priced else ""
        extra = (
            f"errors {counters.failed} retries {counters.retries} "
            f"given up {counters.given_up} conc {counters.concurrency}{cost}"
        )
        self.progress.update(
            self.task,
            total=total,
            completed=final,
            rate=f"{done_here / elapsed:.1f}/s",
            extra=extra,
        )
        if not self.console.is_terminal and total:
            decile = final * 10 // total
            if decile != self.last_decile:
                self.last_decile = decile
                click.echo(f"{final}/{total} trials final; {extra}", err=True)


@main.command("run")
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--backend",
    type=click.Choice(
        ["anthropic", "anthropic-batch", "openai-compatible", "simulated", "replay"]
    ),
    default="anthropic",
    show_default=True,
    help="Who answers the trials.",
)
@click.option("--base-url", default=None, help="API root (default: $ANTHROPIC_BASE_URL).")
@click.option(
    "--replay-from", default=None, help="replay: an exported archive, a study or its ledger.db."
)
@click.option("--concurrency", type=click.IntRange(1, 1024), default=8, show_default=True)
@click.option("--max-trials", type=click.IntRange(min=1), default=None, help="Stop after N trials.")
@click.option("--until", default=None, help="Start no trial after this time or duration (8h).")
@click.option(
    "--budget-usd",
    type=click.FloatRange(min=0),
    default=None,
    help="Cost cap in USD for the whole study: what earlier sessions spent counts against it.",
)
@click.option("--max-attempts", type=click.IntRange(1, 100), default=5, show_default=True)
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0.01),
    default=10.0,
    show_default=True,
    help="anthropic-batch: seconds between batch status polls.",
)
@click.option("--key", "key_file", default=None, help="Signing key (default: the study owner's).")
def run_cmd(
    study_dir: Path,
    backend: str,
    base_url: str | None,
    replay_from: str | None,
    concurrency: int,
    max_trials: int | None,
    until: str | None,
    budget_usd: float | None,
    max_attempts: int,
    poll_interval: float,
    key_file: str | None,
) -> None:
    """Run the locked schedule's pending trials; safe to stop and resume at any moment.

    Each attempt is recorded before it is sent and its response or error right after;
    a restart continues where the last session stopped. Rate limits and server errors are
    retried with back-off; 400/401/403 stop the run with the server's message.
    --budget-usd caps the study's total spend across sessions, not each session's.

    \b
    Example:
      export ANTHROPIC_API_KEY=...
      ledger run my-study --concurrency 8 --budget-usd 25 --until 8h
      ledger run my-study --backend simulated
    """
    from runner.backends import BackendError, make_backend
    from runner.execute import RunOptions, run_study

    options = RunOptions(
        concurrency=concurrency,
        max_trials=max_trials,
        until=_parse_until(until),
        budget_usd=budget_usd,
        max_attempts=max_attempts,
        poll_interval=poll_interval,
    )
    console = Console(stderr=True, highlight=False)
    try:
        key = _study_key(study_dir, key_file)
        engine = make_backend(backend, base_url=base_url, replay_from=replay_from)
        label = f"{study_dir.name} [{engine.name}{' SIMULATED' if engine.simulated else ''}]"
        with _RunDisplay(console, label, engine.priced) as display:
            result = run_study(study_dir, key, engine, options, display)
    except BackendError as exc:
        raise click.ClickException(exc.message) from exc
    c = result.counters
    cost = f"${c.cost_usd:.4f}" if engine.priced else "n/a"
    click.echo(
        f"session seq {result.started_seq}-{result.stopped_seq}: {c.responded} responded, "
        f"{c.failed} failed attempts ({c.retries} retried), {c.given_up} given up, "
        f"{c.interrupted} interrupted; cost {cost}; {result.final} final, "
        f"{result.pending} pending; stopped: {result.reason}"
    )
    if engine.simulated:
        click.echo("backend: simulated (offline simulation, not a real model)")
    if result.fatal:
        raise click.ClickException(
            f"run stopped by a non-retryable error: {result.fatal}; nothing was lost, fix the "
            f"cause and run 'ledger run {study_dir}' again"
        )


@main.command()
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(study_dir: Path, as_json: bool) -> None:
    """Summarise where a study stands: per arm, trials responded, given up and pending.

    \b
    Example:
      ledger status my-study
    """
    from runner.lock import check_integrity, ledger_path
    from runner.state import arm_status, load_state

    study = check_integrity(study_dir)
    with Ledger.open(ledger_path(study_dir), readonly=True) as log:
        state = load_state(study, log)
        kinds: dict[str, int] = {}
        for event in log.events():
            kinds[event.kind] = kinds.get(event.kind, 0) + 1
    rows = arm_status(state)
    if as_json:
        _dump({"study": study.id, "sessions": state.sessions, "events": kinds,
               "arms": [r.__dict__ for r in rows]})
        return
    table = Table("arm", "trials", "responded", "given up", "pending", "awaiting", "attempts",
                  "cost USD", title=f"{study.id}: {state.sessions} run session(s)")
    for r in rows:
        table.add_row(r.arm, str(r.trials), str(r.responded), str(r.given_up), str(r.pending),
                      str(r.in_flight), str(r.attempts), f"{r.cost_usd:.4f}")
    total = len(state.order)
    pending = len(state.pending())
    console = _out()
    console.print(table)
    steps = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()) if not k.startswith("artifact"))
    console.print(f"{total - pending}/{total} trials final; events: {steps}")


@main.command()
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--backend",
    type=click.Choice(["anthropic", "openai-compatible", "simulated"]),
    default="anthropic",
    show_default=True,
    help="Whose token counter to use (anthropic: the count_tokens endpoint).",
)
@click.option("--base-url", default=None, help="API root (default: $ANTHROPIC_BASE_URL).")
def estimate(study_dir: Path, backend: str, base_url: str | None) -> None:
    """Predict the tokens and cost of the pending trials before anything is sent.

    Input tokens are counted once per (arm, stimulus) with the API's count_tokens endpoint
    (or estimated, and said so); output is bounded by max_tokens.

    \b
    Example:
      ledger estimate my-study
      ledger estimate my-study --backend simulated
    """
    from runner.backends import BackendError, make_backend
    from runner.estimate import estimate_study

    try:
        est = estimate_study(study_dir, make_backend(backend, base_url=base_url))
    except BackendError as exc:
        raise click.ClickException(exc.message) from exc

    def usd(value: float | None) -> str:
        return "n/a (no price for this backend/model)" if value is None else f"${value:,.2f}"

    click.echo(f"model {est.model}: {est.pending} of {est.trials} trials pending")
    click.echo(f"input tokens: {est.input_tokens:,} ({est.source})")
    typical = (
        f"{est.output_tokens_typical:,} (mean of recorded responses)"
        if est.output_tokens_typical is not None
        else "unknown until responses are recorded"
    )
    click.echo(f"output tokens: at most {est.output_tokens_max:,}; typical {typical}")
    click.echo(f"cost: input only {usd(est.cost_min_usd)}; typical {usd(est.cost_typical_usd)}; "
               f"at most {usd(est.cost_max_usd)}")
    if est.cost_max_usd is not None:
        click.echo(f"with --backend anthropic-batch: at most "
                   f"{usd(est.cost_max_usd * est.batch_factor)}; prices as of {est.prices_as_of}")


# ---------------------------------------------------------------------- scoring and analysis


@main.command()
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option("--key", "key_file", default=None, help="Signing key (default: the study owner's).")
def score(study_dir: Path, key_file: str | None) -> None:
    """Score every recorded response blind to its arm; seal once every trial is final.

    The scorer sees the response, the stimulus and an arm code, never the arm. When no trial
    is pending, scoring.sealed records the hash of all scores; nothing can be scored or run
    after it.

    \b
    Example:
      ledger score my-study
    """
    from analysis.scoring import score_study

    result = score_study(study_dir, _study_key(study_dir, key_file))
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(result.by_status.items())) or "none new"
    click.echo(f"scored {result.scored} responses ({statuses}); {result.already} scored before")
    if result.sealed_seq is not None:
        click.echo(f"scoring.sealed at seq {result.sealed_seq}; next: ledger unblind {study_dir}")
    else:
        click.echo(f"not sealed: {result.pending} trials have no final outcome yet "
                   f"(run 'ledger run {study_dir}' to finish them)")


@main.command()
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option("--key", "key_file", default=None, help="Signing key (default: the study owner's).")
def unblind(study_dir: Path, key_file: str | None) -> None:
    """Reveal the blinding secret after the seal; it must open the lock's commitment.

    \b
    Example:
      ledger unblind my-study
    """
    from analysis.scoring import unblind_study

    result = unblind_study(study_dir, _study_key(study_dir, key_file))
    codes = ", ".join(f"{arm}={code}" for arm, code in result.arm_codes.items())
    click.echo(f"blinding.revealed at seq {result.seq}; commitment {result.commitment} opens")
    click.echo(f"arm codes: {codes}")


@main.command()
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option("--key", "key_file", default=None, help="Signing key (default: the study owner's).")
def analyze(study_dir: Path, key_file: str | None) -> None:
    """Run the locked analysis plan and decision rules; record every number.

    \b
    Example:
      ledger analyze my-study
    """
    from analysis.analyze import analyze_study

    result = analyze_study(study_dir, _study_key(study_dir, key_file))
    console = _out()
    from analysis.analyze import verdict_caution

    table = Table("hypothesis", "test", "verdict", "decided by", title="pre-registered verdicts")
    for r in result.results:
        if r["hypothesis"]:
            why = r["error"] or _decided_by(r["decided_by"])
            verdict = escape(r["verdict"] or "-")
            caution = verdict_caution(r)
            if caution:
                verdict += f"\n[yellow]caution: {escape(caution)}[/]"
            table.add_row(r["hypothesis"], r["test"], verdict, escape(why))
    console.print(table)
    failed = [r["id"] for r in result.results if r["status"] == "failed"]
    click.echo(f"recorded {len(result.results)} analysis.result events from seq "
               f"{result.first_seq}" + (f"; could not compute: {', '.join(failed)}" if failed
                                        else ""))


def _decided_by(decided: Any) -> str:
    """A decision rule and its numbers, short and never cut inside a number."""
    if not isinstance(decided, dict):
        return json.dumps(decided, default=str)
    parts = [str(decided.get("rule", ""))] if decided.get("rule") else []
    for name, value in decided.items():
        if name == "rule":
            continue
        if isinstance(value, float):
            parts.append(f"{name} {value:.3g}")
        elif isinstance(value, (int, str, bool)) or value is None:
            parts.append(f"{name} {value}")
        else:
            parts.append(f"{name} {json.dumps(value, default=str)}")
    return "; ".join(parts)


@main.command("export")
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Replace a non-empty DIRECTORY.")
@click.option("--key", "key_file", default=None, help="Signing key (default: the study owner's).")
def export_cmd(study_dir: Path, directory: Path, force: bool, key_file: str | None) -> None:
    """Write the OSF-style archive of an analysed study into DIRECTORY.

    Records export.created (the hash of every archive file) and a final checkpoint first,
    so the archived ledger covers the whole archive. Written to a temporary directory and
    renamed into place.

    \b
    Example:
      ledger export my-study my-study-archive
      ledger verify my-study-archive
    """
    from analysis.export import export_study

    result = export_study(study_dir, directory, _study_key(study_dir, key_file), force=force)
    click.echo(
        f"exported {result.files} files ({result.bytes:,} bytes) to {result.directory}; "
        f"export.created at seq {result.export_seq}"
    )
    click.echo(f"check it: ledger verify {result.directory}  (or: cd {result.directory} && "
               "sha256sum -c MANIFEST.sha256)")


@main.command("report")
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option("--html", "html_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write the HTML report here (default: FIGURES/report.html).")
@click.option("--figures", "figures_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Figure directory (default: STUDY/report).")
def report_cmd(study_dir: Path, html_file: Path | None, figures_dir: Path | None) -> None:
    """Print the verdicts and write figures and a self-contained HTML report.

    Reads the analysis.result events (run 'ledger analyze' first), the locked protocol and
    its amendments; verifies the ledger; flags simulated data. Exploratory results are
    labelled "Exploratory (not pre-registered)" everywhere.

    \b
    Example:
      ledger report my-study
      ledger report my-study --html my-study.html --figures figures/
    """
    from analysis.report import build_report, render_terminal

    result = build_report(study_dir, figures_dir, html_path=html_file)
    render_terminal(result, _out())
    for figure in result.figures:
        click.echo(f"figure: {figure.path}")
    click.echo(f"report: {result.html_path}")
