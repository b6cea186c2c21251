"""``ledger new``: scaffold a study folder from a template and create its ledger."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ledger import Ledger, SigningKey, user_home
from runner.lock import LEDGER_FILE, StudyError
from runner.spec import load_study
from runner.stimuli import write_probe_set

TEMPLATES = {"prompt-tumbling-e": "prompt_tumbling_e"}
STIMULUS_SEED = 20260421


@dataclass(frozen=True)
class NewStudy:
    """What :func:`new_study` created."""

    root: Path
    ledger: Path
    key_path: Path | None
    owner: str


def new_study(directory: str | Path, template: str, key: SigningKey | None = None) -> NewStudy:
    """Write a complete, lockable study into ``directory`` and create its ledger.

    Without ``key``, an owner key named ``<origin>/owner`` is created in the user's key directory
    (``$PROMPT_LEDGER_HOME/keys``, never inside the study folder), or reused if it exists.
    """
    root = Path(directory)
    if template not in TEMPLATES:
        raise StudyError(f"unknown template {template!r}; available: {', '.join(TEMPLATES)}")
    if root.exists() and any(root.iterdir()):
        raise StudyError(f"{root} exists and is not empty; choose a new directory")
    source = resources.files("runner") / "templates" / TEMPLATES[template]
    with resources.as_file(source) as src:
        shutil.copytree(src, root, dirs_exist_ok=True)
    write_probe_set(root / "stimuli", STIMULUS_SEED)
    study = load_study(root)
    key_path: Path | None = None
    if key is None:
        key_path = user_home() / "keys" / f"{study.id}-owner.key"
        if key_path.exists():
            key = SigningKey.load(key_path)
        else:
            key_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            key = SigningKey.generate(f"{study.origin}/owner")
            key.save(key_path)
            key_path.with_suffix(".vkey").write_text(key.vkey + "\n", encoding="utf-8")
    with Ledger.create(root / LEDGER_FILE, origin=study.origin, key=key):
        pass
    return NewStudy(root, root / LEDGER_FILE, key_path, key.actor)
