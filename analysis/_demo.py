"""``ledger demo``: the whole PROMPT story offline, on the simulated model.

Scaffold the tumbling-E study, make keys, lock it (registration checkpoint), run the locked
schedule on the ``simulated`` backend, score blind, seal, unblind, analyse, report, export the
archive, verify it with the independent verifier, then change one byte in a copy and show the
verifier naming the place at fault. Keys and the blinding secret live in ``DIR/home``, outside
the study folder, as they would for a real study. A witness (``DIR/witness``), served in this
process on 127.0.0.1 while the study is locked and run, cosigns its checkpoints, and the final
verification trusts its key (``docs/witness.md`` §8.4).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from ledger import LedgerError, SigningKey
from ledger.cliutil import table

TEMPLATE = "prompt-tumbling-e"


@dataclass(frozen=True)
class DemoTemplate:
    """What the demo needs to know of a template: its replicates and a one-line summary."""

    replicates: int
    summary: str


DEMO_TEMPLATES: dict[str, DemoTemplate] = {
    "prompt-tumbling-e": DemoTemplate(
        30, "arms A-E, seven probes (PNG), truth table, H1-H4 (the paper's Experiment 1)"
    ),
    "prompt-rotation": DemoTemplate(
        1,
        "arms A-E, 16 synthetic crops annotated with their orientation, 4 rotations each "
        "(64 PNGs), H-mammo-1 and H-mammo-2 (the paper's Experiment 2)",
    ),
    "green-shielding": DemoTemplate(
        2,
        "30 synthetic patient queries (HealthCareMagic format), reference sets built per "
        "query by a semantic extractor and three reference models (2 of 3 agree), input (raw, "
        "4 partial and full neutralizations) x safety reminder: 12 cells x 2 target models, the "
        "physicians' replies as a data arm, a neutralizer and two judges, H1-H4 (seed 001's "
        "tradeoff)",
    ),
    "green-shielding-pilot": DemoTemplate(
        3,
        "42 synthetic exam questions (MedXpertQA format; the first 38 in range, screened to 30 "
        "diagnostic ones), the open-ended default and seven perturbations (no tests, no "
        "symptoms, misleading belief, multiple choice, binary agreement, urgency, first person), "
        "screener, splitter, rewriter and correctness judge, success rate and perturbed accuracy "
        "(seed 001's Table 1)",
    ),
}
"""The templates ``ledger demo --template`` runs."""


@dataclass(frozen=True)
class DemoResult:
    """Where the demo put things and whether verification behaved."""

    study: Path
    archive: Path
    tampered: Path
    report: Path | None
    verified: bool
    tamper_caught: bool
    seconds: float


def _step(console: Console, number: int, title: str, detail: str = "") -> None:
    console.print(f"[bold cyan]{number:>2}. {title}[/] {detail}")


def _ledger_command() -> str:
    """How the user can run this ``ledger``: plain ``ledger`` if that is on PATH, else its path.

    The README's first command runs ``.venv/bin/ledger demo`` without activating the venv, so a
    bare ``ledger`` in the printed commands would be "command not found".
    """
    argv0 = Path(sys.argv[0])
    if argv0.name != "ledger" or not argv0.is_file():
        return "ledger"
    found = shutil.which("ledger")
    if found and Path(found).resolve() == argv0.resolve():
        return "ledger"
    return shlex.quote(str(argv0.absolute()))


def tamper_copy(archive: Path, target: Path) -> str:
    """Copy ``archive`` to ``target`` and change one byte of a recorded response; return its path.

    The manifest is rewritten to match, as a careful forger would; the signed events and the
    ``export.created`` hashes still catch it.
    """
    import hashlib

    shutil.copytree(archive, target)
    attempts = (target / "trials" / "attempts.csv").read_text(encoding="utf-8").splitlines()
    header = attempts[0].split(",")
    column = header.index("response_sha256")
    digest = next(line.split(",")[column] for line in attempts[1:] if line.split(",")[column])
    blob = target / "blobs" / digest
    data = bytearray(blob.read_bytes())
    index = data.find(b"RIGHT")
    if index < 0:
        index = len(data) // 2
    data[index] = ord("L") if data[index] != ord("L") else ord("R")  # one byte: RIGHT -> LIGHT
    blob.write_bytes(bytes(data))
    lines = []
    for path in sorted(p for p in target.rglob("*") if p.is_file()):
        rel = path.relative_to(target).as_posix()
        if rel != "MANIFEST.sha256":
            lines.append(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {rel}\n")
    (target / "MANIFEST.sha256").write_text("".join(lines), encoding="utf-8")
    return f"blobs/{digest}"


WITNESS_NAME = "prompt-ledger.local/demo-witness"


def demo_witness(directory: Path, owner: SigningKey, study: Path | list[Path]) -> str:
    """Create the demo's witness in ``directory``, knowing each study's log; return its vkey.

    With a fixed clock (``$PROMPT_LEDGER_FIXED_CLOCK``) its key is derived from the owner's
    vkey, so a fixed owner key and clock give the same bytes; otherwise it is random.
    """
    from ledger import Ledger
    from ledger.witness import CosignerKey, Witness

    key = None
    if os.environ.get("PROMPT_LEDGER_FIXED_CLOCK"):
        seed = hashlib.sha256(f"prompt-ledger demo witness {owner.vkey}".encode()).digest()
        key = CosignerKey(WITNESS_NAME, seed)
    origins = []
    for one in study if isinstance(study, list) else [study]:
        with Ledger.open(one / "ledger.db", readonly=True) as log:
            origins.append(log.origin)
    with Witness.init(directory, WITNESS_NAME, key) as witness:
        for origin in origins:
            witness.add_log(origin, [owner.vkey])
        return witness.key.vkey


def demo_witness_clock() -> Callable[[], int] | None:
    """The demo witness's clock: with a fixed ledger clock, its start plus one second a call."""
    value = os.environ.get("PROMPT_LEDGER_FIXED_CLOCK")
    if not value:
        return None
    start = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    ticks = itertools.count(int(start.timestamp()) + 1)
    return lambda: next(ticks)


def declare_witness(study: Path, vkey: str, url: str) -> None:
    """Add the witness to ``study.toml`` (before lock): quorum 1, cosigning every 50 trials."""
    spec = study / "study.toml"
    name = vkey.split("+")[0]
    spec.write_text(
        spec.read_text(encoding="utf-8")
        + f'\n[[witnesses]]\nname = "{name}"\nvkey = "{vkey}"\nurl = "{url}"\n'
        + "\n[witnessing]\nquorum = 1\ninterval_trials = 50\n",
        encoding="utf-8",
    )


def _demo_home(directory: Path) -> Path:
    """Create the (empty) demo ``directory`` and point ``PROMPT_LEDGER_HOME`` at its ``home``."""
    if directory.exists() and any(directory.iterdir()):
        raise LedgerError(f"demo directory {directory} is not empty; choose another")
    directory.mkdir(parents=True, exist_ok=True)
    home = directory / "home"
    os.environ["PROMPT_LEDGER_HOME"] = str(home)
    return home


def _demo_owner(console: Console, home: Path, template: str, where: str) -> tuple[SigningKey, Path]:
    """Make the demo's owner key in ``home/keys`` (outside ``where``); return it, its vkey file."""
    keys = home / "keys"
    keys.mkdir(parents=True, mode=0o700)
    owner = SigningKey.generate(f"prompt-ledger.local/{template}/owner")
    owner.save(keys / f"{template}-owner.key")
    vkey_file = keys / f"{template}-owner.vkey"
    vkey_file.write_text(owner.vkey + "\n", encoding="utf-8")
    _step(console, 1, "keys", f"owner {owner.actor} (private key in {keys}, outside {where})")
    return owner, vkey_file


def _lock_and_run(console: Console, study: Path, owner: SigningKey) -> tuple[Any, Any]:
    from runner import RunDisplay, RunOptions, SimulatedBackend, lock_study, run_study

    locked = lock_study(study, owner)
    _step(
        console,
        3,
        "lock",
        f"{locked.artifacts} files locked, {locked.trials} trials scheduled "
        f"(schedule sha256 {locked.schedule_sha256[:16]}...); registration checkpoint, "
        f"cosigned by the witness, to publish: {locked.checkpoint_path}",
    )

    _step(
        console,
        4,
        "run",
        "every trial on the simulated backend (offline, deterministic); "
        "the witness cosigns the session's start, every 50 trials and its stop",
    )
    with RunDisplay(console, "simulated run", priced=False) as display:
        result = run_study(study, owner, SimulatedBackend(), RunOptions(concurrency=16), display)
    console.print(
        f"    {result.counters.responded} responses recorded; {result.final} of "
        f"{result.final + result.pending} trials final; "
        f"{result.witness_wait:.2f} s spent waiting on the witness"
    )
    return locked, result


def run_demo(
    directory: Path, console: Console, *, replicates: int | None = None, template: str = TEMPLATE
) -> DemoResult:
    """Run the demonstration in ``directory`` (created; must not exist or be empty).

    ``template`` is one of :data:`DEMO_TEMPLATES` (one study; ``replicates``, default the
    template's, replaces its replicates per arm and stimulus) or a template of several studies
    (``medmcqa-prompt-sensitivity``: every study of it in turn, :func:`run_suite_demo`;
    ``replicates`` does not apply).
    """
    from runner import SUITES

    if template in SUITES:
        if replicates is not None:
            raise LedgerError(
                f"demo: --replicates does not apply to {template}: its studies "
                "declare their own replicates"
            )
        return run_suite_demo(directory, console, template)
    from analysis._analyze import analyze_study
    from analysis._export import export_study
    from analysis._scoring import score_study, unblind_study
    from ledger.witness_server import LocalWitness
    from runner import new_study
    from verify import render_report, verify_path

    started = time.monotonic()
    if template not in DEMO_TEMPLATES:
        raise LedgerError(
            f"demo: unknown template {template!r}; available: "
            f"{', '.join([*DEMO_TEMPLATES, *SUITES])}"
        )
    chosen = DEMO_TEMPLATES[template]
    directory = Path(directory)
    home = _demo_home(directory)
    console.print(
        "[bold]PROMPT Ledger demo[/]: a locked, randomized, blinded prompt experiment, fully "
        "offline. [yellow]The model is the built-in SIMULATED backend, not a real model.[/]"
    )

    owner, vkey_file = _demo_owner(console, home, template, "the study")

    study = directory / "study"
    new_study(study, template, owner)
    if replicates is not None and replicates != chosen.replicates:
        spec = study / "study.toml"
        spec.write_text(
            spec.read_text(encoding="utf-8").replace(
                f"replicates = {chosen.replicates}\n", f"replicates = {replicates}\n", 1
            ),
            encoding="utf-8",
        )
    _step(console, 2, "study", f"{study}: {chosen.summary}")

    witness_dir = directory / "witness"
    witness_vkey = demo_witness(witness_dir, owner, study)
    served = LocalWitness(witness_dir, clock=demo_witness_clock()).start()
    try:
        declare_witness(study, witness_vkey, served.url)
        console.print(
            f"    witness {witness_vkey.split('+')[0]} (its state in {witness_dir}) serving on "
            f"{served.url} in this process while the study is locked and run; the study "
            "declares it, and every checkpoint of the lock and the run needs its cosignature"
        )
        locked, _ = _lock_and_run(console, study, owner)
    finally:
        served.stop()

    scored = score_study(study, owner)
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(scored.by_status.items()))
    _step(console, 5, "score", f"blind to the arm: {statuses}; sealed at seq {scored.sealed_seq}")
    revealed = unblind_study(study, owner)
    _step(console, 6, "unblind", f"the secret opens the lock's commitment; seq {revealed.seq}")
    analysed = analyze_study(study, owner)
    _step(console, 7, "analyze", f"{len(analysed.results)} results recorded")

    # the export renders the report once, for the archive and for the study's report folder
    archive = directory / "archive"
    exported = export_study(study, archive, owner, report_dir=study / "report")
    report_path = None if exported.report is None else exported.report.html_path
    if report_path is not None:
        _step(console, 8, "report", f"{report_path}")
    _step(console, 9, "export", f"{exported.files} files, {exported.bytes:,} bytes in {archive}")

    report = verify_path(
        archive,
        trusted_keys=[owner.vkey],
        checkpoints=[locked.checkpoint_path],
        witnesses=[witness_vkey],
    )
    _step(
        console,
        10,
        "verify",
        "the independent verifier, trusting the owner key, the "
        "published registration checkpoint and the witness's key:",
    )
    render_report(report, console=console)

    tampered = directory / "archive-tampered"
    changed = tamper_copy(archive, tampered)
    bad = verify_path(
        tampered,
        trusted_keys=[owner.vkey],
        checkpoints=[locked.checkpoint_path],
        witnesses=[witness_vkey],
    )
    _step(console, 11, "tamper", f"one byte of {changed} changed, MANIFEST.sha256 rewritten:")
    render_report(bad, console=console)

    verdicts = table(
        "hypothesis", "test", "verdict", "description", title="pre-registered verdicts"
    )
    for r in analysed.results:
        if r["hypothesis"]:
            colour = "green" if r["verdict"] == "supported" else "yellow"
            verdicts.add_row(r["hypothesis"], r["test"], f"[{colour}]{r['verdict']}[/]", r["title"])
    console.print(verdicts)
    if template == "green-shielding":
        shown = table(
            "metric",
            *GREEN_COLUMNS,
            title="seed 001's tradeoff, as the analysis "
            "recorded it (descriptive.ddx; no safety reminder; cf. the seed's App. F)",
        )
        for row in green_figures(analysed.results):
            shown.add_row(*row)
        console.print(shown)
        levels = table(
            "metric",
            *GREEN_LEVELS,
            title="seed 001's Figure 5: partial "
            "neutralization by factor group, both models pooled (no safety reminder)",
        )
        for row in green_figures(analysed.results, GREEN_LEVEL_CELLS):
            levels.add_row(*row)
        console.print(levels)
        strata = table(
            "factor label",
            "group",
            "value",
            "trials raw/full",
            *(f"{label} raw -> full" for _, label in GREEN_STRATA_METRICS),
            title="by the annotator's factor labels (descriptive.covariates; both "
            "models pooled, no safety reminder)",
        )
        for row in green_strata(analysed.results):
            strata.add_row(*row)
        console.print(strata)
    if template == "green-shielding-pilot":
        default, rows = pilot_figures(analysed.results)
        shown = table(
            "category",
            "factor",
            "success rate (%)",
            "perturbed acc. (%)",
            title=f"seed 001's Table 1, as the analysis recorded it "
            f"(descriptive.qr_bootstrap; default acc. {default})",
        )
        for row in rows:
            shown.add_row(*row)
        console.print(shown)
    console.print("[yellow]Simulated data: these verdicts demonstrate the method only.[/]")
    seconds = time.monotonic() - started
    console.print(f"\n[bold]Done in {seconds:.0f} s.[/] Study: {study}   Archive: {archive}")
    if report_path:
        console.print(f"Report: {report_path}")
    ledger = _ledger_command()
    q = shlex.quote
    console.print("\n[bold]Verify it yourself:[/]")
    console.print(
        f"  {ledger} verify {q(str(archive))} --trusted-key @{q(str(vkey_file))} "
        f"--checkpoint {q(str(locked.checkpoint_path))} "
        f"--witness @{q(str(witness_dir / 'witness.vkey'))}"
    )
    console.print(f"  (cd {q(str(archive))} && sha256sum -c --quiet MANIFEST.sha256)")
    console.print("[bold]Tamper and verify:[/]")
    console.print(
        f'  t="$(mktemp -d)/archive" && cp -r {q(str(archive))} "$t" && printf X | '
        f'dd of="$t/README.md" bs=1 seek=10 conv=notrunc status=none && '
        f'{ledger} verify "$t"'
    )
    console.print(
        f"  {ledger} verify {q(str(tampered))}    # fails, naming the response that changed"
    )
    console.print("[bold]Browse it, trial by trial:[/]")
    console.print(
        f"  {ledger} view {q(str(study))}       # the study: requests, responses, "
        "scores, comparisons"
    )
    console.print(f"  {ledger} view {q(str(archive))}     # the archive, verified as you browse")
    if not report.ok or bad.ok:
        raise LedgerError("demo: verification did not behave as expected (see the tables above)")
    return DemoResult(study, archive, tampered, report_path, report.ok, not bad.ok, seconds)


GREEN_COLUMNS = (
    "broad raw",
    "broad neutralized",
    "concise raw",
    "concise neutralized",
    "physicians",
)
"""The columns of the green-shielding demo's table: each target model on the raw and the fully
neutralized input (no safety reminder), and the physicians' replies (a data arm)."""
GREEN_CELLS = (
    ("llm.raw.none", "broad"),
    ("llm.full.none", "broad"),
    ("llm.raw.none", "concise"),
    ("llm.full.none", "concise"),
    ("physicians", ""),
)
GREEN_METRICS = (
    ("plausibility", "Plausibility"),
    ("h_coverage", "H-coverage"),
    ("s_coverage", "S-coverage"),
    ("breadth", "Breadth"),
    ("grounding_rate", "Evidence"),
    ("indirect_rate", "Inference"),
    ("uncertainty", "Uncertainty"),
)


GREEN_LEVELS = ("raw", "content", "format", "tone", "format+tone", "full")
GREEN_LEVEL_CELLS = tuple(
    (f"llm.{level}.none", "")
    for level in ("raw", "content", "format", "tone", "format_tone", "full")
)
"""The input levels of the green-shielding factorial without the reminder, models pooled."""


def green_figures(
    results: list[dict[str, Any]], cells: tuple[tuple[str, str], ...] = GREEN_CELLS
) -> list[tuple[str, ...]]:
    """The seed's Appendix F table (or another set of ``cells``) from ``descriptive.ddx``.

    One row per metric, one column per ``(arm, model)`` of ``cells`` (model ``""``: the arm
    pooled over models, as for the physicians' arm, which no model answered): the mean over the
    trials where the metric is defined, as a percentage (breadth: a number), as ``analysis``
    recorded it.
    """
    desc = next((r for r in results if r.get("id") == "descriptive.ddx"), None)
    values = (desc or {}).get("values") or {}
    rows = []
    for metric, label in GREEN_METRICS:
        shown: list[str] = []
        for arm, model in cells:
            entry = (
                (values.get("arms") or {}).get(arm)
                if not model
                else ((values.get("arm_model") or {}).get(arm) or {}).get(model)
            )
            mean = ((entry or {}).get(metric) or {}).get("mean")
            if not isinstance(mean, int | float):
                shown.append("–")
            else:
                shown.append(f"{mean:.2f}" if metric == "breadth" else f"{100 * mean:.1f}%")
        rows.append((label, *shown))
    return rows


GREEN_STRATA_METRICS = (
    ("plausibility", "plausibility"),
    ("h_coverage", "H-coverage"),
    ("s_coverage", "S-coverage"),
    ("breadth", "breadth"),
)
GREEN_STRATA_ARMS = ("llm.raw.none", "llm.full.none")


def green_strata(results: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """Rows of the demo's factor-label table, from the recorded ``descriptive.covariates``.

    Per label (perturbable first, then the indicators, as declared) and value (``true``,
    ``false``): the analysable trials of the raw and the fully neutralized cell (no reminder)
    whose item the annotator gave that value, and each metric's mean there, raw -> full, as
    the analysis recorded it (a percentage; breadth a number; ``–`` where undefined).
    """
    desc = next((r for r in results if r.get("id") == "descriptive.covariates"), None)
    values = (desc or {}).get("values") or {}
    strata = values.get("strata") or {}
    rows: list[tuple[str, ...]] = []
    for label in [*(values.get("perturbable") or []), *(values.get("indicators") or [])]:
        entry = strata.get(label) or {}
        for value in ("true", "false"):
            cells = [
                ((entry.get("levels") or {}).get(value) or {}).get(arm) or {}
                for arm in GREEN_STRATA_ARMS
            ]
            shown = []
            for metric, _ in GREEN_STRATA_METRICS:
                means = [((cell.get(metric) or {}).get("mean")) for cell in cells]
                shown.append(
                    " -> ".join(
                        "–"
                        if not isinstance(m, int | float)
                        else f"{m:.2f}"
                        if metric == "breadth"
                        else f"{100 * m:.0f}%"
                        for m in means
                    )
                )
            trials = "/".join(str(cell.get("trials", 0)) for cell in cells)
            rows.append((label, str(entry.get("group", "")), value, trials, *shown))
    return rows


PILOT_ROWS = (
    ("Content", "Lack of Test/Vital Results", "pilot.no_tests"),
    ("Content", "Lack of Symptom History", "pilot.no_symptoms"),
    ("Content", "Contains Misleading Belief", "belief"),
    ("Format", "Multiple-choice Selection", "pilot.choice"),
    ("Format", "Binary Agreement", "binary"),
    ("Tone", "Urgency and Anxiety", "pilot.urgency"),
    ("Tone", "First-Person Perspective", "pilot.first_person"),
)
"""Seed 001's Table 1 rows: category, factor, and the perturbed arm of the pilot template."""
PILOT_DEFAULT = "pilot.default"


def _pm(stat: Any) -> str:
    """A share as the seed prints it: ``estimate ± half-width`` in percent, one decimal."""
    if not isinstance(stat, dict) or not isinstance(stat.get("estimate"), int | float):
        return "–"
    return f"{100 * stat['estimate']:.1f} ± {100 * stat['half_width']:.1f}"


def pilot_figures(results: list[dict[str, Any]]) -> tuple[str, list[tuple[str, ...]]]:
    """Seed 001's Table 1 from ``descriptive.qr_bootstrap``, as analysis recorded it.

    The default accuracy, and per perturbation its success rate and perturbed (global)
    accuracy, each ``estimate ± half-width`` of the 95% (question, run) bootstrap interval,
    pooled over models.
    """
    desc = next((r for r in results if r.get("id") == "descriptive.qr_bootstrap"), None)
    entries = ((desc or {}).get("values") or {}).get("entries") or []
    pooled: dict[str, dict[str, Any]] = {}
    for entry in entries:
        contrast = entry.get("contrast")
        if (
            isinstance(contrast, list)
            and len(contrast) == 2
            and contrast[1] == PILOT_DEFAULT
            and entry.get("outcome") == "trial_accuracy"
        ):
            row = next((r for r in entry.get("rows", []) if r.get("model") is None), None)
            if row is not None:
                pooled[contrast[0]] = row
    default = _pm(next(iter(pooled.values()), {}).get("default"))
    rows: list[tuple[str, ...]] = [
        (
            category,
            factor,
            _pm(pooled.get(arm, {}).get("success_rate")),
            _pm(pooled.get(arm, {}).get("perturbed")),
        )
        for category, factor, arm in PILOT_ROWS
    ]
    return default, rows


def suite_figures(results: list[dict[str, Any]], plan: dict[str, Any]) -> list[tuple[str, ...]]:
    """One row per recorded hypothesis result of a kind with a ``demo_row`` (seed 002's).

    ``(hypothesis, test, what, figures, verdict)``: position bias of each arm, flip rate, vote
    against the mean per-order accuracy, majority against the mean sample, as ``analysis``
    recorded them (the verified numbers, not recomputed here; the report's table of seed 002's
    registered statistics shows the same values).
    """
    from analysis import statistics

    tests = {h["id"]: h for h in plan.get("hypotheses") or []}
    rows: list[tuple[str, ...]] = []
    for r in results:
        h = tests.get(str(r.get("hypothesis") or "").split("@")[0])
        kind = statistics.kind_of(h) if h is not None else None
        if h is None or kind is None or kind.demo_row is None:
            continue
        what, figures = kind.demo_row(h, r.get("values") or {})
        if r.get("status") != "ok":
            figures = f"not computed: {r.get('error')}"
        rows.append((str(r["hypothesis"]), h["test"], what, figures, str(r.get("verdict") or "")))
    return rows


def _suite_part(
    console: Console,
    part: Path,
    owner: SigningKey,
    archives: Path,
    checkpoint: Path,
    witness_vkey: str,
) -> tuple[Path | None, bool, list[tuple[str, ...]]]:
    """Score, unblind, analyse, report, export and verify one study of a suite.

    Returns (its report's HTML, whether its archive verified, its seed-002 figure rows).
    """
    from analysis._analyze import analyze_study
    from analysis._export import export_study
    from analysis._scoring import score_study, unblind_study
    from ledger import Ledger
    from runner import protocol_event
    from verify import render_report, verify_path

    scored = score_study(part, owner)
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(scored.by_status.items()))
    unblind_study(part, owner)
    analysed = analyze_study(part, owner)
    # the export renders the report once, for the archive and for the study's report folder
    exported = export_study(part, archives / part.name, owner, report_dir=part / "report")
    html = None if exported.report is None else exported.report.html_path
    report = verify_path(
        archives / part.name,
        trusted_keys=[owner.vkey],
        checkpoints=[checkpoint],
        witnesses=[witness_vkey],
    )
    _step(
        console,
        5,
        f"{part.name}: score, unblind, analyze, report, export, verify",
        f"scored blind ({statuses}); {len(analysed.results)} results; report {html}; "
        f"{exported.files} files in {archives / part.name}; verify: "
        f"{'[green]VERIFIED[/]' if report.ok else '[red]FAILED[/]'} ({report.size} "
        f"events, {len(report.checks)} checks, {len(report.failures)} failed)",
    )
    if not report.ok:
        render_report(report, console=console)
    with Ledger.open(part / "ledger.db", readonly=True) as log:
        protocol = protocol_event(log)
    plan = protocol.body if protocol is not None else {}
    rows = [(part.name, *row) for row in suite_figures(analysed.results, plan)]
    return html, report.ok, rows


def _print_suite_figures(console: Console, figures: list[tuple[str, ...]]) -> None:
    """Seed 002's phenomena of every study of the suite, as the analysis recorded them."""
    shown = table(
        "study",
        "hypothesis",
        "test",
        "what",
        "figures",
        "verdict",
        title="seed 002's phenomena, as the analysis recorded them",
    )
    for row in figures:
        colour = "green" if row[-1] == "supported" else "yellow"
        shown.add_row(*row[:-1], f"[{colour}]{row[-1]}[/]")
    console.print(shown)


def run_suite_demo(directory: Path, console: Console, template: str) -> DemoResult:
    """Every study of a template of several studies (``runner._new.SUITES``), end to end.

    One owner key (outside the studies) and one witness serve all of them. Each study is
    locked (witnessed), run on the simulated backend, scored blind, unblinded, analysed,
    reported, exported to ``DIR/archives/<part>`` and verified, trusting the owner key, its
    registration checkpoint and the witness. Then one byte of the first study's archive is
    changed (the manifest rewritten) and verification must fail. Last, the registered seed-002
    statistics are printed as recorded: position bias per arm, flip rates, permutation voting
    against the mean per-order accuracy, self-consistency.
    """
    from ledger.witness_server import LocalWitness
    from runner import new_template
    from verify import render_report, verify_path

    started = time.monotonic()
    directory = Path(directory)
    home = _demo_home(directory)
    console.print(
        f"[bold]PROMPT Ledger demo, template {template}[/]: seed 002's design as locked, "
        "randomized, blinded studies, fully offline. [yellow]The models are the built-in "
        "SIMULATED backend, not real models.[/]"
    )
    owner, vkey_file = _demo_owner(console, home, template, "the studies")

    root = directory / "studies"
    parts = [made.root for made in new_template(root, template, owner, study_id=template)]
    _step(
        console,
        2,
        "studies",
        f"{root}: {', '.join(p.name for p in parts)} (one parser and "
        "one item template each; README.md there says why)",
    )

    witness_dir = directory / "witness"
    witness_vkey = demo_witness(witness_dir, owner, parts)
    served = LocalWitness(witness_dir, clock=demo_witness_clock()).start()
    checkpoints: dict[Path, Path] = {}
    try:
        for part in parts:
            declare_witness(part, witness_vkey, served.url)
        console.print(
            f"    witness {witness_vkey.split('+')[0]} serving on {served.url} while "
            "the studies are locked and run"
        )
        for part in parts:
            console.print(f"[bold]study {part.name}[/]")
            locked, _ = _lock_and_run(console, part, owner)
            checkpoints[part] = Path(locked.checkpoint_path)
    finally:
        served.stop()

    archives = directory / "archives"
    verified: dict[Path, bool] = {}
    figures: list[tuple[str, ...]] = []
    first_report: Path | None = None
    for part in parts:
        html, verified[part], rows = _suite_part(
            console, part, owner, archives, checkpoints[part], witness_vkey
        )
        first_report = first_report or html
        figures += rows

    first = parts[0]
    tampered = directory / "archive-tampered"
    changed = tamper_copy(archives / first.name, tampered)
    bad = verify_path(
        tampered,
        trusted_keys=[owner.vkey],
        checkpoints=[checkpoints[first]],
        witnesses=[witness_vkey],
    )
    _step(
        console,
        6,
        "tamper",
        f"one byte of {changed} in a copy of the {first.name} archive "
        "changed, MANIFEST.sha256 rewritten:",
    )
    render_report(bad, console=console)
    _print_suite_figures(console, figures)
    console.print("[yellow]Simulated data: these figures demonstrate the method only.[/]")
    seconds = time.monotonic() - started
    console.print(f"\n[bold]Done in {seconds:.0f} s.[/] Studies: {root}   Archives: {archives}")
    ledger = _ledger_command()
    q = shlex.quote
    console.print("\n[bold]Verify it yourself:[/]")
    for part in parts:
        console.print(
            f"  {ledger} verify {q(str(archives / part.name))} --trusted-key "
            f"@{q(str(vkey_file))} --checkpoint {q(str(checkpoints[part]))} "
            f"--witness @{q(str(witness_dir / 'witness.vkey'))}"
        )
    console.print(f"  {ledger} verify {q(str(tampered))}    # fails, naming what changed")
    console.print(f"  {ledger} view {q(str(archives / first.name))}     # trial by trial")
    ok = all(verified.values())
    if not ok or bad.ok:
        raise LedgerError("demo: verification did not behave as expected (see above)")
    return DemoResult(root, archives, tampered, first_report, ok, not bad.ok, seconds)
