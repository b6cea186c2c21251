"""Ed25519 keys in the C2SP signed-note formats (vkeys, key ids, signer-key files).

A *vkey* is ``<name>+<8 hex key id>+<base64(0x01 || public key)>``; the private key file holds
``PRIVATE+KEY+<name>+<8 hex key id>+<base64(0x01 || 32-byte seed)>``, the format of
``golang.org/x/mod/sumdb/note``. The *actor id* that envelopes carry is ``<name>+<8 hex key id>``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import cast

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ledger._errors import KeyFileError
from ledger._files import os_error_advice, write_files

ALG_ED25519 = 0x01
MAX_KEY_NAME = 128
_SKEY_PREFIX = "PRIVATE+KEY+"


def check_key_name(name: str) -> str:
    """Return ``name`` if it is a valid C2SP key name, else raise :class:`KeyFileError`.

    Valid names are non-empty, at most 128 characters, with no white space, no ``+`` and no
    control characters.
    """
    if not name:
        raise KeyFileError("key name must not be empty")
    if len(name) > MAX_KEY_NAME:
        raise KeyFileError(f"key name {name[:20]!r}... is longer than {MAX_KEY_NAME} characters")
    for ch in name:
        if ch == "+" or ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F:
            raise KeyFileError(
                f"key name {name!r} must not contain white space, control characters or '+'"
            )
    return name


def key_id(name: str, public_key: bytes) -> bytes:
    """Return the 4-byte C2SP key id: SHA-256(name || 0x0A || 0x01 || public key)[:4]."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([ALG_ED25519]) + public_key).digest()[:4]


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise KeyFileError(f"{what}: invalid base64") from exc


@dataclass(frozen=True)
class VerifierKey:
    """An Ed25519 public key with its C2SP name and key id."""

    name: str
    public_key: bytes

    def __post_init__(self) -> None:
        check_key_name(self.name)
        if len(self.public_key) != 32:
            raise KeyFileError(f"key {self.name}: Ed25519 public key must be 32 bytes")

    @cached_property
    def key_id(self) -> bytes:
        """The 4-byte key id."""
        return key_id(self.name, self.public_key)

    @cached_property
    def actor(self) -> str:
        """The actor id envelopes carry: ``<name>+<8 hex key id>``."""
        return f"{self.name}+{self.key_id.hex()}"

    @cached_property
    def vkey(self) -> str:
        """The C2SP verifier key string."""
        blob = base64.b64encode(bytes([ALG_ED25519]) + self.public_key).decode()
        return f"{self.actor}+{blob}"

    @classmethod
    def parse(cls, vkey: str) -> VerifierKey:
        """Parse a C2SP vkey, checking its algorithm byte, length and key id.

        A key is immutable, so the keys parsed lately are remembered by their text (the
        service checks each envelope against its actor's registered vkey: parsing it anew
        cost about as much as half a signature check).
        """
        if cls is VerifierKey:
            return _parse_vkey(vkey)
        return cls._parse(vkey)

    @classmethod
    def _parse(cls, vkey: str) -> VerifierKey:
        vkey = vkey.strip()
        parts = vkey.split("+", 2)
        if len(parts) != 3:
            raise KeyFileError(f"malformed vkey {vkey!r}: expected <name>+<key id>+<key>")
        name, hex_id, blob = parts
        check_key_name(name)
        if len(hex_id) != 8 or hex_id != hex_id.lower():
            raise KeyFileError(f"malformed vkey {vkey!r}: key id must be 8 lowercase hex digits")
        raw = _b64decode(blob, f"vkey {vkey!r}")
        if len(raw) != 33 or raw[0] != ALG_ED25519:
            raise KeyFileError(f"vkey {vkey!r} is not an Ed25519 key (0x01 + 32 bytes)")
        key = cls(name, raw[1:])
        if key.key_id.hex() != hex_id:
            raise KeyFileError(f"vkey {vkey!r}: key id does not match the name and key")
        return key

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Return True when ``signature`` is a valid Ed25519 signature of ``message``."""
        try:
            _public(self.public_key).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True

    def verify_strict(self, message: bytes, signature: bytes) -> bool:
        """True when libsodium accepts ``signature`` of ``message``: the check of signed appends.

        ``crypto_sign_open`` of libsodium (PyNaCl) costs about half of OpenSSL's check, and is
        stricter: besides everything OpenSSL refuses (S not below the group order, R not the
        recomputed point byte for byte), it refuses small-order public keys and R values and
        non-canonical encodings of either, which no honest signer produces. So a signature it
        accepts is one the verifier (``verify/``, OpenSSL through ``cryptography``) accepts;
        ``tests/ledger/test_ed25519_strict.py`` pins that over the Wycheproof, C2SP CCTV and
        "Taming the many EdDSAs" edge vectors (docs/service.md §7).
        """
        if len(signature) != 64 or len(self.public_key) != 32:
            return False
        sign_open, refused = _sodium()
        try:
            sign_open(bytes(signature) + bytes(message), self.public_key)
        except refused:  # nacl's BadSignatureError, or its ValueError for a malformed key
            return False
        return True


@functools.lru_cache(maxsize=4096)
def _parse_vkey(vkey: str) -> VerifierKey:
    """:meth:`VerifierKey.parse`, remembered (a malformed vkey raises each time)."""
    return VerifierKey._parse(vkey)


_PUBLIC_CACHE: dict[bytes, Ed25519PublicKey] = {}


@functools.cache
def _sodium() -> tuple[Callable[[bytes, bytes], bytes], type[Exception]]:
    """Return libsodium's ``crypto_sign_open`` and the error it raises when it refuses.

    Imported on first use: PyNaCl loads a native library.
    """
    from nacl.bindings import crypto_sign_open
    from nacl.exceptions import CryptoError

    return crypto_sign_open, CryptoError


@functools.cache
def _sodium_sign() -> Callable[[bytes, bytes], bytes]:
    """Return libsodium's ``crypto_sign`` (signature then message); imported on first use."""
    from nacl.bindings import crypto_sign

    return cast("Callable[[bytes, bytes], bytes]", crypto_sign)


def _public(raw: bytes) -> Ed25519PublicKey:
    key = _PUBLIC_CACHE.get(raw)
    if key is None:
        key = Ed25519PublicKey.from_public_bytes(raw)
        _PUBLIC_CACHE[raw] = key
    return key


class SigningKey:
    """An Ed25519 private key with its C2SP name; signs envelopes and notes."""

    __slots__ = ("_secret", "_seed", "actor", "name", "verifier")

    def __init__(self, name: str, seed: bytes) -> None:
        """Build a key from its name and 32-byte seed."""
        check_key_name(name)
        if len(seed) != 32:
            raise KeyFileError(f"key {name}: Ed25519 seed must be 32 bytes")
        self.name = name
        self._seed = seed
        private = Ed25519PrivateKey.from_private_bytes(seed)
        public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self._secret = bytes(seed) + public
        """libsodium's secret key: the seed, then the public key."""
        self.verifier = VerifierKey(name, public)
        self.actor: str = self.verifier.actor
        """The actor id: ``<name>+<8 hex key id>``."""

    @classmethod
    def generate(cls, name: str) -> SigningKey:
        """Generate a fresh key from the operating system's random source."""
        return cls(name, os.urandom(32))

    @property
    def vkey(self) -> str:
        """The public C2SP verifier key."""
        return self.verifier.vkey

    @property
    def skey(self) -> str:
        """The private signer-key string (golang sumdb/note format). Keep it secret."""
        blob = base64.b64encode(bytes([ALG_ED25519]) + self._seed).decode()
        return f"{_SKEY_PREFIX}{self.actor}+{blob}"

    def sign(self, message: bytes) -> bytes:
        """Return the 64-byte Ed25519 signature of ``message``.

        Signed by libsodium (PyNaCl's ``crypto_sign``), which costs about two thirds of
        OpenSSL's signing through ``cryptography``; Ed25519 signing is deterministic (RFC 8032
        §5.1.6), so the bytes are the same whichever library makes them
        (``tests/ledger/test_ed25519_strict.py`` pins it against OpenSSL and RFC 8032 §7.1).
        """
        return _sodium_sign()(bytes(message), self._secret)[:64]

    @classmethod
    def parse(cls, skey: str, *, source: str = "key") -> SigningKey:
        """Parse a ``PRIVATE+KEY+…`` signer-key string; ``source`` names it in errors."""
        skey = skey.strip()
        if not skey.startswith(_SKEY_PREFIX):
            try:
                VerifierKey.parse(skey)
            except KeyFileError:
                raise KeyFileError(f"{source}: not a private key file") from None
            raise KeyFileError(f"{source}: not a private key file (it looks like a public vkey)")
        parts = skey[len(_SKEY_PREFIX) :].split("+", 2)
        if len(parts) != 3:
            raise KeyFileError(f"{source}: malformed private key")
        name, hex_id, blob = parts
        raw = _b64decode(blob, source)
        if len(raw) != 33 or raw[0] != ALG_ED25519:
            raise KeyFileError(f"{source}: not an Ed25519 private key")
        key = cls(name, raw[1:])
        if key.verifier.key_id.hex() != hex_id:
            raise KeyFileError(f"{source}: key id does not match the key")
        return key

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SigningKey:
        """Read a private key file written by :meth:`save`."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise KeyFileError(f"key file {p}: not found") from exc
        except IsADirectoryError as exc:
            raise KeyFileError(f"key file {p}: is a directory") from exc
        except PermissionError as exc:
            raise KeyFileError(f"key file {p}: permission denied") from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise KeyFileError(f"key file {p}: unreadable ({exc})") from exc
        return cls.parse(text, source=f"key file {p}")

    def save(self, path: str | os.PathLike[str], *, vkey: bool = False) -> Path:
        """Write the private key to a new file with mode 0600; never overwrite an existing one.

        A missing directory is created with mode 0700. With ``vkey`` the public vkey is also
        written beside it, as the same name with the suffix ``.vkey``. Either every file is
        written or none is left behind; failures raise :class:`KeyFileError` naming the file
        and what to do.
        """
        p = Path(path)
        try:
            p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise KeyFileError(f"key directory {p.parent}: {os_error_advice(exc)}") from exc
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError as exc:
            raise KeyFileError(f"key file {p} already exists; refusing to overwrite it") from exc
        except OSError as exc:
            raise KeyFileError(f"key file {p}: cannot create ({os_error_advice(exc)})") from exc
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(self.skey + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            if vkey:
                write_files({p.with_suffix(".vkey"): self.vkey + "\n"})
        except BaseException as exc:
            p.unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise KeyFileError(f"key file {p}: cannot write ({os_error_advice(exc)})") from exc
            raise
        return p


HOME_ENV = "PROMPT_LEDGER_HOME"


def user_home() -> Path:
    """The user's PROMPT Ledger directory: ``$PROMPT_LEDGER_HOME``, else ``~/.prompt-ledger``.

    Private keys live in its ``keys/`` and generated blinding secrets in its ``secrets/``:
    never inside a study folder, which gets archived and published.
    """
    home = os.environ.get(HOME_ENV)
    return Path(home) if home else Path.home() / ".prompt-ledger"


def load_verifier(value: str) -> VerifierKey:
    """Parse a vkey given inline or as ``@FILE`` / the path of a ``.vkey`` file."""
    candidate = value[1:] if value.startswith("@") else value
    if value.startswith("@") or (os.path.sep in value and Path(value).is_file()):
        try:
            candidate = Path(candidate).read_text(encoding="utf-8")
        except OSError as exc:
            raise KeyFileError(f"vkey file {candidate}: {exc.strerror}") from exc
    return VerifierKey.parse(candidate)
