"""RFC 3161 time stamps on the registration checkpoint (issue 20, docs/witness.md §9), from a
local time-stamping authority made with ``openssl ts -reply`` and served over HTTP on
127.0.0.1; certificates made with ``cryptography``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from helpers import STUDY_ORIGIN, study_key

from ledger import Ledger
from ledger.cli import main
from verify._archive.timestamps import verify_token

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")

TSA_CONFIG = """[ tsa ]
default_tsa = tsa_config
[ tsa_config ]
dir = .
serial = ./serial
crypto_device = builtin
default_policy = 1.2.3.4.1
digests = sha256, sha384, sha512
accuracy = secs:1
ordering = yes
tsa_name = no
ess_cert_id_chain = no
ess_cert_id_alg = sha256
signer_digest = sha256
"""


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(directory: Path, cn: str, *, expired: bool = False) -> Path:
    """A root CA and a TSA certificate it issued (``expired``: valid only in 2020) in PEM."""
    now = dt.datetime.now(dt.UTC)
    directory.mkdir(parents=True)
    ca_key, tsa_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=3650))
        .not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    start, end = (
        (dt.datetime(2020, 1, 1, tzinfo=dt.UTC), dt.datetime(2020, 12, 31, tzinfo=dt.UTC))
        if expired
        else (now - dt.timedelta(days=1), now + dt.timedelta(days=365))
    )
    tsa = (
        x509.CertificateBuilder()
        .subject_name(_name(f"{cn} TSA"))
        .issuer_name(_name(cn))
        .public_key(tsa_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.TIME_STAMPING]), critical=True)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, False, False, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (directory / "ca.crt").write_bytes(ca.public_bytes(pem))
    (directory / "tsa.crt").write_bytes(tsa.public_bytes(pem))
    (directory / "tsa.key").write_bytes(
        tsa_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    (directory / "tsa.cnf").write_text(TSA_CONFIG, "utf-8")
    (directory / "serial").write_text("01\n", "utf-8")
    return directory


@dataclass
class Tsa:
    url: str
    directory: Path
    other_hash: bool = False  # answer with a token on another message's hash


def serve_tsa(directory: Path) -> tuple[Tsa, ThreadingHTTPServer]:
    """``openssl ts -reply`` behind an HTTP POST on 127.0.0.1 (RFC 3161 §3.4)."""
    state = Tsa("", directory)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            query = self.rfile.read(int(self.headers["Content-Length"]))
            with lock, tempfile.TemporaryDirectory() as tmp:
                q = Path(tmp) / "q.tsq"
                if state.other_hash:
                    (Path(tmp) / "other").write_bytes(b"another checkpoint")
                    subprocess.run(
                        [
                            "openssl",
                            "ts",
                            "-query",
                            "-data",
                            str(Path(tmp) / "other"),
                            "-sha256",
                            "-cert",
                            "-out",
                            str(q),
                        ],
                        check=True,
                        capture_output=True,
                    )
                else:
                    q.write_bytes(query)
                out = Path(tmp) / "r.tsr"
                subprocess.run(
                    [
                        "openssl",
                        "ts",
                        "-reply",
                        "-config",
                        "tsa.cnf",
                        "-queryfile",
                        str(q),
                        "-inkey",
                        "tsa.key",
                        "-signer",
                        "tsa.crt",
                        "-out",
                        str(out),
                    ],
                    cwd=directory,
                    check=True,
                    capture_output=True,
                )
                body = out.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/timestamp-reply")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/tsa"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return state, server


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Tsa, Path, Path]]:
    base = tmp_path_factory.mktemp("tsa")
    good = make_ca(base / "good", "Test TSA Root")
    other = make_ca(base / "other", "Some Other Root")
    tsa, server = serve_tsa(good)
    yield tsa, good / "ca.crt", other / "ca.crt"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("tsa-home")
    old = os.environ.get("PROMPT_LEDGER_HOME")
    os.environ["PROMPT_LEDGER_HOME"] = str(base / "home")
    key_file = base / "home" / "keys" / "prompt-tumbling-e-owner.key"
    key_file.parent.mkdir(parents=True)
    study_key().save(key_file)
    from runner._new import new_study

    template = base / "template"
    new_study(template, "prompt-tumbling-e", study_key())
    (template / "ledger.db").unlink()
    spec = template / "study.toml"
    text = spec.read_text("utf-8").replace("replicates = 30", "replicates = 1")
    spec.write_text(
        text.replace("bootstrap_iterations = 10000", "bootstrap_iterations = 100"), "utf-8"
    )
    yield base
    if old is None:
        os.environ.pop("PROMPT_LEDGER_HOME", None)
    else:
        os.environ["PROMPT_LEDGER_HOME"] = old


def stamped_study(home: Path, root: Path, url: str) -> Path:
    shutil.copytree(home / "template", root)
    with Ledger.create(root / "ledger.db", origin=STUDY_ORIGIN, key=study_key()):
        pass
    spec = root / "study.toml"
    spec.write_text(spec.read_text("utf-8") + f'\n[timestamping]\nurl = "{url}"\n', "utf-8")
    return root


def recorded(root: Path) -> tuple[bytes, bytes, dict[str, object]]:
    """(token, checkpoint text, body) of the study's checkpoint.timestamped event."""
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        event = next(iter(log.events("checkpoint.timestamped")))
        token = log.blob(event.blobs["token"])
        note = next(cp.note for cp in log.checkpoints() if cp.size == event.body["size"])
        locked = next(iter(log.events("protocol.locked")))
    assert event.body["size"] == locked.seq + 1  # the registration checkpoint
    return token, (note.partition("\n\n")[0] + "\n").encode(), dict(event.body)


def test_lock_time_stamps_the_registration_checkpoint(
    pki: tuple[Tsa, Path, Path], home: Path, tmp_path: Path
) -> None:
    from runner._lock import lock_study

    tsa, root_ca, _ = pki
    root = stamped_study(home, tmp_path / "study", tsa.url)
    lock_study(root, study_key())
    token, message, body = recorded(root)
    when = verify_token(token, message, root_ca.read_bytes())
    assert abs((dt.datetime.now(dt.UTC) - when).total_seconds()) < 120
    assert body["message_sha256"] == hashlib.sha256(message).hexdigest()
    assert body["gen_time"] == f"{when:%Y-%m-%dT%H:%M:%SZ}"


def test_a_tsa_token_for_a_different_hash_is_refused(
    pki: tuple[Tsa, Path, Path], home: Path, tmp_path: Path
) -> None:
    from runner._lock import lock_study
    from runner._timestamping import TimestampError

    tsa, root_ca, _ = pki
    root = stamped_study(home, tmp_path / "study", tsa.url)
    tsa.other_hash = True
    try:
        with pytest.raises(TimestampError, match="token for a different hash"):
            lock_study(root, study_key())
        with Ledger.open(root / "ledger.db", readonly=True) as log:
            assert list(log.events("protocol.locked"))  # the lock stands, unstamped
            assert not list(log.events("checkpoint.timestamped"))
        # and the verifier refuses such a token on its own
        from runner._timestamping import request_timestamp

        with pytest.raises(Exception, match="different hash"):
            request_timestamp(tsa.url, b"the checkpoint")
    finally:
        tsa.other_hash = False
    token = _token(tsa, b"another checkpoint")
    with pytest.raises(ValueError, match="the token is for a different hash"):
        verify_token(token, b"the checkpoint", root_ca.read_bytes())


def _token(tsa: Tsa, message: bytes) -> bytes:
    from runner._timestamping import request_timestamp

    return request_timestamp(tsa.url, message)


def test_an_untrusted_tsa_certificate_is_refused(pki: tuple[Tsa, Path, Path]) -> None:
    tsa, root_ca, other_ca = pki
    token = _token(tsa, b"the checkpoint")
    assert verify_token(token, b"the checkpoint", root_ca.read_bytes())
    with pytest.raises(ValueError, match="does not verify against --tsa-cert"):
        verify_token(token, b"the checkpoint", other_ca.read_bytes())


def test_an_expired_tsa_certificate_is_refused(tmp_path: Path) -> None:
    expired = make_ca(tmp_path / "expired", "Expired TSA Root", expired=True)
    tsa, server = serve_tsa(expired)
    try:
        token = _token(tsa, b"the checkpoint")
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(ValueError, match="does not verify against --tsa-cert"):
        verify_token(token, b"the checkpoint", (expired / "ca.crt").read_bytes())


@pytest.mark.slow
def test_verify_tsa_cert_checks_the_archives_time_stamp(
    pki: tuple[Tsa, Path, Path], home: Path, tmp_path: Path
) -> None:
    from analysis._analyze import analyze_study
    from analysis._export import export_study
    from analysis._scoring import score_study, unblind_study
    from runner._backends import SimulatedBackend
    from runner._execute import RunOptions, run_study
    from runner._lock import lock_study

    tsa, root_ca, other_ca = pki
    root = stamped_study(home, tmp_path / "study", tsa.url)
    key = study_key()
    lock_study(root, key)
    run_study(root, key, SimulatedBackend(), RunOptions(concurrency=2))
    score_study(root, key)
    unblind_study(root, key)
    analyze_study(root, key)
    archive = tmp_path / "archive"
    export_study(root, archive, key)

    def stamps(*args: str) -> dict[str, object]:
        result = CliRunner().invoke(main, ["verify", str(archive), "--json", *args])
        return next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "timestamps")

    good = stamps("--tsa-cert", str(root_ca))
    assert good["status"] == "PASS", good
    assert "locked no later than" in str(good["reason"]) and "time-stamped by the TSA" in str(
        good["reason"]
    )
    bad = stamps("--tsa-cert", str(other_ca))
    assert bad["status"] == "FAIL" and "does not verify against --tsa-cert" in str(bad["reason"])
    assert stamps()["status"] == "WARN"  # recorded, not checked without a root
    result = CliRunner().invoke(main, ["verify", str(archive), "--tsa-cert", str(root_ca)])
    assert result.exit_code == 0, result.output


@pytest.mark.slow
def test_time_claims_are_exact(pki: tuple[Tsa, Path, Path], home: Path, tmp_path: Path) -> None:
    """Issue 32: a token on a tree taken before the lock claims nothing about the lock; a body
    whose gen_time is not its token's fails; a declared token removed fails without --tsa-cert.
    """
    import time

    from analysis._analyze import analyze_study
    from analysis._export import export_study
    from analysis._scoring import score_study, unblind_study
    from runner._backends import SimulatedBackend
    from runner._execute import RunOptions, run_study
    from runner._lock import lock_study
    from runner._timestamping import TimestampSpec, timestamp_checkpoint
    from tests.verify.test_archive_tamper import resign

    tsa, root_ca, _ = pki
    root = stamped_study(home, tmp_path / "study", tsa.url)
    key = study_key()
    with Ledger.open(root / "ledger.db") as log:  # the owner stamps a tree before the lock
        log.sign_checkpoint(key)
        early = timestamp_checkpoint(log, key, TimestampSpec(tsa.url), log.size)
    time.sleep(1.1)  # the TSA's times have whole seconds: the lock's is later
    lock_study(root, key)
    run_study(root, key, SimulatedBackend(), RunOptions(concurrency=2))
    score_study(root, key)
    unblind_study(root, key)
    analyze_study(root, key)
    archive = tmp_path / "archive"
    export_study(root, archive, key)
    _, _, registration = recorded_after(root, early.seq)

    def stamps(path: Path, *args: str) -> dict[str, object]:
        result = CliRunner().invoke(main, ["verify", str(path), "--json", *args])
        return next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "timestamps")

    good = stamps(archive, "--tsa-cert", str(root_ca))
    assert good["status"] == "PASS", good
    assert f"locked no later than {registration['gen_time']}" in str(good["reason"])
    assert early.body["gen_time"] < registration["gen_time"]

    events = [
        json.loads(line)["envelope"]
        for line in (archive / "ledger" / "events.jsonl").read_bytes().splitlines()
    ]
    doctored = tmp_path / "doctored"
    shutil.copytree(archive, doctored)
    changed = [
        dict(e, body={**e["body"], "gen_time": "2020-01-01T00:00:00Z"})
        if e["seq"] == early.seq
        else e
        for e in events
    ]
    resign(doctored, changed, key=key)
    bad = stamps(doctored, "--tsa-cert", str(root_ca))
    assert bad["status"] == "FAIL", bad
    assert "gen_time '2020-01-01T00:00:00Z' is not the token's" in str(bad["reason"])

    removed = tmp_path / "removed"
    shutil.copytree(archive, removed)
    resign(removed, [e for e in events if e["kind"] != "checkpoint.timestamped"], key=key)
    gone = stamps(removed)  # no --tsa-cert: a declared token that is missing still fails
    assert gone["status"] == "FAIL", gone
    assert "declared a time-stamping authority, but the registration checkpoint" in str(
        gone["reason"]
    )


def recorded_after(root: Path, seq: int) -> tuple[bytes, bytes, dict[str, object]]:
    """(token, checkpoint text, body) of the first checkpoint.timestamped event after ``seq``."""
    with Ledger.open(root / "ledger.db", readonly=True) as log:
        event = next(e for e in log.events("checkpoint.timestamped") if e.seq > seq)
        token = log.blob(event.blobs["token"])
        note = next(cp.note for cp in log.checkpoints() if cp.size == event.body["size"])
    return token, (note.partition("\n\n")[0] + "\n").encode(), dict(event.body)
