"""Keys, vkeys and signed notes against the C2SP and golang sumdb/note vectors."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest

from ledger import (
    Checkpoint,
    KeyFileError,
    NoteError,
    SigningKey,
    VerifierKey,
    open_checkpoint,
    open_note,
    parse_checkpoint,
    sign_note,
)

C2SP_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
C2SP_NOTE = (
    "This is an example message.\n\n"
    "— example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuw"
    "HjG1Yu72IneyaQM=\n"
)
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
PETER_SIG = (
    "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6"
    "KE6RyyBwJnAM=\n"
)
ENOCH_SIG = (
    "— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33W"
    "Wd1RvMc+QQ=\n"
)


def test_c2sp_example_note_verifies() -> None:
    key = VerifierKey.parse(C2SP_VKEY)
    assert key.key_id.hex() == "530d903a"
    assert key.vkey == C2SP_VKEY
    note = open_note(C2SP_NOTE, [key])
    assert note.text == "This is an example message.\n"
    assert note.verified == (key,)


def test_golang_skey_reproduces_vkey_and_signature() -> None:
    signer = SigningKey.parse(PETER_SKEY)
    assert signer.vkey == PETER_VKEY
    assert signer.skey == PETER_SKEY
    assert sign_note(TEXT, [signer]) == TEXT + "\n" + PETER_SIG


def test_golang_one_known_one_unknown_key() -> None:
    peter, enoch = VerifierKey.parse(PETER_VKEY), VerifierKey.parse(ENOCH_VKEY)
    note = open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG, [peter])
    assert note.verified == (peter,)
    both = open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG, [peter, enoch])
    assert both.verified == (peter, enoch)


def test_no_known_key_is_rejected() -> None:
    with pytest.raises(NoteError, match="no verifiable signatures"):
        open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG, [])


def test_corrupted_known_signature_rejects_note() -> None:
    bad = PETER_SIG[:60] + "ABCD" + PETER_SIG[60:]
    with pytest.raises(NoteError, match="invalid signature for key PeterNeumann"):
        open_note(TEXT + "\n" + bad, [VerifierKey.parse(PETER_VKEY)])


def test_too_many_signatures() -> None:
    with pytest.raises(NoteError, match="more than 100 signatures"):
        open_note(TEXT + "\n" + PETER_SIG * 101, [VerifierKey.parse(PETER_VKEY)])
    assert open_note(TEXT + "\n" + PETER_SIG * 16, [VerifierKey.parse(PETER_VKEY)])


@pytest.mark.parametrize(
    "message",
    [
        TEXT,
        TEXT + "\n",
        TEXT + "\n" + PETER_SIG[:-1],
        "\x01" + TEXT + "\n" + PETER_SIG,
        TEXT + "\n" + "— Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSN",
        TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
    ],
    ids=["text only", "no sigs", "no final newline", "control char", "bad name", "extra line"],
)
def test_golang_malformed_notes(message: str) -> None:
    with pytest.raises(NoteError, match="malformed note"):
        open_note(message, [VerifierKey.parse(PETER_VKEY)])


def test_invalid_utf8_note() -> None:
    data = b"\xff" + (TEXT + "\n" + PETER_SIG).encode()
    with pytest.raises(NoteError, match="not valid UTF-8"):
        open_note(data, [VerifierKey.parse(PETER_VKEY)])


def test_vkey_manglings_are_rejected() -> None:
    VerifierKey.parse(PETER_VKEY)
    raw = PETER_VKEY.encode()
    for i in range(len(raw)):
        mangled = bytearray(raw)
        mangled[i] = (mangled[i] + 1) % 128
        with pytest.raises(KeyFileError):
            VerifierKey.parse(mangled.decode("latin-1"))
    for cut in range(1, len(PETER_VKEY)):
        with pytest.raises(KeyFileError):
            VerifierKey.parse(PETER_VKEY[:cut])
    with pytest.raises(KeyFileError):  # unknown algorithm, with adjusted key hash
        VerifierKey.parse("PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW")


def test_remembered_vkeys_are_the_parsed_ones_and_a_bad_one_is_refused_every_time() -> None:
    """VerifierKey.parse remembers the keys it parsed (the service checks every envelope
    against its actor's vkey): the same text gives the same key, equal to a fresh parse; a
    malformed text is refused again each time, never remembered as a key."""
    from ledger._keys import _parse_vkey

    first = VerifierKey.parse(PETER_VKEY)
    assert VerifierKey.parse(PETER_VKEY) is first
    assert first == VerifierKey._parse(PETER_VKEY) and first.vkey == PETER_VKEY
    assert VerifierKey.parse(f" {PETER_VKEY}\n") == first  # white space around it, as before
    bad = PETER_VKEY[:-2] + "AA"
    for _ in range(2):
        with pytest.raises(KeyFileError):
            VerifierKey.parse(bad)
    assert _parse_vkey.cache_info().currsize >= 2 and _parse_vkey.cache_info().maxsize == 4096


def test_key_file_is_0600_and_never_overwritten(tmp_path: Path) -> None:
    key = SigningKey.generate("example.org/owner")
    path = key.save(tmp_path / "owner.key")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert SigningKey.load(path).vkey == key.vkey
    with pytest.raises(KeyFileError, match="already exists"):
        SigningKey.generate("other").save(path)
    assert SigningKey.load(path).vkey == key.vkey


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (PETER_VKEY + "\n", "looks like a public vkey"),
        ("hello\n", "not a private key file"),
        ("PRIVATE+KEY+a+00000000+!!!!\n", "invalid base64"),
        (PETER_SKEY.replace("c74f20a3", "c74f20a4") + "\n", "key id does not match"),
    ],
)
def test_bad_key_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "k.key"
    path.write_text(content)
    with pytest.raises(KeyFileError, match=message):
        SigningKey.load(path)


def test_missing_key_file(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="not found"):
        SigningKey.load(tmp_path / "none.key")


@pytest.mark.parametrize("name", ["", "a b", "a+b", "tab\there", "x" * 129])
def test_bad_key_names(name: str) -> None:
    with pytest.raises(KeyFileError):
        SigningKey.generate(name)


def test_checkpoint_round_trip_with_cosigner_and_extensions() -> None:
    log_key = SigningKey.generate("example.org/log")
    witness = SigningKey.generate("example.org/witness")
    cp = Checkpoint("example.org/log", 42, bytes(range(32)), ("ext line",))
    note = cp.sign([log_key, witness])
    parsed, raw = parse_checkpoint(note)
    assert parsed == cp and len(raw.signatures) == 2
    opened, opened_note = open_checkpoint(note, [log_key.verifier])
    assert opened == cp and opened_note.verified == (log_key.verifier,)
    root_line = base64.b64encode(bytes(range(32))).decode()
    assert note.startswith(f"example.org/log\n42\n{root_line}\next line\n\n— example.org/log ")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("origin\n", "expected origin, size and root"),
        ("origin\n012\nAAAA\n", "not a decimal number"),
        ("origin\n12\n!!!\n", "not base64"),
        ("origin\n12\nAAAA\n", "not 32 bytes"),
        ("\n12\n" + base64.b64encode(bytes(32)).decode() + "\n", "empty origin"),
    ],
)
def test_malformed_checkpoints(text: str, message: str) -> None:
    key = SigningKey.generate("k")
    with pytest.raises(NoteError, match=message):
        parse_checkpoint(sign_note(text, [key]))
