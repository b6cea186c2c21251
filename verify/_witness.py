"""Witness cosignatures on checkpoints, from c2sp.org/tlog-cosignature and docs/witness.md.

Written from the specs alone (the verifier shares no code with ``ledger/witness.py``):

* A cosigner vkey is ``<name>+<8 hex key id>+<base64(type || public key)>``, type 0x04 with a
  32-byte Ed25519 key or 0x06 with a 1312-byte ML-DSA-44 key, with key id =
  ``SHA-256(<name> || 0x0A || type || public key)[:4]``.
* A cosignature is a note signature line whose bytes after the key id are an 8-byte big-endian
  POSIX timestamp and the signature: Ed25519 (64 bytes) over
  ``cosignature/v1\\ntime <timestamp>\\n`` followed by the checkpoint's note text, or ML-DSA-44
  (2420 bytes) over ``"subtree/v1\\n\\0"``, the one-byte-length-prefixed cosigner name, the
  timestamp, the one-byte-length-prefixed origin, start 0 and end = size (u64 each) and the
  32-byte root (tlog-cosignature 1.1).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from verify._errors import KeyFormatError
from verify._note import NoteSignature, is_valid_key_name

__all__ = ["ALG_COSIGNATURE_MLDSA44", "ALG_COSIGNATURE_V1", "CosignerKey", "parse_cosigner_vkey"]

ALG_COSIGNATURE_V1 = 0x04
ALG_COSIGNATURE_MLDSA44 = 0x06
_SIZES = {ALG_COSIGNATURE_V1: (32, 64), ALG_COSIGNATURE_MLDSA44: (1312, 2420)}
_HEX8 = re.compile(r"[0-9a-f]{8}")


@dataclass(frozen=True)
class CosignerKey:
    """A witness's cosigning key (tlog-cosignature, Ed25519 cosignature/v1)."""

    name: str
    key_id: int
    public_key: bytes
    text: str
    alg: int = ALG_COSIGNATURE_V1

    def verify(self, checkpoint_text: str, sig: NoteSignature) -> int | None:
        """The timestamp of ``sig`` on ``checkpoint_text`` if it is this key's cosignature.

        None when the line names another key (name or key id differ). Raises ``ValueError``
        naming the problem when it is this key's line but malformed or not verifying.
        """
        if sig.name != self.name or sig.key_id != self.key_id:
            return None
        size = _SIZES[self.alg][1]
        if len(sig.signature) != 8 + size:
            raise ValueError(
                f"cosignature of {self.name} has {4 + len(sig.signature)} bytes, "
                f"not {12 + size} (key id, timestamp, signature)"
            )
        timestamp = int.from_bytes(sig.signature[:8], "big")
        if timestamp >= 2**63:
            raise ValueError(f"cosignature of {self.name}: timestamp beyond 2^63-1")
        try:
            if self.alg == ALG_COSIGNATURE_MLDSA44:
                from cryptography.hazmat.primitives.asymmetric.mldsa import MLDSA44PublicKey

                MLDSA44PublicKey.from_public_bytes(self.public_key).verify(
                    sig.signature[8:], self._subtree_message(timestamp, checkpoint_text)
                )
            else:
                message = f"cosignature/v1\ntime {timestamp}\n{checkpoint_text}".encode()
                Ed25519PublicKey.from_public_bytes(self.public_key).verify(
                    sig.signature[8:], message
                )
        except InvalidSignature:
            raise ValueError(f"the cosignature of {self.name} does not verify") from None
        return timestamp

    def _subtree_message(self, timestamp: int, checkpoint_text: str) -> bytes:
        """tlog-cosignature, ML-DSA-44 signed message, for a checkpoint (start 0, end size)."""
        lines = checkpoint_text.split("\n")
        if len(lines) < 4:
            raise ValueError("not a checkpoint: fewer than three lines")
        origin, name = lines[0].encode(), self.name.encode()
        try:
            size, root = int(lines[1]), base64.b64decode(lines[2], validate=True)
        except (ValueError, binascii.Error):
            raise ValueError("not a checkpoint: bad size or root line") from None
        return (
            b"subtree/v1\n\0"
            + bytes([len(name)])
            + name
            + timestamp.to_bytes(8, "big")
            + bytes([len(origin)])
            + origin
            + (0).to_bytes(8, "big")
            + size.to_bytes(8, "big")
            + root
        )


def parse_cosigner_vkey(vkey: str) -> CosignerKey:
    """Parse a witness vkey (type 0x04); raise :class:`KeyFormatError` naming the problem."""
    text = vkey.strip()
    name, _, rest = text.partition("+")
    id_hex, _, key64 = rest.partition("+")
    if not is_valid_key_name(name):
        raise KeyFormatError(f"invalid witness vkey {text!r}: bad key name {name!r}")
    if not _HEX8.fullmatch(id_hex):
        raise KeyFormatError(f"invalid witness vkey {text!r}: key id must be 8 lowercase hex")
    try:
        key = base64.b64decode(key64.encode("ascii"), validate=True)
    except (ValueError, binascii.Error, UnicodeEncodeError):
        raise KeyFormatError(f"invalid witness vkey {text!r}: key is not base64") from None
    if not key or key[0] not in _SIZES or len(key) != 1 + _SIZES[key[0]][0]:
        raise KeyFormatError(
            f"invalid witness vkey {text[:80]!r}: not a cosigner key (Ed25519: type 0x04 and 32 "
            "bytes; ML-DSA-44: type 0x06 and 1312 bytes)"
        )
    digest = hashlib.sha256(name.encode() + b"\n" + key).digest()
    if int.from_bytes(digest[:4], "big") != int(id_hex, 16):
        raise KeyFormatError(f"invalid witness vkey {text!r}: key id does not match the key")
    return CosignerKey(name, int(id_hex, 16), key[1:], text, key[0])
