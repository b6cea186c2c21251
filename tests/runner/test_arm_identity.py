"""Arm identity (docs/prompts.md §3.1): the arm hash covers everything that shapes a request.

A 2 x 2 factorial of a persona given as a system prompt and a reasoning instruction given as a
component (issue 31: version 1 hashed the arm's own text only, so ``base.none.none`` and
``base.expert.none`` shared a hash). ``ledger arms`` must show four hashes; the locked, run and
exported study must verify, with ``protocol/arms/<arm>.json`` the identity objects; the verifier
re-derives each hash itself and fails a forged one; an archive of version 1 still verifies.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import cli_export, fixed_key, science_skipped

from ledger.cli import main
from runner._arm_identity import identity_differences
from runner._lock import arm_identities
from runner.spec import load_study
from tests.analysis.test_factorial import write_study
from tests.verify.test_archive_tamper import failed, passed, read_events
from tests.verify.test_verify_text_study import forge
from verify import verify_archive
from verify._armid import IdentityProblem, identity, identity_version

SPEC = """\
[study]
id = "persona-reasoning"
title = "Persona (system prompt) crossed with a reasoning instruction"

[model]
id = "claude-sonnet-4-6"
max_tokens = 64
temperature = 1.0

[components]
task = "prompts/task.txt"
expert = "prompts/expert.txt"
reason = "prompts/reason.txt"

[prompt]
item = "prompts/item.txt"

[factors.persona]
scope = "prompt"
levels.none = {}
levels.expert = { system = ["expert"] }

[factors.reasoning]
scope = "prompt"
levels.none = {}
levels.stepwise = { components = ["reason"] }

[factorial]
base = "base"
factors = ["persona", "reasoning"]

[arms.base]
role = "factorial"
components = ["task"]

[stimuli]
items = "items.jsonl"

[design]
replicates = 2
seed = 5
bootstrap_seed = 6
bootstrap_iterations = 100

[response]
parser = "normalized"

[[hypotheses]]
id = "H1"
description = "An expert persona changes accuracy."
test = "factorial"
effect = ["persona"]
alpha = 0.05

[analysis]
exclude_unparseable = false
"""
EXTRA = {
    "prompts/expert.txt": "You are an experienced clinician.\n",
    "prompts/reason.txt": "Think step by step before you answer.\n",
}
CELLS = ["base.none.none", "base.none.stepwise", "base.expert.none", "base.expert.stepwise"]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def arms_json(root: Path) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["arms", str(root), "--json"])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.output))


def test_ledger_arms_shows_four_distinct_hashes_for_a_system_prompt_factor(
    tmp_path: Path,
) -> None:
    root = write_study(tmp_path / "study", SPEC, extra=EXTRA)
    shown = arms_json(root)
    hashes = {a["id"]: a["sha256"] for a in shown["arms"]}
    assert sorted(hashes) == sorted(CELLS)
    assert len(set(hashes.values())) == 4, hashes
    pair = next(
        d
        for d in shown["differences"]
        if {d["arm"], d["other"]} == {"base.none.none", "base.expert.none"}
    )
    assert pair["only_in_arm"] == pair["only_in_other"] == []  # the components are the same
    assert pair["differs_in"] == ["factors", "system"]
    text = CliRunner().invoke(main, ["arms", str(root)])
    assert text.exit_code == 0, text.output
    said = (
        "base.expert.none vs base.none.none: only in base.expert.none: -; only in "
        "base.none.none: -; differs in: factors, system"
    )
    assert said in text.output.replace("\n", " ")


def test_item_template_levels_get_distinct_hashes(tmp_path: Path) -> None:
    spec = SPEC.replace(
        'levels.expert = { system = ["expert"] }', 'levels.expert = { template = "prompts/q.txt" }'
    ).replace(
        'scope = "prompt"\nlevels.none = {}\nlevels.expert',
        'scope = "item"\nlevels.none = {}\nlevels.expert',
        1,
    )
    root = write_study(
        tmp_path / "study", spec, extra={**EXTRA, "prompts/q.txt": "Q: {question}\nA:\n"}
    )
    identities = arm_identities(load_study(root))
    hashes = {arm: a["sha256"] for arm, a in ((a["id"], a) for a in arms_json(root)["arms"])}
    assert len(set(hashes.values())) == 4, hashes
    assert identities["base.expert.none"]["template"] == "prompts/q.txt"
    assert identities["base.none.none"]["template"] == "prompts/item.txt"
    assert "item template" in identity_differences(
        identities["base.expert.none"], identities["base.none.none"]
    )


def test_sampling_changes_the_hash_but_not_the_text(tmp_path: Path) -> None:
    """Two plain arms with the same components: only the sampling differs."""
    spec = (
        SPEC.split("[factors.persona]")[0]
        + """
[arms.A]
role = "full"
components = ["task"]

[arms.B]
role = "full"
components = ["task"]
sampling = { temperature = 0.2 }

[stimuli]
items = "items.jsonl"

[design]
replicates = 1
seed = 5
bootstrap_seed = 6
bootstrap_iterations = 100

[response]
parser = "normalized"

[[hypotheses]]
id = "H1"
description = "x"
contrast = ["A", "B"]
test = "mcnemar"
alpha = 0.05

[analysis]
exclude_unparseable = false
"""
    )
    root = write_study(tmp_path / "study", spec, extra=EXTRA)
    study = load_study(root)
    assert study.arm_text("A") == study.arm_text("B")
    shown = arms_json(root)
    a, b = (next(x["sha256"] for x in shown["arms"] if x["id"] == arm) for arm in ("A", "B"))
    assert a != b
    assert shown["differences"][0]["differs_in"] == ["sampling"]


# ------------------------------------------------------------------- locked, run, exported


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    base = tmp_path_factory.mktemp("armid")
    mp = pytest.MonkeyPatch()
    mp.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
    try:
        key = base / "owner.key"
        fixed_key("persona-reasoning/owner").save(key)
        root = write_study(base / "study", SPEC, extra=EXTRA)
        out = base / "archive"
        cli_export(root, key, out)
        yield root, out
    finally:
        mp.undo()


@pytest.fixture
def copy_(built: tuple[Path, Path], tmp_path: Path) -> Path:
    target = tmp_path / "archive"
    shutil.copytree(built[1], target)
    return target


def protocol_event(events: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in events if e["kind"] == "protocol.locked")


def test_the_archive_shows_and_verifies_the_four_identities(built: tuple[Path, Path]) -> None:
    root, archive = built
    report = verify_archive(archive)
    assert report.ok, [c for c in report.checks if c.status.name == "FAIL"]
    passed(report, "protocol")
    body = protocol_event(read_events(archive))["body"]
    assert body["arm_identity"] == 2
    locked = {arm: info["sha256"] for arm, info in body["arms"].items()}
    assert len(set(locked.values())) == 4
    # the same hashes as `ledger arms` before the lock
    assert {a["id"]: a["sha256"] for a in arms_json(root)["arms"]} == locked
    texts = {arm: (archive / "protocol" / "arms" / f"{arm}.txt").read_bytes() for arm in CELLS}
    assert texts["base.none.none"] == texts["base.expert.none"]  # the own text alone
    for arm in CELLS:
        data = (archive / "protocol" / "arms" / f"{arm}.json").read_bytes()
        assert sha(data) == locked[arm]
        obj = json.loads(data)
        assert obj["record"] == {
            k: v for k, v in body["arms"][arm].items() if k not in ("role", "sha256")
        }
    expert = json.loads((archive / "protocol" / "arms" / "base.expert.none.json").read_bytes())
    assert expert["components"]["expert"] == sha(EXTRA["prompts/expert.txt"].encode())
    readme = (archive / "README.md").read_text("utf-8")
    assert "| arm | role | components | arm SHA-256 |" in readme
    for arm in CELLS:
        assert f"`{locked[arm]}`" in readme
    assert "(system: expert; levels: persona=expert, reasoning=none)" in readme
    assert "`sha256sum protocol/arms/*.json` gives the arm hashes above" in readme
    assert "(`arm|item|rep`)" in readme  # this study's trial ids, not arm|stimulus|rep


def test_the_verifier_derives_the_identity_itself(built: tuple[Path, Path]) -> None:
    _, archive = built
    events = read_events(archive)
    body = protocol_event(events)["body"]
    digests = {
        e["body"]["path"]: e["body"]["sha256"] for e in events if e["kind"] == "artifact.locked"
    }
    paths = {
        "task": "prompts/task.txt",
        "expert": "prompts/expert.txt",
        "reason": "prompts/reason.txt",
    }
    for arm in CELLS:
        _, data, digest = identity(body, arm, lambda n: digests.get(paths.get(n, "")), digests.get)
        assert digest == body["arms"][arm]["sha256"]
        assert data == (archive / "protocol" / "arms" / f"{arm}.json").read_bytes()
    with pytest.raises(IdentityProblem, match="not a locked file"):
        identity(body, "base.none.none", lambda n: None, lambda p: None)
    with pytest.raises(IdentityProblem, match="arm_identity 3 is not a known version"):
        identity_version({"arm_identity": 3})


def test_a_forged_arm_hash_fails_naming_the_arm(copy_: Path) -> None:
    events = read_events(copy_)
    body = protocol_event(events)["body"]
    # the forger gives the expert arm the plain arm's hash, as version 1 did
    body["arms"]["base.expert.none"]["sha256"] = body["arms"]["base.none.none"]["sha256"]
    forge(copy_, events)
    with science_skipped():
        reason = failed(verify_archive(copy_), "protocol")
    assert "arm base.expert.none: the arm identity (docs/prompts.md §3.1) hashes to" in reason


def test_a_changed_identity_file_fails(copy_: Path) -> None:
    target = copy_ / "protocol" / "arms" / "base.expert.none.json"
    target.write_bytes((copy_ / "protocol" / "arms" / "base.none.none.json").read_bytes())
    forge(copy_, read_events(copy_))
    with science_skipped():
        reason = failed(verify_archive(copy_), "protocol")
    assert "protocol/arms/base.expert.none.json is not its identity object" in reason


def test_an_unknown_identity_version_fails(copy_: Path) -> None:
    events = read_events(copy_)
    protocol_event(events)["body"]["arm_identity"] = 3
    forge(copy_, events)
    with science_skipped():
        reason = failed(verify_archive(copy_), "protocol")
    assert "protocol.locked arm_identity 3 is not a known version" in reason


def test_an_archive_of_version_1_still_verifies(copy_: Path) -> None:
    """Version 1: no arm_identity, the arms' own-text hashes, no protocol/arms/*.json."""
    events = read_events(copy_)
    body = protocol_event(events)["body"]
    del body["arm_identity"]
    readme = (copy_ / "README.md").read_text("utf-8")
    html = (copy_ / "analysis" / "report.html").read_text("utf-8")
    lists = {p: p.read_text("utf-8") for p in (copy_ / "analysis" / "checklists").iterdir()}
    hashes: dict[str, str] = {}  # version 2's hash -> version 1's
    for arm, info in body["arms"].items():
        old = sha((copy_ / "protocol" / "arms" / f"{arm}.txt").read_bytes())
        hashes[info["sha256"]] = old
        readme = readme.replace(info["sha256"], old)
        html = html.replace(info["sha256"][:16], old[:16])
        lists = {p: t.replace(info["sha256"], old) for p, t in lists.items()}
        info["sha256"] = old
        (copy_ / "protocol" / "arms" / f"{arm}.json").unlink()
    (copy_ / "README.md").write_text(readme, "utf-8")
    (copy_ / "analysis" / "report.html").write_text(html, "utf-8")
    for path, text in lists.items():  # the reporting checklists quote the arms' hashes too
        path.write_text(text, "utf-8")
    # so does the OSF preregistration, a locked blob: rewritten and every reference moved
    osf = copy_ / "protocol" / "osf-preregistration.md"
    text, before = osf.read_text("utf-8"), sha(osf.read_bytes())
    for v2, v1 in hashes.items():
        text = text.replace(v2, v1)
    osf.write_text(text, "utf-8")
    after = sha(osf.read_bytes())
    (copy_ / "blobs" / after).write_bytes(osf.read_bytes())
    files_csv = copy_ / "protocol" / "files.csv"
    files_csv.write_text(files_csv.read_text("utf-8").replace(before, after), "utf-8")
    for event in events:
        moved = json.loads(json.dumps(event).replace(before, after))
        event.clear()
        event.update(moved)
    body = protocol_event(events)["body"]
    forge(copy_, events)
    report = verify_archive(copy_)
    assert report.ok, [c for c in report.checks if c.status.name == "FAIL"]
    passed(report, "protocol")
    # and a version-1 hash that is not the text's still fails, as it always did
    body["arms"]["base.none.none"]["sha256"] = "0" * 64
    forge(copy_, events)
    with science_skipped():
        reason = failed(verify_archive(copy_), "protocol")
    assert "arm base.none.none: the composed text hashes to" in reason
