"""Runner benchmark: ``run_study`` against plain SDK calls, both on the fake Messages server.

    python benchmarks/bench_runner.py [--latencies 0,200] [--concurrency 1,8,32,128]
        [--rounds 10] [--min-trials 20] [--fast-trials 350] [--quick] [--json]

The fake Messages API server (``tests/support/fake_messages.py``) runs as a separate process, so its
threads do not share this process's GIL. For each server latency and each concurrency, in the
same run, this measures:

  * plain: the trials' exact request bodies (:class:`runner._request.RequestBuilder`) sent with
    plain ``anthropic.AsyncAnthropic(max_retries=0).messages.create(...)``, one task per
    trial, at most ``concurrency`` at once (an ``asyncio.Semaphore``): no ledger and none of
    this project's code on the request path (``max_retries=0`` as in the runner, which does its
    own retries; the fake server injects no faults, so none happen either way);
  * runner: :func:`runner._execute.run_study` with the ``anthropic`` backend on a fresh copy of a
    locked, never-run study (every trial appends ``trial.requested`` and ``trial.responded``,
    each a signed, durable SQLite transaction);

and prints trials per second of both, their ratio (runner end to end, and over the trial phase
only, from the first progress call to the last), and the ledger's share of the runner's wall
time (time spent inside ``Ledger.append_many``, on the runner's writer thread, timed by wrapping the
method in this script only).
Trials per configuration: ``rounds x concurrency`` (at least ``min-trials``) with latency, and
``fast-trials`` at 0 ms. Target: at 200 ms latency and concurrency 32, runner >= 0.9 x plain.
Timings are never asserted in tests; this script is where they are read.

``--e2e`` measures end to end instead, every side as its own process timed from start to exit
(imports, set-up and close included), against the same fake server (its own process):

  * ``ledger run STUDY --base-url URL --concurrency C`` on a fresh copy of a locked, never-run
    study of the template (1,050 trials: 5 arms x 7 probes x 30 replicates), its preflight too;
  * ``benchmarks/bare_sdk.py``: the same 1,050 request bodies, in the same order, sent with a
    bare ``AsyncAnthropic(max_retries=0).messages.create`` script (no project code imported);
  * when ``inspect`` (``inspect-ai``, the ``bench`` extra or ``--inspect PATH``) is found, the
    same 1,050 requests (same messages, image, model, ``max_tokens`` and ``temperature``)
    through ``inspect eval benchmarks/inspect_bodies_task.py`` (``--inspect-at``: where).

Repetitions are interleaved (each repetition runs every side of every configuration once, the
sides' order alternating), and the median of each side is compared: ratio = ``ledger run``
trials/s over bare trials/s. The machine's load average is printed at the start and the end.
Targets (docs/trials.md): >= 0.95 at 200 ms for concurrency 8 and 32, >= 0.9 at 200 ms / 128,
>= 0.85 at 0 ms / 32, and ``ledger run`` >= 3 x ``inspect eval`` at 200 ms / 32.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anthropic

from ledger import Ledger, SigningKey
from runner import (
    AnthropicBackend,
    Counters,
    RequestBuilder,
    RunOptions,
    load_state,
    lock_study,
    new_study,
    run_study,
)
from runner.spec import load_study

ROOT = Path(__file__).resolve().parent.parent
FAKE_SERVER = ROOT / "tests" / "support" / "fake_messages.py"
TEMPLATE = "prompt-tumbling-e"
TRIALS_PER_REPLICATE = 35
TARGET = (200.0, 32, 0.9)  # latency ms, concurrency, runner / plain


@dataclass
class Row:
    """The figures of one (latency, concurrency) configuration."""

    latency_ms: float
    concurrency: int
    trials: int
    plain_per_s: float
    runner_per_s: float
    runner_phase_per_s: float
    ratio: float
    phase_ratio: float
    ledger_share: float
    ledger_ms_per_append: float
    appends: int
    setup_ms: float


@contextlib.contextmanager
def fake_server(latency_ms: float, log: Path | None = None) -> Iterator[str]:
    """Run ``tests/support/fake_messages.py`` as a child process; yield its base URL.

    With ``log``, the server writes one line there per message it answered with 200.
    """
    logging = ["--log", str(log)] if log is not None else []
    proc = subprocess.Popen(
        [
            sys.executable,
            str(FAKE_SERVER),
            "--port",
            "0",
            "--latency-ms",
            str(latency_ms),
            *logging,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "PORT":
            raise RuntimeError(f"fake server did not start (first line {line!r})")
        yield f"http://127.0.0.1:{line[1]}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class AppendTimer:
    """Wrap ``Ledger.append_many`` (on the class, for this script only) to sum the time inside it.

    ``Ledger.append`` goes through ``append_many`` too; the runner's group writer calls it from
    its own thread, so the time counted overlaps the network wait rather than adding to it.
    ``calls`` counts events, not transactions.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    @contextlib.contextmanager
    def installed(self) -> Iterator[AppendTimer]:
        """Time every ``Ledger.append_many`` while the block runs."""
        original: Callable[..., Any] = Ledger.__dict__["append_many"]

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            stored = original(*args, **kwargs)
            self.seconds += time.perf_counter() - start
            self.calls += len(stored)
            return stored

        setattr(Ledger, "append_many", timed)  # noqa: B010 (mypy refuses assigning to a method)
        try:
            yield self
        finally:
            setattr(Ledger, "append_many", original)  # noqa: B010


def locked_study(root: Path, trials: int) -> Path:
    """A locked, never-run tumbling-E study with at least ``trials`` trials in its schedule."""
    replicates = max(1, math.ceil(trials / TRIALS_PER_REPLICATE))
    key = SigningKey.generate("prompt-ledger.local/prompt-tumbling-e/owner")
    new_study(root, TEMPLATE, key)
    spec = root / "study.toml"
    text = spec.read_text(encoding="utf-8")
    if "replicates = 30" not in text:
        raise RuntimeError(f"{spec}: the template no longer says 'replicates = 30'")
    spec.write_text(text.replace("replicates = 30", f"replicates = {replicates}"), "utf-8")
    lock_study(root, key)
    key.save(root.parent / "owner.key")
    return root


def request_bodies(study_root: Path, trials: int) -> list[dict[str, Any]]:
    """The first ``trials`` pending trials' request bodies, as the runner would build them."""
    study = load_study(study_root)
    with Ledger.open(study_root / "ledger.db", readonly=True) as log:
        pending = load_state(study, log).pending()[:trials]
    builder = RequestBuilder(study)
    return [builder.body(trial) for trial in pending]


async def _plain(base_url: str, bodies: list[dict[str, Any]], conc: int) -> float:
    client = anthropic.AsyncAnthropic(api_key="test", base_url=base_url, max_retries=0)
    gate = asyncio.Semaphore(conc)

    async def call(body: dict[str, Any]) -> None:
        # anthropic 2.x no longer names ``temperature``: it travels in extra_body, so the JSON
        # sent is the same as the runner's
        named = {k: body[k] for k in ("model", "max_tokens", "messages")}
        extra = {k: v for k, v in body.items() if k not in named}
        async with gate:
            message = await client.messages.create(**named, extra_body=extra or None)
        if message.type != "message":
            raise RuntimeError(f"plain call answered {message.type!r}")

    start = time.perf_counter()
    try:
        await asyncio.gather(*(call(body) for body in bodies))
    finally:
        await client.close()
    return time.perf_counter() - start


def plain_rate(base_url: str, bodies: list[dict[str, Any]], concurrency: int) -> float:
    """Trials per second of plain ``AsyncAnthropic().messages.create`` calls, no ledger."""
    elapsed = asyncio.run(_plain(base_url, bodies, concurrency))
    return len(bodies) / elapsed


def runner_rates(
    base_url: str, locked: Path, work: Path, trials: int, concurrency: int
) -> tuple[float, float, AppendTimer, float]:
    """(end-to-end trials/s, trial-phase trials/s, append timer, setup+close seconds)."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(locked, work)  # a fresh ledger: locked, nothing run
    key = SigningKey.load(locked.parent / "owner.key")
    backend = AnthropicBackend(api_key="test", base_url=base_url)
    ticks: list[float] = []

    def progress(counters: Counters, final: int, total: int) -> None:
        ticks.append(time.perf_counter())

    options = RunOptions(concurrency=concurrency, max_trials=trials, jitter_seed=1)
    timer = AppendTimer()
    with timer.installed():
        start = time.perf_counter()
        result = run_study(work, key, backend, options, progress)
        elapsed = time.perf_counter() - start
    if result.fatal or result.counters.responded != trials or result.counters.retries:
        raise RuntimeError(f"runner did not answer every trial cleanly: {result}")
    phase = ticks[-1] - ticks[0]
    shutil.rmtree(work)
    return trials / elapsed, trials / phase, timer, elapsed - phase


def trials_for(latency_ms: float, concurrency: int, args: argparse.Namespace) -> int:
    """How many trials make a stable figure for one configuration."""
    if latency_ms <= 0:
        return int(args.fast_trials)
    return max(int(args.min_trials), int(args.rounds) * concurrency)


def run(args: argparse.Namespace) -> list[Row]:
    """Measure every configuration; return one row each."""
    latencies = [float(x) for x in args.latencies.split(",")]
    concurrencies = [int(x) for x in args.concurrency.split(",")]
    most = max(trials_for(lat, c, args) for lat in latencies for c in concurrencies)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        os.environ["PROMPT_LEDGER_HOME"] = str(Path(tmp) / "home")
        locked = locked_study(Path(tmp) / "locked" / "study", most)
        all_bodies = request_bodies(locked, most)
        work = Path(tmp) / "run" / "study"
        for latency in latencies:
            with fake_server(latency) as base_url:
                plain_rate(base_url, all_bodies[: min(8, most)], 8)  # warm up server and SDK
                for conc in concurrencies:
                    n = trials_for(latency, conc, args)
                    plain = plain_rate(base_url, all_bodies[:n], conc)
                    total, phase, timer, setup = runner_rates(base_url, locked, work, n, conc)
                    wall = n / total
                    rows.append(
                        Row(
                            latency_ms=latency,
                            concurrency=conc,
                            trials=n,
                            plain_per_s=plain,
                            runner_per_s=total,
                            runner_phase_per_s=phase,
                            ratio=total / plain,
                            phase_ratio=phase / plain,
                            ledger_share=timer.seconds / wall,
                            ledger_ms_per_append=1000 * timer.seconds / max(timer.calls, 1),
                            appends=timer.calls,
                            setup_ms=1000 * setup,
                        )
                    )
                    if args.progress:
                        print(f"  ... {latency:g} ms, concurrency {conc}: done", file=sys.stderr)
    return rows


def report(rows: list[Row]) -> None:
    """Print the table and the target."""
    print(
        f"runner benchmark: run_study vs plain AsyncAnthropic calls, fake server in a separate "
        f"process, {os.cpu_count()} cores"
    )
    head = (
        f"  {'latency':>7} {'conc':>4} {'trials':>6} {'plain/s':>9} {'runner/s':>9} "
        f"{'ratio':>6} {'phase/s':>9} {'ph.ratio':>8} {'ledger':>7} {'ms/append':>9} "
        f"{'setup ms':>8}"
    )
    print(head)
    for r in rows:
        print(
            f"  {r.latency_ms:>5g}ms {r.concurrency:>4} {r.trials:>6} {r.plain_per_s:>9.1f} "
            f"{r.runner_per_s:>9.1f} {r.ratio:>6.2f} {r.runner_phase_per_s:>9.1f} "
            f"{r.phase_ratio:>8.2f} {r.ledger_share:>6.1%} {r.ledger_ms_per_append:>9.2f} "
            f"{r.setup_ms:>8.0f}"
        )
    print(
        "  (ratio = runner end to end / plain; phase = first to last trial outcome; ledger = "
        "share of the runner's wall time inside Ledger.append_many (writer thread, "
        "overlapping the network); ms/append = per event; setup = integrity check, "
        "session open, run.stopped and checkpoint)"
    )
    latency, conc, limit = TARGET
    for r in rows:
        if r.latency_ms == latency and r.concurrency == conc:
            met = "met" if r.ratio >= limit else "MISSED"
            print(
                f"  target runner >= {limit} x plain at {latency:g} ms, concurrency {conc}: "
                f"{r.ratio:.2f} {met}"
            )


# ---------------------------------------------------------------------------- end to end

BARE_SDK = ROOT / "benchmarks" / "bare_sdk.py"
INSPECT_TASK = ROOT / "benchmarks" / "inspect_bodies_task.py"
#: (latency ms, concurrency, least ratio ledger run / bare SDK) of the end-to-end targets
E2E_TARGETS = ((200.0, 8, 0.95), (200.0, 32, 0.95), (200.0, 128, 0.9), (0.0, 32, 0.85))
#: (latency ms, concurrency, least ratio ledger run / inspect eval)
INSPECT_TARGET = (200.0, 32, 3.0)


@dataclass
class Side:
    """The repetitions of one side (bare SDK, ledger run or inspect eval) of a configuration."""

    wall_s: list[float]
    cpu_s: list[float]  # user + system CPU of the process and its children

    @property
    def wall(self) -> float:
        """Median seconds, process start to exit."""
        return statistics.median(self.wall_s)

    @property
    def cpu(self) -> float:
        """Median CPU seconds."""
        return statistics.median(self.cpu_s)


@dataclass
class E2ERow:
    """End-to-end figures of one (latency, concurrency): interleaved repetitions of each side."""

    latency_ms: float
    concurrency: int
    trials: int
    bare: Side
    ledger: Side
    inspect: Side

    @property
    def ratio(self) -> float:
        """``ledger run`` trials/s over bare-SDK trials/s, from the medians."""
        return self.bare.wall / self.ledger.wall

    @property
    def paired_ratio(self) -> float:
        """The median of each repetition's ratio (its two runs ran back to back)."""
        pairs = zip(self.bare.wall_s, self.ledger.wall_s, strict=True)
        return statistics.median(bare / led for bare, led in pairs)

    @property
    def cpu_ratio(self) -> float:
        """Bare-SDK CPU seconds over ``ledger run`` CPU seconds (medians)."""
        return self.bare.cpu / self.ledger.cpu

    @property
    def inspect_ratio(self) -> float | None:
        """``ledger run`` trials/s over ``inspect eval`` trials/s (medians), if measured."""
        return self.inspect.wall / self.ledger.wall if self.inspect.wall_s else None


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` shows them."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def ledger_command() -> list[str]:
    """The ``ledger`` console script of this interpreter (else its module entry point)."""
    script = Path(sys.executable).with_name("ledger")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from ledger.cli import main; main()"]


def inspect_command(given: str | None) -> list[str] | None:
    """The ``inspect`` command to use: ``given``, else beside this interpreter, else on PATH."""
    if given:
        return [given]
    beside = Path(sys.executable).with_name("inspect")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("inspect")
    return [found] if found else None


def e2e_study(tmp: Path, replicates: int) -> tuple[Path, Path, Path, int]:
    """Lock a never-run template study; write its bodies. (study, key file, bodies, trials)."""
    root = tmp / "locked" / "study"
    key = SigningKey.generate("prompt-ledger.local/prompt-tumbling-e/owner")
    new_study(root, TEMPLATE, key)
    spec = root / "study.toml"
    text = spec.read_text(encoding="utf-8")
    if "replicates = 30" not in text:
        raise RuntimeError(f"{spec}: the template no longer says 'replicates = 30'")
    if replicates != 30:
        spec.write_text(text.replace("replicates = 30", f"replicates = {replicates}"), "utf-8")
    lock_study(root, key)
    key_file = key.save(tmp / "owner.key")
    study = load_study(root)
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        pending = load_state(study, log).pending()
    builder = RequestBuilder(study)
    bodies = tmp / "bodies.jsonl"
    with bodies.open("w", encoding="utf-8") as handle:
        for trial in pending:
            handle.write(json.dumps(builder.body(trial), ensure_ascii=False) + "\n")
    return root, Path(key_file), bodies, len(pending)


def _timed(
    command: list[str], env: dict[str, str], what: str, cwd: Path | None = None
) -> tuple[float, float, str]:
    """Run ``command`` to its end: (seconds start to exit, CPU seconds, standard output)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False, cwd=cwd)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{what} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        )
    return elapsed, cpu, proc.stdout


def time_bare(
    base_url: str, bodies: Path, concurrency: int, env: dict[str, str]
) -> tuple[float, float]:
    """(seconds, CPU seconds) of ``bare_sdk.py`` sending every body once, start to exit."""
    command = [sys.executable, str(BARE_SDK), base_url, str(bodies), str(concurrency)]
    elapsed, cpu, out = _timed(command, env, "bare_sdk.py")
    if not out.startswith("answered "):
        raise RuntimeError(f"bare_sdk.py said {out!r}")
    return elapsed, cpu


def time_ledger(
    base_url: str,
    locked: Path,
    key_file: Path,
    work: Path,
    trials: int,
    concurrency: int,
    env: dict[str, str],
) -> tuple[float, float]:
    """(seconds, CPU seconds) of ``ledger run`` on a fresh copy of ``locked``, start to exit."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(locked, work)
    command = [
        *ledger_command(),
        "run",
        str(work),
        "--base-url",
        base_url,
        "--concurrency",
        str(concurrency),
        "--key",
        str(key_file),
    ]
    elapsed, cpu, _ = _timed(command, env, "ledger run")
    with Ledger.open(work / "ledger.db", readonly=True) as log:
        responded = sum(1 for _ in log.events("trial.responded"))
        failed = sum(1 for _ in log.events("trial.failed"))
    if responded != trials or failed:
        raise RuntimeError(f"ledger run answered {responded} of {trials} trials, {failed} failed")
    shutil.rmtree(work)
    return elapsed, cpu


def time_inspect(
    command: list[str],
    base_url: str,
    bodies: Path,
    model: str,
    concurrency: int,
    logs: Path,
    env: dict[str, str],
) -> tuple[float, float]:
    """(seconds, CPU seconds) of ``inspect eval`` over the same bodies, start to exit."""
    shutil.rmtree(logs, ignore_errors=True)
    args = [
        *command,
        "eval",
        INSPECT_TASK.name,
        "-T",
        f"bodies={bodies}",
        "--model",
        f"anthropic/{model}",
        "--model-base-url",
        base_url,
        "--max-connections",
        str(concurrency),
        "--max-samples",
        str(concurrency),
        "--max-retries",
        "0",
        "--fail-on-error",
        "0",
        "--display",
        "none",
        "--log-dir",
        str(logs),
        "--no-score",
    ]
    elapsed, cpu, _ = _timed(args, env, "inspect eval", cwd=INSPECT_TASK.parent)  # relative task
    return elapsed, cpu


def _lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as handle:
        return sum(1 for _ in handle)


PROJECT_PACKAGES = ("ledger", "runner", "analysis", "verify")


def compile_project() -> None:
    """Compile the project's bytecode in place, as ``pip install`` does for an installed package.

    The SDK's modules are compiled (pip did it when it installed them), but an editable install
    of this checkout is not, and with ``PYTHONDONTWRITEBYTECODE`` set (as in some sandboxes and
    CI images) every ``ledger run`` would compile every module of the project from source again
    (about 0.2 s): a cost of the checkout, not of the runner. ``__pycache__`` is git-ignored.
    """
    import compileall

    for package in PROJECT_PACKAGES:
        compileall.compile_dir(str(ROOT / package), quiet=1)


def run_e2e(args: argparse.Namespace) -> tuple[list[E2ERow], str, str]:
    """Measure every configuration end to end; (rows, load at start, load at end)."""
    load_start = load_average()
    latencies = [float(x) for x in args.latencies.split(",")]
    concurrencies = [int(x) for x in args.concurrency.split(",")]
    inspect = inspect_command(args.inspect) if not args.no_inspect else None
    inspect_at = {
        (float(lat), int(conc))
        for lat, conc in (pair.split(":") for pair in args.inspect_at.split(",") if pair)
    }
    rows: dict[tuple[float, int], E2ERow] = {}
    compile_project()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp_name:
        tmp = Path(tmp_name)
        env = dict(os.environ, ANTHROPIC_API_KEY="test", PROMPT_LEDGER_HOME=str(tmp / "home"))
        env.pop("ANTHROPIC_BASE_URL", None)
        locked, key_file, bodies, trials = e2e_study(tmp, args.replicates)
        model = json.loads(bodies.read_text(encoding="utf-8").splitlines()[0])["model"]
        answers = tmp / "answers.jsonl"
        run_dir = tmp / "run" / "study"
        for latency in latencies:
            with fake_server(latency, answers) as base_url:
                time_bare(base_url, bodies, 8, env)  # warm the server, the disk cache, Python
                for rep in range(args.repetitions):
                    for conc in concurrencies:
                        row = rows.setdefault(
                            (latency, conc),
                            E2ERow(latency, conc, trials, Side([], []), Side([], []), Side([], [])),
                        )
                        sides: list[tuple[str, Callable[[], tuple[float, float]], Side]] = [
                            (
                                "bare",
                                functools.partial(time_bare, base_url, bodies, conc, env),
                                row.bare,
                            ),
                            (
                                "ledger",
                                functools.partial(
                                    time_ledger,
                                    base_url,
                                    locked,
                                    key_file,
                                    run_dir,
                                    trials,
                                    conc,
                                    env,
                                ),
                                row.ledger,
                            ),
                        ]
                        if inspect is not None and (latency, conc) in inspect_at:
                            sides.append(
                                (
                                    "inspect",
                                    functools.partial(
                                        time_inspect,
                                        inspect,
                                        base_url,
                                        bodies,
                                        model,
                                        conc,
                                        tmp / "inspect-logs",
                                        env,
                                    ),
                                    row.inspect,
                                )
                            )
                        if rep % 2:
                            sides.reverse()
                        for name, measure, side in sides:
                            before = _lines(answers)
                            wall, cpu = measure()
                            side.wall_s.append(wall)
                            side.cpu_s.append(cpu)
                            answered = _lines(answers) - before
                            if answered < trials:  # ledger run adds its preflight request
                                raise RuntimeError(
                                    f"{name}: the server answered {answered} of {trials} requests"
                                )
                            if args.progress:
                                print(
                                    f"  ... {latency:g} ms, concurrency {conc}, repetition "
                                    f"{rep + 1}: {name} {wall:.2f} s, CPU {cpu:.2f} s (load "
                                    f"{load_average()})",
                                    file=sys.stderr,
                                )
    return list(rows.values()), load_start, load_average()


def report_e2e(rows: list[E2ERow], load_start: str, load_end: str, inspect: bool) -> None:
    """Print the end-to-end table, the ratios and the targets."""
    reps = len(rows[0].bare.wall_s) if rows else 0
    print(
        f"runner benchmark, end to end: ledger run vs a bare AsyncAnthropic script, each a "
        f"process timed start to exit, fake server in its own process; {os.cpu_count()} "
        f"cores; median of {reps} interleaved repetitions"
    )
    print(f"  load average at start: {load_start}")
    print("  the project's bytecode compiled first, as an installed package's is (compile_project)")
    print(
        f"  {'latency':>7} {'conc':>4} {'trials':>6} {'bare s':>7} {'ledger s':>8} "
        f"{'bare/s':>7} {'ledger/s':>8} {'ratio':>5} {'paired':>6} {'cpu':>5} "
        f"{'inspect s':>9} {'vs inspect':>10}"
    )
    for r in rows:
        ins = f"{r.inspect.wall:>9.2f}" if r.inspect.wall_s else f"{'-':>9}"
        vs = f"{r.inspect_ratio:>10.2f}" if r.inspect_ratio is not None else f"{'-':>10}"
        print(
            f"  {r.latency_ms:>5g}ms {r.concurrency:>4} {r.trials:>6} {r.bare.wall:>7.2f} "
            f"{r.ledger.wall:>8.2f} {r.trials / r.bare.wall:>7.1f} "
            f"{r.trials / r.ledger.wall:>8.1f} {r.ratio:>5.2f} {r.paired_ratio:>6.2f} "
            f"{r.cpu_ratio:>5.2f} {ins} {vs}"
        )
    for r in rows:
        line = f"    runs {r.latency_ms:g} ms / {r.concurrency}:"
        for name, side in (("bare", r.bare), ("ledger", r.ledger), ("inspect", r.inspect)):
            if side.wall_s:
                runs = " ".join(f"{w:.2f}" for w in side.wall_s)
                cpus = " ".join(f"{c:.2f}" for c in side.cpu_s)
                line += f" {name} {runs} (CPU {cpus});"
        print(line.rstrip(";"))
    print(
        "  (ratio = ledger run trials/s / bare SDK trials/s, from the medians; paired = the "
        "median of each repetition's ratio; cpu = bare CPU s / ledger run CPU s; vs inspect "
        "= ledger run trials/s / inspect eval trials/s)"
    )
    if not inspect:
        print(
            "  inspect eval: not measured (inspect-ai not found: see docs/trials.md "
            "'Benchmarks', or give --inspect PATH)"
        )
    print(f"  load average at end: {load_end}")
    by_key = {(r.latency_ms, r.concurrency): r for r in rows}
    for latency, conc, limit in E2E_TARGETS:
        row = by_key.get((latency, conc))
        if row is not None:
            met = "met" if row.ratio >= limit else "MISSED"
            print(
                f"  target ledger run >= {limit} x bare SDK at {latency:g} ms, concurrency "
                f"{conc}: {row.ratio:.2f} {met}"
            )
    latency, conc, limit = INSPECT_TARGET
    row = by_key.get((latency, conc))
    if row is not None and row.inspect_ratio is not None:
        met = "met" if row.inspect_ratio >= limit else "MISSED"
        print(
            f"  target ledger run >= {limit:g} x inspect eval at {latency:g} ms, concurrency "
            f"{conc}: {row.inspect_ratio:.2f} {met}"
        )


def main() -> None:
    """Parse arguments, run, print."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--e2e",
        action="store_true",
        help="end to end: ledger run and a bare SDK script as processes",
    )
    parser.add_argument("--latencies", default="0,200", help="server latencies, ms")
    parser.add_argument(
        "--concurrency", default=None, help="default 1,8,32,128 (8,32,128 with --e2e)"
    )
    parser.add_argument("--rounds", type=int, default=10, help="trials = rounds x concurrency")
    parser.add_argument("--min-trials", type=int, default=20)
    parser.add_argument("--fast-trials", type=int, default=350, help="trials at 0 ms latency")
    parser.add_argument("--repetitions", type=int, default=5, help="--e2e: interleaved runs")
    parser.add_argument(
        "--replicates",
        type=int,
        default=30,
        help="--e2e: the template's replicates (30: 1,050 trials)",
    )
    parser.add_argument("--inspect", default=None, help="--e2e: the inspect command to use")
    parser.add_argument(
        "--inspect-at",
        default="200:32",
        help="--e2e: latency:concurrency pairs that run inspect eval too",
    )
    parser.add_argument("--no-inspect", action="store_true")
    parser.add_argument("--dir", default=None, help="where the studies are written")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=(
            "0 ms, concurrency 1 and 8, 35 trials; with --e2e: 0 ms, concurrency 8, 70 trials, "
            "one repetition, inspect eval too if found"
        ),
    )
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.e2e:
        if args.concurrency is None:
            args.concurrency = "8,32,128"
        if args.quick:
            args.latencies, args.concurrency, args.repetitions = "0", "8", 1
            args.replicates, args.inspect_at = 2, "0:8"
        e2e_rows, load_start, load_end = run_e2e(args)
        if args.json:
            print(
                json.dumps(
                    {
                        "load_start": load_start,
                        "load_end": load_end,
                        "rows": [asdict(r) for r in e2e_rows],
                    },
                    indent=2,
                )
            )
            return
        report_e2e(e2e_rows, load_start, load_end, any(r.inspect.wall_s for r in e2e_rows))
        return
    if args.concurrency is None:
        args.concurrency = "1,8,32,128"
    if args.quick:
        args.latencies, args.concurrency, args.fast_trials = "0", "1,8", 35
    rows = run(args)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return
    report(rows)


if __name__ == "__main__":
    main()
