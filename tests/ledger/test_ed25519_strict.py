"""The service's Ed25519 check (libsodium) accepts nothing the verifier refuses.

docs/service.md §7: ``ledger serve`` checks the signatures of the envelopes sent to it with
libsodium (:meth:`ledger.VerifierKey.verify_strict`, PyNaCl), which costs about half of
OpenSSL's check. Two Ed25519 implementations differ at the edges (small-order keys and R
values, non-canonical encodings, S at or above the group order, cofactored equations), so
this pins, over every edge vector of three public sets (``tests/vectors/ed25519-edges.json``:
Wycheproof with the RFC 8032 section 7.1 vectors, C2SP CCTV's complete set of point edge
cases, and the "Taming the many EdDSAs" cases), that whatever the service accepts the
independent verifier (``verify/``, its own code over OpenSSL) accepts too, both where it
checks an envelope's signature and where it checks a note's; that the service refuses every
small-order or non-canonical point and every S out of range; and that honest signatures
pass both.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ledger import SigningKey, VerifierKey
from verify._errors import KeyFormatError
from verify._ledgerfile import _signature_problem
from verify._note import parse_vkey

VECTORS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent.parent / "vectors" / "ed25519-edges.json").read_text()
)["vectors"]

#: Ed25519's group order L (RFC 8032 section 5.1): an encoded S must be below it.
ORDER = 2**252 + 27742317777372353535851937790883648493
NAME = "edge.example/key"


def _verifier_accepts(key: bytes, message: bytes, signature: bytes) -> bool:
    """verify/'s two checks of a signature by a vkey: an envelope's and a note's."""
    if len(key) != 32:
        return False
    vkey = VerifierKey(NAME, key).vkey  # only the text: verify/ parses it with its own code
    try:
        parsed = parse_vkey(vkey)
    except KeyFormatError:
        return False
    as_envelope = _signature_problem(parsed.ed25519, signature, message, 7, "edge") is None
    as_note = parsed.verify(message, signature)
    assert as_envelope == as_note, vkey
    return as_envelope


def _service_accepts(key: bytes, message: bytes, signature: bytes) -> bool:
    return len(key) == 32 and VerifierKey(NAME, key).verify_strict(message, signature)


def test_what_the_service_accepts_the_verifier_accepts() -> None:
    """One pass over the 1,075 vectors (a test per vector cost 9 s of pytest's own time);
    every vector that breaks a rule is named."""
    problems = []
    for vector in VECTORS:
        key, message, signature = (bytes.fromhex(vector[f]) for f in ("key", "msg", "sig"))
        service = _service_accepts(key, message, signature)
        if service and not _verifier_accepts(key, message, signature):
            problems.append(f"{vector['id']}: accepted by the service, refused by verify/")
        flags = vector["note"].split() if vector["id"].startswith("cctv-") else []
        if service and {"low_order_A", "low_order_R", "non_canonical_A"} & set(flags):
            problems.append(f"{vector['id']}: a small-order or non-canonical point accepted")
        if service and int.from_bytes(signature[32:], "little") >= ORDER:
            problems.append(f"{vector['id']}: an S at or above the group order accepted")
    assert problems == []


def test_the_edge_sets_hold_cases_both_accept_and_cases_only_the_verifier_accepts() -> None:
    """The table above is not vacuous: honest vectors pass both checks, and the sets hold
    signatures the verifier's OpenSSL accepts but libsodium refuses (the service is the
    stricter of the two, never the laxer)."""
    both = only_verifier = 0
    for vector in VECTORS:
        key, message, signature = (bytes.fromhex(vector[f]) for f in ("key", "msg", "sig"))
        service = _service_accepts(key, message, signature)
        verifier = _verifier_accepts(key, message, signature)
        both += service and verifier
        only_verifier += verifier and not service
    rfc8032 = [v for v in VECTORS if "draft-josefsson-eddsa-ed25519-02" in v["note"]]
    assert len(rfc8032) == 4
    for vector in rfc8032:  # RFC 8032 section 7.1, TEST 1, 2, 3 and 1024
        key, message, signature = (bytes.fromhex(vector[f]) for f in ("key", "msg", "sig"))
        assert _service_accepts(key, message, signature), vector["note"]
    assert both >= 100 and only_verifier >= 100, (both, only_verifier)


def test_honest_signatures_pass_both_and_a_flipped_bit_fails_both() -> None:
    for i in range(64):
        key = SigningKey(f"honest.example/k{i}", os.urandom(32))
        message = os.urandom(i * 13)
        signature = key.sign(message)
        public = key.verifier.public_key
        assert _service_accepts(public, message, signature)
        assert _verifier_accepts(public, message, signature)
        bit = i * 8 + (i % 8)
        flipped = bytearray(signature)
        flipped[bit // 8] ^= 1 << (bit % 8)
        assert not _service_accepts(public, message, bytes(flipped))
        assert not _verifier_accepts(public, message, bytes(flipped))
    assert not _service_accepts(public, message, signature[:63])
    assert not _service_accepts(public, message, signature + b"\0")


#: RFC 8032 section 7.1 TEST 1, 2 and 3: the secret keys (seeds) whose public keys and
#: signatures are the vectors' (Wycheproof carries them as draft-josefsson-eddsa-ed25519-02).
RFC8032_SEEDS = {
    "Test 1": "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    "Test 2": "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
    "Test 3": "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
}


def test_signing_with_libsodium_makes_openssls_bytes_and_rfc_8032s() -> None:
    """:meth:`SigningKey.sign` (libsodium) is byte for byte OpenSSL's and RFC 8032's.

    Ed25519 signing is deterministic, so changing the library that signs changes no byte of
    any envelope or note; a writer's signature is what the verifier checks with OpenSSL.
    """
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    for test, seed in RFC8032_SEEDS.items():
        (vector,) = [v for v in VECTORS if v["note"].endswith(f"ed25519-02: {test}")]
        key = SigningKey("rfc8032.example/key", bytes.fromhex(seed))
        assert key.verifier.public_key.hex() == vector["key"], test
        assert key.sign(bytes.fromhex(vector["msg"])).hex() == vector["sig"], test
    for i in range(200):
        seed = os.urandom(32)
        message = os.urandom(i * 7)
        signed = SigningKey(f"same.example/k{i % 7}", seed).sign(message)
        assert signed == Ed25519PrivateKey.from_private_bytes(seed).sign(message), i
        assert signed != SigningKey(f"same.example/k{i % 7}", seed).sign(message + b"\0")
