"""``ledger score`` with forked workers writes the events one process writes (issue 41).

Workers parse and score the responses while the parent signs and appends the ``trial.scored``
events in seq order; with a fixed key and clock the ledger must be the same bytes, event for
event and blob for blob, whether one process scored or two workers did. Batches are made small
here so that several are in flight (parsed while the one before is appended).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers import make_study, study_key

import analysis._scoring as scoring
from analysis._scoring import score_study
from ledger import Ledger
from runner._backends import SimulatedBackend
from runner._execute import RunOptions, run_study

FIXED = "2026-03-01T00:00:00Z"


@pytest.fixture(scope="module")
def run_study_dir(
    tmp_path_factory: pytest.TempPathFactory, study_template: Path
) -> tuple[Path, Path]:
    """A simulated study of 4 replicates (140 trials), run but not scored, and its home."""
    mp = pytest.MonkeyPatch()
    home = tmp_path_factory.mktemp("home")
    mp.setenv("PROMPT_LEDGER_HOME", str(home))
    root = make_study(tmp_path_factory.mktemp("s") / "study", replicates=4, template=study_template)
    run_study(root, study_key(), SimulatedBackend(), RunOptions(concurrency=8))
    mp.undo()
    return root, home


def _copy(source: tuple[Path, Path], to: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root, home = source
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(home))
    shutil.copytree(root, to)
    return to


def _rows(root: Path) -> tuple[list[Any], list[Any]]:
    """Every event row and every blob row of the study's ledger, in order."""
    with sqlite3.connect(root / "ledger.db") as db:
        events = db.execute(
            "SELECT seq, kind, envelope, signature, leaf_hash FROM events ORDER BY seq"
        ).fetchall()
        blobs = db.execute("SELECT sha256, size, data FROM blobs ORDER BY sha256").fetchall()
    return events, blobs


def test_workers_write_the_bytes_one_process_writes(
    run_study_dir: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = _copy(run_study_dir, tmp_path / "one", monkeypatch)
    two = _copy(run_study_dir, tmp_path / "two", monkeypatch)
    monkeypatch.setenv("PROMPT_LEDGER_FIXED_CLOCK", FIXED)
    monkeypatch.setattr(scoring, "BATCH", 32)  # 140 responses: five batches, four in flight
    alone = score_study(one, study_key(), workers=0)
    forked = score_study(two, study_key(), workers=2)
    assert alone == forked
    assert alone.scored == 140 and alone.sealed_seq is not None
    events_one, blobs_one = _rows(one)
    events_two, blobs_two = _rows(two)
    assert [e[1] for e in events_one].count("trial.scored") == 140
    assert events_one == events_two
    assert blobs_one == blobs_two


def test_a_scorer_error_in_a_worker_stops_scoring_with_it(
    run_study_dir: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _copy(run_study_dir, tmp_path / "study", monkeypatch)
    monkeypatch.setattr(scoring, "BATCH", 32)
    real = scoring.score_record
    calls = {"n": 0}

    def failing(parsed: Any, parser: str, truth: Any) -> Any:
        calls["n"] += 1  # counted in each worker (a forked copy of this function)
        if calls["n"] > 40:
            raise ValueError("truth must be glyphs: a broken truth table")
        return real(parsed, parser, truth)

    monkeypatch.setattr(scoring, "score_record", failing)  # inherited by the forked workers
    with pytest.raises(ValueError, match="a broken truth table"):
        score_study(root, study_key(), workers=2)
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        scored = list(log.events("trial.scored"))
        assert not list(log.events("scoring.sealed"))
    # whole batches only: each was appended in its own transaction, or not at all
    assert len(scored) % 32 == 0 and len(scored) < 140


def test_workers_must_not_be_negative(
    run_study_dir: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _copy(run_study_dir, tmp_path / "study", monkeypatch)
    with pytest.raises(ValueError, match="workers must be 0 or more, not -1"):
        score_study(root, study_key(), workers=-1)
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        assert not list(log.events("trial.scored"))


def test_the_default_uses_workers_only_for_many_responses() -> None:
    assert scoring._default_workers(scoring.POOL_MIN - 1) == 0
    many = scoring._default_workers(scoring.POOL_MIN)
    assert many in (0, os.cpu_count() or 1)
    if (os.cpu_count() or 1) >= 2:
        assert many == os.cpu_count()


def test_workers_write_a_variant_study_s_order_as_one_process_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Option permutations (``variant`` and ``order`` in each body) through ``--workers``."""
    from click.testing import CliRunner
    from helpers import fixed_key

    from ledger.cli import main
    from tests.runner.test_variants import write_study

    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    key = tmp_path / "owner.key"
    fixed_key("variant-pilot/owner").save(key)
    root = write_study(tmp_path / "built")
    for step in (("lock", root), ("run", root, "--backend", "simulated")):
        result = CliRunner().invoke(main, [*map(str, step), "--key", str(key)])
        assert result.exit_code == 0, (step, result.output)
    monkeypatch.setenv("PROMPT_LEDGER_FIXED_CLOCK", FIXED)
    monkeypatch.setattr(scoring, "BATCH", 8)
    copies = {}
    for workers in ("0", "2"):
        copies[workers] = copy = tmp_path / f"workers-{workers}"
        shutil.copytree(root, copy)
        args = ["score", str(copy), "--key", str(key), "--workers", workers]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
    events, blobs = _rows(copies["0"])
    assert (events, blobs) == _rows(copies["2"])
    with Ledger.open(copies["2"] / "ledger.db", readonly=True) as log:
        bodies = [e.body for e in log.events("trial.scored")]
    assert len(bodies) > 8 and any("order" in b for b in bodies)
    assert all("variant" in b for b in bodies if "order" in b)
