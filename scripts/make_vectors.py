"""Generate tests/vectors/ledger-v1.json: a small, complete v1 ledger from fixed keys and clock.

    python scripts/make_vectors.py          # rewrite the file
    python scripts/make_vectors.py --check  # exit 1 if the file differs from a fresh build

Keys are SigningKey(name, SHA-256("prompt-ledger test key <name>")); the clock starts at
2026-01-01T00:00:00Z and advances 1 ms per reading. Ed25519 signatures are deterministic, so
the output is byte-identical on every machine.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from ledger import EventSpec, FixedClock, Ledger, SigningKey

OUT = Path(__file__).resolve().parent.parent / "tests" / "vectors" / "ledger-v1.json"


def _key(name: str) -> SigningKey:
    return SigningKey(name, hashlib.sha256(f"prompt-ledger test key {name}".encode()).digest())


def build() -> str:
    """Build the vector ledger and return the JSON text of the vectors file."""
    owner = _key("example.org/owner")
    runner = _key("example.org/runner")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.db"
        with Ledger.create(path, origin="example.org/ledger", key=owner, clock=FixedClock()) as log:
            log.add_key(runner.vkey, "runner", key=owner)
            log.append(
                "artifact.locked",
                {"path": "prompts/full.txt", "seed": "18446744073709551615"},
                key=owner,
                blobs={"content": b"Report the orientation of every E.\n"},
            )
            registration = log.sign_checkpoint(owner)
            log.append_many(
                [
                    EventSpec(
                        "trial.requested",
                        {"trial": "A|chart-1|0", "attempt": 1},
                        {"request": b'{"model":"claude-sonnet-4-6"}'},
                    ),
                    EventSpec(
                        "trial.responded",
                        {"trial": "A|chart-1|0", "latency_ms": 812.5},
                        {"response": b'{"content":[{"text":"UP"}]}'},
                    ),
                ],
                key=runner,
            )
            log.revoke_key(runner.actor, key=owner, reason="end of run")
            final = log.sign_checkpoint(owner)
            events = [
                {
                    "envelope": e.envelope.decode(),
                    "signature": base64.b64encode(e.signature).decode(),
                    "leaf_hash": e.leaf_hash.hex(),
                }
                for e in log.events()
            ]
            blobs = {
                digest: base64.b64encode(log.blob(digest)).decode()
                for e in log.events()
                for digest in e.blobs.values()
            }
            roots = [log.root(n).hex() for n in range(1, log.size + 1)]
    doc: dict[str, Any] = {
        "description": "PROMPT Ledger format v1 test vector; see docs/ledger-format.md §9",
        "keys": {
            k.name: {
                "seed_rule": f'SHA-256("prompt-ledger test key {k.name}")',
                "skey": k.skey,
                "vkey": k.vkey,
                "actor": k.actor,
            }
            for k in (owner, runner)
        },
        "origin": "example.org/ledger",
        "events": events,
        "blobs": dict(sorted(blobs.items())),
        "roots_by_size": roots,
        "checkpoints": [registration, final],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    """Write the vectors file, or with --check compare it to a fresh build."""
    text = build()
    if "--check" in sys.argv[1:]:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} differs from a fresh build", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
