"""C2SP signed-note and golang.org/x/mod/sumdb/note vectors: verify's notes, vkeys, checkpoints."""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from verify import (
    MAX_NOTE_SIGNATURES,
    AmbiguousKeyError,
    CheckpointFormatError,
    InvalidSignatureError,
    KeyFormatError,
    MalformedNoteError,
    NoteError,
    UnverifiedNoteError,
    VerificationError,
    Vkey,
    compute_key_id,
    open_checkpoint,
    open_note,
    parse_checkpoint,
    parse_vkey,
)

# c2sp.org/signed-note example key and note
C2SP_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
C2SP_NOTE = (
    "This is an example message.\n\n"
    "\u2014 example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3m"
    "FXmRKuwHjG1Yu72IneyaQM=\n"
)

# golang.org/x/mod sumdb/note/note_test.go
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
PETER_SIG = (
    "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdng"
    "otpRZb6KE6RyyBwJnAM=\n"
)
ENOCH_SIG = (
    "\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwn"
    "WLox33WWd1RvMc+QQ=\n"
)


@pytest.fixture
def peter() -> Vkey:
    return parse_vkey(PETER_VKEY)


@pytest.fixture
def enoch() -> Vkey:
    return parse_vkey(ENOCH_VKEY)


# ------------------------------------------------------------------------------------------ vkeys


def test_parse_vkey_fields(peter: Vkey) -> None:
    assert peter.name == "PeterNeumann"
    assert peter.key_id == 0xC74F20A3
    assert peter.actor == "PeterNeumann+c74f20a3"
    assert peter.text == PETER_VKEY == str(peter)
    assert len(peter.public_key) == 32
    assert compute_key_id(peter.name, b"\x01" + peter.public_key) == peter.key_id


@pytest.mark.parametrize("vkey", [PETER_VKEY, ENOCH_VKEY, C2SP_VKEY])
def test_every_proper_substring_of_a_vkey_is_rejected(vkey: str) -> None:
    parse_vkey(vkey)
    for i in range(len(vkey) + 1):
        for j in range(i + 1, len(vkey) + 1):
            if (i, j) != (0, len(vkey)):
                with pytest.raises(KeyFormatError, match="invalid vkey"):
                    parse_vkey(vkey[i:j])


@pytest.mark.parametrize("vkey", [PETER_VKEY, ENOCH_VKEY, C2SP_VKEY])
def test_every_changed_byte_of_a_vkey_is_rejected(vkey: str) -> None:
    raw = bytearray(vkey.encode())
    for i in range(len(raw)):
        raw[i] += 1
        with pytest.raises(KeyFormatError, match="invalid vkey"):
            parse_vkey(raw.decode("latin-1"))
        raw[i] -= 1


@pytest.mark.parametrize(
    ("vkey", "reason"),
    [
        (
            # golang: wrong key length; here its non-canonical base64 already fails
            "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",
            "not valid base64",
        ),
        ("PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", "unknown algorithm"),
        ("PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", "does not match"),
        ("PeterNeumann+C74F20A3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", "lowercase hex"),
        ("Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", "bad key name"),
        ("+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", "bad key name"),
        (PETER_VKEY + "\n", "not valid base64"),
        ("", "bad key name"),
    ],
)
def test_bad_vkeys(vkey: str, reason: str) -> None:
    with pytest.raises(KeyFormatError, match=reason):
        parse_vkey(vkey)


def _vkey_for(name: str, raw: bytes) -> str:
    key_id = compute_key_id(name, raw)
    return f"{name}+{key_id:08x}+{base64.b64encode(raw).decode()}"


def test_unknown_algorithm_and_wrong_length_with_matching_key_id() -> None:
    pub = parse_vkey(PETER_VKEY).public_key
    with pytest.raises(KeyFormatError, match="unknown algorithm 0x02"):
        parse_vkey(_vkey_for("PeterNeumann", b"\x02" + pub))
    with pytest.raises(KeyFormatError, match="must be 32 bytes"):
        parse_vkey(_vkey_for("PeterNeumann", b"\x01" + pub + b"\x00"))
    with pytest.raises(KeyFormatError, match="must be 32 bytes"):
        parse_vkey(_vkey_for("PeterNeumann", b"\x01" + pub[:31]))
    with pytest.raises(KeyFormatError, match="bad key name"):
        parse_vkey(_vkey_for("x" * 129, b"\x01" + pub))
    parse_vkey(_vkey_for("x" * 128, b"\x01" + pub))


def test_key_errors_are_verification_errors() -> None:
    assert issubclass(KeyFormatError, VerificationError)
    assert issubclass(MalformedNoteError, NoteError)
    assert issubclass(NoteError, VerificationError)


# ------------------------------------------------------------------------------------------ notes


def test_c2sp_example_note_verifies() -> None:
    key = parse_vkey(C2SP_VKEY)
    note = open_note(C2SP_NOTE, [key])
    assert note.text == "This is an example message.\n"
    assert note.verified_by == (key,)
    assert [s.key_label for s in note.verified] == ["example.com/foo+530d903a"]
    assert note.unverified == ()


def test_open_one_known_one_unknown(peter: Vkey) -> None:
    note = open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG, [peter])
    assert note.text == TEXT
    assert [s.key_label for s in note.verified] == ["PeterNeumann+c74f20a3"]
    assert [s.key_label for s in note.unverified] == ["EnochRoot+af0cfe78"]


def test_open_both_known(peter: Vkey, enoch: Vkey) -> None:
    note = open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG, [peter, enoch])
    assert note.verified_by == (peter, enoch)
    assert note.unverified == ()


def test_open_accepts_bytes(peter: Vkey) -> None:
    note = open_note((TEXT + "\n" + PETER_SIG).encode(), [peter])
    assert note.text == TEXT


def test_no_known_key_is_an_error(peter: Vkey) -> None:
    with pytest.raises(UnverifiedNoteError, match="no verifiable signatures"):
        open_note(TEXT + "\n" + PETER_SIG + ENOCH_SIG, [])
    with pytest.raises(UnverifiedNoteError, match=r"EnochRoot\+af0cfe78"):
        open_note(TEXT + "\n" + ENOCH_SIG, [peter])


def test_same_name_or_same_id_but_not_both_is_unknown(peter: Vkey) -> None:
    renamed = PETER_SIG.replace("PeterNeumann", "PeterNeuman")
    with pytest.raises(UnverifiedNoteError):
        open_note(TEXT + "\n" + renamed, [peter])


def test_duplicate_known_key_is_ambiguous_only_when_keys_differ(peter: Vkey) -> None:
    assert open_note(TEXT + "\n" + PETER_SIG, [peter, peter, parse_vkey(PETER_VKEY)]).verified
    impostor = Vkey(
        name=peter.name,
        key_id=peter.key_id,
        public_key=parse_vkey(ENOCH_VKEY).public_key,
        _key=parse_vkey(ENOCH_VKEY).ed25519,
    )
    with pytest.raises(AmbiguousKeyError, match=r"ambiguous key PeterNeumann\+c74f20a3"):
        open_note(TEXT + "\n" + PETER_SIG, [peter, impostor])


def test_too_many_signatures_is_malformed(peter: Vkey) -> None:
    assert MAX_NOTE_SIGNATURES == 100
    with pytest.raises(MalformedNoteError, match="malformed note"):
        open_note(TEXT + "\n" + PETER_SIG * 101, [peter])
    with pytest.raises(MalformedNoteError, match="more than 100"):
        open_note(TEXT + "\n" + PETER_SIG * 101, [])
    assert open_note(TEXT + "\n" + PETER_SIG * 100, [peter]).verified
    assert open_note(TEXT + "\n" + PETER_SIG * 16, [peter]).verified


def test_corrupted_known_signature_is_invalid(peter: Vkey) -> None:
    bad = PETER_SIG[:60] + "ABCD" + PETER_SIG[60:]
    with pytest.raises(
        InvalidSignatureError, match=r"invalid signature for key PeterNeumann\+c74f20a3"
    ):
        open_note(TEXT + "\n" + bad, [peter])
    # a bad signature of a known key poisons the note even next to a good one
    with pytest.raises(InvalidSignatureError, match="invalid signature"):
        open_note(TEXT + "\n" + PETER_SIG + bad, [peter])


def test_corrupted_unknown_signature_is_ignored(peter: Vkey) -> None:
    bad_enoch = ENOCH_SIG[:60] + "ABCD" + ENOCH_SIG[60:]
    note = open_note(
        TEXT + "\n" + PETER_SIG + PETER_SIG + ENOCH_SIG + ENOCH_SIG + bad_enoch, [peter]
    )
    assert len(note.verified) == 1
    assert len(note.unverified) == 2


def test_changed_text_is_invalid(peter: Vkey) -> None:
    with pytest.raises(InvalidSignatureError, match="invalid signature"):
        open_note(TEXT.replace("problem", "Problem", 1) + "\n" + PETER_SIG, [peter])


MALFORMED = [
    pytest.param(TEXT.encode(), id="text only"),
    pytest.param((TEXT + "\n").encode(), id="text and blank line"),
    pytest.param((TEXT + "\n" + PETER_SIG[:-1]).encode(), id="last line without newline"),
    pytest.param(("\x01" + TEXT + "\n" + PETER_SIG).encode(), id="leading control"),
    pytest.param(b"\xff" + (TEXT + "\n" + PETER_SIG).encode(), id="leading 0xff"),
    pytest.param(
        (
            TEXT
            + "\n"
            + "\u2014 Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXg"
            "Kvqfq"
            "dngotpRZb6KE6RyyBwJnAM="
        ).encode(),
        id="bad name",
    ),
    pytest.param((TEXT + "\n" + PETER_SIG + "Unexpected line.\n").encode(), id="unexpected line"),
    pytest.param((TEXT + "\n" + "- PeterNeumann AAAAAAA=\n").encode(), id="hyphen not em dash"),
    pytest.param((TEXT + "\n" + "\u2014 PeterNeumann AAAA\n").encode(), id="short signature"),
    pytest.param((TEXT + "\n" + "\u2014 PeterNeumann\n").encode(), id="no signature"),
    pytest.param((TEXT + "\r\n" + PETER_SIG).encode(), id="carriage return"),
]


@pytest.mark.parametrize("msg", MALFORMED)
def test_malformed_notes(msg: bytes, peter: Vkey) -> None:
    with pytest.raises(MalformedNoteError, match="malformed note"):
        open_note(msg, [peter])


def test_malformed_str_with_lone_surrogate(peter: Vkey) -> None:
    with pytest.raises(MalformedNoteError, match="not valid UTF-8"):
        open_note("\udc80" + TEXT + "\n" + PETER_SIG, [peter])


# ------------------------------------------------------------------------------------ checkpoints


def _sign(text: str, name: str, priv: Ed25519PrivateKey) -> str:
    pub = priv.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    key_id = compute_key_id(name, b"\x01" + pub)
    sig = base64.b64encode(key_id.to_bytes(4, "big") + priv.sign(text.encode())).decode()
    return f"{text}\n\u2014 {name} {sig}\n"


def _key(name: str) -> tuple[Ed25519PrivateKey, Vkey]:
    seed = hashlib.sha256(f"verify test key {name}".encode()).digest()
    priv = Ed25519PrivateKey.from_private_bytes(seed)
    pub = priv.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return priv, parse_vkey(_vkey_for(name, b"\x01" + pub))


ROOT = hashlib.sha256(b"root").digest()
ROOT64 = base64.b64encode(ROOT).decode()


def test_parse_checkpoint() -> None:
    cp = parse_checkpoint(f"example.org/log\n120\n{ROOT64}\n")
    assert cp == ("example.org/log", 120, ROOT, ())
    origin, size, root, ext = parse_checkpoint(f"o\n0\n{ROOT64}\next one\nx\n")
    assert (origin, size, root, ext) == ("o", 0, ROOT, ("ext one", "x"))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (f"o\n120\n{ROOT64}", "does not end with a newline"),
        ("o\n120\n", "needs origin, size and root"),
        (f"\n120\n{ROOT64}\n", "empty origin"),
        (f"o\n0120\n{ROOT64}\n", "leading zeros"),
        (f"o\n-1\n{ROOT64}\n", "decimal"),
        (f"o\n1 2\n{ROOT64}\n", "decimal"),
        (f"o\n{1 << 64}\n{ROOT64}\n", "decimal"),
        ("o\n1\nnot base64!\n", "not valid base64"),
        (f"o\n1\n{base64.b64encode(ROOT[:31]).decode()}\n", "31 bytes, not 32"),
        (f"o\n1\n{ROOT64}\n\nx\n", "empty extension line"),
    ],
)
def test_bad_checkpoints(text: str, reason: str) -> None:
    with pytest.raises(CheckpointFormatError, match=reason):
        parse_checkpoint(text)


def test_open_checkpoint_round_trip() -> None:
    priv, vkey = _key("example.org/owner")
    other_priv, _ = _key("witness.example/w1")
    body = f"example.org/ledger\n3\n{ROOT64}\n"
    note = _sign(body, "example.org/owner", priv)
    witnessed = note + _sign(body, "witness.example/w1", other_priv).split("\n\n")[1]
    opened, cp = open_checkpoint(witnessed, [vkey])
    assert cp.size == 3 and cp.root == ROOT and cp.origin == "example.org/ledger"
    assert opened.verified_by == (vkey,)
    assert [s.name for s in opened.unverified] == ["witness.example/w1"]
