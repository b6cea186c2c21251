"""The README's "Library" section runs as written.

Its ```python blocks are read from README.md itself and executed verbatim, in order and in one
namespace (as in a notebook), in an empty temporary directory with a private
``$PROMPT_LEDGER_HOME``; then the objects they made are checked against the study's ledger.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from locations import REPO

import analysis
from ledger import Ledger

ROOT = REPO
README = (ROOT / "README.md").read_text(encoding="utf-8")


def python_blocks(heading: str) -> list[str]:
    """The ```python blocks of the README's ``## heading`` section."""
    section = README.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```python\n(.*?)^```$", section, flags=re.M | re.S)


def test_library_section_runs_verbatim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = python_blocks("Library")
    assert len(blocks) == 4
    assert "analysis.load(" in "".join(blocks)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    namespace: dict[str, Any] = {"__name__": "readme"}
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"README.md Library block {number}", "exec"), namespace)
    output = capsys.readouterr().out

    with Ledger.open(tmp_path / "my-study" / "ledger.db", readonly=True) as log:
        kinds = [e.kind for e in log.events()]
        scored = len(list(log.events("trial.scored")))
    blind, frames = namespace["blind"], namespace["frames"]
    assert isinstance(frames, analysis.StudyFrames) and not frames.blinded
    assert blind.blinded and blind.scores["arm"].isna().all() and len(blind.scores) == scored
    assert len(frames.trials) == 70 and set(frames.trials["outcome"]) == {"responded"}
    assert list(frames.events["kind"]) == kinds[: len(frames.events)]
    assert kinds[-1] == "export.created"
    assert namespace["archived"].source == "archive"
    assert "StudyFrames(study 'my-study'" in output
