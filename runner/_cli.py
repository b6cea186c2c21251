"""The study's commands: new, arms, lock, amend, schedule, estimate, run, status.

Registered as ``ledger`` subcommands through the ``prompt_ledger.commands`` entry points. Each
command parses its options, makes one library call and renders the result; heavy modules
(the SDKs, NumPy, Pillow) are imported inside the command that needs them.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ledger.cliutil import Command, FiniteFloat, console, dump_json, end_process, table
from runner._progress import RunDisplay

#: Every backend ``ledger run`` takes (runner._backends.BACKENDS; docs/backends.md), named here so
#: that the CLI starts without importing the backends.
BACKEND_NAMES = (
    "anthropic",
    "anthropic-batch",
    "anthropic-bedrock",
    "anthropic-vertex",
    "azure-openai",
    "openai",
    "gemini",
    "openai-compatible",
    "simulated",
    "replay",
)
ESTIMATE_BACKENDS = [b for b in BACKEND_NAMES if b not in ("anthropic-batch", "replay")]

if TYPE_CHECKING:
    from ledger import SigningKey

__all__ = [
    "amend",
    "arms",
    "estimate",
    "lock",
    "new",
    "run_cmd",
    "schedule",
    "status",
    "study_key",
]


def study_key(root: Path, key_file: str | None) -> SigningKey:
    """The key given, else the owner key ``ledger new`` made for this study."""
    from ledger import SigningKey

    if key_file:
        return SigningKey.load(key_file)
    from runner._lock import study_owner_key

    return study_owner_key(root)


@click.command(cls=Command)
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--template", default="prompt-tumbling-e", show_default=True, help="Study template.")
@click.option(
    "--id", "study_id", default=None, help="Study id (default: DIRECTORY's name, made valid)."
)
@click.option("--origin", default=None, help="Checkpoint origin (default: prompt-ledger.local/ID).")
@click.option("--key", "key_file", default=None, help="Owner key file (default: create one).")
@click.option(
    "--images",
    default=None,
    type=click.Path(path_type=Path),
    help="prompt-rotation: your own PNG/JPEG images and their orientation.csv "
    "(default: the template's synthetic crops).",
)
@click.option(
    "--store",
    default=None,
    metavar="URL",
    help="Keep the ledger on PostgreSQL: postgresql://[user@]host[:port]/db[?schema=NAME], "
    "or behind `ledger serve`: http(s)://HOST[:PORT]/STUDY (default: STUDY/ledger.db, SQLite).",
)
def new(
    directory: Path,
    template: str,
    study_id: str | None,
    origin: str | None,
    key_file: str | None,
    images: Path | None,
    store: str | None,
) -> None:
    """Scaffold a complete, lockable study in DIRECTORY and create its ledger.

    The study gets its own id (written to study.toml) and checkpoint origin, fixed in the
    ledger from now on. Without --key an owner key ID-owner.key (and its .vkey) is created in
    the user's key directory ($PROMPT_LEDGER_HOME/keys, else ~/.prompt-ledger/keys), never in
    the study folder; if that file exists already (another study with this id), pass another
    --id, or --key to reuse it deliberately.

    A template of several studies (medmcqa-prompt-sensitivity: mcq, cloze, evidence,
    question-only; one parser and one item template each) writes each into DIRECTORY/PART,
    with the id ID-PART, its own ledger and (without --key) its own owner key.

    green-shielding imports its 30 synthetic cases (HealthCareMagic format) with their
    reference sets and factor labels (a metadata sidecar) into data/items.jsonl, as
    `ledger items import --format healthcaremagic --metadata` would. green-shielding-pilot
    imports its 42 synthetic exam questions (MedXpertQA format) into data/items.jsonl, as
    `ledger items import --format medxpertqa` would.

    \b
    Example:
      ledger new my-study --template prompt-tumbling-e
      ledger new pilot --id tumbling-e-pilot --origin example.org/tumbling-e-pilot
      ledger new rotation --template prompt-rotation --images my-crops
      ledger new seed002 --template medmcqa-prompt-sensitivity
      ledger new green --template green-shielding
      ledger new pilot --template green-shielding-pilot
      ledger new shared --store postgresql://ledger@db.example.org/studies

    --store puts the ledger on PostgreSQL (docs/storage.md): in the URL's ?schema=, else in a
    schema named after the study id; the study folder then holds ledger.store (the URL, never
    a password: libpq reads PGPASSWORD, ~/.pgpass or a service file) instead of ledger.db.
    With an http(s)://HOST/STUDY URL of `ledger serve --allow-create`, the service creates the
    ledger in its store, and every command works through it (docs/service.md §9).
    """
    from ledger import SigningKey
    from runner._new import new_template, study_id_from_directory

    key = SigningKey.load(key_file) if key_file else None
    chosen = study_id if study_id is not None else study_id_from_directory(directory)
    for made in new_template(
        directory, template, key, study_id=chosen, origin=origin, images=images, store=store
    ):
        click.echo(f"created study {made.root} with ledger {made.ledger} (owner {made.owner})")
        click.echo(f"study id: {made.study_id}   checkpoint origin: {made.origin}")
        if made.key_path is not None:
            vkey = made.key_path.with_suffix(".vkey")
            click.echo(f"owner key: {made.key_path} (verifier key, to publish: {vkey})")
        click.echo(f"next: edit {made.root / 'study.toml'}, then: ledger lock {made.root}")


def _setting(value: object) -> str:
    """One arm setting as a table cell (``-`` when the arm does not set it)."""
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


@click.command(cls=Command)
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def arms(study_dir: Path, as_json: bool) -> None:
    """Show each arm's components, its hash, and how every pair of arms differs.

    The hash covers everything that shapes the arm's requests (components, system prompt,
    item template, few-shot set, factor levels, sampling, models, steps: docs/prompts.md
    §3.1); each pair lists the components only one has and the settings that differ.
    Matched-control declarations (differs_from) are checked and shown as held or FALSE.

    \b
    Example:
      ledger arms my-study
      ledger arms my-study --json
    """
    from runner._arm_identity import identity_differences, identity_sha256
    from runner._lock import arm_identities
    from runner.spec import (
        RESERVED_COMPONENTS,
        check_matched_controls,
        component_differences,
        load_study,
    )

    study = load_study(study_dir)
    problems = check_matched_controls(study)
    differences = component_differences(study)
    identities = arm_identities(study)
    hashes = {arm: identity_sha256(obj) for arm, obj in identities.items()}
    claims = []
    for arm in study.arms.values():
        if arm.differs_from:
            base, by = arm.differs_from
            holds = not [p for p in problems if f"arms.{arm.id}." in p]
            said: dict[str, Any] = dict(arm.differs) if arm.differs else {"by": list(by)}
            claims.append({"arm": arm.id, "differs_from": base, **said, "holds": holds})
    if as_json:
        dump_json(
            {
                "study": study.id,
                "arms": [
                    {
                        "id": a.id,
                        "role": a.role,
                        "components": list(a.components),
                        "sha256": hashes[a.id],
                        **a.protocol_record(),
                    }
                    for a in study.arms.values()
                ],
                "differences": [
                    {
                        "arm": a,
                        "other": b,
                        "only_in_arm": list(only_a),
                        "only_in_other": list(only_b),
                        "differs_in": identity_differences(identities[a], identities[b]),
                    }
                    for (a, b), (only_a, only_b) in differences.items()
                    if a < b
                ],
                "claims": claims,
                "problems": problems,
                **({"steps": _step_graph(study)} if study.steps else {}),
            }
        )
    else:
        grid = table("component", *study.arms, title=f"arms of {study.id}")
        shown = list(study.components) + [
            r for r in RESERVED_COMPONENTS if any(r in a.components for a in study.arms.values())
        ]
        for name in shown:
            grid.add_row(
                name,
                *[
                    "x" if name in a.components else "system" if name in a.system else ""
                    for a in study.arms.values()
                ],
            )
        grid.add_row("role", *[a.role for a in study.arms.values()])
        grid.add_row("sha256", *[hashes[a][:12] for a in study.arms])
        settings = [a.protocol_record() for a in study.arms.values()]
        for key in (
            "fewshot",
            "models",
            "sampling",
            "replicates",
            "items",
            "factors",
            "response_from",
        ):
            if any(key in record for record in settings):
                grid.add_row(key, *[_setting(record.get(key)) for record in settings])
        out = console()
        out.print(grid)
        for (a, b), (only_a, only_b) in differences.items():
            if a < b:
                differ = identity_differences(identities[a], identities[b])
                out.print(
                    f"{a} vs {b}: only in {a}: {only_a or '-'}; only in {b}: "
                    f"{only_b or '-'}; differs in: {', '.join(differ) or '-'}",
                    markup=False,
                )
        for claim in claims:
            state = "[green]holds[/]" if claim["holds"] else "[red]FALSE[/]"
            stated = "; ".join(
                f"{k} {claim[k]}" for k in ("by", "removes", "adds", "replaces") if k in claim
            )
            out.print(
                f"claim: {claim['arm']} differs from {claim['differs_from']} {stated}: {state}"
            )
        if study.steps:
            for line in _step_lines(_step_graph(study)):
                out.print(line, markup=False)
        for problem in problems:
            out.print(problem, markup=False)
    if problems:
        sys.exit(1)


def _step_graph(study: Any) -> dict[str, Any]:
    """The step graph of ``study`` (``docs/prompts.md`` §8), with each step's call count."""
    from runner._render import Renderer
    from runner.steps._render import StepRenderer

    graph = StepRenderer(study, Renderer(study)).graph()
    trials = len(study.trial_ids())
    items = len(study.stimulus_ids())
    for spec in graph["steps"].values():
        units = items if spec["on"] == "item" else trials
        spec["calls"] = units * len(spec["models"])
    return graph


def _step_lines(graph: dict[str, Any]) -> list[str]:
    """``ledger arms`` / ``ledger schedule``: the step graph as text, in run order."""
    lines = []
    for layer in graph["order"]:
        for name in layer:
            if name == "(trials)":
                reads = ", ".join(f"steps.{s}" for s in graph["trial_reads"]) or "-"
                lines.append(f"  trials (the calls under test; read {reads})")
                continue
            s = graph["steps"][name]
            reads = ", ".join(f"steps.{r}" for r in s["reads"]) or "-"
            models = ", ".join(m or "(model)" for m in s["models"])
            ver = s.get("verified_by")
            checked = (
                f", verified by {ver['step']} (accept {', '.join(ver['accept'])}; up to "
                f"{ver['retry'] + 1} samples, then {ver['then']})"
                if ver
                else ""
            )  # docs/prompts.md §8.6
            lines.append(
                f"  step {name}: on {s['on']}, models {models}"
                f", parser {s['parser']}, sees {s['sees']}, reads {reads}, {s['calls']} calls"
                f"{checked}"
            )
    if "ddx" in graph:  # docs/scoring.md §12: the roles of the ddx scoring
        roles = ", ".join(f"{k} {v}" for k, v in graph["ddx"].items())
        lines.append(f"  ddx scoring: {roles} (the reference sets are final before any trial)")
    return ["steps, in the order they run:", *lines]


@click.command(cls=Command)
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option("--limit", type=int, default=None, help="Show only the first N trials.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def schedule(study_dir: Path, limit: int | None, as_json: bool) -> None:
    """Print the locked trial order (after checking no locked file changed).

    \b
    Example:
      ledger schedule my-study --limit 10
      ledger schedule my-study --json
    """
    from runner._lock import check_integrity
    from runner._schedule import order_key, schedule_sha256
    from runner._schedule import schedule as make_schedule

    study = check_integrity(study_dir)
    order = make_schedule(study.seed, study.trial_ids())
    shown = order[:limit] if limit else order
    if as_json:
        dump_json(
            {
                "study": study.id,
                "trials": len(order),
                "schedule_sha256": schedule_sha256(order),
                "order": [
                    {
                        "position": position,
                        "trial": trial,
                        "order_key": order_key(study.seed, trial),
                    }
                    for position, trial in enumerate(shown, 1)
                ],
                **({"steps": _step_graph(study)} if study.steps else {}),
            }
        )
        return
    for position, trial in enumerate(shown, 1):
        click.echo(f"{position}\t{trial}\t{order_key(study.seed, trial)[:16]}")
    click.echo(f"{len(order)} trials, schedule sha256 {schedule_sha256(order)}", err=True)
    if study.steps:
        for line in _step_lines(_step_graph(study)):
            click.echo(line, err=True)


@click.command(cls=Command)
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option("--key", "key_file", default=None, help="Owner key file (default: the study's).")
def lock(study_dir: Path, key_file: str | None) -> None:
    """Lock the study: every file, the protocol, and a registration checkpoint to publish.

    \b
    Example:
      ledger lock my-study
    """
    from runner._lock import lock_study

    result = lock_study(study_dir, study_key(study_dir, key_file))
    click.echo(
        f"locked {result.artifacts} files; protocol.locked at seq {result.protocol_seq}; "
        f"{result.trials} trials; schedule sha256 {result.schedule_sha256}"
    )
    click.echo(result.checkpoint, nl=False)
    click.echo(
        f"registration checkpoint written to {result.checkpoint_path}: publish it now, for "
        "example in your preregistration, so the lock can be proven later"
    )
    from runner._osf import OSF_FILE

    if (study_dir / OSF_FILE).is_file():
        click.echo(
            f"OSF preregistration locked as {study_dir / OSF_FILE}: its fields are filled from "
            "the locked protocol; copy them into the OSF form and answer the ones it leaves to "
            "the authors (docs/reporting.md §3)"
        )
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)


@click.command(cls=Command)
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option("--reason", required=True, help="Why the locked file changed (shown in the archive).")
@click.option("--key", "key_file", default=None, help="Owner key file (default: the study's).")
def amend(study_dir: Path, reason: str, key_file: str | None) -> None:
    """Record changed amendable files as a protocol.amended deviation.

    \b
    Example:
      ledger amend my-study --reason "fixed a typo in README.md"
    """
    from runner._lock import amend as record_amendment

    seq = record_amendment(study_dir, study_key(study_dir, key_file), reason)
    click.echo(f"recorded protocol.amended at seq {seq}")


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


@click.command("run", cls=Command)
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--backend",
    type=click.Choice(list(BACKEND_NAMES)),
    metavar="BACKEND",
    default="anthropic",
    show_default=True,
    help=f"Who answers the trials: {', '.join(BACKEND_NAMES)} (docs/backends.md).",
)
@click.option(
    "--base-url",
    default=None,
    help="API root (default: each backend's own, docs/backends.md; anthropic: "
    "$ANTHROPIC_BASE_URL).",
)
@click.option(
    "--replay-from", default=None, help="replay: an exported archive, a study or its ledger.db."
)
@click.option("--concurrency", type=click.IntRange(1, 1024), default=8, show_default=True)
@click.option("--max-trials", type=click.IntRange(min=1), default=None, help="Stop after N trials.")
@click.option("--until", default=None, help="Start no trial after this time or duration (8h).")
@click.option(
    "--budget-usd",
    type=FiniteFloat(min=0),
    default=None,
    help="Cost cap in USD for the whole study: what earlier sessions spent counts against it.",
)
@click.option(
    "--price-in",
    type=FiniteFloat(min=0),
    default=None,
    help="USD per million input tokens: prices a backend or model without a listed price "
    "(with --price-out; recorded in run.started).",
)
@click.option(
    "--price-out",
    type=FiniteFloat(min=0),
    default=None,
    help="USD per million output tokens (with --price-in).",
)
@click.option("--max-attempts", type=click.IntRange(1, 100), default=5, show_default=True)
@click.option(
    "--poll-interval",
    type=FiniteFloat(min=0.01),
    default=10.0,
    show_default=True,
    help="anthropic-batch: seconds between batch status polls.",
)
@click.option(
    "--model",
    "models",
    multiple=True,
    help="[models] studies: run only this model's trials (repeatable; default: every model "
    "the backend serves).",
)
@click.option(
    "--check",
    is_flag=True,
    help="Send and record only the preflight requests (one per request shape), then exit: 0 "
    "when the backend accepts requests naming the locked model(s), step calls included.",
)
@click.option(
    "--lease-seconds",
    type=FiniteFloat(min=0.1),
    default=30.0,
    show_default=True,
    help="PostgreSQL studies: seconds after this worker's last heartbeat that other workers "
    "take over its trials (docs/trials.md section 8).",
)
@click.option("--key", "key_file", default=None, help="Signing key (default: the study owner's).")
@click.option("--json", "as_json", is_flag=True, help="Print the session summary as JSON.")
def run_cmd(
    study_dir: Path,
    backend: str,
    base_url: str | None,
    replay_from: str | None,
    concurrency: int,
    max_trials: int | None,
    until: str | None,
    budget_usd: float | None,
    price_in: float | None,
    price_out: float | None,
    max_attempts: int,
    poll_interval: float,
    models: tuple[str, ...],
    check: bool,
    lease_seconds: float,
    key_file: str | None,
    as_json: bool,
) -> None:
    """Run the locked schedule's pending trials; safe to stop and resume at any moment.

    Every run starts with a recorded preflight: one request per request shape (trials' and
    step calls'), built as the first pending one of that shape, showing that the backend
    accepts requests naming the locked model; if it does not, the run stops (exit 1) naming
    the model, backend, URL and error, before any trial or step call is sent. The server's
    model list is recorded too; a locked model it does not list is a WARNING (what a server
    reports is not proof of which model answered). --check sends the preflight alone.

    Each attempt is recorded before it is sent and its response or error right after;
    a restart continues where the last session stopped. Rate limits and server errors are
    retried with back-off; 400/401/403 stop the run with the server's message, and a
    404 (a wrong --base-url) stops it without using up any trial's attempts.
    --budget-usd caps the study's total spend across sessions, not each session's;
    where the backend or model has no listed price, give --price-in and --price-out.
    Ctrl-C stops sending and lets the calls in flight finish; a second Ctrl-C, or SIGTERM,
    records them as interrupted (exit status 130, or 143, while trials are pending).
    One run per study on a SQLite ledger; on a PostgreSQL ledger (ledger new --store) start
    as many as you like, on any machines: they share the pending trials through leases.

    \b
    Example:
      export ANTHROPIC_API_KEY=...
      ledger run my-study --concurrency 8 --budget-usd 25 --until 8h
      ledger run my-study --backend openai-compatible \\
          --base-url http://127.0.0.1:8000/v1 \\
          --budget-usd 5 --price-in 0.2 --price-out 0.6
      ledger run my-study --backend simulated
      ledger run my-study --backend openai-compatible \\
          --base-url http://127.0.0.1:8000/v1 --check
    """
    # Ctrl-C and SIGTERM belong to this command from here on: runner._control imports nothing
    # heavy, while the SDKs imported below take seconds on a busy machine.
    from runner._control import RunControl, RunInterruptedError

    shown: list[RunDisplay] = []

    def notify(line: str) -> None:
        if shown:
            shown[0].say(line)
        else:
            click.echo(line, err=True)

    # A program that ends with this command keeps the handlers to its end, so a late Ctrl-C
    # cannot print a trace while Python shuts down; an in-process caller (click's CliRunner, a
    # notebook) gets its own handlers back.
    owns_process = sys.stdout is sys.__stdout__ and sys.stderr is sys.__stderr__
    with RunControl(notify, release_on_exit=not owns_process) as control:
        from runner._backends import BackendError
        from runner._engines import make_backend
        from runner._execute import RunOptions, check_study, run_study
        from runner._lock import check_writable

        check_writable(study_dir)  # a read-only study is refused before anything is written
        options = RunOptions(
            concurrency=concurrency,
            max_trials=max_trials,
            until=_parse_until(until),
            budget_usd=budget_usd,
            max_attempts=max_attempts,
            poll_interval=poll_interval,
            price_in=price_in,
            price_out=price_out,
            models=models or None,
            lease_seconds=lease_seconds,
        )
        try:
            key = study_key(study_dir, key_file)
            engine = make_backend(backend, base_url=base_url, replay_from=replay_from)
            if owns_process:
                # Everything imported so far lives to the end: the collector need not walk it
                # again during the run (the SDK's model classes are most of it).
                gc.freeze()
            control.check()
            if check:
                preflights = check_study(study_dir, key, engine, options, control)
                _show_check(preflights, engine.simulated, as_json)
                return
            label = f"{study_dir.name} [{engine.name}{' SIMULATED' if engine.simulated else ''}]"
            priced = engine.priced or price_in is not None
            with RunDisplay(console(stderr=True), label, priced) as display:
                shown.append(display)
                result = run_study(study_dir, key, engine, options, display, control)
        except BackendError as exc:
            raise click.ClickException(exc.message) from exc
        except RunInterruptedError as exc:
            raise _interrupted(
                f"{exc}; run 'ledger run {study_dir}' to start it", exc.exit_code
            ) from None
        finally:
            shown.clear()
    c = result.counters
    for preflight in result.preflights:
        click.echo(preflight.describe(), err=True)
        if preflight.model_match is False:
            click.echo(_mismatch_warning(preflight), err=True)
    for line in result.server_warnings:
        click.echo(f"WARNING model identity: {line}", err=True)
    if as_json:
        dump_json(
            {
                "study": study_dir.name,
                "backend": engine.name,
                "simulated": engine.simulated,
                "preflights": [p.seq for p in result.preflights],
                "model_identity_warnings": list(result.server_warnings),
                "started_seq": result.started_seq,
                "stopped_seq": result.stopped_seq,
                "responded": c.responded,
                "failed_attempts": c.failed,
                "retries": c.retries,
                "given_up": c.given_up,
                "interrupted": c.interrupted,
                "cost_usd": c.cost_usd if result.priced else None,
                "final": result.final,
                "pending": result.pending,
                "stopped": result.reason,
                "fatal": result.fatal,
            }
        )
    cost = f"${c.cost_usd:.4f}" if result.priced else "n/a"
    click.echo(
        f"session seq {result.started_seq}-{result.stopped_seq}: {c.responded} responded, "
        f"{c.failed} failed attempts ({c.retries} retried), {c.given_up} given up, "
        f"{c.interrupted} interrupted; cost {cost}; {result.final} final, "
        f"{result.pending} pending; stopped: {result.reason}",
        err=as_json,
    )
    if engine.simulated:
        click.echo("backend: simulated (offline simulation, not a real model)", err=as_json)
    if result.fatal:
        raise click.ClickException(
            f"run stopped by a non-retryable error: {result.fatal}; nothing was lost, fix the "
            f"cause and run 'ledger run {study_dir}' again"
        )
    if result.signal is not None and result.pending:
        n = c.cancelled
        calls = (
            f"{n} call{'' if n == 1 else 's'} in flight recorded as interrupted"
            if n
            else "no call was cut off"
        )
        raise _interrupted(
            f"interrupted by {result.signal}: {calls}, {result.pending} trials pending; the "
            f"session is closed (run.stopped at seq {result.stopped_seq}, checkpoint signed); "
            f"run 'ledger run {study_dir}' to resume",
            control.exit_code or 130,
        )
    if owns_process:
        end_process(0)  # the session is closed and synced; skip the interpreter's teardown


def _mismatch_warning(preflight: Any) -> str:
    return (
        f"warning: the backend reports model {preflight.reported_model!r} for requested "
        f"{preflight.model!r}: not the same model, nor a dated snapshot of it (run.preflight "
        f"at seq {preflight.seq}); every such response is flagged by ledger status, "
        "ledger analyze and the verifier"
    )


def _show_check(preflights: list[Any], simulated: bool, as_json: bool) -> None:
    """What ``ledger run --check`` prints: one line per preflight (JSON with ``--json``)."""
    if as_json:
        dump_json(
            {
                "ok": True,
                "simulated": simulated,
                "preflights": [
                    {
                        "seq": p.seq,
                        "as_trial": p.trial,
                        "model": p.model,
                        "shape": p.shape.as_dict(),
                        "attempts": p.attempts,
                        "http_status": p.http_status,
                        "reported_model": p.reported_model,
                        "model_match": p.model_match,
                        "step": p.step,
                        "empty_slots": list(p.empty_slots),
                        "warnings": list(p.warnings),
                    }
                    for p in preflights
                ],
            }
        )
        return
    for preflight in preflights:
        click.echo(preflight.describe())
        if preflight.model_match is False:
            click.echo(_mismatch_warning(preflight), err=True)
    for line in dict.fromkeys(w for p in preflights for w in p.warnings):
        click.echo(f"WARNING model identity: {line}", err=True)
    n = len(preflights)
    click.echo(
        f"check passed: {n} preflight request{'' if n == 1 else 's'} accepted; no trial was sent"
        + (" (simulated backend, not a real model)" if simulated else "")
    )


def _workers(log: Any) -> list[dict[str, Any]] | None:
    """The study's ``ledger run`` workers (PostgreSQL, docs/trials.md §8); None on SQLite."""
    if log.engine != "postgresql":
        return None
    from ledger import list_workers

    return [
        {
            "id": w.id,
            "session": w.session,
            "host": w.host,
            "pid": w.pid,
            "mode": w.mode,
            "leases": w.leases,
            "started": w.started.isoformat(),
            "heartbeat": w.heartbeat.isoformat(),
            "expires": w.expires.isoformat(),
            "live": bool(w.live),
        }
        for w in list_workers(log)
    ]


def _interrupted(message: str, exit_code: int) -> click.exceptions.Exit:
    """A run stopped by a signal: one line, and exit status 128 + the signal's number."""
    click.echo(f"Error: {message}", err=True)
    return click.exceptions.Exit(exit_code)


@click.command(cls=Command)
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(study_dir: Path, as_json: bool) -> None:
    """Summarise where a study stands: per arm, trials responded, given up and pending.

    On a PostgreSQL study it also lists the `ledger run` workers: live ones, and dead ones
    whose lease ran out and whom the next worker will reap.

    \b
    Example:
      ledger status my-study
    """
    from ledger import Ledger
    from runner._identity import recorded_warnings
    from runner._lock import check_integrity, ledger_path, protocol_event
    from runner._provenance import model_mismatches
    from runner._state import arm_status, load_state

    study = check_integrity(study_dir)
    with Ledger.open(ledger_path(study_dir), readonly=True) as log:
        state = load_state(study, log)
        kinds: dict[str, int] = {}
        answers: list[Any] = []  # responses and preflights: what served the study
        sessions: list[Any] = []  # run.started and run.preflight: what the server said
        preflight: Any = None
        for event in log.events():
            kinds[event.kind] = kinds.get(event.kind, 0) + 1
            if event.kind in ("trial.responded", "run.preflight"):
                answers.append(event)
                if event.kind == "run.preflight":
                    preflight = event
            if event.kind in ("run.started", "run.preflight"):
                sessions.append(event)
        protocol = protocol_event(log)
        if study.steps:
            from runner.steps._state import step_status

            steps = step_status(study, log)
        else:
            steps = []
        workers = _workers(log)
    mismatches = model_mismatches(protocol.body if protocol else {}, answers)
    identity = recorded_warnings(sessions)
    rows = arm_status(state)
    if as_json:
        dump_json(
            {
                "study": study.id,
                "sessions": state.sessions,
                "events": kinds,
                "arms": [r.__dict__ for r in rows],
                "last_preflight": (
                    {"seq": preflight.seq, "time": preflight.time, **preflight.body}
                    if preflight is not None
                    else None
                ),
                "model_mismatches": {
                    "count": len(mismatches),
                    "first": [m.as_dict() for m in mismatches[:5]],
                },
                "model_identity_warnings": [{"seq": q, "warning": w} for q, w in identity],
                **({"workers": workers} if workers is not None else {}),
                **({"steps": steps} if study.steps else {}),
            }
        )
        return
    grid = table(
        "arm",
        "trials",
        "responded",
        "given up",
        "pending",
        "awaiting",
        "attempts",
        "cost USD",
        title=f"{study.id}: {state.sessions} run session(s)",
    )
    for r in rows:
        grid.add_row(
            r.label,
            str(r.trials),
            str(r.responded),
            str(r.given_up),
            str(r.pending),
            str(r.in_flight),
            str(r.attempts),
            f"{r.cost_usd:.4f}",
        )
    total = len(state.order)
    pending = len(state.pending())
    out = console()
    out.print(grid)
    if steps:
        sgrid = table(
            "step",
            "on",
            "models",
            "calls",
            "parsed",
            "unparseable",
            "given up",
            "pending",
            "decided",
            "undecided",
            title="recorded model steps",
        )
        for st in steps:
            sgrid.add_row(
                st["step"],
                st["on"],
                ", ".join(st["models"]),
                str(st["calls"]),
                str(st["parsed"]),
                str(st["unparseable_responses"]),
                str(st["given_up"]),
                str(st["pending"] + st["awaiting"]),
                str(st["decided"]),
                str(st["undecided"]),
            )
        out.print(sgrid)
        excluded = kinds.get("trial.excluded", 0)
        if excluded:
            out.print(f"{excluded} trial(s) excluded by a step (trial.excluded)")
    counts = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()) if not k.startswith("artifact"))
    out.print(f"{total - pending}/{total} trials final; events: {counts}")
    if workers:
        wgrid = table(
            "worker",
            "session",
            "mode",
            "leases",
            "last heartbeat",
            "state",
            title="ledger run workers (PostgreSQL)",
        )
        for w in workers:
            wgrid.add_row(
                w["id"],
                str(w["session"]),
                w["mode"],
                str(w["leases"]),
                w["heartbeat"],
                "live" if w["live"] else "lease ran out",
            )
        out.print(wgrid)
    elif workers is not None:
        out.print("no ledger run worker is running")
    if preflight is not None:
        out.print(_preflight_line(preflight), markup=False)
    for _, line in identity:
        out.print(f"WARNING model identity: {line}", markup=False)
    if mismatches:
        first = "; ".join(
            f"seq {m.seq} ({m.trial or 'preflight'}): requested {m.requested!r}, reported "
            f"{m.reported!r}"
            for m in mismatches[:3]
        )
        out.print(
            f"model mismatch: {len(mismatches)} response(s) report a model other than the one "
            f"requested (nor a dated snapshot of it); first: {first}",
            markup=False,
        )


def _preflight_line(event: Any) -> str:
    """``ledger status``: the last ``run.preflight`` in one line."""
    body = event.body
    label = " (simulated)" if body.get("simulated") else ""
    where = f"{body.get('backend')}" + (f" at {body['url']}" if body.get("url") else "")
    head = f"last preflight{label}: seq {event.seq} ({event.time}), model {body.get('model')!r} "
    if body.get("ok"):
        reported = body.get("reported_model")
        also = f", reported {reported!r}" if reported not in (None, body.get("model")) else ""
        return head + f"via {where}: accepted (HTTP {body.get('http_status')}{also})"
    return head + f"via {where}: FAILED: {body.get('message')}"


@click.command(cls=Command)
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--backend",
    type=click.Choice(ESTIMATE_BACKENDS),
    metavar="BACKEND",
    default="anthropic",
    show_default=True,
    help=f"Whose token counter and prices to use: {', '.join(ESTIMATE_BACKENDS)} (anthropic: "
    "the count_tokens endpoint; simulated: its own count; the others: estimated, and said "
    "so; docs/backends.md).",
)
@click.option(
    "--base-url",
    default=None,
    help="API root (default: each backend's own, docs/backends.md; anthropic: "
    "$ANTHROPIC_BASE_URL).",
)
@click.option(
    "--price-in",
    type=FiniteFloat(min=0),
    default=None,
    help="USD per million input tokens (with --price-out), instead of the price table.",
)
@click.option(
    "--price-out",
    type=FiniteFloat(min=0),
    default=None,
    help="USD per million output tokens (with --price-in).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def estimate(
    study_dir: Path,
    backend: str,
    base_url: str | None,
    price_in: float | None,
    price_out: float | None,
    as_json: bool,
) -> None:
    """Predict the tokens and cost of the pending trials before anything is sent.

    Input tokens are counted once per (arm, stimulus) with the API's count_tokens endpoint
    (or estimated, and said so); output is bounded by max_tokens. Costs use the price table
    (anthropic), or the prices given with --price-in and --price-out.

    \b
    Example:
      ledger estimate my-study
      ledger estimate my-study --backend simulated --json
      ledger estimate my-study --backend openai-compatible \\
          --base-url http://127.0.0.1:8000/v1 --price-in 0.2 --price-out 0.6
    """
    from runner._backends import BackendError
    from runner._engines import make_backend
    from runner._estimate import estimate_study
    from runner._execute import given_prices

    price = given_prices(price_in, price_out)
    try:
        est = estimate_study(study_dir, make_backend(backend, base_url=base_url), price)
    except BackendError as exc:
        raise click.ClickException(exc.message) from exc
    if as_json:
        from dataclasses import asdict

        data = asdict(est)
        data["cost_max_batch_usd"] = (
            None if est.cost_max_usd is None else est.cost_max_usd * est.batch_factor
        )
        dump_json(data)
        return

    def usd(value: float | None) -> str:
        if value is None:
            return "n/a (no price for this backend/model: give --price-in and --price-out)"
        return f"${value:,.2f}"

    click.echo(f"model {est.model}: {est.pending} of {est.trials} trials pending")
    click.echo(f"input tokens: {est.input_tokens:,} ({est.source})")
    typical = (
        f"{est.output_tokens_typical:,} (mean of recorded responses)"
        if est.output_tokens_typical is not None
        else "unknown until responses are recorded"
    )
    click.echo(f"output tokens: at most {est.output_tokens_max:,}; typical {typical}")
    if est.step_calls:
        click.echo(
            f"step calls: {est.step_calls:,} to make; input tokens at least "
            f"{est.step_input_tokens:,} (estimated, inputs not yet known counted empty), "
            f"output at most {est.step_output_tokens_max:,}; included in the costs"
        )
    click.echo(
        f"cost: input only {usd(est.cost_min_usd)}; typical {usd(est.cost_typical_usd)}; "
        f"at most {usd(est.cost_max_usd)}"
    )
    if est.price_in_per_mtok is not None and est.price_out_per_mtok is not None:
        click.echo(
            f"prices: ${est.price_in_per_mtok:g} in, ${est.price_out_per_mtok:g} out per "
            f"million tokens, from {est.price_source}"
        )
    if est.cost_max_usd is not None and backend == "anthropic":
        click.echo(
            f"with --backend anthropic-batch: at most {usd(est.cost_max_usd * est.batch_factor)}"
        )
