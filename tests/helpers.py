"""Deterministic keys and clocks shared by tests."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from ledger import FixedClock, Ledger, SigningKey


def fixed_key(name: str) -> SigningKey:
    """A deterministic key: seed = SHA-256("prompt-ledger test key <name>")."""
    return SigningKey(name, hashlib.sha256(f"prompt-ledger test key {name}".encode()).digest())


def fixed_clock() -> FixedClock:
    """A clock that starts at 2026-01-01T00:00:00Z and advances one millisecond per reading."""
    return FixedClock()


STUDY_ORIGIN = "prompt-ledger.local/prompt-tumbling-e"


def study_key() -> SigningKey:
    """The fixed owner key of test studies."""
    return fixed_key(f"{STUDY_ORIGIN}/owner")


def make_study(root: Path, *, replicates: int, template: Path | None = None) -> Path:
    """A study from the tumbling-E template with ``replicates`` replicates, locked.

    ``template`` (a folder made by :func:`runner.new.new_study` whose ledger was removed) is
    copied when given, which saves drawing the stimuli again. ``PROMPT_LEDGER_HOME`` must point
    at a temporary directory (the blinding secret is written there).
    """
    from ledger import user_home
    from runner.lock import lock_study
    from runner.new import new_study

    key = study_key()
    key_file = user_home() / "keys" / "prompt-tumbling-e-owner.key"
    if not key_file.exists():
        key_file.parent.mkdir(parents=True, exist_ok=True)
        key.save(key_file)
    if template is None:
        new_study(root, "prompt-tumbling-e", key)
    else:
        shutil.copytree(template, root)
        with Ledger.create(root / "ledger.db", origin=STUDY_ORIGIN, key=key):
            pass
    spec = root / "study.toml"
    text = spec.read_text(encoding="utf-8")
    spec.write_text(text.replace("replicates = 30", f"replicates = {replicates}"), "utf-8")
    lock_study(root, key)
    return root
