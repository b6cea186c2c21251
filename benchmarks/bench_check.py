"""Benchmark: the service's per-envelope checks before the write lock, OpenSSL against libsodium.

``ledger serve`` checks every envelope sent to it in :meth:`ledger.Ledger.prepare_signed`
(docs/service.md §7): the canonical parse, the leaf hash and the Ed25519 signature, outside the
study's write lock. This measures that step's CPU time per event in this process, for a batch
of ``--batch`` envelopes of about ``--bytes`` bytes each signed by one registered key, with
the signature checked by libsodium (:meth:`ledger.VerifierKey.verify_strict`, what the service
runs) and, for comparison, by OpenSSL through ``cryptography`` (:meth:`VerifierKey.verify`,
what it ran before, patched in for the comparison only), alternated ``--rounds`` times. Each
figure is the best of five repetitions of 100 batches (``time.process_time``: a busy
neighbour on a shared machine slows it less than wall time); the signature check alone is
printed beside it, and so is the canonical parse of one envelope alone
(:func:`ledger.parse_envelope`: JSON decode, field checks, the proof that the bytes are
RFC 8785 canonical). Timings are never asserted.

    python benchmarks/bench_check.py                      # 20 envelopes of ~580 bytes, 2 rounds
    python benchmarks/bench_check.py --batch 1 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ledger import Ledger, SigningKey
from ledger._envelope import envelope_bytes, parse_envelope
from ledger._keys import VerifierKey


def _best(work: Callable[[], object], per: int) -> float:
    """Best of five: CPU seconds of 100 calls of ``work``, divided by ``100 * per``."""
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for _ in range(100):
            work()
        best = min(best, (time.process_time() - start) / (100 * per))
    return best


def main() -> None:
    """Print the CPU per event of the pre-lock checks with each Ed25519 implementation."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=20, help="envelopes per batch")
    ap.add_argument("--bytes", type=int, default=580, help="about this many bytes an envelope")
    ap.add_argument("--rounds", type=int, default=2, help="OpenSSL and libsodium alternated")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        owner = SigningKey("bench.example/owner", os.urandom(32))
        log = Ledger.create(Path(tmp) / "bench.db", origin="bench.example/check", key=owner)
        size, last, _ = log.head()
        entries = []
        for i in range(args.batch):
            body = {"path": f"stimuli/item-{i:04d}.png", "sha256": "ab" * 32, "i": i}
            data = envelope_bytes(
                seq=size + i,
                time="2026-11-22T10:00:00.000000Z",
                kind="artifact.locked",
                actor=owner.actor,
                prev=last.hex(),
                body={**body, "text": "x" * max(0, args.bytes - 330)},
                blobs={},
            )
            entries.append((data, owner.sign(data)))
        key, (message, signature) = owner.verifier, entries[0]
        strict = VerifierKey.verify_strict
        print(
            f"{args.batch} envelope(s) a batch, {len(message)} bytes each; CPU us per event "
            f"(load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)"
        )
        for _ in range(args.rounds):
            for name, check in (("openssl", VerifierKey.verify), ("libsodium", strict)):
                VerifierKey.verify_strict = check  # type: ignore[method-assign]
                try:
                    batch = log.prepare_signed(entries)
                    assert len(batch.verified) == args.batch, "every signature verifies"
                    prepare = _best(lambda: log.prepare_signed(entries), args.batch)
                    alone = _best(lambda: key.verify_strict(message, signature), 1)
                finally:
                    VerifierKey.verify_strict = strict  # type: ignore[method-assign]
                parse = _best(lambda: parse_envelope(message), 1)
                print(
                    f"  {name:9}  prepare_signed {prepare * 1e6:7.1f} us/event  "
                    f"signature check alone {alone * 1e6:6.1f} us  "
                    f"parse alone {parse * 1e6:5.1f} us"
                )
        log.close()
        print(f"  load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
