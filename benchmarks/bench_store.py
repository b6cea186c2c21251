"""Benchmark: batched signed appends per second on PostgreSQL (one writer, four at once) and on
SQLite, against the Ed25519 sign rate measured in the same run.

An append is what ``ledger run``'s group writer does: sign a batch of small events (one blob
each) against the head of the log and commit it in one transaction. The same batches go to a
SQLite ledger, to a PostgreSQL ledger with one writer, and to one PostgreSQL ledger with four
writer processes at once (the coordinator row sequences them). The limit is the raw Ed25519
sign rate of this machine, measured just before and just after the appends (the mean of the
two windows), since each event is signed once: a ratio of 1.0 would mean the store costs
nothing beyond the signatures. Target (issue 34): PostgreSQL one writer >= 0.3x the sign rate.

The PostgreSQL server is a throwaway cluster started from the installed binaries
(``tests/support/pg_server.py``) with its default durability (``fsync`` on, ``synchronous_commit``
on), so each commit waits for the WAL to reach the disk, as a production server's does.

Usage::

    python benchmarks/bench_store.py                   # 20,000 events, batches of 100
    python benchmarks/bench_store.py --events 2000 --quick
    python benchmarks/bench_store.py workers           # 4 ledger run workers vs one
                                                       # (benchmarks/bench_workers.py)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for extra in (ROOT, ROOT / "tests" / "support"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

WRITER = """
import sys, time
from ledger import EventSpec, Ledger, SigningKey
key = SigningKey.load(sys.argv[2])
events, batch, tag = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
with Ledger.open(sys.argv[1]) as log:
    sys.stdout.write("ready\\n"); sys.stdout.flush(); sys.stdin.readline()
    for b in range(events // batch):
        log.append_many([EventSpec("artifact.locked", {"w": tag, "b": b, "i": i},
                                   {"data": f"{tag}-{b}-{i}".encode() * 8})
                         for i in range(batch)], key=key)
"""


def _key() -> Any:
    from ledger import SigningKey

    return SigningKey("bench.example/owner", hashlib.sha256(b"bench store owner").digest())


def sign_rate(seconds: float) -> float:
    """Ed25519 signatures per second over envelopes of the benchmark's size, for ``seconds``."""
    key = _key()
    message = b'{"v":1,"seq":123456,"kind":"artifact.locked",' + b"x" * 300 + b"}"
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(200):
            key.sign(message)
        n += 200
    return n / (time.perf_counter() - start)


def append_rate(location: Any, events: int, batch: int) -> float:
    """Signed events per second appended by this process to a new ledger at ``location``."""
    from ledger import EventSpec, Ledger

    key = _key()
    with Ledger.create(location, origin="bench.example/store", key=key) as log:
        start = time.perf_counter()
        for b in range(events // batch):
            log.append_many(
                [
                    EventSpec(
                        "artifact.locked",
                        {"w": "one", "b": b, "i": i},
                        {"data": f"one-{b}-{i}".encode() * 8},
                    )
                    for i in range(batch)
                ],
                key=key,
            )
        elapsed = time.perf_counter() - start
        assert log.size == 1 + (events // batch) * batch
    return (events // batch) * batch / elapsed


def concurrent_rate(url: str, events: int, batch: int, writers: int, work: Path) -> float:
    """Signed events per second, all ``writers`` processes together, into one new ledger."""
    from ledger import Ledger

    key = _key()
    key.save(work / f"owner-{writers}.key")
    Ledger.create(url, origin="bench.example/store", key=key).close()
    share = events // writers
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WRITER,
                url,
                str(work / f"owner-{writers}.key"),
                str(share),
                str(batch),
                f"w{n}",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(writers)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    start = time.perf_counter()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        proc.wait(timeout=3600)
        assert proc.returncode == 0
    elapsed = time.perf_counter() - start
    with Ledger.open(url, readonly=True) as log:
        total = log.size - 1
        events_seen = list(log.events(start=log.size - 1))
        assert events_seen and total == writers * (share // batch) * batch
    return total / elapsed


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures (``workers``: :mod:`bench_workers`)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["workers"]:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from bench_workers import main as workers_main

        workers_main(argv)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000, help="events per measurement")
    parser.add_argument("--batch", type=int, default=100, help="events per transaction")
    parser.add_argument("--quick", action="store_true", help="shorter sign-rate windows")
    args = parser.parse_args(argv)
    from pg_server import PgServer, find_bindir  # type: ignore[import-not-found]

    bindir = find_bindir()
    if bindir is None:
        print("no PostgreSQL binaries found (apt-get install postgresql)")
        return 2
    window = 0.5 if args.quick else 2.0
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    work = Path(tempfile.mkdtemp(prefix="prompt-ledger-bench-store-"))
    server = PgServer(work / "pg", bindir)
    server.init()
    # production durability: fsync and synchronous_commit on (the tests' server turns fsync off)
    server.start_options = server.start_options.replace("-c fsync=off", "-c fsync=on").replace(
        "-c full_page_writes=off", ""
    )
    server.start()
    try:
        server.createdb("bench")
        before = sign_rate(window)
        lite = append_rate(work / "bench.db", args.events, args.batch)
        pg_one = append_rate(server.url(db="bench", schema="one"), args.events, args.batch)
        pg_four = concurrent_rate(
            server.url(db="bench", schema="four"), args.events, args.batch, 4, work
        )
        after = sign_rate(window)
    finally:
        server.stop()
        server.remove()
    rate = (before + after) / 2
    print(f"Ed25519 sign rate (limit): {rate:,.0f}/s (before {before:,.0f}, after {after:,.0f})")
    print(f"events {args.events:,} in batches of {args.batch}")
    for name, value in (
        ("SQLite, one writer", lite),
        ("PostgreSQL, one writer", pg_one),
        ("PostgreSQL, 4 writers", pg_four),
    ):
        print(f"{name:<24} {value:>10,.0f} events/s   {value / rate:.2f}x the sign rate")
    print(
        f"PostgreSQL one writer vs SQLite: {pg_one / lite:.2f}x; "
        f"4 writers vs one: {pg_four / pg_one:.2f}x"
    )
    verdict = "meets" if pg_one >= 0.3 * rate else "misses"
    print(f"target PostgreSQL one writer >= 0.3x the sign rate: {verdict}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
