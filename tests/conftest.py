"""Shared fixtures: keys, a fixed clock, and small ledgers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import fixed_clock, fixed_key

from ledger import Ledger, SigningKey


@pytest.fixture
def owner() -> SigningKey:
    return fixed_key("example.org/owner")


@pytest.fixture
def runner() -> SigningKey:
    return fixed_key("example.org/runner")


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def log(ledger_path: Path, owner: SigningKey, runner: SigningKey) -> Iterator[Ledger]:
    with Ledger.create(
        ledger_path, origin="example.org/test", key=owner, clock=fixed_clock()
    ) as ledger:
        ledger.add_key(runner.vkey, "runner", key=owner)
        yield ledger


@pytest.fixture(scope="session")
def study_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tumbling-E template with its stimuli drawn once per test session (no ledger)."""
    from helpers import study_key

    from runner.new import new_study

    root = tmp_path_factory.mktemp("template") / "study"
    new_study(root, "prompt-tumbling-e", study_key())
    (root / "ledger.db").unlink()
    return root


@pytest.fixture
def ledger_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private PROMPT_LEDGER_HOME (keys and blinding secrets) for one test."""
    home = tmp_path / "home"
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def exported_archive(tmp_path_factory: pytest.TempPathFactory, study_template: Path) -> Path:
    """A small simulated study (1 replicate: 35 trials) run, scored, unblinded, analysed and
    exported once per test session. Tests copy it (``shutil.copytree``) before changing it."""
    from helpers import make_study, study_key

    from analysis.analyze import analyze_study
    from analysis.export import export_study
    from analysis.scoring import score_study, unblind_study
    from runner.backends import SimulatedBackend
    from runner.execute import RunOptions, run_study

    mp = pytest.MonkeyPatch()
    mp.setenv("PROMPT_LEDGER_HOME", str(tmp_path_factory.mktemp("exported-home")))
    try:
        base = tmp_path_factory.mktemp("exported")
        root = make_study(base / "study", replicates=1, template=study_template)
        key = study_key()
        run_study(root, key, SimulatedBackend(), RunOptions(concurrency=4))
        score_study(root, key)
        unblind_study(root, key)
        analyze_study(root, key)
        out = base / "archive"
        export_study(root, out, key)
    finally:
        mp.undo()
    return out
