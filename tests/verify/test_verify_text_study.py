"""A text study end to end (docs/prompts.md): the verifier re-renders every request, then tampers.

One module-scoped study is written from the page (items with an image, an item template, two
few-shot sets, one as turns and one inline, a system prompt, a per-arm sampling override, a
per-arm seeded subset and replicates), locked, run on the simulated backend, scored, unblinded,
analysed and exported through the CLI. The fresh archive verifies; each tamper below copies it,
changes one thing (as a forger would: blobs re-hashed, events re-signed, the manifest and
``export.created`` rewritten where said) and must fail, naming the file or the trial. A tamper
whose FAIL comes from a check other than the science ones verifies without them
(``helpers.science_skipped``), the re-score tamper without the re-analysis
(``helpers.reanalysis_skipped``); the fresh exports verify in full.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import fixed_key, reanalysis_skipped, science_skipped
from PIL import Image

from ledger import canonical_json
from ledger.cli import main
from tests.verify.test_archive_tamper import failed, passed, read_events, resign, rewrite_manifest
from verify import Report, Status, verify_archive

SPEC = """\
[study]
id = "text-pilot"
title = "Do worked examples help on multiple-choice items?"

[model]
provider = "anthropic"
id = "claude-sonnet-4-6"
max_tokens = 16
temperature = 0.0

[components]
task = "prompts/task.txt"
persona = "prompts/persona.txt"
rule = "prompts/rule.txt"

[prompt]
item = "prompts/item.txt"
option_format = "({label}) {text}"

[fewshot.turns]
examples = "fewshot/examples.jsonl"
rule = "label-balanced"
count = 2
seed = 3
answer = "prompts/answer.txt"

[fewshot.inline]
examples = "fewshot/examples.jsonl"
rule = "fixed"
ids = ["e3", "e1"]
order = "id"
style = "inline"

[arms.A]
role = "full"
components = ["rule", "task"]
system = ["persona"]
fewshot = "turns"

[arms.B]
role = "matched-control"
components = ["task"]
system = ["persona"]
fewshot = "turns"
differs_from = { arm = "A", by = ["rule"] }
sampling = { temperature = 0.5, stop = ["\\n\\n"] }

[arms.C]
role = "vehicle"
components = ["item", "task"]
fewshot = "inline"
replicates = 1
items = { n = 4, seed = 5 }

[stimuli]
items = "items/items.jsonl"

[design]
replicates = 2
seed = 11
bootstrap_seed = 12
bootstrap_iterations = 200

[response]
parser = "multiple-choice"
mode = "first-token"

[[hypotheses]]
id = "H1"
description = "The rule helps."
contrast = ["A", "B"]
test = "mcnemar"
alpha = 0.05

[analysis]
exclude_unparseable = false
random_intercept = "source"
"""

ITEMS = [
    {
        "id": f"q{i}",
        "question": f"What is {i} plus {i}?",
        "options": [str(2 * i), str(2 * i + 1), str(2 * i + 2)],
        "answer": "A",
        "metadata": {"subject": "arithmetic", "source": f"set{(i + 1) // 2}"},
    }
    for i in range(1, 7)
]
ITEMS[1]["images"] = ["img/q2.png"]
EXAMPLES = [
    {
        "id": f"e{i}",
        "question": f"Example question {i}?",
        "options": ["yes", "no"],
        "answer": "AB"[i % 2],
    }
    for i in range(1, 5)
]


def jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def write_study(root: Path) -> Path:
    files = {
        "study.toml": SPEC,
        "prompts/task.txt": "Answer with the letter of the right option.\n",
        "prompts/persona.txt": "You are a careful examiner.\n",
        "prompts/rule.txt": "Work the sum out before you answer.\n",
        "prompts/item.txt": "Question {id}: {question}\n{options}\n",
        "prompts/answer.txt": "Answer: {answer} ({answer_text})\n",
        "items/items.jsonl": jsonl(ITEMS),
        "fewshot/examples.jsonl": jsonl(EXAMPLES),
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (root / "items" / "img").mkdir()
    Image.new("RGB", (32, 24), (200, 30, 30)).save(root / "items" / "img" / "q2.png")
    return root


MODELS = """\
[models.big]
provider = "anthropic"
id = "claude-sonnet-4-6"
max_tokens = 16
temperature = 0.0

[models.small]
provider = "openai-compatible"
id = "llama-3.1-8b"
max_tokens = 8
temperature = 1.5
top_k = 20
"""


def multi_model_spec() -> str:
    """The study with two models; arm B runs on the small one only."""
    head, rest = SPEC.split("[model]\n", 1)
    rest = rest[rest.index("[components]") :]
    rest = rest.replace('sampling = { temperature = 0.5, stop = ["\\n\\n"] }', 'models = ["small"]')
    return head + MODELS + "\n" + rest


def build(base: Path, spec: str) -> Iterator[Path]:
    """The study locked, run (simulated), scored, unblinded, analysed and exported."""
    mp = pytest.MonkeyPatch()
    mp.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
    try:
        key = base / "owner.key"
        fixed_key("text-pilot/owner").save(key)
        root = write_study(base / "study")
        (root / "study.toml").write_text(spec, encoding="utf-8")
        for step in (
            ("lock", root),
            ("run", root, "--backend", "simulated"),
            ("score", root),
            ("unblind", root),
            ("analyze", root),
        ):
            result = CliRunner().invoke(main, [*map(str, step), "--key", str(key)])
            assert result.exit_code == 0, (step, result.output)
        out = base / "archive"
        result = CliRunner().invoke(main, ["export", str(root), str(out), "--key", str(key)])
        assert result.exit_code == 0, result.output
        yield out
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The study of :data:`SPEC`, exported."""
    yield from build(tmp_path_factory.mktemp("text-study"), SPEC)


@pytest.fixture(scope="module")
def multi_archive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The study with two models (:func:`multi_model_spec`), exported."""
    yield from build(tmp_path_factory.mktemp("multi-model-study"), multi_model_spec())


@pytest.fixture
def copy_(archive: Path, tmp_path: Path) -> Path:
    target = tmp_path / "archive"
    shutil.copytree(archive, target)
    return target


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob(root: Path, digest: str) -> bytes:
    return (root / "blobs" / digest).read_bytes()


def put_blob(root: Path, data: bytes) -> str:
    digest = sha(data)
    (root / "blobs" / digest).write_bytes(data)
    return digest


def forge(root: Path, events: list[dict[str, Any]]) -> None:
    """Make the archive consistent with ``events`` as a careful forger would, and re-sign.

    Blobs no event references are removed, ``protocol/protocol.json`` is rewritten from the
    ``protocol.locked`` body, ``export.created`` lists the files and blobs as they now are, and
    the ledger is re-signed (:func:`test_archive_tamper.resign`, which rewrites the manifest).
    """
    referenced = {d for e in events for d in e["blobs"].values()}
    for path in (root / "blobs").iterdir():
        if path.name not in referenced:
            path.unlink()
    protocol = next(e for e in events if e["kind"] == "protocol.locked")
    doc = dict(protocol["body"], seq=protocol["seq"])
    (root / "protocol" / "protocol.json").write_text(
        json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False) + "\n", "utf-8"
    )
    export = next(e for e in events if e["kind"] == "export.created")
    files = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel.split("/")[0] not in ("ledger", "blobs") and rel != "MANIFEST.sha256":
            files[rel] = sha(path.read_bytes())
    names = sorted(p.name for p in (root / "blobs").iterdir())
    export["body"]["files"] = files
    export["body"]["blobs"] = {
        "count": len(names),
        "listing_sha256": sha("".join(n + "\n" for n in names).encode()),
    }
    resign(root, events)


def relock(
    root: Path, events: list[dict[str, Any]], path: str, change: Callable[[bytes], bytes]
) -> tuple[bytes, bytes]:
    """Change the locked file ``path``: a new blob, its artifact.locked and the manifest entry.

    The archive copy under ``protocol/`` and ``protocol/files.csv`` follow. Returns the old and
    new bytes; ``protocol.locked`` records other than ``manifest`` are left as they were.
    """
    art = next(e for e in events if e["kind"] == "artifact.locked" and e["body"]["path"] == path)
    old = blob(root, art["blobs"]["content"])
    new = change(old)
    digest = put_blob(root, new)
    art["blobs"]["content"] = digest
    art["body"]["sha256"] = digest
    art["body"]["size"] = len(new)
    protocol = next(e for e in events if e["kind"] == "protocol.locked")
    protocol["body"]["manifest"][path] = digest
    (root / "protocol" / path).write_bytes(new)
    files_csv = root / "protocol" / "files.csv"
    files_csv.write_text(files_csv.read_text("utf-8").replace(sha(old), digest), "utf-8")
    return old, new


def relocked_report(root: Path, path: str, change: Callable[[bytes], bytes]) -> Report:
    """A careful forger's archive: ``path`` changed and re-locked (:func:`relock`), every event
    re-signed (:func:`forge`); return the verifier's report on it."""
    events = read_events(root)
    relock(root, events, path, change)
    forge(root, events)
    return verify_archive(root)


def requests_of(events: list[dict[str, Any]], item: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == "trial.requested" and e["body"]["stimulus"] == item]


def check(report: Report, name: str) -> Any:
    found = report.get(name)
    assert found is not None
    return found


# ------------------------------------------------------------------------------ the fresh export


def test_the_text_study_verifies(archive: Path) -> None:
    report = verify_archive(archive)
    assert report.ok, [c for c in report.checks if c.status is Status.FAIL]
    for name in ("protocol", "schedule", "requests", "outcomes", "rescore", "reanalysis"):
        passed(report, name)
    assert "byte for byte" in check(report, "requests").reason
    events = read_events(archive)
    protocol = next(e for e in events if e["kind"] == "protocol.locked")["body"]
    assert protocol["response"]["truth"] == "items"
    # the design of docs/prompts.md §7: A and B on 6 items x 2 replicates, C on 4 items x 1
    assert protocol["trials"] == 6 * 2 + 6 * 2 + 4
    roles = {e["body"]["path"]: e["body"]["role"] for e in events if e["kind"] == "artifact.locked"}
    assert roles["items/img/q2.png"] == "item-image"
    assert (archive / "protocol" / "items" / "img" / "q2.png").is_file()
    # the random intercept groups by the items' metadata.source, re-derived by the verifier
    results = json.loads((archive / "analysis" / "results.json").read_text("utf-8"))
    lmm = next(r for r in results if r["id"] == "model.lmm")
    assert lmm["status"] == "ok" and lmm["values"]["group_col"] == "source"
    assert lmm["values"]["n_groups"] == 3


def test_the_requests_show_what_the_page_says(archive: Path) -> None:
    """One request of each arm, read back: turns, system prompt, sampling, inline examples."""
    events = read_events(archive)
    by_arm = {}
    for e in events:
        if e["kind"] == "trial.requested" and e["body"]["stimulus"] == "q2":
            by_arm.setdefault(e["body"]["arm"], json.loads(blob(archive, e["blobs"]["request"])))
    a, b, c = by_arm["A"], by_arm["B"], by_arm.get("C")
    assert a["system"] == "You are a careful examiner."
    assert [m["role"] for m in a["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    assert a["messages"][1]["content"][0]["text"].startswith("Answer: ")
    last = a["messages"][-1]["content"]
    assert [blk["type"] for blk in last] == ["image", "text"]
    assert last[1]["text"] == (
        "Work the sum out before you answer.\n\nAnswer with the letter of the right option.\n\n"
        "Question q2: What is 2 plus 2?\n(A) 4\n(B) 5\n(C) 6\n"
    )
    assert (b["temperature"], b["stop_sequences"]) == (0.5, ["\n\n"])
    assert a["temperature"] == 0 and "stop_sequences" not in a
    if c is not None:  # q2 may be outside C's seeded subset
        text = c["messages"][-1]["content"][-1]["text"]
        assert text.startswith(
            "Question e1: Example question 1?\n(A) yes\n(B) no\nB\n\nQuestion e3:"
        )
        assert "system" not in c and len(c["messages"]) == 1


# ------------------------------------------------------------------------------ tampers


def test_changed_item_file_in_the_archive_fails_naming_it(copy_: Path) -> None:
    path = copy_ / "protocol" / "items" / "items.jsonl"
    path.write_text(
        path.read_text("utf-8").replace("What is 3 plus 3?", "What is 3 plus 4?"), "utf-8"
    )
    with science_skipped():
        report = verify_archive(copy_)
    assert "protocol/items/items.jsonl" in failed(report, "manifest")
    assert "protocol/items/items.jsonl" in failed(report, "protocol")
    rewrite_manifest(copy_)
    with science_skipped():
        report = verify_archive(copy_)
    passed(report, "manifest")
    assert "protocol/items/items.jsonl" in failed(report, "protocol")
    assert "protocol/items/items.jsonl" in failed(report, "export-coverage")


def test_changed_item_blob_fails_naming_the_file(copy_: Path) -> None:
    events = read_events(copy_)
    art = next(
        e
        for e in events
        if e["kind"] == "artifact.locked" and e["body"]["path"] == "items/items.jsonl"
    )
    path = copy_ / "blobs" / art["blobs"]["content"]
    path.write_bytes(path.read_bytes().replace(b"3 plus 3", b"3 plus 4"))
    rewrite_manifest(copy_)
    with science_skipped():
        report = verify_archive(copy_)
    assert "items/items.jsonl" in failed(report, "protocol")
    assert "items/items.jsonl" in failed(report, "requests") or "q3" in failed(report, "requests")


def test_item_changed_after_lock_and_resigned_fails_the_digest_and_the_rerender(
    copy_: Path,
) -> None:
    """A forger changes an item, re-hashes its blob and re-signs everything but the digest."""
    events = read_events(copy_)
    relock(
        copy_,
        events,
        "items/items.jsonl",
        lambda b: b.replace(b"What is 3 plus 3?", b"What is 3 plus 30?"),
    )
    forge(copy_, events)
    with science_skipped():
        report = verify_archive(copy_)
    for name in ("signatures", "chain", "manifest", "export-coverage"):
        passed(report, name)
    reason = failed(report, "protocol")
    assert "protocol.locked items (items/items.jsonl): sha256" in reason
    trial = requests_of(events, "q3")[0]
    reason = failed(report, "requests")
    assert f"seq {trial['seq']}: trial {trial['body']['trial']}" in reason
    assert "What is 3 plus 3?" in reason and "What is 3 plus 30?" in reason


def test_item_changed_with_its_digest_and_resigned_fails_the_rerender(copy_: Path) -> None:
    """Even with protocol.locked's items digest forged too, the recorded requests differ."""
    events = read_events(copy_)
    _, new = relock(
        copy_,
        events,
        "items/items.jsonl",
        lambda b: b.replace(b"What is 3 plus 3?", b"What is 3 plus 30?"),
    )
    protocol = next(e for e in events if e["kind"] == "protocol.locked")
    canon = b"".join(canonical_json(json.loads(line)) + b"\n" for line in new.splitlines())
    protocol["body"]["items"]["sha256"] = sha(canon)
    forge(copy_, events)
    with science_skipped():
        report = verify_archive(copy_)
    passed(report, "signatures")
    passed(report, "protocol")
    passed(report, "schedule")  # the ids did not change
    trial = requests_of(events, "q3")[0]
    assert f"seq {trial['seq']}: trial {trial['body']['trial']}" in failed(report, "requests")


def test_item_answer_changed_with_its_digest_fails_the_rescore(copy_: Path) -> None:
    events = read_events(copy_)
    scored = [e for e in events if e["kind"] == "trial.scored" and e["body"]["status"] == "ok"]
    assert scored, "the simulated model answered no item"
    responded = {e["seq"]: e for e in events if e["kind"] == "trial.responded"}
    requested = {e["seq"]: e for e in events if e["kind"] == "trial.requested"}
    item = requested[responded[scored[0]["body"]["response_seq"]]["body"]["request_seq"]]["body"][
        "stimulus"
    ]
    old_line = json.dumps(next(i for i in ITEMS if i["id"] == item)).encode()
    new_line = old_line.replace(b'"answer": "A"', b'"answer": "C"')
    _, new = relock(copy_, events, "items/items.jsonl", lambda b: b.replace(old_line, new_line))
    protocol = next(e for e in events if e["kind"] == "protocol.locked")
    protocol["body"]["items"]["sha256"] = sha(
        b"".join(canonical_json(json.loads(line)) + b"\n" for line in new.splitlines())
    )
    forge(copy_, events)
    with reanalysis_skipped():  # rescore runs first and on its own
        report = verify_archive(copy_)
    passed(report, "signatures")
    passed(report, "requests")  # the answer never reaches the model
    assert "does not re-score" in failed(report, "rescore")


def test_request_altered_and_resigned_fails_naming_the_trial(copy_: Path) -> None:
    events = read_events(copy_)
    target = next(e for e in events if e["kind"] == "trial.requested" and e["body"]["arm"] == "A")
    request = json.loads(blob(copy_, target["blobs"]["request"]))
    request["messages"][-1]["content"][-1]["text"] += "Take your time.\n"
    digest = put_blob(copy_, canonical_json(request))
    target["blobs"]["request"] = digest
    target["body"]["request_sha256"] = digest
    for e in events:  # the response names its request by seq, not by hash: nothing else changes
        assert e["blobs"].get("request") != digest or e is target
    attempts = copy_ / "trials" / "attempts.csv"
    lines = attempts.read_text("utf-8").splitlines(keepends=True)
    old = next(line for line in lines if line.startswith(f"{target['seq']},"))
    attempts.write_text(
        "".join(line.replace(old.split(",")[4], digest) if line == old else line for line in lines),
        "utf-8",
    )
    forge(copy_, events)
    with science_skipped():
        report = verify_archive(copy_)
    for name in ("signatures", "chain", "manifest", "export-coverage", "schedule", "derived"):
        passed(report, name)
    reason = failed(report, "requests")
    assert f"seq {target['seq']}: trial {target['body']['trial']}" in reason
    assert "messages[4].content[1].text" in reason or "messages[4].content[0].text" in reason


def test_fewshot_example_file_changed_in_the_archive_fails_naming_it(copy_: Path) -> None:
    path = copy_ / "protocol" / "fewshot" / "examples.jsonl"
    path.write_text(path.read_text("utf-8").replace("Example question 1?", "Example one?"), "utf-8")
    rewrite_manifest(copy_)
    with science_skipped():
        report = verify_archive(copy_)
    assert "protocol/fewshot/examples.jsonl" in failed(report, "protocol")


def test_fewshot_example_changed_after_lock_and_resigned_fails(copy_: Path) -> None:
    events = read_events(copy_)
    relock(
        copy_,
        events,
        "fewshot/examples.jsonl",
        lambda b: b.replace(b"Example question 1?", b"Example one?"),
    )
    forge(copy_, events)
    with science_skipped():
        report = verify_archive(copy_)
    passed(report, "signatures")
    reason = failed(report, "protocol")
    assert "fewshot.inline.examples (fewshot/examples.jsonl): sha256" in reason or (
        "fewshot.turns.examples (fewshot/examples.jsonl): sha256" in reason
    )
    # e1 is in every request of arm C (its fixed inline examples), and in some of A and B
    reason = failed(report, "requests")
    assert re.search(r"^seq \d+: trial [ABC]\|q\d\|\d: ", reason), reason
    assert "Example question 1?" in reason and "Example one?" in reason


def test_template_changed_after_lock_and_resigned_fails_naming_the_trial(copy_: Path) -> None:
    events = read_events(copy_)
    relock(copy_, events, "prompts/item.txt", lambda b: b.replace(b"Question", b"Q"))
    forge(copy_, events)
    with science_skipped():
        report = verify_archive(copy_)
    passed(report, "signatures")
    # the template still fills, but the arm hash covers the template's bytes (docs/prompts.md
    # §3.1), so the locked arm hashes no longer hold; and every request differs
    assert "arm A: the arm identity (docs/prompts.md §3.1) hashes to" in failed(report, "protocol")
    first = next(e for e in events if e["kind"] == "trial.requested")
    assert f"seq {first['seq']}: trial {first['body']['trial']}" in failed(report, "requests")


def test_subset_seed_changed_and_resigned_fails_the_schedule(copy_: Path) -> None:
    events = read_events(copy_)
    protocol = next(e for e in events if e["kind"] == "protocol.locked")
    ids = [i["id"] for i in ITEMS]

    def chosen(seed: int) -> set[str]:
        return set(sorted(ids, key=lambda i: sha(f"{seed}|{i}".encode()))[:4])

    seed = next(s for s in range(6, 100) if chosen(s) != chosen(5))
    protocol["body"]["arms"]["C"]["items"]["seed"] = str(seed)
    forge(copy_, events)
    with science_skipped():
        report = verify_archive(copy_)
    passed(report, "signatures")
    assert "the recomputed schedule hashes to" in failed(report, "schedule")


def test_unreferenced_item_image_role_fails(copy_: Path) -> None:
    """An item names an image the lock recorded under another role."""
    events = read_events(copy_)
    art = next(
        e
        for e in events
        if e["kind"] == "artifact.locked" and e["body"]["path"] == "items/img/q2.png"
    )
    art["body"]["role"] = "document"
    files_csv = copy_ / "protocol" / "files.csv"
    files_csv.write_text(
        files_csv.read_text("utf-8").replace(",item-image,", ",document,"), "utf-8"
    )
    forge(copy_, events)
    with science_skipped():
        report = verify_archive(copy_)
    passed(report, "signatures")
    assert "items/img/q2.png: role 'document', but an item names it" in failed(report, "protocol")


# ------------------------------------------------------------------------------ two models


def test_the_multi_model_study_verifies(multi_archive: Path) -> None:
    report = verify_archive(multi_archive)
    assert report.ok, [c for c in report.checks if c.status is Status.FAIL]
    schedule = (multi_archive / "trials" / "schedule.csv").read_text("utf-8").splitlines()
    assert schedule[0] == "position,arm_code,model,stimulus,rep,trial"
    trials = {line.split(",")[-1] for line in schedule[1:]}
    # A on both models (6 items x 2 replicates each), B on the small one, C on both (4 x 1)
    assert len(trials) == 2 * 12 + 12 + 2 * 4
    assert all(t.count("|") == 3 for t in trials)
    assert not any(t.startswith("B|big|") for t in trials)
    events = read_events(multi_archive)
    small = next(
        e
        for e in events
        if e["kind"] == "trial.requested" and e["body"]["trial"].startswith("A|small|")
    )
    request = json.loads(blob(multi_archive, small["blobs"]["request"]))
    assert (request["model"], request["max_tokens"], request["top_k"]) == ("llama-3.1-8b", 8, 20)


def test_a_request_sent_to_the_other_model_fails_naming_the_trial(
    multi_archive: Path, tmp_path: Path
) -> None:
    root = tmp_path / "archive"
    shutil.copytree(multi_archive, root)
    events = read_events(root)
    target = next(
        e
        for e in events
        if e["kind"] == "trial.requested" and e["body"]["trial"].startswith("A|small|")
    )
    request = json.loads(blob(root, target["blobs"]["request"]))
    request.update(model="claude-sonnet-4-6", max_tokens=16, temperature=0)
    del request["top_k"]
    digest = put_blob(root, canonical_json(request))
    target["blobs"]["request"] = digest
    target["body"]["request_sha256"] = digest
    attempts = root / "trials" / "attempts.csv"
    lines = attempts.read_text("utf-8").splitlines(keepends=True)
    old = next(line for line in lines if line.startswith(f"{target['seq']},"))
    attempts.write_text(
        "".join(line.replace(old.split(",")[4], digest) if line == old else line for line in lines),
        "utf-8",
    )
    forge(root, events)
    with science_skipped():
        report = verify_archive(root)
    passed(report, "signatures")
    passed(report, "schedule")
    reason = failed(report, "requests")
    assert f"seq {target['seq']}: trial {target['body']['trial']}: " in reason
    assert "max_tokens: recorded 16, re-rendered 8" in reason


def test_a_changed_model_cell_of_schedule_csv_fails(multi_archive: Path, tmp_path: Path) -> None:
    root = tmp_path / "archive"
    shutil.copytree(multi_archive, root)
    path = root / "trials" / "schedule.csv"
    lines = path.read_text("utf-8").splitlines(keepends=True)
    cells = lines[1].split(",")
    cells[2] = "small" if cells[2] == "big" else "big"
    lines[1] = ",".join(cells)
    path.write_text("".join(lines), "utf-8")
    rewrite_manifest(root)
    with science_skipped():
        report = verify_archive(root)
    assert "trials/schedule.csv line 2" in failed(report, "schedule")
