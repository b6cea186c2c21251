"""The append API of ``ledger serve`` and the remote ledger (docs/service.md §7-9).

Real parts only: a real uvicorn server on 127.0.0.1 (in a thread, or ``ledger serve``
processes), real SQLite files and a real PostgreSQL (``pg_server``), real Ed25519 keys, real
HTTP. Bad input is a named table; every failure asserts its message.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import plain_http
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from locations import REPO
from serve_process import serve, stop

from ledger import (
    AuthorizationError,
    EventSpec,
    Ledger,
    NoteError,
    SigningKey,
    StoreError,
    root_from_leaf_hashes,
)
from ledger._envelope import ZERO_HASH, envelope_bytes
from ledger._http import READ_HEADER, TURN_HEADER, read_message
from ledger._note import Checkpoint
from ledger._service import AppendService, StoreRoot
from ledger.tiles_server import LocalTiles

ROOT = REPO
ORIGIN = "example.org/serve-append"
FIXTURE = HealthCheck.function_scoped_fixture


def _key(name: str) -> SigningKey:
    return SigningKey(f"example.org/{name}", hashlib.sha256(name.encode()).digest())


OWNER, RUNNER, SCORER, STRANGER = _key("owner"), _key("runner"), _key("scorer"), _key("stranger")


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A service over a folder of SQLite ledgers, in a thread: (base URL, store folder)."""
    store = tmp_path / "store"
    store.mkdir()
    svc = AppendService(StoreRoot.parse(str(store)), allow_create=True, max_request_bytes=200_000)
    with LocalTiles(None, service=svc) as server:
        yield server.url, store


@pytest.fixture
def study(service: tuple[str, Path]) -> Iterator[tuple[str, Path]]:
    """A study 'demo' with an owner, a runner and a revoked scorer: (study URL, its file)."""
    base, store = service
    url = f"{base}/demo"
    with Ledger.create(url, origin=ORIGIN, key=OWNER) as log:
        log.add_key(RUNNER.vkey, "runner", key=OWNER)
        log.add_key(SCORER.vkey, "scorer", key=OWNER)
        log.revoke_key(SCORER.actor, key=OWNER, reason="left")
    yield url, store / "demo.db"


def _size(path: Path) -> int:
    with Ledger.open(path, readonly=True) as log:
        return log.size


def _head(url: str) -> dict[str, Any]:
    data: dict[str, Any] = plain_http.get(f"{url}/api/v1/head").json()
    return data


def _signed(
    key: SigningKey,
    kind: str,
    body: dict[str, Any],
    head: dict[str, Any],
    blobs: dict[str, str] | None = None,
    seq: int | None = None,
    prev: str | None = None,
) -> dict[str, str]:
    data = envelope_bytes(
        seq=head["size"] if seq is None else seq,
        time="2026-11-22T10:00:00.000000Z",
        kind=kind,
        actor=key.actor,
        prev=(head["last"] or ZERO_HASH) if prev is None else prev,
        body=body,
        blobs=blobs or {},
    )
    return {
        "envelope": base64.b64encode(data).decode(),
        "signature": base64.b64encode(key.sign(data)).decode(),
    }


def _post(url: str, payload: Any, **kw: Any) -> httpx.Response:
    return plain_http.post(f"{url}/api/v1/append", json=payload, **kw)


# ---------------------------------------------------------------------- the remote ledger


def test_a_remote_ledger_writes_the_same_log_the_store_holds(
    study: tuple[str, Path],
) -> None:
    url, path = study
    with Ledger.open(url) as log:
        assert log.engine == "remote" and log.origin == ORIGIN
        event = log.append("run.started", {"n": 1}, key=RUNNER, blobs={"raw": b"request bytes"})
        batch = log.append_many(
            [EventSpec("trial.requested", {"trial": f"t{i}", "attempt": 1}) for i in range(3)],
            key=RUNNER,
        )
        note = log.sign_checkpoint(OWNER)
        assert [e.seq for e in batch] == [event.seq + 1, event.seq + 2, event.seq + 3]
        assert log.blob(event.blobs["raw"]) == b"request bytes"
        remote = [(e.envelope, e.signature) for e in log.events()]
        assert log.inclusion_proof(2).verify() and log.consistency_proof(3).verify()
        assert log.check_published(note).verify()
        root = log.root()
    with Ledger.open(path, readonly=True) as local:
        assert [(e.envelope, e.signature) for e in local.events()] == remote
        assert local.root() == root and local.checkpoints()[-1].note == note


@pytest.mark.parametrize(
    ("key", "kind", "message", "error"),
    [
        (
            RUNNER,
            "protocol.locked",
            "has role 'runner', which may not append 'protocol.locked'",
            AuthorizationError,
        ),
        (SCORER, "trial.scored", "was revoked at seq 3; it cannot append", AuthorizationError),
        (STRANGER, "run.started", "is not registered in this ledger", AuthorizationError),
    ],
)
def test_keys_are_refused_with_the_reason_and_nothing_is_appended(
    study: tuple[str, Path], key: SigningKey, kind: str, message: str, error: type[Exception]
) -> None:
    url, path = study
    before = _size(path)
    with Ledger.open(url) as log, pytest.raises(error, match=message):
        log.append(kind, {}, key=key)
    assert _size(path) == before


def test_two_writers_interleave_each_re_signing_when_the_head_moved(
    study: tuple[str, Path],
) -> None:
    url, path = study
    with Ledger.open(url) as a, Ledger.open(url) as b:
        for i in range(5):
            a.append("run.started", {"writer": "a", "i": i}, key=RUNNER)
            b.append("run.started", {"writer": "b", "i": i}, key=RUNNER)  # b's head is stale
    with Ledger.open(path, readonly=True) as local:
        started = [e.body for e in local.events("run.started")]
        assert len(started) == 10 and local.size == 14
        assert all(e.prev == local.get(e.seq - 1).leaf_hash.hex() for e in local.events(start=1))


def test_a_remote_transaction_is_all_or_nothing_and_refused_when_another_writer_was_first(
    study: tuple[str, Path],
) -> None:
    url, path = study
    with Ledger.open(url) as log:
        with log.transaction():
            log.append("run.started", {"tx": 1}, key=RUNNER)
            note = log.sign_checkpoint(OWNER)
            assert log.size == 5 and [c.note for c in log.checkpoints()][-1] == note
            assert _size(path) == 4  # nothing reached the store yet
        assert _size(path) == 5
        before = _size(path)
        refused = pytest.raises(StoreError, match="another writer appended while this transaction")
        with refused, log.transaction():
            log.append("run.started", {"tx": 2}, key=RUNNER)
            with Ledger.open(url) as other:
                other.append("run.started", {"other": True}, key=RUNNER)
        assert _size(path) == before + 1  # the other writer's event only
        with pytest.raises(RuntimeError), log.transaction():
            log.append("run.started", {"tx": 3}, key=RUNNER)
            raise RuntimeError("the block failed")
        assert _size(path) == before + 1


def test_a_retried_request_is_answered_with_its_existing_seqs(study: tuple[str, Path]) -> None:
    url, path = study
    payload = {
        "entries": [_signed(RUNNER, "run.started", {"retry": True}, _head(url))],
        "blobs": {},
        "checkpoints": [],
    }
    first = _post(url, payload)
    again = _post(url, payload)
    assert first.status_code == again.status_code == 200
    assert first.json()["replayed"] is False and again.json()["replayed"] is True
    assert first.json()["seqs"] == again.json()["seqs"] == [4]
    assert _size(path) == 5


def test_a_retried_batch_is_replayed_whole_and_one_reaching_past_the_head_is_409(
    study: tuple[str, Path],
) -> None:
    """A batch wholly inside the log is compared with the stored events (one query) and
    answered with their seqs; one that reaches past the head cannot be a retry: 409."""
    url, path = study
    head = _head(url)
    batch = []
    for n in range(3):  # three consecutive envelopes, each on the head the previous makes
        entry = _signed(RUNNER, "run.started", {"n": n}, head)
        leaf = hashlib.sha256(b"\x00" + base64.b64decode(entry["envelope"])).hexdigest()
        head = {"size": head["size"] + 1, "last": leaf}
        batch.append(entry)
    assert _post(url, {"entries": batch[:2]}).json()["seqs"] == [4, 5]
    straddling = _post(url, {"entries": batch})  # seqs 4-6: 4 and 5 stored, 6 not
    assert straddling.status_code == 409, straddling.text
    assert "does not continue the log" in straddling.json()["error"]
    assert _post(url, {"entries": batch[2:]}).json()["seqs"] == [6]
    again = _post(url, {"entries": batch})
    assert again.status_code == 200 and again.json() == {
        "seqs": [4, 5, 6],
        "replayed": True,
        "checkpoints": [],
    }
    assert _size(path) == 7


def test_the_head_answer_is_the_ledgers_head_last_time_and_checkpoint_time(
    study: tuple[str, Path],
) -> None:
    """``GET head`` (and a 409's head) reads the frontier in one query: the same answer."""
    url, path = study
    for n in range(3):  # size 7: a frontier of three subtrees (4, 2, 1)
        _post(url, {"entries": [_signed(RUNNER, "run.started", {"n": n}, _head(url))]})
    with Ledger.open(url) as remote:
        remote.sign_checkpoint(OWNER)
    answer = _head(url)
    with Ledger.open(path, readonly=True) as log:
        size, last, frontier = log.head()
        assert size == 7 and len(frontier) == 3
        assert answer["size"] == size and answer["last"] == last.hex()
        assert answer["frontier"] == [[lvl, h.hex()] for lvl, h in frontier]
        assert answer["time"] == log.get(size - 1).time
        assert answer["checkpoint_time"] == log.checkpoints()[-1].created
        assert answer["origin"] == log.origin == ORIGIN


def test_a_stale_envelope_gets_409_with_the_new_head(study: tuple[str, Path]) -> None:
    url, path = study
    stale = _head(url)
    _post(url, {"entries": [_signed(RUNNER, "run.started", {"n": 1}, stale)]})
    answer = _post(url, {"entries": [_signed(RUNNER, "run.started", {"n": 2}, stale)]})
    assert answer.status_code == 409
    assert "another writer appended first" in answer.json()["error"]
    assert answer.json()["head"]["size"] == 5 == _size(path)
    assert answer.json()["head"]["last"] == _head(url)["last"]


def test_a_stale_batch_is_answered_409_before_its_signatures_are_checked(
    study: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch that cannot continue the log costs the service no signature checks (§7)."""
    from ledger._keys import VerifierKey

    checked: list[bytes] = []
    real = VerifierKey.verify_strict

    def counting(self: VerifierKey, message: bytes, signature: bytes) -> bool:
        checked.append(message)
        return real(self, message, signature)

    # the service runs in this process; it checks envelopes with libsodium (verify_strict)
    monkeypatch.setattr(VerifierKey, "verify_strict", counting)
    url, path = study
    stale = _head(url)
    assert _post(url, {"entries": [_signed(RUNNER, "run.started", {"n": 1}, stale)]}).is_success
    assert checked, "the spy sees the service's signature checks"
    checked.clear()
    lost = [_signed(RUNNER, "run.started", {"n": i}, stale, seq=4 + i) for i in range(3)]
    assert _post(url, {"entries": lost}).status_code == 409
    assert len(checked) == 3  # no 409 yet: a lone writer's batches go straight to the store
    checked.clear()
    assert _post(url, {"entries": lost}).status_code == 409  # the study is contended now
    assert checked == []
    forged = _signed(RUNNER, "run.started", {"n": 2}, stale)
    forged["signature"] = base64.b64encode(bytes(64)).decode()  # would be 403 at the head
    answer = _post(url, {"entries": [forged]})
    assert answer.status_code == 409, answer.text
    assert answer.json()["head"]["size"] == 5 == _size(path)
    at_head = _signed(RUNNER, "run.started", {"n": 2}, _head(url))
    at_head["signature"] = forged["signature"]
    refused = _post(url, {"entries": [at_head]})
    assert refused.status_code == 403 and "does not verify" in refused.json()["error"]
    ahead = _signed(RUNNER, "run.started", {"n": 3}, _head(url), seq=9)
    assert _post(url, {"entries": [ahead]}).status_code == 409
    other_chain = _signed(RUNNER, "run.started", {"n": 4}, _head(url), prev="ab" * 32)
    assert _post(url, {"entries": [other_chain]}).status_code == 409
    assert _size(path) == 5


# ---------------------------------------------------------------------- turns


def _ask(url: str, payload: Any, turn: str = "ask") -> httpx.Response:
    """An append that asks for a turn should it lose the race (or uses the turn ``turn``)."""
    return _post(url, payload, headers={TURN_HEADER: turn}, timeout=60)


def test_a_writer_that_lost_a_race_gets_a_turn_and_its_re_signed_batch_goes_in_first(
    study: tuple[str, Path],
) -> None:
    """A loser's 409 comes with the write lock held for it: a rival at that head waits, then
    loses in turn (docs/service.md §7)."""
    url, path = study
    stale = _head(url)
    assert _post(url, {"entries": [_signed(RUNNER, "run.started", {"n": 0}, stale)]}).is_success
    lost = _ask(url, {"entries": [_signed(RUNNER, "run.started", {"n": 1}, stale)]})
    assert lost.status_code == 409, lost.text
    turn, head = lost.json()["turn"], lost.json()["head"]
    assert head["size"] == 5 and head["last"] == _head(url)["last"]
    assert "your turn" in lost.json()["error"] and TURN_HEADER in lost.json()["error"]
    with ThreadPoolExecutor(1) as pool:  # a rival signs at the same head while the turn holds
        rival = pool.submit(
            _ask, url, {"entries": [_signed(OWNER, "run.started", {"rival": 1}, head)]}
        )
        time.sleep(0.2)  # most likely queued behind the turn by now; either order must pass
        mine = _ask(url, {"entries": [_signed(RUNNER, "run.started", {"n": 1}, head)]}, turn)
        assert mine.status_code == 200, mine.text
        assert mine.json()["seqs"] == [5] and mine.json()["replayed"] is False
        second = rival.result(timeout=60)
    assert second.status_code == 409 and second.json()["head"]["size"] == 6
    again = _signed(OWNER, "run.started", {"rival": 1}, second.json()["head"])
    done = _ask(url, {"entries": [again]}, second.json()["turn"])
    assert done.status_code == 200 and done.json()["seqs"] == [6]
    with Ledger.open(path, readonly=True) as local:
        assert [e.body for e in local.events(start=5)] == [{"n": 1}, {"rival": 1}]


def test_a_batch_refused_on_its_turn_appends_nothing_and_frees_the_log(
    study: tuple[str, Path],
) -> None:
    url, path = study
    stale = _head(url)
    assert _post(url, {"entries": [_signed(RUNNER, "run.started", {"n": 0}, stale)]}).is_success
    lost = _ask(url, {"entries": [_signed(RUNNER, "run.started", {"n": 1}, stale)]})
    head = lost.json()["head"]
    forged = _signed(RUNNER, "run.started", {"n": 1}, head)
    forged["signature"] = base64.b64encode(bytes(64)).decode()
    refused = _ask(url, {"entries": [forged]}, lost.json()["turn"])
    assert refused.status_code == 403 and "does not verify" in refused.json()["error"]
    assert _size(path) == 5
    unknown = _signed(STRANGER, "run.started", {"n": 2}, head)
    lost = _ask(url, {"entries": [_signed(RUNNER, "run.started", {"n": 1}, stale)]})
    refused = _ask(url, {"entries": [unknown]}, lost.json()["turn"])
    assert refused.status_code == 403 and STRANGER.actor in refused.json()["error"]
    assert _size(path) == 5
    # the study is contended now: an append asking for turns waits for the lock at once and
    # is checked as ever (signatures outside the lock, the rest under it)
    forged = _signed(RUNNER, "run.started", {"n": 2}, head)
    forged["signature"] = base64.b64encode(bytes(64)).decode()
    refused = _ask(url, {"entries": [forged]})
    assert refused.status_code == 403 and "does not verify" in refused.json()["error"]
    raw = base64.b64decode(forged["envelope"]).replace(b'"kind"', b' "kind"', 1)
    refused = _ask(url, {"entries": [{**forged, "envelope": base64.b64encode(raw).decode()}]})
    assert refused.status_code == 400 and "entry 0" in refused.json()["error"]
    assert _ask(url, {"entries": "no"}).status_code == 400
    assert _size(path) == 5
    with Ledger.open(url) as log:  # the turns are over: the lock is free
        assert log.append("run.started", {"n": 3}, key=RUNNER).seq == 5


def test_a_turn_not_taken_in_time_passes_and_its_late_batch_appends_nothing(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    svc = AppendService(StoreRoot(str(store)), allow_create=True, turn_seconds=0.3)
    with LocalTiles(None, service=svc) as server:
        url = f"{server.url}/demo"
        with Ledger.create(url, origin=ORIGIN, key=OWNER) as log:
            log.add_key(RUNNER.vkey, "runner", key=OWNER)
            stale = _head(url)
            log.append("run.started", {"n": 0}, key=RUNNER)
            lost = _ask(url, {"entries": [_signed(RUNNER, "run.started", {"n": 1}, stale)]})
            assert lost.status_code == 409
            assert log.append("run.started", {"n": 2}, key=OWNER).seq == 3  # after the turn
            late = _signed(RUNNER, "run.started", {"n": 1}, lost.json()["head"])
            answer = _ask(url, {"entries": [late]}, lost.json()["turn"])
            assert answer.status_code == 409 and answer.json()["head"]["size"] == 4
            assert answer.json()["turn"] != lost.json()["turn"]  # a new turn for this writer
            assert log.size == 4
    with Ledger.open(store / "demo.db", readonly=True) as local:
        assert [e.body for e in local.events("run.started")] == [{"n": 0}, {"n": 2}]


def _race(urls: list[str], writers: int, calls: int) -> list[int]:
    """``writers`` remote ledgers in threads, ``calls`` appends each; the 409s of each call."""
    lost: list[int] = []
    start = threading.Barrier(writers)

    def writer(w: int) -> None:
        with Ledger.open(urls[w % len(urls)]) as log:
            _ = log.size
            start.wait()
            for i in range(calls):
                before = getattr(log, "conflicts", 0)
                log.append("run.started", {"w": w, "i": i}, key=RUNNER)
                lost.append(getattr(log, "conflicts", 0) - before)

    with ThreadPoolExecutor(writers) as pool:
        for future in [pool.submit(writer, w) for w in range(writers)]:
            future.result(timeout=300)
    return lost


def test_four_writers_each_lose_at_most_once_per_append(study: tuple[str, Path]) -> None:
    """With turns a call loses a race at most once: its turn's batch cannot lose (§7)."""
    url, path = study
    lost = _race([url], 4, 8)
    assert len(lost) == 32 and max(lost) <= 1
    with Ledger.open(path, readonly=True) as local:
        bodies = [e.body for e in local.events("run.started")]
        assert sorted((b["w"], b["i"]) for b in bodies) == [
            (w, i) for w in range(4) for i in range(8)
        ]
        assert all(e.prev == local.get(e.seq - 1).leaf_hash.hex() for e in local.events(start=1))


def test_a_writer_that_lost_asks_for_its_turn_before_signing_until_nobody_else_writes(
    study: tuple[str, Path],
) -> None:
    """``Ledger-Turn: wait`` (§7): after a lost race the next append queues before signing,
    signs once on its turn's head, and goes back to signing first once its turn comes on its
    own head (nobody else appended)."""
    url, path = study
    with Ledger.open(url) as a, Ledger.open(url) as b:
        a.append("run.started", {"w": "a", "i": 0}, key=RUNNER)
        b.append("run.started", {"w": "b", "i": 0}, key=RUNNER)
        a.append("run.started", {"w": "a", "i": 1}, key=RUNNER)  # signed on a stale head: lost
        assert (a.conflicts, a.waits) == (1, 0)
        b.append("run.started", {"w": "b", "i": 1}, key=RUNNER)  # b lost too
        assert (b.conflicts, b.waits) == (1, 0)
        a.append("run.started", {"w": "a", "i": 2}, key=RUNNER)  # waits, b had appended: still
        assert (a.conflicts, a.waits) == (1, 1)
        a.append("run.started", {"w": "a", "i": 3}, key=RUNNER)  # waits, its own head: calm
        assert (a.conflicts, a.waits) == (1, 2)
        a.append("run.started", {"w": "a", "i": 4}, key=RUNNER)  # signs first again
        assert (a.conflicts, a.waits) == (1, 2)
    with Ledger.open(path, readonly=True) as local:
        bodies = [(e.body["w"], e.body["i"]) for e in local.events("run.started")]
        assert bodies == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("a", 3), ("a", 4)]
        assert all(e.prev == local.get(e.seq - 1).leaf_hash.hex() for e in local.events(start=1))


def test_a_wait_carries_no_batch_and_an_older_service_is_answered_by_signing_first(
    study: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wait with a batch is refused 400, nothing appended; a service that does not know
    ``wait`` takes it for a turn's token and answers 400 ("nothing to append"), and the
    client then signs first, as before this version."""
    url, path = study
    before = _size(path)
    head = _head(url)
    answer = _post(
        url,
        {"entries": [_signed(RUNNER, "run.started", {"n": 1}, head)]},
        headers={TURN_HEADER: "wait"},
    )
    assert answer.status_code == 400, answer.text
    assert "asks for a turn before signing: its body is {}" in answer.json()["error"]
    assert _size(path) == before
    import ledger._remote

    monkeypatch.setattr(ledger._remote, "TURN_WAIT", "a-value-this-service-does-not-know")
    with Ledger.open(url) as a, Ledger.open(url) as b:
        a.append("run.started", {"w": "a", "i": 0}, key=RUNNER)
        b.append("run.started", {"w": "b", "i": 0}, key=RUNNER)
        a.append("run.started", {"w": "a", "i": 1}, key=RUNNER)  # lost: contended
        a.append("run.started", {"w": "a", "i": 2}, key=RUNNER)  # the wait refused: signs
        assert (a.conflicts, a.waits) == (1, 1)
        a.append("run.started", {"w": "a", "i": 3}, key=RUNNER)
        assert a.waits == 1  # it does not ask that service again
    assert _size(path) == before + 5


def test_a_wait_without_turns_is_answered_with_the_head_at_once(tmp_path: Path) -> None:
    """``--turn-seconds 0``: a wait's 409 carries the head and no turn; the batch signed on
    it appends."""
    store = tmp_path / "store"
    store.mkdir()
    with Ledger.create(store / "demo.db", origin=ORIGIN, key=OWNER) as log:
        log.add_key(RUNNER.vkey, "runner", key=OWNER)
    svc = AppendService(StoreRoot.parse(str(store)), turn_seconds=0)
    with LocalTiles(None, service=svc) as server:
        url = f"{server.url}/demo"
        answer = _post(url, {}, headers={TURN_HEADER: "wait"})
        assert answer.status_code == 409, answer.text
        assert "turn" not in answer.json() and answer.json()["head"] == _head(url)
        with Ledger.open(url) as a, Ledger.open(url) as b:
            a.append("run.started", {"w": "a", "i": 0}, key=RUNNER)
            b.append("run.started", {"w": "b", "i": 0}, key=RUNNER)
            a.append("run.started", {"w": "a", "i": 1}, key=RUNNER)  # lost: contended
            a.append("run.started", {"w": "a", "i": 2}, key=RUNNER)  # waits, no turn: signs
            assert (a.conflicts, a.waits) == (1, 1)
    assert _size(store / "demo.db") == 6


def test_a_malformed_stale_envelope_is_still_answered_400_with_its_entry(
    study: tuple[str, Path],
) -> None:
    url, path = study
    entry = _signed(RUNNER, "run.started", {"n": 1}, _head(url), seq=1)
    raw = base64.b64decode(entry["envelope"]).replace(b'"kind"', b' "kind"', 1)  # not canonical
    entry["envelope"] = base64.b64encode(raw).decode()
    answer = _post(url, {"entries": [entry]})
    assert answer.status_code == 400, answer.text
    assert "entry 0" in answer.json()["error"] and "canonical" in answer.json()["error"]
    assert _size(path) == 4


def test_a_locked_privacy_policy_is_kept_through_the_service(study: tuple[str, Path]) -> None:
    """Remote appends seal what the policy withholds, as the store does; an unsealed blob the
    policy names is refused with the reason, and the service serves a sealed blob's stored
    bytes (its address hashes them) while the client reads the content."""
    from ledger import is_sealed

    url, path = study
    with Ledger.open(url) as log:
        log.append(
            "protocol.locked", {"privacy": {"withhold": ["step.requested:request"]}}, key=OWNER
        )
        event = log.append(
            "step.requested", {"n": 1}, key=RUNNER, blobs={"request": b"a patient's words"}
        )
        assert log.blob(event.blobs["request"]) == b"a patient's words"
        kept = log.append("step.responded", {"n": 1}, key=RUNNER, blobs={"response": b"plain"})
    with Ledger.open(path, readonly=True) as local:
        assert is_sealed(local.stored_blob(event.blobs["request"]))
        assert local.stored_blob(kept.blobs["response"]) == b"plain"  # not named: not sealed
    raw = b"unsealed words"
    digest = hashlib.sha256(raw).hexdigest()
    entry = _signed(RUNNER, "step.requested", {"n": 2}, _head(url), blobs={"request": digest})
    before = _size(path)
    answer = _post(url, {"entries": [entry], "blobs": {digest: base64.b64encode(raw).decode()}})
    assert answer.status_code == 400, answer.text
    assert "withheld by the locked privacy policy, so it must be sent sealed" in answer.text
    assert _size(path) == before


def _bad_cases(url: str) -> list[tuple[str, dict[str, Any], Any, int, str]]:
    """(name, request kwargs, payload, status, message) for the bad-input table."""
    head = _head(url)
    good = _signed(RUNNER, "run.started", {"n": 1}, head)
    wrong = dict(good, signature=_signed(STRANGER, "run.started", {"n": 1}, head)["signature"])
    forged = _signed(STRANGER, "run.started", {"n": 1}, head)
    forged_env = json.loads(base64.b64decode(forged["envelope"]))
    forged_env["actor"] = RUNNER.actor  # a stranger's signature over the runner's actor id
    forged_bytes = envelope_bytes(
        **{k: forged_env[k] for k in ("seq", "time", "kind", "actor", "prev", "body", "blobs")}
    )
    not_canonical = base64.b64encode(
        json.dumps(json.loads(base64.b64decode(good["envelope"])), indent=1).encode()
    ).decode()
    blob = b"the response"
    digest = hashlib.sha256(blob).hexdigest()
    with_blob = _signed(RUNNER, "run.started", {"n": 1}, head, blobs={"raw": digest})
    cp = Checkpoint(ORIGIN, head["size"], b"\x01" * 32).sign([OWNER])
    root1 = bytes.fromhex(plain_http.get(f"{url}/api/v1/root?size=1").json()["root"])
    by_stranger = Checkpoint(ORIGIN, 1, root1).sign([STRANGER])
    return [
        (
            "malformed JSON",
            {"content": b"{not json", "headers": {"content-type": "application/json"}},
            None,
            400,
            "the body is not JSON",
        ),
        (
            "not JSON",
            {"content": b"x", "headers": {"content-type": "text/plain"}},
            None,
            415,
            "must be application/json",
        ),
        ("unknown members", {}, {"entries": [], "sneaky": 1}, 400, "body must be an object"),
        (
            "unsigned",
            {},
            {"entries": [{"envelope": good["envelope"]}]},
            400,
            "entry 0 must be {envelope, signature}",
        ),
        ("wrongly signed", {}, {"entries": [wrong]}, 403, "the signature does not verify"),
        (
            "forged actor",
            {},
            {
                "entries": [
                    {
                        "envelope": base64.b64encode(forged_bytes).decode(),
                        "signature": forged["signature"],
                    }
                ]
            },
            403,
            "the signature does not verify",
        ),
        (
            "out of order",
            {},
            {"entries": [_signed(RUNNER, "run.started", {}, head, seq=head["size"] + 3)]},
            409,
            "does not continue the log",
        ),
        (
            "wrong prev",
            {},
            {"entries": [_signed(RUNNER, "run.started", {}, head, prev="ab" * 32)]},
            409,
            "does not continue the log",
        ),
        (
            "not canonical",
            {},
            {"entries": [dict(good, envelope=not_canonical)]},
            400,
            "not RFC 8785 canonical",
        ),
        ("not base64", {}, {"entries": [dict(good, envelope="***")]}, 400, "not valid base64"),
        (
            "blob hash mismatch",
            {},
            {"entries": [with_blob], "blobs": {digest: base64.b64encode(b"other").decode()}},
            400,
            f"blob {digest}: its bytes hash to",
        ),
        ("blob missing", {}, {"entries": [with_blob]}, 400, "which was neither sent nor stored"),
        (
            "oversized",
            {},
            {"entries": [good], "blobs": {"a" * 64: "A" * 300_000}},
            413,
            "over the 200000-byte limit",
        ),
        (
            "genesis again",
            {},
            {
                "entries": [
                    _signed(OWNER, "ledger.genesis", {"origin": ORIGIN, "vkey": OWNER.vkey}, head)
                ]
            },
            400,
            "ledger.genesis can only be the first event",
        ),
        (
            "checkpoint root",
            {},
            {"checkpoints": [{"note": cp, "created": None}]},
            400,
            "checkpoint root is not the log's root",
        ),
        (
            "checkpoint signer",
            {},
            {"checkpoints": [{"note": by_stranger, "created": None}]},
            400,
            "which is not registered here",
        ),
        ("nothing", {}, {"entries": [], "blobs": {}, "checkpoints": []}, 400, "nothing to append"),
    ]


def test_bad_input_gets_a_4xx_with_the_reason_nothing_appended_and_the_service_serves_on(
    study: tuple[str, Path],
) -> None:
    url, path = study
    before = _size(path)
    for name, kwargs, payload, status, message in _bad_cases(url):
        answer = (
            _post(url, payload)
            if payload is not None
            else plain_http.post(f"{url}/api/v1/append", **kwargs)
        )
        assert answer.status_code == status, (name, answer.text)
        assert message in answer.json()["error"], (name, answer.json())
        assert _size(path) == before, name
        assert _head(url)["size"] == before, name


@pytest.fixture(scope="module")
def read_only_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A service (no --allow-create) over a store holding one empty study 'demo': its base URL.

    Shared by the table of bad requests below: none of them changes the store.
    """
    store = tmp_path_factory.mktemp("bad-requests") / "store"
    store.mkdir()
    with Ledger.create(store / "demo.db", origin=ORIGIN, key=OWNER):
        pass
    svc = AppendService(StoreRoot.parse(str(store)))
    with LocalTiles(None, service=svc) as server:
        yield server.url


def test_appends_are_answered_alike_by_the_append_route_and_starlettes_route(
    study: tuple[str, Path],
) -> None:
    """``AppendRoute`` (POST append before Starlette's stack) answers as Starlette's route does.

    Behind a ``root_path`` (a second server on the same store) appends take Starlette's route;
    every case of the bad-input table gets the same status and the same JSON from both, and
    good batches append through either.
    """
    from ledger._local_server import LocalServer
    from ledger.tiles_server import ServeError, _listen, make_app

    url, path = study
    store = path.parent
    other = AppendService(StoreRoot.parse(str(store)), max_request_bytes=200_000)
    server = LocalServer(
        _listen("127.0.0.1", 0),
        make_app(None, other),
        name="root-path",
        what="tiles service",
        error=ServeError,
        root_path="/under",
    )
    with server:
        slow = f"{server.url}/demo"  # the request path holds no root_path: Starlette's route
        before = _size(path)
        for name, kwargs, payload, _status, _message in _bad_cases(url):
            answers = [
                _post(base, payload)
                if payload is not None
                else plain_http.post(f"{base}/api/v1/append", **kwargs)
                for base in (url, slow)
            ]
            assert answers[0].status_code == answers[1].status_code, (name, answers[1].text)
            assert answers[0].json() == answers[1].json(), name
            assert _size(path) == before, name
        for base in (slow, url, slow):
            head = _head(url)
            answer = _post(base, {"entries": [_signed(RUNNER, "run.started", {"n": 1}, head)]})
            assert answer.status_code == 200, answer.text
            assert answer.json()["seqs"] == [head["size"]]
        assert _size(path) == before + 3
    other.close()


@pytest.mark.parametrize(
    ("method", "path", "status", "message"),
    [
        ("GET", "/nosuch/api/v1/head", 404, "no study 'nosuch'"),
        ("GET", "/Bad.Name/api/v1/head", 404, "no study"),
        ("GET", "/demo/api/v1/whatever", 404, "no 'whatever' in the append API"),
        ("GET", "/demo/api/v1/append", 405, "append takes POST"),
        ("GET", "/demo/api/v1/root?size=x", 400, "is not a non-negative integer"),
        ("GET", "/demo/api/v1/root?size=99", 400, "outside the log"),
        ("GET", "/demo/api/v1/proof/inclusion?index=99", 400, "outside the log"),
        ("GET", "/demo/api/v1/events", 403, "needs a Ledger-Signature header"),
        ("GET", "/demo/api/v1/blob/" + "0" * 64, 403, "needs a Ledger-Signature header"),
        ("POST", "/demo/api/v1/create", 403, "does not create studies"),
    ],
)
def test_bad_requests_name_the_reason(
    read_only_service: str, method: str, path: str, status: int, message: str
) -> None:
    answer = plain_http.request(
        method, read_only_service + path, json={} if method == "POST" else None
    )
    assert answer.status_code == status, answer.text
    assert message in answer.json()["error"]


def test_reads_of_envelopes_and_blobs_need_a_signature_of_a_registered_key(
    study: tuple[str, Path],
) -> None:
    url, _ = study
    path = "/demo/api/v1/events"

    def read(key: SigningKey, skew: int = 0, target: str = path) -> httpx.Response:
        when = int(time.time()) + skew
        sig = base64.b64encode(key.sign(read_message("GET", target, when))).decode()
        return plain_http.get(
            url.rsplit("/", 1)[0] + path, headers={READ_HEADER: f"{key.actor} {when} {sig}"}
        )

    assert read(RUNNER).status_code == 200
    assert len(read(OWNER).json()["events"]) == 4
    for key, skew, target, message in [
        (STRANGER, 0, path, "is not a registered, unrevoked key"),
        (SCORER, 0, path, "is not a registered, unrevoked key"),
        (RUNNER, 3600, path, "s off"),
        (RUNNER, 0, "/demo/api/v1/events?start=0", "the signature does not verify"),
    ]:
        answer = read(key, skew, target)
        assert answer.status_code == 403 and message in answer.json()["error"]


def test_no_read_path_without_a_key_names_a_trial(study: tuple[str, Path]) -> None:
    """Blinding over HTTP: what anyone may fetch (head, keys, checkpoints, roots, proofs)
    holds hashes, keys and notes only, never a trial id, an arm or a response."""
    url, _ = study
    with Ledger.open(url) as log:
        log.append(
            "trial.requested",
            {"trial": "cue-arm|E-001|1", "attempt": 1},
            key=RUNNER,
            blobs={"request": b"prompt text of the cue arm"},
        )
        log.sign_checkpoint(OWNER)
    public = b"".join(
        plain_http.get(f"{url}/api/v1/{op}").content
        for op in (
            "head",
            "keys",
            "checkpoints",
            "root",
            "proof/inclusion?index=4",
            "proof/consistency?old=2",
        )
    )
    assert b"cue-arm" not in public and b"prompt text" not in public
    assert plain_http.get(f"{url}/api/v1/events").status_code == 403


def test_cosignatures_are_added_to_a_stored_checkpoint(study: tuple[str, Path]) -> None:
    url, path = study
    witness = _key("witness")
    with Ledger.open(url) as log:
        note = log.sign_checkpoint(OWNER)
        cid = log.checkpoints()[-1].id
        line = Checkpoint(ORIGIN, 4, log.root()).sign([witness]).split("\n\n", 1)[1]
        assert log.add_cosignatures(cid, [line]) == note + line
        with pytest.raises(NoteError, match="is not one note signature line"):
            log.add_cosignatures(cid, ["not a line"])
    with Ledger.open(path, readonly=True) as local:
        assert local.checkpoints()[-1].note == note + line


def test_a_study_is_created_only_once(service: tuple[str, Path]) -> None:
    base, _ = service
    with Ledger.create(f"{base}/once", origin=ORIGIN, key=OWNER):
        pass
    with pytest.raises(StoreError, match="study 'once' exists already"):
        Ledger.create(f"{base}/once", origin=ORIGIN, key=OWNER)
    assert Ledger.exists(f"{base}/once") and not Ledger.exists(f"{base}/never")


def test_service_urls_are_checked() -> None:
    for url, message in [
        ("http://u:pw@h/x", "holds a user name or password"),
        ("http://h/Bad_Name!", "must end in the study's name"),
        ("http://h/a http://h/b", "the URLs name different studies"),
        ("http://h/a?x=1", "no query or fragment"),
    ]:
        with pytest.raises(StoreError, match=message):
            Ledger.open(url)


# ---------------------------------------------------------------------- fuzzing


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    payload=st.one_of(
        _json,
        st.fixed_dictionaries(
            {
                "entries": st.lists(
                    st.fixed_dictionaries(
                        {
                            "envelope": st.binary(max_size=200).map(
                                lambda b: base64.b64encode(b).decode()
                            ),
                            "signature": st.binary(min_size=64, max_size=64).map(
                                lambda b: base64.b64encode(b).decode()
                            ),
                        }
                    ),
                    max_size=3,
                )
            }
        ),
        st.fixed_dictionaries(
            {
                "checkpoints": st.lists(
                    st.fixed_dictionaries(
                        {"note": st.text(max_size=200), "created": st.none() | st.text(max_size=30)}
                    ),
                    max_size=2,
                )
            }
        ),
    ),
    op=st.sampled_from(["append", "cosign", "create", "head", "events", "root", "nothing"]),
)
def test_fuzzed_requests_get_4xx_append_nothing_and_the_service_keeps_serving(
    study: tuple[str, Path], payload: Any, op: str
) -> None:
    url, path = study
    before = _size(path)
    answer = plain_http.post(f"{url}/api/v1/{op}", json=payload)
    assert 400 <= answer.status_code < 500, answer.text
    assert isinstance(answer.json()["error"], str)
    assert _size(path) == before and _head(url)["size"] == before


@settings(max_examples=40, deadline=None, suppress_health_check=[FIXTURE])
@given(flips=st.dictionaries(st.integers(0, 150), st.integers(1, 255), min_size=1, max_size=3))
def test_a_valid_envelope_with_flipped_bytes_is_refused(
    study: tuple[str, Path], flips: dict[int, int]
) -> None:
    url, path = study
    before = _size(path)
    entry = _signed(RUNNER, "run.started", {"fuzz": "value"}, _head(url))
    data = bytearray(base64.b64decode(entry["envelope"]))
    assert len(data) > 150
    for pos, mask in flips.items():
        data[pos] ^= mask
    answer = _post(url, {"entries": [dict(entry, envelope=base64.b64encode(data).decode())]})
    assert answer.status_code in (400, 403, 409), answer.text
    assert _size(path) == before


# ---------------------------------------------------------------------- several processes


@pytest.fixture(scope="module")
def two_services(pg_server: Any) -> Iterator[list[str]]:
    """Two `ledger serve --allow-create` processes on the one PostgreSQL: their base URLs.

    Shared by the tests below that use the default turn; each works on a study of its own.
    """
    procs = [serve(pg_server.url(), "--allow-create") for _ in range(2)]
    try:
        yield [base for _, base in procs]
    finally:
        for proc, _ in procs:
            stop(proc)


def test_two_service_processes_on_one_postgresql_sequence_one_chain(
    two_services: list[str],
) -> None:
    name = f"two-{os.getpid()}-{int(time.time() * 1000) % 10**8}"
    urls = [f"{base}/{name}" for base in two_services]
    with Ledger.create(urls[0], origin=ORIGIN, key=OWNER) as log:
        log.add_key(RUNNER.vkey, "runner", key=OWNER)
    with Ledger.open(urls[0]) as a, Ledger.open(urls[1]) as b, Ledger.open(" ".join(urls)) as c:
        for i in range(4):
            a.append("run.started", {"via": 0, "i": i}, key=RUNNER)
            b.append("run.started", {"via": 1, "i": i}, key=RUNNER)
            c.append("run.started", {"via": "both", "i": i}, key=RUNNER)
        c.sign_checkpoint(OWNER)
        assert c.size == 14 and a.root() == b.root() == c.root()
        events = list(c.events())
        assert c.root() == root_from_leaf_hashes([e.leaf_hash for e in events])
    assert [e.seq for e in events] == list(range(14))
    assert all(e.prev == events[e.seq - 1].leaf_hash.hex() for e in events[1:])


def test_turns_hold_across_two_service_processes_on_one_postgresql(
    two_services: list[str],
) -> None:
    """A turn is the PostgreSQL row lock of the sequencer, held by the process that gave it:
    writers spread over two processes each lose at most once per append."""
    name = f"turns-{os.getpid()}-{int(time.time() * 1000) % 10**8}"
    urls = [f"{base}/{name}" for base in two_services]
    with Ledger.create(urls[0], origin=ORIGIN, key=OWNER) as log:
        log.add_key(RUNNER.vkey, "runner", key=OWNER)
    lost = _race([urls[0], urls[1], " ".join(urls)], 3, 6)
    assert len(lost) == 18 and max(lost) <= 1
    with Ledger.open(urls[1]) as log:
        events = list(log.events())
    assert [e.seq for e in events] == list(range(20))
    assert all(e.prev == events[e.seq - 1].leaf_hash.hex() for e in events[1:])


def test_a_turn_sent_back_to_another_service_process_waits_for_it_then_appends_once(
    pg_server: Any,
) -> None:
    """A turn is one process's hold on the sequencer row (docs/service.md §7): the re-signed
    batch that reaches another process (a load balancer without affinity) waits until the
    turn ends, then is appended as an ordinary append, once."""
    name = f"xturn-{os.getpid()}-{int(time.time() * 1000) % 10**8}"
    procs = [serve(pg_server.url(), "--allow-create", "--turn-seconds", "1") for _ in range(2)]
    try:
        one, two = (f"{base}/{name}" for _, base in procs)
        with Ledger.create(one, origin=ORIGIN, key=OWNER) as log:
            log.add_key(RUNNER.vkey, "runner", key=OWNER)
        stale = _head(one)
        assert _post(one, {"entries": [_signed(RUNNER, "run.started", {"n": 0}, stale)]}).is_success
        lost = _ask(one, {"entries": [_signed(RUNNER, "run.started", {"n": 1}, stale)]})
        assert lost.status_code == 409 and lost.json()["turn_seconds"] == 1
        head, turn = lost.json()["head"], lost.json()["turn"]
        mine = _ask(two, {"entries": [_signed(RUNNER, "run.started", {"n": 1}, head)]}, turn)
        assert mine.status_code == 200, mine.text
        assert mine.json()["seqs"] == [head["size"]] and mine.json()["replayed"] is False
        again = _ask(two, {"entries": [_signed(RUNNER, "run.started", {"n": 1}, head)]}, turn)
        assert again.status_code == 200 and again.json()["replayed"] is True
        with Ledger.open(two) as log:
            events = list(log.events())
        assert [e.body for e in events[head["size"] - 1 :]] == [{"n": 0}, {"n": 1}]
        assert all(e.prev == events[e.seq - 1].leaf_hash.hex() for e in events[1:])
    finally:
        for proc, _ in procs:
            stop(proc)


@pytest.mark.slow
def test_the_demo_study_through_two_services_on_postgresql_is_the_archive_byte_for_byte(
    pg_server: Any,
) -> None:
    """Acceptance (issue 35): scripts/make_archive.py with the study's ledger behind two
    `ledger serve` processes on one PostgreSQL (the client alternates between them; one
    runner) rebuilds the committed archive/ byte for byte, and it verifies."""
    name = f"acc-{os.getpid()}-{int(time.time() * 1000) % 10**8}"
    procs = [serve(pg_server.url(), "--allow-create") for _ in range(2)]
    try:
        store = " ".join(f"{base}/{name}" for _, base in procs)
        result = subprocess.run(
            [
                sys.executable,
                str(ROOT / "scripts" / "make_archive.py"),
                "--check",
                "--store",
                store,
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "byte-identical to a fresh build (ledger on `ledger serve`)" in result.stdout
    finally:
        for proc, _ in procs:
            stop(proc)


@pytest.mark.slow
def test_every_command_works_on_a_study_behind_the_service(
    tmp_path: Path, ledger_home: Path
) -> None:
    """`ledger new --store http://.../STUDY`, then lock, run, status, score, unblind, analyze
    and export through the service (default request limit); the archive verifies."""
    from click.testing import CliRunner

    from ledger.cli import main

    store = tmp_path / "store"
    store.mkdir()
    server = LocalTiles(None, service=AppendService(StoreRoot(str(store)), allow_create=True))
    with server:
        _every_command(server.url, store, tmp_path, CliRunner(), main)


def _every_command(base: str, store: Path, tmp_path: Path, runner: Any, main: Any) -> None:
    root = tmp_path / "remote-study"

    def ledger(*args: str) -> str:
        result = runner.invoke(main, list(args))
        assert result.exit_code == 0, (args, result.output)
        return result.output

    ledger("new", str(root), "--store", f"{base}/remote-study")
    assert (root / "ledger.store").read_text().strip() == f"{base}/remote-study"
    spec = root / "study.toml"
    spec.write_text(spec.read_text().replace("replicates = 30", "replicates = 1"))
    ledger("lock", str(root))
    ledger("run", str(root), "--backend", "simulated")
    status = json.loads(ledger("status", str(root), "--json"))
    assert all(a["pending"] == 0 for a in status["arms"])
    for step in ("score", "unblind", "analyze"):
        ledger(step, str(root))
    ledger("export", str(root), str(tmp_path / "archive"))
    ledger("verify", str(tmp_path / "archive"))
    with Ledger.open(store / "remote-study.db", readonly=True) as local:
        kinds = [e.kind for e in local.events()]
    assert kinds.count("run.started") == 1 and kinds[-1] == "export.created"
