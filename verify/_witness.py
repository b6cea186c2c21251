"""Witness cosignatures on checkpoints, from c2sp.org/tlog-cosignature and docs/witness.md.

Written from the specs alone (the verifier shares no code with ``ledger/witness.py``):

* A cosigner vkey is ``<name>+<8 hex key id>+<base64(0x04 || 32-byte Ed25519 public key)>``,
  with key id = ``SHA-256(<name> || 0x0A || 0x04 || public key)[:4]``.
* A cosignature is a note signature line whose bytes after the key id are an 8-byte big-endian
  POSIX timestamp and a 64-byte Ed25519 signature over
  ``cosignature/v1\\ntime <timestamp>\\n`` followed by the checkpoint's note text.
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

__all__ = ["ALG_COSIGNATURE_V1", "CosignerKey", "parse_cosigner_vkey"]

ALG_COSIGNATURE_V1 = 0x04
_HEX8 = re.compile(r"[0-9a-f]{8}")


@dataclass(frozen=True)
class CosignerKey:
    """A witness's cosigning key (tlog-cosignature, Ed25519 cosignature/v1)."""

    name: str
    key_id: int
    public_key: bytes
    text: str

    def verify(self, checkpoint_text: str, sig: NoteSignature) -> int | None:
        """The timestamp of ``sig`` on ``checkpoint_text`` if it is this key's cosignature.

        None when the line names another key (name or key id differ). Raises ``ValueError``
        naming the problem when it is this key's line but malformed or not verifying.
        """
        if sig.name != self.name or sig.key_id != self.key_id:
            return None
        if len(sig.signature) != 8 + 64:
            raise ValueError(f"cosignature of {self.name} has {4 + len(sig.signature)} bytes, "
                             "not 76 (key id, timestamp, Ed25519 signature)")
        timestamp = int.from_bytes(sig.signature[:8], "big")
        if timestamp >= 2**63:
            raise ValueError(f"cosignature of {self.name}: timestamp beyond 2^63-1")
        message = f"cosignature/v1\ntime {timestamp}\n{checkpoint_text}".encode()
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(sig.signature[8:], message)
        except InvalidSignature:
            raise ValueError(f"the cosignature of {self.name} does not verify") from None
        return timestamp


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
    if len(key) != 33 or key[0] != ALG_COSIGNATURE_V1:
        raise KeyFormatError(
            f"invalid witness vkey {text!r}: not an Ed25519 cosignature/v1 key (type 0x04 and "
            "32 bytes)"
        )
    digest = hashlib.sha256(name.encode() + b"\n" + key).digest()
    if int.from_bytes(digest[:4], "big") != int(id_hex, 16):
        raise KeyFormatError(f"invalid witness vkey {text!r}: key id does not match the key")
    return CosignerKey(name, int(id_hex, 16), key[1:], text)
