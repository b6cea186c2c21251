"""Sealed blobs: a salted, hiding and binding commitment to a blob (``docs/ledger-format.md`` §6.1).

A *sealed blob* is stored as ``MAGIC || salt || content`` (``MAGIC`` is 8 bytes, ``salt`` 32
random bytes); like every blob it is addressed by the SHA-256 of its stored bytes, so the
address an envelope names is ``SHA-256(MAGIC || salt || content)``: binding (SHA-256 collision
resistance) and hiding (256 unknown salt bits: trying every candidate content matches nothing
without the salt). The envelope format and the stores are unchanged; only readers unwrap.

Which blobs are sealed is the locked privacy policy's choice (``protocol.locked`` ``privacy``,
``docs/privacy.md``): :class:`SealPolicy` seals, before they are stored, the blobs of every
event its ``withhold`` list names by ``kind:blob name``, and writes a body member
``<name>_sha256`` that mirrors such a blob's content hash as the blob's commitment instead.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ledger._errors import FormatError

__all__ = [
    "MAGIC",
    "SALT_BYTES",
    "SealPolicy",
    "commitment",
    "is_sealed",
    "open_blob",
    "seal",
    "split_sealed",
]

MAGIC = b"\x00PLSEAL\n"
"""The 8 bytes that begin every sealed blob (a NUL first: no JSON, CSV, text or image does)."""

SALT_BYTES = 32
"""Salt length in bytes (256 bits; the format requires at least 128)."""

_HEADER = len(MAGIC) + SALT_BYTES


def seal(content: bytes, salt: bytes | None = None) -> bytes:
    """The stored bytes of ``content`` sealed with ``salt`` (32 fresh random bytes by default)."""
    if salt is None:
        salt = os.urandom(SALT_BYTES)
    if len(salt) != SALT_BYTES:
        raise FormatError(f"a sealed blob's salt is {SALT_BYTES} bytes, not {len(salt)}")
    return MAGIC + salt + bytes(content)


def is_sealed(stored: bytes) -> bool:
    """Whether stored blob bytes are a sealed blob (they begin with :data:`MAGIC`)."""
    return len(stored) >= _HEADER and stored[: len(MAGIC)] == MAGIC


def split_sealed(stored: bytes) -> tuple[bytes, bytes]:
    """``(salt, content)`` of a sealed blob; :class:`FormatError` for anything else."""
    if not is_sealed(stored):
        raise FormatError("not a sealed blob (it does not begin with the sealed-blob magic)")
    return stored[len(MAGIC) : _HEADER], stored[_HEADER:]


def open_blob(stored: bytes) -> bytes:
    """The content of stored blob bytes: a sealed blob's content, any other blob as it is."""
    return stored[_HEADER:] if is_sealed(stored) else stored


def commitment(content: bytes, salt: bytes) -> str:
    """The address (hex SHA-256) of ``content`` sealed with ``salt``."""
    return hashlib.sha256(seal(content, salt)).hexdigest()


@dataclass(frozen=True)
class SealPolicy:
    """The blobs a locked privacy policy seals, as ``(kind, blob name)`` pairs.

    ``roles`` are the roles of locked files it withholds: those are not sealed (a locked file is
    committed by its plain SHA-256 in ``protocol.locked``'s manifest, ``docs/privacy.md``), only
    left out of a public archive.
    """

    blobs: frozenset[tuple[str, str]] = frozenset()
    roles: frozenset[str] = frozenset()

    @classmethod
    def from_protocol(cls, body: Mapping[str, Any]) -> SealPolicy:
        """The policy of a ``protocol.locked`` body (none when it has no ``privacy`` member)."""
        privacy = body.get("privacy")
        if not isinstance(privacy, Mapping):
            return cls()
        return cls.from_entries(privacy.get("withhold") or ())

    @classmethod
    def from_entries(cls, entries: Any) -> SealPolicy:
        """The policy of a ``withhold`` list of ``"kind:blob"`` strings (already validated)."""
        blobs: set[tuple[str, str]] = set()
        roles: set[str] = set()
        for entry in entries:
            kind, _, name = str(entry).partition(":")
            if kind == "artifact.locked":
                roles.add(name)
            else:
                blobs.add((kind, name))
        return cls(frozenset(blobs), frozenset(roles))

    def __bool__(self) -> bool:
        return bool(self.blobs or self.roles)

    def names(self, kind: str, body: Mapping[str, Any]) -> frozenset[str]:
        """The blob names of an event of ``kind`` with ``body`` that the policy seals."""
        return frozenset(name for k, name in self.blobs if k == kind)

    def seal_now(self, kind: str, name: str, data: bytes) -> bytes:
        """``data`` sealed when the policy names blob ``name`` of ``kind``, else as it is.

        For a writer that records a blob's address in a body before appending it: the address
        of the bytes returned is what the ledger will store.
        """
        if (kind, name) in self.blobs and not is_sealed(data):
            return seal(data)
        return data

    def apply(
        self, kind: str, body: Mapping[str, Any], blobs: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(body, blobs)`` with every blob the policy names sealed (bytes not yet sealed).

        A blob given by address (a stored blob's SHA-256) is left as it is. A body member
        ``<name>_sha256`` holding the SHA-256 of a blob sealed here becomes its commitment, so
        the body does not publish the content's plain hash.
        """
        names = self.names(kind, body) & set(blobs)
        if not names:
            return dict(body), dict(blobs)
        out_blobs = dict(blobs)
        out_body = dict(body)
        for name in names:
            value = blobs[name]
            if not isinstance(value, bytes | bytearray | memoryview):
                continue
            data = bytes(value)
            if is_sealed(data):
                continue
            sealed = seal(data)
            out_blobs[name] = sealed
            member = f"{name}_sha256"
            if out_body.get(member) == hashlib.sha256(data).hexdigest():
                out_body[member] = hashlib.sha256(sealed).hexdigest()
        return out_body, out_blobs
