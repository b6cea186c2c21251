"""Store benchmark, part two: many ``ledger run`` workers on one PostgreSQL study against one.

Run through ``benchmarks/bench_store.py workers`` (its first part measures signed appends)::

    python benchmarks/bench_store.py workers [--workers 4] [--latency-ms 200]
        [--concurrency 8] [--replicates 24] [--pg-url postgresql://USER@HOST:PORT/DB] [--json]

``workers`` (issue 34, ``docs/trials.md`` §8): the same never-run study of the
``prompt-tumbling-e`` template (35 trials per replicate), its ledger on PostgreSQL, run to the
end once by one ``ledger run`` process and once by ``--workers`` processes started together,
every one at ``--concurrency``, against the fake Messages server
(``tests/support/fake_messages.py``, its own process) answering after ``--latency-ms``. Each side
gets a fresh schema. Reported: trials per second over the trial phase (first ``trial.requested`` to
last outcome, from the events' times) and over the wall clock (first process start to last exit,
start-up included), and the ratio N workers / one worker of each. Target: >= 3x with 4 workers at
200 ms.

Without ``--pg-url`` a throwaway PostgreSQL server is started from the installed binaries
(``tests/support/pg_server.py``) and stopped at the end. Timings are never asserted in tests; this
script is where they are read. On a shared machine the figures move with the neighbours' load, which
is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "support"))

from bench_runner import fake_server  # noqa: E402

from ledger import Ledger, SigningKey  # noqa: E402

TEMPLATE = "prompt-tumbling-e"
CLI = [sys.executable, "-c", "from ledger.cli import main; main()"]


def load_average() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


@contextlib.contextmanager
def postgres(url: str | None, base: Path) -> Iterator[str]:
    """Yield a libpq URL to a database for the benchmark's schemas (a throwaway server if None)."""
    if url is not None:
        yield url
        return
    from pg_server import PgServer, find_bindir  # type: ignore[import-not-found]

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("no PostgreSQL binaries found (apt-get install postgresql), or --pg-url")
    server = PgServer(base / "pg", bindir)
    server.init()
    server.start()
    try:
        server.createdb("ledgers")
        yield server.url()
    finally:
        server.stop()


def make_study(root: Path, url: str, schema: str, replicates: int, home: Path) -> Path:
    """A locked, never-run template study whose ledger is the schema ``schema`` at ``url``."""
    from runner import lock_study, new_study

    key_file = home / "keys" / f"{TEMPLATE}-owner.key"
    if key_file.exists():  # both studies are the template's: one owner key
        key = SigningKey.load(key_file)
    else:
        key = SigningKey.generate(f"prompt-ledger.local/{TEMPLATE}/owner")
        key_file.parent.mkdir(parents=True, exist_ok=True)
        key.save(key_file)
    sep = "&" if "?" in url else "?"
    new_study(root, TEMPLATE, key, store=f"{url}{sep}schema={schema}")
    spec = root / "study.toml"
    text = spec.read_text(encoding="utf-8")
    if "replicates = 30" not in text:
        raise RuntimeError(f"{spec}: the template no longer says 'replicates = 30'")
    spec.write_text(text.replace("replicates = 30", f"replicates = {replicates}"), "utf-8")
    lock_study(root, key)
    return root


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def run_workers(
    study: Path, store: str, base_url: str, n: int, concurrency: int, env: dict[str, str]
) -> dict[str, Any]:
    """Run the study to the end with ``n`` ``ledger run`` processes; return its figures."""
    args = ["--base-url", base_url, "--concurrency", str(concurrency)]
    started = time.monotonic()
    command = [*CLI, "run", str(study), *args]
    procs = [
        subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(n)
    ]
    for proc in procs:
        _out, err = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"ledger run exited {proc.returncode}: {err.decode()[-2000:]}")
    wall = time.monotonic() - started
    with Ledger.open(store, readonly=True) as log:
        events = [e for e in log.events() if e.kind.startswith("trial.")]
    requests = [e for e in events if e.kind == "trial.requested"]
    answered = [e for e in events if e.kind == "trial.responded"]
    first, last = _seconds(requests[0].time), _seconds(events[-1].time)
    sessions = {e.body["session"] for e in requests}
    return {
        "workers": n,
        "trials": len(answered),
        "requests": len(requests),
        "sessions_that_sent": len(sessions),
        "phase_s": round(last - first, 3),
        "wall_s": round(wall, 3),
        "trials_per_s": round(len(answered) / (last - first), 2),
        "wall_trials_per_s": round(len(answered) / wall, 2),
    }


def bench_workers(args: argparse.Namespace) -> dict[str, Any]:
    """One worker against ``--workers`` workers on fresh copies of one study (see the module)."""
    base = Path(tempfile.mkdtemp(prefix="bench-store-"))
    os.chmod(base, 0o755)  # a throwaway server runs as the postgres user when this is root
    home = base / "home"
    env = dict(os.environ, ANTHROPIC_API_KEY="test", PROMPT_LEDGER_HOME=str(home))
    os.environ["PROMPT_LEDGER_HOME"] = str(home)
    out: dict[str, Any] = {
        "latency_ms": args.latency_ms,
        "concurrency": args.concurrency,
        "load_start": load_average(),
    }
    try:
        with postgres(args.pg_url, base) as url, fake_server(args.latency_ms) as base_url:
            rows = []
            for n in (1, args.workers):
                schema = f"bench_workers_{n}_{os.getpid()}"
                study = make_study(base / f"study{n}", url, schema, args.replicates, home)
                sep = "&" if "?" in url else "?"
                store = f"{url}{sep}schema={schema}"
                rows.append(run_workers(study, store, base_url, n, args.concurrency, env))
                with Ledger.open(store) as log:  # drop the schema afterwards
                    log._conn.raw.execute(f'DROP SCHEMA "{schema}" CASCADE')
        one, many = rows
        out.update(
            {
                "one": one,
                "many": many,
                "ratio": round(many["trials_per_s"] / one["trials_per_s"], 2),
                "wall_ratio": round(many["wall_trials_per_s"] / one["wall_trials_per_s"], 2),
                "load_end": load_average(),
            }
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return out


def report_workers(out: dict[str, Any]) -> None:
    """Print the workers comparison."""
    print(f"load average at start: {out['load_start']}; at end: {out['load_end']}")
    print(
        f"fake server latency {out['latency_ms']} ms, concurrency {out['concurrency']} per worker"
    )
    for row in (out["one"], out["many"]):
        print(
            f"  {row['workers']} worker(s): {row['trials']} trials, {row['trials_per_s']:.1f} "
            f"trials/s over the trial phase ({row['phase_s']:.2f} s), "
            f"{row['wall_trials_per_s']:.1f} trials/s wall ({row['wall_s']:.2f} s); "
            f"{row['sessions_that_sent']} session(s) sent requests"
        )
    n = out["many"]["workers"]
    print(
        f"ratio {n} workers / 1 worker: {out['ratio']:.2f}x (trial phase), "
        f"{out['wall_ratio']:.2f}x (wall); target >= 3x"
    )


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and run the chosen benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    w = sub.add_parser("workers", help="N ledger run workers on one PostgreSQL study vs one")
    w.add_argument("--workers", type=int, default=4)
    w.add_argument("--latency-ms", type=float, default=200.0)
    w.add_argument("--concurrency", type=int, default=8)
    w.add_argument("--replicates", type=int, default=24, help="35 trials each")
    w.add_argument("--pg-url", default=None, help="a database to use (default: a throwaway)")
    w.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.what == "workers":
        out = bench_workers(args)
        if args.json:
            print(json.dumps(out, indent=2))
        else:
            report_workers(out)


if __name__ == "__main__":
    main()
