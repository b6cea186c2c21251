"""Read-path benchmark: tiles fetched per second through nginx and through ``ledger serve``.

    python benchmarks/bench_serve.py [--events 50000] [--seconds 5] [--clients 4] [--quick]

A ledger of ``--events`` events is published (``ledger tiles``' writer, ``docs/service.md``)
into a directory that a real nginx (Debian's ``nginx-light``, the configuration of
``tests/support/nginx_server.py``, one worker) and ``ledger serve`` (uvicorn, in a thread of this
process) both serve on 127.0.0.1. For ``--seconds`` each, ``--clients`` threads with keep-alive
HTTP/1.1 connections (httpx) fetch random full level-0 hash tiles (8,192 bytes) and random entry
bundles. Printed, for this machine and this run: the publishing rate (events per second into
tiles, bundles and blobs), tile and bundle fetches per second and MB/s for each server, the p50
and p99 latency of one fetch, and the time ``ledger monitor``'s check takes from size 0 over
nginx. The clients run in this Python process, so on few cores the figures are bounded by the
client as much as by the server. Timings are never asserted; ``--quick`` shrinks everything.

``python benchmarks/bench_serve.py append [--seconds 5] [--repeat 3] [--clients 1,4] [--batch
1,20] [--own-logs] [--durable] [--turn-seconds S]`` measures the append API instead (the
services' ``--turn-seconds``, 0 for no turns, docs/service.md §7): a throwaway PostgreSQL cluster
(``tests/support/pg_server.py``: ``fsync`` off like the tests' cluster, or PostgreSQL's defaults
with ``--durable``) holds the logs. For each events-per-call and number of clients, three paths run
in turn, ``--repeat`` times, each run on a fresh log: (a) direct (each client its own
:class:`ledger.Ledger` on PostgreSQL), (b) through one and (c) through four ``ledger serve``
processes on that PostgreSQL (each client a remote ledger spreading its requests over all of
them: it signs, the service checks and sequences). Each client is its own process (clients in
threads of one process shared a GIL, which decided who won a race for the head); all clients
append to one log, or each to its own with ``--own-logs`` (a service hosting many studies).
Printed per row: the median rate and each run's, p50 and p99 latency of one call (re-signing
after a 409 included), the CPU time per event of the clients, the service processes and
PostgreSQL's processes (read from /proc: what the appends cost, whoever else loads the
machine), the 409s and the most a single call lost, the appends that asked for their turn
before signing (``Ledger-Turn: wait``, docs/service.md §7), the median ratio of the rate to the same
round's direct rate (target, issue 35: >= 0.5x) and the ratio of the CPU costs. The load
average is printed before and after each row: on a shared machine the rates move with it.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))

from nginx_server import Nginx, available  # type: ignore[import-not-found]  # noqa: E402

from ledger import FixedClock, Ledger, SigningKey  # noqa: E402
from ledger._tiles import ENTRIES, TileRef  # noqa: E402
from ledger.tiles_server import LocalTiles  # noqa: E402
from runner import StudyPublisher  # noqa: E402

ORIGIN = "bench.example/serve"
OWNER_NAME, OWNER_SEED = "bench.example/owner", b"\x07" * 32


def build(base: Path, events: int) -> tuple[Path, SigningKey, float]:
    """A ledger of ``events`` events published into base/www/log; seconds spent publishing."""
    key = SigningKey.generate("bench.example/owner")
    study = base / "study"
    study.mkdir()
    with Ledger.create(study / "ledger.db", origin=ORIGIN, key=key, clock=FixedClock()) as log:
        batch = 1000
        while log.size < events:
            from ledger import EventSpec

            n = min(batch, events - log.size)
            log.append_many(
                [EventSpec("note.added", {"n": log.size + i, "text": "x" * 200}) for i in range(n)],
                key=key,
            )
        log.sign_checkpoint(key)
    www = base / "www"
    start = time.perf_counter()
    StudyPublisher(study, www / "log").publish_once()
    return www, key, time.perf_counter() - start


def hammer(
    url: str, paths: list[str], seconds: float, clients: int
) -> tuple[int, int, list[float]]:
    """Fetch random paths with ``clients`` threads for ``seconds``: (count, bytes, latencies)."""
    import httpx

    counts = [0] * clients
    sizes = [0] * clients
    latencies: list[list[float]] = [[] for _ in range(clients)]
    stop = time.perf_counter() + seconds

    def worker(i: int) -> None:
        rng = random.Random(i)
        with httpx.Client(base_url=url, timeout=10) as client:
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                response = client.get("/" + rng.choice(paths))
                latencies[i].append(time.perf_counter() - t0)
                if response.status_code != 200:
                    raise SystemExit(f"{response.url}: HTTP {response.status_code}")
                counts[i] += 1
                sizes[i] += len(response.content)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts), sum(sizes), [x for part in latencies for x in part]


def report(name: str, seconds: float, result: tuple[int, int, list[float]]) -> None:
    count, size, lat = result
    cuts = statistics.quantiles(lat, n=100)
    print(
        f"  {name:<34} {count / seconds:9.0f} /s  {size / seconds / 1e6:7.1f} MB/s  "
        f"p50 {cuts[49] * 1e3:6.2f} ms  p99 {cuts[98] * 1e3:6.2f} ms"
    )


def _client(
    url: str, seconds: float, batch: int, index: int, ready: Any, out: Any
) -> None:  # pragma: no cover - runs in a client process
    """One client process: open ``url``, wait for the others, append for ``seconds``.

    Waits on ``ready`` twice: to start together, and once more after putting its figures, so
    that its PostgreSQL backend is still there when the parent reads the CPU times.
    """
    from ledger import EventSpec

    key = SigningKey(OWNER_NAME, OWNER_SEED)
    latencies: list[float] = []
    attempts: list[int] = []
    n = 0
    with Ledger.open(url) as log:
        for _ in url.split():  # each service process opens its connection to the log now
            _ = log.size
        ready.wait()
        cpu = time.process_time()
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            before = getattr(log, "conflicts", 0)
            t0 = time.perf_counter()
            body = {"w": index, "text": "x" * 200}
            log.append_many(
                [EventSpec("artifact.locked", {**body, "n": n + j}) for j in range(batch)],
                key=key,
            )
            latencies.append(time.perf_counter() - t0)
            attempts.append(getattr(log, "conflicts", 0) - before)
            n += batch
        waits = getattr(log, "waits", 0)
        out.put((index, n, latencies, attempts, time.process_time() - cpu, waits))
        ready.wait()


@dataclass
class Run:
    """One timed run: events appended, latencies of each call, 409s lost per call, CPU seconds.

    ``cpu`` is the CPU time of the client processes, the service processes and PostgreSQL's
    processes during the run: what the appends cost the machine, whoever else loads it.
    """

    events: int
    latencies: list[float]
    lost: list[int]
    per_client: list[int]
    cpu_clients: float
    cpu_services: float
    cpu_postgres: float
    waits: int = 0
    """Appends that asked for their turn before signing (``Ledger-Turn: wait``)."""

    @property
    def cpu(self) -> float:
        """CPU seconds of every process taking part."""
        return self.cpu_clients + self.cpu_services + self.cpu_postgres


def _cpu_seconds(pids: list[int]) -> dict[int, float]:
    """User + system CPU seconds of each live process in ``pids`` (from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _postgres_pids(postmaster: int | None) -> list[int]:
    """The postmaster and its children (backends, WAL writer, checkpointer...)."""
    if postmaster is None:
        return []
    pids = [postmaster]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:
            pids.append(int(stat.parent.name))
    return pids


def _appender(
    urls: list[str],
    seconds: float,
    batch: int,
    services: list[int],
    postgres: Callable[[], list[int]],
) -> Run:
    """One client process per URL (one client per entry), appending ``batch`` events a call.

    The run is charged with the CPU time of the clients, of ``services`` (process ids) and of
    the processes ``postgres()`` lists.
    """
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Barrier(len(urls) + 1)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_client, args=(url, seconds, batch, i, ready, out))
        for i, url in enumerate(urls)
    ]
    for proc in procs:
        proc.start()
    ready.wait(timeout=120)
    before = _cpu_seconds(services + postgres())
    results = [out.get(timeout=seconds + 120) for _ in procs]
    after = _cpu_seconds(services + postgres())
    ready.wait(timeout=120)
    for proc in procs:
        proc.join(timeout=60)
        if proc.exitcode != 0:
            raise SystemExit(f"a client process failed (exit {proc.exitcode})")
    results.sort()
    spent = {pid: t - before.get(pid, 0.0) for pid, t in after.items()}
    on_services = sum(spent.get(pid, 0.0) for pid in services)
    return Run(
        sum(r[1] for r in results),
        [x for r in results for x in r[2]],
        [x for r in results for x in r[3]],
        [r[1] for r in results],
        sum(r[4] for r in results),
        on_services,
        sum(spent.values()) - on_services,
        sum(r[5] for r in results),
    )


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


def bench_append(
    seconds: float,
    client_counts: list[int],
    batches: list[int],
    *,
    repeat: int,
    durable: bool,
    own_logs: bool,
    turn_seconds: float = 2.0,
) -> None:
    """Appends per second directly to PostgreSQL and through 1 and 4 `ledger serve` processes.

    For each (batch, clients) the three paths run in turn, ``repeat`` times, each run on a
    fresh log; the ratio printed is this row's median rate over the same round's direct rate.
    """
    import subprocess

    from pg_server import PgServer, find_bindir, free_port  # type: ignore[import-not-found]

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("no PostgreSQL binaries (apt-get install postgresql)")
    key = SigningKey(OWNER_NAME, OWNER_SEED)
    if importlib.util.find_spec("httptools") is not None:  # what uvicorn's http="auto" picks
        http = "httptools (uvicorn's C parser)"
    else:
        http = "h11 (pure Python: install httptools for the faster parser)"
    with tempfile.TemporaryDirectory(prefix="bench-append-") as tmp:
        pg = PgServer(Path(tmp) / "pg", bindir)
        if durable:  # PostgreSQL's defaults: every commit waits for its WAL flush
            pg.start_options = "-c listen_addresses=127.0.0.1 -c max_connections=200"
        pg.init()
        pg.start()
        procs: list[subprocess.Popen[str]] = []
        try:
            pg.createdb("ledgers")
            ledger_cmd = str(Path(sys.executable).parent / "ledger")
            bases = []
            for _ in range(4):
                port = free_port()
                proc = subprocess.Popen(
                    [
                        ledger_cmd,
                        "serve",
                        "--store",
                        pg.url(),
                        "--allow-create",
                        "--turn-seconds",
                        str(turn_seconds),
                        "--port",
                        str(port),
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                assert proc.stdout is not None
                proc.stdout.readline()  # "serving ... on http://..."
                procs.append(proc)
                bases.append(f"http://127.0.0.1:{port}")
            print(
                f"events appended per second, {seconds:g} s a run, {repeat} run(s) a row, "
                f"PostgreSQL on 127.0.0.1 ({'fsync on' if durable else 'fsync off'}), "
                f"service HTTP: {http}; each client its own process; "
                f"{'each client its own log' if own_logs else 'all clients on one log'}; "
                + (f"turns of {turn_seconds:g} s" if turn_seconds > 0 else "no turns")
            )
            print(f"  before: {_load()}")
            serial = [0]

            def postgres() -> list[int]:
                return _postgres_pids(pg.pid())

            def fresh(prefix: str, clients: int) -> list[str]:
                """New logs behind ``prefix`` (one, or one per client); the clients' URLs."""
                serial[0] += 1
                names = [
                    f"r{serial[0]}c{i}" if own_logs else f"r{serial[0]}" for i in range(clients)
                ]
                urls = [prefix.format(name=name) for name in names]
                for url in dict.fromkeys(urls):
                    Ledger.create(url.split()[0], origin=ORIGIN, key=key).close()
                return urls

            for batch in batches:
                for clients in client_counts:
                    paths: list[tuple[str, str]] = [
                        ("direct", pg.url(schema="d_{name}")),
                        ("service x1", f"{bases[0]}/s1-{{name}}"),
                        ("service x4", " ".join(f"{b}/s4-{{name}}" for b in bases)),
                    ]
                    runs: dict[str, list[Run]] = {name: [] for name, _ in paths}
                    for _ in range(repeat):
                        for name, prefix in paths:
                            urls = fresh(prefix, clients)
                            pids = [] if name == "direct" else [p.pid for p in procs]
                            runs[name].append(_appender(urls, seconds, batch, pids, postgres))
                    what = f"{batch} event(s)/append, {clients} client(s)"
                    for name, _ in paths:
                        _append_line(f"{name}, {what}", runs[name], seconds, runs["direct"])
                    print(f"  after this row: {_load()}")
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=30)
                if proc.stdout is not None:
                    proc.stdout.close()
            pg.stop()
            pg.remove()


def _append_line(name: str, runs: list[Run], seconds: float, direct: list[Run]) -> None:
    """One row: median rate (each run's), p50/p99 over all calls, CPU per event, 409s, ratios.

    The rate ratio is the median over the runs of this row's rate over the same round's
    direct rate; the CPU ratio is direct CPU per event over this row's (both medians).
    """
    rates = [r.events / seconds for r in runs]
    lat = [x for r in runs for x in r.latencies]
    lost = [x for r in runs for x in r.lost]
    cuts = statistics.quantiles(lat, n=100) if len(lat) > 1 else [lat[0]] * 99
    cpu = statistics.median(r.cpu / max(r.events, 1) for r in runs)
    parts = [
        statistics.median(getattr(r, f"cpu_{part}") / max(r.events, 1) for r in runs) * 1e6
        for part in ("clients", "services", "postgres")
    ]
    each = "/".join(f"{x:.0f}" for x in rates)
    extra = ""
    if name.startswith("service"):
        ratio = statistics.median(
            r.events / max(d.events, 1) for r, d in zip(runs, direct, strict=True)
        )
        direct_cpu = statistics.median(d.cpu / max(d.events, 1) for d in direct)
        extra = (
            f"  409s {sum(lost):4d} (max {max(lost)} a call)  waits {sum(r.waits for r in runs):4d}"
            f"  {ratio:4.2f}x direct"
            f" (CPU: {direct_cpu / cpu:4.2f}x)"
        )
    print(
        f"  {name:<40} {statistics.median(rates):6.0f} /s ({each})  p50 {cuts[49] * 1e3:6.2f}"
        f" ms  p99 {cuts[98] * 1e3:7.2f} ms  CPU {cpu * 1e6:5.0f} us/event"
        f" ({parts[0]:.0f} client, {parts[1]:.0f} service, {parts[2]:.0f} PostgreSQL){extra}"
    )


def main() -> None:
    """Run the benchmark and print its figures."""
    if sys.argv[1:2] == ["append"]:
        ap = argparse.ArgumentParser(description="appends through `ledger serve`")
        ap.add_argument("--seconds", type=float, default=5.0)
        ap.add_argument("--clients", default="1,4")
        ap.add_argument("--batch", default="1,20", help="events per append (comma-separated)")
        ap.add_argument("--repeat", type=int, default=3, help="runs a row (median ratio)")
        ap.add_argument(
            "--durable", action="store_true", help="PostgreSQL with fsync on (its default)"
        )
        ap.add_argument(
            "--own-logs", action="store_true", help="each client appends to its own study"
        )
        ap.add_argument(
            "--turn-seconds",
            type=float,
            default=2.0,
            help="the services' --turn-seconds (0: a loser gets a plain 409, no turn)",
        )
        ap.add_argument("--quick", action="store_true")
        opts = ap.parse_args(sys.argv[2:])
        counts = [int(c) for c in opts.clients.split(",")]
        batches = [int(b) for b in opts.batch.split(",")]
        bench_append(
            0.5 if opts.quick else opts.seconds,
            counts,
            batches,
            repeat=1 if opts.quick else opts.repeat,
            durable=opts.durable,
            own_logs=opts.own_logs,
            turn_seconds=opts.turn_seconds,
        )
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.events, args.seconds, args.clients = 2000, 0.5, 2
    if not available():
        raise SystemExit("nginx is not installed (apt-get install nginx-light)")
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        base = Path(tmp)
        www, key, publish_s = build(base, args.events)
        print(
            f"published {args.events} events in {publish_s:.2f} s "
            f"({args.events / publish_s:.0f} events/s)"
        )
        full = args.events // 256
        tiles = [TileRef(0, i).path for i in range(full)]
        bundles = [TileRef(ENTRIES, i).path for i in range(full)]
        with Nginx(base / "nginx", www) as nginx, LocalTiles(www) as service:
            for name, url in (("nginx", nginx.url), ("ledger serve", service.url)):
                print(f"{name} ({args.clients} keep-alive clients, {args.seconds:g} s each):")
                for what, paths in (("level-0 tiles (8 KiB)", tiles), ("entry bundles", bundles)):
                    prefixed = [f"log/{p}" for p in paths]
                    report(what, args.seconds, hammer(url, prefixed, args.seconds, args.clients))
            from ledger._monitor import check_log, http_fetcher

            fetch, close = http_fetcher(f"{nginx.url}/log")
            start = time.perf_counter()
            _, seen = check_log(fetch, nginx.url, [key.verifier], None)
            took = time.perf_counter() - start
            close()
            print(
                f"ledger monitor, first check from size 0 over nginx: {took:.2f} s "
                f"({seen.tiles_fetched} tiles, {seen.entries_checked} entries)"
            )


if __name__ == "__main__":
    main()
