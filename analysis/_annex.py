"""The sealed annex of a public archive and the auditors' keys (``docs/privacy.md`` §4).

The annex holds what a public export withheld — every withheld blob as stored (a sealed blob
with its salt) and every withheld file with the salt of its commitment — encrypted to one or
more auditors:

- a random 32-byte *file key* encrypts the payload with ChaCha20-Poly1305 (RFC 8439; a random
  12-byte nonce; the header as associated data);
- the file key is sealed to each auditor with HPKE (RFC 9180, base mode, single shot):
  DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305, ``info`` = the header bytes.

The header binds the annex to one export of one study: ``{"annex": "prompt-ledger annex v1",
"study", "origin", "export_seq", "export_leaf_hash"}`` as RFC 8785 canonical JSON. The annex
file is the canonical JSON of ``{"header": <header>, "recipients": [{"auditor", "public_key",
"sealed_key"}], "nonce", "ciphertext"}`` (bytes in standard base64) and a newline.

Auditor keys are X25519: the private key file is one line ``AUDITOR-SECRET-KEY+<name>+<base64
of 32 bytes>`` (mode 0600), the public key one line ``<name>+x25519+<base64 of 32 bytes>``.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hpke
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from ledger import OutputError, canonical_json, describe_os_error
from runner import StudyError

__all__ = [
    "ANNEX_MAGIC",
    "AuditorKey",
    "generate_auditor_key",
    "read_auditor_public_key",
    "write_annex",
]

ANNEX_MAGIC = "prompt-ledger annex v1"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
_SUITE = hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.CHACHA20_POLY1305)
MAX_KEY_FILE = 4096


@dataclass(frozen=True)
class AuditorKey:
    """An auditor's X25519 public key and name."""

    name: str
    public: bytes

    @property
    def text(self) -> str:
        """The public key line ``<name>+x25519+<base64>``."""
        return f"{self.name}+x25519+{base64.b64encode(self.public).decode('ascii')}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def read_auditor_public_key(path: str | Path) -> AuditorKey:
    """Parse an auditor's public key file; :class:`StudyError` naming the file otherwise."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_KEY_FILE + 1)
    except OSError as exc:
        raise StudyError(f"auditor key: {describe_os_error(exc, path)}") from None
    text = raw.decode("ascii", "replace").strip()
    parts = text.split("+", 2)  # base64 may hold '+'
    if len(raw) > MAX_KEY_FILE or len(parts) != 3 or parts[1] != "x25519":
        raise StudyError(
            f"{path}: not an auditor public key (one line <name>+x25519+<base64>; make one "
            "with 'ledger auditor-key NAME DIR')"
        )
    name, _, encoded = parts
    try:
        public = base64.b64decode(encoded, validate=True)
    except ValueError:
        public = b""
    if not _NAME.match(name) or len(public) != 32:
        raise StudyError(f"{path}: the auditor key's name or 32-byte X25519 key is malformed")
    return AuditorKey(name, public)


def generate_auditor_key(name: str, directory: str | Path) -> tuple[Path, Path]:
    """Write ``<name>.x25519`` (secret, 0600) and ``<name>.x25519.pub`` into ``directory``.

    Existing files are never overwritten. Returns (secret path, public path).
    """
    if not _NAME.match(name):
        raise StudyError(f"auditor name {name!r}: letters, digits, '.', '_', '@', '-' only")
    directory = Path(directory)
    secret_path, public_path = directory / f"{name}.x25519", directory / f"{name}.x25519.pub"
    key = X25519PrivateKey.generate()
    secret = key.private_bytes_raw()
    public = AuditorKey(name, key.public_key().public_bytes_raw())
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(secret_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(f"AUDITOR-SECRET-KEY+{name}+{_b64(secret)}\n")
        fd = os.open(public_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(public.text + "\n")
    except FileExistsError as exc:
        raise StudyError(f"{exc.filename} exists; an auditor key is never overwritten") from None
    except OSError as exc:
        raise OutputError(f"cannot write the auditor key: {describe_os_error(exc)}") from None
    return secret_path, public_path


def annex_bytes(
    header: Mapping[str, Any],
    payload: Mapping[str, Any],
    auditors: list[AuditorKey],
) -> bytes:
    """The annex file: ``payload`` (canonical JSON) encrypted to every auditor."""
    if not auditors:
        raise StudyError("a public export needs at least one --auditor public key for its annex")
    head = canonical_json(dict(header))
    file_key = os.urandom(32)
    nonce = os.urandom(12)
    ciphertext = ChaCha20Poly1305(file_key).encrypt(nonce, canonical_json(dict(payload)), head)
    recipients = [
        {
            "auditor": a.name,
            "public_key": _b64(a.public),
            "sealed_key": _b64(
                _SUITE.encrypt(file_key, X25519PublicKey.from_public_bytes(a.public), info=head)
            ),
        }
        for a in auditors
    ]
    document = {
        "header": dict(header),
        "recipients": recipients,
        "nonce": _b64(nonce),
        "ciphertext": _b64(ciphertext),
    }
    return canonical_json(document) + b"\n"


def write_annex(path: Path, data: bytes) -> None:
    """Write the annex file (mode 0600, never over an existing file)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except FileExistsError:
        raise StudyError(f"{path} exists; choose another annex file") from None
    except OSError as exc:
        raise OutputError(f"cannot write the annex: {describe_os_error(exc, path)}") from None
