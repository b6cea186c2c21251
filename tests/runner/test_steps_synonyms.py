"""Set-valued steps merged by a declared synonym matcher (``match_by``, prompts.md §8.3).

Three simulated models list an item's diagnoses as the item's data says (``Lists by model:``),
two of them spelling one diagnosis differently (``MI`` / ``myocardial infarction``); the
simulated matcher groups initials with their words. With ``match_by`` and ``{ k = 2 }`` the
diagnosis enters the set; the same step without it leaves it out.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from helpers import fixed_key, science_skipped
from steps_study import STEPS, write_study

from ledger import Ledger
from ledger.cli import main
from runner._backends import SimulatedBackend
from runner._execute import RunOptions, run_study
from runner._lock import lock_study
from runner.steps._core import aggregate, normalise_element, synonym_groups, votes_text
from verify._steps import decide, groups_of, votes_slot

KEY = fixed_key("steps.example/owner")
MODELS = {
    "judge_a": "claude-haiku-4-5",
    "judge_b": "claude-opus-4-1",
    "target": "claude-sonnet-4-6",
}


def _lists(a: list[str], b: list[str], c: list[str]) -> str:
    ids = list(MODELS.values())
    return json.dumps(dict(zip(ids, [a, b, c], strict=True)))


VOTES = {
    "q01": _lists(["MI", "asthma"], ["myocardial infarction", "Asthma"], ["gout"]),
    "q02": _lists(["gout"], ["gout", "M.I."], ["rash"]),
}

SCHEMA = {
    "type": "object",
    "properties": {"diagnoses": {"type": "array", "items": {"type": "string"}}},
    "required": ["diagnoses"],
}
GROUPS = {
    "type": "object",
    "properties": {"groups": {"type": "array", "items": {"type": "string"}}},
    "required": ["groups"],
}


JUDGE = "\n[steps.judge]" + STEPS.split("[steps.judge]")[1].split("[reviews.audit]")[0]


def steps(
    ref_extra: str = 'match_by = "syn"',
    syn_models: str = '["judge_a"]',
    syn_template: str = "prompts/syn.txt",
    syn_schema: str = "schemas/groups.json",
) -> str:
    """The step tables: a matched and a plain set-valued step, and the matcher."""
    return f"""
[steps.ref]
on = "item"
models = ["judge_a", "judge_b", "target"]
template = "prompts/ref.txt"
parser = "json"
schema = "schemas/dx.json"
aggregate = {{ k = 2 }}
{ref_extra}

[steps.plain]
on = "item"
models = ["judge_a", "judge_b", "target"]
template = "prompts/ref.txt"
parser = "json"
schema = "schemas/dx.json"
aggregate = {{ k = 2 }}

[steps.syn]
on = "item"
models = {syn_models}
template = "{syn_template}"
parser = "json"
schema = "{syn_schema}"
{JUDGE}"""


def write(root: Path, table: str | None = None, **prompts: str) -> Path:
    """The synonym study: two items, the item template reads both set-valued steps."""
    texts = {
        "item": "Question: {question}\nMatched: {steps.ref}\nPlain: {steps.plain}\n",
        "ref": "List the diagnoses.\nLists by model: {lists}\n",
        "syn": "Group the synonyms.\nSynonyms among:\n{votes.ref}\n",
        **prompts,
    }
    write_study(root, table if table is not None else steps(), **texts)
    rows = [json.loads(x) for x in (root / "data/items.jsonl").read_text().splitlines()][:2]
    for row in rows:
        row["lists"] = VOTES[row["id"]]
    (root / "data/items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "schemas").mkdir()
    (root / "schemas/dx.json").write_text(json.dumps(SCHEMA))
    (root / "schemas/groups.json").write_text(json.dumps(GROUPS))
    toml = (
        (root / "study.toml")
        .read_text()
        .replace('\n[reviews.audit]\nstep = "judge"\nn = 2\nseed = 9\n', "\n")
    )
    (root / "study.toml").write_text(toml)
    return root


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(path))
        yield path


@pytest.fixture(scope="module")
def ran(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write(tmp_path_factory.mktemp("syn") / "study")
    lock_study(root, KEY)
    result = run_study(root, KEY, SimulatedBackend(), RunOptions(concurrency=2, jitter_seed=1))
    assert result.reason == "complete"
    return root


def _requests(root: Path) -> dict[str, str]:
    out = {}
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        for e in log.events("trial.requested"):
            body = json.loads(log.blob(e.blobs["request"]))
            out[e.body["stimulus"]] = body["messages"][-1]["content"][0]["text"]
    return out


def test_matched_spellings_reach_k_and_plain_voting_does_not(ran: Path) -> None:
    texts = _requests(ran)
    matched = {k: json.loads(t.split("Matched: ")[1].split("\n")[0]) for k, t in texts.items()}
    plain = {k: json.loads(t.split("Plain: ")[1].split("\n")[0]) for k, t in texts.items()}
    assert matched["q01"] == {"diagnoses": ["MI", "asthma"]}  # MI ~ myocardial infarction
    assert plain["q01"] == {"diagnoses": ["asthma"]}
    assert matched["q02"] == plain["q02"] == {"diagnoses": ["gout"]}  # M.I. once: not k


def test_matcher_reads_the_sorted_normalised_union_of_the_votes(ran: Path) -> None:
    with Ledger.open(ran / "ledger.db", readonly=True) as log:
        seen = {}
        for e in log.events("step.requested"):
            if e.body["step"] == "syn":
                body = json.loads(log.blob(e.blobs["request"]))
                seen[e.body["item"]] = body["messages"][-1]["content"][0]["text"]
    assert seen["q01"].endswith("Synonyms among:\nasthma\ngout\nmi\nmyocardial infarction")


def test_both_implementations_merge_groups_alike() -> None:
    votes = [{"d": ["MI", "asthma"]}, {"d": ["Myocardial  infarction"]}, None]
    groups = [["myocardial infarction", "mi", "nowhere"]]
    assert aggregate(2, votes, ("d",), groups) == decide(2, votes, ("d",), groups) == {"d": ["MI"]}
    assert aggregate(2, votes, ("d",)) == decide(2, votes, ("d",)) == {"d": []}
    assert votes_text(votes, ("d",)) == votes_slot(votes, ("d",))
    raw = {"groups": ["MI | Myocardial infarction", " | "]}
    assert (
        synonym_groups(raw)
        == groups_of(raw)
        == [["mi", normalise_element("Myocardial infarction")]]
    )


@pytest.mark.parametrize(
    ("table", "says"),
    [
        (
            steps().replace("[steps.plain]\n", '[steps.plain]\nmatch_by = "syn"\n'),
            "already matches step 'ref'",
        ),
        (steps(), None),
        (steps(syn_models='["judge_a", "judge_b"]'), "must have one model"),
        (steps(syn_schema="schemas/dx.json"), 'only property is "groups"'),
        (steps(ref_extra='match_by = "ref"'), "a cycle"),
        (steps(ref_extra='match_by = "nope"'), "no step named 'nope'"),
    ],
)
def test_lock_refuses_bad_matchers(
    tmp_path: Path, home: Path, table: str, says: str | None
) -> None:
    root = write(tmp_path / "study", table)
    if says is None:  # a matcher whose template reads another step's votes
        root = write(tmp_path / "other", steps(), syn="Synonyms among:\n{votes.plain}\n")
        says = "reads no {votes.ref}"
    key = tmp_path / "owner.key"
    KEY.save(key)
    result = invoke("lock", root, "--key", key)
    assert result.exit_code != 0 and not (root / "ledger.db").exists()
    assert says in result.output, result.output


def test_match_by_on_a_step_that_is_not_set_valued_is_refused(tmp_path: Path, home: Path) -> None:
    table = (
        steps() + '\n[steps.note]\non = "item"\nmodels = ["judge_a"]\n'
        'template = "prompts/note.txt"\nmatch_by = "syn"\n'
    )
    root = write(tmp_path / "study", table, note="Note: {question}\n")
    key = tmp_path / "owner.key"
    KEY.save(key)
    result = invoke("lock", root, "--key", key)
    assert result.exit_code != 0 and "applies to set-valued steps only" in result.output


@pytest.fixture(scope="module")
def exported(ran: Path) -> Path:
    """The run study scored, unblinded, analysed and exported (shared)."""
    key = ran.parent / "owner.key"
    KEY.save(key)
    for args in (
        ("score", ran),
        ("unblind", ran),
        ("analyze", ran),
        ("export", ran, ran.parent / "archive"),
    ):
        result = invoke(*args, "--key", key)
        assert result.exit_code == 0, result.output
    return ran.parent / "archive"


def test_verifier_rederives_the_matched_sets_and_fails_a_doctored_matcher(
    exported: Path, tmp_path: Path
) -> None:
    from tests.verify.test_archive_tamper import passed, read_events, resign
    from verify import verify_archive

    report = verify_archive(exported)
    assert report.ok, [c for c in report.checks if c.status.name == "FAIL"]
    archive = tmp_path / "archive"
    shutil.copytree(exported, archive)
    events = read_events(archive)
    asked = next(
        e["seq"]
        for e in events
        if e["kind"] == "step.requested"
        and e["body"]["step"] == "syn"
        and e["body"]["item"] == "q01"
    )
    answer = next(
        e for e in events if e["kind"] == "step.responded" and e["body"]["request_seq"] == asked
    )
    reply = json.loads((archive / "blobs" / answer["blobs"]["response"]).read_bytes())
    reply["content"][0]["text"] = json.dumps({"groups": []})
    data = json.dumps(reply).encode()
    digest = hashlib.sha256(data).hexdigest()
    (archive / "blobs" / digest).write_bytes(data)
    answer["blobs"]["response"] = digest
    for k, v in list(answer["body"].items()):
        if v == answer["blobs"]["response"] or k == "response_sha256":
            answer["body"][k] = digest
    resign(archive, events)
    with science_skipped():  # the FAIL read is the requests check's
        report = verify_archive(archive)
    passed(report, "signatures")
    reason = " ".join(c.reason for c in report.checks if c.status.name == "FAIL")
    # the re-derived set loses "MI": the trial request that read it no longer matches
    assert "|target|q01|1: request blob" in reason and "Matched:" in reason, reason
    assert "seq " in reason
