"""Read-path benchmark: tiles fetched per second through nginx and through ``ledger serve``.

    python benchmarks/bench_serve.py [--events 50000] [--seconds 5] [--clients 4] [--quick]

A ledger of ``--events`` events is published (``ledger tiles``' writer, ``docs/service.md``)
into a directory that a real nginx (Debian's ``nginx-light``, the configuration of
``tests/nginx_server.py``, one worker) and ``ledger serve`` (uvicorn, in a thread of this
process) both serve on 127.0.0.1. For ``--seconds`` each, ``--clients`` threads with keep-alive
HTTP/1.1 connections (httpx) fetch random full level-0 hash tiles (8,192 bytes) and random entry
bundles. Printed, for this machine and this run: the publishing rate (events per second into
tiles, bundles and blobs), tile and bundle fetches per second and MB/s for each server, the p50
and p99 latency of one fetch, and the time ``ledger monitor``'s check takes from size 0 over
nginx. The clients run in this Python process, so on few cores the figures are bounded by the
client as much as by the server. Timings are never asserted; ``--quick`` shrinks everything.

Remote append through ``ledger serve`` is not measured here (it does not exist yet).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from nginx_server import Nginx, available  # type: ignore[import-not-found]  # noqa: E402

from ledger import FixedClock, Ledger, SigningKey  # noqa: E402
from ledger._tiles import ENTRIES, TileRef  # noqa: E402
from ledger.tiles_server import LocalTiles  # noqa: E402
from runner.publish import StudyPublisher  # noqa: E402

ORIGIN = "bench.example/serve"


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


def main() -> None:
    """Run the benchmark and print its figures."""
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
        print(f"published {args.events} events in {publish_s:.2f} s "
              f"({args.events / publish_s:.0f} events/s)")  # fmt: skip
        full = args.events // 256
        tiles = [TileRef(0, i).path for i in range(full)]
        bundles = [TileRef(ENTRIES, i).path for i in range(full)]
        with Nginx(base / "nginx", www) as nginx, LocalTiles(www) as service:
            for name, url in (("nginx", nginx.url), ("ledger serve", service.url)):
                print(f"{name} ({args.clients} keep-alive clients, {args.seconds:g} s each):")
                for what, paths in (("level-0 tiles (8 KiB)", tiles),
                                    ("entry bundles", bundles)):  # fmt: skip
                    prefixed = [f"log/{p}" for p in paths]
                    report(what, args.seconds, hammer(url, prefixed, args.seconds, args.clients))
            from ledger._monitor import check_log, http_fetcher

            fetch, close = http_fetcher(f"{nginx.url}/log")
            start = time.perf_counter()
            _, seen = check_log(fetch, nginx.url, [key.verifier], None)
            took = time.perf_counter() - start
            close()
            print(f"ledger monitor, first check from size 0 over nginx: {took:.2f} s "
                  f"({seen.tiles_fetched} tiles, {seen.entries_checked} entries)")  # fmt: skip


if __name__ == "__main__":
    main()
