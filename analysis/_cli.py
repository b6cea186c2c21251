"""The analysis commands: score, unblind, analyze, report, export, demo.

Registered as ``ledger`` subcommands through the ``prompt_ledger.commands`` entry points; the
statistics, plotting and export modules are imported inside the command that needs them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ledger.cliutil import Command, console, dump_json, table
from runner import study_key

__all__ = [
    "analyze",
    "auditor_key",
    "demo",
    "export_cmd",
    "plan_cmd",
    "posthoc",
    "report_cmd",
    "review",
    "score",
    "unblind",
    "view",
]


MMAP_THRESHOLD = 128 * 1024
"""Bytes from which glibc serves an allocation by its own ``mmap`` (its initial default)."""


def release_freed_memory() -> bool:
    """Fix glibc's ``M_MMAP_THRESHOLD`` at :data:`MMAP_THRESHOLD`; True when it was set.

    By default glibc raises the threshold each time a large block is freed (up to 32 MiB), so
    the column arrays of ``analyze``, ``report`` and ``export`` (each a few MB at 10^5 trials)
    come from the heap after the first is freed, and the memory of a table no longer needed
    stays in the process. Fixed, every such array is mapped and unmapped on its own, so the
    peak is what is alive at once (issue 41: 478 -> 429 MB for ``analyze`` at 20,000 trials).
    Nothing else changes. False, and nothing done, where the C library has no ``mallopt``.
    """
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    m_mmap_threshold = -3  # glibc's malloc.h
    return bool(mallopt(ctypes.c_int(m_mmap_threshold), ctypes.c_int(MMAP_THRESHOLD)))


class PosthocTests(click.Choice[str]):
    """``--test`` of ``ledger posthoc``: :data:`analysis.statistics.POSTHOC_TESTS`.

    The registry imports the statistics (numpy, pandas, scipy), so it is read when click
    first needs the choices (help, a value to check), not when the CLI is imported.
    """

    def __init__(self) -> None:
        super().__init__(())

    @property
    def choices(self) -> tuple[str, ...]:
        """The registry's post-hoc kinds, in order."""
        from analysis.statistics import POSTHOC_TESTS

        return POSTHOC_TESTS

    @choices.setter
    def choices(self, value: Any) -> None:
        """Ignored: the registry is the one list."""


@click.command(cls=Command)
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--replicates",
    type=click.IntRange(1, 1000),
    default=None,
    help="Replicates per arm and stimulus (default: the template's; tumbling-E's 30 give "
    "1,050 trials, prompt-rotation's 1 gives 320, green-shielding's 2 give 1,470, "
    "green-shielding-pilot's 3 give 912; not "
    "medmcqa-prompt-sensitivity).",
)
@click.option(
    "--template",
    default="prompt-tumbling-e",
    show_default=True,
    type=click.Choice(
        [
            "prompt-tumbling-e",
            "prompt-rotation",
            "medmcqa-prompt-sensitivity",
            "green-shielding",
            "green-shielding-pilot",
        ]
    ),
    metavar="NAME",
    help="The study to run: prompt-tumbling-e or prompt-rotation (Experiment 1 or 2 of the "
    "PROMPT paper), medmcqa-prompt-sensitivity (seed 002's design, four studies) or "
    "green-shielding (seed 001's: neutralized patient queries, differential diagnoses) or "
    "green-shielding-pilot (seed 001's pilot: perturbed exam questions, its Table 1).",
)
def demo(directory: Path | None, replicates: int | None, template: str) -> None:
    """Run the whole PROMPT workflow offline on the simulated model, then verify and tamper.

    Scaffolds the template's study (default tumbling-E) in DIRECTORY (default
    ./prompt-ledger-demo, which must not exist or be empty), locks it, runs it on the
    simulated backend, scores blind, unblinds, analyses, reports, exports an archive, verifies
    it, and shows a one-byte change caught. With --template medmcqa-prompt-sensitivity it does
    all of that for each of seed 002's four studies (--replicates does not apply) and prints the
    registered statistics: position bias per arm, flip rates, permutation voting,
    self-consistency. With --template green-shielding it runs seed 001's design (raw against
    neutralized patient queries, differential diagnoses judged against reference sets, the
    physicians' replies as their own arm) and prints the plausibility / coverage / breadth
    tradeoff as recorded. With --template green-shielding-pilot it runs seed 001's pilot
    (perturbed exam questions against the open-ended default, a correctness judge) and prints
    its Table 1: default accuracy, and per perturbation the success rate and perturbed accuracy.

    \b
    Example:
      ledger demo /tmp/ledger-demo
      ledger demo /tmp/quick-demo --replicates 3
      ledger demo /tmp/rotation-demo --template prompt-rotation
      ledger demo /tmp/seed002-demo --template medmcqa-prompt-sensitivity
      ledger demo /tmp/green-demo --template green-shielding
      ledger demo /tmp/pilot-demo --template green-shielding-pilot
    """
    from analysis._demo import run_demo

    if template == "medmcqa-prompt-sensitivity" and replicates is not None:
        raise click.UsageError(
            f"--replicates does not apply to the {template} demo: its "
            "studies declare their own replicates"
        )

    run_demo(
        directory or Path("prompt-ledger-demo"), console(), replicates=replicates, template=template
    )


@click.command(cls=Command)
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.argument("name")
@click.option("--contrast", nargs=2, required=True, help="The two arms, a b: estimates a - b.")
@click.option("--reason", required=True, help="Why this analysis is added after unblinding.")
@click.option(
    "--test",
    "test",
    type=PosthocTests(),
    default="lmm",
    show_default=True,
    help="lmm: mixed model; paired-t: trials paired by (stimulus, rep); independent-t: Welch; "
    "bootstrap: the locked bootstrap of the difference in means.",
)
@click.option(
    "--random-intercept",
    type=click.Choice(["stimulus", "source"]),
    default=None,
    help="Grouping factor of the random intercept (--test lmm; default stimulus).",
)
@click.option(
    "--arms", default=None, help="Comma-separated arms to fit (--test lmm; default: every arm)."
)
@click.option(
    "--model",
    "model",
    default=None,
    help="One model's trials only (a study with [models]; default: every model).",
)
@click.option(
    "--variant",
    "variant",
    default=None,
    help="One variant's trials only (a study with [variants]; needed when the arms "
    "compared do not run the same variants).",
)
@click.option("--key", "key_file", default=None, help="Signing key (default: the study owner's).")
def posthoc(
    study_dir: Path,
    name: str,
    contrast: tuple[str, str],
    reason: str,
    test: str,
    random_intercept: str | None,
    arms: str | None,
    model: str | None,
    variant: str | None,
    key_file: str | None,
) -> None:
    """Declare and record a post-hoc analysis, after the registered analysis.

    --test lmm (default) fits accuracy ~ arm + (1 | stimulus or source), REML, on the chosen
    arms; paired-t, independent-t and bootstrap compute what the registered tests of those
    names compute. The declaration and the two-sided difference a - b with its 95% CI are
    recorded as one analysis.posthoc event, labelled post hoc in the report, the viewer and
    the archive. It has no verdict and never changes a registered one.

    \b
    Examples:
      ledger posthoc my-study stimulus-lmm --contrast A B --arms A,B,C,D \\
          --reason "the paper's post-hoc LMM with stimulus as random intercept"
      ledger posthoc my-study ab-paired --contrast A B --test paired-t \\
          --reason "A - B paired by probe and replicate, as the paper reports it"
      ledger posthoc my-mcq fs-zs --contrast fs_direct zs_direct \\
          --test independent-t --variant original \\
          --reason "few-shot against zero-shot, options as written"
    """
    from analysis._posthoc import declare_posthoc
    from analysis.statistics import statistic

    chosen = [a.strip() for a in arms.split(",") if a.strip()] if arms else None
    body = declare_posthoc(
        study_dir,
        study_key(study_dir, key_file),
        name,
        contrast,
        reason=reason,
        random_intercept=random_intercept,
        arms=chosen,
        test=test,
        model=model,
        variant=variant,
    )
    if body["status"] != "ok":
        click.echo(f"recorded {body['id']} (post hoc): could not be computed: {body['error']}")
        return
    c = body["values"]["contrast"]
    posthoc = statistic(test).posthoc
    assert posthoc is not None  # --test is one of POSTHOC_TESTS
    detail = posthoc.echo(body["values"])
    click.echo(
        f"recorded {body['id']} (post hoc, no verdict): {c['a']} - {c['b']} = "
        f"{100 * c['estimate']:+.1f} pp (95% CI {100 * c['lower']:+.1f} to "
        f"{100 * c['upper']:+.1f}), {detail}"
    )


@click.command(cls=Command)
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option("--key", "key_file", default=None, help="Signing key (default: the study owner's).")
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="Processes that parse the responses while this one signs (default: one per core "
    "from 8,000 responses; 0: none). The events are the same bytes either way.",
)
def score(study_dir: Path, key_file: str | None, workers: int | None) -> None:
    """Score every recorded response blind to its arm; seal once every trial is final.

    The scorer sees the response, the stimulus and an arm code, never the arm. When no trial
    is pending, scoring.sealed records the hash of all scores; nothing can be scored or run
    after it.

    \b
    Example:
      ledger score my-study
      ledger score my-study --workers 0
    """
    from analysis._scoring import score_study

    result = score_study(study_dir, study_key(study_dir, key_file), workers=workers)
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(result.by_status.items())) or "none new"
    click.echo(f"scored {result.scored} responses ({statuses}); {result.already} scored before")
    if result.sealed_seq is not None:
        click.echo(f"scoring.sealed at seq {result.sealed_seq}; next: ledger unblind {study_dir}")
    else:
        click.echo(
            f"not sealed: {result.pending} trials have no final outcome yet "
            f"(run 'ledger run {study_dir}' to finish them)"
        )


@click.command(cls=Command)
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option("--sample", "sample", required=True, help="The locked review sample's name.")
@click.option(
    "--subject",
    default=None,
    help="What is reviewed: a response seq (judge-label), an item id (reference-set) "
    "or a case's failed_response_seq (a contrast sample with codes); omit to "
    "list the sample.",
)
@click.option(
    "--value",
    default=None,
    help='A judge label; a JSON object of edits, e.g. \'{"plausible": {"remove": '
    '["x"], "add": ["y"]}}\' (reference-set); codes, comma-separated.',
)
@click.option("--key", "key_file", default=None, help="The reviewer's key (role reviewer).")
def review(
    study_dir: Path, sample: str, subject: str | None, value: str | None, key_file: str | None
) -> None:
    """List a locked review sample, or record a reviewer's review of one of its subjects.

    The sample is declared in study.toml ([reviews.NAME]) and drawn once scoring is sealed:
    judge decisions stratified by judge agreement (step = ...), items whose reference sets
    are reviewed (reference = ...), or the cases of a contrast sample with codes (failed,
    succeeded, codes; after 'ledger unblind'). A review is a signed review.recorded event
    by a key with the role reviewer. A contrast sample without codes is not listed here:
    'ledger export' writes it to analysis/review/NAME.csv.

    \b
    Example:
      ledger review my-study --sample audit
      ledger review my-study --sample audit --subject 123 --value correct \\
        --key rev.key
      ledger review my-study --sample refsets --subject q07 \\
        --value '{"plausible": {"add": ["sepsis"]}}' --key rev.key
    """
    from analysis._reviewing import parse_value, record_review, review_subjects
    from ledger import SigningKey

    if subject is None:
        for s in review_subjects(study_dir, sample):
            done = f"; reviewed: {' | '.join(s.reviewed)}" if s.reviewed else ""
            if s.shown:
                click.echo(f"{s.response_seq}\t{s.stimulus}\t{s.shown}{done}")
                continue
            votes = ", ".join(str(v) for v in s.votes)
            click.echo(
                f"seq {s.response_seq}\t{s.stimulus}\tcode {s.arm_code}\tjudges: "
                f"{votes} -> {s.decision}{done}"
            )
        return
    if value is None or key_file is None:
        raise click.UsageError("--subject needs --value and --key (the reviewer's key)")
    kind = _review_kind(study_dir, sample)
    seq = record_review(
        study_dir, SigningKey.load(key_file), sample, subject, parse_value(kind, value)
    )
    click.echo(f"review.recorded at seq {seq}")


def _review_kind(study_dir: Path, sample: str) -> str:
    """The kind of a locked review sample's reviews: judge-label, reference-set or code."""
    from ledger import Ledger
    from runner import ledger_path, protocol_event

    with Ledger.open(ledger_path(study_dir), readonly=True) as log:
        protocol = protocol_event(log)
    locked = ((protocol.body.get("reviews") if protocol else None) or {}).get(sample) or {}
    kind = str(locked.get("kind", "judge-label"))
    return "code" if kind == "contrast" else kind


@click.command(cls=Command)
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option("--key", "key_file", default=None, help="Signing key (default: the study owner's).")
def unblind(study_dir: Path, key_file: str | None) -> None:
    """Reveal the blinding secret after the seal; it must open the lock's commitment.

    \b
    Example:
      ledger unblind my-study
    """
    from analysis._scoring import unblind_study

    result = unblind_study(study_dir, study_key(study_dir, key_file))
    codes = ", ".join(f"{arm}={code}" for arm, code in result.arm_codes.items())
    click.echo(f"blinding.revealed at seq {result.seq}; commitment {result.commitment} opens")
    click.echo(f"arm codes: {codes}")


@click.command(cls=Command)
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option("--key", "key_file", default=None, help="Signing key (default: the study owner's).")
@click.option("--json", "as_json", is_flag=True, help="Print every recorded result as JSON.")
def analyze(study_dir: Path, key_file: str | None, as_json: bool) -> None:
    """Run the locked analysis plan and decision rules; record every number.

    \b
    Example:
      ledger analyze my-study
      ledger analyze my-study --json
    """
    from analysis._analyze import analyze_study

    release_freed_memory()
    result = analyze_study(study_dir, study_key(study_dir, key_file))
    failed = [r["id"] for r in result.results if r["status"] == "failed"]
    if as_json:
        dump_json(
            {
                "first_seq": result.first_seq,
                "dataset_sha256": result.dataset_sha256,
                "failed": failed,
                "results": result.results,
                "provenance": result.provenance,
            }
        )
        return
    _print_verdicts(result.results)
    click.echo(
        f"recorded {len(result.results)} analysis.result events from seq "
        f"{result.first_seq}" + (f"; could not compute: {', '.join(failed)}" if failed else "")
    )
    for r in result.results:  # why (a hypothesis's reason is in its 'decided by' cell)
        if r["status"] == "failed" and not r["hypothesis"]:
            click.echo(f"  {r['id']}: {r['error']}")
    for r in result.results:  # docs/analysis.md §10: the reference-set tables, as seed 001's
        if r["test"] == "reference-review" and r["status"] == "ok":
            _print_reference_table(r)
    _warn_provenance(result.provenance)


def _print_verdicts(results: list[dict[str, Any]]) -> None:
    """The pre-registered verdicts, each with its caution and how it was decided."""
    from rich.markup import escape

    from analysis._analyze import describe_decision, verdict_caution

    grid = table("hypothesis", "test", "verdict", "decided by", title="pre-registered verdicts")
    for r in results:
        if r["hypothesis"]:
            verdict = escape(r["verdict"] or "-")
            caution = verdict_caution(r)
            if caution:
                verdict += f"\n[yellow]caution: {escape(caution)}[/]"
            grid.add_row(r["hypothesis"], r["test"], verdict, escape(describe_decision(r)))
    console().print(grid)


def _warn_provenance(provenance: dict[str, Any]) -> None:
    """Warn (stderr) of responses from another model and of model identity warnings."""
    mismatched = provenance.get("model_mismatches", 0)
    if mismatched:
        first = provenance["first_mismatches"][0]
        click.echo(
            f"warning: {mismatched} response(s) report a model other than the one "
            f"requested (first: seq {first['seq']}, requested {first['requested']!r}, "
            f"reported {first['reported']!r}); see ledger status",
            err=True,
        )
    for warning in provenance.get("model_identity_warnings", []):
        click.echo(f"WARNING model identity: {warning['warning']}", err=True)


@click.command("plan", cls=Command)
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--studies",
    type=int,
    default=None,
    help="Simulated studies per scenario and setting (default: [plan] studies).",
)
@click.option(
    "--force", is_flag=True, help="Run even when the estimated cost exceeds [plan] max_seconds."
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 256),
    default=None,
    help="Worker processes (default: the cores this process may use; the record is the "
    "same for any number).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan record as JSON.")
def plan_cmd(
    study_dir: Path, studies: int | None, force: bool, jobs: int | None, as_json: bool
) -> None:
    """Design diagnostics by simulation, before the lock: power, type-I error, coverage.

    Simulates the study's trial data under each [[plan.scenarios]] of study.toml (no API
    call), runs the registered analysis and decision rules on every simulated study, and
    writes plan/plan.json, which `ledger lock` locks with the study (docs/planning.md). The
    cost is estimated first; a plan slower than [plan] max_seconds refuses to start unless
    --force. The studies run in one worker process per available core unless --jobs says
    otherwise. On a locked study nothing is written: the run is compared with the locked plan.

    \b
    Example:
      ledger plan my-study
      ledger plan my-study --studies 50
      ledger plan my-study --jobs 8
    """
    from analysis._plan import available_cores, lock_warnings, plan_study

    def progress(line: str) -> None:
        click.echo(f"  {line}", err=True)

    run = plan_study(
        study_dir,
        studies=studies,
        force=force,
        progress=progress,
        jobs=jobs if jobs is not None else available_cores(),
    )
    if as_json:
        dump_json(run.record)
        return
    _print_plan(run.record)
    click.echo(
        f"cost: {run.seconds:.1f} s for {_plan_size(run.record)} simulated studies "
        f"(estimated {run.estimate_seconds:.1f} s)"
    )
    for line in lock_warnings(run.record):
        click.echo(f"WARNING {line}", err=True)
    if run.path is not None:
        click.echo(f"wrote {run.path}: `ledger lock` locks it with the study")
    elif run.locked_match is not None:
        click.echo(
            "locked plan: "
            + ("this run equals it" if run.locked_match else "this run DIFFERS from it")
        )
        if not run.locked_match:
            sys.exit(1)


def _plan_size(record: dict[str, Any]) -> int:
    return int(record["settings"]["studies"]) * len(record["results"])


def _pct(entry: dict[str, Any] | None) -> str:
    if not entry or entry.get("share") is None:
        return "-"
    return f"{entry['share'] * 100:.1f}% ±{entry['mc_se'] * 100:.1f}"


def _print_plan(record: dict[str, Any]) -> None:
    """One table per replicate setting and scenario (docs/planning.md §4)."""
    for res in record["results"]:
        grid = table(
            "hypothesis",
            "test",
            "truth",
            "P(supported)",
            "not computed",
            "coverage: registered",
            "two-sided",
            "sensitivity",
            title=f"scenario {res['scenario']}, {res['replicates']} replicates "
            f"({res['trials']} trials), {record['settings']['studies']} "
            "simulated studies",
        )
        for h in res["hypotheses"]:
            cov = h["coverage"]
            sens = (h.get("sensitivity") or {}).get("probe_by_arm_arm_residual")
            role = {"power": "power", "type-I error": "type I"}.get(h["role"], "")
            grid.add_row(
                h["hypothesis"] + (" *" if h["primary"] else ""),
                h["test"],
                f"{h['truth'] * 100:+.1f} pp",
                f"{_pct(h['supported'])} {role}".strip(),
                _pct(h["not_computed"]),
                _pct(cov.get("registered")),
                _pct(cov.get("two_sided")),
                _pct(sens),
            )
        console().print(grid)
    click.echo(
        "* primary; coverage ± its Monte Carlo SE; sensitivity: the probe-by-arm model "
        "with a residual variance per arm (Satterthwaite t); every interval in the JSON"
    )


def _print_reference_table(result: dict[str, Any]) -> None:
    """A reference-set review table as seed 001's Table 2 (agreement) and Appendix G (either)."""
    values = result["values"]
    grid = table(
        "set",
        "criterion",
        "≥1 removal",
        "≥1 addition",
        "mean rem./item",
        "mean add./item",
        title=f"{result['id']}: {values['reviewed']} items reviewed by "
        f"{len(values['reviewers'])} reviewer(s)",
    )

    def share(cell: dict[str, Any]) -> str:
        if cell["share"] is None:
            return "-"
        return f"{100 * cell['share']:.0f}% ({cell['items']}/{cell['n']})"

    for name, row in values["sets"].items():
        for criterion in ("agreement", "either"):
            c = row[criterion]
            means = [
                ("-" if c[k] is None else f"{c[k]:.2f}")
                for k in ("mean_removals", "mean_additions")
            ]
            grid.add_row(name, criterion, share(c["commission"]), share(c["omission"]), *means)
    console().print(grid)


@click.command("export", cls=Command)
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Replace a non-empty DIRECTORY.")
@click.option("--key", "key_file", default=None, help="Signing key (default: the study owner's).")
@click.option(
    "--public",
    is_flag=True,
    help="Write the public archive: leave out what the locked [privacy] withholds.",
)
@click.option(
    "--annex",
    "annex",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="With --public: the sealed annex file to write (the withheld data).",
)
@click.option(
    "--auditor",
    "auditors",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --public: an auditor's public key file (repeatable).",
)
def export_cmd(
    study_dir: Path,
    directory: Path,
    force: bool,
    key_file: str | None,
    public: bool,
    annex: Path | None,
    auditors: tuple[Path, ...],
) -> None:
    """Write the OSF-style archive of an analysed study into DIRECTORY.

    Records export.created (the hash of every archive file) and a final checkpoint first,
    so the archived ledger covers the whole archive. Written to a temporary directory and
    renamed into place. With --public (a study with a locked [privacy] policy), every blob
    and file the policy withholds is left out of DIRECTORY and committed in export.created;
    the withheld data is written to the --annex file, encrypted to each --auditor
    (docs/privacy.md).

    \b
    Example:
      ledger export my-study my-study-archive
      ledger verify my-study-archive
      ledger auditor-key irb-auditor keys/
      ledger export my-study public/ --public --annex study.annex \\
          --auditor keys/irb-auditor.x25519.pub
      ledger verify public/ --annex study.annex --identity keys/irb-auditor.x25519
    """
    from analysis._export import PublicExport, export_study

    if (annex is not None or auditors) and not public:
        raise click.UsageError("--annex and --auditor go with --public")
    if public and annex is None:
        raise click.UsageError("--public needs --annex FILE (where the withheld data goes)")
    options = PublicExport(annex, tuple(auditors)) if public and annex is not None else None
    release_freed_memory()
    result = export_study(
        study_dir, directory, study_key(study_dir, key_file), force=force, public=options
    )
    click.echo(
        f"exported {result.files} files ({result.bytes:,} bytes) to {result.directory}; "
        f"export.created at seq {result.export_seq}"
    )
    if options is not None:
        click.echo(f"withheld data sealed to {len(auditors)} auditor(s) in {options.annex}")
    click.echo(
        f"check it: ledger verify {result.directory}  (or: cd {result.directory} && "
        "sha256sum -c MANIFEST.sha256)"
    )


@click.command("auditor-key", cls=Command)
@click.argument("name")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def auditor_key(name: str, directory: Path) -> None:
    """Make an auditor's X25519 key pair for sealed annexes (docs/privacy.md).

    Writes NAME.x25519 (the secret key, mode 0600: the auditor keeps it) and NAME.x25519.pub
    (the public key, for 'ledger export --public --auditor'). Never overwrites a file.

    \b
    Example:
      ledger auditor-key irb-auditor keys/
    """
    from analysis._annex import generate_auditor_key

    secret, public = generate_auditor_key(name, directory)
    click.echo(f"secret key {secret} (keep it), public key {public} (give it to the exporter)")


@click.command("report", cls=Command)
@click.argument("study_dir", metavar="STUDY", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the HTML report here (default: FIGURES/report.html).",
)
@click.option(
    "--figures",
    "figures_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Figure directory (default: STUDY/report).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts and files as JSON.")
def report_cmd(
    study_dir: Path, html_file: Path | None, figures_dir: Path | None, as_json: bool
) -> None:
    """Print the verdicts and write figures and a self-contained HTML report.

    Reads the analysis.result events (run 'ledger analyze' first), the locked protocol and
    its amendments; verifies the ledger; flags simulated data. Exploratory results are
    labelled "Exploratory (not pre-registered)" everywhere.

    \b
    Example:
      ledger report my-study
      ledger report my-study --html my-study.html --figures figures/
      ledger report my-study --json
    """
    from analysis._report import build_report, render_terminal

    release_freed_memory()
    result = build_report(study_dir, figures_dir, html_path=html_file)
    if as_json:
        dump_json(
            {
                "study": str(result.root),
                "simulated": result.simulated,
                "verification": {"ok": result.verification.ok},
                "hypotheses": result.hypotheses,
                "results": result.results,
                "figures": [str(f.path) for f in result.figures],
                "html": str(result.html_path),
            }
        )
        return
    render_terminal(result, console())
    for figure in result.figures:
        click.echo(f"figure: {figure.path}")
    click.echo(f"report: {result.html_path}")


@click.command("view", cls=Command)
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Port to serve on (default: 8765, or the next free one).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind; anything but the loopback needs --public.",
)
@click.option(
    "--public",
    is_flag=True,
    help="Allow a non-local --host (anyone who reaches it sees the study).",
)
@click.option("--open", "open_browser", is_flag=True, help="Open the overview in a browser.")
@click.option(
    "--bundle",
    "bundle_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write a static site of the archive into this folder instead.",
)
@click.option("--force", is_flag=True, help="With --bundle: replace a non-empty folder.")
def view(
    path: Path,
    port: int | None,
    host: str,
    public: bool,
    open_browser: bool,
    bundle_dir: Path | None,
    force: bool,
) -> None:
    """Browse a study (live while 'ledger run' writes) or an archive in the browser.

    Pages: the overview (protocol as locked, progress, cost, verdicts, verification), the
    trial table (server-side filters and paging), each trial (request as sent, every
    attempt, parse and score, event seqs with inclusion proofs) and a comparison of one item
    across arms. Until blinding.revealed a trial shows only its arm code, item and response.
    An archive is verified in the background; a failure is shown, and browsing goes on.
    Reads only: the study's ledger is opened read-only and never locked.

    \b
    Example:
      ledger view my-study
      ledger view my-study-archive --port 8800 --open
      ledger view my-study-archive --bundle my-study-site
    """
    from analysis.view._viewer import LOOPBACK_HOSTS, bind, open_viewer, serve, write_bundle

    if bundle_dir is not None:
        result = write_bundle(path, bundle_dir, force=force)
        click.echo(
            f"wrote {result.files} files ({result.trials} trials) to {result.directory} "
            f"in {result.seconds:.1f} s; verification {result.verification.upper()}"
        )
        click.echo(
            f"open {result.directory / 'index.html'}; re-check the archive with: "
            f"python -m verify {path}"
        )
        return
    if host not in LOOPBACK_HOSTS and not public:
        raise click.UsageError(
            f"--host {host} would serve the study beyond this machine; add --public to do so"
        )
    if host not in LOOPBACK_HOSTS:
        click.echo(
            f"warning: serving on {host}: anyone who can reach it can read the study", err=True
        )
    viewer = open_viewer(path)
    try:
        sock, note = bind(host, port)
    except BaseException:
        viewer.index.close()
        raise
    if note:
        click.echo(note)
    trials = viewer.index.query("SELECT COUNT(*) FROM trials")[0][0]
    state = "blind" if viewer.blind else "unblinded"

    def ready(url: str) -> None:
        click.echo(
            f"ledger view: {viewer.index.kind} {path} ({trials} trials, {state}) on "
            f"{url}  (Ctrl-C to stop)"
        )
        sys.stdout.flush()
        if open_browser:
            import webbrowser

            webbrowser.open(url)

    # a loopback viewer answers only to its own names (DNS rebinding); a public one to any
    serve(viewer, sock, on_ready=ready, hosts=LOOPBACK_HOSTS if host in LOOPBACK_HOSTS else None)
