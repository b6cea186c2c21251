"""Witness benchmark: add-checkpoint requests per second with many configured logs.

    python benchmarks/bench_witness.py [--logs 10000] [--requests 3000] [--threads 4] [--quick]

A witness (``ledger witness init``) is configured with ``--logs`` logs, each with its own Ed25519
key, and its state is seeded with one cosigned checkpoint per log (in one transaction, written
as the witness writes it), so that every measured request carries a real RFC 6962 consistency
proof from that checkpoint to a larger one. Each measured request names a different log, picked
at random, and is verified (the log's signature and the consistency proof) and durably
persisted (SQLite WAL, synchronous=FULL, one BEGIN IMMEDIATE transaction each) before the
cosignature is returned. Prints, for this machine and this run:

  * the Ed25519 verify rate (cryptography/OpenSSL) on a checkpoint-sized message;
  * add-checkpoint per second in process (``Witness.add_checkpoint``, no HTTP), ratio to it;
  * add-checkpoint per second over HTTP to a ``ledger witness serve`` process, one client
    with keep-alive, and ``--threads`` clients at once, each with its ratio to the verify rate.

  * a study run (the tumbling-E template, simulated backend) without witnesses and with a local
    witness cosigning its start, every ``--interval`` trials and its stop: the seconds the run
    spent waiting on the witness (requests and back-off, ``RunResult.witness_wait``) and their
    share of the witnessed run, beside the unwitnessed run's time measured in the same run.

Timings are never asserted; ``--quick`` (used by tests/project/test_benchmark_runs.py) shrinks
everything so that every figure is printed in a few seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ledger import Checkpoint, SigningKey
from ledger._merkle import consistency_proof, list_range_hash, root_from_leaf_hashes
from ledger.witness import Witness, format_request, new_client


@dataclass
class Log:
    origin: str
    key: SigningKey
    leaves: list[bytes]
    size: int  # the size the witness holds


def make_logs(count: int, rng: random.Random) -> list[Log]:
    logs = []
    for i in range(count):
        origin = f"bench.example/log-{i}"
        size = rng.randint(1, 200)
        leaves = [hashlib.sha256(f"{i}:{j}".encode()).digest() for j in range(size + 64)]
        logs.append(Log(origin, SigningKey.generate(f"{origin}/owner"), leaves, size))
    return logs


def seed(directory: Path, logs: list[Log]) -> None:
    """Configure every log and record one cosigned checkpoint of each, in one transaction."""
    with Witness.open(directory) as witness:
        witness.add_logs({log.origin: [log.key.vkey] for log in logs})
        stamp = int(time.time())
        rows = []
        for log in logs:
            cp = Checkpoint(log.origin, log.size, root_from_leaf_hashes(log.leaves[: log.size]))
            note = cp.sign([log.key])
            rows.append(
                (
                    log.origin,
                    log.size,
                    cp.root,
                    note + witness.key.cosign(cp.text(), stamp),
                    stamp,
                    note,
                )
            )
    conn = sqlite3.connect(directory / "state.db", isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany("INSERT INTO state VALUES (?, ?, ?, ?, ?)", [r[:5] for r in rows])
    conn.executemany(
        "INSERT INTO cosigned (origin, size, root, note, time) VALUES (?, ?, ?, ?, ?)",
        [(r[0], r[1], r[2], r[5], r[4]) for r in rows],
    )
    conn.execute("COMMIT")
    conn.close()


def requests_for(logs: list[Log], rng: random.Random) -> list[bytes]:
    """One request per log: a checkpoint 1..64 leaves larger, with the proof from the held size."""
    bodies = []
    for log in logs:
        new = rng.randint(log.size + 1, len(log.leaves))
        leaves = log.leaves[:new]
        proof = consistency_proof(log.size, new, list_range_hash(leaves))
        note = Checkpoint(log.origin, new, root_from_leaf_hashes(leaves)).sign([log.key])
        bodies.append(format_request(log.size, proof, note))
        log.size = new
    return bodies


def ed25519_verify_rate(window: float) -> float:
    key = SigningKey.generate("bench.example/log-0/owner")
    message = Checkpoint("bench.example/log-0", 123456, bytes(32)).text().encode()
    signature = key.sign(message)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < window:
        for _ in range(200):
            key.verifier.verify(message, signature)
        done += 200
    return done / (time.perf_counter() - start)


def in_process(directory: Path, bodies: list[bytes]) -> float:
    with Witness.open(directory) as witness:
        start = time.perf_counter()
        for body in bodies:
            result = witness.add_checkpoint(body)
            if result.status != 200:
                raise SystemExit(f"in-process request refused: {result.status} {result.body}")
        return len(bodies) / (time.perf_counter() - start)


def over_http(url: str, bodies: list[bytes], threads: int) -> float:
    chunks = [bodies[i::threads] for i in range(threads)]
    failures: list[str] = []

    def send(chunk: list[bytes]) -> None:
        with new_client() as client:
            for body in chunk:
                response = client.post(url + "/add-checkpoint", content=body)
                if response.status_code != 200:
                    failures.append(f"{response.status_code} {response.text}")
                    return

    workers = [threading.Thread(target=send, args=(chunk,)) for chunk in chunks]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - start
    if failures:
        raise SystemExit(f"HTTP request refused: {failures[0]}")
    return len(bodies) / elapsed


def study_runs(base: Path, replicates: int, interval: int) -> dict[str, float]:
    """Run one study without witnesses and one with a local witness; return the timings."""
    import os

    from ledger import Ledger
    from ledger.witness_server import LocalWitness
    from runner import RunOptions, SimulatedBackend, lock_study, new_study, run_study

    os.environ["PROMPT_LEDGER_HOME"] = str(base / "home")
    owner = SigningKey.generate("bench.example/study/owner")
    template = base / "template"
    new_study(template, "prompt-tumbling-e", owner)
    (template / "ledger.db").unlink()
    spec = template / "study.toml"
    spec.write_text(
        spec.read_text("utf-8").replace("replicates = 30", f"replicates = {replicates}"), "utf-8"
    )
    with Witness.init(base / "study-witness", "bench.example/study-witness") as witness:
        witness.add_log("prompt-ledger.local/prompt-tumbling-e", [owner.vkey])
        vkey = witness.key.vkey
    out: dict[str, float] = {}
    with LocalWitness(base / "study-witness") as served:
        # a first, unmeasured run warms up imports and caches for both measured ones
        for label, witnessed in (("warm-up", False), ("plain", False), ("witnessed", True)):
            root = base / label
            import shutil

            shutil.copytree(template, root)
            with Ledger.create(
                root / "ledger.db", origin="prompt-ledger.local/prompt-tumbling-e", key=owner
            ):
                pass
            if witnessed:
                (root / "study.toml").write_text(
                    (root / "study.toml").read_text("utf-8")
                    + f'\n[[witnesses]]\nname = "bench.example/study-witness"\nvkey = "{vkey}"'
                    + f'\nurl = "{served.url}"\n\n[witnessing]\ninterval_trials = {interval}\n',
                    "utf-8",
                )
            t0 = time.perf_counter()
            lock_study(root, owner)
            out[f"{label}_lock_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            result = run_study(root, owner, SimulatedBackend(), RunOptions(concurrency=8))
            out[f"{label}_run_s"] = time.perf_counter() - t0
            out[f"{label}_trials"] = result.final
            if witnessed:
                out["witness_wait_s"] = result.witness_wait
                with Ledger.open(root / "ledger.db", readonly=True) as log:
                    out["cosigned_checkpoints"] = sum(
                        "bench.example/study-witness" in cp.note for cp in log.checkpoints()
                    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=int, default=10_000)
    parser.add_argument(
        "--requests",
        type=int,
        default=2_000,
        help="requests per measurement (each to a different log)",
    )
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--replicates", type=int, default=6, help="replicates of the study run (35 trials each)"
    )
    parser.add_argument(
        "--interval", type=int, default=25, help="the study run's witnessing interval, in trials"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.logs, args.requests = min(args.logs, 600), min(args.requests, 150)
        args.replicates = 1
    if 3 * args.requests > args.logs:
        parser.error("--requests: the three measurements need 3 x requests <= --logs")
    rng = random.Random(2026)
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-witness-") as tmp:
        directory = Path(tmp) / "w"
        Witness.init(directory, "bench.example/witness").close()
        t0 = time.perf_counter()
        logs = make_logs(args.logs, rng)
        seed(directory, logs)
        print(f"set-up: {args.logs} logs configured and seeded in {time.perf_counter() - t0:.1f} s")
        picked = rng.sample(logs, 3 * args.requests)
        batches = [requests_for(picked[i::3], rng) for i in range(3)]
        proof_lines = sum(b.split(b"\n\n")[0].count(b"\n") for b in batches[0]) / args.requests
        print(
            f"requests: {args.requests} per measurement, {proof_lines:.1f} proof lines each "
            "on average, each to a different log"
        )

        figures["ed25519_verify_per_s"] = verify = ed25519_verify_rate(0.2 if args.quick else 1.0)
        print(f"Ed25519 verify: {verify:,.0f}/s")
        figures["in_process_per_s"] = rate = in_process(directory, batches[0])
        print(f"add-checkpoint, in process: {rate:,.0f}/s  ratio {rate / verify:.3f}")

        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from ledger.cli import main; main()",
                "witness",
                "serve",
                str(directory),
                "--port",
                "0",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if " listening on " not in line:
                raise SystemExit(f"the witness did not start: {line}")
            url = line.split(" listening on ")[1].strip()
            figures["http_1_client_per_s"] = rate = over_http(url, batches[1], 1)
            print(f"add-checkpoint, HTTP, 1 client: {rate:,.0f}/s  ratio {rate / verify:.3f}")
            key = f"http_{args.threads}_clients_per_s"
            figures[key] = rate = over_http(url, batches[2], args.threads)
            print(
                f"add-checkpoint, HTTP, {args.threads} clients: {rate:,.0f}/s  "
                f"ratio {rate / verify:.3f}"
            )
        finally:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)
        with Witness.open(directory) as witness:
            held = [witness.latest(log.origin) for log in picked]
        if any(h is None or h[0] != log.size for h, log in zip(held, picked, strict=True)):
            raise SystemExit("the witness does not hold every cosigned size")
        print("check: every cosigned checkpoint is the witness's state (persisted)")

        runs = study_runs(Path(tmp) / "study", args.replicates, args.interval)
        wait, total = runs["witness_wait_s"], runs["witnessed_run_s"]
        print(
            f"study run, {runs['plain_trials']:.0f} trials, no witness: "
            f"{runs['plain_run_s']:.2f} s (lock {runs['plain_lock_s']:.2f} s)"
        )
        print(
            f"study run, witnessed every {args.interval} trials: {total:.2f} s "
            f"(lock {runs['witnessed_lock_s']:.2f} s), "
            f"{runs['cosigned_checkpoints']:.0f} checkpoints cosigned; waiting on witnesses "
            f"{wait:.3f} s = {wait / total:.1%} of the run; ratio to the unwitnessed run "
            f"{total / runs['plain_run_s']:.2f}"
        )
        figures.update({k: v for k, v in runs.items() if k.endswith("_s")})
    if args.json:
        print(json.dumps({k: round(v, 1) for k, v in figures.items()}))


if __name__ == "__main__":
    main()
