"""``ledger demo``: an offline walkthrough of the ledger core.

It plays a tiny study's bookkeeping (a locked prompt, a registration checkpoint, a run of trial
requests and responses by a separate runner key), verifies the ledger with the independent
verifier, then changes one byte in a copy and shows the verifier naming the event at fault.
The study issues extend this into the full PROMPT demonstration.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

from rich.console import Console

from ledger._errors import LedgerError
from ledger._keys import SigningKey
from ledger._store import EventSpec, Ledger
from verify import verify_ledger_file

ORIGIN = "example.org/prompt-ledger-demo"
PROMPT = (
    "You will see a chart of tumbling E glyphs. For each glyph, report the direction the open "
    "side of the E faces: UP, RIGHT, DOWN or LEFT. Answer as JSON.\n"
)


def run_demo(directory: Path, console: Console) -> None:
    """Run the walkthrough in ``directory`` (created; must not exist or be empty)."""
    from ledger.cli import render_report

    if directory.exists() and any(directory.iterdir()):
        raise LedgerError(f"demo directory {directory} is not empty; choose another")
    keys_dir = directory / "keys"
    keys_dir.mkdir(parents=True, mode=0o700)
    owner = SigningKey.generate("example.org/demo-owner")
    runner = SigningKey.generate("example.org/demo-runner")
    owner.save(keys_dir / "owner.key")
    runner.save(keys_dir / "runner.key")
    (keys_dir / "owner.vkey").write_text(owner.vkey + "\n", encoding="utf-8")
    (keys_dir / "runner.vkey").write_text(runner.vkey + "\n", encoding="utf-8")
    console.print(f"[bold]1. keys[/]  owner {owner.actor}, runner {runner.actor} in {keys_dir}")

    db = directory / "ledger.db"
    with Ledger.create(db, origin=ORIGIN, key=owner) as log:
        log.add_key(runner.verifier, "runner", key=owner)
        prompt = PROMPT.encode()
        digest = hashlib.sha256(prompt).hexdigest()
        log.append(
            "artifact.locked", {"path": "prompts/arm_A.txt"}, key=owner, blobs={"content": prompt}
        )
        log.append(
            "protocol.locked",
            {"manifest": {"prompts/arm_A.txt": digest}, "seed": "20260101"},
            key=owner,
        )
        registration = log.sign_checkpoint(owner)
        published = directory / "registration.checkpoint"
        published.write_text(registration, encoding="utf-8")
        console.print(
            f"[bold]2. ledger[/] {db}: genesis, runner key, locked prompt; registration "
            f"checkpoint (size {log.size}) written to {published}"
        )

        specs: list[EventSpec] = []
        for trial in range(100):
            request = json.dumps({"trial": trial, "prompt_sha256": digest}).encode()
            response = json.dumps({"trial": trial, "text": ["UP", "RIGHT"][trial % 2]}).encode()
            specs.append(EventSpec("trial.requested", {"trial": trial}, {"request": request}))
            specs.append(EventSpec("trial.responded", {"trial": trial}, {"response": response}))
        log.append_many(specs, key=runner)
        final = log.sign_checkpoint(runner)
        console.print(
            f"[bold]3. run[/]    the runner key appended {len(specs)} trial events in one "
            f"transaction; final checkpoint:"
        )
        console.print(final, markup=False)

    console.print("[bold]4. verify[/] the independent verifier (verify/), trusting the owner key:")
    report = verify_ledger_file(db, trusted_keys=[owner.vkey], checkpoints=[published])
    render_report(report, console)

    tampered = directory / "tampered.db"
    shutil.copyfile(db, tampered)
    seq = 42
    with sqlite3.connect(tampered) as conn:
        (envelope,) = conn.execute("SELECT envelope FROM events WHERE seq = ?", (seq,)).fetchone()
        changed = bytes(envelope).replace(b'"trial":1', b'"trial":7', 1)
        conn.execute("UPDATE events SET envelope = ? WHERE seq = ?", (changed, seq))
    conn.close()
    console.print(f"[bold]5. tamper[/] changed one byte of event {seq} in {tampered}:")
    bad = verify_ledger_file(tampered, trusted_keys=[owner.vkey], checkpoints=[published])
    render_report(bad, console)
    if not report.ok or bad.ok:
        raise LedgerError("demo: verification did not behave as expected (see the tables)")

    console.print("\n[bold]Try it yourself:[/]")
    console.print(f"  ledger log {db}")
    console.print(f"  ledger show {db} {seq}")
    console.print(f"  ledger proof {db} inclusion {seq}")
    console.print(
        f"  ledger verify {db} --trusted-key @{keys_dir / 'owner.vkey'} --checkpoint {published}"
    )
    console.print(f"  ledger verify {tampered}    # fails, naming seq {seq}")
