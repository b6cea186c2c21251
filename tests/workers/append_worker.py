"""Subprocess worker for the concurrency and crash tests.

Usage:
    append_worker.py concurrent LEDGER KEYFILE WORKER_ID COUNT SEED
        append COUNT events in random batches of 1-8, one transaction each
    append_worker.py batch LEDGER KEYFILE COUNT [STALL_AT]
        append COUNT events in ONE append_many call; print "ready" first, and if STALL_AT is
        given print "stalled" and sleep when the clock is read for event STALL_AT (inside the
        open transaction), so the parent can SIGKILL mid-transaction
"""

from __future__ import annotations

import os
import random
import sys
import time
from datetime import UTC, datetime

from ledger import EventSpec, Ledger, SigningKey


def concurrent(path: str, keyfile: str, worker: int, count: int, seed: int) -> None:
    key = SigningKey.load(keyfile)
    rng = random.Random(seed)
    with Ledger.open(path) as log:
        i = 0
        while i < count:
            n = min(rng.randint(1, 8), count - i)
            log.append_many(
                [("trial.requested", {"worker": worker, "i": i + j}) for j in range(n)], key=key
            )
            i += n


def batch(path: str, keyfile: str, count: int, stall_at: int | None) -> None:
    key = SigningKey.load(keyfile)
    calls = [0]

    def clock() -> datetime:
        calls[0] += 1
        if stall_at is not None and calls[0] == stall_at:
            print("stalled", flush=True)
            time.sleep(60)
        return datetime.now(UTC)

    with Ledger.open(path, clock=clock) as log:
        specs = [
            EventSpec(
                "trial.responded",
                {"i": i, "pad": "x" * 200},
                {"raw": f"{os.getpid()}-{i}".encode()},
            )
            for i in range(count)
        ]
        print("ready", flush=True)
        log.append_many(specs, key=key)
    print("done", flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "concurrent":
        concurrent(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    elif mode == "batch":
        stall = int(sys.argv[5]) if len(sys.argv) > 5 else None
        batch(sys.argv[2], sys.argv[3], int(sys.argv[4]), stall)
    else:
        raise SystemExit(f"unknown mode {mode}")
