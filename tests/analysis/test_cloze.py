"""Cloze scoring from option-letter log-probabilities (docs/scoring.md §5.5), end to end.

A fake OpenAI-compatible server on 127.0.0.1 answers chat completions as vLLM and llama.cpp's
server do when asked for ``logprobs`` and ``top_logprobs``: the reply text and, for the first
generated token, its log-probability and the top alternatives (here the simulated text model's
letter distribution, :meth:`runner.simulated._text.SimulatedTextModel.respond_openai`). A cloze
study with option-order variants is locked, run through the real ``openai-compatible`` backend
over HTTP, scored, analysed, exported and verified; the verifier re-derives every cloze score
from the recorded responses. Responses that lack an option letter's log-probability are
recorded, counted exclusions. A backend that cannot return log-probabilities is refused at lock.
"""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import fixed_key

from analysis._parse import parse_cloze
from ledger import Ledger
from ledger.cli import main
from runner.simulated._text import SimulatedTextModel
from tests.verify.test_archive_tamper import failed, passed, read_events
from tests.verify.test_verify_text_study import blob, forge, put_blob
from verify import verify_archive
from verify._rescore import parse_cloze as verify_parse_cloze

ITEMS = [
    {
        "id": "q1",
        "question": "Which organ pumps blood through the body?",
        "options": ["Liver", "Lung", "Heart", "Kidney"],
        "answer": "C",
    },
    {
        "id": "q2",
        "question": "Which vitamin deficiency causes scurvy?",
        "options": ["Vitamin C deficiency", "Vitamin D", "Vitamin K", "Vitamin A"],
        "answer": "A",
    },
    {
        "id": "q3",
        "question": "Which blood cells carry oxygen in the blood?",
        "options": ["White cells", "Platelets", "Red blood cells", "Plasma"],
        "answer": "C",
    },
    {
        "id": "q4",
        "question": "Insulin is produced by which organ, the pancreas or another?",
        "options": ["Spleen", "Thyroid", "Stomach", "Pancreas"],
        "answer": "D",
    },
    {
        "id": "q5",
        "question": "Which bone protects the brain, the skull?",
        "options": ["Femur", "Skull", "Rib", "Pelvis"],
        "answer": "B",
    },
    {
        "id": "q6",
        "question": "Which gas do lungs take in, oxygen?",
        "options": ["Nitrogen", "Helium", "Carbon dioxide", "Oxygen"],
        "answer": "D",
    },
]

SPEC = """\
[study]
id = "cloze-pilot"
title = "Cloze scoring against generated answers, under option orders"

[models.local]
provider = "openai-compatible"
id = "medgemma-4b"
max_tokens = 4
temperature = 0.0
logprobs = 5

[components]
direct = "prompts/direct.txt"

[prompt]
item = "prompts/item.txt"

[variants.original]
kind = "identity"

[variants.rot1]
kind = "rotate"
k = 1

[variants.rot2]
kind = "rotate"
k = 2

[arms.direct]
role = "full"
components = ["direct"]

[arms.bare]
role = "vehicle"
components = []

[stimuli]
items = "items.jsonl"

[design]
replicates = 1
seed = 3
bootstrap_seed = 4
bootstrap_iterations = 200

[response]
parser = "cloze"

[[hypotheses]]
id = "H1"
description = "The instruction changes cloze accuracy."
contrast = ["direct", "bare"]
test = "mcnemar"
alpha = 0.05

[analysis]
"""


class FakeLogprobServer:
    """``POST /v1/chat/completions`` answering with ``logprobs`` as vLLM and llama.cpp do.

    ``drop`` names item questions whose responses leave the letter ``D`` out of
    ``top_logprobs`` (a server that returned too few alternatives).
    """

    def __init__(self, drop: tuple[str, ...] = ()) -> None:
        self.model = SimulatedTextModel()
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
                fake.requests.append(body)
                raw = json.dumps(fake.answer(body)).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.drop = drop
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat completion, with the first token's log-probabilities when asked for."""
        request = {
            "model": body["model"],
            "max_tokens": body["max_tokens"],
            "temperature": body.get("temperature", 1.0),
            "messages": [
                {"role": m["role"], "content": [{"type": "text", "text": m["content"]}]}
                for m in body["messages"]
                if m["role"] != "system"
            ],
            "top_logprobs": body.get("top_logprobs", 0),
        }
        data = self.model.respond_openai(request, "server")
        position = data["choices"][0]["logprobs"]["content"][0]
        position["token"] = " " + position["token"]  # llama.cpp keeps the leading space
        text = body["messages"][-1]["content"]
        if any(q in text for q in self.drop):
            position["top_logprobs"] = [t for t in position["top_logprobs"] if t["token"] != "D"]
            if position["token"].strip() == "D":
                position["token"] = " Answer"
        if not body.get("logprobs"):
            del data["choices"][0]["logprobs"]
        return data

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


def write_study(root: Path, spec: str = SPEC) -> Path:
    files = {
        "study.toml": spec,
        "prompts/direct.txt": "Answer with the letter of the correct option.\n",
        "prompts/item.txt": "Question: {question}\n{options}\nAnswer:\n",
        "items.jsonl": "".join(json.dumps(i) + "\n" for i in ITEMS),
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def cli(*args: str | Path) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Any, str]]:
    base = tmp_path_factory.mktemp("cloze")
    server = FakeLogprobServer(drop=("scurvy",))
    server.thread.start()
    mp = pytest.MonkeyPatch()
    mp.setenv("PROMPT_LEDGER_HOME", str(base / "home"))
    try:
        key = base / "owner.key"
        fixed_key("cloze-pilot/owner").save(key)
        root = write_study(base / "study")
        outputs = {}
        for step in (
            ("lock", root),
            ("run", root, "--backend", "openai-compatible", "--base-url", server.url),
            ("score", root),
            ("unblind", root),
            ("analyze", root),
        ):
            result = cli(*step, "--key", key)
            assert result.exit_code == 0, (step, result.output)
            outputs[step[0]] = result.output
        out = base / "archive"
        result = cli("export", root, out, "--key", key)
        assert result.exit_code == 0, result.output
        yield root, out, server, outputs["score"]
    finally:
        mp.undo()
        server.httpd.shutdown()
        server.httpd.server_close()


def rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text("utf-8"))))


def test_requests_ask_for_log_probabilities(built: tuple[Path, Path, Any, str]) -> None:
    _, _, server, _ = built
    assert server.requests
    for body in server.requests:
        assert body["logprobs"] is True and body["top_logprobs"] == 5


def test_the_cloze_study_verifies_and_re_derives_every_score(
    built: tuple[Path, Path, Any, str],
) -> None:
    _, archive, _, _ = built
    report = verify_archive(archive)
    assert report.ok, [c for c in report.checks if c.status.name == "FAIL"]
    for name in ("requests", "rescore", "reanalysis"):
        passed(report, name)


def test_scores_record_each_letters_log_probability_and_the_margin(
    built: tuple[Path, Path, Any, str],
) -> None:
    _, archive, _, _ = built
    items = rows(archive / "analysis" / "items.csv")
    assert list(items[0])[-2:] == ["logprobs", "margin"]
    ok = [r for r in items if r["answer"]]
    assert ok
    for row in ok:
        logprobs = json.loads(row["logprobs"])
        assert list(logprobs) == list("ABCD")
        ranked = sorted(logprobs.values(), reverse=True)
        assert row["answer"] == max("ABCD", key=lambda k: (logprobs[k], -ord(k)))
        assert math.isclose(float(row["margin"]), ranked[0] - ranked[1], rel_tol=1e-9)
        assert row["correct"] == str(row["answer"] == row["truth"])


def test_a_missing_letter_is_a_recorded_counted_exclusion(
    built: tuple[Path, Path, Any, str],
) -> None:
    root, archive, _, score_output = built
    items = rows(archive / "analysis" / "items.csv")
    dropped = [r for r in items if r["stimulus"] == "q2"]
    assert dropped and all(r["answer"] == "" and r["margin"] == "" for r in dropped)
    assert all(json.loads(r["logprobs"])["D"] is None for r in dropped)
    trials = rows(archive / "analysis" / "trials.csv")
    unparseable = [t for t in trials if t["status"] == "unparseable"]
    assert {t["stimulus"] for t in unparseable} == {"q2"}
    assert all(t["excluded"] == "True" for t in unparseable)
    assert f"unparseable {len(unparseable)}" in score_output
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        problems = [
            e.body["problems"] for e in log.events("trial.scored") if e.body["stimulus"] == "q2"
        ]
    assert all("no log-probability for option letter(s) D" in p[0] for p in problems)


def test_a_changed_log_probability_fails_the_rescore(
    built: tuple[Path, Path, Any, str], tmp_path: Path
) -> None:
    _, archive, _, _ = built
    copy_ = tmp_path / "archive"
    shutil.copytree(archive, copy_)
    events = read_events(copy_)
    responded = next(
        e
        for e in events
        if e["kind"] == "trial.responded"
        and json.loads(blob(copy_, e["blobs"]["response"]))["choices"][0]["logprobs"]
    )
    data = json.loads(blob(copy_, responded["blobs"]["response"]))
    position = data["choices"][0]["logprobs"]["content"][0]
    for entry in position["top_logprobs"]:
        entry["logprob"] = -entry["logprob"] - 1  # the order of the letters is reversed
    old = responded["blobs"]["response"]
    new = put_blob(copy_, json.dumps(data).encode())
    responded["blobs"]["response"] = new
    for key, value in list(responded["body"].items()):
        if value == old:
            responded["body"][key] = new
    attempts = copy_ / "trials" / "attempts.csv"
    attempts.write_text(attempts.read_text("utf-8").replace(old, new), "utf-8")
    forge(copy_, events)
    report = verify_archive(copy_)
    passed(report, "signatures")
    assert "trial.scored seq" in failed(report, "rescore")


# ------------------------------------------------------------------------------ the parser


def body(entries: list[tuple[str, float]], first: str = "A") -> bytes:
    position = {
        "token": first,
        "logprob": -0.1,
        "top_logprobs": [{"token": t, "logprob": lp} for t, lp in entries],
    }
    return json.dumps(
        {"choices": [{"message": {"content": first}, "logprobs": {"content": [position]}}]}
    ).encode()


@pytest.mark.parametrize(
    ("entries", "answer", "margin"),
    [
        ([("A", -0.1), ("B", -2.0), ("C", -3.0), ("D", -4.0)], "A", 1.9),
        ([(" A", -2.5), ("B", -0.5), ("\nC", -3.0), ("D ", -1.0)], "B", 0.5),
        ([("A", -1.0), ("b", -0.01), ("B", -1.0), ("C", -5.0), ("D", -6.0)], "A", 0.0),
        ([("A", -3.0), ("A", -0.2), ("B", -1.0), ("C", -5.0), ("D", -6.0)], "A", 0.8),
    ],
)
def test_both_implementations_read_the_same_letters(
    entries: list[tuple[str, float]], answer: str, margin: float
) -> None:
    raw = body(entries, first="Z")
    mine = parse_cloze(raw, "openai-chat", "ABCD")
    theirs = verify_parse_cloze(raw, "openai-chat", "ABCD")
    assert mine.status == theirs.status == "ok"
    assert mine.answer == theirs.answers[0][1][0] == answer
    assert mine.margin is not None and math.isclose(mine.margin, margin, abs_tol=1e-12)
    assert theirs.cloze is not None and theirs.cloze["margin"] == mine.margin
    assert dict(mine.logprobs or ()) == theirs.cloze["logprobs"]


def test_a_body_without_log_probabilities_is_unparseable() -> None:
    raw = json.dumps({"choices": [{"message": {"content": "B"}}]}).encode()
    assert parse_cloze(raw, "openai-chat").status == "unparseable"
    assert verify_parse_cloze(raw, "openai-chat", "ABCD").status == "unparseable"
    messages = json.dumps({"type": "message", "content": [{"type": "text", "text": "B"}]})
    assert "has none" in parse_cloze(messages.encode(), "anthropic-messages").problems[0]


# ------------------------------------------------------------------------------ bad input


def lock_fails(tmp_path: Path, spec: str) -> str:
    root = write_study(tmp_path / "study", spec)
    key = tmp_path / "owner.key"
    fixed_key("cloze-pilot/owner").save(key)
    mp = pytest.MonkeyPatch()
    mp.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    try:
        result = cli("lock", root, "--key", key)
    finally:
        mp.undo()
    assert result.exit_code != 0, result.output
    db = root / "ledger.db"
    if db.exists():
        with Ledger.open(db, readonly=True) as log:
            assert not list(log.events("protocol.locked"))
            assert not list(log.events("artifact.locked"))
    return result.output


def test_cloze_on_a_backend_without_log_probabilities_is_refused_at_lock(tmp_path: Path) -> None:
    spec = SPEC.replace('provider = "openai-compatible"', 'provider = "anthropic"').replace(
        "logprobs = 5\n", ""
    )
    out = lock_fails(tmp_path, spec)
    assert "[models.local]: [response] parser 'cloze' reads option-letter log-probabilities" in out
    assert "provider 'anthropic' cannot return them" in out


def test_cloze_without_asking_for_log_probabilities_is_refused_at_lock(tmp_path: Path) -> None:
    out = lock_fails(tmp_path, SPEC.replace("logprobs = 5\n", ""))
    assert "[models.local]: [response] parser 'cloze'" in out and "set logprobs = 20" in out


def test_logprobs_on_an_anthropic_model_is_refused_naming_the_line(tmp_path: Path) -> None:
    spec = SPEC.replace('provider = "openai-compatible"', 'provider = "anthropic"')
    out = lock_fails(tmp_path, spec)
    assert "study.toml:10: models.local.logprobs: provider 'anthropic' cannot return" in out


def test_the_mcq_trials_table_carries_each_letters_log_probability(
    built: tuple[Path, Path, Any, str],
) -> None:
    from analysis._analyze import load_dataset
    from analysis.mcq._rows import mcq_trials

    root, _, _, _ = built
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        ds = load_dataset(log, parser="cloze", variants=True, models=("local",))
    table = mcq_trials(ds)
    assert [c for c in table.columns if c.startswith("logprob_")] == [
        "logprob_A",
        "logprob_B",
        "logprob_C",
        "logprob_D",
    ]
    ok = table[table["parse"] == "ok"]
    for row in ok.to_dict("records"):
        best = max("ABCD", key=lambda k: (row[f"logprob_{k}"], -ord(k)))
        assert row["letter"] == best
    dropped = table[table["item"] == "q2"]
    assert dropped["logprob_D"].isna().all() and dropped["letter"].isna().all()
