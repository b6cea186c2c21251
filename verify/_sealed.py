"""Sealed blobs, read as ``docs/ledger-format.md`` §6.1 defines them (no writer code).

A sealed blob's stored bytes are ``MAGIC || salt (32 bytes) || content``; its address is the
SHA-256 of those bytes, like any blob's. A check that compares a re-derived content with a
recorded address computes the address the same way, with the salt of the stored blob.
"""

from __future__ import annotations

import hashlib

__all__ = ["MAGIC", "SALT_BYTES", "address_for", "content_of", "salt_of"]

MAGIC = b"\x00PLSEAL\n"
SALT_BYTES = 32
_HEADER = len(MAGIC) + SALT_BYTES


def salt_of(stored: bytes | None) -> bytes | None:
    """The salt of stored blob bytes when they are a sealed blob, else ``None``."""
    if stored is None or len(stored) < _HEADER or not stored.startswith(MAGIC):
        return None
    return stored[len(MAGIC) : _HEADER]


def content_of(stored: bytes) -> bytes:
    """The content of stored blob bytes: after the header of a sealed blob, else all of them."""
    return stored[_HEADER:] if salt_of(stored) is not None else stored


def address_for(content: bytes, stored: bytes | None) -> str:
    """The address ``content`` has when stored like ``stored`` (sealed with its salt, or plain)."""
    salt = salt_of(stored)
    if salt is None:
        return hashlib.sha256(content).hexdigest()
    return hashlib.sha256(MAGIC + salt + content).hexdigest()
