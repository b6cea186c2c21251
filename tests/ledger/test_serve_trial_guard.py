"""The trial rules hold for every append through ``ledger serve``, on either engine.

Two ``ledger run`` in two folders (two machines) pointing at one study URL each hold their
own run lock, so only the service can stop them from both recording a trial's final outcome
(docs/service.md §7, "Trial rules"; ``ledger/_guard.py``). Real parts only: ``ledger serve``
processes, real SQLite files and a real PostgreSQL (``pg_server``), real keys, real HTTP.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_process import serve, stop

from ledger import Event, EventSpec, Ledger, RefusedError, SigningKey
from ledger._envelope import envelope_bytes
from ledger._service import AppendService, StoreRoot
from ledger.tiles_server import LocalTiles

ORIGIN = "example.org/serve-trial-guard"


def _key(name: str) -> SigningKey:
    return SigningKey(f"example.org/{name}", hashlib.sha256(name.encode()).digest())


OWNER, MACHINE_A, MACHINE_B = _key("owner"), _key("machine-a"), _key("machine-b")


def _entry(data: bytes, signature: bytes) -> dict[str, str]:
    return {
        "envelope": base64.b64encode(data).decode(),
        "signature": base64.b64encode(signature).decode(),
    }


def _post(url: str, entries: list[dict[str, str]]) -> httpx.Response:
    return httpx.post(f"{url}/api/v1/append", json={"entries": entries}, timeout=30)


def _head(url: str) -> dict[str, Any]:
    data: dict[str, Any] = httpx.get(f"{url}/api/v1/head", timeout=30).json()
    return data


def _signed_next(url: str, key: SigningKey, kind: str, body: dict[str, Any]) -> dict[str, str]:
    """``kind`` signed by ``key`` against the study's head now (what a client sends)."""
    head = _head(url)
    data = envelope_bytes(
        seq=head["size"],
        time="2026-11-28T17:30:00.000000Z",
        kind=kind,
        actor=key.actor,
        prev=head["last"],
        body=body,
        blobs={},
    )
    return _entry(data, key.sign(data))


def _create(url: str) -> None:
    with Ledger.create(url, origin=ORIGIN, key=OWNER) as log:
        log.add_key(MACHINE_A.vkey, "runner", key=OWNER)
        log.add_key(MACHINE_B.vkey, "runner", key=OWNER)


def _two_runs(url_a: str, url_b: str) -> None:
    """Two clients (two machines, two keys) run trial T of one study at once."""
    with Ledger.open(url_a) as a, Ledger.open(url_b) as b:
        s1 = a.append("run.started", {}, key=MACHINE_A).seq
        r1 = a.append("trial.requested", {"trial": "T", "attempt": 1, "session": s1}, key=MACHINE_A)
        s2 = b.append("run.started", {}, key=MACHINE_B).seq  # ends session s1 (no `concurrent`)

        # A second request in flight: B asks for T's attempt 1, which A is making.
        with pytest.raises(
            RefusedError,
            match=r"trial\.requested for T has attempt 1; the trial's next attempt is 2",
        ):
            b.append("trial.requested", {"trial": "T", "attempt": 1, "session": s2}, key=MACHINE_B)
        r2 = b.append(
            "trial.requested", {"trial": "T", "attempt": 2, "session": s2}, key=MACHINE_B
        ).seq
        # A's session was ended by B's run.started: A may not request in it any more.
        with pytest.raises(RefusedError, match=f"names run session {s1}, which is not open"):
            a.append("trial.requested", {"trial": "U", "attempt": 1, "session": s1}, key=MACHINE_A)

        answer = {"trial": "T", "attempt": 1, "request_seq": r1.seq}
        final: Event = a.append("trial.responded", answer, key=MACHINE_A)

        # B's answer comes second: refused with the trial and the seq that holds it, over
        # plain HTTP (422, nothing appended) and through the remote ledger (RefusedError).
        size = _head(url_b)["size"]
        second = {"trial": "T", "attempt": 2, "request_seq": r2}
        response = _post(url_b, [_signed_next(url_b, MACHINE_B, "trial.responded", second)])
        assert response.status_code == 422, response.text
        refused = response.json()
        assert refused["type"] == "RefusedError" and refused["rule"] == "final"
        assert f"trial T already has its final outcome (seq {final.seq})" in refused["error"]
        assert f"seq {size}: refused" in refused["error"]
        assert _head(url_b)["size"] == size == final.seq + 1
        with pytest.raises(
            RefusedError, match=f"already has its final outcome \\(seq {final.seq}\\)"
        ):
            b.append("trial.responded", second, key=MACHINE_B)
        # A failure marked final is a final outcome too; a request after the final one is refused.
        failed = {**second, "final": True, "error_type": "http", "retryable": False}
        with pytest.raises(RefusedError, match=f"final outcome \\(seq {final.seq}\\)"):
            b.append("trial.failed", failed, key=MACHINE_B)
        with pytest.raises(RefusedError, match="no request may follow it"):
            b.append("trial.requested", {"trial": "T", "attempt": 3, "session": s2}, key=MACHINE_B)
        assert _head(url_b)["size"] == size

        # The very same envelope sent again (a retry whose answer was lost): its existing seq.
        again = _post(url_b, [_entry(final.envelope, final.signature)])
        assert again.status_code == 200, again.text
        assert again.json()["seqs"] == [final.seq] and again.json()["replayed"] is True

        # What the PostgreSQL workers do with a refused final outcome is accepted: B closes
        # its request with a non-final `superseded` failure, so every request has one outcome.
        superseded = {**second, "final": False, "error_type": "superseded", "retryable": False}
        assert b.append("trial.failed", superseded, key=MACHINE_B).seq == size
        assert _head(url_a)["size"] == size + 1


def test_two_clients_of_a_sqlite_service_never_record_two_final_outcomes(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    proc, base = serve(str(store), "--allow-create")
    try:
        _create(f"{base}/study")
        _two_runs(f"{base}/study", f"{base}/study")
    finally:
        stop(proc)
    with Ledger.open(store / "study.db", readonly=True) as log:
        kinds = [(e.kind, e.body.get("final")) for e in log.events() if e.kind != "key.added"]
    assert kinds == [
        ("ledger.genesis", None),
        ("run.started", None),
        ("trial.requested", None),
        ("run.started", None),
        ("trial.requested", None),
        ("trial.responded", None),
        ("trial.failed", False),
    ]


def test_a_sqlite_service_catches_up_on_what_a_local_writer_appended(tmp_path: Path) -> None:
    """Events appended to the SQLite file directly (no projection kept) are projected first."""
    store = tmp_path / "store"
    store.mkdir()
    path = store / "local.db"
    with Ledger.create(path, origin=ORIGIN, key=OWNER) as log:
        log.add_key(MACHINE_A.vkey, "runner", key=OWNER)
        log.add_key(MACHINE_B.vkey, "runner", key=OWNER)
        session = log.append("run.started", {}, key=MACHINE_A).seq
        body = {"trial": "T", "attempt": 1, "session": session}
        request = log.append("trial.requested", body, key=MACHINE_A).seq
        answer = {"trial": "T", "attempt": 1, "request_seq": request}
        final = log.append("trial.responded", answer, key=MACHINE_A).seq
    svc = AppendService(StoreRoot.parse(str(store)))
    with LocalTiles(None, service=svc) as server, Ledger.open(f"{server.url}/local") as remote:
        with pytest.raises(
            RefusedError, match=f"seq {request} already has its outcome \\(seq {final}\\)"
        ):
            remote.append("trial.responded", answer, key=MACHINE_B)
        with pytest.raises(RefusedError, match="no request may follow it"):
            remote.append("trial.requested", {**body, "attempt": 2}, key=MACHINE_B)
        # In a batch, the refusal names the caller's refused spec (what `ledger run` needs to
        # leave it out and close its request as superseded) and nothing of the batch goes in.
        size = remote.size
        specs = [
            EventSpec("trial.requested", {"trial": "V", "attempt": 1, "session": session}),
            EventSpec("trial.excluded", {"trial": "T", "reason": "again"}),
        ]
        with pytest.raises(RefusedError) as refused:
            remote.append_many(specs, key=MACHINE_A)
        assert refused.value.spec is specs[1] and refused.value.seq == size + 1
        assert refused.value.rule == "final" and remote.size == size
        assert remote.append("run.stopped", {"session": session}, key=MACHINE_A).seq == final + 1
    svc.close()
    # A local writer is not guarded (one writer per study: the run lock): only the service is.
    with Ledger.open(path) as log:
        assert log.trial_guard is False
        assert log.append("trial.responded", answer, key=MACHINE_A).seq == final + 2


def test_two_clients_of_two_services_on_postgresql_never_record_two_final_outcomes(
    pg_server: Any,
) -> None:
    name = f"guard-{os.getpid()}-{int(time.time() * 1000) % 10**8}"
    procs = [serve(pg_server.url(), "--allow-create") for _ in range(2)]
    try:
        url_a, url_b = (f"{base}/{name}" for _, base in procs)
        _create(url_a)
        _two_runs(url_a, url_b)
    finally:
        for proc, _ in procs:
            stop(proc)


@pytest.mark.slow  # two `ledger run` processes and a third to finish: tens of seconds
def test_two_ledger_runs_from_two_folders_through_a_sqlite_service_record_one_final_each(
    tmp_path: Path, ledger_home: Path
) -> None:
    """The case the guard is for: one study, two folders, both run at once through the
    service. Whatever the interleaving, no trial gets two final outcomes; a run that met the
    other's events stops naming the refusal, and a run alone afterwards finishes the study."""
    import shutil
    import subprocess
    import sys

    from click.testing import CliRunner

    from ledger.cli import main

    store = tmp_path / "store"
    store.mkdir()
    proc, base = serve(str(store), "--allow-create")
    exe = str(Path(sys.executable).parent / "ledger")
    try:
        first, second = tmp_path / "a", tmp_path / "b"
        cli = CliRunner()
        result = cli.invoke(main, ["new", str(first), "--store", f"{base}/two-runs"])
        assert result.exit_code == 0, result.output
        spec = first / "study.toml"
        spec.write_text(spec.read_text().replace("replicates = 30", "replicates = 2"))
        result = cli.invoke(main, ["lock", str(first)])
        assert result.exit_code == 0, result.output
        shutil.copytree(first, second)  # the second machine's copy of the locked study
        runs = [
            subprocess.Popen(
                [exe, "run", str(folder), "--backend", "simulated"],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for folder in (first, second)
        ]
        outputs = [(run.communicate(timeout=600)[0], run.returncode) for run in runs]
        for output, code in outputs:
            assert code == 0 or "refused" in output, output
        result = cli.invoke(main, ["run", str(first), "--backend", "simulated"])
        assert result.exit_code == 0, result.output
        result = cli.invoke(main, ["status", str(first), "--json"])
        assert result.exit_code == 0, result.output
        assert all(arm["pending"] == 0 for arm in json.loads(result.output)["arms"])
    finally:
        stop(proc)
    finals: dict[str, list[int]] = {}
    with Ledger.open(store / "two-runs.db", readonly=True) as log:
        for e in log.events():
            final = e.kind == "trial.responded" or (
                e.kind == "trial.failed" and e.body.get("final") is True
            )
            if final or e.kind == "trial.excluded":
                finals.setdefault(str(e.body["trial"]), []).append(e.seq)
    assert finals and all(len(seqs) == 1 for seqs in finals.values()), finals
