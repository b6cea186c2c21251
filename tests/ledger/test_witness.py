"""The C2SP witness: a real `ledger witness serve` process on 127.0.0.1, spoken to over real HTTP.

Specs: c2sp.org/tlog-witness [add-checkpoint] and c2sp.org/tlog-cosignature [Format, Ed25519
signed message]. The cosignature verifier below is written from the spec alone (hashlib and
cryptography), not with the project's own code.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import plain_http
import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ledger import Checkpoint, Ledger, SigningKey
from ledger.cli import main
from ledger.witness import (
    MAX_PROOF_LINES,
    CosignerVerifier,
    Witness,
    WitnessError,
    WitnessRefusedError,
    WitnessUnreachableError,
    add_checkpoint,
    format_request,
    new_client,
)

CLI = [sys.executable, "-c", "from ledger.cli import main; main()"]
EMPTY_ROOT = hashlib.sha256(b"").digest()


# ----------------------------------------------------------------------- helpers


def spec_verify_cosignature(vkey: str, checkpoint_text: str, line: str) -> int:
    """tlog-cosignature, from the spec: return the timestamp of a valid Ed25519 cosignature."""
    name, key_id_hex, blob = vkey.split("+", 2)
    raw = base64.b64decode(blob)
    assert raw[0] == 0x04 and len(raw) == 33  # vkey signature type 0x04
    public = raw[1:]
    assert hashlib.sha256(name.encode() + b"\n\x04" + public).digest()[:4].hex() == key_id_hex
    assert line.startswith("\u2014 ") and line.endswith("\n")
    line_name, line_blob = line[2:-1].split(" ")
    sig = base64.b64decode(line_blob)
    assert line_name == name and sig[:4].hex() == key_id_hex and len(sig) == 4 + 8 + 64
    timestamp = int.from_bytes(sig[4:12], "big")
    assert 0 < timestamp <= 2**63 - 1
    message = f"cosignature/v1\ntime {timestamp}\n".encode() + checkpoint_text.encode()
    Ed25519PublicKey.from_public_bytes(public).verify(sig[12:], message)  # raises if invalid
    return timestamp


class Log:
    """A real ledger whose checkpoints and consistency proofs come from ledger/_store.py."""

    def __init__(self, path: Path, origin: str, key: SigningKey | None = None) -> None:
        self.key = key or SigningKey.generate(f"{origin}/owner")
        self.origin = origin
        self.ledger = Ledger.create(path, origin=origin, key=self.key)

    def grow(self, n: int, tag: str = "") -> None:
        for i in range(n):
            self.ledger.append("note.added", {"i": i, "tag": tag}, key=self.key)

    @property
    def size(self) -> int:
        return self.ledger.size

    def note(self, size: int | None = None) -> str:
        return self.ledger.sign_checkpoint(self.key, size)

    def proof(self, old: int, new: int | None = None) -> list[bytes]:
        new = self.size if new is None else new
        return list(self.ledger.consistency_proof(old, new).path) if 0 < old < new else []


def start_server(directory: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [*CLI, "witness", "serve", str(directory), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if " listening on " not in line:
        proc.kill()
        raise AssertionError(f"witness did not start: {line}{proc.communicate()[1]}")
    return proc, line.split(" listening on ")[1].strip()


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


def post(url: str, body: bytes) -> httpx.Response:
    return plain_http.post(url + "/add-checkpoint", content=body, timeout=10)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str]]:
    """One witness process for the module: (directory, URL, witness vkey)."""
    directory = tmp_path_factory.mktemp("witness") / "w1"
    with Witness.init(directory, "witness.example/w1") as w:
        vkey = w.key.vkey
    proc, url = start_server(directory)
    yield directory, url, vkey
    stop(proc)


def new_log(tmp_path: Path, directory: Path, name: str, events: int = 0) -> Log:
    log = Log(tmp_path / f"{name}.db", f"example.org/{name}")
    log.grow(events)
    with Witness.open(directory) as w:
        w.add_log(log.origin, [log.key.vkey])
    return log


# ----------------------------------------------------------------------- happy path


def test_a_ledgers_checkpoints_are_cosigned_in_sequence(
    served: tuple[Path, str, str], tmp_path: Path
) -> None:
    directory, url, vkey = served
    log = new_log(tmp_path, directory, "happy", events=2)
    old = 0
    stamps = []
    with new_client() as client:  # keep-alive, as the spec recommends
        for step in (0, 1, 5, 8, 0, 17):
            log.grow(step)
            note = log.note()
            lines = add_checkpoint(url, old, log.proof(old), note, client=client)
            assert len(lines) == 1
            text = note[: note.index("\n\n") + 1]
            stamps.append(spec_verify_cosignature(vkey, text, lines[0]))
            assert CosignerVerifier.parse(vkey).verify_line(text, lines[0]) == stamps[-1]
            old = log.size
    assert abs(stamps[-1] - time.time()) < 60 and stamps == sorted(stamps)
    # tlog-witness [Monitor Retrieval Mechanism]: the latest, with the log's and our signatures
    origin_hash = hashlib.sha256(log.origin.encode()).hexdigest()
    got = plain_http.get(f"{url}/{origin_hash}/checkpoint", timeout=10)
    assert got.status_code == 200 and got.text.startswith(note)
    assert Checkpoint.from_text(got.text[: got.text.index("\n\n") + 1]).size == log.size
    assert plain_http.get(f"{url}/{'0' * 64}/checkpoint", timeout=10).status_code == 404
    with new_client() as client:  # keep-alive: one connection serves many answers
        for _ in range(3):
            assert client.get(f"{url}/{origin_hash}/checkpoint").text == got.text
    with Witness.open(directory) as w:
        latest = w.latest(log.origin)
    assert latest is not None and latest[0] == log.size


@pytest.mark.parametrize("proto", [socket.IPPROTO_TCP, 0])
def test_the_witness_socket_gets_tcp_nodelay_on_every_connection(
    tmp_path: Path, proto: int
) -> None:
    """Keep-alive answers are not held back by Nagle's algorithm (~40 ms each): asyncio sets
    TCP_NODELAY on an accepted connection only when the listening socket says it is TCP, which
    ``_listen`` does (proto ``IPPROTO_TCP``); a socket made with proto 0 gets no TCP_NODELAY.
    Checked on the accepted connections themselves, not by timing them."""
    from ledger.witness_server import _listen

    if proto:
        sock = _listen(tmp_path, "127.0.0.1", 0)
        assert sock.proto == socket.IPPROTO_TCP
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
    seen: list[int] = []

    async def serve() -> None:
        def made(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            conn = writer.get_extra_info("socket")
            seen.append(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(made, sock=sock)
        port = sock.getsockname()[1]
        for n in range(2):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            while len(seen) <= n:
                await asyncio.sleep(0.01)
            writer.close()
            await writer.wait_closed()
        server.close()
        await server.wait_closed()

    asyncio.run(serve())
    assert seen == ([1, 1] if proto else [0, 0])


# ----------------------------------------------------------------------- each status code


def test_each_refusal_has_its_status_code(served: tuple[Path, str, str], tmp_path: Path) -> None:
    directory, url, _ = served
    log = new_log(tmp_path, directory, "codes", events=3)
    assert log.size == 4  # the genesis event and three more
    note4 = log.note()
    # unknown origin: 404
    stranger = Log(tmp_path / "stranger.db", "example.org/stranger")
    with pytest.raises(WitnessRefusedError) as info:
        add_checkpoint(url, 0, [], stranger.note())
    assert info.value.status == 404
    # unsigned: 403; signed by a key the witness does not trust for the origin: 403
    text = note4[: note4.index("\n\n") + 1]
    assert post(url, b"old 0\n\n" + text.encode()).status_code == 403
    impostor = SigningKey.generate(log.key.name)
    assert (
        post(url, format_request(0, [], Checkpoint.from_text(text).sign([impostor]))).status_code
        == 403
    )
    # a trusted key's signature that fails to verify: 403
    blob = note4.rstrip("\n").rsplit(" ", 1)[1]
    raw = bytearray(base64.b64decode(blob))
    raw[-1] ^= 1
    broken = note4.replace(blob, base64.b64encode(bytes(raw)).decode())
    assert post(url, format_request(0, [], broken)).status_code == 403
    # old size above the checkpoint size: 400
    with pytest.raises(WitnessRefusedError) as info:
        add_checkpoint(url, 5, [], note4)
    assert info.value.status == 400
    # first cosignature, then a wrong old size: 409 with the right size
    assert add_checkpoint(url, 0, [], note4)
    log.grow(3)
    with pytest.raises(WitnessRefusedError) as info:
        add_checkpoint(url, 2, log.proof(2), log.note())
    assert info.value.status == 409 and info.value.size == 4
    response = post(url, format_request(0, [], log.note()))
    assert response.status_code == 409
    assert response.headers["content-type"] == "text/x.tlog.size" and response.text == "4\n"
    # a bad proof: 422
    proof = log.proof(4)
    with pytest.raises(WitnessRefusedError) as info:
        add_checkpoint(url, 4, [proof[0][::-1], *proof[1:]], log.note())
    assert info.value.status == 422
    # 64 proof lines: 400 (the client refuses to send them at all)
    body = b"old 4\n" + (base64.b64encode(b"\0" * 32) + b"\n") * 64 + b"\n" + log.note().encode()
    assert post(url, body).status_code == 400
    with pytest.raises(WitnessError, match="63"):
        add_checkpoint(url, 4, [b"\0" * 32] * 64, log.note())
    # and the right proof still works afterwards
    assert add_checkpoint(url, 4, log.proof(4), log.note())
    # every refused request whose signature verified was kept, and only those
    conn = sqlite3.connect(directory / "state.db")
    kept = [
        r
        for r in conn.execute(
            "SELECT status, old_size, size FROM evidence WHERE origin = ? ORDER BY id",
            (log.origin,),
        )
    ]
    conn.close()
    assert kept == [(400, 5, 4), (409, 2, 7), (409, 0, 7), (422, 4, 7)]


def _unknown_origin(url: str, log: Log, tmp_path: Path) -> httpx.Response:
    stranger = Log(tmp_path / "stranger.db", "example.org/stranger-origin")
    return post(url, format_request(0, [], stranger.note()))


def _unsigned(url: str, log: Log, tmp_path: Path) -> httpx.Response:
    note = log.note()
    return post(url, b"old 0\n\n" + note[: note.index("\n\n") + 1].encode())


def _untrusted_key(url: str, log: Log, tmp_path: Path) -> httpx.Response:
    note = log.note()
    impostor = SigningKey.generate(log.key.name)
    text = note[: note.index("\n\n") + 1]
    return post(url, format_request(0, [], Checkpoint.from_text(text).sign([impostor])))


def _wrong_signature(url: str, log: Log, tmp_path: Path) -> httpx.Response:
    note = log.note()
    blob = note.rstrip("\n").rsplit(" ", 1)[1]
    raw = bytearray(base64.b64decode(blob))
    raw[-1] ^= 1
    return post(url, format_request(0, [], note.replace(blob, base64.b64encode(raw).decode())))


def _old_above_size(url: str, log: Log, tmp_path: Path) -> httpx.Response:
    return post(url, format_request(log.size + 1, [], log.note()))


def _wrong_old_size(url: str, log: Log, tmp_path: Path) -> httpx.Response:
    assert add_checkpoint(url, 0, [], log.note())
    log.grow(3)
    return post(url, format_request(2, log.proof(2), log.note()))


def _bad_proof(url: str, log: Log, tmp_path: Path) -> httpx.Response:
    old = log.size
    assert add_checkpoint(url, 0, [], log.note())
    log.grow(3)
    proof = log.proof(old)
    return post(url, format_request(old, [proof[0][::-1], *proof[1:]], log.note()))


def _sixty_four_proof_lines(url: str, log: Log, tmp_path: Path) -> httpx.Response:
    assert add_checkpoint(url, 0, [], log.note())
    log.grow(3)
    lines = (base64.b64encode(b"\0" * 32) + b"\n") * 64
    return post(url, b"old 4\n" + lines + b"\n" + log.note().encode())


@pytest.mark.parametrize(
    ("case", "status", "body"),
    [
        (_unknown_origin, 404, "unknown log origin"),
        (_unsigned, 403, "checkpoint signature"),
        (_untrusted_key, 403, "checkpoint signature"),
        (_wrong_signature, 403, "checkpoint signature"),
        (_old_above_size, 400, "old size 5 > checkpoint size 4"),
        (_wrong_old_size, 409, "4\n"),
        (_bad_proof, 422, "consistency proof from size 4 to 7 does not verify"),
        (_sixty_four_proof_lines, 400, "64 consistency proof lines (at most 63)"),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else None,
)
def test_bad_request_gets_its_status(
    served: tuple[Path, str, str],
    tmp_path: Path,
    case: Callable[[str, Log, Path], httpx.Response],
    status: int,
    body: str,
) -> None:
    """One named test per refusal of tlog-witness add-checkpoint (issue 20, Bad input)."""
    directory, url, _ = served
    log = new_log(tmp_path, directory, f"bad-{case.__name__.strip('_').replace('_', '-')}", 3)
    response = case(url, log, tmp_path)
    assert response.status_code == status, response.text
    assert body in response.text
    if status == 409:
        assert response.headers["content-type"] == "text/x.tlog.size"


class SpecOnlyWitness(ThreadingHTTPServer):
    """A minimal witness written from tlog-witness and tlog-cosignature alone (stdlib HTTP)."""

    def __init__(self, log_public: bytes, log_name: str) -> None:
        super().__init__(("127.0.0.1", 0), _SpecHandler)
        self.private = Ed25519PrivateKey.generate()
        public = self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.name = "spec.example/witness"
        key_id = hashlib.sha256(self.name.encode() + b"\n\x04" + public).digest()[:4]
        self.key_id = key_id
        encoded = base64.b64encode(bytes([4]) + public).decode()
        self.vkey = f"{self.name}+{key_id.hex()}+{encoded}"
        log_id = hashlib.sha256(log_name.encode() + b"\n\x01" + log_public).digest()[:4]
        self.log = (log_name, log_id, Ed25519PublicKey.from_public_bytes(log_public))
        self.size = 0


class _SpecHandler(BaseHTTPRequestHandler):
    server: SpecOnlyWitness

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, status: int, body: str, ctype: str = "text/plain") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        head, _, note = body.partition("\n\n")
        old = int(head.split("\n")[0].removeprefix("old "))
        text, _, sigs = note.partition("\n\n")
        text += "\n"
        name, id_, log_key = self.server.log
        signed = False
        for line in sigs.splitlines():
            sig_name, blob = line.removeprefix("\u2014 ").split(" ")
            raw = base64.b64decode(blob)
            if sig_name == name and raw[:4] == id_:
                log_key.verify(raw[4:], text.encode())
                signed = True
        if not signed:
            return self._answer(403, "unsigned\n")
        if old != self.server.size:
            return self._answer(409, f"{self.server.size}\n", "text/x.tlog.size")
        self.server.size = int(text.split("\n")[1])  # (a real witness checks the proof)
        stamp = int(time.time())
        message = f"cosignature/v1\ntime {stamp}\n{text}".encode()
        blob = self.server.key_id + stamp.to_bytes(8, "big") + self.server.private.sign(message)
        self._answer(200, f"\u2014 {self.server.name} {base64.b64encode(blob).decode()}\n")


def test_the_client_works_with_a_witness_written_from_the_spec_alone(tmp_path: Path) -> None:
    log = Log(tmp_path / "spec.db", "example.org/spec")
    log.grow(3)
    server = SpecOnlyWitness(log.key.verifier.public_key, log.key.name)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        note = log.note()
        lines = add_checkpoint(url, 0, [], note)
        spec_verify_cosignature(server.vkey, note[: note.index("\n\n") + 1], lines[0])
        log.grow(2)
        with pytest.raises(WitnessRefusedError) as info:
            add_checkpoint(url, 0, [], log.note())
        assert info.value.status == 409 and info.value.size == 4
        assert add_checkpoint(url, 4, log.proof(4), log.note())
    finally:
        server.shutdown()
        server.server_close()


def test_client_errors_name_the_witness(tmp_path: Path) -> None:
    with pytest.raises(WitnessUnreachableError, match=r"127\.0\.0\.1:9/add-checkpoint"):
        add_checkpoint("http://127.0.0.1:9", 0, [], "x\n1\nAA==\n\n— k AAAA\n", timeout=2)


# ----------------------------------------------------------------------- conformance

# tlog-witness [add-checkpoint], every MUST a witness can be tested for, one check each below:
#  M1  the request MUST be an HTTP POST
#  M2  body: old size line, proof lines, empty line, checkpoint; each line ends in U+000A
#  M3  old size: "old", one space, decimal with no leading zeroes ("0" for zero)
#  M4  a checkpoint MAY carry several signatures; the witness MUST ignore unknown keys'
#  M5  unknown origin: 404
#  M6  no signature from a trusted key, or a trusted key's signature that fails: 403
#  M7  old size > checkpoint size: 400
#  M8  old size != latest cosigned size (0 if none): 409, body "<size>\n",
#      Content-Type text/x.tlog.size
#  M9  size-0 checkpoint MUST have the empty tree's root, else 422
#  M10 old size 0: the proof MUST be empty, else 422
#  M11 a consistency proof that does not verify: 422
#  M12 old size == checkpoint size: the root hashes MUST be identical, else 422
#  M13 MUST NOT cosign a checkpoint that failed a check (state unchanged after every refusal)
#  M14 success: MUST update the latest cosigned checkpoint, persisted before responding; 200
#  M15 200 body: one or more note signature lines, each starting with U+2014, ending in U+000A
#  M16 the signatures MUST be cosignatures (tlog-cosignature) on the checkpoint, timestamp not 0
#  M17 the client MUST NOT send more than 63 proof lines (witness: more is malformed, 400)
# tlog-cosignature [Format]: key id SHA-256(name || "\n" || 0x04 || key)[:4]; timestamp a
# big-endian u64 <= 2^63-1; the signed message "cosignature/v1\ntime T\n" + the whole note body,
# extension lines included (checked by spec_verify_cosignature).


def test_conformance_with_every_must(served: tuple[Path, str, str], tmp_path: Path) -> None:
    directory, url, vkey = served
    log = new_log(tmp_path, directory, "conformance", events=2)

    def state() -> tuple[int, bytes, str] | None:
        with Witness.open(directory) as w:  # a fresh connection: what is on disk
            return w.latest(log.origin)

    note3 = log.note()
    # M1
    assert plain_http.get(url + "/add-checkpoint", timeout=10).status_code == 405
    # M2, M3: malformed framing
    for body in (
        b"old 0\n" + note3.encode(),  # no empty line
        b"old 00\n\n" + note3.encode(),  # leading zero
        b"old  0\n\n" + note3.encode(),  # two spaces
        b"OLD 0\n\n" + note3.encode(),
        b"old 0\nnot base64!\n\n" + note3.encode(),
        b"old 0\n" + base64.b64encode(b"short") + b"\n\n" + note3.encode(),
        b"old -1\n\n" + note3.encode(),
    ):
        assert post(url, body).status_code == 400, body
    assert state() is None  # M13
    # M10: old size 0 with a proof
    assert post(url, format_request(0, [b"\1" * 32], note3)).status_code == 422
    # M9: a size-0 checkpoint with another root; with the empty root it is cosigned
    zero_bad = Checkpoint(log.origin, 0, b"\1" * 32).sign([log.key])
    assert post(url, format_request(0, [], zero_bad)).status_code == 422
    assert state() is None  # M13
    zero = Checkpoint(log.origin, 0, EMPTY_ROOT).sign([log.key])
    assert post(url, format_request(0, [], zero)).status_code == 200
    # M4: an extra signature by an unknown key is ignored; M14, M15, M16
    other = SigningKey.generate("someone.else/key")
    text3 = note3[: note3.index("\n\n") + 1]
    two_sigs = note3 + Checkpoint.from_text(text3).sign([other]).split("\n\n", 1)[1]
    response = post(url, format_request(0, [], two_sigs))
    assert response.status_code == 200
    assert response.text.startswith("\u2014 ") and response.text.endswith("\n")
    spec_verify_cosignature(vkey, text3, response.text)
    assert state() is not None and state()[0] == 3  # type: ignore[index]
    # M12: same size, another root
    fork = Log(tmp_path / "conformance-fork.db", log.origin, log.key)
    fork.grow(2, tag="fork")
    assert fork.size == 3
    assert post(url, format_request(3, [], fork.note())).status_code == 422
    # M11
    log.grow(4)
    assert (
        post(url, format_request(3, [b"\2" * 32] * len(log.proof(3)), log.note())).status_code
        == 422
    )
    # M8
    response = post(url, format_request(1, [], log.note()))
    assert (response.status_code, response.text) == (409, "3\n")
    assert response.headers["content-type"] == "text/x.tlog.size"
    # M17
    body = format_request(3, log.proof(3), log.note()).replace(
        b"\n\n", b"\n" + (base64.b64encode(b"\0" * 32) + b"\n") * (MAX_PROOF_LINES + 1) + b"\n", 1
    )
    assert post(url, body).status_code == 400
    # M13: nothing refused was cosigned
    assert state()[0] == 3  # type: ignore[index]
    # extension lines are part of the cosigned message (tlog-cosignature)
    ext = Checkpoint(log.origin, log.size, log.ledger.root(), ("ext line",)).sign([log.key])
    response = post(url, format_request(3, log.proof(3), ext))
    assert response.status_code == 200
    spec_verify_cosignature(vkey, ext[: ext.index("\n\n") + 1], response.text)
    assert state()[0] == 7  # type: ignore[index]


# ----------------------------------------------------------------------- the fork attack


def test_fork_attack_is_refused_and_the_evidence_prints_both(
    served: tuple[Path, str, str], tmp_path: Path
) -> None:
    directory, url, _ = served
    log = new_log(tmp_path, directory, "forked", events=4)
    registration = log.note()
    assert add_checkpoint(url, 0, [], registration)
    log.ledger.close()
    # the owner copies the ledger back to the registration point, then both branches run on
    branch = tmp_path / "branch.db"
    branch.write_bytes((tmp_path / "forked.db").read_bytes())
    log.ledger = Ledger.open(tmp_path / "forked.db")
    log.grow(3, tag="first run")
    first = log.note()
    assert add_checkpoint(url, 5, log.proof(5), first)
    second = Log.__new__(Log)
    second.key, second.origin, second.ledger = log.key, log.origin, Ledger.open(branch)
    second.grow(3, tag="preferred run")
    forged = second.note()
    with pytest.raises(WitnessRefusedError) as info:  # the branch's own view: old 5
        add_checkpoint(url, 5, second.proof(5), forged)
    assert info.value.status == 409 and info.value.size == 8
    with pytest.raises(WitnessRefusedError) as info:  # and at the witness's size
        add_checkpoint(url, 8, [], forged)
    assert info.value.status == 422
    result = CliRunner().invoke(main, ["witness", "evidence", str(directory)])
    assert result.exit_code == 1, result.output
    assert "FORK PROVEN: example.org/forked" in result.output
    body = lambda note: note[: note.index("\n\n")]  # noqa: E731
    for note in (first, forged):
        assert "\n".join("    " + x for x in body(note).splitlines()) in result.output
    as_json = CliRunner().invoke(main, ["witness", "evidence", str(directory), "--json"])
    forks = [f for f in json.loads(as_json.stdout) if f["origin"] == log.origin and f["proven"]]
    assert {c["note"] for c in forks[0]["checkpoints"]} == {first, forged}


def test_evidence_without_a_fork_exits_0(tmp_path: Path) -> None:
    Witness.init(tmp_path / "w", "witness.example/quiet").close()
    result = CliRunner().invoke(main, ["witness", "evidence", str(tmp_path / "w")])
    assert result.exit_code == 0 and "no inconsistent checkpoints" in result.output


# ----------------------------------------------------------------------- set-up and state


def test_init_refuses_an_existing_witness_and_serve_a_deleted_database(tmp_path: Path) -> None:
    directory = tmp_path / "w"
    runner = CliRunner()
    first = runner.invoke(main, ["witness", "init", str(directory), "--name", "w.example/a"])
    assert first.exit_code == 0, first.output
    assert CosignerVerifier.parse(first.stdout.strip()).name == "w.example/a"
    assert oct((directory / "witness.key").stat().st_mode & 0o777) == "0o600"
    again = runner.invoke(main, ["witness", "init", str(directory), "--name", "w.example/a"])
    assert again.exit_code == 1 and "already exists" in again.output
    (directory / "state.db").unlink()
    for suffix in ("-wal", "-shm"):
        (directory / f"state.db{suffix}").unlink(missing_ok=True)
    served = subprocess.run(
        [*CLI, "witness", "serve", str(directory), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert served.returncode == 1
    assert "state.db is missing but the witness key" in served.stderr
    assert "refusing to start" in served.stderr and not (directory / "state.db").exists()
    again = runner.invoke(main, ["witness", "init", str(directory), "--name", "w.example/a"])
    assert again.exit_code == 1 and "witness.key already exists" in again.output
    # a state database of another witness is refused too
    Witness.init(tmp_path / "other", "w.example/b").close()
    os.replace(tmp_path / "other" / "state.db", directory / "state.db")
    with pytest.raises(WitnessError, match="belongs to another witness key"):
        Witness.open(directory)


def test_serve_names_a_port_in_use(served: tuple[Path, str, str]) -> None:
    directory, url, _ = served
    port = url.rsplit(":", 1)[1]
    result = CliRunner().invoke(main, ["witness", "serve", str(directory), "--port", port])
    assert result.exit_code == 1 and f"cannot listen on 127.0.0.1:{port}" in result.output


def test_add_log_names_a_bad_vkey(tmp_path: Path) -> None:
    Witness.init(tmp_path / "w", "witness.example/a").close()
    result = CliRunner().invoke(
        main,
        [
            "witness",
            "add-log",
            str(tmp_path / "w"),
            "--origin",
            "example.org/x",
            "--vkey",
            "bogus+key",
        ],
    )
    assert result.exit_code == 1 and "malformed vkey 'bogus+key'" in result.output
    key = SigningKey.generate("example.org/x/owner")
    result = CliRunner().invoke(
        main,
        [
            "witness",
            "add-log",
            str(tmp_path / "w"),
            "--origin",
            "example.org/x",
            "--vkey",
            key.vkey,
        ],
    )
    assert result.exit_code == 0 and "1 trusted key(s)" in result.output


# ----------------------------------------------------------------------- races and kills

RACER = r"""
import json, sys, base64, httpx
from ledger._merkle import consistency_proof, list_range_hash
from ledger.witness import format_request
url, plan = sys.argv[1], json.load(open(sys.argv[2]))
leaves = [bytes.fromhex(h) for h in plan["leaves"]]
rh = list_range_hash(leaves)
known, out = 0, []
with httpx.Client() as client:
    for size in range(1, len(leaves) + 1):
        while known <= size:
            proof = consistency_proof(known, size, rh) if 0 < known < size else []
            r = client.post(url + "/add-checkpoint",
                            content=format_request(known, proof, plan["notes"][str(size)]))
            out.append([size, known, r.status_code])
            if r.status_code == 409:
                known = int(r.text)
                continue
            if r.status_code == 200:
                known = size
            break
print(json.dumps(out))
"""


def _plan(tmp_path: Path, directory: Path, name: str, events: int) -> tuple[Log, Path]:
    log = new_log(tmp_path, directory, name, events=events)
    plan = {
        "leaves": [log.ledger.inclusion_proof(i).leaf_hash.hex() for i in range(log.size)],
        "notes": {str(n): log.note(n) for n in range(1, log.size + 1)},
    }
    path = tmp_path / f"{name}.plan.json"
    path.write_text(json.dumps(plan))
    return log, path


def _check_never_rolled_back(directory: Path, origin: str) -> list[int]:
    conn = sqlite3.connect(directory / "state.db")
    sizes = [
        r[0]
        for r in conn.execute("SELECT size FROM cosigned WHERE origin = ? ORDER BY id", (origin,))
    ]
    state = conn.execute("SELECT size FROM state WHERE origin = ?", (origin,)).fetchone()
    conn.close()
    assert sizes == sorted(sizes), f"the witness cosigned a smaller size after a larger: {sizes}"
    assert state is None or state[0] == max(sizes)
    return sizes


def test_two_processes_racing_never_roll_a_log_back(tmp_path: Path) -> None:
    directory = tmp_path / "w"
    Witness.init(directory, "witness.example/race").close()
    log, plan = _plan(tmp_path, directory, "race", events=40)
    servers = [start_server(directory) for _ in range(2)]  # two witness processes, one database
    try:
        racers = [
            subprocess.Popen(
                [sys.executable, "-c", RACER, url, str(plan)], stdout=subprocess.PIPE, text=True
            )
            for _, url in servers
        ]
        outputs = [json.loads(p.communicate(timeout=120)[0]) for p in racers]
    finally:
        for proc, _ in servers:
            stop(proc)
    sizes = _check_never_rolled_back(directory, log.origin)
    oks = sorted(size for out in outputs for size, _, status in out if status == 200)
    assert sorted(sizes) == oks and sizes[-1] == log.size
    assert all(status in (200, 409) for out in outputs for _, _, status in out), outputs


@pytest.mark.slow
def test_sigkill_between_check_and_persist_never_rolls_back(tmp_path: Path) -> None:
    directory = tmp_path / "w"
    Witness.init(directory, "witness.example/kill").close()
    log, _ = _plan(tmp_path, directory, "kill", events=1)
    rng = random.Random(20)
    seen = {"acknowledged": 0, "in_flight": 0}
    mid_request = 0
    for _ in range(20):
        proc, url = start_server(directory)
        done = threading.Event()

        def submit(url: str = url, done: threading.Event = done) -> None:
            while not done.is_set():
                old = seen["acknowledged"]
                log.grow(1)
                seen["in_flight"] = log.size
                try:
                    add_checkpoint(url, old, log.proof(old), log.note(), timeout=5)
                except WitnessError:
                    return
                seen["acknowledged"] = seen["in_flight"]

        client = threading.Thread(target=submit)
        client.start()
        time.sleep(rng.uniform(0.05, 0.5))
        os.kill(proc.pid, signal.SIGKILL)  # most often mid-request: check, sign, persist
        proc.communicate()
        done.set()
        client.join()
        mid_request += seen["in_flight"] != seen["acknowledged"]
        with Witness.open(directory) as w:
            latest = w.latest(log.origin)
        assert latest is not None
        assert latest[0] in (seen["acknowledged"], seen["in_flight"]), (latest, seen)
        assert latest[1] == log.ledger.root(latest[0])
        seen["acknowledged"] = latest[0]  # the client learns the witness's size (as from a 409)
    _check_never_rolled_back(directory, log.origin)
    assert mid_request >= 10  # most kills landed while a request was being answered
