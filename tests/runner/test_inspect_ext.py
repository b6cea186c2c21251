"""The Inspect AI extension (``docs/inspect.md``): ``inspect eval`` with the hooks, then
``ledger verify`` and the cross-check against Inspect's own ``.eval`` log.

Marked ``inspect`` (left out of the default run, like ``llama``): each module run starts
``inspect eval`` twice (about 30 s on two cores). They skip, saying why, where inspect-ai is not
installed; ``.ci/run`` installs the ``inspect`` extra and runs them with ``pytest -m inspect``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "inspect_ai",
    reason="inspect-ai is not installed: pip install -c constraints.txt -e '.[dev,inspect]'",
)

from inspect_ai.log import read_eval_log
from inspect_support import McqChatServer, inspect_eval

from ledger import Ledger, SigningKey
from verify import verify_ledger_file
from verify._inspect import cross_check_log

pytestmark = pytest.mark.inspect


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One eval with the extension (one 503 injected: Inspect retries it) and one without."""
    tmp = tmp_path_factory.mktemp("inspect")
    server = McqChatServer()
    server.thread.start()
    try:
        server.inject("503")
        with_ext = inspect_eval(server.url, tmp / "logs-ledger", tmp / "ledger")
        assert with_ext.returncode == 0, with_ext.stderr[-3000:]
        calls_with = len(server.received)
        plain = inspect_eval(server.url, tmp / "logs-plain", None)
        assert plain.returncode == 0, plain.stderr[-3000:]
        yield {
            "ledger": tmp / "ledger",
            "log": next((tmp / "logs-ledger").glob("*.eval")),
            "plain_log": next((tmp / "logs-plain").glob("*.eval")),
            "calls": calls_with,
            "tmp": tmp,
        }
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()


def _kinds(db: Path) -> list[tuple[int, str, dict[str, Any]]]:
    with Ledger.open(db, readonly=True) as log:
        out = []
        for event in log.events():
            env = json.loads(event.envelope)
            out.append((event.seq, env["kind"], env["body"]))
        return out


def test_the_ledger_verifies_and_holds_one_request_and_one_outcome_per_call(runs: dict) -> None:
    db = runs["ledger"] / "ledger.db"
    report = verify_ledger_file(db)
    assert report.ok, [c.reason for c in report.failures]
    assert [c.status.value for c in report.checks if c.name == "inspect-eval"] == ["PASS"]
    events = _kinds(db)
    kinds = [k for _, k, _ in events]
    requests = kinds.count("inspect.requested")
    outcomes = kinds.count("inspect.responded") + kinds.count("inspect.failed")
    # every HTTP request the server saw is one Inspect attempt, the failed one (503) included
    assert requests == outcomes == runs["calls"]
    assert kinds.count("inspect.failed") == 1
    # the eval was locked before its first request, and registered with a checkpoint
    assert kinds.index("inspect.locked") < kinds.index("inspect.requested")
    lock = next(body for _, k, body in events if k == "inspect.locked")
    assert lock["task"] == "ledger_mcq" and lock["epochs"] == 1
    assert len(lock["dataset"]["sample_sha256"]) == 12 and lock["dataset"]["sha256"]
    assert [s["name"] for s in lock["scorers"]] == ["choice"]
    registration = next((runs["ledger"] / "checkpoints").glob("*-registration.txt"))
    assert registration.read_text().splitlines()[1] == str(kinds.index("inspect.locked") + 1)
    # the .eval log holds the same number of model calls
    log = read_eval_log(str(runs["log"]))
    assert log.samples is not None
    model_events = [e for s in log.samples for e in s.events if e.event == "model"]
    assert len(model_events) == requests


def test_the_cross_check_against_inspect_s_log_passes(runs: dict) -> None:
    check = cross_check_log(runs["ledger"] / "ledger.db", runs["log"])
    assert check.status.value == "PASS", check.reason
    assert f"all {runs['calls']} model call(s)" in check.reason


def test_results_are_the_same_with_and_without_the_extension(runs: dict) -> None:
    def results(path: Path) -> tuple[Any, dict[tuple[Any, int], Any]]:
        log = read_eval_log(str(path))
        assert log.results is not None and log.samples is not None
        metrics = [(s.name, {k: m.value for k, m in s.metrics.items()}) for s in log.results.scores]
        per_sample = {
            (s.id, s.epoch): (s.output.completion, {k: v.value for k, v in s.scores.items()})
            for s in log.samples
            if s.scores is not None
        }
        return metrics, per_sample

    assert results(runs["log"]) == results(runs["plain_log"])


def _rewrite(src: Path, dst: Path, change: str) -> Path:
    """A copy of the ledger in ``src``, every event re-signed by its own key, with ``change``:
    ``edit-response`` (the first response's answer letter changed) or ``drop-outcome``."""
    keys = {
        SigningKey.load(src / "keys" / n).actor: SigningKey.load(src / "keys" / n)
        for n in ("owner.key", "runner.key")
    }
    owner = SigningKey.load(src / "keys" / "owner.key")
    dst.mkdir()
    shutil.copytree(src / "keys", dst / "keys")
    with Ledger.open(src / "ledger.db", readonly=True) as old:
        sizes = {c.size for c in old.checkpoints()}
        new = Ledger.create(dst / "ledger.db", origin=old.origin, key=owner)
        done = False
        moved: dict[int, int] = {}  # old seq -> new seq (outcomes name their request's seq)
        for event in list(old.events())[1:]:
            env = json.loads(event.envelope)
            blobs = {name: old.blob(digest) for name, digest in env["blobs"].items()}
            if isinstance(env["body"].get("request"), int):
                env["body"]["request"] = moved[env["body"]["request"]]
            if env["kind"] == "inspect.responded" and not done:
                done = True
                if change == "drop-outcome":
                    continue
                output = json.loads(blobs["output"])
                text = output["choices"][0]["message"]["content"]
                flipped = text[:-1] + ("B" if text[-1] != "B" else "C")
                blobs["output"] = json.dumps(output).replace(text, flipped).encode()
            moved[event.seq] = new.append(
                env["kind"], env["body"], key=keys[env["actor"]], blobs=blobs
            ).seq
            if new.size in sizes:
                new.sign_checkpoint(owner)
        new.close()
    return dst / "ledger.db"


def test_a_response_edited_and_re_signed_fails_the_cross_check(runs: dict) -> None:
    db = _rewrite(runs["ledger"], runs["tmp"] / "edited", "edit-response")
    assert verify_ledger_file(db).ok  # re-signed: the ledger alone cannot tell
    check = cross_check_log(db, runs["log"])
    assert check.status.value == "FAIL"
    assert "differs from the response the ledger recorded" in check.reason


def test_a_request_without_outcome_fails_the_inspect_eval_check(runs: dict) -> None:
    db = _rewrite(runs["ledger"], runs["tmp"] / "dropped", "drop-outcome")
    report = verify_ledger_file(db)
    failed = [c for c in report.checks if c.status.value == "FAIL"]
    assert [c.name for c in failed] == ["inspect-eval"]
    assert "has no outcome" in failed[0].reason
